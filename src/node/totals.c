/* totals.c - the node's figures over its vhosts, exchanges and queues (see totals.h). */
#include "node/totals.h"

#include <string.h>

#include "node/node.h"

/* q's own figures added to t. */
static void add_own(node_totals *t, const qm_queue *q)
{
    t->messages += qm_queue_message_count(q);
    t->ready += q->n_ready;
    t->unacked += q->n_locked + q->n_purge_pending;
    t->bytes += q->bytes_total;
    t->consumers += q->n_consumers;
    t->published += q->stat_published;
    t->delivered += q->stat_delivered;
    t->acked += q->stat_acked;
    t->redelivered += q->stat_redelivered;
    t->delivered_no_ack += q->stat_delivered_no_ack;
    t->get += q->stat_get;
    t->get_no_ack += q->stat_get_no_ack;
    t->purged += q->stat_purged;
    t->expired += q->stat_expired;
    t->dead_lettered += q->stat_dead_lettered;
}

static void add_queue(node_totals *t, qm_queue *q, int top)
{
    if (top)
        t->queues++;
    add_own(t, q);
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (q->subqueues && sl_map_next(q->subqueues, &it, &k, &kl, &v))
        add_queue(t, v, 0);
}

void node_totals_model(qm_node *qm, int (*listed)(void *ctx, const char *vhost), void *ctx,
                       node_totals *t)
{
    memset(t, 0, sizeof *t);
    size_t vit = 0, kl;
    const char *k;
    void *v;
    while (sl_map_next(qm->vhosts, &vit, &k, &kl, &v)) {
        qm_vhost *vh = v;
        if (listed && !listed(ctx, vh->name))
            continue;
        t->exchanges += sl_map_count(vh->exchanges);
        t->confirm += vh->stat_confirm;
        size_t qit = 0;
        void *qv;
        while (sl_map_next(vh->queues, &qit, &k, &kl, &qv))
            add_queue(t, qv, 1);
    }
}

void node_totals_clients(const sl_node *n, const char *user, int monitor, node_totals *t)
{
    node_client c;
    for (uint64_t at = UINT64_MAX; node_client_next(n, at, &c); at = c.id - 1) {
        if (!c.listed || (!monitor && strcmp(c.user, user ? user : "")))
            continue;
        t->connections++;
        t->channels += c.channels;
    }
}

void node_totals_deliveries(const node_totals *t, uint64_t *deliver, uint64_t *deliver_no_ack)
{
    *deliver_no_ack = t->delivered_no_ack -
                      (t->get_no_ack < t->delivered_no_ack ? t->get_no_ack : t->delivered_no_ack);
    uint64_t dack = t->delivered - t->delivered_no_ack;
    *deliver = dack - (t->get < dack ? t->get : dack);
}

void node_totals_queue(const qm_queue *q, node_totals *t)
{
    memset(t, 0, sizeof *t);
    add_own(t, q);
}

void node_totals_vhost_queues(qm_vhost *vh, node_totals *t)
{
    memset(t, 0, sizeof *t);
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (sl_map_next(vh->queues, &it, &k, &kl, &v))
        add_queue(t, v, 1);
}
