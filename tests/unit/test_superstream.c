/* test_superstream.c - unit tests for super streams in the model (src/qm/superstream.c):
 * the partitions of an exchange in RabbitMQ 3.13's order (x-stream-partition-order as an
 * integer of any width or a decimal string, unordered bindings last, ties by key then name;
 * only streams), and the streams a routing key reaches (direct bindings, exchange-to-exchange
 * bindings, the alternate exchange, the default exchange without side effects).
 *
 * Each test builds a fresh node with one vhost "/" and a temp directory for the streams' logs.
 */
#define _XOPEN_SOURCE 700
#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amqp/table.h"
#include "core/buf.h"
#include "core/mem.h"
#include "qm/qm.h"
#include "qm/superstream.h"

static qm_node *N;
static qm_vhost *V;
static char D[] = "/tmp/sluice-test-superstream-XXXXXX";
static char dir[sizeof D];
static char err[512];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static void setup(void)
{
    memcpy(dir, D, sizeof D);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    N = qm_node_new("test");
    N->stream_dir = strdup(dir);
    V = qm_vhost_create(N, "/");
}

static void teardown(void)
{
    qm_node_free(N);
    N = NULL;
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static qm_queue *queue(const char *name, int stream)
{
    sl_buf a;
    sl_buf_init(&a);
    if (stream)
        amqp_tbl_put_str(&a, "x-queue-type", amqp_cstr("stream"));
    qm_queue_decl d = {.name = name,
                       .name_len = strlen(name),
                       .durable = 1,
                       .arguments = {sl_buf_head(&a), sl_buf_unread(&a)}};
    qm_queue *q = NULL;
    ck_assert_msg(qm_queue_declare(V, &d, &q, NULL, err, sizeof err) == SL_OK, "%s", err);
    sl_buf_free(&a);
    return q;
}

static qm_exchange *exchange(const char *name, const char *alternate)
{
    sl_buf a;
    sl_buf_init(&a);
    if (alternate)
        amqp_tbl_put_str(&a, "alternate-exchange", amqp_cstr(alternate));
    qm_exchange_decl d = {
        name, strlen(name), QM_EX_DIRECT, 1, 0, 0, {sl_buf_head(&a), sl_buf_unread(&a)}};
    qm_exchange *x = NULL;
    ck_assert_msg(qm_exchange_declare(V, &d, &x, err, sizeof err) == SL_OK, "%s", err);
    sl_buf_free(&a);
    return x;
}

/* Bind x to q with key; order_kind: 0 none, 'l' a long, 'b' a short-short, 'S' a string. */
static void bind(qm_exchange *x, qm_queue *q, const char *key, int order_kind, int64_t order,
                 const char *order_str)
{
    sl_buf a;
    sl_buf_init(&a);
    if (order_kind == 'l')
        amqp_tbl_put_long(&a, QM_SUPERSTREAM_ORDER_ARG, order);
    else if (order_kind == 'b') {
        amqp_value v = {.tag = 'b', .v.i = order};
        amqp_tbl_put_value(&a, amqp_cstr(QM_SUPERSTREAM_ORDER_ARG), &v);
    } else if (order_kind == 'S')
        amqp_tbl_put_str(&a, QM_SUPERSTREAM_ORDER_ARG, amqp_cstr(order_str));
    ck_assert_msg(qm_bind_queue(x, q, amqp_cstr(key),
                                (amqp_bytes){sl_buf_head(&a), sl_buf_unread(&a)}, err,
                                sizeof err) == SL_OK,
                  "%s", err);
    sl_buf_free(&a);
}

/* The names of qs, joined by spaces (freed qs). */
static const char *names(qm_queue **qs, size_t n)
{
    static char out[512];
    out[0] = 0;
    for (size_t i = 0; i < n; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "", qs[i]->name);
    sl_free(qs);
    return out;
}

/* The names of the streams key reaches through x. */
static const char *route_names(qm_exchange *x, const char *key)
{
    size_t n = 0;
    qm_queue **qs = qm_superstream_route(x, amqp_cstr(key), &n);
    return names(qs, n);
}

START_TEST(partitions_in_rabbitmqs_order_streams_only)
{
    qm_exchange *x = exchange("ss", NULL), *other = exchange("other", NULL);
    qm_queue *p0 = queue("p0", 1), *p1 = queue("p1", 1), *p2 = queue("p2", 1), *p3 = queue("p3", 1),
             *u1 = queue("u1", 1), *u2 = queue("u2", 1), *bad = queue("bad", 1),
             *classic = queue("classic", 0);
    /* bound in an order that is none of the answers */
    bind(x, u2, "a", 0, 0, NULL);
    bind(x, p2, "k2", 'l', 2, NULL);
    bind(x, bad, "a", 'S', 0, "2x"); /* not a number: as if unordered */
    bind(x, p0, "k0", 'S', 0, "0");  /* the HTTP helper's way */
    bind(x, classic, "k1", 'l', 1, NULL);
    bind(x, p3, "k3", 'S', 0, "+3");
    bind(x, p1, "k1", 'b', 1, NULL);
    bind(x, u1, "b", 0, 0, NULL);
    ck_assert_int_eq(
        qm_bind_exchange(x, other, amqp_cstr("e"), (amqp_bytes){NULL, 0}, err, sizeof err), SL_OK);
    size_t n = 0;
    qm_queue **qs = qm_superstream_partitions(x, &n);
    ck_assert_uint_eq(n, 7);
    /* ordered first; then the unordered by key ("a" < "b"), a tie by name */
    ck_assert_str_eq(names(qs, n), "p0 p1 p2 p3 bad u2 u1");
    /* a stream bound twice is listed twice, as RabbitMQ lists each binding */
    bind(x, p0, "again", 'l', 9, NULL);
    qs = qm_superstream_partitions(x, &n);
    ck_assert_str_eq(names(qs, n), "p0 p1 p2 p3 p0 bad u2 u1");
    /* no bindings to streams: none */
    qs = qm_superstream_partitions(other, &n);
    ck_assert_ptr_null(qs);
    ck_assert_uint_eq(n, 0);
    /* a stream deleted leaves the list with its binding */
    uint64_t count;
    ck_assert_int_eq(qm_queue_delete(p1, 0, &count, err, sizeof err), SL_OK);
    qs = qm_superstream_partitions(x, &n);
    ck_assert_str_eq(names(qs, n), "p0 p2 p3 p0 bad u2 u1");
}
END_TEST

START_TEST(order_argument_forms)
{
    qm_exchange *x = exchange("ss", NULL);
    qm_queue *q = queue("s", 1);
    static const struct {
        int kind;
        int64_t v;
        const char *s;
        int ok;
        int64_t want;
    } cases[] = {
        {'l', -7, NULL, 1, -7}, {'b', 5, NULL, 1, 5},
        {'S', 0, "12", 1, 12},  {'S', 0, "-1", 1, -1},
        {'S', 0, "+4", 1, 4},   {'S', 0, "", 0, 0},
        {'S', 0, "-", 0, 0},    {'S', 0, "1 ", 0, 0},
        {'S', 0, "0x1", 0, 0},  {'S', 0, "99999999999999999999999", 0, 0},
        {0, 0, NULL, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char key[8];
        snprintf(key, sizeof key, "k%zu", i);
        bind(x, q, key, cases[i].kind, cases[i].v, cases[i].s);
        const qm_binding *b = qm_bindings_with_key(x, amqp_cstr(key));
        ck_assert_ptr_nonnull(b);
        int64_t got = 0;
        ck_assert_int_eq(qm_superstream_order(b, &got), cases[i].ok);
        if (cases[i].ok)
            ck_assert_int_eq(got, cases[i].want);
    }
}
END_TEST

START_TEST(route_follows_the_exchanges_routing_streams_only)
{
    qm_exchange *x = exchange("ss", "alt"), *inner = exchange("inner", NULL),
                *alt = exchange("alt", NULL);
    qm_queue *a = queue("a", 1), *b = queue("b", 1), *z = queue("z", 1),
             *classic = queue("classic", 0);
    bind(x, a, "0", 'l', 0, NULL);
    bind(x, b, "1", 'l', 1, NULL);
    bind(x, classic, "1", 0, 0, NULL);
    bind(x, a, "both", 0, 0, NULL);
    bind(x, b, "both", 0, 0, NULL);
    ck_assert_int_eq(
        qm_bind_exchange(x, inner, amqp_cstr("deep"), (amqp_bytes){NULL, 0}, err, sizeof err),
        SL_OK);
    bind(inner, z, "deep", 0, 0, NULL);
    bind(alt, z, "lost", 0, 0, NULL);
    size_t n;
    ck_assert_str_eq(route_names(x, "0"), "a");
    ck_assert_str_eq(route_names(x, "1"), "b");
    qm_queue **qs = qm_superstream_route(x, amqp_cstr("both"), &n);
    ck_assert_uint_eq(n, 2);
    ck_assert((qs[0] == a && qs[1] == b) || (qs[0] == b && qs[1] == a));
    sl_free(qs);
    ck_assert_str_eq(route_names(x, "deep"), "z");
    /* no binding matched: the alternate exchange, as a publish would go */
    ck_assert_str_eq(route_names(x, "lost"), "z");
    ck_assert_ptr_null(qm_superstream_route(x, amqp_cstr("nowhere"), &n));
    ck_assert_uint_eq(n, 0);
    /* the default exchange names a queue by the key: a stream only, nothing made */
    qm_exchange *def = qm_exchange_find(V, "", 0);
    ck_assert_ptr_nonnull(def);
    ck_assert_str_eq(route_names(def, "b"), "b");
    ck_assert_ptr_null(qm_superstream_route(def, amqp_cstr("classic"), &n));
    uint64_t before = qm_vhost_queue_count(V);
    ck_assert_ptr_null(qm_superstream_route(def, amqp_cstr("DIRECT=TCP:127.0.0.1\\q"), &n));
    ck_assert_uint_eq(qm_vhost_queue_count(V), before);
}
END_TEST

START_TEST(many_streams_on_one_key)
{
    /* more destinations than the first routing array holds: all of them, each once */
    qm_exchange *x = exchange("ss", NULL);
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%02d", i);
        bind(x, queue(name, 1), "k", 'l', 39 - i, NULL);
    }
    size_t n;
    qm_queue **qs = qm_superstream_route(x, amqp_cstr("k"), &n);
    ck_assert_uint_eq(n, 40);
    sl_free(qs);
    qs = qm_superstream_partitions(x, &n);
    ck_assert_uint_eq(n, 40);
    ck_assert_str_eq(qs[0]->name, "s39");
    ck_assert_str_eq(qs[39]->name, "s00");
    sl_free(qs);
}
END_TEST

static Suite *superstream_suite(void)
{
    Suite *s = suite_create("superstream");
    TCase *tc = tcase_create("model");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, partitions_in_rabbitmqs_order_streams_only);
    tcase_add_test(tc, order_argument_forms);
    tcase_add_test(tc, route_follows_the_exchanges_routing_streams_only);
    tcase_add_test(tc, many_streams_on_one_key);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(superstream_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
