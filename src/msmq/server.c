/* server.c - MS-MQQB sessions on the receiving side (MS-MQQB 3.1: the acceptor).
 *
 * A session is one TCP connection from a Windows queue manager: EstablishConnection (we
 * answer with our GUID, the node's link id), ConnectionParameters (echoed, the window being
 * the smaller of the sender's and msmq.window), then UserMessage packets and SessionAcks in
 * both directions. Each UserMessage goes into the private queue its DestinationQueue names
 * in the vhost msmq.vhost; its MSMQ properties become AMQP properties and x-msmq-* headers
 * (props.c).
 *
 * Acknowledgements (MS-MQQB 3.1.1.6):
 *   - session acks count every packet received (AckSequenceNumber); a recoverable message is
 *     acknowledged (RecoverableMsgAckSeqNumber + flags) only once its enqueue is on disk: its
 *     store ticket is kept until node_durable() passes it. An ack goes when half the window
 *     is waiting, or when the session ack timer (the sender's RecoverableAckTimeout) expires.
 *   - a transactional message is decided by MS-MQQB's in-order rule (mqqb_tx_check_from:
 *     3.1.5.8.6 without the jump it allows, issue 43; a declared gap only from the address
 *     the sequence is bound to, kept in memory with its state), keyed by (SourceQueueManager,
 *     TxSequenceID, queue): accepted ones are enqueued and the new last number recorded in
 *     one record group (persist_group), so a kill -9 keeps both or neither; duplicates are
 *     dropped; out-of-order ones refused (not enqueued); one that would skip numbers without
 *     naming the last accepted one as its previous, or that declares a gap from an address
 *     other than the sequence's, is refused with an audit line. Either way
 *     an OrderAck for the last accepted number goes back on the session once that number is
 *     durable, so the sender resends from there: one per sequence per sync (they are
 *     cumulative), not one per message.
 * Unknown or non-private queue: a non-transactional message is dropped (acknowledged, as
 * MSMQ discards it, and logged); a transactional one is accepted into the sequence without
 * an enqueue and a FinalAck MQMSG_CLASS_NACK_BAD_DST_Q goes back (the sender dead-letters it).
 *
 * Who: a connection from an address outside msmq.allowed_senders is closed before anything
 * is read from it (an audit line), and its pings are not answered.
 *
 * Bounded: a packet larger than msmq.max_packet_size closes the session before anything is
 * buffered past its header; input is read only while fewer than MSMQ_PENDING_MAX acks wait for
 * the disk and the output is under MSMQ_OUT_MAX; a session silent for msmq.idle_timeout (or
 * not established within msmq.handshake_timeout) is closed.
 */
#include "msmq/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "amqp/method.h"
#include "amqp/table.h"
#include "node/node.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "eod/eod.h"
#include "eod/outq.h"
#include "net/accept.h"
#include "net/cidr.h"
#include "net/listen.h"
#include "persist/persist.h"
#include "msmq/ack.h"
#include "mqqb/mqqb.h"
#include "mqqb/props.h"

#define MSMQ_READ_CHUNK (64u * 1024)
#define MSMQ_OUT_MAX (1u << 20)
#define MSMQ_PENDING_MAX 8192

enum sess_state { S_WAIT_EC = 0, S_WAIT_CP, S_OPEN, S_DEAD };

/* Something that waits for the disk before it is acknowledged. */
typedef struct pend {
    uint64_t ticket;
    uint8_t kind; /* P_REC: session ack of recoverable number rec; P_ORDER: order ack */
    uint32_t rec;
    uint64_t seq_id;
    uint32_t seq_no;
} pend;
enum { P_REC = 1, P_ORDER = 2 };

typedef struct sess {
    struct msmq_server *srv;
    struct sess *next;
    int fd;
    sl_watch w;
    sl_timer timer;
    enum sess_state state;
    char peer[64], peer_ip[64];
    sl_buf in, out;
    uint8_t client_guid[16];
    mqqb_params cp;
    uint64_t last_rx_ms, ack_due_ms, started_ms;
    /* session message sequence (MS-MQMQ 2.2.20.4) */
    uint32_t recv_count, recv_rec;   /* received: packets, recoverable packets */
    uint32_t acked_count;            /* recv_count at the last ack sent */
    uint32_t rec_durable, rec_acked; /* recoverable numbers on disk / acknowledged */
    uint32_t sent_count;             /* UserMessage packets we sent (order acks) */
    uint32_t next_msg_id;
    pend *pend;
    size_t p_head, p_len, p_cap;
    int reading;
    int blocked; /* not read while a memory or disk alarm is on (like AMQP publishers) */
    uint64_t accepted, duplicates, refused;
} sess;

struct msmq_server {
    sl_node *n;
    int fd;
    sl_acceptor acc;
    char addr[64];
    int port;
    sess *sessions;
    sess *dead; /* closed this turn, freed by the reap timer (callers up the stack may
                   still hold them) */
    sl_timer reap;
    int ping_fd; /* UDP: the Ping mechanism (MS-MQQB 2.1.2), -1 when off */
    sl_watch ping_w;
    int sync_waiting;
    uint8_t guid[16];
    sl_cidr_list allowed; /* msmq.allowed_senders */
    /* audit lines (refused sessions, forged messages): at most AUDIT_PER_S a second */
    uint64_t audit_window_ms;
    unsigned audit_in_window, audit_suppressed;
};

