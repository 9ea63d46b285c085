/* recover.c - the read side of durability: replay the meta and msgs logs and rebuild the
 * queue model, then rewrite the meta log as a fresh snapshot.
 *
 * Replay rules (in log order):
 *   - a definition deleted later is gone, and so are the bindings that named it;
 *   - a message position of an incarnation that no longer exists is dead (queue deleted:
 *     a redeclared queue gets a new incarnation and starts empty, even after a crash). That
 *     is judged at the END of replay, never while a record is applied: the meta log says
 *     which incarnations exist now, not which existed when a msgs record was written, and
 *     a message may have passed through one that is gone since (moved into q;s and back,
 *     out of a queue deleted later, out of an emptied journal). So every position is
 *     followed through every incarnation it visits, and the dead ones are left out when
 *     the model is rebuilt. (Memory: an entry per position of a deleted queue still in the
 *     log, 32 bytes, as for any live one.)
 *   - a purge kills every position its queue had so far (Available and Locked alike: what
 *     was PurgePending never comes back);
 *   - records marked R_IN_TX (a transaction's) apply only when the R_TX_END after them is
 *     there; the marking, not a begin record, says what belongs to the group, so a group
 *     whose first segment TIDY has deleted still replays right;
 *   - a position with a delivery mark comes back with redelivered = true;
 *   - a subqueue removed while its queue lives (it goes once empty and unused: qm's gc) but
 *     that still holds positions after replay comes back with them. Its removal (meta log)
 *     and the records that emptied it (msgs log) are written in one commit, meta first, so a
 *     kill between the two batches leaves the removal without what led to it; the msgs log
 *     is a prefix of what happened, so the positions it still has there are where they were
 *     (restore_emptied_subqueues). A subqueue is never removed with positions in it
 *     otherwise: it cannot be deleted alone, and one deleted with its queue, or its vhost,
 *     has no living queue to come back under;
 *   - a record that cancels or changes what an older one set up (a removal, a delivery mark, a
 *     move, a purge, a replacing enqueue, a transaction's end or abort) makes its segment
 *     depend on that older record's segment (st_log_depend), as the writer did: TIDY deletes a
 *     segment only when nothing it depends on is left, wherever it is.
 * Hooks are suspended while the model is rebuilt: nothing is written back during recovery,
 * except the meta snapshot at the end.
 */
#include "persist/persist_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/u64tab.h"
#include "access/access.h"
#include "amqp/method.h"
#include "qm/qm.h"

typedef struct def {
    uint8_t type; /* M_QUEUE or M_EXCHANGE */
    uint8_t *payload;
    size_t len;
} def;

/* A stored position seen in replay: 32 bytes, the size of the qm_paged entry it becomes, so
 * a queue's array of them is handed to the queue as its paged tail without a copy (the queue
 * packs it in place into 24-byte slots). Nothing per stored message is kept beyond it
 * (bounded recovery: 10 million stored messages take about 320 MB here, not 1.5 GB). */
typedef struct rent {
    uint64_t lookup;
    uint32_t moff, mseg, mlen; /* the message record; UNRESOLVED: moff:mseg hold its id */
    uint32_t eseg;             /* the enqueue record's segment */
    uint32_t body_len;
    uint16_t moves;   /* saturated at 65535, as paged entries keep it */
    uint8_t flags;    /* RF_* */
    uint8_t priority; /* the message's priority property (qm_paged.priority) */
} rent;
_Static_assert(sizeof(rent) == sizeof(qm_paged), "a queue's rents become its paged array");

enum {
    RF_REDELIVERED = 1,
    RF_XACT_CONT = 2,
    RF_HAS_TTL = 4,     /* the message has an expiration property */
    RF_DEAD = 8,        /* removed (a tombstone until the array is compacted) */
    RF_UNRESOLVED = 16, /* the message record was not near: found by a second pass */
    RF_XACT = 32,       /* EF_XACT: sent in a transaction (its dead letter goes to DEADXACT) */
    RF_WATCH = 64       /* EF_WATCH: qm_message.watch (kept across moves: it is the message's) */
};

/* A rent that came out of lookup-id order (a move into the queue), with its deadline. */
typedef struct stray {
    uint64_t lookup; /* the key: first */
    uint64_t expires;
    rent e;
} stray;

/* The positions of one incarnation seen so far: most come in lookup-id order and are appended
 * to v (found by binary search, removed as tombstones, compacted when half are dead); the
 * few that come out of order are in strays. Deadlines (wall-clock ms) are in exp, beside v,
 * only once one position has one. */
typedef struct qentries {
    rent *v;
    uint64_t *exp;
    size_t len, cap, dead;
    size_t hint;      /* where find_in_v found the last one (a run's next is beside it) */
    sl_u64tab strays; /* lookup -> stray */
    /* quorum queues: lookup -> the delivery count last recorded (R_QDELIVER, R_ENQ's
     * EF_DCOUNT); RF_REDELIVERED then says it was delivered after that (records.h) */
    sl_u64tab dcounts;
} qentries;

typedef struct dcent {
    uint64_t lookup;
    uint32_t count, pad;
} dcent;

static void dcount_put(qentries *qe, uint64_t lookup, uint32_t count)
{
    int created;
    if (count)
        ((dcent *)sl_u64tab_put(&qe->dcounts, lookup, &created))->count = count;
    else if (sl_u64tab_count(&qe->dcounts))
        sl_u64tab_del(&qe->dcounts, lookup, NULL);
}

static uint32_t dcount_of(const qentries *qe, uint64_t lookup)
{
    const dcent *d = sl_u64tab_count(&qe->dcounts) ? sl_u64tab_get(&qe->dcounts, lookup) : NULL;
    return d ? d->count : 0;
}

/* Recent message records by id: the enqueue record of a message almost always follows its
 * message record closely (same batch), so a small direct-mapped cache finds it; an enqueue
 * that does not find its message is marked UNRESOLVED and resolved by a second pass over the
 * log (journal copies, for instance, are enqueued long after their message was stored). */
#define MCACHE 8192
typedef struct mslot {
    uint64_t id; /* 0: empty (in the wanted table: its key) */
    uint32_t seg, off, len, body_len;
    uint8_t has_ttl;
    uint8_t priority;
    uint8_t found; /* wanted table: the second pass found it */
} mslot;

typedef struct pending_rec {
    uint8_t type;
    uint8_t *payload;
    size_t len;
    st_loc loc;
} pending_rec;

typedef struct rstate {
    persist *p;
    /* meta */
    sl_map *queues;    /* u64 incarnation -> def* */
    sl_map *gone_subs; /* u64 incarnation -> def*: subqueues removed (restore_emptied_...) */
    sl_map *exchanges; /* "vhost\0name" -> def* */
    sl_map *bindings;  /* canonical binding payload -> (void*)1 */
    /* msgs */
    mslot *mcache;     /* MCACHE recent message records */
    sl_map *entries;   /* u64 incarnation -> qentries* */
    size_t unresolved; /* positions marked RF_UNRESOLVED */
    sl_u64tab wanted;  /* second pass: message id -> mslot (the ids unresolved positions need) */
    pending_rec *tx;
    size_t tx_len, tx_cap;
    int in_tx;
    sl_map *tracks;   /* streams' tracked references, latest record each (persist/streams.c) */
    int fatal;        /* rebuilding found what stops recovery (err says what) */
    uint32_t *floors; /* by segment number: the oldest segment its records depend on (0: none) */
    size_t floors_cap;
    char *err;
    size_t errlen;
} rstate;

static def *def_new(uint8_t type, const uint8_t *payload, size_t len)
{
    def *d = sl_xmalloc(sizeof *d);
    d->type = type;
    d->payload = sl_xmalloc(len ? len : 1);
    memcpy(d->payload, payload, len);
    d->len = len;
    return d;
}

static void def_free(def *d)
{
    if (d) {
        sl_free(d->payload);
        sl_free(d);
    }
}

