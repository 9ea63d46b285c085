/* ops.c - the operator's actions on a cluster (ops.h): refusals checked at once, then a timer
 * that follows the replication server and the member until the action is done.
 *
 * Step-down: publishers are blocked (cl_leader_handover) while the heir catches up with the
 * group the leader had when asked; then the member writes etcd's hand-over key naming the heir
 * and gives up the leader key; the node then closes its clients with 320 and re-executes as a
 * follower, as a deposed leader does. Forget: banned at once on this leader (its HELLO is
 * refused), out of the ISR through the epoch-checked transaction, then its keys go from etcd.
 * Readmit: the ban goes.
 *
 * Invariant: at most one action (ops->op); done is called exactly once for a started one.
 */
#include "cluster/ops.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cluster/leader.h"
#include "cluster/member.h"
#include "cluster/mirror.h"
#include "cluster/stream.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"

enum { OP_STEPDOWN, OP_FORGET, OP_READMIT };

struct cl_op {
    int kind, phase;
    char name[256];  /* the heir, or the member forgotten or readmitted */
    uint64_t target; /* step-down: the leader's last group when asked */
    uint64_t ticket; /* the stream's or the member's */
    uint64_t epoch;  /* step-down: the epoch handed over */
    uint64_t deadline;
    cl_op_done done;
    void *ctx;
};

struct cl_ops {
    sl_node *n;
    struct cl_op *op; /* the action in progress, one at a time */
    sl_timer t;       /* its look at the stream and the member */
};

static void finish(cl_ops *ops, cl_op_outcome o, const cl_op_result *res, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void finish(cl_ops *ops, cl_op_outcome o, const cl_op_result *res, const char *fmt, ...)
{
    struct cl_op *op = ops->op;
    char why[512] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
    }
    /* this may run inside the timer's callback: the timer is the ops', not the op's */
    if (sl_timer_armed(&ops->t))
        sl_timer_stop(ops->n->loop, &ops->t);
    ops->op = NULL;
    cl_op_done done = op->done;
    void *ctx = op->ctx;
    sl_free(op);
    done(ctx, o, why, res);
}

/* The in-sync, connected follower named (or, name empty, the best: the most acked, then the
 * smallest name) into *out; 0 when there is none. */
static int pick_heir(sl_node *n, const char *name, cl_stream_peer *out)
{
    cl_stream_peer peers[CL_MAX_MEMBERS];
    size_t np = n->repl ? cl_stream_server_peers(n->repl, peers, CL_MAX_MEMBERS) : 0;
    int found = 0;
    for (size_t i = 0; i < np; i++) {
        cl_stream_peer *p = &peers[i];
        if (!p->insync || !p->connected || p->copying)
            continue;
        if (name[0] && strcmp(p->name, name))
            continue;
        if (!found || p->acked > out->acked ||
            (p->acked == out->acked && strcmp(p->name, out->name) < 0))
            *out = *p;
        found = 1;
    }
    return found;
}

