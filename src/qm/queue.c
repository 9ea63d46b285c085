/* queue.c - queues and subqueues: ready rings, declare/find, enqueue, get, purge, delete.
 *
 * Ready positions are kept in one ring per priority level (x-max-priority + 1 levels, or
 * one), each sorted by lookup id. Enqueue appends (ids only grow), requeue and moves insert
 * at the lookup-id place by binary search, delivery pops the head of the highest non-empty
 * level. So requeued messages come back at their original place and lookups by id are
 * O(log n) over the ready set plus a walk of the (small) locked list.
 *
 * Counters: n_ready/bytes_ready follow the rings; n_locked/n_purge_pending follow q->locked;
 * bytes_total counts the body bytes of every position that is not DELETED.
 *
 * A queue is never freed from inside an operation on that same queue: subqueues that
 * become empty and unused are only marked (scheduled for dispatch) and removed by
 * qm_node_run_dispatch / qm_node_tick.
 */
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "core/u64tab.h"
#include "qm/qm_internal.h"

/* ---- rings ---- */

static void ring_grow(qm_ring *r)
{
    size_t ncap = r->cap ? r->cap * 2 : 8;
    qm_position **nb = sl_xmalloc(ncap * sizeof *nb);
    for (size_t i = 0; i < r->len; i++)
        nb[i] = qm_ring_at(r, i);
    sl_free(r->buf);
    r->buf = nb;
    r->cap = ncap;
    r->head = 0;
}

static inline qm_position **ring_slot(qm_ring *r, size_t i)
{
    return &r->buf[(r->head + i) & (r->cap - 1)];
}

