/* proxy.c - a follower's front door (issue 31): splices client connections to the leader.
 *
 * One thread, one epoll (level-triggered), no work shared with the event loop. Every
 * connection is a pair of sockets (client, leader) and two fixed buffers, client->leader and
 * leader->client. The interest set of each socket is recomputed after every event from the
 * buffers: read a side only while the buffer it fills has room (back-pressure), write a side
 * only while the buffer that drains into it holds bytes. EOF on one side becomes
 * shutdown(SHUT_WR) of the other once its buffer is drained (half-close); a connection ends
 * when both directions are done, on any socket error, or when a deadline passes (the connect
 * timeout; the no-leader exchanges' timeout). When the leader changes, a spliced connection
 * is drained (P_DRAIN): nothing more of the client's goes to the old leader, but what the old
 * leader sends (the reply to a step-down it was asked for, its 320 close) still reaches the
 * client, for DRAIN_MS at most; one still connecting to the old leader (nothing sent yet)
 * connects to the new one; a no-leader exchange (below) finishes as it began; any other
 * connection closes at once.
 *
 * With no leader the same buffers carry a short scripted exchange instead (refuse_*): the
 * AMQP handshake up to start-ok answered with connection.close 320, or an HTTP 503 (or
 * the member's own GET /api/cluster). Those read at most a few KiB and then only discard.
 *
 * Invariant: conns counts every connection that holds descriptors; the listeners are in the
 * epoll set only while conns < max_connections (and no accept failed for lack of descriptors
 * within the last tick), so a flood waits in the kernel's backlog, not in our memory.
 */
#include "cluster/proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "amqp/frame.h"
#include "amqp/method.h"
#include "amqp/start.h"
#include "amqp/table.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/list.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/version.h"

#define TICK_MS 100
#define DRAIN_MS 1000 /* a spliced connection's last bytes from a leader that changed */
#define ACCEPT_BURST 64
#define REFUSE_READ_MAX 8192 /* what a no-leader exchange reads before it only discards */
#define REFUSE_FRAME_MAX 65536

static const char *const door_name[CL_PROXY_DOORS] = {"amqp", "amqps", "http"};

enum pstate {
    P_CONNECTING, /* leader socket connecting; client bytes wait in c2l */
    P_SPLICE,
    P_REFUSE_AMQP, /* no leader: scripted AMQP handshake ending in close 320 */
    P_REFUSE_HTTP, /* no leader: read the request head, answer, linger */
    P_LINGER,      /* answered and shut our write: discard input until EOF or deadline */
    P_DRAIN,       /* the leader changed: the old one's bytes still go to the client */
};

typedef struct pbuf {
    uint8_t *data;
    size_t off, len, cap;
} pbuf;

struct pconn;
typedef struct ptag {
    struct pconn *c; /* NULL: a listener or the control eventfd */
    int which;       /* 0 client, 1 leader; for listeners: the door; -1: control */
} ptag;

typedef struct pconn {
    struct pconn *prev, *next;
    int cfd, lfd;
    int door;
    enum pstate st;
    pbuf c2l, l2c;
    uint8_t c_eof, l_eof, c_shut, l_shut, dead;
    uint32_t cmask, lmask; /* what epoll watches now (errors and hang-ups always) */
    uint8_t creg, lreg;    /* the descriptor is in the epoll set */
    int amqp_step;         /* P_REFUSE_AMQP: 0 header, 1 start sent, 2 close sent */
    uint64_t deadline_ms;  /* 0: none */
    ptag ct, lt;
} pconn;

typedef struct leader_addrs {
    char name[256];
    char text[CL_PROXY_DOORS][280];
    struct sockaddr_storage sa[CL_PROXY_DOORS];
    socklen_t salen[CL_PROXY_DOORS]; /* 0: the door has no leader address */
} leader_addrs;

struct cl_proxy {
    cl_proxy_opts o;
    int ep, evfd;
    pthread_t th;
    ptag lis_tag[CL_PROXY_DOORS], ev_tag;
    int lis_on; /* the listeners are in the epoll set */
    int held;   /* o.taking_over said so: the listeners are off, clients wait in the backlog */
    uint64_t accept_pause_until;
    struct sockaddr_storage src;
    socklen_t srclen;
    pconn *conns;
    pconn *dead; /* closed during this batch of events: freed after it */
    unsigned n_conns;
    /* set_leader -> thread, under mu */
    pthread_mutex_t mu;
    leader_addrs want;
    uint64_t want_gen;
    int stop;
    /* the thread's own copy */
    leader_addrs cur;
    uint64_t cur_gen;
    int warned_conceal;   /* logged once per leader */
    cl_proxy_stats stats; /* under mu */
};

/* ---------------------------------------------------------------------------------------
 * Pure parts
 */

