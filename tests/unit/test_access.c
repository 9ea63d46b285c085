/* test_access.c - unit tests for the access module (src/access): password hashes in
 * RabbitMQ's formats, users and tags, permission patterns with Erlang re semantics and
 * bounded cost, the checks and their RabbitMQ texts, topic permissions, limits, and the
 * records that make all of it durable (replay and snapshot give back the same state).
 */
#include <check.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access/access.h"
#include "access/verifier.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/mem.h"

static acc_db *A;
static char err[512];

static void setup(void)
{
    A = acc_new();
    ck_assert_int_eq(acc_vhost_put(A, "/", NULL, NULL, NULL, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_vhost_put(A, "other", "a vhost", "a, b", NULL, err, sizeof err), SL_OK);
}

static void teardown(void)
{
    acc_free(A);
    A = NULL;
}

static void add_user(const char *name, const char *password, const char *tags)
{
    acc_user_def d = {.name = name,
                      .password = password,
                      .password_len = password ? strlen(password) : 0,
                      .tags = tags};
    ck_assert_int_eq(acc_user_put(A, &d, NULL, err, sizeof err), SL_OK);
}

static int login(const char *name, const char *password, int loopback)
{
    const acc_user *u;
    return acc_login_password(A, name, strlen(name), (const uint8_t *)password, strlen(password),
                              loopback, &u, err, sizeof err) == SL_OK;
}

static sl_err check(const char *user, const char *vhost, acc_kind kind, const char *name,
                    acc_perm perm)
{
    return acc_check(A, user, vhost, kind, name, strlen(name), perm, err, sizeof err);
}

/* ------------------------------------------------------------------ hashes */

/* The example of RabbitMQ's documentation ("Computing Password Hash"): salt 908D C60A,
 * password test12. */
START_TEST(sha256_matches_rabbitmq)
{
    acc_user_def d = {.name = "u",
                      .password_hash = "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
                      .algo = ACC_HASH_SHA256};
    ck_assert_int_eq(acc_user_put(A, &d, NULL, err, sizeof err), SL_OK);
    ck_assert(login("u", "test12", 1));
    ck_assert(!login("u", "test13", 1));
    ck_assert_str_eq(err, "user 'u' - invalid credentials");
    ck_assert(!login("u", "", 1));
    char *x = acc_hash_export(acc_user_find(A, "u", 1));
    ck_assert_str_eq(x, "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR");
    sl_free(x);
}
END_TEST

START_TEST(every_algorithm_round_trips)
{
    for (int algo = ACC_HASH_SHA256; algo <= ACC_HASH_ARGON2ID; algo++) {
        uint8_t *h;
        size_t hl;
        ck_assert_int_eq(acc_hash_password((acc_hash)algo, (const uint8_t *)"s3cret", 6, &h, &hl),
                         0);
        ck_assert(acc_verify_password((acc_hash)algo, h, hl, (const uint8_t *)"s3cret", 6));
        ck_assert(!acc_verify_password((acc_hash)algo, h, hl, (const uint8_t *)"s3creT", 6));
        /* a second hash of the same password has another salt */
        uint8_t *h2;
        size_t hl2;
        acc_hash_password((acc_hash)algo, (const uint8_t *)"s3cret", 6, &h2, &hl2);
        ck_assert(hl != hl2 || memcmp(h, h2, hl));
        sl_free(h);
        sl_free(h2);
    }
    ck_assert_int_eq(acc_hash_parse(A, "rabbit_password_hashing_sha512"), ACC_HASH_SHA512);
    ck_assert_int_eq(acc_hash_parse(A, NULL), ACC_HASH_SHA256);
    ck_assert_int_eq(acc_hash_parse(A, "rabbit_password_hashing_sha1"), -1);
}
END_TEST

START_TEST(default_algorithm_for_new_passwords)
{
    acc_set_default_hash(A, ACC_HASH_ARGON2ID);
    add_user("slow", "pw", NULL);
    const acc_user *u = acc_user_find(A, "slow", 4);
    ck_assert_int_eq(u->algo, ACC_HASH_ARGON2ID);
    char *x = acc_hash_export(u);
    ck_assert(!strncmp(x, "$argon2id$v=19$m=19456,t=2,p=1$", 31));
    sl_free(x);
    ck_assert(login("slow", "pw", 1));
    ck_assert(!login("slow", "pW", 1));
}
END_TEST

START_TEST(bad_hashes_refused)
{
    acc_user_def d = {.name = "u", .password_hash = "not base64!", .algo = ACC_HASH_SHA256};
    ck_assert_int_eq(acc_user_put(A, &d, NULL, err, sizeof err), SL_ERR_PRECONDITION);
    d.password_hash = "AAAA"; /* decodes, but 3 bytes is no salt + digest */
    ck_assert_int_eq(acc_user_put(A, &d, NULL, err, sizeof err), SL_ERR_PRECONDITION);
    d.password_hash = "$argon2i$v=19$m=1,t=1,p=1$x$y";
    d.algo = ACC_HASH_ARGON2ID;
    ck_assert_int_eq(acc_user_put(A, &d, NULL, err, sizeof err), SL_ERR_PRECONDITION);
    ck_assert_ptr_null(acc_user_find(A, "u", 1));
    /* "" = no password: the user exists and cannot log in with any password */
    d.password_hash = "";
    d.algo = ACC_HASH_SHA256;
    ck_assert_int_eq(acc_user_put(A, &d, NULL, err, sizeof err), SL_OK);
    ck_assert(!login("u", "", 1));
    ck_assert(!login("u", "x", 1));
    const acc_user *u;
    ck_assert_int_eq(acc_login_external(A, "u", 1, 1, &u, err, sizeof err), SL_OK);
}
END_TEST

/* ------------------------------------------------------------------ users */

START_TEST(users_and_tags)
{
    int created;
    acc_user_def d = {.name = "alice",
                      .password = "pw",
                      .password_len = 2,
                      .tags = " monitoring,,administrator monitoring "};
    ck_assert_int_eq(acc_user_put(A, &d, &created, err, sizeof err), SL_OK);
    ck_assert(created);
    const acc_user *u = acc_user_find(A, "alice", 5);
    ck_assert_str_eq(u->tags, "monitoring,administrator");
    ck_assert(acc_is_admin(A, "alice") && acc_is_monitor(A, "alice"));
    /* tags NULL keeps them; no password keeps it */
    acc_user_def d2 = {.name = "alice"};
    ck_assert_int_eq(acc_user_put(A, &d2, &created, err, sizeof err), SL_OK);
    ck_assert(!created);
    ck_assert_str_eq(acc_user_find(A, "alice", 5)->tags, "monitoring,administrator");
    ck_assert(login("alice", "pw", 1));
    acc_user_def d3 = {.name = "alice", .tags = "management"};
    acc_user_put(A, &d3, NULL, err, sizeof err);
    ck_assert(!acc_is_admin(A, "alice"));
    ck_assert(acc_user_has_tag(acc_user_find(A, "alice", 5), ACC_TAGS_MGMT));
    ck_assert_int_eq(acc_user_delete(A, "alice", err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_user_delete(A, "alice", err, sizeof err), SL_ERR_NOT_FOUND);
    ck_assert(!login("alice", "pw", 1));
}
END_TEST

START_TEST(invalid_names_refused)
{
    static const char *const bad[] = {
        "", "\xc3\x28", "\xed\xa0\x80", "\xf8\x88\x80\x80\x80", "\xc0\xaf", "ok\xe2\x82"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        acc_user_def d = {.name = bad[i], .password = "x", .password_len = 1};
        ck_assert_int_eq(acc_user_put(A, &d, NULL, err, sizeof err), SL_ERR_PRECONDITION);
        ck_assert_int_eq(acc_vhost_put(A, bad[i], NULL, NULL, NULL, err, sizeof err),
                         SL_ERR_PRECONDITION);
    }
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    acc_user_def d = {.name = longname, .password = "x", .password_len = 1};
    ck_assert_int_eq(acc_user_put(A, &d, NULL, err, sizeof err), SL_ERR_PRECONDITION);
    acc_user_def ok = {.name = "j\xc3\xb6rg", .password = "x", .password_len = 1};
    ck_assert_int_eq(acc_user_put(A, &ok, NULL, err, sizeof err), SL_OK);
}
END_TEST

START_TEST(loopback_users)
{
    add_user("guest", "guest", "administrator");
    ck_assert(login("guest", "guest", 1));
    ck_assert(!login("guest", "guest", 0));
    ck_assert_str_eq(err, "user 'guest' can only connect via localhost");
    acc_set_loopback_user(A, NULL, 0);
    ck_assert(login("guest", "guest", 0));
}
END_TEST

/* ------------------------------------------------------------------ permissions */

START_TEST(checks_follow_rabbitmq)
{
    add_user("u", "pw", NULL);
    /* no entry: everything refused, connection.open too */
    ck_assert_int_eq(check("u", "/", ACC_QUEUE, "q", ACC_READ), SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "access to queue 'q' in vhost '/' refused for user 'u'");
    ck_assert_int_eq(acc_check_vhost(A, "u", "/", err, sizeof err), SL_ERR_NOT_ALLOWED);
    ck_assert_str_eq(err, "access to vhost '/' refused for user 'u'");

    ck_assert_int_eq(acc_perm_set(A, "u", "/", "^cfg-", "w", "", err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_vhost(A, "u", "/", err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_vhost(A, "u", "other", err, sizeof err), SL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(check("u", "/", ACC_QUEUE, "cfg-1", ACC_CONFIGURE), SL_OK);
    ck_assert_int_eq(check("u", "/", ACC_QUEUE, "x-cfg-1", ACC_CONFIGURE), SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "access to queue 'x-cfg-1' in vhost '/' refused for user 'u'");
    /* unanchored, as Erlang's re:run: "w" matches anywhere */
    ck_assert_int_eq(check("u", "/", ACC_EXCHANGE, "xwx", ACC_WRITE), SL_OK);
    /* "" means "^$": nothing named */
    ck_assert_int_eq(check("u", "/", ACC_QUEUE, "anything", ACC_READ), SL_ERR_ACCESS_REFUSED);
    /* the default exchange is amq.default */
    ck_assert_int_eq(check("u", "/", ACC_EXCHANGE, "", ACC_CONFIGURE), SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "access to exchange 'amq.default' in vhost '/' refused for user 'u'");
    /* another vhost's entry does not count */
    ck_assert_int_eq(check("u", "other", ACC_QUEUE, "cfg-1", ACC_CONFIGURE), SL_ERR_ACCESS_REFUSED);
    /* unknown user: refused, named */
    ck_assert_int_eq(check("nobody", "/", ACC_QUEUE, "cfg-1", ACC_CONFIGURE),
                     SL_ERR_ACCESS_REFUSED);
    ck_assert_int_eq(acc_perm_clear(A, "u", "/", err, sizeof err), SL_OK);
    ck_assert_int_eq(check("u", "/", ACC_QUEUE, "cfg-1", ACC_CONFIGURE), SL_ERR_ACCESS_REFUSED);
    ck_assert_int_eq(acc_perm_clear(A, "u", "/", err, sizeof err), SL_ERR_NOT_FOUND);
}
END_TEST

START_TEST(subqueues_checked_as_their_queue)
{
    add_user("u", "pw", NULL);
    acc_perm_set(A, "u", "/", "", "^orders$", "^orders$", err, sizeof err);
    ck_assert_int_eq(check("u", "/", ACC_QUEUE, "orders;poison", ACC_READ), SL_OK);
    ck_assert_int_eq(check("u", "/", ACC_QUEUE, "orders;journal", ACC_WRITE), SL_OK);
    ck_assert_int_eq(check("u", "/", ACC_QUEUE, "orders2;poison", ACC_READ), SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "access to queue 'orders2;poison' in vhost '/' refused for user 'u'");
    /* MSMQ move: receive (read) on the source, move (write) on the target */
    acc_perm_set(A, "u", "other", "", "^in$", "^out$", err, sizeof err);
    ck_assert_int_eq(acc_check_move(A, "u", "other", "out", "other", "in", err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_move(A, "u", "other", "in", "other", "out", err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "access to queue 'in' in vhost 'other' refused for user 'u'");
    ck_assert_int_eq(acc_check_move(A, "u", "other", "out", "/", "orders;x", err, sizeof err),
                     SL_OK);
    ck_assert_int_eq(acc_check_move(A, "u", "other", "out", "/", "elsewhere", err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "access to queue 'elsewhere' in vhost '/' refused for user 'u'");
    ck_assert_int_eq(acc_check_link_write(A, "u", "other", "in", err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_receive(A, "u", "other", "in", err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
}
END_TEST

START_TEST(bad_patterns_refused)
{
    add_user("u", "pw", NULL);
    ck_assert_int_eq(acc_perm_set(A, "u", "/", ".*", "(unclosed", ".*", err, sizeof err),
                     SL_ERR_PRECONDITION);
    ck_assert_msg(strstr(err, "write pattern '(unclosed'") && strstr(err, "offset"), "%s", err);
    ck_assert_ptr_null(acc_perm_get(A, "u", "/"));
    ck_assert_int_eq(acc_perm_set(A, "nobody", "/", ".*", ".*", ".*", err, sizeof err),
                     SL_ERR_NOT_FOUND);
    ck_assert_int_eq(acc_perm_set(A, "u", "nowhere", ".*", ".*", ".*", err, sizeof err),
                     SL_ERR_NOT_FOUND);
    char big[ACC_PATTERN_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    ck_assert_int_eq(acc_perm_set(A, "u", "/", big, ".*", ".*", err, sizeof err),
                     SL_ERR_PRECONDITION);
}
END_TEST

/* A pattern with exponential backtracking against a 255-byte name: the limits stop it, it
 * refuses, and it does not take long. */
START_TEST(catastrophic_pattern_is_bounded)
{
    add_user("u", "pw", NULL);
    ck_assert_int_eq(
        acc_perm_set(A, "u", "/", "^(a+)+$", "^(a|aa)+$", "^(a|a?)+$", err, sizeof err), SL_OK);
    char name[256];
    memset(name, 'a', 254);
    name[254] = 'b';
    name[255] = 0;
    uint64_t t0 = sl_now_ms();
    for (int p = 0; p < 3; p++)
        ck_assert_int_eq(check("u", "/", ACC_QUEUE, name, (acc_perm)p), SL_ERR_ACCESS_REFUSED);
    uint64_t took = sl_now_ms() - t0;
    ck_assert_msg(took < 2000, "three bounded checks took %llu ms", (unsigned long long)took);
    /* the same patterns still work on names they match */
    name[254] = 'a';
    ck_assert_int_eq(check("u", "/", ACC_QUEUE, name, ACC_CONFIGURE), SL_OK);
}
END_TEST

START_TEST(topic_permissions)
{
    add_user("u", "pw", NULL);
    acc_perm_set(A, "u", "/", ".*", ".*", ".*", err, sizeof err);
    /* none: every key allowed */
    ck_assert(!acc_has_topic_perms(A, "u", "/", "amq.topic"));
    ck_assert_int_eq(
        acc_check_topic(A, "u", "/", "amq.topic", "a.b", 3, ACC_WRITE, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_topic_perm_set(A, "u", "/", "amq.topic", "^{username}\\.",
                                        "^pub\\.{vhost}", err, sizeof err),
                     SL_OK);
    ck_assert(acc_has_topic_perms(A, "u", "/", "amq.topic"));
    ck_assert_int_eq(
        acc_check_topic(A, "u", "/", "amq.topic", "u.x", 3, ACC_WRITE, err, sizeof err), SL_OK);
    ck_assert_int_eq(
        acc_check_topic(A, "u", "/", "amq.topic", "v.x", 3, ACC_WRITE, err, sizeof err),
        SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "access to topic 'v.x' in exchange 'amq.topic' in vhost '/' "
                          "refused for user 'u'");
    ck_assert_int_eq(
        acc_check_topic(A, "u", "/", "amq.topic", "pub./", 5, ACC_READ, err, sizeof err), SL_OK);
    /* another exchange has none */
    ck_assert_int_eq(
        acc_check_topic(A, "u", "/", "other.topic", "v.x", 3, ACC_WRITE, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_topic_perm_clear(A, "u", "/", NULL, err, sizeof err), SL_OK);
    ck_assert(!acc_has_topic_perms(A, "u", "/", "amq.topic"));
    ck_assert_int_eq(acc_topic_perm_clear(A, "u", "/", NULL, err, sizeof err), SL_ERR_NOT_FOUND);
}
END_TEST

START_TEST(vhost_delete_drops_its_permissions)
{
    add_user("u", "pw", NULL);
    acc_perm_set(A, "u", "other", ".*", ".*", ".*", err, sizeof err);
    acc_perm_set(A, "u", "/", ".*", ".*", ".*", err, sizeof err);
    acc_topic_perm_set(A, "u", "other", "amq.topic", ".*", ".*", err, sizeof err);
    acc_vhost_set_limit(A, "other", "max-queues", 3, err, sizeof err);
    uint64_t g = acc_generation(A);
    ck_assert_int_eq(acc_vhost_delete(A, "other", err, sizeof err), SL_OK);
    ck_assert(acc_generation(A) != g);
    ck_assert_ptr_null(acc_perm_get(A, "u", "other"));
    ck_assert(!acc_has_topic_perms(A, "u", "other", "amq.topic"));
    ck_assert_ptr_nonnull(acc_perm_get(A, "u", "/"));
    /* created again: empty, no limits */
    acc_vhost_put(A, "other", NULL, NULL, NULL, err, sizeof err);
    ck_assert_ptr_null(acc_perm_get(A, "u", "other"));
    ck_assert_int_eq(acc_vhost_find(A, "other", 5)->max_queues, ACC_NO_LIMIT);
}
END_TEST

START_TEST(limits)
{
    add_user("u", "pw", NULL);
    ck_assert_int_eq(acc_vhost_set_limit(A, "/", "max-connections", 2, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_vhost_set_limit(A, "/", "max-queues", 0, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_vhost_set_limit(A, "/", "max-bananas", 1, err, sizeof err),
                     SL_ERR_INVALID_PARAMETER);
    ck_assert_int_eq(acc_check_connection_limits(A, "u", "/", 1, 0, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_connection_limits(A, "u", "/", 2, 0, err, sizeof err),
                     SL_ERR_NOT_ALLOWED);
    ck_assert_str_eq(err, "access to vhost '/' refused for user 'u': connection limit (2) is "
                          "reached");
    ck_assert_int_eq(acc_check_queue_limit(A, "/", 0, "q", err, sizeof err), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "cannot declare queue 'q': queue limit in vhost '/' (0) is reached");
    ck_assert_int_eq(acc_user_set_limit(A, "u", "max-connections", 1, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_user_set_limit(A, "u", "max-channels", 3, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_connection_limits(A, "u", "other", 0, 1, err, sizeof err),
                     SL_ERR_NOT_ALLOWED);
    ck_assert_str_eq(err, "connection refused for user 'u': user connection limit (1) is reached");
    ck_assert_int_eq(acc_check_channel_limit(A, "u", 2, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_channel_limit(A, "u", 3, err, sizeof err), SL_ERR_NOT_ALLOWED);
    ck_assert_int_eq(acc_vhost_set_limit(A, "/", "max-connections", -1, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_connection_limits(A, "v", "/", 1000, 0, err, sizeof err), SL_OK);
}
END_TEST

START_TEST(actions_need_administrator)
{
    add_user("admin", "pw", "administrator");
    add_user("mon", "pw", "monitoring");
    ck_assert_int_eq(acc_check_action(A, "admin", "TIDY", err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_action(A, "mon", "TIDY", err, sizeof err), SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "management action 'TIDY' refused for user 'mon': administrator tag "
                          "required");
}
END_TEST

START_TEST(links_need_the_tag_and_speak_for_one_node)
{
    static const uint8_t X[16] = {0x11}, Y[16] = {0x22};
    add_user("admin", "pw", "administrator");
    add_user("mgr", "pw", "management");
    add_user("lnk", "pw", "link");
    acc_perm_set(A, "mgr", "/", ".*", ".*", ".*", err, sizeof err);
    /* the administrator speaks for any node and is bound to none */
    ck_assert_int_eq(acc_check_link_login(A, "admin", X, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_link_login(A, "admin", Y, err, sizeof err), SL_OK);
    ck_assert(!acc_user_find(A, "admin", 5)->link_bound);
    /* every permission, no tag: refused */
    ck_assert_int_eq(acc_check_link_login(A, "mgr", X, err, sizeof err), SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "user 'mgr' may not open a node-to-node link (sluice_link for node "
                          "11000000000000000000000000000000): the administrator or link tag is "
                          "required");
    ck_assert_int_eq(acc_check_link_login(A, "nobody", X, err, sizeof err), SL_ERR_ACCESS_REFUSED);
    /* the first session binds the link user; another node is refused, the same goes on */
    uint64_t g = acc_generation(A);
    ck_assert_int_eq(acc_check_link_login(A, "lnk", X, err, sizeof err), SL_OK);
    ck_assert_uint_gt(acc_generation(A), g);
    ck_assert_int_eq(acc_check_link_login(A, "lnk", Y, err, sizeof err), SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "user 'lnk' speaks for node 11000000000000000000000000000000, not for "
                          "node 22000000000000000000000000000000 (a link user is bound to one "
                          "node)");
    ck_assert_int_eq(acc_check_link_login(A, "lnk", X, err, sizeof err), SL_OK);
    /* the link tag alone gives no other right */
    ck_assert_int_eq(acc_check_link_write(A, "lnk", "/", "q", err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    acc_perm_set(A, "lnk", "/", "", "^q$", "", err, sizeof err);
    ck_assert_int_eq(acc_check_link_write(A, "lnk", "/", "q", err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check(A, "lnk", "/", ACC_QUEUE, "q", 1, ACC_READ, err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    ck_assert(!acc_is_admin(A, "lnk"));
    /* pinned ahead (config user.NAME.link_node), and unbound */
    ck_assert_int_eq(acc_user_link_bind(A, "lnk", Y, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_link_login(A, "lnk", X, err, sizeof err), SL_ERR_ACCESS_REFUSED);
    ck_assert_int_eq(acc_user_link_bind(A, "lnk", NULL, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_check_link_login(A, "lnk", X, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_user_link_bind(A, "ghost", X, err, sizeof err), SL_ERR_NOT_FOUND);
    /* deleting the user drops the binding with it */
    acc_user_delete(A, "lnk", err, sizeof err);
    add_user("lnk", "pw", "link");
    ck_assert_int_eq(acc_check_link_login(A, "lnk", Y, err, sizeof err), SL_OK);
}
END_TEST

/* ------------------------------------------------------------------ records */

typedef struct recs {
    sl_buf b; /* type:u8 len:u32 payload, repeated */
    int n;
} recs;

static void collect(void *ctx, uint8_t type, const uint8_t *p, size_t len)
{
    recs *r = ctx;
    sl_buf_put_u8(&r->b, type);
    sl_buf_put_u32(&r->b, (uint32_t)len);
    sl_buf_append(&r->b, p, len);
    r->n++;
}

static void replay_all(acc_db *to, const recs *r)
{
    for (size_t o = 0; o < r->b.len;) {
        uint8_t type = r->b.data[o];
        uint32_t len = sl_get_u32(r->b.data + o + 1);
        ck_assert_int_eq(acc_replay(to, type, r->b.data + o + 5, len), 0);
        o += 5 + len;
    }
}

static void snapshot_of(acc_db *a, recs *r)
{
    sl_buf_init(&r->b);
    r->n = 0;
    acc_snapshot(a, collect, r);
}

START_TEST(records_replay_to_the_same_state)
{
    recs log;
    sl_buf_init(&log.b);
    log.n = 0;
    acc_set_persist(A, collect, &log);
    acc_mark_initialized(A);
    acc_vhost_put(A, "v1", "desc", "t1,t2", NULL, err, sizeof err);
    acc_vhost_put(A, "gone", NULL, NULL, NULL, err, sizeof err);
    add_user("alice", "pw", "administrator");
    add_user("bob", "pw2", "management");
    add_user("carol", "pw3", NULL);
    acc_perm_set(A, "alice", "v1", ".*", "w", "r", err, sizeof err);
    acc_perm_set(A, "bob", "v1", "", "", ".*", err, sizeof err);
    acc_perm_set(A, "bob", "gone", ".*", ".*", ".*", err, sizeof err);
    acc_perm_set(A, "carol", "v1", ".*", ".*", ".*", err, sizeof err);
    acc_topic_perm_set(A, "bob", "v1", "amq.topic", "^a", "^b", err, sizeof err);
    acc_topic_perm_set(A, "bob", "v1", "t2", "^c", "^d", err, sizeof err);
    acc_topic_perm_clear(A, "bob", "v1", "t2", err, sizeof err);
    acc_vhost_set_limit(A, "v1", "max-queues", 7, err, sizeof err);
    acc_user_set_limit(A, "bob", "max-channels", 2, err, sizeof err);
    acc_perm_clear(A, "alice", "v1", err, sizeof err);
    acc_perm_set(A, "alice", "v1", "a", "b", "c", err, sizeof err);
    acc_user_delete(A, "carol", err, sizeof err);
    acc_vhost_delete(A, "gone", err, sizeof err);
    static const uint8_t node[16] = {0xab, 0xcd};
    add_user("link-a", "pw4", "link");
    ck_assert_int_eq(acc_check_link_login(A, "link-a", node, err, sizeof err), SL_OK);
    ck_assert_int_gt(log.n, 15);

    acc_db *B = acc_new(); /* with the vhosts setup() made before the hook was set */
    acc_vhost_put(B, "/", NULL, NULL, NULL, err, sizeof err);
    acc_vhost_put(B, "other", "a vhost", "a, b", NULL, err, sizeof err);
    replay_all(B, &log);
    ck_assert(acc_initialized(B));
    recs s1, s2;
    snapshot_of(A, &s1);
    snapshot_of(B, &s2);
    ck_assert_int_eq(s1.n, s2.n);
    ck_assert_int_eq(s1.b.len, s2.b.len);
    ck_assert(!memcmp(s1.b.data, s2.b.data, s1.b.len));
    /* and it behaves the same */
    const acc_user *u;
    ck_assert_int_eq(
        acc_login_password(B, "bob", 3, (const uint8_t *)"pw2", 3, 1, &u, err, sizeof err), SL_OK);
    ck_assert_ptr_null(acc_user_find(B, "carol", 5));
    ck_assert_int_eq(acc_check(B, "alice", "v1", ACC_QUEUE, "a", 1, ACC_CONFIGURE, err, sizeof err),
                     SL_OK);
    ck_assert_int_eq(acc_check(B, "alice", "v1", ACC_QUEUE, "x", 1, ACC_CONFIGURE, err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    ck_assert(acc_has_topic_perms(B, "bob", "v1", "amq.topic"));
    ck_assert(!acc_has_topic_perms(B, "bob", "v1", "t2"));
    ck_assert_int_eq(acc_vhost_find(B, "v1", 2)->max_queues, 7);
    ck_assert_int_eq(acc_user_find(B, "bob", 3)->max_channels, 2);
    ck_assert_ptr_null(acc_vhost_find(B, "gone", 4));
    ck_assert_ptr_null(acc_perm_get(B, "bob", "gone"));
    static const uint8_t other[16] = {0xab};
    ck_assert_int_eq(acc_check_link_login(B, "link-a", other, err, sizeof err),
                     SL_ERR_ACCESS_REFUSED); /* the binding came back */
    ck_assert_int_eq(acc_check_link_login(B, "link-a", node, err, sizeof err), SL_OK);
    /* the snapshot replays to the same state too */
    acc_db *C = acc_new();
    replay_all(C, &s2);
    recs s3;
    snapshot_of(C, &s3);
    ck_assert_int_eq(s3.b.len, s2.b.len);
    ck_assert(!memcmp(s3.b.data, s2.b.data, s3.b.len));
    sl_buf_free(&s1.b);
    sl_buf_free(&s2.b);
    sl_buf_free(&s3.b);
    sl_buf_free(&log.b);
    acc_free(B);
    acc_free(C);
}
END_TEST

START_TEST(nt_hashes_kept_replayed_and_dropped)
{
    static const uint8_t pw_hash[16] = {0xa4, 0xf4, 0x9c, 0x40, 0x65, 0x10, 0xbd, 0xca,
                                        0xb6, 0x82, 0x4e, 0xe7, 0xc3, 0x0f, 0xd8, 0x52};
    uint8_t h[16];
    recs log;
    sl_buf_init(&log.b);
    log.n = 0;
    acc_set_persist(A, collect, &log);
    add_user("off", "Password", NULL); /* msrpc.ntlm_hashes off (the default): none kept */
    ck_assert_int_eq(acc_user_nt_hash(A, "off", h), -2);
    acc_set_keep_nt_hashes(A, 1);
    add_user("nt", "Password", "management");
    ck_assert_int_eq(acc_user_nt_hash(A, "nt", h), 0);
    ck_assert_mem_eq(h, pw_hash, 16); /* MS-NLMP 4.2.1 */
    ck_assert_int_eq(acc_user_nt_hash(A, "nobody", h), -1);
    add_user("nt", NULL, "administrator"); /* tags only: the NT hash stays */
    ck_assert_int_eq(acc_user_nt_hash(A, "nt", h), 0);
    /* an imported hash leaves none */
    add_user("imp", "x", NULL);
    acc_user_def d = {.name = "imp", .password_hash = "", .algo = ACC_HASH_SHA256};
    ck_assert_int_eq(acc_user_put(A, &d, NULL, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_user_nt_hash(A, "imp", h), -2);
    /* the log and a snapshot replay to the same NT hashes */
    acc_db *B = acc_new();
    replay_all(B, &log);
    ck_assert_int_eq(acc_user_nt_hash(B, "nt", h), 0);
    ck_assert_mem_eq(h, pw_hash, 16);
    ck_assert_int_eq(acc_user_nt_hash(B, "imp", h), -2);
    ck_assert_int_eq(acc_user_nt_hash(B, "off", h), -2);
    recs s;
    snapshot_of(B, &s);
    acc_db *C = acc_new();
    replay_all(C, &s);
    ck_assert_int_eq(acc_user_nt_hash(C, "nt", h), 0);
    ck_assert_mem_eq(h, pw_hash, 16);
    /* dropped (msrpc.ntlm_hashes off at start), durably */
    int before = log.n;
    acc_drop_nt_hashes(A);
    ck_assert_int_eq(acc_user_nt_hash(A, "nt", h), -2);
    ck_assert_int_eq(log.n, before + 1);
    acc_db *D = acc_new();
    replay_all(D, &log);
    ck_assert_int_eq(acc_user_nt_hash(D, "nt", h), -2);
    /* a malformed NT hash record */
    static const uint8_t bad[] = {2, 0, 'n', 't', 5, 1, 2};
    ck_assert_int_eq(acc_replay(D, ACC_REC_USER_NTHASH, bad, sizeof bad), -1);
    sl_buf_free(&s.b);
    sl_buf_free(&log.b);
    acc_free(B);
    acc_free(C);
    acc_free(D);
}
END_TEST

START_TEST(malformed_records_rejected)
{
    static const uint8_t shortrec[] = {5, 0, 'a', 'b'};
    ck_assert_int_eq(acc_replay(A, ACC_REC_USER, shortrec, sizeof shortrec), -1);
    ck_assert_int_eq(acc_replay(A, ACC_REC_VHOST, shortrec, sizeof shortrec), -1);
    ck_assert_int_eq(acc_replay(A, ACC_REC_USER_LINK, shortrec, sizeof shortrec), -1);
    ck_assert_int_eq(acc_replay(A, 39, NULL, 0), -1);
    /* trailing bytes */
    static const uint8_t trailing[] = {1, 0, 'v', 0, 0, 0, 0, 9};
    ck_assert_int_eq(acc_replay(A, ACC_REC_VHOST, trailing, sizeof trailing), -1);
    /* unknown algorithm */
    static const uint8_t badalgo[] = {1, 0, 'u', 77, 0, 0, 0, 0, 0};
    ck_assert_int_eq(acc_replay(A, ACC_REC_USER, badalgo, sizeof badalgo), -1);
}
END_TEST

/* ------------------------------------------------------------------ slow checks off the loop */

struct answers {
    int n, ok[8];
    void *owner[8];
};
static struct answers ANS;

static void answered(void *owner, int ok)
{
    ck_assert_int_lt(ANS.n, 8);
    ANS.owner[ANS.n] = owner;
    ANS.ok[ANS.n++] = ok;
}

/* Wait (bounded) for the verifier's fd and deliver, until `want` answers came. */
static void deliver_until(acc_verifier *v, int want)
{
    for (int i = 0; i < 200 && ANS.n < want; i++) {
        struct pollfd p = {.fd = acc_verifier_fd(v), .events = POLLIN};
        if (poll(&p, 1, 50) > 0)
            acc_verifier_run_done(v);
    }
    ck_assert_int_eq(ANS.n, want);
}

START_TEST(verifier_answers_cancels_and_bounds)
{
    acc_set_default_hash(A, ACC_HASH_ARGON2ID);
    add_user("slow", "pw", NULL);
    const acc_user *u = acc_user_find(A, "slow", 4);
    ck_assert(acc_login_is_slow(u, 2));
    ck_assert(!acc_login_is_slow(u, 0)); /* a blank password is refused inline */
    acc_verifier *v = acc_verifier_new(3);
    ck_assert_ptr_nonnull(v);
    memset(&ANS, 0, sizeof ANS);
    int o1, o2, o3;
    acc_verify_job *j1 = acc_verifier_post(v, u->algo, u->hash, u->hash_len, (const uint8_t *)"pw",
                                           2, answered, &o1);
    acc_verify_job *j2 = acc_verifier_post(v, u->algo, u->hash, u->hash_len, (const uint8_t *)"no",
                                           2, answered, &o2);
    acc_verify_job *j3 = acc_verifier_post(v, u->algo, u->hash, u->hash_len, (const uint8_t *)"pw",
                                           2, answered, &o3);
    ck_assert(j1 && j2 && j3);
    /* the bound: a fourth waits for none of them, it is refused */
    ck_assert_ptr_null(acc_verifier_post(v, u->algo, u->hash, u->hash_len, (const uint8_t *)"pw", 2,
                                         answered, &o1));
    ck_assert_uint_eq(acc_verifier_pending(v), 3);
    acc_verify_cancel(j2); /* its owner went away: never answered */
    deliver_until(v, 2);
    ck_assert_ptr_eq(ANS.owner[0], &o1);
    ck_assert_int_eq(ANS.ok[0], 1);
    ck_assert_ptr_eq(ANS.owner[1], &o3);
    ck_assert_int_eq(ANS.ok[1], 1);
    /* the cancelled one is freed once done; nothing more arrives */
    for (int i = 0; i < 40 && acc_verifier_pending(v) > 0; i++) {
        struct pollfd p = {.fd = acc_verifier_fd(v), .events = POLLIN};
        if (poll(&p, 1, 50) > 0)
            acc_verifier_run_done(v);
    }
    ck_assert_uint_eq(acc_verifier_pending(v), 0);
    ck_assert_int_eq(ANS.n, 2);
    /* a wrong password answers 0; a job still queued at the end is freed unanswered */
    acc_verifier_post(v, u->algo, u->hash, u->hash_len, (const uint8_t *)"nope", 4, answered, &o2);
    deliver_until(v, 3);
    ck_assert_int_eq(ANS.ok[2], 0);
    acc_verifier_post(v, u->algo, u->hash, u->hash_len, (const uint8_t *)"pw", 2, answered, &o1);
    acc_verifier_post(v, u->algo, u->hash, u->hash_len, (const uint8_t *)"pw", 2, answered, &o1);
    acc_verifier_free(v);
    ck_assert_int_eq(ANS.n, 3);
}
END_TEST

START_TEST(checked_login_sees_changes_made_meanwhile)
{
    acc_set_default_hash(A, ACC_HASH_ARGON2ID);
    add_user("slow", "pw", NULL);
    const acc_user *u = acc_user_find(A, "slow", 4), *out;
    uint8_t *snap = sl_xmalloc(u->hash_len);
    size_t n = u->hash_len;
    memcpy(snap, u->hash, n);
    ck_assert_int_eq(acc_login_checked(A, "slow", 4, snap, n, 1, 1, &out, err, sizeof err), SL_OK);
    ck_assert_ptr_eq(out, u);
    ck_assert_int_eq(acc_login_checked(A, "slow", 4, snap, n, 0, 1, &out, err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "user 'slow' - invalid credentials");
    /* the password changed while the old one was being checked: refused */
    add_user("slow", "new", NULL);
    ck_assert_int_eq(acc_login_checked(A, "slow", 4, snap, n, 1, 1, &out, err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    /* a loopback user from elsewhere, as acc_login_password says it */
    u = acc_user_find(A, "slow", 4);
    memcpy(snap, u->hash, n);
    acc_set_loopback_user(A, "slow", 1);
    ck_assert_int_eq(acc_login_checked(A, "slow", 4, snap, n, 1, 0, &out, err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    ck_assert_str_eq(err, "user 'slow' can only connect via localhost");
    /* deleted meanwhile */
    ck_assert_int_eq(acc_user_delete(A, "slow", err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_login_checked(A, "slow", 4, snap, n, 1, 1, &out, err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    sl_free(snap);
}
END_TEST

static Suite *access_suite(void)
{
    Suite *s = suite_create("access");
    TCase *tc = tcase_create("access");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, sha256_matches_rabbitmq);
    tcase_add_test(tc, every_algorithm_round_trips);
    tcase_add_test(tc, default_algorithm_for_new_passwords);
    tcase_add_test(tc, bad_hashes_refused);
    tcase_add_test(tc, users_and_tags);
    tcase_add_test(tc, invalid_names_refused);
    tcase_add_test(tc, loopback_users);
    tcase_add_test(tc, checks_follow_rabbitmq);
    tcase_add_test(tc, subqueues_checked_as_their_queue);
    tcase_add_test(tc, bad_patterns_refused);
    tcase_add_test(tc, catastrophic_pattern_is_bounded);
    tcase_add_test(tc, topic_permissions);
    tcase_add_test(tc, vhost_delete_drops_its_permissions);
    tcase_add_test(tc, limits);
    tcase_add_test(tc, actions_need_administrator);
    tcase_add_test(tc, records_replay_to_the_same_state);
    tcase_add_test(tc, malformed_records_rejected);
    tcase_add_test(tc, nt_hashes_kept_replayed_and_dropped);
    tcase_add_test(tc, links_need_the_tag_and_speak_for_one_node);
    tcase_add_test(tc, verifier_answers_cancels_and_bounds);
    tcase_add_test(tc, checked_login_sees_changes_made_meanwhile);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(access_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
