/* args.c - queue x- arguments: parsing, validation and redeclare equivalence.
 *
 * Texts follow RabbitMQ's so that clients and tests that match on them keep working:
 *   invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}
 *   inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received '2000' but
 *   current is '1000'
 * Unknown arguments are accepted and ignored (kept in raw for display). The raw table is
 * kept so equivalence compares the values as the client sent them.
 */
#include <inttypes.h>
#include <string.h>

#include "amqp/table.h"
#include "qm/qm_internal.h"
#include "store/stream.h"

/* The arguments compared on redeclare, in the order equivalence reports them. x-queue-type
 * is compared first and apart: absent means classic, so an explicit "classic" matches none. */
static const char *const known[] = {
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-max-priority",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-journal",
    "x-delivery-limit",
    "x-quorum-initial-group-size",
    "x-dead-letter-strategy",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
};

/* Arguments one queue type refuses whatever their value, as RabbitMQ 3.10 does (observed on
 * 3.10.8: "invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type
 * rabbit_quorum_queue"): each type's own arguments are the other's invalid ones. Unknown
 * arguments stay accepted and ignored. */
static const char *const invalid_classic[] = {
    "x-delivery-limit",
    "x-quorum-initial-group-size",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-queue-leader-locator",
    "x-dead-letter-strategy",
};
static const char *const invalid_quorum[] = {
    "x-max-priority",         "x-queue-mode", "x-queue-version",
    "x-queue-master-locator", "x-max-age",    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
};

/* A stream's (RabbitMQ 3.10's rabbit_stream_queue capabilities: it takes x-max-length-bytes,
 * x-max-age, x-stream-max-segment-size-bytes, x-initial-cluster-size, x-queue-leader-locator;
 * every other argument RabbitMQ knows is refused whatever its value). */
static const char *const invalid_stream[] = {
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-quorum-initial-group-size",
    "x-queue-master-locator",
    "x-delivery-limit",
    "x-dead-letter-strategy",
};

static int is_int_tag(uint8_t t)
{
    return t == 'b' || t == 'B' || t == 's' || t == 'u' || t == 'I' || t == 'i' || t == 'l' ||
           t == 'L';
}

#define PREFIX "invalid arg '%s' for queue '%s' in vhost '%s': "

static sl_err bad_type(const char *key, const char *what, const amqp_value *v, const char *q,
                       const char *vh, char *err, size_t errlen)
{
    snprintf(err, errlen, PREFIX "\"expected %s, got %s\"", key, q, vh, what,
             amqp_value_type_name(v->tag));
    return SL_ERR_PRECONDITION;
}

/* Integer argument with a lower bound: min 0 (>= 0) or 1 (> 0). */
static sl_err get_int(const char *key, const amqp_value *v, int64_t min, int64_t *out,
                      const char *q, const char *vh, char *err, size_t errlen)
{
    if (!is_int_tag(v->tag))
        return bad_type(key, "integer", v, q, vh, err, errlen);
    int64_t x = v->v.i;
    if (x < 0) {
        snprintf(err, errlen, PREFIX "{value_negative,%" PRId64 "}", key, q, vh, x);
        return SL_ERR_PRECONDITION;
    }
    if (x < min) {
        snprintf(err, errlen, PREFIX "{value_zero,%" PRId64 "}", key, q, vh, x);
        return SL_ERR_PRECONDITION;
    }
    *out = x;
    return SL_OK;
}

