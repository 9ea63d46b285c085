/* internal.h - what the stream door's files share: the door (door.c: listeners, the node's
 * hooks, the list of connections), a connection (conn.c: the socket, TLS, framing, timers,
 * closing) and the commands (handshake.c before Open, commands.c after it).
 *
 * A connection's life: SC_TLS (listeners.stream.ssl only), then PeerProperties, SaslHandshake,
 * SaslAuthenticate, the server's Tune and the client's, Open; SC_OPEN serves commands; a
 * Close from either side, a framing error or a timeout ends it. A connection that is done
 * lingers (SC_LINGER: its last answer is flushed, its write side shut, input discarded) so the
 * client reads that answer before the socket goes. Killed connections move to the door's dead
 * list and are freed at the end of the loop turn, never under a handler that holds them.
 */
#ifndef SL_STREAM_INTERNAL_H
#define SL_STREAM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "access/access.h"
#include "core/buf.h"
#include "net/accept.h"
#include "net/loop.h"
#include "node/node.h"
#include "qm/qm.h"
#include "stream/stream.h"
#include "streamproto/cmd.h"
#include "streamproto/frame.h"

struct sl_tls;
struct sl_tls_ctx;
struct acc_verify_job;

/* A new subscription's first Deliver waits this long after the Subscribe answer went out, so
 * that a client reads them apart (subscribe.c). */
#define STREAM_FIRST_DELIVER_MS 3
/* Answers waiting to be written beyond this stop the connection's input until they drain. */
#define STREAM_OUT_MAX (1u << 20)
/* How long a Close waits for its answer, and a lingering connection for the client's EOF. */
#define STREAM_CLOSE_WAIT_MS 2000

enum stream_state {
    SC_TLS = 0,        /* the TLS handshake */
    SC_PEER,           /* waiting for PeerProperties */
    SC_SASL_HANDSHAKE, /* waiting for SaslHandshake */
    SC_SASL_AUTH,      /* waiting for SaslAuthenticate */
    SC_LOGIN_WAIT,     /* a slow password check runs (access/verifier.h): nothing is read */
    SC_TUNE,           /* our Tune is sent: waiting for the client's */
    SC_OPENING,        /* waiting for Open */
    SC_OPEN,
    SC_CLOSING, /* we sent Close: waiting for its answer */
    SC_LINGER,  /* all said: flush, shut the write side, discard input until EOF */
    SC_DEAD,
};

typedef struct stream_conn stream_conn;
struct stream_pub;
struct stream_sub;
struct stream_confirm;

struct stream_conn {
    stream_door *d;
    stream_conn *prev, *next;
    uint64_t id;
    int fd;
    sl_watch w;
    sl_timer timer;
    enum stream_state state;
    struct sl_tls *tls;           /* NULL on the plain listener */
    uint8_t tls_write_wants_read; /* a TLS write waits for the socket to be readable */
    uint8_t loopback;             /* for loopback_users */
    uint8_t counted_open;         /* in the door's count of open connections */
    uint8_t shut_wr;
    uint8_t held; /* frame handling stopped (full output, slow login): the feeder may hold more */
    uint8_t close_answered; /* the client answered our Close: it has read all, close at once */
    uint8_t deliver_v2;     /* the client's ExchangeCommandVersions takes Deliver v2 (filtering) */
    sp_feeder in;
    sl_buf out;
    char peer[64];                 /* ADDR:PORT */
    char name[160];                /* "peer -> listener", as the AMQP door names connections */
    char *user;                    /* after SaslAuthenticate */
    char *vhost;                   /* after Open */
    uint32_t frame_max, heartbeat; /* tuned */
    uint32_t next_corr;            /* of the requests we send (Close) */
    uint64_t started, last_recv, last_send, deadline;
    /* a slow login in progress (SC_LOGIN_WAIT) */
    struct acc_verify_job *job;
    uint32_t login_corr;
    char *login_user;
    uint8_t *login_hash;
    size_t login_hash_len;
    /* publishers and subscriptions by their ids (publish.c, subscribe.c) */
    struct stream_pub *pubs[256];
    struct stream_sub *subs[256];
    size_t n_pubs, n_subs;
    /* PublishConfirms waiting for their store generation, oldest first (publish.c) */
    struct stream_confirm *cf_head, *cf_tail;
    uint8_t sub_wait; /* a subscription with credit stopped (a full output, sub_at): pump later */
    uint64_t sub_at;  /* not before this loop time (a new subscription's first Deliver) */
    /* An answer held until what its command changed (definitions) is on disk
     * (stream_reply_durable): reading stops meanwhile, so later answers stay behind it. */
    uint8_t dur_wait;
    uint16_t dur_key, dur_code;
    uint32_t dur_corr;
    uint64_t dur_gen;
    uint8_t dirty; /* output written outside a frame handler: on the door's dirty list */
    stream_conn *dirty_next;

