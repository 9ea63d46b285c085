/* member.c - the cluster member thread: lease, election, renewal, snapshot (see member.h).
 *
 * Invariants:
 * - st.role is CL_ROLE_LEADER only while now < valid_until - margin, where valid_until is the
 *   send time of the last successful keepalive (or grant) plus the TTL etcd gave: checked on
 *   every wake-up, and the thread never sleeps past that moment.
 * - Every change of st.role is written under mu and signalled on the eventfd.
 * - Only this thread talks to etcd; the loop only reads st (under mu).
 * - The watch on the leader key (cl_etcd_watch) only wakes this thread sooner: every decision is
 *   taken on what look() reads, as on the 250 ms poll that runs with or without it.
 * - A banned node (banned/NAME, an operator's removal) holds no lease: it is not registered,
 *   does not campaign and names no leader (st.leader empty: the follower phase follows and
 *   forwards to nobody) until the key is gone; it looks once a second. It learns of the ban
 *   before it registers (get_lease) and when it finds its registration gone (look).
 * - Another node's lease is revoked only by id, only the lease under which the leader key
 *   names the address whose stream just ended and whose port refused twice in a row (or names
 *   this node, held by an earlier process of it): check_lost_leader, drop_stale_own_key.
 * - etcd traffic of the figures and bans: each node puts stats/NAME every CL_FIGURES_PERIOD_MS
 *   and reads banned/ as often; the leader also reads members/ and stats/ (so 2 requests a
 *   period on a follower, 4 on the leader, against 12 a second for the 250 ms look).
 */
#include "cluster/member.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/etcd.h"
#include "cluster/probe.h"
#include "cluster/repl.h"
#include "cluster/wire.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"

/* An operator's action handed to the member thread: asked by ticket (asked counts the asks),
 * taken by the thread (done < asked means one waits), answered by the same ticket with
 * result 1 (done) or -1 (err says why). All under the member's mu. */
typedef struct op_slot {
    char arg[256]; /* the heir of a hand-over, the member to forget */
    uint64_t asked, done;
    int result;
    char err[256];
} op_slot;

struct cl_member {
    cl_conf conf; /* a copy: the thread outlives nothing, but owns what it reads */
    char *name, *amqp, *http, *repl;
    char *prefix; /* "/PREFIX/CLUSTER/" */
    cl_etcd *etcd;
    int listen_fd, repl_port;
    int event_fd;   /* to the loop: the role changed */
    int wake_fd[2]; /* to the thread: stop */
    pthread_t thread;
    int started;

    pthread_mutex_t mu;
    cl_status st;         /* under mu */
    uint64_t valid_until; /* under mu: ms (CLOCK_MONOTONIC) the lease is surely valid to */
    uint64_t margin;      /* ms before valid_until the leader stops */
    int ttl_warned;       /* etcd granted more than cluster.lease_ttl: said once */

    cl_member_hooks hooks;       /* under mu */
    int isr_unsent;              /* under mu: an ISR outcome no isr_done hook took yet, or -1 */
    uint64_t isr_unsent_epoch;   /* under mu: the epoch its proposal was written for */
    uint64_t log_epoch, log_idx; /* under mu: this node's log position */
    int log_dirty;               /* under mu: nodes/NAME to be written again */
    int isr_req;                 /* under mu: a proposal waits */
    char isr_names[CL_MAX_MEMBERS][256];
    size_t isr_n;
    /* under mu: operator actions (cl_member_handover / cl_member_forget), one of each at a
     * time (see op_slot) */
    op_slot handover, forget, readmit;
    /* under mu: etcd's banned/ as last read, and removals in progress (cl_member_ban_local) */
    char bans[CL_MAX_MEMBERS][256], pend_bans[CL_MAX_MEMBERS][256];
    size_t n_bans, n_pend_bans;
    /* under mu: this node's figures to publish (cl_member_set_figures), and the leader's
     * last read of every member (cl_member_members) */
    char *fig_out;
    int fig_dirty;
    cl_member_fig *mems;
    size_t n_mems;

    /* the thread's own */
    int banned;      /* this node is banned: no lease, nothing done but looking for readmission */
    int ban_said;    /* the log line said once per ban */
    int recheck_ban; /* look() found our registration gone */
    int fig_again;   /* a new lease: put stats/NAME again even if unchanged */
    int was_leader;  /* the role figures_work saw last */
    uint64_t next_ban_look, next_fig_put, next_fig_read;
    uint64_t ho_seen_ms; /* when a valid hand-over naming another node was first seen */
    int64_t lease;
    int64_t leader_rev;       /* create_revision of our leader key */
    uint64_t absent_since_ms; /* when the leader key was first seen gone (0: present) */
    cl_etcd_watch *watch;     /* the doorbell on the leader key: rings wake_fd */
    int64_t key_lease;        /* the lease of the leader key look() read last (0: none) */

