/* api_handles.c - MSMQ queue handles over HTTP: MS-MQMP's rpc_QMOpenQueueInternal,
 * rpc_ACPurgeQueue and rpc_ACCloseHandle as resources (reference/msmq.md sections 2.1, 2.8,
 * 5.2, 5.3). The handles, their rules and their remote proxies are mq/handle.c's; this file
 * only turns requests into its calls and its answers into JSON.
 *
 *   POST   /api/msmq/handles           {"format_name": F | "queue": NAME, "vhost": V,
 *                                       "access": "receive", "share": "deny_none"}
 *                                      -> 201 {"handle": H, "kind": "local", ...}
 *   POST   /api/msmq/handles/H/purge   Purge Queue -> {"message_count", "purge_pending"}
 *   DELETE /api/msmq/handles/H         close
 *   GET    /api/msmq/handles[/H]       the caller's handles (?all=true: everyone's, for
 *                                      administrators)
 *
 * Every reply carries "hresult" and "hresult_name". A request to a remote proxy's owner
 * suspends the HTTP request (mgmt_req_suspend) until the answer, or an error after
 * handle_remote_timeout; a close answers MQ_OK at once (the owner is told in the background).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "link/link.h"
#include "mgmt/mgmt_internal.h"
#include "mq/formatname.h"
#include "mq/handle.h"

/* ------------------------------------------------------------------------------------------
 * Access modes and share modes (MQACCESS, MQSHARE) as JSON
 */

/* "receive", "peek|admin", "MQ_RECEIVE_ACCESS", 1, 0x81...; absent = receive. -1 when it names
 * no access bits. */
static int parse_access(json_t *v, uint32_t *out)
{
    if (!v || json_is_null(v)) {
        *out = QM_ACCESS_RECEIVE;
        return 0;
    }
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (!mq_handle_access_valid(n))
            return -1;
        *out = (uint32_t)n;
        return 0;
    }
    if (!json_is_string(v))
        return -1;
    return mq_handle_access_parse(json_string_value(v), out);
}

/* "deny_none" / "deny_receive" (also with '-', MQ_DENY_NONE, MQ_DENY_RECEIVE_SHARE, 0, 1);
 * absent = deny_none. -1 otherwise. */
static int parse_share(json_t *v, int *out)
{
    *out = QM_SHARE_DENY_NONE;
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (!mq_handle_share_valid(n))
            return -1;
        *out = (int)n;
        return 0;
    }
    if (!json_is_string(v))
        return -1;
    return mq_handle_share_parse(json_string_value(v), out);
}

/* ------------------------------------------------------------------------------------------
 * Views
 */

static json_t *handle_json(mgmt *m, mq_handle *h)
{
    char acc[64];
    mq_handle_access_str(h->d ? h->d->access : h->access, acc, sizeof acc);
    qm_queue *q = h->d ? qm_qdesc_queue(h->d) : NULL;
    uint64_t now = sl_now_ms();
    if (h->kind == HANDLE_REMOTE) {
        char owner[300];
        snprintf(owner, sizeof owner, "%s:%d", h->host, h->port);
        json_t *o = json_pack(
            "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I}", "handle", h->e.id, "kind",
            "remote", "owner", owner, "format_name", h->format_name, "vhost",
            h->vhost ? h->vhost : "", "queue", h->queue ? h->queue : "", "access", acc, "share",
            h->share == QM_SHARE_DENY_RECEIVE ? "deny_receive" : "deny_none", "user", h->e.owner,
            "opened_at", (json_int_t)h->e.opened_wall_ms, "idle_ms",
            (json_int_t)(now - h->e.last_used_ms), "incarnation", (json_int_t)h->incarnation,
            "idle_timeout_s", (json_int_t)m->n->cfg->handle_idle_timeout_s);
        json_object_set_new(o, "remote_context", json_string(h->context ? h->context : ""));
        return o;
    }
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:b,s:I}", "handle", h->e.id, "kind", "local",
        "format_name", h->format_name, "vhost", h->vhost, "queue", h->queue, "access", acc, "share",
        h->d && h->d->share == QM_SHARE_DENY_RECEIVE ? "deny_receive" : "deny_none", "user",
        h->e.owner, "opened_at", (json_int_t)h->e.opened_wall_ms, "idle_ms",
        (json_int_t)(now - h->e.last_used_ms), "queue_deleted", q == NULL, "incarnation",
        (json_int_t)h->incarnation);
    json_object_set_new(o, "idle_timeout_s",
                        json_integer((json_int_t)m->n->cfg->handle_idle_timeout_s));
    return o;
}

