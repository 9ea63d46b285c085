/* channel.c - one AMQP channel: lifecycle, method routing by class, content assembly for
 * basic.publish, the record of unsettled deliveries, and publisher confirms.
 *
 * Unsettled deliveries live in a ring in tag order (tags only grow), so ack multiple pops a
 * prefix and a single ack is a binary search. A record settled out of order keeps its slot
 * with pos = NULL until the records before it are settled too.
 *
 * After a channel error the channel is CLOSING: it has released everything and discards
 * every frame but channel.close / close-ok (the spec's rule), so the rest of a publish that
 * was under way is dropped without another error.
 */
#include "broker/broker.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/list.h"
#include "core/log.h"
#include "core/map.h"
#include "core/mem.h"

channel *broker_channel_new(conn *c, uint16_t id)
{
    channel *ch = sl_xcalloc(1, sizeof *ch);
    ch->c = c;
    ch->id = id;
    ch->state = CH_OPEN;
    sl_buf_init(&ch->pub_bcc);
    return ch;
}

static delivery *ua_at(channel *ch, size_t i)
{
    return &ch->unacked[(ch->ua_head + i) % ch->ua_cap];
}

static void drop_partial_publish(channel *ch)
{
    if (ch->pub_msg) {
        qm_message_free_partial(ch->pub_msg, ch->pub_cap);
        ch->pub_msg = NULL;
    }
    ch->content = CONTENT_NONE;
}

void broker_channel_release(channel *ch)
{
    if (ch->released)
        return;
    ch->released = 1;
    drop_partial_publish(ch);
    broker_reply_to_release(ch);
    broker_link_recv_release(ch);
    if (ch->tx) {
        qm_tx_abort(ch->tx);
        ch->tx = NULL;
    }
    /* Consumers first, so requeued messages are not offered back to them. Their deliveries
     * lose them in one pass here, not one pass over every unsettled delivery per consumer
     * (broker_consumer_free's, for a single cancel): a channel with thousands of consumers and
     * thousands of unacked deliveries closes in O(consumers + deliveries). */
    for (size_t i = 0; i < ch->ua_len; i++)
        ua_at(ch, i)->cons = NULL;
    while (ch->consumers) {
        consumer *cons = ch->consumers;
        broker_channel_unlink_consumer(ch, cons);
        if (cons->qc.queue)
            qm_consumer_detach(&cons->qc);
        sl_free(cons->tag);
        sl_free(cons);
    }
    if (ch->ctags) {
        sl_map_free(ch->ctags);
        ch->ctags = NULL;
    }
    /* Unsettled deliveries go back to their queues, redelivered (PurgePending ones are
     * deleted by qm, never requeued). */
    for (size_t i = 0; i < ch->ua_len; i++) {
        delivery *d = ua_at(ch, i);
        if (d->pos && d->pos != &broker_stream_pos)
            qm_position_requeue(d->pos);
        d->pos = NULL;
    }
    ch->ua_len = ch->ua_live = 0;
    sl_free(ch->unacked);
    ch->unacked = NULL;
    ch->ua_cap = 0;
}

static void confirming_add(channel *ch)
{
    conn *c = ch->c;
    if (ch->in_confirming)
        return;
    ch->in_confirming = 1;
    SL_LIST_PUSH(c->confirming, ch, conf_prev, conf_next);
}

static void confirming_remove(channel *ch)
{
    if (!ch->in_confirming)
        return;
    SL_LIST_UNLINK(ch->c->confirming, ch, conf_prev, conf_next);
    ch->in_confirming = 0;
    ch->conf_next = ch->conf_prev = NULL;
}

void broker_conn_flush_confirms(conn *c)
{
    channel *ch = c->confirming;
    while (ch) {
        channel *next = ch->conf_next;
        broker_channel_flush_confirms(ch);
        if (!ch->cw_len && ch->confirm_ready <= ch->confirm_done)
            confirming_remove(ch);
        ch = next;
    }
}

