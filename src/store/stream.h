/* stream.h - a stream's log: an append-only sequence of entries numbered by offset (u64 from
 * 0), each with its timestamp, kept in its own segment files; read from any offset by any
 * number of readers, never changed by reading, trimmed only by retention, and a whole old
 * segment at a time (issue 47; what RabbitMQ's osiris log is to its streams).
 *
 * A stream is a directory of segment files `NNNNNNNNNNNNNNNNNNNN.seg` (20 digits: the offset
 * of the segment's first entry). Each starts with a 16-octet header (magic "SLSTREAM", format
 * version u32, reserved u32), then entries:
 *
 *     len:u32     payload length; bit 31 set on the first entry of a chunk
 *     crc32c:u32  over offset, timestamp and payload
 *     offset:u64  the stream-wide offset, strictly one more than the entry before
 *     ts:i64      milliseconds since the epoch (never below the entry before's)
 *     payload[len & 0x7fffffff]
 *
 * All little-endian. A chunk is what one batch wrote (one group commit): the stream protocol
 * door hands entries out by chunks, and the offset spec `last` starts at the last chunk.
 *
 * Durability: appends are buffered; a batch (begin on the loop's thread, run on any thread,
 * end back on the loop's thread, as store/log.h's) writes them and fdatasyncs each file it
 * wrote (and the directory when it made a file). Readers see only entries that a batch has
 * made durable (st_stream_end), so nothing is handed out that a crash could take back.
 *
 * Gating (a cluster's leader, docs/cluster.md): once st_stream_gate was called, what a batch
 * made durable becomes readable only when st_stream_release is given the ticket it ended
 * under (the generation the cluster released: its entries are on every in-sync replica), so
 * no reader is handed an entry a failover could take back and give its offset to another.
 *
 * Memory: per segment a sparse index (one point per ST_STREAM_INDEX_EVERY bytes: offset, file
 * position, timestamp), never the entries: a reader reads them from the file, one pread per
 * chunk of up to the reader's buffer.
 *
 * Retention (st_stream_retain): with max_bytes, the oldest segments go while the stream's bytes
 * are over it; with max_age_ms, the oldest segments go while their newest entry is older than
 * that. Never the segment being written, never part of a segment: the bytes on disk stay
 * within one segment of max_bytes.
 *
 * Recovery (st_stream_open): every segment is read in order; the entries' offsets must run on
 * from one file to the next; a torn tail (a partial or checksum-failing entry at the very end of
 * the newest segment) is truncated away; anything else wrong stops the open with the file and
 * byte offset.
 */
#ifndef SL_STORE_STREAM_H
#define SL_STORE_STREAM_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_stream st_stream;
typedef struct st_stream_batch st_stream_batch;

#define ST_STREAM_DEFAULT_SEGMENT (500u * 1000u * 1000u) /* RabbitMQ's 500 MB */
#define ST_STREAM_INDEX_EVERY (64u * 1024)
#define ST_STREAM_MAX_ENTRY (1u << 30)
#define ST_STREAM_FILE_HDR 16
#define ST_STREAM_ENTRY_HDR 24

typedef struct st_stream_options {
    uint64_t segment_size; /* roll over past this many bytes (0: the default) */
    uint64_t max_bytes;    /* retention (0: none) */
    uint64_t max_age_ms;   /* retention (0: none) */
    int no_sync;           /* tests only */
} st_stream_options;

/* Open (creating the directory) and recover. NULL with a message in err. */
st_stream *st_stream_open(const char *dir, const st_stream_options *opt, char *err, size_t errlen);
/* Close; with a batch in flight the caller must have ended it. */
void st_stream_close(st_stream *s);
/* Close and delete the files and the directory (the stream's queue was deleted). */
void st_stream_destroy(st_stream *s);
void st_stream_set_retention(st_stream *s, uint64_t max_bytes, uint64_t max_age_ms);

/* Buffer one entry; returns its offset. ts_ms below the last entry's is raised to it. The
 * payload may be given in pieces (copied). Never touches the disk. */
typedef struct st_stream_iov {
    const void *p;
    size_t len;
} st_stream_iov;
uint64_t st_stream_appendv(st_stream *s, int64_t ts_ms, const st_stream_iov *iov, int n);
uint64_t st_stream_append(st_stream *s, int64_t ts_ms, const void *p, size_t len);
/* Bytes and entries appended and not yet taken by a batch. */
size_t st_stream_pending(const st_stream *s);

/* Group commit, as store/log.h's batches: begin (loop thread) takes what is buffered (*out
 * NULL when nothing is), run (any thread) writes and syncs touching only the batch, end (loop
 * thread) makes its entries readable: 0, or -1 (errno set; the stream is failed for good), or
 * -2 when the disk was full (ENOSPC, EDQUOT): nothing is lost, the batch's entries are pending
 * again (in front of those appended since) and st_stream_stalled is 1 until a later batch
 * writes them. */
