/* amqpbench.c - Sluice's load generator (issue 5). Drives one AMQP 0-9-1 broker (Sluice or
 * RabbitMQ) through one scenario with librabbitmq (rabbitmq-c 0.11), one connection per producer
 * or consumer thread, checks that every message arrived exactly once (a sequence number in each
 * body, one bitmap per receiving queue) and prints one JSON line of results on stdout.
 * Publishers call amqp_basic_publish per message (three send()s each), or with --raw build the
 * same frames themselves and write them 64 KiB at a time (the pipelined publisher).
 * Exit status: 0 ok; 1 verification failed (loss, duplicate, corrupt body, nack, wrong count);
 * 2 usage or broker/protocol error. bench/run.py runs it against both brokers and builds the
 * table; `amqpbench --help` lists scenarios and options.
 * The forward scenario publishes to one node and consumes on another (Sluice's store and
 * forward, or RabbitMQ's shovel between two nodes) and also checks the order per producer. */
#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CH 1 /* every connection uses one channel */
#define MAX_PIDS 64
#define MAX_THREADS 256
#define FRAME_MAX 131072
#define RAW_BATCH 65536 /* bytes per write of the pipelined publisher (--raw) */

typedef struct {
    const char *host;
    int port;
    const char *scenario;
    uint64_t n;
    size_t size;
    int producers, consumers, queues;
    double rate;
    int prefetch, ack_every, outstanding;
    int conns, conn_threads, settle_ms;
    int raw;            /* --raw / --pipeline: the pipelined publisher */
    int raw_consume;    /* --raw-consume: consumers read the socket themselves (consume_raw) */
    const char *tls_ca; /* --tls CAFILE: AMQPS (rabbitmq-c's OpenSSL socket), server verified */
    int stall_s;
    /* forward: the node messages arrive at, the routing key they are published with, the queue
     * they are consumed from there, and the publisher's mode (confirms, or transactions of
     * tx_size messages) */
    const char *to_host;
    int to_port;
    const char *route, *dest_queue;
    int tx_size;
    int keep;           /* confirm: leave the queue full (no consume, no delete): recovery benches;
                         * manyq: leave the queues (for a restart of the broker) */
    int drain;          /* confirm: only consume what --keep left (n messages) and delete the queue;
                         * manyq: check that the queues --keep left are all back, then delete them */
    int consumer_conns; /* manyq: connections the consumers are spread over */
    double since;       /* manyq --drain: CLOCK_MONOTONIC time the broker was started at */
    /* soak: duration (n = rate x seconds), RSS/depth sample period, warm-up left out of the
     * flatness figures */
    int seconds, sample_s, warmup_s;
    double bg_rate; /* pubsub: a persistent publisher with confirms beside it, msg/s (0: flat
                       out, -1: none), consumed by a consumer of its own */
    int bg_size;    /* its body size */
    const char *queue_type;    /* x-queue-type of every queue declared (classic; bench/cluster.py:
                                * quorum, replicated by both brokers) */
    const char *stream_offset; /* x-stream-offset consumer argument (a stream queue's consumers:
                                * bench/streams.py), NULL for none */
    pid_t pids[MAX_PIDS];
    int n_pids;
    char tag[64];
} opts_t;

static opts_t O = {
    .host = "127.0.0.1",
    .port = 5672,
    .scenario = "ptc",
    .n = 100000,
    .size = 16,
    .producers = 1,
    .consumers = 1,
    .queues = 4,
    .prefetch = 1000,
    .ack_every = 250,
    .outstanding = 1000,
    .conns = 10000,
    .conn_threads = 8,
    .settle_ms = 3000,
    .stall_s = 60,
    .consumer_conns = 4,
    .sample_s = 5,
    .warmup_s = 120,
    .bg_rate = -1,
    .bg_size = 1024,
    .queue_type = "classic",
};

static atomic_int g_failures;
static pthread_barrier_t g_start;

/* ---------------------------------------------------------------------------------------------
 * Errors: die() is for the harness or the broker misbehaving at protocol level (exit 2), fail()
 * for a verification failure (exit 1 at the end, so the other figures still print).
 */
__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "amqpbench: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "amqpbench: FAIL: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    atomic_fetch_add(&g_failures, 1);
}

/* A verification failure after which waiting longer is pointless (a stall). */
__attribute__((format(printf, 1, 2), noreturn)) static void fail_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "amqpbench: FAIL: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p)
        die("out of memory");
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * Clocks and broker process statistics (the broker's pids come from --pids).
 */
static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t thread_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void sleep_until(int64_t t)
{
    struct timespec ts = {.tv_sec = t / 1000000000, .tv_nsec = t % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* utime+stime of all broker processes in ns (all threads), or -1 without --pids. */
static int64_t broker_cpu_ns(void)
{
    if (!O.n_pids)
        return -1;
    int64_t total = 0;
    long hz = sysconf(_SC_CLK_TCK);
    for (int i = 0; i < O.n_pids; i++) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)O.pids[i]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        /* The command name may hold spaces; fields restart after its closing parenthesis. */
        char *p = strrchr(buf, ')');
        if (!p)
            continue;
        unsigned long long ut = 0, st = 0;
        if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
            total += (int64_t)((ut + st) * (1000000000ull / (unsigned long long)hz));
    }
    return total;
}

/* CPU time of all broker threads in ns from /proc/PID/task/TID/schedstat (the scheduler's own
 * nanosecond count, where /proc/PID/stat has 10 ms ticks), or -1 without --pids or schedstat. */
static int64_t broker_sched_ns(void)
{
    if (!O.n_pids)
        return -1;
    int64_t total = 0;
    for (int i = 0; i < O.n_pids; i++) {
        char path[96];
        snprintf(path, sizeof path, "/proc/%d/task", (int)O.pids[i]);
        DIR *d = opendir(path);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char sp[320];
            snprintf(sp, sizeof sp, "/proc/%d/task/%s/schedstat", (int)O.pids[i], e->d_name);
            FILE *f = fopen(sp, "r");
            if (!f)
                continue;
            long long ns;
            if (fscanf(f, "%lld", &ns) == 1)
                total += ns;
            else
                total = -1;
            fclose(f);
            if (total < 0)
                break;
        }
        closedir(d);
        if (total < 0)
            return -1;
    }
    return total;
}

/* Sum of VmRSS of the broker processes in KiB, or -1 without --pids. */
static int64_t broker_rss_kb(void)
{
    if (!O.n_pids)
        return -1;
    int64_t total = 0;
    for (int i = 0; i < O.n_pids; i++) {
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/%d/status", (int)O.pids[i]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        while (fgets(line, sizeof line, f)) {
            long long kb;
            if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
                total += kb;
        }
        fclose(f);
    }
    return total;
}

/* Wait until the broker's RSS stops moving (allocators and Erlang's GC settle lazily). */
static int64_t broker_rss_settled(void)
{
    int64_t prev = broker_rss_kb();
    int64_t deadline = now_ns() + (int64_t)O.settle_ms * 1000000 * 3;
    usleep((useconds_t)O.settle_ms * 1000 / 3);
    for (;;) {
        usleep((useconds_t)O.settle_ms * 1000 / 3);
        int64_t cur = broker_rss_kb();
        int64_t d = cur > prev ? cur - prev : prev - cur;
        if (d * 200 <= cur || now_ns() > deadline)
            return cur;
        prev = cur;
    }
}

/* ---------------------------------------------------------------------------------------------
 * JSON output: one line {"scenario":...,"ok":...,"metrics":{...}} on stdout.
 */
#define MAX_METRICS 64
static struct {
    const char *name;
    double v;
} g_metrics[MAX_METRICS];
static int g_n_metrics;

static void metric(const char *name, double v)
{
    if (g_n_metrics < MAX_METRICS) {
        g_metrics[g_n_metrics].name = name;
        g_metrics[g_n_metrics++].v = v;
    }
    fprintf(stderr, "  %-28s %.6g\n", name, v);
}

static void print_json(void)
{
    printf("{\"scenario\":\"%s\",\"ok\":%s,\"n\":%" PRIu64
           ",\"size\":%zu,\"producers\":%d,\"consumers\":%d,\"pipelined\":%s,\"metrics\":{",
           O.scenario, atomic_load(&g_failures) ? "false" : "true", O.n, O.size, O.producers,
           O.consumers, O.raw ? "true" : "false");
    for (int i = 0; i < g_n_metrics; i++)
        printf("%s\"%s\":%.17g", i ? "," : "", g_metrics[i].name, g_metrics[i].v);
    printf("}}\n");
    fflush(stdout);
}

/* ---------------------------------------------------------------------------------------------
 * rabbitmq-c plumbing.
 */
static void check_reply(amqp_rpc_reply_t r, const char *what)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        return;
    case AMQP_RESPONSE_NONE:
        die("%s: no reply", what);
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        die("%s: %s", what, amqp_error_string2(r.library_error));
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_connection_close_t *m = r.reply.decoded;
            die("%s: connection.close %u %.*s", what, m->reply_code, (int)m->reply_text.len,
                (char *)m->reply_text.bytes);
        }
        if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            amqp_channel_close_t *m = r.reply.decoded;
            die("%s: channel.close %u %.*s", what, m->reply_code, (int)m->reply_text.len,
                (char *)m->reply_text.bytes);
        }
        die("%s: unexpected method 0x%08x", what, r.reply.id);
    }
    die("%s: reply type %d", what, r.reply_type);
}

/* Opens a connection and channel CH. Heartbeats off: a thread blocked in a pure publish loop does
 * not read, and idle connections must stay open however long the measurement takes. */
/* A plain or (--tls) TLS socket on c. TLS verifies the broker's certificate against the CA
 * file; the host name is not checked (the benchmark dials 127.0.0.1). */
static amqp_socket_t *bsocket(amqp_connection_state_t c)
{
    if (!O.tls_ca)
        return amqp_tcp_socket_new(c);
    amqp_socket_t *s = amqp_ssl_socket_new(c);
    if (!s)
        return NULL;
    if (amqp_ssl_socket_set_cacert(s, O.tls_ca) != AMQP_STATUS_OK)
        die("--tls %s: cannot load the CA certificate", O.tls_ca);
    amqp_ssl_socket_set_verify_peer(s, 1);
    amqp_ssl_socket_set_verify_hostname(s, 0);
    return s;
}

