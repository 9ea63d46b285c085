/* defs.c - RabbitMQ's definitions format (defs.h), so `rabbitmqadmin export/import` and files
 * written by RabbitMQ work both ways: users (password hashes in RabbitMQ's formats, tags,
 * limits), vhosts, permissions, topic permissions, vhost limits (parameters, component
 * "vhost-limits"), exchanges, queues and bindings.
 *
 * Export leaves out what cannot be re-created by an import: the default and amq.* exchanges,
 * system queues, exclusive queues, subqueues (made by moves), implicit default-exchange
 * bindings, outgoing queues. Passwords are never exported, only their hashes.
 *
 * Import (defs_import, also the fuzz target's entry) checks the whole document first: its
 * shape, every user's name and hash, every pattern; a malformed entry changes nothing. Then
 * it applies in dependency order: vhosts, users, permissions, topic permissions, limits,
 * exchanges, queues, bindings. A conflicting declaration (inequivalent arguments) stops it
 * with the error naming the object. Policies, global parameters and other parameter
 * components are not Sluice's: they are skipped, and logged. An import into one vhost
 * (RabbitMQ's /api/definitions/{vhost}) takes only that vhost's objects, as RabbitMQ's does.
 */
#include <stdio.h>
#include <string.h>

#include "access/access.h"
#include "core/log.h"
#include "core/map.h"
#include "core/mem.h"
#include "core/version.h"
#include "defs/defs.h"
#include "defs/json.h"
#include "node/rules.h"
#include "qm/qm.h"

static void export_vhost(qm_vhost *vh, json_t *queues, json_t *exchanges, json_t *bindings)
{
    size_t n;
    void **qs = sl_map_sorted(vh->queues, &n);
    for (size_t i = 0; i < n; i++) {
        qm_queue *q = qs[i];
        if (!node_queue_definable(q))
            continue;
        json_array_append_new(
            queues, json_pack("{s:s,s:s,s:b,s:b,s:o}", "name", q->name, "vhost", vh->name,
                              "durable", q->durable, "auto_delete", q->auto_delete, "arguments",
                              defs_table_to_json(
                                  (amqp_bytes){q->args.raw, q->args.raw ? q->args.raw_len : 0})));
    }
    sl_free(qs);
    void **xs = sl_map_sorted(vh->exchanges, &n);
    for (size_t i = 0; i < n; i++) {
        qm_exchange *x = xs[i];
        if (!node_exchange_predeclared(x->name, strlen(x->name)))
            json_array_append_new(
                exchanges,
                json_pack("{s:s,s:s,s:s,s:b,s:b,s:b,s:o}", "name", x->name, "vhost", vh->name,
                          "type", qm_exchange_type_name(x->type), "durable", x->durable,
                          "auto_delete", x->auto_delete, "internal", x->internal, "arguments",
                          defs_table_to_json((amqp_bytes){x->args, x->args_len})));
        for (qm_binding *b = x->bindings; b; b = b->next) {
            if (b->dest_queue && !node_queue_definable(b->dest_queue))
                continue;
            json_array_append_new(
                bindings, json_pack("{s:s,s:s,s:s,s:s,s:s,s:o}", "source", x->name, "vhost",
                                    vh->name, "destination",
                                    b->dest_queue ? b->dest_queue->name : b->dest_exchange->name,
                                    "destination_type", b->dest_queue ? "queue" : "exchange",
                                    "routing_key", b->key, "arguments",
                                    defs_table_to_json((amqp_bytes){b->args, b->args_len})));
        }
    }
    sl_free(xs);
}

static void add_perm(void *ctx, const acc_user *u, const acc_grant *g)
{
    json_array_append_new(ctx,
                          json_pack("{s:s,s:s,s:s,s:s,s:s}", "user", u->name, "vhost", g->vhost,
                                    "configure", g->src[0], "write", g->src[1], "read", g->src[2]));
}

