/* test_cluster.c - the cluster's settings, epoch history, and the replication / ISR state
 * machines (src/cluster/repl.h) under a seeded simulator.
 *
 * The simulator runs three to five nodes, an etcd (leader key under a lease, epoch, ISR) and
 * a network that drops, delays and so reorders every replication message, over simulated
 * milliseconds; nodes crash (losing what was written but not synced), restart, and pause
 * (SIGSTOP) for longer than the lease. Disks sync after random delays. Thousands of schedules
 * per run (SLUICE_CLUSTER_SCHEDULES overrides the count, SLUICE_CLUSTER_SEED runs one,
 * SLUICE_CLUSTER_TRACE=1 prints its events).
 * Checked at every release of confirms and after every step:
 *   - nothing is confirmed unless it is on the disk of every member of the ISR in etcd, and
 *     the ISR has at least min_insync_replicas members;
 *   - a leader confirms only while etcd still names it, in its epoch (a deposed epoch never
 *     confirms);
 *   - every member of the ISR in etcd holds every group ever confirmed (so a failover loses
 *     nothing confirmed), the same groups (epoch for epoch);
 * and, once the faults stop, the cluster heals: a leader confirms everything it holds.
 * Also the election's rule (cl_should_campaign, member.h): who campaigns at once, who waits.
 */
#include <check.h>
#include <unistd.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/conf.h"
#include "cluster/member.h"
#include "cluster/repl.h"
#include "cluster/wire.h"
#include "core/mem.h"

/* ---- settings ---- */

START_TEST(conf_keys_and_defaults)
{
    cl_conf c;
    cl_conf_defaults(&c);
    const char *err;
    ck_assert(!c.enabled);
    ck_assert_str_eq(c.key_prefix, "sluice");
    ck_assert_str_eq(c.cluster_name, "default");
    ck_assert_int_eq(c.min_insync_replicas, 2);
    ck_assert_ptr_null(cl_conf_check(&c)); /* off: nothing needed */
    ck_assert(!cl_conf_apply(&c, "port", "5672", &err));
    ck_assert(cl_conf_apply(&c, "cluster_formation.peer_discovery_backend", "etcd", &err));
    ck_assert_ptr_null(err);
    ck_assert(c.enabled);
    ck_assert_ptr_nonnull(cl_conf_check(&c)); /* no endpoint */
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.endpoints.2", "127.0.0.1:2380", &err));
    ck_assert_ptr_null(err);
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.endpoints.1", "h1:2379", &err));
    ck_assert_ptr_null(err);
    ck_assert_int_eq(c.n_endpoints, 2);
    ck_assert_str_eq(c.endpoints[0], "h1:2379"); /* ordered by N */
    ck_assert_str_eq(c.endpoints[1], "127.0.0.1:2380");
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.endpoints.1", "h0:1", &err));
    ck_assert_int_eq(c.n_endpoints, 2);
    ck_assert_str_eq(c.endpoints[0], "h0:1");
    ck_assert_ptr_null(cl_conf_check(&c));
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.endpoints.3", "nohost", &err));
    ck_assert_ptr_nonnull(err);
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.endpoints.3", "h:0", &err));
    ck_assert_ptr_nonnull(err);
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.key_prefix", "a/b", &err));
    ck_assert_ptr_nonnull(err);
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.cluster_name", "prod-1", &err));
    ck_assert_ptr_null(err);
    ck_assert_str_eq(c.cluster_name, "prod-1");
    ck_assert(cl_conf_apply(&c, "cluster.replication_port", "0", &err));
    ck_assert_ptr_null(err);
    ck_assert_int_eq(c.replication_port, 0);
    ck_assert(cl_conf_apply(&c, "cluster.replication_port", "70000", &err));
    ck_assert_ptr_nonnull(err);
    ck_assert(cl_conf_apply(&c, "cluster.lease_ttl", "0", &err));
    ck_assert_ptr_nonnull(err);
    ck_assert(cl_conf_apply(&c, "cluster.lease_ttl", "5", &err));
    ck_assert_int_eq(c.lease_ttl_s, 5);
    ck_assert(cl_conf_apply(&c, "cluster.min_insync_replicas", "0", &err));
    ck_assert_ptr_nonnull(err);
    ck_assert(cl_conf_apply(&c, "cluster.min_insync_replicas", "3", &err));
    ck_assert_int_eq(c.min_insync_replicas, 3);
    ck_assert(cl_conf_apply(&c, "cluster.advertise_address", "10.0.0.2", &err));
    ck_assert_str_eq(c.advertise_address, "10.0.0.2");
    ck_assert(cl_conf_apply(&c, "cluster.bogus", "1", &err));
    ck_assert_ptr_nonnull(err);
    /* issue 43: the secret is required (or the explicit opt-out), and read with care */
    char serr[512];
    ck_assert_int_eq(cl_conf_load_secret(&c, serr, sizeof serr), -1);
    ck_assert_ptr_nonnull(strstr(serr, "needs cluster.secret_file"));
    ck_assert(cl_conf_apply(&c, "cluster.insecure_no_secret", "yes", &err));
    ck_assert_ptr_nonnull(err);
    ck_assert(cl_conf_apply(&c, "cluster.insecure_no_secret", "true", &err));
    ck_assert_ptr_null(err);
    ck_assert_int_eq(cl_conf_load_secret(&c, serr, sizeof serr), 0);
    ck_assert_ptr_null(c.secret);
    char path[] = "/tmp/sl-secret-XXXXXX";
    int fd = mkstemp(path); /* 0600 */
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "s3cret\n\n", 8), 8);
    close(fd);
    ck_assert(cl_conf_apply(&c, "cluster.secret_file", path, &err));
    ck_assert_int_eq(cl_conf_load_secret(&c, serr, sizeof serr), 0);
    ck_assert_uint_eq(c.secret_len, 6); /* the newlines are not part of it */
    ck_assert(!memcmp(c.secret, "s3cret", 6));
    ck_assert_int_eq(chmod(path, 0604), 0);
    ck_assert_int_eq(cl_conf_load_secret(&c, serr, sizeof serr), -1);
    ck_assert_ptr_nonnull(strstr(serr, "mode 0604"));
    ck_assert_ptr_nonnull(strstr(serr, path));
    ck_assert_int_eq(chmod(path, 0600), 0);
    ck_assert_int_eq(truncate(path, 0), 0);
    ck_assert_int_eq(cl_conf_load_secret(&c, serr, sizeof serr), -1);
    ck_assert_ptr_nonnull(strstr(serr, "empty"));
    unlink(path);
    /* etcd's and the replication port's doors: pairs go together */
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.username", "sluice", &err));
    ck_assert_ptr_nonnull(cl_conf_check(&c)); /* no password */
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.password", "pw", &err));
    ck_assert_ptr_null(cl_conf_check(&c));
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.ssl_options.verify", "verify_none", &err));
    ck_assert_ptr_null(err);
    ck_assert(c.etcd_https && !c.etcd_verify);
    ck_assert(cl_conf_apply(&c, "cluster_formation.etcd.ssl_options.bogus", "1", &err));
    ck_assert_ptr_nonnull(err);
    ck_assert(cl_conf_apply(&c, "cluster.ssl_options.certfile", "/c.pem", &err));
    ck_assert_ptr_nonnull(cl_conf_check(&c)); /* no keyfile */
    ck_assert(cl_conf_apply(&c, "cluster.ssl_options.keyfile", "/k.pem", &err));
    ck_assert_ptr_nonnull(cl_conf_check(&c)); /* verify_peer needs the members' CA */
    ck_assert(cl_conf_apply(&c, "cluster.ssl_options.cacertfile", "/ca.pem", &err));
    ck_assert_ptr_null(cl_conf_check(&c));
    cl_conf_free(&c);
}
END_TEST

