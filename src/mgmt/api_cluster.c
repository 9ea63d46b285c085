/* api_cluster.c - the cluster's API (Sluice extensions, issue 31):
 *
 *   GET /api/cluster: who leads, the epoch, and every member with its role, whether it is in
 *     sync, its lag and its addresses:
 *     {"name", "leader", "epoch", "nodes": [{"name", "role": "leader"|"follower"|"joining",
 *      "insync", "lag_bytes", "lag_ms", "amqp", "http"}]}
 *     A node without cluster settings is a cluster of one: itself, leader, in sync. On the
 *     leader the followers' insync, lag_bytes and lag_ms are the replication server's own
 *     (repl.h cl_rl_peer: bytes of groups not yet durable on it, and the age of the oldest), and
 *     a follower taking a full copy is "joining".
 *   POST /api/cluster/step-down [{"node": HEIR}] (administrator): a clean hand-over to an
 *     in-sync follower. Publishers are blocked; once the heir has acked every group the leader
 *     had when asked (within STEPDOWN_WAIT_MS, else 409 and it stays leader), the member writes
 *     etcd's hand-over key naming the heir and gives up the leader key (member.h); then this
 *     replies 200 {"from", "to", "epoch"}, and the node closes its clients with 320 and
 *     re-executes as a follower, as a deposed leader does (the shutdown waits for this reply:
 *     broker.h api_inflight). 409 when there is no in-sync follower (or HEIR is not one), 400
 *     on a single node.
 *   DELETE /api/cluster/nodes/NAME (administrator): forget a member (RabbitMQ's
 *     forget_cluster_node) and keep it out: banned at once on this leader (its HELLO is
 *     refused), out of the ISR through the epoch-checked transaction (stream.h
 *     cl_stream_server_forget: the commit waits for it until etcd holds that), then banned/NAME is
 *     put and its nodes/, members/ and stats/ keys go (member.h); replies 200 with the view
 *     read again from etcd. 404 for a name the cluster does not know, 409 for the leader
 *     itself ("step down first").
 *   POST /api/cluster/nodes/NAME/readmit (administrator; a Sluice extension): the ban goes
 *     (banned/NAME deleted): the node registers and follows again within about a second.
 *     200 with the view, 404 when NAME is not removed.
 * The view lists the removed (banned) members as "removed": [NAME, ...].
 * Followers run no API of their own: the proxy forwards every request to the leader (or
 * answers GET /api/cluster from etcd's view while there is none).
 *
 * The actions wait without blocking the loop: the request is suspended and a timer looks
 * every OP_TICK_MS at the replication server and the member; one action at a time. Their
 * replies touch no store, so they never wait for the disk or the ISR (req.no_store).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "node/node.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "cluster/leader.h"
#include "cluster/member.h"
#include "cluster/mirror.h"
#include "cluster/stream.h"
#include "mgmt/mgmt_internal.h"

#define STEPDOWN_WAIT_MS 10000 /* the heir must have caught up by then */
#define ETCD_WAIT_MS 10000     /* an etcd write an action waits for */
#define OP_TICK_MS 10

enum { OP_STEPDOWN, OP_FORGET, OP_READMIT };

/* One operator action in progress (mgmt.cl_op). */
struct cl_op {
    mgmt *m;
    req *r;
    int kind, phase;
    char name[256];  /* the heir, or the member forgotten */
    uint64_t target; /* step-down: the leader's last group when asked */
    uint64_t ticket; /* the stream's or the member's */
    uint64_t epoch;  /* step-down: the epoch handed over */
    uint64_t deadline;
};

static json_t *member_json(const char *name, const char *role, int insync, uint64_t lag_bytes,
                           uint64_t lag_ms, const char *amqp, const char *http)
{
    return json_pack("{s:s, s:s, s:b, s:I, s:I, s:s, s:s}", "name", name, "role", role, "insync",
                     insync, "lag_bytes", (json_int_t)lag_bytes, "lag_ms", (json_int_t)lag_ms,
                     "amqp", amqp, "http", http);
}