static amqp_connection_state_t bconnect_to(const char *host, int port)
{
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = bsocket(c);
    if (!s)
        die("amqp_tcp_socket_new failed");
    int rc = amqp_socket_open(s, host, port);
    if (rc != AMQP_STATUS_OK)
        die("connect %s:%d: %s", host, port, amqp_error_string2(rc));
    check_reply(amqp_login(c, "/", 0, FRAME_MAX, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest"),
                "login");
    amqp_channel_open(c, CH);
    check_reply(amqp_get_rpc_reply(c), "channel.open");
    return c;
}

static amqp_connection_state_t bconnect(void)
{
    return bconnect_to(O.host, O.port);
}

static void bclose(amqp_connection_state_t c)
{
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

/* Both brokers get x-queue-type explicitly (classic unless --queue-type): RabbitMQ's default is
 * classic anyway, this documents it and guards against a node-wide default_queue_type. */
static amqp_table_t classic_args(void)
{
    static amqp_table_entry_t e[1];
    e[0].key = amqp_cstring_bytes("x-queue-type");
    e[0].value.kind = AMQP_FIELD_KIND_UTF8;
    e[0].value.value.bytes = amqp_cstring_bytes(O.queue_type);
    return (amqp_table_t){.num_entries = 1, .entries = e};
}

static void queue_declare(amqp_connection_state_t c, const char *q, int durable)
{
    amqp_queue_declare(c, CH, amqp_cstring_bytes(q), 0, durable, 0, 0, classic_args());
    check_reply(amqp_get_rpc_reply(c), "queue.declare");
}

static uint32_t queue_count(amqp_connection_state_t c, const char *q)
{
    amqp_queue_declare_ok_t *ok =
        amqp_queue_declare(c, CH, amqp_cstring_bytes(q), 1, 0, 0, 0, amqp_empty_table);
    check_reply(amqp_get_rpc_reply(c), "queue.declare passive");
    return ok->message_count;
}

static uint32_t queue_delete(amqp_connection_state_t c, const char *q)
{
    amqp_queue_delete_ok_t *ok = amqp_queue_delete(c, CH, amqp_cstring_bytes(q), 0, 0);
    check_reply(amqp_get_rpc_reply(c), "queue.delete");
    return ok->message_count;
}

/* Polls until the queue holds `want` ready messages. The first poll on the publisher's own
 * channel is exact on both brokers (a channel's methods are processed in order); more polls are
 * only needed when several producers feed the queue. */
static void wait_count(amqp_connection_state_t c, const char *q, uint64_t want)
{
    int64_t deadline = now_ns() + (int64_t)O.stall_s * 1000000000;
    for (;;) {
        uint32_t n = queue_count(c, q);
        if (n == want)
            return;
        if (n > want)
            fail_fatal("queue %s holds %u messages, %" PRIu64 " were published", q, n, want);
        if (now_ns() > deadline)
            fail_fatal("queue %s holds %u of %" PRIu64 " published messages after %d s", q, n, want,
                       O.stall_s);
        usleep(500);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Message bodies: bytes 0-7 sequence number, 8-15 CLOCK_MONOTONIC send time in ns, then a fixed
 * pattern whose last byte is checked (catches truncated or shifted bodies).
 */
static uint8_t *body_new(void)
{
    uint8_t *b = xcalloc(1, O.size);
    for (size_t i = 16; i < O.size; i++)
        b[i] = (uint8_t)i;
    return b;
}

static void body_stamp(uint8_t *b, uint64_t seq, int64_t ts)
{
    memcpy(b, &seq, 8);
    memcpy(b + 8, &ts, 8);
}

/* Exactly-once bookkeeping for one receiving queue. Atomic because several consumers may share a
 * queue. */
typedef struct {
    _Atomic uint64_t *w;
    uint64_t n;
    atomic_uint_fast64_t got, dups, bad;
} seen_t;

static void seen_init(seen_t *s, uint64_t n)
{
    s->w = xcalloc((n + 63) / 64, sizeof *s->w);
    s->n = n;
    atomic_init(&s->got, 0);
    atomic_init(&s->dups, 0);
    atomic_init(&s->bad, 0);
}

static void seen_mark(seen_t *s, const amqp_bytes_t *body, int64_t *ts_out)
{
    uint64_t seq;
    const uint8_t *b = body->bytes;
    if (body->len != O.size || (O.size > 16 && b[O.size - 1] != (uint8_t)(O.size - 1))) {
        if (atomic_fetch_add(&s->bad, 1) < 5)
            fail("corrupt body: %zu bytes, expected %zu", body->len, O.size);
        *ts_out = 0;
        return;
    }
    memcpy(&seq, b, 8);
    memcpy(ts_out, b + 8, 8);
    if (seq >= s->n) {
        if (atomic_fetch_add(&s->bad, 1) < 5)
            fail("sequence number %" PRIu64 " out of range", seq);
        return;
    }
    uint64_t bit = 1ull << (seq & 63);
    uint64_t old = atomic_fetch_or_explicit(&s->w[seq >> 6], bit, memory_order_relaxed);
    if (old & bit) {
        if (atomic_fetch_add(&s->dups, 1) < 5)
            fail("duplicate delivery of message %" PRIu64, seq);
    } else {
        atomic_fetch_add_explicit(&s->got, 1, memory_order_relaxed);
    }
}

static void seen_verify(seen_t *s, const char *what)
{
    uint64_t got = atomic_load(&s->got), dups = atomic_load(&s->dups), bad = atomic_load(&s->bad);
    if (got == s->n && !dups && !bad)
        return;
    uint64_t first_missing = s->n;
    for (uint64_t i = 0; i < s->n; i++)
        if (!(atomic_load(&s->w[i >> 6]) & (1ull << (i & 63)))) {
            first_missing = i;
            break;
        }
    fail("%s: %" PRIu64 " of %" PRIu64 " messages arrived, %" PRIu64 " duplicates, %" PRIu64
         " corrupt; first missing %" PRIu64,
         what, got, s->n, dups, bad, first_missing);
}

/* ---------------------------------------------------------------------------------------------
 * AMQP frames for the pipelined publisher (--raw): the bytes rabbitmq-c's amqp_basic_publish
 * writes, built here and written in 64 KiB batches. Also used to report the wire size of a
 * publish.
 */
static uint8_t *put8(uint8_t *p, uint8_t v)
{
    *p = v;
    return p + 1;
}

static uint8_t *put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    return p + 2;
}

static uint8_t *put32(uint8_t *p, uint32_t v)
{
    p = put16(p, (uint16_t)(v >> 16));
    return put16(p, (uint16_t)v);
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
    p = put32(p, (uint32_t)(v >> 32));
    return put32(p, (uint32_t)v);
}

static uint8_t *putss(uint8_t *p, const char *s)
{
    size_t n = strlen(s);
    p = put8(p, (uint8_t)n);
    memcpy(p, s, n);
    return p + n;
}

/* Method + content-header frames of one basic.publish; the body frame follows. */
static size_t publish_prefix(uint8_t *out, const char *ex, const char *rk, int persistent)
{
    uint8_t *p = out, *size, *payload;
    p = put8(p, AMQP_FRAME_METHOD);
    p = put16(p, CH);
    size = p;
    p += 4;
    payload = p;
    p = put32(p, AMQP_BASIC_PUBLISH_METHOD);
    p = put16(p, 0); /* reserved-1 */
    p = putss(p, ex);
    p = putss(p, rk);
    p = put8(p, 0); /* mandatory, immediate */
    put32(size, (uint32_t)(p - payload));
    p = put8(p, AMQP_FRAME_END);

    p = put8(p, AMQP_FRAME_HEADER);
    p = put16(p, CH);
    size = p;
    p += 4;
    payload = p;
    p = put16(p, AMQP_BASIC_CLASS);
    p = put16(p, 0); /* weight */
    p = put64(p, O.size);
    p = put16(p, persistent ? AMQP_BASIC_DELIVERY_MODE_FLAG : 0);
    if (persistent)
        p = put8(p, 2);
    put32(size, (uint32_t)(p - payload));
    p = put8(p, AMQP_FRAME_END);
    return (size_t)(p - out);
}

static size_t publish_wire_bytes(const char *ex, const char *rk, int persistent)
{
    uint8_t tmp[600];
    return publish_prefix(tmp, ex, rk, persistent) + 8 + O.size;
}

static void raw_write(int fd, const uint8_t *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* rabbitmq-c's socket is non-blocking; a full socket is the broker's flow control. */
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, O.stall_s * 1000) == 0)
                fail_fatal("broker stopped reading for %d s", O.stall_s);
            continue;
        }
        die("send: %s", n < 0 ? strerror(errno) : "connection closed");
    }
}

/* manyq: the name of queue i, and a 64-bit mix (splitmix64's finalizer) that picks a queue for
 * each message: a fixed, uniform sequence, the same for both brokers. */
