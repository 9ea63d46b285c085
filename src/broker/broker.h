/* broker.h - the AMQP 0-9-1 door: connections and channels translating methods into queue
 * manager (qm/) operations. Internal header of src/broker/, its table of contents.
 *
 *   broker.c    the broker object: listener, connection list, before-sleep work (dispatch,
 *               confirms, flushing), memory alarm, shutdown
 *   conn.c      one connection: socket I/O, handshake, tune, heartbeats, frame routing,
 *               connection-level errors and close
 *   channel.c   channel lifecycle, content assembly (publish -> header -> body), channel
 *               errors, unacked deliveries
 *   h_exchange.c, h_queue.c, h_basic.c  method handlers by AMQP class
 *   deliver.c   qm consumer callbacks: writing basic.deliver / get-ok / return frames
 *   security.c  the access module's seeding, vhost creation/deletion, connection closing and
 *               counting for deleted users/vhosts and limits
 *   link_recv.c the receiving side of node-to-node links (EOD batches, requests)
 *
 * Ownership: the broker owns connections; a connection owns its channels; a channel owns its
 * consumers and delivery records. A connection that fails is marked dead and freed in the
 * before-sleep hook, never from inside a handler further up the stack.
 */
#ifndef SL_BROKER_BROKER_H
#define SL_BROKER_BROKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "access/access.h"
#include "amqp/frame.h"
#include "amqp/method.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/holds.h"
#include "net/accept.h"
#include "net/loop.h"
#include "qm/qm.h"
#include "node/config.h"

#include "node/node.h"

typedef struct broker broker;
typedef struct conn conn;

/* A body sent from its message (out_refs.c): before out's byte at offset .at. */
typedef struct broker_out_ref_t {
    uint64_t at;
    qm_message *m; /* one reference held until the bytes are sent */
    const uint8_t *p;
    uint32_t len; /* bytes not sent yet, from p */
} broker_out_ref_t;

/* Bodies this long or longer go to a plain TCP socket from the message (writev), shorter ones
 * are copied into the output buffer (cheaper than two iovec entries and a reference). */
#define BROKER_BODY_REF_MIN 512
typedef struct channel channel;
typedef struct consumer consumer;

/* Output past this many unsent bytes stops deliveries to the connection's consumers until
 * the socket drains (back-pressure instead of unbounded buffering). */
#define CONN_OUT_HIGH (1u << 20)
/* Output past this many unsent bytes stops reading the connection's requests until it is
 * under CONN_OUT_HIGH again: replies to a client that does not read them are bounded. */
#define CONN_OUT_MAX (4u << 20)
/* Input read per turn per connection at most, so one busy peer cannot starve the rest. */
#define CONN_READ_BUDGET (256u * 1024)
/* Input a connection blocked by an alarm still reads, held behind the publish it stopped at,
 * to find a close in it (conn.c, amqp/hold.h): small, as the memory alarm may be why. */
#define CONN_HOLD_MAX (64u * 1024)

/* The AMQP door: its listeners and its connections. The node (node/node.h) is everything
 * else the door works with; the door is one of the node's parts (broker.c). */
struct broker {
    sl_node *n;
    int listen_fd;
    sl_acceptor acceptor; /* AMQP listener: descriptor reserve, pause and resume */
    int tls_listen_fd;    /* AMQPS listener (listeners.ssl.default), -1 when none */
    sl_acceptor tls_acceptor;
    struct sl_tls_ctx *tls_ctx;
    char bound_addr[64];
    int bound_port;
    char tls_bound_addr[64];
    int tls_bound_port;
    conn *conns; /* all live connections, newest first */
    /* The views' walk by id (view.c): it goes on from the connection returned last rather
     * than from the head; forgotten when that connection is unlinked. */
    node_client_cursor view;
    conn *dirty;         /* connections with output or confirms to flush this turn */
    conn *input_pending; /* connections whose held-back input is handled next turn */
    conn *waiting;       /* connections with held output or pending confirms */
    size_t n_conns;
    size_t n_open;    /* connections past connection.open (connection_max counts these) */
    sl_map *reply_to; /* direct reply-to names -> channel (reply_to.c) */
};

