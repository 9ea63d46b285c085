/* test_persist.c - unit tests for the durable store above the log (src/persist/): what the qm
 * hooks write and what recovery rebuilds from it.
 *
 * Each test runs in its own forked process with a fresh temp data directory. A "restart" is
 * persist_close + qm_node_free, then a fresh node, vhost "/" and persist_open on the same
 * directory, so everything a test sees after it came from the disk. Crash shapes that the
 * API cannot produce (a transaction cut before its end record, a torn tail, a damaged
 * record) are made by cutting or flipping bytes at offsets found by replaying the log
 * read-only, as a crash or a bad disk would leave them.
 *
 * The golden test opens a committed data directory (tests/unit/files/persist/golden/, made
 * by `build/tests/test_persist --write-golden DIR` from golden_recipe below) and checks
 * exactly what it holds, then re-runs the recipe and compares the bytes, so any change to a
 * record layout shows up here first. golden-v1/ is the same recipe as the writer of before
 * R_DELIVER_RUN wrote it (each delivery its own record): it must still open to the same state.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amqp/method.h"
#include "amqp/table.h"
#include "core/clock.h"
#include "core/log.h"
#include "persist/persist.h"
#include "persist/persist_internal.h"
#include "persist/records.h"
#include "qm/qm.h"
#include "store/log.h"

/* ------------------------------------------------------------------ helpers */

static char D[256];
static char err[1024];
static qm_node *N;
static qm_vhost *V;
static persist *P;
static persist_options OPT = {.no_sync = 1};

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    return remove(p);
}

static void rm_rf(const char *dir)
{
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void)
{
    strcpy(D, "/tmp/sluice-test-persist-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(D));
    sl_log_min_level = SL_LOG_ERROR + 1; /* recovery warnings are expected here */
    OPT = (persist_options){.no_sync = 1};
}

static void teardown(void)
{
    rm_rf(D);
}

/* Open the store in dir on a fresh node; NULL (message in err) when recovery refuses. */
static persist *try_open_in(const char *dir)
{
    N = qm_node_new("test");
    V = qm_vhost_create(N, "/");
    P = persist_open(dir, N, &OPT, err, sizeof err);
    if (!P) {
        qm_node_free(N);
        N = NULL;
        V = NULL;
    }
    return P;
}

static void open_store(void)
{
    ck_assert_msg(try_open_in(D) != NULL, "persist_open: %s", err);
}

static void commit(void)
{
    ck_assert_msg(persist_commit(P, err, sizeof err) == 0, "commit: %s", err);
}

static void close_store(void)
{
    persist_close(P);
    qm_node_free(N);
    P = NULL;
    N = NULL;
    V = NULL;
}

static void restart(void)
{
    commit();
    close_store();
    open_store();
}

static qm_message *msg_props(const char *body, int persistent, const char *message_id,
                             amqp_bytes headers)
{
    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    if (persistent) {
        p.flags |= AMQP_P_DELIVERY_MODE;
        p.delivery_mode = 2;
    }
    if (message_id) {
        p.flags |= AMQP_P_MESSAGE_ID;
        p.message_id = amqp_cstr(message_id);
    }
    if (headers.len) {
        p.flags |= AMQP_P_HEADERS;
        p.headers = headers;
    }
    sl_buf b;
    sl_buf_init(&b);
    amqp_props_encode(&b, &p);
    size_t blen = strlen(body);
    qm_message *m = qm_message_new(AMQP_BYTES("ex"), amqp_cstr("rk"), sl_buf_head(&b),
                                   (uint32_t)sl_buf_unread(&b), blen);
    memcpy(qm_msg_body(m), body, blen);
    sl_buf_free(&b);
    return m;
}

static qm_message *pmsg(const char *body)
{
    return msg_props(body, 1, NULL, (amqp_bytes){0});
}

static void put_msg(qm_queue *q, qm_message *m)
{
    ck_assert_int_eq(qm_queue_enqueue(q, m), SL_OK);
    qm_message_unref(m);
}

static void put(qm_queue *q, const char *body)
{
    put_msg(q, pmsg(body));
}

static qm_queue *declare_full(const char *name, int durable, int exclusive, int auto_delete,
                              amqp_bytes args)
{
    qm_queue_decl d = {name,
                       strlen(name),
                       (uint8_t)durable,
                       (uint8_t)exclusive,
                       (uint8_t)auto_delete,
                       exclusive ? (void *)&D : NULL,
                       args,
                       0};
    qm_queue *q = NULL;
    int created = 0;
    sl_err rc = qm_queue_declare(V, &d, &q, &created, err, sizeof err);
    ck_assert_msg(rc == SL_OK, "declare %s: %s", name, err);
    return q;
}

/* A queue-arguments table with one integer argument, built in *b (the caller frees it). */
static amqp_bytes int_arg(sl_buf *b, const char *key, int32_t value)
{
    sl_buf_init(b);
    size_t mark = amqp_tbl_begin(b);
    amqp_tbl_put_long(b, key, value);
    amqp_tbl_end(b, mark);
    return (amqp_bytes){sl_buf_head(b) + 4, sl_buf_unread(b) - 4};
}

static qm_queue *declare(const char *name)
{
    return declare_full(name, 1, 0, 0, (amqp_bytes){0});
}

static qm_queue *find(const char *name)
{
    return qm_queue_find(V, name, strlen(name));
}

static qm_exchange *xdeclare(const char *name, int type, int durable)
{
    qm_exchange_decl d = {name, strlen(name), type, (uint8_t)durable, 0, 0, (amqp_bytes){0}};
    qm_exchange *x = NULL;
    ck_assert_msg(qm_exchange_declare(V, &d, &x, err, sizeof err) == SL_OK, "%s", err);
    return x;
}

static qm_exchange *xfind(const char *name)
{
    return qm_exchange_find(V, name, strlen(name));
}

static const char *numbered(int i)
{
    static char body[256];
    snprintf(body, sizeof body, "m%03d-%0180d", i, 0);
    return body;
}

static void put_numbered(qm_queue *q, int i)
{
    put(q, numbered(i));
}

static void delete_queue(qm_queue *q)
{
    ck_assert_int_eq(qm_queue_delete(q, 0, NULL, err, sizeof err), SL_OK);
}

/* The ready bodies of q in delivery order, joined with ',' ("" when empty). */
static const char *contents(qm_queue *q)
{
    static char out[8192];
    size_t n = 0;
    out[0] = 0;
    if (!q)
        return "<no queue>";
    for (size_t i = 0; i < q->n_ready; i++) {
        qm_position *pos = qm_queue_peek(q, i);
        ck_assert_ptr_nonnull(pos);
        n += (size_t)snprintf(out + n, sizeof out - n, "%s%.*s", i ? "," : "",
                              (int)pos->msg->body_len, (const char *)qm_msg_body(pos->msg));
        ck_assert_uint_lt(n, sizeof out);
    }
    return out;
}

/* Take the first ready message of q as a held (LOCKED) delivery. */
static qm_position *get(qm_queue *q)
{
    uint64_t remaining;
    qm_position *pos = qm_queue_get(q, 0, &remaining);
    ck_assert_ptr_nonnull(pos);
    ck_assert_int_eq(pos->state, QM_POS_LOCKED);
    return pos;
}

static int body_is(const qm_position *p, const char *s)
{
    return p && p->msg->body_len == strlen(s) && !memcmp(qm_msg_body(p->msg), s, strlen(s));
}

static void path_of(char *out, size_t cap, const char *sub, const char *file)
{
    snprintf(out, cap, "%s/%s/%s", D, sub, file);
}

/* One record as replayed from a log. */
typedef struct rec {
    uint64_t seq;
    uint8_t type;
    size_t len;
    st_loc loc;
    char file[32];
} rec;

typedef struct recs {
    rec v[4096];
    size_t n;
    st_log *log; /* for file names */
} recs;

static int collect(void *ctx, uint64_t seq, uint8_t type, const uint8_t *payload, size_t len,
                   st_loc loc)
{
    recs *r = ctx;
    ck_assert_uint_lt(r->n, sizeof r->v / sizeof r->v[0]);
    rec *e = &r->v[r->n++];
    e->seq = seq;
    e->type = type;
    e->len = len;
    e->loc = loc;
    return 0;
}

/* Replay D/sub read-only (the store must be closed) and list its records with file names. */
static void scan(const char *sub, recs *r)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", D, sub);
    st_log_options o = {.read_only = 1};
    r->n = 0;
    st_log *l = st_log_open(dir, &o, collect, r, err, sizeof err);
    ck_assert_msg(l != NULL, "scan %s: %s", dir, err);
    for (size_t i = 0; i < r->n; i++) {
        const char *name = st_log_segment_name(l, r->v[i].loc.segment);
        ck_assert_ptr_nonnull(name);
        snprintf(r->v[i].file, sizeof r->v[i].file, "%s", name);
    }
    st_log_close(l);
}

/* The last record of the given type, or NULL. */
static const rec *last_of(const recs *r, uint8_t type)
{
    for (size_t i = r->n; i-- > 0;)
        if (r->v[i].type == type)
            return &r->v[i];
    return NULL;
}

static void cut_at(const char *sub, const rec *e, uint64_t extra)
{
    char path[700];
    path_of(path, sizeof path, sub, e->file);
    ck_assert_int_eq(truncate(path, (off_t)(e->loc.offset + extra)), 0);
}

static uint64_t count_segments(const char *sub)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", D, sub);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    uint64_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strstr(de->d_name, ".seg") != NULL;
    closedir(d);
    return n;
}

static void flip_byte(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t c;
    ck_assert_int_eq(pread(fd, &c, 1, off), 1);
    c ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &c, 1, off), 1);
    close(fd);
}

/* ------------------------------------------------------------------ messages */

START_TEST(durable_messages_survive)
{
    open_store();
    qm_queue *q = declare("q");
    sl_buf hb;
    sl_buf_init(&hb);
    size_t mark = amqp_tbl_begin(&hb);
    amqp_tbl_put_str(&hb, "h", amqp_cstr("v"));
    amqp_tbl_end(&hb, mark);
    amqp_bytes headers = {sl_buf_head(&hb) + 4, sl_buf_unread(&hb) - 4};
    put_msg(q, msg_props("a", 1, "id-a", headers));
    put(q, "b");
    put(q, "c");
    put(q, "d");
    /* a move into a subqueue keeps the lookup id and counts the move */
    qm_queue *sq = qm_queue_subqueue(q, "poison", 6, 1);
    uint64_t ids[4];
    for (size_t i = 0; i < 4; i++)
        ids[i] = qm_queue_peek(q, i)->lookup_id;
    ck_assert_int_eq(qm_move(q, ids[2], sq, NULL), SL_OK);
    uint8_t props_a[256];
    uint32_t props_a_len = qm_queue_peek(q, 0)->msg->props_len;
    ck_assert_uint_le(props_a_len, sizeof props_a);
    memcpy(props_a, qm_msg_props(qm_queue_peek(q, 0)->msg), props_a_len);
    restart();

    q = find("q");
    ck_assert_ptr_nonnull(q);
    ck_assert(q->durable);
    ck_assert_str_eq(contents(q), "a,b,d");
    qm_position *a = qm_queue_peek(q, 0);
    ck_assert_uint_eq(a->lookup_id, ids[0]);
    ck_assert_uint_eq(qm_queue_peek(q, 1)->lookup_id, ids[1]);
    ck_assert_uint_eq(qm_queue_peek(q, 2)->lookup_id, ids[3]);
    ck_assert(!a->redelivered);
    ck_assert_uint_eq(a->move_count, 0);
    ck_assert(a->msg->persistent);
    ck_assert_uint_eq(a->msg->props_len, props_a_len);
    ck_assert_int_eq(memcmp(qm_msg_props(a->msg), props_a, props_a_len), 0);
    ck_assert_uint_eq(qm_msg_exchange(a->msg).len, 2);
    ck_assert_int_eq(memcmp(qm_msg_exchange(a->msg).p, "ex", 2), 0);
    ck_assert_uint_eq(qm_msg_routing_key(a->msg).len, 2);
    ck_assert_int_eq(memcmp(qm_msg_routing_key(a->msg).p, "rk", 2), 0);
    amqp_basic_props pr;
    ck_assert_int_eq(amqp_props_decode(qm_msg_props(a->msg), a->msg->props_len, &pr), 0);
    ck_assert_uint_eq(pr.message_id.len, 4);
    ck_assert_int_eq(memcmp(pr.message_id.p, "id-a", 4), 0);
    ck_assert_uint_eq(pr.headers.len, headers.len);
    ck_assert_int_eq(memcmp(pr.headers.p, headers.p, headers.len), 0);

    sq = qm_queue_find(V, "q;poison", 8);
    ck_assert_ptr_nonnull(sq);
    ck_assert_str_eq(contents(sq), "c");
    ck_assert_uint_eq(qm_queue_peek(sq, 0)->lookup_id, ids[2]);
    ck_assert_uint_eq(qm_queue_peek(sq, 0)->move_count, 1);

    /* new messages go after the recovered ones, with larger lookup ids */
    put(q, "e");
    ck_assert_uint_gt(qm_queue_peek(q, 3)->lookup_id, ids[3]);
    restart();
    ck_assert_str_eq(contents(find("q")), "a,b,d,e");
    ck_assert_str_eq(contents(qm_queue_find(V, "q;poison", 8)), "c");
    persist_stats st;
    persist_get_stats(P, &st);
    ck_assert_uint_eq(st.recovered_messages, 5);
    close_store();
    sl_buf_free(&hb);
}
END_TEST

