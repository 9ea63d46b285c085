/* superstream.c - super streams on the stream door: CreateSuperStream, DeleteSuperStream,
 * Partitions and Route, as RabbitMQ 3.13's stream reader and stream manager serve them.
 *
 * A super stream is an exchange whose bindings to streams are its partitions (qm/superstream.h
 * says what one is, the partitions' order and the routes; this file only translates and
 * orchestrates). Super streams built by hand over AMQP 0-9-1 or the HTTP API are served alike.
 *
 *   CreateSuperStream  the name stripped of CR and LF; empty or "amq.": PRECONDITION_FAILED;
 *                      then the permissions RabbitMQ checks (configure on the exchange and on
 *                      each partition, read on the exchange, write on each partition):
 *                      ACCESS_REFUSED; then, PRECONDITION_FAILED: partitions and binding keys
 *                      not as many, a partition name duplicated or not a correct name, the
 *                      vhost's max-queues exceeded by the partitions; STREAM_ALREADY_EXISTS:
 *                      an exchange of the name, or a queue of a partition's name (any type).
 *                      Then a durable direct exchange with x-super-stream: true, one stream
 *                      per partition (Create's arguments, queue-leader-locator "balanced" by
 *                      default), one binding per partition (its binding key, and
 *                      x-stream-partition-order = its index). A step refused undoes every
 *                      one before it (the streams, then the exchange) and answers
 *                      PRECONDITION_FAILED (a partition refused) or INTERNAL_ERROR.
 *   DeleteSuperStream  the same permissions, over the partitions it has now: ACCESS_REFUSED;
 *                      no exchange of the name: STREAM_DOES_NOT_EXIST; then the exchange and
 *                      each partition stream go (a failure is logged, not answered, as in
 *                      RabbitMQ). Subscriptions and publishers on them get MetadataUpdate as
 *                      for any deleted stream.
 *   Partitions         the partitions in order, or STREAM_DOES_NOT_EXIST (no exchange);
 *   Route              the streams the routing key reaches through the exchange (none: OK
 *                      with an empty list), or STREAM_DOES_NOT_EXIST (no exchange).
 *                      RabbitMQ 3.13 checks no permission for these two, and neither does
 *                      Sluice: the connection's vhost is one the user may use.
 *
 * Nothing here waits for the disk: like Create, the answer goes out once the model has
 * changed, and the definitions reach the store with the node's next group commit.
 */
#include "stream/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access/access.h"
#include "amqp/table.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/mem.h"
#include "node/rules.h"
#include "qm/qm.h"
#include "qm/superstream.h"

static qm_vhost *conn_vhost(stream_conn *c)
{
    return qm_vhost_find(c->d->n->qm, c->vhost, strlen(c->vhost));
}

static sp_str str_of(const char *p, size_t len)
{
    return (sp_str){(const uint8_t *)p, (uint32_t)len, 0};
}

/* RabbitMQ's enforce_correct_name: CR and LF dropped, then neither empty nor "amq."; Sluice
 * adds the 255 octets of a queue or exchange name. 1 with the name in out (NUL ended). */
static int correct_name(sp_str s, char out[256], size_t *len)
{
    size_t n = 0;
    for (uint32_t i = 0; !s.null && i < s.len; i++) {
        if (s.p[i] == '\r' || s.p[i] == '\n')
            continue;
        if (n == 255)
            return 0;
        out[n++] = (char)s.p[i];
    }
    out[n] = 0;
    *len = n;
    return n > 0 && !node_name_reserved(out, n);
}

static int allowed(stream_conn *c, acc_kind kind, sp_str name, acc_perm perm)
{
    char err[600];
    if (acc_check(c->d->n->acc, c->user, c->vhost, kind, name.null ? "" : (const char *)name.p,
                  name.null ? 0 : name.len, perm, err, sizeof err) == SL_OK)
        return 1;
    sl_warn("stream connection %s: %s", c->name, err);
    return 0;
}

/* RabbitMQ's check_super_stream_management_permitted, in its order. */
static uint16_t management_permitted(stream_conn *c, sp_str x, const sp_str *parts, size_t n)
{
    if (!allowed(c, ACC_EXCHANGE, x, ACC_CONFIGURE))
        return SP_ACCESS_REFUSED;
    for (size_t i = 0; i < n; i++)
        if (!allowed(c, ACC_QUEUE, parts[i], ACC_CONFIGURE))
            return SP_ACCESS_REFUSED;
    if (!allowed(c, ACC_EXCHANGE, x, ACC_READ))
        return SP_ACCESS_REFUSED;
    for (size_t i = 0; i < n; i++)
        if (!allowed(c, ACC_QUEUE, parts[i], ACC_WRITE))
            return SP_ACCESS_REFUSED;
    return SP_OK;
}

