/* qm.h - the queue manager: Sluice's protocol-neutral model, after MS-MQDMPR.
 *
 * This header is the table of contents of src/qm/. Every door (AMQP, management API, CLI,
 * later node-to-node links) translates into these operations, so a purge is the same purge
 * whichever door it came through. qm/ knows nothing of sockets; it uses amqp/ only to read
 * and build field tables and basic properties (dead-letter headers, headers exchanges).
 *
 * Objects and ownership
 *   qm_node     one sluiced node: vhosts, node-wide counters, the dispatch list.
 *   qm_vhost    exchanges and queues by name.
 *   qm_message  an immutable, refcounted message: properties (raw AMQP wire bytes) + body.
 *               Stored once and shared by every queue it was routed to.
 *   qm_position a message's place in one queue (MS-MQDMPR MessagePosition): lookup id,
 *               state, move count, redelivered flag. Owned by its queue while Available;
 *               owned by its holder (a consumer's delivery or a transaction) while Locked or
 *               PurgePending: qm never frees a position that has a holder, the holder ends it
 *               with one of the qm_position_* settle calls.
 *   qm_queue    ready positions in lookup-id order (one run per priority level), the list of
 *               Locked/PurgePending positions, consumers, subqueues.
 *   qm_tx       a transaction: Enqueue, Dequeue and Move operations, applied by commit and
 *               undone by abort.
 *
 * Position states (MS-MQDMPR 3.1.1.11):
 *   AVAILABLE      ready for delivery
 *   LOCKED         delivered and not yet settled, or touched by an open transaction
 *   PURGE_PENDING  was LOCKED when the queue was purged: deleted (never requeued) when its
 *                  holder settles it, whatever the settlement
 *   DELETED        gone (acked, purged, expired, rejected, queue deleted); a DELETED position
 *                  still referenced by a holder is freed when the holder settles it
 *
 * Lookup ids are node-wide, strictly increasing at enqueue, so they are unique and
 * increasing within each queue; a moved message keeps its id (MS-MQDMPR Move Message).
 * Each queue declaration gets a fresh incarnation id, so nothing of a deleted queue can come
 * back under a redeclared one.
 */
#ifndef SL_QM_QM_H
#define SL_QM_QM_H

#include <stddef.h>
#include <stdint.h>

#include "amqp/wire.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/map.h"
#include "core/oset.h"

typedef struct qm_node qm_node;
typedef struct qm_vhost qm_vhost;
typedef struct qm_queue qm_queue;
typedef struct qm_exchange qm_exchange;
typedef struct qm_binding qm_binding;
typedef struct qm_message qm_message;
typedef struct qm_position qm_position;
typedef struct qm_consumer qm_consumer;
typedef struct qm_tx qm_tx;
typedef struct qm_tnode qm_tnode;
typedef struct qm_qdesc qm_qdesc;

/* ------------------------------------------------------------------------------------------
 * Positions and messages (a message carries its first position, so both are defined here)
 */
typedef enum qm_pos_state {
    QM_POS_AVAILABLE = 0,
    QM_POS_LOCKED,
    QM_POS_PURGE_PENDING,
    QM_POS_DELETED,
} qm_pos_state;

/* Why a position was deleted (MS-MQDMPR Message Position Deleted reasons). */
typedef enum qm_delete_reason {
    QM_DEL_ACKED = 0,
    QM_DEL_PURGED,
    QM_DEL_QUEUE_DELETED,
    QM_DEL_EXPIRED,
    QM_DEL_REJECTED,
    QM_DEL_MAXLEN,
    QM_DEL_MOVED,
    QM_DEL_DELIVERY_LIMIT, /* a quorum queue's message returned more than x-delivery-limit */
} qm_delete_reason;

/* What only a held position needs (LOCKED, PURGE_PENDING, DELETED but still held, or in a
 * transaction): a separate small allocation made when the position leaves the ready rings and
 * freed when it comes back, so the ready positions that make up a queue's depth carry none of
 * it (issue 14: a queued message's memory). */
typedef struct qm_lock {
    qm_tx *tx;                  /* transaction holding this position, if any */
    void *holder;               /* opaque holder (e.g. the broker's delivery record) */
    qm_position *lprev, *lnext; /* in queue->locked while LOCKED or PURGE_PENDING; on the
                                   node's orphan list while DELETED and held */
    uint64_t expires_at;        /* the position's deadline, kept while it is held */
} qm_lock;

struct qm_position {
    qm_message *msg;
    qm_queue *queue; /* NULL once the queue is deleted */
    uint64_t lookup_id;
    union {
        uint64_t expires_at; /* !has_lk: sl_now_ms() deadline, 0 = never (qm_pos_expires) */
        qm_lock *lk;         /* has_lk: the held-position fields (expires_at moved there) */
    } u;
    uint32_t st_seg;            /* persistence: store segment of the enqueue record */
    uint32_t move_count : 23;   /* saturates at 8,388,607 */
    uint32_t state : 2;         /* qm_pos_state */
    uint32_t redelivered : 1;   /* delivered before and requeued */
    uint32_t in_tx_enqueue : 1; /* LOCKED by a transactional Enqueue, not yet committed */
    uint32_t st_logged : 1;     /* persistence: an enqueue record exists in the store */
    uint32_t st_delivered : 1;  /* persistence: a delivery record exists (redelivered after
                                 * a restart) */
    uint32_t xact_cont : 1;     /* outgoing queues: more of this message's transaction follows
                                 * (a link never splits a transaction) */
    uint32_t xact : 1;          /* outgoing queues: enqueued by a transaction (a transactional
                                 * message: dead-lettered to DEADXACT) */
    uint32_t has_lk : 1;        /* u.lk is allocated */
};

#define QM_MOVE_COUNT_MAX ((1u << 23) - 1)

/* Accessors for the fields that live in the lock while a position is held. */
static inline uint64_t qm_pos_expires(const qm_position *p)
{
    return p->has_lk ? p->u.lk->expires_at : p->u.expires_at;
}
static inline void qm_pos_set_expires(qm_position *p, uint64_t at)
{
    if (p->has_lk)
        p->u.lk->expires_at = at;
    else
        p->u.expires_at = at;
}
static inline void *qm_pos_holder(const qm_position *p)
{
    return p->has_lk ? p->u.lk->holder : NULL;
}
static inline qm_tx *qm_pos_tx(const qm_position *p)
{
    return p->has_lk ? p->u.lk->tx : NULL;
}
/* Set the holder (the door's delivery record) or transaction of a held position. */
void qm_pos_set_holder(qm_position *p, void *holder);
void qm_pos_set_tx(qm_position *p, qm_tx *tx);

/* Where a message was published (exchange, routing key): shared by the messages published
 * with the same pair (message.c keeps a small cache of them), so a queued message carries a
 * pointer, not its own copy of the names. Both strings are NUL-terminated. */
typedef struct qm_msg_route {
    uint32_t refs;
    uint8_t exchange_len, routing_key_len; /* short strings: at most 255 bytes */
    char names[];                          /* exchange NUL routing-key NUL */
} qm_msg_route;

/* A stored message's place in the store (persist/): only messages that may be stored carry
 * it (persistent ones, and those read back from the store), right after the header. */
typedef struct qm_msg_store {
    uint64_t st_id;
    uint32_t st_seg; /* segment and offset of the message record */
    uint32_t st_off;
    uint32_t st_len; /* payload length of the message record */
    uint32_t pad;
} qm_msg_store;

/* A message is one allocation: this header, its store fields (when it has them), the raw
 * basic properties as on the wire, and the body. The accessors below find them; keeping no
 * pointers to them keeps the header small, since a queued message costs this header plus its
 * bytes (DESIGN.md section 4: 16 + 8 bytes of header and 40 of position for a transient one).
 *
 * pos0 is a position carried inside the message allocation: the first queue a message reaches
 * (almost always the only one) uses it instead of a separate allocation, so the common case
 * is one allocation per message. It holds a reference like any position, so the message
 * outlives it; qm_position_free knows not to free it on its own. */
struct qm_message {
    uint32_t refs;
    uint32_t props_len;
    uint32_t body_len;          /* max_message_size is at most 512 MiB */
    uint8_t priority;           /* basic priority property, 0 when absent */
    uint8_t persistent : 1;     /* delivery-mode 2 */
    uint8_t has_expiration : 1; /* an expiration property (qm_msg_expiration reads it) */
    uint8_t has_store : 1;      /* the qm_msg_store fields follow the header */
    uint8_t st_written : 1;     /* persistence: the message record is in the store */
    uint8_t pos0_used : 1;
    /* A door wants the node's on_removed hook for this message when a purge or its queue's
     * deletion takes it (MSMQ: its sender asked for receive NACKs). Stored with its enqueue
     * (R_ENQ's EF_WATCH), so recovery and page-in give it back with the message. */
    uint8_t watch : 1;
    uint16_t alloc; /* message.c: the allocation's size class (0: malloc) */
    const qm_msg_route *route;
    qm_position pos0;
};

static inline amqp_bytes qm_msg_exchange(const qm_message *m)
{
    return (amqp_bytes){(const uint8_t *)m->route->names, m->route->exchange_len};
}

