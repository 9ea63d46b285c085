/* broker.c - the broker object: the AMQP listener, the list of connections, the work done
 * once per loop turn (dispatch, confirms, one flush per socket), the memory alarm, and the
 * orderly shutdown on SIGTERM / SIGINT.
 *
 * Turn order (before sleep): run queue dispatch, hand what the store accumulated to the sync
 * thread (when it is idle), then for every connection touched this turn flush its confirms
 * and write its output once; free connections that died. Writing after dispatch means one
 * send() carries every delivery of the turn.
 *
 * Waiting for the disk: the loop never waits for a sync. A reply that promises something on
 * disk takes a ticket, the store generation its records are in: publisher confirms wait in
 * their channel (channel.c), other replies hold their connection's output from where they
 * start (conn.c), HTTP replies and links register a callback (node_after_sync). When the
 * sync thread finishes a generation its eventfd wakes the loop, which releases whatever that
 * generation covers, in order per connection. Connections with something held are on
 * b->waiting, so the release touches only them.
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

#define TICK_MS 100

static void commit_or_die(broker *b, int force);
static void release_waiters(broker *b);
static void store_stalled(broker *b);
static uint64_t reserve_size(const broker *b);
static void reserve_make(broker *b);
static void set_alarm(broker *b, int which, int on);
static uint64_t disk_check_step(const broker *b);
static void check_disk(broker *b, uint64_t now);
static void kick_or_die(broker *b, int force);

typedef struct disk_waiter {
    uint64_t gen;
    void (*fn)(void *ctx);
    void *ctx;
} disk_waiter;

uint64_t node_ticket(const broker *b)
{
    return b->store ? persist_ticket(b->store) : 0;
}

uint64_t node_durable(const broker *b)
{
    return b->store ? persist_done(b->store) : 0;
}

uint64_t node_write_ticket_since(broker *b, uint64_t wmark)
{
    if (!b->store || persist_wmark(b->store) == wmark)
        return 0;
    return persist_write_ticket(b->store);
}

uint64_t node_wmark(const broker *b)
{
    return b->store ? persist_wmark(b->store) : 0;
}

void broker_hold_delivery(conn *c)
{
    broker *b = c->b;
    /* Out of space, the delivery marks cannot be written: deliveries go out without waiting
     * for them (consumers keep draining the disk), and a crash before space returns only loses
     * the redelivered flag of what was delivered meanwhile. */
    if (b->store && persist_stalled(b->store))
        return;
    /* A cluster leader below min_insync_replicas releases nothing until enough followers are
     * back: a delivery that waited for its mark would wait that long, where consumers are to
     * keep going (docs/cluster.md). The same trade: a failover before the mark reaches the
     * followers only loses the redelivered flag (the message itself comes again). Not during
     * a hand-over: that ends by itself, within 10 s. The deliveries that waited when the ISR
     * shrank stop waiting then (broker_drop_delivery_holds). */
    if ((b->alarms & ALARM_CLUSTER) && !b->cl_handover)
        return;
    uint64_t t = node_write_ticket_since(b, b->wmark_seen);
    if (!t)
        return;
    b->wmark_seen = persist_wmark(b->store);
    conn_hold_delivery(c, t);
}

void broker_drop_delivery_holds(broker *b)
{
    for (conn *c = b->conns; c; c = c->next)
        if (sl_holds_drop_soft(&c->holds))
            broker_mark_dirty(c); /* what no hard mark holds goes out now */
}

uint64_t node_mark(const broker *b)
{
    return b->store ? persist_mark(b->store) : 0;
}

uint64_t node_ticket_since(const broker *b, uint64_t mark)
{
    return b->store ? persist_ticket_since(b->store, mark) : 0;
}

uint64_t node_ticket_since_lazy(const broker *b, uint64_t mark)
{
    return b->store ? persist_ticket_since_lazy(b->store, mark) : 0;
}

void node_hasten(broker *b, uint64_t gen)
{
    if (b->store)
        persist_hasten(b->store, gen);
}

/* Sync pacing: persist_kick left the open generation's sync for later (only pipelined
 * confirms wait for it); the timerfd wakes the loop when it is due, and that turn's kick
 * starts it. A timerfd rather than a loop timer: the loop's timers are in milliseconds,
 * the pace in microseconds. */