static void tick(sl_loop *loop, sl_timer *t)
{
    cl_ops *ops = t->data;
    struct cl_op *op = ops->op;
    if (!op)
        return;
    sl_node *n = ops->n;
    uint64_t now = sl_now_ms();
    char err[256] = "";
    if (!n->cluster || (op->kind != OP_STEPDOWN && !n->repl)) {
        if (n->cluster && op->kind == OP_FORGET && op->phase == 0)
            cl_member_unban_local(n->cluster, op->name);
        finish(ops, CL_OP_CONFLICT, NULL, "this node is no longer the cluster leader");
        return;
    }
    if (op->kind == OP_STEPDOWN && op->phase == 0) {
        cl_stream_peer p;
        if (!cl_member_serving(n->cluster)) {
            cl_leader_handover(n, 0, NULL);
            finish(ops, CL_OP_CONFLICT, NULL, "this node stopped being the leader meanwhile");
            return;
        }
        if (!pick_heir(n, op->name, &p)) {
            cl_leader_handover(n, 0, NULL);
            finish(ops, CL_OP_CONFLICT, NULL, "%s is no longer an in-sync follower", op->name);
            return;
        }
        if (p.acked >= op->target) {
            op->ticket = cl_member_handover(n->cluster, op->name);
            op->phase = 1;
            op->deadline = now + CL_OPS_ETCD_WAIT_MS;
        } else if (now >= op->deadline) {
            cl_leader_handover(n, 0, NULL);
            finish(ops, CL_OP_CONFLICT, NULL,
                   "%s did not catch up within %d s (it has group %llu of %llu): still the "
                   "leader",
                   op->name, CL_OPS_STEPDOWN_WAIT_MS / 1000, (unsigned long long)p.acked,
                   (unsigned long long)op->target);
            return;
        }
    } else if (op->kind == OP_STEPDOWN) {
        int st = cl_member_handover_state(n->cluster, op->ticket, err, sizeof err);
        if (st > 0) {
            cl_op_result res = {.epoch = op->epoch};
            snprintf(res.from, sizeof res.from, "%s", n->cfg->node_name);
            snprintf(res.to, sizeof res.to, "%s", op->name);
            finish(ops, CL_OP_OK, &res, NULL);
            return;
        }
        if (st < 0 || now >= op->deadline) {
            cl_leader_handover(n, 0, NULL);
            finish(ops, CL_OP_CONFLICT, NULL, "the hand-over could not be written to etcd: %s",
                   st < 0 ? err : "no answer");
            return;
        }
    } else if (op->kind == OP_FORGET && op->phase == 0) { /* forget: out of the ISR in etcd */
        if (cl_stream_server_forgotten(n->repl) >= op->ticket) {
            op->ticket = cl_member_forget(n->cluster, op->name);
            op->phase = 1;
            op->deadline = now + CL_OPS_ETCD_WAIT_MS;
        } else if (now >= op->deadline) {
            cl_member_unban_local(n->cluster, op->name); /* not removed after all */
            finish(ops, CL_OP_UNAVAILABLE, NULL,
                   "the ISR without %s could not be written to etcd in time", op->name);
            return;
        }
    } else if (op->kind == OP_READMIT) {
        int st = cl_member_readmit_state(n->cluster, op->ticket, err, sizeof err);
        if (st > 0) {
            finish(ops, CL_OP_OK, NULL, NULL);
            return;
        }
        if (st == -2) {
            finish(ops, CL_OP_UNKNOWN, NULL, "%s", err);
            return;
        }
        if (st < 0 || now >= op->deadline) {
            finish(ops, CL_OP_UNAVAILABLE, NULL, "%s could not be readmitted: %s", op->name,
                   st < 0 ? err : "etcd did not answer in time");
            return;
        }
    } else { /* forget: its registration gone */
        int st = cl_member_forget_state(n->cluster, op->ticket, err, sizeof err);
        if (st > 0) {
            finish(ops, CL_OP_OK, NULL, NULL);
            return;
        }
        if (st < 0 || now >= op->deadline) {
            finish(ops, CL_OP_UNAVAILABLE, NULL, "%s could not be removed from etcd: %s", op->name,
                   st < 0 ? err : "no answer");
            return;
        }
    }
    sl_timer_start(loop, t, now + CL_OPS_TICK_MS);
}

static void start(cl_ops *ops, int kind, const char *name, uint64_t target, uint64_t ticket,
                  uint64_t epoch, uint64_t wait_ms, cl_op_done done, void *ctx)
{
    struct cl_op *op = sl_xcalloc(1, sizeof *op);
    op->kind = kind;
    snprintf(op->name, sizeof op->name, "%s", name);
    op->target = target;
    op->ticket = ticket;
    op->epoch = epoch;
    op->deadline = sl_now_ms() + wait_ms;
    op->done = done;
    op->ctx = ctx;
    ops->op = op;
    sl_timer_start(ops->n->loop, &ops->t, sl_now_ms() + CL_OPS_TICK_MS);
}

cl_ops *cl_ops_new(sl_node *n)
{
    cl_ops *ops = sl_xcalloc(1, sizeof *ops);
    ops->n = n;
    sl_timer_init(&ops->t, tick, ops);
    return ops;
}

void cl_ops_free(cl_ops *ops)
{
    if (!ops)
        return;
    if (ops->op)
        finish(ops, CL_OP_CANCELLED, NULL, "the node stops");
    if (sl_timer_armed(&ops->t))
        sl_timer_stop(ops->n->loop, &ops->t);
    sl_free(ops);
}

#define REFUSE(o, ...)                                                                             \
    do {                                                                                           \
        snprintf(why, whylen, __VA_ARGS__);                                                        \
        return (o);                                                                                \
    } while (0)

