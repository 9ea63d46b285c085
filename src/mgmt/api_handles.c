/* api_handles.c - MSMQ queue handles over HTTP: MS-MQMP's rpc_QMOpenQueueInternal,
 * rpc_ACPurgeQueue and rpc_ACCloseHandle as resources (reference/msmq.md sections 2.1, 2.8,
 * 5.2, 5.3).
 *
 *   POST   /api/msmq/handles           {"format_name": F | "queue": NAME, "vhost": V,
 *                                       "access": "receive", "share": "deny_none"}
 *                                      -> 201 {"handle": H, "kind": "local", ...}
 *   POST   /api/msmq/handles/H/purge   Purge Queue -> {"message_count", "purge_pending"}
 *   DELETE /api/msmq/handles/H         close
 *   GET    /api/msmq/handles[/H]       the caller's handles (?all=true: everyone's, for
 *                                      administrators)
 *
 * A local handle is MS-MQMP's LocalQueueContextHandle: it wraps an open queue descriptor
 * (qm_qdesc, qm.h) of this node's queue, so it names one incarnation of the queue: once that
 * queue is deleted the handle purges nothing and fails with MQ_ERROR_QUEUE_DELETED, even when a
 * queue of the same name was declared since. The ids, ownership, per-user limit and the idle
 * rundown are ctxtab.c's. Every reply carries "hresult" and "hresult_name".
 *
 * A remote handle is MS-MQMP's RemoteQueueProxyHandle: opened on a direct format name of
 * another node, it holds the context the owner gave (MS-MQQP RemoteQMOpenQueue over the link's
 * request channel, link_rpc_call; the owner's side is link/rpc_queue.c). A purge is forwarded
 * (RemoteQMPurgeQueue) and answers with the owner's HRESULT and count; a close answers MQ_OK at
 * once and tells the owner in the background (RemoteQMCloseQueue, MS-MQMP: "SHOULD be done
 * asynchronously"), as does the rundown. The owner checks its own incarnations, and a context
 * from before its restart is MQ_ERROR_STALE_HANDLE there, so a proxy never purges another
 * queue than the one it opened. Requests to the owner suspend the HTTP request
 * (req_suspend) until the answer, or an error after handle_remote_timeout.
 *
 * The DCE/RPC door (msrpc_qmcomm.c) opens, purges and closes through the same functions
 * (handle_resolve, handle_open_local, handle_open_remote and its two answers, handle_purge,
 * handle_discard); its handles carry the RPC session that opened them and are run down with
 * it.
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

enum handle_kind { HANDLE_LOCAL = 0, HANDLE_REMOTE };

struct handle {
    ctx_entry e; /* first: the table holds &e */
    int kind;
    uint64_t rpc_session; /* opened over DCE/RPC (msrpc_qmcomm.c): its session; 0 over HTTP */
    qm_qdesc *d;          /* HANDLE_LOCAL: the open descriptor */
    char *format_name;    /* the queue's format name when it was opened */
    char *vhost, *queue;
    uint64_t incarnation;
    /* HANDLE_REMOTE: the owning node, the context it gave, the access asked */
    char *host;
    int port;
    char *context; /* NULL while the open is on its way */
    uint32_t access;
    int share;
};

static void forget_remote(mgmt *m, const char *host, int port, const char *context);

static void handle_close(mgmt *m, ctx_entry *e)
{
    handle *h = (handle *)e;
    if (h->d)
        qm_qdesc_close(h->d);
    if (h->context) {
        forget_remote(m, h->host, h->port, h->context);
        if (m->n->links)
            link_rpc_hold(m->n->links, h->host, h->port, -1);
    }
    sl_free(h->host);
    sl_free(h->context);
    sl_free(h->format_name);
    sl_free(h->vhost);
    sl_free(h->queue);
    ctx_entry_free(&h->e);
    sl_free(h);
}

void handles_init(mgmt *m)
{
    ctxtab_init(&m->handles, "handle", handle_close);
}

/* ------------------------------------------------------------------------------------------
 * Access modes and share modes (MQACCESS, MQSHARE)
 */

