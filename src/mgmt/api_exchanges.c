/* api_exchanges.c - /api/exchanges (list, declare, delete ?if-unused, publish) and
 * /api/bindings (list, create, delete), in RabbitMQ's shapes.
 *
 * The default exchange is "" in the model and "amq.default" in URLs. Its bindings are implicit
 * (one per top-level queue, routing key = queue name): listed, never created or deleted.
 * A binding is named in URLs by its properties_key: "~" for an empty key without arguments,
 * the routing key without arguments, "<key>~<hash of the arguments>" otherwise.
 * Publishing over HTTP routes and enqueues through the model exactly as basic.publish does
 * (no transaction, no confirm); subqueues are never routing targets (qm_route skips them).
 */
#include <stdio.h>
#include <string.h>

#include "amqp/method.h"
#include "core/mem.h"
#include "mgmt/mgmt_internal.h"

static const char *path_exchange(const char *seg)
{
    return strcmp(seg, "amq.default") ? seg : "";
}

json_t *mgmt_exchange_json(qm_exchange *x)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(x->name));
    json_object_set_new(o, "vhost", json_string(x->vhost->name));
    json_object_set_new(o, "type", json_string(qm_exchange_type_name(x->type)));
    json_object_set_new(o, "durable", json_boolean(x->durable));
    json_object_set_new(o, "auto_delete", json_boolean(x->auto_delete));
    json_object_set_new(o, "internal", json_boolean(x->internal));
    json_object_set_new(o, "arguments", defs_table_to_json((amqp_bytes){x->args, x->args_len}));
    return o;
}

/* ------------------------------------------------------------------------------------------
 * Bindings as JSON
 */

static json_t *binding_json(const char *vhost, const char *src, const char *dest, int to_queue,
                            const char *key, const uint8_t *args, size_t args_len)
{
    char pk[300];
    node_binding_props_key(key, args, args_len, pk, sizeof pk);
    json_t *o = json_object();
    json_object_set_new(o, "source", json_string(src));
    json_object_set_new(o, "vhost", json_string(vhost));
    json_object_set_new(o, "destination", json_string(dest));
    json_object_set_new(o, "destination_type", json_string(to_queue ? "queue" : "exchange"));
    json_object_set_new(o, "routing_key", json_string(key));
    json_object_set_new(o, "arguments", defs_table_to_json((amqp_bytes){args, args_len}));
    json_object_set_new(o, "properties_key", json_string(pk));
    return o;
}

json_t *mgmt_binding_json(qm_binding *b)
{
    return binding_json(b->source->vhost->name, b->source->name,
                        b->dest_queue ? b->dest_queue->name : b->dest_exchange->name,
                        b->dest_queue != NULL, b->key, b->args, b->args_len);
}

json_t *mgmt_default_binding_json(qm_queue *q)
{
    return binding_json(q->vhost->name, "", q->name, 1, q->name, NULL, 0);
}

/* GET .../bindings lists (pager.c): every binding of the node, the vhost, a source exchange,
 * a destination, or a pair of them. Implicit default-exchange bindings are included. */
enum MHD_Result mgmt_queue_bindings(req *r, qm_queue *q)
{
    pager_scope s = {
        .vhost = q->vhost->name, .dest = q->name, .dest_is_queue = 1, .empty = q->is_subqueue};
    return mgmt_pager_list_scoped(r, PAGER_BINDINGS, &s);
}

/* ------------------------------------------------------------------------------------------
 * Exchanges
 */

static enum MHD_Result list_exchanges(req *r)
{
    if (r->nsegs == 2 && (!mgmt_req_vhost(r, r->segs[1]) || !mgmt_req_vhost_access(r, r->segs[1])))
        return MHD_YES;
    return mgmt_pager_list(r, PAGER_EXCHANGES, r->nsegs == 2 ? r->segs[1] : NULL);
}

