/* stream.c - a stream's log (format and contract in stream.h).
 *
 * Invariants:
 * - segs[] holds the live segments oldest first; the last is the one appends go to. A segment
 *   has `size` bytes appended (its header included), `dsize` of them durable in its file;
 *   `end_off` is one past its newest appended entry, `dend` one past its newest durable one.
 *   A segment whose file is not made yet has fd -1 (made by the batch that first writes it).
 * - The append buffer holds the pending bytes of a suffix of segs[], in order, described by
 *   pend[] (one piece per segment: where in the buffer, where in the file). A batch takes the
 *   buffer and the pieces whole; at most one batch is in flight.
 * - Readers see offsets < vend and bytes < dsize only: what a batch made durable (end) and,
 *   when the stream is gated (a cluster's leader), what was released since (vend <= end;
 *   held[] lists, oldest first, the ends that wait for their tickets).
 * - Every segment's index has a point for its first entry, and then one at least every
 *   ST_STREAM_INDEX_EVERY bytes; points are in offset order, and so in timestamp order
 *   (timestamps never go back).
 * - Retention deletes segs[0] only, only when it is not the last and wholly durable, and never
 *   with a batch in flight (the batch holds the segments' descriptors).
 * - Every change made to the stream's files is reported to the store's file operation
 *   observer (store/log.h, the cluster's mirror) after it succeeded, in the order made and
 *   from the thread that made it, as the logs report theirs: the directory's mkdir (and its
 *   parent's fsync) at open, a torn tail's truncation at recovery, a segment's creation at
 *   batch_begin (the loop), the batch's writes, fdatasyncs and directory fsync on the thread
 *   that runs it (persist's sync thread, before the messages log's batch of the same
 *   generation: so they are in the group that generation's confirms wait for), retention's
 *   unlinks and a deleted stream's unlinks and rmdir on the loop.
 */
#include "store/stream.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/le.h"
#include "core/log.h"
#include "core/mem.h"
#include "store/log.h"

#define MAGIC "SLSTREAM"
#define FORMAT_VERSION 1
#define CHUNK_BIT 0x80000000u
#define LEN_MASK 0x7fffffffu
#define RECOVER_BUF (1u << 20)

#define FOP(kind, dir, name, arg, data, len) st_fop_report(kind, dir, name, NULL, arg, data, len)

typedef struct idx_pt {
    uint64_t off, pos;
    int64_t ts;
} idx_pt;

typedef struct seg {
    uint64_t first, end_off, dend;
    uint64_t size, dsize;
    uint64_t verified; /* entries before this file position passed their checks (see read) */
    int64_t last_ts;
    int fd;
    idx_pt *idx;
    size_t nidx, cidx;
    uint64_t last_idx_pos;
} seg;

typedef struct piece {
    uint64_t seg_first; /* which segment (its first offset: unique) */
    uint64_t pos;       /* file position */
    size_t boff, len;   /* in the buffer */
    int fd;             /* filled by batch_begin */
} piece;

struct st_stream_batch {
    const char *dir; /* the stream's (it outlives its batch: persist/streams.c) */
    uint8_t *buf;
    size_t len, cap;
    piece *pc;
    size_t npc, cpc;
    int dirfd; /* the directory to fsync (a file was made), or -1 */
    int no_sync;
    int failed, err;
    uint64_t end, chunk_first;
};

struct st_stream {
    char *dir;
    int dirfd;
    st_stream_options opt;
    seg *segs;
    size_t nseg, cseg;
    uint8_t *buf;
    size_t blen, bcap;
    piece *pend;
    size_t npend, cpend;
    uint64_t next, end, last_chunk;
    int64_t last_ts;
    int chunk_open; /* the pending bytes hold the current chunk's first entry */
    st_stream_batch *flight;
    st_stream_batch spare; /* a finished batch's buffers, reused */
    int failed;
    int dir_unsynced;      /* a segment file was made and the directory not synced since */
    int stalled;           /* the last batch ran out of space: its bytes are pending again */
    st_stream_reader scan; /* for st_stream_offset_at */
    /* what readers see: vend <= end, vlast_chunk <= last_chunk (stream.h "Gating") */
    uint64_t vend, vlast_chunk;
    int gated;
    uint64_t ticket; /* the gate's ticket for the next batch to end */
    struct held {
        uint64_t ticket, end, last_chunk;
    } * held;
    size_t nheld, cheld;
};

static uint64_t seg_size_limit(const st_stream *s)
{
    return s->opt.segment_size ? s->opt.segment_size : ST_STREAM_DEFAULT_SEGMENT;
}

static void seg_name(char out[32], uint64_t first)
{
    snprintf(out, 32, "%020" PRIu64 ".seg", first);
}

static void idx_add(seg *g, uint64_t off, uint64_t pos, int64_t ts)
{
    if (g->nidx == g->cidx) {
        g->cidx = g->cidx ? g->cidx * 2 : 16;
        g->idx = sl_xrealloc(g->idx, g->cidx * sizeof *g->idx);
    }
    g->idx[g->nidx++] = (idx_pt){off, pos, ts};
    g->last_idx_pos = pos;
}

