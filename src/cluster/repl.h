/* repl.h - the replication protocol and the in-sync replica (ISR) rules, as state machines
 * without sockets, disks or clocks (issue 31, DESIGN.md section 10). The I/O around them (the
 * replication port, the store, the etcd thread) feeds them events and carries out what they
 * say; tests/unit/test_cluster.c runs them under a seeded simulator that drops, delays,
 * reorders and restarts.
 *
 * The log. Every record group the leader commits (one group commit: the meta and msgs bytes
 * of one generation) gets the next index 1, 2, 3 ... and carries the epoch of the leader that
 * made it. Indexes are never reused within a log; a follower's log is a prefix of its leader's
 * (after the handshake below cut any divergent tail). A log's epoch history (repl_epochs) is
 * the list of (epoch, first index of that epoch), so the end of any epoch in the log is known
 * (Kafka's leader epoch cache).
 *
 * Handshake (a follower connects, or reconnects after any loss):
 *   F -> L  HELLO(last_epoch, last_idx)            the epoch and index of F's last group
 *   L -> F  START(epoch, session, div_epoch, div_end, last_epoch, last_idx)
 *           (echoing the HELLO it answers: F takes only the answer to its current state, so
 *           a START that answers an older HELLO can never make it cut what it since acked)
 *           div_epoch: the newest epoch <= last_epoch in L's log, div_end: where it ends in L's
 *   F       truncates its log to min(F's end of div_epoch, div_end): what remains is a prefix
 *           of L's log (both got each epoch's groups from that epoch's one leader)
 *   F -> L  ACK(epoch, session, log_end, durable)  (also sent again now and then: idempotent)
 * Streaming: L -> F DATA(epoch, session, idx, group_epoch, bytes) for idx = log_end + 1 ...; F
 * takes a group only if it is the next one (else it answers with an ACK naming its log_end, and L
 * goes back to it: go-back-N, so loss and reordering only cost resends); F acks after the group is
 * on its disk (fdatasync): ACK(epoch, session, log_end, durable) (sessions are numbered per
 * leader, so the epoch says whose). A START or DATA of an epoch older
 * than the newest F has seen is refused: a deposed leader cannot move a follower.
 *
 * Commit. commit = min(L's own durable index, the durable index acked by every ISR member)
 * and, while a change of the ISR is being written to etcd, by every member of the old and the
 * new set; it never moves while either set has fewer than min_insync_replicas members (the
 * leader counts). Confirms (and every reply that promises the disk) wait until the released
 * index reaches their group: rl_release moves it to commit only while the leader's lease is
 * still surely valid, and never after the leader was deposed.
 *
 * ISR. A follower's lag_ms is the age of the oldest group it has not acked. An ISR member
 * lagging more than lag_max_ms is proposed for removal; a follower outside it that has acked
 * at least commit and lags at most lag_max_ms / 2 is proposed for admission. A proposal is an
 * etcd transaction comparing the leader's epoch (the wiring's job): when it fails because the
 * epoch moved, the leader is deposed. One proposal at a time.
 *
 * Why nothing confirmed is lost: a group is released only once it is on the disk of every
 * member of the ISR in etcd; the ISR changes only through the leader of the current epoch; a
 * new leader is taken from the ISR; so it has every released group, and its followers are
 * truncated only above what it has.
 */
#ifndef SL_CLUSTER_REPL_H
#define SL_CLUSTER_REPL_H

#include <stddef.h>
#include <stdint.h>

#define REPL_MAX_NODES 16 /* node ids 0..15: ISR sets are bit masks */

/* ---- epoch history of a log ---- */
typedef struct repl_epoch_start {
    uint64_t epoch, first; /* groups first .. (next entry's first - 1) have this epoch */
} repl_epoch_start;

typedef struct repl_epochs {
    repl_epoch_start *v;
    size_t n, cap;
} repl_epochs;

