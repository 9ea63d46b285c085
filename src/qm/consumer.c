/* consumer.c - consumers and dispatch.
 *
 * q->consumers is kept sorted by priority, highest first, in attach order within a priority,
 * so dispatch serves the highest-priority group that has a consumer able to take a message
 * and round-robins inside that group from q->rr_next.
 *
 * A queue declared with x-single-active-consumer serves only q->active: the consumer attached
 * first, and when it goes, the oldest of the others (RabbitMQ's rule, priorities aside).
 * Messages it held unsettled go back to the queue through the door's requeue as usual, so the
 * next active consumer gets them in order. A stream's single active consumer groups (by name,
 * in a stream) are stream.c's: a detach tells it (qm_stream_sac_leave).
 *
 * Re-entrancy contract (what the door may do from inside callbacks):
 *   can_take  must not change qm state at all.
 *   deliver   may settle the delivered position (no_ack hand-outs: must, eventually) and
 *             may enqueue into other queues, but must NOT detach consumers, delete queues or
 *             run dispatch: defer that work to after qm_node_run_dispatch.
 *   cancelled c is already unlinked (c->next == c) and c->queue still points at the dying
 *             queue for the duration of the call (read-only); the callee frees c.
 * Dispatch is never entered from qm's own callbacks; qm_queue_schedule_dispatch only marks.
 */
#include "core/list.h"
#include "qm/qm_internal.h"

/* The oldest attached consumer other than `except`, or NULL. */
static qm_consumer *oldest(const qm_queue *q, const qm_consumer *except)
{
    qm_consumer *best = NULL;
    for (qm_consumer *o = q->consumers; o; o = o->next)
        if (o != except && (!best || o->attached < best->attached))
            best = o;
    return best;
}

static void unlink_consumer(qm_queue *q, qm_consumer *c)
{
    if (q->active == c)
        q->active = oldest(q, c);
    if (q->rr_next == c)
        q->rr_next = c->next;
    SL_LIST_UNLINK(q->consumers, c, prev, next);
    c->prev = c->next = c; /* "not attached" marker, see qm_consumer_detach */
    q->n_consumers--;
    qm_stream_reader_free(c);
}

sl_err qm_consumer_attach(qm_queue *q, qm_consumer *c)
{
    if (q->is_outgoing != c->is_link)
        return SL_ERR_ACCESS_REFUSED; /* an outgoing queue is drained by its link alone */
    for (qm_consumer *o = q->consumers; o; o = o->next)
        if (o->exclusive)
            return SL_ERR_ACCESS_REFUSED;
    if (c->exclusive && q->consumers)
        return SL_ERR_ACCESS_REFUSED;

    c->queue = q;
    /* insert after the last consumer whose priority is >= c's */
    qm_consumer *after = NULL;
    for (qm_consumer *o = q->consumers; o && o->priority >= c->priority; o = o->next)
        after = o;
    c->prev = after;
    c->next = after ? after->next : q->consumers;
    if (c->next)
        c->next->prev = c;
    if (after)
        after->next = c;
    else
        q->consumers = c;
    q->n_consumers++;
    c->attached = ++qm_queue_node(q)->consumers_attached;
    if (q->args.single_active && !q->active)
        q->active = c;
    q->had_consumer = 1;
    q->last_used = qm_now(qm_queue_node(q));
    qm_queue_schedule_dispatch(q);
    return SL_OK;
}

void qm_consumer_detach(qm_consumer *c)
{
    qm_queue *q = c->queue;
    if (!q || c->next == c)
        return;
    unlink_consumer(q, c);
    c->queue = NULL;
    qm_stream_sac_leave(q, c); /* a stream's group may get a new active member */
    q->last_used = qm_now(qm_queue_node(q));
    if (q->active)
        qm_queue_schedule_dispatch(q); /* a single active consumer may have taken over */
    if (q->auto_delete && q->had_consumer && q->n_consumers == 0 && !q->is_system)
        qm_queue_destroy(q, 1);
    else {
        if (q->n_consumers == 0 && q->args.expires > 0)
            qm_queue_wake_at(q, q->last_used + (uint64_t)q->args.expires); /* unused from now */
        qm_queue_maybe_gc(q);
    }
}

void qm_consumers_cancel_all(qm_queue *q, int run_hooks)
{
    while (q->consumers) {
        qm_consumer *c = q->consumers;
        unlink_consumer(q, c);
        c->sac_state = QM_SAC_NONE; /* the whole group goes: nobody takes over */
        if (run_hooks && c->ops && c->ops->cancelled)
            c->ops->cancelled(c); /* c->queue == q during the call; c may be freed */
        else
            c->queue = NULL;
    }
    q->rr_next = NULL;
    q->active = NULL;
}

/* The consumer to get the next message, or NULL when none can take one. */
static qm_consumer *pick(qm_queue *q)
{
    if (q->args.single_active)
        return q->active && q->active->ops->can_take(q->active) ? q->active : NULL;
    qm_consumer *g = q->consumers;
    while (g) {
        /* group [g, end): same priority */
        qm_consumer *end = g->next;
        while (end && end->priority == g->priority)
            end = end->next;
        qm_consumer *start = g;
        for (qm_consumer *o = g; o != end; o = o->next)
            if (o == q->rr_next) {
                start = o;
                break;
            }
        qm_consumer *o = start;
        do {
            if (o->ops->can_take(o))
                return o;
            o = o->next;
            if (o == end)
                o = g;
        } while (o != start);
        g = end;
    }
    return NULL;
}

void qm_queue_dispatch(qm_queue *q)
{
    qm_node *n = qm_queue_node(q);
    uint64_t now = qm_now(n);

    if (q->stream) {
        qm_stream_dispatch(q);
        return;
    }
    while (q->n_ready && q->consumers) {
        qm_consumer *c = pick(q);
        if (!c)
            break;
        qm_position *pos = qm_queue_take_head(q, now);
        if (!pos)
            break;
        q->rr_next = c->next;
        qm_position_hand_out(q, pos, c->no_ack);
        c->ops->deliver(c, pos);
    }
}

void qm_queue_schedule_dispatch(qm_queue *q)
{
    if (q->dispatch_scheduled)
        return;
    qm_node *n = qm_queue_node(q);
    q->dispatch_scheduled = 1;
    q->dispatch_next = n->dispatch_head;
    n->dispatch_head = q;
}

void qm_dispatch_unlink(qm_queue *q)
{
    if (!q->dispatch_scheduled)
        return;
    qm_node *n = qm_queue_node(q);
    for (qm_queue **pp = &n->dispatch_head; *pp; pp = &(*pp)->dispatch_next) {
        if (*pp == q) {
            *pp = q->dispatch_next;
            break;
        }
    }
    q->dispatch_scheduled = 0;
    q->dispatch_next = NULL;
}

void qm_node_run_dispatch(qm_node *n)
{
    /* Pop one queue at a time so that a queue deleted meanwhile (unlinked by destroy) is
     * never visited, and one scheduled again while running is simply run again. */
    while (n->dispatch_head) {
        qm_queue *q = n->dispatch_head;
        n->dispatch_head = q->dispatch_next;
        q->dispatch_next = NULL;
        q->dispatch_scheduled = 0;
        qm_queue_dispatch(q);
        if (qm_queue_gc_ready(q))
            qm_queue_destroy(q, 1);
    }
}
