/* api_move.c - Move Message over HTTP (MS-MQDMPR 3.1.7.1.16, MS-MQRR R_MoveMessage) and the
 * transactions a move can run in. The rules (destinations, who may move what, the
 * transactions' owners) are mq/move.c's; this file turns requests into its calls and its
 * answers into JSON.
 *
 *   POST /api/queues/{vhost}/{name}/move  {"destination": "q2" | "q;sub" | "<format name>",
 *                                          "lookup_id": N | "count": N, "transaction": ID}
 *   POST /api/transactions                 open one -> {"id": ID}
 *   GET  /api/transactions[/{id}]
 *   POST /api/transactions/{id}/commit | /abort   (DELETE /api/transactions/{id} = abort)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "mgmt/mgmt_internal.h"
#include "mq/move.h"

enum MHD_Result mgmt_api_queue_move(req *r, qm_queue *src)
{
    json_t *body = mgmt_req_body(r, 0);
    if (!body)
        return MHD_YES;
    json_t *jl = json_object_get(body, "lookup_id"), *jc = json_object_get(body, "count");
    json_t *jt = json_object_get(body, "transaction");
    int64_t lookup = jl ? defs_json_uint(jl) : -1, count = jc ? defs_json_uint(jc) : -1;
    if ((jl && lookup < 0) || (jc && count < 0) || (!jl && !jc) || (jl && jc))
        return mgmt_reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                                  "give either \"lookup_id\" or \"count\" (non-negative integers)");
    json_t *jd = json_object_get(body, "destination");
    json_t *jv = json_object_get(body, "destination_vhost");
    mq_move_req rq = {
        .user = r->user,
        .src = src,
        .destination = json_is_string(jd) ? json_string_value(jd) : NULL,
        .dest_vhost = json_is_string(jv) ? json_string_value(jv) : NULL,
        .by_lookup = jl != NULL,
        .lookup_id = (uint64_t)lookup,
        .count = (uint64_t)count,
    };
    if (jt && !json_is_null(jt)) {
        int64_t id = defs_json_uint(jt);
        rq.has_tx = 1;
        rq.tx_id = (uint64_t)id;
        if (id < 0 || !mq_tx_get(r->m->mq, rq.tx_id, r->user))
            return mgmt_reply_hresult(
                r, SL_ERR_TRANSACTION_SEQUENCE, NULL,
                "no open transaction with that id (POST /api/transactions opens one)");
    }
    char why[600];
    mq_move_result res;
    sl_err e = mq_move(r->m->mq, &rq, &res, why, sizeof why);
    if (e != SL_OK) {
        json_t *extra = NULL;
        if (e == SL_ERR_QUEUE_FULL && jc)
            extra = json_pack("{s:I}", "moved", (json_int_t)res.moved);
        return mgmt_reply_hresult(r, e, extra, why[0] ? why : NULL);
    }
    json_t *extra = json_pack("{s:I,s:s,s:s}", "moved", (json_int_t)res.moved, "source", src->name,
                              "destination", res.dest->name);
    json_object_set_new(extra, "transaction",
                        res.tx ? json_integer((json_int_t)res.tx->id) : json_null());
    return mgmt_reply_hresult(r, SL_OK, extra, NULL);
}

/* ------------------------------------------------------------------------------------------
 * Transactions
 */

static json_t *tx_json(qm_tx *tx)
{
    return json_pack("{s:I,s:I}", "id", (json_int_t)tx->id, "operations", (json_int_t)tx->n_ops);
}

enum MHD_Result mgmt_api_transactions(req *r)
{
    mgmt *m = r->m;
    if (r->nsegs == 1) {
        if (mgmt_req_is(r, "POST")) {
            qm_tx *tx = mq_tx_begin(m->mq, r->user);
            json_t *j = tx_json(tx);
            json_object_set_new(j, "hresult", json_string("0x00000000"));
            json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
            return mgmt_reply_json(r, 201, j);
        }
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        size_t n;
        qm_tx **v = mq_tx_list(m->mq, r->user, &n);
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(arr, tx_json(v[i]));
        sl_free(v);
        return mgmt_reply_json(r, 200, arr);
    }
    char *end;
    unsigned long long id = strtoull(r->segs[1], &end, 10);
    qm_tx *tx = *end || !*r->segs[1] ? NULL : mq_tx_get(m->mq, id, r->user);
    if (!tx)
        return mgmt_reply_hresult(r, SL_ERR_TRANSACTION_SEQUENCE, NULL,
                                  "no open transaction with that id");
    if (r->nsegs == 2) {
        if (mgmt_req_is(r, "GET"))
            return mgmt_reply_json(r, 200, tx_json(tx));
        if (!mgmt_req_is(r, "DELETE"))
            return mgmt_reply_method_not_allowed(r);
    } else if (r->nsegs != 3 || !mgmt_req_is(r, "POST") ||
               (strcmp(r->segs[2], "commit") && strcmp(r->segs[2], "abort"))) {
        return mgmt_reply_not_found(r);
    }
    int commit = r->nsegs == 3 && !strcmp(r->segs[2], "commit");
    uint64_t voided;
    sl_err e = mq_tx_end(m->mq, tx, commit, &voided);
    json_t *extra =
        json_pack("{s:I,s:s}", "id", (json_int_t)id, "outcome", commit ? "committed" : "aborted");
    if (commit) /* moves whose target was deleted or filled up meanwhile: left in the source */
        json_object_set_new(extra, "moves_voided", json_integer((json_int_t)voided));
    return mgmt_reply_hresult(r, e, extra, NULL);
}
