/* repl.c - replication and ISR state machines (protocol and rules in repl.h).
 *
 * Invariants (checked by the simulator in tests/unit/test_cluster.c):
 * - l->commit never decreases, and l->released <= l->commit; released moves only while
 *   now < lease_until and the leader is not deposed.
 * - A peer's acked is what that node reported durable in its current session (a new session
 *   starts from what it reports then, which may be lower after a lost disk).
 * - peers[self] is unused: the leader's own disk is l->durable.
 * - The append-time ring holds (time, cumulative bytes) of groups last - RING + 1 .. last.
 */
#include "cluster/repl.h"

#include <string.h>

#include "core/mem.h"

/* ---- epoch history ---- */

void cl_repl_epochs_init(cl_repl_epochs *h)
{
    memset(h, 0, sizeof *h);
}

void cl_repl_epochs_free(cl_repl_epochs *h)
{
    sl_free(h->v);
    memset(h, 0, sizeof *h);
}

void cl_repl_epochs_note(cl_repl_epochs *h, uint64_t epoch, uint64_t idx)
{
    if (h->n && h->v[h->n - 1].epoch >= epoch)
        return; /* the same epoch goes on (an older one never comes after a newer) */
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 8;
        h->v = sl_xrealloc(h->v, h->cap * sizeof *h->v);
    }
    h->v[h->n++] = (cl_repl_epoch_start){epoch, idx};
}

void cl_repl_epochs_truncate(cl_repl_epochs *h, uint64_t last)
{
    while (h->n && h->v[h->n - 1].first > last)
        h->n--;
}

uint64_t cl_repl_epochs_last(const cl_repl_epochs *h)
{
    return h->n ? h->v[h->n - 1].epoch : 0;
}

uint64_t cl_repl_epochs_end(const cl_repl_epochs *h, uint64_t epoch, uint64_t last, uint64_t *found)
{
    size_t i = h->n;
    while (i && h->v[i - 1].epoch > epoch)
        i--;
    if (!i) {
        *found = 0;
        return 0;
    }
    *found = h->v[i - 1].epoch;
    return i < h->n ? h->v[i].first - 1 : last;
}

/* ---- leader ---- */

#define RING 4096u /* append times kept (for lag_ms and lag_bytes); see peer.behind_ms */

typedef struct peer {
    uint8_t connected;
    uint8_t started; /* the handshake's first ACK came: log_end is known */
    uint64_t session;
    uint64_t next;    /* next group to send */
    uint64_t log_end; /* written on the follower (as last reported) */
    uint64_t acked;   /* durable on the follower (as last reported) */
    uint64_t progress_ms;
    /* When group acked + 1 was appended (its lag counts from then). Taken from the ring when
     * acked moves; a follower so far behind that the group has left the ring keeps the older
     * time it had: its lag is then overstated, never understated, so a stuck follower always
     * leaves the ISR however fast groups come. */
    uint64_t behind_ms;
} peer;

struct cl_rl {
    int self;
    uint64_t epoch;
    cl_rl_options o;
    uint32_t isr, proposed;
    uint32_t forget; /* nodes to be proposed out of the ISR (cl_rl_forget), until etcd has it */
    int pending, deposed;
    uint64_t last, durable, commit, released;
    uint64_t lease_until;
    uint64_t sessions;
    cl_repl_epochs *hist;
    peer peers[CL_REPL_MAX_NODES];
    uint64_t *ring_ms, *ring_bytes; /* by idx % RING */
    uint64_t bytes;                 /* cumulative bytes appended since cl_rl_new */
    uint64_t base;                  /* the last group when this leader took over */
    uint64_t start_ms;              /* when it took over */
};

static int popcount32(uint32_t v)
{
    return __builtin_popcount(v);
}

cl_rl *cl_rl_new(int self, uint64_t epoch, uint32_t isr, const cl_rl_options *o, uint64_t last_idx,
                 cl_repl_epochs *h, uint64_t now_ms)
{
    cl_rl *l = sl_xcalloc(1, sizeof *l);
    l->self = self;
    l->epoch = epoch;
    l->o = *o;
    if (!l->o.window)
        l->o.window = 1024;
    if (!l->o.rto_ms)
        l->o.rto_ms = 200;
    l->isr = isr | (1u << self);
    l->last = l->durable = last_idx;
    /* What the log held when this leader took over is not confirmed by it: commit starts at
     * 0 and catches up as the ISR acks; the new epoch starts with the next group. */
    l->hist = h;
    l->base = last_idx;
    l->start_ms = now_ms;
    l->ring_ms = sl_xcalloc(RING, sizeof *l->ring_ms);
    l->ring_bytes = sl_xcalloc(RING, sizeof *l->ring_bytes);
    return l;
}

