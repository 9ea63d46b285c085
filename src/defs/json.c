/* json.c - JSON forms shared by definitions documents and the management API (see json.h):
 * RabbitMQ's loose booleans, AMQP field tables <-> JSON, users as RabbitMQ writes them.
 *
 * Invariants: a table read from JSON is valid AMQP table content (keys of at most 255 bytes,
 * nesting at most AMQP_TABLE_MAX_DEPTH); a table shown as JSON loses no entry (bytes that are
 * not UTF-8 are escaped, not dropped); a user's password is never shown, only its hash.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "amqp/method.h"
#include "core/mem.h"
#include "defs/json.h"

/* ------------------------------------------------------------------------------------------
 * Values
 */

int defs_json_truthy(json_t *v, int def)
{
    if (!v || json_is_null(v))
        return def;
    if (json_is_boolean(v))
        return json_is_true(v);
    if (json_is_integer(v))
        return json_integer_value(v) != 0;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strcasecmp(s, "true") || !strcmp(s, "1"))
            return 1;
        if (!strcasecmp(s, "false") || !strcmp(s, "0") || !*s)
            return 0;
    }
    return def;
}

json_t *defs_json_strn_safe(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (j)
        return j;
    /* Not UTF-8: keep ASCII, escape other bytes as \xNN so nothing is lost silently. */
    char *o = sl_xmalloc(len * 4 + 1), *q = o;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f)
            *q++ = (char)c;
        else
            q += sprintf(q, "\\x%02x", c);
    }
    j = json_stringn(o, (size_t)(q - o));
    sl_free(o);
    return j;
}

/* ---- AMQP tables -> JSON ---- */

static json_t *value_to_json(const amqp_value *v)
{
    int64_t i;
    switch (v->tag) {
    case 't':
        return json_boolean(v->v.b);
    case 'f':
        return json_real(v->v.f);
    case 'd':
        return json_real(v->v.d);
    case 'D': {
        double d = v->v.dec.value;
        for (int k = 0; k < v->v.dec.scale; k++)
            d /= 10;
        return json_real(d);
    }
    case 'S':
    case 'x':
        return defs_json_strn_safe((const char *)v->v.s.p, v->v.s.len);
    case 'F':
        return defs_table_to_json(v->v.s);
    case 'A':
        return defs_array_to_json(v->v.s);
    case 'V':
        return json_null();
    default:
        if (amqp_value_int(v, &i))
            return json_integer(i);
        return json_null();
    }
}

json_t *defs_table_to_json(amqp_bytes table)
{
    json_t *o = json_object();
    amqp_table_iter it;
    amqp_bytes key;
    amqp_value v;
    amqp_table_iter_init(&it, table);
    while (amqp_table_next(&it, &key, &v)) {
        /* A key that is not UTF-8 (message headers may carry one; declarations may not) is
         * shown escaped like string values, never dropped from the view. */
        json_t *k = defs_json_strn_safe((const char *)key.p, key.len);
        json_object_set_new(o, json_string_value(k), value_to_json(&v));
        json_decref(k);
    }
    return o;
}

json_t *defs_array_to_json(amqp_bytes array)
{
    json_t *a = json_array();
    amqp_table_iter it;
    amqp_value v;
    amqp_array_iter_init(&it, array);
    while (amqp_array_next(&it, &v))
        json_array_append_new(a, value_to_json(&v));
    return a;
}

/* ---- JSON -> AMQP tables ---- */

static int json_to_array(json_t *arr, sl_buf *out, char *err, size_t errlen, int depth);
static int json_to_table_d(json_t *obj, sl_buf *out, char *err, size_t errlen, int depth);

