/* session.c - the web console's login sessions: the cookie that stands for HTTP basic auth.
 *
 * POST /api/session with basic auth (the ordinary check, slow Argon2id ones included, done by
 * mgmt.c before routing) makes a session and answers Set-Cookie: sluice_session=TOKEN with
 * HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it) and Path=/;
 * DELETE /api/session ends it (logout). Later requests that carry the cookie and no basic auth
 * are the session's user. The page never holds the password after the login request.
 *
 * Invariants:
 *   - the token is 32 random bytes (64 hex digits); the table is keyed by its SHA-256, so the
 *     node keeps nothing that would log anyone in if it were read from memory or a core;
 *   - a session ends after mgmt_session_idle_timeout unused or mgmt_session_max_age after login,
 *     whichever comes first, and when its user is deleted or gets a new password (the stored
 *     hash is compared at every use); the user's tags are read afresh at every use, so a tag
 *     taken away applies at once; a loopback user's session (guest's) is refused from
 *     any other address, as its password would be (mgmt.c);
 *   - at most mgmt_session_max sessions: a new login past it ends the least recently used;
 *   - a request authenticated by the cookie must carry X-Sluice-Request unless it is a GET
 *     (mgmt.c): another site can make a browser send the cookie with a form, never with a
 *     custom header, so that is the CSRF guard (SameSite=Strict is the second one, and
 *     mgmt.c's origin check, which holds for every request, the third).
 */
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "core/clock.h"
#include "core/hex.h"
#include "core/log.h"
#include "core/mem.h"
#include "mgmt/mgmt_internal.h"

typedef struct session {
    char *user;
    uint8_t *hash; /* the user's stored password hash when the session began */
    size_t hash_len;
    uint64_t born_ms, used_ms; /* sl_now_ms() */
} session;

static void session_free(session *s)
{
    sl_free(s->user);
    sl_free(s->hash);
    sl_free(s);
}

void mgmt_sessions_init(mgmt *m)
{
    m->sessions = sl_map_new();
}

void mgmt_sessions_free(mgmt *m)
{
    if (!m->sessions)
        return;
    size_t pos = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(m->sessions, &pos, &k, &kl, &v))
        session_free(v);
    sl_map_free(m->sessions);
    m->sessions = NULL;
}

static int expired(const mgmt *m, const session *s, uint64_t now)
{
    return now - s->used_ms > MGMT_SESSION_IDLE_MS(m) || now - s->born_ms > MGMT_SESSION_MAX_MS(m);
}

/* The table key of a token: its SHA-256. -1 when the token is not 64 hex digits. */
static int token_key(const char *token, uint8_t key[SHA256_DIGEST_LENGTH])
{
    /* lowercase only, not core/hex.h's sl_is_hex: the key hashes the text as it was issued */
    if (!token || strlen(token) != 2 * MGMT_SESSION_TOKEN_BYTES ||
        strspn(token, "0123456789abcdef") != 2 * MGMT_SESSION_TOKEN_BYTES)
        return -1;
    SHA256((const unsigned char *)token, 2 * MGMT_SESSION_TOKEN_BYTES, key);
    return 0;
}

void mgmt_sessions_sweep(mgmt *m, uint64_t now)
{
    /* collect first: deleting while walking the map would skip entries */
    size_t n = sl_map_count(m->sessions), k = 0;
    if (!n)
        return;
    uint8_t(*dead)[SHA256_DIGEST_LENGTH] = sl_xmalloc(n * SHA256_DIGEST_LENGTH);
    size_t pos = 0;
    const char *key;
    size_t kl;
    void *v;
    while (sl_map_next(m->sessions, &pos, &key, &kl, &v))
        if (expired(m, v, now) && kl == SHA256_DIGEST_LENGTH)
            memcpy(dead[k++], key, SHA256_DIGEST_LENGTH);
    for (size_t i = 0; i < k; i++)
        session_free(sl_map_del(m->sessions, dead[i], SHA256_DIGEST_LENGTH));
    sl_free(dead);
}

/* Make room for one more: the least recently used session goes. */
static void evict_one(mgmt *m)
{
    size_t pos = 0;
    const char *key, *oldest = NULL;
    size_t kl;
    void *v;
    uint64_t t = UINT64_MAX;
    while (sl_map_next(m->sessions, &pos, &key, &kl, &v))
        if (((session *)v)->used_ms < t) {
            t = ((session *)v)->used_ms;
            oldest = key;
        }
    if (oldest) {
        uint8_t k[SHA256_DIGEST_LENGTH];
        memcpy(k, oldest, sizeof k);
        session *s = sl_map_del(m->sessions, k, sizeof k);
        sl_info("http: session of user '%s' ended to make room (%d sessions at most)", s->user,
                MGMT_SESSION_MAX(m));
        session_free(s);
    }
}