static int tchar(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

int cl_proxy_http_route(const char *buf, size_t len)
{
    const char *eol = memchr(buf, '\n', len);
    if (!eol) {
        /* a request line is a token, a target and a version; no legal one is this long */
        for (size_t i = 0; i < len; i++)
            if (buf[i] == '\r' && i + 1 < len)
                return CL_HTTP_BAD;
        return len >= REFUSE_READ_MAX ? CL_HTTP_BAD : CL_HTTP_MORE;
    }
    size_t n = (size_t)(eol - buf);
    if (n && buf[n - 1] == '\r')
        n--;
    size_t m = 0;
    while (m < n && tchar((unsigned char)buf[m]))
        m++;
    if (m == 0 || m >= n || buf[m] != ' ')
        return CL_HTTP_BAD;
    size_t t0 = m + 1, t1 = t0;
    while (t1 < n && buf[t1] != ' ')
        t1++;
    if (t1 == t0 || t1 >= n)
        return CL_HTTP_BAD;
    if (n - (t1 + 1) != 8 || memcmp(buf + t1 + 1, "HTTP/1.", 7) ||
        (buf[t1 + 8] != '0' && buf[t1 + 8] != '1'))
        return CL_HTTP_BAD;
    for (size_t i = t0; i < t1; i++)
        if ((unsigned char)buf[i] <= 0x20 || (unsigned char)buf[i] == 0x7f)
            return CL_HTTP_BAD;
    static const char path[] = "/api/cluster";
    size_t pl = sizeof path - 1, tl = t1 - t0;
    if (m == 3 && !memcmp(buf, "GET", 3) && tl >= pl && !memcmp(buf + t0, path, pl) &&
        (tl == pl || buf[t0 + pl] == '?'))
        return CL_HTTP_CLUSTER;
    return CL_HTTP_OTHER;
}

/* "HOST:PORT" or "[V6]:PORT" -> a socket address (may resolve a name: callers are not the
 * proxy's thread). 0 or -1. */
static int parse_hostport(const char *s, struct sockaddr_storage *sa, socklen_t *salen)
{
    char host[256];
    const char *colon;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':' || (size_t)(rb - s - 1) >= sizeof host)
            return -1;
        memcpy(host, s + 1, (size_t)(rb - s - 1));
        host[rb - s - 1] = 0;
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= sizeof host || colon == s)
            return -1;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = 0;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port <= 0 || port > 65535)
        return -1;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0 || !res)
        return -1;
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *salen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* The address of "HOST:PORT" / "[V6]:PORT" when HOST is numeric, as IPv6 (IPv4 mapped).
 * 0, or -1 (a name, or not an address: never resolved here, this runs on the event loop). */
static int numeric_host(const char *hp, struct in6_addr *out)
{
    char host[INET6_ADDRSTRLEN + 2];
    const char *end;
    if (hp[0] == '[') {
        hp++;
        end = strchr(hp, ']');
    } else {
        end = strrchr(hp, ':');
    }
    if (!end || (size_t)(end - hp) >= sizeof host)
        return -1;
    memcpy(host, hp, (size_t)(end - hp));
    host[end - hp] = 0;
    struct in_addr v4;
    if (inet_pton(AF_INET, host, &v4) == 1) {
        memset(out, 0, sizeof *out);
        out->s6_addr[10] = out->s6_addr[11] = 0xff;
        memcpy(&out->s6_addr[12], &v4, 4);
        return 0;
    }
    return inet_pton(AF_INET6, host, out) == 1 ? 0 : -1;
}

