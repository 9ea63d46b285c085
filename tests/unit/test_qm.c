/* test_qm.c - unit tests for the queue model (src/qm) and the hash map (src/core/map.c).
 *
 * Each test builds a fresh node with one vhost "/" and a fake clock (node->test_now), uses a
 * scripted consumer (room = how many more it can take, records what it got), and checks
 * states and counters after each step, so that every feature has a test that fails when it
 * breaks.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amqp/method.h"
#include "amqp/table.h"
#include "core/map.h"
#include "core/u64tab.h"
#include "qm/qm.h"

/* ------------------------------------------------------------------ helpers */

#define HELD_N_MAX 200

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
    qm_node_free(N);
    N = NULL;
}

/* A message whose body is `body`; priority < 0 and expiration NULL mean absent. */
static qm_message *msg_full(const char *rk, const char *body, int priority, const char *expiration,
                            amqp_bytes headers)
{
    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    if (priority >= 0) {
        p.flags |= AMQP_P_PRIORITY;
        p.priority = (uint8_t)priority;
    }
    if (expiration) {
        p.flags |= AMQP_P_EXPIRATION;
        p.expiration = amqp_cstr(expiration);
    }
    if (headers.len) {
        p.flags |= AMQP_P_HEADERS;
        p.headers = headers;
    }
    sl_buf b;
    sl_buf_init(&b);
    amqp_props_encode(&b, &p);
    size_t blen = strlen(body);
    qm_message *m = qm_message_new(AMQP_BYTES("ex"), amqp_cstr(rk), sl_buf_head(&b),
                                   (uint32_t)sl_buf_unread(&b), blen);
    memcpy(qm_msg_body(m), body, blen);
    sl_buf_free(&b);
    return m;
}

static qm_message *msg(const char *body)
{
    return msg_full("rk", body, -1, NULL, (amqp_bytes){0});
}

static void put(qm_queue *q, const char *body)
{
    qm_message *m = msg(body);
    ck_assert_int_eq(qm_queue_enqueue(q, m), SL_OK);
    qm_message_unref(m);
}

static int body_is(const qm_position *p, const char *s)
{
    return p && p->msg->body_len == strlen(s) && !memcmp(qm_msg_body(p->msg), s, strlen(s));
}

static qm_queue *declare_args(const char *name, amqp_bytes args)
{
    qm_queue_decl d = {name, strlen(name), 0, 0, 0, NULL, args, 0};
    qm_queue *q = NULL;
    int created = 0;
    sl_err rc = qm_queue_declare(V, &d, &q, &created, err, sizeof err);
    ck_assert_msg(rc == SL_OK, "declare %s: %s", name, err);
    return q;
}

static qm_queue *declare(const char *name)
{
    return declare_args(name, (amqp_bytes){0});
}

/* Args table builder: one integer or string argument. */
static sl_buf argbuf;
/* One-argument tables, built in argbuf (valid until the next one). */
static size_t arg_begin(void)
{
    sl_buf_free(&argbuf);
    sl_buf_init(&argbuf);
    return amqp_tbl_begin(&argbuf);
}
static amqp_bytes arg_end(size_t m)
{
    amqp_tbl_end(&argbuf, m);
    return (amqp_bytes){sl_buf_head(&argbuf) + 4, sl_buf_unread(&argbuf) - 4};
}
static amqp_bytes arg_int(const char *key, int64_t v)
{
    size_t m = arg_begin();
    amqp_tbl_put_long(&argbuf, key, v);
    return arg_end(m);
}
static amqp_bytes arg_str(const char *key, const char *v)
{
    size_t m = arg_begin();
    amqp_tbl_put_str(&argbuf, key, amqp_cstr(v));
    return arg_end(m);
}
static amqp_bytes arg_bool(const char *key, int v)
{
    size_t m = arg_begin();
    amqp_tbl_put_bool(&argbuf, key, v);
    return arg_end(m);
}

/* Scripted consumer */
typedef struct tcons {
    qm_consumer c;
    int room;
    int cancelled;
    int n;
    qm_position *got[256];
} tcons;

static int t_can_take(qm_consumer *c)
{
    return ((tcons *)c)->room > 0;
}
static void t_deliver(qm_consumer *c, qm_position *pos)
{
    tcons *t = (tcons *)c;
    t->room--;
    ck_assert_int_lt(t->n, 256);
    if (c->no_ack) {
        ck_assert_int_eq(pos->state, QM_POS_DELETED);
        /* remember the body by keeping a message ref; the position is settled now */
        qm_message_ref(pos->msg);
        t->got[t->n++] = (qm_position *)pos->msg;
        qm_position_ack(pos);
        return;
    }
    ck_assert_int_eq(pos->state, QM_POS_LOCKED);
    qm_pos_set_holder(pos, t);
    t->got[t->n++] = pos;
}
static void t_cancelled(qm_consumer *c)
{
    ((tcons *)c)->cancelled++;
}
static const qm_consumer_ops tops = {t_can_take, t_deliver, t_cancelled, NULL, NULL, NULL};

static void cons_init(tcons *t, int room, int priority)
{
    memset(t, 0, sizeof *t);
    t->room = room;
    t->c.ops = &tops;
    t->c.ctx = t;
    t->c.priority = priority;
}

/* ------------------------------------------------------------------ streams */

/* A stream consumer: takes entries while it has room, records offsets and bodies. */
typedef struct scons {
    qm_consumer c;
    int room, n;
    uint64_t off[64];
    char body[64][16];
} scons;
static int s_can_take(qm_consumer *c)
{
    return ((scons *)c)->room > 0;
}
static void s_deliver(qm_consumer *c, qm_position *pos)
{
    (void)c, (void)pos;
    ck_abort_msg("a stream hands out no positions");
}
static void s_entry(qm_consumer *c, uint64_t off, int64_t ts, const uint8_t *p, size_t len)
{
    (void)ts;
    scons *s = (scons *)c;
    qm_stream_msg m;
    ck_assert_int_eq(qm_stream_decode(p, len, &m), 0);
    ck_assert(amqp_bytes_eq(m.routing_key, "rk") && amqp_bytes_eq(m.exchange, "ex"));
    ck_assert_int_lt(s->n, 64);
    s->room--;
    s->off[s->n] = off;
    snprintf(s->body[s->n], 16, "%.*s", (int)m.body_len, (const char *)m.body);
    s->n++;
}
static void s_cancelled(qm_consumer *c)
{
    (void)c;
}
static const qm_consumer_ops sops = {s_can_take, s_deliver, s_cancelled, s_entry, NULL, NULL};

/* Without the store's hooks (no persist) a stream commits each append itself: the model's own
 * rules, apart from the group commit. */
START_TEST(stream_queue_keeps_messages_for_consumers_at_their_offsets)
{
    char dir[] = "/tmp/sluice-test-qm-stream-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    N->stream_dir = strdup(dir);
    qm_queue_decl d = {"s", 1, 1, 0, 0, NULL, arg_str("x-queue-type", "stream"), 0};
    qm_queue *q = NULL;
    ck_assert_msg(qm_queue_declare(V, &d, &q, NULL, err, sizeof err) == SL_OK, "%s", err);
    ck_assert_ptr_nonnull(q->stream);
    char b[16];
    for (int i = 0; i < 5; i++) {
        snprintf(b, sizeof b, "m%d", i);
        put(q, b);
    }
    ck_assert_uint_eq(q->n_ready, 0); /* nothing is a position */
    ck_assert_uint_eq(q->stat_published, 5);
    qm_stream_spec sp = {.kind = QM_SO_FIRST};
    ck_assert_uint_eq(qm_stream_start(q, &sp), 0);
    sp.kind = QM_SO_NEXT;
    ck_assert_uint_eq(qm_stream_start(q, &sp), 5);
    sp.kind = QM_SO_LAST; /* each append was its own commit: its own chunk */
    ck_assert_uint_eq(qm_stream_start(q, &sp), 4);
    sp = (qm_stream_spec){.kind = QM_SO_OFFSET, .offset = 3};
    ck_assert_uint_eq(qm_stream_start(q, &sp), 3);
    sp.offset = 99;
    ck_assert_uint_eq(qm_stream_start(q, &sp), 5);
    sp = (qm_stream_spec){.kind = QM_SO_TIMESTAMP, .ts_ms = 0};
    ck_assert_uint_eq(qm_stream_start(q, &sp), 0);
    scons a = {.room = 2}, c = {.room = 10};
    a.c.ops = c.c.ops = &sops;
    a.c.ctx = &a;
    c.c.ctx = &c;
    c.c.st_next = 3;
    ck_assert_int_eq(qm_consumer_attach(q, &a.c), SL_OK);
    ck_assert_int_eq(qm_consumer_attach(q, &c.c), SL_OK);
    qm_node_run_dispatch(N);
    ck_assert_int_eq(a.n, 2); /* its credit */
    ck_assert_uint_eq(a.off[0], 0);
    ck_assert_str_eq(a.body[1], "m1");
    ck_assert_int_eq(c.n, 2); /* from its own offset to the end */
    ck_assert_uint_eq(c.off[0], 3);
    ck_assert_str_eq(c.body[1], "m4");
    a.room = 10; /* credit back: it goes on where it stopped */
    qm_queue_schedule_dispatch(q);
    qm_node_run_dispatch(N);
    ck_assert_int_eq(a.n, 5);
    ck_assert_str_eq(a.body[4], "m4");
    put(q, "m5"); /* a new entry reaches both */
    qm_node_run_dispatch(N);
    ck_assert_int_eq(a.n, 6);
    ck_assert_int_eq(c.n, 3);
    ck_assert_str_eq(c.body[2], "m5");
    qm_consumer_detach(&a.c);
    qm_consumer_detach(&c.c);
    /* deleting the queue deletes its log */
    char sdir[128];
    snprintf(sdir, sizeof sdir, "%s/%016llx", dir, (unsigned long long)q->incarnation);
    ck_assert_int_eq(access(sdir, F_OK), 0);
    uint64_t count = 0;
    ck_assert_int_eq(qm_queue_delete(q, 0, &count, err, sizeof err), SL_OK);
    ck_assert_int_ne(access(sdir, F_OK), 0);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Single active consumer on a stream (the engine's rule, RabbitMQ's coordinator): what each
 * member was told, in order ('1' active, '0' step down). */
typedef struct sacc {
    scons s; /* first: the ops take it as an scons */
    char told[8];
    int n_told;
} sacc;
static void s_sac_update(qm_consumer *c, int active)
{
    sacc *m = (sacc *)c;
    ck_assert_int_lt(m->n_told, 7);
    m->told[m->n_told++] = active ? '1' : '0';
}
static const qm_consumer_ops sacops = {s_can_take, s_deliver, s_cancelled,
                                       s_entry,    NULL,      s_sac_update};

static void sac_member(qm_queue *q, sacc *m, const char *name, int32_t partition)
{
    memset(m, 0, sizeof *m);
    m->s.room = 10;
    m->s.c.ops = &sacops;
    m->s.c.ctx = m;
    m->s.c.sac_name = name;
    m->s.c.sac_partition = partition;
    ck_assert_int_eq(qm_consumer_attach(q, &m->s.c), SL_OK);
    qm_stream_sac_join(&m->s.c);
}

START_TEST(stream_single_active_consumer_groups)
{
    char dir[] = "/tmp/sluice-test-qm-sac-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    N->stream_dir = strdup(dir);
    qm_queue_decl d = {"s", 1, 1, 0, 0, NULL, arg_str("x-queue-type", "stream"), 0};
    qm_queue *q = NULL;
    ck_assert_msg(qm_queue_declare(V, &d, &q, NULL, err, sizeof err) == SL_OK, "%s", err);
    put(q, "m0");
    /* a plain group: the first member is active, the others wait and get nothing */
    sacc a, b, c, o;
    sac_member(q, &a, "g", -1);
    sac_member(q, &b, "g", -1);
    sac_member(q, &c, "g", -1);
    sac_member(q, &o, "other", -1); /* another group: active too */
    qm_node_run_dispatch(N);
    ck_assert_str_eq(a.told, "1");
    ck_assert_str_eq(b.told, "");
    ck_assert_str_eq(o.told, "1");
    ck_assert_int_eq(a.s.n, 1);
    ck_assert_int_eq(b.s.n + c.s.n, 0);
    ck_assert_int_eq(o.s.n, 1);
    /* a waiting member leaves: nothing changes; the active one leaves: the oldest waiting */
    qm_consumer_detach(&c.s.c);
    ck_assert_str_eq(b.told, "");
    qm_consumer_detach(&a.s.c);
    ck_assert_str_eq(b.told, "1");
    put(q, "m1");
    qm_node_run_dispatch(N);
    ck_assert_int_eq(b.s.n, 2); /* from its own offset (0) */
    ck_assert_int_eq(a.s.n, 1);
    qm_consumer_detach(&b.s.c);
    qm_consumer_detach(&o.s.c);
    /* a super stream's partition 1: index mod members, the holder steps down first */
    sacc x, y;
    sac_member(q, &x, "p", 1);
    ck_assert_str_eq(x.told, "1");
    sac_member(q, &y, "p", 1);
    ck_assert_str_eq(x.told, "10"); /* 1 mod 2: y's; x told to step down */
    ck_assert_str_eq(y.told, "");   /* not before x answered */
    ck_assert_int_eq(x.s.c.sac_state, QM_SAC_STEPPING);
    put(q, "m2");
    qm_node_run_dispatch(N);
    int xn = x.s.n;
    qm_stream_sac_stepped_down(&x.s.c);
    ck_assert_str_eq(y.told, "1");
    qm_node_run_dispatch(N);
    ck_assert_int_eq(x.s.n, xn); /* nothing more for x */
    ck_assert_int_eq(y.s.n, 3);
    /* y goes: the partition comes back to x (1 mod 1 = 0) */
    qm_consumer_detach(&y.s.c);
    ck_assert_str_eq(x.told, "101");
    /* the holder going while stepping down hands the partition on too */
    sac_member(q, &y, "p", 1);
    ck_assert_str_eq(x.told, "1010");
    qm_consumer_detach(&x.s.c);
    ck_assert_str_eq(y.told, "1");
    /* a deleted stream cancels its group: nobody is told anything */
    sac_member(q, &x, "p", 1);
    ck_assert_str_eq(y.told, "10");
    uint64_t count = 0;
    ck_assert_int_eq(qm_queue_delete(q, 0, &count, err, sizeof err), SL_OK);
    ck_assert_str_eq(x.told, "");
    ck_assert_str_eq(y.told, "10");
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* A node without a data directory has nowhere to keep a stream. */
START_TEST(stream_queue_needs_a_stream_dir)
{
    qm_queue_decl d = {"s", 1, 1, 0, 0, NULL, arg_str("x-queue-type", "stream"), 0};
    qm_queue *q = NULL;
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, NULL, err, sizeof err), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "streams need a data directory");
}
END_TEST

