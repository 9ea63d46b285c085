/* dcerpc.h - the connection-oriented DCE/RPC protocol (C706 chapter 12, MS-RPCE 2.2.2) as a
 * sans-I/O state machine: bytes in, PDUs out, complete calls handed to the caller.
 *
 * One rpc_conn per TCP connection. rpc_conn_step takes the bytes received so far and handles
 * at most one PDU: bind / alter_context are answered here (bind_ack, alter_context_resp or
 * bind_nak, from the interface table); request fragments are gathered into one call, which is
 * returned as RPC_STEP_CALL; the caller answers it with rpc_conn_respond (fragmented to the
 * negotiated size) or rpc_conn_fault. What is to be sent accumulates in conn->out.
 *
 * Invariants and bounds:
 *   - a PDU is never longer than the negotiated max_recv_frag (at most cfg.max_frag);
 *   - a call's stub is at most cfg.max_call bytes and RPC_STEP_CALL arrives after at most
 *     cfg.max_frags fragments: beyond either, the call is answered with a fault
 *     (nca_s_fault_remote_no_memory) and the connection is closed (RPC_STEP_CLOSE);
 *   - one call is gathered at a time (no PFC_CONC_MPX): a first fragment while another call
 *     is open, or a middle fragment of another call, is a protocol error;
 *   - any malformed PDU or an unexpected type ends the connection after a bind_nak or a
 *     fault where the protocol has one. Memory held: the input the caller keeps, plus one
 *     call's stub and one PDU's copy (to verify and unseal it).
 *
 * Authentication (cfg.ntlm): NTLM (RPC_C_AUTHN_WINNT) only, one security context per
 * connection, set up by the bind (NEGOTIATE in, CHALLENGE in the bind_ack) and AUTH3
 * (AUTHENTICATE, verified through cfg.nt_hash). At levels integrity (5) and privacy (6) every
 * request PDU must carry a verifier whose signature checks (privacy: after unsealing) and
 * every response PDU carries one; at level connect (2) only the login is protected. A call
 * that is refused (no login where cfg.require_auth, a failed login, a level below
 * cfg.min_level, a bad signature) is answered with a fault (access denied) and the
 * connection is closed: nothing of it is handed to the caller. Faults are not signed.
 * Without cfg.ntlm, a bind asking for authentication gets bind_nak (type not recognized).
 */
#ifndef SL_RPC_DCERPC_H
#define SL_RPC_DCERPC_H
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "rpc/ntlm.h"

enum {
    RPC_PT_REQUEST = 0,
    RPC_PT_RESPONSE = 2,
    RPC_PT_FAULT = 3,
    RPC_PT_BIND = 11,
    RPC_PT_BIND_ACK = 12,
    RPC_PT_BIND_NAK = 13,
    RPC_PT_ALTER_CONTEXT = 14,
    RPC_PT_ALTER_CONTEXT_RESP = 15,
    RPC_PT_AUTH3 = 16,
    RPC_PT_SHUTDOWN = 17,
    RPC_PT_CO_CANCEL = 18,
    RPC_PT_ORPHANED = 19,
};
enum { RPC_AUTHN_WINNT = 10 };
enum {
    RPC_AUTH_LEVEL_NONE = 1,
    RPC_AUTH_LEVEL_CONNECT = 2,
    RPC_AUTH_LEVEL_CALL = 3,
    RPC_AUTH_LEVEL_PKT = 4,
    RPC_AUTH_LEVEL_INTEGRITY = 5,
    RPC_AUTH_LEVEL_PRIVACY = 6,
};
enum {
    RPC_PFC_FIRST_FRAG = 0x01,
    RPC_PFC_LAST_FRAG = 0x02,
    RPC_PFC_PENDING_CANCEL = 0x04,
    RPC_PFC_CONC_MPX = 0x10,
    RPC_PFC_DID_NOT_EXECUTE = 0x20,
    RPC_PFC_MAYBE = 0x40,
    RPC_PFC_OBJECT_UUID = 0x80,
};
/* Fault statuses (C706 appendix E, MS-RPCE 3.1.1.5.5). */
#define NCA_S_OP_RNG_ERROR 0x1C010002u
#define NCA_S_UNK_IF 0x1C010003u
#define NCA_S_PROTO_ERROR 0x1C01000Bu
#define NCA_S_FAULT_CONTEXT_MISMATCH 0x1C00001Au
#define NCA_S_FAULT_REMOTE_NO_MEMORY 0x1C00001Bu
#define NCA_S_FAULT_NDR 0x000006F7u /* RPC_X_BAD_STUB_DATA */
#define NCA_S_ACCESS_DENIED 0x00000005u

