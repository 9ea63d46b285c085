/* io.c - plain TCP, or TLS over it, under a link (see io.h). */
#include "link/io.h"

#include "net/loop.h"
#include "net/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* MS-MQMQ 2.3.12.25 ConnectionHistory status codes */
#define ST_SOCKET_CREATE 0x80000002u
#define ST_CONNECT 0x80000004u
#define ST_DNS 0x80000008u
#define ST_REFUSED 0x8000000Bu

static ssize_t tcp_read(link_io *io, void *buf, size_t n)
{
    ssize_t r;
    do
        r = recv(io->fd, buf, n, 0);
    while (r < 0 && errno == EINTR);
    return r;
}

static ssize_t tcp_write(link_io *io, const void *buf, size_t n)
{
    ssize_t r;
    do
        r = send(io->fd, buf, n, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    return r;
}

static void tcp_close(link_io *io)
{
    if (io->fd >= 0)
        close(io->fd);
    io->fd = -1;
}

static const char *tcp_error(link_io *io)
{
    (void)io;
    return strerror(errno);
}

static const link_io_ops tcp_ops = {tcp_read, tcp_write, tcp_close, tcp_error};

int link_io_tcp_connect(link_io *io, const char *host, int port, char *addr_out, size_t addr_len,
                        char *err, size_t errlen, unsigned *status)
{
    io->ops = &tcp_ops;
    io->fd = -1;
    io->impl = NULL;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    struct addrinfo *res = NULL;
    char svc[16];
    snprintf(svc, sizeof svc, "%d", port);
    /* Numeric only (AI_NUMERICHOST never blocks): names are resolved off the loop before
     * (resolve.h). */
    int rc = getaddrinfo(host, svc, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
        *status = ST_DNS;
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        *status = ST_SOCKET_CREATE;
        freeaddrinfo(res);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char a[INET6_ADDRSTRLEN] = "?";
    if (res->ai_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, a, sizeof a);
    else if (res->ai_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)res->ai_addr)->sin6_addr, a, sizeof a);
    snprintf(addr_out, addr_len, "%s", a);
    rc = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (rc < 0 && errno != EINPROGRESS) {
        *status = errno == ECONNREFUSED ? ST_REFUSED : ST_CONNECT;
        snprintf(err, errlen, "connect: %s", strerror(errno));
        close(fd);
        return -1;
    }
    io->fd = fd;
    return 0;
}

int link_io_connected(link_io *io, char *err, size_t errlen, unsigned *status)
{
    int e = 0;
    socklen_t l = sizeof e;
    if (getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
        e = errno;
    if (e == 0)
        return 0;
    *status = e == ECONNREFUSED ? ST_REFUSED : ST_CONNECT;
    snprintf(err, errlen, "connect: %s", strerror(e));
    return -1;
}

/* ---- TLS over the connected socket ---- */

static ssize_t tls_read(link_io *io, void *buf, size_t n)
{
    return sl_tls_read(io->impl, buf, n);
}

static ssize_t tls_write(link_io *io, const void *buf, size_t n)
{
    return sl_tls_write(io->impl, buf, n);
}

static void tls_close(link_io *io)
{
    if (io->impl) {
        sl_tls_shutdown(io->impl);
        sl_tls_free(io->impl);
        io->impl = NULL;
    }
    tcp_close(io);
}

static const char *tls_error(link_io *io)
{
    return sl_tls_error(io->impl);
}

static const link_io_ops tls_ops = {tls_read, tls_write, tls_close, tls_error};

int link_io_tls_start(link_io *io, struct sl_tls_ctx *ctx, const char *host, char *err,
                      size_t errlen)
{
    sl_tls *t = sl_tls_new(ctx, io->fd, host);
    if (!t) {
        snprintf(err, errlen, "cannot start TLS (out of memory)");
        return -1;
    }
    io->impl = t;
    io->ops = &tls_ops;
    return 0;
}

int link_io_tls_handshake(link_io *io, int *want, char *err, size_t errlen)
{
    int r = sl_tls_handshake(io->impl);
    *want = sl_tls_wants(io->impl);
    if (r < 0)
        snprintf(err, errlen, "%s", sl_tls_error(io->impl));
    return r;
}