#define AUDIT_PER_S 10

static void sess_close(sess *s, const char *why);
static int audit_budget(msmq_server *srv);
static void sess_flush(sess *s);
static void sess_arm(sess *s);

/* ---- disk waits ---- */

static void on_sync(void *ctx);

static void want_sync(msmq_server *srv)
{
    if (srv->sync_waiting)
        return;
    if (node_after_sync(srv->n, on_sync, srv))
        srv->sync_waiting = 1;
    else
        on_sync(srv);
}

static void pend_push(sess *s, pend p)
{
    if (s->p_len == s->p_cap) {
        size_t cap = s->p_cap ? s->p_cap * 2 : 64;
        pend *nu = sl_xmalloc(cap * sizeof *nu);
        for (size_t i = 0; i < s->p_len; i++)
            nu[i] = s->pend[(s->p_head + i) % s->p_cap];
        sl_free(s->pend);
        s->pend = nu;
        s->p_cap = cap;
        s->p_head = 0;
    }
    s->pend[(s->p_head + s->p_len++) % s->p_cap] = p;
}

static void send_session_ack(sess *s)
{
    /* one packet per 32 recoverable numbers now on disk and not yet acknowledged */
    do {
        mqqb_session h = {.ack_seq = (uint16_t)s->recv_count,
                          .user_seq = (uint16_t)s->sent_count,
                          .window = s->cp.window};
        if (s->rec_durable > s->rec_acked) {
            uint32_t n = s->rec_durable - s->rec_acked;
            if (n > 32)
                n = 32;
            h.rec_ack_seq = (uint16_t)(s->rec_acked + 1);
            h.rec_ack_flags = n == 32 ? 0xFFFFFFFFu : (1u << n) - 1;
            s->rec_acked += n;
        }
        uint8_t pkt[MQQB_SESSION_ACK_LEN];
        mqqb_write_session_ack(pkt, &h);
        sl_buf_append(&s->out, pkt, sizeof pkt);
    } while (s->rec_durable > s->rec_acked);
    s->acked_count = s->recv_count;
    /* Recoverable messages still waiting for the disk are acknowledged later, by count or by
     * this timer: an ack sent by count (maybe_ack) must not disarm it, or the tail of a burst
     * smaller than half the window is never acknowledged and the sender, its window full,
     * waits until the session goes idle. */
    s->ack_due_ms = s->p_len ? sl_now_ms() + s->cp.recoverable_ack_timeout : 0;
}

static void send_order_ack(sess *s, uint64_t seq_id, uint32_t seq_no)
{
    uint8_t pkt[512];
    size_t n = mqqb_write_order_ack(pkt, sizeof pkt, s->srv->guid, s->peer_ip, ++s->next_msg_id,
                                    (uint32_t)(sl_wall_ms() / 1000), seq_id, seq_no);
    if (n) {
        sl_buf_append(&s->out, pkt, n);
        s->sent_count++;
    }
}

/* Half the window waiting: acknowledge now (MS-MQQB 3.1.1.6.1: by count or by timer). */
static void maybe_ack(sess *s)
{
    uint32_t half = s->cp.window > 1 ? s->cp.window / 2u : 1u;
    if (s->recv_count - s->acked_count >= half || s->rec_durable - s->rec_acked >= half)
        send_session_ack(s);
}

static void release(sess *s)
{
    uint64_t durable = node_durable(s->srv->n);
    int any = 0;
    /* OrderAcks are cumulative: of a run of one sequence's numbers that became durable in
     * the same sync only the last is sent (one per sequence per sync, not one per message) */
    pend order = {0};
    while (s->p_len && s->pend[s->p_head].ticket <= durable) {
        pend p = s->pend[s->p_head];
        s->p_head = (s->p_head + 1) % s->p_cap;
        s->p_len--;
        if (p.kind == P_REC) {
            s->rec_durable = p.rec;
        } else {
            if (order.kind && order.seq_id != p.seq_id)
                send_order_ack(s, order.seq_id, order.seq_no);
            order = p;
        }
        any = 1;
    }
    if (order.kind)
        send_order_ack(s, order.seq_id, order.seq_no);
    if (!any)
        return;
    maybe_ack(s);
    sess_flush(s);
    if (!s->reading && !s->blocked && s->state != S_DEAD && s->p_len < MSMQ_PENDING_MAX / 2) {
        s->reading = 1;
        sl_loop_watch(s->srv->n->loop, &s->w, SL_EV_READ | (s->w.events & SL_EV_WRITE));
    }
    sess_arm(s);
}

