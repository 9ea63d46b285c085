/* defs.c - /api/definitions[/{vhost}]: export (GET) and import (POST) of vhosts, exchanges,
 * queues and bindings in RabbitMQ's definitions format, so `rabbitmqadmin export/import`
 * and files written by RabbitMQ work.
 *
 * Export leaves out what cannot be re-created by an import: the default and amq.* exchanges,
 * system queues, exclusive queues, subqueues (made by moves), implicit default-exchange
 * bindings. Users come from the config file: exported by name and tags, ignored on import.
 * Import checks the whole document's shape first (a malformed entry changes nothing), then
 * declares in dependency order: vhosts, exchanges, queues, bindings. A conflicting declaration
 * (inequivalent arguments) stops it with 400 naming the object.
 */
#include <stdio.h>
#include <string.h>

#include "../core/mem.h"
#include "../core/version.h"
#include "mgmt_internal.h"

static int exportable_queue(const qm_queue *q)
{
    /* outgoing queues are made by sending (and by importing a binding to a format name) */
    return !q->is_system && !q->is_subqueue && !q->exclusive && !q->is_outgoing;
}

static void export_vhost(mgmt *m, qm_vhost *vh, json_t *queues, json_t *exchanges, json_t *bindings)
{
    size_t n;
    void **qs = map_sorted(vh->queues, &n);
    for (size_t i = 0; i < n; i++) {
        qm_queue *q = qs[i];
        if (!exportable_queue(q))
            continue;
        json_array_append_new(
            queues,
            json_pack("{s:s,s:s,s:b,s:b,s:o}", "name", q->name, "vhost", vh->name, "durable",
                      q->durable, "auto_delete", q->auto_delete, "arguments",
                      table_to_json((amqp_bytes){q->args.raw, q->args.raw ? q->args.raw_len : 0})));
    }
    sl_free(qs);
    void **xs = map_sorted(vh->exchanges, &n);
    for (size_t i = 0; i < n; i++) {
        qm_exchange *x = xs[i];
        if (x->name[0] && strncmp(x->name, "amq.", 4))
            json_array_append_new(
                exchanges,
                json_pack("{s:s,s:s,s:s,s:b,s:b,s:b,s:o}", "name", x->name, "vhost", vh->name,
                          "type", qm_exchange_type_name(x->type), "durable", x->durable,
                          "auto_delete", x->auto_delete, "internal", x->internal, "arguments",
                          table_to_json((amqp_bytes){x->args, x->args_len})));
        for (qm_binding *b = x->bindings; b; b = b->next) {
            if (b->dest_queue && !exportable_queue(b->dest_queue))
                continue;
            json_array_append_new(
                bindings,
                json_pack("{s:s,s:s,s:s,s:s,s:s,s:o}", "source", x->name, "vhost", vh->name,
                          "destination",
                          b->dest_queue ? b->dest_queue->name : b->dest_exchange->name,
                          "destination_type", b->dest_queue ? "queue" : "exchange", "routing_key",
                          b->key, "arguments", table_to_json((amqp_bytes){b->args, b->args_len})));
        }
    }
    sl_free(xs);
    (void)m;
}

static void add_perm(void *ctx, const acc_user *u, const acc_grant *g)
{
    json_array_append_new(ctx,
                          json_pack("{s:s,s:s,s:s,s:s,s:s}", "user", u->name, "vhost", g->vhost,
                                    "configure", g->src[0], "write", g->src[1], "read", g->src[2]));
}

