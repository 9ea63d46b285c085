/* test_store.c - unit tests for the record log (src/store/log.c, crc32c.c).
 *
 * Each test runs in its own forked process with a fresh temp directory (fixture). Files are
 * damaged with plain pread/pwrite/truncate, exactly as a crash or a bad disk would, and every
 * corruption test checks that the message names the file and the byte offset. The golden
 * test pins the on-disk format with a hand-computed byte array (CRCs checked with an
 * independent bitwise CRC32C), also committed as tests/unit/files/store/golden/.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "store/log.h"
#include "store/syncer.h"

/* ------------------------------------------------------------------ helpers */

static char D[256];
static char err[1024];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    return remove(p);
}

static void setup(void)
{
    strcpy(D, "/tmp/sluice-test-store-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(D));
    sl_log_min_level = SL_LOG_ERROR; /* torn-tail warnings are expected here */
}

static void teardown(void)
{
    nftw(D, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

typedef struct rec {
    uint64_t seq;
    uint8_t type;
    uint8_t *p;
    size_t len;
    st_loc loc;
} rec;

typedef struct recs {
    rec *v;
    size_t n;
    int stop_at; /* return non-zero at this seq (0 = never) */
} recs;

static int collect(void *ctx, uint64_t seq, uint8_t type, const uint8_t *payload, size_t len,
                   st_loc loc)
{
    recs *r = ctx;
    if (r->stop_at && (int)seq == r->stop_at)
        return 5;
    r->v = realloc(r->v, (r->n + 1) * sizeof *r->v);
    rec *e = &r->v[r->n++];
    e->seq = seq;
    e->type = type;
    e->len = len;
    e->loc = loc;
    e->p = malloc(len + 1);
    memcpy(e->p, payload, len);
    return 0;
}

static void recs_free(recs *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->v[i].p);
    free(r->v);
    memset(r, 0, sizeof *r);
}

static st_log_options opts(uint64_t segsize)
{
    st_log_options o = {0};
    o.segment_size = segsize;
    o.no_sync = 1; /* fdatasync is measured separately; tests stay fast */
    return o;
}

static st_log *open_log(uint64_t segsize, recs *r)
{
    st_log_options o = opts(segsize);
    st_log *l = st_log_open(D, &o, collect, r, err, sizeof err);
    ck_assert_msg(l != NULL, "open failed: %s", err);
    return l;
}

/* Open expecting failure; returns the message. */
static const char *open_fails(uint64_t segsize)
{
    st_log_options o = opts(segsize);
    recs r = {0};
    st_log *l = st_log_open(D, &o, collect, &r, err, sizeof err);
    ck_assert_msg(l == NULL, "open unexpectedly succeeded");
    recs_free(&r);
    return err;
}

/* Deterministic payload for seq: length varies, content depends on seq. */
static size_t payload_for(uint64_t seq, uint8_t *p, size_t max)
{
    size_t len = (size_t)((seq * 37) % 97);
    if (len > max)
        len = max;
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(seq * 13 + i);
    return len;
}

typedef struct wrote {
    uint64_t seq;
    st_loc loc;
    size_t len;
} wrote;

/* Append n records (payload_for), committing every `every`; returns their locations. */
static wrote *write_n(st_log *l, uint64_t n, int every)
{
    wrote *w = calloc(n, sizeof *w);
    uint8_t p[128];
    for (uint64_t i = 0; i < n; i++) {
        size_t len = payload_for(i + 1, p, sizeof p);
        w[i].len = len;
        w[i].seq = st_log_append(l, (uint8_t)(i % 5), p, len, &w[i].loc);
        if (every && (i + 1) % (uint64_t)every == 0) {
            uint64_t d;
            ck_assert_int_eq(st_log_commit(l, &d), 0);
            ck_assert_uint_eq(d, w[i].seq);
        }
    }
    uint64_t d;
    ck_assert_int_eq(st_log_commit(l, &d), 0);
    return w;
}

/* The first n replayed records are seq first_seq.. with payload_for() payloads. */
static void check_records(const recs *r, uint64_t first_seq, uint64_t n)
{
    ck_assert_uint_ge(r->n, n);
    uint8_t p[128];
    for (uint64_t i = 0; i < n; i++) {
        uint64_t seq = first_seq + i;
        ck_assert_uint_eq(r->v[i].seq, seq);
        size_t len = payload_for(seq, p, sizeof p);
        ck_assert_uint_eq(r->v[i].len, len);
        ck_assert_int_eq(memcmp(r->v[i].p, p, len), 0);
    }
}

static void check_replay(const recs *r, uint64_t first_seq, uint64_t n)
{
    ck_assert_uint_eq(r->n, n);
    check_records(r, first_seq, n);
}

/* Sorted .seg paths of D. */
static int seg_files(char names[][512], int max)
{
    DIR *d = opendir(D);
    ck_assert_ptr_nonnull(d);
    struct dirent *de;
    char tmp[64][256];
    int n = 0;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".seg") && n < 64 && n < max)
            memcpy(tmp[n++], de->d_name, sizeof tmp[0]);
    closedir(d);
    qsort(tmp, (size_t)n, sizeof tmp[0], (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < n; i++)
        snprintf(names[i], 512, "%s/%.200s", D, tmp[i]);
    return n;
}

static off_t file_size(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_size;
}

static void poke(const char *path, off_t off, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, p, n, off), (ssize_t)n);
    close(fd);
}

static uint8_t peek(const char *path, off_t off)
{
    uint8_t b;
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, &b, 1, off), 1);
    close(fd);
    return b;
}

static void flip(const char *path, off_t off)
{
    uint8_t b = peek(path, off) ^ 0x40;
    poke(path, off, &b, 1);
}

static void *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(*n + 1);
    ck_assert_uint_eq(fread(p, 1, *n, f), *n);
    fclose(f);
    return p;
}

static void spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* The error must read "D/<basename of path>: offset N: ..." */
static void assert_err_at(const char *msg, const char *path, uint64_t off, const char *what)
{
    char want[700];
    snprintf(want, sizeof want, "%s: offset %" PRIu64 ": ", path, off);
    ck_assert_msg(strncmp(msg, want, strlen(want)) == 0, "error '%s' does not start with '%s'", msg,
                  want);
    if (what)
        ck_assert_msg(strstr(msg, what) != NULL, "error '%s' lacks '%s'", msg, what);
}

/* ------------------------------------------------------------------ crc */

