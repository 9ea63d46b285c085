/* mgmt.c - the management API's front: libmicrohttpd driven from the broker's event loop,
 * request bodies, HTTP basic auth, and routing to the handlers.
 *
 * MHD runs without a thread of its own (MHD_USE_EPOLL): its epoll fd is watched by the sl_node
 * loop and MHD_run() is called when it is readable; after every run the loop timer is re-armed
 * from MHD_get_timeout() so idle-connection timeouts and pending work are not missed. So every
 * handler runs on the loop thread and sees the broker as one consistent state.
 *
 * The listening socket is made and accepted here, not by MHD (MHD_USE_NO_LISTEN_SOCKET, and
 * MHD_add_connection for each connection): net/accept.c keeps descriptors in reserve and
 * stops accepting while mgmt_connection_max connections are open, taking the next one from the
 * backlog as soon as one closes. MHD 0.9.75 left to itself stopped accepting for good after a
 * burst over its connection limit (the backlog filled with CLOSE-WAIT sockets). Only
 * connections that logged in count against mgmt_connection_max: the others have a deadline
 * and a cap of their own, and push each other out (guard.c), so a flood of them cannot
 * stop the acceptor.
 *
 * HTTPS (management.ssl.port, .certfile, .keyfile, .cacertfile, .verify,
 * .fail_if_no_peer_cert, .versions.N) is a second daemon on its own listener, through
 * libmicrohttpd's own TLS (GnuTLS in Debian's build): same handlers, same loop. With
 * .cacertfile it asks clients for a certificate; with verify = verify_peer one that does not
 * verify is refused (403) before the request is looked at, and with fail_if_no_peer_cert so is
 * a client without one (libmicrohttpd gives no hook inside the handshake itself).
 *
 * The web console (console/, static.c) is served at every path outside /api/ and /metrics; its
 * login is a session (session.c): a cookie that authenticates like basic auth does, with a
 * custom header required on everything but GET (the CSRF guard).
 *
 * Browsers (docs/http-api.md "Requests from browsers"): a browser adds the cookie, or Basic
 * credentials it cached, to requests another site's page makes. So, however a request is
 * authenticated: nothing but a GET is taken from another origin (cross_origin: Sec-Fetch-Site,
 * else Origin against Host; API clients send neither), a body is taken only as
 * application/json (content_type_ok: no form can send that type), and a page's 401 carries no
 * Basic challenge (from_a_page), so no browser prompts for and caches credentials for a page.
 *
 * URL paths reach us raw (a no-op unescape callback): RabbitMQ's paths carry the vhost "/" as
 * %2F inside one segment, so segments are split first and percent-decoded afterwards.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "access/verifier.h"
#include "core/clock.h"
#include "core/hex.h"
#include "core/log.h"
#include "core/mem.h"
#include "net/listen.h"
#include "net/tls.h"
#include "mgmt/mgmt_internal.h"

/* ------------------------------------------------------------------------------------------
 * Loop glue
 */

static void run_mhd(mgmt *m)
{
    if (m->running)
        return;
    m->running = 1;
    MHD_run(m->d);
    if (m->tls_d)
        MHD_run(m->tls_d);
    m->running = 0;
    MHD_UNSIGNED_LONG_LONG to = 0, to2 = 0;
    int have = MHD_get_timeout(m->d, &to) == MHD_YES;
    if (m->tls_d && MHD_get_timeout(m->tls_d, &to2) == MHD_YES) {
        to = have && to < to2 ? to : to2;
        have = 1;
    }
    if (have) {
        /* 0 means "work is pending now" (MHD's epoll is edge-triggered inside). */
        sl_timer_start(m->n->loop, &m->t, sl_now_ms() + (to > 60000 ? 60000 : to));
    } else if (sl_timer_armed(&m->t)) {
        sl_timer_stop(m->n->loop, &m->t);
    }
}

static void on_epoll(sl_loop *loop, sl_watch *w, int events)
{
    (void)loop;
    (void)events;
    run_mhd(w->data);
}

static void on_timer(sl_loop *loop, sl_timer *t)
{
    (void)loop;
    run_mhd(t->data);
}

static int can_accept(sl_acceptor *a)
{
    mgmt *m = a->data;
    /* Shutting down (a deposed leader's re-exec among others): no new connection is taken;
     * they wait in the backlog for the process that comes next (the cluster proxy keeps the
     * listening socket), where an accepted one would be closed unanswered as MHD stops. */
    if (m->n->shutting_down)
        return 0;
    return m->n_proven < m->n->cfg->mgmt_connection_max;
}

