/* api_queues.c - /api/queues: list, declare (PUT), delete (?if-empty, ?if-unused), purge
 * (DELETE .../contents), get (POST .../get, RabbitMQ ackmodes), peek (GET .../messages),
 * subqueues (GET .../subqueues), bindings (GET .../bindings), move (POST .../move).
 *
 * Subqueues and journals are reached by their full name "q;sub" / "q;journal" (%3B in a URL):
 * they can be read, peeked, purged and moved from, never declared or deleted on their own
 * (they live and die with their queue). Lists show top-level queues; each lists its subqueues.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "mgmt/mgmt_internal.h"
#include "mq/move.h"
#include "node/get.h"
#include "node/rules.h"

/* ------------------------------------------------------------------------------------------
 * Views
 */

static json_t *enum_json(int value, const char *name)
{
    return json_pack("{s:i,s:s}", "value", value, "name", name);
}

static uint64_t journal_count(qm_queue *q, uint64_t *bytes)
{
    qm_queue *j = q->is_subqueue ? NULL : qm_queue_subqueue(q, "journal", 7, 0);
    if (bytes)
        *bytes = j ? j->bytes_total : 0;
    return j ? qm_queue_message_count(j) : 0;
}

/* consumer_details: as /api/consumers shows them; a walk of the vhost's clients, bounded */
static void add_consumer(void *ctx, const node_client *c, const node_channel *ch,
                         const node_consumer *o)
{
    void **a = ctx; /* {mgmt, array} */
    json_array_append_new(a[1], mgmt_consumer_json(a[0], c, ch, o));
}

json_t *mgmt_queue_json(mgmt *m, qm_queue *q, int full)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(q->name));
    json_object_set_new(o, "vhost", json_string(q->vhost->name));
    json_object_set_new(o, "durable", json_boolean(q->durable));
    json_object_set_new(o, "auto_delete", json_boolean(q->auto_delete));
    json_object_set_new(o, "exclusive", json_boolean(q->exclusive));
    json_object_set_new(
        o, "arguments",
        defs_table_to_json((amqp_bytes){q->args.raw, q->args.raw ? q->args.raw_len : 0}));
    json_object_set_new(o, "node", json_string(m->n->cfg->node_name));
    const qm_queue *top = q->parent ? q->parent : q;
    json_object_set_new(o, "type", json_string(qm_queue_type_name(top)));
    if (top->args.quorum || top->args.stream) {
        /* RabbitMQ's quorum queue fields; one node holds every replica Sluice has (in a
         * cluster every durable queue is replicated, quorum or classic) */
        json_object_set_new(o, "leader", json_string(m->n->cfg->node_name));
        json_object_set_new(o, "members", json_pack("[s]", m->n->cfg->node_name));
        json_object_set_new(o, "online", json_pack("[s]", m->n->cfg->node_name));
    }
    json_object_set_new(o, "state", json_string("running"));
    json_object_set_new(o, "messages", json_integer((json_int_t)qm_queue_message_count(q)));
    json_object_set_new(o, "messages_ready", json_integer((json_int_t)q->n_ready));
    json_object_set_new(o, "messages_unacknowledged",
                        json_integer((json_int_t)(q->n_locked + q->n_purge_pending)));
    json_object_set_new(o, "messages_purge_pending", json_integer((json_int_t)q->n_purge_pending));
    json_object_set_new(o, "message_bytes", json_integer((json_int_t)q->bytes_total));
    json_object_set_new(o, "message_bytes_ready", json_integer((json_int_t)q->bytes_ready));
    json_object_set_new(o, "consumers", json_integer((json_int_t)q->n_consumers));
    qm_figure fig[QM_FIGURES_MAX]; /* its type's own (delivery_limit; a stream's log) */
    for (size_t i = 0, n = qm_queue_type_figures(top, fig); i < n; i++)
        json_object_set_new(o, fig[i].name, json_integer((json_int_t)fig[i].value));
    json_object_set_new(o, "kind",
                        json_string(q->is_system     ? "system"
                                    : q->is_subqueue ? "subqueue"
                                                     : "queue"));
    json_object_set_new(
        o, "message_stats",
        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "publish", (json_int_t)q->stat_published,
                  "deliver_get", (json_int_t)q->stat_delivered, "ack", (json_int_t)q->stat_acked,
                  "redeliver", (json_int_t)q->stat_redelivered, "purged",
                  (json_int_t)q->stat_purged, "expired", (json_int_t)q->stat_expired,
                  "dead_lettered", (json_int_t)q->stat_dead_lettered));
    if (q->exclusive && q->exclusive_owner)
        json_object_set_new(
            o, "owner_pid_details",
            json_pack("{s:s}", "name", node_client_owner_name(m->n, q->exclusive_owner)));
    json_t *subs = json_array();
    size_t n = 0;
    void **v = sl_map_sorted(q->subqueues, &n);
    for (size_t i = 0; i < n; i++) {
        const char *semi = strchr(((qm_queue *)v[i])->name, ';');
        json_array_append_new(subs, json_string(semi ? semi + 1 : ((qm_queue *)v[i])->name));
    }
    sl_free(v);
    json_object_set_new(o, "subqueues", subs);
    if (full) {
        /* MC-MQAC: what an MSMQManagement object bound to this queue reports */
        uint64_t jbytes;
        uint64_t jcount = journal_count(q, &jbytes);
        char buf[800];
        mq_fmtname_of(m->mq, q, buf, sizeof buf);
        json_object_set_new(o, "FormatName", json_string(buf));
        mq_pathname_of(m->mq, q, buf, sizeof buf);
        json_object_set_new(o, "PathName", json_string(buf));
        json_object_set_new(o, "ForeignStatus", enum_json(1, "MQ_STATUS_NOT_FOREIGN"));
        json_object_set_new(o, "QueueType",
                            q->is_system ? enum_json(2, "MQ_TYPE_MACHINE")
                                         : enum_json(1, "MQ_TYPE_PRIVATE"));
        json_object_set_new(o, "IsLocal", json_true());
        json_object_set_new(o, "TransactionalStatus", enum_json(1, "MQ_XACT_STATUS_NOT_XACT"));
        json_object_set_new(o, "State", enum_json(0, "MQ_QUEUE_STATE_LOCAL_CONNECTION"));
        json_object_set_new(o, "MessageCount", json_integer((json_int_t)qm_queue_message_count(q)));
        json_object_set_new(o, "BytesInQueue", json_integer((json_int_t)q->bytes_total));
        json_object_set_new(o, "JournalMessageCount", json_integer((json_int_t)jcount));
        json_object_set_new(o, "BytesInJournal", json_integer((json_int_t)jbytes));
        void *a[2] = {m, json_array()};
        node_queue_consumers(m->n, q, 20000, add_consumer, a);
        json_object_set_new(o, "consumer_details", a[1]);
        if (q->is_outgoing)
            mgmt_outgoing_view(m, q, o);
    }
    if (q->is_outgoing)
        json_object_set_new(o, "outgoing", json_true());
    return o;
}