START_TEST(transient_things_are_not_stored)
{
    open_store();
    qm_queue *q = declare("q");
    put_msg(q, msg_props("transient", 0, NULL, (amqp_bytes){0}));
    put(q, "persistent");
    put(declare_full("nd", 0, 0, 0, (amqp_bytes){0}), "in-non-durable");
    put(declare_full("ex", 1, 1, 0, (amqp_bytes){0}), "in-exclusive");
    put(declare_full("ad", 1, 0, 1, (amqp_bytes){0}), "in-auto-delete");
    restart();
    ck_assert_str_eq(contents(find("q")), "persistent");
    ck_assert_ptr_null(find("nd"));
    ck_assert_ptr_null(find("ex"));
    /* durable auto-delete queues are durable: they survive until their last consumer goes */
    ck_assert_ptr_nonnull(find("ad"));
    ck_assert(find("ad")->auto_delete);
    ck_assert_str_eq(contents(find("ad")), "in-auto-delete");
    close_store();
}
END_TEST

START_TEST(delivered_unacked_comes_back_redelivered)
{
    open_store();
    qm_queue *q = declare("q");
    put(q, "a");
    put(q, "b");
    put(q, "c");
    qm_position *a = get(q);
    qm_position *b = get(q);
    ck_assert(body_is(a, "a") && body_is(b, "b"));
    qm_position_requeue(b); /* requeued in place: still marked delivered */
    commit();
    close_store(); /* a still held: like a crash with the consumer attached */
    open_store();
    q = find("q");
    ck_assert_str_eq(contents(q), "a,b,c");
    ck_assert(qm_queue_peek(q, 0)->redelivered);
    ck_assert(qm_queue_peek(q, 1)->redelivered);
    ck_assert(!qm_queue_peek(q, 2)->redelivered);
    close_store();
}
END_TEST

/* A quorum queue's delivery counts, as "body:count" in queue order, read without changing
 * anything (paged entries included). */
static const char *dcounts(qm_queue *q)
{
    static char out[1024];
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < q->n_ready; i++) {
        qm_position view;
        const qm_position *p = qm_queue_peek_view(q, i, &view);
        ck_assert_ptr_nonnull(p);
        uint32_t c = qm_dcount_get(q, p->lookup_id);
        ck_assert_int_eq(p->redelivered, c > 0); /* a quorum queue's rule */
        n += (size_t)snprintf(out + n, sizeof out - n, "%s%.*s:%u", i ? "," : "",
                              (int)p->msg->body_len, (const char *)qm_msg_body(p->msg), c);
        if (p == &view)
            qm_message_unref(view.msg);
    }
    return out;
}

static qm_queue *declare_quorum(const char *name)
{
    sl_buf b;
    sl_buf_init(&b);
    size_t mark = amqp_tbl_begin(&b);
    amqp_tbl_put_str(&b, "x-queue-type", amqp_cstr("quorum"));
    amqp_tbl_end(&b, mark);
    qm_queue *q =
        declare_full(name, 1, 0, 0, (amqp_bytes){sl_buf_head(&b) + 4, sl_buf_unread(&b) - 4});
    sl_buf_free(&b);
    return q;
}

/* The delivery count survives a stop (a held delivery counts as returned by it), a second
 * stop with nothing delivered since, TIDY's copies of in-memory and paged positions, and
 * a purge clears it. */
START_TEST(quorum_delivery_counts_survive)
{
    OPT.segment_size = 4096;
    open_store();
    qm_queue *q = declare_quorum("qq");
    const char *bodies[] = {"a", "b", "c", "d"};
    uint64_t id[4];
    for (int i = 0; i < 4; i++) {
        put(q, bodies[i]);
        id[i] = qm_queue_peek(q, (size_t)i)->lookup_id;
    }
    /* a: returned twice; b: held; c: returned once, then held; d: never delivered */
    for (int i = 0; i < 2; i++)
        qm_position_requeue(qm_queue_take(q, id[0]));
    qm_queue_take(q, id[1]);
    qm_position_requeue(qm_queue_take(q, id[2]));
    qm_queue_take(q, id[2]);
    /* e: delivered in a classic queue, then moved in: one return */
    qm_queue *cq = declare("cq");
    put(cq, "e");
    qm_position_requeue(get(cq));
    ck_assert_int_eq(qm_move(cq, qm_queue_peek(cq, 0)->lookup_id, q, NULL), SL_OK);
    ck_assert_str_eq(dcounts(q), "a:2,d:0,e:1");
    commit();
    close_store(); /* b and c still held: like a kill with the consumer attached */
    open_store();
    q = find("qq");
    ck_assert_str_eq(dcounts(q), "a:2,b:1,c:2,d:0,e:1");
    restart(); /* nothing delivered since: the counts stand */
    q = find("qq");
    ck_assert_str_eq(dcounts(q), "a:2,b:1,c:2,d:0,e:1");
    qm_position_requeue(qm_queue_take(q, id[3])); /* d: 1 */
    qm_queue_take(q, id[0]);                      /* a: held at 2 */
    /* TIDY copies qq's records forward past segments of churn */
    qm_queue *f = declare("filler");
    for (int i = 0; i < 200; i++)
        put(f,
            "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff");
    qm_queue_purge(f);
    commit();
    uint64_t nseg, nbytes;
    persist_tidy(P, &nseg, &nbytes);
    ck_assert_uint_gt(nseg, 0);
    commit();
    close_store();
    /* read back paged: TIDY's copies of paged entries carry their count too */
    qm_set_memory_budget(8);
    open_store();
    q = find("qq");
    ck_assert_uint_gt(q->paged_len, 0);
    ck_assert_str_eq(dcounts(q), "a:3,b:1,c:2,d:1,e:1");
    f = find("filler");
    for (int i = 0; i < 200; i++)
        put(f,
            "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff");
    qm_queue_purge(f);
    commit();
    persist_tidy(P, &nseg, &nbytes);
    ck_assert_uint_gt(nseg, 0);
    restart();
    qm_set_memory_budget(0);
    restart();
    q = find("qq");
    ck_assert_str_eq(dcounts(q), "a:3,b:1,c:2,d:1,e:1");
    qm_queue_purge(q);
    ck_assert_ptr_null(q->dcounts);
    restart();
    ck_assert_uint_eq(find("qq")->n_ready, 0);
    close_store();
}
END_TEST

START_TEST(acked_does_not_come_back)
{
    open_store();
    qm_queue *q = declare("q");
    put(q, "a");
    put(q, "b");
    put(q, "c");
    put(q, "d");
    qm_position_ack(get(q)); /* a */
    uint64_t rem;
    qm_position *b = qm_queue_get(q, 1, &rem); /* no_ack get of b */
    ck_assert_ptr_nonnull(b);
    qm_position_ack(b);
    qm_position *c = get(q);
    qm_position_reject(c); /* no DLX: dropped */
    restart();
    ck_assert_str_eq(contents(find("q")), "d");
    close_store();
}
END_TEST

START_TEST(tx_acks_and_enqueues_apply_together)
{
    open_store();
    qm_queue *q = declare("q");
    put(q, "a");
    put(q, "b");
    qm_position *a = get(q);
    qm_tx *tx = qm_tx_begin(N);
    ck_assert_int_eq(qm_tx_dequeue(tx, a, QM_SETTLE_ACK), SL_OK);
    qm_message *m = pmsg("t");
    ck_assert_int_eq(qm_tx_enqueue(tx, q, m), SL_OK);
    qm_message_unref(m);
    ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
    restart();
    ck_assert_str_eq(contents(find("q")), "b,t");
    close_store();
}
END_TEST

/* ------------------------------------------------------------------ purge, delete */

START_TEST(purged_never_comes_back)
{
    open_store();
    qm_queue *q = declare("q");
    put(q, "a");
    put(q, "b");
    put(q, "c");
    qm_position *a = get(q);
    qm_position *b = get(q);
    ck_assert_uint_eq(qm_queue_purge(q), 1);
    ck_assert_int_eq(a->state, QM_POS_PURGE_PENDING);
    put(q, "d");
    /* a PurgePending message is deleted whatever its holder does */
    qm_position_requeue(a);
    commit();
    close_store(); /* b still held (PurgePending) */
    open_store();
    ck_assert_str_eq(contents(find("q")), "d");
    (void)b;
    restart();
    ck_assert_str_eq(contents(find("q")), "d");
    close_store();
}
END_TEST

START_TEST(delete_then_redeclare_starts_empty)
{
    open_store();
    qm_queue *q = declare("q");
    uint64_t inc1 = q->incarnation;
    put(q, "old1");
    qm_position *held = get(q);
    put(q, "old2");
    delete_queue(q);
    qm_position_ack(held); /* its queue is gone: just freed */
    q = declare("q");
    ck_assert_uint_ne(q->incarnation, inc1);
    put(q, "new");
    restart();
    q = find("q");
    ck_assert_str_eq(contents(q), "new");
    ck_assert_uint_ne(q->incarnation, inc1);
    close_store();
}
END_TEST

/* The same, with a restart between the delete and the redeclaration: the new queue must not
 * take over the incarnation (and so the stored messages) of the deleted one. */
START_TEST(delete_restart_redeclare_starts_empty)
{
    open_store();
    qm_queue *keep = declare("keep");
    qm_queue *q = declare("q");
    uint64_t inc1 = q->incarnation;
    ck_assert_uint_gt(inc1, keep->incarnation);
    put(q, "old1");
    put(q, "old2");
    put(q, "old3");
    delete_queue(q);
    restart();
    ck_assert_ptr_null(find("q"));
    q = declare("q");
    uint64_t inc2 = q->incarnation;
    put(q, "new");
    restart();
    const char *got = contents(find("q"));
    ck_assert_msg(!strcmp(got, "new"),
                  "after delete, restart, redeclare, restart: queue holds '%s', want 'new' "
                  "(deleted incarnation %llu, new one %llu)",
                  got, (unsigned long long)inc1, (unsigned long long)inc2);
    close_store();
}
END_TEST

/* Moves whose destination incarnation is gone by the time the node stops: q -> q;s -> q (q;s
 * emptied and removed), and a -> b followed by a's deletion. Recovery must follow the
 * position through the dead incarnation instead of dropping it there (issue 12 item 1). */
START_TEST(moved_through_a_dead_incarnation_survives)
{
    open_store();
    qm_queue *q = declare("q"), *a = declare("a"), *b = declare("b");
    put(q, "q1");
    put(q, "q2");
    put(a, "a1");
    uint64_t id = qm_queue_peek(q, 0)->lookup_id;
    qm_queue *sub = qm_queue_subqueue(q, "retry", 5, 1);
    ck_assert_int_eq(qm_move(q, id, sub, NULL), SL_OK);
    ck_assert_int_eq(qm_move(sub, id, q, NULL), SL_OK);
    qm_node_run_dispatch(N); /* removes the empty subqueue */
    ck_assert_ptr_null(find("q;retry"));
    ck_assert_int_eq(qm_move(a, qm_queue_peek(a, 0)->lookup_id, b, NULL), SL_OK);
    delete_queue(a);
    restart();
    q = find("q");
    ck_assert_str_eq(contents(q), "q1,q2");
    ck_assert_uint_eq(qm_queue_peek(q, 0)->lookup_id, id);
    ck_assert_uint_eq(qm_queue_peek(q, 0)->move_count, 2);
    ck_assert_str_eq(contents(find("b")), "a1");
    ck_assert_ptr_null(find("a"));
    ck_assert_ptr_null(find("q;retry"));
    close_store();
}
END_TEST

/* A message whose record the log cannot take (beyond ST_LOG_MAX_RECORD) is refused by the
 * store without a stale location: it stays in memory only, nothing aborts, and the records
 * around it are fine after a restart (issue 12 item 5; it used to abort with "st_log_ref of
 * segment ..., which is not live"). The body is allocated, never touched: no RSS. */
START_TEST(oversized_message_is_refused_without_a_stale_location)
{
    open_store();
    qm_queue *q = declare("q");
    put(q, "before");
    amqp_basic_props pr;
    memset(&pr, 0, sizeof pr);
    pr.flags = AMQP_P_DELIVERY_MODE;
    pr.delivery_mode = 2;
    sl_buf b;
    sl_buf_init(&b);
    amqp_props_encode(&b, &pr);
    qm_message *big = qm_message_new(AMQP_BYTES(""), AMQP_BYTES("q"), sl_buf_head(&b),
                                     (uint32_t)sl_buf_unread(&b), (uint64_t)ST_LOG_MAX_RECORD);
    sl_buf_free(&b);
    ck_assert(big->persistent);
    put_msg(q, big);
    qm_position *pos = qm_queue_peek(q, 1);
    ck_assert_ptr_nonnull(pos);
    ck_assert(!pos->st_logged);
    ck_assert(!pos->msg->st_written);
    put(q, "after");
    ck_assert_uint_eq(q->n_ready, 3);
    pos = get(q); /* "before": delivered, and its delivery mark written */
    qm_position_requeue(pos);
    restart();
    ck_assert_str_eq(contents(find("q")), "before,after");
    close_store();
}
END_TEST

/* ------------------------------------------------------------------ transactions cut short */

/* Commit a tx (ack of "a", enqueue of "t"), then cut the msgs log right before R_TX_END, as a
 * crash in the middle of the commit's write would. */
static void make_cut_tx(void)
{
    open_store();
    qm_queue *q = declare("q");
    put(q, "a");
    put(q, "b");
    restart();
    q = find("q");
    qm_position *a = get(q);
    qm_tx *tx = qm_tx_begin(N);
    ck_assert_int_eq(qm_tx_dequeue(tx, a, QM_SETTLE_ACK), SL_OK);
    qm_message *m = pmsg("t");
    ck_assert_int_eq(qm_tx_enqueue(tx, q, m), SL_OK);
    qm_message_unref(m);
    ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
    commit();
    close_store();

    recs *r = calloc(1, sizeof *r);
    scan("msgs", r);
    const rec *end = last_of(r, R_TX_END);
    ck_assert_ptr_nonnull(end);
    ck_assert_ptr_nonnull(last_of(r, R_DEQ | R_IN_TX)); /* the ack, marked as the tx's */
    ck_assert_ptr_nonnull(last_of(r, R_ENQ | R_IN_TX));
    ck_assert_uint_eq(r->v[r->n - 1].seq, end->seq); /* nothing after it */
    cut_at("msgs", end, 0);
    free(r);
}

