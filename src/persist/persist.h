/* persist.h - the durable state of a node: turns the queue model's changes into store records
 * (through qm's persistence hooks) and rebuilds the model from them at start.
 *
 * Two logs under the data directory:
 *   meta/   definitions: durable queues (and subqueues), exchanges, bindings, and the access
 *           module's vhosts, users, permissions and limits. Small; rewritten as a fresh
 *           snapshot at every start.
 *   msgs/   persistent messages in durable queues: the message itself once, an enqueue record
 *           per queue position, and removal, delivery, purge and move records. Reclaimed by
 *           TIDY from the oldest segment on.
 *
 * What needs the disk before a reply: messages (publisher confirms, tx.commit-ok), purges,
 * moves and every definition. Acks and delivery marks ride along with the next sync: losing
 * one in a crash only redelivers a message, it never loses one. Delivery marks (and no-ack
 * removals) are still written (not synced) before the delivery reaches a socket, so a
 * process crash (kill -9) keeps them: what was delivered comes back redelivered.
 *
 * Group commit off the loop: records are appended to generation after generation. Once per
 * event-loop turn the broker calls persist_kick; when no batch is in flight it hands the
 * open generation to the sync thread, which writes and fdatasyncs it while the loop goes on;
 * whatever is appended meanwhile is the next generation (one sync covers everything that
 * accumulated while the previous one ran). A reply that promises something on disk takes a
 * ticket (persist_ticket: the generation its records are in) and is released once
 * persist_durable() has reached it; a delivery whose mark must be written first waits for
 * persist_written() to reach persist_write_ticket(); nothing else waits.
 */
#ifndef SL_PERSIST_PERSIST_H
#define SL_PERSIST_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "qm/qm.h"

typedef struct persist persist;

struct acc_db;

typedef struct persist_options {
    uint64_t segment_size; /* msgs log segment size (default 64 MiB) */
    /* The access module (users, vhost definitions, permissions): its records (meta types
     * 20-39) are replayed into it, it is snapshotted with the definitions, and its changes
     * are written in the turn's group commit. NULL: such records are skipped (inspection). */
    struct acc_db *acc;
    int no_sync;     /* tests only */
    int read_only;   /* inspection (sluice-store): recover into node, write nothing */
    int sync_thread; /* run batches on a sync thread (the broker); 0: persist_kick commits
                        inline (tests, tools) */
    int no_compact;  /* TIDY deletes what is dead but never copies live records (tests) */
    /* Sync pacing (with the sync thread): the least time, in microseconds, from the start of
     * one sync to the start of the next when only pipelined confirms wait for it
     * (persist_ticket_since_lazy); the turn's writes still go at once, only the fdatasync
     * waits, so that it covers more. 0: every sync starts as soon as the last one ends. */
    uint32_t sync_pace_us;
    /* Cluster (issue 31). batch_hook is called on the loop thread each time a generation's
     * batch has ended (written; synced when synced is 1), light and empty batches too, and
     * once at the end of persist_open with gen 0 for what recovery changed on disk: the mirror
     * makes each call a group (cluster/mirror.h: cl_mirror_batch). NULL: none. */
    void (*batch_hook)(void *ctx, uint64_t gen, int synced);
    void *batch_ctx;
    int repl_gate; /* the release gate below is on */
} persist_options;

/* Open data_dir/meta and data_dir/msgs, recover every durable definition and message into
 * node, and install the hooks. Every vhost defined in opt->acc exists in node afterwards,
 * and every vhost of node has a definition there. NULL with a message naming the file and
 * offset on corruption. */
persist *persist_open(const char *data_dir, qm_node *node, const persist_options *opt, char *err,
                      size_t errlen);
void persist_close(persist *p);

/* Group commit, inline: wait for the batch in flight, then write what was appended and
 * fdatasync when anything in it needs the disk; every ticket taken so far is durable when it
 * returns 0. -1 with err: the store is failed (the caller must stop before replying). It
 * blocks the calling thread for the sync: the broker uses persist_kick instead. */
