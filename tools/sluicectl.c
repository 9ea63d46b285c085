/* sluicectl - command-line client of Sluice's HTTP management API.
 *
 * A thin client: every verb is one or two HTTP requests (a small blocking HTTP/1.1 client over
 * a plain socket, "Connection: close", JSON via jansson) and a printout. Verbs follow
 * rabbitmqctl's names where one exists. Errors: exit status 1 and one line naming the MSMQ
 * HRESULT (when the server gave one) or the HTTP status; usage errors exit 2.
 *
 * Settings: --host/--port/--user/--password/--vhost, or SLUICE_HOST, SLUICE_MGMT_PORT,
 * SLUICE_USER, SLUICE_PASSWORD, SLUICE_VHOST; defaults 127.0.0.1:15672 guest/guest "/".
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static struct {
    const char *host, *port, *user, *password, *vhost;
    int json;
    int if_empty, if_unused;
    const char *count, *id, *tx, *type, *access, *share, *to;
    int all;
    int durable, auto_delete;
} opt;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("sluicectl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    /* _exit: nothing to clean up in a one-shot client, and no leak report on error paths */
    fflush(stdout);
    _exit(1);
}

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("sluicectl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (sluicectl --help)\n", stderr);
    va_end(ap);
    fflush(stdout);
    _exit(2);
}

/* ------------------------------------------------------------------------------------------
 * HTTP
 */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void buf_add(buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            die("out of memory");
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
}

static char *b64(const char *s)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(s);
    char *o = malloc((n + 2) / 3 * 4 + 1), *q = o;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)s[i] << 16 | (i + 1 < n ? (unsigned char)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? (unsigned char)s[i + 2] : 0);
        *q++ = t[v >> 18];
        *q++ = t[(v >> 12) & 63];
        *q++ = i + 1 < n ? t[(v >> 6) & 63] : '=';
        *q++ = i + 2 < n ? t[v & 63] : '=';
    }
    *q = 0;
    return o;
}

/* Percent-encode one path segment (the vhost "/" becomes %2F, "q;sub" q%3Bsub). */
static void seg(buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-_.~", c)) {
            buf_add(b, s, 1);
        } else {
            char e[4];
            snprintf(e, sizeof e, "%%%02X", c);
            buf_add(b, e, 3);
        }
    }
}

typedef struct resp {
    int status;
    buf body;
} resp;

static int connect_to(void)
{
    struct addrinfo hints = {0}, *res, *ai;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(opt.host, opt.port, &hints, &res);
    if (rc)
        die("cannot resolve %s: %s", opt.host, gai_strerror(rc));
    int fd = -1;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, 0);
        if (fd < 0)
            continue;
        struct timeval tv = {30, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        die("cannot connect to %s:%s: %s", opt.host, opt.port, strerror(errno));
    return fd;
}

/* De-chunk a Transfer-Encoding: chunked body in place. */
static void dechunk(buf *b)
{
    size_t in = 0, out = 0;
    while (in < b->len) {
        char *end;
        unsigned long n = strtoul(b->p + in, &end, 16);
        char *nl = strstr(end, "\r\n");
        if (!nl || n == 0)
            break;
        in = (size_t)(nl + 2 - b->p);
        if (in + n > b->len)
            n = b->len - in;
        memmove(b->p + out, b->p + in, n);
        out += n;
        in += n + 2;
    }
    b->len = out;
    if (b->p)
        b->p[out] = 0;
}

static resp http(const char *method, const char *path, const char *body)
{
    int fd = connect_to();
    char *auth_raw = malloc(strlen(opt.user) + strlen(opt.password) + 2);
    sprintf(auth_raw, "%s:%s", opt.user, opt.password);
    char *auth = b64(auth_raw);
    free(auth_raw);
    buf req = {0};
    char head[1024];
    size_t blen = body ? strlen(body) : 0;
    snprintf(head, sizeof head,
             "%s %s HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Basic %s\r\nConnection: close\r\n"
             "Accept: application/json\r\nUser-Agent: sluicectl\r\n",
             method, path, opt.host, opt.port, auth);
    free(auth);
    buf_add(&req, head, strlen(head));
    if (body) {
        snprintf(head, sizeof head, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                 blen);
        buf_add(&req, head, strlen(head));
    }
    buf_add(&req, "\r\n", 2);
    if (body)
        buf_add(&req, body, blen);
    for (size_t off = 0; off < req.len;) {
        ssize_t n = send(fd, req.p + off, req.len - off, MSG_NOSIGNAL);
        if (n <= 0)
            die("sending to %s:%s: %s", opt.host, opt.port, strerror(errno));
        off += (size_t)n;
    }
    free(req.p);
    buf in = {0};
    char chunk[65536];
    for (;;) {
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n < 0)
            die("reading from %s:%s: %s", opt.host, opt.port, strerror(errno));
        if (n == 0)
            break;
        buf_add(&in, chunk, (size_t)n);
    }
    close(fd);
    resp r = {0};
    if (!in.p || sscanf(in.p, "HTTP/%*s %d", &r.status) != 1)
        die("no HTTP response from %s:%s", opt.host, opt.port);
    char *hend = strstr(in.p, "\r\n\r\n");
    if (hend) {
        int chunked = 0;
        *hend = 0;
        for (char *h = strstr(in.p, "\r\n"); h; h = strstr(h + 2, "\r\n"))
            if (!strncasecmp(h + 2, "Transfer-Encoding:", 18) && strstr(h + 20, "chunked"))
                chunked = 1;
        buf_add(&r.body, hend + 4, in.len - (size_t)(hend + 4 - in.p));
        if (chunked)
            dechunk(&r.body);
    }
    free(in.p);
    return r;
}

/* Fail with one line: the HRESULT when there is one, else the HTTP status and reason. */
static void check(resp *r)
{
    if (r->status >= 200 && r->status < 300)
        return;
    json_t *j = r->body.len ? json_loads(r->body.p, 0, NULL) : NULL;
    const char *hr = j ? json_string_value(json_object_get(j, "hresult")) : NULL;
    const char *hn = j ? json_string_value(json_object_get(j, "hresult_name")) : NULL;
    const char *reason = j ? json_string_value(json_object_get(j, "reason")) : NULL;
    if (hr && hn)
        die("%s (%s): %s [HTTP %d]", hn, hr, reason ? reason : "", r->status);
    die("HTTP %d: %s", r->status, reason ? reason : (r->body.p ? r->body.p : ""));
}

static json_t *call(const char *method, const char *path, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body)
        json_decref(body);
    resp r = http(method, path, text);
    free(text);
    check(&r);
    json_t *j = NULL;
    if (r.body.len) {
        json_error_t e;
        j = json_loads(r.body.p, JSON_DECODE_ANY, &e);
        if (!j)
            die("bad JSON from the server: %s", e.text);
    }
    free(r.body.p);
    return j;
}

/* call() with a path from path(), which it frees */
static json_t *callp(const char *method, char *p, json_t *body);