static seg *push_seg(st_stream *s, uint64_t first)
{
    if (s->nseg == s->cseg) {
        s->cseg = s->cseg ? s->cseg * 2 : 8;
        s->segs = sl_xrealloc(s->segs, s->cseg * sizeof *s->segs);
    }
    seg *g = &s->segs[s->nseg++];
    memset(g, 0, sizeof *g);
    g->first = g->end_off = g->dend = first;
    g->verified = ST_STREAM_FILE_HDR; /* the first entry is checked by the first read */
    g->fd = -1;
    return g;
}

static seg *find_seg(st_stream *s, uint64_t first)
{
    for (size_t i = s->nseg; i-- > 0;)
        if (s->segs[i].first == first)
            return &s->segs[i];
    return NULL;
}

/* The segment holding offset off (off >= segs[0].first). */
static seg *seg_of(st_stream *s, uint64_t off)
{
    size_t lo = 0, hi = s->nseg;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->segs[mid].first <= off)
            lo = mid;
        else
            hi = mid;
    }
    return &s->segs[lo];
}

/* The checksum of a stored entry h (its header, then len payload bytes): over offset,
 * timestamp and payload, which lie in a row from h + 8 (little-endian, as the checksum
 * takes them), so one pass over the stored bytes. */
static uint32_t stored_crc(const uint8_t *h, size_t len)
{
    return st_crc32c(0, h + 8, 16 + len);
}

/* ---- appending ---- */

static uint8_t *buf_room(st_stream *s, size_t n)
{
    if (s->blen + n > s->bcap) {
        size_t cap = s->bcap ? s->bcap : 64 * 1024;
        while (cap < s->blen + n)
            cap *= 2;
        s->buf = sl_xrealloc(s->buf, cap);
        s->bcap = cap;
    }
    uint8_t *p = s->buf + s->blen;
    s->blen += n;
    return p;
}

/* The piece the next bytes of g go into (g is the last segment). */
static piece *piece_for(st_stream *s, seg *g)
{
    if (s->npend && s->pend[s->npend - 1].seg_first == g->first)
        return &s->pend[s->npend - 1];
    if (s->npend == s->cpend) {
        s->cpend = s->cpend ? s->cpend * 2 : 4;
        s->pend = sl_xrealloc(s->pend, s->cpend * sizeof *s->pend);
    }
    piece *pc = &s->pend[s->npend++];
    *pc = (piece){.seg_first = g->first, .pos = g->size, .boff = s->blen, .len = 0, .fd = -1};
    return pc;
}

uint64_t st_stream_appendv(st_stream *s, int64_t ts_ms, const st_stream_iov *iov, int n)
{
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += iov[i].len;
    if (ts_ms < s->last_ts)
        ts_ms = s->last_ts;
    s->last_ts = ts_ms;
    seg *g = &s->segs[s->nseg - 1];
    uint64_t need = ST_STREAM_ENTRY_HDR + len;
    if (g->end_off > g->first && g->size + need > seg_size_limit(s))
        g = push_seg(s, s->next); /* roll over: a new file from the next batch on */
    if (g->size == 0) {
        piece *pc = piece_for(s, g);
        uint8_t *h = buf_room(s, ST_STREAM_FILE_HDR);
        memcpy(h, MAGIC, 8);
        sl_put_le32(h + 8, FORMAT_VERSION);
        sl_put_le32(h + 12, 0);
        pc->len += ST_STREAM_FILE_HDR;
        g->size = ST_STREAM_FILE_HDR;
    }
    piece *pc = piece_for(s, g);
    uint64_t off = s->next++;
    if (g->nidx == 0 || g->size - g->last_idx_pos >= ST_STREAM_INDEX_EVERY)
        idx_add(g, off, g->size, ts_ms);
    uint8_t *h = buf_room(s, (size_t)need);
    uint8_t *d = h + ST_STREAM_ENTRY_HDR;
    for (int i = 0; i < n; i++) {
        if (iov[i].len)
            memcpy(d, iov[i].p, iov[i].len);
        d += iov[i].len;
    }
    sl_put_le32(h, (uint32_t)len | (s->chunk_open ? 0 : CHUNK_BIT));
    sl_put_le64(h + 8, off);
    sl_put_le64(h + 16, (uint64_t)ts_ms);
    sl_put_le32(h + 4, stored_crc(h, len)); /* one pass over what was just copied */
    s->chunk_open = 1;
    pc->len += (size_t)need;
    g->size += need;
    g->end_off = off + 1;
    g->last_ts = ts_ms;
    return off;
}

uint64_t st_stream_append(st_stream *s, int64_t ts_ms, const void *p, size_t len)
{
    st_stream_iov v = {p, len};
    return st_stream_appendv(s, ts_ms, &v, 1);
}

size_t st_stream_pending(const st_stream *s)
{
    return s->blen;
}

/* ---- batches ---- */

