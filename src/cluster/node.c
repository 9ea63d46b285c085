/* node.c - the follower phase of a cluster node, its promotion and the re-exec of a deposed
 * leader (see node.h).
 *
 * Invariants:
 * - In the follower phase the store is never opened: the data directory is written only by
 *   the replication client (cl_mirror_apply of the leader's groups, or a full copy swapped in).
 * - DATA_DIR/replica/inflight is non-empty (durably, before the first operation) from the
 *   first group applied after a save of the replica state until the next save, which the
 *   client makes once the stream is quiet, not per batch (stream.c's SAVE_IDLE_MS): a node
 *   killed or powered off then may hold part of a group, or groups its position does not
 *   count, which a physical mirror can only trust if the leader still has the same groups;
 *   it is not known cheaply, so such a node takes a full copy (as does one that led:
 *   node.h).
 * - A full copy is written into DATA_DIR.joining and becomes DATA_DIR by two renames once it is
 *   whole and synced, with its replica state inside: at every moment one of the two is a whole
 *   data directory (start-up finishes an interrupted swap).
 */
#include "cluster/node.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cluster/figures.h"
#include "cluster/mirror.h"
#include "cluster/proxy.h"
#include "cluster/auth.h"
#include "cluster/stream.h"
#include "net/tls.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "net/listen.h"
#include "qm/qm.h"

typedef struct follower {
    node_config *cfg;
    char path[4096], joining[4200], old[4200];
    int dirfd, joining_fd, inflight_fd;
    int marked;
    /* replica/pos, and the history the state file was last saved with (count, last epoch,
     * its first group; saved 0 until the state is saved by this run): while the history is
     * the same, a save is the position alone, in place (mirror.h) */
    cl_replica_pos *pos;
    cl_mirror_applier *applier; /* the groups' files kept open, synced once per batch */
    int saved;
    size_t saved_n;
    uint64_t saved_epoch, saved_first;
    cl_member *member;
    volatile int copying; /* for the status: a full copy is being taken */
} follower;

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p) < 0 && errno != ENOENT ? -1 : 0;
}

