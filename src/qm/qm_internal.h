/* qm_internal.h - what the files of src/qm/ share and nobody else may use.
 *
 * Ready positions live in per-priority-level rings (qm_ring) kept sorted by lookup id; the
 * LOCKED / PURGE_PENDING positions of a queue are on the doubly linked, NULL-terminated list
 * q->locked; DELETED positions that a holder still references (queue deleted, or no_ack
 * hand-outs) are on the node's circular orphan list (node->orphans is its sentinel), so that
 * freeing one never needs its queue and qm_node_free can find them all.
 */
#ifndef SL_QM_INTERNAL_H
#define SL_QM_INTERNAL_H

#include <stdio.h>

#include "core/clock.h"
#include "core/mem.h"
#include "qm/qm.h"

/* ---- ready rings (queue.c) ---- */
typedef struct qm_ring {
    qm_position **buf;
    size_t cap; /* power of two, or 0 */
    size_t head, len;
} qm_ring;

typedef struct qm_ready {
    int nlevels; /* max_priority + 1, or 1 */
    qm_ring levels[];
} qm_ready;

static inline qm_ready *qm_ready_of(const qm_queue *q)
{
    return (qm_ready *)q->ready_impl;
}
static inline qm_position *qm_ring_at(const qm_ring *r, size_t i)
{
    return r->buf[(r->head + i) & (r->cap - 1)];
}

/* ---- persistence hooks (node.c) ---- */
extern const qm_persist_hooks *qm_persist;
extern void *qm_persist_ctx;
extern int qm_persist_bulk; /* inside purge / queue deletion: removals need no records */
#define QM_PERSIST(fn, ...)                                                                        \
    do {                                                                                           \
        if (qm_persist && qm_persist->fn)                                                          \
            qm_persist->fn(qm_persist_ctx, __VA_ARGS__);                                           \
    } while (0)

/* ---- streams (stream.c) ---- */
struct st_stream;
/* Open (recover) the log of the stream queue of this incarnation, as its arguments say. */
sl_err qm_stream_open(qm_node *n, uint64_t incarnation, const qm_queue_args *a,
                      struct st_stream **out, char *err, size_t errlen);
void qm_stream_link(qm_queue *q);
/* Unlink q from the node's streams and close its log (deleted: its files go too). */
void qm_stream_close(qm_queue *q, int deleted);
/* Free a consumer's stream read buffer (it left its queue). */
void qm_stream_reader_free(qm_consumer *c);

/* ---- memory budget (message.c) ---- */
extern uint64_t qm_mem_budget;

/* ---- graveyard (node.c): ready messages purged or deleted, freed a slice at a time ---- */
typedef struct qm_grave {
    qm_ring ring;           /* detached ready ring (len > 0), or empty */
    qm_pslot *paged;        /* detached paged array, or NULL */
    struct sl_u64tab *more; /* and its side table, or NULL */
    size_t paged_head, paged_len;
    /* A paged array of a queue with removal_watch: each watched entry (qm_paged.watch) is
     * read back from the store and given to the node's on_removed hook with reason before it
     * is dropped. The grave holds the queue (q->graves_held) until it is done. */
    qm_queue *notify;
    qm_delete_reason reason;
    struct qm_grave *next;
} qm_grave;
void qm_grave_push(qm_node *n, qm_grave *g);
/* What one watched entry read back costs of qm_node_reap's max, in entries freed: a read
 * from the store and an acknowledgement's enqueue (~20-50 us) against ~100 ns per free. */
#define QM_REAP_READ_COST 64
/* A grave that held q is done: frees q's shell once it is a zombie held by none. */
void qm_queue_grave_done(qm_queue *q);

/* ---- paged slots (queue.c) ---- */
/* The entry slot s of a tail whose side table is more, at priority level `level`. */
qm_paged qm_pslot_get(const struct sl_u64tab *more, int level, const qm_pslot *s);
/* Free a side table (NULL is fine). */
void qm_pslot_more_free(struct sl_u64tab *more);

/* ---- clock ---- */
static inline uint64_t qm_now(const qm_node *n)
{
    if (n->test_now)
        return n->test_now;
    return n->clock ? *n->clock : sl_now_ms();
}
static inline qm_node *qm_queue_node(const qm_queue *q)
{
    return q->vhost->node;
}

/* ---- the deadline heap (node.c) ---- */
/* q has time-driven work at due (or earlier): the tick visits it then. Earlier only: a later
 * hint than the one queued changes nothing (the visit recomputes and comes back). */
