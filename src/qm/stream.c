/* stream.c - stream queues in the model (issue 47): a queue whose messages go to an
 * append-only log (store/stream.h) instead of its ready rings, read by every consumer from its
 * own offset.
 *
 * An entry's payload is the message as a door needs it to deliver it again:
 *     format:u8 (QM_STREAM_FMT_091), exchange_len:u8, exchange, routing_key_len:u8,
 *     routing_key, props_len:u32 (LE), props, body
 * or, for a message the stream protocol's door received (an AMQP 1.0 message, stored as it
 * came, with exchange "" and the stream's name as routing key):
 *     format:u8 (QM_STREAM_FMT_AMQP10), 0:u8, routing_key_len:u8, routing_key, message
 * or, for one published with a filter value (Publish v2, RabbitMQ 3.13's filtering):
 *     format:u8 (QM_STREAM_FMT_AMQP10F), 0:u8, routing_key_len:u8, routing_key,
 *     filter_len:u8, filter (its first 255 octets), message
 * or, for an AMQP 0-9-1 message with the string header x-stream-filter-value:
 *     format:u8 (QM_STREAM_FMT_091F), exchange_len:u8, exchange, routing_key_len:u8,
 *     routing_key, filter_len:u8, filter (its first 255 octets), props_len:u32, props, body
 * so the filter value lives in the log with its entry and survives a restart; a reader
 * skips what matches none of its values without looking at the message.
 * A door decodes the formats it knows. The entry's timestamp is the wall clock at the append.
 *
 * Invariants: a stream queue never has ready, locked or paged positions (n_ready stays 0);
 * consumers have no unsettled positions: a delivery settles nothing, and each consumer's
 * st_next only grows (or jumps to the first offset kept when retention went past it). Every
 * stream queue is on the node's streams list while it exists. Single active consumer groups
 * (qm_stream_sac_join): at most one member of a group is ACTIVE or STEPPING, and only an
 * ACTIVE one is dispatched to; a group with members and none of them ACTIVE or STEPPING
 * lasts only inside sac_evaluate. With the store's hooks the
 * appends are made durable by the node's group commit (persist.c) and qm_streams_committed
 * runs after each; without them each append is committed inline.
 *
 * Tracking by reference (qm.h, qm_stream_track): a stream's stored consumer offsets and
 * publisher sequences live here, below the doors, so they go with the queue and the store
 * makes them durable (persist/streams.c); the stream protocol's door only translates.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "amqp/method.h"
#include "amqp/table.h"
#include "core/clock.h"
#include "core/le.h"
#include "core/log.h"
#include "core/map.h"
#include "core/mem.h"
#include "qm/qm_internal.h"
#include "qm/superstream.h"
#include "store/stream.h"

/* A consumer's read buffer: what one read of the log takes (a chunk), handed out a credit at a
 * time from memory. Bounded by the consumers, not by the stream. */
#define CONSUMER_READ (64u * 1024)

void qm_stream_reader_free(qm_consumer *c)
{
    if (!c->st_reader)
        return;
    st_stream_reader_free(c->st_reader);
    sl_free(c->st_reader);
    c->st_reader = NULL;
}

