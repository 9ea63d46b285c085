/* test_lister.c - unit tests for the node's lists and rules below the doors (src/node/lister.c,
 * src/node/rules.c, src/node/totals.c): page parameters as RabbitMQ reads them, sort keys whose
 * byte order is RabbitMQ's order, the name filter, a cursor over several vhosts in both
 * directions and by rank, the bindings walk and a door's clients walk resumed across slices,
 * the refusals' texts, and the totals.
 */
#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access/access.h"
#include "amqp/method.h"
#include "amqp/table.h"
#include "core/mem.h"
#include "node/get.h"
#include "node/lister.h"
#include "node/node.h"
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
    long pg, size;
    ck_assert_int_eq(node_page_params("2", NULL, &pg, &size), 0);
    ck_assert(pg == 2 && size == NODE_PAGE_SIZE_DEFAULT);
    ck_assert_int_eq(node_page_params("1", "500", &pg, &size), 0);
    ck_assert_int_eq(node_page_params("1", "x", &pg, &size), -1);
    ck_assert_int_eq(node_page_params("1.0", "5", &pg, &size), -1);
    ck_assert_int_eq(node_page_params("0", "5", &pg, &size), -2);
    ck_assert_int_eq(node_page_params("1", "501", &pg, &size), -2);
    ck_assert_int_eq(node_page_params("1", "-5", &pg, &size), -2);
    ck_assert_int_eq(node_page_params("99999999999999999999999", "5", &pg, &size), 0);
    ck_assert_int_eq(pg, NODE_PAGE_NUMBER_MAX);
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

/* The vhosts a user may list; matches collected, paged by rank, and found again. */
static void key_of_name_reversed(void *ctx, void *item, sl_buf *key)
{
    (*(int *)ctx)++;
    const char *name = ((qm_exchange *)item)->name;
    node_sortkey_u64(key, UINT64_MAX - (uint64_t)(unsigned char)name[strlen(name) - 1]);
}

