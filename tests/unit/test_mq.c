/* test_mq.c - unit tests for MSMQ's protocol-neutral operations (src/mq/): the context-mq_handle
 * tables' rules (ids of this run, ownership, the per-user limit, the rundown), handles on a
 * queue of this node (open, purge, format name, list, close), the access and share words every
 * door takes, format names, and moves with the transactions a door opens. No door is started:
 * the node is the queue manager and the settings, without access control.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp/method.h"
#include "core/mem.h"
#include "mq/formatname.h"
#include "mq/handle.h"
#include "mq/move.h"
#include "mq/mq.h"
#include "qm/qm.h"

static node_config CFG;
static sl_node NODE;
static mq_state *MQ;
static qm_vhost *V;
static char err[512];

static void setup(void)
{
    node_config_defaults(&CFG);
    sl_free(CFG.node_name); /* the settings own their strings (node_config_free) */
    CFG.node_name = sl_xstrdup("sluice@testhost");
    CFG.handle_limit = 3;
    CFG.handle_idle_timeout_s = 3600;
    memset(&NODE, 0, sizeof NODE);
    NODE.cfg = &CFG;
    NODE.qm = qm_node_new("test");
    NODE.qm->test_now = 1000;
    node_add_listener(&NODE, "amqp", "127.0.0.1", 5672, NULL);
    node_add_listener(&NODE, "http", "127.0.0.1", 15672, NULL);
    V = qm_vhost_create(NODE.qm, "/");
    MQ = mq_new(&NODE);
}

/* Moves always ask the access module: alice may do anything in "/", bob nothing. */
static void with_access(void)
{
    NODE.acc = acc_new();
    ck_assert_int_eq(acc_vhost_put(NODE.acc, "/", NULL, NULL, NULL, err, sizeof err), SL_OK);
    const char *users[] = {"alice", "bob"};
    for (int i = 0; i < 2; i++) {
        acc_user_def d = {.name = users[i], .password = "pw", .password_len = 2, .tags = ""};
        ck_assert_int_eq(acc_user_put(NODE.acc, &d, NULL, err, sizeof err), SL_OK);
    }
    ck_assert_int_eq(acc_perm_set(NODE.acc, "alice", "/", ".*", ".*", ".*", err, sizeof err),
                     SL_OK);
}