int st_stream_batch_begin(st_stream *s, st_stream_batch **out);
void st_stream_batch_run(st_stream_batch *b);
/* run in two steps (persist, so a cluster ships the writes before they are synced): the
 * writes, then the fdatasyncs and the directory fsync. failed: 1 once a step failed. */
void st_stream_batch_write(st_stream_batch *b);
void st_stream_batch_sync(st_stream_batch *b);
int st_stream_batch_failed(const st_stream_batch *b);
int st_stream_batch_end(st_stream *s, st_stream_batch *b);
/* End a begun batch unrun, as failed (another part of the same group commit could not start):
 * the stream is failed. */
void st_stream_batch_fail(st_stream *s, st_stream_batch *b);
/* All three inline (tests, tools). */
int st_stream_commit(st_stream *s);
int st_stream_failed(const st_stream *s);
int st_stream_stalled(const st_stream *s);

/* Offsets. first: the oldest entry kept; end: one past the newest durable (and, gated,
 * released) entry (what readers see: first == end when empty); next: the offset the next
 * append gets; last_chunk: the first offset of the newest such chunk (== end when none). */
uint64_t st_stream_first(const st_stream *s);
uint64_t st_stream_end(const st_stream *s);
uint64_t st_stream_next(const st_stream *s);
uint64_t st_stream_last_chunk(const st_stream *s);
/* One past the newest durable entry, released or not. */
uint64_t st_stream_durable_end(const st_stream *s);
/* Gate the stream (see "Gating" above): the batches that end from now on wait for ticket (the
 * caller's generation: non-decreasing); st_stream_release makes every batch that ended under a
 * ticket <= ticket readable: 1 when the readers' end moved. */
void st_stream_gate(st_stream *s, uint64_t ticket);
int st_stream_release(st_stream *s, uint64_t ticket);
/* The oldest ticket a durable batch still waits for (0: none). */
uint64_t st_stream_held(const st_stream *s);
/* The first durable offset whose entry's timestamp is >= ts_ms (end when none is): reads the
 * files from the index point before it. */
uint64_t st_stream_offset_at(st_stream *s, int64_t ts_ms);

/* Read the durable entries from offset `from` (raised to first) in one read of the file (of up
 * to the reader's buffer, or one entry when that is bigger; none when what the reader read last
 * still holds them), handing each to fn in order until
 * fn returns non-zero, the read's bytes end, or max entries were handed. Returns how many were
 * handed (0 at the end), or -1 with err (I/O error, bad checksum). *next gets the offset after
 * the last one handed. The payload is valid during the call only. */
/* flags: ST_STREAM_CHUNK_START on the first entry of a chunk (what one batch wrote: the unit
 * the stream protocol delivers). */
#define ST_STREAM_CHUNK_START 1u
typedef int (*st_stream_entry_fn)(void *ctx, uint64_t offset, int64_t ts_ms, const uint8_t *p,
                                  size_t len, unsigned flags);
typedef struct st_stream_reader {
    uint8_t *buf; /* owned by the reader (st_stream_reader_free) */
    size_t cap;   /* 0: ST_STREAM_READ_CHUNK */
    /* What buf holds (bytes c_pos .. c_pos + c_len of the segment whose first offset is c_seg)
     * and where the entry after the last one handed is (n_off at n_pos in the segment n_seg,
     * when it is in that segment): a reader that
     * goes on where it stopped (a consumer given credit a message at a time) parses on from
     * memory instead of reading the file again. Zeroed by the caller before the first read. */
    uint64_t c_seg, c_pos, c_len;
    uint64_t n_seg, n_off, n_pos;
} st_stream_reader;
#define ST_STREAM_READ_CHUNK (128u * 1024)
long st_stream_read(st_stream *s, st_stream_reader *r, uint64_t from, size_t max,
                    st_stream_entry_fn fn, void *ctx, uint64_t *next, char *err, size_t errlen);
void st_stream_reader_free(st_stream_reader *r);

/* Retention now (the caller runs it after each batch ends: a segment rolls only then, which is
 * when RabbitMQ's osiris evaluates it too). Never with a batch in flight. Returns the segments
 * deleted. */
unsigned st_stream_retain(st_stream *s, int64_t now_ms);

typedef struct st_stream_stats {
    uint64_t segments;
    uint64_t bytes;     /* in the files, durable and in flight */
    uint64_t entries;   /* end - first */
    uint64_t index_pts; /* sparse index points held in memory */
} st_stream_stats;
void st_stream_get_stats(const st_stream *s, st_stream_stats *out);
const char *st_stream_dir(const st_stream *s);

/* Parse RabbitMQ's x-max-age ("7D", "12h", "30m", "10s", "1Y", "2M": a positive integer and one
 * of Y M D h m s; Y = 365 D, M = 30 D) into ms. 0 on success, -1 when invalid. */
int st_stream_parse_age(const char *s, size_t len, uint64_t *ms);

#endif