/* "/api/<what>/<vhost>[/<name>[/<tail>]]" with each part encoded */
static char *path(const char *what, const char *name, const char *tail)
{
    buf b = {0};
    buf_add(&b, "/api/", 5);
    buf_add(&b, what, strlen(what));
    buf_add(&b, "/", 1);
    seg(&b, opt.vhost);
    if (name) {
        buf_add(&b, "/", 1);
        seg(&b, name);
    }
    if (tail) {
        buf_add(&b, "/", 1);
        buf_add(&b, tail, strlen(tail));
    }
    return b.p;
}

static json_t *callp(const char *method, char *p, json_t *body)
{
    json_t *j = call(method, p, body);
    free(p);
    return j;
}

/* ------------------------------------------------------------------------------------------
 * Output
 */

static char *cell(json_t *v)
{
    if (!v || json_is_null(v))
        return strdup("");
    if (json_is_string(v))
        return strdup(json_string_value(v));
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* An aligned table of the given columns ("a.b" reaches into objects). */
static void table(json_t *arr, const char *const *cols, size_t ncols)
{
    size_t rows = json_array_size(arr);
    size_t *w = calloc(ncols, sizeof *w);
    char **cells = calloc((rows + 1) * ncols, sizeof *cells);
    for (size_t c = 0; c < ncols; c++) {
        cells[c] = strdup(cols[c]);
        w[c] = strlen(cols[c]);
    }
    for (size_t r = 0; r < rows; r++) {
        json_t *o = json_array_get(arr, r);
        for (size_t c = 0; c < ncols; c++) {
            char key[64];
            snprintf(key, sizeof key, "%s", cols[c]);
            json_t *v = o;
            for (char *save = NULL, *k = strtok_r(key, ".", &save); k && v;
                 k = strtok_r(NULL, ".", &save))
                v = json_object_get(v, k);
            char *s = cell(v);
            cells[(r + 1) * ncols + c] = s;
            if (strlen(s) > w[c])
                w[c] = strlen(s);
        }
    }
    for (size_t r = 0; r <= rows; r++) {
        for (size_t c = 0; c < ncols; c++) {
            const char *s = cells[r * ncols + c];
            if (c + 1 < ncols)
                printf("%-*s  ", (int)w[c], s);
            else
                printf("%s", s);
            free(cells[r * ncols + c]);
        }
        putchar('\n');
    }
    free(cells);
    free(w);
}

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_ENCODE_ANY);
    puts(s ? s : "null");
    free(s);
}

static void show(json_t *j, const char *const *cols, size_t ncols)
{
    if (opt.json || !json_is_array(j))
        print_json(j);
    else
        table(j, cols, ncols);
    json_decref(j);
}

/* ------------------------------------------------------------------------------------------
 * Verbs
 */

#define COLS(...)                                                                                  \
    (const char *const[]){__VA_ARGS__},                                                            \
        sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)

static void need(int argc, int n, const char *usage)
{
    if (argc < n)
        usage_error("usage: sluicectl %s", usage);
}

static int cmd_list(int argc, char **argv)
{
    need(argc, 2,
         "list queues|exchanges|bindings|connections|channels|consumers|vhosts|users|"
         "subqueues QUEUE|transactions|outgoing");
    const char *what = argv[1];
    if (!strcmp(what, "queues")) {
        show(callp("GET", path("queues", NULL, NULL), NULL),
             COLS("name", "messages", "messages_ready", "messages_unacknowledged", "consumers",
                  "durable", "kind"));
    } else if (!strcmp(what, "exchanges")) {
        show(callp("GET", path("exchanges", NULL, NULL), NULL),
             COLS("name", "type", "durable", "auto_delete", "internal"));
    } else if (!strcmp(what, "bindings")) {
        show(callp("GET", path("bindings", NULL, NULL), NULL),
             COLS("source", "destination", "destination_type", "routing_key"));
    } else if (!strcmp(what, "connections")) {
        show(call("GET", "/api/connections", NULL),
             COLS("name", "user", "vhost", "channels", "state"));
    } else if (!strcmp(what, "channels")) {
        show(call("GET", "/api/channels", NULL),
             COLS("name", "user", "consumer_count", "messages_unacknowledged"));
    } else if (!strcmp(what, "consumers")) {
        show(callp("GET", path("consumers", NULL, NULL), NULL),
             COLS("queue.name", "consumer_tag", "channel_details.name", "ack_required",
                  "prefetch_count"));
    } else if (!strcmp(what, "vhosts")) {
        show(call("GET", "/api/vhosts", NULL), COLS("name", "messages"));
    } else if (!strcmp(what, "users")) {
        show(call("GET", "/api/users", NULL), COLS("name", "tags"));
    } else if (!strcmp(what, "transactions")) {
        show(call("GET", "/api/transactions", NULL), COLS("id", "operations"));
    } else if (!strcmp(what, "outgoing")) {
        /* why is nothing draining? state, what waits, what is in flight, the last error */
        show(call("GET", "/api/msmq/outgoing", NULL),
             COLS("format_name", "vhost", "state", "foreign", "messages", "in_flight", "sent",
                  "acked", "reconnects", "last_error"));
    } else if (!strcmp(what, "subqueues")) {
        need(argc, 3, "list subqueues QUEUE");
        show(callp("GET", path("queues", argv[2], "subqueues"), NULL),
             COLS("name", "messages", "messages_ready", "messages_unacknowledged", "consumers"));
    } else {
        usage_error("cannot list '%s'", what);
    }
    return 0;
}

static json_t *parse_args(char **kv, int n)
{
    json_t *a = json_object();
    for (int i = 0; i < n; i++) {
        char *eq = strchr(kv[i], '=');
        if (!eq)
            usage_error("argument '%s' is not KEY=VALUE", kv[i]);
        *eq = 0;
        json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
        json_object_set_new(a, kv[i], v ? v : json_string(eq + 1));
    }
    return a;
}

static int cmd_declare(int argc, char **argv)
{
    need(argc, 3,
         "declare queue NAME [KEY=VALUE...] | exchange NAME TYPE [KEY=VALUE...] | "
         "binding SOURCE QUEUE [ROUTING_KEY]");
    if (!strcmp(argv[1], "queue")) {
        json_t *b = json_pack("{s:b,s:b,s:o}", "durable", opt.durable, "auto_delete",
                              opt.auto_delete, "arguments", parse_args(argv + 3, argc - 3));
        json_decref(callp("PUT", path("queues", argv[2], NULL), b));
        printf("queue %s declared\n", argv[2]);
    } else if (!strcmp(argv[1], "exchange")) {
        need(argc, 4, "declare exchange NAME TYPE [KEY=VALUE...]");
        json_t *b =
            json_pack("{s:s,s:b,s:b,s:o}", "type", argv[3], "durable", opt.durable, "auto_delete",
                      opt.auto_delete, "arguments", parse_args(argv + 4, argc - 4));
        json_decref(callp("PUT", path("exchanges", argv[2], NULL), b));
        printf("exchange %s declared\n", argv[2]);
    } else if (!strcmp(argv[1], "binding")) {
        need(argc, 4, "declare binding SOURCE QUEUE [ROUTING_KEY]");
        buf p = {0};
        char *base = path("bindings", NULL, "e/");
        buf_add(&p, base, strlen(base));
        free(base);
        seg(&p, argv[2]);
        buf_add(&p, "/q/", 3);
        seg(&p, argv[3]);
        json_decref(call("POST", p.p, json_pack("{s:s}", "routing_key", argc > 4 ? argv[4] : "")));
        free(p.p);
        printf("binding %s -> %s declared\n", argv[2], argv[3]);
    } else {
        usage_error("cannot declare '%s'", argv[1]);
    }
    return 0;
}

