/* server.c - DCE/RPC over TCP: listeners, sessions, dispatch, and the endpoint mapper
 * (MS-RPCE 2.2.1.2 / C706 appendix O: ept_map, ept_lookup listing our interfaces,
 * ept_lookup_handle_free). See server.h for the bounds.
 */
#include "rpc/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/le.h"
#include "core/list.h"
#include "core/log.h"
#include "core/mem.h"
#include "net/accept.h"
#include "net/listen.h"

#define MAX_IFACES 8
#define EPT_S_NOT_REGISTERED 0x16C9A0D6u
#define READ_CHUNK 16384

typedef struct iface_reg {
    rpc_iface iface;
    const rpc_op_fn *ops;
    void *ctx;
} iface_reg;

typedef struct session {
    struct session *next, *prev;
    rpc_server *srv;
    int fd;
    sl_watch w;
    int epmap; /* a session of the endpoint mapper's port */
    int closing;
    rpc_conn conn;
    sl_buf in;
    rpc_session_info info;
} session;

typedef struct door {
    int fd;
    sl_acceptor acc;
    char addr[64];
    int port;
    int epmap;
    rpc_server *srv;
} door;

struct rpc_server {
    sl_loop *loop;
    rpc_server_cfg cfg;
    char *bind, *user, *computer;
    iface_reg regs[MAX_IFACES];
    size_t n_regs;
    const rpc_iface *ifaces[MAX_IFACES];
    rpc_iface epm; /* the endpoint mapper's interface, on its own door only */
    const rpc_iface *epm_list[1];
    door main, epd;
    char sec_main[8], sec_epm[8];
    session *sessions;
    unsigned n_sessions;
    uint64_t next_id;
    uint32_t next_group;
    void (*on_close)(void *ctx, uint64_t session);
    void *on_close_ctx;
};

rpc_server *rpc_server_new(sl_loop *loop, const rpc_server_cfg *cfg)
{
    rpc_server *s = sl_xcalloc(1, sizeof *s);
    s->loop = loop;
    s->cfg = *cfg;
    s->bind = sl_xstrdup(cfg->bind ? cfg->bind : "0.0.0.0");
    s->user = sl_xstrdup(cfg->user ? cfg->user : "guest");
    s->cfg.bind = s->bind;
    s->cfg.user = s->user;
    s->computer = sl_xstrdup(cfg->computer ? cfg->computer : "SLUICE");
    s->cfg.computer = s->computer;
    s->main.fd = s->epd.fd = -1;
    s->next_id = 1;
    s->next_group = 0x1000;
    rpc_uuid_parse("e1af8308-5d1f-11c9-91a4-08002b14a0fa", s->epm.id.uuid);
    s->epm.id.major = 3;
    s->epm.n_ops = 7;
    s->epm.name = "epm";
    s->epm_list[0] = &s->epm;
    return s;
}

void rpc_server_add(rpc_server *s, const rpc_syntax *id, const char *name, const rpc_op_fn *ops,
                    uint16_t n_ops, void *ctx)
{
    if (s->n_regs == MAX_IFACES)
        return;
    iface_reg *r = &s->regs[s->n_regs];
    r->iface.id = *id;
    r->iface.n_ops = n_ops;
    r->iface.name = name;
    r->iface.impl = r;
    r->ops = ops;
    r->ctx = ctx;
    s->ifaces[s->n_regs++] = &r->iface;
}

void rpc_server_on_close(rpc_server *s, void (*fn)(void *ctx, uint64_t session), void *ctx)
{
    s->on_close = fn;
    s->on_close_ctx = ctx;
}

int rpc_server_port(const rpc_server *s)
{
    return s->main.port;
}

/* ---- sessions ---- */