/* ---- epoch history and the handshake ---- */

START_TEST(epochs_end_and_truncate)
{
    cl_repl_epochs h;
    cl_repl_epochs_init(&h);
    uint64_t found;
    ck_assert_int_eq(cl_repl_epochs_end(&h, 5, 0, &found), 0);
    ck_assert_int_eq(found, 0);
    cl_repl_epochs_note(&h, 1, 1);
    cl_repl_epochs_note(&h, 1, 2);
    cl_repl_epochs_note(&h, 3, 6);
    ck_assert_int_eq(h.n, 2);
    ck_assert_int_eq(cl_repl_epochs_last(&h), 3);
    ck_assert_int_eq(cl_repl_epochs_end(&h, 1, 9, &found), 5);
    ck_assert_int_eq(found, 1);
    ck_assert_int_eq(cl_repl_epochs_end(&h, 2, 9, &found), 5); /* newest epoch <= 2 is 1 */
    ck_assert_int_eq(found, 1);
    ck_assert_int_eq(cl_repl_epochs_end(&h, 7, 9, &found), 9);
    ck_assert_int_eq(found, 3);
    cl_repl_epochs_truncate(&h, 5);
    ck_assert_int_eq(cl_repl_epochs_last(&h), 1);
    cl_repl_epochs_free(&h);
}
END_TEST

/* The divergence case the epoch pair exists for: A led epoch 1 to 10 groups; B (5 of them)
 * led epoch 2 and wrote 6..7 to C; now A leads epoch 3. C must lose 6..7 (epoch 2's, which A
 * never had) although A's log is longer. */
START_TEST(handshake_cuts_a_divergent_tail)
{
    cl_repl_epochs ha, hc;
    cl_repl_epochs_init(&ha);
    cl_repl_epochs_init(&hc);
    cl_repl_epochs_note(&ha, 1, 1);
    cl_repl_epochs_note(&hc, 1, 1);
    cl_repl_epochs_note(&hc, 2, 6);
    cl_rl_options o = {.min_isr = 2, .lag_max_ms = 100};
    cl_rl *a = cl_rl_new(0, 3, 0x7, &o, 10, &ha, 0);
    cl_rf *c = cl_rf_new(2, 7, &hc);
    uint64_t le, li;
    cl_rf_hello(c, &le, &li);
    ck_assert_int_eq(le, 2);
    ck_assert_int_eq(li, 7);
    cl_rl_start st;
    cl_rl_hello(a, 2, le, li, 0, &st);
    ck_assert_int_eq(st.div_epoch, 1);
    ck_assert_int_eq(st.div_end, 10);
    uint64_t keep;
    ck_assert_int_eq(cl_rf_start(c, &st, &keep), CL_RF_OK);
    ck_assert_int_eq(keep, 5);
    ck_assert_int_eq(cl_rf_last(c), 5);
    /* a stale leader is refused from now on; an answer to an old HELLO is ignored */
    cl_rl_start stale = {
        .epoch = 2, .session = 9, .div_epoch = 1, .div_end = 5, .hello_epoch = 1, .hello_idx = 5};
    ck_assert_int_eq(cl_rf_start(c, &stale, &keep), CL_RF_REJECT);
    stale.epoch = 3;
    stale.hello_epoch = 2;
    stale.hello_idx = 7;
    ck_assert_int_eq(cl_rf_start(c, &stale, &keep), CL_RF_IGNORE);
    uint64_t e, s, end, dur;
    cl_rf_ack_fields(c, &e, &s, &end, &dur);
    cl_rl_ack(a, 2, e, s, end, dur, 1);
    uint64_t idx, sess;
    ck_assert(cl_rl_next_send(a, 2, 1, &idx, &sess));
    ck_assert_int_eq(idx, 6);
    ck_assert_int_eq(cl_rf_data(c, 3, sess, 7, 1), CL_RF_GAP);
    ck_assert_int_eq(cl_rf_data(c, 3, sess, 6, 1), CL_RF_APPEND);
    ck_assert_int_eq(cl_rf_data(c, 3, sess, 6, 1), CL_RF_IGNORE);
    ck_assert_int_eq(cl_rf_data(c, 2, sess, 7, 1), CL_RF_IGNORE); /* another epoch's session */
    cl_rl_free(a);
    cl_rf_free(c);
    cl_repl_epochs_free(&ha);
    cl_repl_epochs_free(&hc);
}
END_TEST

/* ---- a leader and its two followers: the fixture of the leader's tests ---- */

/* Leader node 0 of epoch 1 over the ISR {0, 1, 2} (min_insync 2, lag_max 100 ms), an empty log,
 * its lease to t=1000 ms; followers 1 and 2 said HELLO at t=0 and acked their sessions (S1,
 * S2) at position 0: in sync, nothing to send. Each test's clock runs from there. Built afresh
 * for every test by the runner (tcase_add_checked_fixture), freed after it. */
static cl_repl_epochs H;
static cl_rl *L;
static cl_rl_start S1, S2;

static void leader_setup(void)
{
    cl_repl_epochs_init(&H);
    cl_rl_options o = {.min_isr = 2, .lag_max_ms = 100};
    L = cl_rl_new(0, 1, 0x7, &o, 0, &H, 0);
    cl_rl_lease(L, 1000);
    cl_rl_hello(L, 1, 0, 0, 0, &S1);
    cl_rl_hello(L, 2, 0, 0, 0, &S2);
    cl_rl_ack(L, 1, 1, S1.session, 0, 0, 0);
    cl_rl_ack(L, 2, 1, S2.session, 0, 0, 0);
}

static void leader_teardown(void)
{
    cl_rl_free(L);
    cl_repl_epochs_free(&H);
}

