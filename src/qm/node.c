/* node.c - the node (MS-MQDMPR LocalQueueManager), vhosts, timers and teardown.
 *
 * qm_node_tick does the time-driven work: it expires messages at the heads of queues (TTL,
 * dead-lettering them) and deletes queues unused for longer than x-expires. It visits only
 * the queues whose deadline has come, from a binary min-heap of queues keyed by tm_due
 * (libuv's and nginx's timer heaps are the model), so a node with 10,000 idle queues does no
 * work per tick for them.
 *
 * Invariant of the heap: a queue with a message whose expiry could be due, or with x-expires
 * and no consumer, is in the heap with tm_due no later than that moment. Whoever can create
 * such a moment says so (qm_queue_wake_at): a position entering the ready rings or the paged
 * tail with a deadline, a new head after the head was taken, the last consumer leaving, a
 * declaration. Later moments need no update: a visit recomputes the deadline from the
 * queue's state and puts the queue back, or leaves it out when nothing is pending. Empty,
 * unused subqueues are removed by dispatch (qm_queue_maybe_gc), not here.
 */
#include <string.h>

#include "qm/qm_internal.h"

static const char *const system_queues[] = {
    "sluice.system.deadletter",
    "sluice.system.xact-deadletter",
    "sluice.system.journal",
};

const qm_persist_hooks *qm_persist;
void *qm_persist_ctx;
int qm_persist_bulk;
static const qm_persist_hooks *persist_saved;

void qm_set_persist(const qm_persist_hooks *hooks, void *ctx)
{
    qm_persist = hooks;
    qm_persist_ctx = ctx;
}

void qm_persist_suspend(int on)
{
    if (on) {
        persist_saved = qm_persist;
        qm_persist = NULL;
    } else {
        qm_persist = persist_saved;
        persist_saved = NULL;
    }
}

uint64_t qm_node_now(const qm_node *n)
{
    return qm_now(n);
}

void qm_grave_push(qm_node *n, qm_grave *g)
{
    if (n->graves_tail)
        n->graves_tail->next = g;
    else
        n->graves = g;
    n->graves_tail = g;
}

/* A watched paged entry of a purged or deleted queue: read back (its segment is still held:
 * the grave releases it only after this) and given to the on_removed hook, which sends its
 * acknowledgement (in a record group of its own: the purge or delete record is written
 * already). Unreadable: logged by the store, nothing to tell. */
static void reap_notify(qm_node *n, qm_grave *g, const qm_paged *e)
{
    if (!n->on_removed || !qm_persist || !qm_persist->read_paged)
        return;
    qm_message *m = qm_persist->read_paged(qm_persist_ctx, g->notify, e);
    if (!m)
        return;
    qm_position view;
    memset(&view, 0, sizeof view);
    view.msg = m;
    view.queue = g->notify;
    view.lookup_id = e->lookup_id;
    view.move_count = e->move_count;
    view.redelivered = e->redelivered;
    view.state = QM_POS_AVAILABLE;
    qm_removed_end(qm_removed(g->notify, &view, g->reason));
    qm_message_unref(m);
}

/* Nothing here touches a queue but a grave's notify one, which it holds (a zombie when it
 * was deleted). Stored positions let go of their segments without records (the purge or
 * delete record covers them). */
int qm_node_reap(qm_node *n, size_t max)
{
    size_t done = 0;
    while (n->graves && (max == 0 || done < max)) {
        qm_grave *g = n->graves;
        while (g->ring.len && (max == 0 || done < max)) {
            qm_position *pos = qm_ring_at(&g->ring, 0);
            g->ring.head = (g->ring.head + 1) & (g->ring.cap - 1);
            g->ring.len--;
            if (pos->st_logged)
                QM_PERSIST(released, pos, 0);
            qm_position_release(pos);
            done++;
        }
        while (g->paged_len && (max == 0 || done < max)) {
            qm_paged e = qm_pslot_get(g->more, 0, &g->paged[g->paged_head]);
            if (g->notify && e.watch) {
                reap_notify(n, g, &e);
                done += QM_REAP_READ_COST - 1;
            }
            QM_PERSIST(paged_dropped, NULL, &e, 0);
            g->paged_head++;
            g->paged_len--;
            done++;
        }
        if (g->ring.len || g->paged_len)
            break;
        n->graves = g->next;
        if (!n->graves)
            n->graves_tail = NULL;
        sl_free(g->ring.buf);
        sl_free(g->paged);
        qm_pslot_more_free(g->more);
        if (g->notify)
            qm_queue_grave_done(g->notify);
        sl_free(g);
    }
    return n->graves != NULL;
}

