/* door.c - the stream door's object: its listeners (listeners.stream, and
 * listeners.stream.ssl with the AMQPS listener's ssl_options.*), its connections, and what the
 * node asks of it as a part (node/node.h): free the connections killed this turn, close every
 * connection at shutdown, those of a deleted user or vhost, count them for the limits.
 *
 * Invariants: a connection is on conns from accept until it is killed, then on dead until the
 * turn hook frees it, so no handler up the stack ever holds a freed connection. The door is
 * freed by the part's stop hook (node_free), after the shutdown closed what it could.
 */
#include "stream/internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/list.h"
#include "core/log.h"
#include "core/mem.h"
#include "net/listen.h"
#include "net/tls.h"

void stream_door_retire(stream_door *d, stream_conn *c)
{
    SL_LIST_UNLINK(d->conns, c, prev, next);
    d->n_conns--;
    node_client_cursor_forget(&d->view, c);
    c->next = d->dead;
    c->prev = NULL;
    d->dead = c;
    /* A descriptor came back: a listener paused at the reserve may take the next one. */
    if (d->fd >= 0)
        sl_acceptor_kick(&d->acc);
    if (d->tls_fd >= 0)
        sl_acceptor_kick(&d->tls_acc);
}

static void free_dead(stream_door *d)
{
    while (d->dead) {
        stream_conn *c = d->dead;
        d->dead = c->next;
        stream_conn_free(c);
    }
}

/* ---- the node's hooks ---- */

void stream_door_dirty(stream_door *d, stream_conn *c)
{
    if (c->dirty || c->state == SC_DEAD)
        return;
    c->dirty = 1;
    c->dirty_next = d->dirty;
    d->dirty = c;
}

/* Flush what deliveries and confirms wrote outside the frame handlers. A flush may kill its
 * connection: it then only moves to the dead list, freed after this. */
static void flush_dirty(stream_door *d)
{
    for (int round = 0; round < 4 && d->dirty; round++) {
        stream_conn *list = d->dirty;
        d->dirty = NULL;
        while (list) {
            stream_conn *c = list;
            list = c->dirty_next;
            c->dirty = 0;
            c->dirty_next = NULL;
            if (c->state != SC_DEAD)
                stream_conn_flush(c);
        }
    }
}

/* A stream deleted (by any door) under publishers: they hear of it as RabbitMQ's do. Deletions
 * are rare; the scan runs only after one. */
static void check_publishers(stream_door *d)
{
    uint64_t n = d->n->qm->queues_deleted;
    if (n == d->queues_deleted)
        return;
    d->queues_deleted = n;
    for (stream_conn *c = d->conns; c; c = c->next)
        if (c->n_pubs && c->state == SC_OPEN) {
            stream_publishers_check(c);
            stream_door_dirty(d, c);
        }
}

static int turn(void *ctx)
{
    check_publishers(ctx);
    flush_dirty(ctx);
    free_dead(ctx);
    return 0;
}

/* Resource alarms: connections with publishers stop being read while one is on, and go on
 * (with the frames they hold) once all are off. */
static void alarms_changed(void *ctx, int blocked)
{
    stream_door *d = ctx;
    d->blocked = (uint8_t)(blocked != 0);
    for (stream_conn *c = d->conns, *next; c; c = next) {
        next = c->next; /* resuming may kill c */
        if (c->state != SC_OPEN || !c->n_pubs)
            continue;
        stream_conn_rearm(c); /* the watch follows reading() */
        if (!blocked) {
            stream_conn_resume(c);
            if (c->state != SC_DEAD)
                stream_conn_flush(c);
        }
    }
}

/* A store generation became durable: the PublishConfirms and the answer it covers go out. */
static void released(void *ctx)
{
    stream_door *d = ctx;
    for (stream_conn *c = d->conns; c; c = c->next)
        if ((c->cf_head || c->dur_wait) && c->state != SC_DEAD) {
            stream_confirms_released(c);
            stream_reply_released(c);
            stream_door_dirty(d, c);
        }
    flush_dirty(d);
}

