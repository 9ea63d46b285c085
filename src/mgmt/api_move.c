/* api_move.c - Move Message over HTTP (MS-MQDMPR 3.1.7.1.16, MS-MQRR R_MoveMessage) and the
 * transactions a move can run in.
 *
 *   POST /api/queues/{vhost}/{name}/move  {"destination": "q2" | "q;sub" | "<format name>",
 *                                          "lookup_id": N | "count": N, "transaction": ID}
 *   POST /api/transactions                 open one -> {"id": ID}
 *   GET  /api/transactions[/{id}]
 *   POST /api/transactions/{id}/commit | /abort   (DELETE /api/transactions/{id} = abort)
 *
 * A subqueue destination is created by the move (never by a declare); the journal is
 * read-only and never a destination. Who may move what is decided in one place,
 * move_permitted(). The model enforces the rest: no transactional move into a system queue
 * (MQ_ERROR_TRANSACTION_USAGE), a missing message (MQ_ERROR_MESSAGE_NOT_FOUND), a message
 * someone holds (MQ_ERROR_MESSAGE_LOCKED_UNDER_TRANSACTION), a target at its x-max-length or
 * x-max-length-bytes (MQ_ERROR_INSUFFICIENT_RESOURCES, with "moved" saying how many of a
 * count went before it filled up).
 *
 * Only transactions opened here can be used, committed or aborted here: the node's other
 * transactions belong to AMQP channels, which free them on tx.commit / channel close. An id
 * that names no open transaction (never opened, committed or aborted already) is
 * MQ_ERROR_TRANSACTION_SEQUENCE, as MS-MQDMPR's Prepare/Commit/Abort and MS-MQRR's move give
 * it; MQ_ERROR_TRANSACTION_USAGE is for a transaction used where none may be (a move into a
 * system queue).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/mem.h"
#include "mgmt/mgmt_internal.h"

/* ------------------------------------------------------------------------------------------
 * The registry of HTTP transactions
 */

static int tx_index(mgmt *m, uint64_t id)
{
    for (size_t i = 0; i < m->n_txs; i++)
        if (m->txs[i] == id)
            return (int)i;
    return -1;
}

/* An HTTP transaction belongs to the user who began it: another user (administrators
 * included, as with queue handles) finds no such transaction. */
static qm_tx *tx_get_for(req *r, uint64_t id)
{
    mgmt *m = r->m;
    int i = tx_index(m, id);
    if (i < 0 || strcmp(m->tx_owners[i], r->user))
        return NULL;
    return qm_tx_find(m->n->qm, id);
}

static void tx_forget(mgmt *m, uint64_t id)
{
    int i = tx_index(m, id);
    if (i >= 0) {
        sl_free(m->tx_owners[i]);
        m->n_txs--;
        m->txs[i] = m->txs[m->n_txs];
        m->tx_owners[i] = m->tx_owners[m->n_txs];
    }
}

/* ------------------------------------------------------------------------------------------
 * Move
 */

static int valid_subqueue_name(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 32 && !strpbrk(s, "\\;+,\"/");
}

/* Resolve (and for a new subqueue, create) the destination. NULL after replying. */
static qm_queue *destination(req *r, qm_queue *src, json_t *body)
{
    json_t *jd = json_object_get(body, "destination");
    if (!json_is_string(jd) || !json_string_length(jd)) {
        reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                      "\"destination\" (a queue name) is required");
        return NULL;
    }
    const char *d = json_string_value(jd);
    json_t *jv = json_object_get(body, "destination_vhost");
    const char *vname = json_is_string(jv) ? json_string_value(jv) : src->vhost->name;
    char reason[400];
    if (!strncasecmp(d, "DIRECT=", 7) || !strncasecmp(d, "FormatName:", 11)) {
        qm_queue *q;
        sl_err e =
            fmtname_resolve(r->m, d, json_is_string(jv) ? vname : NULL, &q, reason, sizeof reason);
        if (e != SL_OK) {
            reply_hresult(r, e, NULL, reason);
            return NULL;
        }
        return q;
    }
    qm_vhost *vh = qm_vhost_find(req_node(r), vname, strlen(vname));
    if (!vh) {
        snprintf(reason, sizeof reason, "no vhost '%s'", vname);
        reply_hresult(r, SL_ERR_QUEUE_NOT_FOUND, NULL, reason);
        return NULL;
    }
    const char *semi = strchr(d, ';');
    qm_queue *parent = qm_queue_find(vh, d, semi ? (size_t)(semi - d) : strlen(d));
    if (!parent || parent->is_subqueue) {
        snprintf(reason, sizeof reason, "no queue '%.*s' in vhost '%s'",
                 (int)(semi ? (size_t)(semi - d) : strlen(d)), d, vh->name);
        reply_hresult(r, SL_ERR_QUEUE_NOT_FOUND, NULL, reason);
        return NULL;
    }
    if (!semi)
        return parent;
    const char *sub = semi + 1;
    if (!strcasecmp(sub, "journal")) {
        reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                      "the journal is read-only: messages enter it only when consumed");
        return NULL;
    }
    if (!valid_subqueue_name(sub)) {
        reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                      "a subqueue name is 1..32 characters without \\ ; + , \" /");
        return NULL;
    }
    qm_queue *s = qm_queue_subqueue(parent, sub, strlen(sub), 1);
    /* created empty: if nothing lands in it, dispatch removes it again */
    qm_queue_schedule_dispatch(s);
    return s;
}

