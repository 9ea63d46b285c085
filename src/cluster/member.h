/* member.h - this node's membership of a cluster on etcd (issue 31): a thread of its own that
 * holds the node's etcd lease, campaigns for the leader key, renews it, steps down before it
 * can expire, and keeps a snapshot of the cluster for the event loop (GET /api/cluster, the
 * refusal of clients on followers).
 *
 * etcd keys, under /PREFIX/CLUSTER/ (cluster_formation.etcd.key_prefix, .cluster_name):
 *   leader        {"node","epoch","amqp","http","replication"}, under the leader's lease
 *   epoch         the last epoch taken (decimal; no lease: it only grows)
 *   isr           ["node", ...]: the in-sync replicas (no lease)
 *   nodes/NAME    {"name","amqp","http","replication","last_epoch","last_idx"}, under the
 *                 node's lease (membership: gone when the node is)
 *   handover      {"node","epoch","from"}: a step-down's heir (cl_member_handover; no lease,
 *                 stale once the epoch moves past it)
 *   members/NAME  {"name","amqp","http"}: every node that ever registered, until an operator
 *                 removes it (no lease: GET /api/nodes lists a dead member, running false)
 *   stats/NAME    the node's /api/nodes figures (figures.h) and "measured_at" (wall ms), under
 *                 the node's lease (a dead member's vanish with it); put every
 *                 CL_FIGURES_PERIOD_MS by each node, read by the leader as often
 *   banned/NAME   {"node","at"}: removed by an operator (cl_member_forget), no lease: the node
 *                 does not register, campaign or follow, and the leader refuses its HELLO,
 *                 until it is readmitted (cl_member_readmit deletes the key)
 * Taking the leader key is one transaction: leader absent (create_revision 0) and epoch
 * unchanged since read (mod_revision) -> put leader (with the lease), epoch + 1, and the ISR
 * [self] when there is none yet (a new cluster). Only an ISR member (or anyone, when there is
 * no ISR) campaigns; among the live ISR members the one with the longest log (last_epoch,
 * last_idx; then the smallest name) goes first, the others a round later.
 *
 * Renewal: a keepalive every lease_ttl / 4. The lease is taken as valid until the time the
 * keepalive was SENT plus the TTL etcd answered (etcd counts from when it got it, later); the
 * node stops being leader lease_ttl / 4 before that (each etcd call is bounded by lease_ttl / 4
 * too), so it has stopped serving before the key can expire and another node take it.
 * A follower that finds a dead leader's replication port refused revokes its lease sooner
 * (cl_member_leader_lost, issue 46): then the old leader, if alive after all, may still
 * believe it leads for a while, and what keeps it from confirming anything the new leader
 * lacks is the ISR rule, not time (docs/cluster.md "A dead process is noticed at once").
 *
 * Threads: everything here runs on the member's thread except the functions marked (loop),
 * which take a mutex for a copy of the state. The loop learns of a change of role from
 * cl_member_fd (readable; cl_member_take_event clears it).
 */
#ifndef SL_CLUSTER_MEMBER_H
#define SL_CLUSTER_MEMBER_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/conf.h"

#define CL_MAX_MEMBERS 16

enum { CL_ROLE_JOINING, CL_ROLE_FOLLOWER, CL_ROLE_LEADER };

typedef struct cl_node_info {
    char name[256];
    char amqp[280], http[280], replication[280];
    int insync;
    uint64_t last_epoch, last_idx; /* its log's position, as it published it */
} cl_node_info;

typedef struct cl_status {
    int role;
    uint64_t epoch;   /* the epoch of the leader key seen last (0: none) */
    char leader[256]; /* "" when there is none */
    char leader_amqp[280];
    cl_node_info nodes[CL_MAX_MEMBERS];
    size_t n_nodes;
    char last_error[256]; /* the last etcd failure, for the log and the API */
    int banned;           /* this node was removed by an operator (banned/NAME): it waits */
} cl_status;

/* What the leader read of every member (cl_member_members): known in etcd (members/NAME, or
 * registered), running (nodes/NAME: its lease is alive), and its published figures. */
#define CL_FIGURES_MAX 2048
#define CL_FIGURES_PERIOD_MS 2000
typedef struct cl_member_fig {
    char name[256];
    int running;
    char figures[CL_FIGURES_MAX]; /* stats/NAME's JSON object; "" none */
} cl_member_fig;

typedef struct cl_member cl_member;

/* The election's rule, on what etcd holds with the leader key gone: campaign now (1) or not
 * (0). Only an ISR member campaigns (any node when etcd has no ISR yet). The first of the ISR
 * members that are registered (nodes/NAME: alive, for their registration goes with their
 * lease), ordered by log (last_epoch, then last_idx, as each published it; then the smaller
 * name), goes at once; the others wait CL_WAIT_FIRST_MS from the moment this node saw the
 * key gone (absent_ms ago) for it to take the key, then go too (it may be dead with its lease
 * not expired yet). etcd's transaction makes sure that only one wins. */
#define CL_WAIT_FIRST_MS 500
int cl_should_campaign(const char *self, const cl_node_info *nodes, size_t n_nodes, char isr[][256],
                       size_t n_isr, int isr_exists, uint64_t absent_ms);

typedef struct cl_member_opts {
    const cl_conf *conf;
    const char *node_name;
    const char *bind;      /* address the replication port listens on */
    const char *advertise; /* address peers and clients are told */
    int amqp_port, http_port;
    uint64_t last_epoch, last_idx; /* this node's log (replica state) at start */
} cl_member_opts;

