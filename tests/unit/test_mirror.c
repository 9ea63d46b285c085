/* test_mirror.c - unit tests for the store-level replication (src/cluster/mirror.c and the
 * file operation capture in src/store/log.c): a seeded workload runs on a leader store with a
 * mirror installed; its groups are applied to a second directory, which must recover (persist
 * read-only) to the model the leader had at the same group, at every boundary checked, also
 * after a simulated kill -9 of the follower inside a group (a prefix of the group's operations
 * applied, then the whole group again). A bulk copy taken while the workload goes on, plus the
 * groups after it, must give the leader's directory byte for byte. A stream queue's log
 * (streams/INC/, 3-component names) is mirrored and copied too: its replica opens to the
 * leader's entries, through rolls, retention and its deletion. Hostile and damaged groups
 * are refused and touch nothing. The release gate holds persist_durable back.
 *
 * Seeds: MIRROR_SEED=N in the environment runs one seed (to reproduce a failure); otherwise a
 * fixed list. Each test runs in its own forked process (check's default).
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
#include "cluster/mirror.h"
#include "core/log.h"
#include "core/mem.h"
#include "persist/persist.h"
#include "qm/qm.h"
#include "store/log.h"
#include "store/stream.h"

/* ------------------------------------------------------------------ helpers */

static char BASE[256], L[300], M[300], J[300];
static char err[1024];

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
    strcpy(BASE, "/tmp/sluice-test-mirror-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(BASE));
    snprintf(L, sizeof L, "%s/leader", BASE);
    snprintf(M, sizeof M, "%s/mirror", BASE);
    snprintf(J, sizeof J, "%s/joining", BASE);
    ck_assert_int_eq(mkdir(M, 0755), 0);
    ck_assert_int_eq(mkdir(J, 0755), 0);
    sl_log_min_level = SL_LOG_ERROR + 1; /* recovery warnings are expected */
}

static void teardown(void)
{
    rm_rf(BASE);
}

static uint64_t rng;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* The durable queues of a vhost and their ready bodies in order, as one string: what a model
 * recovered from a directory must show. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *dump_vhost(qm_vhost *v)
{
    size_t it = 0, kl;
    const char *k;
    void *val;
    char **names = NULL;
    size_t n = 0;
    while (sl_map_next(v->queues, &it, &k, &kl, &val)) {
        qm_queue *q = val;
        if (!q->durable)
            continue;
        names = sl_xrealloc(names, (n + 1) * sizeof *names);
        names[n++] = q->name;
    }
    if (n)
        qsort(names, n, sizeof *names, cmp_str);
    sl_buf b;
    sl_buf_init(&b);
    for (size_t i = 0; i < n; i++) {
        qm_queue *q = qm_queue_find(v, names[i], strlen(names[i]));
        char head[256];
        int hl = snprintf(head, sizeof head, "[%s %llu+%llu]", q->name,
                          (unsigned long long)q->n_ready, (unsigned long long)q->n_locked);
        sl_buf_append(&b, head, (size_t)hl);
        for (size_t j = 0; j < q->n_ready; j++) {
            qm_position *pos = qm_queue_peek(q, j);
            sl_buf_append(&b, qm_msg_body(pos->msg), pos->msg->body_len);
            sl_buf_append(&b, ",", 1);
        }
    }
    sl_buf_append(&b, "", 1);
    sl_free(names);
    return (char *)sl_buf_detach(&b);
}

/* Open dir read-only with persist and dump its model; NULL (err) when recovery refuses. */
static char *recover_dump(const char *dir)
{
    qm_node *n = qm_node_new("check");
    qm_vhost *v = qm_vhost_create(n, "/");
    persist_options o = {.read_only = 1, .no_sync = 1};
    persist *p = persist_open(dir, n, &o, err, sizeof err);
    char *out = p ? dump_vhost(v) : NULL;
    persist_close(p);
    /* qm's persistence hooks are process-wide and the leader's are installed: this node's
     * teardown must not reach them */
    qm_persist_suspend(1);
    qm_node_free(n);
    qm_persist_suspend(0);
    return out;
}

/* ------------------------------------------------------------------ the leader */

static cl_mirror *MI;
static int use_kick; /* the broker's way: batches on the sync thread (persist_kick) */
static qm_node *LN;
static qm_vhost *LV;
static persist *LP;
static persist_options LOPT;
static char **models; /* models[idx]: the leader's model when group idx was made */
static size_t models_cap;

static void hook(void *ctx, uint64_t gen, int synced)
{
    uint64_t idx = cl_mirror_batch(MI, gen, synced);
    if (idx >= models_cap) {
        size_t nc = models_cap ? models_cap * 2 : 256;
        while (nc <= idx)
            nc *= 2;
        models = sl_xrealloc(models, nc * sizeof *models);
        memset(models + models_cap, 0, (nc - models_cap) * sizeof *models);
        models_cap = nc;
    }
    models[idx] = LV ? dump_vhost(LV) : NULL;
}

static void leader_open(void)
{
    LN = qm_node_new("leader");
    LV = qm_vhost_create(LN, "/");
    LP = persist_open(L, LN, &LOPT, err, sizeof err);
    ck_assert_msg(LP != NULL, "leader open: %s", err);
}

static void leader_close(void)
{
    persist_close(LP); /* its last commit is a group: the model is still there */
    qm_node_free(LN);
    LP = NULL;
    LN = NULL;
    LV = NULL;
}

static int leader_sync; /* the leader fsyncs for real: barriers are in the groups */

static void leader_start(uint64_t segment_size)
{
    MI = cl_mirror_leader_new(L, 1ull << 30);
    ck_assert_ptr_nonnull(MI);
    cl_mirror_start(MI, 1, 0);
    LOPT = (persist_options){.no_sync = !leader_sync, .segment_size = segment_size};
    LOPT.batch_hook = hook;
    LOPT.sync_thread = use_kick;
    leader_open();
}

static void leader_stop(void)
{
    if (LP)
        leader_close();
    cl_mirror_free(MI);
    MI = NULL;
    for (size_t i = 0; i < models_cap; i++)
        sl_free(models[i]);
    sl_free(models);
    models = NULL;
    models_cap = 0;
}

static void commit(void)
{
    if (!use_kick) {
        ck_assert_msg(persist_commit(LP, err, sizeof err) == 0, "commit: %s", err);
        return;
    }
    int rc = persist_kick(LP, rnd() % 8 == 0, err, sizeof err);
    ck_assert_msg(rc >= 0, "kick: %s", err);
    for (int i = 0; i < 1000 && persist_sync_busy(LP); i++) {
        struct pollfd pfd = {persist_sync_fd(LP), POLLIN, 0};
        poll(&pfd, 1, 1000);
        ck_assert_msg(persist_sync_done(LP, err, sizeof err) >= 0, "sync: %s", err);
    }
    ck_assert(!persist_sync_busy(LP));
}

static const char *QN[] = {"qa", "qb", "qc", "qd"};
#define NQ 4

static qm_queue *lq(int i)
{
    return qm_queue_find(LV, QN[i], strlen(QN[i]));
}

static qm_queue *ldeclare(int i)
{
    qm_queue_decl d = {QN[i], strlen(QN[i]), 1, 0, 0, NULL, (amqp_bytes){0}, 0};
    qm_queue *q = NULL;
    int created = 0;
    ck_assert_int_eq(qm_queue_declare(LV, &d, &q, &created, err, sizeof err), SL_OK);
    return q;
}

