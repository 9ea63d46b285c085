/* test_lister.c - unit tests for the node's lists and rules below the doors (src/node/lister.c,
 * src/node/rules.c, src/node/totals.c): page parameters as RabbitMQ reads them, sort keys whose
 * byte order is RabbitMQ's order, the name filter, a cursor over several vhosts in both
 * directions and by rank, the bindings walk resumed across slices, the refusals' texts, and
 * the totals.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp/method.h"
#include "core/mem.h"
#include "node/lister.h"
#include "node/rules.h"
#include "node/totals.h"
#include "qm/qm.h"

static qm_node *N;
static char err[512];

static void setup(void)
{
    N = qm_node_new("test");
    N->test_now = 1000;
}

static void teardown(void)
{
    if (N)
        qm_node_free(N);
    N = NULL;
}

static qm_queue *declare(qm_vhost *vh, const char *name)
{
    qm_queue_decl d = {name, strlen(name), 0, 0, 0, NULL, (amqp_bytes){0}, 0};
    qm_queue *q = NULL;
    int created = 0;
    sl_err rc = qm_queue_declare(vh, &d, &q, &created, err, sizeof err);
    ck_assert_msg(rc == SL_OK, "declare %s: %s", name, err);
    return q;
}

static qm_exchange *exchange(qm_vhost *vh, const char *name)
{
    qm_exchange_decl d = {name, strlen(name), QM_EX_DIRECT, 0, 0, 0, (amqp_bytes){0}};
    qm_exchange *x = NULL;
    ck_assert_int_eq(qm_exchange_declare(vh, &d, &x, err, sizeof err), SL_OK);
    return x;
}

START_TEST(page_parameters)
{
    int bad = 0;
    ck_assert_int_eq(node_page_parse("3", &bad), 3);
    ck_assert_int_eq(node_page_parse("-1", &bad), -1);
    ck_assert_int_eq(node_page_parse("+2", &bad), 2);
    ck_assert_int_eq(bad, 0);
    node_page_parse(" 1", &bad);
    ck_assert_int_eq(bad, 1);
    bad = 0;
    node_page_parse("1.5", &bad);
    ck_assert_int_eq(bad, 1);
    bad = 0;
    ck_assert_int_eq(node_page_parse("99999999999999999999999", &bad), NODE_PAGE_NUMBER_MAX);
    ck_assert_int_eq(bad, 0);
    ck_assert_int_eq(node_page_count(0, 100), 0);
    ck_assert_int_eq(node_page_count(101, 100), 2);
    ck_assert_uint_eq(node_page_offset(3, 10), 20);
}
END_TEST

static int key_cmp(sl_buf *a, sl_buf *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->data, b->data, n);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

START_TEST(sort_keys_order_as_rabbitmq)
{
    /* nothing < numbers (by value, negatives too) < booleans < strings */
    sl_buf k[7];
    for (int i = 0; i < 7; i++)
        sl_buf_init(&k[i]);
    node_sortkey_none(&k[0]);
    node_sortkey_number(&k[1], -5.5);
    node_sortkey_number(&k[2], 0);
    node_sortkey_number(&k[3], 1e9);
    node_sortkey_bool(&k[4], 0);
    node_sortkey_string(&k[5], "a", 1);
    node_sortkey_string(&k[6], "ab", 2);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(key_cmp(&k[i], &k[i + 1]) < 0, "key %d sorts before key %d", i, i + 1);
    for (int i = 0; i < 7; i++)
        sl_buf_free(&k[i]);
}
END_TEST

