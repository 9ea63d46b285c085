/* tx.c - transactions (MS-MQDMPR 3.1.1.13-14): Enqueue, Dequeue and Move operations, kept
 * in FIFO order, applied in that order by commit and undone by abort.
 *
 * While open, every touched position is LOCKED with pos->tx set:
 *   Enqueue  a new position on q->locked (in_tx_enqueue), counted, not deliverable;
 *   Dequeue  a position held by a consumer/getter; the tx settles it at commit;
 *   Move     the source position, taken from the ready rings onto the locked list.
 * Things can change under an open transaction: the queue may be deleted (positions become
 * DELETED orphans with queue NULL: commit/abort just free what only the tx held), purged
 * (PURGE_PENDING: deleted whatever the outcome), or a Move target may be deleted or fill up
 * to its x-max-length (the Move is then undone at commit, and counted as voided). A holder that
 * settles a position directly takes it back from the transaction (qm_tx_forget_position), so the tx
 * never touches a freed position.
 */
#include "qm/qm_internal.h"

enum { OP_ENQUEUE, OP_DEQUEUE, OP_MOVE };

typedef struct tx_op {
    uint8_t type, how;
    qm_position *pos; /* NULL once forgotten */
    qm_queue *dest;   /* Move target; NULL once deleted */
} tx_op;

typedef struct tx_impl {
    tx_op *ops;
    size_t cap;
    qm_tx *prev, *next; /* open transactions of the node (node->txs_impl is the head) */
} tx_impl;

static tx_impl *impl(qm_tx *tx)
{
    return tx->ops_impl;
}

qm_tx *qm_tx_begin(qm_node *node)
{
    qm_tx *tx = sl_xcalloc(1, sizeof *tx);
    tx_impl *ti = sl_xcalloc(1, sizeof *ti);
    tx->id = node->next_tx_id++;
    tx->node = node;
    tx->ops_impl = ti;
    ti->next = node->txs_impl;
    if (ti->next)
        impl(ti->next)->prev = tx;
    node->txs_impl = tx;
    return tx;
}

static void tx_unlink_free(qm_tx *tx)
{
    tx_impl *ti = impl(tx);
    if (ti->prev)
        impl(ti->prev)->next = ti->next;
    else
        tx->node->txs_impl = ti->next;
    if (ti->next)
        impl(ti->next)->prev = ti->prev;
    /* A subqueue kept only because this transaction would move into it may go now (dispatch
     * removes it, never from here). */
    for (size_t i = 0; i < tx->n_ops; i++)
        if (ti->ops[i].type == OP_MOVE && ti->ops[i].dest)
            qm_queue_maybe_gc(ti->ops[i].dest);
    sl_free(ti->ops);
    sl_free(ti);
    sl_free(tx);
}

static void add_op(qm_tx *tx, int type, int how, qm_position *pos, qm_queue *dest)
{
    tx_impl *ti = impl(tx);
    if (tx->n_ops == ti->cap) {
        ti->cap = ti->cap ? ti->cap * 2 : 8;
        ti->ops = sl_xrealloc(ti->ops, ti->cap * sizeof *ti->ops);
    }
    ti->ops[tx->n_ops++] = (tx_op){(uint8_t)type, (uint8_t)how, pos, dest};
    qm_pos_set_tx(pos, tx);
}

qm_tx *qm_tx_find(qm_node *node, uint64_t id)
{
    for (qm_tx *tx = node->txs_impl; tx; tx = impl(tx)->next)
        if (tx->id == id)
            return tx;
    return NULL;
}

sl_err qm_tx_enqueue(qm_tx *tx, qm_queue *q, qm_message *m)
{
    qm_position *pos = qm_position_new(q, m, tx->node->next_lookup_id++);
    pos->state = QM_POS_LOCKED;
    pos->in_tx_enqueue = 1;
    qm_locked_link(q, pos);
    q->bytes_total += m->body_len;
    add_op(tx, OP_ENQUEUE, 0, pos, NULL);
    return SL_OK;
}

sl_err qm_tx_dequeue(qm_tx *tx, qm_position *pos, int how)
{
    if (qm_pos_tx(pos))
        return SL_ERR_MESSAGE_LOCKED_UNDER_TX;
    if (pos->in_tx_enqueue || pos->state == QM_POS_AVAILABLE)
        return SL_ERR_INVALID_PARAMETER;
    add_op(tx, OP_DEQUEUE, how, pos, NULL);
    return SL_OK;
}

void qm_tx_add_move(qm_tx *tx, qm_position *pos, qm_queue *dest)
{
    add_op(tx, OP_MOVE, 0, pos, dest);
}

static int gone(const qm_position *pos)
{
    return pos->state == QM_POS_DELETED || !pos->queue;
}

sl_err qm_tx_commit(qm_tx *tx)
{
    return qm_tx_commit_counted(tx, NULL);
}