enum conn_state {
    CONN_HEADER = 0, /* waiting for the protocol header */
    CONN_START_SENT, /* connection.start sent, waiting for start-ok */
    CONN_TUNE_SENT,  /* connection.tune sent, waiting for tune-ok */
    CONN_OPENING,    /* waiting for connection.open */
    CONN_OPEN,
    CONN_CLOSING, /* connection.close sent, waiting for close-ok */
    CONN_LINGER,  /* closed (close-ok sent or received): output drained, then shutdown(WR);
                     input is read and discarded until the client closes or a short timeout,
                     so a client still writing never gets a reset that eats the close-ok */
    CONN_DEAD,    /* socket to be closed and the connection freed */
};

struct conn {
    broker *b;
    uint64_t id;
    int fd;
    sl_watch w;
    enum conn_state state;
    char peer[64];
    char name[160]; /* "127.0.0.1:50000 -> 127.0.0.1:5672" for logs */
    int loopback;
    sl_buf in, out;
    /* Frames that must follow the reply being built (basic.cancel after queue.delete-ok,
     * as RabbitMQ orders them); moved into out when the turn flushes. */
    sl_buf late;
    uint16_t channel_max;
    uint32_t frame_max;
    uint16_t heartbeat;
    uint64_t last_recv, last_send;
    sl_timer hb_timer;
    /* client capabilities */
    uint8_t cap_cancel_notify, cap_blocked, cap_auth_failure_close;
    uint8_t blocked_sent;  /* connection.blocked sent, unblocked not yet */
    uint8_t has_published; /* RabbitMQ blocks only connections that publish */
    uint8_t read_paused;   /* blocked by a resource alarm: read only up to CONN_HOLD_MAX */
    uint64_t lazy_gen;     /* the latest lazy ticket of a pipelined confirm here: its sync may be
                              paced only until the loop has read all the input there is */
    uint8_t out_paused;    /* output over CONN_OUT_MAX: not read until it drains */
    uint8_t input_pending; /* in b->input_pending: buffered input handled next turn, the
                              socket not read until then */
    uint8_t consumers_waiting; /* a consumer was refused for a full output buffer */
    uint8_t in_dirty;
    uint8_t counted_open; /* counted in b->n_open */
    /* AMQPS: the TLS stream over fd (NULL: plain TCP); handshaking until it completes,
     * before the AMQP protocol header; the socket watched for what TLS wants next */
    struct sl_tls *tls;
    uint8_t tls_handshaking;
    uint8_t tls_write_wants_read;  /* a write would block until the socket is readable */
    char *auth_mechanism;          /* the one the client logged in with */
    struct conn_login *login_wait; /* a slow password check under way: nothing read meanwhile */
    uint8_t shut_wr;               /* CONN_LINGER: shutdown(SHUT_WR) done */
    char *user;
    qm_vhost *vhost;
    /* a node-to-node link (client-properties sluice_link): link_recv.c */
    uint8_t is_link;
    uint8_t link_sender[16];
    char *link_node;
    channel **channels; /* indexed by channel id, grown on demand */
    size_t channels_cap;
    size_t n_channels;
    conn *next, *prev;
    conn *dirty_next;
    conn *input_next;
    /* Output held for the disk: the bytes of out from stream offset holds[i].at on wait for
     * store generation holds[i].gen (a ring, both fields increasing). out_sent counts the
     * bytes sent since the connection opened, so a stream offset survives consuming. */
    sl_holds holds;
    uint64_t out_sent;
    /* Bodies sent by reference between out's bytes (out_refs.c): a ring in stream order;
     * out_consumed counts out's bytes consumed since the connection opened, out_ref_bytes the
     * referenced bytes not sent yet (broker_out_len counts them with out's). */
    broker_out_ref_t *out_refs;
    uint32_t out_refs_head, out_refs_len, out_refs_cap;
    uint64_t out_consumed, out_ref_bytes;
    uint8_t in_waiting;
    conn *wait_next, *wait_prev; /* in b->waiting */
    channel *confirming;         /* channels with confirms to send or waiting for the disk */
};

enum channel_state { CH_OPEN = 1, CH_CLOSING };
enum content_state { CONTENT_NONE = 0, CONTENT_WANT_HEADER, CONTENT_WANT_BODY };

