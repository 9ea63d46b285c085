/* persist_internal.h - what persist.c and recover.c share. */
#ifndef SL_PERSIST_INTERNAL_H
#define SL_PERSIST_INTERNAL_H

#include "store/log.h"
#include "persist/persist.h"
#include "persist/records.h"

struct persist {
    qm_node *node;
    char *dir;
    persist_options opt;
    st_log *meta, *msgs;
    sl_buf scratch; /* the record being encoded */
    uint8_t *rbuf;  /* a message record being read back (persist_read_message) */
    size_t rbuf_cap;
    uint64_t next_msg_id;
    /* Group commit in generations: records appended since the last batch began belong to
     * generation gen_open; a batch takes them to the sync thread as that generation. A
     * reply that depends on the disk waits for a generation (persist_ticket) to be durable.
     * Generations end in order, one batch at a time. */
    uint64_t gen_open;       /* the generation being appended to (starts at 1) */
    uint64_t gen_need;       /* newest generation holding a record that needs the disk */
    uint64_t gen_durable;    /* every generation <= this is on disk */
    uint64_t gen_wneed;      /* newest generation holding a record that must be written */
    uint64_t gen_written;    /* every generation <= this is written to the files */
    uint64_t gen_unsynced;   /* the oldest generation a paced batch wrote without the sync
                                its records need (0: none); the next sync covers it */
    uint64_t gen_flight;     /* the generation of the batch in flight, 0 = none */
    uint64_t gen_released;   /* cluster: the newest generation the ISR holds (repl_gate) */
    uint64_t stall_retry_at; /* out of space: the next try, sl_now_ms() (0 = not stalled) */
    uint64_t sync_records;   /* records appended that need the disk (persist_mark) */
    uint64_t write_records;  /* records appended that must be written (persist_wmark) */
    int need_sync;           /* gen_open holds a record that needs the disk */
    int need_write;          /* gen_open holds a delivery mark: it must be written (not synced)
                                before the delivery can reach a socket */
    int meta_dirty;
    int force_pending; /* the next batch also syncs records that did not need it */
    /* Sync pacing (persist_kick): the newest generation a waiter other than a pipelined
     * confirm took a ticket for, when the last sync was handed to the sync thread, and when
     * the paced one is due (0: none waits). */
    uint64_t eager_gen;
    uint64_t last_sync_us, pace_due_us;
    uint64_t last_sync_bytes;        /* st_log_bytes_appended(msgs) when that sync started */
    struct st_syncer *syncer;        /* the sync thread; NULL: every commit is done inline */
    st_log_batch *fl_meta, *fl_msgs; /* the batches in flight (either may be NULL) */
    int fl_sync;
    /* A run of R_DEQ or R_DELIVER records of one queue with consecutive lookup ids, not yet
     * appended (persist.c: run_add); count 0 = none. */
    struct {
        uint8_t type;
        uint32_t count;
        uint32_t dep; /* the oldest segment holding one of their enqueue records */
        uint64_t inc, first;
    } run;
    int in_tx_group;    /* between qm's tx_group hooks: records are marked R_IN_TX */
    int group_depth;    /* groups begun and not ended: nested ones join the outermost, which
                           alone writes R_TX_END (a receive acknowledgement's group inside a
                           transaction's commit or a purge's) */
    uint32_t group_seg; /* the segment the open group began in (its end depends on it) */
    struct tidy *tidy;  /* TIDY in progress (tidy.c), or NULL */
    uint64_t commits, records;
    uint64_t paged_out, paged_in;
    uint64_t recovered_queues, recovered_messages, recovery_ms;
    /* links */
    uint8_t node_id[16];
    int have_node_id;
    int online;
    sl_map *outq;          /* u64 incarnation -> (void*)(uintptr)(flags | foreign << 8 | 1 << 16) */
    uint64_t lookup_hwm;   /* no lookup id below this is handed out again */
    sl_map *outq_sent;     /* u64 incarnation -> (void*)(uintptr) M_OUTQ_SENT value */
    persist_ltime *ltimes; /* M_LOOKUP_TIME samples, oldest first */
    size_t n_ltimes, cap_ltimes;
    sl_map *eod_in;            /* sender[16] + seq_id[8] + dest -> persist_eod_in* */
    sl_map *eod_seq;           /* sender[16] + seq_id[8] -> the first queue's state of it */
    persist_eod_in **eod_list; /* scratch for persist_eod_in_all */
    /* streams (streams.c): the batches in flight and their streams, and streams whose queue
     * went while their batch was in flight (closed once it ended) */
    struct st_stream_batch **fl_st;
    struct st_stream **fl_sts;
    size_t n_fl_st, cap_fl_st;
    struct st_stream **doomed;
    uint8_t *doomed_deleted;
    size_t n_doomed, cap_doomed;
    uint64_t stream_bytes; /* appended to streams since open (persist_bytes_appended) */
    int streams_stalled;   /* a stream's last batch ran out of space (streams.c) */
    uint64_t streams_held; /* gated: the oldest generation whose stream entries wait for
                              their release (0: none; streams.c) */
};

/* streams.c */
int persist_streams_begin(persist *p);
/* End the begun stream batches unrun, as failed (the generation could not start). */
void persist_streams_fail(persist *p);
/* The sync thread's part, in three steps: the writes; the point where the generation's writes
 * are all made (reported to the file operation observer when the generation has no messages
 * batch, whose own report is that point); the syncs. */