/* A queue definition's incarnation, parent incarnation (0: top level) and name. */
static void def_queue_names(const def *d, uint64_t *inc, uint64_t *parent, amqp_bytes *name)
{
    rec_reader r = {d->payload, d->payload + d->len, 0};
    *inc = rd_u64(&r);
    *parent = rd_u64(&r);
    rd_u8(&r);
    rd_s16(&r);
    *name = rd_s16(&r);
}

static void key2(char *out, size_t cap, amqp_bytes a, amqp_bytes b, size_t *len)
{
    size_t n = 0;
    if (a.len + b.len + 1 > cap) {
        *len = 0;
        return;
    }
    memcpy(out, a.p, a.len);
    n = a.len;
    out[n++] = 0;
    memcpy(out + n, b.p, b.len);
    *len = n + b.len;
}

/* Drop bindings whose source or destination (of the given kind) is vhost/name. */
static void drop_bindings_naming(rstate *s, amqp_bytes vhost, amqp_bytes name, int exchange)
{
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(s->bindings, &it, &k, &kl, &v)) {
        rec_reader r = {(const uint8_t *)k, (const uint8_t *)k + kl, 0};
        uint8_t kind = rd_u8(&r);
        amqp_bytes vh = rd_s16(&r), src = rd_s16(&r), dest = rd_s16(&r);
        if (r.bad || !amqp_bytes_equal(vh, vhost))
            continue;
        int hit = (exchange && amqp_bytes_equal(src, name)) ||
                  (kind == (exchange ? 1 : 0) && amqp_bytes_equal(dest, name));
        if (hit)
            sl_map_del(s->bindings, k, kl);
    }
}

/* A vhost deleted: every queue, exchange and binding of it recorded so far is gone. */
static void drop_vhost_defs(rstate *s, amqp_bytes vhost)
{
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(s->queues, &it, &k, &kl, &v)) {
        def *d = v;
        rec_reader r = {d->payload, d->payload + d->len, 0};
        rd_u64(&r);
        rd_u64(&r);
        rd_u8(&r);
        if (amqp_bytes_equal(rd_s16(&r), vhost) && !r.bad) {
            sl_map_del(s->queues, k, kl);
            def_free(d);
        }
    }
    it = 0;
    while (sl_map_next(s->exchanges, &it, &k, &kl, &v)) {
        def *d = v;
        rec_reader r = {d->payload, d->payload + d->len, 0};
        rd_u8(&r);
        rd_u8(&r);
        if (amqp_bytes_equal(rd_s16(&r), vhost) && !r.bad) {
            sl_map_del(s->exchanges, k, kl);
            def_free(d);
        }
    }
    it = 0;
    while (sl_map_next(s->bindings, &it, &k, &kl, &v)) {
        rec_reader r = {(const uint8_t *)k, (const uint8_t *)k + kl, 0};
        rd_u8(&r);
        if (amqp_bytes_equal(rd_s16(&r), vhost) && !r.bad)
            sl_map_del(s->bindings, k, kl);
    }
}

/* An id the node could never have handed out: ids count up from 1 and the high-water mark kept
 * is the id + 1, so UINT64_MAX would wrap it to 0 (and every id would be handed out again). A
 * record naming one is corrupt. */
#define ID_BAD(x) ((x) == UINT64_MAX)

/* Raise the high-water marks: ids seen anywhere in the logs are never handed out again. */
static void see_ids(rstate *s, uint64_t next_inc, uint64_t next_lookup, uint64_t next_msg)
{
    qm_node *n = s->p->node;
    if (n->next_incarnation < next_inc)
        n->next_incarnation = next_inc;
    if (n->next_lookup_id < next_lookup)
        n->next_lookup_id = next_lookup;
    if (s->p->next_msg_id < next_msg)
        s->p->next_msg_id = next_msg;
}

static int meta_replay(void *ctx, uint64_t seq, uint8_t type, const uint8_t *payload, size_t len,
                       st_loc loc)
{
    rstate *s = ctx;
    rec_reader r = {payload, payload + len, 0};
    char key[600];
    size_t kl;
    switch (type) {
    case M_QUEUE: {
        uint64_t inc = rd_u64(&r);
        if (r.bad || ID_BAD(inc))
            break;
        see_ids(s, inc + 1, 0, 0);
        def_free(sl_map_put(s->queues, &inc, 8, def_new(type, payload, len)));
        return 0;
    }
    case M_QUEUE_DEL: {
        uint64_t inc = rd_u64(&r);
        if (r.bad || ID_BAD(inc))
            break;
        see_ids(s, inc + 1, 0, 0);
        def *d = sl_map_del(s->queues, &inc, 8);
        if (d) {
            rec_reader dr = {d->payload, d->payload + d->len, 0};
            rd_u64(&dr);
            uint64_t parent = rd_u64(&dr);
            rd_u8(&dr);
            amqp_bytes vh = rd_s16(&dr), name = rd_s16(&dr);
            if (!parent) {
                drop_bindings_naming(s, vh, name, 0);
                def_free(d);
            } else {
                def_free(sl_map_put(s->gone_subs, &inc, 8, d)); /* kept for the end */
            }
        }
        return 0;
    }
    case M_EXCHANGE: {
        rd_u8(&r);
        rd_u8(&r);
        amqp_bytes vh = rd_s16(&r), name = rd_s16(&r);
        if (r.bad)
            break;
        key2(key, sizeof key, vh, name, &kl);
        def_free(sl_map_put(s->exchanges, key, kl, def_new(type, payload, len)));
        return 0;
    }
    case M_EXCHANGE_DEL: {
        amqp_bytes vh = rd_s16(&r), name = rd_s16(&r);
        if (r.bad)
            break;
        key2(key, sizeof key, vh, name, &kl);
        def_free(sl_map_del(s->exchanges, key, kl));
        drop_bindings_naming(s, vh, name, 1);
        return 0;
    }
    case M_BIND:
        sl_map_put(s->bindings, payload, len, (void *)1);
        return 0;
    case M_NODE: {
        uint64_t inc = rd_u64(&r), lookup = rd_u64(&r), msg = rd_u64(&r);
        if (r.bad)
            break;
        see_ids(s, inc, lookup, msg);
        return 0;
    }
    case M_UNBIND:
        sl_map_del(s->bindings, payload, len);
        return 0;
    case M_NODE_ID:
        if (len != 16)
            break;
        memcpy(s->p->node_id, payload, 16);
        s->p->have_node_id = 1;
        return 0;
    case M_ONLINE: {
        uint8_t on = rd_u8(&r);
        if (r.bad)
            break;
        s->p->online = on != 0;
        return 0;
    }
    case M_OUTQ: {
        uint64_t inc = rd_u64(&r);
        uint8_t flags = rd_u8(&r), foreign = rd_u8(&r);
        if (r.bad)
            break;
        uintptr_t v = (uintptr_t)flags | (uintptr_t)foreign << 8 | (uintptr_t)1 << 16;
        sl_map_put(s->p->outq, &inc, 8, (void *)v);
        return 0;
    }
    case M_LOOKUP_TIME: {
        uint64_t next = rd_u64(&r), wall = rd_u64(&r);
        if (r.bad)
            break;
        persist_ltime_restore(s->p, next, wall);
        return 0;
    }
    case M_OUTQ_SENT: {
        uint64_t inc = rd_u64(&r), sent = rd_u64(&r);
        if (r.bad)
            break;
        sl_map_put(s->p->outq_sent, &inc, 8, (void *)(uintptr_t)sent);
        return 0;
    }
    case M_LOOKUP_HWM: {
        uint64_t hwm = rd_u64(&r);
        if (r.bad)
            break;
        see_ids(s, 0, hwm, 0);
        if (s->p->lookup_hwm < hwm)
            s->p->lookup_hwm = hwm;
        return 0;
    }
    default:
        if (type < ACC_REC_FIRST || type > ACC_REC_LAST)
            break;
        if (type == ACC_REC_VHOST_DEL) {
            amqp_bytes vh = rd_s16(&r);
            if (r.bad)
                break;
            drop_vhost_defs(s, vh);
        }
        if (!s->p->opt.acc || acc_replay(s->p->opt.acc, type, payload, len) == 0)
            return 0;
        break;
    }
    snprintf(s->err, s->errlen, "%s/meta: record %llu: unknown or malformed record type %u",
             s->p->dir, (unsigned long long)seq, type);
    (void)loc;
    return 1;
}