int persist_commit(persist *p, char *err, size_t errlen);
/* The same, and with force also sync records that did not need it (acks, delivery marks):
 * called about once a second and at a clean stop, so they are not held back indefinitely. */
int persist_commit_ex(persist *p, int force, char *err, size_t errlen);

/* Group commit on the sync thread. persist_kick (once per loop turn) starts a batch of what
 * accumulated when none is in flight (force: sync the acks too, with the next batch); never
 * waits for the disk. When persist_sync_fd becomes readable, persist_sync_done applies the
 * finished batch (persist_durable moves on) and the caller kicks again. Both 0, or -1 with
 * err when the store failed. A small batch with nothing to sync (st_log_batch_light) is
 * written by persist_kick itself: it then returns 1, the batch already ended, and the caller
 * releases what waited for the write as it would after persist_sync_done. Without a sync
 * thread persist_kick commits inline. */
int persist_kick(persist *p, int force, char *err, size_t errlen);
/* persist_commit_ex, persist_kick and persist_sync_done return -2 (not -1) when the disk is
 * out of space: nothing is lost, the records wait in memory, the replies that depend on them
 * wait, and later kicks try again (every 200 ms at most) until the space is back. */
int persist_stalled(const persist *p);
int persist_sync_fd(const persist *p);
int persist_sync_done(persist *p, char *err, size_t errlen);
int persist_sync_busy(const persist *p);
/* Tickets: the generation that must be durable before a reply that depends on what has been
 * appended so far may go out (0 = nothing pending ever); released once persist_durable() >=
 * it. persist_mark / persist_ticket_since narrow it to what one operation appended: the
 * ticket when it appended a record that needs the disk, else 0. */
uint64_t persist_ticket(persist *p);
uint64_t persist_mark(const persist *p);
uint64_t persist_ticket_since(persist *p, uint64_t mark);
/* The same ticket for a waiter that is not holding anyone up: a confirm on a channel whose
 * publisher has sent more before earlier confirms came back (it pipelines). A sync that only
 * such waiters wait for may be paced (persist_options.sync_pace_us); any other ticket taken
 * for the generation makes its sync start as soon as it can. */
uint64_t persist_ticket_since_lazy(const persist *p, uint64_t mark);
/* The lazy tickets up to gen are waited for eagerly after all (their waiter has nothing more
 * coming that a paced sync could cover): the sync they need is not paced. */
void persist_hasten(persist *p, uint64_t gen);
/* When a paced sync is due (sl_now_us() clock), or 0 when none waits: the caller kicks again
 * then. */
uint64_t persist_pace_due(const persist *p);
uint64_t persist_durable(const persist *p);
/* Write tickets: delivery marks and no-ack removals must be written to the file (not synced)
 * before their delivery reaches a socket. persist_wmark counts such records; the ticket is
 * the generation of the newest one; persist_written() >= it once written. */
uint64_t persist_wmark(const persist *p);
uint64_t persist_write_ticket(const persist *p);
uint64_t persist_written(const persist *p);
/* Every generation <= this has ended: written, and synced when it held a record that needed
 * the disk. Since a generation with such a record always ends with a sync, any ticket (sync
 * or write) is released once persist_done() reaches it. */
uint64_t persist_done(const persist *p);

/* ---- cluster (issue 31): the release gate ----
 * In cluster mode a durable generation is not yet safe: its group must also be on the disk of
 * every in-sync replica. With persist_options.repl_gate, persist_durable() and persist_done()
 * never run ahead of the generation last given to persist_repl_release (the generation whose
 * group the cluster released: cl_rl_release mapped back through cl_mirror_gen_of); it starts at 0.
 * Off by default: a single node is unchanged. Loop thread. The caller releases its waiters
 * after a release as it does after persist_sync_done. */