static int cmd_delete(int argc, char **argv)
{
    need(argc, 2, "delete [queue] NAME [--if-empty] [--if-unused] | delete exchange NAME");
    const char *kind = "queues", *name = argv[1];
    if (argc >= 3 && (!strcmp(argv[1], "queue") || !strcmp(argv[1], "exchange"))) {
        kind = !strcmp(argv[1], "queue") ? "queues" : "exchanges";
        name = argv[2];
    }
    char *p = path(kind, name, NULL);
    char full[2048];
    snprintf(full, sizeof full, "%s?if-empty=%s&if-unused=%s", p, opt.if_empty ? "true" : "false",
             opt.if_unused ? "true" : "false");
    free(p);
    json_decref(call("DELETE", full, NULL));
    printf("%s %s deleted\n", kind[0] == 'q' ? "queue" : "exchange", name);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Queue handles (POST /api/msmq/handles...) and management objects (/api/msmq/management...)
 */

static int is_format_name(const char *s)
{
    return !strncasecmp(s, "DIRECT=", 7) || !strncasecmp(s, "FormatName:", 11);
}

/* http() with a JSON body (consumed), not failing on an error status. */
static resp http_json(const char *method, const char *p, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body)
        json_decref(body);
    resp r = http(method, p, text);
    free(text);
    return r;
}

static json_t *resp_json(resp *r)
{
    json_t *j = r->body.len ? json_loads(r->body.p, JSON_DECODE_ANY, NULL) : NULL;
    free(r->body.p);
    if (!j)
        die("bad JSON from the server");
    return j;
}

/* "/api/msmq/<what>/<id>[/<tail>]" */
static char *ctx_path(const char *what, const char *id, const char *tail)
{
    buf b = {0};
    buf_add(&b, "/api/msmq/", 10);
    buf_add(&b, what, strlen(what));
    buf_add(&b, "/", 1);
    seg(&b, id);
    if (tail) {
        buf_add(&b, "/", 1);
        buf_add(&b, tail, strlen(tail));
    }
    return b.p;
}

/* Open a handle on a format name, or on a queue name of --vhost; returns its id. */
static char *handle_open(const char *target, const char *access)
{
    json_t *b = json_pack("{s:s,s:s}", is_format_name(target) ? "format_name" : "queue", target,
                          "access", access);
    if (!is_format_name(target) || strcmp(opt.vhost, "/"))
        json_object_set_new(b, "vhost", json_string(opt.vhost));
    if (opt.share)
        json_object_set_new(b, "share", json_string(opt.share));
    json_t *j = call("POST", "/api/msmq/handles", b);
    char *id = strdup(json_string_value(json_object_get(j, "handle")));
    json_decref(j);
    return id;
}

/* Close without failing: the caller already has its answer (or is failing anyway). */
static void handle_close_quietly(const char *id)
{
    char *p = ctx_path("handles", id, NULL);
    resp r = http("DELETE", p, NULL);
    free(p);
    free(r.body.p);
}

/* rpc_ACPurgeQueue through h; on failure the handle is closed and we exit 1. */
static json_t *mq_handle_purge(const char *h, int close_on_failure)
{
    char *p = ctx_path("handles", h, "purge");
    resp r = http("POST", p, NULL);
    free(p);
    if ((r.status < 200 || r.status >= 300) && close_on_failure)
        handle_close_quietly(h);
    check(&r);
    return resp_json(&r);
}

static int cmd_purge(int argc, char **argv)
{
    need(argc, 2, "purge QUEUE | purge FORMAT_NAME");
    const char *name = !strcmp(argv[1], "queue") && argc > 2 ? argv[2] : argv[1];
    /* open, purge, close: a format name of another node purges there (the owner's count) */
    char *h = handle_open(name, "receive");
    json_t *j = mq_handle_purge(h, 1);
    handle_close_quietly(h);
    free(h);
    printf("queue %s purged: %lld message(s) deleted, %lld pending\n", name,
           (long long)json_integer_value(json_object_get(j, "message_count")),
           (long long)json_integer_value(json_object_get(j, "purge_pending")));
    json_decref(j);
    return 0;
}

static int cmd_handle(int argc, char **argv)
{
    need(argc, 2,
         "handle open QUEUE|FORMAT_NAME [--access A] [--share S] | handle purge H | "
         "handle close H | handle show H | handle list [--all]");
    const char *sub = argv[1];
    if (!strcmp(sub, "list")) {
        show(call("GET", opt.all ? "/api/msmq/handles?all=true" : "/api/msmq/handles", NULL),
             COLS("handle", "kind", "user", "access", "share", "vhost", "queue", "idle_ms",
                  "queue_deleted"));
        return 0;
    }
    if (!strcmp(sub, "open")) {
        need(argc, 3,
             "handle open QUEUE|FORMAT_NAME [--access receive|peek|send|move] "
             "[--share deny_none|deny_receive]");
        char *h = handle_open(argv[2], opt.access ? opt.access : "receive");
        puts(h);
        free(h);
        return 0;
    }
    need(argc, 3, "handle purge|close|show HANDLE");
    if (!strcmp(sub, "purge")) {
        json_t *j = mq_handle_purge(argv[2], 0);
        printf("%s (%s): %lld message(s) deleted, %lld pending\n",
               json_string_value(json_object_get(j, "hresult_name")),
               json_string_value(json_object_get(j, "hresult")),
               (long long)json_integer_value(json_object_get(j, "message_count")),
               (long long)json_integer_value(json_object_get(j, "purge_pending")));
        json_decref(j);
    } else if (!strcmp(sub, "close")) {
        json_t *j = callp("DELETE", ctx_path("handles", argv[2], NULL), NULL);
        printf("%s (%s): handle %s closed\n", json_string_value(json_object_get(j, "hresult_name")),
               json_string_value(json_object_get(j, "hresult")), argv[2]);
        json_decref(j);
    } else if (!strcmp(sub, "show")) {
        json_t *j = callp("GET", ctx_path("handles", argv[2], NULL), NULL);
        print_json(j);
        json_decref(j);
    } else {
        usage_error("handle takes open, purge, close, show or list");
    }
    return 0;
}

/* A management object bound to a queue (MC-MQAC Init); exits 1 (after releasing it) when the
 * queue cannot be bound. */
