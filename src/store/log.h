/* log.h - the segmented, checksummed, group-committed record log: the only door to the
 * disk for message data (DESIGN.md section 5).
 *
 * A log is a directory of segment files `NNNNNNNNNNNNNNNNNNNN.seg` (20-digit first sequence
 * number). Each segment starts with a 16-octet file header (magic "SLUICESG", format version
 * u32, reserved u32) followed by records:
 *
 *     length:u32  (of type + payload)
 *     crc32c:u32  (CRC32C over seq, type and payload)
 *     seq:u64     (log-wide, strictly increasing by 1)
 *     type:u8
 *     payload[length - 1]
 *
 * All integers little-endian on disk. Appends are buffered in memory; st_log_commit writes
 * every buffered record with one write() and makes them durable with one fdatasync()
 * (group commit: one per event-loop turn, covering every connection's records of that turn).
 *
 * Recovery (st_log_open) reads every segment in order and hands each valid record to the
 * caller. A torn tail - a partial or checksum-failing record at the very end of the newest
 * segment, where a crash during a write leaves one - is truncated away with a warning.
 * Anything else that is wrong (bad checksum or length before the end, a sequence gap, a bad
 * header, a torn tail in an older segment) stops recovery with an error naming the file and
 * the byte offset: the log refuses to guess.
 *
 * Segments roll over at segment_size. The caller tells the log which segments it still needs
 * (st_log_ref / st_log_unref on the segment of each live record) and which older segments the
 * records of a segment depend on (st_log_depend: a removal record depends on the record it
 * cancels, a transaction's end on the group's first record): every segment has a floor, the
 * oldest segment any of its records depends on. st_log_reclaim deletes a segment that has no
 * references, is not the segment being written, and has no segment left between its floor and
 * itself, wherever it is: so a later "this message is gone" record never disappears before the
 * record it cancels, and one old live record no longer keeps every newer segment.
 *
 * A segment deleted with older segments still present leaves a gap in the sequence numbers.
 * Before such a segment goes, its range is added to DIR/holes (magic "SLUICEHL", version u32,
 * count u32, count x {first_seq u64, end_seq u64}, CRC32C u32 of all that; written to
 * holes.tmp, synced, renamed, the directory synced), and recovery accepts a gap between two
 * segment files only where the holes cover it: a segment missing for any other reason is still
 * refused. A file still present inside a hole (a crash between the two steps) is read as usual;
 * sequence numbers never go back into a hole.
 */
#ifndef SL_STORE_LOG_H
#define SL_STORE_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_log st_log;

typedef struct st_log_options {
    uint64_t segment_size; /* roll over after this many bytes (default 64 MiB) */
    int no_sync;           /* tests only: skip fdatasync */
    int read_only;         /* offline tools: never create, write or truncate anything; a torn
                              tail is reported by st_log_torn_tail() instead of truncated,
                              appends return 0 and commits fail with EROFS */
} st_log_options;

/* Position of a record: which segment and where in it (for reading a body back). */
typedef struct st_loc {
    uint32_t segment; /* index into the log's segment list (stable for the segment's life) */
    uint64_t offset;  /* byte offset of the record header in that segment file */
} st_loc;

/* Called for every valid record during recovery, in sequence order. payload is valid only
 * during the call (a copy is the callee's to make). Returning non-zero stops recovery with
 * that value as the error (the caller fills err). */
typedef int (*st_replay_fn)(void *ctx, uint64_t seq, uint8_t type, const uint8_t *payload,
                            size_t len, st_loc loc);

/* Open (creating the directory if needed) and recover. Returns NULL with a message in err
 * ("<dir>/<file>: offset N: checksum mismatch") on corruption or I/O failure.
 * A writable open takes an exclusive flock on the directory (a second broker on the same
 * directory fails to open). When the replay callback stops recovery, errno is ECANCELED and
 * err is left as the callback's owner filled it (err[0] is cleared first; if it is still
 * empty, a default message naming the record is written). */
st_log *st_log_open(const char *dir, const st_log_options *opt, st_replay_fn fn, void *ctx,
                    char *err, size_t errlen);
void st_log_close(st_log *l);
/* Hand every record in the files to fn again, in order (a second pass over what st_log_open
 * recovered; records only in the append buffer are not included). 0, or -1 with err (fn's
 * non-zero return stops it with errno ECANCELED). */
int st_log_scan(st_log *l, st_replay_fn fn, void *ctx, char *err, size_t errlen);

/* Buffer one record; returns its sequence number and, in *loc, where it will be. Never
 * touches the disk. Returns 0 (errno set) when the log is failed or read-only, or when the
 * record is larger than ST_LOG_MAX_RECORD (EMSGSIZE). */
