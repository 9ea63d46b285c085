/* fuzz_frame.c - libFuzzer target for the whole AMQP codec.
 *
 * Input layout: two octets choose frame_max (big-endian u16, 0 = unlimited), the rest is a
 * byte stream of frames. The whole input is also tried as a protocol header and as a raw
 * field table / array. Besides "no crash, no over-read" (ASan/UBSan), it checks that
 * anything the decoders accept re-encodes to something they accept again, and that
 * encoding is idempotent (encode(decode(encode(decode(x)))) == encode(decode(x))).
 *
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc tests/fuzz/fuzz_frame.c \
 *        src/amqp/{wire,frame,table,method,methods_gen}.c src/core/{buf,mem}.c -o fuzz_frame
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp/frame.h"
#include "amqp/method.h"
#include "amqp/table.h"
#include "amqp/wire.h"
#include "core/buf.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int same(const sl_buf *a, const sl_buf *b)
{
    return sl_buf_unread(a) == sl_buf_unread(b) &&
           memcmp(sl_buf_head(a), sl_buf_head(b), sl_buf_unread(a)) == 0;
}

static void walk(amqp_bytes content, int is_array, int depth);

static void visit(const amqp_value *v, int depth)
{
    int64_t iv;
    amqp_bytes s;

    CHECK(amqp_value_equal(v, v));
    CHECK(strcmp(amqp_value_type_name(v->tag), "unknown") != 0);
    (void)amqp_value_int(v, &iv);
    (void)amqp_value_str(v, &s);
    if (v->tag == 'F' || v->tag == 'A') {
        CHECK(depth < AMQP_TABLE_MAX_DEPTH);
        walk(v->v.s, v->tag == 'A', depth + 1);
    }
}

/* Content already validated: iteration must consume it exactly, without error. Recursion
 * is bounded by the validated depth. */
static void walk(amqp_bytes content, int is_array, int depth)
{
    amqp_table_iter it;
    amqp_bytes key;
    amqp_value v;

    CHECK((is_array ? amqp_array_validate(content) : amqp_table_validate(content)) == 0);
    if (is_array) {
        amqp_array_iter_init(&it, content);
        while (amqp_array_next(&it, &v))
            visit(&v, depth);
    } else {
        amqp_table_iter_init(&it, content);
        while (amqp_table_next(&it, &key, &v)) {
            visit(&v, depth);
            amqp_value got;
            /* Lookup by key finds an entry (the first with that key) of some value. */
            char k[256];
            if (memchr(key.p, 0, key.len) == NULL) {
                memcpy(k, key.p, key.len);
                k[key.len] = 0;
                CHECK(amqp_table_get(content, k, &got));
            }
        }
    }
    CHECK(!it.r.err && it.r.p == it.r.end);
}

/* Re-encode a validated table entry by entry; the copy must validate, and copying the
 * copy must give identical bytes. */
static void table_round_trip(amqp_bytes content)
{
    sl_buf a, b;
    amqp_table_iter it;
    amqp_bytes key;
    amqp_value v;

    sl_buf_init(&a);
    sl_buf_init(&b);
    size_t m = amqp_tbl_begin(&a);
    amqp_table_iter_init(&it, content);
    while (amqp_table_next(&it, &key, &v))
        amqp_tbl_put_value(&a, key, &v);
    amqp_tbl_end(&a, m);
    amqp_bytes copy = {sl_buf_head(&a) + 4, sl_buf_unread(&a) - 4};
    CHECK(amqp_table_validate(copy) == 0);
    m = amqp_tbl_begin(&b);
    amqp_table_iter_init(&it, copy);
    while (amqp_table_next(&it, &key, &v))
        amqp_tbl_put_value(&b, key, &v);
    amqp_tbl_end(&b, m);
    CHECK(same(&a, &b));
    sl_buf_free(&a);
    sl_buf_free(&b);
}

