/* link.c - the sending side of store and forward: outgoing queues and the link that drains
 * each of them (link.h has the contract and the wire design; eod.h the numbers).
 *
 * One AMQP 0-9-1 client connection per outgoing queue, driven by the broker's event loop:
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
 */
#include "link/link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "access/access.h"
#include "amqp/frame.h"
#include "amqp/method.h"
#include "amqp/table.h"
#include "core/clock.h"
#include "core/holds.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/version.h"
#include "mqqb/mqqb.h"
#include "mqqb/props.h"
#include "persist/persist.h"
#include "persist/records.h"
#include "eod/eod.h"
#include "link/io.h"
#include "link/resolve.h"

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
    link_addr dest;
    uint8_t paused;
    uint8_t foreign; /* link_foreign */
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
    link_hist hist[LINK_HIST_MAX];
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
    sl_map *by_key; /* vhost "\0" lower-case canonical name -> link_outq */
    link_outq *all;
    link_outq *rpcs; /* request-only links, one per destination node (rpc_only) */
    link_outq *dirty;
    /* links whose output waits for a sync: a finished sync flushes these, not every link */
    link_outq *held;
    sl_timer tick;
    link_resolver *resolver; /* host names of format names (NULL: none could be made) */
    sl_watch resolver_w;
    char self_addr[64];
    int self_port;
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

static void outq_fail(link_outq *o, unsigned status, int backoff, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void outq_consider(link_outq *o, uint64_t now);
static void connect_failed(link_outq *o, unsigned status, const char *err);
static void fail_calls(link_outq *o, int sent_only, const char *why);
static void expire_calls(link_outq *o, uint64_t now);
static void rpc_start(link_outq *o);
static int rpc_method(link_outq *o, const amqp_method *mm);
static int rpc_content(link_outq *o, const amqp_frame *f);
static void rpc_outq_free(link_outq *o);
static void outq_free(link_outq *o);
static void need_node_id(link_mgr *m);
static void mq_write_message(link_outq *o, qm_position *pos, uint64_t seq, inflight *f);
static void mq_on_connected(link_outq *o);
static void mq_process_input(link_outq *o);
static void became_open(link_outq *o);
static void mq_pop_completed(link_outq *o);
static int msmq_port_for(const link_mgr *m, const link_addr *a);

void link_options_defaults(link_options *o)
{
    memset(o, 0, sizeof *o);
    o->user = "guest";
    o->password = "guest";
    o->heartbeat_s = 10;
    o->retry_min_ms = 500;
    o->retry_max_ms = 30000;
    o->idle_ms = 60000;
    o->resend_ms[0] = 30000;
    o->resend_ms[1] = 300000;
    o->resend_ms[2] = 1800000;
    o->resend_ms[3] = 21600000;
    o->batch_msgs = 2048;
    o->batch_bytes = 1u << 20;
    o->window_batches = 16;
    o->bad_queue_grace_ms = 60000;
    o->reach_queue_ms = 345600000; /* MSMQ's default TimeToReachQueue: 4 days */
    o->dns_timeout_ms = 10000;
}

const char *link_state_name(link_state s)
{
    static const char *const names[] = {"INACTIVE", "WAITING",      "CONNECTED",
                                        "ONHOLD",   "DISCONNECTED", "DISCONNECTING"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "INACTIVE";
}

static const uint32_t *resend_table(const link_mgr *m)
{
    return m->o.resend_ms;
}

static int64_t wall_s(void)
{
    return (int64_t)(sl_wall_ms() / 1000);
}

/* ------------------------------------------------------------------------------------------
 * History and errors
 */

static void hist_add(link_outq *o, uint32_t status, uint32_t error)
{
    if (o->nhist == LINK_HIST_MAX)
        o->nhist--;
    memmove(&o->hist[1], &o->hist[0], o->nhist * sizeof o->hist[0]);
    o->nhist++;
    link_hist *h = &o->hist[0];
    h->status = status;
    h->time = wall_s();
    h->error = error;
    snprintf(h->address, sizeof h->address, "%.50s:%d",
             o->peer_addr[0] ? o->peer_addr : o->dest.host, o->dest.port);
}

static void set_error(link_outq *o, const char *text)
{
    snprintf(o->last_error, sizeof o->last_error, "%s", text);
    o->last_error_time = wall_s();
}

static link_state state_of(const link_outq *o)
{
    if (o->paused)
        return LINK_ONHOLD;
    if (!o->m->online)
        return LINK_DISCONNECTED;
    if (o->cs == C_OPEN || o->reopening) /* reopening: the connection is up, one channel */
        return LINK_CONNECTED;
    if (o->cs != C_NONE || o->failures > 0)
        return LINK_WAITING;
    return LINK_INACTIVE;
}

static void persist_state(link_outq *o)
{
    if (o->m->store && o->q && o->q->durable)
        persist_outq_set(o->m->store, o->q->incarnation, o->paused ? OQ_ONHOLD : 0, o->foreign);
}

static void mark_dirty(link_outq *o)
{
    if (o->in_dirty)
        return;
    o->in_dirty = 1;
    o->dirty_next = o->m->dirty;
    o->m->dirty = o;
}

/* ------------------------------------------------------------------------------------------
 * In flight
 */

static inflight *fl_at(link_outq *o, size_t i)
{
    return &o->fl[(o->fl_head + i) % o->fl_cap];
}

static void fl_push(link_outq *o, qm_position *pos, uint64_t seq)
{
    if (o->fl_len == o->fl_cap) {
        size_t cap = o->fl_cap ? o->fl_cap * 2 : 256;
        inflight *n = sl_xmalloc(cap * sizeof *n);
        for (size_t i = 0; i < o->fl_len; i++)
            n[i] = *fl_at(o, i);
        sl_free(o->fl);
        o->fl = n;
        o->fl_cap = cap;
        o->fl_head = 0;
    }
    *fl_at(o, o->fl_len++) = (inflight){pos, seq, 0, 0, 0, 0, 0};
}

static void bt_push(link_outq *o, size_t n)
{
    if (o->bt_len == o->bt_cap) {
        size_t cap = o->bt_cap ? o->bt_cap * 2 : 16;
        size_t *b = sl_xmalloc(cap * sizeof *b);
        for (size_t i = 0; i < o->bt_len; i++)
            b[i] = o->bt[(o->bt_head + i) % o->bt_cap];
        sl_free(o->bt);
        o->bt = b;
        o->bt_cap = cap;
        o->bt_head = 0;
    }
    o->bt[(o->bt_head + o->bt_len++) % o->bt_cap] = n;
}

/* The oldest n in-flight messages are order-acked: they leave the outgoing queue. */
static void ack_front(link_outq *o, size_t n)
{
    uint64_t upto = 0, prev = 0;
    for (size_t i = 0; i < n && o->fl_len; i++) {
        inflight *f = fl_at(o, 0);
        prev = upto;
        upto = f->seq;
        qm_position *pos = f->pos;
        o->fl_head = (o->fl_head + 1) % o->fl_cap;
        o->fl_len--;
        if (!pos)
            continue; /* foreign: returned and dead-lettered, its confirm came now */
        qm_pos_set_holder(pos, NULL);
        qm_position_ack(pos);
        o->acked++;
        o->bad_dst_since = 0; /* the destination takes messages (again) */
    }
    if (upto)
        eod_send_acked(&o->es, upto, prev, o->fl_len, resend_table(o->m), sl_loop_now(o->m->loop),
                       wall_s());
    if (o->attached && o->q)
        qm_queue_schedule_dispatch(o->q); /* window room */
}

/* The session is gone: everything in flight is sendable again, at its place. */
static void requeue_all(link_outq *o)
{
    while (o->fl_len) {
        inflight *f = fl_at(o, o->fl_len - 1);
        o->fl_len--;
        if (!f->pos)
            continue;
        qm_pos_set_holder(f->pos, NULL);
        qm_position_requeue(f->pos);
    }
    o->fl_head = 0;
    o->bt_len = o->bt_head = 0;
    o->open_n = 0;
    o->open_bytes = 0;
    o->in_unit = 0;
}

/* ------------------------------------------------------------------------------------------
 * Dead letters (link.h "NACKs"): what the destination can never take goes to this node's
 * dead-letter queues, whole transactions together, in one record group (so a kill -9 leaves
 * either the messages in the outgoing queue or their copies in the dead-letter queue, never
 * both, never neither).
 */

#define CLASS_NACK_BAD_DST_Q 0x8000u
#define CLASS_NACK_REACH_QUEUE_TIMEOUT 0x8002u
#define CLASS_NACK_Q_EXCEED_QUOTA 0x8003u

static const char *class_name(uint32_t cls)
{
    switch (cls) {
    case CLASS_NACK_BAD_DST_Q:
        return LINK_NACK_BAD_DST_Q;
    case CLASS_NACK_REACH_QUEUE_TIMEOUT:
        return LINK_NACK_REACH_QUEUE_TIMEOUT;
    default:
        return LINK_NACK_Q_EXCEED_QUOTA;
    }
}

/* The dead letter of pos: its body and properties, the expiration removed (a dead letter does
 * not vanish; kept as x-msmq-original-expiration) and x-msmq-* headers saying why. */
static qm_message *dl_copy(link_outq *o, const qm_position *p, uint32_t cls, const char *reason,
                           int first_in_xact, uint64_t xact_first)
{
    const qm_message *m = p->msg;
    amqp_basic_props bp;
    if (!m->props_len || amqp_props_decode(qm_msg_props(m), m->props_len, &bp) < 0)
        memset(&bp, 0, sizeof bp);
    sl_buf hb, pb;
    sl_buf_init(&hb);
    sl_buf_init(&pb);
    size_t mark = amqp_tbl_begin(&hb);
    if (bp.flags & AMQP_P_HEADERS) {
        amqp_table_iter it;
        amqp_bytes k;
        amqp_value v;
        amqp_table_iter_init(&it, bp.headers);
        while (amqp_table_next(&it, &k, &v))
            if (k.len < 7 || memcmp(k.p, "x-msmq-", 7))
                amqp_tbl_put_value(&hb, k, &v);
    }
    amqp_tbl_put_long(&hb, "x-msmq-class", cls);
    amqp_tbl_put_str(&hb, "x-msmq-class-name", amqp_cstr(class_name(cls)));
    amqp_tbl_put_str(&hb, "x-msmq-dead-letter-reason", amqp_cstr(reason));
    amqp_tbl_put_str(&hb, "x-msmq-destination-queue", amqp_cstr(o->q->name));
    amqp_tbl_put_timestamp(&hb, "x-msmq-dead-letter-time", (uint64_t)wall_s());
    amqp_tbl_put_long(&hb, "x-msmq-seq-no", (int64_t)p->lookup_id);
    if (p->xact) {
        char xid[96];
        snprintf(xid, sizeof xid, "sluice-%s-%llu-%llu", o->m->node_id_hex,
                 (unsigned long long)o->es.seq_id, (unsigned long long)xact_first);
        amqp_tbl_put_str(&hb, "x-msmq-xact-id", amqp_cstr(xid));
        amqp_tbl_put_bool(&hb, "x-msmq-first-in-xact", first_in_xact);
        amqp_tbl_put_bool(&hb, "x-msmq-last-in-xact", !p->xact_cont);
    }
    if (bp.flags & AMQP_P_EXPIRATION) {
        amqp_tbl_put_str(&hb, "x-msmq-original-expiration", bp.expiration);
        bp.flags &= (uint16_t)~AMQP_P_EXPIRATION;
    }
    amqp_tbl_end(&hb, mark);
    bp.headers = (amqp_bytes){hb.data + mark + 4, hb.len - mark - 4};
    bp.flags |= AMQP_P_HEADERS;
    amqp_props_encode(&pb, &bp);
    qm_message *c = qm_message_new(qm_msg_exchange(m), qm_msg_routing_key(m), pb.data,
                                   (uint32_t)pb.len, m->body_len);
    if (m->body_len)
        memcpy(qm_msg_body(c), qm_msg_body(m), m->body_len);
    sl_buf_free(&hb);
    sl_buf_free(&pb);
    return c;
}

/* Move pos[0..n) (LOCKED, holder cleared or the link's: whole transactions, in sequence
 * order) to the dead-letter queues of the outgoing queue's vhost: transactional messages to
 * SYSTEM$;DEADXACT, the others to SYSTEM$;DEADLETTER. */
static void dead_letter(link_outq *o, qm_position **pos, size_t n, uint32_t cls, const char *reason)
{
    link_mgr *m = o->m;
    qm_vhost *vh = o->q->vhost;
    qm_queue *dlx = qm_queue_find(vh, "sluice.system.xact-deadletter", 29);
    qm_queue *dl = qm_queue_find(vh, "sluice.system.deadletter", 24);
    need_node_id(m);
    size_t xact = 0;
    uint64_t xact_first = 0;
    if (m->store)
        persist_group(m->store, 1);
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        qm_position *p = pos[i];
        if (first)
            xact_first = p->lookup_id;
        qm_queue *to = p->xact ? dlx : dl;
        if (to) {
            qm_message *c = dl_copy(o, p, cls, reason, first, xact_first);
            qm_queue_enqueue(to, c);
            qm_message_unref(c);
        }
        xact += p->xact;
        first = !p->xact_cont; /* the next one starts a transaction */
        qm_pos_set_holder(p, NULL);
        qm_position_ack(p); /* p may be freed */
    }
    if (m->store)
        persist_group(m->store, 0);
    o->q->stat_dead_lettered += n;
    o->dead_lettered += n;
    o->last_dl_class = cls;
    o->last_dl_count = n;
    o->last_dl_time = wall_s();
    snprintf(o->last_dl_reason, sizeof o->last_dl_reason, "%s", reason);
    sl_warn("link %s: %zu message(s) dead-lettered (%zu to DEADXACT, %zu to DEADLETTER), %s: %s",
            o->name, n, xact, n - xact, class_name(cls), reason);
}

/* ------------------------------------------------------------------------------------------
 * TimeToReachQueue. A message's age is bounded from its lookup id by samples of (the next
 * lookup id, the wall clock): a message whose id is below sample j's existed at sample j's
 * time, so it is at least as old as that; the first such sample gives its deadline (never
 * early, late by at most one sampling interval). The samples are durable (persist.h), so the
 * age survives restarts; those no pending message needs any more are dropped.
 */

static uint64_t sample_interval(const link_mgr *m)
{
    uint64_t iv = m->o.reach_queue_ms / 20;
    return iv < 100 ? 100 : iv > 60000 ? 60000 : iv;
}

/* Wall-clock ms when message `id` is past its time to reach queue; 0 = not known yet (it is
 * younger than the newest sample) or no limit. */
static uint64_t reach_deadline(const link_mgr *m, uint64_t id)
{
    if (!m->o.reach_queue_ms)
        return 0;
    size_t lo = 0, hi = m->n_lt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->lt[mid].next_id <= id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->n_lt ? m->lt[lo].wall_ms + m->o.reach_queue_ms : 0;
}

/* Dead-letter what waited past its time to reach queue and is known never to have reached it:
 * ready messages above sent_hwm (never sent, or refused since). What was sent and lacks its
 * order ack may have arrived: the destination decides those (x-reach-deadline). */
static size_t reach_sweep(link_outq *o, uint64_t wall)
{
    link_mgr *m = o->m;
    if (!m->o.reach_queue_ms || !o->q || !o->q->n_ready)
        return 0;
    size_t done = 0, cap = 0;
    qm_position **unit = NULL;
    char why[160];
    snprintf(why, sizeof why, "not delivered within its time to reach queue (%llu ms)",
             (unsigned long long)m->o.reach_queue_ms);
    while (done < 16384) {
        qm_position view;
        const qm_position *p = qm_queue_peek_after(o->q, o->sent_hwm, &view);
        if (!p)
            break;
        uint64_t id = p->lookup_id;
        if (p == &view)
            qm_message_unref(view.msg);
        uint64_t due = reach_deadline(m, id);
        if (!due || wall < due)
            break;
        /* the whole transaction: its messages follow in lookup order */
        size_t n = 0;
        qm_position *t = qm_queue_take(o->q, id);
        while (t) {
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                unit = sl_xrealloc(unit, cap * sizeof *unit);
            }
            unit[n++] = t;
            if (!t->xact_cont || !(p = qm_queue_peek_after(o->q, t->lookup_id, &view)))
                break;
            id = p->lookup_id;
            if (p == &view)
                qm_message_unref(view.msg);
            t = qm_queue_take(o->q, id);
        }
        if (!n)
            break;
        dead_letter(o, unit, n, CLASS_NACK_REACH_QUEUE_TIMEOUT, why);
        done += n;
    }
    sl_free(unit);
    return done;
}