void broker_channel_free(channel *ch)
{
    confirming_remove(ch);
    broker_channel_release(ch);
    sl_free(ch->cw);
    sl_free(ch->last_queue);
    sl_free(ch->pub_names);
    sl_buf_free(&ch->pub_bcc);
    sl_free(ch);
}

void broker_channel_error(channel *ch, sl_err e, uint32_t method_id, const char *fmt, ...)
{
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (sl_err_is_hard(e)) {
        broker_conn_error(ch->c, e, method_id, "%s", detail);
        return;
    }
    if (ch->state != CH_OPEN)
        return;
    const sl_err_info *info = sl_err_get(e);
    char text[300];
    snprintf(text, sizeof text, "%s - %s", info->name, detail);
    sl_info("channel %u of %s error: %s", ch->id, ch->c->name, text);
    /* Confirms already earned still go out before the close (those waiting for the disk
     * once it has them). */
    broker_channel_confirms_behind_hold(ch);
    broker_channel_release(ch);
    ch->state = CH_CLOSING;
    amqp_method m = {.id = AMQP_CHANNEL_CLOSE};
    m.u.channel_close.reply_code = info->amqp_code;
    m.u.channel_close.reply_text = amqp_cstr(text);
    m.u.channel_close.class_id = AMQP_ID_CLASS(method_id);
    m.u.channel_close.method_id = AMQP_ID_METHOD(method_id);
    broker_conn_send_method(ch->c, ch->id, &m);
}

int broker_channel_allowed(channel *ch, acc_kind kind, amqp_bytes name, acc_perm perm,
                           uint32_t method_id)
{
    conn *c = ch->c;
    char why[800];
    if (acc_check(c->b->n->acc, c->user, c->vhost->name, kind, (const char *)name.p, name.len, perm,
                  why, sizeof why) == SL_OK)
        return 1;
    broker_channel_error(ch, SL_ERR_ACCESS_REFUSED, method_id, "%s", why);
    return 0;
}