static uint64_t body_no;

static void lpublish(qm_queue *q)
{
    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    p.flags |= AMQP_P_DELIVERY_MODE;
    p.delivery_mode = 2;
    sl_buf b;
    sl_buf_init(&b);
    amqp_props_encode(&b, &p);
    char body[3000];
    size_t len = (size_t)snprintf(body, sizeof body, "b%llu-", (unsigned long long)++body_no);
    size_t want = rnd() % 8 == 0 ? 2000 + rnd() % 900 : 10 + rnd() % 200;
    while (len < want)
        body[len++] = (char)('a' + rnd() % 26);
    qm_message *m = qm_message_new(AMQP_BYTES("ex"), amqp_cstr("rk"), sl_buf_head(&b),
                                   (uint32_t)sl_buf_unread(&b), len);
    memcpy(qm_msg_body(m), body, len);
    sl_buf_free(&b);
    ck_assert_int_eq(qm_queue_enqueue(q, m), SL_OK);
    qm_message_unref(m);
}

static uint64_t tidy_freed, tidy_compacted, restarts;

/* One random step of the workload; a commit (one group, or more) after most. */
static void step(void)
{
    int i = (int)(rnd() % NQ);
    qm_queue *q = lq(i);
    uint32_t r = rnd() % 100;
    if (!q) {
        ldeclare(i);
    } else if (r < 45) {
        int n = 1 + (int)(rnd() % 6);
        for (int k = 0; k < n; k++)
            lpublish(q);
    } else if (r < 60 && q->n_ready) { /* get and ack */
        uint64_t remaining;
        qm_position *pos = qm_queue_get(q, 0, &remaining);
        if (pos)
            qm_position_ack(pos);
    } else if (r < 65 && q->n_ready) { /* get and requeue: marked delivered, back in place */
        uint64_t remaining;
        qm_position *pos = qm_queue_get(q, 0, &remaining);
        if (pos)
            qm_position_requeue(pos);
    } else if (r < 72 && q->n_ready) {
        qm_queue *dst = lq((i + 1) % NQ);
        if (dst)
            qm_move(q, qm_queue_peek(q, rnd() % q->n_ready)->lookup_id, dst, NULL);
    } else if (r < 76) {
        qm_queue_purge(q);
    } else if (r < 79) {
        ck_assert_int_eq(qm_queue_delete(q, 0, NULL, err, sizeof err), SL_OK);
    } else if (r < 86) {
        commit();
        persist_tidy_result tr;
        persist_tidy_full(LP, &tr);
        tidy_freed += tr.segments_freed;
        tidy_compacted += tr.segments_compacted;
    } else if (r < 88) {
        commit();
        leader_close();
        leader_open();
        restarts++;
    }
    if (rnd() % 4 != 0)
        commit();
}

/* ------------------------------------------------------------------ the follower */

static int dir_fd(const char *d)
{
    int fd = open(d, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(fd, 0);
    return fd;
}

static unsigned apply_flags = CL_MIRROR_APPLY_NOSYNC;

static void apply_group(int dfd, uint64_t idx, size_t ops_max)
{
    uint8_t *g;
    size_t len;
    uint64_t epoch;
    ck_assert_msg(cl_mirror_group(MI, idx, &g, &len, &epoch) == 0, "group %llu not kept",
                  (unsigned long long)idx);
    ck_assert_uint_eq(epoch, 1);
    int rc = cl_mirror_apply_ex(dfd, g, len, apply_flags, ops_max, err, sizeof err);
    ck_assert_msg(rc >= 0, "apply %llu: %s", (unsigned long long)idx, err);
    sl_free(g);
}

static uint32_t group_nops(uint64_t idx)
{
    uint8_t *g;
    size_t len;
    uint32_t nops = 0;
    ck_assert_int_eq(cl_mirror_group(MI, idx, &g, &len, NULL), 0);
    ck_assert_int_eq(cl_mirror_group_check(g, len, NULL, NULL, NULL, &nops, err, sizeof err), 0);
    sl_free(g);
    return nops;
}

static void check_boundary(const char *dir, uint64_t idx)
{
    char *got = recover_dump(dir);
    ck_assert_msg(got != NULL, "group %llu: the mirror does not recover: %s",
                  (unsigned long long)idx, err);
    ck_assert_ptr_nonnull(models[idx]);
    ck_assert_msg(!strcmp(got, models[idx]),
                  "group %llu: mirror model\n%.600s\nleader model\n%.600s", (unsigned long long)idx,
                  got, models[idx]);
    sl_free(got);
}

static uint64_t seed_of(int i)
{
    const char *s = getenv("MIRROR_SEED");
    if (s)
        return strtoull(s, NULL, 10);
    return 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
}

/* Files of d/sub... (one level of subdirectories) with their contents, compared. */
static void same_tree(const char *a, const char *b)
{
    const char *subs[] = {"meta", "msgs"};
    for (int s = 0; s < 2; s++) {
        char da[600], db[600];
        snprintf(da, sizeof da, "%s/%s", a, subs[s]);
        snprintf(db, sizeof db, "%s/%s", b, subs[s]);
        for (int pass = 0; pass < 2; pass++) { /* every file of each is in the other */
            const char *x = pass ? db : da, *y = pass ? da : db;
            DIR *d = opendir(x);
            ck_assert_ptr_nonnull(d);
            struct dirent *de;
            while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                    continue;
                char px[900], py[900];
                snprintf(px, sizeof px, "%s/%s", x, de->d_name);
                snprintf(py, sizeof py, "%s/%s", y, de->d_name);
                struct stat sx, sy;
                ck_assert_int_eq(stat(px, &sx), 0);
                ck_assert_msg(stat(py, &sy) == 0, "%s: missing", py);
                ck_assert_msg(sx.st_size == sy.st_size, "%s: %lld bytes, %s: %lld", px,
                              (long long)sx.st_size, py, (long long)sy.st_size);
                uint8_t *bx = sl_xmalloc((size_t)sx.st_size + 1),
                        *by = sl_xmalloc((size_t)sx.st_size + 1);
                int fx = open(px, O_RDONLY), fy = open(py, O_RDONLY);
                ck_assert_int_eq(pread(fx, bx, (size_t)sx.st_size, 0), sx.st_size);
                ck_assert_int_eq(pread(fy, by, (size_t)sx.st_size, 0), sx.st_size);
                ck_assert_msg(!memcmp(bx, by, (size_t)sx.st_size), "%s differs", px);
                close(fx);
                close(fy);
                sl_free(bx);
                sl_free(by);
            }
            closedir(d);
        }
    }
}

/* ------------------------------------------------------------------ tests */

/* The workload's groups applied in order to an empty directory: at random boundaries (and
 * the last) the mirror recovers to the leader's model of that group; before some groups a
 * prefix of the group is applied first (the follower killed inside it), and the prefix state
 * must itself recover (crash-consistent), then the whole group is applied again. */