    /* under mu: the stream from the leader at lost_addr ended (cl_member_leader_lost): the
     * thread probes it at its next round */
    char lost_addr[280];
    int lost_req;
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static char *key(const cl_member *m, const char *rest)
{
    size_t a = strlen(m->prefix), b = strlen(rest);
    char *k = sl_xmalloc(a + b + 1);
    memcpy(k, m->prefix, a);
    memcpy(k + a, rest, b + 1);
    return k;
}

/* PREFIX + dir + name ("nodes/", "sluice@a"). */
static char *name_key(const cl_member *m, const char *dir, const char *name)
{
    size_t a = strlen(m->prefix), b = strlen(dir), c = strlen(name);
    char *k = sl_xmalloc(a + b + c + 1);
    memcpy(k, m->prefix, a);
    memcpy(k + a, dir, b);
    memcpy(k + a + b, name, c + 1);
    return k;
}

static void notify(cl_member *m)
{
    uint64_t one = 1;
    ssize_t n = write(m->event_fd, &one, sizeof one);
    (void)n;
}

static void set_error(cl_member *m, const char *err)
{
    pthread_mutex_lock(&m->mu);
    snprintf(m->st.last_error, sizeof m->st.last_error, "%s", err);
    pthread_mutex_unlock(&m->mu);
}

/* Leadership ends (lease lost or about to be, key taken, stop): the loop closes clients. */
static void step_down(cl_member *m, const char *why)
{
    pthread_mutex_lock(&m->mu);
    int was = m->st.role == CL_ROLE_LEADER;
    m->st.role = CL_ROLE_FOLLOWER;
    if (was) { /* no longer known to lead: say so until etcd names someone */
        m->st.leader[0] = 0;
        m->st.leader_amqp[0] = 0;
    }
    pthread_mutex_unlock(&m->mu);
    if (was) {
        sl_warn("cluster: stepping down as leader of epoch %" PRIu64 ": %s", m->st.epoch, why);
        notify(m);
        /* Give up the lease that holds the key (revoked if etcd answers, else left to
         * expire: it is never renewed again), so the key goes and an election can follow;
         * this node campaigns again, if it may, with a new lease. */
        if (m->lease) {
            char err[256];
            cl_etcd_lease_revoke(m->etcd, m->lease, err, sizeof err);
            m->lease = 0;
        }
    }
    m->leader_rev = 0;
}

static char *node_json(cl_member *m)
{
    pthread_mutex_lock(&m->mu);
    json_int_t le = (json_int_t)m->log_epoch, li = (json_int_t)m->log_idx;
    m->log_dirty = 0;
    pthread_mutex_unlock(&m->mu);
    json_t *j =
        json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "name", m->name, "amqp", m->amqp, "http",
                  m->http, "replication", m->repl, "last_epoch", le, "last_idx", li);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static int check_ban(cl_member *m, char *err, size_t errlen);
static void enter_banned(cl_member *m);

/* A lease, renewed at once (etcd 3.4 may count a fresh lease's TTL from before it answered:
 * the keepalive's answer is what the validity is measured from), and our nodes/NAME and
 * members/NAME keys; none of it when an operator removed this node (banned/NAME): then it
 * enters the banned state and returns 0 without a lease. */
static int get_lease(cl_member *m, char *err, size_t errlen)
{
    int64_t id, ttl;
    int banned = check_ban(m, err, errlen);
    if (banned < 0)
        return -1;
    if (banned) { /* removed by an operator: do not register */
        enter_banned(m);
        return 0;
    }
    if (cl_etcd_lease_grant(m->etcd, m->conf.lease_ttl_s, &id, err, errlen) < 0)
        return -1;
    uint64_t t0 = mono_ms();
    if (cl_etcd_lease_keepalive(m->etcd, id, &ttl, err, errlen) < 0 || ttl <= 0) {
        if (!err[0] || ttl <= 0)
            snprintf(err, errlen, "etcd: a new lease was gone at once");
        return -1;
    }
    char *nk = key(m, "nodes/");
    size_t nl = strlen(nk);
    nk = sl_xrealloc(nk, nl + strlen(m->name) + 1);
    strcpy(nk + nl, m->name);
    char *v = node_json(m);
    int rc = cl_etcd_put(m->etcd, nk, v, id, err, errlen);
    free(v);
    sl_free(nk);
    if (rc < 0)
        return -1;
    /* members/NAME: known until an operator removes it, so a dead member is listed (running
     * false); rewritten with each new lease (rare: a start, a step-down) */
    json_t *mj = json_pack("{s:s, s:s, s:s}", "name", m->name, "amqp", m->amqp, "http", m->http);
    char *mv = json_dumps(mj, JSON_COMPACT);
    json_decref(mj);
    char *mk = name_key(m, "members/", m->name);
    rc = cl_etcd_put(m->etcd, mk, mv, 0, err, errlen);
    free(mv);
    sl_free(mk);
    if (rc < 0)
        return -1;
    m->lease = id;
    m->fig_again = 1; /* the old lease's stats/NAME went with it */
    if (ttl > (int64_t)m->conf.lease_ttl_s && !m->ttl_warned) {
        /* etcd raises a TTL below 1.5 x its election timeout (3 s for --election-timeout
         * 2000): every failover then waits for that longer lease */
        sl_warn("cluster: etcd granted a lease of %" PRId64 " s for cluster.lease_ttl %u "
                "(its minimum is 1.5 x its --election-timeout): a failover waits that long",
                ttl, m->conf.lease_ttl_s);
        m->ttl_warned = 1;
    }
    pthread_mutex_lock(&m->mu);
    m->valid_until = t0 + (uint64_t)ttl * 1000;
    if (m->st.role == CL_ROLE_JOINING)
        m->st.role = CL_ROLE_FOLLOWER;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* Tell the stream how long a leader's lease surely holds (called after each renewal). */
static void lease_hook(cl_member *m)
{
    /* under mu: the hooks' owner clears them (cl_member_set_hooks) before it goes away */
    pthread_mutex_lock(&m->mu);
    uint64_t until = m->valid_until > m->margin ? m->valid_until - m->margin : 0;
    if (m->st.role == CL_ROLE_LEADER && m->hooks.lease)
        m->hooks.lease(m->hooks.ctx, until);
    pthread_mutex_unlock(&m->mu);
}

static int renew(cl_member *m, char *err, size_t errlen)
{
    int64_t ttl = 0;
    uint64_t t0 = mono_ms();
    if (cl_etcd_lease_keepalive(m->etcd, m->lease, &ttl, err, errlen) < 0)
        return -1;
    if (ttl <= 0) {
        m->lease = 0;
        snprintf(err, errlen,
                 "the etcd lease is gone (expired, or revoked by a follower that "
                 "found this node's replication port refused)");
        return -1;
    }
    pthread_mutex_lock(&m->mu);
    m->valid_until = t0 + (uint64_t)ttl * 1000;
    pthread_mutex_unlock(&m->mu);
    lease_hook(m);
    return 0;
}

/* The ISR names in etcd (JSON array): *n of them into names; -1: absent. */
static int read_isr(cl_member *m, char names[][256], size_t max, size_t *n, int64_t *mod_rev,
                    char *err, size_t errlen)
{
    char *k = key(m, "isr");
    cl_etcd_kv kv;
    int rc = cl_etcd_get(m->etcd, k, &kv, err, errlen);
    sl_free(k);
    *n = 0;
    if (rc < 0)
        return -2;
    if (!kv.value)
        return -1;
    *mod_rev = kv.mod_rev;
    json_t *j = json_loadb(kv.value, kv.len, 0, NULL);
    size_t i;
    json_t *v;
    json_array_foreach(j, i, v)
    {
        if (json_is_string(v) && *n < max)
            snprintf(names[(*n)++], 256, "%s", json_string_value(v));
    }
    json_decref(j);
    cl_etcd_kv_clear(&kv);
    return 0;
}

/* Refresh the members and the leader in the snapshot; returns the leader key's state:
 * 1 present (*leader_node, *epoch, *create_rev filled), 0 absent, -1 etcd failed. */
static int look(cl_member *m, char *leader_node, size_t ln, uint64_t *epoch, int64_t *create_rev,
                char isr[][256], size_t *n_isr, int *isr_exists, char *err, size_t errlen)
{
    char *lk = key(m, "leader");
    cl_etcd_kv kv;
    int rc = cl_etcd_get(m->etcd, lk, &kv, err, errlen);
    sl_free(lk);
    if (rc < 0)
        return -1;
    int64_t isr_rev;
    int ir = read_isr(m, isr, CL_MAX_MEMBERS, n_isr, &isr_rev, err, errlen);
    if (ir == -2) {
        cl_etcd_kv_clear(&kv);
        return -1;
    }
    *isr_exists = ir == 0;
    char *np = key(m, "nodes/");
    cl_etcd_kv *nodes = NULL;
    size_t nn = 0;
    rc = cl_etcd_list(m->etcd, np, &nodes, &nn, err, errlen);
    sl_free(np);
    if (rc < 0) {
        cl_etcd_kv_clear(&kv);
        return -1;
    }
    int present = kv.value != NULL;
    char lamqp[280] = "";
    leader_node[0] = 0;
    *epoch = 0;
    *create_rev = 0;
    if (present) {
        json_t *j = json_loadb(kv.value, kv.len, 0, NULL);
        snprintf(leader_node, ln, "%s", json_string_value(json_object_get(j, "node")) ?: "");
        snprintf(lamqp, sizeof lamqp, "%s", json_string_value(json_object_get(j, "amqp")) ?: "");
        json_int_t e = json_integer_value(json_object_get(j, "epoch"));
        *epoch = e > 0 ? (uint64_t)e : 0;
        *create_rev = kv.create_rev;
        json_decref(j);
    }
    m->key_lease = present ? kv.lease : 0;
    pthread_mutex_lock(&m->mu);
    m->st.n_nodes = 0;
    int self_seen = 0;
    for (size_t i = 0; i < nn && m->st.n_nodes < CL_MAX_MEMBERS; i++) {
        json_t *j = json_loadb(nodes[i].value, nodes[i].len, 0, NULL);
        cl_node_info *ni = &m->st.nodes[m->st.n_nodes++];
        memset(ni, 0, sizeof *ni);
        snprintf(ni->name, sizeof ni->name, "%s",
                 json_string_value(json_object_get(j, "name")) ?: "");
        snprintf(ni->amqp, sizeof ni->amqp, "%s",
                 json_string_value(json_object_get(j, "amqp")) ?: "");
        snprintf(ni->http, sizeof ni->http, "%s",
                 json_string_value(json_object_get(j, "http")) ?: "");
        snprintf(ni->replication, sizeof ni->replication, "%s",
                 json_string_value(json_object_get(j, "replication")) ?: "");
        json_int_t le = json_integer_value(json_object_get(j, "last_epoch"));
        json_int_t li = json_integer_value(json_object_get(j, "last_idx"));
        ni->last_epoch = le > 0 ? (uint64_t)le : 0;
        ni->last_idx = li > 0 ? (uint64_t)li : 0;
        for (size_t k = 0; k < *n_isr; k++)
            if (!strcmp(isr[k], ni->name))
                ni->insync = 1;
        self_seen |= !strcmp(ni->name, m->name);
        json_decref(j);
    }
    /* Our registration gone while the lease lives: removed by an operator (DELETE
     * /api/cluster/nodes/NAME: banned/NAME was put first; run() looks for it and stops), or
     * the key lost some other way: register again. */
    if (!self_seen && m->lease) {
        m->log_dirty = 1;
        m->recheck_ban = 1;
    }
    /* a new leader (or none) is news for the follower phase (node.c: it points its stream
     * client and proxy at it) and must not wait for that loop's own 100 ms tick */
    int changed = strcmp(m->st.leader, leader_node) || (present && m->st.epoch != *epoch);
    snprintf(m->st.leader, sizeof m->st.leader, "%s", leader_node);
    snprintf(m->st.leader_amqp, sizeof m->st.leader_amqp, "%s", lamqp);
    if (present)
        m->st.epoch = *epoch;
    m->st.last_error[0] = 0;
    pthread_mutex_unlock(&m->mu);
    if (changed)
        notify(m);
    cl_etcd_kvs_free(nodes, nn);
    cl_etcd_kv_clear(&kv);
    return present;
}

int cl_should_campaign(const char *self, const cl_node_info *nodes, size_t n_nodes, char isr[][256],
                       size_t n_isr, int isr_exists, uint64_t absent_ms)
{
    if (!isr_exists)
        return 1;
    int member = 0;
    const cl_node_info *first = NULL;
    for (size_t i = 0; i < n_isr; i++) {
        if (!strcmp(isr[i], self))
            member = 1;
        for (size_t k = 0; k < n_nodes; k++) {
            const cl_node_info *ni = &nodes[k];
            if (strcmp(ni->name, isr[i]))
                continue;
            if (!first || ni->last_epoch > first->last_epoch ||
                (ni->last_epoch == first->last_epoch &&
                 (ni->last_idx > first->last_idx ||
                  (ni->last_idx == first->last_idx && strcmp(ni->name, first->name) < 0))))
                first = ni;
        }
    }
    if (!member)
        return 0;
    return !first || !strcmp(first->name, self) || absent_ms >= CL_WAIT_FIRST_MS;
}

static int should_campaign(cl_member *m, char isr[][256], size_t n_isr, int isr_exists)
{
    pthread_mutex_lock(&m->mu);
    int yes = cl_should_campaign(m->name, m->st.nodes, m->st.n_nodes, isr, n_isr, isr_exists,
                                 mono_ms() - m->absent_since_ms);
    pthread_mutex_unlock(&m->mu);
    return yes;
}

/* The hand-over key (a leader's step-down, cl_member_handover): {"node": HEIR, "epoch": E}.
 * It holds while etcd's epoch is still E (the heir's election makes it E + 1, so it is stale
 * from then on) and for one lease_ttl after this node first saw it (the heir may be dead).
 * 1: it names this node (campaign at once), -1: another (do not campaign), 0: none. */
static int handover_says(cl_member *m)
{
    char err[256];
    char *hk = key(m, "handover"), *ek = key(m, "epoch");
    cl_etcd_kv kv, ev;
    int says = 0;
    memset(&ev, 0, sizeof ev);
    if (cl_etcd_get(m->etcd, hk, &kv, err, sizeof err) < 0)
        goto out;
    if (kv.value && cl_etcd_get(m->etcd, ek, &ev, err, sizeof err) == 0 && ev.value) {
        json_t *j = json_loadb(kv.value, kv.len, 0, NULL);
        const char *heir = json_string_value(json_object_get(j, "node"));
        json_int_t e = json_integer_value(json_object_get(j, "epoch"));
        if (heir && e > 0 && strtoull(ev.value, NULL, 10) == (uint64_t)e) {
            if (!strcmp(heir, m->name)) {
                says = 1;
            } else {
                uint64_t now = mono_ms();
                if (!m->ho_seen_ms)
                    m->ho_seen_ms = now;
                says = now - m->ho_seen_ms < (uint64_t)m->conf.lease_ttl_s * 1000 ? -1 : 0;
            }
        }
        json_decref(j);
    }
    cl_etcd_kv_clear(&kv);
    cl_etcd_kv_clear(&ev);
out:
    if (says == 0)
        m->ho_seen_ms = 0;
    sl_free(hk);
    sl_free(ek);
    return says;
}

static void campaign(cl_member *m, int isr_exists, char *err, size_t errlen)
{
    char *ek = key(m, "epoch"), *lk = key(m, "leader"), *ik = key(m, "isr");
    cl_etcd_kv kv;
    if (cl_etcd_get(m->etcd, ek, &kv, err, errlen) < 0)
        goto out;
    uint64_t epoch = kv.value ? strtoull(kv.value, NULL, 10) : 0;
    int64_t erev = kv.value ? kv.mod_rev : 0;
    cl_etcd_kv_clear(&kv);
    char ev[32];
    snprintf(ev, sizeof ev, "%" PRIu64, epoch + 1);
    json_t *lj =
        json_pack("{s:s, s:I, s:s, s:s, s:s}", "node", m->name, "epoch", (json_int_t)(epoch + 1),
                  "amqp", m->amqp, "http", m->http, "replication", m->repl);
    char *lv = json_dumps(lj, JSON_COMPACT);
    json_decref(lj);
    json_t *ij = json_pack("[s]", m->name);
    char *iv = json_dumps(ij, JSON_COMPACT);
    json_decref(ij);
    cl_etcd_cmp cmp[3] = {
        {.key = lk, .target = CL_ETCD_CMP_CREATE, .rev = 0},
        {.key = ek, .target = erev ? CL_ETCD_CMP_MOD : CL_ETCD_CMP_CREATE, .rev = erev},
        {.key = ik, .target = CL_ETCD_CMP_CREATE, .rev = 0},
    };
    cl_etcd_put_op put[3] = {{lk, lv, m->lease}, {ek, ev, 0}, {ik, iv, 0}};
    int ok = 0;
    uint64_t t0 = mono_ms();
    int rc =
        cl_etcd_txn(m->etcd, cmp, isr_exists ? 2 : 3, put, isr_exists ? 2 : 3, &ok, err, errlen);
    free(lv);
    free(iv);
    if (rc < 0 || !ok)
        goto out;
    if (cl_etcd_get(m->etcd, lk, &kv, err, errlen) == 0 && kv.value)
        m->leader_rev = kv.create_rev;
    cl_etcd_kv_clear(&kv);
    pthread_mutex_lock(&m->mu);
    /* the lease was valid when the txn was sent (it holds the key): at least until then */
    if (m->valid_until > t0 + m->margin) {
        m->st.role = CL_ROLE_LEADER;
        m->st.epoch = epoch + 1;
        snprintf(m->st.leader, sizeof m->st.leader, "%s", m->name);
        snprintf(m->st.leader_amqp, sizeof m->st.leader_amqp, "%s", m->amqp);
    }
    int led = m->st.role == CL_ROLE_LEADER;
    pthread_mutex_unlock(&m->mu);
    if (led) {
        sl_info("cluster: leader of %s, epoch %" PRIu64, m->conf.cluster_name, epoch + 1);
        notify(m);
        lease_hook(m);
    }
out:
    sl_free(ek);
    sl_free(lk);
    sl_free(ik);
}

/* A leader's ISR proposal: written only while the leader key is the one we created and the
 * epoch is ours (repl.h: a deposed leader can never change the ISR). */
static void write_isr(cl_member *m)
{
    pthread_mutex_lock(&m->mu);
    int req = m->isr_req, leader = m->st.role == CL_ROLE_LEADER;
    uint64_t epoch = m->st.epoch;
    json_t *ij = json_array();
    for (size_t i = 0; req && i < m->isr_n; i++)
        json_array_append_new(ij, json_string(m->isr_names[i]));
    m->isr_req = 0;
    pthread_mutex_unlock(&m->mu);
    if (!req) {
        json_decref(ij);
        return;
    }
    int outcome = CL_RL_ISR_DEPOSED;
    if (leader && m->leader_rev) {
        char *iv = json_dumps(ij, JSON_COMPACT);
        char *lk = key(m, "leader"), *ek = key(m, "epoch"), *ik = key(m, "isr");
        char ev[32], err[256];
        snprintf(ev, sizeof ev, "%" PRIu64, epoch);
        cl_etcd_cmp cmp[2] = {
            {.key = lk, .target = CL_ETCD_CMP_CREATE, .rev = m->leader_rev},
            {.key = ek, .target = CL_ETCD_CMP_VALUE, .value = ev},
        };
        cl_etcd_put_op put[1] = {{ik, iv, 0}};
        int ok = 0;
        if (cl_etcd_txn(m->etcd, cmp, 2, put, 1, &ok, err, sizeof err) < 0) {
            outcome = CL_RL_ISR_RETRY;
            set_error(m, err);
        } else {
            outcome = ok ? CL_RL_ISR_DONE : CL_RL_ISR_DEPOSED;
        }
        if (ok)
            sl_info("cluster: in-sync replicas are now %s", iv);
        free(iv);
        sl_free(lk);
        sl_free(ek);
        sl_free(ik);
    }
    json_decref(ij);
    if (outcome == CL_RL_ISR_DEPOSED && leader)
        step_down(m, "the ISR could not be written: the leader key or epoch in etcd is not ours");
    /* The server that proposed waits for this outcome and proposes nothing more until it
     * comes: one that came before the hooks were set (the server starts, and may propose at
     * once, before cl_leader_adopt sets them) is kept for cl_member_set_hooks, not dropped */
    pthread_mutex_lock(&m->mu);
    if (m->hooks.isr_done)
        m->hooks.isr_done(m->hooks.ctx, outcome);
    else {
        m->isr_unsent = outcome;
        m->isr_unsent_epoch = epoch;
    }
    pthread_mutex_unlock(&m->mu);
}

/* The member thread's answer to ticket t of op. */
static void op_answer(cl_member *m, op_slot *op, uint64_t t, int result, const char *err)
{
    pthread_mutex_lock(&m->mu);
    op->result = result;
    snprintf(op->err, sizeof op->err, "%s", err);
    op->done = t;
    pthread_mutex_unlock(&m->mu);
}

/* A leader's step-down: write the hand-over key (only while the leader key is the one we
 * created and the epoch ours), then give up the key (step_down revokes the lease). */
static void do_handover(cl_member *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t t = m->handover.asked;
    int want = t != m->handover.done, leader = m->st.role == CL_ROLE_LEADER;
    uint64_t epoch = m->st.epoch;
    char heir[256];
    snprintf(heir, sizeof heir, "%s", m->handover.arg);
    pthread_mutex_unlock(&m->mu);
    if (!want)
        return;
    int result = -1;
    char err[256] = "";
    if (!leader || !m->leader_rev) {
        snprintf(err, sizeof err, "this node is no longer the leader");
    } else {
        char *lk = key(m, "leader"), *ek = key(m, "epoch"), *hk = key(m, "handover");
        char ev[32];
        snprintf(ev, sizeof ev, "%" PRIu64, epoch);
        json_t *hj =
            json_pack("{s:s, s:I, s:s}", "node", heir, "epoch", (json_int_t)epoch, "from", m->name);
        char *hv = json_dumps(hj, JSON_COMPACT);
        json_decref(hj);
        cl_etcd_cmp cmp[2] = {
            {.key = lk, .target = CL_ETCD_CMP_CREATE, .rev = m->leader_rev},
            {.key = ek, .target = CL_ETCD_CMP_VALUE, .value = ev},
        };
        cl_etcd_put_op put[1] = {{hk, hv, 0}};
        int ok = 0, asked = cl_etcd_txn(m->etcd, cmp, 2, put, 1, &ok, err, sizeof err) == 0;
        free(hv);
        sl_free(lk);
        sl_free(ek);
        sl_free(hk);
        if (asked && ok) {
            result = 1;
            sl_info("cluster: handing over to %s (epoch %" PRIu64 ")", heir, epoch);
        } else if (asked) { /* deposed meanwhile */
            snprintf(err, sizeof err, "the leader key or epoch in etcd is not ours");
            step_down(m, "the hand-over could not be written: the leader key or epoch in etcd "
                         "is not ours");
        } /* else etcd could not be asked: still the leader, the step-down fails */
    }
    if (result > 0) {
        /* answered before the role changes, so the loop finds the outcome with the event */
        op_answer(m, &m->handover, t, 1, "");
        step_down(m, "stepping down for a hand-over (POST /api/cluster/step-down)");
        return;
    }
    op_answer(m, &m->handover, t, -1, err);
}

static int name_in(char list[][256], size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], name))
            return 1;
    return 0;
}

