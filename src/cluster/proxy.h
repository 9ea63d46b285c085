/* proxy.h - the front door of a cluster follower (issue 31: "any node is an entry point").
 *
 * A thread with its own epoll accepts on the follower's AMQP, AMQPS and HTTP listening sockets
 * and splices each connection, byte for byte both ways, to the leader's address for that door
 * (TLS on AMQPS is not terminated here: it passes through to the leader's AMQPS port, so the
 * leader's certificate must be valid for every node's name a client may dial).
 *
 * Invariants:
 *  - Every proxied connection belongs to one leader: when the leader changes or goes
 *    (cl_proxy_set_leader with a different address, or none), every proxied connection is
 *    closed and clients reconnect (to this node again, which now forwards to the new one).
 *    A spliced one is drained first: nothing more of the client's reaches the old leader,
 *    but what the old leader sends still reaches the client until it closes, for at most
 *    1 s (a step-down's answer, given just before the leader's key goes, is not lost).
 *  - Memory is bounded: each direction of a connection has a fixed buffer; a side whose peer's
 *    buffer is full is not read (back-pressure reaches the sender through TCP). The number of
 *    connections is capped (cluster.proxy_max_connections); above it the listeners are not
 *    accepted from (the kernel's backlog holds them) until one closes.
 *  - Half-close passes through: EOF from one side becomes shutdown(SHUT_WR) on the other
 *    once its buffer is drained; the connection closes when both directions are done, or
 *    refuse_timeout_ms after the leader's side ended (a client that never closes its own).
 *  - A connection to the leader that does not complete within the connect timeout is closed.
 *  - With no leader: an AMQP client gets connection.start, and after its start-ok a
 *    connection.close 320 CONNECTION_FORCED "... no cluster leader is elected yet, try again"
 *    (amqplib: "Handshake terminated by server: 320 (CONNECTION-FORCED) with message ...";
 *    pika: ProbableAuthenticationError whose text carries the same 320 and words; py-amqp:
 *    ConnectionForced); an AMQPS client is closed (no TLS here);
 *    an HTTP client gets 503 {"error":"...","reason":"..."} except GET /api/cluster, which is
 *    answered 200 with the member's own status (the status callback). Those exchanges are
 *    bounded in bytes and time (slowloris).
 *  - Outgoing connections to the leader are bound to opts.source_addr when set (the node's
 *    advertised address), so the leader can tell a proxied connection (docs/security.md: a
 *    connection from a cluster member's address is never "loopback" for loopback_users).
 *  - The listening descriptors belong to the caller: cl_proxy_stop stops accepting, closes
 *    every proxied connection and returns without closing them (they are handed to the broker
 *    at promotion, so the ports never close). Every descriptor made here is CLOEXEC.
 *
 * Threads: cl_proxy_start / _set_leader / _stop / _stats may be called from any one thread
 * (the follower phase); the status callback runs on the proxy's thread.
 */
#ifndef SL_CLUSTER_PROXY_H
#define SL_CLUSTER_PROXY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "cluster/member.h"
#include "core/buf.h"

enum { CL_PROXY_AMQP, CL_PROXY_AMQPS, CL_PROXY_HTTP, CL_PROXY_DOORS };

/* Memory: at most 2 * buf_bytes per connection (128 KiB at the defaults), so at most
 * max_connections * 128 KiB = 512 MiB with the default cluster.proxy_max_connections (pages
 * are touched only as far as a connection's traffic fills them). */
#define CL_PROXY_DEFAULT_MAX_CONNECTIONS CL_DEFAULT_PROXY_MAX_CONNECTIONS
#define CL_PROXY_DEFAULT_BUF_BYTES (64 * 1024)
#define CL_PROXY_DEFAULT_CONNECT_TIMEOUT_MS 5000
#define CL_PROXY_DEFAULT_REFUSE_TIMEOUT_MS 10000

/* Writes the JSON body GET /api/cluster answers while there is no leader (the member's own
 * status) into buf (cap bytes); returns its length, or 0 when there is none (then a 503). Runs
 * on the proxy's thread. */
typedef size_t (*cl_proxy_status_fn)(void *data, char *buf, size_t cap);