/* First index whose lookup id is greater than id (== len when none). */
static size_t ring_upper(const qm_ring *r, uint64_t id)
{
    size_t lo = 0, hi = r->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (qm_ring_at(r, mid)->lookup_id <= id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void ring_insert_sorted(qm_ring *r, qm_position *pos)
{
    if (r->len == r->cap)
        ring_grow(r);
    size_t idx = ring_upper(r, pos->lookup_id);
    if (idx < r->len / 2) {
        /* shift the front part one step towards the head */
        r->head = (r->head - 1) & (r->cap - 1);
        for (size_t i = 0; i < idx; i++)
            *ring_slot(r, i) = *ring_slot(r, i + 1);
    } else {
        for (size_t i = r->len; i > idx; i--)
            *ring_slot(r, i) = *ring_slot(r, i - 1);
    }
    *ring_slot(r, idx) = pos;
    r->len++;
}

static void ring_remove_at(qm_ring *r, size_t idx)
{
    if (idx < r->len / 2) {
        for (size_t i = idx; i > 0; i--)
            *ring_slot(r, i) = *ring_slot(r, i - 1);
        r->head = (r->head + 1) & (r->cap - 1);
    } else {
        for (size_t i = idx; i + 1 < r->len; i++)
            *ring_slot(r, i) = *ring_slot(r, i + 1);
    }
    r->len--;
}

/* Index of the position with this id, or -1. */
static long ring_find(const qm_ring *r, uint64_t id)
{
    size_t idx = ring_upper(r, id);
    if (idx > 0 && qm_ring_at(r, idx - 1)->lookup_id == id)
        return (long)(idx - 1);
    return -1;
}

static int level_of(const qm_queue *q, const qm_message *m)
{
    if (q->args.max_priority <= 0)
        return 0;
    return m->priority < q->args.max_priority ? m->priority : q->args.max_priority;
}

static qm_ring *top_ring(qm_queue *q)
{
    qm_ready *rd = qm_ready_of(q);
    if (!q->n_ready)
        return NULL;
    for (int l = rd->nlevels - 1; l >= 0; l--)
        if (rd->levels[l].len)
            return &rd->levels[l];
    return NULL;
}

void qm_ready_insert(qm_queue *q, qm_position *pos)
{
    qm_pos_lock_drop(pos); /* ready: no holder, no transaction, on no list */
    qm_ring *r = &qm_ready_of(q)->levels[level_of(q, pos->msg)];
    pos->state = QM_POS_AVAILABLE;
    pos->queue = q;
    if (r->len && r->len < r->cap && qm_ring_at(r, r->len - 1)->lookup_id < pos->lookup_id) {
        *ring_slot(r, r->len) = pos; /* the common case: a fresh id goes at the tail */
        r->len++;
    } else {
        ring_insert_sorted(r, pos);
        /* Expiry is checked at the head: a new head's deadline may be the queue's next. */
        if (qm_pos_expires(pos) && qm_ring_at(r, 0) == pos)
            qm_queue_wake_at(q, qm_pos_expires(pos));
    }
    q->n_ready++;
    q->bytes_ready += pos->msg->body_len;
}

/* ---- paged-out ready messages ----
 *
 * Each priority level (one in a queue without priorities) has its paged tail (qm_pagedq).
 * Invariant: every paged entry of a level is newer (higher lookup id) than what that level's
 * ring held when it was paged, so the paged tail continues the ring; entries come back in
 * batches from the front when the ring runs dry (a priority queue delivers its highest
 * non-empty level, ring or paged tail). Expiry is checked at the head, in memory: a paged
 * front whose deadline passed comes back to be expired.
 */

/* The paged tail of level l, or NULL when q has never paged. */
static qm_pagedq *pq_of(const qm_queue *q, int l)
{
    return q->pg ? &q->pg[l] : NULL;
}

/* The TTL deadline of entry i (0 = oldest) of pq, 0 for none. */
static uint64_t pq_exp_at(const qm_pagedq *pq, size_t i)
{
    return pq->exp ? pq->exp[pq->head + i] : 0;
}

static const qm_pslot *pq_front(const qm_pagedq *pq)
{
    return &pq->v[pq->head];
}

/* ---- paged slots: the 24-byte form of a qm_paged (qm.h) ----
 *
 * A tail's side table holds, for each entry flagged QM_PSLOT_MORE, what the slot leaves out.
 * Nearly every paged entry is a message published once into one queue, whose enqueue record
 * went out with it: those cost their slot only. */
typedef struct pslot_more {
    uint64_t lookup_id; /* the key */
    uint32_t enq_seg;
    uint16_t move_count;
    uint8_t redelivered, flags; /* 1 xact, 2 xact_cont, 4 watch */
} pslot_more;

_Static_assert(sizeof(qm_pslot) == 24, "a paged message costs 24 bytes of its tail");
_Static_assert(sizeof(qm_pslot) <= sizeof(qm_paged), "adopt_paged packs entries in place");

static int pslot_plain(const qm_paged *e)
{
    return e->enq_seg == e->msg_seg && !e->move_count && !e->redelivered && !e->xact &&
           !e->xact_cont && !e->watch;
}

/* The slot for e in pq, its extra fields put in pq's side table when it needs them. */
static qm_pslot pslot_make(qm_pagedq *pq, const qm_paged *e)
{
    /* records start below segment_size (at most 1 GiB): the top two bits are free */
    qm_pslot s = {e->lookup_id, (e->msg_off & QM_PSLOT_OFF) | (e->logged ? QM_PSLOT_LOGGED : 0),
                  e->msg_seg, e->msg_len, e->body_len};
    if (!pslot_plain(e)) {
        if (!pq->more) {
            pq->more = sl_xmalloc(sizeof *pq->more);
            sl_u64tab_init(pq->more, sizeof(pslot_more));
        }
        int created;
        pslot_more *x = sl_u64tab_put(pq->more, e->lookup_id, &created);
        x->enq_seg = e->enq_seg;
        x->move_count = e->move_count;
        x->redelivered = e->redelivered;
        x->flags = (uint8_t)(e->xact | e->xact_cont << 1 | e->watch << 2);
        s.off |= QM_PSLOT_MORE;
    }
    return s;
}

qm_paged qm_pslot_get(const sl_u64tab *more, int level, const qm_pslot *s)
{
    qm_paged e = {
        .lookup_id = s->lookup_id,
        .msg_off = s->off & QM_PSLOT_OFF,
        .msg_seg = s->msg_seg,
        .msg_len = s->msg_len,
        .enq_seg = s->msg_seg,
        .body_len = s->body_len,
        .logged = (s->off & QM_PSLOT_LOGGED) != 0,
        .priority = (uint8_t)level,
    };
    const pslot_more *x = (s->off & QM_PSLOT_MORE) ? sl_u64tab_get(more, s->lookup_id) : NULL;
    if (x) {
        e.enq_seg = x->enq_seg;
        e.move_count = x->move_count;
        e.redelivered = x->redelivered;
        e.xact = x->flags & 1;
        e.xact_cont = (x->flags >> 1) & 1;
        e.watch = (x->flags >> 2) & 1;
    }
    return e;
}

void qm_pslot_more_free(sl_u64tab *more)
{
    if (more) {
        sl_u64tab_free(more);
        sl_free(more);
    }
}

/* Entry i (0 = oldest) of level l's tail. */
static qm_paged pq_get(const qm_pagedq *pq, int l, size_t i)
{
    return qm_pslot_get(pq->more, l, &pq->v[pq->head + i]);
}

/* Slot s leaves pq: its side-table entry with it. */
static void pslot_forget(qm_pagedq *pq, const qm_pslot *s)
{
    if (s->off & QM_PSLOT_MORE)
        sl_u64tab_del(pq->more, s->lookup_id, NULL);
}

/* The level of a paged entry in q, as level_of is for a message in memory. */
static int level_of_paged(const qm_queue *q, const qm_paged *e)
{
    if (q->args.max_priority <= 0)
        return 0;
    return e->priority < q->args.max_priority ? e->priority : q->args.max_priority;
}

/* The head of r changed (taken out): its deadline, or its level's paged front's once the ring
 * is dry, may be earlier than what the deadline heap has for q. */
static void head_changed(qm_queue *q, qm_ring *r)
{
    if (r->len) {
        uint64_t at = qm_pos_expires(qm_ring_at(r, 0));
        if (at)
            qm_queue_wake_at(q, at);
        return;
    }
    qm_pagedq *pq = pq_of(q, (int)(r - qm_ready_of(q)->levels));
    if (pq && pq->len && pq_exp_at(pq, 0))
        qm_queue_wake_at(q, pq_exp_at(pq, 0));
}

/* Append e to its level's tail with its deadline (0: none). The deadlines' array exists only
 * once one entry has a deadline, so a paged queue without TTLs costs 24 bytes a message. */
static void paged_push(qm_queue *q, const qm_paged *e, uint64_t expires_at)
{
    int l = level_of_paged(q, e);
    if (!q->pg)
        q->pg = sl_xcalloc((size_t)qm_ready_of(q)->nlevels, sizeof *q->pg);
    qm_pagedq *pq = &q->pg[l];
    if (pq->head + pq->len == pq->cap) {
        if (pq->head > pq->cap / 2) {
            memmove(pq->v, pq->v + pq->head, pq->len * sizeof *pq->v);
            if (pq->exp)
                memmove(pq->exp, pq->exp + pq->head, pq->len * sizeof *pq->exp);
            pq->head = 0;
        } else {
            pq->cap = pq->cap ? pq->cap * 2 : 1024;
            pq->v = sl_xrealloc(pq->v, pq->cap * sizeof *pq->v);
            if (pq->exp)
                pq->exp = sl_xrealloc(pq->exp, pq->cap * sizeof *pq->exp);
        }
    }
    if (expires_at && !pq->exp)
        pq->exp = sl_xcalloc(pq->cap, sizeof *pq->exp);
    if (pq->exp)
        pq->exp[pq->head + pq->len] = expires_at;
    pq->v[pq->head + pq->len++] = pslot_make(pq, e);
    q->paged_len++;
    if (expires_at && pq->len == 1 && !qm_ready_of(q)->levels[l].len)
        qm_queue_wake_at(q, expires_at); /* the front, with nothing in memory before it */
}

/* Take entry i (0 = oldest) out of level l's paged tail and bring it back as a ready
 * position; returns it, or NULL when the store could not give it back (then it is dropped). */
static qm_position *page_in_at(qm_queue *q, int l, size_t i)
{
    qm_pagedq *pq = &q->pg[l];
    qm_paged e = pq_get(pq, l, i);
    pslot_forget(pq, &pq->v[pq->head + i]);
    uint64_t expires_at = pq_exp_at(pq, i);
    if (i == 0) {
        pq->head++;
    } else {
        memmove(pq->v + pq->head + i, pq->v + pq->head + i + 1, (pq->len - i - 1) * sizeof *pq->v);
        if (pq->exp)
            memmove(pq->exp + pq->head + i, pq->exp + pq->head + i + 1,
                    (pq->len - i - 1) * sizeof *pq->exp);
    }
    if (--pq->len == 0)
        pq->head = 0;
    q->paged_len--;
    q->n_ready--;
    q->bytes_ready -= e.body_len;
    q->bytes_total -= e.body_len;
    qm_position *pos =
        qm_persist && qm_persist->page_in ? qm_persist->page_in(qm_persist_ctx, q, &e) : NULL;
    if (!pos) {
        QM_PERSIST(paged_dropped, q, &e, 1);
        return NULL;
    }
    qm_pos_set_expires(pos, expires_at); /* the deadline it had when it went out */
    q->bytes_total += pos->msg->body_len;
    qm_ready_insert(q, pos);
    return pos;
}

static void page_in_some(qm_queue *q, int l, size_t want)
{
    if (qm_memory_over_budget() && want > 8)
        want = 8; /* under pressure: just enough to keep deliveries going */
    for (size_t done = 0; q->pg[l].len && done < want; done++)
        page_in_at(q, l, 0);
}

/* Level l's ring, after bringing its paged front back when the ring has run dry or when
 * something newer than the paged front got into the ring (a lookup by id paged one in). */
static qm_ring *level_ready(qm_queue *q, int l)
{
    qm_ring *r = &qm_ready_of(q)->levels[l];
    qm_pagedq *pq = pq_of(q, l);
    while (pq && pq->len && (!r->len || qm_ring_at(r, 0)->lookup_id > pq_front(pq)->lookup_id))
        page_in_some(q, l, 256);
    return r;
}

void qm_queue_adopt_paged(qm_queue *q, qm_paged *v, uint64_t *exp, size_t n)
{
    if (q->paged_len || qm_ready_of(q)->nlevels > 1) {
        /* not the common case (a priority queue spreads them over its levels): append them
         * one by one */
        for (size_t i = 0; i < n; i++)
            qm_queue_restore_paged(q, &v[i], exp ? exp[i] : 0);
        sl_free(v);
        sl_free(exp);
        return;
    }
    if (!q->pg)
        q->pg = sl_xcalloc(1, sizeof *q->pg);
    qm_pagedq *pq = &q->pg[0];
    sl_free(pq->v);
    sl_free(pq->exp);
    qm_pslot_more_free(pq->more);
    pq->more = NULL;
    /* Packed in place, front to back: slot i ends at byte 24 (i + 1), never past the start
     * of entry i + 1 (32 (i + 1)), and entry i is copied out before its slot is written. */
    unsigned char *raw = (unsigned char *)v; /* memcpy: the two types share these bytes */
    uint64_t bytes = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        qm_paged e;
        memcpy(&e, raw + i * sizeof e, sizeof e);
        bytes += e.body_len;
        if (e.lookup_id > top)
            top = e.lookup_id;
        qm_pslot sl = pslot_make(pq, &e);
        memcpy(raw + i * sizeof sl, &sl, sizeof sl);
    }
    /* the slack, and the 8 bytes each entry saved, go back */
    pq->v = n ? sl_xrealloc(raw, n * sizeof(qm_pslot)) : (qm_pslot *)(void *)raw;
    pq->exp = exp;
    pq->head = 0;
    pq->len = n;
    pq->cap = n;
    q->paged_len = n;
    q->n_ready += n;
    q->bytes_ready += bytes;
    q->bytes_total += bytes;
    qm_node *nd = qm_queue_node(q);
    if (n && nd->next_lookup_id <= top)
        nd->next_lookup_id = top + 1;
    if (n && exp && exp[0] && !qm_ready_of(q)->levels[0].len)
        qm_queue_wake_at(q, exp[0]);
}

void qm_queue_restore_paged(qm_queue *q, const qm_paged *e, uint64_t expires_at)
{
    qm_node *n = qm_queue_node(q);
    paged_push(q, e, expires_at);
    q->n_ready++;
    q->bytes_ready += e->body_len;
    q->bytes_total += e->body_len;
    if (n->next_lookup_id <= e->lookup_id)
        n->next_lookup_id = e->lookup_id + 1;
}

qm_position *qm_ready_pop(qm_queue *q)
{
    qm_ring *r = NULL;
    if (q->paged_len) {
        /* the highest level with something ready, in memory or paged out */
        qm_ready *rd = qm_ready_of(q);
        for (int l = rd->nlevels - 1; l >= 0 && !r; l--) {
            qm_ring *lr = level_ready(q, l);
            if (lr->len)
                r = lr;
        }
    } else {
        r = top_ring(q);
    }
    if (!r)
        return NULL;
    qm_position *pos = qm_ring_at(r, 0);
    r->head = (r->head + 1) & (r->cap - 1);
    r->len--;
    q->n_ready--;
    q->bytes_ready -= pos->msg->body_len;
    head_changed(q, r);
    return pos;
}

int qm_ready_remove(qm_queue *q, qm_position *pos)
{
    qm_ring *r = &qm_ready_of(q)->levels[level_of(q, pos->msg)];
    long idx = ring_find(r, pos->lookup_id);
    if (idx < 0 || qm_ring_at(r, (size_t)idx) != pos)
        return 0;
    ring_remove_at(r, (size_t)idx);
    q->n_ready--;
    q->bytes_ready -= pos->msg->body_len;
    if (idx == 0)
        head_changed(q, r);
    return 1;
}

static qm_ready *ready_new(int nlevels)
{
    qm_ready *rd = sl_xcalloc(1, sizeof(qm_ready) + (size_t)nlevels * sizeof(qm_ring));
    rd->nlevels = nlevels;
    return rd;
}

/* Take every ready message out of q (purge, delete) and return how many. O(priority levels):
 * the rings and the paged array are handed whole to the node's graveyard, which frees them a
 * slice per loop turn (qm_node_reap), so purging a million messages does not stall the loop. */
static uint64_t ready_clear(qm_queue *q, int notify, qm_delete_reason reason)
{
    qm_node *n = qm_queue_node(q);
    qm_ready *rd = qm_ready_of(q);
    uint64_t count = q->n_ready;
    for (int l = 0; l < rd->nlevels; l++) {
        qm_ring *r = &rd->levels[l];
        if (r->len) {
            qm_grave *g = sl_xcalloc(1, sizeof *g);
            g->ring = *r;
            qm_grave_push(n, g);
        } else {
            sl_free(r->buf);
        }
        memset(r, 0, sizeof *r);
    }
    for (int l = 0; q->pg && l < rd->nlevels; l++) {
        qm_pagedq *pq = &q->pg[l];
        if (pq->len) {
            qm_grave *g = sl_xcalloc(1, sizeof *g);
            g->paged = pq->v;
            g->more = pq->more;
            g->paged_head = pq->head;
            g->paged_len = pq->len;
            if (notify) { /* its watched entries are told about a slice per turn */
                g->notify = q;
                g->reason = reason;
                q->graves_held++;
            }
            qm_grave_push(n, g);
        } else {
            sl_free(pq->v);
            qm_pslot_more_free(pq->more);
        }
        sl_free(pq->exp); /* the graveyard needs no deadlines */
    }
    sl_free(q->pg);
    q->pg = NULL;
    q->paged_len = 0;
    q->bytes_total -= q->bytes_ready;
    q->n_ready = 0;
    q->bytes_ready = 0;
    return count;
}

/* ---- expiry and dropping ---- */

/* Drop a position just taken out of the ready rings. */
static void ready_drop(qm_queue *q, qm_position *pos, qm_delete_reason reason)
{
    q->bytes_total -= pos->msg->body_len;
    int grouped = 0;
    if (reason == QM_DEL_EXPIRED) {
        q->stat_expired++;
        grouped = qm_removed(q, pos, reason);
    }
    if (reason == QM_DEL_EXPIRED || reason == QM_DEL_MAXLEN || reason == QM_DEL_DELIVERY_LIMIT)
        qm_deadletter(q, pos->msg, reason);
    qm_position_free(pos); /* its removal record: in the hook's group when it began one */
    qm_removed_end(grouped);
}

static int expired(const qm_position *pos, uint64_t now)
{
    return qm_pos_expires(pos) && qm_pos_expires(pos) <= now;
}

/* Expiry has a budget per loop turn (qm_node_new_turn): a million messages whose TTL ends at
 * once are dropped (and dead-lettered) QM_EXPIRE_PER_TURN a turn, the queue due again at once,
 * instead of in one 0.75 s turn that every connection waits behind. Without a door calling
 * qm_node_new_turn (unit tests) there is no bound. 1 when one more may be expired now. */
static int expire_take(qm_node *n)
{
    if (!n->expire_bounded)
        return 1;
    if (!n->expire_left)
        return 0;
    n->expire_left--;
    return 1;
}

void qm_node_new_turn(qm_node *n)
{
    n->expire_bounded = 1;
    n->expire_left = QM_EXPIRE_PER_TURN;
}

qm_position *qm_queue_take_head(qm_queue *q, uint64_t now)
{
    qm_node *n = qm_queue_node(q);
    for (;;) {
        qm_position *pos = qm_ready_pop(q);
        if (pos && !expired(pos, now) && qm_quorum_take_over(q, pos)) {
            ready_drop(q, pos, QM_DEL_DELIVERY_LIMIT);
            continue;
        }
        if (!pos || !expired(pos, now))
            return pos;
        if (!expire_take(n)) {
            /* Out of budget: the expired head stays where it was, nothing is handed out
             * this turn, and the tick (due again at once) goes on clearing it. */
            qm_ready_insert(q, pos);
            q->expiry_backlog = 1;
            return NULL;
        }
        ready_drop(q, pos, QM_DEL_EXPIRED);
    }
}

static int paged_front_due(const qm_queue *q, int l, uint64_t now)
{
    const qm_pagedq *pq = pq_of(q, l);
    return pq && pq->len && pq_exp_at(pq, 0) && pq_exp_at(pq, 0) <= now;
}

uint64_t qm_queue_expire_heads(qm_queue *q, uint64_t now)
{
    qm_node *n = qm_queue_node(q);
    qm_ready *rd = qm_ready_of(q);
    uint64_t next = 0;
    uint64_t dropped = 0;
    for (int l = 0; l < rd->nlevels; l++) {
        qm_ring *r = &rd->levels[l];
        for (;;) {
            /* Paged messages follow their level's ring: an expired front comes back to be
             * expired like any other, dead-lettering included. */
            if (!r->len && paged_front_due(q, l, now)) {
                page_in_at(q, l, 0);
                continue;
            }
            if (!r->len)
                break;
            qm_position *pos = qm_ring_at(r, 0);
            if (!expired(pos, now)) {
                if (qm_pos_expires(pos) && (!next || qm_pos_expires(pos) < next))
                    next = qm_pos_expires(pos);
                break;
            }
            if (!expire_take(n)) {
                next = now; /* more to expire: due again at once, next turn */
                goto out;
            }
            dropped++;
            ring_remove_at(r, 0);
            q->n_ready--;
            q->bytes_ready -= pos->msg->body_len;
            ready_drop(q, pos, QM_DEL_EXPIRED);
            /* dead-lettering may have enqueued into q itself: r stays valid (rings are
             * never reallocated as a whole, only their buffers) */
        }
    }
    for (int l = 0; q->paged_len && l < rd->nlevels; l++) {
        const qm_pagedq *pq = &q->pg[l];
        uint64_t at = pq->len && !rd->levels[l].len ? pq_exp_at(pq, 0) : 0;
        if (at && (!next || at < next))
            next = at;
    }
    q->expiry_backlog = 0;
out:
    /* Consumers turned away while an expired head was being cleared get what is behind it. */
    if (dropped && q->n_ready && q->consumers)
        qm_queue_schedule_dispatch(q);
    return next;
}

/* ---- allocation, declare, find ---- */

void qm_queue_args_init(qm_queue_args *a)
{
    memset(a, 0, sizeof *a);
    a->message_ttl = a->expires = a->max_length = a->max_length_bytes = -1;
    a->max_segment_bytes = -1;
}

qm_queue *qm_queue_alloc(qm_vhost *vh, const char *name, size_t len)
{
    qm_queue *q = sl_xcalloc(1, sizeof *q);
    q->name = sl_xstrndup(name, len);
    q->vhost = vh;
    q->incarnation = vh->node->next_incarnation++;
    qm_queue_args_init(&q->args);
    q->ready_impl = ready_new(1);
    q->last_used = qm_now(vh->node);
    return q;
}

/* 22 url-safe base64 characters from 16 random bytes, as RabbitMQ's amq.gen- names. */
static void gen_name(char out[31])
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint8_t rnd[17] = {0};
    if (getrandom(rnd, 16, 0) != 16) {
        /* getrandom cannot fail for 16 bytes once the pool is up; keep names unique anyway */
        static uint64_t ctr;
        uint64_t t = sl_now_ms() ^ (++ctr << 40);
        memcpy(rnd, &t, sizeof t);
        memcpy(rnd + 8, &ctr, sizeof ctr);
    }
    memcpy(out, "amq.gen-", 8);
    int bits = 0, n = 0;
    uint32_t acc = 0;
    for (int i = 0; i < 17 && n < 22; i++) {
        acc = (acc << 8) | rnd[i];
        bits += 8;
        while (bits >= 6 && n < 22) {
            bits -= 6;
            out[8 + n++] = b64[(acc >> bits) & 63];
        }
    }
    out[30] = 0;
}

