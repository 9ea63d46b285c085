/* server.c - libmicrohttpd driven from sluiced's event loop: listeners, TLS, request bodies,
 * held requests (see server.h for the API).
 *
 * MHD runs without a thread of its own (MHD_USE_EPOLL): its epoll fd is watched by the loop
 * and MHD_run() is called when it is readable; after every run the loop timer is re-armed
 * from MHD_get_timeout() so idle-connection timeouts and pending work are not missed. So every
 * callback runs on the loop thread.
 *
 * The listening socket is made and accepted here, not by MHD (MHD_USE_NO_LISTEN_SOCKET, and
 * MHD_add_connection for each connection): net/accept.c keeps descriptors in reserve and
 * stops accepting while *conn_max connections are open, taking the next one from the backlog
 * as soon as one closes. MHD 0.9.75 left to itself stopped accepting for good after a burst
 * over its connection limit (the backlog filled with CLOSE-WAIT sockets). Only connections
 * that logged in count against *conn_max: the others have a deadline and a cap of their own,
 * and push each other out (http/guard.c), so a flood of them cannot stop the acceptor.
 *
 * TLS (management.ssl.port, .certfile, .keyfile, .cacertfile, .verify, .fail_if_no_peer_cert,
 * .versions.N for the management API) is a second daemon on its own listener, through
 * libmicrohttpd's own TLS (GnuTLS in Debian's build): same callbacks, same loop. With a
 * cacertfile it asks clients for a certificate; with verify_peer one that does not verify is
 * refused (http_req_cert_refused: the application answers 403) before the request is looked
 * at, and with fail_if_no_peer_cert so is a client without one (libmicrohttpd gives no hook
 * inside the handshake itself).
 *
 * URL paths reach the application raw (a no-op unescape callback): RabbitMQ's paths carry the
 * vhost "/" as %2F inside one segment, so segments are split first and percent-decoded
 * afterwards (mgmt.c).
 *
 * Invariants: inflight counts the requests allocated and not freed, orphans excepted; a
 * request is on the held list exactly while it is suspended and not an orphan.
 */
#include <errno.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "http/guard.h"
#include "http/request.h"
#include "http/server.h"
#include "net/listen.h"

struct http_server {
    http_server_opts o;
    struct MHD_Daemon *d;
    sl_watch w;  /* MHD's epoll fd, readable when MHD has work */
    sl_timer t;  /* MHD's own timeouts (idle connections, pending writes) */
    int running; /* inside MHD_run: no re-entry */
    int listen_fd;
    sl_acceptor acceptor; /* accepts for MHD: descriptor reserve, connection cap */
    unsigned n_conns;     /* connections MHD holds (its notifications) */
    unsigned inflight;    /* requests begun and not yet freed */
    http_guard guard;
    char addr[64];
    int port;
    /* TLS: a second MHD daemon with GnuTLS, accepted and run the same way; tls_d NULL when
     * off. The PEM texts stay allocated while the daemon runs. */
    struct MHD_Daemon *tls_d;
    sl_watch tls_w;
    int tls_listen_fd;
    sl_acceptor tls_acceptor;
    char tls_addr[64];
    int tls_port;
    char *tls_key, *tls_cert, *tls_trust;
    int tls_verify, tls_require_cert;
    http_req *held; /* suspended requests (http_suspend) */
};

/* ------------------------------------------------------------------------------------------
 * Loop glue
 */

void http_server_run(http_server *s)
{
    if (s->running)
        return;
    s->running = 1;
    MHD_run(s->d);
    if (s->tls_d)
        MHD_run(s->tls_d);
    s->running = 0;
    MHD_UNSIGNED_LONG_LONG to = 0, to2 = 0;
    int have = MHD_get_timeout(s->d, &to) == MHD_YES;
    if (s->tls_d && MHD_get_timeout(s->tls_d, &to2) == MHD_YES) {
        to = have && to < to2 ? to : to2;
        have = 1;
    }
    if (have) {
        /* 0 means "work is pending now" (MHD's epoll is edge-triggered inside). */
        sl_timer_start(s->o.loop, &s->t, sl_now_ms() + (to > 60000 ? 60000 : to));
    } else if (sl_timer_armed(&s->t)) {
        sl_timer_stop(s->o.loop, &s->t);
    }
}

