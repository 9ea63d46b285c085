/* stream.c - the replication stream's server (leader) and client (follower) threads (see
 * stream.h).
 *
 * Invariants:
 * - Only the server's thread touches its rl, and only the client's thread its rf and history:
 *   other threads hand inputs over under mu and wake the thread (an eventfd); outputs
 *   (released, blocked, peers, position) are copied out under mu.
 * - A follower ACKs an index only after the owner's apply made it durable: an ACK is a
 *   promise about the disk (repl.h "Commit"). The position naming it is saved once the
 *   stream has been quiet for SAVE_IDLE_MS (and when the thread stops): off the confirm's
 *   path, and once per burst rather than once per batch. Until then the owner's in-flight
 *   marker, made durable before the first operation applied since the last save, says the
 *   directory may hold more than the saved position.
 * - Every socket is non-blocking; a peer that sends a malformed frame is dropped.
 * - The server never queues more than OUT_MAX bytes for one follower: rl's window and
 *   go-back-N resend what a slow one has not taken.
 * - With a secret, a server connection has node > 0 only after its PROOF checked out (auth.h),
 *   and a client applies nothing before the leader's CHALLENGE did: an ACK, a COPYREQ or a
 *   HELLO from a peer that has not proved itself is refused, never counted; a REFUSE from a
 *   leader that has not proved itself only ends the connection (it cannot make the client
 *   ask for a full copy), and it holds at most PREAUTH_MAX bytes of one.
 * - With TLS (cluster.ssl_options), every byte of a connection goes through its sl_tls
 *   stream once the handshake is done; nothing is read or written in the clear before.
 * - A connection that has not said HELLO holds at most PREAUTH_MAX bytes unread (a stranger
 *   cannot make the leader buffer a 1 GiB frame) and for at most PREAUTH_MS; when every slot
 *   is taken, the oldest such connection makes room for a new one: strangers that connect
 *   and say nothing cannot keep a member out.
 */
#include "cluster/stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/auth.h"
#include "cluster/wire.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/mem.h"
#include "net/loop.h"
#include "net/tls.h"

#define OUT_MAX (8u << 20) /* bytes queued to one follower before the server waits */
#define MAX_CONNS 32       /* connections the server holds (followers and strangers) */
#define HEARD_MAX_MS 2000  /* a follower that hears nothing of its session this long: HELLO */
#define RETRY_MS 300       /* a follower's pause before it dials again */
#define REFUSE_NOT_KEPT 2  /* REFUSE code: the next group is no longer kept (full copy) */
#define REFUSE_NOT_OURS 3  /* REFUSE code: another cluster */
#define REFUSE_NO_COPY 4   /* REFUSE code: no full copy can be made here */
#define REFUSE_AUTH 5      /* REFUSE code: not authenticated (no secret, a wrong proof) */
#define REFUSE_MEMBER 6    /* REFUSE code: not a member registered in etcd (yet) */
#define PREAUTH_MAX 4096   /* bytes a connection may send before its HELLO is accepted */
#define PREAUTH_MS 5000    /* time a connection has to get its HELLO accepted */
#define COPY_CHUNK (256u << 10)
/* A follower saves its position (and so clears its in-flight marker) once no group was
 * applied for this long. Under a steady stream neither the position's fdatasync nor the
 * marker's is paid per batch (both were, on every confirm's path: docs/cluster.md); a node
 * killed or powered off meanwhile finds the marker set and takes a full copy, as it did
 * when killed between a batch's marker and its save. */
#define SAVE_IDLE_MS 20

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void poke(int fd)
{
    uint64_t one = 1;
    ssize_t n = write(fd, &one, sizeof one);
    (void)n;
}

static void drain(int fd)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof v);
    (void)n;
}

/* ---- a connection's buffers ---- */

typedef struct sconn {
    int fd;
    int node;        /* -1 until its HELLO */
    int close_after; /* close once out is flushed */
    /* the handshake (auth.h): 0 nothing yet, 1 AUTH (server) / sent (client), 2 proved */
    int auth;
    uint8_t nf[CL_AUTH_NONCE], nl[CL_AUTH_NONCE];
    char claimed[256];  /* the name its AUTH claimed (server) */
    char peer[64];      /* its address, for audit lines (server) */
    sl_tls *tls;        /* NULL: plain TCP */
    int tls_ready;      /* its handshake is done */
    uint64_t opened_ms; /* accepted then (server) */
    sl_buf in, out;
    /* a full copy being sent (server) */
    void *snap;
    size_t file, files;
    uint64_t off, size, snap_idx;
} sconn;

static void sconn_close(sconn *c)
{
    if (c->tls) {
        if (c->tls_ready)
            sl_tls_shutdown(c->tls);
        sl_tls_free(c->tls);
    }
    c->tls = NULL;
    c->tls_ready = 0;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->node = -1;
    c->close_after = 0;
    sl_buf_free(&c->in);
    sl_buf_free(&c->out);
}

/* TLS: drive the handshake. 1 done (or no TLS), 0 not yet, -1 failed (logged). */
static int sconn_tls_step(sconn *c)
{
    if (!c->tls || c->tls_ready)
        return 1;
    int r = sl_tls_handshake(c->tls);
    if (r == 1) {
        c->tls_ready = 1;
        return 1;
    }
    if (r < 0)
        sl_warn("audit: replication connection %s: TLS handshake failed: %s",
                c->peer[0] ? c->peer : "to the leader", sl_tls_error(c->tls));
    return r;
}

/* The poll events c needs. */
static short sconn_events(const sconn *c)
{
    if (c->tls && !c->tls_ready)
        return (short)(POLLIN | (sl_tls_wants(c->tls) & SL_EV_WRITE ? POLLOUT : 0));
    return (short)(POLLIN | (sl_buf_unread(&c->out) ? POLLOUT : 0));
}

/* Bytes already read from the socket that a read would return now (TLS reads ahead). */
static int sconn_pending(const sconn *c)
{
    return c->tls && c->tls_ready && sl_tls_pending(c->tls) > 0;
}

/* Read what is there: 0, or -1 on EOF / error. */
static int sconn_read(sconn *c)
{
    if (c->tls) {
        int h = sconn_tls_step(c);
        if (h <= 0)
            return h;
        for (int i = 0; i < 64; i++) {
            sl_buf_compact(&c->in);
            uint8_t *p = sl_buf_reserve(&c->in, 65536);
            ssize_t n = sl_tls_read(c->tls, p, 65536);
            if (n > 0) {
                c->in.len += (size_t)n;
                continue;
            }
            if (n == 0)
                return -1;
            return errno == EAGAIN ? 0 : -1;
        }
        return 0;
    }
    for (int i = 0; i < 16; i++) {
        sl_buf_compact(&c->in);
        uint8_t *p = sl_buf_reserve(&c->in, 65536);
        ssize_t n = recv(c->fd, p, 65536, 0);
        if (n > 0) {
            c->in.len += (size_t)n;
            continue;
        }
        if (n == 0)
            return -1;
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    }
    return 0;
}

/* Send what is queued: 0, or -1 on error. */
static int sconn_write(sconn *c)
{
    if (c->tls) {
        int h = sconn_tls_step(c);
        if (h <= 0)
            return h;
        while (sl_buf_unread(&c->out)) {
            ssize_t n = sl_tls_write(c->tls, sl_buf_head(&c->out), sl_buf_unread(&c->out));
            if (n > 0) {
                sl_buf_consume(&c->out, (size_t)n);
                continue;
            }
            return n < 0 && errno == EAGAIN ? 0 : -1;
        }
        return 0;
    }
    while (sl_buf_unread(&c->out)) {
        ssize_t n = send(c->fd, sl_buf_head(&c->out), sl_buf_unread(&c->out), MSG_NOSIGNAL);
        if (n > 0) {
            sl_buf_consume(&c->out, (size_t)n);
            continue;
        }
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
    }
    return 0;
}

