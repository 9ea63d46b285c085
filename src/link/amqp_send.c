/* amqp_send.c - the AMQP 0-9-1 sender of an outgoing queue: the link as the queue's only
 * consumer, link transactions (the data publishes, the EOD control message, tx.commit) to a
 * Sluice node, or publisher confirms to a foreign broker; the client handshake, the
 * destination's methods, NACK refusals and basic.return.
 *
 * Invariants: a transaction is never split across link transactions; a batch's order ack
 * (commit-ok, or confirms up to it) acks its positions, oldest first.
 */
#include "link/link_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "amqp/table.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/version.h"

/* ------------------------------------------------------------------------------------------
 * The consumer: the queue hands messages over while the window has room
 */

int link_can_take(qm_consumer *c)
{
    link_outq *o = c->ctx;
    if (o->cs != C_OPEN || o->paused || !o->m->online)
        return 0;
    if (o->in_unit)
        return 1; /* a transaction is never split: take the rest of it */
    if (o->msmq)  /* the session window: packets the receiver has not acknowledged */
        return o->mq_sent - o->mq_peer_acked < o->mq_window && o->fl_len < 65536 &&
               sl_buf_unread(&o->out) < OUT_HIGH;
    if (o->bt_len >= o->m->o.window_batches)
        return 0;
    return sl_buf_unread(&o->out) < OUT_HIGH;
}

/* To a foreign broker a message without a message-id gets one that is the same on every
 * resend, so a consumer there can deduplicate (at least once): "sluice-<sending node id, 32
 * hex>-<SeqID>-<SeqNo>". NULL: the properties go as they are (they have an id, or do not
 * decode). */
static const sl_buf *foreign_props(link_outq *o, const qm_message *msg, uint64_t seq)
{
    amqp_basic_props bp;
    if (amqp_props_decode(qm_msg_props(msg), msg->props_len, &bp) < 0 ||
        (bp.flags & AMQP_P_MESSAGE_ID))
        return NULL;
    char id[96];
    snprintf(id, sizeof id, "sluice-%s-%llu-%llu", o->m->node_id_hex,
             (unsigned long long)o->es.seq_id, (unsigned long long)seq);
    bp.flags |= AMQP_P_MESSAGE_ID;
    bp.message_id = amqp_cstr(id);
    sl_buf *b = &o->m->props_scratch;
    b->len = b->off = 0;
    amqp_props_encode(b, &bp);
    return b;
}

static void write_publish(link_outq *o, const qm_message *msg, uint64_t seq)
{
    amqp_method pm = {.id = AMQP_BASIC_PUBLISH};
    pm.u.basic_publish.exchange = AMQP_BYTES("");
    pm.u.basic_publish.routing_key = amqp_cstr(o->dest.queue);
    pm.u.basic_publish.mandatory = !o->peer_is_sluice; /* a foreign basic.return: not delivered */
    amqp_method_write(&o->out, 1, &pm);
    o->pub_tag++;
    const sl_buf *fp = o->peer_is_sluice ? NULL : foreign_props(o, msg, seq);
    if (fp)
        amqp_content_header_write(&o->out, 1, msg->body_len, fp->data, fp->len);
    else
        amqp_content_header_write(&o->out, 1, msg->body_len, qm_msg_props(msg), msg->props_len);
    const uint8_t *body = qm_msg_body(msg);
    size_t chunk = o->frame_max - AMQP_FRAME_OVERHEAD;
    for (uint64_t off = 0; off < msg->body_len; off += chunk) {
        size_t n = msg->body_len - off < chunk ? (size_t)(msg->body_len - off) : chunk;
        amqp_frame_write(&o->out, AMQP_FRAME_BODY, 1, body + off, n);
    }
}