int broker_channel_topic_allowed(channel *ch, const qm_exchange *x, amqp_bytes routing_key,
                                 acc_perm perm, uint32_t method_id)
{
    conn *c = ch->c;
    char why[800];
    if (!x || x->type != QM_EX_TOPIC ||
        acc_check_topic(c->b->n->acc, c->user, c->vhost->name, x->name, (const char *)routing_key.p,
                        routing_key.len, perm, why, sizeof why) == SL_OK)
        return 1;
    broker_channel_error(ch, SL_ERR_ACCESS_REFUSED, method_id, "%s", why);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Unsettled deliveries
 */

uint64_t broker_channel_track(channel *ch, qm_position *pos, consumer *cons)
{
    if (ch->ua_len == ch->ua_cap) {
        size_t cap = ch->ua_cap ? ch->ua_cap * 2 : 64;
        delivery *nu = sl_xmalloc(cap * sizeof *nu);
        for (size_t i = 0; i < ch->ua_len; i++)
            nu[i] = *ua_at(ch, i);
        sl_free(ch->unacked);
        ch->unacked = nu;
        ch->ua_cap = cap;
        ch->ua_head = 0;
    }
    uint64_t tag = ++ch->next_tag;
    delivery *d = ua_at(ch, ch->ua_len++);
    d->tag = tag;
    d->pos = pos;
    d->cons = cons;
    d->in_tx = 0;
    ch->ua_live++;
    if (cons)
        cons->unacked++;
    if (pos != &broker_stream_pos)
        qm_pos_set_holder(pos, d);
    return tag;
}

static void pop_settled_prefix(channel *ch)
{
    while (ch->ua_len > 0 && ua_at(ch, 0)->pos == NULL) {
        ch->ua_head = (ch->ua_head + 1) % ch->ua_cap;
        ch->ua_len--;
    }
    if (ch->ua_len == 0)
        ch->ua_head = 0;
}

/* Index of the record with this tag, or -1. */
static long find_tag(channel *ch, uint64_t tag)
{
    size_t lo = 0, hi = ch->ua_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t t = ua_at(ch, mid)->tag;
        if (t == tag)
            return (long)mid;
        if (t < tag)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static void after_settle(channel *ch, consumer *cons)
{
    /* Room under a prefetch limit: let the queue offer more. */
    if (cons) {
        if (cons->unacked > 0)
            cons->unacked--;
        if (cons->qc.queue)
            qm_queue_schedule_dispatch(cons->qc.queue);
    }
    /* Under a channel-wide limit only the consumers it turned away wait for room: offering
     * more to each of the channel's consumers on every settle would be O(consumers) per ack. */
    if (ch->prefetch_global && ch->ua_live < ch->prefetch_global)
        broker_channel_wake_starved(ch);
}

static void settle_one(channel *ch, delivery *d, int how)
{
    qm_position *pos = d->pos;
    if (pos == &broker_stream_pos) {
        /* a stream delivery: nothing to settle, only the credit comes back (any outcome) */
        d->pos = NULL;
        ch->ua_live--;
        after_settle(ch, d->cons);
        return;
    }
    if (ch->tx_mode && ch->tx) {
        /* Held until commit; the record stays so rollback can give it back. */
        qm_tx_dequeue(ch->tx, pos, how);
        d->in_tx = 1;
        return;
    }
    consumer *cons = d->cons;
    d->pos = NULL;
    ch->ua_live--;
    qm_pos_set_holder(pos, NULL);
    if (how == QM_SETTLE_ACK)
        qm_position_ack(pos);
    else if (how == QM_SETTLE_REQUEUE)
        qm_position_requeue(pos);
    else
        qm_position_reject(pos);
    after_settle(ch, cons);
}

int broker_channel_settle(channel *ch, uint64_t tag, int multiple, int how)
{
    if (multiple) {
        if (tag > ch->next_tag)
            return -1;
        /* tag 0 with multiple means "everything outstanding". */
        uint64_t upto = tag == 0 ? ch->next_tag : tag;
        for (size_t i = 0; i < ch->ua_len; i++) {
            delivery *d = ua_at(ch, i);
            if (d->tag > upto)
                break;
            if (d->pos && !d->in_tx)
                settle_one(ch, d, how);
        }
    } else {
        long i = find_tag(ch, tag);
        if (i < 0)
            return -1;
        delivery *d = ua_at(ch, (size_t)i);
        if (!d->pos || d->in_tx)
            return -1;
        settle_one(ch, d, how);
    }
    pop_settled_prefix(ch);
    return 0;
}

void broker_channel_tx_settled(channel *ch, int committed)
{
    for (size_t i = 0; i < ch->ua_len; i++) {
        delivery *d = ua_at(ch, i);
        if (!d->in_tx)
            continue;
        d->in_tx = 0;
        if (committed) {
            /* qm_tx_commit has settled the position; it may be gone. */
            consumer *cons = d->cons;
            d->pos = NULL;
            ch->ua_live--;
            after_settle(ch, cons);
        }
    }
    pop_settled_prefix(ch);
}

/* ------------------------------------------------------------------------------------------
 * Publisher confirms
 */

/* Confirms wait in the channel, not in the connection's output: a consumer on the same
 * connection keeps getting deliveries while a publisher's acks wait for the disk. Outcomes
 * leave in publish order, so an ack with multiple=true never covers a nack. */
typedef struct confirm_wait {
    uint64_t upto; /* acks: every publish <= upto (after the previous entry); nack: this one */
    uint64_t gen;  /* store generation to be durable first (non-decreasing along the ring) */
    uint8_t nack;
} confirm_wait;

static confirm_wait *cw_at(channel *ch, size_t i)
{
    return &ch->cw[(ch->cw_head + i) % ch->cw_cap];
}

static void cw_push(channel *ch, uint64_t upto, uint64_t gen, int nack)
{
    if (ch->cw_len == ch->cw_cap) {
        size_t cap = ch->cw_cap ? ch->cw_cap * 2 : 4;
        confirm_wait *nu = sl_xmalloc(cap * sizeof *nu);
        for (size_t i = 0; i < ch->cw_len; i++)
            nu[i] = *cw_at(ch, i);
        sl_free(ch->cw);
        ch->cw = nu;
        ch->cw_cap = cap;
        ch->cw_head = 0;
    }
    *cw_at(ch, ch->cw_len++) = (confirm_wait){upto, gen, (uint8_t)nack};
    confirming_add(ch);
    broker_wait_disk(ch->c);
}

static void send_ack_upto(channel *ch)
{
    if (ch->confirm_ready <= ch->confirm_done)
        return;
    amqp_method m = {.id = AMQP_BASIC_ACK};
    m.u.basic_ack.delivery_tag = ch->confirm_ready;
    m.u.basic_ack.multiple = ch->confirm_ready - ch->confirm_done > 1;
    /* per vhost: a listing shows a user only the vhosts it may list (api_misc.c). Only on an
     * open connection: deleting a vhost closes its connections and frees the vhost while a
     * closing one may still flush its confirms here */
    if (ch->c->state == CONN_OPEN)
        ch->c->vhost->stat_confirm += ch->confirm_ready - ch->confirm_done;
    broker_conn_send_method(ch->c, ch->id, &m);
    ch->confirm_done = ch->confirm_ready;
}

static void send_nack(channel *ch, uint64_t seq)
{
    /* Everything before seq is acked first. */
    if (seq > 0 && ch->confirm_ready < seq - 1)
        ch->confirm_ready = seq - 1;
    send_ack_upto(ch);
    amqp_method m = {.id = AMQP_BASIC_NACK};
    m.u.basic_nack.delivery_tag = seq;
    m.u.basic_nack.multiple = 0;
    m.u.basic_nack.requeue = 0;
    broker_conn_send_method(ch->c, ch->id, &m);
    ch->confirm_done = ch->confirm_ready = seq;
}

/* Move the outcomes whose generation is durable (all of them with all = 1) out of the ring:
 * acks into confirm_ready, nacks onto the wire in their place. */
static void release_confirms(channel *ch, int all)
{
    uint64_t durable = node_durable(ch->c->b->n);
    while (ch->cw_len && (all || cw_at(ch, 0)->gen <= durable)) {
        confirm_wait w = *cw_at(ch, 0);
        ch->cw_head = (ch->cw_head + 1) % ch->cw_cap;
        ch->cw_len--;
        if (w.nack)
            send_nack(ch, w.upto);
        else if (w.upto > ch->confirm_ready)
            ch->confirm_ready = w.upto;
    }
    if (ch->cw_len)
        broker_wait_disk(ch->c);
}

void broker_channel_flush_confirms(channel *ch)
{
    if (!ch->confirm)
        return;
    release_confirms(ch, 0);
    send_ack_upto(ch);
}

void broker_channel_confirms_behind_hold(channel *ch)
{
    if (!ch->confirm)
        return;
    release_confirms(ch, 0);
    send_ack_upto(ch);
    if (ch->cw_len) {
        broker_conn_hold_for_disk(ch->c);
        release_confirms(ch, 1);
        send_ack_upto(ch);
    }
}

void broker_channel_confirm(channel *ch, uint64_t seq, int ok, uint64_t gen)
{
    confirm_wait *tail = ch->cw_len ? cw_at(ch, ch->cw_len - 1) : NULL;
    if (!tail && (!ok || gen <= node_durable(ch->c->b->n))) {
        /* Nothing earlier is waiting and this needs nothing of the disk. */
        if (ok) {
            if (seq > ch->confirm_ready)
                ch->confirm_ready = seq;
            confirming_add(ch);
            broker_mark_dirty(ch->c);
        } else {
            send_nack(ch, seq);
        }
        return;
    }
    /* Behind what waits: an ack joins the newest entry when that entry waits at least as
     * long; a nack waits for the entry before it. */
    if (ok && tail && !tail->nack && tail->gen >= gen) {
        tail->upto = seq;
        return;
    }
    uint64_t g = tail && tail->gen > gen ? tail->gen : gen;
    cw_push(ch, seq, g, !ok);
}

void broker_channel_send_durable(channel *ch, const amqp_method *m, int nowait)
{
    broker_channel_send_after(ch, m, nowait, node_ticket(ch->c->b->n));
}

void broker_channel_send_after(channel *ch, const amqp_method *m, int nowait, uint64_t gen)
{
    if (nowait)
        return;
    broker_conn_hold_until(ch->c, gen);
    broker_conn_send_method(ch->c, ch->id, m);
}

/* ------------------------------------------------------------------------------------------
 * Frames
 */

static void on_channel_method(channel *ch, const amqp_method *m)
{
    switch (m->id) {
    case AMQP_CHANNEL_CLOSE: {
        uint16_t id = ch->id;
        conn *c = ch->c;
        /* The outcomes of its publishes go out before close-ok, as they become true. */
        broker_channel_confirms_behind_hold(ch);
        broker_channel_release(ch);
        amqp_method ok = {.id = AMQP_CHANNEL_CLOSE_OK};
        broker_conn_send_method(c, id, &ok);
        broker_conn_drop_channel(c, id);
        return;
    }
    case AMQP_CHANNEL_CLOSE_OK:
        return; /* we did not ask; ignore */
    case AMQP_CHANNEL_FLOW:
        if (!m->u.channel_flow.active) {
            broker_channel_error(ch, SL_ERR_NOT_IMPLEMENTED, m->id, "active=false");
            return;
        }
        {
            amqp_method ok = {.id = AMQP_CHANNEL_FLOW_OK};
            ok.u.channel_flow_ok.active = 1;
            broker_conn_send_method(ch->c, ch->id, &ok);
        }
        return;
    case AMQP_CHANNEL_OPEN:
        broker_conn_error(ch->c, SL_ERR_CHANNEL, m->id, "second 'channel.open' seen");
        return;
    default:
        broker_channel_error(ch, SL_ERR_COMMAND_INVALID, m->id, "unexpected method %s",
                             amqp_method_name(m->id));
    }
}

static void on_method(channel *ch, const amqp_method *m)
{
    switch (AMQP_ID_CLASS(m->id)) {
    case 20:
        on_channel_method(ch, m);
        return;
    case 30:
        if (m->id == AMQP_ACCESS_REQUEST) {
            amqp_method ok = {.id = AMQP_ACCESS_REQUEST_OK};
            ok.u.access_request_ok.ticket = 1;
            broker_conn_send_method(ch->c, ch->id, &ok);
            return;
        }
        break;
    case 40:
        broker_h_exchange(ch, m);
        return;
    case 50:
        broker_h_queue(ch, m);
        return;
    case 60:
        broker_h_basic(ch, m);
        return;
    case 85:
        broker_h_confirm(ch, m);
        return;
    case 90:
        broker_h_tx(ch, m);
        return;
    case 10:
        broker_conn_error(ch->c, SL_ERR_COMMAND_INVALID, m->id,
                          "connection method %s on channel %u", amqp_method_name(m->id), ch->id);
        return;
    }
    broker_conn_error(ch->c, SL_ERR_COMMAND_INVALID, m->id, "unexpected method %s",
                      amqp_method_name(m->id));
}

#define PUB_FIRST_CAP 4096

static void on_header(channel *ch, const amqp_frame *f)
{
    conn *c = ch->c;
    amqp_content_header h;
    if (amqp_content_header_parse(f->payload, f->size, &h) != 0) {
        broker_conn_error(c, SL_ERR_SYNTAX, AMQP_BASIC_PUBLISH, "malformed content header");
        return;
    }
    if (h.class_id != 60) {
        broker_conn_error(c, SL_ERR_FRAME, AMQP_BASIC_PUBLISH, "content header for class %u",
                          h.class_id);
        return;
    }
    amqp_basic_props props;
    if (amqp_props_decode(h.props, h.props_len, &props) != 0) {
        broker_conn_error(c, SL_ERR_SYNTAX, AMQP_BASIC_PUBLISH, "malformed basic properties");
        return;
    }
    if (h.body_size > c->b->n->cfg->max_message_size) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_PUBLISH,
                             "message size %llu is larger than configured max size %llu",
                             (unsigned long long)h.body_size,
                             (unsigned long long)c->b->n->cfg->max_message_size);
        return;
    }
    /* RabbitMQ's check_user_id_header: only an impersonator may claim another user. */
    if ((props.flags & AMQP_P_USER_ID) &&
        !(props.user_id.len == strlen(c->user) &&
          !memcmp(props.user_id.p, c->user, props.user_id.len)) &&
        !acc_user_has_tag(acc_user_find(c->b->n->acc, c->user, strlen(c->user)),
                          ACC_TAG_IMPERSONATOR)) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_PUBLISH,
                             "user_id property set to '" BYTES_FMT
                             "' but authenticated user was '%s'",
                             BYTES_ARG(props.user_id), c->user);
        return;
    }
    uint64_t ttl;
    char why[300];
    if ((props.flags & AMQP_P_EXPIRATION) &&
        qm_expiration_parse(props.expiration, &ttl, why, sizeof why) < 0) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_PUBLISH,
                             "invalid expiration '" BYTES_FMT "': %s", BYTES_ARG(props.expiration),
                             why);
        return;
    }
    /* Sender-selected distribution: CC and BCC must be arrays; BCC is routed, never kept. */
    if ((props.flags & AMQP_P_HEADERS) &&
        qm_cc_bcc_check(props.headers, why, sizeof why) != SL_OK) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_PUBLISH, "invalid message: %s",
                             why);
        return;
    }
    sl_buf_consume(&ch->pub_bcc, sl_buf_unread(&ch->pub_bcc));
    sl_buf stripped;
    sl_buf_init(&stripped);
    int no_bcc =
        (props.flags & AMQP_P_HEADERS) && qm_strip_bcc(props.headers, &stripped, &ch->pub_bcc) > 0;
    if (no_bcc)
        props.headers = (amqp_bytes){stripped.data, stripped.len};
    amqp_bytes ex = {(const uint8_t *)ch->pub_names, ch->pub_exchange_len};
    amqp_bytes rk = {(const uint8_t *)ch->pub_names + PUB_RK_AT, ch->pub_rk_len};
    sl_buf rewritten;
    sl_buf_init(&rewritten);
    int rw = broker_reply_to_rewrite(ch, &props, &rewritten);
    if (rw < 0) {
        sl_buf_free(&stripped);
        return;
    }
    if (rw == 0 && no_bcc) {
        amqp_props_encode(&rewritten, &props);
        rw = 1;
    }
    sl_buf_free(&stripped); /* props.headers now lives in rewritten */
    if (rw > 0) {
        /* the properties as they will be stored and delivered: reply-to is the channel's
         * direct reply-to name now, and the headers table is found again in the new bytes */
        h.props = sl_buf_head(&rewritten);
        h.props_len = sl_buf_unread(&rewritten);
        amqp_props_decode(h.props, h.props_len, &props);
    }
    /* Small bodies get their room at once; larger ones as they arrive, so a header that
     * announces 128 MiB and sends nothing costs what it sent. */
    ch->pub_cap = h.body_size < PUB_FIRST_CAP ? h.body_size : PUB_FIRST_CAP;
    ch->pub_msg = qm_message_new_partial(ex, rk, h.props, (uint32_t)h.props_len, h.body_size,
                                         ch->pub_cap, &props);
    /* Where the headers table sits in the stored copy of the properties (for routing). */
    ch->pub_headers_off = 0;
    ch->pub_headers_len = 0;
    if (props.flags & AMQP_P_HEADERS) {
        ch->pub_headers_off = (uint32_t)(props.headers.p - h.props);
        ch->pub_headers_len = (uint32_t)props.headers.len;
    }
    sl_buf_free(&rewritten);
    ch->pub_received = 0;
    ch->content = CONTENT_WANT_BODY;
    if (h.body_size == 0)
        broker_basic_publish_complete(ch);
}