static void add_topic(void *ctx, const acc_user *u, const acc_topic_grant *t)
{
    json_array_append_new(ctx, json_pack("{s:s,s:s,s:s,s:s,s:s}", "user", u->name, "vhost",
                                         t->vhost, "exchange", t->exchange, "write", t->src_write,
                                         "read", t->src_read));
}

json_t *defs_export(sl_node *n, const char *vhost)
{
    qm_vhost *only = NULL;
    if (vhost && !(only = qm_vhost_find(n->qm, vhost, strlen(vhost))))
        return NULL;
    acc_db *a = n->acc;
    json_t *vhosts = json_array(), *queues = json_array(), *exchanges = json_array(),
           *bindings = json_array(), *users = json_array(), *perms = json_array(),
           *topics = json_array(), *params = json_array();
    size_t nv;
    void **vhs = sl_map_sorted(n->qm->vhosts, &nv);
    for (size_t i = 0; i < nv; i++) {
        qm_vhost *vh = vhs[i];
        if (only && vh != only)
            continue;
        const acc_vhost *av = acc_vhost_find(a, vh->name, strlen(vh->name));
        json_t *v = json_pack("{s:s}", "name", vh->name);
        if (av && av->description[0])
            json_object_set_new(v, "description", json_string(av->description));
        if (av && av->tags[0])
            json_object_set_new(v, "tags", defs_tags_json(av->tags));
        json_array_append_new(vhosts, v);
        export_vhost(vh, queues, exchanges, bindings);
        acc_perm_each(a, NULL, vh->name, add_perm, perms);
        acc_topic_perm_each(a, NULL, vh->name, add_topic, topics);
        if (av && (av->max_connections >= 0 || av->max_queues >= 0)) {
            json_t *lim = json_object();
            if (av->max_connections >= 0)
                json_object_set_new(lim, "max-connections", json_integer(av->max_connections));
            if (av->max_queues >= 0)
                json_object_set_new(lim, "max-queues", json_integer(av->max_queues));
            json_array_append_new(params,
                                  json_pack("{s:o,s:s,s:s,s:s}", "value", lim, "vhost", vh->name,
                                            "component", "vhost-limits", "name", "limits"));
        }
    }
    sl_free(vhs);
    if (!only) {
        size_t nu;
        const acc_user **us = acc_users(a, &nu);
        for (size_t u = 0; u < nu; u++)
            json_array_append_new(users, defs_user_json(us[u]));
        sl_free(us);
    }
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:[],s:[],s:o,s:o,s:o}", "product_name",
        SLUICE_PRODUCT, "product_version", SLUICE_VERSION, "rabbit_version", SLUICE_VERSION,
        "rabbitmq_version", SLUICE_VERSION, "users", users, "vhosts", vhosts, "permissions", perms,
        "topic_permissions", topics, "parameters", params, "global_parameters", "policies",
        "queues", queues, "exchanges", exchanges, "bindings", bindings);
    if (only) { /* RabbitMQ's per-vhost export: the vhost's objects, no users */
        json_object_del(o, "users");
        json_object_del(o, "vhosts");
        json_object_del(o, "permissions");
        json_object_del(o, "topic_permissions");
    }
    return o;
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

#define FAIL(e, ...)                                                                               \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        return (e);                                                                                \
    } while (0)

/* Tags as RabbitMQ writes them: a list (3.9+) or a comma-separated string (older). Returns a
 * new comma-separated string, "" when absent; NULL when malformed. */
static char *tags_of(json_t *t)
{
    if (!t || json_is_null(t))
        return sl_xstrdup("");
    if (json_is_string(t))
        return sl_xstrdup(json_string_value(t));
    if (!json_is_array(t))
        return NULL;
    sl_buf b;
    sl_buf_init(&b);
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e)
    {
        if (!json_is_string(e)) {
            sl_buf_free(&b);
            return NULL;
        }
        sl_buf_append(&b, json_string_value(e), json_string_length(e));
        sl_buf_put_u8(&b, ',');
    }
    sl_buf_put_u8(&b, 0);
    return (char *)b.data;
}

