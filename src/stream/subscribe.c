/* subscribe.c - subscriptions on a stream connection: Subscribe (every offset spec), Credit,
 * Deliver and Unsubscribe, on the stream engine (qm/stream.c, store/stream.h).
 *
 * A subscription is a consumer of the stream queue (so the queue counts it and a deletion
 * cancels it: MetadataUpdate STREAM_NOT_AVAILABLE, as RabbitMQ says it) whose ops have
 * stream_ready instead of deliver_entry: the engine tells it that durable entries lie at or
 * past its offset (qc.st_next), and it reads them itself, a Deliver (v1) per read.
 *
 * Deliver: one read of the log (st_stream_read: one pread of up to the subscription's buffer,
 * 64 KiB, or one entry when bigger) becomes one OSIRIS chunk in the Deliver layout, built by
 * streamproto/chunk.c: chunk id = the first entry's offset, the first entry's timestamp, one
 * simple entry per stored entry, records = entries, epoch 0, no bloom filter, no trailer. The
 * engine's own chunks (one group commit) are not kept whole: a Deliver may begin inside one,
 * which clients take (they number the messages from the chunk id). An entry stored by this
 * door is the AMQP 1.0 message as published; one published over AMQP 0-9-1 goes out as an
 * AMQP 1.0 message of one data section holding its body (its properties are not carried).
 *
 * A new subscription's first Deliver goes STREAM_FIRST_DELIVER_MS after its answer, on a
 * write of its own: RabbitMQ's come apart too (the answer from the reader, chunks by sendfile
 * after an osiris read), and the Node.js client runs a message handler for a Deliver it read
 * with the answer before its subscribe call has returned to the caller (offset.test.ts uses
 * the consumer in its handler).
 *
 * Credit: each Deliver takes one credit, as RabbitMQ counts them (chunks, not messages). A
 * consumer behind reads from disk through its own buffer: what it holds in memory is that
 * buffer and the output waiting for the socket (STREAM_OUT_MAX), whatever the stream's length.
 *
 * Invariants: c->subs[id] is NULL or the subscription with that id, attached to its queue;
 * nothing here flushes or kills the connection (stream_ready runs inside the engine's
 * dispatch, which must not see consumers go): the door flushes at the turn's end.
 */
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "store/stream.h"
#include "stream/internal.h"
#include "streamproto/chunk.h"

#define SUB_READ (64u * 1024)
/* Deliveries one pump writes per subscription before it lets others go (bounded loops). */
#define PUMP_MAX 4096

typedef struct stream_sub {
    qm_consumer qc; /* qc.ctx = this; qc.st_next: the next offset to deliver */
    stream_conn *c;
    uint8_t id;
    uint32_t credit;
    uint64_t start_at; /* loop time of its first Deliver (STREAM_FIRST_DELIVER_MS) */
    st_stream_reader reader;
    uint64_t consumed; /* messages delivered (the HTTP API's view, view.c) */
    char **props;      /* Subscribe's properties, key, value pairs (view.c) */
    size_t n_props;
} stream_sub;

static int sub_can_take(qm_consumer *qc)
{
    stream_sub *s = qc->ctx;
    return s->credit > 0;
}

static void sub_free(stream_sub *s)
{
    stream_props_free(s->props, s->n_props);
    st_stream_reader_free(&s->reader);
    sl_free(s);
}

static void sub_ready(qm_consumer *qc);
static void sub_cancelled(qm_consumer *qc);

static const qm_consumer_ops sub_ops = {
    .can_take = sub_can_take,
    .cancelled = sub_cancelled,
    .stream_ready = sub_ready,
};

/* ---- one Deliver ---- */

typedef struct chunk_ctx {
    stream_conn *c;
    stream_sub *s;
    sp_chunk_builder b;
    size_t fmark;
    int started;
    sl_buf wrap; /* an AMQP 0-9-1 body made an AMQP 1.0 message */
} chunk_ctx;

static int add_entry(void *ctx, uint64_t offset, int64_t ts, const uint8_t *p, size_t len,
                     unsigned flags)
{
    (void)flags; /* a Deliver's chunk is what one read gives, not the engine's own chunk */
    chunk_ctx *k = ctx;
    if (!k->started) {
        k->fmark = sp_frame_begin(&k->c->out, SP_DELIVER, 1);
        sl_buf_put_u8(&k->c->out, k->s->id);
        sp_chunk_begin(&k->b, &k->c->out, SP_CHUNK_USER, ts, 0, offset);
        k->started = 1;
    }
    qm_stream_msg sm;
    if (qm_stream_decode(p, len, &sm) < 0) {
        sp_chunk_add_simple(&k->b, "", 0); /* keeps the numbering: an empty message */
        return 0;
    }
    if (sm.amqp10) {
        sp_chunk_add_simple(&k->b, sm.body, sm.body_len);
        return 0;
    }
    /* AMQP 1.0 data section: descriptor 0x00 0x53 0x75, binary vbin32 */
    sl_buf *w = &k->wrap;
    sl_buf_consume(w, sl_buf_unread(w));
    sl_buf_compact(w);
    uint8_t hdr[3] = {0x00, 0x53, 0x75};
    sl_buf_append(w, hdr, 3);
    sl_buf_put_u8(w, 0xb0);
    sl_buf_put_u32(w, (uint32_t)sm.body_len);
    sl_buf_append(w, sm.body, sm.body_len);
    sp_chunk_add_simple(&k->b, sl_buf_head(w), sl_buf_unread(w));
    return 0;
}