static void close_listeners(stream_door *d)
{
    if (d->fd >= 0) {
        sl_acceptor_stop(&d->acc);
        close(d->fd);
        d->fd = -1;
    }
    if (d->tls_fd >= 0) {
        sl_acceptor_stop(&d->tls_acc);
        close(d->tls_fd);
        d->tls_fd = -1;
    }
}

/* As RabbitMQ's reader ends a connection it is told to end (rabbit_networking's {shutdown,
 * Explanation} for a deleted vhost or user; terminate/3 at the node's shutdown): what was
 * said is flushed and the socket closes, with no Close frame. The clients take no Close from
 * the server: the Node.js one throws "Unknown response 22" from its socket's data handler
 * (an uncaught exception); they all see the socket end. The reason goes to the log. */
static size_t close_matching(stream_door *d, const char *user, const char *vhost, const char *text)
{
    size_t cnt = 0;
    for (stream_conn *c = d->conns, *next; c; c = next) {
        next = c->next; /* closing may kill c (a connection still in its TLS handshake) */
        if (c->state >= SC_CLOSING || (user && (!c->user || strcmp(c->user, user))) ||
            (vhost && (!c->vhost || strcmp(c->vhost, vhost))))
            continue;
        stream_conn_linger(c, text);
        stream_conn_flush(c);
        cnt++;
    }
    return cnt;
}

static void shutdown_door(void *ctx, const char *text)
{
    stream_door *d = ctx;
    close_listeners(d);
    for (stream_conn *c = d->conns, *next; c; c = next) {
        next = c->next;
        if (c->state < SC_PEER || c->state == SC_LOGIN_WAIT)
            stream_conn_kill(c, NULL); /* nothing was said yet, or cannot be now */
    }
    close_matching(d, NULL, NULL, text);
}

static size_t live(void *ctx)
{
    return ((stream_door *)ctx)->n_conns;
}

static size_t close_user(void *ctx, const char *user, const char *why)
{
    char text[400];
    snprintf(text, sizeof text, "user '%s' %s", user, why);
    return close_matching(ctx, user, NULL, text);
}

static size_t vhost_deleting(void *ctx, qm_vhost *vh, const char *text)
{
    return close_matching(ctx, NULL, vh->name, text);
}

static uint64_t count_connections(void *ctx, const char *user, const char *vhost)
{
    stream_door *d = ctx;
    uint64_t cnt = 0;
    for (stream_conn *c = d->conns; c; c = c->next)
        if (c->state == SC_OPEN && (!user || !strcmp(c->user, user)) &&
            (!vhost || !strcmp(c->vhost, vhost)))
            cnt++;
    return cnt;
}

static void stop(void *ctx)
{
    stream_door *d = ctx;
    while (d->conns)
        stream_conn_kill(d->conns, NULL);
    for (stream_conn *c = d->dirty; c; c = c->dirty_next)
        c->dirty = 0;
    d->dirty = NULL;
    free_dead(d);
    close_listeners(d);
    sl_tls_ctx_free(d->tls_ctx); /* after every connection's stream */
    sl_free(d);
}

/* ---- listeners ---- */

