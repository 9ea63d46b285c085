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
 *     node.h: the HTTP part's live). 409 when there is no in-sync follower (or HEIR is not one),
 * 400 on a single node. DELETE /api/cluster/nodes/NAME (administrator): forget a member (RabbitMQ's
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
 * The actions and their refusals are cluster/ops.h's; here they are HTTP: the request is
 * suspended until the action is done (one at a time). Their replies touch no store, so they
 * never wait for the disk or the ISR (req.no_store).
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
#include "cluster/ops.h"
#include "cluster/mirror.h"
#include "cluster/stream.h"
#include "cluster/view.h"
#include "mgmt/mgmt_internal.h"

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
    const node_config *cfg = n->cfg;
    char amqp[300], http[300];
    snprintf(amqp, sizeof amqp, "%s:%d", cfg->bind, node_amqp_port(n));
    snprintf(http, sizeof http, "%s:%d", cfg->bind, mgmt_port(m));
    if (!n->cluster) {
        json_t *nodes = json_array();
        json_array_append_new(nodes, member_json(cfg->node_name, "leader", 1, 0, 0, amqp, http));
        return json_pack("{s:s, s:s, s:I, s:o, s:[]}", "name", cfg->node_name, "leader",
                         cfg->node_name, "epoch", (json_int_t)0, "nodes", nodes, "removed");
    }
    static cl_view v; /* the loop's alone; too big for its stack's comfort */
    cl_view_read(n->cluster, n->repl, cfg->node_name, amqp, http, &v);
    json_t *nodes = json_array();
    for (size_t i = 0; i < v.n_nodes; i++) {
        const cl_view_member *vm = &v.nodes[i];
        json_array_append_new(nodes, member_json(vm->name, vm->role, vm->insync, vm->lag_bytes,
                                                 vm->lag_ms, vm->amqp, vm->http));
    }
    json_t *j = json_pack("{s:s, s:o, s:I, s:o}", "name", cfg->cluster.cluster_name, "leader",
                          v.leader[0] ? json_string(v.leader) : json_null(), "epoch",
                          (json_int_t)v.epoch, "nodes", nodes);
    json_t *removed = json_array();
    for (size_t i = 0; i < v.n_banned; i++)
        json_array_append_new(removed, json_string(v.banned[i]));
    json_object_set_new(j, "removed", removed);
    if (v.etcd_error[0])
        json_object_set_new(j, "etcd_error", json_string(v.etcd_error));
    return j;
}

/* ---- operator actions (cluster/ops.h): the request waits, suspended, for done ---- */

static unsigned http_status(cl_op_outcome o)
{
    return o == CL_OP_OK            ? 200
           : o == CL_OP_NOT_CLUSTER ? 400
           : o == CL_OP_CONFLICT    ? 409
           : o == CL_OP_UNKNOWN     ? 404
                                    : 503;
}

static enum MHD_Result op_refused(req *r, cl_op_outcome o, const char *why)
{
    unsigned status = http_status(o);
    return mgmt_reply_error(r, status,
                            status == 400   ? "bad_request"
                            : status == 409 ? "conflict"
                            : status == 404 ? "not_found"
                                            : "unavailable",
                            "%s", why);
}

/* The action's outcome goes into the request (status in async_tag, then reply or error), and
 * the request is resumed; a cancelled one (the node stops) is an orphan: only let go. */
static void op_done(void *ctx, cl_op_outcome o, const char *why, const cl_op_result *res)
{
    req *r = ctx;
    if (o != CL_OP_CANCELLED) {
        snprintf(r->async_tag, sizeof r->async_tag, "%u", http_status(o));
        json_t *reply = NULL;
        if (o == CL_OP_OK)
            reply = res ? json_pack("{s:s, s:s, s:I}", "from", res->from, "to", res->to, "epoch",
                                    (json_int_t)res->epoch)
                        : mgmt_cluster_view(r->m); /* forget, readmit: the view read again */
        if (reply) {
            r->async_reply = json_dumps(reply, JSON_COMPACT);
            json_decref(reply);
        } else {
            r->async_err = sl_xstrdup(why);
        }
    }
    mgmt_req_resume(r);
}