/* Called on the member's thread, under its lock (so cl_member_set_hooks(NULL) returns only
 * once no hook runs; a hook must not call back into the member). lease: a leader's lease is surely
 * valid until then (CLOCK_MONOTONIC ms, the step-down margin already taken off): cl_rl_lease.
 * isr_done: the outcome (CL_RL_ISR_DONE / RETRY / DEPOSED) of cl_member_isr_propose. */
typedef struct cl_member_hooks {
    void *ctx;
    void (*lease)(void *ctx, uint64_t valid_until_ms);
    void (*isr_done)(void *ctx, int outcome);
} cl_member_hooks;

/* Bind the replication port (logs "listening replication=ADDR:PORT") and start the thread.
 * NULL with err on failure. */
cl_member *cl_member_start(const cl_member_opts *o, char *err, size_t errlen);
/* Stop the thread; a leader gives its key back first (lease revoked) for a quick failover. */
void cl_member_stop(cl_member *m);
int cl_member_fd(const cl_member *m);                /* (loop) */
void cl_member_take_event(cl_member *m);             /* (loop) */
void cl_member_status(cl_member *m, cl_status *out); /* (loop) */
/* (loop) 1 while this node is the leader and its lease surely valid. */
int cl_member_serving(cl_member *m);
int cl_member_replication_port(const cl_member *m);
/* Any thread. The hooks (NULL: none); the log position published in nodes/NAME (at the
 * thread's next round) and used for the order of candidates. */
void cl_member_set_hooks(cl_member *m, const cl_member_hooks *h);
void cl_member_set_log(cl_member *m, uint64_t last_epoch, uint64_t last_idx);
/* Any thread (the follower's stream client, issue 46): the established stream from the
 * leader at addr ("HOST:PORT") ended (EOF, a reset). The member thread, at once: if etcd's
 * leader key still names addr as its replication address and this node is in the ISR, it
 * probes addr (probe.h); refused twice in a row, the leader's process is gone, and it revokes
 * the leader's lease by id (logged "cluster: leader NAME's replication port ADDR refused
 * twice ...: revoking its lease ..."), so the key goes and the election starts without
 * waiting for the lease. Also: a node that finds the leader key naming itself under another
 * lease than its own (an earlier process of it died leading) revokes that lease. */
void cl_member_leader_lost(cl_member *m, const char *addr);
/* A leader's ISR change: one etcd transaction that writes isr = names only if the leader key
 * is still ours (its create_revision) and epoch still ours, so a deposed leader can never
 * change the ISR. The outcome goes to hooks.isr_done (DEPOSED also steps down). */
void cl_member_isr_propose(cl_member *m, const char *const *names, size_t n);
/* Hand the replication port's socket over (the leader's stream serves it from now on); the
 * member no longer answers it. -1 when already taken. */
int cl_member_take_listen(cl_member *m);
/* Operator actions (any thread; one of each kind at a time, a new one replaces one not yet
 * begun). Each returns a ticket; *_state(ticket) is 0 while it runs, 1 done, -1 failed (err).
 * cl_member_handover (a leader's step-down): writes `handover` = {"node": heir, "epoch": E,
 * "from": self} in one transaction comparing the leader key's create_revision and the epoch,
 * then steps down (lease revoked: the key goes). Every other node honours the key while etcd's
 * epoch is still E and for at most one lease_ttl after it first saw it: it does not campaign,
 * and the heir campaigns at once. Fails, still leading, when etcd cannot be asked.
 * cl_member_forget: puts banned/NAME first (so the node, finding its registration gone, finds
 * the ban too), then deletes nodes/NAME, members/NAME and stats/NAME and reads the view again
 * (cl_member_status).
 * cl_member_readmit: deletes banned/NAME; its state is -2 when there was no such ban. */
uint64_t cl_member_handover(cl_member *m, const char *heir);
int cl_member_handover_state(cl_member *m, uint64_t ticket, char *err, size_t errlen);
uint64_t cl_member_forget(cl_member *m, const char *name);
int cl_member_forget_state(cl_member *m, uint64_t ticket, char *err, size_t errlen);
uint64_t cl_member_readmit(cl_member *m, const char *name);
int cl_member_readmit_state(cl_member *m, uint64_t ticket, char *err, size_t errlen);

/* Bans, any thread. A leader holds etcd's banned/ (read when it wins the key and every
 * CL_FIGURES_PERIOD_MS) plus the names an operator is removing right now (ban_local, until the
 * removal is written or unban_local): the replication server refuses their HELLO. */
int cl_member_is_banned(cl_member *m, const char *name);
size_t cl_member_bans(cl_member *m, char out[][256], size_t max);
/* Any thread: name is a member registered in etcd as this node last read it (members/NAME,
 * read every CL_FIGURES_PERIOD_MS on the leader, or nodes/NAME, every 250 ms): the replication
 * server takes a HELLO from no one else (stream.h). */
int cl_member_is_member(cl_member *m, const char *name);
void cl_member_ban_local(cl_member *m, const char *name);
void cl_member_unban_local(cl_member *m, const char *name);

/* Any thread: this node's figures (a JSON object, figures.h) for stats/NAME; the member thread
 * puts the latest at most every CL_FIGURES_PERIOD_MS. */
void cl_member_set_figures(cl_member *m, const char *json);
/* (loop) A leader's last read of every member (at most max): see cl_member_fig. running comes
 * from the 250 ms look at nodes/, the rest from the read every CL_FIGURES_PERIOD_MS. */
size_t cl_member_members(cl_member *m, cl_member_fig *out, size_t max);
/* A leader's lease is surely valid until then (CLOCK_MONOTONIC ms, margin off); 0: not leader. */
uint64_t cl_member_lease_until(cl_member *m);

#endif