/* MHD_run soon, from the loop (never from inside MHD_run itself). */
static void kick(http_server *s)
{
    sl_timer_start(s->o.loop, &s->t, sl_loop_now(s->o.loop));
}

static void on_epoll(sl_loop *loop, sl_watch *w, int events)
{
    (void)loop;
    (void)events;
    http_server_run(w->data);
}

static void on_timer(sl_loop *loop, sl_timer *t)
{
    (void)loop;
    http_server_run(t->data);
}

static int can_accept(sl_acceptor *a)
{
    http_server *s = a->data;
    /* Shutting down (a deposed leader's re-exec among others): no new connection is taken;
     * they wait in the backlog for the process that comes next (the cluster proxy keeps the
     * listening socket), where an accepted one would be closed unanswered as MHD stops. */
    if (*s->o.stopping)
        return 0;
    return s->guard.n_proven < *s->o.conn_max;
}

static void on_accept(sl_acceptor *a, int fd, const struct sockaddr_storage *ss)
{
    http_server *s = a->data;
    socklen_t len =
        ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    /* MHD owns (and on failure closes) the socket from here on. */
    struct MHD_Daemon *d = a == &s->tls_acceptor ? s->tls_d : s->d;
    if (MHD_add_connection(d, fd, (const struct sockaddr *)ss, len) != MHD_YES)
        sl_debug("http: connection not taken: %s", strerror(errno));
    /* Let MHD read what is already waiting; never from inside MHD_run itself. */
    kick(s);
}

static void on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        s->n_conns++;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_DAEMON);
        int tls = ci && s->tls_d && ci->daemon == s->tls_d;
        *socket_context =
            http_guard_opened(&s->guard, tls ? &s->guard.tls : &s->guard.plain, connection);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (s->n_conns)
            s->n_conns--;
        http_guard_closed(&s->guard, *socket_context);
        *socket_context = NULL;
        sl_acceptor_kick(&s->acceptor);
        if (s->tls_d)
            sl_acceptor_kick(&s->tls_acceptor);
    }
}

/* ------------------------------------------------------------------------------------------
 * Requests
 */

void http_req_ref(http_req *h)
{
    h->refs++;
}

void http_req_unref(http_req *h)
{
    if (--h->refs)
        return;
    if (!h->orphan) /* an orphan outlived the server */
        h->s->inflight--;
    h->release(h);
    sl_buf_free(&h->body);
    for (size_t i = 0; i < h->n_scratch; i++)
        sl_free(h->scratch[i]);
    sl_free(h->scratch);
    if (h->held)
        MHD_destroy_response(h->held);
    sl_free(h);
}

const char *http_req_query(http_req *h, const char *key)
{
    const char *raw = MHD_lookup_connection_value(h->conn, MHD_GET_ARGUMENT_KIND, key);
    if (!raw)
        return NULL;
    char *s = http_query_decode(raw);
    h->scratch = sl_xrealloc(h->scratch, (h->n_scratch + 1) * sizeof *h->scratch);
    h->scratch[h->n_scratch++] = s;
    return s;
}

void http_hold(http_req *h, unsigned status, struct MHD_Response *resp)
{
    h->held = resp;
    h->held_status = status;
}

enum MHD_Result http_send_held(http_req *h)
{
    struct MHD_Response *resp = h->held;
    h->held = NULL;
    enum MHD_Result rc = MHD_queue_response(h->conn, h->held_status, resp);
    MHD_destroy_response(resp);
    return rc;
}