/* ------------------------------------------------------------------ map */

START_TEST(map_basic_and_grow)
{
    sl_map *m = sl_map_new();
    char k[32];
    for (long i = 0; i < 5000; i++) {
        snprintf(k, sizeof k, "key%ld", i);
        ck_assert_ptr_null(sl_map_put(m, k, strlen(k), (void *)(i + 1)));
    }
    ck_assert_uint_eq(sl_map_count(m), 5000);
    for (long i = 0; i < 5000; i++) {
        snprintf(k, sizeof k, "key%ld", i);
        ck_assert_ptr_eq(sl_map_get(m, k, strlen(k)), (void *)(i + 1));
    }
    ck_assert_ptr_null(sl_map_get(m, "nope", 4));
    ck_assert_ptr_eq(sl_map_put(m, "key7", 4, (void *)99), (void *)8);
    ck_assert_ptr_eq(sl_map_get(m, "key7", 4), (void *)99);
    for (long i = 0; i < 5000; i += 2) {
        snprintf(k, sizeof k, "key%ld", i);
        ck_assert_ptr_nonnull(sl_map_del(m, k, strlen(k)));
    }
    ck_assert_ptr_null(sl_map_del(m, "key0", 4));
    ck_assert_uint_eq(sl_map_count(m), 2500);
    ck_assert_ptr_eq(sl_map_get(m, "key9", 4), (void *)10);
    ck_assert_ptr_null(sl_map_get(m, "key8", 4));
    /* empty key and binary keys */
    sl_map_put(m, "", 0, (void *)5);
    ck_assert_ptr_eq(sl_map_get(m, "", 0), (void *)5);
    sl_map_free(m);
}
END_TEST

/* The u64 table against a plain array as the model: random puts and dels over a small key
 * space (so dels hit and runs collide), 0 and UINT64_MAX among the keys, values checked,
 * iteration sees each entry once. */
START_TEST(u64tab_random_against_model)
{
    typedef struct {
        uint64_t key;
        uint64_t val;
    } ent;
    enum { NK = 700 };
    static uint64_t keys[NK];
    static uint64_t model[NK]; /* 0 = absent, else value */
    for (int i = 0; i < NK; i++)
        keys[i] = i == 0 ? 0 : i == 1 ? UINT64_MAX : (uint64_t)i * 0x10001ull;
    memset(model, 0, sizeof model);
    sl_u64tab t;
    sl_u64tab_init(&t, sizeof(ent));
    unsigned seed = 42;
    size_t live = 0;
    for (int step = 0; step < 200000; step++) {
        int i = rand_r(&seed) % NK;
        if (rand_r(&seed) % 3) {
            int created;
            ent *e = sl_u64tab_put(&t, keys[i], &created);
            ck_assert_int_eq(created, model[i] == 0);
            ck_assert(e->key == keys[i]);
            if (created) {
                ck_assert(e->val == 0);
                live++;
            }
            e->val = model[i] = (uint64_t)step + 1;
        } else {
            ent out;
            int had = sl_u64tab_del(&t, keys[i], &out);
            ck_assert_int_eq(had, model[i] != 0);
            if (had) {
                ck_assert(out.val == model[i]);
                live--;
            }
            model[i] = 0;
        }
        if (step % 5000 == 0) {
            ck_assert_uint_eq(sl_u64tab_count(&t), live);
            for (int k = 0; k < NK; k++) {
                ent *e = sl_u64tab_get(&t, keys[k]);
                ck_assert(model[k] ? e && e->val == model[k] : e == NULL);
            }
            size_t pos = 0, seen = 0;
            ent *e;
            while ((e = sl_u64tab_next(&t, &pos)))
                seen++;
            ck_assert_uint_eq(seen, live);
        }
    }
    sl_u64tab_free(&t);
}
END_TEST

START_TEST(map_iterate_delete)
{
    sl_map *m = sl_map_new();
    char k[32];
    for (long i = 0; i < 100; i++) {
        snprintf(k, sizeof k, "%ld", i);
        sl_map_put(m, k, strlen(k), (void *)(i + 1));
    }
    size_t it = 0, seen = 0;
    const char *key;
    size_t klen;
    void *v;
    long sum = 0;
    while (sl_map_next(m, &it, &key, &klen, &v)) {
        ck_assert_uint_eq(strlen(key), klen);
        ck_assert_int_eq(atol(key) + 1, (long)v);
        sum += (long)v;
        seen++;
        sl_map_del(m, key, klen); /* deleting the current entry is allowed */
    }
    ck_assert_uint_eq(seen, 100);
    ck_assert_int_eq(sum, 5050);
    ck_assert_uint_eq(sl_map_count(m), 0);
    /* reuse after tombstones */
    for (long i = 0; i < 100; i++) {
        snprintf(k, sizeof k, "%ld", i);
        sl_map_put(m, k, strlen(k), (void *)(i + 1));
    }
    ck_assert_uint_eq(sl_map_count(m), 100);
    sl_map_free(m);
}
END_TEST

/* ------------------------------------------------------------------ positions */

START_TEST(positions_deliver_ack_requeue_reject)
{
    qm_queue *q = declare("q");
    put(q, "a");
    put(q, "b");
    put(q, "c");
    ck_assert_uint_eq(q->n_ready, 3);
    tcons t;
    cons_init(&t, 3, 0);
    ck_assert_int_eq(qm_consumer_attach(q, &t.c), SL_OK);
    qm_node_run_dispatch(N);
    ck_assert_int_eq(t.n, 3);
    ck_assert_uint_eq(q->n_ready, 0);
    ck_assert_uint_eq(q->n_locked, 3);
    ck_assert_uint_eq(qm_queue_message_count(q), 3);
    ck_assert(body_is(t.got[0], "a"));
    ck_assert_ptr_eq(t.got[0]->queue, q);

    qm_position_ack(t.got[0]);
    ck_assert_uint_eq(q->n_locked, 2);
    ck_assert_uint_eq(q->stat_acked, 1);

    qm_position_requeue(t.got[1]); /* b back */
    ck_assert_uint_eq(q->n_locked, 1);
    ck_assert_uint_eq(q->n_ready, 1);
    qm_position *p = qm_queue_peek(q, 0);
    ck_assert(body_is(p, "b"));
    ck_assert_int_eq(p->state, QM_POS_AVAILABLE);
    ck_assert_int_eq(p->redelivered, 1);

    qm_position_reject(t.got[2]);
    ck_assert_uint_eq(q->n_locked, 0);
    ck_assert_uint_eq(qm_queue_message_count(q), 1);
    ck_assert_uint_eq(q->bytes_total, 1);
    qm_consumer_detach(&t.c);
}
END_TEST

/* The first queue a message reaches uses the slot inside the message (pos0); later queues get
 * their own positions. Whichever goes first, the message lives until the last position goes
 * (ASan in CI catches a use after free here), and a freed slot is used again. */
START_TEST(message_slot_lifetimes)
{
    qm_queue *a = declare("slot-a"), *b = declare("slot-b"), *c = declare("slot-c");
    uint64_t base = qm_memory_bytes();
    for (int order = 0; order < 2; order++) {
        qm_message *m = msg("shared");
        ck_assert_int_eq(qm_queue_enqueue(a, m), SL_OK);
        ck_assert_int_eq(qm_queue_enqueue(b, m), SL_OK);
        /* memory counts the whole message and the second queue's position, not the body,
         * and the route ("ex", "rk"), made by the first message and kept by the cache */
        size_t route = sizeof(qm_msg_route) + 3 + 3;
        ck_assert_uint_eq(qm_memory_bytes() - base,
                          sizeof(qm_message) + m->props_len + 6 + sizeof(qm_position) + route);
        qm_message_unref(m); /* the positions hold it now */
        qm_position *pa = qm_queue_get(a, 0, NULL), *pb = qm_queue_get(b, 0, NULL);
        ck_assert_ptr_eq(pa->msg, m);
        ck_assert_ptr_eq(pb->msg, m);
        ck_assert_ptr_eq(pa, &m->pos0); /* first queue: the embedded slot */
        ck_assert_ptr_ne(pb, &m->pos0);
        ck_assert_uint_eq(m->refs, 2);
        if (order == 0) {
            qm_position_ack(pa); /* the slot goes first; the message stays for b */
            ck_assert(!m->pos0_used);
            ck_assert(body_is(pb, "shared"));
            /* a third queue reuses the free slot while b still holds the message */
            ck_assert_int_eq(qm_queue_enqueue(c, m), SL_OK);
            ck_assert(m->pos0_used);
            qm_position_ack(pb);
            qm_position *pc = qm_queue_get(c, 1, NULL);
            ck_assert(body_is(pc, "shared"));
            qm_position_ack(pc);
        } else {
            qm_position_ack(pb);
            ck_assert(body_is(pa, "shared"));
            qm_position_ack(pa);
        }
        ck_assert_uint_eq(qm_queue_message_count(a), 0);
        ck_assert_uint_eq(qm_queue_message_count(b), 0);
        ck_assert_uint_eq(qm_queue_message_count(c), 0);
        /* all of it is back but the route, which the cache keeps for the next publish */
        ck_assert_uint_eq(qm_memory_bytes(), base + sizeof(qm_msg_route) + 3 + 3);
    }
}
END_TEST

START_TEST(requeue_order_and_lookup_ids)
{
    qm_queue *q = declare("q");
    const char *b[] = {"1", "2", "3", "4", "5"};
    for (int i = 0; i < 5; i++)
        put(q, b[i]);
    uint64_t prev = 0;
    for (size_t i = 0; i < 5; i++) {
        qm_position *p = qm_queue_peek(q, i);
        ck_assert_uint_gt(p->lookup_id, prev);
        prev = p->lookup_id;
        ck_assert_ptr_eq(qm_queue_find_position(q, p->lookup_id), p);
    }
    tcons t;
    cons_init(&t, 5, 0);
    qm_consumer_attach(q, &t.c);
    qm_node_run_dispatch(N);
    ck_assert_int_eq(t.n, 5);
    /* find_position also finds LOCKED ones */
    ck_assert_ptr_eq(qm_queue_find_position(q, t.got[3]->lookup_id), t.got[3]);
    qm_position_requeue(t.got[2]); /* 3 */
    qm_position_requeue(t.got[0]); /* 1 */
    ck_assert(body_is(qm_queue_peek(q, 0), "1"));
    ck_assert(body_is(qm_queue_peek(q, 1), "3"));
    ck_assert_ptr_null(qm_queue_peek(q, 2));
    t.room = 2;
    qm_node_run_dispatch(N);
    ck_assert_int_eq(t.n, 7);
    ck_assert(body_is(t.got[5], "1"));
    ck_assert(body_is(t.got[6], "3"));
    ck_assert_int_eq(t.got[5]->redelivered, 1);
    ck_assert_int_eq(t.got[1]->redelivered, 0);
    ck_assert_uint_eq(q->stat_redelivered, 2);
    /* new messages get larger ids than everything before */
    put(q, "6");
    ck_assert_uint_gt(qm_queue_peek(q, 0)->lookup_id, t.got[4]->lookup_id);
    for (int i = 1; i < 7; i++)
        if (i != 2)
            qm_position_ack(t.got[i]);
    qm_consumer_detach(&t.c);
    ck_assert_uint_eq(qm_queue_message_count(q), 1);
}
END_TEST

START_TEST(count_ready_upto_and_take_by_id)
{
    qm_queue *q = declare("q");
    const char *b[] = {"1", "2", "3", "4", "5"};
    for (int i = 0; i < 5; i++)
        put(q, b[i]);
    uint64_t id[5];
    for (size_t i = 0; i < 5; i++)
        id[i] = qm_queue_peek(q, i)->lookup_id;
    ck_assert_uint_eq(qm_queue_count_ready_upto(q, 0), 0);
    ck_assert_uint_eq(qm_queue_count_ready_upto(q, id[0]), 1);
    ck_assert_uint_eq(qm_queue_count_ready_upto(q, id[2]), 3);
    ck_assert_uint_eq(qm_queue_count_ready_upto(q, id[4] + 100), 5);
    /* take the middle one: LOCKED, out of the ready set, still counted */
    qm_position *p = qm_queue_take(q, id[2]);
    ck_assert_ptr_nonnull(p);
    ck_assert(body_is(p, "3"));
    ck_assert_int_eq(p->state, QM_POS_LOCKED);
    ck_assert_uint_eq(q->n_ready, 4);
    ck_assert_uint_eq(qm_queue_message_count(q), 5);
    ck_assert_uint_eq(qm_queue_count_ready_upto(q, id[2]), 2);
    ck_assert_ptr_null(qm_queue_take(q, id[2])); /* locked now */
    ck_assert_ptr_null(qm_queue_take(q, id[4] + 100));
    qm_position_requeue(p); /* back at its place */
    ck_assert(body_is(qm_queue_peek(q, 2), "3"));
    p = qm_queue_take(q, id[2]);
    qm_position_ack(p);
    ck_assert_uint_eq(qm_queue_message_count(q), 4);
    ck_assert(body_is(qm_queue_peek(q, 2), "4"));
}
END_TEST

START_TEST(purge_with_locked)
{
    qm_queue *q = declare("q");
    for (int i = 0; i < 5; i++)
        put(q, "m");
    qm_position *g1 = qm_queue_get(q, 0, NULL);
    qm_position *g2 = qm_queue_get(q, 0, NULL);
    uint64_t remaining = 99;
    qm_position *g3 = qm_queue_get(q, 0, &remaining);
    ck_assert_uint_eq(remaining, 2);
    ck_assert_uint_eq(qm_queue_purge(q), 2);
    ck_assert_uint_eq(q->n_ready, 0);
    ck_assert_uint_eq(q->n_locked, 0);
    ck_assert_uint_eq(q->n_purge_pending, 3);
    ck_assert_uint_eq(qm_queue_message_count(q), 3);
    ck_assert_int_eq(g1->state, QM_POS_PURGE_PENDING);
    /* requeue of a purge-pending: deleted, never back */
    qm_position_requeue(g1);
    ck_assert_uint_eq(q->n_ready, 0);
    ck_assert_uint_eq(qm_queue_message_count(q), 2);
    qm_position_ack(g2);
    ck_assert_uint_eq(qm_queue_message_count(q), 1);
    qm_position_reject(g3);
    ck_assert_uint_eq(qm_queue_message_count(q), 0);
    ck_assert_uint_eq(q->bytes_total, 0);
    /* the queue keeps working */
    put(q, "after");
    ck_assert(body_is(qm_queue_peek(q, 0), "after"));
    ck_assert_uint_eq(qm_queue_purge(q), 1);
}
END_TEST

