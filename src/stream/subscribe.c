/* subscribe.c - subscriptions on a stream connection: Subscribe (every offset spec, single
 * active consumer, filters), Credit, Deliver, ConsumerUpdate and Unsubscribe, on the stream engine
 * (qm/stream.c, store/stream.h).
 *
 * A subscription is a consumer of the stream queue (so the queue counts it and a deletion
 * cancels it: MetadataUpdate STREAM_NOT_AVAILABLE, as RabbitMQ says it) whose ops have
 * stream_ready instead of deliver_entry: the engine tells it that durable entries lie at or
 * past its offset (qc.st_next), and it reads them itself, a Deliver per read.
 *
 * Deliver: one read of the log (st_stream_read: one pread of up to the subscription's buffer,
 * 64 KiB, or one entry when bigger) becomes one OSIRIS chunk in the Deliver layout, built by
 * streamproto/chunk.c: chunk id = the first entry's offset, the first entry's timestamp, one
 * simple entry per stored entry, records = entries, epoch 0, no bloom filter, no trailer. The
 * engine's own chunks (one group commit) are not kept whole: a Deliver may begin inside one,
 * which clients take (they number the messages from the chunk id). An entry stored by this
 * door is the AMQP 1.0 message as published; one published over AMQP 0-9-1 goes out as an
 * AMQP 1.0 message with its properties and headers, as RabbitMQ converts it (amqp10_from_091).
 *
 * A new subscription's first Deliver goes STREAM_FIRST_DELIVER_MS after its answer, on a
 * write of its own: RabbitMQ's come apart too (the answer from the reader, chunks by sendfile
 * after an osiris read), and the Node.js client runs a message handler for a Deliver it read
 * with the answer before its subscribe call has returned to the caller (offset.test.ts uses
 * the consumer in its handler).
 *
 * Single active consumer (Subscribe's single-active-consumer=true, name=, super-stream=): the
 * subscription joins its group in the engine (qm_stream_sac_join, which holds the rule: who is
 * active, who steps down) after its answer went; the engine's sac_update becomes a
 * ConsumerUpdate request (corr from the connection's counter); the client's answer gives the
 * offset delivery starts at (stream_consumer_update_answer), or ends a step-down. A member
 * delivers only while the engine has it ACTIVE and no ConsumerUpdate of it is unanswered.
 *
 * Filtering (filter.N=, match-unfiltered=): entries keep their Publish v2 filter value
 * (qm_stream_append_filtered). With filters a first pass over the read (scan_entry) finds the
 * run of entries from st_next that the subscription all wants or all does not: an unwanted
 * run is skipped without a Deliver or a credit, a wanted one is one Deliver (exact per entry;
 * RabbitMQ's Bloom filter per chunk lets false positives through, which clients post-filter).
 * Deliver v2 (the committed chunk id) goes to a client whose ExchangeCommandVersions took it.
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

#include "amqp/amqp10.h"
#include "core/log.h"
#include "core/mem.h"
#include "store/stream.h"
#include "stream/internal.h"
#include "streamproto/chunk.h"

#define SUB_READ (64u * 1024)
/* Deliveries one pump writes per subscription before it lets others go (bounded loops). */
#define PUMP_MAX 4096

/* A subscription's filter values (filter.N) are at most this many. */
#define SUB_FILTERS_MAX QM_STREAM_FILTERS_MAX

typedef struct stream_sub {
    qm_consumer qc; /* qc.ctx = this; qc.st_next: the next offset to deliver */
    stream_conn *c;
    uint8_t id;
    uint32_t credit;
    uint64_t start_at; /* loop time of its first Deliver (STREAM_FIRST_DELIVER_MS) */
    st_stream_reader reader;
    /* single active consumer: the group's name (qc.sac_name points here), and the
     * ConsumerUpdate whose answer is awaited (nothing is delivered meanwhile) */
    char *sac_name;
    uint8_t cu_pending, cu_active;
    uint32_t cu_corr;
    uint64_t cu_sent; /* loop time it went (stream.request_timeout runs from there) */
    /* filtering: the engine's rule (qm_stream_filter, owned; NULL: none) */
    qm_stream_filter *filter;
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
    qm_stream_filter_free(s->filter);
    sl_free(s->sac_name);
    sl_free(s);
}

static void sub_ready(qm_consumer *qc);
static void sub_cancelled(qm_consumer *qc);
static void sub_sac_update(qm_consumer *qc, int active);