static char *mgmt_open(const char *target)
{
    json_t *j = call("POST", "/api/msmq/management", NULL);
    char *id = strdup(json_string_value(json_object_get(j, "id")));
    json_decref(j);
    int object = !strncasecmp(target, "QUEUE=", 6); /* "QUEUE=<format name>", as `info` */
    if (object)
        target += 6;
    json_t *b;
    if (object || is_format_name(target)) {
        b = json_pack("{s:s}", "format_name", target);
    } else {
        char *f = malloc(strlen(target) + 32);
        sprintf(f, "DIRECT=OS:.\\private$\\%s", target);
        b = json_pack("{s:s}", "format_name", f);
        free(f);
    }
    if (strcmp(opt.vhost, "/"))
        json_object_set_new(b, "vhost", json_string(opt.vhost));
    char *p = ctx_path("management", id, "init");
    resp r = http_json("POST", p, b);
    free(p);
    if (r.status < 200 || r.status >= 300) {
        p = ctx_path("management", id, NULL);
        free(http("DELETE", p, NULL).body.p);
        free(p);
    }
    check(&r);
    free(r.body.p);
    return id;
}

static void mgmt_release(const char *id)
{
    char *p = ctx_path("management", id, NULL);
    free(http("DELETE", p, NULL).body.p);
    free(p);
}

/* One member of the object; exits 1 (after releasing the object) on a failure HRESULT. */
static json_t *mgmt_member(const char *id, const char *member)
{
    char *p = ctx_path("management", id, member);
    resp r = http("GET", p, NULL);
    free(p);
    if (r.status < 200 || r.status >= 300)
        mgmt_release(id);
    check(&r);
    return resp_json(&r);
}

static void print_member(json_t *j)
{
    char *v = cell(json_object_get(j, "value"));
    const char *name = json_string_value(json_object_get(j, "name"));
    printf("%s = %s%s%s%s\n", json_string_value(json_object_get(j, "member")), v, name ? " (" : "",
           name ? name : "", name ? ")" : "");
    free(v);
}

static int cmd_management(int argc, char **argv)
{
    need(argc, 3,
         "management QUEUE|FORMAT_NAME MEMBER...   (MEMBER: message-count, "
         "foreign-status, queue-type, state, ...)");
    char *id = mgmt_open(argv[1]);
    for (int i = 2; i < argc; i++) {
        json_t *j = mgmt_member(id, argv[i]);
        if (opt.json)
            print_json(j);
        else
            print_member(j);
        json_decref(j);
    }
    mgmt_release(id);
    free(id);
    return 0;
}

static int cmd_peek(int argc, char **argv)
{
    need(argc, 2, "peek QUEUE [--count N]");
    char *p = path("queues", argv[1], "messages");
    char full[2048];
    snprintf(full, sizeof full, "%s?count=%s", p, opt.count ? opt.count : "10");
    free(p);
    show(call("GET", full, NULL),
         COLS("lookup_id", "move_count", "redelivered", "routing_key", "payload_bytes", "payload"));
    return 0;
}

static int cmd_publish(int argc, char **argv)
{
    need(argc, 4, "publish EXCHANGE ROUTING_KEY PAYLOAD");
    const char *x = *argv[1] ? argv[1] : "amq.default";
    json_t *j = callp("POST", path("exchanges", x, "publish"),
                      json_pack("{s:s,s:s,s:s,s:{}}", "routing_key", argv[2], "payload", argv[3],
                                "payload_encoding", "string", "properties"));
    printf("%s\n", json_is_true(json_object_get(j, "routed")) ? "routed" : "not routed");
    json_decref(j);
    return 0;
}

static int cmd_move(int argc, char **argv)
{
    need(argc, 3, "move SOURCE DESTINATION (--id LOOKUP_ID | --count N) [--tx ID]");
    if (!opt.id == !opt.count)
        usage_error("move needs exactly one of --id and --count");
    json_t *b = json_pack("{s:s}", "destination", argv[2]);
    json_object_set_new(b, opt.id ? "lookup_id" : "count",
                        json_integer(strtoll(opt.id ? opt.id : opt.count, NULL, 10)));
    if (opt.tx)
        json_object_set_new(b, "transaction", json_integer(strtoll(opt.tx, NULL, 10)));
    json_t *j = callp("POST", path("queues", argv[1], "move"), b);
    printf("%s: moved %lld message(s) from %s to %s%s%s\n",
           json_string_value(json_object_get(j, "hresult_name")),
           (long long)json_integer_value(json_object_get(j, "moved")), argv[1], argv[2],
           opt.tx ? " in transaction " : "", opt.tx ? opt.tx : "");
    json_decref(j);
    return 0;
}

static int cmd_tx(int argc, char **argv)
{
    need(argc, 2, "tx begin | tx commit ID | tx abort ID");
    if (!strcmp(argv[1], "begin")) {
        json_t *j = call("POST", "/api/transactions", NULL);
        printf("%lld\n", (long long)json_integer_value(json_object_get(j, "id")));
        json_decref(j);
        return 0;
    }
    need(argc, 3, "tx commit|abort ID");
    if (strcmp(argv[1], "commit") && strcmp(argv[1], "abort"))
        usage_error("tx takes begin, commit or abort");
    char p[128];
    snprintf(p, sizeof p, "/api/transactions/%s/%s", argv[2], argv[1]);
    json_t *j = call("POST", p, NULL);
    printf("%s: transaction %s %s\n", json_string_value(json_object_get(j, "hresult_name")),
           argv[2], json_string_value(json_object_get(j, "outcome")));
    json_decref(j);
    return 0;
}

static int do_action(const char *object, const char *action)
{
    json_t *b = json_pack("{s:s,s:s}", "object", object, "action", action);
    if (strcmp(opt.vhost, "/"))
        json_object_set_new(b, "vhost", json_string(opt.vhost));
    json_t *j = call("POST", "/api/msmq/action", b);
    printf("%s (%s)", json_string_value(json_object_get(j, "hresult_name")),
           json_string_value(json_object_get(j, "hresult")));
    json_t *v;
    if ((v = json_object_get(j, "connected")))
        printf(": %s", json_string_value(v));
    if ((v = json_object_get(j, "state")))
        printf(": %s", json_string_value(v));
    if ((v = json_object_get(j, "segments_freed")))
        printf(": freed %lld segment(s), %lld byte(s)", (long long)json_integer_value(v),
               (long long)json_integer_value(json_object_get(j, "bytes_freed")));
    if ((v = json_object_get(j, "segments_compacted")))
        printf("; compacted %lld segment(s) (%lld records, %lld bytes copied); store %lld -> "
               "%lld bytes in %lld ms",
               (long long)json_integer_value(v),
               (long long)json_integer_value(json_object_get(j, "records_copied")),
               (long long)json_integer_value(json_object_get(j, "bytes_copied")),
               (long long)json_integer_value(json_object_get(j, "store_bytes_before")),
               (long long)json_integer_value(json_object_get(j, "store_bytes_after")),
               (long long)json_integer_value(json_object_get(j, "tidy_ms")));
    putchar('\n');
    json_decref(j);
    return 0;
}

static int cmd_action(int argc, char **argv)
{
    need(argc, 3, "action OBJECT ACTION   (OBJECT: MACHINE or QUEUE=<format name>)");
    return do_action(argv[1], argv[2]);
}

