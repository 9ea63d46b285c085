/* test_streamlog.c - unit tests for a stream's log (src/store/stream.c): offsets from 0,
 * timestamps, reads from any offset by several readers in one pread per chunk, durability
 * (only what a batch made durable is read; reopen recovers it, a torn tail is cut, a damaged
 * older segment is refused), retention by bytes and by age a whole segment at a time, the
 * sparse index staying sparse, and x-max-age's units. The file operations reported to the
 * store's observer (the cluster's mirror) rebuild the stream elsewhere: replayed into another
 * directory they give a log that opens to the same entries, through rolls, retention, a torn
 * tail's truncation and deletion.
 *
 * Each test runs in its own forked process with a fresh temp directory.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "store/log.h"
#include "store/stream.h"

static char D[256];
static char err[1024];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

static void setup(void)
{
    strcpy(D, "/tmp/sluice-test-streamlog-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(D));
    sl_log_min_level = SL_LOG_ERROR;
}

static void teardown(void)
{
    nftw(D, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static st_stream *open_s(uint64_t seg, uint64_t max_bytes, uint64_t max_age)
{
    st_stream_options o = {
        .segment_size = seg, .max_bytes = max_bytes, .max_age_ms = max_age, .no_sync = 1};
    st_stream *s = st_stream_open(D, &o, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    return s;
}

typedef struct got {
    uint64_t off[4096];
    unsigned flags[4096];
    int64_t ts[4096];
    char body[4096][32];
    size_t n;
    size_t stop_after; /* 0 = never */
} got;

static int collect(void *ctx, uint64_t offset, int64_t ts, const uint8_t *p, size_t len,
                   unsigned flags)
{
    got *g = ctx;
    g->flags[g->n] = flags;
    g->off[g->n] = offset;
    g->ts[g->n] = ts;
    snprintf(g->body[g->n], 32, "%.*s", (int)len, (const char *)p);
    g->n++;
    return g->stop_after && g->n >= g->stop_after;
}

/* Every entry from `from` to the end, as a reader would take them (bounded by count). */
static void read_all(st_stream *s, st_stream_reader *r, uint64_t from, got *g)
{
    for (int i = 0; i < 100000; i++) {
        uint64_t nx;
        long n = st_stream_read(s, r, from, SIZE_MAX, collect, g, &nx, err, sizeof err);
        ck_assert_msg(n >= 0, "%s", err);
        if (n == 0)
            return;
        from = nx;
    }
    ck_abort_msg("read did not end");
}

static void put(st_stream *s, int64_t ts, const char *prefix, uint64_t i)
{
    char b[32];
    int n = snprintf(b, sizeof b, "%s%" PRIu64, prefix, i);
    st_stream_append(s, ts, b, (size_t)n);
}

START_TEST(offsets_timestamps_and_durable_reads)
{
    st_stream *s = open_s(0, 0, 0);
    ck_assert_uint_eq(st_stream_first(s), 0);
    ck_assert_uint_eq(st_stream_end(s), 0);
    for (uint64_t i = 0; i < 10; i++)
        ck_assert_uint_eq(st_stream_append(s, 1000 + (int64_t)i, "x", 1), i);
    /* nothing is readable before a batch made it durable */
    st_stream_reader r = {0};
    got g = {0};
    read_all(s, &r, 0, &g);
    ck_assert_uint_eq(g.n, 0);
    ck_assert_int_eq(st_stream_commit(s), 0);
    ck_assert_uint_eq(st_stream_end(s), 10);
    read_all(s, &r, 0, &g);
    ck_assert_uint_eq(g.n, 10);
    for (size_t i = 0; i < 10; i++) {
        ck_assert_uint_eq(g.off[i], i);
        ck_assert_int_eq(g.ts[i], 1000 + (int64_t)i);
    }
    /* a timestamp going back is raised to the last one */
    ck_assert_uint_eq(st_stream_append(s, 5, "y", 1), 10);
    ck_assert_int_eq(st_stream_commit(s), 0);
    memset(&g, 0, sizeof g);
    read_all(s, &r, 10, &g);
    ck_assert_uint_eq(g.n, 1);
    ck_assert_int_eq(g.ts[0], 1009);
    /* last chunk: the second batch's first entry; chunks are marked on their first entry */
    ck_assert_uint_eq(st_stream_last_chunk(s), 10);
    ck_assert_uint_eq(g.flags[0], ST_STREAM_CHUNK_START);
    memset(&g, 0, sizeof g);
    read_all(s, &r, 0, &g);
    ck_assert_uint_eq(g.n, 11);
    for (size_t i = 0; i < 11; i++)
        ck_assert_uint_eq(g.flags[i], (i == 0 || i == 10) ? ST_STREAM_CHUNK_START : 0);
    st_stream_reader_free(&r);
    st_stream_close(s);
}
END_TEST

