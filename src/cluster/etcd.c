/* etcd.c - etcd v3 JSON gateway client (contract in etcd.h).
 *
 * One curl easy handle, reused (keep-alive connections), used by one thread. The gateway
 * encodes int64 fields as JSON strings in its replies; both strings and numbers are read.
 * The watch doorbell (cl_etcd_watch_*) has its own thread and its own handle, shares nothing
 * with an etcd client but curl's global initialisation, and only writes to its ring fd.
 */
#include "cluster/etcd.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base64.h"
#include "core/buf.h"
#include "core/mem.h"

/* cl_etcd_opts, owned */
typedef struct eopts {
    char *username, *password, *cacertfile, *certfile, *keyfile;
    int https, verify;
} eopts;

struct cl_etcd {
    CURL *curl;
    char **endpoints;
    unsigned n, good; /* good: the endpoint that answered last */
    uint32_t timeout_ms;
    sl_buf reply;
    eopts o;
    char *token; /* etcd's auth token (NULL: none yet) */
};

static char *dup_or_null(const char *s)
{
    return s ? sl_xstrdup(s) : NULL;
}

static void eopts_copy(eopts *to, const cl_etcd_opts *o)
{
    memset(to, 0, sizeof *to);
    if (!o)
        return;
    if (o->username && o->password) {
        to->username = sl_xstrdup(o->username);
        to->password = sl_xstrdup(o->password);
    }
    to->cacertfile = dup_or_null(o->cacertfile);
    to->certfile = dup_or_null(o->certfile);
    to->keyfile = dup_or_null(o->keyfile);
    to->https = o->https;
    to->verify = o->verify;
}

static void eopts_free(eopts *o)
{
    if (o->password)
        memset(o->password, 0, strlen(o->password));
    sl_free(o->username);
    sl_free(o->password);
    sl_free(o->cacertfile);
    sl_free(o->certfile);
    sl_free(o->keyfile);
    memset(o, 0, sizeof *o);
}

/* The URL of path on endpoint ep, and the handle's TLS settings. */
static void setup(CURL *c, const eopts *o, const char *ep, const char *path, char *url,
                  size_t urllen)
{
    snprintf(url, urllen, "%s://%s%s", o->https ? "https" : "http", ep, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, o->https ? "https" : "http");
    if (!o->https)
        return;
    if (o->cacertfile)
        curl_easy_setopt(c, CURLOPT_CAINFO, o->cacertfile);
    if (o->certfile)
        curl_easy_setopt(c, CURLOPT_SSLCERT, o->certfile);
    if (o->keyfile)
        curl_easy_setopt(c, CURLOPT_SSLKEY, o->keyfile);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, o->verify ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, o->verify ? 2L : 0L);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

cl_etcd *cl_etcd_new(char *const *endpoints, unsigned n, uint32_t timeout_ms, const cl_etcd_opts *o)
{
    pthread_once(&curl_once, curl_init_once);
    cl_etcd *e = sl_xcalloc(1, sizeof *e);
    e->curl = curl_easy_init();
    if (!e->curl) {
        sl_free(e);
        return NULL;
    }
    e->endpoints = sl_xcalloc(n ? n : 1, sizeof *e->endpoints);
    for (unsigned i = 0; i < n; i++)
        e->endpoints[i] = sl_xstrdup(endpoints[i]);
    e->n = n;
    e->timeout_ms = timeout_ms;
    sl_buf_init(&e->reply);
    eopts_copy(&e->o, o);
    return e;
}

void cl_etcd_free(cl_etcd *e)
{
    if (!e)
        return;
    curl_easy_cleanup(e->curl);
    for (unsigned i = 0; i < e->n; i++)
        sl_free(e->endpoints[i]);
    sl_free(e->endpoints);
    sl_buf_free(&e->reply);
    eopts_free(&e->o);
    sl_free(e->token);
    sl_free(e);
}

void cl_etcd_kv_clear(cl_etcd_kv *kv)
{
    sl_free(kv->key);
    sl_free(kv->value);
    memset(kv, 0, sizeof *kv);
}

void cl_etcd_kvs_free(cl_etcd_kv *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cl_etcd_kv_clear(&v[i]);
    sl_free(v);
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
    cl_etcd *e = arg;
    size_t n = size * nmemb;
    if (e->reply.len + n > (16u << 20))
        return 0; /* no reply of ours is that big: stop reading */
    sl_buf_append(&e->reply, p, n);
    return n;
}