/* "MACHINE", "QUEUE=..." as given; a bare queue name becomes its format name. */
static char *object_of(const char *s)
{
    if (!strcasecmp(s, "MACHINE") || !strncasecmp(s, "QUEUE=", 6))
        return strdup(s);
    char *o = malloc(strlen(s) + 40);
    if (!strncasecmp(s, "DIRECT=", 7))
        sprintf(o, "QUEUE=%s", s);
    else
        sprintf(o, "QUEUE=DIRECT=OS:.\\private$\\%s", s);
    return o;
}

static int cmd_info(int argc, char **argv)
{
    need(argc, 3, "info OBJECT PROP...   (OBJECT: MACHINE, QUEUE=<format name> or a queue name)");
    char *obj = object_of(argv[1]);
    json_t *props = json_array();
    for (int i = 2; i < argc; i++)
        json_array_append_new(props, json_string(argv[i]));
    json_t *b = json_pack("{s:s,s:o}", "object", obj, "props", props);
    free(obj);
    if (strcmp(opt.vhost, "/"))
        json_object_set_new(b, "vhost", json_string(opt.vhost));
    json_t *j = call("POST", "/api/msmq/info", b);
    if (opt.json) {
        print_json(j);
    } else {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(j, "properties"), i, p)
        {
            char *v = cell(json_object_get(p, "value"));
            printf("%s = %s\n", json_string_value(json_object_get(p, "name")), v);
            free(v);
        }
    }
    json_decref(j);
    return 0;
}

static int cmd_foreign_status(int argc, char **argv)
{
    need(argc, 2, "foreign-status QUEUE|FORMAT_NAME");
    /* through an MSMQManagement object, so an unknown queue fails with its HRESULT */
    char *id = mgmt_open(argv[1]);
    json_t *j = mgmt_member(id, "foreign-status");
    mgmt_release(id);
    free(id);
    printf("%s (%lld)\n", json_string_value(json_object_get(j, "name")),
           (long long)json_integer_value(json_object_get(j, "value")));
    json_decref(j);
    return 0;
}

static int cmd_export(int argc, char **argv)
{
    json_t *j = call("GET", "/api/definitions", NULL);
    char *s = json_dumps(j, JSON_INDENT(2));
    json_decref(j);
    if (argc < 2 || !strcmp(argv[1], "-")) {
        puts(s);
    } else {
        FILE *f = fopen(argv[1], "w");
        if (!f || fputs(s, f) < 0 || fclose(f) != 0)
            die("cannot write %s: %s", argv[1], strerror(errno));
        printf("definitions exported to %s\n", argv[1]);
    }
    free(s);
    return 0;
}

static int cmd_import(int argc, char **argv)
{
    need(argc, 2, "import FILE");
    json_error_t e;
    json_t *j = strcmp(argv[1], "-") ? json_load_file(argv[1], 0, &e) : json_loadf(stdin, 0, &e);
    if (!j)
        die("cannot read %s: %s", argv[1], e.text);
    json_decref(call("POST", "/api/definitions", j));
    printf("definitions imported from %s\n", argv[1]);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Users, vhosts, permissions, limits: rabbitmqctl's verbs and arguments (--vhost for -p)
 */

/* "/api/<what>/<a>[/<b>]" with each part encoded */
static char *path2(const char *what, const char *a, const char *b)
{
    buf p = {0};
    buf_add(&p, "/api/", 5);
    buf_add(&p, what, strlen(what));
    buf_add(&p, "/", 1);
    seg(&p, a);
    if (b) {
        buf_add(&p, "/", 1);
        seg(&p, b);
    }
    return p.p;
}

/* GET one user; NULL when there is none (404), dies on other errors. */
static json_t *get_user(const char *name)
{
    char *p = path2("users", name, NULL);
    resp r = http("GET", p, NULL);
    free(p);
    if (r.status == 404) {
        free(r.body.p);
        return NULL;
    }
    check(&r);
    json_t *j = json_loads(r.body.p, 0, NULL);
    free(r.body.p);
    if (!j)
        die("bad JSON from the server");
    return j;
}

static json_t *need_user(const char *name)
{
    json_t *u = get_user(name);
    if (!u)
        die("no user '%s'", name);
    return u;
}

/* Tags as one comma-separated string from argv[from..] */
static char *join_tags(int argc, char **argv, int from)
{
    buf b = {0};
    buf_add(&b, "", 0);
    for (int i = from; i < argc; i++) {
        if (b.len)
            buf_add(&b, ",", 1);
        buf_add(&b, argv[i], strlen(argv[i]));
    }
    return b.p ? b.p : strdup("");
}

static char *tags_of(json_t *u)
{
    json_t *t = json_object_get(u, "tags");
    if (json_is_string(t))
        return strdup(json_string_value(t));
    buf b = {0};
    buf_add(&b, "", 0);
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e)
    {
        if (b.len)
            buf_add(&b, ",", 1);
        buf_add(&b, json_string_value(e), strlen(json_string_value(e)));
    }
    return b.p;
}

