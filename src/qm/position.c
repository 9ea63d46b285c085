/* position.c - message positions: the locked list, orphans, and settlement.
 *
 * A position is owned by its queue while AVAILABLE (in a ready ring, lprev/lnext NULL), by
 * its holder while LOCKED or PURGE_PENDING (on q->locked), and, once DELETED while still
 * held, by the node's orphan list until the holder settles it. So every settle call ends
 * with the position freed or back in a ready ring, and nothing leaks at qm_node_free.
 *
 * PURGE_PENDING is sticky: whatever the settlement, such a position is deleted (reason
 * purged); what a purge removed never comes back (MS-MQDMPR Purge Queue).
 */
#include <string.h>

#include "core/slab.h"
#include "qm/qm_internal.h"

qm_position *qm_position_new(qm_queue *q, qm_message *m, uint64_t lookup_id)
{
    qm_position *pos;
    if (!m->pos0_used) {
        /* The message's own slot: no allocation for the first (usually only) queue. */
        m->pos0_used = 1;
        pos = &m->pos0;
        memset(pos, 0, sizeof *pos);
    } else {
        unsigned cls;
        pos = sl_slab_alloc(sizeof *pos, &cls); /* the class of a position (see below) */
        memset(pos, 0, sizeof *pos);
        qm_memory_account((int64_t)sizeof *pos);
    }
    qm_message_ref(m);
    pos->msg = m;
    pos->queue = q;
    pos->lookup_id = lookup_id;
    return pos;
}

qm_lock *qm_pos_lock(qm_position *p)
{
    if (p->has_lk)
        return p->u.lk;
    unsigned cls;
    qm_lock *lk = sl_slab_alloc(sizeof *lk, &cls); /* freed with sl_slab_class(sizeof *lk) */
    memset(lk, 0, sizeof *lk);
    qm_memory_account((int64_t)sizeof *lk);
    lk->expires_at = p->u.expires_at;
    p->u.lk = lk;
    p->has_lk = 1;
    return lk;
}

void qm_pos_lock_drop(qm_position *p)
{
    if (!p->has_lk)
        return;
    qm_lock *lk = p->u.lk;
    p->has_lk = 0;
    p->u.expires_at = lk->expires_at;
    sl_slab_free(lk, sl_slab_class(sizeof *lk));
    qm_memory_account(-(int64_t)sizeof *lk);
}

void qm_pos_set_holder(qm_position *p, void *holder)
{
    if (holder || p->has_lk)
        qm_pos_lock(p)->holder = holder;
}

void qm_pos_set_tx(qm_position *p, qm_tx *tx)
{
    if (tx || p->has_lk)
        qm_pos_lock(p)->tx = tx;
}

void qm_position_free(qm_position *pos)
{
    if (pos->redelivered && pos->queue && pos->queue->dcounts)
        qm_dcount_forget(pos->queue, pos->lookup_id);
    if (pos->st_logged)
        QM_PERSIST(released, pos, pos->queue != NULL && !qm_persist_bulk);
    if (pos->has_lk && pos->u.lk->lnext) {
        /* on the orphan list (circular, so both links are set) */
        qm_lock *lk = pos->u.lk;
        qm_pos_lock(lk->lprev)->lnext = lk->lnext;
        qm_pos_lock(lk->lnext)->lprev = lk->lprev;
        lk->lprev = lk->lnext = NULL;
    }
    qm_position_release(pos);
}

void qm_position_release(qm_position *pos)
{
    qm_message *m = pos->msg;
    qm_pos_lock_drop(pos);
    if (pos == &m->pos0)
        m->pos0_used = 0; /* the slot goes with the message, which may go now */
    else {
        sl_slab_free(pos, sl_slab_class(sizeof *pos));
        qm_memory_account(-(int64_t)sizeof *pos);
    }
    qm_message_unref(m);
}

void qm_locked_link(qm_queue *q, qm_position *pos)
{
    qm_lock *lk = qm_pos_lock(pos);
    lk->lprev = NULL;
    lk->lnext = q->locked;
    if (q->locked)
        q->locked->u.lk->lprev = pos;
    q->locked = pos;
    if (pos->state == QM_POS_PURGE_PENDING)
        q->n_purge_pending++;
    else
        q->n_locked++;
}

void qm_locked_unlink(qm_queue *q, qm_position *pos)
{
    qm_lock *lk = qm_pos_lock(pos);
    if (q->visit_held == pos)
        q->visit_held = lk->lnext; /* a store walk resumes at what followed it */
    if (lk->lprev)
        lk->lprev->u.lk->lnext = lk->lnext;
    else
        q->locked = lk->lnext;
    if (lk->lnext)
        lk->lnext->u.lk->lprev = lk->lprev;
    lk->lprev = lk->lnext = NULL;
    if (pos->state == QM_POS_PURGE_PENDING)
        q->n_purge_pending--;
    else
        q->n_locked--;
}

void qm_orphan_link(qm_node *n, qm_position *pos)
{
    qm_position *s = &n->orphans;
    qm_lock *lk = qm_pos_lock(pos);
    lk->lprev = s;
    lk->lnext = s->u.lk->lnext;
    s->u.lk->lnext->u.lk->lprev = pos;
    s->u.lk->lnext = pos;
}