/* ---- msgs ---- */

/* The positions of incarnation inc seen so far, whether or not it still exists: see the
 * replay rules at the top. */
static qentries *entries_of(rstate *s, uint64_t inc, int create)
{
    qentries *qe = sl_map_get(s->entries, &inc, 8);
    if (!qe && create) {
        qe = sl_xcalloc(1, sizeof *qe);
        sl_u64tab_init(&qe->strays, sizeof(stray));
        sl_u64tab_init(&qe->dcounts, sizeof(dcent));
        sl_map_put(s->entries, &inc, 8, qe);
    }
    return qe;
}

/* The records of segment seg depend on the older segment target (applied once the log is
 * open: st_log_depend). */
static void depend(rstate *s, uint32_t seg, uint32_t target)
{
    if (!target || target >= seg)
        return;
    if (seg >= s->floors_cap) {
        size_t cap = s->floors_cap ? s->floors_cap : 64;
        while (cap <= seg)
            cap *= 2;
        s->floors = sl_xrealloc(s->floors, cap * sizeof *s->floors);
        memset(s->floors + s->floors_cap, 0, (cap - s->floors_cap) * sizeof *s->floors);
        s->floors_cap = cap;
    }
    if (!s->floors[seg] || target < s->floors[seg])
        s->floors[seg] = target;
}

static uint64_t rent_exp(const qentries *qe, size_t i)
{
    return qe->exp ? qe->exp[i] : 0;
}

/* Index of the live rent with this lookup id in v, or -1. A run's records (deliveries and
 * acks of consecutive messages: R_DELIVER_RUN, R_DEQ_RUN) look up consecutive ids, so the
 * last one found and the one after it are tried before the binary search: with a million
 * positions, the search's cache misses were a fifth of a recovery. v holds each id once. */
static long find_in_v(qentries *qe, uint64_t lookup)
{
    for (size_t i = qe->hint; i < qe->hint + 2 && i < qe->len; i++)
        if (qe->v[i].lookup == lookup) {
            qe->hint = i;
            return qe->v[i].flags & RF_DEAD ? -1 : (long)i;
        }
    size_t lo = 0, hi = qe->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (qe->v[mid].lookup < lookup)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < qe->len && qe->v[lo].lookup == lookup) {
        qe->hint = lo;
        return qe->v[lo].flags & RF_DEAD ? -1 : (long)lo;
    }
    return -1;
}

/* Drop the tombstones once half of v is dead: amortized O(1) a removal. */
static void maybe_compact(qentries *qe)
{
    if (qe->dead < 1024 || qe->dead * 2 < qe->len)
        return;
    size_t j = 0;
    for (size_t i = 0; i < qe->len; i++) {
        if (qe->v[i].flags & RF_DEAD)
            continue;
        if (qe->exp)
            qe->exp[j] = qe->exp[i];
        qe->v[j++] = qe->v[i];
    }
    qe->len = j;
    qe->dead = 0;
    qe->hint = 0;
}

/* Returns the segment of the enqueue record a replaced position had (0: none replaced). */
static uint32_t entries_put(qentries *qe, const rent *e, uint64_t expires)
{
    long at;
    if (qe->len && e->lookup <= qe->v[qe->len - 1].lookup) {
        if ((at = find_in_v(qe, e->lookup)) >= 0) { /* the same position again: the later wins */
            uint32_t was = qe->v[at].eseg;
            qe->v[at] = *e;
            if (qe->exp || expires) {
                if (!qe->exp)
                    qe->exp = sl_xcalloc(qe->cap, sizeof *qe->exp);
                qe->exp[at] = expires;
            }
            return was;
        }
        int created;
        stray *st = sl_u64tab_put(&qe->strays, e->lookup, &created);
        uint32_t was = created ? 0 : st->e.eseg;
        st->expires = expires;
        st->e = *e;
        return was;
    }
    uint32_t was = 0;
    if (sl_u64tab_count(&qe->strays)) {
        stray old;
        if (sl_u64tab_del(&qe->strays, e->lookup, &old)) /* the later record wins */
            was = old.e.eseg;
    }
    if (qe->len == qe->cap) {
        qe->cap = qe->cap ? qe->cap + qe->cap / 2 : 64; /* x1.5: a big array's slack is small */
        qe->v = sl_xrealloc(qe->v, qe->cap * sizeof *qe->v);
        if (qe->exp)
            qe->exp = sl_xrealloc(qe->exp, qe->cap * sizeof *qe->exp);
    }
    if (expires && !qe->exp)
        qe->exp = sl_xcalloc(qe->cap, sizeof *qe->exp);
    if (qe->exp)
        qe->exp[qe->len] = expires;
    qe->v[qe->len++] = *e;
    return was;
}

/* Find a live position: a pointer to it (and its deadline slot in *exp), or NULL. */
static rent *entries_find(qentries *qe, uint64_t lookup, uint64_t **exp)
{
    long at = find_in_v(qe, lookup);
    if (at >= 0) {
        if (exp)
            *exp = qe->exp ? &qe->exp[at] : NULL;
        return &qe->v[at];
    }
    stray *st = sl_u64tab_count(&qe->strays) ? sl_u64tab_get(&qe->strays, lookup) : NULL;
    if (!st)
        return NULL;
    if (exp)
        *exp = &st->expires;
    return &st->e;
}

/* Remove a live position; 1 (with it and its deadline) if it was there. */
static int entries_del(qentries *qe, uint64_t lookup, rent *out, uint64_t *expires)
{
    long at = find_in_v(qe, lookup);
    if (at >= 0) {
        if (out)
            *out = qe->v[at];
        if (expires)
            *expires = rent_exp(qe, (size_t)at);
        qe->v[at].flags |= RF_DEAD;
        qe->dead++;
        maybe_compact(qe);
        return 1;
    }
    stray st;
    if (sl_u64tab_count(&qe->strays) && sl_u64tab_del(&qe->strays, lookup, &st)) {
        if (out)
            *out = st.e;
        if (expires)
            *expires = st.expires;
        return 1;
    }
    return 0;
}

/* Every position goes (a purge): returns the oldest segment of their enqueue records (0:
 * none). */
static uint32_t clear_entries(qentries *qe)
{
    uint32_t oldest = 0;
    for (size_t i = 0; i < qe->len; i++)
        if (!(qe->v[i].flags & RF_DEAD) && (!oldest || qe->v[i].eseg < oldest))
            oldest = qe->v[i].eseg;
    size_t it = 0;
    stray *st;
    while ((st = sl_u64tab_next(&qe->strays, &it)))
        if (!oldest || st->e.eseg < oldest)
            oldest = st->e.eseg;
    qe->len = qe->dead = qe->hint = 0;
    sl_u64tab_free(&qe->strays);
    sl_u64tab_init(&qe->strays, sizeof(stray));
    sl_u64tab_free(&qe->dcounts);
    sl_u64tab_init(&qe->dcounts, sizeof(dcent));
    return oldest;
}

static void entries_free(qentries *qe)
{
    sl_free(qe->v);
    sl_free(qe->exp);
    sl_u64tab_free(&qe->strays);
    sl_u64tab_free(&qe->dcounts);
    sl_free(qe);
}

/* The properties' flags say whether the message has an expiration, without decoding them. */
static int props_have_expiration(amqp_bytes props)
{
    return props.len >= 2 && (sl_get_u16(props.p) & AMQP_P_EXPIRATION);
}