/* ---- leader ---- */

struct cl_stream_server {
    char *self, *cluster;
    int listen_fd, wake_fd, ev_fd;
    pthread_t thread;
    int started;
    cl_stream_log log;
    uint32_t ping_ms;
    int (*banned)(void *ctx, const char *name);
    void *banned_ctx;
    int (*member)(void *ctx, const char *name);
    void *member_ctx;
    uint8_t *secret; /* NULL: none (cluster.insecure_no_secret) */
    size_t secret_len;
    sl_tls_ctx *tls; /* NULL: plain TCP */

    pthread_mutex_t mu;
    /* inputs, under mu */
    struct pend {
        uint64_t idx, bytes;
    } * pend;
    size_t n_pend, cap_pend;
    uint64_t last_in; /* the newest group appended (a second append of it: durable only) */
    uint64_t durable_in, lease_in;
    int isr_outcome; /* -1: none */
    int depose_in, stop;
    char forget_in[CL_REPL_MAX_NODES][256]; /* names to forget (cl_stream_server_forget) */
    size_t n_forget_in;
    uint64_t forget_asked, forget_done; /* tickets: asked (inputs), done (outputs) */
    /* outputs, under mu */
    uint64_t released_out, commit_out;
    int blocked_out;
    cl_stream_peer peers_out[CL_REPL_MAX_NODES];
    size_t n_peers_out;

    /* the thread's own */
    cl_rl *rl;
    const cl_repl_epochs *hist;
    uint8_t *chunk; /* COPY_CHUNK bytes: a full copy's reads */
    char names[CL_REPL_MAX_NODES][256];
    int n_names;
    sconn conns[MAX_CONNS];
    int isr_pending;
};

static int node_id(cl_stream_server *s, const char *name, size_t len)
{
    for (int i = 0; i < s->n_names; i++)
        if (strlen(s->names[i]) == len && !memcmp(s->names[i], name, len))
            return i;
    if (s->n_names == CL_REPL_MAX_NODES || len >= sizeof s->names[0])
        return -1;
    memcpy(s->names[s->n_names], name, len);
    s->names[s->n_names][len] = 0;
    return s->n_names++;
}

static void copy_done(cl_stream_server *s, sconn *c)
{
    if (c->snap)
        s->log.snap_free(c->snap);
    c->snap = NULL;
}

static void server_drop(cl_stream_server *s, sconn *c)
{
    copy_done(s, c);
    if (c->node > 0) {
        int other = 0; /* a newer connection of the same node keeps its session */
        for (int i = 0; i < MAX_CONNS; i++)
            if (&s->conns[i] != c && s->conns[i].fd >= 0 && s->conns[i].node == c->node)
                other = 1;
        if (!other)
            cl_rl_disconnect(s->rl, c->node);
    }
    sconn_close(c);
}

/* Refuse a peer (REFUSE, then close) with an audit line: its address, the name it claimed
 * and why. */
static void server_refuse(sconn *c, const char *who, uint16_t code, const char *reply,
                          const char *why)
{
    sl_warn("audit: replication peer %s refused (claimed node '%s'): %s", c->peer,
            who && *who ? who : "-", why);
    cl_wire_put_refuse(&c->out, code, reply);
    c->close_after = 1;
}

static const char *frame_name(uint8_t type)
{
    static const char *const names[] = {"?",       "HELLO",  "START",     "DATA",      "PING",
                                        "ACK",     "REFUSE", "COPYREQ",   "COPYBEGIN", "COPYDATA",
                                        "COPYEND", "AUTH",   "CHALLENGE", "PROOF"};
    return type < sizeof names / sizeof names[0] ? names[type] : "?";
}

/* The checks of a claimed name that AUTH (or, without a secret, HELLO) makes: 0 when it may
 * go on, else -1 and refused. */
static int server_check_name(cl_stream_server *s, sconn *c, const char *who)
{
    if (!strcmp(who, s->self)) {
        server_refuse(c, who, 1, "that is this node's own name", "it claims the leader's name");
        return -1;
    }
    if (s->banned && s->banned(s->banned_ctx, who)) {
        server_refuse(c, who, 1,
                      "removed from the cluster by an operator (sluicectl cluster readmit)",
                      "removed from the cluster by an operator");
        return -1;
    }
    if (s->member && !s->member(s->member_ctx, who)) {
        server_refuse(c, who, REFUSE_MEMBER, "not a member registered in etcd",
                      "not a member registered in etcd");
        return -1;
    }
    return 0;
}

/* AUTH: answer with this leader's proof and a nonce of its own (auth.h). */
static void server_auth(cl_stream_server *s, sconn *c, const cl_wire_msg *m, const char *who)
{
    if (!s->secret) {
        server_refuse(c, who, REFUSE_AUTH,
                      "this leader has no cluster secret (cluster.insecure_no_secret)",
                      "it authenticates, this node has no cluster.secret_file");
        return;
    }
    if (c->auth) {
        server_refuse(c, who, REFUSE_AUTH, "AUTH twice", "AUTH twice");
        return;
    }
    if (server_check_name(s, c, who) < 0)
        return;
    uint8_t mac[CL_AUTH_MAC];
    memcpy(c->nf, m->nonce, CL_AUTH_NONCE);
    if (cl_auth_nonce(c->nl) < 0) {
        sl_error("cluster: no random bytes for a replication handshake");
        cl_wire_put_refuse(&c->out, REFUSE_AUTH, "no random bytes here");
        c->close_after = 1;
        return;
    }
    snprintf(c->claimed, sizeof c->claimed, "%s", who);
    cl_auth_mac(s->secret, s->secret_len, 'L', s->cluster, who, s->self, c->nf, c->nl, mac);
    cl_wire_put_challenge(&c->out, s->self, c->nl, mac);
    c->auth = 1;
}