#define RPC_HDR_LEN 16
#define RPC_MIN_FRAG 1432 /* C706: every implementation takes fragments this long */

typedef struct rpc_syntax {
    uint8_t uuid[16]; /* little-endian GUID layout, as on the wire with drep LE */
    uint16_t major, minor;
} rpc_syntax;

/* Parse "8a885d04-1ceb-11c9-9fe8-08002b104860" into the wire layout; -1 when malformed
 * (core/hex.h's sl_guid_parse: 36 characters, the dashes in place). */
int rpc_uuid_parse(const char *s, uint8_t out[16]);
void rpc_uuid_str(const uint8_t u[16], char *buf, size_t len); /* 37 bytes */

extern const rpc_syntax rpc_ndr20; /* 8a885d04-1ceb-11c9-9fe8-08002b104860 v2 */

/* An interface the server offers: abstract syntax, and the number of its operations. */
typedef struct rpc_iface {
    rpc_syntax id;
    uint16_t n_ops;
    const char *name;
    void *impl; /* the caller's */
} rpc_iface;

typedef struct rpc_conn_cfg {
    const rpc_iface *const *ifaces;
    size_t n_ifaces;
    uint16_t max_frag; /* largest PDU either way (>= RPC_MIN_FRAG) */
    size_t max_call;   /* largest request stub gathered */
    unsigned max_frags;
    const char *sec_addr; /* bind_ack's secondary address: the port, as text ("" allowed) */
    int ntlm;             /* offer NTLM (else a bind with a verifier gets bind_nak) */
    int require_auth;     /* calls need an NTLM login */
    int min_level;        /* the lowest authentication level a call may have */
    const char *computer; /* the name NTLM's CHALLENGE gives */
    ntlm_hash_fn nt_hash; /* a user's NT hash */
    void *nt_hash_ctx;
} rpc_conn_cfg;

#define RPC_MAX_CTX 16 /* presentation contexts a connection may bind */

typedef struct rpc_conn {
    rpc_conn_cfg cfg;
    uint16_t max_xmit, max_recv; /* negotiated: what we send / accept */
    uint32_t assoc_group;
    int bound;
    struct {
        uint16_t id;
        const rpc_iface *iface;
    } ctx[RPC_MAX_CTX];
    size_t n_ctx;
    /* the request being gathered */
    int in_call;
    uint32_t call_id;
    uint16_t call_ctx, call_opnum;
    int call_le;
    unsigned call_frags;
    sl_buf stub;
    sl_buf out; /* PDUs to send */
    /* the security context: auth_state 0 none, 1 challenged, 2 authenticated, -1 failed */
    int auth_state;
    uint8_t auth_level;
    uint32_t auth_ctx_id;
    ntlm_srv ntlm;
    sl_buf pdu;             /* a copy of the PDU being verified / unsealed */
    uint64_t faults, calls; /* counters */
} rpc_conn;

typedef struct rpc_call {
    uint32_t call_id;
    uint16_t ctx_id, opnum;
    const rpc_iface *iface;
    const uint8_t *stub; /* valid until the next rpc_conn_step */
    size_t stub_len;
    int le; /* the stub's integers are little endian */
} rpc_call;

enum rpc_step {
    RPC_STEP_MORE = 0,  /* need more bytes */
    RPC_STEP_DONE = 1,  /* one PDU consumed (maybe output queued) */
    RPC_STEP_CALL = 2,  /* one PDU consumed and a call is complete: answer it */
    RPC_STEP_CLOSE = 3, /* send what is queued, then close */
    RPC_STEP_NOTE = 4,  /* one PDU consumed: a login succeeded or failed, why says which */
};

void rpc_conn_init(rpc_conn *c, const rpc_conn_cfg *cfg, uint32_t assoc_group);
void rpc_conn_free(rpc_conn *c);
/* Handle at most one PDU of in[0..n): *used is what was consumed. Why the connection is to be
 * closed, for a log line, goes to why (may be NULL). */
enum rpc_step rpc_conn_step(rpc_conn *c, const uint8_t *in, size_t n, size_t *used, rpc_call *call,
                            char *why, size_t whylen);
/* Answer a call with its output stub (fragmented to max_xmit). */
void rpc_conn_respond(rpc_conn *c, const rpc_call *call, const uint8_t *stub, size_t len);
void rpc_conn_fault(rpc_conn *c, uint32_t call_id, uint16_t ctx_id, uint32_t status);
/* The NTLM-authenticated user name, or NULL. */
const char *rpc_conn_user(const rpc_conn *c);

#endif
