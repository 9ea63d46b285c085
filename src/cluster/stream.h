/* stream.h - the replication stream's I/O (issue 31): the leader's server and the follower's
 * client on cluster.replication_port, each a thread of its own with its own poll loop (never
 * the event loop). They carry wire.h frames and drive repl.h's state machines exactly: every
 * rule (what to send, when to resend, what a follower keeps, what is committed and released)
 * is repl.c's; this file only moves bytes, keeps time and calls the log's owner back.
 *
 * The log's owner (the mirror of the data directory, cluster/mirror.h, or a test's memory
 * log) is reached through cl_stream_log callbacks, so the stream is tested alone
 * (tests/unit/test_stream.c: a leader and followers over loopback TCP, with kills).
 *
 * Leader (cl_stream_server): the owner reports each new group (cl_stream_server_append: any thread)
 * and its own durable index (cl_stream_server_durable). A group is reported as soon as its writes
 * are made, before the leader's own fdatasync of it (mirror.h), so it goes out while the leader
 * syncs; the durable index follows, and commit waits for both (repl.h "Commit"). Reporting a
 * group again (with the durable index that moved) is harmless: an append of a group the server
 * has is ignored; the member thread reports the lease
 * (cl_stream_server_lease) and the outcome of each ISR proposal (cl_stream_server_isr_result). The
 * server publishes the released index and whether publishers are blocked
 * (cl_stream_server_released, cl_stream_server_blocked) and signals every change on
 * cl_stream_server_fd (an eventfd the event loop watches: it then feeds persist's release gate).
 *
 * Follower (cl_stream_client): follows the leader named by cl_stream_client_set_leader (from the
 * member's view of etcd); applies each group through the owner, makes each batch of groups read at
 * once durable (the owner's sync), ACKs it, and saves the position through the owner once no group
 * came for a moment (stream.c's SAVE_IDLE_MS) and when it stops. A START that cuts the log
 * (divergence) or a leader that no longer keeps the next group cannot be served by a physical
 * mirror: the client then asks for a full copy (COPYREQ, wire.h), writes it through the owner's
 * copy_* callbacks, and follows on from the copy's last group.
 *
 * Authentication (issue 43, cluster/auth.h): with a secret, a connection begins with the
 * AUTH / CHALLENGE / PROOF handshake, and each end takes nothing else from the other until it
 * proved it holds the secret: the leader accepts no HELLO, ACK or COPYREQ (so no follower
 * counts towards a commit, displaces a connected one, or gets a full copy) and the follower
 * applies nothing. Each refusal is an "audit:" log line naming the peer's address and the
 * name it claimed. Without a secret (cluster.insecure_no_secret) a HELLO is taken as before,
 * from a registered member (opts.member) only.
 *
 * Node ids: the state machines number nodes 0..CL_REPL_MAX_NODES-1. The server gives itself 0
 * and each follower name the next free id the first time it says HELLO (kept for the life of
 * the server, so an ISR mask stays meaningful across reconnects).
 */
#ifndef SL_CLUSTER_STREAM_H
#define SL_CLUSTER_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/repl.h"

typedef struct cl_stream_log {
    void *ctx;
    /* leader: a copy (sl_free) of group idx's bytes and its epoch; -1 when no longer kept */
    int (*group)(void *ctx, uint64_t idx, uint8_t **bytes, size_t *len, uint64_t *epoch);
    /* leader: write this ISR (names, self included) to etcd, comparing the epoch; the answer
     * comes back through cl_stream_server_isr_result (from any thread, later) */
    void (*isr_propose)(void *ctx, const char *const *names, size_t n);
    /* follower: apply group idx durably; 0 or -1 (err). The first apply after a save must
     * leave a durable mark that the directory may be ahead of the saved position (the
     * client ACKs before it saves) */
    int (*apply)(void *ctx, uint64_t idx, uint64_t epoch, const uint8_t *g, size_t len, char *err,
                 size_t errlen);
    /* follower: make every group applied since the last call durable (apply may leave its
     * barriers to this: once per batch of groups, before the ACK); 0 or -1 (err). NULL: each
     * apply is durable by itself. */
    int (*sync)(void *ctx, char *err, size_t errlen);
    /* follower: everything up to last_idx is applied, durable and ACKed, history h: save it
     * durably, then clear the mark (called once a burst of batches is over, not per batch:
     * the mark stays set across the burst's applies) */
    int (*save)(void *ctx, uint64_t last_idx, const cl_repl_epochs *h);
    /* leader: a snapshot for a full copy (taken between two groups: it holds every group up to
     * *snap_idx), its files and their bytes (cl_mirror_snapshot and friends). NULL: none. */
    void *(*snap_open)(void *ctx, uint64_t *snap_idx);
    size_t (*snap_count)(void *snap);
    const char *(*snap_name)(void *snap, size_t i, uint64_t *size);
    long (*snap_read)(void *snap, size_t i, uint64_t off, void *buf, size_t len);
    void (*snap_free)(void *snap);
    /* follower: a full copy arrives: begin (a fresh place), the files' bytes, end (it becomes
     * the data directory, with its replica state saying snap_idx and h, durably). 0 or -1. */
    int (*copy_begin)(void *ctx, uint64_t snap_idx, char *err, size_t errlen);
    int (*copy_write)(void *ctx, const char *name, uint64_t off, const void *p, size_t len,
                      char *err, size_t errlen);
    int (*copy_end)(void *ctx, uint64_t snap_idx, const cl_repl_epochs *h, char *err,
                    size_t errlen);
    /* follower (issue 46): a connection to the leader at addr that was established (and,
     * with a secret, proved) ended: EOF, a reset or a failed send (not a drop of the
     * client's own, such as a timeout or a refusal frame). The member probes addr
     * (member.h cl_member_leader_lost). On the client's thread; NULL: none. */
    void (*lost)(void *ctx, const char *addr);
} cl_stream_log;