/* ------------------------------------------------------------------------------------------
 * Open (rpc_QMOpenQueueInternal, MS-MQDMPR Open Queue)
 */

/* The owner's failure (its HRESULT, name and reason) or the transport's, as our reply. */
static enum MHD_Result reply_owner_failure(req *r, json_t *reply, mq_handle *h, const char *what)
{
    char reason[800];
    if (!reply) {
        snprintf(reason, sizeof reason, "%s: node %s:%d did not answer (%s)", what, h->host,
                 h->port, r->async_err ? r->async_err : "no answer");
        return mgmt_reply_hresult(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE,
                                  json_pack("{s:s}", "handle", h->e.id), reason);
    }
    const char *hr = json_string_value(json_object_get(reply, "hresult"));
    const char *name = json_string_value(json_object_get(reply, "hresult_name"));
    const char *why = json_string_value(json_object_get(reply, "reason"));
    snprintf(reason, sizeof reason, "%s: node %s:%d answered: %s", what, h->host, h->port,
             why ? why : "a failure");
    return mgmt_reply_remote_hresult(r, hr, name, reason, json_pack("{s:s}", "handle", h->e.id));
}

/* The request waits for the owner's next answer. */
static void req_rearm(req *r, mq_handle *h)
{
    sl_free(r->async_reply);
    sl_free(r->async_err);
    r->async_reply = r->async_err = NULL;
    memcpy(r->async_tag, h->e.id, CTX_ID_LEN + 1);
}

static enum MHD_Result open_resumed(req *r);

/* The owner named the queue (queue.resolve): check this node's user on that name, then open
 * exactly it (RemoteQMOpenQueue). A refusal has opened nothing anywhere. */
static enum MHD_Result resolve_resumed(req *r)
{
    mq_handle *h = mq_handle_find(r->m->mq, r->async_tag);
    json_t *reply = mgmt_req_async_json(r);
    if (!h) { /* cannot happen: busy handles are not run down and nobody knows the id yet */
        if (reply)
            json_decref(reply);
        return mgmt_reply_hresult(r, SL_ERR_INTERNAL, NULL, "the handle went away while opening");
    }
    char reason[700];
    int owner_failed;
    char *prev_reply = r->async_reply, *prev_err = r->async_err;
    r->async_reply = r->async_err = NULL; /* the next answer's, once asked */
    memcpy(r->async_tag, h->e.id, CTX_ID_LEN + 1);
    sl_err e = mq_handle_remote_resolved(r->m->mq, r->user, h, prev_reply, mgmt_req_link_done, r,
                                         &owner_failed, reason, sizeof reason);
    enum MHD_Result rc = MHD_YES;
    if (e != SL_OK) {
        r->async_reply = prev_reply;
        r->async_err = prev_err;
        prev_reply = prev_err = NULL;
        rc = owner_failed ? reply_owner_failure(r, reply, h, "RemoteQMOpenQueue")
                          : mgmt_reply_hresult(r, e, NULL, reason);
        mq_handle_discard(r->m->mq, h);
    } else {
        mgmt_req_suspend(r, open_resumed);
    }
    sl_free(prev_reply);
    sl_free(prev_err);
    if (reply)
        json_decref(reply);
    return rc;
}

