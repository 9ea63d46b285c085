/* move.c - Move Message (MS-MQDMPR 3.1.7.1.16, MS-MQRR R_MoveMessage) and the transactions a
 * move can run in, for every door (the HTTP API: mgmt/api_move.c).
 *
 * A subqueue destination is created by the move (never by a declare); the journal is
 * read-only and never a destination. Who may move what is decided in one place,
 * move_permitted(). The model enforces the rest: no transactional move into a system queue
 * (MQ_ERROR_TRANSACTION_USAGE), a missing message (MQ_ERROR_MESSAGE_NOT_FOUND), a message
 * someone holds (MQ_ERROR_MESSAGE_LOCKED_UNDER_TRANSACTION), a target at its x-max-length or
 * x-max-length-bytes (MQ_ERROR_INSUFFICIENT_RESOURCES, with the count that went before it
 * filled up).
 *
 * Only transactions opened through a door can be used, committed or aborted there: the node's
 * other transactions belong to AMQP channels, which free them on tx.commit / channel close. An
 * id that names no open transaction (never opened, committed or aborted already) is
 * MQ_ERROR_TRANSACTION_SEQUENCE, as MS-MQDMPR's Prepare/Commit/Abort and MS-MQRR's move give
 * it; MQ_ERROR_TRANSACTION_USAGE is for a transaction used where none may be (a move into a
 * system queue).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/mem.h"
#include "mq/formatname.h"
#include "mq/move.h"
#include "node/rules.h"

/* ------------------------------------------------------------------------------------------
 * The registry of transactions opened through a door
 */

static int tx_index(mq_state *mq, uint64_t id)
{
    for (size_t i = 0; i < mq->n_txs; i++)
        if (mq->txs[i] == id)
            return (int)i;
    return -1;
}

qm_tx *mq_tx_get(mq_state *mq, uint64_t id, const char *user)
{
    int i = tx_index(mq, id);
    if (i < 0 || strcmp(mq->tx_owners[i], user))
        return NULL;
    return qm_tx_find(mq->n->qm, id);
}

static void tx_forget(mq_state *mq, uint64_t id)
{
    int i = tx_index(mq, id);
    if (i >= 0) {
        sl_free(mq->tx_owners[i]);
        mq->n_txs--;
        mq->txs[i] = mq->txs[mq->n_txs];
        mq->tx_owners[i] = mq->tx_owners[mq->n_txs];
    }
}

qm_tx *mq_tx_begin(mq_state *mq, const char *user)
{
    qm_tx *tx = qm_tx_begin(mq->n->qm);
    if (mq->n_txs == mq->cap_txs) {
        mq->cap_txs = mq->cap_txs ? mq->cap_txs * 2 : 8;
        mq->txs = sl_xrealloc(mq->txs, mq->cap_txs * sizeof *mq->txs);
        mq->tx_owners = sl_xrealloc(mq->tx_owners, mq->cap_txs * sizeof *mq->tx_owners);
    }
    mq->tx_owners[mq->n_txs] = sl_xstrdup(user);
    mq->txs[mq->n_txs++] = tx->id;
    return tx;
}

qm_tx **mq_tx_list(mq_state *mq, const char *user, size_t *n)
{
    qm_tx **v = sl_xmalloc((mq->n_txs ? mq->n_txs : 1) * sizeof *v);
    size_t k = 0;
    for (size_t i = 0; i < mq->n_txs; i++) {
        qm_tx *tx = strcmp(mq->tx_owners[i], user) ? NULL : qm_tx_find(mq->n->qm, mq->txs[i]);
        if (tx)
            v[k++] = tx;
    }
    *n = k;
    return v;
}

sl_err mq_tx_end(mq_state *mq, qm_tx *tx, int commit, uint64_t *voided)
{
    *voided = 0;
    tx_forget(mq, tx->id);
    if (commit)
        return qm_tx_commit_counted(tx, voided);
    qm_tx_abort(tx);
    return SL_OK;
}

/* ------------------------------------------------------------------------------------------
 * Move
 */

static int valid_subqueue_name(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 32 && !strpbrk(s, "\\;+,\"/");
}

