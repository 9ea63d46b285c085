/* commands.c - a stream connection's requests after Open.
 *
 * Served, on the stream engine of AMQP 0-9-1 streams (qm/stream.c: a stream is a durable
 * queue of type stream, the same one both doors see):
 *   Create      configure permission (ACCESS_REFUSED); a queue of that name, of any type:
 *               STREAM_ALREADY_EXISTS (RabbitMQ's reference_already_exists); the vhost's
 *               max-queues and reserved names; then a durable x-queue-type stream queue with
 *               Create's arguments as RabbitMQ's stream manager maps them (max-length-bytes,
 *               max-age, stream-max-segment-size-bytes, initial-cluster-size,
 *               queue-leader-locator; others ignored); a refused value: PRECONDITION_FAILED;
 *   Delete      configure permission; a stream (not another queue): STREAM_DOES_NOT_EXIST;
 *   Metadata    this node as the one broker, at its advertised host and port; each stream OK
 *               with this node as leader and no replicas, or STREAM_DOES_NOT_EXIST;
 *   ExchangeCommandVersions   the codec's versions (sp_cmd_versions); a client that takes
 *               Deliver v2 gets it (c->deliver_v2), as RabbitMQ's reader chooses.
 *
 *   Publishers (publish.c), subscriptions (subscribe.c), offsets and StreamStats (tracking.c),
 *   super streams: CreateSuperStream, DeleteSuperStream, Partitions, Route (superstream.c).
 *
 * Not wired yet: ResolveOffsetSpec (newer than RabbitMQ 3.13, not announced) ->
 * STREAM_DOES_NOT_EXIST.
 * docs/stream-protocol.md keeps the table of what is wired. A command only the server sends
 * (Deliver, PublishConfirm, ...) closes the connection with UNKNOWN_FRAME; a ConsumerUpdate
 * answer goes to its subscription (subscribe.c), other answers are ignored.
 */
#include "stream/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access/access.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/mem.h"
#include "node/rules.h"
#include "qm/qm.h"

void stream_reply_code(stream_conn *c, uint16_t key, uint32_t corr, uint16_t code)
{
    sp_cmd r = {.key = key, .response = 1, .version = 1, .corr = corr, .code = code};
    if (key == SP_OPEN)
        r.u.open_resp.has_properties = 0; /* RabbitMQ omits them on a refusal */
    stream_conn_send(c, &r);
}

void stream_reply_durable(stream_conn *c, uint16_t key, uint32_t corr, uint16_t code)
{
    uint64_t gen = node_ticket(c->d->n);
    if (gen == 0 || gen <= node_durable(c->d->n)) {
        stream_reply_code(c, key, corr, code);
        return;
    }
    /* reading(c) stops while it waits: one answer held at most */
    c->dur_wait = 1;
    c->dur_key = key;
    c->dur_corr = corr;
    c->dur_code = code;
    c->dur_gen = gen;
}

void stream_reply_released(stream_conn *c)
{
    if (!c->dur_wait || c->dur_gen > node_durable(c->d->n))
        return;
    c->dur_wait = 0;
    if (c->state != SC_OPEN)
        return; /* closing meanwhile: no more answers */
    stream_reply_code(c, c->dur_key, c->dur_corr, c->dur_code);
    stream_conn_rearm(c); /* frames held in the feeder go on from the timer */
}

/* RabbitMQ checks a stream as a queue of that name: SP_OK, or SP_ACCESS_REFUSED (logged). */
uint16_t stream_check(stream_conn *c, sp_str name, acc_perm perm)
{
    char err[600];
    if (name.null)
        return SP_PRECONDITION_FAILED;
    sl_err e = acc_check(c->d->n->acc, c->user, c->vhost, ACC_QUEUE, (const char *)name.p, name.len,
                         perm, err, sizeof err);
    if (e == SL_OK)
        return SP_OK;
    sl_warn("stream connection %s: %s", c->name, err);
    return SP_ACCESS_REFUSED;
}

/* The stream of that name in the connection's vhost: a queue of type stream, or NULL. */
qm_queue *stream_find(stream_conn *c, sp_str name)
{
    if (name.null)
        return NULL;
    qm_vhost *vh = qm_vhost_find(c->d->n->qm, c->vhost, strlen(c->vhost));
    qm_queue *q = vh ? qm_queue_find(vh, (const char *)name.p, name.len) : NULL;
    return q && !q->is_subqueue && q->args.stream && q->stream ? q : NULL;
}