START_TEST(purge_big_queue)
{
    qm_queue *q = declare("big");
    qm_message *m = msg("x");
    for (int i = 0; i < 200000; i++)
        qm_queue_enqueue(q, m);
    qm_message_unref(m);
    ck_assert_uint_eq(qm_queue_purge(q), 200000);
    ck_assert_uint_eq(q->bytes_ready, 0);
}
END_TEST

/* ------------------------------------------------------------------ delete */

START_TEST(delete_if_empty_locked_only)
{
    qm_queue *q = declare("q");
    put(q, "a");
    qm_position *p = qm_queue_get(q, 0, NULL);
    ck_assert_uint_eq(q->n_ready, 0);
    uint64_t cnt = 77;
    ck_assert_int_eq(qm_queue_delete(q, QM_DELETE_IF_EMPTY, &cnt, err, sizeof err),
                     SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "queue 'q' in vhost '/' not empty");
    ck_assert_uint_eq(cnt, 77);
    ck_assert_ptr_eq(qm_queue_find(V, "q", 1), q);
    ck_assert_int_eq(p->state, QM_POS_LOCKED);
    ck_assert_uint_eq(q->n_locked, 1);
    qm_position_ack(p);
    ck_assert_int_eq(qm_queue_delete(q, QM_DELETE_IF_EMPTY, &cnt, err, sizeof err), SL_OK);
    ck_assert_uint_eq(cnt, 0);
    ck_assert_ptr_null(qm_queue_find(V, "q", 1));
}
END_TEST

START_TEST(delete_if_unused_and_cancel)
{
    qm_queue *q = declare("q");
    put(q, "a");
    put(q, "b");
    tcons t;
    cons_init(&t, 1, 0);
    qm_consumer_attach(q, &t.c);
    qm_node_run_dispatch(N);
    ck_assert_int_eq(t.n, 1);
    ck_assert_int_eq(
        qm_queue_delete(q, QM_DELETE_IF_UNUSED | QM_DELETE_IF_EMPTY, NULL, err, sizeof err),
        SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "queue 'q' in vhost '/' in use");
    ck_assert_uint_eq(q->n_consumers, 1);
    ck_assert_uint_eq(qm_queue_message_count(q), 2);
    ck_assert_int_eq(t.cancelled, 0);

    uint64_t cnt = 0;
    uint64_t inc = q->incarnation;
    ck_assert_int_eq(qm_queue_delete(q, 0, &cnt, err, sizeof err), SL_OK);
    ck_assert_uint_eq(cnt, 2);
    ck_assert_int_eq(t.cancelled, 1);
    /* held position survives as DELETED with no queue until settled */
    ck_assert_int_eq(t.got[0]->state, QM_POS_DELETED);
    ck_assert_ptr_null(t.got[0]->queue);
    qm_consumer_detach(&t.c); /* harmless after cancel */
    /* redeclare: empty, new incarnation */
    qm_queue *q2 = declare("q");
    ck_assert_uint_eq(qm_queue_message_count(q2), 0);
    ck_assert_uint_ne(q2->incarnation, inc);
    qm_position_ack(t.got[0]);
    ck_assert_uint_eq(qm_queue_message_count(q2), 0);
}
END_TEST

START_TEST(delete_removes_bindings_and_unschedules)
{
    qm_queue *q = declare("q");
    qm_exchange *x = qm_exchange_find(V, "amq.direct", 10);
    ck_assert_int_eq(qm_bind_queue(x, q, AMQP_BYTES("k"), (amqp_bytes){0}, err, sizeof err), SL_OK);
    ck_assert_uint_eq(x->n_bindings, 1);
    put(q, "a"); /* schedules dispatch */
    ck_assert_ptr_eq(N->dispatch_head, q);
    ck_assert_int_eq(qm_queue_delete(q, 0, NULL, err, sizeof err), SL_OK);
    ck_assert_uint_eq(x->n_bindings, 0);
    ck_assert_ptr_null(N->dispatch_head);
    qm_node_run_dispatch(N);
}
END_TEST

/* ------------------------------------------------------------------ declare / args */

START_TEST(declare_args_and_equivalence)
{
    qm_queue_decl d = {"q", 1, 0, 0, 0, NULL, arg_int("x-message-ttl", 1000), 0};
    qm_queue *q;
    int created;
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, &created, err, sizeof err), SL_OK);
    ck_assert_int_eq(created, 1);
    ck_assert_int_eq(q->args.message_ttl, 1000);
    d.arguments = arg_int("x-message-ttl", 2000);
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, &created, err, sizeof err), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': "
                          "received '2000' but current is '1000'");
    d.arguments = arg_int("x-message-ttl", 1000);
    d.durable = 1;
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, &created, err, sizeof err), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "inequivalent arg 'durable' for queue 'q' in vhost '/': received "
                          "'true' but current is 'false'");
    d.durable = 0;
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, &created, err, sizeof err), SL_OK);
    ck_assert_int_eq(created, 0);
    /* unknown args ignored but not required on redeclare */
    d.arguments = arg_str("x-whatever", "y");
    d.name = "q2";
    d.name_len = 2;
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, &created, err, sizeof err), SL_OK);

    qm_queue_args a;
    ck_assert_int_eq(
        qm_queue_args_parse(arg_str("x-message-ttl", "x"), "Q", "/", &a, err, sizeof err),
        SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "invalid arg 'x-message-ttl' for queue 'Q' in vhost '/': \"expected "
                          "integer, got longstr\"");
    ck_assert_int_eq(
        qm_queue_args_parse(arg_int("x-message-ttl", -1), "Q", "/", &a, err, sizeof err),
        SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "invalid arg 'x-message-ttl' for queue 'Q' in vhost '/': "
                          "{value_negative,-1}");
    ck_assert_int_eq(qm_queue_args_parse(arg_int("x-expires", 0), "Q", "/", &a, err, sizeof err),
                     SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "invalid arg 'x-expires' for queue 'Q' in vhost '/': {value_zero,0}");
    ck_assert_int_eq(
        qm_queue_args_parse(arg_str("x-queue-type", "bogus"), "Q", "/", &a, err, sizeof err),
        SL_ERR_PRECONDITION);
    ck_assert_ptr_nonnull(strstr(err, "unsupported queue type 'bogus'"));
    ck_assert_int_eq(
        qm_queue_args_parse(arg_str("x-queue-type", "classic"), "Q", "/", &a, err, sizeof err),
        SL_OK);
    qm_queue_args_free(&a);
    ck_assert_int_eq(
        qm_queue_args_parse(arg_str("x-overflow", "nope"), "Q", "/", &a, err, sizeof err),
        SL_ERR_PRECONDITION);
    ck_assert_int_eq(
        qm_queue_args_parse(arg_int("x-max-priority", 256), "Q", "/", &a, err, sizeof err),
        SL_ERR_PRECONDITION);
    ck_assert_int_eq(
        qm_queue_args_parse(arg_str("x-overflow", "reject-publish"), "Q", "/", &a, err, sizeof err),
        SL_OK);
    ck_assert_int_eq(a.overflow, QM_OVERFLOW_REJECT_PUBLISH);
    qm_queue_args_free(&a);
}
END_TEST

START_TEST(declare_server_named_exclusive_subqueue_names)
{
    qm_queue_decl d = {"", 0, 0, 1, 0, (void *)1, (amqp_bytes){0}, 0};
    qm_queue *q;
    int created;
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, &created, err, sizeof err), SL_OK);
    ck_assert_uint_eq(strlen(q->name), 30);
    ck_assert(!strncmp(q->name, "amq.gen-", 8));
    for (int i = 8; i < 30; i++) {
        char c = q->name[i];
        ck_assert(c == '-' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9'));
    }
    /* another owner */
    qm_queue_decl d2 = {q->name, 30, 0, 1, 0, (void *)2, (amqp_bytes){0}, 0};
    qm_queue *q2;
    ck_assert_int_eq(qm_queue_declare(V, &d2, &q2, &created, err, sizeof err),
                     SL_ERR_RESOURCE_LOCKED);
    qm_queue_decl d3 = {"a;b", 3, 0, 0, 0, NULL, (amqp_bytes){0}, 0};
    ck_assert_int_eq(qm_queue_declare(V, &d3, &q2, &created, err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    /* exclusive queues go when their owner does */
    qm_node_drop_exclusive(N, (void *)1);
    ck_assert_ptr_null(qm_queue_find(V, d.name, 0) /* nothing named "" */);
    ck_assert_uint_eq(sl_map_count(V->queues), 3); /* the system queues only */
    ck_assert_ptr_nonnull(qm_queue_find(V, "sluice.system.deadletter", 24));
}
END_TEST

/* ------------------------------------------------------------------ consumers */

START_TEST(consumer_priority_and_round_robin)
{
    qm_queue *q = declare("q");
    tcons lo, a, b;
    cons_init(&lo, 100, 0);
    cons_init(&a, 2, 5);
    cons_init(&b, 2, 5);
    qm_consumer_attach(q, &lo.c);
    qm_consumer_attach(q, &a.c);
    qm_consumer_attach(q, &b.c);
    for (int i = 0; i < 6; i++)
        put(q, "m");
    qm_node_run_dispatch(N);
    /* a and b alternate while they have room, then the low-priority one gets the rest */
    ck_assert_int_eq(a.n, 2);
    ck_assert_int_eq(b.n, 2);
    ck_assert_int_eq(lo.n, 2);
    ck_assert_uint_lt(a.got[0]->lookup_id, b.got[0]->lookup_id);
    ck_assert_uint_lt(b.got[0]->lookup_id, a.got[1]->lookup_id);
    ck_assert_uint_lt(a.got[1]->lookup_id, b.got[1]->lookup_id);
    ck_assert_uint_lt(b.got[1]->lookup_id, lo.got[0]->lookup_id);
    qm_consumer_detach(&lo.c);
    qm_consumer_detach(&a.c);
    qm_consumer_detach(&b.c);
    ck_assert_uint_eq(q->n_consumers, 0);
    ck_assert_ptr_eq(qm_queue_find(V, "q", 1), q); /* not auto-delete */
}
END_TEST

/* x-single-active-consumer: only the oldest attached consumer gets messages, whatever the
 * others' room or priority; when it goes the next oldest takes over, and a newcomer waits. */
START_TEST(single_active_consumer)
{
    qm_queue *q = declare_args("sac", arg_bool("x-single-active-consumer", 1));
    ck_assert(q->args.single_active);
    tcons a, b, c;
    cons_init(&a, 3, 0);
    cons_init(&b, 100, 9); /* higher priority, attached later: still waits */
    cons_init(&c, 100, 0);
    qm_consumer_attach(q, &a.c);
    qm_consumer_attach(q, &b.c);
    for (int i = 0; i < 6; i++)
        put(q, "m");
    qm_node_run_dispatch(N);
    ck_assert_int_eq(a.n, 3); /* only as much as its room */
    ck_assert_int_eq(b.n, 0);
    ck_assert_ptr_eq(q->active, &a.c);
    for (int i = 0; i < a.n; i++)
        qm_position_ack(a.got[i]);
    qm_consumer_detach(&a.c); /* b takes over */
    ck_assert_ptr_eq(q->active, &b.c);
    qm_consumer_attach(q, &c.c);
    qm_node_run_dispatch(N);
    ck_assert_int_eq(b.n, 3);
    ck_assert_int_eq(c.n, 0);
    for (int i = 0; i < b.n; i++)
        qm_position_ack(b.got[i]);
    qm_consumer_detach(&b.c);
    ck_assert_ptr_eq(q->active, &c.c);
    qm_consumer_detach(&c.c);
    ck_assert_ptr_null(q->active);

    /* the argument is a boolean */
    qm_queue_decl d = {"sac-bad", 7, 0, 0, 0, NULL, arg_int("x-single-active-consumer", 1), 0};
    qm_queue *bad = NULL;
    int created = 0;
    ck_assert_int_eq(qm_queue_declare(V, &d, &bad, &created, err, sizeof err), SL_ERR_PRECONDITION);
}
END_TEST

START_TEST(consumer_exclusive_refusal)
{
    qm_queue *q = declare("q");
    tcons a, b;
    cons_init(&a, 1, 0);
    cons_init(&b, 1, 0);
    a.c.exclusive = 1;
    ck_assert_int_eq(qm_consumer_attach(q, &a.c), SL_OK);
    ck_assert_int_eq(qm_consumer_attach(q, &b.c), SL_ERR_ACCESS_REFUSED);
    qm_consumer_detach(&a.c);
    ck_assert_int_eq(qm_consumer_attach(q, &b.c), SL_OK);
    a.c.exclusive = 1;
    ck_assert_int_eq(qm_consumer_attach(q, &a.c), SL_ERR_ACCESS_REFUSED);
    qm_consumer_detach(&b.c);
}
END_TEST

static int deleted_hook_calls;
static void on_deleted(qm_queue *q, void *ctx)
{
    (void)q;
    (void)ctx;
    deleted_hook_calls++;
}

START_TEST(auto_delete_after_last_consumer)
{
    qm_queue_decl d = {"ad", 2, 0, 0, 1, NULL, (amqp_bytes){0}, 0};
    qm_queue *q;
    int created;
    N->on_queue_deleted = on_deleted;
    deleted_hook_calls = 0;
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, &created, err, sizeof err), SL_OK);
    tcons a, b;
    cons_init(&a, 1, 0);
    cons_init(&b, 1, 0);
    qm_consumer_attach(q, &a.c);
    qm_consumer_attach(q, &b.c);
    qm_consumer_detach(&a.c);
    ck_assert_ptr_eq(qm_queue_find(V, "ad", 2), q);
    qm_consumer_detach(&b.c);
    ck_assert_ptr_null(qm_queue_find(V, "ad", 2));
    ck_assert_int_eq(deleted_hook_calls, 1);
    ck_assert_int_eq(b.cancelled, 0);
}
END_TEST

