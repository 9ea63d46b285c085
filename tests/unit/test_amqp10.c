/* test_amqp10.c - AMQP 1.0 bare messages and AMQP 0-9-1 messages converted both ways
 * (amqp/amqp10.h): a 0-9-1 message written as 1.0 and read back keeps its properties and
 * headers; the sections are laid out as the stream clients read them. */
#include <check.h>
#include <string.h>

#include "amqp/amqp10.h"
#include "amqp/table.h"

static amqp_bytes B(const char *s)
{
    return (amqp_bytes){(const uint8_t *)s, strlen(s)};
}

static int eq(amqp_bytes a, const char *s)
{
    return a.len == strlen(s) && !memcmp(a.p, s, a.len);
}

START_TEST(a_091_message_read_back_keeps_its_properties_and_headers)
{
    sl_buf hdr, raw, out, hdrs, body;
    sl_buf_init(&hdr);
    sl_buf_init(&raw);
    sl_buf_init(&out);
    sl_buf_init(&hdrs);
    sl_buf_init(&body);
    size_t m = amqp_tbl_begin(&hdr);
    amqp_tbl_put_str(&hdr, "colour", B("blue"));
    amqp_tbl_put_int(&hdr, "n", -70000);
    amqp_tbl_put_long(&hdr, "big", 1LL << 40);
    amqp_tbl_put_bool(&hdr, "ok", 1);
    amqp_tbl_put_timestamp(&hdr, "at", 1700000000);
    size_t nested = amqp_tbl_put_table_begin(&hdr, "nested"); /* no 1.0 counterpart: left out */
    amqp_tbl_put_int(&hdr, "x", 1);
    amqp_tbl_end(&hdr, nested);
    amqp_tbl_end(&hdr, m);
    amqp_basic_props p = {
        .flags = AMQP_P_CONTENT_TYPE | AMQP_P_CONTENT_ENCODING | AMQP_P_HEADERS |
                 AMQP_P_DELIVERY_MODE | AMQP_P_PRIORITY | AMQP_P_CORRELATION_ID | AMQP_P_REPLY_TO |
                 AMQP_P_MESSAGE_ID | AMQP_P_TIMESTAMP | AMQP_P_TYPE | AMQP_P_USER_ID |
                 AMQP_P_APP_ID,
        .content_type = B("text/plain"),
        .content_encoding = B("gzip"),
        .headers = {sl_buf_head(&hdr) + 4, sl_buf_unread(&hdr) - 4},
        .delivery_mode = 2,
        .priority = 5,
        .correlation_id = B("corr-1"),
        .reply_to = B("replies"),
        .message_id = B("m-1"),
        .timestamp = 1700000001,
        .type = B("order"),
        .user_id = B("guest"),
        .app_id = B("shop"),
    };
    amqp_props_encode(&raw, &p);
    ck_assert_int_eq(amqp10_from_091(sl_buf_head(&raw), sl_buf_unread(&raw),
                                     (const uint8_t *)"hello", 5, B("ex"), B("rk"), &out),
                     0);
    /* the header section first, as the stream clients read it: 0x00 0x53 0x70 */
    const uint8_t *o = sl_buf_head(&out);
    ck_assert(o[0] == 0x00 && o[1] == 0x53 && o[2] == 0x70);
    amqp_basic_props q;
    memset(&q, 0, sizeof q);
    ck_assert_int_eq(amqp10_to_091(o, sl_buf_unread(&out), &q, &hdrs, &body), 0);
    ck_assert(sl_buf_unread(&body) == 5 && !memcmp(sl_buf_head(&body), "hello", 5));
    ck_assert_int_eq(q.delivery_mode, 2);
    ck_assert_int_eq(q.priority, 5);
    ck_assert(eq(q.content_type, "text/plain") && eq(q.content_encoding, "gzip"));
    ck_assert(eq(q.correlation_id, "corr-1") && eq(q.reply_to, "replies"));
    ck_assert(eq(q.message_id, "m-1") && eq(q.user_id, "guest"));
    ck_assert_uint_eq(q.timestamp, 1700000001);
    amqp_value v;
    amqp_bytes t = {sl_buf_head(&hdrs), sl_buf_unread(&hdrs)};
    ck_assert(amqp_table_get(t, "colour", &v) && v.tag == 'S' && eq(v.v.s, "blue"));
    int64_t i;
    ck_assert(amqp_table_get(t, "n", &v) && amqp_value_int(&v, &i) && i == -70000);
    ck_assert(amqp_table_get(t, "big", &v) && amqp_value_int(&v, &i) && i == 1LL << 40);
    ck_assert(amqp_table_get(t, "ok", &v) && v.tag == 't' && v.v.b);
    ck_assert(amqp_table_get(t, "at", &v) && v.tag == 'T' && v.v.ts == 1700000000);
    ck_assert(!amqp_table_get(t, "nested", &v));
    sl_buf_free(&hdr);
    sl_buf_free(&raw);
    sl_buf_free(&out);
    sl_buf_free(&hdrs);
    sl_buf_free(&body);
}
END_TEST

START_TEST(sections_with_nothing_to_say_are_left_out)
{
    sl_buf out;
    sl_buf_init(&out);
    ck_assert_int_eq(amqp10_from_091(NULL, 0, (const uint8_t *)"x", 1, B(""), B("q"), &out), 0);
    const uint8_t *o = sl_buf_head(&out);
    size_t n = sl_buf_unread(&out);
    /* message annotations (x-exchange "", x-routing-key "q"), then one data section */
    ck_assert(o[0] == 0x00 && o[1] == 0x53 && o[2] == 0x72 && o[3] == 0xd1);
    static const uint8_t data[] = {0x00, 0x53, 0x75, 0xa0, 0x01, 'x'};
    ck_assert_uint_ge(n, sizeof data);
    ck_assert(!memcmp(o + n - sizeof data, data, sizeof data));
    /* undecodable properties: -1 and nothing appended */
    size_t before = sl_buf_unread(&out);
    static const uint8_t bad[] = {0xff, 0xff};
    ck_assert_int_eq(amqp10_from_091(bad, sizeof bad, (const uint8_t *)"x", 1, B(""), B("q"), &out),
                     -1);
    ck_assert_uint_eq(sl_buf_unread(&out), before);
    sl_buf_free(&out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("amqp10");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, a_091_message_read_back_keeps_its_properties_and_headers);
    tcase_add_test(tc, sections_with_nothing_to_say_are_left_out);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