void link_close_batch(link_outq *o)
{
    if (!o->open_n)
        return;
    if (o->msmq) { /* MS-MQQB: every message stands alone, acks complete them */
        o->open_n = 0;
        o->open_bytes = 0;
        link_mark_dirty(o);
        return;
    }
    if (o->peer_is_sluice) {
        link_mgr *m = o->m;
        sl_buf *b = &m->scratch;
        b->len = 0;
        b->off = 0;
        eod_batch_encode(b, m->node_id, m->node_name, o->es.seq_id, o->open_first_prev,
                         o->open_seqs, (uint32_t)o->open_n);
        amqp_method pm = {.id = AMQP_BASIC_PUBLISH};
        pm.u.basic_publish.exchange = AMQP_BYTES("sluice.eod");
        pm.u.basic_publish.routing_key = AMQP_BYTES("batch");
        amqp_method_write(&o->out, 1, &pm);
        uint64_t due = link_reach_deadline(m, o->open_seqs[0]);
        if (!due && m->o.reach_queue_ms)
            due = sl_wall_ms() + m->o.reach_queue_ms; /* younger than any sample: later */
        if (due) {
            /* the receiver refuses what is past it (link.h "NACKs"): the first message's
             * deadline, the earliest of the batch (never earlier than the true one) */
            sl_buf *hp = &m->props_scratch;
            hp->len = hp->off = 0;
            amqp_basic_props bp = {0};
            sl_buf hb;
            sl_buf_init(&hb);
            size_t mark = amqp_tbl_begin(&hb);
            amqp_tbl_put_long(&hb, LINK_REACH_DEADLINE, (int64_t)due);
            amqp_tbl_end(&hb, mark);
            bp.flags = AMQP_P_HEADERS;
            bp.headers = (amqp_bytes){hb.data + mark + 4, hb.len - mark - 4};
            amqp_props_encode(hp, &bp);
            sl_buf_free(&hb);
            amqp_content_header_write(&o->out, 1, b->len, hp->data, hp->len);
        } else {
            uint8_t noprops[2] = {0, 0};
            amqp_content_header_write(&o->out, 1, b->len, noprops, 2);
        }
        amqp_frame_write(&o->out, AMQP_FRAME_BODY, 1, b->data, b->len);
        amqp_method cm = {.id = AMQP_TX_COMMIT};
        amqp_method_write(&o->out, 1, &cm);
    }
    link_bt_push(o, o->open_n);
    o->open_n = 0;
    o->open_bytes = 0;
    link_mark_dirty(o);
}

static void c_deliver(qm_consumer *c, qm_position *pos)
{
    link_outq *o = c->ctx;
    link_mgr *m = o->m;
    qm_pos_set_holder(pos, o);
    uint64_t seq = pos->lookup_id;
    /* The number must survive a crash before it is sent (transient messages have no
     * enqueue record to carry it): reserved in meta, synced before link_mgr_flush. */
    if (m->store)
        persist_reserve_lookup(m->store, seq);
    if (!o->fl_len)
        eod_send_arm(&o->es, resend_table(m), sl_loop_now(m->loop));
    link_fl_push(o, pos, seq);
    if (seq > o->sent_hwm)
        o->sent_hwm = seq;
    if (seq > o->sent_durable && m->store && o->q->durable) {
        /* Reserve ahead: after a crash, a message above the reservation is known never to
         * have been sent (TimeToReachQueue may then dead-letter it on this node's clock).
         * About ten seconds of lookup ids ahead, so this costs a meta record (and this turn's
         * sync, which the send waits for anyway) every ten seconds or so while sending. */
        uint64_t ahead = m->id_rate * 10 < 4096 ? 4096 : m->id_rate * 10;
        o->sent_durable = m->node->next_lookup_id + ahead;
        persist_outq_sent_set(m->store, o->q->incarnation, o->sent_durable);
    }
    if (o->msmq) {
        link_mq_write_message(o, pos, seq, link_fl_at(o, o->fl_len - 1));
        o->sent++;
        o->in_unit = 0; /* each MSMQ message is its own transaction (FM and LM) */
        o->idle_since = 0;
        link_mark_dirty(o);
        return;
    }
    uint64_t prev = eod_send_next(&o->es, seq);
    if (o->open_n == o->open_cap) {
        o->open_cap = o->open_cap ? o->open_cap * 2 : 256;
        o->open_seqs = sl_xrealloc(o->open_seqs, o->open_cap * sizeof *o->open_seqs);
    }
    if (!o->open_n)
        o->open_first_prev = prev;
    o->open_seqs[o->open_n++] = seq;
    o->open_bytes += pos->msg->body_len;
    write_publish(o, pos->msg, seq);
    o->sent++;
    o->in_unit = pos->xact_cont;
    o->idle_since = 0;
    if (!o->in_unit &&
        (o->one_unit || o->open_n >= m->o.batch_msgs || o->open_bytes >= m->o.batch_bytes))
        link_close_batch(o);
    link_mark_dirty(o);
}

