/* loop.c - epoll event loop with a binary min-heap of timers.
 *
 * Invariants: a watcher is registered with epoll exactly when w->events != 0; a timer is in
 * the heap exactly when heap_index >= 0. Timers due in the same turn run in deadline order;
 * a timer re-armed from its own callback for "now" runs in the next turn, so a busy timer
 * cannot starve socket I/O.
 *
 * A turn over SLOW_TURN_MS of wall time (or, with cpu stats on, over SLOW_TURN_CPU_MS of the
 * thread's CPU) is logged with where it went: the slowest callback and its descriptor, the
 * timers, the before-sleep hook. At most one such line per SLOW_LOG_EVERY_MS, so a loaded
 * machine cannot flood the log; the lines left out are counted in the next one.
 */
#include "net/loop.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"

#define MAX_EVENTS 256
#define SLOW_TURN_MS 100
#define SLOW_TURN_CPU_MS 50
#define SLOW_LOG_EVERY_MS 10000

/* Where one turn's time went, for the slow-turn line (microseconds). */
typedef struct turn_profile {
    int events;
    int slowest_fd;
    uint64_t slowest_us, events_us, timers_us, hook_us;
} turn_profile;

struct sl_loop {
    int epfd;
    int stop;
    int wake;
    uint64_t now;
    sl_timer **heap;
    int heap_len, heap_cap;
    sl_hook_fn before_sleep;
    void *before_sleep_arg;
    sl_loop_stats stats;
    int cpu_stats;
    turn_profile prof;
    uint64_t slow_logged_at; /* ms; 0: never */
    uint64_t slow_unlogged;  /* slow turns since the last line, not logged */
    uint32_t busy_poll_us;   /* 0: off; else how long to poll before sleeping after a busy turn */
    uint64_t busy_polls;     /* waits that found an event while polling (did not sleep) */
};

const unsigned sl_loop_stat_ms[5] = {1, 10, 50, 100, 1000};

void sl_loop_get_stats(const sl_loop *l, sl_loop_stats *out)
{
    *out = l->stats;
}

void sl_loop_set_cpu_stats(sl_loop *l, int on)
{
    l->cpu_stats = on;
}

void sl_loop_set_busy_poll(sl_loop *l, uint32_t us)
{
    l->busy_poll_us = us;
}

uint64_t sl_loop_busy_polls(const sl_loop *l)
{
    return l->busy_polls;
}

/* Wait for events. After a turn that handled some (traffic flows), poll without sleeping for up
 * to busy_poll_us first: the next frame usually comes within tens of microseconds, and waking a
 * sleeping thread on a VM costs about that much again (bench/README.md: the tail follows how fast
 * an idle vCPU wakes). Bounded in time, never after an idle turn, and never past a timer's due
 * time or a wake: an idle node sleeps at once and costs nothing.
 *
 * Between polls the thread yields: on a machine with few cores the clients' threads are often
 * queued on this very CPU, and a spin that does not yield keeps them off it for the rest of its
 * slice (a spin without the yield made p99 at 20k msg/s ten times worse on the 2-core VM,
 * docs/configuration.md). Yielding, the loop still keeps its CPU from going idle, so the next
 * frame is seen without an idle vCPU's wake-up; with nothing else runnable the yield returns at
 * once. */
static int wait_events(sl_loop *l, struct epoll_event *evs, int timeout, int busy)
{
    if (busy && timeout != 0 && l->busy_poll_us) {
        uint64_t start = sl_now_us(), until = start + l->busy_poll_us;
        if (timeout > 0 && (uint64_t)timeout * 1000 < l->busy_poll_us)
            until = start + (uint64_t)timeout * 1000;
        for (uint64_t now = start; now < until; now = sl_now_us()) {
            int n = epoll_wait(l->epfd, evs, MAX_EVENTS, 0);
            if (n != 0) {
                if (n > 0)
                    l->busy_polls++;
                return n;
            }
            sched_yield();
        }
        if (timeout > 0) { /* the time spent polling counts against the timer's */
            uint64_t spent_ms = (sl_now_us() - start) / 1000;
            timeout = spent_ms >= (uint64_t)timeout ? 0 : timeout - (int)spent_ms;
        }
    }
    return epoll_wait(l->epfd, evs, MAX_EVENTS, timeout);
}

