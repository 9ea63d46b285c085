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
 * this origin only (no inline script, no eval, no framing), nosniff, and no referrer. Files are
 * not fingerprinted, so they are "no-cache" with an ETag: the browser revalidates each load and
 * gets a body-less 304 when it has the file already.
 */
#include <string.h>

#include "mgmt/console_assets.h"
#include "mgmt/mgmt_internal.h"

#define CONSOLE_CSP                                                                                \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "              \
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "                   \
    "frame-ancestors 'none'"

const struct console_asset *console_find(const char *path)
{
    for (unsigned i = 0; i < console_n_assets; i++)
        if (!strcmp(console_assets[i].path, path))
            return &console_assets[i];
    return NULL;
}

int console_etag_matches(const char *inm, const char *etag)
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

enum MHD_Result serve_static(req *r, const char *url)
{
    const struct console_asset *a = console_find(!strcmp(url, "/") ? "/index.html" : url);
    if (!a)
        return reply_not_found(r);
    if (!req_is(r, "GET")) /* HEAD is GET here */
        return reply_method_not_allowed(r);
    const char *inm =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    int fresh = console_etag_matches(inm, a->etag);
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        fresh ? 0 : a->len, fresh ? NULL : (void *)a->data, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Content-Type", a->ctype);
    MHD_add_response_header(resp, "ETag", a->etag);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "Content-Security-Policy", CONSOLE_CSP);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    return req_respond(r, fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK, resp);
}