int st_stream_batch_begin(st_stream *s, st_stream_batch **out)
{
    *out = NULL;
    if (s->failed) {
        errno = EIO;
        return -1;
    }
    if (!s->npend || s->flight)
        return 0;
    st_stream_batch *b = sl_xcalloc(1, sizeof *b);
    b->dirfd = -1;
    b->dir = s->dir;
    b->no_sync = s->opt.no_sync;
    for (size_t i = 0; i < s->npend; i++) {
        seg *g = find_seg(s, s->pend[i].seg_first);
        if (g->fd < 0) {
            char name[32];
            seg_name(name, g->first);
            g->fd = openat(s->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (g->fd < 0) {
                sl_error("stream %s/%s: cannot create: %s", s->dir, name, strerror(errno));
                s->failed = 1;
                sl_free(b);
                return -1;
            }
            FOP(ST_FOP_CREATE, s->dir, name, 1, NULL, 0);
            s->dir_unsynced = 1;
        }
        s->pend[i].fd = g->fd;
    }
    if (s->dir_unsynced)
        b->dirfd = s->dirfd;
    /* The buffers change hands: the batch takes the pending ones, the stream the spare. */
    b->buf = s->buf;
    b->len = s->blen;
    b->cap = s->bcap;
    b->pc = s->pend;
    b->npc = s->npend;
    b->cpc = s->cpend;
    b->end = s->next;
    s->buf = s->spare.buf;
    s->bcap = s->spare.cap;
    s->pend = s->spare.pc;
    s->cpend = s->spare.npc; /* the spare keeps its capacity in npc */
    s->spare.buf = NULL;
    s->spare.cap = 0;
    s->spare.pc = NULL;
    s->spare.npc = 0;
    s->blen = 0;
    s->npend = 0;
    /* the chunk's first offset: the first entry in this batch */
    b->chunk_first = s->end;
    s->chunk_open = 0;
    s->flight = b;
    *out = b;
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n, uint64_t pos)
{
    while (n) {
        ssize_t w = st_log__pwrite(fd, p, n, (off_t)pos);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        pos += (uint64_t)w;
    }
    return 0;
}

void st_stream_batch_write(st_stream_batch *b)
{
    char name[32];
    for (size_t i = 0; i < b->npc && !b->failed; i++) {
        const piece *pc = &b->pc[i];
        /* A batch that runs into the next segment syncs the one it filled first: so after a
         * crash only the newest segment holding entries can be torn, and recovery tells a
         * torn tail from damage in the middle (st_stream_open). Rare: once per segment. */
        if (i > 0 && !b->no_sync) {
            if (st_log__fdatasync(b->pc[i - 1].fd) < 0) {
                b->failed = 1, b->err = errno;
                break;
            }
            seg_name(name, b->pc[i - 1].seg_first);
            FOP(ST_FOP_SYNC, b->dir, name, 0, NULL, 0);
        }
        if (write_all(pc->fd, b->buf + pc->boff, pc->len, pc->pos) < 0) {
            b->failed = 1, b->err = errno;
        } else {
            seg_name(name, pc->seg_first);
            FOP(ST_FOP_WRITE, b->dir, name, pc->pos, b->buf + pc->boff, pc->len);
        }
    }
}

void st_stream_batch_sync(st_stream_batch *b)
{
    char name[32];
    if (b->no_sync)
        return;
    for (size_t i = 0; i < b->npc && !b->failed; i++) {
        if (st_log__fdatasync(b->pc[i].fd) < 0) {
            b->failed = 1, b->err = errno;
        } else {
            seg_name(name, b->pc[i].seg_first);
            FOP(ST_FOP_SYNC, b->dir, name, 0, NULL, 0);
        }
    }
    if (!b->failed && b->dirfd >= 0) {
        if (fsync(b->dirfd) < 0)
            b->failed = 1, b->err = errno;
        else
            FOP(ST_FOP_DIRSYNC, b->dir, "", 0, NULL, 0);
    }
}

void st_stream_batch_run(st_stream_batch *b)
{
    st_stream_batch_write(b);
    st_stream_batch_sync(b);
}

int st_stream_batch_failed(const st_stream_batch *b)
{
    return b->failed;
}

/* Out of space: the batch's bytes go back in front of what was appended since, to be written
 * again (at the same places) by a later batch. */
static void requeue(st_stream *s, st_stream_batch *b)
{
    size_t n = b->len + s->blen;
    uint8_t *buf = sl_xmalloc(n ? n : 1);
    memcpy(buf, b->buf, b->len);
    if (s->blen)
        memcpy(buf + b->len, s->buf, s->blen);
    size_t np = b->npc + s->npend;
    piece *pc = sl_xmalloc(np * sizeof *pc);
    memcpy(pc, b->pc, b->npc * sizeof *pc);
    for (size_t i = 0; i < s->npend; i++) {
        pc[b->npc + i] = s->pend[i];
        pc[b->npc + i].boff += b->len;
    }
    sl_free(s->buf);
    sl_free(s->pend);
    s->buf = buf;
    s->blen = s->bcap = n;
    s->pend = pc;
    s->npend = s->cpend = np;
    s->chunk_open = 1; /* the entries keep the chunk marks they were written with */
}

int st_stream_batch_end(st_stream *s, st_stream_batch *b)
{
    s->flight = NULL;
    if (b->failed && (b->err == ENOSPC || b->err == EDQUOT)) {
        /* not a failure: the same bytes go again once there is room (stream.h) */
        sl_warn("stream %s: out of space: the entries wait in memory", s->dir);
        requeue(s, b);
        s->stalled = 1;
        int e = b->err;
        sl_free(b->buf);
        sl_free(b->pc);
        sl_free(b);
        errno = e;
        return -2;
    }
    if (b->failed) {
        s->failed = 1;
        sl_error("stream %s: write or sync failed: %s", s->dir, strerror(b->err));
        errno = b->err ? b->err : EIO;
    } else {
        s->stalled = 0;
        if (b->dirfd >= 0)
            s->dir_unsynced = 0;
        for (size_t i = 0; i < b->npc; i++) {
            seg *g = find_seg(s, b->pc[i].seg_first);
            if (!g)
                continue;
            g->dsize = b->pc[i].pos + b->pc[i].len;
            g->dend = g->end_off < b->end ? g->end_off : b->end;
        }
        if (b->end > s->end) {
            s->last_chunk = b->chunk_first;
            s->end = b->end;
            if (!s->gated) {
                s->vend = s->end;
                s->vlast_chunk = s->last_chunk;
            } else {
                if (s->nheld == s->cheld) {
                    s->cheld = s->cheld ? s->cheld * 2 : 8;
                    s->held = sl_xrealloc(s->held, s->cheld * sizeof *s->held);
                }
                s->held[s->nheld++] = (struct held){s->ticket, s->end, s->last_chunk};
            }
        }
    }
    int rc = b->failed ? -1 : 0;
    /* keep the larger buffers as the spare */
    if (b->cap > s->spare.cap && b->cap <= (64u << 20)) {
        sl_free(s->spare.buf);
        s->spare.buf = b->buf;
        s->spare.cap = b->cap;
    } else
        sl_free(b->buf);
    sl_free(s->spare.pc);
    s->spare.pc = b->pc;
    s->spare.npc = b->cpc; /* the spare keeps its capacity in npc */
    sl_free(b);
    return rc;
}

void st_stream_batch_fail(st_stream *s, st_stream_batch *b)
{
    b->failed = 1;
    b->err = EIO;
    st_stream_batch_end(s, b);
}

int st_stream_commit(st_stream *s)
{
    st_stream_batch *b;
    if (st_stream_batch_begin(s, &b) < 0)
        return -1;
    if (!b)
        return 0;
    st_stream_batch_run(b);
    return st_stream_batch_end(s, b);
}

int st_stream_failed(const st_stream *s)
{
    return s->failed;
}

int st_stream_stalled(const st_stream *s)
{
    return s->stalled;
}

/* ---- offsets and reads ---- */

uint64_t st_stream_first(const st_stream *s)
{
    uint64_t f = s->segs[0].first;
    return f < s->vend ? f : s->vend;
}

uint64_t st_stream_end(const st_stream *s)
{
    return s->vend;
}

uint64_t st_stream_durable_end(const st_stream *s)
{
    return s->end;
}

void st_stream_gate(st_stream *s, uint64_t ticket)
{
    s->gated = 1;
    s->ticket = ticket;
}

uint64_t st_stream_held(const st_stream *s)
{
    return s->nheld ? s->held[0].ticket : 0;
}

int st_stream_release(st_stream *s, uint64_t ticket)
{
    size_t k = 0;
    while (k < s->nheld && s->held[k].ticket <= ticket)
        k++;
    if (!k)
        return 0;
    s->vend = s->held[k - 1].end;
    s->vlast_chunk = s->held[k - 1].last_chunk;
    memmove(s->held, s->held + k, (s->nheld - k) * sizeof *s->held);
    s->nheld -= k;
    return 1;
}

uint64_t st_stream_next(const st_stream *s)
{
    return s->next;
}

uint64_t st_stream_last_chunk(const st_stream *s)
{
    return s->vlast_chunk;
}

static int pread_all(int fd, uint8_t *p, size_t n, uint64_t pos)
{
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)pos);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        pos += (uint64_t)r;
    }
    return 0;
}

