/* mqqb_send.c - MS-MQQB: an outgoing queue whose destination host is in msmq.hosts talks to a
 * Windows queue manager (MS-MQQB 3.1, the initiator's side) instead of an AMQP broker. Same queue,
 * states, history, PAUSE / RESUME / EOD_RESEND and resend timers; only the bytes differ:
 *
 *   connect -> EstablishConnection (our node id as the client GUID) -> its reply (CS bit:
 *   refused) -> ConnectionParameters -> its echo (the window) -> open: the link attaches.
 *
 * Each message is one UserMessage to DIRECT=TCP:<host>\private$\<queue>:
 *   a message enqueued by a transaction -> transactional (TransactionHeader, FM and LM):
 *     TxSequenceID = the queue's incarnation, TxSequenceNumber = its lookup id (durable with
 *     the enqueue, so kill -9 never reuses or renumbers one), TxPreviousSequenceNumber = the
 *     one sent before it on this session (0 first): eod.h's sender rule; completed by the
 *     receiver's OrderAck for that number or above (a FinalAck of a NACK class dead-letters it);
 *   a persistent message in the (durable) outgoing queue -> recoverable: completed by the
 *     SessionAck bit for its recoverable number (the receiver has it on disk);
 *   anything else -> express: completed when the SessionAck counts its packet.
 * A message stays in the outgoing queue (held by the link) until completed; a session that
 * ends requeues the rest at its place, and the next session resends it (the receiver drops
 * the transactional duplicates by number).
 * Every packet carries a SessionHeader (our count of its OrderAcks, our counts of packets);
 * OrderAcks received are also acknowledged by a stand-alone SessionAck at the end of the turn.
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

#include "core/log.h"
#include "core/mem.h"
#include "mqqb/mqqb.h"
#include "mqqb/props.h"

#define MQ_RECOVERABLE_ACK_MS 500
#define MQ_ACK_TIMEOUT_MS 120000
#define MQ_WINDOW 64

static void mq_pop_completed(link_outq *o);

void link_mq_on_connected(link_outq *o)
{
    link_need_node_id(o->m);
    mqqb_establish ec = {0};
    memcpy(ec.client_guid, o->m->node_id, 16);
    ec.timestamp = (uint32_t)sl_now_ms();
    ec.os = MQQB_VERSION | MQQB_OS_SE;
    uint8_t pkt[MQQB_EC_PACKET_LEN];
    mqqb_write_establish_request(pkt, &ec);
    sl_buf_append(&o->out, pkt, sizeof pkt);
    o->mq_sent = o->mq_rec_sent = o->mq_recv = o->mq_recv_acked = o->mq_peer_acked = 0;
    o->mq_window = MQ_WINDOW;
    o->cs = C_MQ_EC;
    o->cs_since = sl_loop_now(o->m->loop);
    link_mark_dirty(o);
}

static void mq_session(link_outq *o, mqqb_session *s)
{
    *s = (mqqb_session){.ack_seq = (uint16_t)o->mq_recv,
                        .user_seq = (uint16_t)o->mq_sent,
                        .rec_seq = (uint16_t)o->mq_rec_sent,
                        .window = MQ_WINDOW};
}

void link_mq_write_message(link_outq *o, qm_position *pos, uint64_t seq, inflight *f)
{
    link_mgr *m = o->m;
    const qm_message *msg = pos->msg;
    f->mq_kind = pos->xact ? MQ_TX : msg->persistent && o->q->durable ? MQ_RECOVERABLE : MQ_EXPRESS;
    o->mq_sent++;
    if (f->mq_kind != MQ_EXPRESS)
        o->mq_rec_sent++;
    f->mq_user = (uint16_t)o->mq_sent;
    f->mq_rec = (uint16_t)o->mq_rec_sent;
    char dest[800];
    snprintf(dest, sizeof dest, "TCP:%s\\private$\\%s", o->dest.host, o->dest.queue);
    mqqb_session sh;
    mq_session(o, &sh);
    o->mq_recv_acked = o->mq_recv; /* the header acknowledges what came in */
    mqqb_out u = {.source_qm = m->node_id,
                  .dest = dest,
                  .message_id = (uint32_t)seq,
                  .recoverable = f->mq_kind != MQ_EXPRESS,
                  .tx = f->mq_kind == MQ_TX,
                  .tx_seq_id = o->es.seq_id,
                  .body = qm_msg_body(msg),
                  .body_len = (uint32_t)msg->body_len,
                  .session = &sh};
    /* the properties table of docs/msmq-wire.md read backwards (src/mqqb/props.c) */
    msmq_out_scratch scratch;
    unsigned lost =
        mqqb_out_props(qm_msg_props(msg), msg->props_len, &u, &scratch, (uint64_t)wall_s());
    for (unsigned b = 0; b < MSMQ_LOST_BITS; b++)
        if ((lost >> b & 1) && !(o->mq_lost_logged >> b & 1)) {
            /* once per queue and kind: a stream of such messages would flood the log */
            o->mq_lost_logged |= (uint16_t)(1u << b);
            sl_warn("link %s: MS-MQQB cannot carry %s: left out (logged once for this queue)",
                    o->name, mqqb_lost_name(b));
        }
    if (u.tx) {
        /* 32-bit numbers: past 2^32 - 1 a new sequence (mqqb.h). The previous number is the
         * one sent before on this session; for a session's first message (and a resend of
         * one sent before), the last one the receiver acknowledged: what it last accepted,
         * so a gap in our numbers is one it sees declared (MS-MQQB 3.1.1.5), never a jump */
        uint64_t prev = eod_send_next(&o->es, seq);
        if (!prev || prev >= seq)
            prev = o->mq_tx_acked < seq ? o->mq_tx_acked : 0;
        f->mq_prev = prev;
        mqqb_tx_number(o->es.seq_id, seq, prev, &u.tx_seq_id, &u.tx_seq_no, &u.tx_prev_no);
    }
    size_t len = mqqb_user_len(&u);
    if (!len) {
        /* larger than MS-MQQB's 4 MiB, or a queue name that is not UTF-8: it can never go */
        qm_position *p = f->pos;
        f->pos = NULL;
        f->acked = 1;
        link_dead_letter(o, &p, 1, CLASS_NACK_Q_EXCEED_QUOTA,
                         "the message does not fit an MS-MQQB packet (4 MiB at most)");
        mq_pop_completed(o);
        return;
    }
    uint8_t *dst = sl_buf_reserve(&o->out, len);
    o->out.len += mqqb_write_user(dst, len, &u);
}

