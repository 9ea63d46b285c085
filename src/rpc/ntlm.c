/* ntlm.c - NTLMSSP's acceptor: NTLMv2 verification and MS-NLMP 3.4 message security (see
 * ntlm.h for the invariants). Message layouts are MS-NLMP 2.2.1; every "fields" triple is
 * len:u16 maxlen:u16 offset:u32 into the message, checked before use.
 */
#include "rpc/ntlm.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/provider.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "access/nthash.h"
#include "core/le.h" /* NTLM is little endian throughout */
#include "core/mem.h"
#include "core/utf16.h"

struct ntlm_key {
    uint8_t sign[16];
    EVP_CIPHER_CTX *rc4; /* the sealing key's RC4 state, carried from PDU to PDU */
    uint32_t seq;
};

/* ---- crypto: a library context of our own with the legacy provider ---- */

static pthread_once_t crypto_once = PTHREAD_ONCE_INIT;
static OSSL_LIB_CTX *lctx;
static EVP_MD *md4, *md5;
static EVP_CIPHER *rc4;

static void crypto_init(void)
{
    lctx = OSSL_LIB_CTX_new();
    if (!lctx || !OSSL_PROVIDER_load(lctx, "legacy") || !OSSL_PROVIDER_load(lctx, "default"))
        return;
    md4 = EVP_MD_fetch(lctx, "MD4", NULL);
    md5 = EVP_MD_fetch(lctx, "MD5", NULL);
    rc4 = EVP_CIPHER_fetch(lctx, "RC4", NULL);
}

static int crypto_ok(void)
{
    pthread_once(&crypto_once, crypto_init);
    return md4 && md5 && rc4;
}

int rpc_ntlm_crypto_check(char *why, size_t whylen)
{
    if (crypto_ok())
        return 0;
    snprintf(why, whylen, "OpenSSL's legacy provider (MD4, RC4) cannot be loaded");
    return -1;
}

typedef struct part {
    const uint8_t *p;
    size_t n;
} part;

static void digest(const EVP_MD *md, const part *v, int nv, uint8_t *out)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned len = 0;
    if (!c || !EVP_DigestInit_ex(c, md, NULL))
        goto done;
    for (int i = 0; i < nv; i++)
        if (v[i].n)
            EVP_DigestUpdate(c, v[i].p, v[i].n);
    EVP_DigestFinal_ex(c, out, &len);
done:
    EVP_MD_CTX_free(c);
}

/* HMAC-MD5 (RFC 2104) over the concatenation of v; key at most 64 bytes (ours are 16). */
static void hmac_md5(const uint8_t key[16], const part *v, int nv, uint8_t out[16])
{
    uint8_t pad[64], inner[16];
    part iv[8];
    memset(pad, 0x36, sizeof pad);
    for (int i = 0; i < 16; i++)
        pad[i] ^= key[i];
    iv[0] = (part){pad, 64};
    for (int i = 0; i < nv && i < 7; i++)
        iv[i + 1] = v[i];
    digest(md5, iv, nv + 1, inner);
    memset(pad, 0x5c, sizeof pad);
    for (int i = 0; i < 16; i++)
        pad[i] ^= key[i];
    part ov[2] = {{pad, 64}, {inner, 16}};
    digest(md5, ov, 2, out);
}

static EVP_CIPHER_CTX *rc4_new(const uint8_t key[16])
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (c && EVP_EncryptInit_ex(c, rc4, NULL, key, NULL))
        return c;
    EVP_CIPHER_CTX_free(c);
    return NULL;
}

static void rc4_apply(EVP_CIPHER_CTX *c, uint8_t *p, size_t n)
{
    while (n) {
        int chunk = n > 1u << 20 ? 1 << 20 : (int)n, outl = 0;
        EVP_EncryptUpdate(c, p, &outl, p, chunk);
        p += chunk;
        n -= (size_t)chunk;
    }
}

/* ---- the NT hash: access/'s, which keeps it beside each user ---- */

int rpc_ntlm_nt_hash(const uint8_t *pw, size_t n, uint8_t out[16])
{
    return acc_nt_hash(pw, n, out);
}

/* ---- messages ---- */

static const uint8_t signature[8] = {'N', 'T', 'L', 'M', 'S', 'S', 'P', 0};

/* A fields triple at off: the payload it names, checked to lie inside msg. -1 when not. */
static int field(const uint8_t *msg, size_t n, size_t off, const uint8_t **p, size_t *len)
{
    if (n < off + 8)
        return -1;
    size_t l = sl_le16(msg + off), o = sl_le32(msg + off + 4);
    if (o > n || l > n - o)
        return -1;
    *p = msg + o;
    *len = l;
    return 0;
}