    /* for the HTTP API's view (view.c) */
    char **props; /* PeerProperties: key, value pairs */
    size_t n_props;
    const char *auth_mechanism; /* the login's ("PLAIN", "EXTERNAL"), static */
};

struct stream_door {
    sl_node *n;
    int fd, tls_fd; /* -1: not listening */
    sl_acceptor acc, tls_acc;
    struct sl_tls_ctx *tls_ctx;
    char addr[64], tls_addr[64];
    int port, tls_port;
    char adv_host[256]; /* what Metadata and Open name */
    int adv_port, adv_tls_port;
    stream_conn *conns;
    size_t n_conns;
    stream_conn *dead;  /* killed this turn, freed by the turn hook */
    stream_conn *dirty; /* deliveries and confirms written this turn, flushed by the turn hook */
    uint64_t queues_deleted; /* the model's count when publishers were last checked */
    uint8_t blocked;         /* a resource alarm is on: connections with publishers are not read */

    node_client_cursor view; /* the views' walk by id (view.c), from the last one returned */
};

/* ---- door.c ---- */
/* A killed connection leaves the list of live ones for the dead list. */
void stream_door_retire(stream_door *d, stream_conn *c);

/* ---- conn.c ---- */
stream_conn *stream_conn_new(stream_door *d, int fd, const struct sockaddr_storage *ss, int tls);
void stream_conn_free(stream_conn *c);
/* Close the socket now (why: logged when not NULL); the struct is freed at the turn's end. */
void stream_conn_kill(stream_conn *c, const char *why);
/* Append one frame for cmd (written by stream_conn_flush). */
void stream_conn_send(stream_conn *c, const sp_cmd *cmd);
void stream_conn_flush(stream_conn *c);
/* Send Close with code and reason and wait for its answer (STREAM_CLOSE_WAIT_MS at most). */
void stream_conn_close(stream_conn *c, uint16_t code, const char *reason);
/* Nothing more to say: flush, then close (why: logged at info when not NULL). */
void stream_conn_linger(stream_conn *c, const char *why);
/* Frames held in the feeder (for a full output, a slow login) are handled, in bounded rounds;
 * what is left goes on from the timer. */
void stream_conn_resume(stream_conn *c);
/* The watch and the timer, after a change of state. */
void stream_conn_rearm(stream_conn *c);

/* ---- handshake.c ---- */
/* A decoded command from the client, in any state. */
void stream_handle(stream_conn *c, const sp_cmd *m);
/* A slow login's connection goes: its check is cancelled. */
void stream_login_cancel(stream_conn *c);

/* Output written outside a frame handler (a delivery, a confirm): flushed at the turn's end. */
void stream_door_dirty(stream_door *d, stream_conn *c);

/* ---- commands.c ---- */
/* A request after Open. */
void stream_open_command(stream_conn *c, const sp_cmd *m);
/* Reply helper: a response of key with corr and code and nothing else. */
void stream_reply_code(stream_conn *c, uint16_t key, uint32_t corr, uint16_t code);
/* The same once everything appended so far is durable, as queue.declare of a durable queue
 * answers (Create, Delete and the super streams': the answer says the definitions are
 * there); at once when nothing waits for the disk. stream_reply_released sends it when the
 * store generation it waits for is on disk. */
void stream_reply_durable(stream_conn *c, uint16_t key, uint32_t corr, uint16_t code);
void stream_reply_released(stream_conn *c);
/* The loop time the oldest unanswered ConsumerUpdate of c times out (stream.request_timeout),
 * 0 when none is; stream_requests_expire closes c (1) when that time has come. */
