/* fuzz_persist.c - libFuzzer target for record decoding and recovery (src/persist/recover.c).
 *
 * The input is a sequence of msgs-log records, each (type:u8, len:u16 little-endian, payload);
 * a short last payload is taken as it is. They are written with the store API (st_log_append,
 * 512-byte segments, so they spread over several files) into msgs/ of a per-process temp data
 * directory whose meta/ is a fixed snapshot written once through persist itself:
 *
 *     incarnations 1-3  the vhost's system queues (sluice.system.deadletter, ...journal,
 *                       ...xact-deadletter)
 *     4  q   durable        5  p   durable        6  q;poison (subqueue of q)
 *     7  qq  durable, x-queue-type quorum (delivery counts: R_QDELIVER, R_ENQ's EF_DCOUNT)
 *     exchange x (direct, durable) bound to q with key "k"
 *
 * Then, on a fresh node each time:
 *   1. persist_open: it may refuse (bad record) but must not crash, leak or hang;
 *   2. if it opened, close and open again: the second recovery must succeed and rebuild the
 *      same messages (nothing was appended, only meta was rewritten as a snapshot);
 *   3. get and ack every message of every queue, TIDY, close, open a third time: it must
 *      succeed and every queue must be empty (this is what catches records of a dropped
 *      transaction that apply later, or acks taken for part of one).
 * Any difference aborts with the state printed.
 *
 * Seeds: FUZZ_PERSIST_WRITE_SEEDS=DIR ./fuzz_persist -runs=0 writes the committed corpus
 * (tests/fuzz/corpus/persist/) from the encoders below and exits.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amqp/method.h"
#include "core/buf.h"
#include "core/log.h"
#include "persist/persist.h"
#include "persist/records.h"
#include "qm/qm.h"
#include "store/log.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define SEGMENT_SIZE 512
enum { INC_Q = 4, INC_P = 5, INC_POISON = 6, INC_QQ = 7 };

static char dir[64];

/* The fixed meta/ files, captured once. */
typedef struct file {
    char name[64];
    uint8_t *data;
    size_t len;
} file;
static file meta_files[8];
static size_t n_meta_files;

/* ------------------------------------------------------------------ files */

