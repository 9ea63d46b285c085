/* test_amqp.c - unit tests for the AMQP codec (src/amqp): frame feeder, protocol header,
 * primitives, field tables, generated method codec, content header and properties.
 *
 * Expected bytes are written out by hand wherever the wire layout is the point of the test
 * (bit packing, frame layout), so the tests do not just check the codec against itself.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amqp/frame.h"
#include "amqp/method.h"
#include "amqp/start.h"
#include "amqp/table.h"
#include "amqp/wire.h"
#include "core/buf.h"

/* Content of a table written by amqp_tbl_begin/end at the start of b (skip the length). */
static amqp_bytes tbl_content(const sl_buf *b)
{
    amqp_bytes r = {sl_buf_head(b) + 4, sl_buf_unread(b) - 4};
    return r;
}

/* ------------------------------------------------------------------ frames */

static const uint8_t publish_frame[] = {
    1,    0,   1,   0,  0, 0, 12, /* type, channel 1, size 12 */
    0,    60,  0,   40,           /* basic.publish */
    0,    0,                      /* ticket */
    1,    'x',                    /* exchange */
    2,    'r', 'k',               /* routing-key */
    0x01,                         /* mandatory */
    0xCE,
};

START_TEST(frame_partial_every_split)
{
    amqp_frame f;
    size_t total = sizeof publish_frame;
    for (size_t i = 0; i < total; i++) {
        /* Copy to an exact-size heap block so ASan catches any over-read. */
        uint8_t *p = malloc(i ? i : 1);
        memcpy(p, publish_frame, i);
        ck_assert_int_eq(amqp_frame_parse(p, i, 4096, &f), AMQP_FEED_NEED_MORE);
        free(p);
    }
    ck_assert_int_eq(amqp_frame_parse(publish_frame, total, 4096, &f), (int)total);
    ck_assert_uint_eq(f.type, AMQP_FRAME_METHOD);
    ck_assert_uint_eq(f.channel, 1);
    ck_assert_uint_eq(f.size, 12);
    ck_assert_ptr_eq(f.payload, publish_frame + 7);
}
END_TEST

START_TEST(frame_bad_end)
{
    uint8_t b[sizeof publish_frame];
    amqp_frame f;
    memcpy(b, publish_frame, sizeof b);
    b[sizeof b - 1] = 0xCD;
    ck_assert_int_eq(amqp_frame_parse(b, sizeof b, 0, &f), AMQP_FEED_BAD_END);
}
END_TEST

START_TEST(frame_bad_type)
{
    uint8_t b[sizeof publish_frame];
    amqp_frame f;
    memcpy(b, publish_frame, sizeof b);
    const uint8_t bad[] = {0, 4, 5, 7, 9, 'H', 0xFF};
    for (size_t i = 0; i < sizeof bad; i++) {
        b[0] = bad[i];
        ck_assert_int_eq(amqp_frame_parse(b, sizeof b, 0, &f), AMQP_FEED_BAD_TYPE);
        /* Detected from the type octet alone. */
        ck_assert_int_eq(amqp_frame_parse(b, 1, 0, &f), AMQP_FEED_BAD_TYPE);
    }
    const uint8_t good[] = {1, 2, 3, 8};
    for (size_t i = 0; i < sizeof good; i++) {
        b[0] = good[i];
        ck_assert_int_eq(amqp_frame_parse(b, sizeof b, 0, &f), (int)sizeof b);
    }
}
END_TEST

START_TEST(frame_too_large)
{
    amqp_frame f;
    /* size 4088 + 8 = 4096: allowed with frame_max 4096 (header only: need more). */
    uint8_t h[7] = {3, 0, 1, 0, 0, 0x0F, 0xF8};
    ck_assert_int_eq(amqp_frame_parse(h, 7, 4096, &f), AMQP_FEED_NEED_MORE);
    /* size 4089: too large, known from the 7-octet header alone. */
    h[6] = 0xF9;
    ck_assert_int_eq(amqp_frame_parse(h, 7, 4096, &f), AMQP_FEED_TOO_LARGE);
    ck_assert_int_eq(amqp_frame_parse(h, 6, 4096, &f), AMQP_FEED_NEED_MORE);
    ck_assert_int_eq(amqp_frame_parse(h, 7, 0, &f), AMQP_FEED_NEED_MORE);
    /* Near UINT32_MAX: size + 8 must not wrap around. */
    uint8_t m[7] = {3, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF};
    ck_assert_int_eq(amqp_frame_parse(m, 7, UINT32_MAX, &f), AMQP_FEED_TOO_LARGE);
    ck_assert_int_eq(amqp_frame_parse(m, 7, 131072, &f), AMQP_FEED_TOO_LARGE);
    m[6] = 0xF8; /* size UINT32_MAX - 7: size + 8 == 2^32 */
    ck_assert_int_eq(amqp_frame_parse(m, 7, UINT32_MAX, &f), AMQP_FEED_TOO_LARGE);
    /* Unlimited frame_max still refuses what cannot be returned as an int. */
    ck_assert_int_eq(amqp_frame_parse(m, 7, 0, &f), AMQP_FEED_TOO_LARGE);
}
END_TEST

START_TEST(frame_heartbeat)
{
    sl_buf b;
    amqp_frame f;
    sl_buf_init(&b);
    amqp_heartbeat_write(&b);
    const uint8_t want[] = {8, 0, 0, 0, 0, 0, 0, 0xCE};
    ck_assert_uint_eq(sl_buf_unread(&b), sizeof want);
    ck_assert_mem_eq(sl_buf_head(&b), want, sizeof want);
    ck_assert_int_eq(amqp_frame_parse(sl_buf_head(&b), 8, 4096, &f), 8);
    ck_assert_uint_eq(f.type, AMQP_FRAME_HEARTBEAT);
    ck_assert_uint_eq(f.channel, 0);
    ck_assert_uint_eq(f.size, 0);
    sl_buf_free(&b);
}
END_TEST

START_TEST(frame_multiple_in_buffer)
{
    sl_buf b;
    amqp_frame f;
    sl_buf_init(&b);
    sl_buf_append(&b, publish_frame, sizeof publish_frame);
    amqp_heartbeat_write(&b);
    amqp_frame_write(&b, AMQP_FRAME_BODY, 7, "hello", 5);
    sl_buf_append(&b, publish_frame, 3); /* a partial fourth frame */

    const uint8_t *p = sl_buf_head(&b);
    size_t len = sl_buf_unread(&b);
    int n = amqp_frame_parse(p, len, 4096, &f);
    ck_assert_int_eq(n, (int)sizeof publish_frame);
    p += n, len -= (size_t)n;
    n = amqp_frame_parse(p, len, 4096, &f);
    ck_assert_int_eq(n, 8);
    ck_assert_uint_eq(f.type, AMQP_FRAME_HEARTBEAT);
    p += n, len -= (size_t)n;
    n = amqp_frame_parse(p, len, 4096, &f);
    ck_assert_int_eq(n, 13);
    ck_assert_uint_eq(f.type, AMQP_FRAME_BODY);
    ck_assert_uint_eq(f.channel, 7);
    ck_assert_uint_eq(f.size, 5);
    ck_assert_mem_eq(f.payload, "hello", 5);
    p += n, len -= (size_t)n;
    ck_assert_uint_eq(len, 3);
    ck_assert_int_eq(amqp_frame_parse(p, len, 4096, &f), AMQP_FEED_NEED_MORE);
    sl_buf_free(&b);
}
END_TEST

START_TEST(frame_begin_end_survives_compaction)
{
    /* A buffer with a consumed prefix: growing it may compact (move) the unread bytes. */
    sl_buf b;
    amqp_frame f;
    sl_buf_init(&b);
    uint8_t junk[200] = {0};
    sl_buf_append(&b, junk, sizeof junk);
    sl_buf_consume(&b, 150);
    size_t mark = amqp_frame_begin(&b, AMQP_FRAME_BODY, 3);
    uint8_t big[300];
    memset(big, 'a', sizeof big);
    sl_buf_append(&b, big, sizeof big);
    amqp_frame_end(&b, mark);
    const uint8_t *p = sl_buf_head(&b) + 50;
    ck_assert_int_eq(amqp_frame_parse(p, sl_buf_unread(&b) - 50, 0, &f), 308);
    ck_assert_uint_eq(f.size, 300);
    sl_buf_free(&b);
}
END_TEST

/* ------------------------------------------------------------------ protocol header */

START_TEST(protocol_header)
{
    const uint8_t good[] = {'A', 'M', 'Q', 'P', 0, 0, 9, 1, 1, 2, 3};
    for (size_t i = 0; i < 8; i++)
        ck_assert_int_eq(amqp_protocol_header_check(good, i), 0);
    ck_assert_int_eq(amqp_protocol_header_check(good, 8), 8);
    ck_assert_int_eq(amqp_protocol_header_check(good, sizeof good), 8);
    ck_assert_mem_eq(amqp_protocol_header, good, 8);

    const uint8_t http[] = "HTTP/1.1 ";
    ck_assert_int_eq(amqp_protocol_header_check(http, 1), -1);
    ck_assert_int_eq(amqp_protocol_header_check(http, 9), -1);
    const uint8_t v080[] = {'A', 'M', 'Q', 'P', 1, 1, 8, 0};
    ck_assert_int_eq(amqp_protocol_header_check(v080, 4), 0);
    ck_assert_int_eq(amqp_protocol_header_check(v080, 5), -1);
    ck_assert_int_eq(amqp_protocol_header_check(v080, 8), -1);
    const uint8_t v0910[] = {'A', 'M', 'Q', 'P', 0, 0, 9, 0};
    ck_assert_int_eq(amqp_protocol_header_check(v0910, 7), 0);
    ck_assert_int_eq(amqp_protocol_header_check(v0910, 8), -1);
}
END_TEST

