/* test_proxy_harness.c - build/test-proxy-harness: src/cluster/proxy.c alone, for
 * tests/integration/test_cluster_proxy.py (a proxy in front of one sluiced, standing in for a
 * follower until the follower phase drives it).
 *
 *   test-proxy-harness [--amqp ADDR:PORT] [--amqps ADDR:PORT] [--http ADDR:PORT]
 *                      [--amqp-fd FD] [--http-fd FD]  (inherited listening sockets)
 *                      [--source ADDR] [--max N] [--buf BYTES] [--connect-timeout MS]
 *                      [--refuse-timeout MS]
 * Binds each door (port 0: a free one), prints "listening DOOR=ADDR:PORT", then reads commands
 * on stdin, one a line, and answers each on stdout:
 *   leader NAME AMQP AMQPS HTTP   ("-" for a door without an address)  -> ok | error
 *   noleader                                                            -> ok
 *   stats -> "stats accepted=N forwarded=N refused=N connect_failed=N closed_by_leader_change=N
 *             open=N"
 *   stop  -> cl_proxy_stop, then "stopped listening=N" (N doors still listening), and exit.
 * EOF on stdin also stops.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/proxy.h"
#include "net/listen.h"

static size_t status_json(void *data, char *buf, size_t cap)
{
    (void)data;
    int n = snprintf(buf, cap,
                     "{\"name\":\"harness\",\"leader\":null,\"epoch\":0,\"nodes\":"
                     "[{\"name\":\"harness\",\"role\":\"follower\",\"insync\":false}]}");
    return n < 0 ? 0 : (size_t)n;
}

static int open_door(const char *spec, const char *name)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof host) {
        fprintf(stderr, "bad address %s\n", spec);
        exit(2);
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = 0;
    char bound[64], err[256];
    int port = 0;
    int fd = sl_listen_tcp(host, atoi(colon + 1), 128, bound, sizeof bound, &port, err, sizeof err);
    if (fd < 0) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    printf("listening %s=%s:%d\n", name, bound, port);
    return fd;
}

static const char *dash(const char *s)
{
    return strcmp(s, "-") ? s : NULL;
}

int main(int argc, char **argv)
{
    cl_proxy_opts o = {.listen_fd = {-1, -1, -1}, .status = status_json};
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--amqp"))
            o.listen_fd[CL_PROXY_AMQP] = open_door(v, "amqp");
        else if (!strcmp(k, "--amqps"))
            o.listen_fd[CL_PROXY_AMQPS] = open_door(v, "amqps");
        else if (!strcmp(k, "--http"))
            o.listen_fd[CL_PROXY_HTTP] = open_door(v, "http");
        else if (!strcmp(k, "--amqp-fd"))
            o.listen_fd[CL_PROXY_AMQP] = atoi(v); /* inherited, already listening */
        else if (!strcmp(k, "--http-fd"))
            o.listen_fd[CL_PROXY_HTTP] = atoi(v);
        else if (!strcmp(k, "--source"))
            o.source_addr = v;
        else if (!strcmp(k, "--max"))
            o.max_connections = (unsigned)atoi(v);
        else if (!strcmp(k, "--buf"))
            o.buf_bytes = (size_t)atol(v);
        else if (!strcmp(k, "--connect-timeout"))
            o.connect_timeout_ms = (uint32_t)atoi(v);
        else if (!strcmp(k, "--refuse-timeout"))
            o.refuse_timeout_ms = (uint32_t)atoi(v);
        else {
            fprintf(stderr, "unknown option %s\n", k);
            return 2;
        }
    }
    char err[256];
    cl_proxy *p = cl_proxy_start(&o, err, sizeof err);
    if (!p) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("ready\n");
    char line[2048];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32], name[256], a[300], s[300], h[300];
        int n = sscanf(line, "%31s %255s %299s %299s %299s", cmd, name, a, s, h);
        if (n >= 1 && !strcmp(cmd, "leader") && n == 5) {
            int rc = cl_proxy_set_leader(p, name, dash(a), dash(s), dash(h));
            printf(rc == 0 ? "ok\n" : "error\n");
        } else if (n >= 1 && !strcmp(cmd, "noleader")) {
            cl_proxy_set_leader(p, NULL, NULL, NULL, NULL);
            printf("ok\n");
        } else if (n >= 1 && !strcmp(cmd, "stats")) {
            cl_proxy_stats st;
            cl_proxy_stats_get(p, &st);
            printf("stats accepted=%llu forwarded=%llu refused=%llu connect_failed=%llu "
                   "closed_by_leader_change=%llu open=%u\n",
                   (unsigned long long)st.accepted, (unsigned long long)st.forwarded,
                   (unsigned long long)st.refused, (unsigned long long)st.connect_failed,
                   (unsigned long long)st.closed_by_leader_change, st.open);
        } else if (n >= 1 && !strcmp(cmd, "stop")) {
            break;
        } else {
            printf("error\n");
        }
    }
    cl_proxy_stop(p);
    /* the listening sockets are the caller's: still open and listening after the stop */
    int listening = 0;
    for (int d = 0; d < CL_PROXY_DOORS; d++) {
        int on = 0;
        socklen_t l = sizeof on;
        if (o.listen_fd[d] >= 0 &&
            getsockopt(o.listen_fd[d], SOL_SOCKET, SO_ACCEPTCONN, &on, &l) == 0 && on)
            listening++;
    }
    printf("stopped listening=%d\n", listening);
    for (int d = 0; d < CL_PROXY_DOORS; d++)
        if (o.listen_fd[d] >= 0)
            close(o.listen_fd[d]);
    return 0;
}