static inline amqp_bytes qm_msg_routing_key(const qm_message *m)
{
    return (amqp_bytes){(const uint8_t *)m->route->names + m->route->exchange_len + 1,
                        m->route->routing_key_len};
}

static inline qm_msg_store *qm_msg_st(const qm_message *m)
{
    return (qm_msg_store *)(m + 1);
}

static inline uint8_t *qm_msg_props(const qm_message *m)
{
    return (uint8_t *)(m + 1) + (m->has_store ? sizeof(qm_msg_store) : 0);
}

static inline uint8_t *qm_msg_body(const qm_message *m)
{
    return qm_msg_props(m) + m->props_len;
}

/* The message's expiration property in ms: 1 with *ms, 0 when it has none (or an invalid one,
 * taken as none). Parsed from the properties when asked: only enqueues need it. */
int qm_msg_expiration(const qm_message *m, uint64_t *ms);

/* Create a message with room for body_len bytes at qm_msg_body(msg) (the caller fills it, for AMQP
 * straight from body frames). props are copied. The expiration, priority and persistent
 * fields are parsed from props, which the caller has validated (amqp_props_decode).
 * Never returns NULL. refs = 1. */
qm_message *qm_message_new(amqp_bytes exchange, amqp_bytes routing_key, const uint8_t *props,
                           uint32_t props_len, uint64_t body_len);
/* The same when the door has decoded props already (the publish path: decode once). */
struct amqp_basic_props;
qm_message *qm_message_new_decoded(amqp_bytes exchange, amqp_bytes routing_key,
                                   const uint8_t *props, uint32_t props_len, uint64_t body_len,
                                   const struct amqp_basic_props *bp);
/* A message whose body arrives in pieces (AMQP body frames): room for body_cap <= body_len
 * bytes now, so memory is taken as the body really arrives, not as a header announces it.
 * qm_message_grow makes room for new_cap bytes and returns the (possibly moved) message: only
 * while its creator is its only holder. One dropped before it is complete is freed with
 * qm_message_free_partial and its current capacity. Accounting (qm_memory_bytes) follows the
 * capacity. */
qm_message *qm_message_new_partial(amqp_bytes exchange, amqp_bytes routing_key,
                                   const uint8_t *props, uint32_t props_len, uint64_t body_len,
                                   uint64_t body_cap, const struct amqp_basic_props *bp);
qm_message *qm_message_grow(qm_message *m, uint64_t old_cap, uint64_t new_cap);
void qm_message_free_partial(qm_message *m, uint64_t body_cap);
/* A message read back from the store (persist/): it has the store fields whatever its
 * delivery mode, so a message paged out and in again is not written twice. */
qm_message *qm_message_new_stored(amqp_bytes exchange, amqp_bytes routing_key, const uint8_t *props,
                                  uint32_t props_len, uint64_t body_len);
/* Check an expiration property as RabbitMQ does at publish: 0 with *ms, or -1 with
 * RabbitMQ's reason in why ("no_integer", "{value_negative,-1}", "{leftover_string,\".5\"}",
 * "{value_too_large,N}"); doors refuse the publish with 406 "invalid expiration 'S': why". */
#define QM_EXPIRATION_MAX_MS 315360000000ull /* 10 years, RabbitMQ's ?MAX_EXPIRY_TIMER */
int qm_expiration_parse(amqp_bytes s, uint64_t *ms, char *why, size_t whylen);
void qm_message_ref(qm_message *m);
void qm_message_unref(qm_message *m);

/* ------------------------------------------------------------------------------------------
 * Positions: settlement
 */

/* Settle a held position (the holder's end of a delivery):
 *   ack     LOCKED or PURGE_PENDING -> DELETED (reason acked / purged); journal copy if the
 *           queue keeps a journal.
 *   requeue LOCKED -> AVAILABLE at its original place (lookup-id order), redelivered = 1;
 *           PURGE_PENDING -> DELETED (purged): what was purged never comes back.
 *   reject  LOCKED -> DELETED (rejected) and dead-lettered when the queue has a DLX;
 *           PURGE_PENDING -> DELETED (purged).
 * After any of them the holder must not touch pos again (it may have been freed). A position
 * whose queue was deleted (queue == NULL) is just freed. */
void qm_position_ack(qm_position *pos);
void qm_position_requeue(qm_position *pos);
void qm_position_reject(qm_position *pos);

/* ------------------------------------------------------------------------------------------
 * Consumers
 *
 * The queue decides which consumer gets the next message (consumer priority, then round
 * robin among those ready); the consumer's ops tell it whether it can take one now and
 * hand the message over. Dispatch never runs from inside these callbacks.
 * What the callee may do from inside them: can_take must not change qm state; deliver may
 * settle positions and enqueue messages but must not detach consumers, delete queues or run
 * dispatch (defer that to after qm_node_run_dispatch); cancelled may free c.
 */
typedef struct qm_consumer_ops {
    /* 1 while the consumer can take one more message now (prefetch room, socket not
     * backed up). */
    int (*can_take)(qm_consumer *c);
    /* Hand over pos. For no_ack consumers pos is already DELETED (reason acked, queue NULL:
     * use c->queue) and the callee must call qm_position_ack(pos) once it has written it
     * out; otherwise pos is LOCKED with holder unset: the callee sets pos->holder and
     * settles it later. */
    void (*deliver)(qm_consumer *c, qm_position *pos);
    /* The queue went away (deleted, expired, auto-deleted): the consumer has been removed
     * from it and will get no more messages. The callee frees c (e.g. after basic.cancel).
     * During the call c->queue still points at the dying queue (read it, do not use it);
     * qm_consumer_detach(c) is a harmless no-op from then on. */
    void (*cancelled)(qm_consumer *c);
    /* Streams (stream.c): hand over the entry at offset (its payload as qm_stream_append
     * wrote it; valid during the call). Nothing is settled: the callee only keeps its credit.
     * NULL: the consumer cannot consume from a stream. */
    void (*deliver_entry)(qm_consumer *c, uint64_t offset, int64_t ts_ms, const uint8_t *p,
                          size_t len);
    /* Streams, instead of deliver_entry: durable entries lie at or past c->st_next; the callee
     * reads them itself (the stream door hands out whole chunks) and moves st_next. It must
     * not detach any consumer during the call. */
    void (*stream_ready)(qm_consumer *c);
    /* Streams' single active consumer (stream.c): c becomes its group's active consumer
     * (active 1), or is asked to step down (active 0: a super stream's group moved its
     * partition to another member; the callee answers with qm_stream_sac_stepped_down). The
     * engine delivers nothing to c until it is active. Called from attach and detach: the
     * callee must not detach any consumer. */
    void (*sac_update)(qm_consumer *c, int active);
} qm_consumer_ops;

struct qm_consumer {
    qm_queue *queue;
    const qm_consumer_ops *ops;
    void *ctx;    /* the door's consumer state (e.g. the AMQP channel) */
    int priority; /* x-priority argument; higher is served first */
    uint8_t no_ack;
    uint8_t exclusive;
    uint8_t is_link;          /* the link draining an outgoing queue (the only consumer it takes) */
    qm_consumer *prev, *next; /* in queue->consumers */
    uint64_t attached;        /* attach order (single active consumer: the oldest is active) */
    uint64_t st_next;         /* streams: the offset of the next entry it gets */
    struct st_stream_reader *st_reader; /* streams: its read buffer (stream.c), or NULL */
    /* Streams' single active consumer (stream.c): the group's name (owned by the caller,
     * NULL: not in a group), the partition's index in its super stream (-1: a plain stream),
     * and where the consumer stands (enum qm_sac_state). */
    const char *sac_name;
    int32_t sac_partition;
    uint8_t sac_state;
    /* Streams' filtering (qm_stream_filter, owned by the door): NULL, every entry. */
    const struct qm_stream_filter *st_filter;
};

/* Attach c (fields queue, ops, ctx, priority, no_ack, exclusive filled by the caller) to q.
 * Fails SL_ERR_ACCESS_REFUSED when q has an exclusive consumer, or c is exclusive and q has
 * consumers ("queue 'Q' in vhost '/' in exclusive use"), or q is an outgoing queue and c is
 * not its link. */
sl_err qm_consumer_attach(qm_queue *q, qm_consumer *c);
/* Detach c from its queue (basic.cancel, channel close). Does not call ops->cancelled. May
 * delete an auto-delete queue that loses its last consumer. Does not free c. */
void qm_consumer_detach(qm_consumer *c);

/* ------------------------------------------------------------------------------------------
 * Queues
 */
typedef enum qm_overflow {
    QM_OVERFLOW_DROP_HEAD = 0,
    QM_OVERFLOW_REJECT_PUBLISH,
    QM_OVERFLOW_REJECT_PUBLISH_DLX,
} qm_overflow;

