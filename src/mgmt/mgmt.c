/* mgmt.c - the management API's front: the HTTP(S) server (http/server.h: libmicrohttpd on
 * the node's loop, listeners, TLS, request bodies, held requests, the guard against
 * connections that never log in) started with the management settings, authentication (HTTP
 * basic auth, the console's cookie), the browser rules, and routing to the handlers.
 *
 * The web console (console/, static.c) is served at every path outside /api/ and /metrics; its
 * login is a session (session.c): a cookie that authenticates like basic auth does, with a
 * custom header required on everything but GET (the CSRF guard).
 *
 * Browsers (docs/http-api.md "Requests from browsers"): a browser adds the cookie, or Basic
 * credentials it cached, to requests another site's page makes. So, however a request is
 * authenticated: nothing but a GET is taken from another origin (http_cross_origin:
 * Sec-Fetch-Site, else Origin against Host; API clients send neither), a body is taken only as
 * application/json (http_content_type_json: no form can send that type), and a page's 401
 * carries no Basic challenge (http_from_a_page), so no browser prompts for and caches
 * credentials for a page (the header reading is http/browser.c's).
 *
 * URL paths reach us raw (http/server.c): RabbitMQ's paths carry the vhost "/" as %2F inside
 * one segment, so segments are split first and percent-decoded afterwards.
 */
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "http/browser.h"
#include "http/request.h"
#include "mgmt/mgmt_internal.h"
#include "node/login.h"

/* ------------------------------------------------------------------------------------------
 * Timers
 */

/* The context-handle rundown: idle handles and management objects (mq/ctxtab.c's rule) */
static void on_rundown(sl_loop *loop, sl_timer *t)
{
    mgmt *m = t->data;
    uint64_t now = sl_now_ms();
    mq_rundown(m->mq, now);
    mq_ctx_rundown(&m->mobjs, now);
    mgmt_sessions_sweep(m, now);
    sl_timer_start(loop, t, now + mq_ctx_rundown_period_ms(m->n->cfg));
}

/* ------------------------------------------------------------------------------------------
 * Auth
 */

static int is_loopback(mgmt *m, struct MHD_Connection *c)
{
    const struct sockaddr *sa = http_req_client_addr(c);
    return sa && node_peer_is_loopback(m->n, sa);
}

static void authed_as(req *r, const acc_user *u)
{
    r->authed = 1;
    r->tags = u->tag_bits;
    r->is_admin = (u->tag_bits & ACC_TAG_ADMINISTRATOR) != 0;
    r->user = sl_xstrdup(u->name);
    http_req_proven(&r->h);
}

static void auth_unlist(req *r)
{
    for (req **pp = &r->m->authing; *pp; pp = &(*pp)->auth_next)
        if (*pp == r) {
            *pp = r->auth_next;
            break;
        }
    r->auth = NULL;
}

/* The password check's answer: at once (inside node_login_start, r->auth not set yet), or
 * later from the verifier (loop thread), when the request may have been answered meanwhile
 * (the client went away: only the check's reference keeps it). */
static void auth_answer(void *ctx, sl_err e, const acc_user *u, const char *why)
{
    req *r = ctx;
    if (e == SL_OK)
        authed_as(r, u);
    else
        sl_info("http: login refused: %s", why);
    if (!r->auth)
        return;
    auth_unlist(r);
    if (r->h.suspended && r->auth_waiting)
        mgmt_req_resume(r); /* routed now (req_handle) */
    http_req_unref(&r->h);  /* the check's */
}

