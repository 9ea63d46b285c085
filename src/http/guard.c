/* guard.c - keeps connections that have not logged in from taking an HTTP server (the
 * management API's) down.
 *
 * Every HTTP(S) connection MHD holds has an http_guard_conn (its socket context). A connection is
 * "unproven" until one of its requests authenticates, then "proven" for good.
 *
 *   - Deadline. An unproven connection that is waiting for a request (from accept through the
 *     TLS handshake to the end of the request header; again after each answer on a kept-alive
 *     connection) is closed mgmt_handshake_timeout ms (*handshake_ms) after it started
 *     waiting. The absolute deadline is what stops a slow sender: MHD's own timeout is an idle one
 * that every byte renews.
 *   - Separate limits. Unproven connections are capped per listener (mgmt_unauthenticated_max:
 *     *unauth_max); a new one beyond the cap closes the oldest unproven one. They never count
 * against mgmt_connection_max, which caps proven ones (both listeners together, n_proven) and is
 * the only thing that stops the acceptor (http/server.c). So a flood of connections that never log
 * in can only push each other out: a client that sends its request header and a valid login
 * promptly always gets in. Per-address limits were not chosen: an attacker with many addresses
 *     walks past them, and a user behind the same proxy or NAT (or on loopback) as the
 *     attacker would be locked out with him.
 *
 * Closing is a shutdown() of the socket: MHD then reads end-of-file on its next run and closes
 * the connection the usual way (its notifications, through http/server.c, keep every count right);
 * libmicrohttpd has no call to close a connection from outside a request.
 *
 * Invariants: a door's list holds exactly its unproven connections, in the order they last
 * started waiting (so the first one that is waiting has the earliest deadline); an entry
 * with a request in progress has deadline 0; n_unproven is the list's length.
 */
#include <sys/socket.h>

#include "core/clock.h"
#include "core/list.h"
#include "core/log.h"
#include "core/mem.h"
#include "http/guard.h"

static void unlink_conn(http_guard_door *d, http_guard_conn *c)
{
    SL_LIST_UNLINK_TAIL(d->head, d->tail, c, prev, next);
    c->prev = c->next = NULL;
    d->n_unproven--;
}

static void append_conn(http_guard_door *d, http_guard_conn *c)
{
    SL_LIST_APPEND_TAIL(d->head, d->tail, c, prev, next);
    d->n_unproven++;
}

/* Closed from outside: MHD sees end-of-file and tells on_connection. Taken off the list at
 * once so it is neither closed twice nor counted meanwhile. */
static void drop(http_guard *g, http_guard_conn *c, const char *why)
{
    http_guard_door *d = c->door;
    unlink_conn(d, c);
    c->dropped = 1;
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    d->dropped++;
    sl_debug("%s: closed a connection that %s", d->name, why);
    /* MHD notices on its next run (its epoll fd turns readable; the timer makes sure) */
    sl_timer_start(g->loop, g->kick, sl_loop_now(g->loop));
}

static uint64_t first_deadline(const http_guard_door *d)
{
    for (const http_guard_conn *c = d->head; c; c = c->next)
        if (c->deadline_ms)
            return c->deadline_ms;
    return 0;
}

static void arm(http_guard *g)
{
    uint64_t a = first_deadline(&g->plain), b = first_deadline(&g->tls);
    uint64_t at = a && b ? (a < b ? a : b) : a ? a : b;
    if (at)
        sl_timer_start(g->loop, &g->t, at);
    else if (sl_timer_armed(&g->t))
        sl_timer_stop(g->loop, &g->t);
}

static void sweep(http_guard *g, http_guard_door *d, uint64_t now)
{
    /* bounded: each pass either drops an entry or stops */
    for (http_guard_conn *c = d->head, *next; c; c = next) {
        next = c->next;
        if (!c->deadline_ms)
            continue;
        if (c->deadline_ms > now)
            break; /* waiting entries are in deadline order */
        drop(g, c, "sent no complete request in mgmt_handshake_timeout");
    }
}

static void on_guard_timer(sl_loop *loop, sl_timer *t)
{
    (void)loop;
    http_guard *g = t->data;
    uint64_t now = sl_now_ms();
    sweep(g, &g->plain, now);
    sweep(g, &g->tls, now);
    arm(g);
}

void http_guard_init(http_guard *g, sl_loop *loop, sl_timer *kick, const uint32_t *unauth_max,
                     const uint32_t *handshake_ms)
{
    g->loop = loop;
    g->kick = kick;
    g->unauth_max = unauth_max;
    g->handshake_ms = handshake_ms;
    g->plain.name = "http";
    g->tls.name = "https";
    sl_timer_init(&g->t, on_guard_timer, g);
}

void http_guard_stop(http_guard *g)
{
    if (sl_timer_armed(&g->t))
        sl_timer_stop(g->loop, &g->t);
}

http_guard_conn *http_guard_opened(http_guard *g, http_guard_door *d, struct MHD_Connection *mc)
{
    http_guard_conn *c = sl_xcalloc(1, sizeof *c);
    c->door = d;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    c->fd = ci ? ci->connect_fd : -1;
    c->deadline_ms = sl_now_ms() + *g->handshake_ms;
    append_conn(d, c);
    /* Over the cap: the oldest unproven one goes (the newcomer may be a user who logs in at
     * once; the oldest has had the longest to do so). */
    if (d->n_unproven > *g->unauth_max && d->head != c)
        drop(g, d->head, "had not logged in when the unauthenticated connections were full");
    arm(g);
    return c;
}

void http_guard_closed(http_guard *g, http_guard_conn *c)
{
    if (!c)
        return;
    if (c->proven) {
        if (g->n_proven)
            g->n_proven--;
    } else if (!c->dropped) {
        unlink_conn(c->door, c);
        arm(g);
    }
    sl_free(c);
}

void http_guard_request_started(http_guard *g, http_guard_conn *c)
{
    (void)g;
    if (c && !c->proven && !c->dropped)
        c->deadline_ms = 0; /* the header is in: what follows has MHD's idle timeout */
}

void http_guard_request_done(http_guard *g, http_guard_conn *c)
{
    if (!c || c->proven || c->dropped)
        return;
    /* kept alive without a login: waits for its next request header under the deadline */
    unlink_conn(c->door, c);
    c->deadline_ms = sl_now_ms() + *g->handshake_ms;
    append_conn(c->door, c);
    arm(g);
}

void http_guard_proven(http_guard *g, http_guard_conn *c)
{
    if (!c || c->proven || c->dropped)
        return;
    unlink_conn(c->door, c);
    c->proven = 1;
    g->n_proven++;
    arm(g);
}

http_guard_conn *http_guard_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}