START_TEST(no_ack_consumer_and_get)
{
    qm_queue *q = declare("q");
    put(q, "a");
    put(q, "b");
    qm_position *p = qm_queue_get(q, 1, NULL);
    ck_assert(body_is(p, "a"));
    ck_assert_int_eq(p->state, QM_POS_DELETED);
    ck_assert_uint_eq(qm_queue_message_count(q), 1);
    qm_position_ack(p);
    tcons t;
    cons_init(&t, 5, 0);
    t.c.no_ack = 1;
    qm_consumer_attach(q, &t.c);
    qm_node_run_dispatch(N);
    ck_assert_int_eq(t.n, 1);
    ck_assert_uint_eq(qm_queue_message_count(q), 0);
    ck_assert_uint_eq(q->stat_acked, 2);
    qm_message_unref((qm_message *)t.got[0]);
    ck_assert_ptr_null(qm_queue_get(q, 0, NULL));
    qm_consumer_detach(&t.c);
}
END_TEST

/* ------------------------------------------------------------------ transactions */

START_TEST(tx_enqueue_commit_abort)
{
    qm_queue *q = declare("q");
    qm_tx *tx = qm_tx_begin(N);
    qm_message *m = msg("t1");
    ck_assert_int_eq(qm_tx_enqueue(tx, q, m), SL_OK);
    qm_message_unref(m);
    put(q, "plain");
    ck_assert_uint_eq(qm_queue_message_count(q), 2);
    ck_assert_uint_eq(q->n_ready, 1);
    ck_assert_ptr_eq(qm_tx_find(N, tx->id), tx);
    /* purge leaves the tx enqueue alone */
    ck_assert_uint_eq(qm_queue_purge(q), 1);
    ck_assert_uint_eq(q->n_locked, 1);
    put(q, "later");
    ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
    ck_assert_ptr_null(qm_tx_find(N, 1));
    ck_assert_uint_eq(q->n_ready, 2);
    ck_assert_uint_eq(q->n_locked, 0);
    /* committed in lookup-id order: t1 was enqueued before "later" */
    ck_assert(body_is(qm_queue_peek(q, 0), "t1"));
    ck_assert(body_is(qm_queue_peek(q, 1), "later"));

    tx = qm_tx_begin(N);
    m = msg("t2");
    qm_tx_enqueue(tx, q, m);
    qm_message_unref(m);
    ck_assert_uint_eq(qm_queue_message_count(q), 3);
    qm_tx_abort(tx);
    ck_assert_uint_eq(qm_queue_message_count(q), 2);
    ck_assert_uint_eq(q->n_ready, 2);

    /* queue deleted under an open tx: commit must not crash */
    tx = qm_tx_begin(N);
    m = msg("t3");
    qm_tx_enqueue(tx, q, m);
    qm_message_unref(m);
    qm_queue_delete(q, 0, NULL, err, sizeof err);
    ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
}
END_TEST

START_TEST(tx_dequeue_commit_abort)
{
    qm_queue *q = declare("q");
    put(q, "a");
    put(q, "b");
    put(q, "c");
    qm_position *a = qm_queue_get(q, 0, NULL);
    qm_position *b = qm_queue_get(q, 0, NULL);
    qm_position *c = qm_queue_get(q, 0, NULL);
    qm_tx *tx = qm_tx_begin(N);
    ck_assert_int_eq(qm_tx_dequeue(tx, a, QM_SETTLE_ACK), SL_OK);
    ck_assert_int_eq(qm_tx_dequeue(tx, b, QM_SETTLE_REQUEUE), SL_OK);
    ck_assert_int_eq(qm_tx_dequeue(tx, b, QM_SETTLE_ACK), SL_ERR_MESSAGE_LOCKED_UNDER_TX);
    ck_assert_uint_eq(q->n_locked, 3);
    qm_tx_abort(tx);
    ck_assert_uint_eq(q->n_locked, 3);
    ck_assert_int_eq(a->state, QM_POS_LOCKED);
    ck_assert_ptr_null(qm_pos_tx(a));

    tx = qm_tx_begin(N);
    qm_tx_dequeue(tx, a, QM_SETTLE_ACK);
    qm_tx_dequeue(tx, b, QM_SETTLE_REQUEUE);
    qm_tx_dequeue(tx, c, QM_SETTLE_ACK);
    qm_position_ack(c); /* holder settles it directly: the tx forgets it */
    ck_assert_uint_eq(q->n_locked, 2);
    ck_assert_uint_eq(q->n_ready, 0);
    ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
    ck_assert_uint_eq(q->n_locked, 0);
    ck_assert_uint_eq(q->n_ready, 1);
    ck_assert(body_is(qm_queue_peek(q, 0), "b"));
    ck_assert_uint_eq(q->stat_acked, 2);
}
END_TEST

START_TEST(tx_move_commit_abort)
{
    qm_queue *src = declare("src");
    qm_queue *dst = declare("dst");
    put(src, "a");
    put(src, "b");
    uint64_t ida = qm_queue_peek(src, 0)->lookup_id;
    qm_tx *tx = qm_tx_begin(N);
    ck_assert_int_eq(qm_move(src, ida, dst, tx), SL_OK);
    qm_position *p = qm_queue_find_position(src, ida);
    ck_assert_int_eq(p->state, QM_POS_LOCKED);
    ck_assert_uint_eq(src->n_ready, 1);
    ck_assert_uint_eq(dst->n_ready, 0);
    /* a second move of the same message is refused: locked */
    ck_assert_int_eq(qm_move(src, ida, dst, NULL), SL_ERR_MESSAGE_LOCKED_UNDER_TX);
    ck_assert_int_eq(qm_move(src, 999999, dst, NULL), SL_ERR_MESSAGE_NOT_FOUND);
    ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
    ck_assert_uint_eq(src->n_ready, 1);
    ck_assert_uint_eq(src->n_locked, 0);
    ck_assert_uint_eq(dst->n_ready, 1);
    p = qm_queue_find_position(dst, ida);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(p->move_count, 1);
    ck_assert(body_is(p, "a"));
    ck_assert_ptr_null(qm_queue_find_position(src, ida));
    ck_assert_uint_eq(dst->bytes_total, 1);
    ck_assert_uint_eq(src->bytes_total, 1);

    uint64_t idb = qm_queue_peek(src, 0)->lookup_id;
    tx = qm_tx_begin(N);
    ck_assert_int_eq(qm_move(src, idb, dst, tx), SL_OK);
    qm_tx_abort(tx);
    p = qm_queue_find_position(src, idb);
    ck_assert_int_eq(p->state, QM_POS_AVAILABLE);
    ck_assert_uint_eq(p->move_count, 0);
    ck_assert_uint_eq(src->n_ready, 1);
    ck_assert_uint_eq(dst->n_ready, 1);

    /* move of a consumer-held message */
    qm_position *g = qm_queue_get(src, 0, NULL);
    ck_assert_int_eq(qm_move(src, idb, dst, NULL), SL_ERR_MESSAGE_LOCKED_UNDER_TX);
    qm_position_ack(g);
}
END_TEST

START_TEST(move_into_subqueue_and_system)
{
    qm_queue *q = declare("q");
    put(q, "a");
    put(q, "b");
    put(q, "c");
    qm_queue *sub = qm_queue_subqueue(q, "poison", 6, 1);
    ck_assert_ptr_nonnull(sub);
    ck_assert_str_eq(sub->name, "q;poison");
    ck_assert_int_eq(sub->is_subqueue, 1);
    ck_assert_ptr_eq(qm_queue_find(V, "q;poison", 8), sub);
    ck_assert_ptr_null(sl_map_get(V->queues, "q;poison", 8));
    uint64_t idb = qm_queue_peek(q, 1)->lookup_id;
    ck_assert_int_eq(qm_move(q, idb, sub, NULL), SL_OK);
    ck_assert_uint_eq(sub->n_ready, 1);
    ck_assert_uint_eq(q->n_ready, 2);
    ck_assert_uint_eq(qm_queue_peek(sub, 0)->lookup_id, idb);
    ck_assert_uint_eq(qm_queue_peek(sub, 0)->move_count, 1);
    /* listing */
    ck_assert_uint_eq(sl_map_count(q->subqueues), 1);
    /* move first N */
    uint64_t moved = 0;
    ck_assert_int_eq(qm_move_first(q, 5, sub, NULL, &moved), SL_OK);
    ck_assert_uint_eq(moved, 2);
    /* order in the subqueue follows lookup ids */
    ck_assert(body_is(qm_queue_peek(sub, 0), "a"));
    ck_assert(body_is(qm_queue_peek(sub, 1), "b"));
    ck_assert(body_is(qm_queue_peek(sub, 2), "c"));
    /* tx move into a system queue */
    qm_queue *sys = qm_queue_find(V, "sluice.system.deadletter", 24);
    ck_assert_int_eq(sys->is_system, 1);
    qm_tx *tx = qm_tx_begin(N);
    ck_assert_int_eq(qm_move(sub, idb, sys, tx), SL_ERR_TRANSACTION_USAGE);
    qm_tx_abort(tx);
    ck_assert_int_eq(qm_move(sub, idb, sys, NULL), SL_OK);
    ck_assert_uint_eq(sys->n_ready, 1);
    /* an empty, unused subqueue goes away (deferred to run_dispatch) */
    ck_assert_uint_eq(qm_queue_purge(sub), 2);
    ck_assert_ptr_eq(qm_queue_find(V, "q;poison", 8), sub);
    qm_node_run_dispatch(N);
    ck_assert_ptr_null(qm_queue_find(V, "q;poison", 8));
    /* subqueues are deleted with their parent */
    sub = qm_queue_subqueue(q, "x", 1, 1);
    put(q, "d");
    qm_move_first(q, 1, sub, NULL, NULL);
    ck_assert_int_eq(qm_queue_delete(q, 0, NULL, err, sizeof err), SL_OK);
    ck_assert_ptr_null(qm_queue_find(V, "q;x", 3));
    /* system queues cannot be deleted */
    ck_assert_int_eq(qm_queue_delete(sys, 0, NULL, err, sizeof err), SL_ERR_ACCESS_REFUSED);
}
END_TEST

START_TEST(journal_keeps_acked)
{
    sl_buf b;
    sl_buf_init(&b);
    size_t mk = amqp_tbl_begin(&b);
    amqp_tbl_put_bool(&b, "x-journal", 1);
    amqp_tbl_end(&b, mk);
    qm_queue *q = declare_args("jq", (amqp_bytes){sl_buf_head(&b) + 4, sl_buf_unread(&b) - 4});
    sl_buf_free(&b);
    ck_assert_int_eq(q->args.journal, 1);
    put(q, "a");
    put(q, "b");
    qm_position *p = qm_queue_get(q, 0, NULL);
    qm_position_ack(p);
    qm_position_requeue(qm_queue_get(q, 0, NULL));
    qm_queue *j = qm_queue_find(V, "jq;journal", 10);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->n_ready, 1);
    ck_assert(body_is(qm_queue_peek(j, 0), "a"));
}
END_TEST

/* ------------------------------------------------------------------ routing */

