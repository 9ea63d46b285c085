/* rpc_queue.c - the owning node's end of remote queue proxies: MS-MQQP RemoteQMOpenQueue,
 * RemoteQMPurgeQueue and RemoteQMCloseQueue as JSON operations of the link's request channel
 * (rpc_queue.h has the contract).
 *
 * Each context is an open queue descriptor of this node (qm_qdesc), named by a random 64-bit
 * id and held for the peer and link connection that opened it. The table is process-wide,
 * as the node is (one node per process, like qm's persistence hooks). Work per request is
 * bounded: a lookup, and an idle sweep of at most SWEEP_STEP entries.
 */
#include "link/rpc_queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/map.h"
#include "access/access.h"
#include "core/mem.h"

#define SWEEP_STEP 64

typedef struct rctx {
    char id[17]; /* 16 hex digits */
    char *peer;
    uint64_t conn_id;
    uint64_t last_used;
    qm_qdesc *d;
    char *vhost, *queue;
} rctx;

static const acc_db *access_db;

void link_rpc_queue_set_access(const acc_db *acc)
{
    access_db = acc;
}

int link_rpc_user_sees_vhost(const char *user, const char *vhost)
{
    return !access_db || acc_is_admin(access_db, user) || acc_vhost_visible(access_db, user, vhost);
}

static link_rpc_mgmt_fn mgmt_fn;
static void *mgmt_ctx;

void link_rpc_set_mgmt(link_rpc_mgmt_fn fn, void *ctx)
{
    mgmt_fn = fn;
    mgmt_ctx = ctx;
}

static sl_map *contexts; /* id -> rctx* */
static sl_map *per_peer; /* peer -> count (pointer-sized integer) */
static size_t sweep_pos;

static char *reply(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    char *out = sl_xstrdup(s ? s : "{\"ok\":false}");
    free(s);
    return out;
}

static char *fail(sl_err e, const char *reason)
{
    const sl_err_info *info = sl_err_get(e);
    char hr[16];
    snprintf(hr, sizeof hr, "0x%08X", (unsigned)info->hresult);
    return reply(json_pack("{s:b,s:s,s:s,s:s}", "ok", 0, "hresult", hr, "hresult_name",
                           info->hresult_name, "reason", reason));
}

static void count_peer(const char *peer, int delta)
{
    uintptr_t n = (uintptr_t)sl_map_get(per_peer, peer, strlen(peer));
    n = delta > 0 ? n + 1 : n ? n - 1 : 0;
    if (n)
        sl_map_put(per_peer, peer, strlen(peer), (void *)n);
    else
        sl_map_del(per_peer, peer, strlen(peer));
}

static void ctx_free(rctx *c)
{
    sl_map_del(contexts, c->id, 16);
    count_peer(c->peer, -1);
    qm_qdesc_close(c->d);
    sl_free(c->peer);
    sl_free(c->vhost);
    sl_free(c->queue);
    sl_free(c);
}

static void sweep(uint64_t now)
{
    void *v;
    for (int i = 0; i < SWEEP_STEP; i++) {
        if (!sl_map_next(contexts, &sweep_pos, NULL, NULL, &v)) {
            sweep_pos = 0;
            return;
        }
        rctx *c = v;
        if (now - c->last_used >= LINK_RPC_IDLE_MS) {
            sl_info("link: remote context %s of %s on queue '%s' closed after %llu s unused", c->id,
                    c->peer, c->queue, (unsigned long long)((now - c->last_used) / 1000));
            ctx_free(c); /* deleting the entry just returned is allowed while iterating */
        }
    }
}

/* Case-insensitive as MSMQ names; "<vhost>/<queue>" names another vhost when no vhost is
 * given and <vhost> exists (as local format names do). */
static qm_queue *find_queue(qm_node *n, json_t *req, char *why, size_t whylen)
{
    json_t *jv = json_object_get(req, "vhost"), *jq = json_object_get(req, "queue");
    if (!json_is_string(jq) || (jv && !json_is_null(jv) && !json_is_string(jv))) {
        snprintf(why, whylen, "\"queue\" (and \"vhost\", if given) must be strings");
        return NULL;
    }
    const char *name = json_string_value(jq);
    size_t len = json_string_length(jq);
    const char *vname = json_is_string(jv) ? json_string_value(jv) : "/";
    qm_vhost *vh = qm_vhost_find(n, vname, strlen(vname));
    const char *slash = memchr(name, '/', len);
    if (!json_is_string(jv) && slash && slash != name) {
        qm_vhost *v2 = qm_vhost_find(n, name, (size_t)(slash - name));
        if (v2 && strcmp(v2->name, "/")) {
            vh = v2;
            len -= (size_t)(slash + 1 - name);
            name = slash + 1;
        }
    }
    qm_queue *q = vh ? qm_queue_find(vh, name, len) : NULL;
    if (!q && vh && !memchr(name, ';', len)) {
        size_t it = 0, kl;
        const char *k;
        void *v;
        while (sl_map_next(vh->queues, &it, &k, &kl, &v))
            if (kl == len && !strncasecmp(k, name, kl)) {
                q = v;
                break;
            }
    }
    if (!q)
        snprintf(why, whylen, "no queue '%.*s' in vhost '%s' on node %s", (int)len, name,
                 vh ? vh->name : vname, n->name);
    return q;
}