typedef struct delivery {
    uint64_t tag;
    qm_position *pos; /* NULL once settled */
    consumer *cons;   /* NULL for basic.get deliveries */
    uint8_t in_tx;    /* settled inside the open transaction, applied at commit */
} delivery;

struct consumer {
    qm_consumer qc; /* first: qm hands us &qc */
    channel *ch;
    char *tag;
    size_t tag_len;
    uint32_t prefetch; /* per-consumer limit (basic.qos global=false), 0 = none */
    uint32_t unacked;
    consumer *next, *prev; /* in ch->consumers: unlinked in O(1), however many it has */
    /* in ch->starved while turned away by the channel's global prefetch limit */
    consumer *starved_next, *starved_prev;
    uint8_t is_starved;
};

#define PUB_RK_AT 256 /* both names are short strings: at most 255 bytes */

struct channel {
    conn *c;
    uint16_t id;
    enum channel_state state;
    /* content assembly for basic.publish */
    enum content_state content;
    /* The exchange of the last basic.publish, valid while qm_exchange_epoch equals
     * pub_exchange_epoch: a channel publishing to one exchange looks it up once, and an
     * exchange deleted between a method frame and its last body frame is noticed. */
    qm_exchange *pub_exchange;
    uint64_t pub_exchange_epoch;
    /* names of the publish being assembled; allocated at the first publish, then reused */
    char *pub_names; /* exchange name (NUL-terminated) at 0, routing key at PUB_RK_AT */
    uint8_t pub_exchange_len, pub_rk_len;
    uint8_t pub_mandatory;
    qm_message *pub_msg;
    uint64_t pub_received;
    uint64_t pub_cap; /* body bytes pub_msg has room for (grows as body frames arrive) */
    uint32_t pub_headers_off, pub_headers_len; /* headers table within pub_msg->props */
    sl_buf pub_bcc; /* the BCC array taken out of the publish's headers (routed, not kept) */
    /* deliveries awaiting settlement, in tag order (a ring over an array) */
    delivery *unacked;
    size_t ua_head, ua_len, ua_cap;
    size_t ua_live; /* records with pos != NULL */
    uint64_t next_tag;
    /* consumers and prefetch; ctags finds a consumer by its tag (consume's duplicate check,
     * cancel) without walking a list that may hold thousands */
    consumer *consumers;
    struct sl_map *ctags;
    /* Consumers refused for the channel-wide (global) prefetch limit, or for a full output
     * buffer, since there was room: room offers more to these only, not to every consumer. */
    consumer *starved;
    uint32_t prefetch_next;   /* per-consumer limit for consumers created from now on */
    uint32_t prefetch_global; /* channel-wide limit (global=true), 0 = none */
    /* publisher confirms */
    uint8_t confirm;
    uint8_t pipelines;      /* it published before an earlier confirm was sent: its confirms'
                               syncs may be paced (persist_ticket_since_lazy) */
    uint8_t pipe_quiet;     /* publishes since, in a row, that found every confirm sent */
    uint64_t pub_seq;       /* sequence number of the last publish */
    uint64_t confirm_done;  /* everything <= this has been acked or nacked */
    uint64_t confirm_ready; /* ack everything <= this at flush */
    /* Outcomes still waiting for the disk, oldest first (a ring): acks up to `upto`
     * released once store generation `gen` is durable, or one nack, in publish order. */
    struct confirm_wait *cw;
    size_t cw_head, cw_len, cw_cap;
    /* in c->confirming: the turn's flush visits only channels with confirm work, not every
     * channel of the connection */
    channel *conf_next, *conf_prev;
    uint8_t in_confirming;
    /* transactions */
    uint8_t tx_mode;
    qm_tx *tx;
    /* access: the exchange in pub_names was allowed for writing at this generation of the
     * access module (0 = not checked), and then whether topic permissions apply to it */
    uint64_t pub_acc_gen;
    uint8_t pub_topic_check;
    char *last_queue; /* the last queue declared on this channel */
    char *reply_tag;  /* direct reply-to: the reply consumer's tag, or NULL */
    char *reply_name; /* and the channel's "amq.rabbitmq.reply-to.*" name */
    uint8_t released;
    /* link channels: the link transaction being received (link_recv.c) */
    qm_message **lk_msgs;
    size_t lk_n, lk_cap;
    uint64_t lk_bytes;
    qm_message *lk_ctl;
};