/* sa as IPv6 (IPv4 mapped); -1 for another family. */
static int sa_v6(const struct sockaddr *sa, struct in6_addr *out)
{
    if (sa->sa_family == AF_INET) {
        memset(out, 0, sizeof *out);
        out->s6_addr[10] = out->s6_addr[11] = 0xff;
        memcpy(&out->s6_addr[12], &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        *out = ((const struct sockaddr_in6 *)sa)->sin6_addr;
        return 0;
    }
    return -1;
}

static int node_has(const cl_node_info *n, const struct in6_addr *a)
{
    const char *addrs[] = {n->amqp, n->http, n->replication};
    for (size_t k = 0; k < 3; k++) {
        struct in6_addr h;
        if (addrs[k][0] && numeric_host(addrs[k], &h) == 0 && !memcmp(&h, a, sizeof h))
            return 1;
    }
    return 0;
}

int cl_proxy_from_member(const cl_status *st, const char *self, const struct sockaddr *sa)
{
    struct in6_addr peer;
    if (sa_v6(sa, &peer) < 0)
        return 0;
    size_t n = st->n_nodes < CL_MAX_MEMBERS ? st->n_nodes : CL_MAX_MEMBERS;
    /* an address this node has too cannot tell a member's connection from a local client's
     * (nodes sharing one IP): such a member's proxy refuses remote clients itself */
    for (size_t i = 0; i < n; i++)
        if (self && !strcmp(st->nodes[i].name, self) && node_has(&st->nodes[i], &peer))
            return 0;
    for (size_t i = 0; i < n; i++)
        if (!(self && !strcmp(st->nodes[i].name, self)) && node_has(&st->nodes[i], &peer))
            return 1;
    return 0;
}

static int v6_loopback(const struct in6_addr *a)
{
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

int cl_proxy_conceals_remote(const struct sockaddr *client, const struct sockaddr *leader,
                             const struct sockaddr *source)
{
    struct in6_addr c, l, s;
    if (sa_v6(client, &c) < 0 || v6_loopback(&c))
        return 0; /* a local client is local at the leader too: nothing to hide */
    if (sa_v6(leader, &l) < 0 || !v6_loopback(&l))
        return 0; /* the leader sees this node's own, non-loopback address */
    if (!source || sa_v6(source, &s) < 0)
        return 1; /* the kernel picks a loopback source: indistinguishable from a local one */
    return !memcmp(&s, &l, sizeof s); /* the leader's own address: skipped by its rule */
}

/* ---------------------------------------------------------------------------------------
 * Buffers and descriptors
 */

static size_t pb_room(const pbuf *b)
{
    return b->cap - (b->len - b->off);
}

static size_t pb_used(const pbuf *b)
{
    return b->len - b->off;
}

static void pb_append(pbuf *b, const void *p, size_t n)
{
    if (!n)
        return; /* an empty sl_buf's data is NULL: memcpy must not see it */
    if (n > b->cap - b->len && b->off) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (n > b->cap - b->len)
        n = b->cap - b->len; /* scripted answers are sized well below cap: never reached */
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* Read from fd into b. >0 bytes, 0 EOF, -1 error, -2 would block. */
static ssize_t pb_read(pbuf *b, int fd, size_t limit)
{
    if (b->off == b->len)
        b->off = b->len = 0;
    else if (b->len == b->cap && b->off) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    size_t room = b->cap - b->len;
    if (limit && room > limit)
        room = limit;
    if (!room)
        return -2;
    ssize_t n = read(fd, b->data + b->len, room);
    if (n > 0) {
        b->len += (size_t)n;
        return n;
    }
    if (n == 0)
        return 0;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -2 : -1;
}

/* Write what b holds to fd. 0 ok (maybe partial), -1 error. */
static int pb_write(pbuf *b, int fd)
{
    while (b->off < b->len) {
        ssize_t n = send(fd, b->data + b->off, b->len - b->off, MSG_NOSIGNAL);
        if (n > 0) {
            b->off += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        return -1;
    }
    b->off = b->len = 0;
    return 0;
}

static void stat_add(cl_proxy *p, uint64_t *field)
{
    pthread_mutex_lock(&p->mu);
    (*field)++;
    pthread_mutex_unlock(&p->mu);
}

static void set_mask(cl_proxy *p, int fd, ptag *tag, uint8_t *reg, uint32_t *cur, uint32_t want)
{
    if (fd < 0 || (*reg && *cur == want))
        return;
    struct epoll_event ev = {.events = want, .data.ptr = tag};
    epoll_ctl(p->ep, *reg ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
    *reg = 1;
    *cur = want;
}

static void listeners_update(cl_proxy *p)
{
    int want = !p->stop && !p->held && p->n_conns < p->o.max_connections &&
               sl_now_ms() >= p->accept_pause_until;
    if (want == p->lis_on)
        return;
    for (int d = 0; d < CL_PROXY_DOORS; d++) {
        int fd = p->o.listen_fd[d];
        if (fd < 0)
            continue;
        if (want) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &p->lis_tag[d]};
            epoll_ctl(p->ep, EPOLL_CTL_ADD, fd, &ev);
        } else {
            epoll_ctl(p->ep, EPOLL_CTL_DEL, fd, NULL);
        }
    }
    p->lis_on = want;
}

/* Close both descriptors and take c off the list. Its memory lives until the end of the
 * current batch of events, which may still name it (its other descriptor). */
/* One side of a connection closed: out of the epoll set if it was in, its fd -1. */
static void close_side(cl_proxy *p, int *fd, uint8_t *reg)
{
    if (*fd < 0)
        return;
    if (*reg)
        epoll_ctl(p->ep, EPOLL_CTL_DEL, *fd, NULL);
    close(*fd);
    *fd = -1;
    *reg = 0;
}

static void conn_close(cl_proxy *p, pconn *c)
{
    if (c->dead)
        return;
    close_side(p, &c->cfd, &c->creg);
    close_side(p, &c->lfd, &c->lreg);
    SL_LIST_UNLINK(p->conns, c, prev, next);
    c->dead = 1;
    c->next = p->dead;
    c->prev = NULL;
    p->dead = c;
    p->n_conns--;
    pthread_mutex_lock(&p->mu);
    p->stats.open = p->n_conns;
    pthread_mutex_unlock(&p->mu);
    listeners_update(p);
}

static void free_dead(cl_proxy *p)
{
    while (p->dead) {
        pconn *c = p->dead;
        p->dead = c->next;
        sl_free(c->c2l.data);
        sl_free(c->l2c.data);
        sl_free(c);
    }
}

/* Recompute what each socket waits for; closes the connection when it is done. Returns 0,
 * or -1 when c was freed. */
static int conn_update(cl_proxy *p, pconn *c)
{
    uint32_t cm = 0, lm = 0;
    switch (c->st) {
    case P_CONNECTING:
        lm = EPOLLOUT;
        if (!c->c_eof && pb_room(&c->c2l))
            cm |= EPOLLIN;
        break;
    case P_SPLICE:
        /* half-close: a side's EOF reaches the other once what it sent is written */
        if (c->c_eof && !c->l_shut && !pb_used(&c->c2l)) {
            shutdown(c->lfd, SHUT_WR);
            c->l_shut = 1;
        }
        if (c->l_eof && !c->c_shut && !pb_used(&c->l2c)) {
            shutdown(c->cfd, SHUT_WR);
            c->c_shut = 1;
            /* the leader is done with this client: one that never closes its side (gone,
             * or half-open on purpose) must not hold a connection slot for ever */
            c->deadline_ms = sl_now_ms() + p->o.refuse_timeout_ms;
        }
        if (c->c_shut && c->l_shut) {
            conn_close(p, c);
            return -1;
        }
        if (!c->c_eof && pb_room(&c->c2l))
            cm |= EPOLLIN;
        if (pb_used(&c->l2c))
            cm |= EPOLLOUT;
        if (!c->l_eof && pb_room(&c->l2c))
            lm |= EPOLLIN;
        if (pb_used(&c->c2l))
            lm |= EPOLLOUT;
        break;
    case P_DRAIN:
        if ((c->l_eof || c->lfd < 0) && !pb_used(&c->l2c)) {
            /* the old leader is done and all it sent is written: a linger from now on */
            close_side(p, &c->lfd, &c->lreg);
            if (!c->c_shut) {
                shutdown(c->cfd, SHUT_WR);
                c->c_shut = 1;
            }
            c->st = P_LINGER;
            return conn_update(p, c);
        }
        if (!c->c_eof)
            cm |= EPOLLIN; /* read and discarded */
        if (pb_used(&c->l2c))
            cm |= EPOLLOUT;
        if (!c->l_eof && pb_room(&c->l2c))
            lm |= EPOLLIN;
        break;
    case P_REFUSE_AMQP:
    case P_REFUSE_HTTP:
    case P_LINGER:
        if (c->c_eof && !pb_used(&c->l2c)) {
            conn_close(p, c);
            return -1;
        }
        if (!c->c_eof)
            cm |= EPOLLIN;
        if (pb_used(&c->l2c))
            cm |= EPOLLOUT;
        break;
    }
    /* a socket watched for nothing (mask 0) still reports errors and hang-ups */
    set_mask(p, c->cfd, &c->ct, &c->creg, &c->cmask, cm);
    set_mask(p, c->lfd, &c->lt, &c->lreg, &c->lmask, lm);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * No leader: the scripted refusals
 */

static const char no_leader_text[] =
    "CONNECTION_FORCED - no cluster leader is elected yet, try again";

static void amqp_send(sl_buf *out, const amqp_method *m)
{
    amqp_method_write(out, 0, m);
}

static void amqp_send_start(sl_buf *out)
{
    amqp_start_info info = {
        .information = "Sluice cluster follower: no leader is elected yet",
        .mechanisms = AMQP_BYTES("PLAIN AMQPLAIN"),
    };
    amqp_method m;
    sl_buf props;
    amqp_start_build(&m, &props, &info);
    amqp_send(out, &m);
    sl_buf_free(&props);
}

int cl_proxy_amqp_refusal(int *step, const uint8_t *in, size_t n, size_t *used, sl_buf *out)
{
    size_t off = 0;
    *used = 0;
    for (;;) {
        if (*step == 0) {
            int h = amqp_protocol_header_check(in + off, n - off);
            if (h == 0)
                break;
            if (h < 0) {
                /* not AMQP 0-9-1: the spec's answer is our header, then close */
                sl_buf_append(out, amqp_protocol_header, 8);
                return 1;
            }
            off += 8;
            amqp_send_start(out);
            *step = 1;
            continue;
        }
        amqp_frame f;
        int r = amqp_frame_parse(in + off, n - off, REFUSE_FRAME_MAX, &f);
        if (r == 0)
            break;
        if (r < 0)
            return 1;
        off += (size_t)r;
        if (f.type != AMQP_FRAME_METHOD || f.size < 4)
            continue; /* heartbeats and anything else: ignore */
        uint32_t id = sl_get_u32(f.payload);
        if (id == AMQP_CONNECTION_START_OK && *step == 1) {
            /* refused in reply to start-ok, as a failed login is: the one place where
             * amqplib reports the server's code and text ("Handshake terminated by server:
             * 320 (CONNECTION-FORCED) with message ..."); pika's error carries them too */
            amqp_method m = {.id = AMQP_CONNECTION_CLOSE};
            m.u.connection_close.reply_code = 320;
            m.u.connection_close.reply_text = amqp_cstr(no_leader_text);
            m.u.connection_close.class_id = AMQP_ID_CLASS(AMQP_CONNECTION_START_OK);
            m.u.connection_close.method_id = AMQP_ID_METHOD(AMQP_CONNECTION_START_OK);
            amqp_send(out, &m);
            *step = 2;
        } else if (id == AMQP_CONNECTION_CLOSE_OK || id == AMQP_CONNECTION_CLOSE) {
            if (id == AMQP_CONNECTION_CLOSE) {
                amqp_method m = {.id = AMQP_CONNECTION_CLOSE_OK};
                amqp_send(out, &m);
            }
            return 1;
        } else {
            return 1; /* out of order: just close */
        }
    }
    *used = off;
    return 0;
}

static int refuse_amqp_input(pconn *c)
{
    sl_buf out;
    sl_buf_init(&out);
    size_t used = 0;
    int done = cl_proxy_amqp_refusal(&c->amqp_step, c->c2l.data + c->c2l.off, pb_used(&c->c2l),
                                     &used, &out);
    c->c2l.off += used;
    /* Nothing to answer yet (a header still arriving) leaves out.data NULL: even adding a zero
     * offset to it is undefined, which clang's UBSan reports. */
    if (out.len > out.off)
        pb_append(&c->l2c, out.data + out.off, out.len - out.off);
    sl_buf_free(&out);
    return done;
}

static void http_answer(cl_proxy *p, pconn *c, int route)
{
    char body[16384];
    size_t blen = 0;
    int code = 503;
    if (route == CL_HTTP_CLUSTER && p->o.status) {
        blen = p->o.status(p->o.status_data, body, sizeof body);
        if (blen >= sizeof body)
            blen = 0;
        if (blen)
            code = 200;
    }
    if (!blen)
        blen = (size_t)snprintf(body, sizeof body,
                                "{\"error\":\"no_leader\",\"reason\":\"this node is a cluster "
                                "follower and no cluster leader is elected yet; try again\"}");
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
                      code, code == 200 ? "OK" : "Service Unavailable", blen,
                      code == 503 ? "Retry-After: 1\r\n" : "");
    pb_append(&c->l2c, head, (size_t)hl);
    pb_append(&c->l2c, body, blen);
}

/* The HTTP refusal: answer once the request head is complete (or as much as we read). */
static int refuse_http_input(cl_proxy *p, pconn *c)
{
    const char *in = (const char *)c->c2l.data + c->c2l.off;
    size_t n = pb_used(&c->c2l);
    int route = cl_proxy_http_route(in, n);
    if (route == CL_HTTP_MORE)
        return 0;
    if (route == CL_HTTP_BAD) {
        static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                                  "Connection: close\r\n\r\n";
        pb_append(&c->l2c, bad, sizeof bad - 1);
        return 1;
    }
    if (!memmem(in, n, "\r\n\r\n", 4) && !memmem(in, n, "\n\n", 2) && n < REFUSE_READ_MAX)
        return 0;
    http_answer(p, c, route);
    return 1;
}

/* ---------------------------------------------------------------------------------------
 * Events
 */

static void conn_fail(cl_proxy *p, pconn *c)
{
    conn_close(p, c);
}

static void on_leader_connected(cl_proxy *p, pconn *c)
{
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(c->lfd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
        sl_debug("cluster proxy: %s: cannot connect to the leader at %s: %s", door_name[c->door],
                 p->cur.text[c->door], strerror(err ? err : errno));
        stat_add(p, &p->stats.connect_failed);
        conn_fail(p, c);
        return;
    }
    c->st = P_SPLICE;
    c->deadline_ms = 0;
    stat_add(p, &p->stats.forwarded);
    if (pb_write(&c->c2l, c->lfd) < 0) {
        conn_fail(p, c);
        return;
    }
    conn_update(p, c);
}

static void on_client(cl_proxy *p, pconn *c, uint32_t ev)
{
    if (ev & EPOLLIN) {
        ssize_t r;
        if (c->st == P_SPLICE || c->st == P_CONNECTING) {
            r = pb_read(&c->c2l, c->cfd, 0);
        } else if (c->st == P_LINGER || c->st == P_DRAIN ||
                   (c->st == P_REFUSE_AMQP && c->amqp_step == 2 &&
                    pb_used(&c->c2l) >= REFUSE_FRAME_MAX)) {
            char sink[4096];
            r = read(c->cfd, sink, sizeof sink);
            if (r < 0)
                r = errno == EAGAIN || errno == EINTR ? -2 : -1;
        } else {
            /* a refusal reads a bounded amount: a client that sends more is cut off */
            size_t lim = c->st == P_REFUSE_HTTP ? REFUSE_READ_MAX : REFUSE_FRAME_MAX + 16;
            if (pb_used(&c->c2l) >= lim || !pb_room(&c->c2l)) {
                conn_close(p, c);
                return;
            }
            r = pb_read(&c->c2l, c->cfd, lim - pb_used(&c->c2l));
        }
        if (r == 0)
            c->c_eof = 1;
        else if (r == -1) {
            conn_close(p, c);
            return;
        }
        if (r > 0 && (c->st == P_REFUSE_AMQP || c->st == P_REFUSE_HTTP)) {
            int done = c->st == P_REFUSE_AMQP ? refuse_amqp_input(c) : refuse_http_input(p, c);
            if (done) {
                c->st = P_LINGER;
                c->c2l.off = c->c2l.len = 0;
            }
        }
        if (r > 0 && c->st == P_SPLICE && pb_write(&c->c2l, c->lfd) < 0) {
            conn_close(p, c);
            return;
        }
    } else if (ev & (EPOLLERR | EPOLLHUP)) {
        conn_close(p, c);
        return;
    }
    if ((ev & EPOLLOUT) || pb_used(&c->l2c)) {
        if (pb_write(&c->l2c, c->cfd) < 0) {
            conn_close(p, c);
            return;
        }
        if (c->st == P_LINGER && !pb_used(&c->l2c) && !c->c_shut) {
            shutdown(c->cfd, SHUT_WR);
            c->c_shut = 1;
        }
    }
    conn_update(p, c);
}

static void on_leader(cl_proxy *p, pconn *c, uint32_t ev)
{
    if (c->st == P_CONNECTING) {
        if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))
            on_leader_connected(p, c);
        return;
    }
    if (ev & EPOLLIN) {
        ssize_t r = pb_read(&c->l2c, c->lfd, 0);
        if (r == 0)
            c->l_eof = 1;
        else if (r == -1) {
            conn_close(p, c);
            return;
        }
        if (r > 0 && pb_write(&c->l2c, c->cfd) < 0) {
            conn_close(p, c);
            return;
        }
    } else if (ev & (EPOLLERR | EPOLLHUP)) {
        conn_close(p, c);
        return;
    }
    if (ev & EPOLLOUT) {
        if (pb_write(&c->c2l, c->lfd) < 0) {
            conn_close(p, c);
            return;
        }
    }
    conn_update(p, c);
}

static void start_leader_connect(cl_proxy *p, pconn *c)
{
    const struct sockaddr_storage *sa = &p->cur.sa[c->door];
    int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (p->srclen && p->src.ss_family == sa->ss_family) {
        /* the leader tells proxied connections by this address (loopback_users) */
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
        if (bind(fd, (const struct sockaddr *)&p->src, p->srclen) < 0) {
            sl_warn("cluster proxy: cannot bind to the source address: %s", strerror(errno));
            close(fd);
            goto fail;
        }
    }
    if (connect(fd, (const struct sockaddr *)sa, p->cur.salen[c->door]) < 0 &&
        errno != EINPROGRESS) {
        close(fd);
        goto fail;
    }
    c->lfd = fd;
    c->st = P_CONNECTING;
    c->deadline_ms = sl_now_ms() + p->o.connect_timeout_ms;
    conn_update(p, c);
    return;
fail:
    stat_add(p, &p->stats.connect_failed);
    conn_close(p, c);
}

/* No leader to forward to, and this node about to be it (o.taking_over): hold new clients. */
static int hold_for_takeover(cl_proxy *p)
{
    int any = 0;
    for (int d = 0; d < CL_PROXY_DOORS; d++)
        any |= p->cur.salen[d] != 0;
    int held = !any && p->o.taking_over && p->o.taking_over(p->o.status_data);
    if (held != p->held) {
        p->held = held;
        sl_info("cluster proxy: %s", held ? "this node is taking over as leader: new clients "
                                            "wait in the backlog for its broker"
                                          : "accepting clients again");
        listeners_update(p);
    }
    return held;
}

static void on_accept(cl_proxy *p, int door)
{
    if (hold_for_takeover(p))
        return;
    for (int i = 0; i < ACCEPT_BURST && p->n_conns < p->o.max_connections; i++) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof peer;
        int fd = accept4(p->o.listen_fd[door], (struct sockaddr *)&peer, &plen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* out of descriptors: let the backlog hold them for a tick */
                p->accept_pause_until = sl_now_ms() + TICK_MS;
                listeners_update(p);
            }
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pconn *c = sl_xcalloc(1, sizeof *c);
        c->cfd = fd;
        c->lfd = -1;
        c->door = door;
        c->ct = (ptag){c, 0};
        c->lt = (ptag){c, 1};
        c->c2l.cap = c->l2c.cap = p->o.buf_bytes;
        c->c2l.data = sl_xmalloc(c->c2l.cap);
        c->l2c.data = sl_xmalloc(c->l2c.cap);
        SL_LIST_PUSH(p->conns, c, prev, next);
        p->n_conns++;
        pthread_mutex_lock(&p->mu);
        p->stats.accepted++;
        p->stats.open = p->n_conns;
        pthread_mutex_unlock(&p->mu);
        if (p->cur.salen[door] &&
            cl_proxy_conceals_remote((struct sockaddr *)&peer,
                                     (const struct sockaddr *)&p->cur.sa[door],
                                     p->srclen ? (const struct sockaddr *)&p->src : NULL)) {
            /* the leader would take this remote client for a local one (loopback_users) */
            if (!p->warned_conceal) {
                sl_warn("cluster proxy: refusing remote clients: the leader at %s is on a "
                        "loopback address and this node's connections to it would look local "
                        "(set cluster.advertise_address to an address of this node's own)",
                        p->cur.text[door]);
                p->warned_conceal = 1;
            }
            stat_add(p, &p->stats.refused);
            conn_close(p, c);
        } else if (p->cur.salen[door]) {
            start_leader_connect(p, c);
        } else if (door == CL_PROXY_AMQPS) {
            /* TLS is the leader's to terminate: with none, all we can do is close */
            stat_add(p, &p->stats.refused);
            conn_close(p, c);
        } else {
            stat_add(p, &p->stats.refused);
            c->st = door == CL_PROXY_AMQP ? P_REFUSE_AMQP : P_REFUSE_HTTP;
            c->deadline_ms = sl_now_ms() + p->o.refuse_timeout_ms;
            conn_update(p, c);
        }
    }
    listeners_update(p);
}