/* ------------------------------------------------------------------ primitives */

START_TEST(primitives_read)
{
    const uint8_t in[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09,
                          0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 3,    'a',  'b',
                          'c',  0,    0,    0,    2,    'x',  'y',  0xAA};
    amqp_reader r = amqp_reader_make(in, sizeof in);
    ck_assert_uint_eq(amqp_rd_u8(&r), 0x01);
    ck_assert_uint_eq(amqp_rd_u16(&r), 0x0203);
    ck_assert_uint_eq(amqp_rd_u32(&r), 0x04050607);
    ck_assert_uint_eq(amqp_rd_u64(&r), 0x08090A0B0C0D0E0FULL);
    amqp_bytes s = amqp_rd_shortstr(&r);
    ck_assert(amqp_bytes_eq(s, "abc"));
    amqp_bytes l = amqp_rd_longstr(&r);
    ck_assert(amqp_bytes_eq(l, "xy"));
    amqp_bytes raw = amqp_rd_raw(&r, 1);
    ck_assert_uint_eq(raw.len, 1);
    ck_assert_uint_eq(raw.p[0], 0xAA);
    ck_assert_int_eq(r.err, 0);
    ck_assert_ptr_eq(r.p, r.end);
    /* Reading past the end sets err, returns zeros, and stays failed. */
    ck_assert_uint_eq(amqp_rd_u8(&r), 0);
    ck_assert_int_ne(r.err, 0);
    ck_assert_uint_eq(amqp_rd_u8(&r), 0);
    ck_assert_ptr_eq(r.p, r.end);
}
END_TEST

START_TEST(primitives_truncated)
{
    const uint8_t in[] = {0x01, 0x02, 0x03};
    amqp_reader r = amqp_reader_make(in, 3);
    ck_assert_uint_eq(amqp_rd_u32(&r), 0);
    ck_assert_int_ne(r.err, 0);
    ck_assert_ptr_eq(r.p, in); /* nothing consumed */

    const uint8_t s[] = {5, 'a', 'b'};
    r = amqp_reader_make(s, sizeof s);
    amqp_bytes b = amqp_rd_shortstr(&r);
    ck_assert_int_ne(r.err, 0);
    ck_assert_uint_eq(b.len, 0);

    const uint8_t l[] = {0xFF, 0xFF, 0xFF, 0xFF, 'a'};
    r = amqp_reader_make(l, sizeof l);
    b = amqp_rd_longstr(&r);
    ck_assert_int_ne(r.err, 0);
    ck_assert_uint_eq(b.len, 0);

    r = amqp_reader_make(in, 3);
    (void)amqp_rd_raw(&r, SIZE_MAX);
    ck_assert_int_ne(r.err, 0);
}
END_TEST

START_TEST(primitives_write)
{
    sl_buf b;
    sl_buf_init(&b);
    amqp_wr_shortstr(&b, AMQP_BYTES("abc"));
    amqp_wr_longstr(&b, AMQP_BYTES("de"));
    amqp_wr_table(&b, AMQP_BYTES(""));
    const uint8_t want[] = {3, 'a', 'b', 'c', 0, 0, 0, 2, 'd', 'e', 0, 0, 0, 0};
    ck_assert_uint_eq(sl_buf_unread(&b), sizeof want);
    ck_assert_mem_eq(sl_buf_head(&b), want, sizeof want);
    sl_buf_free(&b);

    /* A shortstr over 255 bytes is truncated, never written with a wrapped length. */
    char longname[300];
    memset(longname, 'q', sizeof longname);
    amqp_bytes ln = {(const uint8_t *)longname, sizeof longname};
    sl_buf_init(&b);
    amqp_wr_shortstr(&b, ln);
    ck_assert_uint_eq(sl_buf_unread(&b), 256);
    ck_assert_uint_eq(sl_buf_head(&b)[0], 255);
    sl_buf_free(&b);

    ck_assert(amqp_bytes_eq(amqp_cstr("hi"), "hi"));
    ck_assert(!amqp_bytes_eq(amqp_cstr("hi"), "hit"));
    ck_assert(amqp_bytes_eq(amqp_cstr(""), ""));
    ck_assert(amqp_bytes_equal(AMQP_BYTES("ab"), amqp_cstr("ab")));
    ck_assert(!amqp_bytes_equal(AMQP_BYTES("ab"), amqp_cstr("ac")));
}
END_TEST

/* ------------------------------------------------------------------ tables */

/* A table with one entry of every tag, written by hand. */
static const uint8_t all_tags[] = {
    1, 't', 't', 1,                                                           /* bool true */
    1, 'b', 'b', 0xFE,                                                        /* -2 */
    1, 'B', 'B', 0xFE,                                                        /* 254 */
    1, 's', 's', 0xFF, 0xFE,                                                  /* -2 */
    1, 'u', 'u', 0xFF, 0xFE,                                                  /* 65534 */
    1, 'I', 'I', 0xFF, 0xFF, 0xFF, 0xFE,                                      /* -2 */
    1, 'i', 'i', 0xFF, 0xFF, 0xFF, 0xFE,                                      /* 4294967294 */
    1, 'l', 'l', 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE,              /* -2 */
    1, 'L', 'L', 0,    0,    0,    0,    0,    0,    0x10, 0,                 /* 4096 */
    1, 'f', 'f', 0x3F, 0xC0, 0,    0,                                         /* 1.5f */
    1, 'd', 'd', 0x40, 0x04, 0,    0,    0,    0,    0,    0,                 /* 2.5 */
    1, 'D', 'D', 2,    0,    0,    0x04, 0xD2,                                /* 12.34 */
    1, 'S', 'S', 0,    0,    0,    3,    'a',  'b',  'c',                     /* "abc" */
    1, 'x', 'x', 0,    0,    0,    2,    0,    0xFF,                          /* bytes 00 FF */
    1, 'A', 'A', 0,    0,    0,    5,    'b',  5,    'V',  't',  1,           /* [5, void, true] */
    1, 'T', 'T', 0,    0,    0,    0,    0x5F, 0x5E, 0x10, 0x00,              /* timestamp */
    1, 'F', 'F', 0,    0,    0,    7,    1,    'k',  'B',  7,    1, 'v', 'V', /* {k: 7, v: void} */
    1, 'V', 'V',                                                              /* void */
};