static void session_close(session *ss, const char *why)
{
    rpc_server *s = ss->srv;
    if (why)
        sl_debug("msrpc: %s closed: %s", ss->info.peer, why);
    if (s->on_close && !ss->epmap)
        s->on_close(s->on_close_ctx, ss->info.id);
    sl_loop_unwatch(s->loop, &ss->w);
    close(ss->fd);
    SL_LIST_UNLINK(s->sessions, ss, prev, next);
    rpc_conn_free(&ss->conn);
    sl_buf_free(&ss->in);
    sl_free(ss);
    s->n_sessions--;
    if (s->main.fd >= 0)
        sl_acceptor_kick(&s->main.acc);
    if (s->epd.fd >= 0)
        sl_acceptor_kick(&s->epd.acc);
}

static session *find_session(const rpc_server *s, uint64_t id)
{
    for (session *ss = s->sessions; ss; ss = ss->next)
        if (ss->info.id == id)
            return ss;
    return NULL;
}

int rpc_server_has_session(const rpc_server *s, uint64_t id)
{
    return find_session(s, id) != NULL;
}

/* Write what is queued; watch for writability while some is left; close a closing session
 * once all is out. Returns -1 when the session was closed. */
static int flush(session *ss)
{
    sl_buf *o = &ss->conn.out;
    while (sl_buf_unread(o)) {
        ssize_t n = send(ss->fd, sl_buf_head(o), sl_buf_unread(o), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            session_close(ss, "send failed");
            return -1;
        }
        sl_buf_consume(o, (size_t)n);
    }
    if (!sl_buf_unread(o) && ss->closing) {
        session_close(ss, NULL);
        return -1;
    }
    int ev = (sl_buf_unread(o) ? SL_EV_WRITE : 0) |
             (!ss->closing && sl_buf_unread(o) < ss->srv->cfg.max_out ? SL_EV_READ : 0);
    if (ev != ss->w.events)
        sl_loop_watch(ss->srv->loop, &ss->w, ev);
    return 0;
}

static uint32_t epm_op(rpc_server *s, session *ss, const rpc_call *c, ndr_rd *in, ndr_wr *out);

/* A registered interface's operation (dcerpc.c has checked opnum < n_ops). */
static uint32_t call_op(const rpc_call *c, const rpc_session_info *info, ndr_rd *r, ndr_wr *w)
{
    const iface_reg *reg = c->iface->impl;
    rpc_op_fn fn = reg->ops[c->opnum];
    return fn ? fn(reg->ctx, info, c, r, w) : NCA_S_OP_RNG_ERROR;
}

static void dispatch(session *ss, const rpc_call *c)
{
    rpc_server *s = ss->srv;
    sl_buf stub;
    sl_buf_init(&stub);
    ndr_wr w;
    rpc_ndr_wr_init(&w, &stub);
    ndr_rd r;
    rpc_ndr_rd_init(&r, c->stub, c->stub_len, c->le);
    uint32_t st;
    if (c->iface == &s->epm) {
        st = epm_op(s, ss, c, &r, &w);
    } else if (s->cfg.auth_none && !ss->info.loopback && !rpc_conn_user(&ss->conn)) {
        /* msrpc.auth = none serves loopback callers only */
        st = NCA_S_ACCESS_DENIED;
    } else {
        /* an NTLM login's calls have that user's rights (dcerpc.c refused the others) */
        const char *who = rpc_conn_user(&ss->conn);
        ss->info.user = who ? who : s->user;
        st = call_op(c, &ss->info, &r, &w);
    }
    if (st == 0)
        rpc_conn_respond(&ss->conn, c, sl_buf_head(&stub), sl_buf_unread(&stub));
    else if (st != RPC_DEFERRED)
        rpc_conn_fault(&ss->conn, c->call_id, c->ctx_id, st);
    sl_buf_free(&stub);
}