static void rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    char sub[512];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        if (de->d_type == DT_DIR) {
            rm_tree(sub);
            rmdir(sub);
        } else {
            unlink(sub);
        }
    }
    closedir(d);
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    CHECK(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)len + 1);
    CHECK(p && fread(p, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

static void spit(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f);
    CHECK(n == 0 || fwrite(p, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

/* ------------------------------------------------------------------ the node */

static const persist_options OPTS = {.segment_size = SEGMENT_SIZE, .no_sync = 1};

typedef struct store {
    qm_node *node;
    qm_vhost *vh;
    persist *p;
} store;

static int store_open(store *s, char *err, size_t errlen)
{
    s->node = qm_node_new("fuzz");
    s->vh = qm_vhost_create(s->node, "/");
    s->p = persist_open(dir, s->node, &OPTS, err, errlen);
    if (!s->p) {
        qm_node_free(s->node);
        return -1;
    }
    return 0;
}

static void store_close(store *s)
{
    persist_close(s->p);
    qm_node_free(s->node);
}

/* Calls fn on every queue and subqueue of the vhost. */
static void each_queue(store *s, void (*fn)(qm_queue *q, void *ctx), void *ctx)
{
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(s->vh->queues, &it, &k, &kl, &v)) {
        qm_queue *q = v;
        fn(q, ctx);
        size_t sit = 0;
        void *sv;
        while (q->subqueues && sl_map_next(q->subqueues, &sit, &k, &kl, &sv))
            fn(sv, ctx);
    }
}

/* An order-independent fingerprint of what the queues hold (names, lookup ids in order,
 * sizes, redelivered flags), so two recoveries can be compared. */
typedef struct print {
    uint64_t sum, messages;
} print;

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static void print_queue(qm_queue *q, void *ctx)
{
    print *pr = ctx;
    uint64_t h = 1469598103934665603ull;
    for (const char *c = q->name; *c; c++)
        h = mix(h, (uint8_t)*c);
    h = mix(h, q->incarnation);
    for (size_t i = 0; i < q->n_ready; i++) {
        qm_position *pos = qm_queue_peek(q, i);
        CHECK(pos);
        h = mix(h, pos->lookup_id);
        h = mix(h, pos->msg->body_len);
        h = mix(h, pos->redelivered);
        h = mix(h, pos->move_count);
        h = mix(h, qm_dcount_get(q, pos->lookup_id));
    }
    pr->sum += h;
    pr->messages += qm_queue_message_count(q);
}

static print fingerprint(store *s)
{
    print pr = {0, 0};
    each_queue(s, print_queue, &pr);
    return pr;
}

static void consume_queue(qm_queue *q, void *ctx)
{
    uint64_t remaining;
    qm_position *pos;
    while ((pos = qm_queue_get(q, 0, &remaining)))
        qm_position_ack(pos);
}

/* ------------------------------------------------------------------ setup */

/* meta/: what persist itself writes for the fixed definitions. */
static void make_meta(void)
{
    char err[512], path[512];
    rm_tree(dir);
    store s;
    CHECK(store_open(&s, err, sizeof err) == 0);
    qm_queue *q = NULL, *p = NULL;
    /* empty tables point somewhere: NULL + 0 in amqp_reader_make is UB to clang's sanitizer */
    amqp_bytes none = {(const uint8_t *)"", 0};
    qm_queue_decl dq = {"q", 1, 1, 0, 0, NULL, none, 0};
    qm_queue_decl dp = {"p", 1, 1, 0, 0, NULL, none, 0};
    CHECK(qm_queue_declare(s.vh, &dq, &q, NULL, err, sizeof err) == SL_OK);
    CHECK(qm_queue_declare(s.vh, &dp, &p, NULL, err, sizeof err) == SL_OK);
    qm_queue *poison = qm_queue_subqueue(q, "poison", 6, 1);
    CHECK(q->incarnation == INC_Q && p->incarnation == INC_P && poison->incarnation == INC_POISON);
    static const uint8_t quorum_args[] = "\x0cx-queue-typeS\0\0\0\x06quorum";
    qm_queue_decl dqq = {"qq", 2, 1, 0, 0, NULL, {quorum_args, sizeof quorum_args - 1}, 0};
    qm_queue *qq = NULL;
    CHECK(qm_queue_declare(s.vh, &dqq, &qq, NULL, err, sizeof err) == SL_OK);
    CHECK(qq->incarnation == INC_QQ && qq->args.quorum);
    qm_exchange_decl dx = {"x", 1, QM_EX_DIRECT, 1, 0, 0, none};
    qm_exchange *x;
    CHECK(qm_exchange_declare(s.vh, &dx, &x, err, sizeof err) == SL_OK);
    CHECK(qm_bind_queue(x, q, AMQP_BYTES("k"), none, err, sizeof err) == SL_OK);
    CHECK(persist_commit(s.p, err, sizeof err) == 0);
    store_close(&s);

    snprintf(path, sizeof path, "%s/meta", dir);
    DIR *d = opendir(path);
    CHECK(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        CHECK(n_meta_files < sizeof meta_files / sizeof meta_files[0]);
        file *f = &meta_files[n_meta_files++];
        snprintf(f->name, sizeof f->name, "%s", de->d_name);
        snprintf(path, sizeof path, "%s/meta/%s", dir, de->d_name);
        f->data = slurp(path, &f->len);
    }
    closedir(d);
    CHECK(n_meta_files > 0);
}

static int no_replay(void *ctx, uint64_t seq, uint8_t type, const uint8_t *p, size_t len,
                     st_loc loc)
{
    return 0;
}

/* Lay out meta/ and msgs/ for one input. */
static void lay_out(const uint8_t *data, size_t size)
{
    char path[512], err[512];
    rm_tree(dir);
    snprintf(path, sizeof path, "%s/meta", dir);
    CHECK(mkdir(path, 0755) == 0);
    for (size_t i = 0; i < n_meta_files; i++) {
        snprintf(path, sizeof path, "%s/meta/%s", dir, meta_files[i].name);
        spit(path, meta_files[i].data, meta_files[i].len);
    }
    snprintf(path, sizeof path, "%s/msgs", dir);
    st_log_options o = {.segment_size = SEGMENT_SIZE, .no_sync = 1};
    st_log *l = st_log_open(path, &o, no_replay, NULL, err, sizeof err);
    CHECK(l);
    size_t off = 0;
    while (off < size) {
        uint8_t type = data[off++];
        size_t len = 0;
        if (off < size)
            len = data[off++];
        if (off < size)
            len |= (size_t)data[off++] << 8;
        if (len > size - off)
            len = size - off;
        CHECK(st_log_append(l, type, data + off, len, NULL) != 0);
        off += len;
    }
    CHECK(st_log_commit(l, NULL) == 0);
    st_log_close(l);
}

/* ------------------------------------------------------------------ seeds */

typedef struct seed {
    sl_buf b;
    sl_buf rec;
    uint8_t tx; /* R_IN_TX while writing a transaction's records, as the writer marks them */
} seed;

static void seed_rec(seed *s, uint8_t type)
{
    CHECK(s->rec.len <= 65535);
    if (type != R_MSG && type < R_TX_BEGIN)
        type |= s->tx;
    rec_u8(&s->b, type);
    rec_u8(&s->b, (uint8_t)s->rec.len);
    rec_u8(&s->b, (uint8_t)(s->rec.len >> 8));
    sl_buf_append(&s->b, s->rec.data, s->rec.len);
    s->rec.len = 0;
}

static void seed_msg(seed *s, uint64_t id, int with_props, size_t body_len)
{
    rec_u64(&s->rec, id);
    rec_s16(&s->rec, "x", 1);
    rec_s16(&s->rec, "k", 1);
    sl_buf props;
    sl_buf_init(&props);
    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    p.flags = AMQP_P_DELIVERY_MODE;
    p.delivery_mode = 2;
    if (with_props) {
        p.flags |= AMQP_P_MESSAGE_ID | AMQP_P_PRIORITY | AMQP_P_EXPIRATION;
        p.message_id = AMQP_BYTES("m-1");
        p.priority = 3;
        p.expiration = AMQP_BYTES("60000");
    }
    amqp_props_encode(&props, &p);
    rec_b32(&s->rec, sl_buf_head(&props), sl_buf_unread(&props));
    sl_buf_free(&props);
    for (size_t i = 0; i < body_len; i++)
        rec_u8(&s->rec, (uint8_t)('a' + i % 26));
    seed_rec(s, R_MSG);
}

static void seed_enq(seed *s, uint64_t inc, uint64_t lookup, uint64_t msg, uint8_t flags)
{
    rec_u64(&s->rec, inc);
    rec_u64(&s->rec, lookup);
    rec_u64(&s->rec, msg);
    rec_u32(&s->rec, 0);
    rec_u8(&s->rec, flags);
    seed_rec(s, R_ENQ);
}

static void seed_pos(seed *s, uint8_t type, uint64_t inc, uint64_t lookup)
{
    rec_u64(&s->rec, inc);
    rec_u64(&s->rec, lookup);
    seed_rec(s, type);
}

static void seed_write(seed *s, const char *out, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", out, name);
    spit(path, s->b.data, s->b.len);
    s->b.len = 0;
}

static void write_seeds(const char *out)
{
    seed s = {.tx = 0};
    sl_buf_init(&s.b);
    sl_buf_init(&s.rec);
    /* messages, a delivery mark and an ack */
    seed_msg(&s, 1, 1, 5);
    seed_enq(&s, INC_Q, 1, 1, 0);
    seed_msg(&s, 2, 0, 3);
    seed_enq(&s, INC_Q, 2, 2, 0);
    seed_msg(&s, 3, 0, 0);
    seed_enq(&s, INC_Q, 3, 3, EF_REDELIVERED);
    seed_pos(&s, R_DELIVER, INC_Q, 1);
    seed_pos(&s, R_DEQ, INC_Q, 2);
    seed_write(&s, out, "enq_deliver_deq");
    /* the same consumed as runs: three delivered, the first two acked */
    for (uint64_t i = 1; i <= 3; i++) {
        seed_msg(&s, i, 0, 4);
        seed_enq(&s, INC_Q, i, i, 0);
    }
    rec_u64(&s.rec, INC_Q);
    rec_u64(&s.rec, 1);
    rec_u32(&s.rec, 3);
    seed_rec(&s, R_DELIVER_RUN);
    rec_u64(&s.rec, INC_Q);
    rec_u64(&s.rec, 1);
    rec_u32(&s.rec, 2);
    seed_rec(&s, R_DEQ_RUN);
    seed_write(&s, out, "enq_deliver_deq_runs");
    /* a quorum queue's counts: delivered at 0, then at 2 (held at the stop: 3); one copied by
     * TIDY with its count (EF_DCOUNT) and delivered since; one acked after its count */
    for (uint64_t i = 1; i <= 3; i++)
        seed_msg(&s, i, 0, 4);
    seed_enq(&s, INC_QQ, 1, 1, 0);
    seed_pos(&s, R_DELIVER, INC_QQ, 1);
    rec_u64(&s.rec, INC_QQ);
    rec_u64(&s.rec, 1);
    rec_u32(&s.rec, 2);
    seed_rec(&s, R_QDELIVER);
    rec_u64(&s.rec, INC_QQ);
    rec_u64(&s.rec, 2);
    rec_u64(&s.rec, 2);
    rec_u32(&s.rec, 0);
    rec_u8(&s.rec, EF_REDELIVERED | EF_DCOUNT);
    rec_u32(&s.rec, 5);
    seed_rec(&s, R_ENQ);
    seed_enq(&s, INC_QQ, 3, 3, 0);
    rec_u64(&s.rec, INC_QQ);
    rec_u64(&s.rec, 3);
    rec_u32(&s.rec, 1);
    seed_rec(&s, R_QDELIVER);
    seed_pos(&s, R_DEQ, INC_QQ, 3);
    seed_write(&s, out, "quorum_counts");
    /* a stream's tracked references (R_STREAM_TRACK), the later one winning; on a queue that
     * is no stream they are ignored (the fuzzer varies the rest) */
    for (int i = 0; i < 2; i++) {
        rec_u64(&s.rec, INC_Q);
        rec_u8(&s.rec, i ? 'p' : 'o');
        rec_u64(&s.rec, 7 + (uint64_t)i);
        rec_u64(&s.rec, i ? 9 : 0);
        rec_s16(&s.rec, "ref", 3);
        seed_rec(&s, R_STREAM_TRACK);
    }
    seed_write(&s, out, "stream_track");
    /* one message in two queues, a purge of one of them, a move into a subqueue */
    seed_msg(&s, 1, 0, 10);
    seed_enq(&s, INC_Q, 1, 1, 0);
    seed_enq(&s, INC_P, 2, 1, 0);
    seed_msg(&s, 2, 0, 10);
    seed_enq(&s, INC_P, 3, 2, 0);
    rec_u64(&s.rec, INC_P);
    seed_rec(&s, R_PURGE);
    seed_msg(&s, 3, 0, 10);
    seed_enq(&s, INC_P, 4, 3, 0);
    rec_u64(&s.rec, INC_Q);
    rec_u64(&s.rec, 1);
    rec_u64(&s.rec, INC_POISON);
    rec_u32(&s.rec, 1);
    seed_rec(&s, R_MOVE);
    seed_write(&s, out, "shared_purge_move");
    /* moves through an incarnation that is gone (99: not in meta) and back, one of them with
     * a new TTL deadline (R_MOVE_TTL), one clearing it */
    seed_msg(&s, 1, 0, 6);
    seed_enq(&s, INC_Q, 1, 1, 0);
    for (int i = 0; i < 3; i++) {
        static const uint64_t from[] = {INC_Q, 99, INC_POISON}, to[] = {99, INC_POISON, INC_Q};
        rec_u64(&s.rec, from[i]);
        rec_u64(&s.rec, 1);
        rec_u64(&s.rec, to[i]);
        rec_u32(&s.rec, (uint32_t)i + 1);
        if (i == 0) {
            seed_rec(&s, R_MOVE);
            continue;
        }
        rec_u8(&s.rec, i == 1 ? EF_EXPIRES : 0);
        if (i == 1)
            rec_u64(&s.rec, 4102444800000ull); /* 2100-01-01 */
        seed_rec(&s, R_MOVE_TTL);
    }
    seed_write(&s, out, "move_through_dead_incarnation_ttl");
    /* a complete transaction (an ack and an enqueue), then one cut before its end */
    for (int complete = 1; complete >= 0; complete--) {
        seed_msg(&s, 1, 0, 4);
        seed_enq(&s, INC_Q, 1, 1, 0);
        s.tx = R_IN_TX;
        seed_pos(&s, R_DEQ, INC_Q, 1);
        seed_msg(&s, 2, 0, 4);
        seed_enq(&s, INC_Q, 2, 2, 0);
        s.tx = 0;
        if (complete)
            seed_rec(&s, R_TX_END);
        seed_write(&s, out, complete ? "tx_complete" : "tx_without_end");
    }
    /* cut before its end with its first record the last of the first segment (16 + 398 + 46
     * + 33 bytes; the next record rolls over): TIDY then deletes that segment after step 3 */
    seed_msg(&s, 1, 0, 360);
    seed_enq(&s, INC_Q, 1, 1, 0);
    s.tx = R_IN_TX;
    seed_pos(&s, R_DEQ, INC_Q, 1);
    seed_msg(&s, 2, 0, 4);
    seed_enq(&s, INC_Q, 2, 2, 0);
    s.tx = 0;
    seed_write(&s, out, "tx_without_end_split");
    /* ... as recovery leaves it: closed by R_TX_ABORT, then more records */
    seed_msg(&s, 1, 0, 4);
    seed_enq(&s, INC_Q, 1, 1, 0);
    s.tx = R_IN_TX;
    seed_pos(&s, R_DEQ, INC_Q, 1);
    seed_msg(&s, 2, 0, 4);
    seed_enq(&s, INC_Q, 2, 2, 0);
    s.tx = 0;
    seed_rec(&s, R_TX_ABORT);
    seed_msg(&s, 3, 0, 4);
    seed_enq(&s, INC_Q, 3, 3, 0);
    seed_pos(&s, R_DEQ, INC_Q, 1);
    seed_write(&s, out, "tx_aborted");
    /* the older bracketing format: R_TX_BEGIN ... R_TX_END around unmarked records */
    seed_msg(&s, 1, 0, 4);
    seed_enq(&s, INC_Q, 1, 1, 0);
    seed_rec(&s, R_TX_BEGIN);
    seed_pos(&s, R_DEQ, INC_Q, 1);
    seed_rec(&s, R_TX_END);
    seed_write(&s, out, "tx_legacy_begin");
    /* dead incarnation, system queue, message reused by id, big body over segments */
    seed_msg(&s, 7, 1, 2000);
    seed_enq(&s, 99, 1, 7, 0);
    seed_enq(&s, 1, 2, 7, 0);
    seed_msg(&s, 7, 0, 1);
    seed_enq(&s, INC_Q, 3, 7, 0);
    seed_enq(&s, INC_Q, 3, 7, 0);
    seed_write(&s, out, "dead_system_reuse_big");
    /* malformed: a short enqueue record, and an unknown type */
    seed_msg(&s, 1, 0, 1);
    rec_u64(&s.rec, INC_Q);
    rec_u32(&s.rec, 1);
    seed_rec(&s, R_ENQ);
    seed_write(&s, out, "short_enqueue");
    rec_u8(&s.rec, 0);
    seed_rec(&s, 200);
    seed_write(&s, out, "unknown_type");
    sl_buf_free(&s.b);
    sl_buf_free(&s.rec);
}

/* ------------------------------------------------------------------ the target */

static void remove_dir(void)
{
    rm_tree(dir);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    sl_log_min_level = SL_LOG_ERROR + 1; /* recovery errors are the normal case here */
    strcpy(dir, "/tmp/fuzz-persist-XXXXXX");
    CHECK(mkdtemp(dir));
    atexit(remove_dir);
    make_meta();
    const char *out = getenv("FUZZ_PERSIST_WRITE_SEEDS");
    if (out) {
        write_seeds(out);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    lay_out(data, size);

    /* 1. recovery may refuse */
    store s;
    if (store_open(&s, err, sizeof err) < 0) {
        CHECK(err[0] != 0);
        return 0;
    }
    print first = fingerprint(&s);
    store_close(&s);

    /* 2. and if it accepted, it accepts its own result again, unchanged */
    if (store_open(&s, err, sizeof err) < 0) {
        fprintf(stderr, "second recovery failed: %s\n", err);
        abort();
    }
    print second = fingerprint(&s);
    if (first.sum != second.sum || first.messages != second.messages) {
        fprintf(stderr, "second recovery differs: %llu -> %llu messages\n",
                (unsigned long long)first.messages, (unsigned long long)second.messages);
        abort();
    }

    /* 3. consume everything: nothing may come back */
    each_queue(&s, consume_queue, NULL);
    uint64_t segs, bytes;
    persist_tidy(s.p, &segs, &bytes);
    store_close(&s);
    if (store_open(&s, err, sizeof err) < 0) {
        fprintf(stderr, "recovery after consuming everything failed: %s\n", err);
        abort();
    }
    print third = fingerprint(&s);
    if (third.messages != 0) {
        fprintf(stderr, "%llu of %llu acked messages came back\n",
                (unsigned long long)third.messages, (unsigned long long)first.messages);
        abort();
    }
    store_close(&s);
    return 0;
}
