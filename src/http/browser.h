/* browser.h - what a request says about the browser that sent it, for an application that
 * must not let another site's page act through its users' browsers (docs/http-api.md
 * "Requests from browsers"): a browser adds cookies, or Basic credentials it cached, to
 * requests any page makes. Plain header reading: what to refuse is the application's.
 */
#ifndef SL_HTTP_BROWSER_H
#define SL_HTTP_BROWSER_H

#include <microhttpd.h>
#include <stddef.h>

/* Does Origin (scheme://host[:port]) name the host the request was sent to (Host)? The scheme
 * is not compared: behind a proxy that ends TLS the browser's https origin reaches the plain
 * listener. A default port may be left out of either. */
int http_origin_is_host(const char *origin, const char *host);
/* 1 when the request was made by a browser for a page of another origin (the reason in why):
 * Sec-Fetch-Site when it is there, else Origin against Host. A client that is no browser
 * sends neither (it is not a page: nothing to forge). */
int http_cross_origin(struct MHD_Connection *c, char *why, size_t len);
/* 1 for a page's request, not an API client's or a URL the user opened himself: one with
 * the application's own header (guard_header, which only its pages send), or whose browser
 * says it came from a page (Origin, or a Sec-Fetch-Site other than "none"). Its 401 must
 * carry no Basic challenge, or the browser prompts on behalf of whichever page asked. */
int http_from_a_page(struct MHD_Connection *c, const char *guard_header);
/* 1 when the body (body_len bytes) may be taken as JSON: a Content-Type of application/json
 * (parameters such as charset allowed), or none at all. No form of another site can send the
 * JSON type without asking first (a CORS preflight), and none can leave the type out: a body
 * without one comes from a script, which a browser marks with Origin (http_cross_origin). */
int http_content_type_json(struct MHD_Connection *c, size_t body_len);

#endif