sl_err qm_stream_open(qm_node *n, uint64_t incarnation, const qm_queue_args *a,
                      struct st_stream **out, char *err, size_t errlen)
{
    if (!n->stream_dir) {
        snprintf(err, errlen, "streams need a data directory");
        return SL_ERR_PRECONDITION;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%016" PRIx64, n->stream_dir, incarnation);
    st_stream_options o = {
        .segment_size = a->max_segment_bytes > 0 ? (uint64_t)a->max_segment_bytes : 0,
        .max_bytes = a->max_length_bytes > 0 ? (uint64_t)a->max_length_bytes : 0,
        .max_age_ms = a->max_age_ms,
    };
    char e[512];
    *out = st_stream_open(dir, &o, e, sizeof e);
    if (!*out) {
        sl_error("stream: %s", e);
        snprintf(err, errlen, "cannot open the stream's log: %s", e);
        return SL_ERR_INTERNAL;
    }
    return SL_OK;
}

void qm_stream_link(qm_queue *q)
{
    qm_node *n = qm_queue_node(q);
    q->st_prev = NULL;
    q->st_next = n->streams;
    if (n->streams)
        n->streams->st_prev = q;
    n->streams = q;
}

/* ------------------------------------------------------------------------------------------
 * Tracking by reference (qm.h): a map per stream of kind + reference -> entry, and the node's
 * list of entries changed since the store wrote them.
 */

static size_t track_key(uint8_t *key, int kind, const uint8_t *ref, size_t len)
{
    key[0] = (uint8_t)kind;
    memcpy(key + 1, ref, len);
    return 1 + len;
}

static int track_ref_ok(int kind, const uint8_t *ref, size_t len)
{
    return (kind == QM_TRACK_OFFSET || kind == QM_TRACK_PUBLISHER) && ref && len &&
           len <= QM_TRACK_REF_MAX;
}

qm_stream_track *qm_stream_track_get(const qm_queue *q, int kind, const uint8_t *ref, size_t len)
{
    if (!q->st_tracking || !track_ref_ok(kind, ref, len))
        return NULL;
    uint8_t key[1 + QM_TRACK_REF_MAX];
    return sl_map_get(q->st_tracking, key, track_key(key, kind, ref, len));
}

static qm_stream_track *track_slot(qm_queue *q, int kind, const uint8_t *ref, size_t len)
{
    qm_stream_track *t = qm_stream_track_get(q, kind, ref, len);
    if (t)
        return t;
    if (!q->st_tracking)
        q->st_tracking = sl_map_new();
    t = sl_xcalloc(1, sizeof *t);
    t->queue = q;
    t->kind = (uint8_t)kind;
    t->ref_len = (uint8_t)len;
    memcpy(t->ref, ref, len);
    uint8_t key[1 + QM_TRACK_REF_MAX];
    sl_map_put(q->st_tracking, key, track_key(key, kind, ref, len), t);
    return t;
}

sl_err qm_stream_track_set(qm_queue *q, int kind, const uint8_t *ref, size_t len, uint64_t value)
{
    if (!q->stream || !track_ref_ok(kind, ref, len))
        return SL_ERR_PRECONDITION;
    qm_stream_track *t = track_slot(q, kind, ref, len);
    t->value = value;
    /* a publisher's id stands for the entries appended so far: recovery checks they are there */
    t->cover = kind == QM_TRACK_PUBLISHER ? st_stream_next(q->stream) : 0;
    if (!t->dirty) {
        qm_node *n = qm_queue_node(q);
        t->dirty = 1;
        t->dirty_next = n->track_dirty;
        n->track_dirty = t;
    }
    if (qm_persist && qm_persist->stream_tracked)
        qm_persist->stream_tracked(qm_persist_ctx, t);
    return SL_OK;
}

qm_stream_track *qm_stream_track_restore(qm_queue *q, int kind, const uint8_t *ref, size_t len,
                                         uint64_t value, uint64_t cover)
{
    if (!q->stream || !track_ref_ok(kind, ref, len))
        return NULL;
    qm_stream_track *t = track_slot(q, kind, ref, len);
    t->value = value;
    t->cover = cover;
    return t;
}

qm_stream_track *qm_stream_track_take_dirty(qm_node *n)
{
    qm_stream_track *t = n->track_dirty;
    n->track_dirty = NULL;
    return t;
}

int qm_stream_track_next(const qm_queue *q, size_t *it, qm_stream_track **t)
{
    const char *k;
    size_t kl;
    void *v;
    if (!q->st_tracking || !sl_map_next(q->st_tracking, it, &k, &kl, &v))
        return 0;
    *t = v;
    return 1;
}

/* The stream goes (deleted: its entries' records are dead for the store too). */
static void track_free_all(qm_queue *q, int deleted)
{
    if (!q->st_tracking)
        return;
    qm_node *n = qm_queue_node(q);
    for (qm_stream_track **pp = &n->track_dirty; *pp;) {
        if ((*pp)->queue == q)
            *pp = (*pp)->dirty_next;
        else
            pp = &(*pp)->dirty_next;
    }
    size_t it = 0;
    qm_stream_track *t;
    while (qm_stream_track_next(q, &it, &t)) {
        if (deleted && qm_persist && qm_persist->stream_untracked)
            qm_persist->stream_untracked(qm_persist_ctx, t);
        sl_free(t);
    }
    sl_map_free(q->st_tracking);
    q->st_tracking = NULL;
}

void qm_stream_close(qm_queue *q, int deleted)
{
    if (!q->stream)
        return;
    qm_node *n = qm_queue_node(q);
    if (q->st_prev)
        q->st_prev->st_next = q->st_next;
    else if (n->streams == q)
        n->streams = q->st_next;
    if (q->st_next)
        q->st_next->st_prev = q->st_prev;
    q->st_next = q->st_prev = NULL;
    track_free_all(q, deleted);
    st_stream *s = q->stream;
    q->stream = NULL;
    if (qm_persist && qm_persist->stream_closing)
        qm_persist->stream_closing(qm_persist_ctx, s, deleted);
    else if (deleted)
        st_stream_destroy(s);
    else
        st_stream_close(s);
}

/* The filter value of a 0-9-1 message: its header x-stream-filter-value when a string (a
 * longstr, as RabbitMQ reads it: mc:x_header gives {utf8, V}); else none. */
static int filter_value_091(const qm_message *m, amqp_bytes *out)
{
    amqp_basic_props bp;
    amqp_value v;
    if (!m->props_len || amqp_props_decode(qm_msg_props(m), m->props_len, &bp) != 0 ||
        !(bp.flags & AMQP_P_HEADERS) || !amqp_table_get(bp.headers, "x-stream-filter-value", &v) ||
        v.tag != 'S')
        return 0;
    *out = v.v.s;
    return 1;
}

sl_err qm_stream_append(qm_queue *q, const qm_message *m)
{
    amqp_bytes x = qm_msg_exchange(m), rk = qm_msg_routing_key(m), f = {NULL, 0};
    uint8_t xl = (uint8_t)(x.len > 255 ? 255 : x.len), rl = (uint8_t)(rk.len > 255 ? 255 : rk.len);
    int filtered = filter_value_091(m, &f);
    uint8_t fl = (uint8_t)(f.len > 255 ? 255 : f.len);
    uint8_t pl[4], fmt = filtered ? QM_STREAM_FMT_091F : QM_STREAM_FMT_091;
    sl_put_le32(pl, (uint32_t)m->props_len);
    st_stream_iov v[10] = {
        {&fmt, 1},
        {&xl, 1},
        {x.p, xl},
        {&rl, 1},
        {rk.p, rl},
        {&fl, 1},
        {f.p, fl},
        {pl, 4},
        {qm_msg_props(m), m->props_len},
        {qm_msg_body(m), m->body_len},
    };
    if (!filtered) /* the filter's length and value are not in the entry */
        memmove(&v[5], &v[7], 3 * sizeof v[0]);
    st_stream_appendv(q->stream, (int64_t)sl_wall_ms(), v, filtered ? 10 : 8);
    q->stat_published++;
    if (qm_persist && qm_persist->stream_appended)
        QM_PERSIST(stream_appended, q,
                   ST_STREAM_ENTRY_HDR + 7 + (size_t)xl + rl + (filtered ? 1u + fl : 0u) +
                       m->props_len + m->body_len);
    else if (st_stream_commit(q->stream) == 0)
        qm_queue_schedule_dispatch(q);
    else
        return SL_ERR_INTERNAL;
    return SL_OK;
}

sl_err qm_stream_append_amqp10(qm_queue *q, const uint8_t *msg, size_t len, uint64_t *offset)
{
    return qm_stream_append_filtered(q, msg, len, NULL, 0, offset);
}

sl_err qm_stream_append_filtered(qm_queue *q, const uint8_t *msg, size_t len, const uint8_t *filter,
                                 size_t filter_len, uint64_t *offset)
{
    /* format, exchange "" (length 0), the routing key's length, [the filter value's] */
    size_t nl = strlen(q->name) > 255 ? 255 : strlen(q->name);
    size_t fl = filter_len > 255 ? 255 : filter_len;
    uint8_t hdr[3] = {filter ? QM_STREAM_FMT_AMQP10F : QM_STREAM_FMT_AMQP10, 0, (uint8_t)nl};
    uint8_t flb = (uint8_t)fl;
    st_stream_iov v[5] = {{hdr, 3}, {q->name, nl}, {&flb, 1}, {filter, fl}, {msg, len}};
    int nv = 5;
    if (!filter) {
        v[2] = v[4];
        nv = 3;
    }
    *offset = st_stream_appendv(q->stream, (int64_t)sl_wall_ms(), v, nv);
    q->stat_published++;
    if (qm_persist && qm_persist->stream_appended)
        QM_PERSIST(stream_appended, q, ST_STREAM_ENTRY_HDR + 3 + nl + (filter ? 1 + fl : 0) + len);
    else if (st_stream_commit(q->stream) == 0)
        qm_queue_schedule_dispatch(q);
    else
        return SL_ERR_INTERNAL;
    return SL_OK;
}

int qm_stream_decode(const uint8_t *p, size_t len, qm_stream_msg *out)
{
    size_t at = 0;
    out->amqp10 = 0;
    out->filter = NULL;
    out->filter_len = 0;
    if (len < 3 || p[0] > QM_STREAM_FMT_091F)
        return -1;
    int filtered = p[0] == QM_STREAM_FMT_AMQP10F || p[0] == QM_STREAM_FMT_091F;
    int amqp10 = p[0] == QM_STREAM_FMT_AMQP10 || p[0] == QM_STREAM_FMT_AMQP10F;
    at++;
    size_t xl = p[at++];
    if (len - at < xl + 1)
        return -1;
    out->exchange = (amqp_bytes){p + at, xl};
    at += xl;
    size_t rl = p[at++];
    if (len - at < rl)
        return -1;
    out->routing_key = (amqp_bytes){p + at, rl};
    at += rl;
    if (filtered) {
        if (len - at < 1 || len - at - 1 < p[at])
            return -1;
        out->filter = p + at + 1;
        out->filter_len = p[at];
        at += 1 + (size_t)p[at];
    }
    if (!amqp10 && len - at < 4)
        return -1;
    if (amqp10) { /* the message as the stream protocol's client sent it */
        out->amqp10 = 1;
        out->props = p + at;
        out->props_len = 0;
        out->body = p + at;
        out->body_len = len - at;
        return 0;
    }
    size_t pl = sl_le32(p + at);
    at += 4;
    if (len - at < pl)
        return -1;
    out->props = p + at;
    out->props_len = pl;
    at += pl;
    out->body = p + at;
    out->body_len = len - at;
    return 0;
}

uint64_t qm_stream_start(qm_queue *q, const qm_stream_spec *spec)
{
    st_stream *s = q->stream;
    uint64_t first = st_stream_first(s), end = st_stream_end(s);
    switch (spec->kind) {
    case QM_SO_FIRST:
        return first;
    case QM_SO_LAST: {
        uint64_t l = st_stream_last_chunk(s);
        return l < first ? first : l;
    }
    case QM_SO_OFFSET:
        /* below the first kept: from the first; past the end: from the next one written */
        return spec->offset < first ? first : spec->offset > end ? end : spec->offset;
    case QM_SO_TIMESTAMP:
        return st_stream_offset_at(s, spec->ts_ms);
    case QM_SO_NEXT:
    default:
        return end;
    }
}

typedef struct deliver_ctx {
    qm_queue *q;
    qm_consumer *c;
    uint64_t delivered;
} deliver_ctx;

/* Reads a filtered consumer may make in one dispatch that deliver nothing (all filtered out)
 * before it stops and goes on from the tick (q->st_more): a filter that matches little of a
 * long stream skips it a bounded slice (up to 256 x 64 KiB) at a time, not in one turn. */
#define STREAM_SKIP_READS 256

static int deliver_one(void *ctx, uint64_t offset, int64_t ts, const uint8_t *p, size_t len,
                       unsigned flags)
{
    (void)flags;
    deliver_ctx *d = ctx;
    if (!qm_stream_filter_entry(d->c->st_filter, p, len)) {
        d->c->st_next = offset + 1; /* filtered out: no delivery, no credit taken */
        return 0;
    }
    d->c->ops->deliver_entry(d->c, offset, ts, p, len);
    d->delivered++;
    d->c->st_next = offset + 1;
    d->q->stat_delivered++;
    return !d->c->ops->can_take(d->c);
}

/* ---- filtering (qm.h: qm_stream_filter) ---- */

qm_stream_filter *qm_stream_filter_new(void)
{
    return sl_xcalloc(1, sizeof(qm_stream_filter));
}

int qm_stream_filter_add(qm_stream_filter *f, const uint8_t *v, size_t len)
{
    if (f->n == QM_STREAM_FILTERS_MAX)
        return -1;
    size_t l = len > 255 ? 255 : len; /* entries keep a value's first 255 octets too */
    f->values[f->n] = sl_xmalloc(l ? l : 1);
    if (l)
        memcpy(f->values[f->n], v, l);
    f->lens[f->n++] = (uint8_t)l;
    return 0;
}

void qm_stream_filter_free(qm_stream_filter *f)
{
    if (!f)
        return;
    for (uint32_t i = 0; i < f->n; i++)
        sl_free(f->values[i]);
    sl_free(f);
}

int qm_stream_filter_wants(const qm_stream_filter *f, const uint8_t *value, size_t len)
{
    if (!f)
        return 1;
    if (!value)
        return f->match_unfiltered;
    for (uint32_t i = 0; i < f->n; i++)
        if (f->lens[i] == len && !memcmp(f->values[i], value, len))
            return 1;
    return 0;
}

int qm_stream_filter_entry(const qm_stream_filter *f, const uint8_t *p, size_t len)
{
    qm_stream_msg sm;
    if (!f || qm_stream_decode(p, len, &sm) < 0)
        return 1;
    return qm_stream_filter_wants(f, sm.filter, sm.filter_len);
}

/* ---- single active consumer (qm.h: qm_stream_sac_join) ---- */

/* A group is (vhost, stream, name), as RabbitMQ keys them: the queue is the first two. */
static int same_group(const qm_consumer *a, const qm_consumer *b)
{
    return a->sac_name && b->sac_name && !strcmp(a->sac_name, b->sac_name);
}

/* The group's members, in attach order (q->consumers is: stream consumers share one
 * priority), that joined (sac_state set); *active: the active or stepping-down one. */
static size_t group_members(qm_queue *q, const qm_consumer *c, qm_consumer **nth, size_t k,
                            qm_consumer **active)
{
    size_t n = 0;
    *nth = NULL;
    if (active)
        *active = NULL;
    for (qm_consumer *o = q->consumers; o; o = o->next) {
        if (o->sac_state == QM_SAC_NONE || !same_group(o, c))
            continue;
        if (active && (o->sac_state == QM_SAC_ACTIVE || o->sac_state == QM_SAC_STEPPING))
            *active = o;
        if (n++ == k)
            *nth = o;
    }
    return n;
}

/* The member a super stream's partition belongs to: RabbitMQ's evaluate_active_consumer,
 * index rem members, in the order they joined. */
static qm_consumer *partition_owner(qm_queue *q, const qm_consumer *c, int32_t index)
{
    qm_consumer *o, *act;
    size_t n = group_members(q, c, &o, SIZE_MAX, &act);
    if (!n)
        return NULL;
    group_members(q, c, &o, (size_t)index % n, NULL);
    return o;
}

static void activate(qm_consumer *c)
{
    c->sac_state = QM_SAC_ACTIVE;
    if (c->ops->sac_update)
        c->ops->sac_update(c, 1);
    qm_queue_schedule_dispatch(c->queue);
}

/* After a member came or went: who should be active now. */
static void sac_evaluate(qm_queue *q, qm_consumer *any)
{
    qm_consumer *first, *act;
    size_t n = group_members(q, any, &first, 0, &act);
    if (!n)
        return;
    /* the group's partition index is its oldest member's (RabbitMQ: the group's creator's) */
    if (first->sac_partition < 0) {
        if (!act)
            activate(first); /* the oldest waiting one, as RabbitMQ takes the list's head */
        return;
    }
    qm_consumer *owner = partition_owner(q, any, first->sac_partition);
    if (!act)
        activate(owner);
    else if (act != owner && act->sac_state == QM_SAC_ACTIVE) {
        /* the partition moves: the holder steps down first, then the owner gets it */
        act->sac_state = QM_SAC_STEPPING;
        if (act->ops->sac_update)
            act->ops->sac_update(act, 0);
        else
            qm_stream_sac_stepped_down(act);
    }
}

void qm_stream_sac_join(qm_consumer *c)
{
    qm_queue *q = c->queue;
    if (!q || !c->sac_name)
        return;
    c->sac_state = QM_SAC_WAITING;
    sac_evaluate(q, c);
}

void qm_stream_sac_stepped_down(qm_consumer *c)
{
    qm_queue *q = c->queue;
    if (!q || c->sac_state != QM_SAC_STEPPING)
        return;
    c->sac_state = QM_SAC_WAITING;
    sac_evaluate(q, c);
}

void qm_stream_sac_leave(qm_queue *q, qm_consumer *c)
{
    if (c->sac_state == QM_SAC_NONE)
        return;
    c->sac_state = QM_SAC_NONE;
    /* c is off q's list: any remaining member of its group names the group */
    for (qm_consumer *o = q->consumers; o; o = o->next)
        if (o->sac_state != QM_SAC_NONE && same_group(o, c)) {
            sac_evaluate(q, o);
            return;
        }
}

int32_t qm_stream_partition_index(qm_queue *q, const char *super, size_t len)
{
    /* RabbitMQ's rabbit_stream_manager:partition_index: the binding's order (an integer or a
     * string of one, qm_superstream_order: the client suite's HTTP helper sends "0"); without
     * one the digits after the stream name's last '-'; else (or with no binding) -1 */
    for (qm_binding *b = q->inbound; b; b = b->dnext) {
        if (!b->source || strlen(b->source->name) != len || memcmp(b->source->name, super, len))
            continue;
        int64_t order;
        if (qm_superstream_order(b, &order))
            return order >= 0 && order <= INT32_MAX ? (int32_t)order : -1;
        const char *dash = strrchr(q->name, '-');
        size_t n = dash ? strlen(dash + 1) : 0;
        if (!n || n > 9 || strspn(dash + 1, "0123456789") != n)
            return -1;
        return (int32_t)strtol(dash + 1, NULL, 10);
    }
    return -1;
}

void qm_stream_dispatch(qm_queue *q)
{
    st_stream *s = q->stream;
    uint64_t end = st_stream_end(s);
    for (qm_consumer *c = q->consumers; c; c = c->next) {
        if (c->sac_name && c->sac_state != QM_SAC_ACTIVE)
            continue; /* a group's waiting member gets nothing */
        if (c->ops->stream_ready) {
            if (c->st_next < end)
                c->ops->stream_ready(c);
            continue;
        }
        if (!c->ops->deliver_entry)
            continue;
        if (!c->st_reader && c->st_next < end) {
            c->st_reader = sl_xcalloc(1, sizeof *c->st_reader);
            c->st_reader->cap = CONSUMER_READ;
        }
        /* Bounded: each pass hands at least one entry (st_next grows) or stops; a consumer
         * takes at most its credit (prefetch) and its connection's output room. */
        int skipped = 0;
        for (int k = 0; k < 1000000 && c->st_next < end && c->ops->can_take(c); k++) {
            deliver_ctx d = {q, c, 0};
            uint64_t nx;
            char err[512];
            long n = st_stream_read(s, c->st_reader, c->st_next, SIZE_MAX, deliver_one, &d, &nx,
                                    err, sizeof err);
            if (n < 0) {
                sl_error("stream queue '%s': %s", q->name, err);
                break;
            }
            if (n > 0 && !d.delivered && ++skipped >= STREAM_SKIP_READS) {
                q->st_more = 1;
                qm_queue_wake_at(q, sl_now_ms());
                break;
            }
            if (n == 0) {
                /* behind the first offset kept: retention went past it */
                uint64_t first = st_stream_first(s);
                if (c->st_next < first)
                    c->st_next = first;
                else
                    break;
            }
        }
    }
}

int qm_stream_info_get(const qm_queue *q, qm_stream_info *out)
{
    memset(out, 0, sizeof *out);
    if (!q->stream)
        return -1;
    st_stream_stats st;
    st_stream_get_stats(q->stream, &st);
    out->first = st_stream_first(q->stream);
    out->end = st_stream_end(q->stream);
    out->last = out->end ? out->end - 1 : 0;
    out->segments = st.segments;
    out->bytes = st.bytes;
    out->entries = st.entries;
    return 0;
}

const char *qm_queue_type_name(const qm_queue *q)
{
    return q->args.quorum ? "quorum" : q->args.stream ? "stream" : "classic";
}

size_t qm_queue_type_figures(const qm_queue *q, qm_figure out[QM_FIGURES_MAX])
{
    size_t n = 0;
    qm_stream_info si;
    if (q->args.quorum && q->args.has_delivery_limit)
        out[n++] = (qm_figure){"delivery_limit", q->args.delivery_limit};
    if (qm_stream_info_get(q, &si) < 0)
        return n;
    out[n++] = (qm_figure){"messages", (int64_t)si.entries};
    out[n++] = (qm_figure){"messages_ready", (int64_t)si.entries};
    out[n++] = (qm_figure){"segments", (int64_t)si.segments};
    out[n++] = (qm_figure){"stream_bytes", (int64_t)si.bytes};
    out[n++] = (qm_figure){"first_offset", (int64_t)si.first};
    if (si.end > si.first)
        out[n++] = (qm_figure){"committed_offset", (int64_t)si.last};
    return n;
}

void qm_streams_committed(qm_node *n)
{
    int64_t now = (int64_t)sl_wall_ms();
    for (qm_queue *q = n->streams; q; q = q->st_next) {
        st_stream_retain(q->stream, now);
        if (q->consumers)
            qm_queue_schedule_dispatch(q);
    }
}
