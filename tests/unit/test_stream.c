/* test_stream.c - the replication stream's threads (src/cluster/stream.c) over loopback TCP,
 * with an in-memory log standing in for the data directory's mirror: groups reach every
 * follower in order and byte for byte; the released index waits for every ISR member; a
 * follower that dies leaves the ISR through a proposal (answered here as etcd would) and
 * catches up and comes back when restarted from its saved state; a follower whose next group
 * is no longer kept, or whose log diverges, asks for a full copy.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cluster/auth.h"
#include "cluster/stream.h"
#include "cluster/wire.h"
#include "core/buf.h"
#include "core/mem.h"

#define MAXG 4096

/* ---- the leader's memory log ---- */
typedef struct mlog {
    pthread_mutex_t mu;
    uint8_t *g[MAXG + 1];
    size_t len[MAXG + 1];
    uint64_t epoch[MAXG + 1];
    uint64_t last, first_kept;
    /* ISR proposals, answered by the test */
    int proposals;
    char proposed[CL_REPL_MAX_NODES][64];
    size_t n_proposed;
    cl_stream_server *srv;
} mlog;

static int ml_group(void *ctx, uint64_t idx, uint8_t **bytes, size_t *len, uint64_t *epoch)
{
    mlog *m = ctx;
    pthread_mutex_lock(&m->mu);
    int rc = -1;
    if (idx >= m->first_kept && idx <= m->last) {
        *bytes = sl_xmalloc(m->len[idx]);
        memcpy(*bytes, m->g[idx], m->len[idx]);
        *len = m->len[idx];
        *epoch = m->epoch[idx];
        rc = 0;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static void ml_isr(void *ctx, const char *const *names, size_t n)
{
    mlog *m = ctx;
    pthread_mutex_lock(&m->mu);
    m->proposals++;
    m->n_proposed = n;
    for (size_t i = 0; i < n; i++)
        snprintf(m->proposed[i], sizeof m->proposed[i], "%s", names[i]);
    pthread_mutex_unlock(&m->mu);
    /* etcd said yes (the epoch compared equal) */
    cl_stream_server_isr_result(m->srv, CL_RL_ISR_DONE);
}

/* Group last + 1 into the log, not announced to the server: its idx and length. */
static uint64_t ml_put(mlog *m, uint64_t epoch, size_t *lenp)
{
    pthread_mutex_lock(&m->mu);
    uint64_t idx = ++m->last;
    size_t len = 1 + idx % 97;
    m->g[idx] = sl_xmalloc(len);
    for (size_t i = 0; i < len; i++)
        m->g[idx][i] = (uint8_t)(idx * 31 + i);
    m->len[idx] = len;
    m->epoch[idx] = epoch;
    pthread_mutex_unlock(&m->mu);
    *lenp = len;
    return idx;
}

static void ml_append(mlog *m, uint64_t epoch)
{
    pthread_mutex_lock(&m->mu);
    uint64_t idx = ++m->last;
    size_t len = 1 + idx % 97;
    m->g[idx] = sl_xmalloc(len);
    for (size_t i = 0; i < len; i++)
        m->g[idx][i] = (uint8_t)(idx * 31 + i);
    m->len[idx] = len;
    m->epoch[idx] = epoch;
    pthread_mutex_unlock(&m->mu);
    cl_stream_server_append(m->srv, idx, len);
    cl_stream_server_durable(m->srv, idx);
}

/* A full copy of the memory log: one file, "log", of every group's bytes up to the last. */
typedef struct msnap {
    uint8_t *bytes;
    size_t len;
} msnap;

static void *ml_snap_open(void *ctx, uint64_t *snap_idx)
{
    mlog *m = ctx;
    msnap *s = sl_xcalloc(1, sizeof *s);
    pthread_mutex_lock(&m->mu);
    for (uint64_t i = 1; i <= m->last; i++) {
        s->bytes = sl_xrealloc(s->bytes, s->len + m->len[i]);
        memcpy(s->bytes + s->len, m->g[i], m->len[i]);
        s->len += m->len[i];
    }
    *snap_idx = m->last;
    pthread_mutex_unlock(&m->mu);
    return s;
}
static size_t ml_snap_count(void *snap)
{
    (void)snap;
    return 1;
}
static const char *ml_snap_name(void *snap, size_t i, uint64_t *size)
{
    *size = ((msnap *)snap)->len;
    return "log";
}
static long ml_snap_read(void *snap, size_t i, uint64_t off, void *buf, size_t len)
{
    msnap *s = snap;
    size_t n = off >= s->len ? 0 : s->len - off < len ? s->len - off : len;
    memcpy(buf, s->bytes + off, n);
    return (long)n;
}
static void ml_snap_free(void *snap)
{
    sl_free(((msnap *)snap)->bytes);
    sl_free(snap);
}

static void ml_free(mlog *m)
{
    for (uint64_t i = 1; i <= m->last; i++)
        sl_free(m->g[i]);
}

/* ---- a follower's memory log ---- */
typedef struct flog {
    pthread_mutex_t mu;
    uint64_t applied; /* groups applied, in order */
    uint64_t synced;  /* applied when sync was last called: what the follower may ACK */
    uint64_t saved;
    int saves; /* calls of save: once per quiet moment of the stream, not per batch */
    int bad;   /* a group out of order or with the wrong bytes */
    cl_repl_epochs saved_hist;
    uint64_t copied; /* bytes of full copies written */
    int copies;
    int lost;           /* calls of the lost hook (issue 46) */
    char lost_addr[64]; /* the address it named last */
} flog;

static int fl_apply(void *ctx, uint64_t idx, uint64_t epoch, const uint8_t *g, size_t len,
                    char *err, size_t errlen)
{
    flog *f = ctx;
    pthread_mutex_lock(&f->mu);
    if (idx != f->applied + 1 || len != 1 + idx % 97)
        f->bad = 1;
    for (size_t i = 0; i < len && !f->bad; i++)
        if (g[i] != (uint8_t)(idx * 31 + i))
            f->bad = 1;
    f->applied = idx;
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static int fl_sync(void *ctx, char *err, size_t errlen)
{
    flog *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->synced = f->applied;
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static uint64_t fl_synced(flog *f)
{
    pthread_mutex_lock(&f->mu);
    uint64_t v = f->synced;
    pthread_mutex_unlock(&f->mu);
    return v;
}

static int fl_save(void *ctx, uint64_t last, const cl_repl_epochs *h)
{
    flog *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->saved = last;
    f->saves++;
    cl_repl_epochs_free(&f->saved_hist);
    cl_repl_epochs_init(&f->saved_hist);
    for (size_t i = 0; i < h->n; i++)
        cl_repl_epochs_note(&f->saved_hist, h->v[i].epoch, h->v[i].first);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static int fl_copy_begin(void *ctx, uint64_t snap_idx, char *err, size_t errlen)
{
    flog *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->copied = 0;
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static int fl_copy_write(void *ctx, const char *name, uint64_t off, const void *p, size_t len,
                         char *err, size_t errlen)
{
    flog *f = ctx;
    pthread_mutex_lock(&f->mu);
    if (strcmp(name, "log") || off != f->copied)
        f->bad = 1;
    f->copied += len;
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static int fl_copy_end(void *ctx, uint64_t snap_idx, const cl_repl_epochs *h, char *err,
                       size_t errlen)
{
    flog *f = ctx;
    uint64_t want = 0;
    for (uint64_t i = 1; i <= snap_idx; i++)
        want += 1 + i % 97;
    pthread_mutex_lock(&f->mu);
    if (f->copied != want || !h->n || h->v[0].first != 1)
        f->bad = 1;
    f->applied = snap_idx;
    f->copies++;
    pthread_mutex_unlock(&f->mu);
    return fl_save(ctx, snap_idx, h);
}

static uint64_t fl_saved(flog *f)
{
    pthread_mutex_lock(&f->mu);
    uint64_t v = f->saved;
    pthread_mutex_unlock(&f->mu);
    return v;
}

static int listener(char *addr, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    snprintf(addr, len, "127.0.0.1:%d", ntohs(sa.sin_port));
    return fd;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait (bounded) until cond holds. */
#define WAIT_UNTIL(cond, ms)                                                                       \
    do {                                                                                           \
        uint64_t t_end_ = now_ms() + (ms);                                                         \
        while (!(cond) && now_ms() < t_end_)                                                       \
            pause_ms(5);                                                                           \
        ck_assert_msg((cond), "timed out waiting for " #cond);                                     \
    } while (0)

typedef struct fixture {
    mlog ml;
    cl_repl_epochs lh;
    char addr[64];
    flog fl[2];
    cl_stream_client *cl[2];
} fixture;

static cl_stream_log follower_log(flog *f)
{
    return (cl_stream_log){.ctx = f,
                           .apply = fl_apply,
                           .sync = fl_sync,
                           .save = fl_save,
                           .copy_begin = fl_copy_begin,
                           .copy_write = fl_copy_write,
                           .copy_end = fl_copy_end};
}

/* The server's ban check (member.h banned/NAME): f1 while ban_f1 is set. */
static int ban_f1;
static int banned_hook(void *ctx, const char *name)
{
    (void)ctx;
    return __atomic_load_n(&ban_f1, __ATOMIC_RELAXED) && !strcmp(name, "f1");
}

/* The cluster secret of the leader and of each follower (auth.h); NULL: none. */
static const char *leader_secret, *follower_secret[2];

static void start_leader(fixture *x, uint32_t min_isr, uint64_t first_kept)
{
    memset(x, 0, sizeof *x);
    pthread_mutex_init(&x->ml.mu, NULL);
    x->ml.first_kept = first_kept;
    cl_repl_epochs_init(&x->lh);
    int fd = listener(x->addr, sizeof x->addr);
    const char *isr[] = {"f0", "f1"};
    cl_stream_server_opts o = {.self = "L",
                               .cluster = "c",
                               .epoch = 1,
                               .isr = isr,
                               .n_isr = 2,
                               .rl = {.min_isr = min_isr, .lag_max_ms = 500},
                               .hist = &x->lh,
                               .ping_ms = 50,
                               .banned = banned_hook,
                               .secret = (const uint8_t *)leader_secret,
                               .secret_len = leader_secret ? strlen(leader_secret) : 0};
    cl_stream_log lg = {.ctx = &x->ml,
                        .group = ml_group,
                        .isr_propose = ml_isr,
                        .snap_open = ml_snap_open,
                        .snap_count = ml_snap_count,
                        .snap_name = ml_snap_name,
                        .snap_read = ml_snap_read,
                        .snap_free = ml_snap_free};
    char err[256];
    x->ml.srv = cl_stream_server_start(fd, &o, &lg, err, sizeof err);
    ck_assert_msg(x->ml.srv != NULL, "%s", err);
    cl_stream_server_lease(x->ml.srv, now_ms() + 3600 * 1000);
}

static void start_follower(fixture *x, int i, uint64_t last, const cl_repl_epochs *h)
{
    char name[8], err[256];
    snprintf(name, sizeof name, "f%d", i);
    cl_stream_log lg = follower_log(&x->fl[i]);
    const char *sec = follower_secret[i];
    x->cl[i] = cl_stream_client_start(name, "c", (const uint8_t *)sec, sec ? strlen(sec) : 0, NULL,
                                      last, h, 0, &lg, err, sizeof err);
    ck_assert_msg(x->cl[i] != NULL, "%s", err);
    cl_stream_client_set_leader(x->cl[i], x->addr, 1);
}

static void stop_all(fixture *x)
{
    for (int i = 0; i < 2; i++) {
        cl_stream_client_stop(x->cl[i]);
        cl_repl_epochs_free(&x->fl[i].saved_hist);
    }
    cl_stream_server_stop(x->ml.srv);
    ml_free(&x->ml);
    cl_repl_epochs_free(&x->lh);
}

/* Issue 46: the client tells its owner when an established stream from the leader ends
 * (EOF, a reset), naming the address it dialed: the member then probes that port. Not for a
 * refusal (a REFUSE frame, here a ban) nor for a dial the port refuses. */
static void fl_lost(void *ctx, const char *addr)
{
    flog *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->lost++;
    snprintf(f->lost_addr, sizeof f->lost_addr, "%s", addr);
    pthread_mutex_unlock(&f->mu);
}

static int fl_lost_count(flog *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->lost;
    pthread_mutex_unlock(&f->mu);
    return n;
}

START_TEST(the_end_of_an_established_stream_is_reported_a_refusal_is_not)
{
    fixture x;
    __atomic_store_n(&ban_f1, 1, __ATOMIC_RELAXED);
    start_leader(&x, 1, 1);
    cl_repl_epochs empty;
    cl_repl_epochs_init(&empty);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_init(&x.fl[i].mu, NULL);
        char name[8], err[256];
        snprintf(name, sizeof name, "f%d", i);
        cl_stream_log lg = follower_log(&x.fl[i]);
        lg.lost = fl_lost;
        x.cl[i] =
            cl_stream_client_start(name, "c", NULL, 0, NULL, 0, &empty, 0, &lg, err, sizeof err);
        ck_assert_msg(x.cl[i] != NULL, "%s", err);
        cl_stream_client_set_leader(x.cl[i], x.addr, 1);
    }
    for (int i = 0; i < 10; i++)
        ml_append(&x.ml, 1);
    WAIT_UNTIL(fl_saved(&x.fl[0]) == 10, 20000);
    pause_ms(400); /* f1 refused (REFUSE 1) at least once more, after its retry pause */
    ck_assert_int_eq(fl_lost_count(&x.fl[0]), 0);
    ck_assert_int_eq(fl_lost_count(&x.fl[1]), 0);
    /* the leader goes (its sockets closed, as the kernel closes a dead process's) */
    cl_stream_server_stop(x.ml.srv);
    x.ml.srv = NULL;
    WAIT_UNTIL(fl_lost_count(&x.fl[0]) == 1, 20000);
    pthread_mutex_lock(&x.fl[0].mu);
    ck_assert_str_eq(x.fl[0].lost_addr, x.addr);
    pthread_mutex_unlock(&x.fl[0].mu);
    /* its dials after that are refused by the port: not reported again */
    pause_ms(700);
    ck_assert_int_eq(fl_lost_count(&x.fl[0]), 1);
    ck_assert_int_eq(fl_lost_count(&x.fl[1]), 0);
    __atomic_store_n(&ban_f1, 0, __ATOMIC_RELAXED);
    cl_repl_epochs_free(&empty);
    stop_all(&x);
}
END_TEST

/* Issue 46: the leader's mirror announces a group once its writes are made, before its own
 * fdatasync, then again with its durable index. Followers take and ack the group at once; nothing
 * is released before the leader's durable index covers it; the second announcement is ignored;
 * and a group announced before the server existed (so known only through the next one) still
 * goes out. */
START_TEST(groups_go_out_before_the_leaders_sync_and_wait_for_it)
{
    fixture x;
    start_leader(&x, 2, 1);
    cl_repl_epochs empty;
    cl_repl_epochs_init(&empty);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_init(&x.fl[i].mu, NULL);
        start_follower(&x, i, 0, &empty);
    }
    size_t len[64];
    for (int i = 1; i <= 50; i++) {
        uint64_t idx = ml_put(&x.ml, 1, &len[0]);
        cl_stream_server_append(x.ml.srv, idx, len[0]);
    }
    WAIT_UNTIL(fl_synced(&x.fl[0]) == 50 && fl_synced(&x.fl[1]) == 50, 20000);
    pause_ms(50);
    ck_assert_uint_eq(cl_stream_server_released(x.ml.srv), 0); /* the leader's sync: not yet */
    ck_assert_uint_eq(cl_stream_server_commit(x.ml.srv), 0);
    for (uint64_t idx = 1; idx <= 50; idx++) /* each again, with its sync done */
        cl_stream_server_append_durable(x.ml.srv, idx, 1 + idx % 97, idx);
    WAIT_UNTIL(cl_stream_server_released(x.ml.srv) == 50, 20000);
    /* 51 announced to no one, then 52: both go out */
    uint64_t a = ml_put(&x.ml, 1, &len[1]);
    uint64_t b = ml_put(&x.ml, 1, &len[2]);
    ck_assert_uint_eq(a, 51);
    cl_stream_server_append_durable(x.ml.srv, b, len[2], b);
    WAIT_UNTIL(cl_stream_server_released(x.ml.srv) == 52, 20000);
    ck_assert_uint_eq(fl_synced(&x.fl[0]), 52);
    ck_assert_uint_eq(fl_synced(&x.fl[1]), 52);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(x.fl[i].bad, 0);
    stop_all(&x);
    cl_repl_epochs_free(&empty);
}
END_TEST

START_TEST(groups_reach_every_follower_and_release_waits_for_the_isr)
{
    fixture x;
    start_leader(&x, 2, 1);
    cl_repl_epochs empty;
    cl_repl_epochs_init(&empty);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_init(&x.fl[i].mu, NULL);
        start_follower(&x, i, 0, &empty);
    }
    for (int i = 0; i < 1000; i++)
        ml_append(&x.ml, 1);
    WAIT_UNTIL(cl_stream_server_released(x.ml.srv) == 1000, 20000);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(fl_synced(&x.fl[i]), 1000); /* acked only once synced */
        ck_assert_int_eq(x.fl[i].bad, 0);
        /* released once both applied (durably); the position is saved when the stream is
         * quiet */
        WAIT_UNTIL(fl_saved(&x.fl[i]) == 1000, 20000);
        uint64_t e, idx;
        cl_stream_client_position(x.cl[i], &e, &idx);
        ck_assert_uint_eq(idx, 1000);
        ck_assert_uint_eq(e, 1);
    }
    ck_assert_int_eq(cl_stream_server_blocked(x.ml.srv), 0);

    /* f1 dies: nothing more is released until the ISR (etcd, here the test) drops it */
    cl_stream_client_stop(x.cl[1]);
    x.cl[1] = NULL;
    uint64_t saved1 = fl_saved(&x.fl[1]);
    for (int i = 0; i < 100; i++)
        ml_append(&x.ml, 1);
    WAIT_UNTIL(cl_stream_server_released(x.ml.srv) == 1100, 20000);
    pthread_mutex_lock(&x.ml.mu);
    ck_assert_int_ge(x.ml.proposals, 1);
    ck_assert_uint_eq(x.ml.n_proposed, 2); /* L and f0 */
    pthread_mutex_unlock(&x.ml.mu);
    cl_stream_peer peers[4];
    size_t np = cl_stream_server_peers(x.ml.srv, peers, 4);
    ck_assert_uint_eq(np, 2);
    for (size_t i = 0; i < np; i++)
        ck_assert_int_eq(peers[i].insync, !strcmp(peers[i].name, "f0"));

    /* f1 restarts from its saved state, catches up and is taken back in */
    start_follower(&x, 1, saved1, &x.fl[1].saved_hist);
    WAIT_UNTIL(fl_saved(&x.fl[1]) == 1100, 20000);
    ck_assert_int_eq(x.fl[1].bad, 0);
    int both = 0;
    for (int k = 0; k < 2000 && !both; k++) {
        np = cl_stream_server_peers(x.ml.srv, peers, 4);
        both = np == 2 && peers[0].insync && peers[1].insync;
        if (!both)
            pause_ms(5);
    }
    ck_assert_msg(both, "the restarted follower is back in the ISR");
    stop_all(&x);
}
END_TEST

/* A steady stream of groups, each in a batch of its own: every one is released (ACKed once
 * applied), but the position is saved only once the stream is quiet, not per batch (each
 * save is a sync on a confirm's disk); a client stopped in the middle of a stream saves what
 * it applied (a promoted node continues from it). */
static int fl_saves(flog *f)
{
    pthread_mutex_lock(&f->mu);
    int v = f->saves;
    pthread_mutex_unlock(&f->mu);
    return v;
}

START_TEST(the_position_is_saved_when_the_stream_is_quiet_not_per_batch)
{
    fixture x;
    start_leader(&x, 2, 1);
    cl_repl_epochs empty;
    cl_repl_epochs_init(&empty);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_init(&x.fl[i].mu, NULL);
        start_follower(&x, i, 0, &empty);
    }
    ml_append(&x.ml, 1);
    WAIT_UNTIL(cl_stream_server_released(x.ml.srv) == 1, 20000);
    WAIT_UNTIL(fl_saved(&x.fl[0]) == 1 && fl_saved(&x.fl[1]) == 1, 20000);
    int before = fl_saves(&x.fl[0]);
    /* 100 groups, the next appended only once the last is released: 100 batches */
    for (uint64_t i = 2; i <= 101; i++) {
        ml_append(&x.ml, 1);
        WAIT_UNTIL(cl_stream_server_released(x.ml.srv) == i, 20000);
    }
    /* a batch takes well under SAVE_IDLE_MS here, so saves are rare within the stream (the
     * scheduler may stretch a gap now and then: a bound, not zero) */
    ck_assert_int_le(fl_saves(&x.fl[0]) - before, 20);
    WAIT_UNTIL(fl_saved(&x.fl[0]) == 101 && fl_saved(&x.fl[1]) == 101, 20000);

    /* stopped right after a group is applied: the stop saves it */
    ml_append(&x.ml, 1);
    WAIT_UNTIL(cl_stream_server_released(x.ml.srv) == 102, 20000);
    cl_stream_client_stop(x.cl[0]);
    x.cl[0] = NULL;
    ck_assert_uint_eq(fl_saved(&x.fl[0]), 102);
    ck_assert_int_eq(x.fl[0].bad, 0);
    ck_assert_int_eq(x.fl[1].bad, 0);
    stop_all(&x);
}
END_TEST

START_TEST(below_min_isr_is_blocked_and_nothing_is_released)
{
    fixture x;
    start_leader(&x, 3, 1); /* three copies wanted */
    cl_repl_epochs empty;
    cl_repl_epochs_init(&empty);
    pthread_mutex_init(&x.fl[0].mu, NULL);
    pthread_mutex_init(&x.fl[1].mu, NULL);
    start_follower(&x, 0, 0, &empty);
    for (int i = 0; i < 10; i++)
        ml_append(&x.ml, 1);
    /* f1 never comes: the ISR shrinks to two, below three: blocked, nothing released */
    WAIT_UNTIL(cl_stream_server_blocked(x.ml.srv) == 1, 20000);
    ck_assert_uint_eq(cl_stream_server_released(x.ml.srv), 0);
    start_follower(&x, 1, 0, &empty);
    WAIT_UNTIL(cl_stream_server_blocked(x.ml.srv) == 0 && cl_stream_server_released(x.ml.srv) == 10,
               20000);
    stop_all(&x);
}
END_TEST

/* An operator removed f1: its HELLO is refused, it gets nothing and leaves the ISR; once the
 * ban goes it connects again and catches up. */
START_TEST(a_banned_follower_is_refused_until_the_ban_goes)
{
    fixture x;
    __atomic_store_n(&ban_f1, 1, __ATOMIC_RELAXED);
    start_leader(&x, 1, 1);
    cl_repl_epochs empty;
    cl_repl_epochs_init(&empty);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_init(&x.fl[i].mu, NULL);
        start_follower(&x, i, 0, &empty);
    }
    for (int i = 0; i < 100; i++)
        ml_append(&x.ml, 1);
    /* released once f1 (never acking) left the ISR: f0 and the leader hold everything */
    WAIT_UNTIL(cl_stream_server_released(x.ml.srv) == 100, 20000);
    ck_assert_uint_eq(fl_saved(&x.fl[0]), 100);
    ck_assert_uint_eq(fl_saved(&x.fl[1]), 0);
    cl_stream_peer peers[4];
    size_t np = cl_stream_server_peers(x.ml.srv, peers, 4);
    for (size_t i = 0; i < np; i++)
        ck_assert_msg(strcmp(peers[i].name, "f1") || (!peers[i].connected && !peers[i].insync),
                      "a banned follower is neither connected nor in sync");
    uint64_t e, idx;
    cl_stream_client_position(x.cl[1], &e, &idx);
    ck_assert_uint_eq(idx, 0);
    /* readmitted: it dials again (after its pause) and catches up */
    __atomic_store_n(&ban_f1, 0, __ATOMIC_RELAXED);
    WAIT_UNTIL(fl_saved(&x.fl[1]) == 100, 20000);
    ck_assert_int_eq(x.fl[1].bad, 0);
    stop_all(&x);
}
END_TEST

/* The handshake's proof (auth.h): a known answer (Python's hmac over the same bytes), and
 * every input counts. */
START_TEST(the_handshake_proof_binds_secret_role_names_and_nonces)
{
    uint8_t nf[CL_AUTH_NONCE], nl[CL_AUTH_NONCE], mac[CL_AUTH_MAC];
    for (int i = 0; i < CL_AUTH_NONCE; i++) {
        nf[i] = (uint8_t)i;
        nl[i] = (uint8_t)(32 + i);
    }
    const uint8_t *k = (const uint8_t *)"k3y";
    cl_auth_mac(k, 3, 'F', "c", "f0", "L", nf, nl, mac);
    static const char want[] = "2562b73c09415ea1c2ae9d712afe4c414cacb382988082e9fbd7d9f9fbd23e3d";
    char hex[2 * CL_AUTH_MAC + 1];
    for (int i = 0; i < CL_AUTH_MAC; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    ck_assert_str_eq(hex, want);
    ck_assert(cl_auth_check(k, 3, 'F', "c", "f0", "L", nf, nl, mac));
    ck_assert(!cl_auth_check(k, 3, 'L', "c", "f0", "L", nf, nl, mac)); /* no reflection */
    ck_assert(!cl_auth_check((const uint8_t *)"k3z", 3, 'F', "c", "f0", "L", nf, nl, mac));
    ck_assert(!cl_auth_check(k, 3, 'F', "d", "f0", "L", nf, nl, mac));
    ck_assert(!cl_auth_check(k, 3, 'F', "c", "f1", "L", nf, nl, mac));
    ck_assert(!cl_auth_check(k, 3, 'F', "c", "f0", "M", nf, nl, mac));
    ck_assert(!cl_auth_check(k, 3, 'F', "c", "f0", "L", nl, nf, mac)); /* nonces in their places */
    nl[7] ^= 1;
    ck_assert(!cl_auth_check(k, 3, 'F', "c", "f0", "L", nf, nl, mac));
}
END_TEST

/* With a secret: f0 holds the leader's and follows; f1 holds another, so the leader's proof
 * does not check out for it: it applies nothing, is never connected as a follower, and the
 * leader releases without it once it left the ISR. A follower without a secret is refused by
 * a leader that has one. */
START_TEST(only_a_follower_with_the_cluster_secret_follows)
{
    fixture x;
    leader_secret = "the-secret";
    follower_secret[0] = "the-secret";
    follower_secret[1] = "another-secret";
    start_leader(&x, 1, 1);
    cl_repl_epochs empty;
    cl_repl_epochs_init(&empty);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_init(&x.fl[i].mu, NULL);
        start_follower(&x, i, 0, &empty);
    }
    for (int i = 0; i < 100; i++)
        ml_append(&x.ml, 1);
    WAIT_UNTIL(cl_stream_server_released(x.ml.srv) == 100, 20000);
    WAIT_UNTIL(fl_saved(&x.fl[0]) == 100, 20000);
    ck_assert_uint_eq(fl_synced(&x.fl[1]), 0);
    cl_stream_peer peers[4];
    size_t np = cl_stream_server_peers(x.ml.srv, peers, 4);
    for (size_t i = 0; i < np; i++)
        ck_assert_msg(strcmp(peers[i].name, "f1") || (!peers[i].connected && !peers[i].insync),
                      "a follower without the secret is neither connected nor in sync");
    /* f1 again, without a secret at all: refused the same */
    cl_stream_client_stop(x.cl[1]);
    follower_secret[1] = NULL;
    start_follower(&x, 1, 0, &empty);
    for (int i = 0; i < 10; i++)
        ml_append(&x.ml, 1);
    WAIT_UNTIL(fl_saved(&x.fl[0]) == 110, 20000);
    pause_ms(300);
    ck_assert_uint_eq(fl_synced(&x.fl[1]), 0);
    ck_assert_int_ne(cl_stream_client_state(x.cl[1]), CL_STREAM_STREAMING);
    /* and with the right one it follows and catches up */
    cl_stream_client_stop(x.cl[1]);
    follower_secret[1] = "the-secret";
    start_follower(&x, 1, 0, &empty);
    WAIT_UNTIL(fl_saved(&x.fl[1]) == 110, 20000);
    ck_assert_int_eq(x.fl[0].bad, 0);
    ck_assert_int_eq(x.fl[1].bad, 0);
    stop_all(&x);
    leader_secret = follower_secret[0] = follower_secret[1] = NULL;
}
END_TEST

START_TEST(a_group_no_longer_kept_or_a_divergent_log_takes_a_full_copy)
{
    fixture x;
    start_leader(&x, 1, 50); /* groups below 50 have left the ring */
    for (int i = 0; i < 60; i++)
        ml_append(&x.ml, 1);
    cl_repl_epochs empty;
    cl_repl_epochs_init(&empty);
    pthread_mutex_init(&x.fl[0].mu, NULL);
    pthread_mutex_init(&x.fl[1].mu, NULL);
    start_follower(&x, 0, 0, &empty);
    /* group 1 is gone: it takes a full copy (up to 60), then follows on */
    WAIT_UNTIL(fl_saved(&x.fl[0]) == 60, 20000);
    for (int i = 0; i < 20; i++)
        ml_append(&x.ml, 1);
    WAIT_UNTIL(fl_saved(&x.fl[0]) == 80, 20000);
    ck_assert_int_eq(x.fl[0].bad, 0);
    ck_assert_int_eq(x.fl[0].copies, 1);
    cl_repl_epochs h;
    cl_repl_epochs_init(&h);

    /* a follower that has seen epoch 7 refuses this leader of epoch 1 (deposed) */
    cl_repl_epochs d;
    cl_repl_epochs_init(&d);
    cl_repl_epochs_note(&d, 1, 1);
    cl_repl_epochs_note(&d, 7, 41);
    char err[256];
    cl_stream_log lg = follower_log(&x.fl[1]);
    x.cl[1] = cl_stream_client_start("f1", "c", NULL, 0, NULL, 70, &d, 0, &lg, err, sizeof err);
    ck_assert(x.cl[1] != NULL);
    cl_stream_client_set_leader(x.cl[1], x.addr, 1);
    pause_ms(300);
    ck_assert_int_ne(cl_stream_client_state(x.cl[1]), CL_STREAM_STREAMING);
    ck_assert_uint_eq(fl_saved(&x.fl[1]), 0);
    cl_repl_epochs_free(&d);
    stop_all(&x);
    cl_repl_epochs_free(&h);

    /* divergence: the log of epoch 1 ends at 30 on the new leader (epoch 2), but this
     * follower holds 1..45 of epoch 1 (31..45 were never committed): they must be cut,
     * which a physical mirror cannot do: it asks for a full copy */
    start_leader(&x, 1, 1);
    pthread_mutex_init(&x.fl[0].mu, NULL);
    for (int i = 0; i < 30; i++)
        ml_append(&x.ml, 1);
    cl_stream_server_stop(x.ml.srv);
    cl_repl_epochs_free(&x.lh); /* the log's history as its replica state would say */
    cl_repl_epochs_note(&x.lh, 1, 1);
    cl_repl_epochs_init(&d);
    cl_repl_epochs_note(&d, 1, 1);
    x.fl[0].applied = 45;
    lg = follower_log(&x.fl[0]);
    int fd = listener(x.addr, sizeof x.addr);
    const char *isr[] = {"f0"};
    cl_stream_server_opts o = {.self = "L",
                               .cluster = "c",
                               .epoch = 2,
                               .isr = isr,
                               .n_isr = 1,
                               .rl = {.min_isr = 1, .lag_max_ms = 500},
                               .last_idx = 30,
                               .hist = &x.lh,
                               .ping_ms = 50};
    cl_stream_log sl = {.ctx = &x.ml,
                        .group = ml_group,
                        .isr_propose = ml_isr,
                        .snap_open = ml_snap_open,
                        .snap_count = ml_snap_count,
                        .snap_name = ml_snap_name,
                        .snap_read = ml_snap_read,
                        .snap_free = ml_snap_free};
    x.ml.srv = cl_stream_server_start(fd, &o, &sl, err, sizeof err);
    ck_assert(x.ml.srv != NULL);
    cl_stream_server_lease(x.ml.srv, now_ms() + 3600 * 1000);
    x.cl[0] = cl_stream_client_start("f0", "c", NULL, 0, NULL, 45, &d, 0, &lg, err, sizeof err);
    cl_stream_client_set_leader(x.cl[0], x.addr, 2);
    ml_append(&x.ml, 2); /* group 31 of epoch 2 */
    /* it cannot cut its 31..45: a full copy (1..30 or 1..31), then group 31 of epoch 2 */
    WAIT_UNTIL(fl_saved(&x.fl[0]) == 31 && cl_stream_client_state(x.cl[0]) == CL_STREAM_STREAMING,
               20000);
    ck_assert_int_eq(x.fl[0].copies, 1);
    ck_assert_int_eq(x.fl[0].bad, 0);
    uint64_t pe, pi;
    cl_stream_client_position(x.cl[0], &pe, &pi);
    ck_assert_uint_eq(pi, 31);
    ck_assert_uint_eq(pe, 2);
    cl_repl_epochs_free(&d);
    stop_all(&x);
}
END_TEST

/* A stranger at the leader's address (a stale leader key, a hijacked address) that answers a
 * follower's AUTH with REFUSE "not kept" instead of proving the secret must not make the
 * follower throw its position away and ask the real leader for a full copy: before the
 * leader's CHALLENGE checked out, a REFUSE only ends the connection. */
START_TEST(an_unproved_refuse_does_not_make_a_follower_take_a_full_copy)
{
    fixture x;
    memset(&x, 0, sizeof x);
    pthread_mutex_init(&x.fl[0].mu, NULL);
    int lfd = listener(x.addr, sizeof x.addr);
    struct timeval tv = {10, 0}; /* accept and read: bounded */
    setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    cl_repl_epochs empty;
    cl_repl_epochs_init(&empty);
    follower_secret[0] = "the-secret";
    start_follower(&x, 0, 0, &empty);
    for (int round = 0; round < 2; round++) {
        int fd = accept(lfd, NULL, NULL); /* blocking: the follower dials at once, then
                                           * RETRY_MS after a drop */
        ck_assert_int_ge(fd, 0);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        uint8_t in[1024];
        ck_assert_int_gt(read(fd, in, sizeof in), 0); /* its AUTH */
        if (round == 1) {
            /* it dialed again as a follower that keeps its log, not as one that lost it */
            ck_assert_int_ne(cl_stream_client_state(x.cl[0]), CL_STREAM_NEED_COPY);
            close(fd);
            break;
        }
        sl_buf b;
        sl_buf_init(&b);
        cl_wire_put_refuse(&b, 2 /* REFUSE_NOT_KEPT */, "the next group is no longer kept");
        ck_assert_int_eq(write(fd, sl_buf_head(&b), sl_buf_unread(&b)), (ssize_t)sl_buf_unread(&b));
        sl_buf_free(&b);
        ck_assert_int_eq(read(fd, in, sizeof in), 0); /* it hangs up */
        close(fd);
    }
    cl_stream_client_stop(x.cl[0]);
    close(lfd);
    follower_secret[0] = NULL;
}
END_TEST

/* Nor can it make the follower buffer a huge frame before it proved the secret: the leader
 * holds at most 4 KiB of a peer that has not said HELLO, and a follower holds no more of a
 * leader that has not answered with its CHALLENGE (a frame header may announce 1 GiB). */
START_TEST(an_unproved_leader_cannot_make_a_follower_buffer_a_huge_frame)
{
    fixture x;
    memset(&x, 0, sizeof x);
    pthread_mutex_init(&x.fl[0].mu, NULL);
    int lfd = listener(x.addr, sizeof x.addr);
    struct timeval tv = {10, 0};
    setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    cl_repl_epochs empty;
    cl_repl_epochs_init(&empty);
    follower_secret[0] = "the-secret";
    start_follower(&x, 0, 0, &empty);
    int fd = accept(lfd, NULL, NULL);
    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    uint8_t hdr[5] = {0x20, 0, 0, 0, 12 /* CHALLENGE */}; /* 512 MiB announced */
    ck_assert_int_eq(write(fd, hdr, sizeof hdr), 5);
    static uint8_t junk[65536];
    size_t sent = 0, cap = 64u << 20;
    while (sent < cap) {
        ssize_t n = send(fd, junk, sizeof junk, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* it hung up */
        sent += (size_t)n;
    }
    /* without the bound it reads on until it has heard nothing valid for 2 s: all 64 MiB */
    ck_assert_msg(sent < (16u << 20), "the follower took %zu bytes of a frame", sent);
    close(fd);
    cl_stream_client_stop(x.cl[0]);
    close(lfd);
    follower_secret[0] = NULL;
}
END_TEST

static Suite *stream_suite(void)
{
    Suite *s = suite_create("stream");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, groups_reach_every_follower_and_release_waits_for_the_isr);
    tcase_add_test(tc, groups_go_out_before_the_leaders_sync_and_wait_for_it);
    tcase_add_test(tc, the_position_is_saved_when_the_stream_is_quiet_not_per_batch);
    tcase_add_test(tc, below_min_isr_is_blocked_and_nothing_is_released);
    tcase_add_test(tc, the_end_of_an_established_stream_is_reported_a_refusal_is_not);
    tcase_add_test(tc, a_banned_follower_is_refused_until_the_ban_goes);
    tcase_add_test(tc, a_group_no_longer_kept_or_a_divergent_log_takes_a_full_copy);
    tcase_add_test(tc, the_handshake_proof_binds_secret_role_names_and_nonces);
    tcase_add_test(tc, only_a_follower_with_the_cluster_secret_follows);
    tcase_add_test(tc, an_unproved_refuse_does_not_make_a_follower_take_a_full_copy);
    tcase_add_test(tc, an_unproved_leader_cannot_make_a_follower_buffer_a_huge_frame);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(stream_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