static int str_cmp(const void *pa, const void *pb)
{
    const sp_str *a = pa, *b = pb;
    int r = memcmp(a->p, b->p, a->len < b->len ? a->len : b->len);
    return r ? r : (a->len > b->len) - (a->len < b->len);
}

/* RabbitMQ's validate_super_stream_creation, in its order. */
static uint16_t validate(stream_conn *c, qm_vhost *vh, const char *xname, size_t xlen,
                         const sp_strs *parts, const sp_strs *keys, char *err, size_t errlen)
{
    if (parts->n != keys->n) {
        snprintf(err, errlen, "There must be the same number of partitions and binding keys");
        return SP_PRECONDITION_FAILED;
    }
    for (uint32_t i = 0; i < parts->n; i++) {
        sp_str p = parts->v[i];
        char name[256];
        size_t len;
        /* RabbitMQ strips CR and LF to check a partition's name but creates it unstripped,
         * then fails to bind it; Sluice refuses such a name at once */
        if (!correct_name(p, name, &len) || len != p.len) {
            snprintf(err, errlen, "%.*s is not a correct partition name", (int)(p.null ? 0 : p.len),
                     p.null ? "" : (const char *)p.p);
            return SP_PRECONDITION_FAILED;
        }
        if (!keys->v[i].null && keys->v[i].len > 255) {
            snprintf(err, errlen, "the binding key of partition %s is over 255 octets", name);
            return SP_PRECONDITION_FAILED;
        }
    }
    if (parts->n > 1) {
        sp_str *sorted = sl_xcalloc(parts->n, sizeof *sorted);
        memcpy(sorted, parts->v, parts->n * sizeof *sorted);
        qsort(sorted, parts->n, sizeof *sorted, str_cmp);
        int dup = 0;
        for (uint32_t i = 1; i < parts->n && !dup; i++)
            dup = !str_cmp(&sorted[i - 1], &sorted[i]);
        if (dup)
            snprintf(err, errlen, "Duplicate partition names found");
        sl_free(sorted);
        if (dup)
            return SP_PRECONDITION_FAILED;
    }
    const acc_vhost *av = acc_vhost_find(c->d->n->acc, vh->name, strlen(vh->name));
    if (av && av->max_queues >= 0 &&
        qm_vhost_queue_count(vh) + parts->n > (uint64_t)av->max_queues) {
        snprintf(err, errlen,
                 "Cannot declare super stream %s with %u partition(s) because queue limit %lld "
                 "in vhost '%s' is reached",
                 xname, parts->n, (long long)av->max_queues, vh->name);
        return SP_PRECONDITION_FAILED;
    }
    if (qm_exchange_find(vh, xname, xlen)) {
        snprintf(err, errlen, "there is already an exchange named %s", xname);
        return SP_STREAM_ALREADY_EXISTS;
    }
    for (uint32_t i = 0; i < parts->n; i++) {
        sp_str p = parts->v[i];
        if (qm_queue_find(vh, (const char *)p.p, p.len)) {
            snprintf(err, errlen, "there is already a queue named %.*s", (int)p.len,
                     (const char *)p.p);
            return SP_STREAM_ALREADY_EXISTS;
        }
    }
    return SP_OK;
}

/* The partitions' arguments: Create's, with RabbitMQ 3.13's default leader locator. */
static int partition_arguments(const sp_map *a, sl_buf *t)
{
    if (stream_create_arguments(a, t) < 0)
        return -1;
    for (uint32_t i = 0; i < a->n; i++)
        if (!a->v[i].key.null && a->v[i].key.len == 20 &&
            !memcmp(a->v[i].key.p, "queue-leader-locator", 20))
            return 0;
    amqp_tbl_put_str(t, "x-queue-leader-locator", amqp_cstr("balanced"));
    return 0;
}

/* Undo a creation: the streams made (newest first), then the exchange. */
static void rollback(qm_exchange *x, qm_queue **made, size_t n)
{
    char err[300];
    uint64_t count;
    while (n)
        if (qm_queue_delete(made[--n], 0, &count, err, sizeof err) != SL_OK)
            sl_warn("super stream rollback: %s", err);
    if (qm_exchange_delete(x, 0, err, sizeof err) != SL_OK)
        sl_warn("super stream rollback: %s", err);
}