static void on_sync(void *ctx)
{
    msmq_server *srv = ctx;
    srv->sync_waiting = 0;
    int more = 0;
    for (sess *s = srv->sessions, *next; s; s = next) {
        next = s->next; /* release may close s (it moves to the dead list) */
        release(s);
        more |= s->state != S_DEAD && s->p_len > 0;
    }
    if (more)
        want_sync(srv);
}

/* ---- delivery ---- */

/* The queue a message is for, or NULL with why and the MSMQ class of the refusal (what a
 * Windows receiver would put in the FinalAck / administration NACK). */
static qm_queue *dest_queue(sess *s, const mqqb_user *m, char *dq, size_t dqcap, const char **why,
                            uint16_t *cls)
{
    sl_node *n = s->srv->n;
    dq[0] = 0;
    *cls = MQMSG_CLASS_NACK_BAD_DST_Q;
    if (m->dest.type != MQQB_QF_DIRECT) {
        *why = "only direct format names are served (DIRECT=TCP:host\\private$\\queue)";
        return NULL;
    }
    if (mqqb_utf16_to_utf8(m->dest.direct, m->dest.direct_len, dq, dqcap) < 0) {
        *why = "destination queue name is not valid UTF-16";
        return NULL;
    }
    const char *qn;
    size_t ql;
    if (mqqb_direct_private_queue(dq, strlen(dq), &qn, &ql) < 0) {
        *why = "not a private queue (\\private$\\queue)";
        return NULL;
    }
    const char *vname = n->cfg->msmq_vhost ? n->cfg->msmq_vhost : "/";
    qm_vhost *vh = qm_vhost_find(n->qm, vname, strlen(vname));
    qm_queue *q = vh ? qm_queue_find_ci(vh, qn, ql) : NULL;
    if (!q) {
        *why = "no such queue";
        return NULL;
    }
    if (n->cfg->msmq_user) {
        static char err[300];
        if (eod_recv_may_write(n->acc, n->cfg->msmq_user, q, err, sizeof err) != SL_OK) {
            *why = err;
            *cls = MQMSG_CLASS_NACK_ACCESS_DENIED;
            return NULL;
        }
    }
    if (m->privacy != 0 || (m->has_security && (m->sec_flags & 0x20))) {
        /* an encrypted body cannot be delivered readable (no key exchange here) */
        *why = "encrypted message bodies are not supported";
        *cls = MQMSG_CLASS_NACK_BAD_ENCRYPTION;
        return NULL;
    }
    if (m->base.ttrq != 0xFFFFFFFFu &&
        sl_wall_ms() / 1000 > (uint64_t)m->sent_time + m->base.ttrq) {
        *why = "past its time to reach queue";
        *cls = MQMSG_CLASS_NACK_REACH_QUEUE_TIMEOUT;
        return NULL;
    }
    if (qm_queue_never_holds(q, 1, m->body_size)) {
        *why = "the queue can never hold it (x-max-length, x-overflow=reject-publish)";
        *cls = MQMSG_CLASS_NACK_Q_EXCEED_QUOTA;
        return NULL;
    }
    return q;
}

static void send_final_ack(sess *s, const mqqb_user *m, uint16_t cls)
{
    uint8_t pkt[512];
    size_t n = mqqb_write_final_ack(pkt, sizeof pkt, s->srv->guid, s->peer_ip, ++s->next_msg_id,
                                    (uint32_t)(sl_wall_ms() / 1000), cls, m);
    if (n) {
        sl_buf_append(&s->out, pkt, n);
        s->sent_count++;
    }
}

/* A message whose sender asked for the negative receive acknowledgements: its queue's purge
 * or deletion then sends them (ack.c, through the model's on_removed). Called before the
 * enqueue: the mark on the message goes into its enqueue record (EF_WATCH), so a restart or
 * a page-out keeps it; the queue's (in memory) is set again by recovery from it. */
static void watch_removal(qm_queue *q, qm_message *msg, const mqqb_user *m)
{
    if ((m->ack_flags & MQQB_ACK_NEG_RECEIVE) && m->admin.type != MQQB_QF_NONE) {
        msg->watch = 1;
        q->removal_watch = 1;
    }
}

/* The administration NACK of class cls for a message refused on arrival, when its sender
 * asked for one (ack.c decides from the properties, as for every acknowledgement). */
static void admin_nack(sess *s, const mqqb_user *m, uint16_t cls)
{
    if (!(m->ack_flags & MQQB_ACK_NEG_ARRIVAL) || m->admin.type == MQQB_QF_NONE)
        return;
    qm_message *msg = mqqb_props_message(m, "", s->peer_ip);
    msmq_ack_send(s->srv->n, msg, cls);
    qm_message_unref(msg);
}

