/* test_core_text.c - unit tests for core/'s text and byte helpers: UTF-16 <-> UTF-8 (utf16.c)
 * with its one input-check policy, little-endian readers and writers (le.h), hex (hex.c),
 * base64's two readers (base64.c) and the intrusive list macros (list.h).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/base64.h"
#include "core/hex.h"
#include "core/le.h"
#include "core/list.h"
#include "core/mem.h"
#include "core/utf16.h"

#define U(s) ((const uint8_t *)(s))

START_TEST(utf16_round_trips_every_plane)
{
    /* "aé€😀": 1, 2, 3 and 4 UTF-8 bytes; the last one a surrogate pair */
    const char *s = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    uint8_t w[32];
    ck_assert_int_eq(sl_utf8_to_utf16le(U(s), strlen(s), NULL), 5);
    ck_assert_int_eq(sl_utf8_to_utf16le(U(s), strlen(s), w), 5);
    static const uint8_t want[10] = {'a', 0, 0xe9, 0, 0xac, 0x20, 0x3d, 0xd8, 0x00, 0xde};
    ck_assert_mem_eq(w, want, 10);
    char out[32];
    ck_assert_int_eq(sl_utf16le_to_utf8(w, 10, out, sizeof out), (long)strlen(s));
    ck_assert_str_eq(out, s);
    /* the same units big endian */
    uint8_t be[10];
    for (int i = 0; i < 10; i += 2) {
        be[i] = w[i + 1];
        be[i + 1] = w[i];
    }
    ck_assert_int_eq(sl_utf16be_to_utf8(be, 10, out, sizeof out), (long)strlen(s));
    ck_assert_str_eq(out, s);
    sl_buf b;
    sl_buf_init(&b);
    sl_buf_append(&b, "x", 1);
    ck_assert_int_eq(sl_utf8_to_utf16le_buf(U(s), strlen(s), &b), 5);
    ck_assert_uint_eq(b.len, 11);
    ck_assert_mem_eq(b.data + 1, want, 10);
    sl_buf_free(&b);
    /* empty text: no units, an empty string */
    ck_assert_int_eq(sl_utf8_to_utf16le(U(""), 0, NULL), 0);
    ck_assert_int_eq(sl_utf16le_to_utf8(w, 0, out, 1), 0);
    ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(utf16_input_is_checked_by_one_policy)
{
    char out[16];
    /* odd length */
    ck_assert_int_eq(sl_utf16le_to_utf8(U("a\0b"), 3, out, sizeof out), -1);
    /* a lone low surrogate, a high one at the end, a high one before a non-surrogate */
    ck_assert_int_eq(sl_utf16le_to_utf8(U("\x00\xdc"), 2, out, sizeof out), -1);
    ck_assert_int_eq(sl_utf16le_to_utf8(U("a\0\x3d\xd8"), 4, out, sizeof out), -1);
    ck_assert_int_eq(sl_utf16le_to_utf8(U("\x3d\xd8"
                                          "a\0"),
                                        4, out, sizeof out),
                     -1);
    ck_assert_int_eq(sl_utf16be_to_utf8(U("\xdc\x00"), 2, out, sizeof out), -1);
    /* a NUL unit inside */
    ck_assert_int_eq(sl_utf16le_to_utf8(U("a\0\0\0b\0"), 6, out, sizeof out), -1);
    /* too long for the output with its NUL: "ab" needs 3 bytes */
    ck_assert_int_eq(sl_utf16le_to_utf8(U("a\0b\0"), 4, out, 2), -1);
    ck_assert_int_eq(sl_utf16le_to_utf8(U("a\0b\0"), 4, out, 3), 2);
    /* UTF-8 in: a bad lead, a cut sequence, an overlong form, a surrogate, past U+10FFFF */
    ck_assert_int_eq(sl_utf8_to_utf16le(U("\xff"), 1, NULL), -1);
    ck_assert_int_eq(sl_utf8_to_utf16le(U("\xe2\x82"), 2, NULL), -1);
    ck_assert_int_eq(sl_utf8_to_utf16le(U("\xc0\xaf"), 2, NULL), -1);
    ck_assert_int_eq(sl_utf8_to_utf16le(U("\xed\xa0\x80"), 3, NULL), -1);
    ck_assert_int_eq(sl_utf8_to_utf16le(U("\xf4\x90\x80\x80"), 4, NULL), -1);
    sl_buf b;
    sl_buf_init(&b);
    ck_assert_int_eq(sl_utf8_to_utf16le_buf(U("ok\xff"), 3, &b), -1);
    ck_assert_uint_eq(b.len, 0); /* nothing appended when refused */
    sl_buf_free(&b);
    /* sl_utf8_next: a refused sequence is skipped up to the byte that broke it */
    size_t i = 0;
    ck_assert_int_eq(sl_utf8_next(U("\xe2\x82"
                                    "a"),
                                  3, &i),
                     -1);
    ck_assert_uint_eq(i, 2);
    ck_assert_int_eq(sl_utf8_next(U("\xe2\x82"
                                    "a"),
                                  3, &i),
                     'a');
    ck_assert_uint_eq(i, 3);
    /* sl_utf8_valid: the same policy, a NUL byte being a code point */
    ck_assert(sl_utf8_valid(U("a\0\xc3\xa9\xf0\x9f\x98\x80"), 8));
    ck_assert(sl_utf8_valid(U(""), 0));
    ck_assert(!sl_utf8_valid(U("\xc0\x80"), 2));         /* overlong NUL */
    ck_assert(!sl_utf8_valid(U("\xed\xbf\xbf"), 3));     /* a surrogate */
    ck_assert(!sl_utf8_valid(U("\xf5\x80\x80\x80"), 4)); /* past U+10FFFF */
    ck_assert(!sl_utf8_valid(U("ab\xe2\x82"), 4));       /* cut short */
    ck_assert(!sl_utf8_valid(U("\x80"), 1));             /* a bare continuation */
}
END_TEST

