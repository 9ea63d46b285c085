/* test_qdesc.c - unit tests for open queue descriptors (src/qm/qdesc.c): MS-MQDMPR Open
 * Queue's access and sharing rules, Purge Queue through a descriptor, and the rule that a
 * descriptor never outlives its queue's incarnation (a queue deleted and declared again under
 * the same name is not reached through an old descriptor).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp/method.h"
#include "qm/qm.h"

static qm_node *N;
static qm_vhost *V;
static char err[512];

static void setup(void)
{
    N = qm_node_new("test");
    N->test_now = 1000;
    V = qm_vhost_create(N, "/");
}

static void teardown(void)
{
    if (N)
        qm_node_free(N);
    N = NULL;
}

static qm_queue *declare(const char *name)
{
    qm_queue_decl d = {name, strlen(name), 0, 0, 0, NULL, (amqp_bytes){0}, 0};
    qm_queue *q = NULL;
    int created = 0;
    sl_err rc = qm_queue_declare(V, &d, &q, &created, err, sizeof err);
    ck_assert_msg(rc == SL_OK, "declare %s: %s", name, err);
    return q;
}

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

static qm_qdesc *open_ok(qm_queue *q, uint32_t access, int share)
{
    qm_qdesc *d = NULL;
    sl_err e = qm_queue_open(q, access, share, &d, err, sizeof err);
    ck_assert_msg(e == SL_OK, "open 0x%x/%d: %s", access, share, err);
    ck_assert_ptr_nonnull(d);
    return d;
}

static sl_err open_err(qm_queue *q, uint32_t access, int share)
{
    qm_qdesc *d = (qm_qdesc *)1;
    err[0] = 0;
    sl_err e = qm_queue_open(q, access, share, &d, err, sizeof err);
    ck_assert_msg(e != SL_OK, "open 0x%x/%d succeeded", access, share);
    ck_assert_ptr_null(d);
    ck_assert_msg(err[0], "no reason given");
    return e;
}

START_TEST(purge_through_descriptor_available_and_locked)
{
    qm_queue *q = declare("q");
    for (int i = 0; i < 5; i++)
        put(q, "m");
    qm_position *held = qm_queue_get(q, 0, NULL); /* LOCKED, held by us */
    ck_assert_ptr_nonnull(held);
    qm_qdesc *d = open_ok(q, QM_ACCESS_RECEIVE, QM_SHARE_DENY_NONE);
    ck_assert_ptr_eq(qm_qdesc_queue(d), q);
    ck_assert_uint_eq(d->incarnation, q->incarnation);
    uint64_t n = 99;
    ck_assert_int_eq(qm_qdesc_purge(d, &n), SL_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert_uint_eq(q->n_ready, 0);
    ck_assert_uint_eq(q->n_purge_pending, 1);
    ck_assert_int_eq(held->state, QM_POS_PURGE_PENDING);
    qm_position_requeue(held); /* purged: it does not come back */
    ck_assert_uint_eq(qm_queue_message_count(q), 0);
    put(q, "later");
    ck_assert_int_eq(qm_qdesc_purge(d, &n), SL_OK);
    ck_assert_uint_eq(n, 1);
    qm_qdesc_close(d);
    ck_assert_ptr_null(q->descs);
}
END_TEST

START_TEST(deleted_queue_never_reached_through_old_descriptor)
{
    qm_queue *q = declare("inc");
    uint64_t inc = q->incarnation;
    qm_qdesc *d = open_ok(q, QM_ACCESS_RECEIVE, QM_SHARE_DENY_NONE);
    qm_qdesc *d2 = open_ok(q, QM_ACCESS_PEEK, QM_SHARE_DENY_NONE);
    uint64_t count = 0;
    ck_assert_int_eq(qm_queue_delete(q, 0, &count, err, sizeof err), SL_OK);
    ck_assert_ptr_null(d->queue);
    ck_assert_ptr_null(qm_qdesc_queue(d));
    ck_assert_ptr_null(d2->queue);
    qm_queue *q2 = declare("inc");
    ck_assert_uint_ne(q2->incarnation, inc);
    put(q2, "a");
    put(q2, "b");
    uint64_t n = 7;
    ck_assert_int_eq(qm_qdesc_purge(d, &n), SL_ERR_QUEUE_DELETED);
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(q2->n_ready, 2);
    ck_assert_ptr_null(q2->descs);
    qm_qdesc_close(d); /* closing a descriptor of a deleted queue is fine */
    qm_qdesc_close(d2);
    qm_qdesc *d3 = open_ok(q2, QM_ACCESS_RECEIVE, QM_SHARE_DENY_NONE);
    ck_assert_int_eq(qm_qdesc_purge(d3, &n), SL_OK);
    ck_assert_uint_eq(n, 2);
    qm_qdesc_close(d3);
}
END_TEST

