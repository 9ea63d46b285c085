/* cluster.c - the broker's side of the cluster (issue 31): starts this node's membership
 * (src/cluster/member.c), refuses clients while the node is not the leader, and closes every
 * client connection with 320 the moment it stops being the leader (its lease could not be
 * renewed, or another node holds the key): no two leaders serve at once.
 *
 * What is not here yet: the replication stream (followers copying the leader's record groups;
 * src/cluster/repl.h holds its state machines) and the holding of confirms until the in-sync
 * replicas have them. Until then a leader confirms on its own disk alone: see README.
 */
#include <stdio.h>
#include <string.h>

#include "broker.h"
#include "cluster/member.h"
#include "core/log.h"

static void on_cluster_event(sl_loop *loop, sl_watch *w, int events)
{
    broker *b = w->data;
    (void)loop;
    (void)events;
    cl_member_take_event(b->cluster);
    if (cl_member_serving(b->cluster))
        return;
    cl_status st;
    cl_member_status(b->cluster, &st);
    size_t n = 0;
    for (conn *c = b->conns; c; c = c->next) {
        if (c->read_paused || c->out_paused) {
            c->read_paused = c->out_paused = 0; /* a blocked publisher must hear it too */
            conn_update_watch(c);
        }
        conn_force_close(c, "CONNECTION_FORCED - this node is no longer the cluster leader");
        n++;
    }
    if (n)
        sl_warn("cluster: not the leader any more: closed %zu client connection(s)", n);
}

int broker_cluster_start(broker *b, int http_port)
{
    const sl_config *cfg = b->cfg;
    cl_member_opts o = {
        .conf = &cfg->cluster,
        .node_name = cfg->node_name,
        .bind = cfg->bind,
        .advertise = cfg->cluster.advertise_address ? cfg->cluster.advertise_address : cfg->bind,
        .amqp_port = b->bound_port,
        .http_port = http_port,
    };
    char err[512];
    b->cluster = cl_member_start(&o, err, sizeof err);
    if (!b->cluster) {
        sl_error("cluster: %s", err);
        return -1;
    }
    b->cluster_w.fd = cl_member_fd(b->cluster);
    b->cluster_w.fn = on_cluster_event;
    b->cluster_w.data = b;
    sl_loop_watch(b->loop, &b->cluster_w, SL_EV_READ);
    sl_info("cluster: member of %s on etcd (%u endpoint(s)); clients are served by the leader "
            "only",
            cfg->cluster.cluster_name, cfg->cluster.n_endpoints);
    sl_warn("cluster: the replication stream is not built yet: a leader confirms on its own "
            "disk alone, and a failover loses what only the old leader had (README, Cluster)");
    return 0;
}

void broker_cluster_stop(broker *b)
{
    if (!b->cluster)
        return;
    sl_loop_unwatch(b->loop, &b->cluster_w);
    cl_member_stop(b->cluster);
    b->cluster = NULL;
}

int broker_cluster_refuses(broker *b, char *err, size_t errlen)
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
