/* handle.c - MSMQ queue handles for every door: MS-MQMP's rpc_QMOpenQueueInternal,
 * rpc_ACPurgeQueue, rpc_ACCloseHandle and rpc_ACHandleToFormatName (reference/msmq.md
 * sections 2.1, 2.8, 5.2, 5.3). The HTTP API (mgmt/api_handles.c) and DCE/RPC
 * (rpc/qmcomm.c) only translate their wire to these calls.
 *
 * A local handle is MS-MQMP's LocalQueueContextHandle: it wraps an open queue descriptor
 * (qm_qdesc, qm.h) of this node's queue, so it names one incarnation of the queue: once that
 * queue is deleted the handle purges nothing and fails with MQ_ERROR_QUEUE_DELETED, even when a
 * queue of the same name was declared since. The ids, ownership, per-user limit and the idle
 * rundown are ctxtab.c's.
 *
 * A remote handle is MS-MQMP's RemoteQueueProxyHandle: opened on a direct format name of
 * another node, it holds the context the owner gave (MS-MQQP RemoteQMOpenQueue over the link's
 * request channel, link_rpc_call, whose requests and answers are JSON text; the owner's side is
 * link/rpc_queue.c). A purge is forwarded (RemoteQMPurgeQueue) and answers with the owner's
 * HRESULT and count; a close is done at once and tells the owner in the background
 * (RemoteQMCloseQueue, MS-MQMP: "SHOULD be done asynchronously"), as does the rundown. The
 * owner checks its own incarnations, and a context from before its restart is
 * MQ_ERROR_STALE_HANDLE there, so a proxy never purges another queue than the one it opened.
 * A door waits for the owner's answers its own way (the callback it passes).
 *
 * Handles opened over DCE/RPC carry the RPC session that opened them and are run down with it.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "link/link.h"
#include "mq/formatname.h"
#include "mq/handle.h"

static void forget_remote(mq_state *mq, const char *host, int port, const char *context);

static void handle_close(void *ctx, mq_ctx_entry *e)
{
    mq_state *mq = ctx;
    mq_handle *h = (mq_handle *)e;
    if (h->d)
        qm_qdesc_close(h->d);
    if (h->context) {
        forget_remote(mq, h->host, h->port, h->context);
        if (mq->n->links)
            link_rpc_hold(mq->n->links, h->host, h->port, -1);
    }
    sl_free(h->host);
    sl_free(h->context);
    sl_free(h->format_name);
    sl_free(h->vhost);
    sl_free(h->queue);
    mq_ctx_entry_free(&h->e);
    sl_free(h);
}

void mq_handles_init(mq_state *mq)
{
    mq_ctxtab_init(&mq->handles, "handle", mq->run_id, mq->n->cfg, handle_close, mq);
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

int mq_handle_access_parse(const char *s, uint32_t *out)
{
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

int mq_handle_access_valid(int64_t v)
{
    return v > 0 && v <= 0xFF;
}

int mq_handle_share_valid(int64_t v)
{
    return v == QM_SHARE_DENY_NONE || v == QM_SHARE_DENY_RECEIVE;
}

void mq_handle_access_str(uint32_t access, char *buf, size_t len)
{
    buf[0] = 0;
    size_t off = 0;
    for (size_t i = 0; i < sizeof access_names / sizeof access_names[0]; i++)
        if (access & access_names[i].bit)
            off += (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%s", off ? "|" : "",
                                    access_names[i].name);
}

int mq_handle_share_parse(const char *s, int *out)
{
    if (!strcasecmp(s, "deny_none") || !strcasecmp(s, "deny-none") ||
        !strcasecmp(s, "MQ_DENY_NONE")) {
        *out = QM_SHARE_DENY_NONE;
        return 0;
    }
    if (!strcasecmp(s, "deny_receive") || !strcasecmp(s, "deny-receive") ||
        !strcasecmp(s, "MQ_DENY_RECEIVE_SHARE")) {
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
static sl_err handle_may_name(mq_state *mq, const char *user, const char *vh, const char *queue,
                              uint32_t access, char *err, size_t errlen)
{
    acc_db *a = mq->n->acc;
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

static sl_err handle_may(mq_state *mq, const char *user, qm_queue *q, uint32_t access, char *err,
                         size_t errlen)
{
    return handle_may_name(mq, user, q->vhost->name, q->name, access, err, errlen);
}

/* Every operation through an open handle but its close asks again, at that moment, on the
 * canonical name the handle holds (for a remote proxy: the name the owner resolved, never the
 * spelling the user wrote), so a permission deleted or narrowed since the open applies to the
 * very next operation, local or remote alike (README "Who may do what"). Closing is never
 * refused: it only gives up access. A remote proxy's own owner checks its link's user too
 * (rpc_queue.c), so each side checks the user it knows. */