static void authenticate(req *r)
{
    char *pass = NULL;
    char *user = MHD_basic_auth_get_username_password(r->conn, &pass);
    if (user && pass) {
        /* a slow hash is checked on the verifier's thread (node/login.c) */
        node_login *l = node_login_start(r->m->n, user, strlen(user), (const uint8_t *)pass,
                                         strlen(pass), is_loopback(r->m, r->conn), auth_answer, r);
        if (l) {
            r->auth = l;
            http_req_ref(&r->h);
            r->auth_next = r->m->authing;
            r->m->authing = r;
        }
    } else if (!user) {
        /* the console's session cookie (session.c) */
        const char *tok =
            MHD_lookup_connection_value(r->conn, MHD_COOKIE_KIND, MGMT_SESSION_COOKIE);
        const acc_user *u = tok ? mgmt_session_user(r->m, tok) : NULL;
        /* a loopback user's cookie is worth nothing from elsewhere, as its password is */
        if (u && acc_is_loopback_user(r->m->n->acc, u->name) && !is_loopback(r->m, r->conn))
            u = NULL;
        if (u) {
            authed_as(r, u);
            r->via_session = 1;
        }
    }
    if (user)
        MHD_free(user);
    if (pass)
        MHD_free(pass);
}

static int has_csrf_header(req *r)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MGMT_CSRF_HEADER) != NULL;
}