START_TEST(readers_at_their_own_offsets_across_segments)
{
    st_stream *s = open_s(4096, 0, 0); /* many small segments */
    for (uint64_t i = 0; i < 2000; i++) {
        put(s, (int64_t)i, "m", i);
        if (i % 97 == 0)
            ck_assert_int_eq(st_stream_commit(s), 0);
    }
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_stream_stats st;
    st_stream_get_stats(s, &st);
    ck_assert_uint_gt(st.segments, 10);
    ck_assert_uint_eq(st.entries, 2000);
    uint64_t starts[] = {0, 1, 555, 1234, 1999, 2000, 5000};
    for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++) {
        st_stream_reader r = {0};
        static got g;
        memset(&g, 0, sizeof g);
        read_all(s, &r, starts[k], &g);
        uint64_t want = starts[k] < 2000 ? 2000 - starts[k] : 0;
        ck_assert_uint_eq(g.n, want);
        for (size_t i = 0; i < g.n; i++) {
            char b[32];
            snprintf(b, sizeof b, "m%" PRIu64, starts[k] + i);
            ck_assert_uint_eq(g.off[i], starts[k] + i);
            ck_assert_str_eq(g.body[i], b);
        }
        st_stream_reader_free(&r);
    }
    /* a reader that stops: the callback's non-zero return ends the read after that entry */
    st_stream_reader r = {0};
    static got g;
    memset(&g, 0, sizeof g);
    g.stop_after = 3;
    uint64_t nx;
    ck_assert_int_eq(st_stream_read(s, &r, 100, SIZE_MAX, collect, &g, &nx, err, sizeof err), 3);
    ck_assert_uint_eq(nx, 103);
    /* timestamps: the first entry at or after */
    ck_assert_uint_eq(st_stream_offset_at(s, 0), 0);
    ck_assert_uint_eq(st_stream_offset_at(s, 777), 777);
    ck_assert_uint_eq(st_stream_offset_at(s, 1999), 1999);
    ck_assert_uint_eq(st_stream_offset_at(s, 5000), 2000);
    st_stream_reader_free(&r);
    st_stream_close(s);
}
END_TEST

/* A consumer given credit one message at a time: the reader goes on from where it stopped (from
 * what it read last, across segment ends), and a jump elsewhere on the same reader still reads
 * the right entries. */
START_TEST(reader_goes_on_a_credit_at_a_time)
{
    st_stream *s = open_s(3000, 0, 0);
    for (uint64_t i = 0; i < 700; i++) {
        put(s, (int64_t)i, "c", i);
        if (i % 50 == 49)
            ck_assert_int_eq(st_stream_commit(s), 0);
    }
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_stream_reader r = {.cap = 512};
    uint64_t from = 0;
    for (int step = 0; step < 2000 && from < 700; step++) {
        static got g;
        memset(&g, 0, sizeof g);
        uint64_t nx;
        long n = st_stream_read(s, &r, from, 1, collect, &g, &nx, err, sizeof err);
        ck_assert_msg(n == 1, "%s", err);
        char b[32];
        snprintf(b, sizeof b, "c%" PRIu64, from);
        ck_assert_uint_eq(g.off[0], from);
        ck_assert_str_eq(g.body[0], b);
        ck_assert_uint_eq(nx, from + 1);
        if (step == 300) {
            /* a jump back and forth on the same reader */
            memset(&g, 0, sizeof g);
            ck_assert_int_eq(st_stream_read(s, &r, 17, 1, collect, &g, &nx, err, sizeof err), 1);
            ck_assert_str_eq(g.body[0], "c17");
        }
        from = nx;
    }
    ck_assert_uint_eq(from, 700);
    st_stream_reader_free(&r);
    st_stream_close(s);
}
END_TEST

START_TEST(big_entries_and_small_reader_buffer)
{
    st_stream *s = open_s(0, 0, 0);
    size_t big = 300 * 1024;
    char *p = malloc(big);
    for (int i = 0; i < 3; i++) {
        memset(p, 'a' + i, big);
        st_stream_append(s, i, p, big);
    }
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_stream_reader r = {.cap = 1024};
    for (uint64_t from = 0; from < 3; from++) {
        uint64_t nx;
        static got g;
        memset(&g, 0, sizeof g);
        ck_assert_int_eq(st_stream_read(s, &r, from, SIZE_MAX, collect, &g, &nx, err, sizeof err),
                         1);
        ck_assert_uint_eq(g.off[0], from);
        ck_assert_int_eq(g.body[0][0], 'a' + (int)from);
    }
    free(p);
    st_stream_reader_free(&r);
    st_stream_close(s);
}
END_TEST