static enum MHD_Result export_defs(req *r, qm_vhost *only)
{
    mgmt *m = r->m;
    json_t *vhosts = json_array(), *queues = json_array(), *exchanges = json_array(),
           *bindings = json_array(), *users = json_array(), *perms = json_array();
    size_t n;
    void **vhs = map_sorted(req_node(r)->vhosts, &n);
    for (size_t i = 0; i < n; i++) {
        qm_vhost *vh = vhs[i];
        if (only && vh != only)
            continue;
        json_array_append_new(vhosts, json_pack("{s:s}", "name", vh->name));
        export_vhost(m, vh, queues, exchanges, bindings);
        acc_perm_each(m->b->acc, NULL, vh->name, add_perm, perms);
    }
    sl_free(vhs);
    size_t nu;
    const acc_user **us = acc_users(m->b->acc, &nu);
    for (size_t u = 0; u < nu; u++) {
        char *hash = acc_hash_export(us[u]);
        json_array_append_new(users,
                              json_pack("{s:s,s:s,s:s,s:s}", "name", us[u]->name, "password_hash",
                                        hash, "hashing_algorithm",
                                        acc_hash_name((acc_hash)us[u]->algo), "tags", us[u]->tags));
        sl_free(hash);
    }
    sl_free(us);
    json_t *o =
        json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:[],s:[],s:[],s:o,s:o,s:o}", "product_name",
                  SLUICE_PRODUCT, "product_version", SLUICE_VERSION, "rabbit_version",
                  SLUICE_VERSION, "rabbitmq_version", SLUICE_VERSION, "users", users, "vhosts",
                  vhosts, "permissions", perms, "parameters", "global_parameters", "policies",
                  "queues", queues, "exchanges", exchanges, "bindings", bindings);
    return reply_json(r, 200, o);
}

/* ------------------------------------------------------------------------------------------
 * Import
 */