static const char *header(req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

static enum MHD_Result reply_unauthorized(req *r)
{
    /* RabbitMQ's not_authenticated reply */
    json_t *j = json_pack("{s:s,s:s}", "error", "not_authorized", "reason", "Login failed");
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    struct MHD_Response *resp = http_response_text(text, strlen(text), "application/json", NULL);
    /* not to a page's request (the console's among them): see http_from_a_page */
    if (!http_from_a_page(r->conn, MGMT_CSRF_HEADER))
        MHD_add_response_header(resp, "WWW-Authenticate", "Basic realm=\"Sluice Management\"");
    enum MHD_Result rc = MHD_queue_response(r->conn, MHD_HTTP_UNAUTHORIZED, resp);
    MHD_destroy_response(resp);
    r->responded = 1;
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Routing
 */

/* Names are UTF-8 everywhere (RabbitMQ's rule, and what JSON views and definitions can
 * carry), so a name in a path that is not is refused at every door instead of vanishing from
 * the exports. */
static int segment_valid(const char *seg)
{
    return amqp_utf8_valid(amqp_cstr(seg));
}

static const struct route {
    const char *name;
    api_fn fn;
} routes[] = {
    {"overview", mgmt_api_overview},
    {"cluster", mgmt_api_cluster},
    {"nodes", mgmt_api_nodes},
    {"vhosts", mgmt_api_vhosts},
    {"users", mgmt_api_users},
    {"whoami", mgmt_api_whoami},
    {"permissions", mgmt_api_permissions},
    {"topic-permissions", mgmt_api_topic_permissions},
    {"vhost-limits", mgmt_api_vhost_limits},
    {"user-limits", mgmt_api_user_limits},
    {"queues", mgmt_api_queues},
    {"exchanges", mgmt_api_exchanges},
    {"bindings", mgmt_api_bindings},
    {"connections", mgmt_api_connections},
    {"channels", mgmt_api_channels},
    {"consumers", mgmt_api_consumers},
    {"stream", mgmt_api_stream},
    {"definitions", mgmt_api_definitions},
    {"msmq", mgmt_api_msmq},
    {"transactions", mgmt_api_transactions},
    {"session", mgmt_api_session},
};

/* Who may write what (RabbitMQ's rules, plus MSMQ's for its operations):
 *   - queues, exchanges, bindings, their contents, publish, get, move, HTTP transactions and
 *     queue handles: any management user, checked per resource by the handler with the
 *     user's permissions in the vhost (the AMQP rules: configure to declare and delete, write
 *     to publish and bind into, read to get, purge and bind from); administrators too need
 *     the permission, as in RabbitMQ, whose API does these through a channel of the user;
 *   - closing a connection (also under /api/stream/connections): its own user, or an
 *     administrator (the handler checks);
 *   - everything else (users, vhosts, permissions, limits, definitions, MSMQ management
 *     actions and management-object actions): the administrator tag.
 * These POSTs and DELETEs only read: R_QMMgmtGetInfo (POST /api/msmq/info), and making,
 * binding (init) and releasing a management object, whose members only read. */
static int needs_admin(req *r)
{
    if (mgmt_req_is(r, "GET"))
        return 0;
    const char *s0 = r->segs[0];
    if (!strcmp(s0, "queues") || !strcmp(s0, "exchanges") || !strcmp(s0, "bindings") ||
        !strcmp(s0, "transactions") || !strcmp(s0, "connections") || !strcmp(s0, "session") ||
        !strcmp(s0, "stream"))
        return 0;
    if (r->nsegs < 2 || strcmp(s0, "msmq"))
        return 1;
    if (!strcmp(r->segs[1], "handles"))
        return 0;
    if (r->nsegs == 2 && !strcmp(r->segs[1], "info"))
        return 0;
    if (strcmp(r->segs[1], "management"))
        return 1;
    return !((r->nsegs == 2 && mgmt_req_is(r, "POST")) ||
             (r->nsegs == 3 && mgmt_req_is(r, "DELETE")) ||
             (r->nsegs == 4 && mgmt_req_is(r, "POST") && !strcmp(r->segs[3], "init")));
}

static enum MHD_Result route(req *r, const char *url)
{
    int is_api = 0;
    /* "/api/a/b%2Fc/": segments split first, decoded after; the "api" prefix dropped */
    int sp = http_path_split(url, "api", &is_api, r->segs, MGMT_MAX_SEGS, &r->nsegs, segment_valid);
    if (sp == -2)
        return mgmt_reply_error(r, 400, "bad_request",
                                "a name in the URL path is not valid UTF-8 (names must be UTF-8)");
    if (sp < 0)
        return mgmt_reply_error(r, 400, "bad_request", "malformed URL path");
    if (!is_api) {
        if (r->nsegs >= 1 && !strcmp(r->segs[0], "metrics"))
            return mgmt_serve_metrics(r);
        return mgmt_serve_static(r, url);
    }
    /* Nothing but a read from another origin's page, however it is authenticated: the
     * browser adds the cookie or cached Basic credentials to a forged request by itself. */
    char why[200];
    if (!mgmt_req_is(r, "GET") && http_cross_origin(r->conn, why, sizeof why)) {
        sl_info("http: cross-origin %s refused (%s)", r->method, why);
        return mgmt_reply_error(
            r, 403, "forbidden",
            "cross-origin request refused (%s): the API takes changes only from "
            "its own origin's pages and from clients that are no browser",
            why);
    }
    int is_session = r->nsegs == 1 && !strcmp(r->segs[0], "session");
    /* The console's cookie stands for a login only with the custom header on what may change
     * something (another site's form cannot set one); so does a login itself. */
    if ((r->via_session || is_session) && !mgmt_req_is(r, "GET") && !has_csrf_header(r))
        return mgmt_reply_error(r, 403, "forbidden",
                                "the console's requests carry the " MGMT_CSRF_HEADER " header");
    /* logging out needs no live session, and asking whether there is one is no error */
    if (is_session && (mgmt_req_is(r, "DELETE") || (mgmt_req_is(r, "GET") && !r->authed)))
        return mgmt_api_session(r);
    if (!r->authed)
        return reply_unauthorized(r);
    /* RabbitMQ's is_mgmt_user: the API is for users tagged management, policymaker,
     * monitoring or administrator. */
    if (!(r->tags & ACC_TAGS_MGMT))
        return mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "Not management user");
    if (r->nsegs == 0)
        return mgmt_reply_not_found(r);
    if (needs_admin(r) && !mgmt_req_require_admin(r))
        return MHD_YES;
    if (!mgmt_req_is(r, "GET") && !http_content_type_json(r->conn, r->h.body.len)) {
        const char *ct = header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
        return mgmt_reply_error(r, 415, "unsupported_media_type",
                                "a request body is JSON sent with Content-Type: application/json "
                                "(this one: %.64s)",
                                ct ? ct : "no Content-Type");
    }
    /* Definitions of users, vhosts and permissions are meta records: none under the disk
     * alarm (deleting them, like purging and deleting queues, stays allowed: it frees). */
    static const char *const meta_paths[] = {"vhosts", "users", "permissions", "topic-permissions"};
    if (mgmt_req_is(r, "PUT") || mgmt_req_is(r, "POST"))
        for (size_t i = 0; i < sizeof meta_paths / sizeof meta_paths[0]; i++)
            if (!strcmp(r->segs[0], meta_paths[i]) && !mgmt_req_disk_ok(r, 0))
                return MHD_YES;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(r->segs[0], routes[i].name))
            return routes[i].fn(r);
    return mgmt_reply_not_found(r);
}