static void on_accept(sl_acceptor *a, int fd, const struct sockaddr_storage *ss)
{
    mgmt *m = a->data;
    socklen_t len =
        ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    /* MHD owns (and on failure closes) the socket from here on. */
    struct MHD_Daemon *d = a == &m->tls_acceptor ? m->tls_d : m->d;
    if (MHD_add_connection(d, fd, (const struct sockaddr *)ss, len) != MHD_YES)
        sl_debug("http: connection not taken: %s", strerror(errno));
    /* Let MHD read what is already waiting; never from inside MHD_run itself. */
    sl_timer_start(m->n->loop, &m->t, sl_loop_now(m->n->loop));
}

static void on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    mgmt *m = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        m->n_conns++;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_DAEMON);
        int tls = ci && m->tls_d && ci->daemon == m->tls_d;
        *socket_context = guard_opened(m, tls ? &m->guard_https : &m->guard_http, connection);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (m->n_conns)
            m->n_conns--;
        guard_closed(m, *socket_context);
        *socket_context = NULL;
        sl_acceptor_kick(&m->acceptor);
        if (m->tls_d)
            sl_acceptor_kick(&m->tls_acceptor);
    }
}

/* The context-handle rundown: idle handles and management objects are closed a little after
 * handle_idle_timeout (at most a quarter of it late, and never more than 30 s). */
static uint64_t rundown_period_ms(const mgmt *m)
{
    uint64_t p = m->n->cfg->handle_idle_timeout_s * 1000 / 4;
    return p < 200 ? 200 : p > 30000 ? 30000 : p;
}

static void on_rundown(sl_loop *loop, sl_timer *t)
{
    mgmt *m = t->data;
    uint64_t now = sl_now_ms();
    mq_rundown(m->mq, now);
    ctx_rundown(&m->mobjs, now);
    sessions_sweep(m, now);
    sl_timer_start(loop, t, now + rundown_period_ms(m));
}

/* ------------------------------------------------------------------------------------------
 * Auth
 */

static int is_loopback(mgmt *m, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return 0;
    return node_peer_is_loopback(m->n, ci->client_addr);
}

/* HTTPS with management.ssl.verify = verify_peer: the client's certificate must verify
 * against management.ssl.cacertfile (and, with fail_if_no_peer_cert, be there at all). */
static int client_cert_ok(req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!ci || !ci->tls_session)
        return 1; /* the plain listener */
    gnutls_session_t s = (gnutls_session_t)ci->tls_session;
    unsigned n = 0;
    if (!gnutls_certificate_get_peers(s, &n) || n == 0)
        return !r->m->tls_require_cert;
    unsigned status = 0;
    if (gnutls_certificate_verify_peers2(s, &status) < 0 || status != 0) {
        sl_warn("https: a client certificate was refused (status 0x%x)", status);
        return 0;
    }
    return 1;
}

static void authed_as(req *r, const acc_user *u)
{
    r->authed = 1;
    r->tags = u->tag_bits;
    r->is_admin = (u->tag_bits & ACC_TAG_ADMINISTRATOR) != 0;
    r->user = sl_xstrdup(u->name);
    guard_proven(r->m, guard_of(r->conn));
}

static void auth_unlist(req *r)
{
    for (req **pp = &r->m->authing; *pp; pp = &(*pp)->auth_next)
        if (*pp == r) {
            *pp = r->auth_next;
            break;
        }
    r->auth_job = NULL;
    sl_free(r->auth_user);
    sl_free(r->auth_hash);
    r->auth_user = NULL;
    r->auth_hash = NULL;
}

static void req_unref(req *r);

/* The verifier's answer (loop thread). The request may have been answered meanwhile (the
 * client went away: only the job's reference keeps it). */
static void auth_checked(void *owner, int ok)
{
    req *r = owner;
    const acc_user *u = NULL;
    char why[400];
    if (acc_login_checked(r->m->n->acc, r->auth_user, strlen(r->auth_user), r->auth_hash,
                          r->auth_hash_len, ok, r->auth_loopback, &u, why, sizeof why) == SL_OK)
        authed_as(r, u);
    else
        sl_info("http: login refused: %s", why);
    auth_unlist(r);
    if (r->suspended && r->auth_waiting)
        req_resume(r); /* routed now (on_request) */
    req_unref(r);      /* the job's */
}

