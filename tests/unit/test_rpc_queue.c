/* test_rpc_queue.c - unit tests for the owner's end of remote queue proxies
 * (src/link/rpc_queue.c): open / purge / close by context, contexts of an earlier boot,
 * of another peer, of a deleted and redeclared queue, the rundown when a link connection
 * goes, the per-peer limit and malformed requests.
 */
#include <check.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp/method.h"
#include "access/access.h"
#include "link/rpc_queue.h"
#include "qm/qm.h"

#define BOOT 0x1122334455667788ull

static qm_node *N;
static qm_vhost *V;
static char err[512];

static void setup(void)
{
    N = qm_node_new("owner");
    N->test_now = 1000;
    V = qm_vhost_create(N, "/");
}

static void teardown(void)
{
    link_rpc_queue_free_all();
    qm_node_free(N);
    N = NULL;
}

static qm_queue *declare(qm_vhost *vh, const char *name)
{
    qm_queue_decl d = {name, strlen(name), 0, 0, 0, NULL, (amqp_bytes){0}, 0};
    qm_queue *q = NULL;
    int created = 0;
    ck_assert_msg(qm_queue_declare(vh, &d, &q, &created, err, sizeof err) == SL_OK, "%s", err);
    return q;
}

static void put(qm_queue *q)
{
    sl_buf b;
    sl_buf_init(&b);
    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    amqp_props_encode(&b, &p);
    qm_message *m = qm_message_new(AMQP_BYTES(""), amqp_cstr(q->name), sl_buf_head(&b),
                                   (uint32_t)sl_buf_unread(&b), 1);
    qm_msg_body(m)[0] = 'x';
    sl_buf_free(&b);
    ck_assert_int_eq(qm_queue_enqueue(q, m), SL_OK);
    qm_message_unref(m);
}

/* Serve one request (JSON text); the reply parsed. */
static json_t *call(uint64_t boot, const char *peer, uint64_t conn, const char *op,
                    const char *req_text)
{
    json_t *req = json_loads(req_text, JSON_DECODE_ANY, NULL);
    ck_assert_ptr_nonnull(req);
    char *out = link_rpc_queue(N, boot, peer, "linkuser", conn, op, req);
    json_decref(req);
    ck_assert_ptr_nonnull(out);
    json_t *j = json_loads(out, 0, NULL);
    ck_assert_msg(j != NULL, "reply is not JSON: %s", out);
    free(out);
    return j;
}

static int ok(json_t *j)
{
    return json_is_true(json_object_get(j, "ok"));
}

static const char *hresult_name(json_t *j)
{
    const char *s = json_string_value(json_object_get(j, "hresult_name"));
    return s ? s : "";
}

static char *open_ctx(const char *peer, uint64_t conn, const char *req)
{
    json_t *j = call(BOOT, peer, conn, "queue.open", req);
    ck_assert_msg(ok(j), "open failed: %s", json_string_value(json_object_get(j, "reason")));
    char *c = strdup(json_string_value(json_object_get(j, "context")));
    json_decref(j);
    return c;
}

static json_t *with_ctx(uint64_t boot, const char *peer, const char *op, const char *ctx)
{
    char req[128];
    snprintf(req, sizeof req, "{\"context\": \"%s\"}", ctx);
    return call(boot, peer, 1, op, req);
}

START_TEST(open_purge_close)
{
    qm_queue *q = declare(V, "orders");
    put(q);
    put(q);
    qm_position *held = qm_queue_get(q, 0, NULL);
    char *ctx = open_ctx("node-a", 1, "{\"queue\": \"ORDERS\"}"); /* case-insensitive */
    ck_assert_uint_eq(link_rpc_queue_count(), 1);
    ck_assert_ptr_nonnull(q->descs);
    json_t *j = with_ctx(BOOT, "node-a", "queue.purge", ctx);
    ck_assert(ok(j));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "purged")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "purge_pending")), 1);
    json_decref(j);
    qm_position_requeue(held);
    ck_assert_uint_eq(qm_queue_message_count(q), 0);
    j = with_ctx(BOOT, "node-a", "queue.close", ctx);
    ck_assert(ok(j));
    json_decref(j);
    ck_assert_uint_eq(link_rpc_queue_count(), 0);
    ck_assert_ptr_null(q->descs);
    put(q);
    j = with_ctx(BOOT, "node-a", "queue.purge", ctx); /* closed: fails, purges nothing */
    ck_assert(!ok(j));
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_INVALID_HANDLE");
    json_decref(j);
    ck_assert_uint_eq(q->n_ready, 1);
    free(ctx);
}
END_TEST

