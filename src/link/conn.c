/* conn.c - the connection under a link: the connect attempt (the format name's host
 * resolved off the loop, then each of its addresses in turn), the loop's events, writing what
 * the link buffered once the disk holds it, and failure with backoff; the in-flight ring the
 * senders fill and the order acks empty.
 *
 * Invariants: bytes leave only past the disk holds of the turn that wrote them (flush_one);
 * a failed session requeues everything in flight at its place, and the next session starts a
 * new EOD session (PrevNo 0).
 */
#include "link/link_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "core/log.h"
#include "core/mem.h"

/* ------------------------------------------------------------------------------------------
 * In flight
 */

inflight *link_fl_at(link_outq *o, size_t i)
{
    return &o->fl[(o->fl_head + i) % o->fl_cap];
}

void link_fl_push(link_outq *o, qm_position *pos, uint64_t seq)
{
    if (o->fl_len == o->fl_cap) {
        size_t cap = o->fl_cap ? o->fl_cap * 2 : 256;
        inflight *n = sl_xmalloc(cap * sizeof *n);
        for (size_t i = 0; i < o->fl_len; i++)
            n[i] = *link_fl_at(o, i);
        sl_free(o->fl);
        o->fl = n;
        o->fl_cap = cap;
        o->fl_head = 0;
    }
    *link_fl_at(o, o->fl_len++) = (inflight){pos, seq, 0, 0, 0, 0, 0};
}

void link_bt_push(link_outq *o, size_t n)
{
    if (o->bt_len == o->bt_cap) {
        size_t cap = o->bt_cap ? o->bt_cap * 2 : 16;
        size_t *b = sl_xmalloc(cap * sizeof *b);
        for (size_t i = 0; i < o->bt_len; i++)
            b[i] = o->bt[(o->bt_head + i) % o->bt_cap];
        sl_free(o->bt);
        o->bt = b;
        o->bt_cap = cap;
        o->bt_head = 0;
    }
    o->bt[(o->bt_head + o->bt_len++) % o->bt_cap] = n;
}

/* The oldest n in-flight messages are order-acked: they leave the outgoing queue. */
void link_ack_front(link_outq *o, size_t n)
{
    uint64_t upto = 0, prev = 0;
    for (size_t i = 0; i < n && o->fl_len; i++) {
        inflight *f = link_fl_at(o, 0);
        prev = upto;
        upto = f->seq;
        qm_position *pos = f->pos;
        o->fl_head = (o->fl_head + 1) % o->fl_cap;
        o->fl_len--;
        if (!pos)
            continue; /* foreign: returned and dead-lettered, its confirm came now */
        qm_pos_set_holder(pos, NULL);
        qm_position_ack(pos);
        o->acked++;
        o->bad_dst_since = 0; /* the destination takes messages (again) */
    }
    if (upto)
        eod_send_acked(&o->es, upto, prev, o->fl_len, resend_table(o->m), sl_loop_now(o->m->loop),
                       wall_s());
    if (o->attached && o->q)
        qm_queue_schedule_dispatch(o->q); /* window room */
}

/* The session is gone: everything in flight is sendable again, at its place. */
void link_requeue_all(link_outq *o)
{
    while (o->fl_len) {
        inflight *f = link_fl_at(o, o->fl_len - 1);
        o->fl_len--;
        if (!f->pos)
            continue;
        qm_pos_set_holder(f->pos, NULL);
        qm_position_requeue(f->pos);
    }
    o->fl_head = 0;
    o->bt_len = o->bt_head = 0;
    o->open_n = 0;
    o->open_bytes = 0;
    o->in_unit = 0;
}

/* ------------------------------------------------------------------------------------------
 * The connection
 */

void link_conn_close(link_outq *o)
{
    if (o->cs == C_NONE)
        return;
    if (o->io.fd >= 0) {
        sl_loop_unwatch(o->m->loop, &o->w);
        o->io.ops->close(&o->io);
    }
    o->cs = C_NONE;
    sl_buf_free(&o->in);
    sl_buf_free(&o->out);
    sl_holds_clear(&o->disk_holds);
    o->out_sent = o->out_marked = 0;
    link_detach(o);
    link_requeue_all(o);
    o->blocked = 0;
    o->skip_content = 0;
    o->rs = R_NONE;
    o->rpc_in_reply = 0;
    /* a channel being opened again after a NACK goes with its connection: the next one is a
     * new connection (history, failures, requests), not a reopened channel */
    o->reopening = 0;
}