static void authenticate(req *r)
{
    char *pass = NULL;
    char *user = MHD_basic_auth_get_username_password(r->conn, &pass);
    if (user && pass) {
        const acc_user *u = NULL;
        char why[400];
        acc_db *a = r->m->n->acc;
        const acc_user *slow = acc_user_find(a, user, strlen(user));
        if (r->m->n->verifier && acc_login_is_slow(slow, strlen(pass))) {
            r->auth_job =
                acc_verifier_post(r->m->n->verifier, slow->algo, slow->hash, slow->hash_len,
                                  (const uint8_t *)pass, strlen(pass), auth_checked, r);
            if (r->auth_job) {
                r->refs++;
                r->auth_user = sl_xstrdup(user);
                r->auth_hash = sl_xmalloc(slow->hash_len ? slow->hash_len : 1);
                memcpy(r->auth_hash, slow->hash, slow->hash_len);
                r->auth_hash_len = slow->hash_len;
                r->auth_loopback = (uint8_t)is_loopback(r->m, r->conn);
                r->auth_next = r->m->authing;
                r->m->authing = r;
            } else {
                sl_info("http: login refused: user '%s' - too many slow password checks "
                        "waiting (%u); refused unchecked",
                        user, acc_verifier_pending(r->m->n->verifier));
            }
        } else if (acc_login_password(a, user, strlen(user), (const uint8_t *)pass, strlen(pass),
                                      is_loopback(r->m, r->conn), &u, why, sizeof why) == SL_OK) {
            authed_as(r, u);
        } else {
            sl_info("http: login refused: %s", why);
        }
    } else if (!user) {
        /* the console's session cookie (session.c) */
        const char *tok =
            MHD_lookup_connection_value(r->conn, MHD_COOKIE_KIND, MGMT_SESSION_COOKIE);
        const acc_user *u = tok ? session_user(r->m, tok) : NULL;
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

/* Does Origin (scheme://host[:port]) name the host the request was sent to (Host)? The scheme
 * is not compared: behind a proxy that ends TLS the browser's https origin reaches the plain
 * listener. A default port may be left out of either. */
static int origin_is_host(const char *origin, const char *host)
{
    size_t skip = !strncasecmp(origin, "http://", 7)    ? 7
                  : !strncasecmp(origin, "https://", 8) ? 8
                                                        : 0;
    if (!skip || !host)
        return 0;
    const char *o = origin + skip, *dflt = skip == 7 ? ":80" : ":443";
    size_t ol = strlen(o), hl = strlen(host), dl = strlen(dflt);
    if (ol == hl)
        return !strncasecmp(o, host, hl);
    if (hl == ol + dl) /* Origin without the default port, Host with it */
        return !strncasecmp(o, host, ol) && !strcmp(host + ol, dflt);
    if (ol == hl + dl) /* and the other way round */
        return !strncasecmp(o, host, hl) && !strcmp(o + hl, dflt);
    return 0;
}

/* The request was made by a browser for a page of another origin: Sec-Fetch-Site (every
 * browser of the last years sends it) when it is there, else Origin (sent with every POST,
 * PUT and DELETE a page makes, and compared with Host). A client that is no browser sends
 * neither (rabbitmqadmin, sluicectl, curl): it is not a page, so there is nothing to forge.
 * The reason, for the refusal, in why. */
static int cross_origin(req *r, char *why, size_t len)
{
    const char *site = header(r, "Sec-Fetch-Site");
    if (site) {
        if (!strcasecmp(site, "same-origin") || !strcasecmp(site, "none"))
            return 0;
        snprintf(why, len, "Sec-Fetch-Site: %.64s", site);
        return 1;
    }
    const char *origin = header(r, "Origin");
    if (!origin || origin_is_host(origin, header(r, "Host")))
        return 0;
    snprintf(why, len, "Origin %.128s is not this host", origin);
    return 1;
}

/* A page's request, not an API client's or a URL the user opened himself: the console's
 * (the guard header), or one whose browser says it came from a page (Origin, or a
 * Sec-Fetch-Site other than "none"). Such a request's 401 carries no WWW-Authenticate: a
 * browser would prompt for a password on behalf of whichever page asked, and then send what
 * was typed with every later request to the API, another site's included. */
static int from_a_page(req *r)
{
    const char *site = header(r, "Sec-Fetch-Site");
    return has_csrf_header(r) || header(r, "Origin") || (site && strcasecmp(site, "none"));
}

/* A body is only ever JSON, and only taken as JSON when the client says so: a form of another
 * site can send text/plain, urlencoded or multipart bodies without asking first (no CORS
 * preflight), never application/json. So a request with a body, or with a Content-Type, must
 * say application/json (parameters such as charset allowed). */
static int content_type_ok(req *r)
{
    const char *ct = header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct)
        return r->body.len == 0;
    ct += strspn(ct, " \t");
    static const char json[] = "application/json";
    size_t n = sizeof json - 1;
    return !strncasecmp(ct, json, n) &&
           (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t');
}

static enum MHD_Result reply_unauthorized(req *r)
{
    /* RabbitMQ's not_authenticated reply */
    json_t *j = json_pack("{s:s,s:s}", "error", "not_authorized", "reason", "Login failed");
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    /* not to a page's request (the console's among them): see from_a_page */
    if (!from_a_page(r))
        MHD_add_response_header(resp, "WWW-Authenticate", "Basic realm=\"Sluice Management\"");
    enum MHD_Result rc = MHD_queue_response(r->conn, MHD_HTTP_UNAUTHORIZED, resp);
    MHD_destroy_response(resp);
    r->responded = 1;
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Routing
 */

/* Percent-decode in place; -1 on a bad escape or an embedded NUL. */
static int pct_decode(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p == '%') {
            int v = sl_hex_byte(p + 1);
            if (v <= 0) /* a bad escape, or %00 */
                return -1;
            *o++ = (char)v;
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return 0;
}

/* Split "/api/a/b%2Fc/" into decoded segments; a leading "api" segment is dropped and
 * *is_api set. -1 on a malformed path; -2 when a decoded segment is not UTF-8: names are
 * UTF-8 everywhere (RabbitMQ's rule, and what JSON views and definitions can carry), so a
 * name that is not is refused at every door instead of vanishing from the exports. */
static int split_path(req *r, const char *url, int *is_api)
{
    *is_api = 0;
    const char *p = url;
    int first = 1;
    while (*p) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (!n)
            break;
        if (first && n == 3 && !memcmp(p, "api", 3)) {
            *is_api = 1;
        } else {
            if (r->nsegs == MGMT_MAX_SEGS)
                return -1;
            char *s = sl_xstrndup(p, n);
            r->segs[r->nsegs++] = s;
            if (pct_decode(s) < 0)
                return -1;
            if (!amqp_utf8_valid(amqp_cstr(s)))
                return -2;
        }
        first = 0;
        p += n;
    }
    return 0;
}

static const struct route {
    const char *name;
    api_fn fn;
} routes[] = {
    {"overview", api_overview},
    {"cluster", api_cluster},
    {"nodes", api_nodes},
    {"vhosts", api_vhosts},
    {"users", api_users},
    {"whoami", api_whoami},
    {"permissions", api_permissions},
    {"topic-permissions", api_topic_permissions},
    {"vhost-limits", api_vhost_limits},
    {"user-limits", api_user_limits},
    {"queues", api_queues},
    {"exchanges", api_exchanges},
    {"bindings", api_bindings},
    {"connections", api_connections},
    {"channels", api_channels},
    {"consumers", api_consumers},
    {"definitions", api_definitions},
    {"msmq", api_msmq},
    {"transactions", api_transactions},
    {"session", api_session},
};

/* Who may write what (RabbitMQ's rules, plus MSMQ's for its operations):
 *   - queues, exchanges, bindings, their contents, publish, get, move, HTTP transactions and
 *     queue handles: any management user, checked per resource by the handler with the
 *     user's permissions in the vhost (the AMQP rules: configure to declare and delete, write
 *     to publish and bind into, read to get, purge and bind from); administrators too need
 *     the permission, as in RabbitMQ, whose API does these through a channel of the user;
 *   - closing a connection: its own user, or an administrator (the handler checks);
 *   - everything else (users, vhosts, permissions, limits, definitions, MSMQ management
 *     actions and management-object actions): the administrator tag.
 * These POSTs and DELETEs only read: R_QMMgmtGetInfo (POST /api/msmq/info), and making,
 * binding (init) and releasing a management object, whose members only read. */
static int needs_admin(req *r)
{
    if (req_is(r, "GET"))
        return 0;
    const char *s0 = r->segs[0];
    if (!strcmp(s0, "queues") || !strcmp(s0, "exchanges") || !strcmp(s0, "bindings") ||
        !strcmp(s0, "transactions") || !strcmp(s0, "connections") || !strcmp(s0, "session"))
        return 0;
    if (r->nsegs < 2 || strcmp(s0, "msmq"))
        return 1;
    if (!strcmp(r->segs[1], "handles"))
        return 0;
    if (r->nsegs == 2 && !strcmp(r->segs[1], "info"))
        return 0;
    if (strcmp(r->segs[1], "management"))
        return 1;
    return !((r->nsegs == 2 && req_is(r, "POST")) || (r->nsegs == 3 && req_is(r, "DELETE")) ||
             (r->nsegs == 4 && req_is(r, "POST") && !strcmp(r->segs[3], "init")));
}

static enum MHD_Result route(req *r, const char *url)
{
    int is_api = 0;
    int sp = split_path(r, url, &is_api);
    if (sp == -2)
        return reply_error(r, 400, "bad_request",
                           "a name in the URL path is not valid UTF-8 (names must be UTF-8)");
    if (sp < 0)
        return reply_error(r, 400, "bad_request", "malformed URL path");
    if (!is_api) {
        if (r->nsegs >= 1 && !strcmp(r->segs[0], "metrics"))
            return serve_metrics(r);
        return serve_static(r, url);
    }
    /* Nothing but a read from another origin's page, however it is authenticated: the
     * browser adds the cookie or cached Basic credentials to a forged request by itself. */
    char why[200];
    if (!req_is(r, "GET") && cross_origin(r, why, sizeof why)) {
        sl_info("http: cross-origin %s refused (%s)", r->method, why);
        return reply_error(r, 403, "forbidden",
                           "cross-origin request refused (%s): the API takes changes only from "
                           "its own origin's pages and from clients that are no browser",
                           why);
    }
    int is_session = r->nsegs == 1 && !strcmp(r->segs[0], "session");
    /* The console's cookie stands for a login only with the custom header on what may change
     * something (another site's form cannot set one); so does a login itself. */
    if ((r->via_session || is_session) && !req_is(r, "GET") && !has_csrf_header(r))
        return reply_error(r, 403, "forbidden",
                           "the console's requests carry the " MGMT_CSRF_HEADER " header");
    /* logging out needs no live session, and asking whether there is one is no error */
    if (is_session && (req_is(r, "DELETE") || (req_is(r, "GET") && !r->authed)))
        return api_session(r);
    if (!r->authed)
        return reply_unauthorized(r);
    /* RabbitMQ's is_mgmt_user: the API is for users tagged management, policymaker,
     * monitoring or administrator. */
    if (!(r->tags & ACC_TAGS_MGMT))
        return reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "Not management user");
    if (r->nsegs == 0)
        return reply_not_found(r);
    if (needs_admin(r) && !req_require_admin(r))
        return MHD_YES;
    if (!req_is(r, "GET") && !content_type_ok(r)) {
        const char *ct = header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
        return reply_error(r, 415, "unsupported_media_type",
                           "a request body is JSON sent with Content-Type: application/json "
                           "(this one: %.64s)",
                           ct ? ct : "no Content-Type");
    }
    /* Definitions of users, vhosts and permissions are meta records: none under the disk
     * alarm (deleting them, like purging and deleting queues, stays allowed: it frees). */
    static const char *const meta_paths[] = {"vhosts", "users", "permissions", "topic-permissions"};
    if (req_is(r, "PUT") || req_is(r, "POST"))
        for (size_t i = 0; i < sizeof meta_paths / sizeof meta_paths[0]; i++)
            if (!strcmp(r->segs[0], meta_paths[i]) && !req_disk_ok(r, 0))
                return MHD_YES;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(r->segs[0], routes[i].name))
            return routes[i].fn(r);
    return reply_not_found(r);
}

