/* link.h - store and forward between nodes: outgoing queues, the link that drains them, and
 * exactly-once in-order (EOD) transfer (DESIGN.md section 6, MS-MQDMPR OutgoingQueue,
 * reference/msmq.md sections 1.4, 1.5, 7.1). The table of contents of src/link/.
 *
 *   link.h       this contract (used by broker/, mgmt/, the soak harness, issue 10)
 *   (below, in src/eod/: eod.[ch] the EOD sender bookkeeping and receiver acceptance rule, no
 *   sockets, unit tested over a simulated link in tests/unit/test_eod.c; outq.h, fmt.c and
 *   outq.c the outgoing-queue registry: remote format names, naming, lookup, the states'
 *   names. Its declarations are included here, so callers of link.h see them as before.)
 *   io.c         the socket under a link (link_io: plain TCP now, TLS can slot in)
 *   link_internal.h  what the files below share (the link_outq, the manager), and their jobs:
 *   mgr.c        the manager: outgoing queues adopted, timers, PAUSE / RESUME / EOD_RESEND
 *   conn.c       the connection under a link: connect, events, output held for the disk
 *   amqp_send.c  one AMQP 0-9-1 client connection per outgoing queue: batching, EOD, NACKs
 *   mqqb_send.c  or, to a host in msmq.hosts (link_options.msmq_hosts), one MS-MQQB session
 *                to a Windows queue manager (the codec is mqqb/mqqb.h)
 *   deadletter.c NACKs' dead letters and TimeToReachQueue
 *   rpc_call.c   requests over links, the calling side (rpc.c, rpc_queue.c: the serving side)
 *   the receiving side is broker/link_recv.c: an ordinary AMQP connection that announced
 *   itself as a link in its client-properties.
 *
 * Outgoing queues
 *   A publish to the default exchange whose routing key is a remote direct format name (or a
 *   binding whose destination is one) lands in the outgoing queue for that destination, a
 *   durable qm_queue of the publisher's vhost named by the canonical format name
 *   ("DIRECT=TCP:127.0.0.3:5672\private$\orders"; address lower-cased, the queue part as first
 *   spelled; two spellings that differ only in case reach the same queue). It is purged,
 *   deleted, paged, counted and recovered like any queue; it is not declared, consumed or
 *   moved into by clients. q->is_outgoing marks it, q->link points at its link_outq.
 *
 * EOD (what is on the wire, what is on disk, when an ack goes out)
 *   Sequence of an outgoing queue: SeqID = the queue's incarnation (a new sequence whenever
 *   the queue is re-created), SeqNo = the position's lookup id. A position's lookup id is
 *   fixed when it becomes Available in the outgoing queue (a transaction's enqueues take
 *   fresh ids at commit, so lookup order is the order messages became sendable) and is in
 *   its durable enqueue record before the first send; for transient messages the link first
 *   reserves the id durably (meta high-water mark), so no number is reused after a crash.
 *   PrevNo = SeqNo of the message sent before it on this session, 0 for the oldest pending.
 *   Messages of one AMQP transaction carry "more of my transaction follows" (xact_cont) and
 *   are never split across link transactions.
 *
 *   Between Sluice nodes: channel 1 in tx mode. A link transaction is
 *     basic.publish(exchange "", routing key <destination queue>) x N   (original properties
 *         and body, untouched)
 *     basic.publish(exchange "sluice.eod", routing key "batch")  body: eod_batch_encode()
 *         (sender node id, SeqID, first PrevNo, the N SeqNos)
 *     tx.commit
 *   pipelined (several commits outstanding). The receiver applies a link transaction all or
 *   nothing: each message with SeqNo <= last accepted is a duplicate (dropped, still acked),
 *   a message with PrevNo <= last is accepted; anything else refuses the whole transaction
 *   (channel.close 406, the sender reconnects and resends from its oldest pending message).
 *   Accepted enqueues and the new last-accepted number (msgs record R_EOD_IN) are one
 *   all-or-nothing record group in the same group commit; tx.commit-ok (the cumulative
 *   order ack) is written only after that fdatasync. On commit-ok the sender acks the
 *   positions of that batch (they leave the outgoing queue).
 *   To a foreign broker (FOREIGN "YES": the peer's server-properties are not Sluice's):
 *   confirm.select, mandatory publishes, basic.ack(multiple) acks, basic.return is not a
 *   delivery (the message stays, last_error says why); at least once, message-id kept, or
 *   when the message has none "sluice-<node id hex>-<SeqID>-<SeqNo>" (stable across resends).
 *
 * NACKs: messages the destination can never take (MSMQ's negative acknowledgements, message
 * classes of reference/msmq.md 7.3). The receiver refuses such a link transaction like any
 * other (channel.close, nothing applied) with a token at the start of the reply text's detail:
 *     "[MQMSG_CLASS_NACK_BAD_DST_Q last=N] no queue 'q' on node b"             (404)
 *     "[MQMSG_CLASS_NACK_Q_EXCEED_QUOTA last=N] queue 'q' ... can never hold"   (405)
 *     "[MQMSG_CLASS_NACK_REACH_QUEUE_TIMEOUT last=N] message ... is past ..."    (406)
 * N = the sequence's last accepted SeqNo: the batch's messages <= N are duplicates of what
 * arrived before (the sender forgets them as delivered), nothing after N was applied. The
 * sender then moves the refused messages, whole transactions at a time, to its own dead-letter
 * queue (SYSTEM$;DEADXACT for transactional ones, SYSTEM$;DEADLETTER for the rest) in one
 * record group, with x-msmq-class / x-msmq-class-name / x-msmq-dead-letter-reason headers,
 * and goes on with what follows on a new channel: a missing queue after link_bad_queue_grace_ms
 * of refusals (so an operator who creates it meanwhile gets the messages), a transaction that
 * the queue could not hold even empty, a message past TimeToReachQueue
 * (link_time_to_reach_queue_ms: the sender's own clock for what it never sent; for what may
 * have arrived, the receiver's verdict on the control message's x-reach-deadline header, a
 * wall-clock ms deadline of the batch's first message). Receivers without the token (older
 * nodes) just refuse: the sender keeps the messages and retries, as before.
 *
 * Request / response over the link (for issue 10: remote handles, remote purge, management
 * object of a remote queue): on channel 2 of the same authenticated link connection the
 * caller consumes amq.rabbitmq.reply-to and publishes JSON requests to exchange "sluice.rpc"
 * (correlation-id, reply-to); the owning node answers with one JSON reply per request. See
 * link_rpc_call below and LINK_RPC_* for the operations.
 */