static enum MHD_Result list(req *r)
{
    if (r->nsegs == 2) {
        qm_vhost *vh = mgmt_req_vhost(r, r->segs[1]);
        if (!vh || !mgmt_req_vhost_access(r, vh->name))
            return MHD_YES;
    }
    return mgmt_pager_list(r, PAGER_QUEUES, r->nsegs == 2 ? r->segs[1] : NULL);
}

/* ------------------------------------------------------------------------------------------
 * Declare, delete, purge
 */

static enum MHD_Result declare(req *r, qm_vhost *vh, const char *name)
{
    json_t *body = mgmt_req_body(r, 1);
    if (!body)
        return MHD_YES;
    if (!*name)
        return mgmt_reply_error(r, 400, "bad_request", "a queue name is required");
    if (strlen(name) > 255)
        return mgmt_reply_error(r, 400, "bad_request", "queue name longer than 255 bytes");
    if (defs_json_truthy(json_object_get(body, "durable"), 1) && !mgmt_req_disk_ok(r, 0))
        return MHD_YES;
    char err[600];
    sl_err e = node_queue_new_name(name, strlen(name), !!qm_queue_find(vh, name, strlen(name)), err,
                                   sizeof err);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", err);
    if (qm_queue_name_is_outgoing(name, strlen(name)))
        return mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED,
                                 "'%s' is a format name: sending to it makes its outgoing queue",
                                 name);
    /* The AMQP door's rules (h_queue.c): configure; a new queue counts against max-queues
     * and with a dead-letter exchange also needs read on itself and write on that. */
    if (!mgmt_req_allowed(r, vh->name, ACC_QUEUE, name, ACC_CONFIGURE))
        return MHD_YES;
    if (!qm_queue_find(vh, name, strlen(name))) {
        if ((e = node_queue_limit(r->m->n->acc, vh, name, err, sizeof err)) != SL_OK)
            return mgmt_reply_sl_err(r, e, "%s", err);
        json_t *dlx = json_object_get(json_object_get(body, "arguments"), "x-dead-letter-exchange");
        if (json_is_string(dlx) &&
            (!mgmt_req_allowed(r, vh->name, ACC_QUEUE, name, ACC_READ) ||
             !mgmt_req_allowed(r, vh->name, ACC_EXCHANGE, json_string_value(dlx), ACC_WRITE)))
            return MHD_YES;
    }
    sl_buf args;
    if (defs_json_to_table(json_object_get(body, "arguments"), &args, err, sizeof err) < 0)
        return mgmt_reply_error(r, 400, "bad_request", "%s", err);
    qm_queue_decl d = {
        .name = name,
        .name_len = strlen(name),
        .durable = (uint8_t)defs_json_truthy(json_object_get(body, "durable"), 1),
        .auto_delete = (uint8_t)defs_json_truthy(json_object_get(body, "auto_delete"), 0),
        .exclusive = 0, /* an HTTP client owns no connection an exclusive queue could die with */
        .arguments = {args.data, args.len},
    };
    qm_queue *q = NULL;
    int created = 0;
    e = qm_queue_declare(vh, &d, &q, &created, err, sizeof err);
    sl_buf_free(&args);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", err);
    return mgmt_reply_empty(r, created ? 201 : 204);
}

