/* etcd.h - a small blocking client of etcd's v3 JSON gateway (HTTP POST of JSON bodies to
 * /v3/kv/range, /v3/kv/put, /v3/kv/txn, /v3/lease/grant, /v3/lease/keepalive,
 * /v3/lease/revoke; keys and values base64), over libcurl.
 *
 * Blocking by design: it is used only from the cluster's own thread (member.c), never from the
 * event loop (DESIGN.md section 10). Every call is bounded by the timeout given to cl_etcd_new;
 * with several endpoints a call that cannot reach one tries the next (starting from the last
 * that answered). Lease IDs are sent as JSON numbers: etcd 3.4's gateway does not find a
 * lease given as a string.
 *
 * etcd's own doors (cl_etcd_opts, from cluster_formation.etcd.*, as RabbitMQ's etcd peer
 * discovery names them): TLS (https, a CA to verify etcd by, a client certificate and key for
 * etcd's --client-cert-auth) and etcd's user/password authentication: the client POSTs
 * /v3/auth/authenticate {"name","password"} and sends the token it gets in an Authorization
 * header; a reply saying the token is invalid or expired (etcd's simple tokens expire after
 * 5 minutes unused, and with a restart) gets a new token and the call again, once.
 *
 * Return values: 0, or -1 with err filled (no answer, an HTTP error, an etcd error such as
 * "lease not found", or a reply that is not what the API documents).
 */
#ifndef SL_CLUSTER_ETCD_H
#define SL_CLUSTER_ETCD_H

#include <stddef.h>
#include <stdint.h>

typedef struct cl_etcd cl_etcd;

typedef struct cl_etcd_opts {
    const char *username, *password; /* NULL: no authentication */
    int https;                       /* TLS to every endpoint */
    const char *cacertfile;          /* NULL: the system's CAs */
    const char *certfile, *keyfile;  /* a client certificate (NULL: none) */
    int verify;                      /* verify etcd's certificate and name (verify_peer) */
} cl_etcd_opts;

/* o: NULL for plain HTTP without authentication (copied). */
cl_etcd *cl_etcd_new(char *const *endpoints, unsigned n, uint32_t timeout_ms,
                     const cl_etcd_opts *o);
void cl_etcd_free(cl_etcd *e);

/* One key's value and revisions; value is NULL when the key does not exist. */
typedef struct cl_etcd_kv {
    char *key; /* for cl_etcd_list */
    char *value;
    size_t len;
    int64_t create_rev, mod_rev, lease;
} cl_etcd_kv;
void cl_etcd_kv_clear(cl_etcd_kv *kv);

int cl_etcd_get(cl_etcd *e, const char *key, cl_etcd_kv *out, char *err, size_t errlen);
/* Every key under prefix (at most max): *out (free with cl_etcd_kvs_free) and the count. */
int cl_etcd_list(cl_etcd *e, const char *prefix, cl_etcd_kv **out, size_t *n, char *err,
                 size_t errlen);
void cl_etcd_kvs_free(cl_etcd_kv *v, size_t n);
/* lease 0: none. */
int cl_etcd_put(cl_etcd *e, const char *key, const char *value, int64_t lease, char *err,
                size_t errlen);
int cl_etcd_delete(cl_etcd *e, const char *key, char *err, size_t errlen);

int cl_etcd_lease_grant(cl_etcd *e, int64_t ttl_s, int64_t *id, char *err, size_t errlen);
/* *ttl_s: the TTL the lease has again, 0 when it no longer exists. */
int cl_etcd_lease_keepalive(cl_etcd *e, int64_t id, int64_t *ttl_s, char *err, size_t errlen);
int cl_etcd_lease_revoke(cl_etcd *e, int64_t id, char *err, size_t errlen);

/* A transaction: every compare holds -> the puts are done (*succeeded = 1); else nothing
 * (*succeeded = 0). */
enum { CL_ETCD_CMP_CREATE, CL_ETCD_CMP_MOD, CL_ETCD_CMP_VALUE };
typedef struct cl_etcd_cmp {
    const char *key;
    int target;        /* CL_ETCD_CMP_*; the result is always EQUAL */
    int64_t rev;       /* CREATE / MOD: the revision (0 for CREATE: the key does not exist) */
    const char *value; /* VALUE */
} cl_etcd_cmp;
typedef struct cl_etcd_put_op {
    const char *key, *value;
    int64_t lease;
} cl_etcd_put_op;
int cl_etcd_txn(cl_etcd *e, const cl_etcd_cmp *cmp, int ncmp, const cl_etcd_put_op *put, int nput,
                int *succeeded, char *err, size_t errlen);

/* A doorbell on one key: a thread of its own, with its own connection, holds a watch of key
 * open on the gateway's streaming /v3/watch and writes one byte ('w') to ring_fd (a
 * non-blocking pipe) whenever the stream says anything: an event on the key, or the watch's
 * creation (after a reconnection, when an event may have been missed). It says nothing of
 * what changed: the owner reads etcd again. A stream that fails or ends is opened again on
 * the next endpoint after retry_ms. Nothing depends on it for safety: an owner that also
 * polls etcd only learns sooner. cl_etcd_watch_stop returns at once (the thread waits in
 * curl_multi_poll with a stop pipe beside the stream). */
typedef struct cl_etcd_watch cl_etcd_watch;
cl_etcd_watch *cl_etcd_watch_start(char *const *endpoints, unsigned n, const char *key, int ring_fd,
                                   uint32_t retry_ms, const cl_etcd_opts *o);
void cl_etcd_watch_stop(cl_etcd_watch *w);

#endif
