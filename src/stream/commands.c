/* commands.c - a stream connection's requests after Open.
 *
 * Served now: Metadata (this node as the one broker, at its advertised host and port; each
 * stream asked for is STREAM_DOES_NOT_EXIST, leader 0xFFFF, no replicas, until the stream
 * engine exists) and ExchangeCommandVersions (the codec's versions: sp_cmd_versions).
 *
 * Everything that needs the stream engine (issue 47's engine, not built yet) is answered the
 * way RabbitMQ answers for a stream that does not exist, after the same permission check
 * RabbitMQ makes first (ACCESS_REFUSED), so a client sees a clear code and never waits:
 *   Create, CreateSuperStream             configure  -> PRECONDITION_FAILED (cannot be made)
 *   Delete, DeleteSuperStream             configure  -> STREAM_DOES_NOT_EXIST
 *   DeclarePublisher                      write      -> STREAM_DOES_NOT_EXIST
 *   Subscribe, QueryOffset, StreamStats,
 *   QueryPublisherSequence                read       -> STREAM_DOES_NOT_EXIST
 *   StoreOffset                           read       -> no answer (RabbitMQ sends none)
 *   Route, Partitions, ResolveOffsetSpec             -> STREAM_DOES_NOT_EXIST
 *   Publish                                          -> PublishError PUBLISHER_DOES_NOT_EXIST
 *   DeletePublisher                                  -> PUBLISHER_DOES_NOT_EXIST
 *   Unsubscribe, Credit                              -> SUBSCRIPTION_ID_DOES_NOT_EXIST
 * docs/stream-protocol.md keeps the table of what is wired. A command only the server sends
 * (Deliver, PublishConfirm, ...) closes the connection with UNKNOWN_FRAME; answers to
 * commands the server never sent (ConsumerUpdate: no subscription yet) are ignored.
 */
#include "stream/internal.h"

#include <stdio.h>
#include <string.h>

#include "access/access.h"
#include "core/log.h"
#include "core/mem.h"

void stream_reply_code(stream_conn *c, uint16_t key, uint32_t corr, uint16_t code)
{
    sp_cmd r = {.key = key, .response = 1, .version = 1, .corr = corr, .code = code};
    if (key == SP_OPEN)
        r.u.open_resp.has_properties = 0; /* RabbitMQ omits them on a refusal */
    stream_conn_send(c, &r);
}

/* RabbitMQ checks a stream as a queue of that name: SP_OK, or SP_ACCESS_REFUSED (logged). */
static uint16_t check(stream_conn *c, sp_str name, acc_perm perm)
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