static const qm_consumer_ops sub_ops = {
    .can_take = sub_can_take,
    .cancelled = sub_cancelled,
    .stream_ready = sub_ready,
    .sac_update = sub_sac_update,
};

/* ---- one Deliver ---- */

typedef struct chunk_ctx {
    stream_conn *c;
    stream_sub *s;
    sp_chunk_builder b;
    size_t fmark;
    int started;
    uint64_t entries; /* in this Deliver's chunk */
    sl_buf wrap;      /* an AMQP 0-9-1 body made an AMQP 1.0 message */
} chunk_ctx;

static int add_entry(void *ctx, uint64_t offset, int64_t ts, const uint8_t *p, size_t len,
                     unsigned flags)
{
    (void)flags; /* a Deliver's chunk is what one read gives, not the engine's own chunk */
    chunk_ctx *k = ctx;
    if (!k->started) {
        k->fmark = sp_frame_begin(&k->c->out, SP_DELIVER, k->c->deliver_v2 ? 2 : 1);
        sl_buf_put_u8(&k->c->out, k->s->id);
        if (k->c->deliver_v2) /* v2: the stream's committed chunk id */
            sl_buf_put_u64(&k->c->out, st_stream_last_chunk(k->s->qc.queue->stream));
        sp_chunk_begin(&k->b, &k->c->out, SP_CHUNK_USER, ts, 0, offset);
        k->started = 1;
    }
    k->entries++;
    qm_stream_msg sm;
    if (qm_stream_decode(p, len, &sm) < 0) {
        sp_chunk_add_simple(&k->b, "", 0); /* keeps the numbering: an empty message */
        return 0;
    }
    if (sm.amqp10) {
        sp_chunk_add_simple(&k->b, sm.body, sm.body_len);
        return 0;
    }
    /* published over AMQP 0-9-1: its properties and body as an AMQP 1.0 message */
    sl_buf *w = &k->wrap;
    sl_buf_consume(w, sl_buf_unread(w));
    sl_buf_compact(w);
    if (amqp10_from_091(sm.props, sm.props_len, sm.body, sm.body_len, sm.exchange, sm.routing_key,
                        w) < 0) {
        /* the model took these properties: a store fault; the body alone, as a data section */
        sl_buf_consume(w, sl_buf_unread(w));
        sl_buf_compact(w);
        amqp10_from_091(NULL, 0, sm.body, sm.body_len, sm.exchange, sm.routing_key, w);
    }
    sp_chunk_add_simple(&k->b, sl_buf_head(w), sl_buf_unread(w));
    return 0;
}

/* Server-side filtering's first pass: how many entries from the first handed share its
 * wantedness (sub_wants). */
typedef struct scan_ctx {
    stream_sub *s;
    int want;
    uint64_t from, n;
} scan_ctx;

static int scan_entry(void *ctx, uint64_t offset, int64_t ts, const uint8_t *p, size_t len,
                      unsigned flags)
{
    (void)ts;
    (void)flags;
    scan_ctx *k = ctx;
    qm_stream_msg sm;
    /* what does not decode is delivered (as an empty message): its offset stays numbered */
    int w = qm_stream_decode(p, len, &sm) < 0
                ? 1
                : qm_stream_filter_wants(k->s->filter, sm.filter, sm.filter_len);
    if (k->n == 0) {
        k->want = w;
        k->from = offset;
    } else if (w != k->want)
        return 1; /* handed but not counted: the next run starts there */
    k->n++;
    return 0;
}

/* 1 when a Deliver was written, 2 when what was read matched none of the subscription's
 * filters (skipped: no Deliver, no credit), 0 when there is nothing to deliver, -1 on a read
 * error. */
static int deliver_chunk(stream_sub *s)
{
    stream_conn *c = s->c;
    st_stream *st = s->qc.queue->stream;
    uint64_t nx;
    char err[512];
    size_t max = 65535;
    if (s->filter) {
        /* Server-side filtering: the run of entries from st_next that the filter all wants,
         * or all does not, found first (the reader keeps the bytes: the second read parses
         * them from memory). An unwanted run is skipped; a wanted one is one Deliver. */
        scan_ctx sc = {.s = s};
        long r = st_stream_read(st, &s->reader, s->qc.st_next, max, scan_entry, &sc, &nx, err,
                                sizeof err);
        if (r < 0) {
            sl_error("stream connection %s: subscription %u on '%s': %s", c->name, s->id,
                     s->qc.queue->name, err);
            return -1;
        }
        if (!sc.n)
            return 0;
        if (!sc.want) {
            s->qc.st_next = sc.from + sc.n;
            return 2;
        }
        max = sc.n;
    }
    chunk_ctx k = {.c = c, .s = s};
    sl_buf_init(&k.wrap);
    long n =
        st_stream_read(st, &s->reader, s->qc.st_next, max, add_entry, &k, &nx, err, sizeof err);
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
            c->d->n->stream_figs.delivered += k.entries;
            s->consumed += k.entries;
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
    /* a group's member delivers only once active and its ConsumerUpdate answered */
    if (s->qc.sac_name && (s->qc.sac_state != QM_SAC_ACTIVE || s->cu_pending))
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
        if (rc == 2)
            continue; /* filtered out: the next chunk (bounded by PUMP_MAX) */
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
    c->d->n->stream_figs.consumers--;
    sub_free(s);
    stream_door_dirty(c->d, c);
}