sl_err qm_queue_args_parse(amqp_bytes table, const char *qname, const char *vhost,
                           qm_queue_args *out, char *err, size_t errlen)
{
    amqp_table_iter it;
    amqp_bytes key, s;
    amqp_value v;
    sl_err rc = SL_OK;

    int quorum = qm_queue_args_quorum(table);
    int stream = qm_queue_args_stream(table);
    qm_queue_args_init(out);
    if (table.len) {
        out->raw = sl_xmalloc(table.len);
        memcpy(out->raw, table.p, table.len);
        out->raw_len = table.len;
    }
    amqp_table_iter_init(&it, table);
    while (!rc && amqp_table_next(&it, &key, &v)) {
        char k[64];
        if (key.len >= sizeof k || key.len < 2 || memcmp(key.p, "x-", 2) != 0)
            continue;
        memcpy(k, key.p, key.len);
        k[key.len] = 0;
        if (!strcmp(k, "x-message-ttl")) {
            rc = get_int(k, &v, 0, &out->message_ttl, qname, vhost, err, errlen);
        } else if (!strcmp(k, "x-expires")) {
            rc = get_int(k, &v, 1, &out->expires, qname, vhost, err, errlen);
        } else if (!strcmp(k, "x-max-length")) {
            rc = get_int(k, &v, 0, &out->max_length, qname, vhost, err, errlen);
        } else if (!strcmp(k, "x-max-length-bytes")) {
            rc = get_int(k, &v, 0, &out->max_length_bytes, qname, vhost, err, errlen);
        } else if (!strcmp(k, "x-max-priority")) {
            int64_t p = 0;
            rc = get_int(k, &v, 0, &p, qname, vhost, err, errlen);
            if (!rc && p > 255) {
                snprintf(err, errlen, PREFIX "{max_value_exceeded,%" PRId64 "}", k, qname, vhost,
                         p);
                rc = SL_ERR_PRECONDITION;
            }
            out->max_priority = (int)p; /* 0 is accepted, as RabbitMQ does: no priorities */
        } else if (!strcmp(k, "x-overflow")) {
            if (!amqp_value_str(&v, &s))
                rc = bad_type(k, "string", &v, qname, vhost, err, errlen);
            else if (amqp_bytes_eq(s, "drop-head"))
                out->overflow = QM_OVERFLOW_DROP_HEAD;
            else if (amqp_bytes_eq(s, "reject-publish"))
                out->overflow = QM_OVERFLOW_REJECT_PUBLISH;
            else if (amqp_bytes_eq(s, "reject-publish-dlx"))
                out->overflow = QM_OVERFLOW_REJECT_PUBLISH_DLX;
            else {
                snprintf(err, errlen, PREFIX "{invalid_value,<<\"%.*s\">>}", k, qname, vhost,
                         (int)s.len, (const char *)s.p);
                rc = SL_ERR_PRECONDITION;
            }
        } else if (!strcmp(k, "x-dead-letter-exchange") ||
                   !strcmp(k, "x-dead-letter-routing-key")) {
            if (v.tag != 'S') {
                rc = bad_type(k, "string", &v, qname, vhost, err, errlen);
            } else if (v.v.s.len > 255) {
                /* an exchange name or routing key is a short string on the wire */
                snprintf(err, errlen, PREFIX "{value_too_long,%zu}", k, qname, vhost, v.v.s.len);
                rc = SL_ERR_PRECONDITION;
            } else if (!strcmp(k, "x-dead-letter-exchange"))
                out->dlx = sl_xstrndup((const char *)v.v.s.p, v.v.s.len);
            else
                out->dlrk = sl_xstrndup((const char *)v.v.s.p, v.v.s.len);
        } else if (!strcmp(k, "x-single-active-consumer")) {
            if (v.tag != 't')
                rc = bad_type(k, "boolean", &v, qname, vhost, err, errlen);
            else
                out->single_active = v.v.b != 0;
        } else if (!strcmp(k, "x-journal")) {
            if (v.tag != 't')
                rc = bad_type(k, "boolean", &v, qname, vhost, err, errlen);
            else
                out->journal = v.v.b != 0;
        } else if (!strcmp(k, "x-delivery-limit")) {
            /* RabbitMQ 3.10 takes any value: an integer is the limit (a negative one
             * dead-letters at the first return), anything else sets none */
            int64_t lim;
            if (amqp_value_int(&v, &lim)) {
                out->delivery_limit = lim;
                out->has_delivery_limit = 1;
            }
        } else if (!strcmp(k, "x-queue-type")) {
            if (!amqp_value_str(&v, &s))
                rc = bad_type(k, "string", &v, qname, vhost, err, errlen);
            else if (amqp_bytes_eq(s, "quorum"))
                out->quorum = 1;
            else if (amqp_bytes_eq(s, "stream"))
                out->stream = 1;
            else if (!amqp_bytes_eq(s, "classic")) {
                snprintf(err, errlen, PREFIX "\"unsupported queue type '%.*s'\"", k, qname, vhost,
                         (int)s.len, (const char *)s.p);
                rc = SL_ERR_PRECONDITION;
            }
        } else if (stream && !strcmp(k, "x-max-age")) {
            /* RabbitMQ's check_max_age: a positive integer and one of Y M D h m s */
            if (!amqp_value_str(&v, &s)) {
                snprintf(err, errlen, PREFIX "{unacceptable_type,%s}", k, qname, vhost,
                         amqp_value_type_name(v.tag));
                rc = SL_ERR_PRECONDITION;
            } else if (st_stream_parse_age((const char *)s.p, s.len, &out->max_age_ms) < 0) {
                snprintf(err, errlen, PREFIX "invalid_max_age", k, qname, vhost);
                rc = SL_ERR_PRECONDITION;
            }
        } else if (stream && !strcmp(k, "x-stream-max-segment-size-bytes")) {
            rc = get_int(k, &v, 1, &out->max_segment_bytes, qname, vhost, err, errlen);
        } else if (!quorum) {
            /* the quorum arguments below: a new classic queue refuses them whatever their
             * value (qm_queue_type_check); one stored by a version that took them as
             * unknown comes back as it was */
        } else if (!strcmp(k, "x-quorum-initial-group-size")) {
            rc = get_int(k, &v, 1, &out->initial_group_size, qname, vhost, err, errlen);
        } else if (!strcmp(k, "x-dead-letter-strategy")) {
            if (!amqp_value_str(&v, &s)) {
                snprintf(err, errlen, PREFIX "{unacceptable_type,%s}", k, qname, vhost,
                         amqp_value_type_name(v.tag));
                rc = SL_ERR_PRECONDITION;
            } else if (!amqp_bytes_eq(s, "at-most-once") && !amqp_bytes_eq(s, "at-least-once")) {
                snprintf(err, errlen, PREFIX "invalid_dlx_strategy", k, qname, vhost);
                rc = SL_ERR_PRECONDITION;
            }
        }
    }
    if (rc)
        qm_queue_args_free(out);
    return rc;
}