void http_req_proven(http_req *h)
{
    http_guard_proven(&h->s->guard, http_guard_of(h->conn));
}

int http_req_cert_refused(http_req *h)
{
    http_server *s = h->s;
    if (!s->tls_d || !(s->tls_verify || s->tls_require_cert))
        return 0;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(h->conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!ci || !ci->tls_session)
        return 0; /* the plain listener */
    gnutls_session_t t = (gnutls_session_t)ci->tls_session;
    unsigned n = 0;
    if (!gnutls_certificate_get_peers(t, &n) || n == 0)
        return s->tls_require_cert;
    unsigned status = 0;
    if (gnutls_certificate_verify_peers2(t, &status) < 0 || status != 0) {
        sl_warn("https: a client certificate was refused (status 0x%x)", status);
        return 1;
    }
    return 0;
}

static void unhold(http_req *h)
{
    for (http_req **pp = &h->s->held; *pp; pp = &(*pp)->susp_next)
        if (*pp == h) {
            *pp = h->susp_next;
            break;
        }
    h->suspended = 0;
}

void http_suspend(http_req *h)
{
    h->suspended = 1;
    h->refs++; /* the answerer's */
    h->susp_next = h->s->held;
    h->s->held = h;
    MHD_suspend_connection(h->conn);
}

void http_resume(http_req *h)
{
    if (h->orphan) { /* the server stopped meanwhile */
        http_req_unref(h);
        return;
    }
    http_server *s = h->s;
    unhold(h);
    h->resumed = 1;
    MHD_resume_connection(h->conn);
    http_req_unref(h);
    /* MHD_run picks the connection up (never from inside MHD_run itself) */
    kick(s);
}

void http_unsuspend(http_req *h)
{
    unhold(h);
    MHD_resume_connection(h->conn);
    http_req_unref(h); /* the suspension's */
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    http_server *s = cls;
    http_req *h = *con_cls;
    if (!h) {
        h = sl_xcalloc(1, s->o.req_size);
        h->refs = 1;
        h->s = s;
        h->conn = connection;
        h->release = s->o.release;
        /* HEAD is GET without a body; libmicrohttpd drops the body itself */
        h->method = strcmp(method, "HEAD") ? method : "GET";
        sl_buf_init(&h->body);
        s->inflight++; /* until freed: a shutdown waits for it */
        *con_cls = h;
        http_guard_request_started(&s->guard, http_guard_of(connection));
        const char *cl = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body)
            h->too_large = 1;
        return s->o.begin(h, url);
    }
    if (*upload_data_size) {
        if (!s->o.answered(h) && !h->too_large) {
            if (h->body.len + *upload_data_size > s->o.max_body)
                h->too_large = 1; /* keep reading and dropping; answer 413 at the end */
            else
                sl_buf_append(&h->body, upload_data, *upload_data_size);
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    return s->o.handle(h, url);
}

static void on_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    http_server *s = cls;
    if (*con_cls)
        http_req_unref(*con_cls);
    *con_cls = NULL;
    http_guard_request_done(&s->guard, http_guard_of(connection));
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

/* MHD's own cap, never reached: logged-in connections (both listeners) and this one's
 * unproven ones, plus those shut down by the guard that MHD has yet to close. */
static unsigned conn_limit(const http_server *s)
{
    return (unsigned)(*s->o.conn_max + *s->o.unauth_max + 64);
}

static struct MHD_Daemon *start_daemon(http_server *s, unsigned flags, struct MHD_OptionItem *tls)
{
    static struct MHD_OptionItem none[] = {{MHD_OPTION_END, 0, NULL}};
    return MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME |
            flags,
        0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_UNESCAPE_CALLBACK, no_unescape,
        s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(64 * 1024), MHD_OPTION_CONNECTION_LIMIT, conn_limit(s),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_ARRAY, tls ? tls : none,
        MHD_OPTION_END);
}

