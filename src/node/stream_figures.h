/* stream_figures.h - streams as the HTTP door shows them (issue 47): the stream protocol door's
 * counters, the streams' logs summed, and a stream queue's consumers found by queue.
 *
 * The node keeps the door's counters (struct sl_node's stream_figs) so that the door that counts
 * them (src/stream/) and the HTTP door that shows them (src/mgmt/metrics.c) never include each
 * other. They are all zero on a node without the stream listener.
 *
 * Invariants: written by the stream door only, on the loop's thread; publishers and consumers
 * are gauges the door raises and lowers with each connection's own counts (so they return to
 * 0 when every connection is gone); the rest only grow.
 */
#ifndef SL_NODE_STREAM_FIGURES_H
#define SL_NODE_STREAM_FIGURES_H

#include <stddef.h>
#include <stdint.h>

#include "node/clients.h"
#include "node/totals.h"
#include "qm/qm.h"

struct node_part;

typedef struct node_stream_figures {
    uint64_t publishers; /* declared publishers (DeclarePublisher, not yet deleted) */
    uint64_t consumers;  /* subscriptions (Subscribe, not yet Unsubscribe) */
    uint64_t published;  /* messages (publishing ids) Publish brought for a known publisher */
    uint64_t confirmed;  /* publishing ids PublishConfirm confirmed */
    uint64_t errored;    /* publishing ids PublishError refused */
    uint64_t delivered;  /* messages (chunk entries) Deliver sent */
} node_stream_figures;

/* /metrics's node-wide stream lines (no names in them): every stream queue's log summed, then
 * the door's figures f, by their Prometheus names; fills out, returns how many. */
#define NODE_STREAM_METRICS 10
size_t node_stream_metrics(const node_stream_figures *f, const qm_node *qm,
                           node_metric out[NODE_STREAM_METRICS]);

/* The consumers on q (a queue of any type) of every door's clients, every client of q's vhost
 * whoever asks (whoever may see a queue sees its consumers, as in RabbitMQ), to visit. The
 * door keeps consumers by client and channel, not by queue: this walks the vhost's clients
 * for budget_us at most. 1 when every client was walked, 0 when the time ran
 * out first (what was met has been visited). */
struct sl_node;
typedef void (*node_queue_consumer_fn)(void *ctx, const node_client *c, const node_channel *ch,
                                       const node_consumer *o);
int node_queue_consumers(const struct sl_node *n, const qm_queue *q, uint64_t budget_us,
                         node_queue_consumer_fn visit, void *ctx);

#endif