void qm_queue_args_free(qm_queue_args *a)
{
    sl_free(a->dlx);
    sl_free(a->dlrk);
    sl_free(a->raw);
    qm_queue_args_init(a);
}

/* "1000", "abc", "true" - the value as RabbitMQ prints it in inequivalence errors. */
static void fmt_value(const amqp_value *v, char *buf, size_t len)
{
    int64_t i;
    amqp_bytes s;
    if (amqp_value_int(v, &i))
        snprintf(buf, len, "%" PRId64, i);
    else if (amqp_value_str(v, &s))
        snprintf(buf, len, "%.*s", (int)s.len, (const char *)s.p);
    else if (v->tag == 't')
        snprintf(buf, len, "%s", v->v.b ? "true" : "false");
    else
        snprintf(buf, len, "%s", amqp_value_type_name(v->tag));
}

sl_err qm_queue_args_equivalent(const qm_queue_args *cur, const qm_queue_args *req,
                                const char *qname, const char *vhost, char *err, size_t errlen)
{
    amqp_bytes ct = {cur->raw, cur->raw_len}, rt = {req->raw, req->raw_len};
    for (size_t i = 0; i <= sizeof known / sizeof known[0]; i++) {
        const char *key = i ? known[i - 1] : "x-queue-type";
        amqp_value a, b;
        int ha = amqp_table_get(ct, key, &a);
        int hb = amqp_table_get(rt, key, &b);
        if (!ha && !hb)
            continue;
        if (ha && hb && amqp_value_equal(&a, &b))
            continue;
        if (!i && cur->quorum == req->quorum && cur->stream == req->stream)
            continue; /* the same type, one of them named "classic" and the other not */
        char sa[128], sb[128];
        if (ha)
            fmt_value(&a, sa, sizeof sa);
        if (hb)
            fmt_value(&b, sb, sizeof sb);
        if (ha && hb)
            snprintf(err, errlen,
                     "inequivalent arg '%s' for queue '%s' in vhost '%s': received '%s' but "
                     "current is '%s'",
                     key, qname, vhost, sb, sa);
        else if (hb)
            snprintf(err, errlen,
                     "inequivalent arg '%s' for queue '%s' in vhost '%s': received the value "
                     "'%s' of type '%s' but current is none",
                     key, qname, vhost, sb, amqp_value_type_name(b.tag));
        else
            snprintf(err, errlen,
                     "inequivalent arg '%s' for queue '%s' in vhost '%s': received none but "
                     "current is the value '%s' of type '%s'",
                     key, qname, vhost, sa, amqp_value_type_name(a.tag));
        return SL_ERR_PRECONDITION;
    }
    return SL_OK;
}