/* 1 when a Deliver was written, 0 when there is nothing to deliver, -1 on a read error. */
static int deliver_chunk(stream_sub *s)
{
    stream_conn *c = s->c;
    st_stream *st = s->qc.queue->stream;
    chunk_ctx k = {.c = c, .s = s};
    sl_buf_init(&k.wrap);
    uint64_t nx;
    char err[512];
    long n =
        st_stream_read(st, &s->reader, s->qc.st_next, 65535, add_entry, &k, &nx, err, sizeof err);
    int rc = 0;
    if (n < 0) {
        sl_error("stream connection %s: subscription %u on '%s': %s", c->name, s->id,
                 s->qc.queue->name, err);
        rc = -1;
    }
    if (k.started) {
        sl_err e = rc < 0 ? SL_ERR_INTERNAL : sp_chunk_end(&k.b);
        if (e == SL_OK)
            e = sp_frame_end(&c->out, k.fmark, 0);
        if (e != SL_OK) {
            c->out.len = c->out.off + k.fmark; /* the partial frame goes */
            rc = -1;
        } else {
            s->qc.st_next = nx;
            s->consumed += (uint64_t)n;
            rc = 1;
        }
    }
    sl_buf_free(&k.wrap);
    return rc;
}

static void pump(stream_sub *s)
{
    stream_conn *c = s->c;
    qm_queue *q = s->qc.queue;
    if (!q || !q->stream || c->state != SC_OPEN)
        return;
    if (s->start_at) {
        uint64_t now = sl_loop_now(c->d->n->loop);
        if (now < s->start_at) {
            if (!c->sub_wait || s->start_at < c->sub_at)
                c->sub_at = s->start_at;
            c->sub_wait = 1;
            return;
        }
        s->start_at = 0;
    }
    for (int i = 0; i < PUMP_MAX && s->credit > 0; i++) {
        if (sl_buf_unread(&c->out) >= STREAM_OUT_MAX) {
            c->sub_wait = 1; /* the timer goes on once the output drained */
            return;
        }
        if (s->qc.st_next >= st_stream_end(q->stream))
            return;
        int rc = deliver_chunk(s);
        if (rc < 0)
            return;
        if (rc == 0) {
            /* nothing read: retention went past the offset, or the end */
            uint64_t first = st_stream_first(q->stream);
            if (s->qc.st_next >= first)
                return;
            s->qc.st_next = first;
            continue;
        }
        s->credit--;
    }
    if (s->credit > 0 && s->qc.st_next < st_stream_end(q->stream))
        c->sub_wait = 1; /* PUMP_MAX reached: the rest from the timer */
}

void stream_subs_pump(stream_conn *c)
{
    c->sub_wait = 0;
    c->sub_at = 0;
    for (int i = 0; i < 256 && c->n_subs; i++)
        if (c->subs[i])
            pump(c->subs[i]);
}

static void sub_ready(qm_consumer *qc)
{
    stream_sub *s = qc->ctx;
    size_t before = sl_buf_unread(&s->c->out);
    pump(s);
    if (sl_buf_unread(&s->c->out) != before || s->c->sub_wait)
        stream_door_dirty(s->c->d, s->c);
}

/* The stream went (deleted): the consumer is already off the queue; tell the client. */
static void sub_cancelled(qm_consumer *qc)
{
    stream_sub *s = qc->ctx;
    stream_conn *c = s->c;
    sp_cmd r = {.key = SP_METADATA_UPDATE, .version = 1};
    r.u.metadata_update.code = SP_STREAM_NOT_AVAILABLE;
    r.u.metadata_update.stream = sp_cstr(qc->queue->name);
    stream_conn_send(c, &r);
    c->subs[s->id] = NULL;
    c->n_subs--;
    sub_free(s);
    stream_door_dirty(c->d, c);
}

/* ---- the commands ---- */