static enum MHD_Result declare_exchange(req *r, qm_vhost *vh, const char *name)
{
    json_t *body = mgmt_req_body(r, 1);
    if (!body)
        return MHD_YES;
    char err[300];
    sl_err e = node_exchange_not_default(name, strlen(name), err, sizeof err);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", err);
    if (strlen(name) > 255)
        return mgmt_reply_error(r, 400, "bad_request", "exchange name longer than 255 bytes");
    if (defs_json_truthy(json_object_get(body, "durable"), 1) && !mgmt_req_disk_ok(r, 0))
        return MHD_YES;
    json_t *t = json_object_get(body, "type");
    if (!json_is_string(t))
        return mgmt_reply_error(r, 400, "bad_request",
                                "type is required (direct, fanout, topic, headers)");
    int type = qm_exchange_type_parse(json_string_value(t), json_string_length(t));
    if (type < 0)
        return mgmt_reply_sl_err(r, SL_ERR_COMMAND_INVALID, "invalid exchange type '%s'",
                                 json_string_value(t));
    if (!mgmt_req_allowed(r, vh->name, ACC_EXCHANGE, name, ACC_CONFIGURE))
        return MHD_YES;
    qm_exchange *old = qm_exchange_find(vh, name, strlen(name));
    if ((e = node_exchange_new_name(name, strlen(name), old != NULL, err, sizeof err)) != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", err);
    json_t *ae = json_object_get(json_object_get(body, "arguments"), "alternate-exchange");
    if (!old && json_is_string(ae) &&
        (!mgmt_req_allowed(r, vh->name, ACC_EXCHANGE, name, ACC_READ) ||
         !mgmt_req_allowed(r, vh->name, ACC_EXCHANGE, json_string_value(ae), ACC_WRITE)))
        return MHD_YES;
    sl_buf args;
    if (defs_json_to_table(json_object_get(body, "arguments"), &args, err, sizeof err) < 0)
        return mgmt_reply_error(r, 400, "bad_request", "%s", err);
    qm_exchange_decl d = {
        .name = name,
        .name_len = strlen(name),
        .type = type,
        .durable = (uint8_t)defs_json_truthy(json_object_get(body, "durable"), 1),
        .auto_delete = (uint8_t)defs_json_truthy(json_object_get(body, "auto_delete"), 0),
        .internal = (uint8_t)defs_json_truthy(json_object_get(body, "internal"), 0),
        .arguments = {args.data, args.len},
    };
    qm_exchange *x;
    e = qm_exchange_declare(vh, &d, &x, err, sizeof err);
    sl_buf_free(&args);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", err);
    return mgmt_reply_empty(r, old ? 204 : 201);
}

static enum MHD_Result delete_exchange(req *r, qm_exchange *x)
{
    char err[300];
    sl_err e =
        node_exchange_delete_check(x->name, strlen(x->name), x->vhost->name, err, sizeof err);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", err);
    if (!mgmt_req_allowed(r, x->vhost->name, ACC_EXCHANGE, x->name, ACC_CONFIGURE))
        return MHD_YES;
    e = qm_exchange_delete(x, mgmt_req_query_bool(r, "if-unused"), err, sizeof err);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", err);
    return mgmt_reply_empty(r, 204);
}

static enum MHD_Result publish(req *r, qm_exchange *x)
{
    json_t *body = mgmt_req_body(r, 0);
    if (!body)
        return MHD_YES;
    if (!mgmt_req_allowed(r, x->vhost->name, ACC_EXCHANGE, x->name, ACC_WRITE))
        return MHD_YES;
    if (x->internal)
        return mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED,
                                 "cannot publish to internal exchange '%s'", x->name);
    if (!mgmt_req_disk_ok(r, 1)) /* publishers are blocked by either alarm, over AMQP too */
        return MHD_YES;
    json_t *rk = json_object_get(body, "routing_key");
    char why[800];
    if (x->type == QM_EX_TOPIC && json_is_string(rk) &&
        acc_check_topic(r->m->n->acc, r->user, x->vhost->name, x->name, json_string_value(rk),
                        json_string_length(rk), ACC_WRITE, why, sizeof why) != SL_OK)
        return mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "%s", why);
    sl_buf bcc;
    sl_buf_init(&bcc);
    qm_message *msg = mgmt_msg_from_publish(r, body, x->name, &bcc);
    if (!msg) {
        sl_buf_free(&bcc);
        return MHD_YES;
    }
    amqp_basic_props props;
    amqp_bytes headers = {0};
    if (amqp_props_decode(qm_msg_props(msg), msg->props_len, &props) == 0 &&
        (props.flags & AMQP_P_HEADERS))
        headers = props.headers;
    size_t n = 0;
    /* reject-publish refusals count as routed, as in RabbitMQ */
    qm_publish_bcc(x, msg, headers, (amqp_bytes){sl_buf_head(&bcc), sl_buf_unread(&bcc)}, NULL, &n);
    sl_buf_free(&bcc);
    qm_message_unref(msg);
    return mgmt_reply_json(r, 200, json_pack("{s:b}", "routed", n > 0));
}