static const struct {
    const char *name, *mq;
    uint32_t bit;
} access_names[] = {
    {"receive", "MQ_RECEIVE_ACCESS", QM_ACCESS_RECEIVE}, {"send", "MQ_SEND_ACCESS", QM_ACCESS_SEND},
    {"move", "MQ_MOVE_ACCESS", QM_ACCESS_MOVE},          {"peek", "MQ_PEEK_ACCESS", QM_ACCESS_PEEK},
    {"admin", "MQ_ADMIN_ACCESS", QM_ACCESS_ADMIN},
};

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
        if (n <= 0 || n > 0xFF)
            return -1;
        *out = (uint32_t)n;
        return 0;
    }
    if (!json_is_string(v))
        return -1;
    const char *s = json_string_value(v);
    uint32_t bits = 0;
    while (*s) {
        size_t n = strcspn(s, "|,+ ");
        size_t i;
        for (i = 0; i < sizeof access_names / sizeof access_names[0]; i++)
            if ((strlen(access_names[i].name) == n && !strncasecmp(s, access_names[i].name, n)) ||
                (strlen(access_names[i].mq) == n && !strncasecmp(s, access_names[i].mq, n)))
                break;
        if (n && i == sizeof access_names / sizeof access_names[0])
            return -1;
        if (n)
            bits |= access_names[i].bit;
        s += n;
        s += strspn(s, "|,+ ");
    }
    if (!bits)
        return -1;
    *out = bits;
    return 0;
}