/* A user entry as an acc_user_def (tags allocated into *tags). -1 when malformed. */
static int user_def(acc_db *a, json_t *e, acc_user_def *d, char **tags)
{
    memset(d, 0, sizeof *d);
    *tags = NULL;
    d->name = str_field(e, "name");
    const char *hash = str_field(e, "password_hash"), *pw = str_field(e, "password");
    json_t *jh = json_object_get(e, "password_hash"), *jp = json_object_get(e, "password");
    if (!d->name || (jh && !hash) || (jp && !pw))
        return -1;
    int algo = acc_hash_parse(a, str_field(e, "hashing_algorithm"));
    if (algo < 0 || (json_object_get(e, "hashing_algorithm") && !str_field(e, "hashing_algorithm")))
        return -1;
    if (pw) {
        d->password = pw;
        d->password_len = json_string_length(jp);
    } else {
        d->password_hash = hash ? hash : "";
        d->algo = (acc_hash)algo;
    }
    if (!(*tags = tags_of(json_object_get(e, "tags"))))
        return -1;
    d->tags = *tags;
    return 0;
}

static int is_list_of_objects(json_t *a)
{
    if (!a)
        return 1;
    if (!json_is_array(a))
        return 0;
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e) if (!json_is_object(e)) return 0;
    return 1;
}

static int limit_ok(json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= -1;
}

