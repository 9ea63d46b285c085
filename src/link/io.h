/* io.h - the byte stream under a link: a non-blocking connect, read, write and close behind
 * a small table of operations: plain TCP, or TLS over it (net/tls.h, link_ssl = true) with the
 * destination's certificate verified against link_ssl_options.cacertfile and the host or
 * address of the format name.
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
    /* what the last failed read or write hit, for the link's last_error (errno's text for
     * TCP, the TLS alert or library reason for TLS) */
    const char *(*error)(link_io *io);
} link_io_ops;

struct link_io {
    const link_io_ops *ops;
    int fd; /* what the event loop watches; -1 when closed */
    void *impl;
};

/* Start a non-blocking TCP connect to host:port, host a numeric address (names are looked
 * up before, off the loop: resolve.h). 0 with io->fd set (connect in progress: wait for
 * writability, then link_io_connected), or -1 with err (and *status, an MS-MQMQ ConnectionHistory
 * code). */
int link_io_tcp_connect(link_io *io, const char *host, int port, char *addr_out, size_t addr_len,
                        char *err, size_t errlen, unsigned *status);
/* After writability: 0 connected, or -1 with err / status (refused, unreachable...). */
int link_io_connected(link_io *io, char *err, size_t errlen, unsigned *status);

/* On a connected socket, speak TLS from now on (read/write/close go through the session):
 * host (a name or an address) is the name the certificate must carry. 0, or -1 with err. */
struct sl_tls_ctx;
int link_io_tls_start(link_io *io, struct sl_tls_ctx *ctx, const char *host, char *err,
                      size_t errlen);
/* Drive its handshake: 1 done, 0 in progress (wait for *want: SL_EV_READ / SL_EV_WRITE), -1
 * failed with err (a certificate that does not verify, a peer that speaks no TLS...). */
int link_io_tls_handshake(link_io *io, int *want, char *err, size_t errlen);

#endif
