/* probe.c - connect probes of a peer's port (see probe.h).
 *
 * Invariants: every probe is bounded in time (timeout_ms) and count (tries); a probe's socket
 * never outlives the call; nothing is sent on a connection that completes.
 */
#include "cluster/probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int cl_probe_once(const char *addr, int timeout_ms)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host)
        return CL_PROBE_SILENT;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return CL_PROBE_SILENT;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return CL_PROBE_SILENT;
    int rc = CL_PROBE_SILENT, e = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
        rc = CL_PROBE_ANSWERED;
    } else if (errno == ECONNREFUSED) {
        rc = CL_PROBE_REFUSED; /* loopback may answer at once */
    } else if (errno == EINPROGRESS) {
        struct pollfd pf = {fd, POLLOUT, 0};
        if (poll(&pf, 1, timeout_ms) == 1) {
            socklen_t el = sizeof e;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
            rc = e == 0              ? CL_PROBE_ANSWERED
                 : e == ECONNREFUSED ? CL_PROBE_REFUSED
                                     : CL_PROBE_SILENT;
        }
    }
    close(fd);
    return rc;
}

int cl_probe_step(cl_probe_run *r, int result)
{
    if (result == CL_PROBE_SILENT)
        return -1;
    if (result == CL_PROBE_ANSWERED) {
        r->refused_in_row = 0;
        return ++r->answers >= r->max_answers ? -1 : 0;
    }
    return ++r->refused_in_row >= r->need ? 1 : 0;
}

int cl_probe_dead(const char *addr, int tries, int gap_ms, int timeout_ms)
{
    cl_probe_run r = {.need = 2, .max_answers = 4};
    for (int i = 0; i < tries; i++) {
        if (i) {
            struct timespec ts = {gap_ms / 1000, (long)(gap_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        int v = cl_probe_step(&r, cl_probe_once(addr, timeout_ms));
        if (v > 0)
            return 1;
        if (v < 0)
            return r.answers >= r.max_answers ? 0 : -1;
    }
    return r.answers ? 0 : -1;
}