void qm_queue_gen_name(qm_vhost *vh, char out[31])
{
    do
        gen_name(out);
    while (sl_map_get(vh->queues, out, 30));
}

sl_err qm_queue_declare(qm_vhost *vh, const qm_queue_decl *d, qm_queue **out, int *created,
                        char *err, size_t errlen)
{
    char genbuf[31];
    const char *name = d->name;
    size_t len = d->name_len;
    qm_node *n = vh->node;

    if (len && memchr(name, ';', len)) {
        snprintf(err, errlen, "queue name '%.*s' is reserved: ';' names subqueues", (int)len, name);
        return SL_ERR_ACCESS_REFUSED;
    }
    if (!len) {
        do
            gen_name(genbuf);
        while (sl_map_get(vh->queues, genbuf, 30));
        name = genbuf;
        len = 30;
    }
    char *qname = sl_xstrndup(name, len);
    qm_queue_args a;
    qm_queue *q = sl_map_get(vh->queues, name, len);
    /* A recovered queue was checked when it was declared (and older versions took arguments
     * these checks refuse: it must come back all the same). */
    int fresh = !q && !d->incarnation;
    sl_err rc = fresh ? qm_queue_type_check(d, qname, vh->name, err, errlen) : SL_OK;
    if (!rc)
        rc = qm_queue_args_parse(d->arguments, qname, vh->name, &a, err, errlen);
    if (!rc && fresh && (rc = qm_queue_props_check(d, &a, qname, vh->name, err, errlen)))
        qm_queue_args_free(&a);
    if (rc) {
        sl_free(qname);
        return rc;
    }
    if (q) {
        if (q->exclusive != d->exclusive ||
            (q->exclusive && q->exclusive_owner != d->exclusive_owner)) {
            snprintf(err, errlen,
                     "cannot obtain exclusive access to locked queue '%s' in vhost '%s'. It "
                     "could be originally declared on another connection or the exclusive "
                     "property value does not match that of the original declaration.",
                     qname, vh->name);
            rc = SL_ERR_RESOURCE_LOCKED;
        } else if (q->durable != d->durable || q->auto_delete != d->auto_delete) {
            int dur = q->durable != d->durable;
            snprintf(err, errlen,
                     "inequivalent arg '%s' for queue '%s' in vhost '%s': received '%s' but "
                     "current is '%s'",
                     dur ? "durable" : "auto_delete", qname, vh->name,
                     (dur ? d->durable : d->auto_delete) ? "true" : "false",
                     (dur ? q->durable : q->auto_delete) ? "true" : "false");
            rc = SL_ERR_PRECONDITION;
        } else {
            rc = qm_queue_args_equivalent(&q->args, &a, qname, vh->name, err, errlen);
        }
        qm_queue_args_free(&a);
        sl_free(qname);
        if (rc)
            return rc;
        q->last_used = qm_now(n);
        *out = q;
        if (created)
            *created = 0;
        return SL_OK;
    }
    struct st_stream *st = NULL;
    if (a.stream && !d->incarnation && n->streams_refused) {
        snprintf(err, errlen, "%s", n->streams_refused);
        rc = SL_ERR_PRECONDITION;
    } else if (a.stream) {
        /* the log first: a queue whose log cannot be opened is not declared */
        uint64_t inc = d->incarnation ? d->incarnation : n->next_incarnation;
        rc = qm_stream_open(n, inc, &a, &st, err, errlen);
    }
    if (rc) {
        qm_queue_args_free(&a);
        sl_free(qname);
        return rc;
    }
    q = qm_queue_alloc(vh, name, len);
    sl_free(qname);
    if (st) {
        q->stream = st;
        qm_stream_link(q);
    }
    if (d->incarnation) {
        q->incarnation = d->incarnation;
        if (n->next_incarnation <= d->incarnation)
            n->next_incarnation = d->incarnation + 1;
    }
    q->durable = d->durable;
    q->exclusive = d->exclusive;
    q->auto_delete = d->auto_delete;
    q->exclusive_owner = d->exclusive ? d->exclusive_owner : NULL;
    q->is_outgoing = (uint8_t)qm_queue_name_is_outgoing(name, len);
    q->args = a;
    if (a.max_priority > 0) {
        sl_free(q->ready_impl);
        q->ready_impl = ready_new(a.max_priority + 1);
    }
    sl_map_put(vh->queues, q->name, len, q);
    sl_oset_insert(&vh->queue_order, &q->by_name, q->name, len);
    if (q->exclusive_owner)
        qm_exclusive_link(q);
    if (a.expires > 0)
        qm_queue_wake_at(q, q->last_used + (uint64_t)a.expires);
    QM_PERSIST(queue_created, q);
    *out = q;
    if (created)
        *created = 1;
    return SL_OK;
}