static void server_frame(cl_stream_server *s, sconn *c, const cl_wire_msg *m, uint64_t now)
{
    if (c->close_after)
        return; /* refused: nothing more it says counts */
    char who[256] = "";
    if (m->node)
        snprintf(who, sizeof who, "%.*s", (int)(m->node_len < 255 ? m->node_len : 255),
                 (const char *)m->node);
    switch (m->type) {
    case CL_WIRE_AUTH:
        if (m->cluster_len != strlen(s->cluster) ||
            memcmp(m->cluster, s->cluster, m->cluster_len)) {
            server_refuse(c, who, REFUSE_NOT_OURS, "another cluster", "another cluster's name");
            return;
        }
        server_auth(s, c, m, who);
        return;
    case CL_WIRE_PROOF:
        if (c->auth != 1) {
            server_refuse(c, who, REFUSE_AUTH, "PROOF without AUTH", "PROOF without AUTH");
            return;
        }
        if (!cl_auth_check(s->secret, s->secret_len, 'F', s->cluster, c->claimed, s->self, c->nf,
                           c->nl, m->mac)) {
            server_refuse(c, c->claimed, REFUSE_AUTH, "authentication failed",
                          "it did not prove the cluster secret");
            return;
        }
        c->auth = 2;
        return;
    case CL_WIRE_HELLO: {
        if (s->secret && c->auth != 2) {
            server_refuse(c, who, REFUSE_AUTH,
                          "this cluster authenticates its members (cluster.secret_file)",
                          "HELLO before it proved the cluster secret");
            return;
        }
        if (s->secret && strcmp(who, c->claimed)) {
            server_refuse(c, who, REFUSE_AUTH, "HELLO under another name than AUTH's",
                          "HELLO under another name than the one it proved");
            return;
        }
        if (m->cluster_len != strlen(s->cluster) ||
            memcmp(m->cluster, s->cluster, m->cluster_len)) {
            cl_wire_put_refuse(&c->out, REFUSE_NOT_OURS, "another cluster");
            c->close_after = 1;
            return;
        }
        if (!s->secret && server_check_name(s, c, who) < 0)
            return;
        if (s->secret && s->banned && s->banned(s->banned_ctx, who)) {
            server_refuse(c, who, 1,
                          "removed from the cluster by an operator (sluicectl cluster readmit)",
                          "removed from the cluster by an operator");
            return;
        }
        int id = node_id(s, (const char *)m->node, m->node_len);
        if (id <= 0) { /* ourselves, or no room for another node */
            server_refuse(c, who, 1, id == 0 ? "that is this node's own name" : "too many nodes",
                          id == 0 ? "it claims the leader's name" : "too many nodes");
            return;
        }
        for (int i = 0; i < MAX_CONNS; i++) /* its older connection is dead or soon will be */
            if (&s->conns[i] != c && s->conns[i].fd >= 0 && s->conns[i].node == id) {
                copy_done(s, &s->conns[i]);
                sconn_close(&s->conns[i]);
            }
        c->node = id;
        cl_rl_start st;
        cl_rl_hello(s->rl, id, m->a, m->b, now, &st);
        cl_wire_put_start(&c->out, st.epoch, st.session, st.div_epoch, st.div_end, st.hello_epoch,
                          st.hello_idx);
        sl_info("cluster: follower %s connected from %s%s%s (its log: epoch %" PRIu64
                ", group %" PRIu64 ")",
                s->names[id], c->peer, c->tls ? ", TLS" : "", s->secret ? ", authenticated" : "",
                m->a, m->b);
        return;
    }
    default:
        break;
    }
    if (c->node <= 0) { /* ACK, COPYREQ or anything else before an accepted HELLO */
        char why[96];
        snprintf(why, sizeof why, "%s before %s", frame_name(m->type),
                 s->secret && c->auth != 2 ? "it proved the cluster secret" : "its HELLO");
        server_refuse(c, c->claimed, REFUSE_AUTH, "not a follower of this leader yet", why);
        return;
    }
    switch (m->type) {
    case CL_WIRE_ACK:
        if (c->node > 0)
            cl_rl_ack(s->rl, c->node, m->epoch, m->session, m->a, m->b, now);
        return;
    case CL_WIRE_COPYREQ: {
        if (c->snap)
            return;
        uint64_t snap_idx = 0;
        void *snap = s->log.snap_open ? s->log.snap_open(s->log.ctx, &snap_idx) : NULL;
        if (!snap) {
            cl_wire_put_refuse(&c->out, REFUSE_NO_COPY, "no full copy can be made now");
            c->close_after = 1;
            return;
        }
        c->snap = snap;
        c->file = 0;
        c->off = 0;
        c->files = s->log.snap_count(snap);
        c->snap_idx = snap_idx;
        s->log.snap_name(snap, 0, &c->size);
        /* the history of the log up to the copy's last group */
        const cl_repl_epochs *h = s->hist;
        uint64_t *e = sl_xmalloc((h->n + 1) * sizeof *e), *f = sl_xmalloc((h->n + 1) * sizeof *f);
        uint32_t n = 0;
        for (size_t i = 0; i < h->n; i++)
            if (h->v[i].first <= snap_idx) {
                e[n] = h->v[i].epoch;
                f[n++] = h->v[i].first;
            }
        cl_wire_put_copybegin(&c->out, snap_idx, e, f, n);
        sl_free(e);
        sl_free(f);
        sl_info("cluster: a full copy for %s: %zu file(s), up to group %" PRIu64, s->names[c->node],
                c->files, snap_idx);
        return;
    }
    default:
        return; /* nothing else is a follower's to say */
    }
}

/* Queue the next bytes of a full copy (read here, on the replication thread: the leader's
 * clients never wait for it). */
static void server_copy(cl_stream_server *s, sconn *c)
{
    uint8_t *chunk = s->chunk;
    while (c->snap && !c->close_after && sl_buf_unread(&c->out) < OUT_MAX) {
        if (c->file >= c->files) {
            cl_wire_put_copyend(&c->out, c->snap_idx, (uint32_t)c->files);
            sl_info("cluster: full copy for %s sent", s->names[c->node]);
            copy_done(s, c);
            return;
        }
        uint64_t size;
        const char *name = s->log.snap_name(c->snap, c->file, &size);
        size_t want = size - c->off < COPY_CHUNK ? (size_t)(size - c->off) : COPY_CHUNK;
        long n = want ? s->log.snap_read(c->snap, c->file, c->off, chunk, want) : 0;
        if (n < 0) {
            sl_error("cluster: full copy: reading %s: %s", name, strerror(errno));
            cl_wire_put_refuse(&c->out, REFUSE_NO_COPY, "the leader could not read its files");
            c->close_after = 1;
            copy_done(s, c);
            return;
        }
        /* every file is sent, even an empty one (its name is what makes it) */
        if (n > 0 || c->off == 0)
            cl_wire_put_copydata(&c->out, name, c->off, chunk, (uint32_t)n);
        c->off += (uint64_t)n;
        if (n == 0 || c->off >= size) {
            c->file++;
            c->off = 0;
        }
    }
}

/* Queue the groups due to c's follower. */
static void server_send(cl_stream_server *s, sconn *c, uint64_t now)
{
    if (c->snap) {
        server_copy(s, c);
        return;
    }
    uint64_t idx, session;
    while (!c->close_after && sl_buf_unread(&c->out) < OUT_MAX &&
           cl_rl_next_send(s->rl, c->node, now, &idx, &session)) {
        uint8_t *g = NULL;
        size_t len = 0;
        uint64_t gepoch = 0;
        if (s->log.group(s->log.ctx, idx, &g, &len, &gepoch) < 0) {
            char why[128];
            snprintf(why, sizeof why, "group %" PRIu64 " is no longer kept: a full copy is needed",
                     idx);
            cl_wire_put_refuse(&c->out, REFUSE_NOT_KEPT, why);
            c->close_after = 1;
            sl_warn("cluster: follower %s needs group %" PRIu64 ", no longer kept",
                    s->names[c->node], idx);
            return;
        }
        cl_wire_put_data(&c->out, cl_rl_epoch(s->rl), session, idx, gepoch, g, (uint32_t)len, NULL,
                         0);
        sl_free(g);
    }
}

static void server_publish(cl_stream_server *s, uint64_t now)
{
    uint64_t rel = cl_rl_release(s->rl, now), commit = cl_rl_commit(s->rl);
    int blocked = cl_rl_blocked(s->rl);
    uint32_t isr = cl_rl_isr(s->rl);
    int forgetting = cl_rl_forgetting(s->rl) != 0;
    pthread_mutex_lock(&s->mu);
    int changed = rel != s->released_out || blocked != s->blocked_out;
    /* every forget asked before this round was applied by server_inputs: done once etcd's
     * ISR holds none of them */
    if (!forgetting && !s->n_forget_in && s->forget_done != s->forget_asked) {
        s->forget_done = s->forget_asked;
        changed = 1;
    }
    s->released_out = rel;
    s->blocked_out = blocked;
    s->commit_out = commit;
    s->n_peers_out = 0;
    for (int i = 1; i < s->n_names; i++) {
        cl_rl_peer_info pi;
        cl_rl_peer(s->rl, i, now, &pi);
        cl_stream_peer *p = &s->peers_out[s->n_peers_out++];
        memcpy(p->name, s->names[i], sizeof p->name); /* both 256, NUL-terminated */
        p->insync = (isr >> i) & 1;
        p->connected = pi.connected;
        p->copying = 0;
        for (int k = 0; k < MAX_CONNS; k++)
            if (s->conns[k].fd >= 0 && s->conns[k].node == i && s->conns[k].snap)
                p->copying = 1;
        p->acked = pi.acked;
        p->lag_bytes = pi.lag_bytes;
        p->lag_ms = pi.lag_ms;
    }
    pthread_mutex_unlock(&s->mu);
    if (changed)
        poke(s->ev_fd);
}