/* The x- arguments a queue understands, parsed and checked. -1 / NULL = not set. */
typedef struct qm_queue_args {
    int64_t message_ttl;        /* x-message-ttl, ms >= 0 */
    int64_t expires;            /* x-expires, ms > 0 */
    int64_t max_length;         /* x-max-length >= 0 */
    int64_t max_length_bytes;   /* x-max-length-bytes >= 0 */
    int overflow;               /* qm_overflow */
    char *dlx;                  /* x-dead-letter-exchange (owned) */
    char *dlrk;                 /* x-dead-letter-routing-key (owned) */
    int max_priority;           /* x-max-priority 1..255, 0 = not a priority queue */
    int journal;                /* x-journal (Sluice): keep consumed messages in q;journal */
    int single_active;          /* x-single-active-consumer: one consumer at a time gets messages */
    int quorum;                 /* x-queue-type quorum (quorum.c: delivery counts, limit) */
    int has_delivery_limit;     /* x-delivery-limit given as an integer (quorum queues) */
    int64_t delivery_limit;     /* returns beyond it dead-letter (reason delivery_limit) */
    int64_t initial_group_size; /* x-quorum-initial-group-size > 0 (accepted; every replica
                                 * of a cluster holds every durable queue) */
    int stream;                 /* x-queue-type stream (stream.c: an append-only log) */
    uint64_t max_age_ms;        /* x-max-age (streams), 0 = none */
    int64_t max_segment_bytes;  /* x-stream-max-segment-size-bytes, -1 = RabbitMQ's 500 MB */
    uint8_t *raw;               /* the whole arguments table content, for equivalence */
    size_t raw_len;
} qm_queue_args;

/* Parse and check an arguments table. On error returns SL_ERR_PRECONDITION with a RabbitMQ
 * style detail in err (e.g. "invalid arg 'x-expires' for queue 'Q' in vhost '/':
 * {value_zero,0}"). */
sl_err qm_queue_args_parse(amqp_bytes table, const char *qname, const char *vhost,
                           qm_queue_args *out, char *err, size_t errlen);
void qm_queue_args_free(qm_queue_args *a);
/* 1 when the table asks for x-queue-type quorum. */
int qm_queue_args_quorum(amqp_bytes table);
/* 1 when the table asks for x-queue-type stream. */
int qm_queue_args_stream(amqp_bytes table);

struct qm_queue {
    char *name; /* "q", or "q;sub" for a subqueue */
    qm_vhost *vhost;
    sl_onode by_name; /* top-level queues: in vhost->queue_order */
    uint64_t incarnation;
    uint8_t durable, auto_delete, exclusive;
    uint8_t is_subqueue, is_system;
    /* An outgoing queue (MS-MQDMPR OutgoingQueue): named by the canonical format name of its
     * destination ("DIRECT=TCP:..."); drained by src/link/ only: clients cannot consume from
     * it or move into it. link is the link module's state for it. */
    uint8_t is_outgoing;
    /* A door wants the node's on_removed hook for each ready message that a purge or the
     * queue's deletion takes (the MSMQ door sets it on a queue it put a watched message into,
     * recovery on a queue it restored one into); without it those stay O(1) and unheard of.
     * Paged entries are read back for it only when they are watched (qm_paged.watch), and
     * not in the purge's or deletion's turn: the graveyard does it a slice per turn
     * (qm_node_reap), holding q for it (graves_held). A deleted queue the graveyard still
     * holds is a shell (zombie: unlinked from everything, its name and vhost kept) freed by
     * the graveyard when its last grave is done. */
    uint8_t removal_watch;
    uint8_t zombie;
    uint32_t graves_held;
    void *link;
    uint8_t had_consumer;  /* auto-delete only after a first consumer */
    void *exclusive_owner; /* the owning connection for exclusive queues */
    qm_queue_args args;
    qm_queue *parent;  /* for subqueues */
    sl_map *subqueues; /* name after ';' -> qm_queue*, created on demand */

    /* counts (MESSAGE_COUNT = ready + locked + purge_pending) */
    uint64_t n_ready, n_locked, n_purge_pending;
    uint64_t bytes_ready, bytes_total; /* body bytes */
    uint64_t n_consumers;

    /* lifetime stats */
    uint64_t stat_published, stat_delivered, stat_acked, stat_redelivered, stat_purged,
        stat_expired, stat_dead_lettered;
    uint64_t stat_delivered_no_ack;     /* of stat_delivered, handed out with no ack (gets too) */
    uint64_t stat_get, stat_get_no_ack; /* of stat_delivered, answers to basic.get (h_basic.c) */

    uint64_t last_used; /* sl_now_ms() of the last use, for x-expires */

    /* implementation detail, see queue.c */
    void *ready_impl;
    /* Ready messages paged out to the store, one tail per priority level (oldest first,
     * after that level's in-memory ready ring): queue depth is bounded by disk, not memory.
     * NULL until something pages; paged_len counts them all (they are in n_ready too). */
    struct qm_pagedq *pg;
    size_t paged_len;
    qm_position *locked; /* head of the LOCKED / PURGE_PENDING list */
    /* Where a store walk (qm_queue_visit_stored) resumes in locked: the next one to visit,
     * moved on by qm_locked_unlink when that one leaves the list. */
    qm_position *visit_held;
    qm_binding *inbound; /* bindings to this queue (dnext chain) */
    qm_consumer *consumers;
    qm_consumer *rr_next;
    qm_consumer *active; /* x-single-active-consumer: the one that gets messages, or NULL */
    qm_qdesc *descs;     /* open queue descriptors (handles) on this queue, see qdesc.c */
    uint8_t dispatch_scheduled;
    uint8_t st_more; /* streams: a filtered consumer stopped at its skip bound (stream.c) */
    /* An expired head is left for the next turn's expiry budget: the tick must come back to
     * this queue at once (qm_queue_expire_heads reports it due now). */
    uint8_t expiry_backlog;
    qm_queue *dispatch_next;
    /* The node's deadline heap (node.c): when this queue next has time-driven work (a head
     * to expire, x-expires to check); tm_slot is 1 + its index there, 0 = not in it. */
    uint64_t tm_due;
    size_t tm_slot;
    uint64_t tm_visit;               /* the tick that last visited it */
    qm_queue *excl_next, *excl_prev; /* among its owner's exclusive queues (node.c) */
    uint64_t route_epoch;            /* qm_route's dedup stamp (internal) */
    uint64_t tx_stamp;               /* qm_tx_commit's last-enqueue-per-queue stamp (internal) */
    /* persistence (src/persist/): no stored position of this queue has its enqueue record in
     * a store segment older than this (0: none stored since its last purge), so a purge
     * record depends on nothing older */
    uint32_t st_floor;
    /* the store's generation (persist_ticket) its definition record went to, 0: on disk since
     * recovery: what a declare-ok of the existing queue waits for, not every write pending */
    uint64_t st_def_gen;
    /* quorum queues (quorum.c): lookup id -> delivery count of the messages returned at
     * least once; NULL while there are none */
    struct sl_u64tab *dcounts;
    /* streams (stream.c): the log, and the node's list of streams (for the group commit) */
    struct st_stream *stream;
    qm_queue *st_next, *st_prev;
    struct sl_map *st_tracking; /* kind + reference -> qm_stream_track* (stream.c), or NULL */
};

typedef struct qm_queue_decl {
    const char *name;
    size_t name_len;
    uint8_t durable, exclusive, auto_delete;
    void *exclusive_owner;
    amqp_bytes arguments;
    uint64_t incarnation; /* recovery only: the stored incarnation; 0 = a fresh one */
} qm_queue_decl;

/* Declare (create or check) a queue. Empty name -> a server name "amq.gen-<22 chars>".
 * Existing queue: checks exclusive ownership (SL_ERR_RESOURCE_LOCKED) and equivalence
 * (durable, exclusive, auto_delete, recognised x- arguments -> SL_ERR_PRECONDITION with
 * "inequivalent arg 'durable' for queue 'Q' in vhost '/': received 'true' but current is
 * 'false'"). *created tells which. Names starting "amq." are refused by the door, not here.
 * A name containing ';' is refused (SL_ERR_ACCESS_REFUSED): subqueues are made by moves. */
sl_err qm_queue_declare(qm_vhost *vh, const qm_queue_decl *d, qm_queue **out, int *created,
                        char *err, size_t errlen);
/* The checks a new queue's type makes, in RabbitMQ 3.10's order (qm_queue_declare runs them
 * for a new, not recovered, queue): a quorum queue cannot be server-named; arguments the
 * type refuses whatever their value ("invalid arg 'x-max-priority' for queue 'Q' in vhost
 * '/' of queue type rabbit_quorum_queue"), before the values are checked; then, once they
 * are, a quorum queue's properties ("invalid property 'auto-delete' | 'exclusive-owner' |
 * 'non-durable' for queue 'Q' in vhost '/'"). All SL_ERR_PRECONDITION. */
sl_err qm_queue_type_check(const qm_queue_decl *d, const char *qname, const char *vhost, char *err,
                           size_t errlen);
sl_err qm_queue_props_check(const qm_queue_decl *d, const qm_queue_args *a, const char *qname,
                            const char *vhost, char *err, size_t errlen);
/* A fresh server name "amq.gen-<22 chars>" not used in vh (for a door that must know the
 * name before it declares, e.g. to check permissions on it). */