static sl_err handle_recheck(mq_state *mq, const char *user, mq_handle *h, uint32_t access,
                             char *err, size_t errlen)
{
    /* a local handle whose queue is gone reaches nothing (MQ_ERROR_QUEUE_DELETED tells so,
     * even when the vhost went with it) */
    if (h->kind == HANDLE_LOCAL && h->d && !qm_qdesc_queue(h->d))
        return SL_OK;
    if (!h->vhost || !h->queue || !h->queue[0]) {
        snprintf(err, errlen, "handle %s names no resolved queue yet", h->e.id);
        return SL_ERR_ACCESS_REFUSED;
    }
    return handle_may_name(mq, user, h->vhost, h->queue, access, err, errlen);
}

sl_err mq_handle_format_name(mq_state *mq, const char *user, mq_handle *h, const char **fmt,
                             char *err, size_t errlen)
{
    sl_err e = handle_recheck(mq, user, h, h->d ? h->d->access : h->access, err, errlen);
    *fmt = e == SL_OK ? h->format_name : NULL;
    return e;
}

/* ------------------------------------------------------------------------------------------
 * Open (rpc_QMOpenQueueInternal, MS-MQDMPR Open Queue)
 */

static void ignore_reply(void *ctx, const char *reply, const char *err)
{
    (void)ctx;
    (void)reply;
    (void)err;
}

/* RemoteQMCloseQueue, in the background: nobody waits for it. If the owner cannot be told,
 * its side closes the context when the link goes, or after an hour unused. */
static void forget_remote(mq_state *mq, const char *host, int port, const char *context)
{
    if (!mq->n->links)
        return;
    json_t *j = json_pack("{s:s,s:s}", "op", "queue.close", "context", context);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (link_rpc_call(mq->n->links, host, port, text, mq->n->cfg->handle_remote_timeout_ms,
                      ignore_reply, NULL) != SL_OK)
        sl_debug("management: could not tell %s:%d to close context %s", host, port, context);
    free(text);
}

static int reply_ok(const json_t *reply)
{
    return reply && json_is_true(json_object_get(reply, "ok"));
}

