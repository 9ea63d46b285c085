/* node.h - the node every door is handed (issue 45): settings, the queue manager, the store
 * and the disk tickets the doors wait on, the access module, the links, the cluster member,
 * alarms, TIDY, shutdown. No door's own state lives here; doors tell the node what only they
 * know through the hooks of struct node_door.
 *
 * Invariant: this header includes nothing above node/ (the layering of tools/layers.txt).
 */
#ifndef SL_NODE_NODE_H
#define SL_NODE_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "access/access.h"
#include "core/err.h"
#include "core/holds.h"
#include "net/accept.h"
#include "net/loop.h"
#include "node/config.h"
#include "qm/qm.h"

typedef struct sl_node sl_node;
struct conn;

struct persist_tidy_result;
typedef void (*node_tidy_fn)(void *ctx, const struct persist_tidy_result *r);

struct sl_node {
    sl_config *cfg;
    sl_loop *loop;
    qm_node *qm;
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
    struct conn *conns;         /* all live connections */
    struct conn *dirty;         /* connections with output or confirms to flush this turn */
    struct conn *input_pending; /* connections whose held-back input is handled next turn */
    size_t n_conns;
    size_t n_open;          /* connections past connection.open (connection_max counts these) */
    uint64_t conns_refused; /* by connection_max (metric) */
    sl_timer tick_timer;    /* qm TTL / x-expires work */
    sl_timer tidy_timer;    /* automatic TIDY */
    uint64_t tidy_written;  /* persist_bytes_appended when the last TIDY started */
    struct tidy_waiter {
        node_tidy_fn fn;
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
    /* Called by node_vhost_delete after the vhost's connections are closed and before its
     * queues go: doors with state in the vhost (handles, outgoing queues) drop it. */
    void (*on_vhost_deleted)(sl_node *b, qm_vhost *vh);
    struct link_mgr *links; /* outgoing queues and their links (src/link/) */
    uint64_t boot_id;       /* random per start: remote contexts of an earlier boot are stale */
    uint64_t link_accepted, link_duplicates; /* messages received over links */
    /* Replies that wait for the disk (see "Waiting for the disk" in broker.c). */
    sl_watch sync_w;              /* the sync thread's completion eventfd */
    sl_watch pace_w;              /* a timerfd: a paced sync is due (persist_pace_due) */
    uint64_t pace_armed_us;       /* when pace_w fires (sl_now_us clock), 0: disarmed */
    struct conn *waiting;                /* connections with held output or pending confirms */
    struct disk_waiter *dwaiters; /* node_after_sync callbacks, a ring in ticket order */
    uint64_t wmark_seen;          /* persist_wmark() at the last delivery (broker_hold_delivery) */
    size_t dw_head, dw_len, dw_cap;
};

enum { ALARM_MEMORY = 1, ALARM_DISK = 2, ALARM_CLUSTER = 4 };
/* cluster.c: fewer than min_insync_replicas in sync: block publishers as the alarms do. */
void node_set_cluster_alarm(sl_node *b, int on);
/* Below min_insync_replicas: every connection stops waiting for delivery marks. */
void broker_drop_delivery_holds(sl_node *b);
/* cluster.c: a step-down hands over to heir (on) or gave up (off): publishers are blocked
 * meanwhile ("cluster: handing leadership over to HEIR") so the heir catches up. */
void node_cluster_handover(sl_node *b, int on, const char *heir);
/* Reply to whatever waits for the disk (after the release gate moved). */
void node_release_waiters(sl_node *b);
/* The queue manager's identifier (MS-MQDMPR QueueManager.Identifier) every MSMQ door gives:
 * the node id of the store, or one derived from boot_id without a store. */
void node_qm_guid(const sl_node *b, uint8_t out[16]);
/* Close every connection with 320 (reply text) and stop the loop once they are gone (at most
 * 2 s), as on SIGTERM. */
void node_begin_shutdown(sl_node *b, const char *why, const char *text);

/* broker.c */
/* What the memory alarm counts: messages and every buffer of the node. */
uint64_t node_memory_bytes(const sl_node *b);
/* "low on memory" / "low on disk" while an alarm is on, NULL otherwise. */
const char *node_alarm_reason(const sl_node *b);
/* Send connection.blocked (if asked for) and stop reading c until the alarms clear. */
void broker_block_publisher(struct conn *c);
/* Look at free space now if the store has taken a check step since the last look (at each
 * publish and each turn's end: the disk alarm follows what is written, not only the clock). */
void node_check_disk_step(sl_node *b);
sl_node *broker_new(sl_config *cfg);
/* The same for a promoted cluster node (node.h): its store is mirrored and gated by the ISR. */
sl_node *broker_new_node(sl_config *cfg, struct cl_node *node);
/* The TLS options of a ssl_options / management.ssl group (net/tls.h). */
struct sl_tls_opts;
void node_tls_opts(const struct sl_tls_conf *t, struct sl_tls_opts *o);
int broker_listen(sl_node *b);
void broker_run(sl_node *b);
void broker_free(sl_node *b);
/* cluster.c. A node with cluster settings runs the broker only as the leader (main() runs the
 * follower phase first, cluster/node.h). A promoted node: adopt its member (which holds the
 * leader key) and start the replication server on the member's replication socket. */
int broker_cluster_adopt(sl_node *b, int http_port);
/* broker_new_node, before persist_open: the mirror, and persist's batch hook and gate. */
struct persist_options;
int broker_cluster_mirror(sl_node *b, struct persist_options *po);
void broker_cluster_free_mirror(sl_node *b); /* after persist_close */
void broker_cluster_stop(sl_node *b);
/* 0 when this node may serve clients (no cluster, or the leader); else -1 and why in err,
 * naming the leader to go to. */
int node_cluster_refuses(sl_node *b, char *err, size_t errlen);
/* (loop) 1 when a client at sa counts as local for loopback_users: a loopback address that
 * is not another cluster member's (a proxied connection's; docs/security.md). */
struct sockaddr;
int node_peer_is_loopback(sl_node *b, const struct sockaddr *sa);
/* TIDY (MSMQ "clean up empty message files"): give back the disk of store segments nothing
 * needs, compacting those with little live data (persist.h). Never touches a live message.
 * It runs a slice per loop turn; fn(ctx, result) is called once it is done (fn may be NULL:
 * the automatic one). A TIDY asked for while one runs gets that one's result. Without a store
 * fn is called at once with zeros. */
void node_tidy_start(sl_node *b, node_tidy_fn fn, void *ctx);
/* Group commit now, blocking the loop for the sync: what was changed is on disk when it
 * returns. Exits the process if the store fails. Doors should prefer node_after_sync. */
void node_sync(sl_node *b);
/* Waiting for the disk without blocking. node_ticket: the store generation that holds
 * everything appended so far (0: none); node_durable: every generation <= it is on disk.
 * node_mark / node_ticket_since: the ticket of what one operation appended (0 if it
 * appended nothing that needs the disk). */
uint64_t node_ticket(const sl_node *b);
uint64_t node_durable(const sl_node *b);
uint64_t node_mark(const sl_node *b);
uint64_t node_ticket_since(const sl_node *b, uint64_t mark);
/* The same for a pipelined confirm: a sync only such tickets wait for may be paced
 * (`sync_pace_us`, persist_ticket_since_lazy). */
uint64_t node_ticket_since_lazy(const sl_node *b, uint64_t mark);
/* Lazy tickets up to gen become eager: their sync is not paced any more (a connection whose
 * input has gone idle: conn.c, input_idle). */
void node_hasten(sl_node *b, uint64_t gen);
/* A delivery (basic.deliver, get-ok) is about to be written to c: if handing it out appended
 * a delivery mark (or a no-ack removal) since the last delivery, the output from here on
 * waits until that mark is written to the file (persist.h: write tickets). */
void broker_hold_delivery(struct conn *c);
uint64_t node_wmark(const sl_node *b);
uint64_t node_write_ticket_since(sl_node *b, uint64_t wmark);
/* Call fn(ctx) from the loop once everything appended so far is on disk: returns 1 when
 * registered, 0 (fn not called) when it is on disk already. For doors that reply outside
 * AMQP (the HTTP API) and for link acknowledgements. */
int node_after_sync(sl_node *b, void (*fn)(void *ctx), void *ctx);
/* c has held output or pending confirms: flush it again when a sync completes. */
void broker_wait_disk(struct conn *c);
void broker_mark_dirty(struct conn *c);
/* c stopped reading for a full output buffer and may go on: handle its buffered input at the
 * start of the next turn. */
void broker_input_pending(struct conn *c);
/* 1 once this loop turn has spent TURN_INPUT_MS on input. */
int broker_turn_over(const sl_node *b);
/* Schedule dispatch for the queues of the consumers a full output buffer turned away. */
void broker_conn_resume_consumers(struct conn *c);

/* security.c */
/* Seed the default vhost and user (first start only) and the config users. -1 on failure. */
int node_access_init(sl_node *b);
/* Create (or update the description / tags of) a vhost, in the model and in the access
 * module; acting_user (may be NULL) gets full permissions on a new one, as RabbitMQ's API
 * does. */
sl_err node_vhost_add(sl_node *b, const char *name, const char *description, const char *tags,
                        const char *acting_user, char *err, size_t errlen);
/* Delete a vhost: its connections are closed (320 "vhost 'V' is deleted"), its definition,
 * permissions and limits, then its queues (with their storage), exchanges and bindings. */
sl_err node_vhost_delete(sl_node *b, const char *name, char *err, size_t errlen);
/* Close the user's connections with 320 "CONNECTION_FORCED - user 'U' <why>". */
size_t node_close_user_connections(sl_node *b, const char *user, const char *why);
/* Open connections of user (NULL = any) in vhost (NULL = any). */
uint64_t node_count_connections(sl_node *b, const char *user, const char *vhost);
uint64_t node_count_user_channels(sl_node *b, const char *user);

/* CONNECT / DISCONNECT: links start or stop; offline closes incoming links too. */
void node_set_online(sl_node *b, int online);

#endif