static void server_inputs(cl_stream_server *s, uint64_t now)
{
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_pend; i++) {
        /* A group announced from the sync thread before this server existed (its notify
         * found none) is known only by the next one: the log is the truth, so the index goes
         * on through it (its bytes uncounted in lag_bytes), and group() fetches it. */
        for (int k = 0; k < 1024 && cl_rl_last(s->rl) + 1 < s->pend[i].idx; k++)
            cl_rl_append(s->rl, cl_rl_last(s->rl) + 1, 0, now);
        cl_rl_append(s->rl, s->pend[i].idx, s->pend[i].bytes, now);
    }
    s->n_pend = 0;
    if (s->durable_in)
        cl_rl_durable(s->rl, s->durable_in);
    if (s->lease_in)
        cl_rl_lease(s->rl, s->lease_in);
    int outcome = s->isr_outcome;
    s->isr_outcome = -1;
    int depose = s->depose_in;
    char forget[CL_REPL_MAX_NODES][256];
    size_t n_forget = s->n_forget_in;
    memcpy(forget, s->forget_in, n_forget * sizeof forget[0]);
    s->n_forget_in = 0;
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n_forget; i++) {
        int id = node_id(s, forget[i], strlen(forget[i]));
        if (id <= 0 || cl_rl_forget(s->rl, id) < 0)
            continue;
        for (int k = 0; k < MAX_CONNS; k++) /* it follows no more (it may come back) */
            if (s->conns[k].fd >= 0 && s->conns[k].node == id) {
                copy_done(s, &s->conns[k]);
                sconn_close(&s->conns[k]);
            }
        sl_info("cluster: forgetting member %s", forget[i]);
    }
    if (outcome >= 0 && s->isr_pending) {
        cl_rl_isr_result(s->rl, outcome);
        s->isr_pending = 0;
        sl_info("cluster: ISR change %s", outcome == CL_RL_ISR_DONE ? "written to etcd"
                                          : outcome == CL_RL_ISR_RETRY
                                              ? "not written (etcd unreachable): will retry"
                                              : "refused: this leader is deposed");
    }
    if (depose && !cl_rl_deposed(s->rl))
        cl_rl_depose(s->rl);
}

static void server_isr(cl_stream_server *s, uint64_t now)
{
    uint32_t prop;
    if (s->isr_pending || !s->log.isr_propose || !cl_rl_isr_propose(s->rl, now, &prop))
        return;
    const char *names[CL_REPL_MAX_NODES];
    size_t n = 0;
    for (int i = 0; i < s->n_names; i++)
        if ((prop >> i) & 1)
            names[n++] = s->names[i];
    s->isr_pending = 1;
    s->log.isr_propose(s->log.ctx, names, n);
}

static void *server_run(void *arg)
{
    cl_stream_server *s = arg;
    uint64_t next_ping = 0;
    for (;;) {
        struct pollfd pf[2 + MAX_CONNS];
        int map[2 + MAX_CONNS];
        int np = 0;
        pf[np++] = (struct pollfd){s->wake_fd, POLLIN, 0};
        pf[np++] = (struct pollfd){s->listen_fd, POLLIN, 0};
        for (int i = 0; i < MAX_CONNS; i++) {
            sconn *c = &s->conns[i];
            if (c->fd < 0)
                continue;
            map[np] = i;
            pf[np++] = (struct pollfd){c->fd, sconn_events(c), 0};
        }
        int pending = 0; /* TLS records read ahead: no waiting for the socket */
        for (int i = 0; i < MAX_CONNS; i++)
            pending |= s->conns[i].fd >= 0 && sconn_pending(&s->conns[i]);
        int rc = poll(pf, (nfds_t)np, pending ? 0 : 20);
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        if (rc > 0 && (pf[0].revents & POLLIN))
            drain(s->wake_fd);
        uint64_t now = mono_ms();
        if (rc > 0 && (pf[1].revents & POLLIN)) {
            for (int k = 0; k < 8; k++) {
                int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                    break;
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                int slot = -1, oldest = -1;
                for (int i = 0; i < MAX_CONNS && slot < 0; i++) {
                    if (s->conns[i].fd < 0)
                        slot = i;
                    else if (s->conns[i].node < 0 &&
                             (oldest < 0 || s->conns[i].opened_ms < s->conns[oldest].opened_ms))
                        oldest = i;
                }
                if (slot < 0 && oldest >= 0) { /* every slot taken: a stranger makes room */
                    sl_warn("audit: replication peer %s dropped (claimed node '%s'): no HELLO "
                            "yet and every connection slot taken",
                            s->conns[oldest].peer,
                            s->conns[oldest].claimed[0] ? s->conns[oldest].claimed : "-");
                    server_drop(s, &s->conns[oldest]);
                    slot = oldest;
                }
                if (slot < 0) {
                    close(fd);
                    continue;
                }
                sconn *c = &s->conns[slot];
                memset(c, 0, sizeof *c);
                c->fd = fd;
                c->node = -1;
                c->opened_ms = now;
                struct sockaddr_storage ss;
                socklen_t sl = sizeof ss;
                char host[INET6_ADDRSTRLEN] = "?";
                int port = 0;
                if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
                    if (ss.ss_family == AF_INET) {
                        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
                        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
                        port = ntohs(a->sin_port);
                    } else if (ss.ss_family == AF_INET6) {
                        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
                        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
                        port = ntohs(a->sin6_port);
                    }
                }
                snprintf(c->peer, sizeof c->peer, "%s:%d", host, port);
                if (s->tls && !(c->tls = sl_tls_new(s->tls, fd, NULL))) {
                    sconn_close(c);
                    continue;
                }
            }
        }
        for (int k = 2; k < np; k++) {
            sconn *c = &s->conns[map[k]];
            if (c->fd < 0 || (!(pf[k].revents & (POLLIN | POLLERR | POLLHUP)) && !sconn_pending(c)))
                continue;
            int dead = sconn_read(c) < 0;
            if (c->node < 0 && sl_buf_unread(&c->in) > PREAUTH_MAX) {
                sl_warn("audit: replication peer %s dropped (claimed node '%s'): %zu bytes "
                        "before its HELLO",
                        c->peer, c->claimed[0] ? c->claimed : "-", sl_buf_unread(&c->in));
                server_drop(s, c);
                continue;
            }
            for (;;) {
                cl_wire_msg m;
                size_t used;
                char err[128];
                int pr = cl_wire_parse(sl_buf_head(&c->in), sl_buf_unread(&c->in), &m, &used, err,
                                       sizeof err);
                if (pr == 0)
                    break;
                if (pr < 0) {
                    sl_warn("cluster: replication peer dropped: %s", err);
                    dead = 1;
                    break;
                }
                server_frame(s, c, &m, now);
                sl_buf_consume(&c->in, used);
                if (c->fd < 0)
                    break;
            }
            if (dead && c->fd >= 0)
                server_drop(s, c);
        }
        server_inputs(s, now);
        for (int i = 0; i < MAX_CONNS; i++)
            if (s->conns[i].fd >= 0 && s->conns[i].node > 0)
                server_send(s, &s->conns[i], now);
        if (now >= next_ping) {
            next_ping = now + s->ping_ms;
            for (int i = 0; i < MAX_CONNS; i++) {
                sconn *c = &s->conns[i];
                uint64_t sess = c->fd >= 0 && c->node > 0 ? cl_rl_session(s->rl, c->node) : 0;
                if (sess && !c->close_after)
                    cl_wire_put_ping(&c->out, cl_rl_epoch(s->rl), sess, cl_rl_commit(s->rl));
            }
        }
        for (int i = 0; i < MAX_CONNS; i++) {
            sconn *c = &s->conns[i];
            if (c->fd >= 0 && c->node < 0 && !c->close_after && now > c->opened_ms + PREAUTH_MS) {
                sl_warn("audit: replication peer %s dropped (claimed node '%s'): no HELLO within "
                        "%d ms",
                        c->peer, c->claimed[0] ? c->claimed : "-", PREAUTH_MS);
                server_drop(s, c);
            }
        }
        server_isr(s, now);
        server_publish(s, now);
        for (int i = 0; i < MAX_CONNS; i++) {
            sconn *c = &s->conns[i];
            if (c->fd < 0)
                continue;
            if (sconn_write(c) < 0 || (c->close_after && !sl_buf_unread(&c->out)))
                server_drop(s, c);
        }
    }
    return NULL;
}

