/* api_access.c - users, permissions, topic permissions and limits over RabbitMQ's HTTP API:
 *
 *   /api/users[/{name}]                 GET, PUT, DELETE   (+ /permissions, /topic-permissions)
 *   /api/users/without-permissions      GET
 *   /api/users/bulk-delete              POST {"users": [...]}
 *   /api/whoami                         GET
 *   /api/permissions[/{vhost}/{user}]   GET, PUT {"configure","write","read"}, DELETE
 *   /api/topic-permissions[/{vhost}/{user}]  GET, PUT {"exchange","write","read"}, DELETE
 *   /api/vhost-limits[/{vhost}[/{name}]]     GET, PUT {"value"}, DELETE
 *   /api/user-limits[/{user}[/{name}]]       GET, PUT {"value"}, DELETE
 *
 * Every write and every read of users and permissions needs the administrator tag (RabbitMQ's
 * is_authorized_admin); whoami any management user; vhost limits can be read by a user with
 * access to the vhost. The access module does the work and keeps it durable; this file is
 * JSON in and out, with RabbitMQ's field names, codes (201 created, 204 changed) and quirks
 * (a PUT of an existing user with neither password nor password_hash clears its password).
 * Passwords are never shown, stored or logged; hashes are shown to administrators.
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "mgmt/mgmt_internal.h"

static acc_db *acc_of(req *r)
{
    return r->m->n->acc;
}

static int require_admin(req *r)
{
    if (r->is_admin)
        return 1;
    mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "Not administrator user");
    return 0;
}

/* "tags" as a string ("a,b") or an array of strings; NULL when absent; "" for null. The
 * caller frees the result. -1 (after replying 400) when malformed. */
static int tags_arg(req *r, json_t *v, char **out)
{
    *out = NULL;
    if (!v)
        return 0;
    if (json_is_null(v)) {
        *out = sl_xstrdup("");
        return 0;
    }
    if (json_is_string(v)) {
        *out = sl_xstrdup(json_string_value(v));
        return 0;
    }
    if (!json_is_array(v)) {
        mgmt_reply_error(r, 400, "bad_request", "tags must be a string or a list of strings");
        return -1;
    }
    sl_buf b;
    sl_buf_init(&b);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e)) {
            sl_buf_free(&b);
            mgmt_reply_error(r, 400, "bad_request", "tags must be a string or a list of strings");
            return -1;
        }
        sl_buf_append(&b, json_string_value(e), strlen(json_string_value(e)));
        sl_buf_put_u8(&b, ',');
    }
    sl_buf_put_u8(&b, 0);
    *out = (char *)b.data;
    return 0;
}

/* One user as GET /api/users/NAME shows it: defs_user_json (what definitions export too) plus
 * the node a link user speaks for ("link_node", 32 hex; absent while unbound), which an
 * operator checks before trusting the binding (README "Link users"). */
static json_t *user_view(const acc_user *u)
{
    json_t *o = defs_user_json(u);
    if (u->link_bound) {
        char hex[33];
        sl_hex(hex, u->link_node, 16);
        json_object_set_new(o, "link_node", json_string(hex));
    }
    return o;
}

static json_t *perm_json(const acc_user *u, const acc_grant *g)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:s}", "user", u->name, "vhost", g->vhost, "configure",
                     g->src[0], "write", g->src[1], "read", g->src[2]);
}

static void add_perm(void *ctx, const acc_user *u, const acc_grant *g)
{
    json_array_append_new(ctx, perm_json(u, g));
}

static json_t *topic_json(const acc_user *u, const acc_topic_grant *t)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:s}", "user", u->name, "vhost", t->vhost, "exchange",
                     t->exchange, "write", t->src_write, "read", t->src_read);
}

static void add_topic(void *ctx, const acc_user *u, const acc_topic_grant *t)
{
    json_array_append_new(ctx, topic_json(u, t));
}

/* ------------------------------------------------------------------------------------------
 * Users
 */

