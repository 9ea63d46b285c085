/* node.h - the node every door is handed (issue 45): the settings, the event loop, the queue
 * manager, the store and the disk tickets the doors wait on, the access module, the resource
 * alarms, TIDY, signals and the shutdown. It sits below every door (AMQP in broker/, MS-MQQB in
 * msmq/, DCE/RPC in rpc/, HTTP in mgmt/) and below the links and the cluster.
 *
 * What only a room above knows reaches the node through a part (struct node_part): the AMQP
 * door flushes its connections each turn and blocks publishers when an alarm goes on, the links
 * flush their batches and hear of each sync, the HTTP door has requests in flight a shutdown
 * waits for, the cluster says whether an address is another member's. The node calls its parts
 * in the order they were added and never includes their headers.
 *
 * Invariants: this header includes nothing above node/ (tools/layers.txt); the node owns the
 * loop, the model, the store and the access module, and frees them last (node_free), after
 * every part has stopped. Everything here runs on the loop's thread.
 */
#ifndef SL_NODE_NODE_H
#define SL_NODE_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "access/access.h"
#include "core/err.h"
#include "net/loop.h"
#include "node/clients.h"
#include "node/config.h"
#include "node/stream_figures.h"
#include "qm/qm.h"

typedef struct sl_node sl_node;

struct persist_tidy_result;
struct persist_options;
struct sockaddr;
struct node_tls_conf;
struct sl_tls_opts;
struct sl_acceptor;

typedef void (*node_tidy_fn)(void *ctx, const struct persist_tidy_result *r);

enum { ALARM_MEMORY = 1, ALARM_DISK = 2, ALARM_CLUSTER = 4 };

/* A part of the node above node/: a door, the links, the cluster. Every hook may be NULL;
 * ctx is handed back to each. */
typedef struct node_part {
    const char *name; /* "amqp", "links", "http"... for logs */
    void *ctx;
    /* The start of a loop turn's work, before dispatch (input held back for a full output
     * buffer that has drained since). */
    void (*turn_begin)(void *ctx);
    /* The end of a loop turn, after dispatch and the group commit's kick: flush what the turn
     * made. Returns 1 when it left work that needs another round (more output to flush). */
    int (*turn)(void *ctx);
    /* A store generation became durable (or a write went through): reply to what waited. */
    void (*released)(void *ctx);
    /* The alarms went from none to some (blocked = 1) or back (0): block or free publishers. */
    void (*alarms_changed)(void *ctx, int blocked);
    /* Input read ahead by publishers an alarm blocked (not held against the memory alarm). */
    uint64_t (*held_input_bytes)(void *ctx);
    /* The node shuts down: stop accepting, and close what is open with text (AMQP's 320). */
    void (*shutdown)(void *ctx, const char *text);
    /* Connections or requests a shutdown still waits for (the loop stops at 0, or after 2 s). */
    size_t (*live)(void *ctx);
    /* Below min_insync_replicas: deliveries stop waiting for their delivery marks. */
    void (*drop_delivery_holds)(void *ctx);
    /* A user was deleted or lost access: close its connections ("user 'U' <why>"). */
    size_t (*close_user)(void *ctx, const char *user, const char *why);
    /* Open connections of user (NULL = any) in vhost (NULL = any); channels of user. */
    uint64_t (*count_connections)(void *ctx, const char *user, const char *vhost);
    uint64_t (*count_user_channels)(void *ctx, const char *user);
    /* vh is being deleted: close its connections and drop any state in it, before its
     * queues go. */
    size_t (*vhost_deleting)(void *ctx, qm_vhost *vh, const char *text); /* how many closed */
    /* CONNECT / DISCONNECT (MSMQ's machine actions): go online or offline. */
    void (*set_online)(void *ctx, int online);
    /* The cluster: 1 when sa is another member's address (a proxied client, never loopback). */
    int (*peer_is_member)(void *ctx, const struct sockaddr *sa);
    /* Client connections as the HTTP API lists them (clients.h); doors with clients have
     * them (AMQP, stream), their ids from node_client_id.
     * client_next: the client with the largest id <= at_most (0: none). client_find: by name.
     * client_close: close it with text (AMQP's 320). channel_at: the channel in slot of
     * client (1), none there (0), or past the last slot (-1). consumers: the channel's, after
     * the one tagged after (all when NULL or gone), to fn; 1 when all were walked, 0 when fn
     * stopped it. owner_name: the name of the client that owns an exclusive queue. */
    int (*client_next)(void *ctx, uint64_t at_most, node_client *out);
    int (*client_find)(void *ctx, const char *name, node_client *out);
    int (*client_close)(void *ctx, uint64_t id, const char *text);
    int (*channel_at)(void *ctx, uint64_t client, size_t slot, node_channel *out);
    int (*consumers)(void *ctx, uint64_t client, size_t slot, const char *after, size_t after_len,
                     node_consumer_fn fn, void *arg);
    const char *(*owner_name)(void *ctx, const void *owner);
    /* A stream client's publishers and subscriptions (all of them, at most 256 each), to fn. */
    void (*publishers)(void *ctx, uint64_t client, node_publisher_fn fn, void *arg);
    void (*subscriptions)(void *ctx, uint64_t client, node_subscription_fn fn, void *arg);
    /* node_free, first of all, in the reverse order of adding (a cluster leader hands its key
     * back before its clients are dropped). */
    void (*leave)(void *ctx);
    /* node_free, before the store closes, in the reverse order of adding. */
    void (*stop)(void *ctx);
    /* node_free, after the store closed (the cluster's mirror observed its files). */
    void (*closed)(void *ctx);
} node_part;

