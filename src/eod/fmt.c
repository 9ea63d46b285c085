/* fmt.c - remote direct format names (reference/msmq.md section 7.4), as outgoing queues are
 * named and found.
 *
 *   [FormatName:]DIRECT=TCP:<address>[:<port>]\private$\<queue>
 *   [FormatName:]DIRECT=OS:<host>[:<port>]\private$\<queue>
 *
 * The port is a Sluice extension for nodes that do not listen on 5672 (MSMQ has none: it
 * always talks to 1801). An IPv6 address is written in brackets when a port follows
 * ("[::1]:5673"). Matching is case-insensitive; the address is lower-cased in the canonical
 * name and the queue part keeps its first spelling (the destination's names are
 * case-sensitive when it is a foreign broker). Subqueues and journals are not send targets
 * (MSMQ: never send to a subqueue), so ';' is refused.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "eod/outq.h"

static int take_prefix(const char **p, const char *end, const char *pre)
{
    size_t n = strlen(pre);
    if ((size_t)(end - *p) < n || strncasecmp(*p, pre, n))
        return 0;
    *p += n;
    return 1;
}

int eod_fmt_is_candidate(const char *s, size_t len)
{
    const char *p = s, *end = s + len;
    take_prefix(&p, end, "FormatName:");
    return take_prefix(&p, end, "DIRECT=");
}

int eod_fmt_parse(const char *s, size_t len, eod_addr *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *p = s, *end = s + len;
    take_prefix(&p, end, "FormatName:");
    if (!take_prefix(&p, end, "DIRECT=")) {
        snprintf(err, errlen,
                 "'%.*s': a remote queue is named DIRECT=TCP:<address>\\private$\\<queue>",
                 (int)len, s);
        return -1;
    }
    if (!take_prefix(&p, end, "TCP:") && !take_prefix(&p, end, "OS:")) {
        snprintf(err, errlen, "'%.*s': protocol must be TCP: or OS:", (int)len, s);
        return -1;
    }
    const char *bs = memchr(p, '\\', (size_t)(end - p));
    if (!bs || bs == p) {
        snprintf(err, errlen, "'%.*s': expected <address>[:<port>]\\private$\\<queue>", (int)len,
                 s);
        return -1;
    }
    /* address and optional port */
    const char *host = p, *hend = bs, *colon = NULL;
    if (*host == '[') {
        const char *rb = memchr(host, ']', (size_t)(bs - host));
        if (!rb) {
            snprintf(err, errlen, "'%.*s': unterminated [address]", (int)len, s);
            return -1;
        }
        host++;
        hend = rb;
        if (rb + 1 < bs) {
            if (rb[1] != ':') {
                snprintf(err, errlen, "'%.*s': junk after ]", (int)len, s);
                return -1;
            }
            colon = rb + 1;
        }
    } else {
        const char *c1 = memchr(host, ':', (size_t)(bs - host));
        if (c1 && !memchr(c1 + 1, ':', (size_t)(bs - c1 - 1))) { /* one ':' = a port */
            colon = c1;
            hend = c1;
        }
    }
    size_t hlen = (size_t)(hend - host);
    if (hlen == 0 || hlen >= sizeof out->host) {
        snprintf(err, errlen, "'%.*s': bad address", (int)len, s);
        return -1;
    }
    int has_colon = memchr(host, ':', hlen) != NULL;
    for (size_t i = 0; i < hlen; i++) {
        unsigned char ch = (unsigned char)host[i];
        /* an address with ':' is IPv6: hex digits, ':' and '.' only */
        if (ch <= 0x20 || ch >= 0x7f || ch == '/' || ch == '\\' || ch == '[' || ch == ']' ||
            (has_colon && !isxdigit(ch) && ch != ':' && ch != '.')) {
            snprintf(err, errlen, "'%.*s': bad character in the address", (int)len, s);
            return -1;
        }
        out->host[i] = (char)tolower(ch);
    }
    out->port = LINK_DEFAULT_PORT;
    if (colon) {
        long port = 0;
        const char *d = colon + 1;
        if (d == bs) {
            snprintf(err, errlen, "'%.*s': empty port", (int)len, s);
            return -1;
        }
        for (; d < bs; d++) {
            if (!isdigit((unsigned char)*d) || port > 65535) {
                port = -1;
                break;
            }
            port = port * 10 + (*d - '0');
        }
        if (port <= 0 || port > 65535) {
            snprintf(err, errlen, "'%.*s': port must be 1..65535", (int)len, s);
            return -1;
        }
        out->port = (int)port;
        out->port_given = 1;
    }
    p = bs + 1;
    if (!take_prefix(&p, end, "private$\\")) {
        snprintf(err, errlen, "'%.*s': only private queues (\\private$\\<queue>) can be sent to",
                 (int)len, s);
        return -1;
    }
    size_t qlen = (size_t)(end - p);
    if (qlen == 0 || qlen >= sizeof out->queue || qlen > 255) {
        snprintf(err, errlen, "'%.*s': the queue name must be 1..255 characters", (int)len, s);
        return -1;
    }
    for (size_t i = 0; i < qlen; i++) {
        if (p[i] == ';' || p[i] == '\\' || p[i] == 0) {
            snprintf(err, errlen,
                     "'%.*s': subqueues, journals and '\\' are not send targets of a remote queue",
                     (int)len, s);
            return -1;
        }
    }
    memcpy(out->queue, p, qlen);
    out->queue[qlen] = 0;
    return 0;
}

void eod_fmt_canonical(const eod_addr *a, char *buf, size_t len)
{
    if (strchr(a->host, ':'))
        snprintf(buf, len, "DIRECT=TCP:[%s]:%d\\private$\\%s", a->host, a->port, a->queue);
    else
        snprintf(buf, len, "DIRECT=TCP:%s:%d\\private$\\%s", a->host, a->port, a->queue);
}