static int leader_same(const leader_addrs *a, const leader_addrs *b)
{
    for (int d = 0; d < CL_PROXY_DOORS; d++)
        if (strcmp(a->text[d], b->text[d]))
            return 0;
    return !strcmp(a->name, b->name);
}

static void on_control(cl_proxy *p)
{
    uint64_t v;
    if (read(p->evfd, &v, sizeof v) < 0 && errno != EAGAIN)
        sl_debug("cluster proxy: eventfd: %s", strerror(errno));
    pthread_mutex_lock(&p->mu);
    leader_addrs want = p->want;
    uint64_t gen = p->want_gen;
    pthread_mutex_unlock(&p->mu);
    if (gen == p->cur_gen)
        return;
    p->cur_gen = gen;
    if (leader_same(&want, &p->cur))
        return;
    p->cur = want;
    p->warned_conceal = 0;
    /* every connection was made for the old leader (or for none): all go; a spliced one once
     * what the old leader sent has reached the client (bounded by DRAIN_MS): a leader that
     * answers a step-down and steps down at once is seen gone (the watch on etcd) before its
     * answer is relayed */
    uint64_t n = 0, now = sl_now_ms();
    for (pconn *c = p->conns, *next; c; c = next) {
        next = c->next;
        if (c->st == P_DRAIN || c->st == P_LINGER)
            continue; /* retired already: its deadline runs */
        if (c->st == P_REFUSE_AMQP || c->st == P_REFUSE_HTTP)
            continue; /* a no-leader exchange ends by itself (its deadline): closed now with
                       * its request unread, the client got a reset and no answer (issue 43:
                       * GET /api/cluster on a deposed leader just after its re-exec) */
        n++;
        if (c->st == P_CONNECTING && p->cur.salen[c->door]) {
            /* nothing went to the old leader yet: the client's bytes go to the new one */
            close_side(p, &c->lfd, &c->lreg);
            start_leader_connect(p, c);
            continue;
        }
        if (c->st != P_SPLICE) {
            conn_close(p, c);
            continue;
        }
        c->st = P_DRAIN;
        c->c2l.off = c->c2l.len = 0;
        c->deadline_ms = now + DRAIN_MS;
        conn_update(p, c);
    }
    pthread_mutex_lock(&p->mu);
    p->stats.closed_by_leader_change += n;
    pthread_mutex_unlock(&p->mu);
}