START_TEST(reopen_recovers_and_goes_on)
{
    st_stream *s = open_s(2048, 0, 0);
    for (uint64_t i = 0; i < 500; i++)
        put(s, 100 + (int64_t)i, "r", i);
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_stream_close(s);
    s = open_s(2048, 0, 0);
    ck_assert_uint_eq(st_stream_first(s), 0);
    ck_assert_uint_eq(st_stream_end(s), 500);
    ck_assert_uint_eq(st_stream_append(s, 0, "after", 5), 500);
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_stream_reader r = {0};
    static got g;
    memset(&g, 0, sizeof g);
    read_all(s, &r, 0, &g);
    ck_assert_uint_eq(g.n, 501);
    ck_assert_str_eq(g.body[499], "r499");
    ck_assert_str_eq(g.body[500], "after");
    ck_assert_int_eq(g.ts[500], 599); /* not below the recovered timestamps */
    st_stream_reader_free(&r);
    st_stream_close(s);
}
END_TEST

static char *newest_seg(char *out, size_t len)
{
    /* names sort by offset: the lexically greatest */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s | sort | tail -1", D);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(fgets(out, (int)len, f));
    pclose(f);
    out[strcspn(out, "\n")] = 0;
    return out;
}

START_TEST(torn_tail_is_cut_and_older_damage_refused)
{
    st_stream *s = open_s(2048, 0, 0);
    for (uint64_t i = 0; i < 300; i++)
        put(s, 1, "t", i);
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_stream_close(s);
    char name[64], path[400];
    newest_seg(name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", D, name);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    /* a crash in the middle of the newest entry */
    ck_assert_int_eq(truncate(path, st.st_size - 3), 0);
    s = open_s(2048, 0, 0);
    ck_assert_uint_eq(st_stream_end(s), 299);
    ck_assert_uint_eq(st_stream_append(s, 1, "z", 1), 299);
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_stream_close(s);
    /* damage in an older segment: refused with the file and the byte offset */
    char first[400];
    snprintf(first, sizeof first, "%s/%020d.seg", D, 0);
    int fd = open(first, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, "\xff", 1, 16 + 24 + 1), 1);
    close(fd);
    st_stream_options o = {.segment_size = 2048, .no_sync = 1};
    ck_assert_ptr_null(st_stream_open(D, &o, err, sizeof err));
    ck_assert_msg(strstr(err, "00000000000000000000.seg: offset 16: checksum mismatch") != NULL,
                  "%s", err);
}
END_TEST

/* Reads with a fresh reader (its own pread) from `from` until the end or an error: the
 * entries handed, and -1 when the read failed (err says where). */
static long read_fresh(st_stream *s, uint64_t from, size_t max, got *g)
{
    st_stream_reader r = {0};
    long total = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t nx;
        long n = st_stream_read(s, &r, from, max, collect, g, &nx, err, sizeof err);
        if (n <= 0) {
            st_stream_reader_free(&r);
            return n < 0 ? -1 : total;
        }
        total += n;
        from = nx;
        if ((size_t)total >= max)
            break;
    }
    st_stream_reader_free(&r);
    return total;
}

START_TEST(corrupt_entry_is_caught_the_first_time_it_is_read)
{
    /* a checksum is checked once per process: the first read of an entry's bytes; a later
     * read of what was checked skips it, and bytes never read are checked still */
    st_stream *s = open_s(0, 0, 0);
    for (uint64_t i = 0; i < 50; i++) {
        char b[8];
        snprintf(b, sizeof b, "e%02" PRIu64, i);
        st_stream_append(s, 1, b, 3);
    }
    ck_assert_int_eq(st_stream_commit(s), 0);
    char path[400];
    snprintf(path, sizeof path, "%s/%020d.seg", D, 0);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
#define POS(i) (16 + (i)*27) /* header, then 24 + 3 bytes per entry */
    /* damage entry 20's payload before anything read it: the first read stops there */
    ck_assert_int_eq(pwrite(fd, "X", 1, POS(20) + 24 + 1), 1);
    got g = {0};
    ck_assert_int_eq(read_fresh(s, 0, SIZE_MAX, &g), -1);
    ck_assert_uint_eq(g.n, 20);
    char want[64];
    snprintf(want, sizeof want, "00000000000000000000.seg: offset %d: bad entry", POS(20));
    ck_assert_msg(strstr(err, want) != NULL, "%s", err);
    /* and again: a failed check verifies nothing */
    memset(&g, 0, sizeof g);
    ck_assert_int_eq(read_fresh(s, 10, SIZE_MAX, &g), -1);
    ck_assert_msg(strstr(err, want) != NULL, "%s", err);
    ck_assert_int_eq(pwrite(fd, "2", 1, POS(20) + 24 + 1), 1); /* mended */
    /* entries 0..29 read (checked) once; then entry 35, never read, is damaged: a reader
     * from the start goes over 0..29 without their checks and stops at 35 */
    memset(&g, 0, sizeof g);
    ck_assert_int_eq(read_fresh(s, 0, 30, &g), 30);
    ck_assert_int_eq(pwrite(fd, "\x7f", 1, POS(35) + 4), 1); /* its checksum field */
    memset(&g, 0, sizeof g);
    ck_assert_int_eq(read_fresh(s, 0, SIZE_MAX, &g), -1);
    ck_assert_uint_eq(g.n, 35);
    snprintf(want, sizeof want, "00000000000000000000.seg: offset %d: bad entry", POS(35));
    ck_assert_msg(strstr(err, want) != NULL, "%s", err);
    /* an entry out of sequence is refused whether checked before or not */
    uint8_t off8[8] = {99};
    ck_assert_int_eq(pwrite(fd, off8, 8, POS(5) + 8), 8);
    memset(&g, 0, sizeof g);
    ck_assert_int_eq(read_fresh(s, 0, SIZE_MAX, &g), -1);
    ck_assert_uint_eq(g.n, 5);
#undef POS
    close(fd);
    st_stream_close(s);
    /* a reopen checks every entry again (recovery): in the newest segment, damage is a torn
     * tail, cut at the first bad entry */
    s = open_s(0, 0, 0);
    ck_assert_uint_eq(st_stream_end(s), 5);
    st_stream_close(s);
}
END_TEST

