/* quorum.c - quorum queues' delivery count and delivery limit (RabbitMQ 3.10's semantics).
 *
 * A quorum queue (x-queue-type quorum) counts, per message, its *returns*: a delivery that
 * came back unsettled (basic.reject / basic.nack with requeue, basic.recover, or the channel or
 * connection closing with it unacked; a node stopping or killed counts as its connections
 * closing). A message is delivered with the header x-delivery-count = that count when it is
 * above 0 (basic.get always carries it, 0 included: RabbitMQ 3.10.8 does so, observed), and
 * with redelivered = count > 0. With an integer x-delivery-limit L, a return that brings the
 * count above L dead-letters the message instead (reason delivery_limit; dropped without a
 * dead-letter exchange); a negative L dead-letters at the first return, as RabbitMQ's
 * comparison does. The header is never stored: it is added to the properties as the
 * delivery is written.
 *
 * Where the count lives: a queue's table q->dcounts, lookup id -> count, holding only the
 * messages returned at least once (their position has redelivered set), so a position costs
 * no more memory than a classic queue's, paged out or not. An entry goes when its position
 * leaves the queue (settled, expired, dropped, moved), all of them at a purge or deletion.
 *
 * On disk (src/persist/): a delivery of a message whose count is above 0 writes R_QDELIVER
 * with that count (count 0: the ordinary R_DELIVER); recovery takes the count of the last
 * one and adds 1 when it was delivered since, since the node stopping returned it. So the
 * count survives kill -9 without a record per return. A message whose count is above its
 * limit after a restart is dead-lettered when it reaches the head (qm_quorum_take_over).
 */
#include <string.h>

#include "amqp/method.h"
#include "core/u64tab.h"
#include "qm/qm_internal.h"

typedef struct dcount_ent {
    uint64_t lookup_id;
    uint32_t count;
    uint32_t pad;
} dcount_ent;

/* The count of the position handed out last (see qm_quorum_handout). */
static int64_t last_handout = -1;

uint32_t qm_dcount_get(const qm_queue *q, uint64_t lookup_id)
{
    if (!q->dcounts)
        return 0;
    const dcount_ent *e = sl_u64tab_get(q->dcounts, lookup_id);
    return e ? e->count : 0;
}

void qm_dcount_set(qm_queue *q, uint64_t lookup_id, uint32_t count)
{
    if (!count) {
        qm_dcount_forget(q, lookup_id);
        return;
    }
    if (!q->dcounts) {
        q->dcounts = sl_xmalloc(sizeof *q->dcounts);
        sl_u64tab_init(q->dcounts, sizeof(dcount_ent));
    }
    int created;
    dcount_ent *e = sl_u64tab_put(q->dcounts, lookup_id, &created);
    e->count = count;
}

void qm_dcount_forget(qm_queue *q, uint64_t lookup_id)
{
    if (q->dcounts && sl_u64tab_del(q->dcounts, lookup_id, NULL) && !sl_u64tab_count(q->dcounts))
        qm_dcount_clear(q);
}

void qm_dcount_clear(qm_queue *q)
{
    if (!q->dcounts)
        return;
    sl_u64tab_free(q->dcounts);
    sl_free(q->dcounts);
    q->dcounts = NULL;
}

int qm_quorum_over_limit(const qm_queue *q, uint32_t count)
{
    return q->args.has_delivery_limit && (int64_t)count > q->args.delivery_limit;
}

int qm_quorum_return(qm_position *pos)
{
    qm_queue *q = pos->queue;
    uint32_t c = qm_dcount_get(q, pos->lookup_id);
    if (c < UINT32_MAX)
        c++;
    if (qm_quorum_over_limit(q, c)) {
        qm_dcount_forget(q, pos->lookup_id);
        return 1;
    }
    qm_dcount_set(q, pos->lookup_id, c);
    return 0;
}

void qm_quorum_handout(qm_queue *q, qm_position *pos, int no_ack)
{
    if (!q->args.quorum) {
        last_handout = -1;
        return;
    }
    last_handout = pos->redelivered ? qm_dcount_get(q, pos->lookup_id) : 0;
    if (no_ack && pos->redelivered)
        qm_dcount_forget(q, pos->lookup_id); /* settled as it goes out */
}

int64_t qm_last_delivery_count(void)
{
    return last_handout;
}

int qm_quorum_take_over(qm_queue *q, qm_position *pos)
{
    if (!q->args.quorum || !pos->redelivered ||
        !qm_quorum_over_limit(q, qm_dcount_get(q, pos->lookup_id)))
        return 0;
    qm_dcount_forget(q, pos->lookup_id);
    return 1;
}

int qm_delivery_props(const qm_message *m, int64_t count, int always, sl_buf *out)
{
    if (count < 0 || (count == 0 && !always))
        return 0;
    /* ours replaces a publisher's x-delivery-count */
    amqp_props_set_long_header(qm_msg_props(m), m->props_len, "x-delivery-count", count, out);
    return 1;
}