START_TEST(only_receive_descriptors_purge)
{
    qm_queue *q = declare("acc");
    put(q, "x");
    uint32_t others[] = {QM_ACCESS_PEEK, QM_ACCESS_SEND, QM_ACCESS_MOVE};
    for (size_t i = 0; i < 3; i++) {
        qm_qdesc *d = open_ok(q, others[i], QM_SHARE_DENY_NONE);
        uint64_t n = 5;
        ck_assert_int_eq(qm_qdesc_purge(d, &n), SL_ERR_ACCESS_REFUSED);
        ck_assert_uint_eq(n, 0);
        ck_assert_uint_eq(q->n_ready, 1);
        qm_qdesc_close(d);
    }
}
END_TEST

START_TEST(open_refuses_bad_modes_and_targets)
{
    qm_queue *q = declare("modes");
    ck_assert_int_eq(open_err(q, 0, 0), SL_ERR_UNSUPPORTED_ACCESS_MODE);
    ck_assert_int_eq(open_err(q, QM_ACCESS_RECEIVE | QM_ACCESS_SEND, 0),
                     SL_ERR_UNSUPPORTED_ACCESS_MODE);
    ck_assert_int_eq(open_err(q, 0x40, 0), SL_ERR_UNSUPPORTED_ACCESS_MODE);
    ck_assert_int_eq(open_err(q, QM_ACCESS_RECEIVE | QM_ACCESS_ADMIN, 0),
                     SL_ERR_UNSUPPORTED_ACCESS_MODE);
    ck_assert_int_eq(open_err(q, QM_ACCESS_RECEIVE, 2), SL_ERR_UNSUPPORTED_ACCESS_MODE);
    ck_assert_int_eq(open_err(q, QM_ACCESS_SEND, QM_SHARE_DENY_RECEIVE),
                     SL_ERR_UNSUPPORTED_ACCESS_MODE);
    qm_queue *sub = qm_queue_subqueue(q, "poison", 6, 1);
    ck_assert_int_eq(open_err(sub, QM_ACCESS_SEND, 0), SL_ERR_UNSUPPORTED_FORMATNAME_OPERATION);
    qm_queue *sys = qm_queue_find(V, "sluice.system.deadletter", 24);
    ck_assert_ptr_nonnull(sys);
    ck_assert_int_eq(open_err(sys, QM_ACCESS_SEND, 0), SL_ERR_UNSUPPORTED_FORMATNAME_OPERATION);
    qm_qdesc *d = open_ok(sys, QM_ACCESS_RECEIVE, 0);
    qm_qdesc_close(d);
    ck_assert_ptr_null(q->descs);
    ck_assert_ptr_null(sub->descs);
}
END_TEST

