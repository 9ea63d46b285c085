/* test_login.c - unit tests for the node's password logins (src/node/login.c): a fast hash,
 * or no verifier, answered at once; a slow one answered later from the verifier's thread, with
 * the access module's texts; the verifier's bound refusing unchecked; a cancelled check never
 * answered; a password changed while it was checked refused.
 */
#include <check.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access/access.h"
#include "access/verifier.h"
#include "node/login.h"
#include "node/node.h"

static acc_db *A;
static sl_node N;
static char err[512];

static struct {
    int n;
    sl_err e;
    char user[64];
    char why[512];
} got;

static void done(void *ctx, sl_err e, const acc_user *u, const char *why)
{
    ck_assert_ptr_eq(ctx, &got);
    got.n++;
    got.e = e;
    snprintf(got.user, sizeof got.user, "%s", u ? u->name : "");
    snprintf(got.why, sizeof got.why, "%s", why);
}

static void setup(void)
{
    A = acc_new();
    memset(&N, 0, sizeof N);
    N.acc = A;
    memset(&got, 0, sizeof got);
}

static void teardown(void)
{
    if (N.verifier)
        acc_verifier_free(N.verifier);
    acc_free(A);
}

static void add_user(const char *name, const char *password, acc_hash algo)
{
    acc_set_default_hash(A, algo);
    acc_user_def d = {.name = name, .password = password, .password_len = strlen(password)};
    ck_assert_int_eq(acc_user_put(A, &d, NULL, err, sizeof err), SL_OK);
}

static node_login *login(const char *name, const char *pw)
{
    return node_login_start(&N, name, strlen(name), (const uint8_t *)pw, strlen(pw), 1, done, &got);
}

/* Wait (bounded) for the verifier's fd and deliver, until `want` answers came. */
static void deliver_until(int want)
{
    for (int i = 0; i < 200 && got.n < want; i++) {
        struct pollfd p = {.fd = acc_verifier_fd(N.verifier), .events = POLLIN};
        if (poll(&p, 1, 50) > 0)
            acc_verifier_run_done(N.verifier);
    }
    ck_assert_int_eq(got.n, want);
}

START_TEST(answered_at_once)
{
    add_user("fast", "pw", ACC_HASH_SHA256);
    add_user("slow", "pw", ACC_HASH_ARGON2ID);
    ck_assert_ptr_null(login("fast", "pw"));
    ck_assert(got.n == 1 && got.e == SL_OK && !strcmp(got.user, "fast"));
    ck_assert_ptr_null(login("fast", "no"));
    ck_assert(got.n == 2 && got.e == SL_ERR_ACCESS_REFUSED && !got.user[0]);
    ck_assert_str_eq(got.why, "user 'fast' - invalid credentials");
    /* no verifier: a slow hash is checked inline */
    ck_assert_ptr_null(login("slow", "pw"));
    ck_assert(got.n == 3 && got.e == SL_OK && !strcmp(got.user, "slow"));
    /* with one, a fast hash still is */
    N.verifier = acc_verifier_new(1);
    ck_assert_ptr_null(login("fast", "pw"));
    ck_assert(got.n == 4 && got.e == SL_OK);
}
END_TEST

START_TEST(slow_on_the_verifier)
{
    add_user("slow", "pw", ACC_HASH_ARGON2ID);
    N.verifier = acc_verifier_new(1);
    node_login *l = login("slow", "pw");
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(got.n, 0);
    /* the bound: refused unchecked, at once */
    ck_assert_ptr_null(login("slow", "pw"));
    ck_assert(got.n == 1 && got.e == SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(got.why,
                     "user 'slow' - too many slow password checks waiting (1); refused unchecked");
    deliver_until(2);
    ck_assert(got.e == SL_OK && !strcmp(got.user, "slow"));
    /* a wrong one */
    ck_assert_ptr_nonnull(login("slow", "nope"));
    deliver_until(3);
    ck_assert_int_eq(got.e, SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(got.why, "user 'slow' - invalid credentials");
    /* the password changed while the old one was checked: refused */
    ck_assert_ptr_nonnull(login("slow", "pw"));
    add_user("slow", "new", ACC_HASH_ARGON2ID);
    deliver_until(4);
    ck_assert_int_eq(got.e, SL_ERR_ACCESS_REFUSED);
}
END_TEST

START_TEST(cancelled_never_answered)
{
    add_user("slow", "pw", ACC_HASH_ARGON2ID);
    N.verifier = acc_verifier_new(2);
    node_login *l = login("slow", "pw");
    ck_assert_ptr_nonnull(l);
    node_login_cancel(l);
    for (int i = 0; i < 200 && acc_verifier_pending(N.verifier) > 0; i++) {
        struct pollfd p = {.fd = acc_verifier_fd(N.verifier), .events = POLLIN};
        if (poll(&p, 1, 50) > 0)
            acc_verifier_run_done(N.verifier);
    }
    ck_assert_uint_eq(acc_verifier_pending(N.verifier), 0);
    ck_assert_int_eq(got.n, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("login");
    TCase *tc = tcase_create("login");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, answered_at_once);
    tcase_add_test(tc, slow_on_the_verifier);
    tcase_add_test(tc, cancelled_never_answered);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