START_TEST(name_filter)
{
    node_filter f;
    ck_assert_int_eq(node_filter_init(&f, NULL, 0, err, sizeof err), 0);
    ck_assert(!node_filter_active(&f));
    ck_assert(node_filter_match(&f, "anything"));
    node_filter_free(&f);
    ck_assert_int_eq(node_filter_init(&f, "OrD", 0, err, sizeof err), 0);
    ck_assert(node_filter_active(&f));
    ck_assert(node_filter_match(&f, "orders"));
    ck_assert(!node_filter_match(&f, "or"));
    node_filter_free(&f);
    ck_assert_int_eq(node_filter_init(&f, "^q[0-9]+$", 1, err, sizeof err), 0);
    ck_assert(node_filter_match(&f, "Q12"));
    ck_assert(!node_filter_match(&f, "q12x"));
    node_filter_free(&f);
    ck_assert_int_eq(node_filter_init(&f, "(", 1, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "invalid regular expression at offset"), "%s", err);
    node_filter_free(&f);
}
END_TEST

START_TEST(cursor_over_vhosts)
{
    /* exchanges: every vhost's own ones are predeclared; a vhost's system queues would be
     * listed too (kind "system"), so exchanges are what is walked here */
    qm_vhost *a = qm_vhost_create(N, "a"), *b = qm_vhost_create(N, "b");
    qm_vhost *e = qm_vhost_create(N, "c");
    uint64_t base = sl_oset_count(&a->exchange_order) + sl_oset_count(&b->exchange_order) +
                    sl_oset_count(&e->exchange_order);
    exchange(a, "~q2");
    exchange(a, "~q1");
    exchange(b, "~q0");
    node_cursor c = {.kind = NODE_LIST_EXCHANGES};
    c.vhosts = sl_xcalloc(3, sizeof *c.vhosts);
    c.vhosts[c.n_vhosts++] = sl_xstrdup("a");
    c.vhosts[c.n_vhosts++] = sl_xstrdup("b");
    c.vhosts[c.n_vhosts++] = sl_xstrdup("c");
    ck_assert_uint_eq(node_cursor_total(N, &c), base + 3);
    /* in (vhost, name) order: "~" sorts after the predeclared names */
    const char *want[] = {"a/~q1", "a/~q2", "b/~q0"};
    char got[64];
    int k = 0;
    uint64_t n = 0;
    qm_exchange *x;
    while ((x = node_cursor_next(N, &c))) {
        n++;
        if (x->name[0] != '~')
            continue;
        snprintf(got, sizeof got, "%s/%s", x->vhost->name, x->name);
        ck_assert_int_lt(k, 3);
        ck_assert_str_eq(got, want[k++]);
    }
    ck_assert_int_eq(k, 3);
    ck_assert_uint_eq(n, base + 3);
    node_cursor_free(&c);

    /* by rank, descending */
    node_cursor r = {.kind = NODE_LIST_EXCHANGES, .reverse = 1, .only = NULL};
    r.vhosts = sl_xcalloc(2, sizeof *r.vhosts);
    r.vhosts[r.n_vhosts++] = sl_xstrdup("a");
    r.vhosts[r.n_vhosts++] = sl_xstrdup("b");
    uint64_t in_b = sl_oset_count(&b->exchange_order);
    x = node_cursor_seek(N, &r, in_b); /* b's are first, descending: then a's last one */
    ck_assert_str_eq(x->name, "~q2");
    x = node_cursor_next(N, &r);
    ck_assert_str_eq(x->name, "~q1");
    ck_assert_ptr_null(node_cursor_seek(N, &r, in_b + sl_oset_count(&a->exchange_order)));
    node_cursor_free(&r);
    ck_assert_ptr_nonnull(node_list_find(N, NODE_LIST_EXCHANGES, "b", "~q0"));
    ck_assert_ptr_null(node_list_find(N, NODE_LIST_EXCHANGES, "x", "~q0"));
}
END_TEST

static void count_default(void *ctx, qm_queue *q)
{
    (void)q;
    (*(int *)ctx) += 100;
}

static void count_binding(void *ctx, qm_binding *b)
{
    (void)b;
    (*(int *)ctx)++;
}

