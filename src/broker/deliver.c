/* deliver.c - the AMQP side of consumers: the qm_consumer_ops the queue model calls to ask
 * whether a consumer can take a message and to hand one over, and the writing of content
 * (header frame + body frames) for deliver, get-ok and return.
 *
 * The properties are sent exactly as the publisher encoded them (stored raw), so a delivery
 * re-encodes nothing but the method frame; only a quorum queue's redelivery (and its
 * basic.get) re-encodes them, with the x-delivery-count header added (qm_delivery_props).
 */
#include "broker/broker.h"

#include <string.h>

#include "core/list.h"
#include "core/map.h"
#include "core/mem.h"

void broker_write_content(conn *c, uint16_t ch, const qm_message *m)
{
    broker_write_content_props(c, ch, m, qm_msg_props(m), m->props_len);
}

void broker_write_content_props(conn *c, uint16_t ch, const qm_message *m, const uint8_t *props,
                                size_t props_len)
{
    amqp_content_header_write(&c->out, ch, m->body_len, props, props_len);
    /* Body frames of at most frame_max - 8 payload octets. */
    size_t chunk = c->frame_max ? c->frame_max - AMQP_FRAME_OVERHEAD : m->body_len;
    if (chunk == 0)
        chunk = m->body_len;
    for (uint64_t off = 0; off < m->body_len; off += chunk) {
        size_t n = m->body_len - off < chunk ? (size_t)(m->body_len - off) : chunk;
        amqp_frame_write(&c->out, AMQP_FRAME_BODY, ch, qm_msg_body(m) + off, n);
    }
    broker_mark_dirty(c);
}

static int can_take(qm_consumer *qc)
{
    consumer *cons = qc->ctx;
    channel *ch = cons->ch;
    conn *c = ch->c;
    if (c->state != CONN_OPEN || ch->state != CH_OPEN)
        return 0;
    if (broker_out_len(c) >= CONN_OUT_HIGH) {
        /* broker_conn_flush wakes the consumers turned away once it has drained */
        c->consumers_waiting = 1;
        broker_channel_starve_consumer(ch, cons);
        return 0;
    }
    if (qc->no_ack)
        return 1;
    if (cons->prefetch && cons->unacked >= cons->prefetch)
        return 0;
    if (ch->prefetch_global && ch->ua_live >= ch->prefetch_global) {
        broker_channel_starve_consumer(ch, cons);
        return 0;
    }
    return 1;
}

static void deliver(qm_consumer *qc, qm_position *pos)
{
    consumer *cons = qc->ctx;
    channel *ch = cons->ch;
    conn *c = ch->c;
    const qm_message *m = pos->msg;
    /* Track first: the tag is assigned by the record. */
    uint64_t tag = qc->no_ack ? ++ch->next_tag : broker_channel_track(ch, pos, cons);
    broker_hold_delivery(c); /* its delivery mark reaches the file first */
    sl_buf qp = {0};
    int own = qm_delivery_props(m, qm_last_delivery_count(), 0, &qp);
    amqp_bytes ctag = {(const uint8_t *)cons->tag, cons->tag_len};
    const uint8_t *props = own ? sl_buf_head(&qp) : qm_msg_props(m);
    size_t props_len = own ? sl_buf_unread(&qp) : m->props_len;
    size_t max_payload = c->frame_max ? c->frame_max - AMQP_FRAME_OVERHEAD : 0;
    /* A large body in one frame goes from the message to the socket (out_refs.c): the frames
     * around it here, its bytes referenced, not copied. */
    if (broker_out_can_ref(c, m->body_len) &&
        amqp_deliver_write_head(&c->out, ch->id, ctag, tag, pos->redelivered, qm_msg_exchange(m),
                                qm_msg_routing_key(m), props, props_len, m->body_len,
                                max_payload) == 0) {
        broker_out_ref(c, pos->msg, qm_msg_body(m), m->body_len);
        sl_buf_put_u8(&c->out, AMQP_FRAME_END);
    } else {
        amqp_deliver_write(&c->out, ch->id, ctag, tag, pos->redelivered, qm_msg_exchange(m),
                           qm_msg_routing_key(m), props, props_len, qm_msg_body(m), m->body_len,
                           max_payload);
    }
    sl_buf_free(&qp);
    broker_mark_dirty(c);
    if (qc->no_ack)
        qm_position_ack(pos);
}

void broker_consumer_notify_cancel(consumer *cons)
{
    conn *c = cons->ch->c;
    if (!c->cap_cancel_notify || c->state != CONN_OPEN || cons->ch->state != CH_OPEN)
        return;
    amqp_method m = {.id = AMQP_BASIC_CANCEL};
    m.u.basic_cancel.consumer_tag = (amqp_bytes){(const uint8_t *)cons->tag, cons->tag_len};
    m.u.basic_cancel.nowait = 1;
    amqp_method_write(&c->late, cons->ch->id, &m);
    broker_mark_dirty(c);
}

static void cancelled(qm_consumer *qc)
{
    consumer *cons = qc->ctx;
    broker_channel_unlink_consumer(cons->ch, cons);
    broker_consumer_notify_cancel(cons);
    broker_consumer_free(cons);
}

const qm_consumer_ops broker_consumer_ops = {
    .can_take = can_take,
    .deliver = deliver,
    .cancelled = cancelled,
    .deliver_entry = broker_stream_deliver,
};

void broker_consumer_free(consumer *cons)
{
    /* Deliveries it made stay unsettled on the channel; they just lose their consumer. */
    channel *ch = cons->ch;
    for (size_t i = 0; i < ch->ua_len; i++) {
        delivery *d = &ch->unacked[(ch->ua_head + i) % ch->ua_cap];
        if (d->cons == cons)
            d->cons = NULL;
    }
    qm_stream_filter_free((qm_stream_filter *)cons->qc.st_filter);
    sl_free(cons->tag);
    sl_free(cons);
}

consumer *broker_channel_find_consumer(channel *ch, const uint8_t *tag, size_t len)
{
    return ch->ctags ? sl_map_get(ch->ctags, tag, len) : NULL;
}

void broker_channel_add_consumer(channel *ch, consumer *cons)
{
    if (!ch->ctags)
        ch->ctags = sl_map_new();
    sl_map_put(ch->ctags, cons->tag, cons->tag_len, cons);
    SL_LIST_PUSH(ch->consumers, cons, prev, next);
}

static void unstarve(channel *ch, consumer *cons)
{
    if (!cons->is_starved)
        return;
    SL_LIST_UNLINK(ch->starved, cons, starved_prev, starved_next);
    cons->starved_next = cons->starved_prev = NULL;
    cons->is_starved = 0;
}

void broker_channel_starve_consumer(channel *ch, consumer *cons)
{
    if (cons->is_starved)
        return;
    cons->is_starved = 1;
    SL_LIST_PUSH(ch->starved, cons, starved_prev, starved_next);
}

void broker_channel_wake_starved(channel *ch)
{
    while (ch->starved) {
        consumer *cons = ch->starved;
        unstarve(ch, cons);
        if (cons->qc.queue)
            qm_queue_schedule_dispatch(cons->qc.queue);
    }
}

void broker_channel_unlink_consumer(channel *ch, consumer *cons)
{
    unstarve(ch, cons);
    SL_LIST_UNLINK(ch->consumers, cons, prev, next);
    cons->next = cons->prev = NULL;
    if (ch->ctags)
        sl_map_del(ch->ctags, cons->tag, cons->tag_len);
}