static sl_err delete_user_and_close(req *r, const char *name, char *err, size_t errlen)
{
    sl_err e = acc_user_delete(acc_of(r), name, err, errlen);
    if (e != SL_OK)
        return e;
    /* RabbitMQ closes the connections of a deleted user. */
    size_t n = node_close_user_connections(r->m->n, name, "is deleted");
    sl_info("http: user '%s' deleted by '%s' (%zu connection(s) closed)", name, r->user, n);
    return SL_OK;
}

static enum MHD_Result put_user(req *r, const char *name)
{
    acc_db *a = acc_of(r);
    json_t *body = mgmt_req_body(r, 1);
    if (!body)
        return MHD_YES;
    json_t *jpw = json_object_get(body, "password");
    json_t *jhash = json_object_get(body, "password_hash");
    if (jpw && jhash)
        return mgmt_reply_error(r, 400, "bad_request",
                                "both password and password_hash are provided; give one");
    if ((jpw && !json_is_string(jpw)) || (jhash && !json_is_string(jhash)))
        return mgmt_reply_error(r, 400, "bad_request", "password and password_hash are strings");
    json_t *jalgo = json_object_get(body, "hashing_algorithm");
    int algo = acc_hash_parse(a, json_is_string(jalgo) ? json_string_value(jalgo) : NULL);
    if (algo < 0)
        return mgmt_reply_error(r, 400, "bad_request", "unknown hashing_algorithm '%s'",
                                json_string_value(jalgo));
    char *tags = NULL;
    if (tags_arg(r, json_object_get(body, "tags"), &tags) < 0)
        return MHD_YES;
    const acc_user *old = acc_user_find(a, name, strlen(name));
    acc_user_def d = {.name = name, .tags = tags, .algo = (acc_hash)algo};
    if (jpw) {
        d.password = json_string_value(jpw);
        d.password_len = json_string_length(jpw);
    } else if (jhash) {
        d.password_hash = json_string_value(jhash);
    } else {
        /* RabbitMQ: an existing user updated without either loses its password; a new one
         * has none (it can log in only with a certificate). */
        d.password_hash = "";
    }
    if (!tags && !old)
        d.tags = "";
    if (old)
        d.from_config = old->from_config;
    char err[400];
    int created = 0;
    sl_err e = acc_user_put(a, &d, &created, err, sizeof err);
    sl_free(tags);
    if (e != SL_OK)
        return mgmt_reply_error(r, 400, "bad_request", "%s", err);
    json_t *lim = json_object_get(body, "limits");
    if (json_is_object(lim)) {
        const char *k;
        json_t *v;
        json_object_foreach(lim, k, v)
        {
            int64_t n = json_is_integer(v) ? json_integer_value(v) : -2;
            if (n < -1 || acc_user_set_limit(a, name, k, n, err, sizeof err) != SL_OK)
                return mgmt_reply_error(r, 400, "bad_request", "limit '%s': %s", k,
                                        n < -1 ? "must be an integer" : err);
        }
    }
    if (!created && (jpw || jhash) && r->m->n->cfg->password_change_closes_connections)
        node_close_user_connections(r->m->n, name, "changed its password");
    if (!created && d.from_config)
        sl_warn("user '%s' is defined in the config file: its password and tags come back "
                "from there at the next start",
                name);
    sl_info("http: user '%s' %s by '%s'", name, created ? "created" : "updated", r->user);
    return mgmt_reply_empty(r, created ? 201 : 204);
}

static enum MHD_Result delete_user(req *r, const char *name)
{
    char err[400];
    if (delete_user_and_close(r, name, err, sizeof err) != SL_OK)
        return mgmt_reply_not_found(r);
    return mgmt_reply_empty(r, 204);
}