static void manyq_name(char *buf, size_t len, int i)
{
    snprintf(buf, len, "%s-mq%05d", O.tag, i);
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---------------------------------------------------------------------------------------------
 * Producers.
 */
typedef struct {
    amqp_connection_state_t conn;
    char exchange[128], rkey[128];
    uint64_t lo, hi; /* publishes sequence numbers [lo, hi) */
    int persistent, confirms;
    int tx_size; /* >0: tx.select, tx.commit after every tx_size publishes */
    uint64_t commits;
    int raw;                  /* pipelined publisher: frames built here, 64 KiB per write */
    double rate;              /* msg/s for this producer, 0 = as fast as possible */
    pthread_barrier_t *start; /* NULL: start at once */
    int64_t t_start, t_end, cpu_ns;
    uint64_t writes; /* pipelined publisher: send() batches written */
    int rk_queues;   /* >0: each publish goes to one of the manyq queues, picked at random */
    /* publisher confirms: delivery tag t (1-based) is settled when acked[t] */
    uint8_t *acked;
    uint64_t published, confirmed, low;
    /* confirm latency (confirm scenario): sent[t] = when tag t was handed to the socket; each
     * confirm adds now - sent[t] to clat (ns) */
    int conf_lat; /* record them */
    int64_t *sent;
    uint64_t *clat, clat_n;
} producer_t;

static void confirm_tags(producer_t *p, uint64_t tag, int multiple, int nack)
{
    if (tag == 0 || tag > p->published)
        fail_fatal("confirm for delivery tag %" PRIu64 ", only %" PRIu64 " published", tag,
                   p->published);
    if (nack)
        fail("basic.nack for delivery tag %" PRIu64 "%s", tag, multiple ? " (multiple)" : "");
    uint64_t from = multiple ? p->low : tag;
    int64_t now = p->sent ? now_ns() : 0;
    for (uint64_t t = from; t <= tag; t++) {
        if (!p->acked[t]) {
            p->acked[t] = 1;
            p->confirmed++;
            if (p->sent)
                p->clat[p->clat_n++] = (uint64_t)(now - p->sent[t]);
        } else if (!multiple) {
            fail("delivery tag %" PRIu64 " confirmed twice", tag);
        }
    }
    while (p->low <= p->published && p->acked[p->low])
        p->low++;
}

/* Reads confirms: blocking for the first frame when `block`, then whatever is already there.
 * With `until` (> 0, CLOCK_MONOTONIC ns) it reads them as they come until that time: a paced
 * publisher waits for its next send that way, so each confirm is taken when it arrives. */
static void confirms_read_until(producer_t *p, int block, int64_t until)
{
    struct timeval zero = {0, 0}, stall = {O.stall_s, 0};
    for (;;) {
        amqp_frame_t f;
        struct timeval left;
        struct timeval *tv = block ? &stall : &zero;
        if (until > 0) {
            int64_t d = until - now_ns();
            if (d <= 0)
                return;
            left = (struct timeval){.tv_sec = d / 1000000000, .tv_usec = (d % 1000000000) / 1000};
            tv = &left;
        }
        int rc = amqp_simple_wait_frame_noblock(p->conn, &f, tv);
        if (rc == AMQP_STATUS_TIMEOUT) {
            if (block)
                fail_fatal("no confirm for %d s: %" PRIu64 " of %" PRIu64 " confirmed", O.stall_s,
                           p->confirmed, p->published);
            return;
        }
        if (rc != AMQP_STATUS_OK)
            die("reading confirms: %s", amqp_error_string2(rc));
        if (f.frame_type != AMQP_FRAME_METHOD)
            die("unexpected frame type %d while waiting for confirms", f.frame_type);
        amqp_method_t *m = &f.payload.method;
        if (m->id == AMQP_BASIC_ACK_METHOD) {
            amqp_basic_ack_t *a = m->decoded;
            confirm_tags(p, a->delivery_tag, a->multiple, 0);
        } else if (m->id == AMQP_BASIC_NACK_METHOD) {
            amqp_basic_nack_t *a = m->decoded;
            confirm_tags(p, a->delivery_tag, a->multiple, 1);
        } else if (m->id == AMQP_CHANNEL_CLOSE_METHOD || m->id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_channel_close_t *c = m->decoded; /* same layout for both */
            die("broker closed: %u %.*s", c->reply_code, (int)c->reply_text.len,
                (char *)c->reply_text.bytes);
        } else {
            die("unexpected method 0x%08x while waiting for confirms", m->id);
        }
        amqp_maybe_release_buffers(p->conn);
        block = 0;
    }
}

static void confirms_read(producer_t *p, int block)
{
    confirms_read_until(p, block, 0);
}

/* The pipelined publisher's output buffer: whole messages, at most RAW_BATCH bytes. */
typedef struct {
    uint8_t *buf, *w;
    size_t cap;
    int fd;
} pipe_buf_t;

static void pipe_flush(producer_t *p, pipe_buf_t *b)
{
    if (b->w == b->buf)
        return;
    raw_write(b->fd, b->buf, (size_t)(b->w - b->buf));
    b->w = b->buf;
    p->writes++;
}

/* The pipelined publisher: the same frames amqp_basic_publish would send (method, content
 * header, one body frame), appended to a buffer that is written when the next message would not
 * fit in 64 KiB, before waiting for confirms, and at the end. With confirms, at most
 * --outstanding publishes are unconfirmed, as in publish_all; confirms are read through
 * librabbitmq (its outbound side stays idle, so raw writes on its socket do not interleave with
 * anything it sends). */
static void publish_raw(producer_t *p, uint8_t *body)
{
    uint8_t prefix[600];
    size_t plen = publish_prefix(prefix, p->exchange, p->rkey, p->persistent);
    size_t msg = plen + 8 + O.size;
    int frame_max = amqp_get_frame_max(p->conn);
    if (O.size + 8 > (size_t)(frame_max > 0 ? frame_max : FRAME_MAX))
        die("--raw: a %zu-byte body does not fit one frame (frame_max %d); the pipelined "
            "publisher sends one body frame per message",
            O.size, frame_max);
    pipe_buf_t b = {.cap = RAW_BATCH > msg ? RAW_BATCH - RAW_BATCH % msg : msg,
                    .fd = amqp_get_sockfd(p->conn)};
    b.buf = b.w = xcalloc(1, b.cap);
    for (uint64_t seq = p->lo; seq < p->hi; seq++) {
        if ((size_t)(b.w - b.buf) + msg > b.cap)
            pipe_flush(p, &b);
        body_stamp(body, seq, now_ns());
        memcpy(b.w, prefix, plen);
        b.w += plen;
        b.w = put8(b.w, AMQP_FRAME_BODY);
        b.w = put16(b.w, CH);
        b.w = put32(b.w, (uint32_t)O.size);
        memcpy(b.w, body, O.size);
        b.w += O.size;
        b.w = put8(b.w, AMQP_FRAME_END);
        if (p->confirms) {
            p->published++; /* its delivery tag, whether written yet or not */
            if (p->sent)
                p->sent[p->published] = now_ns();
            if (p->published - p->confirmed >= (uint64_t)O.outstanding) {
                /* Window full: what is buffered must reach the broker before we wait. */
                pipe_flush(p, &b);
                while (p->published - p->confirmed >= (uint64_t)O.outstanding)
                    confirms_read(p, 1);
            }
            if ((p->published & 63) == 0)
                confirms_read(p, 0);
        }
    }
    pipe_flush(p, &b);
    free(b.buf);
}

static void publish_all(producer_t *p)
{
    uint8_t *body = body_new();
    amqp_basic_properties_t props = {0};
    amqp_basic_properties_t *pp = NULL;
    if (p->persistent) {
        props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
        props.delivery_mode = 2;
        pp = &props;
    }
    if (p->confirms) {
        amqp_confirm_select(p->conn, CH);
        check_reply(amqp_get_rpc_reply(p->conn), "confirm.select");
        p->acked = xcalloc(p->hi - p->lo + 1, 1);
        p->low = 1;
        if (p->conf_lat) {
            p->sent = xcalloc(p->hi - p->lo + 1, sizeof *p->sent);
            p->clat = xcalloc(p->hi - p->lo + 1, sizeof *p->clat);
        }
    }
    if (p->tx_size) {
        amqp_tx_select(p->conn, CH);
        check_reply(amqp_get_rpc_reply(p->conn), "tx.select");
    }
    amqp_bytes_t ex = amqp_cstring_bytes(p->exchange), rk = amqp_cstring_bytes(p->rkey);
    if (p->start)
        pthread_barrier_wait(p->start);
    int64_t cpu0 = thread_cpu_ns();
    p->t_start = now_ns();
    if (p->raw) {
        publish_raw(p, body);
    } else {
        for (uint64_t seq = p->lo; seq < p->hi; seq++) {
            int64_t t = now_ns();
            if (p->rate > 0) {
                /* Open-loop pacing against the schedule, not the previous send: a late send is
                 * followed by catch-up sends, as a steady upstream would produce them. */
                int64_t due = p->t_start + (int64_t)((double)(seq - p->lo) * 1e9 / p->rate);
                if (t < due) {
                    if (p->confirms && p->published > p->confirmed)
                        confirms_read_until(p, 0, due); /* confirms timed as they come */
                    else
                        sleep_until(due);
                    t = now_ns();
                }
            }
            body_stamp(body, seq, t);
            char rkbuf[160];
            if (p->rk_queues) {
                manyq_name(rkbuf, sizeof rkbuf, (int)(mix64(seq) % (uint64_t)p->rk_queues));
                rk = amqp_cstring_bytes(rkbuf);
            }
            int rc = amqp_basic_publish(p->conn, CH, ex, rk, 0, 0, pp,
                                        (amqp_bytes_t){.len = O.size, .bytes = body});
            if (rc != AMQP_STATUS_OK)
                die("basic.publish: %s", amqp_error_string2(rc));
            if (p->tx_size && ((seq - p->lo + 1) % (uint64_t)p->tx_size == 0 || seq + 1 == p->hi)) {
                amqp_tx_commit(p->conn, CH);
                check_reply(amqp_get_rpc_reply(p->conn), "tx.commit");
                p->commits++;
            }
            if (p->confirms) {
                p->published++;
                if (p->sent)
                    p->sent[p->published] = t; /* when the publish began */
                while (p->published - p->confirmed >= (uint64_t)O.outstanding)
                    confirms_read(p, 1);
                /* Picking up confirms early keeps the window open without a syscall per send. */
                if ((p->published & 63) == 0)
                    confirms_read(p, 0);
            }
        }
    }
    if (p->confirms)
        while (p->confirmed < p->published)
            confirms_read(p, 1);
    p->t_end = now_ns();
    p->cpu_ns = thread_cpu_ns() - cpu0;
    free(body);
}

static void *producer_main(void *arg)
{
    publish_all(arg);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Consumers.
 */
typedef struct {
    amqp_connection_state_t conn;
    char queue[128];
    seen_t *seen;
    uint64_t expect;              /* stop after this many; 0: stop when *shared reaches total */
    atomic_uint_fast64_t *shared; /* messages received by every consumer of a shared queue */
    uint64_t shared_total;
    uint64_t *lat; /* latency samples in ns (NULL: not recorded) */
    atomic_uint_fast64_t *lat_n;
    uint64_t lat_cap;
    int subscribe_first; /* subscribe before the start barrier (pub/sub, fanout) */
    int subscribed;      /* manyq: subscribed already, before the phase */
    int q_lo, q_hi;      /* manyq: one consumer on each of the queues [q_lo, q_hi), one channel */
    int check_order;     /* each producer's messages must arrive in publish order */
    uint64_t last_seq[MAX_THREADS], out_of_order;
    uint64_t got, redelivered;
    int64_t t_start, t_last, cpu_ns;
    size_t ctag_len;
} consumer_t;

static void consumer_subscribe(consumer_t *c)
{
    amqp_basic_qos(c->conn, CH, 0, (uint16_t)O.prefetch, 0);
    check_reply(amqp_get_rpc_reply(c->conn), "basic.qos");
    if (c->q_hi > c->q_lo) {
        for (int i = c->q_lo; i < c->q_hi; i++) {
            char q[160];
            manyq_name(q, sizeof q, i);
            amqp_basic_consume(c->conn, CH, amqp_cstring_bytes(q), amqp_empty_bytes, 0, 0, 0,
                               amqp_empty_table);
            check_reply(amqp_get_rpc_reply(c->conn), "basic.consume");
        }
        c->subscribed = 1;
        return;
    }
    amqp_table_entry_t so[1];
    amqp_table_t args = amqp_empty_table;
    if (O.stream_offset) {
        so[0].key = amqp_cstring_bytes("x-stream-offset");
        so[0].value.kind = AMQP_FIELD_KIND_UTF8;
        so[0].value.value.bytes = amqp_cstring_bytes(O.stream_offset);
        args = (amqp_table_t){.num_entries = 1, .entries = so};
    }
    amqp_basic_consume_ok_t *ok = amqp_basic_consume(c->conn, CH, amqp_cstring_bytes(c->queue),
                                                     amqp_empty_bytes, 0, 0, 0, args);
    check_reply(amqp_get_rpc_reply(c->conn), "basic.consume");
    c->ctag_len = ok->consumer_tag.len;
}

/* Producer i publishes [n*i/P, n*(i+1)/P): its messages must arrive with rising numbers. */
static void order_mark(consumer_t *c, const void *body)
{
    uint64_t seq;
    memcpy(&seq, body, 8);
    if (seq >= O.n)
        return; /* seen_mark reported it */
    uint64_t np = (uint64_t)O.producers, i = seq * np / O.n;
    while (i + 1 < np && O.n * (i + 1) / np <= seq)
        i++;
    while (i > 0 && O.n * i / np > seq)
        i--;
    /* last_seq holds seq + 1 of the producer's latest arrival, 0 before the first. */
    if (c->last_seq[i] && seq + 1 <= c->last_seq[i]) {
        if (c->out_of_order++ < 5)
            fail("out of order: message %" PRIu64 " of producer %" PRIu64 " after %" PRIu64, seq, i,
                 c->last_seq[i] - 1);
        return;
    }
    c->last_seq[i] = seq + 1;
}

static int consumer_done(consumer_t *c)
{
    if (c->expect)
        return c->got >= c->expect;
    return atomic_load_explicit(c->shared, memory_order_relaxed) >= c->shared_total;
}

/* One delivery taken: checked, counted, its latency recorded, acked every --ack-every. */
static void consumed(consumer_t *c, const amqp_bytes_t *body, uint64_t tag, int redelivered,
                     uint64_t *unacked, uint64_t *last_tag)
{
    int64_t t = now_ns(), ts;
    c->t_last = t;
    c->got++;
    if (redelivered)
        c->redelivered++;
    seen_mark(c->seen, body, &ts);
    if (c->check_order && body->len >= 8)
        order_mark(c, body->bytes);
    if (c->lat) {
        uint64_t i = atomic_fetch_add_explicit(c->lat_n, 1, memory_order_relaxed);
        if (i < c->lat_cap)
            c->lat[i] = (uint64_t)(t - ts);
    }
    if (c->shared)
        atomic_fetch_add_explicit(c->shared, 1, memory_order_relaxed);
    *last_tag = tag;
    if (++*unacked >= (uint64_t)O.ack_every) {
        if (amqp_basic_ack(c->conn, CH, *last_tag, 1) != AMQP_STATUS_OK)
            die("basic.ack failed");
        *unacked = 0;
    }
}

/* The raw consumer (--raw-consume): reads the connection's socket itself, RAW_READ bytes at a
 * time, and takes each delivery's body where it lies in that buffer; amqp_consume_message
 * instead allocates and copies every frame and every message. Acks still go through
 * librabbitmq (its outbound side: one send each). It shows what the broker itself delivers
 * where the library's per-message cost would set the pace (the consuming counterpart of the
 * pipelined publisher). Only deliveries and heartbeats may arrive; anything else fails. */
#define RAW_READ (256 * 1024)

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static void consume_raw(consumer_t *c, uint64_t *unacked, uint64_t *last_tag)
{
    int fd = amqp_get_sockfd(c->conn);
    size_t cap = RAW_READ, len = 0, off = 0;
    uint8_t *buf = xcalloc(1, cap);
    uint8_t *whole = NULL; /* a body that came in several frames, put together */
    uint64_t tag = 0, body_size = 0, body_got = 0;
    int redelivered = 0, stage = 0; /* 0: a deliver next, 1: its header, 2: its body */
    int64_t last_progress = now_ns();
    while (!consumer_done(c)) {
        /* A whole frame at buf[off]? */
        if (len - off >= 7) {
            uint8_t type = buf[off];
            uint32_t size = get32(buf + off + 3);
            if ((size_t)size + 8 > cap)
                fail_fatal("raw consumer: a %u-byte frame", size);
            if (len - off >= (size_t)size + 8) {
                const uint8_t *pl = buf + off + 7;
                if (pl[size] != AMQP_FRAME_END)
                    fail_fatal("raw consumer: no frame end");
                off += (size_t)size + 8;
                if (type == AMQP_FRAME_HEARTBEAT)
                    continue;
                if (type == AMQP_FRAME_METHOD && stage == 0 && size >= 4 &&
                    get32(pl) == AMQP_BASIC_DELIVER_METHOD) {
                    size_t ct = pl[4]; /* consumer-tag, delivery-tag, redelivered, ... */
                    if (5 + ct + 9 > size)
                        fail_fatal("raw consumer: a short basic.deliver");
                    tag = get64(pl + 5 + ct);
                    redelivered = pl[5 + ct + 8] & 1;
                    stage = 1;
                } else if (type == AMQP_FRAME_HEADER && stage == 1 && size >= 12) {
                    body_size = get64(pl + 4);
                    body_got = 0;
                    stage = 2;
                } else if (type == AMQP_FRAME_BODY && stage == 2 && body_got + size <= body_size) {
                    if (body_got == 0 && size == body_size) {
                        body_got = size; /* the usual case: one frame, taken in place */
                        amqp_bytes_t b = {.len = size, .bytes = (void *)pl};
                        consumed(c, &b, tag, redelivered, unacked, last_tag);
                    } else {
                        if (body_got == 0)
                            whole = realloc(whole, body_size ? body_size : 1);
                        memcpy(whole + body_got, pl, size);
                        body_got += size;
                        if (body_got == body_size) {
                            amqp_bytes_t b = {.len = body_size, .bytes = whole};
                            consumed(c, &b, tag, redelivered, unacked, last_tag);
                        }
                    }
                } else {
                    fail_fatal("raw consumer: frame type %u (%u bytes) in stage %d", type, size,
                               stage);
                }
                if (stage == 2 && body_got == body_size) {
                    if (body_size == 0) {
                        amqp_bytes_t b = {.len = 0, .bytes = buf};
                        consumed(c, &b, tag, redelivered, unacked, last_tag);
                    }
                    stage = 0;
                    last_progress = now_ns();
                }
                continue;
            }
        }
        /* Need more: keep the partial frame at the start of the buffer. */
        memmove(buf, buf + off, len - off);
        len -= off;
        off = 0;
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        if (n > 0) {
            len += (size_t)n;
            continue;
        }
        if (n == 0)
            fail_fatal("raw consumer: the broker closed the connection");
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            fail_fatal("raw consumer: recv: %s", strerror(errno));
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) == 0 && now_ns() - last_progress > (int64_t)O.stall_s * 1000000000)
            fail_fatal("consumer on %s stalled: %" PRIu64 " messages in %d s", c->queue, c->got,
                       O.stall_s);
    }
    if (len != off || stage != 0)
        fail_fatal("raw consumer: %zu bytes past the last message", len - off);
    free(whole);
    free(buf);
}

