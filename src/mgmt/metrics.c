/* metrics.c - Prometheus text exposition (format 0.0.4).
 *
 *   /metrics             node-wide gauges and counters; no auth, like rabbitmq_prometheus's
 *                        aggregated endpoint (no object names leak from it; a cluster
 *                        leader's follower lag series name the members, as etcd does)
 *   /metrics/per-object  the same plus one series per queue (labels vhost, queue); needs auth,
 *                        and shows the queues of the vhosts the user may list (administrators
 *                        every vhost, others those they have a permission entry on); the
 *                        node-wide lines are /metrics's, public and nameless
 *
 * Counters summed over queues drop when a queue is deleted (its history goes with it). A
 * stream's messages are its log's entries; sluice_stream_* are streams' (node/stream_figures.h).
 */
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/version.h"
#include "cluster/member.h"
#include "cluster/stream.h"
#include "cluster/view.h"
#include "http/prom.h"
#include "mgmt/mgmt_internal.h"

static const struct {
    const char *name, *type, *help;
} per_queue[] = {
    {"sluice_queue_messages", "gauge", "Messages in the queue (MSMQ MESSAGE_COUNT)"},
    {"sluice_queue_messages_ready", "gauge", "Messages ready for delivery"},
    {"sluice_queue_messages_unacked", "gauge", "Messages delivered or locked, not yet settled"},
    {"sluice_queue_bytes", "gauge", "Body bytes in the queue"},
    {"sluice_queue_consumers", "gauge", "Consumers of the queue"},
    {"sluice_stream_segments", "gauge", "Segment files of the stream's log"},
    {"sluice_stream_bytes", "gauge", "Bytes of the stream's log on disk"},
    {"sluice_stream_first_offset", "gauge", "Offset of the oldest entry the stream keeps"},
    {"sluice_stream_committed_offset", "gauge", "Offset of the newest durable entry"},
};

/* per_queue[i]'s value: the queue's own figures (node/totals.c), or its type's by RabbitMQ's
 * name (a stream's messages are its log's entries); -1: none (a stream's only) */
static int64_t queue_stat(const qm_queue *q, size_t i)
{
    static const char *const own[] = {
        "messages",     "messages_ready",  "", "", "", "segments", "stream_bytes",
        "first_offset", "committed_offset"};
    qm_figure fig[QM_FIGURES_MAX];
    for (size_t k = 0, n = qm_queue_type_figures(q, fig); k < n; k++)
        if (!strcmp(fig[k].name, own[i]))
            return fig[k].value;
    node_totals t;
    node_totals_queue(q, &t);
    const uint64_t v[] = {t.messages, t.ready, t.unacked, t.bytes, t.consumers};
    return i < 5 ? (int64_t)v[i] : -1;
}

static void queue_series(sl_buf *b, qm_queue *q, size_t i)
{
    int64_t v = queue_stat(q, i);
    if (v < 0)
        return; /* nor its subqueues: only a stream has these, and it has none */
    http_prom_out(b, "%s{vhost=\"", per_queue[i].name);
    http_prom_label(b, q->vhost->name);
    http_prom_out(b, "\",queue=\"");
    http_prom_label(b, q->name);
    http_prom_out(b, "\"} %lld\n", (long long)v);
    size_t n;
    void **subs = sl_map_sorted(q->subqueues, &n);
    for (size_t k = 0; k < n; k++)
        queue_series(b, subs[k], i);
    sl_free(subs);
}

/* The leader's view of each follower (repl.h cl_rl_peer), labelled by node: what GET
 * /api/cluster says. A member removed (or never registered and out of the ISR and the
 * stream) is not listed; on a follower there is no series (its /metrics is the leader's,
 * forwarded, when there is one). */
