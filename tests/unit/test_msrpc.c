/* test_msrpc.c - unit tests for the MSMQ RPC stubs' wire forms (src/mgmt/msrpc_propvar.c,
 * msrpc.c): PROPVARIANT arrays laid out byte for byte as MIDL's NDR20 does (8-aligned
 * elements, the discriminant repeated, arms aligned to their own type, referents deferred
 * after every element), VT_VARIANT vectors of parallel vectors, and QUEUE_FORMAT decoding.
 */
#include <check.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/msrpc.h"

static const uint8_t *wire(sl_buf *b, size_t at)
{
    return b->data + at;
}

START_TEST(propvariant_array_layout)
{
    sl_buf b;
    sl_buf_init(&b);
    ndr_wr w;
    ndr_wr_init(&w, &b);
    json_t *v[3] = {json_integer(7), json_integer(0x1122334455667788LL), json_string("ab")};
    uint16_t vt[3] = {MSRPC_VT_UI4, MSRPC_VT_I8, MSRPC_VT_LPWSTR};
    ndr_put_u32(&w, 3);
    for (int i = 0; i < 3; i++)
        msrpc_pv_inline(&w, vt[i], v[i]);
    for (int i = 0; i < 3; i++)
        msrpc_pv_deferred(&w, vt[i], v[i], 0);
    static const uint8_t want[] = {
        3,    0,    0,    0,    0,    0,    0,    0,          /* max count, pad to 8 */
        0x13, 0,    0,    0,    0,    0,    0,    0,          /* VT_UI4, reserved */
        0x13, 0,    0,    0,    7,    0,    0,    0,          /* discriminant, pad, value */
        0x14, 0,    0,    0,    0,    0,    0,    0,          /* VT_I8 */
        0x14, 0,    0,    0,    0,    0,    0,    0,          /* discriminant, pad to 8 */
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,       /* the hyper */
        0x1f, 0,    0,    0,    0,    0,    0,    0,          /* VT_LPWSTR */
        0x1f, 0,    0,    0,    0,    0,    2,    0,          /* discriminant, pad, referent id */
        3,    0,    0,    0,    0,    0,    0,    0,          /* deferred: max, offset */
        3,    0,    0,    0,    'a',  0,    'b',  0,    0, 0, /* actual, "ab\0" */
    };
    ck_assert_uint_eq(b.len, sizeof want);
    ck_assert_mem_eq(wire(&b, 0), want, sizeof want);
    for (int i = 0; i < 3; i++)
        json_decref(v[i]);
    sl_buf_free(&b);
}
END_TEST

START_TEST(propvariant_vectors_and_nulls)
{
    sl_buf b;
    sl_buf_init(&b);
    ndr_wr w;
    ndr_wr_init(&w, &b);
    /* EOD_SOURCE_INFO-like: [[fmt], [{guid}], [seqid], [seqno], [time], [rejects]] */
    json_t *v = json_pack("[[s],[{s:s}],[I],[i],[i],[i]]", "F", "guid",
                          "fdb3a030-065f-11d1-bb9b-00a024ea5525", (json_int_t)5, 6, 7, 0);
    msrpc_pv_inline(&w, msrpc_vt_code("VT_VARIANT|VT_VECTOR"), v);
    msrpc_pv_deferred(&w, msrpc_vt_code("VT_VARIANT|VT_VECTOR"), v, MSRPC_PROP_EOD_SOURCE_INFO);
    ck_assert_uint_eq(b.data[0] | b.data[1] << 8, MSRPC_VT_VECTOR | MSRPC_VT_VARIANT);
    ck_assert_uint_eq(b.data[12], 6); /* cElems */
    /* the six elements follow the deferred count, 8-aligned, each with its own type */
    size_t at = 24; /* 16 inline bytes + referent, then the count at 20, elements at 24 */
    ck_assert_uint_eq(b.data[20], 6);
    static const uint16_t types[6] = {0x101f, 0x1048, 0x1015, 0x1013, 0x1003, 0x1013};
    for (int i = 0; i < 6; i++) {
        ck_assert_uint_eq(b.data[at] | b.data[at + 1] << 8, types[i]);
        ck_assert_uint_eq(b.data[at + 8] | b.data[at + 9] << 8, types[i]);
        ck_assert_uint_eq(b.data[at + 12], 1); /* one element each */
        at += 24; /* 8 header + discriminant, cElems at 12, pointer at 16; next at 24 */
    }
    json_decref(v);
    /* a JSON null: VT_NULL whatever the property's type, with nothing deferred */
    sl_buf_free(&b);
    sl_buf_init(&b);
    ndr_wr_init(&w, &b);
    json_t *n = json_null();
    msrpc_pv_inline(&w, MSRPC_VT_LPWSTR, n);
    msrpc_pv_deferred(&w, MSRPC_VT_LPWSTR, n, 0);
    ck_assert_uint_eq(b.len, 10);
    ck_assert_uint_eq(b.data[0], MSRPC_VT_NULL);
    sl_buf_free(&b);
}
END_TEST