static void access_str(uint32_t access, char *buf, size_t len)
{
    buf[0] = 0;
    size_t off = 0;
    for (size_t i = 0; i < sizeof access_names / sizeof access_names[0]; i++)
        if (access & access_names[i].bit)
            off += (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%s", off ? "|" : "",
                                    access_names[i].name);
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
        if (n != QM_SHARE_DENY_NONE && n != QM_SHARE_DENY_RECEIVE)
            return -1;
        *out = (int)n;
        return 0;
    }
    if (!json_is_string(v))
        return -1;
    const char *s = json_string_value(v);
    if (str_ieq(s, "deny_none") || str_ieq(s, "deny-none") || str_ieq(s, "MQ_DENY_NONE"))
        return 0;
    if (str_ieq(s, "deny_receive") || str_ieq(s, "deny-receive") ||
        str_ieq(s, "MQ_DENY_RECEIVE_SHARE")) {
        *out = QM_SHARE_DENY_RECEIVE;
        return 0;
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------
 * Who may do what
 *
 * The one place a handle operation asks whether its user may do it, in the access module's
 * terms (MSMQ rights on RabbitMQ permissions, README "Who may do what"): opening with
 * receive or peek access (and so a purge) needs read on the queue, send and move access
 * write, admin access (the outgoing queue's) the administrator tag; a handle belongs to the
 * user that opened it (ctxtab.c).
 */
static sl_err handle_may_name(mgmt *m, const char *user, const char *vh, const char *queue,
                              uint32_t access, char *err, size_t errlen)
{
    acc_db *a = m->n->acc;
    if (!a)
        return SL_OK;
    sl_err e = acc_check_vhost(a, user, vh, err, errlen);
    if (e != SL_OK)
        return SL_ERR_ACCESS_REFUSED;
    if ((access & (QM_ACCESS_RECEIVE | QM_ACCESS_PEEK)) &&
        (e = acc_check_receive(a, user, vh, queue, err, errlen)) != SL_OK)
        return e;
    if ((access & (QM_ACCESS_SEND | QM_ACCESS_MOVE)) &&
        (e = acc_check(a, user, vh, ACC_QUEUE, queue, strlen(queue), ACC_WRITE, err, errlen)) !=
            SL_OK)
        return e;
    if ((access & QM_ACCESS_ADMIN) && !acc_is_admin(a, user)) {
        snprintf(err, errlen,
                 "admin access to '%s' refused for user '%s': administrator tag "
                 "required",
                 queue, user);
        return SL_ERR_ACCESS_REFUSED;
    }
    return SL_OK;
}

static sl_err handle_may(mgmt *m, const char *user, qm_queue *q, uint32_t access, char *err,
                         size_t errlen)
{
    return handle_may_name(m, user, q->vhost->name, q->name, access, err, errlen);
}

/* Every operation through an open handle but its close asks again, at that moment, on the
 * canonical name the handle holds (for a remote proxy: the name the owner resolved, never the
 * spelling the user wrote), so a permission deleted or narrowed since the open applies to the
 * very next operation, local or remote alike (README "Who may do what"). Closing is never
 * refused: it only gives up access. A remote proxy's own owner checks its link's user too
 * (rpc_queue.c), so each side checks the user it knows. */
static sl_err handle_recheck(mgmt *m, const char *user, handle *h, uint32_t access, char *err,
                             size_t errlen)
{
    /* a local handle whose queue is gone reaches nothing (MQ_ERROR_QUEUE_DELETED tells so,
     * even when the vhost went with it) */
    if (h->kind == HANDLE_LOCAL && h->d && !qm_qdesc_queue(h->d))
        return SL_OK;
    if (!h->vhost || !h->queue || !h->queue[0]) {
        snprintf(err, errlen, "handle %s names no resolved queue yet", h->e.id);
        return SL_ERR_ACCESS_REFUSED;
    }
    return handle_may_name(m, user, h->vhost, h->queue, access, err, errlen);
}

sl_err handle_format_name(mgmt *m, const char *user, handle *h, const char **fmt, char *err,
                          size_t errlen)
{
    sl_err e = handle_recheck(m, user, h, h->d ? h->d->access : h->access, err, errlen);
    *fmt = e == SL_OK ? h->format_name : NULL;
    return e;
}

/* ------------------------------------------------------------------------------------------
 * Views
 */

static json_t *handle_json(mgmt *m, handle *h)
{
    char acc[64];
    access_str(h->d ? h->d->access : h->access, acc, sizeof acc);
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

/* ---- requests to the owning node ---- */

static void ignore_reply(void *ctx, const char *reply, const char *err)
{
    (void)ctx;
    (void)reply;
    (void)err;
}

/* RemoteQMCloseQueue, in the background: nobody waits for it. If the owner cannot be told,
 * its side closes the context when the link goes, or after an hour unused. */
static void forget_remote(mgmt *m, const char *host, int port, const char *context)
{
    if (!m->n->links)
        return;
    json_t *j = json_pack("{s:s,s:s}", "op", "queue.close", "context", context);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (link_rpc_call(m->n->links, host, port, text, m->n->cfg->handle_remote_timeout_ms,
                      ignore_reply, NULL) != SL_OK)
        sl_debug("management: could not tell %s:%d to close context %s", host, port, context);
    free(text);
}

static int reply_ok(const json_t *reply)
{
    return reply && json_is_true(json_object_get(reply, "ok"));
}

/* The owner's failure (its HRESULT, name and reason) or the transport's, as our reply. */
static enum MHD_Result reply_owner_failure(req *r, json_t *reply, handle *h, const char *what)
{
    char reason[800];
    if (!reply) {
        snprintf(reason, sizeof reason, "%s: node %s:%d did not answer (%s)", what, h->host,
                 h->port, r->async_err ? r->async_err : "no answer");
        return reply_hresult(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE,
                             json_pack("{s:s}", "handle", h->e.id), reason);
    }
    const char *hr = json_string_value(json_object_get(reply, "hresult"));
    const char *name = json_string_value(json_object_get(reply, "hresult_name"));
    const char *why = json_string_value(json_object_get(reply, "reason"));
    snprintf(reason, sizeof reason, "%s: node %s:%d answered: %s", what, h->host, h->port,
             why ? why : "a failure");
    return reply_remote_hresult(r, hr, name, reason, json_pack("{s:s}", "handle", h->e.id));
}

/* Send request j (consumed) to h's owner; the answer resumes r with fn. A request that
 * cannot be sent closes h and answers MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE. */
/* Send j (taken) to h's owner; its answer goes to cb(ctx, ...). The handle is busy until the
 * caller takes the answer. SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE when the owner cannot be
 * asked (the handle is left to the caller). */
static sl_err handle_ask_owner(mgmt *m, handle *h, json_t *j, handle_answer_fn cb, void *ctx,
                               char *reason, size_t rlen)
{
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    sl_err e = m->n->links ? link_rpc_call(m->n->links, h->host, h->port, text,
                                           m->n->cfg->handle_remote_timeout_ms, cb, ctx)
                           : SL_ERR_NOT_ALLOWED;
    free(text);
    if (e != SL_OK) {
        snprintf(reason, rlen, "cannot ask node %s:%d%s", h->host, h->port,
                 e == SL_ERR_NOT_ALLOWED ? ": this node is offline (DISCONNECT)" : "");
        return SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE;
    }
    h->e.busy = 1;
    return SL_OK;
}

/* The request waits for the owner's next answer. */
static void req_rearm(req *r, handle *h)
{
    sl_free(r->async_reply);
    sl_free(r->async_err);
    r->async_reply = r->async_err = NULL;
    memcpy(r->async_tag, h->e.id, CTX_ID_LEN + 1);
}

/* The open of a remote proxy, for every door, in the owner's two answers (HTTP below,
 * DCE/RPC in msrpc_qmcomm.c):
 *   handle_open_remote      a proxy, busy; the owner is asked which queue the name is
 *                           (queue.resolve);
 *   handle_remote_resolved  its answer: the user is checked on that name, then the owner is
 *                           asked to open exactly it (queue.open);
 *   handle_remote_opened    its answer: checked again on the queue opened, the context taken.
 * On an error the handle is left to the caller (to report, then handle_discard);
 * *owner_failed says that the owner refused (its answer carries its HRESULT). */
sl_err handle_remote_resolved(mgmt *m, const char *user, handle *h, json_t *reply,
                              handle_answer_fn cb, void *ctx, int *owner_failed, char *reason,
                              size_t rlen)
{
    h->e.busy = 0;
    *owner_failed = 0;
    json_t *jv = reply_ok(reply) ? json_object_get(reply, "vhost") : NULL;
    json_t *jq = reply_ok(reply) ? json_object_get(reply, "queue") : NULL;
    if (!json_is_string(jv) || !json_is_string(jq)) {
        *owner_failed = 1;
        snprintf(reason, rlen, "the owner did not resolve the name");
        return SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE;
    }
    sl_free(h->vhost);
    sl_free(h->queue);
    h->vhost = sl_xstrdup(json_string_value(jv));
    h->queue = sl_xstrdup(json_string_value(jq));
    sl_err e = handle_recheck(m, user, h, h->access, reason, rlen);
    if (e != SL_OK) {
        sl_debug("management: remote handle of user '%s' on %s refused: the owner resolves it "
                 "to queue '%s' in vhost '%s'",
                 user, h->format_name, h->queue, h->vhost);
        return e;
    }
    return handle_ask_owner(m, h,
                            json_pack("{s:s,s:s,s:s,s:i,s:i}", "op", "queue.open", "vhost",
                                      h->vhost, "queue", h->queue, "access", (int)h->access,
                                      "share", h->share),
                            cb, ctx, reason, rlen);
}

sl_err handle_remote_opened(mgmt *m, const char *user, handle *h, json_t *reply, int *owner_failed,
                            char *reason, size_t rlen)
{
    h->e.busy = 0;
    *owner_failed = 0;
    const char *c = reply_ok(reply) ? json_string_value(json_object_get(reply, "context")) : NULL;
    if (!c) {
        *owner_failed = 1;
        snprintf(reason, rlen, "the owner did not open the queue");
        return SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE;
    }
    /* Checked again on the queue the owner opened (it may differ from the one resolved if
     * a queue was deleted and declared again meanwhile): a refusal gives the context back. */
    json_t *jv = json_object_get(reply, "vhost"), *jq = json_object_get(reply, "queue");
    sl_free(h->vhost);
    sl_free(h->queue);
    h->vhost = sl_xstrdup(json_is_string(jv) ? json_string_value(jv) : "");
    h->queue = sl_xstrdup(json_is_string(jq) ? json_string_value(jq) : "");
    sl_err pe = handle_recheck(m, user, h, h->access, reason, rlen);
    if (pe != SL_OK) {
        sl_info("management: remote handle of user '%s' on %s refused: the owner resolved it "
                "to queue '%s' in vhost '%s' (%s)",
                user, h->format_name, h->queue, h->vhost, reason);
        forget_remote(m, h->host, h->port, c);
        return pe;
    }
    h->context = sl_xstrdup(c);
    link_rpc_hold(m->n->links, h->host, h->port, +1); /* the owner's context lives with it */
    h->incarnation = (uint64_t)json_integer_value(json_object_get(reply, "incarnation"));
    h->e.last_used_ms = sl_now_ms();
    sl_debug("management: user '%s' opened remote handle %s on %s (context %s)", user, h->e.id,
             h->format_name, h->context);
    return SL_OK;
}

void handle_discard(mgmt *m, handle *h)
{
    ctx_remove(&m->handles, &h->e);
    handle_close(m, &h->e);
}

handle *handle_find(mgmt *m, const char *id)
{
    return (handle *)sl_map_get(m->handles.by_id, id, CTX_ID_LEN);
}

const char *handle_id(const handle *h)
{
    return h->e.id;
}

const char *handle_owner(const handle *h)
{
    return h->e.owner;
}

uint64_t handle_session(const handle *h)
{
    return h->rpc_session;
}

void handle_set_session(handle *h, uint64_t session)
{
    h->rpc_session = session;
}

void handle_answered(handle *h)
{
    h->e.busy = 0;
    h->e.last_used_ms = sl_now_ms();
}

int handle_busy(const handle *h)
{
    return h->e.busy;
}

int handle_is_remote(const handle *h)
{
    return h->kind == HANDLE_REMOTE;
}

uint32_t handle_owner_hresult(const json_t *reply)
{
    const char *hr = reply ? json_string_value(json_object_get(reply, "hresult")) : NULL;
    return hr ? (uint32_t)strtoul(hr, NULL, 16)
              : sl_err_get(SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE)->hresult;
}

/* Every handle a DCE/RPC session opened, closed when the session goes (the context handles'
 * rundown). A handle waiting for its owner is left to that answer, which finds the session
 * gone and closes it then. */
void handles_rundown_session(mgmt *m, uint64_t session)
{
    size_t n;
    ctx_entry **v = ctx_list(&m->handles, NULL, &n);
    for (size_t i = 0; i < n; i++) {
        handle *h = (handle *)v[i];
        if (h->rpc_session == session && !h->e.busy) {
            sl_debug("management: handle %s run down with its RPC connection", h->e.id);
            handle_discard(m, h);
        }
    }
    sl_free(v);
}

static enum MHD_Result open_resumed(req *r);

/* The owner named the queue (queue.resolve): check this node's user on that name, then open
 * exactly it (RemoteQMOpenQueue). A refusal has opened nothing anywhere. */
static enum MHD_Result resolve_resumed(req *r)
{
    handle *h = sl_map_get(r->m->handles.by_id, r->async_tag, CTX_ID_LEN);
    json_t *reply = req_async_json(r);
    if (!h) { /* cannot happen: busy handles are not run down and nobody knows the id yet */
        if (reply)
            json_decref(reply);
        return reply_hresult(r, SL_ERR_INTERNAL, NULL, "the handle went away while opening");
    }
    char reason[700];
    int owner_failed;
    char *prev_reply = r->async_reply, *prev_err = r->async_err;
    r->async_reply = r->async_err = NULL; /* the next answer's, once asked */
    memcpy(r->async_tag, h->e.id, CTX_ID_LEN + 1);
    sl_err e = handle_remote_resolved(r->m, r->user, h, reply, req_link_done, r, &owner_failed,
                                      reason, sizeof reason);
    enum MHD_Result rc = MHD_YES;
    if (e != SL_OK) {
        r->async_reply = prev_reply;
        r->async_err = prev_err;
        prev_reply = prev_err = NULL;
        rc = owner_failed ? reply_owner_failure(r, reply, h, "RemoteQMOpenQueue")
                          : reply_hresult(r, e, NULL, reason);
        handle_discard(r->m, h);
    } else {
        req_suspend(r, open_resumed);
    }
    sl_free(prev_reply);
    sl_free(prev_err);
    if (reply)
        json_decref(reply);
    return rc;
}

static enum MHD_Result open_resumed(req *r)
{
    handle *h = sl_map_get(r->m->handles.by_id, r->async_tag, CTX_ID_LEN);
    json_t *reply = req_async_json(r);
    if (!h) { /* cannot happen: busy handles are not run down and nobody knows the id yet */
        if (reply)
            json_decref(reply);
        return reply_hresult(r, SL_ERR_INTERNAL, NULL, "the handle went away while opening");
    }
    char reason[700];
    int owner_failed;
    sl_err e = handle_remote_opened(r->m, r->user, h, reply, &owner_failed, reason, sizeof reason);
    if (e != SL_OK) {
        enum MHD_Result rc = owner_failed ? reply_owner_failure(r, reply, h, "RemoteQMOpenQueue")
                                          : reply_hresult(r, e, NULL, reason);
        handle_discard(r->m, h);
        if (reply)
            json_decref(reply);
        return rc;
    }
    json_decref(reply);
    json_t *j = handle_json(r->m, h);
    json_object_set_new(j, "hresult", json_string("0x00000000"));
    json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
    return reply_json(r, 201, j);
}

/* A queue of another node: a remote queue proxy (RemoteQMOpenQueue at the owner), its first
 * step. SL_OK: *out is busy until cb brings the owner's resolve answer. */
sl_err handle_open_remote(mgmt *m, const char *user, const char *fmt, const link_addr *ra,
                          uint32_t access, int share, const char *vhost, handle_answer_fn cb,
                          void *ctx, handle **out, char *reason, size_t rlen)
{
    if (!m->n->links) {
        snprintf(reason, rlen, "'%s' is a queue of node %s:%d and this node has no links", fmt,
                 ra->host, ra->port);
        return SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE;
    }
    /* MS-MQMP: a remote queue opens to receive or peek only */
    if (access != QM_ACCESS_RECEIVE && access != QM_ACCESS_PEEK) {
        snprintf(reason, rlen,
                 "'%s' is a queue of another node: it opens with receive or peek access (send "
                 "to it by publishing to its format name)",
                 fmt);
        return SL_ERR_UNSUPPORTED_ACCESS_MODE;
    }
    /* Nothing is checked on the spelling the user wrote: the owner resolves names its own
     * way (case-insensitively, "<vhost>/<queue>" when that vhost exists there), so this node
     * first asks which queue the name is (queue.resolve), checks its user on that, and only
     * then opens it by that exact name (handle_remote_resolved, handle_remote_opened). */
    handle *h = sl_xcalloc(1, sizeof *h);
    sl_err e = ctx_add(m, &m->handles, &h->e, user, reason, rlen);
    if (e != SL_OK) {
        sl_free(h);
        return e;
    }
    h->kind = HANDLE_REMOTE;
    h->format_name = sl_xstrdup(fmt);
    h->host = sl_xstrdup(ra->host);
    h->port = ra->port;
    h->queue = sl_xstrdup(ra->queue);
    h->access = access;
    h->share = share;
    json_t *j = json_pack("{s:s,s:s}", "op", "queue.resolve", "queue", ra->queue);
    if (vhost)
        json_object_set_new(j, "vhost", json_string(vhost));
    if ((e = handle_ask_owner(m, h, j, cb, ctx, reason, rlen)) != SL_OK) {
        handle_discard(m, h);
        return e;
    }
    *out = h;
    return SL_OK;
}

/* Where a format name leads for an open: a queue of this node (*q), or of another node
 * (*remote = 1, its address in *ra). The same rules for every door. */
sl_err handle_resolve(mgmt *m, const char *fmt, const char *vhost, uint32_t access, qm_queue **q,
                      link_addr *ra, int *remote, char *reason, size_t rlen)
{
    *q = NULL;
    *remote = fmtname_remote(m, fmt, ra);
    if (*remote < 0) {
        snprintf(reason, rlen,
                 "a queue of another node is DIRECT=TCP:<address>[:<port>]"
                 "\\private$\\<queue>");
        return SL_ERR_ILLEGAL_FORMATNAME;
    }
    if (*remote && !(access & QM_ACCESS_ADMIN))
        return SL_OK;
    if (!*remote && (access & QM_ACCESS_ADMIN)) {
        snprintf(reason, rlen,
                 "admin access opens the outgoing queue that leads to a queue of another "
                 "node; '%s' is a queue of this node",
                 fmt);
        return SL_ERR_UNSUPPORTED_ACCESS_MODE;
    }
    /* receive|admin, peek|admin on another node's queue: the outgoing queue to it */
    sl_err e = *remote ? fmtname_resolve(m, fmt, vhost, q, reason, rlen)
                       : fmtname_open(m, fmt, vhost, q, reason, rlen);
    *remote = 0;
    return e;
}

/* Open a queue of this node: the access check, the handle, the queue descriptor. */
sl_err handle_open_local(mgmt *m, const char *user, qm_queue *q, uint32_t access, int share,
                         handle **out, char *reason, size_t rlen)
{
    sl_err e;
    if ((e = handle_may(m, user, q, access, reason, rlen)) != SL_OK)
        return e;
    handle *h = sl_xcalloc(1, sizeof *h);
    if ((e = ctx_add(m, &m->handles, &h->e, user, reason, rlen)) != SL_OK) {
        sl_free(h);
        return e;
    }
    if ((e = qm_queue_open(q, access, share, &h->d, reason, rlen)) != SL_OK) {
        handle_discard(m, h);
        return e;
    }
    char fmt[800];
    fmtname_of(m, q, fmt, sizeof fmt);
    h->kind = HANDLE_LOCAL;
    h->format_name = sl_xstrdup(fmt);
    h->vhost = sl_xstrdup(q->vhost->name);
    h->queue = sl_xstrdup(q->name);
    h->incarnation = q->incarnation;
    sl_debug("management: user '%s' opened handle %s on queue '%s' in vhost '%s'", user, h->e.id,
             q->name, q->vhost->name);
    *out = h;
    return SL_OK;
}

static enum MHD_Result open_remote(req *r, const char *fmt, const link_addr *ra, uint32_t access,
                                   int share, const char *vhost)
{
    char reason[700];
    handle *h;
    sl_err e = handle_open_remote(r->m, r->user, fmt, ra, access, share, vhost, req_link_done, r,
                                  &h, reason, sizeof reason);
    if (e != SL_OK)
        return reply_hresult(r, e, NULL, reason);
    memcpy(r->async_tag, h->e.id, CTX_ID_LEN + 1);
    req_suspend(r, resolve_resumed);
    return MHD_YES;
}

static enum MHD_Result open_handle(req *r)
{
    json_t *body = req_body(r, 0);
    if (!body)
        return MHD_YES;
    json_t *jf = json_object_get(body, "format_name"), *jq = json_object_get(body, "queue");
    json_t *jv = json_object_get(body, "vhost");
    const char *vhost = json_is_string(jv) ? json_string_value(jv) : NULL;
    if (!json_is_string(jf) == !json_is_string(jq) || (jv && !json_is_null(jv) && !vhost))
        return reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                             "give \"format_name\" or \"queue\" (a string), not both; \"vhost\" "
                             "is a string");
    uint32_t access;
    int share;
    if (parse_access(json_object_get(body, "access"), &access) < 0)
        return reply_hresult(r, SL_ERR_UNSUPPORTED_ACCESS_MODE, NULL,
                             "\"access\" is receive, send, move or peek (or their MQ_*_ACCESS "
                             "names or values)");
    if (parse_share(json_object_get(body, "share"), &share) < 0)
        return reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                             "\"share\" is deny_none or deny_receive");
    char reason[600];
    qm_queue *q = NULL;
    sl_err e;
    if (json_is_string(jf)) {
        const char *fmt = json_string_value(jf);
        link_addr ra;
        int remote;
        e = handle_resolve(r->m, fmt, vhost, access, &q, &ra, &remote, reason, sizeof reason);
        if (e == SL_OK && remote)
            return open_remote(r, fmt, &ra, access, share, vhost);
    } else {
        const char *vn = vhost ? vhost : "/", *name = json_string_value(jq);
        qm_vhost *vh = qm_vhost_find(req_node(r), vn, strlen(vn));
        q = vh ? qm_queue_find(vh, name, json_string_length(jq)) : NULL;
        e = q ? SL_OK : SL_ERR_QUEUE_NOT_FOUND;
        if (!q)
            snprintf(reason, sizeof reason, "no queue '%s' in vhost '%s'", name, vn);
    }
    if (e != SL_OK)
        return reply_hresult(r, e, NULL, reason);
    handle *h;
    if ((e = handle_open_local(r->m, r->user, q, access, share, &h, reason, sizeof reason)) !=
        SL_OK)
        return reply_hresult(r, e, NULL, reason);
    json_t *j = handle_json(r->m, h);
    json_object_set_new(j, "hresult", json_string("0x00000000"));
    json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
    return reply_json(r, 201, j);
}

/* ------------------------------------------------------------------------------------------
 * Purge (rpc_ACPurgeQueue), close (rpc_ACCloseHandle), list
 */

static enum MHD_Result purge_resumed(req *r)
{
    ctx_entry *e = sl_map_get(r->m->handles.by_id, r->async_tag, CTX_ID_LEN);
    handle *h = (handle *)e;
    json_t *reply = req_async_json(r);
    enum MHD_Result rc;
    if (!h) { /* closed while the owner purged: the owner's answer is lost with it */
        rc = reply_hresult(r, SL_ERR_INVALID_HANDLE, NULL, "the handle was closed meanwhile");
    } else {
        h->e.busy = 0;
        h->e.last_used_ms = sl_now_ms();
        if (!reply_ok(reply)) {
            rc = reply_owner_failure(r, reply, h, "RemoteQMPurgeQueue");
        } else {
            char owner[300];
            snprintf(owner, sizeof owner, "%s:%d", h->host, h->port);
            rc = reply_hresult(
                r, SL_OK,
                json_pack("{s:s,s:s,s:s,s:s,s:I,s:I}", "handle", h->e.id, "owner", owner, "vhost",
                          h->vhost, "queue", h->queue, "message_count",
                          (json_int_t)json_integer_value(json_object_get(reply, "purged")),
                          "purge_pending",
                          (json_int_t)json_integer_value(json_object_get(reply, "purge_pending"))),
                NULL);
        }
    }
    if (reply)
        json_decref(reply);
    return rc;
}

/* Purge Queue through a handle, for every door: the user's right asked again on the name
 * the handle holds; a local handle purges its incarnation (*n: messages purged); a remote
 * proxy asks its owner (RemoteQMPurgeQueue): *pending, and cb(ctx, ...) brings the owner's
 * HRESULT and count (the handle is busy until the caller calls handle_answered). */
sl_err handle_purge(mgmt *m, const char *user, handle *h, uint64_t *n, int *pending,
                    handle_answer_fn cb, void *ctx, char *reason, size_t rlen)
{
    char acc[64];
    *n = 0;
    *pending = 0;
    sl_err e = handle_recheck(m, user, h, QM_ACCESS_RECEIVE, reason, rlen);
    if (e != SL_OK)
        return e;
    if (h->kind == HANDLE_REMOTE) {
        if (!h->context) {
            snprintf(reason, rlen, "the handle is still being opened");
            return SL_ERR_INVALID_HANDLE;
        }
        e = handle_ask_owner(m, h,
                             json_pack("{s:s,s:s}", "op", "queue.purge", "context", h->context), cb,
                             ctx, reason, rlen);
        *pending = e == SL_OK;
        return e;
    }
    e = qm_qdesc_purge(h->d, n);
    if (e == SL_ERR_QUEUE_DELETED) {
        snprintf(reason, rlen,
                 "queue '%s' in vhost '%s' was deleted since handle %s was opened (a queue "
                 "declared again under that name is another queue): nothing purged",
                 h->queue, h->vhost, h->e.id);
        return e;
    }
    if (e != SL_OK) {
        access_str(h->d->access, acc, sizeof acc);
        snprintf(reason, rlen, "handle %s was opened with %s access; a purge needs receive access",
                 h->e.id, acc);
        return e;
    }
    return SL_OK;
}

static enum MHD_Result purge_handle(req *r, handle *h)
{
    char reason[600];
    uint64_t n = 0;
    int pending;
    req_rearm(r, h);
    sl_err e =
        handle_purge(r->m, r->user, h, &n, &pending, req_link_done, r, reason, sizeof reason);
    if (e != SL_OK)
        return reply_hresult(r, e, json_pack("{s:s}", "handle", h->e.id), reason);
    if (pending) {
        req_suspend(r, purge_resumed);
        return MHD_YES;
    }
    qm_queue *q = qm_qdesc_queue(h->d);
    return reply_hresult(r, SL_OK,
                         json_pack("{s:s,s:s,s:s,s:I,s:I}", "handle", h->e.id, "vhost", h->vhost,
                                   "queue", h->queue, "message_count", (json_int_t)n,
                                   "purge_pending", (json_int_t)q->n_purge_pending),
                         NULL);
}

static enum MHD_Result list_handles(req *r)
{
    int all = req_query_bool(r, "all");
    if (all && !r->is_admin)
        return reply_sl_err(r, SL_ERR_ACCESS_REFUSED,
                            "only administrators may list the handles of every user");
    size_t n;
    ctx_entry **v = ctx_list(&r->m->handles, all ? NULL : r->user, &n);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, handle_json(r->m, (handle *)v[i]));
    sl_free(v);
    return reply_json(r, 200, arr);
}