/* The oldest in-flight messages that are complete leave the outgoing queue. */
static void mq_pop_completed(link_outq *o)
{
    size_t n = 0;
    while (n < o->fl_len && link_fl_at(o, n)->acked)
        n++;
    if (n)
        link_ack_front(o, n);
}

static void mq_session_ack(link_outq *o, const mqqb_session *s)
{
    /* ack_seq counts our packets (16 bits, this session); only forward moves count */
    uint16_t ahead = (uint16_t)(s->ack_seq - (uint16_t)o->mq_peer_acked);
    if (ahead && ahead <= (uint16_t)(o->mq_sent - o->mq_peer_acked))
        o->mq_peer_acked += ahead;
    for (size_t i = 0; i < o->fl_len; i++) {
        inflight *f = link_fl_at(o, i);
        if (f->acked)
            continue;
        /* its packet number at or below the count acknowledged (16-bit serial numbers) */
        if (f->mq_kind == MQ_EXPRESS && (uint16_t)(o->mq_peer_acked - f->mq_user) < 0x8000)
            f->acked = 1;
        if (f->mq_kind == MQ_RECOVERABLE) {
            uint16_t k = (uint16_t)(f->mq_rec - s->rec_ack_seq);
            if (k < 32 && (s->rec_ack_flags >> k & 1))
                f->acked = 1;
        }
    }
    mq_pop_completed(o);
    if (o->attached && o->q)
        qm_queue_schedule_dispatch(o->q); /* window room */
}

static void mq_order_ack(link_outq *o, uint64_t sid, uint32_t upto)
{
    uint64_t id = mqqb_tx_lookup_id(o->es.seq_id, sid, upto);
    int learnt = id > o->mq_tx_acked;
    if (learnt)
        o->mq_tx_acked = id;
    for (size_t i = 0; i < o->fl_len; i++) {
        inflight *f = link_fl_at(o, i);
        if (f->mq_kind == MQ_TX && mqqb_tx_acked(o->es.seq_id, sid, upto, f->seq))
            f->acked = 1;
    }
    /* A message still unacked that was sent naming a previous number below what the
     * receiver has now told us it accepted, and skipping numbers past it, is refused by a
     * receiver that takes no jumps (Sluice's): the first one sent after this node started,
     * before it knew. Send again now, naming that number, rather than at the resend timer
     * (30 s and more): once per number learnt, so never a loop. */
    for (size_t i = 0; learnt && i < o->fl_len; i++) {
        inflight *f = link_fl_at(o, i);
        if (f->mq_kind == MQ_TX && !f->acked && f->seq > id + 1 && f->mq_prev < id) {
            o->es.resend_due_ms = sl_loop_now(o->m->loop);
            break;
        }
    }
    mq_pop_completed(o);
}