static size_t on_token_body(char *p, size_t size, size_t nmemb, void *arg)
{
    sl_buf *b = arg;
    size_t n = size * nmemb;
    if (b->len + n > 65536)
        return 0;
    sl_buf_append(b, p, n);
    return n;
}

/* POST /v3/auth/authenticate on endpoint ep with handle c: the token (sl_free), or NULL with
 * err. Used by the client and by the watch (each its own handle). */
static char *authenticate(CURL *c, const eopts *o, const char *ep, uint32_t timeout_ms, char *err,
                          size_t errlen)
{
    json_t *body = json_pack("{s:s,s:s}", "name", o->username, "password", o->password);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        snprintf(err, errlen, "etcd: cannot encode a request");
        return NULL;
    }
    sl_buf reply;
    sl_buf_init(&reply);
    char url[512];
    curl_easy_reset(c);
    setup(c, o, ep, "/v3/auth/authenticate", url, sizeof url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_token_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(h);
    memset(text, 0, strlen(text)); /* it holds the password */
    free(text);
    char *token = NULL;
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "etcd %s: authenticating: %s", ep, curl_easy_strerror(rc));
    } else {
        json_error_t je;
        json_t *j = json_loadb((const char *)reply.data, reply.len, 0, &je);
        const char *t = json_string_value(json_object_get(j, "token"));
        if (t && *t) {
            token = sl_xstrdup(t);
        } else {
            const char *m = json_string_value(json_object_get(j, "error"));
            if (!m)
                m = json_string_value(json_object_get(j, "message"));
            snprintf(err, errlen, "etcd %s: authenticating as %s: %s", ep, o->username,
                     m ? m : "no token in the reply");
        }
        json_decref(j);
    }
    sl_buf_free(&reply);
    return token;
}

/* etcd's answer when a token is no longer (or was never) valid: authenticate again. */
static int token_refused(const char *msg)
{
    return msg && (strstr(msg, "invalid auth token") || strstr(msg, "token expired") ||
                   strstr(msg, "user name is empty") || strstr(msg, "user name not found"));
}

/* POST body to path; the parsed JSON reply (an object), or NULL with err. */
static json_t *call(cl_etcd *e, const char *path, json_t *body, char *err, size_t errlen)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) {
        snprintf(err, errlen, "etcd: cannot encode a request");
        return NULL;
    }
    json_t *out = NULL;
    err[0] = 0;
    int reauth = 0; /* a new token was taken for a refused one: once per call */
    for (unsigned k = 0; k < e->n && !out; k++) {
        unsigned i = (e->good + k) % e->n;
        if (e->o.username && !e->token) {
            e->token = authenticate(e->curl, &e->o, e->endpoints[i], e->timeout_ms, err, errlen);
            if (!e->token)
                continue;
        }
        char url[512];
        e->reply.len = 0;
        curl_easy_reset(e->curl);
        setup(e->curl, &e->o, e->endpoints[i], path, url, sizeof url);
        curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e);
        curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
        curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
        curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L); /* a thread: no SIGALRM */
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        if (e->token) {
            char *auth = sl_xmalloc(strlen(e->token) + 32);
            sprintf(auth, "Authorization: %s", e->token);
            h = curl_slist_append(h, auth);
            sl_free(auth);
        }
        curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, h);
        CURLcode rc = curl_easy_perform(e->curl);
        curl_slist_free_all(h);
        if (rc != CURLE_OK) {
            snprintf(err, errlen, "etcd %s: %s", e->endpoints[i], curl_easy_strerror(rc));
            continue;
        }
        long status = 0;
        curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
        json_error_t je;
        json_t *j = json_loadb((const char *)e->reply.data, e->reply.len, 0, &je);
        if (!j || !json_is_object(j)) {
            snprintf(err, errlen, "etcd %s%s: HTTP %ld, not a JSON object", e->endpoints[i], path,
                     status);
            json_decref(j);
            continue;
        }
        e->good = i;
        json_t *msg = json_object_get(j, "error");
        if (status != 200 || msg) {
            const char *m = json_string_value(msg ? msg : json_object_get(j, "message"));
            snprintf(err, errlen, "etcd %s%s: %s", e->endpoints[i], path, m ? m : "HTTP error");
            json_decref(j);
            if (e->o.username && !reauth && token_refused(err)) {
                sl_free(e->token); /* expired (or etcd restarted): a new one, the call again */
                e->token = NULL;
                reauth = 1;
                k--;
                continue;
            }
            break; /* etcd answered: another endpoint would say the same */
        }
        out = j;
    }
    free(text);
    return out;
}