int qm_queue_name_is_outgoing(const char *name, size_t len)
{
    return len >= 7 && !strncasecmp(name, "DIRECT=", 7);
}

qm_queue *qm_queue_find_or_remote(qm_vhost *vh, const char *name, size_t len, int create)
{
    qm_queue *q = qm_queue_find(vh, name, len);
    qm_node *n = vh->node;
    if (!q && n->resolve_remote && len > 7)
        q = n->resolve_remote(vh, name, len, create, n->remote_ctx);
    return q;
}

qm_queue *qm_queue_subqueue(qm_queue *q, const char *sub, size_t len, int create)
{
    if (q->is_subqueue || !len || memchr(sub, ';', len))
        return NULL;
    qm_queue *s = q->subqueues ? sl_map_get(q->subqueues, sub, len) : NULL;
    if (s || !create)
        return s;
    size_t plen = strlen(q->name);
    char *full = sl_xmalloc(plen + 1 + len + 1);
    memcpy(full, q->name, plen);
    full[plen] = ';';
    memcpy(full + plen + 1, sub, len);
    full[plen + 1 + len] = 0;
    s = qm_queue_alloc(q->vhost, full, plen + 1 + len);
    sl_free(full);
    s->is_subqueue = 1;
    s->parent = q;
    s->durable = q->durable;
    if (q->args.max_priority > 0) {
        /* a subqueue is a part of its queue: its messages keep their priority order */
        s->args.max_priority = q->args.max_priority;
        sl_free(s->ready_impl);
        s->ready_impl = ready_new(q->args.max_priority + 1);
    }
    if (!q->subqueues)
        q->subqueues = sl_map_new();
    sl_map_put(q->subqueues, sub, len, s);
    QM_PERSIST(queue_created, s);
    return s;
}