START_TEST(topic_matching)
{
    static const struct {
        const char *pat, *key;
        int match;
    } cases[] = {
        {"a.*.c", "a.b.c", 1}, {"a.*.c", "a..c", 1}, {"a.*.c", "a.b.b.c", 0},
        {"x.#", "x", 1},       {"x.#", "x.y.z", 1},  {"#", "", 1},
        {"#", "a.b", 1},       {"*", "", 0},         {"*", "a", 1},
        {"*", "a.b", 0},       {"a.#.c", "a.c", 1},  {"a.#.c", "a.b.d.c", 1},
        {"a.#.c", "a.b.d", 0}, {"#.c", "c", 1},      {"#.#", "a", 1},
        {"a.b", "a.b", 1},     {"a.b", "a.bb", 0},   {"", "", 1},
        {"", "a", 0},          {"*.*", "a.", 1},     {"#.*", "", 0},
        {"a.*.#", "a.b", 1},   {"a.*.#", "a", 0},    {"stock.#.nyse", "stock.nyse", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(qm_topic_match(cases[i].pat, strlen(cases[i].pat), cases[i].key,
                                     strlen(cases[i].key)) == cases[i].match,
                      "pattern '%s' key '%s'", cases[i].pat, cases[i].key);
}
END_TEST

static amqp_bytes tbl(sl_buf *b)
{
    return (amqp_bytes){sl_buf_head(b) + 4, sl_buf_unread(b) - 4};
}

START_TEST(headers_matching)
{
    sl_buf bind, hdr;
    sl_buf_init(&bind);
    sl_buf_init(&hdr);
    size_t m = amqp_tbl_begin(&hdr);
    amqp_tbl_put_str(&hdr, "format", AMQP_BYTES("pdf"));
    amqp_tbl_put_int(&hdr, "type", 7);
    amqp_tbl_put_str(&hdr, "x-tag", AMQP_BYTES("t"));
    amqp_tbl_end(&hdr, m);

    /* all (default): both must match; integers compare by value across types */
    m = amqp_tbl_begin(&bind);
    amqp_tbl_put_str(&bind, "format", AMQP_BYTES("pdf"));
    amqp_tbl_put_long(&bind, "type", 7);
    amqp_tbl_end(&bind, m);
    ck_assert(qm_headers_match(tbl(&bind), tbl(&hdr)));
    sl_buf_free(&bind);
    sl_buf_init(&bind);
    m = amqp_tbl_begin(&bind);
    amqp_tbl_put_str(&bind, "x-match", AMQP_BYTES("all"));
    amqp_tbl_put_str(&bind, "format", AMQP_BYTES("pdf"));
    amqp_tbl_put_long(&bind, "type", 8);
    amqp_tbl_end(&bind, m);
    ck_assert(!qm_headers_match(tbl(&bind), tbl(&hdr)));
    /* any */
    sl_buf_free(&bind);
    sl_buf_init(&bind);
    m = amqp_tbl_begin(&bind);
    amqp_tbl_put_str(&bind, "x-match", AMQP_BYTES("any"));
    amqp_tbl_put_str(&bind, "format", AMQP_BYTES("zip"));
    amqp_tbl_put_long(&bind, "type", 7);
    amqp_tbl_end(&bind, m);
    ck_assert(qm_headers_match(tbl(&bind), tbl(&hdr)));
    /* x- keys ignored unless -with-x */
    sl_buf_free(&bind);
    sl_buf_init(&bind);
    m = amqp_tbl_begin(&bind);
    amqp_tbl_put_str(&bind, "x-match", AMQP_BYTES("any"));
    amqp_tbl_put_str(&bind, "x-tag", AMQP_BYTES("t"));
    amqp_tbl_end(&bind, m);
    ck_assert(!qm_headers_match(tbl(&bind), tbl(&hdr)));
    sl_buf_free(&bind);
    sl_buf_init(&bind);
    m = amqp_tbl_begin(&bind);
    amqp_tbl_put_str(&bind, "x-match", AMQP_BYTES("any-with-x"));
    amqp_tbl_put_str(&bind, "x-tag", AMQP_BYTES("t"));
    amqp_tbl_end(&bind, m);
    ck_assert(qm_headers_match(tbl(&bind), tbl(&hdr)));
    /* void value: presence only */
    sl_buf_free(&bind);
    sl_buf_init(&bind);
    m = amqp_tbl_begin(&bind);
    amqp_tbl_put_value(&bind, AMQP_BYTES("format"), &(amqp_value){.tag = 'V'});
    amqp_tbl_end(&bind, m);
    ck_assert(qm_headers_match(tbl(&bind), tbl(&hdr)));
    /* bogus x-match refused at bind */
    sl_buf_free(&bind);
    sl_buf_init(&bind);
    m = amqp_tbl_begin(&bind);
    amqp_tbl_put_str(&bind, "x-match", AMQP_BYTES("bogus"));
    amqp_tbl_end(&bind, m);
    qm_queue *q = declare("hq");
    qm_exchange *hx = qm_exchange_find(V, "amq.headers", 11);
    ck_assert_int_eq(qm_bind_queue(hx, q, AMQP_BYTES(""), tbl(&bind), err, sizeof err),
                     SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "Invalid x-match field value <<\"bogus\">>; expected all, any, "
                          "all-with-x, or any-with-x");
    /* and routing through the headers exchange */
    sl_buf_free(&bind);
    sl_buf_init(&bind);
    m = amqp_tbl_begin(&bind);
    amqp_tbl_put_str(&bind, "format", AMQP_BYTES("pdf"));
    amqp_tbl_end(&bind, m);
    ck_assert_int_eq(qm_bind_queue(hx, q, AMQP_BYTES(""), tbl(&bind), err, sizeof err), SL_OK);
    qm_queue *out[4];
    size_t total;
    ck_assert_uint_eq(qm_route(hx, AMQP_BYTES("any"), tbl(&hdr), out, 4, &total), 1);
    ck_assert_uint_eq(qm_route(hx, AMQP_BYTES("any"), (amqp_bytes){0}, out, 4, &total), 0);
    sl_buf_free(&bind);
    sl_buf_free(&hdr);
}
END_TEST

static qm_exchange *xdecl(const char *name, int type, int auto_delete, amqp_bytes args)
{
    qm_exchange_decl d = {name, strlen(name), type, 0, (uint8_t)auto_delete, 0, args};
    qm_exchange *x = NULL;
    ck_assert_int_eq(qm_exchange_declare(V, &d, &x, err, sizeof err), SL_OK);
    return x;
}

START_TEST(routing_direct_fanout_default_e2e_loop)
{
    qm_queue *q1 = declare("q1"), *q2 = declare("q2");
    qm_exchange *d = xdecl("d", QM_EX_DIRECT, 0, (amqp_bytes){0});
    qm_exchange *f = xdecl("f", QM_EX_FANOUT, 0, (amqp_bytes){0});
    qm_queue *out[8];
    size_t total;
    amqp_bytes none = {0};

    /* default exchange by queue name */
    qm_exchange *def = qm_exchange_find(V, "", 0);
    ck_assert_uint_eq(qm_route(def, AMQP_BYTES("q2"), none, out, 8, &total), 1);
    ck_assert_ptr_eq(out[0], q2);
    ck_assert_uint_eq(qm_route(def, AMQP_BYTES("nope"), none, out, 8, &total), 0);
    ck_assert_int_eq(qm_bind_queue(def, q1, AMQP_BYTES("x"), none, err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);

    qm_bind_queue(d, q1, AMQP_BYTES("k1"), none, err, sizeof err);
    qm_bind_queue(d, q1, AMQP_BYTES("k1"), none, err, sizeof err); /* idempotent */
    ck_assert_uint_eq(d->n_bindings, 1);
    qm_bind_queue(d, q2, AMQP_BYTES("k2"), none, err, sizeof err);
    ck_assert_uint_eq(qm_route(d, AMQP_BYTES("k1"), none, out, 8, &total), 1);
    ck_assert_ptr_eq(out[0], q1);

    qm_bind_queue(f, q1, AMQP_BYTES(""), none, err, sizeof err);
    qm_bind_queue(f, q2, AMQP_BYTES("zzz"), none, err, sizeof err);
    ck_assert_uint_eq(qm_route(f, AMQP_BYTES("whatever"), none, out, 8, &total), 2);

    /* e2e loop d <-> f, plus d -> q1 directly: q1 and q2 reached once each */
    ck_assert_int_eq(qm_bind_exchange(d, f, AMQP_BYTES("k1"), none, err, sizeof err), SL_OK);
    ck_assert_int_eq(qm_bind_exchange(f, d, AMQP_BYTES(""), none, err, sizeof err), SL_OK);
    ck_assert_uint_eq(f->n_inbound, 1);
    size_t n = qm_route(d, AMQP_BYTES("k1"), none, out, 8, &total);
    ck_assert_uint_eq(n, 2);
    ck_assert_ptr_ne(out[0], out[1]);
    /* cap smaller than total */
    n = qm_route(d, AMQP_BYTES("k1"), none, out, 1, &total);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(total, 2);

    /* exchange delete removes bindings both ways */
    ck_assert_int_eq(qm_exchange_delete(f, 1, err, sizeof err), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "exchange 'f' in vhost '/' in use");
    ck_assert_int_eq(qm_exchange_delete(f, 0, err, sizeof err), SL_OK);
    ck_assert_uint_eq(d->n_bindings, 2);
    ck_assert_uint_eq(d->n_inbound, 0);

    /* equivalence */
    qm_exchange_decl dd = {"d", 1, QM_EX_FANOUT, 0, 0, 0, none};
    qm_exchange *x;
    ck_assert_int_eq(qm_exchange_declare(V, &dd, &x, err, sizeof err), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "inequivalent arg 'type' for exchange 'd' in vhost '/': received "
                          "'fanout' but current is 'direct'");
}
END_TEST

/* The binding index: a direct route is one lookup among thousands of bindings, duplicates
 * are found by key, and deleting a queue or an exchange takes exactly its own bindings out of
 * every list (route results, counts, the key chains) and nothing else. */
START_TEST(bindings_indexed_many)
{
    enum { NQ = 2000 };
    static qm_queue *qs[NQ];
    char name[32];
    amqp_bytes none = {0};
    qm_exchange *d = xdecl("many", QM_EX_DIRECT, 0, none);
    qm_exchange *t = xdecl("many-topic", QM_EX_TOPIC, 0, none);
    for (int i = 0; i < NQ; i++) {
        snprintf(name, sizeof name, "mq%d", i);
        qs[i] = declare(name);
        snprintf(name, sizeof name, "k%d", i);
        ck_assert_int_eq(qm_bind_queue(d, qs[i], amqp_cstr(name), none, err, sizeof err), SL_OK);
        ck_assert_int_eq(qm_bind_queue(t, qs[i], AMQP_BYTES("a.*"), none, err, sizeof err), SL_OK);
    }
    for (int i = 0; i < 3; i++)
        qm_bind_queue(d, qs[i * 10], AMQP_BYTES("shared"), none, err, sizeof err);
    qm_bind_queue(d, qs[10], AMQP_BYTES("shared"), none, err, sizeof err); /* duplicate */
    ck_assert_uint_eq(d->n_bindings, NQ + 3);

    qm_queue *out[4];
    size_t total;
    ck_assert_uint_eq(qm_route(d, AMQP_BYTES("k1500"), none, out, 4, &total), 1);
    ck_assert_ptr_eq(out[0], qs[1500]);
    ck_assert_uint_eq(qm_route(d, AMQP_BYTES("shared"), none, out, 4, &total), 3);
    ck_assert_uint_eq(qm_route(d, AMQP_BYTES("k"), none, out, 4, &total), 0);

    /* unbind the middle of a chain, then its head */
    qm_unbind_queue(d, qs[10], AMQP_BYTES("shared"), none);
    ck_assert_uint_eq(qm_route(d, AMQP_BYTES("shared"), none, out, 4, &total), 2);
    qm_unbind_queue(d, qs[20], AMQP_BYTES("shared"), none);
    qm_unbind_queue(d, qs[20], AMQP_BYTES("shared"), none); /* not bound any more: no-op */
    ck_assert_uint_eq(qm_route(d, AMQP_BYTES("shared"), none, out, 4, &total), 1);
    ck_assert_ptr_eq(out[0], qs[0]);
    ck_assert_uint_eq(d->n_bindings, NQ + 1);

    /* deleting a queue takes its bindings out of both exchanges */
    ck_assert_int_eq(qm_queue_delete(qs[1500], 0, NULL, err, sizeof err), SL_OK);
    ck_assert_uint_eq(qm_route(d, AMQP_BYTES("k1500"), none, out, 4, &total), 0);
    ck_assert_uint_eq(d->n_bindings, NQ);
    ck_assert_uint_eq(t->n_bindings, NQ - 1);
    qm_route(t, AMQP_BYTES("a.b"), none, out, 4, &total);
    ck_assert_uint_eq(total, NQ - 1);
    ck_assert_int_eq(qm_queue_delete(qs[0], 0, NULL, err, sizeof err), SL_OK);
    ck_assert_uint_eq(qm_route(d, AMQP_BYTES("shared"), none, out, 4, &total), 0);

    /* an exchange-to-exchange binding goes with its destination */
    qm_exchange *x2 = xdecl("many-dest", QM_EX_FANOUT, 0, none);
    ck_assert_int_eq(qm_bind_exchange(d, x2, AMQP_BYTES("k7"), none, err, sizeof err), SL_OK);
    ck_assert_int_eq(qm_bind_queue(x2, qs[3], AMQP_BYTES(""), none, err, sizeof err), SL_OK);
    ck_assert_uint_eq(qm_route(d, AMQP_BYTES("k7"), none, out, 4, &total), 2);
    ck_assert_int_eq(qm_exchange_delete(x2, 0, err, sizeof err), SL_OK);
    ck_assert_uint_eq(qm_route(d, AMQP_BYTES("k7"), none, out, 4, &total), 1);
    ck_assert_ptr_eq(out[0], qs[7]);
    ck_assert_uint_eq(d->n_bindings, NQ - 2);
    ck_assert_ptr_null(qm_bindings_with_key(d, AMQP_BYTES("k1500")));
}
END_TEST

/* The topic trie routes exactly as testing every pattern with qm_topic_match would, for
 * random patterns (with "*", "#", empty words, repeated "#") and keys, before and after half
 * of the bindings go; with none left the trie is gone. Seeded, so a failure repeats. */
static void random_words(char *out, size_t cap, int maxw, const char *const *alphabet, int na,
                         unsigned *seed)
{
    int nw = rand_r(seed) % (maxw + 1);
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < nw; i++) {
        const char *w = alphabet[rand_r(seed) % na];
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "." : "", w);
    }
}

/* A headers exchange with many bindings indexes a big headers table (route.c); routing must
 * agree with matching each binding against the table itself, repeated keys included (the
 * first one counts), for all and any. */
START_TEST(headers_index_agrees_with_scan)
{
    enum { NB = 40, NH = 300 };
    qm_exchange *hx = xdecl("many-headers", QM_EX_HEADERS, 0, (amqp_bytes){0});
    sl_buf hdr;
    sl_buf_init(&hdr);
    size_t m = amqp_tbl_begin(&hdr);
    char k[32];
    for (int i = 0; i < NH; i++) {
        snprintf(k, sizeof k, "h%d", i % 250); /* h0..h49 twice: the first value counts */
        amqp_tbl_put_int(&hdr, k, i);
    }
    amqp_tbl_end(&hdr, m);
    static sl_buf binds[NB];
    static qm_queue *qs[NB];
    for (int i = 0; i < NB; i++) {
        sl_buf_init(&binds[i]);
        size_t bm = amqp_tbl_begin(&binds[i]);
        amqp_tbl_put_str(&binds[i], "x-match", amqp_cstr(i % 2 ? "any" : "all"));
        /* h{i}=i matches the first occurrence; h{i}=i+250 only the repeat (must not match) */
        snprintf(k, sizeof k, "h%d", i);
        amqp_tbl_put_int(&binds[i], k, i % 3 == 2 ? i + 250 : i);
        snprintf(k, sizeof k, "h%d", i % 5 ? i + 1 : 999);
        amqp_tbl_put_int(&binds[i], k, i + 1);
        amqp_tbl_end(&binds[i], bm);
        snprintf(k, sizeof k, "hq%d", i);
        qs[i] = declare(k);
        sl_err be = qm_bind_queue(hx, qs[i], AMQP_BYTES(""), tbl(&binds[i]), err, sizeof err);
        ck_assert_msg(be == SL_OK, "bind %d: %s", i, err);
    }
    qm_queue *out[NB];
    size_t total;
    size_t n = qm_route(hx, AMQP_BYTES(""), tbl(&hdr), out, NB, &total);
    size_t want = 0;
    for (int i = 0; i < NB; i++) {
        if (!qm_headers_match(tbl(&binds[i]), tbl(&hdr)))
            continue;
        want++;
        int found = 0;
        for (size_t j = 0; j < n; j++)
            found |= out[j] == qs[i];
        ck_assert_msg(found, "binding %d matches but was not routed", i);
    }
    ck_assert_uint_eq(n, want);
    ck_assert_uint_gt(want, 0);
    ck_assert_uint_lt(want, NB);
    for (int i = 0; i < NB; i++)
        sl_buf_free(&binds[i]);
    sl_buf_free(&hdr);
}
END_TEST

START_TEST(topic_trie_agrees_with_matcher)
{
    enum { NP = 300, NK = 3000 };
    static const char *const pat_words[] = {"a", "b", "c", "", "*", "#", "#"};
    static const char *const key_words[] = {"a", "b", "c", "", "*", "#"};
    static char pats[NP][64];
    static qm_queue *qs[NP];
    unsigned seed = 20261130;
    amqp_bytes none = {0};
    qm_exchange *t = xdecl("trie", QM_EX_TOPIC, 0, none);
    char name[32];
    for (int i = 0; i < NP; i++) {
        random_words(pats[i], sizeof pats[i], 5, pat_words, 7, &seed);
        snprintf(name, sizeof name, "tq%d", i);
        qs[i] = declare(name);
        ck_assert_int_eq(qm_bind_queue(t, qs[i], amqp_cstr(pats[i]), none, err, sizeof err), SL_OK);
    }
    static qm_queue *out[NP];
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < NK; k++) {
            char key[64];
            random_words(key, sizeof key, 6, key_words, 6, &seed);
            size_t total;
            size_t n = qm_route(t, amqp_cstr(key), none, out, NP, &total);
            size_t want = 0;
            for (int i = 0; i < NP; i++) {
                int bound = round == 0 || i % 2 == 0;
                if (!bound || !qm_topic_match(pats[i], strlen(pats[i]), key, strlen(key)))
                    continue;
                want++;
                int found = 0;
                for (size_t j = 0; j < n; j++)
                    found |= out[j] == qs[i];
                ck_assert_msg(found, "key '%s': pattern '%s' matches but was not routed", key,
                              pats[i]);
            }
            ck_assert_msg(n == want, "key '%s': routed to %zu queues, %zu patterns match", key, n,
                          want);
        }
        for (int i = 1; i < NP; i += 2) /* unbind the odd ones for the second round */
            qm_unbind_queue(t, qs[i], amqp_cstr(pats[i]), none);
    }
    for (int i = 0; i < NP; i += 2)
        qm_unbind_queue(t, qs[i], amqp_cstr(pats[i]), none);
    ck_assert_uint_eq(t->n_bindings, 0);
    ck_assert_ptr_null(t->trie);

    /* the longest AMQP key, 255 dots (256 empty words), takes the trie and agrees with the
     * matcher (it used to test every binding, 62 ms a message with 5,000 of them) */
    {
        char dots[256];
        memset(dots, '.', 255);
        dots[255] = 0;
        static const char *const deep[] = {"#", "*.#", "#.*", "a.#", "#.a", "*", "", "#.#.#"};
        for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
            qm_bind_queue(t, qs[i], amqp_cstr(deep[i]), none, err, sizeof err);
        }
        size_t total;
        size_t n = qm_route(t, amqp_cstr(dots), none, out, NP, &total);
        size_t want = 0;
        for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++)
            want += (size_t)qm_topic_match(deep[i], strlen(deep[i]), dots, 255);
        ck_assert_uint_eq(want, 4); /* #, *.#, #.*, #.#.# */
        ck_assert_uint_eq(n, want);
        for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++)
            qm_unbind_queue(t, qs[i], amqp_cstr(deep[i]), none);
    }

    /* many "#": bounded work, and still right */
    qm_bind_queue(t, qs[0], AMQP_BYTES("#.a.#.a.#.a.#.a.#.b"), none, err, sizeof err);
    char longkey[256] = "";
    for (int i = 0; i < 120; i++)
        strcat(longkey, "a.");
    strcat(longkey, "c");
    size_t total;
    ck_assert_uint_eq(qm_route(t, amqp_cstr(longkey), none, out, 4, &total), 0);
    longkey[strlen(longkey) - 1] = 'b';
    ck_assert_uint_eq(qm_route(t, amqp_cstr(longkey), none, out, 4, &total), 1);
}
END_TEST

