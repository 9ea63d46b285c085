/* msg_json.c - messages as the management API shows and accepts them.
 *
 * The view is RabbitMQ's /get shape (payload, payload_bytes, payload_encoding, properties,
 * exchange, routing_key, redelivered, message_count) plus Sluice's MSMQ identity of the
 * message in its queue: lookup_id and move_count. Properties are decoded from the raw AMQP
 * bytes the message keeps; publishing encodes them back the same way, so a message published
 * over HTTP is indistinguishable from one published over AMQP.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "amqp/method.h"
#include "amqp/table.h"
#include "core/mem.h"
#include "mgmt/mgmt_internal.h"

json_t *mgmt_msg_view(const qm_position *pos, const qm_queue *q, const char *encoding,
                      int64_t truncate, uint64_t remaining)
{
    const qm_message *m = pos->msg;
    json_t *o = json_object();
    size_t n = (size_t)m->body_len;
    if (truncate >= 0 && (uint64_t)truncate < m->body_len)
        n = (size_t)truncate;
    json_t *payload = NULL;
    if (!encoding || strcmp(encoding, "base64") != 0)
        payload = json_stringn((const char *)qm_msg_body(m), n); /* NULL when not UTF-8 */
    if (payload) {
        json_object_set_new(o, "payload", payload);
        json_object_set_new(o, "payload_encoding", json_string("string"));
    } else {
        size_t bl;
        char *b64 = sl_base64_encode(qm_msg_body(m), n, &bl);
        json_object_set_new(o, "payload", json_stringn(b64, bl));
        json_object_set_new(o, "payload_encoding", json_string("base64"));
        sl_free(b64);
    }
    json_object_set_new(o, "payload_bytes", json_integer((json_int_t)m->body_len));
    json_object_set_new(o, "redelivered", json_boolean(pos->redelivered));
    amqp_bytes x = qm_msg_exchange(m), rk = qm_msg_routing_key(m);
    json_object_set_new(o, "exchange", defs_json_strn_safe((const char *)x.p, x.len));
    json_object_set_new(o, "routing_key", defs_json_strn_safe((const char *)rk.p, rk.len));
    json_object_set_new(o, "message_count", json_integer((json_int_t)remaining));
    json_object_set_new(o, "properties", defs_props_json(qm_msg_props(m), m->props_len));
    json_object_set_new(o, "lookup_id", json_integer((json_int_t)pos->lookup_id));
    json_object_set_new(o, "move_count", json_integer((json_int_t)pos->move_count));
    if (q)
        json_object_set_new(o, "queue", json_string(q->name));
    return o;
}

/* A string property: 1 when set, 0 when absent, -1 when of the wrong type. */
static int str_prop(json_t *props, const char *key, amqp_bytes *out)
{
    json_t *v = json_object_get(props, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) || json_string_length(v) > 255)
        return -1;
    *out = (amqp_bytes){(const uint8_t *)json_string_value(v), json_string_length(v)};
    return 1;
}

static int int_prop(json_t *props, const char *key, int64_t max, int64_t *out)
{
    json_t *v = json_object_get(props, key);
    if (!v || json_is_null(v))
        return 0;
    int64_t n = defs_json_uint(v);
    if (n < 0 || n > max)
        return -1;
    *out = n;
    return 1;
}