START_TEST(workload_mirrors_at_every_boundary)
{
    int seeds = getenv("MIRROR_SEED") ? 1 : 4;
    for (int s = 0; s < seeds; s++) {
        if (s) {
            teardown();
            setup();
        }
        rng = seed_of(s) | 1;
        body_no = 0;
        tidy_freed = tidy_compacted = restarts = 0;
        use_kick = s == 2;    /* this seed runs its batches on the sync thread */
        leader_sync = s == 1; /* this one syncs for real, leader and mirror */
        apply_flags = s == 1 ? 0 : CL_MIRROR_APPLY_NOSYNC;
        leader_start(8192);
        for (int k = 0; k < 1000; k++)
            step();
        commit();
        uint64_t last = cl_mirror_last(MI);
        ck_assert_uint_gt(last, 100);
        ck_assert_uint_eq(cl_mirror_first_kept(MI), 1);
        int dfd = dir_fd(M);
        uint64_t checked = 0, cuts = 0;
        for (uint64_t idx = 1; idx <= last; idx++) {
            uint32_t nops = group_nops(idx);
            if (nops > 1 && rnd() % 2 == 0) {
                size_t cut = 1 + rnd() % (nops - 1);
                apply_group(dfd, idx, cut);
                cuts++;
                if (rnd() % 2 == 0) { /* what a kill -9 left must open */
                    char *mid = recover_dump(M);
                    ck_assert_msg(mid != NULL, "group %llu cut after %zu of %u ops: %s",
                                  (unsigned long long)idx, cut, nops, err);
                    sl_free(mid);
                }
            }
            apply_group(dfd, idx, SIZE_MAX);
            /* a boundary is the end of a generation: a group closed at the definitions'
             * batch (ST_FOP_WRITTEN) ends in the middle of one (its prefix opens: the cuts) */
            if ((idx == last || rnd() % 6 == 0) && models[idx]) {
                check_boundary(M, idx);
                checked++;
            }
        }
        close(dfd);
        ck_assert_uint_gt(checked, 10);
        ck_assert_uint_gt(cuts, 10);
        fprintf(stderr,
                "mirror workload seed %d%s: %llu groups, %llu boundaries recovered and compared, "
                "%llu cuts inside a group, TIDY freed %llu segments (%llu compacted), %llu "
                "restarts\n",
                s,
                use_kick      ? " (sync thread)"
                : leader_sync ? " (fsyncs)"
                              : "",
                (unsigned long long)last, (unsigned long long)checked, (unsigned long long)cuts,
                (unsigned long long)tidy_freed, (unsigned long long)tidy_compacted,
                (unsigned long long)restarts);
        /* the workload did what it is meant to exercise */
        ck_assert_uint_gt(tidy_freed, 0);
        ck_assert_uint_gt(tidy_compacted, 0);
        ck_assert_uint_gt(restarts, 0);
        /* re-applying the last group again changes nothing */
        dfd = dir_fd(M);
        apply_group(dfd, last, SIZE_MAX);
        close(dfd);
        check_boundary(M, last);
        same_tree(L, M); /* the leader is at its last group: the same files, byte for byte */
        leader_stop();
        use_kick = leader_sync = 0;
        apply_flags = CL_MIRROR_APPLY_NOSYNC;
    }
}
END_TEST

/* A full copy taken in the middle of the workload, read while the workload goes on (TIDY
 * deletes segments the copy holds open), then the groups after it: the leader's directory. */
/* Recovery's own changes are the first group of the next open: a torn tail cut off on the
 * leader is cut off on the mirror too. */
static void append_garbage(const char *root)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/msgs", root);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *de;
    char newest[256] = "";
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".seg") && strcmp(de->d_name, newest) > 0)
            snprintf(newest, sizeof newest, "%s", de->d_name);
    closedir(d);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, newest);
    int fd = open(path, O_WRONLY | O_APPEND);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "\x30\0\0\0torn-record", 15), 15);
    close(fd);
}

START_TEST(recovery_changes_are_the_first_group)
{
    rng = 5;
    leader_start(8192);
    qm_queue *q = ldeclare(1);
    for (int i = 0; i < 30; i++)
        lpublish(q);
    commit();
    leader_close();
    int dfd = dir_fd(M);
    for (uint64_t idx = 1; idx <= cl_mirror_last(MI); idx++)
        apply_group(dfd, idx, SIZE_MAX);
    same_tree(L, M);
    /* the same half-written record on both (a write the leader made as it died, which the
     * follower's copy had too: the worst case) */
    append_garbage(L);
    append_garbage(M);
    uint64_t before = cl_mirror_last(MI);
    leader_open(); /* cuts the torn tail: part of the recovery group */
    ck_assert_uint_eq(cl_mirror_last(MI), before + 1);
    apply_group(dfd, before + 1, SIZE_MAX);
    close(dfd);
    same_tree(L, M);
    check_boundary(M, before + 1);
    leader_stop();
}
END_TEST

/* Out of space in the middle of a batch: the leader's disk holds a half-written write that was
 * never captured; the retry writes it all again and that is what the group says. */
static int fail_writes;
static ssize_t enospc_pwrite(int fd, const void *p, size_t n, off_t off)
{
    if (fail_writes == 2) { /* half of it lands, then the disk is full */
        fail_writes = 1;
        return pwrite(fd, p, n > 1 ? n / 2 : n, off);
    }
    if (fail_writes == 1) {
        errno = ENOSPC;
        return -1;
    }
    return pwrite(fd, p, n, off);
}

START_TEST(out_of_space_retries_are_mirrored)
{
    rng = 77;
    leader_start(8192);
    qm_queue *q = ldeclare(2);
    for (int i = 0; i < 20; i++)
        lpublish(q);
    commit();
    uint64_t before = cl_mirror_last(MI);
    st_log__pwrite = enospc_pwrite;
    fail_writes = 2;
    for (int i = 0; i < 20; i++)
        lpublish(q);
    ck_assert_int_eq(persist_commit(LP, err, sizeof err), -2);
    ck_assert_uint_eq(cl_mirror_last(MI), before); /* no group for a batch that did not end */
    fail_writes = 0;
    /* the retry waits STALL_RETRY_MS: bounded wait for the group */
    for (int i = 0; i < 500 && cl_mirror_last(MI) == before; i++) {
        int rc = persist_commit(LP, err, sizeof err);
        ck_assert_msg(rc == 0 || rc == -2, "%s", err);
        if (cl_mirror_last(MI) == before)
            usleep(10000);
    }
    st_log__pwrite = pwrite;
    ck_assert_uint_gt(cl_mirror_last(MI), before);
    for (int i = 0; i < 10; i++)
        lpublish(q);
    commit();
    int dfd = dir_fd(M);
    for (uint64_t idx = 1; idx <= cl_mirror_last(MI); idx++)
        apply_group(dfd, idx, SIZE_MAX);
    close(dfd);
    check_boundary(M, cl_mirror_last(MI));
    same_tree(L, M);
    leader_stop();
}
END_TEST

/* Issue 46: a batch's group is closed, and handed to the replication server, once the batch
 * has made its writes and before its fdatasync, so followers sync it while the leader does; the
 * leader's durable index moves only once its own sync is done. */
static uint64_t spy_last[64], spy_durable[64];
static int spy_n;
static int spy_fdatasync(int fd)
{
    if (spy_n < 64) {
        spy_last[spy_n] = cl_mirror_last(MI);
        spy_durable[spy_n] = cl_mirror_durable(MI);
        spy_n++;
    }
    return fdatasync(fd);
}

static uint64_t note_idx[64], note_durable[64];
static int note_n;
static void note_group(void *ctx, uint64_t idx, uint64_t bytes)
{
    (void)ctx;
    (void)bytes;
    if (note_n < 64) {
        note_idx[note_n] = idx;
        note_durable[note_n] = cl_mirror_durable(MI);
        note_n++;
    }
}

