/* verifier.h - slow password checks (Argon2id, ~20 ms of CPU each) on a thread of their own,
 * so that logins of such users, right or wrong, never hold up the event loop.
 *
 * The loop posts a job (a copy of the stored hash and of the password) with a callback and
 * an owner, goes on, and watches acc_verifier_fd: readable when jobs have finished;
 * acc_verifier_run_done then calls each finished job's callback on the loop thread, with
 * ok = 1 (the password matches) or 0. A job whose owner went away is cancelled
 * (acc_verify_cancel): its callback is never called. The hashes are fast ones' business
 * (SHA-256 and friends are checked inline, acc_login_password): acc_hash_is_slow says which.
 *
 * Bounded: at most max_pending jobs wait or run; acc_verifier_post refuses more (NULL), and
 * the door refuses that login at once, so a storm of wrong passwords costs one thread's CPU
 * and a bounded queue, never the loop. One thread: with two cores the other is the loop's.
 *
 * Threads: every function but the worker's own runs on the loop thread; the worker touches
 * only the job's copies. The password copy is wiped when the job is freed.
 */
#ifndef SL_ACCESS_VERIFIER_H
#define SL_ACCESS_VERIFIER_H

#include <stddef.h>
#include <stdint.h>

typedef struct acc_verifier acc_verifier;
typedef struct acc_verify_job acc_verify_job;
typedef void (*acc_verify_cb)(void *owner, int ok);

/* NULL with errno when the thread cannot be made. */
acc_verifier *acc_verifier_new(unsigned max_pending);
/* Stop the thread (after the job it is running) and free every job; callbacks of jobs not
 * yet delivered are not called: owners cancel theirs before (or are gone). */
void acc_verifier_free(acc_verifier *v);
int acc_verifier_fd(const acc_verifier *v);
/* Check pw against the stored hash of algo (acc_hash) on the thread; cb(owner, ok) later on
 * the loop thread. NULL when max_pending jobs are already waiting. */
acc_verify_job *acc_verifier_post(acc_verifier *v, int algo, const uint8_t *stored, size_t slen,
                                  const uint8_t *pw, size_t plen, acc_verify_cb cb, void *owner);
/* The owner lets go: the callback will not be called (the job is freed when it is done). */
void acc_verify_cancel(acc_verify_job *j);
/* On acc_verifier_fd readable: deliver every finished job. */
void acc_verifier_run_done(acc_verifier *v);
/* Jobs posted and not yet delivered or freed (cancelled ones count until they finish). */
unsigned acc_verifier_pending(const acc_verifier *v);

#endif
