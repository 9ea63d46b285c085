/* link_internal.h - what the files of src/link/ that drain outgoing queues share (not a
 * contract: link.h is; nothing outside src/link/ includes this).
 *
 * One AMQP 0-9-1 client connection per outgoing queue (or, to a host of msmq.hosts, one
 * MS-MQQB session), driven by the node's event loop:
 *
 *   idle --(messages, online, not paused, retry time reached)--> connecting
 *   connecting -> handshake (start/start-ok, tune/tune-ok, open, channel.open, tx.select or
 *   confirm.select) -> open: the link attaches as the queue's only consumer
 *   any failure -> idle with a retry time (exponential backoff, forever), the in-flight
 *   messages requeued in place (lookup order = sequence order), the reason in last_error
 *   and the connection history.
 *
 * In flight: positions handed to the link stay LOCKED (held by it) until their order ack
 * (tx.commit-ok of their batch, or the broker's confirm when foreign); then they are acked
 * and leave the queue. A batch is closed at a transaction boundary when it is large enough,
 * and at the end of every loop turn. What a turn wrote to the link is held (core/holds.h)
 * until the store generation holding that turn's records has been synced (persist.h's
 * tickets; the sync runs on the sync thread), so every number a batch carries, and the
 * enqueue records of its messages, are on disk before it leaves.
 *
 * Invariants: a held position is in exactly one in-flight slot; slots are in send order
 * (= SeqNo order); the open batch covers the newest `open_n` slots; outstanding batches
 * cover the oldest ones, in order.
 *
 * The files, one job each:
 *   mgr.c        the manager: outgoing queues adopted and freed, timers (connect when there
 *                is work, heartbeats, resend, idle close), PAUSE / RESUME / EOD_RESEND, the
 *                management view, history and errors
 *   conn.c       the connection under a link: connect (resolving names first), the loop's
 *                events, output held for the disk, failure and backoff; the in-flight ring
 *   amqp_send.c  the AMQP 0-9-1 sender: the queue's consumer, batches and their EOD control
 *                message, the handshake, methods, NACKs, foreign brokers' confirms/returns
 *   mqqb_send.c  the MS-MQQB sender (a Windows queue manager in msmq.hosts)
 *   deadletter.c NACKs' dead letters and TimeToReachQueue
 *   rpc_call.c   the calling side of requests over links (channel 2)
 */
#ifndef SL_LINK_LINK_INTERNAL_H
#define SL_LINK_LINK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "amqp/frame.h"
#include "amqp/method.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/holds.h"
#include "core/map.h"
#include "eod/eod.h"
#include "eod/outq.h"
#include "link/io.h"
#include "link/link.h"
#include "link/resolve.h"
#include "net/loop.h"
#include "persist/persist.h"
#include "qm/qm.h"

#define LINK_FRAME_MAX 131072
#define HANDSHAKE_MS 10000
/* A name with several addresses: one that does not answer a TCP connect within this is left
 * for the next (the last one gets HANDSHAKE_MS); a refused one is left at once. */
#define ADDR_CONNECT_MS 3000
#define TICK_MS 100
#define OUT_HIGH (8u << 20)

/* ConnectionHistory status codes (MS-MQMQ 2.3.12.25) */
#define H_IN_PROCESS 0x00000000u
#define H_ESTABLISHED 0x00000002u
#define H_UNKNOWN 0x80000000u
#define H_SEND_FAILURE 0x80000006u
#define H_NOT_READY 0x80000007u
#define H_DNS_FAILURE 0x80000008u

enum cstate {
    C_NONE = 0,
    C_RESOLVING, /* the format name's host being looked up (resolve.h), off the loop */
    C_CONNECTING,
    C_TLS,     /* link_ssl: the TLS handshake */
    C_START,   /* header sent, waiting for connection.start */
    C_TUNE,    /* start-ok sent */
    C_OPENING, /* tune-ok + open sent */
    C_CHANNEL, /* channel.open sent */
    C_MODE,    /* tx.select / confirm.select sent */
    C_MQ_EC,   /* MS-MQQB: EstablishConnection sent */
    C_MQ_CP,   /* MS-MQQB: ConnectionParameters sent */
    C_OPEN,
};

typedef struct inflight {
    qm_position *pos;
    uint64_t seq;
    uint8_t acked;   /* foreign: confirmed out of order, popped when it reaches the front */
    uint8_t mq_kind; /* MS-MQQB: MQ_EXPRESS, MQ_RECOVERABLE or MQ_TX (what completes it) */
    uint16_t mq_user, mq_rec; /* MS-MQQB: its packet number and recoverable number */
    uint64_t mq_prev;         /* MS-MQQB transactional: the lookup id sent as its previous */
} inflight;