static enum MHD_Result open_resumed(req *r)
{
    mq_handle *h = mq_handle_find(r->m->mq, r->async_tag);
    json_t *reply = mgmt_req_async_json(r);
    if (!h) { /* cannot happen: busy handles are not run down and nobody knows the id yet */
        if (reply)
            json_decref(reply);
        return mgmt_reply_hresult(r, SL_ERR_INTERNAL, NULL, "the handle went away while opening");
    }
    char reason[700];
    int owner_failed;
    sl_err e = mq_handle_remote_opened(r->m->mq, r->user, h, r->async_reply, &owner_failed, reason,
                                       sizeof reason);
    if (e != SL_OK) {
        enum MHD_Result rc = owner_failed ? reply_owner_failure(r, reply, h, "RemoteQMOpenQueue")
                                          : mgmt_reply_hresult(r, e, NULL, reason);
        mq_handle_discard(r->m->mq, h);
        if (reply)
            json_decref(reply);
        return rc;
    }
    json_decref(reply);
    json_t *j = handle_json(r->m, h);
    json_object_set_new(j, "hresult", json_string("0x00000000"));
    json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
    return mgmt_reply_json(r, 201, j);
}

static enum MHD_Result open_remote(req *r, const char *fmt, const eod_addr *ra, uint32_t access,
                                   int share, const char *vhost)
{
    char reason[700];
    mq_handle *h;
    sl_err e = mq_handle_open_remote(r->m->mq, r->user, fmt, ra, access, share, vhost,
                                     mgmt_req_link_done, r, &h, reason, sizeof reason);
    if (e != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason);
    memcpy(r->async_tag, h->e.id, CTX_ID_LEN + 1);
    mgmt_req_suspend(r, resolve_resumed);
    return MHD_YES;
}

static enum MHD_Result open_handle(req *r)
{
    json_t *body = mgmt_req_body(r, 0);
    if (!body)
        return MHD_YES;
    json_t *jf = json_object_get(body, "format_name"), *jq = json_object_get(body, "queue");
    json_t *jv = json_object_get(body, "vhost");
    const char *vhost = json_is_string(jv) ? json_string_value(jv) : NULL;
    if (!json_is_string(jf) == !json_is_string(jq) || (jv && !json_is_null(jv) && !vhost))
        return mgmt_reply_hresult(
            r, SL_ERR_INVALID_PARAMETER, NULL,
            "give \"format_name\" or \"queue\" (a string), not both; \"vhost\" "
            "is a string");
    uint32_t access;
    int share;
    if (parse_access(json_object_get(body, "access"), &access) < 0)
        return mgmt_reply_hresult(r, SL_ERR_UNSUPPORTED_ACCESS_MODE, NULL,
                                  "\"access\" is receive, send, move or peek (or their MQ_*_ACCESS "
                                  "names or values)");
    if (parse_share(json_object_get(body, "share"), &share) < 0)
        return mgmt_reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                                  "\"share\" is deny_none or deny_receive");
    char reason[600];
    qm_queue *q = NULL;
    sl_err e;
    if (json_is_string(jf)) {
        const char *fmt = json_string_value(jf);
        eod_addr ra;
        int remote;
        e = mq_handle_resolve(r->m->mq, fmt, vhost, access, &q, &ra, &remote, reason,
                              sizeof reason);
        if (e == SL_OK && remote)
            return open_remote(r, fmt, &ra, access, share, vhost);
    } else {
        e = mq_handle_resolve_name(r->m->mq, vhost, json_string_value(jq), json_string_length(jq),
                                   &q, reason, sizeof reason);
    }
    if (e != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason);
    mq_handle *h;
    if ((e = mq_handle_open_local(r->m->mq, r->user, q, access, share, &h, reason,
                                  sizeof reason)) != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason);
    json_t *j = handle_json(r->m, h);
    json_object_set_new(j, "hresult", json_string("0x00000000"));
    json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
    return mgmt_reply_json(r, 201, j);
}

/* ------------------------------------------------------------------------------------------
 * Purge (rpc_ACPurgeQueue), close (rpc_ACCloseHandle), list
 */

static enum MHD_Result purge_resumed(req *r)
{
    mq_handle *h = mq_handle_find(r->m->mq, r->async_tag);
    json_t *reply = mgmt_req_async_json(r);
    enum MHD_Result rc;
    uint64_t purged, pending;
    if (!h) { /* closed while the owner purged: the owner's answer is lost with it */
        rc = mgmt_reply_hresult(r, SL_ERR_INVALID_HANDLE, NULL, "the handle was closed meanwhile");
    } else if (mq_handle_purge_answered(h, r->async_reply, &purged, &pending) != SL_OK) {
        rc = reply_owner_failure(r, reply, h, "RemoteQMPurgeQueue");
    } else {
        char owner[300];
        snprintf(owner, sizeof owner, "%s:%d", h->host, h->port);
        rc = mgmt_reply_hresult(r, SL_OK,
                                json_pack("{s:s,s:s,s:s,s:s,s:I,s:I}", "handle", h->e.id, "owner",
                                          owner, "vhost", h->vhost, "queue", h->queue,
                                          "message_count", (json_int_t)purged, "purge_pending",
                                          (json_int_t)pending),
                                NULL);
    }
    if (reply)
        json_decref(reply);
    return rc;
}