static uint64_t dir_bytes(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "du -b --apparent-size -s %s", D);
    FILE *f = popen(cmd, "r");
    unsigned long long v = 0;
    ck_assert_int_eq(fscanf(f, "%llu", &v), 1);
    pclose(f);
    return v;
}

static uint64_t seg_files_bytes(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cat %s/*.seg | wc -c", D);
    FILE *f = popen(cmd, "r");
    unsigned long long v = 0;
    ck_assert_int_eq(fscanf(f, "%llu", &v), 1);
    pclose(f);
    return v;
}

START_TEST(retention_by_bytes_drops_whole_segments)
{
    const uint64_t seg = 10000, limit = 30000;
    st_stream *s = open_s(seg, limit, 0);
    char body[100];
    memset(body, 'b', sizeof body);
    uint64_t dropped = 0;
    for (int i = 0; i < 2000; i++) {
        st_stream_append(s, i, body, sizeof body);
        if (i % 10 == 9) {
            ck_assert_int_eq(st_stream_commit(s), 0);
            dropped += st_stream_retain(s, 0);
            uint64_t on_disk = seg_files_bytes();
            ck_assert_uint_le(on_disk, limit + seg);
        }
    }
    ck_assert_uint_gt(dropped, 0);
    st_stream_stats st;
    st_stream_get_stats(s, &st);
    ck_assert_uint_eq(st.bytes, seg_files_bytes());
    ck_assert_uint_le(st.bytes, limit + seg);
    /* the first offset is a segment's first: every kept segment is whole */
    uint64_t first = st_stream_first(s);
    ck_assert_uint_gt(first, 0);
    char path[400];
    snprintf(path, sizeof path, "%s/%020" PRIu64 ".seg", D, first);
    ck_assert_int_eq(access(path, F_OK), 0);
    /* a reader behind the first offset starts at it */
    st_stream_reader r = {0};
    static got g;
    memset(&g, 0, sizeof g);
    read_all(s, &r, 0, &g);
    ck_assert_uint_eq(g.n, 2000 - first);
    ck_assert_uint_eq(g.off[0], first);
    st_stream_reader_free(&r);
    st_stream_close(s);
    (void)dir_bytes;
}
END_TEST

START_TEST(retention_by_age_keeps_the_current_segment)
{
    st_stream *s = open_s(4096, 0, 10000);
    char body[200];
    memset(body, 'a', sizeof body);
    for (int i = 0; i < 100; i++)
        st_stream_append(s, 1000 + i, body, sizeof body); /* old */
    ck_assert_int_eq(st_stream_commit(s), 0);
    for (int i = 0; i < 5; i++)
        st_stream_append(s, 50000, body, sizeof body); /* new, in the current segment */
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_stream_stats before;
    st_stream_get_stats(s, &before);
    ck_assert_uint_gt(before.segments, 2);
    /* at 55000 the old segments are older than 10 s; the current one never goes */
    unsigned n = st_stream_retain(s, 55000);
    ck_assert_uint_gt(n, 0);
    st_stream_stats after;
    st_stream_get_stats(s, &after);
    ck_assert_uint_eq(after.segments + n, before.segments);
    ck_assert_uint_ge(after.segments, 1);
    /* nothing but the newest entries' segment(s): all that stay are not older than the limit,
     * or the segment being written */
    ck_assert_uint_eq(st_stream_retain(s, 55000), 0);
    /* everything old: still the current segment stays */
    st_stream_retain(s, 10000000);
    st_stream_get_stats(s, &after);
    ck_assert_uint_eq(after.segments, 1);
    ck_assert_uint_eq(st_stream_end(s), 105);
    st_stream_close(s);
}
END_TEST