qm_queue *qm_queue_find(qm_vhost *vh, const char *name, size_t len)
{
    const char *semi = memchr(name, ';', len);
    if (!semi)
        return sl_map_get(vh->queues, name, len);
    qm_queue *p = sl_map_get(vh->queues, name, (size_t)(semi - name));
    if (!p)
        return NULL;
    return qm_queue_subqueue(p, semi + 1, len - (size_t)(semi - name) - 1, 0);
}

/* ---- enqueue, get ---- */

static int over_limit(const qm_queue *q, uint64_t extra_n, uint64_t extra_bytes)
{
    if (q->args.max_length >= 0 && q->n_ready + extra_n > (uint64_t)q->args.max_length)
        return 1;
    if (q->args.max_length_bytes >= 0 &&
        q->bytes_ready + extra_bytes > (uint64_t)q->args.max_length_bytes)
        return 1;
    return 0;
}

int qm_queue_would_refuse(const qm_queue *q, uint64_t n, uint64_t bytes)
{
    return q->args.overflow != QM_OVERFLOW_DROP_HEAD && over_limit(q, n, bytes);
}

int qm_queue_never_holds(const qm_queue *q, uint64_t n, uint64_t bytes)
{
    if (q->args.overflow == QM_OVERFLOW_DROP_HEAD)
        return 0;
    return (q->args.max_length >= 0 && n > (uint64_t)q->args.max_length) ||
           (q->args.max_length_bytes >= 0 && bytes > (uint64_t)q->args.max_length_bytes);
}

int qm_queue_has_room(const qm_queue *q, uint64_t body_len)
{
    return !over_limit(q, 1, body_len);
}

sl_err qm_queue_accept(qm_queue *q, qm_position *pos)
{
    qm_message *m = pos->msg;
    uint64_t now = qm_now(qm_queue_node(q));

    if (q->stream) {
        /* a stream keeps the message in its log, not as a position */
        sl_err e = qm_stream_append(q, m);
        qm_position_free(pos);
        return e;
    }

    if (q->args.overflow != QM_OVERFLOW_DROP_HEAD && over_limit(q, 1, m->body_len)) {
        if (q->args.overflow == QM_OVERFLOW_REJECT_PUBLISH_DLX)
            qm_deadletter(q, m, QM_DEL_MAXLEN);
        qm_position_free(pos);
        return SL_ERR_RESOURCE;
    }
    /* TTL: the lower of the queue's x-message-ttl and the message's expiration */
    int64_t ttl = q->args.message_ttl;
    uint64_t exp_ms;
    if (qm_msg_expiration(m, &exp_ms) && (ttl < 0 || exp_ms < (uint64_t)ttl))
        ttl = (int64_t)exp_ms;
    qm_pos_set_expires(pos, ttl >= 0 ? now + (uint64_t)ttl : 0);

    q->bytes_total += m->body_len;
    q->stat_published++;
    qm_paged e;
    const qm_pagedq *pq = pq_of(q, level_of(q, m));
    if (qm_persist && qm_persist->page_out &&
        ((pq && pq->len) || (q->n_ready && qm_memory_over_budget())) &&
        qm_persist->page_out(qm_persist_ctx, pos, &e) == 0) {
        /* Over the memory budget: the message lives on in the store only. */
        paged_push(q, &e, qm_pos_expires(pos));
        q->n_ready++;
        q->bytes_ready += e.body_len;
        qm_position_free(pos);
    } else {
        qm_ready_insert(q, pos);
        QM_PERSIST(enqueued, pos);
    }
    if (q->args.overflow == QM_OVERFLOW_DROP_HEAD) {
        while (q->n_ready && over_limit(q, 0, 0))
            ready_drop(q, qm_ready_pop(q), QM_DEL_MAXLEN);
    }
    qm_queue_schedule_dispatch(q);
    return SL_OK;
}

