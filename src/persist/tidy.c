/* tidy.c - TIDY: give back the disk behind old live records, a slice per loop turn.
 *
 * What may go is the store's rule (store/log.h): a msgs segment without references whose
 * floor (the oldest segment any of its records depends on) has nothing left between it and
 * the segment. What TIDY adds is compaction: a segment that holds a few live records (one old
 * message in a rarely read queue, say) keeps its whole size, and every newer segment whose
 * removal records depend on it. Its live records are written again at the head of the log:
 *   - a position in memory: its message (under a new message id, when no other position
 *     shares the message) and an enqueue record of its current state (queue, lookup id,
 *     move count, delivery mark, deadline, transaction flag), which recovery takes over the
 *     older ones ("the later record wins"); the new record depends on the old one's segment,
 *     so it never outlives a record it replaces while older records could still be replayed;
 *   - a paged entry: its message record read back and written again (new id), its enqueue;
 *   - a receiver's incoming-sequence state (R_EOD_IN), a stream's tracked reference
 *     (R_STREAM_TRACK).
 * A position that is PURGE_PENDING is dead on disk already (a purge record covers it): it is
 * never written again. A message that several positions share in memory is left where it is.
 *
 * Steps (each a point a kill -9 may fall at, st_fault_point): the old records stay until the
 * copies are durable (a forced sync), and a segment goes only if it was unreferenced when that
 * sync began and still is (st_log_mark_dead / st_log_reclaim_marked): whatever dropped its
 * references is on disk by then. So at any kill the store holds either the old records or
 * both, and replay of both gives the same state.
 *
 * The walks (measure, then copy) visit every stored position, a slice at a time, resuming by
 * vhost and queue name; a queue changed meanwhile may be visited partly twice or skip a few
 * positions, which only means a segment is not freed this time: references, not the walk,
 * decide what is deleted.
 */
#include "persist/persist_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/le.h"
#include "core/log.h"
#include "core/mem.h"

#define REC_OVERHEAD 17u /* a record's header in the log */
#define ENQ_BYTES (REC_OVERHEAD + 37u)
#define EOD_BYTES (REC_OVERHEAD + 64u)
#define TRACK_BYTES (REC_OVERHEAD + 27u) /* R_STREAM_TRACK without its reference */
/* Copying waits while this much is buffered for the disk: relocation never outruns it. */
#define COPY_PENDING_MAX (16u << 20)
/* A segment is compacted when at most this share of it is live... */
#define LIVE_SHARE_NUM 1
#define LIVE_SHARE_DEN 2
/* ... or when copying it lets at least this many times its live bytes go. */
#define UNBLOCK_GAIN 2
/* The newest segments are never copied: what lives there now is mostly about to be consumed
 * (copying it would only write it twice). */
#define YOUNG_SEGMENTS 4

enum { T_REAP, T_MEASURE, T_CHOOSE, T_COPY, T_FENCE, T_RECLAIM };

typedef struct tidy {
    int phase;
    uint64_t t0;
    /* the segments when it began; live bytes found per segment, what to copy */
    st_seg_info *segs;
    size_t nsegs;
    uint64_t *live;
    uint8_t *pinned; /* holds live records that cannot be copied */
    uint8_t *chosen;
    /* the walk */
    char **vhosts;
    size_t nvh, vi;
    char *qname;      /* the top-level queue being visited, NULL: the vhost's first */
    int q_after;      /* go on after qname */
    char **subs;      /* its subqueues' names when it was entered */
    size_t nsubs, si; /* 0: the queue itself, i: subs[i - 1] */
    uint64_t unit_inc, cursor;
    uint64_t deadline_us;
    unsigned visits;
    int stop; /* the slice is over */
    persist *p;
    uint64_t fence_gen;
    int reap_only; /* persist_tidy_start_reap: no walk, no copies */
    persist_tidy_result res;
} tidy;

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sl_free(v[i]);
    sl_free(v);
}