static void user_message(sess *s, const mqqb_user *m)
{
    msmq_server *srv = s->srv;
    sl_node *n = srv->n;
    int recoverable = MQQB_UF_DM(m->uflags) != 0;
    s->recv_count++;
    uint32_t rec = 0;
    if (recoverable)
        rec = ++s->recv_rec;
    char dq[1024];
    const char *why = NULL;
    uint16_t cls = 0;
    qm_queue *q = dest_queue(s, m, dq, sizeof dq, &why, &cls);
    uint64_t mark = node_mark(n);
    if (m->has_tx) {
        char dest[sizeof dq]; /* holds dq whole: a refused name is still its sequence's key */
        /* named as link receivers name theirs: "queue", or "vhost/queue" off "/"; the state
         * is per (sender, sequence, queue), so a sequence's numbers count for this queue
         * only (persist.h) */
        if (q && strcmp(q->vhost->name, "/"))
            snprintf(dest, sizeof dest, "%s/%s", q->vhost->name, q->name);
        else
            snprintf(dest, sizeof dest, "%s", q ? q->name : dq);
        if (!q && n->store) {
            /* refused for good (no such queue, unreadable body): it still takes its number
             * in the sequence, which is the queue's the sequence feeds */
            persist_eod_in *owner = persist_eod_in_other(n->store, m->source_qm, m->tx_seq_id, "");
            if (owner)
                snprintf(dest, sizeof dest, "%s", owner->dest);
        }
        persist_eod_in *st =
            n->store ? persist_eod_in_get(n->store, m->source_qm, m->tx_seq_id, dest) : NULL;
        uint64_t last = st ? st->seq_no : 0;
        const char *bound = st ? st->peer_ip : "";
        /* MS-MQQB 3.1.5.8.6's in-order rule, without its jump, and a declared gap only from
         * the address the sequence is bound to (mqqb.h, issue 43 and its review) */
        mqqb_tx_verdict v = mqqb_tx_check_from(last, m->tx_seq_no, m->tx_prev_no,
                                               n->cfg->msmq_seq_window, bound, s->peer_ip);
        if (v == MQQB_TX_FOREIGN_GAP) {
            /* naming the last number proves nothing (it is in every OrderAck and delivered
             * message); the address is what a forger cannot take. Refused like a jump. */
            char g[40];
            mqqb_guid_str(m->source_qm, g);
            s->refused++;
            if (audit_budget(srv))
                sl_warn("audit: msmq message refused: session %s, claimed sender %s, sequence "
                        "%016llx, queue '%s': message %u (previous %u) declares a gap past last "
                        "accepted %llu from %s, but the sequence's sender address is %s",
                        s->peer, g, (unsigned long long)m->tx_seq_id, dest, m->tx_seq_no,
                        m->tx_prev_no, (unsigned long long)last, s->peer_ip, bound);
        } else if (v == MQQB_TX_JUMP) {
            /* No real sender skips numbers without naming the last one it had accepted
             * (MS-MQQB carries no credentials: anyone reaching the port can claim a queue
             * manager's GUID and sequence). Refused, not in the sequence, and an audit line
             * says who tried; the order ack below still names the real last number. */
            char g[40], how[120];
            mqqb_guid_str(m->source_qm, g);
            if (m->tx_prev_no == last)
                snprintf(how, sizeof how, "+ %llu (msmq.seq_window)",
                         (unsigned long long)n->cfg->msmq_seq_window);
            else
                snprintf(how, sizeof how, "without naming it as its previous (MS-MQQB 3.1.5.8.6)");
            s->refused++;
            if (audit_budget(srv))
                sl_warn("audit: msmq message refused: session %s, claimed sender %s, sequence "
                        "%016llx, queue '%s': message %u (previous %u) jumps beyond last accepted "
                        "%llu %s",
                        s->peer, g, (unsigned long long)m->tx_seq_id, dest, m->tx_seq_no,
                        m->tx_prev_no, (unsigned long long)last, how);
        } else if (v == MQQB_TX_ACCEPT && q && qm_queue_would_refuse(q, 1, m->body_size)) {
            /* full (x-overflow=reject-publish): not taken, not in the sequence; the sender
             * resends it on its timer, as after any refusal */
            s->refused++;
            sl_debug("msmq %s: queue '%s' is full: message %u of sequence %016llx refused", s->peer,
                     q->name, m->tx_seq_no, (unsigned long long)m->tx_seq_id);
        } else if (v == MQQB_TX_ACCEPT) {
            char sender[40];
            mqqb_guid_str(m->source_qm, sender);
            /* the enqueue and the new last number: all or nothing, one group commit */
            if (n->store)
                persist_group(n->store, 1);
            if (q) {
                qm_message *msg = mqqb_props_message(m, q->name, s->peer_ip);
                watch_removal(q, msg, m);
                qm_queue_enqueue(q, msg);
                /* in the same record group: the acknowledgement exists iff the message does */
                msmq_ack_send(n, msg, MQMSG_CLASS_ACK_REACH_QUEUE);
                qm_message_unref(msg);
            } else {
                admin_nack(s, m, cls);
            }
            if (n->store) {
                persist_eod_in_set(n->store, m->source_qm, m->tx_seq_id, m->tx_seq_no, 0, sender,
                                   dest);
                persist_group(n->store, 0);
                /* the first message that moves a sequence on this node binds it to its
                 * address; later ones (the next number from anyone) leave it */
                if (!st)
                    st = persist_eod_in_get(n->store, m->source_qm, m->tx_seq_id, dest);
                if (st && !st->peer_ip[0])
                    snprintf(st->peer_ip, sizeof st->peer_ip, "%s", s->peer_ip);
            }
            last = m->tx_seq_no;
            if (q) {
                s->accepted++;
            } else {
                /* refused for good: taken out of the sequence with a FinalAck naming why,
                 * so the sender dead-letters it and goes on (MS-MQQB 2.2.5) */
                s->refused++;
                sl_warn("msmq %s: transactional message %u of sequence %016llx to '%s' "
                        "refused: %s (FinalAck class 0x%04x)",
                        s->peer, m->tx_seq_no, (unsigned long long)m->tx_seq_id, dq, why, cls);
                send_final_ack(s, m, cls);
            }
        } else if (v == MQQB_TX_DUPLICATE) {
            s->duplicates++;
        } else {
            s->refused++;
            sl_debug("msmq %s: message %u of sequence %016llx out of order (previous %u, last "
                     "accepted %llu): refused",
                     s->peer, m->tx_seq_no, (unsigned long long)m->tx_seq_id, m->tx_prev_no,
                     (unsigned long long)last);
        }
        if (last) {
            /* the order ack waits until the number it names is on disk */
            uint64_t t = node_ticket(n);
            pend_push(s, (pend){.ticket = t,
                                .kind = P_ORDER,
                                .seq_id = m->tx_seq_id,
                                .seq_no = (uint32_t)last});
        }
    } else if (!q) {
        /* MSMQ discards it, with an administration NACK of that class when asked for */
        s->refused++;
        sl_warn("msmq %s: message %u to '%s' dropped: %s (class 0x%04x)", s->peer, m->message_id,
                dq, why, cls);
        admin_nack(s, m, cls);
    } else {
        qm_message *msg = mqqb_props_message(m, q->name, s->peer_ip);
        /* asked for an arrival ack: the enqueue and the ack in one record group */
        int group =
            n->store && (m->ack_flags & MQQB_ACK_POS_ARRIVAL) && m->admin.type != MQQB_QF_NONE;
        if (group)
            persist_group(n->store, 1);
        watch_removal(q, msg, m);
        if (qm_queue_enqueue(q, msg) == SL_OK) {
            s->accepted++;
            msmq_ack_send(n, msg, MQMSG_CLASS_ACK_REACH_QUEUE);
        } else {
            s->refused++;
            sl_warn("msmq %s: message %u to '%s' dropped: the queue is full", s->peer,
                    m->message_id, q->name);
            msmq_ack_send(n, msg, MQMSG_CLASS_NACK_Q_EXCEED_QUOTA);
        }
        if (group)
            persist_group(n->store, 0);
        qm_message_unref(msg);
    }
    if (recoverable)
        pend_push(s, (pend){.ticket = node_ticket_since(n, mark), .kind = P_REC, .rec = rec});
    if (!s->ack_due_ms)
        s->ack_due_ms = sl_now_ms() + s->cp.recoverable_ack_timeout;
}