static void teardown(void)
{
    mq_free(MQ);
    MQ = NULL;
    if (NODE.acc)
        acc_free(NODE.acc);
    NODE.acc = NULL;
    qm_node_free(NODE.qm);
    NODE.qm = NULL;
    node_config_free(&CFG);
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

START_TEST(handle_ids_belong_to_their_run_and_user)
{
    qm_queue *q = declare("q1");
    mq_handle *h;
    ck_assert_int_eq(
        mq_handle_open_local(MQ, "alice", q, QM_ACCESS_RECEIVE, 0, &h, err, sizeof err), SL_OK);
    const char *id = mq_handle_id(h);
    ck_assert_uint_eq(strlen(id), CTX_ID_LEN);
    char run[9];
    snprintf(run, sizeof run, "%08x", MQ->run_id);
    ck_assert(!memcmp(id, run, 8));
    mq_handle *found;
    ck_assert_int_eq(mq_handle_lookup(MQ, id, "alice", &found, err, sizeof err), SL_OK);
    ck_assert_ptr_eq(found, h);
    /* another user's id is answered as an unknown one */
    ck_assert_int_eq(mq_handle_lookup(MQ, id, "bob", &found, err, sizeof err),
                     SL_ERR_INVALID_HANDLE);
    ck_assert_ptr_null(found);
    /* an id of an earlier run is told apart */
    char stale[CTX_ID_LEN + 1];
    memcpy(stale, id, sizeof stale);
    stale[0] = stale[0] == '0' ? '1' : '0';
    ck_assert_int_eq(mq_handle_lookup(MQ, stale, "alice", &found, err, sizeof err),
                     SL_ERR_STALE_HANDLE);
    ck_assert_int_eq(mq_handle_lookup(MQ, "xyz", "alice", &found, err, sizeof err),
                     SL_ERR_INVALID_HANDLE);
    char gone[CTX_ID_LEN + 1]; /* id is the handle's own: gone with it */
    memcpy(gone, id, sizeof gone);
    mq_handle_discard(MQ, h);
    ck_assert_ptr_null(mq_handle_find(MQ, gone));
}
END_TEST

START_TEST(handle_limit_and_rundown)
{
    qm_queue *q = declare("q1");
    mq_handle *h;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(
            mq_handle_open_local(MQ, "alice", q, QM_ACCESS_PEEK, 0, &h, err, sizeof err), SL_OK);
    ck_assert_int_eq(mq_handle_open_local(MQ, "alice", q, QM_ACCESS_PEEK, 0, &h, err, sizeof err),
                     SL_ERR_HANDLE_LIMIT);
    ck_assert_int_eq(mq_handle_open_local(MQ, "bob", q, QM_ACCESS_PEEK, 0, &h, err, sizeof err),
                     SL_OK);
    /* nothing idle yet; then every handle is */
    mq_rundown(MQ, h->e.last_used_ms);
    size_t n;
    mq_handle **v;
    mq_caller admin = {"root", 1}, alice = {"alice", 0};
    ck_assert_int_eq(mq_handle_list(MQ, &admin, 1, &v, &n, err, sizeof err), SL_OK);
    ck_assert_uint_eq(n, 4);
    sl_free(v);
    ck_assert_int_eq(mq_handle_list(MQ, &alice, 1, &v, &n, err, sizeof err), SL_ERR_ACCESS_REFUSED);
    ck_assert_int_eq(mq_handle_list(MQ, &alice, 0, &v, &n, err, sizeof err), SL_OK);
    ck_assert_uint_eq(n, 3);
    sl_free(v);
    CFG.handle_idle_timeout_s = 1;
    mq_rundown(MQ, h->e.last_used_ms + 1000);
    ck_assert_int_eq(mq_handle_list(MQ, &admin, 1, &v, &n, err, sizeof err), SL_OK);
    ck_assert_uint_eq(n, 0);
    sl_free(v);
}
END_TEST

START_TEST(purge_and_format_name_through_a_handle)
{
    qm_queue *q = declare("q1");
    put(q, "a");
    put(q, "b");
    mq_handle *h, *peek;
    ck_assert_int_eq(
        mq_handle_open_local(MQ, "alice", q, QM_ACCESS_RECEIVE, 0, &h, err, sizeof err), SL_OK);
    ck_assert_int_eq(
        mq_handle_open_local(MQ, "alice", q, QM_ACCESS_PEEK, 0, &peek, err, sizeof err), SL_OK);
    uint64_t n;
    int pending;
    ck_assert_int_ne(mq_handle_purge(MQ, "alice", peek, &n, &pending, NULL, NULL, err, sizeof err),
                     SL_OK);
    ck_assert_int_eq(mq_handle_purge(MQ, "alice", h, &n, &pending, NULL, NULL, err, sizeof err),
                     SL_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(pending, 0);
    const char *fmt;
    ck_assert_int_eq(mq_handle_format_name(MQ, "alice", h, &fmt, err, sizeof err), SL_OK);
    ck_assert_str_eq(fmt, "DIRECT=OS:testhost\\private$\\q1");
    /* the queue deleted: the handle reaches nothing, even under the same name again */
    ck_assert_int_eq(qm_queue_delete(q, 0, NULL, err, sizeof err), SL_OK);
    q = declare("q1");
    put(q, "c");
    ck_assert_int_eq(mq_handle_purge(MQ, "alice", h, &n, &pending, NULL, NULL, err, sizeof err),
                     SL_ERR_QUEUE_DELETED);
    ck_assert_uint_eq(q->n_ready, 1);
}
END_TEST

START_TEST(access_and_share_words)
{
    uint32_t a;
    ck_assert_int_eq(mq_handle_access_parse("peek|admin", &a), 0);
    ck_assert_uint_eq(a, QM_ACCESS_PEEK | QM_ACCESS_ADMIN);
    ck_assert_int_eq(mq_handle_access_parse("MQ_RECEIVE_ACCESS", &a), 0);
    ck_assert_uint_eq(a, QM_ACCESS_RECEIVE);
    ck_assert_int_eq(mq_handle_access_parse("", &a), -1);
    ck_assert_int_eq(mq_handle_access_parse("read", &a), -1);
    char buf[64];
    mq_handle_access_str(QM_ACCESS_RECEIVE | QM_ACCESS_SEND, buf, sizeof buf);
    ck_assert_str_eq(buf, "receive|send");
    int s;
    ck_assert_int_eq(mq_handle_share_parse("deny-receive", &s), 0);
    ck_assert_int_eq(s, QM_SHARE_DENY_RECEIVE);
    ck_assert_int_eq(mq_handle_share_parse("deny_all", &s), -1);
    ck_assert(mq_handle_access_valid(1) && mq_handle_access_valid(0xFF));
    ck_assert(!mq_handle_access_valid(0) && !mq_handle_access_valid(0x100) &&
              !mq_handle_access_valid(-1));
    ck_assert(mq_handle_share_valid(0) && mq_handle_share_valid(1) && !mq_handle_share_valid(2));
}
END_TEST

START_TEST(format_names_of_this_node)
{
    qm_queue *q = declare("Orders"), *out;
    char buf[200];
    mq_fmtname_of(MQ, q, buf, sizeof buf);
    ck_assert_str_eq(buf, "DIRECT=OS:testhost\\private$\\Orders");
    mq_pathname_of(MQ, q, buf, sizeof buf);
    ck_assert_str_eq(buf, "testhost\\private$\\Orders");
    ck_assert_int_eq(mq_fmtname_resolve(MQ, "DIRECT=TCP:127.0.0.1\\private$\\orders", NULL, &out,
                                        err, sizeof err),
                     SL_OK);
    ck_assert_ptr_eq(out, q);
    ck_assert_int_eq(
        mq_fmtname_resolve(MQ, "DIRECT=OS:.\\private$\\nope", NULL, &out, err, sizeof err),
        SL_ERR_QUEUE_NOT_FOUND);
    ck_assert_int_eq(mq_fmtname_resolve(MQ, "PUBLIC=1234", NULL, &out, err, sizeof err),
                     SL_ERR_ILLEGAL_FORMATNAME);
    ck_assert(mq_fmt_is_local_machine(MQ, "localhost"));
    ck_assert(!mq_fmt_is_local_machine(MQ, "10.9.9.9"));
    int port;
    char host[64];
    ck_assert_int_eq(mq_fmt_machine_split("[::1]:1801", host, sizeof host, &port), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(port, 1801);
}
END_TEST

START_TEST(moves_and_door_transactions)
{
    with_access();
    qm_queue *src = declare("src");
    declare("dst");
    put(src, "a");
    put(src, "b");
    put(src, "c");
    mq_move_req rq = {.user = "alice", .src = src, .destination = "dst", .count = 2};
    mq_move_result res;
    ck_assert_int_eq(mq_move(MQ, &rq, &res, err, sizeof err), SL_OK);
    ck_assert_uint_eq(res.moved, 2);
    ck_assert_str_eq(res.dest->name, "dst");
    /* a subqueue is made by the move; the journal is never a destination */
    rq.destination = "dst;later";
    rq.count = 1;
    ck_assert_int_eq(mq_move(MQ, &rq, &res, err, sizeof err), SL_OK);
    ck_assert(res.dest->is_subqueue);
    qm_queue *dst = res.dest->parent;
    rq.destination = "dst;journal";
    ck_assert_int_eq(mq_move(MQ, &rq, &res, err, sizeof err), SL_ERR_INVALID_PARAMETER);
    /* transactions belong to the user who began them */
    qm_tx *tx = mq_tx_begin(MQ, "alice");
    ck_assert_ptr_eq(mq_tx_get(MQ, tx->id, "alice"), tx);
    ck_assert_ptr_null(mq_tx_get(MQ, tx->id, "bob"));
    rq.destination = "src";
    rq.src = dst;
    rq.has_tx = 1;
    rq.tx_id = tx->id;
    rq.user = "bob";
    ck_assert_int_eq(mq_move(MQ, &rq, &res, err, sizeof err), SL_ERR_TRANSACTION_SEQUENCE);
    rq.has_tx = 0;
    ck_assert_int_eq(mq_move(MQ, &rq, &res, err, sizeof err), SL_ERR_ACCESS_REFUSED);
    size_t n;
    qm_tx **v = mq_tx_list(MQ, "alice", &n);
    ck_assert_uint_eq(n, 1);
    sl_free(v);
    uint64_t voided;
    ck_assert_int_eq(mq_tx_end(MQ, tx, 0, &voided), SL_OK);
    v = mq_tx_list(MQ, "alice", &n);
    ck_assert_uint_eq(n, 0);
    sl_free(v);
}
END_TEST

static Suite *mq_suite(void)
{
    Suite *s = suite_create("mq");
    TCase *tc = tcase_create("mq");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, handle_ids_belong_to_their_run_and_user);
    tcase_add_test(tc, handle_limit_and_rundown);
    tcase_add_test(tc, purge_and_format_name_through_a_handle);
    tcase_add_test(tc, access_and_share_words);
    tcase_add_test(tc, format_names_of_this_node);
    tcase_add_test(tc, moves_and_door_transactions);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(mq_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