/* Once per tick: a new sample when the interval has passed and ids moved; prune. */
static void reach_sample(link_mgr *m)
{
    if (!m->o.reach_queue_ms || !m->all)
        return;
    uint64_t wall = sl_wall_ms(), next = m->node->next_lookup_id;
    if (m->n_lt && (wall - m->lt[m->n_lt - 1].wall_ms < sample_interval(m) ||
                    next <= m->lt[m->n_lt - 1].next_id))
        return;
    /* the oldest message any outgoing queue still holds: samples at or below it are no use */
    uint64_t oldest = UINT64_MAX;
    for (link_outq *o = m->all; o; o = o->next) {
        if (!o->q)
            continue;
        if (o->fl_len && fl_at(o, 0)->seq < oldest)
            oldest = fl_at(o, 0)->seq;
        uint64_t r = qm_queue_oldest_ready_id(o->q);
        if (r && r < oldest)
            oldest = r;
    }
    size_t keep = 0;
    while (keep < m->n_lt && m->lt[keep].next_id <= oldest)
        keep++;
    if (keep) {
        memmove(m->lt, m->lt + keep, (m->n_lt - keep) * sizeof *m->lt);
        m->n_lt -= keep;
    }
    if (m->n_lt >= 4096) {
        /* thin the older half: their messages' deadlines move later, never earlier */
        size_t half = m->n_lt / 2, w = 0;
        for (size_t i = 0; i < half; i += 2)
            m->lt[w++] = m->lt[i + 1];
        memmove(m->lt + w, m->lt + half, (m->n_lt - half) * sizeof *m->lt);
        m->n_lt = w + (m->n_lt - half);
        keep = 1;
    }
    if (keep && m->store)
        persist_ltime_keep(m->store, m->lt, m->n_lt);
    if (oldest == UINT64_MAX)
        return; /* nothing waits: no sample needed until something does */
    if (m->n_lt == m->cap_lt) {
        m->cap_lt = m->cap_lt ? m->cap_lt * 2 : 64;
        m->lt = sl_xrealloc(m->lt, m->cap_lt * sizeof *m->lt);
    }
    m->lt[m->n_lt++] = (persist_ltime){next, wall};
    if (m->store)
        persist_ltime_add(m->store, next, wall);
}