/* ---- packets ---- */

/* 0 to go on, -1 when the session is closed. */
static int packet(sess *s, const uint8_t *p, uint32_t len)
{
    const char *why = NULL;
    if (p[2] & MQQB_BF_IN) {
        mqqb_internal in;
        if (mqqb_parse_internal(p, len, &in, &why) < 0)
            goto bad;
        if (s->state == S_WAIT_EC && in.type == MQQB_PT_ESTABLISH) {
            static const uint8_t zero[16];
            /* another queue manager's GUID, or this node offline (DISCONNECT: no incoming
             * transfer, as for links) */
            int refuse = (memcmp(in.ec.server_guid, zero, 16) &&
                          memcmp(in.ec.server_guid, s->srv->guid, 16)) ||
                         !s->srv->n->qm->online;
            uint8_t pkt[MQQB_EC_PACKET_LEN];
            mqqb_write_establish_reply(pkt, &in.ec, s->srv->guid, refuse);
            sl_buf_append(&s->out, pkt, sizeof pkt);
            if (refuse) {
                sess_flush(s);
                sess_close(s, s->srv->n->qm->online
                                  ? "EstablishConnection names another queue manager (refused)"
                                  : "node offline (DISCONNECT): session refused");
                return -1;
            }
            memcpy(s->client_guid, in.ec.client_guid, 16);
            s->state = S_WAIT_CP;
            return 0;
        }
        if (s->state == S_WAIT_CP && in.type == MQQB_PT_PARAMS) {
            s->cp = in.cp;
            /* out-of-range timeouts are brought into the specification's ranges */
            if (s->cp.recoverable_ack_timeout < 500)
                s->cp.recoverable_ack_timeout = 500;
            if (s->cp.recoverable_ack_timeout > 120000)
                s->cp.recoverable_ack_timeout = 120000;
            if (!s->cp.window || s->cp.window > s->srv->n->cfg->msmq_window)
                s->cp.window = s->srv->n->cfg->msmq_window;
            mqqb_params reply = in.cp;
            reply.window = s->cp.window;
            uint8_t pkt[MQQB_CP_PACKET_LEN];
            mqqb_write_params(pkt, &reply);
            sl_buf_append(&s->out, pkt, sizeof pkt);
            s->state = S_OPEN;
            sl_info("msmq session %s established", s->peer);
            return 0;
        }
        if (s->state == S_OPEN && in.type == MQQB_PT_SESSION_ACK) {
            if (in.session.ack_seq != (uint16_t)s->sent_count &&
                (uint16_t)(s->sent_count - in.session.ack_seq) > 0x8000) {
                why = "SessionAck acknowledges packets never sent";
                goto bad;
            }
            return 0;
        }
        why = "packet out of place in the session";
        goto bad;
    }
    if (s->state != S_OPEN) {
        why = "UserMessage before the session was established";
        goto bad;
    }
    mqqb_user m;
    if (mqqb_parse_user(p, len, &m, &why) < 0)
        goto bad;
    user_message(s, &m);
    if (m.has_session && m.session.user_seq != (uint16_t)s->recv_count) {
        why = "SessionHeader.UserMsgSequenceNumber does not match the packets received";
        goto bad;
    }
    return 0;
bad:
    sess_close(s, why);
    return -1;
}