uint32_t rpc_server_invoke(rpc_server *s, const rpc_session_info *info, const rpc_syntax *iface,
                           uint16_t opnum, const uint8_t *stub, size_t len, int le, sl_buf *out)
{
    rpc_call c = {.opnum = opnum, .stub = stub, .stub_len = len, .le = le};
    ndr_wr w;
    rpc_ndr_wr_init(&w, out);
    ndr_rd r;
    rpc_ndr_rd_init(&r, stub, len, le);
    if (!iface) {
        /* a session of the endpoint mapper's door with no socket (towers name 127.0.0.1) */
        session ss = {.srv = s, .fd = -1, .epmap = 1, .info = *info};
        c.iface = &s->epm;
        return epm_op(s, &ss, &c, &r, &w);
    }
    for (size_t i = 0; i < s->n_regs; i++) {
        const rpc_iface *f = &s->regs[i].iface;
        if (memcmp(f->id.uuid, iface->uuid, 16) != 0 || f->id.major != iface->major)
            continue;
        if (opnum >= f->n_ops)
            return NCA_S_OP_RNG_ERROR;
        c.iface = f;
        return call_op(&c, info, &r, &w);
    }
    return NCA_S_UNK_IF;
}

void rpc_server_reply(rpc_server *s, uint64_t id, const rpc_call *c, const uint8_t *stub,
                      size_t len)
{
    session *ss = find_session(s, id);
    if (!ss)
        return;
    rpc_conn_respond(&ss->conn, c, stub, len);
    flush(ss);
}

void rpc_server_fault(rpc_server *s, uint64_t id, const rpc_call *c, uint32_t status)
{
    session *ss = find_session(s, id);
    if (!ss)
        return;
    rpc_conn_fault(&ss->conn, c->call_id, c->ctx_id, status);
    flush(ss);
}

/* Handle every complete PDU held; -1 when the session was closed. */
static int process(session *ss)
{
    char why[400];
    while (!ss->closing && sl_buf_unread(&ss->conn.out) < ss->srv->cfg.max_out) {
        size_t used = 0;
        rpc_call c;
        why[0] = 0;
        enum rpc_step st = rpc_conn_step(&ss->conn, sl_buf_head(&ss->in), sl_buf_unread(&ss->in),
                                         &used, &c, why, sizeof why);
        if (st == RPC_STEP_CALL) {
            uint64_t id = ss->info.id;
            dispatch(ss, &c);
            if (!find_session(ss->srv, id))
                return -1;
        }
        sl_buf_consume(&ss->in, used);
        if (st == RPC_STEP_NOTE) {
            if (rpc_conn_user(&ss->conn))
                sl_info("msrpc: %s: %s", ss->info.peer, why);
            else
                sl_warn("msrpc: %s: %s", ss->info.peer, why);
        }
        if (st == RPC_STEP_CLOSE) {
            sl_info("msrpc: closing %s: %s", ss->info.peer, why);
            ss->closing = 1;
        }
        if (st == RPC_STEP_MORE)
            break;
    }
    return flush(ss);
}

static void on_session(sl_loop *loop, sl_watch *w, int events)
{
    session *ss = w->data;
    if (events & SL_EV_READ) {
        size_t cap = 2u * ss->srv->cfg.max_frag;
        if (sl_buf_unread(&ss->in) < cap) {
            sl_buf_compact(&ss->in);
            size_t room = cap - sl_buf_unread(&ss->in);
            uint8_t *p = sl_buf_reserve(&ss->in, room);
            ssize_t n = recv(ss->fd, p, room, 0);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                session_close(ss, n == 0 ? "peer closed" : strerror(errno));
                return;
            }
            if (n > 0)
                ss->in.len += (size_t)n;
        }
        if (process(ss) < 0)
            return;
    } else if (events & SL_EV_ERROR) {
        session_close(ss, "socket error");
        return;
    }
    if (events & SL_EV_WRITE) {
        if (flush(ss) < 0)
            return;
        /* the client reads again: take up what was left unread */
        if (sl_buf_unread(&ss->in))
            process(ss);
    }
}

static int peer_str(const struct sockaddr_storage *ss, char *buf, size_t len, int *loopback)
{
    char a[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    *loopback = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
        port = ntohs(in->sin_port);
        *loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &in->sin6_addr, a, sizeof a);
        port = ntohs(in->sin6_port);
        *loopback = IN6_IS_ADDR_LOOPBACK(&in->sin6_addr) ||
                    (IN6_IS_ADDR_V4MAPPED(&in->sin6_addr) && in->sin6_addr.s6_addr[12] == 127);
    }
    snprintf(buf, len, "%s:%d", a, port);
    return 0;
}