enum { MQ_EXPRESS = 0, MQ_RECOVERABLE, MQ_TX };

/* A request waiting for its reply (link_rpc_call). */
typedef struct rpc_call {
    uint64_t id; /* correlation-id */
    link_rpc_cb cb;
    void *ctx;
    uint64_t deadline;
    char *req;
    uint8_t sent;
    struct rpc_call *next;
} rpc_call;

enum rpc_state { R_NONE = 0, R_CHANNEL, R_CONSUME, R_READY };

struct link_outq {
    link_mgr *m;
    qm_queue *q;    /* NULL for a request-only link (rpc_only) */
    char name[300]; /* for logs: the outgoing queue's name, or "requests to host:port" */
    uint8_t rpc_only;
    uint32_t holds; /* remote handles on that node (link_rpc_hold): not closed when idle */
    /* requests (channel 2): calls in order, the reply being assembled */
    enum rpc_state rs;
    rpc_call *calls;
    uint64_t rpc_next_id;
    sl_buf rpc_body;
    uint64_t rpc_left;
    uint8_t rpc_in_reply;
    char rpc_corr[32];
    link_outq *next, *prev;
    eod_addr dest;
    uint8_t paused;
    uint8_t foreign; /* eod_foreign */
    /* MS-MQQB (the destination is in msmq.hosts): packets sent / recoverable ones sent /
     * UserMessages received (order acks) / received ones acknowledged, this session; the
     * receiver's ack of our packets; the session window */
    uint8_t msmq;
    uint32_t mq_sent, mq_rec_sent, mq_recv, mq_recv_acked, mq_peer_acked;
    uint16_t mq_window;
    uint16_t mq_lost_logged; /* MSMQ_LOST_* bits already logged for this queue (props.h) */
    /* the highest lookup id the receiver order-acked (0: none since this node started): the
     * TxPreviousSequenceNumber of a session's first transactional message, so a receiver
     * that refuses a message skipping numbers without naming its last accepted one as the
     * previous (Sluice's, mqqb_tx_check) takes it past the gaps of our lookup ids */
    uint64_t mq_tx_acked;
    /* connection */
    enum cstate cs;
    /* the lookup of dest.host in progress (resolve.h): waited for in C_RESOLVING; one that
     * outlived its attempt's timeout is waited for again by the next attempt rather than
     * doubled, so a silent DNS server holds at most one resolver thread per outgoing queue */
    link_resolve_req *rq;
    /* what this attempt connects to: dest.host itself when numeric, else what it resolved
     * to; tried in order, addr_i the one being tried (C_CONNECTING) or that connected */
    char addrs[LINK_RESOLVE_ADDRS][LINK_ADDR_LEN];
    unsigned n_addrs, addr_i;
    link_io io;
    sl_watch w;
    sl_buf in, out;
    sl_holds disk_holds;           /* out waits for the disk from these points (holds.h) */
    uint64_t out_sent, out_marked; /* stream offsets: bytes sent, bytes given a hold */
    uint32_t frame_max;
    uint16_t heartbeat;
    uint64_t cs_since, last_recv, last_send;
    uint64_t retry_at;
    unsigned failures;
    uint8_t peer_is_sluice, blocked, in_dirty, in_held, skip_content;
    /* the destination queue was full (405 at a commit): one transaction per batch for a
     * while, so what fits goes in as the queue drains */
    uint32_t one_unit;
    uint64_t skip_left;
    char peer_addr[64];
    /* the consumer and what is in flight */
    qm_consumer qc;
    uint8_t attached;
    uint8_t in_unit; /* the last message handed over has more of its transaction behind */
    inflight *fl;
    size_t fl_head, fl_len, fl_cap;
    size_t *bt; /* outstanding batches (sizes), oldest first */
    size_t bt_head, bt_len, bt_cap;
    size_t open_n;
    uint64_t open_bytes, open_first_prev;
    uint64_t *open_seqs;
    size_t open_cap;
    uint64_t pub_tag; /* foreign: publisher-confirm sequence of the session */
    /* The highest SeqNo handed to a session of this sequence: every pending message up to it
     * has been sent and lacks its order ack (EodFirstNonAck .. EodLastNonAck), whether it is
     * in flight now or was requeued when its session ended. */
    uint64_t sent_hwm;
    /* durable bound (M_OUTQ_SENT): nothing above it was ever sent; reserved ahead of sends */
    uint64_t sent_durable;
    /* NACKs: first refusal for a missing destination queue since the last delivery (loop
     * ms), what was dead-lettered (for the listing) */
    uint64_t bad_dst_since;
    uint64_t dead_lettered;
    uint32_t last_dl_class;
    uint64_t last_dl_count;
    int64_t last_dl_time;
    char last_dl_reason[256];
    uint8_t reopening;    /* channel 1 being opened again after a NACK (the connection stays) */
    uint16_t return_code; /* foreign: basic.return being skipped */
    char return_msgid[256];
    uint64_t idle_since;
    eod_send es;
    /* what the operator sees */
    char last_error[256];
    int64_t last_error_time;
    eod_hist hist[LINK_HIST_MAX];
    size_t nhist; /* newest at hist[0] */
    uint64_t sent, acked, reconnects;
    link_outq *dirty_next;
    link_outq *held_next; /* on m->held: output waits for the disk (disk_holds.len > 0) */
};