/* The exchange, the streams, the bindings; on a refusal, nothing stays. */
static uint16_t build(qm_vhost *vh, const char *xname, size_t xlen, const sp_strs *parts,
                      const sp_strs *keys, const sp_map *arguments, char *err, size_t errlen)
{
    sl_buf qargs, xargs;
    sl_buf_init(&qargs);
    sl_buf_init(&xargs);
    if (partition_arguments(arguments, &qargs) < 0) {
        sl_buf_free(&qargs);
        snprintf(err, errlen, "a numeric argument of super stream '%s' is not a number", xname);
        return SP_PRECONDITION_FAILED;
    }
    amqp_tbl_put_bool(&xargs, QM_SUPERSTREAM_ARG, 1);
    qm_exchange_decl xd = {.name = xname,
                           .name_len = xlen,
                           .type = QM_EX_DIRECT,
                           .durable = 1,
                           .arguments = {sl_buf_head(&xargs), sl_buf_unread(&xargs)}};
    qm_exchange *x = NULL;
    uint16_t code = SP_OK;
    sl_err e = qm_exchange_declare(vh, &xd, &x, err, errlen);
    sl_buf_free(&xargs);
    if (e != SL_OK) {
        sl_buf_free(&qargs);
        return SP_INTERNAL_ERROR;
    }
    qm_queue **made = sl_xcalloc(parts->n ? parts->n : 1, sizeof *made);
    size_t n_made = 0;
    for (uint32_t i = 0; i < parts->n && code == SP_OK; i++) {
        sp_str p = parts->v[i];
        char qname[256];
        memcpy(qname, p.p, p.len); /* validate() checked: 1 to 255 octets */
        qname[p.len] = 0;
        qm_queue_decl d = {.name = qname,
                           .name_len = p.len,
                           .durable = 1,
                           .arguments = {sl_buf_head(&qargs), sl_buf_unread(&qargs)}};
        qm_queue *q = NULL;
        int created = 0;
        e = node_queue_new_name(qname, p.len, 0, err, errlen);
        if (e == SL_OK)
            e = qm_queue_declare(vh, &d, &q, &created, err, errlen);
        if (e == SL_OK && created)
            made[n_made++] = q;
        else if (e == SL_OK)
            code = SP_STREAM_ALREADY_EXISTS; /* validate() looked: not reached on one thread */
        else
            code = e == SL_ERR_INTERNAL || e == SL_ERR_IO || e == SL_ERR_NOMEM
                       ? SP_INTERNAL_ERROR
                       : SP_PRECONDITION_FAILED; /* RabbitMQ's validation_failed */
    }
    sl_buf_free(&qargs);
    for (uint32_t i = 0; i < parts->n && code == SP_OK; i++) {
        sl_buf bargs;
        sl_buf_init(&bargs);
        amqp_tbl_put_long(&bargs, QM_SUPERSTREAM_ORDER_ARG, (int64_t)i);
        sp_str k = keys->v[i];
        amqp_bytes key = {k.null ? (const uint8_t *)"" : k.p, k.null ? 0 : k.len};
        e = qm_bind_queue(x, made[i], key, (amqp_bytes){sl_buf_head(&bargs), sl_buf_unread(&bargs)},
                          err, errlen);
        sl_buf_free(&bargs);
        if (e != SL_OK)
            code = SP_INTERNAL_ERROR;
    }
    if (code != SP_OK)
        rollback(x, made, n_made);
    sl_free(made);
    return code;
}

void stream_create_super_stream(stream_conn *c, const sp_cmd *m)
{
    const sp_strs *parts = &m->u.create_super_stream.partitions;
    const sp_strs *keys = &m->u.create_super_stream.binding_keys;
    char xname[256], err[600] = "";
    size_t xlen = 0;
    qm_vhost *vh = conn_vhost(c);
    uint16_t code = SP_OK;
    if (!vh || !correct_name(m->u.create_super_stream.name, xname, &xlen)) {
        snprintf(err, sizeof err, "not a correct name for a super stream");
        code = SP_PRECONDITION_FAILED;
    }
    if (code == SP_OK)
        code = management_permitted(c, str_of(xname, xlen), parts->v, parts->n);
    if (code == SP_OK)
        code = validate(c, vh, xname, xlen, parts, keys, err, sizeof err);
    if (code == SP_OK)
        code = build(vh, xname, xlen, parts, keys, &m->u.create_super_stream.arguments, err,
                     sizeof err);
    if (code == SP_OK)
        sl_info("stream connection %s: user '%s' created super stream '%s' (%u partitions) in "
                "vhost '%s'",
                c->name, c->user, xname, parts->n, c->vhost);
    else if (code != SP_ACCESS_REFUSED)
        sl_warn("stream connection %s: CreateSuperStream '%s' refused: %s", c->name, xname, err);
    stream_reply_durable(c, SP_CREATE_SUPER_STREAM, m->corr, code);
}

