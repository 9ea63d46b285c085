/* test_msrpc.c - unit tests for the MSMQ RPC stubs' wire forms (src/rpc/propvar.c,
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

#include "core/mem.h"
#include "rpc/msrpc.h"
#include "rpc/propvar.h"

static const uint8_t *wire(sl_buf *b, size_t at)
{
    return b->data + at;
}

static mq_value v_int(int64_t i)
{
    return (mq_value){.kind = MQ_V_INT, .i = i};
}

static mq_value v_str(const char *s)
{
    return (mq_value){.kind = MQ_V_STR, .s = sl_xstrdup(s)};
}

/* a vector of one element */
static mq_value v_one(mq_value e)
{
    mq_value v = {.kind = MQ_V_LIST, .n = 1, .items = sl_xcalloc(1, sizeof(mq_value))};
    v.items[0] = e;
    return v;
}

START_TEST(propvariant_array_layout)
{
    sl_buf b;
    sl_buf_init(&b);
    ndr_wr w;
    rpc_ndr_wr_init(&w, &b);
    mq_value v[3] = {v_int(7), v_int(0x1122334455667788LL), v_str("ab")};
    uint16_t vt[3] = {MSRPC_VT_UI4, MSRPC_VT_I8, MSRPC_VT_LPWSTR};
    rpc_ndr_put_u32(&w, 3);
    for (int i = 0; i < 3; i++)
        rpc_msrpc_pv_inline(&w, vt[i], &v[i]);
    for (int i = 0; i < 3; i++)
        rpc_msrpc_pv_deferred(&w, vt[i], &v[i], 0);
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
        mq_value_free(&v[i]);
    sl_buf_free(&b);
}
END_TEST

START_TEST(propvariant_vectors_and_nulls)
{
    sl_buf b;
    sl_buf_init(&b);
    ndr_wr w;
    rpc_ndr_wr_init(&w, &b);
    /* EOD_SOURCE_INFO-like: [[fmt], [sender], [seqid], [seqno], [time], [rejects]] */
    mq_value sender = {.kind = MQ_V_SENDER,
                       .guid = {0xfd, 0xb3, 0xa0, 0x30, 0x06, 0x5f, 0x11, 0xd1, 0xbb, 0x9b, 0x00,
                                0xa0, 0x24, 0xea, 0x55, 0x25}};
    mq_value v = {.kind = MQ_V_LIST, .n = 6, .items = sl_xcalloc(6, sizeof(mq_value))};
    v.items[0] = v_one(v_str("F"));
    v.items[1] = v_one(sender);
    v.items[2] = v_one(v_int(5));
    v.items[3] = v_one(v_int(6));
    v.items[4] = v_one(v_int(7));
    v.items[5] = v_one(v_int(0));
    rpc_msrpc_pv_inline(&w, MQ_VT_VARIANT | MQ_VT_VECTOR, &v);
    rpc_msrpc_pv_deferred(&w, MQ_VT_VARIANT | MQ_VT_VECTOR, &v, MQ_PROP_EOD_SOURCE_INFO);
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
    /* then the referents: "F" (pointer, string), then the sender's GUID, the first three
     * fields little endian */
    static const uint8_t guid[16] = {0x30, 0xa0, 0xb3, 0xfd, 0x5f, 0x06, 0xd1, 0x11,
                                     0xbb, 0x9b, 0x00, 0xa0, 0x24, 0xea, 0x55, 0x25};
    int found = 0;
    for (size_t k = at; k + 16 <= b.len; k++)
        found |= !memcmp(b.data + k, guid, 16);
    ck_assert(found);
    mq_value_free(&v);
    /* no value: VT_NULL whatever the property's type, with nothing deferred */
    sl_buf_free(&b);
    sl_buf_init(&b);
    rpc_ndr_wr_init(&w, &b);
    mq_value n = {.kind = MQ_V_NULL};
    rpc_msrpc_pv_inline(&w, MSRPC_VT_LPWSTR, &n);
    rpc_msrpc_pv_deferred(&w, MSRPC_VT_LPWSTR, &n, 0);
    ck_assert_uint_eq(b.len, 10);
    ck_assert_uint_eq(b.data[0], MSRPC_VT_NULL);
    sl_buf_free(&b);
}
END_TEST

START_TEST(vt_names)
{
    /* the VARTYPE names the HTTP API shows beside the codes DCE/RPC sends */
    ck_assert_str_eq(mq_vt_name(31), "VT_LPWSTR");
    ck_assert_str_eq(mq_vt_name(0x101f), "VT_LPWSTR|VT_VECTOR");
    ck_assert_str_eq(mq_vt_name(19), "VT_UI4");
    ck_assert_str_eq(mq_vt_name(20), "VT_I8");
    ck_assert_str_eq(mq_vt_name(65), "VT_BLOB");
    ck_assert_str_eq(mq_vt_name(1), "VT_NULL");
    ck_assert_uint_eq(mq_info_prop_parse("PROPID_MGMT_QUEUE_NEXTHOPS", 0)->vt, 0x101f);
    ck_assert_uint_eq(mq_info_prop_parse("EOD_LAST_ACK", 0)->vt, MSRPC_VT_BLOB);
}
END_TEST

START_TEST(queue_format_decoding)
{
    /* DIRECT with a journal suffix; PRIVATE; an invalid type */
    sl_buf b;
    sl_buf_init(&b);
    ndr_wr w;
    rpc_ndr_wr_init(&w, &b);
    rpc_ndr_put_u8(&w, 3);
    rpc_ndr_put_u8(&w, 1);
    rpc_ndr_put_u16(&w, 0);
    rpc_ndr_put_u8(&w, 3);
    rpc_ndr_put_ref(&w);
    rpc_ndr_put_wstring(&w, "OS:.\\private$\\q");
    ndr_rd r;
    rpc_ndr_rd_init(&r, b.data, b.len, 1);
    char out[300];
    rpc_msrpc_read_queue_format(NULL, &r, out, sizeof out);
    ck_assert_int_eq(r.err, 0);
    ck_assert_str_eq(out, "DIRECT=OS:.\\private$\\q;journal");
    sl_buf_free(&b);
    sl_buf_init(&b);
    rpc_ndr_wr_init(&w, &b);
    rpc_ndr_put_u8(&w, 2);
    rpc_ndr_put_u8(&w, 0);
    rpc_ndr_put_u16(&w, 0);
    rpc_ndr_put_u8(&w, 2);
    uint8_t g[16];
    rpc_uuid_parse("fdb3a030-065f-11d1-bb9b-00a024ea5525", g);
    rpc_ndr_wr_align(&w, 4);
    rpc_ndr_put_bytes(&w, g, 16);
    rpc_ndr_put_u32(&w, 0x1a);
    rpc_ndr_rd_init(&r, b.data, b.len, 1);
    rpc_msrpc_read_queue_format(NULL, &r, out, sizeof out);
    ck_assert_int_eq(r.err, 0);
    ck_assert_str_eq(out, "PRIVATE=fdb3a030-065f-11d1-bb9b-00a024ea5525\\0000001a");
    b.data[0] = 9;
    b.data[4] = 9;
    rpc_ndr_rd_init(&r, b.data, b.len, 1);
    rpc_msrpc_read_queue_format(NULL, &r, out, sizeof out);
    ck_assert_int_eq(r.err, 1);
    /* the discriminant must repeat the type */
    b.data[0] = 2;
    b.data[4] = 3;
    rpc_ndr_rd_init(&r, b.data, b.len, 1);
    rpc_msrpc_read_queue_format(NULL, &r, out, sizeof out);
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