/* The request is freed (http/server.c: libmicrohttpd and its answerer let go). */
static void req_release(http_req *h)
{
    req *r = (req *)h;
    sl_free(r->async_reply);
    sl_free(r->async_err);
    mgmt_pager_release(r); /* a list answered nowhere (the client went away) */
    for (size_t i = 0; i < r->nsegs; i++)
        sl_free(r->segs[i]);
    if (r->json)
        json_decref(r->json);
    sl_free(r->user);
}

static int req_answered(http_req *h)
{
    return ((req *)h)->responded;
}

/* The request header is in: the body limit, the client's certificate, who is asking. */
static enum MHD_Result req_begin(http_req *h, const char *url)
{
    (void)url;
    req *r = (req *)h;
    r->m = http_server_ctx(h->s);
    r->conn = h->conn;
    r->method = h->method;
    if (h->too_large)
        return mgmt_reply_error(r, 413, "payload_too_large", "request body larger than %u bytes",
                                MGMT_MAX_BODY);
    if (http_req_cert_refused(h))
        return mgmt_reply_error(r, 403, "not_authorised",
                                "a client certificate that verifies is required");
    authenticate(r);
    return MHD_YES;
}

/* The body is in, or the request was resumed: route it, or send what its answer brought. */
static enum MHD_Result req_handle(http_req *h, const char *url)
{
    req *r = (req *)h;
    if (h->resumed && r->auth_waiting) {
        /* the password check answered: on to routing */
        h->resumed = 0;
        r->auth_waiting = 0;
    } else if (h->resumed && (!r->responded || h->held)) {
        /* answered asynchronously, or a reply that waited for its sync */
        h->resumed = 0;
        return r->on_resume(r);
    }
    if (r->responded || h->suspended)
        return MHD_YES;
    if (r->auth) { /* the password check still runs: wait for it */
        r->auth_waiting = 1;
        mgmt_req_suspend(r, NULL);
        return MHD_YES;
    }
    if (h->too_large)
        return mgmt_reply_error(r, 413, "payload_too_large", "request body larger than %u bytes",
                                MGMT_MAX_BODY);
    enum MHD_Result rc = route(r, url);
    if (!r->responded && !h->suspended) /* a handler that forgot to answer: do not hang */
        rc = mgmt_reply_error(r, 500, "internal_error", "no reply");
    return rc;
}

void mgmt_req_suspend(req *r, enum MHD_Result (*on_resume)(req *r))
{
    r->on_resume = on_resume;
    http_suspend(&r->h);
}

void mgmt_req_resume(req *r)
{
    http_resume(&r->h);
}

void mgmt_req_link_done(void *ctx, const char *reply, const char *err)
{
    req *r = ctx;
    if (reply)
        r->async_reply = sl_xstrdup(reply);
    else
        r->async_err = sl_xstrdup(err ? err : "no reply");
    mgmt_req_resume(r);
}

json_t *mgmt_req_async_json(req *r)
{
    json_t *j = r->async_reply ? json_loads(r->async_reply, 0, NULL) : NULL;
    if (j && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
    }
    if (!j && !r->async_err)
        r->async_err = sl_xstrdup("the answer is not a JSON object");
    return j;
}

/* ------------------------------------------------------------------------------------------
 * Start / stop
 */

/* The requests a shutdown waits for (or a re-exec after a step-down, whose reply is one of
 * them), within its 2 s (the node part's live). */
static size_t mgmt_live(void *ctx)
{
    return http_server_inflight(((mgmt *)ctx)->srv);
}