/* Take name out of list (n entries); under mu. */
static void name_drop(char list[][256], size_t *n, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(list[i], name)) {
            memmove(list[i], list[i + 1], (*n - i - 1) * sizeof list[0]);
            (*n)--;
            return;
        }
}

static void name_add(char list[][256], size_t *n, const char *name)
{
    if (!name_in(list, *n, name) && *n < CL_MAX_MEMBERS)
        snprintf(list[(*n)++], 256, "%s", name);
}

/* An operator's removal of a member: banned/NAME first (the node, finding its registration
 * gone, finds the ban; a node started later does not register), then its registration,
 * membership and figures go, then the view is read again. */
static void do_forget(cl_member *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t t = m->forget.asked;
    int want = t != m->forget.done;
    char name[256];
    snprintf(name, sizeof name, "%s", m->forget.arg);
    pthread_mutex_unlock(&m->mu);
    if (!want)
        return;
    char err[256] = "";
    json_t *bj = json_pack("{s:s, s:I}", "node", name, "at", (json_int_t)sl_wall_ms());
    char *bv = json_dumps(bj, JSON_COMPACT);
    json_decref(bj);
    char *bk = name_key(m, "banned/", name);
    int rc = cl_etcd_put(m->etcd, bk, bv, 0, err, sizeof err);
    free(bv);
    sl_free(bk);
    static const char *const dirs[] = {"nodes/", "members/", "stats/"};
    for (size_t i = 0; rc == 0 && i < sizeof dirs / sizeof dirs[0]; i++) {
        char *k = name_key(m, dirs[i], name);
        rc = cl_etcd_delete(m->etcd, k, err, sizeof err);
        sl_free(k);
    }
    pthread_mutex_lock(&m->mu);
    name_drop(m->pend_bans, &m->n_pend_bans, name);
    if (rc == 0) {
        name_add(m->bans, &m->n_bans, name);
        for (size_t i = 0; i < m->n_mems; i++)
            if (!strcmp(m->mems[i].name, name)) {
                m->mems[i] = m->mems[--m->n_mems];
                break;
            }
    }
    pthread_mutex_unlock(&m->mu);
    if (rc == 0) {
        char leader_node[256], isr[CL_MAX_MEMBERS][256];
        size_t n_isr = 0;
        uint64_t epoch;
        int64_t crev;
        int isr_exists = 0;
        rc = look(m, leader_node, sizeof leader_node, &epoch, &crev, isr, &n_isr, &isr_exists, err,
                  sizeof err) < 0
                 ? -1
                 : 0;
        if (rc == 0)
            sl_info("cluster: member %s removed from etcd (banned until readmitted)", name);
    }
    op_answer(m, &m->forget, t, rc == 0 ? 1 : -1, err);
}