static void req_free(req *r)
{
    if (!r->orphan) /* an orphan outlived the API (and m) */
        r->m->api_inflight--;
    pager_release(r); /* a list answered nowhere (the client went away) */
    for (size_t i = 0; i < r->nsegs; i++)
        sl_free(r->segs[i]);
    for (size_t i = 0; i < r->n_scratch; i++)
        sl_free(r->scratch[i]);
    sl_free(r->scratch);
    sl_buf_free(&r->body);
    if (r->json)
        json_decref(r->json);
    sl_free(r->user);
    if (r->held)
        MHD_destroy_response(r->held);
    sl_free(r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    mgmt *m = cls;
    req *r = *con_cls;
    if (!r) {
        r = sl_xcalloc(1, sizeof *r);
        r->refs = 1;
        r->m = m;
        r->conn = connection;
        /* HEAD is GET without a body; libmicrohttpd drops the body itself */
        r->method = strcmp(method, "HEAD") ? method : "GET";
        sl_buf_init(&r->body);
        m->api_inflight++; /* until req_free: a shutdown waits for it (node.h: live) */
        *con_cls = r;
        guard_request_started(m, guard_of(connection));
        const char *cl = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > MGMT_MAX_BODY)
            return reply_error(r, 413, "payload_too_large", "request body larger than %u bytes",
                               MGMT_MAX_BODY);
        if (m->tls_d && (m->tls_verify || m->tls_require_cert) && !client_cert_ok(r))
            return reply_error(r, 403, "not_authorised",
                               "a client certificate that verifies is required");
        authenticate(r);
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!r->responded && !r->too_large) {
            if (r->body.len + *upload_data_size > MGMT_MAX_BODY)
                r->too_large = 1; /* keep reading and dropping; answer 413 at the end */
            else
                sl_buf_append(&r->body, upload_data, *upload_data_size);
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->resumed && r->auth_waiting) {
        /* the password check answered: on to routing */
        r->resumed = 0;
        r->auth_waiting = 0;
    } else if (r->resumed && (!r->responded || r->held)) {
        /* answered asynchronously, or a reply that waited for its sync */
        r->resumed = 0;
        return r->on_resume(r);
    }
    if (r->responded || r->suspended)
        return MHD_YES;
    if (r->auth_job) { /* the password check still runs: wait for it */
        r->auth_waiting = 1;
        req_suspend(r, NULL);
        return MHD_YES;
    }
    if (r->too_large)
        return reply_error(r, 413, "payload_too_large", "request body larger than %u bytes",
                           MGMT_MAX_BODY);
    enum MHD_Result rc = route(r, url);
    if (!r->responded && !r->suspended) /* a handler that forgot to answer: do not hang */
        rc = reply_error(r, 500, "internal_error", "no reply");
    return rc;
}