START_TEST(a_group_is_shipped_before_its_batch_syncs)
{
    for (int kick = 0; kick < 2; kick++) {
        if (kick) {
            teardown();
            setup();
        }
        rng = 46;
        use_kick = kick; /* the batch on this thread, then on the sync thread */
        leader_sync = 1; /* real fdatasyncs: the spy sees each */
        leader_start(1 << 20);
        qm_queue *q = ldeclare(1);
        commit();
        uint64_t before = cl_mirror_last(MI);
        ck_assert_uint_eq(cl_mirror_durable(MI), before);
        for (int i = 0; i < 5; i++)
            lpublish(q);
        char want[32];
        snprintf(want, sizeof want, "b%llu-", (unsigned long long)body_no);
        spy_n = note_n = 0;
        cl_mirror_set_notify(MI, note_group, NULL);
        st_log__fdatasync = spy_fdatasync;
        commit();
        st_log__fdatasync = fdatasync;
        cl_mirror_set_notify(MI, NULL, NULL);
        /* the batch's fdatasync ran with its group already made, and not durable */
        ck_assert_int_ge(spy_n, 1);
        ck_assert_uint_eq(spy_last[spy_n - 1], before + 1);
        ck_assert_uint_eq(spy_durable[spy_n - 1], before);
        /* the server heard of it before the sync (durable still before), then again after */
        ck_assert_int_eq(note_n, 2);
        ck_assert_uint_eq(note_idx[0], before + 1);
        ck_assert_uint_eq(note_durable[0], before);
        ck_assert_uint_eq(note_idx[1], before + 1);
        ck_assert_uint_eq(note_durable[1], before + 1);
        /* one group for the generation, which it now names; it holds the batch's records */
        ck_assert_uint_eq(cl_mirror_last(MI), before + 1);
        ck_assert_uint_eq(cl_mirror_durable(MI), before + 1);
        ck_assert_uint_eq(cl_mirror_gen_of(MI, before + 1), persist_local_durable(LP));
        ck_assert_uint_gt(cl_mirror_gen_of(MI, before + 1), cl_mirror_gen_of(MI, before));
        uint8_t *g;
        size_t len;
        ck_assert_int_eq(cl_mirror_group(MI, before + 1, &g, &len, NULL), 0);
        ck_assert_ptr_nonnull(memmem(g, len, want, strlen(want)));
        sl_free(g);
        /* and the mirror built from the groups recovers to the leader's model */
        commit();
        int dfd = dir_fd(M);
        for (uint64_t idx = 1; idx <= cl_mirror_last(MI); idx++)
            apply_group(dfd, idx, SIZE_MAX);
        close(dfd);
        check_boundary(M, cl_mirror_last(MI));
        leader_stop();
        use_kick = leader_sync = 0;
    }
}
END_TEST

START_TEST(bulk_copy_while_the_workload_goes_on)
{
    rng = seed_of(7) | 1;
    leader_start(8192);
    for (int k = 0; k < 150; k++)
        step();
    commit();
    cl_mirror_snap *s = cl_mirror_snapshot(MI);
    ck_assert_ptr_nonnull(s);
    uint64_t from = cl_mirror_snap_idx(s);
    ck_assert_uint_gt(cl_mirror_snap_count(s), 2);
    int jfd = dir_fd(J);
    size_t n = cl_mirror_snap_count(s);
    uint8_t buf[3000];
    for (size_t i = 0; i < n; i++) {
        uint64_t size;
        const char *name = cl_mirror_snap_name(s, i, &size);
        ck_assert_ptr_nonnull(name);
        ck_assert_int_eq(cl_mirror_copy_write(jfd, name, 0, "", 0, err, sizeof err), 0);
        for (uint64_t off = 0; off < size;) {
            long got = cl_mirror_snap_read(s, i, off, buf, sizeof buf);
            ck_assert_msg(got > 0, "%s at %llu: %ld", name, (unsigned long long)off, got);
            ck_assert_int_eq(
                cl_mirror_copy_write(jfd, name, off, buf, (size_t)got, err, sizeof err), 0);
            off += (uint64_t)got;
            if (rnd() % 4 == 0) /* the leader goes on meanwhile */
                step();
        }
        for (int k = 0; k < 5; k++)
            step();
    }
    cl_mirror_snapshot_free(s);
    commit();
    ck_assert_int_eq(cl_mirror_copy_finish(jfd, err, sizeof err), 0);
    uint64_t last = cl_mirror_last(MI);
    ck_assert_uint_gt(last, from + 10);
    for (uint64_t idx = from + 1; idx <= last; idx++)
        apply_group(jfd, idx, SIZE_MAX);
    close(jfd);
    check_boundary(J, last);
    same_tree(L, J);
    leader_stop();
}
END_TEST

/* ---- hand-made groups ---- */

static void put16(sl_buf *b, uint16_t v)
{
    uint8_t p[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    sl_buf_append(b, p, 2);
}
static void put32(sl_buf *b, uint32_t v)
{
    uint8_t p[4];
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    sl_buf_append(b, p, 4);
}
static void put64(sl_buf *b, uint64_t v)
{
    put32(b, (uint32_t)v);
    put32(b, (uint32_t)(v >> 32));
}

typedef struct hop {
    int kind;
    const char *name, *name2;
    uint64_t arg;
    const char *data;
} hop;

static sl_buf make_group(const hop *ops, int n)
{
    sl_buf b;
    sl_buf_init(&b);
    sl_buf_append(&b, "SLMG", 4);
    put32(&b, 1);
    put64(&b, 7);
    put64(&b, 1);
    put64(&b, 3);
    put32(&b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        sl_buf_put_u8(&b, (uint8_t)ops[i].kind);
        put16(&b, (uint16_t)strlen(ops[i].name));
        sl_buf_append(&b, ops[i].name, strlen(ops[i].name));
        switch (ops[i].kind) {
        case CL_MIRROR_OP_WRITE:
            put64(&b, ops[i].arg);
            put32(&b, (uint32_t)strlen(ops[i].data));
            sl_buf_append(&b, ops[i].data, strlen(ops[i].data));
            break;
        case CL_MIRROR_OP_CREATE:
            sl_buf_put_u8(&b, (uint8_t)ops[i].arg);
            break;
        case CL_MIRROR_OP_TRUNCATE:
            put64(&b, ops[i].arg);
            break;
        case CL_MIRROR_OP_RENAME:
            put16(&b, (uint16_t)strlen(ops[i].name2));
            sl_buf_append(&b, ops[i].name2, strlen(ops[i].name2));
            break;
        }
    }
    put32(&b, st_crc32c(0, b.data, b.len));
    return b;
}

/* Every entry under BASE (recursively), as one string of "path size;" sorted. */
static char listing[65536];
static size_t listing_len;
static int list_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    listing_len += (size_t)snprintf(listing + listing_len, sizeof listing - listing_len, "%s %lld;",
                                    p, S_ISREG(sb->st_mode) ? (long long)sb->st_size : -1LL);
    return 0;
}
static char *tree(void)
{
    listing_len = 0;
    listing[0] = 0;
    nftw(BASE, list_cb, 16, FTW_PHYS);
    return sl_xstrdup(listing);
}