/* ---- the commands ---- */

/* A client's offset specification as the engine takes it: 0, or -1 for an unknown type. */
static int spec_of(const sp_offset_spec *o, qm_stream_spec *spec)
{
    switch (o->type) {
    case SP_OFFSET_FIRST:
        spec->kind = QM_SO_FIRST;
        return 0;
    case SP_OFFSET_LAST:
        spec->kind = QM_SO_LAST;
        return 0;
    case SP_OFFSET_NEXT:
        spec->kind = QM_SO_NEXT;
        return 0;
    case SP_OFFSET_OFFSET:
        spec->kind = QM_SO_OFFSET;
        spec->offset = o->value;
        return 0;
    case SP_OFFSET_TIMESTAMP:
        spec->kind = QM_SO_TIMESTAMP;
        spec->ts_ms = (int64_t)o->value;
        return 0;
    default:
        return -1;
    }
}

static int str_is(sp_str s, const char *lit)
{
    size_t n = strlen(lit);
    return !s.null && s.len == n && !memcmp(s.p, lit, n);
}

/* What Subscribe's properties ask for, as RabbitMQ 3.13's reader reads them. */
typedef struct sub_props {
    int sac;      /* single-active-consumer=true */
    sp_str name;  /* name= (the group's, and the tracking reference) */
    sp_str super; /* super-stream= */
    sp_str filters[SUB_FILTERS_MAX];
    uint32_t n_filters; /* filter.N= */
    int match_unfiltered;
} sub_props;

static uint16_t parse_props(stream_conn *c, const sp_cmd *m, sub_props *p)
{
    if (!m->u.subscribe.has_properties)
        return SP_OK;
    const sp_map *pm = &m->u.subscribe.properties;
    for (uint32_t i = 0; i < pm->n; i++) {
        sp_str k = pm->v[i].key, v = pm->v[i].value;
        if (str_is(k, "single-active-consumer"))
            p->sac = str_is(v, "true");
        else if (str_is(k, "name"))
            p->name = v;
        else if (str_is(k, "super-stream"))
            p->super = v;
        else if (str_is(k, "match-unfiltered"))
            p->match_unfiltered = str_is(v, "true");
        else if (!k.null && k.len > 7 && !memcmp(k.p, "filter.", 7) && !v.null) {
            if (p->n_filters == SUB_FILTERS_MAX) {
                sl_warn("stream connection %s: Subscribe with more than %d filter values "
                        "refused",
                        c->name, SUB_FILTERS_MAX);
                return SP_PRECONDITION_FAILED;
            }
            p->filters[p->n_filters++] = v;
        }
    }
    if (p->sac && (p->name.null || !p->name.len)) {
        /* RabbitMQ: a single active consumer needs its group's name */
        sl_warn("stream connection %s: Subscribe with single-active-consumer and no name "
                "refused",
                c->name);
        return SP_PRECONDITION_FAILED;
    }
    return SP_OK;
}

/* The engine made s its group's active member (active 1), or asks it to step down (0):
 * ConsumerUpdate, a request the client answers (stream_consumer_update_answer). */
static void sub_sac_update(qm_consumer *qc, int active)
{
    stream_sub *s = qc->ctx;
    stream_conn *c = s->c;
    if (c->state == SC_DEAD || c->state == SC_LINGER)
        return; /* going: its detach hands the group on */
    s->cu_pending = 1;
    s->cu_active = (uint8_t)active;
    s->cu_corr = ++c->next_corr;
    s->cu_sent = sl_loop_now(c->d->n->loop);
    sp_cmd r = {.key = SP_CONSUMER_UPDATE, .version = 1, .corr = s->cu_corr};
    r.u.consumer_update.subscription_id = s->id;
    r.u.consumer_update.active = (uint8_t)active;
    stream_conn_send(c, &r);
    stream_door_dirty(c->d, c);
    stream_conn_rearm(c); /* its timeout (stream_requests_expire) */
}