/* May the requester move messages from src into dest? SL_OK, or the error with its reason
 * in why. The one place the door decides it, with the access module's MSMQ rule: receive
 * access on the source (read on its queue) and move access on the destination (write on
 * its queue), each in its own vhost, so a move across vhosts is allowed exactly when the
 * user holds both. MSMQ itself allows a move only between a queue and its subqueues; Sluice
 * also moves between queues (and into system queues) under these permissions. */
static sl_err move_permitted(req *r, const qm_queue *src, const qm_queue *dest, char *why,
                             size_t whylen)
{
    if (queue_exclusive_locked(src, why, whylen) || queue_exclusive_locked(dest, why, whylen))
        return SL_ERR_RESOURCE_LOCKED; /* one rule for every door: as over AMQP */
    acc_db *a = r->m->n->acc;
    sl_err e = acc_check_vhost(a, r->user, src->vhost->name, why, whylen);
    if (e == SL_OK && dest->vhost != src->vhost)
        e = acc_check_vhost(a, r->user, dest->vhost->name, why, whylen);
    if (e == SL_OK)
        e = acc_check_move(a, r->user, src->vhost->name, src->name, dest->vhost->name, dest->name,
                           why, whylen);
    return e == SL_OK ? SL_OK : SL_ERR_ACCESS_REFUSED;
}

enum MHD_Result api_queue_move(req *r, qm_queue *src)
{
    json_t *body = req_body(r, 0);
    if (!body)
        return MHD_YES;
    json_t *jl = json_object_get(body, "lookup_id"), *jc = json_object_get(body, "count");
    json_t *jt = json_object_get(body, "transaction");
    int64_t lookup = jl ? json_uint(jl) : -1, count = jc ? json_uint(jc) : -1;
    if ((jl && lookup < 0) || (jc && count < 0) || (!jl && !jc) || (jl && jc))
        return reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                             "give either \"lookup_id\" or \"count\" (non-negative integers)");
    qm_tx *tx = NULL;
    if (jt && !json_is_null(jt)) {
        int64_t id = json_uint(jt);
        tx = id >= 0 ? tx_get_for(r, (uint64_t)id) : NULL;
        if (!tx)
            return reply_hresult(
                r, SL_ERR_TRANSACTION_SEQUENCE, NULL,
                "no open transaction with that id (POST /api/transactions opens one)");
    }
    if (jl) {
        /* check before a subqueue destination is created for nothing */
        qm_position *pos = qm_queue_find_position(src, (uint64_t)lookup);
        if (!pos)
            return reply_hresult(r, SL_ERR_MESSAGE_NOT_FOUND, NULL,
                                 "no message with that lookup id");
    }
    qm_queue *dest = destination(r, src, body);
    if (!dest)
        return MHD_YES;
    char why[600];
    sl_err e = move_permitted(r, src, dest, why, sizeof why);
    if (e != SL_OK)
        return reply_hresult(r, e, NULL, why);
    uint64_t moved = 0;
    if (jl) {
        e = qm_move(src, (uint64_t)lookup, dest, tx);
        moved = e == SL_OK;
    } else {
        e = qm_move_first(src, (uint64_t)count, dest, tx, &moved);
    }
    if (e != SL_OK) {
        const char *reason = e == SL_ERR_TRANSACTION_USAGE ? "a move into a system queue cannot "
                                                             "be transactional"
                             : e == SL_ERR_MESSAGE_LOCKED_UNDER_TX
                                 ? "the message is locked (delivered, or in another transaction)"
                             : e == SL_ERR_INVALID_PARAMETER
                                 ? "source and destination are the same queue"
                                 : NULL;
        if (e == SL_ERR_QUEUE_FULL) {
            snprintf(why, sizeof why,
                     "queue '%s' in vhost '%s' is full (x-max-length / x-max-length-bytes): a "
                     "move never drops or dead-letters a message to make room",
                     dest->name, dest->vhost->name);
            reason = why;
        }
        json_t *extra = NULL;
        if (e == SL_ERR_QUEUE_FULL && jc)
            extra = json_pack("{s:I}", "moved", (json_int_t)moved);
        return reply_hresult(r, e, extra, reason);
    }
    json_t *extra = json_pack("{s:I,s:s,s:s}", "moved", (json_int_t)moved, "source", src->name,
                              "destination", dest->name);
    json_object_set_new(extra, "transaction", tx ? json_integer((json_int_t)tx->id) : json_null());
    return reply_hresult(r, SL_OK, extra, NULL);
}

