/* ticket.c - the node's disk: group commit, the tickets replies wait on, and TIDY.
 *
 * Waiting for the disk: the loop never waits for a sync. A reply that promises something on
 * disk takes a ticket, the store generation its records are in: publisher confirms wait in
 * their channel (broker/channel.c), other AMQP replies hold their connection's output from
 * where they start (broker/conn.c), HTTP and MS-MQQB replies and links register a callback
 * (node_after_sync). When the sync thread finishes a generation its eventfd wakes the loop,
 * which tells every part (node_part.released) and runs the callbacks the generation covers,
 * in ticket order.
 *
 * Invariants: the callback ring is in ticket order (tickets only grow); a failing store
 * stops the process before any reply that depends on it goes out; a full disk stalls the
 * store instead (node_store_stalled), answering nothing that needs the disk until it has room.
 */
#include "node/node.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/le.h"
#include "core/log.h"
#include "core/mem.h"
#include "persist/persist.h"

typedef struct disk_waiter {
    uint64_t gen;
    void (*fn)(void *ctx);
    void *ctx;
} disk_waiter;

uint64_t node_ticket(const sl_node *n)
{
    return n->store ? persist_ticket(n->store) : 0;
}

uint64_t node_durable(const sl_node *n)
{
    return n->store ? persist_done(n->store) : 0;
}

uint64_t node_write_ticket_since(sl_node *n, uint64_t wmark)
{
    if (!n->store || persist_wmark(n->store) == wmark)
        return 0;
    return persist_write_ticket(n->store);
}

uint64_t node_wmark(const sl_node *n)
{
    return n->store ? persist_wmark(n->store) : 0;
}

uint64_t node_delivery_ticket(sl_node *n)
{
    /* Out of space, the delivery marks cannot be written: deliveries go out without waiting
     * for them (consumers keep draining the disk), and a crash before space returns only loses
     * the redelivered flag of what was delivered meanwhile. */
    if (n->store && persist_stalled(n->store))
        return 0;
    /* A cluster leader below min_insync_replicas releases nothing until enough followers are
     * back: a delivery that waited for its mark would wait that long, where consumers are to
     * keep going (docs/cluster.md). The same trade: a failover before the mark reaches the
     * followers only loses the redelivered flag (the message itself comes again). Not during
     * a hand-over: that ends by itself, within 10 s. The deliveries that waited when the ISR
     * shrank stop waiting then (node_drop_delivery_holds). */
    if ((n->alarms & ALARM_CLUSTER) && !n->cl_handover)
        return 0;
    uint64_t t = node_write_ticket_since(n, n->wmark_seen);
    if (t)
        n->wmark_seen = persist_wmark(n->store);
    return t;
}

uint64_t node_mark(const sl_node *n)
{
    return n->store ? persist_mark(n->store) : 0;
}

uint64_t node_ticket_since(const sl_node *n, uint64_t mark)
{
    return n->store ? persist_ticket_since(n->store, mark) : 0;
}

uint64_t node_ticket_since_lazy(const sl_node *n, uint64_t mark)
{
    return n->store ? persist_ticket_since_lazy(n->store, mark) : 0;
}

void node_hasten(sl_node *n, uint64_t gen)
{
    if (n->store)
        persist_hasten(n->store, gen);
}

/* Sync pacing: persist_kick left the open generation's sync for later (only pipelined
 * confirms wait for it); the timerfd wakes the loop when it is due, and that turn's kick
 * starts it. A timerfd rather than a loop timer: the loop's timers are in milliseconds,
 * the pace in microseconds. */
static void pace_arm(sl_node *n)
{
    uint64_t due = n->store ? persist_pace_due(n->store) : 0;
    if (!due || n->pace_w.fd < 0 || (n->pace_armed_us && n->pace_armed_us <= due))
        return;
    struct itimerspec its = {.it_value = {(time_t)(due / 1000000u), (long)(due % 1000000u) * 1000}};
    if (timerfd_settime(n->pace_w.fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        n->pace_armed_us = due;
}

static void on_pace_due(sl_loop *loop, sl_watch *w, int events)
{
    sl_node *n = w->data;
    (void)loop;
    (void)events;
    uint64_t v;
    while (read(w->fd, &v, sizeof v) < 0 && errno == EINTR)
        ;
    n->pace_armed_us = 0; /* the turn's kick now starts the sync */
}

int node_after_sync(sl_node *n, void (*fn)(void *ctx), void *ctx)
{
    uint64_t gen = node_ticket(n);
    uint64_t w = n->store ? persist_write_ticket(n->store) : 0;
    if (w > gen) /* a get over HTTP marked a delivery: its reply waits for the write */
        gen = w;
    if (gen <= node_durable(n))
        return 0;
    if (n->dw_len == n->dw_cap) {
        size_t cap = n->dw_cap ? n->dw_cap * 2 : 16;
        disk_waiter *nu = sl_xmalloc(cap * sizeof *nu);
        for (size_t i = 0; i < n->dw_len; i++)
            nu[i] = n->dwaiters[(n->dw_head + i) % n->dw_cap];
        sl_free(n->dwaiters);
        n->dwaiters = nu;
        n->dw_cap = cap;
        n->dw_head = 0;
    }
    /* Tickets only grow, so the ring stays in ticket order. */
    n->dwaiters[(n->dw_head + n->dw_len++) % n->dw_cap] = (disk_waiter){gen, fn, ctx};
    return 1;
}

/* A generation became durable: every part replies to what waited (the AMQP door flushes its
 * waiting connections this turn, the links send their acknowledgements), and the callbacks
 * it covers run. */
void node_release_waiters(sl_node *n)
{
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].released)
            n->parts[i].released(n->parts[i].ctx);
    uint64_t durable = node_durable(n);
    while (n->dw_len && n->dwaiters[n->dw_head].gen <= durable) {
        disk_waiter w = n->dwaiters[n->dw_head];
        n->dw_head = (n->dw_head + 1) % n->dw_cap;
        n->dw_len--;
        w.fn(w.ctx);
    }
}

