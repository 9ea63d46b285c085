/* log.c - the segmented record log (format and contract in log.h).
 *
 * Invariants:
 * - segs[] holds the live segments oldest first, by increasing number (st_loc.segment). The
 *   numbers are consecutive until TIDY deletes a segment in the middle, so the segment of an
 *   st_loc is found at segs[no - segs[0].no] or else by binary search. The last one is the
 *   current segment: the only one appends go to.
 * - holes[] is DIR/holes: sorted, disjoint sequence ranges of segments deleted with an older
 *   segment still present. Written (durably) before such a segment's file goes.
 * - Every segment has `size` bytes in its file, `wend - size` more bytes in the batch being
 *   written (the in-flight buffer fbuf, from offset `foff`), and `end - wend` more bytes in
 *   the append buffer, from offset `boff`. Only a suffix of segs[] has pending bytes and
 *   their pending bytes lie in the buffer in segment order, so a commit is one pwrite (two
 *   when the batch crossed a rollover) and one fdatasync per touched file.
 * - A commit is a batch: st_log_batch_begin (loop thread) moves the append buffer into the
 *   in-flight buffer and describes the writes; st_log_batch_run (any thread, e.g. the sync
 *   thread) does them touching nothing but the batch; st_log_batch_end (loop thread) applies
 *   the outcome. At most one batch is in flight; appends and reads go on meanwhile, since
 *   the in-flight bytes are immutable until the batch ends.
 * - A record lies wholly in the file or wholly in the buffer (a commit writes whole
 *   batches), and never spans segments.
 * - A segment made by a rollover exists only in memory (fd -1, its header in the buffer)
 *   until the commit that creates the file, so appends never touch the disk.
 * - A segment TIDY deletes (st_log_reclaim_marked) is unlinked on the loop thread, in the
 *   order the reclaim rule needs, but its descriptor is closed and the directory fsync'ed by
 *   the next batch's run, off the loop: the close of a file's last descriptor is when the
 *   file system frees its blocks (tens of ms for a 64 MiB segment on ext4, half a second for
 *   a TIDY that frees 1 GB), and that must not stall every connection. Until then the
 *   descriptors wait in `doomed`, and dir_unsynced says the unlinks are not durable yet: a
 *   kill before that batch leaves what a kill between two unlinks always could.
 * - After any failed write or sync, failed_errno is set for good: the disk state is unknown,
 *   and the next open's recovery (torn-tail truncation) is the only way to learn it.
 */
#include "store/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/le.h"
#include "core/log.h"
#include "core/mem.h"

#define HDR_SIZE 16 /* file header: magic[8], version u32, reserved u32 */
#define REC_HDR 17  /* record header: length u32, crc u32, seq u64, type u8 */
#define FORMAT_VERSION 1
#define DEFAULT_SEGMENT_SIZE (64u << 20)
#define SEG_NAME_LEN 24           /* 20 digits + ".seg" */
#define BUF_KEEP_MAX (64u << 20)  /* a bigger append buffer is freed after its commit */
#define PREALLOC_CHUNK (4u << 20) /* space reserved ahead of the writes of a segment */

static const uint8_t MAGIC[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'G'};

ssize_t (*st_log__pwrite)(int fd, const void *p, size_t n, off_t off) = pwrite;
int (*st_log__fdatasync)(int fd) = fdatasync;

/* The file operation observer (log.h). Read with an acquire load, so installing it while a
 * sync thread runs is not a race; NULL costs the caller one load and a branch. */
static st_fop_fn obs_fn;
static void *obs_ctx;

void st_log_set_observer(st_fop_fn fn, void *ctx)
{
    if (fn)
        __atomic_store_n(&obs_ctx, ctx, __ATOMIC_RELAXED);
    __atomic_store_n(&obs_fn, fn, __ATOMIC_RELEASE);
}

static void fop_report(st_fop_fn fn, int kind, const char *dir, const char *name, const char *name2,
                       uint64_t arg, const void *data, size_t len)
{
    st_fop op = {kind, dir, name, name2, arg, data, len};
    fn(__atomic_load_n(&obs_ctx, __ATOMIC_RELAXED), &op);
}

/* Report one operation (after it succeeded) when an observer is installed. */
#define FOP(kind, dir, name, name2, arg, data, len)                                                \
    do {                                                                                           \
        st_fop_fn fn_ = __atomic_load_n(&obs_fn, __ATOMIC_ACQUIRE);                                \
        if (fn_)                                                                                   \
            fop_report(fn_, kind, dir, name, name2, arg, data, len);                               \
    } while (0)

void st_fop_report(int kind, const char *dir, const char *name, const char *name2, uint64_t arg,
                   const void *data, size_t len)
{
    FOP(kind, dir, name, name2, arg, data, len);
}

typedef struct seg {
    uint32_t no;        /* st_loc.segment */
    uint64_t first_seq; /* from the file name */
    int fd;             /* -1 until the commit that creates the file */
    uint64_t size;      /* bytes in the file (written by a batch that has ended) */
    uint64_t wend;      /* size + bytes the in-flight batch is writing (from fbuf + foff) */
    uint64_t end;       /* wend + bytes pending in the append buffer (from buf + boff) */
    size_t foff;        /* in-flight buffer offset of the bytes being written */
    size_t boff;        /* buffer offset of the pending bytes (valid while end > wend) */
    uint64_t refs;
    uint8_t unsynced; /* written by st_log_flush, not yet fdatasync'ed */
    uint8_t in_batch; /* the in-flight batch writes or syncs it */
    uint64_t alloc;   /* bytes of the file reserved so far (fallocate, size kept) */
    uint32_t floor;   /* oldest segment its records depend on (0: none but itself) */
    uint8_t marked;   /* unreferenced at the last st_log_mark_dead, not referenced since */
    char name[SEG_NAME_LEN + 1];
} seg;

typedef struct hole {
    uint64_t first, end; /* sequence numbers [first, end) of deleted segments */
} hole;

struct st_log {
    char *dir;
    int dirfd;
    st_log_options opt;
    seg *segs;
    size_t nsegs, cap;
    uint32_t next_no;
    hole *holes;
    size_t nholes;
    sl_buf buf;                 /* appended, not yet handed to a batch */
    sl_buf fbuf;                /* the in-flight batch's bytes (immutable until it ends) */
    struct st_log_batch *batch; /* the batch object (reused); busy while in flight */
    int in_flight;
    /* A batch failed for lack of space (ENOSPC, EDQUOT): its bytes are still in fbuf (and
     * readable there), and the next batch writes them again together with what was appended
     * since. Not a failure of the log: space may come back. */
    int stalled;
    int stall_warned; /* the stall was logged (once, until a batch gets through) */
    int dir_unsynced; /* a segment file made or unlinked, the directory not fsync'ed since */
    int *doomed;      /* descriptors of unlinked segments, for the next batch to close */
    size_t ndoomed, capdoomed;
    uint64_t next_seq;
    uint64_t durable_seq;
    int failed_errno;
    uint64_t records_written, commits;
    uint64_t bytes_appended; /* since open: what the disk will have to take */
    uint64_t released;       /* since open: times a segment's references fell to 0 */
    uint8_t *rbuf;           /* recovery: the window into the segment replayed (window_need) */
    size_t rcap;
    char *torn; /* read-only opens: the torn tail left in place */
    /* Read-ahead for st_log_read: a window of a segment's written bytes (immutable once
     * written, and segment numbers are never reused, so it never goes stale while the
     * segment is live), filled when reads walk forward through a segment, as paging in a
     * queue and recovery do. */
    uint8_t *ra_buf;
    uint32_t ra_seg;         /* segment of the window (0: none) */
    uint64_t ra_off, ra_len; /* the window: [ra_off, ra_off + ra_len) */
    uint32_t ra_last_seg;    /* where the previous read ended */
    uint64_t ra_last_end;
};

#define RA_WINDOW (128u * 1024) /* bytes per read-ahead */
#define RA_GAP (256u * 1024)    /* a read this far past the previous one still counts as forward */

