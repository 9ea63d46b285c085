/* resolve.c - the lookup threads of link host names (contract in resolve.h).
 *
 * Invariants: a request is on exactly one of todo (posted, not started), a worker's hands
 * (running) or done (finished, not yet delivered), the lists and the thread counts under mu;
 * `cancelled` is atomic (set by the loop; read by a worker to skip the lookup and by the
 * loop to skip the callback). Requests are freed on the loop thread only, when delivered.
 * The eventfd counts finished requests and is read back to zero by link_resolver_run_done,
 * so it is readable exactly while done is not empty.
 */
#include "link/resolve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/mem.h"

/* One stuck lookup (a silent DNS server: seconds per try) must not hold up the rest, and a
 * node has few destination hosts: a handful of threads, started as requests find none idle. */
#define RESOLVE_THREADS 4

_Static_assert(LINK_ADDR_LEN >= INET6_ADDRSTRLEN, "an address must fit");

struct link_resolve_req {
    char *host;
    link_resolve_cb cb;
    void *ctx;
    int cancelled;
    char addrs[LINK_RESOLVE_ADDRS][LINK_ADDR_LEN];
    unsigned n_addrs;
    char err[160];
    link_resolve_req *next;
};

struct link_resolver {
    pthread_t threads[RESOLVE_THREADS];
    unsigned n_threads, n_idle;
    pthread_mutex_t mu;
    pthread_cond_t work;
    link_resolve_req *todo, **todo_tail;
    link_resolve_req *done, **done_tail;
    int quit;
    int efd;
    unsigned n_alive; /* loop thread only */
};

static void lookup(link_resolve_req *q)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(q->host, NULL, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(q->err, sizeof q->err, "%s",
                 rc == EAI_SYSTEM ? strerror(errno)
                 : rc             ? gai_strerror(rc)
                                  : "no address");
        if (res)
            freeaddrinfo(res);
        return;
    }
    for (const struct addrinfo *ai = res; ai && q->n_addrs < LINK_RESOLVE_ADDRS; ai = ai->ai_next) {
        const void *a = ai->ai_family == AF_INET6
                            ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                        : ai->ai_family == AF_INET
                            ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                            : NULL;
        char *dst = q->addrs[q->n_addrs];
        if (!a || !inet_ntop(ai->ai_family, a, dst, LINK_ADDR_LEN))
            continue;
        unsigned i = 0;
        while (i < q->n_addrs && strcmp(q->addrs[i], dst) != 0)
            i++;
        if (i == q->n_addrs) /* /etc/hosts may list one address twice: try it once */
            q->n_addrs++;
    }
    if (q->n_addrs == 0)
        snprintf(q->err, sizeof q->err, "no usable address");
    freeaddrinfo(res);
}

static void *thread_main(void *p)
{
    link_resolver *r = p;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        r->n_idle++;
        while (!r->quit && !r->todo)
            pthread_cond_wait(&r->work, &r->mu);
        r->n_idle--;
        if (r->quit)
            break;
        link_resolve_req *q = r->todo;
        r->todo = q->next;
        if (!r->todo)
            r->todo_tail = &r->todo;
        q->next = NULL;
        int skip = __atomic_load_n(&q->cancelled, __ATOMIC_ACQUIRE);
        pthread_mutex_unlock(&r->mu);
        if (!skip)
            lookup(q);
        pthread_mutex_lock(&r->mu);
        *r->done_tail = q;
        r->done_tail = &q->next;
        uint64_t one = 1;
        while (write(r->efd, &one, sizeof one) < 0 && errno == EINTR)
            ;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

link_resolver *link_resolver_new(void)
{
    link_resolver *r = sl_xcalloc(1, sizeof *r);
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->efd < 0) {
        sl_free(r);
        return NULL;
    }
    r->todo_tail = &r->todo;
    r->done_tail = &r->done;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->work, NULL);
    return r;
}

static void free_list(link_resolve_req *q)
{
    while (q) {
        link_resolve_req *next = q->next;
        sl_free(q->host);
        sl_free(q);
        q = next;
    }
}

void link_resolver_free(link_resolver *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->quit = 1;
    pthread_cond_broadcast(&r->work);
    unsigned n = r->n_threads;
    pthread_mutex_unlock(&r->mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    int stuck = 0;
    for (unsigned i = 0; i < n; i++)
        if (pthread_timedjoin_np(r->threads[i], NULL, &until) != 0) {
            pthread_detach(r->threads[i]);
            stuck = 1;
        }
    if (stuck)
        return; /* a thread inside getaddrinfo still holds r (see resolve.h) */
    free_list(r->todo);
    free_list(r->done);
    close(r->efd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->work);
    sl_free(r);
}

int link_resolver_fd(const link_resolver *r)
{
    return r->efd;
}

link_resolve_req *link_resolve(link_resolver *r, const char *host, link_resolve_cb cb, void *ctx)
{
    link_resolve_req *q = sl_xcalloc(1, sizeof *q);
    q->host = sl_xstrdup(host);
    q->cb = cb;
    q->ctx = ctx;
    pthread_mutex_lock(&r->mu);
    if (r->n_idle == 0 && r->n_threads < RESOLVE_THREADS) {
        /* Signals belong to the loop thread (signalfd): the workers block them all. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        if (pthread_create(&r->threads[r->n_threads], NULL, thread_main, r) == 0)
            r->n_threads++;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (r->n_threads == 0) {
        pthread_mutex_unlock(&r->mu);
        sl_free(q->host);
        sl_free(q);
        return NULL;
    }
    *r->todo_tail = q;
    r->todo_tail = &q->next;
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
    r->n_alive++;
    return q;
}

void link_resolve_cancel(link_resolve_req *q)
{
    if (q)
        __atomic_store_n(&q->cancelled, 1, __ATOMIC_RELEASE);
}

void link_resolver_run_done(link_resolver *r)
{
    uint64_t n;
    while (read(r->efd, &n, sizeof n) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&r->mu);
    link_resolve_req *list = r->done;
    r->done = NULL;
    r->done_tail = &r->done;
    pthread_mutex_unlock(&r->mu);
    while (list) {
        link_resolve_req *q = list;
        list = q->next;
        r->n_alive--;
        if (!__atomic_load_n(&q->cancelled, __ATOMIC_ACQUIRE))
            q->cb(q->ctx, (const char(*)[LINK_ADDR_LEN])q->addrs, q->n_addrs,
                  q->err[0] ? q->err : "no address");
        sl_free(q->host);
        sl_free(q);
    }
}

unsigned link_resolver_pending(const link_resolver *r)
{
    return r->n_alive;
}