/* ------------------------------------------------------------------------------------------
 * Transactions
 */

static json_t *tx_json(qm_tx *tx)
{
    return json_pack("{s:I,s:I}", "id", (json_int_t)tx->id, "operations", (json_int_t)tx->n_ops);
}

enum MHD_Result api_transactions(req *r)
{
    mgmt *m = r->m;
    if (r->nsegs == 1) {
        if (req_is(r, "POST")) {
            qm_tx *tx = qm_tx_begin(m->n->qm);
            if (m->n_txs == m->cap_txs) {
                m->cap_txs = m->cap_txs ? m->cap_txs * 2 : 8;
                m->txs = sl_xrealloc(m->txs, m->cap_txs * sizeof *m->txs);
                m->tx_owners = sl_xrealloc(m->tx_owners, m->cap_txs * sizeof *m->tx_owners);
            }
            m->tx_owners[m->n_txs] = sl_xstrdup(r->user);
            m->txs[m->n_txs++] = tx->id;
            json_t *j = tx_json(tx);
            json_object_set_new(j, "hresult", json_string("0x00000000"));
            json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
            return reply_json(r, 201, j);
        }
        if (!req_is(r, "GET"))
            return reply_method_not_allowed(r);
        json_t *arr = json_array();
        for (size_t i = 0; i < m->n_txs; i++) {
            qm_tx *tx = strcmp(m->tx_owners[i], r->user) ? NULL : qm_tx_find(m->n->qm, m->txs[i]);
            if (tx)
                json_array_append_new(arr, tx_json(tx));
        }
        return reply_json(r, 200, arr);
    }
    char *end;
    unsigned long long id = strtoull(r->segs[1], &end, 10);
    qm_tx *tx = *end || !*r->segs[1] ? NULL : tx_get_for(r, id);
    if (!tx)
        return reply_hresult(r, SL_ERR_TRANSACTION_SEQUENCE, NULL,
                             "no open transaction with that id");
    if (r->nsegs == 2) {
        if (req_is(r, "GET"))
            return reply_json(r, 200, tx_json(tx));
        if (!req_is(r, "DELETE"))
            return reply_method_not_allowed(r);
    } else if (r->nsegs != 3 || !req_is(r, "POST") ||
               (strcmp(r->segs[2], "commit") && strcmp(r->segs[2], "abort"))) {
        return reply_not_found(r);
    }
    int commit = r->nsegs == 3 && !strcmp(r->segs[2], "commit");
    tx_forget(m, id);
    sl_err e = SL_OK;
    uint64_t voided = 0;
    if (commit)
        e = qm_tx_commit_counted(tx, &voided);
    else
        qm_tx_abort(tx);
    json_t *extra =
        json_pack("{s:I,s:s}", "id", (json_int_t)id, "outcome", commit ? "committed" : "aborted");
    if (commit) /* moves whose target was deleted or filled up meanwhile: left in the source */
        json_object_set_new(extra, "moves_voided", json_integer((json_int_t)voided));
    return reply_hresult(r, e, extra, NULL);
}