struct link_mgr {
    qm_node *node;
    sl_loop *loop;
    persist *store;
    link_options o;
    eod_reg *reg; /* the outgoing-queue registry (eod/outq.h): names, lookup, adoption */
    link_outq *all;
    link_outq *rpcs; /* request-only links, one per destination node (rpc_only) */
    link_outq *dirty;
    /* links whose output waits for a sync: a finished sync flushes these, not every link */
    link_outq *held;
    sl_timer tick;
    link_resolver *resolver; /* host names of format names (NULL: none could be made) */
    sl_watch resolver_w;
    uint8_t node_id[16];
    char node_id_hex[33];
    char node_name[256];
    int online;
    /* TimeToReachQueue: samples (next lookup id, wall ms), oldest first (persist.h) */
    persist_ltime *lt;
    size_t n_lt, cap_lt;
    uint64_t id_mark, id_mark_at, id_rate; /* lookup ids handed out per second, roughly */
    sl_buf scratch;
    sl_buf props_scratch; /* foreign: properties with a message-id added */
};

/* NACK message classes (reference/msmq.md 7.3) */
#define CLASS_NACK_BAD_DST_Q 0x8000u
#define CLASS_NACK_REACH_QUEUE_TIMEOUT 0x8002u
#define CLASS_NACK_Q_EXCEED_QUOTA 0x8003u

static inline const uint32_t *resend_table(const link_mgr *m)
{
    return m->o.resend_ms;
}

static inline int64_t wall_s(void)
{
    return (int64_t)(sl_wall_ms() / 1000);
}

/* amqp_send.c */
void link_became_open(link_outq *o);
int link_can_take(qm_consumer *c);
void link_close_batch(link_outq *o);
void link_detach(link_outq *o);
void link_on_connected(link_outq *o);
void link_process_input(link_outq *o);

/* conn.c */
void link_ack_front(link_outq *o, size_t n);
void link_bt_push(link_outq *o, size_t n);
void link_conn_close(link_outq *o);
void link_connect_failed(link_outq *o, unsigned status, const char *err);
inflight *link_fl_at(link_outq *o, size_t i);
void link_fl_push(link_outq *o, qm_position *pos, uint64_t seq);
void link_need_node_id(link_mgr *m);
void link_outq_fail(link_outq *o, unsigned status, int backoff, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void link_requeue_all(link_outq *o);
void link_start_connect(link_outq *o);

/* deadletter.c */
const char *link_nack_class_name(uint32_t cls);
void link_dead_letter(link_outq *o, qm_position **pos, size_t n, uint32_t cls, const char *reason);
uint64_t link_reach_deadline(const link_mgr *m, uint64_t id);
void link_reach_sample(link_mgr *m);
size_t link_reach_sweep(link_outq *o, uint64_t wall);

/* mgr.c */
void link_hist_add(link_outq *o, uint32_t status, uint32_t error);
void link_mark_dirty(link_outq *o);
void link_outq_consider(link_outq *o, uint64_t now);
void link_outq_free(link_outq *o);
void link_persist_state(link_outq *o);
void link_set_error(link_outq *o, const char *text);

/* mqqb_send.c */
void link_mq_on_connected(link_outq *o);
void link_mq_process_input(link_outq *o);
void link_mq_write_message(link_outq *o, qm_position *pos, uint64_t seq, inflight *f);

/* rpc_call.c */
void link_expire_calls(link_outq *o, uint64_t now);
void link_fail_calls(link_outq *o, int sent_only, const char *why);
int link_rpc_content(link_outq *o, const amqp_frame *f);
int link_rpc_method(link_outq *o, const amqp_method *mm);
void link_rpc_outq_free(link_outq *o);
void link_rpc_start(link_outq *o);

#endif
