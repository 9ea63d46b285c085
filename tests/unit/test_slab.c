/* test_slab.c - unit tests for the small-object allocator (src/core/slab.c): blocks of every
 * class are distinct, aligned and keep what is written in them; freed blocks are reused; a
 * chunk whose blocks are all free goes back to the system when another has room; larger
 * requests are refused (the caller uses malloc). Mid-size blocks (SL_SLAB_MAX..SL_MID_MAX) have
 * 16-byte classes with no malloc waste, keep their contents, come back from the free list of
 * their class, and the lists never hold more than SL_MID_CACHE bytes. Under ASan the
 * allocator is malloc itself: the same checks hold, except that nothing is cached. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/slab.h"

START_TEST(classes_and_sizes)
{
    ck_assert_uint_eq(sl_slab_class(1), 2);
    ck_assert_uint_eq(sl_slab_size(sl_slab_class(1)), 16);
    ck_assert_uint_eq(sl_slab_size(sl_slab_class(82)), 88);
    ck_assert_uint_eq(sl_slab_size(sl_slab_class(88)), 88);
    ck_assert_uint_eq(sl_slab_size(sl_slab_class(SL_SLAB_MAX)), SL_SLAB_MAX);
    ck_assert_uint_eq(sl_slab_class(SL_SLAB_MAX + 1), 0);
    unsigned cls;
    ck_assert_ptr_null(sl_slab_alloc(SL_SLAB_MAX + 1, &cls));
}
END_TEST

START_TEST(blocks_are_distinct_and_reused)
{
    enum { N = 50000 };
    static uint8_t *v[N];
    static unsigned c[N];
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (size_t)(i % 60) * 8;
        v[i] = sl_slab_alloc(n, &c[i]);
        ck_assert_ptr_nonnull(v[i]);
        ck_assert_uint_eq((uintptr_t)v[i] % 8, 0);
        memset(v[i], (int)(i & 0xff), n);
    }
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (size_t)(i % 60) * 8;
        for (size_t k = 0; k < n; k++)
            if (v[i][k] != (uint8_t)(i & 0xff))
                ck_abort_msg("block %d overwritten at byte %zu", i, k);
    }
    sl_slab_stats st;
    sl_slab_get_stats(&st);
    size_t used = st.used_bytes;
    ck_assert_uint_gt(used, 0);
    /* free every other block, allocate them again: the same amount of memory */
    for (int i = 0; i < N; i += 2)
        sl_slab_free(v[i], c[i]);
    for (int i = 0; i < N; i += 2)
        v[i] = sl_slab_alloc(16 + (size_t)(i % 60) * 8, &c[i]);
    sl_slab_get_stats(&st);
    ck_assert_uint_eq(st.used_bytes, used);
    for (int i = 0; i < N; i++)
        sl_slab_free(v[i], c[i]);
    sl_slab_get_stats(&st);
    ck_assert_uint_eq(st.used_bytes, 0);
    /* at most one chunk kept per class once everything is free */
    ck_assert_uint_le(st.chunks, 60);
}
END_TEST

START_TEST(empty_chunks_go_back)
{
    enum { N = 20000 };
    static void *v[N];
    unsigned cls = 0;
    for (int i = 0; i < N; i++)
        v[i] = sl_slab_alloc(88, &cls);
    sl_slab_stats st;
    sl_slab_get_stats(&st);
    size_t peak = st.chunks;
    for (int i = 0; i < N; i++)
        sl_slab_free(v[i], cls);
    sl_slab_get_stats(&st);
#if !SL_ASAN
    ck_assert_uint_ge(peak, 20);     /* 20,000 x 88 B take about 27 chunks of 64 KiB */
    ck_assert_uint_le(st.chunks, 1); /* all but the one kept for the class went back */
#else
    (void)peak;
#endif
}
END_TEST

START_TEST(mid_classes_and_sizes)
{
    unsigned cls = 0;
    ck_assert_ptr_null(sl_mid_alloc(SL_SLAB_MAX, &cls));
    ck_assert_ptr_null(sl_mid_alloc(SL_MID_MAX + 1, &cls));
    size_t sizes[] = {SL_SLAB_MAX + 1, 1000, 1032, 1033, 1130, 2048, SL_MID_MAX};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint8_t *p = sl_mid_alloc(sizes[i], &cls);
        ck_assert_ptr_nonnull(p);
        ck_assert(sl_is_mid(cls));
        ck_assert_uint_eq(sl_slab_size(sl_slab_class(16)), 16); /* slab classes unaffected */
        ck_assert(!sl_is_mid(sl_slab_class(SL_SLAB_MAX)));
        size_t size = sl_mid_size(cls);
        ck_assert_uint_ge(size, sizes[i]);
        ck_assert_uint_lt(size, sizes[i] + 16);
        ck_assert_uint_eq((size + 8) % 16, 0); /* with malloc's header: a 16-byte multiple */
        ck_assert_uint_eq((uintptr_t)p % 8, 0);
        memset(p, 0x5a, size);
        sl_mid_free(p, cls);
    }
}
END_TEST

START_TEST(mid_blocks_reused_and_cache_bounded)
{
    enum { N = 4000 };
    static uint8_t *v[N];
    static unsigned c[N];
    unsigned cls;
    uint8_t *a = sl_mid_alloc(1130, &cls);
    sl_mid_free(a, cls);
    uint8_t *b = sl_mid_alloc(1130, &cls);
#if !SL_ASAN
    ck_assert_ptr_eq(a, b); /* the freed block of that size, from its free list */
#endif
    sl_mid_free(b, cls);
    for (int i = 0; i < N; i++) {
        v[i] = sl_mid_alloc(1130, &c[i]);
        memset(v[i], (int)(i & 0xff), 1130);
    }
    for (int i = 0; i < N; i++)
        for (size_t k = 0; k < 1130; k++)
            if (v[i][k] != (uint8_t)(i & 0xff))
                ck_abort_msg("mid block %d overwritten at byte %zu", i, k);
    for (int i = 0; i < N; i++)
        sl_mid_free(v[i], c[i]);
    /* 4,000 x 1.1 KiB is more than the cache may hold: the rest went back to malloc */
    ck_assert_uint_le(sl_mid_cached_bytes(), SL_MID_CACHE);
#if !SL_ASAN
    ck_assert_uint_gt(sl_mid_cached_bytes(), SL_MID_CACHE - sl_mid_size(c[0]));
#else
    ck_assert_uint_eq(sl_mid_cached_bytes(), 0);
#endif
}
END_TEST

int main(void)
{
    Suite *s = suite_create("slab");
    TCase *tc = tcase_create("slab");
    tcase_add_test(tc, classes_and_sizes);
    tcase_add_test(tc, blocks_are_distinct_and_reused);
    tcase_add_test(tc, empty_chunks_go_back);
    tcase_add_test(tc, mid_classes_and_sizes);
    tcase_add_test(tc, mid_blocks_reused_and_cache_bounded);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