START_TEST(tx_without_end_is_dropped)
{
    make_cut_tx();
    open_store();
    /* neither the ack nor the enqueue of the cut transaction applied */
    ck_assert_str_eq(contents(find("q")), "a,b");
    close_store();
}
END_TEST

/* What is written after a restart that dropped a cut transaction must not be taken for part
 * of that transaction at the next restart. */
START_TEST(records_after_dropped_tx_survive)
{
    make_cut_tx();
    open_store();
    qm_queue *q = find("q");
    ck_assert_str_eq(contents(q), "a,b");
    put(q, "after1");
    qm_position_ack(get(q)); /* a */
    restart();
    ck_assert_str_eq(contents(find("q")), "b,after1");
    /* and once more with a later, complete transaction in the log */
    q = find("q");
    put(q, "after2");
    qm_tx *tx = qm_tx_begin(N);
    qm_message *m = pmsg("t2");
    ck_assert_int_eq(qm_tx_enqueue(tx, q, m), SL_OK);
    qm_message_unref(m);
    ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
    restart();
    ck_assert_str_eq(contents(find("q")), "b,after1,after2,t2");
    close_store();
}
END_TEST

/* A transaction cut before its end whose first record sits alone at the end of an older
 * segment (a rollover inside the commit, then the crash before the new segment reached the
 * disk). Once TIDY deletes that segment, the rest of the transaction must not start to
 * apply. The log is written with the store API in the writer's format: a and b, then the
 * transaction's ack of a | rollover | its message t and the enqueue of t, and no R_TX_END. */
START_TEST(dropped_tx_stays_dropped_after_tidy)
{
    OPT.segment_size = 4096;
    open_store();
    uint64_t inc = declare("q")->incarnation;
    close_store();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/msgs", D);
    rm_rf(dir);
    st_log_options o = {.segment_size = 4096, .no_sync = 1};
    recs *r = calloc(1, sizeof *r);
    st_log *l = st_log_open(dir, &o, collect, r, err, sizeof err);
    ck_assert_msg(l != NULL, "%s", err);
    sl_buf b;
    sl_buf_init(&b);
    const char *bodies[] = {"a", "b", "t"};
    for (uint64_t i = 1; i <= 3; i++) {
        if (i == 3) {
            b.len = 0;
            rec_u64(&b, inc);
            rec_u64(&b, 1); /* a's lookup id */
            ck_assert_uint_ne(st_log_append(l, R_DEQ | R_IN_TX, b.data, b.len, NULL), 0);
            st_log_roll(l);
        }
        b.len = 0;
        rec_u64(&b, i); /* message id */
        rec_s16(&b, "", 0);
        rec_s16(&b, "q", 1);
        rec_b32(&b, "\x10\x00\x02", 3); /* props: delivery-mode 2 */
        sl_buf_append(&b, bodies[i - 1], 1);
        ck_assert_uint_ne(st_log_append(l, R_MSG, b.data, b.len, NULL), 0);
        b.len = 0;
        rec_u64(&b, inc);
        rec_u64(&b, i); /* lookup id */
        rec_u64(&b, i); /* message id */
        rec_u32(&b, 0);
        rec_u8(&b, 0);
        uint8_t type = i == 3 ? R_ENQ | R_IN_TX : R_ENQ;
        ck_assert_uint_ne(st_log_append(l, type, b.data, b.len, NULL), 0);
    }
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    sl_buf_free(&b);
    free(r);

    open_store();
    qm_queue *q = find("q");
    ck_assert_str_eq(contents(q), "a,b"); /* the transaction never ended */
    qm_position_ack(get(q));
    qm_position_ack(get(q));
    uint64_t nseg, nbytes;
    persist_tidy(P, &nseg, &nbytes);
    ck_assert_uint_eq(nseg, 1); /* the segment of a, b and the transaction's first record */
    restart();
    ck_assert_str_eq(contents(find("q")), "");
    close_store();
}
END_TEST

/* The same cut transaction, but its first segment stays (a and b are still there): the abort
 * record recovery wrote after it must stay too, or once its segment is gone the next
 * transaction's end would apply the cut one (a acked, t back). And a transaction whose end is
 * segments after its start, found again by a restart's replay: its end stays with its start. */
START_TEST(tidy_keeps_tx_ends_and_aborts_with_their_start)
{
    OPT.segment_size = 4096;
    OPT.no_compact = 1; /* the rule alone (compaction would copy a and b away) */
    open_store();
    uint64_t inc = declare("q")->incarnation;
    declare("other");
    close_store();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/msgs", D);
    rm_rf(dir);
    st_log_options o = {.segment_size = 4096, .no_sync = 1};
    recs *r = calloc(1, sizeof *r);
    st_log *l = st_log_open(dir, &o, collect, r, err, sizeof err);
    ck_assert_msg(l != NULL, "%s", err);
    sl_buf b;
    sl_buf_init(&b);
    const char *bodies[] = {"a", "b", "t"};
    for (uint64_t i = 1; i <= 3; i++) {
        if (i == 3) {
            b.len = 0;
            rec_u64(&b, inc);
            rec_u64(&b, 1); /* a's lookup id */
            ck_assert_uint_ne(st_log_append(l, R_DEQ | R_IN_TX, b.data, b.len, NULL), 0);
        }
        b.len = 0;
        rec_u64(&b, i);
        rec_s16(&b, "", 0);
        rec_s16(&b, "q", 1);
        rec_b32(&b, "\x10\x00\x02", 3);
        sl_buf_append(&b, bodies[i - 1], 1);
        ck_assert_uint_ne(st_log_append(l, R_MSG, b.data, b.len, NULL), 0);
        b.len = 0;
        rec_u64(&b, inc);
        rec_u64(&b, i);
        rec_u64(&b, i);
        rec_u32(&b, 0);
        rec_u8(&b, 0);
        ck_assert_uint_ne(st_log_append(l, i == 3 ? R_ENQ | R_IN_TX : R_ENQ, b.data, b.len, NULL),
                          0);
    }
    st_log_roll(l); /* then a message nobody enqueued: the cut group is still open after it */
    b.len = 0;
    rec_u64(&b, 4);
    rec_s16(&b, "", 0);
    rec_s16(&b, "q", 1);
    rec_b32(&b, "\x10\x00\x02", 3);
    sl_buf_append(&b, "u", 1);
    ck_assert_uint_ne(st_log_append(l, R_MSG, b.data, b.len, NULL), 0);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    sl_buf_free(&b);
    free(r);

    open_store(); /* writes the abort, in the second segment */
    ck_assert_str_eq(contents(find("q")), "a,b");
    qm_queue *other = find("other");
    for (int i = 0; i < 60; i++) /* the abort's segment is old and dead now */
        put_numbered(other, i), qm_position_ack(get(other));
    uint64_t nseg, nbytes;
    persist_tidy(P, &nseg, &nbytes);
    ck_assert_uint_gt(nseg, 0);
    /* a transaction: its first record after a rollover, its end in the next segment */
    qm_tx *tx = qm_tx_begin(N);
    for (int i = 0; i < 30; i++) {
        char body[300];
        snprintf(body, sizeof body, "%c%02d-%0200d", i ? 'o' : 'z', i, 0);
        qm_message *m = pmsg(body);
        ck_assert_int_eq(qm_tx_enqueue(tx, i ? other : find("q"), m), SL_OK);
        qm_message_unref(m);
    }
    ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
    st_log_roll(P->msgs);
    restart(); /* the dependencies are found again by the replay */
    other = find("other");
    while (other->n_ready)
        qm_position_ack(get(other));
    for (int i = 0; i < 60; i++)
        put_numbered(other, i), qm_position_ack(get(other));
    persist_tidy(P, &nseg, &nbytes);
    ck_assert_uint_gt(nseg, 0);
    restart();
    qm_queue *q = find("q");
    ck_assert_uint_eq(q->n_ready, 3);
    ck_assert(body_is(qm_queue_peek(q, 0), "a"));
    ck_assert(body_is(qm_queue_peek(q, 1), "b"));
    ck_assert(!memcmp(qm_msg_body(qm_queue_peek(q, 2)->msg), "z00", 3));
    close_store();
}
END_TEST

/* ------------------------------------------------------------------ damaged files */

static void write_three(void)
{
    open_store();
    qm_queue *q = declare("q");
    put(q, "one");
    commit();
    put(q, "two");
    commit();
    put(q, "three");
    commit();
    declare("q2");
    close_store();
}

START_TEST(corrupt_middle_record_refuses_to_start)
{
    write_three();
    recs *r = calloc(1, sizeof *r);
    scan("msgs", r);
    /* the R_MSG of "two": damage one payload byte */
    const rec *two = NULL;
    int seen = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].type == R_MSG && ++seen == 2)
            two = &r->v[i];
    ck_assert_ptr_nonnull(two);
    char path[700];
    path_of(path, sizeof path, "msgs", two->file);
    flip_byte(path, (off_t)(two->loc.offset + 17 + 2));
    ck_assert_ptr_null(try_open_in(D));
    char want[800];
    snprintf(want, sizeof want, "%s: offset %llu", two->file, (unsigned long long)two->loc.offset);
    ck_assert_msg(strstr(err, want) != NULL, "error '%s' does not name '%s'", err, want);
    ck_assert_msg(strstr(err, "/msgs/") != NULL, "error '%s' does not name the log", err);
    /* and the same in the meta log: its first record (more follow) */
    scan("meta", r);
    ck_assert_uint_ge(r->n, 2);
    path_of(path, sizeof path, "meta", r->v[0].file);
    flip_byte(path, (off_t)(r->v[0].loc.offset + 17));
    ck_assert_ptr_null(try_open_in(D));
    snprintf(want, sizeof want, "/meta/%s: offset %llu", r->v[0].file,
             (unsigned long long)r->v[0].loc.offset);
    ck_assert_msg(strstr(err, want) != NULL, "error '%s' does not name '%s'", err, want);
    free(r);
}
END_TEST

START_TEST(torn_tail_is_dropped)
{
    write_three();
    recs *r = calloc(1, sizeof *r);
    scan("msgs", r);
    const rec *last = last_of(r, R_ENQ); /* of "three": its message record stays whole */
    ck_assert_ptr_nonnull(last);
    ck_assert_uint_eq(last->seq, r->v[r->n - 1].seq);
    cut_at("msgs", last, 9); /* in the middle of the record header */
    open_store();
    ck_assert_str_eq(contents(find("q")), "one,two");
    /* the log goes on cleanly after the cut */
    put(find("q"), "four");
    restart();
    ck_assert_str_eq(contents(find("q")), "one,two,four");
    close_store();
    /* a torn tail of garbage bytes too */
    scan("msgs", r);
    char path[700];
    path_of(path, sizeof path, "msgs", r->v[r->n - 1].file);
    int fd = open(path, O_WRONLY | O_APPEND);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "\x40\x00\x00\x00garbage", 11), 11);
    close(fd);
    open_store();
    ck_assert_str_eq(contents(find("q")), "one,two,four");
    close_store();
    free(r);
}
END_TEST

/* ------------------------------------------------------------------ definitions */

START_TEST(exchanges_and_bindings_survive)
{
    open_store();
    qm_queue *q = declare("q");
    qm_queue *q2 = declare("q2");
    qm_queue *nd = declare_full("nd", 0, 0, 0, (amqp_bytes){0});
    qm_exchange *x = xdeclare("x", QM_EX_TOPIC, 1);
    qm_exchange *x2 = xdeclare("x2", QM_EX_FANOUT, 1);
    qm_exchange *tx = xdeclare("tx", QM_EX_DIRECT, 0);
    ck_assert_int_eq(qm_bind_queue(x, q, amqp_cstr("a.#"), (amqp_bytes){0}, err, sizeof err),
                     SL_OK);
    ck_assert_int_eq(qm_bind_exchange(x, x2, amqp_cstr("b.*"), (amqp_bytes){0}, err, sizeof err),
                     SL_OK);
    ck_assert_int_eq(qm_bind_queue(x2, q2, amqp_cstr(""), (amqp_bytes){0}, err, sizeof err), SL_OK);
    ck_assert_int_eq(qm_bind_queue(x, nd, amqp_cstr("#"), (amqp_bytes){0}, err, sizeof err), SL_OK);
    ck_assert_int_eq(qm_bind_queue(tx, q, amqp_cstr("k"), (amqp_bytes){0}, err, sizeof err), SL_OK);
    ck_assert_int_eq(qm_bind_queue(x, q2, amqp_cstr("gone"), (amqp_bytes){0}, err, sizeof err),
                     SL_OK);
    qm_unbind_queue(x, q2, amqp_cstr("gone"), (amqp_bytes){0});
    restart();

    x = xfind("x");
    x2 = xfind("x2");
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(x2);
    ck_assert_ptr_null(xfind("tx"));
    ck_assert_ptr_null(find("nd"));
    ck_assert_int_eq(x->type, QM_EX_TOPIC);
    ck_assert_int_eq(x2->type, QM_EX_FANOUT);
    ck_assert(x->durable && x2->durable);
    ck_assert_uint_eq(x->n_bindings, 2);
    ck_assert_uint_eq(x2->n_bindings, 1);
    qm_queue *out[8];
    size_t total;
    ck_assert_uint_eq(qm_route(x, amqp_cstr("a.b"), (amqp_bytes){0}, out, 8, &total), 1);
    ck_assert_ptr_eq(out[0], find("q"));
    ck_assert_uint_eq(qm_route(x, amqp_cstr("b.c"), (amqp_bytes){0}, out, 8, &total), 1);
    ck_assert_ptr_eq(out[0], find("q2"));
    ck_assert_uint_eq(qm_route(x, amqp_cstr("gone"), (amqp_bytes){0}, out, 8, &total), 0);

    /* delete and recreate the exchange (and a queue): their old bindings stay gone */
    ck_assert_int_eq(qm_exchange_delete(x, 0, err, sizeof err), SL_OK);
    x = xdeclare("x", QM_EX_TOPIC, 1);
    delete_queue(find("q2"));
    declare("q2");
    restart();
    x = xfind("x");
    x2 = xfind("x2");
    ck_assert_ptr_nonnull(x);
    ck_assert_uint_eq(x->n_bindings, 0);
    ck_assert_uint_eq(x2->n_bindings, 0);
    ck_assert_uint_eq(qm_route(x, amqp_cstr("a.b"), (amqp_bytes){0}, out, 8, &total), 0);
    close_store();
}
END_TEST