static void walk_reset(tidy *t)
{
    free_names(t->vhosts, t->nvh);
    free_names(t->subs, t->nsubs);
    sl_free(t->qname);
    t->vhosts = t->subs = NULL;
    t->qname = NULL;
    t->nvh = t->vi = t->nsubs = t->si = 0;
    t->q_after = 0;
    t->unit_inc = t->cursor = 0;
    qm_node *n = t->p->node;
    size_t cap = sl_map_count(n->vhosts), it = 0, kl;
    const char *k;
    void *v;
    t->vhosts = sl_xmalloc((cap ? cap : 1) * sizeof *t->vhosts);
    while (t->nvh < cap && sl_map_next(n->vhosts, &it, &k, &kl, &v))
        t->vhosts[t->nvh++] = sl_xstrndup(k, kl);
}

static void tidy_free(tidy *t)
{
    if (!t)
        return;
    free_names(t->vhosts, t->nvh);
    free_names(t->subs, t->nsubs);
    sl_free(t->qname);
    sl_free(t->segs);
    sl_free(t->live);
    sl_free(t->pinned);
    sl_free(t->chosen);
    sl_free(t);
}

void persist_tidy_free(persist *p)
{
    tidy_free(p->tidy);
    p->tidy = NULL;
}

/* Index of segment no in t->segs, or -1 (a segment made since TIDY began). */
static long seg_index(const tidy *t, uint32_t no)
{
    size_t lo = 0, hi = t->nsegs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->segs[mid].no < no)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->nsegs && t->segs[lo].no == no ? (long)lo : -1;
}

static int is_chosen(const tidy *t, uint32_t no)
{
    long i = seg_index(t, no);
    return i >= 0 && t->chosen[i];
}

static void add_live(tidy *t, uint32_t no, uint64_t bytes, int movable)
{
    long i = seg_index(t, no);
    if (i < 0)
        return;
    t->live[i] += bytes;
    if (!movable)
        t->pinned[i] = 1;
}

/* The slice's clock, looked at every few visits (and after every copy: those cost more). */
static int over_budget(tidy *t)
{
    if (t->stop)
        return 1;
    if ((++t->visits & 63) == 0 && sl_now_us() >= t->deadline_us)
        t->stop = 1;
    return t->stop;
}

static int copied(tidy *t)
{
    if (sl_now_us() >= t->deadline_us || st_log_pending(t->p->msgs) > COPY_PENDING_MAX)
        t->stop = 1;
    return t->stop;
}

/* A position whose store records describe it now (not one a purge already removed on disk,
 * nor one whose queue is gone). */
static int stored_live(const qm_position *pos)
{
    return pos->st_logged && pos->queue &&
           (pos->state == QM_POS_AVAILABLE || pos->state == QM_POS_LOCKED);
}

/* ---- measure ---- */

static int measure_pos(void *ctx, qm_position *pos)
{
    tidy *t = ctx;
    if (pos->st_logged) {
        int movable = stored_live(pos);
        const qm_msg_store *st = qm_msg_st(pos->msg); /* a stored position's message has one */
        add_live(t, pos->st_seg, ENQ_BYTES, movable);
        add_live(t, st->st_seg, REC_OVERHEAD + st->st_len, movable && pos->msg->refs == 1);
    }
    return over_budget(t);
}

static int measure_paged(void *ctx, qm_queue *q, qm_paged *e, uint64_t expires_at)
{
    (void)expires_at;
    tidy *t = ctx;
    (void)q;
    add_live(t, e->msg_seg, REC_OVERHEAD + e->msg_len, 1);
    if (e->logged)
        add_live(t, e->enq_seg, ENQ_BYTES, 1);
    return over_budget(t);
}

/* ---- copy ---- */

/* Write pos' state again at the head of the log: its message too when it is in a chosen
 * segment and no other position shares it in memory. */