enum MHD_Result mgmt_api_exchanges(req *r)
{
    if (r->nsegs <= 2)
        return mgmt_req_is(r, "GET") ? list_exchanges(r) : mgmt_reply_method_not_allowed(r);
    qm_vhost *vh = mgmt_req_vhost(r, r->segs[1]);
    if (!vh || !mgmt_req_vhost_access(r, vh->name))
        return MHD_YES;
    const char *name = path_exchange(r->segs[2]);
    qm_exchange *x = qm_exchange_find(vh, name, strlen(name));
    if (r->nsegs == 3) {
        if (mgmt_req_is(r, "PUT"))
            return declare_exchange(r, vh, name);
        if (!x)
            return mgmt_reply_sl_err(r, SL_ERR_NOT_FOUND, "no exchange '%s' in vhost '%s'", name,
                                     vh->name);
        if (mgmt_req_is(r, "GET"))
            return mgmt_reply_json(r, 200, mgmt_exchange_json(x));
        if (mgmt_req_is(r, "DELETE"))
            return delete_exchange(r, x);
        return mgmt_reply_method_not_allowed(r);
    }
    if (!x)
        return mgmt_reply_sl_err(r, SL_ERR_NOT_FOUND, "no exchange '%s' in vhost '%s'", name,
                                 vh->name);
    if (r->nsegs == 4 && !strcmp(r->segs[3], "publish"))
        return mgmt_req_is(r, "POST") ? publish(r, x) : mgmt_reply_method_not_allowed(r);
    if (r->nsegs == 5 && !strcmp(r->segs[3], "bindings") &&
        (!strcmp(r->segs[4], "source") || !strcmp(r->segs[4], "destination"))) {
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        pager_scope s = {.vhost = vh->name};
        if (r->segs[4][0] == 's')
            s.source = x->name;
        else
            s.dest = x->name;
        return mgmt_pager_list_scoped(r, PAGER_BINDINGS, &s);
    }
    return mgmt_reply_not_found(r);
}

/* ------------------------------------------------------------------------------------------
 * /api/bindings[/{vhost}[/e/{src}/{q|e}/{dest}[/{props}]]]
 */

/* The AMQP door's rules for bind and unbind (node_bind_check): 1, or 0 after replying 403. */
static int binding_allowed(req *r, qm_exchange *src, qm_queue *dq, qm_exchange *dx, const char *key)
{
    char why[800];
    const char *dest = dq ? dq->name : dx->name;
    if (acc_check_vhost(r->m->n->acc, r->user, src->vhost->name, why, sizeof why) == SL_OK &&
        node_bind_check(r->m->n->acc, r->user, src->vhost->name, dq ? ACC_QUEUE : ACC_EXCHANGE,
                        dest, strlen(dest), src->name, strlen(src->name), src, key, strlen(key),
                        why, sizeof why) == SL_OK)
        return 1;
    mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "%s", why);
    return 0;
}

static enum MHD_Result create_binding(req *r, qm_exchange *src, qm_queue *dq, qm_exchange *dx)
{
    json_t *body = mgmt_req_body(r, 1);
    if (!body)
        return MHD_YES;
    if (!mgmt_req_disk_ok(r, 0))
        return MHD_YES;
    char err[300];
    sl_err e = node_exchange_not_default(src->name, strlen(src->name), err, sizeof err);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", err);
    json_t *k = json_object_get(body, "routing_key");
    if (k && !json_is_string(k))
        return mgmt_reply_error(r, 400, "bad_request", "routing_key must be a string");
    const char *key = k ? json_string_value(k) : "";
    if (strlen(key) > 255)
        return mgmt_reply_error(r, 400, "bad_request", "routing_key longer than 255 bytes");
    if (!binding_allowed(r, src, dq, dx, key))
        return MHD_YES;
    sl_buf args;
    if (defs_json_to_table(json_object_get(body, "arguments"), &args, err, sizeof err) < 0)
        return mgmt_reply_error(r, 400, "bad_request", "%s", err);
    amqp_bytes a = {args.data, args.len};
    e = dq ? qm_bind_queue(src, dq, amqp_cstr(key), a, err, sizeof err)
           : qm_bind_exchange(src, dx, amqp_cstr(key), a, err, sizeof err);
    char pk[300];
    node_binding_props_key(key, args.data, args.len, pk, sizeof pk);
    sl_buf_free(&args);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "%s", err);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Location", pk);
    return mgmt_req_respond(r, 201, resp);
}