static void reader_room(st_stream_reader *r, size_t n)
{
    if (!r->cap)
        r->cap = ST_STREAM_READ_CHUNK;
    if (!r->buf || n > r->cap) {
        if (n > r->cap)
            r->cap = n;
        sl_free(r->buf);
        r->buf = sl_xmalloc(r->cap);
    }
}

void st_stream_reader_free(st_stream_reader *r)
{
    sl_free(r->buf);
    r->buf = NULL;
}

long st_stream_read(st_stream *s, st_stream_reader *r, uint64_t from, size_t max,
                    st_stream_entry_fn fn, void *ctx, uint64_t *next, char *err, size_t errlen)
{
    uint64_t first = s->segs[0].first;
    if (from < first)
        from = first;
    *next = from;
    if (from >= s->vend || !max)
        return 0;
    seg *g = seg_of(s, from);
    uint64_t pos, off;
    if (r->buf && r->n_seg == g->first && r->n_off == from && r->n_pos) {
        /* where the reader's last read stopped: no index walk */
        pos = r->n_pos;
        off = from;
    } else {
        /* the index point at or before from */
        size_t lo = 0, hi = g->nidx;
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (g->idx[mid].off <= from)
                lo = mid;
            else
                hi = mid;
        }
        pos = g->idx[lo].pos;
        off = g->idx[lo].off;
    }
    long handed = 0;
    reader_room(r, 0);
    int fresh = 0; /* the buffer was read in this pass */
    /* Bounded: each pass moves pos on by at least one entry, or reads the file afresh (after
     * which it moves on), or ends. */
    uint64_t lim = g->dend < s->vend ? g->dend : s->vend; /* what readers may see */
    while (off < lim && pos < g->dsize) {
        size_t want, at;
        if (!fresh && r->c_seg == g->first && pos >= r->c_pos && pos < r->c_pos + r->c_len) {
            /* still in what this reader read last (a chunk handed out a credit at a time) */
            want = (size_t)r->c_len;
            at = (size_t)(pos - r->c_pos);
        } else {
            want = r->cap;
            if (want > g->dsize - pos)
                want = (size_t)(g->dsize - pos);
            if (want < ST_STREAM_ENTRY_HDR)
                break;
            r->c_len = 0;
            if (pread_all(g->fd, r->buf, want, pos) < 0)
                goto io;
            r->c_seg = g->first;
            r->c_pos = pos;
            r->c_len = want;
            at = 0;
            fresh = 1;
        }
        size_t at0 = at;
        int stop = 0;
        while (!stop && want - at >= ST_STREAM_ENTRY_HDR && off < lim) {
            const uint8_t *h = r->buf + at;
            size_t len = sl_le32(h) & LEN_MASK;
            if (want - at < ST_STREAM_ENTRY_HDR + len) {
                if (at == 0 && fresh) {
                    /* one entry bigger than the buffer: read it alone */
                    reader_room(r, ST_STREAM_ENTRY_HDR + len);
                    want = ST_STREAM_ENTRY_HDR + len;
                    r->c_len = 0;
                    if (pread_all(g->fd, r->buf, want, pos) < 0)
                        goto io;
                    r->c_pos = pos;
                    r->c_len = want;
                    h = r->buf;
                } else
                    break;
            }
            uint64_t eoff = sl_le64(h + 8);
            int64_t ts = (int64_t)sl_le64(h + 16);
            const uint8_t *p = h + ST_STREAM_ENTRY_HDR;
            /* An entry's checksum is checked the first time this process reads its bytes
             * (recovery reads every one there is at open): g->verified runs on over the
             * entries checked from the segment's start, and what lies before it is not
             * checked again (a replay spent a quarter of its time on it). */
            uint64_t epos = r->c_pos + at, eend = epos + ST_STREAM_ENTRY_HDR + len;
            int check = eend > g->verified;
            if (eoff != off || (check && sl_le32(h + 4) != stored_crc(h, len))) {
                char name[32];
                seg_name(name, g->first);
                snprintf(err, errlen, "%s/%s: offset %" PRIu64 ": bad entry", s->dir, name,
                         r->c_pos + at);
                r->c_len = 0;
                errno = EIO;
                return -1;
            }
            if (check && epos <= g->verified)
                g->verified = eend;
            at += ST_STREAM_ENTRY_HDR + len;
            off++;
            if (off - 1 >= from) {
                handed++;
                *next = off;
                r->n_seg = g->first;
                r->n_off = off;
                r->n_pos = r->c_pos + at;
                unsigned fl = (sl_le32(h) & CHUNK_BIT) ? ST_STREAM_CHUNK_START : 0;
                if (fn(ctx, off - 1, ts, p, len, fl) || (size_t)handed >= max)
                    stop = 1;
            }
        }
        pos = r->c_pos + at;
        if (handed)
            break;
        if (at == at0)
            fresh = 0, r->c_len = 0; /* nothing whole in what was kept: read afresh */
        else
            fresh = 0;
    }
    return handed;