static void pace_arm(broker *b)
{
    uint64_t due = b->store ? persist_pace_due(b->store) : 0;
    if (!due || b->pace_w.fd < 0 || (b->pace_armed_us && b->pace_armed_us <= due))
        return;
    struct itimerspec its = {.it_value = {(time_t)(due / 1000000u), (long)(due % 1000000u) * 1000}};
    if (timerfd_settime(b->pace_w.fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        b->pace_armed_us = due;
}

static void on_pace_due(sl_loop *loop, sl_watch *w, int events)
{
    broker *b = w->data;
    (void)loop;
    (void)events;
    uint64_t n;
    while (read(w->fd, &n, sizeof n) < 0 && errno == EINTR)
        ;
    b->pace_armed_us = 0; /* before_sleep's kick now starts the sync */
}

void broker_wait_disk(conn *c)
{
    broker *b = c->b;
    if (c->in_waiting)
        return;
    c->in_waiting = 1;
    c->wait_prev = NULL;
    c->wait_next = b->waiting;
    if (b->waiting)
        b->waiting->wait_prev = c;
    b->waiting = c;
}

static void unwait(conn *c)
{
    if (!c->in_waiting)
        return;
    if (c->wait_prev)
        c->wait_prev->wait_next = c->wait_next;
    else
        c->b->waiting = c->wait_next;
    if (c->wait_next)
        c->wait_next->wait_prev = c->wait_prev;
    c->in_waiting = 0;
    c->wait_next = c->wait_prev = NULL;
}

int node_after_sync(broker *b, void (*fn)(void *ctx), void *ctx)
{
    uint64_t gen = node_ticket(b);
    uint64_t w = b->store ? persist_write_ticket(b->store) : 0;
    if (w > gen) /* a get over HTTP marked a delivery: its reply waits for the write */
        gen = w;
    if (gen <= node_durable(b))
        return 0;
    if (b->dw_len == b->dw_cap) {
        size_t cap = b->dw_cap ? b->dw_cap * 2 : 16;
        disk_waiter *nu = sl_xmalloc(cap * sizeof *nu);
        for (size_t i = 0; i < b->dw_len; i++)
            nu[i] = b->dwaiters[(b->dw_head + i) % b->dw_cap];
        sl_free(b->dwaiters);
        b->dwaiters = nu;
        b->dw_cap = cap;
        b->dw_head = 0;
    }
    /* Tickets only grow, so the ring stays in ticket order. */
    b->dwaiters[(b->dw_head + b->dw_len++) % b->dw_cap] = (disk_waiter){gen, fn, ctx};
    return 1;
}

/* A generation became durable: every connection waiting gets flushed this turn (its
 * confirms and held output up to the new point go out), and the callbacks it covers run. */
void node_release_waiters(broker *b)
{
    release_waiters(b);
}

static void release_waiters(broker *b)
{
    while (b->waiting) {
        conn *c = b->waiting;
        unwait(c);
        broker_mark_dirty(c);
    }
    link_mgr_synced(b->links);
    uint64_t durable = node_durable(b);
    while (b->dw_len && b->dwaiters[b->dw_head].gen <= durable) {
        disk_waiter w = b->dwaiters[b->dw_head];
        b->dw_head = (b->dw_head + 1) % b->dw_cap;
        b->dw_len--;
        w.fn(w.ctx);
    }
}

/* Slow password checks waiting or running at most (access/verifier.h): about 20 ms each,
 * so a full queue is answered within a second; logins beyond it are refused at once. */
#define VERIFY_MAX_PENDING 32

static void on_verify_done(sl_loop *loop, sl_watch *w, int events)
{
    broker *b = w->data;
    (void)loop;
    (void)events;
    acc_verifier_run_done(b->verifier);
}

static void on_sync_done(sl_loop *loop, sl_watch *w, int events)
{
    broker *b = w->data;
    (void)loop;
    (void)events;
    char err[320];
    int rc = persist_sync_done(b->store, err, sizeof err);
    if (rc == -2) {
        store_stalled(b);
        return;
    }
    if (rc < 0) {
        /* Replies that depend on the disk must not go out: stop here. */
        sl_error("store: %s; stopping without sending replies that depend on it", err);
        exit(1);
    }
    release_waiters(b);
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
            channel_wake_starved(c->channels[i]);
}

void broker_input_pending(conn *c)
{
    if (c->input_pending)
        return;
    c->input_pending = 1;
    c->input_next = c->b->input_pending;
    c->b->input_pending = c;
    sl_loop_wake(c->b->loop);
}

int broker_turn_over(const broker *b)
{
    return sl_now_ms() >= sl_loop_now(b->loop) + TURN_INPUT_MS;
}

static void run_pending_input(broker *b)
{
    if (broker_turn_over(b)) {
        sl_loop_wake(b->loop); /* this turn has done its share: next turn */
        return;
    }
    conn *list = b->input_pending;
    b->input_pending = NULL;
    while (list) {
        conn *c = list;
        list = c->input_next;
        c->input_pending = 0;
        conn_resume_input(c);
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
    if (c->prev)
        c->prev->next = c->next;
    else
        b->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
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
            conn_flush_confirms(c);
        conn_flush(c);
        /* A dead connection still says what it was waiting to say (a commit-ok before the
         * close-ok) once the disk has it; then it goes. */
        if (c->state == CONN_DEAD && !c->in_dirty && !conn_has_held(c)) {
            unlink_conn(b, c);
            conn_free(c);
        }
    }
}

#define REAP_SLICE_US 1000
#define TIDY_SLICE_US 2000
static void tidy_slice(broker *b);
static void tidy_after_written(broker *b);

static void before_sleep(sl_loop *loop, void *arg)
{
    broker *b = arg;
    /* Input held back for a full output buffer that has drained since: it is handled before
     * this turn's group commit, like any input read this turn. */
    if (b->input_pending)
        run_pending_input(b);
    /* Flushing can free prefetch room and dispatch can write more: a few rounds settle it. */
    for (int round = 0; round < 4; round++) {
        qm_node_run_dispatch(b->qm);
        /* Group commit: what this turn appended goes to the sync thread now unless a sync
         * is running (then the next one takes it). Replies that promise it wait for it. */
        kick_or_die(b, 0);
        /* Links send what their records' syncs allow (link.c holds the rest). */
        link_mgr_flush(b->links);
        flush_dirty(b);
        if (!b->qm->dispatch_head && !b->dirty)
            break;
    }
    /* Free a slice of what purges and deletes left behind: at most ~1 ms per turn, by the
     * clock rather than by count, since freeing cold memory costs anything from 50 ns to
     * a few hundred a message, and a request arriving meanwhile waits for the slice. */
    int more = 0;
    if (b->qm->graves) {
        uint64_t until = sl_now_us() + REAP_SLICE_US;
        while ((more = qm_node_reap(b->qm, 2048)) && sl_now_us() < until)
            ;
    }
    if (b->store && persist_tidy_running(b->store))
        tidy_slice(b);
    else
        tidy_after_written(b);
    node_check_disk_step(b); /* what was written this turn may be what fills the disk */
    if (more || b->qm->dispatch_head || b->dirty)
        sl_loop_wake(loop);
    /* The next turn's budget of bounded model work (mass expiry) starts now. */
    qm_node_new_turn(b->qm);
    /* HTTP requests in flight too: a step-down's reply must reach its client before the
     * process re-executes (api_cluster.c). */
    if (b->shutting_down &&
        ((b->n_conns == 0 && b->api_inflight == 0) || sl_loop_now(loop) >= b->shutdown_deadline))
        sl_loop_stop(loop);
}

/* ------------------------------------------------------------------------------------------
 * Resource alarms (RabbitMQ's): messages in memory above memory_high_watermark, or less free disk
 * under the data directory than disk_free_limit, block publishing connections: they get
 * connection.blocked (when they asked for it) and their sockets are not read until every
 * alarm has cleared. Consumers keep going, which is what lets memory drain. Blocking before
 * the disk is full is what keeps a record from ever being half written for lack of space.
 */

uint64_t node_memory_bytes(const broker *b)
{
    (void)b;
    /* Messages (whole allocations, partial bodies as they arrive, bookkeeping) and every
     * buffer: connection input and output, replies being built, the store's write buffer. */
    return qm_memory_bytes() + sl_buf_total();
}

const char *node_alarm_reason(const broker *b)
{
    if (b->alarms & ALARM_CLUSTER)
        return b->cluster_reason;
    if (b->alarms & ALARM_DISK)
        return "low on disk";
    if (b->alarms & ALARM_MEMORY)
        return "low on memory";
    return NULL;
}

void broker_block_publisher(conn *c)
{
    conn_set_blocked(c, 1);
    c->read_paused = 1;
    conn_update_watch(c);
}

void node_set_cluster_alarm(broker *b, int on)
{
    set_alarm(b, ALARM_CLUSTER, on);
}

static void set_alarm(broker *b, int which, int on)
{
    int was = b->alarms;
    b->alarms = on ? (b->alarms | which) : (b->alarms & ~which);
    if (b->alarms == was)
        return;
    const char *what = which == ALARM_DISK ? "disk" : which == ALARM_MEMORY ? "memory" : "cluster";
    if (on)
        sl_warn("%s alarm: blocking publishers (%s)", what,
                which == ALARM_DISK     ? "free disk under disk_free_limit"
                : which == ALARM_MEMORY ? "messages in memory above memory_high_watermark"
                                        : b->cluster_reason);
    else
        sl_info("%s alarm cleared", what);
    if ((was != 0) == (b->alarms != 0))
        return;
    for (conn *c = b->conns; c; c = c->next) {
        if (c->state != CONN_OPEN)
            continue;
        if (b->alarms) {
            /* RabbitMQ blocks a connection when it publishes; one that already has is
             * blocked now. */
            if (c->has_published)
                broker_block_publisher(c);
            else
                conn_set_blocked(c, 1);
        } else {
            conn_set_blocked(c, 0);
            c->read_paused = 0;
            conn_update_watch(c);
            if (sl_buf_unread(&c->in) > 0) /* a frame held for the alarm (a durable declare) */
                broker_input_pending(c);
        }
    }
}

/* Free space is looked at once a second and every DISK_CHECK_STEP bytes the store takes (a
 * quarter of disk_free_limit when that is smaller, at least 64 KiB), at each publish and at
 * the end of each turn: a publisher is blocked within that many bytes, plus what is left of
 * the input chunk being handled, of crossing disk_free_limit, however fast it publishes. */
#define DISK_CHECK_STEP (4u << 20)

static uint64_t disk_check_step(const broker *b)
{
    uint64_t step = DISK_CHECK_STEP, q = b->cfg->disk_free_limit / 4;
    if (q && q < step)
        step = q < (64u << 10) ? (64u << 10) : q;
    return step;
}

void node_check_disk_step(broker *b)
{
    if (b->store && persist_bytes_appended(b->store) - b->disk_check_bytes >= disk_check_step(b)) {
        b->next_disk_check = 0;
        check_disk(b, sl_loop_now(b->loop));
    }
}

static void check_disk(broker *b, uint64_t now)
{
    if (now < b->next_disk_check)
        return;
    b->next_disk_check = now + 1000;
    if (b->store)
        b->disk_check_bytes = persist_bytes_appended(b->store);
    struct statvfs vfs;
    if (statvfs(b->cfg->data_dir, &vfs) < 0)
        return;
    uint64_t free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (!b->reserve_held && free_bytes >= b->cfg->disk_free_limit + 2 * reserve_size(b) &&
        !(b->store && persist_stalled(b->store))) {
        reserve_make(b);
        if (b->reserve_held)
            free_bytes -= reserve_size(b);
    }
    b->disk_free = free_bytes; /* what /api/nodes shows: no statvfs per request */
    /* a store holding writes for lack of space keeps the alarm on whatever statvfs says */
    set_alarm(b, ALARM_DISK,
              free_bytes < b->cfg->disk_free_limit || (b->store && persist_stalled(b->store)));
}

/* Input read ahead by connections blocked by an alarm (conn.c, at most CONN_HOLD_MAX each):
 * not held against the memory alarm, which would otherwise never clear under a watermark
 * below it; it is what the socket would hold anyway, and it is handled once the alarm
 * clears. */
static uint64_t held_input_bytes(const broker *b)
{
    uint64_t n = 0;
    for (const conn *c = b->conns; c; c = c->next)
        if (c->read_paused)
            n += c->in.cap;
    return n;
}

static void tick(sl_loop *loop, sl_timer *t)
{
    broker *b = t->data;
    uint64_t now = sl_loop_now(loop);
    uint64_t next = qm_node_tick(b->qm, now);
    /* Bodies in memory: paged-out messages cost disk, which the disk alarm watches. (Records
     * waiting for a slow disk are buffers, counted there.) */
    uint64_t mem = node_memory_bytes(b), held = b->alarms ? held_input_bytes(b) : 0;
    set_alarm(b, ALARM_MEMORY, mem - (held < mem ? held : mem) > b->cfg->memory_high_watermark);
    check_disk(b, now);
    if (b->store && (now >= b->next_store_sync || persist_stalled(b->store))) {
        /* Acks and delivery marks wait for a sync that needs the disk anyway; bound that
         * wait, so a consume-only load does not keep them in memory for long. */
        b->next_store_sync = now + 1000;
        kick_or_die(b, 1);
    }
    uint64_t due = now + TICK_MS;
    if (next && next < due)
        due = next > now ? next : now + 1;
    sl_timer_start(loop, t, due);
}

/* ------------------------------------------------------------------------------------------
 * Listener and signals
 */

int node_peer_is_loopback(broker *b, const struct sockaddr *sa)
{
    int lo = 0;
    if (sa->sa_family == AF_INET) {
        lo = (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        lo = IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    if (!lo || !b->cluster)
        return lo;
    /* In a cluster, another member's address may carry any client's connection through its
     * proxy (src/cluster/proxy.c binds to the member's advertised address): never loopback,
     * so loopback_users (guest) hold for clients of the whole cluster. */
    cl_status st;
    cl_member_status(b->cluster, &st);
    return !cl_proxy_from_member(&st, b->cfg->node_name, sa);
}

/* A connection accepted by the AMQP acceptor (net/accept.c keeps the descriptor reserve),
 * or by the AMQPS one (tls set: the connection starts with a TLS handshake). */
static void accept_conn(broker *b, int fd, const struct sockaddr_storage *ss, int tls)
{
    if (b->shutting_down) {
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = conn_new(b, fd);
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
        port = ntohs(sin->sin_port);
        c->loopback = (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
        port = ntohs(sin6->sin6_port);
        c->loopback =
            IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr) ||
            (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr) && sin6->sin6_addr.s6_addr[12] == 127);
    }
    if (c->loopback)
        c->loopback = node_peer_is_loopback(b, (const struct sockaddr *)ss);
    snprintf(c->peer, sizeof c->peer, "%s:%d", host, port);
    snprintf(c->name, sizeof c->name, "%s -> %s:%d", c->peer,
             tls ? b->tls_bound_addr : b->bound_addr, tls ? b->tls_bound_port : b->bound_port);
    if (tls) {
        sl_tls *t = sl_tls_new(b->tls_ctx, fd, NULL);
        if (!t) {
            sl_warn("connection %s: cannot start TLS (out of memory)", c->name);
            conn_free(c);
            return;
        }
        conn_start_tls(c, t);
    }
    c->next = b->conns;
    if (b->conns)
        b->conns->prev = c;
    b->conns = c;
    b->n_conns++;
    if (sl_loop_watch(b->loop, &c->w, SL_EV_READ) < 0) {
        conn_kill(c, "cannot watch socket");
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

void node_tls_opts(const struct sl_tls_conf *t, sl_tls_opts *o)
{
    memset(o, 0, sizeof *o);
    o->cacertfile = t->cacertfile;
    o->certfile = t->certfile;
    o->keyfile = t->keyfile;
    o->key_password = t->password;
    o->verify_peer = t->verify_peer;
    o->fail_if_no_peer_cert = t->fail_if_no_peer_cert;
    o->depth = t->depth;
    o->versions = t->versions;
    o->ciphers = t->ciphers;
    o->ciphersuites = t->ciphersuites;
    o->honor_cipher_order = t->honor_cipher_order;
}

/* listeners.ssl.default: AMQP over TLS beside the plain listener. */
static int listen_tls(broker *b)
{
    const sl_config *cfg = b->cfg;
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
    if (sl_acceptor_start(&b->tls_acceptor, b->loop, fd, "amqps", b->fd_reserve, on_accept_tls,
                          NULL, b) < 0) {
        sl_error("cannot watch the TLS listener: %s", strerror(errno));
        return -1;
    }
    sl_info("listening amqps=%s:%d", b->tls_bound_addr, b->tls_bound_port);
    return 0;
}

/* Steady traffic leaves acked messages' segments behind as fast as it writes: a node taking
 * 20,000 persistent msg/s grew its store by ~12 GB an hour between the 6-hourly TIDYs. So a
 * TIDY also starts once the store has taken tidy_after_written bytes since the last one
 * started (it runs in slices like any other; whatever it copies counts towards the next). */
static void tidy_after_written(broker *b)
{
    uint64_t every = b->cfg->tidy_after_written;
    if (b->store && every && persist_bytes_appended(b->store) - b->tidy_written >= every) {
        b->tidy_written = persist_bytes_appended(b->store); /* also if it cannot start now */
        node_tidy_start(b, NULL, NULL);
    }
}

static void tidy_tick(sl_loop *loop, sl_timer *t)
{
    broker *b = t->data;
    node_tidy_start(b, NULL, NULL);
    sl_timer_start(loop, t, sl_loop_now(loop) + b->cfg->tidy_interval_s * 1000);
}

static void begin_shutdown_text(broker *b, const char *why, const char *text);

static void begin_shutdown(broker *b, const char *why)
{
    begin_shutdown_text(b, why,
                        "CONNECTION_FORCED - broker forced connection closure with reason "
                        "'shutdown'");
}

/* text: the 320's reply text every connection gets. */
static void begin_shutdown_text(broker *b, const char *why, const char *text)
{
    if (b->shutting_down)
        return;
    sl_info("%s: shutting down, closing %zu connection(s)", why, b->n_conns);
    b->shutting_down = 1;
    b->shutdown_deadline = sl_loop_now(b->loop) + 2000;
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
            conn_update_watch(c);
        }
        conn_force_close(c, text);
    }
    /* The tick timer keeps the loop waking up until the deadline. */
}

void node_begin_shutdown(broker *b, const char *why, const char *text)
{
    begin_shutdown_text(b, why, text);
}

static void on_signal(sl_loop *loop, sl_watch *w, int events)
{
    broker *b = w->data;
    (void)loop;
    (void)events;
    struct signalfd_siginfo si;
    while (read(b->signal_fd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
            begin_shutdown(b, si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
    }
}

/* Take every descriptor the hard limit allows (the soft limit is often 1024 while the hard one
 * is far higher), and decide how many the AMQP door leaves free for the store and the API. */
static void raise_fd_limit(broker *b)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        b->fd_reserve = sl_fd_reserve(1024);
        return;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want =
            rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (1u << 20) ? (1u << 20) : rl.rlim_max;
        if (want > rl.rlim_cur) {
            struct rlimit nrl = {want, rl.rlim_max};
            if (setrlimit(RLIMIT_NOFILE, &nrl) == 0)
                rl.rlim_cur = want;
        }
    }
    b->fd_reserve = sl_fd_reserve(rl.rlim_cur);
    sl_info("descriptors: limit %llu, %u kept free of AMQP connections",
            (unsigned long long)rl.rlim_cur, b->fd_reserve);
}

broker *broker_new(sl_config *cfg)
{
    return broker_new_node(cfg, NULL);
}

broker *broker_new_node(sl_config *cfg, struct cl_node *node)
{
    broker *b = sl_xcalloc(1, sizeof *b);
    b->cfg = cfg;
    b->cl_node = node;
    b->listen_fd = -1;
    b->tls_listen_fd = -1;
    b->signal_fd = -1;
    raise_fd_limit(b);
    b->loop = sl_loop_new();
    if (!b->loop) {
        sl_error("cannot create the event loop: %s", strerror(errno));
        sl_free(b);
        return NULL;
    }
    sl_loop_set_cpu_stats(b->loop, cfg->loop_cpu_stats);
    b->qm = qm_node_new(cfg->node_name);
    qm_set_memory_budget(cfg->memory_budget);
    b->qm->clock = sl_loop_now_ptr(b->loop);
    b->acc = acc_new();
    link_rpc_queue_set_access(b->acc); /* remote handles opened by other nodes' links */
    if (cfg->password_hashing_module)
        acc_set_default_hash(b->acc,
                             (acc_hash)acc_hash_parse(b->acc, cfg->password_hashing_module));
    /* NT hashes for NTLM logins: msrpc.ntlm_hashes, by default on with msrpc.auth = ntlm */
    acc_set_keep_nt_hashes(b->acc, cfg->msrpc_ntlm_hashes == 1 ||
                                       (cfg->msrpc_ntlm_hashes < 0 && !cfg->msrpc_auth_none));
    acc_set_loopback_user(b->acc, NULL, 0);
    for (size_t i = 0; i < cfg->n_loopback_users; i++)
        acc_set_loopback_user(b->acc, cfg->loopback_users[i], 1);
    char err[512];
    persist_options po = {.segment_size = cfg->segment_size,
                          .acc = b->acc,
                          .sync_thread = 1,
                          .sync_pace_us = cfg->sync_pace_us};
    if (node && broker_cluster_mirror(b, &po) < 0) /* before the store opens: it is mirrored */
        goto fail;
    b->store = persist_open(cfg->data_dir, b->qm, &po, err, sizeof err);
    if (!b->store || node_access_init(b) < 0) {
        if (!b->store)
            sl_error("store: %s", err);
        goto fail;
    }
    /* What seeding wrote is on disk before anyone can log in. */
    commit_or_die(b, 0);
    struct statvfs rvfs;
    if (!reserve_size(b))
        ;
    else if (statvfs(cfg->data_dir, &rvfs) == 0 &&
             (uint64_t)rvfs.f_bavail * rvfs.f_frsize >= cfg->disk_free_limit + 2 * reserve_size(b))
        reserve_make(b);
    else
        sl_warn("store: no room for the space reserve (%llu bytes) yet: it is made once there "
                "is",
                (unsigned long long)reserve_size(b));
    b->sync_w.fd = persist_sync_fd(b->store);
    b->sync_w.fn = on_sync_done;
    b->sync_w.data = b;
    if (b->sync_w.fd >= 0 && sl_loop_watch(b->loop, &b->sync_w, SL_EV_READ) < 0) {
        sl_error("cannot watch the sync thread: %s", strerror(errno));
        goto fail;
    }
    b->pace_w.fd =
        cfg->sync_pace_us ? timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC) : -1;
    b->pace_w.fn = on_pace_due;
    b->pace_w.data = b;
    if (b->pace_w.fd >= 0 && sl_loop_watch(b->loop, &b->pace_w, SL_EV_READ) < 0) {
        sl_error("cannot watch the sync pacing timer: %s", strerror(errno));
        goto fail;
    }
    link_options lo;
    link_options_defaults(&lo);
    lo.user = cfg->link_user;
    lo.password = cfg->link_password;
    lo.heartbeat_s = cfg->link_heartbeat_s;
    lo.retry_min_ms = cfg->link_retry_min_ms;
    lo.retry_max_ms = cfg->link_retry_max_ms;
    lo.idle_ms = cfg->link_idle_ms;
    memcpy(lo.resend_ms, cfg->eod_resend_ms, sizeof lo.resend_ms);
    lo.batch_msgs = cfg->link_batch_msgs;
    lo.batch_bytes = cfg->link_batch_bytes;
    lo.window_batches = cfg->link_window;
    lo.bad_queue_grace_ms = cfg->link_bad_queue_grace_ms;
    lo.reach_queue_ms = cfg->link_time_to_reach_queue_ms;
    lo.dns_timeout_ms = cfg->link_dns_timeout_ms;
    lo.msmq_hosts = cfg->msmq_hosts;
    if (cfg->link_tls) {
        /* links over TLS: a client context, the destination's certificate verified */
        sl_tls_opts to;
        node_tls_opts(&cfg->link_ssl, &to);
        b->link_tls_ctx = sl_tls_ctx_new(0, &to, err, sizeof err);
        if (!b->link_tls_ctx) {
            sl_error("link_ssl_options: %s", err);
            goto fail;
        }
        lo.tls = b->link_tls_ctx;
    }
    /* Slow password hashes (Argon2id) are checked on a thread of their own. Without it they
     * are checked on the loop, as fast ones are (each login then holds it up ~20 ms). */
    b->verifier = acc_verifier_new(VERIFY_MAX_PENDING);
    if (b->verifier) {
        b->verify_w.fd = acc_verifier_fd(b->verifier);
        b->verify_w.fn = on_verify_done;
        b->verify_w.data = b;
        if (sl_loop_watch(b->loop, &b->verify_w, SL_EV_READ) < 0) {
            acc_verifier_free(b->verifier);
            b->verifier = NULL;
        }
    }
    if (!b->verifier)
        sl_warn("access: no password-check thread (%s): Argon2id logins are checked on the "
                "event loop",
                strerror(errno));
    b->links = link_mgr_new(b->qm, b->loop, b->store, &lo);
    link_mgr_recover(b->links);
    if (getrandom(&b->boot_id, sizeof b->boot_id, 0) != (ssize_t)sizeof b->boot_id)
        b->boot_id = sl_now_ms() ^ (uint64_t)getpid() << 40;
    sl_timer_init(&b->tidy_timer, tidy_tick, b);
    if (cfg->tidy_interval_s)
        sl_timer_start(b->loop, &b->tidy_timer, sl_now_ms() + cfg->tidy_interval_s * 1000);
    sl_loop_set_before_sleep(b->loop, before_sleep, b);
    sl_timer_init(&b->tick_timer, tick, b);
    sl_timer_start(b->loop, &b->tick_timer, sl_now_ms() + TICK_MS);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    b->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (b->signal_fd >= 0) {
        b->signal_w.fd = b->signal_fd;
        b->signal_w.fn = on_signal;
        b->signal_w.data = b;
        sl_loop_watch(b->loop, &b->signal_w, SL_EV_READ);
    }
    signal(SIGPIPE, SIG_IGN);
    return b;
fail:
    persist_close(b->store);
    qm_node_free(b->qm);
    acc_free(b->acc);
    sl_loop_free(b->loop);
    sl_free(b);
    return NULL;
}

int broker_listen(broker *b)
{
    char err[320];
    int fd = b->cfg->adopt_amqp_fd >= 0
                 ? sl_listen_adopt(b->cfg->adopt_amqp_fd, b->bound_addr, sizeof b->bound_addr,
                                   &b->bound_port, err, sizeof err)
                 : sl_listen_tcp(b->cfg->bind, b->cfg->port, 1024, b->bound_addr,
                                 sizeof b->bound_addr, &b->bound_port, err, sizeof err);
    if (fd < 0) {
        sl_error("%s", err);
        return -1;
    }
    b->listen_fd = fd;
    if (sl_acceptor_start(&b->acceptor, b->loop, fd, "amqp", b->fd_reserve, on_accept, NULL, b) <
        0) {
        sl_error("cannot watch the listener: %s", strerror(errno));
        return -1;
    }
    sl_info("listening amqp=%s:%d", b->bound_addr, b->bound_port);
    link_mgr_set_self(b->links, b->bound_addr, b->bound_port);
    if ((b->cfg->tls_port >= 0 || b->cfg->adopt_amqps_fd >= 0) && listen_tls(b) < 0)
        return -1;
    return 0;
}

void broker_run(broker *b)
{
    sl_loop_run(b->loop);
}

/* The space reserve: a file of the size of one message segment and one definitions segment,
 * made when there is room for it. A full disk releases it, so the writes held at that moment
 * and the small ones that keep consumers going (acks, delivery marks) get through while the
 * disk alarm holds back publishers and durable declares; it is made again once the disk has
 * room for it above disk_free_limit. */
#define RESERVE_NAME "space-reserve"

static uint64_t reserve_size(const broker *b)
{
    return b->cfg->disk_reserve;
}

static void reserve_path(const broker *b, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", b->cfg->data_dir, RESERVE_NAME);
}

static void reserve_make(broker *b)
{
    if (!reserve_size(b))
        return;
    char path[4096];
    reserve_path(b, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    int ok = fallocate(fd, 0, 0, (off_t)reserve_size(b)) == 0;
    close(fd);
    if (!ok) {
        unlink(path); /* no room for it now: the next check tries again */
        return;
    }
    b->reserve_held = 1;
}

static void reserve_release(broker *b)
{
    if (!b->reserve_held)
        return;
    char path[4096];
    reserve_path(b, path, sizeof path);
    if (unlink(path) == 0)
        sl_warn("store: the disk is full: the space reserve (%llu bytes) is released for the "
                "writes held and for acks and delivery marks",
                (unsigned long long)reserve_size(b));
    b->reserve_held = 0;
}

/* Out of space: nothing is lost and nothing that depends on the disk is answered; the disk
 * alarm stays on (publishers and durable declares held back) until a write gets through. */
static void store_stalled(broker *b)
{
    if (!(b->alarms & ALARM_DISK))
        sl_warn("store: no space left for writes: holding them, and every reply that depends "
                "on them, until space returns");
    set_alarm(b, ALARM_DISK, 1);
    reserve_release(b);
}

static void commit_or_die(broker *b, int force)
{
    char err[320];
    int rc = b->store ? persist_commit_ex(b->store, force, err, sizeof err) : 0;
    if (rc == -2) {
        store_stalled(b);
        return;
    }
    if (rc < 0) {
        /* Replies that depend on the disk must not go out: stop here. */
        sl_error("store: %s; stopping without sending replies that depend on it", err);
        exit(1);
    }
}

static void kick_or_die(broker *b, int force)
{
    char err[320];
    int rc = b->store ? persist_kick(b->store, force, err, sizeof err) : 0;
    if (rc == -2) {
        store_stalled(b);
        return;
    }
    if (rc < 0) {
        sl_error("store: %s; stopping without sending replies that depend on it", err);
        exit(1);
    }
    if (rc == 1) /* written on this thread already (a small batch with no sync) */
        release_waiters(b);
    pace_arm(b);
}

void node_sync(broker *b)
{
    commit_or_die(b, 0);
    release_waiters(b);
}

void node_tidy_start(broker *b, node_tidy_fn fn, void *ctx)
{
    if (!b->store) {
        persist_tidy_result none = {0};
        if (fn)
            fn(ctx, &none);
        return;
    }
    if (fn) {
        if (b->n_tidy_waiters == b->cap_tidy_waiters) {
            b->cap_tidy_waiters = b->cap_tidy_waiters ? b->cap_tidy_waiters * 2 : 4;
            b->tidy_waiters =
                sl_xrealloc(b->tidy_waiters, b->cap_tidy_waiters * sizeof *b->tidy_waiters);
        }
        b->tidy_waiters[b->n_tidy_waiters++] = (struct tidy_waiter){fn, ctx};
    }
    if (persist_tidy_start(b->store) == 0) {
        b->tidy_written = persist_bytes_appended(b->store);
        sl_info("tidy: started");
    }
    sl_loop_wake(b->loop);
}

/* A slice of the TIDY in progress (before_sleep): about TIDY_SLICE_US of work a turn. */
static void tidy_slice(broker *b)
{
    persist_tidy_result res;
    int rc = persist_tidy_step(b->store, TIDY_SLICE_US, &res);
    if (rc == PERSIST_TIDY_MORE) {
        sl_loop_wake(b->loop);
        return;
    }
    if (rc == PERSIST_TIDY_WAIT) {
        kick_or_die(b, 0); /* it may wait for a sync it asked for */
        return;
    }
    /* Done: the batch that closes the deleted segments (frees their blocks) goes now. */
    kick_or_die(b, 0);
    /* The waiters may start another, so take the list first. */
    struct tidy_waiter *w = b->tidy_waiters;
    size_t n = b->n_tidy_waiters;
    b->tidy_waiters = NULL;
    b->n_tidy_waiters = b->cap_tidy_waiters = 0;
    for (size_t i = 0; i < n; i++)
        w[i].fn(w[i].ctx, &res);
    sl_free(w);
}

void broker_free(broker *b)
{
    if (!b)
        return;
    broker_cluster_stop(b); /* a leader hands its key back before its clients are dropped */
    /* What purges and deletes left behind, at once: the graveyard still owes the MSMQ
     * acknowledgements of their paged messages (qm_node_reap), which need the links and the
     * store that go below. */
    qm_node_reap(b->qm, 0);
    if (b->reserve_held) { /* a stopped node holds no more disk than its data */
        char path[4096];
        reserve_path(b, path, sizeof path);
        unlink(path);
        b->reserve_held = 0;
    }
    /* Whatever is still open after the shutdown grace period is dropped now. */
    while (b->conns) {
        conn *c = b->conns;
        conn_kill(c, NULL);
        conn_flush(c);
        unlink_conn(b, c);
        conn_free(c);
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
    if (b->verifier) {           /* after the connections (and the API) cancelled their checks */
        sl_loop_unwatch(b->loop, &b->verify_w);
        acc_verifier_free(b->verifier);
    }
    if (b->signal_fd >= 0)
        close(b->signal_fd);
    sl_timer_stop(b->loop, &b->tick_timer);
    sl_timer_stop(b->loop, &b->tidy_timer);
    sl_loop_unwatch(b->loop, &b->sync_w);
    if (b->pace_w.fn && b->pace_w.fd >= 0) {
        sl_loop_unwatch(b->loop, &b->pace_w);
        close(b->pace_w.fd);
        b->pace_w.fd = -1;
    }
    /* Links hand their in-flight messages back (they stay in the store as they are). */
    link_mgr_free(b->links);
    sl_tls_ctx_free(b->link_tls_ctx); /* after the links' streams */
    link_rpc_queue_free_all();        /* remote handles' open descriptors, before the queues go */
    /* A TIDY cut short by the stop: whoever waited for it hears that nothing was freed. */
    persist_tidy_result none = {0};
    for (size_t i = 0; i < b->n_tidy_waiters; i++)
        b->tidy_waiters[i].fn(b->tidy_waiters[i].ctx, &none);
    sl_free(b->tidy_waiters);
    b->tidy_waiters = NULL;
    b->n_tidy_waiters = 0;
    /* The store lets go of the model first: freeing the model must not write records. */
    persist_close(b->store);
    broker_cluster_free_mirror(b); /* after the store: it observed its files */
    /* What still waited for the disk is on it now (persist_close committed); a door that
     * registered a callback (the HTTP API) has already been stopped. */
    sl_free(b->dwaiters);
    qm_node_free(b->qm);
    acc_free(b->acc);
    sl_loop_free(b->loop);
    sl_map_free(b->reply_to); /* empty: every channel took its name out when it closed */
    sl_free(b);
}

void node_qm_guid(const broker *b, uint8_t out[16])
{
    if (b->store)
        memcpy(out, persist_node_id(b->store), 16);
    else
        for (int i = 0; i < 16; i++)
            out[i] = (uint8_t)(b->boot_id >> (8 * (i % 8)));
}
