/* guard.c - keeps connections that have not logged in from taking the management API down.
 *
 * Every HTTP(S) connection MHD holds has a guard_conn (its socket context). A connection is
 * "unproven" until one of its requests authenticates, then "proven" for good.
 *
 *   - Deadline. An unproven connection that is waiting for a request (from accept through the
 *     TLS handshake to the end of the request header; again after each answer on a kept-alive
 *     connection) is closed mgmt_handshake_timeout ms after it started waiting. The absolute
 *     deadline is what stops a slow sender: MHD's own timeout is an idle one that every byte
 *     renews.
 *   - Separate limits. Unproven connections are capped per listener (mgmt_unauthenticated_max);
 *     a new one beyond the cap closes the oldest unproven one. They never count against
 *     mgmt_connection_max, which caps proven ones (both listeners together) and is the only
 *     thing that stops the acceptor. So a flood of connections that never log in can only
 *     push each other out: a client that sends its request header and a valid login promptly
 *     always gets in. Per-address limits were not chosen: an attacker with many addresses
 *     walks past them, and a user behind the same proxy or NAT (or on loopback) as the
 *     attacker would be locked out with him.
 *
 * Closing is a shutdown() of the socket: MHD then reads end-of-file on its next run and closes
 * the connection the usual way (its notifications keep every count right); libmicrohttpd
 * has no call to close a connection from outside a request.
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
#include "mgmt/mgmt_internal.h"

static void unlink_conn(guard_door *d, guard_conn *c)
{
    SL_LIST_UNLINK_TAIL(d->head, d->tail, c, prev, next);
    c->prev = c->next = NULL;
    d->n_unproven--;
}

static void append_conn(guard_door *d, guard_conn *c)
{
    SL_LIST_APPEND_TAIL(d->head, d->tail, c, prev, next);
    d->n_unproven++;
}

/* Closed from outside: MHD sees end-of-file and tells on_connection. Taken off the list at
 * once so it is neither closed twice nor counted meanwhile. */
static void drop(mgmt *m, guard_conn *c, const char *why)
{
    guard_door *d = c->door;
    unlink_conn(d, c);
    c->dropped = 1;
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    d->dropped++;
    sl_debug("%s: closed a connection that %s", d->name, why);
    /* MHD notices on its next run (its epoll fd turns readable; the timer makes sure) */
    sl_timer_start(m->n->loop, &m->t, sl_loop_now(m->n->loop));
}

static uint64_t first_deadline(const guard_door *d)
{
    for (const guard_conn *c = d->head; c; c = c->next)
        if (c->deadline_ms)
            return c->deadline_ms;
    return 0;
}

static void arm(mgmt *m)
{
    uint64_t a = first_deadline(&m->guard_http), b = first_deadline(&m->guard_https);
    uint64_t at = a && b ? (a < b ? a : b) : a ? a : b;
    if (at)
        sl_timer_start(m->n->loop, &m->guard_t, at);
    else if (sl_timer_armed(&m->guard_t))
        sl_timer_stop(m->n->loop, &m->guard_t);
}

static void sweep(mgmt *m, guard_door *d, uint64_t now)
{
    /* bounded: each pass either drops an entry or stops */
    for (guard_conn *c = d->head, *next; c; c = next) {
        next = c->next;
        if (!c->deadline_ms)
            continue;
        if (c->deadline_ms > now)
            break; /* waiting entries are in deadline order */
        drop(m, c, "sent no complete request in mgmt_handshake_timeout");
    }
}

static void on_guard_timer(sl_loop *loop, sl_timer *t)
{
    (void)loop;
    mgmt *m = t->data;
    uint64_t now = sl_now_ms();
    sweep(m, &m->guard_http, now);
    sweep(m, &m->guard_https, now);
    arm(m);
}

void guard_init(mgmt *m)
{
    m->guard_http.name = "http";
    m->guard_https.name = "https";
    sl_timer_init(&m->guard_t, on_guard_timer, m);
}

void guard_stop(mgmt *m)
{
    if (sl_timer_armed(&m->guard_t))
        sl_timer_stop(m->n->loop, &m->guard_t);
}

guard_conn *guard_opened(mgmt *m, guard_door *d, struct MHD_Connection *mc)
{
    guard_conn *c = sl_xcalloc(1, sizeof *c);
    c->door = d;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    c->fd = ci ? ci->connect_fd : -1;
    c->deadline_ms = sl_now_ms() + m->n->cfg->mgmt_handshake_timeout_ms;
    append_conn(d, c);
    /* Over the cap: the oldest unproven one goes (the newcomer may be a user who logs in at
     * once; the oldest has had the longest to do so). */
    if (d->n_unproven > m->n->cfg->mgmt_unauthenticated_max && d->head != c)
        drop(m, d->head, "had not logged in when the unauthenticated connections were full");
    arm(m);
    return c;
}

void guard_closed(mgmt *m, guard_conn *c)
{
    if (!c)
        return;
    if (c->proven) {
        if (m->n_proven)
            m->n_proven--;
    } else if (!c->dropped) {
        unlink_conn(c->door, c);
        arm(m);
    }
    sl_free(c);
}

void guard_request_started(mgmt *m, guard_conn *c)
{
    (void)m;
    if (c && !c->proven && !c->dropped)
        c->deadline_ms = 0; /* the header is in: what follows has MHD's idle timeout */
}

void guard_request_done(mgmt *m, guard_conn *c)
{
    if (!c || c->proven || c->dropped)
        return;
    /* kept alive without a login: waits for its next request header under the deadline */
    unlink_conn(c->door, c);
    c->deadline_ms = sl_now_ms() + m->n->cfg->mgmt_handshake_timeout_ms;
    append_conn(c->door, c);
    arm(m);
}

void guard_proven(mgmt *m, guard_conn *c)
{
    if (!c || c->proven || c->dropped)
        return;
    unlink_conn(c->door, c);
    c->proven = 1;
    m->n_proven++;
    arm(m);
}

guard_conn *guard_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}