qm_message *mgmt_msg_from_publish(req *r, json_t *body, const char *exchange, sl_buf *bcc)
{
    json_t *rk = json_object_get(body, "routing_key");
    json_t *payload = json_object_get(body, "payload");
    json_t *enc = json_object_get(body, "payload_encoding");
    json_t *props = json_object_get(body, "properties");
    if (!json_is_string(rk) || json_string_length(rk) > 255) {
        mgmt_reply_error(r, 400, "bad_request",
                         "routing_key (a string of at most 255 bytes) is required");
        return NULL;
    }
    if (payload && !json_is_string(payload)) {
        mgmt_reply_error(r, 400, "bad_request", "payload must be a string");
        return NULL;
    }
    int b64 = 0;
    if (enc && json_is_string(enc) && !strcmp(json_string_value(enc), "base64"))
        b64 = 1;
    else if (enc && !(json_is_string(enc) && !strcmp(json_string_value(enc), "string"))) {
        mgmt_reply_error(r, 400, "bad_request",
                         "payload_encoding must be \"string\" or \"base64\"");
        return NULL;
    }
    if (props && !json_is_object(props) && !(json_is_array(props) && !json_array_size(props))) {
        mgmt_reply_error(r, 400, "bad_request", "properties must be an object");
        return NULL;
    }
    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    sl_buf headers;
    sl_buf_init(&headers);
    static const struct {
        const char *key;
        uint16_t flag;
        size_t off;
    } strs[] = {
        {"content_type", AMQP_P_CONTENT_TYPE, offsetof(amqp_basic_props, content_type)},
        {"content_encoding", AMQP_P_CONTENT_ENCODING, offsetof(amqp_basic_props, content_encoding)},
        {"correlation_id", AMQP_P_CORRELATION_ID, offsetof(amqp_basic_props, correlation_id)},
        {"reply_to", AMQP_P_REPLY_TO, offsetof(amqp_basic_props, reply_to)},
        {"expiration", AMQP_P_EXPIRATION, offsetof(amqp_basic_props, expiration)},
        {"message_id", AMQP_P_MESSAGE_ID, offsetof(amqp_basic_props, message_id)},
        {"type", AMQP_P_TYPE, offsetof(amqp_basic_props, type)},
        {"user_id", AMQP_P_USER_ID, offsetof(amqp_basic_props, user_id)},
        {"app_id", AMQP_P_APP_ID, offsetof(amqp_basic_props, app_id)},
        {"cluster_id", AMQP_P_CLUSTER_ID, offsetof(amqp_basic_props, cluster_id)},
    };
    const char *bad = NULL;
    if (json_is_object(props)) {
        for (size_t i = 0; i < sizeof strs / sizeof strs[0] && !bad; i++) {
            int rc = str_prop(props, strs[i].key, (amqp_bytes *)((char *)&p + strs[i].off));
            if (rc < 0)
                bad = strs[i].key;
            else if (rc > 0)
                p.flags |= strs[i].flag;
        }
        int64_t n = 0;
        int rc;
        if (!bad && (rc = int_prop(props, "delivery_mode", 2, &n)) != 0) {
            if (rc < 0 || n < 1)
                bad = "delivery_mode";
            p.delivery_mode = (uint8_t)n;
            p.flags |= AMQP_P_DELIVERY_MODE;
        }
        if (!bad && (rc = int_prop(props, "priority", 255, &n)) != 0) {
            if (rc < 0)
                bad = "priority";
            p.priority = (uint8_t)n;
            p.flags |= AMQP_P_PRIORITY;
        }
        if (!bad && (rc = int_prop(props, "timestamp", INT64_MAX, &n)) != 0) {
            if (rc < 0)
                bad = "timestamp";
            p.timestamp = (uint64_t)n;
            p.flags |= AMQP_P_TIMESTAMP;
        }
        json_t *h = json_object_get(props, "headers");
        if (!bad && h && !json_is_null(h)) {
            char err[128];
            if (defs_json_to_table(h, &headers, err, sizeof err) < 0) {
                bad = "headers";
            } else {
                p.headers = (amqp_bytes){headers.data, headers.len};
                p.flags |= AMQP_P_HEADERS;
            }
        }
    }
    if (bad) {
        sl_buf_free(&headers);
        mgmt_reply_error(r, 400, "bad_request", "invalid message property '%s'", bad);
        return NULL;
    }
    /* as basic.publish: the expiration, CC / BCC arrays (BCC routed only) */
    char why[700];
    if (node_publish_check(&p, why, sizeof why) != SL_OK) {
        sl_buf_free(&headers);
        mgmt_reply_error(r, 400, "bad_request", "%s", why);
        return NULL;
    }
    sl_buf stripped;
    sl_buf_init(&stripped);
    if ((p.flags & AMQP_P_HEADERS) && qm_strip_bcc(p.headers, &stripped, bcc) > 0)
        p.headers = (amqp_bytes){stripped.data, stripped.len};
    sl_buf raw;
    sl_buf_init(&raw);
    amqp_props_encode(&raw, &p);
    sl_buf_free(&stripped);
    sl_buf_free(&headers);

    const char *text = payload ? json_string_value(payload) : "";
    size_t tlen = payload ? json_string_length(payload) : 0;
    uint8_t *decoded = NULL;
    size_t blen = tlen;
    if (b64) {
        decoded = sl_xmalloc(tlen * 3 / 4 + 4);
        long n = sl_base64_decode(text, tlen, decoded);
        if (n < 0) {
            sl_free(decoded);
            sl_buf_free(&raw);
            mgmt_reply_error(r, 400, "bad_request", "payload is not valid base64");
            return NULL;
        }
        blen = (size_t)n;
    }
    if (blen > r->m->n->cfg->max_message_size) {
        sl_free(decoded);
        sl_buf_free(&raw);
        mgmt_reply_sl_err(r, SL_ERR_CONTENT_TOO_LARGE,
                          "message body of %zu bytes exceeds max_message_size", blen);
        return NULL;
    }
    qm_message *m =
        qm_message_new(amqp_cstr(exchange),
                       (amqp_bytes){(const uint8_t *)json_string_value(rk), json_string_length(rk)},
                       raw.data, (uint32_t)raw.len, blen);
    memcpy(qm_msg_body(m), decoded ? decoded : (const uint8_t *)text, blen);
    sl_free(decoded);
    sl_buf_free(&raw);
    return m;
}