cl_op_outcome cl_ops_step_down(cl_ops *ops, const char *heir, const char *who, cl_op_done done,
                               void *ctx, char *why, size_t whylen)
{
    sl_node *n = ops->n;
    const char *name = heir ? heir : "";
    if (!n->cluster)
        REFUSE(CL_OP_NOT_CLUSTER, "not a cluster: this node has no cluster settings");
    if (!cl_member_serving(n->cluster) || !n->repl || !n->mirror)
        REFUSE(CL_OP_CONFLICT, "this node is not the cluster leader");
    if (ops->op)
        REFUSE(CL_OP_CONFLICT, "another cluster action is in progress");
    if (!strcmp(name, n->cfg->node_name))
        REFUSE(CL_OP_CONFLICT, "%s is this node, the leader", name);
    cl_stream_peer p;
    if (!pick_heir(n, name, &p)) {
        if (name[0])
            REFUSE(CL_OP_CONFLICT, "%s is not an in-sync follower: cannot hand over to it", name);
        REFUSE(CL_OP_CONFLICT, "no in-sync follower to hand over to: still the leader");
    }
    cl_status st;
    cl_member_status(n->cluster, &st);
    uint64_t target = cl_mirror_last(n->mirror);
    sl_info("cluster: step-down asked (by %s): handing over to %s once it has group %llu", who,
            p.name, (unsigned long long)target);
    cl_leader_handover(n, 1, p.name);
    start(ops, OP_STEPDOWN, p.name, target, 0, st.epoch, CL_OPS_STEPDOWN_WAIT_MS, done, ctx);
    return CL_OP_OK;
}

cl_op_outcome cl_ops_forget(cl_ops *ops, const char *name, const char *who, cl_op_done done,
                            void *ctx, char *why, size_t whylen)
{
    sl_node *n = ops->n;
    if (!n->cluster)
        REFUSE(CL_OP_NOT_CLUSTER, "not a cluster: this node has no cluster settings");
    if (!strcmp(name, n->cfg->node_name))
        REFUSE(CL_OP_CONFLICT,
               "%s is the leader: step down first (POST /api/cluster/step-down), then remove it "
               "through the new leader",
               name);
    if (!cl_member_serving(n->cluster) || !n->repl)
        REFUSE(CL_OP_CONFLICT, "this node is not the cluster leader");
    cl_status st;
    cl_member_status(n->cluster, &st);
    int known = 0;
    for (size_t i = 0; i < st.n_nodes; i++)
        known |= !strcmp(st.nodes[i].name, name);
    cl_stream_peer peers[CL_MAX_MEMBERS];
    size_t np = cl_stream_server_peers(n->repl, peers, CL_MAX_MEMBERS);
    for (size_t i = 0; i < np; i++) /* in the ISR or following, registered or not */
        known |= !strcmp(peers[i].name, name) && (peers[i].insync || peers[i].connected);
    cl_member_fig *f = sl_xcalloc(CL_MAX_MEMBERS, sizeof *f);
    size_t nf = cl_member_members(n->cluster, f, CL_MAX_MEMBERS);
    for (size_t i = 0; i < nf; i++) /* a stopped member (members/NAME, running false) too */
        known |= !strcmp(f[i].name, name);
    sl_free(f);
    if (!known)
        REFUSE(CL_OP_UNKNOWN, "%s is not a member of this cluster", name);
    if (ops->op)
        REFUSE(CL_OP_CONFLICT, "another cluster action is in progress");
    /* banned here first: once its stream is cut (below) its next HELLO must find the ban */
    cl_member_ban_local(n->cluster, name);
    uint64_t t = cl_stream_server_forget(n->repl, name);
    if (!t) {
        cl_member_unban_local(n->cluster, name);
        REFUSE(CL_OP_CONFLICT, "%s cannot be forgotten now", name);
    }
    sl_info("cluster: removing member %s (asked by %s)", name, who);
    start(ops, OP_FORGET, name, 0, t, 0, CL_OPS_ETCD_WAIT_MS, done, ctx);
    return CL_OP_OK;
}

cl_op_outcome cl_ops_readmit(cl_ops *ops, const char *name, const char *who, cl_op_done done,
                             void *ctx, char *why, size_t whylen)
{
    sl_node *n = ops->n;
    if (!n->cluster)
        REFUSE(CL_OP_NOT_CLUSTER, "not a cluster: this node has no cluster settings");
    if (!cl_member_serving(n->cluster) || !n->repl)
        REFUSE(CL_OP_CONFLICT, "this node is not the cluster leader");
    if (ops->op)
        REFUSE(CL_OP_CONFLICT, "another cluster action is in progress");
    sl_info("cluster: readmitting member %s (asked by %s)", name, who);
    start(ops, OP_READMIT, name, 0, cl_member_readmit(n->cluster, name), 0, CL_OPS_ETCD_WAIT_MS,
          done, ctx);
    return CL_OP_OK;
}