#define NODE_MAX_PARTS 8
#define NODE_MAX_LISTENERS 8

/* A listener a door opened, as the API lists it and as format names are matched. */
typedef struct node_listener {
    char protocol[16]; /* "amqp", "amqp/ssl", "http", "https", "msmq", "msrpc"... */
    char addr[64];
    int port;
    const struct sl_acceptor *acceptor; /* its accept loop's figures (metrics), or NULL */
} node_listener;

struct sl_node {
    node_config *cfg;
    sl_loop *loop;
    qm_node *qm;
    struct persist *store;
    acc_db *acc;                   /* users, vhost definitions, permissions: every door asks */
    struct acc_verifier *verifier; /* slow password checks off the loop (access/verifier.h) */
    sl_watch verify_w;
    unsigned fd_reserve; /* descriptors the AMQP door leaves free (the API leaves half) */
    int signal_fd;
    sl_watch signal_w;
    sl_timer tick_timer;    /* qm TTL / x-expires work, alarms, the bounded sync */
    sl_timer tidy_timer;    /* automatic TIDY */
    uint64_t tidy_written;  /* persist_bytes_appended when the last TIDY started */
    uint64_t reap_released; /* persist_segments_released when the last reap started */
    uint64_t reap_at_ms;    /* and when */
    int tidy_after_reap;    /* a TIDY was asked for while a reap ran: it starts after it */
    struct tidy_waiter {
        node_tidy_fn fn;
        void *ctx;
    } * tidy_waiters; /* told when the TIDY in progress is done */
    size_t n_tidy_waiters, cap_tidy_waiters;
    int alarms;       /* ALARM_*: publishers are blocked while non-zero */
    int reserve_held; /* DATA/space-reserve exists (released when the disk is full) */
    uint64_t next_disk_check;
    uint64_t disk_check_bytes; /* the store's bytes appended at the last free-space check */
    uint64_t disk_free; /* free bytes under data_dir at the last check, as the alarm saw them */
    uint64_t next_store_sync;
    int shutting_down;
    uint64_t shutdown_deadline;
    /* The cluster (src/cluster/): NULL unless cluster_formation is configured. The cluster
     * room fills these; the node only holds them for the doors that show them. */
    struct cl_member *cluster;
    sl_watch cluster_w; /* the member's eventfd: its role changed */
    struct cl_mirror *mirror;
    struct cl_stream_server *repl;
    sl_watch repl_w;
    struct cl_node *cl_node;
    int reexec;                      /* deposed: re-exec as a follower once the loop stops */
    int cl_handover;                 /* a step-down is handing over: publishers are blocked */
    char cluster_reason[320];        /* connection.blocked's reason (below min_insync_replicas, or a
                                      * hand-over) */
    struct link_mgr *links;          /* outgoing queues and their links (src/link/), set by main */
    struct sl_tls_ctx *link_tls_ctx; /* link_ssl: the client side of links */
    uint64_t conns_refused;          /* client connections refused by connection_max (metric) */
    uint64_t boot_id;        /* random per start: remote contexts of an earlier boot are stale */
    uint64_t next_client_id; /* the last client id handed out (node_client_id) */
    uint64_t link_accepted, link_duplicates; /* messages received over links */
    node_stream_figures stream_figs;         /* the stream door's counters (/metrics) */
    /* Replies that wait for the disk (node.c, "Waiting for the disk"). */
    sl_watch sync_w;              /* the sync thread's completion eventfd */
    sl_watch pace_w;              /* a timerfd: a paced sync is due (persist_pace_due) */
    uint64_t pace_armed_us;       /* when pace_w fires (sl_now_us clock), 0: disarmed */
    struct disk_waiter *dwaiters; /* node_after_sync callbacks, a ring in ticket order */
    size_t dw_head, dw_len, dw_cap;
    uint64_t wmark_seen; /* persist_wmark() at the last delivery (node_delivery_ticket) */
    node_part parts[NODE_MAX_PARTS];
    size_t n_parts;
    node_listener listeners[NODE_MAX_LISTENERS];
    size_t n_listeners;
};