int qm_queue_args_quorum(amqp_bytes table)
{
    amqp_value v;
    amqp_bytes s;
    return amqp_table_get(table, "x-queue-type", &v) && amqp_value_str(&v, &s) &&
           amqp_bytes_eq(s, "quorum");
}

int qm_queue_args_stream(amqp_bytes table)
{
    amqp_value v;
    amqp_bytes s;
    return amqp_table_get(table, "x-queue-type", &v) && amqp_value_str(&v, &s) &&
           amqp_bytes_eq(s, "stream");
}

sl_err qm_queue_type_check(const qm_queue_decl *d, const char *qname, const char *vhost, char *err,
                           size_t errlen)
{
    int quorum = qm_queue_args_quorum(d->arguments);
    int stream = qm_queue_args_stream(d->arguments);
    const char *type = quorum   ? "rabbit_quorum_queue"
                       : stream ? "rabbit_stream_queue"
                                : "rabbit_classic_queue";
    if ((quorum || stream) && !d->name_len) {
        snprintf(err, errlen, "Cannot declare a server-named queue for type %s", type);
        return SL_ERR_PRECONDITION;
    }
    const char *const *bad = quorum ? invalid_quorum : stream ? invalid_stream : invalid_classic;
    size_t nbad = quorum   ? sizeof invalid_quorum / sizeof invalid_quorum[0]
                  : stream ? sizeof invalid_stream / sizeof invalid_stream[0]
                           : sizeof invalid_classic / sizeof invalid_classic[0];
    for (size_t i = 0; i < nbad; i++) {
        amqp_value v;
        if (amqp_table_get(d->arguments, bad[i], &v)) {
            snprintf(err, errlen, "invalid arg '%s' for queue '%s' in vhost '%s' of queue type %s",
                     bad[i], qname, vhost, type);
            return SL_ERR_PRECONDITION;
        }
    }
    return SL_OK;
}

sl_err qm_queue_props_check(const qm_queue_decl *d, const qm_queue_args *a, const char *qname,
                            const char *vhost, char *err, size_t errlen)
{
    /* RabbitMQ's order (rabbit_quorum_queue:declare): auto-delete, exclusive, durable */
    const char *prop = NULL;
    if (!a->quorum && !a->stream)
        return SL_OK;
    if (d->auto_delete)
        prop = "auto-delete";
    else if (d->exclusive)
        prop = "exclusive-owner";
    else if (!d->durable)
        prop = "non-durable";
    if (!prop)
        return SL_OK;
    snprintf(err, errlen, "invalid property '%s' for queue '%s' in vhost '%s'", prop, qname, vhost);
    return SL_ERR_PRECONDITION;
}