START_TEST(listed_vhosts_and_matches)
{
    qm_vhost *a = qm_vhost_create(N, "a");
    qm_vhost_create(N, "b");
    acc_db *acc = acc_new();
    ck_assert_int_eq(acc_vhost_put(acc, "a", NULL, NULL, NULL, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_vhost_put(acc, "b", NULL, NULL, NULL, err, sizeof err), SL_OK);
    acc_user_def u = {.name = "u", .password = "pw", .password_len = 2};
    ck_assert_int_eq(acc_user_put(acc, &u, NULL, err, sizeof err), SL_OK);
    ck_assert_int_eq(acc_perm_set(acc, "u", "a", ".*", ".*", ".*", err, sizeof err), SL_OK);
    node_cursor c = {.kind = NODE_LIST_EXCHANGES};
    node_cursor_listed_vhosts(N, acc, &c, "u", 0, 0);
    ck_assert(c.n_vhosts == 1 && !strcmp(c.vhosts[0], "a"));
    node_cursor_free(&c);
    node_cursor all = {.kind = NODE_LIST_EXCHANGES};
    node_cursor_listed_vhosts(N, acc, &all, "u", 1, 0); /* an administrator: every one */
    ck_assert(all.n_vhosts == 2 && !strcmp(all.vhosts[1], "b"));
    node_cursor_free(&all);
    acc_free(acc);

    /* a's exchanges whose name has "x", keyed by their last letter descending */
    exchange(a, "x1");
    exchange(a, "x3");
    exchange(a, "x2");
    node_cursor one = {.kind = NODE_LIST_EXCHANGES, .only = sl_xstrdup("a")};
    node_filter f;
    ck_assert_int_eq(node_filter_init(&f, "x", 0, err, sizeof err), 0);
    sl_oset s;
    memset(&s, 0, sizeof s);
    uint64_t total = 0;
    int keyed = 0;
    int done = 0;
    for (int i = 0; i < 100 && !done; i++)
        done = node_matches_collect(N, &one, &f, &s, &total, key_of_name_reversed, &keyed, 0);
    ck_assert(done);
    ck_assert_uint_eq(total, sl_oset_count(&a->exchange_order));
    ck_assert_uint_eq(sl_oset_count(&s), 3);
    ck_assert_int_eq(keyed, 3);
    /* page by rank: offset 1 is x2, in reverse x2 too; x3 gone is skipped */
    sl_onode *at = node_matches_at(&s, 1, 0);
    qm_exchange *x = node_matches_next_item(N, NODE_LIST_EXCHANGES, &at, 0);
    ck_assert_str_eq(x->name, "x2");
    at = node_matches_at(&s, 0, 1);
    ck_assert_str_eq(((qm_exchange *)node_matches_next_item(N, NODE_LIST_EXCHANGES, &at, 1))->name,
                     "x1");
    ck_assert_ptr_null(node_matches_at(&s, 3, 0));
    ck_assert_int_eq(qm_exchange_delete(qm_exchange_find(a, "x3", 2), 0, err, sizeof err), SL_OK);
    at = node_matches_at(&s, 0, 0);
    x = node_matches_next_item(N, NODE_LIST_EXCHANGES, &at, 0);
    ck_assert_str_eq(x->name, "x2");
    ck_assert_str_eq(((qm_exchange *)node_matches_next_item(N, NODE_LIST_EXCHANGES, &at, 0))->name,
                     "x1");
    ck_assert_ptr_null(node_matches_next_item(N, NODE_LIST_EXCHANGES, &at, 0));
    node_matches_free(&s);
    node_filter_free(&f);
    node_cursor_free(&one);
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
    /* a binding named by its properties_key: the key, or with arguments the key and a hash */
    char pk[300];
    node_binding_props_key("k7", NULL, 0, pk, sizeof pk);
    ck_assert_str_eq(pk, "k7");
    node_binding_props_key("", NULL, 0, pk, sizeof pk);
    ck_assert_str_eq(pk, "~");
    const uint8_t args[] = {1, 2, 3};
    node_binding_props_key("k", args, sizeof args, pk, sizeof pk);
    ck_assert_str_eq(pk, "k~56cf37ab");
    qm_exchange *x1 = qm_exchange_find(vh, "x1", 2);
    qm_binding *b = node_binding_find(x1, q, NULL, "k7");
    ck_assert(b && !strcmp(b->key, "k7"));
    ck_assert_ptr_null(node_binding_find(x1, q, NULL, "k99"));
    ck_assert_ptr_null(node_binding_find(x1, NULL, x1, "k7"));
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

    /* publish: the expiration, then CC / BCC (headers that are no arrays) */
    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    ck_assert_int_eq(node_publish_check(&p, err, sizeof err), SL_OK);
    p.flags = AMQP_P_EXPIRATION;
    p.expiration = amqp_cstr("-5");
    ck_assert_int_eq(node_publish_check(&p, err, sizeof err), SL_ERR_PRECONDITION);
    ck_assert_msg(!strncmp(err, "invalid expiration '-5': ", 25), "%s", err);
    p.expiration = amqp_cstr("60000");
    ck_assert_int_eq(node_publish_check(&p, err, sizeof err), SL_OK);
    sl_buf h;
    sl_buf_init(&h);
    amqp_tbl_end(&h, amqp_tbl_begin(&h)); /* no headers: fine */
    p.flags |= AMQP_P_HEADERS;
    p.headers = (amqp_bytes){h.data + 4, h.len - 4}; /* the content, without its length */
    ck_assert_int_eq(node_publish_check(&p, err, sizeof err), SL_OK);
    h.len = 0;
    size_t mark = amqp_tbl_begin(&h);
    amqp_tbl_put_str(&h, "CC", amqp_cstr("not an array"));
    amqp_tbl_end(&h, mark);
    p.headers = (amqp_bytes){h.data + 4, h.len - 4};
    ck_assert_int_eq(node_publish_check(&p, err, sizeof err), SL_ERR_PRECONDITION);
    ck_assert_msg(!strncmp(err, "invalid message: ", 17), "%s", err);
    sl_buf_free(&h);

    /* alarms: the disk's first; memory only for what publishes */
    ck_assert_int_eq(node_alarm_check(0, 1, err, sizeof err), SL_OK);
    ck_assert_int_eq(node_alarm_check(ALARM_MEMORY, 0, err, sizeof err), SL_OK);
    ck_assert_int_eq(node_alarm_check(ALARM_MEMORY, 1, err, sizeof err), SL_ERR_RESOURCE);
    ck_assert_str_eq(err, "memory alarm: refused until it clears (memory above "
                          "memory_high_watermark)");
    ck_assert_int_eq(node_alarm_check(ALARM_DISK | ALARM_MEMORY, 1, err, sizeof err),
                     SL_ERR_RESOURCE);
    ck_assert_str_eq(err, "disk alarm: refused until it clears (free disk under disk_free_limit)");
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
    /* deliver_get split: 10 hand-outs, 4 without ack; 3 of them basic.get (1 without ack) */
    node_totals d = {.delivered = 10, .delivered_no_ack = 4, .get = 2, .get_no_ack = 1};
    uint64_t dack, dna;
    node_totals_deliveries(&d, &dack, &dna);
    ck_assert(dack == 4 && dna == 3);
    d.get = 9; /* never below 0 */
    d.get_no_ack = 9;
    node_totals_deliveries(&d, &dack, &dna);
    ck_assert(dack == 0 && dna == 0);
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
    node_totals qt; /* the queue's own figures */
    node_totals_queue(q, &qt);
    ck_assert(qt.messages == 5 && qt.ready == 5 && qt.unacked == 0 && qt.bytes == 10);
    ck_assert(qt.queues == 0 && qt.published == q->stat_published);
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

/* ---- a door's clients (node_walk_clients) over a fake door: clients 4 (not listed: before
 * login), 3 (user a, vhost v2), 2 (user b, vhost v1), 1 (user a, vhost v1); channel slots 0
 * (empty), 1 and 2; CONSUMERS consumers in each, k05 not on a queue ---- */

#define CONSUMERS 40
static const qm_queue fake_queue;
static const char *const fake_users[] = {"", "a", "b", "a", "x"};
static const char *const fake_vhosts[] = {"", "v1", "v1", "v2", "v1"};
static int fake_calls; /* consumers hook calls */

static int fake_client(uint64_t id, node_client *out)
{
    static char names[5][8];
    memset(out, 0, sizeof *out);
    snprintf(names[id], sizeof names[id], "c%llu", (unsigned long long)id);
    out->id = id;
    out->name = names[id];
    out->user = fake_users[id];
    out->vhost = fake_vhosts[id];
    out->listed = id != 4;
    out->channels = 2;
    return 1;
}

static int fake_client_next(void *ctx, uint64_t at_most, node_client *out)
{
    (void)ctx;
    return at_most ? fake_client(at_most > 4 ? 4 : at_most, out) : 0;
}

static int fake_channel_at(void *ctx, uint64_t client, size_t slot, node_channel *out)
{
    (void)ctx;
    (void)client;
    if (slot > 2)
        return -1;
    memset(out, 0, sizeof *out);
    out->number = (unsigned)slot;
    return slot != 0;
}

static int fake_consumers(void *ctx, uint64_t client, size_t slot, const char *after,
                          size_t after_len, node_consumer_fn fn, void *arg)
{
    (void)ctx;
    (void)client;
    (void)slot;
    fake_calls++;
    int from = 0;
    if (after && after_len == 3 && after[0] == 'k')
        from = atoi(after + 1) + 1;
    for (int i = from; i < CONSUMERS; i++) {
        char tag[16];
        snprintf(tag, sizeof tag, "k%02d", i);
        node_consumer o = {.tag = tag, .tag_len = 3, .queue = i == 5 ? NULL : &fake_queue};
        if (!fn(arg, &o))
            return 0;
    }
    return 1;
}

struct met {
    int clients[5], channels[5][3];
    int consumers[5][3][CONSUMERS]; /* times met */
};

static void met_client(void *ctx, const node_client *c)
{
    ((struct met *)ctx)->clients[c->id]++;
}

static void met_channel(void *ctx, const node_client *c, const node_channel *ch)
{
    ((struct met *)ctx)->channels[c->id][ch->number]++;
}

static void met_consumer(void *ctx, const node_client *c, const node_channel *ch,
                         const node_consumer *o)
{
    ((struct met *)ctx)->consumers[c->id][ch->number][atoi(o->tag + 1)]++;
}

static sl_node no_doors; /* a node without any door that has clients */

/* A node whose parts are the doors given (NULL: none), for the walks over every door. */
static sl_node *fake_node(const node_part *a, const node_part *b)
{
    static sl_node node;
    memset(&node, 0, sizeof node);
    if (a)
        node.parts[node.n_parts++] = *a;
    if (b)
        node.parts[node.n_parts++] = *b;
    return &node;
}

/* Walks to the end with slices already over (until 0: a step or so per call); the calls. */
static int walk_all(const sl_node *n, node_client_walk *w)
{
    int calls = 1;
    while (!node_walk_clients(n, w, 0)) {
        calls++;
        ck_assert_int_lt(calls, 10000);
    }
    return calls;
}

/* node_client_at_or_below: the element with the largest id <= a bound, over a list newest
 * first, whatever the order of the questions; resumed from the last answer, forgotten when
 * that element leaves, and a newer element (a larger id) found from the head. */
struct cel {
    struct cel *next;
    uint64_t id;
};

static uint64_t cel_at(node_client_cursor *cur, struct cel *head, uint64_t at_most,
                       uint64_t next_id)
{
    struct cel *e = node_client_at_or_below(cur, head, offsetof(struct cel, next),
                                            offsetof(struct cel, id), at_most, next_id);
    return e ? e->id : 0;
}

START_TEST(client_cursor_at_or_below)
{
    struct cel e[5];
    uint64_t ids[5] = {9, 7, 5, 3, 1}; /* newest first; the even ids are another door's */
    for (int i = 0; i < 5; i++)
        e[i] = (struct cel){i < 4 ? &e[i + 1] : NULL, ids[i]};
    node_client_cursor cur = {0};
    /* a walk down, one id at a time, as node_client_next asks */
    for (uint64_t q = 10; q > 0; q--)
        ck_assert_uint_eq(cel_at(&cur, &e[0], q, 10), q & 1 ? q : q - 1);
    ck_assert_uint_eq(cel_at(&cur, &e[0], 0, 10), 0);
    /* back up and down again, in any order */
    uint64_t qs[] = {4, 8, 2, 10, 6, 1, 9, 3};
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++)
        ck_assert_uint_eq(cel_at(&cur, &e[0], qs[i], 10), qs[i] & 1 ? qs[i] : qs[i] - 1);
    /* the answer leaves its list: forgotten, the next question walks from the head */
    ck_assert_uint_eq(cel_at(&cur, &e[0], 6, 10), 5);
    node_client_cursor_forget(&cur, &e[2]);
    e[1].next = &e[3];
    ck_assert_ptr_null(cur.at);
    ck_assert_uint_eq(cel_at(&cur, &e[0], 6, 10), 3);
    /* a newer element (id 11) at the head: found above the old bound */
    ck_assert_uint_eq(cel_at(&cur, &e[0], 8, 10), 7);
    struct cel nu = {&e[0], 11};
    ck_assert_uint_eq(cel_at(&cur, &nu, 12, 11), 11);
    ck_assert_uint_eq(cel_at(&cur, &nu, 10, 11), 9);
}
END_TEST

START_TEST(clients_walk_resumes)
{
    node_part door = {.name = "fake",
                      .client_next = fake_client_next,
                      .channel_at = fake_channel_at,
                      .consumers = fake_consumers};
    const sl_node *n = fake_node(&door, NULL);
    struct met m;
    node_client_walk w;
    /* connections: a monitor sees every listed one, in one call with time left */
    memset(&m, 0, sizeof m);
    node_client_walk_init(&w, NODE_WALK_CONNECTIONS);
    w.monitor = 1;
    w.visit_client = met_client;
    w.ctx = &m;
    ck_assert_int_eq(node_walk_clients(n, &w, UINT64_MAX), 1);
    ck_assert_int_eq(m.clients[1] + m.clients[2] + m.clients[3], 3);
    ck_assert_int_eq(m.clients[4], 0);
    node_client_walk_free(&w);
    /* a user's own, in one vhost */
    memset(&m, 0, sizeof m);
    node_client_walk_init(&w, NODE_WALK_CONNECTIONS);
    w.user = sl_xstrdup("a");
    w.vhost = sl_xstrdup("v1");
    w.visit_client = met_client;
    w.ctx = &m;
    walk_all(n, &w);
    ck_assert(m.clients[1] == 1 && m.clients[2] == 0 && m.clients[3] == 0);
    node_client_walk_free(&w);
    /* one connection's channels: slot 0 is empty */
    memset(&m, 0, sizeof m);
    node_client_walk_init(&w, NODE_WALK_CHANNELS);
    w.monitor = 1;
    w.conn = sl_xstrdup("c2");
    w.visit_channel = met_channel;
    w.ctx = &m;
    walk_all(n, &w);
    ck_assert(m.channels[2][0] == 0 && m.channels[2][1] == 1 && m.channels[2][2] == 1);
    ck_assert_int_eq(m.channels[1][1] + m.channels[3][1], 0);
    node_client_walk_free(&w);
    /* consumers, in many slices: each on a queue met exactly once (the place is the tag) */
    memset(&m, 0, sizeof m);
    fake_calls = 0;
    node_client_walk_init(&w, NODE_WALK_CONSUMERS);
    w.monitor = w.admin = 1;
    w.visit_consumer = met_consumer;
    w.ctx = &m;
    int calls = walk_all(n, &w);
    ck_assert_int_gt(calls, 3 * 2 * CONSUMERS / 16);
    for (int c = 1; c <= 3; c++)
        for (int ch = 1; ch <= 2; ch++)
            for (int i = 0; i < CONSUMERS; i++)
                ck_assert_msg(m.consumers[c][ch][i] == (i == 5 ? 0 : 1), "c%d ch%d k%02d met %d", c,
                              ch, i, m.consumers[c][ch][i]);
    ck_assert_ptr_null(w.ctag); /* nothing left over at the end */
    node_client_walk_free(&w);
    /* no door with clients: done at once */
    node_client_walk_init(&w, NODE_WALK_CONNECTIONS);
    ck_assert_int_eq(node_walk_clients(&no_doors, &w, UINT64_MAX), 1);
    node_client_walk_free(&w);
}
END_TEST

/* ---- two doors with clients (AMQP's and the stream door's): the node's ids interleave;
 * every walk meets both doors' clients in one id order, newest first ---- */

static int stream_client_next(void *ctx, uint64_t at_most, node_client *out)
{
    (void)ctx;
    /* clients 7 and 5 (user a, vhost v1), no channels */
    static const char *const names[] = {[5] = "s5", [7] = "s7"};
    uint64_t id = at_most >= 7 ? 7 : at_most >= 5 ? 5 : 0;
    if (!id)
        return 0;
    memset(out, 0, sizeof *out);
    out->id = id;
    out->name = names[id];
    out->user = "a";
    out->vhost = "v1";
    out->protocol = "stream";
    out->listed = 1;
    return 1;
}

static int stream_client_find(void *ctx, const char *name, node_client *out)
{
    return !strcmp(name, "s5")   ? stream_client_next(ctx, 5, out)
           : !strcmp(name, "s7") ? stream_client_next(ctx, 7, out)
                                 : 0;
}

static void stream_publishers(void *ctx, uint64_t client, node_publisher_fn fn, void *arg)
{
    (void)ctx;
    node_publisher a = {.id = 1, .stream = "s", .reference = ""};
    node_publisher b = {.id = (unsigned)client, .stream = "t", .reference = "r"};
    fn(arg, &a);
    fn(arg, &b);
}

static void stream_subscriptions(void *ctx, uint64_t client, node_subscription_fn fn, void *arg)
{
    (void)ctx;
    node_subscription s = {.id = (unsigned)client, .stream = "s"};
    fn(arg, &s);
}

struct order {
    uint64_t ids[16];
    int n;
};

static void order_client(void *ctx, const node_client *c)
{
    struct order *o = ctx;
    ck_assert_int_lt(o->n, 16);
    o->ids[o->n++] = c->id;
}

static void order_publisher(void *ctx, const node_client *c, const node_publisher *p)
{
    struct order *o = ctx;
    ck_assert_int_lt(o->n, 16);
    o->ids[o->n++] = c->id * 100 + p->id;
}

static void order_subscription(void *ctx, const node_client *c, const node_subscription *s)
{
    struct order *o = ctx;
    ck_assert_int_lt(o->n, 16);
    o->ids[o->n++] = c->id * 100 + s->id;
}

START_TEST(clients_of_two_doors)
{
    node_part amqp = {.name = "fake",
                      .client_next = fake_client_next,
                      .channel_at = fake_channel_at,
                      .consumers = fake_consumers};
    node_part stream = {.name = "stream",
                        .client_next = stream_client_next,
                        .client_find = stream_client_find,
                        .publishers = stream_publishers,
                        .subscriptions = stream_subscriptions};
    const sl_node *n = fake_node(&amqp, &stream);
    node_client c;
    /* the largest id of either door, then on down across doors */
    ck_assert_ptr_eq(node_client_next(n, UINT64_MAX, &c), &n->parts[1]);
    ck_assert_uint_eq(c.id, 7);
    ck_assert_ptr_eq(node_client_next(n, 6, &c), &n->parts[1]);
    ck_assert_uint_eq(c.id, 5);
    ck_assert_ptr_eq(node_client_next(n, 4, &c), &n->parts[0]);
    ck_assert_uint_eq(c.id, 4);
    ck_assert_ptr_null(node_client_next(n, 0, &c));
    ck_assert_ptr_eq(node_client_find(n, "s5", &c), &n->parts[1]);
    ck_assert_ptr_null(node_client_find(n, "c1", &c)); /* the fake AMQP door finds none */
    /* connections of both doors, newest first, in slices (a step or so per call) */
    struct order o = {0};
    node_client_walk w;
    node_client_walk_init(&w, NODE_WALK_CONNECTIONS);
    w.monitor = 1;
    w.visit_client = order_client;
    w.ctx = &o;
    walk_all(n, &w);
    uint64_t all[] = {7, 5, 3, 2, 1}; /* 4 is not listed */
    ck_assert_int_eq(o.n, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_uint_eq(o.ids[i], all[i]);
    node_client_walk_free(&w);
    /* only the stream protocol's */
    memset(&o, 0, sizeof o);
    node_client_walk_init(&w, NODE_WALK_CONNECTIONS);
    w.monitor = 1;
    w.protocol = sl_xstrdup("stream");
    w.visit_client = order_client;
    w.ctx = &o;
    walk_all(n, &w);
    ck_assert(o.n == 2 && o.ids[0] == 7 && o.ids[1] == 5);
    node_client_walk_free(&w);
    /* channels: the stream door has none, the AMQP door's are met */
    struct met m;
    memset(&m, 0, sizeof m);
    node_client_walk_init(&w, NODE_WALK_CHANNELS);
    w.monitor = 1;
    w.visit_channel = met_channel;
    w.ctx = &m;
    walk_all(n, &w);
    ck_assert_int_eq(m.channels[1][1] + m.channels[2][1] + m.channels[3][1], 3);
    node_client_walk_free(&w);
    /* publishers on one stream; subscriptions; a user's own only */
    memset(&o, 0, sizeof o);
    node_client_walk_init(&w, NODE_WALK_PUBLISHERS);
    w.monitor = w.admin = 1;
    w.stream = sl_xstrdup("t");
    w.visit_publisher = order_publisher;
    w.ctx = &o;
    walk_all(n, &w);
    ck_assert(o.n == 2 && o.ids[0] == 707 && o.ids[1] == 505);
    node_client_walk_free(&w);
    memset(&o, 0, sizeof o);
    node_client_walk_init(&w, NODE_WALK_SUBSCRIPTIONS);
    w.admin = 1; /* consumers' rule: of the vhosts the user may list (all) */
    w.user = sl_xstrdup("b");
    w.visit_subscription = order_subscription;
    w.ctx = &o;
    walk_all(n, &w);
    ck_assert_int_eq(o.n, 0);
    node_client_walk_free(&w);
    memset(&o, 0, sizeof o);
    node_client_walk_init(&w, NODE_WALK_SUBSCRIPTIONS);
    w.admin = 1;
    w.user = sl_xstrdup("a");
    w.visit_subscription = order_subscription;
    w.ctx = &o;
    walk_all(n, &w);
    ck_assert(o.n == 2 && o.ids[0] == 707 && o.ids[1] == 505);
    node_client_walk_free(&w);
    /* the totals count both doors' */
    node_totals t;
    memset(&t, 0, sizeof t);
    node_totals_clients(n, NULL, 1, &t);
    ck_assert(t.connections == 5 && t.channels == 6);
}
END_TEST

/* ---- jobs sharing the turn's slice (node_jobs) ---- */

struct tjob {
    node_job j;
    int steps, need, done;
    node_jobs *js;
};

static int tjob_step(node_job *j, uint64_t until)
{
    struct tjob *t = (struct tjob *)j;
    ck_assert_uint_gt(until, 0);
    return ++t->steps >= t->need;
}

static int tjobs_left;

static void tjob_done(node_job *j)
{
    struct tjob *t = (struct tjob *)j;
    t->done++;
    if (--tjobs_left == 0)
        sl_loop_stop(t->js->loop);
}

START_TEST(jobs_share_turns)
{
    sl_loop *loop = sl_loop_new();
    node_jobs js;
    node_jobs_init(&js, loop, 3000);
    /* one slice end per turn, whoever asks */
    uint64_t end = node_jobs_slice_end(&js);
    ck_assert_uint_eq(node_jobs_slice_end(&js), end);
    struct tjob a = {.j = {.step = tjob_step, .done = tjob_done}, .need = 1, .js = &js};
    struct tjob b = {.j = {.step = tjob_step, .done = tjob_done}, .need = 5, .js = &js};
    tjobs_left = 2;
    node_jobs_add(&js, &a.j);
    node_jobs_add(&js, &b.j);
    sl_loop_run(loop);
    /* each stepped until it said done, then done once and off the list */
    ck_assert_int_eq(a.steps, 1);
    ck_assert_int_eq(b.steps, 5);
    ck_assert(a.done == 1 && b.done == 1);
    ck_assert_ptr_null(js.head);
    /* stopped with one still running: handed back, not stepped again */
    struct tjob c = {.j = {.step = tjob_step, .done = tjob_done}, .need = 1000, .js = &js};
    node_jobs_add(&js, &c.j);
    ck_assert_ptr_eq(node_jobs_stop(&js), &c.j);
    ck_assert_int_eq(c.steps, 0);
    ck_assert_ptr_null(node_jobs_stop(&js));
    sl_loop_free(loop);
}
END_TEST

/* The client totals and a channel found by name, over the same fake door. */
START_TEST(clients_totals_and_channel_by_name)
{
    node_part door = {.name = "fake",
                      .client_next = fake_client_next,
                      .channel_at = fake_channel_at,
                      .consumers = fake_consumers};
    const sl_node *n = fake_node(&door, NULL);
    node_totals t;
    memset(&t, 0, sizeof t);
    node_totals_clients(n, NULL, 1, &t); /* a monitor: every listed client */
    ck_assert(t.connections == 3 && t.channels == 6);
    memset(&t, 0, sizeof t);
    node_totals_clients(n, "a", 0, &t); /* its own */
    ck_assert(t.connections == 2 && t.channels == 4);
    node_totals_clients(&no_doors, "a", 0, &t); /* no door: nothing added */
    ck_assert(t.connections == 2);

    node_client_walk scope;
    node_client_walk_init(&scope, NODE_WALK_CHANNELS);
    scope.user = "a";
    node_client c;
    node_channel ch;
    ck_assert_int_eq(node_channel_find(n, &scope, "c3 (2)", &c, &ch), 1);
    ck_assert(c.id == 3 && ch.number == 2);
    ck_assert_int_eq(node_channel_find(n, &scope, "c2 (1)", &c, &ch), 0);  /* b's */
    ck_assert_int_eq(node_channel_find(n, &scope, "c3 (0)", &c, &ch), 0);  /* empty slot */
    ck_assert_int_eq(node_channel_find(n, &scope, "c3 (02)", &c, &ch), 0); /* not canonical */
    ck_assert_int_eq(node_channel_find(n, &scope, "c3 (9)", &c, &ch), 0);
    ck_assert_int_eq(node_channel_find(n, &scope, "c3 (1", &c, &ch), 0);
    ck_assert_int_eq(node_channel_find(n, &scope, "c4 (1)", &c, &ch), 0); /* not listed */
    scope.monitor = 1;
    ck_assert_int_eq(node_channel_find(n, &scope, "c2 (1)", &c, &ch), 1);
    ck_assert_int_eq(node_channel_find(&no_doors, &scope, "c2 (1)", &c, &ch), 0);
}
END_TEST

/* The bind rule, in RabbitMQ's order: write on the destination, neither end the default
 * exchange, read on the source, topic read on the key. */
#define BIND(kind, dest, src, srcx, key)                                                           \
    node_bind_check(a, "u", "/", kind, dest, strlen(dest), src, strlen(src), srcx, key,            \
                    strlen(key), err, sizeof err)
START_TEST(bind_rule)
{
    qm_vhost *vh = qm_vhost_create(N, "/");
    ck_assert_ptr_nonnull(declare(vh, "q"));
    qm_exchange *x = exchange(vh, "x");
    qm_exchange_decl td = {"t", 1, QM_EX_TOPIC, 0, 0, 0, (amqp_bytes){0}};
    qm_exchange *t = NULL;
    ck_assert_int_eq(qm_exchange_declare(vh, &td, &t, err, sizeof err), SL_OK);
    acc_db *a = acc_new();
    ck_assert_int_eq(acc_vhost_put(a, "/", NULL, NULL, NULL, err, sizeof err), SL_OK);
    acc_user_def u = {.name = "u", .password = "pw", .password_len = 2};
    ck_assert_int_eq(acc_user_put(a, &u, NULL, err, sizeof err), SL_OK);
    /* no permission on the vhost at all: the vhost's refusal first */
    ck_assert_int_ne(BIND(ACC_QUEUE, "q", "x", x, "k"), SL_OK);
    ck_assert_msg(strstr(err, "vhost '/'") != NULL, "%s", err);
    /* write on q only: reading x is refused */
    ck_assert_int_eq(acc_perm_set(a, "u", "/", "", "^q$", "", err, sizeof err), SL_OK);
    ck_assert_int_eq(BIND(ACC_QUEUE, "q", "x", x, "k"), SL_ERR_ACCESS_REFUSED);
    ck_assert_msg(strstr(err, "access to exchange 'x' in vhost '/' refused"), "%s", err);
    ck_assert_int_eq(node_perm_check(a, "u", "/", ACC_QUEUE, "q", ACC_WRITE, err, sizeof err),
                     SL_OK);
    /* and read on x: allowed; to an exchange needs write on it */
    ck_assert_int_eq(acc_perm_set(a, "u", "/", "", "^q$", "^[xt]$", err, sizeof err), SL_OK);
    ck_assert_int_eq(BIND(ACC_QUEUE, "q", "x", x, "k"), SL_OK);
    ck_assert_int_eq(BIND(ACC_EXCHANGE, "t", "x", x, "k"), SL_ERR_ACCESS_REFUSED);
    /* a topic source: its topic permission on the key */
    ck_assert_int_eq(acc_topic_perm_set(a, "u", "/", "t", ".*", "^ok\\.", err, sizeof err), SL_OK);
    ck_assert_int_eq(BIND(ACC_QUEUE, "q", "t", t, "ok.1"), SL_OK);
    ck_assert_int_eq(BIND(ACC_QUEUE, "q", "t", t, "no.1"), SL_ERR_ACCESS_REFUSED);
    ck_assert_msg(strstr(err, "access to topic 'no.1' in exchange 't'"), "%s", err);
    /* a topic exchange that does not exist (yet): no topic check */
    ck_assert_int_eq(BIND(ACC_QUEUE, "q", "t", NULL, "no.1"), SL_OK);
    /* the default exchange at either end, after the write on the destination */
    ck_assert_int_eq(BIND(ACC_QUEUE, "q", "", NULL, "k"), SL_ERR_ACCESS_REFUSED);
    ck_assert_msg(strstr(err, "default exchange"), "%s", err);
    ck_assert_int_eq(BIND(ACC_EXCHANGE, "", "x", x, "k"), SL_ERR_ACCESS_REFUSED);
    ck_assert_msg(strstr(err, "access to exchange 'amq.default'"), "%s", err); /* no write */
    ck_assert_int_eq(acc_perm_set(a, "u", "/", "", ".*", ".*", err, sizeof err), SL_OK);
    ck_assert_int_eq(BIND(ACC_EXCHANGE, "", "x", x, "k"), SL_ERR_ACCESS_REFUSED);
    ck_assert_msg(strstr(err, "default exchange"), "%s", err);
    acc_free(a);
}
END_TEST
#undef BIND

static void count_got(void *ctx, const qm_position *pos, uint64_t remaining)
{
    (void)pos;
    (void)remaining;
    (*(int *)ctx)++;
}

/* Taken first, then settled: requeued (all back), acked or rejected (gone). */
START_TEST(get_settles_all_taken)
{
    qm_vhost *vh = qm_vhost_create(N, "/");
    qm_queue *q = declare(vh, "g");
    for (int i = 0; i < 5; i++)
        put(q, "m");
    int seen = 0;
    ck_assert_uint_eq(node_queue_get(q, 3, NODE_GET_ACK_REQUEUE, count_got, &seen), 3);
    ck_assert(seen == 3 && q->n_ready == 5);
    ck_assert_uint_eq(node_queue_get(q, 2, NODE_GET_ACK, count_got, &seen), 2);
    ck_assert_uint_eq(q->n_ready, 3);
    ck_assert_uint_eq(node_queue_get(q, 1, NODE_GET_REJECT, count_got, &seen), 1);
    ck_assert_uint_eq(node_queue_get(q, 10, NODE_GET_REJECT_REQUEUE, count_got, &seen), 2);
    ck_assert(seen == 8 && q->n_ready == 2);
    ck_assert_uint_eq(node_queue_get(q, 0, NODE_GET_ACK, count_got, &seen), 0);
}
END_TEST

/* A door's client views: the owner of an exclusive queue by name, the peer split. */
static const char *fake_owner_name(void *ctx, const void *owner)
{
    (void)ctx;
    return owner ? "c1" : "?";
}

START_TEST(client_views)
{
    node_part door = {.name = "fake", .owner_name = fake_owner_name};
    int owner = 0;
    ck_assert_str_eq(node_client_owner_name(fake_node(&door, NULL), &owner), "c1");
    ck_assert_str_eq(node_client_owner_name(&no_doors, &owner), "");
    door.owner_name = NULL;
    ck_assert_str_eq(node_client_owner_name(fake_node(&door, NULL), &owner), "");
    char host[8];
    int port;
    node_client_peer_split("127.0.0.1:5672", host, sizeof host, &port);
    ck_assert(!strcmp(host, "127.0.0") && port == 5672); /* host cut to the buffer */
    node_client_peer_split("[::1]:80", host, sizeof host, &port);
    ck_assert(!strcmp(host, "[::1]") && port == 80);
    node_client_peer_split("nowhere", host, sizeof host, &port);
    ck_assert(!strcmp(host, "nowhere") && port == 0);
    /* matches kept: deduplicated by key, or made distinct by a sequence number */
    sl_oset s;
    memset(&s, 0, sizeof s);
    sl_buf k;
    sl_buf_init(&k);
    uint64_t seq = 0;
    node_sortkey_string(&k, "a", 1);
    ck_assert_ptr_nonnull(node_match_keep(&s, &k, 1, &seq));
    ck_assert_ptr_null(node_match_keep(&s, &k, 1, &seq));
    ck_assert_ptr_nonnull(node_match_keep(&s, &k, 0, &seq));
    k.len = k.off = 0;
    node_sortkey_string(&k, "a", 1);
    ck_assert_ptr_nonnull(node_match_keep(&s, &k, 0, &seq));
    ck_assert(sl_oset_count(&s) == 3 && seq == 2);
    sl_buf_free(&k);
    node_matches_free(&s);
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
    tcase_add_test(tc, clients_walk_resumes);
    tcase_add_test(tc, clients_of_two_doors);
    tcase_add_test(tc, jobs_share_turns);
    tcase_add_test(tc, clients_totals_and_channel_by_name);
    tcase_add_test(tc, bind_rule);
    tcase_add_test(tc, listed_vhosts_and_matches);
    tcase_add_test(tc, get_settles_all_taken);
    tcase_add_test(tc, client_views);
    tcase_add_test(tc, client_cursor_at_or_below);
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