static void *consumer_main(void *arg)
{
    consumer_t *c = arg;
    if (c->subscribe_first && !c->subscribed)
        consumer_subscribe(c);
    pthread_barrier_wait(&g_start);
    int64_t cpu0 = thread_cpu_ns();
    c->t_start = now_ns();
    if (!c->subscribe_first && !c->subscribed)
        consumer_subscribe(c);
    uint64_t unacked = 0, last_tag = 0;
    int64_t last_progress = now_ns();
    struct timeval tv = {0, 100000};
    while (!consumer_done(c)) {
        amqp_envelope_t env;
        amqp_maybe_release_buffers(c->conn);
        amqp_rpc_reply_t r = amqp_consume_message(c->conn, &env, &tv, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                r.library_error == AMQP_STATUS_TIMEOUT) {
                if (now_ns() - last_progress > (int64_t)O.stall_s * 1000000000)
                    fail_fatal("consumer on %s stalled: %" PRIu64 " messages in %d s", c->queue,
                               c->got, O.stall_s);
                if (unacked) {
                    /* Shared queue near its end: release what we hold so others can finish. */
                    amqp_basic_ack(c->conn, CH, last_tag, 1);
                    unacked = 0;
                }
                continue;
            }
            check_reply(r, "consume");
        }
        last_progress = now_ns();
        consumed(c, &env.message.body, env.delivery_tag, env.redelivered, &unacked, &last_tag);
        amqp_destroy_envelope(&env);
        /* --raw-consume: the rest is read off the socket once librabbitmq holds nothing
         * more of it (a whole message taken, no bytes or frames buffered). */
        if (O.raw_consume && !amqp_data_in_buffer(c->conn) && !amqp_frames_enqueued(c->conn)) {
            consume_raw(c, &unacked, &last_tag);
            break;
        }
    }
    if (unacked && amqp_basic_ack(c->conn, CH, last_tag, 1) != AMQP_STATUS_OK)
        die("basic.ack failed");
    c->cpu_ns = thread_cpu_ns() - cpu0;
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Phases: start every thread, release them together, join. Returns the start time.
 */
typedef struct {
    int64_t t0, broker_cpu0;
} phase_t;

static phase_t phase_run(producer_t *ps, int np, consumer_t *cs, int nc)
{
    pthread_t th[MAX_THREADS];
    phase_t ph;
    if (np + nc > MAX_THREADS)
        die("too many threads");
    pthread_barrier_init(&g_start, NULL, (unsigned)(np + nc + 1));
    for (int i = 0; i < nc; i++)
        pthread_create(&th[i], NULL, consumer_main, &cs[i]);
    for (int i = 0; i < np; i++) {
        ps[i].start = &g_start;
        pthread_create(&th[nc + i], NULL, producer_main, &ps[i]);
    }
    /* The broker's CPU is read before the release: reading /proc takes long enough for a
     * pipelined producer to write a whole small run before it returns. */
    ph.broker_cpu0 = broker_cpu_ns();
    pthread_barrier_wait(&g_start);
    ph.t0 = now_ns();
    for (int i = 0; i < np + nc; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&g_start);
    /* The phase starts at the first thread's start: on a busy machine this thread can be
     * scheduled after a producer has finished (CI's bench-smoke once got pub_rate=inf). */
    for (int i = 0; i < np; i++)
        if (ps[i].t_start && ps[i].t_start < ph.t0)
            ph.t0 = ps[i].t_start;
    for (int i = 0; i < nc; i++)
        if (cs[i].t_start && cs[i].t_start < ph.t0)
            ph.t0 = cs[i].t_start;
    return ph;
}

/* Never zero: a rate is count / secs(), and JSON has no inf. */
static double secs(int64_t ns)
{
    return (double)(ns > 0 ? ns : 1) / 1e9;
}

/* Broker CPU per message over the phase, in microseconds (-1 without --pids). */
static double broker_us_per_msg(const phase_t *ph, uint64_t msgs)
{
    if (ph->broker_cpu0 < 0)
        return -1;
    return (double)(broker_cpu_ns() - ph->broker_cpu0) / 1e3 / (double)msgs;
}

static producer_t *producers_new(int np, const char *ex, const char *rk, uint64_t total)
{
    producer_t *ps = xcalloc((size_t)np, sizeof *ps);
    for (int i = 0; i < np; i++) {
        ps[i].conn = bconnect();
        snprintf(ps[i].exchange, sizeof ps[i].exchange, "%s", ex);
        snprintf(ps[i].rkey, sizeof ps[i].rkey, "%s", rk);
        ps[i].lo = total * (uint64_t)i / (uint64_t)np;
        ps[i].hi = total * (uint64_t)(i + 1) / (uint64_t)np;
        ps[i].raw = O.raw;
    }
    return ps;
}

static consumer_t *consumers_new(int nc, const char *q, seen_t *seen, uint64_t total,
                                 atomic_uint_fast64_t *shared)
{
    consumer_t *cs = xcalloc((size_t)nc, sizeof *cs);
    for (int i = 0; i < nc; i++) {
        cs[i].conn = bconnect();
        snprintf(cs[i].queue, sizeof cs[i].queue, "%s", q);
        cs[i].seen = seen;
        if (nc == 1) {
            cs[i].expect = total;
        } else {
            cs[i].shared = shared;
            cs[i].shared_total = total;
        }
    }
    return cs;
}

static void producers_free(producer_t *ps, int np)
{
    for (int i = 0; i < np; i++) {
        bclose(ps[i].conn);
        free(ps[i].acked);
        free(ps[i].sent);
        free(ps[i].clat);
    }
    free(ps);
}

static void consumers_free(consumer_t *cs, int nc)
{
    for (int i = 0; i < nc; i++)
        bclose(cs[i].conn);
    free(cs);
}

static int64_t max_t_last(consumer_t *cs, int nc)
{
    int64_t t = 0;
    for (int i = 0; i < nc; i++)
        if (cs[i].t_last > t)
            t = cs[i].t_last;
    return t;
}

static int64_t sum_cpu(producer_t *ps, int np, consumer_t *cs, int nc)
{
    int64_t t = 0;
    for (int i = 0; i < np; i++)
        t += ps[i].cpu_ns;
    for (int i = 0; i < nc; i++)
        t += cs[i].cpu_ns;
    return t;
}

/* Pipelined publisher: messages per send() batch, all producers together. */
static void metric_msgs_per_write(producer_t *ps, int np, uint64_t msgs)
{
    uint64_t writes = 0;
    for (int i = 0; i < np; i++)
        writes += ps[i].writes;
    if (O.raw && writes)
        metric("pub_msgs_per_write", (double)msgs / (double)writes);
}

static size_t deliver_wire_bytes(const char *ex, const char *rk, size_t ctag_len)
{
    /* basic.deliver: class+method 4, consumer-tag, delivery-tag 8, redelivered 1, exchange,
     * routing-key; then the same content header (no properties) and body frames. */
    size_t method = 8 + 4 + 1 + ctag_len + 8 + 1 + 1 + strlen(ex) + 1 + strlen(rk);
    return method + 8 + 14 + 8 + O.size;
}

/* ---------------------------------------------------------------------------------------------
 * Scenario 1: publish N into one queue, then consume them all.
 */
static void scen_ptc(void)
{
    char q[128];
    snprintf(q, sizeof q, "%s-ptc", O.tag);
    amqp_connection_state_t ctl = bconnect();
    queue_declare(ctl, q, 0);
    seen_t seen;
    seen_init(&seen, O.n);
    atomic_uint_fast64_t shared = 0;

    producer_t *ps = producers_new(O.producers, "", q, O.n);
    phase_t ph = phase_run(ps, O.producers, NULL, 0);
    wait_count(ps[O.producers - 1].conn, q, O.n);
    int64_t t_pub = now_ns() - ph.t0;
    double pub_cpu = broker_us_per_msg(&ph, O.n);
    int64_t cpu_p = sum_cpu(ps, O.producers, NULL, 0);

    consumer_t *cs = consumers_new(O.consumers, q, &seen, O.n, &shared);
    phase_t ph2 = phase_run(NULL, 0, cs, O.consumers);
    int64_t t_cons = max_t_last(cs, O.consumers) - ph2.t0;
    double cons_cpu = broker_us_per_msg(&ph2, O.n);
    seen_verify(&seen, q);
    uint32_t left = queue_count(ctl, q);
    if (left)
        fail("%s still holds %u messages after all %" PRIu64 " were consumed", q, left, O.n);

    metric("pub_rate", (double)O.n / secs(t_pub));
    metric("cons_rate", (double)O.n / secs(t_cons));
    metric("pub_s", secs(t_pub));
    metric("cons_s", secs(t_cons));
    metric("broker_us_per_msg_pub", pub_cpu);
    metric("broker_us_per_msg_cons", cons_cpu);
    metric("client_cpu_pub", (double)cpu_p / (double)t_pub / O.producers);
    metric("client_cpu_cons",
           (double)sum_cpu(NULL, 0, cs, O.consumers) / (double)t_cons / O.consumers);
    /* Phase bounds on CLOCK_MONOTONIC, for `perf record -k mono` + `perf report --time`. */
    metric("t_pub0", secs(ph.t0));
    metric("t_pub1", secs(ph.t0 + t_pub));
    metric("t_cons0", secs(ph2.t0));
    metric("t_cons1", secs(ph2.t0 + t_cons));
    metric("pub_wire_bytes", (double)publish_wire_bytes("", q, 0));
    metric_msgs_per_write(ps, O.producers, O.n);
    metric("deliver_wire_bytes", (double)deliver_wire_bytes("", q, cs[0].ctag_len));
    producers_free(ps, O.producers);
    consumers_free(cs, O.consumers);
    queue_delete(ctl, q);
    bclose(ctl);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, uint64_t n, double q)
{
    if (!n)
        return -1;
    uint64_t i = (uint64_t)(q * (double)n + 0.999999);
    if (i < 1)
        i = 1;
    if (i > n)
        i = n;
    return (double)v[i - 1];
}

/* ---------------------------------------------------------------------------------------------
 * Scenario 2: producers and consumers at once on one queue; end-to-end rate and latency, at full
 * speed or at --rate msg/s (all producers together).
 */
/* ---------------------------------------------------------------------------------------------
 * Background load (--bg-persistent R): a persistent publisher with confirms (window
 * --outstanding) into its own durable queue, paced at R msg/s or flat out, and a consumer that
 * acks what it gets, both until told to stop: the bulk persistent work that latency-sensitive
 * traffic must not queue behind. Its bodies carry no stamp; they are not verified.
 */
typedef struct {
    char q[160];
    pthread_t pub, cons;
    atomic_int stop;
    producer_t p;
    uint64_t consumed;
    int64_t t0, t1;
} bgload_t;

#define BG_MAX_TAGS (64u << 20) /* confirm bookkeeping: a byte per publish (calloc, lazily) */

static void *bg_pub_main(void *arg)
{
    bgload_t *g = arg;
    producer_t *p = &g->p;
    amqp_confirm_select(p->conn, CH);
    check_reply(amqp_get_rpc_reply(p->conn), "confirm.select");
    p->acked = xcalloc(BG_MAX_TAGS + 1, 1);
    p->low = 1;
    uint8_t *body = xcalloc(1, (size_t)O.bg_size);
    amqp_basic_properties_t props = {._flags = AMQP_BASIC_DELIVERY_MODE_FLAG, .delivery_mode = 2};
    amqp_bytes_t rk = amqp_cstring_bytes(g->q);
    g->t0 = now_ns();
    while (!atomic_load(&g->stop) && p->published < BG_MAX_TAGS) {
        if (O.bg_rate > 0) {
            int64_t due = g->t0 + (int64_t)((double)p->published * 1e9 / O.bg_rate);
            if (now_ns() < due)
                sleep_until(due);
        }
        int rc = amqp_basic_publish(p->conn, CH, amqp_empty_bytes, rk, 0, 0, &props,
                                    (amqp_bytes_t){.len = (size_t)O.bg_size, .bytes = body});
        if (rc != AMQP_STATUS_OK)
            die("background basic.publish: %s", amqp_error_string2(rc));
        p->published++;
        while (p->published - p->confirmed >= (uint64_t)O.outstanding)
            confirms_read(p, 1);
        if ((p->published & 63) == 0)
            confirms_read(p, 0);
    }
    while (p->confirmed < p->published)
        confirms_read(p, 1);
    g->t1 = now_ns();
    free(body);
    return NULL;
}

