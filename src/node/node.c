/* node.c - the node's life: the loop and the model made, the store opened, the work done once
 * per loop turn, the tick, signals, the orderly shutdown, and the end.
 *
 * Turn order (before sleep): the parts' turn_begin (held-back input), then up to four rounds
 * of: queue dispatch, the group commit's kick (what this turn appended goes to the sync
 * thread), every part's turn (the links send what their syncs allow, the AMQP door flushes
 * its connections' confirms and output once each); then a slice of the graveyard and of TIDY,
 * the disk check, and the end of a shutdown once nothing is live. Writing after dispatch
 * means one send() carries every delivery of the turn.
 *
 * Invariants: parts are called in the order they were added (stopped in the reverse order);
 * the node frees the store, the model, the access module and the loop last, after every part
 * has stopped.
 */
#include "node/node.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "access/verifier.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "net/accept.h"
#include "net/tls.h"
#include "node/node_internal.h"
#include "persist/persist.h"

#define TICK_MS 100
#define REAP_SLICE_US 1000
/* Slow password checks waiting or running at most (access/verifier.h): about 20 ms each,
 * so a full queue is answered within a second; logins beyond it are refused at once. */
#define VERIFY_MAX_PENDING 32

void node_add_part(sl_node *n, const node_part *p)
{
    if (n->n_parts == NODE_MAX_PARTS) {
        sl_error("node: more than %d parts (%s)", NODE_MAX_PARTS, p->name);
        abort();
    }
    n->parts[n->n_parts++] = *p;
}

void node_remove_part(sl_node *n, void *ctx)
{
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].ctx == ctx) {
            memmove(&n->parts[i], &n->parts[i + 1], (n->n_parts - i - 1) * sizeof n->parts[0]);
            n->n_parts--;
            return;
        }
}

void node_add_listener(sl_node *n, const char *protocol, const char *addr, int port,
                       const struct sl_acceptor *acceptor)
{
    if (n->n_listeners == NODE_MAX_LISTENERS)
        return;
    node_listener *l = &n->listeners[n->n_listeners++];
    snprintf(l->protocol, sizeof l->protocol, "%s", protocol);
    snprintf(l->addr, sizeof l->addr, "%s", addr);
    l->port = port;
    l->acceptor = acceptor;
}

const node_listener *node_listener_find(const sl_node *n, const char *protocol)
{
    for (size_t i = 0; i < n->n_listeners; i++)
        if (!strcmp(n->listeners[i].protocol, protocol))
            return &n->listeners[i];
    return NULL;
}

uint64_t node_client_id(sl_node *n)
{
    return ++n->next_client_id;
}

const node_part *node_client_next(const sl_node *n, uint64_t at_most, node_client *out)
{
    /* each door's list is ordered by id: the largest of their candidates is the next one
     * (a door's client is found again by the door's own cursor, so this costs a step per
     * door and client, not a walk) */
    const node_part *best = NULL;
    node_client v;
    for (size_t i = 0; i < n->n_parts; i++) {
        const node_part *p = &n->parts[i];
        if (!p->client_next || !p->client_next(p->ctx, at_most, &v))
            continue;
        if (!best || v.id > out->id) {
            *out = v;
            if (v.peer_cert_subject == v.dn_buf) /* the copy's own buffer */
                out->peer_cert_subject = out->dn_buf;
            best = p;
        }
    }
    return best;
}

const node_part *node_client_find(const sl_node *n, const char *name, node_client *out)
{
    for (size_t i = 0; i < n->n_parts; i++) {
        const node_part *p = &n->parts[i];
        if (p->client_find && p->client_find(p->ctx, name, out))
            return p;
    }
    return NULL;
}

int node_amqp_port(const sl_node *n)
{
    const node_listener *l = node_listener_find(n, "amqp");
    return l ? l->port : 0;
}

int node_turn_over(const sl_node *n)
{
    return sl_now_ms() >= sl_loop_now(n->loop) + TURN_INPUT_MS;
}

size_t node_parts_live(const sl_node *n)
{
    size_t live = 0;
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].live)
            live += n->parts[i].live(n->parts[i].ctx);
    return live;
}

