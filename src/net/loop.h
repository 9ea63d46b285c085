/* loop.h - the event loop: epoll readiness, a timer heap, and a before-sleep hook.
 *
 * One thread runs the loop and owns all broker state, so handlers take no locks. A turn is:
 * wait for readiness (timeout = nearest timer), run fd handlers, run due timers, then the
 * before-sleep hook, where the broker dispatches queued messages and flushes every socket
 * once (redis's beforeSleep, libuv's phases).
 */
#ifndef SL_NET_LOOP_H
#define SL_NET_LOOP_H

#include <stdint.h>

typedef struct sl_loop sl_loop;
typedef struct sl_watch sl_watch;
typedef struct sl_timer sl_timer;

enum { SL_EV_READ = 1, SL_EV_WRITE = 2, SL_EV_ERROR = 4 };

typedef void (*sl_watch_fn)(sl_loop *loop, sl_watch *w, int events);
typedef void (*sl_timer_fn)(sl_loop *loop, sl_timer *t);
typedef void (*sl_hook_fn)(sl_loop *loop, void *arg);

/* Embed in the owner; the loop never allocates or frees watchers or timers. */
struct sl_watch {
    int fd;
    int events; /* currently registered SL_EV_READ | SL_EV_WRITE */
    sl_watch_fn fn;
    void *data;
};

struct sl_timer {
    uint64_t due; /* sl_now_ms() */
    sl_timer_fn fn;
    void *data;
    int heap_index; /* -1 when not armed */
};

sl_loop *sl_loop_new(void);
void sl_loop_free(sl_loop *l);
/* Start, change or stop (events = 0) watching w->fd. Returns 0 or -1 (errno set). */
int sl_loop_watch(sl_loop *l, sl_watch *w, int events);
void sl_loop_unwatch(sl_loop *l, sl_watch *w);
void sl_timer_init(sl_timer *t, sl_timer_fn fn, void *data);
void sl_timer_start(sl_loop *l, sl_timer *t, uint64_t due);
void sl_timer_stop(sl_loop *l, sl_timer *t);
static inline int sl_timer_armed(const sl_timer *t)
{
    return t->heap_index >= 0;
}
void sl_loop_set_before_sleep(sl_loop *l, sl_hook_fn fn, void *arg);
/* Run until sl_loop_stop is called. */
void sl_loop_run(sl_loop *l);
void sl_loop_stop(sl_loop *l);
/* Make the next wait return at once: work was queued that the before-sleep hook must run. */
void sl_loop_wake(sl_loop *l);
/* How long turns take (from the end of the wait to the start of the next one): the measure of
 * a stall as clients feel it. Buckets count turns longer than 1, 10, 50, 100 and 1000 ms.
 * With cpu stats on, the same for the thread's CPU time in each turn, which tells the node's
 * own long turns from a busy machine's preemption (it costs a system call a turn, so it is
 * off unless asked for). */
typedef struct sl_loop_stats {
    uint64_t turns;
    uint64_t max_us;
    uint64_t over_ms[5];
    uint64_t cpu_max_us;
    uint64_t cpu_over_ms[5];
} sl_loop_stats;
extern const unsigned sl_loop_stat_ms[5];
void sl_loop_get_stats(const sl_loop *l, sl_loop_stats *out);
void sl_loop_set_cpu_stats(sl_loop *l, int on);
/* Poll for up to us microseconds before sleeping after a turn that handled events (0: never,
 * the default); and how many waits found an event while polling. */
void sl_loop_set_busy_poll(sl_loop *l, uint32_t us);
uint64_t sl_loop_busy_polls(const sl_loop *l);
/* sl_now_ms() as of the start of the current turn (cheap). */
uint64_t sl_loop_now(const sl_loop *l);
/* Where that time lives, for code that reads it often (the queue model's clock). */
const uint64_t *sl_loop_now_ptr(const sl_loop *l);

#endif
