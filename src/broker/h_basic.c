/* h_basic.c - the basic, tx and confirm classes: qos, consume, cancel, publish, get,
 * ack / nack / reject, recover; transactions; publisher confirms.
 *
 * A publish becomes an Enqueue on every queue it routes to; inside tx.select it is a
 * transactional Enqueue, held Locked until tx.commit. An ack inside a transaction is a
 * transactional Dequeue, undone by tx.rollback (the delivery stays unsettled).
 */
#include "broker/broker.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "amqp/table.h"
#include "core/log.h"
#include "core/mem.h"

static void send_reply(channel *ch, const amqp_method *m, int nowait)
{
    if (!nowait)
        broker_conn_send_method(ch->c, ch->id, m);
}

/* "amq.ctag-" + 22 url-safe base64 characters, like RabbitMQ's. */
static void make_ctag(char out[32])
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint8_t rnd[22];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        memset(rnd, 0x5a, sizeof rnd);
    memcpy(out, "amq.ctag-", 9);
    for (int i = 0; i < 22; i++)
        out[9 + i] = alphabet[rnd[i] & 63];
    out[31] = 0;
}

static void qos(channel *ch, const amqp_basic_qos *q)
{
    if (q->prefetch_size != 0) {
        broker_conn_error(ch->c, SL_ERR_NOT_IMPLEMENTED, AMQP_BASIC_QOS, "prefetch_size!=0 (%u)",
                          q->prefetch_size);
        return;
    }
    if (q->global) {
        ch->prefetch_global = q->prefetch_count;
    } else {
        ch->prefetch_next = q->prefetch_count;
    }
    /* A raised limit can let queues deliver more right away. */
    broker_channel_wake_starved(ch);
    for (consumer *o = ch->consumers; o; o = o->next)
        if (o->qc.queue)
            qm_queue_schedule_dispatch(o->qc.queue);
    amqp_method ok = {.id = AMQP_BASIC_QOS_OK};
    broker_conn_send_method(ch->c, ch->id, &ok);
}

static void consume(channel *ch, const amqp_basic_consume *b)
{
    const uint32_t id = AMQP_BASIC_CONSUME;
    int reply = broker_reply_to_is_pseudo(b->queue);
    qm_queue *q = reply ? NULL : broker_channel_queue_checked(ch, b->queue, ACC_READ, id);
    if (!q && !reply)
        return;
    char gen[32];
    amqp_bytes tag = b->consumer_tag;
    if (tag.len == 0) {
        make_ctag(gen);
        tag = amqp_cstr(gen);
    } else if (broker_channel_find_consumer(ch, tag.p, tag.len) ||
               (ch->reply_tag && amqp_bytes_eq(tag, ch->reply_tag))) {
        broker_conn_error(ch->c, SL_ERR_NOT_ALLOWED, id,
                          "attempt to reuse consumer tag '" BYTES_FMT "'", BYTES_ARG(tag));
        return;
    }
    if (reply) {
        char t[256];
        snprintf(t, sizeof t, BYTES_FMT, BYTES_ARG(tag));
        broker_reply_to_consume(ch, b, t);
        return;
    }
    int priority = 0;
    amqp_value v;
    int64_t iv;
    if (amqp_table_get(b->arguments, "x-priority", &v)) {
        if (!amqp_value_int(&v, &iv) || iv < -2147483647 || iv > 2147483647) {
            broker_channel_error(ch, SL_ERR_PRECONDITION, id,
                                 "invalid arg 'x-priority' for consumer: expected integer");
            return;
        }
        priority = (int)iv;
    }
    uint64_t st_start = 0;
    qm_stream_filter *filter = NULL;
    if (q->stream && (broker_stream_refuse_consume(ch, q, b) ||
                      broker_stream_offset_arg(ch, q, b->arguments, &st_start) < 0 ||
                      broker_stream_filter_arg(ch, q, b->arguments, &filter) < 0))
        return;
    consumer *cons = sl_xcalloc(1, sizeof *cons);
    cons->qc.st_next = st_start;
    cons->qc.st_filter = filter;
    cons->ch = ch;
    cons->tag = sl_xstrndup((const char *)tag.p, tag.len);
    cons->tag_len = tag.len;
    cons->prefetch = b->no_ack ? 0 : ch->prefetch_next;
    cons->qc.ops = &broker_consumer_ops;
    cons->qc.ctx = cons;
    cons->qc.priority = priority;
    cons->qc.no_ack = b->no_ack;
    cons->qc.exclusive = b->exclusive;
    sl_err e = qm_consumer_attach(q, &cons->qc);
    if (e != SL_OK) {
        qm_stream_filter_free(filter);
        sl_free(cons->tag);
        sl_free(cons);
        broker_channel_error(ch, e, id, "queue '%s' in vhost '%s' in exclusive use", q->name,
                             ch->c->vhost->name);
        return;
    }
    broker_channel_add_consumer(ch, cons);
    /* consume-ok goes out now; deliveries follow from dispatch at the end of the turn. */
    amqp_method ok = {.id = AMQP_BASIC_CONSUME_OK};
    ok.u.basic_consume_ok.consumer_tag = amqp_cstr(cons->tag);
    send_reply(ch, &ok, b->nowait);
    qm_queue_schedule_dispatch(q);
}