uint64_t stream_requests_due(const stream_conn *c);
int stream_requests_expire(stream_conn *c, uint64_t now);
/* SP_OK, or SP_ACCESS_REFUSED (logged): the user's perm on the stream as a queue. */
uint16_t stream_check(stream_conn *c, sp_str name, acc_perm perm);
/* The stream of that name in the connection's vhost (a queue of type stream), or NULL. */
qm_queue *stream_find(stream_conn *c, sp_str name);
/* Create's arguments (max-length-bytes, max-age, ...) as a stream queue's x- arguments table
 * content, x-queue-type first: 0, or -1 when a numeric one is not a number. */
int stream_create_arguments(const sp_map *a, sl_buf *t);

/* ---- superstream.c: CreateSuperStream, DeleteSuperStream, Partitions, Route ---- */
void stream_create_super_stream(stream_conn *c, const sp_cmd *m);
void stream_delete_super_stream(stream_conn *c, const sp_cmd *m);
void stream_partitions(stream_conn *c, const sp_cmd *m);
void stream_route(stream_conn *c, const sp_cmd *m);

/* ---- publish.c: DeclarePublisher, Publish, PublishConfirm/Error, DeletePublisher,
 * QueryPublisherSequence ---- */
void stream_declare_publisher(stream_conn *c, const sp_cmd *m);
void stream_publish(stream_conn *c, const sp_cmd *m);
void stream_delete_publisher(stream_conn *c, const sp_cmd *m);
void stream_query_publisher_sequence(stream_conn *c, const sp_cmd *m);
/* A store generation became durable: the confirms it covers go out. */
void stream_confirms_released(stream_conn *c);
void stream_publishers_free(stream_conn *c);
/* Queues were deleted: publishers whose stream went get MetadataUpdate and are dropped. */
void stream_publishers_check(stream_conn *c);

/* ---- subscribe.c: Subscribe (single active consumer, filters), Credit, Deliver,
 * ConsumerUpdate, Unsubscribe ---- */
void stream_subscribe(stream_conn *c, const sp_cmd *m);
void stream_credit(stream_conn *c, const sp_cmd *m);
void stream_unsubscribe(stream_conn *c, const sp_cmd *m);
/* The client's answer to a ConsumerUpdate (single active consumer): delivery starts at the
 * offset it gives, or the step-down is over. */
void stream_consumer_update_answer(stream_conn *c, const sp_cmd *m);
/* Deliver what the subscriptions have credit for, while the output has room. */
void stream_subs_pump(stream_conn *c);
/* Detach and free every subscription (the connection goes). */
void stream_subs_free(stream_conn *c);

/* ---- view.c: connections, publishers and subscriptions as the HTTP API lists them ---- */
/* The node's client hooks (node/clients.h) on the door's part. */
void stream_view_hooks(node_part *part);
/* A command's string map kept as key, value pairs (for the views), and let go. */
char **stream_props_copy(const sp_map *m, size_t *n);
void stream_props_free(char **props, size_t n);
/* Each publisher's or subscription's view (publish.c, subscribe.c). */
void stream_publishers_view(stream_conn *c, node_publisher_fn fn, void *arg);
void stream_subs_view(stream_conn *c, node_subscription_fn fn, void *arg);

/* ---- tracking.c: StoreOffset, QueryOffset, StreamStats; the model's tracking (qm.h) ---- */
enum stream_track_kind {
    STREAM_TRACK_PUBLISHER = QM_TRACK_PUBLISHER,
    STREAM_TRACK_OFFSET = QM_TRACK_OFFSET
};
/* The tracked value of reference on q: 1 with *v, 0 when none. */
int stream_track_get(const qm_queue *q, int kind, sp_str ref, uint64_t *v);
void stream_track_set(qm_queue *q, int kind, sp_str ref, uint64_t v);
void stream_store_offset(stream_conn *c, const sp_cmd *m);
void stream_query_offset(stream_conn *c, const sp_cmd *m);
void stream_stream_stats(stream_conn *c, const sp_cmd *m);

#endif