static uint64_t backoff_ms(const link_outq *o)
{
    const link_options *lo = &o->m->o;
    uint64_t d = lo->retry_min_ms;
    for (unsigned i = 1; i < o->failures && d < lo->retry_max_ms; i++)
        d *= 2;
    if (d > lo->retry_max_ms)
        d = lo->retry_max_ms;
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = (uint32_t)sl_now_ms();
    return d / 2 + r % (d / 2 + 1); /* jitter: nodes restarted together do not retry together */
}

void link_outq_fail(link_outq *o, unsigned status, int backoff, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    int was_open = o->cs == C_OPEN;
    size_t in_flight = o->fl_len;
    link_conn_close(o);
    link_set_error(o, text);
    link_hist_add(o, status, 0xC00E0069u /* MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE */);
    o->failures++;
    if (was_open)
        o->reconnects++;
    uint64_t now = sl_loop_now(o->m->loop);
    o->retry_at = backoff ? now + backoff_ms(o) : now;
    eod_send_session(&o->es);
    link_fail_calls(o, 1, text);
    sl_warn("link %s: %s (%zu in flight requeued; retrying in %llu ms)", o->name, text, in_flight,
            (unsigned long long)(o->retry_at - now));
}

/* The node's identity, made durable the first time a link needs it. */
void link_need_node_id(link_mgr *m)
{
    if (m->node_id_hex[0])
        return;
    if (m->store)
        memcpy(m->node_id, persist_node_id(m->store), 16);
    else if (getrandom(m->node_id, 16, 0) != 16)
        memset(m->node_id, 0x5a, 16);
    sl_hex(m->node_id_hex, m->node_id, 16);
    /* what a receiver's operator pins this node's link user to (user.NAME.link_node) */
    sl_info("links: node %s speaks as node id %s (logging in as '%s')", m->node_name,
            m->node_id_hex, m->o.user);
}

