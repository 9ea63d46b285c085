/* syncer.c - the sync thread (contract in syncer.h).
 *
 * Invariants: `posted` is set by the loop and cleared by the loop when it takes the finished
 * job; `done` is set by the thread when fn returns. Both under mu. The eventfd carries one
 * count per finished job and is read back to zero when the job is taken, so it is readable
 * exactly while a finished job waits to be taken.
 */
#include "store/syncer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/mem.h"

struct st_syncer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;     /* the thread waits here for a job or quit */
    pthread_cond_t finished; /* st_syncer_wait waits here */
    st_job_fn fn;
    void *arg;
    int posted, running, done, quit;
    int efd;
};

static void *thread_main(void *p)
{
    st_syncer *s = p;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->quit && !(s->posted && !s->running && !s->done))
            pthread_cond_wait(&s->work, &s->mu);
        if (s->quit && !(s->posted && !s->done))
            break;
        s->running = 1;
        st_job_fn fn = s->fn;
        void *arg = s->arg;
        pthread_mutex_unlock(&s->mu);
        fn(arg);
        pthread_mutex_lock(&s->mu);
        s->running = 0;
        s->done = 1;
        pthread_cond_broadcast(&s->finished);
        uint64_t one = 1;
        while (write(s->efd, &one, sizeof one) < 0 && errno == EINTR)
            ;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

st_syncer *st_syncer_new(void)
{
    st_syncer *s = sl_xcalloc(1, sizeof *s);
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        sl_free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->finished, NULL);
    /* Signals belong to the loop thread (signalfd): the helper blocks them all. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, thread_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(s->efd);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->finished);
        sl_free(s);
        errno = rc;
        return NULL;
    }
    return s;
}

void st_syncer_free(st_syncer *s)
{
    if (!s)
        return;
    st_syncer_wait(s);
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    close(s->efd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->finished);
    sl_free(s);
}

int st_syncer_fd(const st_syncer *s)
{
    return s->efd;
}

void st_syncer_post(st_syncer *s, st_job_fn fn, void *arg)
{
    pthread_mutex_lock(&s->mu);
    if (s->posted)
        abort(); /* one job at a time: the caller's bug */
    s->fn = fn;
    s->arg = arg;
    s->posted = 1;
    s->done = 0;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

int st_syncer_busy(const st_syncer *s)
{
    return s->posted; /* only the loop thread writes it */
}

static void take(st_syncer *s)
{
    s->posted = 0;
    s->done = 0;
    uint64_t v;
    while (read(s->efd, &v, sizeof v) < 0 && errno == EINTR)
        ;
}

int st_syncer_take_done(st_syncer *s)
{
    pthread_mutex_lock(&s->mu);
    int done = s->posted && s->done;
    if (done)
        take(s);
    pthread_mutex_unlock(&s->mu);
    return done;
}

void st_syncer_wait(st_syncer *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->posted) {
        while (!s->done)
            pthread_cond_wait(&s->finished, &s->mu);
        take(s);
    }
    pthread_mutex_unlock(&s->mu);
}
