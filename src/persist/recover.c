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
 *     log, the same order as the rmsg already kept for every message record in it.)
 *   - a purge kills every position its queue had so far (Available and Locked alike: what
 *     was PurgePending never comes back);
 *   - records marked R_IN_TX (a transaction's) apply only when the R_TX_END after them is
 *     there; the marking, not a begin record, says what belongs to the group, so a group
 *     whose first segment TIDY has deleted still replays right;
 *   - a position with a delivery mark comes back with redelivered = true.
 * Hooks are suspended while the model is rebuilt: nothing is written back during recovery,
 * except the meta snapshot at the end.
 */
#include "persist_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "../core/log.h"
#include "../core/mem.h"
#include "../core/u64tab.h"
#include "../access/access.h"
#include "../amqp/method.h"
#include "../qm/qm.h"

typedef struct def {
    uint8_t type; /* M_QUEUE or M_EXCHANGE */
    uint8_t *payload;
    size_t len;
} def;

/* A stored position seen in replay, kept inline in its queue's table (key: lookup). One of
 * these and one rmsg per stored message are what recovery holds beyond the model it builds,
 * so both stay small and unallocated. */
typedef struct entry {
    uint64_t lookup; /* the key: first */
    uint64_t msg;
    uint64_t expires; /* TTL deadline, wall-clock ms (0: none) */
    uint32_t seg;
    uint32_t move_count : 30;
    uint32_t redelivered : 1;
    uint32_t xact_cont : 1; /* EF_XACT_CONT */
} entry;

typedef struct qentries {
    sl_u64tab by_lookup; /* lookup id -> entry */
} qentries;

/* A stored message seen in replay (key: id). Its body is read back only if a position needs
 * it in memory: beyond the memory budget recovered messages stay paged out. */
typedef struct rmsg {
    uint64_t id;   /* the key: first */
    qm_message *m; /* materialized, or NULL */
    uint64_t off;  /* where the record is: segment seg, offset off */
    uint32_t seg;
    uint32_t len; /* record payload length */
    uint32_t body_len;
    uint32_t uses : 31;
    uint32_t has_ttl : 1; /* an expiration property: kept in memory (expiry is checked there) */
} rmsg;
_Static_assert(sizeof(rmsg) == 40, "one per stored message during recovery: keep it small");
_Static_assert(sizeof(entry) == 32, "one per stored position during recovery: keep it small");

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
    sl_map *exchanges; /* "vhost\0name" -> def* */
    sl_map *bindings;  /* canonical binding payload -> (void*)1 */
    /* msgs */
    sl_u64tab msgs;  /* message id -> rmsg */
    sl_map *entries; /* u64 incarnation -> qentries* */
    pending_rec *tx;
    size_t tx_len, tx_cap;
    int in_tx;
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
        if (r.bad)
            break;
        see_ids(s, inc + 1, 0, 0);
        def_free(sl_map_put(s->queues, &inc, 8, def_new(type, payload, len)));
        return 0;
    }
    case M_QUEUE_DEL: {
        uint64_t inc = rd_u64(&r);
        if (r.bad)
            break;
        see_ids(s, inc + 1, 0, 0);
        def *d = sl_map_del(s->queues, &inc, 8);
        if (d) {
            rec_reader dr = {d->payload, d->payload + d->len, 0};
            rd_u64(&dr);
            uint64_t parent = rd_u64(&dr);
            rd_u8(&dr);
            amqp_bytes vh = rd_s16(&dr), name = rd_s16(&dr);
            if (!parent)
                drop_bindings_naming(s, vh, name, 0);
            def_free(d);
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
        sl_u64tab_init(&qe->by_lookup, sizeof(entry));
        sl_map_put(s->entries, &inc, 8, qe);
    }
    return qe;
}

/* A position that is gone no longer uses its message. */
static void entry_drop(rstate *s, const entry *e)
{
    rmsg *rm = sl_u64tab_get(&s->msgs, e->msg);
    if (rm && rm->uses > 0)
        rm->uses--;
}

static void clear_entries(rstate *s, qentries *qe)
{
    size_t it = 0;
    entry *e;
    while ((e = sl_u64tab_next(&qe->by_lookup, &it)))
        entry_drop(s, e);
    sl_u64tab_free(&qe->by_lookup);
    sl_u64tab_init(&qe->by_lookup, sizeof(entry));
}