static int cmd_user(const char *verb, int argc, char **argv)
{
    if (!strcmp(verb, "add_user")) {
        need(argc, 3, "add_user USER PASSWORD");
        json_t *u = get_user(argv[1]);
        if (u) {
            json_decref(u);
            die("user '%s' already exists", argv[1]);
        }
        json_decref(callp("PUT", path2("users", argv[1], NULL),
                          json_pack("{s:s,s:s}", "password", argv[2], "tags", "")));
        printf("Adding user \"%s\" ...\n", argv[1]);
    } else if (!strcmp(verb, "delete_user")) {
        need(argc, 2, "delete_user USER");
        json_decref(callp("DELETE", path2("users", argv[1], NULL), NULL));
        printf("Deleting user \"%s\" ...\n", argv[1]);
    } else if (!strcmp(verb, "change_password")) {
        need(argc, 3, "change_password USER NEW_PASSWORD");
        json_t *u = need_user(argv[1]);
        char *tags = tags_of(u);
        json_decref(u);
        json_decref(callp("PUT", path2("users", argv[1], NULL),
                          json_pack("{s:s,s:s}", "password", argv[2], "tags", tags)));
        free(tags);
        printf("Changing password for user \"%s\" ...\n", argv[1]);
    } else if (!strcmp(verb, "clear_password")) {
        need(argc, 2, "clear_password USER");
        json_t *u = need_user(argv[1]);
        char *tags = tags_of(u);
        json_decref(u);
        json_decref(callp("PUT", path2("users", argv[1], NULL),
                          json_pack("{s:s,s:s}", "password_hash", "", "tags", tags)));
        free(tags);
        printf("Clearing password for user \"%s\" ...\n", argv[1]);
    } else if (!strcmp(verb, "set_user_tags")) {
        need(argc, 2, "set_user_tags USER [TAG...]");
        json_t *u = need_user(argv[1]);
        char *tags = join_tags(argc, argv, 2);
        /* keep the password: send the stored hash back with the new tags */
        json_t *b =
            json_pack("{s:O,s:O,s:s}", "password_hash", json_object_get(u, "password_hash"),
                      "hashing_algorithm", json_object_get(u, "hashing_algorithm"), "tags", tags);
        json_decref(u);
        json_decref(callp("PUT", path2("users", argv[1], NULL), b));
        printf("Setting tags for user \"%s\" to [%s] ...\n", argv[1], tags);
        free(tags);
    } else if (!strcmp(verb, "list_users")) {
        show(call("GET", "/api/users", NULL), COLS("name", "tags"));
    } else if (!strcmp(verb, "authenticate_user")) {
        need(argc, 3, "authenticate_user USER PASSWORD");
        opt.user = argv[1];
        opt.password = argv[2];
        json_decref(call("GET", "/api/whoami", NULL));
        printf("Success\n");
    } else if (!strcmp(verb, "add_vhost")) {
        need(argc, 2, "add_vhost VHOST");
        json_decref(callp("PUT", path2("vhosts", argv[1], NULL), json_object()));
        printf("Adding vhost \"%s\" ...\n", argv[1]);
    } else if (!strcmp(verb, "delete_vhost")) {
        need(argc, 2, "delete_vhost VHOST");
        json_decref(callp("DELETE", path2("vhosts", argv[1], NULL), NULL));
        printf("Deleting vhost \"%s\" ...\n", argv[1]);
    } else if (!strcmp(verb, "list_vhosts")) {
        show(call("GET", "/api/vhosts", NULL), COLS("name", "description", "tags"));
    } else if (!strcmp(verb, "set_permissions")) {
        need(argc, 5, "set_permissions [--vhost V] USER CONF WRITE READ");
        json_decref(callp(
            "PUT", path2("permissions", opt.vhost, argv[1]),
            json_pack("{s:s,s:s,s:s}", "configure", argv[2], "write", argv[3], "read", argv[4])));
        printf("Setting permissions for user \"%s\" in vhost \"%s\" ...\n", argv[1], opt.vhost);
    } else if (!strcmp(verb, "clear_permissions")) {
        need(argc, 2, "clear_permissions [--vhost V] USER");
        json_decref(callp("DELETE", path2("permissions", opt.vhost, argv[1]), NULL));
        printf("Clearing permissions for user \"%s\" in vhost \"%s\" ...\n", argv[1], opt.vhost);
    } else if (!strcmp(verb, "list_permissions")) {
        buf b = {0};
        buf_add(&b, "/api/vhosts/", 12);
        seg(&b, opt.vhost);
        buf_add(&b, "/permissions", 12);
        show(callp("GET", b.p, NULL), COLS("user", "configure", "write", "read"));
    } else if (!strcmp(verb, "list_user_permissions")) {
        need(argc, 2, "list_user_permissions USER");
        char *p = path2("users", argv[1], NULL);
        buf b = {0};
        buf_add(&b, p, strlen(p));
        buf_add(&b, "/permissions", 12);
        free(p);
        show(callp("GET", b.p, NULL), COLS("vhost", "configure", "write", "read"));
    } else if (!strcmp(verb, "set_topic_permissions")) {
        need(argc, 5, "set_topic_permissions [--vhost V] USER EXCHANGE WRITE READ");
        json_decref(callp(
            "PUT", path2("topic-permissions", opt.vhost, argv[1]),
            json_pack("{s:s,s:s,s:s}", "exchange", argv[2], "write", argv[3], "read", argv[4])));
        printf("Setting topic permissions on \"%s\" for user \"%s\" in vhost \"%s\" ...\n", argv[2],
               argv[1], opt.vhost);
    } else if (!strcmp(verb, "clear_topic_permissions")) {
        need(argc, 2, "clear_topic_permissions [--vhost V] USER [EXCHANGE]");
        char *p = path2("topic-permissions", opt.vhost, argv[1]);
        buf b = {0};
        buf_add(&b, p, strlen(p));
        free(p);
        if (argc > 2) {
            buf_add(&b, "?exchange=", 10);
            seg(&b, argv[2]);
        }
        json_decref(callp("DELETE", b.p, NULL));
        printf("Clearing topic permissions for user \"%s\" in vhost \"%s\" ...\n", argv[1],
               opt.vhost);
    } else if (!strcmp(verb, "list_topic_permissions")) {
        buf b = {0};
        buf_add(&b, "/api/vhosts/", 12);
        seg(&b, opt.vhost);
        buf_add(&b, "/topic-permissions", 18);
        show(callp("GET", b.p, NULL), COLS("user", "exchange", "write", "read"));
    } else if (!strcmp(verb, "set_vhost_limits") || !strcmp(verb, "set_user_limits")) {
        int user = verb[4] == 'u';
        need(argc, user ? 3 : 2,
             user ? "set_user_limits USER '{\"max-connections\": N, \"max-channels\": N}'"
                  : "set_vhost_limits [--vhost V] '{\"max-connections\": N, \"max-queues\": N}'");
        const char *def = argv[user ? 2 : 1];
        json_error_t e;
        json_t *lim = json_loads(def, 0, &e);
        if (!json_is_object(lim))
            usage_error("limits must be a JSON object: %s", def);
        const char *k;
        json_t *v;
        json_object_foreach(lim, k, v)
        {
            char *p = path2(user ? "user-limits" : "vhost-limits", user ? argv[1] : opt.vhost, k);
            json_decref(callp("PUT", p, json_pack("{s:O}", "value", v)));
        }
        json_decref(lim);
        printf("Applying limits to %s \"%s\" ...\n", user ? "user" : "vhost",
               user ? argv[1] : opt.vhost);
    } else if (!strcmp(verb, "clear_vhost_limits") || !strcmp(verb, "clear_user_limits")) {
        int user = verb[6] == 'u';
        need(argc, user ? 2 : 1,
             user ? "clear_user_limits USER [LIMIT|all]" : "clear_vhost_limits [--vhost V]");
        static const char *const vl[] = {"max-connections", "max-queues"};
        static const char *const ul[] = {"max-connections", "max-channels"};
        for (int i = 0; i < 2; i++) {
            const char *name = user ? ul[i] : vl[i];
            if (user && argc > 2 && strcmp(argv[2], "all") && strcmp(argv[2], name))
                continue;
            char *p =
                path2(user ? "user-limits" : "vhost-limits", user ? argv[1] : opt.vhost, name);
            json_decref(callp("DELETE", p, NULL));
        }
        printf("Clearing limits of %s \"%s\" ...\n", user ? "user" : "vhost",
               user ? argv[1] : opt.vhost);
    } else if (!strcmp(verb, "list_vhost_limits") || !strcmp(verb, "list_user_limits")) {
        int user = verb[5] == 'u';
        if (user)
            show(argc > 1 ? callp("GET", path2("user-limits", argv[1], NULL), NULL)
                          : call("GET", "/api/user-limits", NULL),
                 COLS("user", "value"));
        else
            show(callp("GET", path2("vhost-limits", opt.vhost, NULL), NULL),
                 COLS("vhost", "value"));
    } else {
        return -1;
    }
    return 0;
}

/* cluster status | remove NODE | readmit NODE | step-down [--to NODE] (GET /api/cluster,
 * DELETE /api/cluster/nodes/NODE, POST /api/cluster/nodes/NODE/readmit, POST
 * /api/cluster/step-down; any node's port: followers forward) */