static void c_cancelled(qm_consumer *c)
{
    link_outq *o = c->ctx;
    o->attached = 0; /* the queue is going away; link_on_queue_deleted follows */
}

static const qm_consumer_ops link_consumer_ops = {
    .can_take = link_can_take, .deliver = c_deliver, .cancelled = c_cancelled};

static void attach(link_outq *o)
{
    if (o->attached || !o->q)
        return;
    memset(&o->qc, 0, sizeof o->qc);
    o->qc.ops = &link_consumer_ops;
    o->qc.ctx = o;
    o->qc.is_link = 1;
    if (qm_consumer_attach(o->q, &o->qc) == SL_OK) {
        o->attached = 1;
        qm_queue_schedule_dispatch(o->q);
    }
}

void link_detach(link_outq *o)
{
    if (o->attached) {
        qm_consumer_detach(&o->qc);
        o->attached = 0;
    }
}

static void send_frames_handshake_start_ok(link_outq *o)
{
    link_mgr *m = o->m;
    link_need_node_id(m);
    sl_buf props;
    sl_buf_init(&props);
    size_t mark = amqp_tbl_begin(&props);
    amqp_tbl_put_str(&props, "product", AMQP_BYTES(SLUICE_PRODUCT " link"));
    amqp_tbl_put_str(&props, "version", AMQP_BYTES(SLUICE_VERSION));
    amqp_tbl_put_str(&props, "connection_name", amqp_cstr(o->name));
    size_t cmark = amqp_tbl_put_table_begin(&props, "capabilities");
    amqp_tbl_put_bool(&props, "publisher_confirms", 1);
    amqp_tbl_put_bool(&props, "connection.blocked", 1);
    amqp_tbl_put_bool(&props, "authentication_failure_close", 1);
    amqp_tbl_end(&props, cmark);
    if (o->peer_is_sluice) {
        /* what makes the receiver treat this connection as a link */
        size_t lmark = amqp_tbl_put_table_begin(&props, "sluice_link");
        amqp_tbl_put_long(&props, "version", 1);
        amqp_tbl_put_str(&props, "node_id", amqp_cstr(m->node_id_hex));
        amqp_tbl_put_str(&props, "node_name", amqp_cstr(m->node_name));
        amqp_tbl_end(&props, lmark);
    }
    amqp_tbl_end(&props, mark);
    sl_buf resp;
    sl_buf_init(&resp);
    sl_buf_put_u8(&resp, 0);
    sl_buf_append(&resp, m->o.user, strlen(m->o.user));
    sl_buf_put_u8(&resp, 0);
    sl_buf_append(&resp, m->o.password, strlen(m->o.password));
    amqp_method so = {.id = AMQP_CONNECTION_START_OK};
    so.u.connection_start_ok.client_properties =
        (amqp_bytes){props.data + mark + 4, props.len - mark - 4};
    so.u.connection_start_ok.mechanism = AMQP_BYTES("PLAIN");
    so.u.connection_start_ok.response = (amqp_bytes){resp.data, resp.len};
    so.u.connection_start_ok.locale = AMQP_BYTES("en_US");
    amqp_method_write(&o->out, 0, &so);
    sl_buf_free(&props);
    sl_buf_free(&resp);
}

void link_on_connected(link_outq *o)
{
    if (o->msmq) {
        link_mq_on_connected(o);
        return;
    }
    sl_buf_append(&o->out, amqp_protocol_header, 8);
    o->cs = C_START;
    o->cs_since = sl_loop_now(o->m->loop);
    link_mark_dirty(o);
}

