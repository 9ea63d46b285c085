/* server.h - the MS-MQQB door: a TCP listener (listeners.msmq) whose sessions take Windows
 * queue managers' UserMessage packets into the private queues of one vhost (msmq.vhost).
 * The codec is mqqb.h; this owns sockets, sessions, acknowledgements and delivery.
 */
#ifndef SL_MSMQ_SERVER_H
#define SL_MSMQ_SERVER_H

#include <stddef.h>

struct broker;
typedef struct msmq_server msmq_server;

/* Listen when listeners.msmq is set (logs `listening msmq=ADDR:PORT`). NULL with err when it
 * cannot; NULL with err[0] == 0 when the door is off. */
msmq_server *msmq_start(struct broker *b, char *err, size_t errlen);
/* Close every session and the listener. NULL is fine. */
void msmq_stop(msmq_server *s);

#endif