START_TEST(hostile_and_damaged_groups_are_refused)
{
    int dfd = dir_fd(M);
    /* a good group first: the directory has something to lose */
    hop good[] = {{CL_MIRROR_OP_MKDIR, "msgs", NULL, 0, NULL},
                  {CL_MIRROR_OP_CREATE, "msgs/a.seg", NULL, 0, NULL},
                  {CL_MIRROR_OP_WRITE, "msgs/a.seg", NULL, 0, "hello"},
                  {CL_MIRROR_OP_SYNC, "msgs/a.seg", NULL, 0, NULL},
                  {CL_MIRROR_OP_DIRSYNC, "msgs", NULL, 0, NULL}};
    sl_buf g = make_group(good, 5);
    ck_assert_msg(cl_mirror_apply(dfd, g.data, g.len, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(cl_mirror_apply(dfd, g.data, g.len, err, sizeof err) == 0, "again: %s", err);
    sl_buf_free(&g);
    char *before = tree();

    const char *bad_names[] = {
        "../x",    "/etc/passwd",    "msgs/../../x",    "msgs/..",  "a/b/c/", "msgs/",    "/msgs/x",
        "msgs//x", "replica/state",  "space-reserve/x", "msgs/a b", ".",      "msgs/x\n", "",
        "a/b/c/d", "streams/../x/y", "streams/a/b/"};
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
        /* the hostile op comes after a harmless one: nothing at all may be applied */
        hop ops[] = {{CL_MIRROR_OP_WRITE, "msgs/a.seg", NULL, 0, "XXXXX"},
                     {CL_MIRROR_OP_WRITE, bad_names[i], NULL, 0, "pwned"}};
        g = make_group(ops, 2);
        err[0] = 0;
        ck_assert_int_eq(cl_mirror_apply(dfd, g.data, g.len, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "refused") || strstr(err, "top-level"), "%s: %s", bad_names[i],
                      err);
        sl_buf_free(&g);
    }
    hop ren[] = {{CL_MIRROR_OP_RENAME, "msgs/a.seg", "../../b", 0, NULL}};
    g = make_group(ren, 1);
    ck_assert_int_eq(cl_mirror_apply(dfd, g.data, g.len, err, sizeof err), -1);
    sl_buf_free(&g);
    hop unl[] = {{CL_MIRROR_OP_UNLINK, "..", NULL, 0, NULL}};
    g = make_group(unl, 1);
    ck_assert_int_eq(cl_mirror_apply(dfd, g.data, g.len, err, sizeof err), -1);
    sl_buf_free(&g);
    hop dsync[] = {{CL_MIRROR_OP_DIRSYNC, "msgs/a.seg", NULL, 0, NULL}};
    g = make_group(dsync, 1);
    ck_assert_int_eq(cl_mirror_apply(dfd, g.data, g.len, err, sizeof err), -1);
    sl_buf_free(&g);

    /* damage: every single flipped byte and every truncation of a good group is refused */
    hop ops[] = {{CL_MIRROR_OP_WRITE, "msgs/a.seg", NULL, 0, "XXXXX"},
                 {CL_MIRROR_OP_TRUNCATE, "msgs/a.seg", NULL, 2, NULL}};
    g = make_group(ops, 2);
    for (size_t i = 0; i < g.len; i++) {
        g.data[i] ^= 0x40;
        ck_assert_int_eq(cl_mirror_apply(dfd, g.data, g.len, err, sizeof err), -1);
        g.data[i] ^= 0x40;
    }
    for (size_t n = 0; n < g.len; n++)
        ck_assert_int_eq(cl_mirror_apply(dfd, g.data, n, err, sizeof err), -1);
    sl_buf_free(&g);
    char *after = tree();
    ck_assert_str_eq(before, after);
    sl_free(before);
    sl_free(after);
    /* a symbolic link where a file is expected is not followed */
    char target[600], link_path[600];
    snprintf(target, sizeof target, "%s/outside", BASE);
    snprintf(link_path, sizeof link_path, "%s/msgs/l.seg", M);
    ck_assert_int_eq(symlink(target, link_path), 0);
    hop viasym[] = {{CL_MIRROR_OP_WRITE, "msgs/l.seg", NULL, 0, "pwned"}};
    g = make_group(viasym, 1);
    ck_assert_int_eq(cl_mirror_apply(dfd, g.data, g.len, err, sizeof err), -1);
    sl_buf_free(&g);
    struct stat st;
    ck_assert_int_eq(stat(target, &st), -1);
    /* nor a symbolic link where a directory is expected, at any depth */
    char sdir[600], slink[600];
    snprintf(sdir, sizeof sdir, "%s/streams", M);
    ck_assert_int_eq(mkdir(sdir, 0755), 0);
    ck_assert_int_eq(mkdir(target, 0755), 0);
    snprintf(slink, sizeof slink, "%s/streams/0000000000000001", M);
    ck_assert_int_eq(symlink(target, slink), 0);
    hop viadir[] = {{CL_MIRROR_OP_WRITE, "streams/0000000000000001/x.seg", NULL, 0, "pwned"}};
    g = make_group(viadir, 1);
    ck_assert_int_eq(cl_mirror_apply(dfd, g.data, g.len, err, sizeof err), -1);
    sl_buf_free(&g);
    char outside[700];
    snprintf(outside, sizeof outside, "%s/x.seg", target);
    ck_assert_int_eq(stat(outside, &st), -1);
    /* a directory op names a directory (1 or 2 components), a file op a file (2 or 3) */
    hop deep_dir[] = {{CL_MIRROR_OP_MKDIR, "streams/a/b", NULL, 0, NULL}};
    g = make_group(deep_dir, 1);
    ck_assert_int_eq(cl_mirror_apply(dfd, g.data, g.len, err, sizeof err), -1);
    sl_buf_free(&g);
    close(dfd);
}
END_TEST

/* A stream's entries, as (offset, CRC of the payload) pairs, into out (at most max). */
typedef struct sdig {
    uint64_t off[4096];
    uint32_t crc[4096];
    size_t n;
} sdig;

static int sdig_fn(void *ctx, uint64_t offset, int64_t ts, const uint8_t *p, size_t len,
                   unsigned flags)
{
    sdig *d = ctx;
    ck_assert_uint_lt(d->n, 4096);
    d->off[d->n] = offset;
    d->crc[d->n++] = st_crc32c((uint32_t)ts ^ flags, p, len);
    return 0;
}

static void sdigest(st_stream *s, sdig *d)
{
    memset(d, 0, sizeof *d);
    st_stream_reader r = {0};
    uint64_t from = 0, nx;
    for (int i = 0; i < 100000; i++) {
        long n = st_stream_read(s, &r, from, SIZE_MAX, sdig_fn, d, &nx, err, sizeof err);
        ck_assert_msg(n >= 0, "%s", err);
        if (n == 0)
            break;
        from = nx;
    }
    st_stream_reader_free(&r);
}

/* The leader's stream q as a replica under dir holds it: opened there, the same entries. */
static void same_stream(qm_queue *q, const char *dir)
{
    const char *ld = st_stream_dir(q->stream);
    ck_assert(!strncmp(ld, L, strlen(L)));
    char rd[600];
    snprintf(rd, sizeof rd, "%s%s", dir, ld + strlen(L));
    static sdig a, b;
    sdigest(q->stream, &a);
    st_stream_options o = {.no_sync = 1};
    st_stream *r = st_stream_open(rd, &o, err, sizeof err);
    ck_assert_msg(r != NULL, "replica %s: %s", rd, err);
    sdigest(r, &b);
    ck_assert_uint_eq(st_stream_first(r), st_stream_first(q->stream));
    ck_assert_uint_eq(st_stream_end(r), st_stream_end(q->stream));
    ck_assert_uint_eq(a.n, b.n);
    for (size_t i = 0; i < a.n; i++) {
        ck_assert_uint_eq(a.off[i], b.off[i]);
        ck_assert_uint_eq(a.crc[i], b.crc[i]);
    }
    st_stream_close(r);
}

static void apply_upto(int dfd, uint64_t *applied)
{
    for (uint64_t idx = *applied + 1; idx <= cl_mirror_last(MI); idx++)
        apply_group(dfd, idx, SIZE_MAX);
    *applied = cl_mirror_last(MI);
}

START_TEST(a_stream_is_mirrored_and_copied)
{
    rng = 47;
    use_kick = 1; /* the streams' batches on the sync thread, as in the broker */
    leader_start(1 << 20);
    /* small segments and retention: files are made and deleted as the stream goes */
    sl_buf args;
    sl_buf_init(&args);
    size_t m = amqp_tbl_begin(&args);
    amqp_tbl_put_str(&args, "x-queue-type", amqp_cstr("stream"));
    amqp_tbl_put_long(&args, "x-stream-max-segment-size-bytes", 4000);
    amqp_tbl_put_long(&args, "x-max-length-bytes", 20000);
    amqp_tbl_end(&args, m);
    qm_queue_decl d = {"st", 2, 1, 0, 0, NULL, {sl_buf_head(&args) + 4, sl_buf_unread(&args) - 4},
                       0};
    qm_queue *q = NULL;
    ck_assert_msg(qm_queue_declare(LV, &d, &q, NULL, err, sizeof err) == SL_OK, "%s", err);
    ck_assert_ptr_nonnull(q->stream);
    qm_queue *plain = ldeclare(0);
    commit();
    int mfd = dir_fd(M), jfd = dir_fd(J);
    uint64_t applied = 0, copied = 0;
    cl_mirror_snap *snap = NULL;
    for (int round = 0; round < 40; round++) {
        int n = 1 + (int)(rnd() % 12);
        for (int k = 0; k < n; k++)
            lpublish(q);
        if (rnd() % 3 == 0)
            lpublish(plain);
        commit();
        if (round % 8 == 7) {
            apply_upto(mfd, &applied);
            same_stream(q, M);
        }
        if (round == 20) /* a full copy in the middle: the stream's files are in it */
            snap = cl_mirror_snapshot(MI);
    }
    ck_assert_uint_gt(st_stream_first(q->stream), 0); /* retention dropped segments */
    apply_upto(mfd, &applied);
    same_stream(q, M);

    ck_assert_ptr_nonnull(snap);
    copied = cl_mirror_snap_idx(snap);
    int streams_files = 0;
    for (size_t i = 0; i < cl_mirror_snap_count(snap); i++) {
        uint64_t size;
        const char *name = cl_mirror_snap_name(snap, i, &size);
        streams_files += !strncmp(name, "streams/", 8);
        ck_assert_int_eq(cl_mirror_copy_write(jfd, name, 0, "", 0, err, sizeof err), 0);
        char buf[8192];
        for (uint64_t off = 0; off < size;) {
            long got = cl_mirror_snap_read(snap, i, off, buf, sizeof buf);
            ck_assert_int_gt(got, 0);
            ck_assert_int_eq(
                cl_mirror_copy_write(jfd, name, off, buf, (size_t)got, err, sizeof err), 0);
            off += (uint64_t)got;
        }
    }
    cl_mirror_snapshot_free(snap);
    ck_assert_int_gt(streams_files, 1);
    ck_assert_int_eq(cl_mirror_copy_finish(jfd, err, sizeof err), 0);
    apply_upto(jfd, &copied);
    same_stream(q, J);

    /* the stream's deletion: its files and directory go from the replica too */
    char rd[600];
    snprintf(rd, sizeof rd, "%s%s", M, st_stream_dir(q->stream) + strlen(L));
    ck_assert_int_eq(qm_queue_delete(q, 0, NULL, err, sizeof err), SL_OK);
    commit();
    apply_upto(mfd, &applied);
    struct stat st;
    ck_assert_int_eq(stat(rd, &st), -1);
    ck_assert_int_eq(errno, ENOENT);
    close(mfd);
    close(jfd);
    sl_buf_free(&args);
    leader_stop();
    use_kick = 0;
}
END_TEST

/* A generation that only appends to a stream (no messages batch: its ST_FOP_WRITTEN is the
 * streams', reported by persist) is shipped before the leader syncs it, as one with messages. */
START_TEST(a_stream_only_generation_is_shipped_before_its_syncs)
{
    rng = 48;
    use_kick = 1;
    leader_start(1 << 20);
    sl_buf args;
    sl_buf_init(&args);
    size_t m = amqp_tbl_begin(&args);
    amqp_tbl_put_str(&args, "x-queue-type", amqp_cstr("stream"));
    amqp_tbl_end(&args, m);
    qm_queue_decl d = {"st", 2, 1, 0, 0, NULL, {sl_buf_head(&args) + 4, sl_buf_unread(&args) - 4},
                       0};
    qm_queue *q = NULL;
    ck_assert_msg(qm_queue_declare(LV, &d, &q, NULL, err, sizeof err) == SL_OK, "%s", err);
    commit();
    commit();
    uint64_t before = cl_mirror_last(MI);
    for (int i = 0; i < 3; i++)
        lpublish(q);
    char want[32];
    snprintf(want, sizeof want, "b%llu-", (unsigned long long)body_no);
    spy_n = note_n = 0;
    cl_mirror_set_notify(MI, note_group, NULL);
    st_log__fdatasync = spy_fdatasync;
    commit();
    st_log__fdatasync = fdatasync;
    cl_mirror_set_notify(MI, NULL, NULL);
    /* the stream's fdatasync ran with the group already made, and not durable */
    ck_assert_int_ge(spy_n, 1);
    ck_assert_uint_eq(spy_last[0], before + 1);
    ck_assert_uint_eq(spy_durable[0], before);
    ck_assert_int_eq(note_n, 2);
    ck_assert_uint_eq(note_idx[0], before + 1);
    ck_assert_uint_eq(note_durable[0], before);
    ck_assert_uint_eq(note_idx[1], before + 1);
    ck_assert_uint_eq(note_durable[1], before + 1);
    ck_assert_uint_eq(cl_mirror_last(MI), before + 1);
    ck_assert_uint_eq(cl_mirror_gen_of(MI, before + 1), persist_local_durable(LP));
    uint8_t *g;
    size_t len;
    ck_assert_int_eq(cl_mirror_group(MI, before + 1, &g, &len, NULL), 0);
    ck_assert_ptr_nonnull(memmem(g, len, want, strlen(want)));
    sl_free(g);
    int mfd = dir_fd(M);
    uint64_t applied = 0;
    apply_upto(mfd, &applied);
    same_stream(q, M);
    close(mfd);
    sl_buf_free(&args);
    leader_stop();
    use_kick = 0;
}
END_TEST

START_TEST(replica_state_round_trip)
{
    uint64_t last = 99;
    cl_repl_epochs h;
    cl_repl_epochs_init(&h);
    ck_assert_int_eq(cl_replica_state_load(M, &last, &h), 0); /* none yet */
    ck_assert_uint_eq(last, 0);
    ck_assert_uint_eq(h.n, 0);
    cl_repl_epochs_note(&h, 1, 1);
    cl_repl_epochs_note(&h, 3, 40);
    cl_repl_epochs_note(&h, 4, 41);
    ck_assert_int_eq(cl_replica_state_save(M, 57, &h), 0);
    cl_repl_epochs h2;
    cl_repl_epochs_init(&h2);
    ck_assert_int_eq(cl_replica_state_load(M, &last, &h2), 0);
    ck_assert_uint_eq(last, 57);
    ck_assert_uint_eq(h2.n, 3);
    ck_assert_uint_eq(h2.v[1].epoch, 3);
    ck_assert_uint_eq(h2.v[1].first, 40);
    ck_assert_uint_eq(cl_repl_epochs_last(&h2), 4);
    /* damaged: refused, not guessed */
    char path[600];
    snprintf(path, sizeof path, "%s/replica/state", M);
    int fd = open(path, O_RDWR);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, 10), 1);
    b ^= 1;
    ck_assert_int_eq(pwrite(fd, &b, 1, 10), 1);
    close(fd);
    errno = 0;
    ck_assert_int_eq(cl_replica_state_load(M, &last, &h2), -1);
    ck_assert_int_eq(errno, EILSEQ);
    cl_repl_epochs_free(&h);
    cl_repl_epochs_free(&h2);
}
END_TEST