uint64_t stream_requests_due(const stream_conn *c)
{
    uint64_t t = c->d->n->cfg->stream_request_timeout_ms, due = 0;
    for (int i = 0; i < 256 && c->n_subs; i++) {
        const stream_sub *s = c->subs[i];
        if (s && s->cu_pending && (!due || s->cu_sent + t < due))
            due = s->cu_sent + t;
    }
    return due;
}

int stream_requests_expire(stream_conn *c, uint64_t now)
{
    uint64_t due = stream_requests_due(c);
    if (!due || now < due)
        return 0;
    /* RabbitMQ's reader: "Forcing stream connection closing: request to client timed out",
     * the socket closed with no Close frame. Its subscriptions go at once (not when the
     * socket is gone): each group it was in has its next member made active now. */
    sl_warn("stream connection %s: a ConsumerUpdate unanswered for %u ms (stream.request_timeout)",
            c->name, c->d->n->cfg->stream_request_timeout_ms);
    stream_conn_linger(c, "request to client timed out");
    stream_subs_free(c);
    return 1;
}

void stream_consumer_update_answer(stream_conn *c, const sp_cmd *m)
{
    stream_sub *s = NULL;
    for (int i = 0; i < 256 && !s; i++)
        if (c->subs[i] && c->subs[i]->cu_pending && c->subs[i]->cu_corr == m->corr)
            s = c->subs[i];
    if (!s)
        return; /* an answer to a request superseded, or of a subscription gone */
    s->cu_pending = 0;
    if (!s->cu_active) {
        qm_stream_sac_stepped_down(&s->qc);
        return;
    }
    /* Delivery starts where the client says (RabbitMQ's reader does the same); an answer
     * without one (NONE, or an error code) keeps the subscription's own offset. */
    qm_stream_spec spec = {.kind = QM_SO_NEXT};
    if (m->code == SP_OK && s->qc.queue && s->qc.queue->stream &&
        m->u.consumer_update_resp.offset.type != SP_OFFSET_NONE &&
        spec_of(&m->u.consumer_update_resp.offset, &spec) == 0)
        s->qc.st_next = qm_stream_start(s->qc.queue, &spec);
    s->start_at = 0;
    pump(s);
}

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
    if (code == SP_OK && spec_of(&m->u.subscribe.offset, &spec) < 0)
        code = SP_PRECONDITION_FAILED;
    sub_props props = {0};
    if (code == SP_OK)
        code = parse_props(c, m, &props);
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
        if (props.n_filters) {
            s->filter = qm_stream_filter_new();
            for (uint32_t i = 0; i < props.n_filters; i++)
                qm_stream_filter_add(s->filter, props.filters[i].p, props.filters[i].len);
            s->filter->match_unfiltered = (uint8_t)props.match_unfiltered;
            s->qc.st_filter = s->filter;
        }
        if (props.sac) {
            s->sac_name = sl_xmalloc(props.name.len + 1);
            memcpy(s->sac_name, props.name.p, props.name.len);
            s->sac_name[props.name.len] = 0;
            s->qc.sac_name = s->sac_name;
            s->qc.sac_partition =
                props.super.null || !props.super.p
                    ? -1
                    : qm_stream_partition_index(q, (const char *)props.super.p, props.super.len);
        }
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
        c->d->n->stream_figs.consumers++;
    }
    /* The answer goes before any Deliver (the engine's dispatch runs later in the turn), and
     * on its own write, as RabbitMQ sends it: a client (the Node.js one) that reads both in
     * one read runs the first message handler before its subscribe call has returned. A
     * failed write kills c, which frees s too (stream_subs_free). */
    stream_reply_code(c, SP_SUBSCRIBE, m->corr, code);
    if (s)
        stream_conn_flush(c);
    /* A group's member joins after its answer went: the ConsumerUpdate that makes it active
     * comes after it, as RabbitMQ's coordinator sends it. */
    if (s && c->state == SC_OPEN && c->subs[id] == s && s->sac_name)
        qm_stream_sac_join(&s->qc);
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
    c->d->n->stream_figs.consumers--;
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
        c->d->n->stream_figs.consumers--;
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
                               .n_props = s->n_props,
                               .qc = &s->qc};
        fn(arg, &v);
    }
}
