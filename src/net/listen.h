/* listen.h - open a non-blocking TCP listening socket (both doors: AMQP and HTTP), or adopt
 * one already open. */
#ifndef SL_NET_LISTEN_H
#define SL_NET_LISTEN_H

#include <stddef.h>

/* Bind addr:port (port 0 = a free one) and listen. Returns the fd and, in bound_addr and
 * *bound_port, where it really listens; -1 with a message in err. */
int sl_listen_tcp(const char *addr, int port, int backlog, char *bound_addr, size_t bound_len,
                  int *bound_port, char *err, size_t errlen);

/* Take over a socket that is already bound and listening (a cluster node's follower phase
 * bound it and hands it over at promotion, so the port never closes): make it non-blocking
 * and close-on-exec and report where it listens, as sl_listen_tcp does. The fd, or -1 with a
 * message in err when it is not a listening TCP socket. */
int sl_listen_adopt(int fd, char *bound_addr, size_t bound_len, int *bound_port, char *err,
                    size_t errlen);

#endif
