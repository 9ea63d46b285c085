/* session.c - the login sessions' table (see session.h): an sl_map from the SHA-256 of a
 * token to its session.
 */
#include "http/session.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "core/hex.h"
#include "core/log.h"
#include "core/map.h"
#include "core/mem.h"

struct http_sessions {
    sl_map *map; /* SHA-256 of a token -> http_session */
};

static void session_free(http_session *s)
{
    sl_free(s->user);
    sl_free(s->cred);
    sl_free(s);
}

http_sessions *http_sessions_new(void)
{
    http_sessions *t = sl_xcalloc(1, sizeof *t);
    t->map = sl_map_new();
    return t;
}

void http_sessions_free(http_sessions *t)
{
    if (!t)
        return;
    size_t pos = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(t->map, &pos, &k, &kl, &v))
        session_free(v);
    sl_map_free(t->map);
    sl_free(t);
}

size_t http_sessions_count(const http_sessions *t)
{
    return sl_map_count(t->map);
}

static int expired(const http_session_limits *lim, const http_session *s, uint64_t now)
{
    return now - s->used_ms > lim->idle_ms || now - s->born_ms > lim->max_ms;
}

/* The table key of a token: its SHA-256. -1 when the token is not HTTP_SESSION_TOKEN_LEN
 * hex digits. */
static int token_key(const char *token, uint8_t key[SHA256_DIGEST_LENGTH])
{
    /* lowercase only, not core/hex.h's sl_is_hex: the key hashes the text as it was issued */
    if (!token || strlen(token) != HTTP_SESSION_TOKEN_LEN ||
        strspn(token, "0123456789abcdef") != HTTP_SESSION_TOKEN_LEN)
        return -1;
    SHA256((const unsigned char *)token, HTTP_SESSION_TOKEN_LEN, key);
    return 0;
}

void http_sessions_sweep(http_sessions *t, const http_session_limits *lim, uint64_t now)
{
    /* collect first: deleting while walking the map would skip entries */
    size_t n = sl_map_count(t->map), k = 0;
    if (!n)
        return;
    uint8_t(*dead)[SHA256_DIGEST_LENGTH] = sl_xmalloc(n * SHA256_DIGEST_LENGTH);
    size_t pos = 0;
    const char *key;
    size_t kl;
    void *v;
    while (sl_map_next(t->map, &pos, &key, &kl, &v))
        if (expired(lim, v, now) && kl == SHA256_DIGEST_LENGTH)
            memcpy(dead[k++], key, SHA256_DIGEST_LENGTH);
    for (size_t i = 0; i < k; i++)
        session_free(sl_map_del(t->map, dead[i], SHA256_DIGEST_LENGTH));
    sl_free(dead);
}

/* Make room for one more: the least recently used session goes. */
static void evict_one(http_sessions *t, const http_session_limits *lim)
{
    size_t pos = 0;
    const char *key, *oldest = NULL;
    size_t kl;
    void *v;
    uint64_t at = UINT64_MAX;
    while (sl_map_next(t->map, &pos, &key, &kl, &v))
        if (((http_session *)v)->used_ms < at) {
            at = ((http_session *)v)->used_ms;
            oldest = key;
        }
    if (oldest) {
        uint8_t k[SHA256_DIGEST_LENGTH];
        memcpy(k, oldest, sizeof k);
        http_session *s = sl_map_del(t->map, k, sizeof k);
        sl_info("http: session of user '%s' ended to make room (%d sessions at most)", s->user,
                (int)lim->max);
        session_free(s);
    }
}

int http_session_new(http_sessions *t, const http_session_limits *lim, const char *user,
                     const uint8_t *cred, size_t cred_len, uint64_t now,
                     char token[HTTP_SESSION_TOKEN_LEN + 1])
{
    uint8_t raw[HTTP_SESSION_TOKEN_BYTES];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return -1;
    sl_hex(token, raw, sizeof raw);
    OPENSSL_cleanse(raw, sizeof raw);
    uint8_t key[SHA256_DIGEST_LENGTH];
    token_key(token, key);
    http_sessions_sweep(t, lim, now);
    while (sl_map_count(t->map) >= lim->max)
        evict_one(t, lim);
    http_session *s = sl_xcalloc(1, sizeof *s);
    s->user = sl_xstrdup(user);
    s->cred = sl_xmalloc(cred_len ? cred_len : 1);
    memcpy(s->cred, cred, cred_len);
    s->cred_len = cred_len;
    s->born_ms = s->used_ms = now;
    http_session *old = sl_map_put(t->map, key, sizeof key, s);
    if (old) /* 2^-256: keep the table sane anyway */
        session_free(old);
    return 0;
}

http_session *http_session_find(http_sessions *t, const http_session_limits *lim, const char *token,
                                uint64_t now)
{
    uint8_t key[SHA256_DIGEST_LENGTH];
    if (token_key(token, key) < 0)
        return NULL;
    http_session *s = sl_map_get(t->map, key, sizeof key);
    if (!s)
        return NULL;
    if (expired(lim, s, now)) {
        session_free(sl_map_del(t->map, key, sizeof key));
        return NULL;
    }
    s->used_ms = now;
    return s;
}

char *http_session_end(http_sessions *t, const char *token)
{
    uint8_t key[SHA256_DIGEST_LENGTH];
    if (token_key(token, key) < 0)
        return NULL;
    http_session *s = sl_map_del(t->map, key, sizeof key);
    if (!s)
        return NULL;
    char *user = s->user;
    s->user = NULL;
    session_free(s);
    return user;
}

void http_session_cookie(char *buf, size_t len, const char *name, const char *token, int max_age_s,
                         int secure)
{
    snprintf(buf, len, "%s=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%d%s", name, token,
             max_age_s, secure ? "; Secure" : "");
}