static uint64_t thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void bucket(uint64_t *max, uint64_t *over, uint64_t us)
{
    if (us > *max)
        *max = us;
    for (int i = 0; i < 5; i++)
        if (us > (uint64_t)sl_loop_stat_ms[i] * 1000)
            over[i]++;
}

static void log_slow_turn(sl_loop *l, uint64_t us, uint64_t cpu_us)
{
    uint64_t now = sl_now_ms();
    if (l->slow_logged_at && now - l->slow_logged_at < SLOW_LOG_EVERY_MS) {
        l->slow_unlogged++;
        return;
    }
    const turn_profile *t = &l->prof;
    char cpu[48] = "";
    if (cpu_us != UINT64_MAX)
        snprintf(cpu, sizeof cpu, " (%.1f ms of CPU)", (double)cpu_us / 1000);
    sl_warn("loop: a turn took %.1f ms%s: %d event(s) in %.1f ms, the slowest %.1f ms (fd %d); "
            "timers %.1f ms; before sleep %.1f ms (%llu slow turn(s) not logged before this)",
            (double)us / 1000, cpu, t->events, (double)t->events_us / 1000,
            (double)t->slowest_us / 1000, t->slowest_fd, (double)t->timers_us / 1000,
            (double)t->hook_us / 1000, (unsigned long long)l->slow_unlogged);
    l->slow_logged_at = now;
    l->slow_unlogged = 0;
}

static void count_turn(sl_loop *l, uint64_t us, uint64_t cpu_start)
{
    l->stats.turns++;
    bucket(&l->stats.max_us, l->stats.over_ms, us);
    uint64_t cpu_us = UINT64_MAX;
    if (cpu_start) {
        cpu_us = thread_cpu_us() - cpu_start;
        bucket(&l->stats.cpu_max_us, l->stats.cpu_over_ms, cpu_us);
    }
    if (us > SLOW_TURN_MS * 1000u || (cpu_us != UINT64_MAX && cpu_us > SLOW_TURN_CPU_MS * 1000u))
        log_slow_turn(l, us, cpu_us);
}

sl_loop *sl_loop_new(void)
{
    sl_loop *l = sl_xcalloc(1, sizeof *l);
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        sl_free(l);
        return NULL;
    }
    l->now = sl_now_ms();
    return l;
}

void sl_loop_free(sl_loop *l)
{
    if (!l)
        return;
    close(l->epfd);
    sl_free(l->heap);
    sl_free(l);
}

int sl_loop_watch(sl_loop *l, sl_watch *w, int events)
{
    if (events == w->events)
        return 0;
    if (events == 0) {
        sl_loop_unwatch(l, w);
        return 0;
    }
    struct epoll_event ev = {0};
    ev.events =
        (events & SL_EV_READ ? EPOLLIN | EPOLLRDHUP : 0) | (events & SL_EV_WRITE ? EPOLLOUT : 0);
    ev.data.ptr = w;
    int op = w->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(l->epfd, op, w->fd, &ev) < 0)
        return -1;
    w->events = events;
    return 0;
}

void sl_loop_unwatch(sl_loop *l, sl_watch *w)
{
    if (w->events) {
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
        w->events = 0;
    }
}

/* ---- timer heap ---- */

static void heap_swap(sl_loop *l, int a, int b)
{
    sl_timer *t = l->heap[a];
    l->heap[a] = l->heap[b];
    l->heap[b] = t;
    l->heap[a]->heap_index = a;
    l->heap[b]->heap_index = b;
}

static void heap_up(sl_loop *l, int i)
{
    while (i > 0) {
        int p = (i - 1) / 2;
        if (l->heap[p]->due <= l->heap[i]->due)
            break;
        heap_swap(l, p, i);
        i = p;
    }
}

static void heap_down(sl_loop *l, int i)
{
    for (;;) {
        int c = 2 * i + 1, m = i;
        if (c < l->heap_len && l->heap[c]->due < l->heap[m]->due)
            m = c;
        if (c + 1 < l->heap_len && l->heap[c + 1]->due < l->heap[m]->due)
            m = c + 1;
        if (m == i)
            return;
        heap_swap(l, i, m);
        i = m;
    }
}