void qm_queue_gen_name(qm_vhost *vh, char out[31]);
/* Find a queue or subqueue ("q;sub", "q;journal") by name; NULL when absent. */
qm_queue *qm_queue_find(qm_vhost *vh, const char *name, size_t len);
/* The same, and when absent a top-level queue whose name matches without regard to ASCII
 * case (MSMQ's queue names are case-insensitive): the MSMQ doors' lookup. */
qm_queue *qm_queue_find_ci(qm_vhost *vh, const char *name, size_t len);
/* The same, and a format name resolves to its outgoing queue (node->resolve_remote; created
 * on first use when create is set: publishes and queue.bind) or to the local queue it
 * names. */
qm_queue *qm_queue_find_or_remote(qm_vhost *vh, const char *name, size_t len, int create);
/* 1 when a queue of this name would be an outgoing queue (reserved: "DIRECT=..."). */
int qm_queue_name_is_outgoing(const char *name, size_t len);
/* Get or create subqueue `sub` of q (not of a subqueue). */
qm_queue *qm_queue_subqueue(qm_queue *q, const char *sub, size_t len, int create);

/* MESSAGE_COUNT of MS-MQMR: every position not DELETED. */
static inline uint64_t qm_queue_message_count(const qm_queue *q)
{
    return q->n_ready + q->n_locked + q->n_purge_pending;
}

/* Enqueue a message (refs taken). Applies max-length overflow and TTL. Returns
 * SL_ERR_RESOURCE when x-overflow=reject-publish refuses it (the publisher gets a nack).
 * Schedules dispatch. */
sl_err qm_queue_enqueue(qm_queue *q, qm_message *m);
/* 1 when q would refuse n more messages of bytes in all (x-overflow=reject-publish at its
 * x-max-length / -bytes): a link applies a batch all or nothing, so it asks first. */
int qm_queue_would_refuse(const qm_queue *q, uint64_t n, uint64_t bytes);
/* 1 when q would refuse them even empty: n beyond its x-max-length or bytes beyond its
 * x-max-length-bytes, with x-overflow=reject-publish (MSMQ's NACK_Q_EXCEED_QUOTA). */
int qm_queue_never_holds(const qm_queue *q, uint64_t n, uint64_t bytes);

/* basic.get: take the first available, unexpired message. NULL when none. With no_ack the
 * position comes back DELETED (queue NULL) and the caller must qm_position_ack it after
 * writing it out;
 * otherwise LOCKED for the caller to hold. *remaining = ready count after this one. */
qm_position *qm_queue_get(qm_queue *q, int no_ack, uint64_t *remaining);

/* Purge (MS-MQDMPR Purge Queue): every AVAILABLE position is deleted (reason purged), every
 * LOCKED one becomes PURGE_PENDING. Returns the number deleted now. Positions locked by an
 * open transaction's Enqueue are left alone (they are not in the queue yet). */
uint64_t qm_queue_purge(qm_queue *q);

/* Delete checks, both made before anything changes. */
#define QM_DELETE_IF_UNUSED 1
#define QM_DELETE_IF_EMPTY 2
/* Delete a queue: refuse with SL_ERR_PRECONDITION (err: "queue 'Q' in vhost '/' in use" or
 * "... not empty") per flags; otherwise cancel consumers (ops->cancelled), delete every
 * position (held ones become DELETED with queue = NULL), remove subqueues, bindings and the
 * name. Both checks and the count see the whole queue: its subqueues and journal go with it,
 * so their messages and consumers count. *count = messages deleted (MESSAGE_COUNT of q and
 * its subqueues before). The queue is freed.
 * System queues (is_system) are refused with SL_ERR_ACCESS_REFUSED. */
sl_err qm_queue_delete(qm_queue *q, int flags, uint64_t *count, char *err, size_t errlen);

/* Find a position by lookup id in q (AVAILABLE, LOCKED or PURGE_PENDING); NULL if none. */
qm_position *qm_queue_find_position(qm_queue *q, uint64_t lookup_id);

/* Run dispatch for q now (normally the node does this for scheduled queues). */
void qm_queue_dispatch(qm_queue *q);
/* Mark q for dispatch at the end of the loop turn (consumer got room, message arrived). */
void qm_queue_schedule_dispatch(qm_queue *q);

/* Peek: the index-th AVAILABLE position in delivery order (0 = next to be delivered),
 * unchanged; NULL when index >= n_ready. */
qm_position *qm_queue_peek(qm_queue *q, size_t index);
/* Peek without changing anything, for views (the management API): the ready message at index
 * (in delivery order), or the first one whose lookup id is greater than after_id. One in
 * memory is returned as it is; one paged out to the store is read from it into *view (a
 * position in no queue: msg with refs 1, which the caller unrefs; lookup id, move count,
 * redelivered and deadline filled in) and view is returned. Nothing is paged in, so a deep
 * peek of a queue bigger than memory_budget costs a store read per message and keeps
 * nothing. NULL past the end, or when the store cannot give the message back. */
const qm_position *qm_queue_peek_view(qm_queue *q, size_t index, qm_position *view);
const qm_position *qm_queue_peek_after(qm_queue *q, uint64_t after_id, qm_position *view);

/* How many ready positions (in memory or paged out) have a lookup id <= id: O(log n). */
uint64_t qm_queue_count_ready_upto(qm_queue *q, uint64_t id);
/* The smallest lookup id among the ready positions (0 when none), without paging in. */
uint64_t qm_queue_oldest_ready_id(qm_queue *q);
/* Take the AVAILABLE position with this lookup id as basic.get would take the head: LOCKED,
 * holder unset, for the caller to settle; NULL when there is none (or it is locked). */
qm_position *qm_queue_take(qm_queue *q, uint64_t lookup_id);

/* ------------------------------------------------------------------------------------------
 * Quorum queues (quorum.c): the delivery count of RabbitMQ 3.10
 *
 * The count of a message is the number of times a delivery of it came back unsettled
 * (requeued by reject, nack or recover, or left unacked by a closing channel). It is kept
 * only while above 0, in q->dcounts; a return beyond x-delivery-limit dead-letters the
 * message (reason delivery_limit) instead of requeueing it.
 */
/* The count of the message at lookup_id in q (0 when it has none). */
uint32_t qm_dcount_get(const qm_queue *q, uint64_t lookup_id);
/* Set it (recovery; 0 removes it). */
void qm_dcount_set(qm_queue *q, uint64_t lookup_id, uint32_t count);
/* The count of the position handed out last (by dispatch to a consumer or by a get), for the
 * door writing that delivery: -1 when its queue is not a quorum queue. Valid until the next
 * hand-out (one thread owns qm, and a door writes a delivery as it is handed out). */
int64_t qm_last_delivery_count(void);
/* The properties to deliver m with, when they are not its own: 1 with them in out (the
 * header x-delivery-count = count added, replacing one the publisher set) when count > 0, or
 * count == 0 and always (basic.get); 0 otherwise (count -1: not a quorum queue). */
int qm_delivery_props(const qm_message *m, int64_t count, int always, sl_buf *out);

/* ------------------------------------------------------------------------------------------
 * Move (MS-MQDMPR Move Message, MS-MQRR R_MoveMessage)
 *
 * Move an AVAILABLE position to dest (another queue, a subqueue, or a system queue). It keeps
 * its lookup id and properties; move_count + 1. Without tx it is immediate. With tx the
 * source position becomes LOCKED under tx until commit (then it appears in dest) or abort
 * (it becomes AVAILABLE again). Errors: SL_ERR_MESSAGE_NOT_FOUND, SL_ERR_MESSAGE_LOCKED_UNDER_TX
 * (held by another transaction or a consumer), SL_ERR_TRANSACTION_USAGE (tx into a system
 * queue), SL_ERR_INVALID_PARAMETER (dest == src), SL_ERR_QUEUE_FULL (dest is at its
 * x-max-length or x-max-length-bytes: a move never drops or dead-letters to make room). In
 * dest the message gets dest's TTL rule (move.c). Either door checks who may move what
 * before calling (moves across vhosts, exclusive queues). */
sl_err qm_move(qm_queue *src, uint64_t lookup_id, qm_queue *dest, qm_tx *tx);
/* Move the first n available positions; *moved = how many (it stops with SL_ERR_QUEUE_FULL
 * when dest fills up, *moved saying how many went before). */
sl_err qm_move_first(qm_queue *src, uint64_t n, qm_queue *dest, qm_tx *tx, uint64_t *moved);

/* ------------------------------------------------------------------------------------------
 * Open queue descriptors (MS-MQDMPR OpenQueueDescriptor; Open Queue / Close Queue events)
 *
 * What a queue handle of any door (MS-MQMP's LocalQueueContextHandle, the owner's end of a
 * remote queue proxy) refers to. The door owns it and closes it. Deleting the queue sets
 * queue = NULL (MS-MQDMPR: QueueReference := NULL): every later operation through the
 * descriptor fails with SL_ERR_QUEUE_DELETED, so a queue deleted and declared again under the
 * same name is never reached through an old handle. An open descriptor keeps an empty
 * subqueue from being removed.
 */