enum MHD_Result mgmt_api_users(req *r)
{
    acc_db *a = acc_of(r);
    if (!require_admin(r))
        return MHD_YES;
    if (r->nsegs == 1) {
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        json_t *arr = json_array();
        size_t n;
        const acc_user **us = acc_users(a, &n);
        for (size_t i = 0; i < n; i++)
            json_array_append_new(arr, defs_user_json(us[i]));
        sl_free(us);
        return mgmt_reply_json(r, 200, arr);
    }
    const char *name = r->segs[1];
    if (r->nsegs == 2 && !strcmp(name, "without-permissions") && mgmt_req_is(r, "GET")) {
        json_t *arr = json_array();
        size_t n;
        const acc_user **us = acc_users(a, &n);
        for (size_t i = 0; i < n; i++)
            if (!sl_map_count(us[i]->grants))
                json_array_append_new(arr, defs_user_json(us[i]));
        sl_free(us);
        return mgmt_reply_json(r, 200, arr);
    }
    if (r->nsegs == 2 && !strcmp(name, "bulk-delete") && mgmt_req_is(r, "POST")) {
        json_t *body = mgmt_req_body(r, 0);
        if (!body)
            return MHD_YES;
        json_t *list = json_object_get(body, "users");
        if (!json_is_array(list))
            return mgmt_reply_error(r, 400, "bad_request", "expected {\"users\": [names]}");
        size_t i;
        json_t *e;
        char err[400];
        json_array_foreach(list, i, e) if (json_is_string(e))
            delete_user_and_close(r, json_string_value(e), err, sizeof err);
        return mgmt_reply_empty(r, 204);
    }
    const acc_user *u = acc_user_find(a, name, strlen(name));
    if (r->nsegs == 3) {
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        if (!u)
            return mgmt_reply_not_found(r);
        json_t *arr = json_array();
        if (!strcmp(r->segs[2], "permissions"))
            acc_perm_each(a, name, NULL, add_perm, arr);
        else if (!strcmp(r->segs[2], "topic-permissions"))
            acc_topic_perm_each(a, name, NULL, add_topic, arr);
        else {
            json_decref(arr);
            return mgmt_reply_not_found(r);
        }
        return mgmt_reply_json(r, 200, arr);
    }
    if (r->nsegs != 2)
        return mgmt_reply_not_found(r);
    if (mgmt_req_is(r, "GET"))
        return u ? mgmt_reply_json(r, 200, user_view(u)) : mgmt_reply_not_found(r);
    if (mgmt_req_is(r, "PUT"))
        return put_user(r, name);
    if (mgmt_req_is(r, "DELETE"))
        return delete_user(r, name);
    return mgmt_reply_method_not_allowed(r);
}

enum MHD_Result mgmt_api_whoami(req *r)
{
    if (!mgmt_req_is(r, "GET"))
        return mgmt_reply_method_not_allowed(r);
    const acc_user *u = acc_user_find(acc_of(r), r->user, strlen(r->user));
    return mgmt_reply_json(
        r, 200, json_pack("{s:s,s:o}", "name", r->user, "tags", defs_tags_json(u ? u->tags : "")));
}

/* ------------------------------------------------------------------------------------------
 * Permissions
 */