/* The owner's answer text as a JSON object; NULL when there is none or it is not one. */
static json_t *answer_json(const char *reply)
{
    json_t *j = reply ? json_loads(reply, 0, NULL) : NULL;
    if (j && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* Send j (taken) to h's owner; its answer goes to cb(ctx, ...). The handle is busy until the
 * caller takes the answer. SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE when the owner cannot be
 * asked (the handle is left to the caller). */
static sl_err handle_ask_owner(mq_state *mq, mq_handle *h, json_t *j, mq_handle_answer_fn cb,
                               void *ctx, char *reason, size_t rlen)
{
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    sl_err e = mq->n->links ? link_rpc_call(mq->n->links, h->host, h->port, text,
                                            mq->n->cfg->handle_remote_timeout_ms, cb, ctx)
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

/* The open of a remote proxy, for every door, in the owner's two answers (mgmt/api_handles.c,
 * rpc/qmcomm.c):
 *   mq_handle_open_remote      a proxy, busy; the owner is asked which queue the name is
 *                           (queue.resolve);
 *   mq_handle_remote_resolved  its answer: the user is checked on that name, then the owner is
 *                           asked to open exactly it (queue.open);
 *   mq_handle_remote_opened    its answer: checked again on the queue opened, the context taken.
 * On an error the handle is left to the caller (to report, then mq_handle_discard);
 * *owner_failed says that the owner refused (its answer carries its HRESULT). */
static sl_err remote_resolved(mq_state *mq, const char *user, mq_handle *h, json_t *reply,
                              mq_handle_answer_fn cb, void *ctx, int *owner_failed, char *reason,
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
    sl_err e = handle_recheck(mq, user, h, h->access, reason, rlen);
    if (e != SL_OK) {
        sl_debug("management: remote handle of user '%s' on %s refused: the owner resolves it "
                 "to queue '%s' in vhost '%s'",
                 user, h->format_name, h->queue, h->vhost);
        return e;
    }
    return handle_ask_owner(mq, h,
                            json_pack("{s:s,s:s,s:s,s:i,s:i}", "op", "queue.open", "vhost",
                                      h->vhost, "queue", h->queue, "access", (int)h->access,
                                      "share", h->share),
                            cb, ctx, reason, rlen);
}

static sl_err remote_opened(mq_state *mq, const char *user, mq_handle *h, json_t *reply,
                            int *owner_failed, char *reason, size_t rlen)
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
    sl_err pe = handle_recheck(mq, user, h, h->access, reason, rlen);
    if (pe != SL_OK) {
        sl_info("management: remote handle of user '%s' on %s refused: the owner resolved it "
                "to queue '%s' in vhost '%s' (%s)",
                user, h->format_name, h->queue, h->vhost, reason);
        forget_remote(mq, h->host, h->port, c);
        return pe;
    }
    h->context = sl_xstrdup(c);
    link_rpc_hold(mq->n->links, h->host, h->port, +1); /* the owner's context lives with it */
    h->incarnation = (uint64_t)json_integer_value(json_object_get(reply, "incarnation"));
    h->e.last_used_ms = sl_now_ms();
    sl_debug("management: user '%s' opened remote handle %s on %s (context %s)", user, h->e.id,
             h->format_name, h->context);
    return SL_OK;
}

sl_err mq_handle_remote_resolved(mq_state *mq, const char *user, mq_handle *h, const char *reply,
                                 mq_handle_answer_fn cb, void *ctx, int *owner_failed, char *reason,
                                 size_t rlen)
{
    json_t *j = answer_json(reply);
    sl_err e = remote_resolved(mq, user, h, j, cb, ctx, owner_failed, reason, rlen);
    if (j)
        json_decref(j);
    return e;
}

sl_err mq_handle_remote_opened(mq_state *mq, const char *user, mq_handle *h, const char *reply,
                               int *owner_failed, char *reason, size_t rlen)
{
    json_t *j = answer_json(reply);
    sl_err e = remote_opened(mq, user, h, j, owner_failed, reason, rlen);
    if (j)
        json_decref(j);
    return e;
}

void mq_handle_discard(mq_state *mq, mq_handle *h)
{
    mq_ctx_remove(&mq->handles, &h->e);
    handle_close(mq, &h->e);
}

mq_handle *mq_handle_find(mq_state *mq, const char *id)
{
    return (mq_handle *)mq_ctx_find(&mq->handles, id);
}

sl_err mq_handle_list(mq_state *mq, const mq_caller *who, int all, mq_handle ***v, size_t *n,
                      char *reason, size_t rlen)
{
    *v = NULL;
    *n = 0;
    if (all && !who->is_admin) {
        snprintf(reason, rlen, "only administrators may list the handles of every user");
        return SL_ERR_ACCESS_REFUSED;
    }
    mq_ctx_entry **e = mq_ctx_list(&mq->handles, all ? NULL : who->user, n);
    *v = sl_xmalloc((*n ? *n : 1) * sizeof **v);
    for (size_t i = 0; i < *n; i++)
        (*v)[i] = (mq_handle *)e[i]; /* mq_ctx_entry is each handle's first member */
    sl_free(e);
    return SL_OK;
}

const char *mq_handle_id(const mq_handle *h)
{
    return h->e.id;
}

const char *mq_handle_owner(const mq_handle *h)
{
    return h->e.owner;
}

uint64_t mq_handle_session(const mq_handle *h)
{
    return h->rpc_session;
}

void mq_handle_set_session(mq_handle *h, uint64_t session)
{
    h->rpc_session = session;
}

void mq_handle_answered(mq_handle *h)
{
    h->e.busy = 0;
    h->e.last_used_ms = sl_now_ms();
}

int mq_handle_busy(const mq_handle *h)
{
    return h->e.busy;
}

int mq_handle_is_remote(const mq_handle *h)
{
    return h->kind == HANDLE_REMOTE;
}

uint32_t mq_handle_owner_hresult(const char *reply)
{
    json_t *j = answer_json(reply);
    const char *hr = j ? json_string_value(json_object_get(j, "hresult")) : NULL;
    uint32_t v = hr ? (uint32_t)strtoul(hr, NULL, 16)
                    : sl_err_get(SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE)->hresult;
    if (j)
        json_decref(j);
    return v;
}

sl_err mq_handle_purge_answered(mq_handle *h, const char *reply, uint64_t *purged,
                                uint64_t *pending)
{
    mq_handle_answered(h);
    json_t *j = answer_json(reply);
    *purged = *pending = 0;
    sl_err e = SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE;
    if (reply_ok(j)) {
        *purged = (uint64_t)json_integer_value(json_object_get(j, "purged"));
        *pending = (uint64_t)json_integer_value(json_object_get(j, "purge_pending"));
        e = SL_OK;
    }
    if (j)
        json_decref(j);
    return e;
}

sl_err mq_handle_lookup(mq_state *mq, const char *id, const char *user, mq_handle **out, char *err,
                        size_t errlen)
{
    mq_ctx_entry *e;
    sl_err r = mq_ctx_lookup(&mq->handles, id, user, &e, err, errlen);
    *out = r == SL_OK ? (mq_handle *)e : NULL;
    return r;
}

/* Every handle a DCE/RPC session opened, closed when the session goes (the context handles'
 * rundown). A handle waiting for its owner is left to that answer, which finds the session
 * gone and closes it then. */
void mq_handles_rundown_session(mq_state *mq, uint64_t session)
{
    size_t n;
    mq_ctx_entry **v = mq_ctx_list(&mq->handles, NULL, &n);
    for (size_t i = 0; i < n; i++) {
        mq_handle *h = (mq_handle *)v[i];
        if (h->rpc_session == session && !h->e.busy) {
            sl_debug("management: handle %s run down with its RPC connection", h->e.id);
            mq_handle_discard(mq, h);
        }
    }
    sl_free(v);
}

/* A queue of another node: a remote queue proxy (RemoteQMOpenQueue at the owner), its first
 * step. SL_OK: *out is busy until cb brings the owner's resolve answer. */
sl_err mq_handle_open_remote(mq_state *mq, const char *user, const char *fmt, const eod_addr *ra,
                             uint32_t access, int share, const char *vhost, mq_handle_answer_fn cb,
                             void *ctx, mq_handle **out, char *reason, size_t rlen)
{
    if (!mq->n->links) {
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
     * then opens it by that exact name (mq_handle_remote_resolved, mq_handle_remote_opened). */
    mq_handle *h = sl_xcalloc(1, sizeof *h);
    sl_err e = mq_ctx_add(&mq->handles, &h->e, user, reason, rlen);
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
    if ((e = handle_ask_owner(mq, h, j, cb, ctx, reason, rlen)) != SL_OK) {
        mq_handle_discard(mq, h);
        return e;
    }
    *out = h;
    return SL_OK;
}

/* Where a format name leads for an open: a queue of this node (*q), or of another node
 * (*remote = 1, its address in *ra). The same rules for every door. */
sl_err mq_handle_resolve(mq_state *mq, const char *fmt, const char *vhost, uint32_t access,
                         qm_queue **q, eod_addr *ra, int *remote, char *reason, size_t rlen)
{
    *q = NULL;
    *remote = mq_fmtname_remote(mq, fmt, ra);
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
    sl_err e = *remote ? mq_fmtname_resolve(mq, fmt, vhost, q, reason, rlen)
                       : mq_fmtname_open(mq, fmt, vhost, q, reason, rlen);
    *remote = 0;
    return e;
}

sl_err mq_handle_resolve_name(mq_state *mq, const char *vhost, const char *name, size_t len,
                              qm_queue **q, char *reason, size_t rlen)
{
    const char *vn = vhost ? vhost : "/";
    qm_vhost *vh = qm_vhost_find(mq->n->qm, vn, strlen(vn));
    *q = vh ? qm_queue_find(vh, name, len) : NULL;
    if (*q)
        return SL_OK;
    snprintf(reason, rlen, "no queue '%s' in vhost '%s'", name, vn);
    return SL_ERR_QUEUE_NOT_FOUND;
}

/* Open a queue of this node: the access check, the handle, the queue descriptor. */
sl_err mq_handle_open_local(mq_state *mq, const char *user, qm_queue *q, uint32_t access, int share,
                            mq_handle **out, char *reason, size_t rlen)
{
    sl_err e;
    if ((e = handle_may(mq, user, q, access, reason, rlen)) != SL_OK)
        return e;
    mq_handle *h = sl_xcalloc(1, sizeof *h);
    if ((e = mq_ctx_add(&mq->handles, &h->e, user, reason, rlen)) != SL_OK) {
        sl_free(h);
        return e;
    }
    if ((e = qm_queue_open(q, access, share, &h->d, reason, rlen)) != SL_OK) {
        mq_handle_discard(mq, h);
        return e;
    }
    char fmt[800];
    mq_fmtname_of(mq, q, fmt, sizeof fmt);
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

/* Purge Queue through a handle, for every door: the user's right asked again on the name
 * the handle holds; a local handle purges its incarnation (*n: messages purged); a remote
 * proxy asks its owner (RemoteQMPurgeQueue): *pending, and cb(ctx, ...) brings the owner's
 * HRESULT and count (the handle is busy until the caller calls mq_handle_answered). */
sl_err mq_handle_purge(mq_state *mq, const char *user, mq_handle *h, uint64_t *n, int *pending,
                       mq_handle_answer_fn cb, void *ctx, char *reason, size_t rlen)
{
    char acc[64];
    *n = 0;
    *pending = 0;
    sl_err e = handle_recheck(mq, user, h, QM_ACCESS_RECEIVE, reason, rlen);
    if (e != SL_OK)
        return e;
    if (h->kind == HANDLE_REMOTE) {
        if (!h->context) {
            snprintf(reason, rlen, "the handle is still being opened");
            return SL_ERR_INVALID_HANDLE;
        }
        e = handle_ask_owner(mq, h,
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
        mq_handle_access_str(h->d->access, acc, sizeof acc);
        snprintf(reason, rlen, "handle %s was opened with %s access; a purge needs receive access",
                 h->e.id, acc);
        return e;
    }
    return SL_OK;
}