sl_err qm_tx_commit_counted(qm_tx *tx, uint64_t *moves_voided)
{
    tx_impl *ti = impl(tx);
    uint64_t voided = 0;
    if (tx->n_ops)
        QM_PERSIST(tx_group, 1);
    /* Outgoing queues: the last enqueue of this transaction into each one ends the unit the
     * link sends whole; the ones before it say "more follows". Walked backwards, the first
     * enqueue seen for a queue is its last. */
    uint64_t stamp = ++tx->node->route_epoch;
    for (size_t i = tx->n_ops; i-- > 0;) {
        tx_op *op = &ti->ops[i];
        if (op->type != OP_ENQUEUE || !op->pos || gone(op->pos) || !op->pos->queue->is_outgoing)
            continue;
        qm_queue *q = op->pos->queue;
        op->pos->xact_cont = q->tx_stamp == stamp;
        op->pos->xact = 1;
        q->tx_stamp = stamp;
    }
    for (size_t i = 0; i < tx->n_ops; i++) {
        tx_op *op = &ti->ops[i];
        qm_position *pos = op->pos;
        if (!pos)
            continue;
        op->pos = NULL;
        qm_pos_set_tx(pos, NULL);
        switch (op->type) {
        case OP_ENQUEUE:
            if (gone(pos)) {
                qm_position_free(pos);
            } else {
                qm_queue *q = pos->queue;
                qm_locked_unlink(q, pos);
                pos->in_tx_enqueue = 0;
                /* sendable from now on: its place in the outgoing sequence is now */
                if (q->is_outgoing)
                    pos->lookup_id = tx->node->next_lookup_id++;
                q->bytes_total -= pos->msg->body_len; /* accept counts it again */
                qm_queue_accept(q, pos);              /* may refuse (reject-publish) and free it */
            }
            break;
        case OP_DEQUEUE:
            qm_position_settle(pos, op->how);
            break;
        case OP_MOVE:
            if (gone(pos)) {
                qm_position_free(pos);
            } else if (pos->state == QM_POS_PURGE_PENDING) {
                qm_position_delete_held(pos, QM_DEL_PURGED);
            } else if (!op->dest || !qm_queue_has_room(op->dest, pos->msg->body_len)) {
                /* target deleted, or filled up, meanwhile: the move is void */
                qm_position_unlock(pos);
                voided++;
            } else {
                qm_queue *src = pos->queue;
                qm_locked_unlink(src, pos);
                qm_move_transfer(pos, src, op->dest);
            }
            break;
        }
    }
    if (tx->n_ops)
        QM_PERSIST(tx_group, 0);
    tx_unlink_free(tx);
    if (moves_voided)
        *moves_voided = voided;
    return SL_OK;
}

void qm_tx_abort(qm_tx *tx)
{
    tx_impl *ti = impl(tx);
    for (size_t i = tx->n_ops; i-- > 0;) {
        tx_op *op = &ti->ops[i];
        qm_position *pos = op->pos;
        if (!pos)
            continue;
        op->pos = NULL;
        qm_pos_set_tx(pos, NULL);
        switch (op->type) {
        case OP_ENQUEUE:
            if (gone(pos)) {
                qm_position_free(pos);
            } else {
                qm_queue *q = pos->queue;
                qm_locked_unlink(q, pos);
                q->bytes_total -= pos->msg->body_len;
                qm_position_free(pos);
                qm_queue_maybe_gc(q);
            }
            break;
        case OP_DEQUEUE:
            break; /* still held by its holder, as before */
        case OP_MOVE:
            if (gone(pos))
                qm_position_free(pos);
            else if (pos->state == QM_POS_PURGE_PENDING)
                qm_position_delete_held(pos, QM_DEL_PURGED);
            else
                qm_position_unlock(pos);
            break;
        }
    }
    tx_unlink_free(tx);
}

void qm_tx_forget_position(qm_position *pos)
{
    qm_tx *tx = qm_pos_tx(pos);
    tx_impl *ti = impl(tx);
    for (size_t i = 0; i < tx->n_ops; i++)
        if (ti->ops[i].pos == pos)
            ti->ops[i].pos = NULL;
    qm_pos_set_tx(pos, NULL);
}

void qm_tx_forget_queue(qm_node *n, qm_queue *q)
{
    for (qm_tx *tx = n->txs_impl; tx; tx = impl(tx)->next)
        for (size_t i = 0; i < tx->n_ops; i++)
            if (impl(tx)->ops[i].dest == q)
                impl(tx)->ops[i].dest = NULL;
}

int qm_tx_targets_queue(qm_node *n, qm_queue *q)
{
    for (qm_tx *tx = n->txs_impl; tx; tx = impl(tx)->next)
        for (size_t i = 0; i < tx->n_ops; i++)
            if (impl(tx)->ops[i].dest == q && impl(tx)->ops[i].pos)
                return 1;
    return 0;
}

void qm_tx_free_all(qm_node *n)
{
    /* Node teardown: positions are freed with their queues / the orphan list. */
    while (n->txs_impl) {
        qm_tx *tx = n->txs_impl;
        for (size_t i = 0; i < tx->n_ops; i++)
            if (impl(tx)->ops[i].pos)
                qm_pos_set_tx(impl(tx)->ops[i].pos, NULL);
        tx_unlink_free(tx);
    }
}