cl_stream_server *cl_stream_server_start(int listen_fd, const cl_stream_server_opts *o,
                                         const cl_stream_log *log, char *err, size_t errlen)
{
    cl_stream_server *s = sl_xcalloc(1, sizeof *s);
    s->listen_fd = listen_fd;
    s->self = sl_xstrdup(o->self);
    s->cluster = sl_xstrdup(o->cluster);
    s->log = *log;
    s->ping_ms = o->ping_ms ? o->ping_ms : 200;
    s->banned = o->banned;
    s->banned_ctx = o->banned_ctx;
    s->member = o->member;
    s->member_ctx = o->member_ctx;
    if (o->secret && o->secret_len) {
        s->secret = sl_xmalloc(o->secret_len);
        memcpy(s->secret, o->secret, o->secret_len);
        s->secret_len = o->secret_len;
    }
    s->tls = o->tls;
    s->isr_outcome = -1;
    pthread_mutex_init(&s->mu, NULL);
    for (int i = 0; i < MAX_CONNS; i++)
        s->conns[i].fd = -1;
    node_id(s, o->self, strlen(o->self)); /* 0 */
    uint32_t isr = 1;
    for (size_t i = 0; i < o->n_isr; i++) {
        int id = node_id(s, o->isr[i], strlen(o->isr[i]));
        if (id >= 0)
            isr |= 1u << id;
    }
    s->rl = cl_rl_new(0, o->epoch, isr, &o->rl, o->last_idx, o->hist, mono_ms());
    s->last_in = o->last_idx;
    s->hist = o->hist;
    s->chunk = sl_xmalloc(COPY_CHUNK);
    s->released_out = 0;
    s->blocked_out = cl_rl_blocked(s->rl);
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->ev_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
    if (s->wake_fd < 0 || s->ev_fd < 0 || pthread_create(&s->thread, NULL, server_run, s) != 0) {
        snprintf(err, errlen, "replication server: %s", strerror(errno));
        cl_stream_server_stop(s);
        return NULL;
    }
    s->started = 1;
    return s;
}

void cl_stream_server_stop(cl_stream_server *s)
{
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_mutex_unlock(&s->mu);
        poke(s->wake_fd);
        pthread_join(s->thread, NULL);
    }
    for (int i = 0; i < MAX_CONNS; i++) {
        copy_done(s, &s->conns[i]);
        sconn_close(&s->conns[i]);
    }
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    if (s->ev_fd >= 0)
        close(s->ev_fd);
    cl_rl_free(s->rl);
    sl_free(s->chunk);
    pthread_mutex_destroy(&s->mu);
    sl_free(s->pend);
    if (s->secret)
        memset(s->secret, 0, s->secret_len);
    sl_free(s->secret);
    sl_tls_ctx_free(s->tls); /* after every stream of it (sconn_close above) */
    sl_free(s->self);
    sl_free(s->cluster);
    sl_free(s);
}

/* Under mu. */
static void pend_add(cl_stream_server *s, uint64_t idx, uint64_t bytes)
{
    if (idx <= s->last_in)
        return; /* had (shipped at ST_FOP_WRITTEN, now reported again with its sync) */
    s->last_in = idx;
    if (s->n_pend == s->cap_pend) {
        s->cap_pend = s->cap_pend ? s->cap_pend * 2 : 64;
        s->pend = sl_xrealloc(s->pend, s->cap_pend * sizeof *s->pend);
    }
    s->pend[s->n_pend++] = (struct pend){idx, bytes};
}

void cl_stream_server_append(cl_stream_server *s, uint64_t idx, uint64_t bytes)
{
    pthread_mutex_lock(&s->mu);
    pend_add(s, idx, bytes);
    pthread_mutex_unlock(&s->mu);
    poke(s->wake_fd);
}

void cl_stream_server_append_durable(cl_stream_server *s, uint64_t idx, uint64_t bytes,
                                     uint64_t durable)
{
    pthread_mutex_lock(&s->mu);
    pend_add(s, idx, bytes);
    if (durable > s->durable_in)
        s->durable_in = durable;
    pthread_mutex_unlock(&s->mu);
    poke(s->wake_fd);
}

void cl_stream_server_durable(cl_stream_server *s, uint64_t idx)
{
    pthread_mutex_lock(&s->mu);
    if (idx > s->durable_in)
        s->durable_in = idx;
    pthread_mutex_unlock(&s->mu);
    poke(s->wake_fd);
}

void cl_stream_server_lease(cl_stream_server *s, uint64_t valid_until_ms)
{
    pthread_mutex_lock(&s->mu);
    if (valid_until_ms > s->lease_in)
        s->lease_in = valid_until_ms;
    pthread_mutex_unlock(&s->mu);
    poke(s->wake_fd);
}

void cl_stream_server_isr_result(cl_stream_server *s, int outcome)
{
    pthread_mutex_lock(&s->mu);
    s->isr_outcome = outcome;
    pthread_mutex_unlock(&s->mu);
    poke(s->wake_fd);
}

void cl_stream_server_depose(cl_stream_server *s)
{
    pthread_mutex_lock(&s->mu);
    s->depose_in = 1;
    pthread_mutex_unlock(&s->mu);
    poke(s->wake_fd);
}

int cl_stream_server_fd(const cl_stream_server *s)
{
    return s->ev_fd;
}

void cl_stream_server_take_event(cl_stream_server *s)
{
    drain(s->ev_fd);
}

uint64_t cl_stream_server_released(cl_stream_server *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t v = s->released_out;
    pthread_mutex_unlock(&s->mu);
    return v;
}

int cl_stream_server_blocked(cl_stream_server *s)
{
    pthread_mutex_lock(&s->mu);
    int v = s->blocked_out;
    pthread_mutex_unlock(&s->mu);
    return v;
}

uint64_t cl_stream_server_commit(cl_stream_server *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t v = s->commit_out;
    pthread_mutex_unlock(&s->mu);
    return v;
}

size_t cl_stream_server_peers(cl_stream_server *s, cl_stream_peer *out, size_t max)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->n_peers_out < max ? s->n_peers_out : max;
    memcpy(out, s->peers_out, n * sizeof *out);
    pthread_mutex_unlock(&s->mu);
    return n;
}