/* A new session for u; its token (NUL-terminated hex) in out. -1 when no randomness. */
static int session_new(mgmt *m, const acc_user *u, char out[2 * MGMT_SESSION_TOKEN_BYTES + 1])
{
    uint8_t raw[MGMT_SESSION_TOKEN_BYTES];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return -1;
    sl_hex(out, raw, sizeof raw);
    OPENSSL_cleanse(raw, sizeof raw);
    uint8_t key[SHA256_DIGEST_LENGTH];
    token_key(out, key);
    uint64_t now = sl_now_ms();
    mgmt_sessions_sweep(m, now);
    while (sl_map_count(m->sessions) >= MGMT_SESSION_MAX(m))
        evict_one(m);
    session *s = sl_xcalloc(1, sizeof *s);
    s->user = sl_xstrdup(u->name);
    s->hash = sl_xmalloc(u->hash_len ? u->hash_len : 1);
    memcpy(s->hash, u->hash, u->hash_len);
    s->hash_len = u->hash_len;
    s->born_ms = s->used_ms = now;
    session *old = sl_map_put(m->sessions, key, sizeof key, s);
    if (old) /* 2^-256: keep the table sane anyway */
        session_free(old);
    return 0;
}

const acc_user *mgmt_session_user(mgmt *m, const char *token)
{
    uint8_t key[SHA256_DIGEST_LENGTH];
    if (token_key(token, key) < 0)
        return NULL;
    session *s = sl_map_get(m->sessions, key, sizeof key);
    if (!s)
        return NULL;
    uint64_t now = sl_now_ms();
    const acc_user *u = acc_user_find(m->n->acc, s->user, strlen(s->user));
    if (expired(m, s, now) || !u || u->hash_len != s->hash_len ||
        CRYPTO_memcmp(u->hash, s->hash, s->hash_len)) {
        session_free(sl_map_del(m->sessions, key, sizeof key));
        return NULL;
    }
    s->used_ms = now;
    return u;
}

static enum MHD_Result reply_cookie(req *r, unsigned status, json_t *j, const char *cookie)
{
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "Set-Cookie", cookie);
    return mgmt_req_respond(r, status, resp);
}

/* /api/session: POST logs in (the request was authenticated with basic auth), DELETE logs
 * out, GET tells who the session is (as whoami, plus "authenticated": false without one). */
enum MHD_Result mgmt_api_session(req *r)
{
    if (r->nsegs != 1)
        return mgmt_reply_not_found(r);
    /* over HTTPS the cookie is never sent over plain HTTP */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    const char *secure = ci && ci->tls_session ? "; Secure" : "";
    char cookie[256];
    if (mgmt_req_is(r, "POST")) {
        if (r->via_session)
            return mgmt_reply_error(r, 400, "bad_request", "log in with basic auth, not a session");
        const acc_user *u = acc_user_find(r->m->n->acc, r->user, strlen(r->user));
        char token[2 * MGMT_SESSION_TOKEN_BYTES + 1];
        if (!u || session_new(r->m, u, token) < 0)
            return mgmt_reply_error(r, 503, "internal_error", "no session could be made");
        snprintf(cookie, sizeof cookie,
                 MGMT_SESSION_COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%d%s", token,
                 (int)(MGMT_SESSION_MAX_MS(r->m) / 1000), secure);
        OPENSSL_cleanse(token, sizeof token);
        sl_info("http: user '%s' logged in to the console", r->user);
        json_t *j = json_pack("{s:s,s:o,s:I}", "name", r->user, "tags", defs_tags_json(u->tags),
                              "idle_timeout_s", (json_int_t)(MGMT_SESSION_IDLE_MS(r->m) / 1000));
        cookie[sizeof cookie - 1] = 0;
        enum MHD_Result rc = reply_cookie(r, 200, j, cookie);
        OPENSSL_cleanse(cookie, sizeof cookie);
        return rc;
    }
    if (mgmt_req_is(r, "DELETE")) {
        const char *token =
            MHD_lookup_connection_value(r->conn, MHD_COOKIE_KIND, MGMT_SESSION_COOKIE);
        uint8_t key[SHA256_DIGEST_LENGTH];
        if (token && token_key(token, key) == 0) {
            session *s = sl_map_del(r->m->sessions, key, sizeof key);
            if (s) {
                sl_info("http: user '%s' logged out of the console", s->user);
                session_free(s);
            }
        }
        snprintf(cookie, sizeof cookie,
                 MGMT_SESSION_COOKIE "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0%s", secure);
        return reply_cookie(r, 200, json_object(), cookie);
    }
    if (mgmt_req_is(r, "GET")) {
        if (!r->authed) /* the console asks before it shows its login form */
            return mgmt_reply_json(r, 200, json_pack("{s:b}", "authenticated", 0));
        const acc_user *u = acc_user_find(r->m->n->acc, r->user, strlen(r->user));
        return mgmt_reply_json(r, 200,
                               json_pack("{s:b,s:s,s:o,s:b}", "authenticated", 1, "name", r->user,
                                         "tags", defs_tags_json(u ? u->tags : ""), "session",
                                         r->via_session));
    }
    return mgmt_reply_method_not_allowed(r);
}
