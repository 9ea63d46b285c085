/* repl.h - the replication protocol and the in-sync replica (ISR) rules, as state machines
 * without sockets, disks or clocks (issue 31, DESIGN.md section 10). The I/O around them (the
 * replication port, the store, the etcd thread) feeds them events and carries out what they
 * say; tests/unit/test_cluster.c runs them under a seeded simulator that drops, delays,
 * reorders and restarts.
 *
 * The log. Every record group the leader commits (one group commit: the meta and msgs bytes
 * of one generation) gets the next index 1, 2, 3 ... and carries the epoch of the leader that
 * made it. Indexes are never reused within a log; a follower's log is a prefix of its leader's
 * (after the handshake below cut any divergent tail). A log's epoch history (cl_repl_epochs) is
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
 * index reaches their group: cl_rl_release moves it to commit only while the leader's lease is
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
 * truncated only above what it has. L may send a group before its own sync of it is done (the
 * wiring does: issue 46, cluster/mirror.h), since commit takes L's durable index as well: a
 * group a follower holds and L's disk lost (L crashed between the two) was never released; it
 * is one more unconfirmed group, kept if its holder leads next, cut by START's divergence rule
 * otherwise, and L itself, restarted, first takes a full copy (cluster/node.h, replica/led).
 */
#ifndef SL_CLUSTER_REPL_H
#define SL_CLUSTER_REPL_H

#include <stddef.h>
#include <stdint.h>

#define CL_REPL_MAX_NODES 16 /* node ids 0..15: ISR sets are bit masks */

/* ---- epoch history of a log ---- */
typedef struct cl_repl_epoch_start {
    uint64_t epoch, first; /* groups first .. (next entry's first - 1) have this epoch */
} cl_repl_epoch_start;

typedef struct cl_repl_epochs {
    cl_repl_epoch_start *v;
    size_t n, cap;
} cl_repl_epochs;

void cl_repl_epochs_init(cl_repl_epochs *h);
void cl_repl_epochs_free(cl_repl_epochs *h);
/* Group idx (the log's next) was made in epoch: notes a new epoch's start. */
void cl_repl_epochs_note(cl_repl_epochs *h, uint64_t epoch, uint64_t idx);
/* Forget every group above last (truncation). */
void cl_repl_epochs_truncate(cl_repl_epochs *h, uint64_t last);
/* The epoch of the log's last group (0: empty log). */
uint64_t cl_repl_epochs_last(const cl_repl_epochs *h);
/* In a log whose last group is `last`: the newest epoch <= epoch it holds (*found, 0 when
 * none) and the index of its last group (0 when none). */
uint64_t cl_repl_epochs_end(const cl_repl_epochs *h, uint64_t epoch, uint64_t last,
                            uint64_t *found);

/* ---- leader ---- */
typedef struct cl_rl_options {
    uint32_t min_isr;    /* cluster.min_insync_replicas, the leader counts */
    uint32_t lag_max_ms; /* an ISR member lagging longer is proposed for removal */
    uint32_t window;     /* groups sent ahead of a follower's written log end */
    uint32_t rto_ms;     /* no ack progress this long with groups outstanding: resend */
} cl_rl_options;

typedef struct cl_rl cl_rl;

/* A leader of `epoch` over a log whose last group is last_idx (all durable: a leader starts
 * from a recovered store), history h (shared with the log: rl notes its own epoch in it),
 * with the ISR read from etcd (must include self). */
cl_rl *cl_rl_new(int self, uint64_t epoch, uint32_t isr, const cl_rl_options *o, uint64_t last_idx,
                 cl_repl_epochs *h, uint64_t now_ms);
void cl_rl_free(cl_rl *l);

/* The leader appended group idx (== last + 1) of `bytes` bytes at time now_ms. */
void cl_rl_append(cl_rl *l, uint64_t idx, uint64_t bytes, uint64_t now_ms);
/* Its own fdatasync covered everything up to idx. */
void cl_rl_durable(cl_rl *l, uint64_t idx);

/* HELLO from node: fills the START to send (session, div_epoch, div_end). */
typedef struct cl_rl_start {
    uint64_t epoch, session, div_epoch, div_end;
    uint64_t hello_epoch, hello_idx; /* the HELLO answered */
} cl_rl_start;
void cl_rl_hello(cl_rl *l, int node, uint64_t last_epoch, uint64_t last_idx, uint64_t now_ms,
                 cl_rl_start *out);
void cl_rl_disconnect(cl_rl *l, int node);
/* The session node is in (0: none), for the PING the leader sends every follower now and
 * then: PING(epoch, session). A follower that hears neither DATA nor PING of its own session
 * for a while sends a new HELLO (its START, or the leader's answer, was lost). */
uint64_t cl_rl_session(const cl_rl *l, int node);
/* ACK from node. Other epochs' and stale sessions' are ignored. */
void cl_rl_ack(cl_rl *l, int node, uint64_t epoch, uint64_t session, uint64_t log_end,
               uint64_t durable, uint64_t now_ms);
/* The next group to send to node: 1 and *idx (and *session) when one is due (within the
 * window, after the handshake's first ACK); 0 when nothing is. Call until 0. */
int cl_rl_next_send(cl_rl *l, int node, uint64_t now_ms, uint64_t *idx, uint64_t *session);