#ifndef SL_LINK_LINK_H
#define SL_LINK_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "eod/outq.h"
#include "net/loop.h"
#include "qm/qm.h"

struct persist;
struct node_config;

/* ------------------------------------------------------------------------------------------
 * The link manager: one per node (owned by the broker)
 */
typedef struct link_mgr link_mgr;
typedef struct link_outq link_outq;

typedef struct link_options {
    const char *user, *password;         /* what this node logs in as on other nodes */
    uint32_t heartbeat_s;                /* proposed on links (dead-peer detection) */
    uint32_t retry_min_ms, retry_max_ms; /* reconnect backoff */
    uint32_t idle_ms;                    /* close a link idle this long */
    /* MSMQ's resend timer table: 3 x short, 3 x medium, 3 x long, then final (ms) */
    uint32_t resend_ms[4];            /* short, medium, long, final */
    uint32_t batch_msgs, batch_bytes; /* one link transaction at most */
    uint32_t window_batches;          /* link transactions outstanding at most */
    /* NACKs (see "NACKs"): a missing destination queue is refused this long before its
     * messages are dead-lettered (0: at once); TimeToReachQueue in ms (0: never) */
    uint32_t bad_queue_grace_ms;
    uint64_t reach_queue_ms;
    /* a host name of a format name (DIRECT=OS:<host>) is looked up off the loop (resolve.h);
     * an attempt waits this long for the answer, then fails with DnsFailure */
    uint32_t dns_timeout_ms;
    /* link_ssl = true: links speak TLS (net/tls.h client context, the destination's
     * certificate verified), to the format name's port; NULL: plain TCP. Owned by the caller,
     * outlives the manager. */
    struct sl_tls_ctx *tls;
    /* msmq.hosts.N: space-separated "host[:port]" (port 1801 when none) of Windows queue
     * managers: an outgoing queue to one speaks MS-MQQB instead of AMQP (see "MS-MQQB" in
     * mqqb_send.c). NULL: none. Owned by the caller, outlives the manager. */
    const char *msmq_hosts;
} link_options;
void link_options_defaults(link_options *o);

