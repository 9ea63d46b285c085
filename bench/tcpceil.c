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
 *           load generator. */
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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_FRAMES 8

static size_t g_msg = 72, g_write = 65536, g_frames[MAX_FRAMES] = {26, 22, 24};
static int g_nframes = 3, g_frames_mode;
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

static void *reader(void *arg)
{
    int fd = *(int *)arg;
    size_t cap = 1 << 18;
    char *buf = malloc(cap);
    for (;;) {
        ssize_t n = recv(fd, buf, cap, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die("recv");
        if (n == 0)
            break;
        g_read_bytes += (uint64_t)n;
    }
    g_read_end = now_ns();
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"msg-bytes", 1, 0, 'm'}, {"write-bytes", 1, 0, 'w'},
                                       {"seconds", 1, 0, 't'},   {"mode", 1, 0, 'M'},
                                       {"frames", 1, 0, 'f'},    {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:w:t:M:f:", lo, NULL)) != -1) {
        if (c == 'm')
            g_msg = strtoul(optarg, NULL, 10);
        else if (c == 'w')
            g_write = strtoul(optarg, NULL, 10);
        else if (c == 't')
            g_seconds = atof(optarg);
        else if (c == 'M')
            g_frames_mode = !strcmp(optarg, "frames");
        else if (c == 'f') {
            g_nframes = 0;
            for (char *s = strtok(optarg, ","); s && g_nframes < MAX_FRAMES; s = strtok(NULL, ","))
                g_frames[g_nframes++] = strtoul(s, NULL, 10);
        } else {
            fprintf(stderr, "usage: tcpceil [--mode batch|frames] [--msg-bytes N] "
                            "[--write-bytes N] [--frames A,B,C] [--seconds S]\n");
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

    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&a, &alen))
        die("listen");
    int w = socket(AF_INET, SOCK_STREAM, 0);
    if (w < 0 || connect(w, (struct sockaddr *)&a, sizeof a))
        die("connect");
    int r = accept(ls, NULL, NULL);
    if (r < 0)
        die("accept");
    /* Both AMQP peers disable Nagle; so do we. */
    setsockopt(w, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(r, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

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
    close(ls);
    return 0;
}