/* ---- life (node.c) ---- */
/* The loop, the model, the access module, signals; no store yet. NULL after logging why. */
sl_node *node_new(node_config *cfg);
/* Open the store (po: the cluster's mirror hooks, or NULL), seed access, start the sync
 * watches, the tick and TIDY timers. -1 after logging why. */
int node_open(sl_node *n, struct persist_options *po);
void node_add_part(sl_node *n, const node_part *p);
/* A part that stops before the node (the HTTP API, the MS-MQQB door) takes itself out. */
void node_remove_part(sl_node *n, void *ctx);
void node_run(sl_node *n);
/* Stops the parts (reverse order), then closes the store and frees the model. */
void node_free(sl_node *n);
/* A new client's id, unique over every door and growing (clients.h). */
uint64_t node_client_id(sl_node *n);
/* Every door's clients as one list by id: the client with the largest id <= at_most over
 * every part that has clients, into *out, and its part (NULL: none). */
const node_part *node_client_next(const sl_node *n, uint64_t at_most, node_client *out);
/* The client named name, of any door, and its part (NULL: none). */
const node_part *node_client_find(const sl_node *n, const char *name, node_client *out);
/* Record a listener a door opened (the API's listeners, format names' own addresses). */
void node_add_listener(sl_node *n, const char *protocol, const char *addr, int port,
                       const struct sl_acceptor *acceptor);
/* The listener of protocol, or NULL. */
const node_listener *node_listener_find(const sl_node *n, const char *protocol);
/* The AMQP listener's port (0 before it listens): format names and the cluster's figures. */
int node_amqp_port(const sl_node *n);
/* Close every connection with 320 (reply text) and stop the loop once they are gone (at most
 * 2 s), as on SIGTERM. */
void node_begin_shutdown(sl_node *n, const char *why, const char *text);
/* 1 once this loop turn has spent TURN_INPUT_MS on input. */
#define TURN_INPUT_MS 10
int node_turn_over(const sl_node *n);

/* ---- the disk (ticket.c) ---- */
/* Group commit now, blocking the loop for the sync: what was changed is on disk when it
 * returns. Exits the process if the store fails. Doors should prefer node_after_sync. */
void node_sync(sl_node *n);
/* The group commit of this turn: hand what was appended to the sync thread (force: even
 * if little). Exits the process if the store fails; a full disk stalls (the disk alarm). */
void node_kick(sl_node *n, int force);
/* Waiting for the disk without blocking. node_ticket: the store generation that holds
 * everything appended so far (0: none); node_durable: every generation <= it is on disk.
 * node_mark / node_ticket_since: the ticket of what one operation appended (0 if it
 * appended nothing that needs the disk). */
uint64_t node_ticket(const sl_node *n);
uint64_t node_durable(const sl_node *n);
uint64_t node_mark(const sl_node *n);
uint64_t node_ticket_since(const sl_node *n, uint64_t mark);
/* The same for a pipelined confirm: a sync only such tickets wait for may be paced
 * (`sync_pace_us`, persist_ticket_since_lazy). */
uint64_t node_ticket_since_lazy(const sl_node *n, uint64_t mark);
/* Lazy tickets up to gen become eager: their sync is not paced any more. */
void node_hasten(sl_node *n, uint64_t gen);
uint64_t node_wmark(const sl_node *n);
uint64_t node_write_ticket_since(sl_node *n, uint64_t wmark);
/* A delivery is about to be written: the write ticket its output must wait for (0: none),
 * if handing it out appended a delivery mark (or a no-ack removal) since the last delivery.
 * 0 too while the disk is full or the cluster is below min_insync_replicas (see there). */