static char *read_pem(const http_server *s, const char *path, const char *what, char *err,
                      size_t errlen)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s.%s %s: %s", s->o.tls_conf, what, path ? path : "(not set)",
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

/* The TLS daemon: GnuTLS through libmicrohttpd, versions as the AMQP listener's (TLS 1.2 and
 * 1.3 unless the settings' versions say otherwise). */
static int start_tls(http_server *s, char *err, size_t errlen)
{
    const http_tls_opts *t = &s->o.tls;
    if (!(s->tls_cert = read_pem(s, t->certfile, "certfile", err, errlen)) ||
        !(s->tls_key = read_pem(s, t->keyfile ? t->keyfile : t->certfile, "keyfile", err, errlen)))
        return -1;
    if (t->cacertfile && !(s->tls_trust = read_pem(s, t->cacertfile, "cacertfile", err, errlen)))
        return -1;
    s->tls_verify = t->verify_peer;
    s->tls_require_cert = t->verify_peer && t->fail_if_no_peer_cert;
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
        {MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, prio},
        {s->tls_trust ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, 0, s->tls_trust},
        {t->password ? MHD_OPTION_HTTPS_KEY_PASSWORD : MHD_OPTION_END, 0, (void *)t->password},
        {MHD_OPTION_END, 0, NULL},
    };
    if (!s->tls_trust) { /* keep the array dense: END ends it */
        opts[3] = opts[4];
        opts[4] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    }
    s->tls_d = start_daemon(s, MHD_USE_TLS, opts);
    if (!s->tls_d) {
        snprintf(err, errlen,
                 "cannot start the HTTPS server (%s.certfile / keyfile / "
                 "cacertfile: %s, %s)",
                 s->o.tls_conf, t->certfile, t->keyfile ? t->keyfile : t->certfile);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->tls_d, MHD_DAEMON_INFO_EPOLL_FD);
    int fd = !di ? -1
             : s->o.adopt_tls_fd >= 0
                 ? sl_listen_adopt(s->o.adopt_tls_fd, s->tls_addr, sizeof s->tls_addr, &s->tls_port,
                                   err, errlen)
                 : sl_listen_tcp(s->o.bind, s->o.tls_port, 1024, s->tls_addr, sizeof s->tls_addr,
                                 &s->tls_port, err, errlen);
    if (fd < 0) {
        if (!di)
            snprintf(err, errlen, "libmicrohttpd has no epoll fd");
        MHD_stop_daemon(s->tls_d);
        s->tls_d = NULL;
        return -1;
    }
    s->tls_w.fd = di->epoll_fd;
    s->tls_w.fn = on_epoll;
    s->tls_w.data = s;
    s->tls_listen_fd = fd;
    if (sl_loop_watch(s->o.loop, &s->tls_w, SL_EV_READ) < 0 ||
        sl_acceptor_start(&s->tls_acceptor, s->o.loop, fd, "https", s->o.fd_reserve, on_accept,
                          can_accept, s) < 0) {
        snprintf(err, errlen, "cannot watch the HTTPS server: %s", strerror(errno));
        sl_loop_unwatch(s->o.loop, &s->tls_w);
        MHD_stop_daemon(s->tls_d);
        s->tls_d = NULL;
        close(fd);
        return -1;
    }
    sl_info("listening https=%s:%d", s->tls_addr, s->tls_port);
    return 0;
}

static void free_pems(http_server *s)
{
    sl_free(s->tls_key);
    sl_free(s->tls_cert);
    sl_free(s->tls_trust);
    sl_free(s);
}