static int session_nt_hash(void *ctx, const char *user, uint8_t out[16], char *why, size_t whylen);

static void on_accept(sl_acceptor *a, int fd, const struct sockaddr_storage *peer)
{
    door *d = a->data;
    rpc_server *s = d->srv;
    session *ss = sl_xcalloc(1, sizeof *ss);
    ss->srv = s;
    ss->fd = fd;
    ss->epmap = d->epmap;
    rpc_conn_cfg cc = {
        .ifaces = d->epmap ? s->epm_list : s->ifaces,
        .n_ifaces = d->epmap ? 1 : s->n_regs,
        .max_frag = s->cfg.max_frag,
        .max_call = s->cfg.max_call,
        .max_frags = s->cfg.max_frags,
        .sec_addr = d->epmap ? s->sec_epm : s->sec_main,
        .ntlm = s->cfg.ntlm,
        .require_auth = s->cfg.ntlm && !d->epmap,
        .min_level = d->epmap ? RPC_AUTH_LEVEL_NONE : s->cfg.min_level,
        .computer = s->computer,
        .nt_hash = session_nt_hash,
        .nt_hash_ctx = ss,
    };
    rpc_conn_init(&ss->conn, &cc, s->next_group++);
    sl_buf_init(&ss->in);
    ss->info.id = s->next_id++;
    ss->info.user = s->user;
    ss->info.local_port = d->port;
    ss->info.srv = s;
    peer_str(peer, ss->info.peer, sizeof ss->info.peer, &ss->info.loopback);
    ss->w.fd = fd;
    ss->w.fn = on_session;
    ss->w.data = ss;
    SL_LIST_PUSH(s->sessions, ss, prev, next);
    s->n_sessions++;
    if (sl_loop_watch(s->loop, &ss->w, SL_EV_READ) < 0)
        session_close(ss, "cannot watch the socket");
    else
        sl_debug("msrpc: accepted %s on %s", ss->info.peer, d->epmap ? "epmap" : "msrpc");
}

/* dcerpc.c's credential lookup, with the session's peer for loopback_users */
static int session_nt_hash(void *ctx, const char *user, uint8_t out[16], char *why, size_t whylen)
{
    session *ss = ctx;
    rpc_server *s = ss->srv;
    if (!s->cfg.nt_hash) {
        snprintf(why, whylen, "no NTLM credentials");
        return -1;
    }
    return s->cfg.nt_hash(s->cfg.nt_hash_ctx, user, ss->info.loopback, out, why, whylen);
}

static int can_accept(sl_acceptor *a)
{
    door *d = a->data;
    return d->srv->n_sessions < d->srv->cfg.max_sessions;
}

static int open_door(rpc_server *s, door *d, int port, int epmap, char *err, size_t errlen)
{
    d->srv = s;
    d->epmap = epmap;
    d->fd = sl_listen_tcp(s->bind, port, 128, d->addr, sizeof d->addr, &d->port, err, errlen);
    if (d->fd < 0)
        return -1;
    if (sl_acceptor_start(&d->acc, s->loop, d->fd, epmap ? "msrpc-epmap" : "msrpc",
                          s->cfg.fd_reserve, on_accept, can_accept, d) < 0) {
        snprintf(err, errlen, "cannot watch the msrpc listener: %s", strerror(errno));
        close(d->fd);
        d->fd = -1;
        return -1;
    }
    return 0;
}