static int json_to_value(json_t *j, amqp_value *v, sl_buf *scratch, char *err, size_t errlen,
                         int depth)
{
    if (depth > AMQP_TABLE_MAX_DEPTH) {
        snprintf(err, errlen, "arguments nested too deeply");
        return -1;
    }
    switch (json_typeof(j)) {
    case JSON_STRING:
        v->tag = 'S';
        v->v.s = (amqp_bytes){(const uint8_t *)json_string_value(j), json_string_length(j)};
        return 0;
    case JSON_INTEGER:
        v->tag = 'l';
        v->v.i = json_integer_value(j);
        return 0;
    case JSON_REAL:
        v->tag = 'd';
        v->v.d = json_real_value(j);
        return 0;
    case JSON_TRUE:
    case JSON_FALSE:
        v->tag = 't';
        v->v.b = json_is_true(j);
        return 0;
    case JSON_NULL:
        v->tag = 'V';
        return 0;
    case JSON_OBJECT:
    case JSON_ARRAY: {
        size_t start = scratch->len;
        int rc = json_is_object(j) ? json_to_table_d(j, scratch, err, errlen, depth + 1)
                                   : json_to_array(j, scratch, err, errlen, depth + 1);
        if (rc < 0)
            return -1;
        v->tag = json_is_object(j) ? 'F' : 'A';
        /* offsets, fixed up by the caller once scratch stops moving */
        v->v.s = (amqp_bytes){(const uint8_t *)(uintptr_t)start, scratch->len - start};
        return 1;
    }
    }
    snprintf(err, errlen, "unsupported JSON value");
    return -1;
}

static int put_value(json_t *val, sl_buf *out, const char *key, char *err, size_t errlen, int depth)
{
    amqp_value v;
    sl_buf scratch;
    sl_buf_init(&scratch);
    int rc = json_to_value(val, &v, &scratch, err, errlen, depth);
    if (rc < 0) {
        sl_buf_free(&scratch);
        return -1;
    }
    /* An empty nested table or array never allocates scratch: its bytes are (NULL, 0), and
     * NULL + 0 is undefined, so only a non-empty one is rebased. */
    if (rc == 1)
        v.v.s.p = v.v.s.len ? scratch.data + (uintptr_t)v.v.s.p : NULL;
    if (key)
        amqp_tbl_put_value(out, amqp_cstr(key), &v);
    else
        amqp_value_write(out, &v);
    sl_buf_free(&scratch);
    return 0;
}

static int json_to_array(json_t *arr, sl_buf *out, char *err, size_t errlen, int depth)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) if (put_value(v, out, NULL, err, errlen, depth) < 0) return -1;
    return 0;
}

int defs_json_to_table(json_t *obj, sl_buf *out, char *err, size_t errlen)
{
    sl_buf_init(out);
    if (json_to_table_d(obj, out, err, errlen, 1) < 0) {
        sl_buf_free(out);
        return -1;
    }
    return 0;
}

static int json_to_table_d(json_t *obj, sl_buf *out, char *err, size_t errlen, int depth)
{
    if (!obj || json_is_null(obj))
        return 0;
    if (!json_is_object(obj)) {
        snprintf(err, errlen, "arguments must be a JSON object");
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        if (strlen(k) > 255) {
            snprintf(err, errlen, "argument name longer than 255 bytes");
            return -1;
        }
        if (put_value(v, out, k, err, errlen, depth) < 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Users
 */

json_t *defs_tags_json(const char *tags)
{
    json_t *a = json_array();
    for (const char *p = tags; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, " ,");
        if (n)
            json_array_append_new(a, json_stringn(p, n));
        p += n;
    }
    return a;
}

json_t *defs_limits_json(int64_t a, const char *an, int64_t b, const char *bn)
{
    json_t *o = json_object();
    if (a >= 0)
        json_object_set_new(o, an, json_integer(a));
    if (b >= 0)
        json_object_set_new(o, bn, json_integer(b));
    return o;
}

json_t *defs_user_json(const acc_user *u)
{
    char *hash = acc_hash_export(u);
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:o,s:o}", "name", u->name, "password_hash", hash, "hashing_algorithm",
        u->algo == ACC_HASH_NONE ? acc_hash_name(ACC_HASH_SHA256)
                                 : acc_hash_name((acc_hash)u->algo),
        "tags", defs_tags_json(u->tags), "limits",
        defs_limits_json(u->max_connections, "max-connections", u->max_channels, "max-channels"));
    sl_free(hash);
    return o;
}