static void cluster_table(json_t *j)
{
    if (opt.json) {
        print_json(j);
        return;
    }
    json_t *l = json_object_get(j, "leader");
    printf("leader  %s\n", json_is_string(l) ? json_string_value(l) : "(none)");
    printf("epoch   %lld\n", (long long)json_integer_value(json_object_get(j, "epoch")));
    table(json_object_get(j, "nodes"),
          COLS("name", "role", "insync", "lag_bytes", "lag_ms", "amqp", "http"));
    json_t *rm = json_object_get(j, "removed");
    if (json_array_size(rm)) {
        printf("removed");
        size_t i;
        json_t *v;
        json_array_foreach(rm, i, v) printf(" %s", json_string_value(v));
        printf("\n");
    }
    const char *e = json_string_value(json_object_get(j, "etcd_error"));
    if (e)
        printf("etcd error: %s\n", e);
}

static int cmd_cluster(int argc, char **argv)
{
    need(argc, 2, "cluster status | remove NODE | readmit NODE | step-down [--to NODE]");
    const char *sub = argv[1];
    if (!strcmp(sub, "status")) {
        json_t *j = call("GET", "/api/cluster", NULL);
        cluster_table(j);
        json_decref(j);
    } else if (!strcmp(sub, "remove")) {
        need(argc, 3, "cluster remove NODE");
        buf b = {0};
        buf_add(&b, "/api/cluster/nodes/", 19);
        seg(&b, argv[2]);
        json_t *j = call("DELETE", b.p, NULL);
        free(b.p);
        printf("%s removed\n", argv[2]);
        cluster_table(j);
        json_decref(j);
    } else if (!strcmp(sub, "readmit")) {
        need(argc, 3, "cluster readmit NODE");
        buf b = {0};
        buf_add(&b, "/api/cluster/nodes/", 19);
        seg(&b, argv[2]);
        buf_add(&b, "/readmit", 8);
        json_t *j = call("POST", b.p, json_object());
        free(b.p);
        printf("%s readmitted\n", argv[2]);
        cluster_table(j);
        json_decref(j);
    } else if (!strcmp(sub, "step-down")) {
        json_t *body = opt.to ? json_pack("{s:s}", "node", opt.to) : json_object();
        json_t *j = call("POST", "/api/cluster/step-down", body);
        if (opt.json)
            print_json(j);
        else
            printf("stepped down: %s -> %s (epoch %lld)\n",
                   json_string_value(json_object_get(j, "from")),
                   json_string_value(json_object_get(j, "to")),
                   (long long)json_integer_value(json_object_get(j, "epoch")));
        json_decref(j);
    } else {
        usage_error("cluster takes status, remove NODE, readmit NODE or step-down [--to NODE]");
    }
    return 0;
}

static int cmd_simple(const char *get, const char *const *cols, size_t n)
{
    show(call("GET", get, NULL), cols, n);
    return 0;
}

static void help(void)
{
    puts(
        "usage: sluicectl [options] VERB [ARGS]\n"
        "\n"
        "Options (env): --host H (SLUICE_HOST, 127.0.0.1)  --port P (SLUICE_MGMT_PORT, 15672)\n"
        "  --user U (SLUICE_USER, guest)  --password P (SLUICE_PASSWORD, guest)\n"
        "  --vhost V (SLUICE_VHOST, /)  --json  --if-empty  --if-unused  --count N  --id N\n"
        "  --tx ID  --durable / --transient  --auto-delete  --access A  --share S  --all\n"
        "  --to NODE\n"
        "\n"
        "Verbs:\n"
        "  list queues|exchanges|bindings|connections|channels|consumers|vhosts|users|"
        "transactions\n"
        "  list subqueues QUEUE | list outgoing   (outgoing queues: state, counts, last error)\n"
        "  declare queue NAME [KEY=VALUE...] | exchange NAME TYPE | binding SOURCE QUEUE [KEY]\n"
        "  delete [queue|exchange] NAME [--if-empty] [--if-unused]\n"
        "  purge QUEUE|FORMAT_NAME     through a handle: open, purge, close (also QUEUE;SUBQUEUE)\n"
        "  peek QUEUE [--count N]      messages with lookup id and move count, not consumed\n"
        "  publish EXCHANGE KEY PAYLOAD   (EXCHANGE \"\" = the default exchange)\n"
        "  move SOURCE DEST (--id LOOKUP_ID | --count N) [--tx ID]   DEST: q, q;sub, a system "
        "queue\n"
        "  tx begin | tx commit ID | tx abort ID\n"
        "  action OBJECT ACTION        MSMQ R_QMMgmtAction (OBJECT: MACHINE, QUEUE=<format name>)\n"
        "  info OBJECT PROP...         MSMQ R_QMMgmtGetInfo (property names or numbers)\n"
        "  foreign-status QUEUE|FORMAT_NAME   MC-MQAC ForeignStatus (through a management object)\n"
        "  management QUEUE|FORMAT_NAME MEMBER...   MC-MQAC members (message-count, state, ...)\n"
        "  handle open QUEUE|FORMAT_NAME [--access receive|peek|send|move] [--share deny_none|\n"
        "         deny_receive]   prints the handle\n"
        "  handle purge H | handle close H | handle show H | handle list [--all]\n"
        "  connect | disconnect | tidy MSMQ machine actions\n"
        "  pause FORMAT_NAME | resume FORMAT_NAME | eod-resend FORMAT_NAME   outgoing queue "
        "actions\n"
        "  overview | whoami\n"
        "  add_user USER PASSWORD | delete_user USER | change_password USER PASSWORD\n"
        "  clear_password USER | set_user_tags USER [TAG...] | list_users\n"
        "  authenticate_user USER PASSWORD\n"
        "  add_vhost VHOST | delete_vhost VHOST | list_vhosts\n"
        "  set_permissions [--vhost V] USER CONF WRITE READ | clear_permissions [--vhost V] USER\n"
        "  list_permissions [--vhost V] | list_user_permissions USER\n"
        "  set_topic_permissions [--vhost V] USER EXCHANGE WRITE READ\n"
        "  clear_topic_permissions [--vhost V] USER [EXCHANGE] | list_topic_permissions\n"
        "  set_vhost_limits [--vhost V] JSON | clear_vhost_limits | list_vhost_limits\n"
        "  set_user_limits USER JSON | clear_user_limits USER [LIMIT|all] | list_user_limits\n"
        "  export [FILE|-] | import FILE|-\n"
        "  cluster status              leader, epoch, each node's role, insync, lag, addresses\n"
        "  cluster remove NODE         forget a member and keep it out until readmitted\n"
        "  cluster readmit NODE        let a removed member rejoin (it follows again)\n"
        "  cluster step-down [--to NODE]   hand the leadership over to an in-sync follower\n"
        "\n"
        "Exit status: 0 ok, 1 the server refused (the line names the HRESULT or HTTP status),\n"
        "2 usage error.");
}

