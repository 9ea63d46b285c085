/* publish.c - publishers on a stream connection: DeclarePublisher, Publish (v1 and v2),
 * PublishConfirm, PublishError, DeletePublisher and QueryPublisherSequence, on the stream
 * engine (qm/stream.c) as RabbitMQ's stream reader serves them.
 *
 * A publisher is an id (u8) of its connection bound to one stream, named and identified by
 * the stream queue's incarnation, so a stream deleted (and made again) under it is never
 * written to: at the end of the turn of a deletion the door sends MetadataUpdate
 * (STREAM_NOT_AVAILABLE) and forgets the publisher, as RabbitMQ does; a Publish before that
 * gets PublishError STREAM_DOES_NOT_EXIST.
 * Messages are AMQP 1.0-encoded bytes, stored as they come (qm_stream_append_filtered, with
 * the filter value of a Publish v2 message, which subscriptions with filters read). A
 * sub-entry batch (no compression, or gzip) is unpacked and its records stored one by one,
 * so offsets count records as RabbitMQ's do; its publishing id is confirmed once. Other
 * compressions (snappy, lz4, zstd) get PRECONDITION_FAILED.
 *
 * Confirms: the entries of one Publish frame are appended to the stream's log, which the node's
 * group commit makes durable (persist/streams.c), as for an AMQP 0-9-1 publish with confirms:
 * the frame's store generation (node_ticket_since) goes with its publishing ids on the
 * connection's list, oldest first, and the PublishConfirm goes out once node_durable covers
 * it (the door's released hook). A generation of 0 (nothing needs the disk: a node without a
 * store, where the engine commits inline) is confirmed at once.
 *
 * Deduplication (a publisher with a reference): a publishing id not above the highest stored
 * for that reference on that stream is not stored again but confirmed, as RabbitMQ's osiris
 * writer does. The highest id is kept per (stream incarnation, reference) in the door's
 * tracking table (tracking.c), in memory only: it does not survive a restart of the node.
 *
 * Invariants: c->pubs[id] is NULL or a publisher with that id; the confirm list's generations
 * do not decrease (node tickets grow), so the released hook stops at the first one not
 * durable yet.
 */
#include <string.h>
#include <zlib.h>

#include "core/buf.h"
#include "core/log.h"
#include "core/mem.h"
#include "stream/internal.h"

typedef struct stream_pub {
    uint8_t id;
    uint8_t has_ref;
    uint64_t incarnation;
    char *stream; /* its name, NUL-terminated */
    size_t stream_len;
    char *ref; /* the reference (has_ref) */
    size_t ref_len;
    uint64_t published, confirmed, errored; /* messages (the HTTP API's view, view.c) */
} stream_pub;

typedef struct stream_confirm {
    struct stream_confirm *next;
    uint64_t gen;
    uint8_t publisher_id;
    uint32_t n;
    uint64_t ids[]; /* n */
} stream_confirm;

static void pub_free(stream_pub *p)
{
    sl_free(p->stream);
    sl_free(p->ref);
    sl_free(p);
}

void stream_publishers_free(stream_conn *c)
{
    for (int i = 0; i < 256; i++)
        if (c->pubs[i]) {
            pub_free(c->pubs[i]);
            c->pubs[i] = NULL;
        }
    c->d->n->stream_figs.publishers -= c->n_pubs;
    c->n_pubs = 0;
    while (c->cf_head) {
        stream_confirm *f = c->cf_head;
        c->cf_head = f->next;
        sl_free(f);
    }
    c->cf_tail = NULL;
}

/* RabbitMQ refuses a reference over 255 octets (its publisher reference is a shortstr). */
#define MAX_REFERENCE 255

