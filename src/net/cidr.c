/* cidr.c - address lists in CIDR notation (cidr.h). */
#include "net/cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"

static int parse_one(const char *s, sl_cidr *c)
{
    char a[INET6_ADDRSTRLEN + 8];
    const char *slash = strchr(s, '/');
    size_t al = slash ? (size_t)(slash - s) : strlen(s);
    if (al == 0 || al >= sizeof a)
        return -1;
    memcpy(a, s, al);
    a[al] = 0;
    memset(c, 0, sizeof *c);
    unsigned max;
    if (inet_pton(AF_INET, a, c->addr) == 1) {
        max = 32;
    } else if (inet_pton(AF_INET6, a, c->addr) == 1) {
        c->v6 = 1;
        max = 128;
    } else {
        return -1;
    }
    unsigned bits = max;
    if (slash) {
        const char *d = slash + 1;
        if (!*d || strlen(d) > 3 || strspn(d, "0123456789") != strlen(d))
            return -1;
        bits = (unsigned)atoi(d);
        if (bits > max)
            return -1;
    }
    c->bits = (uint8_t)bits;
    return 0;
}

int sl_cidr_list_parse(const char *text, sl_cidr_list *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *p = text ? text : "";
    size_t cap = 0;
    for (;;) {
        p += strspn(p, ", \t");
        if (!*p)
            break;
        size_t n = strcspn(p, ", \t");
        char tok[80];
        if (n >= sizeof tok) {
            snprintf(err, errlen, "'%.40s...' is not an address or ADDRESS/BITS", p);
            return -1;
        }
        memcpy(tok, p, n);
        tok[n] = 0;
        p += n;
        if (!strcmp(tok, "any")) {
            out->any = 1;
            continue;
        }
        sl_cidr c;
        if (parse_one(tok, &c) < 0) {
            snprintf(err, errlen,
                     "'%s' is not an address or ADDRESS/BITS (IPv4 /0..32, IPv6 /0..128)", tok);
            return -1;
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 8;
            out->v = sl_xrealloc(out->v, cap * sizeof *out->v);
        }
        out->v[out->n++] = c;
    }
    if (!out->n && !out->any) {
        snprintf(err, errlen, "an empty list (say \"any\" for every address)");
        return -1;
    }
    return 0;
}

void sl_cidr_list_free(sl_cidr_list *l)
{
    sl_free(l->v);
    memset(l, 0, sizeof *l);
}

static int prefix_eq(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    unsigned whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, whole))
        return 0;
    if (!rest)
        return 1;
    uint8_t mask = (uint8_t)(0xFFu << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

int sl_cidr_list_match(const sl_cidr_list *l, const struct sockaddr_storage *sa)
{
    if (l->any)
        return 1;
    uint8_t a[16];
    int v6;
    if (sa->ss_family == AF_INET) {
        memcpy(a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        v6 = 0;
    } else if (sa->ss_family == AF_INET6) {
        const struct in6_addr *x = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(x)) {
            memcpy(a, x->s6_addr + 12, 4);
            v6 = 0;
        } else {
            memcpy(a, x->s6_addr, 16);
            v6 = 1;
        }
    } else {
        return 0;
    }
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].v6 == v6 && prefix_eq(a, l->v[i].addr, l->v[i].bits))
            return 1;
    return 0;
}