/* The commit index (see above); never decreases. */
uint64_t cl_rl_commit(const cl_rl *l);
/* The lease is surely valid until valid_until_ms (the time the renewal was SENT plus the TTL,
 * less a margin: etcd counts from when it received it). */
void cl_rl_lease(cl_rl *l, uint64_t valid_until_ms);
/* Released index: what confirms may go out for now (0 .. commit). Frozen once the lease may
 * have run out or the leader was deposed. */
uint64_t cl_rl_release(cl_rl *l, uint64_t now_ms);
/* 1 when the ISR (or a pending new one) is below min_isr: publishers are blocked. */
int cl_rl_blocked(const cl_rl *l);

/* ISR: 1 and *proposal when a change should be written to etcd (the caller then reports the
 * outcome with cl_rl_isr_result). */
int cl_rl_isr_propose(cl_rl *l, uint64_t now_ms, uint32_t *proposal);
/* The proposal's transaction: CL_RL_ISR_DONE (etcd holds it), CL_RL_ISR_RETRY (etcd could not be
 * asked: the old set stays) or CL_RL_ISR_DEPOSED (the epoch in etcd is not ours). */
enum { CL_RL_ISR_DONE, CL_RL_ISR_RETRY, CL_RL_ISR_DEPOSED };
void cl_rl_isr_result(cl_rl *l, int outcome);
/* Forget a member (DELETE /api/cluster/nodes/NAME, RabbitMQ's forget_cluster_node): it is
 * disconnected (its session's acks no longer count) and, when it is in the ISR, proposed out of
 * it through the usual one-at-a-time proposal (after a pending one). Until etcd holds the ISR
 * without it, commit keeps waiting for it as for any member of the old set (a group in flight
 * to it is not committed without it: were the leader to die now, etcd's ISR still names it and
 * it could lead); once the proposal is DONE, commit no longer waits for it. A proposal that
 * RETRYs is proposed again. It may come back as any follower does (HELLO, catch up, admitted):
 * forgetting is not banning. -1 for the leader itself or an unknown id, else 0. */
int cl_rl_forget(cl_rl *l, int node);
/* The nodes (bit mask) forgotten whose removal from the ISR etcd does not hold yet. */
uint32_t cl_rl_forgetting(const cl_rl *l);
/* The leader lost its key (lease expired, a newer epoch seen): it never releases again. */
void cl_rl_depose(cl_rl *l);
int cl_rl_deposed(const cl_rl *l);

uint32_t cl_rl_isr(const cl_rl *l);
uint64_t cl_rl_epoch(const cl_rl *l);
uint64_t cl_rl_last(const cl_rl *l);
/* A follower's standing, for GET /api/cluster and /metrics. */
typedef struct cl_rl_peer_info {
    int connected;
    uint64_t acked, log_end;
    uint64_t lag_bytes, lag_ms;
} cl_rl_peer_info;
void cl_rl_peer(const cl_rl *l, int node, uint64_t now_ms, cl_rl_peer_info *out);

/* ---- follower ---- */
typedef struct cl_rf cl_rf;

/* A follower over a recovered log whose last group is last_idx, all durable, history h. */
cl_rf *cl_rf_new(int self, uint64_t last_idx, cl_repl_epochs *h);
void cl_rf_free(cl_rf *f);
/* The newest epoch this node has seen (from etcd): older leaders are refused from now on. */
void cl_rf_epoch_seen(cl_rf *f, uint64_t epoch);
/* A new connection: the HELLO to send. */
void cl_rf_hello(const cl_rf *f, uint64_t *last_epoch, uint64_t *last_idx);
/* START: CL_RF_OK and *truncate_to (the caller cuts its log above it when it is below the last
 * group; then sends the ACK from cl_rf_ack_fields), CL_RF_REJECT (a stale epoch) or CL_RF_IGNORE
 * (it answers a HELLO that no longer describes this log: the caller sends a new HELLO, since the
 * leader has moved to the session of that START). */
enum { CL_RF_OK, CL_RF_REJECT, CL_RF_APPEND, CL_RF_IGNORE, CL_RF_GAP };
int cl_rf_start(cl_rf *f, const cl_rl_start *st, uint64_t *truncate_to);
/* DATA: CL_RF_APPEND (the caller writes the group, then syncs it and calls cl_rf_durable),
 * CL_RF_IGNORE (stale session or epoch, or a group already had), or CL_RF_GAP (a group is missing
 * before it: the caller sends an ACK so the leader goes back). */
int cl_rf_data(cl_rf *f, uint64_t epoch, uint64_t session, uint64_t idx, uint64_t group_epoch);
/* Everything up to idx is on disk. */
void cl_rf_durable(cl_rf *f, uint64_t idx);
/* A PING (or DATA) of (epoch, session): 1 when it is the session followed. */
int cl_rf_current(const cl_rf *f, uint64_t epoch, uint64_t session);
void cl_rf_ack_fields(const cl_rf *f, uint64_t *epoch, uint64_t *session, uint64_t *log_end,
                      uint64_t *durable);
uint64_t cl_rf_last(const cl_rf *f);
uint64_t cl_rf_durable_idx(const cl_rf *f);
uint64_t cl_rf_epoch(const cl_rf *f);

#endif