void rpc_ntlm_srv_init(ntlm_srv *s)
{
    memset(s, 0, sizeof *s);
    sl_buf_init(&s->nego);
    sl_buf_init(&s->chal);
}

static void key_free(ntlm_key *k)
{
    if (!k)
        return;
    EVP_CIPHER_CTX_free(k->rc4);
    OPENSSL_cleanse(k, sizeof *k);
    sl_free(k);
}

void rpc_ntlm_srv_free(ntlm_srv *s)
{
    sl_buf_free(&s->nego);
    sl_buf_free(&s->chal);
    key_free(s->in);
    key_free(s->out);
    s->in = s->out = NULL;
}

#define WHY(...) (snprintf(why, whylen, __VA_ARGS__), -1)

static void av_pair(sl_buf *b, uint16_t id, const void *p, size_t n)
{
    sl_buf_put_le16(b, id);
    sl_buf_put_le16(b, (uint16_t)n);
    sl_buf_append(b, p, n);
}

int rpc_ntlm_negotiate(ntlm_srv *s, const uint8_t *msg, size_t n, const char *computer, sl_buf *out,
                       char *why, size_t whylen)
{
    if (s->state != 0)
        return WHY("a second NTLM NEGOTIATE");
    if (!crypto_ok())
        return WHY("OpenSSL's legacy provider (MD4, RC4) cannot be loaded");
    if (n < 16 || memcmp(msg, signature, 8) || sl_le32(msg + 8) != 1)
        return WHY("not an NTLM NEGOTIATE message");
    uint32_t cf = sl_le32(msg + 12);
    if (!(cf & NTLM_NEGOTIATE_UNICODE))
        return WHY("the NTLM client does not speak Unicode");
    if (!(cf & NTLM_NEGOTIATE_ESS))
        return WHY("the NTLM client does not offer extended session security (NTLMv1 only)");
    if (!(cf & NTLM_NEGOTIATE_128))
        return WHY("the NTLM client does not offer 128-bit keys");
    s->flags = NTLM_NEGOTIATE_UNICODE | NTLM_REQUEST_TARGET | NTLM_NEGOTIATE_NTLM |
               NTLM_TARGET_TYPE_SERVER | NTLM_NEGOTIATE_ESS | NTLM_NEGOTIATE_TARGET_INFO |
               NTLM_NEGOTIATE_VERSION | NTLM_NEGOTIATE_128 |
               (cf & (NTLM_NEGOTIATE_SIGN | NTLM_NEGOTIATE_SEAL | NTLM_NEGOTIATE_ALWAYS_SIGN |
                      NTLM_NEGOTIATE_KEY_EXCH | NTLM_NEGOTIATE_56));
    if (RAND_bytes(s->challenge, 8) != 1)
        return WHY("no random bytes for the NTLM challenge");
    sl_buf_append(&s->nego, msg, n);

    /* target name and target info: this node's name, upper case, as computer and domain */
    char name[64];
    size_t nl = 0;
    for (const char *c = computer && *computer ? computer : "SLUICE"; *c && nl < 15; c++)
        name[nl++] = (char)((*c >= 'a' && *c <= 'z') ? *c - 32 : *c);
    name[nl] = 0;
    sl_buf uname, info;
    sl_buf_init(&uname);
    sl_buf_init(&info);
    if (sl_utf8_to_utf16le_buf((const uint8_t *)name, nl, &uname) < 0) {
        uname.len = 0;
        sl_utf8_to_utf16le_buf((const uint8_t *)"SLUICE", 6, &uname);
    }
    av_pair(&info, 2, uname.data, uname.len); /* MsvAvNbDomainName */
    av_pair(&info, 1, uname.data, uname.len); /* MsvAvNbComputerName */
    av_pair(&info, 4, uname.data, uname.len); /* MsvAvDnsDomainName */
    av_pair(&info, 3, uname.data, uname.len); /* MsvAvDnsComputerName */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ft =
        116444736000000000ull + (uint64_t)ts.tv_sec * 10000000u + (uint64_t)ts.tv_nsec / 100;
    uint8_t ftb[8];
    sl_put_le64(ftb, ft);
    av_pair(&info, 7, ftb, 8); /* MsvAvTimestamp: clients then send a MIC */
    av_pair(&info, 0, NULL, 0);

    size_t at = out->len;
    sl_buf_append(out, signature, 8);
    sl_buf_put_le32(out, 2);
    sl_buf_put_le16(out, (uint16_t)uname.len); /* TargetNameFields */
    sl_buf_put_le16(out, (uint16_t)uname.len);
    sl_buf_put_le32(out, 56);
    sl_buf_put_le32(out, s->flags);
    sl_buf_append(out, s->challenge, 8);
    sl_buf_put_le64(out, 0);
    sl_buf_put_le16(out, (uint16_t)info.len); /* TargetInfoFields */
    sl_buf_put_le16(out, (uint16_t)info.len);
    sl_buf_put_le32(out, (uint32_t)(56 + uname.len));
    static const uint8_t version[8] = {6, 1, 0xb1, 0x1d, 0, 0, 0, 15}; /* 6.1.7601, rev 15 */
    sl_buf_append(out, version, 8);
    sl_buf_append(out, uname.data, uname.len);
    sl_buf_append(out, info.data, info.len);
    sl_buf_append(&s->chal, out->data + at, out->len - at);
    sl_buf_free(&uname);
    sl_buf_free(&info);
    s->state = 1;
    return 0;
}