START_TEST(stale_foreign_and_deleted_contexts)
{
    qm_queue *q = declare(V, "inv");
    char *ctx = open_ctx("node-a", 1, "{\"vhost\": \"/\", \"queue\": \"inv\"}");
    put(q);
    /* the owner restarted: another boot id */
    json_t *j = with_ctx(BOOT + 1, "node-a", "queue.purge", ctx);
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_STALE_HANDLE");
    json_decref(j);
    /* another peer cannot use it */
    j = with_ctx(BOOT, "node-b", "queue.purge", ctx);
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_INVALID_HANDLE");
    json_decref(j);
    j = with_ctx(BOOT, "node-b", "queue.close", ctx);
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_INVALID_HANDLE");
    json_decref(j);
    ck_assert_uint_eq(q->n_ready, 1);
    /* deleted and declared again: never purged through the old context */
    uint64_t n;
    ck_assert_int_eq(qm_queue_delete(q, 0, &n, err, sizeof err), SL_OK);
    qm_queue *q2 = declare(V, "inv");
    put(q2);
    j = with_ctx(BOOT, "node-a", "queue.purge", ctx);
    ck_assert(!ok(j));
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_QUEUE_DELETED");
    json_decref(j);
    ck_assert_uint_eq(q2->n_ready, 1);
    j = with_ctx(BOOT, "node-a", "queue.close", ctx);
    ck_assert(ok(j));
    json_decref(j);
    free(ctx);
}
END_TEST

START_TEST(connection_gone_runs_contexts_down)
{
    qm_queue *q = declare(V, "rd");
    qm_queue *sub = qm_queue_subqueue(q, "s", 1, 1);
    char *a = open_ctx("node-a", 7, "{\"queue\": \"rd\"}");
    char *b = open_ctx("node-a", 7, "{\"queue\": \"rd;s\", \"access\": 32}");
    char *c = open_ctx("node-a", 8, "{\"queue\": \"rd\"}");
    ck_assert_ptr_nonnull(sub->descs);
    link_rpc_conn_gone(7);
    ck_assert_uint_eq(link_rpc_queue_count(), 1);
    ck_assert_ptr_null(sub->descs);
    json_t *j = with_ctx(BOOT, "node-a", "queue.purge", a);
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_INVALID_HANDLE");
    json_decref(j);
    j = with_ctx(BOOT, "node-a", "queue.purge", c);
    ck_assert(ok(j));
    json_decref(j);
    /* a peek context does not purge */
    char *p = open_ctx("node-a", 8, "{\"queue\": \"rd\", \"access\": 32}");
    j = with_ctx(BOOT, "node-a", "queue.purge", p);
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_ACCESS_DENIED");
    json_decref(j);
    free(a);
    free(b);
    free(c);
    free(p);
}
END_TEST

