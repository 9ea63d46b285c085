/* fuzz_link.c - libFuzzer target for what a link peer or an operator hands the link code:
 * the EOD control message of a batch (eod_batch_decode, src/eod/eod.c) and remote format
 * names (eod_fmt_parse, src/eod/fmt.c).
 *
 * The first byte picks the parser; the rest is its input. Besides "no crash, no over-read",
 * it checks:
 * - a decoded batch re-encodes to the same bytes, its numbers grow strictly, and the
 *   receiver's decision over it (eod_recv_batch) never accepts a duplicate and leaves the
 *   last accepted number at a number of the batch or where it was; the admission rule
 *   (eod_recv_admit) admits exactly the batches whose every step is within the window and
 *   names the first step beyond it otherwise (the issue-35 forged 2^62 is a seed);
 * - a parsed format name has a non-empty host and queue, a port in 1..65535, and its
 *   canonical form parses back to the same address.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "eod/eod.h"
#include "eod/outq.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void batch(const uint8_t *p, size_t n)
{
    eod_batch b;
    if (eod_batch_decode(p, n, &b) < 0)
        return;
    uint64_t *nos = malloc(b.n * sizeof *nos);
    uint64_t prev = b.first_prev;
    for (uint32_t i = 0; i < b.n; i++) {
        nos[i] = eod_batch_seq_no(&b, i);
        CHECK(nos[i] > prev);
        prev = nos[i];
    }
    char name[70000];
    memcpy(name, b.sender_name, b.sender_name_len);
    name[b.sender_name_len] = 0;
    sl_buf out;
    sl_buf_init(&out);
    if (!memchr(b.sender_name, 0, b.sender_name_len)) {
        eod_batch_encode(&out, b.sender, name, b.seq_id, b.first_prev, nos, b.n);
        CHECK(out.len == n && memcmp(out.data, p, n) == 0);
    }
    uint8_t *acc = malloc(b.n);
    uint64_t last = n > 20 ? nos[p[20] % b.n] - (p[21] & 1) : 0;
    eod_apply ap;
    eod_recv_batch(&b, last, acc, &ap);
    if (ap.rejected) {
        CHECK(ap.accepted == 0 && ap.new_last == last);
    } else {
        CHECK(ap.new_last >= last);
        for (uint32_t i = 0; i < b.n; i++)
            if (acc[i])
                CHECK(nos[i] > last);
    }
    /* admission: a window from the input (1 .. 2^63), steps measured as eod.h says */
    uint64_t window = n > 22 ? (uint64_t)1 << (p[22] % 64) : EOD_SEQ_WINDOW_DEFAULT;
    uint32_t at = b.n + 1;
    eod_admit ad = eod_recv_admit(&b, 0, last, window, &at);
    uint64_t from = last;
    uint32_t first_jump = b.n;
    for (uint32_t i = 0; i < b.n && first_jump == b.n; i++) {
        if (nos[i] > from && nos[i] - from > window)
            first_jump = i;
        from = nos[i] > from ? nos[i] : from;
    }
    CHECK(at == first_jump);
    CHECK((ad == EOD_ADMIT_OK) == (first_jump == b.n));
    CHECK(ad == EOD_ADMIT_OK || ad == EOD_ADMIT_JUMP);
    CHECK(eod_recv_admit(&b, 1, last, window, NULL) == EOD_ADMIT_OTHER_QUEUE);
    free(acc);
    free(nos);
    sl_buf_free(&out);
}

static void fmtname(const uint8_t *p, size_t n)
{
    eod_addr a, again;
    char err[600];
    if (eod_fmt_parse((const char *)p, n, &a, err, sizeof err) < 0)
        return;
    CHECK(a.host[0] && a.queue[0] && a.port >= 1 && a.port <= 65535);
    char canon[1200];
    eod_fmt_canonical(&a, canon, sizeof canon);
    CHECK(eod_fmt_parse(canon, strlen(canon), &again, err, sizeof err) == 0);
    CHECK(!strcmp(a.host, again.host) && a.port == again.port && !strcmp(a.queue, again.queue));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        fmtname(data + 1, size - 1);
    else
        batch(data + 1, size - 1);
    return 0;
}