sl_err qm_queue_enqueue(qm_queue *q, qm_message *m)
{
    qm_node *n = qm_queue_node(q);
    return qm_queue_accept(q, qm_position_new(q, m, n->next_lookup_id++));
}

qm_position *qm_queue_get(qm_queue *q, int no_ack, uint64_t *remaining)
{
    qm_node *n = qm_queue_node(q);
    uint64_t now = qm_now(n);
    q->last_used = now;
    qm_position *pos = qm_queue_take_head(q, now);
    if (pos)
        qm_position_hand_out(q, pos, no_ack);
    if (remaining)
        *remaining = q->n_ready;
    qm_queue_maybe_gc(q);
    return pos;
}

/* ---- purge, delete ---- */

/* The on_removed hook for each ready message in memory of a watched queue that a purge or
 * deletion takes; 1 when the queue is watched (a record group is then open: the caller closes
 * it after its own record, so those acknowledgements exist iff the purge or deletion does,
 * and passes 1 to ready_clear). The paged tails are not read here: reading every watched
 * entry back from the store in this turn would stall the loop for a deep queue (issue 33);
 * ready_clear hands them to the graveyard, which reads the watched ones (qm_paged.watch) a
 * slice per turn after the purge or delete record (qm_node_reap). Ring graves come before
 * paged ones, so the acknowledgements keep each level's order. */
static int notify_clear(qm_queue *q, qm_delete_reason reason)
{
    qm_node *n = qm_queue_node(q);
    if (!q->removal_watch || !n->on_removed || !q->n_ready)
        return 0;
    QM_PERSIST(tx_group, 1);
    qm_ready *rd = qm_ready_of(q);
    for (int l = 0; l < rd->nlevels; l++) {
        qm_ring *r = &rd->levels[l];
        for (size_t i = 0; i < r->len; i++)
            qm_removed_end(qm_removed(q, qm_ring_at(r, i), reason)); /* nested: no record */
    }
    return 1;
}

uint64_t qm_queue_purge(qm_queue *q)
{
    int grouped = notify_clear(q, QM_DEL_PURGED);
    /* One record, whatever the depth: every stored position of q so far is dead. */
    QM_PERSIST(purged, q);
    if (grouped)
        QM_PERSIST(tx_group, 0);
    uint64_t n = ready_clear(q, grouped, QM_DEL_PURGED);
    q->stat_purged += n;
    qm_dcount_clear(q); /* the purged never come back, and PurgePending ones never return */
    for (qm_position *p = q->locked; p; p = p->u.lk->lnext) {
        if (p->state == QM_POS_LOCKED && !p->in_tx_enqueue) {
            p->state = QM_POS_PURGE_PENDING;
            q->n_locked--;
            q->n_purge_pending++;
        }
    }
    qm_queue_maybe_gc(q);
    return n;
}

/* What a delete of q destroys: q and every subqueue of it (the journal included), since
 * they go with it. *messages counts every position not DELETED, *consumers every consumer. */
static void whole_queue(const qm_queue *q, uint64_t *messages, uint64_t *consumers)
{
    *messages = qm_queue_message_count(q);
    *consumers = q->n_consumers;
    size_t it = 0;
    void *v;
    while (q->subqueues && sl_map_next(q->subqueues, &it, NULL, NULL, &v)) {
        const qm_queue *s = v;
        *messages += qm_queue_message_count(s);
        *consumers += s->n_consumers;
    }
}

sl_err qm_queue_delete(qm_queue *q, int flags, uint64_t *count, char *err, size_t errlen)
{
    if (q->is_system) {
        snprintf(err, errlen, "queue '%s' in vhost '%s' is a system queue", q->name,
                 q->vhost->name);
        return SL_ERR_ACCESS_REFUSED;
    }
    uint64_t messages, consumers;
    whole_queue(q, &messages, &consumers);
    if ((flags & QM_DELETE_IF_UNUSED) && consumers > 0) {
        snprintf(err, errlen, "queue '%s' in vhost '%s' in use", q->name, q->vhost->name);
        return SL_ERR_PRECONDITION;
    }
    if ((flags & QM_DELETE_IF_EMPTY) && messages > 0) {
        snprintf(err, errlen, "queue '%s' in vhost '%s' not empty", q->name, q->vhost->name);
        return SL_ERR_PRECONDITION;
    }
    if (count)
        *count = messages;
    qm_queue_destroy(q, 1);
    return SL_OK;
}

void qm_queue_destroy(qm_queue *q, int run_hooks)
{
    qm_node *n = qm_queue_node(q);

    int notified = 0;
    if (run_hooks) {
        int grouped = notified = notify_clear(q, QM_DEL_QUEUE_DELETED);
        QM_PERSIST(queue_destroyed, q);
        if (grouped)
            QM_PERSIST(tx_group, 0);
    }
    qm_dispatch_unlink(q);
    qm_queue_timer_remove(q);
    qm_exclusive_unlink(q);
    qm_stream_close(q, run_hooks);
    if (q->is_subqueue) {
        const char *semi = strchr(q->name, ';');
        if (q->parent->subqueues)
            sl_map_del(q->parent->subqueues, semi + 1, strlen(semi + 1));
    } else if (sl_map_get(q->vhost->queues, q->name, strlen(q->name)) == q) {
        sl_map_del(q->vhost->queues, q->name, strlen(q->name));
        sl_oset_remove(&q->vhost->queue_order, &q->by_name);
    }
    /* subqueues go with their parent */
    while (q->subqueues && sl_map_count(q->subqueues)) {
        size_t it = 0;
        void *v;
        sl_map_next(q->subqueues, &it, NULL, NULL, &v);
        qm_queue_destroy(v, run_hooks);
    }
    qm_consumers_cancel_all(q, run_hooks);

    ready_clear(q, notified, QM_DEL_QUEUE_DELETED);
    /* Held positions survive as DELETED orphans until their holder settles them. */
    qm_position *p = q->locked;
    while (p) {
        qm_position *next = p->u.lk->lnext;
        if (p->st_logged)
            QM_PERSIST(released, p, 0); /* the queue's delete record covers it */
        p->st_logged = 0;
        p->state = QM_POS_DELETED;
        p->queue = NULL;
        qm_orphan_link(n, p);
        p = next;
    }
    q->locked = NULL;
    q->visit_held = NULL;
    q->n_locked = q->n_purge_pending = 0;
    q->bytes_total = 0;

    if (!q->is_subqueue)
        qm_bindings_remove_queue(q);
    qm_tx_forget_queue(n, q);
    qm_qdesc_forget_queue(q);
    if (run_hooks && n->on_queue_deleted)
        n->on_queue_deleted(q, n->hook_ctx);
    n->queues_deleted++;

    sl_map_free(q->subqueues);
    qm_queue_args_free(&q->args);
    qm_dcount_clear(q);
    for (int l = 0; q->pg && l < qm_ready_of(q)->nlevels; l++) {
        sl_free(q->pg[l].v);
        sl_free(q->pg[l].exp);
        qm_pslot_more_free(q->pg[l].more);
    }
    sl_free(q->pg);
    q->pg = NULL;
    sl_free(q->ready_impl);
    q->ready_impl = NULL;
    if (q->graves_held) { /* the graveyard still tells about its paged messages */
        q->zombie = 1;
        return;
    }
    sl_free(q->name);
    sl_free(q);
}

