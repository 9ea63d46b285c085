/* test_resolve.c - unit tests for src/link/resolve.c, the lookup threads of link host names:
 * answers come back on the caller's thread through the eventfd, a cancelled request's
 * callback is never called, the pending count goes back to zero, numeric names and names of
 * /etc/hosts resolve without a DNS server (nothing here leaves the machine), every address
 * of a name comes back once.
 */
#include <check.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "link/resolve.h"

typedef struct answer {
    int calls;
    unsigned n;
    char addr[64]; /* the first address */
    char all[LINK_RESOLVE_ADDRS * LINK_ADDR_LEN];
    char err[160];
} answer;

static void on_answer(void *ctx, const char (*addrs)[LINK_ADDR_LEN], unsigned n, const char *err)
{
    answer *a = ctx;
    a->calls++;
    a->n = n;
    ck_assert_uint_le(n, LINK_RESOLVE_ADDRS);
    snprintf(a->addr, sizeof a->addr, "%s", n ? addrs[0] : "");
    a->all[0] = 0;
    for (unsigned i = 0; i < n; i++) {
        for (unsigned j = 0; j < i; j++)
            ck_assert_str_ne(addrs[i], addrs[j]); /* each address once */
        strcat(a->all, addrs[i]);
        strcat(a->all, " ");
    }
    snprintf(a->err, sizeof a->err, "%s", n ? "" : err);
}

/* Deliver answers until nothing is pending (bounded: 10 s). */
static void run_until_idle(link_resolver *r)
{
    for (int i = 0; i < 100 && link_resolver_pending(r); i++) {
        struct pollfd p = {.fd = link_resolver_fd(r), .events = POLLIN};
        if (poll(&p, 1, 100) > 0)
            link_resolver_run_done(r);
    }
    ck_assert_uint_eq(link_resolver_pending(r), 0);
}

START_TEST(numeric_and_hosts_names_resolve)
{
    link_resolver *r = link_resolver_new();
    ck_assert_ptr_nonnull(r);
    answer a4 = {0}, a6 = {0}, lh = {0};
    ck_assert_ptr_nonnull(link_resolve(r, "127.0.0.7", on_answer, &a4));
    ck_assert_ptr_nonnull(link_resolve(r, "::1", on_answer, &a6));
    ck_assert_ptr_nonnull(link_resolve(r, "localhost", on_answer, &lh));
    ck_assert_uint_eq(link_resolver_pending(r), 3);
    run_until_idle(r);
    ck_assert_int_eq(a4.calls, 1);
    ck_assert_uint_eq(a4.n, 1);
    ck_assert_str_eq(a4.addr, "127.0.0.7");
    /* ::1 needs an IPv6 loopback (AI_ADDRCONFIG): an answer either way, never two */
    ck_assert_int_eq(a6.calls, 1);
    ck_assert_int_eq(lh.calls, 1);
    ck_assert_msg(!strcmp(lh.addr, "127.0.0.1") || !strcmp(lh.addr, "::1"), "localhost: %s %s",
                  lh.addr, lh.err);
    /* every address of the name comes back (both, where /etc/hosts gives localhost ::1 too) */
    ck_assert_msg(lh.n >= 1 && strstr(lh.all, "127.0.0.1 "), "localhost: %s", lh.all);
    link_resolver_free(r);
}
END_TEST

START_TEST(a_cancelled_request_is_never_answered)
{
    link_resolver *r = link_resolver_new();
    answer a = {0}, b = {0};
    link_resolve_req *q = link_resolve(r, "127.0.0.8", on_answer, &a);
    ck_assert_ptr_nonnull(q);
    link_resolve_cancel(q); /* before or while a thread has it: same outcome */
    ck_assert_ptr_nonnull(link_resolve(r, "127.0.0.9", on_answer, &b));
    run_until_idle(r);
    ck_assert_int_eq(a.calls, 0);
    ck_assert_int_eq(b.calls, 1);
    ck_assert_str_eq(b.addr, "127.0.0.9");
    link_resolver_free(r);
}
END_TEST

START_TEST(free_with_requests_outstanding)
{
    link_resolver *r = link_resolver_new();
    answer a = {0};
    for (int i = 0; i < 16; i++)
        ck_assert_ptr_nonnull(link_resolve(r, "127.0.0.10", on_answer, &a));
    link_resolver_free(r); /* joins the threads; undelivered answers are dropped */
    ck_assert_int_eq(a.calls, 0);
}
END_TEST

static Suite *resolve_suite(void)
{
    Suite *s = suite_create("resolve");
    TCase *tc = tcase_create("resolve");
    tcase_add_test(tc, numeric_and_hosts_names_resolve);
    tcase_add_test(tc, a_cancelled_request_is_never_answered);
    tcase_add_test(tc, free_with_requests_outstanding);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(resolve_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