void stream_declare_publisher(stream_conn *c, const sp_cmd *m)
{
    sp_str name = m->u.declare_publisher.stream, ref = m->u.declare_publisher.reference;
    uint8_t id = m->u.declare_publisher.publisher_id;
    uint16_t code = stream_check(c, name, ACC_WRITE);
    qm_queue *q = code == SP_OK ? stream_find(c, name) : NULL;
    if (code == SP_OK && !q)
        code = SP_STREAM_DOES_NOT_EXIST;
    int has_ref = !ref.null && ref.len > 0;
    if (code == SP_OK && c->pubs[id]) {
        sl_warn("stream connection %s: publisher id %u is in use", c->name, id);
        code = SP_PRECONDITION_FAILED;
    }
    if (code == SP_OK && has_ref && ref.len > MAX_REFERENCE)
        code = SP_PRECONDITION_FAILED;
    /* RabbitMQ refuses a second publisher of the connection with the same reference on the
     * same stream: their sequences would mix. */
    for (int i = 0; code == SP_OK && has_ref && i < 256; i++) {
        const stream_pub *o = c->pubs[i];
        if (o && o->has_ref && o->incarnation == q->incarnation && o->ref_len == ref.len &&
            !memcmp(o->ref, ref.p, ref.len)) {
            sl_warn("stream connection %s: reference '%.*s' is in use by publisher %u", c->name,
                    (int)ref.len, (const char *)ref.p, o->id);
            code = SP_PRECONDITION_FAILED;
        }
    }
    if (code == SP_OK) {
        stream_pub *p = sl_xcalloc(1, sizeof *p);
        p->id = id;
        p->incarnation = q->incarnation;
        p->stream = sl_xstrndup((const char *)name.p, name.len);
        p->stream_len = name.len;
        if (has_ref) {
            p->has_ref = 1;
            p->ref = sl_xstrndup((const char *)ref.p, ref.len);
            p->ref_len = ref.len;
        }
        c->pubs[id] = p;
        c->n_pubs++;
        c->d->n->stream_figs.publishers++;
    }
    stream_reply_code(c, SP_DECLARE_PUBLISHER, m->corr, code);
}

void stream_delete_publisher(stream_conn *c, const sp_cmd *m)
{
    uint8_t id = m->u.delete_publisher.publisher_id;
    uint16_t code = SP_PUBLISHER_DOES_NOT_EXIST;
    if (c->pubs[id]) {
        pub_free(c->pubs[id]);
        c->pubs[id] = NULL;
        c->n_pubs--;
        c->d->n->stream_figs.publishers--;
        code = SP_OK;
        /* confirms still waiting for the disk go out all the same (RabbitMQ's do too: the
         * client matches them by publisher id and drops them) */
    }
    stream_reply_code(c, SP_DELETE_PUBLISHER, m->corr, code);
}

void stream_query_publisher_sequence(stream_conn *c, const sp_cmd *m)
{
    sp_str name = m->u.query_publisher_sequence.stream;
    uint16_t code = stream_check(c, name, ACC_READ);
    qm_queue *q = code == SP_OK ? stream_find(c, name) : NULL;
    if (code == SP_OK && !q)
        code = SP_STREAM_DOES_NOT_EXIST;
    uint64_t seq = 0;
    if (q)
        (void)stream_track_get(q, STREAM_TRACK_PUBLISHER, m->u.query_publisher_sequence.reference,
                               &seq);
    sp_cmd r = {.key = SP_QUERY_PUBLISHER_SEQUENCE,
                .response = 1,
                .version = 1,
                .corr = m->corr,
                .code = code};
    r.u.query_publisher_sequence_resp.sequence = seq;
    stream_conn_send(c, &r);
}

static void send_errors(stream_conn *c, uint8_t publisher_id, const sp_cmd *m, uint16_t code)
{
    uint32_t n = m->u.publish.n;
    if (!n)
        return;
    if (c->pubs[publisher_id])
        c->pubs[publisher_id]->errored += n;
    sp_publishing_error *errs = sl_xmalloc(n * sizeof *errs);
    for (uint32_t i = 0; i < n; i++)
        errs[i] = (sp_publishing_error){m->u.publish.msgs[i].publishing_id, code};
    sp_cmd r = {.key = SP_PUBLISH_ERROR, .version = 1};
    r.u.publish_error.publisher_id = publisher_id;
    r.u.publish_error.errs = errs;
    r.u.publish_error.n = n;
    stream_conn_send(c, &r);
    c->d->n->stream_figs.errored += n;
    sl_free(errs);
}

static void send_confirm(stream_conn *c, uint8_t publisher_id, const uint64_t *ids, uint32_t n)
{
    if (!n)
        return;
    if (c->pubs[publisher_id])
        c->pubs[publisher_id]->confirmed += n;
    sp_cmd r = {.key = SP_PUBLISH_CONFIRM, .version = 1};
    r.u.publish_confirm.publisher_id = publisher_id;
    r.u.publish_confirm.ids = (uint64_t *)ids;
    r.u.publish_confirm.n = n;
    stream_conn_send(c, &r);
    c->d->n->stream_figs.confirmed += n;
}

/* A sub-entry batch's records, each appended as a message of its own (so offsets count
 * records, as RabbitMQ's do). SP_OK, or the code for the publishing id. */
