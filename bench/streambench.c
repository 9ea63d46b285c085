/* streambench.c - the stream protocol (port 5552) load generator of make bench-streams (issue 47,
 * "Fast"): one connection, one thread, a non-blocking socket and poll(), no library but libc.
 *
 * The protocol is written and read here by hand, from RabbitMQ's PROTOCOL.adoc, and not with
 * the project's codec (src/streamproto/): a client that shared the broker's codec would agree
 * with a bug in it instead of catching it.
 *
 * Scenarios (-S):
 *   publish   Create the stream (--create), DeclarePublisher, then N messages with Publish v1,
 *             --batch messages per frame and at most --window publishing ids unconfirmed, as
 *             RabbitMQ's Java client does (batch 100, 10,000 unconfirmed); msg/s = N / (first
 *             Publish .. last PublishConfirm). Each message is an AMQP 1.0 message of one data
 *             section holding a --size body (what the real clients send). Every publishing id
 *             must be confirmed exactly once (a PublishError fails the run). --keep leaves the
 *             stream for a consume run; otherwise it is deleted.
 *   consume   Subscribe from `first` with --credit credits and one Credit of 1 per Deliver read
 *             (the Java client's policy), until N records arrived; msg/s = N / (Subscribe ..
 *             the Deliver that completes N). Each chunk is walked (entries and records counted
 *             against its header) and chunk ids must follow each other with no gap or
 *             overlap. --delete deletes the stream afterwards.
 *   latency   publish at a fixed --rate (msg/s, open loop, the messages that are due put in
 *             one frame on each wakeup) and time each message from the write() that carried it
 *             to the PublishConfirm that names it: p50, p99, p99.9, max.
 *
 * Output: one JSON line {"scenario":...,"n":...,"size":...,"metrics":{...}} on stdout, as
 * amqpbench prints; with --pids, the broker's CPU (from /proc/PID/stat) per message, and always
 * the client's own CPU share of the wall time (near 1.0 would mean the client is the limit).
 * Every loop is bounded: --stall seconds without progress fail the run (exit 1). */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
    K_DECLARE_PUBLISHER = 0x01,
    K_PUBLISH = 0x02,
    K_PUBLISH_CONFIRM = 0x03,
    K_PUBLISH_ERROR = 0x04,
    K_DELETE_PUBLISHER = 0x06,
    K_SUBSCRIBE = 0x07,
    K_DELIVER = 0x08,
    K_CREDIT = 0x09,
    K_UNSUBSCRIBE = 0x0c,
    K_CREATE = 0x0d,
    K_DELETE = 0x0e,
    K_METADATA_UPDATE = 0x10,
    K_PEER_PROPERTIES = 0x11,
    K_SASL_HANDSHAKE = 0x12,
    K_SASL_AUTHENTICATE = 0x13,
    K_TUNE = 0x14,
    K_OPEN = 0x15,
    K_CLOSE = 0x16,
    K_HEARTBEAT = 0x17,
    RESPONSE = 0x8000,
    CODE_OK = 1,
    CODE_STREAM_ALREADY_EXISTS = 5,
    OFFSET_FIRST = 1,
};

#define MAX_PIDS 64
#define OUT_CAP (4u << 20) /* flushed when more than OUT_FLUSH is buffered */
#define OUT_FLUSH (256u << 10)

static struct {
    const char *scenario, *host, *stream, *user, *pass;
    int port, batch, window, credit, stall_s, create, keep, del;
    uint64_t n;
    size_t size;
    double rate;
    int pids[MAX_PIDS], n_pids;
} O = {.host = "127.0.0.1",
       .port = 5552,
       .stream = "streambench",
       .user = "guest",
       .pass = "guest",
       .batch = 100,
       .window = 10000,
       .credit = 10,
       .stall_s = 60,
       .n = 100000,
       .size = 16};

static int g_fd = -1;
static uint32_t g_frame_max = 1048576, g_corr;
static uint8_t *g_out, *g_in;
static size_t g_out_len, g_in_len, g_in_cap;
static int64_t g_last_progress;

/* ---- small helpers -------------------------------------------------------------------- */

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "streambench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t self_cpu_ns(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return ((int64_t)r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000000 +
           ((int64_t)r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1000;
}