void sl_timer_init(sl_timer *t, sl_timer_fn fn, void *data)
{
    t->due = 0;
    t->fn = fn;
    t->data = data;
    t->heap_index = -1;
}

void sl_timer_stop(sl_loop *l, sl_timer *t)
{
    int i = t->heap_index;
    if (i < 0)
        return;
    l->heap_len--;
    if (i != l->heap_len) {
        l->heap[i] = l->heap[l->heap_len];
        l->heap[i]->heap_index = i;
        heap_down(l, i);
        heap_up(l, i);
    }
    t->heap_index = -1;
}

void sl_timer_start(sl_loop *l, sl_timer *t, uint64_t due)
{
    sl_timer_stop(l, t);
    if (l->heap_len == l->heap_cap) {
        l->heap_cap = l->heap_cap ? l->heap_cap * 2 : 64;
        l->heap = sl_xrealloc(l->heap, (size_t)l->heap_cap * sizeof *l->heap);
    }
    t->due = due;
    t->heap_index = l->heap_len;
    l->heap[l->heap_len++] = t;
    heap_up(l, t->heap_index);
}

void sl_loop_set_before_sleep(sl_loop *l, sl_hook_fn fn, void *arg)
{
    l->before_sleep = fn;
    l->before_sleep_arg = arg;
}

void sl_loop_stop(sl_loop *l)
{
    l->stop = 1;
}

void sl_loop_wake(sl_loop *l)
{
    l->wake = 1;
}

uint64_t sl_loop_now(const sl_loop *l)
{
    return l->now;
}

const uint64_t *sl_loop_now_ptr(const sl_loop *l)
{
    return &l->now;
}

static void run_timers(sl_loop *l)
{
    uint64_t now = l->now;
    /* Only timers due at the start of this pass: one re-armed for `now` waits a turn. */
    while (l->heap_len > 0 && l->heap[0]->due <= now && !l->stop) {
        sl_timer *t = l->heap[0];
        sl_timer_stop(l, t);
        if (t->due > now)
            break;
        t->fn(l, t);
        if (sl_timer_armed(t) && t->due <= now)
            t->due = now + 1;
    }
}

void sl_loop_run(sl_loop *l)
{
    struct epoll_event evs[MAX_EVENTS];
    l->stop = 0;
    uint64_t turn_start = 0, cpu_start = 0;
    int busy = 0; /* the last turn handled events */
    while (!l->stop) {
        uint64_t hook_start = sl_now_us();
        if (l->before_sleep)
            l->before_sleep(l, l->before_sleep_arg);
        if (l->stop)
            break;
        if (turn_start) {
            uint64_t end = sl_now_us();
            l->prof.hook_us = end - hook_start;
            count_turn(l, end - turn_start, cpu_start);
        }
        int timeout = -1;
        if (l->wake) {
            l->wake = 0;
            timeout = 0;
        } else if (l->heap_len > 0) {
            uint64_t now = sl_now_ms();
            uint64_t due = l->heap[0]->due;
            timeout = due <= now ? 0 : (int)(due - now > 60000 ? 60000 : due - now);
        }
        int n = wait_events(l, evs, timeout, busy);
        if (n < 0 && errno != EINTR) {
            sl_error("epoll_wait: %m");
            abort();
        }
        turn_start = sl_now_us();
        cpu_start = l->cpu_stats ? thread_cpu_us() : 0;
        l->now = turn_start / 1000;
        turn_profile *prof = &l->prof;
        *prof = (turn_profile){.events = n > 0 ? n : 0, .slowest_fd = -1};
        busy = n > 0;
        uint64_t t0 = turn_start;
        for (int i = 0; i < n && !l->stop; i++) {
            sl_watch *w = evs[i].data.ptr;
            int fd = w->fd; /* the callback may free w */
            int ev = 0;
            if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
                ev |= SL_EV_READ;
            if (evs[i].events & EPOLLOUT)
                ev |= SL_EV_WRITE;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                ev |= SL_EV_ERROR;
            w->fn(l, w, ev);
            uint64_t t1 = sl_now_us();
            if (t1 - t0 > prof->slowest_us) {
                prof->slowest_us = t1 - t0;
                prof->slowest_fd = fd;
            }
            t0 = t1;
        }
        prof->events_us = t0 - turn_start;
        run_timers(l);
        prof->timers_us = sl_now_us() - t0;
    }
}
