/* browser.c - a browser's signals in a request's headers (see browser.h). */
#include "http/browser.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *header(struct MHD_Connection *c, const char *name)
{
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

int http_origin_is_host(const char *origin, const char *host)
{
    size_t skip = !strncasecmp(origin, "http://", 7)    ? 7
                  : !strncasecmp(origin, "https://", 8) ? 8
                                                        : 0;
    if (!skip || !host)
        return 0;
    const char *o = origin + skip, *dflt = skip == 7 ? ":80" : ":443";
    size_t ol = strlen(o), hl = strlen(host), dl = strlen(dflt);
    if (ol == hl)
        return !strncasecmp(o, host, hl);
    if (hl == ol + dl) /* Origin without the default port, Host with it */
        return !strncasecmp(o, host, ol) && !strcmp(host + ol, dflt);
    if (ol == hl + dl) /* and the other way round */
        return !strncasecmp(o, host, hl) && !strcmp(o + hl, dflt);
    return 0;
}

/* Sec-Fetch-Site: every browser of the last years sends it. Origin: sent with every POST, PUT
 * and DELETE a page makes. */
int http_cross_origin(struct MHD_Connection *c, char *why, size_t len)
{
    const char *site = header(c, "Sec-Fetch-Site");
    if (site) {
        if (!strcasecmp(site, "same-origin") || !strcasecmp(site, "none"))
            return 0;
        snprintf(why, len, "Sec-Fetch-Site: %.64s", site);
        return 1;
    }
    const char *origin = header(c, "Origin");
    if (!origin || http_origin_is_host(origin, header(c, "Host")))
        return 0;
    snprintf(why, len, "Origin %.128s is not this host", origin);
    return 1;
}

int http_from_a_page(struct MHD_Connection *c, const char *guard_header)
{
    const char *site = header(c, "Sec-Fetch-Site");
    return header(c, guard_header) || header(c, "Origin") || (site && strcasecmp(site, "none"));
}

int http_content_type_json(struct MHD_Connection *c, size_t body_len)
{
    (void)body_len;
    const char *ct = header(c, MHD_HTTP_HEADER_CONTENT_TYPE);
    /* No type at all: only a script can send a body without one (every form sends its type),
     * and a script's change from another origin carries Origin (the Fetch standard adds it to
     * every request that is not a GET or HEAD) and Sec-Fetch-Site, which http_cross_origin
     * refuses first. Clients that are no browser often send none (RabbitMQ takes any type). */
    if (!ct)
        return 1;
    ct += strspn(ct, " \t");
    static const char json[] = "application/json";
    size_t n = sizeof json - 1;
    return !strncasecmp(ct, json, n) &&
           (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t');
}
