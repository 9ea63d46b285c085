/* move.c - Move Message (MS-MQDMPR 3.1.7.1.16, MS-MQRR R_MoveMessage).
 *
 * The position object itself travels: it keeps its lookup id, message and properties, gains
 * one move, and is inserted in the target at its lookup-id place. A transactional move only
 * locks the source position; tx.c finishes it at commit.
 *
 * The target's rules apply to what is moved into it, as they would to a publish, except
 * that a move never destroys a message to make room:
 *   - length and bytes (x-max-length, x-max-length-bytes): a move that would take the target
 *     beyond either is refused with SL_ERR_QUEUE_FULL (MQ_ERROR_INSUFFICIENT_RESOURCES),
 *     whatever its x-overflow: nothing is dropped from the head or dead-lettered, the
 *     message stays where it was. (In MSMQ moves between a queue and its subqueues do not
 *     change quota usage; here a subqueue has no limits of its own and the queue's limits
 *     count its own messages, so moving back into a full queue is refused too.)
 *   - TTL: the deadline becomes the target's x-message-ttl counted from the move, or the
 *     message's own expiration deadline, the earlier. A move never extends the message's own
 *     expiration (MSMQ's time-to-be-received keeps counting); the source's x-message-ttl
 *     stops applying, except for a message that has an expiration of its own, whose deadline
 *     keeps the earlier of the two (they are not stored apart).
 */
#include "qm/qm_internal.h"

static uint64_t moved_deadline(const qm_position *pos, const qm_queue *dest)
{
    uint64_t at = pos->msg->has_expiration ? qm_pos_expires(pos) : 0;
    if (dest->args.message_ttl >= 0) {
        uint64_t t = qm_now(qm_queue_node(dest)) + (uint64_t)dest->args.message_ttl;
        if (!at || t < at)
            at = t;
    }
    return at;
}

void qm_move_transfer(qm_position *pos, qm_queue *src, qm_queue *dest)
{
    uint64_t len = pos->msg->body_len;
    uint64_t old_deadline = qm_pos_expires(pos);
    src->bytes_total -= len;
    if (pos->redelivered) {
        /* A quorum queue's count stays behind. One moved into a quorum queue after a
         * delivery elsewhere counts it as one return: what its stored redelivered mark
         * gives it after a restart (records.h R_QDELIVER). */
        qm_dcount_forget(src, pos->lookup_id);
        if (dest->args.quorum)
            qm_dcount_set(dest, pos->lookup_id, 1);
    }
    if (pos->move_count < QM_MOVE_COUNT_MAX)
        pos->move_count++;
    qm_pos_set_expires(pos, moved_deadline(pos, dest));
    dest->bytes_total += len;
    qm_ready_insert(dest, pos);
    QM_PERSIST(moved, pos, src, old_deadline);
    /* MS-MQDMPR Move Message raises Message Position Available on the target unless it is a
     * System queue: readers waiting there are not woken by a move (the next arrival, or a
     * receive, finds it). */
    if (!dest->is_system)
        qm_queue_schedule_dispatch(dest);
    qm_queue_maybe_gc(src);
}

static sl_err move_pos(qm_queue *src, qm_position *pos, qm_queue *dest, qm_tx *tx)
{
    if (!qm_queue_has_room(dest, pos->msg->body_len))
        return SL_ERR_QUEUE_FULL;
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
    /* An outgoing queue's order is its transfer sequence: a message moved in would carry an
     * old lookup id behind ones already sent. Send it there by publishing instead. */
    if (dest->is_outgoing)
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
    qm_position *pos;
    while (!rc && done < n && (pos = qm_queue_peek(src, 0)) != NULL) {
        rc = move_pos(src, pos, dest, tx);
        if (!rc)
            done++;
    }
    if (moved)
        *moved = done;
    return rc;
}