/* ------------------------------------------------------------------ TIDY */

START_TEST(tidy_frees_dead_segments_only)
{
    OPT.segment_size = 4096;
    open_store();
    qm_queue *q = declare("q");
    qm_queue *keep = declare("keep");
    for (int i = 0; i < 200; i++)
        put_numbered(i == 50 ? keep : q, i);
    commit();
    persist_stats st;
    persist_get_stats(P, &st);
    uint64_t segs_before = st.msgs_segments;
    ck_assert_uint_gt(segs_before, 8);
    /* nothing is dead yet: nothing to free */
    uint64_t nseg, nbytes;
    persist_tidy(P, &nseg, &nbytes);
    ck_assert_uint_eq(nseg, 0);
    /* consume everything in q: only m050 is live, in a segment otherwise dead: it is copied
     * forward and every old segment goes (before compaction, m050's segment and every one
     * after it stayed) */
    for (int i = 0; i < 199; i++)
        qm_position_ack(get(q));
    persist_tidy(P, &nseg, &nbytes);
    ck_assert_uint_gt(nseg, 0);
    ck_assert_uint_gt(nbytes, 0);
    char first[600];
    path_of(first, sizeof first, "msgs", "00000000000000000001.seg");
    ck_assert_int_ne(access(first, F_OK), 0);
    persist_get_stats(P, &st);
    ck_assert_uint_eq(st.msgs_segments, count_segments("msgs"));
    ck_assert_uint_le(st.msgs_segments, 2);
    restart();
    ck_assert_str_eq(contents(find("q")), "");
    ck_assert_uint_eq(find("keep")->n_ready, 1);
    ck_assert(body_is(qm_queue_peek(find("keep"), 0), numbered(50)));
    /* once m050 goes too, everything but the newest segment goes */
    qm_position_ack(get(find("keep")));
    put_numbered(find("q"), 999);
    persist_tidy(P, &nseg, &nbytes);
    persist_get_stats(P, &st);
    ck_assert_uint_le(st.msgs_segments, 2);
    restart();
    ck_assert_uint_eq(find("keep")->n_ready, 0);
    ck_assert_uint_eq(find("q")->n_ready, 1);
    close_store();
}
END_TEST

/* Messages shared by several queues, acked in a random order, tidied after every step: no
 * live message is ever lost and the store ends small. */
START_TEST(tidy_never_loses_live_messages)
{
    OPT.segment_size = 4096;
    open_store();
    declare("q0");
    declare("q1");
    qm_exchange *x = xdeclare("fan", QM_EX_FANOUT, 1);
    ck_assert_int_eq(qm_bind_queue(x, find("q0"), amqp_cstr(""), (amqp_bytes){0}, err, sizeof err),
                     SL_OK);
    ck_assert_int_eq(qm_bind_queue(x, find("q1"), amqp_cstr(""), (amqp_bytes){0}, err, sizeof err),
                     SL_OK);
    int live[2] = {0, 0}; /* messages put minus acked per queue */
    int next = 0;
    srand(7);
    for (int step = 0; step < 60; step++) {
        for (int k = rand() % 12; k > 0; k--) {
            qm_queue *out[2];
            size_t total;
            ck_assert_uint_eq(qm_route(x, amqp_cstr(""), (amqp_bytes){0}, out, 2, &total), 2);
            char body[200];
            snprintf(body, sizeof body, "%06d-%0150d", next++, 0);
            qm_message *m = pmsg(body);
            ck_assert_int_eq(qm_queue_enqueue(out[0], m), SL_OK);
            ck_assert_int_eq(qm_queue_enqueue(out[1], m), SL_OK);
            qm_message_unref(m);
            live[0]++;
            live[1]++;
        }
        for (int qi = 0; qi < 2; qi++) {
            qm_queue *q = find(qi ? "q1" : "q0");
            for (int k = rand() % 10; k > 0 && q->n_ready > 0; k--) {
                qm_position_ack(get(q));
                live[qi]--;
            }
        }
        uint64_t nseg, nbytes;
        persist_tidy(P, &nseg, &nbytes);
        if (step % 10 == 9) {
            /* what is left is exactly the newest messages of each queue, in order */
            char want[2][16];
            restart();
            x = xfind("fan");
            for (int qi = 0; qi < 2; qi++) {
                qm_queue *q = find(qi ? "q1" : "q0");
                ck_assert_uint_eq(q->n_ready, (uint64_t)live[qi]);
                for (int i = 0; i < live[qi]; i++) {
                    snprintf(want[qi], sizeof want[qi], "%06d", next - live[qi] + i);
                    ck_assert(!memcmp(qm_msg_body(qm_queue_peek(q, (size_t)i)->msg), want[qi], 6));
                }
            }
        }
    }
    while (find("q0")->n_ready)
        qm_position_ack(get(find("q0")));
    while (find("q1")->n_ready)
        qm_position_ack(get(find("q1")));
    uint64_t nseg, nbytes;
    persist_tidy(P, &nseg, &nbytes);
    persist_stats st;
    persist_get_stats(P, &st);
    ck_assert_uint_le(st.msgs_segments, 2);
    restart();
    ck_assert_uint_eq(find("q0")->n_ready + find("q1")->n_ready, 0);
    close_store();
}
END_TEST

/* Descriptors this process still holds to files that are unlinked: a deleted segment's blocks
 * are freed only when its last one is closed. */
static int deleted_files_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char link[300], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len <= 0)
            continue;
        target[len] = 0;
        if (strstr(target, ".seg (deleted)"))
            n++;
    }
    closedir(d);
    return n;
}

/* A reap deletes the segments nothing references, without a walk or copies: acked traffic
 * goes, the segment an unread message is in stays, and a TIDY asked for while a reap runs
 * is a whole TIDY after it, never the reap's result. */
START_TEST(reap_frees_unreferenced_segments_only)
{
    OPT.segment_size = 4096;
    open_store();
    qm_queue *q = declare("q");
    for (int i = 0; i < 300; i++)
        put_numbered(q, i);
    while (q->n_ready)
        qm_position_ack(get(q));
    commit();
    persist_stats st;
    persist_get_stats(P, &st);
    ck_assert_uint_gt(st.msgs_segments, 10);
    ck_assert_int_eq(persist_tidy_start_reap(P), 0);
    ck_assert_int_eq(persist_tidy_reaping(P), 1);
    ck_assert_int_eq(persist_tidy_start_reap(P), 1); /* one at a time */
    persist_tidy_result r;
    int rc, steps = 0;
    while ((rc = persist_tidy_step(P, 1000000, &r)) != PERSIST_TIDY_DONE && steps++ < 100)
        if (rc == PERSIST_TIDY_WAIT)
            commit();
    ck_assert_int_eq(rc, PERSIST_TIDY_DONE);
    ck_assert_int_eq(persist_tidy_running(P), 0);
    ck_assert_uint_gt(r.segments_freed, 10);
    ck_assert_uint_eq(r.segments_compacted, 0);
    ck_assert_uint_eq(r.records_copied, 0);
    commit();
    persist_get_stats(P, &st);
    ck_assert_uint_le(st.msgs_segments, 2);

    /* an unread message holds its own segment only: traffic after it goes by the reap */
    qm_queue *old = declare("old");
    put(old, "the old one");
    for (int i = 0; i < 300; i++) {
        put_numbered(q, i);
        qm_position_ack(get(q));
    }
    commit();
    persist_get_stats(P, &st);
    uint64_t bytes = st.msgs_bytes;
    ck_assert_uint_gt(st.msgs_segments, 10);
    ck_assert_int_eq(persist_tidy_start_reap(P), 0);
    /* a TIDY asked for meanwhile finishes the reap, then runs: its result is its own */
    persist_tidy_full(P, &r);
    ck_assert_int_eq(persist_tidy_running(P), 0);
    ck_assert_uint_eq(r.segments_freed, 0);
    ck_assert_uint_lt(r.bytes_before * 4, bytes);
    persist_get_stats(P, &st);
    ck_assert_uint_le(st.msgs_segments, 3);
    restart();
    ck_assert_str_eq(contents(find("old")), "the old one");
    ck_assert_str_eq(contents(find("q")), "");
    close_store();
}
END_TEST

/* The issue's shape in small: one old message in a queue that is never read, then many
 * segments of traffic through another queue, published and acked. Before compaction every
 * segment from the old message's on stayed; now TIDY copies it forward and frees the rest,
 * and what the old message was (delivered and requeued, moved into a subqueue, its lookup id)
 * survives the copy and a restart. */
START_TEST(tidy_compacts_behind_an_old_message)
{
    OPT.segment_size = 4096;
    open_store();
    qm_queue *old = declare("old");
    qm_queue *q = declare("q");
    put(old, "the old one");
    put(old, "moved away");
    qm_position_requeue(get(old)); /* delivered once: comes back redelivered */
    uint64_t moved_id = qm_queue_peek(old, 1)->lookup_id;
    qm_queue *sub = qm_queue_subqueue(old, "retry", 5, 1);
    ck_assert_int_eq(qm_move(old, moved_id, sub, NULL), SL_OK);
    uint64_t old_id = qm_queue_peek(old, 0)->lookup_id;
    for (int i = 0; i < 400; i++) {
        put_numbered(q, i);
        if (i % 3 == 2)
            while (q->n_ready)
                qm_position_ack(get(q));
    }
    while (q->n_ready)
        qm_position_ack(get(q));
    commit();
    persist_stats st;
    persist_get_stats(P, &st);
    uint64_t before = st.msgs_bytes;
    ck_assert_uint_gt(st.msgs_segments, 20);
    persist_tidy_result r;
    persist_tidy_full(P, &r);
    ck_assert_uint_ge(r.segments_compacted, 1);
    ck_assert_uint_ge(r.records_copied, 2);
    /* done means the disk is given back: no deleted segment is left open for a later commit */
    ck_assert_int_eq(deleted_files_open(), 0);
    persist_get_stats(P, &st);
    ck_assert_uint_le(st.msgs_segments, 2);
    ck_assert_uint_lt(st.msgs_bytes * 10, before);
    ck_assert_uint_eq(r.bytes_before, before);
    ck_assert_uint_eq(r.bytes_after, st.msgs_bytes);
    restart();
    old = find("old");
    ck_assert_str_eq(contents(old), "the old one");
    ck_assert_uint_eq(qm_queue_peek(old, 0)->lookup_id, old_id);
    ck_assert_int_eq(qm_queue_peek(old, 0)->redelivered, 1);
    sub = qm_queue_subqueue(old, "retry", 5, 0);
    ck_assert_ptr_nonnull(sub);
    ck_assert_str_eq(contents(sub), "moved away");
    ck_assert_uint_eq(qm_queue_peek(sub, 0)->lookup_id, moved_id);
    ck_assert_uint_eq(qm_queue_peek(sub, 0)->move_count, 1);
    ck_assert_str_eq(contents(find("q")), "");
    /* a second TIDY and restart change nothing */
    persist_tidy_full(P, &r);
    restart();
    ck_assert_str_eq(contents(find("old")), "the old one");
    ck_assert_str_eq(contents(qm_queue_subqueue(find("old"), "retry", 5, 0)), "moved away");
    close_store();
}
END_TEST

/* What the node holds, as a restart must give it back: every stored position of the queues
 * q0..q2 and their retry subqueues, by lookup id, with body and redelivered flag (a held one
 * comes back redelivered; a purged one does not come back). */
static const char *stored_state(void)
{
    static char out[1 << 16];
    size_t n = 0;
    out[0] = 0;
    for (int qi = 0; qi < 6; qi++) {
        char name[16];
        snprintf(name, sizeof name, "q%d", qi % 3);
        qm_queue *q = find(name);
        if (q && qi >= 3)
            q = qm_queue_subqueue(q, "retry", 5, 0);
        n += (size_t)snprintf(out + n, sizeof out - n, "|%s%s:", name, qi >= 3 ? ";retry" : "");
        if (!q)
            continue;
        /* ready ones in lookup order (no priorities here), then the held ones sorted in */
        uint64_t ids[512];
        char lines[512][64];
        size_t k = 0;
        qm_position view;
        for (size_t i = 0; i < q->n_ready && k < 512; i++) {
            const qm_position *p = qm_queue_peek_view(q, i, &view);
            ck_assert_ptr_nonnull(p);
            ids[k] = p->lookup_id;
            snprintf(lines[k++], 64, "%llu=%.*s%s", (unsigned long long)p->lookup_id,
                     (int)(p->msg->body_len > 12 ? 12 : p->msg->body_len),
                     (const char *)qm_msg_body(p->msg), p->redelivered ? "*" : "");
            if (p == &view)
                qm_message_unref(view.msg);
        }
        for (qm_position *p = q->locked; p && k < 512; p = p->u.lk->lnext) {
            if (p->state != QM_POS_LOCKED || p->in_tx_enqueue)
                continue;
            ids[k] = p->lookup_id;
            snprintf(lines[k++], 64, "%llu=%.*s*", (unsigned long long)p->lookup_id,
                     (int)(p->msg->body_len > 12 ? 12 : p->msg->body_len),
                     (const char *)qm_msg_body(p->msg));
        }
        for (size_t i = 1; i < k; i++) /* insertion sort by id */
            for (size_t j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
                uint64_t t = ids[j];
                ids[j] = ids[j - 1];
                ids[j - 1] = t;
                char tl[64];
                memcpy(tl, lines[j], 64);
                memcpy(lines[j], lines[j - 1], 64);
                memcpy(lines[j - 1], tl, 64);
            }
        for (size_t i = 0; i < k; i++)
            n += (size_t)snprintf(out + n, sizeof out - n, "%s,", lines[i]);
        ck_assert_uint_lt(n, sizeof out - 256);
    }
    return out;
}