static void accept_conn(stream_door *d, int fd, const struct sockaddr_storage *ss, int tls)
{
    if (d->n->shutting_down) {
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    stream_conn *c = stream_conn_new(d, fd, ss, tls);
    if (!c)
        return;
    SL_LIST_PUSH(d->conns, c, prev, next);
    d->n_conns++;
    stream_conn_rearm(c);
    sl_debug("stream connection %s accepted", c->name);
}

static void on_accept(sl_acceptor *a, int fd, const struct sockaddr_storage *ss)
{
    accept_conn(a->data, fd, ss, 0);
}

static void on_accept_tls(sl_acceptor *a, int fd, const struct sockaddr_storage *ss)
{
    accept_conn(a->data, fd, ss, 1);
}

static int listen_one(stream_door *d, int tls, char *err, size_t errlen)
{
    const node_config *cfg = d->n->cfg;
    const char *bind = tls ? cfg->stream_tls_bind : cfg->stream_bind;
    int port = tls ? cfg->stream_tls_port : cfg->stream_port;
    char *addr = tls ? d->tls_addr : d->addr;
    int *bound = tls ? &d->tls_port : &d->port;
    int fd = sl_listen_tcp(bind ? bind : cfg->bind, port, 1024, addr, sizeof d->addr, bound, err,
                           errlen);
    if (fd < 0)
        return -1;
    *(tls ? &d->tls_fd : &d->fd) = fd;
    if (sl_acceptor_start(tls ? &d->tls_acc : &d->acc, d->n->loop, fd,
                          tls ? "stream/ssl" : "stream", d->n->fd_reserve,
                          tls ? on_accept_tls : on_accept, NULL, d) < 0) {
        snprintf(err, errlen, "cannot watch the stream listener: %s", strerror(errno));
        return -1;
    }
    sl_info("listening %s=%s:%d", tls ? "stream/ssl" : "stream", addr, *bound);
    node_add_listener(d->n, tls ? "stream/ssl" : "stream", addr, *bound,
                      tls ? &d->tls_acc : &d->acc);
    return 0;
}

/* What Metadata and Open name: stream.advertised_host, else the listener's address, else
 * (a wildcard bind) the host's name, as RabbitMQ advertises its host name. */
static void advertise(stream_door *d)
{
    const node_config *cfg = d->n->cfg;
    const char *bound = d->fd >= 0 ? d->addr : d->tls_addr;
    if (cfg->stream_advertised_host)
        snprintf(d->adv_host, sizeof d->adv_host, "%s", cfg->stream_advertised_host);
    else if (strcmp(bound, "0.0.0.0") && strcmp(bound, "::"))
        snprintf(d->adv_host, sizeof d->adv_host, "%s", bound);
    else if (gethostname(d->adv_host, sizeof d->adv_host - 1) < 0)
        snprintf(d->adv_host, sizeof d->adv_host, "localhost");
    d->adv_port = cfg->stream_advertised_port > 0 ? cfg->stream_advertised_port : d->port;
    d->adv_tls_port =
        cfg->stream_advertised_tls_port > 0 ? cfg->stream_advertised_tls_port : d->tls_port;
}

stream_door *stream_start(sl_node *n, char *err, size_t errlen)
{
    err[0] = 0;
    const node_config *cfg = n->cfg;
    if (cfg->stream_port < 0 && cfg->stream_tls_port < 0)
        return NULL;
    stream_door *d = sl_xcalloc(1, sizeof *d);
    d->n = n;
    d->fd = d->tls_fd = -1;
    d->queues_deleted = n->qm->queues_deleted;
    d->blocked = (uint8_t)(n->alarms != 0);
    node_part part = {.name = "stream",
                      .ctx = d,
                      .turn = turn,
                      .released = released,
                      .alarms_changed = alarms_changed,
                      .shutdown = shutdown_door,
                      .live = live,
                      .close_user = close_user,
                      .count_connections = count_connections,
                      .vhost_deleting = vhost_deleting,
                      .stop = stop};
    stream_view_hooks(&part);
    node_add_part(n, &part); /* from here node_free frees the door */
    if (cfg->stream_port >= 0 && listen_one(d, 0, err, errlen) < 0)
        return NULL;
    if (cfg->stream_tls_port >= 0) {
        sl_tls_opts o;
        node_tls_opts(&cfg->ssl, &o);
        char why[512];
        d->tls_ctx = sl_tls_ctx_new(1, &o, why, sizeof why);
        if (!d->tls_ctx) {
            snprintf(err, errlen, "listeners.stream.ssl: %s", why);
            return NULL;
        }
        if (listen_one(d, 1, err, errlen) < 0)
            return NULL;
    }
    advertise(d);
    return d;
}