static int64_t get_i64(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_string(v))
        return strtoll(json_string_value(v), NULL, 10);
    return 0;
}

static json_t *b64(const char *s, size_t n)
{
    char *t = sl_base64_encode((const uint8_t *)s, n, NULL);
    json_t *j = json_string(t);
    sl_free(t);
    return j;
}

/* A base64 field as a NUL-terminated string (*len its length); NULL when absent or bad. */
static char *unb64(json_t *o, const char *name, size_t *len)
{
    const char *s = json_string_value(json_object_get(o, name));
    if (!s) {
        *len = 0;
        return sl_xstrdup(""); /* etcd leaves out empty values */
    }
    size_t n = strlen(s);
    uint8_t *out = sl_xmalloc(n * 3 / 4 + 4);
    long m = sl_base64_decode(s, n, out);
    if (m < 0) {
        sl_free(out);
        return NULL;
    }
    out[m] = 0;
    *len = (size_t)m;
    return (char *)out;
}

static int read_kv(json_t *kv, cl_etcd_kv *out)
{
    size_t kl;
    out->key = unb64(kv, "key", &kl);
    out->value = unb64(kv, "value", &out->len);
    out->create_rev = get_i64(kv, "create_revision");
    out->mod_rev = get_i64(kv, "mod_revision");
    out->lease = get_i64(kv, "lease");
    return out->key && out->value ? 0 : -1;
}

int cl_etcd_get(cl_etcd *e, const char *key, cl_etcd_kv *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_t *body = json_object();
    json_object_set_new(body, "key", b64(key, strlen(key)));
    json_t *r = call(e, "/v3/kv/range", body, err, errlen);
    if (!r)
        return -1;
    json_t *kvs = json_object_get(r, "kvs");
    int rc = 0;
    if (json_array_size(kvs) > 0 && read_kv(json_array_get(kvs, 0), out) < 0) {
        cl_etcd_kv_clear(out);
        snprintf(err, errlen, "etcd: a range reply with bad base64");
        rc = -1;
    }
    json_decref(r);
    return rc;
}

int cl_etcd_list(cl_etcd *e, const char *prefix, cl_etcd_kv **out, size_t *n, char *err,
                 size_t errlen)
{
    *out = NULL;
    *n = 0;
    size_t pl = strlen(prefix);
    if (!pl) {
        snprintf(err, errlen, "etcd: empty prefix");
        return -1;
    }
    char *end = sl_xstrdup(prefix);
    end[pl - 1]++; /* the range [prefix, prefix with its last byte + 1) */
    json_t *body = json_object();
    json_object_set_new(body, "key", b64(prefix, pl));
    json_object_set_new(body, "range_end", b64(end, pl));
    json_object_set_new(body, "limit", json_integer(1000));
    sl_free(end);
    json_t *r = call(e, "/v3/kv/range", body, err, errlen);
    if (!r)
        return -1;
    json_t *kvs = json_object_get(r, "kvs");
    size_t m = json_array_size(kvs);
    cl_etcd_kv *v = sl_xcalloc(m ? m : 1, sizeof *v);
    for (size_t i = 0; i < m; i++) {
        if (read_kv(json_array_get(kvs, i), &v[i]) < 0) {
            cl_etcd_kvs_free(v, m);
            json_decref(r);
            snprintf(err, errlen, "etcd: a range reply with bad base64");
            return -1;
        }
    }
    json_decref(r);
    *out = v;
    *n = m;
    return 0;
}

int cl_etcd_put(cl_etcd *e, const char *key, const char *value, int64_t lease, char *err,
                size_t errlen)
{
    json_t *body = json_object();
    json_object_set_new(body, "key", b64(key, strlen(key)));
    json_object_set_new(body, "value", b64(value, strlen(value)));
    if (lease)
        json_object_set_new(body, "lease", json_integer(lease));
    json_t *r = call(e, "/v3/kv/put", body, err, errlen);
    json_decref(r);
    return r ? 0 : -1;
}