void qm_queue_grave_done(qm_queue *q)
{
    if (--q->graves_held == 0 && q->zombie) {
        sl_free(q->name);
        sl_free(q);
    }
}

/* ---- subqueue removal ---- */

int qm_queue_gc_ready(qm_queue *q)
{
    return q->is_subqueue && qm_queue_message_count(q) == 0 && q->n_consumers == 0 && !q->descs &&
           !qm_tx_targets_queue(qm_queue_node(q), q);
}

void qm_queue_maybe_gc(qm_queue *q)
{
    if (qm_queue_gc_ready(q))
        qm_queue_schedule_dispatch(q);
}

/* ---- lookups ---- */

/* How many entries of pq have a lookup id <= id. */
static size_t pq_upper(const qm_pagedq *pq, uint64_t id)
{
    size_t lo = 0, hi = pq ? pq->len : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pq->v[pq->head + mid].lookup_id <= id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

qm_position *qm_queue_find_position(qm_queue *q, uint64_t lookup_id)
{
    qm_ready *rd = qm_ready_of(q);
    for (int l = 0; q->paged_len && l < rd->nlevels; l++) {
        qm_pagedq *pq = &q->pg[l];
        size_t i = pq_upper(pq, lookup_id);
        if (i && pq->v[pq->head + i - 1].lookup_id == lookup_id)
            return page_in_at(q, l, i - 1);
    }
    for (int l = 0; l < rd->nlevels; l++) {
        qm_ring *r = &rd->levels[l];
        if (!r->len)
            continue;
        long idx = ring_find(r, lookup_id);
        if (idx >= 0)
            return qm_ring_at(r, (size_t)idx);
    }
    for (qm_position *p = q->locked; p; p = p->u.lk->lnext)
        if (p->lookup_id == lookup_id)
            return p;
    return NULL;
}

qm_position *qm_queue_peek(qm_queue *q, size_t index)
{
    qm_ready *rd = qm_ready_of(q);
    if (index >= q->n_ready)
        return NULL;
    for (int l = rd->nlevels - 1; l >= 0; l--) {
        qm_ring *r = &rd->levels[l];
        qm_pagedq *pq = pq_of(q, l);
        size_t have = r->len + (pq ? pq->len : 0);
        if (index >= have) {
            index -= have;
            continue;
        }
        if (index >= r->len) {
            /* Peeking past what is in memory brings that much back (bounded). */
            size_t want = index - r->len + 1;
            for (size_t i = 0; i < want && i < 4096 && pq->len; i++)
                page_in_at(q, l, 0);
        }
        return index < r->len ? qm_ring_at(r, index) : NULL;
    }
    return NULL;
}

/* ---- views: peeking without paging in ---- */

/* Entry i of level l's paged tail, read from the store into view. */
static const qm_position *paged_view(qm_queue *q, int l, size_t i, qm_position *view)
{
    const qm_pagedq *pq = pq_of(q, l);
    qm_paged e = pq_get(pq, l, i);
    if (!qm_persist || !qm_persist->read_paged)
        return NULL;
    qm_message *m = qm_persist->read_paged(qm_persist_ctx, q, &e);
    if (!m)
        return NULL;
    memset(view, 0, sizeof *view);
    view->msg = m;
    view->lookup_id = e.lookup_id;
    view->move_count = e.move_count;
    view->redelivered = e.redelivered;
    view->u.expires_at = pq_exp_at(pq, i);
    view->state = QM_POS_AVAILABLE;
    return view;
}

/* The k-th of level l's two lookup-id-ordered sequences merged: the ring and the paged tail
 * (which is newer than the ring, but for entries a lookup by id paged in). Binary search on
 * how many come from the ring: O(log n), so offset 999,999 costs what offset 0 does. */
static const qm_position *kth_merged(qm_queue *q, int l, size_t k, qm_position *view)
{
    const qm_ring *r = &qm_ready_of(q)->levels[l];
    const qm_pagedq *pq = pq_of(q, l);
    size_t a = r->len, b = pq ? pq->len : 0;
    if (!b)
        return k < a ? qm_ring_at(r, k) : NULL;
    const qm_pslot *pg = pq->v + pq->head;
    size_t lo = k > b ? k - b : 0, hi = k < a ? k : a;
    while (lo < hi) { /* i = elements taken from the ring */
        size_t i = lo + (hi - lo) / 2;
        /* too few from the ring when ring[i] comes before paged[k-i-1] */
        if (k - i >= 1 && qm_ring_at(r, i)->lookup_id < pg[k - i - 1].lookup_id)
            lo = i + 1;
        else
            hi = i;
    }
    size_t i = lo, j = k - lo;
    if (i < a && (j >= b || qm_ring_at(r, i)->lookup_id < pg[j].lookup_id))
        return qm_ring_at(r, i);
    return j < b ? paged_view(q, l, j, view) : NULL;
}

const qm_position *qm_queue_peek_view(qm_queue *q, size_t index, qm_position *view)
{
    qm_ready *rd = qm_ready_of(q);
    if (index >= q->n_ready)
        return NULL;
    for (int l = rd->nlevels - 1; l >= 0; l--) {
        const qm_pagedq *pq = pq_of(q, l);
        size_t have = rd->levels[l].len + (pq ? pq->len : 0);
        if (index < have)
            return kth_merged(q, l, index, view);
        index -= have;
    }
    return NULL;
}

/* The first ready message of level l (ring and paged tail merged) whose lookup id is greater
 * than id. */
static const qm_position *level_after(qm_queue *q, int l, uint64_t id, qm_position *view)
{
    const qm_ring *r = &qm_ready_of(q)->levels[l];
    const qm_pagedq *pq = pq_of(q, l);
    size_t i = ring_upper(r, id), j = pq_upper(pq, id);
    size_t b = pq ? pq->len : 0;
    if (i < r->len && (j >= b || qm_ring_at(r, i)->lookup_id < pq->v[pq->head + j].lookup_id))
        return qm_ring_at(r, i);
    return j < b ? paged_view(q, l, j, view) : NULL;
}

/* 1 when level l holds the ready message with this lookup id, in memory or paged out. */
static int level_has(const qm_queue *q, int l, uint64_t id)
{
    const qm_ring *r = &qm_ready_of(q)->levels[l];
    const qm_pagedq *pq = pq_of(q, l);
    size_t i = ring_upper(r, id), j = pq_upper(pq, id);
    return (i && qm_ring_at(r, i - 1)->lookup_id == id) ||
           (j && pq->v[pq->head + j - 1].lookup_id == id);
}

const qm_position *qm_queue_peek_after(qm_queue *q, uint64_t after_id, qm_position *view)
{
    qm_ready *rd = qm_ready_of(q);
    if (rd->nlevels == 1)
        return level_after(q, 0, after_id, view);
    /* priorities: delivery order is not lookup order. The level holding after_id gives what
     * follows it there; past its end, the first of the next lower non-empty level. */
    int past = 0;
    for (int l = rd->nlevels - 1; l >= 0; l--) {
        if (!past && !level_has(q, l, after_id))
            continue;
        const qm_position *p = level_after(q, l, past ? 0 : after_id, view);
        if (p)
            return p;
        past = 1;
    }
    return NULL;
}

uint64_t qm_queue_count_ready_upto(qm_queue *q, uint64_t id)
{
    qm_ready *rd = qm_ready_of(q);
    uint64_t n = 0;
    for (int l = 0; l < rd->nlevels; l++)
        n += ring_upper(&rd->levels[l], id) + pq_upper(pq_of(q, l), id);
    return n;
}

uint64_t qm_queue_oldest_ready_id(qm_queue *q)
{
    qm_ready *rd = qm_ready_of(q);
    uint64_t id = 0;
    for (int l = 0; l < rd->nlevels; l++) {
        qm_ring *r = &rd->levels[l];
        const qm_pagedq *pq = pq_of(q, l);
        if (r->len && (!id || qm_ring_at(r, 0)->lookup_id < id))
            id = qm_ring_at(r, 0)->lookup_id;
        if (pq && pq->len && (!id || pq_front(pq)->lookup_id < id))
            id = pq_front(pq)->lookup_id;
    }
    return id;
}

qm_position *qm_queue_take(qm_queue *q, uint64_t lookup_id)
{
    qm_position *pos = qm_queue_find_position(q, lookup_id);
    if (!pos || pos->state != QM_POS_AVAILABLE || !qm_ready_remove(q, pos))
        return NULL;
    qm_position_hand_out(q, pos, 0);
    return pos;
}

/* ---- recovery ---- */

qm_position *qm_queue_restore_position(qm_queue *q, qm_message *m, uint64_t lookup_id,
                                       uint32_t move_count, int redelivered)
{
    qm_node *n = qm_queue_node(q);
    qm_position *pos = qm_position_new(q, m, lookup_id);
    pos->move_count = move_count > QM_MOVE_COUNT_MAX ? QM_MOVE_COUNT_MAX : move_count;
    pos->redelivered = (uint8_t)(redelivered != 0);
    pos->st_delivered = pos->redelivered;
    /* TTLs from now; recovery then sets a stored deadline where the store has one. */
    int64_t ttl = q->args.message_ttl;
    uint64_t exp_ms;
    if (qm_msg_expiration(m, &exp_ms) && (ttl < 0 || exp_ms < (uint64_t)ttl))
        ttl = (int64_t)exp_ms;
    qm_pos_set_expires(pos, ttl >= 0 ? qm_now(n) + (uint64_t)ttl : 0);
    return pos;
}

qm_position *qm_queue_restore(qm_queue *q, qm_message *m, uint64_t lookup_id, uint32_t move_count,
                              int redelivered)
{
    qm_node *n = qm_queue_node(q);
    qm_position *pos = qm_queue_restore_position(q, m, lookup_id, move_count, redelivered);
    q->bytes_total += m->body_len;
    qm_ready_insert(q, pos);
    if (n->next_lookup_id <= lookup_id)
        n->next_lookup_id = lookup_id + 1;
    return pos;
}

/* ---- the store's compaction ---- */

/* cursor: phase in the top 4 bits (0 ready rings, 1 paged, 2 held), then for the rings and
 * the paged tails the level in the next 12 bits and the index below; for the held an index. */
#define VISIT_PHASE(c) ((unsigned)((c) >> 60))
#define VISIT_LEVEL(c) ((int)(((c) >> 48) & 0xfff))
#define VISIT_INDEX(c) ((c) & ((1ull << 48) - 1))
#define VISIT_AT(ph, lvl, i) ((uint64_t)(ph) << 60 | (uint64_t)(lvl) << 48 | (uint64_t)(i))

int qm_queue_visit_stored(qm_queue *q, uint64_t *cursor, const qm_store_visitor *v, void *ctx)
{
    uint64_t c = *cursor;
    qm_ready *rd = qm_ready_of(q);
    if (VISIT_PHASE(c) == 0) {
        for (int l = VISIT_LEVEL(c); l < rd->nlevels; l++) {
            qm_ring *r = &rd->levels[l];
            for (size_t i = l == VISIT_LEVEL(c) ? VISIT_INDEX(c) : 0; i < r->len; i++) {
                if (v->position && v->position(ctx, qm_ring_at(r, i))) {
                    *cursor = VISIT_AT(0, l, i + 1);
                    return 0;
                }
            }
        }
        c = VISIT_AT(1, 0, 0);
    }
    if (VISIT_PHASE(c) == 1) {
        for (int l = VISIT_LEVEL(c); q->pg && l < rd->nlevels; l++) {
            qm_pagedq *pq = &q->pg[l];
            for (size_t i = l == VISIT_LEVEL(c) ? VISIT_INDEX(c) : 0; v->paged && i < pq->len;
                 i++) {
                /* the visitor works on the whole entry; what it changed is packed again */
                qm_pslot *sl = &pq->v[pq->head + i];
                qm_paged e = qm_pslot_get(pq->more, l, sl);
                int stop = v->paged(ctx, q, &e, pq_exp_at(pq, i));
                pslot_forget(pq, sl);
                *sl = pslot_make(pq, &e);
                if (stop) {
                    *cursor = VISIT_AT(1, l, i + 1);
                    return 0;
                }
            }
        }
        c = VISIT_AT(2, 0, 0);
    }
    /* The held list: resumed at q->visit_held, which qm_locked_unlink keeps on the list (a
     * count from the head would cost O(held) a call, and skip one for each that left). New
     * holds go in at the head, behind the walk. */
    qm_position *p = VISIT_INDEX(c) ? q->visit_held : q->locked;
    for (; p; p = p->u.lk->lnext) {
        if (v->position && v->position(ctx, p)) {
            q->visit_held = p->u.lk->lnext;
            *cursor = VISIT_AT(2, 0, 1);
            return 0;
        }
    }
    q->visit_held = NULL;
    *cursor = VISIT_AT(3, 0, 0);
    return 1;
}

qm_queue *qm_queue_find_ci(qm_vhost *vh, const char *name, size_t len)
{
    qm_queue *q = qm_queue_find(vh, name, len);
    if (q || memchr(name, ';', len))
        return q;
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (sl_map_next(vh->queues, &it, &k, &kl, &v))
        if (kl == len && !strncasecmp(k, name, len))
            return v;
    return NULL;
}
