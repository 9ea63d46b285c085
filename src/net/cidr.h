/* cidr.h - address lists in CIDR notation, for doors that have no authentication of their
 * own (msmq.allowed_senders: MS-MQQB carries no credentials, so which addresses may open a
 * session is the operator's only lever, as a Windows admin's firewall is).
 *
 * A list is entries separated by commas and/or spaces: IPv4 "a.b.c.d/n" (n 0..32), IPv6
 * "x::y/n" (n 0..128), a bare address (all of its bits), or "any" (everything). Bits of an
 * address past its prefix are ignored (10.1.2.3/8 is 10.0.0.0/8).
 * Invariant: an IPv4-mapped IPv6 peer (::ffff:a.b.c.d, how a dual-stack listener sees an
 * IPv4 sender) is matched as that IPv4 address, so one list reads the same on either kind
 * of listener.
 */
#ifndef SL_NET_CIDR_H
#define SL_NET_CIDR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct sl_cidr {
    uint8_t v6;   /* 0: addr[0..3] is IPv4; 1: addr is IPv6 */
    uint8_t bits; /* prefix length */
    uint8_t addr[16];
} sl_cidr;

typedef struct sl_cidr_list {
    sl_cidr *v;
    size_t n;
    int any; /* "any": every address */
} sl_cidr_list;

/* Parse text into *out (freed by sl_cidr_list_free, also after a failure). 0, or -1 with why
 * in err (an empty list is an error: say "any" for everything). */
int sl_cidr_list_parse(const char *text, sl_cidr_list *out, char *err, size_t errlen);
void sl_cidr_list_free(sl_cidr_list *l);
/* 1 when the address (AF_INET or AF_INET6) is in the list. */
int sl_cidr_list_match(const sl_cidr_list *l, const struct sockaddr_storage *sa);

#endif