void repl_epochs_init(repl_epochs *h);
void repl_epochs_free(repl_epochs *h);
/* Group idx (the log's next) was made in epoch: notes a new epoch's start. */
void repl_epochs_note(repl_epochs *h, uint64_t epoch, uint64_t idx);
/* Forget every group above last (truncation). */
void repl_epochs_truncate(repl_epochs *h, uint64_t last);
/* The epoch of the log's last group (0: empty log). */
uint64_t repl_epochs_last(const repl_epochs *h);
/* In a log whose last group is `last`: the newest epoch <= epoch it holds (*found, 0 when
 * none) and the index of its last group (0 when none). */
uint64_t repl_epochs_end(const repl_epochs *h, uint64_t epoch, uint64_t last, uint64_t *found);

/* ---- leader ---- */
typedef struct rl_options {
    uint32_t min_isr;    /* cluster.min_insync_replicas, the leader counts */
    uint32_t lag_max_ms; /* an ISR member lagging longer is proposed for removal */
    uint32_t window;     /* groups sent ahead of a follower's written log end */
    uint32_t rto_ms;     /* no ack progress this long with groups outstanding: resend */
} rl_options;

typedef struct rl rl;

/* A leader of `epoch` over a log whose last group is last_idx (all durable: a leader starts
 * from a recovered store), history h (shared with the log: rl notes its own epoch in it),
 * with the ISR read from etcd (must include self). */
rl *rl_new(int self, uint64_t epoch, uint32_t isr, const rl_options *o, uint64_t last_idx,
           repl_epochs *h, uint64_t now_ms);
void rl_free(rl *l);

/* The leader appended group idx (== last + 1) of `bytes` bytes at time now_ms. */
void rl_append(rl *l, uint64_t idx, uint64_t bytes, uint64_t now_ms);
/* Its own fdatasync covered everything up to idx. */
void rl_durable(rl *l, uint64_t idx);

/* HELLO from node: fills the START to send (session, div_epoch, div_end). */
typedef struct rl_start {
    uint64_t epoch, session, div_epoch, div_end;
    uint64_t hello_epoch, hello_idx; /* the HELLO answered */
} rl_start;
void rl_hello(rl *l, int node, uint64_t last_epoch, uint64_t last_idx, uint64_t now_ms,
              rl_start *out);
void rl_disconnect(rl *l, int node);
/* The session node is in (0: none), for the PING the leader sends every follower now and
 * then: PING(epoch, session). A follower that hears neither DATA nor PING of its own session
 * for a while sends a new HELLO (its START, or the leader's answer, was lost). */
uint64_t rl_session(const rl *l, int node);
/* ACK from node. Other epochs' and stale sessions' are ignored. */
void rl_ack(rl *l, int node, uint64_t epoch, uint64_t session, uint64_t log_end, uint64_t durable,
            uint64_t now_ms);
/* The next group to send to node: 1 and *idx (and *session) when one is due (within the
 * window, after the handshake's first ACK); 0 when nothing is. Call until 0. */
int rl_next_send(rl *l, int node, uint64_t now_ms, uint64_t *idx, uint64_t *session);

/* The commit index (see above); never decreases. */
uint64_t rl_commit(const rl *l);
/* The lease is surely valid until valid_until_ms (the time the renewal was SENT plus the TTL,
 * less a margin: etcd counts from when it received it). */
void rl_lease(rl *l, uint64_t valid_until_ms);
/* Released index: what confirms may go out for now (0 .. commit). Frozen once the lease may
 * have run out or the leader was deposed. */
uint64_t rl_release(rl *l, uint64_t now_ms);
/* 1 when the ISR (or a pending new one) is below min_isr: publishers are blocked. */
int rl_blocked(const rl *l);

/* ISR: 1 and *proposal when a change should be written to etcd (the caller then reports the
 * outcome with rl_isr_result). */