void link_became_open(link_outq *o)
{
    if (o->reopening) {
        /* channel 1 again after a NACK: the connection (and its history) never went */
        o->reopening = 0;
        o->cs = C_OPEN;
        o->idle_since = 0;
        eod_send_session(&o->es);
        attach(o);
        return;
    }
    o->cs = C_OPEN;
    o->failures = 0;
    if (!o->blocked) /* blocked during the login: that is still what holds it up */
        o->last_error[0] = 0;
    o->idle_since = 0;
    link_hist_add(o, H_ESTABLISHED, 0);
    eod_send_session(&o->es);
    o->pub_tag = 0;
    sl_info("link %s: connected to %s:%d (%s)", o->name, o->peer_addr, o->dest.port,
            o->msmq             ? "MSMQ queue manager, MS-MQQB"
            : o->peer_is_sluice ? "Sluice node, exactly once"
                                : "foreign broker, at least once");
    attach(o);
    if (o->calls && o->peer_is_sluice)
        link_rpc_start(o);
    else if (o->calls)
        link_fail_calls(o, 0, "the destination is not a Sluice node: no requests");
}

/* "[MQMSG_CLASS_x last=N]" in a refusal's text (link.h "NACKs"): 1 with the class and N. */
static int parse_nack(amqp_bytes text, uint32_t *cls, uint64_t *last, const char **detail)
{
    char t[300];
    snprintf(t, sizeof t, "%.*s", (int)(text.len < 299 ? text.len : 299), (const char *)text.p);
    const char *b = strstr(t, "[MQMSG_CLASS_");
    if (!b)
        return 0;
    static const struct {
        const char *name;
        uint32_t cls;
    } known[] = {{LINK_NACK_BAD_DST_Q, CLASS_NACK_BAD_DST_Q},
                 {LINK_NACK_Q_EXCEED_QUOTA, CLASS_NACK_Q_EXCEED_QUOTA},
                 {LINK_NACK_REACH_QUEUE_TIMEOUT, CLASS_NACK_REACH_QUEUE_TIMEOUT}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        size_t l = strlen(known[i].name);
        if (strncmp(b + 1, known[i].name, l) || strncmp(b + 1 + l, " last=", 6))
            continue;
        char *end;
        unsigned long long n = strtoull(b + 1 + l + 6, &end, 10);
        if (*end != ']')
            return 0;
        *cls = known[i].cls;
        *last = n;
        *detail = (const char *)text.p + (end + 1 - t) + (end[1] == ' ');
        return 1;
    }
    return 0;
}

/* After the destination closed channel 1 over a NACK: confirm the close and open the channel
 * again; what was in flight is sendable again (the closed channel applied none of it). */
static void reopen_channel(link_outq *o)
{
    amqp_method ok = {.id = AMQP_CHANNEL_CLOSE_OK};
    amqp_method_write(&o->out, 1, &ok);
    link_detach(o);
    link_requeue_all(o);
    o->es.resend_due_ms = 0; /* nothing in flight */
    eod_send_session(&o->es);
    amqp_method co = {.id = AMQP_CHANNEL_OPEN};
    amqp_method_write(&o->out, 1, &co);
    o->cs = C_CHANNEL;
    o->cs_since = sl_loop_now(o->m->loop);
    o->reopening = 1;
    link_mark_dirty(o);
}

/* How many transactions (units) the first n in-flight messages hold. */
static size_t units_in_flight(link_outq *o, size_t n)
{
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        u += link_fl_at(o, i)->pos && !link_fl_at(o, i)->pos->xact_cont;
    return u;
}

/* The destination refused the oldest outstanding batch with a NACK: forget its duplicates
 * (<= last: they arrived before), then dead-letter it when the NACK says it can never be
 * taken. 1 when handled (the link goes on on a new channel), 0 when the caller should treat
 * it as any refusal (retry after a backoff). */