static void derive(const uint8_t esk[16], const char *magic, uint8_t out[16])
{
    part v[2] = {{esk, 16}, {(const uint8_t *)magic, strlen(magic) + 1}};
    digest(md5, v, 2, out);
}

static ntlm_key *key_new(const uint8_t esk[16], const char *sign_magic, const char *seal_magic)
{
    ntlm_key *k = sl_xcalloc(1, sizeof *k);
    uint8_t seal[16];
    derive(esk, sign_magic, k->sign);
    derive(esk, seal_magic, seal);
    k->rc4 = rc4_new(seal);
    OPENSSL_cleanse(seal, sizeof seal);
    if (!k->rc4) {
        key_free(k);
        return NULL;
    }
    return k;
}

/* The MsvAvFlags value among the AV pairs of an NTLMv2 response's blob (0 when absent). */
static uint32_t av_flags(const uint8_t *p, size_t n)
{
    for (size_t i = 0; n - i >= 4;) {
        uint16_t id = sl_le16(p + i), len = sl_le16(p + i + 2);
        if (id == 0 || n - i - 4 < len)
            break;
        if (id == 6 && len == 4)
            return sl_le32(p + i + 4);
        i += 4 + (size_t)len;
    }
    return 0;
}

static int ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

int rpc_ntlm_authenticate(ntlm_srv *s, const uint8_t *msg, size_t n, ntlm_hash_fn hash, void *ctx,
                          char *why, size_t whylen)
{
    if (s->state != 1)
        return WHY("an NTLM AUTHENTICATE without a CHALLENGE");
    s->state = -1; /* until proven */
    const uint8_t *lm, *nt, *dom, *usr, *ws, *ekey;
    size_t lml, ntl, doml, usrl, wsl, ekeyl;
    if (n < 64 || memcmp(msg, signature, 8) || sl_le32(msg + 8) != 3 ||
        field(msg, n, 12, &lm, &lml) || field(msg, n, 20, &nt, &ntl) ||
        field(msg, n, 28, &dom, &doml) || field(msg, n, 36, &usr, &usrl) ||
        field(msg, n, 44, &ws, &wsl) || field(msg, n, 52, &ekey, &ekeyl))
        return WHY("a malformed NTLM AUTHENTICATE message");
    (void)lm;
    (void)ws;
    uint32_t af = sl_le32(msg + 60);
    if (sl_utf16le_to_utf8(usr, usrl, s->user, sizeof s->user) < 0 ||
        sl_utf16le_to_utf8(dom, doml, s->domain, sizeof s->domain) < 0)
        return WHY("an NTLM user or domain name that is not valid UTF-16");
    if (ntl == 0 || usrl == 0 || (af & NTLM_NEGOTIATE_ANONYMOUS))
        return WHY("anonymous NTLM refused");
    if (ntl <= 24)
        return WHY("NTLMv1 response of '%s' refused (only NTLMv2 is accepted)", s->user);
    if (ntl < 16 + 28)
        return WHY("a short NTLMv2 response");
    if (usrl > 510)
        return WHY("an NTLM user name over 255 characters");
    uint8_t nthash[16], rkey[16], proof[16], sbk[16], esk[16];
    if (hash(ctx, s->user, nthash, why, whylen) < 0)
        return -1;
    /* ResponseKeyNT = HMAC_MD5(NT hash, UTF-16LE(upper(user)) + UTF-16LE(domain)); the upper
     * case is ASCII's (a non-ASCII name must be typed in the case it was created in) */
    uint8_t up[512];
    for (size_t i = 0; i < usrl; i++)
        up[i] = (uint8_t)((i % 2 == 0 && usr[i] >= 'a' && usr[i] <= 'z' && usr[i + 1] == 0)
                              ? usr[i] - 32
                              : usr[i]);
    part kv[2] = {{up, usrl}, {dom, doml}};
    hmac_md5(nthash, kv, 2, rkey);
    OPENSSL_cleanse(nthash, sizeof nthash);
    part pv[2] = {{s->challenge, 8}, {nt + 16, ntl - 16}};
    hmac_md5(rkey, pv, 2, proof);
    if (!ct_equal(proof, nt, 16)) {
        OPENSSL_cleanse(rkey, sizeof rkey);
        return WHY("wrong password for NTLM user '%s'", s->user);
    }
    part sv[1] = {{nt, 16}};
    hmac_md5(rkey, sv, 1, sbk); /* SessionBaseKey = KeyExchangeKey for NTLMv2 */
    OPENSSL_cleanse(rkey, sizeof rkey);
    memcpy(esk, sbk, 16);
    s->flags &= af | NTLM_NEGOTIATE_UNICODE;
    if ((s->flags & NTLM_NEGOTIATE_KEY_EXCH) && ekeyl == 16) {
        EVP_CIPHER_CTX *c = rc4_new(sbk);
        if (!c)
            return WHY("RC4 unavailable");
        memcpy(esk, ekey, 16);
        rc4_apply(c, esk, 16);
        EVP_CIPHER_CTX_free(c);
    } else {
        s->flags &= ~(uint32_t)NTLM_NEGOTIATE_KEY_EXCH;
    }
    /* the MIC, when the client says it sent one (MsvAvFlags bit 2): HMAC over the three
     * messages with the MIC field zeroed; it sits after the 8-byte Version at offset 72 */
    if (av_flags(nt + 44, ntl - 44) & 2) {
        if (n < 88)
            return WHY("an NTLM AUTHENTICATE announces a MIC it does not have");
        uint8_t mic[16], zero[16] = {0};
        part mv[5] = {{s->nego.data, s->nego.len},
                      {s->chal.data, s->chal.len},
                      {msg, 72},
                      {zero, 16},
                      {msg + 88, n - 88}};
        hmac_md5(esk, mv, 5, mic);
        if (!ct_equal(mic, msg + 72, 16))
            return WHY("the NTLM AUTHENTICATE's MIC does not match");
    }
    s->in = key_new(esk, "session key to client-to-server signing key magic constant",
                    "session key to client-to-server sealing key magic constant");
    s->out = key_new(esk, "session key to server-to-client signing key magic constant",
                     "session key to server-to-client sealing key magic constant");
    OPENSSL_cleanse(esk, sizeof esk);
    OPENSSL_cleanse(sbk, sizeof sbk);
    if (!s->in || !s->out)
        return WHY("RC4 unavailable");
    s->state = 2;
    return 0;
}