static void metadata(stream_conn *c, const sp_cmd *m)
{
    uint32_t n = m->u.metadata.streams.n;
    sp_stream_metadata *st = sl_xcalloc(n ? n : 1, sizeof *st);
    for (uint32_t i = 0; i < n; i++) {
        st[i].name = m->u.metadata.streams.v[i];
        st[i].code = SP_STREAM_DOES_NOT_EXIST;
        st[i].leader = 0xFFFF;
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

/* The commands a client may send, at the versions the codec takes. ResolveOffsetSpec is
 * newer than RabbitMQ 3.13 and is not announced. */
static void command_versions(stream_conn *c, const sp_cmd *m)
{
    sp_command_version v[SP_KEY_MAX];
    uint32_t n = 0;
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

static void publish_error(stream_conn *c, const sp_cmd *m)
{
    uint32_t n = m->u.publish.n;
    if (!n)
        return;
    sp_publishing_error *errs = sl_xmalloc(n * sizeof *errs);
    for (uint32_t i = 0; i < n; i++)
        errs[i] =
            (sp_publishing_error){m->u.publish.msgs[i].publishing_id, SP_PUBLISHER_DOES_NOT_EXIST};
    sp_cmd r = {.key = SP_PUBLISH_ERROR, .version = 1};
    r.u.publish_error.publisher_id = m->u.publish.publisher_id;
    r.u.publish_error.errs = errs;
    r.u.publish_error.n = n;
    stream_conn_send(c, &r);
    sl_free(errs);
}

/* A stream command the engine would serve: the permission first, then "no such stream". */
static void no_stream(stream_conn *c, const sp_cmd *m, sp_str name, acc_perm perm)
{
    uint16_t code = check(c, name, perm);
    if (code == SP_OK)
        code = SP_STREAM_DOES_NOT_EXIST;
    sp_cmd r = {.key = m->key, .response = 1, .version = 1, .corr = m->corr, .code = code};
    stream_conn_send(c, &r); /* the extra fields (sequence, offset, stats) stay zero / empty */
}

static void cannot_create(stream_conn *c, const sp_cmd *m, sp_str name)
{
    uint16_t code = check(c, name, ACC_CONFIGURE);
    if (code == SP_OK) {
        sl_warn("stream connection %s: %s of '%.*s' refused: the stream engine is not built yet",
                c->name, sp_key_name(m->key), (int)name.len, (const char *)name.p);
        code = SP_PRECONDITION_FAILED;
    }
    stream_reply_code(c, m->key, m->corr, code);
}

void stream_open_command(stream_conn *c, const sp_cmd *m)
{
    if (m->response)
        return; /* a ConsumerUpdate answer (no subscription asks yet), a stray Tune answer */
    switch (m->key) {
    case SP_METADATA:
        metadata(c, m);
        return;
    case SP_EXCHANGE_COMMAND_VERSIONS:
        command_versions(c, m);
        return;
    case SP_CREATE:
        cannot_create(c, m, m->u.create.stream);
        return;
    case SP_CREATE_SUPER_STREAM:
        cannot_create(c, m, m->u.create_super_stream.name);
        return;
    case SP_DELETE:
        no_stream(c, m, m->u.delete_stream.stream, ACC_CONFIGURE);
        return;
    case SP_DELETE_SUPER_STREAM:
        no_stream(c, m, m->u.delete_super_stream.name, ACC_CONFIGURE);
        return;
    case SP_DECLARE_PUBLISHER:
        no_stream(c, m, m->u.declare_publisher.stream, ACC_WRITE);
        return;
    case SP_SUBSCRIBE:
        no_stream(c, m, m->u.subscribe.stream, ACC_READ);
        return;
    case SP_QUERY_OFFSET:
        no_stream(c, m, m->u.query_offset.stream, ACC_READ);
        return;
    case SP_QUERY_PUBLISHER_SEQUENCE:
        no_stream(c, m, m->u.query_publisher_sequence.stream, ACC_READ);
        return;
    case SP_STREAM_STATS:
        no_stream(c, m, m->u.stream_stats.stream, ACC_READ);
        return;
    case SP_STORE_OFFSET:
        (void)check(c, m->u.store_offset.stream, ACC_READ); /* logged; no answer either way */
        return;
    case SP_ROUTE:
    case SP_PARTITIONS:
    case SP_RESOLVE_OFFSET_SPEC:
        stream_reply_code(c, m->key, m->corr, SP_STREAM_DOES_NOT_EXIST);
        return;
    case SP_PUBLISH:
        publish_error(c, m);
        return;
    case SP_DELETE_PUBLISHER:
        stream_reply_code(c, m->key, m->corr, SP_PUBLISHER_DOES_NOT_EXIST);
        return;
    case SP_UNSUBSCRIBE:
        stream_reply_code(c, m->key, m->corr, SP_SUBSCRIPTION_ID_DOES_NOT_EXIST);
        return;
    case SP_CREDIT: {
        /* RabbitMQ answers Credit only when it fails */
        sp_cmd r = {.key = SP_CREDIT,
                    .response = 1,
                    .version = 1,
                    .code = SP_SUBSCRIPTION_ID_DOES_NOT_EXIST};
        r.u.credit_resp.subscription_id = m->u.credit.subscription_id;
        stream_conn_send(c, &r);
        return;
    }
    default: {
        char why[120];
        snprintf(why, sizeof why, "unexpected %s from a client", sp_key_name(m->key));
        stream_conn_close(c, SP_UNKNOWN_FRAME, why);
        return;
    }
    }
}