static void follower_metrics(sl_buf *b, mgmt *m)
{
    if (!m->n->repl || !m->n->cluster)
        return;
    cl_status st;
    cl_member_status(m->n->cluster, &st);
    cl_stream_peer peers[CL_MAX_MEMBERS];
    size_t n = cl_stream_server_peers(m->n->repl, peers, CL_MAX_MEMBERS);
    static const struct {
        const char *name, *help;
    } series[] = {
        {"sluice_cluster_follower_insync", "1 while the follower is in the leader's ISR"},
        {"sluice_cluster_follower_lag_bytes",
         "Bytes of record groups the follower has not acked durable"},
        {"sluice_cluster_follower_lag_ms",
         "Age in ms of the oldest record group the follower has not acked durable"},
    };
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        http_prom_out(b, "# HELP %s %s\n# TYPE %s gauge\n", series[k].name, series[k].help,
                      series[k].name);
        for (size_t i = 0; i < n; i++) {
            const cl_stream_peer *p = &peers[i];
            int listed = p->insync || p->connected;
            for (size_t j = 0; j < st.n_nodes; j++)
                listed |= !strcmp(st.nodes[j].name, p->name);
            if (!listed)
                continue;
            http_prom_out(b, "%s{node=\"", series[k].name);
            http_prom_label(b, p->name);
            http_prom_out(b, "\"} %llu\n",
                          (unsigned long long)(k == 0   ? (uint64_t)p->insync
                                               : k == 1 ? p->lag_bytes
                                                        : p->lag_ms));
        }
    }
}

/* Both doors' acceptors: paused while descriptors run short or the door is full. */
static void listener_metrics(sl_buf *b, mgmt *m)
{
    const node_listener *amqp = node_listener_find(m->n, "amqp");
    sl_acceptor none = {0};
    const sl_acceptor *acc[2] = {amqp && amqp->acceptor ? amqp->acceptor : &none, m->acceptor};
    http_prom_out(b,
                  "# HELP sluice_listener_accepting 1 while the listener accepts connections (0: "
                  "paused for lack of descriptors or at its connection cap)\n"
                  "# TYPE sluice_listener_accepting gauge\n");
    for (int i = 0; i < 2; i++)
        http_prom_out(b, "sluice_listener_accepting{listener=\"%s\"} %d\n", i ? "http" : "amqp",
                      acc[i]->paused == SL_ACCEPT_RUNNING);
    http_prom_out(
        b, "# HELP sluice_listener_fd_pauses_total Times the listener stopped accepting for lack "
           "of file descriptors\n# TYPE sluice_listener_fd_pauses_total counter\n");
    for (int i = 0; i < 2; i++)
        http_prom_out(b, "sluice_listener_fd_pauses_total{listener=\"%s\"} %llu\n",
                      i ? "http" : "amqp", (unsigned long long)acc[i]->pauses);
    http_prom_out(b,
                  "# HELP sluice_listener_fd_refused_total Connections closed at once to keep the "
                  "descriptor reserve\n# TYPE sluice_listener_fd_refused_total counter\n");
    for (int i = 0; i < 2; i++)
        http_prom_out(b, "sluice_listener_fd_refused_total{listener=\"%s\"} %llu\n",
                      i ? "http" : "amqp", (unsigned long long)acc[i]->fd_refused);
    http_prom_metric(b, "sluice_http_connections", "gauge", "Open HTTP connections", mgmt_conns(m));
    http_prom_metric(b, "sluice_fd_limit", "gauge", "RLIMIT_NOFILE of the node", acc[0]->fd_limit);
    /* The cluster (a node without cluster settings is a cluster of one, its own leader). */
    uint64_t leader = 1, epoch = 0, members = 1, isr = 1;
    if (m->n->cluster) {
        static cl_view v; /* the loop's alone */
        cl_view_read(m->n->cluster, m->n->repl, m->n->cfg->node_name, "", "", &v);
        leader = (uint64_t)v.serving;
        epoch = v.epoch;
        members = v.n_registered;
        isr = v.isr;
    }
    http_prom_metric(b, "sluice_cluster_leader", "gauge",
                     "1 while this node is the leader and serves", leader);
    http_prom_metric(b, "sluice_cluster_epoch", "gauge", "Epoch of the cluster's leader key",
                     epoch);
    http_prom_metric(b, "sluice_cluster_members", "gauge", "Members registered in etcd", members);
    http_prom_metric(b, "sluice_cluster_isr_size", "gauge", "In-sync replicas (the leader counts)",
                     isr);
    follower_metrics(b, m);
    /* Stalls, whoever caused them: how long the loop's turns take. */
    sl_loop_stats ls;
    sl_loop_get_stats(m->n->loop, &ls);
    http_prom_metric(b, "sluice_loop_turns_total", "counter", "Event-loop turns", ls.turns);
    http_prom_out(b,
                  "# HELP sluice_loop_turn_seconds_max Longest event-loop turn since start\n"
                  "# TYPE sluice_loop_turn_seconds_max gauge\nsluice_loop_turn_seconds_max %.6f\n",
                  (double)ls.max_us / 1e6);
    http_prom_out(
        b, "# HELP sluice_loop_turns_over_total Event-loop turns longer than ms milliseconds "
           "(every connection waited that long)\n# TYPE sluice_loop_turns_over_total counter\n");
    for (int i = 0; i < 5; i++)
        http_prom_out(b, "sluice_loop_turns_over_total{ms=\"%u\"} %llu\n", sl_loop_stat_ms[i],
                      (unsigned long long)ls.over_ms[i]);
    if (!m->n->cfg->loop_cpu_stats)
        return;
    http_prom_out(b,
                  "# HELP sluice_loop_turn_cpu_seconds_max Most CPU time one event-loop turn took "
                  "(loop_cpu_stats)\n# TYPE sluice_loop_turn_cpu_seconds_max gauge\n"
                  "sluice_loop_turn_cpu_seconds_max %.6f\n",
                  (double)ls.cpu_max_us / 1e6);
    http_prom_out(b,
                  "# HELP sluice_loop_turns_cpu_over_total Event-loop turns that took more than ms "
                  "milliseconds of CPU (loop_cpu_stats)\n"
                  "# TYPE sluice_loop_turns_cpu_over_total counter\n");
    for (int i = 0; i < 5; i++)
        http_prom_out(b, "sluice_loop_turns_cpu_over_total{ms=\"%u\"} %llu\n", sl_loop_stat_ms[i],
                      (unsigned long long)ls.cpu_over_ms[i]);
}