mgmt *mgmt_start(sl_node *n, mq_state *mq, char *err, size_t errlen)
{
    mgmt *m = sl_xcalloc(1, sizeof *m);
    m->n = n;
    m->started_wall_ms = sl_wall_ms();
    mgmt_cluster_init(m); /* its timer, unarmed: mgmt_stop may look at it */
    const node_config *cfg = n->cfg;
    http_server_opts o = {
        .loop = n->loop,
        .bind = cfg->bind,
        .port = cfg->mgmt_port,
        .adopt_fd = cfg->adopt_http_fd,
        .tls_port = cfg->mgmt_tls_port,
        .adopt_tls_fd = cfg->adopt_https_fd,
        .tls = {.certfile = cfg->mgmt_ssl.certfile,
                .keyfile = cfg->mgmt_ssl.keyfile,
                .cacertfile = cfg->mgmt_ssl.cacertfile,
                .password = cfg->mgmt_ssl.password,
                .verify_peer = cfg->mgmt_ssl.verify_peer,
                .fail_if_no_peer_cert = cfg->mgmt_ssl.fail_if_no_peer_cert,
                .versions = cfg->mgmt_ssl.versions},
        .tls_conf = "management.ssl",
        .fd_reserve = n->fd_reserve / 2,
        .conn_max = &cfg->mgmt_connection_max,
        .unauth_max = &cfg->mgmt_unauthenticated_max,
        .handshake_ms = &cfg->mgmt_handshake_timeout_ms,
        .stopping = &n->shutting_down,
        .max_body = MGMT_MAX_BODY,
        .req_size = sizeof(req),
        .ctx = m,
        .begin = req_begin,
        .answered = req_answered,
        .handle = req_handle,
        .release = req_release,
    };
    mgmt_pager_init(m);
    if (!(m->srv = http_server_start(&o, err, errlen))) {
        sl_free(m);
        return NULL;
    }
    snprintf(m->addr, sizeof m->addr, "%s", http_server_addr(m->srv));
    m->port = http_server_port(m->srv);
    m->acceptor = http_server_acceptor(m->srv);
    if ((m->https = http_server_has_tls(m->srv))) {
        snprintf(m->tls_addr, sizeof m->tls_addr, "%s", http_server_tls_addr(m->srv));
        m->tls_port = http_server_tls_port(m->srv);
    }
    m->mq = mq;
    mgmt_sessions_init(m);
    mgmt_mgmtobj_init(m);
    sl_timer_init(&m->rundown_t, on_rundown, m);
    sl_timer_start(n->loop, &m->rundown_t, sl_now_ms() + mq_ctx_rundown_period_ms(m->n->cfg));
    sl_info("listening http=%s:%d", m->addr, m->port);
    node_add_listener(n, "http", m->addr, m->port, m->acceptor);
    node_part part = {.name = "http", .ctx = m, .live = mgmt_live};
    node_add_part(n, &part);
    return m;
}

int mgmt_port(const mgmt *m)
{
    return m->port;
}

void mgmt_stop(mgmt *m)
{
    if (!m)
        return;
    node_remove_part(m->n, m);
    /* Replies still waiting for the disk: sync now, so they are resumed, and let MHD queue
     * them before it stops (a suspended connection would keep the daemon from stopping). */
    node_sync(m->n);
    http_server_run(m->srv);
    http_server_close(m->srv);
    mgmt_pager_stop_all(m); /* MHD stops only with every connection resumed */
    if (sl_timer_armed(&m->rundown_t))
        sl_timer_stop(m->n->loop, &m->rundown_t);
    mq_ctxtab_free(&m->mobjs);
    mgmt_sessions_free(m);
    /* Password checks still running: cancelled, their requests let go (a suspended one is
     * resumed, then answered 401 or dropped as MHD stops). */
    while (m->authing) {
        req *r = m->authing;
        node_login_cancel(r->auth);
        auth_unlist(r);
        if (r->h.suspended && r->auth_waiting)
            http_unsuspend(&r->h);
        http_req_unref(&r->h); /* the job's */
    }
    /* Suspended requests: their answer may still come (it then only frees them). */
    http_server_orphan_held(m->srv);
    mgmt_cluster_stop(m);     /* its request is an orphan now */
    http_server_free(m->srv); /* closes every connection */
    sl_free(m);
}