/* The view GET /api/cluster answers (and DELETE after a removal). */
json_t *mgmt_cluster_view(mgmt *m)
{
    sl_node *n = m->n;
    const sl_config *cfg = n->cfg;
    char amqp[300], http[300];
    snprintf(amqp, sizeof amqp, "%s:%d", cfg->bind, node_amqp_port(n));
    snprintf(http, sizeof http, "%s:%d", cfg->bind, mgmt_port(m));
    if (!n->cluster) {
        json_t *nodes = json_array();
        json_array_append_new(nodes, member_json(cfg->node_name, "leader", 1, 0, 0, amqp, http));
        return json_pack("{s:s, s:s, s:I, s:o, s:[]}", "name", cfg->node_name, "leader",
                         cfg->node_name, "epoch", (json_int_t)0, "nodes", nodes, "removed");
    }
    cl_status st;
    cl_member_status(n->cluster, &st);
    cl_stream_peer peers[CL_MAX_MEMBERS];
    size_t n_peers = n->repl ? cl_stream_server_peers(n->repl, peers, CL_MAX_MEMBERS) : 0;
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
        if (n->repl && !is_self && !strcmp(role, "follower") && !insync) {
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
    char bans[CL_MAX_MEMBERS][256];
    size_t n_bans = cl_member_bans(n->cluster, bans, CL_MAX_MEMBERS);
    json_t *removed = json_array();
    for (size_t i = 0; i < n_bans; i++)
        json_array_append_new(removed, json_string(bans[i]));
    json_object_set_new(j, "removed", removed);
    if (st.last_error[0])
        json_object_set_new(j, "etcd_error", json_string(st.last_error));
    return j;
}

/* ---- operator actions ---- */

/* The action's outcome goes into the request (status in async_tag, then reply or error);
 * the op is freed and the request resumed. */
static void op_finish(struct cl_op *op, unsigned status, json_t *reply, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void op_finish(struct cl_op *op, unsigned status, json_t *reply, const char *fmt, ...)
{
    req *r = op->r;
    snprintf(r->async_tag, sizeof r->async_tag, "%u", status);
    if (reply) {
        r->async_reply = json_dumps(reply, JSON_COMPACT);
        json_decref(reply);
    } else {
        char why[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        r->async_err = sl_xstrdup(why);
    }
    /* the timer is mgmt's (cl_t), not the op's: this may run inside its callback */
    if (sl_timer_armed(&op->m->cl_t))
        sl_timer_stop(op->m->n->loop, &op->m->cl_t);
    op->m->cl_op = NULL;
    sl_free(op);
    req_resume(r);
}

static enum MHD_Result op_resumed(req *r)
{
    unsigned status = (unsigned)strtoul(r->async_tag, NULL, 10);
    if (r->async_reply) {
        char *text = sl_xstrdup(r->async_reply);
        return reply_text(r, status, "application/json", text, strlen(text));
    }
    return reply_error(r, status,
                       status == 409   ? "conflict"
                       : status == 404 ? "not_found"
                                       : "unavailable",
                       "%s", r->async_err ? r->async_err : "failed");
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

static void op_tick(sl_loop *loop, sl_timer *t)
{
    mgmt *m = t->data;
    struct cl_op *op = m->cl_op;
    if (!op)
        return;
    sl_node *n = op->m->n;
    uint64_t now = sl_now_ms();
    char err[256] = "";
    if (!n->cluster || (op->kind != OP_STEPDOWN && !n->repl)) {
        if (n->cluster && op->kind == OP_FORGET && op->phase == 0)
            cl_member_unban_local(n->cluster, op->name);
        op_finish(op, 409, NULL, "this node is no longer the cluster leader");
        return;
    }
    if (op->kind == OP_STEPDOWN && op->phase == 0) {
        cl_stream_peer p;
        if (!cl_member_serving(n->cluster)) {
            cl_leader_handover(n, 0, NULL);
            op_finish(op, 409, NULL, "this node stopped being the leader meanwhile");
            return;
        }
        if (!pick_heir(n, op->name, &p)) {
            cl_leader_handover(n, 0, NULL);
            op_finish(op, 409, NULL, "%s is no longer an in-sync follower", op->name);
            return;
        }
        if (p.acked >= op->target) {
            op->ticket = cl_member_handover(n->cluster, op->name);
            op->phase = 1;
            op->deadline = now + ETCD_WAIT_MS;
        } else if (now >= op->deadline) {
            cl_leader_handover(n, 0, NULL);
            op_finish(op, 409, NULL,
                      "%s did not catch up within %d s (it has group %llu of %llu): still the "
                      "leader",
                      op->name, STEPDOWN_WAIT_MS / 1000, (unsigned long long)p.acked,
                      (unsigned long long)op->target);
            return;
        }
    } else if (op->kind == OP_STEPDOWN) {
        int st = cl_member_handover_state(n->cluster, op->ticket, err, sizeof err);
        if (st > 0) {
            op_finish(op, 200,
                      json_pack("{s:s, s:s, s:I}", "from", n->cfg->node_name, "to", op->name,
                                "epoch", (json_int_t)op->epoch),
                      NULL);
            return;
        }
        if (st < 0 || now >= op->deadline) {
            cl_leader_handover(n, 0, NULL);
            op_finish(op, 409, NULL, "the hand-over could not be written to etcd: %s",
                      st < 0 ? err : "no answer");
            return;
        }
    } else if (op->kind == OP_FORGET && op->phase == 0) { /* forget: out of the ISR in etcd */
        if (cl_stream_server_forgotten(n->repl) >= op->ticket) {
            op->ticket = cl_member_forget(n->cluster, op->name);
            op->phase = 1;
            op->deadline = now + ETCD_WAIT_MS;
        } else if (now >= op->deadline) {
            cl_member_unban_local(n->cluster, op->name); /* not removed after all */
            op_finish(op, 503, NULL, "the ISR without %s could not be written to etcd in time",
                      op->name);
            return;
        }
    } else if (op->kind == OP_READMIT) {
        int st = cl_member_readmit_state(n->cluster, op->ticket, err, sizeof err);
        if (st > 0) {
            op_finish(op, 200, mgmt_cluster_view(op->m), NULL);
            return;
        }
        if (st == -2) {
            op_finish(op, 404, NULL, "%s", err);
            return;
        }
        if (st < 0 || now >= op->deadline) {
            op_finish(op, 503, NULL, "%s could not be readmitted: %s", op->name,
                      st < 0 ? err : "etcd did not answer in time");
            return;
        }
    } else { /* forget: its registration gone, the view read again */
        int st = cl_member_forget_state(n->cluster, op->ticket, err, sizeof err);
        if (st > 0) {
            op_finish(op, 200, mgmt_cluster_view(op->m), NULL);
            return;
        }
        if (st < 0 || now >= op->deadline) {
            op_finish(op, 503, NULL, "%s could not be removed from etcd: %s", op->name,
                      st < 0 ? err : "no answer");
            return;
        }
    }
    sl_timer_start(loop, t, now + OP_TICK_MS);
}

static enum MHD_Result op_start(req *r, int kind, const char *name, uint64_t target,
                                uint64_t ticket, uint64_t epoch, uint64_t wait_ms)
{
    mgmt *m = r->m;
    struct cl_op *op = sl_xcalloc(1, sizeof *op);
    op->m = m;
    op->r = r;
    op->kind = kind;
    snprintf(op->name, sizeof op->name, "%s", name);
    op->target = target;
    op->ticket = ticket;
    op->epoch = epoch;
    op->deadline = sl_now_ms() + wait_ms;
    m->cl_op = op;
    sl_timer_start(m->n->loop, &m->cl_t, sl_now_ms() + OP_TICK_MS);
    req_suspend(r, op_resumed);
    return MHD_YES;
}

/* A leader's figures to its member, which puts them in etcd (stats/NAME) for the day another
 * node leads and lists this one; the same object as this node's /api/nodes entry. Built here,
 * on the loop that owns the broker's figures, and handed over as text. */
static void fig_tick(sl_loop *loop, sl_timer *t)
{
    mgmt *m = t->data;
    if (m->n->cluster) {
        json_t *j = mgmt_node_figures(m);
        json_object_set_new(j, "measured_at", json_integer((json_int_t)sl_wall_ms()));
        char *s = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (s)
            cl_member_set_figures(m->n->cluster, s);
        free(s);
    }
    sl_timer_start(loop, t, sl_now_ms() + CL_FIGURES_PERIOD_MS);
}

void mgmt_cluster_init(mgmt *m)
{
    sl_timer_init(&m->cl_t, op_tick, m);
    sl_timer_init(&m->fig_t, fig_tick, m);
    if (m->n->cfg->cluster.enabled)
        sl_timer_start(m->n->loop, &m->fig_t, sl_now_ms() + 100);
}

void mgmt_cluster_stop(mgmt *m)
{
    struct cl_op *op = m->cl_op;
    if (sl_timer_armed(&m->fig_t))
        sl_timer_stop(m->n->loop, &m->fig_t);
    if (sl_timer_armed(&m->cl_t))
        sl_timer_stop(m->n->loop, &m->cl_t);
    if (!op)
        return;
    m->cl_op = NULL;
    req *r = op->r;
    sl_free(op);
    req_resume(r); /* an orphan by now: only let go */
}

static enum MHD_Result step_down(req *r)
{
    sl_node *n = r->m->n;
    if (!n->cluster)
        return reply_error(r, 400, "bad_request",
                           "not a cluster: this node has no cluster "
                           "settings");
    json_t *body = req_body(r, 1);
    if (!body)
        return MHD_YES;
    json_t *jn = json_object_get(body, "node");
    if (jn && !json_is_string(jn))
        return reply_error(r, 400, "bad_request", "\"node\" must be a node's name");
    const char *name = jn ? json_string_value(jn) : "";
    if (!cl_member_serving(n->cluster) || !n->repl || !n->mirror)
        return reply_error(r, 409, "conflict", "this node is not the cluster leader");
    if (r->m->cl_op)
        return reply_error(r, 409, "conflict", "another cluster action is in progress");
    if (!strcmp(name, n->cfg->node_name))
        return reply_error(r, 409, "conflict", "%s is this node, the leader", name);
    cl_stream_peer heir;
    if (!pick_heir(n, name, &heir)) {
        if (name[0])
            return reply_error(r, 409, "conflict",
                               "%s is not an in-sync follower: cannot hand over to it", name);
        return reply_error(r, 409, "conflict",
                           "no in-sync follower to hand over to: still the leader");
    }
    cl_status st;
    cl_member_status(n->cluster, &st);
    uint64_t target = cl_mirror_last(n->mirror);
    sl_info("cluster: step-down asked (by %s): handing over to %s once it has group %llu", r->user,
            heir.name, (unsigned long long)target);
    cl_leader_handover(n, 1, heir.name);
    return op_start(r, OP_STEPDOWN, heir.name, target, 0, st.epoch, STEPDOWN_WAIT_MS);
}

static enum MHD_Result forget_node(req *r, const char *name)
{
    sl_node *n = r->m->n;
    if (!n->cluster)
        return reply_error(r, 400, "bad_request",
                           "not a cluster: this node has no cluster "
                           "settings");
    if (!strcmp(name, n->cfg->node_name))
        return reply_error(r, 409, "conflict",
                           "%s is the leader: step down first (POST /api/cluster/step-down), "
                           "then remove it through the new leader",
                           name);
    if (!cl_member_serving(n->cluster) || !n->repl)
        return reply_error(r, 409, "conflict", "this node is not the cluster leader");
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
        return reply_error(r, 404, "not_found", "%s is not a member of this cluster", name);
    if (r->m->cl_op)
        return reply_error(r, 409, "conflict", "another cluster action is in progress");
    /* banned here first: once its stream is cut (below) its next HELLO must find the ban */
    cl_member_ban_local(n->cluster, name);
    uint64_t t = cl_stream_server_forget(n->repl, name);
    if (!t) {
        cl_member_unban_local(n->cluster, name);
        return reply_error(r, 409, "conflict", "%s cannot be forgotten now", name);
    }
    sl_info("cluster: removing member %s (asked by %s)", name, r->user);
    return op_start(r, OP_FORGET, name, 0, t, 0, ETCD_WAIT_MS);
}

static enum MHD_Result readmit_node(req *r, const char *name)
{
    sl_node *n = r->m->n;
    if (!n->cluster)
        return reply_error(r, 400, "bad_request",
                           "not a cluster: this node has no cluster "
                           "settings");
    if (!cl_member_serving(n->cluster) || !n->repl)
        return reply_error(r, 409, "conflict", "this node is not the cluster leader");
    if (r->m->cl_op)
        return reply_error(r, 409, "conflict", "another cluster action is in progress");
    sl_info("cluster: readmitting member %s (asked by %s)", name, r->user);
    return op_start(r, OP_READMIT, name, 0, cl_member_readmit(n->cluster, name), 0, ETCD_WAIT_MS);
}

enum MHD_Result api_cluster(req *r)
{
    r->no_store = 1; /* etcd, not the store: no reply here waits for the disk or the ISR */
    if (r->nsegs == 2 && !strcmp(r->segs[1], "step-down")) {
        if (!req_is(r, "POST"))
            return reply_method_not_allowed(r);
        return step_down(r);
    }
    if (r->nsegs == 4 && !strcmp(r->segs[1], "nodes") && !strcmp(r->segs[3], "readmit")) {
        if (!req_is(r, "POST"))
            return reply_method_not_allowed(r);
        return readmit_node(r, r->segs[2]);
    }
    if (r->nsegs == 3 && !strcmp(r->segs[1], "nodes")) {
        if (!req_is(r, "DELETE"))
            return reply_method_not_allowed(r);
        return forget_node(r, r->segs[2]);
    }
    if (r->nsegs != 1)
        return reply_not_found(r);
    if (!req_is(r, "GET"))
        return reply_method_not_allowed(r);
    if (!acc_is_monitor(r->m->n->acc, r->user))
        return reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "Not monitor user");
    return reply_json(r, 200, mgmt_cluster_view(r->m));
}