/* broker.c */
/* The AMQP door of node n: listen on the AMQP (and AMQPS) ports, become one of the node's
 * parts. NULL after logging why. The node stops and frees it (node_free). */
broker *broker_start(sl_node *n);
/* Send connection.blocked (if asked for) and stop reading c until the alarms clear. */
void broker_block_publisher(conn *c);
/* A delivery (basic.deliver, get-ok) is about to be written to c: if handing it out appended
 * a delivery mark (or a no-ack removal) since the last delivery, the output from here on
 * waits until that mark is written to the file (persist.h: write tickets). */
void broker_hold_delivery(conn *c);
/* c has held output or pending confirms: flush it again when a sync completes. */
void broker_wait_disk(conn *c);
void broker_mark_dirty(conn *c);
/* c stopped reading for a full output buffer and may go on: handle its buffered input at the
 * start of the next turn. */
void broker_input_pending(conn *c);
/* Schedule dispatch for the queues of the consumers a full output buffer turned away. */
void broker_conn_resume_consumers(conn *c);

/* view.c: the connections as node/clients.h views (the node's client hooks) */
int broker_client_next(void *ctx, uint64_t at_most, node_client *out);
int broker_client_find(void *ctx, const char *name, node_client *out);
int broker_client_close(void *ctx, uint64_t id, const char *text);
int broker_channel_at(void *ctx, uint64_t client, size_t slot, node_channel *out);
int broker_consumers(void *ctx, uint64_t client, size_t slot, const char *after, size_t after_len,
                     node_consumer_fn fn, void *arg);
const char *broker_owner_name(void *ctx, const void *owner);

/* conn.c */
conn *broker_conn_new(broker *b, int fd);
/* Make a new connection speak TLS first (the AMQPS listener): handshake, then AMQP. */
void broker_conn_start_tls(conn *c, struct sl_tls *tls);
void broker_conn_on_event(sl_loop *loop, sl_watch *w, int events);
/* Connection-level error: send connection.close(code from e, text, class/method) and wait
 * for close-ok; every channel is released at once. */