/* Everything checked before anything changes. */
static sl_err check_all(sl_node *n, json_t *body, const char *forced, char *err, size_t errlen)
{
    static const char *const lists[] = {
        "users",    "vhosts", "permissions", "topic_permissions", "parameters", "global_parameters",
        "policies", "queues", "exchanges",   "bindings"};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        if (!is_list_of_objects(json_object_get(body, lists[i])))
            FAIL(SL_ERR_SYNTAX, "'%s' must be a list of objects", lists[i]);
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(body, "users"), i, e)
    {
        acc_user_def d;
        char *tags;
        int bad = user_def(n->acc, e, &d, &tags);
        sl_err rc = SL_OK;
        char why[300] = "malformed";
        if (!bad)
            rc = acc_user_def_check(n->acc, &d, why, sizeof why);
        sl_free(tags);
        json_t *lim = json_object_get(e, "limits");
        if (lim && !json_is_object(lim) && !json_is_null(lim))
            bad = 1;
        const char *k;
        json_t *v;
        if (json_is_object(lim))
            json_object_foreach(lim, k, v) if (!limit_ok(v) || (strcmp(k, "max-connections") &&
                                                                strcmp(k, "max-channels"))) bad = 1;
        if (bad || rc != SL_OK)
            FAIL(SL_ERR_SYNTAX, "user %zu ('%s'): %s", i,
                 str_field(e, "name") ? str_field(e, "name") : "?",
                 bad ? "malformed (name, password_hash, hashing_algorithm, tags, limits)" : why);
    }
    json_array_foreach(json_object_get(body, "vhosts"), i, e)
    {
        const char *name = str_field(e, "name");
        if (!name || !*name || strlen(name) > 255)
            FAIL(SL_ERR_SYNTAX, "vhost %zu: a name of 1..255 bytes is required", i);
    }
    json_array_foreach(json_object_get(body, "permissions"), i, e)
    {
        const char *src[3] = {str_field(e, "configure"), str_field(e, "write"),
                              str_field(e, "read")};
        if (!str_field(e, "user") || !str_field(e, "vhost") || !src[0] || !src[1] || !src[2])
            FAIL(SL_ERR_SYNTAX, "permission %zu: user, vhost, configure, write, read are required",
                 i);
        char why[400];
        if (acc_patterns_check(src, 3, why, sizeof why) != SL_OK)
            FAIL(SL_ERR_SYNTAX, "permission %zu: %s", i, why);
    }
    json_array_foreach(json_object_get(body, "topic_permissions"), i, e)
    {
        const char *src[2] = {str_field(e, "write"), str_field(e, "read")};
        if (!str_field(e, "user") || !str_field(e, "vhost") || !str_field(e, "exchange") ||
            !src[0] || !src[1])
            FAIL(SL_ERR_SYNTAX,
                 "topic permission %zu: user, vhost, exchange, write, read are required", i);
        char why[400];
        if (acc_patterns_check(src, 2, why, sizeof why) != SL_OK)
            FAIL(SL_ERR_SYNTAX, "topic permission %zu: %s", i, why);
    }
    json_array_foreach(json_object_get(body, "parameters"), i, e)
    {
        const char *comp = str_field(e, "component");
        if (!comp)
            FAIL(SL_ERR_SYNTAX, "parameter %zu: a component is required", i);
        json_t *val = json_object_get(e, "value");
        if (!strcmp(comp, "vhost-limits")) {
            if (!json_is_object(val) || (!forced && !str_field(e, "vhost")))
                FAIL(SL_ERR_SYNTAX, "parameter %zu (vhost-limits): value and vhost required", i);
            const char *k;
            json_t *v;
            json_object_foreach(val, k, v) if (!limit_ok(v) || (strcmp(k, "max-connections") &&
                                                                strcmp(k, "max-queues")))
                FAIL(SL_ERR_SYNTAX,
                     "parameter %zu: vhost limit '%s' is not known or not an integer", i, k);
        }
    }
    static const char *const named[] = {"exchanges", "queues"};
    for (size_t l = 0; l < 2; l++) {
        json_array_foreach(json_object_get(body, named[l]), i, e)
        {
            json_t *args = json_object_get(e, "arguments");
            if (!str_field(e, "name") || (args && !json_is_object(args) && !json_is_null(args)))
                FAIL(SL_ERR_SYNTAX, "malformed '%s' entry %zu", named[l], i);
            if (l == 0 &&
                (!str_field(e, "type") ||
                 qm_exchange_type_parse(str_field(e, "type"), strlen(str_field(e, "type"))) < 0))
                FAIL(SL_ERR_SYNTAX, "exchange '%s': a type direct, fanout, topic or headers",
                     str_field(e, "name"));
        }
    }
    json_array_foreach(json_object_get(body, "bindings"), i, e)
    {
        json_t *args = json_object_get(e, "arguments");
        if (!str_field(e, "source") || !str_field(e, "destination") ||
            (args && !json_is_object(args) && !json_is_null(args)))
            FAIL(SL_ERR_SYNTAX, "malformed 'bindings' entry %zu", i);
    }
    return SL_OK;
}

static void set_limits(sl_node *n, json_t *lim, const char *name, int user)
{
    const char *k;
    json_t *v;
    char err[300];
    json_object_foreach(lim, k, v)
    {
        int64_t lim_v = json_integer_value(v);
        if (user)
            acc_user_set_limit(n->acc, name, k, lim_v, err, sizeof err);
        else
            acc_vhost_set_limit(n->acc, name, k, lim_v, err, sizeof err);
    }
}