uint64_t cl_stream_server_forget(cl_stream_server *s, const char *name)
{
    if (!strcmp(name, s->self) || strlen(name) >= 256)
        return 0;
    pthread_mutex_lock(&s->mu);
    uint64_t t = 0;
    if (s->n_forget_in < CL_REPL_MAX_NODES) {
        snprintf(s->forget_in[s->n_forget_in++], 256, "%s", name);
        t = ++s->forget_asked;
    }
    pthread_mutex_unlock(&s->mu);
    poke(s->wake_fd);
    return t;
}

uint64_t cl_stream_server_forgotten(cl_stream_server *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t v = s->forget_done;
    pthread_mutex_unlock(&s->mu);
    return v;
}

/* ---- follower ---- */

struct cl_stream_client {
    char *self, *cluster;
    uint8_t *secret; /* NULL: none */
    size_t secret_len;
    sl_tls_ctx *tls; /* NULL: plain TCP */
    cl_stream_log log;
    int wake_fd;
    pthread_t thread;
    int started;

    pthread_mutex_t mu;
    /* inputs, under mu */
    char leader[280];
    uint64_t seen_epoch;
    int stop;
    /* outputs, under mu */
    int state;
    uint64_t pos_epoch, pos_idx;

    /* the thread's own */
    cl_repl_epochs hist;
    cl_rf *rf;
    sconn c;
    char dialed[280];
    int connecting;
    int need_copy; /* ask for a full copy at the next connection */
    int copying;   /* a copy is coming on this connection (COPYBEGIN seen) */
    uint64_t copy_idx;
    cl_repl_epochs copy_hist;
    uint64_t heard_ms, retry_ms;
    int unsaved;      /* groups applied (durable, ACKed) since the position was last saved */
    uint64_t save_ms; /* when to save it: SAVE_IDLE_MS after the last apply */
};

static void epochs_copy(cl_repl_epochs *to, const cl_repl_epochs *from)
{
    cl_repl_epochs_free(to);
    cl_repl_epochs_init(to);
    for (size_t i = 0; i < from->n; i++)
        cl_repl_epochs_note(to, from->v[i].epoch, from->v[i].first);
}

static void client_set_state(cl_stream_client *c, int state)
{
    pthread_mutex_lock(&c->mu);
    c->state = state;
    c->pos_epoch = cl_repl_epochs_last(&c->hist);
    c->pos_idx = cl_rf_durable_idx(c->rf);
    pthread_mutex_unlock(&c->mu);
}

static void client_set_pos(cl_stream_client *c)
{
    pthread_mutex_lock(&c->mu);
    c->pos_epoch = cl_repl_epochs_last(&c->hist);
    c->pos_idx = cl_rf_durable_idx(c->rf);
    pthread_mutex_unlock(&c->mu);
}

static void client_drop(cl_stream_client *c, int state)
{
    sconn_close(&c->c);
    c->connecting = 0;
    c->copying = 0;
    if (state == CL_STREAM_NEED_COPY)
        c->need_copy = 1;
    if (c->need_copy)
        state = CL_STREAM_NEED_COPY;
    c->retry_ms = mono_ms() + RETRY_MS;
    client_set_state(c, state);
}

/* Back to what is durable (a failed apply may have left rf ahead of the disk). */
static void client_rewind(cl_stream_client *c)
{
    uint64_t d = cl_rf_durable_idx(c->rf);
    cl_repl_epochs_truncate(&c->hist, d);
    cl_rf_free(c->rf);
    c->rf = cl_rf_new(0, d, &c->hist);
    pthread_mutex_lock(&c->mu);
    cl_rf_epoch_seen(c->rf, c->seen_epoch);
    pthread_mutex_unlock(&c->mu);
}

/* Save the position of what is applied (durable and ACKed): the owner's save also clears
 * its in-flight marker. 0, or -1 with everything back to what the saved position says is
 * not assumed (the marker stays set: a restart takes a full copy). */
static int client_save(cl_stream_client *c)
{
    if (!c->unsaved)
        return 0;
    c->unsaved = 0;
    if (c->log.save && c->log.save(c->log.ctx, cl_rf_durable_idx(c->rf), &c->hist) < 0) {
        sl_error("cluster: the replica state could not be saved");
        return -1;
    }
    return 0;
}

static void client_hello(cl_stream_client *c)
{
    uint64_t e, i;
    cl_rf_hello(c->rf, &e, &i);
    cl_wire_put_hello(&c->c.out, c->self, c->cluster, e, i);
}

static void client_ack(cl_stream_client *c)
{
    uint64_t e, s, end, d;
    cl_rf_ack_fields(c->rf, &e, &s, &end, &d);
    if (s)
        cl_wire_put_ack(&c->c.out, e, s, end, d);
}

static int dial(const char *addr)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host)
        return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A full copy's frames (while need_copy: everything else from the leader is ignored). */
static int client_copy_frame(cl_stream_client *c, const cl_wire_msg *m)
{
    char err[256];
    c->heard_ms = mono_ms();
    if (m->type == CL_WIRE_COPYBEGIN) {
        client_save(c); /* the directory is whole before the copy replaces it */
        c->copying = 1;
        c->copy_idx = m->a;
        cl_repl_epochs_free(&c->copy_hist);
        cl_repl_epochs_init(&c->copy_hist);
        for (uint32_t i = 0; i < m->n_hist; i++)
            cl_repl_epochs_note(&c->copy_hist, sl_get_u64(m->hist + 16 * i),
                                sl_get_u64(m->hist + 16 * i + 8));
        client_set_state(c, CL_STREAM_COPYING);
        sl_info("cluster: taking a full copy from %s (up to group %" PRIu64 ")", c->dialed, m->a);
        if (c->log.copy_begin(c->log.ctx, m->a, err, sizeof err) < 0)
            goto fail;
        return 0;
    }
    if (!c->copying)
        return 0; /* START, PING: this connection only carries the copy for now */
    if (m->type == CL_WIRE_COPYDATA) {
        char name[CL_WIRE_MAX_NAME + 1];
        memcpy(name, m->file, m->file_len);
        name[m->file_len] = 0;
        if (c->log.copy_write(c->log.ctx, name, m->a, m->meta, m->meta_len, err, sizeof err) < 0)
            goto fail;
        return 0;
    }
    if (m->type == CL_WIRE_COPYEND) {
        if (m->a != c->copy_idx ||
            c->log.copy_end(c->log.ctx, m->a, &c->copy_hist, err, sizeof err) < 0) {
            if (m->a != c->copy_idx)
                snprintf(err, sizeof err, "the copy's end names another group");
            goto fail;
        }
        sl_info("cluster: full copy taken: this node's log now ends at group %" PRIu64, m->a);
        /* follow on from the copy: a new session on this connection */
        cl_repl_epochs_free(&c->hist);
        cl_repl_epochs_init(&c->hist);
        for (size_t i = 0; i < c->copy_hist.n; i++)
            cl_repl_epochs_note(&c->hist, c->copy_hist.v[i].epoch, c->copy_hist.v[i].first);
        cl_rf_free(c->rf);
        c->rf = cl_rf_new(0, m->a, &c->hist);
        pthread_mutex_lock(&c->mu);
        cl_rf_epoch_seen(c->rf, c->seen_epoch);
        pthread_mutex_unlock(&c->mu);
        c->need_copy = 0;
        c->copying = 0;
        client_set_state(c, CL_STREAM_CONNECTING);
        client_hello(c);
        return 0;
    }
    return 0;
fail:
    sl_error("cluster: the full copy failed: %s", err);
    client_drop(c, CL_STREAM_NEED_COPY);
    return -1;
}

/* The leader's CHALLENGE (auth.h): check its proof, then prove ours and say HELLO. 0, or -1
 * with the connection dropped. */