static void *bg_cons_main(void *arg)
{
    bgload_t *g = arg;
    amqp_connection_state_t c = bconnect();
    amqp_basic_qos(c, CH, 0, (uint16_t)O.prefetch, 0);
    check_reply(amqp_get_rpc_reply(c), "basic.qos");
    amqp_basic_consume(c, CH, amqp_cstring_bytes(g->q), amqp_empty_bytes, 0, 0, 0,
                       amqp_empty_table);
    check_reply(amqp_get_rpc_reply(c), "basic.consume");
    struct timeval tv = {0, 50000};
    uint64_t unacked = 0, last = 0;
    while (!atomic_load(&g->stop)) {
        amqp_envelope_t env;
        amqp_maybe_release_buffers(c);
        amqp_rpc_reply_t r = amqp_consume_message(c, &env, &tv, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                r.library_error == AMQP_STATUS_TIMEOUT)
                continue;
            check_reply(r, "background consume");
        }
        g->consumed++;
        last = env.delivery_tag;
        if (++unacked >= (uint64_t)O.ack_every) {
            amqp_basic_ack(c, CH, last, 1);
            unacked = 0;
        }
        amqp_destroy_envelope(&env);
    }
    if (unacked)
        amqp_basic_ack(c, CH, last, 1);
    bclose(c);
    return NULL;
}

static bgload_t *bg_start(amqp_connection_state_t ctl)
{
    if (O.bg_rate < 0)
        return NULL;
    bgload_t *g = xcalloc(1, sizeof *g);
    snprintf(g->q, sizeof g->q, "%s-bg", O.tag);
    queue_declare(ctl, g->q, 1);
    g->p.conn = bconnect();
    pthread_create(&g->cons, NULL, bg_cons_main, g);
    pthread_create(&g->pub, NULL, bg_pub_main, g);
    usleep(300000); /* running before the measured phase starts */
    return g;
}

static void bg_stop(bgload_t *g, amqp_connection_state_t ctl)
{
    if (!g)
        return;
    atomic_store(&g->stop, 1);
    pthread_join(g->pub, NULL);
    pthread_join(g->cons, NULL);
    metric("bg_rate", (double)g->p.published / secs(g->t1 - g->t0));
    metric("bg_consumed", (double)g->consumed);
    bclose(g->p.conn);
    free(g->p.acked);
    queue_delete(ctl, g->q);
    free(g);
}

static void scen_pubsub(void)
{
    char q[128];
    snprintf(q, sizeof q, "%s-pubsub", O.tag);
    amqp_connection_state_t ctl = bconnect();
    queue_declare(ctl, q, 0);
    seen_t seen;
    seen_init(&seen, O.n);
    atomic_uint_fast64_t shared = 0, lat_n = 0;
    uint64_t *lat = xcalloc(O.n, sizeof *lat);

    consumer_t *cs = consumers_new(O.consumers, q, &seen, O.n, &shared);
    for (int i = 0; i < O.consumers; i++) {
        cs[i].subscribe_first = 1;
        cs[i].lat = lat;
        cs[i].lat_n = &lat_n;
        cs[i].lat_cap = O.n;
    }
    producer_t *ps = producers_new(O.producers, "", q, O.n);
    for (int i = 0; i < O.producers; i++)
        ps[i].rate = O.rate / O.producers;
    bgload_t *bg = bg_start(ctl);
    phase_t ph = phase_run(ps, O.producers, cs, O.consumers);
    bg_stop(bg, ctl);
    int64_t t_e2e = max_t_last(cs, O.consumers) - ph.t0;
    int64_t t_pub = 0;
    for (int i = 0; i < O.producers; i++)
        if (ps[i].t_end - ph.t0 > t_pub)
            t_pub = ps[i].t_end - ph.t0;
    double cpu = broker_us_per_msg(&ph, O.n);
    seen_verify(&seen, q);

    uint64_t n = atomic_load(&lat_n);
    if (n > O.n)
        n = O.n;
    qsort(lat, n, sizeof *lat, cmp_u64);
    metric("e2e_rate", (double)O.n / secs(t_e2e));
    metric("pub_rate", (double)O.n / secs(t_pub));
    metric("lat_p50_us", pct(lat, n, 0.50) / 1e3);
    metric("lat_p99_us", pct(lat, n, 0.99) / 1e3);
    metric("lat_p999_us", pct(lat, n, 0.999) / 1e3);
    metric("lat_max_us", pct(lat, n, 1.0) / 1e3);
    metric("broker_us_per_msg", cpu);
    metric("client_cpu", (double)sum_cpu(ps, O.producers, cs, O.consumers) / (double)t_e2e);
    metric("t0", secs(ph.t0));
    metric("t1", secs(ph.t0 + t_e2e));
    metric_msgs_per_write(ps, O.producers, O.n);
    free(lat);
    producers_free(ps, O.producers);
    consumers_free(cs, O.consumers);
    queue_delete(ctl, q);
    bclose(ctl);
}

/* ---------------------------------------------------------------------------------------------
 * Scenario 3: persistent messages into a durable queue with publisher confirms, --outstanding
 * unconfirmed per producer (or with --tx-size K in transactions of K; confirm_rate is then the
 * rate of commit-oks); then drain the queue to verify.
 */
/* What bounds a drain: the consumer thread's CPU share of it (near 1.0: the client set the
 * pace) and the broker's CPU per message over it (with --pids). */
static void drain_metrics(const phase_t *ph, const consumer_t *c, int64_t t_drain)
{
    double us = broker_us_per_msg(ph, O.n);
    metric("drain_client_cpu", t_drain > 0 ? (double)c->cpu_ns / (double)t_drain : 0);
    if (us >= 0)
        metric("drain_broker_us_per_msg", us);
}

static void scen_confirm(void)
{
    char q[128];
    snprintf(q, sizeof q, "%s-confirm", O.tag);
    amqp_connection_state_t ctl = bconnect();
    queue_declare(ctl, q, 1);
    seen_t seen;
    seen_init(&seen, O.n);
    atomic_uint_fast64_t shared = 0;
    if (O.drain) {
        wait_count(ctl, q, O.n);
        consumer_t *dc = consumers_new(1, q, &seen, O.n, &shared);
        phase_t dph = phase_run(NULL, 0, dc, 1);
        seen_verify(&seen, q);
        int64_t t_drain = max_t_last(dc, 1) - dph.t0;
        metric("drain_rate", (double)O.n / secs(t_drain));
        drain_metrics(&dph, dc, t_drain);
        consumers_free(dc, 1);
        queue_delete(ctl, q);
        bclose(ctl);
        return;
    }

    producer_t *ps = producers_new(O.producers, "", q, O.n);
    for (int i = 0; i < O.producers; i++) {
        ps[i].persistent = 1;
        /* --tx-size K: transactions of K instead (the reference of forward --tx-size K) */
        ps[i].tx_size = O.tx_size;
        ps[i].confirms = !O.tx_size;
        /* publish-to-confirm latency of every message; -r paces the publishers (open loop) */
        ps[i].conf_lat = ps[i].confirms;
        ps[i].rate = O.rate / O.producers;
    }
    phase_t ph = phase_run(ps, O.producers, NULL, 0);
    int64_t t_conf = 0;
    for (int i = 0; i < O.producers; i++)
        if (ps[i].t_end - ph.t0 > t_conf)
            t_conf = ps[i].t_end - ph.t0;
    double cpu = broker_us_per_msg(&ph, O.n);
    if (!O.tx_size) {
        uint64_t *lat = xcalloc(O.n, sizeof *lat), ln = 0;
        for (int i = 0; i < O.producers; i++)
            for (uint64_t k = 0; k < ps[i].clat_n && ln < O.n; k++)
                lat[ln++] = ps[i].clat[k];
        qsort(lat, ln, sizeof *lat, cmp_u64);
        metric("conf_lat_p50_us", pct(lat, ln, 0.50) / 1e3);
        metric("conf_lat_p99_us", pct(lat, ln, 0.99) / 1e3);
        metric("conf_lat_p999_us", pct(lat, ln, 0.999) / 1e3);
        metric("conf_lat_max_us", pct(lat, ln, 1.0) / 1e3);
        free(lat);
    }
    /* A stream's message count is not its ready messages (RabbitMQ's passive declare does not
     * report a stream's length): every confirm is in, and the consumer counts them all. */
    if (strcmp(O.queue_type, "stream") != 0)
        wait_count(ctl, q, O.n);
    if (O.keep) {
        metric("confirm_rate", (double)O.n / secs(t_conf));
        producers_free(ps, O.producers);
        bclose(ctl);
        return;
    }

    consumer_t *cs = consumers_new(1, q, &seen, O.n, &shared);
    phase_t ph2 = phase_run(NULL, 0, cs, 1);
    int64_t t_cons = max_t_last(cs, 1) - ph2.t0;
    seen_verify(&seen, q);

    metric("confirm_rate", (double)O.n / secs(t_conf));
    metric("confirm_s", secs(t_conf));
    metric("broker_us_per_msg", cpu);
    metric("client_cpu", (double)sum_cpu(ps, O.producers, NULL, 0) / (double)t_conf / O.producers);
    metric("drain_rate", (double)O.n / secs(t_cons));
    drain_metrics(&ph2, cs, t_cons);
    metric_msgs_per_write(ps, O.producers, O.n);
    producers_free(ps, O.producers);
    consumers_free(cs, 1);
    queue_delete(ctl, q);
    bclose(ctl);
}

/* ---------------------------------------------------------------------------------------------
 * Scenario 3b: store and forward. Producers publish persistent messages to the source node
 * (-H/-p) with routing key --route (Sluice: a remote format name, so they land in the outgoing
 * queue for the other node; RabbitMQ: the queue a shovel drains), with publisher confirms or,
 * with --tx-size K, in transactions of K messages; one consumer on the destination node
 * (--to-host/--to-port) takes them from --dest-queue. Every message must arrive exactly once and,
 * per producer, in order. forward rate = N / (first publish .. last arrival); accept rate =
 * N / (first publish .. last confirm or commit-ok at the source). Both queues are durable
 * without arguments (a RabbitMQ shovel declares its queues that way).
 */
static void scen_forward(void)
{
    if (!O.to_host || !O.to_port)
        die("forward: --to-host and --to-port name the node the messages arrive at");
    char dq[128];
    snprintf(dq, sizeof dq, "%s", O.dest_queue ? O.dest_queue : "fwd");
    const char *route = O.route ? O.route : dq;
    amqp_connection_state_t dst = bconnect_to(O.to_host, O.to_port);
    amqp_queue_declare(dst, CH, amqp_cstring_bytes(dq), 0, 1, 0, 0, amqp_empty_table);
    check_reply(amqp_get_rpc_reply(dst), "queue.declare (destination)");
    seen_t seen;
    seen_init(&seen, O.n);
    atomic_uint_fast64_t lat_n = 0;
    uint64_t *lat = xcalloc(O.n, sizeof *lat);

    consumer_t *cs = xcalloc(1, sizeof *cs);
    cs->conn = bconnect_to(O.to_host, O.to_port);
    snprintf(cs->queue, sizeof cs->queue, "%s", dq);
    cs->seen = &seen;
    cs->expect = O.n;
    cs->subscribe_first = 1;
    cs->check_order = 1;
    cs->lat = lat;
    cs->lat_n = &lat_n;
    cs->lat_cap = O.n;
    producer_t *ps = producers_new(O.producers, "", route, O.n);
    for (int i = 0; i < O.producers; i++) {
        ps[i].persistent = 1;
        ps[i].tx_size = O.tx_size;
        ps[i].confirms = !O.tx_size;
    }
    phase_t ph = phase_run(ps, O.producers, cs, 1);
    int64_t t_fwd = cs->t_last - ph.t0, t_acc = 0;
    uint64_t commits = 0;
    for (int i = 0; i < O.producers; i++) {
        if (ps[i].t_end - ph.t0 > t_acc)
            t_acc = ps[i].t_end - ph.t0;
        commits += ps[i].commits;
    }
    double cpu = broker_us_per_msg(&ph, O.n);
    seen_verify(&seen, dq);
    uint32_t left = queue_count(dst, dq);
    if (left)
        fail("%s still holds %u messages after all %" PRIu64 " arrived", dq, left, O.n);

    uint64_t n = atomic_load(&lat_n);
    if (n > O.n)
        n = O.n;
    qsort(lat, n, sizeof *lat, cmp_u64);
    metric("fwd_rate", (double)O.n / secs(t_fwd));
    metric("accept_rate", (double)O.n / secs(t_acc));
    metric("fwd_s", secs(t_fwd));
    metric("lat_p50_us", pct(lat, n, 0.50) / 1e3);
    metric("lat_p99_us", pct(lat, n, 0.99) / 1e3);
    metric("broker_us_per_msg", cpu);
    metric("client_cpu", (double)sum_cpu(ps, O.producers, cs, 1) / (double)t_fwd);
    metric("out_of_order", (double)cs->out_of_order);
    metric("redelivered", (double)cs->redelivered);
    if (O.tx_size)
        metric("commits", (double)commits);
    free(lat);
    producers_free(ps, O.producers);
    consumers_free(cs, 1);
    queue_delete(dst, dq);
    bclose(dst);
}