io : {
    char name[32];
    seg_name(name, g->first);
    snprintf(err, errlen, "%s/%s: read at %" PRIu64 ": %s", s->dir, name, pos, strerror(errno));
    return -1;
}
}

typedef struct seek_ctx {
    int64_t ts;
    uint64_t found;
    int done;
} seek_ctx;

static int seek_fn(void *ctx, uint64_t offset, int64_t ts, const uint8_t *p, size_t len,
                   unsigned flags)
{
    (void)p, (void)len, (void)flags;
    seek_ctx *c = ctx;
    if (ts >= c->ts) {
        c->found = offset;
        c->done = 1;
        return 1;
    }
    return 0;
}

uint64_t st_stream_offset_at(st_stream *s, int64_t ts_ms)
{
    size_t i = 0;
    while (i < s->nseg && (s->segs[i].dend == s->segs[i].first || s->segs[i].last_ts < ts_ms))
        i++;
    if (i == s->nseg || s->segs[i].first >= s->vend)
        return s->vend;
    seg *g = &s->segs[i];
    /* the last index point older than ts: the entry wanted is after it */
    uint64_t from = g->first;
    for (size_t k = 0; k < g->nidx && g->idx[k].ts < ts_ms; k++)
        from = g->idx[k].off;
    seek_ctx c = {ts_ms, s->vend, 0};
    char err[256];
    /* Bounded: each read hands at least one entry or ends the stream. */
    while (!c.done && from < s->vend) {
        uint64_t nx;
        long n = st_stream_read(s, &s->scan, from, SIZE_MAX, seek_fn, &c, &nx, err, sizeof err);
        if (n <= 0)
            break;
        from = nx;
    }
    return c.done ? c.found : s->vend;
}