START_TEST(vt_names)
{
    ck_assert_uint_eq(msrpc_vt_code("VT_LPWSTR"), 31);
    ck_assert_uint_eq(msrpc_vt_code("VT_LPWSTR|VT_VECTOR"), 0x101f);
    ck_assert_uint_eq(msrpc_vt_code("VT_UI4"), 19);
    ck_assert_uint_eq(msrpc_vt_code("VT_I8"), 20);
    ck_assert_uint_eq(msrpc_vt_code("VT_BLOB"), 65);
    ck_assert_uint_eq(msrpc_vt_code("VT_NULL"), 1);
}
END_TEST

START_TEST(queue_format_decoding)
{
    /* DIRECT with a journal suffix; PRIVATE; an invalid type */
    sl_buf b;
    sl_buf_init(&b);
    ndr_wr w;
    ndr_wr_init(&w, &b);
    ndr_put_u8(&w, 3);
    ndr_put_u8(&w, 1);
    ndr_put_u16(&w, 0);
    ndr_put_u8(&w, 3);
    ndr_put_ref(&w);
    ndr_put_wstring(&w, "OS:.\\private$\\q");
    ndr_rd r;
    ndr_rd_init(&r, b.data, b.len, 1);
    char out[300];
    msrpc_read_queue_format(NULL, &r, out, sizeof out);
    ck_assert_int_eq(r.err, 0);
    ck_assert_str_eq(out, "DIRECT=OS:.\\private$\\q;journal");
    sl_buf_free(&b);
    sl_buf_init(&b);
    ndr_wr_init(&w, &b);
    ndr_put_u8(&w, 2);
    ndr_put_u8(&w, 0);
    ndr_put_u16(&w, 0);
    ndr_put_u8(&w, 2);
    uint8_t g[16];
    rpc_uuid_parse("fdb3a030-065f-11d1-bb9b-00a024ea5525", g);
    ndr_wr_align(&w, 4);
    ndr_put_bytes(&w, g, 16);
    ndr_put_u32(&w, 0x1a);
    ndr_rd_init(&r, b.data, b.len, 1);
    msrpc_read_queue_format(NULL, &r, out, sizeof out);
    ck_assert_int_eq(r.err, 0);
    ck_assert_str_eq(out, "PRIVATE=fdb3a030-065f-11d1-bb9b-00a024ea5525\\0000001a");
    b.data[0] = 9;
    b.data[4] = 9;
    ndr_rd_init(&r, b.data, b.len, 1);
    msrpc_read_queue_format(NULL, &r, out, sizeof out);
    ck_assert_int_eq(r.err, 1);
    /* the discriminant must repeat the type */
    b.data[0] = 2;
    b.data[4] = 3;
    ndr_rd_init(&r, b.data, b.len, 1);
    msrpc_read_queue_format(NULL, &r, out, sizeof out);
    ck_assert_int_eq(r.err, 1);
    sl_buf_free(&b);
}
END_TEST

static Suite *msrpc_suite(void)
{
    Suite *s = suite_create("msrpc");
    TCase *tc = tcase_create("msrpc");
    tcase_add_test(tc, propvariant_array_layout);
    tcase_add_test(tc, propvariant_vectors_and_nulls);
    tcase_add_test(tc, vt_names);
    tcase_add_test(tc, queue_format_decoding);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(msrpc_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
