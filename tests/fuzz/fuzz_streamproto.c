/* fuzz_streamproto.c - libFuzzer target for the stream protocol codec (src/streamproto/).
 *
 * Input layout: octet 0 picks the frame_max (0: none, else 2^(8 + x % 16)), octet 1 the
 * slice size the feeder is given bytes in (1 + x % 64); the rest is a byte stream of frames.
 * Beyond "no crash, no over-read, no leak" (ASan/UBSan), it checks:
 * - every frame the feeder yields fits frame_max, and the feeder sees the same frames
 *   whatever the slice size (compared with sp_frame_parse over the whole input);
 * - every body sp_cmd_decode accepts re-encodes to exactly the same bytes (the codec is
 *   canonical, so decode(encode(x)) == x byte for byte), and decodes again;
 * - a Deliver's chunk, and the whole input taken as a chunk in both layouts, walk without
 *   error past what the parsers accepted (entries, batch records);
 * - a chunk built from pieces of the input parses back with a good CRC and the same entries.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "streamproto/chunk.h"
#include "streamproto/cmd.h"
#include "streamproto/frame.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void walk_chunk(const sp_chunk *c)
{
    (void)sp_chunk_check_crc(c);
    (void)sp_chunk_check_entries(c);
    sp_entry_iter it;
    sp_entry e;
    int got;
    sp_entry_iter_init(&it, c);
    for (;;) {
        if (sp_entry_next(&it, &e, &got) != SL_OK || !got)
            break;
        CHECK(e.body || e.len == 0);
        if (e.batch && e.compression == SP_COMPRESSION_NONE) {
            sp_record_iter ri;
            const uint8_t *rec;
            uint32_t len;
            sp_record_iter_init(&ri, &e);
            while (sp_record_next(&ri, &rec, &len, &got) == SL_OK && got)
                CHECK(rec >= e.body && rec + len <= e.body + e.len);
        }
    }
}

static void body_roundtrip(const uint8_t *body, size_t len)
{
    sp_cmd c;
    if (sp_cmd_decode(body, len, &c) != SL_OK) {
        CHECK(c.arena == NULL);
        return;
    }
    if (c.key == SP_DELIVER)
        walk_chunk(&c.u.deliver.hdr);
    (void)sp_key_name(c.key);
    (void)sp_code_name(c.code);
    sl_buf b;
    sl_buf_init(&b);
    CHECK(sp_cmd_encode(&b, &c, 0) == SL_OK);
    CHECK(sl_buf_unread(&b) == len + 4);
    CHECK(sl_get_u32(sl_buf_head(&b)) == len);
    CHECK(memcmp(sl_buf_head(&b) + 4, body, len) == 0);
    /* a frame_max under the body's size is refused and leaves nothing */
    if (len > 4) {
        size_t before = sl_buf_unread(&b);
        CHECK(sp_cmd_encode(&b, &c, (uint32_t)len - 1) == SL_ERR_CONTENT_TOO_LARGE);
        CHECK(sl_buf_unread(&b) == before);
    }
    sp_cmd d;
    CHECK(sp_cmd_decode(sl_buf_head(&b) + 4, len, &d) == SL_OK);
    CHECK(d.key == c.key && d.response == c.response && d.version == c.version);
    CHECK(d.corr == c.corr && d.code == c.code);
    sp_cmd_free(&d);
    sp_cmd_free(&c);
    sl_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint32_t frame_max = data[0] == 0 ? 0 : 1u << (8 + data[0] % 16);
    size_t step = 1 + data[1] % 64;
    const uint8_t *in = data + 2;
    size_t n = size - 2;

    /* The frames as one parse over the whole input sees them. */
    size_t offs[512], nf = 0, at = 0;
    sl_err whole_err = SL_OK;
    while (nf < 512) {
        sp_frame f;
        size_t used;
        whole_err = sp_frame_parse(in + at, n - at, frame_max, &f, &used);
        if (whole_err || !used)
            break;
        CHECK(frame_max == 0 || f.size <= frame_max);
        CHECK(used == (size_t)f.size + 4 && used <= n - at);
        offs[nf++] = at;
        body_roundtrip(f.body, f.size);
        at += used;
    }

    /* The feeder, given the same bytes in slices of step octets, yields the same frames. */
    sp_feeder fd;
    sp_feeder_init(&fd, frame_max);
    size_t k = 0;
    sl_err feed_err = SL_OK;
    for (size_t pos = 0; pos < n && !feed_err && k < nf; pos += step) {
        sp_feeder_push(&fd, in + pos, pos + step <= n ? step : n - pos);
        for (;;) {
            sp_frame f;
            int got;
            feed_err = sp_feeder_next(&fd, &f, &got);
            if (feed_err || !got)
                break;
            CHECK(k < nf);
            CHECK(memcmp(f.body, in + offs[k] + 4, f.size) == 0);
            k++;
            if (k == nf)
                break;
        }
    }
    if (nf < 512 && k < nf)
        CHECK(0); /* the feeder lost a frame */
    if (feed_err)
        CHECK(whole_err == feed_err && k == nf);
    sp_feeder_free(&fd);

    /* The whole input as a bare body, and as a chunk in both layouts. */
    body_roundtrip(in, n);
    for (int layout = SP_CHUNK_LOG; layout <= SP_CHUNK_DELIVER; layout++) {
        sp_chunk c;
        size_t used;
        if (sp_chunk_parse(in, n, layout, &c, &used) == SL_OK) {
            CHECK(used <= n);
            walk_chunk(&c);
        }
    }

    /* A chunk built from pieces of the input (piece lengths from the input) parses back. */
    sl_buf out;
    sl_buf_init(&out);
    sp_chunk_builder b;
    sp_chunk_begin(&b, &out, data[0] % 3, (int64_t)size, data[1], size);
    size_t pieces = 0, p = 0;
    while (p < n && pieces < 64) {
        size_t len = in[p] % 32;
        if (len > n - p - 1)
            len = n - p - 1;
        if (in[p] & 0x80)
            sp_chunk_add_batch(&b, in[p] & 7, in[p] & 0x0F, (uint32_t)len, in + p + 1, len);
        else
            sp_chunk_add_simple(&b, in + p + 1, len);
        p += 1 + len;
        pieces++;
    }
    CHECK(sp_chunk_end(&b) == SL_OK);
    sp_chunk c;
    size_t used;
    CHECK(sp_chunk_parse(sl_buf_head(&out), sl_buf_unread(&out), SP_CHUNK_LOG, &c, &used) == SL_OK);
    CHECK(used == sl_buf_unread(&out));
    CHECK(c.num_entries == pieces);
    CHECK(sp_chunk_check_crc(&c) == SL_OK);
    CHECK(sp_chunk_check_entries(&c) == SL_OK);
    sp_entry_iter it;
    sp_entry e;
    int got;
    sp_entry_iter_init(&it, &c);
    p = 0;
    for (size_t i = 0; i < pieces; i++) {
        CHECK(sp_entry_next(&it, &e, &got) == SL_OK && got);
        size_t len = in[p] % 32;
        if (len > n - p - 1)
            len = n - p - 1;
        CHECK(e.batch == ((in[p] & 0x80) != 0) && e.len == len);
        CHECK(len == 0 || memcmp(e.body, in + p + 1, len) == 0);
        p += 1 + len;
    }
    CHECK(sp_entry_next(&it, &e, &got) == SL_OK && !got);
    sl_buf_free(&out);
    return 0;
}