/* ------------------------------------------------------------------------------------------
 * Requests (link.h "Request / response"): channel 2 consumes direct reply-to; each request
 * is a publish to "sluice.rpc" with a correlation-id; each reply a delivery carrying it back.
 * A request already sent when the session dies fails (it may or may not have been done: the
 * caller decides); one not yet sent waits for the next session, until its deadline.
 */

static void finish_call(rpc_call *c, const char *reply, const char *err)
{
    c->cb(c->ctx, reply, err);
    sl_free(c->req);
    sl_free(c);
}

static void fail_calls(link_outq *o, int sent_only, const char *why)
{
    rpc_call *fail = NULL, **tail = &fail, *keep = NULL, **ktail = &keep;
    for (rpc_call *c = o->calls, *next; c; c = next) {
        next = c->next;
        c->next = NULL;
        if (!sent_only || c->sent) {
            *tail = c;
            tail = &c->next;
        } else {
            *ktail = c;
            ktail = &c->next;
        }
    }
    o->calls = keep;
    while (fail) { /* callbacks may start new calls: the list is detached first */
        rpc_call *c = fail;
        fail = c->next;
        finish_call(c, NULL, why);
    }
}

static void expire_calls(link_outq *o, uint64_t now)
{
    rpc_call *late = NULL, **tail = &late;
    for (rpc_call **pp = &o->calls; *pp;) {
        rpc_call *c = *pp;
        if (now >= c->deadline) {
            *pp = c->next;
            c->next = NULL;
            *tail = c;
            tail = &c->next;
        } else {
            pp = &c->next;
        }
    }
    while (late) {
        rpc_call *c = late;
        late = c->next;
        char why[600];
        snprintf(why, sizeof why, "no reply from %s:%d in time%s%s", o->dest.host, o->dest.port,
                 o->last_error[0] ? ": " : "", o->last_error);
        finish_call(c, NULL, why);
    }
}

static void rpc_send(link_outq *o, rpc_call *c)
{
    amqp_method pm = {.id = AMQP_BASIC_PUBLISH};
    pm.u.basic_publish.exchange = AMQP_BYTES("sluice.rpc");
    pm.u.basic_publish.routing_key = AMQP_BYTES("");
    amqp_method_write(&o->out, 2, &pm);
    char corr[32];
    snprintf(corr, sizeof corr, "%llu", (unsigned long long)c->id);
    amqp_basic_props bp = {0};
    bp.flags = AMQP_P_CONTENT_TYPE | AMQP_P_CORRELATION_ID | AMQP_P_REPLY_TO;
    bp.content_type = AMQP_BYTES("application/json");
    bp.correlation_id = amqp_cstr(corr);
    bp.reply_to = AMQP_BYTES("amq.rabbitmq.reply-to");
    sl_buf props;
    sl_buf_init(&props);
    amqp_props_encode(&props, &bp);
    size_t len = strlen(c->req);
    amqp_content_header_write(&o->out, 2, len, props.data, props.len);
    sl_buf_free(&props);
    size_t chunk = o->frame_max - AMQP_FRAME_OVERHEAD;
    for (size_t off = 0; off < len; off += chunk)
        amqp_frame_write(&o->out, AMQP_FRAME_BODY, 2, c->req + off,
                         len - off < chunk ? len - off : chunk);
    c->sent = 1;
    mark_dirty(o);
}

static void rpc_start(link_outq *o)
{
    amqp_method co = {.id = AMQP_CHANNEL_OPEN};
    amqp_method_write(&o->out, 2, &co);
    o->rs = R_CHANNEL;
    mark_dirty(o);
}

static int rpc_method(link_outq *o, const amqp_method *mm)
{
    switch (mm->id) {
    case AMQP_CHANNEL_OPEN_OK: {
        amqp_method bc = {.id = AMQP_BASIC_CONSUME};
        bc.u.basic_consume.queue = AMQP_BYTES("amq.rabbitmq.reply-to");
        bc.u.basic_consume.consumer_tag = AMQP_BYTES("sluice.rpc");
        bc.u.basic_consume.no_ack = 1;
        amqp_method_write(&o->out, 2, &bc);
        o->rs = R_CONSUME;
        mark_dirty(o);
        return 1;
    }
    case AMQP_BASIC_CONSUME_OK:
        o->rs = R_READY;
        for (rpc_call *c = o->calls; c; c = c->next)
            if (!c->sent)
                rpc_send(o, c);
        return 1;
    case AMQP_BASIC_DELIVER:
        o->rpc_in_reply = 1;
        o->rpc_left = UINT64_MAX;
        o->rpc_body.len = o->rpc_body.off = 0;
        o->rpc_corr[0] = 0;
        return 1;
    default:
        return 0;
    }
}

static int rpc_content(link_outq *o, const amqp_frame *f)
{
    if (f->type == AMQP_FRAME_HEADER) {
        amqp_content_header h;
        amqp_basic_props bp;
        if (amqp_content_header_parse(f->payload, f->size, &h) < 0 ||
            amqp_props_decode(h.props, h.props_len, &bp) < 0 || h.body_size > (16u << 20)) {
            outq_fail(o, H_UNKNOWN, 1, "malformed reply from the destination");
            return -1;
        }
        snprintf(o->rpc_corr, sizeof o->rpc_corr, "%.*s",
                 (int)(bp.flags & AMQP_P_CORRELATION_ID ? bp.correlation_id.len : 0),
                 (const char *)bp.correlation_id.p);
        o->rpc_left = h.body_size;
    } else {
        if (f->size > o->rpc_left) {
            outq_fail(o, H_UNKNOWN, 1, "reply body longer than announced");
            return -1;
        }
        sl_buf_append(&o->rpc_body, f->payload, f->size);
        o->rpc_left -= f->size;
    }
    if (o->rpc_left)
        return 0;
    o->rpc_in_reply = 0;
    uint64_t id = strtoull(o->rpc_corr, NULL, 10);
    for (rpc_call **pp = &o->calls; *pp; pp = &(*pp)->next) {
        rpc_call *c = *pp;
        if (c->id != id || !c->sent)
            continue;
        *pp = c->next;
        sl_buf_put_u8(&o->rpc_body, 0);
        finish_call(c, (const char *)o->rpc_body.data, NULL);
        break;
    }
    o->rpc_body.len = o->rpc_body.off = 0;
    return 0;
}

static void rpc_outq_free(link_outq *o)
{
    outq_free(o);
}

void link_rpc_hold(link_mgr *m, const char *host, int port, int delta)
{
    link_outq *o = m->rpcs;
    while (o && (o->dest.port != port || strcasecmp(o->dest.host, host)))
        o = o->next;
    if (!o)
        return; /* no request link (it went): nothing the owner still holds for it */
    if (delta > 0)
        o->holds++;
    else if (o->holds)
        o->holds--;
    o->idle_since = 0;
}

sl_err link_rpc_call(link_mgr *m, const char *host, int port, const char *request_json,
                     uint32_t timeout_ms, link_rpc_cb cb, void *ctx)
{
    if (!m->online)
        return SL_ERR_NOT_ALLOWED; /* DISCONNECT: no node-to-node traffic */
    link_outq *o = m->rpcs;
    while (o && (o->dest.port != port || strcasecmp(o->dest.host, host)))
        o = o->next;
    if (!o) {
        if (strlen(host) >= sizeof o->dest.host)
            return SL_ERR_INVALID_PARAMETER;
        o = sl_xcalloc(1, sizeof *o);
        o->m = m;
        o->rpc_only = 1;
        snprintf(o->dest.host, sizeof o->dest.host, "%s", host);
        o->dest.port = port;
        snprintf(o->name, sizeof o->name, "requests to %s:%d", host, port);
        o->io.fd = -1;
        sl_buf_init(&o->rpc_body);
        o->next = m->rpcs;
        if (m->rpcs)
            m->rpcs->prev = o;
        m->rpcs = o;
    }
    rpc_call *c = sl_xcalloc(1, sizeof *c);
    c->id = ++o->rpc_next_id;
    c->cb = cb;
    c->ctx = ctx;
    c->req = sl_xstrdup(request_json);
    c->deadline = sl_loop_now(m->loop) + (timeout_ms ? timeout_ms : 10000);
    rpc_call **tail = &o->calls;
    while (*tail)
        tail = &(*tail)->next;
    *tail = c;
    if (o->cs == C_OPEN && o->rs == R_READY)
        rpc_send(o, c);
    else if (o->cs == C_NONE) {
        o->retry_at = 0;
        outq_consider(o, sl_loop_now(m->loop));
    }
    return SL_OK;
}

/* ------------------------------------------------------------------------------------------
 * The consumer: the queue hands messages over while the window has room
 */

static int c_can_take(qm_consumer *c)
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