/* The priority property (0 when absent): a position's level in a priority queue. Decoded only
 * when the flags say it is there. */
static uint8_t props_priority(amqp_bytes props)
{
    amqp_basic_props bp;
    if (props.len < 2 || !(sl_get_u16(props.p) & AMQP_P_PRIORITY) ||
        amqp_props_decode(props.p, props.len, &bp) < 0)
        return 0;
    return (bp.flags & AMQP_P_PRIORITY) ? bp.priority : 0;
}

static int apply_msg_record(rstate *s, uint64_t seq, uint8_t type, const uint8_t *payload,
                            size_t len, st_loc loc)
{
    rec_reader r = {payload, payload + len, 0};
    switch (type) {
    case R_MSG: {
        uint64_t id = rd_u64(&r);
        rd_s16(&r);
        rd_s16(&r);
        amqp_bytes props = rd_b32(&r);
        amqp_bytes body = rd_rest(&r);
        if (r.bad || ID_BAD(id))
            break;
        mslot *m = &s->mcache[id & (MCACHE - 1)];
        m->id = id;
        m->seg = loc.segment;
        m->off = (uint32_t)loc.offset;
        m->len = (uint32_t)len;
        m->body_len = body.len > UINT32_MAX ? UINT32_MAX : (uint32_t)body.len;
        m->has_ttl = (uint8_t)props_have_expiration(props);
        m->priority = props_priority(props);
        if (id >= s->p->next_msg_id)
            s->p->next_msg_id = id + 1;
        return 0;
    }
    case R_ENQ: {
        uint64_t inc = rd_u64(&r), lookup = rd_u64(&r), msg = rd_u64(&r);
        uint32_t moves = rd_u32(&r);
        uint8_t flags = rd_u8(&r);
        uint64_t expires = flags & EF_EXPIRES ? rd_u64(&r) : 0;
        uint32_t dcount = flags & EF_DCOUNT ? rd_u32(&r) : 0;
        if (r.bad || ID_BAD(inc) || ID_BAD(lookup) || ID_BAD(msg))
            break;
        see_ids(s, inc + 1, lookup + 1, msg + 1);
        rent e = {.lookup = lookup,
                  .eseg = loc.segment,
                  .moves = (uint16_t)(moves > 65535 ? 65535 : moves),
                  .flags = (uint8_t)(((flags & EF_REDELIVERED) ? RF_REDELIVERED : 0) |
                                     ((flags & EF_XACT_CONT) ? RF_XACT_CONT : 0) |
                                     ((flags & EF_XACT) ? RF_XACT : 0) |
                                     ((flags & EF_WATCH) ? RF_WATCH : 0))};
        const mslot *m = &s->mcache[msg & (MCACHE - 1)];
        if (m->id == msg) {
            e.moff = m->off;
            e.mseg = m->seg;
            e.mlen = m->len;
            e.body_len = m->body_len;
            e.priority = m->priority;
            if (m->has_ttl)
                e.flags |= RF_HAS_TTL;
        } else {
            /* not near: the second pass finds it (or finds it gone) */
            e.flags |= RF_UNRESOLVED;
            e.moff = (uint32_t)msg;
            e.mseg = (uint32_t)(msg >> 32);
            s->unresolved++;
        }
        /* the same position again (TIDY's copy of it): the later record wins, and depends on
         * the one it replaces */
        qentries *eq = entries_of(s, inc, 1);
        depend(s, loc.segment, entries_put(eq, &e, expires));
        dcount_put(eq, lookup, dcount); /* TIDY's copy says it all */
        return 0;
    }
    case R_QDELIVER: {
        uint64_t inc = rd_u64(&r), lookup = rd_u64(&r);
        uint32_t dcount = rd_u32(&r);
        if (r.bad)
            break;
        qentries *qe = entries_of(s, inc, 0);
        rent *e = qe ? entries_find(qe, lookup, NULL) : NULL;
        if (e) {
            depend(s, loc.segment, e->eseg);
            e->flags |= RF_REDELIVERED;
            dcount_put(qe, lookup, dcount);
        }
        return 0;
    }
    case R_DEQ:
    case R_DELIVER:
    case R_DEQ_RUN:
    case R_DELIVER_RUN: {
        int run = type == R_DEQ_RUN || type == R_DELIVER_RUN;
        uint64_t inc = rd_u64(&r), first = rd_u64(&r);
        uint32_t count = run ? rd_u32(&r) : 1;
        if (r.bad || (run && (count < 2 || count > R_RUN_MAX || first + count < first)))
            break;
        qentries *qe = entries_of(s, inc, 0);
        if (!qe)
            return 0;
        uint64_t end = first + count;
        if (run && !sl_u64tab_count(&qe->strays)) {
            /* only the part of the run where the queue has positions (v is sorted) */
            if (!qe->len)
                return 0;
            if (first < qe->v[0].lookup)
                first = qe->v[0].lookup;
            if (end > qe->v[qe->len - 1].lookup + 1)
                end = qe->v[qe->len - 1].lookup + 1;
        }
        for (uint64_t lookup = first; lookup < end; lookup++) {
            if (type == R_DEQ || type == R_DEQ_RUN) {
                rent gone;
                if (entries_del(qe, lookup, &gone, NULL)) {
                    depend(s, loc.segment, gone.eseg);
                    dcount_put(qe, lookup, 0);
                }
            } else {
                rent *e = entries_find(qe, lookup, NULL);
                if (e) {
                    depend(s, loc.segment, e->eseg);
                    e->flags |= RF_REDELIVERED;
                }
            }
        }
        return 0;
    }
    case R_PURGE: {
        uint64_t inc = rd_u64(&r);
        if (r.bad)
            break;
        qentries *qe = entries_of(s, inc, 0);
        if (qe)
            depend(s, loc.segment, clear_entries(qe));
        return 0;
    }
    case R_MOVE:
    case R_MOVE_TTL: {
        uint64_t src = rd_u64(&r), lookup = rd_u64(&r), dest = rd_u64(&r);
        uint32_t moves = rd_u32(&r);
        uint8_t flags = type == R_MOVE_TTL ? rd_u8(&r) : 0;
        uint64_t expires = flags & EF_EXPIRES ? rd_u64(&r) : 0;
        if (r.bad || ID_BAD(src) || ID_BAD(dest) || ID_BAD(lookup))
            break;
        see_ids(s, (src > dest ? src : dest) + 1, lookup + 1, 0);
        qentries *qs = entries_of(s, src, 0);
        rent moved;
        uint64_t old_expires;
        if (!qs || !entries_del(qs, lookup, &moved, &old_expires))
            return 0;
        dcount_put(qs, lookup, 0); /* a quorum queue's count stays behind (quorum.c) */
        depend(s, loc.segment, moved.eseg);
        moved.moves = (uint16_t)(moves > 65535 ? 65535 : moves);
        moved.flags &= (uint8_t) ~(RF_XACT_CONT | RF_XACT);
        if (type != R_MOVE_TTL)
            expires = old_expires; /* R_MOVE_TTL: the target's TTL rule gave it a new one */
        depend(s, loc.segment, entries_put(entries_of(s, dest, 1), &moved, expires));
        return 0;
    }
    case R_EOD_IN: {
        if (len < 16)
            break;
        const uint8_t *sender = payload;
        r.p += 16;
        uint64_t seq_id = rd_u64(&r), seq_no = rd_u64(&r), access = rd_u64(&r);
        uint32_t rejects = rd_u32(&r);
        amqp_bytes name = rd_s16(&r), dest = rd_s16(&r);
        if (r.bad)
            break;
        persist_eod_in_restore(s->p, sender, seq_id, seq_no, access, rejects, name, dest,
                               loc.segment);
        return 0;
    }
    case R_STREAM_TRACK:
        if (persist_streams_stash_track(s->p, &s->tracks, payload, len, loc.segment) < 0)
            break;
        return 0;
    }
    snprintf(s->err, s->errlen, "%s/msgs: record %llu: unknown or malformed record type %u",
             s->p->dir, (unsigned long long)seq, type);
    return 1;
}

