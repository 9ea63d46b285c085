/* resolve.h - host names of format names (DIRECT=OS:<host>) looked up off the event loop.
 *
 * getaddrinfo blocks (a slow or silent DNS server holds it for many seconds) and cannot be
 * cancelled, so lookups run on a few threads of their own: the loop posts a request with a
 * callback and goes on; link_resolver_fd becomes readable when answers are in, and
 * link_resolver_run_done calls each one's callback on the loop thread with its addresses
 * (numeric, for link_io_tcp_connect; in getaddrinfo's RFC 6724 order, duplicates dropped,
 * at most LINK_RESOLVE_ADDRS) or the resolver's error text.
 *
 * The loop bounds the wait itself (link_dns_timeout_ms in mgr.c): it cancels a request it
 * no longer waits for (link_resolve_cancel: the callback is never called; the thread that
 * holds it frees it when getaddrinfo returns). Threads are started on demand, at most
 * RESOLVE_THREADS, so a node that names no host runs none, and one stuck lookup does not
 * hold up the others' until every thread is stuck.
 *
 * Threads: every function runs on the loop thread; workers touch only their request's copy
 * of the name and the lists under the lock.
 */
#ifndef SL_LINK_RESOLVE_H
#define SL_LINK_RESOLVE_H

#include <stddef.h>

/* The addresses a lookup hands back: a name with more (round-robin DNS) is tried on these. */
#define LINK_RESOLVE_ADDRS 8
#define LINK_ADDR_LEN 46 /* INET6_ADDRSTRLEN */

typedef struct link_resolver link_resolver;
typedef struct link_resolve_req link_resolve_req;
/* addrs[0..n): the numeric addresses ("192.0.2.1", "2001:db8::1"), valid during the call; or
 * n == 0 and err says why. */
typedef void (*link_resolve_cb)(void *ctx, const char (*addrs)[LINK_ADDR_LEN], unsigned n,
                                const char *err);

/* NULL with errno when the eventfd cannot be made (threads come later, on demand). */
link_resolver *link_resolver_new(void);
/* Stops the threads: waits up to a second for lookups in progress; a thread still stuck in
 * getaddrinfo after that is left to the process's exit (it and the resolver are not freed,
 * as the thread still points at them). Callbacks not yet delivered are not called. */
void link_resolver_free(link_resolver *r);
int link_resolver_fd(const link_resolver *r);
/* Look host up (AF_UNSPEC, stream sockets); cb(ctx, ...) later on the loop thread. NULL when
 * no thread can be started (cb is then never called). */
link_resolve_req *link_resolve(link_resolver *r, const char *host, link_resolve_cb cb, void *ctx);
/* The owner stops waiting: the callback will not be called. */
void link_resolve_cancel(link_resolve_req *q);
/* On link_resolver_fd readable: deliver every finished request. */
void link_resolver_run_done(link_resolver *r);
/* Requests posted and not yet delivered or freed (cancelled ones count until they finish). */
unsigned link_resolver_pending(const link_resolver *r);

#endif