static void cancel(channel *ch, const amqp_basic_cancel *b)
{
    consumer *cons = broker_channel_find_consumer(ch, b->consumer_tag.p, b->consumer_tag.len);
    if (!cons)
        broker_reply_to_cancel(ch, b->consumer_tag);
    if (cons) {
        broker_channel_unlink_consumer(ch, cons);
        if (cons->qc.queue)
            qm_consumer_detach(&cons->qc);
        broker_consumer_free(cons);
    }
    /* Cancelling an unknown tag is answered with cancel-ok (RabbitMQ). */
    amqp_method ok = {.id = AMQP_BASIC_CANCEL_OK};
    ok.u.basic_cancel_ok.consumer_tag = b->consumer_tag;
    send_reply(ch, &ok, b->nowait);
}

static void publish(channel *ch, const amqp_basic_publish *p)
{
    const uint32_t id = AMQP_BASIC_PUBLISH;
    if (p->immediate) {
        broker_conn_error(ch->c, SL_ERR_NOT_IMPLEMENTED, id, "immediate=true");
        return;
    }
    /* Write on the exchange, checked once per channel, exchange name and generation of the
     * access module: a channel publishing to one exchange pays for it once. */
    acc_db *a = ch->c->b->n->acc;
    int same = ch->pub_names && ch->pub_exchange_len == p->exchange.len &&
               memcmp(ch->pub_names, p->exchange.p, p->exchange.len) == 0;
    uint64_t gen = acc_generation(a);
    /* A link's publishes are not routed: they are enqueued at tx.commit into the queues they
     * name, each checked there (link_recv.c, acc_check_link_write). */
    if ((!same || ch->pub_acc_gen != gen) && !ch->c->is_link) {
        if (!broker_channel_allowed(ch, ACC_EXCHANGE, p->exchange, ACC_WRITE, id))
            return;
    }
    qm_exchange *x = ch->pub_exchange;
    if (!x || ch->pub_exchange_epoch != qm_exchange_epoch || !same) {
        if (ch->c->is_link && broker_link_recv_control_exchange(p->exchange))
            x = qm_exchange_find(ch->c->vhost, "", 0); /* not routed: broker_link_recv_publish */
        else
            x = qm_exchange_find(ch->c->vhost, (const char *)p->exchange.p, p->exchange.len);
        ch->pub_exchange = x;
        ch->pub_exchange_epoch = qm_exchange_epoch;
    }
    if (!x) {
        broker_channel_error(ch, SL_ERR_NOT_FOUND, id, "no exchange '" BYTES_FMT "' in vhost '%s'",
                             BYTES_ARG(p->exchange), ch->c->vhost->name);
        return;
    }
    if (x->internal) {
        broker_channel_error(ch, SL_ERR_ACCESS_REFUSED, id,
                             "cannot publish to internal exchange '%s' in vhost '%s'", x->name,
                             ch->c->vhost->name);
        return;
    }
    if (!same || ch->pub_acc_gen != gen)
        ch->pub_topic_check = !ch->c->is_link && x->type == QM_EX_TOPIC &&
                              acc_has_topic_perms(a, ch->c->user, ch->c->vhost->name, x->name);
    if (ch->pub_topic_check && !broker_channel_topic_allowed(ch, x, p->routing_key, ACC_WRITE, id))
        return;
    ch->c->has_published = 1;
    node_check_disk_step(ch->c->b->n); /* the publishes before it may have filled the disk */
    if (ch->c->b->n->alarms && !ch->c->read_paused)
        broker_block_publisher(ch->c); /* this publish completes; the next waits */
    if (!ch->pub_names)
        ch->pub_names = sl_xmalloc(2 * PUB_RK_AT);
    /* The codec bounds short strings at 255 bytes. */
    memcpy(ch->pub_names, p->exchange.p, p->exchange.len);
    ch->pub_names[p->exchange.len] = 0;
    ch->pub_exchange_len = (uint8_t)p->exchange.len;
    ch->pub_acc_gen = gen; /* pub_names is the exchange just allowed */
    memcpy(ch->pub_names + PUB_RK_AT, p->routing_key.p, p->routing_key.len);
    ch->pub_rk_len = (uint8_t)p->routing_key.len;
    ch->pub_mandatory = p->mandatory;
    ch->content = CONTENT_WANT_HEADER;
}

