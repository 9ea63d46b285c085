/* ctxtab.c - tables of the objects a user opens and names by id afterwards: MSMQ queue
 * handles (mq/handle.c, over HTTP and DCE/RPC) and MC-MQAC management objects. They are
 * MS-MQMP's context handles, and keep their rules:
 *
 *   - an id names an object of this run of the node only: it is 24 hex digits, the first 8
 *     the run's random id, the other 16 random, so an id is never guessed nor reused, and an
 *     id of an earlier run is told apart (MQ_ERROR_STALE_HANDLE) from one that never existed
 *     (MQ_ERROR_INVALID_HANDLE);
 *   - an object belongs to the user that opened it: another user's id is answered exactly as
 *     an unknown one, so ids leak nothing;
 *   - a user may hold at most cfg->handle_limit objects per table (MQ_ERROR_INSUFFICIENT_
 *     RESOURCES beyond), and an object unused for cfg->handle_idle_timeout seconds is closed by
 *     the node (the context-handle rundown), so abandoned ones cannot pile up.
 *
 * Entries embed mq_ctx_entry as their first member; the table's close callback ends the object
 * (closing its queue descriptor, ...) and frees it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/clock.h"
#include "core/hex.h"
#include "core/log.h"
#include "core/mem.h"
#include "mq/ctxtab.h"

static uint64_t random64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
        /* getrandom does not fail for 8 bytes once the pool is up; stay unique anyway */
        static uint64_t ctr;
        v = (sl_now_ms() << 20) ^ (++ctr * 0x9E3779B97F4A7C15ull) ^ (uint64_t)(uintptr_t)&v;
    }
    return v;
}

uint32_t mq_ctx_run_id(void)
{
    uint32_t r;
    do
        r = (uint32_t)random64();
    while (r == 0);
    return r;
}

void mq_ctxtab_init(mq_ctxtab *t, const char *what, uint32_t run_id, const node_config *cfg,
                    void (*close_fn)(void *ctx, mq_ctx_entry *e), void *close_ctx)
{
    memset(t, 0, sizeof *t);
    t->what = what;
    t->run_id = run_id;
    t->cfg = cfg;
    t->close = close_fn;
    t->close_ctx = close_ctx;
    t->by_id = sl_map_new();
    t->per_owner = sl_map_new();
}

void mq_ctxtab_free(mq_ctxtab *t)
{
    if (!t->by_id)
        return;
    size_t it = 0;
    void *v;
    while (sl_map_next(t->by_id, &it, NULL, NULL, &v)) {
        mq_ctx_entry *e = v;
        mq_ctx_remove(t, e); /* deleting the entry just returned is allowed while iterating */
        t->close(t->close_ctx, e);
    }
    sl_map_free(t->by_id);
    sl_map_free(t->per_owner);
    t->by_id = t->per_owner = NULL;
}

static uintptr_t owner_count(mq_ctxtab *t, const char *owner)
{
    return (uintptr_t)sl_map_get(t->per_owner, owner, strlen(owner));
}

static void set_owner_count(mq_ctxtab *t, const char *owner, uintptr_t n)
{
    if (n)
        sl_map_put(t->per_owner, owner, strlen(owner), (void *)n);
    else
        sl_map_del(t->per_owner, owner, strlen(owner));
}

sl_err mq_ctx_add(mq_ctxtab *t, mq_ctx_entry *e, const char *owner, char *err, size_t errlen)
{
    uint32_t limit = t->cfg->handle_limit;
    uintptr_t n = owner_count(t, owner);
    if (n >= limit) {
        snprintf(err, errlen,
                 "user '%s' has %u %ss open, the most allowed (handle_limit); close some", owner,
                 (unsigned)n, t->what);
        return SL_ERR_HANDLE_LIMIT;
    }
    do
        snprintf(e->id, sizeof e->id, "%08x%016llx", t->run_id, (unsigned long long)random64());
    while (sl_map_get(t->by_id, e->id, CTX_ID_LEN));
    e->owner = sl_xstrdup(owner);
    e->opened_wall_ms = sl_wall_ms();
    e->last_used_ms = sl_now_ms();
    e->seq = ++t->seq;
    sl_map_put(t->by_id, e->id, CTX_ID_LEN, e);
    set_owner_count(t, owner, n + 1);
    return SL_OK;
}