static void tx_clear(rstate *s)
{
    for (size_t i = 0; i < s->tx_len; i++)
        sl_free(s->tx[i].payload);
    s->tx_len = 0;
    s->in_tx = 0;
}

static int msgs_replay(void *ctx, uint64_t seq, uint8_t type, const uint8_t *payload, size_t len,
                       st_loc loc)
{
    rstate *s = ctx;
    uint8_t base = type & (uint8_t)~R_IN_TX;
    int tx_control = base == R_TX_BEGIN || base == R_TX_END || base == R_TX_ABORT;
    int known = (base >= R_MSG && base <= R_MOVE_TTL) || base == R_EOD_IN ||
                base == R_STREAM_TRACK || base == R_DEQ_RUN || base == R_DELIVER_RUN ||
                base == R_QDELIVER;
    if (!known || (type & R_IN_TX && tx_control)) {
        snprintf(s->err, s->errlen, "%s/msgs: record %llu: unknown record type %u", s->p->dir,
                 (unsigned long long)seq, type);
        return 1;
    }
    /* An end or abort keeps the group's records from joining another group: it must outlive
     * them on disk. */
    if (tx_control && s->tx_len)
        depend(s, loc.segment, s->tx[0].loc.segment);
    if (type == R_TX_ABORT || type == R_TX_BEGIN) {
        tx_clear(s); /* marked records before it belong to a transaction that never ended */
        return 0;
    }
    if (type == R_TX_END) {
        int rc = 0;
        for (size_t i = 0; i < s->tx_len && !rc; i++)
            rc = apply_msg_record(s, seq, s->tx[i].type, s->tx[i].payload, s->tx[i].len,
                                  s->tx[i].loc);
        tx_clear(s);
        return rc;
    }
    if (type & R_IN_TX) {
        if (s->tx_len == s->tx_cap) {
            s->tx_cap = s->tx_cap ? s->tx_cap * 2 : 16;
            s->tx = sl_xrealloc(s->tx, s->tx_cap * sizeof *s->tx);
        }
        pending_rec *pr = &s->tx[s->tx_len++];
        pr->type = base;
        pr->payload = sl_xmalloc(len ? len : 1);
        memcpy(pr->payload, payload, len);
        pr->len = len;
        pr->loc = loc;
        s->in_tx = 1;
        return 0;
    }
    /* Message records apply at once, in a transaction too: unused ones are dropped. */
    return apply_msg_record(s, seq, type, payload, len, loc);
}

/* ---- rebuilding the model ---- */

static qm_vhost *vhost_of(persist *p, amqp_bytes name)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%.*s", (int)name.len, (const char *)name.p);
    return qm_vhost_create(p->node, buf);
}

static void rebuild_exchanges(rstate *s)
{
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(s->exchanges, &it, &k, &kl, &v)) {
        def *d = v;
        rec_reader r = {d->payload, d->payload + d->len, 0};
        uint8_t type = rd_u8(&r), flags = rd_u8(&r);
        amqp_bytes vh = rd_s16(&r), name = rd_s16(&r), args = rd_b32(&r);
        qm_exchange_decl decl = {
            .name = (const char *)name.p,
            .name_len = name.len,
            .type = type,
            .durable = (flags & QF_DURABLE) != 0,
            .auto_delete = (flags & QF_AUTO_DELETE) != 0,
            .internal = (flags & QF_INTERNAL) != 0,
            .arguments = args,
        };
        qm_exchange *x;
        char err[256];
        if (qm_exchange_declare(vhost_of(s->p, vh), &decl, &x, err, sizeof err) != SL_OK)
            sl_warn("store: exchange '%.*s' not restored: %s", (int)name.len, (const char *)name.p,
                    err);
    }
}

static size_t live_entries(const qentries *qe)
{
    return qe ? qe->len - qe->dead + sl_u64tab_count(&qe->strays) : 0;
}

/* A subqueue whose removal is on disk but not every record that emptied it (the replay rule
 * at the top): it is defined again, with what the msgs log still has in it. A later
 * subqueue of the same name (made again in the same commit, after the removal) cannot hold
 * anything then, since the records that filled it came after the missing ones: it gives
 * way. */
static void restore_emptied_subqueues(rstate *s)
{
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(s->gone_subs, &it, &k, &kl, &v)) {
        def *d = v;
        uint64_t inc, parent;
        amqp_bytes name;
        def_queue_names(d, &inc, &parent, &name);
        size_t n = live_entries(entries_of(s, inc, 0));
        def *pd = n ? sl_map_get(s->queues, &parent, 8) : NULL;
        if (!pd)
            continue;
        uint64_t pinc, pparent;
        amqp_bytes pname;
        def_queue_names(pd, &pinc, &pparent, &pname);
        uint64_t twin = 0;
        size_t qit = 0;
        const char *qk;
        size_t qkl;
        void *qv;
        while (!twin && sl_map_next(s->queues, &qit, &qk, &qkl, &qv)) {
            uint64_t i2, p2;
            amqp_bytes n2;
            def_queue_names(qv, &i2, &p2, &n2);
            if (p2 == parent && n2.len == name.len && !memcmp(n2.p, name.p, name.len))
                twin = i2;
        }
        if (twin && live_entries(entries_of(s, twin, 0))) {
            sl_warn("%s/meta: subqueue '%.*s;%.*s' (incarnation %llu) was removed with %zu "
                    "stored message(s) in it and made again (incarnation %llu) with messages "
                    "too: the older one's are left out",
                    s->p->dir, (int)pname.len, (const char *)pname.p, (int)name.len,
                    (const char *)name.p, (unsigned long long)inc, n, (unsigned long long)twin);
            continue;
        }
        if (twin)
            def_free(sl_map_del(s->queues, &twin, 8));
        sl_map_del(s->gone_subs, k, kl); /* the entry just returned: allowed (map.h) */
        def_free(sl_map_put(s->queues, &inc, 8, d));
        sl_info("store: subqueue '%.*s;%.*s' (incarnation %llu) restored with %zu message(s): "
                "its removal reached the disk before the records that emptied it%s",
                (int)pname.len, (const char *)pname.p, (int)name.len, (const char *)name.p,
                (unsigned long long)inc, n, twin ? " (the one made again after it is empty)" : "");
    }
}

/* Top-level queues first (pass 0), then subqueues (pass 1). */
static void rebuild_queues(rstate *s, int pass)
{
    persist *p = s->p;
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(s->queues, &it, &k, &kl, &v)) {
        def *d = v;
        rec_reader r = {d->payload, d->payload + d->len, 0};
        uint64_t inc = rd_u64(&r), parent = rd_u64(&r);
        uint8_t flags = rd_u8(&r);
        amqp_bytes vh = rd_s16(&r), name = rd_s16(&r), args = rd_b32(&r);
        if ((parent != 0) != pass)
            continue;
        qm_vhost *vhost = vhost_of(p, vh);
        qm_queue *q = NULL;
        if (!parent) {
            q = qm_queue_find(vhost, (const char *)name.p, name.len);
            if (q && q->is_system) {
                q->incarnation = inc; /* system queues exist from the start: keep their id */
            } else {
                qm_queue_decl decl = {
                    .name = (const char *)name.p,
                    .name_len = name.len,
                    .durable = (flags & QF_DURABLE) != 0,
                    .auto_delete = (flags & QF_AUTO_DELETE) != 0,
                    .arguments = args,
                    .incarnation = inc,
                };
                char err[320];
                if (qm_queue_declare(vhost, &decl, &q, NULL, err, sizeof err) != SL_OK) {
                    /* A stream whose log does not open holds confirmed messages that would go
                     * with it (and a stream declared again would start over at offset 0):
                     * recovery stops, naming the file and offset, as for the logs. */
                    if (qm_queue_args_stream(args) && !s->fatal) {
                        snprintf(s->err, s->errlen, "queue '%.*s' in vhost '%.*s': %s",
                                 (int)name.len, (const char *)name.p, (int)vh.len,
                                 (const char *)vh.p, err);
                        s->fatal = 1;
                    }
                    sl_warn("store: queue '%.*s' not restored: %s", (int)name.len,
                            (const char *)name.p, err);
                    continue;
                }
            }
        } else {
            def *pd = sl_map_get(s->queues, &parent, 8);
            if (!pd)
                continue;
            rec_reader pr = {pd->payload, pd->payload + pd->len, 0};
            rd_u64(&pr);
            rd_u64(&pr);
            rd_u8(&pr);
            rd_s16(&pr);
            amqp_bytes pname = rd_s16(&pr);
            qm_queue *top = qm_queue_find(vhost, (const char *)pname.p, pname.len);
            if (!top)
                continue;
            q = qm_queue_subqueue(top, (const char *)name.p, name.len, 1);
            if (!q)
                continue;
            q->incarnation = inc;
        }
        if (p->node->next_incarnation <= inc)
            p->node->next_incarnation = inc + 1;
        p->recovered_queues++;
    }
}