/* A message consumed from a journaled queue, or from one of its subqueues (they are part of
 * it), is copied into the queue's journal; what is consumed from the journal itself is not. */
void qm_journal_copy(qm_queue *q, qm_position *pos)
{
    qm_queue *top = q->is_subqueue ? q->parent : q;
    if (!top->args.journal)
        return;
    if (q->is_subqueue && !strcmp(strchr(q->name, ';') + 1, "journal"))
        return;
    qm_queue *j = qm_queue_subqueue(top, "journal", 7, 1);
    /* the journal keeps the message and its lookup id, like a move */
    qm_position *copy = qm_position_new(j, pos->msg, pos->lookup_id);
    copy->move_count = pos->move_count;
    qm_queue_accept(j, copy);
}

int qm_removed(qm_queue *q, qm_position *pos, qm_delete_reason reason)
{
    qm_node *n = qm_queue_node(q);
    return n->on_removed ? n->on_removed(pos, reason, n->removed_ctx) : 0;
}

void qm_removed_end(int grouped)
{
    if (grouped)
        QM_PERSIST(tx_group, 0);
}

void qm_position_delete_held(qm_position *pos, qm_delete_reason reason)
{
    qm_queue *q = pos->queue;
    qm_locked_unlink(q, pos);
    q->bytes_total -= pos->msg->body_len;
    int grouped = 0;
    switch (reason) {
    case QM_DEL_ACKED:
        q->stat_acked++;
        qm_journal_copy(q, pos);
        grouped = qm_removed(q, pos, reason);
        break;
    case QM_DEL_PURGED: /* purged while delivered: it goes now that it is settled */
        q->stat_purged++;
        grouped = qm_removed(q, pos, reason);
        break;
    case QM_DEL_REJECTED: /* the consumer refused it for good: the hook hears of it */
        grouped = qm_removed(q, pos, reason);
        qm_deadletter(q, pos->msg, reason);
        break;
    case QM_DEL_DELIVERY_LIMIT:
        qm_deadletter(q, pos->msg, reason);
        break;
    default:
        break;
    }
    pos->state = QM_POS_DELETED;
    qm_position_free(pos); /* its removal record: in the hook's group when it began one */
    qm_removed_end(grouped);
    qm_queue_maybe_gc(q);
}

void qm_position_hand_out(qm_queue *q, qm_position *pos, int no_ack)
{
    qm_quorum_handout(q, pos, no_ack);
    q->stat_delivered++;
    if (pos->redelivered)
        q->stat_redelivered++;
    /* Taken for good at once: the hook runs before the removal record (the delivered hook's
     * R_DEQ), so a group it begins holds both. */
    int grouped = no_ack ? qm_removed(q, pos, QM_DEL_ACKED) : 0;
    QM_PERSIST(delivered, pos, no_ack);
    qm_removed_end(grouped);
    if (no_ack) {
        q->stat_delivered_no_ack++;
        q->stat_acked++;
        q->bytes_total -= pos->msg->body_len;
        qm_journal_copy(q, pos);
        pos->state = QM_POS_DELETED;
        pos->queue = NULL;
        qm_orphan_link(qm_queue_node(q), pos);
    } else {
        pos->state = QM_POS_LOCKED;
        qm_pos_set_holder(pos, NULL);
        qm_locked_link(q, pos);
    }
}

void qm_position_unlock(qm_position *pos)
{
    qm_queue *q = pos->queue;
    qm_locked_unlink(q, pos);
    qm_ready_insert(q, pos);
    qm_queue_schedule_dispatch(q);
}

void qm_position_settle(qm_position *pos, int how)
{
    if (pos->state == QM_POS_DELETED || !pos->queue) {
        qm_position_free(pos);
        return;
    }
    if (pos->state == QM_POS_PURGE_PENDING) {
        qm_position_delete_held(pos, QM_DEL_PURGED);
        return;
    }
    if (pos->state != QM_POS_LOCKED)
        return; /* AVAILABLE: not held, nothing to settle */
    switch (how) {
    case QM_SETTLE_REQUEUE:
        if (pos->queue->args.quorum && qm_quorum_return(pos)) {
            qm_position_delete_held(pos, QM_DEL_DELIVERY_LIMIT);
            break;
        }
        pos->redelivered = 1;
        qm_pos_set_holder(pos, NULL);
        qm_position_unlock(pos);
        break;
    case QM_SETTLE_REJECT:
        qm_position_delete_held(pos, QM_DEL_REJECTED);
        break;
    default:
        qm_position_delete_held(pos, QM_DEL_ACKED);
        break;
    }
}

static void settle_public(qm_position *pos, int how)
{
    if (qm_pos_tx(pos))
        qm_tx_forget_position(pos);
    qm_position_settle(pos, how);
}

void qm_position_ack(qm_position *pos)
{
    settle_public(pos, QM_SETTLE_ACK);
}

void qm_position_requeue(qm_position *pos)
{
    settle_public(pos, QM_SETTLE_REQUEUE);
}

void qm_position_reject(qm_position *pos)
{
    settle_public(pos, QM_SETTLE_REJECT);
}