static uint16_t append_records(qm_queue *q, const uint8_t *p, size_t len, uint16_t records,
                               sp_str filter)
{
    size_t at = 0;
    uint16_t k = 0;
    /* checked whole before anything is stored: a batch goes in whole or not at all */
    for (; at < len && k < records; k++) {
        if (len - at < 4 || (len - at - 4) < sl_get_u32(p + at))
            return SP_PRECONDITION_FAILED;
        at += 4 + (size_t)sl_get_u32(p + at);
    }
    if (at != len || k != records)
        return SP_PRECONDITION_FAILED;
    for (at = 0; at < len;) {
        uint32_t sz = sl_get_u32(p + at);
        uint64_t off;
        if (qm_stream_append_filtered(q, p + at + 4, sz, filter.null ? NULL : filter.p, filter.len,
                                      &off) != SL_OK)
            return SP_INTERNAL_ERROR;
        at += 4 + (size_t)sz;
    }
    return SP_OK;
}

/* A sub-entry batch may not unpack to more than this (a client's gzip bomb). */
#define MAX_BATCH_UNCOMPRESSED (64u << 20)

static uint16_t append_msg(stream_conn *c, qm_queue *q, const sp_published *msg)
{
    if (msg->message.null)
        return SP_PRECONDITION_FAILED;
    /* a v2 message's filter value (null: none; v1 leaves it null too) goes into its entry */
    sp_str f = msg->filter;
    if (!f.p)
        f.null = 1;
    if (!(msg->batch_flags & 0x80)) {
        uint64_t off;
        return qm_stream_append_filtered(q, msg->message.p, msg->message.len, f.null ? NULL : f.p,
                                         f.len, &off) == SL_OK
                   ? SP_OK
                   : SP_INTERNAL_ERROR;
    }
    unsigned compression = (msg->batch_flags >> 4) & 7;
    if (compression == SP_COMPRESSION_NONE)
        return append_records(q, msg->message.p, msg->message.len, msg->records, f);
    if (compression != SP_COMPRESSION_GZIP || msg->uncompressed_len > MAX_BATCH_UNCOMPRESSED) {
        sl_warn("stream connection %s: a sub-entry batch with compression %u of %u octets "
                "refused (gzip up to %u only)",
                c->name, compression, msg->uncompressed_len, MAX_BATCH_UNCOMPRESSED);
        return SP_PRECONDITION_FAILED;
    }
    uint8_t *out = sl_xmalloc(msg->uncompressed_len ? msg->uncompressed_len : 1);
    z_stream z;
    memset(&z, 0, sizeof z);
    uint16_t code = SP_PRECONDITION_FAILED;
    if (inflateInit2(&z, 16 + MAX_WBITS) == Z_OK) {
        z.next_in = (Bytef *)msg->message.p;
        z.avail_in = msg->message.len;
        z.next_out = out;
        z.avail_out = msg->uncompressed_len;
        int rc = inflate(&z, Z_FINISH);
        if (rc == Z_STREAM_END && z.total_out == msg->uncompressed_len)
            code = append_records(q, out, msg->uncompressed_len, msg->records, f);
        inflateEnd(&z);
    }
    if (code == SP_PRECONDITION_FAILED)
        sl_warn("stream connection %s: a sub-entry batch that does not unpack to its %u "
                "records refused",
                c->name, msg->records);
    sl_free(out);
    return code;
}

