/* static.c - the web console's files, served at / on the management port (the API stays
 * under /api/), and the reference in docs/ at /docs/PAGE.md (as text/plain, so a browser that
 * opens one shows the Markdown and runs nothing in it; the console's Help links fetch them and
 * render them with marked, built in as /vendor/marked/marked.min.js from Debian's libjs-marked).
 *
 * The files are built into the binary (console/ and the .md files of docs/ ->
 * $(BUILD)/gen/console_assets.c by scripts/embed-console.sh), so `make run` serves them with
 * nothing to install, and a path can only ever name one of them: a request path is compared,
 * as it came (still percent-encoded), with the table's paths; nothing here touches the
 * filesystem, so no "..", "%2e%2e" or symlink can reach another file.
 *
 * Every reply carries a Content-Security-Policy that allows scripts, styles and fetches from
 * this origin only (no inline script, no eval, no framing), nosniff, and no referrer; its
 * headers, ETag and 304 are http/static.c's.
 */
#include <string.h>

#include "http/static.h"
#include "mgmt/console_assets.h"
#include "mgmt/mgmt_internal.h"

#define CONSOLE_CSP                                                                                \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "              \
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "                   \
    "frame-ancestors 'none'"

const struct console_asset *mgmt_console_find(const char *path)
{
    for (unsigned i = 0; i < console_n_assets; i++)
        if (!strcmp(console_assets[i].path, path))
            return &console_assets[i];
    return NULL;
}

enum MHD_Result mgmt_serve_static(req *r, const char *url)
{
    const struct console_asset *a = mgmt_console_find(!strcmp(url, "/") ? "/index.html" : url);
    if (!a)
        return mgmt_reply_not_found(r);
    if (!mgmt_req_is(r, "GET")) /* HEAD is GET here */
        return mgmt_reply_method_not_allowed(r);
    unsigned status;
    struct MHD_Response *resp =
        http_static_response(r->conn, a->data, a->len, a->ctype, a->etag, CONSOLE_CSP, &status);
    return mgmt_req_respond(r, status, resp);
}