static void send_return(channel *ch, const qm_message *msg)
{
    amqp_method r = {.id = AMQP_BASIC_RETURN};
    r.u.basic_return.reply_code = 312;
    r.u.basic_return.reply_text = AMQP_BYTES("NO_ROUTE");
    r.u.basic_return.exchange = qm_msg_exchange(msg);
    r.u.basic_return.routing_key = qm_msg_routing_key(msg);
    broker_conn_send_method(ch->c, ch->id, &r);
    broker_write_content(ch->c, ch->id, msg);
}

/* Publishes in a row that found every earlier confirm sent, after which a channel that
 * pipelined is taken to wait for each confirm again (its syncs are no longer paced). */
#define PIPE_QUIET 16

void broker_basic_publish_complete(channel *ch)
{
    qm_message *msg = ch->pub_msg;
    ch->pub_msg = NULL;
    if (ch->c->is_link) {
        ch->content = CONTENT_NONE;
        broker_link_recv_publish(ch, msg); /* decided as a batch at tx.commit */
        return;
    }
    uint64_t seq = ch->confirm ? ++ch->pub_seq : 0;
    /* Deleted since the method frame? Then it is looked up again (and may be missing). */
    if (ch->pub_exchange_epoch != qm_exchange_epoch) {
        ch->pub_exchange = qm_exchange_find(ch->c->vhost, ch->pub_names, ch->pub_exchange_len);
        ch->pub_exchange_epoch = qm_exchange_epoch;
    }
    qm_exchange *x = ch->pub_exchange;
    int mandatory = ch->pub_mandatory;
    ch->content = CONTENT_NONE;
    if (!x) {
        /* Deleted between the method frame and the last body frame. */
        broker_channel_error(ch, SL_ERR_NOT_FOUND, AMQP_BASIC_PUBLISH,
                             "no exchange '" BYTES_FMT "' in vhost '%s'",
                             BYTES_ARG(qm_msg_exchange(msg)), ch->c->vhost->name);
        qm_message_unref(msg);
        return;
    }
    amqp_bytes headers = {0};
    if (ch->pub_headers_len)
        headers = (amqp_bytes){qm_msg_props(msg) + ch->pub_headers_off, ch->pub_headers_len};

    size_t n = 0;
    int ok = 1, delivered;
    /* What this publish appends to the store is what its confirm waits for. */
    uint64_t mark = node_mark(ch->c->b->n);
    if (broker_reply_to_route(ch, msg, &delivered))
        n = (size_t)delivered; /* a direct reply: straight to the requesting channel */
    else /* x-overflow=reject-publish refusals come back as SL_ERR_RESOURCE: a nack */
        ok = qm_publish_bcc(x, msg, headers,
                            (amqp_bytes){sl_buf_head(&ch->pub_bcc), sl_buf_unread(&ch->pub_bcc)},
                            ch->tx_mode ? ch->tx : NULL, &n) == SL_OK;
    sl_buf_consume(&ch->pub_bcc, sl_buf_unread(&ch->pub_bcc));
    if (n == 0 && mandatory)
        send_return(ch, msg);
    qm_message_unref(msg);
    if (ch->confirm) {
        /* A publisher that waits for each confirm never has an earlier one unsent when it
         * publishes; one that pipelines does, and its syncs may be paced (broker.c). The mark
         * lasts (a pipelining publisher's first message after its confirms caught up looks
         * like a waiting one's) until PIPE_QUIET publishes in a row found nothing unsent. */
        if (seq > 1 && ch->confirm_done < seq - 1) {
            ch->pipelines = 1;
            ch->pipe_quiet = 0;
        } else if (ch->pipelines && ++ch->pipe_quiet >= PIPE_QUIET) {
            ch->pipelines = 0;
        }
        uint64_t gen;
        if (ch->pipelines) {
            /* Lazy only while the connection's input keeps coming: the sync is hastened as
             * soon as the loop has read all there is (conn.c, input_idle), so a publisher
             * that stops to wait for its confirms is never held by the pace. */
            gen = node_ticket_since_lazy(ch->c->b->n, mark);
            if (gen > ch->c->lazy_gen)
                ch->c->lazy_gen = gen;
        } else {
            gen = node_ticket_since(ch->c->b->n, mark);
        }
        broker_channel_confirm(ch, seq, ok, gen);
    }
}