/* Removals, delivery marks, moves, a purge and a transaction's end written long after what
 * they cancel or change, in segments that then hold nothing live: TIDY must keep those
 * segments while the older records are there (the segments of q0 stay: mostly live), or a
 * restart brings back acked and purged messages, forgets deliveries and undoes moves. */
START_TEST(tidy_keeps_what_later_records_depend_on)
{
    OPT.segment_size = 4096;
    OPT.no_compact = 1; /* the rule alone first */
    open_store();
    qm_queue *a = declare("q0"), *b = declare("q1"), *c = declare("q2");
    char body[1200];
    /* ten segments of q0 and q1, all live: not worth copying for the little behind them */
    for (int i = 0; i < 40; i++) {
        snprintf(body, sizeof body, "a%02d-%0900d", i, 0);
        put(i % 4 == 3 ? b : a, body);
    }
    commit();
    /* the later records, each kind in segments of its own (traffic through q2 between) */
#define TRAFFIC()                                                                                  \
    for (int i = 0; i < 20; i++)                                                                   \
        put_numbered(c, i), qm_position_ack(get(c));                                               \
    st_log_roll(P->msgs)                      /* the next kind starts a segment of its own */
    qm_position *acked[2] = {get(a), get(a)}; /* delivered here, ... */
    TRAFFIC();
    qm_position_ack(acked[0]); /* ... removed in a segment of their own */
    qm_position_ack(acked[1]);
    TRAFFIC();
    qm_position *h[3];
    for (int i = 0; i < 3; i++)
        h[i] = get(a);
    for (int i = 0; i < 3; i++)
        qm_position_requeue(h[i]); /* delivery marks */
    TRAFFIC();
    qm_queue *sub = qm_queue_subqueue(a, "retry", 5, 1);
    ck_assert_int_eq(qm_move(a, qm_queue_peek(a, 5)->lookup_id, sub, NULL), SL_OK);
    ck_assert_int_eq(qm_move(a, qm_queue_peek(a, 9)->lookup_id, sub, NULL), SL_OK);
    TRAFFIC();
    ck_assert_uint_gt(qm_queue_purge(b), 0);
    TRAFFIC();
#undef TRAFFIC
    qm_tx *tx = qm_tx_begin(N);    /* a transaction whose end lands segments after its start */
    for (int i = 0; i < 30; i++) { /* the first one stays, the rest is consumed */
        snprintf(body, sizeof body, "t%02d-%0200d", i, 0);
        qm_message *m = pmsg(body);
        ck_assert_int_eq(qm_tx_enqueue(tx, i ? c : a, m), SL_OK);
        qm_message_unref(m);
    }
    ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
    st_log_roll(P->msgs); /* its end alone at the end of a segment */
    while (c->n_ready)
        qm_position_ack(get(c));
    /* then traffic until the segments of all that are old */
    for (int i = 0; i < 200; i++)
        put_numbered(c, i), qm_position_ack(get(c));
    commit();
    char want[1 << 16];
    snprintf(want, sizeof want, "%s", stored_state());
    persist_tidy_result r;
    persist_tidy_full(P, &r);
    ck_assert_uint_gt(r.segments_freed, 10);
    ck_assert_uint_eq(r.segments_compacted, 0);
    restart();
    ck_assert_str_eq(stored_state(), want);
    /* then with compaction: the same again */
    OPT.no_compact = 0;
    restart();
    persist_tidy_full(P, &r);
    ck_assert_uint_gt(r.segments_compacted, 0);
    restart();
    ck_assert_str_eq(stored_state(), want);
    /* and once all of q0 is gone too, nothing of this is left */
    a = find("q0");
    while (a->n_ready)
        qm_position_ack(get(a));
    sub = qm_queue_subqueue(a, "retry", 5, 0);
    while (sub && sub->n_ready)
        qm_position_ack(get(sub));
    qm_node_run_dispatch(N);
    persist_tidy_full(P, &r);
    persist_stats st;
    persist_get_stats(P, &st);
    ck_assert_uint_le(st.msgs_segments, 2);
    restart();
    ck_assert_str_eq(stored_state(), "|q0:|q1:|q2:|q0;retry:|q1;retry:|q2;retry:");
    close_store();
}
END_TEST

/* A copy made by compaction replaces the older record only while both are there: the older
 * segment may outlive it (it stays for a removal that depends on an older segment still),
 * and then the copy's segment, and the removal of the copied position, must stay too. */
START_TEST(tidy_copies_never_outlive_what_they_replace)
{
    OPT.segment_size = 4096;
    open_store();
    qm_queue *big = declare("q0"), *p = declare("q1"), *c = declare("q2");
    char body[1200];
    for (int i = 0; i < 24; i++) { /* old, live, big: never worth copying */
        snprintf(body, sizeof body, "b%02d-%0900d", i, 0);
        put(big, body);
    }
    commit();
    st_log_roll(P->msgs);
    qm_position_ack(get(big));   /* a removal that depends on big's first segment ... */
    put(p, "the copied one");    /* ... next to a small live message ... */
    for (int i = 0; i < 10; i++) /* ... in a segment otherwise dead */
        put_numbered(c, i), qm_position_ack(get(c));
    st_log_roll(P->msgs);
    for (int i = 0; i < 40; i++)
        put_numbered(c, i), qm_position_ack(get(c));
    commit();
    persist_tidy_result r;
    persist_tidy_full(P, &r);
    ck_assert_uint_ge(r.segments_compacted, 1); /* p's enqueue was copied forward */
    ck_assert_uint_ge(r.records_copied, 1);
    qm_position_ack(get(find("q1"))); /* now the copy is dead */
    for (int i = 0; i < 40; i++)
        put_numbered(c, i), qm_position_ack(get(c));
    commit();
    char want[1 << 16];
    snprintf(want, sizeof want, "%s", stored_state());
    persist_tidy_full(P, &r);
    restart();
    ck_assert_str_eq(stored_state(), want); /* "the copied one" is not back */
    close_store();
}
END_TEST

/* Random traffic (publishes, fanout to shared messages, acks, requeues, held deliveries,
 * moves into a subqueue and back, purges, transactions committed and aborted, paging under
 * a small memory budget) with TIDY after random steps: after every restart the store gives
 * back exactly what the node held, and in the end it is small. Seeds 1-6, half of them with
 * paging. */
START_TEST(tidy_random_traffic_loses_nothing)
{
    unsigned seed = (unsigned)_i + 1;
    srand(seed);
    OPT.segment_size = 2048 + 1024 * (seed % 3);
    if (seed % 2)
        qm_set_memory_budget(3000);
    open_store();
    qm_exchange *x = xdeclare("fan", QM_EX_FANOUT, 1);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "q%d", i);
        declare(name);
        if (i < 2)
            ck_assert_int_eq(
                qm_bind_queue(x, find(name), amqp_cstr(""), (amqp_bytes){0}, err, sizeof err),
                SL_OK);
    }
    qm_position *held[64];
    int nheld = 0;
    int next = 0;
    uint64_t tidies = 0, copied = 0, freed = 0;
    for (int step = 0; step < 700; step++) {
        char name[16];
        snprintf(name, sizeof name, "q%d", rand() % 3);
        qm_queue *q = find(name);
        qm_queue *sub = qm_queue_subqueue(q, "retry", 5, 0);
        int op = rand() % 100;
        char body[160];
        snprintf(body, sizeof body, "m%05d-%0*d", next++, rand() % 120, 0);
        if (op < 30) {
            put(q, body);
        } else if (op < 36) {
            qm_queue *out[2];
            size_t total;
            ck_assert_uint_eq(qm_route(x, amqp_cstr(""), (amqp_bytes){0}, out, 2, &total), 2);
            qm_message *m = pmsg(body);
            ck_assert_int_eq(qm_queue_enqueue(out[0], m), SL_OK);
            ck_assert_int_eq(qm_queue_enqueue(out[1], m), SL_OK);
            qm_message_unref(m);
        } else if (op < 58) {
            if (q->n_ready)
                qm_position_ack(get(q));
        } else if (op < 63) {
            if (q->n_ready)
                qm_position_requeue(get(q));
        } else if (op < 68) {
            if (q->n_ready && nheld < 64)
                held[nheld++] = get(q);
        } else if (op < 72) {
            if (nheld) { /* settle a held one: ack or requeue */
                int i = rand() % nheld;
                if (rand() % 2)
                    qm_position_ack(held[i]);
                else
                    qm_position_requeue(held[i]);
                held[i] = held[--nheld];
            }
        } else if (op < 80) {
            if (q->n_ready) {
                qm_position view;
                const qm_position *p = qm_queue_peek_view(q, (size_t)rand() % q->n_ready, &view);
                uint64_t id = p->lookup_id;
                if (p == &view)
                    qm_message_unref(view.msg);
                ck_assert_int_eq(qm_move(q, id, qm_queue_subqueue(q, "retry", 5, 1), NULL), SL_OK);
            }
        } else if (op < 85) {
            if (sub && sub->n_ready)
                qm_move_first(sub, 1 + (uint64_t)rand() % 3, q, NULL, NULL);
        } else if (op < 87) {
            qm_queue_purge(rand() % 2 || !sub ? q : sub);
        } else if (op < 93) {
            qm_tx *tx = qm_tx_begin(N);
            for (int k = rand() % 4; k >= 0; k--) {
                snprintf(body, sizeof body, "t%05d-%0*d", next++, rand() % 120, 0);
                qm_message *m = pmsg(body);
                ck_assert_int_eq(qm_tx_enqueue(tx, q, m), SL_OK);
                qm_message_unref(m);
            }
            qm_position *taken[4];
            int nt = 0;
            while (nt < 3 && q->n_ready && rand() % 2) {
                taken[nt] = get(q);
                ck_assert_int_eq(qm_tx_dequeue(tx, taken[nt], QM_SETTLE_ACK), SL_OK);
                nt++;
            }
            if (rand() % 4) {
                ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
            } else {
                qm_tx_abort(tx); /* the dequeued stay held by us */
                for (int i = 0; i < nt; i++)
                    qm_position_requeue(taken[i]);
            }
        } else {
            commit();
            persist_tidy_result r;
            persist_tidy_full(P, &r);
            tidies++;
            copied += r.records_copied;
            freed += r.segments_freed;
        }
        qm_node_run_dispatch(N); /* removes subqueues left empty */
        if (step % 97 == 96) {
            char want[1 << 16];
            snprintf(want, sizeof want, "%s", stored_state());
            nheld = 0; /* held deliveries end with the node: they come back redelivered */
            restart();
            x = xfind("fan");
            const char *got = stored_state();
            ck_assert_msg(!strcmp(want, got), "seed %u step %d:\nwant %s\ngot  %s", seed, step,
                          want, got);
        }
    }
    ck_assert_uint_gt(tidies, 10);
    ck_assert_uint_gt(copied, 0);
    ck_assert_uint_gt(freed, 0);
    /* drain everything: the store ends at one or two segments */
    nheld = 0;
    restart();
    for (int i = 0; i < 6; i++) {
        char name[16];
        snprintf(name, sizeof name, "q%d", i % 3);
        qm_queue *q = find(name);
        if (i >= 3)
            q = qm_queue_subqueue(q, "retry", 5, 0);
        while (q && q->n_ready)
            qm_position_ack(get(q));
    }
    persist_tidy_result r;
    persist_tidy_full(P, &r);
    persist_stats st;
    persist_get_stats(P, &st);
    ck_assert_uint_le(st.msgs_segments, 2);
    restart();
    ck_assert_str_eq(stored_state(), "|q0:|q1:|q2:|q0;retry:|q1;retry:|q2;retry:");
    close_store();
}
END_TEST

/* A TTL deadline survives a restart: a message keeps what was left of its TTL when the
 * broker stopped, and one whose deadline passed while the broker was down expires at once.
 * (Before, every restart gave each message its whole TTL again.) */
static uint64_t fake_wall;
static uint64_t fake_wall_ms(void)
{
    return fake_wall;
}

/* open_store with the node's monotonic clock at `now` from the start (recovery included) */
static void open_store_at(uint64_t now)
{
    N = qm_node_new("test");
    N->test_now = now;
    V = qm_vhost_create(N, "/");
    P = persist_open(D, N, &OPT, err, sizeof err);
    ck_assert_msg(P != NULL, "persist_open: %s", err);
}

START_TEST(ttl_deadline_survives_restart)
{
    uint64_t (*real_wall)(void) = persist_wall_ms;
    persist_wall_ms = fake_wall_ms;
    fake_wall = 1000000;
    open_store_at(5000);
    sl_buf ab;
    qm_queue *q = declare_full("ttlq", 1, 0, 0, int_arg(&ab, "x-message-ttl", 10000));
    put(q, "a");
    N->test_now = 7000; /* two seconds later, on both clocks */
    fake_wall = 1002000;
    put(q, "b");
    commit();
    close_store();

    /* back four seconds after "a" was published: a has 6 s left, b 8 s */
    fake_wall = 1004000;
    open_store_at(100); /* a fresh monotonic clock: deadlines are rebuilt on it */
    q = find("ttlq");
    ck_assert_uint_eq(qm_queue_message_count(q), 2);
    ck_assert_uint_eq(qm_pos_expires(qm_queue_peek(q, 0)), 100 + 6000);
    ck_assert_uint_eq(qm_pos_expires(qm_queue_peek(q, 1)), 100 + 8000);
    close_store();

    /* back after both deadlines: both expire at once */
    fake_wall = 1020000;
    open_store_at(100);
    q = find("ttlq");
    ck_assert_ptr_null(qm_queue_get(q, 1, NULL)); /* the head check drops both */
    ck_assert_uint_eq(qm_queue_message_count(q), 0);
    close_store();
    sl_buf_free(&ab);
    persist_wall_ms = real_wall;
}
END_TEST