uint64_t node_delivery_ticket(sl_node *n);
/* Call fn(ctx) from the loop once everything appended so far is on disk: returns 1 when
 * registered, 0 (fn not called) when it is on disk already. For doors that reply outside
 * AMQP (the HTTP API, MS-MQQB) and for link acknowledgements. */
int node_after_sync(sl_node *n, void (*fn)(void *ctx), void *ctx);
/* Reply to whatever waits for the disk (after the release gate moved): every part's
 * released hook, then the callbacks the durable point covers. */
void node_release_waiters(sl_node *n);
/* TIDY (MSMQ "clean up empty message files"): give back the disk of store segments nothing
 * needs, compacting those with little live data (persist.h). Never touches a live message.
 * It runs a slice per loop turn; fn(ctx, result) is called once it is done (fn may be NULL:
 * the automatic one). A TIDY asked for while one runs gets that one's result. Without a store
 * fn is called at once with zeros. */
void node_tidy_start(sl_node *n, node_tidy_fn fn, void *ctx);
/* The queue manager's identifier (MS-MQDMPR QueueManager.Identifier) every MSMQ door gives:
 * the node id of the store, or one derived from boot_id without a store. */
void node_qm_guid(const sl_node *n, uint8_t out[16]);

/* ---- alarms (alarm.c) ---- */
/* What the memory alarm counts: messages and every buffer of the node. */
uint64_t node_memory_bytes(const sl_node *n);
/* "low on memory" / "low on disk" / the cluster's reason while an alarm is on, else NULL. */
const char *node_alarm_reason(const sl_node *n);
void node_set_alarm(sl_node *n, int which, int on);
/* The cluster: fewer than min_insync_replicas in sync: block publishers as the alarms do. */
void node_set_cluster_alarm(sl_node *n, int on);
/* Below min_insync_replicas: every part's deliveries stop waiting for delivery marks. */
void node_drop_delivery_holds(sl_node *n);
/* Look at free space now if the store has taken a check step since the last look (at each
 * publish and each turn's end: the disk alarm follows what is written, not only the clock). */
void node_check_disk_step(sl_node *n);
/* The periodic look (the tick): free space and the space reserve. */
void node_check_disk(sl_node *n, uint64_t now);
/* The store ran out of space: hold what depends on it, release the space reserve. */
void node_store_stalled(sl_node *n);
/* The space reserve (disk_reserve bytes under data_dir): made when there is room for it. */
void node_reserve_make(sl_node *n);
void node_reserve_drop(sl_node *n);

/* ---- who is who (vhosts.c) ---- */
/* Seed the default vhost and user (first start only) and the config users. -1 on failure. */
int node_access_init(sl_node *n);
/* Create (or update the description / tags of) a vhost, in the model and in the access
 * module; acting_user (may be NULL) gets full permissions on a new one, as RabbitMQ's API
 * does. */
sl_err node_vhost_add(sl_node *n, const char *name, const char *description, const char *tags,
                      const char *acting_user, char *err, size_t errlen);
/* Delete a vhost: its connections are closed (320 "vhost 'V' is deleted"), its definition,
 * permissions and limits, then its queues (with their storage), exchanges and bindings. */
sl_err node_vhost_delete(sl_node *n, const char *name, char *err, size_t errlen);
/* Close the user's connections with 320 "CONNECTION_FORCED - user 'U' <why>". */
size_t node_close_user_connections(sl_node *n, const char *user, const char *why);
/* Open connections of user (NULL = any) in vhost (NULL = any), over every door. */
uint64_t node_count_connections(sl_node *n, const char *user, const char *vhost);
uint64_t node_count_user_channels(sl_node *n, const char *user);
/* CONNECT / DISCONNECT: links start or stop; offline closes incoming links too. */
void node_set_online(sl_node *n, int online);
/* (loop) 1 when a client at sa counts as local for loopback_users: a loopback address that
 * is not another cluster member's (a proxied connection's; docs/security.md). */
int node_peer_is_loopback(sl_node *n, const struct sockaddr *sa);
/* A client's address as every door names it: "ADDR:PORT" into peer (len bytes; "?:0" for a
 * family that is not IP); returns node_peer_is_loopback for it. */
struct sockaddr_storage;
int node_peer_describe(sl_node *n, const struct sockaddr_storage *ss, char *peer, size_t len);
/* The TLS options of a ssl_options / management.ssl group (net/tls.h). */
void node_tls_opts(const struct node_tls_conf *t, struct sl_tls_opts *o);

#endif