static void rebuild_bindings(rstate *s)
{
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(s->bindings, &it, &k, &kl, &v)) {
        rec_reader r = {(const uint8_t *)k, (const uint8_t *)k + kl, 0};
        uint8_t kind = rd_u8(&r);
        amqp_bytes vh = rd_s16(&r), src = rd_s16(&r), dest = rd_s16(&r), key = rd_s16(&r);
        amqp_bytes args = rd_b32(&r);
        if (r.bad)
            continue;
        qm_vhost *vhost = vhost_of(s->p, vh);
        qm_exchange *x = qm_exchange_find(vhost, (const char *)src.p, src.len);
        if (!x)
            continue;
        char err[256];
        if (kind == 0) {
            qm_queue *q = qm_queue_find(vhost, (const char *)dest.p, dest.len);
            if (q)
                qm_bind_queue(x, q, key, args, err, sizeof err);
        } else {
            qm_exchange *dx = qm_exchange_find(vhost, (const char *)dest.p, dest.len);
            if (dx)
                qm_bind_exchange(x, dx, key, args, err, sizeof err);
        }
    }
}

static int cmp_stray(const void *a, const void *b)
{
    const stray *x = a, *y = b;
    return x->lookup < y->lookup ? -1 : x->lookup > y->lookup;
}

static qm_queue *queue_by_inc(persist *p, rstate *s, uint64_t inc)
{
    def *d = sl_map_get(s->queues, &inc, 8);
    if (!d)
        return NULL;
    rec_reader r = {d->payload, d->payload + d->len, 0};
    rd_u64(&r);
    uint64_t parent = rd_u64(&r);
    rd_u8(&r);
    amqp_bytes vh = rd_s16(&r), name = rd_s16(&r);
    qm_vhost *vhost = qm_vhost_find(p->node, (const char *)vh.p, vh.len);
    if (!vhost)
        return NULL;
    if (!parent) {
        qm_queue *q = qm_queue_find(vhost, (const char *)name.p, name.len);
        return q && q->incarnation == inc ? q : NULL;
    }
    qm_queue *top = queue_by_inc(p, s, parent);
    qm_queue *sq = top ? qm_queue_subqueue(top, (const char *)name.p, name.len, 0) : NULL;
    return sq && sq->incarnation == inc ? sq : NULL;
}

static qm_queue *queue_of_inc(void *ctx, uint64_t inc)
{
    rstate *s = ctx;
    return queue_by_inc(s->p, s, inc);
}

/* ---- the second pass: message records that were not near their enqueue records ---- */

static uint64_t unresolved_id(const rent *e)
{
    return (uint64_t)e->moff | (uint64_t)e->mseg << 32;
}

static int resolve_replay(void *ctx, uint64_t seq, uint8_t type, const uint8_t *payload, size_t len,
                          st_loc loc)
{
    rstate *s = ctx;
    (void)seq;
    if (type != R_MSG) /* a message record is never marked as a transaction's */
        return 0;
    rec_reader r = {payload, payload + len, 0};
    uint64_t id = rd_u64(&r);
    rd_s16(&r);
    rd_s16(&r);
    amqp_bytes props = rd_b32(&r), body = rd_rest(&r);
    mslot *w = r.bad ? NULL : sl_u64tab_get(&s->wanted, id);
    if (w) { /* the later record wins, as in replay */
        w->seg = loc.segment;
        w->off = (uint32_t)loc.offset;
        w->len = (uint32_t)len;
        w->body_len = body.len > UINT32_MAX ? UINT32_MAX : (uint32_t)body.len;
        w->has_ttl = (uint8_t)props_have_expiration(props);
        w->priority = props_priority(props);
        w->found = 1;
    }
    return 0;
}

static void want(rstate *s, const rent *e)
{
    if ((e->flags & (RF_UNRESOLVED | RF_DEAD)) != RF_UNRESOLVED)
        return;
    int created;
    mslot *w = sl_u64tab_put(&s->wanted, unresolved_id(e), &created);
    if (created)
        w->found = 0;
}

/* 1 when e is usable after the second pass (its message record found), 0 when it is not. */
static int resolve(rstate *s, rent *e)
{
    if (!(e->flags & RF_UNRESOLVED))
        return 1;
    const mslot *w = sl_u64tab_get(&s->wanted, unresolved_id(e));
    if (!w || !w->found)
        return 0; /* the message record is gone: nothing can use this position */
    e->moff = w->off;
    e->mseg = w->seg;
    e->mlen = w->len;
    e->body_len = w->body_len;
    e->priority = w->priority;
    e->flags = (uint8_t)((e->flags & ~RF_UNRESOLVED) | (w->has_ttl ? RF_HAS_TTL : 0));
    return 1;
}

/* Read the log once more for the message records some positions still need. Only when there
 * are such positions (a journal, moves into durable queues of messages stored long before). */
static void resolve_far(rstate *s)
{
    if (!s->unresolved)
        return;
    sl_u64tab_init(&s->wanted, sizeof(mslot));
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(s->entries, &it, &k, &kl, &v)) {
        qentries *qe = v;
        for (size_t i = 0; i < qe->len; i++)
            want(s, &qe->v[i]);
        size_t si = 0;
        stray *st;
        while ((st = sl_u64tab_next(&qe->strays, &si)))
            want(s, &st->e);
    }
    if (!sl_u64tab_count(&s->wanted))
        return;
    char err[512];
    uint64_t t0 = sl_now_ms();
    if (st_log_scan(s->p->msgs, resolve_replay, s, err, sizeof err) < 0)
        sl_error("store: second pass over the message log failed: %s", err);
    sl_info("store: %zu message record(s) far from their enqueue records found in a second "
            "pass (%llu ms)",
            sl_u64tab_count(&s->wanted), (unsigned long long)(sl_now_ms() - t0));
}

/* ---- positions into queues ---- */

/* What recovery reads back into memory: the first messages of each queue while the messages
 * in memory stay under this share of memory_budget; the rest stays paged out (24 bytes each)
 * until consumers reach it. Reading everything up to the budget would make the peak of a
 * restart the whole budget however deep the queues, and take longer. */
#define RECOVERY_BUDGET_SHARE 8