START_TEST(table_all_tags)
{
    /* Build the same table with amqp_tbl_put_value and compare with the bytes above. */
    sl_buf b;
    sl_buf_init(&b);
    size_t t = amqp_tbl_begin(&b);
    amqp_value v;
    memset(&v, 0, sizeof v);
    v.tag = 't', v.v.b = 1;
    amqp_tbl_put_value(&b, AMQP_BYTES("t"), &v);
    v.tag = 'b', v.v.i = -2;
    amqp_tbl_put_value(&b, AMQP_BYTES("b"), &v);
    v.tag = 'B', v.v.i = 254;
    amqp_tbl_put_value(&b, AMQP_BYTES("B"), &v);
    v.tag = 's', v.v.i = -2;
    amqp_tbl_put_value(&b, AMQP_BYTES("s"), &v);
    v.tag = 'u', v.v.i = 65534;
    amqp_tbl_put_value(&b, AMQP_BYTES("u"), &v);
    v.tag = 'I', v.v.i = -2;
    amqp_tbl_put_value(&b, AMQP_BYTES("I"), &v);
    v.tag = 'i', v.v.i = 4294967294LL;
    amqp_tbl_put_value(&b, AMQP_BYTES("i"), &v);
    v.tag = 'l', v.v.i = -2;
    amqp_tbl_put_value(&b, AMQP_BYTES("l"), &v);
    v.tag = 'L', v.v.i = 4096;
    amqp_tbl_put_value(&b, AMQP_BYTES("L"), &v);
    v.tag = 'f', v.v.f = 1.5f;
    amqp_tbl_put_value(&b, AMQP_BYTES("f"), &v);
    v.tag = 'd', v.v.d = 2.5;
    amqp_tbl_put_value(&b, AMQP_BYTES("d"), &v);
    v.tag = 'D', v.v.dec.scale = 2, v.v.dec.value = 1234;
    amqp_tbl_put_value(&b, AMQP_BYTES("D"), &v);
    v.tag = 'S', v.v.s = AMQP_BYTES("abc");
    amqp_tbl_put_value(&b, AMQP_BYTES("S"), &v);
    static const uint8_t xb[] = {0, 0xFF};
    v.tag = 'x', v.v.s.p = xb, v.v.s.len = 2;
    amqp_tbl_put_value(&b, AMQP_BYTES("x"), &v);
    static const uint8_t arr[] = {'b', 5, 'V', 't', 1};
    v.tag = 'A', v.v.s.p = arr, v.v.s.len = sizeof arr;
    amqp_tbl_put_value(&b, AMQP_BYTES("A"), &v);
    v.tag = 'T', v.v.ts = 0x5F5E1000;
    amqp_tbl_put_value(&b, AMQP_BYTES("T"), &v);
    static const uint8_t nested[] = {1, 'k', 'B', 7, 1, 'v', 'V'};
    v.tag = 'F', v.v.s.p = nested, v.v.s.len = sizeof nested;
    amqp_tbl_put_value(&b, AMQP_BYTES("F"), &v);
    v.tag = 'V';
    amqp_tbl_put_value(&b, AMQP_BYTES("V"), &v);
    amqp_tbl_end(&b, t);

    amqp_bytes content = tbl_content(&b);
    ck_assert_uint_eq(sl_get_u32(sl_buf_head(&b)), content.len);
    ck_assert_uint_eq(content.len, sizeof all_tags);
    ck_assert_mem_eq(content.p, all_tags, sizeof all_tags);
    ck_assert_int_eq(amqp_table_validate(content), 0);

    /* Iterate and check every value. */
    amqp_table_iter it;
    amqp_bytes key;
    amqp_value got;
    int64_t iv;
    amqp_table_iter_init(&it, content);
    const char *order = "tbBsuIilLfdDSxATFV";
    for (size_t k = 0; order[k]; k++) {
        ck_assert(amqp_table_next(&it, &key, &got));
        ck_assert_uint_eq(key.len, 1);
        ck_assert_uint_eq(key.p[0], (uint8_t)order[k]);
        ck_assert_uint_eq(got.tag, (uint8_t)order[k]);
    }
    ck_assert(!amqp_table_next(&it, &key, &got));

    ck_assert(amqp_table_get(content, "t", &got) && got.v.b == 1);
    ck_assert(amqp_table_get(content, "b", &got) && amqp_value_int(&got, &iv) && iv == -2);
    ck_assert(amqp_table_get(content, "B", &got) && amqp_value_int(&got, &iv) && iv == 254);
    ck_assert(amqp_table_get(content, "s", &got) && amqp_value_int(&got, &iv) && iv == -2);
    ck_assert(amqp_table_get(content, "u", &got) && amqp_value_int(&got, &iv) && iv == 65534);
    ck_assert(amqp_table_get(content, "I", &got) && amqp_value_int(&got, &iv) && iv == -2);
    ck_assert(amqp_table_get(content, "i", &got) && amqp_value_int(&got, &iv) &&
              iv == 4294967294LL);
    ck_assert(amqp_table_get(content, "l", &got) && amqp_value_int(&got, &iv) && iv == -2);
    ck_assert(amqp_table_get(content, "L", &got) && amqp_value_int(&got, &iv) && iv == 4096);
    ck_assert(amqp_table_get(content, "f", &got) && got.v.f == 1.5f);
    ck_assert(amqp_table_get(content, "d", &got) && got.v.d == 2.5);
    ck_assert(amqp_table_get(content, "D", &got) && got.v.dec.scale == 2 &&
              got.v.dec.value == 1234);
    amqp_bytes sv;
    ck_assert(amqp_table_get(content, "S", &got) && amqp_value_str(&got, &sv) &&
              amqp_bytes_eq(sv, "abc"));
    ck_assert(amqp_table_get(content, "x", &got) && amqp_value_str(&got, &sv) && sv.len == 2 &&
              sv.p[1] == 0xFF);
    ck_assert(amqp_table_get(content, "T", &got) && got.v.ts == 0x5F5E1000);
    ck_assert(amqp_value_int(&got, &iv) && iv == 0x5F5E1000);
    ck_assert(amqp_table_get(content, "V", &got) && got.tag == 'V');
    ck_assert(!amqp_value_int(&got, &iv));
    ck_assert(!amqp_value_str(&got, &sv));

    /* Nested array. */
    ck_assert(amqp_table_get(content, "A", &got));
    ck_assert_int_eq(amqp_array_validate(got.v.s), 0);
    amqp_table_iter ai;
    amqp_array_iter_init(&ai, got.v.s);
    amqp_value e;
    ck_assert(amqp_array_next(&ai, &e) && e.tag == 'b' && e.v.i == 5);
    ck_assert(amqp_array_next(&ai, &e) && e.tag == 'V');
    ck_assert(amqp_array_next(&ai, &e) && e.tag == 't' && e.v.b == 1);
    ck_assert(!amqp_array_next(&ai, &e));

    /* Nested table. */
    ck_assert(amqp_table_get(content, "F", &got));
    ck_assert(amqp_table_get(got.v.s, "k", &e) && amqp_value_int(&e, &iv) && iv == 7);
    ck_assert(!amqp_table_get(got.v.s, "missing", &e));

    /* Round trip: copying every entry with amqp_tbl_put_value reproduces the bytes. */
    sl_buf c;
    sl_buf_init(&c);
    size_t m = amqp_tbl_begin(&c);
    amqp_table_iter_init(&it, content);
    while (amqp_table_next(&it, &key, &got))
        amqp_tbl_put_value(&c, key, &got);
    amqp_tbl_end(&c, m);
    ck_assert_uint_eq(sl_buf_unread(&c), sl_buf_unread(&b));
    ck_assert_mem_eq(sl_buf_head(&c), sl_buf_head(&b), sl_buf_unread(&b));
    sl_buf_free(&c);
    sl_buf_free(&b);
}
END_TEST

START_TEST(table_builders_nested)
{
    sl_buf b;
    sl_buf_init(&b);
    size_t t = amqp_tbl_begin(&b);
    amqp_tbl_put_bool(&b, "flag", 1);
    amqp_tbl_put_long(&b, "x-message-ttl", 1000);
    amqp_tbl_put_int(&b, "n", -7);
    amqp_tbl_put_str(&b, "product", AMQP_BYTES("Sluice"));
    amqp_tbl_put_timestamp(&b, "time", 12345);
    size_t caps = amqp_tbl_put_table_begin(&b, "capabilities");
    amqp_tbl_put_bool(&b, "publisher_confirms", 1);
    amqp_tbl_end(&b, caps);
    size_t arr = amqp_tbl_put_array_begin(&b, "x-death");
    size_t d1 = amqp_arr_put_table_begin(&b);
    amqp_tbl_put_str(&b, "queue", AMQP_BYTES("q1"));
    amqp_tbl_end(&b, d1);
    amqp_arr_put_str(&b, AMQP_BYTES("tail"));
    amqp_tbl_end(&b, arr);
    amqp_tbl_end(&b, t);

    amqp_bytes content = tbl_content(&b);
    ck_assert_int_eq(amqp_table_validate(content), 0);
    amqp_value v, w;
    int64_t iv;
    ck_assert(amqp_table_get(content, "flag", &v) && v.tag == 't' && v.v.b);
    ck_assert(amqp_table_get(content, "x-message-ttl", &v) && v.tag == 'l');
    ck_assert(amqp_value_int(&v, &iv) && iv == 1000);
    ck_assert(amqp_table_get(content, "n", &v) && v.tag == 'I' && v.v.i == -7);
    ck_assert(amqp_table_get(content, "product", &v) && amqp_bytes_eq(v.v.s, "Sluice"));
    ck_assert(amqp_table_get(content, "time", &v) && v.tag == 'T' && v.v.ts == 12345);
    ck_assert(amqp_table_get(content, "capabilities", &v) && v.tag == 'F');
    ck_assert(amqp_table_get(v.v.s, "publisher_confirms", &w) && w.v.b);
    ck_assert(amqp_table_get(content, "x-death", &v) && v.tag == 'A');
    amqp_table_iter it;
    amqp_array_iter_init(&it, v.v.s);
    ck_assert(amqp_array_next(&it, &w) && w.tag == 'F');
    amqp_value q;
    ck_assert(amqp_table_get(w.v.s, "queue", &q) && amqp_bytes_eq(q.v.s, "q1"));
    ck_assert(amqp_array_next(&it, &w) && w.tag == 'S' && amqp_bytes_eq(w.v.s, "tail"));
    ck_assert(!amqp_array_next(&it, &w));
    sl_buf_free(&b);

    /* Empty table and array are valid. */
    amqp_bytes empty = {NULL, 0};
    ck_assert_int_eq(amqp_table_validate(empty), 0);
    ck_assert_int_eq(amqp_array_validate(empty), 0);
}
END_TEST

START_TEST(table_invalid_tags)
{
    const char *bad = "UZcaOvXq";
    for (size_t i = 0; bad[i]; i++) {
        uint8_t t[] = {1, 'k', (uint8_t)bad[i], 0, 0, 0, 0, 0, 0, 0, 0};
        amqp_bytes b = {t, sizeof t};
        ck_assert_msg(amqp_table_validate(b) == -1, "tag %c accepted", bad[i]);
        uint8_t a[] = {(uint8_t)bad[i], 0, 0, 0, 0};
        amqp_bytes ab = {a, sizeof a};
        ck_assert_int_eq(amqp_array_validate(ab), -1);
    }
    /* An invalid tag inside a nested table or array is found too. */
    const uint8_t nested[] = {1, 'n', 'F', 0, 0, 0, 4, 1, 'k', 'U', 0};
    amqp_bytes nb = {nested, sizeof nested};
    ck_assert_int_eq(amqp_table_validate(nb), -1);
    const uint8_t in_arr[] = {1, 'a', 'A', 0, 0, 0, 2, 'Z', 0};
    amqp_bytes ib = {in_arr, sizeof in_arr};
    ck_assert_int_eq(amqp_table_validate(ib), -1);
}
END_TEST