START_TEST(crc_vectors)
{
    ck_assert_uint_eq(st_crc32c(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(st_crc32c_sw(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(st_crc32c(0, "", 0), 0);
    /* RFC 3720 (iSCSI) B.4 vectors */
    uint8_t b[32];
    memset(b, 0, 32);
    ck_assert_uint_eq(st_crc32c(0, b, 32), 0x8A9136AAu);
    memset(b, 0xff, 32);
    ck_assert_uint_eq(st_crc32c(0, b, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    ck_assert_uint_eq(st_crc32c(0, b, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)(31 - i);
    ck_assert_uint_eq(st_crc32c(0, b, 32), 0x113FDB5Cu);
    /* chaining */
    ck_assert_uint_eq(st_crc32c(st_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
}
END_TEST

START_TEST(crc_hw_matches_sw)
{
    /* Up to past 2 x 768 + 192 + 7: every mix of the hardware path's three-chain blocks (256
     * and 64 bytes, three at a time), its single chain and its unaligned head. */
    uint8_t b[1800];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof b; i++) {
        x = x * 1103515245 + 12345;
        b[i] = (uint8_t)(x >> 16);
    }
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 1790; n++) {
            uint32_t seed = (uint32_t)(n * 2654435761u);
            ck_assert_uint_eq(st_crc32c(seed, b + off, n), st_crc32c_sw(seed, b + off, n));
            /* any split point gives the same result */
            size_t k = n / 3;
            ck_assert_uint_eq(st_crc32c(st_crc32c(0, b + off, k), b + off + k, n - k),
                              st_crc32c(0, b + off, n));
        }
}
END_TEST

/* ------------------------------------------------------------------ append, commit, replay */

START_TEST(append_commit_reopen)
{
    recs r = {0};
    st_log *l = open_log(0, &r);
    ck_assert_uint_eq(r.n, 0);
    ck_assert_uint_eq(st_log_durable_seq(l), 0);
    wrote *w = write_n(l, 100, 10);
    ck_assert_uint_eq(w[0].seq, 1);
    ck_assert_uint_eq(w[99].seq, 100);
    ck_assert_uint_eq(st_log_pending(l), 0);
    ck_assert_uint_eq(st_log_durable_seq(l), 100);
    st_log_stats st;
    st_log_get_stats(l, &st);
    ck_assert_uint_eq(st.segments, 1);
    ck_assert_uint_eq(st.records_written, 100);
    ck_assert_uint_eq(st.commits, 10);
    /* a commit with nothing buffered is free and reports the same durable seq */
    uint64_t d = 0;
    ck_assert_int_eq(st_log_commit(l, &d), 0);
    ck_assert_uint_eq(d, 100);
    st_log_close(l);

    l = open_log(0, &r);
    check_replay(&r, 1, 100);
    for (int i = 0; i < 100; i++) {
        ck_assert_uint_eq(r.v[i].type, (uint8_t)(i % 5));
        ck_assert_uint_eq(r.v[i].loc.offset, w[i].loc.offset);
    }
    ck_assert_uint_eq(st_log_durable_seq(l), 100);
    /* appends continue the sequence, in the same segment */
    st_iov iov[3] = {{"ab", 2}, {"", 0}, {"cde", 3}};
    st_loc loc;
    ck_assert_uint_eq(st_log_appendv(l, 9, iov, 3, &loc), 101);
    ck_assert_uint_eq(loc.segment, st_log_current_segment(l));
    ck_assert_int_eq(st_log_commit(l, &d), 0);
    ck_assert_uint_eq(d, 101);
    st_log_close(l);
    recs_free(&r);

    l = open_log(0, &r);
    ck_assert_uint_eq(r.n, 101);
    ck_assert_uint_eq(r.v[100].seq, 101);
    ck_assert_uint_eq(r.v[100].type, 9);
    ck_assert_uint_eq(r.v[100].len, 5);
    ck_assert_int_eq(memcmp(r.v[100].p, "abcde", 5), 0);
    st_log_close(l);
    recs_free(&r);
    free(w);
}
END_TEST

/* Recovery reads a segment through an 8 MiB window: records that straddle its edge, and one
 * longer than it (the window grows), come back whole, in order, at their offsets. */
START_TEST(replay_across_the_read_window)
{
    recs r = {0};
    st_log *l = open_log(64u << 20, &r);
    size_t sizes[] = {1000, 3u << 20, 5u << 20, 12u << 20, 7, 4u << 20, 100000};
    size_t n = sizeof sizes / sizeof *sizes;
    st_loc locs[8];
    for (size_t i = 0; i < n; i++) {
        uint8_t *b = malloc(sizes[i]);
        for (size_t k = 0; k < sizes[i]; k++)
            b[k] = (uint8_t)(i * 31 + k * 7);
        ck_assert_uint_eq(st_log_append(l, (uint8_t)i, b, sizes[i], &locs[i]), i + 1);
        free(b);
    }
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    l = open_log(64u << 20, &r);
    ck_assert_uint_eq(r.n, n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(r.v[i].seq, i + 1);
        ck_assert_uint_eq(r.v[i].type, (uint8_t)i);
        ck_assert_uint_eq(r.v[i].len, sizes[i]);
        ck_assert_uint_eq(r.v[i].loc.offset, locs[i].offset);
        for (size_t k = 0; k < sizes[i]; k += 4099)
            ck_assert_uint_eq(r.v[i].p[k], (uint8_t)(i * 31 + k * 7));
    }
    st_log_close(l);
    recs_free(&r);
}
END_TEST

START_TEST(read_committed_and_buffered)
{
    recs r = {0};
    st_log *l = open_log(0, &r);
    st_loc a, b;
    st_log_append(l, 1, "committed", 9, &a);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_append(l, 2, "buffered!!", 10, &b);
    ck_assert_uint_gt(st_log_pending(l), 0);
    uint8_t buf[32];
    ck_assert_int_eq(st_log_read(l, a, buf, 9, err, sizeof err), 0);
    ck_assert_int_eq(memcmp(buf, "committed", 9), 0);
    ck_assert_int_eq(st_log_read(l, b, buf, 10, err, sizeof err), 0);
    ck_assert_int_eq(memcmp(buf, "buffered!!", 10), 0);
    /* wrong length, wrong segment, wrong offset */
    ck_assert_int_eq(st_log_read(l, a, buf, 8, err, sizeof err), -1);
    ck_assert_int_eq(st_log_read(l, (st_loc){a.segment + 7, a.offset}, buf, 9, err, sizeof err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "not live"));
    ck_assert_int_eq(st_log_read(l, (st_loc){a.segment, 1 << 20}, buf, 9, err, sizeof err), -1);
    /* after commit, b is read from the file */
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    ck_assert_int_eq(st_log_read(l, b, buf, 10, err, sizeof err), 0);
    ck_assert_int_eq(memcmp(buf, "buffered!!", 10), 0);
    /* damage on disk is caught by the read's checksum */
    char f[1][512];
    ck_assert_int_eq(seg_files(f, 1), 1);
    flip(f[0], (off_t)a.offset + 17 + 3);
    ck_assert_int_eq(st_log_read(l, a, buf, 9, err, sizeof err), -1);
    assert_err_at(err, f[0], a.offset, "checksum mismatch");
    st_log_close(l);
    recs_free(&r);
}
END_TEST

/* Reading records back forward goes through the read-ahead window: every record comes back
 * right whatever the order (forward, backward, strided, across window and segment ends), and
 * records larger than the window are read on their own. */
START_TEST(read_back_in_any_order)
{
    enum { N = 6000 };
    recs r = {0};
    st_log *l = open_log(1u << 20, &r); /* several segments */
    static st_loc loc[N];
    static uint8_t data[200000];
    size_t lens[N];
    for (int i = 0; i < N; i++) {
        /* mostly small, some around the window size, one far beyond it */
        lens[i] = i == 4000 ? 150000 : i % 500 == 7 ? 120000 : (size_t)((i * 7919) % 3000);
        for (size_t k = 0; k < lens[i]; k++)
            data[k] = (uint8_t)(i * 31 + k);
        st_log_append(l, 1, data, lens[i], &loc[i]);
        if (i % 100 == 99)
            ck_assert_int_eq(st_log_commit(l, NULL), 0);
    }
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    static uint8_t buf[200000];
    for (int pass = 0; pass < 3; pass++) {
        for (int j = 0; j < N; j++) {
            int i = pass == 0 ? j : pass == 1 ? N - 1 - j : (j * 3) % N;
            ck_assert_msg(st_log_read(l, loc[i], buf, lens[i], err, sizeof err) == 0,
                          "record %d: %s", i, err);
            for (size_t k = 0; k < lens[i]; k++)
                if (buf[k] != (uint8_t)(i * 31 + k))
                    ck_abort_msg("record %d differs at byte %zu (pass %d)", i, k, pass);
        }
    }
    /* without the copy: forward, the small ones are seen in the read-ahead window */
    size_t in_place = 0;
    for (int i = 0; i < N; i++) {
        const uint8_t *p = NULL;
        ck_assert_msg(st_log_read_ref(l, loc[i], buf, lens[i], &p, err, sizeof err) == 0,
                      "record %d: %s", i, err);
        in_place += p != buf;
        for (size_t k = 0; k < lens[i]; k++)
            if (p[k] != (uint8_t)(i * 31 + k))
                ck_abort_msg("record %d differs at byte %zu (in place: %d)", i, k, p != buf);
    }
    ck_assert_uint_gt(in_place, N * 9 / 10);
    st_log_close(l);
    recs_free(&r);
}
END_TEST

START_TEST(rollover)
{
    recs r = {0};
    st_log *l = open_log(256, &r);
    uint32_t first = st_log_current_segment(l);
    st_log_roll(l); /* empty segment: no-op */
    ck_assert_uint_eq(st_log_current_segment(l), first);
    wrote *w = write_n(l, 60, 7);
    /* a record larger than a segment gets a segment of its own */
    uint8_t big[600];
    memset(big, 0xab, sizeof big);
    st_loc bl;
    ck_assert_uint_eq(st_log_append(l, 3, big, sizeof big, &bl), 61);
    ck_assert_uint_eq(bl.offset, 16);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    char f[64][512];
    int nf = seg_files(f, 64);
    ck_assert_int_gt(nf, 5);
    for (int i = 0; i < nf - 1; i++)
        ck_assert_int_le(file_size(f[i]), 256);
    for (int i = 0; i < 60; i++) {
        ck_assert_uint_ge(w[i].loc.segment, first);
        ck_assert_uint_le(w[i].loc.offset + 17 + w[i].len, 256);
        if (i)
            ck_assert(w[i].loc.segment == w[i - 1].loc.segment ||
                      (w[i].loc.segment == w[i - 1].loc.segment + 1 && w[i].loc.offset == 16));
        if (w[i].loc.offset == 16) {
            /* file named by its first seq */
            char name[64];
            snprintf(name, sizeof name, "%020" PRIu64 ".seg", w[i].seq);
            ck_assert_str_eq(st_log_segment_name(l, w[i].loc.segment), name);
        }
    }
    st_log_close(l);

    l = open_log(256, &r);
    ck_assert_uint_eq(r.n, 61);
    check_records(&r, 1, 60);
    uint8_t p[700], q[128];
    for (size_t i = 0; i < r.n; i++) {
        ck_assert_int_eq(st_log_read(l, r.v[i].loc, p, r.v[i].len, err, sizeof err), 0);
        ck_assert_int_eq(memcmp(p, r.v[i].p, r.v[i].len), 0);
        if (i < 60) {
            ck_assert_uint_eq(r.v[i].loc.offset, w[i].loc.offset);
            ck_assert_uint_eq(payload_for(i + 1, q, sizeof q), r.v[i].len);
        }
    }
    st_log_stats st;
    st_log_get_stats(l, &st);
    ck_assert_uint_eq(st.segments, (uint64_t)nf);
    /* explicit roll: the next append starts a new segment; the file appears at commit */
    uint32_t cur = st_log_current_segment(l);
    st_log_roll(l);
    ck_assert_uint_eq(st_log_current_segment(l), cur + 1);
    st_loc loc;
    st_log_append(l, 0, "x", 1, &loc);
    ck_assert_uint_eq(loc.segment, cur + 1);
    ck_assert_int_eq(seg_files(f, 64), nf);
    ck_assert_int_eq(st_log_read(l, loc, p, 1, err, sizeof err), 0);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    ck_assert_int_eq(seg_files(f, 64), nf + 1);
    st_log_close(l);
    recs_free(&r);
    free(w);
}
END_TEST

/* A batch that crosses a rollover is written to both files in one commit. */
START_TEST(rollover_inside_one_commit)
{
    recs r = {0};
    st_log *l = open_log(300, &r);
    wrote *w = write_n(l, 40, 0);
    char f[64][512];
    int nf = seg_files(f, 64);
    ck_assert_int_gt(nf, 3);
    st_log_close(l);
    l = open_log(300, &r);
    check_replay(&r, 1, 40);
    st_log_close(l);
    recs_free(&r);
    free(w);
}
END_TEST

/* ------------------------------------------------------------------ torn tails */

/* Build 3 segments (14 records, 3 in the newest); returns the newest file's pristine bytes, and the
 * last record's offset. */
static void *two_segments(char *newest, uint64_t *last_off, size_t *last_len, size_t *size)
{
    recs r = {0};
    st_log *l = open_log(400, &r);
    wrote *w = write_n(l, 14, 3);
    *last_off = w[13].loc.offset;
    *last_len = 17 + w[13].len;
    ck_assert_uint_ne(w[13].loc.segment, w[0].loc.segment);
    ck_assert_uint_eq(w[12].loc.segment, w[13].loc.segment); /* not alone in its segment */
    st_log_close(l);
    recs_free(&r);
    free(w);
    char f[64][512];
    int nf = seg_files(f, 64);
    strcpy(newest, f[nf - 1]);
    void *p = slurp(newest, size);
    ck_assert_uint_eq(*size, *last_off + *last_len);
    return p;
}

static void reopen_then_extend(uint64_t expect_records, const char *newest, uint64_t end)
{
    recs r = {0};
    st_log *l = open_log(400, &r);
    check_replay(&r, 1, expect_records);
    ck_assert_int_eq(file_size(newest), (off_t)end);
    /* the log goes on from where the tail was cut */
    uint8_t p[128];
    size_t len = payload_for(expect_records + 1, p, sizeof p);
    ck_assert_uint_eq(st_log_append(l, 0, p, len, NULL), expect_records + 1);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    recs_free(&r);
    l = open_log(400, &r);
    check_replay(&r, 1, expect_records + 1);
    st_log_close(l);
    recs_free(&r);
}

START_TEST(torn_tail_every_offset)
{
    char newest[512];
    uint64_t off;
    size_t len, size;
    uint8_t *orig = two_segments(newest, &off, &len, &size);
    /* cut exactly at the record start: a clean end, nothing torn */
    for (uint64_t cut = off; cut < off + len; cut++) {
        spit(newest, orig, (size_t)cut);
        reopen_then_extend(13, newest, off);
    }
    free(orig);
}
END_TEST

START_TEST(torn_tail_bad_crc_and_zero_fill)
{
    char newest[512];
    uint64_t off;
    size_t len, size;
    uint8_t *orig = two_segments(newest, &off, &len, &size);
    for (int k = 0; k < 4; k++) {
        spit(newest, orig, size);
        flip(newest, (off_t)off + 4 + k); /* each CRC byte */
        reopen_then_extend(13, newest, off);
    }
    /* the last record's payload damaged: same */
    spit(newest, orig, size);
    flip(newest, (off_t)(off + len - 1));
    reopen_then_extend(13, newest, off);
    /* the file size grew but the data never landed: zeros after the last good record */
    uint8_t *z = calloc(1, size + 300);
    memcpy(z, orig, size);
    spit(newest, z, size + 300);
    reopen_then_extend(14, newest, size);
    free(z);
    free(orig);
}
END_TEST

START_TEST(torn_tail_read_only_reports)
{
    char newest[512];
    uint64_t off;
    size_t len, size;
    uint8_t *orig = two_segments(newest, &off, &len, &size);
    spit(newest, orig, size - 2);
    st_log_options o = opts(400);
    o.read_only = 1;
    recs r = {0};
    st_log *l = st_log_open(D, &o, collect, &r, err, sizeof err);
    ck_assert_msg(l != NULL, "%s", err);
    check_replay(&r, 1, 13);
    ck_assert_ptr_nonnull(st_log_torn_tail(l));
    assert_err_at(st_log_torn_tail(l), newest, off, "torn tail");
    ck_assert_int_eq(file_size(newest), (off_t)(size - 2)); /* untouched */
    ck_assert_uint_eq(st_log_append(l, 0, "x", 1, NULL), 0);
    ck_assert_int_eq(st_log_commit(l, NULL), -1);
    ck_assert_int_eq(errno, EROFS);
    /* a read-only open takes no lock: a writer may open too */
    recs r2 = {0};
    st_log *w = open_log(400, &r2);
    ck_assert_uint_eq(r2.n, 13);
    st_log_close(w);
    st_log_close(l);
    recs_free(&r);
    recs_free(&r2);
    /* read-only never creates the directory */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope", D);
    ck_assert_ptr_null(st_log_open(missing, &o, NULL, NULL, err, sizeof err));
    ck_assert_int_ne(access(missing, F_OK), 0);
    free(orig);
}
END_TEST

START_TEST(empty_and_partial_header_newest)
{
    recs r = {0};
    st_log *l = open_log(400, &r);
    wrote *w = write_n(l, 5, 0);
    st_log_close(l);
    free(w);
    /* a crash right after creating the next segment: zero-length, or a partial header */
    char path[600];
    snprintf(path, sizeof path, "%s/%020d.seg", D, 6);
    for (int k = 0; k < 3; k++) {
        size_t n = k == 0 ? 0 : k == 1 ? 5 : 16;
        spit(path, "SLUICESG\x01\0\0\0\0\0\0\0", n);
        l = open_log(400, &r);
        check_replay(&r, 1, 5);
        ck_assert_int_eq(file_size(path), n == 16 ? 16 : 0);
        ck_assert_str_eq(st_log_segment_name(l, st_log_current_segment(l)), path + strlen(D) + 1);
        st_log_close(l);
        recs_free(&r);
    }
    /* appending into the empty file writes its header first */
    spit(path, "", 0);
    l = open_log(400, &r);
    ck_assert_uint_eq(st_log_append(l, 1, "z", 1, NULL), 6);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    recs_free(&r);
    ck_assert_int_eq(file_size(path), 16 + 17 + 1);
    l = open_log(400, &r);
    ck_assert_uint_eq(r.n, 6);
    ck_assert_uint_eq(r.v[5].seq, 6);
    st_log_close(l);
    recs_free(&r);
    /* a partial header that is not a header prefix is corruption, not a torn tail */
    char p7[600];
    snprintf(p7, sizeof p7, "%s/%020d.seg", D, 7);
    spit(p7, "XLUICE", 6);
    assert_err_at(open_fails(400), p7, 0, "truncated file header");
}
END_TEST

/* ------------------------------------------------------------------ corruption */

/* Build three segments; fills f with their paths; returns the records' locations. */
static wrote *three_segments(char f[][512])
{
    recs r = {0};
    st_log *l = open_log(300, &r);
    wrote *w = write_n(l, 20, 4);
    st_log_close(l);
    recs_free(&r);
    ck_assert_int_ge(seg_files(f, 64), 3);
    return w;
}

/* Index of the first record in segment number `no`, and how many records it holds. */
static int recs_in(const wrote *w, int n, uint32_t no, int *count)
{
    int first = -1;
    *count = 0;
    for (int i = 0; i < n; i++)
        if (w[i].loc.segment == no) {
            if (first < 0)
                first = i;
            ++*count;
        }
    return first;
}

START_TEST(corrupt_payload_not_last)
{
    char f[64][512];
    wrote *w = three_segments(f);
    int nf = seg_files(f, 64);
    uint32_t s0 = w[0].loc.segment;
    int cnt;
    /* in the newest segment, a record before the last one */
    int i = recs_in(w, 20, s0 + (uint32_t)nf - 1, &cnt);
    ck_assert_int_ge(cnt, 2);
    while (w[i].len == 0)
        i++;
    ck_assert_int_lt(i, 19);
    flip(f[nf - 1], (off_t)(w[i].loc.offset + 17));
    assert_err_at(open_fails(300), f[nf - 1], w[i].loc.offset, "checksum mismatch");
    flip(f[nf - 1], (off_t)(w[i].loc.offset + 17));
    /* in the oldest segment: its last record too (only the newest may have a torn tail) */
    i = recs_in(w, 20, s0, &cnt) + cnt - 1;
    flip(f[0], (off_t)(w[i].loc.offset + 4));
    assert_err_at(open_fails(300), f[0], w[i].loc.offset, "checksum mismatch");
    free(w);
}
END_TEST

START_TEST(corrupt_length)
{
    char f[64][512];
    wrote *w = three_segments(f);
    int nf = seg_files(f, 64);
    int cnt;
    int i = recs_in(w, 20, w[0].loc.segment + (uint32_t)nf - 1, &cnt);
    ck_assert_int_ge(cnt, 2);
    uint8_t orig[4], b[4];
    int fd = open(f[nf - 1], O_RDONLY);
    ck_assert_int_eq(pread(fd, orig, 4, (off_t)w[i].loc.offset), 4);
    close(fd);
    /* too large */
    memcpy(b, "\xff\xff\xff\x7f", 4);
    poke(f[nf - 1], (off_t)w[i].loc.offset, b, 4);
    assert_err_at(open_fails(300), f[nf - 1], w[i].loc.offset, "bad record length");
    /* zero */
    memset(b, 0, 4);
    poke(f[nf - 1], (off_t)w[i].loc.offset, b, 4);
    assert_err_at(open_fails(300), f[nf - 1], w[i].loc.offset, "bad record length");
    /* plausible but wrong: the checksum catches it and a valid record follows */
    memcpy(b, orig, 4);
    b[0] ^= 1;
    poke(f[nf - 1], (off_t)w[i].loc.offset, b, 4);
    assert_err_at(open_fails(300), f[nf - 1], w[i].loc.offset, "valid record follows");
    /* runs past the end of the file */
    memcpy(b, "\x00\x00\x01\x00", 4);
    poke(f[nf - 1], (off_t)w[i].loc.offset, b, 4);
    assert_err_at(open_fails(300), f[nf - 1], w[i].loc.offset, "valid record follows");
    poke(f[nf - 1], (off_t)w[i].loc.offset, orig, 4);
    /* in an older segment */
    i = recs_in(w, 20, w[0].loc.segment + 1, &cnt);
    memcpy(b, "\xff\xff\xff\x7f", 4);
    poke(f[1], (off_t)w[i].loc.offset, b, 4);
    assert_err_at(open_fails(300), f[1], w[i].loc.offset, "bad record length");
    free(w);
}
END_TEST

START_TEST(corrupt_older_segment_tail)
{
    char f[64][512];
    wrote *w = three_segments(f);
    int cnt;
    int i = recs_in(w, 20, w[0].loc.segment + 1, &cnt) + cnt - 1;
    /* torn in a non-newest segment: refused */
    ck_assert_int_eq(truncate(f[1], file_size(f[1]) - 3), 0);
    assert_err_at(open_fails(300), f[1], w[i].loc.offset, "runs past the end");
    ck_assert_int_eq(truncate(f[1], (off_t)w[i].loc.offset + 5), 0);
    assert_err_at(open_fails(300), f[1], w[i].loc.offset, "truncated record header");
    /* garbage appended to an older segment */
    ck_assert_int_eq(truncate(f[0], file_size(f[0]) + 40), 0);
    assert_err_at(open_fails(300), f[0], (uint64_t)file_size(f[0]) - 40, "bad record length");
    free(w);
}
END_TEST

START_TEST(corrupt_header)
{
    char f[64][512];
    wrote *w = three_segments(f);
    int nf = seg_files(f, 64);
    flip(f[1], 2);
    assert_err_at(open_fails(300), f[1], 0, "bad magic");
    flip(f[1], 2);
    /* the newest too: a bad header is never a torn tail */
    flip(f[nf - 1], 0);
    assert_err_at(open_fails(300), f[nf - 1], 0, "bad magic");
    flip(f[nf - 1], 0);
    poke(f[0], 8, "\x02", 1);
    assert_err_at(open_fails(300), f[0], 8, "unsupported format version 2");
    poke(f[0], 8, "\x01", 1);
    /* an older segment cut inside its header */
    ck_assert_int_eq(truncate(f[0], 10), 0);
    assert_err_at(open_fails(300), f[0], 0, "truncated file header");
    free(w);
}
END_TEST

START_TEST(corrupt_sequence)
{
    char f[64][512];
    wrote *w = three_segments(f);
    int nf = seg_files(f, 64);
    ck_assert_int_ge(nf, 3);
    /* a middle segment deleted */
    size_t n;
    void *mid = slurp(f[1], &n);
    ck_assert_int_eq(unlink(f[1]), 0);
    assert_err_at(open_fails(300), f[2], 0, "sequence gap");
    spit(f[1], mid, n);
    free(mid);
    /* a record with a valid checksum but the wrong seq (re-checksummed) */
    uint8_t rb[17 + 128];
    int cnt;
    int i = recs_in(w, 20, w[0].loc.segment, &cnt) + 1;
    int fd = open(f[0], O_RDWR);
    ck_assert_int_eq(pread(fd, rb, 17 + w[i].len, (off_t)w[i].loc.offset),
                     (ssize_t)(17 + w[i].len));
    rb[8] += 5;
    uint32_t c = st_crc32c(0, rb + 8, 9 + w[i].len);
    for (int k = 0; k < 4; k++)
        rb[4 + k] = (uint8_t)(c >> (8 * k));
    ck_assert_int_eq(pwrite(fd, rb, 17 + w[i].len, (off_t)w[i].loc.offset),
                     (ssize_t)(17 + w[i].len));
    close(fd);
    char want[64];
    snprintf(want, sizeof want, "expected seq %" PRIu64 ", found seq %" PRIu64, w[i].seq,
             w[i].seq + 5);
    assert_err_at(open_fails(300), f[0], w[i].loc.offset, want);
    /* a file whose name is not a segment name */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/12.seg", D);
    spit(bad, "", 0);
    ck_assert_ptr_nonnull(strstr(open_fails(300), "not a segment file name"));
    free(w);
}
END_TEST

/* ------------------------------------------------------------------ reclaim and refs */

/* Unreferenced segments go wherever they are (records without dependencies), the holes
 * they leave are on record, and recovery accepts exactly those gaps. */
START_TEST(reclaim_anywhere_with_holes)
{
    recs r = {0};
    st_log *l = open_log(200, &r);
    wrote *w = write_n(l, 30, 3);
    char f[64][512];
    int nf = seg_files(f, 64);
    ck_assert_int_ge(nf, 6);
    uint32_t s0 = w[0].loc.segment;
    /* hold a record in the third segment */
    st_log_ref(l, s0 + 2);
    st_log_ref(l, s0 + 2);
    size_t keep_len;
    void *keep = slurp(f[3], &keep_len); /* the fourth: goes in the middle */
    st_reclaim_stats rs;
    st_log_reclaim(l, &rs);
    ck_assert_uint_eq(rs.segments_deleted, (uint64_t)nf - 2); /* all but s0+2 and the newest */
    ck_assert_uint_eq(rs.holes, (uint64_t)nf - 4);            /* the ones after s0+2 */
    char left[64][512];
    ck_assert_int_eq(seg_files(left, 64), 2);
    ck_assert_str_eq(left[0], f[2]);
    ck_assert_str_eq(left[1], f[nf - 1]);
    ck_assert_ptr_null(st_log_segment_name(l, s0));
    ck_assert_ptr_null(st_log_segment_name(l, s0 + 3));
    ck_assert_ptr_nonnull(st_log_segment_name(l, s0 + 2));
    ck_assert_ptr_nonnull(st_log_segment_name(l, st_log_current_segment(l)));
    char holes[600];
    snprintf(holes, sizeof holes, "%s/holes", D);
    ck_assert_int_eq(access(holes, F_OK), 0);
    /* reads of what is left still work (the segment is found past the gap) */
    uint8_t buf[128];
    for (int i = 0; i < 30; i++)
        if (w[i].loc.segment == s0 + 2 || w[i].loc.segment == st_log_current_segment(l))
            ck_assert_int_eq(st_log_read(l, w[i].loc, buf, w[i].len, err, sizeof err), 0);
    /* nothing more while it is referenced; appends go on */
    st_log_reclaim(l, &rs);
    ck_assert_uint_eq(rs.segments_deleted, 0);
    uint64_t next = st_log_append(l, 1, "x", 1, NULL);
    ck_assert_uint_eq(next, 31);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    recs_free(&r);
    /* recovery reads both segments across the gap, and the sequence goes on */
    l = open_log(200, &r);
    uint64_t in2 = 0;
    for (int i = 0; i < 30; i++)
        in2 += w[i].loc.segment == s0 + 2;
    ck_assert_uint_gt(in2, 0);
    ck_assert_uint_eq(r.v[r.n - 1].seq, 31);
    ck_assert_uint_eq(st_log_append(l, 1, "y", 1, NULL), 32);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    recs_free(&r);
    /* without the holes file, the gap is a missing segment */
    size_t hl;
    void *hb = slurp(holes, &hl);
    ck_assert_int_eq(unlink(holes), 0);
    ck_assert_ptr_nonnull(strstr(open_fails(200), "missing segment?"));
    /* a damaged one is refused, naming it */
    ((uint8_t *)hb)[hl - 1] ^= 1;
    spit(holes, hb, hl);
    ck_assert_ptr_nonnull(strstr(open_fails(200), "/holes: offset"));
    ((uint8_t *)hb)[hl - 1] ^= 1;
    spit(holes, hb, hl);
    /* a file left inside a hole (a kill between the holes file and the unlink) is read */
    spit(f[3], keep, keep_len);
    l = open_log(200, &r);
    uint64_t in3 = 0;
    for (size_t i = 0; i < r.n; i++)
        in3 += r.v[i].loc.segment == 2; /* the second file of this open */
    ck_assert_uint_gt(in3, 0);
    /* and once nothing is referenced everything but the newest goes; the holes file goes with
     * the next pass (only holes below the oldest file are dropped: see below) */
    st_log_reclaim(l, &rs);
    ck_assert_int_eq(seg_files(left, 64), 1);
    st_log_reclaim(l, &rs);
    ck_assert_int_ne(access(holes, F_OK), 0);
    st_log_close(l);
    recs_free(&r);
    l = open_log(200, &r);
    ck_assert_uint_eq(r.v[r.n - 1].seq, 32);
    st_log_close(l);
    recs_free(&r);
    free(keep);
    free(hb);
    free(w);
}
END_TEST

/* A kill after the first segment of a pass is deleted: the holes still cover every gap
 * between the files left. (The first version dropped the holes below the first segment the
 * pass would keep, before deleting the ones below it, so a kill in between left a gap
 * between two old segments that recovery refused: found by the crash test.) */
START_TEST(kill_between_holes_and_unlinks)
{
    recs r = {0};
    st_log *l = open_log(200, &r);
    wrote *w = write_n(l, 30, 3);
    uint32_t s0 = w[0].loc.segment;
    st_log_ref(l, s0);
    st_log_ref(l, s0 + 3);
    st_reclaim_stats rs;
    st_log_reclaim(l, &rs); /* s0+1, s0+2 and s0+4.. go: holes between what is left */
    ck_assert_uint_gt(rs.holes, 2);
    st_log_unref(l, s0);
    st_log_unref(l, s0 + 3);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) { /* the oldest two go now, without a hole: killed after the first */
        char e[200];
        if (st_fault_configure("crash_at=tidy-unlinked@1", e, sizeof e) < 0)
            _exit(3);
        st_log_reclaim(l, &rs);
        _exit(4); /* not reached */
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %d", status);
    char f[64][512];
    ck_assert_int_eq(seg_files(f, 64), 2); /* s0+3 and the newest are still there */
    st_log_close(l);
    recs_free(&r);
    l = open_log(200, &r);
    ck_assert_uint_eq(r.v[r.n - 1].seq, 30);
    st_log_reclaim(l, &rs);
    ck_assert_uint_eq(rs.segments_deleted, 1);
    st_log_close(l);
    recs_free(&r);
    l = open_log(200, &r);
    ck_assert_uint_eq(r.v[r.n - 1].seq, 30);
    st_log_close(l);
    recs_free(&r);
    free(w);
}
END_TEST

/* A segment whose records depend on an older one stays while that one, or any segment
 * between, is there; the newest is never deleted; buffered records keep their segment. */
START_TEST(reclaim_keeps_what_records_depend_on)
{
    recs r = {0};
    st_log *l = open_log(200, &r);
    wrote *w = write_n(l, 40, 3);
    char f[64][512];
    int nf = seg_files(f, 64);
    ck_assert_int_ge(nf, 8);
    uint32_t s0 = w[0].loc.segment;
    st_log_ref(l, s0 + 1);            /* a live record in the second segment */
    st_log_depend(l, s0 + 4, s0 + 1); /* a removal in the fifth cancels one in the second */
    st_log_depend(l, s0 + 6, s0 + 4); /* and one in the seventh one in the fifth */
    st_log_depend(l, s0 + 3, s0 + 7); /* a newer target means nothing */
    st_reclaim_stats rs;
    st_log_reclaim(l, &rs);
    ck_assert_ptr_null(st_log_segment_name(l, s0));
    ck_assert_ptr_nonnull(st_log_segment_name(l, s0 + 1));
    ck_assert_ptr_null(st_log_segment_name(l, s0 + 2));
    ck_assert_ptr_null(st_log_segment_name(l, s0 + 3));
    ck_assert_ptr_nonnull(st_log_segment_name(l, s0 + 4));
    ck_assert_ptr_null(st_log_segment_name(l, s0 + 5));
    ck_assert_ptr_nonnull(st_log_segment_name(l, s0 + 6));
    ck_assert_ptr_null(st_log_segment_name(l, s0 + 7));
    /* once the live record goes, the chain of removals goes with it */
    st_log_unref(l, s0 + 1);
    st_log_reclaim(l, &rs);
    ck_assert_uint_eq(rs.segments_deleted, 3);
    ck_assert_int_eq(seg_files(f, 64), 1);
    /* the newest is never deleted; records still buffered keep theirs */
    st_log_append(l, 0, "a", 1, NULL);
    st_log_roll(l);
    st_log_append(l, 0, "b", 1, NULL);
    st_log_reclaim(l, &rs);
    ck_assert_uint_eq(rs.segments_deleted, 0);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    /* marked: only what was unreferenced at the mark and stayed so */
    uint32_t cur = st_log_current_segment(l);
    st_log_roll(l);
    st_log_append(l, 0, "c", 1, NULL);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_ref(l, cur);
    st_log_mark_dead(l);
    st_log_unref(l, cur); /* dropped after the mark: its removal may not be durable yet */
    st_log_reclaim_marked(l, &rs);
    ck_assert_ptr_nonnull(st_log_segment_name(l, cur));
    ck_assert_uint_eq(rs.segments_deleted, 1); /* the one before it, unreferenced all along */
    st_log_mark_dead(l);
    st_log_reclaim_marked(l, &rs);
    ck_assert_ptr_null(st_log_segment_name(l, cur));
    st_log_close(l);
    recs_free(&r);
    l = open_log(200, &r);
    ck_assert_uint_eq(r.n, 1);
    ck_assert_uint_eq(r.v[0].seq, 43);
    st_log_close(l);
    recs_free(&r);
    free(w);
}
END_TEST

/* The plan the reclaim rule makes, with segments taken as gone (compaction's what-if). */
START_TEST(plan_follows_floors)
{
    st_seg_info v[6];
    for (int i = 0; i < 6; i++)
        v[i] = (st_seg_info){.no = (uint32_t)(i + 1),
                             .floor = (uint32_t)(i + 1),
                             .bytes = 100,
                             .refs = 0,
                             .written = 1,
                             .current = i == 5};
    v[0].refs = 1;  /* live */
    v[1].floor = 1; /* depends on it */
    v[2].floor = 2; /* depends on the one that depends on it */
    v[3].floor = 1;
    uint8_t del[6], gone[6] = {0};
    st_log_plan(v, 6, NULL, del);
    ck_assert(!del[0] && !del[1] && !del[2] && !del[3] && del[4] && !del[5]);
    gone[0] = 1; /* if the live record were copied forward */
    st_log_plan(v, 6, gone, del);
    ck_assert(del[0] && del[1] && del[2] && del[3] && del[4] && !del[5]);
    v[2].written = 0; /* a batch is writing it: it stays, and so does what depends on it */
    st_log_plan(v, 6, gone, del);
    ck_assert(del[0] && del[1] && !del[2] && !del[3] && del[4]);
}
END_TEST

/* Sequence numbers never go back into a hole, even when the segment after it never reached
 * the disk (the crash came before its first write). */
START_TEST(sequence_goes_on_past_a_hole)
{
    recs r = {0};
    st_log *l = open_log(200, &r);
    wrote *w = write_n(l, 30, 3);
    char f[64][512];
    int nf = seg_files(f, 64);
    uint32_t s0 = w[0].loc.segment;
    st_log_ref(l, s0);
    st_reclaim_stats rs;
    st_log_reclaim(l, &rs);
    ck_assert_uint_eq(rs.holes, (uint64_t)nf - 2);
    st_log_close(l);
    recs_free(&r);
    ck_assert_int_eq(unlink(f[nf - 1]), 0); /* the newest segment is gone too */
    l = open_log(200, &r);
    uint64_t last = r.v[r.n - 1].seq;
    uint64_t seq = st_log_append(l, 1, "z", 1, NULL);
    ck_assert_uint_gt(seq, 30 - 3); /* past the hole, not right after the first segment */
    ck_assert_uint_gt(seq, last + 1);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    recs_free(&r);
    l = open_log(200, &r);
    ck_assert_uint_eq(r.v[r.n - 1].seq, seq);
    st_log_close(l);
    recs_free(&r);
    free(w);
}
END_TEST

START_TEST(unref_below_zero_aborts)
{
    recs r = {0};
    st_log *l = open_log(0, &r);
    st_log_unref(l, st_log_current_segment(l));
}
END_TEST

START_TEST(ref_unknown_segment_aborts)
{
    recs r = {0};
    st_log *l = open_log(0, &r);
    st_log_ref(l, 0);
}
END_TEST

/* ------------------------------------------------------------------ I/O faults */

static int fault_mode;
static int fault_calls;

static ssize_t fault_pwrite(int fd, const void *p, size_t n, off_t off)
{
    fault_calls++;
    switch (fault_mode) {
    case 1: /* one byte at a time, with EINTR in between */
        if (fault_calls % 2) {
            errno = EINTR;
            return -1;
        }
        return pwrite(fd, p, 1, off);
    case 2: /* disk full halfway through */
        if (fault_calls == 1)
            return pwrite(fd, p, n / 2, off);
        errno = ENOSPC;
        return -1;
    default:
        return pwrite(fd, p, n, off);
    }
}

static int fault_fdatasync(int fd)
{
    errno = EIO;
    return -1;
}

START_TEST(short_writes_and_eintr)
{
    recs r = {0};
    st_log *l = open_log(300, &r);
    st_log__pwrite = fault_pwrite;
    fault_mode = 1;
    wrote *w = write_n(l, 30, 7);
    st_log__pwrite = pwrite;
    ck_assert_int_gt(fault_calls, 1000);
    st_log_close(l);
    l = open_log(300, &r);
    check_replay(&r, 1, 30);
    st_log_close(l);
    recs_free(&r);
    free(w);
}
END_TEST

/* ENOSPC is not a failure of the log: the batch stalls (nothing claimed durable, nothing
 * lost, the bytes readable), appends go on, and the next commit once space is back writes the
 * stalled bytes again (over the half of them that reached the file) with the newer ones. */
START_TEST(enospc_stalls_then_goes_on)
{
    recs r = {0};
    st_log *l = open_log(0, &r);
    wrote *w = write_n(l, 10, 0);
    st_log__pwrite = fault_pwrite;
    fault_mode = 2;
    uint8_t big[100];
    memset(big, 7, sizeof big);
    st_loc loc;
    st_log_append(l, 1, big, sizeof big, &loc);
    for (int i = 0; i < 4; i++)
        st_log_append(l, 1, big, sizeof big, NULL);
    ck_assert_int_eq(st_log_commit(l, NULL), -1);
    ck_assert_int_eq(errno, ENOSPC);
    ck_assert_int_eq(st_log_stalled(l), 1);
    ck_assert_int_eq(st_log_failed(l), 0);
    ck_assert_uint_eq(st_log_durable_seq(l), 10);
    uint8_t back[100];
    ck_assert_int_eq(st_log_read(l, loc, back, sizeof back, err, sizeof err), 0);
    ck_assert(!memcmp(back, big, sizeof big));
    /* still out of space: another try stalls again */
    ck_assert_uint_eq(st_log_append(l, 1, "x", 1, NULL), 16);
    ck_assert_int_eq(st_log_commit(l, NULL), -1);
    ck_assert_int_eq(errno, ENOSPC);
    /* space is back */
    st_log__pwrite = pwrite;
    ck_assert_uint_eq(st_log_append(l, 1, "y", 1, NULL), 17);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    ck_assert_int_eq(st_log_stalled(l), 0);
    ck_assert_uint_eq(st_log_durable_seq(l), 17);
    st_log_close(l);
    l = open_log(0, &r);
    ck_assert_uint_eq(r.n, 17);
    check_records(&r, 1, 10);
    ck_assert_uint_eq(st_log_append(l, 1, "z", 1, NULL), 18);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    recs_free(&r);
    free(w);
}
END_TEST

START_TEST(fsync_failure_is_sticky)
{
    recs r = {0};
    st_log_options o = opts(0);
    o.no_sync = 0;
    st_log *l = st_log_open(D, &o, collect, &r, err, sizeof err);
    ck_assert_ptr_nonnull(l);
    st_log_append(l, 1, "a", 1, NULL);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log__fdatasync = fault_fdatasync;
    st_log_append(l, 1, "b", 1, NULL);
    ck_assert_int_eq(st_log_commit(l, NULL), -1);
    ck_assert_int_eq(errno, EIO);
    ck_assert_uint_eq(st_log_durable_seq(l), 1);
    st_log__fdatasync = fdatasync;
    ck_assert_int_eq(st_log_commit(l, NULL), -1);
    st_reclaim_stats rs;
    st_log_reclaim(l, &rs);
    ck_assert_uint_eq(rs.segments_deleted, 0);
    st_log_close(l);
    recs_free(&r);
}
END_TEST

/* ------------------------------------------------------------------ misc */

START_TEST(second_writer_refused)
{
    recs r = {0};
    st_log *l = open_log(0, &r);
    ck_assert_ptr_nonnull(strstr(open_fails(0), "locked"));
    st_log_close(l);
    st_log *l2 = open_log(0, &r);
    st_log_close(l2);
}
END_TEST

START_TEST(replay_callback_stops)
{
    recs r = {0};
    st_log *l = open_log(0, &r);
    wrote *w = write_n(l, 10, 0);
    st_log_close(l);
    r.stop_at = 4;
    st_log_options o = opts(0);
    errno = 0;
    ck_assert_ptr_null(st_log_open(D, &o, collect, &r, err, sizeof err));
    ck_assert_int_eq(errno, ECANCELED);
    ck_assert_uint_eq(r.n, 3);
    ck_assert_ptr_nonnull(strstr(err, "replay stopped at seq 4"));
    recs_free(&r);
    free(w);
}
END_TEST

START_TEST(oversized_append_refused)
{
    recs r = {0};
    st_log *l = open_log(0, &r);
    st_iov iov[2] = {{"x", ST_LOG_MAX_RECORD - 1}, {"y", 1}};
    ck_assert_uint_eq(st_log_appendv(l, 0, iov, 2, NULL), 0);
    ck_assert_int_eq(errno, EMSGSIZE);
    ck_assert_uint_eq(st_log_append(l, 0, "ok", 2, NULL), 1);
    st_log_close(l);
}
END_TEST

/* ------------------------------------------------------------------ golden file */

/* Three records, computed by hand from log.h (CRCs from an independent bitwise CRC32C). */
static const uint8_t GOLDEN[73] = {
    /* file header: "SLUICESG", version 1, reserved 0 */
    0x53, 0x4c, 0x55, 0x49, 0x43, 0x45, 0x53, 0x47, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    /* @16: length 3, crc 0x9c1d7d57, seq 1, type 1, "hi" */
    0x03, 0x00, 0x00, 0x00, 0x57, 0x7d, 0x1d, 0x9c, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x68, 0x69,
    /* @35: length 1, crc 0x82bed629, seq 2, type 7, empty payload */
    0x01, 0x00, 0x00, 0x00, 0x29, 0xd6, 0xbe, 0x82, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x07,
    /* @52: length 5, crc 0x4db71a00, seq 3, type 255, 00 01 02 80 */
    0x05, 0x00, 0x00, 0x00, 0x00, 0x1a, 0xb7, 0x4d, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0x00, 0x01, 0x02, 0x80};

static void check_golden_replay(const recs *r)
{
    ck_assert_uint_eq(r->n, 3);
    ck_assert_uint_eq(r->v[0].seq, 1);
    ck_assert_uint_eq(r->v[0].type, 1);
    ck_assert_uint_eq(r->v[0].len, 2);
    ck_assert_int_eq(memcmp(r->v[0].p, "hi", 2), 0);
    ck_assert_uint_eq(r->v[0].loc.offset, 16);
    ck_assert_uint_eq(r->v[1].seq, 2);
    ck_assert_uint_eq(r->v[1].type, 7);
    ck_assert_uint_eq(r->v[1].len, 0);
    ck_assert_uint_eq(r->v[1].loc.offset, 35);
    ck_assert_uint_eq(r->v[2].seq, 3);
    ck_assert_uint_eq(r->v[2].type, 255);
    ck_assert_uint_eq(r->v[2].len, 4);
    ck_assert_int_eq(memcmp(r->v[2].p, "\x00\x01\x02\x80", 4), 0);
    ck_assert_uint_eq(r->v[2].loc.offset, 52);
}

START_TEST(golden_format)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%020d.seg", D, 1);
    /* 1. the hand-written bytes open and replay */
    spit(path, GOLDEN, sizeof GOLDEN);
    recs r = {0};
    st_log *l = open_log(0, &r);
    check_golden_replay(&r);
    ck_assert_uint_eq(st_log_append(l, 0, "", 0, NULL), 4);
    st_log_close(l);
    recs_free(&r);
    /* 2. the writer produces exactly these bytes */
    unlink(path);
    l = open_log(0, &r);
    st_log_append(l, 1, "hi", 2, NULL);
    st_log_append(l, 7, NULL, 0, NULL);
    st_log_append(l, 255, "\x00\x01\x02\x80", 4, NULL);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    size_t n;
    uint8_t *got = slurp(path, &n);
    ck_assert_uint_eq(n, sizeof GOLDEN);
    ck_assert_int_eq(memcmp(got, GOLDEN, n), 0);
    free(got);
    /* 3. the committed fixture is the same bytes and opens read-only */
    char fixture[600];
    const char *src = __FILE__;
    const char *slash = strrchr(src, '/');
    snprintf(fixture, sizeof fixture, "%.*sfiles/store/golden", slash ? (int)(slash - src + 1) : 0,
             src);
    char fpath[700];
    snprintf(fpath, sizeof fpath, "%s/%020d.seg", fixture, 1);
    got = slurp(fpath, &n);
    ck_assert_uint_eq(n, sizeof GOLDEN);
    ck_assert_int_eq(memcmp(got, GOLDEN, n), 0);
    free(got);
    st_log_options o = opts(0);
    o.read_only = 1;
    l = st_log_open(fixture, &o, collect, &r, err, sizeof err);
    ck_assert_msg(l != NULL, "%s", err);
    check_golden_replay(&r);
    ck_assert_ptr_null(st_log_torn_tail(l));
    st_log_close(l);
    recs_free(&r);
}
END_TEST

/* ------------------------------------------------------------------ batches and the sync thread */

static void run_batch_job(void *arg)
{
    st_log_batch_run(arg);
}

/* While a batch is in flight the log keeps appending, reading (from the in-flight bytes, the
 * append buffer and the file) and rolling over; a batch covers what was appended before it
 * began and nothing after; the next batch picks up the rest; everything survives a reopen. */
START_TEST(batch_in_flight_appends_and_reads)
{
    recs r = {0};
    st_log *l = open_log(600, &r); /* small segments: rollovers during the flight */
    st_syncer *sy = st_syncer_new();
    ck_assert_ptr_nonnull(sy);
    enum { N = 120 };
    static st_loc loc[N];
    uint8_t p[128], q[128];
    size_t lens[N];
    int next = 0, batches = 0;
    while (next < N) {
        /* some records, then a batch of them on the thread, then more while it runs */
        for (int k = 0; k < 7 && next < N; k++, next++) {
            lens[next] = payload_for((uint64_t)next + 1, p, sizeof p);
            ck_assert_uint_eq(st_log_append(l, 1, p, lens[next], &loc[next]), (uint64_t)next + 1);
        }
        st_log_batch *b;
        ck_assert_int_eq(st_log_batch_begin(l, 1, &b), 0);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(st_log_batch_last_seq(b), (uint64_t)next);
        ck_assert_uint_eq(st_log_pending(l), 0);
        ck_assert_int_eq(st_log_batch_in_flight(l), 1);
        st_syncer_post(sy, run_batch_job, b);
        for (int k = 0; k < 5 && next < N; k++, next++) {
            lens[next] = payload_for((uint64_t)next + 1, p, sizeof p);
            st_log_append(l, 1, p, lens[next], &loc[next]);
        }
        /* every record so far reads back, wherever it is now */
        for (int i = 0; i < next; i++) {
            size_t n = payload_for((uint64_t)i + 1, p, sizeof p);
            ck_assert_msg(st_log_read(l, loc[i], q, n, err, sizeof err) == 0, "record %d: %s", i,
                          err);
            ck_assert_int_eq(memcmp(p, q, n), 0);
        }
        st_syncer_wait(sy);
        ck_assert_int_eq(st_log_batch_failed(b), 0);
        ck_assert_int_eq(st_log_batch_end(l, b), 0);
        ck_assert_uint_eq(st_log_durable_seq(l), st_log_batch_last_seq(b));
        batches++;
    }
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    ck_assert_uint_eq(st_log_durable_seq(l), N);
    /* nothing left: a sync batch has nothing to do */
    st_log_batch *none;
    ck_assert_int_eq(st_log_batch_begin(l, 1, &none), 0);
    ck_assert_ptr_null(none);
    st_syncer_free(sy);
    st_log_close(l);
    l = open_log(600, &r);
    check_replay(&r, 1, N);
    st_log_close(l);
    recs_free(&r);
    ck_assert_int_gt(batches, 5);
}
END_TEST

/* A batch is light (st_log_batch_light: the loop may write it itself) only when it is writes
 * alone, small, into a file that exists, inside its reserved space: a sync, a new segment
 * file, a rollover (the full segment's sync) or too many bytes each make it heavy. */
static int light_after_append(st_log *l, size_t bytes, int sync, size_t max)
{
    static uint8_t p[32 * 1024];
    memset(p, 0x5a, sizeof p);
    for (size_t done = 0; done < bytes; done += 1000)
        ck_assert_uint_gt(st_log_append(l, 1, p, bytes - done < 1000 ? bytes - done : 1000, NULL),
                          0);
    st_log_batch *b;
    ck_assert_int_eq(st_log_batch_begin(l, sync, &b), 0);
    ck_assert_ptr_nonnull(b);
    int light = st_log_batch_light(b, max);
    st_log_batch_run(b);
    ck_assert_int_eq(st_log_batch_failed(b), 0);
    ck_assert_int_eq(st_log_batch_end(l, b), 0);
    return light;
}

START_TEST(batch_light_only_for_small_writes)
{
    recs r = {0};
    st_log *l = open_log(64 * 1024, &r);
    ck_assert_int_eq(st_log_commit(l, NULL), 0); /* the first segment file exists */
    ck_assert_int_eq(light_after_append(l, 2000, 0, 64 * 1024), 1);
    ck_assert_int_eq(light_after_append(l, 2000, 1, 64 * 1024), 0); /* a sync */
    ck_assert_int_eq(light_after_append(l, 10 * 1000, 0, 4096), 0); /* too big */
    ck_assert_int_eq(light_after_append(l, 10 * 1000, 0, 64 * 1024), 1);
    ck_assert_int_eq(light_after_append(l, 60 * 1000, 0, 1024 * 1024), 0); /* rolls over */
    ck_assert_int_eq(light_after_append(l, 1000, 0, 64 * 1024), 1);
    st_log_close(l);
    l = open_log(64 * 1024, &r); /* what the light batches wrote replays */
    ck_assert_uint_eq(r.n, 85);
    st_log_close(l);
    recs_free(&r);
}
END_TEST

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* TIDY's deletions (st_log_reclaim_marked) unlink at once, but the closes of the deleted
 * files, where the file system frees their blocks (half a second on the loop for 1 GB of
 * 64 MiB segments on ext4), are the next batch's run on the sync thread; a close with no
 * batch after it still closes them. */
START_TEST(reclaim_marked_closes_in_the_batch)
{
    recs r = {0};
    int before = open_fds();
    st_log *l = open_log(200, &r);
    free(write_n(l, 40, 3));
    char f[64][512];
    int nf = seg_files(f, 64);
    ck_assert_int_ge(nf, 8);
    st_syncer *sy = st_syncer_new();
    int held = open_fds();
    st_log_mark_dead(l);
    st_reclaim_stats rs;
    st_log_reclaim_marked(l, &rs);
    ck_assert_uint_ge(rs.segments_deleted, 7);
    ck_assert_int_eq(seg_files(f, 64), nf - (int)rs.segments_deleted); /* unlinked now */
    ck_assert_int_eq(open_fds(), held); /* not closed on this thread */
    /* the next batch takes them, with nothing appended */
    st_log_batch *b;
    ck_assert_int_eq(st_log_batch_begin(l, 0, &b), 0);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(open_fds(), held);
    st_syncer_post(sy, run_batch_job, b);
    st_syncer_wait(sy);
    ck_assert_int_eq(st_log_batch_end(l, b), 0);
    ck_assert_int_eq(open_fds(), held - (int)rs.segments_deleted);
    /* nothing left for a batch to do */
    ck_assert_int_eq(st_log_batch_begin(l, 1, &b), 0);
    ck_assert_ptr_null(b);
    /* the same again, closed with no batch after the reclaim */
    free(write_n(l, 20, 3));
    st_log_mark_dead(l);
    st_log_reclaim_marked(l, &rs);
    ck_assert_uint_ge(rs.segments_deleted, 1);
    st_syncer_free(sy);
    st_log_close(l);
    ck_assert_int_eq(open_fds(), before);
    recs_free(&r);
    l = open_log(200, &r); /* what is left replays */
    ck_assert_uint_ge(r.n, 1);
    st_log_close(l);
    recs_free(&r);
}
END_TEST

static int fail_sync(int fd)
{
    (void)fd;
    errno = EIO;
    return -1;
}

/* A batch whose sync fails fails the log for good, and reports it only at its end (the run
 * touched nothing of the log). */
START_TEST(batch_failure_fails_the_log)
{
    recs r = {0};
    st_log_options o = {0}; /* real syncs: the seam is what fails */
    st_log *l = st_log_open(D, &o, collect, &r, err, sizeof err);
    ck_assert_ptr_nonnull(l);
    st_log_append(l, 1, "x", 1, NULL);
    st_log_batch *b;
    ck_assert_int_eq(st_log_batch_begin(l, 1, &b), 0);
    int (*saved)(int) = st_log__fdatasync;
    st_log__fdatasync = fail_sync;
    st_log_batch_run(b);
    st_log__fdatasync = saved;
    ck_assert_int_eq(st_log_batch_failed(b), 1);
    ck_assert_uint_eq(st_log_durable_seq(l), 0); /* not yet told */
    ck_assert_int_eq(st_log_batch_end(l, b), -1);
    ck_assert_int_eq(errno, EIO);
    ck_assert_uint_eq(st_log_durable_seq(l), 0);
    ck_assert_int_eq(st_log_batch_begin(l, 1, &b), -1);
    ck_assert_uint_eq(st_log_append(l, 1, "y", 1, NULL), 0);
    st_log_close(l);
    recs_free(&r);
}
END_TEST

/* The fault hook: a delay makes syncs slow, fail_after makes them fail. */
START_TEST(fault_hook_settings)
{
    char e[128];
    ck_assert_int_eq(st_fault_configure("", e, sizeof e), 0);
    ck_assert_int_eq(st_fault_configure("sync_delay=3", e, sizeof e), -1);
    ck_assert_ptr_nonnull(strstr(e, "sync_delay=3"));
    ck_assert_int_eq(st_fault_configure("sync_errno=EPERM", e, sizeof e), -1);
    ck_assert_int_eq(
        st_fault_configure("sync_delay_ms=30,sync_fail_after=1,sync_errno=ENOSPC", e, sizeof e), 0);
    recs r = {0};
    st_log_options o = {0};
    st_log *l = st_log_open(D, &o, collect, &r, err, sizeof err);
    ck_assert_ptr_nonnull(l);
    st_log_append(l, 1, "a", 1, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(st_log_commit(l, NULL), 0); /* the first sync works, slowly */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    ck_assert_msg(ms >= 29, "sync took %.1f ms, expected the 30 ms delay", ms);
    st_log_append(l, 1, "b", 1, NULL);
    ck_assert_int_eq(st_log_commit(l, NULL), -1); /* the second fails */
    ck_assert_int_eq(errno, ENOSPC);
    st_log_close(l);
    recs_free(&r);
}
END_TEST

/* The thread runs one job at a time and says so on its eventfd. */
static void slow_job(void *arg)
{
    usleep(20000);
    (*(int *)arg)++;
}

START_TEST(syncer_signals_completion)
{
    st_syncer *sy = st_syncer_new();
    ck_assert_ptr_nonnull(sy);
    int n = 0;
    ck_assert_int_eq(st_syncer_busy(sy), 0);
    ck_assert_int_eq(st_syncer_take_done(sy), 0);
    st_syncer_post(sy, slow_job, &n);
    ck_assert_int_eq(st_syncer_busy(sy), 1);
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(st_syncer_fd(sy), &rd);
    struct timeval tv = {5, 0};
    ck_assert_int_eq(select(st_syncer_fd(sy) + 1, &rd, NULL, NULL, &tv), 1);
    ck_assert_int_eq(st_syncer_take_done(sy), 1);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(st_syncer_busy(sy), 0);
    /* the eventfd is drained once taken */
    FD_ZERO(&rd);
    FD_SET(st_syncer_fd(sy), &rd);
    tv = (struct timeval){0, 0};
    ck_assert_int_eq(select(st_syncer_fd(sy) + 1, &rd, NULL, NULL, &tv), 0);
    st_syncer_post(sy, slow_job, &n);
    st_syncer_wait(sy);
    ck_assert_int_eq(n, 2);
    st_syncer_post(sy, slow_job, &n);
    st_syncer_free(sy); /* waits for the job */
    ck_assert_int_eq(n, 3);
}
END_TEST

static Suite *store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("crc");
    tcase_add_test(tc, crc_vectors);
    tcase_add_test(tc, crc_hw_matches_sw);
    suite_add_tcase(s, tc);

    tc = tcase_create("log");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, append_commit_reopen);
    tcase_add_test(tc, replay_across_the_read_window);
    tcase_add_test(tc, read_committed_and_buffered);
    tcase_add_test(tc, read_back_in_any_order);
    tcase_add_test(tc, rollover);
    tcase_add_test(tc, rollover_inside_one_commit);
    tcase_add_test(tc, torn_tail_every_offset);
    tcase_add_test(tc, torn_tail_bad_crc_and_zero_fill);
    tcase_add_test(tc, torn_tail_read_only_reports);
    tcase_add_test(tc, empty_and_partial_header_newest);
    tcase_add_test(tc, corrupt_payload_not_last);
    tcase_add_test(tc, corrupt_length);
    tcase_add_test(tc, corrupt_older_segment_tail);
    tcase_add_test(tc, corrupt_header);
    tcase_add_test(tc, corrupt_sequence);
    tcase_add_test(tc, reclaim_anywhere_with_holes);
    tcase_add_test(tc, kill_between_holes_and_unlinks);
    tcase_add_test(tc, reclaim_keeps_what_records_depend_on);
    tcase_add_test(tc, reclaim_marked_closes_in_the_batch);
    tcase_add_test(tc, plan_follows_floors);
    tcase_add_test(tc, sequence_goes_on_past_a_hole);
    tcase_add_test_raise_signal(tc, unref_below_zero_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, ref_unknown_segment_aborts, SIGABRT);
    tcase_add_test(tc, short_writes_and_eintr);
    tcase_add_test(tc, enospc_stalls_then_goes_on);
    tcase_add_test(tc, fsync_failure_is_sticky);
    tcase_add_test(tc, second_writer_refused);
    tcase_add_test(tc, replay_callback_stops);
    tcase_add_test(tc, oversized_append_refused);
    tcase_add_test(tc, golden_format);
    tcase_add_test(tc, batch_in_flight_appends_and_reads);
    tcase_add_test(tc, batch_light_only_for_small_writes);
    tcase_add_test(tc, batch_failure_fails_the_log);
    tcase_add_test(tc, fault_hook_settings);
    tcase_add_test(tc, syncer_signals_completion);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(store_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
