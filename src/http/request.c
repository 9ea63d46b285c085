/* request.c - decoding, statuses and responses for any HTTP application (see request.h). */
#include "http/request.h"

#include <string.h>

#include "core/hex.h"
#include "core/mem.h"

/* ------------------------------------------------------------------------------------------
 * Decoding
 */

int http_pct_decode(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p == '%') {
            int v = sl_hex_byte(p + 1);
            if (v <= 0) /* a bad escape, or %00 */
                return -1;
            *o++ = (char)v;
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return 0;
}

int http_path_split(const char *url, const char *prefix, int *prefixed, char **segs, size_t max,
                    size_t *n, int (*valid)(const char *seg))
{
    *prefixed = 0;
    const char *p = url;
    size_t pl = prefix ? strlen(prefix) : 0;
    for (int first = 1; *p; first = 0) {
        p += strspn(p, "/");
        size_t len = strcspn(p, "/");
        if (!len)
            break;
        if (first && prefix && len == pl && !memcmp(p, prefix, pl)) {
            *prefixed = 1;
        } else {
            if (*n == max)
                return -1;
            char *s = sl_xstrndup(p, len);
            segs[(*n)++] = s;
            if (http_pct_decode(s) < 0)
                return -1;
            if (valid && !valid(s))
                return -2;
        }
        p += len;
    }
    return 0;
}

char *http_query_decode(const char *raw)
{
    char *s = sl_xstrdup(raw), *o = s;
    for (const char *p = raw; *p; p++) {
        if (*p == '+') {
            *o++ = ' ';
        } else if (*p == '%' && sl_hex_byte(p + 1) > 0) { /* %00 is left as it is */
            *o++ = (char)sl_hex_byte(p + 1);
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return s;
}

/* ------------------------------------------------------------------------------------------
 * The connection
 */

int http_req_over_tls(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    return ci && ci->tls_session;
}

const struct sockaddr *http_req_client_addr(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return ci ? ci->client_addr : NULL;
}

/* ------------------------------------------------------------------------------------------
 * Statuses
 */

unsigned http_status_of(sl_err e)
{
    switch (e) {
    case SL_OK:
        return 200;
    case SL_ERR_NOT_FOUND:
    case SL_ERR_QUEUE_NOT_FOUND:
    case SL_ERR_QUEUE_DELETED:
    case SL_ERR_QUEUE_NOT_ACTIVE:
    case SL_ERR_MESSAGE_NOT_FOUND:
    case SL_ERR_NO_ROUTE:
    case SL_ERR_INVALID_HANDLE:
    case SL_ERR_STALE_HANDLE:
    case SL_ERR_MEMBER_NOT_FOUND:
    case SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE:
        return 404;
    case SL_ERR_ACCESS_REFUSED:
    case SL_ERR_NOT_ALLOWED:
        return 403;
    case SL_ERR_RESOURCE_LOCKED:
    case SL_ERR_MESSAGE_LOCKED_UNDER_TX:
    case SL_ERR_QUEUE_FULL:
        return 409;
    case SL_ERR_CONTENT_TOO_LARGE:
        return 413;
    case SL_ERR_HANDLE_LIMIT:
        return 429;
    case SL_ERR_RESOURCE:
    case SL_ERR_NOMEM:
    case SL_ERR_SERVICE_NOT_AVAILABLE:
    case SL_ERR_NO_DS:
    case SL_ERR_DTC_CONNECT:
        return 503;
    case SL_ERR_NOT_IMPLEMENTED:
        return 501;
    case SL_ERR_INTERNAL:
    case SL_ERR_IO:
        return 500;
    default:
        return 400;
    }
}

unsigned http_status_of_hresult(unsigned long code)
{
    for (int e = 1; code && e < SL_ERR__COUNT; e++)
        if (sl_err_get((sl_err)e)->hresult == code)
            return http_status_of((sl_err)e);
    return 502;
}

/* ------------------------------------------------------------------------------------------
 * Responses
 */

static void common_headers(struct MHD_Response *resp, const char *ctype, const char *cache)
{
    if (ctype)
        MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    if (cache)
        MHD_add_response_header(resp, "Cache-Control", cache);
}

struct MHD_Response *http_response_text(char *text, size_t len, const char *ctype,
                                        const char *cache)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, text, text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    common_headers(resp, ctype, cache);
    return resp;
}

typedef struct stream {
    http_more_fn more;
    void *ctx;
    void (*done)(void *ctx);
    sl_buf pend; /* bytes made, not yet taken by libmicrohttpd */
    int ended;
} stream;

static ssize_t stream_cb(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *s = cls;
    if (sl_buf_unread(&s->pend) == 0) {
        if (s->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        sl_buf_consume(&s->pend, 0); /* empty: back to the start of the block */
        if (!s->more(s->ctx, &s->pend, max))
            s->ended = 1;
        if (sl_buf_unread(&s->pend) == 0) /* nothing more: the end */
            return s->ended ? MHD_CONTENT_READER_END_OF_STREAM : 0;
    }
    size_t n = sl_buf_unread(&s->pend);
    if (n > max)
        n = max;
    memcpy(buf, sl_buf_head(&s->pend), n);
    sl_buf_consume(&s->pend, n);
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    stream *s = cls;
    if (s->done)
        s->done(s->ctx);
    sl_buf_free(&s->pend);
    sl_free(s);
}

struct MHD_Response *http_response_stream(size_t block, http_more_fn more, void *ctx,
                                          void (*done)(void *ctx), const char *ctype,
                                          const char *cache)
{
    stream *s = sl_xcalloc(1, sizeof *s);
    s->more = more;
    s->ctx = ctx;
    s->done = done;
    sl_buf_init(&s->pend);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, block, stream_cb, s, stream_free);
    common_headers(resp, ctype, cache);
    return resp;
}