/* utime + stime of the broker's processes (every thread), ns; -1 without --pids. */
static int64_t broker_cpu_ns(void)
{
    if (!O.n_pids)
        return -1;
    int64_t total = 0;
    long hz = sysconf(_SC_CLK_TCK);
    for (int i = 0; i < O.n_pids; i++) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", O.pids[i]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        char *p = strrchr(buf, ')'); /* the command name may hold spaces */
        unsigned long long ut = 0, st = 0;
        if (p &&
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
            total += (int64_t)((ut + st) * (1000000000ull / (unsigned long long)hz));
    }
    return total;
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

/* ---- output: frames are built in g_out and written by flush() ------------------------ */

static void need_out(size_t n)
{
    if (g_out_len + n > OUT_CAP)
        die("output buffer full (%zu + %zu)", g_out_len, n);
}
static void put8(uint8_t v)
{
    need_out(1);
    g_out[g_out_len++] = v;
}
static void put16(uint16_t v)
{
    put8((uint8_t)(v >> 8));
    put8((uint8_t)v);
}
static void put32(uint32_t v)
{
    put16((uint16_t)(v >> 16));
    put16((uint16_t)v);
}
static void put64(uint64_t v)
{
    put32((uint32_t)(v >> 32));
    put32((uint32_t)v);
}
static void putbytes(const void *p, size_t n)
{
    need_out(n);
    memcpy(g_out + g_out_len, p, n);
    g_out_len += n;
}
static void putstr(const char *s)
{
    size_t n = strlen(s);
    put16((uint16_t)n);
    putbytes(s, n);
}
/* Starts a frame: the size placeholder, key, version; returns the mark for frame_end. */
static size_t frame_begin(uint16_t key, uint16_t version)
{
    size_t mark = g_out_len;
    put32(0);
    put16(key);
    put16(version);
    return mark;
}
static void frame_end(size_t mark)
{
    uint32_t size = (uint32_t)(g_out_len - mark - 4);
    if (g_frame_max && size > g_frame_max)
        die("frame of %u octets over frame_max %u", size, g_frame_max);
    g_out[mark] = (uint8_t)(size >> 24);
    g_out[mark + 1] = (uint8_t)(size >> 16);
    g_out[mark + 2] = (uint8_t)(size >> 8);
    g_out[mark + 3] = (uint8_t)size;
}

/* Writes what it can; with block, everything (bounded by --stall). */
static void flush(int block)
{
    size_t off = 0;
    int64_t deadline = now_ns() + (int64_t)O.stall_s * 1000000000;
    while (off < g_out_len) {
        ssize_t w = send(g_fd, g_out + off, g_out_len - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN)
            die("send: %s", strerror(errno));
        if (!block)
            break;
        if (now_ns() > deadline)
            die("send stalled for %d s", O.stall_s);
        struct pollfd p = {g_fd, POLLOUT, 0};
        poll(&p, 1, 100);
    }
    memmove(g_out, g_out + off, g_out_len - off);
    g_out_len -= off;
}

/* ---- input: whole frames out of g_in ------------------------------------------------- */

typedef struct {
    uint16_t key, version;
    int response;
    const uint8_t *p; /* after key and version */
    size_t len;       /* bytes from p */
} frame_t;

static size_t g_in_off; /* start of the next unparsed frame */

/* Reads once (waiting up to timeout_ms); returns bytes read, 0 on timeout. */
static size_t fill_in(int timeout_ms)
{
    if (g_in_off) {
        memmove(g_in, g_in + g_in_off, g_in_len - g_in_off);
        g_in_len -= g_in_off;
        g_in_off = 0;
    }
    if (g_in_cap - g_in_len < 65536) {
        g_in_cap = g_in_cap * 2;
        g_in = realloc(g_in, g_in_cap);
        if (!g_in)
            die("out of memory");
    }
    struct pollfd p = {g_fd, POLLIN, 0};
    if (timeout_ms && poll(&p, 1, timeout_ms) <= 0)
        return 0;
    ssize_t r = recv(g_fd, g_in + g_in_len, g_in_cap - g_in_len, 0);
    if (r == 0)
        die("the broker closed the connection");
    if (r < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        die("recv: %s", strerror(errno));
    }
    g_in_len += (size_t)r;
    return (size_t)r;
}

/* The next whole frame buffered, or 0. */
static int next_frame(frame_t *f)
{
    size_t left = g_in_len - g_in_off;
    if (left < 4)
        return 0;
    uint32_t size = get32(g_in + g_in_off);
    if (size < 4 || size > (256u << 20))
        die("bad frame size %u", size);
    if (left - 4 < size) {
        if (size + 4 > g_in_cap) {
            g_in_cap = size + 65536;
            g_in = realloc(g_in, g_in_cap);
            if (!g_in)
                die("out of memory");
        }
        return 0;
    }
    const uint8_t *b = g_in + g_in_off + 4;
    uint16_t key = get16(b);
    f->response = !!(key & RESPONSE);
    f->key = key & 0x7fff;
    f->version = get16(b + 2);
    f->p = b + 4;
    f->len = size - 4;
    g_in_off += 4 + size;
    return 1;
}

/* Handshake and control requests: waits (bounded) for the response to key with correlation
 * id corr and returns its code; the Tune the server sends unasked is answered here. */
static uint16_t await_response(uint16_t key, uint32_t corr, frame_t *out)
{
    int64_t deadline = now_ns() + (int64_t)O.stall_s * 1000000000;
    for (;;) {
        frame_t f;
        while (next_frame(&f)) {
            if (f.key == K_TUNE && !f.response) {
                uint32_t fm = get32(f.p), hb = get32(f.p + 4);
                if (fm && fm < g_frame_max)
                    g_frame_max = fm;
                (void)hb; /* no heartbeats: every run is short and never silent for long */
                size_t m = frame_begin(K_TUNE, 1);
                put32(g_frame_max);
                put32(0);
                frame_end(m);
                flush(1);
                if (key == K_TUNE)
                    return CODE_OK;
                continue;
            }
            if (f.key == K_HEARTBEAT)
                continue;
            if (f.key == K_CLOSE && !f.response)
                die("the broker closed the connection: code %u", f.len >= 6 ? get16(f.p + 4) : 0);
            if (f.response && f.key == key && f.len >= 6 && get32(f.p) == corr) {
                if (out)
                    *out = f;
                return get16(f.p + 4);
            }
            if (f.key == K_METADATA_UPDATE || f.key == K_PUBLISH_CONFIRM)
                continue;
            die("unexpected frame key 0x%04x%s while waiting for 0x%04x", f.key,
                f.response ? " (response)" : "", key);
        }
        if (now_ns() > deadline)
            die("no answer to key 0x%04x in %d s", key, O.stall_s);
        fill_in(100);
    }
}

static uint16_t request_simple(uint16_t key, uint32_t corr)
{
    flush(1);
    return await_response(key, corr, NULL);
}

static void connect_and_open(void)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", O.port);
    if (getaddrinfo(O.host, port, &hints, &ai) != 0)
        die("cannot resolve %s", O.host);
    g_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (g_fd < 0)
        die("socket: %s", strerror(errno));
    if (connect(g_fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS)
        die("connect: %s", strerror(errno));
    freeaddrinfo(ai);
    struct pollfd p = {g_fd, POLLOUT, 0};
    int err = 0;
    socklen_t el = sizeof err;
    if (poll(&p, 1, O.stall_s * 1000) <= 0 ||
        getsockopt(g_fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err)
        die("connect to %s:%d: %s", O.host, O.port, strerror(err ? err : ETIMEDOUT));
    int one = 1;
    setsockopt(g_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    uint32_t c = ++g_corr;
    size_t m = frame_begin(K_PEER_PROPERTIES, 1);
    put32(c);
    put32(1);
    putstr("product");
    putstr("streambench");
    frame_end(m);
    if (request_simple(K_PEER_PROPERTIES, c) != CODE_OK)
        die("PeerProperties refused");

    c = ++g_corr;
    m = frame_begin(K_SASL_HANDSHAKE, 1);
    put32(c);
    frame_end(m);
    if (request_simple(K_SASL_HANDSHAKE, c) != CODE_OK)
        die("SaslHandshake refused");

    c = ++g_corr;
    m = frame_begin(K_SASL_AUTHENTICATE, 1);
    put32(c);
    putstr("PLAIN");
    size_t ul = strlen(O.user), pl = strlen(O.pass);
    put32((uint32_t)(ul + pl + 2));
    put8(0);
    putbytes(O.user, ul);
    put8(0);
    putbytes(O.pass, pl);
    frame_end(m);
    uint16_t code = request_simple(K_SASL_AUTHENTICATE, c);
    if (code != CODE_OK)
        die("SaslAuthenticate refused: code %u", code);

    /* The server's Tune follows; Open only after it is answered (both brokers refuse an Open
     * before it). */
    await_response(K_TUNE, 0, NULL);
    c = ++g_corr;
    m = frame_begin(K_OPEN, 1);
    put32(c);
    putstr("/");
    frame_end(m);
    code = request_simple(K_OPEN, c);
    if (code != CODE_OK)
        die("Open refused: code %u", code);
}

static void close_conn(void)
{
    uint32_t c = ++g_corr;
    size_t m = frame_begin(K_CLOSE, 1);
    put32(c);
    put16(CODE_OK);
    putstr("done");
    frame_end(m);
    request_simple(K_CLOSE, c);
    close(g_fd);
}

static void create_stream(void)
{
    uint32_t c = ++g_corr;
    size_t m = frame_begin(K_CREATE, 1);
    put32(c);
    putstr(O.stream);
    put32(0); /* no arguments: the broker's default stream settings */
    frame_end(m);
    uint16_t code = request_simple(K_CREATE, c);
    if (code != CODE_OK)
        die("Create %s: code %u%s", O.stream, code,
            code == CODE_STREAM_ALREADY_EXISTS ? " (STREAM_ALREADY_EXISTS)" : "");
}

static void delete_stream(void)
{
    uint32_t c = ++g_corr;
    size_t m = frame_begin(K_DELETE, 1);
    put32(c);
    putstr(O.stream);
    frame_end(m);
    uint16_t code = request_simple(K_DELETE, c);
    if (code != CODE_OK)
        die("Delete %s: code %u", O.stream, code);
}

/* ---- JSON ---------------------------------------------------------------------------- */

static char g_metrics[4096];
static size_t g_metrics_len;

static void metric(const char *name, double v)
{
    g_metrics_len += (size_t)snprintf(g_metrics + g_metrics_len, sizeof g_metrics - g_metrics_len,
                                      "%s\"%s\":%.6g", g_metrics_len ? "," : "", name, v);
}

static void print_json(void)
{
    printf("{\"scenario\":\"%s\",\"ok\":true,\"n\":%" PRIu64 ",\"size\":%zu,\"batch\":%d,"
           "\"window\":%d,\"credit\":%d,\"metrics\":{%s}}\n",
           O.scenario, O.n, O.size, O.batch, O.window, O.credit, g_metrics);
}

/* ---- publishing ------------------------------------------------------------------------ */

static uint8_t *g_msg; /* one AMQP 1.0 message: a data section holding the body */
static size_t g_msg_len, g_body_at;

static void message_init(void)
{
    g_msg = calloc(1, O.size + 16);
    if (!g_msg)
        die("out of memory");
    size_t i = 0;
    g_msg[i++] = 0x00; /* described type: data (0x75) */
    g_msg[i++] = 0x53;
    g_msg[i++] = 0x75;
    if (O.size <= 255) {
        g_msg[i++] = 0xa0; /* vbin8 */
        g_msg[i++] = (uint8_t)O.size;
    } else {
        g_msg[i++] = 0xb0; /* vbin32 */
        g_msg[i++] = (uint8_t)(O.size >> 24);
        g_msg[i++] = (uint8_t)(O.size >> 16);
        g_msg[i++] = (uint8_t)(O.size >> 8);
        g_msg[i++] = (uint8_t)O.size;
    }
    g_body_at = i;
    for (size_t k = 0; k < O.size; k++)
        g_msg[i + k] = (uint8_t)('a' + k % 26);
    g_msg_len = i + O.size;
}

static void declare_publisher(void)
{
    uint32_t c = ++g_corr;
    size_t m = frame_begin(K_DECLARE_PUBLISHER, 1);
    put32(c);
    put8(0);
    put16(0); /* reference: empty, no deduplication */
    putstr(O.stream);
    frame_end(m);
    uint16_t code = request_simple(K_DECLARE_PUBLISHER, c);
    if (code != CODE_OK)
        die("DeclarePublisher on %s: code %u", O.stream, code);
}

/* Publishing ids 1..N; id i was sent at g_sent_at[i] (latency only). */
static uint64_t g_next_id = 1, g_confirmed;
static uint8_t *g_conf_seen; /* one bit per id: each confirmed exactly once */
static int64_t *g_sent_at, *g_lat;
static uint64_t g_lat_n;

static void publish_frame(uint64_t count)
{
    size_t m = frame_begin(K_PUBLISH, 1);
    put8(0);
    put32((uint32_t)count);
    for (uint64_t k = 0; k < count; k++) {
        uint64_t id = g_next_id++;
        need_out(12 + g_msg_len);
        put64(id);
        put32((uint32_t)g_msg_len);
        /* the body's first 8 octets carry the id, so no two messages are the same bytes */
        memcpy(g_msg + g_body_at, &id, O.size >= 8 ? 8 : O.size);
        putbytes(g_msg, g_msg_len);
    }
    frame_end(m);
}

/* Takes the PublishConfirm / PublishError frames buffered. */
static void take_confirms(void)
{
    frame_t f;
    while (next_frame(&f)) {
        if (f.key == K_PUBLISH_CONFIRM) {
            if (f.len < 5)
                die("short PublishConfirm");
            uint32_t n = get32(f.p + 1);
            if (f.len != 5 + (size_t)n * 8)
                die("PublishConfirm of %u ids in %zu octets", n, f.len);
            int64_t t = g_sent_at ? now_ns() : 0;
            for (uint32_t i = 0; i < n; i++) {
                uint64_t id = get64(f.p + 5 + 8 * (size_t)i);
                if (id == 0 || id >= g_next_id)
                    die("confirm of id %" PRIu64 " never published", id);
                if (g_conf_seen[id >> 3] & (1u << (id & 7)))
                    die("id %" PRIu64 " confirmed twice", id);
                g_conf_seen[id >> 3] |= (uint8_t)(1u << (id & 7));
                if (g_sent_at)
                    g_lat[g_lat_n++] = t - g_sent_at[id];
            }
            g_confirmed += n;
            g_last_progress = now_ns();
        } else if (f.key == K_PUBLISH_ERROR) {
            uint32_t n = f.len >= 5 ? get32(f.p + 1) : 0;
            die("PublishError for %u ids, first code %u", n, f.len >= 15 ? get16(f.p + 13) : 0);
        } else if (f.key == K_HEARTBEAT || f.key == K_TUNE) {
            continue;
        } else {
            die("unexpected frame key 0x%04x while publishing", f.key);
        }
    }
}

static void check_stall(const char *what, uint64_t done)
{
    if (now_ns() - g_last_progress > (int64_t)O.stall_s * 1000000000)
        die("%s: no progress for %d s (%" PRIu64 " of %" PRIu64 ")", what, O.stall_s, done, O.n);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void scen_publish(int latency)
{
    connect_and_open();
    if (O.create)
        create_stream();
    declare_publisher();
    message_init();
    g_conf_seen = calloc(O.n / 8 + 2, 1);
    if (!g_conf_seen)
        die("out of memory");
    if (latency) {
        g_sent_at = calloc(O.n + 1, sizeof *g_sent_at);
        g_lat = calloc(O.n + 1, sizeof *g_lat);
        if (!g_sent_at || !g_lat)
            die("out of memory");
    }
    int64_t cpu0 = self_cpu_ns(), bcpu0 = broker_cpu_ns();
    int64_t t0 = now_ns(), tick = latency ? (int64_t)(1e9 / O.rate) : 0;
    uint64_t frames = 0;
    g_last_progress = t0;
    while (g_confirmed < O.n) {
        uint64_t sent = g_next_id - 1;
        int wait_ms = 100;
        if (sent < O.n) {
            uint64_t can = O.n - sent;
            if (latency) {
                /* open loop: every message whose time has come, in one frame */
                int64_t now = now_ns();
                uint64_t due = (uint64_t)((now - t0) / tick) + 1;
                if (due > O.n)
                    due = O.n;
                can = due > sent ? due - sent : 0;
                if (can > (uint64_t)O.batch)
                    can = (uint64_t)O.batch;
                if (can) {
                    publish_frame(can);
                    frames++;
                    flush(1);
                    int64_t tw = now_ns();
                    for (uint64_t id = sent + 1; id <= sent + can; id++)
                        g_sent_at[id] = tw;
                }
                int64_t next = t0 + (int64_t)(g_next_id - 1) * tick;
                int64_t w = next - now_ns();
                wait_ms = w <= 0 ? 0 : (int)(w / 1000000);
                if (w > 0 && wait_ms == 0) {
                    /* under a millisecond: poll() cannot wait that little; ppoll can */
                    struct pollfd p = {g_fd, POLLIN, 0};
                    struct timespec ts = {0, w};
                    ppoll(&p, 1, &ts, NULL);
                    wait_ms = -1;
                }
            } else {
                uint64_t room = (uint64_t)O.window - (sent - g_confirmed);
                if (room < can)
                    can = room;
                /* fill the output buffer with whole batches the window allows */
                while (can >= (uint64_t)O.batch || (can && can == O.n - (g_next_id - 1))) {
                    uint64_t k = can < (uint64_t)O.batch ? can : (uint64_t)O.batch;
                    if (g_out_len + k * (g_msg_len + 12) + 64 > OUT_CAP)
                        break;
                    publish_frame(k);
                    frames++;
                    can -= k;
                    if (g_out_len >= OUT_FLUSH)
                        break;
                }
                if (g_out_len)
                    flush(0);
                wait_ms = g_out_len ? 0 : 100;
            }
        }
        if (g_out_len) {
            /* the socket is full: wait for it or for confirms */
            struct pollfd p = {g_fd, POLLIN | POLLOUT, 0};
            poll(&p, 1, 100);
            if (p.revents & POLLOUT)
                flush(0);
            if (p.revents & POLLIN)
                fill_in(0);
        } else if (wait_ms >= 0) {
            fill_in(wait_ms);
        } else {
            fill_in(0);
        }
        take_confirms();
        check_stall("publish", g_confirmed);
    }
    int64_t t1 = now_ns();
    int64_t cpu1 = self_cpu_ns(), bcpu1 = broker_cpu_ns();
    double s = (double)(t1 - t0) / 1e9;
    metric("msg_s", (double)O.n / s);
    metric("seconds", s);
    metric("frames", (double)frames);
    metric("client_cpu", (double)(cpu1 - cpu0) / (double)(t1 - t0));
    if (bcpu0 >= 0)
        metric("broker_us_per_msg", (double)(bcpu1 - bcpu0) / 1e3 / (double)O.n);
    if (latency) {
        qsort(g_lat, g_lat_n, sizeof *g_lat, cmp_i64);
        double p50 = (double)g_lat[g_lat_n / 2] / 1e3;
        double p99 = (double)g_lat[(size_t)((double)g_lat_n * 0.99)] / 1e3;
        double p999 = (double)g_lat[(size_t)((double)g_lat_n * 0.999)] / 1e3;
        metric("rate", O.rate);
        metric("p50_us", p50);
        metric("p99_us", p99);
        metric("p999_us", p999);
        metric("max_us", (double)g_lat[g_lat_n - 1] / 1e3);
    }
    if (!O.keep)
        delete_stream();
    close_conn();
}

/* ---- consuming ------------------------------------------------------------------------- */

/* Walks one Deliver (v1): subscription id, the 48-octet chunk header, the entries. Returns the
 * records of a user chunk (0 for tracking chunks) and checks the chunk id follows the last. */
static uint64_t g_expect_offset;
static uint64_t take_deliver(const frame_t *f)
{
    if (f->version != 1)
        die("Deliver version %u", f->version);
    if (f->len < 1 + 48)
        die("short Deliver (%zu octets)", f->len);
    const uint8_t *h = f->p + 1;
    if (h[0] != 0x50)
        die("chunk magic/version 0x%02x", h[0]);
    uint8_t type = h[1];
    uint16_t entries = get16(h + 2);
    uint32_t records = get32(h + 4);
    uint64_t chunk_id = get64(h + 24);
    uint32_t data_len = get32(h + 36);
    if (48 + (size_t)data_len > f->len - 1)
        die("chunk data length %u over the frame's %zu", data_len, f->len - 49);
    if (type != 0)
        return 0;
    if (chunk_id != g_expect_offset)
        die("chunk id %" PRIu64 ", expected %" PRIu64 " (gap or overlap)", chunk_id,
            g_expect_offset);
    const uint8_t *d = h + 48, *end = d + data_len;
    uint32_t ne = 0, nr = 0;
    while (d < end) {
        if (!(d[0] & 0x80)) { /* simple entry: 0:1 size:31 */
            if (end - d < 4)
                die("truncated entry");
            uint32_t sz = get32(d) & 0x7fffffffu;
            if ((size_t)(end - d) < 4 + (size_t)sz)
                die("entry of %u octets past the chunk", sz);
            d += 4 + sz;
            nr++;
        } else { /* sub-entry batch: flags:8 records:16 uncompressed:32 length:32 */
            if (end - d < 11)
                die("truncated sub-entry batch");
            nr += get16(d + 1);
            uint32_t len = get32(d + 7);
            if ((size_t)(end - d) < 11 + (size_t)len)
                die("sub-entry batch past the chunk");
            d += 11 + len;
        }
        ne++;
    }
    if (ne != entries || nr != records)
        die("chunk %" PRIu64 ": %u entries %u records, header says %u and %u", chunk_id, ne, nr,
            entries, records);
    g_expect_offset = chunk_id + records;
    return records;
}

static void scen_consume(void)
{
    connect_and_open();
    int64_t cpu0 = self_cpu_ns(), bcpu0 = broker_cpu_ns();
    int64_t t0 = now_ns();
    uint32_t c = ++g_corr;
    size_t m = frame_begin(K_SUBSCRIBE, 1);
    put32(c);
    put8(1);
    putstr(O.stream);
    put16(OFFSET_FIRST);
    put16((uint16_t)O.credit);
    put32(0); /* no properties */
    frame_end(m);
    flush(1);
    uint64_t got = 0, chunks = 0, bytes = 0;
    int subscribed = 0;
    g_last_progress = t0;
    while (got < O.n) {
        fill_in(100);
        frame_t f;
        uint32_t credit = 0;
        while (next_frame(&f)) {
            if (f.key == K_DELIVER && !f.response) {
                got += take_deliver(&f);
                chunks++;
                bytes += f.len;
                credit++;
                g_last_progress = now_ns();
            } else if (f.key == K_SUBSCRIBE && f.response) {
                uint16_t code = f.len >= 6 ? get16(f.p + 4) : 0;
                if (code != CODE_OK)
                    die("Subscribe to %s: code %u", O.stream, code);
                subscribed = 1;
            } else if (f.key == K_CREDIT && f.response) {
                die("Credit refused: code %u", f.len >= 2 ? get16(f.p + 1) : 0);
            } else if (f.key == K_HEARTBEAT || f.key == K_TUNE) {
                continue;
            } else {
                die("unexpected frame key 0x%04x while consuming", f.key);
            }
        }
        /* one Credit of 1 per chunk taken, all of this read's in one write */
        for (uint32_t i = 0; i < credit; i++) {
            size_t mk = frame_begin(K_CREDIT, 1);
            put8(1);
            put16(1);
            frame_end(mk);
        }
        if (g_out_len)
            flush(1);
        check_stall("consume", got);
    }
    int64_t t1 = now_ns();
    int64_t cpu1 = self_cpu_ns(), bcpu1 = broker_cpu_ns();
    if (!subscribed)
        die("Deliver before the Subscribe response");
    double s = (double)(t1 - t0) / 1e9;
    metric("msg_s", (double)got / s);
    metric("records", (double)got);
    metric("seconds", s);
    metric("chunks", (double)chunks);
    metric("records_per_chunk", (double)got / (double)chunks);
    metric("mb_s", (double)bytes / s / 1e6);
    metric("client_cpu", (double)(cpu1 - cpu0) / (double)(t1 - t0));
    if (bcpu0 >= 0)
        metric("broker_us_per_msg", (double)(bcpu1 - bcpu0) / 1e3 / (double)got);
    /* Unsubscribe, then drain what was in flight before its answer. */
    c = ++g_corr;
    m = frame_begin(K_UNSUBSCRIBE, 1);
    put32(c);
    put8(1);
    frame_end(m);
    flush(1);
    int64_t deadline = now_ns() + (int64_t)O.stall_s * 1000000000;
    for (int done = 0; !done;) {
        frame_t f;
        while (!done && next_frame(&f))
            if (f.key == K_UNSUBSCRIBE && f.response)
                done = 1;
        if (!done) {
            if (now_ns() > deadline)
                die("no answer to Unsubscribe");
            fill_in(100);
        }
    }
    if (O.del)
        delete_stream();
    close_conn();
}

/* ---- --self-peer: the client's own ceiling ----------------------------------------------
 * A thread of this process plays a broker that costs nothing: it answers the handshake and
 * every request OK, confirms each Publish frame's ids as soon as it has read the frame, and
 * for a subscription sends ready-made chunks of PEER_CHUNK records (the --size body, as the
 * publisher wraps it) one per credit. The client runs unchanged against it on 127.0.0.1, so
 * its msg/s is what the client (and loopback) can do at most: the figure a broker's row is
 * read against. Blocking socket, one connection, ends when the client closes. */
#define PEER_CHUNK 1000

static int g_peer_listen;

static void peer_send(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* the client went: the run ends with it */
        p += w;
        n -= (size_t)w;
    }
}

static void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
static void wr32(uint8_t *p, uint32_t v)
{
    wr16(p, (uint16_t)(v >> 16));
    wr16(p + 2, (uint16_t)v);
}
static void wr64(uint8_t *p, uint64_t v)
{
    wr32(p, (uint32_t)(v >> 32));
    wr32(p + 4, (uint32_t)v);
}

static void *peer_main(void *arg)
{
    (void)arg;
    int fd = accept(g_peer_listen, NULL, NULL);
    if (fd < 0)
        return NULL;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* the chunk: Deliver v1, subscription id, 48-octet header, PEER_CHUNK simple entries */
    size_t msg = O.size + (O.size <= 255 ? 5 : 8);
    size_t data = PEER_CHUNK * (4 + msg), dsz = 4 + 4 + 1 + 48 + data;
    uint8_t *chunk = calloc(1, dsz);
    wr32(chunk, (uint32_t)(dsz - 4));
    wr16(chunk + 4, K_DELIVER);
    wr16(chunk + 6, 1);
    uint8_t *h = chunk + 9;
    h[0] = 0x50;
    wr16(h + 2, PEER_CHUNK);
    wr32(h + 4, PEER_CHUNK);
    wr32(h + 36, (uint32_t)data);
    for (size_t i = 0; i < PEER_CHUNK; i++)
        wr32(h + 48 + i * (4 + msg), (uint32_t)msg);
    size_t cap = 8u << 20, len = 0;
    uint8_t *in = malloc(cap), out[64 * 1024];
    uint64_t credit = 0, offset = 0;
    int subscribed = 0;
    for (;;) {
        /* deliver while there is credit, reading (without waiting) between chunks */
        int fresh = 0; /* bytes read in this turn, to be parsed before waiting for more */
        while (subscribed && credit) {
            wr64(h + 24, offset);
            peer_send(fd, chunk, dsz);
            offset += PEER_CHUNK;
            credit--;
            ssize_t r = recv(fd, in + len, cap - len, MSG_DONTWAIT);
            if (r > 0) {
                len += (size_t)r;
                fresh = 1;
                break;
            }
            if (r == 0)
                goto out;
        }
        if (!fresh && !(subscribed && credit)) {
            ssize_t r = recv(fd, in + len, cap - len, 0);
            if (r <= 0)
                goto out;
            len += (size_t)r;
        }
        size_t off = 0, olen = 0;
        while (len - off >= 4 && len - off - 4 >= get32(in + off)) {
            uint32_t size = get32(in + off);
            const uint8_t *b = in + off + 4;
            uint16_t key = get16(b) & 0x7fff;
            off += 4 + size;
            if (olen > sizeof out - 64) {
                peer_send(fd, out, olen);
                olen = 0;
            }
            uint8_t *o = out + olen;
            if (key == K_PUBLISH) {
                /* confirm the frame's ids: publisher id, count, then (id, message)* */
                uint32_t n = get32(b + 5);
                size_t need = 4 + 4 + 1 + 4 + 8 * (size_t)n;
                uint8_t *c = malloc(need);
                wr32(c, (uint32_t)(need - 4));
                wr16(c + 4, K_PUBLISH_CONFIRM);
                wr16(c + 6, 1);
                c[8] = b[4];
                wr32(c + 9, n);
                const uint8_t *q = b + 9;
                for (uint32_t i = 0; i < n; i++) {
                    memcpy(c + 13 + 8 * (size_t)i, q, 8);
                    q += 12 + get32(q + 8);
                }
                peer_send(fd, out, olen);
                olen = 0;
                peer_send(fd, c, need);
                free(c);
            } else if (key == K_CREDIT) {
                credit += get16(b + 5);
            } else if (key == K_TUNE || key == K_HEARTBEAT) {
                continue;
            } else if (key == K_SASL_AUTHENTICATE) {
                wr32(o, 10);
                wr16(o + 4, K_SASL_AUTHENTICATE | RESPONSE);
                wr16(o + 6, 1);
                memcpy(o + 8, b + 4, 4);
                wr16(o + 12, CODE_OK);
                /* then the server's Tune */
                wr32(o + 14, 12);
                wr16(o + 18, K_TUNE);
                wr16(o + 20, 1);
                wr32(o + 22, 1048576);
                wr32(o + 26, 0);
                olen += 30;
            } else {
                /* every other request: OK with its correlation id */
                wr32(o, 10);
                wr16(o + 4, (uint16_t)(key | RESPONSE));
                wr16(o + 6, 1);
                memcpy(o + 8, b + 4, 4);
                wr16(o + 12, CODE_OK);
                olen += 14;
                if (key == K_SUBSCRIBE) {
                    subscribed = 1;
                    credit += get16(b + 4 + 4 + 1 + 2 + get16(b + 9) + 2);
                } else if (key == K_UNSUBSCRIBE) {
                    subscribed = 0;
                }
            }
        }
        if (olen)
            peer_send(fd, out, olen);
        memmove(in, in + off, len - off);
        len -= off;
        if (len == cap)
            goto out;
    }
out:
    close(fd);
    free(in);
    free(chunk);
    return NULL;
}

/* Listens on 127.0.0.1:0 and points the client at it. */
static void peer_start(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    g_peer_listen = socket(AF_INET, SOCK_STREAM, 0);
    if (g_peer_listen < 0 || bind(g_peer_listen, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(g_peer_listen, 1) < 0 || getsockname(g_peer_listen, (struct sockaddr *)&a, &al) < 0)
        die("self-peer: %s", strerror(errno));
    pthread_t t;
    if (pthread_create(&t, NULL, peer_main, NULL) != 0)
        die("self-peer: pthread_create");
    pthread_detach(t);
    O.host = "127.0.0.1";
    O.port = ntohs(a.sin_port);
}

static void usage(int rc)
{
    fprintf(rc ? stderr : stdout,
            "usage: streambench -S publish|consume|latency [options]\n"
            "  -H, --host ADDR     broker (127.0.0.1)      -p, --port N   stream port (5552)\n"
            "  -n, --messages N    messages (100000)       -s, --size B   body octets (16)\n"
            "      --stream NAME   stream (streambench)    --create       Create it first\n"
            "      --keep          publish: leave the stream; --delete  consume: delete it after\n"
            "      --batch K       messages per Publish frame (100)\n"
            "      --window W      unconfirmed publishing ids at most (10000)\n"
            "      --credit C      consume: initial credit (10), then 1 per chunk\n"
            "  -r, --rate R        latency: msg/s, open loop (10000)\n"
            "      --pids P,P      broker processes: CPU per message from /proc\n"
            "      --stall S       fail after S s without progress (60)\n"
            "      --self-peer     run against a peer thread of this process that confirms\n"
            "                      and delivers at once: the client's own ceiling\n");
    exit(rc);
}

int main(int argc, char **argv)
{
    enum { STREAM = 256, CREATE, KEEP, DEL, BATCH, WINDOW, CREDIT, PIDS, STALL, SELFPEER };
    int self_peer = 0;
    static const struct option lo[] = {
        {"scenario", 1, 0, 'S'},       {"host", 1, 0, 'H'},      {"port", 1, 0, 'p'},
        {"messages", 1, 0, 'n'},       {"size", 1, 0, 's'},      {"rate", 1, 0, 'r'},
        {"stream", 1, 0, STREAM},      {"create", 0, 0, CREATE}, {"keep", 0, 0, KEEP},
        {"delete", 0, 0, DEL},         {"batch", 1, 0, BATCH},   {"window", 1, 0, WINDOW},
        {"credit", 1, 0, CREDIT},      {"pids", 1, 0, PIDS},     {"stall", 1, 0, STALL},
        {"self-peer", 0, 0, SELFPEER}, {"help", 0, 0, 'h'},      {0, 0, 0, 0}};
    int c;
    O.rate = 10000;
    while ((c = getopt_long(argc, argv, "S:H:p:n:s:r:h", lo, NULL)) != -1) {
        switch (c) {
        case 'S':
            O.scenario = optarg;
            break;
        case 'H':
            O.host = optarg;
            break;
        case 'p':
            O.port = atoi(optarg);
            break;
        case 'n':
            O.n = strtoull(optarg, NULL, 10);
            break;
        case 's':
            O.size = strtoull(optarg, NULL, 10);
            break;
        case 'r':
            O.rate = atof(optarg);
            break;
        case STREAM:
            O.stream = optarg;
            break;
        case CREATE:
            O.create = 1;
            break;
        case KEEP:
            O.keep = 1;
            break;
        case DEL:
            O.del = 1;
            break;
        case BATCH:
            O.batch = atoi(optarg);
            break;
        case WINDOW:
            O.window = atoi(optarg);
            break;
        case CREDIT:
            O.credit = atoi(optarg);
            break;
        case SELFPEER:
            self_peer = 1;
            break;
        case STALL:
            O.stall_s = atoi(optarg);
            break;
        case PIDS:
            for (char *s = strtok(optarg, ","); s && O.n_pids < MAX_PIDS; s = strtok(NULL, ","))
                O.pids[O.n_pids++] = atoi(s);
            break;
        case 'h':
            usage(0);
            break;
        default:
            usage(2);
        }
    }
    if (!O.scenario || O.n == 0 || O.batch < 1 || O.window < O.batch || O.credit < 1 ||
        O.credit > 65535 || O.rate <= 0 || O.size > 16u << 20)
        usage(2);
    g_out = malloc(OUT_CAP);
    g_in_cap = 1u << 20;
    g_in = malloc(g_in_cap);
    if (!g_out || !g_in)
        die("out of memory");
    if (self_peer)
        peer_start();
    if (!strcmp(O.scenario, "publish"))
        scen_publish(0);
    else if (!strcmp(O.scenario, "latency"))
        scen_publish(1);
    else if (!strcmp(O.scenario, "consume"))
        scen_consume();
    else
        usage(2);
    print_json();
    return 0;
}
