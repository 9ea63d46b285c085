/* broker.c - the AMQP door's object: its listeners, the list of connections, the work it
 * does once per loop turn as a part of the node (node/node.h: flushing each connection
 * touched this turn once - confirms, then output -, freeing the dead), and what the node asks
 * of it: block publishers on an alarm, release what waited for the disk, close connections
 * for a shutdown, a deleted user or vhost, count them for the limits.
 *
 * Waiting for the disk: a connection with held output or pending confirms is on b->waiting;
 * when the node tells its parts a generation became durable (released), those connections
 * are flushed this turn, in order per connection.
 */
#include "broker/broker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/list.h"
#include "core/log.h"
#include "core/mem.h"
#include "net/accept.h"
#include "link/link.h"
#include "link/rpc_queue.h"
#include "net/listen.h"
#include "access/verifier.h"
#include "net/tls.h"
#include "cluster/member.h"
#include "cluster/proxy.h"
#include "persist/persist.h"

void broker_hold_delivery(conn *c)
{
    uint64_t t = node_delivery_ticket(c->b->n);
    if (t)
        broker_conn_hold_delivery(c, t);
}

static void drop_delivery_holds(void *ctx)
{
    broker *b = ctx;
    for (conn *c = b->conns; c; c = c->next)
        if (sl_holds_drop_soft(&c->holds))
            broker_mark_dirty(c); /* what no hard mark holds goes out now */
}

void broker_wait_disk(conn *c)
{
    broker *b = c->b;
    if (c->in_waiting)
        return;
    c->in_waiting = 1;
    SL_LIST_PUSH(b->waiting, c, wait_prev, wait_next);
}

static void unwait(conn *c)
{
    if (!c->in_waiting)
        return;
    SL_LIST_UNLINK(c->b->waiting, c, wait_prev, wait_next);
    c->in_waiting = 0;
    c->wait_next = c->wait_prev = NULL;
}

/* A generation became durable: every connection waiting gets flushed this turn (its
 * confirms and held output up to the new point go out). */
static void released(void *ctx)
{
    broker *b = ctx;
    while (b->waiting) {
        conn *c = b->waiting;
        unwait(c);
        broker_mark_dirty(c);
    }
}

void broker_mark_dirty(conn *c)
{
    if (c->in_dirty)
        return;
    c->in_dirty = 1;
    c->dirty_next = c->b->dirty;
    c->b->dirty = c;
}

void broker_conn_resume_consumers(conn *c)
{
    /* Only the consumers a full buffer turned away (on their channel's starved list, with
     * those a global prefetch limit turned away: a spurious offer is refused and listed
     * again), not every consumer of the connection. */
    for (size_t i = 0; i < c->channels_cap; i++)
        if (c->channels[i] && c->channels[i]->starved)
            broker_channel_wake_starved(c->channels[i]);
}

void broker_input_pending(conn *c)
{
    if (c->input_pending)
        return;
    c->input_pending = 1;
    c->input_next = c->b->input_pending;
    c->b->input_pending = c;
    sl_loop_wake(c->b->n->loop);
}

static void run_pending_input(broker *b)
{
    if (node_turn_over(b->n)) {
        sl_loop_wake(b->n->loop); /* this turn has done its share: next turn */
        return;
    }
    conn *list = b->input_pending;
    b->input_pending = NULL;
    while (list) {
        conn *c = list;
        list = c->input_next;
        c->input_pending = 0;
        broker_conn_resume_input(c);
    }
}

static void unlink_conn(broker *b, conn *c)
{
    if (c->input_pending) {
        conn **pp = &b->input_pending;
        while (*pp != c)
            pp = &(*pp)->input_next;
        *pp = c->input_next;
        c->input_pending = 0;
    }
    unwait(c);
    node_client_cursor_forget(&b->view, c);
    SL_LIST_UNLINK(b->conns, c, prev, next);
    b->n_conns--;
    if (c->counted_open)
        b->n_open--;
    /* A descriptor came back: a listener paused at the reserve may take the next one. */
    sl_acceptor_kick(&b->acceptor);
    if (b->tls_listen_fd >= 0)
        sl_acceptor_kick(&b->tls_acceptor);
}

