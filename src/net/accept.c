/* accept.c - the accept loop shared by both doors (see accept.h for the rules).
 *
 * Invariant: the listener is watched exactly when paused == SL_ACCEPT_RUNNING; the retry timer
 * is armed exactly while paused. A pause and its end are logged once each, so a node at its
 * descriptor limit writes two lines, not one per attempt (it used to spin on EMFILE: level-
 * triggered epoll kept reporting the waiting connection).
 */
#include "net/accept.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"

#define ACCEPT_PER_EVENT 64
#define RETRY_NO_FDS_MS 250 /* descriptors may come back without a connection closing */
#define RETRY_FULL_MS 1000  /* the door also kicks when a connection goes */

static void on_listen(sl_loop *loop, sl_watch *w, int events);

unsigned sl_fd_reserve(uint64_t limit)
{
    uint64_t r = limit / 16;
    return (unsigned)(r < 16 ? 16 : r > 1024 ? 1024 : r);
}

static void pause_accepting(sl_acceptor *a, int why, const char *detail)
{
    if (a->paused == SL_ACCEPT_RUNNING) {
        sl_loop_unwatch(a->loop, &a->w);
        if (why == SL_ACCEPT_NO_FDS && !a->starved) {
            /* One line and one count per episode, however many retries it takes. */
            a->starved = 1;
            a->pauses++;
            sl_warn("%s listener: %s (RLIMIT_NOFILE %llu, %u kept for the store and the other "
                    "door): not accepting until descriptors are freed",
                    a->name, detail, (unsigned long long)a->fd_limit, a->reserve);
        } else if (why == SL_ACCEPT_FULL) {
            sl_info("%s listener: %s: not accepting until a connection closes", a->name, detail);
        }
    }
    a->paused = why;
    sl_timer_start(a->loop, &a->retry,
                   sl_loop_now(a->loop) +
                       (why == SL_ACCEPT_NO_FDS ? RETRY_NO_FDS_MS : RETRY_FULL_MS));
}

static void resume_accepting(sl_acceptor *a)
{
    if (a->paused == SL_ACCEPT_RUNNING)
        return;
    a->paused = SL_ACCEPT_RUNNING;
    sl_timer_stop(a->loop, &a->retry);
    if (sl_loop_watch(a->loop, &a->w, SL_EV_READ) < 0) {
        pause_accepting(a, SL_ACCEPT_NO_FDS, strerror(errno));
        return;
    }
}

static void accept_some(sl_acceptor *a)
{
    for (int i = 0; i < ACCEPT_PER_EVENT; i++) {
        if (a->can_accept && !a->can_accept(a)) {
            pause_accepting(a, SL_ACCEPT_FULL, "connection limit reached");
            return;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(a->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                pause_accepting(a, SL_ACCEPT_NO_FDS, strerror(errno));
                return;
            }
            /* Anything else (EPROTO, ENETDOWN, ...) belongs to that one connection. */
            sl_debug("%s listener: accept: %s", a->name, strerror(errno));
            continue;
        }
        if ((uint64_t)fd + a->reserve >= a->fd_limit) {
            close(fd);
            a->fd_refused++;
            pause_accepting(a, SL_ACCEPT_NO_FDS, "descriptors nearly exhausted");
            return;
        }
        /* Hysteresis: "back" only well clear of the reserve, or a table that frees one
         * descriptor at a time would log two lines for each. */
        if (a->starved && (uint64_t)fd + 2 * (uint64_t)a->reserve < a->fd_limit) {
            a->starved = 0;
            sl_info("%s listener: descriptors are back, accepting again", a->name);
        }
        a->accepted++;
        a->on_conn(a, fd, &ss);
    }
}

static void on_listen(sl_loop *loop, sl_watch *w, int events)
{
    (void)loop;
    (void)events;
    sl_acceptor *a = w->data;
    if (a->paused == SL_ACCEPT_RUNNING)
        accept_some(a);
}

static void on_retry(sl_loop *loop, sl_timer *t)
{
    (void)loop;
    sl_acceptor *a = t->data;
    if (a->paused == SL_ACCEPT_RUNNING)
        return;
    if (a->paused == SL_ACCEPT_FULL && a->can_accept && !a->can_accept(a)) {
        sl_timer_start(a->loop, &a->retry, sl_loop_now(a->loop) + RETRY_FULL_MS);
        return;
    }
    resume_accepting(a);
}

int sl_acceptor_start(sl_acceptor *a, sl_loop *loop, int fd, const char *name, unsigned reserve,
                      sl_accept_fn on_conn, sl_can_accept_fn can_accept, void *data)
{
    memset(a, 0, sizeof *a);
    a->loop = loop;
    a->fd = fd;
    a->name = name;
    a->on_conn = on_conn;
    a->can_accept = can_accept;
    a->data = data;
    struct rlimit rl;
    a->fd_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                      ? (uint64_t)rl.rlim_cur
                      : (uint64_t)1 << 20;
    a->reserve = reserve;
    a->w.fd = fd;
    a->w.fn = on_listen;
    a->w.data = a;
    sl_timer_init(&a->retry, on_retry, a);
    return sl_loop_watch(loop, &a->w, SL_EV_READ);
}

void sl_acceptor_kick(sl_acceptor *a)
{
    if (a->paused == SL_ACCEPT_RUNNING || !a->loop)
        return;
    if (a->paused == SL_ACCEPT_FULL && a->can_accept && !a->can_accept(a))
        return;
    resume_accepting(a);
}

void sl_acceptor_stop(sl_acceptor *a)
{
    if (!a->loop)
        return;
    sl_loop_unwatch(a->loop, &a->w);
    sl_timer_stop(a->loop, &a->retry);
    a->loop = NULL;
}
