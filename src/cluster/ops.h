/* ops.h - the operator's actions on a cluster, protocol-neutral (the HTTP API is one door
 * over them): step down to an in-sync heir, remove (forget) a member and keep it out, readmit
 * a removed one.
 *
 * Each call checks its refusals at once (not a cluster, not the leader, no such member, an
 * action already running: returned with the reason, done never called); a started action then
 * runs without blocking the loop, a timer looking every CL_OPS_TICK_MS at the replication
 * server and the member, and done(ctx, outcome, why, result) is called exactly once. One action
 * at a time per node. Their answers touch no store: they never wait for the disk or the ISR.
 */
#ifndef SL_CLUSTER_OPS_H
#define SL_CLUSTER_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "node/node.h"

#define CL_OPS_TICK_MS 10
#define CL_OPS_STEPDOWN_WAIT_MS 10000 /* the heir must have caught up by then */
#define CL_OPS_ETCD_WAIT_MS 10000     /* an etcd write an action waits for */

typedef enum cl_op_outcome {
    CL_OP_OK = 0,      /* started (a call) or done (done's outcome) */
    CL_OP_NOT_CLUSTER, /* this node has no cluster settings */
    CL_OP_CONFLICT,    /* not the leader, no such heir, another action, gave up */
    CL_OP_UNKNOWN,     /* no such member (forget), not removed (readmit) */
    CL_OP_UNAVAILABLE, /* etcd did not take it in time */
    CL_OP_CANCELLED,   /* the node stops: the action is let go */
} cl_op_outcome;

typedef struct cl_op_result {
    char from[256], to[256]; /* step-down: the old leader and the heir */
    uint64_t epoch;          /* step-down: the epoch handed over */
} cl_op_result;

typedef void (*cl_op_done)(void *ctx, cl_op_outcome o, const char *why, const cl_op_result *res);

typedef struct cl_ops cl_ops;

cl_ops *cl_ops_new(sl_node *n);
/* An action in progress hears CL_OP_CANCELLED. */
void cl_ops_free(cl_ops *ops);
/* Hand over to heir ("" or NULL: the best in-sync follower); who is named in the log. */
cl_op_outcome cl_ops_step_down(cl_ops *ops, const char *heir, const char *who, cl_op_done done,
                               void *ctx, char *why, size_t whylen);
cl_op_outcome cl_ops_forget(cl_ops *ops, const char *name, const char *who, cl_op_done done,
                            void *ctx, char *why, size_t whylen);
cl_op_outcome cl_ops_readmit(cl_ops *ops, const char *name, const char *who, cl_op_done done,
                             void *ctx, char *why, size_t whylen);

#endif
