/* node.h - a cluster node's roles as a process (issue 31, docs/cluster.md "Roles").
 *
 * A node with cluster settings starts in the FOLLOWER PHASE (cl_node_follow): it binds its
 * AMQP, AMQPS and HTTP listening sockets (so its ports are known and advertised at once), starts
 * the member thread (etcd: lease, election), the replication client (mirroring the leader's
 * data directory into its own: stream.h over mirror.h) and the front door (proxy.h: clients
 * are spliced to the leader). It runs no queue model and never opens the store.
 *
 * When the member thread wins the leader key, cl_node_follow stops the client and the proxy
 * and returns the node: main() then starts the broker as after kill -9 (persist_open recovers
 * the mirrored directory), adopting the bound sockets (node_config.adopt_*_fd) and the member,
 * and the node starts the replication server (cluster/leader.c).
 *
 * A leader that stops being leader re-executes itself (cl_node_reexec: execv of
 * /proc/self/exe, same pid, its sockets passed with --listen-fd) into the follower phase.
 *
 * Node-local files (never mirrored): DATA_DIR/replica/state (mirror.h: the last group applied
 * and the epoch history) and DATA_DIR/replica/led, written at promotion: a node that led may
 * hold groups no one else has (written before it was deposed or killed), which a physical
 * mirror cannot take back, so when it follows again it first takes a full copy.
 */
#ifndef SL_CLUSTER_NODE_H
#define SL_CLUSTER_NODE_H

#include <stdint.h>

#include "node/config.h"
#include "cluster/member.h"
#include "cluster/repl.h"

typedef struct cl_node {
    cl_member *member;   /* running: it holds the leader key */
    uint64_t epoch;      /* the epoch this node leads */
    uint64_t last_idx;   /* the log's last group at promotion */
    cl_repl_epochs hist; /* and its history */
    /* The directory may hold operations beyond group last_idx (it led before, or stopped in
     * the middle of applying a group): a follower that has exactly last_idx would miss them
     * if it continued from this leader's first group, so every follower takes a full copy
     * (the server refuses the groups up to last_idx + 1). */
    int dirty;
} cl_node;

/* The follower phase. 1: promoted (*out; cfg->adopt_*_fd hold the sockets), 0: SIGTERM or
 * SIGINT came (exit 0), -1: failure (logged). */
int cl_node_follow(node_config *cfg, cl_node **out);
void cl_node_free(cl_node *n);
/* Re-execute this process (same pid) into the follower phase, keeping the listening sockets
 * (fds < 0 are skipped). Returns only on failure. */
void cl_node_reexec(char **argv, int amqp_fd, int amqps_fd, int http_fd, int https_fd);

#endif
