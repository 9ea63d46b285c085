/* fuzz_console.c - libFuzzer target for what the web console's file server reads from a
 * request (src/mgmt/static.c): the path, looked up in the built-in table, and the
 * If-None-Match header, matched against an ETag.
 *
 * Checked: the lookup returns only an entry whose path is the input byte for byte (no
 * normalisation, so no "..", "%2e" or "//" reaches another file); the header matcher never
 * reads past the string and finds an ETag the input lists verbatim (appended after a comma).
 *
 * Seeds: tests/fuzz/corpus/console/ (paths and header values).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mgmt/console_assets.h"
#include "mgmt/mgmt_internal.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = 0;
    const struct console_asset *a = mgmt_console_find(s);
    if (a)
        CHECK(!strcmp(a->path, s) && a->path[0] == '/' && !strstr(a->path, ".."));
    for (unsigned i = 0; i < console_n_assets; i++)
        http_etag_matches(s, console_assets[i].etag);
    /* the same header with a known ETag after it must match */
    const char *etag = console_n_assets ? console_assets[0].etag : "\"x\"";
    size_t el = strlen(etag), n = strlen(s);
    char *h = malloc(n + el + 3);
    memcpy(h, s, n);
    memcpy(h + n, ", ", 2);
    memcpy(h + n + 2, etag, el + 1);
    CHECK(http_etag_matches(h, etag));
    free(h);
    free(s);
    return 0;
}
