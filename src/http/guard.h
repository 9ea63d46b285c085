/* guard.h - keeps connections that have not logged in from taking an HTTP server down (see
 * guard.c for the rules): a deadline for the request header, and a cap of their own per
 * listener, so that only connections that logged in count against the server's cap.
 *
 * Used by http/server.c, which hands it every connection libmicrohttpd opens and closes; the
 * application says when a request logged in (http_req_proven, server.h).
 */
#ifndef SL_HTTP_GUARD_H
#define SL_HTTP_GUARD_H

#include <microhttpd.h>
#include <stdint.h>

#include "net/loop.h"

typedef struct http_guard_conn http_guard_conn;
typedef struct http_guard_door {
    const char *name;             /* "http" / "https", for the log */
    http_guard_conn *head, *tail; /* unproven connections, in the order they started waiting */
    unsigned n_unproven;          /* the list's length */
    uint64_t dropped;             /* closed by the guard (deadline or cap) */
} http_guard_door;
struct http_guard_conn {
    http_guard_conn *prev, *next;
    http_guard_door *door;
    int fd;
    uint64_t deadline_ms; /* sl_now_ms() by which a request header must be in; 0 = one is */
    uint8_t proven;       /* a request on it logged in */
    uint8_t dropped;      /* shut down by the guard; MHD has yet to close it */
};

typedef struct http_guard {
    sl_loop *loop;
    sl_timer *kick; /* started at once after a shutdown(): the daemon's run notices it */
    /* Live settings (they may change while the server runs): the unproven connections'
     * cap per listener, and their deadline. */
    const uint32_t *unauth_max;
    const uint32_t *handshake_ms;
    http_guard_door plain, tls;
    sl_timer t;        /* the earliest header deadline */
    unsigned n_proven; /* connections that logged in (both listeners) */
} http_guard;

void http_guard_init(http_guard *g, sl_loop *loop, sl_timer *kick, const uint32_t *unauth_max,
                     const uint32_t *handshake_ms);
void http_guard_stop(http_guard *g);
/* A connection MHD took (its socket context from here on); may close the oldest unproven. */
http_guard_conn *http_guard_opened(http_guard *g, http_guard_door *d, struct MHD_Connection *mc);
void http_guard_closed(http_guard *g, http_guard_conn *c);          /* MHD closed it: frees c */
void http_guard_request_started(http_guard *g, http_guard_conn *c); /* its request header is in */
void http_guard_request_done(http_guard *g, http_guard_conn *c);    /* answered; it may stay open */
void http_guard_proven(http_guard *g, http_guard_conn *c);          /* a request on it logged in */
http_guard_conn *http_guard_of(struct MHD_Connection *mc);

#endif