/* May the link's user read queue (of vhost) here, now? As a local receiver or peeker must:
 * a permission entry on the vhost and read on the queue. 0 with the reason in why. */
static int may_read(const char *user, const char *vhost, const char *queue, char *why,
                    size_t whylen)
{
    return !access_db || (acc_check_vhost(access_db, user, vhost, why, whylen) == SL_OK &&
                          acc_check_receive(access_db, user, vhost, queue, why, whylen) == SL_OK);
}

/* The queue req names, resolved as find_queue does, if the link's user may read it; NULL
 * with the failure reply in *out. */
static qm_queue *readable_queue(qm_node *n, const char *user, json_t *req, char **out)
{
    char why[600];
    qm_queue *q = find_queue(n, req, why, sizeof why);
    if (!q)
        *out = fail(SL_ERR_QUEUE_NOT_FOUND, why);
    else if (!may_read(user, q->vhost->name, q->name, why, sizeof why))
        *out = fail(SL_ERR_ACCESS_REFUSED, why);
    return q && !*out ? q : NULL;
}

static char *op_open(qm_node *n, uint64_t boot_id, const char *peer, const char *user,
                     uint64_t conn_id, json_t *req)
{
    char why[600], *out = NULL;
    qm_queue *q = readable_queue(n, user, req, &out);
    if (!q)
        return out;
    json_t *ja = json_object_get(req, "access"), *js = json_object_get(req, "share");
    json_int_t access = ja ? (json_is_integer(ja) ? json_integer_value(ja) : -1) : 1;
    json_int_t share = js ? (json_is_integer(js) ? json_integer_value(js) : -1) : 0;
    /* a remote queue opens to receive or peek only (MS-MQMP rpc_QMOpenQueueInternal) */
    if (access != QM_ACCESS_RECEIVE && access != QM_ACCESS_PEEK) {
        snprintf(why, sizeof why, "a queue of another node opens with receive or peek access");
        return fail(SL_ERR_UNSUPPORTED_ACCESS_MODE, why);
    }
    if (share != QM_SHARE_DENY_NONE && share != QM_SHARE_DENY_RECEIVE) {
        snprintf(why, sizeof why, "\"share\" is 0 (deny none) or 1 (deny receive)");
        return fail(SL_ERR_INVALID_PARAMETER, why);
    }
    if ((uintptr_t)sl_map_get(per_peer, peer, strlen(peer)) >= LINK_RPC_MAX_CONTEXTS) {
        snprintf(why, sizeof why, "%.300s holds %u contexts on node %.200s, the most allowed", peer,
                 LINK_RPC_MAX_CONTEXTS, n->name);
        return fail(SL_ERR_HANDLE_LIMIT, why);
    }
    qm_qdesc *d;
    sl_err e = qm_queue_open(q, (uint32_t)access, (int)share, &d, why, sizeof why);
    if (e != SL_OK)
        return fail(e, why);
    rctx *c = sl_xcalloc(1, sizeof *c);
    do {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = sl_now_ms() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)c;
        snprintf(c->id, sizeof c->id, "%016llx", (unsigned long long)r);
    } while (sl_map_get(contexts, c->id, 16));
    c->peer = sl_xstrdup(peer);
    c->conn_id = conn_id;
    c->last_used = sl_now_ms();
    c->d = d;
    c->vhost = sl_xstrdup(q->vhost->name);
    c->queue = sl_xstrdup(q->name);
    sl_map_put(contexts, c->id, 16, c);
    count_peer(peer, 1);
    char ctx[40];
    snprintf(ctx, sizeof ctx, "%016llx:%s", (unsigned long long)boot_id, c->id);
    sl_debug("link: %s opened queue '%s' in vhost '%s' (context %s)", peer, q->name, q->vhost->name,
             ctx);
    return reply(json_pack("{s:b,s:s,s:s,s:s,s:I}", "ok", 1, "context", ctx, "vhost",
                           q->vhost->name, "queue", q->name, "incarnation",
                           (json_int_t)q->incarnation));
}

/* RemoteQMOpenQueue's first half: the queue a name resolves to here, as op_open would
 * resolve it (case-insensitively, "<vhost>/<queue>"), so the asking node checks its own user
 * on the queue's real name before anything is opened. Names only, for a link user that may
 * read the queue (as op_open). */
static char *op_resolve(qm_node *n, const char *user, json_t *req)
{
    char *out = NULL;
    qm_queue *q = readable_queue(n, user, req, &out);
    if (!q)
        return out;
    return reply(json_pack("{s:b,s:s,s:s}", "ok", 1, "vhost", q->vhost->name, "queue", q->name));
}