void cl_rl_free(cl_rl *l)
{
    if (!l)
        return;
    sl_free(l->ring_ms);
    sl_free(l->ring_bytes);
    sl_free(l);
}

static uint64_t ring_first(const cl_rl *l);
static uint64_t append_ms(const cl_rl *l, uint64_t idx);

static void set_acked(cl_rl *l, peer *p, uint64_t acked, int fresh)
{
    p->acked = acked;
    if (acked >= l->last)
        return; /* not behind: behind_ms is set when the next group comes (cl_rl_append) */
    uint64_t next = acked + 1;
    if (next <= l->base || next >= ring_first(l))
        p->behind_ms = append_ms(l, next);
    else if (fresh)
        p->behind_ms = l->start_ms; /* before anything in the ring: as old as can be */
}

static void recompute(cl_rl *l)
{
    uint32_t members = l->isr | (l->pending ? l->proposed : 0);
    if (popcount32(l->isr) < (int)l->o.min_isr)
        return;
    if (l->pending && popcount32(l->proposed) < (int)l->o.min_isr)
        return;
    uint64_t c = l->durable;
    for (int n = 0; n < CL_REPL_MAX_NODES; n++) {
        if (n == l->self || !(members & (1u << n)))
            continue;
        if (l->peers[n].acked < c)
            c = l->peers[n].acked;
    }
    if (c > l->commit)
        l->commit = c;
}

void cl_rl_append(cl_rl *l, uint64_t idx, uint64_t bytes, uint64_t now_ms)
{
    if (idx != l->last + 1)
        return; /* the caller's bug; the log's index is the truth */
    cl_repl_epochs_note(l->hist, l->epoch, idx);
    l->last = idx;
    l->bytes += bytes;
    l->ring_ms[idx % RING] = now_ms;
    l->ring_bytes[idx % RING] = l->bytes;
    for (int n = 0; n < CL_REPL_MAX_NODES; n++)
        if (l->peers[n].acked + 1 == idx)
            l->peers[n].behind_ms = now_ms; /* it was caught up until now */
}

void cl_rl_durable(cl_rl *l, uint64_t idx)
{
    if (idx > l->last)
        idx = l->last;
    if (idx > l->durable)
        l->durable = idx;
    recompute(l);
}

void cl_rl_hello(cl_rl *l, int node, uint64_t last_epoch, uint64_t last_idx, uint64_t now_ms,
                 cl_rl_start *out)
{
    uint64_t found;
    uint64_t end = cl_repl_epochs_end(l->hist, last_epoch, l->last, &found);
    peer *p = &l->peers[node];
    p->connected = 1;
    p->started = 0;
    p->session = ++l->sessions;
    p->progress_ms = now_ms;
    out->epoch = l->epoch;
    out->session = p->session;
    out->div_epoch = found;
    out->div_end = end;
    out->hello_epoch = last_epoch;
    out->hello_idx = last_idx;
}

void cl_rl_disconnect(cl_rl *l, int node)
{
    l->peers[node].connected = 0;
    l->peers[node].started = 0;
}

uint64_t cl_rl_session(const cl_rl *l, int node)
{
    return l->peers[node].connected ? l->peers[node].session : 0;
}

void cl_rl_ack(cl_rl *l, int node, uint64_t epoch, uint64_t session, uint64_t log_end,
               uint64_t durable, uint64_t now_ms)
{
    peer *p = &l->peers[node];
    if (!p->connected || epoch != l->epoch || session != p->session || node == l->self)
        return;
    if (log_end > l->last)
        log_end = l->last; /* cannot be: a follower only has what we sent */
    if (durable > log_end)
        durable = log_end;
    if (!p->started) {
        /* The handshake's ACK: the follower's log is a prefix of ours up to log_end. What it
         * had acked before counts only as far as it still has it. */
        p->started = 1;
        p->next = log_end + 1;
        p->log_end = log_end;
        set_acked(l, p, durable, 1);
        p->progress_ms = now_ms;
    } else {
        if (log_end + 1 < p->next && log_end >= p->log_end) {
            /* A gap: it is missing log_end + 1 (lost or reordered). Go back to it. */
            p->next = log_end + 1;
        }
        if (log_end > p->log_end || durable > p->acked)
            p->progress_ms = now_ms;
        if (log_end > p->log_end)
            p->log_end = log_end;
        if (durable > p->acked)
            set_acked(l, p, durable, 0);
    }
    recompute(l);
}

int cl_rl_next_send(cl_rl *l, int node, uint64_t now_ms, uint64_t *idx, uint64_t *session)
{
    peer *p = &l->peers[node];
    if (!p->connected || !p->started || l->deposed)
        return 0;
    if (p->next > p->log_end + 1 && p->log_end < l->last &&
        now_ms >= p->progress_ms + l->o.rto_ms) {
        /* Sent but nothing acked for a while: the groups (or the acks) were lost. */
        p->next = p->log_end + 1;
        p->progress_ms = now_ms;
    }
    if (p->next > l->last || p->next > p->log_end + l->o.window)
        return 0;
    *idx = p->next++;
    *session = p->session;
    return 1;
}