static int handle_nack(link_outq *o, uint32_t cls, uint64_t last, const char *detail,
                       const char *text)
{
    size_t n = o->bt[o->bt_head];
    size_t dup = 0;
    while (dup < n && dup < o->fl_len && link_fl_at(o, dup)->seq <= last)
        dup++;
    if (dup) {
        uint64_t since = o->bad_dst_since; /* duplicates arrived before: not a delivery now */
        o->bt[o->bt_head] -= dup;
        n -= dup;
        link_ack_front(o, dup);
        o->bad_dst_since = since;
    }
    /* the closed channel applied nothing after `last`: what was sent after it is known not to
     * have arrived (no longer in doubt) */
    o->sent_hwm = last > o->es.last_ack ? last : o->es.last_ack;
    uint64_t now = sl_loop_now(o->m->loop);
    int dl = 0;
    switch (cls) {
    case CLASS_NACK_BAD_DST_Q:
        if (!o->bad_dst_since)
            o->bad_dst_since = now ? now : 1;
        dl = now - o->bad_dst_since >= o->m->o.bad_queue_grace_ms;
        break;
    case CLASS_NACK_Q_EXCEED_QUOTA:
        dl = units_in_flight(o, n) == 1; /* else: one transaction at a time (one_unit) */
        break;
    default: {
        /* past its time to reach queue there: dead-letter by this node's clock what is (the
         * destination's clock may be ahead: then this waits for ours, after a backoff) */
        link_requeue_all(o);
        size_t swept = link_reach_sweep(o, sl_wall_ms());
        if (!swept)
            return 0;
        link_set_error(o, text);
        reopen_channel(o);
        return 1;
    }
    }
    if (!dl || !n)
        return 0;
    qm_position **pos = sl_xmalloc(n * sizeof *pos);
    for (size_t i = 0; i < n; i++) {
        pos[i] = link_fl_at(o, 0)->pos;
        o->fl_head = (o->fl_head + 1) % o->fl_cap;
        o->fl_len--;
    }
    o->bt_head = (o->bt_head + 1) % o->bt_cap;
    o->bt_len--;
    link_dead_letter(o, pos, n, cls, detail);
    sl_free(pos);
    link_set_error(o, text);
    reopen_channel(o);
    return 1;
}

static void on_close_method(link_outq *o, const amqp_method *mm, int channel_level)
{
    const amqp_connection_close *cc = &mm->u.connection_close;
    uint32_t cls;
    uint64_t last;
    const char *detail;
    if (channel_level && o->cs == C_OPEN && o->peer_is_sluice && o->bt_len && o->q &&
        parse_nack(cc->reply_text, &cls, &last, &detail)) {
        char text[256], det[256];
        snprintf(text, sizeof text, "channel closed by the destination: %u %.*s", cc->reply_code,
                 (int)cc->reply_text.len, (const char *)cc->reply_text.p);
        snprintf(det, sizeof det, "%.*s",
                 (int)(cc->reply_text.len - (size_t)(detail - (const char *)cc->reply_text.p)),
                 detail);
        if (handle_nack(o, cls, last, det, text))
            return;
    }
    if (channel_level && cc->reply_code == 405)
        o->one_unit = 256; /* the destination queue is full: whole transactions one by one */
    if (!channel_level) {
        amqp_method ok = {.id = AMQP_CONNECTION_CLOSE_OK};
        amqp_method_write(&o->out, 0, &ok);
        /* best effort: the socket is closed right after */
        if (sl_buf_unread(&o->out))
            o->io.ops->write(&o->io, sl_buf_head(&o->out), sl_buf_unread(&o->out));
    }
    link_outq_fail(o, H_NOT_READY, 1, "%s closed by the destination: %u %.*s",
                   channel_level ? "channel" : "connection", cc->reply_code,
                   (int)cc->reply_text.len, (const char *)cc->reply_text.p);
}

/* connection.blocked / unblocked (RabbitMQ's extension, asked for in start-ok): a
 * destination short of disk or memory sends it at any point after connection.open, during
 * the rest of the login too. The link stays connected and waits; its messages go on once
 * the destination reads again (the resend timer is not run meanwhile). */
