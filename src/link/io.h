/* io.h - the byte stream under a link: a non-blocking connect, read, write and close behind
 * a small table of operations, so TLS (issue 11) can slot in under the same link code. Plain
 * TCP is the one implementation today (io.c).
 */
#ifndef SL_LINK_IO_H
#define SL_LINK_IO_H

#include <stddef.h>
#include <sys/types.h>

typedef struct link_io link_io;

typedef struct link_io_ops {
    /* like recv/send: > 0 bytes, 0 = peer closed (read only), -1 with errno (EAGAIN: try
     * again when the fd is readable/writable) */
    ssize_t (*read)(link_io *io, void *buf, size_t n);
    ssize_t (*write)(link_io *io, const void *buf, size_t n);
    void (*close)(link_io *io);
} link_io_ops;

struct link_io {
    const link_io_ops *ops;
    int fd; /* what the event loop watches; -1 when closed */
    void *impl;
};

/* Start a non-blocking TCP connect to host:port (a numeric address, or a name resolved
 * with getaddrinfo). 0 with io->fd set (connect in progress: wait for writability, then
 * link_io_connected), or -1 with err (and *status, an MS-MQMQ ConnectionHistory code). */
int link_io_tcp_connect(link_io *io, const char *host, int port, char *addr_out, size_t addr_len,
                        char *err, size_t errlen, unsigned *status);
/* After writability: 0 connected, or -1 with err / status (refused, unreachable...). */
int link_io_connected(link_io *io, char *err, size_t errlen, unsigned *status);

#endif
