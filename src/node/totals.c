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

size_t node_totals_metrics(const struct sl_node *n, const node_totals *t,
                           node_metric out[NODE_TOTALS_METRICS])
{
    const node_metric m[NODE_TOTALS_METRICS] = {
        {"sluice_node_online", "gauge", "1 when the node is online (MSMQ CONNECT)", n->qm->online},
        {"sluice_connections", "gauge", "Open AMQP connections", t->connections},
        {"sluice_channels", "gauge", "Open AMQP channels", t->channels},
        {"sluice_consumers", "gauge", "Consumers", t->consumers},
        {"sluice_queues", "gauge", "Queues (not counting subqueues)", t->queues},
        {"sluice_exchanges", "gauge", "Exchanges", t->exchanges},
        {"sluice_messages", "gauge", "Messages in all queues", t->messages},
        {"sluice_messages_ready", "gauge", "Messages ready for delivery", t->ready},
        {"sluice_messages_unacked", "gauge", "Messages delivered, not yet settled", t->unacked},
        {"sluice_message_bytes", "gauge", "Body bytes in all queues", t->bytes},
        {"sluice_memory_bytes", "gauge",
         "Memory the alarm counts: messages and every connection and reply buffer",
         node_memory_bytes(n)},
        {"sluice_memory_alarm", "gauge", "1 while publishers are blocked by the memory alarm",
         (uint64_t)((n->alarms & ALARM_MEMORY) != 0)},
        {"sluice_messages_published_total", "counter", "Messages enqueued", t->published},
        {"sluice_messages_delivered_total", "counter", "Messages delivered", t->delivered},
        {"sluice_messages_acked_total", "counter", "Messages acknowledged", t->acked},
        {"sluice_messages_redelivered_total", "counter", "Messages redelivered", t->redelivered},
        {"sluice_messages_purged_total", "counter", "Messages purged", t->purged},
        {"sluice_messages_expired_total", "counter", "Messages expired", t->expired},
        {"sluice_messages_dead_lettered_total", "counter", "Messages dead-lettered",
         t->dead_lettered},
        {"sluice_connections_refused_total", "counter",
         "AMQP connections refused at connection.open by connection_max", n->conns_refused},
    };
    memcpy(out, m, sizeof m);
    return NODE_TOTALS_METRICS;
}