/* An operator's readmission: banned/NAME goes (-2: there was none). */
static void do_readmit(cl_member *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t t = m->readmit.asked;
    int want = t != m->readmit.done;
    char name[256];
    snprintf(name, sizeof name, "%s", m->readmit.arg);
    pthread_mutex_unlock(&m->mu);
    if (!want)
        return;
    char err[256] = "";
    char *bk = name_key(m, "banned/", name);
    cl_etcd_kv kv;
    int result = -1;
    if (cl_etcd_get(m->etcd, bk, &kv, err, sizeof err) == 0) {
        if (!kv.value) {
            snprintf(err, sizeof err, "%.200s was not removed from this cluster", name);
            result = -2;
        } else if (cl_etcd_delete(m->etcd, bk, err, sizeof err) == 0) {
            result = 1;
        }
        cl_etcd_kv_clear(&kv);
    }
    sl_free(bk);
    if (result == 1) {
        pthread_mutex_lock(&m->mu);
        name_drop(m->bans, &m->n_bans, name);
        name_drop(m->pend_bans, &m->n_pend_bans, name);
        pthread_mutex_unlock(&m->mu);
        sl_info("cluster: member %s readmitted (its ban is gone from etcd)", name);
    }
    op_answer(m, &m->readmit, t, result, err);
}