int rpc_server_start(rpc_server *s, char *err, size_t errlen)
{
    if (s->cfg.port >= 0) {
        if (open_door(s, &s->main, s->cfg.port, 0, err, errlen) < 0)
            return -1;
        snprintf(s->sec_main, sizeof s->sec_main, "%d", s->main.port);
        sl_info("listening msrpc=%s:%d", s->main.addr, s->main.port);
    }
    if (s->cfg.epmap_port >= 0) {
        if (open_door(s, &s->epd, s->cfg.epmap_port, 1, err, errlen) < 0)
            return -1;
        snprintf(s->sec_epm, sizeof s->sec_epm, "%d", s->epd.port);
        sl_info("listening msrpc-epmap=%s:%d", s->epd.addr, s->epd.port);
    }
    return 0;
}

void rpc_server_free(rpc_server *s)
{
    if (!s)
        return;
    while (s->sessions)
        session_close(s->sessions, NULL);
    if (s->main.fd >= 0) {
        sl_acceptor_stop(&s->main.acc);
        close(s->main.fd);
    }
    if (s->epd.fd >= 0) {
        sl_acceptor_stop(&s->epd.acc);
        close(s->epd.fd);
    }
    sl_free(s->bind);
    sl_free(s->user);
    sl_free(s->computer);
    sl_free(s);
}

/* ---- the endpoint mapper ---- */

/* One floor of a tower: lhs, rhs (C706 appendix L). -1 past the end. */
static int floor_at(const uint8_t *t, size_t n, size_t *pos, const uint8_t **lhs, uint16_t *ll,
                    const uint8_t **rhs, uint16_t *rl)
{
    if (n - *pos < 2)
        return -1;
    *ll = sl_le16(t + *pos);
    *pos += 2;
    if (n - *pos < *ll)
        return -1;
    *lhs = t + *pos;
    *pos += *ll;
    if (n - *pos < 2)
        return -1;
    *rl = sl_le16(t + *pos);
    *pos += 2;
    if (n - *pos < *rl)
        return -1;
    *rhs = t + *pos;
    *pos += *rl;
    return 0;
}

static void tower_floor(sl_buf *b, const uint8_t *lhs, uint16_t ll, const uint8_t *rhs, uint16_t rl)
{
    sl_buf_put_le16(b, ll);
    sl_buf_append(b, lhs, ll);
    sl_buf_put_le16(b, rl);
    sl_buf_append(b, rhs, rl);
}

/* The tower of our endpoint for interface f: uuid, NDR20, ncacn, TCP port, IP address. */
static void our_tower(rpc_server *s, session *ss, const rpc_iface *f, sl_buf *t)
{
    uint8_t lhs[19], rhs[4];
    uint8_t cnt[2] = {5, 0};
    sl_buf_append(t, cnt, 2);
    lhs[0] = 0x0d;
    memcpy(lhs + 1, f->id.uuid, 16);
    sl_put_le16(lhs + 17, f->id.major);
    sl_put_le16(rhs, f->id.minor);
    tower_floor(t, lhs, 19, rhs, 2);
    memcpy(lhs + 1, rpc_ndr20.uuid, 16);
    lhs[17] = 2;
    lhs[18] = 0;
    rhs[0] = rhs[1] = 0;
    tower_floor(t, lhs, 19, rhs, 2);
    lhs[0] = 0x0b; /* ncacn: connection-oriented */
    tower_floor(t, lhs, 1, rhs, 2);
    lhs[0] = 0x07; /* TCP port, big endian */
    rhs[0] = (uint8_t)(s->main.port >> 8);
    rhs[1] = (uint8_t)s->main.port;
    tower_floor(t, lhs, 1, rhs, 2);
    /* the address the caller reached us on (the listener may be bound to 0.0.0.0) */
    struct sockaddr_storage me;
    socklen_t ml = sizeof me;
    memset(rhs, 0, 4);
    if (getsockname(ss->fd, (struct sockaddr *)&me, &ml) == 0 && me.ss_family == AF_INET)
        memcpy(rhs, &((struct sockaddr_in *)&me)->sin_addr, 4);
    else
        rhs[0] = 127, rhs[3] = 1;
    lhs[0] = 0x09;
    tower_floor(t, lhs, 1, rhs, 4);
}