START_TEST(alternate_and_auto_delete_exchange)
{
    qm_queue *uq = declare("unrouted");
    qm_exchange *ae = xdecl("ae", QM_EX_FANOUT, 0, arg_str("alternate-exchange", "main"));
    qm_bind_queue(ae, uq, AMQP_BYTES(""), (amqp_bytes){0}, err, sizeof err);
    qm_exchange *m = xdecl("main", QM_EX_DIRECT, 0, arg_str("alternate-exchange", "ae"));
    ck_assert_str_eq(m->alternate, "ae");
    qm_queue *q = declare("q");
    qm_bind_queue(m, q, AMQP_BYTES("k"), (amqp_bytes){0}, err, sizeof err);
    qm_queue *out[4];
    size_t total;
    ck_assert_uint_eq(qm_route(m, AMQP_BYTES("k"), (amqp_bytes){0}, out, 4, &total), 1);
    ck_assert_ptr_eq(out[0], q);
    ck_assert_uint_eq(qm_route(m, AMQP_BYTES("other"), (amqp_bytes){0}, out, 4, &total), 1);
    ck_assert_ptr_eq(out[0], uq);
    /* AE loop: ae's own alternate pointing back at main terminates */
    qm_unbind_queue(ae, uq, AMQP_BYTES(""), (amqp_bytes){0});
    ck_assert_uint_eq(qm_route(m, AMQP_BYTES("other"), (amqp_bytes){0}, out, 4, &total), 0);

    /* auto-delete exchange goes with its last binding */
    qm_exchange *ad = xdecl("ad", QM_EX_DIRECT, 1, (amqp_bytes){0});
    qm_bind_queue(ad, q, AMQP_BYTES("a"), (amqp_bytes){0}, err, sizeof err);
    qm_bind_queue(ad, q, AMQP_BYTES("b"), (amqp_bytes){0}, err, sizeof err);
    qm_unbind_queue(ad, q, AMQP_BYTES("a"), (amqp_bytes){0});
    ck_assert_ptr_nonnull(qm_exchange_find(V, "ad", 2));
    qm_unbind_queue(ad, q, AMQP_BYTES("b"), (amqp_bytes){0});
    ck_assert_ptr_null(qm_exchange_find(V, "ad", 2));
    /* ... also when the queue is deleted */
    ad = xdecl("ad2", QM_EX_DIRECT, 1, (amqp_bytes){0});
    qm_bind_queue(ad, q, AMQP_BYTES("a"), (amqp_bytes){0}, err, sizeof err);
    qm_queue_delete(q, 0, NULL, err, sizeof err);
    ck_assert_ptr_null(qm_exchange_find(V, "ad2", 3));
}
END_TEST

/* ------------------------------------------------------------------ priority, TTL, limits */

/* A store walk over held positions that stops after each one, as TIDY's slices do. */
typedef struct held_walk {
    qm_position *last; /* the one visited by the last call */
    int visits[HELD_N_MAX];
} held_walk;

/* i of a message "h<i>" (bodies are not NUL-terminated) */
static int held_index(const qm_position *pos)
{
    char s[16] = {0};
    size_t n = pos->msg->body_len < sizeof s - 1 ? pos->msg->body_len : sizeof s - 1;
    memcpy(s, qm_msg_body(pos->msg), n);
    return atoi(s + 1);
}

static int visit_one_held(void *ctx, qm_position *pos)
{
    held_walk *w = ctx;
    int i = held_index(pos);
    w->visits[i]++;
    w->last = pos;
    return 1;
}

/* The walk resumes in the held list where it stopped, not by counting from the head: each
 * held position is visited exactly once although others are acked between the calls (the
 * one just visited, and sometimes the one the walk was to resume at), and positions held
 * since the walk began are not visited. Counting skipped one position per ack. */
START_TEST(store_walk_resumes_in_the_held_list)
{
    qm_queue *q = declare("held");
    char body[16];
    for (int i = 0; i < HELD_N_MAX; i++) {
        snprintf(body, sizeof body, "h%d", i);
        put(q, body);
    }
    qm_position *held[HELD_N_MAX];
    for (int i = 0; i < HELD_N_MAX - 10; i++) {
        held[i] = qm_queue_get(q, 0, NULL);
        ck_assert_ptr_nonnull(held[i]);
    }
    held_walk w;
    memset(&w, 0, sizeof w);
    int acked_unvisited[HELD_N_MAX] = {0};
    const qm_store_visitor v = {visit_one_held, NULL};
    /* the held list is newest first: h(N-11) ... h0; ready are h(N-10) .. h(N-1) */
    uint64_t cursor = 0;
    int calls = 0;
    while (!qm_queue_visit_stored(q, &cursor, &v, &w)) {
        ck_assert_int_lt(++calls, 2 * HELD_N_MAX);
        if (w.last->state != QM_POS_LOCKED)
            continue; /* a ready one */
        qm_position *next = w.last->u.lk->lnext;
        qm_position_ack(w.last);
        if (calls % 7 == 0 && next) {
            acked_unvisited[held_index(next)] = 1;
            qm_position_ack(next); /* the walk's resume point goes */
        }
        if (calls % 11 == 0) /* held after the walk began (visited once, when ready) */
            qm_queue_get(q, 0, NULL);
    }
    for (int i = 0; i < HELD_N_MAX - 10; i++)
        ck_assert_msg(w.visits[i] == (acked_unvisited[i] ? 0 : 1), "h%d visited %d times", i,
                      w.visits[i]);
    for (int i = HELD_N_MAX - 10; i < HELD_N_MAX; i++) /* ready at the start: visited there */
        ck_assert_msg(w.visits[i] == 1, "h%d visited %d times", i, w.visits[i]);
}
END_TEST

START_TEST(priority_ordering)
{
    qm_queue *q = declare_args("pq", arg_int("x-max-priority", 5));
    ck_assert_int_eq(q->args.max_priority, 5);
    const int prio[] = {1, 3, 9, 0, 5, 3};
    const char *body[] = {"p1", "p3a", "p9", "p0", "p5", "p3b"};
    for (int i = 0; i < 6; i++) {
        qm_message *m = msg_full("rk", body[i], prio[i], NULL, (amqp_bytes){0});
        qm_queue_enqueue(q, m);
        qm_message_unref(m);
    }
    /* 9 is capped at 5 and keeps arrival order with the 5 */
    const char *want[] = {"p9", "p5", "p3a", "p3b", "p1", "p0"};
    for (int i = 0; i < 6; i++)
        ck_assert(body_is(qm_queue_peek(q, (size_t)i), want[i]));
    qm_position *p = qm_queue_get(q, 0, NULL);
    ck_assert(body_is(p, "p9"));
    qm_position *p2 = qm_queue_get(q, 0, NULL);
    qm_position_requeue(p);
    ck_assert(body_is(qm_queue_peek(q, 0), "p9"));
    ck_assert_ptr_eq(qm_queue_find_position(q, p2->lookup_id), p2);
    qm_position_ack(p2);
    /* a non-priority queue ignores priorities */
    qm_queue *fifo = declare("fifo");
    for (int i = 0; i < 3; i++) {
        qm_message *m = msg_full("rk", body[i], prio[i], NULL, (amqp_bytes){0});
        qm_queue_enqueue(fifo, m);
        qm_message_unref(m);
    }
    ck_assert(body_is(qm_queue_peek(fifo, 0), "p1"));
}
END_TEST

START_TEST(ttl_expiry_at_head)
{
    qm_queue *q = declare_args("tq", arg_int("x-message-ttl", 1000));
    put(q, "a"); /* expires at 2000 */
    N->test_now = 1500;
    qm_message *m = msg_full("rk", "short", -1, "100", (amqp_bytes){0}); /* at 1600 */
    qm_queue_enqueue(q, m);
    qm_message_unref(m);
    put(q, "b"); /* at 2500 */
    ck_assert_uint_eq(qm_node_tick(N, 1500), 2000);
    ck_assert_uint_eq(q->n_ready, 3);
    /* only at the head: "short" waits behind "a" */
    ck_assert_uint_eq(qm_node_tick(N, 2000), 2500);
    ck_assert_uint_eq(q->n_ready, 1);
    ck_assert_uint_eq(q->stat_expired, 2);
    N->test_now = 2600;
    ck_assert_ptr_null(qm_queue_get(q, 0, NULL)); /* expired on get */
    ck_assert_uint_eq(q->stat_expired, 3);
    ck_assert_uint_eq(qm_queue_message_count(q), 0);
    ck_assert_uint_eq(q->bytes_total, 0);
}
END_TEST

/* Mass expiry is bounded per turn once the door calls qm_node_new_turn: QM_EXPIRE_PER_TURN
 * messages a turn, the queue reported due at once while more wait, a basic.get meanwhile
 * gets nothing rather than clearing the backlog itself, and in the end all of them go and
 * what was behind them is there. */
START_TEST(mass_expiry_is_bounded_per_turn)
{
    enum { N_EXP = 2 * QM_EXPIRE_PER_TURN + 100 };
    qm_queue *q = declare_args("mass", arg_int("x-message-ttl", 1000));
    for (int i = 0; i < N_EXP; i++)
        put(q, "e");
    N->test_now = 5000;
    put(q, "live"); /* expires at 6000 */
    qm_node_new_turn(N);
    ck_assert_uint_eq(qm_node_tick(N, 5000), 5000); /* due again at once */
    ck_assert_uint_eq(q->stat_expired, QM_EXPIRE_PER_TURN);
    ck_assert_ptr_null(qm_queue_get(q, 1, NULL)); /* no budget left this turn */
    ck_assert_uint_eq(q->stat_expired, QM_EXPIRE_PER_TURN);
    qm_node_new_turn(N);
    ck_assert_uint_eq(qm_node_tick(N, 5000), 5000);
    qm_node_new_turn(N);
    ck_assert_uint_eq(qm_node_tick(N, 5000), 6000); /* only "live" is left */
    ck_assert_uint_eq(q->stat_expired, N_EXP);
    ck_assert_uint_eq(q->n_ready, 1);
    qm_position *pos = qm_queue_get(q, 1, NULL);
    ck_assert_ptr_nonnull(pos);
    ck_assert_uint_eq(pos->msg->body_len, 4);
    qm_position_ack(pos);
}
END_TEST

/* The deadline heap: with thousands of queues, a tick visits only the due ones (their heads
 * expire, nothing else changes), deadlines come back in order whatever the insertion order,
 * deleted queues leave the heap, a queue whose last consumer left is back for x-expires,
 * and exclusive queues are dropped by owner without a scan. */
