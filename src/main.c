/* main.c - sluiced: parse settings, prepare the data directory, make the node (node/node.h),
 * its links and its doors (AMQP, HTTP with DCE/RPC, MS-MQQB, streams), run the event loop until
 * SIGTERM / SIGINT, then close every connection with 320 and exit 0.
 *
 * Start order: the node and its store (a cluster leader's mirrored), the links (they recover
 * the outgoing queues), the AMQP door (it tells the links the node's address), the HTTP and
 * MS-MQQB doors, then a promoted cluster node adopts its member. The node stops its parts in
 * the reverse order (node_free).
 *
 * A cluster node (cluster_formation configured) first runs the follower phase
 * (cluster/node.h) until it is elected; then the broker starts on the mirrored data directory
 * and the sockets the phase bound. A leader deposed re-executes itself into the follower
 * phase (same pid), its listening sockets kept open across the exec.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/broker.h"
#include "cluster/leader.h"
#include "cluster/node.h"
#include "link/link.h"
#include "node/node.h"
#include "persist/persist.h"
#include "rpc/msrpc.h"
#include "core/log.h"
#include "core/version.h"
#include "mgmt/mgmt.h"
#include "mq/mq.h"
#include "msmq/server.h"
#include "stream/stream.h"
#include "store/log.h"

int main(int argc, char **argv)
{
    node_config cfg;
    node_config_defaults(&cfg);
    int rc = node_config_from_args(&cfg, argc, argv);
    if (rc != 0) {
        node_config_free(&cfg);
        return rc > 0 ? 0 : 2;
    }
    sl_log_min_level = cfg.log_level;
    /* Tests only: slow or failing syncs (store/log.h). */
    const char *fault = getenv("SLUICE_FAULT");
    if (fault && *fault) {
        char err[256];
        if (st_fault_configure(fault, err, sizeof err) < 0) {
            sl_error("%s", err);
            node_config_free(&cfg);
            return 2;
        }
        sl_warn("SLUICE_FAULT=%s: store syncs are made slow or failing on purpose", fault);
    }
    if (mkdir(cfg.data_dir, 0750) < 0 && errno != EEXIST) {
        sl_error("cannot create data directory %s: %s", cfg.data_dir, strerror(errno));
        node_config_free(&cfg);
        return 1;
    }
    sl_info("%s %s starting: node %s, data directory %s", SLUICE_PRODUCT, SLUICE_VERSION,
            cfg.node_name, cfg.data_dir);
    cl_node *node = NULL;
    int keep[4] = {-1, -1, -1, -1}; /* the sockets, kept for a re-exec */
    if (cfg.cluster.enabled) {
        int r = cl_node_follow(&cfg, &node);
        if (r <= 0) {
            node_config_free(&cfg);
            if (r == 0)
                sl_info("stopped");
            return r == 0 ? 0 : 1;
        }
        int *fds[4] = {&cfg.adopt_amqp_fd, &cfg.adopt_amqps_fd, &cfg.adopt_http_fd,
                       &cfg.adopt_https_fd};
        for (int i = 0; i < 4; i++)
            keep[i] = *fds[i] >= 0 ? fcntl(*fds[i], F_DUPFD_CLOEXEC, 0) : -1;
    }
    /* Every part below starts NULL and every stop takes NULL: a start that fails and the end
     * of the run leave through the one teardown at "out", in the reverse order of starting. */
    int status = 1, reexec = 0;
    mgmt *m = NULL;
    mq_state *mqs = NULL; /* MSMQ's operations, shared by the HTTP and DCE/RPC doors */
    msrpc *rpc = NULL;
    msmq_server *mq = NULL;
    char err[256];
    sl_node *n = node_new(&cfg);
    persist_options po = {0};
    if (n)
        n->cl_node = node;
    if (!n || (node && cl_leader_mirror(n, &po) < 0) || /* the store is mirrored */
        node_open(n, &po) < 0 || link_start(n) < 0 || !broker_start(n))
        goto out;
    if (cfg.mgmt_port >= 0) {
        mqs = mq_new(n);
        m = mgmt_start(n, mqs, err, sizeof err);
        /* The DCE/RPC doors (listeners.msrpc, listeners.msrpc_epmap) run beside the HTTP API,
         * whose handle rundown they share. */
        if (!m || rpc_msrpc_start(&rpc, mqs, err, sizeof err) < 0) {
            sl_error("management API: %s", err);
            goto out;
        }
    }
    mq = msmq_start(n, err, sizeof err);
    if (!mq && err[0]) {
        sl_error("listeners.msmq: %s", err);
        goto out;
    }
    /* RabbitMQ's stream protocol (listeners.stream): a part of the node, freed by node_free */
    if (!stream_start(n, err, sizeof err) && err[0]) {
        sl_error("%s", err);
        goto out;
    }
    if (node && cl_leader_adopt(n, m ? mgmt_port(m) : 0) < 0)
        goto out;
    node_run(n);
    reexec = n->reexec;
    status = reexec ? 1 : 0;
out:
    msmq_stop(mq);
    /* The RPC door's handles are run down with the HTTP ones; handles close their queue
     * descriptors while the queues still exist (mq_free, before node_free). */
    rpc_msrpc_stop(&rpc);
    mgmt_stop(m);
    mq_free(mqs);
    node_free(n);
    cl_node_free(node);
    node_config_free(&cfg);
    if (reexec)
        cl_node_reexec(argv, keep[0], keep[1], keep[2], keep[3]); /* returns on failure only */
    if (status == 0 || reexec)
        sl_info("stopped");
    return status;
}