START_TEST(bindings_walk_resumes)
{
    qm_vhost *vh = qm_vhost_create(N, "/");
    qm_queue *q = declare(vh, "q");
    size_t n_default = 0; /* the default exchange's: one per queue that is no subqueue */
    for (sl_onode *o = sl_oset_first(&vh->queue_order); o; o = sl_oset_next(o))
        n_default += !SL_ONODE_OWNER(o, qm_queue, by_name)->is_subqueue;
    char key[16];
    int n_x = 0;
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        qm_exchange *x = exchange(vh, name);
        for (int k = 0; k < 40; k++) {
            snprintf(key, sizeof key, "k%d", k);
            ck_assert_int_eq(qm_bind_queue(x, q, amqp_cstr(key), (amqp_bytes){0}, err, sizeof err),
                             SL_OK);
            n_x++;
        }
    }
    node_cursor c = {.kind = NODE_LIST_QUEUES, .only = sl_xstrdup("/")};
    int seen = 0;
    node_binding_walk w = {.visit_default = count_default, .visit = count_binding, .ctx = &seen};
    int turns = 0;
    while (!node_walk_bindings(N, &w, &c, 0)) /* a slice already over: 16 steps a turn */
        ck_assert_int_lt(++turns, 1000);
    ck_assert_int_gt(turns, 1);
    /* amq.* exchanges hold none */
    ck_assert_int_eq(seen, 100 * (int)n_default + n_x);
    node_binding_walk_free(&w);
    node_cursor_free(&c);
}
END_TEST