/* ---- retention ---- */

void st_stream_set_retention(st_stream *s, uint64_t max_bytes, uint64_t max_age_ms)
{
    s->opt.max_bytes = max_bytes;
    s->opt.max_age_ms = max_age_ms;
}

static uint64_t total_bytes(const st_stream *s)
{
    uint64_t t = 0;
    for (size_t i = 0; i < s->nseg; i++)
        t += s->segs[i].size;
    return t;
}

static void seg_drop(st_stream *s, seg *g, int unlink_it)
{
    if (g->fd >= 0)
        close(g->fd);
    if (unlink_it) {
        char name[32];
        seg_name(name, g->first);
        if (unlinkat(s->dirfd, name, 0) == 0)
            FOP(ST_FOP_UNLINK, s->dir, name, 0, NULL, 0);
    }
    sl_free(g->idx);
}

unsigned st_stream_retain(st_stream *s, int64_t now_ms)
{
    unsigned n = 0;
    if (s->flight || (!s->opt.max_bytes && !s->opt.max_age_ms))
        return 0;
    uint64_t total = total_bytes(s);
    while (s->nseg > 1) {
        seg *g = &s->segs[0];
        if (g->dsize != g->size || g->end_off > s->vend)
            break; /* not wholly durable (or released) yet */
        int over = s->opt.max_bytes && total > s->opt.max_bytes;
        int old = s->opt.max_age_ms && g->last_ts < now_ms - (int64_t)s->opt.max_age_ms;
        if (!over && !old)
            break;
        total -= g->size;
        seg_drop(s, g, 1);
        memmove(&s->segs[0], &s->segs[1], (s->nseg - 1) * sizeof *s->segs);
        s->nseg--;
        n++;
    }
    return n;
}

void st_stream_get_stats(const st_stream *s, st_stream_stats *out)
{
    memset(out, 0, sizeof *out);
    out->segments = s->nseg;
    for (size_t i = 0; i < s->nseg; i++) {
        if (s->segs[i].size == 0 && s->nseg == 1)
            out->segments = 0;
        out->bytes += s->segs[i].size;
        out->index_pts += s->segs[i].nidx;
    }
    out->entries = s->vend - st_stream_first(s);
}

const char *st_stream_dir(const st_stream *s)
{
    return s->dir;
}

int st_stream_parse_age(const char *str, size_t len, uint64_t *ms)
{
    size_t i = 0;
    uint64_t v = 0;
    while (i < len && str[i] >= '0' && str[i] <= '9') {
        if (v > UINT64_MAX / 10 / 1000)
            return -1;
        v = v * 10 + (uint64_t)(str[i] - '0');
        i++;
    }
    if (i == 0 || v == 0 || len - i != 1)
        return -1;
    uint64_t unit;
    switch (str[i]) {
    case 'Y':
        unit = 365ull * 86400000;
        break;
    case 'M':
        unit = 30ull * 86400000;
        break;
    case 'D':
        unit = 86400000ull;
        break;
    case 'h':
        unit = 3600000ull;
        break;
    case 'm':
        unit = 60000ull;
        break;
    case 's':
        unit = 1000ull;
        break;
    default:
        return -1;
    }
    if (v > UINT64_MAX / unit)
        return -1;
    *ms = v * unit;
    return 0;
}

/* ---- open, recovery, close ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* 1 when name is 20 digits + ".seg"; *first gets the number. */
static int parse_name(const char *name, uint64_t *first)
{
    if (strlen(name) != 24 || strcmp(name + 20, ".seg") != 0)
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(name[i] - '0');
    }
    *first = v;
    return 1;
}

/* Read one segment file into g: entries from g->first on. 0; -1 with err. A torn tail of the
 * last segment is truncated away. */
/* A crash can leave segment files that a batch made (st_stream_batch_begin creates them on
 * the loop) but never wrote: empty, or shorter than a header. They hold nothing, and only a
 * batch in flight, unconfirmed, made them, so they go; and since a batch syncs a segment
 * before it writes the next (st_stream_batch_write), the files before them are whole but for
 * the newest one's torn tail, which recover_seg truncates. One of them stays when no segment
 * with entries precedes it: its name keeps the stream's next offset (retention may have
 * dropped every older one). Returns the count left in firsts. */
