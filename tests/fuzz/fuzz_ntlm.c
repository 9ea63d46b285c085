/* fuzz_ntlm.c - libFuzzer target for the NTLMSSP acceptor's message parsers (src/rpc/ntlm.c):
 * the first byte picks what the rest is: an NTLM NEGOTIATE to a fresh context, or an
 * AUTHENTICATE answering the CHALLENGE of a valid NEGOTIATE (the user lookup answers for
 * every name, so the NTLMv2 proof, the key exchange and the MIC are reached). Besides "no
 * crash, no leak", it checks:
 * - a CHALLENGE written is well-formed: its signature, type 2, and target name and target
 *   info fields that lie inside it;
 * - a refused AUTHENTICATE leaves the context failed, with a reason, and no keys.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/ntlm.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int any_user(void *ctx, const char *user, uint8_t out[16], char *why, size_t whylen)
{
    (void)ctx;
    (void)why;
    (void)whylen;
    CHECK(strlen(user) < 256);
    rpc_ntlm_nt_hash((const uint8_t *)user, strlen(user), out);
    return 0;
}

static void check_challenge(const sl_buf *b)
{
    const uint8_t *p = b->data;
    CHECK(b->len >= 56 && !memcmp(p, "NTLMSSP\0\2\0\0\0", 12));
    for (size_t f = 12; f <= 40; f += 28) {
        size_t l = (size_t)(p[f] | p[f + 1] << 8);
        size_t o = (size_t)(p[f + 4] | p[f + 5] << 8 | p[f + 6] << 16 | (size_t)p[f + 7] << 24);
        CHECK(o <= b->len && l <= b->len - o);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t nego[32] = {'N', 'T', 'L', 'M', 'S',  'S',  'P',  0,
                                     1,   0,   0,   0,   0x35, 0x82, 0x88, 0xe0};
    if (size < 1)
        return 0;
    ntlm_srv s;
    rpc_ntlm_srv_init(&s);
    sl_buf chal;
    sl_buf_init(&chal);
    char why[256] = "";
    if (data[0] & 1) {
        if (rpc_ntlm_negotiate(&s, data + 1, size - 1, "fuzz", &chal, why, sizeof why) == 0)
            check_challenge(&chal);
        else
            CHECK(why[0] && chal.len == 0);
    } else {
        CHECK(rpc_ntlm_negotiate(&s, nego, sizeof nego, "fuzz", &chal, why, sizeof why) == 0);
        check_challenge(&chal);
        if (rpc_ntlm_authenticate(&s, data + 1, size - 1, any_user, NULL, why, sizeof why) < 0)
            CHECK(s.state == -1 && why[0] && !s.in && !s.out);
        else
            CHECK(s.state == 2 && s.in && s.out);
    }
    sl_buf_free(&chal);
    rpc_ntlm_srv_free(&s);
    return 0;
}