static int client_auth(cl_stream_client *c, const cl_wire_msg *m)
{
    char leader[256];
    snprintf(leader, sizeof leader, "%.*s", (int)(m->node_len < 255 ? m->node_len : 255),
             (const char *)m->node);
    if (c->c.auth != 1 || !cl_auth_check(c->secret, c->secret_len, 'L', c->cluster, c->self, leader,
                                         c->c.nf, m->nonce, m->mac)) {
        sl_warn("audit: the replication leader at %s (claimed node '%s') did not prove the "
                "cluster secret: not following it",
                c->dialed, leader);
        client_drop(c, c->need_copy ? CL_STREAM_NEED_COPY : CL_STREAM_CONNECTING);
        return -1;
    }
    uint8_t mac[CL_AUTH_MAC];
    cl_auth_mac(c->secret, c->secret_len, 'F', c->cluster, c->self, leader, c->c.nf, m->nonce, mac);
    cl_wire_put_proof(&c->c.out, mac);
    c->c.auth = 2;
    client_hello(c);
    if (c->need_copy)
        cl_wire_put_copyreq(&c->c.out);
    return 0;
}

/* One frame from the leader; 0, or -1 to drop the connection (state set). Groups applied
 * are counted in *applied (saved and acked once the batch is read). */
static int client_frame(cl_stream_client *c, const cl_wire_msg *m, int *applied)
{
    if (c->secret && m->type == CL_WIRE_CHALLENGE)
        return client_auth(c, m);
    if (c->secret && c->c.auth != 2 && m->type != CL_WIRE_REFUSE) {
        /* nothing from a leader that has not proved the secret is applied */
        sl_warn("audit: the replication leader at %s sent type %u before it proved the cluster "
                "secret: not following it",
                c->dialed, m->type);
        client_drop(c, c->need_copy ? CL_STREAM_NEED_COPY : CL_STREAM_CONNECTING);
        return -1;
    }
    if (c->need_copy && m->type != CL_WIRE_REFUSE)
        return client_copy_frame(c, m);
    switch (m->type) {
    case CL_WIRE_START: {
        cl_rl_start st = {.epoch = m->epoch,
                          .session = m->session,
                          .div_epoch = m->a,
                          .div_end = m->b,
                          .hello_epoch = m->c,
                          .hello_idx = m->d};
        uint64_t before = cl_rf_last(c->rf), to = 0;
        int rc = cl_rf_start(c->rf, &st, &to);
        if (rc == CL_RF_REJECT) {
            sl_warn("cluster: a START of epoch %" PRIu64 " refused (a newer epoch is known)",
                    m->epoch);
            client_drop(c, CL_STREAM_CONNECTING);
            return -1;
        }
        if (rc == CL_RF_IGNORE) {
            client_hello(c);
            return 0;
        }
        if (to < before) {
            /* Our log holds groups the leader's does not: a physical mirror cannot unapply
             * them. A full copy is the way back. */
            sl_warn("cluster: this node's log diverges from the leader's after group %" PRIu64
                    " (it has %" PRIu64 "): a full copy is needed",
                    to, before);
            client_drop(c, CL_STREAM_NEED_COPY);
            c->retry_ms = 0;
            return -1;
        }
        c->heard_ms = mono_ms();
        client_set_state(c, CL_STREAM_STREAMING);
        sl_info("cluster: following %s from group %" PRIu64 " (epoch %" PRIu64 ")", c->dialed,
                before, m->epoch);
        client_ack(c);
        return 0;
    }
    case CL_WIRE_DATA: {
        int rc = cl_rf_data(c->rf, m->epoch, m->session, m->a, m->b);
        if (cl_rf_current(c->rf, m->epoch, m->session))
            c->heard_ms = mono_ms();
        if (rc == CL_RF_APPEND) {
            char err[256];
            if (c->log.apply(c->log.ctx, m->a, m->b, m->meta, m->meta_len, err, sizeof err) < 0) {
                sl_error("cluster: group %" PRIu64 " could not be applied: %s", m->a, err);
                client_rewind(c);
                client_drop(c, CL_STREAM_CONNECTING);
                return -1;
            }
            (*applied)++;
        } else if (rc == CL_RF_GAP) {
            client_ack(c);
        }
        return 0;
    }
    case CL_WIRE_PING:
        if (cl_rf_current(c->rf, m->epoch, m->session)) {
            c->heard_ms = mono_ms();
            client_ack(c); /* idempotent: repairs a lost ACK */
        }
        return 0;
    case CL_WIRE_REFUSE: {
        /* Before the leader proved the secret a REFUSE is a stranger's word (the only frame
         * taken then): it ends this connection, but never makes this node drop its position
         * and ask the real leader for a full copy. A real leader says "not kept" only after
         * our HELLO, so after the handshake. */
        int proved = !c->secret || c->c.auth == 2;
        int not_kept = m->code == REFUSE_NOT_KEPT && proved;
        sl_warn("cluster: the leader%s refused this follower: %.*s",
                proved ? "" : " (not yet authenticated)", (int)m->reason_len,
                (const char *)m->reason);
        client_drop(c, not_kept ? CL_STREAM_NEED_COPY : CL_STREAM_CONNECTING);
        if (not_kept)
            c->retry_ms = 0;
        return -1;
    }
    default:
        return 0;
    }
}

