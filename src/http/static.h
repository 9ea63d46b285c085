/* static.h - replies with files built into the binary (the web console's): their content
 * type, an ETag the browser revalidates with (If-None-Match: a body-less 304 when it has the
 * file already), and the headers that keep a page's content from being misread or framed.
 * Finding the file is the caller's (a table of its own: nothing here touches the filesystem).
 */
#ifndef SL_HTTP_STATIC_H
#define SL_HTTP_STATIC_H

#include <microhttpd.h>
#include <stddef.h>

/* 1 when an If-None-Match header value lists etag (weak or strong) or is "*". */
int http_etag_matches(const char *inm, const char *etag);

/* The reply to a GET of a file (data stays the caller's, for the process's life): 200 with
 * it, or 304 without it when the request's If-None-Match lists etag; *status says which.
 * Headers: Content-Type ctype, ETag, Cache-Control: no-cache (files are not fingerprinted),
 * Content-Security-Policy csp, X-Content-Type-Options: nosniff, X-Frame-Options: DENY,
 * Referrer-Policy: no-referrer. */
struct MHD_Response *http_static_response(struct MHD_Connection *c, const void *data, size_t len,
                                          const char *ctype, const char *etag, const char *csp,
                                          unsigned *status);

#endif