static void flush_dirty(broker *b)
{
    while (b->dirty) {
        conn *c = b->dirty;
        b->dirty = c->dirty_next;
        c->in_dirty = 0;
        if (c->state != CONN_DEAD)
            broker_conn_flush_confirms(c);
        broker_conn_flush(c);
        /* A dead connection still says what it was waiting to say (a commit-ok before the
         * close-ok) once the disk has it; then it goes. */
        if (c->state == CONN_DEAD && !c->in_dirty && !broker_conn_has_held(c)) {
            unlink_conn(b, c);
            broker_conn_free(c);
        }
    }
}

/* The node's turn: held-back input first (turn_begin), then, after dispatch and the group
 * commit's kick, one flush per connection touched. */
static void turn_begin(void *ctx)
{
    broker *b = ctx;
    /* Input held back for a full output buffer that has drained since: it is handled before
     * this turn's group commit, like any input read this turn. */
    if (b->input_pending)
        run_pending_input(b);
}

static int turn(void *ctx)
{
    broker *b = ctx;
    flush_dirty(b);
    return b->dirty != NULL;
}

/* ------------------------------------------------------------------------------------------
 * Resource alarms (node/alarm.c): publishing connections get connection.blocked (when they
 * asked for it) and their sockets are not read until every alarm has cleared. Consumers keep
 * going, which is what lets memory drain.
 */

void broker_block_publisher(conn *c)
{
    broker_conn_set_blocked(c, 1);
    c->read_paused = 1;
    broker_conn_update_watch(c);
}

static void alarms_changed(void *ctx, int blocked)
{
    broker *b = ctx;
    for (conn *c = b->conns; c; c = c->next) {
        if (c->state != CONN_OPEN)
            continue;
        if (blocked) {
            /* RabbitMQ blocks a connection when it publishes; one that already has is
             * blocked now. */
            if (c->has_published)
                broker_block_publisher(c);
            else
                broker_conn_set_blocked(c, 1);
        } else {
            broker_conn_set_blocked(c, 0);
            c->read_paused = 0;
            broker_conn_update_watch(c);
            if (sl_buf_unread(&c->in) > 0) /* a frame held for the alarm (a durable declare) */
                broker_input_pending(c);
        }
    }
}

/* Input read ahead by connections blocked by an alarm (conn.c, at most CONN_HOLD_MAX each):
 * not held against the memory alarm, which would otherwise never clear under a watermark
 * below it; it is what the socket would hold anyway, and it is handled once the alarm
 * clears. */
static uint64_t held_input_bytes(void *ctx)
{
    const broker *b = ctx;
    uint64_t n = 0;
    for (const conn *c = b->conns; c; c = c->next)
        if (c->read_paused)
            n += c->in.cap;
    return n;
}

/* ------------------------------------------------------------------------------------------
 * Listeners
 */

/* A connection accepted by the AMQP acceptor (net/accept.c keeps the descriptor reserve),
 * or by the AMQPS one (tls set: the connection starts with a TLS handshake). */