static void set_blocked(link_outq *o, const amqp_method *mm)
{
    if (mm->id == AMQP_CONNECTION_BLOCKED) {
        o->blocked = 1;
        snprintf(o->last_error, sizeof o->last_error, "destination blocked: %.*s",
                 (int)mm->u.connection_blocked.reason.len,
                 (const char *)mm->u.connection_blocked.reason.p);
        o->last_error_time = wall_s();
        sl_info("link to %s: destination blocked (%.*s); waiting, connected", o->dest.host,
                (int)mm->u.connection_blocked.reason.len,
                (const char *)mm->u.connection_blocked.reason.p);
    } else {
        if (o->blocked)
            sl_info("link to %s: destination unblocked", o->dest.host);
        o->blocked = 0;
        o->last_error[0] = 0;
    }
}

static void handle_method(link_outq *o, uint16_t ch, const amqp_method *mm)
{
    link_mgr *m = o->m;
    if (mm->id == AMQP_CONNECTION_CLOSE) {
        on_close_method(o, mm, 0);
        return;
    }
    if (ch == 0 && o->cs >= C_OPENING &&
        (mm->id == AMQP_CONNECTION_BLOCKED || mm->id == AMQP_CONNECTION_UNBLOCKED)) {
        set_blocked(o, mm);
        return;
    }
    if (mm->id == AMQP_CHANNEL_CLOSE) {
        on_close_method(o, mm, 1);
        return;
    }
    if (o->reopening && ch == 2 && link_rpc_method(o, mm))
        return; /* requests go on while channel 1 is opened again */
    switch (o->cs) {
    case C_START: {
        if (mm->id != AMQP_CONNECTION_START)
            break;
        amqp_value v;
        amqp_bytes product = {0};
        if (amqp_table_get(mm->u.connection_start.server_properties, "product", &v))
            amqp_value_str(&v, &product);
        o->peer_is_sluice = amqp_bytes_eq(product, SLUICE_PRODUCT);
        uint8_t f = o->peer_is_sluice ? LINK_FOREIGN_NO : LINK_FOREIGN_YES;
        if (f != o->foreign) {
            o->foreign = f;
            link_persist_state(o);
        }
        send_frames_handshake_start_ok(o);
        o->cs = C_TUNE;
        return;
    }
    case C_TUNE: {
        if (mm->id != AMQP_CONNECTION_TUNE)
            break;
        const amqp_connection_tune *t = &mm->u.connection_tune;
        o->frame_max =
            t->frame_max && t->frame_max < LINK_FRAME_MAX ? t->frame_max : LINK_FRAME_MAX;
        if (o->frame_max < AMQP_FRAME_MIN_SIZE)
            o->frame_max = AMQP_FRAME_MIN_SIZE;
        o->heartbeat = (uint16_t)m->o.heartbeat_s;
        amqp_method to = {.id = AMQP_CONNECTION_TUNE_OK};
        to.u.connection_tune_ok.channel_max = 8;
        to.u.connection_tune_ok.frame_max = o->frame_max;
        to.u.connection_tune_ok.heartbeat = o->heartbeat;
        amqp_method_write(&o->out, 0, &to);
        amqp_method op = {.id = AMQP_CONNECTION_OPEN};
        op.u.connection_open.virtual_host = AMQP_BYTES("/");
        amqp_method_write(&o->out, 0, &op);
        o->cs = C_OPENING;
        return;
    }
    case C_OPENING: {
        if (mm->id != AMQP_CONNECTION_OPEN_OK)
            break;
        amqp_method co = {.id = AMQP_CHANNEL_OPEN};
        amqp_method_write(&o->out, 1, &co);
        o->cs = C_CHANNEL;
        return;
    }
    case C_CHANNEL: {
        if (mm->id != AMQP_CHANNEL_OPEN_OK)
            break;
        amqp_method sel = {.id = o->peer_is_sluice ? AMQP_TX_SELECT : AMQP_CONFIRM_SELECT};
        amqp_method_write(&o->out, 1, &sel);
        o->cs = C_MODE;
        return;
    }
    case C_MODE:
        if (mm->id != (o->peer_is_sluice ? AMQP_TX_SELECT_OK : AMQP_CONFIRM_SELECT_OK))
            break;
        link_became_open(o);
        return;
    case C_OPEN:
        if (ch == 2 && link_rpc_method(o, mm))
            return;
        switch (mm->id) {
        case AMQP_TX_COMMIT_OK:
            if (!o->bt_len) {
                link_outq_fail(o, H_UNKNOWN, 1, "tx.commit-ok without an outstanding batch");
                return;
            }
            {
                size_t n = o->bt[o->bt_head];
                o->bt_head = (o->bt_head + 1) % o->bt_cap;
                o->bt_len--;
                if (o->one_unit)
                    o->one_unit--;
                link_ack_front(o, n);
            }
            return;
        case AMQP_BASIC_ACK: {
            /* foreign: publisher confirms, tag k = the k-th publish of the session */
            uint64_t tag = mm->u.basic_ack.delivery_tag;
            uint64_t base = o->pub_tag - o->fl_len; /* tag of fl[0] is base + 1 */
            if (tag <= base || tag > o->pub_tag) {
                link_outq_fail(o, H_UNKNOWN, 1, "confirm for unknown delivery tag %llu",
                               (unsigned long long)tag);
                return;
            }
            size_t idx = (size_t)(tag - base - 1);
            if (mm->u.basic_ack.multiple)
                for (size_t i = 0; i <= idx; i++)
                    link_fl_at(o, i)->acked = 1;
            else
                link_fl_at(o, idx)->acked = 1;
            size_t n = 0;
            while (n < o->fl_len && link_fl_at(o, n)->acked)
                n++;
            /* batches are bookkeeping only here */
            size_t left = n;
            while (left && o->bt_len && o->bt[o->bt_head] <= left) {
                left -= o->bt[o->bt_head];
                o->bt_head = (o->bt_head + 1) % o->bt_cap;
                o->bt_len--;
            }
            if (left && o->bt_len)
                o->bt[o->bt_head] -= left;
            link_ack_front(o, n);
            return;
        }
        case AMQP_BASIC_NACK:
            link_outq_fail(o, H_UNKNOWN, 1, "the destination refused a message (basic.nack)");
            return;
        case AMQP_BASIC_RETURN: {
            const amqp_basic_return *r = &mm->u.basic_return;
            o->skip_content = 1;
            o->skip_left = UINT64_MAX;
            o->return_code = r->reply_code;
            o->return_msgid[0] = 0;
            link_set_error(o, "");
            snprintf(o->last_error, sizeof o->last_error,
                     "the destination returned a message: %u %.*s (no queue '%.100s' there?)",
                     r->reply_code, (int)(r->reply_text.len > 60 ? 60 : r->reply_text.len),
                     (const char *)r->reply_text.p, o->dest.queue);
            return;
        }
        case AMQP_CHANNEL_FLOW: {
            amqp_method fo = {.id = AMQP_CHANNEL_FLOW_OK};
            fo.u.channel_flow_ok.active = mm->u.channel_flow.active;
            amqp_method_write(&o->out, ch, &fo);
            link_mark_dirty(o);
            return;
        }
        default:
            break;
        }
        break;
    default:
        break;
    }
    link_outq_fail(o, H_UNKNOWN, 1, "unexpected %s from the destination", amqp_method_name(mm->id));
}