static void before_sleep(sl_loop *loop, void *arg)
{
    sl_node *n = arg;
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].turn_begin)
            n->parts[i].turn_begin(n->parts[i].ctx);
    /* Flushing can free prefetch room and dispatch can write more: a few rounds settle it. */
    int busy = 0;
    for (int round = 0; round < 4; round++) {
        qm_node_run_dispatch(n->qm);
        /* Group commit: what this turn appended goes to the sync thread now unless a sync
         * is running (then the next one takes it). Replies that promise it wait for it. */
        node_kick(n, 0);
        busy = 0;
        for (size_t i = 0; i < n->n_parts; i++)
            if (n->parts[i].turn)
                busy |= n->parts[i].turn(n->parts[i].ctx);
        if (!n->qm->dispatch_head && !busy)
            break;
    }
    /* Free a slice of what purges and deletes left behind: at most ~1 ms per turn, by the
     * clock rather than by count, since freeing cold memory costs anything from 50 ns to
     * a few hundred a message, and a request arriving meanwhile waits for the slice. */
    int more = 0;
    if (n->qm->graves) {
        uint64_t until = sl_now_us() + REAP_SLICE_US;
        while ((more = qm_node_reap(n->qm, 2048)) && sl_now_us() < until)
            ;
    }
    node_tidy_turn(n);
    node_check_disk_step(n); /* what was written this turn may be what fills the disk */
    if (more || n->qm->dispatch_head || busy)
        sl_loop_wake(loop);
    /* The next turn's budget of bounded model work (mass expiry) starts now. */
    qm_node_new_turn(n->qm);
    /* Connections and HTTP requests in flight: a step-down's reply must reach its client
     * before the process re-executes (the cluster's API). */
    if (n->shutting_down && (node_parts_live(n) == 0 || sl_loop_now(loop) >= n->shutdown_deadline))
        sl_loop_stop(loop);
}

static void tick(sl_loop *loop, sl_timer *t)
{
    sl_node *n = t->data;
    uint64_t now = sl_loop_now(loop);
    uint64_t next = qm_node_tick(n->qm, now);
    node_alarm_tick(n, now);
    uint64_t due = now + TICK_MS;
    if (next && next < due)
        due = next > now ? next : now + 1;
    sl_timer_start(loop, t, due);
}

void node_begin_shutdown(sl_node *n, const char *why, const char *text)
{
    if (n->shutting_down)
        return;
    sl_info("%s: shutting down, closing %zu connection(s)", why, node_parts_live(n));
    n->shutting_down = 1;
    n->shutdown_deadline = sl_loop_now(n->loop) + 2000;
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].shutdown)
            n->parts[i].shutdown(n->parts[i].ctx, text);
    /* The tick timer keeps the loop waking up until the deadline. */
}

static void on_signal(sl_loop *loop, sl_watch *w, int events)
{
    sl_node *n = w->data;
    (void)loop;
    (void)events;
    struct signalfd_siginfo si;
    while (read(n->signal_fd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
            node_begin_shutdown(n, si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT",
                                "CONNECTION_FORCED - broker forced connection closure with "
                                "reason 'shutdown'");
    }
}

static void on_verify_done(sl_loop *loop, sl_watch *w, int events)
{
    sl_node *n = w->data;
    (void)loop;
    (void)events;
    acc_verifier_run_done(n->verifier);
}

/* Take every descriptor the hard limit allows (the soft limit is often 1024 while the hard one
 * is far higher), and decide how many the AMQP door leaves free for the store and the API. */
static void raise_fd_limit(sl_node *n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        n->fd_reserve = sl_fd_reserve(1024);
        return;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want =
            rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (1u << 20) ? (1u << 20) : rl.rlim_max;
        if (want > rl.rlim_cur) {
            struct rlimit nrl = {want, rl.rlim_max};
            if (setrlimit(RLIMIT_NOFILE, &nrl) == 0)
                rl.rlim_cur = want;
        }
    }
    n->fd_reserve = sl_fd_reserve(rl.rlim_cur);
    sl_info("descriptors: limit %llu, %u kept free of AMQP connections",
            (unsigned long long)rl.rlim_cur, n->fd_reserve);
}

sl_node *node_new(node_config *cfg)
{
    sl_node *n = sl_xcalloc(1, sizeof *n);
    n->cfg = cfg;
    n->signal_fd = -1;
    n->sync_w.fd = n->pace_w.fd = -1;
    /* Set up here, not where they start: node_free stops them, also after a node_open that
     * failed before (a locked or corrupt store), and a zeroed timer looks started. */
    sl_timer_init(&n->tick_timer, tick, n);
    sl_timer_init(&n->tidy_timer, NULL, n);
    raise_fd_limit(n);
    n->loop = sl_loop_new();
    if (!n->loop) {
        sl_error("cannot create the event loop: %s", strerror(errno));
        sl_free(n);
        return NULL;
    }
    sl_loop_set_cpu_stats(n->loop, cfg->loop_cpu_stats);
    sl_loop_set_busy_poll(n->loop, cfg->busy_poll_us);
    n->qm = qm_node_new(cfg->node_name);
    qm_set_memory_budget(cfg->memory_budget);
    n->qm->clock = sl_loop_now_ptr(n->loop);
    n->acc = acc_new();
    if (cfg->password_hashing_module)
        acc_set_default_hash(n->acc,
                             (acc_hash)acc_hash_parse(n->acc, cfg->password_hashing_module));
    /* NT hashes for NTLM logins: msrpc.ntlm_hashes, by default on with msrpc.auth = ntlm */
    acc_set_keep_nt_hashes(n->acc, cfg->msrpc_ntlm_hashes == 1 ||
                                       (cfg->msrpc_ntlm_hashes < 0 && !cfg->msrpc_auth_none));
    acc_set_loopback_user(n->acc, NULL, 0);
    for (size_t i = 0; i < cfg->n_loopback_users; i++)
        acc_set_loopback_user(n->acc, cfg->loopback_users[i], 1);
    if (getrandom(&n->boot_id, sizeof n->boot_id, 0) != (ssize_t)sizeof n->boot_id)
        n->boot_id = sl_now_ms() ^ (uint64_t)getpid() << 40;
    return n;
}