sl_err defs_import(sl_node *n, json_t *body, const char *forced, char *err, size_t errlen)
{
    err[0] = 0;
    if (!json_is_object(body))
        FAIL(SL_ERR_SYNTAX, "the definitions must be a JSON object");
    sl_err rc = check_all(n, body, forced, err, errlen);
    if (rc != SL_OK)
        return rc;
    qm_node *node = n->qm;
    acc_db *a = n->acc;
    size_t i;
    json_t *e;
    char why[600];
    if (!forced) {
        json_array_foreach(json_object_get(body, "vhosts"), i, e)
        {
            const char *name = str_field(e, "name");
            const char *desc = str_field(e, "description");
            char *tags = json_object_get(e, "tags") ? tags_of(json_object_get(e, "tags")) : NULL;
            rc = node_vhost_add(n, name, desc, tags, NULL, why, sizeof why);
            sl_free(tags);
            if (rc != SL_OK)
                FAIL(rc, "vhost '%s': %s", name, why);
        }
        json_array_foreach(json_object_get(body, "users"), i, e)
        {
            acc_user_def d;
            char *tags;
            user_def(a, e, &d, &tags);
            const acc_user *old = acc_user_find(a, d.name, strlen(d.name));
            if (old)
                d.from_config = old->from_config;
            rc = acc_user_put(a, &d, NULL, why, sizeof why);
            sl_free(tags);
            if (rc != SL_OK)
                FAIL(rc, "user '%s': %s", d.name, why);
            json_t *lim = json_object_get(e, "limits");
            if (json_is_object(lim))
                set_limits(n, lim, d.name, 1);
        }
        json_array_foreach(json_object_get(body, "permissions"), i, e)
        {
            const char *u = str_field(e, "user"), *v = str_field(e, "vhost");
            rc = acc_perm_set(a, u, v, str_field(e, "configure"), str_field(e, "write"),
                              str_field(e, "read"), why, sizeof why);
            if (rc != SL_OK)
                FAIL(rc, "permission of '%s' on '%s': %s", u, v, why);
        }
        json_array_foreach(json_object_get(body, "topic_permissions"), i, e)
        {
            const char *u = str_field(e, "user"), *v = str_field(e, "vhost");
            rc = acc_topic_perm_set(a, u, v, str_field(e, "exchange"), str_field(e, "write"),
                                    str_field(e, "read"), why, sizeof why);
            if (rc != SL_OK)
                FAIL(rc, "topic permission of '%s' on '%s': %s", u, v, why);
        }
    }
    size_t skipped = 0;
    json_array_foreach(json_object_get(body, "parameters"), i, e)
    {
        const char *comp = str_field(e, "component"), *vname = entry_vhost(e, forced);
        if (strcmp(comp, "vhost-limits")) {
            skipped++;
            continue;
        }
        if (!acc_vhost_find(a, vname, strlen(vname)))
            FAIL(SL_ERR_NOT_FOUND, "vhost limits: no vhost '%s'", vname);
        set_limits(n, json_object_get(e, "value"), vname, 0);
    }
    skipped += json_array_size(json_object_get(body, "policies"));
    if (skipped)
        sl_warn("definitions: %zu policies and parameters skipped (Sluice has none of those)",
                skipped);
    json_array_foreach(json_object_get(body, "exchanges"), i, e)
    {
        const char *name = str_field(e, "name"), *vname = entry_vhost(e, forced);
        qm_vhost *vh = qm_vhost_find(node, vname, strlen(vname));
        if (!vh)
            FAIL(SL_ERR_NOT_FOUND, "exchange '%s': no vhost '%s'", name, vname);
        if (node_exchange_predeclared(name, strlen(name)))
            continue;
        sl_buf args;
        if (defs_json_to_table(json_object_get(e, "arguments"), &args, why, sizeof why) < 0)
            FAIL(SL_ERR_SYNTAX, "exchange '%s': %s", name, why);
        const char *type = str_field(e, "type");
        qm_exchange_decl d = {
            .name = name,
            .name_len = strlen(name),
            .type = qm_exchange_type_parse(type, strlen(type)),
            .durable = (uint8_t)defs_json_truthy(json_object_get(e, "durable"), 1),
            .auto_delete = (uint8_t)defs_json_truthy(json_object_get(e, "auto_delete"), 0),
            .internal = (uint8_t)defs_json_truthy(json_object_get(e, "internal"), 0),
            .arguments = {args.data, args.len},
        };
        qm_exchange *x;
        rc = qm_exchange_declare(vh, &d, &x, why, sizeof why);
        sl_buf_free(&args);
        if (rc != SL_OK)
            FAIL(rc, "%s", why);
    }
    json_array_foreach(json_object_get(body, "queues"), i, e)
    {
        const char *name = str_field(e, "name"), *vname = entry_vhost(e, forced);
        qm_vhost *vh = qm_vhost_find(node, vname, strlen(vname));
        if (!vh)
            FAIL(SL_ERR_NOT_FOUND, "queue '%s': no vhost '%s'", name, vname);
        if (!*name || node_name_reserved(name, strlen(name)))
            FAIL(SL_ERR_SYNTAX, "queue name '%s' is reserved or empty", name);
        if (qm_queue_name_is_outgoing(name, strlen(name)))
            continue; /* a format name: its outgoing queue comes with the first send */
        sl_buf args;
        json_t *jargs = json_object_get(e, "arguments"), *typed = NULL;
        const char *qtype = str_field(e, "type");
        if (qtype && !strcmp(qtype, "quorum") && !json_object_get(jargs, "x-queue-type")) {
            /* RabbitMQ 3.11 and later export the type beside the arguments */
            typed = json_is_object(jargs) ? json_deep_copy(jargs) : json_object();
            json_object_set_new(typed, "x-queue-type", json_string("quorum"));
            jargs = typed;
        }
        int bad = defs_json_to_table(jargs, &args, why, sizeof why) < 0;
        json_decref(typed);
        if (bad)
            FAIL(SL_ERR_SYNTAX, "queue '%s': %s", name, why);
        qm_queue_decl d = {
            .name = name,
            .name_len = strlen(name),
            .durable = (uint8_t)defs_json_truthy(json_object_get(e, "durable"), 1),
            .auto_delete = (uint8_t)defs_json_truthy(json_object_get(e, "auto_delete"), 0),
            .arguments = {args.data, args.len},
        };
        qm_queue *q;
        int created;
        rc = qm_queue_declare(vh, &d, &q, &created, why, sizeof why);
        sl_buf_free(&args);
        if (rc != SL_OK)
            FAIL(rc, "%s", why);
    }
    json_array_foreach(json_object_get(body, "bindings"), i, e)
    {
        const char *src = str_field(e, "source"), *dst = str_field(e, "destination");
        const char *dtype = str_field(e, "destination_type");
        const char *key = str_field(e, "routing_key");
        const char *vname = entry_vhost(e, forced);
        qm_vhost *vh = qm_vhost_find(node, vname, strlen(vname));
        if (!vh)
            FAIL(SL_ERR_NOT_FOUND, "binding: no vhost '%s'", vname);
        if (!*src)
            continue; /* implicit default-exchange binding */
        qm_exchange *x = qm_exchange_find(vh, src, strlen(src));
        int to_exchange = dtype && !strcmp(dtype, "exchange");
        qm_exchange *dx = to_exchange ? qm_exchange_find(vh, dst, strlen(dst)) : NULL;
        qm_queue *dq = to_exchange ? NULL : qm_queue_find_or_remote(vh, dst, strlen(dst), 1);
        if (!x || (!dx && !dq))
            FAIL(SL_ERR_NOT_FOUND, "binding '%s' -> '%s': no such %s", src, dst,
                 !x ? "source exchange" : "destination");
        sl_buf args;
        if (defs_json_to_table(json_object_get(e, "arguments"), &args, why, sizeof why) < 0)
            FAIL(SL_ERR_SYNTAX, "binding '%s' -> '%s': %s", src, dst, why);
        amqp_bytes ab = {args.data, args.len};
        rc = dq ? qm_bind_queue(x, dq, amqp_cstr(key ? key : ""), ab, why, sizeof why)
                : qm_bind_exchange(x, dx, amqp_cstr(key ? key : ""), ab, why, sizeof why);
        sl_buf_free(&args);
        if (rc != SL_OK)
            FAIL(rc, "%s", why);
    }
    return SL_OK;
}