START_TEST(little_endian_reads_and_writes)
{
    uint8_t p[8];
    sl_put_le16(p, 0x1234);
    ck_assert_mem_eq(p, "\x34\x12", 2);
    ck_assert_uint_eq(sl_le16(p), 0x1234);
    sl_put_le32(p, 0x89abcdefu);
    ck_assert_mem_eq(p, "\xef\xcd\xab\x89", 4);
    ck_assert_uint_eq(sl_le32(p), 0x89abcdefu);
    sl_put_le64(p, 0x0102030405060708ull);
    ck_assert_mem_eq(p, "\x08\x07\x06\x05\x04\x03\x02\x01", 8);
    ck_assert_uint_eq(sl_le64(p), 0x0102030405060708ull);
    sl_buf b;
    sl_buf_init(&b);
    sl_buf_put_le16(&b, 0xbeef);
    sl_buf_put_le32(&b, 7);
    sl_buf_put_le64(&b, UINT64_MAX - 1);
    ck_assert_uint_eq(b.len, 14);
    ck_assert_uint_eq(sl_le16(b.data), 0xbeef);
    ck_assert_uint_eq(sl_le32(b.data + 2), 7);
    ck_assert_uint_eq(sl_le64(b.data + 6), UINT64_MAX - 1);
    sl_buf_free(&b);
}
END_TEST

START_TEST(hex_both_ways_and_bad_digits)
{
    char s[9];
    uint8_t raw[4] = {0x00, 0x9f, 0xab, 0xff}, back[4];
    sl_hex(s, raw, 4);
    ck_assert_str_eq(s, "009fabff");
    ck_assert_int_eq(sl_unhex("009FabFF", 4, back), 0);
    ck_assert_mem_eq(back, raw, 4);
    ck_assert_int_eq(sl_unhex("00g0", 2, back), -1);
    ck_assert_int_eq(sl_unhex("0", 1, back), -1); /* the NUL is not a digit */
    ck_assert_int_eq(sl_hex_nibble('7'), 7);
    ck_assert_int_eq(sl_hex_nibble('F'), 15);
    ck_assert_int_eq(sl_hex_nibble('G'), -1);
    ck_assert_int_eq(sl_hex_nibble(0), -1);
    ck_assert_int_eq(sl_hex_byte("7f"), 0x7f);
    ck_assert_int_eq(sl_hex_byte("x"), -1);
    ck_assert_int_eq(sl_hex_byte("7"), -1);
    ck_assert(sl_is_hex("0123456789abcdefABCDEF", 22));
    ck_assert(!sl_is_hex("12 4", 4));
    ck_assert(sl_is_hex("", 0));
}
END_TEST

START_TEST(guid_text_in_the_wire_layout)
{
    static const uint8_t want[16] = {0x30, 0xa0, 0xb3, 0xfd, 0x5f, 0x06, 0xd1, 0x11,
                                     0xbb, 0x9b, 0x00, 0xa0, 0x24, 0xea, 0x55, 0x25};
    const char *t = "FDB3A030-065f-11d1-bb9b-00a024ea5525";
    uint8_t g[16];
    char s[37];
    ck_assert_int_eq(sl_guid_parse(t, 36, g), 0);
    ck_assert_mem_eq(g, want, 16);
    sl_guid_str(g, s);
    ck_assert_str_eq(s, "fdb3a030-065f-11d1-bb9b-00a024ea5525");
    ck_assert_int_eq(sl_guid_parse(t, 35, g), -1);                                  /* one short */
    ck_assert_int_eq(sl_guid_parse("fdb3a030065f11d1bb9b00a024ea5525", 32, g), -1); /* no dashes */
    ck_assert_int_eq(sl_guid_parse("fdb3a030-065f-11d1-bb9b-00a024ea552z", 36, g), -1);
    ck_assert_int_eq(sl_guid_parse("fdb3a030-065f-11d1-bb9b+00a024ea5525", 36, g), -1);
}
END_TEST