START_TEST(table_truncated)
{
    /* Every strict prefix of a one-entry table is invalid. */
    const uint8_t t[] = {3, 'k', 'e', 'y', 'S', 0, 0, 0, 2, 'h', 'i'};
    for (size_t i = 1; i < sizeof t; i++) {
        uint8_t *p = malloc(i);
        memcpy(p, t, i);
        amqp_bytes b = {p, i};
        ck_assert_msg(amqp_table_validate(b) == -1, "prefix %zu accepted", i);
        free(p);
    }
    amqp_bytes full = {t, sizeof t};
    ck_assert_int_eq(amqp_table_validate(full), 0);

    /* A nested length that overruns its parent (but not the buffer) is invalid. */
    const uint8_t over[] = {1, 'n', 'F', 0, 0, 0, 9, 1, 'k', 'V', 1, 'z', 'V'};
    amqp_bytes ob = {over, 10};
    ck_assert_int_eq(amqp_table_validate(ob), -1);
    /* Huge lengths. */
    const uint8_t huge[] = {1, 's', 'S', 0xFF, 0xFF, 0xFF, 0xFF, 'a'};
    amqp_bytes hb = {huge, sizeof huge};
    ck_assert_int_eq(amqp_table_validate(hb), -1);

    /* Reading a table field through the reader validates it. */
    const uint8_t withlen[] = {0, 0, 0, 4, 1, 'k', 'U', 0};
    amqp_reader r = amqp_reader_make(withlen, sizeof withlen);
    (void)amqp_rd_table(&r);
    ck_assert_int_ne(r.err, 0);
}
END_TEST

/* Write depth levels of nesting (kind 'F' or 'A') around a void; outer table at depth 0. */
static void build_nested(sl_buf *b, int levels, uint8_t kind)
{
    size_t *marks = calloc((size_t)levels + 1, sizeof *marks);
    marks[0] = amqp_tbl_begin(b);
    for (int i = 1; i <= levels; i++) {
        if (kind == 'F' || i == 1)
            marks[i] =
                kind == 'F' ? amqp_tbl_put_table_begin(b, "n") : amqp_tbl_put_array_begin(b, "n");
        else {
            sl_buf_put_u8(b, 'A');
            marks[i] = amqp_tbl_begin(b);
        }
    }
    if (kind == 'F')
        amqp_wr_shortstr(b, AMQP_BYTES("v"));
    sl_buf_put_u8(b, 'V');
    for (int i = levels; i >= 0; i--)
        amqp_tbl_end(b, marks[i]);
    free(marks);
}

START_TEST(table_depth_limit)
{
    const uint8_t kinds[] = {'F', 'A'};
    for (size_t k = 0; k < 2; k++) {
        sl_buf b;
        sl_buf_init(&b);
        build_nested(&b, AMQP_TABLE_MAX_DEPTH, kinds[k]);
        ck_assert_int_eq(amqp_table_validate(tbl_content(&b)), 0);
        sl_buf_free(&b);
        sl_buf_init(&b);
        build_nested(&b, AMQP_TABLE_MAX_DEPTH + 1, kinds[k]);
        ck_assert_int_eq(amqp_table_validate(tbl_content(&b)), -1);
        sl_buf_free(&b);
    }
    /* Many siblings at depth 1 do not accumulate depth. */
    sl_buf b;
    sl_buf_init(&b);
    size_t t = amqp_tbl_begin(&b);
    for (int i = 0; i < 100; i++)
        amqp_tbl_end(&b, amqp_tbl_put_table_begin(&b, "s"));
    amqp_tbl_end(&b, t);
    ck_assert_int_eq(amqp_table_validate(tbl_content(&b)), 0);
    sl_buf_free(&b);
}
END_TEST

START_TEST(value_equal_and_names)
{
    amqp_value a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.tag = 'b', a.v.i = 5;
    b.tag = 'l', b.v.i = 5;
    ck_assert(amqp_value_equal(&a, &b));
    b.tag = 'i';
    ck_assert(amqp_value_equal(&a, &b));
    b.v.i = 6;
    ck_assert(!amqp_value_equal(&a, &b));

    a.tag = 'S', a.v.s = AMQP_BYTES("abc");
    b.tag = 'x', b.v.s = AMQP_BYTES("abc");
    ck_assert(amqp_value_equal(&a, &b));
    b.v.s = AMQP_BYTES("abd");
    ck_assert(!amqp_value_equal(&a, &b));
    b.tag = 'I', b.v.i = 0;
    ck_assert(!amqp_value_equal(&a, &b));

    a.tag = 't', a.v.b = 1;
    b.tag = 't', b.v.b = 1;
    ck_assert(amqp_value_equal(&a, &b));
    b.v.b = 0;
    ck_assert(!amqp_value_equal(&a, &b));
    b.tag = 'b', b.v.i = 1; /* a bool is not an integer */
    ck_assert(!amqp_value_equal(&a, &b));

    a.tag = 'V';
    b.tag = 'V';
    ck_assert(amqp_value_equal(&a, &b));
    a.tag = 'd', a.v.d = 1.0;
    b.tag = 'd', b.v.d = 1.0;
    ck_assert(amqp_value_equal(&a, &b));
    b.tag = 'f', b.v.f = 1.0f;
    ck_assert(!amqp_value_equal(&a, &b));
    a.tag = 'D', a.v.dec.scale = 1, a.v.dec.value = 10;
    b.tag = 'D', b.v.dec.scale = 1, b.v.dec.value = 10;
    ck_assert(amqp_value_equal(&a, &b));
    b.v.dec.scale = 2;
    ck_assert(!amqp_value_equal(&a, &b));
    a.tag = 'T', a.v.ts = 9;
    b.tag = 'T', b.v.ts = 9;
    ck_assert(amqp_value_equal(&a, &b));
    a.tag = 'F', a.v.s = AMQP_BYTES("\1kV");
    b.tag = 'F', b.v.s = AMQP_BYTES("\1kV");
    ck_assert(amqp_value_equal(&a, &b));
    b.tag = 'A';
    ck_assert(!amqp_value_equal(&a, &b));

    ck_assert_str_eq(amqp_value_type_name('S'), "longstr");
    ck_assert_str_eq(amqp_value_type_name('I'), "signedint");
    ck_assert_str_eq(amqp_value_type_name('l'), "long");
    ck_assert_str_eq(amqp_value_type_name('t'), "bool");
    ck_assert_str_eq(amqp_value_type_name('F'), "table");
    ck_assert_str_eq(amqp_value_type_name('A'), "array");
    ck_assert_str_eq(amqp_value_type_name('T'), "timestamp");
    ck_assert_str_eq(amqp_value_type_name('d'), "double");
    ck_assert_str_eq(amqp_value_type_name('f'), "float");
    ck_assert_str_eq(amqp_value_type_name('D'), "decimal");
    ck_assert_str_eq(amqp_value_type_name('V'), "void");
    ck_assert_str_eq(amqp_value_type_name('b'), "byte");
    ck_assert_str_eq(amqp_value_type_name('s'), "short");
    ck_assert_str_eq(amqp_value_type_name('B'), "unsignedbyte");
    ck_assert_str_eq(amqp_value_type_name('u'), "unsignedshort");
    ck_assert_str_eq(amqp_value_type_name('i'), "unsignedint");
    ck_assert_str_eq(amqp_value_type_name('x'), "binary");
}
END_TEST

/* ------------------------------------------------------------------ methods */

/* Write m as a frame, parse the frame, decode it; returns the decode result. */
static int round_trip(const amqp_method *m, uint16_t ch, amqp_method *out, sl_buf *b)
{
    amqp_frame f;
    sl_buf_init(b);
    amqp_method_write(b, ch, m);
    int n = amqp_frame_parse(sl_buf_head(b), sl_buf_unread(b), 0, &f);
    ck_assert_int_eq(n, (int)sl_buf_unread(b));
    ck_assert_uint_eq(f.type, AMQP_FRAME_METHOD);
    ck_assert_uint_eq(f.channel, ch);
    return amqp_method_decode(f.payload, f.size, out);
}

/* The one connection.start builder (amqp/start.c): a full server's properties in their
 * order with its capabilities, and the follower's short form. */
START_TEST(start_builder_full_and_short)
{
    amqp_start_info full = {
        .information = "hello", .full = 1, .cluster_name = "n1", .mechanisms = AMQP_BYTES("PLAIN")};
    amqp_method m, d;
    sl_buf props, b;
    amqp_start_build(&m, &props, &full);
    ck_assert_int_eq(round_trip(&m, 0, &d, &b), AMQP_DECODE_OK);
    ck_assert_uint_eq(d.id, AMQP_CONNECTION_START);
    const amqp_connection_start *s = &d.u.connection_start;
    ck_assert_uint_eq(s->version_major, 0);
    ck_assert_uint_eq(s->version_minor, 9);
    ck_assert(amqp_bytes_eq(s->mechanisms, "PLAIN"));
    ck_assert(amqp_bytes_eq(s->locales, "en_US"));
    amqp_value v, c;
    ck_assert(amqp_table_get(s->server_properties, "cluster_name", &v));
    ck_assert(amqp_table_get(s->server_properties, "platform", &v));
    ck_assert(amqp_table_get(s->server_properties, "capabilities", &v) && v.tag == 'F');
    ck_assert(amqp_table_get(v.v.s, "per_consumer_qos", &c) && c.tag == 't' && c.v.b);
    sl_buf_free(&b);
    sl_buf_free(&props);

    amqp_start_info brief = {.information = "no leader",
                             .mechanisms = AMQP_BYTES("PLAIN AMQPLAIN")};
    amqp_start_build(&m, &props, &brief);
    ck_assert_int_eq(round_trip(&m, 0, &d, &b), AMQP_DECODE_OK);
    s = &d.u.connection_start;
    ck_assert(amqp_table_get(s->server_properties, "information", &v));
    ck_assert(amqp_table_get(s->server_properties, "product", &v));
    ck_assert(!amqp_table_get(s->server_properties, "capabilities", &v));
    ck_assert(!amqp_table_get(s->server_properties, "cluster_name", &v));
    sl_buf_free(&b);
    sl_buf_free(&props);
}
END_TEST