/* The partitions' names, copied (deleting frees the queues). *n their count. */
static char **partition_names(qm_exchange *x, size_t *n)
{
    qm_queue **qs = x ? qm_superstream_partitions(x, n) : NULL;
    if (!x)
        *n = 0;
    char **names = sl_xcalloc(*n ? *n : 1, sizeof *names);
    for (size_t i = 0; i < *n; i++)
        names[i] = sl_xstrdup(qs[i]->name);
    sl_free(qs);
    return names;
}

static void names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sl_free(names[i]);
    sl_free(names);
}

void stream_delete_super_stream(stream_conn *c, const sp_cmd *m)
{
    sp_str name = m->u.delete_super_stream.name;
    qm_vhost *vh = conn_vhost(c);
    qm_exchange *x = vh && !name.null ? qm_exchange_find(vh, (const char *)name.p, name.len) : NULL;
    size_t n = 0;
    char **names = partition_names(x, &n);
    sp_str *parts = sl_xcalloc(n ? n : 1, sizeof *parts);
    for (size_t i = 0; i < n; i++)
        parts[i] = str_of(names[i], strlen(names[i]));
    uint16_t code = management_permitted(c, name, parts, n);
    sl_free(parts);
    if (code == SP_OK && !x)
        code = SP_STREAM_DOES_NOT_EXIST;
    if (code == SP_OK) {
        char err[300], xname[256];
        size_t xlen;
        /* RabbitMQ deletes the exchange of the corrected name and only logs a refusal */
        qm_exchange *dx =
            correct_name(name, xname, &xlen) ? qm_exchange_find(vh, xname, xlen) : NULL;
        if (dx && qm_exchange_delete(dx, 0, err, sizeof err) != SL_OK)
            sl_warn("stream connection %s: super stream exchange '%s': %s", c->name, xname, err);
        else if (!dx)
            sl_warn("stream connection %s: super stream '%.*s': no exchange deleted", c->name,
                    (int)name.len, (const char *)name.p);
        for (size_t i = 0; i < n; i++) {
            qm_queue *q = stream_find(c, str_of(names[i], strlen(names[i])));
            uint64_t count = 0;
            if (!q) /* bound twice, or gone meanwhile */
                continue;
            if (qm_queue_delete(q, 0, &count, err, sizeof err) != SL_OK)
                sl_warn("stream connection %s: partition '%s' of super stream '%.*s': %s", c->name,
                        names[i], (int)name.len, (const char *)name.p, err);
        }
        sl_info("stream connection %s: user '%s' deleted super stream '%.*s' (%zu partitions)",
                c->name, c->user, (int)name.len, (const char *)name.p, n);
    }
    names_free(names, n);
    stream_reply_durable(c, SP_DELETE_SUPER_STREAM, m->corr, code);
}

/* Partitions and Route answer a list of stream names. */
static void reply_streams(stream_conn *c, const sp_cmd *m, uint16_t code, qm_queue **qs, size_t n)
{
    sp_str *v = sl_xcalloc(n ? n : 1, sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = str_of(qs[i]->name, strlen(qs[i]->name));
    sp_cmd r = {.key = m->key, .response = 1, .version = 1, .corr = m->corr, .code = code};
    if (m->key == SP_ROUTE)
        r.u.route_resp.streams = (sp_strs){v, (uint32_t)n};
    else
        r.u.partitions_resp.streams = (sp_strs){v, (uint32_t)n};
    stream_conn_send(c, &r);
    sl_free(v);
}

static qm_exchange *super_stream(stream_conn *c, sp_str name)
{
    qm_vhost *vh = conn_vhost(c);
    return vh && !name.null ? qm_exchange_find(vh, (const char *)name.p, name.len) : NULL;
}

void stream_partitions(stream_conn *c, const sp_cmd *m)
{
    qm_exchange *x = super_stream(c, m->u.partitions.super_stream);
    size_t n = 0;
    qm_queue **qs = x ? qm_superstream_partitions(x, &n) : NULL;
    reply_streams(c, m, x ? SP_OK : SP_STREAM_DOES_NOT_EXIST, qs, n);
    sl_free(qs);
}

void stream_route(stream_conn *c, const sp_cmd *m)
{
    qm_exchange *x = super_stream(c, m->u.route.super_stream);
    sp_str k = m->u.route.routing_key;
    size_t n = 0;
    qm_queue **qs =
        x ? qm_superstream_route(x, (amqp_bytes){k.null ? NULL : k.p, k.null ? 0 : k.len}, &n)
          : NULL;
    reply_streams(c, m, x ? SP_OK : SP_STREAM_DOES_NOT_EXIST, qs, n);
    sl_free(qs);
}