static enum MHD_Result op_resumed(req *r)
{
    unsigned status = (unsigned)strtoul(r->async_tag, NULL, 10);
    if (r->async_reply) {
        char *text = sl_xstrdup(r->async_reply);
        return mgmt_reply_text(r, status, "application/json", text, strlen(text));
    }
    return mgmt_reply_error(r, status,
                            status == 409   ? "conflict"
                            : status == 404 ? "not_found"
                                            : "unavailable",
                            "%s", r->async_err ? r->async_err : "failed");
}

/* An action started: the request waits for op_done. */
static enum MHD_Result op_started(req *r, cl_op_outcome o, const char *why)
{
    if (o != CL_OP_OK)
        return op_refused(r, o, why);
    mgmt_req_suspend(r, op_resumed);
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
    m->cl_ops = cl_ops_new(m->n);
    sl_timer_init(&m->fig_t, fig_tick, m);
    if (m->n->cfg->cluster.enabled)
        sl_timer_start(m->n->loop, &m->fig_t, sl_now_ms() + 100);
}

void mgmt_cluster_stop(mgmt *m)
{
    if (sl_timer_armed(&m->fig_t))
        sl_timer_stop(m->n->loop, &m->fig_t);
    cl_ops_free(m->cl_ops); /* an action in progress: its request is let go */
    m->cl_ops = NULL;
}

static enum MHD_Result step_down(req *r)
{
    if (!r->m->n->cluster)
        return op_refused(r, CL_OP_NOT_CLUSTER, "not a cluster: this node has no cluster settings");
    json_t *body = mgmt_req_body(r, 1);
    if (!body)
        return MHD_YES;
    json_t *jn = json_object_get(body, "node");
    if (jn && !json_is_string(jn))
        return mgmt_reply_error(r, 400, "bad_request", "\"node\" must be a node's name");
    char why[512];
    cl_op_outcome o = cl_ops_step_down(r->m->cl_ops, jn ? json_string_value(jn) : "", r->user,
                                       op_done, r, why, sizeof why);
    return op_started(r, o, why);
}

enum MHD_Result mgmt_api_cluster(req *r)
{
    r->no_store = 1; /* etcd, not the store: no reply here waits for the disk or the ISR */
    if (r->nsegs == 2 && !strcmp(r->segs[1], "step-down")) {
        if (!mgmt_req_is(r, "POST"))
            return mgmt_reply_method_not_allowed(r);
        return step_down(r);
    }
    if (r->nsegs == 4 && !strcmp(r->segs[1], "nodes") && !strcmp(r->segs[3], "readmit")) {
        if (!mgmt_req_is(r, "POST"))
            return mgmt_reply_method_not_allowed(r);
        char why[512];
        cl_op_outcome o =
            cl_ops_readmit(r->m->cl_ops, r->segs[2], r->user, op_done, r, why, sizeof why);
        return op_started(r, o, why);
    }
    if (r->nsegs == 3 && !strcmp(r->segs[1], "nodes")) {
        if (!mgmt_req_is(r, "DELETE"))
            return mgmt_reply_method_not_allowed(r);
        char why[512];
        cl_op_outcome o =
            cl_ops_forget(r->m->cl_ops, r->segs[2], r->user, op_done, r, why, sizeof why);
        return op_started(r, o, why);
    }
    if (r->nsegs != 1)
        return mgmt_reply_not_found(r);
    if (!mgmt_req_is(r, "GET"))
        return mgmt_reply_method_not_allowed(r);
    if (!acc_is_monitor(r->m->n->acc, r->user))
        return mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "Not monitor user");
    return mgmt_reply_json(r, 200, mgmt_cluster_view(r->m));
}