static enum MHD_Result purge_handle(req *r, mq_handle *h)
{
    char reason[600];
    uint64_t n = 0;
    int pending;
    req_rearm(r, h);
    sl_err e = mq_handle_purge(r->m->mq, r->user, h, &n, &pending, mgmt_req_link_done, r, reason,
                               sizeof reason);
    if (e != SL_OK)
        return mgmt_reply_hresult(r, e, json_pack("{s:s}", "handle", h->e.id), reason);
    if (pending) {
        mgmt_req_suspend(r, purge_resumed);
        return MHD_YES;
    }
    qm_queue *q = qm_qdesc_queue(h->d);
    return mgmt_reply_hresult(r, SL_OK,
                              json_pack("{s:s,s:s,s:s,s:I,s:I}", "handle", h->e.id, "vhost",
                                        h->vhost, "queue", h->queue, "message_count", (json_int_t)n,
                                        "purge_pending", (json_int_t)q->n_purge_pending),
                              NULL);
}

static enum MHD_Result list_handles(req *r)
{
    mq_caller who = {.user = r->user, .is_admin = r->is_admin};
    char reason[200];
    size_t n;
    mq_handle **v;
    sl_err e = mq_handle_list(r->m->mq, &who, mgmt_req_query_bool(r, "all"), &v, &n, reason,
                              sizeof reason);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", reason);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, handle_json(r->m, v[i]));
    sl_free(v);
    return mgmt_reply_json(r, 200, arr);
}

enum MHD_Result mgmt_api_handles(req *r)
{
    /* segs: msmq handles [H [purge]] */
    if (r->nsegs == 2) {
        if (mgmt_req_is(r, "POST"))
            return open_handle(r);
        if (mgmt_req_is(r, "GET"))
            return list_handles(r);
        return mgmt_reply_method_not_allowed(r);
    }
    if (r->nsegs > 4 || (r->nsegs == 4 && strcmp(r->segs[3], "purge")))
        return mgmt_reply_not_found(r);
    if (r->nsegs == 4 && !mgmt_req_is(r, "POST"))
        return mgmt_reply_method_not_allowed(r);
    if (r->nsegs == 3 && !mgmt_req_is(r, "GET") && !mgmt_req_is(r, "DELETE"))
        return mgmt_reply_method_not_allowed(r);
    char reason[400];
    mq_handle *h;
    sl_err e = mq_handle_lookup(r->m->mq, r->segs[2], r->user, &h, reason, sizeof reason);
    if (e != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason);
    if (r->nsegs == 4)
        return purge_handle(r, h);
    if (mgmt_req_is(r, "GET")) {
        const char *fmt; /* the view carries it: the check is rpc_ACHandleToFormatName's */
        if ((e = mq_handle_format_name(r->m->mq, r->user, h, &fmt, reason, sizeof reason)) != SL_OK)
            return mgmt_reply_hresult(r, e, json_pack("{s:s}", "handle", h->e.id), reason);
        json_t *j = handle_json(r->m, h);
        json_object_set_new(j, "hresult", json_string("0x00000000"));
        json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
        return mgmt_reply_json(r, 200, j);
    }
    /* close: Close Queue; a handle whose queue is gone closes fine (MS-MQDMPR: ignored) */
    char id[CTX_ID_LEN + 1];
    memcpy(id, h->e.id, sizeof id);
    sl_debug("management: user '%s' closed handle %s", r->user, id);
    mq_handle_discard(r->m->mq, h);
    return mgmt_reply_hresult(r, SL_OK, json_pack("{s:s,s:b}", "handle", id, "closed", 1), NULL);
}