START_TEST(deadline_heap_many_queues)
{
    enum { NQ = 3000 };
    static qm_queue *qs[NQ];
    char name[32];
    N->test_now = 1000;
    for (int i = 0; i < NQ; i++) {
        snprintf(name, sizeof name, "h%d", i);
        /* TTLs in a scrambled order: 1..NQ ms */
        int ttl = 1 + (int)(((unsigned)i * 7919u) % NQ);
        qs[i] = declare_args(name, arg_int("x-message-ttl", ttl));
        put(qs[i], "x");
    }
    declare("idle"); /* no TTL: never in the heap */
    ck_assert_uint_eq(qm_node_tick(N, 1000), 1001);
    for (uint64_t t = 1001; t <= 1000 + NQ; t += 97) {
        uint64_t next = qm_node_tick(N, t);
        size_t left = 0;
        for (int i = 0; i < NQ; i++) {
            int ttl = 1 + (int)(((unsigned)i * 7919u) % NQ);
            ck_assert_uint_eq(qs[i]->n_ready, 1000 + (uint64_t)ttl > t ? 1 : 0);
            left += qs[i]->n_ready;
        }
        ck_assert_uint_eq(left, 1000 + NQ - t);
        ck_assert_uint_eq(next, left ? t + 1 : 0);
    }
    /* delete queues while they are in the heap */
    for (int i = 0; i < NQ; i++)
        if (qs[i]->n_ready && i % 2) {
            uint64_t c;
            ck_assert_int_eq(qm_queue_delete(qs[i], 0, &c, err, sizeof err), SL_OK);
            qs[i] = NULL;
        }
    ck_assert_uint_eq(qm_node_tick(N, 1000 + NQ), 0);
    for (int i = 0; i < NQ; i++)
        ck_assert(!qs[i] || qs[i]->n_ready == 0);

    /* x-expires: a consumer keeps the queue; when it leaves, the queue is due again */
    N->test_now = 10000;
    qm_queue *eq = declare_args("xe", arg_int("x-expires", 300));
    tcons t;
    cons_init(&t, 0, 0);
    ck_assert_int_eq(qm_consumer_attach(eq, &t.c), SL_OK);
    ck_assert_uint_eq(qm_node_tick(N, 10300), 0); /* in use: not due */
    ck_assert_ptr_nonnull(qm_queue_find(V, "xe", 2));
    N->test_now = 10400;
    qm_consumer_detach(&t.c);
    ck_assert_uint_eq(qm_node_tick(N, 10500), 10700);
    ck_assert_uint_eq(qm_node_tick(N, 10700), 0);
    ck_assert_ptr_null(qm_queue_find(V, "xe", 2));

    /* exclusive queues go with their owner, the others' stay */
    int owner_a, owner_b;
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "ea%d", i);
        qm_queue_decl da = {name, strlen(name), 0, 1, 0, &owner_a, (amqp_bytes){0}, 0};
        qm_queue *q;
        int created;
        ck_assert_int_eq(qm_queue_declare(V, &da, &q, &created, err, sizeof err), SL_OK);
        snprintf(name, sizeof name, "eb%d", i);
        qm_queue_decl db = {name, strlen(name), 0, 1, 0, &owner_b, (amqp_bytes){0}, 0};
        ck_assert_int_eq(qm_queue_declare(V, &db, &q, &created, err, sizeof err), SL_OK);
    }
    ck_assert_int_eq(qm_queue_delete(qm_queue_find(V, "ea2", 3), 0, NULL, err, sizeof err), SL_OK);
    qm_node_drop_exclusive(N, &owner_a);
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "ea%d", i);
        ck_assert_ptr_null(qm_queue_find(V, name, strlen(name)));
        snprintf(name, sizeof name, "eb%d", i);
        ck_assert_ptr_nonnull(qm_queue_find(V, name, strlen(name)));
    }
    qm_node_drop_exclusive(N, &owner_b);
    ck_assert_ptr_null(qm_queue_find(V, "eb0", 3));
}
END_TEST

/* A message behind the head with an earlier deadline expires once it is the head, at its own
 * deadline, even when the queue has no consumer to take it (the head was taken by a get). */
START_TEST(deadline_of_a_new_head)
{
    qm_queue *q = declare_args("nh", arg_int("x-message-ttl", 1000));
    N->test_now = 1000;
    put(q, "long");                                                      /* 2000 */
    qm_message *m = msg_full("rk", "short", -1, "100", (amqp_bytes){0}); /* 1100 */
    qm_queue_enqueue(q, m);
    qm_message_unref(m);
    ck_assert_uint_eq(qm_node_tick(N, 1050), 2000);
    N->test_now = 1200;
    qm_position *p = qm_queue_get(q, 0, NULL); /* "long"; "short" is the head, due 1100 */
    ck_assert(body_is(p, "long"));
    ck_assert_uint_eq(qm_node_tick(N, 1200), 0);
    ck_assert_uint_eq(q->n_ready, 0);
    ck_assert_uint_eq(q->stat_expired, 1);
    qm_position_ack(p);
}
END_TEST

START_TEST(queue_expires_when_unused)
{
    qm_queue *q = declare_args("eq", arg_int("x-expires", 500));
    (void)q;
    ck_assert_uint_eq(qm_node_tick(N, 1200), 1500);
    ck_assert_ptr_nonnull(qm_queue_find(V, "eq", 2));
    N->test_now = 1400;
    declare_args("eq", arg_int("x-expires", 500)); /* redeclare counts as use */
    ck_assert_uint_eq(qm_node_tick(N, 1600), 1900);
    ck_assert_uint_eq(qm_node_tick(N, 1900), 0);
    ck_assert_ptr_null(qm_queue_find(V, "eq", 2));
}
END_TEST

START_TEST(max_length_drop_head_and_reject)
{
    qm_queue *q = declare_args("ml", arg_int("x-max-length", 2));
    put(q, "1");
    put(q, "2");
    put(q, "3");
    ck_assert_uint_eq(q->n_ready, 2);
    ck_assert(body_is(qm_queue_peek(q, 0), "2"));
    ck_assert(body_is(qm_queue_peek(q, 1), "3"));
    ck_assert_uint_eq(q->bytes_total, 2);

    sl_buf b;
    sl_buf_init(&b);
    size_t mk = amqp_tbl_begin(&b);
    amqp_tbl_put_long(&b, "x-max-length", 1);
    amqp_tbl_put_str(&b, "x-overflow", AMQP_BYTES("reject-publish"));
    amqp_tbl_end(&b, mk);
    qm_queue *r = declare_args("rp", tbl(&b));
    put(r, "1");
    qm_message *m = msg("2");
    ck_assert_int_eq(qm_queue_enqueue(r, m), SL_ERR_RESOURCE);
    qm_message_unref(m);
    ck_assert_uint_eq(r->n_ready, 1);
    ck_assert(body_is(qm_queue_peek(r, 0), "1"));
    sl_buf_free(&b);
}
END_TEST

/* ------------------------------------------------------------------ dead-lettering */

static int xdeath_entry(amqp_bytes headers, int idx, amqp_bytes *entry)
{
    amqp_value v;
    if (!amqp_table_get(headers, "x-death", &v) || v.tag != 'A')
        return 0;
    amqp_table_iter it;
    amqp_array_iter_init(&it, v.v.s);
    for (int i = 0; amqp_array_next(&it, &v); i++)
        if (i == idx) {
            *entry = v.v.s;
            return v.tag == 'F';
        }
    return 0;
}

static int tbl_str_is(amqp_bytes t, const char *key, const char *want)
{
    amqp_value v;
    amqp_bytes s;
    return amqp_table_get(t, key, &v) && amqp_value_str(&v, &s) && amqp_bytes_eq(s, want);
}

static int64_t tbl_int(amqp_bytes t, const char *key)
{
    amqp_value v;
    int64_t i = -1;
    if (amqp_table_get(t, key, &v))
        amqp_value_int(&v, &i);
    return i;
}

START_TEST(deadletter_x_death)
{
    xdecl("dlx", QM_EX_FANOUT, 0, (amqp_bytes){0});
    qm_queue *dlq = declare("dlq");
    qm_bind_queue(qm_exchange_find(V, "dlx", 3), dlq, AMQP_BYTES(""), (amqp_bytes){0}, err,
                  sizeof err);
    sl_buf b;
    sl_buf_init(&b);
    size_t mk = amqp_tbl_begin(&b);
    amqp_tbl_put_str(&b, "x-dead-letter-exchange", AMQP_BYTES("dlx"));
    amqp_tbl_end(&b, mk);
    qm_queue *q = declare_args("work", tbl(&b));
    sl_buf_free(&b);

    sl_buf h;
    sl_buf_init(&h);
    mk = amqp_tbl_begin(&h);
    amqp_tbl_put_str(&h, "app", AMQP_BYTES("v"));
    amqp_tbl_end(&h, mk);
    qm_message *m = msg_full("orig.rk", "body", 2, "60000", tbl(&h));
    sl_buf_free(&h);
    qm_queue_enqueue(q, m);
    qm_message_unref(m);

    qm_position_reject(qm_queue_get(q, 0, NULL));
    ck_assert_uint_eq(dlq->n_ready, 1);
    ck_assert_uint_eq(q->stat_dead_lettered, 1);
    qm_position *p = qm_queue_peek(dlq, 0);
    ck_assert(body_is(p, "body"));
    ck_assert_int_eq(qm_pos_expires(p), 0); /* expiration removed */
    ck_assert_int_eq(p->msg->has_expiration, 0);
    ck_assert_int_eq(p->msg->priority, 2);
    ck_assert(amqp_bytes_eq(qm_msg_routing_key(p->msg), "orig.rk"));
    amqp_basic_props bp;
    ck_assert_int_eq(amqp_props_decode(qm_msg_props(p->msg), p->msg->props_len, &bp), 0);
    ck_assert(!(bp.flags & AMQP_P_EXPIRATION));
    ck_assert(tbl_str_is(bp.headers, "app", "v"));
    ck_assert(tbl_str_is(bp.headers, "x-first-death-reason", "rejected"));
    ck_assert(tbl_str_is(bp.headers, "x-first-death-queue", "work"));
    ck_assert(tbl_str_is(bp.headers, "x-first-death-exchange", "ex"));
    amqp_bytes e;
    ck_assert(xdeath_entry(bp.headers, 0, &e));
    ck_assert_int_eq(tbl_int(e, "count"), 1);
    ck_assert(tbl_str_is(e, "reason", "rejected"));
    ck_assert(tbl_str_is(e, "queue", "work"));
    ck_assert(tbl_str_is(e, "exchange", "ex"));
    ck_assert(tbl_str_is(e, "original-expiration", "60000"));
    amqp_value v;
    ck_assert(amqp_table_get(e, "time", &v) && v.tag == 'T');
    ck_assert(amqp_table_get(e, "count", &v) && v.tag == 'l');
    ck_assert(amqp_table_get(e, "routing-keys", &v) && v.tag == 'A');
    amqp_table_iter it;
    amqp_array_iter_init(&it, v.v.s);
    ck_assert(amqp_array_next(&it, &v) && amqp_bytes_eq(v.v.s, "orig.rk"));
    ck_assert(!xdeath_entry(bp.headers, 1, &e));

    /* move it back into work (so it carries x-death) and reject again: count 2, one entry */
    ck_assert_int_eq(qm_move_first(dlq, 1, q, NULL, NULL), SL_OK);
    qm_position_reject(qm_queue_get(q, 0, NULL));
    p = qm_queue_peek(dlq, 0);
    ck_assert_int_eq(amqp_props_decode(qm_msg_props(p->msg), p->msg->props_len, &bp), 0);
    ck_assert(xdeath_entry(bp.headers, 0, &e));
    ck_assert_int_eq(tbl_int(e, "count"), 2);
    ck_assert(!xdeath_entry(bp.headers, 1, &e));

    /* expired from work with TTL: a new entry, newest first */
    qm_move_first(dlq, 1, q, NULL, NULL);
    /* force it: an expiration the message did not have, and the head taken and put back so
     * the queue's deadline says so */
    qm_position *forced = qm_queue_get(q, 0, NULL);
    qm_pos_set_expires(forced, 1);
    qm_position_requeue(forced);
    qm_node_tick(N, 1000);
    p = qm_queue_peek(dlq, 0);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(amqp_props_decode(qm_msg_props(p->msg), p->msg->props_len, &bp), 0);
    ck_assert(xdeath_entry(bp.headers, 0, &e));
    ck_assert(tbl_str_is(e, "reason", "expired"));
    ck_assert(xdeath_entry(bp.headers, 1, &e));
    ck_assert(tbl_str_is(e, "reason", "rejected"));
    ck_assert(tbl_str_is(bp.headers, "x-first-death-reason", "rejected"));
}
END_TEST

START_TEST(deadletter_maxlen_rk_and_cycle)
{
    /* q (max-length 1) dead-letters to the default exchange with rk "dl" */
    sl_buf b;
    sl_buf_init(&b);
    size_t mk = amqp_tbl_begin(&b);
    amqp_tbl_put_long(&b, "x-max-length", 1);
    amqp_tbl_put_str(&b, "x-dead-letter-exchange", AMQP_BYTES(""));
    amqp_tbl_put_str(&b, "x-dead-letter-routing-key", AMQP_BYTES("dl"));
    amqp_tbl_end(&b, mk);
    qm_queue *q = declare_args("q", tbl(&b));
    sl_buf_free(&b);
    qm_queue *dl = declare("dl");
    put(q, "1");
    put(q, "2");
    ck_assert_uint_eq(dl->n_ready, 1);
    qm_position *p = qm_queue_peek(dl, 0);
    ck_assert(body_is(p, "1"));
    ck_assert(amqp_bytes_eq(qm_msg_routing_key(p->msg), "dl"));
    amqp_basic_props bp;
    amqp_bytes e;
    amqp_props_decode(qm_msg_props(p->msg), p->msg->props_len, &bp);
    ck_assert(xdeath_entry(bp.headers, 0, &e));
    ck_assert(tbl_str_is(e, "reason", "maxlen"));

    /* a queue whose expired messages go back to itself: dropped, not looping */
    sl_buf_init(&b);
    mk = amqp_tbl_begin(&b);
    amqp_tbl_put_long(&b, "x-message-ttl", 10);
    amqp_tbl_put_str(&b, "x-dead-letter-exchange", AMQP_BYTES(""));
    amqp_tbl_end(&b, mk);
    qm_queue *self = declare_args("self", tbl(&b));
    sl_buf_free(&b);
    qm_message *m = msg_full("self", "s", -1, NULL, (amqp_bytes){0});
    qm_queue_enqueue(self, m);
    qm_message_unref(m);
    qm_node_tick(N, 5000);
    ck_assert_uint_eq(qm_queue_message_count(self), 0);
    /* a missing DLX just drops */
    sl_buf_init(&b);
    mk = amqp_tbl_begin(&b);
    amqp_tbl_put_str(&b, "x-dead-letter-exchange", AMQP_BYTES("missing"));
    amqp_tbl_end(&b, mk);
    qm_queue *lost = declare_args("lost", tbl(&b));
    sl_buf_free(&b);
    put(lost, "x");
    qm_position_reject(qm_queue_get(lost, 0, NULL));
    ck_assert_uint_eq(qm_queue_message_count(lost), 0);
}
END_TEST

/* ------------------------------------------------------------------ suite */

/* ------------------------------------------------------------------ quorum queues */

/* A quorum queue's arguments table: x-queue-type quorum, and an integer (or, with sval, a
 * string) argument when key is not NULL. */
static amqp_bytes quorum_args(sl_buf *b, const char *key, int64_t ival, const char *sval)
{
    sl_buf_init(b);
    size_t mk = amqp_tbl_begin(b);
    amqp_tbl_put_str(b, "x-queue-type", AMQP_BYTES("quorum"));
    if (key && sval)
        amqp_tbl_put_str(b, key, amqp_cstr(sval));
    else if (key)
        amqp_tbl_put_long(b, key, ival);
    amqp_tbl_end(b, mk);
    return tbl(b);
}

