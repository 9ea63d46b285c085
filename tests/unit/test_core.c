/* test_core.c - unit tests for src/core/ parts that have no other home: the ordered set
 * (oset.c) against a plain sorted array, over a seeded random schedule of inserts and
 * removes (a failure repeats), checking order, ranks, seeks and the treap's invariants.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/oset.h"

typedef struct elem {
    char name[16];
    int in;
    sl_onode node;
} elem;

enum { NE = 2000 };
static elem E[NE];

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* heap order, sizes, parent links; returns the subtree size */
static unsigned check_tree(const sl_onode *n, const sl_onode *parent)
{
    if (!n)
        return 0;
    ck_assert_ptr_eq(n->parent, parent);
    if (parent)
        ck_assert_uint_le(parent->prio, n->prio);
    unsigned sz = 1 + check_tree(n->left, n) + check_tree(n->right, n);
    ck_assert_uint_eq(n->size, sz);
    return sz;
}

START_TEST(oset_agrees_with_sorted_array)
{
    sl_oset s = {0};
    unsigned seed = 20261201;
    for (int i = 0; i < NE; i++) {
        snprintf(E[i].name, sizeof E[i].name, "q%d", (i * 7919) % NE);
        E[i].in = 0;
    }
    static const char *want[NE];
    for (int step = 0; step < 20000; step++) {
        elem *e = &E[rand_r(&seed) % NE];
        if (e->in)
            sl_oset_remove(&s, &e->node);
        else
            sl_oset_insert(&s, &e->node, e->name, strlen(e->name));
        e->in = !e->in;
        if (step % 997 != 0)
            continue;
        size_t n = 0;
        for (int i = 0; i < NE; i++)
            if (E[i].in)
                want[n++] = E[i].name;
        qsort(want, n, sizeof *want, cmp_names);
        ck_assert_uint_eq(sl_oset_count(&s), n);
        ck_assert_uint_eq(check_tree(s.root, NULL), n);
        size_t i = 0;
        for (sl_onode *o = sl_oset_first(&s); o; o = sl_oset_next(o), i++) {
            ck_assert_str_eq(SL_ONODE_OWNER(o, elem, node)->name, want[i]);
            ck_assert_ptr_eq(sl_oset_select(&s, i), o);
        }
        ck_assert_uint_eq(i, n);
        for (sl_onode *o = sl_oset_last(&s); o; o = sl_oset_prev(o))
            ck_assert_str_eq(SL_ONODE_OWNER(o, elem, node)->name, want[--i]);
        ck_assert_ptr_null(sl_oset_select(&s, n));
        /* seek: every key, present or not, lands on the first name >= (or >) it */
        for (int k = 0; k < 50; k++) {
            char key[16];
            snprintf(key, sizeof key, "q%d", rand_r(&seed) % (NE + 100));
            for (int after = 0; after < 2; after++) {
                sl_onode *o = sl_oset_seek(&s, key, strlen(key), after);
                size_t j = 0;
                while (j < n && (after ? strcmp(want[j], key) <= 0 : strcmp(want[j], key) < 0))
                    j++;
                if (j == n)
                    ck_assert_ptr_null(o);
                else
                    ck_assert_str_eq(SL_ONODE_OWNER(o, elem, node)->name, want[j]);
            }
        }
    }
}
END_TEST

static Suite *core_suite(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("oset");
    tcase_add_test(tc, oset_agrees_with_sorted_array);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(core_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