static void accept_conn(broker *b, int fd, const struct sockaddr_storage *ss, int tls)
{
    if (b->n->shutting_down) {
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = broker_conn_new(b, fd);
    /* a cluster member's proxied connection comes from loopback but is not local */
    c->loopback = node_peer_describe(b->n, ss, c->peer, sizeof c->peer);
    snprintf(c->name, sizeof c->name, "%s -> %s:%d", c->peer,
             tls ? b->tls_bound_addr : b->bound_addr, tls ? b->tls_bound_port : b->bound_port);
    if (tls) {
        sl_tls *t = sl_tls_new(b->tls_ctx, fd, NULL);
        if (!t) {
            sl_warn("connection %s: cannot start TLS (out of memory)", c->name);
            broker_conn_free(c);
            return;
        }
        broker_conn_start_tls(c, t);
    }
    SL_LIST_PUSH(b->conns, c, prev, next);
    b->n_conns++;
    if (sl_loop_watch(b->n->loop, &c->w, SL_EV_READ) < 0) {
        broker_conn_kill(c, "cannot watch socket");
        return;
    }
    sl_debug("accepted connection %s", c->name);
}

static void on_accept(sl_acceptor *a, int fd, const struct sockaddr_storage *ss)
{
    accept_conn(a->data, fd, ss, 0);
}

static void on_accept_tls(sl_acceptor *a, int fd, const struct sockaddr_storage *ss)
{
    accept_conn(a->data, fd, ss, 1);
}

/* listeners.ssl.default: AMQP over TLS beside the plain listener. */
static int listen_tls(broker *b)
{
    const node_config *cfg = b->n->cfg;
    char err[512];
    sl_tls_opts o;
    node_tls_opts(&cfg->ssl, &o);
    b->tls_ctx = sl_tls_ctx_new(1, &o, err, sizeof err);
    if (!b->tls_ctx) {
        sl_error("listeners.ssl.default: %s", err);
        return -1;
    }
    int fd = cfg->adopt_amqps_fd >= 0
                 ? sl_listen_adopt(cfg->adopt_amqps_fd, b->tls_bound_addr, sizeof b->tls_bound_addr,
                                   &b->tls_bound_port, err, sizeof err)
                 : sl_listen_tcp(cfg->tls_bind ? cfg->tls_bind : cfg->bind, cfg->tls_port, 1024,
                                 b->tls_bound_addr, sizeof b->tls_bound_addr, &b->tls_bound_port,
                                 err, sizeof err);
    if (fd < 0) {
        sl_error("%s", err);
        return -1;
    }
    b->tls_listen_fd = fd;
    if (sl_acceptor_start(&b->tls_acceptor, b->n->loop, fd, "amqps", b->n->fd_reserve,
                          on_accept_tls, NULL, b) < 0) {
        sl_error("cannot watch the TLS listener: %s", strerror(errno));
        return -1;
    }
    sl_info("listening amqps=%s:%d", b->tls_bound_addr, b->tls_bound_port);
    node_add_listener(b->n, "amqp/ssl", b->tls_bound_addr, b->tls_bound_port, &b->tls_acceptor);
    return 0;
}

static int listen_amqp(broker *b)
{
    char err[320];
    int fd = b->n->cfg->adopt_amqp_fd >= 0
                 ? sl_listen_adopt(b->n->cfg->adopt_amqp_fd, b->bound_addr, sizeof b->bound_addr,
                                   &b->bound_port, err, sizeof err)
                 : sl_listen_tcp(b->n->cfg->bind, b->n->cfg->port, 1024, b->bound_addr,
                                 sizeof b->bound_addr, &b->bound_port, err, sizeof err);
    if (fd < 0) {
        sl_error("%s", err);
        return -1;
    }
    b->listen_fd = fd;
    if (sl_acceptor_start(&b->acceptor, b->n->loop, fd, "amqp", b->n->fd_reserve, on_accept, NULL,
                          b) < 0) {
        sl_error("cannot watch the listener: %s", strerror(errno));
        return -1;
    }
    sl_info("listening amqp=%s:%d", b->bound_addr, b->bound_port);
    node_add_listener(b->n, "amqp", b->bound_addr, b->bound_port, &b->acceptor);
    link_mgr_set_self(b->n->links, b->bound_addr, b->bound_port);
    if ((b->n->cfg->tls_port >= 0 || b->n->cfg->adopt_amqps_fd >= 0) && listen_tls(b) < 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * What the node asks of the door
 */

/* text: the 320's reply text every connection gets. */
static void shutdown_door(void *ctx, const char *text)
{
    broker *b = ctx;
    if (b->listen_fd >= 0) {
        sl_acceptor_stop(&b->acceptor);
        close(b->listen_fd);
        b->listen_fd = -1;
    }
    if (b->tls_listen_fd >= 0) {
        sl_acceptor_stop(&b->tls_acceptor);
        close(b->tls_listen_fd);
        b->tls_listen_fd = -1;
    }
    for (conn *c = b->conns; c; c = c->next) {
        if (c->read_paused || c->out_paused) {
            /* a blocked publisher must still be able to say close-ok */
            c->read_paused = c->out_paused = 0;
            broker_conn_update_watch(c);
        }
        broker_conn_force_close(c, text);
    }
}

static size_t live(void *ctx)
{
    return ((broker *)ctx)->n_conns;
}

/* Close with 320 every live connection for which match says so. */
static size_t close_matching(broker *b, int (*match)(const conn *c, const char *arg),
                             const char *arg, const char *text)
{
    size_t cnt = 0;
    for (conn *c = b->conns; c; c = c->next) {
        if (c->state == CONN_DEAD || !match(c, arg))
            continue;
        broker_conn_force_close(c, text);
        broker_mark_dirty(c);
        cnt++;
    }
    return cnt;
}

static int conn_in_vhost(const conn *c, const char *vhost)
{
    return c->vhost && !strcmp(c->vhost->name, vhost);
}

static int conn_of_user(const conn *c, const char *user)
{
    return c->user && !strcmp(c->user, user);
}

static size_t vhost_deleting(void *ctx, qm_vhost *vh, const char *text)
{
    return close_matching(ctx, conn_in_vhost, vh->name, text);
}

static size_t close_user(void *ctx, const char *user, const char *why)
{
    char text[400];
    snprintf(text, sizeof text, "CONNECTION_FORCED - user '%s' %s", user, why);
    return close_matching(ctx, conn_of_user, user, text);
}

static uint64_t count_connections(void *ctx, const char *user, const char *vhost)
{
    broker *b = ctx;
    uint64_t cnt = 0;
    for (conn *c = b->conns; c; c = c->next)
        if (c->state == CONN_OPEN && (!user || conn_of_user(c, user)) &&
            (!vhost || conn_in_vhost(c, vhost)))
            cnt++;
    return cnt;
}

static uint64_t count_user_channels(void *ctx, const char *user)
{
    broker *b = ctx;
    uint64_t cnt = 0;
    for (conn *c = b->conns; c; c = c->next)
        if (c->state == CONN_OPEN && conn_of_user(c, user))
            cnt += c->n_channels;
    return cnt;
}

/* DISCONNECT closes incoming links too (link_recv.c). */
static void set_online(void *ctx, int online)
{
    broker *b = ctx;
    if (online)
        return;
    for (conn *c = b->conns; c; c = c->next)
        if (c->is_link)
            broker_conn_force_close(c, "CONNECTION_FORCED - node taken offline (DISCONNECT)");
}

static void stop(void *ctx);

broker *broker_start(sl_node *n)
{
    broker *b = sl_xcalloc(1, sizeof *b);
    b->n = n;
    b->listen_fd = -1;
    b->tls_listen_fd = -1;
    node_part part = {.name = "amqp",
                      .ctx = b,
                      .turn_begin = turn_begin,
                      .turn = turn,
                      .released = released,
                      .alarms_changed = alarms_changed,
                      .held_input_bytes = held_input_bytes,
                      .shutdown = shutdown_door,
                      .live = live,
                      .drop_delivery_holds = drop_delivery_holds,
                      .close_user = close_user,
                      .count_connections = count_connections,
                      .count_user_channels = count_user_channels,
                      .vhost_deleting = vhost_deleting,
                      .set_online = set_online,
                      .client_next = broker_client_next,
                      .client_find = broker_client_find,
                      .client_close = broker_client_close,
                      .channel_at = broker_channel_at,
                      .consumers = broker_consumers,
                      .owner_name = broker_owner_name,
                      .stop = stop};
    node_add_part(n, &part);
    if (listen_amqp(b) < 0)
        return NULL; /* a part of the node already: node_free frees it */
    return b;
}

/* node_free, before the store closes: whatever is still open after the shutdown grace
 * period is dropped now. */
static void stop(void *ctx)
{
    broker *b = ctx;
    while (b->conns) {
        conn *c = b->conns;
        broker_conn_kill(c, NULL);
        broker_conn_flush(c);
        unlink_conn(b, c);
        broker_conn_free(c);
    }
    b->dirty = NULL;
    if (b->listen_fd >= 0) {
        sl_acceptor_stop(&b->acceptor);
        close(b->listen_fd);
    }
    if (b->tls_listen_fd >= 0) {
        sl_acceptor_stop(&b->tls_acceptor);
        close(b->tls_listen_fd);
    }
    sl_tls_ctx_free(b->tls_ctx); /* after every connection's stream */
    sl_map_free(b->reply_to);    /* empty: every channel took its name out when it closed */
    sl_free(b);
}