START_TEST(commit_waits_for_every_isr_member_and_min_isr)
{
    cl_rl *l = L;
    for (uint64_t i = 1; i <= 3; i++)
        cl_rl_append(l, i, 100, 1);
    cl_rl_durable(l, 3);
    ck_assert_int_eq(cl_rl_commit(l), 0);
    cl_rl_ack(l, 1, 1, S1.session, 3, 3, 2);
    ck_assert_int_eq(cl_rl_commit(l), 0); /* node 2 has not acked */
    cl_rl_ack(l, 2, 1, S2.session, 2, 2, 2);
    ck_assert_int_eq(cl_rl_commit(l), 2);
    ck_assert_int_eq(cl_rl_release(l, 5), 2);
    /* node 2 lags past lag_max: proposed out; while pending, it still counts */
    uint32_t prop;
    ck_assert(cl_rl_isr_propose(l, 200, &prop));
    ck_assert_int_eq(prop, 0x3);
    ck_assert_int_eq(cl_rl_commit(l), 2);
    cl_rl_isr_result(l, CL_RL_ISR_DONE);
    ck_assert_int_eq(cl_rl_commit(l), 3);
    cl_rl_peer_info pi;
    cl_rl_peer(l, 2, 200, &pi);
    ck_assert_int_eq(pi.lag_bytes, 100);
    ck_assert_int_eq(pi.lag_ms, 199);
    /* node 1 too: below min_isr, nothing moves */
    cl_rl_append(l, 4, 10, 300);
    cl_rl_durable(l, 4);
    ck_assert(cl_rl_isr_propose(l, 500, &prop));
    ck_assert_int_eq(prop, 0x1);
    cl_rl_isr_result(l, CL_RL_ISR_DONE);
    ck_assert(cl_rl_blocked(l));
    ck_assert_int_eq(cl_rl_commit(l), 3);
    /* the lease ran out: nothing more is released although commit moved */
    ck_assert_int_eq(cl_rl_release(l, 2000), 2);
    cl_rl_depose(l);
    ck_assert(cl_rl_deposed(l));
}
END_TEST

/* cl_rl_forget (DELETE /api/cluster/nodes/NAME): a member with a group in flight is forgotten.
 * Until etcd holds the ISR without it, commit still waits for it (the old set counts: were the
 * leader to die, etcd's ISR still names it); then commit moves without it. A RETRY proposes
 * again; its stale session's acks no longer count; a node outside the ISR is forgotten at
 * once; the leader cannot forget itself; forgetting waits behind a pending proposal. The clock
 * stays below 10 ms, far inside the fixture's lag_max (100 ms) and lease: no proposal here is
 * about lag, and every release is within the lease. */
START_TEST(forget_a_member_with_a_group_in_flight)
{
    cl_rl *l = L;
    cl_rl_start s2 = S2;
    cl_rl_append(l, 1, 100, 1);
    cl_rl_durable(l, 1);
    uint64_t idx, sess;
    ck_assert(cl_rl_next_send(l, 2, 1, &idx, &sess)); /* group 1 in flight to node 2 */
    ck_assert_int_eq(idx, 1);
    cl_rl_ack(l, 1, 1, S1.session, 1, 1, 2);
    ck_assert_int_eq(cl_rl_commit(l), 0);     /* node 2 has not acked */
    ck_assert_int_eq(cl_rl_forget(l, 0), -1); /* not the leader itself */
    ck_assert_int_eq(cl_rl_forget(l, 2), 0);
    ck_assert_int_eq(cl_rl_forgetting(l), 0x4);
    ck_assert(!cl_rl_next_send(l, 2, 2, &idx, &sess)); /* disconnected: nothing more sent */
    ck_assert_int_eq(cl_rl_commit(l), 0);              /* etcd still names it: commit waits */
    uint32_t prop;
    ck_assert(cl_rl_isr_propose(l, 3, &prop));
    ck_assert_int_eq(prop, 0x3);
    ck_assert_int_eq(cl_rl_commit(l), 0);    /* while the proposal is written: both sets */
    cl_rl_ack(l, 2, 1, s2.session, 1, 1, 3); /* its old session's ack is not counted */
    ck_assert_int_eq(cl_rl_commit(l), 0);
    cl_rl_isr_result(l,
                     CL_RL_ISR_RETRY); /* etcd unreachable: the old set stays, so does the wait */
    ck_assert_int_eq(cl_rl_isr(l), 0x7);
    ck_assert_int_eq(cl_rl_commit(l), 0);
    ck_assert_int_eq(cl_rl_forgetting(l), 0x4);
    ck_assert(cl_rl_isr_propose(l, 4, &prop)); /* proposed again */
    ck_assert_int_eq(prop, 0x3);
    cl_rl_isr_result(l, CL_RL_ISR_DONE);
    ck_assert_int_eq(cl_rl_isr(l), 0x3);
    ck_assert_int_eq(cl_rl_forgetting(l), 0);
    ck_assert_int_eq(cl_rl_commit(l), 1); /* no longer waits for node 2 */
    ck_assert_int_eq(cl_rl_release(l, 5), 1);
    /* it comes back like any follower: HELLO, catch up, admitted */
    cl_rl_hello(l, 2, 1, 1, 6, &s2);
    cl_rl_ack(l, 2, 1, s2.session, 1, 1, 6);
    ck_assert(cl_rl_isr_propose(l, 6, &prop));
    ck_assert_int_eq(prop, 0x7);
    /* forgetting it while its admission is pending: out again after it */
    ck_assert_int_eq(cl_rl_forget(l, 2), 0);
    cl_rl_isr_result(l, CL_RL_ISR_DONE);
    ck_assert_int_eq(cl_rl_isr(l), 0x7);
    ck_assert_int_eq(cl_rl_forgetting(l), 0x4);
    ck_assert(cl_rl_isr_propose(l, 7, &prop));
    ck_assert_int_eq(prop, 0x3);
    cl_rl_isr_result(l, CL_RL_ISR_DONE);
    ck_assert_int_eq(cl_rl_forgetting(l), 0);
    /* a node outside the ISR: nothing waits for it, forgotten at once */
    ck_assert_int_eq(cl_rl_forget(l, 2), 0);
    ck_assert_int_eq(cl_rl_forgetting(l), 0);
    ck_assert(!cl_rl_isr_propose(l, 8, &prop));
}
END_TEST

/* ---- the replication port's frames ---- */