void persist_repl_release(persist *p, uint64_t gen);
uint64_t persist_repl_released(const persist *p);
/* The generation durable on this node's own disk (never gated): what the replication reports
 * to cl_rl_durable (through cl_mirror_idx_of_gen). */
uint64_t persist_local_durable(const persist *p);

typedef struct persist_stats {
    uint64_t recovered_queues, recovered_messages, recovery_ms;
    uint64_t msgs_segments, msgs_bytes, commits, records;
} persist_stats;
void persist_get_stats(const persist *p, persist_stats *out);
/* Bytes appended to both logs since open: what the disk has taken or will have to (the
 * broker checks free space every so many of them, not only by the clock). */
uint64_t persist_bytes_appended(const persist *p);
/* st_log_released of the messages log: moves when a reap may find something to delete. */
uint64_t persist_segments_released(const persist *p);

/* TIDY (tidy.c): give back the disk of msgs segments that nothing needs any more, wherever
 * they are, and compact segments that hold little live data: their live records (a message and
 * its enqueue, a receiver's state) are written again at the head of the log, then the old
 * segment is dead too. Never loses a record another depends on (store/log.h: a segment goes
 * only once every older record it cancels or continues is gone), never a live message.
 *
 * Run in slices by the broker: persist_tidy_start, then persist_tidy_step once per loop turn
 * until it says done. The phases: wait for the model's freed messages to be let go (the reaper
 * of purges), measure the live bytes of every segment (a walk of every stored position, a slice
 * at a time), choose the segments to compact (not the newest four; live at most half of the
 * segment, or the oldest ones whose records keep much more dead space behind them than they
 * hold), copy their live
 * records forward (a slice at a time, pausing while the writes wait for the disk), make all
 * that durable (a forced sync on the sync thread), then delete what is dead. A kill at any
 * point loses nothing: until the last step the old records are all still there. */
typedef struct persist_tidy_result {
    uint64_t segments_freed, bytes_freed;
    uint64_t holes;              /* of them, segments freed with older ones still there */
    uint64_t segments_compacted; /* segments whose live records were copied forward */
    uint64_t records_copied, bytes_copied;
    uint64_t bytes_before, bytes_after; /* msgs segments on disk */
    uint64_t ms;                        /* wall time it took */
} persist_tidy_result;
/* 0: started; 1: one is already running (its result will answer this one too). */
int persist_tidy_start(persist *p);
/* A reap: only the last two steps (make what is appended durable, then delete the segments
 * nothing references), no walk and no copies; cheap enough to run whenever a segment
 * loses its last reference, so acked traffic does not pile up for recovery (and a cluster's
 * promotion) to read between TIDYs. 0: started; 1: a TIDY or reap is already running. */
int persist_tidy_start_reap(persist *p);
int persist_tidy_running(const persist *p);
/* The one running is a reap. */
int persist_tidy_reaping(const persist *p);
#define PERSIST_TIDY_DONE 0 /* *out is filled; the next start begins a new one */
#define PERSIST_TIDY_MORE 1 /* call again this turn or the next */
#define PERSIST_TIDY_WAIT 2 /* waiting for the reaper or a sync: call again after it */
/* One slice of at most about budget_us of work (the caller's loop keeps kicking syncs). */
int persist_tidy_step(persist *p, uint64_t budget_us, persist_tidy_result *out);
/* The whole of it at once, syncing inline (tests, tools): segments and bytes freed. */
void persist_tidy(persist *p, uint64_t *segments, uint64_t *bytes);
void persist_tidy_full(persist *p, persist_tidy_result *out);

/* ---- node-to-node links (src/link/) ---- */
/* The node's identity on links: 16 random bytes made the first time a link needs them
 * (written to meta then; a node that never sends keeps none), the same ever after. */