static const char *str_of(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

enum MHD_Result mgmt_api_permissions(req *r)
{
    acc_db *a = acc_of(r);
    if (!require_admin(r))
        return MHD_YES;
    if (r->nsegs == 1) {
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        json_t *arr = json_array();
        acc_perm_each(a, NULL, NULL, add_perm, arr);
        return mgmt_reply_json(r, 200, arr);
    }
    if (r->nsegs != 3)
        return mgmt_reply_not_found(r);
    const char *vhost = r->segs[1], *user = r->segs[2];
    int exists = acc_user_find(a, user, strlen(user)) && acc_vhost_find(a, vhost, strlen(vhost));
    const acc_user *u = acc_user_find(a, user, strlen(user));
    const acc_grant *g = acc_perm_get(a, user, vhost);
    char err[600];
    if (mgmt_req_is(r, "GET"))
        return g ? mgmt_reply_json(r, 200, perm_json(u, g)) : mgmt_reply_not_found(r);
    if (mgmt_req_is(r, "PUT")) {
        if (!exists)
            return mgmt_reply_error(r, 400, "bad_request", "vhost_or_user_not_found");
        json_t *body = mgmt_req_body(r, 0);
        if (!body)
            return MHD_YES;
        const char *c = str_of(body, "configure"), *w = str_of(body, "write"),
                   *rd = str_of(body, "read");
        if (!c || !w || !rd)
            return mgmt_reply_error(r, 400, "bad_request",
                                    "configure, write and read (strings) are required");
        int created = g == NULL;
        sl_err e = acc_perm_set(a, user, vhost, c, w, rd, err, sizeof err);
        if (e != SL_OK)
            return mgmt_reply_error(r, 400, "bad_request", "%s", err);
        sl_info("http: permissions of '%s' on vhost '%s' set by '%s'", user, vhost, r->user);
        return mgmt_reply_empty(r, created ? 201 : 204);
    }
    if (mgmt_req_is(r, "DELETE")) {
        if (acc_perm_clear(a, user, vhost, err, sizeof err) != SL_OK)
            return mgmt_reply_not_found(r);
        return mgmt_reply_empty(r, 204);
    }
    return mgmt_reply_method_not_allowed(r);
}

enum MHD_Result mgmt_api_topic_permissions(req *r)
{
    acc_db *a = acc_of(r);
    if (!require_admin(r))
        return MHD_YES;
    json_t *arr;
    if (r->nsegs == 1) {
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        arr = json_array();
        acc_topic_perm_each(a, NULL, NULL, add_topic, arr);
        return mgmt_reply_json(r, 200, arr);
    }
    if (r->nsegs != 3)
        return mgmt_reply_not_found(r);
    const char *vhost = r->segs[1], *user = r->segs[2];
    int exists = acc_user_find(a, user, strlen(user)) && acc_vhost_find(a, vhost, strlen(vhost));
    char err[600];
    if (mgmt_req_is(r, "GET")) {
        arr = json_array();
        acc_topic_perm_each(a, user, vhost, add_topic, arr);
        if (!json_array_size(arr)) {
            json_decref(arr);
            return mgmt_reply_not_found(r);
        }
        return mgmt_reply_json(r, 200, arr);
    }
    if (mgmt_req_is(r, "PUT")) {
        if (!exists)
            return mgmt_reply_error(r, 400, "bad_request", "vhost_or_user_not_found");
        json_t *body = mgmt_req_body(r, 0);
        if (!body)
            return MHD_YES;
        const char *x = str_of(body, "exchange"), *w = str_of(body, "write"),
                   *rd = str_of(body, "read");
        if (!x || !w || !rd)
            return mgmt_reply_error(r, 400, "bad_request",
                                    "exchange, write and read (strings) are required");
        int created = !acc_has_topic_perms(a, user, vhost, x);
        sl_err e = acc_topic_perm_set(a, user, vhost, x, w, rd, err, sizeof err);
        if (e != SL_OK)
            return mgmt_reply_error(r, 400, "bad_request", "%s", err);
        return mgmt_reply_empty(r, created ? 201 : 204);
    }
    if (mgmt_req_is(r, "DELETE")) {
        const char *x = mgmt_req_query(r, "exchange");
        if (acc_topic_perm_clear(a, user, vhost, x && *x ? x : NULL, err, sizeof err) != SL_OK)
            return mgmt_reply_not_found(r);
        return mgmt_reply_empty(r, 204);
    }
    return mgmt_reply_method_not_allowed(r);
}

/* ------------------------------------------------------------------------------------------
 * Limits
 */

static int64_t limit_value(req *r)
{
    json_t *body = mgmt_req_body(r, 0);
    if (!body)
        return -3;
    json_t *v = json_object_get(body, "value");
    if (!json_is_integer(v)) {
        mgmt_reply_error(r, 400, "bad_request", "expected {\"value\": integer}");
        return -3;
    }
    return json_integer_value(v) < 0 ? -1 : json_integer_value(v);
}

enum MHD_Result mgmt_api_vhost_limits(req *r)
{
    acc_db *a = acc_of(r);
    char err[400];
    if (mgmt_req_is(r, "GET") && r->nsegs <= 2) {
        json_t *arr = json_array();
        size_t n;
        const acc_vhost **vs = acc_vhosts(a, &n);
        int all = acc_is_admin(a, r->user);
        for (size_t i = 0; i < n; i++) {
            const acc_vhost *v = vs[i];
            if (r->nsegs == 2 && strcmp(v->name, r->segs[1]))
                continue;
            if (!all && !acc_vhost_visible(a, r->user, v->name))
                continue;
            if (v->max_connections < 0 && v->max_queues < 0)
                continue;
            json_array_append_new(arr,
                                  json_pack("{s:s,s:o}", "vhost", v->name, "value",
                                            defs_limits_json(v->max_connections, "max-connections",
                                                             v->max_queues, "max-queues")));
        }
        sl_free(vs);
        if (r->nsegs == 2 && !acc_vhost_find(a, r->segs[1], strlen(r->segs[1]))) {
            json_decref(arr);
            return mgmt_reply_not_found(r);
        }
        return mgmt_reply_json(r, 200, arr);
    }
    if (r->nsegs != 3)
        return mgmt_reply_not_found(r);
    if (!require_admin(r))
        return MHD_YES;
    const char *vhost = r->segs[1], *name = r->segs[2];
    if (!acc_vhost_find(a, vhost, strlen(vhost)))
        return mgmt_reply_not_found(r);
    int64_t v;
    if (mgmt_req_is(r, "PUT")) {
        if ((v = limit_value(r)) == -3)
            return MHD_YES;
    } else if (mgmt_req_is(r, "DELETE")) {
        v = -1;
    } else {
        return mgmt_reply_method_not_allowed(r);
    }
    if (acc_vhost_set_limit(a, vhost, name, v, err, sizeof err) != SL_OK)
        return mgmt_reply_error(r, 400, "bad_request", "%s", err);
    return mgmt_reply_empty(r, 204);
}

enum MHD_Result mgmt_api_user_limits(req *r)
{
    acc_db *a = acc_of(r);
    char err[400];
    if (!require_admin(r))
        return MHD_YES;
    if (mgmt_req_is(r, "GET") && r->nsegs <= 2) {
        json_t *arr = json_array();
        size_t n;
        const acc_user **us = acc_users(a, &n);
        for (size_t i = 0; i < n; i++) {
            const acc_user *u = us[i];
            if (r->nsegs == 2 && strcmp(u->name, r->segs[1]))
                continue;
            if (u->max_connections < 0 && u->max_channels < 0)
                continue;
            json_array_append_new(arr,
                                  json_pack("{s:s,s:o}", "user", u->name, "value",
                                            defs_limits_json(u->max_connections, "max-connections",
                                                             u->max_channels, "max-channels")));
        }
        sl_free(us);
        return mgmt_reply_json(r, 200, arr);
    }
    if (r->nsegs != 3)
        return mgmt_reply_not_found(r);
    const char *user = r->segs[1], *name = r->segs[2];
    if (!acc_user_find(a, user, strlen(user)))
        return mgmt_reply_not_found(r);
    int64_t v;
    if (mgmt_req_is(r, "PUT")) {
        if ((v = limit_value(r)) == -3)
            return MHD_YES;
    } else if (mgmt_req_is(r, "DELETE")) {
        v = -1;
    } else {
        return mgmt_reply_method_not_allowed(r);
    }
    if (acc_user_set_limit(a, user, name, v, err, sizeof err) != SL_OK)
        return mgmt_reply_error(r, 400, "bad_request", "%s", err);
    return mgmt_reply_empty(r, 204);
}