static void metadata(stream_conn *c, const sp_cmd *m)
{
    uint32_t n = m->u.metadata.streams.n;
    sp_stream_metadata *st = sl_xcalloc(n ? n : 1, sizeof *st);
    for (uint32_t i = 0; i < n; i++) {
        st[i].name = m->u.metadata.streams.v[i];
        /* one node holds every stream: it leads each, with no replicas (streams are not
         * replicated in a cluster yet: docs/streams.md) */
        int found = stream_find(c, st[i].name) != NULL;
        st[i].code = found ? SP_OK : SP_STREAM_DOES_NOT_EXIST;
        st[i].leader = found ? 0 : 0xFFFF;
    }
    /* RabbitMQ lists only the brokers its answer's streams name; this node is listed always,
     * so a client learns where to connect (clients take extra brokers). */
    sp_broker self = {.reference = 0,
                      .host = sp_cstr(c->d->adv_host),
                      .port = (uint32_t)(c->tls ? c->d->adv_tls_port : c->d->adv_port)};
    sp_cmd r = {.key = SP_METADATA, .response = 1, .version = 1, .corr = m->corr};
    r.u.metadata_resp.brokers = &self;
    r.u.metadata_resp.n_brokers = 1;
    r.u.metadata_resp.streams = st;
    r.u.metadata_resp.n_streams = n;
    stream_conn_send(c, &r);
    sl_free(st);
}

/* ---- Create and Delete ---- */

static void table_key(sl_buf *t, const char *key)
{
    sl_buf_put_u8(t, (uint8_t)strlen(key));
    sl_buf_append(t, key, strlen(key));
}

/* Create's arguments as the x- arguments of a stream queue, as RabbitMQ's stream manager
 * maps them (numbers as long, the rest as strings); keys it does not know are ignored. 0, or
 * -1 when a number is not one. CreateSuperStream's partitions take them too. */
int stream_create_arguments(const sp_map *a, sl_buf *t)
{
    static const struct {
        const char *key, *arg;
        int number;
    } known[] = {
        {"max-length-bytes", "x-max-length-bytes", 1},
        {"max-age", "x-max-age", 0},
        {"stream-max-segment-size-bytes", "x-stream-max-segment-size-bytes", 1},
        {"initial-cluster-size", "x-initial-cluster-size", 1},
        {"queue-leader-locator", "x-queue-leader-locator", 0},
    };
    table_key(t, "x-queue-type");
    sl_buf_put_u8(t, 'S');
    sl_buf_put_u32(t, 6);
    sl_buf_append(t, "stream", 6);
    for (uint32_t i = 0; i < a->n; i++) {
        const sp_kv *kv = &a->v[i];
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
            if (kv->key.null || kv->key.len != strlen(known[k].key) ||
                memcmp(kv->key.p, known[k].key, kv->key.len))
                continue;
            const char *v = kv->value.null ? "" : (const char *)kv->value.p;
            size_t vlen = kv->value.null ? 0 : kv->value.len;
            table_key(t, known[k].arg);
            if (known[k].number) {
                char num[24];
                char *end;
                if (vlen == 0 || vlen >= sizeof num)
                    return -1;
                memcpy(num, v, vlen);
                num[vlen] = 0;
                long long x = strtoll(num, &end, 10);
                if (*end)
                    return -1;
                sl_buf_put_u8(t, 'l');
                sl_buf_put_u64(t, (uint64_t)x);
            } else {
                sl_buf_put_u8(t, 'S');
                sl_buf_put_u32(t, (uint32_t)vlen);
                sl_buf_append(t, v, vlen);
            }
        }
    }
    return 0;
}

static uint16_t code_for(sl_err e)
{
    switch (e) {
    case SL_OK:
        return SP_OK;
    case SL_ERR_ACCESS_REFUSED:
        return SP_ACCESS_REFUSED;
    case SL_ERR_PRECONDITION:
    case SL_ERR_RESOURCE_LOCKED:
    case SL_ERR_INVALID_PARAMETER:
        return SP_PRECONDITION_FAILED;
    default:
        return SP_INTERNAL_ERROR;
    }
}

/* Create: a durable stream queue, as RabbitMQ's stream manager declares it. */
static void create(stream_conn *c, const sp_cmd *m)
{
    sp_str name = m->u.create.stream;
    uint16_t code = stream_check(c, name, ACC_CONFIGURE);
    char err[600] = "";
    qm_vhost *vh = qm_vhost_find(c->d->n->qm, c->vhost, strlen(c->vhost));
    if (code == SP_OK && (!vh || !name.len || name.len > 255))
        code = SP_PRECONDITION_FAILED;
    if (code == SP_OK && qm_queue_find(vh, (const char *)name.p, name.len))
        code = SP_STREAM_ALREADY_EXISTS; /* of any type, as RabbitMQ's reference_already_exists */
    char qname[256];
    if (code == SP_OK) {
        memcpy(qname, name.p, name.len);
        qname[name.len] = 0;
        sl_err e = node_queue_new_name(qname, name.len, 0, err, sizeof err);
        if (e == SL_OK)
            e = node_queue_limit(c->d->n->acc, vh, qname, err, sizeof err);
        code = code_for(e);
    }
    sl_buf args;
    sl_buf_init(&args);
    if (code == SP_OK && stream_create_arguments(&m->u.create.arguments, &args) < 0) {
        snprintf(err, sizeof err, "a numeric argument of stream '%s' is not a number", qname);
        code = SP_PRECONDITION_FAILED;
    }
    if (code == SP_OK) {
        qm_queue_decl d = {.name = qname,
                           .name_len = name.len,
                           .durable = 1,
                           .arguments = {sl_buf_head(&args), sl_buf_unread(&args)}};
        qm_queue *q = NULL;
        int created = 0;
        sl_err e = qm_queue_declare(vh, &d, &q, &created, err, sizeof err);
        code = code_for(e);
        if (e == SL_OK)
            sl_info("stream connection %s: user '%s' created stream '%s' in vhost '%s'", c->name,
                    c->user, qname, vh->name);
    }
    sl_buf_free(&args);
    if (code != SP_OK && err[0])
        sl_warn("stream connection %s: Create refused: %s", c->name, err);
    stream_reply_durable(c, SP_CREATE, m->corr, code);
}