/* ept_map (opnum 3): the tower asked for names an interface we serve over ncacn_ip_tcp. */
static uint32_t ept_map(rpc_server *s, session *ss, ndr_rd *in, ndr_wr *out)
{
    uint8_t obj[16], handle[20];
    if (ndr_ptr(in))
        rpc_ndr_bytes(in, obj, 16);
    uint8_t tower[1024];
    size_t tlen = 0;
    int have_tower = ndr_ptr(in) != 0;
    if (have_tower) {
        uint32_t max = rpc_ndr_u32(in), len = rpc_ndr_u32(in);
        if (len != max || len > sizeof tower) {
            in->err = 1;
        } else {
            rpc_ndr_bytes(in, tower, len);
            tlen = len;
        }
    }
    rpc_ndr_rd_align(in, 4);
    rpc_ndr_bytes(in, handle, 20);
    uint32_t max_towers = rpc_ndr_u32(in);
    if (in->err || max_towers > 500)
        return NCA_S_FAULT_NDR;
    const rpc_iface *found = NULL;
    size_t pos = 2;
    const uint8_t *lhs, *rhs;
    uint16_t ll, rl;
    int tcp = 0;
    if (tlen >= 2) {
        unsigned floors = sl_le16(tower);
        for (unsigned i = 0; i < floors && i < 8; i++) {
            if (floor_at(tower, tlen, &pos, &lhs, &ll, &rhs, &rl) < 0)
                break;
            if (i == 0 && ll == 19 && lhs[0] == 0x0d && rl == 2) {
                uint16_t major = sl_le16(lhs + 17);
                for (size_t k = 0; k < s->n_regs; k++)
                    if (!memcmp(s->ifaces[k]->id.uuid, lhs + 1, 16) &&
                        s->ifaces[k]->id.major == major)
                        found = s->ifaces[k];
            }
            if (i == 3 && ll == 1 && lhs[0] == 0x07)
                tcp = 1;
        }
    }
    memset(handle, 0, sizeof handle);
    rpc_ndr_put_bytes(out, handle, 20);
    int n = found && tcp && max_towers > 0 && s->main.fd >= 0;
    rpc_ndr_put_u32(out, (uint32_t)n);
    rpc_ndr_put_u32(out, max_towers); /* conformant varying array of tower pointers */
    rpc_ndr_put_u32(out, 0);
    rpc_ndr_put_u32(out, (uint32_t)n);
    if (n) {
        rpc_ndr_put_ref(out);
        sl_buf t;
        sl_buf_init(&t);
        our_tower(s, ss, found, &t);
        rpc_ndr_put_u32(out, (uint32_t)sl_buf_unread(&t));
        rpc_ndr_put_u32(out, (uint32_t)sl_buf_unread(&t));
        rpc_ndr_put_bytes(out, sl_buf_head(&t), sl_buf_unread(&t));
        sl_buf_free(&t);
        rpc_ndr_wr_align(out, 4);
    }
    rpc_ndr_put_u32(out, n ? 0 : EPT_S_NOT_REGISTERED);
    return 0;
}

/* ept_lookup (opnum 2): the entries of the interfaces we serve (qmmgmt, qmcomm), each with
 * the nil object, its tower and its name as the annotation, for tools that enumerate the
 * mapper. All of them fit in one answer (there are at most MAX_IFACES), so the entry mq_handle
 * returned is always the null one, which ends the client's loop. */