typedef struct cl_proxy_opts {
    int listen_fd[CL_PROXY_DOORS]; /* listening (made non-blocking here); -1: no such door */
    const char *source_addr;       /* bind outgoing connections here; NULL: the kernel's pick */
    unsigned max_connections;      /* cluster.proxy_max_connections; 0: the default */
    size_t buf_bytes;              /* per direction; 0: CL_PROXY_DEFAULT_BUF_BYTES */
    uint32_t connect_timeout_ms;   /* 0: CL_PROXY_DEFAULT_CONNECT_TIMEOUT_MS */
    uint32_t refuse_timeout_ms;    /* no-leader exchanges; 0: ..._REFUSE_TIMEOUT_MS */
    cl_proxy_status_fn status;     /* NULL: /api/cluster gets the 503 too */
    void *status_data;
    /* With no leader to forward to: 1 while this node is taking over as leader (its member
     * holds the key, its broker is not serving yet), called with status_data. Then the proxy
     * accepts nothing, and a new client waits in the backlog for the broker, which takes the
     * same listening sockets over, instead of being refused, or accepted and then cut off
     * when the proxy stops. Looked at before accepting and every tick. NULL: never. */
    int (*taking_over)(void *status_data);
} cl_proxy_opts;

typedef struct cl_proxy cl_proxy;

typedef struct cl_proxy_stats {
    uint64_t accepted, forwarded, refused, connect_failed, closed_by_leader_change;
    unsigned open; /* connections now open (proxied or being refused) */
} cl_proxy_stats;

/* Start the thread (no leader yet). NULL with err on failure. */
cl_proxy *cl_proxy_start(const cl_proxy_opts *o, char *err, size_t errlen);
/* The leader's addresses, "HOST:PORT" each (IPv6 as "[ADDR]:PORT"); NULL or "" for a door
 * the leader does not have, all NULL = no leader. name is for the log only. When anything
 * differs from before, every proxied connection is closed and one line is logged:
 * "cluster proxy: forwarding to LEADER at AMQP ..." (or "no leader: refusing"). 0, or -1
 * when an address does not parse (then: no leader). */
int cl_proxy_set_leader(cl_proxy *p, const char *name, const char *amqp, const char *amqps,
                        const char *http);
/* Stop accepting, close every connection, join the thread, free. The listening fds stay open
 * and listening (the caller's). */
void cl_proxy_stop(cl_proxy *p);
void cl_proxy_stats_get(cl_proxy *p, cl_proxy_stats *out);

/* ---- pure parts, exposed for the unit tests and the fuzz target ---- */

enum { CL_HTTP_MORE = 0, CL_HTTP_CLUSTER = 1, CL_HTTP_OTHER = 2, CL_HTTP_BAD = -1 };
/* Classify an HTTP request head buf[0..len): CL_HTTP_CLUSTER for "GET /api/cluster" (query
 * string allowed), CL_HTTP_OTHER for any other request line, CL_HTTP_MORE when the request
 * line is not complete yet, CL_HTTP_BAD when it cannot be an HTTP request line. */
int cl_proxy_http_route(const char *buf, size_t len);
/* The no-leader AMQP exchange over the client's bytes in[0..n), *step starting at 0: the
 * protocol header -> connection.start; start-ok -> connection.close 320; close-ok (or close,
 * answered close-ok) -> done. Appends what to send to out, sets *used to the bytes consumed.
 * 1 when the connection is to close once out is written, 0 for more input. */
int cl_proxy_amqp_refusal(int *step, const uint8_t *in, size_t n, size_t *used, sl_buf *out);

/* 1 when sa is the address of a cluster member other than self (by name) in st: the host of
 * its amqp, http or replication address, when that is numeric, and not one of self's own.
 * The leader treats such a connection as not loopback whatever its address (loopback_users:
 * guest), because it may be a proxied one from anywhere (docs/security.md). */
int cl_proxy_from_member(const cl_status *st, const char *self, const struct sockaddr *sa);
/* 1 when forwarding a client at `client` to the leader at `leader` from `source` (NULL: the
 * kernel's choice) would make a remote client look local to the leader: a non-loopback client,
 * a loopback leader, and a source the leader cannot tell from its own local clients (none, or
 * the leader's own address). The proxy closes such clients instead (and logs why, once). */
int cl_proxy_conceals_remote(const struct sockaddr *client, const struct sockaddr *leader,
                             const struct sockaddr *source);

#endif