enum MHD_Result mgmt_serve_metrics(req *r)
{
    int per_object = r->nsegs == 2 && !strcmp(r->segs[1], "per-object");
    if (r->nsegs > 2 || (r->nsegs == 2 && !per_object))
        return mgmt_reply_not_found(r);
    if (!mgmt_req_is(r, "GET"))
        return mgmt_reply_method_not_allowed(r);
    if (per_object && !r->authed)
        return mgmt_reply_error(r, 401, "not_authorised", "per-object metrics need a user");
    node_totals t;
    mgmt_totals_get(r->m, &t);
    sl_buf b;
    sl_buf_init(&b);
    http_prom_out(&b,
                  "# HELP sluice_build_info Sluice version\n# TYPE sluice_build_info gauge\n"
                  "sluice_build_info{product=\"%s\",version=\"%s\"} 1\n",
                  SLUICE_PRODUCT, SLUICE_VERSION);
    node_metric nm[NODE_TOTALS_METRICS];
    for (size_t i = 0, k = node_totals_metrics(r->m->n, &t, nm); i < k; i++)
        http_prom_metric(&b, nm[i].name, nm[i].type, nm[i].help, nm[i].v);
    listener_metrics(&b, r->m);
    node_metric sm[NODE_STREAM_METRICS];
    for (size_t i = 0, k = node_stream_metrics(&r->m->n->stream_figs, r->m->n->qm, sm); i < k; i++)
        http_prom_metric(&b, sm[i].name, sm[i].type, sm[i].help, sm[i].v);
    if (per_object) {
        size_t nv;
        void **vhs = sl_map_sorted(mgmt_req_node(r)->vhosts, &nv);
        for (size_t i = 0; i < sizeof per_queue / sizeof per_queue[0]; i++) {
            http_prom_out(&b, "# HELP %s %s\n# TYPE %s %s\n", per_queue[i].name, per_queue[i].help,
                          per_queue[i].name, per_queue[i].type);
            for (size_t v = 0; v < nv; v++) {
                if (!mgmt_req_vhost_listed(r, ((qm_vhost *)vhs[v])->name))
                    continue;
                size_t nq;
                void **qs = sl_map_sorted(((qm_vhost *)vhs[v])->queues, &nq);
                for (size_t k = 0; k < nq; k++)
                    queue_series(&b, qs[k], i);
                sl_free(qs);
            }
        }
        sl_free(vhs);
    }
    /* hand the buffer to MHD, which frees it with free() */
    size_t len = b.len;
    char *text = (char *)sl_buf_detach(&b);
    return mgmt_reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