#define QM_ACCESS_RECEIVE 0x01u /* MQ_RECEIVE_ACCESS: peek, receive, purge */
#define QM_ACCESS_SEND 0x02u    /* MQ_SEND_ACCESS */
#define QM_ACCESS_MOVE 0x04u    /* MQ_MOVE_ACCESS: a move destination */
#define QM_ACCESS_PEEK 0x20u    /* MQ_PEEK_ACCESS */
#define QM_ACCESS_ADMIN 0x80u   /* MQ_ADMIN_ACCESS: with receive/peek, the outgoing queue */
#define QM_SHARE_DENY_NONE 0
#define QM_SHARE_DENY_RECEIVE 1 /* MQ_DENY_RECEIVE_SHARE: exclusive read */

struct qm_qdesc {
    qm_queue *queue;         /* NULL once the queue is deleted */
    uint64_t incarnation;    /* the queue's when it was opened */
    uint32_t access;         /* QM_ACCESS_* */
    uint8_t share;           /* QM_SHARE_* */
    qm_qdesc *qprev, *qnext; /* in queue->descs */
};

/* Open Queue on q: access one of receive, send, move, peek (an outgoing queue: receive|admin
 * or peek|admin only); share deny-none or deny-receive.
 * Errors (err says why): SL_ERR_UNSUPPORTED_ACCESS_MODE (unknown access or share, send with
 * deny-receive), SL_ERR_UNSUPPORTED_FORMATNAME_OPERATION (send to a subqueue, journal or
 * system queue; move into a journal), SL_ERR_RESOURCE_LOCKED (MQ_ERROR_SHARING_VIOLATION:
 * the sharing table of MS-MQDMPR Open Queue against the descriptors already open on q). */
sl_err qm_queue_open(qm_queue *q, uint32_t access, int share, qm_qdesc **out, char *err,
                     size_t errlen);
/* Close Queue: unlink and free d (its queue may be gone). */
void qm_qdesc_close(qm_qdesc *d);
/* d's queue, NULL when it was deleted since d was opened. */
qm_queue *qm_qdesc_queue(const qm_qdesc *d);
/* Purge Queue through d (rpc_ACPurgeQueue): SL_ERR_QUEUE_DELETED when the queue is gone,
 * SL_ERR_ACCESS_REFUSED unless d was opened to receive (or receive|admin); else qm_queue_purge,
 * *deleted = its count. Nothing changes on failure. */
sl_err qm_qdesc_purge(qm_qdesc *d, uint64_t *deleted);

/* ------------------------------------------------------------------------------------------
 * Transactions (MS-MQDMPR 3.1.1.13-14): Enqueue, Dequeue and Move.
 */
struct qm_tx {
    uint64_t id;
    qm_node *node;
    void *ops_impl; /* see tx.c */
    size_t n_ops;
};

qm_tx *qm_tx_begin(qm_node *node);
/* Transactional Enqueue: a LOCKED position (in_tx_enqueue) is created in q now, counted in
 * MESSAGE_COUNT, not deliverable; commit makes it AVAILABLE, abort deletes it. In an outgoing
 * queue the position takes a fresh lookup id at commit (lookup order = the order messages
 * became sendable: the link's sequence numbers) and every one but the last of the
 * transaction in that queue gets xact_cont. */
sl_err qm_tx_enqueue(qm_tx *tx, qm_queue *q, qm_message *m);
/* Transactional Dequeue of a held (LOCKED) position: settle with `how` at commit
 * (0 = ack, 1 = requeue, 2 = reject); abort leaves it LOCKED and held as before.
 * A PURGE_PENDING position is accepted too. Errors: SL_ERR_MESSAGE_LOCKED_UNDER_TX when
 * pos is already in a transaction, SL_ERR_INVALID_PARAMETER when it is not held. A holder
 * that settles pos directly (qm_position_*) takes it back from the transaction. */
#define QM_SETTLE_ACK 0
#define QM_SETTLE_REQUEUE 1
#define QM_SETTLE_REJECT 2
sl_err qm_tx_dequeue(qm_tx *tx, qm_position *pos, int how);
/* Apply every operation in order, then free tx. Dequeued positions are settled by it, so
 * their holders must drop them (as after qm_position_ack). */
sl_err qm_tx_commit(qm_tx *tx);
/* The same; *moves_voided (may be NULL) = Move operations that could not be applied and left
 * their message Available in its source: the target was deleted meanwhile, or it has no room
 * left (x-max-length / -bytes) by now. */
sl_err qm_tx_commit_counted(qm_tx *tx, uint64_t *moves_voided);
/* Undo every operation, then free tx. */
void qm_tx_abort(qm_tx *tx);
/* Find an open transaction by id (management API). */
qm_tx *qm_tx_find(qm_node *node, uint64_t id);

/* ------------------------------------------------------------------------------------------
 * Exchanges, bindings, routing
 */
typedef enum qm_exchange_type {
    QM_EX_DIRECT = 0,
    QM_EX_FANOUT,
    QM_EX_TOPIC,
    QM_EX_HEADERS,
} qm_exchange_type;

struct qm_exchange {
    char *name;
    qm_vhost *vhost;
    sl_onode by_name; /* in vhost->exchange_order */
    int type;         /* qm_exchange_type */
    uint8_t durable, auto_delete, internal;
    uint8_t *args; /* arguments table content (owned) */
    size_t args_len;
    char *alternate;      /* alternate-exchange argument, or NULL */
    qm_binding *bindings; /* outgoing bindings (this exchange is the source), newest first */
    size_t n_bindings;
    sl_map *by_key;      /* binding key -> first outgoing binding with it (knext chain) */
    qm_binding *inbound; /* bindings where this exchange is the destination (dnext chain) */
    qm_tnode *trie;      /* topic exchanges: the patterns of the outgoing bindings */
    size_t n_inbound;
    uint64_t route_epoch; /* qm_route's visited stamp (internal) */
    uint8_t deleting;     /* being deleted: guards auto-delete recursion (internal) */
    uint64_t st_def_gen;  /* the store's generation of its definition record (see qm_queue) */
};

struct qm_binding {
    qm_exchange *source;
    qm_queue *dest_queue; /* one of these two */
    qm_exchange *dest_exchange;
    char *key;
    size_t key_len;
    uint8_t *args; /* arguments table content (owned) */
    size_t args_len;
    qm_binding *next, *prev;   /* in source->bindings */
    qm_binding *knext, *kprev; /* among the source's bindings with the same key */
    qm_binding *dnext, *dprev; /* in the destination's inbound list */
    qm_tnode *tnode;           /* topic: the trie node of the pattern, bindings chained by */
    qm_binding *tnext, *tprev; /* tnext/tprev there */
};

/* The outgoing bindings of x with this key (chained by knext), or NULL. */
qm_binding *qm_bindings_with_key(const qm_exchange *x, amqp_bytes key);

/* "direct" -> QM_EX_DIRECT...; -1 when unknown. */
int qm_exchange_type_parse(const char *s, size_t len);
const char *qm_exchange_type_name(int type);

typedef struct qm_exchange_decl {
    const char *name;
    size_t name_len;
    int type;
    uint8_t durable, auto_delete, internal;
    amqp_bytes arguments;
} qm_exchange_decl;

/* Create or check equivalence (SL_ERR_PRECONDITION "inequivalent arg 'type' for exchange
 * 'X' in vhost '/': received 'fanout' but current is 'direct'"). */
sl_err qm_exchange_declare(qm_vhost *vh, const qm_exchange_decl *d, qm_exchange **out, char *err,
                           size_t errlen);
/* Moves whenever an exchange is freed: a door may keep a qm_exchange pointer between calls
 * (the publish path does, per channel) as long as this has not moved since it looked. */
extern uint64_t qm_exchange_epoch;
qm_exchange *qm_exchange_find(qm_vhost *vh, const char *name, size_t len);
/* if_unused: SL_ERR_PRECONDITION "exchange 'X' in vhost '/' in use" while it has bindings
 * (either direction). Removes its bindings both ways. */
sl_err qm_exchange_delete(qm_exchange *x, int if_unused, char *err, size_t errlen);

/* Bind. Idempotent (an identical binding is not added twice). Headers bindings check x-match
 * (SL_ERR_PRECONDITION "Invalid x-match field value ..."). */
sl_err qm_bind_queue(qm_exchange *src, qm_queue *q, amqp_bytes key, amqp_bytes args, char *err,
                     size_t errlen);
sl_err qm_bind_exchange(qm_exchange *src, qm_exchange *dest, amqp_bytes key, amqp_bytes args,
                        char *err, size_t errlen);
/* Unbind; no error when the binding does not exist. May auto-delete src. */
void qm_unbind_queue(qm_exchange *src, qm_queue *q, amqp_bytes key, amqp_bytes args);
void qm_unbind_exchange(qm_exchange *src, qm_exchange *dest, amqp_bytes key, amqp_bytes args);

/* Publish m through x: route it with its routing key and the CC keys of its headers, and
 * enqueue it on every queue it reaches (transactional Enqueues when tx is given). *routed =
 * how many queues it reached. SL_ERR_RESOURCE when a queue refused it (x-overflow=
 * reject-publish: a publisher confirm becomes a nack). The caller keeps its reference on m.
 * Every door publishes through here. headers is m's headers table content as stored. */