/* What a commit or a kick returned: -2, out of space (the store holds the writes: stalled);
 * another failure stops the process, since replies that depend on the disk must not go out.
 * 1 when the caller may go on. */
static int store_rc(sl_node *n, int rc, const char *err)
{
    if (rc == -2) {
        node_store_stalled(n);
        return 0;
    }
    if (rc < 0) {
        sl_error("store: %s; stopping without sending replies that depend on it", err);
        exit(1);
    }
    return 1;
}

static void on_sync_done(sl_loop *loop, sl_watch *w, int events)
{
    sl_node *n = w->data;
    (void)loop;
    (void)events;
    char err[320];
    if (store_rc(n, persist_sync_done(n->store, err, sizeof err), err))
        node_release_waiters(n);
}

int node_watch_store(sl_node *n)
{
    n->sync_w.fd = persist_sync_fd(n->store);
    n->sync_w.fn = on_sync_done;
    n->sync_w.data = n;
    if (n->sync_w.fd >= 0 && sl_loop_watch(n->loop, &n->sync_w, SL_EV_READ) < 0) {
        sl_error("cannot watch the sync thread: %s", strerror(errno));
        return -1;
    }
    n->pace_w.fd =
        n->cfg->sync_pace_us ? timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC) : -1;
    n->pace_w.fn = on_pace_due;
    n->pace_w.data = n;
    if (n->pace_w.fd >= 0 && sl_loop_watch(n->loop, &n->pace_w, SL_EV_READ) < 0) {
        sl_error("cannot watch the sync pacing timer: %s", strerror(errno));
        return -1;
    }
    return 0;
}

void node_unwatch_store(sl_node *n)
{
    if (n->sync_w.fn)
        sl_loop_unwatch(n->loop, &n->sync_w);
    if (n->pace_w.fn && n->pace_w.fd >= 0) {
        sl_loop_unwatch(n->loop, &n->pace_w);
        close(n->pace_w.fd);
        n->pace_w.fd = -1;
    }
}

void node_commit(sl_node *n, int force)
{
    char err[320];
    store_rc(n, n->store ? persist_commit_ex(n->store, force, err, sizeof err) : 0, err);
}

void node_kick(sl_node *n, int force)
{
    char err[320];
    int rc = n->store ? persist_kick(n->store, force, err, sizeof err) : 0;
    if (!store_rc(n, rc, err))
        return;
    if (rc == 1) /* written on this thread already (a small batch with no sync) */
        node_release_waiters(n);
    pace_arm(n);
}

void node_sync(sl_node *n)
{
    node_commit(n, 0);
    node_release_waiters(n);
}

void node_tidy_start(sl_node *n, node_tidy_fn fn, void *ctx)
{
    if (!n->store) {
        persist_tidy_result none = {0};
        if (fn)
            fn(ctx, &none);
        return;
    }
    if (fn) {
        if (n->n_tidy_waiters == n->cap_tidy_waiters) {
            n->cap_tidy_waiters = n->cap_tidy_waiters ? n->cap_tidy_waiters * 2 : 4;
            n->tidy_waiters =
                sl_xrealloc(n->tidy_waiters, n->cap_tidy_waiters * sizeof *n->tidy_waiters);
        }
        n->tidy_waiters[n->n_tidy_waiters++] = (struct tidy_waiter){fn, ctx};
    }
    if (persist_tidy_reaping(n->store)) {
        n->tidy_after_reap = 1; /* a reap's result would not answer a TIDY: it comes next */
    } else if (persist_tidy_start(n->store) == 0) {
        n->tidy_written = persist_bytes_appended(n->store);
        sl_info("tidy: started");
    }
    sl_loop_wake(n->loop);
}

