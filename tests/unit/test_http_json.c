/* test_http_json.c - unit tests for the HTTP API's JSON <-> AMQP table conversion
 * (src/mgmt/http_json.c): nested and empty objects and arrays survive a round trip, and a
 * value with no AMQP form is refused with a message rather than written half.
 */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgmt/mgmt_internal.h"

/* JSON text -> AMQP table -> JSON text, compact with sorted keys. */
static char *round_trip(const char *text)
{
    json_error_t jerr;
    json_t *in = json_loads(text, 0, &jerr);
    ck_assert_msg(in != NULL, "bad test JSON %s: %s", text, jerr.text);
    sl_buf tbl;
    char err[256] = "";
    int rc = defs_json_to_table(in, &tbl, err, sizeof err);
    json_decref(in);
    ck_assert_msg(rc == 0, "defs_json_to_table(%s): %s", text, err);
    json_t *out = defs_table_to_json((amqp_bytes){tbl.data, tbl.len});
    sl_buf_free(&tbl);
    ck_assert_ptr_nonnull(out);
    char *s = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(out);
    return s;
}

/* An empty nested object or array leaves its scratch buffer unallocated; fuzz_defs found
 * the offset fix-up adding 0 to a null pointer there (UBSan: applying zero offset). */
START_TEST(empty_nested_values)
{
    const char *cases[][2] = {
        {"{\"a\":{}}", "{\"a\":{}}"},
        {"{\"a\":[]}", "{\"a\":[]}"},
        {"{\"a\":[[],{}]}", "{\"a\":[[],{}]}"},
        {"{\"a\":{\"b\":{}},\"c\":[1]}", "{\"a\":{\"b\":{}},\"c\":[1]}"},
        {"{}", "{}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = round_trip(cases[i][0]);
        ck_assert_str_eq(got, cases[i][1]);
        free(got);
    }
}
END_TEST

START_TEST(nested_values_keep_types)
{
    char *got = round_trip("{\"s\":\"x\",\"i\":-7,\"t\":true,\"n\":null,\"o\":{\"l\":[\"y\",2]}}");
    ck_assert_str_eq(got, "{\"i\":-7,\"n\":null,\"o\":{\"l\":[\"y\",2]},\"s\":\"x\",\"t\":true}");
    free(got);
}
END_TEST

START_TEST(deep_nesting_refused)
{
    /* AMQP_TABLE_MAX_DEPTH (1024) is below jansson's own parse limit (2048) */
    static char text[16384];
    size_t n = 0;
    for (int i = 0; i < 1100; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "{\"a\":");
    n += (size_t)snprintf(text + n, sizeof text - n, "1");
    for (int i = 0; i < 1100; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "}");
    json_error_t jerr;
    json_t *in = json_loads(text, 0, &jerr);
    ck_assert_ptr_nonnull(in);
    sl_buf tbl;
    char err[256] = "";
    ck_assert_int_eq(defs_json_to_table(in, &tbl, err, sizeof err), -1);
    ck_assert_msg(err[0] != '\0', "refusal without a message");
    json_decref(in);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http_json");
    TCase *tc = tcase_create("tables");
    tcase_add_test(tc, empty_nested_values);
    tcase_add_test(tc, nested_values_keep_types);
    tcase_add_test(tc, deep_nesting_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