/* replica/pos carries the position between state saves, in place: load takes the higher of the
 * two under the same history, ignores a slot of another history, and survives a torn slot. */
START_TEST(replica_pos_raises_the_state)
{
    cl_repl_epochs h, h2;
    cl_repl_epochs_init(&h);
    cl_repl_epochs_init(&h2);
    cl_repl_epochs_note(&h, 2, 1);
    ck_assert_int_eq(cl_replica_state_save(M, 10, &h), 0);
    cl_replica_pos *p = cl_replica_pos_open(M);
    ck_assert_ptr_nonnull(p);
    uint64_t last = 0;
    ck_assert_int_eq(cl_replica_state_load(M, &last, &h2), 0);
    ck_assert_uint_eq(last, 10); /* an empty pos file: the state alone */
    ck_assert_int_eq(cl_replica_pos_save(p, 11, &h), 0);
    ck_assert_int_eq(cl_replica_pos_save(p, 12, &h), 0);
    ck_assert_int_eq(cl_replica_state_load(M, &last, &h2), 0);
    ck_assert_uint_eq(last, 12);
    ck_assert_uint_eq(h2.n, 1);
    /* a torn newest slot (slot 1 holds 12): the other one's 11, never a guess above it */
    char path[600];
    snprintf(path, sizeof path, "%s/replica/pos", M);
    int fd = open(path, O_RDWR);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, 512 + 9), 1);
    b ^= 0x40;
    ck_assert_int_eq(pwrite(fd, &b, 1, 512 + 9), 1);
    ck_assert_int_eq(cl_replica_state_load(M, &last, &h2), 0);
    ck_assert_uint_eq(last, 11);
    /* a new epoch saved in the state: the old history's slots no longer count */
    cl_repl_epochs_note(&h, 3, 12);
    ck_assert_int_eq(cl_replica_state_save(M, 12, &h), 0);
    ck_assert_int_eq(cl_replica_pos_save(p, 13, &h), 0);
    ck_assert_int_eq(cl_replica_state_load(M, &last, &h2), 0);
    ck_assert_uint_eq(last, 13);
    ck_assert_uint_eq(h2.n, 2);
    cl_repl_epochs h3;
    cl_repl_epochs_init(&h3);
    cl_repl_epochs_note(&h3, 2, 1);
    /* slot 1 is torn; slot 0 holds 13 under h (2 epochs): a state of the 1-epoch history
     * does not take it */
    ck_assert_int_eq(cl_replica_state_save(M, 10, &h3), 0);
    ck_assert_int_eq(cl_replica_state_load(M, &last, &h2), 0);
    ck_assert_uint_eq(last, 10);
    close(fd);
    cl_replica_pos_close(p);
    cl_repl_epochs_free(&h);
    cl_repl_epochs_free(&h2);
    cl_repl_epochs_free(&h3);
}
END_TEST