START_TEST(index_stays_sparse)
{
    st_stream *s = open_s(64u << 20, 0, 0);
    char body[64];
    memset(body, 'i', sizeof body);
    for (int i = 0; i < 100000; i++)
        st_stream_append(s, i, body, sizeof body);
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_stream_stats st;
    st_stream_get_stats(s, &st);
    /* 100000 x 88 bytes = 8.8 MB: one point per 64 KiB, not one per entry */
    ck_assert_uint_le(st.index_pts, st.bytes / ST_STREAM_INDEX_EVERY + 2);
    ck_assert_uint_eq(st.entries, 100000);
    st_stream_close(s);
}
END_TEST

START_TEST(batch_in_flight_keeps_appending)
{
    st_stream *s = open_s(0, 0, 0);
    st_stream_append(s, 1, "a", 1);
    st_stream_batch *b;
    ck_assert_int_eq(st_stream_batch_begin(s, &b), 0);
    ck_assert_ptr_nonnull(b);
    /* appends go on while the batch is written; they are the next batch's */
    ck_assert_uint_eq(st_stream_append(s, 2, "b", 1), 1);
    st_stream_batch_run(b);
    ck_assert_int_eq(st_stream_batch_end(s, b), 0);
    ck_assert_uint_eq(st_stream_end(s), 1);
    ck_assert_int_eq(st_stream_commit(s), 0);
    ck_assert_uint_eq(st_stream_end(s), 2);
    st_stream_close(s);
}
END_TEST

static int enospc_left;
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t full_pwrite(int fd, const void *p, size_t n, off_t off)
{
    if (enospc_left > 0) {
        enospc_left--;
        errno = ENOSPC;
        return -1;
    }
    return real_pwrite(fd, p, n, off);
}

/* A full disk is not a failure: the batch's entries wait and go again, in order, with what was
 * appended meanwhile, at the places they had. */
START_TEST(full_disk_stalls_then_goes_on)
{
    st_stream *s = open_s(2000, 0, 0);
    for (uint64_t i = 0; i < 10; i++)
        put(s, 1, "a", i);
    ck_assert_int_eq(st_stream_commit(s), 0);
    for (uint64_t i = 10; i < 40; i++)
        put(s, 1, "a", i);
    real_pwrite = st_log__pwrite;
    st_log__pwrite = full_pwrite;
    enospc_left = 1;
    st_stream_batch *b;
    ck_assert_int_eq(st_stream_batch_begin(s, &b), 0);
    for (uint64_t i = 40; i < 60; i++) /* appended while the batch runs */
        put(s, 1, "a", i);
    st_stream_batch_run(b);
    ck_assert_int_eq(st_stream_batch_end(s, b), -2);
    ck_assert_int_eq(errno, ENOSPC);
    ck_assert_int_eq(st_stream_stalled(s), 1);
    ck_assert_int_eq(st_stream_failed(s), 0);
    ck_assert_uint_eq(st_stream_end(s), 10); /* nothing more is readable */
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_log__pwrite = real_pwrite;
    ck_assert_int_eq(st_stream_stalled(s), 0);
    ck_assert_uint_eq(st_stream_end(s), 60);
    st_stream_close(s);
    s = open_s(2000, 0, 0); /* and the files say the same */
    st_stream_reader r = {0};
    static got g;
    memset(&g, 0, sizeof g);
    read_all(s, &r, 0, &g);
    ck_assert_uint_eq(g.n, 60);
    for (size_t i = 0; i < 60; i++) {
        char want[32];
        snprintf(want, sizeof want, "a%zu", i);
        ck_assert_str_eq(g.body[i], want);
    }
    st_stream_reader_free(&r);
    st_stream_close(s);
}
END_TEST

START_TEST(max_age_units)
{
    uint64_t ms;
    ck_assert_int_eq(st_stream_parse_age("7D", 2, &ms), 0);
    ck_assert_uint_eq(ms, 7ull * 86400000);
    ck_assert_int_eq(st_stream_parse_age("12h", 3, &ms), 0);
    ck_assert_uint_eq(ms, 12ull * 3600000);
    ck_assert_int_eq(st_stream_parse_age("30m", 3, &ms), 0);
    ck_assert_uint_eq(ms, 30ull * 60000);
    ck_assert_int_eq(st_stream_parse_age("10s", 3, &ms), 0);
    ck_assert_uint_eq(ms, 10000);
    ck_assert_int_eq(st_stream_parse_age("1Y", 2, &ms), 0);
    ck_assert_uint_eq(ms, 365ull * 86400000);
    ck_assert_int_eq(st_stream_parse_age("2M", 2, &ms), 0);
    ck_assert_uint_eq(ms, 60ull * 86400000);
    ck_assert_int_eq(st_stream_parse_age("0s", 2, &ms), -1);
    ck_assert_int_eq(st_stream_parse_age("10", 2, &ms), -1);
    ck_assert_int_eq(st_stream_parse_age("s", 1, &ms), -1);
    ck_assert_int_eq(st_stream_parse_age("10x", 3, &ms), -1);
    ck_assert_int_eq(st_stream_parse_age("10ss", 4, &ms), -1);
    ck_assert_int_eq(st_stream_parse_age("-1s", 3, &ms), -1);
}
END_TEST