uint64_t cl_rl_commit(const cl_rl *l)
{
    return l->commit;
}

void cl_rl_lease(cl_rl *l, uint64_t valid_until_ms)
{
    if (valid_until_ms > l->lease_until)
        l->lease_until = valid_until_ms;
}

uint64_t cl_rl_release(cl_rl *l, uint64_t now_ms)
{
    /* Not while blocked either: commit may have been reached with a bigger ISR than there is
     * now, and a confirm promises min_insync_replicas copies in the ISR when it goes out. */
    if (!l->deposed && now_ms < l->lease_until && !cl_rl_blocked(l) && l->commit > l->released)
        l->released = l->commit;
    return l->released;
}

int cl_rl_blocked(const cl_rl *l)
{
    return popcount32(l->isr) < (int)l->o.min_isr ||
           (l->pending && popcount32(l->proposed) < (int)l->o.min_isr);
}

/* The oldest group still in the ring. */
static uint64_t ring_first(const cl_rl *l)
{
    uint64_t first = l->base + 1;
    if (l->last >= RING && l->last - RING + 1 > first)
        first = l->last - RING + 1;
    return first;
}

/* When group idx (> acked, <= last) was appended (groups from before this leader: when it
 * took over; groups older than the ring: the oldest in it, a lower bound). */
static uint64_t append_ms(const cl_rl *l, uint64_t idx)
{
    if (idx <= l->base)
        return l->start_ms;
    uint64_t first = ring_first(l);
    return l->ring_ms[(idx < first ? first : idx) % RING];
}

/* Bytes appended by this leader up to and including group idx. */
static uint64_t bytes_upto(const cl_rl *l, uint64_t idx)
{
    if (idx <= l->base)
        return 0;
    uint64_t first = ring_first(l);
    if (idx < first)
        return first > l->base + 1 ? l->ring_bytes[(first - 1) % RING] : 0;
    return l->ring_bytes[idx % RING];
}

static uint64_t lag_ms(const cl_rl *l, const peer *p, uint64_t now_ms)
{
    if (p->acked >= l->last)
        return 0;
    return now_ms > p->behind_ms ? now_ms - p->behind_ms : 0;
}

int cl_rl_isr_propose(cl_rl *l, uint64_t now_ms, uint32_t *proposal)
{
    if (l->pending || l->deposed)
        return 0;
    uint32_t want = l->isr & ~l->forget;
    for (int n = 0; n < CL_REPL_MAX_NODES; n++) {
        if (n == l->self || (l->forget & (1u << n)))
            continue;
        const peer *p = &l->peers[n];
        uint64_t lag = lag_ms(l, p, now_ms);
        if (l->isr & (1u << n)) {
            if (lag > l->o.lag_max_ms)
                want &= ~(1u << n);
        } else if (p->connected && p->started && p->acked >= l->commit && p->acked >= l->base &&
                   lag <= l->o.lag_max_ms / 2) {
            /* acked >= base too: a new leader's commit starts at 0, but groups up to base may
             * have been confirmed by the leaders before it (Kafka's rule: a follower joins
             * only once it has the leader's log from before its epoch). */
            want |= 1u << n;
        }
    }
    if (want == l->isr)
        return 0;
    l->pending = 1;
    l->proposed = want;
    *proposal = want;
    return 1;
}

void cl_rl_isr_result(cl_rl *l, int outcome)
{
    if (!l->pending)
        return;
    l->pending = 0;
    if (outcome == CL_RL_ISR_DONE) {
        l->isr = l->proposed;
        l->forget &= l->isr; /* those now out of the ISR in etcd are forgotten */
    } else if (outcome == CL_RL_ISR_DEPOSED)
        l->deposed = 1;
    recompute(l);
}

int cl_rl_forget(cl_rl *l, int node)
{
    if (node < 0 || node >= CL_REPL_MAX_NODES || node == l->self)
        return -1;
    uint32_t bit = 1u << node;
    cl_rl_disconnect(l, node);
    /* In the ISR (or about to be, by a pending admission): out through a proposal. Outside
     * both, nothing waits for it already. */
    if ((l->isr & bit) || (l->pending && (l->proposed & bit)))
        l->forget |= bit;
    return 0;
}

uint32_t cl_rl_forgetting(const cl_rl *l)
{
    return l->forget;
}

void cl_rl_depose(cl_rl *l)
{
    l->deposed = 1;
}

int cl_rl_deposed(const cl_rl *l)
{
    return l->deposed;
}

uint32_t cl_rl_isr(const cl_rl *l)
{
    return l->isr;
}