/* A consumer's deliveries and its acks of consecutive lookups of one queue are one record
 * each (R_DELIVER_RUN, R_DEQ_RUN: two 33-byte records a message before); replayed, each run
 * covers exactly its lookups, and a record of anything else ends a run where it stands. */
START_TEST(delivery_and_ack_runs)
{
    open_store();
    qm_queue *q = declare("rq"), *o = declare("ro");
    char body[16];
    for (int i = 0; i < 10; i++) {
        snprintf(body, sizeof body, "m%d", i);
        put(q, body);
    }
    put(o, "other");
    commit();
    qm_position *pos[10];
    for (int i = 0; i < 10; i++)
        pos[i] = get(q); /* lookups 1-10: one run */
    for (int i = 0; i < 6; i++)
        qm_position_ack(pos[i]); /* 1-6: one run */
    qm_position_ack(pos[8]);     /* 9 alone: not next to 6 */
    (void)get(o);                /* another queue: a record of its own */
    commit();
    close_store();

    recs *r = calloc(1, sizeof *r);
    scan("msgs", r);
    size_t seen[256] = {0};
    const rec *drun = NULL, *arun = NULL;
    for (size_t i = 0; i < r->n; i++) {
        seen[r->v[i].type]++;
        if (r->v[i].type == R_DELIVER_RUN)
            drun = &r->v[i];
        if (r->v[i].type == R_DEQ_RUN)
            arun = &r->v[i];
    }
    ck_assert_uint_eq(seen[R_DELIVER_RUN], 1);
    ck_assert_uint_eq(seen[R_DEQ_RUN], 1);
    ck_assert_uint_eq(seen[R_DELIVER], 1); /* ro's one delivery */
    ck_assert_uint_eq(seen[R_DEQ], 1);     /* the ack of lookup 9 */
    ck_assert_uint_eq(drun->len, 20);      /* inc, first, count */
    ck_assert(drun->seq < arun->seq);      /* in the order the single records would have had */
    free(r);

    open_store();
    q = find("rq");
    ck_assert_str_eq(contents(q), "m6,m7,m9");
    for (size_t i = 0; i < 3; i++)
        ck_assert(qm_queue_peek(q, i)->redelivered); /* delivered before the stop */
    ck_assert_str_eq(contents(find("ro")), "other");
    ck_assert(qm_queue_peek(find("ro"), 0)->redelivered);
    close_store();
}
END_TEST

/* A run record outside its bounds (a run of one, a count past R_RUN_MAX, lookups that wrap)
 * is corruption: recovery stops and names the record, rather than walking billions of ids. */
START_TEST(run_records_out_of_bounds_stop_recovery)
{
    static const struct {
        uint64_t first;
        uint32_t count;
    } bad[] = {{1, 1}, {1, R_RUN_MAX + 1}, {UINT64_MAX - 1, 3}};
    uint64_t first = bad[_i].first;
    uint32_t count = bad[_i].count;
    open_store();
    uint64_t inc = declare("q")->incarnation;
    put(find("q"), "a");
    close_store();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/msgs", D);
    st_log_options o = {.no_sync = 1};
    recs *r = calloc(1, sizeof *r);
    st_log *l = st_log_open(dir, &o, collect, r, err, sizeof err);
    ck_assert_msg(l != NULL, "%s", err);
    sl_buf b;
    sl_buf_init(&b);
    rec_u64(&b, inc);
    rec_u64(&b, first);
    rec_u32(&b, count);
    ck_assert_uint_ne(st_log_append(l, _i % 2 ? R_DELIVER_RUN : R_DEQ_RUN, b.data, b.len, NULL), 0);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    sl_buf_free(&b);
    free(r);
    ck_assert_ptr_null(try_open_in(D));
    ck_assert_msg(strstr(err, "malformed record type") != NULL, "error: %s", err);
}
END_TEST

/* An id the node never hands out (UINT64_MAX: the high-water mark kept is the id + 1, which
 * would wrap to 0) is corruption. Before, an R_ENQ with lookup UINT64_MAX was restored but its
 * R_DEQ (first + 1 wrapped to 0) removed nothing: an acked message came back after a restart
 * (fuzz_persist found it). The cases: the lookup, the message id and the incarnation of an
 * R_ENQ, the lookup of an R_MOVE, a message record's own id. */
START_TEST(ids_never_handed_out_stop_recovery)
{
    open_store();
    uint64_t inc = declare("q")->incarnation;
    uint64_t inc2 = declare("p")->incarnation;
    put(find("q"), "a");
    close_store();
    char dir[512];
    snprintf(dir, sizeof dir, "%s/msgs", D);
    st_log_options o = {.no_sync = 1};
    recs *r = calloc(1, sizeof *r);
    st_log *l = st_log_open(dir, &o, collect, r, err, sizeof err);
    ck_assert_msg(l != NULL, "%s", err);
    sl_buf b;
    sl_buf_init(&b);
    uint8_t type;
    if (_i <= 2) { /* R_ENQ: lookup, message, incarnation */
        rec_u64(&b, _i == 2 ? UINT64_MAX : inc);
        rec_u64(&b, _i == 0 ? UINT64_MAX : 1000);
        rec_u64(&b, _i == 1 ? UINT64_MAX : 1);
        rec_u32(&b, 0);
        rec_u8(&b, 0);
        type = R_ENQ;
    } else if (_i == 3) { /* R_MOVE of lookup UINT64_MAX */
        rec_u64(&b, inc);
        rec_u64(&b, UINT64_MAX);
        rec_u64(&b, inc2);
        rec_u32(&b, 1);
        type = R_MOVE;
    } else { /* R_MSG whose id is UINT64_MAX */
        rec_u64(&b, UINT64_MAX);
        rec_s16(&b, "", 0);
        rec_s16(&b, "q", 1);
        rec_b32(&b, "\x00\x00", 2);
        sl_buf_append(&b, "x", 1);
        type = R_MSG;
    }
    ck_assert_uint_ne(st_log_append(l, type, b.data, b.len, NULL), 0);
    ck_assert_int_eq(st_log_commit(l, NULL), 0);
    st_log_close(l);
    sl_buf_free(&b);
    free(r);
    ck_assert_ptr_null(try_open_in(D));
    ck_assert_msg(strstr(err, "malformed record type") != NULL, "error: %s", err);
}
END_TEST

/* ------------------------------------------------------------------ golden data directory */

/* Builds the golden data directory. Run by hand (--write-golden) to make the fixture, and by
 * the golden test to check the writer still produces the same bytes. Keep it deterministic. */
static void golden_recipe(const char *dir)
{
    ck_assert_msg(try_open_in(dir) != NULL, "%s", err);
    sl_buf ab;
    qm_queue *gq = declare_full("gq", 1, 0, 0, int_arg(&ab, "x-max-length", 100));
    qm_queue *gp = declare("gp");
    qm_queue *gd = declare("gd");
    qm_exchange *gx = xdeclare("gx", QM_EX_TOPIC, 1);
    qm_exchange *gt = xdeclare("gtmp", QM_EX_DIRECT, 1);
    ck_assert_int_eq(qm_bind_queue(gx, gq, amqp_cstr("a.#"), (amqp_bytes){0}, err, sizeof err),
                     SL_OK);
    ck_assert_int_eq(qm_bind_queue(gx, gp, amqp_cstr("p"), (amqp_bytes){0}, err, sizeof err),
                     SL_OK);
    qm_unbind_queue(gx, gp, amqp_cstr("p"), (amqp_bytes){0});
    ck_assert_int_eq(qm_exchange_delete(gt, 0, err, sizeof err), SL_OK);
    put_msg(gq, msg_props("one", 1, "m1", (amqp_bytes){0}));
    put(gq, "two");
    put(gq, "three");
    put(gq, "four");
    put_msg(gq, msg_props("transient", 0, NULL, (amqp_bytes){0}));
    commit();
    qm_position *one = get(gq);
    qm_position_requeue(one); /* "one": delivered, so redelivered after a restart */
    one = get(gq);
    (void)one;                  /* still held when the directory is closed */
    qm_position *two = get(gq); /* "two": acked */
    qm_position_ack(two);
    qm_queue *poison = qm_queue_subqueue(gq, "poison", 6, 1);
    ck_assert_int_eq(qm_move(gq, qm_queue_peek(gq, 0)->lookup_id, poison, NULL), SL_OK);
    put(gp, "purged");
    qm_queue_purge(gp);
    put(gp, "after-purge");
    put(gd, "in-deleted");
    delete_queue(gd);
    qm_position *four = get(gq);
    qm_tx *tx = qm_tx_begin(N); /* acks "four", enqueues "tx" */
    ck_assert_int_eq(qm_tx_dequeue(tx, four, QM_SETTLE_ACK), SL_OK);
    qm_message *m = pmsg("tx");
    ck_assert_int_eq(qm_tx_enqueue(tx, gq, m), SL_OK);
    qm_message_unref(m);
    ck_assert_int_eq(qm_tx_commit(tx), SL_OK);
    commit();
    close_store();
    sl_buf_free(&ab);
}

/* meta: the first open's snapshot (id high-water marks, the vhost's three system queues), then
 * what the recipe's hooks wrote; msgs: everything the recipe did, in order. */
/* clang-format off */
static const uint8_t GOLDEN_META[] = {
    M_NODE,                             /* next incarnation 4, lookup 1, message 1 */
    M_QUEUE, M_QUEUE, M_QUEUE,          /* sluice.system.* */
    M_QUEUE, M_QUEUE, M_QUEUE,          /* gq gp gd */
    M_EXCHANGE, M_EXCHANGE,             /* gx gtmp */
    M_BIND, M_BIND, M_UNBIND,           /* gx -> gq, gx -> gp and back */
    M_EXCHANGE_DEL,                     /* gtmp */
    M_QUEUE,                            /* gq;poison */
    M_QUEUE_DEL,                        /* gd */
};
static const uint8_t GOLDEN_MSGS[] = {
    R_MSG, R_ENQ, R_MSG, R_ENQ,         /* one two */
    R_MSG, R_ENQ, R_MSG, R_ENQ,         /* three four */
    R_DELIVER_RUN, R_DEQ,               /* one and two delivered (lookups 1-2), two acked */
    R_MOVE,                             /* three -> gq;poison */
    R_MSG, R_ENQ, R_PURGE,              /* gp: purged */
    R_MSG, R_ENQ,                       /* gp: after-purge */
    R_MSG, R_ENQ,                       /* gd: in-deleted */
    R_DELIVER,                          /* four */
    R_DEQ | R_IN_TX, R_MSG,             /* tx: ack of four, message "tx" (never marked) */
    R_ENQ | R_IN_TX, R_TX_END,          /* tx: its enqueue, then the end that applies them */
};
/* golden-v1: what the writer made before runs */
static const uint8_t GOLDEN_V1_MSGS[] = {
    R_MSG, R_ENQ, R_MSG, R_ENQ,         /* one two */
    R_MSG, R_ENQ, R_MSG, R_ENQ,         /* three four */
    R_DELIVER, R_DELIVER, R_DEQ,        /* one, two (acked) */
    R_MOVE,                             /* three -> gq;poison */
    R_MSG, R_ENQ, R_PURGE,              /* gp: purged */
    R_MSG, R_ENQ,                       /* gp: after-purge */
    R_MSG, R_ENQ,                       /* gd: in-deleted */
    R_DELIVER,                          /* four */
    R_DEQ | R_IN_TX, R_MSG,             /* tx: ack of four, message "tx" (never marked) */
    R_ENQ | R_IN_TX, R_TX_END,          /* tx: its enqueue, then the end that applies them */
};
/* clang-format on */

