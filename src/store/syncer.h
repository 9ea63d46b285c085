/* syncer.h - the sync thread: runs the store's writes and fdatasyncs off the event loop
 * (DESIGN.md section 4: "disk syncs may run on a helper thread").
 *
 * One job at a time. The loop posts a job (a function and its argument), goes on with its
 * turn, and learns that the job is done from an eventfd it watches: readable once the job
 * has returned. The job must touch only what the loop handed it (a store batch); everything
 * it wrote is visible to the loop after st_syncer_take_done or st_syncer_wait (the mutex
 * orders it).
 */
#ifndef SL_STORE_SYNCER_H
#define SL_STORE_SYNCER_H

typedef struct st_syncer st_syncer;
typedef void (*st_job_fn)(void *arg);

/* Start the thread. NULL with errno set when it cannot be made. */
st_syncer *st_syncer_new(void);
/* Wait for a job in flight, then stop the thread and free everything. */
void st_syncer_free(st_syncer *s);
/* Readable when a posted job has finished (level: stays readable until it is taken). */
int st_syncer_fd(const st_syncer *s);
/* Run fn(arg) on the thread. Only when idle (no job posted that was not yet taken). */
void st_syncer_post(st_syncer *s, st_job_fn fn, void *arg);
/* 1 while a job is posted and not yet taken. */
int st_syncer_busy(const st_syncer *s);
/* 1 (and the job is taken: idle again) when the posted job has finished; 0 while it runs
 * or when none is posted. Never blocks. */
int st_syncer_take_done(st_syncer *s);
/* Block until the posted job has finished and take it (no-op when idle). */
void st_syncer_wait(st_syncer *s);

#endif
