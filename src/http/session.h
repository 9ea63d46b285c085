/* session.h - login sessions a cookie stands for, for any application of http/server.h: a
 * table of sessions, each a user name and the credential it logged in with (the stored
 * password hash), found by a random token. What a session is still worth (the user there, the
 * same password, the tags it has now) is the application's to check at every use; the table
 * keeps the times.
 *
 * Invariants:
 *   - a token is HTTP_SESSION_TOKEN_BYTES random bytes as lowercase hex; the table is keyed by
 *     its SHA-256, so nothing kept would log anyone in if it were read from memory or a core;
 *   - a session ends after lim->idle_ms unused or lim->max_ms after login, whichever comes
 *     first (swept, and refused when found later than that);
 *   - at most lim->max sessions: a new one past it ends the least recently used (logged).
 * The limits are passed at each call: they are live settings.
 */
#ifndef SL_HTTP_SESSION_H
#define SL_HTTP_SESSION_H

#include <stddef.h>
#include <stdint.h>

#define HTTP_SESSION_TOKEN_BYTES 32
#define HTTP_SESSION_TOKEN_LEN (2 * HTTP_SESSION_TOKEN_BYTES) /* hex digits */

typedef struct http_sessions http_sessions;

typedef struct http_session {
    char *user;
    uint8_t *cred; /* the credential (password hash) when the session began */
    size_t cred_len;
    uint64_t born_ms, used_ms; /* sl_now_ms() */
} http_session;

typedef struct http_session_limits {
    uint64_t idle_ms, max_ms; /* unused for, since login */
    unsigned max;             /* sessions at once */
} http_session_limits;

http_sessions *http_sessions_new(void);
void http_sessions_free(http_sessions *t); /* NULL: nothing */
size_t http_sessions_count(const http_sessions *t);
/* End the sessions past their time. */
void http_sessions_sweep(http_sessions *t, const http_session_limits *lim, uint64_t now);
/* A new session of user with cred (copied), begun at now (sl_now_ms()); its token
 * (NUL-terminated) in token. -1 when there is no randomness. */
int http_session_new(http_sessions *t, const http_session_limits *lim, const char *user,
                     const uint8_t *cred, size_t cred_len, uint64_t now,
                     char token[HTTP_SESSION_TOKEN_LEN + 1]);
/* The live session of token, marked used at now; NULL when there is none (unknown or
 * malformed token; expired: it ends). Valid until the table changes. */
http_session *http_session_find(http_sessions *t, const http_session_limits *lim, const char *token,
                                uint64_t now);
/* End the session of token: its user name (sl_free), or NULL when there was none. */
char *http_session_end(http_sessions *t, const char *token);

/* The Set-Cookie value for a session's token (token "" and max_age_s 0: the cookie's end)
 * into buf: HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it),
 * Path=/, Max-Age, and Secure when it was set over TLS (never sent over plain HTTP). */
void http_session_cookie(char *buf, size_t len, const char *name, const char *token, int max_age_s,
                         int secure);

#endif