/* Resolve (and for a new subqueue, create) the destination; NULL with *e and why. */
static qm_queue *destination(mq_state *mq, const mq_move_req *rq, sl_err *e, char *why,
                             size_t whylen)
{
    const char *d = rq->destination;
    if (!d || !*d) {
        *e = SL_ERR_INVALID_PARAMETER;
        snprintf(why, whylen, "\"destination\" (a queue name) is required");
        return NULL;
    }
    const char *vname = rq->dest_vhost ? rq->dest_vhost : rq->src->vhost->name;
    if (!strncasecmp(d, "DIRECT=", 7) || !strncasecmp(d, "FormatName:", 11)) {
        qm_queue *q;
        *e = mq_fmtname_resolve(mq, d, rq->dest_vhost, &q, why, whylen);
        return *e == SL_OK ? q : NULL;
    }
    qm_vhost *vh = qm_vhost_find(mq->n->qm, vname, strlen(vname));
    if (!vh) {
        *e = SL_ERR_QUEUE_NOT_FOUND;
        snprintf(why, whylen, "no vhost '%s'", vname);
        return NULL;
    }
    const char *semi = strchr(d, ';');
    qm_queue *parent = qm_queue_find(vh, d, semi ? (size_t)(semi - d) : strlen(d));
    if (!parent || parent->is_subqueue) {
        *e = SL_ERR_QUEUE_NOT_FOUND;
        snprintf(why, whylen, "no queue '%.*s' in vhost '%s'",
                 (int)(semi ? (size_t)(semi - d) : strlen(d)), d, vh->name);
        return NULL;
    }
    if (!semi)
        return parent;
    const char *sub = semi + 1;
    if (!strcasecmp(sub, "journal")) {
        *e = SL_ERR_INVALID_PARAMETER;
        snprintf(why, whylen, "the journal is read-only: messages enter it only when consumed");
        return NULL;
    }
    if (!valid_subqueue_name(sub)) {
        *e = SL_ERR_INVALID_PARAMETER;
        snprintf(why, whylen, "a subqueue name is 1..32 characters without \\ ; + , \" /");
        return NULL;
    }
    qm_queue *s = qm_queue_subqueue(parent, sub, strlen(sub), 1);
    /* created empty: if nothing lands in it, dispatch removes it again */
    qm_queue_schedule_dispatch(s);
    return s;
}

/* May user move messages from src into dest? SL_OK, or the error with its reason in why.
 * The one place it is decided, with the access module's MSMQ rule: receive access on the
 * source (read on its queue) and move access on the destination (write on its queue), each
 * in its own vhost, so a move across vhosts is allowed exactly when the user holds both.
 * MSMQ itself allows a move only between a queue and its subqueues; Sluice also moves
 * between queues (and into system queues) under these permissions. */
static sl_err move_permitted(mq_state *mq, const char *user, const qm_queue *src,
                             const qm_queue *dest, char *why, size_t whylen)
{
    if (node_queue_locked(src, NULL, why, whylen) != SL_OK ||
        node_queue_locked(dest, NULL, why, whylen) != SL_OK)
        return SL_ERR_RESOURCE_LOCKED; /* one rule for every door: as over AMQP */
    acc_db *a = mq->n->acc;
    sl_err e = acc_check_vhost(a, user, src->vhost->name, why, whylen);
    if (e == SL_OK && dest->vhost != src->vhost)
        e = acc_check_vhost(a, user, dest->vhost->name, why, whylen);
    if (e == SL_OK)
        e = acc_check_move(a, user, src->vhost->name, src->name, dest->vhost->name, dest->name, why,
                           whylen);
    return e == SL_OK ? SL_OK : SL_ERR_ACCESS_REFUSED;
}

sl_err mq_move(mq_state *mq, const mq_move_req *rq, mq_move_result *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof *out);
    why[0] = 0;
    qm_tx *tx = NULL;
    if (rq->has_tx && !(tx = mq_tx_get(mq, rq->tx_id, rq->user))) {
        snprintf(why, whylen, "no open transaction with that id");
        return SL_ERR_TRANSACTION_SEQUENCE;
    }
    /* checked before a subqueue destination is created for nothing */
    if (rq->by_lookup && !qm_queue_find_position(rq->src, rq->lookup_id)) {
        snprintf(why, whylen, "no message with that lookup id");
        return SL_ERR_MESSAGE_NOT_FOUND;
    }
    sl_err e;
    qm_queue *dest = destination(mq, rq, &e, why, whylen);
    if (!dest)
        return e;
    out->dest = dest;
    out->tx = tx;
    if ((e = move_permitted(mq, rq->user, rq->src, dest, why, whylen)) != SL_OK)
        return e;
    why[0] = 0;
    if (rq->by_lookup) {
        e = qm_move(rq->src, rq->lookup_id, dest, tx);
        out->moved = e == SL_OK;
    } else {
        e = qm_move_first(rq->src, rq->count, dest, tx, &out->moved);
    }
    if (e == SL_ERR_QUEUE_FULL)
        snprintf(why, whylen,
                 "queue '%s' in vhost '%s' is full (x-max-length / x-max-length-bytes): a "
                 "move never drops or dead-letters a message to make room",
                 dest->name, dest->vhost->name);
    else if (e == SL_ERR_TRANSACTION_USAGE)
        snprintf(why, whylen, "a move into a system queue cannot be transactional");
    else if (e == SL_ERR_MESSAGE_LOCKED_UNDER_TX)
        snprintf(why, whylen, "the message is locked (delivered, or in another transaction)");
    else if (e == SL_ERR_INVALID_PARAMETER)
        snprintf(why, whylen, "source and destination are the same queue");
    return e;
}
