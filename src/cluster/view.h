/* view.h - the cluster as GET /api/cluster and /metrics show it: each member's role, ISR
 * standing and lag, merged from etcd's view (the member thread's last look) and, on the
 * leader, from its own replication stream's (fresher: etcd's ISR may lag a write by a look).
 * Plain structs; the doors render them.
 *
 * Invariant: a member's role is "leader", "follower" or "joining"; this node's own role is its
 * own (it knows better than its last look at etcd); a member the leader is sending a full copy
 * to, or has never heard from while it is out of the ISR, is joining.
 */
#ifndef SL_CLUSTER_VIEW_H
#define SL_CLUSTER_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/member.h"
#include "cluster/stream.h"

typedef struct cl_view_member {
    char name[256];
    const char *role; /* a static string */
    int insync;
    uint64_t lag_bytes, lag_ms;
    char amqp[280], http[280];
} cl_view_member;

typedef struct cl_view {
    char leader[256]; /* "" when there is none */
    uint64_t epoch;
    int serving;         /* this node leads and serves */
    size_t n_registered; /* members registered in etcd */
    uint64_t isr;        /* in-sync replicas, the leader counting */
    cl_view_member nodes[CL_MAX_MEMBERS + 1];
    size_t n_nodes; /* the registered ones, and this node as joining when it is not yet */
    char banned[CL_MAX_MEMBERS][256];
    size_t n_banned;
    char etcd_error[256]; /* the last etcd failure; "" none */
} cl_view;

/* Reads the view of member m (repl: this node's replication server while it leads, else
 * NULL); self and its addresses name this node when etcd does not list it yet. */
void cl_view_read(cl_member *m, cl_stream_server *repl, const char *self, const char *self_amqp,
                  const char *self_http, cl_view *v);

#endif
