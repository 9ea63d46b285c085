/* password.c - password hashes in RabbitMQ's formats (OpenSSL's libcrypto), and Argon2id
 * (Debian's libargon2) as an option for new passwords.
 *
 * RabbitMQ's rabbit_password: a hash is salt (4 random bytes) followed by H(salt + password),
 * H = SHA-256 (rabbit_password_hashing_sha256, the default since 3.6), SHA-512 or MD5 (the
 * legacy one); definitions carry it base64-encoded. Storing the same bytes is what lets a
 * file exported from RabbitMQ log every user in here, and the reverse.
 *
 * Argon2id (sluice_password_hashing_argon2id) is a slow, memory-hard hash: a stolen
 * definitions file costs an attacker far more per guess. It is stored as its PHC string
 * ("$argon2id$v=19$m=19456,t=2,p=1$salt$hash", OWASP's minimum parameters). RabbitMQ cannot
 * read it, so it is opt-in (password_hashing_module), and a verification takes ~20 ms of the
 * loop thread, so it suits users that log in rarely (operators), not every short-lived client.
 */
#include <argon2.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/base64.h"
#include "core/mem.h"
#include "access/access_internal.h"

#define SALT_LEN 4
#define ARGON2_T 2
#define ARGON2_M_KIB 19456
#define ARGON2_P 1
#define ARGON2_SALT 16
#define ARGON2_HASH 32

static const char *const hash_names[] = {
    [ACC_HASH_NONE] = "",
    [ACC_HASH_SHA256] = "rabbit_password_hashing_sha256",
    [ACC_HASH_SHA512] = "rabbit_password_hashing_sha512",
    [ACC_HASH_MD5] = "rabbit_password_hashing_md5",
    [ACC_HASH_ARGON2ID] = "sluice_password_hashing_argon2id",
};

const char *acc_hash_name(acc_hash algo)
{
    return (unsigned)algo < sizeof hash_names / sizeof hash_names[0] ? hash_names[algo] : "";
}

int acc_hash_parse(const acc_db *a, const char *name)
{
    if (!name || !*name)
        return (int)acc_default_hash(a);
    for (int i = ACC_HASH_SHA256; i <= ACC_HASH_ARGON2ID; i++)
        if (!strcasecmp(name, hash_names[i]))
            return i;
    return -1;
}

static const EVP_MD *md_of(acc_hash algo)
{
    switch (algo) {
    case ACC_HASH_SHA256:
        return EVP_sha256();
    case ACC_HASH_SHA512:
        return EVP_sha512();
    case ACC_HASH_MD5:
        return EVP_md5();
    default:
        return NULL;
    }
}

/* out = salt + H(salt + pw); returns its length, 0 on failure. */
static size_t salted(acc_hash algo, const uint8_t salt[SALT_LEN], const uint8_t *pw, size_t n,
                     uint8_t *out)
{
    const EVP_MD *md = md_of(algo);
    EVP_MD_CTX *ctx = md ? EVP_MD_CTX_new() : NULL;
    unsigned dl = 0;
    int ok = ctx && EVP_DigestInit_ex(ctx, md, NULL) && EVP_DigestUpdate(ctx, salt, SALT_LEN) &&
             EVP_DigestUpdate(ctx, pw, n) && EVP_DigestFinal_ex(ctx, out + SALT_LEN, &dl);
    EVP_MD_CTX_free(ctx);
    if (!ok) {
        ERR_clear_error(); /* the TLS streams rely on an empty error queue (net/tls.c) */
        return 0;
    }
    memcpy(out, salt, SALT_LEN);
    return SALT_LEN + dl;
}

size_t acc_digest_len(acc_hash algo)
{
    const EVP_MD *md = md_of(algo);
    return md ? (size_t)EVP_MD_get_size(md) : 0;
}