static void on_tick(cl_proxy *p)
{
    uint64_t now = sl_now_ms();
    for (pconn *c = p->conns, *next; c; c = next) {
        next = c->next;
        if (c->deadline_ms && now >= c->deadline_ms) {
            if (c->st == P_CONNECTING)
                stat_add(p, &p->stats.connect_failed);
            conn_close(p, c);
        }
    }
    if (!hold_for_takeover(p))
        listeners_update(p);
}

static void *proxy_main(void *arg)
{
    cl_proxy *p = arg;
    uint64_t next_tick = sl_now_ms() + TICK_MS;
    struct epoll_event evs[64];
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        uint64_t now = sl_now_ms();
        int timeout = now >= next_tick ? 0 : (int)(next_tick - now);
        int n = epoll_wait(p->ep, evs, 64, timeout);
        for (int i = 0; i < n; i++) {
            ptag *t = evs[i].data.ptr;
            if (!t->c) {
                if (t->which < 0)
                    on_control(p);
                else if (p->lis_on)
                    on_accept(p, t->which);
                continue;
            }
            if (t->c->dead)
                continue; /* closed earlier in this batch */
            if (t->which == 0)
                on_client(p, t->c, evs[i].events);
            else
                on_leader(p, t->c, evs[i].events);
        }
        if (sl_now_ms() >= next_tick) {
            on_tick(p);
            next_tick = sl_now_ms() + TICK_MS;
        }
        free_dead(p);
    }
    while (p->conns)
        conn_close(p, p->conns);
    free_dead(p);
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * API
 */

