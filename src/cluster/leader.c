/* leader.c - the node's side of the cluster while it leads (issue 31; in cluster/ since issue
 * 45: it is the node's work, not the AMQP door's). A node with cluster settings runs its queue
 * model only while it leads (cluster/node.h: followers run none); so here:
 *  - the leader's member (adopted from the follower phase, still holding the leader key), and
 *    closing every client with 320 the moment it stops being the leader, then stopping the loop
 *    so that main() re-executes the process as a follower (no two leaders serve at once);
 *  - the mirror of the data directory (cluster/mirror.h), made before the store opens, fed by
 *    persist's batch hook: every batch becomes a group for the replication server
 *    (cluster/stream.h, its own thread);
 *  - the release gate: the server's released group, mapped back to a persist generation,
 *    moves persist_repl_release on the event loop (woken by the server's eventfd), and every
 *    reply that waits for the disk goes out then: confirms wait for the ISR;
 *  - below min_insync_replicas, publishers are blocked (connection.blocked "cluster: fewer
 *    than N in-sync replicas") as by a resource alarm, until the ISR is big enough again.
 *
 * Invariants: the cluster is one of the node's parts (node_part "cluster", added with the
 * mirror): the node stops it first (leave: the server, then the member, which hands the key
 * back) and tells it when the store has closed (closed: the replica state is saved); it asks it
 * whether an address is another member's (loopback_users). The doors are reached only through
 * node/node.h, never through their headers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/leader.h"

#include "cluster/auth.h"
#include "cluster/member.h"
#include "cluster/mirror.h"
#include "cluster/node.h"
#include "cluster/proxy.h"
#include "cluster/stream.h"
#include "core/log.h"
#include "net/tls.h"
#include "node/node.h"
#include "persist/persist.h"

static void cl_leader_stop(sl_node *b);
static void cl_leader_free_mirror(sl_node *b);

static void on_cluster_event(sl_loop *loop, sl_watch *w, int events)
{
    sl_node *b = w->data;
    (void)loop;
    (void)events;
    cl_member_take_event(b->cluster);
    if (cl_member_serving(b->cluster))
        return;
    cl_status st;
    cl_member_status(b->cluster, &st);
    if (b->repl)
        cl_stream_server_depose(b->repl); /* nothing more is released by this leader */
    /* The queue model goes with the process: every client is closed with 320 (as on SIGTERM,
     * the loop stops once they are gone, at most 2 s), then main() re-executes it as a
     * follower. (A member is adopted only by a promoted node: b->cl_node is set.) */
    if (!b->reexec)
        sl_warn("cluster: not the leader any more: closing %zu client connection(s)",
                (size_t)node_count_connections(b, NULL, NULL));
    b->reexec = 1;
    node_begin_shutdown(b, "cluster: no longer the leader",
                        "CONNECTION_FORCED - this node is no longer the cluster leader");
}

/* ---- the mirror and the release gate ---- */

static void on_batch(void *ctx, uint64_t gen, int synced)
{
    sl_node *b = ctx;
    uint64_t idx = cl_mirror_batch(b->mirror, gen, synced); /* on_group tells the server */
    if (b->cluster && b->cl_node)
        cl_member_set_log(b->cluster, b->cl_node->epoch, idx);
}

static void on_group(void *ctx, uint64_t idx, uint64_t bytes)
{
    sl_node *b = ctx;
    /* the group and the leader's durable index (this group's when its batch synced) in one
     * wake-up of the replication thread: two cost it a second round for nothing */
    if (b->repl)
        cl_stream_server_append_durable(b->repl, idx, bytes, cl_mirror_durable(b->mirror));
}

static void cluster_leave(void *ctx)
{
    cl_leader_stop(ctx);
}

static void cluster_closed(void *ctx)
{
    cl_leader_free_mirror(ctx);
}

/* A loopback address of another member's proxy is never a local client. */
static int peer_is_member(void *ctx, const struct sockaddr *sa)
{
    sl_node *b = ctx;
    if (!b->cluster)
        return 0;
    cl_status st;
    cl_member_status(b->cluster, &st);
    return cl_proxy_from_member(&st, b->cfg->node_name, sa);
}

int cl_leader_mirror(sl_node *b, struct persist_options *po)
{
    node_part part = {.name = "cluster",
                      .ctx = b,
                      .leave = cluster_leave,
                      .closed = cluster_closed,
                      .peer_is_member = peer_is_member};
    node_add_part(b, &part);
    cl_node *n = b->cl_node;
    b->mirror = cl_mirror_leader_new(b->cfg->data_dir, b->cfg->cluster.replication_buffer_bytes);
    if (!b->mirror) {
        sl_error("cluster: cannot mirror the data directory: %s", strerror(errno));
        return -1;
    }
    cl_mirror_start(b->mirror, n->epoch, n->last_idx);
    cl_mirror_set_notify(b->mirror, on_group, b);
    po->batch_hook = on_batch;
    po->batch_ctx = b;
    po->repl_gate = 1;
    return 0;
}

