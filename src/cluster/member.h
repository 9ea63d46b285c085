/* member.h - this node's membership of a cluster on etcd (issue 31): a thread of its own that
 * holds the node's etcd lease, campaigns for the leader key, renews it, steps down before it
 * can expire, and keeps a snapshot of the cluster for the event loop (GET /api/cluster, the
 * refusal of clients on followers).
 *
 * etcd keys, under /PREFIX/CLUSTER/ (cluster_formation.etcd.key_prefix, .cluster_name):
 *   leader        {"node","epoch","amqp","http","replication"}, under the leader's lease
 *   epoch         the last epoch taken (decimal; no lease: it only grows)
 *   isr           ["node", ...]: the in-sync replicas (no lease)
 *   nodes/NAME    {"name","amqp","http","replication","last_epoch","last_idx"}, under the
 *                 node's lease (membership: gone when the node is)
 * Taking the leader key is one transaction: leader absent (create_revision 0) and epoch
 * unchanged since read (mod_revision) -> put leader (with the lease), epoch + 1, and the ISR
 * [self] when there is none yet (a new cluster). Only an ISR member (or anyone, when there is
 * no ISR) campaigns; among the live ISR members the one with the longest log (last_epoch,
 * last_idx; then the smallest name) goes first, the others a round later.
 *
 * Renewal: a keepalive every lease_ttl / 4. The lease is taken as valid until the time the
 * keepalive was SENT plus the TTL etcd answered (etcd counts from when it got it, later); the
 * node stops being leader lease_ttl / 4 before that (each etcd call is bounded by lease_ttl / 4
 * too), so it has stopped serving before the key can expire and another node take it.
 *
 * Threads: everything here runs on the member's thread except the functions marked (loop),
 * which take a mutex for a copy of the state. The loop learns of a change of role from
 * cl_member_fd (readable; cl_member_take_event clears it).
 */
#ifndef SL_CLUSTER_MEMBER_H
#define SL_CLUSTER_MEMBER_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/conf.h"

#define CL_MAX_MEMBERS 16

enum { CL_ROLE_JOINING, CL_ROLE_FOLLOWER, CL_ROLE_LEADER };

typedef struct cl_node_info {
    char name[256];
    char amqp[280], http[280], replication[280];
    int insync;
} cl_node_info;

typedef struct cl_status {
    int role;
    uint64_t epoch;   /* the epoch of the leader key seen last (0: none) */
    char leader[256]; /* "" when there is none */
    char leader_amqp[280];
    cl_node_info nodes[CL_MAX_MEMBERS];
    size_t n_nodes;
    char last_error[256]; /* the last etcd failure, for the log and the API */
} cl_status;

typedef struct cl_member cl_member;

typedef struct cl_member_opts {
    const cl_conf *conf;
    const char *node_name;
    const char *bind;      /* address the replication port listens on */
    const char *advertise; /* address peers and clients are told */
    int amqp_port, http_port;
} cl_member_opts;

/* Bind the replication port (logs "listening replication=ADDR:PORT") and start the thread.
 * NULL with err on failure. */
cl_member *cl_member_start(const cl_member_opts *o, char *err, size_t errlen);
/* Stop the thread; a leader gives its key back first (lease revoked) for a quick failover. */
void cl_member_stop(cl_member *m);
int cl_member_fd(const cl_member *m);                /* (loop) */
void cl_member_take_event(cl_member *m);             /* (loop) */
void cl_member_status(cl_member *m, cl_status *out); /* (loop) */
/* (loop) 1 while this node is the leader and its lease surely valid. */
int cl_member_serving(cl_member *m);
int cl_member_replication_port(const cl_member *m);

#endif