http_server *http_server_start(const http_server_opts *o, char *err, size_t errlen)
{
    http_server *s = sl_xcalloc(1, sizeof *s);
    s->o = *o;
    int fd =
        o->adopt_fd >= 0
            ? sl_listen_adopt(o->adopt_fd, s->addr, sizeof s->addr, &s->port, err, errlen)
            : sl_listen_tcp(o->bind, o->port, 1024, s->addr, sizeof s->addr, &s->port, err, errlen);
    if (fd < 0) {
        sl_free(s);
        return NULL;
    }
    /* MHD's own limit is never reached: the acceptor stops first (it counts what MHD
     * reports through the connection notifications). */
    s->d = start_daemon(s, 0, NULL);
    if (!s->d) {
        snprintf(err, errlen, "cannot start the HTTP server on %s:%d", s->addr, s->port);
        close(fd);
        sl_free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
    if (!di) {
        snprintf(err, errlen, "libmicrohttpd has no epoll fd");
        MHD_stop_daemon(s->d);
        close(fd);
        sl_free(s);
        return NULL;
    }
    s->w.fd = di->epoll_fd;
    s->w.fn = on_epoll;
    s->w.data = s;
    sl_timer_init(&s->t, on_timer, s);
    http_guard_init(&s->guard, o->loop, &s->t, o->unauth_max, o->handshake_ms);
    s->listen_fd = fd;
    if (sl_loop_watch(o->loop, &s->w, SL_EV_READ) < 0 ||
        sl_acceptor_start(&s->acceptor, o->loop, fd, "http", o->fd_reserve, on_accept, can_accept,
                          s) < 0) {
        snprintf(err, errlen, "cannot watch the HTTP server: %s", strerror(errno));
        sl_loop_unwatch(o->loop, &s->w);
        MHD_stop_daemon(s->d);
        close(fd);
        sl_free(s);
        return NULL;
    }
    s->tls_listen_fd = -1;
    if ((o->tls_port >= 0 || o->adopt_tls_fd >= 0) && start_tls(s, err, errlen) < 0) {
        sl_acceptor_stop(&s->acceptor);
        sl_loop_unwatch(o->loop, &s->w);
        MHD_stop_daemon(s->d);
        close(fd);
        free_pems(s);
        return NULL;
    }
    return s;
}

void http_server_close(http_server *s)
{
    sl_acceptor_stop(&s->acceptor);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    s->listen_fd = -1;
    if (s->tls_d) {
        sl_acceptor_stop(&s->tls_acceptor);
        if (s->tls_listen_fd >= 0)
            close(s->tls_listen_fd);
        s->tls_listen_fd = -1;
    }
}

void http_server_orphan_held(http_server *s)
{
    /* their answer may still come (it then only frees them) */
    while (s->held) {
        http_req *h = s->held;
        s->held = h->susp_next;
        h->orphan = 1;
        MHD_resume_connection(h->conn);
    }
}

void http_server_free(http_server *s)
{
    sl_loop_unwatch(s->o.loop, &s->w);
    if (sl_timer_armed(&s->t))
        sl_timer_stop(s->o.loop, &s->t);
    http_server_close(s);  /* when the caller did not */
    MHD_stop_daemon(s->d); /* closes every connection */
    if (s->tls_d) {
        sl_loop_unwatch(s->o.loop, &s->tls_w);
        MHD_stop_daemon(s->tls_d);
    }
    http_guard_stop(&s->guard);
    free_pems(s);
}

void *http_server_ctx(const http_server *s)
{
    return s->o.ctx;
}
const char *http_server_addr(const http_server *s)
{
    return s->addr;
}
int http_server_port(const http_server *s)
{
    return s->port;
}
int http_server_has_tls(const http_server *s)
{
    return s->tls_d != NULL;
}
const char *http_server_tls_addr(const http_server *s)
{
    return s->tls_addr;
}
int http_server_tls_port(const http_server *s)
{
    return s->tls_port;
}
sl_acceptor *http_server_acceptor(http_server *s)
{
    return &s->acceptor;
}
unsigned http_server_conns(const http_server *s)
{
    return s->n_conns;
}
unsigned http_server_inflight(const http_server *s)
{
    return s->inflight;
}