/* ---- the file operations reported to the observer (the cluster's mirror) ---- */

#define MAX_OPS 4096
typedef struct rec_op {
    int kind;
    char path[512]; /* dir "/" name, or dir for "" */
    uint64_t arg;
    uint8_t *data;
    size_t len;
    pthread_t thread;
} rec_op;
static rec_op ops[MAX_OPS];
static size_t nops;
static pthread_mutex_t ops_mu = PTHREAD_MUTEX_INITIALIZER;

static void record(void *ctx, const st_fop *op)
{
    (void)ctx;
    pthread_mutex_lock(&ops_mu);
    ck_assert_uint_lt(nops, MAX_OPS);
    rec_op *r = &ops[nops++];
    r->kind = op->kind;
    if (op->name[0])
        snprintf(r->path, sizeof r->path, "%s/%s", op->dir, op->name);
    else
        snprintf(r->path, sizeof r->path, "%s", op->dir);
    r->arg = op->arg;
    r->len = op->len;
    r->data = NULL;
    if (op->kind == ST_FOP_WRITE) {
        r->data = malloc(op->len ? op->len : 1);
        memcpy(r->data, op->data, op->len);
    }
    r->thread = pthread_self();
    pthread_mutex_unlock(&ops_mu);
}

/* Replay ops[from..nops) with the prefix `lead` of their paths swapped for `rep`. */
static void replay(size_t from, const char *lead, const char *rep)
{
    size_t ll = strlen(lead);
    for (size_t i = from; i < nops; i++) {
        rec_op *r = &ops[i];
        ck_assert_msg(!strncmp(r->path, lead, ll), "%s outside %s", r->path, lead);
        char p[600];
        snprintf(p, sizeof p, "%s%s", rep, r->path + ll);
        int fd;
        switch (r->kind) {
        case ST_FOP_MKDIR:
            ck_assert_int_eq(mkdir(p, 0755), 0);
            break;
        case ST_FOP_CREATE:
            fd = open(p, O_RDWR | O_CREAT | (r->arg ? O_TRUNC : 0), 0644);
            ck_assert_int_ge(fd, 0);
            close(fd);
            break;
        case ST_FOP_WRITE:
            fd = open(p, O_RDWR);
            ck_assert_msg(fd >= 0, "a write to %s before its creation", p);
            ck_assert_int_eq(pwrite(fd, r->data, r->len, (off_t)r->arg), (ssize_t)r->len);
            close(fd);
            break;
        case ST_FOP_TRUNCATE:
            ck_assert_int_eq(truncate(p, (off_t)r->arg), 0);
            break;
        case ST_FOP_UNLINK:
            ck_assert_int_eq(unlink(p), 0);
            break;
        case ST_FOP_RMDIR:
            ck_assert_int_eq(rmdir(p), 0);
            break;
        case ST_FOP_SYNC:
        case ST_FOP_DIRSYNC:
            break;
        default:
            ck_abort_msg("op kind %d", r->kind);
        }
    }
}

static size_t count_kind(size_t from, int kind)
{
    size_t n = 0;
    for (size_t i = from; i < nops; i++)
        n += ops[i].kind == kind;
    return n;
}

static void *run_batch(void *b)
{
    st_stream_batch_run(b);
    return NULL;
}

static void same_entries(st_stream *a, st_stream *b)
{
    static got ga, gb;
    memset(&ga, 0, sizeof ga);
    memset(&gb, 0, sizeof gb);
    st_stream_reader ra = {0}, rb = {0};
    read_all(a, &ra, 0, &ga);
    read_all(b, &rb, 0, &gb);
    ck_assert_uint_eq(st_stream_first(a), st_stream_first(b));
    ck_assert_uint_eq(st_stream_end(a), st_stream_end(b));
    ck_assert_uint_eq(ga.n, gb.n);
    for (size_t i = 0; i < ga.n; i++) {
        ck_assert_uint_eq(ga.off[i], gb.off[i]);
        ck_assert_int_eq(ga.ts[i], gb.ts[i]);
        ck_assert_uint_eq(ga.flags[i], gb.flags[i]);
        ck_assert_str_eq(ga.body[i], gb.body[i]);
    }
    st_stream_reader_free(&ra);
    st_stream_reader_free(&rb);
}

