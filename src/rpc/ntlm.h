/* ntlm.h - the acceptor (server) side of NTLMSSP (MS-NLMP) for DCE/RPC's RPC_C_AUTHN_WINNT:
 * NEGOTIATE in, CHALLENGE out, AUTHENTICATE verified against the user's NT hash, then the
 * message signatures and sealing of every PDU (MS-NLMP 3.4 with extended session security).
 *
 * Sans-I/O: bytes in, bytes out; the NT hash comes from the caller (a lookup function), so
 * the module knows nothing about where users live. Crypto is OpenSSL's: MD5 and HMAC-MD5
 * from the default provider, MD4 (the NT hash) and RC4 (sealing, the key exchange) from the
 * legacy provider, loaded into a library context of this module's own so that nothing else
 * in the process sees the legacy algorithms.
 *
 * Invariants:
 *   - only NTLMv2 responses are accepted: an NTLMv1 (24-byte) response, an anonymous
 *     AUTHENTICATE and a client without extended session security, Unicode or 128-bit keys
 *     are refused with a reason;
 *   - each message is parsed with every offset and length checked against the message
 *     (fuzz_ntlm); nothing is read outside it;
 *   - after success, each direction has its own signing key, RC4 sealing state and sequence
 *     number; a PDU that fails verification leaves the context unusable (the caller closes).
 */
#ifndef SL_RPC_NTLM_H
#define SL_RPC_NTLM_H
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

enum {
    NTLM_NEGOTIATE_UNICODE = 0x00000001,
    NTLM_REQUEST_TARGET = 0x00000004,
    NTLM_NEGOTIATE_SIGN = 0x00000010,
    NTLM_NEGOTIATE_SEAL = 0x00000020,
    NTLM_NEGOTIATE_NTLM = 0x00000200,
    NTLM_NEGOTIATE_ANONYMOUS = 0x00000800,
    NTLM_NEGOTIATE_ALWAYS_SIGN = 0x00008000,
    NTLM_TARGET_TYPE_SERVER = 0x00020000,
    NTLM_NEGOTIATE_ESS = 0x00080000, /* extended session security */
    NTLM_NEGOTIATE_TARGET_INFO = 0x00800000,
    NTLM_NEGOTIATE_VERSION = 0x02000000,
    NTLM_NEGOTIATE_128 = 0x20000000,
    NTLM_NEGOTIATE_KEY_EXCH = 0x40000000,
    NTLM_NEGOTIATE_56 = 0x80000000u,
};

#define NTLM_SIG_LEN 16

/* The user's NT hash (MD4 of the UTF-16LE password) into out: 0, or -1 with why (an unknown
 * user, a user without an NT hash). user is UTF-8. */
typedef int (*ntlm_hash_fn)(void *ctx, const char *user, uint8_t out[16], char *why, size_t whylen);

typedef struct ntlm_key ntlm_key; /* one direction's signing key, RC4 state, sequence */

typedef struct ntlm_srv {
    int state;      /* 0 new, 1 challenged, 2 authenticated, -1 failed */
    uint32_t flags; /* negotiated */
    uint8_t challenge[8];
    sl_buf nego, chal; /* the first two messages, for the AUTHENTICATE's MIC */
    char user[256], domain[256];
    ntlm_key *in, *out; /* client-to-server, server-to-client */
} ntlm_srv;

/* 0 when the legacy provider (MD4, RC4) can be loaded; -1 with why otherwise. */
int rpc_ntlm_crypto_check(char *why, size_t whylen);
/* The NT hash of a UTF-8 password: MD4(UTF-16LE(pw)). -1 for invalid UTF-8 or no MD4.
 * access/nthash.h's acc_nt_hash, under the name the NTLM code and its tests know. */
int rpc_ntlm_nt_hash(const uint8_t *pw, size_t n, uint8_t out[16]);

void rpc_ntlm_srv_init(ntlm_srv *s);
void rpc_ntlm_srv_free(ntlm_srv *s);
/* NEGOTIATE in, CHALLENGE appended to out (computer: this node's NetBIOS-style name).
 * 0, or -1 with why. */
int rpc_ntlm_negotiate(ntlm_srv *s, const uint8_t *msg, size_t n, const char *computer, sl_buf *out,
                       char *why, size_t whylen);
/* AUTHENTICATE in: 0 when the NTLMv2 response proves the user's password (s->user is then
 * the authenticated name), or -1 with why (logged by the caller). */
int rpc_ntlm_authenticate(ntlm_srv *s, const uint8_t *msg, size_t n, ntlm_hash_fn hash, void *ctx,
                          char *why, size_t whylen);

/* Outgoing PDU msg[0..n): the signature over all of it goes to sig; with seal, the bytes
 * msg[doff..doff+dlen) are encrypted in place (after the signature was computed over them,
 * as MS-NLMP's SEAL does). */
void rpc_ntlm_wrap(ntlm_srv *s, int seal, uint8_t *msg, size_t n, size_t doff, size_t dlen,
                   uint8_t sig[NTLM_SIG_LEN]);
/* Incoming PDU: with seal, msg[doff..doff+dlen) is decrypted in place; then the signature
 * over msg[0..n) is checked against sig (checksum and sequence number). 0 or -1. */
int rpc_ntlm_unwrap(ntlm_srv *s, int seal, uint8_t *msg, size_t n, size_t doff, size_t dlen,
                    const uint8_t sig[NTLM_SIG_LEN]);

#endif