/* ---------------------------------------------------------------------------------------------
 * Scenario 4: one producer into a fanout exchange bound to --queues queues, one consumer each.
 */
static void scen_fanout(void)
{
    char ex[128];
    int nq = O.queues;
    snprintf(ex, sizeof ex, "%s-fanout", O.tag);
    amqp_connection_state_t ctl = bconnect();
    amqp_exchange_declare(ctl, CH, amqp_cstring_bytes(ex), amqp_cstring_bytes("fanout"), 0, 0, 0, 0,
                          amqp_empty_table);
    check_reply(amqp_get_rpc_reply(ctl), "exchange.declare");
    seen_t *seen = xcalloc((size_t)nq, sizeof *seen);
    consumer_t *cs = xcalloc((size_t)nq, sizeof *cs);
    for (int i = 0; i < nq; i++) {
        snprintf(cs[i].queue, sizeof cs[i].queue, "%s-fan%d", O.tag, i);
        queue_declare(ctl, cs[i].queue, 0);
        amqp_queue_bind(ctl, CH, amqp_cstring_bytes(cs[i].queue), amqp_cstring_bytes(ex),
                        amqp_empty_bytes, amqp_empty_table);
        check_reply(amqp_get_rpc_reply(ctl), "queue.bind");
        seen_init(&seen[i], O.n);
        cs[i].conn = bconnect();
        cs[i].seen = &seen[i];
        cs[i].expect = O.n;
        cs[i].subscribe_first = 1;
    }
    producer_t *ps = producers_new(O.producers, ex, "", O.n);
    phase_t ph = phase_run(ps, O.producers, cs, nq);
    int64_t t = max_t_last(cs, nq) - ph.t0;
    double cpu = broker_us_per_msg(&ph, O.n);
    for (int i = 0; i < nq; i++)
        seen_verify(&seen[i], cs[i].queue);
    metric("fanout_rate", (double)O.n / secs(t));
    metric("deliveries_rate", (double)O.n * nq / secs(t));
    metric("broker_us_per_msg", cpu);
    metric("client_cpu", (double)sum_cpu(ps, O.producers, cs, nq) / (double)t);
    metric_msgs_per_write(ps, O.producers, O.n);
    producers_free(ps, O.producers);
    consumers_free(cs, nq);
    for (int i = 0; i < nq; i++) {
        char q[128];
        snprintf(q, sizeof q, "%s-fan%d", O.tag, i);
        queue_delete(ctl, q);
    }
    amqp_exchange_delete(ctl, CH, amqp_cstring_bytes(ex), 0);
    check_reply(amqp_get_rpc_reply(ctl), "exchange.delete");
    bclose(ctl);
}

/* ---------------------------------------------------------------------------------------------
 * Scenario 5: time queue.purge and queue.delete of a queue holding N messages.
 */
static void fill(amqp_connection_state_t pub, const char *q)
{
    producer_t p = {.conn = pub, .lo = 0, .hi = O.n, .raw = 1};
    snprintf(p.rkey, sizeof p.rkey, "%s", q);
    int64_t t0 = now_ns();
    publish_all(&p);
    wait_count(pub, q, O.n);
    fprintf(stderr, "  filled %s with %" PRIu64 " in %.2f s\n", q, O.n, secs(now_ns() - t0));
}

static void scen_purge(void)
{
    char q[128];
    snprintf(q, sizeof q, "%s-purge", O.tag);
    amqp_connection_state_t ctl = bconnect(), pub = bconnect();
    queue_declare(ctl, q, 0);
    int64_t rss0 = broker_rss_settled();
    fill(pub, q);
    int64_t rss1 = broker_rss_settled();

    int64_t t0 = now_ns();
    amqp_queue_purge_ok_t *ok = amqp_queue_purge(ctl, CH, amqp_cstring_bytes(q));
    check_reply(amqp_get_rpc_reply(ctl), "queue.purge");
    int64_t t_purge = now_ns() - t0;
    uint32_t purged = ok->message_count;
    if (purged != O.n)
        fail("queue.purge-ok message-count %u, expected %" PRIu64, purged, O.n);
    uint32_t left = queue_count(ctl, q);
    if (left)
        fail("%s holds %u messages after purge", q, left);

    fill(pub, q);
    t0 = now_ns();
    uint32_t deleted = queue_delete(ctl, q);
    int64_t t_delete = now_ns() - t0;
    if (deleted != O.n)
        fail("queue.delete-ok message-count %u, expected %" PRIu64, deleted, O.n);

    metric("purge_ms", (double)t_purge / 1e6);
    metric("delete_ms", (double)t_delete / 1e6);
    metric("purge_count", purged);
    metric("delete_count", deleted);
    if (rss0 >= 0)
        metric("rss_bytes_per_queued_msg", (double)(rss1 - rss0) * 1024 / (double)O.n);
    bclose(pub);
    bclose(ctl);
}

/* ---------------------------------------------------------------------------------------------
 * Scenario 6: --conns idle connections (handshake done, heartbeats off), then a channel on each;
 * broker RSS growth per connection and per channel.
 */
typedef struct {
    amqp_connection_state_t *conns;
    int lo, hi, step; /* step 0 open, 1 channel.open, 2 close */
    atomic_int *errors;
} conn_job_t;

static void *conn_worker(void *arg)
{
    conn_job_t *j = arg;
    for (int i = j->lo; i < j->hi; i++) {
        amqp_connection_state_t c;
        if (j->step == 0) {
            c = amqp_new_connection();
            amqp_socket_t *s = bsocket(c);
            amqp_rpc_reply_t r = {0};
            int rc = s ? amqp_socket_open(s, O.host, O.port) : AMQP_STATUS_SOCKET_ERROR;
            if (rc == AMQP_STATUS_OK)
                r = amqp_login(c, "/", 0, FRAME_MAX, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest");
            if (rc != AMQP_STATUS_OK || r.reply_type != AMQP_RESPONSE_NORMAL) {
                if (atomic_fetch_add(j->errors, 1) < 3)
                    fprintf(stderr, "amqpbench: connection %d: %s\n", i,
                            rc != AMQP_STATUS_OK ? amqp_error_string2(rc)
                            : r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                                ? amqp_error_string2(r.library_error)
                                : "refused by broker");
                amqp_destroy_connection(c);
                c = NULL;
            }
            j->conns[i] = c;
        } else if ((c = j->conns[i]) != NULL) {
            if (j->step == 1) {
                amqp_channel_open(c, CH);
                if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
                    atomic_fetch_add(j->errors, 1);
            } else {
                amqp_connection_close(c, AMQP_REPLY_SUCCESS);
                amqp_destroy_connection(c);
                j->conns[i] = NULL;
            }
        }
    }
    return NULL;
}

static int64_t conn_step(amqp_connection_state_t *conns, int n, int step, atomic_int *errors)
{
    int nt = O.conn_threads < MAX_THREADS ? O.conn_threads : MAX_THREADS;
    pthread_t th[MAX_THREADS];
    conn_job_t jobs[MAX_THREADS];
    int64_t t0 = now_ns();
    for (int i = 0; i < nt; i++) {
        jobs[i] = (conn_job_t){conns, n * i / nt, n * (i + 1) / nt, step, errors};
        pthread_create(&th[i], NULL, conn_worker, &jobs[i]);
    }
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    return now_ns() - t0;
}

static void scen_conns(void)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    int n = O.conns;
    if ((rlim_t)n + 64 > rl.rlim_cur) {
        n = (int)rl.rlim_cur - 64;
        fprintf(stderr, "amqpbench: RLIMIT_NOFILE %llu: opening %d connections, not %d\n",
                (unsigned long long)rl.rlim_cur, n, O.conns);
    }
    amqp_connection_state_t *conns = xcalloc((size_t)n, sizeof *conns);
    atomic_int errors = 0, ch_errors = 0, close_errors = 0;
    int64_t rss0 = broker_rss_settled();
    int64_t t_open = conn_step(conns, n, 0, &errors);
    int64_t rss1 = broker_rss_settled();
    int open = n - atomic_load(&errors);
    int64_t t_chan = conn_step(conns, n, 1, &ch_errors);
    int64_t rss2 = broker_rss_settled();
    int64_t t_close = conn_step(conns, n, 2, &close_errors);
    if (open != n)
        fail("%d of %d connections opened", open, n);
    if (atomic_load(&ch_errors))
        fail("%d channel.open failed", atomic_load(&ch_errors));
    metric("conns_tried", n);
    metric("conns_open", open);
    metric("open_rate", open / secs(t_open));
    metric("chan_rate", open / secs(t_chan));
    metric("close_rate", open / secs(t_close));
    if (rss0 >= 0 && open > 0) {
        metric("rss_base_kb", (double)rss0);
        metric("rss_conns_kb", (double)rss1);
        metric("rss_chans_kb", (double)rss2);
        metric("bytes_per_conn", (double)(rss1 - rss0) * 1024 / open);
        metric("bytes_per_chan", (double)(rss2 - rss1) * 1024 / open);
    }
    free(conns);
}

/* ---------------------------------------------------------------------------------------------
 * Scenario 7 (issue 14): many queues, many connections. --queues durable queues with one consumer
 * each, spread over --consumer-conns connections (one channel each, one thread each); then
 * --conns idle connections beside them; then one producer publishes -n transient messages at
 * --rate msg/s, each to a queue picked at random, and the consumers measure publish-to-delivery
 * latency. Figures: the time to declare the queues and start their consumers, broker RSS per
 * queue (with its consumer) and per idle connection, the broker's CPU while all of it sits
 * idle (per-turn work that grows with queues or connections shows here), latency percentiles.
 * With --keep the queues stay for a restart of the broker; --drain then checks that every one
 * of them came back (queue.declare passive, empty), and with --since T (CLOCK_MONOTONIC seconds
 * when the broker process was started) reports the time from the start until the last queue
 * answered, then deletes them.
 */
enum { MQ_DECLARE, MQ_CHECK, MQ_DELETE };

typedef struct {
    consumer_t *c;
    int op;
    uint64_t msgs; /* MQ_CHECK: messages found in the queues */
} mq_job_t;

static void *mq_worker(void *arg)
{
    mq_job_t *j = arg;
    consumer_t *c = j->c;
    for (int i = c->q_lo; i < c->q_hi; i++) {
        char q[160];
        manyq_name(q, sizeof q, i);
        if (j->op == MQ_DECLARE) {
            queue_declare(c->conn, q, 1);
        } else if (j->op == MQ_DELETE) {
            queue_delete(c->conn, q);
        } else {
            amqp_queue_declare_ok_t *ok = amqp_queue_declare(c->conn, CH, amqp_cstring_bytes(q), 1,
                                                             0, 0, 0, amqp_empty_table);
            amqp_rpc_reply_t r = amqp_get_rpc_reply(c->conn);
            if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION)
                fail_fatal("queue %s was not there after the restart (queue.declare passive "
                           "refused)",
                           q);
            check_reply(r, "queue.declare passive");
            j->msgs += ok->message_count;
        }
    }
    if (j->op == MQ_DECLARE)
        consumer_subscribe(c);
    return NULL;
}

/* Runs op over every consumer connection's share of the queues at once; returns the time. */
static int64_t mq_step(consumer_t *cs, int k, int op, uint64_t *msgs)
{
    pthread_t th[MAX_THREADS];
    mq_job_t jobs[MAX_THREADS];
    int64_t t0 = now_ns();
    for (int i = 0; i < k; i++) {
        jobs[i] = (mq_job_t){&cs[i], op, 0};
        pthread_create(&th[i], NULL, mq_worker, &jobs[i]);
    }
    for (int i = 0; i < k; i++) {
        pthread_join(th[i], NULL);
        if (msgs)
            *msgs += jobs[i].msgs;
    }
    return now_ns() - t0;
}