sl_err qm_publish(qm_exchange *x, qm_message *m, amqp_bytes headers, qm_tx *tx, size_t *routed);
/* The same, routing with the BCC keys too: bcc is the content of the BCC array the door took
 * out of m's headers (qm_strip_bcc) so that no consumer sees it. */
sl_err qm_publish_bcc(qm_exchange *x, qm_message *m, amqp_bytes headers, amqp_bytes bcc, qm_tx *tx,
                      size_t *routed);
/* Sender-selected distribution, for the doors: SL_OK when the CC and BCC headers are absent
 * or arrays, else SL_ERR_PRECONDITION with RabbitMQ's reason in why
 * ({unacceptable_type_in_header,"CC",longstr}: the publish is refused with 406). */
sl_err qm_cc_bcc_check(amqp_bytes headers, char *why, size_t whylen);
/* When headers has a BCC entry: write the table content without it to out, append the BCC
 * array's content to bcc, and return 1; 0 (nothing written) otherwise. */
int qm_strip_bcc(amqp_bytes headers, sl_buf *out, sl_buf *bcc);

/* Topic matching: '.'-separated words, '*' one word, '#' zero or more words. */
int qm_topic_match(const char *pattern, size_t plen, const char *key, size_t klen);
/* Headers matching of a binding's arguments against message headers (table content). */
int qm_headers_match(amqp_bytes binding_args, amqp_bytes headers);

/* Route a message published to x with routing key rk (and headers for headers exchanges):
 * collects each destination queue at most once, following exchange-to-exchange bindings
 * (loops allowed) and alternate exchanges. Returns the number of queues written to out (up
 * to cap; *total gets the full count so the caller can retry with a larger array). */
size_t qm_route(qm_exchange *x, amqp_bytes rk, amqp_bytes headers, qm_queue **out, size_t cap,
                size_t *total);
/* The same with several routing keys at once (a message's key and its CC / BCC keys): each
 * exchange matches all of them before its alternate exchange is considered. */
size_t qm_route_keys(qm_exchange *x, const amqp_bytes *keys, size_t nkeys, amqp_bytes headers,
                     qm_queue **out, size_t cap, size_t *total);

/* ------------------------------------------------------------------------------------------
 * Virtual hosts and the node
 */
struct qm_vhost {
    char *name;
    qm_node *node;
    sl_map *queues;    /* name -> qm_queue* (top-level queues only) */
    sl_map *exchanges; /* name -> qm_exchange* */
    /* The same, in name order (lists and pages walk these: no sort per request) */
    sl_oset queue_order;
    sl_oset exchange_order;
    uint64_t stat_confirm; /* publisher confirms sent to this vhost's channels (channel.c) */
};

struct qm_node {
    char *name;
    uint8_t online; /* MS-MQDMPR ConnectionActive: CONNECT / DISCONNECT */
    sl_map *vhosts; /* name -> qm_vhost* */
    uint64_t next_lookup_id;
    uint64_t next_incarnation;
    uint64_t next_tx_id;
    void *txs_impl;
    qm_queue *dispatch_head; /* queues scheduled for dispatch this turn */
    void *timers_impl;       /* the deadline heap of queues with time-driven work, node.c */
    sl_map *exclusives;      /* owner (pointer bytes) -> its first exclusive queue, node.c */
    /* Door hooks. queue_deleted lets doors drop references to a queue that is going away
     * (called before the queue is freed); may be NULL. */
    void (*on_queue_deleted)(qm_queue *q, void *ctx);
    void *hook_ctx;
    /* Bumped by each queue deletion: a door that holds queues by name (the stream door's
     * publishers) looks them up again when it moved. */
    uint64_t queues_deleted;
    /* A message left its queue for good: taken by a consumer (QM_DEL_ACKED: basic.ack, a
     * no-ack delivery or get), refused by one (QM_DEL_REJECTED: basic.reject / basic.nack
     * without requeue, before its dead-letter copy) or expired (QM_DEL_EXPIRED). Called inside the
     * model, before pos is freed, like a dead-letter or journal copy: it may enqueue into
     * other queues (the MSMQ door sends administration acknowledgements from it), never into
     * pos' own. Also QM_DEL_PURGED and QM_DEL_QUEUE_DELETED for the ready messages of a queue
     * with removal_watch (before its purge or delete record, in one record group); during a
     * deletion the hook must not create queues (a vhost's deletion may be iterating them).
     * A hook that enqueues begins a record group first (the tx_group hook, begin = 1) and
     * returns 1: the model ends that group after the removal's own record (R_DEQ), so the two
     * exist on disk together or not at all (a kill -9 never leaves both). Returns 0 when it
     * began none. May be NULL. */
    int (*on_removed)(qm_position *pos, qm_delete_reason reason, void *ctx);
    void *removed_ctx;
    /* Remote queues: the default exchange asks this for a routing key that no local queue
     * has and that looks like a format name (DIRECT=...); it returns the outgoing queue for
     * it (created on first use) or a local queue the name points at, or NULL. Doors resolve
     * queue.bind destinations through it too. NULL = no node-to-node transfer. */
    qm_queue *(*resolve_remote)(qm_vhost *vh, const char *name, size_t len, int create, void *ctx);
    void *remote_ctx;
    /* Tests: when nonzero, qm uses this instead of sl_now_ms() for TTL, x-expires and
     * last_used (qm_node_tick's `now` argument is used as given). */
    uint64_t test_now;
    uint64_t consumers_attached; /* attach counter (qm_consumer.attached) */
    /* The door's cached clock (the event loop's time of this turn), read instead of a
     * clock_gettime per message; NULL = ask the system. */
    const uint64_t *clock;
    struct qm_grave *graves, *graves_tail; /* purged/deleted ready messages to free */
    /* Bounded work per loop turn (qm_node_new_turn): messages that may still be expired. */
    size_t expire_left;
    uint8_t expire_bounded;
    uint64_t route_epoch; /* internal: bumped by each qm_route */
    /* internal: sentinel of the circular list of DELETED positions still referenced by a
     * holder (their queue was deleted, or no_ack hand-outs), so qm_node_free can free them */
    qm_position orphans;
    qm_lock orphans_lk;
    /* Streams (stream.c): where their logs live (DIR/<incarnation>; NULL: no stream can be
     * declared: a node without a data directory), and every stream queue of the node. */
    char *stream_dir;
    qm_queue *streams;
    /* Why a new stream queue is refused (NULL: it is not): a cluster does not replicate
     * streams yet, and a stream only the leader holds would lose confirmed messages with it. */
    const char *streams_refused;
    /* Tracked references changed since the store last wrote them (stream.c), newest first. */
    struct qm_stream_track *track_dirty;
};

qm_node *qm_node_new(const char *name);
void qm_node_free(qm_node *n); /* frees everything, including held positions */
/* Create a vhost with the predeclared exchanges "", amq.direct, amq.fanout, amq.topic,
 * amq.headers, amq.match (headers), amq.rabbitmq.trace (topic, internal). */
qm_vhost *qm_vhost_create(qm_node *n, const char *name);
qm_vhost *qm_vhost_find(qm_node *n, const char *name, size_t len);
/* Delete a vhost with everything in it: every queue (consumers cancelled, messages deleted,
 * their storage released through the persistence hooks, as a queue deletion does), every
 * exchange and binding. vh is freed. The door closes the vhost's connections first. */
void qm_vhost_delete(qm_node *n, qm_vhost *vh);
/* A new event-loop turn: resets the budget of bounded work (expiry: QM_EXPIRE_PER_TURN
 * messages a turn, the rest left for the next turns, the queue reported due at once). The door
 * calls it once per turn; a node whose door never does has no bound (unit tests). */
#define QM_EXPIRE_PER_TURN 8192
void qm_node_new_turn(qm_node *n);
/* Queues of vh that count against a max-queues limit (not the system queues). */
uint64_t qm_vhost_queue_count(const qm_vhost *vh);
/* Run dispatch for every scheduled queue. Called once per event-loop turn. */
void qm_node_run_dispatch(qm_node *n);
/* Expire messages at queue heads (TTL, dead-lettering them) and delete queues unused past
 * x-expires, visiting only the queues whose deadline has come (a heap: O(due queues x log
 * queues), not O(queues)). Returns the next deadline in sl_now_ms() terms, or 0 when none. */
uint64_t qm_node_tick(qm_node *n, uint64_t now);
/* Free up to max purged or deleted messages (0 = all); returns 1 while more are left. The
 * door calls it once per loop turn. */
int qm_node_reap(qm_node *n, size_t max);
/* Delete every exclusive queue owned by owner (connection closed). */
void qm_node_drop_exclusive(qm_node *n, void *owner);

/* ------------------------------------------------------------------------------------------
 * Persistence hooks
 *
 * The model tells the durable store (src/persist/) about every change it must remember; the
 * store decides what is durable (durable queues and exchanges, persistent messages) and
 * writes records. Hooks run synchronously inside the model's operations and must not call
 * back into the model. Process-wide: one node per process. NULL = nothing is persisted
 * (unit tests, transient-only use).
 */
