/* tcpceil.c - the loopback ceiling for the benchmark table: raw TCP over 127.0.0.1, one writer
 * thread and one reader thread, no broker and no AMQP, moving "messages" of the size AMQP puts on
 * the wire for one publish (method + content header + body frames). Prints one JSON line with
 * bytes/s and messages/s.
 *
 * Modes (--mode):
 *   batch   writes of --write-bytes holding whole messages: what a sender that batches (like
 *           sluiced's once-per-turn flush) can reach; the ceiling the 30 % target uses.
 *   frames  one send() per frame with MSG_MORE on all but the last, sizes from --frames: what
 *           rabbitmq-c's amqp_basic_publish does per message; the client-side bound of the
 *           load generator.
 *   relay   the latency floor of a broker's round trip: a publisher thread sends a --msg-bytes
 *           message stamped with the time at --rate msg/s to a relay thread (an epoll loop, as
 *           a broker's, that writes whatever it reads to a second connection), and a reader
 *           thread on that one takes each message's age; prints the percentiles of --count of
 *           them. Two loopback hops and three wakeups, no AMQP: what pub/sub latency cannot
 *           go below on this machine. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_FRAMES 8

static size_t g_msg = 72, g_write = 65536, g_frames[MAX_FRAMES] = {26, 22, 24};
static int g_nframes = 3, g_frames_mode, g_relay_mode;
static int g_rate = 5000, g_count = 25000;
static double g_seconds = 3;
static uint64_t g_read_bytes;
static int64_t g_read_end;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "tcpceil: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void send_all(int fd, const char *buf, size_t len, int flags)
{
    while (len) {
        ssize_t n = send(fd, buf, len, flags | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("send");
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* recv through EINTR; 0 at end of stream. */
static size_t recv_some(int fd, char *buf, size_t cap)
{
    for (;;) {
        ssize_t n = recv(fd, buf, cap, 0);
        if (n >= 0)
            return (size_t)n;
        if (errno != EINTR)
            die("recv");
    }
}

static void *reader(void *arg)
{
    int fd = *(int *)arg;
    size_t cap = 1 << 18;
    char *buf = malloc(cap);
    for (size_t n; (n = recv_some(fd, buf, cap)) > 0;)
        g_read_bytes += n;
    g_read_end = now_ns();
    free(buf);
    return NULL;
}

/* --- relay mode ---------------------------------------------------------------------- */

static int g_pub_fd, g_relay_in, g_relay_out, g_sub_fd;
static int64_t *g_age; /* ns, one per message */

/* A connected pair over 127.0.0.1, *a writes, *b reads; TCP_NODELAY, as both AMQP peers. */
static void loopback_pair(int *a, int *b)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof sa;
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&sa, &alen))
        die("listen");
    *a = socket(AF_INET, SOCK_STREAM, 0);
    if (*a < 0 || connect(*a, (struct sockaddr *)&sa, sizeof sa))
        die("connect");
    *b = accept(ls, NULL, NULL);
    if (*b < 0)
        die("accept");
    setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    close(ls);
}

static void *relay_pub(void *arg)
{
    (void)arg;
    char *msg = calloc(1, g_msg);
    int64_t t0 = now_ns();
    for (int i = 0; i < g_count; i++) {
        int64_t due = t0 + (int64_t)i * 1000000000 / g_rate;
        struct timespec ts = {.tv_sec = due / 1000000000, .tv_nsec = due % 1000000000};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        int64_t stamp = now_ns();
        memcpy(msg, &stamp, sizeof stamp);
        send_all(g_pub_fd, msg, g_msg, 0);
    }
    shutdown(g_pub_fd, SHUT_WR);
    free(msg);
    return NULL;
}