enum MHD_Result mgmt_api_bindings(req *r)
{
    if (r->nsegs <= 2) {
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        if (r->nsegs == 2 &&
            (!mgmt_req_vhost(r, r->segs[1]) || !mgmt_req_vhost_access(r, r->segs[1])))
            return MHD_YES;
        pager_scope s = {.vhost = r->nsegs == 2 ? r->segs[1] : NULL};
        return mgmt_pager_list_scoped(r, PAGER_BINDINGS, &s);
    }
    qm_vhost *vh = mgmt_req_vhost(r, r->segs[1]);
    if (!vh || !mgmt_req_vhost_access(r, vh->name))
        return MHD_YES;
    if (r->nsegs < 6 || r->nsegs > 7 || strcmp(r->segs[2], "e") ||
        (strcmp(r->segs[4], "q") && strcmp(r->segs[4], "e")))
        return mgmt_reply_not_found(r);
    const char *sname = path_exchange(r->segs[3]);
    qm_exchange *src = qm_exchange_find(vh, sname, strlen(sname));
    if (!src)
        return mgmt_reply_sl_err(r, SL_ERR_NOT_FOUND, "no exchange '%s' in vhost '%s'", sname,
                                 vh->name);
    qm_queue *dq = NULL;
    qm_exchange *dx = NULL;
    const char *dname = r->segs[5];
    if (r->segs[4][0] == 'q') {
        dq = qm_queue_find_or_remote(vh, dname, strlen(dname), mgmt_req_is(r, "POST"));
        if (!dq)
            return mgmt_reply_sl_err(r, SL_ERR_QUEUE_NOT_FOUND, "no queue '%s' in vhost '%s'",
                                     dname, vh->name);
        if (dq->is_subqueue)
            return mgmt_reply_sl_err(
                r, SL_ERR_ACCESS_REFUSED,
                "subqueue '%s' cannot be a binding target: subqueues are filled "
                "only by moves",
                dname);
    } else {
        dname = path_exchange(dname);
        dx = qm_exchange_find(vh, dname, strlen(dname));
        if (!dx)
            return mgmt_reply_sl_err(r, SL_ERR_NOT_FOUND, "no exchange '%s' in vhost '%s'", dname,
                                     vh->name);
    }
    if (r->nsegs == 6) {
        if (mgmt_req_is(r, "POST"))
            return create_binding(r, src, dq, dx);
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        pager_scope s = {.vhost = vh->name,
                         .source = src->name,
                         .dest = dq ? dq->name : dx->name,
                         .dest_is_queue = dq != NULL};
        return mgmt_pager_list_scoped(r, PAGER_BINDINGS, &s);
    }
    const char *pk = r->segs[6];
    if (!src->name[0] && dq) {
        /* the implicit binding of the default exchange */
        if (strcmp(pk, dq->name))
            return mgmt_reply_not_found(r);
        if (mgmt_req_is(r, "GET"))
            return mgmt_reply_json(r, 200, mgmt_default_binding_json(dq));
        char err[300];
        sl_err e = node_exchange_not_default(src->name, 0, err, sizeof err);
        return mgmt_reply_sl_err(r, e, "%s", err);
    }
    qm_binding *b = node_binding_find(src, dq, dx, pk);
    if (!b)
        return mgmt_reply_sl_err(r, SL_ERR_NOT_FOUND, "no binding '%s' from '%s' to '%s'", pk,
                                 src->name, dname);
    if (mgmt_req_is(r, "GET"))
        return mgmt_reply_json(r, 200, mgmt_binding_json(b));
    if (!mgmt_req_is(r, "DELETE"))
        return mgmt_reply_method_not_allowed(r);
    if (!binding_allowed(r, src, dq, dx, b->key))
        return MHD_YES;
    /* copy key and args: unbinding frees the binding (and may auto-delete src) */
    char *key = sl_xstrdup(b->key);
    uint8_t *args = b->args_len ? sl_xmalloc(b->args_len) : NULL;
    size_t alen = b->args_len;
    if (alen)
        memcpy(args, b->args, alen);
    if (dq)
        qm_unbind_queue(src, dq, amqp_cstr(key), (amqp_bytes){args, alen});
    else
        qm_unbind_exchange(src, dx, amqp_cstr(key), (amqp_bytes){args, alen});
    sl_free(key);
    sl_free(args);
    return mgmt_reply_empty(r, 204);
}