/* An exclusive queue belongs to the connection that declared it: no HTTP request is that
 * connection, so, as over AMQP (405 RESOURCE_LOCKED), nothing here deletes, purges, consumes
 * or moves its messages (RabbitMQ's management API does these over an AMQP channel of its
 * own and is refused the same way). Reading views (list, peek) stay open to operators. */
static int refuse_exclusive(req *r, const qm_queue *q)
{
    char why[600];
    sl_err e = node_queue_locked(q, NULL, why, sizeof why);
    if (e == SL_OK)
        return 0;
    mgmt_reply_sl_err(r, e, "%s", why);
    return 1;
}

static enum MHD_Result delete_queue(req *r, qm_queue *q)
{
    if (refuse_exclusive(r, q))
        return MHD_YES;
    if (q->is_subqueue)
        return mgmt_reply_sl_err(r, SL_ERR_INVALID_PARAMETER,
                                 "subqueue '%s' is deleted with its queue; purge it instead",
                                 q->name);
    int flags = (mgmt_req_query_bool(r, "if-empty") ? QM_DELETE_IF_EMPTY : 0) |
                (mgmt_req_query_bool(r, "if-unused") ? QM_DELETE_IF_UNUSED : 0);
    char err[300];
    uint64_t count = 0;
    sl_err e = qm_queue_delete(q, flags, &count, err, sizeof err);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", err);
    return mgmt_reply_empty(r, 204);
}

static enum MHD_Result purge(req *r, qm_queue *q)
{
    if (refuse_exclusive(r, q))
        return MHD_YES;
    /* purge_pending: what this purge made PurgePending, not the queue's running total */
    uint64_t pending_before = q->n_purge_pending;
    uint64_t n = qm_queue_purge(q);
    return mgmt_reply_json(r, 200,
                           json_pack("{s:I,s:I}", "message_count", (json_int_t)n, "purge_pending",
                                     (json_int_t)(q->n_purge_pending - pending_before)));
}

/* ------------------------------------------------------------------------------------------
 * Get (consuming, with an ackmode) and peek (not consuming)
 */

/* RabbitMQ's ackmode (node_get_mode's order). */
static int parse_ackmode(json_t *body, node_get_mode *out)
{
    json_t *a = json_object_get(body, "ackmode");
    if (!a) {
        /* RabbitMQ before 3.7 took "requeue" */
        *out = defs_json_truthy(json_object_get(body, "requeue"), 1) ? NODE_GET_ACK_REQUEUE
                                                                     : NODE_GET_ACK;
        return 0;
    }
    static const char *names[] = {"ack_requeue_true", "ack_requeue_false", "reject_requeue_true",
                                  "reject_requeue_false"};
    if (json_is_string(a))
        for (int i = 0; i < 4; i++)
            if (!strcmp(json_string_value(a), names[i])) {
                *out = (node_get_mode)i;
                return 0;
            }
    return -1;
}

/* Each message taken, as /get shows it. */
struct got {
    json_t *arr;
    const char *encoding;
    int64_t truncate;
};

static void got_one(void *ctx, const qm_position *pos, uint64_t remaining)
{
    struct got *g = ctx;
    json_array_append_new(g->arr, mgmt_msg_view(pos, NULL, g->encoding, g->truncate, remaining));
}

static enum MHD_Result get(req *r, qm_queue *q)
{
    if (refuse_exclusive(r, q))
        return MHD_YES;
    json_t *body = mgmt_req_body(r, 1);
    if (!body)
        return MHD_YES;
    node_get_mode mode;
    if (parse_ackmode(body, &mode) < 0)
        return mgmt_reply_error(r, 400, "bad_request",
                                "ackmode must be ack_requeue_true, ack_requeue_false, "
                                "reject_requeue_true or reject_requeue_false");
    json_t *c = json_object_get(body, "count");
    int64_t count = c ? defs_json_uint(c) : 1;
    if (count < 0 || count > 100000)
        return mgmt_reply_error(r, 400, "bad_request", "count must be an integer 0..100000");
    json_t *t = json_object_get(body, "truncate");
    int64_t truncate = t && !json_is_null(t) ? defs_json_uint(t) : -1;
    json_t *enc = json_object_get(body, "encoding");
    const char *encoding = json_is_string(enc) ? json_string_value(enc) : "auto";
    if (strcmp(encoding, "auto") && strcmp(encoding, "base64"))
        return mgmt_reply_error(r, 400, "bad_request", "encoding must be auto or base64");