static void rm_rf(const char *p)
{
    nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void fsync_parent(const char *p)
{
    char d[4200];
    snprintf(d, sizeof d, "%s", p);
    char *slash = strrchr(d, '/');
    if (slash == d)
        slash[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(d, sizeof d, ".");
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static int open_local(follower *f)
{
    char p[4300];
    f->dirfd = open(f->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    snprintf(p, sizeof p, "%s/replica", f->path);
    mkdir(p, 0750);
    snprintf(p, sizeof p, "%s/replica/inflight", f->path);
    f->inflight_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    f->marked = 0;
    f->saved = 0;
    f->pos = cl_replica_pos_open(f->path);
    if (!f->pos) /* every save is then the state's: slower, as safe */
        sl_warn("cluster: %s/replica/pos: %s", f->path, strerror(errno));
    if (f->dirfd >= 0)
        f->applier = cl_mirror_applier_new(f->dirfd, 0);
    return f->dirfd >= 0 && f->inflight_fd >= 0 ? 0 : -1;
}

static void close_local(follower *f)
{
    cl_mirror_applier_free(f->applier); /* everything ACKed was synced by f_sync */
    f->applier = NULL;
    if (f->dirfd >= 0)
        close(f->dirfd);
    if (f->inflight_fd >= 0)
        close(f->inflight_fd);
    f->dirfd = f->inflight_fd = -1;
    cl_replica_pos_close(f->pos);
    f->pos = NULL;
}

/* ---- the replication client's callbacks (its thread) ---- */

/* The stream from the leader ended: the member finds out whether its process is gone. */
static void f_lost(void *ctx, const char *addr)
{
    follower *f = ctx;
    cl_member_leader_lost(f->member, addr);
}

static int f_apply(void *ctx, uint64_t idx, uint64_t epoch, const uint8_t *g, size_t len, char *err,
                   size_t errlen)
{
    follower *f = ctx;
    if (!f->marked) {
        char line[64];
        int n = snprintf(line, sizeof line, "%" PRIu64 " %" PRIu64 "\n", epoch, idx);
        /* durable before any of the batch's operations can be: the client ACKs the batch
         * before the position is saved, so until then this mark is what tells a restarted
         * node (even after a power loss) that its directory may hold more than its position
         * says (needs_copy) */
        if (pwrite(f->inflight_fd, line, (size_t)n, 0) != n || fdatasync(f->inflight_fd) < 0) {
            snprintf(err, errlen, "replica/inflight: %s", strerror(errno));
            return -1;
        }
        f->marked = 1;
    }
    /* the group's barriers wait for f_sync, at the end of the batch: between the two the
     * mark is set, so nobody trusts the directory's state after a crash */
    if (!f->applier) {
        snprintf(err, errlen, "%s: not open", f->path);
        return -1;
    }
    return cl_mirror_applier_apply(f->applier, g, len, err, errlen);
}

static int f_sync(void *ctx, char *err, size_t errlen)
{
    follower *f = ctx;
    return f->applier ? cl_mirror_applier_sync(f->applier, err, errlen) : 0;
}

static int f_save(void *ctx, uint64_t last, const cl_repl_epochs *h)
{
    follower *f = ctx;
    uint64_t e = h->n ? h->v[h->n - 1].epoch : 0, first = h->n ? h->v[h->n - 1].first : 0;
    if (f->pos && f->saved && h->n && h->n == f->saved_n && e == f->saved_epoch &&
        first == f->saved_first) {
        /* one fdatasync in place instead of the state's three syncs: this is on every
         * acknowledged batch's path */
        if (cl_replica_pos_save(f->pos, last, h) < 0)
            return -1;
    } else {
        if (cl_replica_state_save(f->path, last, h) < 0)
            return -1;
        f->saved = 1;
        f->saved_n = h->n;
        f->saved_epoch = e;
        f->saved_first = first;
    }
    if (f->marked && ftruncate(f->inflight_fd, 0) == 0)
        f->marked = 0;
    return 0;
}

static int f_copy_begin(void *ctx, uint64_t snap_idx, char *err, size_t errlen)
{
    follower *f = ctx;
    (void)snap_idx;
    if (f->joining_fd >= 0)
        close(f->joining_fd);
    rm_rf(f->joining);
    if (mkdir(f->joining, 0750) < 0 ||
        (f->joining_fd = open(f->joining, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "%s: %s", f->joining, strerror(errno));
        return -1;
    }
    return 0;
}

static int f_copy_write(void *ctx, const char *name, uint64_t off, const void *p, size_t len,
                        char *err, size_t errlen)
{
    follower *f = ctx;
    return cl_mirror_copy_write(f->joining_fd, name, off, p, len, err, errlen);
}

static int f_copy_end(void *ctx, uint64_t snap_idx, const cl_repl_epochs *h, char *err,
                      size_t errlen)
{
    follower *f = ctx;
    if (cl_mirror_copy_finish(f->joining_fd, err, errlen) < 0)
        return -1;
    close(f->joining_fd);
    f->joining_fd = -1;
    if (cl_replica_state_save(f->joining, snap_idx, h) < 0) {
        snprintf(err, errlen, "%s/replica/state: %s", f->joining, strerror(errno));
        return -1;
    }
    /* swap: DATA_DIR -> .old, .joining -> DATA_DIR (start-up finishes a swap cut short) */
    close_local(f);
    rm_rf(f->old);
    if (rename(f->path, f->old) < 0 || rename(f->joining, f->path) < 0) {
        snprintf(err, errlen, "swapping in the copy: %s", strerror(errno));
        return -1;
    }
    fsync_parent(f->path);
    rm_rf(f->old);
    if (open_local(f) < 0) {
        snprintf(err, errlen, "%s: %s", f->path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- the proxy's answer to GET /api/cluster while there is no leader ---- */

/* cl_proxy_opts.taking_over: the member holds the key (promotion is under way). */
static int taking_over(void *data)
{
    follower *f = data;
    cl_status st;
    cl_member_status(f->member, &st);
    return st.role == CL_ROLE_LEADER;
}

static size_t status_json(void *data, char *buf, size_t cap)
{
    follower *f = data;
    cl_status st;
    cl_member_status(f->member, &st);
    json_t *nodes = json_array();
    for (size_t i = 0; i < st.n_nodes; i++) {
        const cl_node_info *ni = &st.nodes[i];
        const char *role = !strcmp(ni->name, st.leader) ? "leader" : "follower";
        if (!strcmp(ni->name, f->cfg->node_name)) /* not serving: at most about to */
            role = f->copying ? "joining" : "follower";
        json_array_append_new(nodes, json_pack("{s:s, s:s, s:b, s:I, s:I, s:s, s:s}", "name",
                                               ni->name, "role", role, "insync", ni->insync,
                                               "lag_bytes", (json_int_t)0, "lag_ms", (json_int_t)0,
                                               "amqp", ni->amqp, "http", ni->http));
    }
    json_t *j = json_pack("{s:s, s:o, s:I, s:o}", "name", f->cfg->cluster.cluster_name, "leader",
                          st.leader[0] ? json_string(st.leader) : json_null(), "epoch",
                          (json_int_t)st.epoch, "nodes", nodes);
    /* removed by an operator: it says so itself (the leader's view lists it the same way) */
    json_object_set_new(j, "removed",
                        st.banned ? json_pack("[s]", f->cfg->node_name) : json_array());
    if (st.last_error[0]) /* as the leader's view says it (api_cluster.c) */
        json_object_set_new(j, "etcd_error", json_string(st.last_error));
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    size_t n = s ? strlen(s) : 0;
    if (n >= cap)
        n = 0;
    if (n)
        memcpy(buf, s, n);
    free(s);
    return n;
}

/* ---- the follower's figures (figures.h), for the leader's /api/nodes ---- */

/* A follower runs no queue model and no alarm: its memory is its buffers' (the same account
 * as a leader's, whose messages add to it), its disk the data directory's free bytes now, and
 * the alarms what a leader's would say on them. */
static void publish_figures(follower *f)
{
    const node_config *cfg = f->cfg;
    struct statvfs sv;
    uint64_t disk_free =
        statvfs(f->path, &sv) == 0 ? (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize : 0;
    uint64_t mem = qm_memory_bytes() + sl_buf_total();
    cl_figures_in in = {.name = cfg->node_name,
                        .mem_used = mem,
                        .mem_limit = cfg->memory_high_watermark,
                        .mem_alarm = mem > cfg->memory_high_watermark,
                        .disk_free = disk_free,
                        .disk_free_limit = cfg->disk_free_limit,
                        .disk_free_alarm = disk_free < cfg->disk_free_limit,
                        .connected = 0};
    json_t *j = cl_figures_json(&in);
    json_object_set_new(j, "measured_at", json_integer((json_int_t)sl_wall_ms()));
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s)
        cl_member_set_figures(f->member, s);
    free(s);
}

/* ---- the phase ---- */

static int bind_door(int adopt, const char *addr, int port, const char *door, int *out_port,
                     char *err, size_t errlen)
{
    char bound[256];
    int fd = adopt >= 0
                 ? sl_listen_adopt(adopt, bound, sizeof bound, out_port, err, errlen)
                 : sl_listen_tcp(addr, port, 1024, bound, sizeof bound, out_port, err, errlen);
    if (fd >= 0)
        sl_info("listening %s=%s:%d", door, bound, *out_port);
    return fd;
}

/* An interrupted swap of a full copy, or a partial copy, from a previous run. */
static void finish_swap(follower *f)
{
    char st[4300];
    snprintf(st, sizeof st, "%s/replica/state", f->joining);
    if (!exists(f->path) && exists(st)) {
        if (rename(f->joining, f->path) == 0)
            fsync_parent(f->path);
    }
    rm_rf(f->joining);
    rm_rf(f->old);
}

static int needs_copy(follower *f, uint64_t last)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/replica/led", f->path);
    if (exists(p)) {
        sl_warn("cluster: this node led before: it takes a full copy before it follows");
        return 1;
    }
    struct stat st;
    snprintf(p, sizeof p, "%s/replica/inflight", f->path);
    if (stat(p, &st) == 0 && st.st_size > 0) {
        sl_warn("cluster: this node stopped while applying groups: it takes a full copy");
        return 1;
    }
    char m[4300], g[4300];
    snprintf(m, sizeof m, "%s/meta", f->path);
    snprintf(g, sizeof g, "%s/msgs", f->path);
    if (last == 0 && (exists(m) || exists(g))) {
        sl_warn("cluster: the data directory has a store but no replica state: it is replaced "
                "by a full copy of the leader's");
        return 1;
    }
    return 0;
}

int cl_node_follow(node_config *cfg, cl_node **out)
{
    *out = NULL;
    follower f = {.cfg = cfg, .dirfd = -1, .joining_fd = -1, .inflight_fd = -1};
    snprintf(f.path, sizeof f.path, "%s", cfg->data_dir);
    size_t pl = strlen(f.path);
    while (pl > 1 && f.path[pl - 1] == '/')
        f.path[--pl] = 0;
    snprintf(f.joining, sizeof f.joining, "%s.joining", f.path);
    snprintf(f.old, sizeof f.old, "%s.old", f.path);
    finish_swap(&f);
    mkdir(f.path, 0750);
    uint64_t last = 0;
    cl_repl_epochs hist;
    cl_repl_epochs_init(&hist);
    int damaged = cl_replica_state_load(f.path, &last, &hist) < 0;
    if (damaged) {
        sl_warn("cluster: the replica state cannot be read (%s): a full copy replaces it",
                strerror(errno));
        last = 0;
        cl_repl_epochs_free(&hist);
        cl_repl_epochs_init(&hist);
    }
    int need_copy = damaged || needs_copy(&f, last);
    if (open_local(&f) < 0) {
        sl_error("cluster: %s: %s", f.path, strerror(errno));
        cl_repl_epochs_free(&hist);
        return -1;
    }
    sl_info("cluster: follower phase: this node's log ends at group %" PRIu64 " (epoch %" PRIu64
            ")",
            last, cl_repl_epochs_last(&hist));
    if (cfg->cluster.secret)
        sl_info("cluster: replication peers authenticate with the secret in %s",
                cfg->cluster.secret_file);
    else
        sl_warn("cluster: cluster.insecure_no_secret = true: anyone who can reach the replication "
                "port can follow this cluster (take a full copy of its data) or acknowledge for a "
                "member (docs/cluster.md)");

    /* before any thread starts: every thread inherits the mask, so the signals reach the
     * signalfd only (as in the broker) */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = -1;
    char err[512];
    int fds[CL_PROXY_DOORS] = {-1, -1, -1};
    int https_fd = cfg->adopt_https_fd;
    int amqp_port = 0, amqps_port = 0, http_port = 0;
    cl_proxy *proxy = NULL;
    cl_stream_client *client = NULL;
    int sfd = -1;
    fds[CL_PROXY_AMQP] =
        bind_door(cfg->adopt_amqp_fd, cfg->bind, cfg->port, "amqp", &amqp_port, err, sizeof err);
    if (fds[CL_PROXY_AMQP] < 0)
        goto fail;
    if (cfg->tls_port >= 0 || cfg->adopt_amqps_fd >= 0) {
        fds[CL_PROXY_AMQPS] =
            bind_door(cfg->adopt_amqps_fd, cfg->tls_bind ? cfg->tls_bind : cfg->bind, cfg->tls_port,
                      "amqps", &amqps_port, err, sizeof err);
        if (fds[CL_PROXY_AMQPS] < 0)
            goto fail;
    }
    if (cfg->mgmt_port >= 0 || cfg->adopt_http_fd >= 0) {
        fds[CL_PROXY_HTTP] = bind_door(cfg->adopt_http_fd, cfg->bind, cfg->mgmt_port, "http",
                                       &http_port, err, sizeof err);
        if (fds[CL_PROXY_HTTP] < 0)
            goto fail;
    }
    const char *adv = cfg->cluster.advertise_address ? cfg->cluster.advertise_address : cfg->bind;
    cl_member_opts mo = {.conf = &cfg->cluster,
                         .node_name = cfg->node_name,
                         .bind = cfg->bind,
                         .advertise = adv,
                         .amqp_port = amqp_port,
                         .http_port = http_port,
                         .last_epoch = cl_repl_epochs_last(&hist),
                         .last_idx = last};
    f.member = cl_member_start(&mo, err, sizeof err);
    if (!f.member)
        goto fail;
    cl_stream_log lg = {.ctx = &f,
                        .apply = f_apply,
                        .sync = f_sync,
                        .save = f_save,
                        .copy_begin = f_copy_begin,
                        .copy_write = f_copy_write,
                        .copy_end = f_copy_end,
                        .lost = f_lost};
    sl_tls_ctx *tls = cl_auth_tls_ctx(&cfg->cluster, 0, err, sizeof err);
    if (!tls && err[0])
        goto fail;
    client = cl_stream_client_start(cfg->node_name, cfg->cluster.cluster_name, cfg->cluster.secret,
                                    cfg->cluster.secret_len, tls, last, &hist, need_copy, &lg, err,
                                    sizeof err);
    if (!client)
        goto fail;
    cl_proxy_opts po = {.source_addr = adv,
                        .max_connections = cfg->cluster.proxy_max_connections,
                        .status = status_json,
                        .status_data = &f,
                        .taking_over = taking_over};
    memcpy(po.listen_fd, fds, sizeof fds);
    proxy = cl_proxy_start(&po, err, sizeof err);
    if (!proxy)
        goto fail;
    sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        snprintf(err, sizeof err, "signalfd: %s", strerror(errno));
        goto fail;
    }
    char cur_leader[256] = "";
    uint64_t cur_epoch = 0;
    uint64_t next_figures = 0;
    for (;;) {
        struct pollfd pf[2] = {{sfd, POLLIN, 0}, {cl_member_fd(f.member), POLLIN, 0}};
        int pr = poll(pf, 2, 100);
        if (pr > 0 && (pf[0].revents & POLLIN)) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                sl_info("%s: stopping (follower)", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
                rc = 0;
                break;
            }
        }
        if (pr > 0 && (pf[1].revents & POLLIN))
            cl_member_take_event(f.member);
        if (sl_now_ms() >= next_figures) {
            publish_figures(&f);
            next_figures = sl_now_ms() + CL_FIGURES_PERIOD_MS;
        }
        uint64_t pe, pi;
        cl_stream_client_position(client, &pe, &pi);
        cl_member_set_log(f.member, pe, pi);
        cl_status st;
        cl_member_status(f.member, &st);
        if (st.role == CL_ROLE_LEADER && cl_member_serving(f.member)) {
            /* Test seam: SLUICE_CLUSTER_PROMOTE_DELAY_MS=N (at most 5 s) holds the promotion
             * here, the key won and the proxy still running, so that a test can connect in
             * this window every time (test_cluster_repl.py). */
            const char *delay = getenv("SLUICE_CLUSTER_PROMOTE_DELAY_MS");
            long ms = delay ? strtol(delay, NULL, 10) : 0;
            if (ms > 0 && ms <= 5000)
                nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
            rc = 1;
            break;
        }
        f.copying = cl_stream_client_state(client) == CL_STREAM_COPYING;
        if (!strcmp(st.leader, cfg->node_name))
            st.leader[0] = 0; /* itself, not serving yet: nobody to follow or forward to */
        if (strcmp(st.leader, cur_leader) || st.epoch != cur_epoch) {
            const cl_node_info *ln = NULL;
            for (size_t i = 0; i < st.n_nodes; i++)
                if (st.leader[0] && !strcmp(st.nodes[i].name, st.leader))
                    ln = &st.nodes[i];
            if (st.leader[0] && !ln)
                continue; /* its addresses come with the next look at etcd */
            snprintf(cur_leader, sizeof cur_leader, "%s", st.leader);
            cur_epoch = st.epoch;
            cl_stream_client_set_leader(client, ln ? ln->replication : "", st.epoch);
            cl_proxy_set_leader(proxy, ln ? ln->name : NULL, ln ? ln->amqp : NULL, NULL,
                                ln && ln->http[0] ? ln->http : NULL);
            if (ln)
                sl_info("cluster: following %s (epoch %" PRIu64 ") at %s", ln->name, st.epoch,
                        ln->replication);
        }
    }
    int unsure =
        rc == 1 && cl_stream_client_state(client) >= CL_STREAM_NEED_COPY; /* see dirty below */
    cl_stream_client_stop(client);
    client = NULL;
    cl_proxy_stop(proxy);
    proxy = NULL;
    close(sfd);
    sfd = -1;
    if (rc == 0)
        goto done;
    /* Promoted: what the client saved is the log this leader continues. */
    cl_repl_epochs_free(&hist);
    cl_repl_epochs_init(&hist);
    if (cl_replica_state_load(f.path, &last, &hist) < 0) {
        snprintf(err, sizeof err, "replica state: %s", strerror(errno));
        rc = -1;
        goto fail;
    }
    close_local(&f);
    /* Does the directory hold more than the groups its replica state counts (it led, or it
     * stopped in the middle of applying, or it waited for a full copy)? Then this leader's
     * first group is not a safe place for a follower to continue from: node.h. */
    char lp[4300], ip[4300];
    struct stat ist;
    snprintf(lp, sizeof lp, "%s/replica/led", f.path);
    snprintf(ip, sizeof ip, "%s/replica/inflight", f.path);
    int dirty = unsure || exists(lp) || (stat(ip, &ist) == 0 && ist.st_size > 0);
    {
        char p[4300];
        snprintf(p, sizeof p, "%s/replica/led", f.path);
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
        if (fd < 0 || fsync(fd) < 0) {
            snprintf(err, sizeof err, "%.400s: %s", p, strerror(errno));
            if (fd >= 0)
                close(fd);
            rc = -1;
            goto fail;
        }
        close(fd);
        snprintf(p, sizeof p, "%s/replica", f.path);
        fsync_parent(p); /* the directory replica/ holds led */
        int dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    cl_status st;
    cl_member_status(f.member, &st);
    cl_node *n = sl_xcalloc(1, sizeof *n);
    n->member = f.member;
    n->epoch = st.epoch;
    n->last_idx = last;
    n->hist = hist;
    n->dirty = dirty;
    cfg->adopt_amqp_fd = fds[CL_PROXY_AMQP];
    cfg->adopt_amqps_fd = fds[CL_PROXY_AMQPS];
    cfg->adopt_http_fd = fds[CL_PROXY_HTTP];
    cfg->adopt_https_fd = https_fd;
    sl_info("cluster: promoted: leader of epoch %" PRIu64 ", the log ends at group %" PRIu64
            "%s; starting the broker",
            n->epoch, last,
            dirty ? " (the directory may hold more: every follower takes a full copy)" : "");
    *out = n;
    return 1;
fail:
    if (rc < 0)
        sl_error("cluster: %s", err);
done:
    cl_stream_client_stop(client);
    cl_proxy_stop(proxy);
    if (sfd >= 0)
        close(sfd);
    cl_member_stop(f.member);
    for (int i = 0; i < CL_PROXY_DOORS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    close_local(&f);
    if (f.joining_fd >= 0)
        close(f.joining_fd);
    cl_repl_epochs_free(&hist);
    return rc;
}

void cl_node_free(cl_node *n)
{
    if (!n)
        return;
    cl_repl_epochs_free(&n->hist);
    sl_free(n);
}

void cl_node_reexec(char **argv, int amqp_fd, int amqps_fd, int http_fd, int https_fd)
{
    int fds[4] = {amqp_fd, amqps_fd, http_fd, https_fd};
    const char *doors[4] = {"amqp", "amqps", "http", "https"};
    size_t argc = 0;
    while (argv[argc])
        argc++;
    char **nv = sl_xcalloc(argc + 9, sizeof *nv);
    char opt[4][64];
    size_t k = 0;
    for (size_t i = 0; i < argc; i++) {
        /* a --listen-fd of an earlier re-exec names fds that are passed again below */
        if (!strcmp(argv[i], "--listen-fd") && i + 1 < argc) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--listen-fd=", 12))
            continue;
        nv[k++] = argv[i];
    }
    for (int i = 0; i < 4; i++) {
        if (fds[i] < 0)
            continue;
        int fl = fcntl(fds[i], F_GETFD);
        fcntl(fds[i], F_SETFD, fl & ~FD_CLOEXEC);
        snprintf(opt[i], sizeof opt[i], "%s=%d", doors[i], fds[i]);
        nv[k++] = "--listen-fd";
        nv[k++] = opt[i];
    }
    nv[k] = NULL;
    sl_warn("cluster: no longer the leader: restarting as a follower (same pid)");
    execv("/proc/self/exe", nv);
    sl_error("cluster: re-exec failed: %s", strerror(errno));
    sl_free(nv);
}
