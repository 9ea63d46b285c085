/* listen.h - open a non-blocking TCP listening socket (both doors: AMQP and HTTP). */
#ifndef SL_NET_LISTEN_H
#define SL_NET_LISTEN_H

#include <stddef.h>

/* Bind addr:port (port 0 = a free one) and listen. Returns the fd and, in bound_addr and
 * *bound_port, where it really listens; -1 with a message in err. */
int sl_listen_tcp(const char *addr, int port, int backlog, char *bound_addr, size_t bound_len,
                  int *bound_port, char *err, size_t errlen);

#endif
