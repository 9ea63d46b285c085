/* get.c - messages taken and settled at once (see get.h). */
#include "node/get.h"

#include "core/mem.h"

size_t node_queue_get(qm_queue *q, size_t count, node_get_mode mode,
                      void (*visit)(void *ctx, const qm_position *pos, uint64_t remaining),
                      void *ctx)
{
    qm_position **taken = sl_xcalloc(count + 1, sizeof *taken);
    size_t n = 0;
    uint64_t remaining = 0;
    while (n < count) {
        qm_position *pos = qm_queue_get(q, 0, &remaining);
        if (!pos)
            break;
        taken[n++] = pos;
        visit(ctx, pos, remaining);
    }
    for (size_t i = 0; i < n; i++) {
        switch (mode) {
        case NODE_GET_ACK_REQUEUE:
        case NODE_GET_REJECT_REQUEUE:
            qm_position_requeue(taken[i]);
            break;
        case NODE_GET_ACK:
            qm_position_ack(taken[i]);
            break;
        case NODE_GET_REJECT:
            qm_position_reject(taken[i]);
            break;
        }
    }
    sl_free(taken);
    return n;
}