cl_proxy *cl_proxy_start(const cl_proxy_opts *o, char *err, size_t errlen)
{
    cl_proxy *p = sl_xcalloc(1, sizeof *p);
    p->o = *o;
    if (!p->o.max_connections)
        p->o.max_connections = CL_PROXY_DEFAULT_MAX_CONNECTIONS;
    if (!p->o.buf_bytes)
        p->o.buf_bytes = CL_PROXY_DEFAULT_BUF_BYTES;
    if (p->o.buf_bytes < 4096)
        p->o.buf_bytes = 4096; /* the scripted answers must fit */
    if (!p->o.connect_timeout_ms)
        p->o.connect_timeout_ms = CL_PROXY_DEFAULT_CONNECT_TIMEOUT_MS;
    if (!p->o.refuse_timeout_ms)
        p->o.refuse_timeout_ms = CL_PROXY_DEFAULT_REFUSE_TIMEOUT_MS;
    p->o.source_addr = NULL; /* not kept: resolved below */
    if (o->source_addr && *o->source_addr) {
        struct addrinfo hints = {0}, *res = NULL;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE;
        int rc = getaddrinfo(o->source_addr, "0", &hints, &res);
        if (rc != 0 || !res) {
            snprintf(err, errlen, "cluster proxy: source address %s: %s", o->source_addr,
                     gai_strerror(rc));
            sl_free(p);
            return NULL;
        }
        memcpy(&p->src, res->ai_addr, res->ai_addrlen);
        p->srclen = res->ai_addrlen;
        freeaddrinfo(res);
    }
    for (int d = 0; d < CL_PROXY_DOORS; d++) {
        int fd = p->o.listen_fd[d], fl;
        /* accept() drains a burst until EAGAIN: a blocking listener would stall the thread */
        if (fd >= 0 && ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
            snprintf(err, errlen, "cluster proxy: %s listener: %s", door_name[d], strerror(errno));
            sl_free(p);
            return NULL;
        }
    }
    pthread_mutex_init(&p->mu, NULL);
    p->ep = epoll_create1(EPOLL_CLOEXEC);
    p->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->ep < 0 || p->evfd < 0) {
        snprintf(err, errlen, "cluster proxy: %s", strerror(errno));
        goto fail;
    }
    for (int d = 0; d < CL_PROXY_DOORS; d++)
        p->lis_tag[d] = (ptag){NULL, d};
    p->ev_tag = (ptag){NULL, -1};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &p->ev_tag};
    epoll_ctl(p->ep, EPOLL_CTL_ADD, p->evfd, &ev);
    listeners_update(p);
    if ((errno = pthread_create(&p->th, NULL, proxy_main, p)) != 0) {
        snprintf(err, errlen, "cluster proxy: thread: %s", strerror(errno));
        goto fail;
    }
    sl_info("cluster proxy: started (no leader yet: refusing)");
    return p;
