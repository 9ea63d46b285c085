/* request.h - what any application of http/server.h needs around a request and its answer,
 * with no meaning of its own: percent-decoding (strict for path segments, lenient for query
 * values), the HTTP status of an sl_err (or of the HRESULT another node answered with), and
 * responses carrying the headers every answer has (nosniff, Cache-Control): from a buffer,
 * or streamed from a producer as the socket takes the bytes.
 */
#ifndef SL_HTTP_REQUEST_H
#define SL_HTTP_REQUEST_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/buf.h"
#include "core/err.h"

/* ---- decoding ---- */
/* A path segment percent-decoded in place; -1 on a bad escape or an escaped NUL (%00). */
int http_pct_decode(char *s);
/* url's path split at '/' (empty segments skipped) into segs (new strings, sl_free; kept in
 * segs[*n] on failure too), each percent-decoded after the split (so "%2F" stays inside its
 * segment) and then checked by valid (NULL: any), in order. A first segment that is exactly
 * prefix (raw; NULL: none) is dropped and *prefixed set. 0; -1 past max segments or on a bad
 * escape; -2 when valid refuses a segment. */
int http_path_split(const char *url, const char *prefix, int *prefixed, char **segs, size_t max,
                    size_t *n, int (*valid)(const char *seg));
/* A query value as browsers encode forms: '+' is a space, %XX a byte; a bad escape and %00
 * are left as they are. A new string (sl_free). */
char *http_query_decode(const char *raw);

/* ---- the connection ---- */
/* 1 when the request came over TLS (the HTTPS listener). */
int http_req_over_tls(struct MHD_Connection *c);
/* The client's address, or NULL when libmicrohttpd does not say. */
const struct sockaddr *http_req_client_addr(struct MHD_Connection *c);

/* ---- statuses ---- */
/* The HTTP status of a failure: 404 for what is not there, 403 refused, 409 locked or full,
 * 413, 429, 503 for resources, 501, 500 for internal and I/O errors, 400 for the rest; 200
 * for SL_OK. */
unsigned http_status_of(sl_err e);
/* The same for the sl_err whose HRESULT is code; 502 for a code no sl_err has (or 0). */
unsigned http_status_of_hresult(unsigned long code);

/* ---- responses ---- */
/* text (len bytes; taken and freed by libmicrohttpd, or NULL for none) with Content-Type
 * ctype (NULL: none), X-Content-Type-Options: nosniff (nothing in a reply is taken for HTML,
 * whatever it holds) and Cache-Control cache (NULL: none). */
struct MHD_Response *http_response_text(char *text, size_t len, const char *ctype,
                                        const char *cache);
/* A producer of a streamed body: appends the next bytes to out (about want of them, more is
 * kept for later); returns 0 once what it appended is the end. */
typedef int (*http_more_fn)(void *ctx, sl_buf *out, size_t want);
/* A body of unknown length made by more() as the socket takes it, asked for block bytes at a
 * time, with http_response_text's headers; done(ctx) when libmicrohttpd lets go of it
 * (finished or not). Memory is what more() made and is not yet sent, not the whole body. */
struct MHD_Response *http_response_stream(size_t block, http_more_fn more, void *ctx,
                                          void (*done)(void *ctx), const char *ctype,
                                          const char *cache);

#endif
