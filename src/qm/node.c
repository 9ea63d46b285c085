/* node.c - the node (MS-MQDMPR LocalQueueManager), vhosts, timers and teardown.
 *
 * qm_node_tick does the time-driven work: it expires messages at the heads of queues (TTL,
 * dead-lettering them), deletes queues unused for longer than x-expires, and removes empty
 * unused subqueues. It scans every queue of every vhost: simple and O(queues) per tick;
 * a deadline heap is the known next step if nodes with very many queues tick often.
 * Queues are deleted by name after the scan, so no map is modified while it is walked and
 * a queue removed meanwhile by a callback is simply not found.
 */
#include <string.h>

#include "qm_internal.h"

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

/* Nothing here touches a queue: the queue may be gone. Stored positions let go of their
 * segments without records (the purge or delete record covers them). */
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
            QM_PERSIST(paged_dropped, NULL, &g->paged[g->paged_head], 0);
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
    n->orphans.lprev = n->orphans.lnext = &n->orphans;
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
    }
    return vh;
}

uint64_t qm_vhost_queue_count(const qm_vhost *vh)
{
    size_t n = sl_map_count(vh->queues), sys = sizeof system_queues / sizeof system_queues[0];
    return n > sys ? n - sys : 0;
}

void qm_vhost_delete(qm_node *n, qm_vhost *vh)
{
    /* Queues first, with their hooks: consumers are told, stored positions let go of their
     * segments and each durable queue gets its deletion record. Deleting one may delete
     * others (auto-delete exchanges) but never a queue, so take them one at a time. */
    /* One at a time from the name order: restarting a hash map's iteration for each would
     * be O(n^2) (50,000 queues took 20 s to stop). */
    while (sl_oset_count(&vh->queue_order))
        qm_queue_destroy(SL_ONODE_OWNER(sl_oset_first(&vh->queue_order), qm_queue, by_name), 1);
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

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static void names_add(names *l, const char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->v = sl_xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = sl_xstrdup(s);
}

/* Destroy the queues named in l (those still there), then free l. */
static void names_destroy(qm_vhost *vh, names *l)
{
    for (size_t i = 0; i < l->n; i++) {
        qm_queue *q = qm_queue_find(vh, l->v[i], strlen(l->v[i]));
        if (q)
            qm_queue_destroy(q, 1);
        sl_free(l->v[i]);
    }
    sl_free(l->v);
}

static uint64_t min_deadline(uint64_t a, uint64_t b)
{
    return !a ? b : !b ? a : (a < b ? a : b);
}

uint64_t qm_node_tick(qm_node *n, uint64_t now)
{
    uint64_t next = 0;
    size_t vi = 0;
    void *vv;
    while (sl_map_next(n->vhosts, &vi, NULL, NULL, &vv)) {
        qm_vhost *vh = vv;
        names doomed = {0};
        size_t qi = 0;
        void *qv;
        while (sl_map_next(vh->queues, &qi, NULL, NULL, &qv)) {
            qm_queue *q = qv;
            if (q->n_ready)
                next = min_deadline(next, qm_queue_expire_heads(q, now));
            if (q->subqueues) {
                size_t si = 0;
                void *sv;
                while (sl_map_next(q->subqueues, &si, NULL, NULL, &sv)) {
                    qm_queue *s = sv;
                    if (s->n_ready)
                        next = min_deadline(next, qm_queue_expire_heads(s, now));
                    if (qm_queue_gc_ready(s))
                        names_add(&doomed, s->name);
                }
            }
            if (q->args.expires > 0 && !q->n_consumers && !q->is_system) {
                uint64_t dl = q->last_used + (uint64_t)q->args.expires;
                if (dl <= now)
                    names_add(&doomed, q->name);
                else
                    next = min_deadline(next, dl);
            }
        }
        names_destroy(vh, &doomed);
    }
    return next;
}

void qm_node_drop_exclusive(qm_node *n, void *owner)
{
    size_t vi = 0;
    void *vv;
    while (sl_map_next(n->vhosts, &vi, NULL, NULL, &vv)) {
        qm_vhost *vh = vv;
        names doomed = {0};
        size_t qi = 0;
        void *qv;
        while (sl_map_next(vh->queues, &qi, NULL, NULL, &qv)) {
            qm_queue *q = qv;
            if (q->exclusive && q->exclusive_owner == owner)
                names_add(&doomed, q->name);
        }
        names_destroy(vh, &doomed);
    }
}

void qm_node_free(qm_node *n)
{
    if (!n)
        return;
    qm_tx_free_all(n);
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
    while (n->orphans.lnext != &n->orphans)
        qm_position_free(n->orphans.lnext);
    qm_node_reap(n, 0);
    sl_map_free(n->vhosts);
    sl_free(n->name);
    sl_free(n);
}