/* ------------------------------------------------------------------ small helpers */

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void panic(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void panic(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("sluice: store: fatal: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static seg *find_seg(const st_log *l, uint32_t no)
{
    if (l->nsegs == 0 || no < l->segs[0].no)
        return NULL;
    size_t i = no - l->segs[0].no;
    if (i < l->nsegs && l->segs[i].no == no)
        return &l->segs[i];                          /* no segment deleted below it */
    size_t lo = 0, hi = l->nsegs < i ? l->nsegs : i; /* segs[k].no >= segs[0].no + k */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->segs[mid].no < no)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < l->nsegs && l->segs[lo].no == no ? &l->segs[lo] : NULL;
}

static seg *cur_seg(st_log *l)
{
    return &l->segs[l->nsegs - 1];
}

static seg *add_seg(st_log *l, uint64_t first_seq, int fd)
{
    if (l->nsegs == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->segs = sl_xrealloc(l->segs, l->cap * sizeof *l->segs);
    }
    seg *s = &l->segs[l->nsegs++];
    memset(s, 0, sizeof *s);
    s->no = l->next_no++;
    s->first_seq = first_seq;
    s->fd = fd;
    snprintf(s->name, sizeof s->name, "%020" PRIu64 ".seg", first_seq);
    return s;
}

/* Reserve n pending bytes at the end of segment s (which must be the last one with pending
 * bytes) and return where to write them. The pointer is valid until the next reserve. */
static uint8_t *pend(st_log *l, seg *s, size_t n)
{
    if (s->end == s->wend)
        s->boff = l->buf.len;
    uint8_t *p = sl_buf_reserve(&l->buf, n);
    l->buf.len += n;
    s->end += n;
    return p;
}

static void pend_header(st_log *l, seg *s)
{
    uint8_t *p = pend(l, s, HDR_SIZE);
    memcpy(p, MAGIC, 8);
    sl_put_le32(p + 8, FORMAT_VERSION);
    sl_put_le32(p + 12, 0);
}

/* A segment made here has no file yet: the commit that first writes it creates it. */
static void roll(st_log *l)
{
    /* the segment left behind may have lost its last reference while it was current */
    if (l->nsegs && cur_seg(l)->refs == 0)
        l->released++;
    pend_header(l, add_seg(l, l->next_seq, -1));
}

static void fail(st_log *l, const char *what, const char *name)
{
    l->failed_errno = errno ? errno : EIO;
    sl_error("%s/%s: %s: %s; the log is failed until restart", l->dir, name, what,
             strerror(l->failed_errno));
    errno = l->failed_errno;
}

/* 20 digits + ".seg"; 0 and the value, or -1 for any other name. */
static int parse_name(const char *name, uint64_t *seq)
{
    if (strlen(name) != SEG_NAME_LEN || strcmp(name + 20, ".seg") != 0)
        return -1;
    uint64_t v = 0;
    for (int i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        unsigned d = (unsigned)(name[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *seq = v;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void batch_free(st_log_batch *b);
static int write_all(int fd, const uint8_t *p, size_t n, uint64_t off);

/* ------------------------------------------------------------------ holes */

#define HOLES_NAME "holes"
#define HOLES_TMP "holes.tmp"
static const uint8_t HOLES_MAGIC[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'H', 'L'};

/* 1 when the holes cover every sequence number of [first, end). */
static int holes_cover(const st_log *l, uint64_t first, uint64_t end)
{
    for (size_t i = 0; i < l->nholes && first < end; i++)
        if (l->holes[i].first <= first && l->holes[i].end > first)
            first = l->holes[i].end;
    return first >= end;
}

/* Read DIR/holes (absent: none). -1 with err on a damaged file. */
static int load_holes(st_log *l, char *err, size_t errlen)
{
    int fd = openat(l->dirfd, HOLES_NAME, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        seterr(err, errlen, "%s/%s: open: %s", l->dir, HOLES_NAME, strerror(errno));
        return -1;
    }
    struct stat st;
    uint8_t *p = NULL;
    int rc = -1;
    if (fstat(fd, &st) < 0) {
        seterr(err, errlen, "%s/%s: stat: %s", l->dir, HOLES_NAME, strerror(errno));
        goto out;
    }
    size_t size = (size_t)st.st_size;
    if (size < 20 || size > (64u << 20)) {
        seterr(err, errlen, "%s/%s: offset 0: bad size %zu", l->dir, HOLES_NAME, size);
        errno = EILSEQ;
        goto out;
    }
    p = sl_xmalloc(size);
    ssize_t n;
    while ((n = pread(fd, p, size, 0)) < 0 && errno == EINTR)
        ;
    if (n != (ssize_t)size) {
        seterr(err, errlen, "%s/%s: read: %s", l->dir, HOLES_NAME,
               n < 0 ? strerror(errno) : "short read");
        goto out;
    }
    uint32_t count = sl_le32(p + 12);
    if (memcmp(p, HOLES_MAGIC, 8) != 0 || sl_le32(p + 8) != 1) {
        seterr(err, errlen, "%s/%s: offset 0: bad magic or version", l->dir, HOLES_NAME);
        errno = EILSEQ;
        goto out;
    }
    if ((uint64_t)count * 16 + 20 != size) {
        seterr(err, errlen, "%s/%s: offset 12: %" PRIu32 " holes do not fit %zu bytes", l->dir,
               HOLES_NAME, count, size);
        errno = EILSEQ;
        goto out;
    }
    if (st_crc32c(0, p, size - 4) != sl_le32(p + size - 4)) {
        seterr(err, errlen, "%s/%s: offset %zu: checksum mismatch", l->dir, HOLES_NAME, size - 4);
        errno = EILSEQ;
        goto out;
    }
    l->holes = sl_xmalloc((count ? count : 1) * sizeof *l->holes);
    for (uint32_t i = 0; i < count; i++) {
        hole h = {sl_le64(p + 16 + 16 * (size_t)i), sl_le64(p + 24 + 16 * (size_t)i)};
        if (h.first >= h.end || (i && h.first < l->holes[i - 1].end)) {
            seterr(err, errlen, "%s/%s: offset %zu: holes out of order", l->dir, HOLES_NAME,
                   16 + 16 * (size_t)i);
            errno = EILSEQ;
            goto out;
        }
        l->holes[i] = h;
    }
    l->nholes = count;
    rc = 0;
out:
    sl_free(p);
    close(fd);
    return rc;
}

/* Make v[0..n) (sorted, disjoint) the durable content of DIR/holes: written aside, synced,
 * renamed over the old one, the directory synced. None left: the file goes. 0 or -1 (errno). */
static int save_holes(st_log *l, const hole *v, size_t n)
{
    int sync = !l->opt.no_sync;
    if (n == 0) {
        if (unlinkat(l->dirfd, HOLES_NAME, 0) < 0 && errno != ENOENT)
            return -1;
        FOP(ST_FOP_UNLINK, l->dir, HOLES_NAME, NULL, 0, NULL, 0);
    } else {
        size_t size = 20 + 16 * n;
        uint8_t *p = sl_xmalloc(size);
        memcpy(p, HOLES_MAGIC, 8);
        sl_put_le32(p + 8, 1);
        sl_put_le32(p + 12, (uint32_t)n);
        for (size_t i = 0; i < n; i++) {
            sl_put_le64(p + 16 + 16 * i, v[i].first);
            sl_put_le64(p + 24 + 16 * i, v[i].end);
        }
        sl_put_le32(p + size - 4, st_crc32c(0, p, size - 4));
        int fd = openat(l->dirfd, HOLES_TMP, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0)
            FOP(ST_FOP_CREATE, l->dir, HOLES_TMP, NULL, 1, NULL, 0);
        int ok = fd >= 0 && write_all(fd, p, size, 0) == 0;
        if (ok)
            FOP(ST_FOP_WRITE, l->dir, HOLES_TMP, NULL, 0, p, size);
        ok = ok && (!sync || fsync(fd) == 0);
        if (ok && sync)
            FOP(ST_FOP_SYNC, l->dir, HOLES_TMP, NULL, 0, NULL, 0);
        int e = errno;
        if (fd >= 0)
            close(fd);
        sl_free(p);
        if (!ok || renameat(l->dirfd, HOLES_TMP, l->dirfd, HOLES_NAME) < 0) {
            if (ok)
                e = errno;
            if (unlinkat(l->dirfd, HOLES_TMP, 0) == 0)
                FOP(ST_FOP_UNLINK, l->dir, HOLES_TMP, NULL, 0, NULL, 0);
            errno = e;
            return -1;
        }
        FOP(ST_FOP_RENAME, l->dir, HOLES_TMP, HOLES_NAME, 0, NULL, 0);
    }
    if (sync && fsync(l->dirfd) < 0)
        return -1;
    if (sync)
        FOP(ST_FOP_DIRSYNC, l->dir, "", NULL, 0, NULL, 0);
    if (n > l->nholes || !l->holes)
        l->holes = sl_xrealloc(l->holes, (n ? n : 1) * sizeof *l->holes);
    if (n)
        memmove(l->holes, v, n * sizeof *v);
    l->nholes = n;
    return 0;
}

/* ------------------------------------------------------------------ recovery */

typedef struct recovery {
    st_log *l;
    st_replay_fn fn;
    void *ctx;
    char *err;
    size_t errlen;
    int have_base;
    uint64_t expected; /* seq the next record must carry */
} recovery;

/* Is there a record that checks out (sane length inside the file, plausible seq, good CRC)
 * anywhere after the damaged one at off? If so the damage is not a torn tail: a crash during
 * a write leaves bad bytes only at the end, so valid data behind them means corruption.
 * Returns its offset, or 0. The seq filter keeps this linear in practice. */
static uint64_t valid_record_after(const uint8_t *p, uint64_t size, uint64_t off, uint64_t expected)
{
    uint64_t span = (size - off) / REC_HDR + 1;
    for (uint64_t o = off + 1; o + REC_HDR <= size; o++) {
        uint32_t len = sl_le32(p + o);
        if (len == 0 || len > ST_LOG_MAX_RECORD || (uint64_t)len + 16 > size - o)
            continue;
        uint64_t seq = sl_le64(p + o + 8);
        if (seq < expected || seq - expected > span)
            continue;
        if (st_crc32c(0, p + o + 8, 8 + (size_t)len) == sl_le32(p + o + 4))
            return o;
    }
    return 0;
}

/* Cut the newest segment back to off (or, read-only, just remember that it should be). */
static int torn_tail(recovery *r, seg *s, uint64_t off, uint64_t size, const char *what)
{
    st_log *l = r->l;
    char msg[512];
    snprintf(msg, sizeof msg, "%s/%s: offset %" PRIu64 ": torn tail (%s, %" PRIu64 " bytes)",
             l->dir, s->name, off, what, size - off);
    if (l->opt.read_only) {
        sl_free(l->torn);
        l->torn = sl_xstrdup(msg);
        return 0;
    }
    if (ftruncate(s->fd, (off_t)off) < 0 || fsync(s->fd) < 0) {
        seterr(r->err, r->errlen, "%s/%s: truncating torn tail at offset %" PRIu64 ": %s", l->dir,
               s->name, off, strerror(errno));
        return -1;
    }
    FOP(ST_FOP_TRUNCATE, l->dir, s->name, NULL, off, NULL, 0);
    FOP(ST_FOP_SYNC, l->dir, s->name, NULL, 0, NULL, 0);
    sl_warn("%s: truncated", msg);
    return 0;
}

static int corrupt(recovery *r, seg *s, uint64_t off, const char *what)
{
    seterr(r->err, r->errlen, "%s/%s: offset %" PRIu64 ": %s", r->l->dir, s->name, off, what);
    errno = EILSEQ;
    return -1;
}

/* Recovery reads each segment through a window of WINDOW bytes it reuses, rather than
 * mapping the file: a replay touches every record header, and through a mapping each 4 KiB
 * page costs a fault and a TLB miss (in this VM, two-level). 1.1 GB of acked 1 KiB messages
 * replayed ~30% faster so (perf: copying out of the page cache costs less than the faults it
 * saves, and the CRC32C then runs on bytes the copy left in the cache). The window is small
 * because fresh memory is costly on first touch here (64 MiB: 90-190 ms); it grows only for a
 * record longer than it, and is freed when the open ends. A cold disk reads the next segment
 * ahead while this one replays (st_log_open's POSIX_FADV_WILLNEED). */
#define WINDOW (8u << 20)

typedef struct window {
    int fd;
    uint64_t size; /* of the file */
    uint64_t base; /* file offset of l->rbuf[0] */
    size_t have;   /* bytes of the file in l->rbuf */
} window;

static void free_rbuf(st_log *l)
{
    sl_free(l->rbuf);
    l->rbuf = NULL;
    l->rcap = 0;
}

/* Make the n bytes at file offset off (off + n <= the file's size) readable at
 * l->rbuf + (off - w->base): what the window holds from off on moves to its start, then it is
 * filled from the file. 0, or -1 with errno. */
static int window_need(st_log *l, window *w, uint64_t off, uint64_t n)
{
    if (off >= w->base && off + n <= w->base + w->have)
        return 0;
    size_t keep = 0;
    if (off >= w->base && off < w->base + w->have) {
        keep = (size_t)(w->base + w->have - off);
        memmove(l->rbuf, l->rbuf + (off - w->base), keep);
    }
    if (l->rcap < n || l->rcap < WINDOW) {
        size_t cap = n > WINDOW ? (size_t)n : WINDOW;
        uint8_t *b = sl_xmalloc(cap);
        if (keep) /* none on the first call: rbuf is NULL, and memcpy's source must not be */
            memcpy(b, l->rbuf, keep);
        sl_free(l->rbuf);
        l->rbuf = b;
        l->rcap = cap;
    }
    w->base = off;
    w->have = keep;
    uint64_t want = w->size - off < l->rcap ? w->size - off : l->rcap;
    /* Bounded: each pass reads at least one byte or fails. */
    while (w->have < want) {
        ssize_t k =
            pread(w->fd, l->rbuf + w->have, (size_t)(want - w->have), (off_t)(off + w->have));
        if (k <= 0) {
            if (k == 0)
                errno = EIO; /* shorter than fstat said: nobody else writes it */
            return -1;
        }
        w->have += (size_t)k;
    }
    return 0;
}

/* Check the header, replay every record, and set s->size to the end of the last good
 * record (truncating a torn tail of the newest segment). */
static int recover_seg(recovery *r, seg *s, int newest)
{
    st_log *l = r->l;
    char what[160];
    struct stat st;
    if (fstat(s->fd, &st) < 0) {
        seterr(r->err, r->errlen, "%s/%s: stat: %s", l->dir, s->name, strerror(errno));
        return -1;
    }
    uint64_t size = (uint64_t)st.st_size;

    /* The file name is the seq of its first record, so it must continue the log. */
    if (!r->have_base) {
        r->have_base = 1;
        r->expected = s->first_seq;
    }
    if (s->first_seq > r->expected && holes_cover(l, r->expected, s->first_seq))
        r->expected = s->first_seq; /* segments TIDY deleted, as DIR/holes says */
    if (s->first_seq != r->expected) {
        snprintf(what, sizeof what,
                 "sequence gap: file name says seq %" PRIu64 " but the log continues at seq "
                 "%" PRIu64 " (missing segment?)",
                 s->first_seq, r->expected);
        return corrupt(r, s, 0, what);
    }

    if (size < HDR_SIZE) {
        /* Only the newest file may be cut short inside its header (crash right after the
         * file was created), and only if what is there is the start of a valid header. */
        uint8_t h[HDR_SIZE], want[HDR_SIZE];
        memcpy(want, MAGIC, 8);
        sl_put_le32(want + 8, FORMAT_VERSION);
        ssize_t n = size ? pread(s->fd, h, (size_t)size, 0) : 0;
        if (n != (ssize_t)size) {
            seterr(r->err, r->errlen, "%s/%s: read: %s", l->dir, s->name,
                   n < 0 ? strerror(errno) : "short read");
            return -1;
        }
        if (!newest || memcmp(h, want, (size_t)(size < 12 ? size : 12)) != 0) {
            snprintf(what, sizeof what, "truncated file header (%" PRIu64 " bytes)", size);
            return corrupt(r, s, 0, what);
        }
        s->size = s->wend = s->end = 0;
        return size ? torn_tail(r, s, 0, size, "partial file header") : 0;
    }

    window w = {s->fd, size, 0, 0};
    const uint8_t *q; /* the bytes at off, in the window */
    if (window_need(l, &w, 0, HDR_SIZE) < 0) {
        seterr(r->err, r->errlen, "%s/%s: read: %s", l->dir, s->name, strerror(errno));
        return -1;
    }
    q = l->rbuf;
    if (memcmp(q, MAGIC, 8) != 0)
        return corrupt(r, s, 0, "bad magic (not a sluice segment)");
    if (sl_le32(q + 8) != FORMAT_VERSION) {
        snprintf(what, sizeof what, "unsupported format version %" PRIu32 " (this build reads %d)",
                 sl_le32(q + 8), FORMAT_VERSION);
        return corrupt(r, s, 8, what);
    }

    uint64_t off = HDR_SIZE;
    while (off < size) {
        uint64_t rem = size - off;
        if (rem < REC_HDR) {
            snprintf(what, sizeof what, "truncated record header");
            goto bad;
        }
        if (window_need(l, &w, off, REC_HDR) < 0)
            goto ioerr;
        q = l->rbuf + (off - w.base);
        uint32_t len = sl_le32(q);
        if (len == 0 || len > ST_LOG_MAX_RECORD) {
            snprintf(what, sizeof what, "bad record length %" PRIu32, len);
            goto bad;
        }
        if ((uint64_t)len + 16 > rem) {
            snprintf(what, sizeof what, "record length %" PRIu32 " runs past the end of the file",
                     len);
            goto bad;
        }
        if (window_need(l, &w, off, 16 + (uint64_t)len) < 0)
            goto ioerr;
        q = l->rbuf + (off - w.base);
        uint64_t seq = sl_le64(q + 8);
        if (st_crc32c(0, q + 8, 8 + (size_t)len) != sl_le32(q + 4)) {
            snprintf(what, sizeof what, "checksum mismatch");
            goto bad;
        }
        if (seq != r->expected) {
            snprintf(what, sizeof what,
                     "sequence gap: expected seq %" PRIu64 ", found seq %" PRIu64, r->expected,
                     seq);
            return corrupt(r, s, off, what);
        }
        st_loc loc = {s->no, off};
        int cb = r->fn ? r->fn(r->ctx, seq, q[16], q + REC_HDR, len - 1, loc) : 0;
        if (cb) {
            if (r->err && r->errlen && !r->err[0])
                seterr(r->err, r->errlen,
                       "%s/%s: offset %" PRIu64 ": replay stopped at seq %" PRIu64 " (%d)", l->dir,
                       s->name, off, seq, cb);
            errno = ECANCELED;
            return -1;
        }
        r->expected++;
        off += 16 + (uint64_t)len;
    }
    s->size = s->wend = s->end = off;
    return 0;

ioerr:
    seterr(r->err, r->errlen, "%s/%s: offset %" PRIu64 ": read: %s", l->dir, s->name, off,
           strerror(errno));
    return -1;

bad:
    if (!newest)
        return corrupt(r, s, off, what);
    /* Torn tail or corruption? Whatever follows decides (valid_record_after): the rare path,
     * through a mapping of the whole file. */
    uint8_t *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, s->fd, 0);
    if (p == MAP_FAILED) { /* cannot tell: nothing is cut */
        seterr(r->err, r->errlen, "%s/%s: offset %" PRIu64 ": %s; mmap to look past it: %s", l->dir,
               s->name, off, what, strerror(errno));
        return -1;
    }
    uint64_t next = valid_record_after(p, size, off, r->expected);
    munmap(p, (size_t)size);
    if (next) {
        size_t wl = strlen(what);
        snprintf(what + wl, sizeof what - wl, " (a valid record follows at offset %" PRIu64 ")",
                 next);
        return corrupt(r, s, off, what);
    }
    s->size = s->wend = s->end = off;
    return torn_tail(r, s, off, size, what);
}

/* Sorted segment file names of dir, or -1 with err. */
static int list_segments(st_log *l, char ***names_out, size_t *n_out, char *err, size_t errlen)
{
    int fd = dup(l->dirfd);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        seterr(err, errlen, "%s: opendir: %s", l->dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        uint64_t seq;
        if (nl < 4 || strcmp(de->d_name + nl - 4, ".seg") != 0)
            continue; /* not ours: editors' and admins' files are left alone */
        if (parse_name(de->d_name, &seq) < 0) {
            seterr(err, errlen, "%s/%s: offset 0: not a segment file name (want 20 digits.seg)",
                   l->dir, de->d_name);
            rc = -1;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            names = sl_xrealloc(names, cap * sizeof *names);
        }
        names[n++] = sl_xstrdup(de->d_name);
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_names); /* fixed width: name order = seq order */
    *names_out = names;
    *n_out = n;
    return rc;
}

st_log *st_log_open(const char *dir, const st_log_options *opt, st_replay_fn fn, void *ctx,
                    char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    st_log *l = sl_xcalloc(1, sizeof *l);
    if (opt)
        l->opt = *opt;
    if (!l->opt.segment_size)
        l->opt.segment_size = DEFAULT_SEGMENT_SIZE;
    l->dir = sl_xstrdup(dir);
    l->dirfd = -1;
    l->next_no = 1; /* 0 is never a live segment: catches zeroed st_locs */
    sl_buf_init(&l->buf);
    sl_buf_init(&l->fbuf);
    int ro = l->opt.read_only;
    char **names = NULL;
    size_t nnames = 0;

    if (!ro && mkdir(dir, 0755) < 0 && errno != EEXIST) {
        seterr(err, errlen, "%s: mkdir: %s", dir, strerror(errno));
        goto fail;
    }
    if (!ro) /* made now or before: a mirror that lacks it makes it */
        FOP(ST_FOP_MKDIR, dir, "", NULL, 0, NULL, 0);
    l->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (l->dirfd < 0) {
        seterr(err, errlen, "%s: open: %s", dir, strerror(errno));
        goto fail;
    }
    /* Two writers on one log would interleave records: the second open is refused. */
    if (!ro && flock(l->dirfd, LOCK_EX | LOCK_NB) < 0) {
        seterr(err, errlen, "%s: locked by another process (%s)", dir, strerror(errno));
        goto fail;
    }
    if (load_holes(l, err, errlen) < 0 || list_segments(l, &names, &nnames, err, errlen) < 0)
        goto fail;

    recovery r = {l, fn, ctx, err, errlen, 0, 0};
    for (size_t i = 0; i < nnames; i++) {
        uint64_t first;
        parse_name(names[i], &first);
        int fd = openat(l->dirfd, names[i], (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
        if (fd < 0) {
            seterr(err, errlen, "%s/%s: open: %s", dir, names[i], strerror(errno));
            goto fail;
        }
        if (i + 1 < nnames) { /* a cold disk reads the next one while this one replays */
            int nfd = openat(l->dirfd, names[i + 1], O_RDONLY | O_CLOEXEC);
            if (nfd >= 0) {
                posix_fadvise(nfd, 0, 0, POSIX_FADV_WILLNEED);
                close(nfd);
            }
        }
        seg *s = add_seg(l, first, fd);
        if (recover_seg(&r, s, i == nnames - 1) < 0)
            goto fail;
    }
    free_rbuf(l);
    l->next_seq = r.have_base ? r.expected : 1;
    /* A number in a hole may still be in a file left behind: none is handed out again. The
     * records go on in a new segment named after the hole then, so no file has a gap. */
    int jumped = l->nholes && l->holes[l->nholes - 1].end > l->next_seq;
    if (jumped)
        l->next_seq = l->holes[l->nholes - 1].end;
    l->durable_seq = l->next_seq - 1;

    /* What recovery replayed may still sit only in the page cache (the crash may have been
     * the process's, not the machine's): make it durable before anyone relies on it. */
    if (!ro && !l->opt.no_sync && l->nsegs && cur_seg(l)->fd >= 0 &&
        (fdatasync(cur_seg(l)->fd) < 0 || fsync(l->dirfd) < 0)) {
        seterr(err, errlen, "%s: sync after recovery: %s", dir, strerror(errno));
        goto fail;
    }
    if (!ro && !l->opt.no_sync && l->nsegs && cur_seg(l)->fd >= 0) {
        FOP(ST_FOP_SYNC, dir, cur_seg(l)->name, NULL, 0, NULL, 0);
        FOP(ST_FOP_DIRSYNC, dir, "", NULL, 0, NULL, 0);
    }
    if (l->nsegs == 0) {
        roll(l);
    } else if (!ro) {
        if (cur_seg(l)->size < HDR_SIZE)
            pend_header(l, cur_seg(l)); /* the file was empty: the next commit writes it */
        if (jumped)
            roll(l);
    }
    for (size_t i = 0; i < nnames; i++)
        sl_free(names[i]);
    sl_free(names);
    return l;

fail:;
    int saved = errno;
    for (size_t i = 0; i < nnames; i++)
        sl_free(names[i]);
    sl_free(names);
    st_log_close(l);
    errno = saved ? saved : EIO;
    return NULL;
}

void st_log_close(st_log *l)
{
    if (!l)
        return;
    free_rbuf(l); /* an open that failed during recovery */
    if (l->in_flight)
        panic("%s: closed with a batch in flight", l->dir);
    for (size_t i = 0; i < l->nsegs; i++) {
        seg *s = &l->segs[i];
        if (s->fd < 0)
            continue;
        /* Give back what was reserved and never written (the current segment's tail): a node
         * that is not running holds no more disk than its records. */
        /* only what this process reserved past what it wrote (alloc is 0 for a segment it
         * only recovered, whatever happened to the open) */
        if (!l->opt.read_only && s->alloc > s->size && s->alloc != UINT64_MAX) {
            if (ftruncate(s->fd, (off_t)s->size) < 0) /* to its size: frees the blocks past it */
                sl_debug("%s/%s: ftruncate: %s", l->dir, s->name, strerror(errno));
            else
                FOP(ST_FOP_TRUNCATE, l->dir, s->name, NULL, s->size, NULL, 0);
        }
        close(s->fd);
    }
    /* TIDY's deletions that no batch took: made durable and their blocks freed now. */
    if (l->dir_unsynced && !l->opt.read_only && !l->opt.no_sync && l->dirfd >= 0) {
        if (fsync(l->dirfd) < 0)
            sl_warn("%s: fsync of the directory: %s", l->dir, strerror(errno));
        else
            FOP(ST_FOP_DIRSYNC, l->dir, "", NULL, 0, NULL, 0);
    }
    for (size_t i = 0; i < l->ndoomed; i++)
        close(l->doomed[i]);
    sl_free(l->doomed);
    if (l->dirfd >= 0)
        close(l->dirfd); /* also drops the flock */
    sl_buf_free(&l->buf);
    sl_buf_free(&l->fbuf);
    batch_free(l->batch);
    sl_free(l->segs);
    sl_free(l->holes);
    sl_free(l->torn);
    sl_free(l->ra_buf);
    sl_free(l->dir);
    sl_free(l);
}

/* Walk the records of every live segment that are in the file again, in order (recovery's
 * second pass). They were checked when the log was opened; they are checked again. */
int st_log_scan(st_log *l, st_replay_fn fn, void *ctx, char *err, size_t errlen)
{
    for (size_t i = 0; i < l->nsegs; i++) {
        seg *s = &l->segs[i];
        if (s->fd < 0 || s->size <= HDR_SIZE)
            continue;
        uint8_t *p = mmap(NULL, (size_t)s->size, PROT_READ, MAP_PRIVATE, s->fd, 0);
        if (p == MAP_FAILED) {
            seterr(err, errlen, "%s/%s: mmap: %s", l->dir, s->name, strerror(errno));
            return -1;
        }
        madvise(p, (size_t)s->size, MADV_SEQUENTIAL);
        uint64_t off = HDR_SIZE;
        int rc = 0;
        while (off + REC_HDR <= s->size) {
            uint32_t len = sl_le32(p + off);
            if (len == 0 || off + 16 + (uint64_t)len > s->size ||
                st_crc32c(0, p + off + 8, 8 + (size_t)len) != sl_le32(p + off + 4)) {
                seterr(err, errlen,
                       "%s/%s: offset %" PRIu64 ": checksum mismatch on a second "
                       "read (the file changed under the broker?)",
                       l->dir, s->name, off);
                rc = -1;
                break;
            }
            st_loc loc = {s->no, off};
            if (fn(ctx, sl_le64(p + off + 8), p[off + 16], p + off + REC_HDR, len - 1, loc)) {
                errno = ECANCELED;
                rc = -1;
                break;
            }
            off += 16 + (uint64_t)len;
        }
        munmap(p, (size_t)s->size);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ append and commit */

uint64_t st_log_appendv(st_log *l, uint8_t type, const st_iov *iov, int n, st_loc *loc)
{
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (iov[i].len >= ST_LOG_MAX_RECORD - len) {
            errno = EMSGSIZE;
            return 0;
        }
        len += iov[i].len;
    }
    if (l->failed_errno || l->opt.read_only) {
        errno = l->failed_errno ? l->failed_errno : EROFS;
        return 0;
    }
    size_t reclen = REC_HDR + len;
    seg *s = cur_seg(l);
    if (s->end > HDR_SIZE && s->end + reclen > l->opt.segment_size) {
        roll(l);
        s = cur_seg(l);
    }
    uint64_t seq = l->next_seq++;
    if (loc) {
        loc->segment = s->no;
        loc->offset = s->end;
    }
    uint8_t *p = pend(l, s, reclen);
    sl_put_le32(p, (uint32_t)len + 1);
    sl_put_le64(p + 8, seq);
    p[16] = type;
    uint8_t *q = p + REC_HDR;
    for (int i = 0; i < n; i++) {
        if (iov[i].len)
            memcpy(q, iov[i].p, iov[i].len);
        q += iov[i].len;
    }
    sl_put_le32(p + 4, st_crc32c(0, p + 8, 9 + len));
    l->records_written++;
    l->bytes_appended += reclen;
    return seq;
}

uint64_t st_log_append(st_log *l, uint8_t type, const void *payload, size_t len, st_loc *loc)
{
    st_iov v = {payload, len};
    return st_log_appendv(l, type, &v, 1, loc);
}

/* ------------------------------------------------------------------ batches
 *
 * What a batch needs lives in the batch: the thread that runs it reads no log state. */

typedef struct batch_seg {
    uint32_t no;
    int fd; /* -1: the run creates the file `name` (and reports its fd back here) */
    uint8_t sync;
    uint8_t created;
    const uint8_t *data; /* bytes to write at off (NULL: sync only) */
    size_t len;
    uint64_t off;
    uint64_t alloc; /* reserved bytes of the file, in and out */
    char name[SEG_NAME_LEN + 1];
} batch_seg;

struct st_log_batch {
    int dirfd;
    const char *dir; /* the log's (for the file operation observer) */
    int no_sync;
    uint64_t prealloc; /* bytes reserved in a new segment file (fallocate, size kept) */
    int dir_sync;      /* fsync the directory even if this batch makes no file */
    int sync;          /* the batch makes everything it wrote durable */
    uint64_t last_seq; /* the newest record it covers */
    batch_seg *v;
    size_t n, cap;
    int *close_fds; /* unlinked segments' descriptors: closed by the run (blocks freed) */
    size_t nclose, capclose;
    /* outcome of the run */
    int err; /* errno of the failure, 0 on success */
    const char *what;
    char errname[SEG_NAME_LEN + 1];
};

static void batch_free(st_log_batch *b)
{
    if (!b)
        return;
    sl_free(b->v);
    sl_free(b->close_fds);
    sl_free(b);
}

/* pwrite all of it, through short writes and EINTR. */
static int write_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t w = st_log__pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static int sync_fd(int fd)
{
    int rc;
    /* EINTR means the call did not finish, not that writeback failed: asking again loses
     * no error report. Any other failure is final (the kernel may have dropped the pages). */
    while ((rc = st_log__fdatasync(fd)) < 0 && errno == EINTR)
        ;
    return rc;
}

/* Describe the writes of everything buffered. With sync, everything written (now or by
 * earlier flushes) is fdatasync'ed. Without, only the newest segment may be left unsynced:
 * an older one is synced before a newer file is created, so a crash can tear only the
 * newest segment, the one place recovery accepts a torn tail. */
/* After a stall: one pending buffer again, the stalled bytes first. Segments are written in
 * order and a batch covers a suffix of them, so what was appended meanwhile (for the stalled
 * batch's last segment and newer ones) continues right after the stalled bytes. */
static void unstall(st_log *l)
{
    size_t moved = l->fbuf.len;
    sl_buf_append(&l->fbuf, sl_buf_head(&l->buf), sl_buf_unread(&l->buf));
    for (size_t i = 0; i < l->nsegs; i++) {
        seg *s = &l->segs[i];
        if (s->end == s->size)
            continue;
        if (s->wend > s->size)
            s->boff = s->foff; /* its stalled bytes, then (contiguous) its newer ones */
        else
            s->boff += moved;
        s->wend = s->size;
    }
    sl_buf t = l->buf;
    l->buf = l->fbuf;
    l->fbuf = t;
    l->fbuf.len = l->fbuf.off = 0;
    l->stalled = 0;
}

int st_log_stalled(const st_log *l)
{
    return l->stalled;
}

int st_log_failed(const st_log *l)
{
    return l->failed_errno != 0;
}

int st_log_batch_begin(st_log *l, int sync, st_log_batch **out)
{
    *out = NULL;
    if (l->in_flight)
        panic("%s: a second batch begun while one is in flight", l->dir);
    if (l->failed_errno) {
        errno = l->failed_errno;
        return -1;
    }
    if (l->opt.read_only) {
        errno = EROFS;
        return -1;
    }
    if (l->stalled)
        unstall(l);
    int dirty = l->buf.len > 0 || (sync && l->nsegs > 0 && l->segs[l->nsegs - 1].unsynced) ||
                l->ndoomed > 0 || (sync && l->dir_unsynced);
    if (!dirty)
        return 0;
    if (!l->batch)
        l->batch = sl_xcalloc(1, sizeof *l->batch);
    st_log_batch *b = l->batch;
    b->dirfd = l->dirfd;
    b->dir = l->dir;
    b->no_sync = l->opt.no_sync;
    b->prealloc = l->opt.segment_size;
    /* Taken by this batch; set again if it stalls, or if a reclaim unlinks more meanwhile. */
    b->dir_sync = l->dir_unsynced;
    l->dir_unsynced = 0;
    b->sync = sync;
    /* The deleted segments' descriptors go with the batch (swapped, so neither array is
     * copied or reallocated on the way). */
    int *t_fds = b->close_fds;
    size_t t_cap = b->capclose;
    b->close_fds = l->doomed;
    b->nclose = l->ndoomed;
    b->capclose = l->capdoomed;
    l->doomed = t_fds;
    l->capdoomed = t_cap;
    l->ndoomed = 0;
    b->last_seq = l->next_seq - 1;
    b->n = 0;
    b->err = 0;
    b->what = NULL;
    b->errname[0] = 0;
    /* The pending bytes become the in-flight bytes; appends go on into an empty buffer. */
    sl_buf t = l->fbuf;
    l->fbuf = l->buf;
    l->buf = t;
    l->buf.len = l->buf.off = 0;
    size_t i = l->nsegs - 1;
    while (i > 0 && (l->segs[i - 1].end > l->segs[i - 1].size || l->segs[i - 1].unsynced))
        i--;
    for (; i < l->nsegs; i++) {
        seg *s = &l->segs[i];
        int last = i == l->nsegs - 1;
        int writes = s->end != s->size;
        if (!writes && !s->unsynced)
            continue;
        if (b->n == b->cap) {
            b->cap = b->cap ? b->cap * 2 : 4;
            b->v = sl_xrealloc(b->v, b->cap * sizeof *b->v);
        }
        batch_seg *e = &b->v[b->n++];
        memset(e, 0, sizeof *e);
        e->no = s->no;
        e->fd = s->fd;
        e->alloc = s->alloc;
        memcpy(e->name, s->name, sizeof e->name);
        if (writes) {
            e->data = l->fbuf.data + s->boff;
            e->len = (size_t)(s->end - s->size);
            e->off = s->size;
            s->foff = s->boff;
            s->wend = s->end;
        }
        e->sync = (uint8_t)(sync || !last);
        s->in_batch = 1;
    }
    l->in_flight = 1;
    *out = b;
    return 0;
}

static void batch_run_io(st_log_batch *b);

/* What running a batch entry does besides its write (batch_run_io; st_log_batch_light). */
static int seg_needs_create(const batch_seg *e)
{
    return e->data && e->fd < 0;
}

static int seg_needs_prealloc(const st_log_batch *b, const batch_seg *e)
{
    return e->data && b->prealloc && e->off + e->len > e->alloc;
}

void st_log_batch_run(st_log_batch *b)
{
    batch_run_io(b);
    /* After the directory fsync that made their unlinks durable (or its failure, which fails
     * the log either way): only now does the file system free the blocks. */
    for (size_t i = 0; i < b->nclose; i++)
        close(b->close_fds[i]);
    b->nclose = 0;
}

static void batch_run_io(st_log_batch *b)
{
    int created = 0;
    for (size_t i = 0; i < b->n; i++) {
        batch_seg *e = &b->v[i];
        const char *what = NULL;
        if (seg_needs_create(e)) {
            e->fd = openat(b->dirfd, e->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (e->fd < 0) {
                what = "create";
            } else {
                e->created = created = 1;
                FOP(ST_FOP_CREATE, b->dir, e->name, NULL, 0, NULL, 0);
            }
        }
        if (!what && seg_needs_prealloc(b, e)) {
            /* Space is reserved ahead of the writes, PREALLOC_CHUNK at a time (up to the
             * segment size), so a write never fails for lack of space: a full disk shows
             * here, before any record is half written. */
            uint64_t want = e->off + e->len + PREALLOC_CHUNK;
            want -= want % PREALLOC_CHUNK;
            if (want > b->prealloc && e->off + e->len <= b->prealloc)
                want = b->prealloc;
            if (fallocate(e->fd, FALLOC_FL_KEEP_SIZE, (off_t)e->alloc, (off_t)(want - e->alloc)) ==
                0)
                e->alloc = want;
            else if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL)
                e->alloc = UINT64_MAX; /* the file system cannot reserve: write as it comes */
            else
                what = "preallocate";
        }
        if (!what && e->data) {
            if (write_all(e->fd, e->data, e->len, e->off) < 0)
                what = "write";
            else
                FOP(ST_FOP_WRITE, b->dir, e->name, NULL, e->off, e->data, e->len);
        }
        /* Every write of the batch is made (the older segments' syncs too: only the newest
         * may be torn): the observer may ship them now, during this fdatasync. */
        if (!what && i + 1 == b->n)
            FOP(ST_FOP_WRITTEN, b->dir, "", NULL, 0, NULL, 0);
        if (!what && e->sync && !b->no_sync) {
            if (sync_fd(e->fd) < 0)
                what = "fdatasync";
            else
                FOP(ST_FOP_SYNC, b->dir, e->name, NULL, 0, NULL, 0);
        }
        if (what) {
            b->err = errno ? errno : EIO;
            b->what = what;
            memcpy(b->errname, e->name, sizeof b->errname);
            return;
        }
    }
    /* A new file's name must be durable too, or a crash could lose the whole segment. */
    if ((created || b->dir_sync) && !b->no_sync) {
        if (fsync(b->dirfd) < 0) {
            b->err = errno ? errno : EIO;
            b->what = "fsync of the directory";
            snprintf(b->errname, sizeof b->errname, ".");
        } else {
            FOP(ST_FOP_DIRSYNC, b->dir, "", NULL, 0, NULL, 0);
        }
    }
}

int st_log_batch_end(st_log *l, st_log_batch *b)
{
    if (!l->in_flight || b != l->batch)
        panic("%s: st_log_batch_end without its batch", l->dir);
    l->in_flight = 0;
    for (size_t i = 0; i < b->n; i++) {
        batch_seg *e = &b->v[i];
        seg *s = find_seg(l, e->no);
        if (!s)
            panic("%s/%s: segment gone while its batch was in flight", l->dir, e->name);
        s->in_batch = 0;
        if (e->created)
            s->fd = e->fd; /* recorded even on failure, so close() closes it */
        if (e->alloc > s->alloc)
            s->alloc = e->alloc;
        if (b->err)
            continue;
        if (e->data) {
            s->size = s->wend;
            s->unsynced = 1;
        }
        if (e->sync)
            s->unsynced = 0;
    }
    if (b->err == ENOSPC || b->err == EDQUOT) {
        /* Out of space: nothing is lost and nothing is claimed written. The bytes stay in
         * fbuf (readable there: wend is kept) until the next batch writes them again. */
        for (size_t i = 0; i < b->n; i++)
            if (b->v[i].created)
                l->dir_unsynced = 1; /* its name is not durable yet */
        if (b->dir_sync)
            l->dir_unsynced = 1; /* nor what it was to fsync */
        if (!l->stall_warned)
            sl_warn("%s/%s: %s: %s; holding %zu bytes until space returns", l->dir,
                    b->errname[0] ? b->errname : "?", b->what ? b->what : "write", strerror(b->err),
                    l->fbuf.len);
        l->stalled = l->stall_warned = 1;
        errno = b->err;
        return -1;
    }
    if (l->fbuf.cap > BUF_KEEP_MAX)
        sl_buf_free(&l->fbuf); /* one burst should not pin its memory for good */
    else
        l->fbuf.len = l->fbuf.off = 0;
    if (b->err) {
        errno = b->err;
        fail(l, b->what ? b->what : "write", b->errname[0] ? b->errname : "?");
        return -1;
    }
    if (l->stall_warned) {
        l->stall_warned = 0;
        sl_info("%s: space is back: the writes held for it are made", l->dir);
    }
    if (b->sync) {
        l->commits++;
        if (b->last_seq > l->durable_seq)
            l->durable_seq = b->last_seq;
    }
    return 0;
}

int st_log_batch_in_flight(const st_log *l)
{
    return l->in_flight;
}

uint64_t st_log_batch_last_seq(const st_log_batch *b)
{
    return b->last_seq;
}

int st_log_batch_failed(const st_log_batch *b)
{
    return b->err != 0;
}

int st_log_batch_light(const st_log_batch *b, size_t max_bytes)
{
    if (b->sync || b->dir_sync || b->nclose)
        return 0;
    size_t total = 0;
    for (size_t i = 0; i < b->n; i++) {
        const batch_seg *e = &b->v[i];
        if (e->sync || seg_needs_create(e) || seg_needs_prealloc(b, e) ||
            e->len > max_bytes - total)
            return 0;
        total += e->len;
    }
    return 1;
}

void st_log_batch_skip(st_log_batch *b, const st_log_batch *cause)
{
    b->err = cause->err;
    b->what = "not run after another log's failure";
    memcpy(b->errname, cause->errname, sizeof b->errname);
}

size_t st_log_in_flight_bytes(const st_log *l)
{
    return l->in_flight ? l->fbuf.len : 0;
}

/* Synchronous: begin, run here, end. */
static int write_out(st_log *l, int sync)
{
    st_log_batch *b;
    if (st_log_batch_begin(l, sync, &b) < 0)
        return -1;
    if (!b)
        return 0;
    st_log_batch_run(b);
    return st_log_batch_end(l, b);
}

int st_log_commit(st_log *l, uint64_t *durable_seq)
{
    if (write_out(l, 1) < 0)
        return -1;
    if (durable_seq)
        *durable_seq = l->durable_seq;
    return 0;
}

int st_log_flush(st_log *l)
{
    if (l->buf.len == 0 && !l->failed_errno)
        return 0;
    return write_out(l, 0);
}

size_t st_log_pending(const st_log *l)
{
    return l->buf.len;
}

uint64_t st_log_durable_seq(const st_log *l)
{
    return l->durable_seq;
}

/* ------------------------------------------------------------------ read back */

static int pread_full(int fd, uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = ENODATA;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Read up to RA_WINDOW written bytes of s from off into the read-ahead window. A failed or
 * short read just leaves less (or no) window: the caller then reads the record itself. */
static int fill_window(st_log *l, seg *s, uint64_t off)
{
    if (!l->ra_buf)
        l->ra_buf = sl_xmalloc(RA_WINDOW);
    uint64_t want = s->size - off < RA_WINDOW ? s->size - off : RA_WINDOW;
    ssize_t r;
    while ((r = pread(s->fd, l->ra_buf, (size_t)want, (off_t)off)) < 0 && errno == EINTR)
        ;
    if (r <= 0) {
        l->ra_seg = 0;
        return -1;
    }
    l->ra_seg = s->no;
    l->ra_off = off;
    l->ra_len = (uint64_t)r;
    return 0;
}

int st_log_read(st_log *l, st_loc loc, uint8_t *buf, size_t len, char *err, size_t errlen)
{
    const uint8_t *p;
    if (st_log_read_ref(l, loc, buf, len, &p, err, errlen) < 0)
        return -1;
    if (p != buf && len)
        memcpy(buf, p, len);
    return 0;
}

int st_log_read_ref(st_log *l, st_loc loc, uint8_t *buf, size_t len, const uint8_t **payload,
                    char *err, size_t errlen)
{
    seg *s = find_seg(l, loc.segment);
    if (!s) {
        seterr(err, errlen, "%s: segment %" PRIu32 " is not live", l->dir, loc.segment);
        return -1;
    }
    if (len >= ST_LOG_MAX_RECORD || loc.offset < HDR_SIZE || loc.offset > s->end ||
        s->end - loc.offset < REC_HDR + (uint64_t)len) {
        seterr(err, errlen, "%s/%s: offset %" PRIu64 ": %zu-byte record out of range", l->dir,
               s->name, loc.offset, len);
        return -1;
    }
    uint8_t h[REC_HDR];
    size_t need = REC_HDR + len;
    int forward = l->ra_last_seg == loc.segment && loc.offset >= l->ra_last_end &&
                  loc.offset - l->ra_last_end <= RA_GAP;
    l->ra_last_seg = loc.segment;
    l->ra_last_end = loc.offset + need;
    *payload = buf;
    if (loc.offset >= s->size) {
        /* Not in the file yet: in the append buffer, or in the batch being written (whose
         * bytes do not change until it ends). */
        const uint8_t *p = loc.offset >= s->wend ? l->buf.data + s->boff + (loc.offset - s->wend)
                                                 : l->fbuf.data + s->foff + (loc.offset - s->size);
        memcpy(h, p, REC_HDR);
        *payload = p + REC_HDR;
    } else if ((l->ra_seg == loc.segment && loc.offset >= l->ra_off &&
                loc.offset + need <= l->ra_off + l->ra_len) ||
               (forward && need <= RA_WINDOW && loc.offset + need <= s->size &&
                fill_window(l, s, loc.offset) == 0 && loc.offset + need <= l->ra_off + l->ra_len)) {
        /* in the read-ahead window: seen in place, not copied */
        const uint8_t *p = l->ra_buf + (loc.offset - l->ra_off);
        memcpy(h, p, REC_HDR);
        *payload = p + REC_HDR;
    } else {
        /* One preadv in the common case; finish piecewise after a short read. */
        struct iovec iov[2] = {{h, REC_HDR}, {buf, len}};
        ssize_t r = preadv(s->fd, iov, 2, (off_t)loc.offset);
        size_t got = r < 0 ? 0 : (size_t)r;
        if (got < REC_HDR + len) {
            int rc = 0;
            if (got < REC_HDR) {
                rc = pread_full(s->fd, h + got, REC_HDR - got, loc.offset + got);
                got = REC_HDR;
            }
            size_t pg = got - REC_HDR;
            if (rc == 0)
                rc = pread_full(s->fd, buf + pg, len - pg, loc.offset + REC_HDR + pg);
            if (rc < 0) {
                seterr(err, errlen, "%s/%s: offset %" PRIu64 ": read: %s", l->dir, s->name,
                       loc.offset, strerror(errno));
                return -1;
            }
        }
    }
    if (sl_le32(h) != len + 1) {
        seterr(err, errlen, "%s/%s: offset %" PRIu64 ": record length %" PRIu32 ", expected %zu",
               l->dir, s->name, loc.offset, sl_le32(h), len + 1);
        return -1;
    }
    if (st_crc32c(st_crc32c(0, h + 8, 9), *payload, len) != sl_le32(h + 4)) {
        seterr(err, errlen, "%s/%s: offset %" PRIu64 ": checksum mismatch", l->dir, s->name,
               loc.offset);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ segments */

void st_log_roll(st_log *l)
{
    if (l->failed_errno || l->opt.read_only || cur_seg(l)->end <= HDR_SIZE)
        return;
    roll(l);
}

uint32_t st_log_current_segment(const st_log *l)
{
    return l->segs[l->nsegs - 1].no;
}

const char *st_log_segment_name(const st_log *l, uint32_t segment)
{
    seg *s = find_seg(l, segment);
    return s ? s->name : NULL;
}

const char *st_log_torn_tail(const st_log *l)
{
    return l->torn;
}

void st_log_ref(st_log *l, uint32_t segment)
{
    seg *s = find_seg(l, segment);
    if (!s)
        panic("%s: st_log_ref of segment %" PRIu32 ", which is not live", l->dir, segment);
    s->refs++;
    s->marked = 0; /* referenced again: what drops this reference must be durable first */
}

void st_log_unref(st_log *l, uint32_t segment)
{
    seg *s = find_seg(l, segment);
    if (!s)
        panic("%s: st_log_unref of segment %" PRIu32 ", which is not live", l->dir, segment);
    if (s->refs == 0)
        panic("%s/%s: st_log_unref of segment %" PRIu32 " below zero references", l->dir, s->name,
              segment);
    if (--s->refs == 0 && s != cur_seg(l)) /* the current one counts when it rolls (roll) */
        l->released++;
}

void st_log_depend(st_log *l, uint32_t segment, uint32_t target)
{
    if (!target || target >= segment)
        return;
    seg *s = find_seg(l, segment);
    if (s && (!s->floor || target < s->floor))
        s->floor = target;
}

static void seg_info(const seg *s, int current, st_seg_info *out)
{
    out->no = s->no;
    out->floor = s->floor ? s->floor : s->no;
    out->bytes = s->size;
    out->refs = s->refs;
    out->written = s->fd >= 0 && s->end == s->size && !s->in_batch;
    out->current = (uint8_t)current;
}

size_t st_log_segments(const st_log *l, st_seg_info **out)
{
    *out = sl_xmalloc((l->nsegs ? l->nsegs : 1) * sizeof **out);
    for (size_t i = 0; i < l->nsegs; i++)
        seg_info(&l->segs[i], i + 1 == l->nsegs, &(*out)[i]);
    return l->nsegs;
}

void st_log_plan(const st_seg_info *v, size_t n, const uint8_t *gone, uint8_t *deletable)
{
    /* Oldest first, so each decision knows which older segments stay: a segment goes when
     * nothing refers to it and no segment from its floor up to it stays. */
    int have_kept = 0;
    uint32_t last_kept = 0; /* the newest older segment that stays */
    for (size_t i = 0; i < n; i++) {
        const st_seg_info *s = &v[i];
        int free_ = s->refs == 0 || (gone && gone[i]);
        deletable[i] = free_ && s->written && !s->current && (!have_kept || last_kept < s->floor);
        if (!deletable[i]) {
            have_kept = 1;
            last_kept = s->no;
        }
    }
}

void st_log_mark_dead(st_log *l)
{
    for (size_t i = 0; i < l->nsegs; i++)
        l->segs[i].marked = l->segs[i].refs == 0;
}

static int cmp_hole(const void *a, const void *b)
{
    const hole *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* A deleted segment's descriptor, for the next batch to close (see the top of the file). */
static void doom_fd(st_log *l, int fd)
{
    if (fd < 0)
        return;
    if (l->ndoomed == l->capdoomed) {
        l->capdoomed = l->capdoomed ? 2 * l->capdoomed : 16;
        l->doomed = sl_xrealloc(l->doomed, l->capdoomed * sizeof *l->doomed);
    }
    l->doomed[l->ndoomed++] = fd;
}

/* defer: leave the closes and the directory fsync to the next batch (st_log_reclaim_marked,
 * whose caller's loop goes on and kicks one); else do them here. */
static void reclaim(st_log *l, int only_marked, int defer, st_reclaim_stats *out)
{
    st_reclaim_stats st = {0, 0, 0};
    if (out)
        *out = st;
    if (l->failed_errno || l->opt.read_only || l->nsegs == 0)
        return;
    st_seg_info *v;
    size_t n = st_log_segments(l, &v);
    uint8_t *del = sl_xcalloc(n, 1);
    if (only_marked) { /* an unmarked segment counts as referenced */
        for (size_t i = 0; i < n; i++)
            if (!l->segs[i].marked)
                v[i].refs = v[i].refs ? v[i].refs : 1;
    }
    st_log_plan(v, n, NULL, del);
    /* Segments going with an older one staying leave holes: on record first. */
    size_t first_kept = 0;
    while (first_kept < n && del[first_kept])
        first_kept++;
    hole *nh = sl_xmalloc((l->nholes + n + 1) * sizeof *nh);
    size_t nn = 0;
    /* A hole is dropped only once it lies below the oldest segment file: not below the ones
     * this pass is about to delete, since a kill may come before they are all gone. */
    for (size_t i = 0; i < l->nholes; i++)
        if (l->holes[i].end > l->segs[0].first_seq)
            nh[nn++] = l->holes[i];
    for (size_t i = first_kept + 1; i < n; i++) {
        if (!del[i])
            continue;
        nh[nn++] = (hole){l->segs[i].first_seq, l->segs[i + 1].first_seq};
    }
    if (nn) {
        qsort(nh, nn, sizeof *nh, cmp_hole);
        size_t k = 0;
        for (size_t i = 1; i < nn; i++) {
            if (nh[i].first <= nh[k].end) {
                if (nh[i].end > nh[k].end)
                    nh[k].end = nh[i].end;
            } else {
                nh[++k] = nh[i];
            }
        }
        nn = k + 1;
    }
    int changed = nn != l->nholes || (nn && memcmp(nh, l->holes, nn * sizeof *nh) != 0);
    size_t limit = n; /* delete nothing from here on */
    if (changed && save_holes(l, nh, nn) < 0) {
        /* Without the holes on record only the oldest segments may go. */
        sl_warn("%s/%s: cannot write: %s; only the oldest segments are deleted", l->dir, HOLES_NAME,
                strerror(errno));
        limit = first_kept;
    } else if (changed) {
        st_fault_point("tidy-holes");
    }
    size_t k = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        seg *s = &l->segs[i];
        if (i < limit && del[i]) {
            if (unlinkat(l->dirfd, s->name, 0) < 0) {
                /* It stays, so no newer one may go on the assumption that it went. */
                sl_warn("%s/%s: unlink: %s (kept)", l->dir, s->name, strerror(errno));
                limit = i;
            } else {
                FOP(ST_FOP_UNLINK, l->dir, s->name, NULL, 0, NULL, 0);
                if (defer)
                    doom_fd(l, s->fd);
                else if (s->fd >= 0)
                    close(s->fd);
                st.segments_deleted++;
                st.bytes_freed += s->size;
                if (i > first_kept)
                    st.holes++;
                st_fault_point("tidy-unlinked");
                k++;
                continue;
            }
        }
        if (w != i)
            l->segs[w] = *s;
        w++;
    }
    l->nsegs = w;
    if (k && defer)
        l->dir_unsynced = 1;
    else if (k && !l->opt.no_sync && fsync(l->dirfd) < 0)
        fail(l, "fsync of the directory after reclaim", ".");
    else if (k && !l->opt.no_sync)
        FOP(ST_FOP_DIRSYNC, l->dir, "", NULL, 0, NULL, 0);
    sl_free(nh);
    sl_free(v);
    sl_free(del);
    if (out)
        *out = st;
}

void st_log_reclaim(st_log *l, st_reclaim_stats *out)
{
    reclaim(l, 0, 0, out);
}

void st_log_reclaim_marked(st_log *l, st_reclaim_stats *out)
{
    reclaim(l, 1, 1, out);
}

void st_log_get_stats(const st_log *l, st_log_stats *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < l->nsegs; i++) {
        if (l->segs[i].fd < 0)
            continue;
        out->segments++;
        out->bytes += l->segs[i].size;
    }
    out->records_written = l->records_written;
    out->bytes_appended = l->bytes_appended;
    out->commits = l->commits;
    out->oldest_segment_refs = l->nsegs ? l->segs[0].refs : 0;
}

uint64_t st_log_bytes_appended(const st_log *l)
{
    return l->bytes_appended;
}

uint64_t st_log_released(const st_log *l)
{
    return l->released;
}
