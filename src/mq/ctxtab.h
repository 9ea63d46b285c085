/* ctxtab.h - tables of the objects a user opens and names by id afterwards (MSMQ queue
 * handles, MC-MQAC management objects): MS-MQMP's context handles, for every door.
 * The rules (ids, ownership, the per-user limit, the idle rundown) are ctxtab.c's.
 * Invariant: nothing of a door here; the table knows its objects only by their mq_ctx_entry.
 */
#ifndef SL_MQ_CTXTAB_H
#define SL_MQ_CTXTAB_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/map.h"
#include "node/config.h"

#define CTX_ID_LEN 24 /* hex digits: 8 of the node's run id, 16 random */
typedef struct mq_ctx_entry {
    char id[CTX_ID_LEN + 1];
    char *owner;             /* the user that opened it */
    uint64_t opened_wall_ms; /* shown */
    uint64_t last_used_ms;   /* sl_now_ms() of the last use, for the rundown */
    uint64_t seq;            /* open order, for listings */
    int busy;                /* another node's answer is awaited: not run down meanwhile */
} mq_ctx_entry;

typedef struct mq_ctxtab {
    const char *what;  /* "handle", "management object": for messages */
    sl_map *by_id;     /* id -> mq_ctx_entry* (the embedding object) */
    sl_map *per_owner; /* user -> count, as a pointer-sized integer */
    uint64_t seq;
    uint32_t run_id;        /* the first 8 hex digits of every id (mq_ctx_run_id) */
    const node_config *cfg; /* handle_limit and handle_idle_timeout, read at each use */
    void (*close)(void *ctx, mq_ctx_entry *e); /* ends and frees the embedding object */
    void *close_ctx;
} mq_ctxtab;

/* A random id for this run of the node, never 0. */
uint32_t mq_ctx_run_id(void);
void mq_ctxtab_init(mq_ctxtab *t, const char *what, uint32_t run_id, const node_config *cfg,
                    void (*close_fn)(void *ctx, mq_ctx_entry *e), void *close_ctx);
/* Close every object (node stop) and free the table. */
void mq_ctxtab_free(mq_ctxtab *t);
/* Register e (fields after the mq_ctx_entry filled by the caller) for owner: gives it its id.
 * SL_ERR_HANDLE_LIMIT with err when owner already has cfg->handle_limit objects here. */
sl_err mq_ctx_add(mq_ctxtab *t, mq_ctx_entry *e, const char *owner, char *err, size_t errlen);
/* Unregister e (the caller then closes it). */
void mq_ctx_remove(mq_ctxtab *t, mq_ctx_entry *e);
void mq_ctx_entry_free(mq_ctx_entry *e);
/* The object id names (exactly CTX_ID_LEN lower-case hex digits), or NULL; no check. */
mq_ctx_entry *mq_ctx_find(mq_ctxtab *t, const char *id);
/* The object id names for user, marked used now. SL_ERR_INVALID_HANDLE (malformed, unknown,
 * closed, or another user's) or SL_ERR_STALE_HANDLE (an earlier run's), with err. */
sl_err mq_ctx_lookup(mq_ctxtab *t, const char *id, const char *user, mq_ctx_entry **out, char *err,
                     size_t errlen);
/* user's objects (every object when user is NULL) in open order; caller frees the array. */
mq_ctx_entry **mq_ctx_list(mq_ctxtab *t, const char *user, size_t *n);
/* Close every object unused for cfg->handle_idle_timeout; returns how many. */
size_t mq_ctx_rundown(mq_ctxtab *t, uint64_t now);
/* How often to run the rundowns: idle objects are closed a little after handle_idle_timeout
 * (at most a quarter of it late, and never more than 30 s). */
uint64_t mq_ctx_rundown_period_ms(const node_config *cfg);

#endif