START_TEST(wire_round_trip_and_malformed)
{
    sl_buf b;
    sl_buf_init(&b);
    cl_wire_put_hello(&b, "sluice@n2", "default", 3, 1200);
    cl_wire_put_data(&b, 4, 1, 1201, 4, "meta", 4, "msgs!", 5);
    cl_wire_put_refuse(&b, 1, "not the leader");
    cl_wire_msg m;
    size_t used, off = 0;
    char err[128];
    ck_assert_int_eq(cl_wire_parse(b.data, 3, &m, &used, err, sizeof err), 0);
    ck_assert_int_eq(cl_wire_parse(b.data, b.len, &m, &used, err, sizeof err), 1);
    ck_assert_int_eq(m.type, CL_WIRE_HELLO);
    ck_assert_int_eq(m.version, CL_WIRE_VERSION);
    ck_assert_int_eq(m.node_len, 9);
    ck_assert(!memcmp(m.node, "sluice@n2", 9));
    ck_assert_int_eq(m.a, 3);
    ck_assert_int_eq(m.b, 1200);
    off += used;
    ck_assert_int_eq(cl_wire_parse(b.data + off, 10, &m, &used, err, sizeof err), 0);
    ck_assert_int_eq(cl_wire_parse(b.data + off, b.len - off, &m, &used, err, sizeof err), 1);
    ck_assert_int_eq(m.type, CL_WIRE_DATA);
    ck_assert_int_eq(m.a, 1201);
    ck_assert_int_eq(m.meta_len, 4);
    ck_assert(!memcmp(m.msgs, "msgs!", 5));
    off += used;
    ck_assert_int_eq(cl_wire_parse(b.data + off, b.len - off, &m, &used, err, sizeof err), 1);
    ck_assert_int_eq(m.type, CL_WIRE_REFUSE);
    ck_assert_int_eq(off + used, b.len);
    /* malformed: unknown type, a DATA whose lengths disagree, a huge length */
    uint8_t bad1[] = {0, 0, 0, 1, 99};
    ck_assert_int_eq(cl_wire_parse(bad1, sizeof bad1, &m, &used, err, sizeof err), -1);
    sl_buf_free(&b);
    sl_buf_init(&b);
    cl_wire_put_data(&b, 1, 1, 1, 1, "x", 1, "y", 1);
    b.data[4 + 1 + 32 + 3] = 2; /* meta_len 2: lengths no longer add up */
    ck_assert_int_eq(cl_wire_parse(b.data, b.len, &m, &used, err, sizeof err), -1);
    uint8_t bad3[] = {0xff, 0xff, 0xff, 0xff, 4};
    ck_assert_int_eq(cl_wire_parse(bad3, sizeof bad3, &m, &used, err, sizeof err), -1);
    sl_buf_free(&b);
}
END_TEST

/* A frame appended to a buffer whose front was partly sent: the append may compact the buffer
 * (sl_buf_reserve moves the unread bytes to the front), and the frame's length must still be
 * patched where the frame now starts. Found by the fault test (docs/cluster-testing.md): a
 * full copy of more than the 8 MiB send queue came out as a frame of length 0, so a node that
 * needed one could never rejoin. */
START_TEST(wire_frames_survive_a_compacting_append)
{
    enum { CHUNK = 256 << 10, SEND = 150000, FRAMES = 200 };
    uint8_t *chunk = sl_xmalloc(CHUNK);
    for (size_t i = 0; i < CHUNK; i++)
        chunk[i] = (uint8_t)(i * 7 + 1);
    sl_buf q, wire; /* the sender's queue; what the receiver has read */
    sl_buf_init(&q);
    sl_buf_init(&wire);
    uint64_t expect = 0;
    for (int f = 0; f <= FRAMES; f++) {
        if (f < FRAMES) /* a COPYDATA as server_copy queues it */
            cl_wire_put_copydata(&q, "msgs/00000000000000000001.seg", (uint64_t)f * CHUNK, chunk,
                                 CHUNK);
        /* a partial send, as sconn_write's: the queue's front is consumed, not emptied */
        size_t n = f < FRAMES && sl_buf_unread(&q) > SEND ? SEND : sl_buf_unread(&q);
        sl_buf_append(&wire, sl_buf_head(&q), n);
        sl_buf_consume(&q, n);
        for (;;) { /* the follower: every whole frame */
            cl_wire_msg m;
            size_t used;
            char err[128];
            int pr =
                cl_wire_parse(sl_buf_head(&wire), sl_buf_unread(&wire), &m, &used, err, sizeof err);
            ck_assert_msg(pr >= 0, "after %d frames queued: %s", f + 1, err);
            if (pr == 0)
                break;
            ck_assert_int_eq(m.type, CL_WIRE_COPYDATA);
            ck_assert_uint_eq(m.a, expect);
            ck_assert_uint_eq(m.meta_len, CHUNK);
            ck_assert(!memcmp(m.meta, chunk, CHUNK));
            expect += CHUNK;
            sl_buf_consume(&wire, used);
        }
    }
    ck_assert_uint_eq(expect, (uint64_t)FRAMES * CHUNK);
    sl_buf_free(&q);
    sl_buf_free(&wire);
    sl_free(chunk);
}
END_TEST

/* ---- the simulator ---- */

/* SLUICE_CLUSTER_TRACE=1 with SLUICE_CLUSTER_SEED=N: what happened in schedule N. */
static int trace_on(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("SLUICE_CLUSTER_TRACE") != NULL;
    return on;
}
#define TRACE(...)                                                                                 \
    do {                                                                                           \
        if (trace_on())                                                                            \
            fprintf(stderr, __VA_ARGS__);                                                          \
    } while (0)

#define MAXN 5
#define MAXLOG 4096
#define ETCD MAXN

enum { M_HELLO, M_START, M_DATA, M_PING, M_ACK, M_KA, M_KA_OK, M_KA_FAIL, M_ISR, M_ISR_RES };

typedef struct smsg {
    int type, from, to;
    uint64_t a, b, c, d, at;
    uint64_t e, f; /* START: the HELLO answered */
} smsg;

