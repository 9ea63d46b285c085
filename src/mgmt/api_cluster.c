/* api_cluster.c - GET /api/cluster (a Sluice extension, issue 31): who leads, the epoch, and
 * every member with its role, whether it is in sync, its lag and its addresses:
 *   {"name", "leader", "epoch", "nodes": [{"name", "role": "leader"|"follower"|"joining",
 *    "insync", "lag_bytes", "lag_ms", "amqp", "http"}]}
 * A node without cluster settings is a cluster of one: itself, leader, in sync. On the leader
 * the followers' insync, lag_bytes and lag_ms are the replication server's own (repl.h
 * rl_peer: bytes of groups not yet durable on it, and the age of the oldest), and a follower
 * taking a full copy is "joining". (Followers run no API of their own: the proxy forwards
 * GET /api/cluster to the leader, or answers it from etcd's view while there is none.) */
#include <string.h>

#include "cluster/member.h"
#include "cluster/stream.h"
#include "mgmt_internal.h"

static json_t *member_json(const char *name, const char *role, int insync, uint64_t lag_bytes,
                           uint64_t lag_ms, const char *amqp, const char *http)
{
    return json_pack("{s:s, s:s, s:b, s:I, s:I, s:s, s:s}", "name", name, "role", role, "insync",
                     insync, "lag_bytes", (json_int_t)lag_bytes, "lag_ms", (json_int_t)lag_ms,
                     "amqp", amqp, "http", http);
}

enum MHD_Result api_cluster(req *r)
{
    if (!req_is(r, "GET"))
        return reply_method_not_allowed(r);
    if (!acc_is_monitor(r->m->b->acc, r->user))
        return reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "Not monitor user");
    if (r->nsegs != 1)
        return reply_not_found(r);
    broker *b = r->m->b;
    const sl_config *cfg = b->cfg;
    char amqp[300], http[300];
    snprintf(amqp, sizeof amqp, "%s:%d", cfg->bind, b->bound_port);
    snprintf(http, sizeof http, "%s:%d", cfg->bind, mgmt_port(r->m));
    if (!b->cluster) {
        json_t *nodes = json_array();
        json_array_append_new(nodes, member_json(cfg->node_name, "leader", 1, 0, 0, amqp, http));
        return reply_json(r, 200,
                          json_pack("{s:s, s:s, s:I, s:o}", "name", cfg->node_name, "leader",
                                    cfg->node_name, "epoch", (json_int_t)0, "nodes", nodes));
    }
    cl_status st;
    cl_member_status(b->cluster, &st);
    cs_peer peers[CL_MAX_MEMBERS];
    size_t n_peers = b->repl ? cs_server_peers(b->repl, peers, CL_MAX_MEMBERS) : 0;
    json_t *nodes = json_array();
    int self_listed = 0;
    for (size_t i = 0; i < st.n_nodes; i++) {
        const cl_node_info *ni = &st.nodes[i];
        int is_self = !strcmp(ni->name, cfg->node_name);
        self_listed |= is_self;
        const char *role = !strcmp(ni->name, st.leader) ? "leader" : "follower";
        if (is_self) /* this node knows its own role better than the last look at etcd */
            role = st.role == CL_ROLE_LEADER     ? "leader"
                   : st.role == CL_ROLE_FOLLOWER ? "follower"
                                                 : "joining";
        int insync = ni->insync;
        uint64_t lag_bytes = 0, lag_ms = 0;
        for (size_t k = 0; k < n_peers && !is_self; k++) {
            if (strcmp(peers[k].name, ni->name))
                continue;
            insync = peers[k].insync; /* the leader's own ISR (etcd's may lag a write) */
            lag_bytes = peers[k].lag_bytes;
            lag_ms = peers[k].lag_ms;
            if (peers[k].copying)
                role = "joining";
        }
        if (b->repl && !is_self && !strcmp(role, "follower") && !insync) {
            int known = 0;
            for (size_t k = 0; k < n_peers; k++)
                known |= !strcmp(peers[k].name, ni->name);
            if (!known) /* never connected to this leader: it has not started following */
                role = "joining";
        }
        json_array_append_new(
            nodes, member_json(ni->name, role, insync, lag_bytes, lag_ms, ni->amqp, ni->http));
    }
    if (!self_listed) /* not registered in etcd yet (or etcd unreachable) */
        json_array_append_new(nodes, member_json(cfg->node_name, "joining", 0, 0, 0, amqp, http));
    json_t *j = json_pack("{s:s, s:o, s:I, s:o}", "name", cfg->cluster.cluster_name, "leader",
                          st.leader[0] ? json_string(st.leader) : json_null(), "epoch",
                          (json_int_t)st.epoch, "nodes", nodes);
    if (st.last_error[0])
        json_object_set_new(j, "etcd_error", json_string(st.last_error));
    return reply_json(r, 200, j);
}
