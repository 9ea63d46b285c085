/* nthash.c - the NT hash (see nthash.h). The UTF-16LE copy of the password is wiped before
 * it is freed: it is the password itself. */
#include "access/nthash.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/provider.h>
#include <pthread.h>

#include "core/buf.h"
#include "core/utf16.h"

static pthread_once_t md4_once = PTHREAD_ONCE_INIT;
static EVP_MD *md4;

static void md4_init(void)
{
    OSSL_LIB_CTX *lctx = OSSL_LIB_CTX_new();
    if (!lctx || !OSSL_PROVIDER_load(lctx, "legacy") || !OSSL_PROVIDER_load(lctx, "default"))
        return;
    md4 = EVP_MD_fetch(lctx, "MD4", NULL);
}

int acc_nt_hash(const uint8_t *pw, size_t n, uint8_t out[16])
{
    pthread_once(&md4_once, md4_init);
    if (!md4)
        return -1;
    sl_buf u;
    sl_buf_init(&u);
    int rc = sl_utf8_to_utf16le_buf(pw, n, &u) < 0 ? -1 : 0;
    if (rc == 0) {
        EVP_MD_CTX *c = EVP_MD_CTX_new();
        unsigned len = 0;
        if (c && EVP_DigestInit_ex(c, md4, NULL)) {
            if (u.len)
                EVP_DigestUpdate(c, u.data, u.len);
            EVP_DigestFinal_ex(c, out, &len);
        }
        EVP_MD_CTX_free(c);
    }
    if (u.data)
        OPENSSL_cleanse(u.data, u.cap);
    sl_buf_free(&u);
    return rc;
}
