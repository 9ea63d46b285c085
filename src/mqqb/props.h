/* props.h - MSMQ message properties (a parsed MS-MQQB UserMessage) as a queued message with
 * AMQP basic properties and x-msmq-* headers; the mapping table is in README.md ("MSMQ over
 * the wire"). Nothing of the packet is dropped silently: what has no AMQP property becomes a
 * header.
 */
#ifndef SL_MSMQ_PROPS_H
#define SL_MSMQ_PROPS_H

#include <stddef.h>
#include <sys/socket.h>

#include "qm/qm.h"
#include "mqqb/mqqb.h"

/* A new message (refs = 1) holding m's body, for queue `queue` (the routing key). */
qm_message *mqqb_props_message(const mqqb_user *m, const char *queue, const char *peer_ip);
/* The sending side, the same table read backwards: what an AMQP message (its properties,
 * props_len bytes, and x-msmq-* headers) becomes in an outgoing UserMessage. Fills u's
 * label, correlation, app_tag, body_type, priority, ttbr, ttrq, sent_time, admin, resp,
 * journal, dead_letter, ack_flags and ext (pointing into props and into s, which must outlive
 * u); returns the MSMQ_LOST_* bits of what it found and could not carry (0: nothing lost). */
typedef struct msmq_out_scratch {
    char label[1000], admin[1100], resp[300];
    uint8_t correlation[20];
} msmq_out_scratch;
enum {
    MSMQ_LOST_HEADERS = 1 << 0,     /* headers that are not x-msmq-* (MSMQ has no headers) */
    MSMQ_LOST_REPLY_TO = 1 << 1,    /* reply_to that is not a format name MSMQ can write */
    MSMQ_LOST_CORRELATION = 1 << 2, /* correlation_id that is not "guid\number" */
    MSMQ_LOST_ADMIN = 1 << 3,       /* x-msmq-admin-queue that is not a format name */
    MSMQ_LOST_LABEL = 1 << 4,       /* label over 249 UTF-16 units or not UTF-8 */
    MSMQ_LOST_SECURITY = 1 << 5,    /* x-msmq-sender-id: no SecurityHeader is sent */
    MSMQ_LOST_SOAP = 1 << 6,        /* x-msmq-soap-*: no SRMP envelope is sent */
    MSMQ_LOST_AMQP = 1 << 7,        /* type, user_id, app_id, cluster_id, other content types */
    MSMQ_LOST_VALUE = 1 << 8,       /* an x-msmq-* header of the wrong type, or expiration */
    MSMQ_LOST_BITS = 9,
};
unsigned mqqb_out_props(const uint8_t *props, uint32_t props_len, mqqb_out *u, msmq_out_scratch *s,
                        uint64_t now_s);
/* The name of one MSMQ_LOST_* bit (for the log). */
const char *mqqb_lost_name(unsigned bit);

/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (MS-DTYP GUID layout, lower case) into out[37+]. */
void mqqb_guid_str(const uint8_t g[16], char out[40]);
/* "ip:port" and "ip" of a peer address. */
void mqqb_peer_str(const struct sockaddr_storage *peer, char *name, size_t nlen, char *ip,
                   size_t iplen);

#endif