int rl_isr_propose(rl *l, uint64_t now_ms, uint32_t *proposal);
/* The proposal's transaction: RL_ISR_DONE (etcd holds it), RL_ISR_RETRY (etcd could not be
 * asked: the old set stays) or RL_ISR_DEPOSED (the epoch in etcd is not ours). */
enum { RL_ISR_DONE, RL_ISR_RETRY, RL_ISR_DEPOSED };
void rl_isr_result(rl *l, int outcome);
/* Forget a member (DELETE /api/cluster/nodes/NAME, RabbitMQ's forget_cluster_node): it is
 * disconnected (its session's acks no longer count) and, when it is in the ISR, proposed out of
 * it through the usual one-at-a-time proposal (after a pending one). Until etcd holds the ISR
 * without it, commit keeps waiting for it as for any member of the old set (a group in flight
 * to it is not committed without it: were the leader to die now, etcd's ISR still names it and
 * it could lead); once the proposal is DONE, commit no longer waits for it. A proposal that
 * RETRYs is proposed again. It may come back as any follower does (HELLO, catch up, admitted):
 * forgetting is not banning. -1 for the leader itself or an unknown id, else 0. */
int rl_forget(rl *l, int node);
/* The nodes (bit mask) forgotten whose removal from the ISR etcd does not hold yet. */
uint32_t rl_forgetting(const rl *l);
/* The leader lost its key (lease expired, a newer epoch seen): it never releases again. */
void rl_depose(rl *l);
int rl_deposed(const rl *l);

uint32_t rl_isr(const rl *l);
uint64_t rl_epoch(const rl *l);
uint64_t rl_last(const rl *l);
/* A follower's standing, for GET /api/cluster and /metrics. */
typedef struct rl_peer_info {
    int connected;
    uint64_t acked, log_end;
    uint64_t lag_bytes, lag_ms;
} rl_peer_info;
void rl_peer(const rl *l, int node, uint64_t now_ms, rl_peer_info *out);

/* ---- follower ---- */
typedef struct rf rf;

/* A follower over a recovered log whose last group is last_idx, all durable, history h. */
rf *rf_new(int self, uint64_t last_idx, repl_epochs *h);
void rf_free(rf *f);
/* The newest epoch this node has seen (from etcd): older leaders are refused from now on. */
void rf_epoch_seen(rf *f, uint64_t epoch);
/* A new connection: the HELLO to send. */
void rf_hello(const rf *f, uint64_t *last_epoch, uint64_t *last_idx);
/* START: RF_OK and *truncate_to (the caller cuts its log above it when it is below the last
 * group; then sends the ACK from rf_ack_fields), RF_REJECT (a stale epoch) or RF_IGNORE (it
 * answers a HELLO that no longer describes this log: the caller sends a new HELLO, since the
 * leader has moved to the session of that START). */
enum { RF_OK, RF_REJECT, RF_APPEND, RF_IGNORE, RF_GAP };
int rf_start(rf *f, const rl_start *st, uint64_t *truncate_to);
/* DATA: RF_APPEND (the caller writes the group, then syncs it and calls rf_durable),
 * RF_IGNORE (stale session or epoch, or a group already had), or RF_GAP (a group is missing
 * before it: the caller sends an ACK so the leader goes back). */
int rf_data(rf *f, uint64_t epoch, uint64_t session, uint64_t idx, uint64_t group_epoch);
/* Everything up to idx is on disk. */
void rf_durable(rf *f, uint64_t idx);
/* A PING (or DATA) of (epoch, session): 1 when it is the session followed. */
int rf_current(const rf *f, uint64_t epoch, uint64_t session);
void rf_ack_fields(const rf *f, uint64_t *epoch, uint64_t *session, uint64_t *log_end,
                   uint64_t *durable);
uint64_t rf_last(const rf *f);
uint64_t rf_durable_idx(const rf *f);
uint64_t rf_epoch(const rf *f);

#endif