/* ---- generic helpers the API's handlers share ---- */

json_t *defs_json_str_safe(const char *s)
{
    return defs_json_strn_safe(s, strlen(s));
}

int64_t defs_json_uint(json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v) >= 0 ? json_integer_value(v) : -1;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        if (!*s || *s == '-')
            return -1;
        unsigned long long n = strtoull(s, &end, 10);
        if (*end || n > INT64_MAX)
            return -1;
        return (int64_t)n;
    }
    return -1;
}

json_t *defs_json_path(json_t *o, const char *path)
{
    char part[128];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof part)
            return NULL;
        memcpy(part, path, n);
        part[n] = 0;
        o = json_is_object(o) ? json_object_get(o, part) : NULL;
        path += n;
        if (*path == '.')
            path++;
    }
    return o;
}

void defs_json_filter_columns(json_t *obj, const char *cols)
{
    if (!json_is_object(obj))
        return;
    const char *key;
    json_t *val;
    void *tmp;
    json_object_foreach_safe(obj, tmp, key, val)
    {
        size_t kl = strlen(key);
        int keep = 0;
        for (const char *p = cols; *p;) {
            size_t n = strcspn(p, ",");
            size_t top = strcspn(p, ".,");
            if ((n == kl || top == kl) && !memcmp(p, key, kl))
                keep = 1;
            p += n;
            if (*p == ',')
                p++;
        }
        if (!keep)
            json_object_del(obj, key);
    }
}

/* ---- a message's basic properties; key, value pairs ---- */

static void set_bytes(json_t *o, const char *key, amqp_bytes b)
{
    json_object_set_new(o, key, defs_json_strn_safe((const char *)b.p, b.len));
}

json_t *defs_props_json(const uint8_t *props, size_t len)
{
    json_t *o = json_object();
    amqp_basic_props p;
    if (!len || amqp_props_decode(props, len, &p) != 0)
        return o;
    if (p.flags & AMQP_P_CONTENT_TYPE)
        set_bytes(o, "content_type", p.content_type);
    if (p.flags & AMQP_P_CONTENT_ENCODING)
        set_bytes(o, "content_encoding", p.content_encoding);
    if (p.flags & AMQP_P_HEADERS)
        json_object_set_new(o, "headers", defs_table_to_json(p.headers));
    if (p.flags & AMQP_P_DELIVERY_MODE)
        json_object_set_new(o, "delivery_mode", json_integer(p.delivery_mode));
    if (p.flags & AMQP_P_PRIORITY)
        json_object_set_new(o, "priority", json_integer(p.priority));
    if (p.flags & AMQP_P_CORRELATION_ID)
        set_bytes(o, "correlation_id", p.correlation_id);
    if (p.flags & AMQP_P_REPLY_TO)
        set_bytes(o, "reply_to", p.reply_to);
    if (p.flags & AMQP_P_EXPIRATION)
        set_bytes(o, "expiration", p.expiration);
    if (p.flags & AMQP_P_MESSAGE_ID)
        set_bytes(o, "message_id", p.message_id);
    if (p.flags & AMQP_P_TIMESTAMP)
        json_object_set_new(o, "timestamp", json_integer((json_int_t)p.timestamp));
    if (p.flags & AMQP_P_TYPE)
        set_bytes(o, "type", p.type);
    if (p.flags & AMQP_P_USER_ID)
        set_bytes(o, "user_id", p.user_id);
    if (p.flags & AMQP_P_APP_ID)
        set_bytes(o, "app_id", p.app_id);
    if (p.flags & AMQP_P_CLUSTER_ID)
        set_bytes(o, "cluster_id", p.cluster_id);
    return o;
}

json_t *defs_json_pairs(const char *const *kv, size_t n)
{
    json_t *o = json_object();
    for (size_t i = 0; i < n; i++)
        json_object_set_new(o, kv[2 * i], defs_json_str_safe(kv[2 * i + 1]));
    return o;
}