/* The ring keeps the newest groups within its bound; the generation map outlives the bytes. */
START_TEST(ring_is_bounded)
{
    MI = cl_mirror_leader_new(L, 20000);
    ck_assert_ptr_nonnull(MI);
    ck_assert_ptr_null(cl_mirror_leader_new(M, 1)); /* one per process */
    cl_mirror_start(MI, 5, 100);
    /* the shim the wiring uses (no model recorded: none is compared here) */
    LOPT = (persist_options){.no_sync = 1,
                             .segment_size = 1 << 20,
                             .batch_hook = cl_mirror_persist_hook,
                             .batch_ctx = MI};
    rng = 11;
    leader_open();
    ck_assert_uint_eq(cl_mirror_last(MI), 101); /* the recovery group */
    ck_assert_uint_eq(cl_mirror_gen_of(MI, 101), 0);
    qm_queue *q = ldeclare(0);
    for (int i = 0; i < 200; i++) {
        lpublish(q);
        commit();
    }
    uint64_t last = cl_mirror_last(MI);
    ck_assert_uint_eq(last, 301);
    uint64_t first = cl_mirror_first_kept(MI);
    ck_assert_uint_gt(first, 102);
    ck_assert_uint_le(first, last);
    uint8_t *g;
    size_t len;
    uint64_t ep;
    ck_assert_int_eq(cl_mirror_group(MI, first - 1, &g, &len, &ep), -1);
    ck_assert_int_eq(cl_mirror_group(MI, last + 1, &g, &len, &ep), -1);
    ck_assert_int_eq(cl_mirror_group(MI, last, &g, &len, &ep), 0);
    ck_assert_uint_eq(ep, 5);
    sl_free(g);
    /* generations: each commit one group, in order */
    ck_assert_uint_eq(cl_mirror_gen_of(MI, 110), cl_mirror_gen_of(MI, 109) + 1);
    ck_assert_uint_eq(cl_mirror_idx_of_gen(MI, cl_mirror_gen_of(MI, 150)), 150);
    ck_assert_uint_eq(cl_mirror_idx_of_gen(MI, persist_local_durable(LP)), last);
    leader_stop();
}
END_TEST

/* The release gate: with it, nothing counts as durable before the cluster released it;
 * without it (a single node) durability is the disk's alone. */
START_TEST(release_gate_holds_confirms)
{
    for (int gate = 0; gate < 2; gate++) {
        qm_node *n = qm_node_new("g");
        LV = qm_vhost_create(n, "/");
        LN = n;
        char dir[600];
        snprintf(dir, sizeof dir, "%s/g%d", BASE, gate);
        persist_options o = {.no_sync = 1, .repl_gate = gate};
        LP = persist_open(dir, n, &o, err, sizeof err);
        ck_assert_ptr_nonnull(LP);
        qm_queue *q = ldeclare(0);
        lpublish(q);
        uint64_t t = persist_ticket(LP);
        ck_assert_uint_gt(t, 0);
        commit();
        ck_assert_uint_ge(persist_local_durable(LP), t);
        if (!gate) {
            ck_assert_uint_ge(persist_durable(LP), t);
            ck_assert_uint_ge(persist_done(LP), t);
        } else {
            ck_assert_uint_lt(persist_durable(LP), t);
            ck_assert_uint_lt(persist_done(LP), t);
            persist_repl_release(LP, t - 1);
            ck_assert_uint_lt(persist_done(LP), t);
            persist_repl_release(LP, t);
            ck_assert_uint_ge(persist_durable(LP), t);
            ck_assert_uint_ge(persist_done(LP), t);
            persist_repl_release(LP, 1); /* never goes back */
            ck_assert_uint_ge(persist_durable(LP), t);
        }
        persist_close(LP);
        qm_node_free(n);
        LP = NULL;
        LN = NULL;
        LV = NULL;
    }
}
END_TEST

