/* move.c - Move Message (MS-MQDMPR 3.1.7.1.16, MS-MQRR R_MoveMessage).
 *
 * The position object itself travels: it keeps its lookup id, message and expiry, gains one
 * move, and is inserted in the target at its lookup-id place. Quotas (x-max-length) are not
 * applied to moves: moving between a queue and its subqueues does not change usage (MSMQ).
 * A transactional move only locks the source position; tx.c finishes it.
 */
#include "qm_internal.h"

void qm_move_transfer(qm_position *pos, qm_queue *src, qm_queue *dest)
{
    uint64_t len = pos->msg->body_len;
    src->bytes_total -= len;
    pos->move_count++;
    dest->bytes_total += len;
    qm_ready_insert(dest, pos);
    QM_PERSIST(moved, pos, src);
    qm_queue_schedule_dispatch(dest);
    qm_queue_maybe_gc(src);
}

static sl_err move_pos(qm_queue *src, qm_position *pos, qm_queue *dest, qm_tx *tx)
{
    qm_ready_remove(src, pos);
    if (tx) {
        pos->state = QM_POS_LOCKED;
        qm_locked_link(src, pos);
        qm_tx_add_move(tx, pos, dest);
        return SL_OK;
    }
    qm_move_transfer(pos, src, dest);
    return SL_OK;
}

static sl_err check(qm_queue *src, qm_queue *dest, qm_tx *tx)
{
    /* MS-MQDMPR: the transaction MUST NOT be given when the target is a system queue */
    if (tx && dest->is_system)
        return SL_ERR_TRANSACTION_USAGE;
    if (src == dest)
        return SL_ERR_INVALID_PARAMETER;
    return SL_OK;
}

sl_err qm_move(qm_queue *src, uint64_t lookup_id, qm_queue *dest, qm_tx *tx)
{
    sl_err rc = check(src, dest, tx);
    if (rc)
        return rc;
    qm_position *pos = qm_queue_find_position(src, lookup_id);
    if (!pos)
        return SL_ERR_MESSAGE_NOT_FOUND;
    if (pos->state != QM_POS_AVAILABLE)
        return SL_ERR_MESSAGE_LOCKED_UNDER_TX;
    return move_pos(src, pos, dest, tx);
}

sl_err qm_move_first(qm_queue *src, uint64_t n, qm_queue *dest, qm_tx *tx, uint64_t *moved)
{
    uint64_t done = 0;
    sl_err rc = check(src, dest, tx);
    if (!rc) {
        qm_position *pos;
        while (done < n && (pos = qm_queue_peek(src, 0)) != NULL) {
            move_pos(src, pos, dest, tx);
            done++;
        }
    }
    if (moved)
        *moved = done;
    return rc;
}