void qm_queue_wake_at(qm_queue *q, uint64_t due);
/* q goes away: out of the heap. */
void qm_queue_timer_remove(qm_queue *q);
/* Exclusive queues by owner, so a closing connection finds its own without a scan. */
void qm_exclusive_link(qm_queue *q);
void qm_exclusive_unlink(qm_queue *q);

/* ---- queue.c ---- */
qm_queue *qm_queue_alloc(qm_vhost *vh, const char *name, size_t len);
/* Insert an AVAILABLE position (state, queue set here) at its lookup-id place; counts. */
void qm_ready_insert(qm_queue *q, qm_position *pos);
/* Remove and return the next position in delivery order (no expiry check); NULL if none. */
qm_position *qm_ready_pop(qm_queue *q);
/* Remove a specific ready position (found by lookup id); 1 if it was there. */
int qm_ready_remove(qm_queue *q, qm_position *pos);
/* Take the head, expiring (and dead-lettering) expired heads first. */
qm_position *qm_queue_take_head(qm_queue *q, uint64_t now);
/* Expire heads; returns the earliest pending head expiry (0 = none). */
uint64_t qm_queue_expire_heads(qm_queue *q, uint64_t now);
/* Accept a fresh position (lookup id and message set, not in any list) into q as AVAILABLE:
 * max-length overflow, TTL, dispatch scheduling. SL_ERR_RESOURCE when reject-publish refuses
 * it; the position is then freed. */
sl_err qm_queue_accept(qm_queue *q, qm_position *pos);
/* Delete with no checks (x-expires, auto-delete, exclusive, parent deletion, node free).
 * run_hooks = 0 during qm_node_free: no callbacks. */
void qm_queue_destroy(qm_queue *q, int run_hooks);
/* 1 when one more ready message of body_len bytes stays within q's x-max-length and
 * x-max-length-bytes. */
int qm_queue_has_room(const qm_queue *q, uint64_t body_len);
/* Subqueue that became empty and unused: schedule its removal (done by run_dispatch). */
void qm_queue_maybe_gc(qm_queue *q);
/* 1 when q is a subqueue that may be removed now. */
int qm_queue_gc_ready(qm_queue *q);
void qm_queue_args_init(qm_queue_args *a);

/* ---- quorum.c ---- */
void qm_dcount_forget(qm_queue *q, uint64_t lookup_id);
void qm_dcount_clear(qm_queue *q);
/* 1 when count is beyond q's x-delivery-limit. */
int qm_quorum_over_limit(const qm_queue *q, uint32_t count);
/* A held position of a quorum queue comes back unsettled: its count goes up; 1 when that
 * takes it beyond the limit (the caller dead-letters it, reason delivery_limit). */
int qm_quorum_return(qm_position *pos);
/* pos is being handed out from q: remember its count for the door (qm_last_delivery_count). */
void qm_quorum_handout(qm_queue *q, qm_position *pos, int no_ack);
/* pos, just taken from the head of q, is beyond the limit already (a count restored after a
 * restart, whose stop returned it): 1, and the caller dead-letters it instead of handing it
 * out. */
int qm_quorum_take_over(qm_queue *q, qm_position *pos);

/* ---- topic.c ---- */
/* Put b's pattern into x's trie / take it out (exchange.c, for topic exchanges). */
void qm_topic_add(qm_exchange *x, qm_binding *b);
void qm_topic_remove(qm_exchange *x, qm_binding *b);
/* Call cb for every binding of x whose pattern matches rk (a binding may come twice when
 * its pattern matches in more than one way; routing's visited stamps absorb that). */
typedef void (*qm_topic_cb)(void *ctx, qm_binding *b);
void qm_topic_route(const qm_exchange *x, amqp_bytes rk, qm_topic_cb cb, void *ctx);

/* ---- message.c ---- */
/* Add to (or, negative, take from) the memory the queued messages are counted to hold. */
void qm_memory_account(int64_t delta);

/* ---- position.c ---- */
qm_position *qm_position_new(qm_queue *q, qm_message *m, uint64_t lookup_id);
/* The held-position fields of p, allocated on first use (the deadline moves into them). */
qm_lock *qm_pos_lock(qm_position *p);
/* p is back in a ready ring: its lock goes (the deadline comes back). */
void qm_pos_lock_drop(qm_position *p);
/* Free a position (unref message), unlinking it from the orphan list if it is on one. */
void qm_position_free(qm_position *pos);
/* Only the memory: give the slot back (pos0) or free it, then unref the message. For
 * positions no list or store record refers to any more. */
