/* session.c - the web console's login sessions: the cookie that stands for HTTP basic auth.
 *
 * POST /api/session with basic auth (the ordinary check, slow Argon2id ones included, done by
 * mgmt.c before routing) makes a session and answers Set-Cookie: sluice_session=TOKEN with
 * HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it) and Path=/;
 * DELETE /api/session ends it (logout). Later requests that carry the cookie and no basic auth
 * are the session's user. The page never holds the password after the login request.
 *
 * Invariants (the table, its tokens and times are http/session.c's):
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
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "http/request.h"
#include "http/session.h"
#include "mgmt/mgmt_internal.h"

static http_session_limits limits(const mgmt *m)
{
    http_session_limits lim = {MGMT_SESSION_IDLE_MS(m), MGMT_SESSION_MAX_MS(m),
                               MGMT_SESSION_MAX(m)};
    return lim;
}

void mgmt_sessions_init(mgmt *m)
{
    m->sessions = http_sessions_new();
}

void mgmt_sessions_free(mgmt *m)
{
    http_sessions_free(m->sessions);
    m->sessions = NULL;
}

void mgmt_sessions_sweep(mgmt *m, uint64_t now)
{
    http_session_limits lim = limits(m);
    http_sessions_sweep(m->sessions, &lim, now);
}

const acc_user *mgmt_session_user(mgmt *m, const char *token)
{
    http_session_limits lim = limits(m);
    http_session *s = http_session_find(m->sessions, &lim, token, sl_now_ms());
    if (!s)
        return NULL;
    const acc_user *u = acc_user_find(m->n->acc, s->user, strlen(s->user));
    if (!u || u->hash_len != s->cred_len || CRYPTO_memcmp(u->hash, s->cred, s->cred_len)) {
        sl_free(http_session_end(m->sessions, token)); /* deleted, or a new password */
        return NULL;
    }
    return u;
}

static enum MHD_Result reply_cookie(req *r, unsigned status, json_t *j, const char *cookie)
{
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    struct MHD_Response *resp =
        http_response_text(text, strlen(text), "application/json", "no-store");
    MHD_add_response_header(resp, "Set-Cookie", cookie);
    return mgmt_req_respond(r, status, resp);
}

/* /api/session: POST logs in (the request was authenticated with basic auth), DELETE logs
 * out, GET tells who the session is (as whoami, plus "authenticated": false without one). */
enum MHD_Result mgmt_api_session(req *r)
{
    if (r->nsegs != 1)
        return mgmt_reply_not_found(r);
    int secure = http_req_over_tls(r->conn); /* then never sent over plain HTTP */
    char cookie[256];
    if (mgmt_req_is(r, "POST")) {
        if (r->via_session)
            return mgmt_reply_error(r, 400, "bad_request", "log in with basic auth, not a session");
        const acc_user *u = acc_user_find(r->m->n->acc, r->user, strlen(r->user));
        char token[HTTP_SESSION_TOKEN_LEN + 1];
        http_session_limits lim = limits(r->m);
        if (!u || http_session_new(r->m->sessions, &lim, u->name, u->hash, u->hash_len, sl_now_ms(),
                                   token) < 0)
            return mgmt_reply_error(r, 503, "internal_error", "no session could be made");
        http_session_cookie(cookie, sizeof cookie, MGMT_SESSION_COOKIE, token,
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
        char *user = token ? http_session_end(r->m->sessions, token) : NULL;
        if (user) {
            sl_info("http: user '%s' logged out of the console", user);
            sl_free(user);
        }
        http_session_cookie(cookie, sizeof cookie, MGMT_SESSION_COOKIE, "", 0, secure);
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