START_TEST(base64_readers_and_their_padding)
{
    size_t n;
    char *e = sl_base64_encode(U("ab"), 2, &n);
    ck_assert_str_eq(e, "YWI=");
    ck_assert_uint_eq(n, 4);
    sl_free(e);
    e = sl_base64_encode(U("\xff\xfe\xfd"), 3, NULL);
    ck_assert_str_eq(e, "//79");
    sl_free(e);
    uint8_t out[16];
    /* lenient: whitespace skipped, padding optional, at most two '=' and only at the end */
    ck_assert_int_eq(sl_base64_decode("YW\nI=", 5, out), 2);
    ck_assert_mem_eq(out, "ab", 2);
    ck_assert_int_eq(sl_base64_decode("YWI", 3, out), 2);
    ck_assert_int_eq(sl_base64_decode("YQ===", 5, out), -1);
    ck_assert_int_eq(sl_base64_decode("YQ=a", 4, out), -1);
    ck_assert_int_eq(sl_base64_decode("Y!I=", 4, out), -1);
    /* strict: length a multiple of four, '=' only in the last two places, no whitespace */
    ck_assert_int_eq(sl_base64_decode_strict("YWI=", 4, out, sizeof out), 2);
    ck_assert_mem_eq(out, "ab", 2);
    ck_assert_int_eq(sl_base64_decode_strict("YQ==", 4, out, sizeof out), 1);
    ck_assert_int_eq(sl_base64_decode_strict("", 0, out, sizeof out), 0);
    ck_assert_int_eq(sl_base64_decode_strict("YWI", 3, out, sizeof out), -1);
    ck_assert_int_eq(sl_base64_decode_strict("Y=I=", 4, out, sizeof out), -1);
    ck_assert_int_eq(sl_base64_decode_strict("YW I", 4, out, sizeof out), -1);
    ck_assert_int_eq(sl_base64_decode_strict("YWJjZA==", 8, out, 3), -1); /* cap */
}
END_TEST

typedef struct item {
    int v;
    struct item *prev, *next;
} item;

static int list_values(const item *head, int *out)
{
    int n = 0;
    for (const item *i = head; i; i = i->next) {
        out[n++] = i->v;
        if (i->next)
            ck_assert_ptr_eq(i->next->prev, i);
    }
    return n;
}

START_TEST(list_push_unlink_and_tail)
{
    item it[4] = {{.v = 0}, {.v = 1}, {.v = 2}, {.v = 3}};
    item *head = NULL, *tail = NULL;
    int got[4];
    for (int i = 0; i < 3; i++)
        SL_LIST_PUSH(head, &it[i], prev, next);
    ck_assert_int_eq(list_values(head, got), 3);
    ck_assert_int_eq(got[0], 2);
    ck_assert_int_eq(got[2], 0);
    ck_assert_ptr_null(head->prev);
    SL_LIST_UNLINK(head, &it[1], prev, next); /* the middle */
    ck_assert_int_eq(list_values(head, got), 2);
    ck_assert_int_eq(got[1], 0);
    SL_LIST_UNLINK(head, &it[2], prev, next); /* the first */
    ck_assert_ptr_eq(head, &it[0]);
    ck_assert_ptr_null(head->prev);
    SL_LIST_UNLINK(head, &it[0], prev, next); /* the last one */
    ck_assert_ptr_null(head);

    for (int i = 0; i < 4; i++)
        SL_LIST_APPEND_TAIL(head, tail, &it[i], prev, next);
    ck_assert_int_eq(list_values(head, got), 4);
    ck_assert_int_eq(got[0], 0);
    ck_assert_ptr_eq(tail, &it[3]);
    SL_LIST_UNLINK_TAIL(head, tail, &it[3], prev, next);
    ck_assert_ptr_eq(tail, &it[2]);
    ck_assert_ptr_null(tail->next);
    SL_LIST_UNLINK_TAIL(head, tail, &it[0], prev, next);
    ck_assert_ptr_eq(head, &it[1]);
    SL_LIST_UNLINK_TAIL(head, tail, &it[1], prev, next);
    SL_LIST_UNLINK_TAIL(head, tail, &it[2], prev, next);
    ck_assert_ptr_null(head);
    ck_assert_ptr_null(tail);
}
END_TEST

static Suite *text_suite(void)
{
    Suite *s = suite_create("core_text");
    TCase *tc = tcase_create("text");
    tcase_add_test(tc, utf16_round_trips_every_plane);
    tcase_add_test(tc, utf16_input_is_checked_by_one_policy);
    tcase_add_test(tc, little_endian_reads_and_writes);
    tcase_add_test(tc, hex_both_ways_and_bad_digits);
    tcase_add_test(tc, guid_text_in_the_wire_layout);
    tcase_add_test(tc, base64_readers_and_their_padding);
    tcase_add_test(tc, list_push_unlink_and_tail);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(text_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