link_mgr *link_mgr_new(qm_node *node, sl_loop *loop, struct persist *store, const link_options *o);
/* The links of node n from its settings, as one of its parts (start.c): -1 after logging why. */
struct sl_node;
int link_start(struct sl_node *n);
void link_mgr_free(link_mgr *m);
/* Adopt every outgoing queue the store recovered (call once after persist_open). */
void link_mgr_recover(link_mgr *m);
/* Once per loop turn, after the group commit: write what the links buffered (records their
 * sends depend on are on disk by then). */
void link_mgr_flush(link_mgr *m);
/* A store generation ended: links with output held for the disk get flushed this turn. */
void link_mgr_synced(link_mgr *m);
/* The node went online / offline (CONNECT / DISCONNECT): links start or stop. */
void link_mgr_set_online(link_mgr *m, int online);

/* The outgoing queue for a format name in vh: found (case-insensitively) or, with create,
 * created. NULL with err for a malformed name, or when the name points at this node (*local
 * is then set to 1 and the caller routes to the local queue). */
qm_queue *link_outgoing_queue(link_mgr *m, qm_vhost *vh, const char *fmt, size_t len, int create,
                              int *local, char *err, size_t errlen);
/* The outgoing queue (created on first use when create) for a format name whose host is in
 * msmq.hosts (a Windows queue manager, MS-MQQB); NULL with err when the name is malformed or its
 * host is not one (the MSMQ door's administration acknowledgements go only to such hosts). */
qm_queue *link_msmq_outgoing_queue(link_mgr *m, qm_vhost *vh, const char *fmt, size_t len,
                                   int create, char *err, size_t errlen);
/* This node's own listening address (so a format name naming it is local). */
void link_mgr_set_self(link_mgr *m, const char *addr, int port);

/* Management actions on an outgoing queue (q->is_outgoing). */
sl_err link_pause(qm_queue *q);      /* -> ONHOLD, session closed, messages kept */
sl_err link_resume(qm_queue *q);     /* -> INACTIVE, then reconnects */
sl_err link_eod_resend(qm_queue *q); /* resend every unacked message now, same sequence */
void link_outq_get_info(qm_queue *q, eod_outq_info *out);
/* Every outgoing queue of the node (for listings), in no particular order. */
size_t link_mgr_outgoing(link_mgr *m, qm_queue **out, size_t cap);

/* ------------------------------------------------------------------------------------------
 * Request / response to the node that owns a queue (issue 10 builds on this)
 *
 * Requests and replies are JSON objects. Operations (the "op" member):
 *   "queue.info"  {"vhost", "queue"} -> {"ok": true, "vhost", "queue", "incarnation",
 *                 "context", "message_count", "bytes", "consumers"}   (rpc.c)
 *   "queue.open", "queue.purge", "queue.close": remote queue handles (rpc_queue.h, issue 10)
 * Failures: {"ok": false, "hresult": "0x...", "hresult_name", "reason"}.
 * The callback runs on the loop thread with the reply (NULL and err on a transport failure:
 * no connection within the timeout, peer closed).
 */
typedef void (*link_rpc_cb)(void *ctx, const char *mgmt_reply_json, const char *err);
sl_err link_rpc_call(link_mgr *m, const char *host, int port, const char *request_json,
                     uint32_t timeout_ms, link_rpc_cb cb, void *ctx);
/* Something on this node holds state at host:port that dies with the request link (remote
 * handles: the owner closes the contexts of a link that goes): delta +1 keeps the link up
 * when idle, -1 lets it go again. */
void link_rpc_hold(link_mgr *m, const char *host, int port, int delta);
/* The receiving side's handler (broker/link_recv.c calls it): the reply for one request from
 * peer (the link's node name), logged in as user (the link's authenticated user, whose
 * permissions apply), on link connection conn_id, malloc'ed JSON. */
char *link_rpc_serve(qm_node *node, uint64_t boot_id, const char *peer, const char *user,
                     uint64_t conn_id, const char *request, size_t len);

#endif