fail:
    if (p->ep >= 0)
        close(p->ep);
    if (p->evfd >= 0)
        close(p->evfd);
    pthread_mutex_destroy(&p->mu);
    sl_free(p);
    return NULL;
}

static void kick(cl_proxy *p)
{
    uint64_t one = 1;
    if (write(p->evfd, &one, sizeof one) < 0 && errno != EAGAIN)
        sl_warn("cluster proxy: eventfd: %s", strerror(errno));
}

int cl_proxy_set_leader(cl_proxy *p, const char *name, const char *amqp, const char *amqps,
                        const char *http)
{
    leader_addrs la;
    memset(&la, 0, sizeof la);
    const char *in[CL_PROXY_DOORS] = {amqp, amqps, http};
    int rc = 0, any = 0;
    for (int d = 0; d < CL_PROXY_DOORS; d++) {
        if (!in[d] || !*in[d])
            continue;
        if (strlen(in[d]) >= sizeof la.text[d] ||
            parse_hostport(in[d], &la.sa[d], &la.salen[d]) < 0) {
            rc = -1;
            break;
        }
        snprintf(la.text[d], sizeof la.text[d], "%s", in[d]);
        any = 1;
    }
    if (rc < 0 || !any)
        memset(&la, 0, sizeof la);
    else
        snprintf(la.name, sizeof la.name, "%s", name ? name : "?");
    pthread_mutex_lock(&p->mu);
    int same = leader_same(&la, &p->want);
    if (!same) {
        p->want = la;
        p->want_gen++;
    }
    pthread_mutex_unlock(&p->mu);
    if (same)
        return rc;
    if (la.name[0])
        sl_info("cluster proxy: forwarding to %s at amqp=%s amqps=%s http=%s", la.name,
                la.text[0][0] ? la.text[0] : "-", la.text[1][0] ? la.text[1] : "-",
                la.text[2][0] ? la.text[2] : "-");
    else
        sl_info("cluster proxy: no leader: refusing clients (AMQP 320, HTTP 503)");
    kick(p);
    return rc;
}

void cl_proxy_stop(cl_proxy *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_mutex_unlock(&p->mu);
    kick(p);
    pthread_join(p->th, NULL);
    for (int d = 0; d < CL_PROXY_DOORS; d++)
        if (p->lis_on && p->o.listen_fd[d] >= 0)
            epoll_ctl(p->ep, EPOLL_CTL_DEL, p->o.listen_fd[d], NULL);
    close(p->ep);
    close(p->evfd);
    pthread_mutex_destroy(&p->mu);
    sl_free(p);
}

void cl_proxy_stats_get(cl_proxy *p, cl_proxy_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    pthread_mutex_unlock(&p->mu);
}