static void req_unref(req *r)
{
    if (--r->refs == 0) {
        sl_free(r->async_reply);
        sl_free(r->async_err);
        req_free(r);
    }
}

void req_suspend(req *r, enum MHD_Result (*on_resume)(req *r))
{
    mgmt *m = r->m;
    r->on_resume = on_resume;
    r->suspended = 1;
    r->refs++; /* the answerer's */
    r->susp_next = m->suspended;
    m->suspended = r;
    MHD_suspend_connection(r->conn);
}

void req_resume(req *r)
{
    if (r->orphan) { /* the API stopped meanwhile */
        req_unref(r);
        return;
    }
    mgmt *m = r->m;
    for (req **pp = &m->suspended; *pp; pp = &(*pp)->susp_next)
        if (*pp == r) {
            *pp = r->susp_next;
            break;
        }
    r->suspended = 0;
    r->resumed = 1;
    MHD_resume_connection(r->conn);
    req_unref(r);
    /* MHD_run picks the connection up (never from inside MHD_run itself) */
    sl_timer_start(m->n->loop, &m->t, sl_loop_now(m->n->loop));
}

void req_link_done(void *ctx, const char *reply, const char *err)
{
    req *r = ctx;
    if (reply)
        r->async_reply = sl_xstrdup(reply);
    else
        r->async_err = sl_xstrdup(err ? err : "no reply");
    req_resume(r);
}