static void cl_leader_free_mirror(sl_node *b)
{
    /* After persist_close: every group is on this disk. The leader's log position, so that a
     * leader re-elected after its re-exec continues the numbering (the groups written after
     * the server stopped reached no follower: node.h's replica/led makes it copy first when
     * it follows). */
    cl_node *n = b->cl_node;
    if (b->mirror && n) {
        uint64_t last = cl_mirror_last(b->mirror);
        if (last > n->last_idx)
            cl_repl_epochs_note(&n->hist, n->epoch, n->last_idx + 1);
        if (cl_replica_state_save(b->cfg->data_dir, last, &n->hist) < 0)
            sl_warn("cluster: the replica state could not be saved: %s", strerror(errno));
    }
    cl_mirror_free(b->mirror);
    b->mirror = NULL;
}

static void on_repl_event(sl_loop *loop, sl_watch *w, int events)
{
    sl_node *b = w->data;
    (void)loop;
    (void)events;
    cl_stream_server_take_event(b->repl);
    uint64_t rel = cl_stream_server_released(b->repl);
    uint64_t gen = rel ? cl_mirror_gen_of(b->mirror, rel) : 0;
    if (gen && gen > persist_repl_released(b->store)) {
        persist_repl_release(b->store, gen);
        node_release_waiters(b);
    }
    int below = cl_stream_server_blocked(b->repl);
    int was = (b->alarms & ALARM_CLUSTER) != 0;
    node_set_cluster_alarm(b, below || b->cl_handover);
    if (below && !b->cl_handover && !was)
        node_drop_delivery_holds(b); /* consumers keep going (broker_hold_delivery) */
}

void cl_leader_handover(sl_node *b, int on, const char *heir)
{
    b->cl_handover = on;
    if (on)
        snprintf(b->cluster_reason, sizeof b->cluster_reason,
                 "cluster: handing leadership over to %s", heir);
    else
        snprintf(b->cluster_reason, sizeof b->cluster_reason,
                 "cluster: fewer than %u in-sync replicas", b->cfg->cluster.min_insync_replicas);
    /* off: the alarm goes only if the ISR allows it too */
    int below = b->repl && cl_stream_server_blocked(b->repl);
    node_set_cluster_alarm(b, on || below);
    if (!on && below)
        node_drop_delivery_holds(b); /* as when the ISR shrinks (on_repl_event) */
}

/* ---- the stream's callbacks into the mirror and the member ---- */

static int log_group(void *ctx, uint64_t idx, uint8_t **bytes, size_t *len, uint64_t *epoch)
{
    sl_node *b = ctx;
    /* A dirty start (node.h): no follower continues from before this leader's own groups. */
    if (b->cl_node->dirty && idx <= b->cl_node->last_idx + 1)
        return -1;
    return cl_mirror_group(b->mirror, idx, bytes, len, epoch);
}

static void log_isr(void *ctx, const char *const *names, size_t n)
{
    sl_node *b = ctx;
    cl_member_isr_propose(b->cluster, names, n);
}

static void *snap_open(void *ctx, uint64_t *snap_idx)
{
    sl_node *b = ctx;
    cl_mirror_snap *s = cl_mirror_snapshot(b->mirror);
    if (s)
        *snap_idx = cl_mirror_snap_idx(s);
    return s;
}

static size_t snap_count(void *s)
{
    return cl_mirror_snap_count(s);
}

static const char *snap_name(void *s, size_t i, uint64_t *size)
{
    return cl_mirror_snap_name(s, i, size);
}

static long snap_read(void *s, size_t i, uint64_t off, void *buf, size_t len)
{
    return cl_mirror_snap_read(s, i, off, buf, len);
}

static void snap_free(void *s)
{
    cl_mirror_snapshot_free(s);
}

/* Member hooks (its thread). */
static void hook_lease(void *ctx, uint64_t until)
{
    sl_node *b = ctx;
    if (b->repl)
        cl_stream_server_lease(b->repl, until);
}

static void hook_isr_done(void *ctx, int outcome)
{
    sl_node *b = ctx;
    if (b->repl)
        cl_stream_server_isr_result(b->repl, outcome);
}

/* The server's HELLO check (its thread): a member an operator removed is refused. The member
 * outlives the server (cl_leader_stop stops the server first). */
static int hook_banned(void *ctx, const char *name)
{
    sl_node *b = ctx;
    return cl_member_is_banned(b->cluster, name);
}

/* The server's AUTH / HELLO check (its thread): only a name registered in etcd. */
static int hook_member(void *ctx, const char *name)
{
    sl_node *b = ctx;
    return cl_member_is_member(b->cluster, name);
}

