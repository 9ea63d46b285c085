/* auth.h - the replication port's proof of membership (issue 43): a shared cluster secret
 * (cluster.secret_file, the same file on every node, as RabbitMQ's Erlang cookie) and the
 * challenge-response both ends of a replication connection run before anything else.
 *
 * Handshake (wire.h AUTH, CHALLENGE, PROOF; the secret never crosses the wire):
 *   F -> L  AUTH       follower name, cluster name, nf (32 random bytes)
 *   L -> F  CHALLENGE  leader name, nl (32 random bytes), mac_L = MAC('L')
 *   F -> L  PROOF      mac_F = MAC('F')          (sent only once mac_L checked out)
 * MAC(role) = HMAC-SHA256(secret, "sluice-repl-auth-1" role s16(cluster) s16(follower)
 * s16(leader) nf nl), s16 = u16 big-endian length + bytes. Both nonces make every proof
 * fresh (a recorded one is useless on another connection), the role byte keeps a leader's
 * proof from being reflected as a follower's, and the names bind the proof to who claims
 * what. Proofs are compared in constant time (CRYPTO_memcmp).
 *
 * The secret is read with the settings (node/config.c: cluster.secret_file, from a regular
 * file that neither group nor others may read or write, not empty).
 */
#ifndef SL_CLUSTER_AUTH_H
#define SL_CLUSTER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define CL_AUTH_NONCE 32
#define CL_AUTH_MAC 32

/* 32 random bytes; -1 when the system has none to give. */
int cl_auth_nonce(uint8_t out[CL_AUTH_NONCE]);

/* The proof of role ('L' the leader, 'F' the follower). */
void cl_auth_mac(const uint8_t *secret, size_t secret_len, char role, const char *cluster,
                 const char *follower, const char *leader, const uint8_t nf[CL_AUTH_NONCE],
                 const uint8_t nl[CL_AUTH_NONCE], uint8_t out[CL_AUTH_MAC]);

/* 1 when mac is the proof of role (constant time), else 0. */
int cl_auth_check(const uint8_t *secret, size_t secret_len, char role, const char *cluster,
                  const char *follower, const char *leader, const uint8_t nf[CL_AUTH_NONCE],
                  const uint8_t nl[CL_AUTH_NONCE], const uint8_t mac[CL_AUTH_MAC]);

/* TLS on the replication port (cluster.ssl_options): a server (the leader's) or client (a
 * follower's) context, mutual when it verifies. NULL with err[0] == 0 when TLS is not
 * configured; NULL with err when a file or key is unusable. */
struct node_cluster_conf;
struct sl_tls_ctx;
struct sl_tls_ctx *cl_auth_tls_ctx(const struct node_cluster_conf *c, int server, char *err,
                                   size_t errlen);

#endif