int cl_etcd_delete(cl_etcd *e, const char *key, char *err, size_t errlen)
{
    json_t *body = json_object();
    json_object_set_new(body, "key", b64(key, strlen(key)));
    json_t *r = call(e, "/v3/kv/deleterange", body, err, errlen);
    json_decref(r);
    return r ? 0 : -1;
}

int cl_etcd_lease_grant(cl_etcd *e, int64_t ttl_s, int64_t *id, char *err, size_t errlen)
{
    json_t *body = json_object();
    json_object_set_new(body, "TTL", json_integer(ttl_s));
    json_t *r = call(e, "/v3/lease/grant", body, err, errlen);
    if (!r)
        return -1;
    *id = get_i64(r, "ID");
    json_decref(r);
    if (!*id) {
        snprintf(err, errlen, "etcd: lease grant without an ID");
        return -1;
    }
    return 0;
}

int cl_etcd_lease_keepalive(cl_etcd *e, int64_t id, int64_t *ttl_s, char *err, size_t errlen)
{
    json_t *body = json_object();
    json_object_set_new(body, "ID", json_integer(id));
    json_t *r = call(e, "/v3/lease/keepalive", body, err, errlen);
    if (!r)
        return -1;
    /* {"result": {"ID": ..., "TTL": ...}}; TTL left out (0) when the lease is gone */
    json_t *res = json_object_get(r, "result");
    *ttl_s = res ? get_i64(res, "TTL") : 0;
    json_decref(r);
    return 0;
}

int cl_etcd_lease_revoke(cl_etcd *e, int64_t id, char *err, size_t errlen)
{
    json_t *body = json_object();
    json_object_set_new(body, "ID", json_integer(id));
    json_t *r = call(e, "/v3/lease/revoke", body, err, errlen);
    json_decref(r);
    return r ? 0 : -1;
}

int cl_etcd_txn(cl_etcd *e, const cl_etcd_cmp *cmp, int ncmp, const cl_etcd_put_op *put, int nput,
                int *succeeded, char *err, size_t errlen)
{
    static const char *const targets[] = {"CREATE", "MOD", "VALUE"};
    json_t *body = json_object(), *c = json_array(), *s = json_array();
    for (int i = 0; i < ncmp; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "key", b64(cmp[i].key, strlen(cmp[i].key)));
        json_object_set_new(o, "target", json_string(targets[cmp[i].target]));
        json_object_set_new(o, "result", json_string("EQUAL"));
        if (cmp[i].target == CL_ETCD_CMP_CREATE)
            json_object_set_new(o, "create_revision", json_integer(cmp[i].rev));
        else if (cmp[i].target == CL_ETCD_CMP_MOD)
            json_object_set_new(o, "mod_revision", json_integer(cmp[i].rev));
        else
            json_object_set_new(o, "value", b64(cmp[i].value, strlen(cmp[i].value)));
        json_array_append_new(c, o);
    }
    for (int i = 0; i < nput; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "key", b64(put[i].key, strlen(put[i].key)));
        json_object_set_new(p, "value", b64(put[i].value, strlen(put[i].value)));
        if (put[i].lease)
            json_object_set_new(p, "lease", json_integer(put[i].lease));
        json_t *op = json_object();
        json_object_set_new(op, "requestPut", p);
        json_array_append_new(s, op);
    }
    json_object_set_new(body, "compare", c);
    json_object_set_new(body, "success", s);
    json_t *r = call(e, "/v3/kv/txn", body, err, errlen);
    if (!r)
        return -1;
    *succeeded = json_is_true(json_object_get(r, "succeeded"));
    json_decref(r);
    return 0;
}

/* ---- the watch doorbell (etcd.h) ---- */

struct cl_etcd_watch {
    char **endpoints;
    unsigned n;
    eopts o;
    char *body; /* {"create_request": {"key": base64}} */
    int ring_fd;
    uint32_t retry_ms;
    int stop_fd[2];
    pthread_t thread;
};

static size_t on_watch_body(char *p, size_t size, size_t nmemb, void *arg)
{
    cl_etcd_watch *w = arg;
    (void)p;
    ssize_t r = write(w->ring_fd, "w", 1); /* full pipe: the owner is woken already */
    (void)r;
    return size * nmemb;
}