const uint8_t *persist_node_id(persist *p);
/* ConnectionActive as stored (1 for a node that never went offline). */
int persist_online(const persist *p);
void persist_set_online(persist *p, int online);
/* An outgoing queue's stored transfer state (OQ_* flags in records.h, eod_foreign). */
void persist_outq_get(const persist *p, uint64_t incarnation, uint8_t *flags, uint8_t *foreign);
void persist_outq_set(persist *p, uint64_t incarnation, uint8_t flags, uint8_t foreign);
/* Make sure no lookup id <= id can be handed out again after a crash: a link is about to
 * send it as a sequence number. Reserves ahead, so this costs a record (and this turn's
 * sync) once in a long while. */
void persist_reserve_lookup(persist *p, uint64_t id);
/* TimeToReachQueue (src/link/): samples of (the next lookup id, the wall clock), oldest first,
 * so the age of a message in an outgoing queue is bounded from its lookup id across restarts.
 * add appends one (M_LOOKUP_TIME); keep replaces the kept list (pruned or thinned by the
 * link; no record: the start-up snapshot writes what is kept). */
typedef struct persist_ltime {
    uint64_t next_id, wall_ms;
} persist_ltime;
void persist_ltime_add(persist *p, uint64_t next_id, uint64_t wall_ms);
void persist_ltime_keep(persist *p, const persist_ltime *v, size_t n);
const persist_ltime *persist_ltimes(const persist *p, size_t *n);
/* An outgoing queue's send reservation (M_OUTQ_SENT): no message above it has been sent. 0
 * when none was ever made. set writes the record (this turn's sync covers it). */
uint64_t persist_outq_sent_get(const persist *p, uint64_t incarnation);
void persist_outq_sent_set(persist *p, uint64_t incarnation, uint64_t sent);
/* Bracket records that must apply all or nothing (like a transaction commit's). */
void persist_group(persist *p, int begin);

/* A link receiver's state for one incoming sequence into one queue (MS-MQDMPR
 * IncomingTransactionalTransferInfo), keyed by (sender node, SeqID, destination queue): the
 * numbers of a sequence count for the queue they were accepted into and no other, so a
 * batch naming a sequence can never move another queue's last-accepted number. dest is the
 * queue as resolved ("vhost/queue", or "queue" in "/"); R_EOD_IN always carried it, so data
 * directories of earlier versions recover into the same keys (their latest record per
 * (sender, SeqID) had the queue it fed). */
typedef struct persist_eod_in {
    uint8_t sender[16];
    uint64_t seq_id;
    uint64_t seq_no;    /* last accepted */
    uint64_t access_ms; /* wall clock of the last message seen */
    uint32_t rejects;   /* refused since the last accept */
    char *sender_name;  /* the sending node's name */
    char *dest;         /* the queue it feeds ("vhost/queue" or "queue"); part of the key */
    uint32_t seg;       /* segment of its newest record (referenced) */
    uint8_t logged;
    /* in memory only, never written: the address that bound this sequence on this node
     * (MS-MQQB receiver, mqqb_tx_check_from); "" until a message moves it after a start */
    char peer_ip[64];
} persist_eod_in;
persist_eod_in *persist_eod_in_get(persist *p, const uint8_t sender[16], uint64_t seq_id,
                                   const char *dest);
/* A state of the same (sender, SeqID) for a queue other than dest, or NULL: the sequence
 * belongs to that queue (an outgoing queue feeds one queue), so a batch of it for dest is
 * not the sender's. */
persist_eod_in *persist_eod_in_other(persist *p, const uint8_t sender[16], uint64_t seq_id,
                                     const char *dest);
/* Record the new state (inside a persist_group when it goes with enqueues); the record needs
 * this turn's sync. */
void persist_eod_in_set(persist *p, const uint8_t sender[16], uint64_t seq_id, uint64_t seq_no,
                        uint32_t rejects, const char *sender_name, const char *dest);
/* Every incoming sequence, for PROPID_MGMT_QUEUE_EOD_SOURCE_INFO; *n entries, owned by p. */
persist_eod_in **persist_eod_in_all(persist *p, size_t *n);

#endif
