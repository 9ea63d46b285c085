/* static.c - built-in files as HTTP replies, with ETags (see static.h).
 *
 * Files are not fingerprinted, so they are "no-cache" with an ETag: the browser revalidates
 * each load and gets a body-less 304 when it has the file already.
 */
#include <string.h>

#include "http/static.h"

int http_etag_matches(const char *inm, const char *etag)
{
    if (!inm)
        return 0;
    size_t el = strlen(etag);
    for (const char *p = inm; *p;) {
        p += strspn(p, " ,");
        if (!strncmp(p, "W/", 2))
            p += 2;
        size_t n = strcspn(p, ",");
        while (n && p[n - 1] == ' ')
            n--;
        if ((n == 1 && *p == '*') || (n == el && !memcmp(p, etag, el)))
            return 1;
        p += n;
        p += strcspn(p, ",");
    }
    return 0;
}

struct MHD_Response *http_static_response(struct MHD_Connection *c, const void *data, size_t len,
                                          const char *ctype, const char *etag, const char *csp,
                                          unsigned *status)
{
    const char *inm =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    int fresh = http_etag_matches(inm, etag);
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        fresh ? 0 : len, fresh ? NULL : (void *)data, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "ETag", etag);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "Content-Security-Policy", csp);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    *status = fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK;
    return resp;
}