static void on_body(channel *ch, const amqp_frame *f)
{
    qm_message *m = ch->pub_msg;
    if (f->size > m->body_len - ch->pub_received) {
        broker_conn_error(ch->c, SL_ERR_FRAME, AMQP_BASIC_PUBLISH,
                          "body frames carry more than the body-size %llu",
                          (unsigned long long)m->body_len);
        return;
    }
    if (ch->pub_received + f->size > ch->pub_cap) {
        /* Double what is there (at most the announced size), so a body costs O(log n)
         * reallocations and never more than twice what has arrived. */
        uint64_t cap = ch->pub_cap * 2;
        if (cap < ch->pub_received + f->size)
            cap = ch->pub_received + f->size;
        if (cap > m->body_len)
            cap = m->body_len;
        m = ch->pub_msg = qm_message_grow(m, ch->pub_cap, cap);
        ch->pub_cap = cap;
    }
    memcpy(qm_msg_body(m) + ch->pub_received, f->payload, f->size);
    ch->pub_received += f->size;
    if (ch->pub_received == m->body_len)
        broker_basic_publish_complete(ch);
}

void broker_channel_on_frame(channel *ch, const amqp_frame *f)
{
    if (ch->state == CH_CLOSING) {
        /* Only close / close-ok matter now. */
        if (f->type != AMQP_FRAME_METHOD || f->size < 4)
            return;
        uint32_t id = AMQP_ID(sl_get_u16(f->payload), sl_get_u16(f->payload + 2));
        if (id == AMQP_CHANNEL_CLOSE_OK) {
            broker_conn_drop_channel(ch->c, ch->id);
        } else if (id == AMQP_CHANNEL_CLOSE) {
            amqp_method ok = {.id = AMQP_CHANNEL_CLOSE_OK};
            broker_conn_send_method(ch->c, ch->id, &ok);
        }
        return;
    }
    switch (f->type) {
    case AMQP_FRAME_METHOD: {
        if (ch->content != CONTENT_NONE) {
            broker_conn_error(ch->c, SL_ERR_UNEXPECTED_FRAME, AMQP_BASIC_PUBLISH,
                              "expected content %s for class 60, got non content %s frame instead",
                              ch->content == CONTENT_WANT_HEADER ? "header" : "body",
                              ch->content == CONTENT_WANT_HEADER ? "header" : "body");
            return;
        }
        amqp_method m;
        int r = amqp_method_decode(f->payload, f->size, &m);
        if (r == AMQP_DECODE_UNKNOWN) {
            broker_conn_error(ch->c, SL_ERR_NOT_IMPLEMENTED, 0, "unknown method %u/%u",
                              f->size >= 2 ? sl_get_u16(f->payload) : 0,
                              f->size >= 4 ? sl_get_u16(f->payload + 2) : 0);
            return;
        }
        if (r == AMQP_DECODE_BAD_UTF8) {
            /* names must be UTF-8 (RabbitMQ's rule): they are exported as JSON text */
            broker_conn_error(ch->c, SL_ERR_FRAME, 0, "Malformed UTF-8 in shortstr");
            return;
        }
        if (r != AMQP_DECODE_OK) {
            broker_conn_error(ch->c, SL_ERR_SYNTAX, 0, "malformed method frame");
            return;
        }
        on_method(ch, &m);
        return;
    }
    case AMQP_FRAME_HEADER:
        if (ch->content != CONTENT_WANT_HEADER) {
            broker_conn_error(ch->c, SL_ERR_UNEXPECTED_FRAME, 0,
                              "expected method frame, got non method frame instead");
            return;
        }
        on_header(ch, f);
        return;
    case AMQP_FRAME_BODY:
        if (ch->content != CONTENT_WANT_BODY) {
            broker_conn_error(ch->c, SL_ERR_UNEXPECTED_FRAME, 0,
                              "expected method frame, got non method frame instead");
            return;
        }
        on_body(ch, f);
        return;
    }
}