/* A connection to a broker that may still be starting: refused connects and logins are retried
 * every 10 ms until the --stall deadline. */
static amqp_connection_state_t bconnect_wait(void)
{
    int64_t deadline = now_ns() + (int64_t)O.stall_s * 1000000000;
    for (;;) {
        amqp_connection_state_t c = amqp_new_connection();
        amqp_socket_t *s = bsocket(c);
        if (!s)
            die("amqp_tcp_socket_new failed");
        int rc = amqp_socket_open(s, O.host, O.port);
        if (rc == AMQP_STATUS_OK) {
            amqp_rpc_reply_t r =
                amqp_login(c, "/", 0, FRAME_MAX, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest");
            if (r.reply_type == AMQP_RESPONSE_NORMAL) {
                amqp_channel_open(c, CH);
                check_reply(amqp_get_rpc_reply(c), "channel.open");
                return c;
            }
        }
        amqp_destroy_connection(c);
        if (now_ns() > deadline)
            die("no AMQP connection to %s:%d within %d s", O.host, O.port, O.stall_s);
        usleep(10000);
    }
}

static consumer_t *mq_conns(int k, int nq, int wait)
{
    consumer_t *cs = xcalloc((size_t)k, sizeof *cs);
    for (int i = 0; i < k; i++) {
        cs[i].conn = wait ? bconnect_wait() : bconnect();
        cs[i].q_lo = (int)((int64_t)nq * i / k);
        cs[i].q_hi = (int)((int64_t)nq * (i + 1) / k);
    }
    return cs;
}

static void scen_manyq_drain(int k, int nq)
{
    consumer_t *cs = mq_conns(k, nq, 1);
    double t_conn = O.since > 0 ? secs(now_ns()) - O.since : -1;
    uint64_t msgs = 0;
    int64_t t_check = mq_step(cs, k, MQ_CHECK, &msgs);
    double t_rec = O.since > 0 ? secs(now_ns()) - O.since : -1;
    if (msgs)
        fail("the recovered queues hold %" PRIu64 " messages; every one was consumed before", msgs);
    int64_t t_del = mq_step(cs, k, MQ_DELETE, NULL);
    metric("queues_recovered", nq);
    if (t_conn >= 0) {
        metric("restart_connect_ms", t_conn * 1e3);
        metric("recover_ms", t_rec * 1e3);
    }
    metric("check_ms", (double)t_check / 1e6);
    metric("delete_ms", (double)t_del / 1e6);
    consumers_free(cs, k);
}

static void scen_manyq(void)
{
    int nq = O.queues, k = O.consumer_conns;
    if (k > nq)
        k = nq;
    if (O.drain) {
        scen_manyq_drain(k, nq);
        return;
    }
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    int n = O.conns;
    if ((rlim_t)n + (rlim_t)k + 64 > rl.rlim_cur) {
        n = (int)rl.rlim_cur - k - 64;
        fprintf(stderr, "amqpbench: RLIMIT_NOFILE %llu: opening %d idle connections, not %d\n",
                (unsigned long long)rl.rlim_cur, n, O.conns);
    }
    seen_t seen;
    seen_init(&seen, O.n);
    atomic_uint_fast64_t shared = 0, lat_n = 0;
    uint64_t *lat = xcalloc(O.n, sizeof *lat);
    consumer_t *cs = mq_conns(k, nq, 0);
    for (int i = 0; i < k; i++) {
        cs[i].seen = &seen;
        cs[i].shared = &shared;
        cs[i].shared_total = O.n;
        cs[i].subscribe_first = 1;
        cs[i].lat = lat;
        cs[i].lat_n = &lat_n;
        cs[i].lat_cap = O.n;
    }

    int64_t rss0 = broker_rss_settled();
    int64_t t_decl = mq_step(cs, k, MQ_DECLARE, NULL);
    int64_t rss1 = broker_rss_settled();

    amqp_connection_state_t *conns = xcalloc((size_t)n, sizeof *conns);
    atomic_int errors = 0, close_errors = 0;
    int64_t t_open = conn_step(conns, n, 0, &errors);
    int open = n - atomic_load(&errors);
    if (open != n)
        fail("%d of %d idle connections opened", open, n);
    int64_t rss2 = broker_rss_settled();

    /* Everything declared and connected, nothing moving: what the broker spends per second. */
    int64_t sch0 = broker_sched_ns(), cpu0 = broker_cpu_ns(), t0 = now_ns();
    usleep((useconds_t)O.settle_ms * 1000);
    int64_t sch1 = broker_sched_ns();
    int64_t idle_cpu = sch0 >= 0 && sch1 >= sch0 ? sch1 - sch0 : broker_cpu_ns() - cpu0;
    int64_t idle_t = now_ns() - t0;

    producer_t *ps = producers_new(1, "", "", O.n);
    ps[0].rk_queues = nq;
    ps[0].rate = O.rate;
    phase_t ph = phase_run(ps, 1, cs, k);
    int64_t t_e2e = max_t_last(cs, k) - ph.t0;
    double cpu = broker_us_per_msg(&ph, O.n);
    seen_verify(&seen, "the manyq queues");
    uint64_t ln = atomic_load(&lat_n);
    if (ln > O.n)
        ln = O.n;
    qsort(lat, ln, sizeof *lat, cmp_u64);

    int64_t t_close = conn_step(conns, n, 2, &close_errors);
    producers_free(ps, 1);

    metric("queues", nq);
    metric("consumer_conns", k);
    metric("declare_ms", (double)t_decl / 1e6);
    metric("declare_rate", nq / secs(t_decl));
    metric("conns_open", open);
    metric("open_rate", open / secs(t_open));
    metric("close_rate", open / secs(t_close));
    if (rss0 >= 0) {
        metric("rss_base_kb", (double)rss0);
        metric("rss_queues_kb", (double)rss1);
        metric("rss_conns_kb", (double)rss2);
        metric("bytes_per_queue", (double)(rss1 - rss0) * 1024 / nq);
        if (open > 0)
            metric("bytes_per_conn", (double)(rss2 - rss1) * 1024 / open);
        metric("idle_cpu_ms_per_s", (double)idle_cpu / 1e6 / secs(idle_t));
    }
    metric("e2e_rate", (double)O.n / secs(t_e2e));
    metric("lat_p50_us", pct(lat, ln, 0.50) / 1e3);
    metric("lat_p99_us", pct(lat, ln, 0.99) / 1e3);
    metric("lat_p999_us", pct(lat, ln, 0.999) / 1e3);
    metric("lat_max_us", pct(lat, ln, 1.0) / 1e3);
    metric("broker_us_per_msg", cpu);
    metric("t0", secs(ph.t0));
    metric("t1", secs(ph.t0 + t_e2e));
    if (!O.keep)
        metric("delete_ms", (double)mq_step(cs, k, MQ_DELETE, NULL) / 1e6);
    /* connection.close until close-ok: the broker lets go of each connection's consumers. */
    int64_t t_cclose = now_ns();
    consumers_free(cs, k);
    metric("consumers_close_ms", (double)(now_ns() - t_cclose) / 1e6);
    free(conns);
    free(lat);
}

/* ---------------------------------------------------------------------------------------------
 * Scenario 8 (issue 14): the soak. -P producers publish persistent messages with confirms into
 * one durable queue at --rate msg/s in all for --seconds, while -C consumers take them (acks
 * every --ack-every); every message is checked exactly once at the end. A sampler thread reads
 * the broker's RSS and the queue's depth every --sample-s seconds (printed as it goes). Figures:
 * the rate achieved, RSS just after --warmup-s and at the end (medians of the first and last
 * tenth of the samples after the warm-up), the highest RSS after the warm-up, the deepest the
 * queue got. bench/soak.py judges them (RSS flat, nothing lost).
 */
typedef struct {
    const char *q;
    atomic_int stop;
    int64_t t0;
    int64_t *rss;    /* KiB per sample */
    uint32_t *depth; /* ready messages per sample */
    double *at;      /* seconds since t0 per sample */
    int n, cap;
} soak_sampler_t;

static void *soak_sampler(void *arg)
{
    soak_sampler_t *sm = arg;
    amqp_connection_state_t c = bconnect();
    int64_t next = sm->t0;
    while (!atomic_load(&sm->stop) && sm->n < sm->cap) {
        next += (int64_t)O.sample_s * 1000000000;
        while (now_ns() < next && !atomic_load(&sm->stop))
            usleep(100000);
        if (atomic_load(&sm->stop))
            break;
        int i = sm->n;
        sm->at[i] = secs(now_ns() - sm->t0);
        sm->rss[i] = broker_rss_kb();
        sm->depth[i] = queue_count(c, sm->q);
        sm->n++;
        fprintf(stderr, "  soak t=%.0fs rss=%" PRId64 " KiB depth=%u\n", sm->at[i], sm->rss[i],
                sm->depth[i]);
    }
    bclose(c);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[lo, hi) (sorted in a copy: v stays in time order). */
static double median_i64(const int64_t *v, int lo, int hi)
{
    int n = hi - lo;
    if (n <= 0)
        return -1;
    int64_t *t = xcalloc((size_t)n, sizeof *t);
    memcpy(t, v + lo, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_i64);
    double m = n % 2 ? (double)t[n / 2] : ((double)t[n / 2 - 1] + (double)t[n / 2]) / 2;
    free(t);
    return m;
}

static void scen_soak(void)
{
    if (O.rate <= 0 || O.seconds <= 0)
        die("soak needs --rate and --seconds");
    O.n = (uint64_t)(O.rate * O.seconds);
    char q[128];
    snprintf(q, sizeof q, "%s-soak", O.tag);
    amqp_connection_state_t ctl = bconnect();
    queue_declare(ctl, q, 1);
    seen_t seen;
    seen_init(&seen, O.n);
    atomic_uint_fast64_t shared = 0;
    consumer_t *cs = consumers_new(O.consumers, q, &seen, O.n, &shared);
    for (int i = 0; i < O.consumers; i++)
        cs[i].subscribe_first = 1;
    producer_t *ps = producers_new(O.producers, "", q, O.n);
    for (int i = 0; i < O.producers; i++) {
        ps[i].persistent = 1;
        ps[i].confirms = 1;
        ps[i].rate = O.rate / O.producers;
    }
    soak_sampler_t sm = {.q = q, .t0 = now_ns()};
    sm.cap = O.seconds / O.sample_s + 16;
    sm.rss = xcalloc((size_t)sm.cap, sizeof *sm.rss);
    sm.depth = xcalloc((size_t)sm.cap, sizeof *sm.depth);
    sm.at = xcalloc((size_t)sm.cap, sizeof *sm.at);
    pthread_t sth;
    pthread_create(&sth, NULL, soak_sampler, &sm);
    phase_t ph = phase_run(ps, O.producers, cs, O.consumers);
    int64_t t = max_t_last(cs, O.consumers) - ph.t0;
    double cpu = broker_us_per_msg(&ph, O.n);
    atomic_store(&sm.stop, 1);
    pthread_join(sth, NULL);
    seen_verify(&seen, q);
    uint32_t left = queue_count(ctl, q);
    if (left)
        fail("%s holds %u messages after all %" PRIu64 " were consumed", q, left, O.n);

    uint64_t redelivered = 0;
    for (int i = 0; i < O.consumers; i++)
        redelivered += cs[i].redelivered;
    int w = 0; /* the first sample after the warm-up */
    while (w < sm.n && sm.at[w] < O.warmup_s)
        w++;
    int tenth = (sm.n - w) / 10 > 0 ? (sm.n - w) / 10 : 1;
    int64_t rss_max = -1;
    uint32_t depth_max = 0;
    for (int i = 0; i < sm.n; i++) {
        if (i >= w && sm.rss[i] > rss_max)
            rss_max = sm.rss[i];
        if (sm.depth[i] > depth_max)
            depth_max = sm.depth[i];
    }
    metric("rate", (double)O.n / secs(t));
    metric("seconds", secs(t));
    metric("broker_us_per_msg", cpu);
    metric("redelivered", (double)redelivered);
    metric("samples", sm.n);
    metric("samples_after_warmup", sm.n - w);
    if (sm.n - w >= 2) {
        double warm = median_i64(sm.rss, w, w + tenth);
        double end = median_i64(sm.rss, sm.n - tenth, sm.n);
        metric("rss_warm_kb", warm);
        metric("rss_end_kb", end);
        metric("rss_max_kb", (double)rss_max);
        metric("rss_growth_kb", end - warm);
    }
    metric("depth_max", depth_max);
    producers_free(ps, O.producers);
    consumers_free(cs, O.consumers);
    queue_delete(ctl, q);
    bclose(ctl);
    free(sm.rss);
    free(sm.depth);
    free(sm.at);
}

/* ---------------------------------------------------------------------------------------------
 * Options.
 */
static void usage(int rc)
{
    fprintf(rc ? stderr : stdout,
            "usage: amqpbench [options]\n"
            "  -S, --scenario NAME    ptc | pubsub | confirm | forward | fanout | purge | conns |\n"
            "                         manyq | soak\n"
            "  -H, --host ADDR        broker address (127.0.0.1)\n"
            "  -p, --port N           broker port (5672)\n"
            "  -n, --messages N       messages in total (100000)\n"
            "  -s, --size BYTES       body size, at least 16 (16)\n"
            "  -P, --producers N      producer threads/connections (1)\n"
            "  -C, --consumers N      consumer threads/connections on one queue (1)\n"
            "  -q, --queues N         fanout: queues bound to the exchange (4);\n"
            "                         manyq: durable queues, one consumer each\n"
            "  -r, --rate MSG/S       pubsub, confirm: fixed total publish rate (0 = full speed)\n"
            "      --prefetch N       basic.qos prefetch-count (1000)\n"
            "      --ack-every N      multiple-ack every N deliveries (250)\n"
            "      --outstanding N    confirm: unconfirmed publishes per producer (1000)\n"
            "      --conns N          conns, manyq: idle connections (10000)\n"
            "      --conn-threads N   conns: threads opening them (8)\n"
            "      --settle-ms N      wait for broker RSS to settle (3000); manyq: also the\n"
            "                         idle time its CPU is measured over\n"
            "      --consumer-conns K manyq: connections the consumers are spread over (4)\n"
            "      --seconds S        soak: duration (n = rate x S)\n"
            "      --sample-s S       soak: broker RSS and queue depth every S seconds (5)\n"
            "      --warmup-s S       soak: left out of the RSS figures (120)\n"
            "      --since T          manyq --drain: CLOCK_MONOTONIC seconds the broker was\n"
            "                         started at (recover_ms counts from there)\n"
            "      --raw, --pipeline  pipelined publisher: the same frames as\n"
            "                         amqp_basic_publish, written in 64 KiB batches on the\n"
            "                         connection's socket (ptc, confirm, fanout, pubsub at\n"
            "                         full speed; not with --rate; purge always uses it)\n"
            "      --raw-consume      one consumer per queue reads its socket itself and\n"
            "                         takes bodies in place (no allocation per message);\n"
            "                         acks as usual (ptc, confirm; not with --tls)\n"
            "      --to-host ADDR     forward: the node messages arrive at\n"
            "      --to-port N        forward: its port\n"
            "      --route KEY        forward: routing key of the publishes (default: the\n"
            "                         destination queue; Sluice: a remote format name)\n"
            "      --dest-queue NAME  forward: queue consumed on the destination (fwd)\n"
            "      --queue-type TYPE  x-queue-type of the queues declared (classic; quorum)\n"
            "      --stream-offset S  x-stream-offset of the consumers (first, last, next, N):\n"
            "                         with --queue-type stream\n"
            "      --tx-size K        forward, confirm: publish in transactions of K messages\n"
            "                         instead of with confirms\n"
            "      --keep             confirm: publish only, leave the queue full (recovery);\n"
            "                         manyq: leave the queues (for a restart of the broker)\n"
            "      --drain            confirm: consume the n messages --keep left, verify them\n"
            "                         exactly once, delete the queue; manyq: check that the\n"
            "                         queues --keep left are all back and empty, delete them\n"
            "      --bg-persistent R  pubsub: beside it, a persistent publisher with confirms\n"
            "                         at R msg/s (0: flat out) and a consumer of its queue\n"
            "      --bg-size BYTES    its body size (1024)\n"
            "      --pids P,P,...     broker processes: CPU and RSS from /proc\n"
            "      --stall S          fail after S seconds without progress (60)\n"
            "      --tag NAME         prefix of queue/exchange names (bench-PID)\n"
            "      --tls CAFILE       AMQPS: connect over TLS, verifying the broker's\n"
            "                         certificate against CAFILE (not with --raw)\n");
    exit(rc);
}

static void parse_args(int argc, char **argv)
{
    enum {
        PREFETCH = 256,
        ACK,
        OUTST,
        CONNS,
        CTHREADS,
        SETTLE,
        RAW,
        RAWCONS,
        PIDS,
        STALL,
        TAG,
        TOHOST,
        TOPORT,
        ROUTE,
        DESTQ,
        TXSIZE,
        TLS,
        KEEP,
        DRAIN,
        CCONNS,
        SINCE,
        SECONDS,
        SAMPLE,
        WARMUP,
        BGRATE,
        BGSIZE,
        QTYPE,
        SOFFSET
    };
    static const struct option lo[] = {{"scenario", 1, 0, 'S'},
                                       {"host", 1, 0, 'H'},
                                       {"port", 1, 0, 'p'},
                                       {"messages", 1, 0, 'n'},
                                       {"size", 1, 0, 's'},
                                       {"producers", 1, 0, 'P'},
                                       {"consumers", 1, 0, 'C'},
                                       {"queues", 1, 0, 'q'},
                                       {"rate", 1, 0, 'r'},
                                       {"prefetch", 1, 0, PREFETCH},
                                       {"ack-every", 1, 0, ACK},
                                       {"outstanding", 1, 0, OUTST},
                                       {"conns", 1, 0, CONNS},
                                       {"conn-threads", 1, 0, CTHREADS},
                                       {"settle-ms", 1, 0, SETTLE},
                                       {"raw", 0, 0, RAW},
                                       {"raw-consume", 0, 0, RAWCONS},
                                       {"pipeline", 0, 0, RAW},
                                       {"pids", 1, 0, PIDS},
                                       {"stall", 1, 0, STALL},
                                       {"tag", 1, 0, TAG},
                                       {"to-host", 1, 0, TOHOST},
                                       {"to-port", 1, 0, TOPORT},
                                       {"route", 1, 0, ROUTE},
                                       {"dest-queue", 1, 0, DESTQ},
                                       {"tx-size", 1, 0, TXSIZE},
                                       {"tls", 1, 0, TLS},
                                       {"keep", 0, 0, KEEP},
                                       {"drain", 0, 0, DRAIN},
                                       {"consumer-conns", 1, 0, CCONNS},
                                       {"since", 1, 0, SINCE},
                                       {"seconds", 1, 0, SECONDS},
                                       {"sample-s", 1, 0, SAMPLE},
                                       {"warmup-s", 1, 0, WARMUP},
                                       {"bg-persistent", 1, 0, BGRATE},
                                       {"bg-size", 1, 0, BGSIZE},
                                       {"queue-type", 1, 0, QTYPE},
                                       {"stream-offset", 1, 0, SOFFSET},
                                       {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
    int c;
    snprintf(O.tag, sizeof O.tag, "bench-%d", (int)getpid());
    while ((c = getopt_long(argc, argv, "S:H:p:n:s:P:C:q:r:h", lo, NULL)) != -1) {
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
        case 'P':
            O.producers = atoi(optarg);
            break;
        case 'C':
            O.consumers = atoi(optarg);
            break;
        case 'q':
            O.queues = atoi(optarg);
            break;
        case 'r':
            O.rate = atof(optarg);
            break;
        case PREFETCH:
            O.prefetch = atoi(optarg);
            break;
        case ACK:
            O.ack_every = atoi(optarg);
            break;
        case OUTST:
            O.outstanding = atoi(optarg);
            break;
        case CONNS:
            O.conns = atoi(optarg);
            break;
        case CTHREADS:
            O.conn_threads = atoi(optarg);
            break;
        case SETTLE:
            O.settle_ms = atoi(optarg);
            break;
        case RAWCONS:
            O.raw_consume = 1;
            break;
        case RAW:
            O.raw = 1;
            break;
        case PIDS:
            for (char *s = strtok(optarg, ","); s && O.n_pids < MAX_PIDS; s = strtok(NULL, ","))
                O.pids[O.n_pids++] = (pid_t)atoi(s);
            break;
        case STALL:
            O.stall_s = atoi(optarg);
            break;
        case TAG:
            snprintf(O.tag, sizeof O.tag, "%s", optarg);
            break;
        case TOHOST:
            O.to_host = optarg;
            break;
        case TOPORT:
            O.to_port = atoi(optarg);
            break;
        case ROUTE:
            O.route = optarg;
            break;
        case DESTQ:
            O.dest_queue = optarg;
            break;
        case TLS:
            O.tls_ca = optarg;
            break;
        case TXSIZE:
            O.tx_size = atoi(optarg);
            break;
        case CCONNS:
            O.consumer_conns = atoi(optarg);
            break;
        case KEEP:
            O.keep = 1;
            break;
        case DRAIN:
            O.drain = 1;
            break;
        case SINCE:
            O.since = atof(optarg);
            break;
        case SECONDS:
            O.seconds = atoi(optarg);
            break;
        case SAMPLE:
            O.sample_s = atoi(optarg);
            break;
        case WARMUP:
            O.warmup_s = atoi(optarg);
            break;
        case BGRATE:
            O.bg_rate = atof(optarg);
            break;
        case BGSIZE:
            O.bg_size = atoi(optarg);
            break;
        case QTYPE:
            O.queue_type = optarg;
            break;
        case SOFFSET:
            O.stream_offset = optarg;
            break;
        case 'h':
            usage(0);
            break;
        default:
            usage(2);
        }
    }
    if (optind != argc || O.size < 16 || O.n < 1 || O.producers < 1 || O.consumers < 1 ||
        O.queues < 1 || O.prefetch < 1 || O.prefetch > 65535 || O.ack_every < 1 ||
        O.ack_every > O.prefetch || O.outstanding < 1 || O.conns < 1 || O.conn_threads < 1 ||
        O.settle_ms < 3 || O.tx_size < 0 || O.consumer_conns < 1 ||
        O.consumer_conns > MAX_THREADS - 1 || O.sample_s < 1 || O.warmup_s < 0 || O.seconds < 0)
        usage(2);
    if (O.raw && !strcmp(O.scenario, "manyq"))
        die("manyq publishes each message to a queue of its own choice: not with --raw");
    if (O.raw_consume && (O.tls_ca || O.consumers != 1 ||
                          (strcmp(O.scenario, "ptc") && strcmp(O.scenario, "confirm"))))
        die("--raw-consume: one consumer (-C 1) of ptc or confirm, not over --tls");
    if (O.raw && O.tls_ca)
        die("--raw (pipelined publisher) writes the socket itself: not over --tls");
    if (O.raw && O.tx_size)
        die("--raw (pipelined publisher) does not do transactions: drop --tx-size or --raw");
    if (O.n > UINT32_MAX)
        die("at most %u messages (queue counts are 32-bit)", UINT32_MAX);
    if (O.raw && O.rate > 0)
        die("--raw (pipelined publisher) writes batches and cannot pace messages: drop --rate "
            "or --raw");
    if (O.raw && O.size + 8 > FRAME_MAX)
        die("--raw (pipelined publisher): a %zu-byte body does not fit one %d-byte frame", O.size,
            FRAME_MAX);
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    /* Paced publishers sleep ~50 us at a time; the default 50 us timer slack would double it. */
    prctl(PR_SET_TIMERSLACK, 1000UL);
    /* The connections scenario needs one descriptor per connection: take the hard limit. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    fprintf(stderr, "amqpbench: %s on %s:%d n=%" PRIu64 " size=%zu P=%d C=%d%s\n", O.scenario,
            O.host, O.port, O.n, O.size, O.producers, O.consumers, O.raw ? " pipelined" : "");
    if (!strcmp(O.scenario, "ptc"))
        scen_ptc();
    else if (!strcmp(O.scenario, "pubsub"))
        scen_pubsub();
    else if (!strcmp(O.scenario, "confirm"))
        scen_confirm();
    else if (!strcmp(O.scenario, "forward"))
        scen_forward();
    else if (!strcmp(O.scenario, "fanout"))
        scen_fanout();
    else if (!strcmp(O.scenario, "purge"))
        scen_purge();
    else if (!strcmp(O.scenario, "conns"))
        scen_conns();
    else if (!strcmp(O.scenario, "manyq"))
        scen_manyq();
    else if (!strcmp(O.scenario, "soak"))
        scen_soak();
    else
        usage(2);
    print_json();
    return atomic_load(&g_failures) ? 1 : 0;
}