static int copy_pos(void *ctx, qm_position *pos)
{
    tidy *t = ctx;
    persist *p = t->p;
    if (!stored_live(pos))
        return over_budget(t);
    qm_message *m = pos->msg;
    qm_msg_store *st = qm_msg_st(m);
    int enq_in = is_chosen(t, pos->st_seg), msg_in = is_chosen(t, st->st_seg);
    if (!enq_in && !msg_in)
        return over_budget(t);
    if (msg_in && m->refs == 1) {
        if (persist_rewrite_message(p, m) < 0)
            return over_budget(t);
        t->res.records_copied++;
        t->res.bytes_copied += REC_OVERHEAD + st->st_len;
        enq_in = 1; /* its enqueue must name the new id */
    }
    if (enq_in) {
        /* A quorum queue's copy carries the delivery count, and "delivered since" only for a
         * position out on a delivery now (recovery adds 1 for it, records.h R_QDELIVER). */
        uint32_t dcount = pos->redelivered ? persist_dcount(pos->queue, pos->lookup_id) : 0;
        persist_encode_enq(p, pos->queue->incarnation, pos->lookup_id, st->st_id, pos->move_count,
                           persist_enq_delivered(pos, pos->st_delivered), pos->xact_cont, pos->xact,
                           pos->msg->watch, qm_pos_expires(pos), dcount);
        st_loc loc;
        if (persist_msgs_append_dep(p, R_ENQ, 1, pos->st_seg, &loc) == 0) {
            st_log_ref(p->msgs, loc.segment);
            st_log_unref(p->msgs, pos->st_seg);
            pos->st_seg = loc.segment;
            t->res.records_copied++;
            t->res.bytes_copied += ENQ_BYTES;
        }
    }
    return copied(t);
}

/* A paged entry: its message record read back and written again under a new id, then (when
 * it is a stored position) its enqueue record naming it. */
static int copy_paged(void *ctx, qm_queue *q, qm_paged *e, uint64_t expires_at)
{
    tidy *t = ctx;
    persist *p = t->p;
    if (!is_chosen(t, e->msg_seg) && !(e->logged && is_chosen(t, e->enq_seg)))
        return over_budget(t);
    uint8_t *buf = sl_xmalloc(e->msg_len ? e->msg_len : 1);
    char err[256];
    st_loc old = {e->msg_seg, e->msg_off}, mloc, eloc;
    if (e->msg_len < 8 || st_log_read(p->msgs, old, buf, e->msg_len, err, sizeof err) < 0) {
        sl_warn("tidy: cannot read back message %llu of queue '%s' to copy it: %s",
                (unsigned long long)e->lookup_id, q->name, e->msg_len < 8 ? "too short" : err);
        sl_free(buf);
        return over_budget(t);
    }
    uint64_t id = p->next_msg_id++;
    sl_put_le64(buf, id);
    st_iov one = {buf, e->msg_len};
    persist_run_flush(p); /* records keep the order they were made in */
    if (!st_log_appendv(p->msgs, R_MSG, &one, 1, &mloc)) {
        sl_free(buf);
        return over_budget(t);
    }
    sl_free(buf);
    p->records++;
    t->res.records_copied++;
    t->res.bytes_copied += REC_OVERHEAD + e->msg_len;
    if (e->logged) {
        /* paged: ready, so in a quorum queue its count says it all (see above) */
        uint32_t dcount = e->redelivered ? persist_dcount(q, e->lookup_id) : 0;
        persist_encode_enq(p, q->incarnation, e->lookup_id, id, e->move_count,
                           e->redelivered && !q->args.quorum, e->xact_cont, e->xact, e->watch,
                           expires_at, dcount);
        if (persist_msgs_append_dep(p, R_ENQ, 1, e->enq_seg, &eloc) < 0) {
            /* the log failed: the message copy is an orphan (harmless); nothing changes */
            return over_budget(t);
        }
        t->res.records_copied++;
        t->res.bytes_copied += ENQ_BYTES;
    } else {
        eloc = mloc; /* a transient message: its record is referenced twice, as when paged */
    }
    st_log_ref(p->msgs, eloc.segment);
    st_log_ref(p->msgs, mloc.segment);
    st_log_unref(p->msgs, e->enq_seg);
    st_log_unref(p->msgs, e->msg_seg);
    e->enq_seg = eloc.segment;
    e->msg_seg = mloc.segment;
    e->msg_off = mloc.offset;
    return copied(t);
}

/* ---- the walk over every stored position ---- */

static void enter_queue(tidy *t, qm_queue *top)
{
    sl_free(t->qname);
    t->qname = sl_xstrdup(top->name);
    t->q_after = 0;
    free_names(t->subs, t->nsubs);
    t->subs = NULL;
    t->nsubs = t->si = 0;
    t->unit_inc = t->cursor = 0;
    size_t cap = top->subqueues ? sl_map_count(top->subqueues) : 0, it = 0, kl;
    const char *k;
    void *v;
    t->subs = sl_xmalloc((cap ? cap : 1) * sizeof *t->subs);
    while (t->nsubs < cap && sl_map_next(top->subqueues, &it, &k, &kl, &v))
        t->subs[t->nsubs++] = sl_xstrndup(k, kl);
}