START_TEST(rules_texts)
{
    qm_vhost *vh = qm_vhost_create(N, "v");
    ck_assert(node_name_reserved("amq.x", 5));
    ck_assert(!node_name_reserved("amq", 3));
    ck_assert(node_exchange_predeclared("", 0));
    ck_assert_int_eq(node_queue_new_name("amq.q", 5, 0, err, sizeof err), SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "queue name 'amq.q' contains reserved prefix 'amq.*'");
    ck_assert_int_eq(node_queue_new_name("amq.q", 5, 1, err, sizeof err), SL_OK);
    ck_assert_int_eq(node_exchange_new_name("amq.e", 5, 0, err, sizeof err), SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "exchange name 'amq.e' contains reserved prefix 'amq.*'");
    ck_assert_int_eq(node_exchange_not_default("", 0, err, sizeof err), SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "operation not permitted on the default exchange");
    ck_assert_int_eq(node_exchange_delete_check("amq.direct", 10, "v", err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "deletion of system exchange 'amq.direct' in vhost 'v' not allowed");
    ck_assert_int_eq(node_exchange_delete_check("mine", 4, "v", err, sizeof err), SL_OK);

    int owner = 0, other = 0;
    qm_queue_decl d = {"ex", 2, 0, 1, 0, &owner, (amqp_bytes){0}, 0};
    qm_queue *q = NULL;
    int created;
    ck_assert_int_eq(qm_queue_declare(vh, &d, &q, &created, err, sizeof err), SL_OK);
    ck_assert_int_eq(node_queue_locked(q, &owner, err, sizeof err), SL_OK);
    ck_assert_int_eq(node_queue_locked(q, &other, err, sizeof err), SL_ERR_RESOURCE_LOCKED);
    ck_assert_int_eq(node_queue_locked(q, NULL, err, sizeof err), SL_ERR_RESOURCE_LOCKED);
    ck_assert_msg(strstr(err, "cannot obtain exclusive access to locked queue 'ex' in vhost 'v'"),
                  "%s", err);
    ck_assert(!node_queue_definable(q));
    ck_assert(node_queue_definable(declare(vh, "plain")));
}
END_TEST

static int only_a(void *ctx, const char *vhost)
{
    (void)ctx;
    return !strcmp(vhost, "a");
}

START_TEST(totals)
{
    qm_vhost *a = qm_vhost_create(N, "a"), *b = qm_vhost_create(N, "b");
    node_totals t0, ta, tb;
    node_totals_model(N, NULL, NULL, &t0);
    node_totals_model(N, only_a, NULL, &ta);
    node_totals_vhost_queues(b, &tb);
    declare(a, "q1");
    declare(a, "q2");
    declare(b, "q3");
    node_totals t;
    node_totals_model(N, NULL, NULL, &t);
    ck_assert_uint_eq(t.queues, t0.queues + 3);
    node_totals_model(N, only_a, NULL, &t);
    ck_assert_uint_eq(t.queues, ta.queues + 2);
    ck_assert_uint_eq(t.exchanges, sl_map_count(a->exchanges));
    node_totals_vhost_queues(b, &t);
    ck_assert_uint_eq(t.queues, tb.queues + 1);
    ck_assert_uint_eq(t.exchanges, 0);
}
END_TEST

static void put(qm_queue *q, const char *body)
{
    sl_buf b;
    sl_buf_init(&b);
    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    amqp_props_encode(&b, &p);
    size_t n = strlen(body);
    qm_message *m = qm_message_new(AMQP_BYTES(""), amqp_cstr(q->name), sl_buf_head(&b),
                                   (uint32_t)sl_buf_unread(&b), n);
    memcpy(qm_msg_body(m), body, n);
    sl_buf_free(&b);
    ck_assert_int_eq(qm_queue_enqueue(q, m), SL_OK);
    qm_message_unref(m);
}

struct peeked {
    char bodies[8][8];
    uint64_t remaining[8];
    int n;
};

static void peek_visit(void *ctx, const qm_position *pos, uint64_t remaining)
{
    struct peeked *pk = ctx;
    ck_assert_int_lt(pk->n, 8);
    snprintf(pk->bodies[pk->n], sizeof pk->bodies[0], "%.*s", (int)pos->msg->body_len,
             (const char *)qm_msg_body(pos->msg));
    pk->remaining[pk->n++] = remaining;
}

START_TEST(peek_in_slices)
{
    qm_vhost *vh = qm_vhost_create(N, "/");
    qm_queue *q = declare(vh, "q");
    const char *bodies[] = {"m0", "m1", "m2", "m3", "m4"};
    for (int i = 0; i < 5; i++)
        put(q, bodies[i]);
    struct peeked pk = {0};
    node_peek p;
    node_peek_init(&p, q, 1, 3, peek_visit, &pk);
    ck_assert_int_eq(node_peek_step(N, &p, UINT64_MAX), 1);
    ck_assert_int_eq(pk.n, 3);
    ck_assert_str_eq(pk.bodies[0], "m1");
    ck_assert_str_eq(pk.bodies[2], "m3");
    ck_assert_uint_eq(pk.remaining[0], 3);
    ck_assert_uint_eq(pk.remaining[2], 1);
    ck_assert_uint_eq(q->n_ready, 5); /* a peek takes nothing */
    node_peek_free(&p);
    /* the queue deleted between slices: done, with what was seen */
    memset(&pk, 0, sizeof pk);
    node_peek_init(&p, q, 0, 10, peek_visit, &pk);
    uint64_t count = 0;
    ck_assert_int_eq(qm_queue_delete(q, 0, &count, err, sizeof err), SL_OK);
    ck_assert_int_eq(node_peek_step(N, &p, UINT64_MAX), 1);
    ck_assert_int_eq(pk.n, 0);
    node_peek_free(&p);
}
END_TEST

static Suite *lister_suite(void)
{
    Suite *s = suite_create("lister");
    TCase *tc = tcase_create("lister");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, page_parameters);
    tcase_add_test(tc, sort_keys_order_as_rabbitmq);
    tcase_add_test(tc, name_filter);
    tcase_add_test(tc, cursor_over_vhosts);
    tcase_add_test(tc, bindings_walk_resumes);
    tcase_add_test(tc, rules_texts);
    tcase_add_test(tc, totals);
    tcase_add_test(tc, peek_in_slices);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(lister_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
