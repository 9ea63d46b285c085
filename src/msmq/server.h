/* server.h - the MS-MQQB door: a TCP listener (listeners.msmq) whose sessions take Windows
 * queue managers' UserMessage packets into the private queues of one vhost (msmq.vhost).
 * The codec is mqqb.h; this owns sockets, sessions, acknowledgements and delivery.
 */
#ifndef SL_MSMQ_SERVER_H
#define SL_MSMQ_SERVER_H

#include <stddef.h>

/* msmq.allowed_senders when it is not set: loopback and the private ranges (RFC 1918, IPv6
 * unique local and link-local). MS-MQQB has no credentials, so an MSMQ port reachable from
 * the internet lets anyone claim any queue manager; Windows senders sit on internal
 * networks (docs/msmq-wire.md says why, and how to widen it). */
#define MSMQ_ALLOWED_SENDERS_DEFAULT                                                               \
    "127.0.0.0/8 ::1/128 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 fc00::/7 fe80::/10"

struct sl_node;
typedef struct msmq_server msmq_server;

/* Listen when listeners.msmq is set (logs `listening msmq=ADDR:PORT`). NULL with err when it
 * cannot; NULL with err[0] == 0 when the door is off. */
msmq_server *msmq_start(struct sl_node *n, char *err, size_t errlen);
/* Close every session and the listener. NULL is fine. */
void msmq_stop(msmq_server *s);

#endif