static void sess_input(sess *s)
{
    for (int i = 0; i < 1024; i++) {
        uint32_t total;
        const char *why = NULL;
        int r = mqqb_frame_len(sl_buf_head(&s->in), sl_buf_unread(&s->in),
                               s->srv->n->cfg->msmq_max_packet + MQQB_SESSION_LEN, &total, &why);
        if (r < 0) {
            sess_close(s, why);
            return;
        }
        if (r == 0 || sl_buf_unread(&s->in) < total)
            break;
        if (packet(s, sl_buf_head(&s->in), total) < 0)
            return;
        sl_buf_consume(&s->in, total);
    }
    sl_buf_compact(&s->in);
    maybe_ack(s);
    if (s->p_len) {
        want_sync(s->srv);
        if (s->p_len >= MSMQ_PENDING_MAX && s->reading) {
            s->reading = 0; /* wait for the disk before taking more */
            sl_loop_watch(s->srv->n->loop, &s->w, s->w.events & SL_EV_WRITE);
        }
    }
    sess_flush(s);
    sess_arm(s);
}

/* ---- socket ---- */

static void sess_flush(sess *s)
{
    if (s->state == S_DEAD)
        return;
    while (sl_buf_unread(&s->out)) {
        ssize_t n = send(s->fd, sl_buf_head(&s->out), sl_buf_unread(&s->out), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            sess_close(s, "write failed");
            return;
        }
        sl_buf_consume(&s->out, (size_t)n);
    }
    sl_buf_compact(&s->out);
    if (sl_buf_unread(&s->out) > MSMQ_OUT_MAX) {
        sess_close(s, "the peer does not read its acknowledgements");
        return;
    }
    int ev = (s->reading ? SL_EV_READ : 0) | (sl_buf_unread(&s->out) ? SL_EV_WRITE : 0);
    if (ev != s->w.events)
        sl_loop_watch(s->srv->n->loop, &s->w, ev);
}

static void on_io(sl_loop *loop, sl_watch *w, int events)
{
    sess *s = w->data;
    if (events & SL_EV_WRITE)
        sess_flush(s);
    if (s->state == S_DEAD || !(events & (SL_EV_READ | SL_EV_ERROR)))
        return;
    if (s->srv->n->alarms && s->state == S_OPEN) {
        /* low on memory or disk: take nothing more until the alarm clears (checked on the
         * session timer); the sender waits, its messages safe in its outgoing queue */
        s->blocked = 1;
        s->reading = 0;
        sl_loop_watch(loop, &s->w, s->w.events & SL_EV_WRITE);
        sess_arm(s);
        return;
    }
    for (int i = 0; i < 4; i++) {
        /* never more than one packet (and a chunk) buffered */
        uint8_t *dst = sl_buf_reserve(&s->in, MSMQ_READ_CHUNK);
        ssize_t n = recv(s->fd, dst, MSMQ_READ_CHUNK, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            sess_input(s); /* what arrived before the close still counts */
            if (s->state != S_DEAD)
                sess_close(s, n == 0 ? "closed by the peer" : "read failed");
            return;
        }
        s->in.len += (size_t)n;
        s->last_rx_ms = sl_loop_now(loop);
        if ((size_t)n < MSMQ_READ_CHUNK)
            break;
    }
    sess_input(s);
}

