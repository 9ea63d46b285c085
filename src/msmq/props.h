/* props.h - MSMQ message properties (a parsed MS-MQQB UserMessage) as a queued message with
 * AMQP basic properties and x-msmq-* headers; the mapping table is in README.md ("MSMQ over
 * the wire"). Nothing of the packet is dropped silently: what has no AMQP property becomes a
 * header.
 */
#ifndef SL_MSMQ_PROPS_H
#define SL_MSMQ_PROPS_H

#include <stddef.h>
#include <sys/socket.h>

#include "../qm/qm.h"
#include "mqqb.h"

/* A new message (refs = 1) holding m's body, for queue `queue` (the routing key). */
qm_message *msmq_props_message(const mqqb_user *m, const char *queue, const char *peer_ip);
/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (MS-DTYP GUID layout, lower case) into out[37+]. */
void msmq_guid_str(const uint8_t g[16], char out[40]);
/* "ip:port" and "ip" of a peer address. */
void msmq_peer_str(const struct sockaddr_storage *peer, char *name, size_t nlen, char *ip,
                   size_t iplen);

#endif