json_t *req_async_json(req *r)
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

static void on_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    if (*con_cls)
        req_unref(*con_cls);
    *con_cls = NULL;
    guard_request_done(cls, guard_of(connection));
}

/* Keep %XX escapes: routing splits segments before decoding (see top of file). */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s);
}

__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    sl_debug("http: %s", line);
}

/* ------------------------------------------------------------------------------------------
 * Start / stop
 */

static int open_listener(mgmt *m, char *err, size_t errlen)
{
    const sl_config *cfg = m->n->cfg;
    if (cfg->adopt_http_fd >= 0)
        return sl_listen_adopt(cfg->adopt_http_fd, m->addr, sizeof m->addr, &m->port, err, errlen);
    return sl_listen_tcp(cfg->bind, cfg->mgmt_port, 1024, m->addr, sizeof m->addr, &m->port, err,
                         errlen);
}

/* MHD's own cap, never reached: logged-in connections (both listeners) and this one's
 * unproven ones, plus those shut down by the guard that MHD has yet to close. */
static unsigned conn_limit(const sl_config *cfg)
{
    return (unsigned)(cfg->mgmt_connection_max + cfg->mgmt_unauthenticated_max + 64);
}

static char *read_pem(const char *path, const char *what, char *err, size_t errlen)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        snprintf(err, errlen, "management.ssl.%s %s: %s", what, path ? path : "(not set)",
                 path ? strerror(errno) : "required for HTTPS");
        return NULL;
    }
    sl_buf b;
    sl_buf_init(&b);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len < (1u << 20))
        sl_buf_append(&b, chunk, n);
    fclose(f);
    sl_buf_put_u8(&b, 0);
    return (char *)b.data;
}

/* The HTTPS daemon (management.ssl.*): GnuTLS through libmicrohttpd, versions as the AMQP
 * listener's (TLS 1.2 and 1.3 unless management.ssl.versions.N say otherwise). */