    /* taken first, then settled (node/get.c) */
    struct got g = {json_array(), encoding, truncate};
    node_queue_get(q, (size_t)count, mode, got_one, &g);
    return mgmt_reply_json(r, 200, g.arr);
}

static enum MHD_Result peek(req *r, qm_queue *q)
{
    const char *cs = mgmt_req_query(r, "count"), *os = mgmt_req_query(r, "offset");
    const char *enc = mgmt_req_query(r, "encoding"), *ts = mgmt_req_query(r, "truncate");
    long long count = cs ? strtoll(cs, NULL, 10) : 100, off = os ? strtoll(os, NULL, 10) : 0;
    long long truncate = ts ? strtoll(ts, NULL, 10) : -1;
    if (count < 0 || count > 100000 || off < 0)
        return mgmt_reply_error(r, 400, "bad_request", "count must be 0..100000 and offset >= 0");
    return mgmt_pager_peek(r, q, off, count, enc, truncate);
}

static enum MHD_Result subqueues(req *r, qm_queue *q)
{
    json_t *arr = json_array();
    size_t n;
    void **v = sl_map_sorted(q->subqueues, &n);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, mgmt_queue_json(r->m, v[i], 0));
    sl_free(v);
    return mgmt_reply_json(r, 200, arr);
}

/* ------------------------------------------------------------------------------------------
 * Routing within /api/queues
 */

enum MHD_Result mgmt_queue_bindings(req *r, qm_queue *q); /* api_exchanges.c */

enum MHD_Result mgmt_api_queues(req *r)
{
    if (r->nsegs <= 2) {
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        return list(r);
    }
    qm_vhost *vh = mgmt_req_vhost(r, r->segs[1]);
    if (!vh || !mgmt_req_vhost_access(r, vh->name))
        return MHD_YES;
    const char *name = r->segs[2];
    qm_queue *q = qm_queue_find(vh, name, strlen(name));
    if (r->nsegs == 3) {
        if (mgmt_req_is(r, "PUT"))
            return declare(r, vh, name);
        if (!q)
            return mgmt_reply_sl_err(r, SL_ERR_QUEUE_NOT_FOUND, "no queue '%s' in vhost '%s'", name,
                                     vh->name);
        if (mgmt_req_is(r, "GET"))
            return mgmt_reply_json(r, 200, mgmt_queue_json(r->m, q, 1));
        if (mgmt_req_is(r, "DELETE"))
            return mgmt_req_allowed(r, vh->name, ACC_QUEUE, name, ACC_CONFIGURE)
                       ? delete_queue(r, q)
                       : MHD_YES;
        return mgmt_reply_method_not_allowed(r);
    }
    if (r->nsegs != 4)
        return mgmt_reply_not_found(r);
    if (!q)
        return mgmt_reply_sl_err(r, SL_ERR_QUEUE_NOT_FOUND, "no queue '%s' in vhost '%s'", name,
                                 vh->name);
    const char *what = r->segs[3];
    /* purge, get and peek read the queue (RabbitMQ: read for purge and get) */
    if ((!strcmp(what, "contents") || !strcmp(what, "get") || !strcmp(what, "messages")) &&
        !mgmt_req_allowed(r, vh->name, ACC_QUEUE, name, ACC_READ))
        return MHD_YES;
    if (!strcmp(what, "contents"))
        return mgmt_req_is(r, "DELETE") ? purge(r, q) : mgmt_reply_method_not_allowed(r);
    if (!strcmp(what, "get"))
        return mgmt_req_is(r, "POST") ? get(r, q) : mgmt_reply_method_not_allowed(r);
    if (!strcmp(what, "messages"))
        return mgmt_req_is(r, "GET") ? peek(r, q) : mgmt_reply_method_not_allowed(r);
    if (!strcmp(what, "subqueues"))
        return mgmt_req_is(r, "GET") ? subqueues(r, q) : mgmt_reply_method_not_allowed(r);
    if (!strcmp(what, "bindings"))
        return mgmt_req_is(r, "GET") ? mgmt_queue_bindings(r, q) : mgmt_reply_method_not_allowed(r);
    if (!strcmp(what, "move"))
        return mgmt_req_is(r, "POST") ? mgmt_api_queue_move(r, q)
                                      : mgmt_reply_method_not_allowed(r);
    return mgmt_reply_not_found(r);
}