void mq_ctx_remove(mq_ctxtab *t, mq_ctx_entry *e)
{
    if (sl_map_get(t->by_id, e->id, CTX_ID_LEN) != e)
        return;
    sl_map_del(t->by_id, e->id, CTX_ID_LEN);
    uintptr_t n = owner_count(t, e->owner);
    set_owner_count(t, e->owner, n ? n - 1 : 0);
}

void mq_ctx_entry_free(mq_ctx_entry *e)
{
    sl_free(e->owner);
}

mq_ctx_entry *mq_ctx_find(mq_ctxtab *t, const char *id)
{
    return sl_map_get(t->by_id, id, CTX_ID_LEN);
}

sl_err mq_ctx_lookup(mq_ctxtab *t, const char *id, const char *user, mq_ctx_entry **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    size_t n = strlen(id);
    if (n != CTX_ID_LEN || !sl_is_hex(id, n)) {
        snprintf(err, errlen, "'%.40s%s' is not a %s id (24 hexadecimal digits)", id,
                 n > 40 ? "..." : "", t->what);
        return SL_ERR_INVALID_HANDLE;
    }
    char lower[CTX_ID_LEN + 1];
    for (size_t i = 0; i < n; i++)
        lower[i] = (char)(id[i] >= 'A' && id[i] <= 'F' ? id[i] - 'A' + 'a' : id[i]);
    lower[n] = 0;
    char run[9];
    snprintf(run, sizeof run, "%08x", t->run_id);
    if (memcmp(lower, run, 8) != 0) {
        snprintf(err, errlen, "%s %s belongs to an earlier run of this node (it was restarted)",
                 t->what, lower);
        return SL_ERR_STALE_HANDLE;
    }
    mq_ctx_entry *e = sl_map_get(t->by_id, lower, CTX_ID_LEN);
    /* another user's object is answered as an unknown one: ids tell nothing */
    if (!e || strcmp(e->owner, user) != 0) {
        snprintf(err, errlen,
                 "no open %s %s of user '%s' (closed, run down after %llu s idle, or "
                 "never opened)",
                 t->what, lower, user, (unsigned long long)t->cfg->handle_idle_timeout_s);
        return SL_ERR_INVALID_HANDLE;
    }
    e->last_used_ms = sl_now_ms();
    *out = e;
    return SL_OK;
}

static int by_seq(const void *a, const void *b)
{
    const mq_ctx_entry *x = *(mq_ctx_entry *const *)a, *y = *(mq_ctx_entry *const *)b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

mq_ctx_entry **mq_ctx_list(mq_ctxtab *t, const char *user, size_t *n)
{
    size_t cap = sl_map_count(t->by_id), k = 0, it = 0;
    mq_ctx_entry **v = sl_xmalloc((cap ? cap : 1) * sizeof *v);
    void *e;
    while (sl_map_next(t->by_id, &it, NULL, NULL, &e))
        if (!user || !strcmp(((mq_ctx_entry *)e)->owner, user))
            v[k++] = e;
    qsort(v, k, sizeof *v, by_seq);
    *n = k;
    return v;
}

uint64_t mq_ctx_rundown_period_ms(const node_config *cfg)
{
    uint64_t p = cfg->handle_idle_timeout_s * 1000 / 4;
    return p < 200 ? 200 : p > 30000 ? 30000 : p;
}

size_t mq_ctx_rundown(mq_ctxtab *t, uint64_t now)
{
    uint64_t idle_ms = t->cfg->handle_idle_timeout_s * 1000;
    size_t closed = 0, it = 0;
    void *v;
    while (sl_map_next(t->by_id, &it, NULL, NULL, &v)) {
        mq_ctx_entry *e = v;
        if (e->busy || now - e->last_used_ms < idle_ms)
            continue;
        sl_info("management: %s %s of user '%s' closed after %llu s unused (rundown)", t->what,
                e->id, e->owner, (unsigned long long)((now - e->last_used_ms) / 1000));
        mq_ctx_remove(t, e); /* deleting the entry just returned is allowed while iterating */
        t->close(t->close_ctx, e);
        closed++;
    }
    return closed;
}