void stream_publish(stream_conn *c, const sp_cmd *m)
{
    uint8_t id = m->u.publish.publisher_id;
    stream_pub *p = c->pubs[id];
    if (!p) {
        send_errors(c, id, m, SP_PUBLISHER_DOES_NOT_EXIST);
        return;
    }
    sp_str name = {(const uint8_t *)p->stream, (uint32_t)p->stream_len, 0};
    /* the permission as RabbitMQ checks it on each publish (a revoked one stops it) */
    if (stream_check(c, name, ACC_WRITE) != SP_OK) {
        send_errors(c, id, m, SP_ACCESS_REFUSED);
        return;
    }
    qm_queue *q = stream_find(c, name);
    if (!q || q->incarnation != p->incarnation) {
        send_errors(c, id, m, SP_STREAM_DOES_NOT_EXIST);
        return;
    }
    uint32_t n = m->u.publish.n;
    if (!n)
        return;
    c->d->n->stream_figs.published += n;
    sp_str ref = {(const uint8_t *)p->ref, (uint32_t)p->ref_len, 0};
    uint64_t top = 0;
    int tracked = p->has_ref && stream_track_get(q, STREAM_TRACK_PUBLISHER, ref, &top);
    int moved = 0, dup = 0;
    uint64_t mark = node_mark(c->d->n);
    stream_confirm *f = sl_xmalloc(sizeof *f + n * sizeof f->ids[0]);
    f->next = NULL;
    f->publisher_id = id;
    f->n = 0;
    uint32_t n_err = 0;
    sp_publishing_error *errs = NULL;
    for (uint32_t i = 0; i < n; i++) {
        const sp_published *msg = &m->u.publish.msgs[i];
        if (!tracked || msg->publishing_id > top) {
            uint16_t code = append_msg(c, q, msg);
            if (code != SP_OK) {
                if (!errs)
                    errs = sl_xmalloc(n * sizeof *errs);
                errs[n_err++] = (sp_publishing_error){msg->publishing_id, code};
                continue;
            }
            if (p->has_ref) {
                top = msg->publishing_id;
                tracked = moved = 1;
            }
        } else
            dup = 1;
        f->ids[f->n++] = msg->publishing_id; /* a duplicate is confirmed, not stored again */
    }
    if (moved)
        stream_track_set(q, STREAM_TRACK_PUBLISHER, ref, top);
    p->published += n;
    p->errored += n_err;
    if (n_err) {
        sp_cmd r = {.key = SP_PUBLISH_ERROR, .version = 1};
        r.u.publish_error.publisher_id = id;
        r.u.publish_error.errs = errs;
        r.u.publish_error.n = n_err;
        stream_conn_send(c, &r);
        c->d->n->stream_figs.errored += n_err;
        sl_free(errs);
    }
    uint64_t gen = node_ticket_since(c->d->n, mark);
    /* A duplicate's original may still be on its way to the disk (sent over another
     * connection): its confirm waits for everything appended so far. */
    if (dup && node_ticket(c->d->n) > gen)
        gen = node_ticket(c->d->n);
    if (!c->cf_head && (gen == 0 || gen <= node_durable(c->d->n))) {
        send_confirm(c, id, f->ids, f->n);
        sl_free(f);
        return;
    }
    if (c->cf_tail && gen < c->cf_tail->gen)
        gen = c->cf_tail->gen; /* keep the list in order: confirms go out in publish order */
    f->gen = gen;
    if (c->cf_tail)
        c->cf_tail->next = f;
    else
        c->cf_head = f;
    c->cf_tail = f;
}

void stream_confirms_released(stream_conn *c)
{
    uint64_t durable = node_durable(c->d->n);
    /* bounded by the list, which only shrinks here */
    while (c->cf_head && c->cf_head->gen <= durable) {
        stream_confirm *f = c->cf_head;
        c->cf_head = f->next;
        if (!c->cf_head)
            c->cf_tail = NULL;
        send_confirm(c, f->publisher_id, f->ids, f->n);
        sl_free(f);
    }
}

void stream_publishers_check(stream_conn *c)
{
    for (int i = 0; i < 256 && c->n_pubs; i++) {
        stream_pub *p = c->pubs[i];
        if (!p)
            continue;
        sp_str name = {(const uint8_t *)p->stream, (uint32_t)p->stream_len, 0};
        qm_queue *q = stream_find(c, name);
        if (q && q->incarnation == p->incarnation)
            continue;
        /* RabbitMQ tells the client and forgets the publisher: its next Publish gets
         * PUBLISHER_DOES_NOT_EXIST */
        int later = 0; /* one MetadataUpdate per stream: the last of its publishers says it */
        for (int j = i + 1; j < 256 && !later; j++)
            later = c->pubs[j] && c->pubs[j]->incarnation == p->incarnation;
        if (!later) {
            sp_cmd r = {.key = SP_METADATA_UPDATE, .version = 1};
            r.u.metadata_update.code = SP_STREAM_NOT_AVAILABLE;
            r.u.metadata_update.stream = name;
            stream_conn_send(c, &r);
        }
        pub_free(p);
        c->pubs[i] = NULL;
        c->n_pubs--;
        c->d->n->stream_figs.publishers--;
    }
}

/* The publishers as the HTTP API lists them (RabbitMQ's stream publishers). */
void stream_publishers_view(stream_conn *c, node_publisher_fn fn, void *arg)
{
    for (int i = 0; i < 256; i++) {
        const stream_pub *p = c->pubs[i];
        if (!p)
            continue;
        node_publisher v = {.id = p->id,
                            .stream = p->stream,
                            .reference = p->has_ref ? p->ref : "",
                            .published = p->published,
                            .confirmed = p->confirmed,
                            .errored = p->errored};
        fn(arg, &v);
    }
}