#define ST_LOG_MAX_RECORD (1u << 30) /* max length field (type + payload): 1 GiB */
uint64_t st_log_append(st_log *l, uint8_t type, const void *payload, size_t len, st_loc *loc);
/* Same with a payload gathered from several pieces (no intermediate copy by the caller). */
typedef struct st_iov {
    const void *p;
    size_t len;
} st_iov;
uint64_t st_log_appendv(st_log *l, uint8_t type, const st_iov *iov, int n, st_loc *loc);

/* Write everything buffered and fdatasync it. Returns 0 and the durable sequence number in
 * *durable_seq, or -1 (errno set; the log is then failed: every later call fails too, and the
 * caller must stop accepting work: a half-known disk state is not guessed at). */
int st_log_commit(st_log *l, uint64_t *durable_seq);
/* The same in three steps, so the writing and syncing can run on another thread while the
 * loop goes on appending (and reading back) records:
 *   st_log_batch_begin  (the log's thread) takes everything buffered into a batch: *out is
 *                       NULL when there is nothing to write (or, with sync, to sync);
 *                       -1 (errno set) when the log is failed or read-only;
 *   st_log_batch_run    (any thread) does its writes and fdatasyncs, touching nothing but
 *                       the batch; it may take as long as the disk does;
 *   st_log_batch_end    (the log's thread) applies the outcome: 0, or -1 (errno set, the log
 *                       is failed as after a failed st_log_commit).
 * At most one batch per log is in flight; st_log_commit, st_log_flush and st_log_close must
 * not be called meanwhile. With sync = 0 the batch is a flush (st_log_flush). */
typedef struct st_log_batch st_log_batch;
int st_log_batch_begin(st_log *l, int sync, st_log_batch **out);
void st_log_batch_run(st_log_batch *b);
int st_log_batch_end(st_log *l, st_log_batch *b);
int st_log_batch_in_flight(const st_log *l);
/* The newest sequence number the batch covers (durable once a sync batch has ended). */
uint64_t st_log_batch_last_seq(const st_log_batch *b);
/* After st_log_batch_run: 1 when a write or sync of it failed (st_log_batch_end reports it). */
int st_log_batch_failed(const st_log_batch *b);
/* 1 when running b is only writes of at most max_bytes in all, into files already open and
 * inside the space already reserved for them: no fdatasync, no file made, no fallocate, no
 * directory fsync, no descriptor closed. Such a batch costs what a write to the page cache
 * does, less than handing it to another thread and being woken when it is done. */
int st_log_batch_light(const st_log_batch *b, size_t max_bytes);
/* b was begun but will not run because the batch `cause` failed first: it ends as cause did
 * (so its bytes are never taken for written). */
void st_log_batch_skip(st_log_batch *b, const st_log_batch *cause);
/* Out of space. A new segment file gets its whole segment_size reserved when it is made
 * (fallocate, the size kept), so a full disk shows when a segment is made, or in a write where
 * the file system cannot reserve. A batch that fails with ENOSPC or EDQUOT does not fail the
 * log: st_log_batch_end (and st_log_commit) return -1 with that errno, nothing it held is lost
 * or taken for written, and st_log_stalled is 1 until a later batch (which writes those bytes
 * again, with everything appended since) succeeds. */
int st_log_stalled(const st_log *l);
/* 1 once a write or sync failed for another reason: the log is failed until restart. */
int st_log_failed(const st_log *l);
/* Bytes the batch in flight is writing (0 when none). */
size_t st_log_in_flight_bytes(const st_log *l);
/* Write everything buffered WITHOUT fdatasync (records whose loss in a crash is harmless:
 * acks, delivery hints), so the buffer stays bounded. 0 or -1 as st_log_commit. The records
 * become durable with the next st_log_commit. */
int st_log_flush(st_log *l);
/* Bytes buffered and not yet written. */
size_t st_log_pending(const st_log *l);
/* Highest sequence number known durable. */
uint64_t st_log_durable_seq(const st_log *l);

/* Read back the payload of the record at loc into buf (len bytes of payload expected);
 * verifies the checksum. 0 or -1 with err. Works for buffered records too. */
int st_log_read(st_log *l, st_loc loc, uint8_t *buf, size_t len, char *err, size_t errlen);
/* The same without the copy where one is not needed: *payload points at the len bytes in
 * place (the read-ahead window or the append buffers: valid until the next call on l that
 * reads or appends) or, when they had to be read from the file, in buf. */
int st_log_read_ref(st_log *l, st_loc loc, uint8_t *buf, size_t len, const uint8_t **payload,
                    char *err, size_t errlen);