static void fixture_dir(char *out, size_t cap, const char *name)
{
    const char *src = __FILE__;
    const char *slash = strrchr(src, '/');
    snprintf(out, cap, "%.*sfiles/persist/%s", slash ? (int)(slash - src + 1) : 0, src, name);
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)len + 1);
    ck_assert_uint_eq(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

static void spit(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

static const char *const GOLDEN_FILES[] = {"meta/00000000000000000001.seg",
                                           "msgs/00000000000000000001.seg"};

static void check_record_types(const char *sub, const uint8_t *want, size_t n)
{
    recs *r = calloc(1, sizeof *r);
    scan(sub, r);
    ck_assert_uint_eq(r->n, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(r->v[i].type == want[i], "%s record %zu: type %u, want %u", sub, i,
                      r->v[i].type, want[i]);
    free(r);
}

/* Copy the committed fixture `name` into D, check its records are exactly want_msgs, open it
 * and check the state the recipe left; the fixture's bytes are left in fbytes / flen. */
static void open_golden(const char *name, const uint8_t *want_msgs, size_t n_want,
                        uint8_t *fbytes[2], size_t flen[2])
{
    char fixture[600], path[800];
    fixture_dir(fixture, sizeof fixture, name);
    /* 1. copy the committed fixture (opening it writes the meta snapshot) */
    char sub[600];
    snprintf(sub, sizeof sub, "%s/meta", D);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/msgs", D);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", fixture, GOLDEN_FILES[i]);
        fbytes[i] = slurp(path, &flen[i]);
        snprintf(path, sizeof path, "%s/%s", D, GOLDEN_FILES[i]);
        spit(path, fbytes[i], flen[i]);
    }
    /* 2. exactly the expected records */
    check_record_types("meta", GOLDEN_META, sizeof GOLDEN_META);
    check_record_types("msgs", want_msgs, n_want);

    /* 3. exactly the expected state */
    open_store();
    qm_queue *gq = find("gq");
    ck_assert_ptr_nonnull(gq);
    ck_assert_int_eq(gq->args.max_length, 100);
    ck_assert_str_eq(contents(gq), "one,tx");
    ck_assert(qm_queue_peek(gq, 0)->redelivered);
    ck_assert(!qm_queue_peek(gq, 1)->redelivered);
    ck_assert_uint_eq(qm_queue_peek(gq, 0)->lookup_id, 1);
    ck_assert_uint_eq(qm_queue_peek(gq, 1)->lookup_id, 9);
    amqp_basic_props pr;
    qm_message *one = qm_queue_peek(gq, 0)->msg;
    ck_assert_int_eq(amqp_props_decode(qm_msg_props(one), one->props_len, &pr), 0);
    ck_assert_uint_eq(pr.delivery_mode, 2);
    ck_assert_uint_eq(pr.message_id.len, 2);
    ck_assert_int_eq(memcmp(pr.message_id.p, "m1", 2), 0);
    qm_queue *poison = qm_queue_find(V, "gq;poison", 9);
    ck_assert_ptr_nonnull(poison);
    ck_assert_str_eq(contents(poison), "three");
    ck_assert_uint_eq(qm_queue_peek(poison, 0)->move_count, 1);
    ck_assert_uint_eq(qm_queue_peek(poison, 0)->lookup_id, 3);
    ck_assert_str_eq(contents(find("gp")), "after-purge");
    ck_assert_ptr_null(find("gd"));
    ck_assert_ptr_null(xfind("gtmp"));
    qm_exchange *gx = xfind("gx");
    ck_assert_ptr_nonnull(gx);
    ck_assert_int_eq(gx->type, QM_EX_TOPIC);
    ck_assert_uint_eq(gx->n_bindings, 1);
    ck_assert_ptr_eq(gx->bindings->dest_queue, gq);
    ck_assert_str_eq(gx->bindings->key, "a.#");
    /* no id seen in the logs is handed out again (gd's incarnation 6 and poison's 7 included) */
    ck_assert_uint_ge(N->next_incarnation, 8);
    ck_assert_uint_ge(N->next_lookup_id, 10);
    close_store();
}

START_TEST(golden_data_dir)
{
    size_t flen[2];
    uint8_t *fbytes[2];
    open_golden("golden", GOLDEN_MSGS, sizeof GOLDEN_MSGS, fbytes, flen);
    /* 4. the writer still produces the fixture's bytes */
    char fresh[600], path[800];
    snprintf(fresh, sizeof fresh, "%s/fresh", D);
    golden_recipe(fresh);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", fresh, GOLDEN_FILES[i]);
        size_t n;
        uint8_t *got = slurp(path, &n);
        ck_assert_msg(n == flen[i] && memcmp(got, fbytes[i], n) == 0,
                      "%s differs from the golden fixture (format changed?)", GOLDEN_FILES[i]);
        free(got);
        free(fbytes[i]);
    }
}
END_TEST

/* The data directory of the version before runs opens to the same state. */
START_TEST(golden_v1_data_dir)
{
    size_t flen[2];
    uint8_t *fbytes[2];
    open_golden("golden-v1", GOLDEN_V1_MSGS, sizeof GOLDEN_V1_MSGS, fbytes, flen);
    free(fbytes[0]);
    free(fbytes[1]);
}
END_TEST

/* A link receiver's state is per (sender, SeqID, destination queue) (issue 35): a sequence's
 * number in one queue never moves another's, and the first queue a sequence fed owns it.
 * R_EOD_IN always carried the queue, so the records an earlier version wrote (here: the
 * issue's forged 2^62 for "mal" written after the real number for "orders", both under one
 * (sender, SeqID)) recover into separate states, before and after a TIDY. */
START_TEST(eod_state_is_per_sender_sequence_and_queue)
{
    static const uint8_t S[16] = {0xa1, 0xa2};
    open_store();
    persist_eod_in_set(P, S, 7, 20, 0, "sluice@a", "orders");
    persist_eod_in_set(P, S, 7, 1ull << 62, 0, "sluice@a", "mal"); /* as old code wrote it */
    persist_eod_in_set(P, S, 8, 3, 0, "sluice@a", "v/q");
    persist_eod_in_set(P, S, 7, 25, 0, "sluice@a", "orders"); /* the latest per key wins */
    for (int round = 0; round < 3; round++) {
        if (round == 1)
            restart();
        if (round == 2) {
            persist_tidy_result tr;
            persist_tidy_full(P, &tr);
            restart();
        }
        persist_eod_in *e = persist_eod_in_get(P, S, 7, "orders");
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->seq_no, 25);
        ck_assert_str_eq(e->sender_name, "sluice@a");
        ck_assert_uint_eq(persist_eod_in_get(P, S, 7, "mal")->seq_no, 1ull << 62);
        ck_assert_uint_eq(persist_eod_in_get(P, S, 8, "v/q")->seq_no, 3);
        ck_assert_ptr_null(persist_eod_in_get(P, S, 8, "orders"));
        ck_assert_ptr_null(persist_eod_in_get(P, S, 9, "orders"));
        /* the sequence feeds a queue already: another queue is "elsewhere" */
        ck_assert_ptr_nonnull(persist_eod_in_other(P, S, 8, "orders"));
        ck_assert_str_eq(persist_eod_in_other(P, S, 8, "x")->dest, "v/q");
        ck_assert_ptr_null(persist_eod_in_other(P, S, 8, "v/q"));
        ck_assert_ptr_null(persist_eod_in_other(P, S, 9, "orders"));
        size_t n;
        persist_eod_in_all(P, &n);
        ck_assert_uint_eq(n, 3);
    }
    close_store();
}
END_TEST

/* Recovery keeps no table of message records: an enqueue record finds its message in a small
 * cache of the recent ones. A journal copy is enqueued long after its message was stored
 * (more than the cache holds in between): recovery finds that message in a second pass over
 * the log, and every other position comes back as it was. */
START_TEST(recovery_finds_far_message_records)
{
    open_store();
    sl_buf b;
    sl_buf_init(&b);
    size_t mark = amqp_tbl_begin(&b);
    amqp_tbl_put_bool(&b, "x-journal", 1);
    amqp_tbl_end(&b, mark);
    qm_queue *jq =
        declare_full("jq", 1, 0, 0, (amqp_bytes){sl_buf_head(&b) + 4, sl_buf_unread(&b) - 4});
    qm_queue *other = declare("other");
    put(jq, "first");
    enum { FILL = 9000 }; /* more message records than the cache has slots in between */
    char body[32];
    for (int i = 0; i < FILL; i++) {
        snprintf(body, sizeof body, "o%d", i);
        put(other, body);
    }
    commit();
    qm_position *pos = qm_queue_get(jq, 0, NULL);
    ck_assert_ptr_nonnull(pos);
    qm_position_ack(pos); /* the journal copy: an enqueue of a message stored long ago */
    ck_assert_uint_eq(qm_queue_message_count(find("jq;journal")), 1);
    restart();
    qm_queue *j = find("jq;journal");
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(qm_queue_message_count(j), 1);
    qm_position *jp = qm_queue_get(j, 1, NULL);
    ck_assert_ptr_nonnull(jp);
    ck_assert_uint_eq(jp->msg->body_len, 5);
    ck_assert_int_eq(memcmp(qm_msg_body(jp->msg), "first", 5), 0);
    qm_position_ack(jp);
    ck_assert_uint_eq(qm_queue_message_count(find("jq")), 0);
    qm_queue *o = find("other");
    ck_assert_uint_eq(qm_queue_message_count(o), FILL);
    for (int i = 0; i < FILL; i++) {
        qm_position *op = qm_queue_get(o, 1, NULL);
        snprintf(body, sizeof body, "o%d", i);
        ck_assert_msg(op && op->msg->body_len == strlen(body) &&
                          !memcmp(qm_msg_body(op->msg), body, strlen(body)),
                      "message %d of other", i);
        qm_position_ack(op);
    }
    sl_buf_free(&b);
    close_store();
}
END_TEST

/* Beyond a share of the memory budget recovery leaves messages paged out (24 bytes each),
 * whatever the budget: a restart of a deep queue reads back only the head. */
START_TEST(recovery_reads_back_only_the_head)
{
    open_store();
    qm_queue *q = declare("deep");
    char body[64];
    for (int i = 0; i < 20000; i++) {
        snprintf(body, sizeof body, "message %06d of the deep queue", i);
        put(q, body);
    }
    commit();
    close_store();
    qm_set_memory_budget(8u << 20); /* 1 MiB read back at most: about 10,000 of these */
    open_store();
    q = find("deep");
    ck_assert_uint_eq(qm_queue_message_count(q), 20000);
    ck_assert_uint_gt(q->paged_len, 5000);
    ck_assert_uint_lt(qm_memory_bytes(), 2u << 20);
    for (int i = 0; i < 20000; i++) {
        qm_position *p = qm_queue_get(q, 1, NULL);
        snprintf(body, sizeof body, "message %06d of the deep queue", i);
        ck_assert_msg(p && p->msg->body_len == strlen(body) &&
                          !memcmp(qm_msg_body(p->msg), body, strlen(body)),
                      "message %d", i);
        qm_position_ack(p);
    }
    close_store();
    qm_set_memory_budget(0);
}
END_TEST

/* A message with a priority property (persistent). */
static qm_message *prio_msg(const char *body, uint8_t prio)
{
    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    p.flags = AMQP_P_DELIVERY_MODE | AMQP_P_PRIORITY;
    p.delivery_mode = 2;
    p.priority = prio;
    sl_buf b;
    sl_buf_init(&b);
    amqp_props_encode(&b, &p);
    size_t blen = strlen(body);
    qm_message *m = qm_message_new(AMQP_BYTES(""), amqp_cstr("prio"), sl_buf_head(&b),
                                   (uint32_t)sl_buf_unread(&b), blen);
    memcpy(qm_msg_body(m), body, blen);
    sl_buf_free(&b);
    return m;
}

/* The priority test below in delivery order: levels 5 (priorities 5..7), 4, ..., 0, publish
 * order within a level. */
#define PRIO_N 12000
static void prio_order(int *order)
{
    int k = 0;
    for (int level = 5; level >= 0; level--)
        for (int i = 0; i < PRIO_N; i++)
            if ((i % 8 < 5 ? i % 8 : 5) == level)
                order[k++] = i;
}

static void prio_body(char *out, size_t cap, int i)
{
    snprintf(out, cap, "message %06d of priority %d", i, i % 8);
}

/* A priority queue pages like the others: beyond the budget each level's tail lives in the
 * store; delivery stays highest level first and publish order within a level; views read
 * the paged levels without bringing them back; a restart hands the levels back paged. */
START_TEST(priority_queue_pages_by_level)
{
    int *order = malloc(PRIO_N * sizeof *order);
    prio_order(order);
    open_store();
    sl_buf a;
    declare_full("prio", 1, 0, 0, int_arg(&a, "x-max-priority", 5));
    sl_buf_free(&a);
    qm_set_memory_budget(256u << 10);
    qm_queue *q = find("prio");
    char body[64];
    for (int i = 0; i < PRIO_N; i++) {
        prio_body(body, sizeof body, i);
        put_msg(q, prio_msg(body, (uint8_t)(i % 8)));
    }
    ck_assert_uint_gt(q->paged_len, PRIO_N / 2);
    ck_assert_uint_lt(qm_memory_bytes(), 1u << 20);
    /* views: the k-th in delivery order, and what follows it, straight from the store */
    for (int k = 0; k < PRIO_N - 1; k += 997) {
        qm_position v1, v2;
        const qm_position *p = qm_queue_peek_view(q, (size_t)k, &v1);
        prio_body(body, sizeof body, order[k]);
        ck_assert_msg(p && body_is(p, body), "peek_view %d", k);
        uint64_t id = p->lookup_id;
        if (p == &v1)
            qm_message_unref(v1.msg);
        const qm_position *n = qm_queue_peek_after(q, id, &v2);
        prio_body(body, sizeof body, order[k + 1]);
        ck_assert_msg(n && body_is(n, body), "peek_after %d", k);
        if (n == &v2)
            qm_message_unref(v2.msg);
    }
    size_t paged = q->paged_len;
    int k = 0;
    for (; k < PRIO_N / 3; k++) {
        qm_position *p = qm_queue_get(q, 0, NULL);
        prio_body(body, sizeof body, order[k]);
        ck_assert_msg(p && body_is(p, body), "message %d before the restart", k);
        qm_position_ack(p);
    }
    ck_assert_uint_lt(q->paged_len, paged);
    restart();
    q = find("prio");
    ck_assert_uint_eq(qm_queue_message_count(q), PRIO_N - k);
    ck_assert_uint_gt(q->paged_len, (PRIO_N - k) / 2);
    for (; k < PRIO_N; k++) {
        qm_position *p = qm_queue_get(q, 0, NULL);
        prio_body(body, sizeof body, order[k]);
        ck_assert_msg(p && body_is(p, body), "message %d after the restart", k);
        qm_position_ack(p);
    }
    ck_assert_uint_eq(qm_queue_message_count(q), 0);
    ck_assert_uint_eq(q->paged_len, 0);
    close_store();
    qm_set_memory_budget(0);
    free(order);
}
END_TEST

/* The body of entry i of the paged-entries test below. */
static void entry_body(char *out, size_t cap, const char *queue, int i)
{
    snprintf(out, cap, "entry %05d of %s", i, queue);
}