static void on_event(sl_loop *loop, sl_watch *w, int events)
{
    link_outq *o = w->data;
    (void)loop;
    char err[256];
    unsigned status = H_UNKNOWN;
    if (o->cs == C_CONNECTING) {
        if (!(events & (SL_EV_WRITE | SL_EV_ERROR)))
            return;
        if (link_io_connected(&o->io, err, sizeof err, &status) < 0) {
            link_connect_failed(o, status, err);
            return;
        }
        if (o->m->o.tls) {
            if (link_io_tls_start(&o->io, o->m->o.tls, o->dest.host, err, sizeof err) < 0) {
                link_outq_fail(o, H_UNKNOWN, 1, "%s:%d: %s", o->dest.host, o->dest.port, err);
                return;
            }
            o->cs = C_TLS;
        } else {
            sl_loop_watch(o->m->loop, &o->w, SL_EV_READ);
            link_on_connected(o);
            return;
        }
    }
    if (o->cs == C_TLS) {
        int want = 0;
        int r = link_io_tls_handshake(&o->io, &want, err, sizeof err);
        if (r < 0) {
            link_outq_fail(o, H_NOT_READY, 1, "%s:%d: %s", o->dest.host, o->dest.port, err);
            return;
        }
        if (r == 0) {
            sl_loop_watch(o->m->loop, &o->w, want ? want : SL_EV_READ);
            return;
        }
        sl_loop_watch(o->m->loop, &o->w, SL_EV_READ);
        link_on_connected(o);
        return;
    }
    if (events & SL_EV_WRITE)
        link_mark_dirty(o);
    if (!(events & (SL_EV_READ | SL_EV_ERROR)))
        return;
    for (int i = 0; i < 16 && o->cs >= C_START; i++) {
        uint8_t *dst = sl_buf_reserve(&o->in, 64 * 1024);
        ssize_t n = o->io.ops->read(&o->io, dst, 64 * 1024);
        if (n > 0) {
            o->in.len += (size_t)n;
            link_process_input(o);
            if (o->cs == C_NONE)
                return;
            if ((size_t)n < 64 * 1024)
                break;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        link_outq_fail(o, H_NOT_READY, 1, "the destination closed the connection%s%s",
                       n < 0 ? ": " : "", n < 0 ? o->io.ops->error(&o->io) : "");
        return;
    }
    if (sl_buf_unread(&o->out))
        link_mark_dirty(o); /* handshake replies, heartbeats: written at the end of the turn */
}

/* The TCP connect to addrs[addr_i] (the format name's numeric address, or one its host
 * resolved to). The attempt's InProcess entry goes into the history with the first one. */
static void connect_addr(link_outq *o)
{
    char err[256];
    unsigned status = H_UNKNOWN;
    o->peer_addr[0] = 0;
    if (link_io_tcp_connect(&o->io, o->addrs[o->addr_i], o->dest.port, o->peer_addr,
                            sizeof o->peer_addr, err, sizeof err, &status) < 0) {
        o->io.fd = -1;
        link_connect_failed(o, status, err);
        return;
    }
    o->cs = C_CONNECTING;
    o->cs_since = sl_loop_now(o->m->loop);
    o->last_recv = o->last_send = o->cs_since;
    o->w.fd = o->io.fd;
    o->w.fn = on_event;
    o->w.data = o;
    if (o->addr_i == 0)
        link_hist_add(o, H_IN_PROCESS, 0);
    if (sl_loop_watch(o->m->loop, &o->w, SL_EV_WRITE) < 0)
        link_outq_fail(o, H_UNKNOWN, 1, "cannot watch the socket: %s", strerror(errno));
}

/* The TCP connect to addrs[addr_i] failed (refused, unreachable, no answer in time): the next
 * address of the name, if there is one, within the same attempt; else the attempt failed. */
void link_connect_failed(link_outq *o, unsigned status, const char *err)
{
    if (o->addr_i + 1 < o->n_addrs) {
        sl_info("link %s: %s:%d: %s; trying %s, the next address of '%s'", o->name,
                o->addrs[o->addr_i], o->dest.port, err, o->addrs[o->addr_i + 1], o->dest.host);
        if (o->io.fd >= 0) {
            sl_loop_unwatch(o->m->loop, &o->w);
            o->io.ops->close(&o->io);
            o->io.fd = -1;
        }
        o->addr_i++;
        connect_addr(o);
        return;
    }
    if (o->n_addrs > 1)
        link_outq_fail(o, status, 1, "%s:%d: %s (%u addresses of '%s' tried)", o->addrs[o->addr_i],
                       o->dest.port, err, o->n_addrs, o->dest.host);
    else
        link_outq_fail(o, status, 1, "%s:%d: %s", o->dest.host, o->dest.port, err);
}

static void on_resolved(void *ctx, const char (*addrs)[LINK_ADDR_LEN], unsigned n, const char *err)
{
    link_outq *o = ctx;
    o->rq = NULL;
    if (o->cs != C_RESOLVING)
        return; /* the attempt gave up waiting (DnsFailure): the next one asks again */
    if (n == 0) {
        link_outq_fail(o, H_DNS_FAILURE, 1, "cannot resolve '%s': %s", o->dest.host, err);
        return;
    }
    o->n_addrs = n < LINK_RESOLVE_ADDRS ? n : LINK_RESOLVE_ADDRS;
    for (unsigned i = 0; i < o->n_addrs; i++)
        snprintf(o->addrs[i], sizeof o->addrs[i], "%s", addrs[i]);
    o->addr_i = 0;
    connect_addr(o);
}

static int is_numeric_addr(const char *host)
{
    unsigned char a[16];
    return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

/* A connect attempt: a host name is looked up on the resolver's threads first (C_RESOLVING:
 * the loop goes on, the wait bounded by link_dns_timeout_ms in outq_consider), then the
 * non-blocking connect to its address. */
void link_start_connect(link_outq *o)
{
    o->peer_addr[0] = 0;
    o->io.fd = -1;
    o->cs = C_CONNECTING; /* so a failure below is recorded as an attempt */
    o->cs_since = sl_loop_now(o->m->loop);
    o->last_recv = o->last_send = o->cs_since;
    sl_buf_init(&o->in);
    sl_buf_init(&o->out);
    o->peer_is_sluice = !o->msmq; /* until connection.start says otherwise */
    o->frame_max = LINK_FRAME_MAX;
    o->n_addrs = o->addr_i = 0;
    if (is_numeric_addr(o->dest.host)) {
        snprintf(o->addrs[0], sizeof o->addrs[0], "%.45s", o->dest.host);
        o->n_addrs = 1;
        connect_addr(o);
        return;
    }
    if (!o->rq && (!o->m->resolver ||
                   !(o->rq = link_resolve(o->m->resolver, o->dest.host, on_resolved, o)))) {
        link_outq_fail(o, H_DNS_FAILURE, 1, "cannot resolve '%s': no resolver thread",
                       o->dest.host);
        return;
    }
    o->cs = C_RESOLVING;
}

static void flush_one(link_outq *o)
{
    if (o->cs < C_START || o->io.fd < 0)
        return;
    /* A transaction's messages all became sendable at once, so after dispatch nothing ready
     * means the rest of the open one is gone (purged, expired): close the batch anyway. */
    if (o->cs == C_OPEN && o->in_unit && (!o->q || o->q->n_ready == 0))
        o->in_unit = 0;
    if (o->cs == C_OPEN && !o->in_unit)
        link_close_batch(o);
    /* What was written since the last flush waits for everything appended to the store so
     * far (this turn's records among it). */
    uint64_t done = o->m->store ? persist_done(o->m->store) : 0;
    uint64_t end = o->out_sent + sl_buf_unread(&o->out);
    if (end > o->out_marked) {
        if (o->m->store)
            sl_holds_mark(&o->disk_holds, o->out_marked, persist_ticket(o->m->store), done);
        o->out_marked = end;
    }
    sl_holds_release(&o->disk_holds, done);
    if (o->disk_holds.len && !o->in_held) { /* the next finished sync flushes it again */
        o->in_held = 1;
        o->held_next = o->m->held;
        o->m->held = o;
    }
    size_t avail;
    while ((avail = sl_holds_avail(&o->disk_holds, o->out_sent, sl_buf_unread(&o->out))) > 0) {
        ssize_t n = o->io.ops->write(&o->io, sl_buf_head(&o->out), avail);
        if (n > 0) {
            sl_buf_consume(&o->out, (size_t)n);
            o->out_sent += (uint64_t)n;
            o->last_send = sl_loop_now(o->m->loop);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            sl_loop_watch(o->m->loop, &o->w, SL_EV_READ | SL_EV_WRITE);
            return;
        }
        link_outq_fail(o, H_SEND_FAILURE, 1, "write to the destination failed: %s",
                       n < 0 ? o->io.ops->error(&o->io) : "closed");
        return;
    }
    if (o->w.events != SL_EV_READ)
        sl_loop_watch(o->m->loop, &o->w, SL_EV_READ);
    /* Give back a big buffer once it is empty, never before: what is still in it waits for
     * the disk (holds) and would be lost from the stream (it was, when 1 KiB messages filled
     * the window with more than 4 MiB: the link stalled until the resend timer). */
    if (!sl_buf_unread(&o->out) && o->out.cap > (4u << 20))
        sl_buf_free(&o->out);
    if (o->attached && o->q && link_can_take(&o->qc))
        qm_queue_schedule_dispatch(o->q); /* the buffer drained: more can go */
}

void link_mgr_flush(link_mgr *m)
{
    while (m->dirty) {
        link_outq *o = m->dirty;
        m->dirty = o->dirty_next;
        o->in_dirty = 0;
        flush_one(o);
    }
}

void link_mgr_synced(link_mgr *m)
{
    if (!m)
        return;
    /* Only the links that wait: O(waiting), not O(outgoing queues), per sync. A flush that
     * still finds holds puts its link back. */
    while (m->held) {
        link_outq *o = m->held;
        m->held = o->held_next;
        o->in_held = 0;
        if (o->disk_holds.len)
            link_mark_dirty(o);
    }
}