static void get(channel *ch, const amqp_basic_get *g)
{
    qm_queue *q = broker_channel_queue_checked(ch, g->queue, ACC_READ, AMQP_BASIC_GET);
    if (!q)
        return;
    if (q->is_outgoing) {
        broker_channel_error(ch, SL_ERR_ACCESS_REFUSED, AMQP_BASIC_GET,
                             "'%s' is an outgoing queue: only its link takes messages from it",
                             q->name);
        return;
    }
    if (q->stream) {
        broker_channel_error(ch, SL_ERR_NOT_IMPLEMENTED, AMQP_BASIC_GET,
                             "basic.get not supported by stream queues queue '%s' in vhost '%s'",
                             q->name, ch->c->vhost->name);
        return;
    }
    if (q->args.quorum && q->args.single_active) {
        broker_channel_error(
            ch, SL_ERR_RESOURCE_LOCKED, AMQP_BASIC_GET,
            "cannot obtain access to locked queue '%s' in vhost '%s'. basic.get "
            "operations are not supported by quorum queues with single active consumer",
            q->name, ch->c->vhost->name);
        return;
    }
    uint64_t remaining = 0;
    qm_position *pos = qm_queue_get(q, g->no_ack, &remaining);
    if (!pos) {
        amqp_method e = {.id = AMQP_BASIC_GET_EMPTY};
        broker_conn_send_method(ch->c, ch->id, &e);
        return;
    }
    broker_hold_delivery(ch->c); /* its delivery mark reaches the file first */
    amqp_method m = {.id = AMQP_BASIC_GET_OK};
    m.u.basic_get_ok.redelivered = pos->redelivered;
    m.u.basic_get_ok.exchange = qm_msg_exchange(pos->msg);
    m.u.basic_get_ok.routing_key = qm_msg_routing_key(pos->msg);
    m.u.basic_get_ok.message_count = remaining > UINT32_MAX ? UINT32_MAX : (uint32_t)remaining;
    /* a quorum queue's get-ok always carries x-delivery-count (RabbitMQ 3.10.8 does) */
    sl_buf qp = {0};
    int own = qm_delivery_props(pos->msg, qm_last_delivery_count(), 1, &qp);
    const uint8_t *props = own ? sl_buf_head(&qp) : qm_msg_props(pos->msg);
    size_t props_len = own ? sl_buf_unread(&qp) : pos->msg->props_len;
    if (g->no_ack) {
        q->stat_get_no_ack++;
        m.u.basic_get_ok.delivery_tag = ++ch->next_tag;
        broker_conn_send_method(ch->c, ch->id, &m);
        broker_write_content_props(ch->c, ch->id, pos->msg, props, props_len);
        qm_position_ack(pos);
    } else {
        q->stat_get++;
        /* Track first: the tag is assigned by the record. */
        m.u.basic_get_ok.delivery_tag = broker_channel_track(ch, pos, NULL);
        broker_conn_send_method(ch->c, ch->id, &m);
        broker_write_content_props(ch->c, ch->id, pos->msg, props, props_len);
    }
    sl_buf_free(&qp);
}

static void settle(channel *ch, uint32_t id, uint64_t tag, int multiple, int how)
{
    if (broker_channel_settle(ch, tag, multiple, how) < 0)
        broker_channel_error(ch, SL_ERR_PRECONDITION, id, "unknown delivery tag %llu",
                             (unsigned long long)tag);
}

static void recover(channel *ch, uint32_t id, int requeue)
{
    if (!requeue) {
        broker_conn_error(ch->c, SL_ERR_NOT_IMPLEMENTED, id, "requeue=false");
        return;
    }
    broker_channel_settle(ch, 0, 1, QM_SETTLE_REQUEUE);
    if (id == AMQP_BASIC_RECOVER) {
        amqp_method ok = {.id = AMQP_BASIC_RECOVER_OK};
        broker_conn_send_method(ch->c, ch->id, &ok);
    }
}

