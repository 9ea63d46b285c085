/* server.h - the DCE/RPC doors (ncacn_ip_tcp): the interfaces' listener and the endpoint
 * mapper, on the broker's loop. Sockets and buffers live here; the protocol is dcerpc.c's,
 * the operations are the registering module's (MSMQ's in src/rpc/qmmgmt.c and qmcomm*.c).
 *
 * Each connection is a session with an id that is never reused in a run. An operation runs on
 * the loop thread and answers at once (its output stub, or a fault status) or later
 * (RPC_DEFERRED, then rpc_server_reply / rpc_server_fault with the session id, which do
 * nothing when the session has gone). When a session ends, the on_close hook runs first so
 * that context handles opened through it are run down.
 *
 * Bounds: sessions at most cfg.max_sessions (more wait in the backlog); input is read only
 * while the session has less than two fragments unread and less than max_out queued for
 * it, so a client that does not read its answers stops being read (memory per session: one
 * call's stub + a fragment of input + max_out).
 */
#ifndef SL_RPC_SERVER_H
#define SL_RPC_SERVER_H
#include <netinet/in.h>
#include <stdint.h>

#include "net/loop.h"
#include "rpc/dcerpc.h"
#include "rpc/ndr.h"

typedef struct rpc_server rpc_server;

typedef struct rpc_session_info {
    uint64_t id;
    int loopback;     /* the peer is on a loopback address */
    const char *user; /* whose rights the calls have (NTLM: the logged-in user; auth none:
                       * msrpc.user) */
    char peer[64];    /* "addr:port" */
    int local_port;   /* the port the peer connected to */
    rpc_server *srv;
} rpc_session_info;

#define RPC_DEFERRED 0xFFFFFFFFu

/* An operation: read the [in] parameters from in, write the [out] ones to out; 0 = answer
 * with out, RPC_DEFERRED = answered later, else a fault status (NCA_S_FAULT_NDR when in->err
 * after decoding). */
typedef uint32_t (*rpc_op_fn)(void *ctx, const rpc_session_info *s, const rpc_call *c, ndr_rd *in,
                              ndr_wr *out);

typedef struct rpc_server_cfg {
    const char *bind;
    int port;       /* interfaces' endpoint; -1 = off */
    int epmap_port; /* endpoint mapper; -1 = off */
    int auth_none;  /* 1: msrpc.auth = none (loopback callers only) */
    const char *user;
    int ntlm;             /* msrpc.auth = ntlm: calls on the interfaces' door need an NTLM login
                           * (the endpoint mapper's door offers NTLM and needs none) */
    int min_level;        /* msrpc.min_auth_level (RPC_AUTH_LEVEL_*) */
    const char *computer; /* the name NTLM's CHALLENGE gives */
    /* a user's NT hash, on the loop thread (loopback: the peer is on a loopback address) */
    int (*nt_hash)(void *ctx, const char *user, int loopback, uint8_t out[16], char *why,
                   size_t whylen);
    void *nt_hash_ctx;
    uint16_t max_frag;
    size_t max_call;
    unsigned max_frags;
    unsigned max_sessions;
    size_t max_out;
    unsigned fd_reserve;
} rpc_server_cfg;

rpc_server *rpc_server_new(sl_loop *loop, const rpc_server_cfg *cfg);
/* Offer an interface (before rpc_server_start): ops[opnum], n_ops of them; NULL entries fault
 * with nca_s_op_rng_error. The endpoint mapper answers for it. */
void rpc_server_add(rpc_server *s, const rpc_syntax *id, const char *name, const rpc_op_fn *ops,
                    uint16_t n_ops, void *ctx);
void rpc_server_on_close(rpc_server *s, void (*fn)(void *ctx, uint64_t session), void *ctx);
/* Open the listeners and log "listening msrpc=ADDR:PORT" / "listening msrpc-epmap=ADDR:PORT".
 * -1 with err. */
int rpc_server_start(rpc_server *s, char *err, size_t errlen);
void rpc_server_free(rpc_server *s);
int rpc_server_port(const rpc_server *s);

void rpc_server_reply(rpc_server *s, uint64_t session, const rpc_call *c, const uint8_t *stub,
                      size_t len);
void rpc_server_fault(rpc_server *s, uint64_t session, const rpc_call *c, uint32_t status);
/* 1 while the session is connected. */
int rpc_server_has_session(const rpc_server *s, uint64_t session);

/* One call's stub through the same dispatch a connection's request takes, without a socket:
 * for fuzz targets and unit tests of the stub decoders (tests/fuzz/fuzz_msrpc_stub.c).
 * iface: an interface added with rpc_server_add, or NULL for the endpoint mapper's; info is
 * the caller (its id names the session handles are opened for; no session of that id is
 * connected, so deferred answers find none). Returns what the operation returned (0: the
 * response stub is in out; RPC_DEFERRED; else the fault status, NCA_S_UNK_IF for an
 * interface not offered, NCA_S_OP_RNG_ERROR for an opnum out of its range). */
uint32_t rpc_server_invoke(rpc_server *s, const rpc_session_info *info, const rpc_syntax *iface,
                           uint16_t opnum, const uint8_t *stub, size_t len, int le, sl_buf *out);

#endif