/* ---- leader ---- */
typedef struct cl_stream_server cl_stream_server;

typedef struct cl_stream_server_opts {
    const char *self;    /* this node's name */
    const char *cluster; /* the cluster's name: a HELLO naming another is refused */
    uint64_t epoch;
    const char *const *isr; /* names in etcd's ISR (self is added) */
    size_t n_isr;
    cl_rl_options rl;
    uint64_t last_idx;    /* the log's last group, all durable */
    cl_repl_epochs *hist; /* the log's history, shared with rl (the owner keeps it alive) */
    uint32_t ping_ms;     /* PING period (default 200) */
    /* A HELLO from a node this says is banned (an operator removed it: member.h banned/NAME)
     * is refused with REFUSE 1 and the reason "removed from the cluster by an operator".
     * NULL: none. Runs on the server's thread. */
    int (*banned)(void *ctx, const char *name);
    void *banned_ctx;
    /* 1 when name is a member registered in etcd (members/ or nodes/): a peer under any
     * other name is refused (an audit line) and may try again. NULL: every name. Runs on the
     * server's thread. */
    int (*member)(void *ctx, const char *name);
    void *member_ctx;
    /* The cluster secret (auth.h; copied): every follower must prove it. NULL: none. */
    const uint8_t *secret;
    size_t secret_len;
    /* TLS on every connection (a server context: cluster.ssl_options; the server owns it from
     * cl_stream_server_start on, also when that fails). NULL: plain TCP. */
    struct sl_tls_ctx *tls;
} cl_stream_server_opts;

/* Serve on listen_fd (bound and listening; the server owns it from now on). */
cl_stream_server *cl_stream_server_start(int listen_fd, const cl_stream_server_opts *o,
                                         const cl_stream_log *log, char *err, size_t errlen);
void cl_stream_server_stop(cl_stream_server *s);
void cl_stream_server_append(cl_stream_server *s, uint64_t idx, uint64_t bytes); /* any thread */
void cl_stream_server_durable(cl_stream_server *s, uint64_t idx);                /* any thread */
/* Both at once, one wake-up of the thread (a group that its batch synced): any thread */
void cl_stream_server_append_durable(cl_stream_server *s, uint64_t idx, uint64_t bytes,
                                     uint64_t durable);
void cl_stream_server_lease(cl_stream_server *s, uint64_t valid_until_ms); /* CLOCK_MONOTONIC ms */
void cl_stream_server_isr_result(cl_stream_server *s, int outcome);        /* CL_RL_ISR_* */
void cl_stream_server_depose(cl_stream_server *s);
int cl_stream_server_fd(const cl_stream_server *s); /* readable: released / blocked changed */
void cl_stream_server_take_event(cl_stream_server *s);
uint64_t cl_stream_server_released(cl_stream_server *s);
int cl_stream_server_blocked(cl_stream_server *s);
uint64_t cl_stream_server_commit(cl_stream_server *s);
/* The followers' standing for the API: up to max entries. */
typedef struct cl_stream_peer {
    char name[256];
    int insync, connected, copying; /* copying: a full copy is being sent to it */
    uint64_t acked, lag_bytes, lag_ms;
} cl_stream_peer;
size_t cl_stream_server_peers(cl_stream_server *s, cl_stream_peer *out, size_t max);
/* Forget a member (repl.h cl_rl_forget): its connection is closed and it is proposed out of the
 * ISR. Returns a ticket (> 0; 0: the name is this node's or there is no room for it); once
 * cl_stream_server_forgotten() reaches it, etcd's ISR no longer names it and the commit no longer
 * waits for it. Any thread. */
uint64_t cl_stream_server_forget(cl_stream_server *s, const char *name);
uint64_t cl_stream_server_forgotten(cl_stream_server *s);

/* ---- follower ---- */
typedef struct cl_stream_client cl_stream_client;

/* NEED_COPY: its log cannot continue the leader's; it asks for a full copy at its next
 * connection (COPYING while it comes). */
enum {
    CL_STREAM_IDLE,
    CL_STREAM_CONNECTING,
    CL_STREAM_STREAMING,
    CL_STREAM_NEED_COPY,
    CL_STREAM_COPYING
};

/* need_copy: start by asking for a full copy (the directory may hold groups no other node
 * has: node.h). secret (copied): the cluster secret every leader must prove and that this
 * follower proves; NULL: none (a leader that has one refuses this follower). */
/* tls: a client context (owned from now on, also on failure) for TLS to the leader, whose
 * certificate is checked against the address dialed when the context verifies; NULL: TCP. */
cl_stream_client *cl_stream_client_start(const char *self, const char *cluster,
                                         const uint8_t *secret, size_t secret_len,
                                         struct sl_tls_ctx *tls, uint64_t last_idx,
                                         const cl_repl_epochs *hist, int need_copy,
                                         const cl_stream_log *log, char *err, size_t errlen);
void cl_stream_client_stop(cl_stream_client *c);
/* The leader to follow ("HOST:PORT" of its replication port; "" none) and the newest epoch
 * seen in etcd (older leaders are refused from now on). Any thread. */
void cl_stream_client_set_leader(cl_stream_client *c, const char *addr, uint64_t epoch);
int cl_stream_client_state(cl_stream_client *c);
/* The log position (last applied and durable index, its epoch). Any thread. */
void cl_stream_client_position(cl_stream_client *c, uint64_t *last_epoch, uint64_t *last_idx);

#endif