/* Options that take a value, accepted after the verb too. */
static int value_option(const char *o, const char *val)
{
    static const struct {
        const char *name;
        const char **dst;
    } opts[] = {
        {"count", &opt.count},   {"id", &opt.id},       {"tx", &opt.tx},
        {"access", &opt.access}, {"share", &opt.share}, {"host", &opt.host},
        {"port", &opt.port},     {"user", &opt.user},   {"password", &opt.password},
        {"vhost", &opt.vhost},   {"to", &opt.to},
    };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (!strcmp(o, opts[i].name)) {
            *opts[i].dst = val;
            return 1;
        }
    return 0;
}

int main(int argc, char **argv)
{
    opt.host = getenv("SLUICE_HOST") ? getenv("SLUICE_HOST") : "127.0.0.1";
    opt.port = getenv("SLUICE_MGMT_PORT") ? getenv("SLUICE_MGMT_PORT") : "15672";
    opt.user = getenv("SLUICE_USER") ? getenv("SLUICE_USER") : "guest";
    opt.password = getenv("SLUICE_PASSWORD") ? getenv("SLUICE_PASSWORD") : "guest";
    opt.vhost = getenv("SLUICE_VHOST") ? getenv("SLUICE_VHOST") : "/";
    opt.durable = 1;
    static const struct option longopts[] = {
        {"host", required_argument, 0, 'H'},   {"port", required_argument, 0, 'P'},
        {"user", required_argument, 0, 'u'},   {"password", required_argument, 0, 'p'},
        {"vhost", required_argument, 0, 'V'},  {"json", no_argument, 0, 'j'},
        {"if-empty", no_argument, 0, 'E'},     {"if-unused", no_argument, 0, 'U'},
        {"count", required_argument, 0, 'c'},  {"id", required_argument, 0, 'i'},
        {"tx", required_argument, 0, 't'},     {"durable", no_argument, 0, 'D'},
        {"transient", no_argument, 0, 'T'},    {"auto-delete", no_argument, 0, 'A'},
        {"access", required_argument, 0, 'a'}, {"share", required_argument, 0, 's'},
        {"all", no_argument, 0, 'L'},          {"to", required_argument, 0, 'O'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "+H:P:u:p:V:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'H':
            opt.host = optarg;
            break;
        case 'P':
            opt.port = optarg;
            break;
        case 'u':
            opt.user = optarg;
            break;
        case 'p':
            opt.password = optarg;
            break;
        case 'V':
            opt.vhost = optarg;
            break;
        case 'j':
            opt.json = 1;
            break;
        case 'E':
            opt.if_empty = 1;
            break;
        case 'U':
            opt.if_unused = 1;
            break;
        case 'c':
            opt.count = optarg;
            break;
        case 'i':
            opt.id = optarg;
            break;
        case 't':
            opt.tx = optarg;
            break;
        case 'D':
            opt.durable = 1;
            break;
        case 'T':
            opt.durable = 0;
            break;
        case 'A':
            opt.auto_delete = 1;
            break;
        case 'a':
            opt.access = optarg;
            break;
        case 's':
            opt.share = optarg;
            break;
        case 'L':
            opt.all = 1;
            break;
        case 'O':
            opt.to = optarg;
            break;
        case 'h':
            help();
            return 0;
        default:
            return 2;
        }
    }
    /* Options may also follow the verb ("delete q --if-empty"): parse the rest again. */
    int nargs = 0;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    for (int i = optind; i < argc; i++) {
        if (!strncmp(argv[i], "--", 2) && argv[i][2]) {
            const char *o = argv[i] + 2;
            const char *val = i + 1 < argc ? argv[i + 1] : NULL;
            if (!strcmp(o, "if-empty"))
                opt.if_empty = 1;
            else if (!strcmp(o, "if-unused"))
                opt.if_unused = 1;
            else if (!strcmp(o, "json"))
                opt.json = 1;
            else if (!strcmp(o, "transient"))
                opt.durable = 0;
            else if (!strcmp(o, "durable"))
                opt.durable = 1;
            else if (!strcmp(o, "auto-delete"))
                opt.auto_delete = 1;
            else if (!strcmp(o, "all"))
                opt.all = 1;
            else if (val && value_option(o, val))
                i++;
            else
                usage_error("unknown option %s", argv[i]);
            continue;
        }
        args[nargs++] = argv[i];
    }
    if (nargs == 0) {
        help();
        return 2;
    }
    const char *verb = args[0];
    int rc;
    if (!strcmp(verb, "list"))
        rc = cmd_list(nargs, args);
    else if (!strcmp(verb, "declare"))
        rc = cmd_declare(nargs, args);
    else if (!strcmp(verb, "delete"))
        rc = cmd_delete(nargs, args);
    else if (!strcmp(verb, "purge"))
        rc = cmd_purge(nargs, args);
    else if (!strcmp(verb, "peek"))
        rc = cmd_peek(nargs, args);
    else if (!strcmp(verb, "publish"))
        rc = cmd_publish(nargs, args);
    else if (!strcmp(verb, "move"))
        rc = cmd_move(nargs, args);
    else if (!strcmp(verb, "tx"))
        rc = cmd_tx(nargs, args);
    else if (!strcmp(verb, "action"))
        rc = cmd_action(nargs, args);
    else if (!strcmp(verb, "info"))
        rc = cmd_info(nargs, args);
    else if (!strcmp(verb, "foreign-status"))
        rc = cmd_foreign_status(nargs, args);
    else if (!strcmp(verb, "management"))
        rc = cmd_management(nargs, args);
    else if (!strcmp(verb, "handle"))
        rc = cmd_handle(nargs, args);
    else if (!strcmp(verb, "cluster"))
        rc = cmd_cluster(nargs, args);
    else if (!strcmp(verb, "export"))
        rc = cmd_export(nargs, args);
    else if (!strcmp(verb, "import"))
        rc = cmd_import(nargs, args);
    else if (!strcmp(verb, "tidy"))
        rc = do_action("MACHINE", "TIDY");
    else if (!strcmp(verb, "connect"))
        rc = do_action("MACHINE", "CONNECT");
    else if (!strcmp(verb, "disconnect"))
        rc = do_action("MACHINE", "DISCONNECT");
    else if (!strcmp(verb, "pause") || !strcmp(verb, "resume") || !strcmp(verb, "eod-resend")) {
        need(nargs, 2, "pause|resume|eod-resend FORMAT_NAME   (an outgoing queue)");
        char *obj = object_of(args[1]);
        rc = do_action(obj, !strcmp(verb, "pause")    ? "PAUSE"
                            : !strcmp(verb, "resume") ? "RESUME"
                                                      : "EOD_RESEND");
        free(obj);
    } else if (!strcmp(verb, "overview")) {
        json_t *j = call("GET", "/api/overview", NULL);
        print_json(j);
        json_decref(j);
        rc = 0;
    } else if (!strcmp(verb, "whoami"))
        rc = cmd_simple("/api/whoami", COLS("name", "tags"));
    else if ((rc = cmd_user(verb, nargs, args)) < 0)
        usage_error("unknown verb '%s'", verb);
    free(args);
    return rc;
}