static void on_timer(sl_loop *loop, sl_timer *t)
{
    sess *s = t->data;
    uint64_t now = sl_loop_now(loop);
    if (s->blocked) {
        s->last_rx_ms = now; /* waiting on us is not idleness */
        if (!s->srv->n->alarms) {
            s->blocked = 0;
            if (s->p_len < MSMQ_PENDING_MAX) {
                s->reading = 1;
                sl_loop_watch(loop, &s->w, SL_EV_READ | (s->w.events & SL_EV_WRITE));
            }
        }
    }
    if (s->state != S_OPEN && now >= s->started_ms + s->srv->n->cfg->msmq_handshake_timeout_ms) {
        sess_close(s, "session not established in time (msmq.handshake_timeout)");
        return;
    }
    if (now >= s->last_rx_ms + s->srv->n->cfg->msmq_idle_timeout_ms) {
        sess_close(s, "session idle (msmq.idle_timeout)");
        return;
    }
    if (s->ack_due_ms && now >= s->ack_due_ms) {
        send_session_ack(s);
        if (s->p_len) /* recoverable ones still wait for the disk: ack them later too */
            s->ack_due_ms = now + s->cp.recoverable_ack_timeout;
        sess_flush(s);
    }
    sess_arm(s);
}

static void sess_arm(sess *s)
{
    if (s->state == S_DEAD)
        return;
    const node_config *cfg = s->srv->n->cfg;
    uint64_t due = s->last_rx_ms + cfg->msmq_idle_timeout_ms;
    if (s->state != S_OPEN && s->started_ms + cfg->msmq_handshake_timeout_ms < due)
        due = s->started_ms + cfg->msmq_handshake_timeout_ms;
    if (s->ack_due_ms && s->ack_due_ms < due)
        due = s->ack_due_ms;
    if (s->blocked && sl_loop_now(s->srv->n->loop) + 100 < due)
        due = sl_loop_now(s->srv->n->loop) + 100;
    sl_timer_start(s->srv->n->loop, &s->timer, due);
}

static void sess_free(sess *s)
{
    sl_buf_free(&s->in);
    sl_buf_free(&s->out);
    sl_free(s->pend);
    sl_free(s);
}

