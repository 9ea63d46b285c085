/* verifier.c - the password-check thread (contract in verifier.h).
 *
 * Invariants: a job is on exactly one of todo (posted, not started), the worker's hands
 * (running), or done (finished, not yet delivered), the lists under mu; `cancelled` is
 * atomic (set by the loop, read by the worker to skip the work and by the loop to skip the
 * callback).
 * The eventfd counts finished jobs and is read back to zero by acc_verifier_run_done, so it
 * is readable exactly while done is not empty. n_alive (loop thread only) counts jobs not
 * yet freed: the bound of max_pending applies to it, cancelled jobs included, so owners that
 * come and go cannot pile up work either.
 */
#include "access/verifier.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "access/access.h"
#include "core/mem.h"

struct acc_verify_job {
    int algo;
    uint8_t *stored, *pw;
    size_t slen, plen;
    acc_verify_cb cb;
    void *owner;
    int cancelled, ok;
    acc_verify_job *next;
};

struct acc_verifier {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;
    acc_verify_job *todo, **todo_tail;
    acc_verify_job *done, **done_tail;
    int quit;
    int efd;
    unsigned max_pending, n_alive;
};

static void job_free(acc_verify_job *j)
{
    OPENSSL_cleanse(j->pw, j->plen);
    sl_free(j->pw);
    sl_free(j->stored);
    sl_free(j);
}

static void *thread_main(void *p)
{
    acc_verifier *v = p;
    pthread_mutex_lock(&v->mu);
    for (;;) {
        while (!v->quit && !v->todo)
            pthread_cond_wait(&v->work, &v->mu);
        if (v->quit)
            break;
        acc_verify_job *j = v->todo;
        v->todo = j->next;
        if (!v->todo)
            v->todo_tail = &v->todo;
        j->next = NULL;
        int skip = __atomic_load_n(&j->cancelled, __ATOMIC_ACQUIRE);
        pthread_mutex_unlock(&v->mu);
        int ok =
            skip ? 0 : acc_verify_password((acc_hash)j->algo, j->stored, j->slen, j->pw, j->plen);
        pthread_mutex_lock(&v->mu);
        j->ok = ok;
        *v->done_tail = j;
        v->done_tail = &j->next;
        uint64_t one = 1;
        while (write(v->efd, &one, sizeof one) < 0 && errno == EINTR)
            ;
    }
    pthread_mutex_unlock(&v->mu);
    return NULL;
}

acc_verifier *acc_verifier_new(unsigned max_pending)
{
    acc_verifier *v = sl_xcalloc(1, sizeof *v);
    v->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (v->efd < 0) {
        sl_free(v);
        return NULL;
    }
    v->todo_tail = &v->todo;
    v->done_tail = &v->done;
    v->max_pending = max_pending ? max_pending : 1;
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->work, NULL);
    /* Signals belong to the loop thread (signalfd): the worker blocks them all. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&v->thread, NULL, thread_main, v);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(v->efd);
        pthread_mutex_destroy(&v->mu);
        pthread_cond_destroy(&v->work);
        sl_free(v);
        errno = rc;
        return NULL;
    }
    return v;
}

static void free_list(acc_verify_job *j)
{
    while (j) {
        acc_verify_job *next = j->next;
        job_free(j);
        j = next;
    }
}

void acc_verifier_free(acc_verifier *v)
{
    if (!v)
        return;
    pthread_mutex_lock(&v->mu);
    v->quit = 1;
    pthread_cond_signal(&v->work);
    pthread_mutex_unlock(&v->mu);
    pthread_join(v->thread, NULL);
    free_list(v->todo);
    free_list(v->done);
    close(v->efd);
    pthread_mutex_destroy(&v->mu);
    pthread_cond_destroy(&v->work);
    sl_free(v);
}

int acc_verifier_fd(const acc_verifier *v)
{
    return v->efd;
}

acc_verify_job *acc_verifier_post(acc_verifier *v, int algo, const uint8_t *stored, size_t slen,
                                  const uint8_t *pw, size_t plen, acc_verify_cb cb, void *owner)
{
    if (v->n_alive >= v->max_pending)
        return NULL;
    acc_verify_job *j = sl_xcalloc(1, sizeof *j);
    j->algo = algo;
    j->stored = sl_xmalloc(slen ? slen : 1);
    memcpy(j->stored, stored, slen);
    j->slen = slen;
    j->pw = sl_xmalloc(plen ? plen : 1);
    memcpy(j->pw, pw, plen);
    j->plen = plen;
    j->cb = cb;
    j->owner = owner;
    v->n_alive++;
    pthread_mutex_lock(&v->mu);
    *v->todo_tail = j;
    v->todo_tail = &j->next;
    pthread_cond_signal(&v->work);
    pthread_mutex_unlock(&v->mu);
    return j;
}

void acc_verify_cancel(acc_verify_job *j)
{
    __atomic_store_n(&j->cancelled, 1, __ATOMIC_RELEASE);
}

void acc_verifier_run_done(acc_verifier *v)
{
    uint64_t n;
    while (read(v->efd, &n, sizeof n) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&v->mu);
    acc_verify_job *list = v->done;
    v->done = NULL;
    v->done_tail = &v->done;
    pthread_mutex_unlock(&v->mu);
    while (list) {
        acc_verify_job *j = list;
        list = j->next;
        /* A callback may cancel a job further down this list: the flag is read just before. */
        if (!__atomic_load_n(&j->cancelled, __ATOMIC_ACQUIRE) && j->cb)
            j->cb(j->owner, j->ok);
        v->n_alive--;
        job_free(j);
    }
}

unsigned acc_verifier_pending(const acc_verifier *v)
{
    return v->n_alive;
}