struct qm_paged;
typedef struct qm_persist_hooks {
    void (*queue_created)(void *ctx, qm_queue *q); /* also subqueues */
    void (*queue_destroyed)(void *ctx, qm_queue *q);
    void (*exchange_created)(void *ctx, qm_exchange *x);
    void (*exchange_destroyed)(void *ctx, qm_exchange *x);
    void (*bound)(void *ctx, const qm_binding *b);
    void (*unbound)(void *ctx, const qm_binding *b);
    /* pos was accepted into pos->queue (publish, dead-letter, journal, tx commit) */
    void (*enqueued)(void *ctx, qm_position *pos);
    /* pos is being handed out (dispatch, get); no_ack: it is deleted right after */
    void (*delivered)(void *ctx, qm_position *pos, int no_ack);
    /* pos (st_logged) is being freed; logged = 1 when this removal needs its own record
     * (0 inside purge and queue deletion, whose single record covers every position) */
    void (*released)(void *ctx, qm_position *pos, int logged);
    void (*purged)(void *ctx, qm_queue *q);
    /* pos moved from src into pos->queue (move count already increased, expires_at set by
     * the target's rule; old_expires_at is the deadline it had in src) */
    void (*moved)(void *ctx, qm_position *pos, qm_queue *src, uint64_t old_expires_at);
    /* brackets the operations a transaction commit applies (atomic on disk) */
    void (*tx_group)(void *ctx, int begin);
    /* Paging. page_out makes sure pos' message and enqueue are in the store, fills *out and
     * hands pos' segment references over to it (0), or refuses (-1: it stays in memory).
     * page_in rebuilds the position (not inserted anywhere) from the store; NULL when it
     * cannot be read (the entry is then dropped). paged_dropped lets go of an entry that
     * leaves the queue without coming back into memory (purge, delete: logged = 0). */
    int (*page_out)(void *ctx, qm_position *pos, struct qm_paged *out);
    qm_position *(*page_in)(void *ctx, qm_queue *q, const struct qm_paged *e);
    void (*paged_dropped)(void *ctx, qm_queue *q, const struct qm_paged *e, int logged);
    /* A copy of a paged entry's message read from the store (refs 1, in no queue), for a
     * peek that must not bring it back into memory; NULL when it cannot be read. */
    qm_message *(*read_paged)(void *ctx, qm_queue *q, const struct qm_paged *e);
    /* Streams: an entry was appended to q->stream (it must be durable before the confirm);
     * stream_closing: q->stream is about to be closed (deleted: its files go too): the store
     * takes it over when a batch of it is in flight, else closes it. NULL hooks: the model
     * commits each append inline and closes the stream itself. */
    void (*stream_appended)(void *ctx, qm_queue *q, size_t bytes);
    void (*stream_closing)(void *ctx, struct st_stream *s, int deleted);
    /* A tracked reference changed (it is on the node's track_dirty list: the store writes it
     * with the generation that syncs next), or goes with its deleted stream. */
    void (*stream_tracked)(void *ctx, struct qm_stream_track *t);
    void (*stream_untracked)(void *ctx, struct qm_stream_track *t);
} qm_persist_hooks;

/* A ready message that lives only in the store, as the hooks see it (its tail keeps it in a
 * 24-byte qm_pslot instead of a position, a message and its body in memory). */
typedef struct qm_paged {
    uint64_t lookup_id;
    uint32_t msg_off; /* message record: offset (a segment is at most 1 GiB), segment, payload
                         length */
    uint32_t msg_seg;
    uint32_t msg_len;
    uint32_t enq_seg;  /* enqueue record's segment (logged entries) */
    uint32_t body_len; /* for the queue's byte counts */
    uint16_t move_count;
    uint8_t redelivered : 1;
    uint8_t logged : 1;    /* a durable enqueue record exists: removing it needs a record */
    uint8_t xact_cont : 1; /* qm_position.xact_cont */
    uint8_t xact : 1;      /* qm_position.xact */
    uint8_t watch : 1;     /* qm_message.watch */
    uint8_t priority;      /* the message's priority property: its level in a priority queue */
} qm_paged;                /* a TTL deadline, when an entry has one, is in its qm_pagedq's exp */

/* How a paged entry is kept in its tail: 24 bytes. The common entry (its enqueue record in
 * its message's segment, never moved, not redelivered, no transaction marks) is whole in
 * it; any other keeps the rest (enqueue segment, move count, flags) in its tail's side table
 * `more`, keyed by lookup id, and says so with QM_PSLOT_MORE. A priority is not kept: the
 * tail an entry is in is its level. qm_paged is what the hooks see. */
typedef struct qm_pslot {
    uint64_t lookup_id;
    uint32_t off; /* the message record's offset (< 1 GiB: segment_size is at most 1G) and
                     QM_PSLOT_LOGGED, QM_PSLOT_MORE in the top two bits */
    uint32_t msg_seg;
    uint32_t msg_len;
    uint32_t body_len;
} qm_pslot;
#define QM_PSLOT_OFF 0x3fffffffu
#define QM_PSLOT_LOGGED 0x40000000u
#define QM_PSLOT_MORE 0x80000000u

struct sl_u64tab;
/* The paged tail of one priority level: entries v[head .. head+len) in lookup-id order, and
 * their TTL deadlines (qm_node_now) in exp with the same indexes (NULL until one has one);
 * more (NULL until an entry needs it) holds what the uncommon entries do not fit in v. */
typedef struct qm_pagedq {
    qm_pslot *v;
    uint64_t *exp;
    struct sl_u64tab *more;
    size_t head, len, cap;
} qm_pagedq;

/* Bytes the messages held in memory take (allocations of messages and of their positions:
 * bodies, properties, names and bookkeeping), and the budget above which ready messages are
 * paged out to the store (0 = never). */
uint64_t qm_memory_bytes(void);
/* The memory budget set (0 = none). */
uint64_t qm_memory_budget(void);
/* The node's monotonic clock in ms (what positions' expires_at deadlines are on). */
uint64_t qm_node_now(const qm_node *n);
void qm_set_memory_budget(uint64_t bytes);
/* 1 when messages in memory exceed the budget: new ready messages are paged out. */
int qm_memory_over_budget(void);
/* Recovery: append a stored ready message to q's paged tail (in lookup-id order). */
void qm_queue_restore_paged(qm_queue *q, const qm_paged *e, uint64_t expires_at);
/* Recovery: the same for n entries at once, in lookup-id order, newer than anything in q's
 * rings: the array (from malloc, room for at least n) is packed in place into q's paged
 * array (24-byte slots) and shrunk to n of them; exp (NULL, or n deadlines, from malloc)
 * becomes its deadlines; q takes both over (a priority queue copies them into its levels'
 * tails and frees them). */
void qm_queue_adopt_paged(qm_queue *q, qm_paged *v, uint64_t *exp, size_t n);

void qm_set_persist(const qm_persist_hooks *hooks, void *ctx);
/* Recovery: rebuild a stored position in q as AVAILABLE at its lookup-id place, without
 * telling the hooks (the record already exists). Takes a ref on m. */
qm_position *qm_queue_restore(qm_queue *q, qm_message *m, uint64_t lookup_id, uint32_t move_count,
                              int redelivered);
/* The position qm_queue_restore would insert, not inserted (paging in). */
qm_position *qm_queue_restore_position(qm_queue *q, qm_message *m, uint64_t lookup_id,
                                       uint32_t move_count, int redelivered);
/* Recovery: suppress the hooks while the stored state is rebuilt. */
void qm_persist_suspend(int on);

/* The store's compaction (persist/tidy.c) walks what may hold store records: a queue's ready
 * positions in memory, its paged entries and its held (LOCKED, PURGE_PENDING) positions. The
 * callbacks may change the store fields (st_seg, the message's store location, a paged
 * entry's segments and offsets) but nothing else (a paged entry comes with its deadline); a
 * non-zero return stops the walk there. *cursor (0 = from the start) says where the walk resumes,
 * in O(1) whatever the depth: it survives changes to q between calls only approximately (a ready
 * or paged position may be skipped or visited twice when the head of its ring or tail moved;
 * a held one is visited once unless it left or came in since the walk began), which is all the
 * compaction needs. One walk per queue at a time. Returns 1 once the whole queue has been
 * visited. */
typedef struct qm_store_visitor {
    int (*position)(void *ctx, qm_position *pos);
    int (*paged)(void *ctx, qm_queue *q, qm_paged *e, uint64_t expires_at);
} qm_store_visitor;
int qm_queue_visit_stored(qm_queue *q, uint64_t *cursor, const qm_store_visitor *v, void *ctx);

/* ------------------------------------------------------------------------------------------
 * Streams (stream.c, issue 47): a stream queue keeps every message in an append-only log
 * (store/stream.h) that consumers read, each from its own offset; reading removes nothing,
 * retention trims whole segments. Publishing appends (qm_queue_accept does it for a stream
 * queue); dispatch reads from the log for each consumer able to take more.
 */