#define TIDY_SLICE_US 2000

/* A slice of the TIDY in progress (each turn): about TIDY_SLICE_US of work. */
static void tidy_slice(sl_node *n)
{
    persist_tidy_result res;
    int reap = persist_tidy_reaping(n->store);
    int rc = persist_tidy_step(n->store, TIDY_SLICE_US, &res);
    if (rc == PERSIST_TIDY_MORE) {
        sl_loop_wake(n->loop);
        return;
    }
    if (rc == PERSIST_TIDY_WAIT) {
        node_kick(n, 0); /* it may wait for a sync it asked for */
        return;
    }
    /* Done: the batch that closes the deleted segments (frees their blocks) goes now. */
    node_kick(n, 0);
    if (reap) {
        if (n->tidy_after_reap) { /* its waiters wait on for the TIDY they asked for */
            n->tidy_after_reap = 0;
            node_tidy_start(n, NULL, NULL);
        }
        return;
    }
    /* The waiters may start another, so take the list first. */
    struct tidy_waiter *w = n->tidy_waiters;
    size_t cnt = n->n_tidy_waiters;
    n->tidy_waiters = NULL;
    n->n_tidy_waiters = n->cap_tidy_waiters = 0;
    for (size_t i = 0; i < cnt; i++)
        w[i].fn(w[i].ctx, &res);
    sl_free(w);
}

/* Steady traffic leaves acked messages' segments behind as fast as it writes: a node taking
 * 20,000 persistent msg/s grew its store by ~12 GB an hour between the 6-hourly TIDYs. So a
 * TIDY also starts once the store has taken tidy_after_written bytes since the last one
 * started (it runs in slices like any other; whatever it copies counts towards the next). */
static void tidy_after_written(sl_node *n)
{
    uint64_t every = n->cfg->tidy_after_written;
    if (n->store && every && persist_bytes_appended(n->store) - n->tidy_written >= every) {
        n->tidy_written = persist_bytes_appended(n->store); /* also if it cannot start now */
        node_tidy_start(n, NULL, NULL);
    }
}

/* Between TIDYs, acked traffic leaves whole segments that nothing references: a reap deletes
 * them (TIDY's last two steps: a sync, then the deletions) once a segment has lost its last
 * reference, at most every reap_interval. Recovery reads every segment still on disk, and a
 * cluster's new leader recovers its mirror of the old one's (the unlinks are mirrored): 1.1 GB
 * of acked 1 KiB messages took 1.3-4.5 s to read back after kill -9 here (touching every
 * record: skipping their CRC32C saved under a tenth), all of it waiting for the next TIDY
 * (tidy_after_written, 1 GB). */
static void reap_when_released(sl_node *n)
{
    uint32_t every = n->cfg->reap_interval_ms;
    if (!n->store || !every || persist_segments_released(n->store) == n->reap_released)
        return;
    uint64_t now = sl_loop_now(n->loop);
    if (now - n->reap_at_ms < every)
        return; /* the next turn after it looks again */
    n->reap_released = persist_segments_released(n->store);
    n->reap_at_ms = now;
    if (persist_tidy_start_reap(n->store) == 0)
        sl_loop_wake(n->loop);
}

void node_tidy_turn(sl_node *n)
{
    if (n->store && persist_tidy_running(n->store)) {
        tidy_slice(n);
    } else {
        tidy_after_written(n);
        reap_when_released(n);
    }
}

static void tidy_tick(sl_loop *loop, sl_timer *t)
{
    sl_node *n = t->data;
    node_tidy_start(n, NULL, NULL);
    sl_timer_start(loop, t, sl_loop_now(loop) + n->cfg->tidy_interval_s * 1000);
}

void node_tidy_timer_start(sl_node *n)
{
    sl_timer_init(&n->tidy_timer, tidy_tick, n);
    if (n->cfg->tidy_interval_s)
        sl_timer_start(n->loop, &n->tidy_timer, sl_now_ms() + n->cfg->tidy_interval_s * 1000);
}

/* A TIDY cut short by the stop: whoever waited for it hears that nothing was freed. */
void node_tidy_stop(sl_node *n)
{
    sl_timer_stop(n->loop, &n->tidy_timer);
    persist_tidy_result none = {0};
    for (size_t i = 0; i < n->n_tidy_waiters; i++)
        n->tidy_waiters[i].fn(n->tidy_waiters[i].ctx, &none);
    sl_free(n->tidy_waiters);
    n->tidy_waiters = NULL;
    n->n_tidy_waiters = 0;
}

void node_qm_guid(const sl_node *n, uint8_t out[16])
{
    if (n->store)
        memcpy(out, persist_node_id(n->store), 16);
    else {
        sl_put_le64(out, n->boot_id); /* twice: 16 bytes */
        sl_put_le64(out + 8, n->boot_id);
    }
}