void broker_conn_error(conn *c, sl_err e, uint32_t method_id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Close the socket at the end of this turn without a close frame. */
void broker_conn_kill(conn *c, const char *why);
void broker_conn_free(conn *c);
void broker_conn_send_method(conn *c, uint16_t ch, const amqp_method *m);
/* What is written to c from now on waits until the store holds on disk everything appended
 * so far (a no-op when it does already). */
void broker_conn_hold_for_disk(conn *c);
void broker_conn_hold_until(conn *c, uint64_t gen);
/* A delivery's wait for its delivery mark: given up below min_insync_replicas
 * (broker_drop_delivery_holds). */
void broker_conn_hold_delivery(conn *c, uint64_t gen);
/* 1 while c has output held for the disk. */
int broker_conn_has_held(const conn *c);
void broker_conn_flush(conn *c);
/* Watch for reading unless paused (alarm or full output); keep a pending write watch. */
void broker_conn_update_watch(conn *c);
/* Handle input held back while the output was full. */
void broker_conn_resume_input(conn *c);
/* Server-initiated close with 320 (shutdown). */
void broker_conn_force_close(conn *c, const char *text);
void broker_conn_set_blocked(conn *c, int blocked);
/* Release and free channel id (after close / close-ok). */
void broker_conn_drop_channel(conn *c, uint16_t id);

/* channel.c */
channel *broker_channel_new(conn *c, uint16_t id);
/* Release everything the channel holds: consumers cancelled, unacked requeued, open
 * transaction aborted, partial publish dropped. Safe to call more than once. */
void broker_channel_release(channel *ch);
void broker_channel_free(channel *ch);
/* Channel-level error: channel.close with the code of e; the channel discards everything
 * but close/close-ok from now on. A hard error (per the error table) becomes a connection
 * error instead. */
void broker_channel_error(channel *ch, sl_err e, uint32_t method_id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Access checks for the channel's user in its vhost (the access module's rules and texts):
 * 1, or 0 after raising 403 ACCESS_REFUSED on the channel. A topic check passes for
 * exchanges that are not topic exchanges. */
int broker_channel_allowed(channel *ch, acc_kind kind, amqp_bytes name, acc_perm perm,
                           uint32_t method_id);
int broker_channel_topic_allowed(channel *ch, const qm_exchange *x, amqp_bytes routing_key,
                                 acc_perm perm, uint32_t method_id);
/* queue.bind, exchange.bind and their unbinds: the binding rule (node_bind_check) for dest
 * (a queue or an exchange, dest_kind) and the source exchange src with key. */
int broker_channel_bind_allowed(channel *ch, acc_kind dest_kind, amqp_bytes dest, amqp_bytes src,
                                amqp_bytes key, uint32_t method_id);
/* Handle one frame addressed to an open channel. */
void broker_channel_on_frame(channel *ch, const amqp_frame *f);
void broker_channel_flush_confirms(channel *ch);
/* Send what the connection's channels have to confirm (those in c->confirming). */
void broker_conn_flush_confirms(conn *c);
/* Publisher-confirm outcome of publish number seq (in order): ack (ok = 1) or nack. An ack
 * goes out once store generation gen is durable (0: it needs nothing of the disk), and
 * never before the outcome of an earlier publish. */
void broker_channel_confirm(channel *ch, uint64_t seq, int ok, uint64_t gen);
/* Write every outcome still waiting for the disk now, behind a hold (the channel is
 * closing: what it promised goes out before its close, once it is true). */
void broker_channel_confirms_behind_hold(channel *ch);
/* A reply that promises what the store holds so far (the declare-ok of a durable queue, a
 * purge-ok...): it and everything after it on the connection wait until that is on disk.
 * broker_channel_send_after waits for store generation gen only (0: sends at once). */
void broker_channel_send_durable(channel *ch, const amqp_method *m, int nowait);
void broker_channel_send_after(channel *ch, const amqp_method *m, int nowait, uint64_t gen);
/* tx.commit / tx.rollback bookkeeping of deliveries settled inside the transaction. */
void broker_channel_tx_settled(channel *ch, int committed);
/* Record a delivery awaiting settlement; returns its tag. */
uint64_t broker_channel_track(channel *ch, qm_position *pos, consumer *cons);
/* Settle deliveries up to/at tag: how = QM_SETTLE_ACK / REQUEUE / REJECT. Returns 0, or
 * -1 when tag is unknown (the caller raises 406). */
int broker_channel_settle(channel *ch, uint64_t tag, int multiple, int how);

/* handlers */
/* Resolve a queue name from a method: "" means the last queue declared on the channel.
 * Raises the channel error (404, 405 for another connection's exclusive queue) and returns
 * NULL when it cannot be used. */
qm_queue *broker_channel_queue(channel *ch, amqp_bytes name, uint32_t method_id);
/* The same after the access check: perm on the queue (name expanded first). */
qm_queue *broker_channel_queue_checked(channel *ch, amqp_bytes name, acc_perm perm,
                                       uint32_t method_id);
/* Expand "" to the last queue declared on the channel: 1, or 0 after raising 404. */
int broker_channel_queue_name(channel *ch, amqp_bytes *name, uint32_t method_id);
void broker_h_exchange(channel *ch, const amqp_method *m);
void broker_h_queue(channel *ch, const amqp_method *m);
void broker_h_basic(channel *ch, const amqp_method *m);
void broker_h_tx(channel *ch, const amqp_method *m);
void broker_h_confirm(channel *ch, const amqp_method *m);
/* A complete publish (method, header, body) is ready in ch->pub_*. */
void broker_basic_publish_complete(channel *ch);

/* deliver.c */
extern const qm_consumer_ops broker_consumer_ops;

/* streams.c: stream queues at this door. broker_stream_pos is the position a stream delivery
 * is tracked with (settling it only gives credit back). refuse_consume: 1 when a consumer of
 * this kind is refused (the channel error sent); offset_arg: where the consumer starts, from
 * its x-stream-offset argument (-1: refused, the error sent). */
extern qm_position broker_stream_pos;
int broker_stream_refuse_consume(channel *ch, qm_queue *q, const amqp_basic_consume *b);
int broker_stream_offset_arg(channel *ch, qm_queue *q, amqp_bytes args, uint64_t *start);
/* The consumer arguments x-stream-filter and x-stream-match-unfiltered as RabbitMQ 3.13 reads
 * them: *out the filter (NULL: none); -1 when refused (the channel error sent). */
int broker_stream_filter_arg(channel *ch, qm_queue *q, amqp_bytes args, qm_stream_filter **out);
void broker_stream_deliver(qm_consumer *qc, uint64_t offset, int64_t ts_ms, const uint8_t *p,
                           size_t len);
/* Write basic.deliver / basic.get-ok / basic.return with content for pos' message. */
/* out_refs.c: the output stream's length (out's bytes and the bodies by reference); whether a
 * body of body_len goes by reference; add one (after out's bytes so far); write up to avail
 * bytes of the stream with one sendmsg; take n written bytes off the front; drop all (the peer
 * is gone); and free the ring. */
static inline size_t broker_out_len(const conn *c)
{
    return sl_buf_unread(&c->out) + (size_t)c->out_ref_bytes;
}
int broker_out_can_ref(const conn *c, uint64_t body_len);
void broker_out_ref(conn *c, qm_message *m, const uint8_t *p, uint32_t len);
ssize_t broker_out_sendv(conn *c, size_t avail);
void broker_out_consume(conn *c, size_t n);
void broker_out_drop(conn *c);
void broker_out_free(conn *c);

void broker_write_content(conn *c, uint16_t ch, const qm_message *m);
/* The same with other properties than m's own (a quorum queue's x-delivery-count). */
void broker_write_content_props(conn *c, uint16_t ch, const qm_message *m, const uint8_t *props,
                                size_t props_len);
void broker_consumer_free(consumer *cons);
consumer *broker_channel_find_consumer(channel *ch, const uint8_t *tag, size_t len);
/* A new consumer joins ch / one leaves it (O(1) both, the tag index kept). */
void broker_channel_add_consumer(channel *ch, consumer *cons);
void broker_channel_unlink_consumer(channel *ch, consumer *cons);
/* cons was refused for the global prefetch limit / the channel has room again: wake those. */
void broker_channel_starve_consumer(channel *ch, consumer *cons);
void broker_channel_wake_starved(channel *ch);
/* Send basic.cancel to the client if it announced consumer_cancel_notify. */
void broker_consumer_notify_cancel(consumer *cons);

/* link_recv.c */
/* At connection.start-ok: a "sluice_link" client property makes c a link (1); 0 when it is
 * an ordinary client; -1 after refusing it (malformed, a user that may not speak for that
 * node, or the node is offline). */
int broker_link_recv_hello(conn *c, amqp_bytes client_props);
/* "sluice.eod" / "sluice.rpc": the pseudo exchanges a link publishes to. */
int broker_link_recv_control_exchange(amqp_bytes ex);
/* A complete publish on a link connection (takes msg's reference). */
void broker_link_recv_publish(channel *ch, qm_message *msg);
/* tx.commit on a link channel holding a batch: decided, applied, answered; 1 when handled,
 * 0 for an ordinary commit. */
int broker_link_recv_commit(channel *ch);
void broker_link_recv_release(channel *ch);

/* Small helpers for names in error texts: amqp_bytes as printf "%.*s". */
#define BYTES_FMT "%.*s"
#define BYTES_ARG(b) (int)(b).len, (const char *)(b).p

/* reply_to.c: direct reply-to (see there) */
int broker_reply_to_is_pseudo(amqp_bytes name);
void broker_reply_to_consume(channel *ch, const amqp_basic_consume *bc, const char *tag);
/* 1 when tag was the channel's reply consumer (now cancelled). */
int broker_reply_to_cancel(channel *ch, amqp_bytes tag);
void broker_reply_to_release(channel *ch);
/* A reply-to of "amq.rabbitmq.reply-to" becomes the channel's name: 1 and the new property
 * bytes in out; 0 when nothing to do; -1 when the channel has no reply consumer (error sent). */
int broker_reply_to_rewrite(channel *ch, amqp_basic_props *props, sl_buf *out);
/* A publish to a reply-to name: 1 when it was one (*delivered says whether it reached a
 * live reply consumer), 0 when the message is for the exchanges. */
int broker_reply_to_route(channel *ch, const qm_message *m, int *delivered);
/* queue.declare passive of the pseudo-queue or a live name: 1 when answered. */
int broker_reply_to_declare_passive(channel *ch, amqp_bytes name);

#endif