void qm_position_release(qm_position *pos);
void qm_locked_link(qm_queue *q, qm_position *pos);
void qm_locked_unlink(qm_queue *q, qm_position *pos);
void qm_orphan_link(qm_node *n, qm_position *pos);
/* LOCKED / PURGE_PENDING -> DELETED with reason: counts, stats, journal, dead-lettering;
 * frees pos. */
void qm_position_delete_held(qm_position *pos, qm_delete_reason reason);
/* The node's on_removed hook for pos (still in q), when one is set: 1 when the hook began a
 * record group, which the caller ends with qm_removed_end once it has written (or had
 * written) pos' own removal record, so the hook's enqueue and the removal are one group. */
int qm_removed(qm_queue *q, qm_position *pos, qm_delete_reason reason);
void qm_removed_end(int grouped);
/* Settle ignoring pos->tx (the transaction calls these at commit). */
void qm_position_settle(qm_position *pos, int how);
/* Remove a held position from q->locked back into the ready rings (not redelivered). */
void qm_position_unlock(qm_position *pos);
/* pos (just taken from q's head) goes to a consumer or getter: LOCKED on q->locked, or with
 * no_ack DELETED at once (an orphan the receiver acks after writing it out). Stats, journal
 * and the store's delivery mark are taken care of. */
void qm_position_hand_out(qm_queue *q, qm_position *pos, int no_ack);

/* ---- consumer.c ---- */
void qm_consumers_cancel_all(qm_queue *q, int run_hooks);
void qm_dispatch_unlink(qm_queue *q);

/* ---- deadletter.c ---- */
/* Dead-letter m (which was in q) with reason when q has a DLX; no-op otherwise. */
void qm_deadletter(qm_queue *q, qm_message *m, qm_delete_reason reason);

/* ---- journal (position.c) ---- */
void qm_journal_copy(qm_queue *q, qm_position *pos);

/* ---- exchange.c ---- */
void qm_bindings_remove_queue(qm_queue *q);
qm_exchange *qm_exchange_create(qm_vhost *vh, const char *name, size_t len, int type, int durable,
                                int auto_delete, int internal);
void qm_exchange_free(qm_exchange *x);
/* Free x's outgoing bindings (node teardown: done for all exchanges before freeing any). */
void qm_exchange_clear_bindings(qm_exchange *x);

/* ---- tx.c ---- */
/* Forget pos in whatever transaction holds it (holder settled it directly). */
void qm_tx_forget_position(qm_position *pos);
/* A queue goes away: drop Move operations whose target it is. */
void qm_tx_forget_queue(qm_node *n, qm_queue *q);
/* 1 when an open transaction moves something into q. */
int qm_tx_targets_queue(qm_node *n, qm_queue *q);
void qm_tx_free_all(qm_node *n);
/* Record a Move of pos (already LOCKED under tx in its source) into dest. */
void qm_tx_add_move(qm_tx *tx, qm_position *pos, qm_queue *dest);

/* ---- qdesc.c ---- */
/* q is being deleted: its descriptors lose their queue (queue = NULL). */
void qm_qdesc_forget_queue(qm_queue *q);

/* ---- move.c ---- */
/* Move a position out of its source (already unlinked from ready/locked there, source
 * bytes_total still counting it) into dest's ready rings: move_count + 1, same lookup id,
 * the TTL deadline dest's rule gives it (move.c). */
void qm_move_transfer(qm_position *pos, qm_queue *src, qm_queue *dest);

/* ---- args.c ---- */
/* Equivalence of recognised x- arguments: SL_OK or SL_ERR_PRECONDITION with err. */
sl_err qm_queue_args_equivalent(const qm_queue_args *cur, const qm_queue_args *req,
                                const char *qname, const char *vhost, char *err, size_t errlen);

/* ---- route.c ---- */
/* qm_route with rk and the CC keys of headers (dead-lettering re-routes a message so). */
size_t qm_route_cc(qm_exchange *x, amqp_bytes rk, amqp_bytes headers, qm_queue **out, size_t cap,
                   size_t *total);
/* Validate a headers binding's x-match: SL_OK or SL_ERR_PRECONDITION with err. */
sl_err qm_headers_check_args(amqp_bytes args, char *err, size_t errlen);

#endif