static size_t drop_unwritten_segments(st_stream *s, const uint64_t *firsts, size_t n)
{
    while (n > 0) {
        char name[32];
        struct stat st;
        seg_name(name, firsts[n - 1]);
        if (fstatat(s->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            (uint64_t)st.st_size >= ST_STREAM_FILE_HDR + ST_STREAM_ENTRY_HDR)
            break; /* holds an entry, or part of one: recover_seg decides */
        if (n == 1)
            break;
        sl_warn("stream %s/%s: a segment file no entry reached (%lld bytes): removed", s->dir, name,
                (long long)st.st_size);
        if (unlinkat(s->dirfd, name, 0) == 0)
            FOP(ST_FOP_UNLINK, s->dir, name, 0, NULL, 0);
        n--;
    }
    return n;
}

static int recover_seg(st_stream *s, seg *g, int last, uint8_t **bufp, size_t *capp, char *err,
                       size_t errlen)
{
    char name[32];
    seg_name(name, g->first);
    g->fd = openat(s->dirfd, name, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (g->fd < 0 || fstat(g->fd, &st) < 0) {
        snprintf(err, errlen, "%s/%s: %s", s->dir, name, strerror(errno));
        return -1;
    }
    uint64_t fsize = (uint64_t)st.st_size;
    uint8_t hdr[ST_STREAM_FILE_HDR];
    const char *bad = NULL;
    uint64_t badpos = 0;
    uint64_t pos = ST_STREAM_FILE_HDR, off = g->first;
    if (fsize < ST_STREAM_FILE_HDR) {
        bad = "short header", badpos = 0;
        goto torn;
    }
    if (pread_all(g->fd, hdr, sizeof hdr, 0) < 0 || memcmp(hdr, MAGIC, 8) != 0 ||
        sl_le32(hdr + 8) != FORMAT_VERSION) {
        snprintf(err, errlen, "%s/%s: offset 0: bad header", s->dir, name);
        return -1;
    }
    size_t have = 0, at = 0;
    uint64_t bpos = pos; /* file position of buf[0] */
    /* Bounded: each pass consumes an entry or reads more of the file, or ends. */
    for (;;) {
        if (have - at < ST_STREAM_ENTRY_HDR ||
            have - at < ST_STREAM_ENTRY_HDR + (sl_le32(*bufp + at) & LEN_MASK)) {
            /* refill: keep the partial entry, read what follows */
            memmove(*bufp, *bufp + at, have - at);
            have -= at;
            bpos += at;
            at = 0;
            size_t need = have >= ST_STREAM_ENTRY_HDR
                              ? ST_STREAM_ENTRY_HDR + (sl_le32(*bufp) & LEN_MASK)
                              : ST_STREAM_ENTRY_HDR;
            if (need > *capp) {
                if (need > ST_STREAM_MAX_ENTRY + ST_STREAM_ENTRY_HDR) {
                    bad = "entry length out of range", badpos = bpos;
                    goto torn;
                }
                *bufp = sl_xrealloc(*bufp, need);
                *capp = need;
            }
            uint64_t left = fsize - (bpos + have);
            if (left == 0) {
                if (have == 0)
                    break; /* clean end */
                bad = "partial entry", badpos = bpos;
                goto torn;
            }
            size_t want = *capp - have;
            if (want > left)
                want = (size_t)left;
            if (pread_all(g->fd, *bufp + have, want, bpos + have) < 0) {
                snprintf(err, errlen, "%s/%s: read: %s", s->dir, name, strerror(errno));
                return -1;
            }
            have += want;
            continue;
        }
        const uint8_t *h = *bufp + at;
        uint32_t lw = sl_le32(h);
        size_t len = lw & LEN_MASK;
        uint64_t eoff = sl_le64(h + 8);
        int64_t ts = (int64_t)sl_le64(h + 16);
        pos = bpos + at;
        if (eoff != off || sl_le32(h + 4) != stored_crc(h, len)) {
            bad = eoff != off ? "offset out of sequence" : "checksum mismatch", badpos = pos;
            goto torn;
        }
        if (g->nidx == 0 || pos - g->last_idx_pos >= ST_STREAM_INDEX_EVERY)
            idx_add(g, off, pos, ts);
        if (lw & CHUNK_BIT)
            s->last_chunk = off;
        g->last_ts = ts;
        if (ts > s->last_ts)
            s->last_ts = ts;
        off++;
        at += ST_STREAM_ENTRY_HDR + len;
    }
    g->size = g->dsize = g->verified = fsize;
    g->end_off = g->dend = off;
    return 0;
torn:
    if (!last) {
        snprintf(err, errlen, "%s/%s: offset %" PRIu64 ": %s", s->dir, name, badpos, bad);
        return -1;
    }
    sl_warn("stream %s/%s: offset %" PRIu64 ": %s: torn tail truncated", s->dir, name, badpos, bad);
    if (badpos < ST_STREAM_FILE_HDR)
        badpos = 0;
    if (ftruncate(g->fd, (off_t)badpos) < 0) {
        snprintf(err, errlen, "%s/%s: truncate: %s", s->dir, name, strerror(errno));
        return -1;
    }
    FOP(ST_FOP_TRUNCATE, s->dir, name, badpos, NULL, 0);
    if (!s->opt.no_sync) {
        if (fsync(g->fd) < 0) {
            snprintf(err, errlen, "%s/%s: truncate: %s", s->dir, name, strerror(errno));
            return -1;
        }
        FOP(ST_FOP_SYNC, s->dir, name, 0, NULL, 0);
    }
    g->size = g->dsize = badpos;
    g->verified = badpos < ST_STREAM_FILE_HDR ? ST_STREAM_FILE_HDR : badpos;
    g->end_off = g->dend = off;
    if (badpos == 0) {
        g->nidx = 0;
        close(g->fd);
        g->fd = -1; /* remade (O_TRUNC) by the next batch, header first */
    }
    return 0;
}

/* A new stream's directory: its name in the parent made durable (the segments' own directory
 * fsyncs do not cover it), and both reported. 0, or -1 with err. */
static int made_dir(const char *dir, int no_sync, char *err, size_t errlen)
{
    FOP(ST_FOP_MKDIR, dir, "", 0, NULL, 0);
    if (no_sync)
        return 0;
    char parent[4096];
    const char *slash = strrchr(dir, '/');
    size_t pl = slash ? (size_t)(slash - dir) : 0;
    if (pl >= sizeof parent) {
        snprintf(err, errlen, "%s: name too long", dir);
        return -1;
    }
    if (slash && pl == 0)
        pl = 1; /* "/name" */
    if (slash)
        memcpy(parent, dir, pl);
    else
        parent[pl++] = '.';
    parent[pl] = 0;
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) < 0) {
        snprintf(err, errlen, "%s: fsync: %s", parent, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    FOP(ST_FOP_DIRSYNC, parent, "", 0, NULL, 0);
    return 0;
}

st_stream *st_stream_open(const char *dir, const st_stream_options *opt, char *err, size_t errlen)
{
    if (mkdir(dir, 0755) < 0) {
        if (errno != EEXIST) {
            snprintf(err, errlen, "%s: %s", dir, strerror(errno));
            return NULL;
        }
    } else if (made_dir(dir, opt && opt->no_sync, err, errlen) < 0) {
        return NULL;
    }
    st_stream *s = sl_xcalloc(1, sizeof *s);
    s->dir = sl_xstrdup(dir);
    if (opt)
        s->opt = *opt;
    s->last_ts = INT64_MIN;
    s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dirfd < 0) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        sl_free(s->dir);
        sl_free(s);
        return NULL;
    }
    DIR *d = fdopendir(dup(s->dirfd));
    uint64_t *firsts = NULL;
    size_t n = 0, cap = 0;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            uint64_t f;
            if (!parse_name(e->d_name, &f))
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                firsts = sl_xrealloc(firsts, cap * sizeof *firsts);
            }
            firsts[n++] = f;
        }
        closedir(d);
    }
    if (n > 1) /* a new stream has none: qsort wants a non-null base even for 0 */
        qsort(firsts, n, sizeof *firsts, cmp_u64);
    n = drop_unwritten_segments(s, firsts, n);
    size_t bcap = RECOVER_BUF;
    uint8_t *buf = sl_xmalloc(bcap);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        if (i > 0 && firsts[i] != s->segs[i - 1].end_off) {
            char name[32];
            seg_name(name, firsts[i]);
            snprintf(err, errlen,
                     "%s/%s: offset 0: first offset %" PRIu64 " does not follow %" PRIu64, dir,
                     name, firsts[i], s->segs[i - 1].end_off);
            ok = 0;
            break;
        }
        seg *g = push_seg(s, firsts[i]);
        if (recover_seg(s, g, i + 1 == n, &buf, &bcap, err, errlen) < 0)
            ok = 0;
    }
    sl_free(buf);
    sl_free(firsts);
    if (!ok) {
        st_stream_close(s);
        return NULL;
    }
    if (!s->nseg)
        push_seg(s, 0);
    s->next = s->end = s->segs[s->nseg - 1].end_off;
    if (s->last_chunk < s->segs[0].first)
        s->last_chunk = s->segs[0].first;
    s->vend = s->end; /* what a recovery finds is the stream (a promoted leader's too) */
    s->vlast_chunk = s->last_chunk;
    if (s->last_ts == INT64_MIN)
        s->last_ts = 0;
    return s;
}

void st_stream_close(st_stream *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nseg; i++)
        seg_drop(s, &s->segs[i], 0);
    sl_free(s->segs);
    sl_free(s->buf);
    sl_free(s->pend);
    sl_free(s->spare.buf);
    sl_free(s->spare.pc);
    st_stream_reader_free(&s->scan);
    sl_free(s->held);
    if (s->dirfd >= 0)
        close(s->dirfd);
    sl_free(s->dir);
    sl_free(s);
}

void st_stream_destroy(st_stream *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nseg; i++) {
        char name[32];
        seg_name(name, s->segs[i].first);
        if (unlinkat(s->dirfd, name, 0) == 0)
            FOP(ST_FOP_UNLINK, s->dir, name, 0, NULL, 0);
    }
    char *dir = sl_xstrdup(s->dir);
    st_stream_close(s);
    if (rmdir(dir) == 0)
        FOP(ST_FOP_RMDIR, dir, "", 0, NULL, 0);
    sl_free(dir);
}