/* The context a request names, for peer; NULL with the failure reply in *out. */
static rctx *lookup(uint64_t boot_id, const char *peer, json_t *req, char **out)
{
    json_t *jc = json_object_get(req, "context");
    const char *s = json_is_string(jc) ? json_string_value(jc) : "";
    char why[800];
    char boot[17];
    snprintf(boot, sizeof boot, "%016llx", (unsigned long long)boot_id);
    /* lowercase only, not core/hex.h's either case: ids are compared as the %016llx written */
    if (strlen(s) != 33 || s[16] != ':' || strspn(s, "0123456789abcdef:") != 33) {
        *out = fail(SL_ERR_INVALID_HANDLE, "\"context\" is not a context of this node");
        return NULL;
    }
    if (memcmp(s, boot, 16) != 0) {
        snprintf(why, sizeof why, "context %s was opened before this node restarted", s);
        *out = fail(SL_ERR_STALE_HANDLE, why);
        return NULL;
    }
    rctx *c = sl_map_get(contexts, s + 17, 16);
    if (!c || strcmp(c->peer, peer) != 0) {
        snprintf(why, sizeof why, "no open context %.40s of %s", s, peer);
        *out = fail(SL_ERR_INVALID_HANDLE, why);
        return NULL;
    }
    c->last_used = sl_now_ms();
    return c;
}

char *link_rpc_queue(qm_node *n, uint64_t boot_id, const char *peer_node, const char *user,
                     uint64_t conn_id, const char *op, json_t *req)
{
    /* who may use a context: the same node, logged in as the same user */
    char peer[600];
    snprintf(peer, sizeof peer, "%.290s as %.290s", peer_node, user);
    if (!strcmp(op, "queue.getinfo")) {
        if (!json_is_object(req))
            return fail(SL_ERR_INVALID_PARAMETER, "the request is not a JSON object");
        if (!mgmt_fn)
            return fail(SL_ERR_SERVICE_NOT_AVAILABLE,
                        "the management API is off on this node: no management properties");
        return mgmt_fn(mgmt_ctx, peer, user, op, req);
    }
    if (!strcmp(op, "queue.resolve"))
        return json_is_object(req)
                   ? op_resolve(n, user, req)
                   : fail(SL_ERR_INVALID_PARAMETER, "the request is not a JSON object");
    int is_open = !strcmp(op, "queue.open"), is_purge = !strcmp(op, "queue.purge"),
        is_close = !strcmp(op, "queue.close");
    if (!is_open && !is_purge && !is_close)
        return NULL;
    if (!contexts) {
        contexts = sl_map_new();
        per_peer = sl_map_new();
    }
    sweep(sl_now_ms());
    if (!json_is_object(req))
        return fail(SL_ERR_INVALID_PARAMETER, "the request is not a JSON object");
    if (is_open)
        return op_open(n, boot_id, peer, user, conn_id, req);
    char *out = NULL;
    rctx *c = lookup(boot_id, peer, req, &out);
    if (!c)
        return out;
    if (is_close) {
        sl_debug("link: %s closed context %s", peer, c->id);
        ctx_free(c);
        return reply(json_pack("{s:b}", "ok", 1));
    }
    /* the link's user, at this moment: a permission deleted since the open refuses the purge
     * here as it would a local handle's (the proxying node checks its own user too) */
    char why[600];
    if (!may_read(user, c->vhost, c->queue, why, sizeof why))
        return fail(SL_ERR_ACCESS_REFUSED, why);
    uint64_t purged = 0;
    sl_err e = qm_qdesc_purge(c->d, &purged);
    if (e == SL_ERR_QUEUE_DELETED) {
        snprintf(why, sizeof why,
                 "queue '%s' in vhost '%s' on node %s was deleted since it was opened (a queue "
                 "declared again under that name is another queue): nothing purged",
                 c->queue, c->vhost, n->name);
        return fail(e, why);
    }
    if (e != SL_OK)
        return fail(e, "the context was opened with peek access; a purge needs receive access");
    qm_queue *q = qm_qdesc_queue(c->d);
    return reply(json_pack("{s:b,s:I,s:I,s:s,s:s}", "ok", 1, "purged", (json_int_t)purged,
                           "purge_pending", (json_int_t)q->n_purge_pending, "vhost", c->vhost,
                           "queue", c->queue));
}

void link_rpc_conn_gone(uint64_t conn_id)
{
    if (!contexts)
        return;
    size_t it = 0;
    void *v;
    while (sl_map_next(contexts, &it, NULL, NULL, &v)) {
        rctx *c = v;
        if (c->conn_id == conn_id)
            ctx_free(c);
    }
}

void link_rpc_queue_free_all(void)
{
    if (!contexts)
        return;
    size_t it = 0;
    void *v;
    while (sl_map_next(contexts, &it, NULL, NULL, &v))
        ctx_free(v);
    sl_map_free(contexts);
    sl_map_free(per_peer);
    contexts = per_peer = NULL;
    sweep_pos = 0;
}

size_t link_rpc_queue_count(void)
{
    return contexts ? sl_map_count(contexts) : 0;
}