/* Start a new segment now (the next append goes into it). Used to compact a small log: roll,
 * re-append the live records, unref the old segments, reclaim. A no-op while the current
 * segment holds no record (no empty segments are made). */
void st_log_roll(st_log *l);
/* The segment the next append goes into. */
uint32_t st_log_current_segment(const st_log *l);

/* Segment reference counts for reclaiming. */
void st_log_ref(st_log *l, uint32_t segment);
void st_log_unref(st_log *l, uint32_t segment);
/* The records in `segment` depend on records in the older segment `target` (a removal on the
 * record it cancels, a delivery mark on the enqueue it marks, a transaction's end on its first
 * record): `segment` is not deleted while `target`, or any segment between the two, is still
 * there. No-op for target 0 or target >= segment. */
void st_log_depend(st_log *l, uint32_t segment, uint32_t target);

typedef struct st_reclaim_stats {
    uint64_t segments_deleted;
    uint64_t bytes_freed;
    uint64_t holes; /* of them, deleted with an older segment still present */
} st_reclaim_stats;
/* TIDY: delete every segment that has no references, is written and is not the segment being
 * written, and whose floor has no segment left between it and the segment (see above). The
 * caller must have made durable whatever dropped those references (the removal records, a
 * queue's deletion): st_log_reclaim is for callers that just committed inline; a caller whose
 * loop goes on appending marks the unreferenced segments first (st_log_mark_dead), makes
 * everything appended so far durable, then deletes only marked segments that stayed
 * unreferenced (st_log_reclaim_marked; a new reference unmarks a segment).
 * st_log_reclaim_marked unlinks at once but leaves closing the deleted files (when the file
 * system frees their blocks: slow for big files) and the directory fsync to the next batch's
 * run, which st_log_batch_begin then makes even with nothing appended; st_log_close does them
 * if no batch came. st_log_reclaim does both itself. */
void st_log_reclaim(st_log *l, st_reclaim_stats *out);
void st_log_mark_dead(st_log *l);
void st_log_reclaim_marked(st_log *l, st_reclaim_stats *out);

/* The segments as the reclaim rule sees them, oldest first (for compaction's choices). */
typedef struct st_seg_info {
    uint32_t no;
    uint32_t floor; /* oldest segment its records depend on (no itself when none) */
    uint64_t bytes; /* in the file */
    uint64_t refs;
    uint8_t written; /* every byte is in the file and no batch is writing it */
    uint8_t current; /* the segment appends go to */
} st_seg_info;
/* *out (sl_free it) gets one entry per segment; returns how many. */
size_t st_log_segments(const st_log *l, st_seg_info **out);
/* The reclaim rule over v[0..n): deletable[i] = 1 for each segment it would delete, taking the
 * segments with gone[i] set (may be NULL) as if they had no references. */
void st_log_plan(const st_seg_info *v, size_t n, const uint8_t *gone, uint8_t *deletable);

typedef struct st_log_stats {
    uint64_t segments;
    uint64_t bytes;           /* on disk, all segments */
    uint64_t records_written; /* since open */
    uint64_t bytes_appended;  /* since open, headers included */
    uint64_t commits;         /* fdatasync calls since open */
    uint64_t oldest_segment_refs;
} st_log_stats;
void st_log_get_stats(const st_log *l, st_log_stats *out);
/* bytes_appended alone (O(1): called every loop turn). */
uint64_t st_log_bytes_appended(const st_log *l);
/* How many times since open a segment other than the current one was left without
 * references (its last one dropped, or it rolled with none): O(1), a reap is worth starting
 * only once this moved. A trickle of messages acked in the current segment does not move it. */
uint64_t st_log_released(const st_log *l);

/* File name (no directory) of a live segment, or NULL for an unknown number. Valid until
 * the segment is reclaimed or the log closed. */
const char *st_log_segment_name(const st_log *l, uint32_t segment);
/* Read-only opens: the torn-tail message ("<dir>/<file>: offset N: ...") recovery found and
 * left in place, or NULL if the log ends cleanly. Writable opens truncate and return NULL. */
const char *st_log_torn_tail(const st_log *l);

/* CRC32C (Castagnoli), exposed for the tools and tests. crc is a previous result (0 to
 * start), so st_crc32c(st_crc32c(0, a, n), b, m) is the CRC of a followed by b;
 * st_crc32c(0, "123456789", 9) == 0xE3069283. SSE4.2 when the CPU has it. */
uint32_t st_crc32c(uint32_t crc, const void *p, size_t n);
/* The portable slicing-by-8 path, for tests comparing the two. */
uint32_t st_crc32c_sw(uint32_t crc, const void *p, size_t n);