enum MHD_Result api_handles(req *r)
{
    /* segs: msmq handles [H [purge]] */
    if (r->nsegs == 2) {
        if (req_is(r, "POST"))
            return open_handle(r);
        if (req_is(r, "GET"))
            return list_handles(r);
        return reply_method_not_allowed(r);
    }
    if (r->nsegs > 4 || (r->nsegs == 4 && strcmp(r->segs[3], "purge")))
        return reply_not_found(r);
    if (r->nsegs == 4 && !req_is(r, "POST"))
        return reply_method_not_allowed(r);
    if (r->nsegs == 3 && !req_is(r, "GET") && !req_is(r, "DELETE"))
        return reply_method_not_allowed(r);
    char reason[400];
    ctx_entry *ce;
    sl_err e = ctx_lookup(r->m, &r->m->handles, r->segs[2], r->user, &ce, reason, sizeof reason);
    if (e != SL_OK)
        return reply_hresult(r, e, NULL, reason);
    handle *h = (handle *)ce;
    if (r->nsegs == 4)
        return purge_handle(r, h);
    if (req_is(r, "GET")) {
        const char *fmt; /* the view carries it: the check is rpc_ACHandleToFormatName's */
        if ((e = handle_format_name(r->m, r->user, h, &fmt, reason, sizeof reason)) != SL_OK)
            return reply_hresult(r, e, json_pack("{s:s}", "handle", h->e.id), reason);
        json_t *j = handle_json(r->m, h);
        json_object_set_new(j, "hresult", json_string("0x00000000"));
        json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
        return reply_json(r, 200, j);
    }
    /* close: Close Queue; a handle whose queue is gone closes fine (MS-MQDMPR: ignored) */
    char id[CTX_ID_LEN + 1];
    memcpy(id, h->e.id, sizeof id);
    sl_debug("management: user '%s' closed handle %s", r->user, id);
    handle_discard(r->m, h);
    return reply_hresult(r, SL_OK, json_pack("{s:s,s:b}", "handle", id, "closed", 1), NULL);
}