typedef struct snode {
    int up;
    uint64_t down_until, paused_until;
    uint32_t ep[MAXLOG + 1]; /* epoch of each group on the disk, 1..len */
    uint64_t len, dur;       /* written, synced */
    int sync_busy;
    uint64_t sync_target, sync_at;
    cl_repl_epochs hist;
    cl_rl *lead;
    cl_rf *fol;
    int following; /* leader node followed (-1: none) */
    uint64_t follow_epoch;
    uint64_t hello_at, ack_at, ka_at, ping_at, heard_at, released;
} snode;

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rnd(rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

static int chance(rng *r, double p)
{
    return (double)(rnd(r) % 1000000) < p * 1000000.0;
}

typedef struct world {
    uint64_t seed;
    rng r;
    int n;
    uint64_t now;
    cl_rl_options o;
    uint64_t ttl, margin;
    double drop, p_crash, p_pause, p_pub;
    uint64_t max_delay;
    int faults; /* 0 once healing */
    snode nodes[MAXN];
    smsg *msgs, *batch;
    size_t nmsgs, capmsgs, nbatch;
    struct {
        int leader;
        uint64_t epoch, expiry;
        uint32_t isr;
    } etcd;
    uint32_t conf_ep[MAXLOG + 1];
    uint64_t conf_max;
    uint64_t e, f;     /* extra fields of the next message sent */
    uint64_t stats[6]; /* confirmed, elections, crashes, pauses, isr changes, truncations */
} world;

static void send(world *w, int type, int from, int to, uint64_t a, uint64_t b, uint64_t c,
                 uint64_t d, int reliable)
{
    if (!reliable && w->faults && chance(&w->r, w->drop))
        return;
    if (w->nmsgs == w->capmsgs) {
        w->capmsgs = w->capmsgs ? w->capmsgs * 2 : 256;
        w->msgs = sl_xrealloc(w->msgs, w->capmsgs * sizeof *w->msgs);
    }
    uint64_t delay = 1 + (w->max_delay ? rnd(&w->r) % w->max_delay : 0);
    w->msgs[w->nmsgs++] = (smsg){type, from, to, a, b, c, d, w->now + delay, w->e, w->f};
}

static void rebuild_hist(snode *s)
{
    cl_repl_epochs_free(&s->hist);
    cl_repl_epochs_init(&s->hist);
    for (uint64_t i = 1; i <= s->len; i++)
        cl_repl_epochs_note(&s->hist, s->ep[i], i);
}

static void become_follower(world *w, int id)
{
    snode *s = &w->nodes[id];
    cl_rl_free(s->lead);
    s->lead = NULL;
    cl_rf_free(s->fol);
    rebuild_hist(s);
    s->fol = cl_rf_new(id, s->len, &s->hist);
    cl_rf_durable(s->fol, s->dur);
    s->following = -1;
    s->follow_epoch = 0;
}

/* kill -9: what was written but not synced is lost (a torn tail truncated by recovery). */
static void crash(world *w, int id, uint64_t down_for)
{
    snode *s = &w->nodes[id];
    TRACE("t=%llu crash %d len %llu dur %llu\n", (unsigned long long)w->now, id,
          (unsigned long long)s->len, (unsigned long long)s->dur);
    s->len = s->dur;
    s->sync_busy = 0;
    cl_rl_free(s->lead);
    cl_rf_free(s->fol);
    s->lead = NULL;
    s->fol = NULL;
    s->up = 0;
    s->down_until = w->now + down_for;
    s->paused_until = 0;
    w->stats[2]++;
}

static void check_isr_holds_confirmed(world *w, const char *when)
{
    for (int m = 0; m < w->n; m++) {
        if (!(w->etcd.isr & (1u << m)))
            continue;
        const snode *s = &w->nodes[m];
        /* (plain ifs in the hot loops: every passing ck_assert is a write to check's pipe) */
        if (s->dur < w->conf_max)
            ck_abort_msg("seed %llu t=%llu (%s): ISR member %d has %llu synced, %llu confirmed",
                         (unsigned long long)w->seed, (unsigned long long)w->now, when, m,
                         (unsigned long long)s->dur, (unsigned long long)w->conf_max);
        for (uint64_t i = 1; i <= w->conf_max; i++)
            if (s->ep[i] != w->conf_ep[i])
                ck_abort_msg("seed %llu t=%llu (%s): ISR member %d has group %llu of epoch %u, "
                             "confirmed was epoch %u",
                             (unsigned long long)w->seed, (unsigned long long)w->now, when, m,
                             (unsigned long long)i, s->ep[i], w->conf_ep[i]);
    }
}

static void on_release(world *w, int id, uint64_t r)
{
    snode *s = &w->nodes[id];
    if (w->etcd.leader != id || w->etcd.epoch != cl_rl_epoch(s->lead))
        ck_abort_msg("seed %llu t=%llu: node %d confirmed in epoch %llu, etcd has leader %d epoch "
                     "%llu",
                     (unsigned long long)w->seed, (unsigned long long)w->now, id,
                     (unsigned long long)cl_rl_epoch(s->lead), w->etcd.leader,
                     (unsigned long long)w->etcd.epoch);
    if (__builtin_popcount(w->etcd.isr) < (int)w->o.min_isr)
        ck_abort_msg("seed %llu t=%llu: confirmed with ISR %x below min %u",
                     (unsigned long long)w->seed, (unsigned long long)w->now, w->etcd.isr,
                     w->o.min_isr);
    if (s->dur < r) /* a plain if: every passing ck_assert is a write to Check's pipe */
        ck_abort_msg("seed %llu: released %llu past durable %llu", (unsigned long long)w->seed,
                     (unsigned long long)r, (unsigned long long)s->dur);
    for (uint64_t i = 1; i <= r; i++) {
        if (i <= w->conf_max && w->conf_ep[i] != s->ep[i])
            ck_abort_msg("seed %llu: group %llu confirmed twice with different epochs",
                         (unsigned long long)w->seed, (unsigned long long)i);
        w->conf_ep[i] = s->ep[i];
    }
    if (r > w->conf_max) {
        w->stats[0] += r - w->conf_max;
        w->conf_max = r;
    }
    check_isr_holds_confirmed(w, "release");
}

static void deliver(world *w, const smsg *m)
{
    if (m->to == ETCD) {
        switch (m->type) {
        case M_KA:
            if (w->etcd.leader == m->from && w->etcd.epoch == m->a) {
                w->etcd.expiry = w->now + w->ttl;
                send(w, M_KA_OK, ETCD, m->from, m->a, m->b, 0, 0, 0);
            } else {
                send(w, M_KA_FAIL, ETCD, m->from, m->a, 0, 0, 0, 0);
            }
            break;
        case M_ISR: /* txn: compare leader key and epoch, put the ISR */
            if (w->etcd.leader == m->from && w->etcd.epoch == m->a) {
                w->etcd.isr = (uint32_t)m->b;
                TRACE("t=%llu isr %x\n", (unsigned long long)w->now, w->etcd.isr);
                w->stats[4]++;
                send(w, M_ISR_RES, ETCD, m->from, m->a, CL_RL_ISR_DONE, 0, 0, 1);
            } else {
                send(w, M_ISR_RES, ETCD, m->from, m->a, CL_RL_ISR_DEPOSED, 0, 0, 1);
            }
            break;
        }
        return;
    }
    snode *s = &w->nodes[m->to];
    switch (m->type) {
    case M_HELLO:
        if (s->lead && !cl_rl_deposed(s->lead)) {
            cl_rl_start st;
            cl_rl_hello(s->lead, m->from, m->a, m->b, w->now, &st);
            w->e = st.hello_epoch;
            w->f = st.hello_idx;
            send(w, M_START, m->to, m->from, st.epoch, st.session, st.div_epoch, st.div_end, 0);
            w->e = w->f = 0;
        }
        break;
    case M_START:
        if (s->fol) {
            uint64_t keep;
            cl_rl_start st = {m->a, m->b, m->c, m->d, m->e, m->f};
            int rc = cl_rf_start(s->fol, &st, &keep);
            if (rc == CL_RF_IGNORE) {
                uint64_t le, li;
                cl_rf_hello(s->fol, &le, &li);
                send(w, M_HELLO, m->to, m->from, le, li, 0, 0, 0);
            } else if (rc == CL_RF_OK) {
                if (keep < s->len) {
                    TRACE("t=%llu node %d truncates %llu -> %llu (dur %llu) start e=%llu de=%llu "
                          "dend=%llu from %d\n",
                          (unsigned long long)w->now, m->to, (unsigned long long)s->len,
                          (unsigned long long)keep, (unsigned long long)s->dur,
                          (unsigned long long)m->a, (unsigned long long)m->c,
                          (unsigned long long)m->d, m->from);
                    w->stats[5]++;
                    s->len = keep;
                    if (s->dur > keep)
                        s->dur = keep; /* truncation is made durable before the ack */
                    if (s->sync_target > keep)
                        s->sync_target = keep;
                }
                s->following = m->from;
                s->heard_at = w->now;
                uint64_t e, ss, le, du;
                cl_rf_ack_fields(s->fol, &e, &ss, &le, &du);
                send(w, M_ACK, m->to, m->from, e, ss, le, du, 0);
            }
        }
        break;
    case M_DATA: {
        if (!s->fol)
            break;
        uint64_t idx = m->c;
        if (cl_rf_current(s->fol, m->a, m->b))
            s->heard_at = w->now;
        int rc = cl_rf_data(s->fol, m->a, m->b, idx, m->d);
        if (rc == CL_RF_APPEND) {
            if (idx != s->len + 1 || idx > MAXLOG)
                ck_abort_msg("seed %llu: appended %llu after %llu", (unsigned long long)w->seed,
                             (unsigned long long)idx, (unsigned long long)s->len);
            s->ep[idx] = (uint32_t)m->d;
            s->len = idx;
        } else if (rc == CL_RF_GAP) {
            uint64_t e, ss, le, du;
            cl_rf_ack_fields(s->fol, &e, &ss, &le, &du);
            send(w, M_ACK, m->to, m->from, e, ss, le, du, 0);
        }
        break;
    }
    case M_PING:
        if (s->fol && cl_rf_current(s->fol, m->a, m->b))
            s->heard_at = w->now;
        break;
    case M_ACK:
        if (s->lead)
            cl_rl_ack(s->lead, m->from, m->a, m->b, m->c, m->d, w->now);
        break;
    case M_KA_OK:
        if (s->lead && cl_rl_epoch(s->lead) == m->a)
            cl_rl_lease(s->lead, m->b + w->ttl - w->margin);
        break;
    case M_KA_FAIL:
        if (s->lead && cl_rl_epoch(s->lead) == m->a)
            cl_rl_depose(s->lead);
        break;
    case M_ISR_RES:
        if (s->lead && cl_rl_epoch(s->lead) == m->a)
            cl_rl_isr_result(s->lead, (int)m->b);
        break;
    }
}

static void elect(world *w)
{
    int cand[MAXN], nc = 0, best = -1;
    for (int i = 0; i < w->n; i++) {
        snode *s = &w->nodes[i];
        if (!(w->etcd.isr & (1u << i)) || !s->up || s->paused_until > w->now || s->lead)
            continue;
        cand[nc++] = i;
        if (best < 0 || s->len > w->nodes[best].len)
            best = i;
    }
    if (!nc)
        return;
    /* usually the longest log, as the wiring campaigns; sometimes any ISR member (the
     * safety must not depend on the choice) */
    int c = chance(&w->r, 0.7) ? best : cand[rnd(&w->r) % nc];
    snode *s = &w->nodes[c];
    w->etcd.leader = c;
    w->etcd.epoch++;
    w->etcd.expiry = w->now + w->ttl;
    w->stats[1]++;
    TRACE("t=%llu elect %d epoch %llu len %llu isr %x\n", (unsigned long long)w->now, c,
          (unsigned long long)w->etcd.epoch, (unsigned long long)s->len, w->etcd.isr);
    cl_rf_free(s->fol);
    s->fol = NULL;
    s->dur = s->len; /* a new leader syncs what it has before it serves */
    s->sync_busy = 0;
    rebuild_hist(s);
    s->lead = cl_rl_new(c, w->etcd.epoch, w->etcd.isr, &w->o, s->len, &s->hist, w->now);
    cl_rl_lease(s->lead, w->now + w->ttl - w->margin);
    s->released = 0;
    s->ka_at = w->now;
    check_isr_holds_confirmed(w, "election");
}

static void node_step(world *w, int id)
{
    snode *s = &w->nodes[id];
    if (s->sync_busy && w->now >= s->sync_at) {
        s->sync_busy = 0;
        if (s->sync_target > s->dur)
            s->dur = s->sync_target;
        if (s->lead)
            cl_rl_durable(s->lead, s->dur);
        if (s->fol) {
            cl_rf_durable(s->fol, s->dur);
            if (s->following >= 0) {
                uint64_t e, ss, le, du;
                cl_rf_ack_fields(s->fol, &e, &ss, &le, &du);
                send(w, M_ACK, id, s->following, e, ss, le, du, 0);
                s->ack_at = w->now;
            }
        }
    }
    if (!s->sync_busy && s->len > s->dur) {
        s->sync_busy = 1;
        s->sync_target = s->len;
        s->sync_at = w->now + 1 + rnd(&w->r) % 6;
    }
    if (s->lead) {
        cl_rl *l = s->lead;
        if (cl_rl_deposed(l)) {
            become_follower(w, id); /* stops serving: clients are closed */
            return;
        }
        if (w->faults && s->len < MAXLOG - 8 && chance(&w->r, w->p_pub)) {
            s->ep[++s->len] = (uint32_t)cl_rl_epoch(l);
            cl_rl_append(l, s->len, 100 + rnd(&w->r) % 1000, w->now);
        }
        if (w->now >= s->ka_at + w->ttl / 3) {
            s->ka_at = w->now;
            send(w, M_KA, id, ETCD, cl_rl_epoch(l), w->now, 0, 0, 0);
        }
        for (int f = 0; f < w->n; f++) {
            uint64_t idx, sess;
            if (f == id)
                continue;
            while (cl_rl_next_send(l, f, w->now, &idx, &sess)) {
                send(w, M_DATA, id, f, cl_rl_epoch(l), sess, idx, s->ep[idx], 0);
            }
        }
        if (w->now >= s->ping_at + 10) {
            s->ping_at = w->now;
            for (int f = 0; f < w->n; f++)
                if (f != id && cl_rl_session(l, f))
                    send(w, M_PING, id, f, cl_rl_epoch(l), cl_rl_session(l, f), 0, 0, 0);
        }
        uint32_t prop;
        if (cl_rl_isr_propose(l, w->now, &prop))
            send(w, M_ISR, id, ETCD, cl_rl_epoch(l), prop, 0, 0, 1);
        uint64_t r = cl_rl_release(l, w->now);
        if (r > s->released) {
            on_release(w, id, r);
            s->released = r;
        }
        return;
    }
    /* follower: watch etcd (with some delay), follow the leader it names */
    if (chance(&w->r, 0.3) && w->etcd.leader >= 0 && w->etcd.leader != id) {
        cl_rf_epoch_seen(s->fol, w->etcd.epoch);
        if (w->etcd.epoch > s->follow_epoch) {
            s->follow_epoch = w->etcd.epoch;
            s->following = w->etcd.leader;
            s->hello_at = 0;
        }
    }
    if (s->following < 0)
        return;
    int lost = cl_rf_epoch(s->fol) == s->follow_epoch && w->now >= s->heard_at + 60 &&
               w->now >= s->hello_at + 60;
    if ((cl_rf_epoch(s->fol) != s->follow_epoch && w->now >= s->hello_at + 20) || lost) {
        uint64_t le, li;
        cl_rf_hello(s->fol, &le, &li);
        send(w, M_HELLO, id, s->following, le, li, 0, 0, 0);
        s->hello_at = w->now;
    }
    if (cl_rf_epoch(s->fol) == s->follow_epoch && w->now >= s->ack_at + 10) {
        uint64_t e, ss, le, du;
        cl_rf_ack_fields(s->fol, &e, &ss, &le, &du);
        send(w, M_ACK, id, s->following, e, ss, le, du, 0);
        s->ack_at = w->now;
    }
}

static void step(world *w)
{
    /* faults */
    if (w->faults) {
        for (int i = 0; i < w->n; i++) {
            snode *s = &w->nodes[i];
            if (s->up && chance(&w->r, w->p_crash))
                crash(w, i, 1 + rnd(&w->r) % 300);
            else if (s->up && s->paused_until <= w->now && chance(&w->r, w->p_pause)) {
                s->paused_until = w->now + 1 + rnd(&w->r) % (3 * w->ttl);
                w->stats[3]++;
            }
        }
    }
    for (int i = 0; i < w->n; i++) {
        snode *s = &w->nodes[i];
        if (!s->up && w->now >= s->down_until) {
            s->up = 1;
            become_follower(w, i); /* recovery: the synced log */
        }
    }
    /* etcd: the lease runs out, then an ISR member takes the key */
    if (w->etcd.leader >= 0 && w->now >= w->etcd.expiry)
        w->etcd.leader = -1;
    if (w->etcd.leader < 0 && chance(&w->r, 0.2))
        elect(w);
    /* the network: everything due, in random order */
    size_t due = 0;
    for (size_t i = 0; i < w->nmsgs; i++) {
        if (w->msgs[i].at <= w->now) {
            smsg t = w->msgs[i];
            w->msgs[i] = w->msgs[due];
            w->msgs[due++] = t;
        }
    }
    for (size_t i = due; i > 1; i--) {
        size_t j = rnd(&w->r) % i;
        smsg t = w->msgs[i - 1];
        w->msgs[i - 1] = w->msgs[j];
        w->msgs[j] = t;
    }
    if (w->nbatch < due) {
        w->nbatch = due * 2;
        w->batch = sl_xrealloc(w->batch, w->nbatch * sizeof *w->batch);
    }
    smsg *batch = w->batch;
    size_t nb = 0, keep = 0;
    for (size_t i = 0; i < due; i++) {
        const smsg *m = &w->msgs[i];
        int to = m->to;
        if (to != ETCD && w->nodes[to].up && w->nodes[to].paused_until > w->now)
            continue; /* a stopped process reads it when it wakes: left for later */
        batch[nb++] = *m;
    }
    /* keep the undelivered (paused receivers, and not yet due) */
    for (size_t i = 0; i < w->nmsgs; i++) {
        const smsg *m = &w->msgs[i];
        int deliverable = m->at <= w->now && !(m->to != ETCD && w->nodes[m->to].up &&
                                               w->nodes[m->to].paused_until > w->now);
        if (!deliverable)
            w->msgs[keep++] = *m;
    }
    w->nmsgs = keep;
    for (size_t i = 0; i < nb; i++) {
        const smsg *m = &batch[i];
        if (m->to != ETCD && !w->nodes[m->to].up)
            continue; /* the connection died with the process */
        if (m->from != ETCD && !w->nodes[m->from].up && m->type != M_ISR && m->type != M_KA)
            continue;
        deliver(w, m);
    }
    for (int i = 0; i < w->n; i++) {
        snode *s = &w->nodes[i];
        if (s->up && s->paused_until <= w->now)
            node_step(w, i);
    }
    check_isr_holds_confirmed(w, "step");
    w->now++;
}

static void run_schedule(uint64_t seed, uint64_t *totals)
{
    world *w = sl_xcalloc(1, sizeof *w);
    w->seed = seed;
    w->r.s = seed * 0x9E3779B97F4A7C15ull + 1;
    w->n = 3 + (int)(rnd(&w->r) % 5 == 0 ? 2 : 0);
    w->ttl = 100;
    w->margin = 10;
    w->o.min_isr = 1 + (uint32_t)(rnd(&w->r) % 3);
    if (w->o.min_isr > (uint32_t)w->n)
        w->o.min_isr = (uint32_t)w->n;
    w->o.lag_max_ms = 40 + (uint32_t)(rnd(&w->r) % 60);
    w->o.window = 4 + (uint32_t)(rnd(&w->r) % 64);
    w->o.rto_ms = 30;
    w->drop = (double)(rnd(&w->r) % 15) / 100.0;
    w->max_delay = 1 + rnd(&w->r) % 20;
    w->p_crash = (double)(rnd(&w->r) % 20) / 10000.0;
    w->p_pause = (double)(rnd(&w->r) % 10) / 10000.0;
    w->p_pub = 0.1 + (double)(rnd(&w->r) % 50) / 100.0;
    w->faults = 1;
    w->etcd.leader = -1;
    w->etcd.isr = (1u << w->n) - 1; /* a new cluster: every node starts in sync (empty) */
    for (int i = 0; i < w->n; i++) {
        w->nodes[i].up = 1;
        cl_repl_epochs_init(&w->nodes[i].hist);
        become_follower(w, i);
    }
    for (int t = 0; t < 2500; t++)
        step(w);
    /* heal: no faults, no loss, nothing new published; everyone comes back */
    w->faults = 0;
    for (int i = 0; i < w->n; i++)
        w->nodes[i].paused_until = 0;
    int leader = -1;
    for (int t = 0; t < 20000; t++) {
        step(w);
        leader = w->etcd.leader;
        if (leader >= 0 && t > 400 && w->nodes[leader].lead &&
            w->nodes[leader].released == w->nodes[leader].len)
            break;
    }
    ck_assert_msg(leader >= 0 && w->nodes[leader].lead, "seed %llu: no leader after healing",
                  (unsigned long long)seed);
    if (trace_on())
        for (int i = 0; i < w->n; i++) {
            cl_rl_peer_info pi;
            cl_rl_peer(w->nodes[leader].lead, i, w->now, &pi);
            fprintf(stderr,
                    "node %d up %d len %llu dur %llu fol %p following %d fe %llu rfe %llu: conn %d "
                    "acked %llu end %llu lag %llu\n",
                    i, w->nodes[i].up, (unsigned long long)w->nodes[i].len,
                    (unsigned long long)w->nodes[i].dur, (void *)w->nodes[i].fol,
                    w->nodes[i].following, (unsigned long long)w->nodes[i].follow_epoch,
                    w->nodes[i].fol ? (unsigned long long)cl_rf_epoch(w->nodes[i].fol) : 0ull,
                    pi.connected, (unsigned long long)pi.acked, (unsigned long long)pi.log_end,
                    (unsigned long long)pi.lag_ms);
        }
    ck_assert_msg(w->nodes[leader].released == w->nodes[leader].len,
                  "seed %llu: leader %d released %llu of %llu after healing (isr %x, min %u)",
                  (unsigned long long)seed, leader, (unsigned long long)w->nodes[leader].released,
                  (unsigned long long)w->nodes[leader].len, cl_rl_isr(w->nodes[leader].lead),
                  w->o.min_isr);
    for (int i = 0; i < 6; i++)
        totals[i] += w->stats[i];
    for (int i = 0; i < w->n; i++) {
        cl_rl_free(w->nodes[i].lead);
        cl_rf_free(w->nodes[i].fol);
        cl_repl_epochs_free(&w->nodes[i].hist);
    }
    sl_free(w->msgs);
    sl_free(w->batch);
    sl_free(w);
}

START_TEST(simulated_cluster_loses_nothing_confirmed)
{
    const char *env = getenv("SLUICE_CLUSTER_SCHEDULES");
    const char *one = getenv("SLUICE_CLUSTER_SEED");
    uint64_t n = env ? strtoull(env, NULL, 10) : 2000;
    uint64_t first = one ? strtoull(one, NULL, 10) : 1;
    if (one)
        n = 1;
    uint64_t totals[6] = {0};
    for (uint64_t s = first; s < first + n; s++)
        run_schedule(s, totals);
    printf("cluster sim: %llu schedules, %llu groups confirmed, %llu elections, %llu crashes, "
           "%llu pauses, %llu ISR changes, %llu truncations\n",
           (unsigned long long)n, (unsigned long long)totals[0], (unsigned long long)totals[1],
           (unsigned long long)totals[2], (unsigned long long)totals[3],
           (unsigned long long)totals[4], (unsigned long long)totals[5]);
    /* the faults really happened, and progress was made through them */
    if (n >= 100)
        ck_assert(totals[0] > 0 && totals[1] > n && totals[2] > 0 && totals[3] > 0 &&
                  totals[4] > 0 && totals[5] > 0);
}
END_TEST

/* ---- the election's rule (member.h) ---- */

static cl_node_info node_at(const char *name, uint64_t epoch, uint64_t idx)
{
    cl_node_info n;
    memset(&n, 0, sizeof n);
    snprintf(n.name, sizeof n.name, "%s", name);
    n.last_epoch = epoch;
    n.last_idx = idx;
    return n;
}

START_TEST(the_longest_log_campaigns_at_once_the_others_wait_for_it)
{
    /* the leader "a" is gone (its registration too); b is ahead of c */
    cl_node_info nodes[2] = {node_at("c", 4, 90), node_at("b", 4, 100)};
    char isr[3][256] = {"a", "b", "c"};
    ck_assert_int_eq(cl_should_campaign("b", nodes, 2, isr, 3, 1, 0), 1);
    ck_assert_int_eq(cl_should_campaign("c", nodes, 2, isr, 3, 1, 0), 0);
    ck_assert_int_eq(cl_should_campaign("c", nodes, 2, isr, 3, 1, CL_WAIT_FIRST_MS - 1), 0);
    /* b did not take the key in time (dead, its lease not expired yet): c goes */
    ck_assert_int_eq(cl_should_campaign("c", nodes, 2, isr, 3, 1, CL_WAIT_FIRST_MS), 1);
    /* a newer epoch beats a longer log; equal logs: the smaller name */
    nodes[0] = node_at("c", 5, 1);
    ck_assert_int_eq(cl_should_campaign("c", nodes, 2, isr, 3, 1, 0), 1);
    ck_assert_int_eq(cl_should_campaign("b", nodes, 2, isr, 3, 1, 0), 0);
    nodes[0] = node_at("c", 4, 100);
    ck_assert_int_eq(cl_should_campaign("b", nodes, 2, isr, 3, 1, 0), 1);
    ck_assert_int_eq(cl_should_campaign("c", nodes, 2, isr, 3, 1, 0), 0);
    /* not in the ISR: never, however long the key has been gone */
    cl_node_info more[3] = {nodes[0], nodes[1], node_at("d", 9, 999)};
    ck_assert_int_eq(cl_should_campaign("d", more, 3, isr, 3, 1, 60000), 0);
    /* a registered node outside the ISR is not "the first" the others wait for */
    ck_assert_int_eq(cl_should_campaign("b", more, 3, isr, 3, 1, 0), 1);
    /* no ISR in etcd yet (a new cluster): anyone */
    ck_assert_int_eq(cl_should_campaign("d", more, 3, isr, 0, 0, 0), 1);
    /* no ISR member registered (all restarting): an ISR member goes at once */
    ck_assert_int_eq(cl_should_campaign("c", NULL, 0, isr, 3, 1, 0), 1);
}
END_TEST

static Suite *cluster_suite(void)
{
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, conf_keys_and_defaults);
    tcase_add_test(tc, the_longest_log_campaigns_at_once_the_others_wait_for_it);
    tcase_add_test(tc, epochs_end_and_truncate);
    tcase_add_test(tc, handshake_cuts_a_divergent_tail);
    tcase_add_test(tc, wire_round_trip_and_malformed);
    tcase_add_test(tc, wire_frames_survive_a_compacting_append);
    tcase_add_test(tc, simulated_cluster_loses_nothing_confirmed);
    suite_add_tcase(s, tc);
    TCase *lead = tcase_create("leader"); /* each test starts from the fixture's leader */
    tcase_add_checked_fixture(lead, leader_setup, leader_teardown);
    tcase_add_test(lead, commit_waits_for_every_isr_member_and_min_isr);
    tcase_add_test(lead, forget_a_member_with_a_group_in_flight);
    suite_add_tcase(s, lead);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cluster_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