static void close_batch(link_outq *o)
{
    if (!o->open_n)
        return;
    if (o->msmq) { /* MS-MQQB: every message stands alone, acks complete them */
        o->open_n = 0;
        o->open_bytes = 0;
        mark_dirty(o);
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
        uint64_t due = reach_deadline(m, o->open_seqs[0]);
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
    bt_push(o, o->open_n);
    o->open_n = 0;
    o->open_bytes = 0;
    mark_dirty(o);
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
    fl_push(o, pos, seq);
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
        mq_write_message(o, pos, seq, fl_at(o, o->fl_len - 1));
        o->sent++;
        o->in_unit = 0; /* each MSMQ message is its own transaction (FM and LM) */
        o->idle_since = 0;
        mark_dirty(o);
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
        close_batch(o);
    mark_dirty(o);
}

static void c_cancelled(qm_consumer *c)
{
    link_outq *o = c->ctx;
    o->attached = 0; /* the queue is going away; link_on_queue_deleted follows */
}

static const qm_consumer_ops link_consumer_ops = {c_can_take, c_deliver, c_cancelled};

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

static void detach(link_outq *o)
{
    if (o->attached) {
        qm_consumer_detach(&o->qc);
        o->attached = 0;
    }
}

/* ------------------------------------------------------------------------------------------
 * The connection
 */

static void conn_close(link_outq *o)
{
    if (o->cs == C_NONE)
        return;
    if (o->io.fd >= 0) {
        sl_loop_unwatch(o->m->loop, &o->w);
        o->io.ops->close(&o->io);
    }
    o->cs = C_NONE;
    sl_buf_free(&o->in);
    sl_buf_free(&o->out);
    sl_holds_clear(&o->disk_holds);
    o->out_sent = o->out_marked = 0;
    detach(o);
    requeue_all(o);
    o->blocked = 0;
    o->skip_content = 0;
    o->rs = R_NONE;
    o->rpc_in_reply = 0;
    /* a channel being opened again after a NACK goes with its connection: the next one is a
     * new connection (history, failures, requests), not a reopened channel */
    o->reopening = 0;
}

static uint64_t backoff_ms(const link_outq *o)
{
    const link_options *lo = &o->m->o;
    uint64_t d = lo->retry_min_ms;
    for (unsigned i = 1; i < o->failures && d < lo->retry_max_ms; i++)
        d *= 2;
    if (d > lo->retry_max_ms)
        d = lo->retry_max_ms;
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = (uint32_t)sl_now_ms();
    return d / 2 + r % (d / 2 + 1); /* jitter: nodes restarted together do not retry together */
}

static void outq_fail(link_outq *o, unsigned status, int backoff, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    int was_open = o->cs == C_OPEN;
    size_t in_flight = o->fl_len;
    conn_close(o);
    set_error(o, text);
    hist_add(o, status, 0xC00E0069u /* MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE */);
    o->failures++;
    if (was_open)
        o->reconnects++;
    uint64_t now = sl_loop_now(o->m->loop);
    o->retry_at = backoff ? now + backoff_ms(o) : now;
    eod_send_session(&o->es);
    fail_calls(o, 1, text);
    sl_warn("link %s: %s (%zu in flight requeued; retrying in %llu ms)", o->name, text, in_flight,
            (unsigned long long)(o->retry_at - now));
}

/* The node's identity, made durable the first time a link needs it. */
static void need_node_id(link_mgr *m)
{
    if (m->node_id_hex[0])
        return;
    if (m->store)
        memcpy(m->node_id, persist_node_id(m->store), 16);
    else if (getrandom(m->node_id, 16, 0) != 16)
        memset(m->node_id, 0x5a, 16);
    sl_hex(m->node_id_hex, m->node_id, 16);
    /* what a receiver's operator pins this node's link user to (user.NAME.link_node) */
    sl_info("links: node %s speaks as node id %s (logging in as '%s')", m->node_name,
            m->node_id_hex, m->o.user);
}

static void send_frames_handshake_start_ok(link_outq *o)
{
    link_mgr *m = o->m;
    need_node_id(m);
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

static void on_connected(link_outq *o)
{
    if (o->msmq) {
        mq_on_connected(o);
        return;
    }
    sl_buf_append(&o->out, amqp_protocol_header, 8);
    o->cs = C_START;
    o->cs_since = sl_loop_now(o->m->loop);
    mark_dirty(o);
}

static void became_open(link_outq *o)
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
    hist_add(o, H_ESTABLISHED, 0);
    eod_send_session(&o->es);
    o->pub_tag = 0;
    sl_info("link %s: connected to %s:%d (%s)", o->name, o->peer_addr, o->dest.port,
            o->msmq             ? "MSMQ queue manager, MS-MQQB"
            : o->peer_is_sluice ? "Sluice node, exactly once"
                                : "foreign broker, at least once");
    attach(o);
    if (o->calls && o->peer_is_sluice)
        rpc_start(o);
    else if (o->calls)
        fail_calls(o, 0, "the destination is not a Sluice node: no requests");
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
    detach(o);
    requeue_all(o);
    o->es.resend_due_ms = 0; /* nothing in flight */
    eod_send_session(&o->es);
    amqp_method co = {.id = AMQP_CHANNEL_OPEN};
    amqp_method_write(&o->out, 1, &co);
    o->cs = C_CHANNEL;
    o->cs_since = sl_loop_now(o->m->loop);
    o->reopening = 1;
    mark_dirty(o);
}

/* How many transactions (units) the first n in-flight messages hold. */
static size_t units_in_flight(link_outq *o, size_t n)
{
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        u += fl_at(o, i)->pos && !fl_at(o, i)->pos->xact_cont;
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
    while (dup < n && dup < o->fl_len && fl_at(o, dup)->seq <= last)
        dup++;
    if (dup) {
        uint64_t since = o->bad_dst_since; /* duplicates arrived before: not a delivery now */
        o->bt[o->bt_head] -= dup;
        n -= dup;
        ack_front(o, dup);
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
        requeue_all(o);
        size_t swept = reach_sweep(o, sl_wall_ms());
        if (!swept)
            return 0;
        set_error(o, text);
        reopen_channel(o);
        return 1;
    }
    }
    if (!dl || !n)
        return 0;
    qm_position **pos = sl_xmalloc(n * sizeof *pos);
    for (size_t i = 0; i < n; i++) {
        pos[i] = fl_at(o, 0)->pos;
        o->fl_head = (o->fl_head + 1) % o->fl_cap;
        o->fl_len--;
    }
    o->bt_head = (o->bt_head + 1) % o->bt_cap;
    o->bt_len--;
    dead_letter(o, pos, n, cls, detail);
    sl_free(pos);
    set_error(o, text);
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
    outq_fail(o, H_NOT_READY, 1, "%s closed by the destination: %u %.*s",
              channel_level ? "channel" : "connection", cc->reply_code, (int)cc->reply_text.len,
              (const char *)cc->reply_text.p);
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
    if (o->reopening && ch == 2 && rpc_method(o, mm))
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
            persist_state(o);
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
        became_open(o);
        return;
    case C_OPEN:
        if (ch == 2 && rpc_method(o, mm))
            return;
        switch (mm->id) {
        case AMQP_TX_COMMIT_OK:
            if (!o->bt_len) {
                outq_fail(o, H_UNKNOWN, 1, "tx.commit-ok without an outstanding batch");
                return;
            }
            {
                size_t n = o->bt[o->bt_head];
                o->bt_head = (o->bt_head + 1) % o->bt_cap;
                o->bt_len--;
                if (o->one_unit)
                    o->one_unit--;
                ack_front(o, n);
            }
            return;
        case AMQP_BASIC_ACK: {
            /* foreign: publisher confirms, tag k = the k-th publish of the session */
            uint64_t tag = mm->u.basic_ack.delivery_tag;
            uint64_t base = o->pub_tag - o->fl_len; /* tag of fl[0] is base + 1 */
            if (tag <= base || tag > o->pub_tag) {
                outq_fail(o, H_UNKNOWN, 1, "confirm for unknown delivery tag %llu",
                          (unsigned long long)tag);
                return;
            }
            size_t idx = (size_t)(tag - base - 1);
            if (mm->u.basic_ack.multiple)
                for (size_t i = 0; i <= idx; i++)
                    fl_at(o, i)->acked = 1;
            else
                fl_at(o, idx)->acked = 1;
            size_t n = 0;
            while (n < o->fl_len && fl_at(o, n)->acked)
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
            ack_front(o, n);
            return;
        }
        case AMQP_BASIC_NACK:
            outq_fail(o, H_UNKNOWN, 1, "the destination refused a message (basic.nack)");
            return;
        case AMQP_BASIC_RETURN: {
            const amqp_basic_return *r = &mm->u.basic_return;
            o->skip_content = 1;
            o->skip_left = UINT64_MAX;
            o->return_code = r->reply_code;
            o->return_msgid[0] = 0;
            set_error(o, "");
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
            mark_dirty(o);
            return;
        }
        default:
            break;
        }
        break;
    default:
        break;
    }
    outq_fail(o, H_UNKNOWN, 1, "unexpected %s from the destination", amqp_method_name(mm->id));
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
        inflight *f = fl_at(o, i);
        if (!f->pos || f->acked || !msgid_is(o, f, o->return_msgid))
            continue;
        qm_position *p = f->pos;
        f->pos = NULL;
        char why[300];
        snprintf(why, sizeof why, "no queue '%.200s' at the destination (312 NO_ROUTE)",
                 o->dest.queue);
        dead_letter(o, &p, 1, CLASS_NACK_BAD_DST_Q, why);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * MS-MQQB: an outgoing queue whose destination host is in msmq.hosts talks to a Windows queue
 * manager (MS-MQQB 3.1, the initiator's side) instead of an AMQP broker. Same queue, states,
 * history, PAUSE / RESUME / EOD_RESEND and resend timers; only the bytes differ:
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

#define MQ_RECOVERABLE_ACK_MS 500
#define MQ_ACK_TIMEOUT_MS 120000
#define MQ_WINDOW 64

/* The msmq.hosts entry naming a's host: its port (1801 when it wrote none), or 0. */
static int msmq_port_for(const link_mgr *m, const link_addr *a)
{
    const char *h = m->o.msmq_hosts;
    while (h && *h) {
        const char *end = strchr(h, ' ');
        size_t n = end ? (size_t)(end - h) : strlen(h);
        const char *colon = memchr(h, ':', n);
        size_t hl = colon ? (size_t)(colon - h) : n;
        int port = colon ? atoi(colon + 1) : MQQB_PORT;
        if (hl == strlen(a->host) && !strncasecmp(h, a->host, hl) && port > 0 &&
            (!a->port_given || a->port == port))
            return port;
        h = end ? end + 1 : NULL;
    }
    return 0;
}

static void mq_on_connected(link_outq *o)
{
    need_node_id(o->m);
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
    mark_dirty(o);
}

static void mq_session(link_outq *o, mqqb_session *s)
{
    *s = (mqqb_session){.ack_seq = (uint16_t)o->mq_recv,
                        .user_seq = (uint16_t)o->mq_sent,
                        .rec_seq = (uint16_t)o->mq_rec_sent,
                        .window = MQ_WINDOW};
}

static void mq_write_message(link_outq *o, qm_position *pos, uint64_t seq, inflight *f)
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
    /* the properties table of docs/msmq-wire.md read backwards (src/msmq/props.c) */
    msmq_out_scratch scratch;
    unsigned lost =
        msmq_out_props(qm_msg_props(msg), msg->props_len, &u, &scratch, (uint64_t)wall_s());
    for (unsigned b = 0; b < MSMQ_LOST_BITS; b++)
        if ((lost >> b & 1) && !(o->mq_lost_logged >> b & 1)) {
            /* once per queue and kind: a stream of such messages would flood the log */
            o->mq_lost_logged |= (uint16_t)(1u << b);
            sl_warn("link %s: MS-MQQB cannot carry %s: left out (logged once for this queue)",
                    o->name, msmq_lost_name(b));
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
        dead_letter(o, &p, 1, CLASS_NACK_Q_EXCEED_QUOTA,
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
    while (n < o->fl_len && fl_at(o, n)->acked)
        n++;
    if (n)
        ack_front(o, n);
}

static void mq_session_ack(link_outq *o, const mqqb_session *s)
{
    /* ack_seq counts our packets (16 bits, this session); only forward moves count */
    uint16_t ahead = (uint16_t)(s->ack_seq - (uint16_t)o->mq_peer_acked);
    if (ahead && ahead <= (uint16_t)(o->mq_sent - o->mq_peer_acked))
        o->mq_peer_acked += ahead;
    for (size_t i = 0; i < o->fl_len; i++) {
        inflight *f = fl_at(o, i);
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
        inflight *f = fl_at(o, i);
        if (f->mq_kind == MQ_TX && mqqb_tx_acked(o->es.seq_id, sid, upto, f->seq))
            f->acked = 1;
    }
    /* A message still unacked that was sent naming a previous number below what the
     * receiver has now told us it accepted, and skipping numbers past it, is refused by a
     * receiver that takes no jumps (Sluice's): the first one sent after this node started,
     * before it knew. Send again now, naming that number, rather than at the resend timer
     * (30 s and more): once per number learnt, so never a loop. */
    for (size_t i = 0; learnt && i < o->fl_len; i++) {
        inflight *f = fl_at(o, i);
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
        inflight *f = fl_at(o, i);
        if (f->mq_kind != MQ_TX || f->acked || !f->pos ||
            !mqqb_tx_acked(o->es.seq_id, sid, no, f->seq) ||
            (no > 1 && mqqb_tx_acked(o->es.seq_id, sid, no - 1, f->seq)))
            continue; /* not exactly number no of sequence sid */
        qm_position *p = f->pos;
        f->pos = NULL;
        f->acked = 1;
        dead_letter(o, &p, 1, cls, "refused by the MSMQ receiver (FinalAck)");
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
                outq_fail(o, H_NOT_READY, 1, "the MSMQ queue manager refused the session");
                return -1;
            }
            o->foreign = LINK_FOREIGN_NO; /* it is MSMQ */
            persist_state(o);
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
            became_open(o);
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
    outq_fail(o, H_UNKNOWN, 1, "MS-MQQB: %s", why);
    return -1;
}

static void mq_process_input(link_outq *o)
{
    for (int i = 0; i < 4096 && o->cs >= C_MQ_EC; i++) {
        uint32_t total;
        const char *why;
        int r = mqqb_frame_len(sl_buf_head(&o->in), sl_buf_unread(&o->in),
                               MQQB_PACKET_MAX + MQQB_SESSION_LEN, &total, &why);
        if (r == 0 || (r == 1 && sl_buf_unread(&o->in) < total))
            break;
        if (r < 0) {
            outq_fail(o, H_UNKNOWN, 1, "MS-MQQB: %s", why);
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
        mark_dirty(o);
    }
}

static void process_input(link_outq *o)
{
    if (o->msmq) {
        mq_process_input(o);
        return;
    }
    while (o->cs >= C_START && sl_buf_unread(&o->in) > 0) {
        amqp_frame f;
        int r = amqp_frame_parse(sl_buf_head(&o->in), sl_buf_unread(&o->in),
                                 LINK_FRAME_MAX + AMQP_FRAME_OVERHEAD, &f);
        if (r == AMQP_FEED_NEED_MORE)
            return;
        if (r < 0) {
            outq_fail(o, H_UNKNOWN, 1, "malformed frame from the destination (%d)", r);
            return;
        }
        o->last_recv = sl_loop_now(o->m->loop);
        if (f.type == AMQP_FRAME_METHOD) {
            amqp_method mm;
            if (amqp_method_decode(f.payload, f.size, &mm) != AMQP_DECODE_OK) {
                outq_fail(o, H_UNKNOWN, 1, "undecodable method from the destination");
                return;
            }
            handle_method(o, f.channel, &mm);
            if (o->cs == C_NONE)
                return; /* failed: the buffer is gone */
        } else if ((f.type == AMQP_FRAME_HEADER || f.type == AMQP_FRAME_BODY) && f.channel == 2 &&
                   o->rpc_in_reply) {
            if (rpc_content(o, &f) < 0)
                return;
        } else if (f.type == AMQP_FRAME_HEADER && o->skip_content) {
            amqp_content_header h;
            amqp_basic_props bp;
            if (amqp_content_header_parse(f.payload, f.size, &h) < 0 ||
                amqp_props_decode(h.props, h.props_len, &bp) < 0) {
                outq_fail(o, H_UNKNOWN, 1, "malformed content header from the destination");
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
            outq_fail(o, H_UNKNOWN, 1, "unexpected frame type %u from the destination", f.type);
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
            outq_fail(o, H_SEND_FAILURE, 1, "%s", why);
        }
        return;
    }
}

static void on_event(sl_loop *loop, sl_watch *w, int events)
{
    link_outq *o = w->data;
    (void)loop;
    char err[256];
    unsigned status = H_UNKNOWN;
    if (o->cs == C_CONNECTING) {
        if (!(events & (SL_EV_WRITE | SL_EV_ERROR)))
            return;
        if (link_io_connected(&o->io, err, sizeof err, &status) < 0) {
            connect_failed(o, status, err);
            return;
        }
        if (o->m->o.tls) {
            if (link_io_tls_start(&o->io, o->m->o.tls, o->dest.host, err, sizeof err) < 0) {
                outq_fail(o, H_UNKNOWN, 1, "%s:%d: %s", o->dest.host, o->dest.port, err);
                return;
            }
            o->cs = C_TLS;
        } else {
            sl_loop_watch(o->m->loop, &o->w, SL_EV_READ);
            on_connected(o);
            return;
        }
    }
    if (o->cs == C_TLS) {
        int want = 0;
        int r = link_io_tls_handshake(&o->io, &want, err, sizeof err);
        if (r < 0) {
            outq_fail(o, H_NOT_READY, 1, "%s:%d: %s", o->dest.host, o->dest.port, err);
            return;
        }
        if (r == 0) {
            sl_loop_watch(o->m->loop, &o->w, want ? want : SL_EV_READ);
            return;
        }
        sl_loop_watch(o->m->loop, &o->w, SL_EV_READ);
        on_connected(o);
        return;
    }
    if (events & SL_EV_WRITE)
        mark_dirty(o);
    if (!(events & (SL_EV_READ | SL_EV_ERROR)))
        return;
    for (int i = 0; i < 16 && o->cs >= C_START; i++) {
        uint8_t *dst = sl_buf_reserve(&o->in, 64 * 1024);
        ssize_t n = o->io.ops->read(&o->io, dst, 64 * 1024);
        if (n > 0) {
            o->in.len += (size_t)n;
            process_input(o);
            if (o->cs == C_NONE)
                return;
            if ((size_t)n < 64 * 1024)
                break;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        outq_fail(o, H_NOT_READY, 1, "the destination closed the connection%s%s", n < 0 ? ": " : "",
                  n < 0 ? o->io.ops->error(&o->io) : "");
        return;
    }
    if (sl_buf_unread(&o->out))
        mark_dirty(o); /* handshake replies, heartbeats: written at the end of the turn */
}

/* The TCP connect to addrs[addr_i] (the format name's numeric address, or one its host
 * resolved to). The attempt's InProcess entry goes into the history with the first one. */
static void connect_addr(link_outq *o)
{
    char err[256];
    unsigned status = H_UNKNOWN;
    o->peer_addr[0] = 0;
    if (link_io_tcp_connect(&o->io, o->addrs[o->addr_i], o->dest.port, o->peer_addr,
                            sizeof o->peer_addr, err, sizeof err, &status) < 0) {
        o->io.fd = -1;
        connect_failed(o, status, err);
        return;
    }
    o->cs = C_CONNECTING;
    o->cs_since = sl_loop_now(o->m->loop);
    o->last_recv = o->last_send = o->cs_since;
    o->w.fd = o->io.fd;
    o->w.fn = on_event;
    o->w.data = o;
    if (o->addr_i == 0)
        hist_add(o, H_IN_PROCESS, 0);
    if (sl_loop_watch(o->m->loop, &o->w, SL_EV_WRITE) < 0)
        outq_fail(o, H_UNKNOWN, 1, "cannot watch the socket: %s", strerror(errno));
}

/* The TCP connect to addrs[addr_i] failed (refused, unreachable, no answer in time): the next
 * address of the name, if there is one, within the same attempt; else the attempt failed. */
static void connect_failed(link_outq *o, unsigned status, const char *err)
{
    if (o->addr_i + 1 < o->n_addrs) {
        sl_info("link %s: %s:%d: %s; trying %s, the next address of '%s'", o->name,
                o->addrs[o->addr_i], o->dest.port, err, o->addrs[o->addr_i + 1], o->dest.host);
        if (o->io.fd >= 0) {
            sl_loop_unwatch(o->m->loop, &o->w);
            o->io.ops->close(&o->io);
            o->io.fd = -1;
        }
        o->addr_i++;
        connect_addr(o);
        return;
    }
    if (o->n_addrs > 1)
        outq_fail(o, status, 1, "%s:%d: %s (%u addresses of '%s' tried)", o->addrs[o->addr_i],
                  o->dest.port, err, o->n_addrs, o->dest.host);
    else
        outq_fail(o, status, 1, "%s:%d: %s", o->dest.host, o->dest.port, err);
}

static void on_resolved(void *ctx, const char (*addrs)[LINK_ADDR_LEN], unsigned n, const char *err)
{
    link_outq *o = ctx;
    o->rq = NULL;
    if (o->cs != C_RESOLVING)
        return; /* the attempt gave up waiting (DnsFailure): the next one asks again */
    if (n == 0) {
        outq_fail(o, H_DNS_FAILURE, 1, "cannot resolve '%s': %s", o->dest.host, err);
        return;
    }
    o->n_addrs = n < LINK_RESOLVE_ADDRS ? n : LINK_RESOLVE_ADDRS;
    for (unsigned i = 0; i < o->n_addrs; i++)
        snprintf(o->addrs[i], sizeof o->addrs[i], "%s", addrs[i]);
    o->addr_i = 0;
    connect_addr(o);
}

static int is_numeric_addr(const char *host)
{
    unsigned char a[16];
    return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

/* A connect attempt: a host name is looked up on the resolver's threads first (C_RESOLVING:
 * the loop goes on, the wait bounded by link_dns_timeout_ms in outq_consider), then the
 * non-blocking connect to its address. */
static void start_connect(link_outq *o)
{
    o->peer_addr[0] = 0;
    o->io.fd = -1;
    o->cs = C_CONNECTING; /* so a failure below is recorded as an attempt */
    o->cs_since = sl_loop_now(o->m->loop);
    o->last_recv = o->last_send = o->cs_since;
    sl_buf_init(&o->in);
    sl_buf_init(&o->out);
    o->peer_is_sluice = !o->msmq; /* until connection.start says otherwise */
    o->frame_max = LINK_FRAME_MAX;
    o->n_addrs = o->addr_i = 0;
    if (is_numeric_addr(o->dest.host)) {
        snprintf(o->addrs[0], sizeof o->addrs[0], "%.45s", o->dest.host);
        o->n_addrs = 1;
        connect_addr(o);
        return;
    }
    if (!o->rq && (!o->m->resolver ||
                   !(o->rq = link_resolve(o->m->resolver, o->dest.host, on_resolved, o)))) {
        outq_fail(o, H_DNS_FAILURE, 1, "cannot resolve '%s': no resolver thread", o->dest.host);
        return;
    }
    o->cs = C_RESOLVING;
}

static void flush_one(link_outq *o)
{
    if (o->cs < C_START || o->io.fd < 0)
        return;
    /* A transaction's messages all became sendable at once, so after dispatch nothing ready
     * means the rest of the open one is gone (purged, expired): close the batch anyway. */
    if (o->cs == C_OPEN && o->in_unit && (!o->q || o->q->n_ready == 0))
        o->in_unit = 0;
    if (o->cs == C_OPEN && !o->in_unit)
        close_batch(o);
    /* What was written since the last flush waits for everything appended to the store so
     * far (this turn's records among it). */
    uint64_t done = o->m->store ? persist_done(o->m->store) : 0;
    uint64_t end = o->out_sent + sl_buf_unread(&o->out);
    if (end > o->out_marked) {
        if (o->m->store)
            sl_holds_mark(&o->disk_holds, o->out_marked, persist_ticket(o->m->store), done);
        o->out_marked = end;
    }
    sl_holds_release(&o->disk_holds, done);
    if (o->disk_holds.len && !o->in_held) { /* the next finished sync flushes it again */
        o->in_held = 1;
        o->held_next = o->m->held;
        o->m->held = o;
    }
    size_t avail;
    while ((avail = sl_holds_avail(&o->disk_holds, o->out_sent, sl_buf_unread(&o->out))) > 0) {
        ssize_t n = o->io.ops->write(&o->io, sl_buf_head(&o->out), avail);
        if (n > 0) {
            sl_buf_consume(&o->out, (size_t)n);
            o->out_sent += (uint64_t)n;
            o->last_send = sl_loop_now(o->m->loop);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            sl_loop_watch(o->m->loop, &o->w, SL_EV_READ | SL_EV_WRITE);
            return;
        }
        outq_fail(o, H_SEND_FAILURE, 1, "write to the destination failed: %s",
                  n < 0 ? o->io.ops->error(&o->io) : "closed");
        return;
    }
    if (o->w.events != SL_EV_READ)
        sl_loop_watch(o->m->loop, &o->w, SL_EV_READ);
    /* Give back a big buffer once it is empty, never before: what is still in it waits for
     * the disk (holds) and would be lost from the stream (it was, when 1 KiB messages filled
     * the window with more than 4 MiB: the link stalled until the resend timer). */
    if (!sl_buf_unread(&o->out) && o->out.cap > (4u << 20))
        sl_buf_free(&o->out);
    if (o->attached && o->q && c_can_take(&o->qc))
        qm_queue_schedule_dispatch(o->q); /* the buffer drained: more can go */
}

void link_mgr_flush(link_mgr *m)
{
    while (m->dirty) {
        link_outq *o = m->dirty;
        m->dirty = o->dirty_next;
        o->in_dirty = 0;
        flush_one(o);
    }
}

void link_mgr_synced(link_mgr *m)
{
    if (!m)
        return;
    /* Only the links that wait: O(waiting), not O(outgoing queues), per sync. A flush that
     * still finds holds puts its link back. */
    while (m->held) {
        link_outq *o = m->held;
        m->held = o->held_next;
        o->in_held = 0;
        if (o->disk_holds.len)
            mark_dirty(o);
    }
}

/* ------------------------------------------------------------------------------------------
 * Timers: connect when there is work, heartbeats, handshake timeout, resend, idle close
 */

static void outq_consider(link_outq *o, uint64_t now)
{
    link_mgr *m = o->m;
    if (o->paused || !m->online) {
        if (o->cs != C_NONE)
            conn_close(o);
        return;
    }
    switch (o->cs) {
    case C_NONE:
        if (((o->q && qm_queue_message_count(o->q) > 0) || o->calls) && now >= o->retry_at)
            start_connect(o);
        expire_calls(o, now);
        return;
    case C_OPEN:
        break;
    case C_RESOLVING:
        if (now - o->cs_since >= m->o.dns_timeout_ms)
            outq_fail(o, H_DNS_FAILURE, 1, "cannot resolve '%s': no answer within %u ms",
                      o->dest.host, m->o.dns_timeout_ms);
        return;
    case C_CONNECTING:
        if (o->addr_i + 1 < o->n_addrs && now - o->cs_since > ADDR_CONNECT_MS) {
            char why[64];
            snprintf(why, sizeof why, "no answer within %d ms", ADDR_CONNECT_MS);
            connect_failed(o, H_NOT_READY, why);
            return;
        }
        /* fall through */
    default:
        if (now - o->cs_since > HANDSHAKE_MS)
            outq_fail(o, H_NOT_READY, 1, "no answer from %s:%d within %d ms", o->dest.host,
                      o->dest.port, HANDSHAKE_MS);
        return;
    }
    if (o->heartbeat) {
        uint64_t period = (uint64_t)o->heartbeat * 1000;
        if (now - o->last_recv >= 2 * period) {
            outq_fail(o, H_NOT_READY, 1, "missed heartbeats from the destination");
            return;
        }
        if (now - o->last_send >= period / 2) {
            amqp_heartbeat_write(&o->out);
            mark_dirty(o);
        }
    }
    if (o->fl_len && o->es.resend_due_ms && now >= o->es.resend_due_ms && !o->blocked) {
        /* MS-MQQB Transactional Ack Wait Timer: everything unacked goes again (a fresh
         * session: the receiver drops what it has already). */
        size_t n = o->fl_len;
        eod_send_resend(&o->es, resend_table(m), now);
        conn_close(o);
        set_error(o, "");
        snprintf(o->last_error, sizeof o->last_error,
                 "no order ack within the resend interval: resending %zu message(s)", n);
        o->retry_at = now;
        outq_consider(o, now);
        return;
    }
    expire_calls(o, now);
    if (!o->fl_len && !o->calls && !o->holds && (!o->q || qm_queue_message_count(o->q) == 0)) {
        if (!o->idle_since)
            o->idle_since = now;
        else if (now - o->idle_since >= m->o.idle_ms) {
            sl_info("link %s: idle for %u ms, closing", o->name, m->o.idle_ms);
            conn_close(o);
        }
    } else {
        o->idle_since = 0;
    }
}

static void tick(sl_loop *loop, sl_timer *t)
{
    link_mgr *m = t->data;
    uint64_t now = sl_loop_now(loop);
    if (now - m->id_mark_at >= 1000) {
        /* how fast lookup ids go (send reservations are sized from it) */
        uint64_t next = m->node->next_lookup_id;
        m->id_rate = m->id_mark_at ? (next - m->id_mark) * 1000 / (now - m->id_mark_at) : 0;
        m->id_mark = next;
        m->id_mark_at = now;
    }
    reach_sample(m);
    uint64_t wall = m->o.reach_queue_ms ? sl_wall_ms() : 0;
    for (link_outq *o = m->all; o;) {
        link_outq *next = o->next;
        outq_consider(o, now);
        if (wall)
            reach_sweep(o, wall);
        o = next;
    }
    for (link_outq *o = m->rpcs; o;) {
        link_outq *next = o->next;
        outq_consider(o, now);
        if (o->cs == C_NONE && !o->calls && !o->holds && now - o->retry_at > m->o.idle_ms)
            rpc_outq_free(o); /* nothing asked of that node for a while */
        o = next;
    }
    sl_timer_start(loop, t, now + TICK_MS);
}

/* ------------------------------------------------------------------------------------------
 * Outgoing queues
 */

static void key_of(const qm_vhost *vh, const char *canon, char *out, size_t cap, size_t *len)
{
    size_t vl = strlen(vh->name), cl = strlen(canon);
    if (vl + 1 + cl > cap) {
        *len = 0;
        return;
    }
    memcpy(out, vh->name, vl);
    out[vl] = 0;
    for (size_t i = 0; i < cl; i++)
        out[vl + 1 + i] = (char)(canon[i] >= 'A' && canon[i] <= 'Z' ? canon[i] + 32 : canon[i]);
    *len = vl + 1 + cl;
}

static link_outq *outq_adopt(link_mgr *m, qm_queue *q)
{
    link_addr a;
    char err[300];
    if (link_fmt_parse(q->name, strlen(q->name), &a, err, sizeof err) < 0) {
        sl_warn("link: queue '%s' looks like an outgoing queue but is not one: %s", q->name, err);
        return NULL;
    }
    link_outq *o = sl_xcalloc(1, sizeof *o);
    o->m = m;
    o->q = q;
    snprintf(o->name, sizeof o->name, "%s", q->name);
    o->dest = a;
    o->msmq = msmq_port_for(m, &a) != 0;
    o->io.fd = -1;
    eod_send_init(&o->es, q->incarnation);
    if (m->store) {
        persist_outq_get(m->store, q->incarnation, &o->paused, &o->foreign);
        /* what may have been sent before a restart: may have arrived (not known precisely) */
        o->sent_durable = o->sent_hwm = persist_outq_sent_get(m->store, q->incarnation);
    }
    o->paused &= OQ_ONHOLD;
    q->link = o;
    o->next = m->all;
    if (m->all)
        m->all->prev = o;
    m->all = o;
    char key[1200];
    size_t kl;
    key_of(q->vhost, q->name, key, sizeof key, &kl);
    if (kl)
        sl_map_put(m->by_key, key, kl, o);
    return o;
}

static void outq_free(link_outq *o)
{
    link_mgr *m = o->m;
    conn_close(o);
    link_resolve_cancel(o->rq);
    o->rq = NULL;
    if (o->in_dirty) {
        for (link_outq **pp = &m->dirty; *pp; pp = &(*pp)->dirty_next)
            if (*pp == o) {
                *pp = o->dirty_next;
                break;
            }
    }
    if (o->in_held) {
        for (link_outq **pp = &m->held; *pp; pp = &(*pp)->held_next)
            if (*pp == o) {
                *pp = o->held_next;
                break;
            }
    }
    fail_calls(o, 0, "the link is going away");
    link_outq **head = o->rpc_only ? &m->rpcs : &m->all;
    if (o->prev)
        o->prev->next = o->next;
    else
        *head = o->next;
    if (o->next)
        o->next->prev = o->prev;
    if (o->q) {
        char key[1200];
        size_t kl;
        key_of(o->q->vhost, o->q->name, key, sizeof key, &kl);
        if (kl && sl_map_get(m->by_key, key, kl) == o)
            sl_map_del(m->by_key, key, kl);
        o->q->link = NULL;
    }
    sl_buf_free(&o->rpc_body);
    sl_free(o->fl);
    sl_free(o->bt);
    sl_free(o->open_seqs);
    sl_holds_free(&o->disk_holds);
    sl_free(o);
}

static void on_queue_deleted(qm_queue *q, void *ctx)
{
    (void)ctx;
    if (q->link)
        outq_free(q->link);
}

void link_mgr_set_self(link_mgr *m, const char *addr, int port)
{
    snprintf(m->self_addr, sizeof m->self_addr, "%s", addr);
    m->self_port = port;
}

static int is_self(const link_mgr *m, const link_addr *a)
{
    if (a->port != m->self_port)
        return 0;
    if (!strcasecmp(a->host, m->self_addr) || !strcasecmp(a->host, "localhost"))
        return 1;
    /* bound to 0.0.0.0: every loopback address is us */
    return !strcmp(m->self_addr, "0.0.0.0") && !strncmp(a->host, "127.", 4);
}

qm_queue *link_outgoing_queue(link_mgr *m, qm_vhost *vh, const char *fmt, size_t len, int create,
                              int *local, char *err, size_t errlen)
{
    link_addr a;
    *local = 0;
    if (link_fmt_parse(fmt, len, &a, err, errlen) < 0)
        return NULL;
    int mq_port = msmq_port_for(m, &a);
    if (mq_port) { /* a Windows queue manager: MS-MQQB's port, written in the canonical name */
        a.port = mq_port;
        a.port_given = 1;
    }
    if (is_self(m, &a)) {
        *local = 1;
        snprintf(err, errlen, "'%.*s' names a queue of this node", (int)len, fmt);
        return NULL;
    }
    char canon[900], key[1200];
    size_t kl;
    link_fmt_canonical(&a, canon, sizeof canon);
    key_of(vh, canon, key, sizeof key, &kl);
    link_outq *o = kl ? sl_map_get(m->by_key, key, kl) : NULL;
    if (o)
        return o->q;
    if (!create) {
        snprintf(err, errlen, "no outgoing queue for '%.*s'", (int)len, fmt);
        return NULL;
    }
    qm_queue_decl d = {.name = canon, .name_len = strlen(canon), .durable = 1};
    qm_queue *q;
    char derr[300];
    if (qm_queue_declare(vh, &d, &q, NULL, derr, sizeof derr) != SL_OK) {
        snprintf(err, errlen, "cannot create the outgoing queue: %s", derr);
        return NULL;
    }
    if (!q->link && !outq_adopt(m, q)) {
        snprintf(err, errlen, "cannot adopt the outgoing queue");
        return NULL;
    }
    sl_info("link: outgoing queue %s created in vhost '%s'", q->name, vh->name);
    return q;
}

qm_queue *link_msmq_outgoing_queue(link_mgr *m, qm_vhost *vh, const char *fmt, size_t len,
                                   int create, char *err, size_t errlen)
{
    link_addr a;
    int local;
    if (link_fmt_parse(fmt, len, &a, err, errlen) < 0)
        return NULL;
    if (!msmq_port_for(m, &a)) {
        snprintf(err, errlen, "'%.*s' is not on a host of msmq.hosts", (int)len, fmt);
        return NULL;
    }
    return link_outgoing_queue(m, vh, fmt, len, create, &local, err, errlen);
}

static qm_queue *resolve_remote(qm_vhost *vh, const char *name, size_t len, int create, void *ctx)
{
    link_mgr *m = ctx;
    char err[300];
    int local;
    if (!link_fmt_is_candidate(name, len))
        return NULL;
    qm_queue *q = link_outgoing_queue(m, vh, name, len, create, &local, err, sizeof err);
    if (!q && local) {
        /* DIRECT=TCP:<this node>\private$\<queue>: the local queue of that name */
        link_addr a;
        if (link_fmt_parse(name, len, &a, err, sizeof err) == 0)
            return qm_queue_find(vh, a.queue, strlen(a.queue));
    }
    return q;
}

/* ------------------------------------------------------------------------------------------
 * The manager
 */

static void on_resolver_ready(sl_loop *loop, sl_watch *w, int events)
{
    (void)loop;
    (void)events;
    link_mgr *m = w->data;
    link_resolver_run_done(m->resolver);
}

link_mgr *link_mgr_new(qm_node *node, sl_loop *loop, struct persist *store, const link_options *o)
{
    link_mgr *m = sl_xcalloc(1, sizeof *m);
    m->node = node;
    m->loop = loop;
    m->store = store;
    m->o = *o;
    m->by_key = sl_map_new();
    sl_buf_init(&m->scratch);
    sl_buf_init(&m->props_scratch);
    snprintf(m->node_name, sizeof m->node_name, "%s", node->name);
    m->online = store ? persist_online(store) : 1;
    node->online = (uint8_t)m->online;
    node->resolve_remote = resolve_remote;
    node->remote_ctx = m;
    node->on_queue_deleted = on_queue_deleted;
    node->hook_ctx = m;
    sl_timer_init(&m->tick, tick, m);
    sl_timer_start(loop, &m->tick, sl_now_ms() + TICK_MS);
    m->resolver = link_resolver_new();
    if (m->resolver) {
        m->resolver_w.fd = link_resolver_fd(m->resolver);
        m->resolver_w.fn = on_resolver_ready;
        m->resolver_w.data = m;
        if (sl_loop_watch(loop, &m->resolver_w, SL_EV_READ) < 0) {
            link_resolver_free(m->resolver);
            m->resolver = NULL;
        }
    }
    if (!m->resolver)
        sl_warn("link: no resolver for host names (%s): only numeric addresses will connect",
                strerror(errno));
    return m;
}

void link_mgr_recover(link_mgr *m)
{
    if (m->store) {
        size_t n;
        const persist_ltime *v = persist_ltimes(m->store, &n);
        if (n) {
            m->lt = sl_xmalloc(n * sizeof *m->lt);
            memcpy(m->lt, v, n * sizeof *v);
            m->n_lt = m->cap_lt = n;
        }
    }
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (sl_map_next(m->node->vhosts, &it, &k, &kl, &v)) {
        qm_vhost *vh = v;
        size_t qit = 0;
        void *qv;
        while (sl_map_next(vh->queues, &qit, &k, &kl, &qv)) {
            qm_queue *q = qv;
            if (q->is_outgoing && !q->link)
                outq_adopt(m, q);
        }
    }
}

void link_mgr_free(link_mgr *m)
{
    if (!m)
        return;
    sl_timer_stop(m->loop, &m->tick);
    while (m->all)
        outq_free(m->all);
    while (m->rpcs)
        outq_free(m->rpcs);
    if (m->resolver) {
        sl_loop_unwatch(m->loop, &m->resolver_w);
        link_resolver_free(m->resolver);
    }
    m->node->resolve_remote = NULL;
    m->node->on_queue_deleted = NULL;
    sl_map_free(m->by_key);
    sl_buf_free(&m->scratch);
    sl_buf_free(&m->props_scratch);
    sl_free(m->lt);
    sl_free(m);
}

void link_mgr_set_online(link_mgr *m, int online)
{
    m->online = online;
    m->node->online = (uint8_t)online;
    if (m->store)
        persist_set_online(m->store, online);
    uint64_t now = sl_loop_now(m->loop);
    if (!online)
        for (link_outq *o = m->rpcs; o; o = o->next) {
            conn_close(o);
            fail_calls(o, 0, "this node is offline (DISCONNECT)");
        }
    for (link_outq *o = m->all; o; o = o->next) {
        if (!online && o->cs != C_NONE) {
            conn_close(o);
            set_error(o, "the node is offline (DISCONNECT)");
            hist_add(o, H_NOT_READY, 0);
        }
        if (online) {
            o->failures = 0;
            o->retry_at = now;
        }
    }
}

size_t link_mgr_outgoing(link_mgr *m, qm_queue **out, size_t cap)
{
    size_t n = 0;
    for (link_outq *o = m->all; o; o = o->next) {
        if (n < cap)
            out[n] = o->q;
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------------------------------
 * Management actions and properties
 */

sl_err link_pause(qm_queue *q)
{
    link_outq *o = q->link;
    if (!o)
        return SL_ERR_INVALID_PARAMETER;
    if (!o->paused) {
        o->paused = 1;
        persist_state(o);
        if (o->cs != C_NONE) {
            conn_close(o);
            hist_add(o, H_NOT_READY, 0);
        }
        sl_info("link %s: paused (ONHOLD)", q->name);
    }
    return SL_OK;
}

sl_err link_resume(qm_queue *q)
{
    link_outq *o = q->link;
    if (!o)
        return SL_ERR_INVALID_PARAMETER;
    if (o->paused) {
        o->paused = 0;
        o->failures = 0;
        o->retry_at = 0;
        persist_state(o);
        sl_info("link %s: resumed", q->name);
    }
    return SL_OK;
}

sl_err link_eod_resend(qm_queue *q)
{
    link_outq *o = q->link;
    if (!o)
        return SL_ERR_INVALID_PARAMETER;
    uint64_t now = sl_loop_now(o->m->loop);
    if (o->fl_len) {
        /* resend every unacked message now, on the same sequence: a new session starts from
         * the oldest pending one; the receiver drops what it already has */
        eod_send_resend(&o->es, resend_table(o->m), now);
        conn_close(o);
        hist_add(o, H_NOT_READY, 0);
        sl_info("link %s: EOD_RESEND", q->name);
    }
    o->failures = 0;
    o->retry_at = now;
    outq_consider(o, now);
    return SL_OK;
}

static void seqinfo(link_seqinfo *s, uint64_t seq_id, uint64_t no, uint64_t prev)
{
    s->seq_id = seq_id;
    s->seq_no64 = no;
    s->prev_no64 = prev;
    s->seq_no = (uint32_t)no;
    s->prev_no = (uint32_t)prev;
}

/* Lookup id of the i-th ready message (0 = next to send), without paging anything in. */
static uint64_t ready_id_at(qm_queue *q, size_t i)
{
    qm_position view;
    const qm_position *p = qm_queue_peek_view(q, i, &view);
    if (!p)
        return 0;
    uint64_t id = p->lookup_id;
    if (p == &view)
        qm_message_unref(view.msg);
    return id;
}

void link_outq_get_info(qm_queue *q, link_outq_info *out)
{
    memset(out, 0, sizeof *out);
    link_outq *o = q->link;
    out->format_name = q->name;
    if (!o) {
        out->last_error = "";
        return;
    }
    out->state = state_of(o);
    out->foreign = (link_foreign)o->foreign;
    out->last_error = o->last_error;
    out->last_error_time = o->last_error_time;
    if (o->cs != C_NONE)
        snprintf(out->next_hop, sizeof out->next_hop, "IP=%.70s",
                 o->peer_addr[0] ? o->peer_addr : o->dest.host);
    uint64_t sid = o->es.seq_id;
    seqinfo(&out->last_ack, sid, o->es.last_ack, o->es.last_ack_prev);
    /* Sent and not order-acked: what is in flight now, and what an ended session had sent
     * (requeued in place, ready again, SeqNo <= sent_hwm). In flight are the oldest. */
    uint64_t requeued = o->sent_hwm ? qm_queue_count_ready_upto(q, o->sent_hwm) : 0;
    if (o->fl_len || requeued) {
        uint64_t first = 0, last = 0, before_last = 0;
        if (o->fl_len) {
            first = fl_at(o, 0)->seq;
            last = fl_at(o, o->fl_len - 1)->seq;
            before_last = o->fl_len > 1 ? fl_at(o, o->fl_len - 2)->seq : 0;
        }
        if (requeued) {
            uint64_t head = ready_id_at(q, 0), tail = ready_id_at(q, (size_t)requeued - 1);
            if (head && (!first || head < first))
                first = head;
            if (tail > last) {
                before_last = requeued > 1 ? ready_id_at(q, (size_t)requeued - 2) : last;
                last = tail;
            }
        }
        seqinfo(&out->first_non_ack, sid, first, 0);
        seqinfo(&out->last_non_ack, sid, last, before_last);
    }
    qm_position *next = qm_queue_peek(q, 0);
    seqinfo(&out->next_seq, sid, next ? next->lookup_id : 0, o->es.last_sent);
    out->last_ack_count = o->es.last_ack_count;
    out->last_ack_time = o->es.last_ack_time;
    out->in_flight = o->fl_len;
    out->no_ack_count = o->fl_len + requeued;
    out->no_read_count = 0; /* final (receive) acks are not tracked */
    out->resend_count = o->es.resend_index;
    out->resend_interval_s = eod_resend_interval(resend_table(o->m), o->es.resend_index) / 1000;
    if (o->es.resend_due_ms) {
        uint64_t now = sl_loop_now(o->m->loop);
        out->resend_time =
            wall_s() +
            (int64_t)((o->es.resend_due_ms > now ? o->es.resend_due_ms - now : 0) / 1000);
    }
    out->sent = o->sent;
    out->acked = o->acked;
    out->dead_lettered = o->dead_lettered;
    out->last_dl_count = o->last_dl_count;
    out->last_dl_class = o->last_dl_class;
    out->last_dl_class_name = o->last_dl_class ? class_name(o->last_dl_class) : "";
    out->last_dl_reason = o->last_dl_reason;
    out->last_dl_time = o->last_dl_time;
    out->reconnects = o->reconnects;
    out->history = o->hist;
    out->n_history = o->nhist;
}

sl_err link_recv_may_write(const struct acc_db *acc, const char *user, const qm_queue *q, char *err,
                           size_t errlen)
{
    if (q->is_outgoing) {
        snprintf(err, errlen, "'%s' is an outgoing queue, not a destination", q->name);
        return SL_ERR_ACCESS_REFUSED;
    }
    if (!acc)
        return SL_OK;
    return acc_check_link_write(acc, user, q->vhost->name, q->name, err, errlen);
}