START_TEST(file_operations_rebuild_the_stream_elsewhere)
{
    char lead[300], rep[300], sl[320], sr[320];
    snprintf(lead, sizeof lead, "%s/lead", D);
    snprintf(rep, sizeof rep, "%s/rep", D);
    snprintf(sl, sizeof sl, "%s/0000000000000001", lead);
    snprintf(sr, sizeof sr, "%s/0000000000000001", rep);
    ck_assert_int_eq(mkdir(lead, 0755), 0);
    ck_assert_int_eq(mkdir(rep, 0755), 0);
    nops = 0;
    st_log_set_observer(record, NULL);
    /* small segments with retention, and the syncs made (reported as barriers) */
    st_stream_options o = {.segment_size = 600, .max_bytes = 2000};
    st_stream *s = st_stream_open(sl, &o, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    /* the new directory, then its name made durable in the parent */
    ck_assert_uint_ge(nops, 2);
    ck_assert_int_eq(ops[0].kind, ST_FOP_MKDIR);
    ck_assert_str_eq(ops[0].path, sl);
    ck_assert_int_eq(ops[1].kind, ST_FOP_DIRSYNC);
    ck_assert_str_eq(ops[1].path, lead);
    unsigned dropped = 0;
    uint64_t k = 0;
    for (int batch = 0; batch < 8; batch++) {
        for (int i = 0; i < 12; i++, k++)
            put(s, 1000 + (int64_t)k, "entry-", k);
        size_t before = nops;
        st_stream_batch *b;
        ck_assert_int_eq(st_stream_batch_begin(s, &b), 0);
        ck_assert_ptr_nonnull(b);
        size_t begun = nops;
        /* the batch runs on another thread (persist's sync thread): its writes and syncs are
         * reported from there, the creation of a file from batch_begin's (the loop's) */
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, run_batch, b), 0);
        ck_assert_int_eq(pthread_join(t, NULL), 0);
        for (size_t i = before; i < nops; i++) {
            if (ops[i].kind == ST_FOP_CREATE) {
                ck_assert_uint_lt(i, begun);
                ck_assert(pthread_equal(ops[i].thread, pthread_self()));
            } else {
                ck_assert_uint_ge(i, begun);
                ck_assert(pthread_equal(ops[i].thread, t));
            }
        }
        /* every file written is synced after its write, in the same batch */
        for (size_t i = begun; i < nops; i++)
            if (ops[i].kind == ST_FOP_WRITE) {
                int synced = 0;
                for (size_t j = i + 1; j < nops; j++)
                    synced |= ops[j].kind == ST_FOP_SYNC && !strcmp(ops[j].path, ops[i].path);
                ck_assert_msg(synced, "%s written, not synced", ops[i].path);
                /* and a batch that runs into the next segment syncs the one it filled before
                 * it writes the next: after a crash only the newest can be torn */
                for (size_t j = i + 1; j < nops; j++)
                    if (ops[j].kind == ST_FOP_WRITE && strcmp(ops[j].path, ops[i].path)) {
                        int before_next = 0;
                        for (size_t m = i + 1; m < j; m++)
                            before_next |=
                                ops[m].kind == ST_FOP_SYNC && !strcmp(ops[m].path, ops[i].path);
                        ck_assert_msg(before_next, "%s written before %s was synced", ops[j].path,
                                      ops[i].path);
                        break;
                    }
            }
        ck_assert_int_eq(st_stream_batch_end(s, b), 0);
        dropped += st_stream_retain(s, 0);
    }
    ck_assert_uint_gt(dropped, 0);
    ck_assert_uint_eq(count_kind(0, ST_FOP_UNLINK), dropped);
    ck_assert_uint_gt(count_kind(0, ST_FOP_CREATE), dropped);
    st_log_set_observer(NULL, NULL);
    replay(0, lead, rep);
    st_stream_options ro = {.no_sync = 1};
    st_stream *r = st_stream_open(sr, &ro, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    same_entries(s, r);
    st_stream_close(r);
    st_stream_close(s);

    /* a torn tail cut at recovery: the truncation is reported too */
    char last[700];
    {
        /* the newest segment: the highest name */
        struct dirent **names;
        int n = scandir(sl, &names, NULL, alphasort);
        ck_assert_int_gt(n, 3); /* ".", "..", two segments at least */
        snprintf(last, sizeof last, "%s/%s", sl, names[n - 1]->d_name);
        for (int i = 0; i < n; i++)
            free(names[i]);
        free(names);
    }
    struct stat before_st;
    ck_assert_int_eq(stat(last, &before_st), 0);
    int fd = open(last, O_WRONLY | O_APPEND);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "torn!", 5), 5);
    close(fd);
    size_t mark = nops;
    st_log_set_observer(record, NULL);
    s = st_stream_open(sl, &o, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    ck_assert_uint_eq(count_kind(mark, ST_FOP_TRUNCATE), 1);
    for (size_t i = mark; i < nops; i++)
        if (ops[i].kind == ST_FOP_TRUNCATE) {
            ck_assert_str_eq(ops[i].path, last);
            ck_assert_uint_eq(ops[i].arg, (uint64_t)before_st.st_size);
        }

    /* deletion: every segment unlinked, then the directory removed */
    mark = nops;
    st_stream_destroy(s);
    st_log_set_observer(NULL, NULL);
    ck_assert_uint_gt(count_kind(mark, ST_FOP_UNLINK), 0);
    ck_assert_int_eq(ops[nops - 1].kind, ST_FOP_RMDIR);
    ck_assert_str_eq(ops[nops - 1].path, sl);
    replay(mark, lead, rep);
    struct stat gone;
    ck_assert_int_eq(stat(sr, &gone), -1);
    ck_assert_int_eq(errno, ENOENT);
    for (size_t i = 0; i < nops; i++)
        free(ops[i].data);
}
END_TEST