/* Delete: only a stream (another queue of the name is not one: STREAM_DOES_NOT_EXIST). */
static void delete_stream(stream_conn *c, const sp_cmd *m)
{
    sp_str name = m->u.delete_stream.stream;
    uint16_t code = stream_check(c, name, ACC_CONFIGURE);
    qm_queue *q = code == SP_OK ? stream_find(c, name) : NULL;
    if (code == SP_OK && !q)
        code = SP_STREAM_DOES_NOT_EXIST;
    if (q) {
        char err[300];
        uint64_t count = 0;
        sl_err e = qm_queue_delete(q, 0, &count, err, sizeof err);
        code = code_for(e);
        if (e != SL_OK)
            sl_warn("stream connection %s: Delete refused: %s", c->name, err);
        else
            sl_info("stream connection %s: user '%s' deleted stream '%.*s'", c->name, c->user,
                    (int)name.len, (const char *)name.p);
    }
    stream_reply_durable(c, SP_DELETE, m->corr, code);
}

/* The commands a client may send, at the versions the codec takes. ResolveOffsetSpec is
 * newer than RabbitMQ 3.13 and is not announced. */
static void command_versions(stream_conn *c, const sp_cmd *m)
{
    sp_command_version v[SP_KEY_MAX];
    uint32_t n = 0;
    /* Deliver v2 (with the committed chunk id) to a client that takes it, as RabbitMQ's
     * reader chooses: the Node.js client applies its post-filter to v2 Delivers only */
    for (uint32_t i = 0; i < m->u.exchange_command_versions.n; i++)
        if (m->u.exchange_command_versions.v[i].key == SP_DELIVER &&
            m->u.exchange_command_versions.v[i].max_version >= 2)
            c->deliver_v2 = 1;
    for (uint16_t k = 1; k < SP_RESOLVE_OFFSET_SPEC; k++) {
        uint16_t lo, hi;
        if (sp_cmd_versions(k, &lo, &hi))
            v[n++] = (sp_command_version){k, lo, hi};
    }
    sp_cmd r = {.key = SP_EXCHANGE_COMMAND_VERSIONS,
                .response = 1,
                .version = 1,
                .corr = m->corr,
                .code = SP_OK};
    r.u.exchange_command_versions_resp.v = v;
    r.u.exchange_command_versions_resp.n = n;
    stream_conn_send(c, &r);
}

void stream_open_command(stream_conn *c, const sp_cmd *m)
{
    if (m->response) {
        if (m->key == SP_CONSUMER_UPDATE)
            stream_consumer_update_answer(c, m); /* subscribe.c */
        return;                                  /* a stray Tune answer */
    }
    switch (m->key) {
    case SP_METADATA:
        metadata(c, m);
        return;
    case SP_EXCHANGE_COMMAND_VERSIONS:
        command_versions(c, m);
        return;
    case SP_CREATE:
        create(c, m);
        return;
    case SP_CREATE_SUPER_STREAM:
        stream_create_super_stream(c, m);
        return;
    case SP_DELETE:
        delete_stream(c, m);
        return;
    case SP_DELETE_SUPER_STREAM:
        stream_delete_super_stream(c, m);
        return;
    case SP_DECLARE_PUBLISHER:
        stream_declare_publisher(c, m);
        return;
    case SP_PUBLISH:
        stream_publish(c, m);
        return;
    case SP_DELETE_PUBLISHER:
        stream_delete_publisher(c, m);
        return;
    case SP_QUERY_PUBLISHER_SEQUENCE:
        stream_query_publisher_sequence(c, m);
        return;
    case SP_SUBSCRIBE:
        stream_subscribe(c, m);
        return;
    case SP_CREDIT:
        stream_credit(c, m);
        return;
    case SP_UNSUBSCRIBE:
        stream_unsubscribe(c, m);
        return;
    case SP_STORE_OFFSET:
        stream_store_offset(c, m);
        return;
    case SP_QUERY_OFFSET:
        stream_query_offset(c, m);
        return;
    case SP_STREAM_STATS:
        stream_stream_stats(c, m);
        return;
    case SP_ROUTE:
        stream_route(c, m);
        return;
    case SP_PARTITIONS:
        stream_partitions(c, m);
        return;
    case SP_RESOLVE_OFFSET_SPEC:
        stream_reply_code(c, m->key, m->corr, SP_STREAM_DOES_NOT_EXIST);
        return;
    default: {
        char why[120];
        snprintf(why, sizeof why, "unexpected %s from a client", sp_key_name(m->key));
        stream_conn_close(c, SP_UNKNOWN_FRAME, why);
        return;
    }
    }
}