static void rebuild_queue(rstate *s, qm_queue *q, qentries *qe)
{
    persist *p = s->p;
    /* v without its tombstones, the strays merged in: one sorted array */
    size_t n = 0;
    for (size_t i = 0; i < qe->len; i++) {
        if (qe->v[i].flags & RF_DEAD)
            continue;
        if (qe->exp)
            qe->exp[n] = qe->exp[i];
        qe->v[n++] = qe->v[i];
    }
    size_t ns = sl_u64tab_count(&qe->strays);
    if (ns) {
        stray *sv = (stray *)qe->strays.slots;
        size_t m = sl_u64tab_compact(&qe->strays);
        qsort(sv, m, sizeof *sv, cmp_stray);
        size_t cap = n + m;
        rent *nv = sl_xmalloc(cap * sizeof *nv);
        uint64_t *ne = sl_xcalloc(cap, sizeof *ne);
        size_t a = 0, b = 0, o = 0;
        while (a < n || b < m) {
            if (b == m || (a < n && qe->v[a].lookup < sv[b].lookup)) {
                ne[o] = rent_exp(qe, a);
                nv[o++] = qe->v[a++];
            } else {
                ne[o] = sv[b].expires;
                nv[o++] = sv[b++].e;
            }
        }
        sl_free(qe->v);
        sl_free(qe->exp);
        qe->v = nv;
        qe->exp = ne;
        qe->cap = cap;
        n = o;
        sl_u64tab_free(&qe->strays);
        sl_u64tab_init(&qe->strays, sizeof(stray));
    }
    qe->len = n;
    uint64_t budget = qm_memory_budget();
    uint64_t prefetch = budget ? budget / RECOVERY_BUDGET_SHARE : UINT64_MAX;
    uint64_t wall = persist_wall_ms(), now = qm_node_now(p->node);
    size_t j = 0; /* paged entries written so far, in place (j <= i) */
    int exp_any = 0;
    /* Levels whose tail is paged already: what follows at that level stays paged too (a
     * level's paged tail continues its ring). One level unless q has priorities. */
    uint8_t paging[256] = {0};
    for (size_t i = 0; i < n; i++) {
        rent e = qe->v[i];
        uint64_t expires = rent_exp(qe, i);
        if (!resolve(s, &e))
            continue;
        if (q->args.quorum) {
            /* the last count recorded, and 1 more when it was out on a delivery at the stop
             * (a stop returns what it held, as RabbitMQ's does); beyond the limit, it is
             * dead-lettered when it reaches the head */
            uint64_t c = (uint64_t)dcount_of(qe, e.lookup) + ((e.flags & RF_REDELIVERED) != 0);
            if (c) {
                e.flags |= RF_REDELIVERED;
                qm_dcount_set(q, e.lookup, c > UINT32_MAX ? UINT32_MAX : (uint32_t)c);
            }
        }
        /* What was left of its TTL at the stop (a deadline passed while the broker was down
         * expires it at once); records without a deadline have no TTL. */
        uint64_t expires_at = expires ? now + (expires > wall ? expires - wall : 0) : 0;
        int can_page = expires || (q->args.message_ttl < 0 && !(e.flags & RF_HAS_TTL));
        int level = q->args.max_priority <= 0           ? 0
                    : e.priority < q->args.max_priority ? e.priority
                                                        : q->args.max_priority;
        if (can_page && (paging[level] || qm_memory_bytes() >= prefetch)) {
            paging[level] = 1;
            /* Beyond what is read back the message stays where it is: on disk. */
            qm_paged *pe = (qm_paged *)&qe->v[j];
            *pe = (qm_paged){
                .lookup_id = e.lookup,
                .msg_off = e.moff,
                .msg_seg = e.mseg,
                .msg_len = e.mlen,
                .enq_seg = e.eseg,
                .body_len = e.body_len,
                .move_count = e.moves,
                .redelivered = (e.flags & RF_REDELIVERED) != 0,
                .logged = 1,
                .xact_cont = (e.flags & RF_XACT_CONT) != 0,
                .xact = (e.flags & RF_XACT) != 0,
                .watch = (e.flags & RF_WATCH) != 0,
                .priority = e.priority,
            };
            if (qe->exp)
                qe->exp[j] = expires_at;
            exp_any |= expires_at != 0;
            j++;
        } else {
            qm_message *m = persist_read_message(p, e.mseg, e.moff, e.mlen, q->name, e.lookup);
            if (!m)
                continue;
            m->watch = (e.flags & RF_WATCH) != 0;
            qm_position *pos =
                qm_queue_restore(q, m, e.lookup, e.moves, (e.flags & RF_REDELIVERED) != 0);
            qm_message_unref(m); /* the position holds it */
            pos->st_logged = 1;
            pos->st_seg = e.eseg;
            pos->xact_cont = (e.flags & RF_XACT_CONT) != 0;
            pos->xact = (e.flags & RF_XACT) != 0;
            if (expires)
                qm_pos_set_expires(pos, expires_at);
        }
        if (e.flags & RF_WATCH)
            q->removal_watch = 1; /* the mark the MSMQ door set in memory at the enqueue */
        st_log_ref(p->msgs, e.eseg);
        st_log_ref(p->msgs, e.mseg);
        persist_queue_floor(q, e.eseg);
        p->recovered_messages++;
    }
    if (j) {
        /* the array becomes the queue's paged tail (adopt shrinks it to j 24-byte slots);
         * the deadlines' slack goes back here */
        qm_paged *pv = (qm_paged *)(void *)qe->v; /* written as qm_paged above */
        uint64_t *pe = NULL;
        if (exp_any)
            pe = sl_xrealloc(qe->exp, j * sizeof *pe);
        else
            sl_free(qe->exp);
        qe->v = NULL;
        qe->exp = NULL;
        qm_queue_adopt_paged(q, pv, pe, j);
    }
}

static void rebuild_messages(rstate *s)
{
    persist *p = s->p;
    resolve_far(s);
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(s->entries, &it, &k, &kl, &v)) {
        uint64_t inc;
        memcpy(&inc, k, 8);
        qentries *qe = v;
        qm_queue *q = queue_by_inc(p, s, inc);
        if (q && (qe->len > qe->dead || sl_u64tab_count(&qe->strays)))
            rebuild_queue(s, q, qe);
        /* each queue's memory goes as soon as it is rebuilt */
        sl_free(qe->v);
        sl_free(qe->exp);
        qe->v = NULL;
        qe->exp = NULL;
        qe->len = qe->cap = qe->dead = 0;
        sl_u64tab_free(&qe->strays);
        sl_u64tab_init(&qe->strays, sizeof(stray));
        sl_u64tab_free(&qe->dcounts);
        sl_u64tab_init(&qe->dcounts, sizeof(dcent));
    }
}

/* Every vhost has a definition in the access module and a live qm_vhost: definitions
 * replayed from the log get their qm_vhost; vhosts that only queues and exchanges named
 * (logs written before vhosts were recorded) get a definition. */
static void reconcile_vhosts(persist *p)
{
    acc_db *a = p->opt.acc;
    if (!a)
        return;
    size_t n;
    const acc_vhost **vs = acc_vhosts(a, &n);
    for (size_t i = 0; i < n; i++)
        qm_vhost_create(p->node, vs[i]->name);
    sl_free(vs);
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(p->node->vhosts, &it, &k, &kl, &v)) {
        if (!acc_vhost_find(a, k, kl)) {
            char err[300];
            acc_vhost_put(a, k, NULL, NULL, NULL, err, sizeof err);
        }
    }
}

static void snapshot_acc_record(void *ctx, uint8_t type, const uint8_t *payload, size_t len)
{
    persist *p = ctx;
    st_log_append(p->meta, type, payload, len, NULL);
}

/* Rewrite the meta log as one snapshot of what exists now, then drop the old segments. The new
 * segment is written before the old ones go, so it needs free space: on a (nearly) full disk
 * the snapshot is skipped and the old segments stay as they are (they are as good, only
 * longer), so a node that stopped on a full disk starts again. */
