/* streams.c - stream queues at the AMQP 0-9-1 door, as RabbitMQ 3.10-3.13 serves them
 * (issue 47): what a stream refuses, the consumer argument x-stream-offset, and deliveries read
 * from the stream's log with their x-stream-offset header.
 *
 * A stream delivery settles nothing: it is tracked on the channel like any delivery (so its
 * tag and the prefetch window work as usual) but with the sentinel position broker_stream_pos,
 * and an ack, nack or reject of it, requeue or not, only gives its consumer the credit back
 * (RabbitMQ: "all settle reasons will give credit"). Nothing is ever redelivered.
 *
 * Filtering (x-stream-filter, x-stream-match-unfiltered): this door only translates the
 * consumer arguments into the engine's qm_stream_filter (qm/stream.c holds the rule, the same
 * for the stream protocol's subscriptions); the consumer owns it (broker_consumer_free).
 */
#include "broker/broker.h"

#include <string.h>

#include "amqp/table.h"
#include "core/clock.h"
#include "core/mem.h"
#include "amqp/amqp10.h"
#include "store/stream.h"

qm_position broker_stream_pos;

int broker_stream_refuse_consume(channel *ch, qm_queue *q, const amqp_basic_consume *b)
{
    const uint32_t id = AMQP_BASIC_CONSUME;
    const char *vh = ch->c->vhost->name;
    /* RabbitMQ's order (rabbit_stream_queue:consume): no prefetch, then no-ack, then a
     * channel-wide prefetch */
    if (ch->prefetch_next == 0) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, id,
                             "consumer prefetch count is not set for 'queue '%s' in vhost '%s''",
                             q->name, vh);
        return 1;
    }
    if (b->no_ack) {
        broker_channel_error(
            ch, SL_ERR_NOT_IMPLEMENTED, id,
            "automatic acknowledgement not supported by stream queues queue '%s' in vhost '%s'",
            q->name, vh);
        return 1;
    }
    if (ch->prefetch_global) {
        broker_channel_error(ch, SL_ERR_NOT_IMPLEMENTED, id,
                             "queue '%s' in vhost '%s' does not support global qos", q->name, vh);
        return 1;
    }
    return 0;
}

int broker_stream_offset_arg(channel *ch, qm_queue *q, amqp_bytes args, uint64_t *start)
{
    qm_stream_spec spec = {.kind = QM_SO_NEXT};
    amqp_value v;
    amqp_bytes s;
    int64_t iv;
    if (amqp_table_get(args, "x-stream-offset", &v)) {
        if (v.tag == 'T') {
            /* an AMQP timestamp: seconds */
            spec.kind = QM_SO_TIMESTAMP;
            spec.ts_ms = (int64_t)v.v.ts * 1000;
        } else if (amqp_value_str(&v, &s)) {
            uint64_t ms;
            if (amqp_bytes_eq(s, "first"))
                spec.kind = QM_SO_FIRST;
            else if (amqp_bytes_eq(s, "last"))
                spec.kind = QM_SO_LAST;
            else if (amqp_bytes_eq(s, "next"))
                spec.kind = QM_SO_NEXT;
            else if (st_stream_parse_age((const char *)s.p, s.len, &ms) == 0) {
                /* an interval: from that long ago */
                spec.kind = QM_SO_TIMESTAMP;
                spec.ts_ms = (int64_t)sl_wall_ms() - (int64_t)ms;
            } else {
                broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_CONSUME,
                                     "invalid arg 'x-stream-offset' for queue '%s' in vhost "
                                     "'%s': invalid_max_age",
                                     q->name, ch->c->vhost->name);
                return -1;
            }
        } else if (amqp_value_int(&v, &iv)) {
            spec.kind = QM_SO_OFFSET;
            spec.offset = iv < 0 ? 0 : (uint64_t)iv;
        } else {
            broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_CONSUME,
                                 "invalid arg 'x-stream-offset' for queue '%s' in vhost '%s': "
                                 "{invalid_offset_arg,%s}",
                                 q->name, ch->c->vhost->name, amqp_value_type_name(v.tag));
            return -1;
        }
    }
    *start = qm_stream_start(q, &spec);
    return 0;
}

