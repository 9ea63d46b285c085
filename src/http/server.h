/* server.h - an HTTP(S) server on sluiced's own event loop: libmicrohttpd without a thread of
 * its own, its listeners accepted through net/accept.c, request bodies up to a limit, requests
 * held (suspended) while their answer comes from elsewhere, and the guard against connections
 * that never log in (http/guard.h). What a request means is the application's (the
 * management API, src/mgmt/): it sees each request through the callbacks below, on the loop
 * thread.
 *
 * A request is an http_req at the start of the application's own struct (opts.req_size bytes,
 * zeroed): the server allocates it when the request header is in and frees it when both
 * libmicrohttpd and whoever will answer it (http_suspend) have let go, calling opts.release
 * first.
 */
#ifndef SL_HTTP_SERVER_H
#define SL_HTTP_SERVER_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "net/accept.h"
#include "net/loop.h"
#include "net/tls.h"

typedef struct http_server http_server;
typedef struct http_req http_req;

struct http_req {
    http_server *s;
    struct MHD_Connection *conn;
    const char *method; /* "GET", "PUT", ... (HEAD is GET: libmicrohttpd drops the body) */
    sl_buf body;        /* what came of it, up to opts.max_body */
    int too_large;      /* Content-Length or the body went over opts.max_body (dropped) */
    int refs;           /* libmicrohttpd's, the answerer's (http_suspend), others' (http_req_ref) */
    uint8_t suspended;  /* held by http_suspend */
    uint8_t resumed;    /* http_resume'd: the next opts.handle call is the answer's */
    uint8_t orphan;     /* the server stopped while it was held: only freed from here on */
    void (*release)(http_req *h); /* opts.release, kept for orphans (they outlive s) */
    http_req *susp_next;
    char **scratch; /* decoded query values (http_req_query), freed with the request */
    size_t n_scratch;
    struct MHD_Response *held; /* an answer kept for later (http_hold), freed if never sent */
    unsigned held_status;
};

/* The TLS listener's settings (node/config.h's struct node_tls_conf, in plain fields). */
typedef struct http_tls_opts {
    const char *certfile, *keyfile, *cacertfile, *password; /* keyfile NULL: certfile's */
    int verify_peer, fail_if_no_peer_cert;
    unsigned versions; /* SL_TLS_V* bits (net/tls.h); 0 = TLS 1.2 and 1.3 */
} http_tls_opts;

typedef struct http_server_opts {
    sl_loop *loop;
    /* Plain listener: bind:port (0 = a free port), or an inherited socket (adopt_fd >= 0). */
    const char *bind;
    int port;
    int adopt_fd;
    /* TLS listener, when tls_port >= 0 or adopt_tls_fd >= 0, with the settings of tls
     * (libmicrohttpd's GnuTLS; copied); tls_conf names them in errors ("management.ssl"). */
    int tls_port;
    int adopt_tls_fd;
    http_tls_opts tls;
    const char *tls_conf;
    unsigned fd_reserve; /* descriptors each listener's acceptor keeps free */
    /* Live settings, read where they apply: connections that logged in (both listeners; the
     * acceptors wait while there are this many), unproven ones per listener, and their
     * deadline for a request header (http/guard.c). */
    const uint32_t *conn_max;
    const uint32_t *unauth_max;
    const uint32_t *handshake_ms;
    const int *stopping; /* non-zero: accept nothing (the connections wait in the backlog) */
    size_t max_body;     /* request bodies beyond this: too_large */
    size_t req_size;     /* the application's request struct, http_req first */
    void *ctx;
    /* The request header is in (h->too_large already set for a Content-Length over the
     * limit): the application may answer at once. */
    enum MHD_Result (*begin)(http_req *h, const char *url);
    /* 1 once the request was answered: its body is dropped from then on. */
    int (*answered)(http_req *h);
    /* The body is in, or the request was resumed (h->resumed): answer, suspend or wait. */
    enum MHD_Result (*handle)(http_req *h, const char *url);
    void (*release)(http_req *h); /* the request is freed (its http_req fields after) */
} http_server_opts;

/* Start listening (logs "listening https=ADDR:PORT" for the TLS listener; the plain one is
 * the caller's to log). NULL with a message in err on failure. */
http_server *http_server_start(const http_server_opts *o, char *err, size_t errlen);
/* Run libmicrohttpd now (what is ready goes out); never from inside its own run. */
void http_server_run(http_server *s);
/* Accept no more connections, on either listener, and close the listening sockets. */
void http_server_close(http_server *s);
/* Let go of every held request: each becomes an orphan (its answer, when it comes, only
 * frees it: http_resume). */
void http_server_orphan_held(http_server *s);
/* Stop: the listeners (if http_server_close was not called) and every connection are closed,
 * the server freed (orphans live on). */
void http_server_free(http_server *s);

void *http_server_ctx(const http_server *s);
const char *http_server_addr(const http_server *s); /* the plain listener's address and port */
int http_server_port(const http_server *s);
int http_server_has_tls(const http_server *s);
const char *http_server_tls_addr(const http_server *s);
int http_server_tls_port(const http_server *s);
sl_acceptor *http_server_acceptor(http_server *s); /* the plain listener's */
unsigned http_server_conns(const http_server *s);  /* connections libmicrohttpd holds */
/* Requests begun and not yet freed (a shutdown waits for them). */
unsigned http_server_inflight(const http_server *s);

/* The answer comes later: libmicrohttpd holds the connection and the request stays alive
 * (a reference for the answerer) until http_resume. */
void http_suspend(http_req *h);
/* The answer is there: opts.handle is called again with h->resumed set. Call once. Safe
 * after the server stopped (an orphan is then just let go). */
void http_resume(http_req *h);
/* Let go of a held request without an answer (the server is stopping): no handle call. */
void http_unsuspend(http_req *h);
void http_req_ref(http_req *h);
void http_req_unref(http_req *h);
/* The query argument key, percent-decoded (http_query_decode); NULL when absent. Valid for
 * the request's life. */
const char *http_req_query(http_req *h, const char *key);
/* Keep resp (taken) to be queued with status later, by http_send_held (a reply that waits
 * for something else, such as the disk: the caller suspends the request meanwhile). */
void http_hold(http_req *h, unsigned status, struct MHD_Response *resp);
/* Queue the held response now (from opts.handle, after http_resume). */
enum MHD_Result http_send_held(http_req *h);
/* A request on h's connection logged in: the connection counts against conn_max from now on,
 * and the guard leaves it be. */
void http_req_proven(http_req *h);
/* TLS with verify_peer: 1 when the client's certificate does not verify against the trusted
 * CAs (or, with fail_if_no_peer_cert, there is none), logged; 0 otherwise and on the plain
 * listener. */
int http_req_cert_refused(http_req *h);

#endif