/* Is this node banned? 1 yes, 0 no, -1 etcd did not answer. */
static int check_ban(cl_member *m, char *err, size_t errlen)
{
    char *bk = name_key(m, "banned/", m->name);
    cl_etcd_kv kv;
    int rc = cl_etcd_get(m->etcd, bk, &kv, err, errlen);
    sl_free(bk);
    if (rc < 0)
        return -1;
    int banned = kv.value != NULL;
    cl_etcd_kv_clear(&kv);
    return banned;
}

/* Removed by an operator: give up the lease (registration and figures go with it), name no
 * leader, and wait for readmission. */
static void enter_banned(cl_member *m)
{
    step_down(m, "this node was removed from the cluster by an operator");
    if (m->lease) {
        char err[256];
        cl_etcd_lease_revoke(m->etcd, m->lease, err, sizeof err);
        m->lease = 0;
    }
    m->banned = 1;
    m->next_ban_look = mono_ms() + 1000;
    pthread_mutex_lock(&m->mu);
    m->st.banned = 1;
    m->st.role = CL_ROLE_JOINING;
    m->st.leader[0] = 0;
    m->st.leader_amqp[0] = 0;
    m->st.n_nodes = 0;
    pthread_mutex_unlock(&m->mu);
    notify(m);
    if (!m->ban_said) {
        sl_warn("cluster: this node was removed from the cluster by an operator; not rejoining "
                "(sluicectl cluster readmit %s lets it back)",
                m->name);
        m->ban_said = 1;
    }
}

/* Banned: once a second, is the ban still there? 1 while it is. */
static int still_banned(cl_member *m, uint64_t now)
{
    if (now < m->next_ban_look)
        return 1;
    m->next_ban_look = now + 1000;
    char err[256];
    if (check_ban(m, err, sizeof err) != 0)
        return 1; /* banned, or etcd cannot say: stay out */
    m->banned = 0;
    m->ban_said = 0;
    pthread_mutex_lock(&m->mu);
    m->st.banned = 0;
    pthread_mutex_unlock(&m->mu);
    notify(m);
    sl_info("cluster: this node was readmitted to the cluster by an operator; rejoining");
    return 0;
}

/* Every CL_FIGURES_PERIOD_MS: banned/ (every node: a new leader has it when it wins), and on
 * the leader members/ and stats/ for /api/nodes. */
static void read_members(cl_member *m, int leader)
{
    char err[256];
    char *p = key(m, "banned/");
    cl_etcd_kv *kv = NULL;
    size_t n = 0, pl = strlen(p);
    if (cl_etcd_list(m->etcd, p, &kv, &n, err, sizeof err) == 0) {
        pthread_mutex_lock(&m->mu);
        m->n_bans = 0;
        for (size_t i = 0; i < n && m->n_bans < CL_MAX_MEMBERS; i++)
            if (strlen(kv[i].key) > pl)
                snprintf(m->bans[m->n_bans++], 256, "%s", kv[i].key + pl);
        pthread_mutex_unlock(&m->mu);
        cl_etcd_kvs_free(kv, n);
    }
    sl_free(p);
    if (!leader)
        return;
    char *mp = key(m, "members/"), *sp = key(m, "stats/");
    cl_etcd_kv *mk = NULL, *sk = NULL;
    size_t mn = 0, sn = 0, mpl = strlen(mp), spl = strlen(sp);
    if (cl_etcd_list(m->etcd, mp, &mk, &mn, err, sizeof err) == 0 &&
        cl_etcd_list(m->etcd, sp, &sk, &sn, err, sizeof err) == 0) {
        cl_member_fig *v = sl_xcalloc(CL_MAX_MEMBERS, sizeof *v);
        size_t k = 0;
        for (size_t i = 0; i < mn && k < CL_MAX_MEMBERS; i++)
            if (strlen(mk[i].key) > mpl)
                snprintf(v[k++].name, sizeof v[0].name, "%s", mk[i].key + mpl);
        for (size_t i = 0; i < sn; i++) {
            if (strlen(sk[i].key) <= spl || sk[i].len >= CL_FIGURES_MAX)
                continue;
            const char *nm = sk[i].key + spl;
            size_t at = 0;
            while (at < k && strcmp(v[at].name, nm))
                at++;
            if (at == k) {
                if (k == CL_MAX_MEMBERS)
                    continue;
                snprintf(v[k++].name, sizeof v[0].name, "%s", nm);
            }
            memcpy(v[at].figures, sk[i].value, sk[i].len);
            v[at].figures[sk[i].len] = 0;
        }
        pthread_mutex_lock(&m->mu);
        sl_free(m->mems);
        m->mems = v;
        m->n_mems = k;
        pthread_mutex_unlock(&m->mu);
    }
    cl_etcd_kvs_free(mk, mn);
    cl_etcd_kvs_free(sk, sn);
    sl_free(mp);
    sl_free(sp);
}

/* stats/NAME under our lease, when the figures changed (they always do: uptime) and at most
 * every CL_FIGURES_PERIOD_MS (a call is the period's turn, whether there was anything new). */
static void publish_figures(cl_member *m, uint64_t now)
{
    if (!m->lease || now < m->next_fig_put)
        return;
    m->next_fig_put = now + CL_FIGURES_PERIOD_MS;
    pthread_mutex_lock(&m->mu);
    char *v = (m->fig_dirty || m->fig_again) && m->fig_out ? sl_xstrdup(m->fig_out) : NULL;
    m->fig_dirty = 0;
    pthread_mutex_unlock(&m->mu);
    if (!v)
        return;
    char err[256];
    char *k = name_key(m, "stats/", m->name);
    if (cl_etcd_put(m->etcd, k, v, m->lease, err, sizeof err) == 0)
        m->fig_again = 0;
    else
        m->fig_again = 1; /* try again next period */
    sl_free(k);
    sl_free(v);
}

/* nodes/NAME again when the log position moved. */
static void republish(cl_member *m)
{
    pthread_mutex_lock(&m->mu);
    int dirty = m->log_dirty;
    pthread_mutex_unlock(&m->mu);
    if (!dirty || !m->lease)
        return;
    char *nk = key(m, "nodes/");
    size_t nl = strlen(nk);
    nk = sl_xrealloc(nk, nl + strlen(m->name) + 1);
    strcpy(nk + nl, m->name);
    char *v = node_json(m);
    char err[256];
    /* Only while no ban exists: an operator's removal puts banned/NAME, then deletes
     * nodes/NAME. A plain put landing between that delete and our next look() brought the
     * registration back, so look() never saw it gone and the node never learnt of its ban
     * (test_cluster_members: a removed follower kept redialling the leader for 10 s). */
    char *bk = name_key(m, "banned/", m->name);
    cl_etcd_cmp cmp[1] = {{.key = bk, .target = CL_ETCD_CMP_CREATE, .rev = 0}};
    cl_etcd_put_op put[1] = {{.key = nk, .value = v, .lease = m->lease}};
    int ok = 0;
    if (cl_etcd_txn(m->etcd, cmp, 1, put, 1, &ok, err, sizeof err) < 0 || !ok) {
        pthread_mutex_lock(&m->mu);
        m->log_dirty = 1;
        pthread_mutex_unlock(&m->mu);
    }
    free(v);
    sl_free(nk);
    sl_free(bk);
    if (!ok && check_ban(m, err, sizeof err) > 0)
        enter_banned(m);
}

