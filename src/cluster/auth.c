/* auth.c - the cluster secret and the replication handshake's proofs (see auth.h). */
#include "cluster/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/conf.h"
#include "core/buf.h"
#include "core/mem.h"
#include "net/tls.h"

int cl_auth_nonce(uint8_t out[CL_AUTH_NONCE])
{
    return RAND_bytes(out, CL_AUTH_NONCE) == 1 ? 0 : -1;
}

static void put_s16(sl_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (n > 0xffff)
        n = 0xffff;
    sl_buf_put_u16(b, (uint16_t)n);
    sl_buf_append(b, s, n);
}

void cl_auth_mac(const uint8_t *secret, size_t secret_len, char role, const char *cluster,
                 const char *follower, const char *leader, const uint8_t nf[CL_AUTH_NONCE],
                 const uint8_t nl[CL_AUTH_NONCE], uint8_t out[CL_AUTH_MAC])
{
    static const char label[] = "sluice-repl-auth-1";
    sl_buf b;
    sl_buf_init(&b);
    sl_buf_append(&b, label, sizeof label - 1);
    sl_buf_append(&b, &role, 1);
    put_s16(&b, cluster);
    put_s16(&b, follower);
    put_s16(&b, leader);
    sl_buf_append(&b, nf, CL_AUTH_NONCE);
    sl_buf_append(&b, nl, CL_AUTH_NONCE);
    unsigned int outlen = CL_AUTH_MAC;
    if (!HMAC(EVP_sha256(), secret, (int)secret_len, sl_buf_head(&b), sl_buf_unread(&b), out,
              &outlen))
        memset(out, 0, CL_AUTH_MAC); /* never matches a real proof: cl_auth_check compares it too */
    sl_buf_free(&b);
}

int cl_auth_check(const uint8_t *secret, size_t secret_len, char role, const char *cluster,
                  const char *follower, const char *leader, const uint8_t nf[CL_AUTH_NONCE],
                  const uint8_t nl[CL_AUTH_NONCE], const uint8_t mac[CL_AUTH_MAC])
{
    uint8_t want[CL_AUTH_MAC];
    cl_auth_mac(secret, secret_len, role, cluster, follower, leader, nf, nl, want);
    int ok = CRYPTO_memcmp(want, mac, CL_AUTH_MAC) == 0;
    OPENSSL_cleanse(want, sizeof want);
    return ok;
}

struct sl_tls_ctx *cl_auth_tls_ctx(const struct node_cluster_conf *c, int server, char *err,
                                   size_t errlen)
{
    err[0] = 0;
    if (!c->repl_certfile)
        return NULL;
    /* Both ends show a certificate and, with verify_peer, check the other's against the
     * members' CA: the follower checks the leader's against the address it dials. */
    sl_tls_opts o = {.cacertfile = c->repl_cacertfile,
                     .certfile = c->repl_certfile,
                     .keyfile = c->repl_keyfile,
                     .verify_peer = c->repl_verify,
                     .fail_if_no_peer_cert = server && c->repl_verify && c->repl_fail_if_no_peer};
    char e[256];
    sl_tls_ctx *t = sl_tls_ctx_new(server, &o, e, sizeof e);
    if (!t)
        snprintf(err, errlen, "cluster.ssl_options: %s", e);
    return t;
}