static void sess_close(sess *s, const char *why)
{
    if (s->state == S_DEAD)
        return;
    sl_info("msmq session %s closed: %s (accepted %llu, duplicates %llu, refused %llu)", s->peer,
            why, (unsigned long long)s->accepted, (unsigned long long)s->duplicates,
            (unsigned long long)s->refused);
    s->state = S_DEAD;
    sl_timer_stop(s->srv->n->loop, &s->timer);
    sl_loop_unwatch(s->srv->n->loop, &s->w);
    close(s->fd);
    s->fd = -1;
    msmq_server *srv = s->srv;
    for (sess **pp = &srv->sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    /* freed on the next turn: the handler that closed it may still read its fields; sync
     * callbacks go to the server, never to a session */
    s->next = srv->dead;
    srv->dead = s;
    sl_timer_start(srv->n->loop, &srv->reap, sl_loop_now(srv->n->loop));
}

static void reap_dead(msmq_server *srv)
{
    while (srv->dead) {
        sess *s = srv->dead;
        srv->dead = s->next;
        sess_free(s);
    }
}

static void on_reap(sl_loop *loop, sl_timer *t)
{
    reap_dead(t->data);
}

/* May one more audit line be logged now? At most AUDIT_PER_S a second: past that, a flood
 * of refused sessions or forged messages is counted, and the count is logged with the first
 * refusal of a later second (so the log cannot be made to fill the disk). */
static int audit_budget(msmq_server *srv)
{
    uint64_t now = sl_loop_now(srv->n->loop);
    if (now - srv->audit_window_ms >= 1000) {
        if (srv->audit_suppressed)
            sl_warn("audit: msmq: %u more refusals in the last second were not logged one by "
                    "one (at most %d a second)",
                    srv->audit_suppressed, AUDIT_PER_S);
        srv->audit_window_ms = now;
        srv->audit_in_window = srv->audit_suppressed = 0;
    }
    if (srv->audit_in_window < AUDIT_PER_S) {
        srv->audit_in_window++;
        return 1;
    }
    srv->audit_suppressed++;
    return 0;
}

/* A session from an address outside msmq.allowed_senders: closed before anything is read
 * from it, with an audit line. */
static void refuse_peer(msmq_server *srv, int fd, const struct sockaddr_storage *peer)
{
    char name[64], ip[64];
    mqqb_peer_str(peer, name, sizeof name, ip, sizeof ip);
    close(fd);
    if (audit_budget(srv))
        sl_warn("audit: msmq session refused: %s is not in msmq.allowed_senders (closed before "
                "any packet was read)",
                name);
}

static void on_accept(sl_acceptor *a, int fd, const struct sockaddr_storage *peer)
{
    msmq_server *srv = a->data;
    if (!sl_cidr_list_match(&srv->allowed, peer)) {
        refuse_peer(srv, fd, peer);
        return;
    }
    sess *s = sl_xcalloc(1, sizeof *s);
    s->srv = srv;
    s->fd = fd;
    sl_buf_init(&s->in);
    sl_buf_init(&s->out);
    mqqb_peer_str(peer, s->peer, sizeof s->peer, s->peer_ip, sizeof s->peer_ip);
    s->started_ms = s->last_rx_ms = sl_loop_now(srv->n->loop);
    s->reading = 1;
    s->w = (sl_watch){.fd = fd, .fn = on_io, .data = s};
    sl_timer_init(&s->timer, on_timer, s);
    s->next = srv->sessions;
    srv->sessions = s;
    if (sl_loop_watch(srv->n->loop, &s->w, SL_EV_READ) < 0) {
        sess_close(s, "cannot watch the socket");
        return;
    }
    sess_arm(s);
}

/* Ping Requests on UDP: answered at once (the cookie back, our GUID, RF while the node is
 * offline); anything else is ignored, as the specification says. Bounded per event. */
static void on_ping(sl_loop *loop, sl_watch *w, int events)
{
    msmq_server *srv = w->data;
    for (int i = 0; i < 64; i++) {
        uint8_t buf[512];
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(srv->ping_fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
        if (n < 0)
            return;
        mqqb_ping req;
        /* an address that may not open a session is not told this node is here either */
        if (!sl_cidr_list_match(&srv->allowed, &from) || mqqb_parse_ping(buf, (size_t)n, &req) < 0)
            continue;
        uint8_t out[MQQB_PING_LEN];
        mqqb_write_ping_reply(out, &req, srv->guid, !srv->n->qm->online);
        sendto(srv->ping_fd, out, sizeof out, MSG_DONTWAIT, (struct sockaddr *)&from, fl);
    }
}

static int start_ping(msmq_server *srv, char *err, size_t errlen)
{
    const node_config *cfg = srv->n->cfg;
    int port = cfg->msmq_ping_port;
    if (port == -2) /* follows listeners.msmq: a free port beside a free port */
        port = cfg->msmq_port == 0 ? 0 : 3527;
    srv->ping_fd = -1;
    if (port < 0)
        return 0;
    const char *addr = cfg->msmq_bind ? cfg->msmq_bind : cfg->bind;
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        sl = sizeof *a6;
    } else {
        snprintf(err, errlen, "msmq ping: %s is not an IP address", addr);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        snprintf(err, errlen, "msmq ping: cannot bind UDP %s:%d: %s", addr, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    srv->ping_fd = fd;
    srv->ping_w = (sl_watch){.fd = fd, .fn = on_ping, .data = srv};
    if (sl_loop_watch(srv->n->loop, &srv->ping_w, SL_EV_READ) < 0) {
        snprintf(err, errlen, "msmq ping: cannot watch: %s", strerror(errno));
        return -1;
    }
    sl_info("listening msmq-ping=%s:%d", addr,
            ntohs(ss.ss_family == AF_INET ? a4->sin_port : a6->sin6_port));
    return 0;
}

msmq_server *msmq_start(sl_node *n, char *err, size_t errlen)
{
    err[0] = 0;
    const node_config *cfg = n->cfg;
    if (cfg->msmq_port < 0)
        return NULL;
    msmq_server *srv = sl_xcalloc(1, sizeof *srv);
    srv->n = n;
    srv->ping_fd = -1;
    sl_timer_init(&srv->reap, on_reap, srv);
    node_qm_guid(n, srv->guid);
    const char *allowed =
        cfg->msmq_allowed_senders ? cfg->msmq_allowed_senders : MSMQ_ALLOWED_SENDERS_DEFAULT;
    if (sl_cidr_list_parse(allowed, &srv->allowed, err, errlen) < 0) {
        sl_cidr_list_free(&srv->allowed);
        sl_free(srv);
        return NULL;
    }
    srv->fd = sl_listen_tcp(cfg->msmq_bind ? cfg->msmq_bind : cfg->bind, cfg->msmq_port, 128,
                            srv->addr, sizeof srv->addr, &srv->port, err, errlen);
    if (srv->fd < 0) {
        sl_cidr_list_free(&srv->allowed);
        sl_free(srv);
        return NULL;
    }
    if (sl_acceptor_start(&srv->acc, n->loop, srv->fd, "msmq", n->fd_reserve, on_accept, NULL,
                          srv) < 0) {
        snprintf(err, errlen, "cannot watch the msmq listener: %s", strerror(errno));
        close(srv->fd);
        sl_cidr_list_free(&srv->allowed);
        sl_free(srv);
        return NULL;
    }
    char g[40];
    mqqb_guid_str(srv->guid, g);
    sl_info("listening msmq=%s:%d", srv->addr, srv->port);
    if (start_ping(srv, err, errlen) < 0) {
        msmq_stop(srv);
        return NULL;
    }
    msmq_ack_install(n);
    sl_info("msmq: queue manager %s, private queues of vhost '%s', sessions from %s", g,
            cfg->msmq_vhost ? cfg->msmq_vhost : "/", allowed);
    return srv;
}

void msmq_stop(msmq_server *srv)
{
    if (!srv)
        return;
    msmq_ack_uninstall(srv->n);
    while (srv->sessions)
        sess_close(srv->sessions, "node stopping");
    sl_timer_stop(srv->n->loop, &srv->reap);
    reap_dead(srv);
    sl_acceptor_stop(&srv->acc);
    close(srv->fd);
    if (srv->ping_fd >= 0) {
        sl_loop_unwatch(srv->n->loop, &srv->ping_w);
        close(srv->ping_fd);
    }
    sl_cidr_list_free(&srv->allowed);
    sl_free(srv);
}