static int start_tls(mgmt *m, char *err, size_t errlen)
{
    const sl_config *cfg = m->n->cfg;
    const struct sl_tls_conf *t = &cfg->mgmt_ssl;
    if (!(m->tls_cert = read_pem(t->certfile, "certfile", err, errlen)) ||
        !(m->tls_key = read_pem(t->keyfile ? t->keyfile : t->certfile, "keyfile", err, errlen)))
        return -1;
    if (t->cacertfile && !(m->tls_trust = read_pem(t->cacertfile, "cacertfile", err, errlen)))
        return -1;
    m->tls_verify = t->verify_peer;
    m->tls_require_cert = t->verify_peer && t->fail_if_no_peer_cert;
    char prio[160] = "NORMAL:-VERS-ALL";
    unsigned vs = t->versions ? t->versions : (SL_TLS_V1_2 | SL_TLS_V1_3);
    static const struct {
        unsigned bit;
        const char *name;
    } vn[] = {{SL_TLS_V1_3, ":+VERS-TLS1.3"},
              {SL_TLS_V1_2, ":+VERS-TLS1.2"},
              {SL_TLS_V1_1, ":+VERS-TLS1.1"},
              {SL_TLS_V1_0, ":+VERS-TLS1.0"}};
    for (size_t i = 0; i < sizeof vn / sizeof vn[0]; i++)
        if (vs & vn[i].bit)
            strncat(prio, vn[i].name, sizeof prio - strlen(prio) - 1);
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_HTTPS_MEM_KEY, 0, m->tls_key},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, m->tls_cert},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, prio},
        {m->tls_trust ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, 0, m->tls_trust},
        {t->password ? MHD_OPTION_HTTPS_KEY_PASSWORD : MHD_OPTION_END, 0, t->password},
        {MHD_OPTION_END, 0, NULL},
    };
    if (!m->tls_trust) { /* keep the array dense: END ends it */
        opts[3] = opts[4];
        opts[4] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    }
    m->tls_d = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_TLS,
        0, NULL, NULL, on_request, m, MHD_OPTION_NOTIFY_COMPLETED, on_completed, m,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, m, MHD_OPTION_UNESCAPE_CALLBACK, no_unescape,
        m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(64 * 1024), MHD_OPTION_CONNECTION_LIMIT, conn_limit(cfg),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (!m->tls_d) {
        snprintf(err, errlen,
                 "cannot start the HTTPS server (management.ssl.certfile / keyfile / "
                 "cacertfile: %s, %s)",
                 t->certfile, t->keyfile ? t->keyfile : t->certfile);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(m->tls_d, MHD_DAEMON_INFO_EPOLL_FD);
    int fd = !di ? -1
             : cfg->adopt_https_fd >= 0
                 ? sl_listen_adopt(cfg->adopt_https_fd, m->tls_addr, sizeof m->tls_addr,
                                   &m->tls_port, err, errlen)
                 : sl_listen_tcp(cfg->bind, cfg->mgmt_tls_port, 1024, m->tls_addr,
                                 sizeof m->tls_addr, &m->tls_port, err, errlen);
    if (fd < 0) {
        if (!di)
            snprintf(err, errlen, "libmicrohttpd has no epoll fd");
        MHD_stop_daemon(m->tls_d);
        m->tls_d = NULL;
        return -1;
    }
    m->tls_w.fd = di->epoll_fd;
    m->tls_w.fn = on_epoll;
    m->tls_w.data = m;
    m->tls_listen_fd = fd;
    if (sl_loop_watch(m->n->loop, &m->tls_w, SL_EV_READ) < 0 ||
        sl_acceptor_start(&m->tls_acceptor, m->n->loop, fd, "https", m->n->fd_reserve / 2,
                          on_accept, can_accept, m) < 0) {
        snprintf(err, errlen, "cannot watch the HTTPS server: %s", strerror(errno));
        sl_loop_unwatch(m->n->loop, &m->tls_w);
        MHD_stop_daemon(m->tls_d);
        m->tls_d = NULL;
        close(fd);
        return -1;
    }
    sl_info("listening https=%s:%d", m->tls_addr, m->tls_port);
    return 0;
}

/* The requests a shutdown waits for. */
static size_t mgmt_live(void *ctx)
{
    return ((mgmt *)ctx)->api_inflight;
}