/* File operation observer (the cluster's mirror, cluster/mirror.h): when one is installed,
 * every change the logs make to the files of their directories is reported after it succeeded,
 * in the order it was made, from the thread that made it (the sync thread for batches, the
 * loop for reclaim and recovery): segment creation, writes (bytes at an offset), fdatasync and
 * directory fsync barriers, unlinks, the holes file's tmp + rename, ftruncate, mkdir of the
 * log directory. Preallocation (fallocate with the size kept) changes no content and is not
 * reported. With no observer installed a log pays one load of a pointer per operation.
 * A stream's log (store/stream.h) reports its files' changes the same way (st_fop_report),
 * and its removal as ST_FOP_RMDIR. */
enum {
    ST_FOP_WRITE = 1,
    ST_FOP_CREATE = 2,  /* arg: 1 when an existing file is emptied (O_TRUNC) */
    ST_FOP_SYNC = 3,    /* fdatasync or fsync of the file */
    ST_FOP_DIRSYNC = 4, /* fsync of the log directory (name "") */
    ST_FOP_UNLINK = 5,
    ST_FOP_TRUNCATE = 6, /* arg: the new size */
    ST_FOP_RENAME = 7,   /* name -> name2 */
    ST_FOP_MKDIR = 8,    /* the log directory itself (name "") */
    /* A batch has written all it writes and succeeded so far; only its syncs follow (name
     * ""). Not a change: a point where everything reported before it may be shipped to
     * followers while this node's fdatasync runs (the mirror closes its group here). */
    ST_FOP_WRITTEN = 9,
    ST_FOP_RMDIR = 10 /* the (emptied) directory itself is removed (name "") */
};
typedef struct st_fop {
    int kind;
    const char *dir;   /* the log's directory, as given to st_log_open */
    const char *name;  /* file name in it ("" for the directory) */
    const char *name2; /* rename target, else NULL */
    uint64_t arg;      /* WRITE: offset; TRUNCATE: size; CREATE: trunc flag */
    const void *data;  /* WRITE: the bytes */
    size_t len;
} st_fop;
typedef void (*st_fop_fn)(void *ctx, const st_fop *op);
/* Install (fn non-NULL) or remove the process-wide observer. Install it before any log of
 * interest is opened and remove it after they are closed. */
void st_log_set_observer(st_fop_fn fn, void *ctx);
/* Report one operation to the observer, if one is installed (the store's other files: a
 * stream's segments, store/stream.c). */
void st_fop_report(int kind, const char *dir, const char *name, const char *name2, uint64_t arg,
                   const void *data, size_t len);

/* Test seams (SQLite-style I/O fault injection): every data write and sync of the log goes
 * through these; tests swap them to produce short writes, EINTR, ENOSPC and EIO. They are
 * called from the sync thread when there is one. */
#include <sys/types.h>
extern ssize_t (*st_log__pwrite)(int fd, const void *p, size_t n, off_t off);
extern int (*st_log__fdatasync)(int fd);

/* The same faults for a whole broker (the integration tests' hook, set from the environment
 * variable SLUICE_FAULT by sluiced): a comma-separated list of
 *   sync_delay_ms=N     every fdatasync of a log takes N ms longer (a slow disk)
 *   sync_fail_after=N   the first N fdatasyncs succeed, every later one fails
 *   sync_fail_if=PATH   every fdatasync fails while the file PATH exists
 *   sync_errno=NAME     with EIO (default), ENOSPC or EDQUOT
 * Returns 0, or -1 with a message naming what it did not understand. "" and NULL change
 * nothing. Install before the first log is opened. */
int st_fault_configure(const char *spec, char *err, size_t errlen);
/* Crash points, for the kill -9 tests of multi-step operations (TIDY's compaction): with
 * SLUICE_FAULT containing crash_at=NAME (or crash_at=NAME@N), the N-th (default first) time the
 * point NAME is reached the process kills itself with SIGKILL, after a line on stderr. Points:
 * tidy-measured, tidy-relocated (after each relocation slice), tidy-synced (the relocated
 * records are durable), tidy-holes (the holes file is written), tidy-unlinked (after each
 * segment file is deleted: a reap's too), tidy-done; reap-synced and reap-done (the same two
 * steps of a reap, persist_tidy_start_reap); meta-synced (a commit's meta batch is on disk and its
 * msgs batch not yet written; reached on the sync thread). crash_at_file=PATH reads NAME[@N]
 * from the file PATH at every point while it exists (the count starts when its content
 * changes), so a test arms a different point per round in one process. */
void st_fault_point(const char *name);

#endif
