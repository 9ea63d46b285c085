/* ack.h - MSMQ administration acknowledgements (MS-MQQB 3.1.7.15, 3.1.7.2.1, 3.1.5.8.10):
 * the messages a receiving queue manager sends to the administration queue a message names
 * when its sender asked for them (MessagePropertiesHeader.Flags, x-msmq-ack), saying that the
 * message reached its queue or was refused (arrival classes), was taken by a consumer or
 * expired unread (receive classes).
 *
 * An acknowledgement is an ordinary queued message: class in x-msmq-class, correlation_id =
 * the original's message id, the original's label and app-specific, an empty body (a
 * negative one carries the original's body), persistent when the original was. It goes to
 * the admin queue's format name: a host of msmq.hosts -> its MS-MQQB outgoing queue (sent as
 * a UserMessage of that class); the host the original was sent to (this node) -> the queue of
 * that name in msmq.vhost. Anything else is not sent (logged). It is enqueued, so it is in
 * the store like any message and survives a kill -9 once its record is.
 */
#ifndef SL_MSMQ_ACK_H
#define SL_MSMQ_ACK_H

#include <stdint.h>

#include "qm/qm.h"

struct sl_node;

/* Send the acknowledgement of class cls for orig (a message as mqqb_props_message made it)
 * when orig asked for that kind (positive / negative, arrival / receive) and names an admin
 * queue; nothing otherwise. 1 when one was enqueued. */
int msmq_ack_send(struct sl_node *n, const qm_message *orig, uint16_t cls);

/* Receive acknowledgements: hooks the node's on_removed (a consumer took a message for good:
 * ACK_RECEIVE; it expired unread: NACK_RECEIVE_TIMEOUT; purged: NACK_Q_PURGED; its queue
 * deleted: NACK_Q_DELETED; a consumer rejected it without requeue: NACK_RECEIVE_REJECTED),
 * for a message leaving the queue its
 * MSMQ sender addressed (x-msmq-destination-queue's, in msmq.vhost; never an outgoing
 * queue). uninstall takes the hook off. */
void msmq_ack_install(struct sl_node *n);
void msmq_ack_uninstall(struct sl_node *n);

#endif