static uint32_t ept_lookup(rpc_server *s, session *ss, ndr_rd *in, ndr_wr *out)
{
    uint8_t obj[16] = {0}, ifid[16] = {0}, handle[20];
    uint32_t inquiry = rpc_ndr_u32(in);
    int have_obj = ndr_ptr(in) != 0;
    if (have_obj)
        rpc_ndr_bytes(in, obj, 16);
    int have_if = ndr_ptr(in) != 0;
    uint16_t if_major = 0, if_minor = 0;
    if (have_if) {
        rpc_ndr_bytes(in, ifid, 16);
        if_major = rpc_ndr_u16(in);
        if_minor = rpc_ndr_u16(in);
    }
    /* vers_option: 1 all versions, 2 compatible (same major, minor at least), 3 exact,
     * 4 major only, 5 up to (at most this version) */
    uint32_t vers = rpc_ndr_u32(in);
    rpc_ndr_rd_align(in, 4);
    rpc_ndr_bytes(in, handle, 20);
    uint32_t max_ents = rpc_ndr_u32(in);
    if (in->err || max_ents > 500)
        return NCA_S_FAULT_NDR;
    static const uint8_t nil[16];
    const rpc_iface *found[MAX_IFACES];
    uint32_t n = 0;
    /* inquiry 0: all; 1: by interface; 2: by object; 3: both. Our entries' object is nil. */
    int by_if = inquiry == 1 || inquiry == 3, by_obj = inquiry == 2 || inquiry == 3;
    for (size_t k = 0; k < s->n_regs && n < max_ents && s->main.fd >= 0 && inquiry <= 3; k++) {
        const rpc_iface *f = s->ifaces[k];
        if (by_if && (!have_if || memcmp(f->id.uuid, ifid, 16)))
            continue;
        uint32_t mine = (uint32_t)f->id.major << 16 | f->id.minor,
                 asked = (uint32_t)if_major << 16 | if_minor;
        if (by_if && ((vers == 2 && (f->id.major != if_major || f->id.minor < if_minor)) ||
                      (vers == 3 && mine != asked) || (vers == 4 && f->id.major != if_major) ||
                      (vers == 5 && mine > asked)))
            continue;
        if (by_obj && have_obj && memcmp(obj, nil, 16))
            continue;
        found[n++] = f;
    }
    memset(handle, 0, sizeof handle);
    rpc_ndr_put_bytes(out, handle, 20);
    rpc_ndr_put_u32(out, n);
    rpc_ndr_put_u32(out, max_ents); /* conformant varying array of ept_entry_t */
    rpc_ndr_put_u32(out, 0);
    rpc_ndr_put_u32(out, n);
    for (uint32_t i = 0; i < n; i++) {
        rpc_ndr_put_bytes(out, nil, 16); /* object */
        rpc_ndr_put_ref(out);            /* tower, deferred */
        size_t al = strlen(found[i]->name) + 1;
        rpc_ndr_put_u32(out, 0); /* annotation: a varying string, offset, count, chars */
        rpc_ndr_put_u32(out, (uint32_t)al);
        rpc_ndr_put_bytes(out, found[i]->name, al);
        rpc_ndr_wr_align(out, 4);
    }
    for (uint32_t i = 0; i < n; i++) {
        sl_buf t;
        sl_buf_init(&t);
        our_tower(s, ss, found[i], &t);
        rpc_ndr_put_u32(out, (uint32_t)sl_buf_unread(&t));
        rpc_ndr_put_u32(out, (uint32_t)sl_buf_unread(&t));
        rpc_ndr_put_bytes(out, sl_buf_head(&t), sl_buf_unread(&t));
        sl_buf_free(&t);
        rpc_ndr_wr_align(out, 4);
    }
    rpc_ndr_put_u32(out, n ? 0 : EPT_S_NOT_REGISTERED);
    return 0;
}

static uint32_t epm_op(rpc_server *s, session *ss, const rpc_call *c, ndr_rd *in, ndr_wr *out)
{
    uint8_t handle[20];
    switch (c->opnum) {
    case 2:
        return ept_lookup(s, ss, in, out);
    case 3:
        return ept_map(s, ss, in, out);
    case 4: /* ept_lookup_handle_free: we hand out none */
        rpc_ndr_bytes(in, handle, 20);
        if (in->err)
            return NCA_S_FAULT_NDR;
        memset(handle, 0, 20);
        rpc_ndr_put_bytes(out, handle, 20);
        rpc_ndr_put_u32(out, 0);
        return 0;
    default: /* insert, delete, inq_object, mgmt_delete: not for remote callers */
        return NCA_S_ACCESS_DENIED;
    }
}