void broker_h_basic(channel *ch, const amqp_method *m)
{
    switch (m->id) {
    case AMQP_BASIC_QOS:
        qos(ch, &m->u.basic_qos);
        return;
    case AMQP_BASIC_CONSUME:
        consume(ch, &m->u.basic_consume);
        return;
    case AMQP_BASIC_CANCEL:
        cancel(ch, &m->u.basic_cancel);
        return;
    case AMQP_BASIC_PUBLISH:
        publish(ch, &m->u.basic_publish);
        return;
    case AMQP_BASIC_GET:
        get(ch, &m->u.basic_get);
        return;
    case AMQP_BASIC_ACK:
        settle(ch, m->id, m->u.basic_ack.delivery_tag, m->u.basic_ack.multiple, QM_SETTLE_ACK);
        return;
    case AMQP_BASIC_REJECT:
        settle(ch, m->id, m->u.basic_reject.delivery_tag, 0,
               m->u.basic_reject.requeue ? QM_SETTLE_REQUEUE : QM_SETTLE_REJECT);
        return;
    case AMQP_BASIC_NACK:
        settle(ch, m->id, m->u.basic_nack.delivery_tag, m->u.basic_nack.multiple,
               m->u.basic_nack.requeue ? QM_SETTLE_REQUEUE : QM_SETTLE_REJECT);
        return;
    case AMQP_BASIC_RECOVER:
        recover(ch, m->id, m->u.basic_recover.requeue);
        return;
    case AMQP_BASIC_RECOVER_ASYNC:
        recover(ch, m->id, m->u.basic_recover_async.requeue);
        return;
    default:
        broker_conn_error(ch->c, SL_ERR_COMMAND_INVALID, m->id, "unexpected method %s",
                          amqp_method_name(m->id));
    }
}

void broker_h_tx(channel *ch, const amqp_method *m)
{
    amqp_method ok = {0};
    switch (m->id) {
    case AMQP_TX_SELECT:
        if (ch->confirm) {
            broker_channel_error(ch, SL_ERR_PRECONDITION, m->id,
                                 "cannot switch from confirm to tx mode");
            return;
        }
        ch->tx_mode = 1;
        if (!ch->tx)
            ch->tx = qm_tx_begin(ch->c->b->n->qm);
        ok.id = AMQP_TX_SELECT_OK;
        break;
    case AMQP_TX_COMMIT:
    case AMQP_TX_ROLLBACK:
        if (!ch->tx_mode) {
            broker_channel_error(ch, SL_ERR_PRECONDITION, m->id, "channel is not transactional");
            return;
        }
        if (m->id == AMQP_TX_COMMIT && broker_link_recv_commit(ch))
            return;
        if (m->id == AMQP_TX_COMMIT) {
            uint64_t mark = node_mark(ch->c->b->n);
            sl_err e = qm_tx_commit(ch->tx);
            ch->tx = NULL;
            broker_channel_tx_settled(ch, 1);
            ch->tx = qm_tx_begin(ch->c->b->n->qm);
            if (e != SL_OK) {
                broker_channel_error(ch, e, m->id, "transaction could not be committed");
                return;
            }
            /* commit-ok promises the commit's records are on disk. */
            ok.id = AMQP_TX_COMMIT_OK;
            broker_channel_send_after(ch, &ok, 0, node_ticket_since(ch->c->b->n, mark));
            return;
        } else {
            qm_tx_abort(ch->tx);
            ch->tx = NULL;
            broker_channel_tx_settled(ch, 0);
            ch->tx = qm_tx_begin(ch->c->b->n->qm);
            ok.id = AMQP_TX_ROLLBACK_OK;
        }
        break;
    default:
        broker_conn_error(ch->c, SL_ERR_COMMAND_INVALID, m->id, "unexpected method %s",
                          amqp_method_name(m->id));
        return;
    }
    broker_conn_send_method(ch->c, ch->id, &ok);
}

void broker_h_confirm(channel *ch, const amqp_method *m)
{
    if (m->id != AMQP_CONFIRM_SELECT) {
        broker_conn_error(ch->c, SL_ERR_COMMAND_INVALID, m->id, "unexpected method %s",
                          amqp_method_name(m->id));
        return;
    }
    if (ch->tx_mode) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, m->id,
                             "cannot switch from tx to confirm mode");
        return;
    }
    ch->confirm = 1;
    amqp_method ok = {.id = AMQP_CONFIRM_SELECT_OK};
    send_reply(ch, &ok, m->u.confirm_select.nowait);
}