/* Visit from where the last slice stopped; 1 once every queue has been visited. */
static int walk(tidy *t, const qm_store_visitor *v)
{
    qm_node *n = t->p->node;
    while (t->vi < t->nvh && !t->stop) {
        qm_vhost *vh = qm_vhost_find(n, t->vhosts[t->vi], strlen(t->vhosts[t->vi]));
        sl_onode *o = NULL;
        if (vh)
            o = t->qname ? sl_oset_seek(&vh->queue_order, t->qname, strlen(t->qname), t->q_after)
                         : sl_oset_first(&vh->queue_order);
        if (!o) {
            t->vi++;
            sl_free(t->qname);
            t->qname = NULL;
            t->q_after = 0;
            continue;
        }
        qm_queue *top = SL_ONODE_OWNER(o, qm_queue, by_name);
        if (!t->qname || t->q_after || strcmp(top->name, t->qname) != 0)
            enter_queue(t, top);
        qm_queue *unit = top;
        if (t->si > 0)
            unit = qm_queue_subqueue(top, t->subs[t->si - 1], strlen(t->subs[t->si - 1]), 0);
        if (unit && unit->incarnation != t->unit_inc) {
            t->unit_inc = unit->incarnation; /* another queue under that name: from its start */
            t->cursor = 0;
        }
        if (unit && !qm_queue_visit_stored(unit, &t->cursor, v, t))
            return 0; /* the slice is over */
        if (t->si < t->nsubs) {
            t->si++;
            t->unit_inc = t->cursor = 0;
        } else {
            t->q_after = 1; /* the next top-level queue */
        }
    }
    return t->vi >= t->nvh;
}

/* ---- choosing ---- */

static uint64_t freed_bytes(const tidy *t, const uint8_t *gone, uint8_t *del)
{
    st_log_plan(t->segs, t->nsegs, gone, del);
    uint64_t b = 0;
    for (size_t i = 0; i < t->nsegs; i++)
        if (del[i])
            b += t->segs[i].bytes;
    return b;
}

static void choose(tidy *t)
{
    size_t n = t->nsegs;
    uint8_t *del = sl_xmalloc(n ? n : 1);
    size_t old_end = n > YOUNG_SEGMENTS ? n - YOUNG_SEGMENTS : 0; /* [0, old_end) may be copied */
    for (size_t i = 0; i < n; i++) {
        const st_seg_info *s = &t->segs[i];
        t->chosen[i] = !t->p->opt.no_compact && i < old_end && s->refs && s->written &&
                       !t->pinned[i] && t->live[i] * LIVE_SHARE_DEN <= s->bytes * LIVE_SHARE_NUM;
    }
    /* A segment mostly live but old may keep far more dead space behind it (removal records
     * that depend on it): copy it too when that frees at least UNBLOCK_GAIN times its size. */
    uint64_t freed = freed_bytes(t, t->chosen, del);
    for (int round = 0; round < 8 && !t->p->opt.no_compact; round++) {
        long best = -1;
        for (size_t i = 0; i < old_end; i++) {
            const st_seg_info *s = &t->segs[i];
            if (t->chosen[i] || del[i] || !s->refs || !s->written || t->pinned[i])
                continue;
            best = (long)i; /* the oldest one staying that could go */
            break;
        }
        if (best < 0)
            break;
        t->chosen[best] = 1;
        uint64_t with = freed_bytes(t, t->chosen, del);
        if (with < freed + UNBLOCK_GAIN * t->live[best] + t->segs[best].bytes) {
            t->chosen[best] = 0; /* not worth it: and an older blocker stays anyway */
            freed_bytes(t, t->chosen, del);
            break;
        }
        freed = with;
    }
    for (size_t i = 0; i < n; i++)
        t->res.segments_compacted += t->chosen[i];
    sl_free(del);
}

/* ---- the steps ---- */

int persist_tidy_running(const persist *p)
{
    return p->tidy != NULL;
}

int persist_tidy_start(persist *p)
{
    if (p->tidy)
        return 1;
    tidy *t = sl_xcalloc(1, sizeof *t);
    t->p = p;
    t->t0 = sl_now_ms();
    p->tidy = t;
    return 0;
}

