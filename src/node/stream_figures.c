/* stream_figures.c - streams as the HTTP door shows them (see stream_figures.h). */
#include "node/stream_figures.h"

#include <string.h>

#include "core/clock.h"
#include "core/mem.h"
#include "node/lister.h"

size_t node_stream_metrics(const node_stream_figures *f, const qm_node *qm,
                           node_metric out[NODE_STREAM_METRICS])
{
    uint64_t n = 0, entries = 0, bytes = 0, segments = 0;
    /* the node's list of stream queues: one per stream, bounded by the streams declared */
    for (const qm_queue *q = qm->streams; q; q = q->st_next) {
        qm_stream_info si;
        if (qm_stream_info_get(q, &si) < 0)
            continue;
        n++;
        entries += si.entries;
        bytes += si.bytes;
        segments += si.segments;
    }
    /* RabbitMQ's rabbitmq_global_publishers, _consumers, _messages_received_total,
     * _confirmed_total, _delivered_total (protocol="stream") in Sluice's sluice_ naming */
    const node_metric m[NODE_STREAM_METRICS] = {
        {"sluice_streams", "gauge", "Stream queues", n},
        {"sluice_streams_messages", "gauge", "Entries in all streams' logs", entries},
        {"sluice_streams_bytes", "gauge", "Bytes of all streams' logs on disk", bytes},
        {"sluice_streams_segments", "gauge", "Segment files of all streams' logs", segments},
        {"sluice_stream_publishers", "gauge", "Stream protocol publishers", f->publishers},
        {"sluice_stream_consumers", "gauge", "Stream protocol subscriptions", f->consumers},
        {"sluice_stream_messages_published_total", "counter",
         "Messages published over the stream protocol", f->published},
        {"sluice_stream_messages_confirmed_total", "counter",
         "Publishing ids confirmed (PublishConfirm)", f->confirmed},
        {"sluice_stream_messages_errored_total", "counter", "Publishing ids refused (PublishError)",
         f->errored},
        {"sluice_stream_messages_delivered_total", "counter",
         "Messages delivered over the stream protocol", f->delivered},
    };
    memcpy(out, m, sizeof m);
    return NODE_STREAM_METRICS;
}

typedef struct queue_walk {
    const qm_queue *q;
    node_queue_consumer_fn visit;
    void *ctx;
} queue_walk;

static void on_consumer(void *ctx, const node_client *c, const node_channel *ch,
                        const node_consumer *o)
{
    queue_walk *qw = ctx;
    if (o->queue == qw->q)
        qw->visit(qw->ctx, c, ch, o);
}

int node_queue_consumers(const struct sl_node *n, const qm_queue *q, uint64_t budget_us,
                         node_queue_consumer_fn visit, void *ctx)
{
    if (!q->n_consumers)
        return 1;
    queue_walk qw = {q, visit, ctx};
    node_client_walk w;
    node_client_walk_init(&w, NODE_WALK_CONSUMERS);
    w.vhost = sl_xstrdup(q->vhost->name);
    w.monitor = w.admin = 1;
    w.visit_consumer = on_consumer;
    w.ctx = &qw;
    int done = node_walk_clients(n, &w, sl_now_us() + budget_us);
    node_client_walk_free(&w);
    return done;
}