/* The effective message-id of an in-flight message to a foreign broker (foreign_props). */
static int msgid_is(link_outq *o, const inflight *f, const char *id)
{
    amqp_basic_props bp;
    const qm_message *msg = f->pos->msg;
    if (amqp_props_decode(qm_msg_props(msg), msg->props_len, &bp) < 0)
        return 0;
    if (bp.flags & AMQP_P_MESSAGE_ID)
        return bp.message_id.len == strlen(id) && !memcmp(bp.message_id.p, id, bp.message_id.len);
    char own[96];
    snprintf(own, sizeof own, "sluice-%s-%llu-%llu", o->m->node_id_hex,
             (unsigned long long)o->es.seq_id, (unsigned long long)f->seq);
    return !strcmp(own, id);
}

/* A foreign broker returned a message as unroutable (312 NO_ROUTE: it has no such queue):
 * within the grace time the session starts over (0); after it the message is dead-lettered
 * (its confirm still comes and is taken as nothing) and the link goes on (1). */
static int foreign_returned(link_outq *o)
{
    if (o->return_code != 312 || !o->q)
        return 0;
    uint64_t now = sl_loop_now(o->m->loop);
    if (!o->bad_dst_since)
        o->bad_dst_since = now ? now : 1;
    if (now - o->bad_dst_since < o->m->o.bad_queue_grace_ms || !o->return_msgid[0])
        return 0;
    for (size_t i = 0; i < o->fl_len; i++) {
        inflight *f = link_fl_at(o, i);
        if (!f->pos || f->acked || !msgid_is(o, f, o->return_msgid))
            continue;
        qm_position *p = f->pos;
        f->pos = NULL;
        char why[300];
        snprintf(why, sizeof why, "no queue '%.200s' at the destination (312 NO_ROUTE)",
                 o->dest.queue);
        link_dead_letter(o, &p, 1, CLASS_NACK_BAD_DST_Q, why);
        return 1;
    }
    return 0;
}