/* What the paged-entries test expects of entry i: redelivered (the first 500) and moved away
 * and back (every fifth, move count 2). */
#define ENTRY_REDELIVERED(i) ((i) < 500)
#define ENTRY_MOVES(i) ((i) % 5 == 0 ? 2u : 0u)

/* Fill q (with its subqueue "retry") with n entries of which some are redelivered and some
 * moved; a segment roll puts the moves' enqueue records away from their messages. */
static void fill_entries(qm_queue *q, const char *name, int n)
{
    char body[64];
    for (int i = 0; i < n; i++) {
        entry_body(body, sizeof body, name, i);
        put(q, body);
    }
    commit();
    qm_position *held[500];
    for (int i = 0; i < 500; i++)
        held[i] = get(q);
    for (int i = 0; i < 500; i++)
        qm_position_requeue(held[i]); /* in place, marked delivered */
    st_log_roll(P->msgs);
    qm_queue *sub = qm_queue_subqueue(q, "retry", 5, 1);
    for (int i = 0; i < n; i += 5) {
        uint64_t id = qm_queue_peek(q, (size_t)(i - i / 5))->lookup_id;
        ck_assert_int_eq(qm_move(q, id, sub, NULL), SL_OK);
    }
    st_log_roll(P->msgs);
    while (qm_queue_message_count(sub))
        ck_assert_int_eq(qm_move(sub, qm_queue_peek(sub, 0)->lookup_id, q, NULL), SL_OK);
    commit();
}

/* Check every entry of q, in order, consuming it (acked). */
static void check_entries(qm_queue *q, const char *name, int n)
{
    char body[64];
    for (int i = 0; i < n; i++) {
        qm_position *p = get(q);
        entry_body(body, sizeof body, name, i);
        ck_assert_msg(body_is(p, body), "%s entry %d: body", name, i);
        ck_assert_msg(p->redelivered == ENTRY_REDELIVERED(i), "%s entry %d: redelivered %d", name,
                      i, p->redelivered);
        ck_assert_msg(p->move_count == ENTRY_MOVES(i), "%s entry %d: move count %u", name, i,
                      (unsigned)p->move_count);
        qm_position_ack(p);
    }
    ck_assert_uint_eq(qm_queue_message_count(q), 0);
}

/* A paged entry is kept in 24 bytes; one that was redelivered or moved, or whose enqueue
 * record is in another segment than its message, keeps the rest in its tail's side table.
 * Each comes back whole: in a view, after a TIDY that rewrites every entry's location, after
 * a restart, and through a purge's graveyard; and no segment reference is lost or kept (the
 * store ends in its newest segments). */
START_TEST(paged_entries_keep_moves_redeliveries_and_segments)
{
    enum { NE = 3000 };
    OPT.segment_size = 16u << 10;
    open_store();
    qm_queue *q = declare("q");
    qm_queue *gone = declare("gone");
    fill_entries(q, "q", NE);
    fill_entries(gone, "gone", NE);
    close_store();
    qm_set_memory_budget(64u << 10); /* recovery reads back 8 KiB: the rest stays paged */
    open_store();
    q = find("q");
    gone = find("gone");
    ck_assert_uint_gt(q->paged_len, NE - 200);
    ck_assert_uint_gt(gone->paged_len, NE - 200);
    /* views read paged entries from the store with their flags */
    char body[64];
    for (int i = 0; i < NE; i += 499) {
        qm_position v;
        const qm_position *p = qm_queue_peek_view(q, (size_t)i, &v);
        entry_body(body, sizeof body, "q", i);
        ck_assert_msg(body_is(p, body), "view %d", i);
        ck_assert_int_eq(p->redelivered, ENTRY_REDELIVERED(i));
        ck_assert_uint_eq(p->move_count, ENTRY_MOVES(i));
        if (p == &v)
            qm_message_unref(v.msg);
    }
    persist_tidy_result r;
    persist_tidy_full(P, &r);
    ck_assert_uint_ge(r.records_copied, 1);
    restart();
    q = find("q");
    gone = find("gone");
    ck_assert_uint_gt(q->paged_len, NE - 200);
    ck_assert_uint_eq(qm_queue_purge(gone), NE);
    check_entries(q, "q", NE);
    commit();
    persist_tidy_full(P, &r);
    persist_stats st;
    persist_get_stats(P, &st);
    ck_assert_uint_le(st.msgs_segments, 2);
    restart();
    ck_assert_uint_eq(qm_queue_message_count(find("q")), 0);
    ck_assert_uint_eq(qm_queue_message_count(find("gone")), 0);
    close_store();
    qm_set_memory_budget(0);
}
END_TEST

/* Wait (at most 5 s) for the batch on the sync thread and apply it. */
static void sync_wait_done(void)
{
    for (int i = 0; i < 500 && persist_sync_busy(P); i++) {
        struct pollfd pfd = {.fd = persist_sync_fd(P), .events = POLLIN};
        poll(&pfd, 1, 10);
        ck_assert_int_ge(persist_sync_done(P, err, sizeof err), 0);
    }
    ck_assert_msg(!persist_sync_busy(P), "the sync thread did not finish its batch");
}

/* A message with a lazy ticket: the kick (forced or not) leaves its sync for later, and the
 * kick once the pace has run out starts it. */
static void paced_until_due(qm_queue *q, const char *body, int force)
{
    uint64_t mark = persist_mark(P);
    put(q, body);
    uint64_t lazy = persist_ticket_since_lazy(P, mark);
    ck_assert_int_eq(persist_kick(P, force, err, sizeof err), 0);
    uint64_t due = persist_pace_due(P);
    ck_assert_uint_gt(due, 0);
    ck_assert_int_eq(persist_sync_busy(P), 0);
    ck_assert_uint_lt(persist_durable(P), lazy);
    while (sl_now_us() < due)
        usleep(10000);
    ck_assert_int_eq(persist_kick(P, 0, err, sizeof err), 0);
    sync_wait_done();
    ck_assert_uint_ge(persist_durable(P), lazy);
}

/* A message with a lazy ticket whose sync is not paced: the kick starts it at once. */
static void synced_at_once(qm_queue *q, const char *body)
{
    uint64_t mark = persist_mark(P);
    put(q, body);
    uint64_t lazy = persist_ticket_since_lazy(P, mark);
    ck_assert_int_eq(persist_kick(P, 0, err, sizeof err), 0);
    ck_assert_uint_eq(persist_pace_due(P), 0);
    sync_wait_done();
    ck_assert_uint_ge(persist_durable(P), lazy);
}

/* Sync pacing: a sync only pipelined confirms (lazy tickets) wait for starts no sooner than
 * sync_pace_us after the last one; any other ticket, a forced kick or the pace running out
 * starts it at once; with sync_pace_us = 0 nothing waits. */
START_TEST(sync_pacing_waits_only_for_lazy_tickets)
{
    OPT = (persist_options){.no_sync = 1, .sync_thread = 1, .sync_pace_us = 300000};
    open_store();
    qm_queue *q = declare("paced");
    put(q, "first");
    uint64_t t = persist_ticket(P);
    ck_assert_int_eq(persist_kick(P, 0, err, sizeof err), 0);
    sync_wait_done();
    ck_assert_uint_ge(persist_durable(P), t); /* the first sync is never paced */

    /* only a lazy ticket: the sync waits, the due time is the last start + the pace */
    uint64_t mark = persist_mark(P);
    put(q, "lazy");
    uint64_t lazy = persist_ticket_since_lazy(P, mark);
    ck_assert_uint_gt(lazy, persist_durable(P));
    /* a delivery in the same generation: its mark makes the paced batch write now, and
     * written is not synced: what waits for "lazy" (confirms, node_durable) still waits */
    (void)get(q);
    uint64_t before = sl_now_us();
    ck_assert_int_eq(persist_kick(P, 0, err, sizeof err), 1);
    ck_assert_int_eq(persist_sync_busy(P), 0);
    ck_assert_uint_gt(persist_pace_due(P), before);
    ck_assert_uint_lt(persist_durable(P), lazy);
    ck_assert_uint_lt(persist_done(P), lazy);

    /* an eager ticket for the same generation: the sync starts now */
    ck_assert_uint_eq(persist_ticket(P), lazy);
    ck_assert_int_eq(persist_kick(P, 0, err, sizeof err), 0);
    ck_assert_uint_eq(persist_pace_due(P), 0);
    sync_wait_done();
    ck_assert_uint_ge(persist_durable(P), lazy);
    ck_assert_uint_ge(persist_done(P), lazy);

    /* lazy, then hastened (its waiter's input went idle): the sync starts now; a hasten
     * for an older generation changes nothing */
    persist_hasten(P, lazy);
    mark = persist_mark(P);
    put(q, "hastened");
    uint64_t lazy2 = persist_ticket_since_lazy(P, mark);
    ck_assert_int_eq(persist_kick(P, 0, err, sizeof err), 0);
    ck_assert_uint_gt(persist_pace_due(P), 0); /* paced so far */
    persist_hasten(P, lazy2);
    ck_assert_int_eq(persist_kick(P, 0, err, sizeof err), 0);
    ck_assert_uint_eq(persist_pace_due(P), 0);
    sync_wait_done();
    ck_assert_uint_ge(persist_durable(P), lazy2);

    /* lazy again: paced until due, then the kick after it syncs; and the same after a
     * forced kick (the once-a-second sync), which is paced all the same */
    paced_until_due(q, "lazy2", 0);
    paced_until_due(q, "lazy3", 1);

    /* lazy, but 64 KiB or more since the last sync started: not paced */
    static char big[70 * 1024];
    memset(big, 'b', sizeof big - 1);
    synced_at_once(q, big);
    restart();
    ck_assert_uint_eq(qm_queue_message_count(find("paced")), 6);
    close_store();

    /* sync_pace_us = 0: a lazy ticket's sync starts at once */
    OPT = (persist_options){.no_sync = 1, .sync_thread = 1};
    open_store();
    q = find("paced");
    put(q, "x");
    persist_ticket(P);
    ck_assert_int_eq(persist_kick(P, 0, err, sizeof err), 0);
    sync_wait_done();
    synced_at_once(q, "y");
    close_store();
}
END_TEST

static Suite *persist_suite(void)
{
    Suite *s = suite_create("persist");
    TCase *tc = tcase_create("persist");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, durable_messages_survive);
    tcase_add_test(tc, transient_things_are_not_stored);
    tcase_add_test(tc, delivered_unacked_comes_back_redelivered);
    tcase_add_test(tc, quorum_delivery_counts_survive);
    tcase_add_test(tc, acked_does_not_come_back);
    tcase_add_test(tc, tx_acks_and_enqueues_apply_together);
    tcase_add_test(tc, purged_never_comes_back);
    tcase_add_test(tc, delete_then_redeclare_starts_empty);
    tcase_add_test(tc, delete_restart_redeclare_starts_empty);
    tcase_add_test(tc, moved_through_a_dead_incarnation_survives);
    tcase_add_test(tc, oversized_message_is_refused_without_a_stale_location);
    tcase_add_test(tc, tx_without_end_is_dropped);
    tcase_add_test(tc, records_after_dropped_tx_survive);
    tcase_add_test(tc, dropped_tx_stays_dropped_after_tidy);
    tcase_add_test(tc, tidy_keeps_tx_ends_and_aborts_with_their_start);
    tcase_add_test(tc, corrupt_middle_record_refuses_to_start);
    tcase_add_loop_test(tc, ids_never_handed_out_stop_recovery, 0, 5);
    tcase_add_test(tc, torn_tail_is_dropped);
    tcase_add_test(tc, exchanges_and_bindings_survive);
    tcase_add_test(tc, tidy_frees_dead_segments_only);
    tcase_add_test(tc, reap_frees_unreferenced_segments_only);
    tcase_add_test(tc, tidy_never_loses_live_messages);
    tcase_add_test(tc, tidy_compacts_behind_an_old_message);
    tcase_add_test(tc, tidy_keeps_what_later_records_depend_on);
    tcase_add_test(tc, tidy_copies_never_outlive_what_they_replace);
    tcase_add_loop_test(tc, tidy_random_traffic_loses_nothing, 0, 6);
    tcase_add_test(tc, delivery_and_ack_runs);
    tcase_add_loop_test(tc, run_records_out_of_bounds_stop_recovery, 0, 3);
    tcase_add_test(tc, golden_data_dir);
    tcase_add_test(tc, golden_v1_data_dir);
    tcase_add_test(tc, ttl_deadline_survives_restart);
    tcase_add_test(tc, recovery_finds_far_message_records);
    tcase_add_test(tc, eod_state_is_per_sender_sequence_and_queue);
    tcase_add_test(tc, recovery_reads_back_only_the_head);
    tcase_add_test(tc, priority_queue_pages_by_level);
    tcase_add_test(tc, paged_entries_keep_moves_redeliveries_and_segments);
    tcase_add_test(tc, sync_pacing_waits_only_for_lazy_tickets);
    suite_add_tcase(s, tc);
    return s;
}

/* Run by hand only: writes the fixture (inside a Check runner so the recipe's checks work). */
static const char *golden_out;
START_TEST(write_golden)
{
    golden_recipe(golden_out);
}
END_TEST

int main(int argc, char **argv)
{
    Suite *s;
    if (argc == 3 && !strcmp(argv[1], "--write-golden")) {
        /* build/tests/test_persist --write-golden tests/unit/files/persist/golden (the directory
         * must not exist yet) */
        struct stat st;
        if (stat(argv[2], &st) == 0) {
            fprintf(stderr, "%s exists; remove it first\n", argv[2]);
            return 2;
        }
        sl_log_min_level = SL_LOG_ERROR + 1;
        golden_out = argv[2];
        s = suite_create("write-golden");
        TCase *tc = tcase_create("write-golden");
        tcase_add_test(tc, write_golden);
        suite_add_tcase(s, tc);
    } else {
        s = persist_suite();
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