static void *client_run(void *arg)
{
    cl_stream_client *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int stop = c->stop;
        char leader[280];
        snprintf(leader, sizeof leader, "%s", c->leader);
        uint64_t seen = c->seen_epoch;
        pthread_mutex_unlock(&c->mu);
        if (stop)
            break;
        cl_rf_epoch_seen(c->rf, seen);
        uint64_t now = mono_ms();
        if (c->unsaved && now >= c->save_ms && client_save(c) < 0) {
            client_rewind(c);
            if (c->c.fd >= 0)
                client_drop(c, CL_STREAM_CONNECTING);
            continue;
        }
        if (c->c.fd >= 0 && strcmp(leader, c->dialed))
            client_drop(c, CL_STREAM_IDLE); /* the leader changed */
        if (c->c.fd >= 0 && !c->connecting && now > c->heard_ms + HEARD_MAX_MS) {
            sl_warn("cluster: nothing heard from the leader at %s for %d ms: reconnecting",
                    c->dialed, HEARD_MAX_MS);
            client_drop(c, CL_STREAM_CONNECTING);
        }
        /* The pause is between attempts at one address: a leader just named (a failover)
         * is dialed at once, or the first confirms of its epoch would wait for it. */
        int fresh = strcmp(leader, c->dialed) != 0;
        if (c->c.fd < 0 && leader[0] && (fresh || now >= c->retry_ms)) {
            int fd = dial(leader);
            snprintf(c->dialed, sizeof c->dialed, "%s", leader);
            if (fd < 0) {
                c->retry_ms = now + RETRY_MS;
            } else {
                memset(&c->c, 0, sizeof c->c);
                c->c.fd = fd;
                c->c.node = 0;
                c->connecting = 1;
                c->heard_ms = now;
                snprintf(c->dialed, sizeof c->dialed, "%s", leader);
                client_rewind(c); /* a new session starts from what is durable */
                if (c->secret) {
                    /* HELLO (and COPYREQ) once the leader proved itself: client_auth */
                    if (cl_auth_nonce(c->c.nf) < 0) {
                        sl_error("cluster: no random bytes for a replication handshake");
                        client_drop(c, CL_STREAM_CONNECTING);
                        continue;
                    }
                    cl_wire_put_auth(&c->c.out, c->self, c->cluster, c->c.nf);
                    c->c.auth = 1;
                } else {
                    client_hello(c);
                    if (c->need_copy)
                        cl_wire_put_copyreq(&c->c.out);
                }
                client_set_state(c, c->need_copy ? CL_STREAM_NEED_COPY : CL_STREAM_CONNECTING);
            }
        }
        struct pollfd pf[2] = {{c->wake_fd, POLLIN, 0}, {-1, 0, 0}};
        if (c->c.fd >= 0) {
            pf[1].fd = c->c.fd;
            pf[1].events = c->connecting ? (short)(POLLIN | POLLOUT) : sconn_events(&c->c);
        }
        int timeout = 100;
        if (c->unsaved) {
            uint64_t t = mono_ms();
            timeout = c->save_ms <= t ? 0 : c->save_ms - t < 100 ? (int)(c->save_ms - t) : 100;
        }
        int rc = poll(pf, 2, timeout);
        if (rc > 0 && (pf[0].revents & POLLIN))
            drain(c->wake_fd);
        if (c->c.fd < 0 || rc <= 0 || !pf[1].revents)
            continue;
        if (c->connecting) {
            int e = 0;
            socklen_t el = sizeof e;
            getsockopt(c->c.fd, SOL_SOCKET, SO_ERROR, &e, &el);
            if (e) {
                client_drop(c, CL_STREAM_CONNECTING);
                continue;
            }
            c->connecting = 0;
            c->heard_ms = mono_ms();
            if (c->tls) {
                char host[280];
                snprintf(host, sizeof host, "%s", c->dialed);
                char *colon = strrchr(host, ':');
                if (colon)
                    *colon = 0;
                c->c.tls = sl_tls_new(c->tls, c->c.fd, host);
                if (!c->c.tls || sconn_tls_step(&c->c) < 0) {
                    client_drop(c, c->need_copy ? CL_STREAM_NEED_COPY : CL_STREAM_CONNECTING);
                    continue;
                }
            }
        }
        int dead = (pf[1].revents & POLLIN) || (pf[1].revents & (POLLERR | POLLHUP))
                       ? sconn_read(&c->c) < 0
                       : 0;
        if (c->secret && c->c.auth != 2 && sl_buf_unread(&c->c.in) > PREAUTH_MAX) {
            /* a CHALLENGE or a REFUSE is a few hundred bytes: a peer that announces a larger
             * frame before it proved the secret is not our leader (as the server bounds a
             * peer before its HELLO) */
            sl_warn("audit: the replication leader at %s sent %zu bytes before it proved the "
                    "cluster secret: not following it",
                    c->dialed, sl_buf_unread(&c->c.in));
            client_drop(c, c->need_copy ? CL_STREAM_NEED_COPY : CL_STREAM_CONNECTING);
            continue;
        }
        int applied = 0, dropped = 0;
        for (;;) {
            cl_wire_msg m;
            size_t used;
            char err[128];
            int pr = cl_wire_parse(sl_buf_head(&c->c.in), sl_buf_unread(&c->c.in), &m, &used, err,
                                   sizeof err);
            if (pr == 0)
                break;
            if (pr < 0) {
                sl_warn("cluster: the leader's stream is malformed: %s", err);
                dead = 1;
                break;
            }
            if (client_frame(c, &m, &applied) < 0) {
                dropped = 1;
                break;
            }
            sl_buf_consume(&c->c.in, used);
        }
        if (applied) {
            /* The batch's groups on the disk (one sync for them all), then promised at once;
             * the position is saved once the stream is quiet (SAVE_IDLE_MS), so neither its
             * sync nor the next batch's marker is paid per batch. A node stopped before the
             * save finds its in-flight marker and takes a full copy (node.c). */
            char err[256];
            if (c->log.sync && c->log.sync(c->log.ctx, err, sizeof err) < 0) {
                sl_error("cluster: the groups applied could not be synced: %s", err);
                client_rewind(c);
                if (!dropped)
                    client_drop(c, CL_STREAM_CONNECTING);
                continue;
            }
            uint64_t last = cl_rf_last(c->rf);
            cl_rf_durable(c->rf, last);
            c->unsaved = 1;
            c->save_ms = mono_ms() + SAVE_IDLE_MS;
            if (!dropped) {
                client_set_state(c, CL_STREAM_STREAMING);
                client_ack(c);
                if (sconn_write(&c->c) < 0)
                    dead = 1;
            } else {
                client_set_pos(c);
            }
        }
        if (dropped)
            continue;
        if (dead || sconn_write(&c->c) < 0) {
            /* the leader's end went away (its process died?): the member checks (issue 46) */
            if (c->log.lost && !c->connecting && (!c->secret || c->c.auth == 2))
                c->log.lost(c->log.ctx, c->dialed);
            client_drop(c, CL_STREAM_CONNECTING);
        }
    }
    client_save(c); /* a promoted node continues from the saved position (node.c) */
    return NULL;
}

cl_stream_client *cl_stream_client_start(const char *self, const char *cluster,
                                         const uint8_t *secret, size_t secret_len, sl_tls_ctx *tls,
                                         uint64_t last_idx, const cl_repl_epochs *hist,
                                         int need_copy, const cl_stream_log *log, char *err,
                                         size_t errlen)
{
    cl_stream_client *c = sl_xcalloc(1, sizeof *c);
    c->tls = tls;
    c->self = sl_xstrdup(self);
    c->cluster = sl_xstrdup(cluster);
    if (secret && secret_len) {
        c->secret = sl_xmalloc(secret_len);
        memcpy(c->secret, secret, secret_len);
        c->secret_len = secret_len;
    }
    c->log = *log;
    c->c.fd = -1;
    pthread_mutex_init(&c->mu, NULL);
    cl_repl_epochs_init(&c->hist);
    cl_repl_epochs_init(&c->copy_hist);
    epochs_copy(&c->hist, hist);
    c->need_copy = need_copy;
    c->state = need_copy ? CL_STREAM_NEED_COPY : CL_STREAM_IDLE;
    c->rf = cl_rf_new(0, last_idx, &c->hist);
    c->pos_idx = last_idx;
    c->pos_epoch = cl_repl_epochs_last(&c->hist);
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->wake_fd < 0 || pthread_create(&c->thread, NULL, client_run, c) != 0) {
        snprintf(err, errlen, "replication client: %s", strerror(errno));
        cl_stream_client_stop(c);
        return NULL;
    }
    c->started = 1;
    return c;
}

void cl_stream_client_stop(cl_stream_client *c)
{
    if (!c)
        return;
    if (c->started) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_mutex_unlock(&c->mu);
        poke(c->wake_fd);
        pthread_join(c->thread, NULL);
    }
    sconn_close(&c->c);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    cl_rf_free(c->rf);
    cl_repl_epochs_free(&c->hist);
    cl_repl_epochs_free(&c->copy_hist);
    pthread_mutex_destroy(&c->mu);
    if (c->secret)
        memset(c->secret, 0, c->secret_len);
    sl_free(c->secret);
    sl_tls_ctx_free(c->tls);
    sl_free(c->self);
    sl_free(c->cluster);
    sl_free(c);
}

void cl_stream_client_set_leader(cl_stream_client *c, const char *addr, uint64_t epoch)
{
    pthread_mutex_lock(&c->mu);
    snprintf(c->leader, sizeof c->leader, "%s", addr ? addr : "");
    if (epoch > c->seen_epoch)
        c->seen_epoch = epoch;
    pthread_mutex_unlock(&c->mu);
    poke(c->wake_fd);
}

int cl_stream_client_state(cl_stream_client *c)
{
    pthread_mutex_lock(&c->mu);
    int v = c->state;
    pthread_mutex_unlock(&c->mu);
    return v;
}

void cl_stream_client_position(cl_stream_client *c, uint64_t *last_epoch, uint64_t *last_idx)
{
    pthread_mutex_lock(&c->mu);
    *last_epoch = c->pos_epoch;
    *last_idx = c->pos_idx;
    pthread_mutex_unlock(&c->mu);
}