int acc_hash_password(acc_hash algo, const uint8_t *pw, size_t n, uint8_t **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (algo == ACC_HASH_ARGON2ID) {
        uint8_t salt[ARGON2_SALT];
        if (RAND_bytes(salt, sizeof salt) != 1) {
            ERR_clear_error();
            return -1;
        }
        size_t elen = argon2_encodedlen(ARGON2_T, ARGON2_M_KIB, ARGON2_P, ARGON2_SALT, ARGON2_HASH,
                                        Argon2_id);
        char *enc = sl_xmalloc(elen);
        if (argon2id_hash_encoded(ARGON2_T, ARGON2_M_KIB, ARGON2_P, pw, n, salt, sizeof salt,
                                  ARGON2_HASH, enc, elen) != ARGON2_OK) {
            sl_free(enc);
            return -1;
        }
        *out = (uint8_t *)enc;
        *outlen = strlen(enc);
        return 0;
    }
    if (!md_of(algo))
        return -1;
    uint8_t salt[SALT_LEN];
    if (RAND_bytes(salt, sizeof salt) != 1) {
        ERR_clear_error();
        return -1;
    }
    uint8_t buf[SALT_LEN + EVP_MAX_MD_SIZE];
    size_t len = salted(algo, salt, pw, n, buf);
    if (!len)
        return -1;
    *out = sl_xmalloc(len);
    memcpy(*out, buf, len);
    *outlen = len;
    return 0;
}

int acc_verify_password(acc_hash algo, const uint8_t *stored, size_t slen, const uint8_t *pw,
                        size_t n)
{
    if (algo == ACC_HASH_ARGON2ID) {
        char enc[256];
        if (slen == 0 || slen >= sizeof enc)
            return 0;
        memcpy(enc, stored, slen);
        enc[slen] = 0;
        return argon2id_verify(enc, pw, n) == ARGON2_OK;
    }
    size_t dl = acc_digest_len(algo);
    if (!dl || slen != SALT_LEN + dl)
        return 0;
    uint8_t buf[SALT_LEN + EVP_MAX_MD_SIZE];
    if (salted((acc_hash)algo, stored, pw, n, buf) != slen)
        return 0;
    return CRYPTO_memcmp(buf + SALT_LEN, stored + SALT_LEN, dl) == 0;
}

/* ---- base64: core's encoder and strict reader ---- */

char *acc_b64_encode(const uint8_t *p, size_t n)
{
    return sl_base64_encode(p, n, NULL);
}

long acc_b64_decode(const char *s, size_t n, uint8_t *out, size_t cap)
{
    return sl_base64_decode_strict(s, n, out, cap);
}

char *acc_hash_export(const acc_user *u)
{
    if (u->algo == ACC_HASH_NONE || !u->hash_len)
        return sl_xstrdup("");
    if (u->algo == ACC_HASH_ARGON2ID)
        return sl_xstrndup((const char *)u->hash, u->hash_len);
    return acc_b64_encode(u->hash, u->hash_len);
}

int acc_hash_import(acc_hash algo, const char *text, uint8_t **out, size_t *outlen, char *err,
                    size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    size_t n = strlen(text);
    if (n == 0)
        return 0; /* no password */
    if (algo == ACC_HASH_ARGON2ID) {
        if (n >= 256 || strncmp(text, "$argon2id$", 10)) {
            snprintf(err, errlen, "password_hash is not an Argon2id PHC string");
            return -1;
        }
        *out = (uint8_t *)sl_xstrndup(text, n);
        *outlen = n;
        return 0;
    }
    size_t dl = acc_digest_len(algo);
    if (!dl) {
        snprintf(err, errlen, "unknown hashing algorithm");
        return -1;
    }
    uint8_t buf[SALT_LEN + EVP_MAX_MD_SIZE + 3];
    long r = acc_b64_decode(text, n, buf, sizeof buf);
    if (r != (long)(SALT_LEN + dl)) {
        snprintf(err, errlen,
                 "password_hash must be the base64 of a 4-byte salt and a %zu-byte %s digest", dl,
                 acc_hash_name(algo));
        return -1;
    }
    *out = sl_xmalloc((size_t)r);
    memcpy(*out, buf, (size_t)r);
    *outlen = (size_t)r;
    return 0;
}