static int apply_msg_record(rstate *s, uint64_t seq, uint8_t type, const uint8_t *payload,
                            size_t len, st_loc loc)
{
    rec_reader r = {payload, payload + len, 0};
    switch (type) {
    case R_MSG: {
        uint64_t id = rd_u64(&r);
        amqp_bytes ex = rd_s16(&r), rk = rd_s16(&r), props = rd_b32(&r);
        amqp_bytes body = rd_rest(&r);
        if (r.bad)
            break;
        (void)ex;
        (void)rk;
        int created;
        rmsg *rm = sl_u64tab_put(&s->msgs, id, &created);
        if (!created) { /* the same id again: the later record wins */
            qm_message_unref(rm->m);
            memset((uint8_t *)rm + 8, 0, sizeof *rm - 8);
        }
        rm->off = loc.offset;
        rm->seg = loc.segment;
        rm->len = (uint32_t)len;
        rm->body_len = body.len > UINT32_MAX ? UINT32_MAX : (uint32_t)body.len;
        amqp_basic_props bp;
        rm->has_ttl = props.len && amqp_props_decode(props.p, props.len, &bp) == 0 &&
                      (bp.flags & AMQP_P_EXPIRATION);
        if (id >= s->p->next_msg_id)
            s->p->next_msg_id = id + 1;
        return 0;
    }
    case R_ENQ: {
        uint64_t inc = rd_u64(&r), lookup = rd_u64(&r), msg = rd_u64(&r);
        uint32_t moves = rd_u32(&r);
        uint8_t flags = rd_u8(&r);
        uint64_t expires = flags & EF_EXPIRES ? rd_u64(&r) : 0;
        if (r.bad)
            break;
        see_ids(s, inc + 1, lookup + 1, msg + 1);
        rmsg *rm = sl_u64tab_get(&s->msgs, msg);
        if (!rm)
            return 0; /* the message record is gone: nothing can use this position */
        qentries *qe = entries_of(s, inc, 1);
        rm->uses++;
        int created;
        entry *e = sl_u64tab_put(&qe->by_lookup, lookup, &created);
        if (!created)
            entry_drop(s, e); /* the same position again: the later record wins */
        e->msg = msg;
        e->move_count = moves > 0x3fffffffu ? 0x3fffffffu : moves;
        e->seg = loc.segment;
        e->redelivered = (flags & EF_REDELIVERED) != 0;
        e->xact_cont = (flags & EF_XACT_CONT) != 0;
        e->expires = expires;
        return 0;
    }
    case R_DEQ:
    case R_DELIVER: {
        uint64_t inc = rd_u64(&r), lookup = rd_u64(&r);
        if (r.bad)
            break;
        qentries *qe = entries_of(s, inc, 0);
        if (!qe)
            return 0;
        if (type == R_DEQ) {
            entry gone;
            if (sl_u64tab_del(&qe->by_lookup, lookup, &gone))
                entry_drop(s, &gone);
        } else {
            entry *e = sl_u64tab_get(&qe->by_lookup, lookup);
            if (e)
                e->redelivered = 1;
        }
        return 0;
    }
    case R_PURGE: {
        uint64_t inc = rd_u64(&r);
        if (r.bad)
            break;
        qentries *qe = entries_of(s, inc, 0);
        if (qe)
            clear_entries(s, qe);
        return 0;
    }
    case R_MOVE:
    case R_MOVE_TTL: {
        uint64_t src = rd_u64(&r), lookup = rd_u64(&r), dest = rd_u64(&r);
        uint32_t moves = rd_u32(&r);
        uint8_t flags = type == R_MOVE_TTL ? rd_u8(&r) : 0;
        uint64_t expires = flags & EF_EXPIRES ? rd_u64(&r) : 0;
        if (r.bad)
            break;
        see_ids(s, (src > dest ? src : dest) + 1, lookup + 1, 0);
        qentries *qs = entries_of(s, src, 0);
        entry moved;
        if (!qs || !sl_u64tab_del(&qs->by_lookup, lookup, &moved))
            return 0;
        qentries *qd = entries_of(s, dest, 1);
        moved.move_count = moves > 0x3fffffffu ? 0x3fffffffu : moves;
        moved.xact_cont = 0;
        if (type == R_MOVE_TTL)
            moved.expires = expires; /* the target's TTL rule gave it a new one (or none) */
        int created;
        entry *e = sl_u64tab_put(&qd->by_lookup, lookup, &created);
        if (!created)
            entry_drop(s, e);
        *e = moved;
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
    if (base == 0 || (base > R_MOVE_TTL && base != R_EOD_IN) || (type & R_IN_TX && tx_control)) {
        snprintf(s->err, s->errlen, "%s/msgs: record %llu: unknown record type %u", s->p->dir,
                 (unsigned long long)seq, type);
        return 1;
    }
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

static int cmp_entry(const void *a, const void *b)
{
    const entry *x = a, *y = b;
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

/* Read a stored message back into memory (once; positions share it). */
static qm_message *materialize(rstate *s, rmsg *rm, uint64_t id)
{
    if (rm->m)
        return rm->m;
    char whose[64];
    snprintf(whose, sizeof whose, "message %llu", (unsigned long long)id);
    rm->m = persist_read_message(s->p, rm->seg, rm->off, rm->len, whose);
    return rm->m;
}

static void rebuild_messages(rstate *s)
{
    persist *p = s->p;
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(s->entries, &it, &k, &kl, &v)) {
        uint64_t inc;
        memcpy(&inc, k, 8);
        qentries *qe = v;
        qm_queue *q = queue_by_inc(p, s, inc);
        if (!q || sl_u64tab_count(&qe->by_lookup) == 0)
            continue;
        /* Sorted in place, in the table's own memory, which goes as soon as the queue is
         * rebuilt: recovery never holds two copies of a queue's positions. */
        size_t n = sl_u64tab_compact(&qe->by_lookup);
        entry *arr = (entry *)qe->by_lookup.slots;
        qsort(arr, n, sizeof *arr, cmp_entry);
        for (size_t i = 0; i < n; i++) {
            entry *e = &arr[i];
            rmsg *rm = sl_u64tab_get(&s->msgs, e->msg);
            if (!rm)
                continue;
            /* What was left of its TTL at the stop (a deadline passed while the broker was
             * down expires it at once); records without a deadline have no TTL. */
            uint64_t expires_at = 0;
            if (e->expires) {
                uint64_t wall = persist_wall_ms();
                expires_at = qm_node_now(p->node) + (e->expires > wall ? e->expires - wall : 0);
            }
            int can_page = q->args.max_priority <= 0 &&
                           (e->expires || (q->args.message_ttl < 0 && !rm->has_ttl));
            if (can_page && (q->paged_len || (q->n_ready && qm_memory_over_budget()))) {
                /* Beyond the memory budget the message stays where it is: on disk. */
                qm_paged pe = {
                    .lookup_id = e->lookup,
                    .msg_off = (uint32_t)rm->off,
                    .msg_seg = rm->seg,
                    .msg_len = rm->len,
                    .enq_seg = e->seg,
                    .body_len = rm->body_len,
                    .move_count = (uint16_t)(e->move_count > 65535 ? 65535 : e->move_count),
                    .redelivered = e->redelivered,
                    .logged = 1,
                    .xact_cont = e->xact_cont,
                };
                qm_queue_restore_paged(q, &pe, expires_at);
            } else {
                qm_message *m = materialize(s, rm, e->msg);
                if (!m)
                    continue;
                qm_position *pos = qm_queue_restore(q, m, e->lookup, e->move_count, e->redelivered);
                pos->st_logged = 1;
                pos->st_seg = e->seg;
                pos->xact_cont = e->xact_cont;
                if (e->expires)
                    qm_pos_set_expires(pos, expires_at);
            }
            st_log_ref(p->msgs, e->seg);
            st_log_ref(p->msgs, rm->seg);
            p->recovered_messages++;
        }
        sl_u64tab_free(&qe->by_lookup);
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
    while (s->exchanges && sl_map_next(s->exchanges, &it, &k, &kl, &v))
        def_free(v);
    it = 0;
    while (s->entries && sl_map_next(s->entries, &it, &k, &kl, &v)) {
        qentries *qe = v;
        sl_u64tab_free(&qe->by_lookup);
        sl_free(qe);
    }
    it = 0;
    rmsg *rm;
    while ((rm = sl_u64tab_next(&s->msgs, &it)))
        qm_message_unref(rm->m); /* positions took their own references */
    tx_clear(s);
    sl_free(s->tx);
    sl_map_free(s->queues);
    sl_map_free(s->exchanges);
    sl_map_free(s->bindings);
    sl_u64tab_free(&s->msgs);
    sl_map_free(s->entries);
}

int persist_recover(persist *p, char *err, size_t errlen)
{
    rstate s = {0};
    s.p = p;
    s.queues = sl_map_new();
    s.exchanges = sl_map_new();
    s.bindings = sl_map_new();
    sl_u64tab_init(&s.msgs, sizeof(rmsg));
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
            st_log_append(p->msgs, R_TX_ABORT, NULL, 0, NULL);
            if (st_log_commit(p->msgs, NULL) < 0) {
                snprintf(err, errlen, "%s/msgs: cannot write: %s", p->dir, strerror(errno));
                goto out;
            }
        }
    }

    qm_persist_suspend(1);
    rebuild_exchanges(&s);
    rebuild_queues(&s, 0);
    rebuild_queues(&s, 1);
    rebuild_bindings(&s);
    rebuild_messages(&s);
    reconcile_vhosts(p);
    qm_persist_suspend(0);
    rc = p->opt.read_only ? 0 : snapshot_meta(p, err, errlen);
out:
    state_free(&s);
    return rc;
}