typedef enum qm_stream_from {
    QM_SO_NEXT = 0, /* only what comes after the consumer attached */
    QM_SO_FIRST,
    QM_SO_LAST, /* the newest chunk (the entries of the newest group commit) */
    QM_SO_OFFSET,
    QM_SO_TIMESTAMP, /* the first entry at or after ts_ms */
} qm_stream_from;
typedef struct qm_stream_spec {
    qm_stream_from kind;
    uint64_t offset;
    int64_t ts_ms;
} qm_stream_spec;
/* Where a consumer with this spec starts. */
uint64_t qm_stream_start(qm_queue *q, const qm_stream_spec *spec);
/* Append m (exchange, routing key, properties, body) to q's log. */
sl_err qm_stream_append(qm_queue *q, const qm_message *m);
/* Append an AMQP 1.0 message as the stream protocol door received it (stored as it came,
 * with exchange "" and the stream's name as routing key); *offset gets its offset. */
sl_err qm_stream_append_amqp10(qm_queue *q, const uint8_t *msg, size_t len, uint64_t *offset);
/* The same with a filter value (Publish v2; filter NULL: none), kept in the entry (its first
 * 255 octets) for readers that filter. */
sl_err qm_stream_append_filtered(qm_queue *q, const uint8_t *msg, size_t len, const uint8_t *filter,
                                 size_t filter_len, uint64_t *offset);
/* A stored entry, as the door delivers it (pointers into the payload). 0, or -1 when the
 * payload is not one qm_stream_append or qm_stream_append_amqp10 wrote (its first byte, the
 * format, is neither). amqp10: the body is an AMQP 1.0 message (from the stream protocol's
 * door) and there are no 0-9-1 properties. */
#define QM_STREAM_FMT_091 0
#define QM_STREAM_FMT_AMQP10 1
#define QM_STREAM_FMT_AMQP10F 2 /* AMQP 1.0 with a filter value */
#define QM_STREAM_FMT_091F 3    /* AMQP 0-9-1 with a filter value (x-stream-filter-value) */
typedef struct qm_stream_msg {
    amqp_bytes exchange, routing_key;
    const uint8_t *props, *body;
    size_t props_len, body_len;
    int amqp10;
    const uint8_t *filter; /* the filter value it was published with, or NULL */
    size_t filter_len;
} qm_stream_msg;
int qm_stream_decode(const uint8_t *p, size_t len, qm_stream_msg *out);
/* Stream filtering (RabbitMQ 3.13): the one rule both doors apply, here below them. An entry
 * keeps the filter value it was published with (Publish v2's, or AMQP 0-9-1's header
 * x-stream-filter-value); a consumer with a filter gets an entry only when its value is one of
 * the filter's values, or it has none and match_unfiltered is set. Exact per entry: RabbitMQ
 * tests a Bloom filter per chunk and lets false positives through for the client to drop;
 * Sluice never delivers one. A door translates its own arguments into a qm_stream_filter and
 * hangs it on its consumer (qm_consumer.st_filter); dispatch skips what it does not want
 * without taking credit. */
#define QM_STREAM_FILTERS_MAX 32
typedef struct qm_stream_filter {
    char *values[QM_STREAM_FILTERS_MAX]; /* owned, each its first 255 octets (as entries keep) */
    uint8_t lens[QM_STREAM_FILTERS_MAX];
    uint32_t n;
    uint8_t match_unfiltered;
} qm_stream_filter;
qm_stream_filter *qm_stream_filter_new(void);
/* Add a value; -1 when the filter already has QM_STREAM_FILTERS_MAX. */
int qm_stream_filter_add(qm_stream_filter *f, const uint8_t *v, size_t len);
void qm_stream_filter_free(qm_stream_filter *f);
/* Does an entry published with this filter value (NULL: none) pass f? */
int qm_stream_filter_wants(const qm_stream_filter *f, const uint8_t *value, size_t len);
/* The same for a stored entry (its payload); what does not decode passes (a door decides). */
int qm_stream_filter_entry(const qm_stream_filter *f, const uint8_t *p, size_t len);
/* Single active consumer on streams, as RabbitMQ 3.11+ does it (rabbit_stream_sac_coordinator):
 * a group is the consumers of one stream with the same sac_name (its partition index is its
 * oldest member's, RabbitMQ's: the group's creator's). With sac_partition -1 the
 * first member is active and the rest wait; when the active one goes, the oldest waiting one
 * becomes active. With a partition index (a super stream's partition) the active member is
 * the (index mod members)th in attach order: a member joining or leaving can move the
 * partition to another member, so the active one is told to step down first
 * (sac_update(c, 0)), and the new one is activated when it answered
 * (qm_stream_sac_stepped_down) or went. */
enum qm_sac_state {
    QM_SAC_NONE = 0, /* not in a group (or not yet registered) */
    QM_SAC_WAITING,  /* in the group, not active */
    QM_SAC_ACTIVE,   /* the group's active consumer */
    QM_SAC_STEPPING, /* told to step down: gets nothing, its answer awaited */
};
/* c, attached to its stream with sac_name and sac_partition set, joins its group; its
 * sac_update (and maybe the active member's) is called. */
void qm_stream_sac_join(qm_consumer *c);
/* c (told to step down) answered: the partition's new active member is activated. */
void qm_stream_sac_stepped_down(qm_consumer *c);
/* c leaves its group (qm_consumer_detach calls it, after c left q's list). */
void qm_stream_sac_leave(qm_queue *q, qm_consumer *c);
/* The index of stream q among the partitions of super stream `super` (an exchange of q's
 * vhost), as RabbitMQ's partition_index finds it: its binding's x-stream-partition-order (an
 * integer, or a string of digits), else the digits after the name's last '-', else -1. */
int32_t qm_stream_partition_index(qm_queue *q, const char *super, size_t len);
/* Dispatch for a stream queue (qm_queue_dispatch calls it). */
void qm_stream_dispatch(qm_queue *q);
/* The stream's figures for the doors' listings. */
typedef struct qm_stream_info {
    uint64_t first, last, end; /* offsets: oldest kept, newest durable (end - 1), one past */
    uint64_t segments, bytes, entries;
} qm_stream_info;
int qm_stream_info_get(const qm_queue *q, qm_stream_info *out);
/* Server-side tracking by reference (RabbitMQ's stream protocol: StoreOffset / QueryOffset,
 * and the deduplication of named publishers): per stream queue and reference (1 to
 * QM_TRACK_REF_MAX octets), a consumer's stored offset or a publisher's last publishing id.
 * Durable: a change puts the entry on the node's dirty list and the store writes a record of
 * it with the next generation that syncs, the one that also makes the stream entries appended
 * so far durable. A publisher's entry keeps cover, the stream's next offset when it was set:
 * recovery takes it only when the stream holds the entries below cover, so a sequence never
 * outlives the messages it stands for (a lost write costs a duplicate, never a message). The
 * entries go with their queue. */
enum { QM_TRACK_OFFSET = 'o', QM_TRACK_PUBLISHER = 'p' };
#define QM_TRACK_REF_MAX 255
typedef struct qm_stream_track {
    qm_queue *queue;
    uint64_t value;
    uint64_t cover;    /* publishers: st_stream_next of the stream when set; offsets: 0 */
    uint32_t st_seg;   /* the store's: the segment of its newest record */
    uint8_t st_logged; /* the store holds a record of it */
    uint8_t dirty;     /* on the node's track_dirty list */
    uint8_t kind;
    uint8_t ref_len;
    struct qm_stream_track *dirty_next;
    uint8_t ref[QM_TRACK_REF_MAX];
} qm_stream_track;
/* The entry of (kind, ref) on stream q, or NULL. */
qm_stream_track *qm_stream_track_get(const qm_queue *q, int kind, const uint8_t *ref, size_t len);
/* Set it to value (made when missing). SL_ERR_PRECONDITION: not a stream, or a reference that
 * is empty or longer than QM_TRACK_REF_MAX. */
sl_err qm_stream_track_set(qm_queue *q, int kind, const uint8_t *ref, size_t len, uint64_t value);
/* Recovery: the entry as its record says, not dirty (NULL when ref is no valid reference). */
qm_stream_track *qm_stream_track_restore(qm_queue *q, int kind, const uint8_t *ref, size_t len,
                                         uint64_t value, uint64_t cover);
/* The store takes the dirty list (each entry's dirty flag is still set: an entry written
 * meanwhile by other means has it cleared and is skipped). */
qm_stream_track *qm_stream_track_take_dirty(qm_node *n);
/* The entries of stream q, one per call from *it = 0: 1, or 0 at the end. */
int qm_stream_track_next(const qm_queue *q, size_t *it, qm_stream_track **t);

/* A queue's type as RabbitMQ names it: "classic", "quorum" or "stream". */
const char *qm_queue_type_name(const qm_queue *q);
/* The figures a queue's type adds to a listing, by RabbitMQ's names where it has them: a
 * quorum queue's delivery_limit (when set); a stream's messages and messages_ready (the entries
 * kept), segments, stream_bytes, first_offset and committed_offset (when it holds any). Fills
 * out[0 .. n), returns n (at most QM_FIGURES_MAX). */
#define QM_FIGURES_MAX 8
typedef struct qm_figure {
    const char *name;
    int64_t value;
} qm_figure;
size_t qm_queue_type_figures(const qm_queue *q, qm_figure out[QM_FIGURES_MAX]);
/* After a group commit made more of each stream durable: retention, and dispatch. */
void qm_streams_committed(qm_node *n);

#endif