void persist_streams_write(persist *p);
void persist_streams_written(persist *p);
void persist_streams_sync(persist *p);
/* 0; -1: a stream failed (the store is failed); -2: a stream was out of space (its entries are
 * pending again: the generation is not durable, as a stalled log's). */
int persist_streams_end(persist *p);
/* Gated (a cluster's leader): generation gen was released: the streams' entries its batches
 * made durable become readable. */
void persist_streams_release(persist *p, uint64_t gen);
void persist_streams_free(persist *p);
void persist_h_stream_appended(void *ctx, qm_queue *q, size_t bytes);
void persist_h_stream_tracked(void *ctx, qm_stream_track *t);
void persist_h_stream_untracked(void *ctx, qm_stream_track *t);
/* A syncing generation begins: the tracked references changed since are written into it. */
void persist_streams_flush_tracking(persist *p);
/* TIDY: tracked references whose record is in an older segment are written again. */
void persist_refresh_stream_tracking(persist *p);
/* After recovery: the segments of the tracked references' records are kept. */
void persist_streams_ref_tracking(persist *p);
/* Recovery: a tracked reference's record (R_STREAM_TRACK) for inc, its payload. 0, or -1 when
 * malformed. Stashed until the queues are rebuilt (persist_streams_restore_tracking). */
int persist_streams_stash_track(persist *p, sl_map **stash, const uint8_t *payload, size_t len,
                                uint32_t seg);
/* Recovery, the queues rebuilt: the stashed references onto their streams (freed). */
void persist_streams_restore_tracking(persist *p, sl_map *stash,
                                      qm_queue *(*queue_of)(void *ctx, uint64_t inc), void *ctx);
void persist_h_stream_closing(void *ctx, struct st_stream *s, int deleted);
/* persist.c: the open generation holds something that must be durable before a reply */
void persist_mark_sync(persist *p);

int persist_queue_durable(const qm_queue *q);
void persist_encode_queue(sl_buf *b, const qm_queue *q);
void persist_encode_exchange(sl_buf *b, const qm_exchange *x);
void persist_encode_binding(sl_buf *b, const qm_binding *bd);
/* Open both logs and rebuild the model (recover.c). */
int persist_recover(persist *p, char *err, size_t errlen);
/* The message record at (seg, off), len payload bytes, read back as a new message (refs = 1,
 * store fields set); NULL when it cannot be read or parsed, logged naming the message (lookup
 * id) of queue `qname`. Paging in and recovery both bring messages back through here: it is
 * on the drain path of a paged queue, so nothing is formatted or allocated but the message. */
qm_message *persist_read_message(persist *p, uint32_t seg, uint64_t off, uint32_t len,
                                 const char *qname, uint64_t lookup);
/* Encode an M_OUTQ / R_EOD_IN payload into b (recover.c's snapshot and TIDY reuse them). */
void persist_encode_eod_in(sl_buf *b, const persist_eod_in *e);
/* Recovery: set the state of one incoming sequence from its record at seg (no record). */
void persist_eod_in_restore(persist *p, const uint8_t sender[16], uint64_t seq_id, uint64_t seq_no,
                            uint64_t access_ms, uint32_t rejects, amqp_bytes sender_name,
                            amqp_bytes dest, uint32_t seg);
void persist_eod_in_free_all(persist *p);
/* Append the pending run of R_DEQ / R_DELIVER records (persist.c), if any: before anything
 * that appends to msgs without persist.c's helpers. */
void persist_run_flush(persist *p);
/* Append the scratch record to msgs, depending on the records in segment dep (0: none);
 * 0 with *loc (may be NULL), or -1 when the log refused it. */
int persist_msgs_append_dep(persist *p, uint8_t type, int needs_sync, uint32_t dep, st_loc *loc);
/* q holds a stored position whose enqueue record is in segment seg (qm_queue.st_floor). */
void persist_queue_floor(qm_queue *q, uint32_t seg);
/* An R_ENQ payload into p->scratch (expires_at: qm_node_now terms, 0 = none; watch: the
 * message's qm_message.watch, EF_WATCH). */
void persist_encode_enq(persist *p, uint64_t inc, uint64_t lookup, uint64_t msg_id,
                        uint32_t move_count, int redelivered, int xact_cont, int xact, int watch,
                        uint64_t expires_at, uint32_t dcount);
/* The delivery count to store with a position of q (0 unless q is a quorum queue). */
uint32_t persist_dcount(const qm_queue *q, uint64_t lookup);
/* R_ENQ's EF_REDELIVERED for pos, delivered before: in a quorum queue it says "out on a
 * delivery now" (recovery adds 1 for it; the count says the rest), so only a held one. */
int persist_enq_delivered(const qm_position *pos, int delivered);
/* Re-append the receiver states (R_EOD_IN) whose record is not in the segment being written
 * (tidy.c), so old segments neither keep nor lose them. */
void persist_refresh_eod_in(persist *p);
void persist_tidy_free(persist *p);
/* Store m's record again under a new id (tidy.c); its one position's reference moves. */
int persist_rewrite_message(persist *p, qm_message *m);
/* Recovery: one M_LOOKUP_TIME sample (no record). */
void persist_ltime_restore(persist *p, uint64_t next_id, uint64_t wall_ms);
/* The wall clock TTL deadlines are stored in (a hook, so tests can move time on). */
extern uint64_t (*persist_wall_ms)(void);

#endif