int cl_leader_adopt(sl_node *b, int http_port)
{
    (void)http_port;
    const node_config *cfg = b->cfg;
    cl_node *n = b->cl_node;
    b->cluster = n->member;
    n->member = NULL;
    b->cluster_w.fd = cl_member_fd(b->cluster);
    b->cluster_w.fn = on_cluster_event;
    b->cluster_w.data = b;
    sl_loop_watch(b->loop, &b->cluster_w, SL_EV_READ);
    snprintf(b->cluster_reason, sizeof b->cluster_reason, "cluster: fewer than %u in-sync replicas",
             cfg->cluster.min_insync_replicas);
    /* Groups made since the promotion (recovery's, seeding's) are this epoch's. */
    uint64_t last = cl_mirror_last(b->mirror);
    if (last > n->last_idx)
        cl_repl_epochs_note(&n->hist, n->epoch, n->last_idx + 1);
    cl_status st;
    cl_member_status(b->cluster, &st);
    const char *isr[CL_MAX_MEMBERS];
    size_t n_isr = 0;
    for (size_t i = 0; i < st.n_nodes; i++)
        if (st.nodes[i].insync && strcmp(st.nodes[i].name, cfg->node_name))
            isr[n_isr++] = st.nodes[i].name;
    uint32_t lag_max = cfg->cluster.lease_ttl_s * 1000;
    cl_stream_server_opts o = {.self = cfg->node_name,
                               .cluster = cfg->cluster.cluster_name,
                               .epoch = n->epoch,
                               .isr = isr,
                               .n_isr = n_isr,
                               .rl = {.min_isr = cfg->cluster.min_insync_replicas,
                                      .lag_max_ms = lag_max < 1000 ? 1000 : lag_max},
                               .last_idx = last,
                               .hist = &n->hist,
                               .banned = hook_banned,
                               .banned_ctx = b,
                               .member = hook_member,
                               .member_ctx = b,
                               .secret = cfg->cluster.secret,
                               .secret_len = cfg->cluster.secret_len};
    cl_stream_log lg = {.ctx = b,
                        .group = log_group,
                        .isr_propose = log_isr,
                        .snap_open = snap_open,
                        .snap_count = snap_count,
                        .snap_name = snap_name,
                        .snap_read = snap_read,
                        .snap_free = snap_free};
    char err[256];
    o.tls = cl_auth_tls_ctx(&cfg->cluster, 1, err, sizeof err);
    if (!o.tls && err[0]) {
        sl_error("cluster: %s", err);
        return -1;
    }
    int lfd = cl_member_take_listen(b->cluster);
    if (lfd < 0)
        sl_tls_ctx_free(o.tls); /* cl_stream_server_start owns it otherwise */
    b->repl = lfd >= 0 ? cl_stream_server_start(lfd, &o, &lg, err, sizeof err) : NULL;
    if (!b->repl) {
        sl_error("cluster: %s", lfd >= 0 ? err : "the replication socket is gone");
        return -1;
    }
    cl_stream_server_durable(b->repl, cl_mirror_durable(b->mirror));
    /* Test seam: SLUICE_CLUSTER_ADOPT_DELAY_MS=N holds the promotion N ms (at most 5 s) here,
     * the server running and the member hooks not yet set, so that a test can put the
     * server's first ISR proposal and its outcome in this window every time. */
    const char *delay = getenv("SLUICE_CLUSTER_ADOPT_DELAY_MS");
    if (delay && *delay) {
        long ms = strtol(delay, NULL, 10);
        if (ms > 0 && ms <= 5000)
            nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
    }
    cl_member_hooks h = {.ctx = b, .lease = hook_lease, .isr_done = hook_isr_done};
    cl_member_set_hooks(b->cluster, &h);
    cl_stream_server_lease(b->repl, cl_member_lease_until(b->cluster));
    cl_member_set_log(b->cluster, n->epoch, last);
    b->repl_w.fd = cl_stream_server_fd(b->repl);
    b->repl_w.fn = on_repl_event;
    b->repl_w.data = b;
    sl_loop_watch(b->loop, &b->repl_w, SL_EV_READ);
    node_set_cluster_alarm(b, cl_stream_server_blocked(b->repl) || b->cl_handover);
    sl_info("cluster: leader of %s, epoch %" PRIu64 ": serving; the log continues from group "
            "%" PRIu64 "; confirms wait for %u in-sync cop%s",
            cfg->cluster.cluster_name, n->epoch, last, cfg->cluster.min_insync_replicas,
            cfg->cluster.min_insync_replicas == 1 ? "y" : "ies");
    return 0;
}

static void cl_leader_stop(sl_node *b)
{
    if (b->repl) {
        sl_loop_unwatch(b->loop, &b->repl_w);
        if (b->cluster)
            cl_member_set_hooks(b->cluster, NULL);
        cl_mirror_set_notify(b->mirror, NULL, NULL); /* the sync thread's on_group: no more */
        cl_stream_server_stop(b->repl);
        b->repl = NULL;
    }
    if (!b->cluster)
        return;
    sl_loop_unwatch(b->loop, &b->cluster_w);
    cl_member_stop(b->cluster);
    b->cluster = NULL;
}

int cl_leader_refuses(sl_node *b, char *err, size_t errlen)
{
    if (!b->cluster || cl_member_serving(b->cluster))
        return 0;
    cl_status st;
    cl_member_status(b->cluster, &st);
    if (st.leader[0] && strcmp(st.leader, b->cfg->node_name))
        snprintf(err, errlen, "not the cluster leader: connect to %s at %s", st.leader,
                 st.leader_amqp);
    else
        snprintf(err, errlen, "not the cluster leader: no leader is elected yet, try again");
    return -1;
}