START_TEST(method_connection_start)
{
    sl_buf props;
    sl_buf_init(&props);
    size_t t = amqp_tbl_begin(&props);
    amqp_tbl_put_str(&props, "product", AMQP_BYTES("Sluice"));
    size_t c = amqp_tbl_put_table_begin(&props, "capabilities");
    amqp_tbl_put_bool(&props, "publisher_confirms", 1);
    amqp_tbl_end(&props, c);
    amqp_tbl_end(&props, t);

    amqp_method m = {.id = AMQP_CONNECTION_START};
    m.u.connection_start.version_major = 0;
    m.u.connection_start.version_minor = 9;
    m.u.connection_start.server_properties = tbl_content(&props);
    m.u.connection_start.mechanisms = AMQP_BYTES("PLAIN AMQPLAIN");
    m.u.connection_start.locales = AMQP_BYTES("en_US");

    amqp_method d;
    sl_buf b;
    ck_assert_int_eq(round_trip(&m, 0, &d, &b), AMQP_DECODE_OK);
    ck_assert_uint_eq(d.id, AMQP_CONNECTION_START);
    ck_assert_uint_eq(d.u.connection_start.version_minor, 9);
    ck_assert(amqp_bytes_equal(d.u.connection_start.server_properties, tbl_content(&props)));
    ck_assert(amqp_bytes_eq(d.u.connection_start.mechanisms, "PLAIN AMQPLAIN"));
    ck_assert(amqp_bytes_eq(d.u.connection_start.locales, "en_US"));
    amqp_value v;
    ck_assert(amqp_table_get(d.u.connection_start.server_properties, "product", &v));
    ck_assert(amqp_bytes_eq(v.v.s, "Sluice"));
    ck_assert_str_eq(amqp_method_name(d.id), "connection.start");
    ck_assert(amqp_method_is_sync(d.id));
    ck_assert(!amqp_method_has_content(d.id));

    /* Hand-checked prefix: frame header, class 10 method 10, 0, 9, table length. */
    const uint8_t *p = sl_buf_head(&b);
    ck_assert_uint_eq(p[0], 1);
    ck_assert_uint_eq(sl_get_u16(p + 7), 10);
    ck_assert_uint_eq(sl_get_u16(p + 9), 10);
    ck_assert_uint_eq(p[11], 0);
    ck_assert_uint_eq(p[12], 9);
    ck_assert_uint_eq(sl_get_u32(p + 13), tbl_content(&props).len);
    ck_assert_uint_eq(p[sl_buf_unread(&b) - 1], 0xCE);

    /* An invalid table inside a method is a syntax error. */
    uint8_t *raw = sl_buf_head(&b) + 7;
    size_t rawlen = sl_buf_unread(&b) - 8;
    raw[6 + 4 + 1 + 7] = 'U'; /* the tag of "product" */
    ck_assert_int_eq(amqp_method_decode(raw, rawlen, &d), AMQP_DECODE_SYNTAX);
    sl_buf_free(&b);
    sl_buf_free(&props);
}
END_TEST

START_TEST(method_connection_start_ok_and_tune)
{
    amqp_method m = {.id = AMQP_CONNECTION_START_OK}, d;
    sl_buf b;
    m.u.connection_start_ok.client_properties = AMQP_BYTES("\7product\x53\0\0\0\1x");
    m.u.connection_start_ok.mechanism = AMQP_BYTES("PLAIN");
    m.u.connection_start_ok.response = AMQP_BYTES("\0guest\0guest");
    m.u.connection_start_ok.locale = AMQP_BYTES("en_US");
    ck_assert_int_eq(round_trip(&m, 0, &d, &b), AMQP_DECODE_OK);
    ck_assert(amqp_bytes_eq(d.u.connection_start_ok.mechanism, "PLAIN"));
    ck_assert_uint_eq(d.u.connection_start_ok.response.len, 12);
    ck_assert(amqp_bytes_equal(d.u.connection_start_ok.response, AMQP_BYTES("\0guest\0guest")));
    ck_assert(amqp_bytes_eq(d.u.connection_start_ok.locale, "en_US"));
    sl_buf_free(&b);

    amqp_method t = {.id = AMQP_CONNECTION_TUNE_OK};
    t.u.connection_tune_ok.channel_max = 2047;
    t.u.connection_tune_ok.frame_max = 131072;
    t.u.connection_tune_ok.heartbeat = 60;
    ck_assert_int_eq(round_trip(&t, 0, &d, &b), AMQP_DECODE_OK);
    const uint8_t want[] = {1,  0,    0,    0, 0, 0, 12, 0, 10, 0,
                            31, 0x07, 0xFF, 0, 2, 0, 0,  0, 60, 0xCE};
    ck_assert_uint_eq(sl_buf_unread(&b), sizeof want);
    ck_assert_mem_eq(sl_buf_head(&b), want, sizeof want);
    ck_assert_uint_eq(d.u.connection_tune_ok.frame_max, 131072);
    ck_assert_uint_eq(d.u.connection_tune_ok.channel_max, 2047);
    ck_assert_uint_eq(d.u.connection_tune_ok.heartbeat, 60);
    sl_buf_free(&b);
}
END_TEST

START_TEST(method_basic_publish)
{
    amqp_method d;
    /* Decode the hand-written frame. */
    ck_assert_int_eq(amqp_method_decode(publish_frame + 7, 12, &d), AMQP_DECODE_OK);
    ck_assert_uint_eq(d.id, AMQP_BASIC_PUBLISH);
    ck_assert(amqp_bytes_eq(d.u.basic_publish.exchange, "x"));
    ck_assert(amqp_bytes_eq(d.u.basic_publish.routing_key, "rk"));
    ck_assert_uint_eq(d.u.basic_publish.mandatory, 1);
    ck_assert_uint_eq(d.u.basic_publish.immediate, 0);
    ck_assert(amqp_method_has_content(d.id));
    ck_assert(!amqp_method_is_sync(d.id));
    ck_assert_str_eq(amqp_method_name(d.id), "basic.publish");

    /* Encode reproduces it exactly. */
    sl_buf b;
    sl_buf_init(&b);
    amqp_method_write(&b, 1, &d);
    ck_assert_uint_eq(sl_buf_unread(&b), sizeof publish_frame);
    ck_assert_mem_eq(sl_buf_head(&b), publish_frame, sizeof publish_frame);
    sl_buf_free(&b);
}
END_TEST

START_TEST(method_basic_deliver)
{
    amqp_method m = {.id = AMQP_BASIC_DELIVER}, d;
    sl_buf b;
    m.u.basic_deliver.consumer_tag = AMQP_BYTES("ctag");
    m.u.basic_deliver.delivery_tag = 0x0102030405060708ULL;
    m.u.basic_deliver.redelivered = 1;
    m.u.basic_deliver.exchange = AMQP_BYTES("");
    m.u.basic_deliver.routing_key = AMQP_BYTES("q");
    ck_assert_int_eq(round_trip(&m, 5, &d, &b), AMQP_DECODE_OK);
    const uint8_t want_payload[] = {0, 60, 0, 60, 4, 'c', 't', 'a', 'g', 1,  2,
                                    3, 4,  5, 6,  7, 8,   1,   0,   1,   'q'};
    ck_assert_uint_eq(sl_buf_unread(&b), sizeof want_payload + 8);
    ck_assert_mem_eq(sl_buf_head(&b) + 7, want_payload, sizeof want_payload);
    ck_assert(amqp_bytes_eq(d.u.basic_deliver.consumer_tag, "ctag"));
    ck_assert_uint_eq(d.u.basic_deliver.delivery_tag, 0x0102030405060708ULL);
    ck_assert_uint_eq(d.u.basic_deliver.redelivered, 1);
    ck_assert_uint_eq(d.u.basic_deliver.exchange.len, 0);
    ck_assert(amqp_bytes_eq(d.u.basic_deliver.routing_key, "q"));
    ck_assert(amqp_method_has_content(AMQP_BASIC_DELIVER));
    ck_assert(amqp_method_has_content(AMQP_BASIC_GET_OK));
    ck_assert(amqp_method_has_content(AMQP_BASIC_RETURN));
    ck_assert(!amqp_method_has_content(AMQP_BASIC_GET_EMPTY));
    sl_buf_free(&b);
}
END_TEST