/* Anyone who dials the replication port hears that the stream is not served yet. */
static void refuse_replication(cl_member *m)
{
    for (int i = 0; i < 16; i++) {
        int fd = accept4(m->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        sl_buf b;
        sl_buf_init(&b);
        cl_wire_put_refuse(&b, 1, "the replication stream is not served by this version");
        ssize_t n = send(fd, b.data, b.len, MSG_NOSIGNAL);
        (void)n;
        sl_buf_free(&b);
        close(fd);
    }
}

/* The figures and bans (publish_figures, read_members): never on a failover's path. Not while
 * the leader key is gone (an election), nor while an ISR write or an operator's action waits,
 * nor in the first period after this node took the key (its first ISR writes come then); and
 * one etcd call's worth per round, so the watch's ring waits for one call at most. */
static void figures_work(cl_member *m, int leader_present)
{
    pthread_mutex_lock(&m->mu);
    int busy = m->isr_req || m->handover.asked != m->handover.done ||
               m->forget.asked != m->forget.done || m->readmit.asked != m->readmit.done;
    int lead_now = m->st.role == CL_ROLE_LEADER;
    pthread_mutex_unlock(&m->mu);
    uint64_t now = mono_ms();
    if (busy || leader_present <= 0)
        return;
    if (lead_now && !m->was_leader) { /* just elected: leave etcd to the ISR writes a while */
        m->next_fig_put = m->next_fig_read = now + CL_FIGURES_PERIOD_MS;
    }
    m->was_leader = lead_now;
    int put_due = m->lease && now >= m->next_fig_put, read_due = now >= m->next_fig_read;
    if (put_due && (!read_due || m->next_fig_put <= m->next_fig_read)) {
        publish_figures(m, now);
        return;
    }
    if (read_due) {
        read_members(m, lead_now);
        m->next_fig_read = mono_ms() + CL_FIGURES_PERIOD_MS;
    }
}

/* Issue 46: the stream from the leader at addr ended (EOF or a reset). If the leader key still
 * names that address, this node is in the ISR (a node that may follow it as leader), and the
 * port refuses twice in a row, the leader's process is gone while its host lives: revoke its
 * lease by id, which deletes the leader key (and its nodes/NAME, stats/NAME) at once, so the
 * election starts now instead of when the lease runs out. Safety does not rest on the
 * refusal being right (docs/cluster.md "A dead process is noticed at once"): a live leader
 * deposed this way can confirm nothing the next leader lacks, for every confirm needs the
 * durable ACK of every ISR member, and the next leader is one that stops ACKing before it
 * serves. */
#define LOST_PROBE_TRIES 20
#define LOST_PROBE_GAP_MS 5
#define LOST_PROBE_TIMEOUT_MS 50
static void check_lost_leader(cl_member *m)
{
    pthread_mutex_lock(&m->mu);
    int req = m->lost_req;
    char addr[280];
    snprintf(addr, sizeof addr, "%s", m->lost_addr);
    m->lost_req = 0;
    pthread_mutex_unlock(&m->mu);
    if (!req || !m->lease || m->banned)
        return;
    char err[256];
    char *lk = key(m, "leader");
    cl_etcd_kv kv;
    int rc = cl_etcd_get(m->etcd, lk, &kv, err, sizeof err);
    sl_free(lk);
    if (rc < 0 || !kv.value) { /* etcd silent (the lease decides), or no leader any more */
        if (rc == 0)
            cl_etcd_kv_clear(&kv);
        return;
    }
    json_t *j = json_loadb(kv.value, kv.len, 0, NULL);
    char node[256], repl[280];
    snprintf(node, sizeof node, "%s", json_string_value(json_object_get(j, "node")) ?: "");
    snprintf(repl, sizeof repl, "%s", json_string_value(json_object_get(j, "replication")) ?: "");
    json_int_t epoch = json_integer_value(json_object_get(j, "epoch"));
    json_decref(j);
    int64_t lease = kv.lease;
    cl_etcd_kv_clear(&kv);
    /* only the advertised address of the leader the key names now, held under a lease */
    if (!lease || !node[0] || !strcmp(node, m->name) || strcmp(repl, addr))
        return;
    char isr[CL_MAX_MEMBERS][256];
    size_t n_isr = 0;
    int64_t isr_rev;
    if (read_isr(m, isr, CL_MAX_MEMBERS, &n_isr, &isr_rev, err, sizeof err) != 0 ||
        !name_in(isr, n_isr, m->name)) {
        sl_info("cluster: the stream from leader %s at %s ended; this node is not in the ISR: "
                "its lease decides",
                node, addr);
        return;
    }
    uint64_t t0 = mono_ms();
    int dead = cl_probe_dead(addr, LOST_PROBE_TRIES, LOST_PROBE_GAP_MS, LOST_PROBE_TIMEOUT_MS);
    if (dead <= 0) {
        sl_info("cluster: the stream from leader %s at %s ended, but its replication port %s: "
                "waiting for its lease",
                node, addr, dead == 0 ? "answers" : "did not refuse (no answer)");
        return;
    }
    sl_warn("cluster: leader %s's replication port %s refused twice (%" PRIu64
            " ms after its stream ended): revoking its lease %" PRId64 " (epoch %" PRId64 ")",
            node, addr, mono_ms() - t0, lease, (int64_t)epoch);
    if (cl_etcd_lease_revoke(m->etcd, lease, err, sizeof err) < 0)
        sl_info("cluster: revoking leader %s's lease %" PRId64 ": %s (another follower did?)", node,
                lease, err);
}

/* The leader key names this node under a lease that is not this process's: an earlier
 * process of this node led and died (kill -9, a crash), and this one started before the lease
 * ran out (a restart on the same port, which no follower's probe can find refused). The key
 * holds no serving leader: revoke its lease so the election need not wait for it. */
static void drop_stale_own_key(cl_member *m, const char *leader_node, int leading)
{
    if (leading || !m->key_lease || m->key_lease == m->lease || strcmp(leader_node, m->name))
        return;
    char err[256];
    sl_warn("cluster: the leader key names this node under lease %" PRId64
            ", not this process's (an earlier process of this node led): revoking it",
            m->key_lease);
    if (cl_etcd_lease_revoke(m->etcd, m->key_lease, err, sizeof err) < 0)
        sl_info("cluster: revoking lease %" PRId64 ": %s", m->key_lease, err);
    m->key_lease = 0;
}

static void *run(void *arg)
{
    cl_member *m = arg;
    char err[512];
    uint64_t period = m->conf.lease_ttl_s * 1000 / 4;
    uint64_t next_renew = 0;
    for (;;) {
        uint64_t now = mono_ms();
        err[0] = 0;
        pthread_mutex_lock(&m->mu);
        int leader = m->st.role == CL_ROLE_LEADER;
        uint64_t stop_at = m->valid_until > m->margin ? m->valid_until - m->margin : 0;
        pthread_mutex_unlock(&m->mu);
        if (leader && now >= stop_at)
            step_down(m, "the etcd lease could not be renewed in time");
        if (m->banned && still_banned(m, now))
            goto rest;
        if (!m->lease) {
            if (get_lease(m, err, sizeof err) < 0) {
                /* an unreachable etcd is retried quietly; one that refuses this node's
                 * credentials is a setting to fix: said once, at warning level */
                pthread_mutex_lock(&m->mu);
                int again = !strcmp(m->st.last_error, err);
                pthread_mutex_unlock(&m->mu);
                set_error(m, err);
                if (!again && strstr(err, "authenticating as"))
                    sl_warn("cluster: %s", err);
                else
                    sl_debug("cluster: %s", err);
            }
            next_renew = now + period;
        } else if (now >= next_renew) {
            if (renew(m, err, sizeof err) < 0) {
                set_error(m, err);
                sl_warn("cluster: lease renewal failed: %s", err);
                if (!m->lease)
                    step_down(m, "the etcd lease expired");
                next_renew = now + period / 4; /* try again soon */
            } else {
                next_renew = now + period;
            }
        }
        if (m->lease)
            check_lost_leader(m); /* before look(): it then finds the key gone */
        if (m->lease) {
            char leader_node[256], isr[CL_MAX_MEMBERS][256];
            size_t n_isr = 0;
            uint64_t epoch;
            int64_t crev;
            int isr_exists = 0;
            int present = look(m, leader_node, sizeof leader_node, &epoch, &crev, isr, &n_isr,
                               &isr_exists, err, sizeof err);
            if (m->recheck_ban) { /* our registration went: an operator's removal? */
                m->recheck_ban = 0;
                if (check_ban(m, err, sizeof err) > 0) {
                    enter_banned(m);
                    goto rest;
                }
            }
            if (present > 0) {
                m->absent_since_ms = 0;
                drop_stale_own_key(m, leader_node, leader);
            } else if (present == 0 && !m->absent_since_ms)
                m->absent_since_ms = mono_ms();
            if (present < 0) {
                set_error(m, err);
            } else if (present == 0) {
                if (leader)
                    step_down(m, "the leader key is gone");
                /* a hand-over names the heir: it goes at once, the others wait for it */
                int ho = handover_says(m);
                if (ho > 0 || (ho == 0 && should_campaign(m, isr, n_isr, isr_exists)))
                    campaign(m, isr_exists, err, sizeof err);
            } else if (leader && (crev != m->leader_rev || strcmp(leader_node, m->name))) {
                step_down(m, "another node holds the leader key");
            }
            /* only while etcd answers: a leader must not spend its last moments waiting */
            if (present >= 0) {
                write_isr(m);
                do_handover(m);
                do_forget(m);
                do_readmit(m);
                republish(m);
                figures_work(m, present);
            }
        }
    rest:
        /* sleep until the next renewal, never past the moment a leader must stop */
        now = mono_ms();
        uint64_t wake = next_renew;
        pthread_mutex_lock(&m->mu);
        if (m->st.role == CL_ROLE_LEADER && m->valid_until > m->margin &&
            m->valid_until - m->margin < wake)
            wake = m->valid_until - m->margin;
        pthread_mutex_unlock(&m->mu);
        int timeout = wake > now ? (int)(wake - now) : 0;
        if (timeout > 250)
            timeout = 250; /* look at etcd often enough to see a leader go */
        pthread_mutex_lock(&m->mu);
        /* A leader's port is left alone: the broker takes it (cl_member_take_listen) within
         * milliseconds and serves what waits in the backlog; a follower that dialed the new
         * leader that early and were refused would wait out its retry pause. */
        int lfd = m->st.role == CL_ROLE_LEADER ? -1 : m->listen_fd;
        if (m->isr_req || m->lost_req || m->handover.asked != m->handover.done ||
            m->forget.asked != m->forget.done || m->readmit.asked != m->readmit.done)
            timeout = 0;
        pthread_mutex_unlock(&m->mu);
        struct pollfd pf[2] = {{m->wake_fd[0], POLLIN, 0}, {lfd, POLLIN, 0}};
        int rc = poll(pf, 2, timeout);
        if (rc > 0 && (pf[0].revents & POLLIN)) {
            char w[64];
            ssize_t n = read(m->wake_fd[0], w, sizeof w);
            if (n > 0 && memchr(w, 'x', (size_t)n))
                break; /* stop ('i': an ISR proposal waits) */
        }
        if (rc > 0 && (pf[1].revents & POLLIN)) {
            pthread_mutex_lock(&m->mu);
            if (m->listen_fd == lfd) /* not handed over meanwhile */
                refuse_replication(m);
            pthread_mutex_unlock(&m->mu);
        }
    }
    /* a clean stop: give the key back so another node takes over at once */
    if (m->lease) {
        int was;
        pthread_mutex_lock(&m->mu);
        was = m->st.role == CL_ROLE_LEADER;
        m->st.role = CL_ROLE_FOLLOWER;
        pthread_mutex_unlock(&m->mu);
        if (was)
            notify(m);
        cl_etcd_lease_revoke(m->etcd, m->lease, err, sizeof err);
    }
    return NULL;
}

static int listen_replication(cl_member *m, const char *bind_addr, int port, char *err,
                              size_t errlen)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, bind_addr, &sa.sin_addr) != 1) {
        snprintf(err, errlen, "replication port: %s is not an IPv4 address", bind_addr);
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 16) < 0) {
        snprintf(err, errlen, "replication port %s:%d: %s", bind_addr, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    m->listen_fd = fd;
    m->repl_port = ntohs(sa.sin_port);
    sl_info("listening replication=%s:%d", bind_addr, m->repl_port);
    return 0;
}

static char *addr_port(const char *a, int port)
{
    char buf[300];
    snprintf(buf, sizeof buf, "%s:%d", a, port);
    return sl_xstrdup(buf);
}

cl_member *cl_member_start(const cl_member_opts *o, char *err, size_t errlen)
{
    cl_member *m = sl_xcalloc(1, sizeof *m);
    m->listen_fd = m->event_fd = m->wake_fd[0] = m->wake_fd[1] = -1;
    m->isr_unsent = -1;
    pthread_mutex_init(&m->mu, NULL);
    const cl_conf *c = o->conf;
    m->conf = *c; /* the strings stay the config's: it outlives the member */
    m->name = sl_xstrdup(o->node_name);
    m->amqp = addr_port(o->advertise, o->amqp_port);
    m->http = o->http_port > 0 ? addr_port(o->advertise, o->http_port) : sl_xstrdup("");
    m->margin = (uint64_t)c->lease_ttl_s * 1000 / 4;
    size_t pl = strlen(c->key_prefix) + strlen(c->cluster_name) + 4;
    m->prefix = sl_xmalloc(pl);
    snprintf(m->prefix, pl, "/%s/%s/", c->key_prefix, c->cluster_name);
    m->st.role = CL_ROLE_JOINING;
    m->log_epoch = o->last_epoch;
    m->log_idx = o->last_idx;
    uint32_t timeout = c->lease_ttl_s * 1000 / 4;
    if (timeout > 1500)
        timeout = 1500;
    cl_etcd_opts eo = {.username = c->etcd_username,
                       .password = c->etcd_password,
                       .https = c->etcd_https,
                       .cacertfile = c->etcd_cacertfile,
                       .certfile = c->etcd_certfile,
                       .keyfile = c->etcd_keyfile,
                       .verify = c->etcd_verify};
    m->etcd = cl_etcd_new(c->endpoints, c->n_endpoints, timeout, &eo);
    if (!m->etcd) {
        snprintf(err, errlen, "cannot make an HTTP client for etcd");
        goto fail;
    }
    if (listen_replication(m, o->bind, c->replication_port, err, errlen) < 0)
        goto fail;
    m->repl = addr_port(o->advertise, m->repl_port);
    m->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (m->event_fd < 0 || pipe2(m->wake_fd, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "cluster: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&m->thread, NULL, run, m) != 0) {
        snprintf(err, errlen, "cluster: cannot start its thread");
        goto fail;
    }
    m->started = 1;
    /* Followers learn that the leader key went (and who took it) from the watch within
     * milliseconds, not at the next 250 ms poll; without it (it failed to start, or its
     * stream is down) they still do at the poll. */
    char *lk = key(m, "leader");
    m->watch = cl_etcd_watch_start(c->endpoints, c->n_endpoints, lk, m->wake_fd[1], 250, &eo);
    sl_free(lk);
    if (!m->watch)
        sl_warn("cluster: no watch on the leader key: a leader's loss is seen at the next poll");
    return m;
fail:
    cl_member_stop(m);
    return NULL;
}

void cl_member_stop(cl_member *m)
{
    if (!m)
        return;
    cl_etcd_watch_stop(m->watch); /* first: it writes to wake_fd */
    if (m->started) {
        ssize_t n = write(m->wake_fd[1], "x", 1);
        (void)n;
        pthread_join(m->thread, NULL);
    }
    cl_etcd_free(m->etcd);
    if (m->listen_fd >= 0)
        close(m->listen_fd);
    if (m->event_fd >= 0)
        close(m->event_fd);
    if (m->wake_fd[0] >= 0) {
        close(m->wake_fd[0]);
        close(m->wake_fd[1]);
    }
    pthread_mutex_destroy(&m->mu);
    sl_free(m->fig_out);
    sl_free(m->mems);
    sl_free(m->name);
    sl_free(m->amqp);
    sl_free(m->http);
    sl_free(m->repl);
    sl_free(m->prefix);
    sl_free(m);
}

int cl_member_fd(const cl_member *m)
{
    return m->event_fd;
}

void cl_member_take_event(cl_member *m)
{
    uint64_t v;
    ssize_t n = read(m->event_fd, &v, sizeof v);
    (void)n;
}

void cl_member_status(cl_member *m, cl_status *out)
{
    pthread_mutex_lock(&m->mu);
    *out = m->st;
    pthread_mutex_unlock(&m->mu);
}

int cl_member_serving(cl_member *m)
{
    pthread_mutex_lock(&m->mu);
    int ok = m->st.role == CL_ROLE_LEADER && mono_ms() + m->margin < m->valid_until;
    pthread_mutex_unlock(&m->mu);
    return ok;
}

int cl_member_replication_port(const cl_member *m)
{
    return m->repl_port;
}

void cl_member_set_hooks(cl_member *m, const cl_member_hooks *h)
{
    pthread_mutex_lock(&m->mu);
    if (h)
        m->hooks = *h;
    else
        memset(&m->hooks, 0, sizeof m->hooks);
    /* see write_isr: only an outcome of this term's proposals; one that an earlier term's
     * write left after its hooks were cleared would answer a proposal it never made */
    int outcome = m->isr_unsent;
    m->isr_unsent = -1;
    if (m->hooks.isr_done && outcome >= 0 && m->isr_unsent_epoch == m->st.epoch)
        m->hooks.isr_done(m->hooks.ctx, outcome);
    pthread_mutex_unlock(&m->mu);
}

void cl_member_set_log(cl_member *m, uint64_t last_epoch, uint64_t last_idx)
{
    pthread_mutex_lock(&m->mu);
    if (last_epoch != m->log_epoch || last_idx != m->log_idx) {
        m->log_epoch = last_epoch;
        m->log_idx = last_idx;
        m->log_dirty = 1;
    }
    pthread_mutex_unlock(&m->mu);
}

void cl_member_leader_lost(cl_member *m, const char *addr)
{
    pthread_mutex_lock(&m->mu);
    snprintf(m->lost_addr, sizeof m->lost_addr, "%s", addr);
    m->lost_req = 1;
    pthread_mutex_unlock(&m->mu);
    ssize_t w = write(m->wake_fd[1], "p", 1);
    (void)w;
}

void cl_member_isr_propose(cl_member *m, const char *const *names, size_t n)
{
    pthread_mutex_lock(&m->mu);
    m->isr_n = 0;
    for (size_t i = 0; i < n && i < CL_MAX_MEMBERS; i++)
        snprintf(m->isr_names[m->isr_n++], sizeof m->isr_names[0], "%s", names[i]);
    m->isr_req = 1;
    pthread_mutex_unlock(&m->mu);
    ssize_t w = write(m->wake_fd[1], "i", 1);
    (void)w;
}

int cl_member_take_listen(cl_member *m)
{
    pthread_mutex_lock(&m->mu);
    int fd = m->listen_fd;
    m->listen_fd = -1;
    pthread_mutex_unlock(&m->mu);
    return fd;
}

/* The asking side of an op_slot: the loop's thread. */
static uint64_t op_ask(cl_member *m, op_slot *op, const char *arg)
{
    pthread_mutex_lock(&m->mu);
    snprintf(op->arg, sizeof op->arg, "%s", arg);
    uint64_t t = ++op->asked;
    pthread_mutex_unlock(&m->mu);
    ssize_t w = write(m->wake_fd[1], "i", 1);
    (void)w;
    return t;
}

static int op_state(cl_member *m, const op_slot *op, uint64_t ticket, char *err, size_t errlen)
{
    pthread_mutex_lock(&m->mu);
    int r = op->done >= ticket ? op->result : 0;
    if (r < 0)
        snprintf(err, errlen, "%s", op->err);
    pthread_mutex_unlock(&m->mu);
    return r;
}

uint64_t cl_member_handover(cl_member *m, const char *heir)
{
    return op_ask(m, &m->handover, heir);
}

int cl_member_handover_state(cl_member *m, uint64_t ticket, char *err, size_t errlen)
{
    return op_state(m, &m->handover, ticket, err, errlen);
}

uint64_t cl_member_forget(cl_member *m, const char *name)
{
    return op_ask(m, &m->forget, name);
}

int cl_member_forget_state(cl_member *m, uint64_t ticket, char *err, size_t errlen)
{
    return op_state(m, &m->forget, ticket, err, errlen);
}

uint64_t cl_member_readmit(cl_member *m, const char *name)
{
    return op_ask(m, &m->readmit, name);
}

int cl_member_readmit_state(cl_member *m, uint64_t ticket, char *err, size_t errlen)
{
    return op_state(m, &m->readmit, ticket, err, errlen);
}

int cl_member_is_banned(cl_member *m, const char *name)
{
    pthread_mutex_lock(&m->mu);
    int b = name_in(m->bans, m->n_bans, name) || name_in(m->pend_bans, m->n_pend_bans, name);
    pthread_mutex_unlock(&m->mu);
    return b;
}

int cl_member_is_member(cl_member *m, const char *name)
{
    pthread_mutex_lock(&m->mu);
    int k = 0;
    for (size_t i = 0; i < m->n_mems && !k; i++)
        k = !strcmp(m->mems[i].name, name);
    for (size_t i = 0; i < m->st.n_nodes && !k; i++)
        k = !strcmp(m->st.nodes[i].name, name);
    pthread_mutex_unlock(&m->mu);
    return k;
}

size_t cl_member_bans(cl_member *m, char out[][256], size_t max)
{
    pthread_mutex_lock(&m->mu);
    size_t n = 0;
    for (size_t i = 0; i < m->n_bans && n < max; i++)
        snprintf(out[n++], 256, "%s", m->bans[i]);
    for (size_t i = 0; i < m->n_pend_bans && n < max; i++)
        if (!name_in(m->bans, m->n_bans, m->pend_bans[i]))
            snprintf(out[n++], 256, "%s", m->pend_bans[i]);
    pthread_mutex_unlock(&m->mu);
    return n;
}

void cl_member_ban_local(cl_member *m, const char *name)
{
    pthread_mutex_lock(&m->mu);
    name_add(m->pend_bans, &m->n_pend_bans, name);
    pthread_mutex_unlock(&m->mu);
}

void cl_member_unban_local(cl_member *m, const char *name)
{
    pthread_mutex_lock(&m->mu);
    name_drop(m->pend_bans, &m->n_pend_bans, name);
    pthread_mutex_unlock(&m->mu);
}

void cl_member_set_figures(cl_member *m, const char *json)
{
    pthread_mutex_lock(&m->mu);
    sl_free(m->fig_out);
    m->fig_out = sl_xstrdup(json);
    m->fig_dirty = 1;
    pthread_mutex_unlock(&m->mu);
}

size_t cl_member_members(cl_member *m, cl_member_fig *out, size_t max)
{
    pthread_mutex_lock(&m->mu);
    size_t n = 0;
    for (size_t i = 0; i < m->n_mems && n < max; i++)
        out[n++] = m->mems[i];
    /* registered (nodes/, read every 250 ms) but not yet in the slower read */
    for (size_t i = 0; i < m->st.n_nodes && n < max; i++) {
        size_t k = 0;
        while (k < n && strcmp(out[k].name, m->st.nodes[i].name))
            k++;
        if (k == n) {
            memset(&out[n], 0, sizeof out[n]);
            snprintf(out[n++].name, sizeof out[0].name, "%s", m->st.nodes[i].name);
        }
    }
    for (size_t k = 0; k < n; k++) {
        out[k].running = 0;
        for (size_t i = 0; i < m->st.n_nodes; i++)
            out[k].running |= !strcmp(out[k].name, m->st.nodes[i].name);
    }
    pthread_mutex_unlock(&m->mu);
    return n;
}

uint64_t cl_member_lease_until(cl_member *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t v =
        m->st.role == CL_ROLE_LEADER && m->valid_until > m->margin ? m->valid_until - m->margin : 0;
    pthread_mutex_unlock(&m->mu);
    return v;
}