int node_open(sl_node *n, persist_options *po)
{
    const node_config *cfg = n->cfg;
    persist_options def = {0};
    if (!po)
        po = &def;
    po->segment_size = cfg->segment_size;
    po->acc = n->acc;
    po->sync_thread = 1;
    po->sync_pace_us = cfg->sync_pace_us;
    char err[512];
    n->store = persist_open(cfg->data_dir, n->qm, po, err, sizeof err);
    if (!n->store) {
        sl_error("store: %s", err);
        return -1;
    }
    if (node_access_init(n) < 0)
        return -1;
    /* What seeding wrote is on disk before anyone can log in. */
    node_commit(n, 0);
    node_reserve_first(n);
    if (node_watch_store(n) < 0)
        return -1;
    /* Slow password hashes (Argon2id) are checked on a thread of their own. Without it they
     * are checked on the loop, as fast ones are (each login then holds it up ~20 ms). */
    n->verifier = acc_verifier_new(VERIFY_MAX_PENDING);
    if (n->verifier) {
        n->verify_w.fd = acc_verifier_fd(n->verifier);
        n->verify_w.fn = on_verify_done;
        n->verify_w.data = n;
        if (sl_loop_watch(n->loop, &n->verify_w, SL_EV_READ) < 0) {
            acc_verifier_free(n->verifier);
            n->verifier = NULL;
        }
    }
    if (!n->verifier)
        sl_warn("access: no password-check thread (%s): Argon2id logins are checked on the "
                "event loop",
                strerror(errno));
    node_tidy_timer_start(n);
    sl_loop_set_before_sleep(n->loop, before_sleep, n);
    sl_timer_start(n->loop, &n->tick_timer, sl_now_ms() + TICK_MS);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    n->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (n->signal_fd >= 0) {
        n->signal_w.fd = n->signal_fd;
        n->signal_w.fn = on_signal;
        n->signal_w.data = n;
        sl_loop_watch(n->loop, &n->signal_w, SL_EV_READ);
    }
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

void node_run(sl_node *n)
{
    sl_loop_run(n->loop);
}

void node_free(sl_node *n)
{
    if (!n)
        return;
    for (size_t i = n->n_parts; i-- > 0;)
        if (n->parts[i].leave)
            n->parts[i].leave(n->parts[i].ctx);
    /* What purges and deletes left behind, at once: the graveyard still owes the MSMQ
     * acknowledgements of their paged messages (qm_node_reap), which need the links and the
     * store that go below. */
    qm_node_reap(n->qm, 0);
    node_reserve_drop(n);
    for (size_t i = n->n_parts; i-- > 0;)
        if (n->parts[i].stop)
            n->parts[i].stop(n->parts[i].ctx);
    if (n->verifier) { /* after the doors cancelled their checks */
        sl_loop_unwatch(n->loop, &n->verify_w);
        acc_verifier_free(n->verifier);
    }
    if (n->signal_fd >= 0)
        close(n->signal_fd);
    sl_timer_stop(n->loop, &n->tick_timer);
    node_unwatch_store(n);
    sl_tls_ctx_free(n->link_tls_ctx); /* after the links' streams */
    node_tidy_stop(n);
    /* The store lets go of the model first: freeing the model must not write records. */
    persist_close(n->store);
    for (size_t i = n->n_parts; i-- > 0;)
        if (n->parts[i].closed)
            n->parts[i].closed(n->parts[i].ctx);
    /* What still waited for the disk is on it now (persist_close committed); a door that
     * registered a callback (the HTTP API) has already been stopped. */
    sl_free(n->dwaiters);
    qm_node_free(n->qm);
    acc_free(n->acc);
    sl_loop_free(n->loop);
    sl_free(n);
}

void node_tls_opts(const struct node_tls_conf *t, sl_tls_opts *o)
{
    memset(o, 0, sizeof *o);
    o->cacertfile = t->cacertfile;
    o->certfile = t->certfile;
    o->keyfile = t->keyfile;
    o->key_password = t->password;
    o->verify_peer = t->verify_peer;
    o->fail_if_no_peer_cert = t->fail_if_no_peer_cert;
    o->depth = t->depth;
    o->versions = t->versions;
    o->ciphers = t->ciphers;
    o->ciphersuites = t->ciphersuites;
    o->honor_cipher_order = t->honor_cipher_order;
}