START_TEST(utf8_validation)
{
    static const struct {
        const char *s;
        size_t n;
        int ok;
    } cases[] = {
        {"", 0, 1},
        {"plain", 5, 1},
        {"caf\xc3\xa9", 5, 1},          /* U+00E9 */
        {"\xe2\x82\xac", 3, 1},         /* U+20AC */
        {"\xf0\x9f\x98\x80", 4, 1},     /* U+1F600 */
        {"\xf4\x8f\xbf\xbf", 4, 1},     /* U+10FFFF */
        {"bad\xff\xfename", 9, 0},      /* the name */
        {"\x80", 1, 0},                 /* lone continuation */
        {"\xc3", 1, 0},                 /* truncated */
        {"\xc0\xaf", 2, 0},             /* overlong '/' */
        {"\xe0\x80\xaf", 3, 0},         /* overlong */
        {"\xed\xa0\x80", 3, 0},         /* surrogate U+D800 */
        {"\xf4\x90\x80\x80", 4, 0},     /* U+110000 */
        {"\xf8\x88\x80\x80\x80", 5, 0}, /* 5-byte form */
        {"a\0b", 3, 1},                 /* NUL is a character */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(amqp_utf8_valid((amqp_bytes){(const uint8_t *)cases[i].s, cases[i].n}) ==
                          cases[i].ok,
                      "case %zu", i);
}
END_TEST

/* Names must be UTF-8 in every method but the content-carrying ones (RabbitMQ's rule). */
START_TEST(method_names_must_be_utf8)
{
    amqp_method m = {.id = AMQP_QUEUE_DECLARE}, d;
    sl_buf b;
    m.u.queue_declare.queue = AMQP_BYTES("bad\xff\xfename");
    ck_assert_int_eq(round_trip(&m, 1, &d, &b), AMQP_DECODE_BAD_UTF8);
    sl_buf_free(&b);
    m.u.queue_declare.queue = AMQP_BYTES("caf\xc3\xa9");
    ck_assert_int_eq(round_trip(&m, 1, &d, &b), AMQP_DECODE_OK);
    sl_buf_free(&b);
    amqp_method p = {.id = AMQP_BASIC_PUBLISH};
    p.u.basic_publish.routing_key = AMQP_BYTES("any\xff bytes");
    ck_assert_int_eq(round_trip(&p, 1, &d, &b), AMQP_DECODE_OK);
    sl_buf_free(&b);
    amqp_method c = {.id = AMQP_CHANNEL_CLOSE};
    c.u.channel_close.reply_text = AMQP_BYTES("NOT_FOUND - no exchange 'bad\xff'");
    ck_assert_int_eq(round_trip(&c, 1, &d, &b), AMQP_DECODE_OK);
    sl_buf_free(&b);
}
END_TEST

START_TEST(method_queue_declare_bits)
{
    /* passive=0 durable=1 exclusive=0 auto_delete=1 nowait=0 -> 0b01010 = 0x0A */
    sl_buf args;
    sl_buf_init(&args);
    size_t t = amqp_tbl_begin(&args);
    amqp_tbl_put_long(&args, "x-message-ttl", 1000);
    amqp_tbl_end(&args, t);

    amqp_method m = {.id = AMQP_QUEUE_DECLARE}, d;
    m.u.queue_declare.queue = AMQP_BYTES("q1");
    m.u.queue_declare.durable = 1;
    m.u.queue_declare.auto_delete = 1;
    m.u.queue_declare.arguments = tbl_content(&args);
    sl_buf b;
    ck_assert_int_eq(round_trip(&m, 1, &d, &b), AMQP_DECODE_OK);
    const uint8_t want[] = {0,   50,  0,   10,  0,   0,   2,   'q', '1', 0x0A, 0,   0,   0,
                            23,  13,  'x', '-', 'm', 'e', 's', 's', 'a', 'g',  'e', '-', 't',
                            't', 'l', 'l', 0,   0,   0,   0,   0,   0,   0x03, 0xE8};
    ck_assert_uint_eq(sl_buf_unread(&b), sizeof want + 8);
    ck_assert_mem_eq(sl_buf_head(&b) + 7, want, sizeof want);
    ck_assert_uint_eq(d.u.queue_declare.passive, 0);
    ck_assert_uint_eq(d.u.queue_declare.durable, 1);
    ck_assert_uint_eq(d.u.queue_declare.exclusive, 0);
    ck_assert_uint_eq(d.u.queue_declare.auto_delete, 1);
    ck_assert_uint_eq(d.u.queue_declare.nowait, 0);
    amqp_value v;
    int64_t ttl;
    ck_assert(amqp_table_get(d.u.queue_declare.arguments, "x-message-ttl", &v));
    ck_assert(amqp_value_int(&v, &ttl) && ttl == 1000);
    sl_buf_free(&b);

    /* Decoding hand-written bits: all five set -> 0x1F; high bits are ignored. */
    uint8_t raw[] = {0, 50, 0, 10, 0, 0, 0, 0xFF, 0, 0, 0, 0};
    ck_assert_int_eq(amqp_method_decode(raw, sizeof raw, &d), AMQP_DECODE_OK);
    ck_assert(d.u.queue_declare.passive && d.u.queue_declare.durable &&
              d.u.queue_declare.exclusive && d.u.queue_declare.auto_delete &&
              d.u.queue_declare.nowait);
    sl_buf_init(&b);
    amqp_method_encode(&b, &d);
    ck_assert_uint_eq(sl_buf_head(&b)[7], 0x1F);
    sl_buf_free(&b);
    sl_buf_free(&args);

    /* A non-0/1 bit value in the struct is still encoded as one bit. */
    m.u.queue_declare.durable = 2;
    m.u.queue_declare.auto_delete = 0;
    m.u.queue_declare.arguments.len = 0;
    sl_buf_init(&b);
    amqp_method_encode(&b, &m);
    ck_assert_uint_eq(sl_buf_head(&b)[9], 0x02);
    sl_buf_free(&b);
}
END_TEST

START_TEST(method_basic_nack_bits)
{
    amqp_method m = {.id = AMQP_BASIC_NACK}, d;
    sl_buf b;
    m.u.basic_nack.delivery_tag = 42;
    m.u.basic_nack.multiple = 0;
    m.u.basic_nack.requeue = 1;
    ck_assert_int_eq(round_trip(&m, 1, &d, &b), AMQP_DECODE_OK);
    const uint8_t want[] = {0, 60, 0, 120, 0, 0, 0, 0, 0, 0, 0, 42, 0x02};
    ck_assert_mem_eq(sl_buf_head(&b) + 7, want, sizeof want);
    ck_assert_uint_eq(d.u.basic_nack.multiple, 0);
    ck_assert_uint_eq(d.u.basic_nack.requeue, 1);
    sl_buf_free(&b);

    m.u.basic_nack.multiple = 1;
    m.u.basic_nack.requeue = 0;
    ck_assert_int_eq(round_trip(&m, 1, &d, &b), AMQP_DECODE_OK);
    ck_assert_uint_eq(sl_buf_head(&b)[7 + 12], 0x01);
    ck_assert_uint_eq(d.u.basic_nack.multiple, 1);
    ck_assert_uint_eq(d.u.basic_nack.requeue, 0);
    sl_buf_free(&b);

    /* Bits separated by a non-bit field use separate octets: basic.deliver's redelivered,
     * then access.request's five consecutive bits share one. */
    amqp_method a = {.id = AMQP_ACCESS_REQUEST};
    a.u.access_request.realm = AMQP_BYTES("/data");
    a.u.access_request.exclusive = 1;
    a.u.access_request.read = 1;
    ck_assert_int_eq(round_trip(&a, 1, &d, &b), AMQP_DECODE_OK);
    ck_assert_uint_eq(sl_buf_unread(&b), 8 + 4 + 6 + 1);
    ck_assert_uint_eq(sl_buf_head(&b)[7 + 4 + 6], 0x11);
    ck_assert(d.u.access_request.exclusive && d.u.access_request.read &&
              !d.u.access_request.passive && !d.u.access_request.active &&
              !d.u.access_request.write);
    sl_buf_free(&b);
}
END_TEST

START_TEST(method_ids_and_names)
{
    ck_assert_uint_eq(AMQP_EXCHANGE_UNBIND_OK, AMQP_ID(40, 51));
    ck_assert_uint_eq(AMQP_CONNECTION_START_OK, AMQP_ID(10, 11));
    ck_assert_uint_eq(AMQP_CHANNEL_CLOSE_OK, AMQP_ID(20, 41));
    ck_assert_uint_eq(AMQP_BASIC_RECOVER_ASYNC, AMQP_ID(60, 100));
    ck_assert_uint_eq(AMQP_CONFIRM_SELECT, AMQP_ID(85, 10));
    ck_assert_uint_eq(AMQP_TX_COMMIT_OK, AMQP_ID(90, 21));
    ck_assert_uint_eq(AMQP_BASIC_GET_EMPTY, AMQP_ID(60, 72));
    ck_assert_str_eq(amqp_method_name(AMQP_EXCHANGE_UNBIND_OK), "exchange.unbind-ok");
    ck_assert_str_eq(amqp_method_name(AMQP_BASIC_RECOVER_ASYNC), "basic.recover-async");
    ck_assert_str_eq(amqp_method_name(AMQP_ID(40, 41)), "unknown");

    const uint8_t unbind_ok[] = {0, 40, 0, 51};
    amqp_method d;
    ck_assert_int_eq(amqp_method_decode(unbind_ok, 4, &d), AMQP_DECODE_OK);
    ck_assert_uint_eq(d.id, AMQP_EXCHANGE_UNBIND_OK);
    const uint8_t wrong[] = {0, 40, 0, 41};
    ck_assert_int_eq(amqp_method_decode(wrong, 4, &d), AMQP_DECODE_UNKNOWN);

    ck_assert(amqp_method_is_sync(AMQP_QUEUE_DECLARE));
    ck_assert(amqp_method_is_sync(AMQP_CONFIRM_SELECT));
    ck_assert(!amqp_method_is_sync(AMQP_QUEUE_DECLARE_OK));
    ck_assert(!amqp_method_is_sync(AMQP_BASIC_ACK));
    ck_assert(!amqp_method_is_sync(AMQP_ID(1, 1)));
}
END_TEST

START_TEST(method_unknown_and_truncated)
{
    amqp_method d;
    const uint8_t unk[] = {0, 99, 0, 1, 1, 2, 3};
    ck_assert_int_eq(amqp_method_decode(unk, sizeof unk, &d), AMQP_DECODE_UNKNOWN);
    const uint8_t unk2[] = {0, 60, 0, 41};
    ck_assert_int_eq(amqp_method_decode(unk2, sizeof unk2, &d), AMQP_DECODE_UNKNOWN);

    /* Fewer than 4 octets: cannot even name the method. */
    for (size_t i = 0; i < 4; i++)
        ck_assert_int_eq(amqp_method_decode(publish_frame + 7, i, &d), AMQP_DECODE_SYNTAX);
    /* Every truncation of basic.publish's arguments. */
    for (size_t i = 4; i < 12; i++) {
        uint8_t *p = malloc(i);
        memcpy(p, publish_frame + 7, i);
        ck_assert_msg(amqp_method_decode(p, i, &d) == AMQP_DECODE_SYNTAX, "len %zu", i);
        free(p);
    }
    /* Trailing bytes are tolerated. */
    uint8_t extra[20];
    memcpy(extra, publish_frame + 7, 12);
    memset(extra + 12, 0xAB, 8);
    ck_assert_int_eq(amqp_method_decode(extra, sizeof extra, &d), AMQP_DECODE_OK);
    /* Methods without arguments decode from exactly four octets. */
    const uint8_t commit[] = {0, 90, 0, 20};
    ck_assert_int_eq(amqp_method_decode(commit, 4, &d), AMQP_DECODE_OK);
    ck_assert_uint_eq(d.id, AMQP_TX_COMMIT);
}
END_TEST

START_TEST(method_shortstr_truncated_on_encode)
{
    char name[400];
    memset(name, 'n', sizeof name);
    amqp_method m = {.id = AMQP_QUEUE_DECLARE_OK}, d;
    m.u.queue_declare_ok.queue.p = (const uint8_t *)name;
    m.u.queue_declare_ok.queue.len = sizeof name;
    m.u.queue_declare_ok.message_count = 3;
    m.u.queue_declare_ok.consumer_count = 4;
    sl_buf b;
    ck_assert_int_eq(round_trip(&m, 1, &d, &b), AMQP_DECODE_OK);
    ck_assert_uint_eq(d.u.queue_declare_ok.queue.len, 255);
    ck_assert_uint_eq(d.u.queue_declare_ok.message_count, 3);
    ck_assert_uint_eq(d.u.queue_declare_ok.consumer_count, 4);
    sl_buf_free(&b);
}
END_TEST

START_TEST(method_close)
{
    amqp_method m = {.id = AMQP_CHANNEL_CLOSE}, d;
    m.u.channel_close.reply_code = 404;
    m.u.channel_close.reply_text = AMQP_BYTES("NOT_FOUND - no queue 'q'");
    m.u.channel_close.class_id = 50;
    m.u.channel_close.method_id = 10;
    sl_buf b;
    ck_assert_int_eq(round_trip(&m, 3, &d, &b), AMQP_DECODE_OK);
    ck_assert_uint_eq(d.u.channel_close.reply_code, 404);
    ck_assert(amqp_bytes_eq(d.u.channel_close.reply_text, "NOT_FOUND - no queue 'q'"));
    ck_assert_uint_eq(d.u.channel_close.class_id, 50);
    ck_assert_uint_eq(d.u.channel_close.method_id, 10);
    sl_buf_free(&b);
}
END_TEST

/* ------------------------------------------------------------------ content header / props */

/* The delivery fast path writes the same bytes as the generic encoders, for a body in one
 * frame, none, several frames, no frame_max, and names longer than a short string. */
static void deliver_generic(sl_buf *out, uint16_t ch, amqp_bytes ctag, uint64_t tag, int redel,
                            amqp_bytes ex, amqp_bytes rk, const uint8_t *props, size_t props_len,
                            const uint8_t *body, uint64_t body_len, size_t max_payload)
{
    amqp_method m = {.id = AMQP_BASIC_DELIVER};
    m.u.basic_deliver.consumer_tag = ctag;
    m.u.basic_deliver.delivery_tag = tag;
    m.u.basic_deliver.redelivered = redel;
    m.u.basic_deliver.exchange = ex;
    m.u.basic_deliver.routing_key = rk;
    amqp_method_write(out, ch, &m);
    amqp_content_header_write(out, ch, body_len, props, props_len);
    size_t chunk = max_payload ? max_payload : (size_t)body_len;
    for (uint64_t off = 0; off < body_len; off += chunk) {
        size_t n = body_len - off < chunk ? (size_t)(body_len - off) : chunk;
        amqp_frame_write(out, AMQP_FRAME_BODY, ch, body + off, n);
    }
}

START_TEST(deliver_fast_path_matches_generic)
{
    static uint8_t body[5000];
    static char longname[300];
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (uint8_t)(i * 7);
    memset(longname, 'n', sizeof longname - 1);
    const uint8_t props[] = {0x10, 0x00, 0x02}; /* delivery-mode 2 */
    struct {
        uint64_t body_len;
        size_t max_payload;
        const char *ex, *rk;
    } cases[] = {
        {16, 131064, "", "q"},
        {0, 131064, "amq.direct", "rk"},
        {5000, 1000, "ex", "rk"},
        {5000, 4999, "ex", "rk"},
        {5000, 5000, "ex", "rk"},
        {300, 0, "ex", "rk"},
        {10, 131064, longname, longname},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_buf a, b;
        sl_buf_init(&a);
        sl_buf_init(&b);
        sl_buf_append(&a, "x", 1); /* not at the start of the buffer */
        sl_buf_append(&b, "x", 1);
        amqp_bytes ctag = amqp_cstr("amq.ctag-1"), ex = amqp_cstr(cases[i].ex),
                   rk = amqp_cstr(cases[i].rk);
        amqp_deliver_write(&a, 7, ctag, 1000 + i, (int)(i & 1), ex, rk, props, sizeof props, body,
                           cases[i].body_len, cases[i].max_payload);
        deliver_generic(&b, 7, ctag, 1000 + i, (int)(i & 1), ex, rk, props, sizeof props, body,
                        cases[i].body_len, cases[i].max_payload);
        ck_assert_uint_eq(sl_buf_unread(&a), sl_buf_unread(&b));
        ck_assert_mem_eq(sl_buf_head(&a), sl_buf_head(&b), sl_buf_unread(&a));
        /* The head for a body sent by reference: with the body's bytes and the frame end
         * after it, the same bytes; refused (nothing written) unless the body is one frame. */
        sl_buf h;
        sl_buf_init(&h);
        sl_buf_append(&h, "x", 1);
        int r = amqp_deliver_write_head(&h, 7, ctag, 1000 + i, (int)(i & 1), ex, rk, props,
                                        sizeof props, cases[i].body_len, cases[i].max_payload);
        int one = cases[i].body_len > 0 &&
                  (!cases[i].max_payload || cases[i].body_len <= cases[i].max_payload);
        ck_assert_int_eq(r, one ? 0 : -1);
        if (one) {
            sl_buf_append(&h, body, cases[i].body_len);
            sl_buf_put_u8(&h, AMQP_FRAME_END);
            ck_assert_uint_eq(sl_buf_unread(&h), sl_buf_unread(&a));
            ck_assert_mem_eq(sl_buf_head(&h), sl_buf_head(&a), sl_buf_unread(&a));
        } else {
            ck_assert_uint_eq(sl_buf_unread(&h), 1);
        }
        sl_buf_free(&h);
        sl_buf_free(&a);
        sl_buf_free(&b);
    }
}
END_TEST

START_TEST(props_all_fourteen)
{
    sl_buf hdr;
    sl_buf_init(&hdr);
    size_t t = amqp_tbl_begin(&hdr);
    amqp_tbl_put_str(&hdr, "h", AMQP_BYTES("v"));
    amqp_tbl_end(&hdr, t);

    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    p.flags = 0xFFFC;
    p.content_type = AMQP_BYTES("text/plain");
    p.content_encoding = AMQP_BYTES("utf-8");
    p.headers = tbl_content(&hdr);
    p.delivery_mode = 2;
    p.priority = 7;
    p.correlation_id = AMQP_BYTES("corr");
    p.reply_to = AMQP_BYTES("amq.rabbitmq.reply-to");
    p.expiration = AMQP_BYTES("60000");
    p.message_id = AMQP_BYTES("mid");
    p.timestamp = 1700000000;
    p.type = AMQP_BYTES("t");
    p.user_id = AMQP_BYTES("guest");
    p.app_id = AMQP_BYTES("app");
    p.cluster_id = AMQP_BYTES("c");

    sl_buf raw;
    sl_buf_init(&raw);
    amqp_props_encode(&raw, &p);
    ck_assert_uint_eq(sl_get_u16(sl_buf_head(&raw)), 0xFFFC);
    ck_assert_uint_eq(sl_buf_head(&raw)[2], 10); /* content-type length comes first */

    sl_buf fr;
    sl_buf_init(&fr);
    amqp_content_header_write(&fr, 9, 123456789, sl_buf_head(&raw), sl_buf_unread(&raw));
    amqp_frame f;
    ck_assert_int_eq(amqp_frame_parse(sl_buf_head(&fr), sl_buf_unread(&fr), 0, &f),
                     (int)sl_buf_unread(&fr));
    ck_assert_uint_eq(f.type, AMQP_FRAME_HEADER);
    ck_assert_uint_eq(f.channel, 9);

    amqp_content_header h;
    ck_assert_int_eq(amqp_content_header_parse(f.payload, f.size, &h), 0);
    ck_assert_uint_eq(h.class_id, 60);
    ck_assert_uint_eq(h.body_size, 123456789);
    ck_assert_uint_eq(h.props_len, sl_buf_unread(&raw));
    ck_assert_mem_eq(h.props, sl_buf_head(&raw), h.props_len);
    ck_assert_uint_eq(sl_get_u16(f.payload + 2), 0); /* weight */

    amqp_basic_props q;
    ck_assert_int_eq(amqp_props_decode(h.props, h.props_len, &q), 0);
    ck_assert_uint_eq(q.flags, 0xFFFC);
    ck_assert(amqp_bytes_eq(q.content_type, "text/plain"));
    ck_assert(amqp_bytes_eq(q.content_encoding, "utf-8"));
    ck_assert(amqp_bytes_equal(q.headers, tbl_content(&hdr)));
    ck_assert_uint_eq(q.delivery_mode, 2);
    ck_assert_uint_eq(q.priority, 7);
    ck_assert(amqp_bytes_eq(q.correlation_id, "corr"));
    ck_assert(amqp_bytes_eq(q.reply_to, "amq.rabbitmq.reply-to"));
    ck_assert(amqp_bytes_eq(q.expiration, "60000"));
    ck_assert(amqp_bytes_eq(q.message_id, "mid"));
    ck_assert_uint_eq(q.timestamp, 1700000000);
    ck_assert(amqp_bytes_eq(q.type, "t"));
    ck_assert(amqp_bytes_eq(q.user_id, "guest"));
    ck_assert(amqp_bytes_eq(q.app_id, "app"));
    ck_assert(amqp_bytes_eq(q.cluster_id, "c"));

    /* Re-encoding the decoded props reproduces the bytes. */
    sl_buf again;
    sl_buf_init(&again);
    amqp_props_encode(&again, &q);
    ck_assert_uint_eq(sl_buf_unread(&again), sl_buf_unread(&raw));
    ck_assert_mem_eq(sl_buf_head(&again), sl_buf_head(&raw), sl_buf_unread(&raw));

    /* Every truncation fails. */
    for (size_t i = 0; i < sl_buf_unread(&raw); i++) {
        uint8_t *c = malloc(i ? i : 1);
        memcpy(c, sl_buf_head(&raw), i);
        ck_assert_int_eq(amqp_props_decode(c, i, &q), AMQP_DECODE_SYNTAX);
        free(c);
    }
    sl_buf_free(&again);
    sl_buf_free(&fr);
    sl_buf_free(&raw);
    sl_buf_free(&hdr);
}
END_TEST

/* A delivery header the broker sets (x-delivery-count, x-stream-offset): added to properties
 * without headers, replacing the publisher's own, keeping the others and the other fields. */
START_TEST(props_set_long_header_replaces_and_keeps)
{
    sl_buf in, hb, out;
    sl_buf_init(&in);
    sl_buf_init(&hb);
    sl_buf_init(&out);
    size_t mark = amqp_tbl_begin(&hb);
    amqp_tbl_put_long(&hb, "x-stream-offset", 99);
    amqp_tbl_put_long(&hb, "keep", 7);
    amqp_tbl_end(&hb, mark);
    amqp_basic_props bp = {.flags = AMQP_P_HEADERS | AMQP_P_DELIVERY_MODE, .delivery_mode = 2};
    bp.headers = (amqp_bytes){sl_buf_head(&hb) + 4, sl_buf_unread(&hb) - 4};
    amqp_props_encode(&in, &bp);
    amqp_props_set_long_header(sl_buf_head(&in), sl_buf_unread(&in), "x-stream-offset", 5, &out);
    amqp_basic_props got;
    ck_assert_int_eq(amqp_props_decode(sl_buf_head(&out), sl_buf_unread(&out), &got), 0);
    ck_assert_uint_eq(got.delivery_mode, 2);
    amqp_value v;
    int64_t n = 0, keep = 0, seen = 0;
    amqp_table_iter it;
    amqp_bytes k;
    amqp_table_iter_init(&it, got.headers);
    while (amqp_table_next(&it, &k, &v))
        seen += amqp_bytes_eq(k, "x-stream-offset");
    ck_assert_int_eq(seen, 1); /* replaced, not added beside */
    ck_assert(amqp_table_get(got.headers, "x-stream-offset", &v) && amqp_value_int(&v, &n));
    ck_assert_int_eq(n, 5);
    ck_assert(amqp_table_get(got.headers, "keep", &v) && amqp_value_int(&v, &keep));
    ck_assert_int_eq(keep, 7);
    /* no properties at all: the header alone */
    sl_buf_consume(&out, sl_buf_unread(&out));
    amqp_props_set_long_header(NULL, 0, "x-delivery-count", 3, &out);
    ck_assert_int_eq(amqp_props_decode(sl_buf_head(&out), sl_buf_unread(&out), &got), 0);
    ck_assert_uint_eq(got.flags, AMQP_P_HEADERS);
    ck_assert(amqp_table_get(got.headers, "x-delivery-count", &v) && amqp_value_int(&v, &n));
    ck_assert_int_eq(n, 3);
    sl_buf_free(&in);
    sl_buf_free(&hb);
    sl_buf_free(&out);
}
END_TEST

START_TEST(props_subset_and_errors)
{
    /* delivery-mode only: flags 0x1000, one octet. */
    amqp_basic_props p, q;
    memset(&p, 0, sizeof p);
    p.flags = AMQP_P_DELIVERY_MODE;
    p.delivery_mode = 2;
    p.content_type = AMQP_BYTES("ignored: flag not set");
    sl_buf b;
    sl_buf_init(&b);
    amqp_props_encode(&b, &p);
    const uint8_t want[] = {0x10, 0x00, 2};
    ck_assert_uint_eq(sl_buf_unread(&b), sizeof want);
    ck_assert_mem_eq(sl_buf_head(&b), want, sizeof want);
    sl_buf_free(&b);

    const uint8_t none[] = {0, 0};
    ck_assert_int_eq(amqp_props_decode(none, 2, &q), 0);
    ck_assert_uint_eq(q.flags, 0);

    /* Continuation bit. */
    const uint8_t cont[] = {0x10, 0x01, 2, 0, 0};
    ck_assert_int_eq(amqp_props_decode(cont, sizeof cont, &q), AMQP_DECODE_SYNTAX);
    /* Invalid headers table. */
    const uint8_t badh[] = {0x20, 0x00, 0, 0, 0, 4, 1, 'k', 'Z', 0};
    ck_assert_int_eq(amqp_props_decode(badh, sizeof badh, &q), AMQP_DECODE_SYNTAX);
    const uint8_t goodh[] = {0x20, 0x00, 0, 0, 0, 3, 1, 'k', 'V'};
    ck_assert_int_eq(amqp_props_decode(goodh, sizeof goodh, &q), 0);
    amqp_value v;
    ck_assert(amqp_table_get(q.headers, "k", &v) && v.tag == 'V');

    /* Content header shorter than 12 octets. */
    amqp_content_header h;
    const uint8_t hdr[14] = {0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0};
    for (size_t i = 0; i < 12; i++)
        ck_assert_int_eq(amqp_content_header_parse(hdr, i, &h), AMQP_DECODE_SYNTAX);
    ck_assert_int_eq(amqp_content_header_parse(hdr, 14, &h), 0);
    ck_assert_uint_eq(h.body_size, 5);
    ck_assert_uint_eq(h.props_len, 2);
}
END_TEST

static Suite *amqp_suite(void)
{
    Suite *s = suite_create("amqp");
    TCase *tc;

    tc = tcase_create("frame");
    tcase_add_test(tc, frame_partial_every_split);
    tcase_add_test(tc, frame_bad_end);
    tcase_add_test(tc, frame_bad_type);
    tcase_add_test(tc, frame_too_large);
    tcase_add_test(tc, frame_heartbeat);
    tcase_add_test(tc, frame_multiple_in_buffer);
    tcase_add_test(tc, frame_begin_end_survives_compaction);
    tcase_add_test(tc, protocol_header);
    suite_add_tcase(s, tc);

    tc = tcase_create("wire");
    tcase_add_test(tc, primitives_read);
    tcase_add_test(tc, primitives_truncated);
    tcase_add_test(tc, primitives_write);
    suite_add_tcase(s, tc);

    tc = tcase_create("table");
    tcase_add_test(tc, table_all_tags);
    tcase_add_test(tc, table_builders_nested);
    tcase_add_test(tc, table_invalid_tags);
    tcase_add_test(tc, table_truncated);
    tcase_add_test(tc, table_depth_limit);
    tcase_add_test(tc, value_equal_and_names);
    suite_add_tcase(s, tc);

    tc = tcase_create("method");
    tcase_add_test(tc, method_connection_start);
    tcase_add_test(tc, start_builder_full_and_short);
    tcase_add_test(tc, method_connection_start_ok_and_tune);
    tcase_add_test(tc, method_basic_publish);
    tcase_add_test(tc, method_basic_deliver);
    tcase_add_test(tc, method_queue_declare_bits);
    tcase_add_test(tc, method_basic_nack_bits);
    tcase_add_test(tc, method_ids_and_names);
    tcase_add_test(tc, method_unknown_and_truncated);
    tcase_add_test(tc, method_shortstr_truncated_on_encode);
    tcase_add_test(tc, method_close);
    suite_add_tcase(s, tc);

    tc = tcase_create("props");
    tcase_add_test(tc, props_all_fourteen);
    tcase_add_test(tc, deliver_fast_path_matches_generic);
    tcase_add_test(tc, props_subset_and_errors);
    tcase_add_test(tc, props_set_long_header_replaces_and_keeps);
    tcase_add_test(tc, utf8_validation);
    tcase_add_test(tc, method_names_must_be_utf8);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(amqp_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