static void check_method(const amqp_frame *f)
{
    amqp_method m, m2;
    sl_buf e1, e2;
    amqp_frame g;

    int rc = amqp_method_decode(f->payload, f->size, &m);
    CHECK(rc == AMQP_DECODE_OK || rc == AMQP_DECODE_UNKNOWN || rc == AMQP_DECODE_SYNTAX ||
          rc == AMQP_DECODE_BAD_UTF8);
    (void)amqp_method_is_sync(m.id);
    (void)amqp_method_has_content(m.id);
    if (rc != AMQP_DECODE_OK)
        return;
    CHECK(strcmp(amqp_method_name(m.id), "unknown") != 0);

    sl_buf_init(&e1);
    amqp_method_write(&e1, f->channel, &m);
    int n = amqp_frame_parse(sl_buf_head(&e1), sl_buf_unread(&e1), 0, &g);
    CHECK(n > 0 && (size_t)n == sl_buf_unread(&e1));
    CHECK(g.type == AMQP_FRAME_METHOD && g.channel == f->channel);
    /* Re-encoding never grows a payload: trailing bytes are dropped, nothing is added. */
    CHECK(g.size <= f->size);
    rc = amqp_method_decode(g.payload, g.size, &m2);
    CHECK(rc == AMQP_DECODE_OK);
    CHECK(m2.id == m.id);
    sl_buf_init(&e2);
    amqp_method_write(&e2, f->channel, &m2);
    CHECK(same(&e1, &e2));
    sl_buf_free(&e1);
    sl_buf_free(&e2);
}

static void check_header(const amqp_frame *f)
{
    amqp_content_header h;
    amqp_basic_props p, p2;
    sl_buf e1, e2, fr;
    amqp_frame g;

    if (amqp_content_header_parse(f->payload, f->size, &h) != 0)
        return;
    CHECK(h.props + h.props_len == f->payload + f->size);
    if (amqp_props_decode(h.props, h.props_len, &p) != 0)
        return;
    if (p.flags & AMQP_P_HEADERS) {
        walk(p.headers, 0, 0);
        table_round_trip(p.headers);
    }
    sl_buf_init(&e1);
    amqp_props_encode(&e1, &p);
    CHECK(sl_buf_unread(&e1) <= h.props_len);
    CHECK(amqp_props_decode(sl_buf_head(&e1), sl_buf_unread(&e1), &p2) == 0);
    CHECK(p2.flags == p.flags);
    sl_buf_init(&e2);
    amqp_props_encode(&e2, &p2);
    CHECK(same(&e1, &e2));

    sl_buf_init(&fr);
    amqp_content_header_write(&fr, f->channel, h.body_size, sl_buf_head(&e1), sl_buf_unread(&e1));
    int n = amqp_frame_parse(sl_buf_head(&fr), sl_buf_unread(&fr), 0, &g);
    CHECK(n > 0 && (size_t)n == sl_buf_unread(&fr) && g.type == AMQP_FRAME_HEADER);
    amqp_content_header h2;
    CHECK(amqp_content_header_parse(g.payload, g.size, &h2) == 0);
    CHECK(h2.class_id == 60 && h2.body_size == h.body_size);
    sl_buf_free(&fr);
    sl_buf_free(&e1);
    sl_buf_free(&e2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    amqp_bytes raw = {data, size};
    amqp_frame f;

    int hc = amqp_protocol_header_check(data, size);
    CHECK(hc == -1 || hc == 0 || hc == 8);
    CHECK(hc != 8 || size >= 8);

    if (amqp_table_validate(raw) == 0) {
        walk(raw, 0, 0);
        table_round_trip(raw);
    }
    if (amqp_array_validate(raw) == 0)
        walk(raw, 1, 0);

    if (size < 2)
        return 0;
    uint32_t frame_max = sl_get_u16(data);
    const uint8_t *p = data + 2;
    size_t len = size - 2;
    for (;;) {
        int n = amqp_frame_parse(p, len, frame_max, &f);
        if (n <= 0)
            break;
        CHECK((size_t)n <= len);
        CHECK((size_t)f.size + AMQP_FRAME_OVERHEAD == (size_t)n);
        CHECK(frame_max == 0 || (uint32_t)n <= frame_max);
        CHECK(p[n - 1] == AMQP_FRAME_END);
        if (f.type == AMQP_FRAME_METHOD)
            check_method(&f);
        else if (f.type == AMQP_FRAME_HEADER)
            check_header(&f);
        p += n;
        len -= (size_t)n;
    }
    return 0;
}