int persist_tidy_start_reap(persist *p)
{
    if (persist_tidy_start(p))
        return 1;
    p->tidy->reap_only = 1;
    return 0;
}

int persist_tidy_reaping(const persist *p)
{
    return p->tidy && p->tidy->reap_only;
}

static uint64_t msgs_bytes(const persist *p)
{
    st_log_stats ls;
    st_log_get_stats(p->msgs, &ls);
    return ls.bytes;
}

static void begin_measure(tidy *t)
{
    persist *p = t->p;
    sl_free(t->segs);
    sl_free(t->live);
    sl_free(t->pinned);
    sl_free(t->chosen);
    t->nsegs = st_log_segments(p->msgs, &t->segs);
    t->live = sl_xcalloc(t->nsegs ? t->nsegs : 1, sizeof *t->live);
    t->pinned = sl_xcalloc(t->nsegs ? t->nsegs : 1, 1);
    t->chosen = sl_xcalloc(t->nsegs ? t->nsegs : 1, 1);
    t->res.bytes_before = msgs_bytes(p);
    walk_reset(t);
    t->phase = T_MEASURE;
}

/* Anything worth a walk: a segment that is referenced, written and not the newest. */
static int anything_to_compact(const tidy *t)
{
    for (size_t i = 0; i < t->nsegs; i++)
        if (t->segs[i].refs && t->segs[i].written && !t->segs[i].current)
            return 1;
    return 0;
}

int persist_tidy_step(persist *p, uint64_t budget_us, persist_tidy_result *out)
{
    tidy *t = p->tidy;
    if (!t)
        return PERSIST_TIDY_DONE;
    t->deadline_us = sl_now_us() + budget_us;
    t->stop = 0;
    t->visits = 0;
    static const qm_store_visitor measure = {measure_pos, measure_paged};
    static const qm_store_visitor copy = {copy_pos, copy_paged};
    switch (t->phase) {
    case T_REAP:
        if (t->reap_only) {
            /* Only what is unreferenced already: no walk, no copies, and no wait for the
             * reaper of purges (what it still holds stays for the next one). */
            t->res.bytes_before = msgs_bytes(p);
            st_log_mark_dead(p->msgs);
            t->fence_gen = p->gen_open;
            p->need_sync = 1;
            t->phase = T_FENCE;
            return PERSIST_TIDY_WAIT;
        }
        /* Messages purges and deletions left behind still hold their segments. */
        if (p->node->graves)
            return PERSIST_TIDY_WAIT;
        begin_measure(t);
        if (!anything_to_compact(t)) {
            t->phase = T_COPY; /* nothing to copy: straight to the receiver states */
            t->vi = t->nvh;
        }
        return PERSIST_TIDY_MORE;
    case T_MEASURE:
        if (!walk(t, &measure))
            return PERSIST_TIDY_MORE;
        /* a receiver's state can always be written again */
        if (p->eod_in) {
            size_t it = 0, kl;
            const char *k;
            void *v;
            while (sl_map_next(p->eod_in, &it, &k, &kl, &v))
                if (((persist_eod_in *)v)->logged)
                    add_live(t, ((persist_eod_in *)v)->seg, EOD_BYTES, 1);
        }
        /* and so can a stream's tracked reference */
        for (qm_queue *q = p->node->streams; q; q = q->st_next) {
            size_t it = 0;
            qm_stream_track *tr;
            while (qm_stream_track_next(q, &it, &tr))
                if (tr->st_logged)
                    add_live(t, tr->st_seg, TRACK_BYTES + tr->ref_len, 1);
        }
        st_fault_point("tidy-measured");
        t->phase = T_CHOOSE;
        return PERSIST_TIDY_MORE;
    case T_CHOOSE:
        choose(t);
        walk_reset(t);
        if (!t->res.segments_compacted)
            t->vi = t->nvh; /* no walk needed */
        t->phase = T_COPY;
        return PERSIST_TIDY_MORE;
    case T_COPY:
        if (st_log_pending(p->msgs) > COPY_PENDING_MAX)
            return PERSIST_TIDY_WAIT; /* the copies wait for the disk to take what is buffered */
        if (!walk(t, &copy)) {
            st_fault_point("tidy-relocated");
            return PERSIST_TIDY_MORE;
        }
        persist_refresh_eod_in(p);
        persist_refresh_stream_tracking(p);
        st_fault_point("tidy-relocated");
        /* Everything appended up to here, copies and whatever dropped references, must be
         * durable before a segment unreferenced now is deleted. */
        st_log_mark_dead(p->msgs);
        t->fence_gen = p->gen_open;
        p->need_sync = 1;
        t->phase = T_FENCE;
        return PERSIST_TIDY_WAIT;
    case T_FENCE:
        if (p->gen_durable < t->fence_gen) /* its own disk: never gated by the cluster */
            return PERSIST_TIDY_WAIT;
        st_fault_point(t->reap_only ? "reap-synced" : "tidy-synced");
        t->phase = T_RECLAIM;
        /* fall through */
    case T_RECLAIM: {
        st_reclaim_stats rs = {0, 0, 0};
        st_log_reclaim_marked(p->msgs, &rs);
        /* The deleted segments' closes (where their blocks are freed) and the directory
         * fsync are the next batch's, on the sync thread: ask for one. */
        if (rs.segments_deleted)
            p->need_sync = 1;
        t->res.segments_freed = rs.segments_deleted;
        t->res.bytes_freed = rs.bytes_freed;
        t->res.holes = rs.holes;
        t->res.bytes_after = msgs_bytes(p);
        t->res.ms = sl_now_ms() - t->t0;
        st_fault_point(t->reap_only ? "reap-done" : "tidy-done");
        /* A reap runs as often as segments empty: it says so only at debug level. */
        sl_log(t->reap_only ? SL_LOG_DEBUG : SL_LOG_INFO,
               "%s: freed %llu segment(s), %llu bytes (%llu with older segments kept), "
               "compacted %llu segment(s): %llu records, %llu bytes copied; messages now "
               "%llu bytes on disk (%llu before), %llu ms",
               t->reap_only ? "tidy (reap)" : "tidy", (unsigned long long)rs.segments_deleted,
               (unsigned long long)rs.bytes_freed, (unsigned long long)rs.holes,
               (unsigned long long)t->res.segments_compacted,
               (unsigned long long)t->res.records_copied, (unsigned long long)t->res.bytes_copied,
               (unsigned long long)t->res.bytes_after, (unsigned long long)t->res.bytes_before,
               (unsigned long long)t->res.ms);
        if (out)
            *out = t->res;
        persist_tidy_free(p);
        return PERSIST_TIDY_DONE;
    }
    }
    return PERSIST_TIDY_DONE;
}