void link_process_input(link_outq *o)
{
    if (o->msmq) {
        link_mq_process_input(o);
        return;
    }
    while (o->cs >= C_START && sl_buf_unread(&o->in) > 0) {
        amqp_frame f;
        int r = amqp_frame_parse(sl_buf_head(&o->in), sl_buf_unread(&o->in),
                                 LINK_FRAME_MAX + AMQP_FRAME_OVERHEAD, &f);
        if (r == AMQP_FEED_NEED_MORE)
            return;
        if (r < 0) {
            link_outq_fail(o, H_UNKNOWN, 1, "malformed frame from the destination (%d)", r);
            return;
        }
        o->last_recv = sl_loop_now(o->m->loop);
        if (f.type == AMQP_FRAME_METHOD) {
            amqp_method mm;
            if (amqp_method_decode(f.payload, f.size, &mm) != AMQP_DECODE_OK) {
                link_outq_fail(o, H_UNKNOWN, 1, "undecodable method from the destination");
                return;
            }
            handle_method(o, f.channel, &mm);
            if (o->cs == C_NONE)
                return; /* failed: the buffer is gone */
        } else if ((f.type == AMQP_FRAME_HEADER || f.type == AMQP_FRAME_BODY) && f.channel == 2 &&
                   o->rpc_in_reply) {
            if (link_rpc_content(o, &f) < 0)
                return;
        } else if (f.type == AMQP_FRAME_HEADER && o->skip_content) {
            amqp_content_header h;
            amqp_basic_props bp;
            if (amqp_content_header_parse(f.payload, f.size, &h) < 0 ||
                amqp_props_decode(h.props, h.props_len, &bp) < 0) {
                link_outq_fail(o, H_UNKNOWN, 1, "malformed content header from the destination");
                return;
            }
            if (bp.flags & AMQP_P_MESSAGE_ID)
                snprintf(o->return_msgid, sizeof o->return_msgid, "%.*s", (int)bp.message_id.len,
                         (const char *)bp.message_id.p);
            o->skip_left = h.body_size;
            if (!o->skip_left)
                goto returned;
        } else if (f.type == AMQP_FRAME_BODY && o->skip_content) {
            o->skip_left = f.size >= o->skip_left ? 0 : o->skip_left - f.size;
            if (!o->skip_left)
                goto returned;
        } else if (f.type != AMQP_FRAME_HEARTBEAT) {
            link_outq_fail(o, H_UNKNOWN, 1, "unexpected frame type %u from the destination",
                           f.type);
            return;
        }
        sl_buf_consume(&o->in, (size_t)r);
        continue;
    returned:
        /* A basic.return is not a delivery: keep the message, start over after a pause
         * (unless the queue is missing past the grace time: then it is dead-lettered). */
        sl_buf_consume(&o->in, (size_t)r);
        o->skip_content = 0;
        if (foreign_returned(o))
            continue;
        {
            char why[256];
            snprintf(why, sizeof why, "%s", o->last_error);
            link_outq_fail(o, H_SEND_FAILURE, 1, "%s", why);
        }
        return;
    }
}