/* Whether the stop pipe became readable within ms. */
static int watch_stopped(cl_etcd_watch *w, int ms)
{
    struct pollfd pf = {w->stop_fd[0], POLLIN, 0};
    return poll(&pf, 1, ms) > 0;
}

static void *watch_run(void *arg)
{
    cl_etcd_watch *w = arg;
    CURLM *multi = curl_multi_init();
    CURL *c = curl_easy_init();
    int stop = !multi || !c;
    for (unsigned i = 0; !stop; i = (i + 1) % w->n) {
        char url[512], aerr[256];
        char *token = NULL;
        if (w->o.username) { /* a token per stream: one that expired is replaced here */
            token = authenticate(c, &w->o, w->endpoints[i], 1000, aerr, sizeof aerr);
            if (!token) {
                stop = watch_stopped(w, (int)w->retry_ms);
                continue;
            }
        }
        curl_easy_reset(c);
        setup(c, &w->o, w->endpoints[i], "/v3/watch", url, sizeof url);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, w->body);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_watch_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, w);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        /* a stream that is quiet for hours is normal; a dead peer is found by TCP */
        curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 5L);
        curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 2L);
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        if (token) {
            char *auth = sl_xmalloc(strlen(token) + 32);
            sprintf(auth, "Authorization: %s", token);
            h = curl_slist_append(h, auth);
            sl_free(auth);
            sl_free(token);
        }
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_multi_add_handle(multi, c);
        for (int running = 1; running && !stop;) {
            if (curl_multi_perform(multi, &running) != CURLM_OK)
                break;
            struct curl_waitfd sfd = {.fd = w->stop_fd[0], .events = CURL_WAIT_POLLIN};
            if (running && curl_multi_poll(multi, &sfd, 1, 1000, NULL) != CURLM_OK)
                break;
            stop = (sfd.revents & CURL_WAIT_POLLIN) != 0;
        }
        curl_multi_remove_handle(multi, c);
        curl_slist_free_all(h);
        if (!stop)
            stop = watch_stopped(w, (int)w->retry_ms);
    }
    if (c)
        curl_easy_cleanup(c);
    if (multi)
        curl_multi_cleanup(multi);
    return NULL;
}

cl_etcd_watch *cl_etcd_watch_start(char *const *endpoints, unsigned n, const char *key, int ring_fd,
                                   uint32_t retry_ms, const cl_etcd_opts *o)
{
    if (!n)
        return NULL;
    pthread_once(&curl_once, curl_init_once);
    cl_etcd_watch *w = sl_xcalloc(1, sizeof *w);
    w->endpoints = sl_xcalloc(n, sizeof *w->endpoints);
    for (unsigned i = 0; i < n; i++)
        w->endpoints[i] = sl_xstrdup(endpoints[i]);
    w->n = n;
    eopts_copy(&w->o, o);
    w->ring_fd = ring_fd;
    w->retry_ms = retry_ms;
    json_t *body = json_pack("{s:{s:o}}", "create_request", "key", b64(key, strlen(key)));
    w->body = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    w->stop_fd[0] = w->stop_fd[1] = -1;
    if (!w->body || pipe2(w->stop_fd, O_CLOEXEC | O_NONBLOCK) < 0 ||
        pthread_create(&w->thread, NULL, watch_run, w) != 0) {
        if (w->stop_fd[0] >= 0) {
            close(w->stop_fd[0]);
            close(w->stop_fd[1]);
        }
        free(w->body);
        for (unsigned i = 0; i < n; i++)
            sl_free(w->endpoints[i]);
        sl_free(w->endpoints);
        eopts_free(&w->o);
        sl_free(w);
        return NULL;
    }
    return w;
}

void cl_etcd_watch_stop(cl_etcd_watch *w)
{
    if (!w)
        return;
    ssize_t r = write(w->stop_fd[1], "x", 1);
    (void)r;
    pthread_join(w->thread, NULL);
    close(w->stop_fd[0]);
    close(w->stop_fd[1]);
    free(w->body);
    for (unsigned i = 0; i < w->n; i++)
        sl_free(w->endpoints[i]);
    sl_free(w->endpoints);
    eopts_free(&w->o);
    sl_free(w);
}