qm_node *qm_node_new(const char *name)
{
    qm_node *n = sl_xcalloc(1, sizeof *n);
    n->name = sl_xstrdup(name);
    n->online = 1;
    n->vhosts = sl_map_new();
    n->next_lookup_id = 1;
    n->next_incarnation = 1;
    n->next_tx_id = 1;
    n->orphans.u.lk = &n->orphans_lk;
    n->orphans.has_lk = 1;
    n->orphans_lk.lprev = n->orphans_lk.lnext = &n->orphans;
    return n;
}

qm_vhost *qm_vhost_find(qm_node *n, const char *name, size_t len)
{
    return sl_map_get(n->vhosts, name, len);
}

qm_vhost *qm_vhost_create(qm_node *n, const char *name)
{
    qm_vhost *vh = qm_vhost_find(n, name, strlen(name));
    if (vh)
        return vh;
    vh = sl_xcalloc(1, sizeof *vh);
    vh->name = sl_xstrdup(name);
    vh->node = n;
    vh->queues = sl_map_new();
    vh->exchanges = sl_map_new();
    sl_map_put(n->vhosts, vh->name, strlen(name), vh);

    static const struct {
        const char *name;
        int type, internal;
    } pre[] = {
        {"", QM_EX_DIRECT, 0},
        {"amq.direct", QM_EX_DIRECT, 0},
        {"amq.fanout", QM_EX_FANOUT, 0},
        {"amq.topic", QM_EX_TOPIC, 0},
        {"amq.headers", QM_EX_HEADERS, 0},
        {"amq.match", QM_EX_HEADERS, 0},
        {"amq.rabbitmq.trace", QM_EX_TOPIC, 1},
    };
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        qm_exchange_create(vh, pre[i].name, strlen(pre[i].name), pre[i].type, 1, 0,
                           pre[i].internal);
    for (size_t i = 0; i < sizeof system_queues / sizeof system_queues[0]; i++) {
        size_t len = strlen(system_queues[i]);
        qm_queue *q = qm_queue_alloc(vh, system_queues[i], len);
        q->durable = 1;
        q->is_system = 1;
        sl_map_put(vh->queues, q->name, len, q);
        sl_oset_insert(&vh->queue_order, &q->by_name, q->name, len);
        /* Their records name this incarnation: it must be in the store too, or what a node
         * dead-letters or moves into them before its first restart is dropped at recovery
         * (recovery gives a system queue the incarnation its record names). */
        QM_PERSIST(queue_created, q);
    }
    return vh;
}

uint64_t qm_vhost_queue_count(const qm_vhost *vh)
{
    size_t n = sl_map_count(vh->queues), sys = sizeof system_queues / sizeof system_queues[0];
    return n > sys ? n - sys : 0;
}

/* Finish the graveyard when a grave holds a queue of vh (its notify queue). */
static void reap_vhost(qm_node *n, const qm_vhost *vh)
{
    for (const qm_grave *g = n->graves; g; g = g->next)
        if (g->notify && g->notify->vhost == vh) {
            qm_node_reap(n, 0);
            return;
        }
}