START_TEST(refused_requests)
{
    declare(V, "r");
    qm_vhost *v2 = qm_vhost_create(N, "other");
    declare(v2, "inother");
    static const struct {
        const char *op, *req, *hresult;
    } cases[] = {
        {"queue.open", "{\"queue\": \"nope\"}", "MQ_ERROR_QUEUE_NOT_FOUND"},
        {"queue.open", "{\"queue\": 5}", "MQ_ERROR_QUEUE_NOT_FOUND"},
        {"queue.open", "{}", "MQ_ERROR_QUEUE_NOT_FOUND"},
        {"queue.open", "{\"queue\": \"r\", \"vhost\": \"nope\"}", "MQ_ERROR_QUEUE_NOT_FOUND"},
        {"queue.open", "{\"queue\": \"r\", \"access\": 2}", "MQ_ERROR_UNSUPPORTED_ACCESS_MODE"},
        {"queue.open", "{\"queue\": \"r\", \"access\": \"1\"}", "MQ_ERROR_UNSUPPORTED_ACCESS_MODE"},
        {"queue.open", "{\"queue\": \"r\", \"share\": 3}", "MQ_ERROR_INVALID_PARAMETER"},
        {"queue.purge", "{}", "MQ_ERROR_INVALID_HANDLE"},
        {"queue.purge", "{\"context\": 17}", "MQ_ERROR_INVALID_HANDLE"},
        {"queue.purge", "{\"context\": \"1122334455667788:zz\"}", "MQ_ERROR_INVALID_HANDLE"},
        {"queue.purge", "{\"context\": \"1122334455667788:0000000000000000\"}",
         "MQ_ERROR_INVALID_HANDLE"},
        {"queue.close", "{\"context\": \"x\"}", "MQ_ERROR_INVALID_HANDLE"},
        {"queue.purge", "[1, 2]", "MQ_ERROR_INVALID_PARAMETER"},
        /* no management API registered (link_rpc_set_mgmt): no properties */
        {"queue.getinfo", "{\"format_name\": \"x\", \"props\": [7]}",
         "MQ_ERROR_SERVICE_NOT_AVAILABLE"},
        {"queue.getinfo", "[]", "MQ_ERROR_INVALID_PARAMETER"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = call(BOOT, "node-a", 1, cases[i].op, cases[i].req);
        ck_assert_msg(!ok(j) && !strcmp(hresult_name(j), cases[i].hresult), "case %zu: got %s", i,
                      hresult_name(j));
        ck_assert_msg(json_is_string(json_object_get(j, "reason")), "case %zu: no reason", i);
        json_decref(j);
    }
    ck_assert_uint_eq(link_rpc_queue_count(), 0);
    /* not an op of this module */
    json_t *req = json_object();
    ck_assert_ptr_null(link_rpc_queue(N, BOOT, "node-a", "linkuser", 1, "queue.info", req));
    json_decref(req);
    /* "<vhost>/<queue>" reaches another vhost */
    char *c = open_ctx("node-a", 1, "{\"queue\": \"other/inother\"}");
    free(c);
    /* sharing rules hold across nodes */
    c = open_ctx("node-a", 1, "{\"queue\": \"r\", \"share\": 1}");
    json_t *j = call(BOOT, "node-b", 2, "queue.open", "{\"queue\": \"r\"}");
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_SHARING_VIOLATION");
    json_decref(j);
    free(c);
}
END_TEST

START_TEST(per_peer_limit)
{
    declare(V, "lim");
    for (int i = 0; i < LINK_RPC_MAX_CONTEXTS; i++) {
        json_t *j = call(BOOT, "node-a", 1, "queue.open", "{\"queue\": \"lim\", \"access\": 32}");
        ck_assert(ok(j));
        json_decref(j);
    }
    json_t *j = call(BOOT, "node-a", 1, "queue.open", "{\"queue\": \"lim\", \"access\": 32}");
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_INSUFFICIENT_RESOURCES");
    json_decref(j);
    j = call(BOOT, "node-b", 2, "queue.open", "{\"queue\": \"lim\"}");
    ck_assert(ok(j));
    json_decref(j);
    link_rpc_conn_gone(1);
    ck_assert_uint_eq(link_rpc_queue_count(), 1);
}
END_TEST

/* The link's user opens a queue only with its read permission on it (access module). */
START_TEST(link_user_needs_read_permission)
{
    declare(V, "secret");
    declare(V, "open.q");
    acc_db *a = acc_new();
    acc_user_def u = {.name = "linkuser", .password = "pw", .password_len = 2};
    ck_assert_int_eq(acc_user_put(a, &u, NULL, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_vhost_put(a, "/", NULL, NULL, NULL, err, sizeof err), SL_OK);
    link_rpc_queue_set_access(a);
    json_t *j = call(BOOT, "node-a", 1, "queue.open", "{\"queue\": \"open.q\"}");
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_ACCESS_DENIED"); /* no permission on "/" */
    json_decref(j);
    ck_assert_int_eq(acc_perm_set(a, "linkuser", "/", "", "", "^open\\.", err, sizeof err), SL_OK);
    j = call(BOOT, "node-a", 1, "queue.open", "{\"queue\": \"secret\"}");
    ck_assert_str_eq(hresult_name(j), "MQ_ERROR_ACCESS_DENIED");
    ck_assert(strstr(json_string_value(json_object_get(j, "reason")), "secret") != NULL);
    json_decref(j);
    j = call(BOOT, "node-a", 1, "queue.open", "{\"queue\": \"open.q\"}");
    ck_assert(ok(j));
    json_decref(j);
    ck_assert_uint_eq(link_rpc_queue_count(), 1);
    link_rpc_queue_set_access(NULL);
    acc_free(a);
}
END_TEST

static Suite *rpcq_suite(void)
{
    Suite *s = suite_create("rpc_queue");
    TCase *tc = tcase_create("rpc_queue");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, open_purge_close);
    tcase_add_test(tc, stale_foreign_and_deleted_contexts);
    tcase_add_test(tc, connection_gone_runs_contexts_down);
    tcase_add_test(tc, refused_requests);
    tcase_add_test(tc, per_peer_limit);
    tcase_add_test(tc, link_user_needs_read_permission);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(rpcq_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
