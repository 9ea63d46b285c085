/* ctxtab.h - tables of the objects a user opens and names by id afterwards (MSMQ queue
 * handles, MC-MQAC management objects): MS-MQMP's context handles, for every door.
 * The rules (ids, ownership, the per-user limit, the idle rundown) are ctxtab.c's.
 * Invariant: nothing of a door here; the table knows its objects only by their ctx_entry.
 */
#ifndef SL_MQ_CTXTAB_H
#define SL_MQ_CTXTAB_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/map.h"
#include "node/config.h"

#define CTX_ID_LEN 24 /* hex digits: 8 of the node's run id, 16 random */
typedef struct ctx_entry {
    char id[CTX_ID_LEN + 1];
    char *owner;             /* the user that opened it */
    uint64_t opened_wall_ms; /* shown */
    uint64_t last_used_ms;   /* sl_now_ms() of the last use, for the rundown */
    uint64_t seq;            /* open order, for listings */
    int busy;                /* another node's answer is awaited: not run down meanwhile */
} ctx_entry;

typedef struct ctxtab {
    const char *what;  /* "handle", "management object": for messages */
    sl_map *by_id;     /* id -> ctx_entry* (the embedding object) */
    sl_map *per_owner; /* user -> count, as a pointer-sized integer */
    uint64_t seq;
    uint32_t run_id;      /* the first 8 hex digits of every id (ctx_run_id) */
    const sl_config *cfg; /* handle_limit and handle_idle_timeout, read at each use */
    void (*close)(void *ctx, ctx_entry *e); /* ends and frees the embedding object */
    void *close_ctx;
} ctxtab;

/* A random id for this run of the node, never 0. */
uint32_t ctx_run_id(void);
void ctxtab_init(ctxtab *t, const char *what, uint32_t run_id, const sl_config *cfg,
                 void (*close_fn)(void *ctx, ctx_entry *e), void *close_ctx);
/* Close every object (node stop) and free the table. */
void ctxtab_free(ctxtab *t);
/* Register e (fields after the ctx_entry filled by the caller) for owner: gives it its id.
 * SL_ERR_HANDLE_LIMIT with err when owner already has cfg->handle_limit objects here. */
sl_err ctx_add(ctxtab *t, ctx_entry *e, const char *owner, char *err, size_t errlen);
/* Unregister e (the caller then closes it). */
void ctx_remove(ctxtab *t, ctx_entry *e);
void ctx_entry_free(ctx_entry *e);
/* The object id names (exactly CTX_ID_LEN lower-case hex digits), or NULL; no check. */
ctx_entry *ctx_find(ctxtab *t, const char *id);
/* The object id names for user, marked used now. SL_ERR_INVALID_HANDLE (malformed, unknown,
 * closed, or another user's) or SL_ERR_STALE_HANDLE (an earlier run's), with err. */
sl_err ctx_lookup(ctxtab *t, const char *id, const char *user, ctx_entry **out, char *err,
                  size_t errlen);
/* user's objects (every object when user is NULL) in open order; caller frees the array. */
ctx_entry **ctx_list(ctxtab *t, const char *user, size_t *n);
/* Close every object unused for cfg->handle_idle_timeout; returns how many. */
size_t ctx_rundown(ctxtab *t, uint64_t now);

#endif