int broker_stream_filter_arg(channel *ch, qm_queue *q, amqp_bytes args, qm_stream_filter **out)
{
    /* RabbitMQ 3.13's rabbit_stream_queue:filter_spec: x-stream-filter a longstr, or an array
     * whose longstr items count (the others are dropped); any other type is no filter, and
     * x-stream-match-unfiltered counts only as a bool. It refuses neither argument's type. */
    amqp_value v, mu;
    *out = NULL;
    if (!amqp_table_get(args, "x-stream-filter", &v) || (v.tag != 'S' && v.tag != 'A'))
        return 0;
    qm_stream_filter *f = qm_stream_filter_new();
    int full = 0;
    if (v.tag == 'S')
        qm_stream_filter_add(f, v.v.s.p, v.v.s.len);
    else {
        amqp_table_iter it;
        amqp_value e;
        amqp_array_iter_init(&it, v.v.s);
        while (!full && amqp_array_next(&it, &e))
            if (e.tag == 'S')
                full = qm_stream_filter_add(f, e.v.s.p, e.v.s.len) < 0;
    }
    if (full) {
        /* Sluice's bound (RabbitMQ has none): refused rather than filtering on part of it */
        qm_stream_filter_free(f);
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_CONSUME,
                             "invalid arg 'x-stream-filter' for queue '%s' in vhost '%s': "
                             "more than %d values",
                             q->name, ch->c->vhost->name, QM_STREAM_FILTERS_MAX);
        return -1;
    }
    f->match_unfiltered =
        amqp_table_get(args, "x-stream-match-unfiltered", &mu) && mu.tag == 't' && mu.v.b;
    *out = f;
    return 0;
}

void broker_stream_deliver(qm_consumer *qc, uint64_t offset, int64_t ts_ms, const uint8_t *p,
                           size_t len)
{
    (void)ts_ms;
    consumer *cons = qc->ctx;
    channel *ch = cons->ch;
    conn *c = ch->c;
    qm_stream_msg sm;
    if (qm_stream_decode(p, len, &sm) < 0)
        return; /* not an entry this door wrote: skipped */
    uint64_t tag = broker_channel_track(ch, &broker_stream_pos, cons);
    sl_buf qp, p10, h10, b10;
    sl_buf_init(&qp);
    sl_buf_init(&p10);
    sl_buf_init(&h10);
    sl_buf_init(&b10);
    if (sm.amqp10) {
        /* from the stream protocol: its AMQP 1.0 sections as 0-9-1 properties and body, as
         * RabbitMQ converts them (else the bytes as they came) */
        amqp_basic_props bp;
        if (amqp10_to_091(sm.body, sm.body_len, &bp, &h10, &b10) == 0) {
            amqp_props_encode(&p10, &bp);
            sm.props = sl_buf_head(&p10);
            sm.props_len = sl_buf_unread(&p10);
            sm.body = sl_buf_head(&b10);
            sm.body_len = sl_buf_unread(&b10);
        }
    }
    amqp_props_set_long_header(sm.props, sm.props_len, "x-stream-offset", (int64_t)offset, &qp);
    amqp_deliver_write(&c->out, ch->id, (amqp_bytes){(const uint8_t *)cons->tag, cons->tag_len},
                       tag, 0, sm.exchange, sm.routing_key, sl_buf_head(&qp), sl_buf_unread(&qp),
                       sm.body, sm.body_len, c->frame_max ? c->frame_max - AMQP_FRAME_OVERHEAD : 0);
    sl_buf_free(&qp);
    sl_buf_free(&p10);
    sl_buf_free(&h10);
    sl_buf_free(&b10);
    broker_mark_dirty(c);
}
