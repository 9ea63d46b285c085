/* accept.h - accepting connections on a listening socket without letting a full descriptor
 * table, or a full door, spin the loop or starve the rest of the node.
 *
 * Both doors (AMQP, HTTP) accept through an sl_acceptor. It stops accepting, with one log
 * line, and is counted in its metrics, while
 *   - accept() fails for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM),
 *   - the descriptor it got is within `reserve` of RLIMIT_NOFILE (the kernel hands out the
 *     lowest free descriptor, so a high one means every one below it is taken): that one is
 *     closed and the rest stay free for the store's files and the other door,
 *   - the door says it is full (can_accept returns 0).
 * Waiting connections stay in the kernel's backlog meanwhile. It tries again on a timer, and
 * at once when the owner calls sl_acceptor_kick (a connection went away).
 */
#ifndef SL_NET_ACCEPT_H
#define SL_NET_ACCEPT_H

#include <stdint.h>
#include <sys/socket.h>

#include "net/loop.h"

typedef struct sl_acceptor sl_acceptor;

/* A new connection: fd is non-blocking and close-on-exec, and now belongs to the callee. */
typedef void (*sl_accept_fn)(sl_acceptor *a, int fd, const struct sockaddr_storage *peer);
/* 1 while the door takes another connection; NULL = always. */
typedef int (*sl_can_accept_fn)(sl_acceptor *a);

enum sl_accept_pause { SL_ACCEPT_RUNNING = 0, SL_ACCEPT_NO_FDS, SL_ACCEPT_FULL };

struct sl_acceptor {
    sl_loop *loop;
    int fd;
    const char *name; /* "amqp" / "http", for the log */
    sl_watch w;
    sl_timer retry;
    sl_accept_fn on_conn;
    sl_can_accept_fn can_accept;
    void *data;
    unsigned reserve;    /* descriptors kept free below RLIMIT_NOFILE */
    uint64_t fd_limit;   /* RLIMIT_NOFILE (soft) when started */
    int paused;          /* enum sl_accept_pause */
    int starved;         /* short of descriptors since the last pause was logged */
    uint64_t pauses;     /* episodes without enough descriptors (metric) */
    uint64_t fd_refused; /* connections closed at once for the reserve (metric) */
    uint64_t accepted;
};

/* Start accepting on the listening socket fd (owned by the caller until sl_acceptor_stop). */
int sl_acceptor_start(sl_acceptor *a, sl_loop *loop, int fd, const char *name, unsigned reserve,
                      sl_accept_fn on_conn, sl_can_accept_fn can_accept, void *data);
/* Something changed (a connection closed): if paused, try again now. */
void sl_acceptor_kick(sl_acceptor *a);
void sl_acceptor_stop(sl_acceptor *a);
/* The reserve of descriptors a door should keep for a limit: 1/16 of it, at least 16. */
unsigned sl_fd_reserve(uint64_t limit);

#endif
