/* test_defs.c - unit tests for the definitions document without HTTP (src/defs/defs.c): what
 * an import defines, an export writes back; a per-vhost export carries no users; a malformed
 * document changes nothing. The node is the model and the access module only (as fuzz_defs
 * builds it): definitions need no loop, store or door.
 */
#include <check.h>
#include <jansson.h>
#include <string.h>

#include "access/access.h"
#include "core/log.h"
#include "defs/defs.h"
#include "node/config.h"
#include "node/node.h"
#include "qm/qm.h"

static node_config cfg;
static sl_node nd;

static void setup(void)
{
    sl_log_min_level = SL_LOG_ERROR + 1; /* quiet */
    node_config_defaults(&cfg);
    memset(&nd, 0, sizeof nd);
    nd.cfg = &cfg;
    nd.qm = qm_node_new("test");
    nd.acc = acc_new();
    nd.signal_fd = -1;
    char err[300];
    ck_assert_int_eq(node_vhost_add(&nd, "/", NULL, NULL, NULL, err, sizeof err), SL_OK);
}

static void teardown(void)
{
    qm_node_free(nd.qm);
    acc_free(nd.acc);
    node_config_free(&cfg);
}

static const char *doc_text =
    "{\"vhosts\":[{\"name\":\"v1\"}],"
    "\"users\":[{\"name\":\"ann\",\"password\":\"secret\",\"tags\":[\"administrator\"]}],"
    "\"permissions\":[{\"user\":\"ann\",\"vhost\":\"v1\",\"configure\":\".*\",\"write\":\".*\","
    "\"read\":\".*\"}],"
    "\"exchanges\":[{\"name\":\"x1\",\"vhost\":\"v1\",\"type\":\"topic\",\"durable\":true}],"
    "\"queues\":[{\"name\":\"q1\",\"vhost\":\"v1\",\"durable\":true,"
    "\"arguments\":{\"x-max-length\":10}}],"
    "\"bindings\":[{\"source\":\"x1\",\"vhost\":\"v1\",\"destination\":\"q1\","
    "\"destination_type\":\"queue\",\"routing_key\":\"a.#\",\"arguments\":{}}]}";

/* The entry of list k in doc whose field f is v, or NULL. */
static json_t *entry(json_t *doc, const char *k, const char *f, const char *v)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(doc, k), i, e)
    {
        json_t *s = json_object_get(e, f);
        if (json_is_string(s) && !strcmp(json_string_value(s), v))
            return e;
    }
    return NULL;
}

START_TEST(import_then_export)
{
    json_error_t je;
    json_t *doc = json_loads(doc_text, 0, &je);
    ck_assert_ptr_nonnull(doc);
    char err[700];
    ck_assert_msg(defs_import(&nd, doc, NULL, err, sizeof err) == SL_OK, "import: %s", err);
    json_decref(doc);

    json_t *out = defs_export(&nd, NULL);
    ck_assert_ptr_nonnull(out);
    ck_assert_ptr_nonnull(entry(out, "vhosts", "name", "v1"));
    json_t *u = entry(out, "users", "name", "ann");
    ck_assert_ptr_nonnull(u);
    ck_assert_ptr_null(json_object_get(u, "password")); /* hashes only */
    ck_assert_ptr_nonnull(json_object_get(u, "password_hash"));
    ck_assert_ptr_nonnull(entry(out, "permissions", "user", "ann"));
    json_t *x = entry(out, "exchanges", "name", "x1");
    ck_assert_ptr_nonnull(x);
    ck_assert_str_eq(json_string_value(json_object_get(x, "type")), "topic");
    json_t *q = entry(out, "queues", "name", "q1");
    ck_assert_ptr_nonnull(q);
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(q, "arguments"), "x-max-length")), 10);
    json_t *b = entry(out, "bindings", "source", "x1");
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(json_string_value(json_object_get(b, "routing_key")), "a.#");
    ck_assert_ptr_null(entry(out, "exchanges", "name", "amq.topic")); /* predeclared: left out */
    json_decref(out);

    /* RabbitMQ's per-vhost export: the vhost's objects, no users, vhosts or permissions */
    json_t *one = defs_export(&nd, "v1");
    ck_assert_ptr_nonnull(one);
    ck_assert_ptr_null(json_object_get(one, "users"));
    ck_assert_ptr_null(json_object_get(one, "permissions"));
    ck_assert_ptr_nonnull(entry(one, "queues", "name", "q1"));
    json_decref(one);
    ck_assert_ptr_null(defs_export(&nd, "no-such-vhost"));
}
END_TEST

START_TEST(malformed_changes_nothing)
{
    /* a good vhost first, then a user with no name: the whole document is refused */
    json_error_t je;
    json_t *doc =
        json_loads("{\"vhosts\":[{\"name\":\"v2\"}],\"users\":[{\"tags\":\"\"}]}", 0, &je);
    ck_assert_ptr_nonnull(doc);
    char err[700];
    ck_assert_int_eq(defs_import(&nd, doc, NULL, err, sizeof err), SL_ERR_SYNTAX);
    ck_assert_msg(err[0] != '\0', "refusal without a reason");
    json_decref(doc);
    ck_assert_ptr_null(qm_vhost_find(nd.qm, "v2", 2));
    ck_assert_ptr_null(acc_vhost_find(nd.acc, "v2", 2));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("defs");
    TCase *tc = tcase_create("document");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, import_then_export);
    tcase_add_test(tc, malformed_changes_nothing);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
