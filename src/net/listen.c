/* listen.c - open a non-blocking TCP listening socket (or adopt one already listening) and
 * report the address it got. */
#include "net/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void bound_name(int fd, char *bound_addr, size_t bound_len, int *bound_port)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    memset(&ss, 0, sizeof ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &sin->sin_addr, bound_addr, (socklen_t)bound_len);
        *bound_port = ntohs(sin->sin_port);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &sin6->sin6_addr, bound_addr, (socklen_t)bound_len);
        *bound_port = ntohs(sin6->sin6_port);
    }
}

int sl_listen_tcp(const char *addr, int port, int backlog, char *bound_addr, size_t bound_len,
                  int *bound_port, char *err, size_t errlen)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(addr, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve bind address %s: %s", addr, gai_strerror(rc));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        freeaddrinfo(res);
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, backlog) < 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", addr, port, strerror(errno));
        close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    bound_name(fd, bound_addr, bound_len, bound_port);
    return fd;
}

int sl_listen_adopt(int fd, char *bound_addr, size_t bound_len, int *bound_port, char *err,
                    size_t errlen)
{
    int on = 0, type = 0;
    socklen_t l = sizeof on, tl = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &l) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || !on || type != SOCK_STREAM) {
        snprintf(err, errlen, "descriptor %d is not a listening TCP socket", fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    int fdfl = fcntl(fd, F_GETFD);
    if (fl < 0 || fdfl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) < 0) {
        snprintf(err, errlen, "descriptor %d: %s", fd, strerror(errno));
        return -1;
    }
    bound_name(fd, bound_addr, bound_len, bound_port);
    return fd;
}