/* With no mirror installed nothing is captured and no group is made (single nodes). */
START_TEST(no_mirror_no_capture)
{
    LN = qm_node_new("x");
    LV = qm_vhost_create(LN, "/");
    persist_options o = {.no_sync = 1};
    LP = persist_open(L, LN, &o, err, sizeof err);
    ck_assert_ptr_nonnull(LP);
    lpublish(ldeclare(0));
    commit();
    persist_close(LP);
    qm_node_free(LN);
    LP = NULL;
    /* a mirror installed for another directory ignores this one */
    MI = cl_mirror_leader_new(M, 1 << 20);
    LN = qm_node_new("x");
    LV = qm_vhost_create(LN, "/");
    LP = persist_open(L, LN, &o, err, sizeof err);
    lpublish(lq(0));
    commit();
    ck_assert_uint_eq(cl_mirror_batch(MI, 1, 1), 1);
    uint8_t *g;
    size_t len;
    uint32_t nops = 99;
    ck_assert_int_eq(cl_mirror_group(MI, 1, &g, &len, NULL), 0);
    ck_assert_int_eq(cl_mirror_group_check(g, len, NULL, NULL, NULL, &nops, err, sizeof err), 0);
    ck_assert_uint_eq(nops, 0);
    sl_free(g);
    persist_close(LP);
    qm_node_free(LN);
    LP = NULL;
    LN = NULL;
    LV = NULL;
    cl_mirror_free(MI);
    MI = NULL;
}
END_TEST

/* The follower's applier: groups applied one after another leave their barriers to the sync
 * at the end of the batch (one fdatasync per file, not per group), and a workload applied
 * in batches of random size through one applier (its descriptors kept across TIDY's unlinks
 * and renames) recovers at every batch end and ends byte for byte the leader's directory. */
START_TEST(the_follower_applier_defers_barriers_to_its_sync)
{
    int dfd = dir_fd(M);
    cl_mirror_applier *ap = cl_mirror_applier_new(dfd, 0);
    hop first[] = {{CL_MIRROR_OP_MKDIR, "msgs", NULL, 0, NULL},
                   {CL_MIRROR_OP_CREATE, "msgs/a.seg", NULL, 0, NULL},
                   {CL_MIRROR_OP_WRITE, "msgs/a.seg", NULL, 0, "hello"},
                   {CL_MIRROR_OP_SYNC, "msgs/a.seg", NULL, 0, NULL},
                   {CL_MIRROR_OP_DIRSYNC, "msgs", NULL, 0, NULL}};
    sl_buf g = make_group(first, 5);
    ck_assert_msg(cl_mirror_applier_apply(ap, g.data, g.len, err, sizeof err) == 0, "%s", err);
    sl_buf_free(&g);
    for (uint64_t k = 1; k < 50; k++) {
        hop ops[] = {{CL_MIRROR_OP_WRITE, "msgs/a.seg", NULL, 5 * k, "hello"},
                     {CL_MIRROR_OP_SYNC, "msgs/a.seg", NULL, 0, NULL}};
        g = make_group(ops, 2);
        ck_assert_msg(cl_mirror_applier_apply(ap, g.data, g.len, err, sizeof err) == 0, "%s", err);
        sl_buf_free(&g);
    }
    ck_assert_uint_eq(cl_mirror_applier_syncs(ap), 0); /* 50 groups' barriers wait */
    ck_assert_msg(cl_mirror_applier_sync(ap, err, sizeof err) == 0, "%s", err);
    /* the file once, its directory (a new name), the top (a new directory): not 50 */
    ck_assert_uint_eq(cl_mirror_applier_syncs(ap), 3);
    ck_assert_msg(cl_mirror_applier_sync(ap, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(cl_mirror_applier_syncs(ap), 3); /* nothing new: nothing to sync */
    char path[700];
    snprintf(path, sizeof path, "%s/msgs/a.seg", M);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_size, 250);
    cl_mirror_applier_free(ap);
    close(dfd);
    rm_rf(M);
    ck_assert_int_eq(mkdir(M, 0755), 0);

    rng = seed_of(7) | 1;
    body_no = 0;
    tidy_freed = tidy_compacted = restarts = 0;
    leader_start(8192);
    for (int k = 0; k < 1000; k++)
        step();
    commit();
    uint64_t last = cl_mirror_last(MI);
    ck_assert_uint_gt(last, 100);
    dfd = dir_fd(M);
    ap = cl_mirror_applier_new(dfd, CL_MIRROR_APPLY_NOSYNC);
    uint64_t batches = 0;
    for (uint64_t idx = 1; idx <= last;) {
        uint64_t end = idx + rnd() % 16;
        if (end > last)
            end = last;
        for (; idx <= end; idx++) {
            uint8_t *gb;
            size_t len;
            ck_assert_int_eq(cl_mirror_group(MI, idx, &gb, &len, NULL), 0);
            ck_assert_msg(cl_mirror_applier_apply(ap, gb, len, err, sizeof err) == 0, "%llu: %s",
                          (unsigned long long)idx, err);
            sl_free(gb);
        }
        ck_assert_msg(cl_mirror_applier_sync(ap, err, sizeof err) == 0, "%s", err);
        batches++;
        if (end == last || rnd() % 4 == 0)
            check_boundary(M, end);
    }
    cl_mirror_applier_free(ap);
    close(dfd);
    ck_assert_uint_gt(batches, 10);
    ck_assert_uint_gt(tidy_freed, 0); /* the workload unlinked and renamed under the applier */
    same_tree(L, M);
    leader_stop();
}
END_TEST

static Suite *mirror_suite(void)
{
    Suite *s = suite_create("mirror");
    TCase *tc = tcase_create("mirror");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, workload_mirrors_at_every_boundary);
    tcase_add_test(tc, recovery_changes_are_the_first_group);
    tcase_add_test(tc, out_of_space_retries_are_mirrored);
    tcase_add_test(tc, a_group_is_shipped_before_its_batch_syncs);
    tcase_add_test(tc, bulk_copy_while_the_workload_goes_on);
    tcase_add_test(tc, hostile_and_damaged_groups_are_refused);
    tcase_add_test(tc, a_stream_is_mirrored_and_copied);
    tcase_add_test(tc, a_stream_only_generation_is_shipped_before_its_syncs);
    tcase_add_test(tc, the_follower_applier_defers_barriers_to_its_sync);
    tcase_add_test(tc, replica_state_round_trip);
    tcase_add_test(tc, replica_pos_raises_the_state);
    tcase_add_test(tc, ring_is_bounded);
    tcase_add_test(tc, release_gate_holds_confirms);
    tcase_add_test(tc, no_mirror_no_capture);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(mirror_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