static sl_err qdeclare(const char *name, int durable, int excl, int ad, amqp_bytes args)
{
    qm_queue_decl d = {name,
                       strlen(name),
                       (uint8_t)durable,
                       (uint8_t)excl,
                       (uint8_t)ad,
                       excl ? (void *)1 : NULL,
                       args,
                       0};
    qm_queue *q;
    int created;
    return qm_queue_declare(V, &d, &q, &created, err, sizeof err);
}

START_TEST(quorum_declare_checks)
{
    sl_buf b;
    /* properties, in RabbitMQ's order: auto-delete, exclusive, durable */
    ck_assert_int_eq(qdeclare("q", 0, 1, 1, quorum_args(&b, NULL, 0, NULL)), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "invalid property 'auto-delete' for queue 'q' in vhost '/'");
    ck_assert_int_eq(qdeclare("q", 0, 1, 0, tbl(&b)), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "invalid property 'exclusive-owner' for queue 'q' in vhost '/'");
    ck_assert_int_eq(qdeclare("q", 0, 0, 0, tbl(&b)), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "invalid property 'non-durable' for queue 'q' in vhost '/'");
    ck_assert_ptr_null(qm_queue_find(V, "q", 1));
    sl_buf_free(&b);
    /* the type's refused arguments first, then the values, then the properties */
    ck_assert_int_eq(qdeclare("q", 0, 0, 0, quorum_args(&b, "x-max-priority", 300, NULL)),
                     SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type "
                          "rabbit_quorum_queue");
    sl_buf_free(&b);
    ck_assert_int_eq(
        qdeclare("q", 1, 0, 1, quorum_args(&b, "x-quorum-initial-group-size", 0, NULL)),
        SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "invalid arg 'x-quorum-initial-group-size' for queue 'q' in vhost '/': "
                          "{value_zero,0}");
    sl_buf_free(&b);
    ck_assert_int_eq(qdeclare("q", 1, 0, 0, quorum_args(&b, "x-dead-letter-strategy", 0, "x")),
                     SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "invalid arg 'x-dead-letter-strategy' for queue 'q' in vhost '/': "
                          "invalid_dlx_strategy");
    sl_buf_free(&b);
    ck_assert_int_eq(qdeclare("", 1, 0, 0, quorum_args(&b, NULL, 0, NULL)), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "Cannot declare a server-named queue for type rabbit_quorum_queue");
    /* a classic queue refuses the quorum arguments */
    ck_assert_int_eq(qdeclare("c", 1, 0, 0, arg_int("x-delivery-limit", 2)), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "invalid arg 'x-delivery-limit' for queue 'c' in vhost '/' of queue type "
                          "rabbit_classic_queue");
    /* accepted; x-delivery-limit of any type (RabbitMQ 3.10 checks none) */
    ck_assert_int_eq(qdeclare("q", 1, 0, 0, tbl(&b)), SL_OK);
    sl_buf_free(&b);
    ck_assert_int_eq(qdeclare("q2", 1, 0, 0, quorum_args(&b, "x-delivery-limit", 0, "abc")), SL_OK);
    ck_assert(qm_queue_find(V, "q2", 2)->args.quorum);
    ck_assert(!qm_queue_find(V, "q2", 2)->args.has_delivery_limit);
    sl_buf_free(&b);
    ck_assert_int_eq(qdeclare("q3", 1, 0, 0, quorum_args(&b, "x-delivery-limit", -1, NULL)), SL_OK);
    ck_assert_int_eq(qm_queue_find(V, "q3", 2)->args.delivery_limit, -1);
    sl_buf_free(&b);
    /* equivalence: absent is classic */
    ck_assert_int_eq(qdeclare("c", 1, 0, 0, (amqp_bytes){0}), SL_OK);
    ck_assert_int_eq(qdeclare("c", 1, 0, 0, arg_str("x-queue-type", "classic")), SL_OK);
    ck_assert_int_eq(qdeclare("c", 1, 0, 0, quorum_args(&b, NULL, 0, NULL)), SL_ERR_PRECONDITION);
    ck_assert_str_eq(err,
                     "inequivalent arg 'x-queue-type' for queue 'c' in vhost '/': received the "
                     "value 'quorum' of type 'longstr' but current is none");
    ck_assert_int_eq(qdeclare("q", 1, 0, 0, arg_str("x-queue-type", "classic")),
                     SL_ERR_PRECONDITION);
    ck_assert_str_eq(err, "inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': received "
                          "'classic' but current is 'quorum'");
    sl_buf_free(&b);
    /* a recovered queue is not checked again (older versions took what is refused now) */
    qm_queue_decl d = {"old", 3, 1, 0, 0, NULL, arg_int("x-quorum-initial-group-size", 0), 77};
    qm_queue *q;
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, NULL, err, sizeof err), SL_OK);
}
END_TEST

/* The delivery count the door would write for the position handed out last. */
static int64_t header_count(const qm_position *p, int always)
{
    sl_buf pb;
    sl_buf_init(&pb);
    int own = qm_delivery_props(p->msg, qm_last_delivery_count(), always, &pb);
    int64_t c = -1;
    if (own) {
        amqp_basic_props bp;
        ck_assert_int_eq(amqp_props_decode(sl_buf_head(&pb), sl_buf_unread(&pb), &bp), 0);
        ck_assert(tbl_str_is(bp.headers, "app", "v")); /* the publisher's headers stay */
        c = tbl_int(bp.headers, "x-delivery-count");
    }
    sl_buf_free(&pb);
    return c;
}

START_TEST(quorum_delivery_count_and_limit)
{
    xdecl("dlx", QM_EX_FANOUT, 0, (amqp_bytes){0});
    qm_queue *dlq = declare("dlq");
    qm_bind_queue(qm_exchange_find(V, "dlx", 3), dlq, AMQP_BYTES(""), (amqp_bytes){0}, err,
                  sizeof err);
    sl_buf b;
    sl_buf_init(&b);
    size_t mk = amqp_tbl_begin(&b);
    amqp_tbl_put_str(&b, "x-queue-type", AMQP_BYTES("quorum"));
    amqp_tbl_put_long(&b, "x-delivery-limit", 2);
    amqp_tbl_put_str(&b, "x-dead-letter-exchange", AMQP_BYTES("dlx"));
    amqp_tbl_end(&b, mk);
    qm_queue_decl d = {"qq", 2, 1, 0, 0, NULL, tbl(&b), 0};
    qm_queue *q;
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, NULL, err, sizeof err), SL_OK);
    sl_buf_free(&b);

    sl_buf h;
    sl_buf_init(&h);
    mk = amqp_tbl_begin(&h);
    amqp_tbl_put_str(&h, "app", AMQP_BYTES("v"));
    amqp_tbl_put_long(&h, "x-delivery-count", 99); /* a publisher's is replaced */
    amqp_tbl_end(&h, mk);
    qm_message *m = msg_full("rk", "body", -1, NULL, tbl(&h));
    sl_buf_free(&h);
    qm_queue_enqueue(q, m);
    qm_message_unref(m);

    for (int i = 0; i <= 2; i++) {
        qm_position *p = qm_queue_get(q, 0, NULL);
        ck_assert_int_eq(qm_last_delivery_count(), i);
        ck_assert_int_eq(p->redelivered, i > 0);
        ck_assert_int_eq(header_count(p, 1), i);          /* basic.get: always */
        ck_assert_int_eq(header_count(p, 0), i ? i : -1); /* basic.deliver: from 1 */
        ck_assert_uint_eq(qm_dcount_get(q, p->lookup_id), (uint32_t)i);
        qm_position_requeue(p);
    }
    /* the third return: 3 > 2, dead-lettered */
    ck_assert_uint_eq(q->n_ready + q->n_locked, 0);
    ck_assert_uint_eq(dlq->n_ready, 1);
    ck_assert_ptr_null(q->dcounts);
    amqp_basic_props bp;
    qm_position *dp = qm_queue_peek(dlq, 0);
    ck_assert_int_eq(amqp_props_decode(qm_msg_props(dp->msg), dp->msg->props_len, &bp), 0);
    ck_assert(tbl_str_is(bp.headers, "x-first-death-reason", "delivery_limit"));
    amqp_bytes e;
    ck_assert(xdeath_entry(bp.headers, 0, &e));
    ck_assert(tbl_str_is(e, "reason", "delivery_limit"));
    ck_assert(tbl_str_is(e, "queue", "qq"));

    /* a classic queue: no count, nothing re-encoded */
    qm_queue *c = declare("classic");
    put(c, "x");
    qm_position *p = qm_queue_get(c, 0, NULL);
    ck_assert_int_eq(qm_last_delivery_count(), -1);
    sl_buf pb;
    sl_buf_init(&pb);
    ck_assert_int_eq(qm_delivery_props(p->msg, qm_last_delivery_count(), 1, &pb), 0);
    sl_buf_free(&pb);
    qm_position_requeue(p);
    ck_assert_ptr_null(c->dcounts);
}
END_TEST

START_TEST(quorum_counts_leave_with_their_messages)
{
    sl_buf b;
    qm_queue_decl d = {"qq", 2, 1, 0, 0, NULL, quorum_args(&b, NULL, 0, NULL), 0};
    qm_queue *q;
    ck_assert_int_eq(qm_queue_declare(V, &d, &q, NULL, err, sizeof err), SL_OK);
    sl_buf_free(&b);
    qm_queue *other = declare("other");
    for (int i = 0; i < 4; i++)
        put(q, "m");
    qm_position *held[4];
    for (int i = 0; i < 4; i++)
        held[i] = qm_queue_get(q, 0, NULL);
    uint64_t ids[4];
    for (int i = 0; i < 4; i++) {
        ids[i] = held[i]->lookup_id;
        qm_position_requeue(held[i]);
    }
    ck_assert_uint_eq(sl_u64tab_count(q->dcounts), 4);
    /* acked: gone */
    qm_position *p = qm_queue_get(q, 0, NULL);
    ck_assert_uint_eq(p->lookup_id, ids[0]);
    qm_position_ack(p);
    ck_assert_uint_eq(sl_u64tab_count(q->dcounts), 3);
    /* no-ack hand-out: settled as it goes, its count read first */
    p = qm_queue_get(q, 1, NULL);
    ck_assert_int_eq(qm_last_delivery_count(), 1);
    qm_position_ack(p);
    ck_assert_uint_eq(sl_u64tab_count(q->dcounts), 2);
    /* moved: the count stays behind */
    ck_assert_int_eq(qm_move(q, ids[2], other, NULL), SL_OK);
    ck_assert_uint_eq(sl_u64tab_count(q->dcounts), 1);
    ck_assert_uint_eq(qm_dcount_get(q, ids[3]), 1);
    ck_assert_uint_eq(qm_dcount_get(other, ids[2]), 0);
    /* moved back after a delivery elsewhere: one return */
    qm_position_requeue(qm_queue_get(other, 0, NULL));
    ck_assert_int_eq(qm_move(other, ids[2], q, NULL), SL_OK);
    ck_assert_uint_eq(qm_dcount_get(q, ids[2]), 1);
    ck_assert_uint_eq(sl_u64tab_count(q->dcounts), 2);
    /* purged: all of them */
    qm_queue_purge(q);
    ck_assert_ptr_null(q->dcounts);
}
END_TEST

static Suite *qm_suite(void)
{
    Suite *s = suite_create("qm");
    TCase *tc = tcase_create("map");
    tcase_add_test(tc, map_basic_and_grow);
    tcase_add_test(tc, map_iterate_delete);
    tcase_add_test(tc, u64tab_random_against_model);
    suite_add_tcase(s, tc);

    tc = tcase_create("queue");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, positions_deliver_ack_requeue_reject);
    tcase_add_test(tc, requeue_order_and_lookup_ids);
    tcase_add_test(tc, count_ready_upto_and_take_by_id);
    tcase_add_test(tc, message_slot_lifetimes);
    tcase_add_test(tc, purge_with_locked);
    tcase_add_test(tc, purge_big_queue);
    tcase_add_test(tc, delete_if_empty_locked_only);
    tcase_add_test(tc, delete_if_unused_and_cancel);
    tcase_add_test(tc, delete_removes_bindings_and_unschedules);
    tcase_add_test(tc, declare_args_and_equivalence);
    tcase_add_test(tc, declare_server_named_exclusive_subqueue_names);
    tcase_add_test(tc, consumer_priority_and_round_robin);
    tcase_add_test(tc, consumer_exclusive_refusal);
    tcase_add_test(tc, single_active_consumer);
    tcase_add_test(tc, auto_delete_after_last_consumer);
    tcase_add_test(tc, no_ack_consumer_and_get);
    tcase_add_test(tc, priority_ordering);
    tcase_add_test(tc, store_walk_resumes_in_the_held_list);
    tcase_add_test(tc, ttl_expiry_at_head);
    tcase_add_test(tc, deadline_heap_many_queues);
    tcase_add_test(tc, deadline_of_a_new_head);
    tcase_add_test(tc, mass_expiry_is_bounded_per_turn);
    tcase_add_test(tc, queue_expires_when_unused);
    tcase_add_test(tc, max_length_drop_head_and_reject);
    suite_add_tcase(s, tc);

    tc = tcase_create("tx_move");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, tx_enqueue_commit_abort);
    tcase_add_test(tc, tx_dequeue_commit_abort);
    tcase_add_test(tc, tx_move_commit_abort);
    tcase_add_test(tc, move_into_subqueue_and_system);
    tcase_add_test(tc, journal_keeps_acked);
    suite_add_tcase(s, tc);

    tc = tcase_create("routing");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, topic_matching);
    tcase_add_test(tc, headers_matching);
    tcase_add_test(tc, routing_direct_fanout_default_e2e_loop);
    tcase_add_test(tc, bindings_indexed_many);
    tcase_add_test(tc, topic_trie_agrees_with_matcher);
    tcase_add_test(tc, headers_index_agrees_with_scan);
    tcase_add_test(tc, alternate_and_auto_delete_exchange);
    tcase_add_test(tc, deadletter_x_death);
    tcase_add_test(tc, quorum_declare_checks);
    tcase_add_test(tc, quorum_delivery_count_and_limit);
    tcase_add_test(tc, quorum_counts_leave_with_their_messages);
    tcase_add_test(tc, deadletter_maxlen_rk_and_cycle);
    tcase_add_test(tc, stream_queue_keeps_messages_for_consumers_at_their_offsets);
    tcase_add_test(tc, stream_queue_needs_a_stream_dir);
    tcase_add_test(tc, stream_single_active_consumer_groups);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(qm_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    sl_buf_free(&argbuf);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