mgmt *mgmt_start(sl_node *n, mq_state *mq, char *err, size_t errlen)
{
    mgmt *m = sl_xcalloc(1, sizeof *m);
    m->n = n;
    m->started_wall_ms = sl_wall_ms();
    mgmt_cluster_init(m); /* its timer, unarmed: mgmt_stop may look at it */
    int fd = open_listener(m, err, errlen);
    if (fd < 0) {
        sl_free(m);
        return NULL;
    }
    /* MHD's own limit is never reached: the acceptor stops first (it counts what MHD
     * reports through the connection notifications). */
    m->d = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME, 0,
        NULL, NULL, on_request, m, MHD_OPTION_NOTIFY_COMPLETED, on_completed, m,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, m, MHD_OPTION_UNESCAPE_CALLBACK, no_unescape,
        m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(64 * 1024), MHD_OPTION_CONNECTION_LIMIT, conn_limit(n->cfg),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_END);
    if (!m->d) {
        snprintf(err, errlen, "cannot start the HTTP server on %s:%d", m->addr, m->port);
        close(fd);
        sl_free(m);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_EPOLL_FD);
    if (!di) {
        snprintf(err, errlen, "libmicrohttpd has no epoll fd");
        MHD_stop_daemon(m->d);
        close(fd);
        sl_free(m);
        return NULL;
    }
    m->w.fd = di->epoll_fd;
    m->w.fn = on_epoll;
    m->w.data = m;
    sl_timer_init(&m->t, on_timer, m);
    pager_init(m);
    guard_init(m);
    m->listen_fd = fd;
    if (sl_loop_watch(n->loop, &m->w, SL_EV_READ) < 0 ||
        sl_acceptor_start(&m->acceptor, n->loop, fd, "http", n->fd_reserve / 2, on_accept,
                          can_accept, m) < 0) {
        snprintf(err, errlen, "cannot watch the HTTP server: %s", strerror(errno));
        sl_loop_unwatch(n->loop, &m->w);
        MHD_stop_daemon(m->d);
        close(fd);
        sl_free(m);
        return NULL;
    }
    m->tls_listen_fd = -1;
    if ((n->cfg->mgmt_tls_port >= 0 || n->cfg->adopt_https_fd >= 0) &&
        start_tls(m, err, errlen) < 0) {
        sl_acceptor_stop(&m->acceptor);
        sl_loop_unwatch(n->loop, &m->w);
        MHD_stop_daemon(m->d);
        close(fd);
        sl_free(m);
        return NULL;
    }
    m->mq = mq;
    sessions_init(m);
    mgmtobj_init(m);
    sl_timer_init(&m->rundown_t, on_rundown, m);
    sl_timer_start(n->loop, &m->rundown_t, sl_now_ms() + rundown_period_ms(m));
    sl_info("listening http=%s:%d", m->addr, m->port);
    node_add_listener(n, "http", m->addr, m->port, &m->acceptor);
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
    run_mhd(m);
    sl_acceptor_stop(&m->acceptor);
    close(m->listen_fd);
    pager_stop_all(m); /* MHD stops only with every connection resumed */
    sl_loop_unwatch(m->n->loop, &m->w);
    if (sl_timer_armed(&m->t))
        sl_timer_stop(m->n->loop, &m->t);
    if (sl_timer_armed(&m->rundown_t))
        sl_timer_stop(m->n->loop, &m->rundown_t);
    ctxtab_free(&m->mobjs);
    mgmtobj_stop(m);
    sessions_free(m);
    /* Password checks still running: cancelled, their requests let go (a suspended one is
     * resumed, then answered 401 or dropped as MHD stops). */
    while (m->authing) {
        req *r = m->authing;
        acc_verify_cancel(r->auth_job);
        auth_unlist(r);
        if (r->suspended && r->auth_waiting) {
            for (req **pp = &m->suspended; *pp; pp = &(*pp)->susp_next)
                if (*pp == r) {
                    *pp = r->susp_next;
                    break;
                }
            r->suspended = 0;
            MHD_resume_connection(r->conn);
            req_unref(r); /* the suspension's */
        }
        req_unref(r); /* the job's */
    }
    /* Suspended requests: their answer may still come (it then only frees them). */
    while (m->suspended) {
        req *r = m->suspended;
        m->suspended = r->susp_next;
        r->orphan = 1;
        MHD_resume_connection(r->conn);
    }
    mgmt_cluster_stop(m);  /* its request is an orphan now */
    MHD_stop_daemon(m->d); /* closes every connection */
    if (m->tls_d) {
        sl_acceptor_stop(&m->tls_acceptor);
        close(m->tls_listen_fd);
        sl_loop_unwatch(m->n->loop, &m->tls_w);
        MHD_stop_daemon(m->tls_d);
    }
    guard_stop(m);
    sl_free(m->tls_key);
    sl_free(m->tls_cert);
    sl_free(m->tls_trust);
    sl_free(m);
}