void qm_vhost_delete(qm_node *n, qm_vhost *vh)
{
    /* Queues first, with their hooks: consumers are told, stored positions let go of their
     * segments and each durable queue gets its deletion record. Deleting one may delete
     * others (auto-delete exchanges) but never a queue, so take them one at a time. */
    /* One at a time from the name order: restarting a hash map's iteration for each would
     * be O(n^2) (50,000 queues took 20 s to stop). The graveyard's acknowledgements for
     * paged messages of vh's purged or deleted queues are sent now, all at once, before and
     * after: they need vh (a rare administrative operation; a purge's may create a queue, so
     * not after vh's queues are gone). */
    reap_vhost(n, vh);
    while (sl_oset_count(&vh->queue_order))
        qm_queue_destroy(SL_ONODE_OWNER(sl_oset_first(&vh->queue_order), qm_queue, by_name), 1);
    reap_vhost(n, vh);
    while (sl_oset_count(&vh->exchange_order)) {
        char err[64];
        qm_exchange *x = SL_ONODE_OWNER(sl_oset_first(&vh->exchange_order), qm_exchange, by_name);
        qm_exchange_delete(x, 0, err, sizeof err);
    }
    sl_map_del(n->vhosts, vh->name, strlen(vh->name));
    sl_map_free(vh->exchanges);
    sl_map_free(vh->queues);
    sl_free(vh->name);
    sl_free(vh);
}

static uint64_t min_deadline(uint64_t a, uint64_t b)
{
    return !a ? b : !b ? a : (a < b ? a : b);
}

/* ---- the deadline heap ---- */

typedef struct theap {
    qm_queue **v;
    size_t len, cap;
    uint64_t ticks; /* qm_node_tick calls so far (tm_visit) */
} theap;

static theap *heap_of(qm_node *n)
{
    if (!n->timers_impl)
        n->timers_impl = sl_xcalloc(1, sizeof(theap));
    return n->timers_impl;
}

static void heap_set(theap *h, size_t i, qm_queue *q)
{
    h->v[i] = q;
    q->tm_slot = i + 1;
}

static void heap_up(theap *h, size_t i)
{
    qm_queue *q = h->v[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->v[parent]->tm_due <= q->tm_due)
            break;
        heap_set(h, i, h->v[parent]);
        i = parent;
    }
    heap_set(h, i, q);
}

static void heap_down(theap *h, size_t i)
{
    qm_queue *q = h->v[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->len)
            break;
        if (c + 1 < h->len && h->v[c + 1]->tm_due < h->v[c]->tm_due)
            c++;
        if (h->v[c]->tm_due >= q->tm_due)
            break;
        heap_set(h, i, h->v[c]);
        i = c;
    }
    heap_set(h, i, q);
}

static void heap_remove_at(theap *h, size_t i)
{
    qm_queue *q = h->v[i];
    q->tm_slot = 0;
    if (--h->len == i)
        return;
    qm_queue *last = h->v[h->len];
    heap_set(h, i, last);
    heap_down(h, i);
    heap_up(h, last->tm_slot - 1);
}

void qm_queue_wake_at(qm_queue *q, uint64_t due)
{
    theap *h = heap_of(qm_queue_node(q));
    if (q->tm_slot) {
        if (due >= q->tm_due)
            return;
        q->tm_due = due;
        heap_up(h, q->tm_slot - 1);
        return;
    }
    if (h->len == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->v = sl_xrealloc(h->v, h->cap * sizeof *h->v);
    }
    q->tm_due = due;
    h->v[h->len++] = q;
    heap_up(h, h->len - 1);
}

void qm_queue_timer_remove(qm_queue *q)
{
    if (q->tm_slot)
        heap_remove_at(heap_of(qm_queue_node(q)), q->tm_slot - 1);
}

/* A queue whose deadline came: expire its heads, check x-expires; back into the heap with
 * its next deadline, if any. May destroy q. */
static void queue_tick(qm_queue *q, uint64_t now)
{
    uint64_t next = 0;
    if (q->st_more) { /* a stream's filtered consumer skips on (qm_stream_dispatch) */
        q->st_more = 0;
        qm_queue_schedule_dispatch(q);
    }
    if (q->n_ready)
        next = qm_queue_expire_heads(q, now);
    if (q->is_subqueue)
        qm_queue_maybe_gc(q); /* emptied by expiry: dispatch removes it */
    if (!q->is_subqueue && q->args.expires > 0 && !q->n_consumers && !q->is_system) {
        uint64_t dl = q->last_used + (uint64_t)q->args.expires;
        if (dl <= now) {
            qm_queue_destroy(q, 1);
            return;
        }
        next = min_deadline(next, dl);
    }
    if (next)
        qm_queue_wake_at(q, next);
}