static int snapshot_meta(persist *p, char *err, size_t errlen)
{
    st_log_stats ls;
    st_log_get_stats(p->meta, &ls);
    struct statvfs vfs;
    uint64_t need = ls.bytes + (1u << 20); /* a snapshot is never bigger than the log it sums */
    if (statvfs(p->dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
        sl_warn("%s/meta: %llu bytes free, the definitions snapshot needs up to %llu: not "
                "rewritten this time (the log is kept as it is)",
                p->dir, (unsigned long long)vfs.f_bavail * vfs.f_frsize, (unsigned long long)need);
        return 0;
    }
    st_log_roll(p->meta);
    sl_buf *b = &p->scratch;
    b->len = 0;
    rec_u64(b, p->node->next_incarnation);
    rec_u64(b, p->node->next_lookup_id);
    rec_u64(b, p->next_msg_id);
    st_log_append(p->meta, M_NODE, b->data, b->len, NULL);
    if (p->opt.acc)
        acc_snapshot(p->opt.acc, snapshot_acc_record, p);
    if (p->have_node_id)
        st_log_append(p->meta, M_NODE_ID, p->node_id, 16, NULL);
    if (!p->online) {
        b->len = 0;
        rec_u8(b, 0);
        st_log_append(p->meta, M_ONLINE, b->data, b->len, NULL);
    }
    for (size_t i = 0; i < p->n_ltimes; i++) {
        b->len = 0;
        rec_u64(b, p->ltimes[i].next_id);
        rec_u64(b, p->ltimes[i].wall_ms);
        st_log_append(p->meta, M_LOOKUP_TIME, b->data, b->len, NULL);
    }
    size_t vit = 0;
    const char *k;
    size_t kl;
    void *vv;
    while (sl_map_next(p->node->vhosts, &vit, &k, &kl, &vv)) {
        qm_vhost *vh = vv;
        size_t it = 0;
        void *v;
        while (sl_map_next(vh->exchanges, &it, &k, &kl, &v)) {
            qm_exchange *x = v;
            if (!x->durable || !x->name[0] || !strncmp(x->name, "amq.", 4))
                continue;
            b->len = 0;
            persist_encode_exchange(b, x);
            st_log_append(p->meta, M_EXCHANGE, b->data, b->len, NULL);
        }
        it = 0;
        while (sl_map_next(vh->queues, &it, &k, &kl, &v)) {
            qm_queue *q = v;
            if (!persist_queue_durable(q))
                continue;
            b->len = 0;
            persist_encode_queue(b, q);
            st_log_append(p->meta, M_QUEUE, b->data, b->len, NULL);
            uintptr_t oq = (uintptr_t)sl_map_get(p->outq, &q->incarnation, 8);
            if (q->is_outgoing && oq) {
                b->len = 0;
                rec_u64(b, q->incarnation);
                rec_u8(b, (uint8_t)(oq & 0xff));
                rec_u8(b, (uint8_t)((oq >> 8) & 0xff));
                st_log_append(p->meta, M_OUTQ, b->data, b->len, NULL);
            }
            uint64_t sent = q->is_outgoing ? persist_outq_sent_get(p, q->incarnation) : 0;
            if (sent) {
                b->len = 0;
                rec_u64(b, q->incarnation);
                rec_u64(b, sent);
                st_log_append(p->meta, M_OUTQ_SENT, b->data, b->len, NULL);
            }
            size_t sit = 0;
            void *sv;
            while (q->subqueues && sl_map_next(q->subqueues, &sit, &k, &kl, &sv)) {
                b->len = 0;
                persist_encode_queue(b, sv);
                st_log_append(p->meta, M_QUEUE, b->data, b->len, NULL);
            }
        }
        it = 0;
        while (sl_map_next(vh->exchanges, &it, &k, &kl, &v)) {
            qm_exchange *x = v;
            for (qm_binding *bd = x->bindings; bd; bd = bd->next) {
                if (!x->durable || !x->name[0])
                    continue;
                if (bd->dest_queue && !(persist_queue_durable(bd->dest_queue)))
                    continue;
                if (bd->dest_exchange && !bd->dest_exchange->durable)
                    continue;
                b->len = 0;
                persist_encode_binding(b, bd);
                st_log_append(p->meta, M_BIND, b->data, b->len, NULL);
            }
        }
    }
    b->len = 0;
    if (st_log_commit(p->meta, NULL) < 0) {
        snprintf(err, errlen, "%s/meta: cannot write the definitions snapshot", p->dir);
        return -1;
    }
    st_reclaim_stats rs;
    st_log_reclaim(p->meta, &rs);
    return 0;
}

static void state_free(rstate *s)
{
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (s->queues && sl_map_next(s->queues, &it, &k, &kl, &v))
        def_free(v);
    it = 0;
    while (s->gone_subs && sl_map_next(s->gone_subs, &it, &k, &kl, &v))
        def_free(v);
    it = 0;
    while (s->exchanges && sl_map_next(s->exchanges, &it, &k, &kl, &v))
        def_free(v);
    it = 0;
    while (s->entries && sl_map_next(s->entries, &it, &k, &kl, &v))
        entries_free(v);
    tx_clear(s);
    sl_free(s->tx);
    sl_free(s->floors);
    sl_map_free(s->queues);
    sl_map_free(s->gone_subs);
    sl_map_free(s->exchanges);
    sl_map_free(s->bindings);
    sl_free(s->mcache);
    if (s->unresolved)
        sl_u64tab_free(&s->wanted);
    sl_map_free(s->entries);
    it = 0;
    while (s->tracks && sl_map_next(s->tracks, &it, &k, &kl, &v))
        sl_free(v);
    sl_map_free(s->tracks);
}

int persist_recover(persist *p, char *err, size_t errlen)
{
    rstate s = {0};
    s.p = p;
    s.queues = sl_map_new();
    s.gone_subs = sl_map_new();
    s.exchanges = sl_map_new();
    s.bindings = sl_map_new();
    s.mcache = sl_xcalloc(MCACHE, sizeof *s.mcache);
    s.entries = sl_map_new();
    s.err = err;
    s.errlen = errlen;
    err[0] = 0;
    char path[4096];
    int rc = -1;

    st_log_options mo = {
        .segment_size = 8u << 20, .no_sync = p->opt.no_sync, .read_only = p->opt.read_only};
    snprintf(path, sizeof path, "%s/meta", p->dir);
    p->meta = st_log_open(path, &mo, meta_replay, &s, err, errlen);
    if (!p->meta)
        goto out;
    st_log_options so = {.segment_size = p->opt.segment_size,
                         .no_sync = p->opt.no_sync,
                         .read_only = p->opt.read_only};
    snprintf(path, sizeof path, "%s/msgs", p->dir);
    p->msgs = st_log_open(path, &so, msgs_replay, &s, err, errlen);
    if (!p->msgs)
        goto out;
    if (s.in_tx) {
        sl_warn("store: dropped a transaction whose commit did not reach the disk");
        if (!p->opt.read_only) {
            /* Close it on disk, or what is appended from now on would join it at the next
             * recovery. */
            st_loc at;
            if (st_log_append(p->msgs, R_TX_ABORT, NULL, 0, &at))
                depend(&s, at.segment, s.tx[0].loc.segment);
            if (st_log_commit(p->msgs, NULL) < 0) {
                snprintf(err, errlen, "%s/msgs: cannot write: %s", p->dir, strerror(errno));
                goto out;
            }
        }
    }

    for (size_t i = 0; i < s.floors_cap; i++)
        if (s.floors[i])
            st_log_depend(p->msgs, (uint32_t)i, s.floors[i]);
    restore_emptied_subqueues(&s);
    qm_persist_suspend(1);
    rebuild_exchanges(&s);
    rebuild_queues(&s, 0);
    rebuild_queues(&s, 1);
    if (s.fatal) {
        qm_persist_suspend(0);
        goto out; /* rc is -1, err says why */
    }
    rebuild_bindings(&s);
    rebuild_messages(&s);
    persist_streams_restore_tracking(p, s.tracks, queue_of_inc, &s);
    s.tracks = NULL;
    reconcile_vhosts(p);
    qm_persist_suspend(0);
    rc = p->opt.read_only ? 0 : snapshot_meta(p, err, errlen);
out:
    state_free(&s);
    return rc;
}