/* Steps the one running to its end, syncing inline; 0, or -1 if it could not be made durable
 * (then nothing was deleted). */
static int run_inline(persist *p, persist_tidy_result *out)
{
    char err[256];
    for (;;) {
        int rc = persist_tidy_step(p, UINT64_MAX / 2, out);
        if (rc == PERSIST_TIDY_DONE) {
            /* The deleted segments' closes (where their blocks are freed) and the directory
             * fsync are a batch's: run it now, as the broker does when TIDY is done, or an
             * idle store would hold the disk until its next write. */
            if (persist_commit_ex(p, 0, err, sizeof err) < 0)
                sl_error("tidy: %s", err);
            return 0;
        }
        if (rc == PERSIST_TIDY_WAIT && persist_commit_ex(p, 1, err, sizeof err) < 0) {
            sl_error("tidy: %s", err);
            if (persist_stalled(p) || st_log_failed(p->msgs)) {
                persist_tidy_free(p); /* cannot make it durable now: nothing is deleted */
                return -1;
            }
        }
    }
}

void persist_tidy_full(persist *p, persist_tidy_result *out)
{
    char err[256];
    memset(out, 0, sizeof *out);
    qm_node_reap(p->node, 0);
    /* Judge segments by what is on disk: make what is buffered durable first. */
    if (persist_commit_ex(p, 1, err, sizeof err) < 0)
        sl_error("tidy: %s", err);
    /* A reap's result is not a TIDY's: finish it, then begin. */
    if (persist_tidy_reaping(p) && run_inline(p, out) < 0)
        return;
    memset(out, 0, sizeof *out);
    persist_tidy_start(p);
    run_inline(p, out);
}

void persist_tidy(persist *p, uint64_t *segments, uint64_t *bytes)
{
    persist_tidy_result r;
    persist_tidy_full(p, &r);
    *segments = r.segments_freed;
    *bytes = r.bytes_freed;
}
