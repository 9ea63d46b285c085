/* totals.h - the node's figures summed once for every door that shows them: the management
 * API's overview and /metrics, and the MSMQ machine properties (DCE/RPC and HTTP). Queues
 * count with their subqueues' messages; the vhosts counted are those a caller may list (a
 * door's rule, passed in). Connections and channels are those of every door with clients,
 * through their node_part hooks (node_totals_clients).
 */
#ifndef SL_NODE_TOTALS_H
#define SL_NODE_TOTALS_H

#include <stdint.h>

#include "qm/qm.h"

struct sl_node;

typedef struct node_totals {
    uint64_t queues, exchanges, connections, channels, consumers;
    uint64_t messages, ready, unacked, bytes;
    uint64_t published, delivered, acked, redelivered, purged, expired, dead_lettered,
        delivered_no_ack, get, get_no_ack, confirm;
} node_totals;

/* *t zeroed, then the figures of the vhosts listed (listed NULL: every vhost) and of their
 * exchanges and queues added. */
void node_totals_model(qm_node *qm, int (*listed)(void *ctx, const char *vhost), void *ctx,
                       node_totals *t);

/* Every door's clients added to t: connections that are listed and their channels, of user
 * only unless monitor (RabbitMQ's filter_user). */
void node_totals_clients(const struct sl_node *n, const char *user, int monitor, node_totals *t);

/* RabbitMQ's split of deliver_get (= deliver + deliver_no_ack + get + get_no_ack): the
 * hand-outs with an ack and without one that were no basic.get answers. */
void node_totals_deliveries(const node_totals *t, uint64_t *deliver, uint64_t *deliver_no_ack);

/* *t zeroed, then q's own figures (its subqueues' not added): messages, ready, unacked
 * (delivered or locked, and purged but not yet settled), bytes, consumers, its counters. */
void node_totals_queue(const qm_queue *q, node_totals *t);

/* *t zeroed, then the figures of vh's queues only (a vhost's own row). */
void node_totals_vhost_queues(qm_vhost *vh, node_totals *t);

/* A node-wide figure under its Prometheus name, for /metrics (the HTTP door only formats). */
typedef struct node_metric {
    const char *name, *type, *help; /* type: "gauge" or "counter" */
    uint64_t v;
} node_metric;
/* The node's own lines of /metrics: online, the totals t (node_totals_model and _clients),
 * memory and its alarm, and the message counters; fills out, returns how many. */
#define NODE_TOTALS_METRICS 20
size_t node_totals_metrics(const struct sl_node *n, const node_totals *t,
                           node_metric out[NODE_TOTALS_METRICS]);

#endif
