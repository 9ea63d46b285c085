/* get.h - messages taken from a queue and settled at once, for a door that hands them out
 * without a consumer (the HTTP API's POST .../get, RabbitMQ's ackmodes): each taken message
 * is viewed, then every one is settled the same way.
 *
 * Invariant: all are taken before any is settled; requeueing one at a time would hand the
 * same message back.
 */
#ifndef SL_NODE_GET_H
#define SL_NODE_GET_H

#include <stddef.h>
#include <stdint.h>

#include "qm/qm.h"

/* How the taken messages are settled (RabbitMQ's ackmode, in its order: ack_requeue_true,
 * ack_requeue_false, reject_requeue_true, reject_requeue_false). */
typedef enum {
    NODE_GET_ACK_REQUEUE, /* back in their places */
    NODE_GET_ACK,         /* gone (a journal copy when the queue keeps one) */
    NODE_GET_REJECT_REQUEUE,
    NODE_GET_REJECT, /* gone (dead-lettered when the queue has a dead-letter exchange) */
} node_get_mode;

/* Takes up to count ready messages of q, each to visit with the ready messages after it,
 * then settles them all by mode. The number taken. */
size_t node_queue_get(qm_queue *q, size_t count, node_get_mode mode,
                      void (*visit)(void *ctx, const qm_position *pos, uint64_t remaining),
                      void *ctx);

#endif