void stream_subscribe(stream_conn *c, const sp_cmd *m)
{
    sp_str name = m->u.subscribe.stream;
    uint8_t id = m->u.subscribe.subscription_id;
    uint16_t code = stream_check(c, name, ACC_READ);
    if (code == SP_OK && c->subs[id])
        code = SP_SUBSCRIPTION_ID_ALREADY_EXISTS;
    qm_queue *q = code == SP_OK ? stream_find(c, name) : NULL;
    if (code == SP_OK && !q)
        code = SP_STREAM_DOES_NOT_EXIST;
    qm_stream_spec spec = {.kind = QM_SO_NEXT};
    if (code == SP_OK) {
        const sp_offset_spec *o = &m->u.subscribe.offset;
        switch (o->type) {
        case SP_OFFSET_FIRST:
            spec.kind = QM_SO_FIRST;
            break;
        case SP_OFFSET_LAST:
            spec.kind = QM_SO_LAST;
            break;
        case SP_OFFSET_NEXT:
            spec.kind = QM_SO_NEXT;
            break;
        case SP_OFFSET_OFFSET:
            spec.kind = QM_SO_OFFSET;
            spec.offset = o->value;
            break;
        case SP_OFFSET_TIMESTAMP:
            spec.kind = QM_SO_TIMESTAMP;
            spec.ts_ms = (int64_t)o->value;
            break;
        default:
            code = SP_PRECONDITION_FAILED;
        }
    }
    stream_sub *s = NULL;
    if (code == SP_OK) {
        s = sl_xcalloc(1, sizeof *s);
        s->c = c;
        s->id = id;
        s->credit = m->u.subscribe.credit;
        s->props = stream_props_copy(&m->u.subscribe.properties, &s->n_props);
        size_t cap = SUB_READ;
        if (c->frame_max && c->frame_max < cap + 256)
            cap = c->frame_max > 1280 ? c->frame_max - 256 : 1024;
        s->reader.cap = cap;
        s->start_at = sl_loop_now(c->d->n->loop) + STREAM_FIRST_DELIVER_MS;
        s->qc.ops = &sub_ops;
        s->qc.ctx = s;
        s->qc.no_ack = 1; /* a stream delivery settles nothing */
        s->qc.st_next = qm_stream_start(q, &spec);
        char err[300];
        sl_err e = qm_consumer_attach(q, &s->qc);
        if (e != SL_OK) {
            sl_warn("stream connection %s: Subscribe refused: %s", c->name, sl_err_get(e)->name);
            (void)err;
            sub_free(s);
            s = NULL;
            code = e == SL_ERR_ACCESS_REFUSED ? SP_ACCESS_REFUSED : SP_PRECONDITION_FAILED;
        }
    }
    if (s) {
        c->subs[id] = s;
        c->n_subs++;
    }
    /* The answer goes before any Deliver (the engine's dispatch runs later in the turn), and
     * on its own write, as RabbitMQ sends it: a client (the Node.js one) that reads both in
     * one read runs the first message handler before its subscribe call has returned. A
     * failed write kills c, which frees s too (stream_subs_free). */
    stream_reply_code(c, SP_SUBSCRIBE, m->corr, code);
    if (s)
        stream_conn_flush(c);
}

void stream_credit(stream_conn *c, const sp_cmd *m)
{
    stream_sub *s = c->subs[m->u.credit.subscription_id];
    if (!s) {
        /* RabbitMQ answers Credit only when it fails */
        sp_cmd r = {.key = SP_CREDIT,
                    .response = 1,
                    .version = 1,
                    .code = SP_SUBSCRIPTION_ID_DOES_NOT_EXIST};
        r.u.credit_resp.subscription_id = m->u.credit.subscription_id;
        stream_conn_send(c, &r);
        return;
    }
    uint64_t cr = (uint64_t)s->credit + m->u.credit.credit;
    s->credit = cr > UINT32_MAX ? UINT32_MAX : (uint32_t)cr;
    pump(s);
}

void stream_unsubscribe(stream_conn *c, const sp_cmd *m)
{
    uint8_t id = m->u.unsubscribe.subscription_id;
    stream_sub *s = c->subs[id];
    if (!s) {
        stream_reply_code(c, SP_UNSUBSCRIBE, m->corr, SP_SUBSCRIPTION_ID_DOES_NOT_EXIST);
        return;
    }
    qm_consumer_detach(&s->qc);
    c->subs[id] = NULL;
    c->n_subs--;
    sub_free(s);
    stream_reply_code(c, SP_UNSUBSCRIBE, m->corr, SP_OK);
}

void stream_subs_free(stream_conn *c)
{
    for (int i = 0; i < 256 && c->n_subs; i++) {
        stream_sub *s = c->subs[i];
        if (!s)
            continue;
        qm_consumer_detach(&s->qc);
        c->subs[i] = NULL;
        c->n_subs--;
        sub_free(s);
    }
    c->sub_wait = 0;
}

/* The subscriptions as the HTTP API lists them (RabbitMQ's stream consumers). */
void stream_subs_view(stream_conn *c, node_subscription_fn fn, void *arg)
{
    for (int i = 0; i < 256; i++) {
        stream_sub *s = c->subs[i];
        if (!s || !s->qc.queue)
            continue;
        const qm_queue *q = s->qc.queue;
        uint64_t end = q->stream ? st_stream_end(q->stream) : s->qc.st_next;
        node_subscription v = {.id = s->id,
                               .stream = q->name,
                               .credits = s->credit,
                               .consumed = s->consumed,
                               .offset = s->qc.st_next,
                               .offset_lag = end > s->qc.st_next ? end - s->qc.st_next : 0,
                               .props = (const char *const *)s->props,
                               .n_props = s->n_props};
        fn(arg, &v);
    }
}