/* A cluster's leader gates its streams: what a batch made durable is read only once the
 * generation it ended under is released (on every in-sync replica). */
START_TEST(gated_entries_are_read_only_once_released)
{
    st_stream *s = open_s(0, 0, 0);
    st_stream_gate(s, 5);
    for (uint64_t i = 0; i < 3; i++)
        put(s, 100, "g", i);
    ck_assert_int_eq(st_stream_commit(s), 0);
    st_stream_gate(s, 6);
    for (uint64_t i = 3; i < 5; i++)
        put(s, 100, "g", i);
    ck_assert_int_eq(st_stream_commit(s), 0);
    ck_assert_uint_eq(st_stream_durable_end(s), 5);
    ck_assert_uint_eq(st_stream_end(s), 0);
    ck_assert_uint_eq(st_stream_held(s), 5);
    st_stream_reader r = {0};
    static got g;
    memset(&g, 0, sizeof g);
    read_all(s, &r, 0, &g);
    ck_assert_uint_eq(g.n, 0);
    ck_assert_uint_eq(st_stream_offset_at(s, 0), 0);
    ck_assert_int_eq(st_stream_release(s, 4), 0);
    ck_assert_uint_eq(st_stream_end(s), 0);
    ck_assert_int_eq(st_stream_release(s, 5), 1);
    ck_assert_uint_eq(st_stream_end(s), 3);
    ck_assert_uint_eq(st_stream_held(s), 6);
    ck_assert_uint_eq(st_stream_last_chunk(s), 0);
    read_all(s, &r, 0, &g);
    ck_assert_uint_eq(g.n, 3);
    ck_assert_uint_eq(g.off[2], 2);
    ck_assert_int_eq(st_stream_release(s, 9), 1);
    ck_assert_uint_eq(st_stream_end(s), 5);
    ck_assert_uint_eq(st_stream_last_chunk(s), 3);
    read_all(s, &r, 3, &g);
    ck_assert_uint_eq(g.n, 5);
    ck_assert_int_eq(st_stream_release(s, 9), 0);
    ck_assert_uint_eq(st_stream_held(s), 0);
    st_stream_reader_free(&r);
    st_stream_close(s);
    /* what a recovery finds is readable (a promoted leader's stream) */
    s = open_s(0, 0, 0);
    ck_assert_uint_eq(st_stream_end(s), 5);
    st_stream_close(s);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("streamlog");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, offsets_timestamps_and_durable_reads);
    tcase_add_test(tc, readers_at_their_own_offsets_across_segments);
    tcase_add_test(tc, reader_goes_on_a_credit_at_a_time);
    tcase_add_test(tc, big_entries_and_small_reader_buffer);
    tcase_add_test(tc, reopen_recovers_and_goes_on);
    tcase_add_test(tc, torn_tail_is_cut_and_older_damage_refused);
    tcase_add_test(tc, retention_by_bytes_drops_whole_segments);
    tcase_add_test(tc, retention_by_age_keeps_the_current_segment);
    tcase_add_test(tc, index_stays_sparse);
    tcase_add_test(tc, batch_in_flight_keeps_appending);
    tcase_add_test(tc, full_disk_stalls_then_goes_on);
    tcase_add_test(tc, max_age_units);
    tcase_add_test(tc, file_operations_rebuild_the_stream_elsewhere);
    tcase_add_test(tc, gated_entries_are_read_only_once_released);
    tcase_add_test(tc, corrupt_entry_is_caught_the_first_time_it_is_read);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