uint64_t qm_node_tick(qm_node *n, uint64_t now)
{
    theap *h = heap_of(n);
    h->ticks++;
    while (h->len && h->v[0]->tm_due <= now) {
        qm_queue *q = h->v[0];
        /* Expiry that ran out of this turn's budget is due again at once: for the next tick,
         * not for another round of this one. */
        if (q->tm_visit == h->ticks)
            break;
        q->tm_visit = h->ticks;
        heap_remove_at(h, 0);
        queue_tick(q, now);
    }
    return h->len ? h->v[0]->tm_due : 0;
}

void qm_exclusive_link(qm_queue *q)
{
    qm_node *n = qm_queue_node(q);
    if (!n->exclusives)
        n->exclusives = sl_map_new();
    qm_queue *head = sl_map_get(n->exclusives, &q->exclusive_owner, sizeof q->exclusive_owner);
    q->excl_prev = NULL;
    q->excl_next = head;
    if (head)
        head->excl_prev = q;
    sl_map_put(n->exclusives, &q->exclusive_owner, sizeof q->exclusive_owner, q);
}

void qm_exclusive_unlink(qm_queue *q)
{
    qm_node *n = qm_queue_node(q);
    if (!q->exclusive_owner || !n->exclusives)
        return;
    if (q->excl_next)
        q->excl_next->excl_prev = q->excl_prev;
    if (q->excl_prev)
        q->excl_prev->excl_next = q->excl_next;
    else if (q->excl_next)
        sl_map_put(n->exclusives, &q->exclusive_owner, sizeof q->exclusive_owner, q->excl_next);
    else if (sl_map_get(n->exclusives, &q->exclusive_owner, sizeof q->exclusive_owner) == q)
        sl_map_del(n->exclusives, &q->exclusive_owner, sizeof q->exclusive_owner);
    q->excl_next = q->excl_prev = NULL;
}

/* O(the owner's exclusive queues), not O(queues): a node with 10,000 connections closing
 * does not scan its queues 10,000 times. */
void qm_node_drop_exclusive(qm_node *n, void *owner)
{
    qm_queue *q;
    while (n->exclusives && (q = sl_map_get(n->exclusives, &owner, sizeof owner)))
        qm_queue_destroy(q, 1);
}

void qm_node_free(qm_node *n)
{
    if (!n)
        return;
    qm_tx_free_all(n);
    /* Graves may hold queues (and so vhosts) freed below: finish them first, telling no one
     * (the door that would send the acknowledgements is gone or going). */
    n->on_removed = NULL;
    qm_node_reap(n, 0);
    size_t vi = 0;
    void *vv;
    while (sl_map_next(n->vhosts, &vi, NULL, NULL, &vv)) {
        qm_vhost *vh = vv;
        while (sl_oset_count(&vh->queue_order))
            qm_queue_destroy(SL_ONODE_OWNER(sl_oset_first(&vh->queue_order), qm_queue, by_name), 0);
        /* bindings first, while every exchange they point at is still alive */
        size_t xi = 0;
        void *xv;
        while (sl_map_next(vh->exchanges, &xi, NULL, NULL, &xv))
            qm_exchange_clear_bindings(xv);
        xi = 0;
        while (sl_map_next(vh->exchanges, &xi, NULL, NULL, &xv))
            qm_exchange_free(xv);
        sl_map_free(vh->exchanges);
        sl_map_free(vh->queues);
        sl_free(vh->name);
        sl_free(vh);
    }
    while (n->orphans_lk.lnext != &n->orphans)
        qm_position_free(n->orphans_lk.lnext);
    qm_node_reap(n, 0);
    sl_map_free(n->vhosts);
    sl_map_free(n->exclusives);
    if (n->timers_impl) {
        sl_free(((theap *)n->timers_impl)->v);
        sl_free(n->timers_impl);
    }
    sl_free(n->stream_dir);
    sl_free(n->name);
    sl_free(n);
}