/* The checksum of MS-NLMP 3.4.4.2: HMAC_MD5(SigningKey, SeqNum + Message)[0..8), RC4'd with
 * the sealing state when the key was exchanged. */
static void checksum(const ntlm_srv *s, ntlm_key *k, const uint8_t *msg, size_t n, uint8_t out[8])
{
    uint8_t seq[4], mac[16];
    sl_put_le32(seq, k->seq);
    part v[2] = {{seq, 4}, {msg, n}};
    hmac_md5(k->sign, v, 2, mac);
    memcpy(out, mac, 8);
    if (s->flags & NTLM_NEGOTIATE_KEY_EXCH)
        rc4_apply(k->rc4, out, 8);
}

void rpc_ntlm_wrap(ntlm_srv *s, int seal, uint8_t *msg, size_t n, size_t doff, size_t dlen,
                   uint8_t sig[NTLM_SIG_LEN])
{
    ntlm_key *k = s->out;
    uint8_t sum[8];
    uint8_t mac[16], seq[4];
    sl_put_le32(seq, k->seq);
    /* the MAC is over the plain text; the RC4 stream seals the data first, then the checksum */
    part v[2] = {{seq, 4}, {msg, n}};
    hmac_md5(k->sign, v, 2, mac);
    if (seal)
        rc4_apply(k->rc4, msg + doff, dlen);
    memcpy(sum, mac, 8);
    if (s->flags & NTLM_NEGOTIATE_KEY_EXCH)
        rc4_apply(k->rc4, sum, 8);
    sig[0] = 1;
    sig[1] = sig[2] = sig[3] = 0;
    memcpy(sig + 4, sum, 8);
    memcpy(sig + 12, seq, 4);
    k->seq++;
}

int rpc_ntlm_unwrap(ntlm_srv *s, int seal, uint8_t *msg, size_t n, size_t doff, size_t dlen,
                    const uint8_t sig[NTLM_SIG_LEN])
{
    ntlm_key *k = s->in;
    if (seal)
        rc4_apply(k->rc4, msg + doff, dlen);
    uint8_t sum[8];
    checksum(s, k, msg, n, sum);
    int ok = sl_le32(sig) == 1 && ct_equal(sum, sig + 4, 8) && sl_le32(sig + 12) == k->seq;
    k->seq++;
    if (!ok)
        s->state = -1;
    return ok ? 0 : -1;
}