uint64_t cl_rl_epoch(const cl_rl *l)
{
    return l->epoch;
}

uint64_t cl_rl_last(const cl_rl *l)
{
    return l->last;
}

void cl_rl_peer(const cl_rl *l, int node, uint64_t now_ms, cl_rl_peer_info *out)
{
    const peer *p = &l->peers[node];
    memset(out, 0, sizeof *out);
    if (node == l->self) {
        out->connected = 1;
        out->acked = out->log_end = l->durable;
        return;
    }
    out->connected = p->connected && p->started;
    out->acked = p->acked;
    out->log_end = p->log_end;
    out->lag_ms = lag_ms(l, p, now_ms);
    out->lag_bytes = p->acked < l->last ? l->bytes - bytes_upto(l, p->acked) : 0;
}

/* ---- follower ---- */

struct cl_rf {
    int self;
    uint64_t seen_epoch; /* newest epoch seen: from etcd or a START */
    uint64_t epoch;      /* the epoch of the session being followed (0: none) */
    uint64_t session;
    uint64_t last, durable;
    cl_repl_epochs *hist;
};

cl_rf *cl_rf_new(int self, uint64_t last_idx, cl_repl_epochs *h)
{
    cl_rf *f = sl_xcalloc(1, sizeof *f);
    f->self = self;
    f->last = f->durable = last_idx;
    f->hist = h;
    f->seen_epoch = cl_repl_epochs_last(h);
    return f;
}

void cl_rf_free(cl_rf *f)
{
    sl_free(f);
}

void cl_rf_epoch_seen(cl_rf *f, uint64_t epoch)
{
    if (epoch > f->seen_epoch)
        f->seen_epoch = epoch;
    if (f->epoch && f->epoch < f->seen_epoch) {
        f->epoch = 0; /* the session's leader is deposed: follow it no further */
        f->session = 0;
    }
}

void cl_rf_hello(const cl_rf *f, uint64_t *last_epoch, uint64_t *last_idx)
{
    *last_epoch = cl_repl_epochs_last(f->hist);
    *last_idx = f->last;
}

int cl_rf_start(cl_rf *f, const cl_rl_start *st, uint64_t *truncate_to)
{
    uint64_t epoch = st->epoch, div_epoch = st->div_epoch, div_end = st->div_end;
    if (epoch < f->seen_epoch || epoch == 0)
        return CL_RF_REJECT;
    if (st->hello_epoch != cl_repl_epochs_last(f->hist) || st->hello_idx != f->last)
        return CL_RF_IGNORE;
    /* A leader numbers its sessions upwards and answers only its newest: an older START
     * arriving late would leave the two on different sessions. */
    if (epoch == f->epoch && st->session <= f->session)
        return CL_RF_REJECT;
    uint64_t session = st->session;
    f->seen_epoch = epoch;
    f->epoch = epoch;
    f->session = session;
    uint64_t found;
    uint64_t mine = cl_repl_epochs_end(f->hist, div_epoch, f->last, &found);
    if (div_epoch == 0)
        mine = 0;
    uint64_t keep = mine < div_end ? mine : div_end;
    if (keep > f->last)
        keep = f->last;
    if (keep < f->last) {
        cl_repl_epochs_truncate(f->hist, keep);
        f->last = keep;
        if (f->durable > keep)
            f->durable = keep;
    }
    *truncate_to = keep;
    return CL_RF_OK;
}

int cl_rf_data(cl_rf *f, uint64_t epoch, uint64_t session, uint64_t idx, uint64_t group_epoch)
{
    if (!f->session || epoch != f->epoch || session != f->session || group_epoch > f->epoch)
        return CL_RF_IGNORE;
    if (idx <= f->last)
        return CL_RF_IGNORE;
    if (idx > f->last + 1)
        return CL_RF_GAP;
    cl_repl_epochs_note(f->hist, group_epoch, idx);
    f->last = idx;
    return CL_RF_APPEND;
}

void cl_rf_durable(cl_rf *f, uint64_t idx)
{
    if (idx > f->last)
        idx = f->last;
    if (idx > f->durable)
        f->durable = idx;
}

int cl_rf_current(const cl_rf *f, uint64_t epoch, uint64_t session)
{
    return f->session && epoch == f->epoch && session == f->session;
}

void cl_rf_ack_fields(const cl_rf *f, uint64_t *epoch, uint64_t *session, uint64_t *log_end,
                      uint64_t *durable)
{
    *epoch = f->epoch;
    *session = f->session;
    *log_end = f->last;
    *durable = f->durable;
}

uint64_t cl_rf_last(const cl_rf *f)
{
    return f->last;
}

uint64_t cl_rf_durable_idx(const cl_rf *f)
{
    return f->durable;
}

uint64_t cl_rf_epoch(const cl_rf *f)
{
    return f->epoch;
}
