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

typedef struct broker broker;
typedef struct conn conn;
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
/* Input handled per loop turn, by the clock: past it, connections leave the rest of what they
 * read for the next turn (and are not read meanwhile), so no round trip waits behind one
 * connection's expensive frames for long. */
#define TURN_INPUT_MS 10

struct persist_tidy_result;
typedef void (*broker_tidy_fn)(void *ctx, const struct persist_tidy_result *r);

struct broker {
    sl_config *cfg;
    sl_loop *loop;
    qm_node *node;
    int listen_fd;
    sl_acceptor acceptor; /* AMQP listener: descriptor reserve, pause and resume */
    int tls_listen_fd;    /* AMQPS listener (listeners.ssl.default), -1 when none */
    sl_acceptor tls_acceptor;
    struct sl_tls_ctx *tls_ctx;
    struct sl_tls_ctx *link_tls_ctx; /* link_ssl: the client side of links */
    struct acc_verifier *verifier;   /* slow password checks off the loop (access/verifier.h) */
    sl_watch verify_w;
    char tls_bound_addr[64];
    int tls_bound_port;
    unsigned fd_reserve; /* descriptors the AMQP door leaves free (the API leaves half) */
    int signal_fd;
    sl_watch signal_w;
    conn *conns;         /* all live connections */
    conn *dirty;         /* connections with output or confirms to flush this turn */
    conn *input_pending; /* connections whose held-back input is handled next turn */
    size_t n_conns;
    size_t n_open;          /* connections past connection.open (connection_max counts these) */
    uint64_t conns_refused; /* by connection_max (metric) */
    sl_timer tick_timer;    /* qm TTL / x-expires work */
    sl_timer tidy_timer;    /* automatic TIDY */
    uint64_t tidy_written;  /* persist_bytes_appended when the last TIDY started */
    struct tidy_waiter {
        broker_tidy_fn fn;
        void *ctx;
    } * tidy_waiters; /* told when the TIDY in progress is done */
    size_t n_tidy_waiters, cap_tidy_waiters;
    struct persist *store;
    uint64_t next_conn_id;
    int alarms;       /* ALARM_MEMORY | ALARM_DISK: publishers are blocked while non-zero */
    int reserve_held; /* DATA/space-reserve exists (released when the disk is full) */
    uint64_t next_disk_check;
    uint64_t disk_check_bytes; /* the store's bytes appended at the last free-space check */
    uint64_t
        disk_free; /* free bytes under data_dir at the last check, as the disk alarm saw them */
    uint64_t next_store_sync;
    int shutting_down;
    uint64_t shutdown_deadline;
    char bound_addr[64];
    int bound_port;
    /* The cluster (issue 31, src/cluster/): NULL unless cluster_formation is configured. */
    struct cl_member *cluster;
    sl_watch cluster_w; /* the member's eventfd: its role changed */
    /* A cluster leader's replication (cluster.c): the mirror of its data directory (made
     * before the store opens), the stream's server, its eventfd (released / blocked moved),
     * the node it was promoted from, and whether it must re-exec as a follower after its loop
     * stops (deposed). */
    struct mirror *mirror;
    struct cs_server *repl;
    sl_watch repl_w;
    struct cl_node *cl_node;
    int reexec;
    int cl_handover;          /* a step-down is handing over: publishers are blocked */
    char cluster_reason[320]; /* connection.blocked's reason (below min_insync_replicas, or a
                               * hand-over) */
    /* HTTP API requests begun and not yet completed (mgmt.c): a shutdown (or a re-exec after
     * a step-down, whose reply is one of them) waits for them, within its 2 s. */
    unsigned api_inflight;
    sl_map *reply_to; /* direct reply-to names -> channel (reply_to.c) */
    acc_db *acc;      /* users, vhost definitions, permissions: every door asks it */
    /* Called by broker_vhost_delete after the vhost's connections are closed and before its
     * queues go: doors with state in the vhost (handles, outgoing queues) drop it. */
    void (*on_vhost_deleted)(broker *b, qm_vhost *vh);
    struct link_mgr *links; /* outgoing queues and their links (src/link/) */
    uint64_t boot_id;       /* random per start: remote contexts of an earlier boot are stale */
    uint64_t link_accepted, link_duplicates; /* messages received over links */
    /* Replies that wait for the disk (see "Waiting for the disk" in broker.c). */
    sl_watch sync_w;              /* the sync thread's completion eventfd */
    sl_watch pace_w;              /* a timerfd: a paced sync is due (persist_pace_due) */
    uint64_t pace_armed_us;       /* when pace_w fires (sl_now_us clock), 0: disarmed */
    conn *waiting;                /* connections with held output or pending confirms */
    struct disk_waiter *dwaiters; /* broker_after_sync callbacks, a ring in ticket order */
    uint64_t wmark_seen;          /* persist_wmark() at the last delivery (broker_hold_delivery) */
    size_t dw_head, dw_len, dw_cap;
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

enum { ALARM_MEMORY = 1, ALARM_DISK = 2, ALARM_CLUSTER = 4 };
/* cluster.c: fewer than min_insync_replicas in sync: block publishers as the alarms do. */
void broker_set_cluster_alarm(broker *b, int on);
/* Below min_insync_replicas: every connection stops waiting for delivery marks. */
void broker_drop_delivery_holds(broker *b);
/* cluster.c: a step-down hands over to heir (on) or gave up (off): publishers are blocked
 * meanwhile ("cluster: handing leadership over to HEIR") so the heir catches up. */
void broker_cluster_handover(broker *b, int on, const char *heir);
/* Reply to whatever waits for the disk (after the release gate moved). */
void broker_release_waiters(broker *b);
/* The queue manager's identifier (MS-MQDMPR QueueManager.Identifier) every MSMQ door gives:
 * the node id of the store, or one derived from boot_id without a store. */
void broker_qm_guid(const broker *b, uint8_t out[16]);
/* Close every connection with 320 (reply text) and stop the loop once they are gone (at most
 * 2 s), as on SIGTERM. */
void broker_begin_shutdown(broker *b, const char *why, const char *text);

/* broker.c */
/* What the memory alarm counts: messages and every buffer of the node. */
uint64_t broker_memory_bytes(const broker *b);
/* "low on memory" / "low on disk" while an alarm is on, NULL otherwise. */
const char *broker_alarm_reason(const broker *b);
/* Send connection.blocked (if asked for) and stop reading c until the alarms clear. */
void broker_block_publisher(conn *c);
/* Look at free space now if the store has taken a check step since the last look (at each
 * publish and each turn's end: the disk alarm follows what is written, not only the clock). */
void broker_check_disk_step(broker *b);
broker *broker_new(sl_config *cfg);
/* The same for a promoted cluster node (node.h): its store is mirrored and gated by the ISR. */
broker *broker_new_node(sl_config *cfg, struct cl_node *node);
/* The TLS options of a ssl_options / management.ssl group (net/tls.h). */
struct sl_tls_opts;
void broker_tls_opts(const struct sl_tls_conf *t, struct sl_tls_opts *o);
int broker_listen(broker *b);
void broker_run(broker *b);
void broker_free(broker *b);
/* cluster.c. A node with cluster settings runs the broker only as the leader (main() runs the
 * follower phase first, cluster/node.h). A promoted node: adopt its member (which holds the
 * leader key) and start the replication server on the member's replication socket. */
int broker_cluster_adopt(broker *b, int http_port);
/* broker_new_node, before persist_open: the mirror, and persist's batch hook and gate. */
struct persist_options;
int broker_cluster_mirror(broker *b, struct persist_options *po);
void broker_cluster_free_mirror(broker *b); /* after persist_close */
void broker_cluster_stop(broker *b);
/* 0 when this node may serve clients (no cluster, or the leader); else -1 and why in err,
 * naming the leader to go to. */
int broker_cluster_refuses(broker *b, char *err, size_t errlen);
/* (loop) 1 when a client at sa counts as local for loopback_users: a loopback address that
 * is not another cluster member's (a proxied connection's; docs/security.md). */
struct sockaddr;
int broker_peer_is_loopback(broker *b, const struct sockaddr *sa);
/* TIDY (MSMQ "clean up empty message files"): give back the disk of store segments nothing
 * needs, compacting those with little live data (persist.h). Never touches a live message.
 * It runs a slice per loop turn; fn(ctx, result) is called once it is done (fn may be NULL:
 * the automatic one). A TIDY asked for while one runs gets that one's result. Without a store
 * fn is called at once with zeros. */
void broker_tidy_start(broker *b, broker_tidy_fn fn, void *ctx);
/* Group commit now, blocking the loop for the sync: what was changed is on disk when it
 * returns. Exits the process if the store fails. Doors should prefer broker_after_sync. */
void broker_sync(broker *b);
/* Waiting for the disk without blocking. broker_ticket: the store generation that holds
 * everything appended so far (0: none); broker_durable: every generation <= it is on disk.
 * broker_mark / broker_ticket_since: the ticket of what one operation appended (0 if it
 * appended nothing that needs the disk). */
uint64_t broker_ticket(const broker *b);
uint64_t broker_durable(const broker *b);
uint64_t broker_mark(const broker *b);
uint64_t broker_ticket_since(const broker *b, uint64_t mark);
/* The same for a pipelined confirm: a sync only such tickets wait for may be paced
 * (`sync_pace_us`, persist_ticket_since_lazy). */
uint64_t broker_ticket_since_lazy(const broker *b, uint64_t mark);
/* Lazy tickets up to gen become eager: their sync is not paced any more (a connection whose
 * input has gone idle: conn.c, input_idle). */
void broker_hasten(broker *b, uint64_t gen);
/* A delivery (basic.deliver, get-ok) is about to be written to c: if handing it out appended
 * a delivery mark (or a no-ack removal) since the last delivery, the output from here on
 * waits until that mark is written to the file (persist.h: write tickets). */
void broker_hold_delivery(conn *c);
uint64_t broker_wmark(const broker *b);
uint64_t broker_write_ticket_since(broker *b, uint64_t wmark);
/* Call fn(ctx) from the loop once everything appended so far is on disk: returns 1 when
 * registered, 0 (fn not called) when it is on disk already. For doors that reply outside
 * AMQP (the HTTP API) and for link acknowledgements. */
int broker_after_sync(broker *b, void (*fn)(void *ctx), void *ctx);
/* c has held output or pending confirms: flush it again when a sync completes. */
void broker_wait_disk(conn *c);
void broker_mark_dirty(conn *c);
/* c stopped reading for a full output buffer and may go on: handle its buffered input at the
 * start of the next turn. */
void broker_input_pending(conn *c);
/* 1 once this loop turn has spent TURN_INPUT_MS on input. */
int broker_turn_over(const broker *b);
/* Schedule dispatch for the queues of the consumers a full output buffer turned away. */
void broker_conn_resume_consumers(conn *c);

/* security.c */
/* Seed the default vhost and user (first start only) and the config users. -1 on failure. */
int broker_access_init(broker *b);
/* Create (or update the description / tags of) a vhost, in the model and in the access
 * module; acting_user (may be NULL) gets full permissions on a new one, as RabbitMQ's API
 * does. */
sl_err broker_vhost_add(broker *b, const char *name, const char *description, const char *tags,
                        const char *acting_user, char *err, size_t errlen);
/* Delete a vhost: its connections are closed (320 "vhost 'V' is deleted"), its definition,
 * permissions and limits, then its queues (with their storage), exchanges and bindings. */
sl_err broker_vhost_delete(broker *b, const char *name, char *err, size_t errlen);
/* Close the user's connections with 320 "CONNECTION_FORCED - user 'U' <why>". */
size_t broker_close_user_connections(broker *b, const char *user, const char *why);
/* Open connections of user (NULL = any) in vhost (NULL = any). */
uint64_t broker_count_connections(broker *b, const char *user, const char *vhost);
uint64_t broker_count_user_channels(broker *b, const char *user);

/* conn.c */
conn *conn_new(broker *b, int fd);
/* Make a new connection speak TLS first (the AMQPS listener): handshake, then AMQP. */
void conn_start_tls(conn *c, struct sl_tls *tls);
void conn_on_event(sl_loop *loop, sl_watch *w, int events);
/* Connection-level error: send connection.close(code from e, text, class/method) and wait
 * for close-ok; every channel is released at once. */
void conn_error(conn *c, sl_err e, uint32_t method_id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Close the socket at the end of this turn without a close frame. */
void conn_kill(conn *c, const char *why);
void conn_free(conn *c);
void conn_send_method(conn *c, uint16_t ch, const amqp_method *m);
/* What is written to c from now on waits until the store holds on disk everything appended
 * so far (a no-op when it does already). */
void conn_hold_for_disk(conn *c);
void conn_hold_until(conn *c, uint64_t gen);
/* A delivery's wait for its delivery mark: given up below min_insync_replicas
 * (broker_drop_delivery_holds). */
void conn_hold_delivery(conn *c, uint64_t gen);
/* 1 while c has output held for the disk. */
int conn_has_held(const conn *c);
void conn_flush(conn *c);
/* Watch for reading unless paused (alarm or full output); keep a pending write watch. */
void conn_update_watch(conn *c);
/* Handle input held back while the output was full. */
void conn_resume_input(conn *c);
/* Server-initiated close with 320 (shutdown). */
void conn_force_close(conn *c, const char *text);
void conn_set_blocked(conn *c, int blocked);
/* Release and free channel id (after close / close-ok). */
void conn_drop_channel(conn *c, uint16_t id);

/* channel.c */
channel *channel_new(conn *c, uint16_t id);
/* Release everything the channel holds: consumers cancelled, unacked requeued, open
 * transaction aborted, partial publish dropped. Safe to call more than once. */
void channel_release(channel *ch);
void channel_free(channel *ch);
/* Channel-level error: channel.close with the code of e; the channel discards everything
 * but close/close-ok from now on. A hard error (per the error table) becomes a connection
 * error instead. */
void channel_error(channel *ch, sl_err e, uint32_t method_id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Access checks for the channel's user in its vhost (the access module's rules and texts):
 * 1, or 0 after raising 403 ACCESS_REFUSED on the channel. A topic check passes for
 * exchanges that are not topic exchanges. */
int channel_allowed(channel *ch, acc_kind kind, amqp_bytes name, acc_perm perm, uint32_t method_id);
int channel_topic_allowed(channel *ch, const qm_exchange *x, amqp_bytes routing_key, acc_perm perm,
                          uint32_t method_id);
/* Handle one frame addressed to an open channel. */
void channel_on_frame(channel *ch, const amqp_frame *f);
void channel_flush_confirms(channel *ch);
/* Send what the connection's channels have to confirm (those in c->confirming). */
void conn_flush_confirms(conn *c);
/* Publisher-confirm outcome of publish number seq (in order): ack (ok = 1) or nack. An ack
 * goes out once store generation gen is durable (0: it needs nothing of the disk), and
 * never before the outcome of an earlier publish. */
void channel_confirm(channel *ch, uint64_t seq, int ok, uint64_t gen);
/* Write every outcome still waiting for the disk now, behind a hold (the channel is
 * closing: what it promised goes out before its close, once it is true). */
void channel_confirms_behind_hold(channel *ch);
/* A reply that promises what the store holds so far (the declare-ok of a durable queue, a
 * purge-ok...): it and everything after it on the connection wait until that is on disk.
 * channel_send_after waits for store generation gen only (0: sends at once). */
void channel_send_durable(channel *ch, const amqp_method *m, int nowait);
void channel_send_after(channel *ch, const amqp_method *m, int nowait, uint64_t gen);
/* tx.commit / tx.rollback bookkeeping of deliveries settled inside the transaction. */
void channel_tx_settled(channel *ch, int committed);
/* Record a delivery awaiting settlement; returns its tag. */
uint64_t channel_track(channel *ch, qm_position *pos, consumer *cons);
/* Settle deliveries up to/at tag: how = QM_SETTLE_ACK / REQUEUE / REJECT. Returns 0, or
 * -1 when tag is unknown (the caller raises 406). */
int channel_settle(channel *ch, uint64_t tag, int multiple, int how);

/* handlers */
/* Resolve a queue name from a method: "" means the last queue declared on the channel.
 * Raises the channel error (404, 405 for another connection's exclusive queue) and returns
 * NULL when it cannot be used. */
qm_queue *channel_queue(channel *ch, amqp_bytes name, uint32_t method_id);
/* The same after the access check: perm on the queue (name expanded first). */
qm_queue *channel_queue_checked(channel *ch, amqp_bytes name, acc_perm perm, uint32_t method_id);
/* Expand "" to the last queue declared on the channel: 1, or 0 after raising 404. */
int channel_queue_name(channel *ch, amqp_bytes *name, uint32_t method_id);
void h_exchange(channel *ch, const amqp_method *m);
void h_queue(channel *ch, const amqp_method *m);
void h_basic(channel *ch, const amqp_method *m);
void h_tx(channel *ch, const amqp_method *m);
void h_confirm(channel *ch, const amqp_method *m);
/* A complete publish (method, header, body) is ready in ch->pub_*. */
void basic_publish_complete(channel *ch);

/* deliver.c */
extern const qm_consumer_ops broker_consumer_ops;
/* Write basic.deliver / basic.get-ok / basic.return with content for pos' message. */
void write_content(conn *c, uint16_t ch, const qm_message *m);
/* The same with other properties than m's own (a quorum queue's x-delivery-count). */
void write_content_props(conn *c, uint16_t ch, const qm_message *m, const uint8_t *props,
                         size_t props_len);
void consumer_free(consumer *cons);
consumer *channel_find_consumer(channel *ch, const uint8_t *tag, size_t len);
/* A new consumer joins ch / one leaves it (O(1) both, the tag index kept). */
void channel_add_consumer(channel *ch, consumer *cons);
void channel_unlink_consumer(channel *ch, consumer *cons);
/* cons was refused for the global prefetch limit / the channel has room again: wake those. */
void channel_starve_consumer(channel *ch, consumer *cons);
void channel_wake_starved(channel *ch);
/* Send basic.cancel to the client if it announced consumer_cancel_notify. */
void consumer_notify_cancel(consumer *cons);

/* link_recv.c */
/* At connection.start-ok: a "sluice_link" client property makes c a link (1); 0 when it is
 * an ordinary client; -1 after refusing it (malformed, a user that may not speak for that
 * node, or the node is offline). */
int link_recv_hello(conn *c, amqp_bytes client_props);
/* "sluice.eod" / "sluice.rpc": the pseudo exchanges a link publishes to. */
int link_recv_control_exchange(amqp_bytes ex);
/* A complete publish on a link connection (takes msg's reference). */
void link_recv_publish(channel *ch, qm_message *msg);
/* tx.commit on a link channel holding a batch: decided, applied, answered; 1 when handled,
 * 0 for an ordinary commit. */
int link_recv_commit(channel *ch);
void link_recv_release(channel *ch);
/* CONNECT / DISCONNECT: links start or stop; offline closes incoming links too. */
void broker_set_online(broker *b, int online);

/* Small helpers for names in error texts: amqp_bytes as printf "%.*s". */
#define BYTES_FMT "%.*s"
#define BYTES_ARG(b) (int)(b).len, (const char *)(b).p

/* reply_to.c: direct reply-to (see there) */
int reply_to_is_pseudo(amqp_bytes name);
void reply_to_consume(channel *ch, const amqp_basic_consume *bc, const char *tag);
/* 1 when tag was the channel's reply consumer (now cancelled). */
int reply_to_cancel(channel *ch, amqp_bytes tag);
void reply_to_release(channel *ch);
/* A reply-to of "amq.rabbitmq.reply-to" becomes the channel's name: 1 and the new property
 * bytes in out; 0 when nothing to do; -1 when the channel has no reply consumer (error sent). */
int reply_to_rewrite(channel *ch, amqp_basic_props *props, sl_buf *out);
/* A publish to a reply-to name: 1 when it was one (*delivered says whether it reached a
 * live reply consumer), 0 when the message is for the exchanges. */
int reply_to_route(channel *ch, const qm_message *m, int *delivered);
/* queue.declare passive of the pseudo-queue or a live name: 1 when answered. */
int reply_to_declare_passive(channel *ch, amqp_bytes name);

#endif