static void mq_final_ack(link_outq *o, uint64_t sid, uint32_t no, uint16_t cls)
{
    for (size_t i = 0; i < o->fl_len; i++) {
        inflight *f = link_fl_at(o, i);
        if (f->mq_kind != MQ_TX || f->acked || !f->pos ||
            !mqqb_tx_acked(o->es.seq_id, sid, no, f->seq) ||
            (no > 1 && mqqb_tx_acked(o->es.seq_id, sid, no - 1, f->seq)))
            continue; /* not exactly number no of sequence sid */
        qm_position *p = f->pos;
        f->pos = NULL;
        f->acked = 1;
        link_dead_letter(o, &p, 1, cls, "refused by the MSMQ receiver (FinalAck)");
        break;
    }
    mq_pop_completed(o);
}

/* One whole packet from the receiver: 0, or -1 when the session failed. */
static int mq_packet(link_outq *o, const uint8_t *p, size_t len)
{
    const char *why = "";
    mqqb_base b;
    mqqb_base_decode(p, &b);
    if (b.flags & MQQB_BF_IN) {
        mqqb_internal in;
        if (mqqb_parse_internal(p, len, &in, &why) < 0)
            goto bad;
        if (o->cs == C_MQ_EC && in.type == MQQB_PT_ESTABLISH) {
            if (in.iflags & MQQB_IF_CS) {
                link_outq_fail(o, H_NOT_READY, 1, "the MSMQ queue manager refused the session");
                return -1;
            }
            o->foreign = LINK_FOREIGN_NO; /* it is MSMQ */
            link_persist_state(o);
            mqqb_params cp = {.recoverable_ack_timeout = MQ_RECOVERABLE_ACK_MS,
                              .ack_timeout = MQ_ACK_TIMEOUT_MS,
                              .window = MQ_WINDOW};
            uint8_t pkt[MQQB_CP_PACKET_LEN];
            mqqb_write_params(pkt, &cp);
            sl_buf_append(&o->out, pkt, sizeof pkt);
            o->cs = C_MQ_CP;
            return 0;
        }
        if (o->cs == C_MQ_CP && in.type == MQQB_PT_PARAMS) {
            o->mq_window = in.cp.window && in.cp.window < MQ_WINDOW ? in.cp.window : MQ_WINDOW;
            link_became_open(o);
            return 0;
        }
        if (o->cs == C_OPEN && in.type == MQQB_PT_SESSION_ACK) {
            mq_session_ack(o, &in.session);
            return 0;
        }
        why = "packet out of place in the session";
        goto bad;
    }
    if (o->cs != C_OPEN) {
        why = "UserMessage before the session was established";
        goto bad;
    }
    mqqb_user u;
    if (mqqb_parse_user(p, len, &u, &why) < 0)
        goto bad;
    o->mq_recv++;
    uint64_t sid;
    uint32_t no;
    uint16_t cls;
    if (mqqb_order_ack_of(&u, &sid, &no) == 0) {
        mq_order_ack(o, sid, no);
    } else if (mqqb_final_ack_of(&u, &sid, &no, &cls) == 0) {
        if (cls >= 0x8000)
            mq_final_ack(o, sid, no, cls);
    } else {
        sl_warn("link %s: MS-MQQB UserMessage of class 0x%04x from the receiver ignored", o->name,
                u.msg_class);
    }
    if (u.has_session)
        mq_session_ack(o, &u.session);
    return 0;
bad:
    link_outq_fail(o, H_UNKNOWN, 1, "MS-MQQB: %s", why);
    return -1;
}

void link_mq_process_input(link_outq *o)
{
    for (int i = 0; i < 4096 && o->cs >= C_MQ_EC; i++) {
        uint32_t total;
        const char *why;
        int r = mqqb_frame_len(sl_buf_head(&o->in), sl_buf_unread(&o->in),
                               MQQB_PACKET_MAX + MQQB_SESSION_LEN, &total, &why);
        if (r == 0 || (r == 1 && sl_buf_unread(&o->in) < total))
            break;
        if (r < 0) {
            link_outq_fail(o, H_UNKNOWN, 1, "MS-MQQB: %s", why);
            return;
        }
        o->last_recv = sl_loop_now(o->m->loop);
        if (mq_packet(o, sl_buf_head(&o->in), total) < 0)
            return;
        sl_buf_consume(&o->in, total);
    }
    if (o->cs == C_OPEN && o->mq_recv != o->mq_recv_acked) {
        /* the OrderAcks are UserMessages: acknowledge them (no message of ours to ride on) */
        mqqb_session sh;
        mq_session(o, &sh);
        uint8_t pkt[MQQB_SESSION_ACK_LEN];
        mqqb_write_session_ack(pkt, &sh);
        sl_buf_append(&o->out, pkt, sizeof pkt);
        o->mq_recv_acked = o->mq_recv;
        link_mark_dirty(o);
    }
}