static const char *str_field(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The vhost an entry goes to: the URL's, else its own "vhost", else "/". */
static const char *entry_vhost(json_t *e, const char *forced)
{
    if (forced)
        return forced;
    const char *v = str_field(e, "vhost");
    return v ? v : "/";
}

static int check_shape(json_t *body, const char **what)
{
    static const char *const lists[] = {"vhosts", "exchanges", "queues", "bindings"};
    for (size_t i = 0; i < 4; i++) {
        json_t *a = json_object_get(body, lists[i]);
        if (!a)
            continue;
        *what = lists[i];
        if (!json_is_array(a))
            return -1;
        size_t k;
        json_t *e;
        json_array_foreach(a, k, e)
        {
            if (!json_is_object(e) || !str_field(e, "name"))
                if (i != 3 || !json_is_object(e))
                    return -1;
            if (i == 1 &&
                (!str_field(e, "type") ||
                 qm_exchange_type_parse(str_field(e, "type"), strlen(str_field(e, "type"))) < 0))
                return -1;
            if (i == 3 && (!str_field(e, "source") || !str_field(e, "destination")))
                return -1;
            json_t *args = json_object_get(e, "arguments");
            if (args && !json_is_object(args) && !json_is_null(args))
                return -1;
        }
    }
    return 0;
}

static enum MHD_Result import_defs(req *r, const char *forced_vhost)
{
    json_t *body = req_body(r, 0);
    if (!body)
        return MHD_YES;
    const char *what = "";
    if (check_shape(body, &what) < 0)
        return reply_error(r, 400, "bad_request", "malformed '%s' in the definitions", what);
    qm_node *node = req_node(r);
    size_t i;
    json_t *e;
    char err[400];
    if (!forced_vhost) {
        json_array_foreach(json_object_get(body, "vhosts"), i, e)
        {
            const char *name = str_field(e, "name");
            if (*name && !qm_vhost_find(node, name, strlen(name)) &&
                broker_vhost_add(r->m->b, name, NULL, NULL, NULL, err, sizeof err) != SL_OK)
                return reply_error(r, 400, "bad_request", "vhost '%s': %s", name, err);
        }
    }
    json_array_foreach(json_object_get(body, "exchanges"), i, e)
    {
        const char *name = str_field(e, "name"), *vname = entry_vhost(e, forced_vhost);
        qm_vhost *vh = qm_vhost_find(node, vname, strlen(vname));
        if (!vh)
            return reply_error(r, 400, "bad_request", "exchange '%s': no vhost '%s'", name, vname);
        if (!*name || !strncmp(name, "amq.", 4))
            continue; /* predeclared */
        sl_buf args;
        if (json_to_table(json_object_get(e, "arguments"), &args, err, sizeof err) < 0)
            return reply_error(r, 400, "bad_request", "exchange '%s': %s", name, err);
        const char *type = str_field(e, "type");
        qm_exchange_decl d = {
            .name = name,
            .name_len = strlen(name),
            .type = qm_exchange_type_parse(type, strlen(type)),
            .durable = (uint8_t)json_truthy(json_object_get(e, "durable"), 1),
            .auto_delete = (uint8_t)json_truthy(json_object_get(e, "auto_delete"), 0),
            .internal = (uint8_t)json_truthy(json_object_get(e, "internal"), 0),
            .arguments = {args.data, args.len},
        };
        qm_exchange *x;
        sl_err rc = qm_exchange_declare(vh, &d, &x, err, sizeof err);
        sl_buf_free(&args);
        if (rc != SL_OK)
            return reply_sl_err(r, rc, "%s", err);
    }
    json_array_foreach(json_object_get(body, "queues"), i, e)
    {
        const char *name = str_field(e, "name"), *vname = entry_vhost(e, forced_vhost);
        qm_vhost *vh = qm_vhost_find(node, vname, strlen(vname));
        if (!vh)
            return reply_error(r, 400, "bad_request", "queue '%s': no vhost '%s'", name, vname);
        if (!*name || !strncmp(name, "amq.", 4))
            return reply_error(r, 400, "bad_request", "queue name '%s' is reserved or empty", name);
        if (qm_queue_name_is_outgoing(name, strlen(name)))
            continue; /* a format name: its outgoing queue comes with the first send */
        sl_buf args;
        if (json_to_table(json_object_get(e, "arguments"), &args, err, sizeof err) < 0)
            return reply_error(r, 400, "bad_request", "queue '%s': %s", name, err);
        qm_queue_decl d = {
            .name = name,
            .name_len = strlen(name),
            .durable = (uint8_t)json_truthy(json_object_get(e, "durable"), 1),
            .auto_delete = (uint8_t)json_truthy(json_object_get(e, "auto_delete"), 0),
            .arguments = {args.data, args.len},
        };
        qm_queue *q;
        int created;
        sl_err rc = qm_queue_declare(vh, &d, &q, &created, err, sizeof err);
        sl_buf_free(&args);
        if (rc != SL_OK)
            return reply_sl_err(r, rc, "%s", err);
    }
    json_array_foreach(json_object_get(body, "bindings"), i, e)
    {
        const char *src = str_field(e, "source"), *dst = str_field(e, "destination");
        const char *dtype = str_field(e, "destination_type");
        const char *key = str_field(e, "routing_key");
        const char *vname = entry_vhost(e, forced_vhost);
        qm_vhost *vh = qm_vhost_find(node, vname, strlen(vname));
        if (!vh)
            return reply_error(r, 400, "bad_request", "binding: no vhost '%s'", vname);
        if (!*src)
            continue; /* implicit default-exchange binding */
        qm_exchange *x = qm_exchange_find(vh, src, strlen(src));
        int to_exchange = dtype && !strcmp(dtype, "exchange");
        qm_exchange *dx = to_exchange ? qm_exchange_find(vh, dst, strlen(dst)) : NULL;
        qm_queue *dq = to_exchange ? NULL : qm_queue_find_or_remote(vh, dst, strlen(dst), 1);
        if (!x || (!dx && !dq))
            return reply_sl_err(r, SL_ERR_NOT_FOUND, "binding '%s' -> '%s': no such %s", src, dst,
                                !x ? "source exchange" : "destination");
        sl_buf args;
        if (json_to_table(json_object_get(e, "arguments"), &args, err, sizeof err) < 0)
            return reply_error(r, 400, "bad_request", "binding '%s' -> '%s': %s", src, dst, err);
        amqp_bytes a = {args.data, args.len};
        sl_err rc = dq ? qm_bind_queue(x, dq, amqp_cstr(key ? key : ""), a, err, sizeof err)
                       : qm_bind_exchange(x, dx, amqp_cstr(key ? key : ""), a, err, sizeof err);
        sl_buf_free(&args);
        if (rc != SL_OK)
            return reply_sl_err(r, rc, "%s", err);
    }
    return reply_empty(r, 204);
}

enum MHD_Result api_definitions(req *r)
{
    if (!req_require_admin(r)) /* hashes and every vhost: administrators only, as RabbitMQ */
        return MHD_YES;
    qm_vhost *only = NULL;
    if (r->nsegs == 2 && !(only = req_vhost(r, r->segs[1])))
        return MHD_YES;
    if (r->nsegs > 2)
        return reply_not_found(r);
    if (req_is(r, "GET"))
        return export_defs(r, only);
    if (req_is(r, "POST"))
        return import_defs(r, only ? only->name : NULL);
    return reply_method_not_allowed(r);
}