static void *relay_loop(void *arg)
{
    (void)arg;
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, g_relay_in, &ev))
        die("epoll");
    static char buf[1 << 16];
    for (;;) {
        if (epoll_wait(ep, &ev, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        size_t n = recv_some(g_relay_in, buf, sizeof buf);
        if (n == 0)
            break;
        send_all(g_relay_out, buf, n, 0);
    }
    shutdown(g_relay_out, SHUT_WR);
    close(ep);
    return NULL;
}

static void *relay_sub(void *arg)
{
    (void)arg;
    char *buf = malloc(1 << 16);
    size_t have = 0;
    int got = 0;
    while (got < g_count) {
        size_t n = recv_some(g_sub_fd, buf + have, (1 << 16) - have);
        if (n == 0)
            break;
        have += n;
        int64_t t = now_ns();
        size_t off = 0;
        for (; have - off >= g_msg && got < g_count; off += g_msg) {
            int64_t stamp;
            memcpy(&stamp, buf + off, sizeof stamp);
            g_age[got++] = t - stamp;
        }
        memmove(buf, buf + off, have - off);
        have -= off;
    }
    g_count = got;
    free(buf);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int run_relay(void)
{
    int want = g_count;
    g_age = calloc((size_t)g_count, sizeof *g_age);
    loopback_pair(&g_pub_fd, &g_relay_in);
    loopback_pair(&g_relay_out, &g_sub_fd);
    pthread_t th[3];
    pthread_create(&th[0], NULL, relay_loop, NULL);
    pthread_create(&th[1], NULL, relay_sub, NULL);
    pthread_create(&th[2], NULL, relay_pub, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    if (g_count != want) {
        fprintf(stderr, "tcpceil: sent %d messages, %d arrived\n", want, g_count);
        return 1;
    }
    qsort(g_age, (size_t)g_count, sizeof *g_age, cmp_i64);
#define PCT(p) ((double)g_age[(size_t)((double)(g_count - 1) * (p))] / 1e3)
    printf("{\"mode\":\"relay\",\"msg_bytes\":%zu,\"rate\":%d,\"count\":%d,\"lat_p50_us\":%.1f,"
           "\"lat_p99_us\":%.1f,\"lat_p999_us\":%.1f,\"lat_max_us\":%.1f}\n",
           g_msg, g_rate, g_count, PCT(0.5), PCT(0.99), PCT(0.999), PCT(1.0));
#undef PCT
    free(g_age);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"msg-bytes", 1, 0, 'm'}, {"write-bytes", 1, 0, 'w'},
                                       {"seconds", 1, 0, 't'},   {"mode", 1, 0, 'M'},
                                       {"frames", 1, 0, 'f'},    {"rate", 1, 0, 'r'},
                                       {"count", 1, 0, 'n'},     {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:w:t:M:f:r:n:", lo, NULL)) != -1) {
        if (c == 'm')
            g_msg = strtoul(optarg, NULL, 10);
        else if (c == 'w')
            g_write = strtoul(optarg, NULL, 10);
        else if (c == 't')
            g_seconds = atof(optarg);
        else if (c == 'M') {
            g_frames_mode = !strcmp(optarg, "frames");
            g_relay_mode = !strcmp(optarg, "relay");
        } else if (c == 'r')
            g_rate = atoi(optarg);
        else if (c == 'n')
            g_count = atoi(optarg);
        else if (c == 'f') {
            g_nframes = 0;
            for (char *s = strtok(optarg, ","); s && g_nframes < MAX_FRAMES; s = strtok(NULL, ","))
                g_frames[g_nframes++] = strtoul(s, NULL, 10);
        } else {
            fprintf(stderr, "usage: tcpceil [--mode batch|frames|relay] [--msg-bytes N] "
                            "[--write-bytes N] [--frames A,B,C] [--seconds S] "
                            "[--rate R --count N (relay)]\n");
            return 2;
        }
    }
    if (g_frames_mode) {
        g_msg = 0;
        for (int i = 0; i < g_nframes; i++)
            g_msg += g_frames[i];
    }
    if (g_msg < 1 || g_write < 1 || g_seconds <= 0)
        return 2;
    if (g_relay_mode) {
        if (g_msg < sizeof(int64_t) || g_msg > (1 << 15) || g_rate < 1 || g_count < 1)
            return 2;
        return run_relay();
    }

    int w, r;
    loopback_pair(&w, &r);

    size_t per_write =
        g_frames_mode ? g_msg : (g_write > g_msg ? g_write - g_write % g_msg : g_msg);
    char *buf = calloc(1, per_write);
    pthread_t th;
    pthread_create(&th, NULL, reader, &r);
    int64_t t0 = now_ns(), end = t0 + (int64_t)(g_seconds * 1e9);
    uint64_t written = 0, syscalls = 0;
    while (now_ns() < end) {
        /* 64 iterations between clock reads keeps the clock out of the profile. */
        for (int k = 0; k < 64; k++) {
            if (g_frames_mode) {
                size_t off = 0;
                for (int i = 0; i < g_nframes; i++) {
                    send_all(w, buf + off, g_frames[i], i + 1 < g_nframes ? MSG_MORE : 0);
                    off += g_frames[i];
                    syscalls++;
                }
            } else {
                send_all(w, buf, per_write, 0);
                syscalls++;
            }
            written += per_write;
        }
    }
    shutdown(w, SHUT_WR);
    pthread_join(th, NULL);
    double s = (double)(g_read_end - t0) / 1e9;
    printf("{\"mode\":\"%s\",\"msg_bytes\":%zu,\"write_bytes\":%zu,\"seconds\":%.3f,"
           "\"bytes_per_s\":%.6g,\"msgs_per_s\":%.6g,\"sends_per_msg\":%.3f}\n",
           g_frames_mode ? "frames" : "batch", g_msg, per_write, s, (double)g_read_bytes / s,
           (double)g_read_bytes / (double)g_msg / s,
           (double)syscalls * (double)g_msg / (double)written);
    if (g_read_bytes != written) {
        fprintf(stderr, "tcpceil: wrote %llu bytes, read %llu\n", (unsigned long long)written,
                (unsigned long long)g_read_bytes);
        return 1;
    }
    free(buf);
    close(w);
    close(r);
    return 0;
}