/* MS-MQDMPR Open Queue step 4, every row (reference/msmq.md section 2.8). */
START_TEST(sharing_table)
{
    const uint32_t R = QM_ACCESS_RECEIVE, P = QM_ACCESS_PEEK, S = QM_ACCESS_SEND;
    const int DN = QM_SHARE_DENY_NONE, DR = QM_SHARE_DENY_RECEIVE;
    static const struct {
        uint32_t ea;
        int es;
        uint32_t na;
        int ns;
        int refused;
    } rows[] = {
        /* existing Receive + DenyReceive */
        {R, DR, R, DR, 1},
        {R, DR, P, DR, 1},
        {R, DR, R, DN, 1},
        {R, DR, P, DN, 0},
        {R, DR, S, DN, 0},
        /* existing Peek + DenyReceive */
        {P, DR, R, DN, 1},
        {P, DR, R, DR, 1},
        {P, DR, P, DN, 0},
        {P, DR, P, DR, 0},
        /* existing Receive + DenyNone */
        {R, DN, R, DR, 1},
        {R, DN, P, DR, 1},
        {R, DN, R, DN, 0},
        {R, DN, P, DN, 0},
        /* otherwise allowed */
        {P, DN, R, DR, 0},
        {S, DN, R, DR, 0},
        {QM_ACCESS_MOVE, DN, R, DR, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[16];
        snprintf(name, sizeof name, "share%zu", i);
        qm_queue *q = declare(name);
        qm_qdesc *e = open_ok(q, rows[i].ea, rows[i].es);
        qm_qdesc *d = NULL;
        sl_err rc = qm_queue_open(q, rows[i].na, rows[i].ns, &d, err, sizeof err);
        ck_assert_msg(rows[i].refused ? rc == SL_ERR_RESOURCE_LOCKED : rc == SL_OK,
                      "row %zu: got %d", i, rc);
        if (d)
            qm_qdesc_close(d);
        qm_qdesc_close(e);
        /* once the existing one is closed, the new one opens */
        d = open_ok(q, rows[i].na, rows[i].ns);
        qm_qdesc_close(d);
    }
}
END_TEST

START_TEST(open_descriptor_keeps_empty_subqueue)
{
    qm_queue *q = declare("parent");
    qm_queue *sub = qm_queue_subqueue(q, "s", 1, 1);
    qm_qdesc *d = open_ok(sub, QM_ACCESS_RECEIVE, 0);
    qm_queue_schedule_dispatch(sub);
    qm_node_run_dispatch(N);
    qm_node_tick(N, N->test_now);
    ck_assert_ptr_eq(qm_queue_find(V, "parent;s", 8), sub);
    uint64_t n;
    ck_assert_int_eq(qm_qdesc_purge(d, &n), SL_OK);
    qm_node_run_dispatch(N);
    ck_assert_ptr_eq(qm_queue_find(V, "parent;s", 8), sub);
    qm_qdesc_close(d); /* the last handle: the empty subqueue goes */
    qm_node_run_dispatch(N);
    ck_assert_ptr_null(qm_queue_find(V, "parent;s", 8));
    /* deleting the parent ends its subqueues' descriptors too */
    sub = qm_queue_subqueue(q, "t", 1, 1);
    d = open_ok(sub, QM_ACCESS_PEEK, 0);
    uint64_t count;
    ck_assert_int_eq(qm_queue_delete(q, 0, &count, err, sizeof err), SL_OK);
    ck_assert_ptr_null(qm_qdesc_queue(d));
    qm_qdesc_close(d);
}
END_TEST

START_TEST(descriptors_outlive_the_node)
{
    qm_queue *q = declare("last");
    qm_qdesc *d = open_ok(q, QM_ACCESS_RECEIVE, 0);
    qm_node_free(N); /* frees the queue: the descriptor loses it, nothing dangles */
    N = NULL;
    ck_assert_ptr_null(d->queue);
    uint64_t n;
    ck_assert_int_eq(qm_qdesc_purge(d, &n), SL_ERR_QUEUE_DELETED);
    qm_qdesc_close(d);
}
END_TEST

/* An outgoing queue opens with receive|admin (purge) or peek|admin only (MQMP / MC-MQAC). */
START_TEST(outgoing_queue_needs_admin_access)
{
    qm_queue *oq = declare("DIRECT=TCP:127.0.0.9:5672\\private$\\far");
    ck_assert(oq->is_outgoing);
    put(oq, "far");
    ck_assert_int_eq(open_err(oq, QM_ACCESS_RECEIVE, 0), SL_ERR_UNSUPPORTED_ACCESS_MODE);
    ck_assert_int_eq(open_err(oq, QM_ACCESS_PEEK, 0), SL_ERR_UNSUPPORTED_ACCESS_MODE);
    ck_assert_int_eq(open_err(oq, QM_ACCESS_SEND | QM_ACCESS_ADMIN, 0),
                     SL_ERR_UNSUPPORTED_ACCESS_MODE);
    qm_qdesc *p = open_ok(oq, QM_ACCESS_PEEK | QM_ACCESS_ADMIN, 0);
    uint64_t n = 9;
    ck_assert_int_eq(qm_qdesc_purge(p, &n), SL_ERR_ACCESS_REFUSED);
    ck_assert_uint_eq(oq->n_ready, 1);
    /* admin handles share as the receive / peek they carry */
    qm_qdesc *x = open_ok(oq, QM_ACCESS_RECEIVE | QM_ACCESS_ADMIN, QM_SHARE_DENY_RECEIVE);
    ck_assert_int_eq(open_err(oq, QM_ACCESS_RECEIVE | QM_ACCESS_ADMIN, 0), SL_ERR_RESOURCE_LOCKED);
    qm_qdesc_close(x);
    qm_qdesc *d = open_ok(oq, QM_ACCESS_RECEIVE | QM_ACCESS_ADMIN, 0);
    ck_assert_int_eq(qm_qdesc_purge(d, &n), SL_OK);
    ck_assert_uint_eq(n, 1);
    qm_qdesc_close(d);
    qm_qdesc_close(p);
}
END_TEST

static Suite *qdesc_suite(void)
{
    Suite *s = suite_create("qdesc");
    TCase *tc = tcase_create("qdesc");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, purge_through_descriptor_available_and_locked);
    tcase_add_test(tc, deleted_queue_never_reached_through_old_descriptor);
    tcase_add_test(tc, only_receive_descriptors_purge);
    tcase_add_test(tc, open_refuses_bad_modes_and_targets);
    tcase_add_test(tc, sharing_table);
    tcase_add_test(tc, open_descriptor_keeps_empty_subqueue);
    tcase_add_test(tc, descriptors_outlive_the_node);
    tcase_add_test(tc, outgoing_queue_needs_admin_access);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(qdesc_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
