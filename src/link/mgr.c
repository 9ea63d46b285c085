/* mgr.c - the link manager: one per node. It makes the node's outgoing-queue registry
 * (eod/outq.h: naming, lookup, creation) and is told of every queue the registry adopts, to
 * which it gives a link_outq; it runs the timers that decide when a link connects, resends,
 * beats or goes idle, and answers PAUSE / RESUME / EOD_RESEND and the management view of an
 * outgoing queue (link_outq_get_info).
 *
 * Invariants: q->link is the queue's link_outq exactly while the queue exists (adopted at
 * creation or recovery, freed by the queue-deleted hook, which takes it out of the registry
 * first); an outgoing queue is in m->all, a request-only link in m->rpcs only.
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

#include "core/list.h"
#include "core/log.h"
#include "core/mem.h"
#include "persist/records.h"

void link_options_defaults(link_options *o)
{
    memset(o, 0, sizeof *o);
    o->user = "guest";
    o->password = "guest";
    o->heartbeat_s = 10;
    o->retry_min_ms = 500;
    o->retry_max_ms = 30000;
    o->idle_ms = 60000;
    o->resend_ms[0] = 30000;
    o->resend_ms[1] = 300000;
    o->resend_ms[2] = 1800000;
    o->resend_ms[3] = 21600000;
    o->batch_msgs = 2048;
    o->batch_bytes = 1u << 20;
    o->window_batches = 16;
    o->bad_queue_grace_ms = 60000;
    o->reach_queue_ms = 345600000; /* MSMQ's default TimeToReachQueue: 4 days */
    o->dns_timeout_ms = 10000;
}

/* ------------------------------------------------------------------------------------------
 * History and errors
 */

void link_hist_add(link_outq *o, uint32_t status, uint32_t error)
{
    if (o->nhist == LINK_HIST_MAX)
        o->nhist--;
    memmove(&o->hist[1], &o->hist[0], o->nhist * sizeof o->hist[0]);
    o->nhist++;
    eod_hist *h = &o->hist[0];
    h->status = status;
    h->time = wall_s();
    h->error = error;
    snprintf(h->address, sizeof h->address, "%.50s:%d",
             o->peer_addr[0] ? o->peer_addr : o->dest.host, o->dest.port);
}

void link_set_error(link_outq *o, const char *text)
{
    snprintf(o->last_error, sizeof o->last_error, "%s", text);
    o->last_error_time = wall_s();
}

static eod_state state_of(const link_outq *o)
{
    if (o->paused)
        return LINK_ONHOLD;
    if (!o->m->online)
        return LINK_DISCONNECTED;
    if (o->cs == C_OPEN || o->reopening) /* reopening: the connection is up, one channel */
        return LINK_CONNECTED;
    if (o->cs != C_NONE || o->failures > 0)
        return LINK_WAITING;
    return LINK_INACTIVE;
}

void link_persist_state(link_outq *o)
{
    if (o->m->store && o->q && o->q->durable)
        persist_outq_set(o->m->store, o->q->incarnation, o->paused ? OQ_ONHOLD : 0, o->foreign);
}

void link_mark_dirty(link_outq *o)
{
    if (o->in_dirty)
        return;
    o->in_dirty = 1;
    o->dirty_next = o->m->dirty;
    o->m->dirty = o;
}

/* ------------------------------------------------------------------------------------------
 * Timers: connect when there is work, heartbeats, handshake timeout, resend, idle close
 */

void link_outq_consider(link_outq *o, uint64_t now)
{
    link_mgr *m = o->m;
    if (o->paused || !m->online) {
        if (o->cs != C_NONE)
            link_conn_close(o);
        return;
    }
    switch (o->cs) {
    case C_NONE:
        if (((o->q && qm_queue_message_count(o->q) > 0) || o->calls) && now >= o->retry_at)
            link_start_connect(o);
        link_expire_calls(o, now);
        return;
    case C_OPEN:
        break;
    case C_RESOLVING:
        if (now - o->cs_since >= m->o.dns_timeout_ms)
            link_outq_fail(o, H_DNS_FAILURE, 1, "cannot resolve '%s': no answer within %u ms",
                           o->dest.host, m->o.dns_timeout_ms);
        return;
    case C_CONNECTING:
        if (o->addr_i + 1 < o->n_addrs && now - o->cs_since > ADDR_CONNECT_MS) {
            char why[64];
            snprintf(why, sizeof why, "no answer within %d ms", ADDR_CONNECT_MS);
            link_connect_failed(o, H_NOT_READY, why);
            return;
        }
        /* fall through */
    default:
        if (now - o->cs_since > HANDSHAKE_MS)
            link_outq_fail(o, H_NOT_READY, 1, "no answer from %s:%d within %d ms", o->dest.host,
                           o->dest.port, HANDSHAKE_MS);
        return;
    }
    if (o->heartbeat) {
        uint64_t period = (uint64_t)o->heartbeat * 1000;
        if (now - o->last_recv >= 2 * period) {
            link_outq_fail(o, H_NOT_READY, 1, "missed heartbeats from the destination");
            return;
        }
        if (now - o->last_send >= period / 2) {
            amqp_heartbeat_write(&o->out);
            link_mark_dirty(o);
        }
    }
    if (o->fl_len && o->es.resend_due_ms && now >= o->es.resend_due_ms && !o->blocked) {
        /* MS-MQQB Transactional Ack Wait Timer: everything unacked goes again (a fresh
         * session: the receiver drops what it has already). */
        size_t n = o->fl_len;
        eod_send_resend(&o->es, resend_table(m), now);
        link_conn_close(o);
        link_set_error(o, "");
        snprintf(o->last_error, sizeof o->last_error,
                 "no order ack within the resend interval: resending %zu message(s)", n);
        o->retry_at = now;
        link_outq_consider(o, now);
        return;
    }
    link_expire_calls(o, now);
    if (!o->fl_len && !o->calls && !o->holds && (!o->q || qm_queue_message_count(o->q) == 0)) {
        if (!o->idle_since)
            o->idle_since = now;
        else if (now - o->idle_since >= m->o.idle_ms) {
            sl_info("link %s: idle for %u ms, closing", o->name, m->o.idle_ms);
            link_conn_close(o);
        }
    } else {
        o->idle_since = 0;
    }
}

static void tick(sl_loop *loop, sl_timer *t)
{
    link_mgr *m = t->data;
    uint64_t now = sl_loop_now(loop);
    if (now - m->id_mark_at >= 1000) {
        /* how fast lookup ids go (send reservations are sized from it) */
        uint64_t next = m->node->next_lookup_id;
        m->id_rate = m->id_mark_at ? (next - m->id_mark) * 1000 / (now - m->id_mark_at) : 0;
        m->id_mark = next;
        m->id_mark_at = now;
    }
    link_reach_sample(m);
    uint64_t wall = m->o.reach_queue_ms ? sl_wall_ms() : 0;
    for (link_outq *o = m->all; o;) {
        link_outq *next = o->next;
        link_outq_consider(o, now);
        if (wall)
            link_reach_sweep(o, wall);
        o = next;
    }
    for (link_outq *o = m->rpcs; o;) {
        link_outq *next = o->next;
        link_outq_consider(o, now);
        if (o->cs == C_NONE && !o->calls && !o->holds && now - o->retry_at > m->o.idle_ms)
            link_rpc_outq_free(o); /* nothing asked of that node for a while */
        o = next;
    }
    sl_timer_start(loop, t, now + TICK_MS);
}

/* ------------------------------------------------------------------------------------------
 * Outgoing queues
 */

/* The registry's adopt hook (eod_adopt_fn): the link state of a new or recovered outgoing
 * queue, whose parsed name is a. */
static void outq_adopt(void *ctx, qm_queue *q, const eod_addr *a)
{
    link_mgr *m = ctx;
    link_outq *o = sl_xcalloc(1, sizeof *o);
    o->m = m;
    o->q = q;
    snprintf(o->name, sizeof o->name, "%s", q->name);
    o->dest = *a;
    o->msmq = eod_msmq_port(m->reg, a) != 0;
    o->io.fd = -1;
    eod_send_init(&o->es, q->incarnation);
    if (m->store) {
        persist_outq_get(m->store, q->incarnation, &o->paused, &o->foreign);
        /* what may have been sent before a restart: may have arrived (not known precisely) */
        o->sent_durable = o->sent_hwm = persist_outq_sent_get(m->store, q->incarnation);
    }
    o->paused &= OQ_ONHOLD;
    q->link = o;
    SL_LIST_PUSH(m->all, o, prev, next);
}

void link_outq_free(link_outq *o)
{
    link_mgr *m = o->m;
    link_conn_close(o);
    link_resolve_cancel(o->rq);
    o->rq = NULL;
    if (o->in_dirty) {
        for (link_outq **pp = &m->dirty; *pp; pp = &(*pp)->dirty_next)
            if (*pp == o) {
                *pp = o->dirty_next;
                break;
            }
    }
    if (o->in_held) {
        for (link_outq **pp = &m->held; *pp; pp = &(*pp)->held_next)
            if (*pp == o) {
                *pp = o->held_next;
                break;
            }
    }
    link_fail_calls(o, 0, "the link is going away");
    link_outq **head = o->rpc_only ? &m->rpcs : &m->all;
    SL_LIST_UNLINK(*head, o, prev, next);
    if (o->q) {
        eod_reg_forget(m->reg, o->q);
        o->q->link = NULL;
    }
    sl_buf_free(&o->rpc_body);
    sl_free(o->fl);
    sl_free(o->bt);
    sl_free(o->open_seqs);
    sl_holds_free(&o->disk_holds);
    sl_free(o);
}

static void on_queue_deleted(qm_queue *q, void *ctx)
{
    (void)ctx;
    if (q->link)
        link_outq_free(q->link);
}

/* The registry's (eod/outq.h), under the names other rooms call. */
void link_mgr_set_self(link_mgr *m, const char *addr, int port)
{
    eod_reg_set_self(m->reg, addr, port);
}

qm_queue *link_outgoing_queue(link_mgr *m, qm_vhost *vh, const char *fmt, size_t len, int create,
                              int *local, char *err, size_t errlen)
{
    return eod_outgoing_queue(m->reg, vh, fmt, len, create, local, err, errlen);
}

qm_queue *link_msmq_outgoing_queue(link_mgr *m, qm_vhost *vh, const char *fmt, size_t len,
                                   int create, char *err, size_t errlen)
{
    return eod_msmq_outgoing_queue(m->reg, vh, fmt, len, create, err, errlen);
}

/* ------------------------------------------------------------------------------------------
 * The manager
 */

static void on_resolver_ready(sl_loop *loop, sl_watch *w, int events)
{
    (void)loop;
    (void)events;
    link_mgr *m = w->data;
    link_resolver_run_done(m->resolver);
}

link_mgr *link_mgr_new(qm_node *node, sl_loop *loop, struct persist *store, const link_options *o)
{
    link_mgr *m = sl_xcalloc(1, sizeof *m);
    m->node = node;
    m->loop = loop;
    m->store = store;
    m->o = *o;
    m->reg = eod_reg_new(node, m->o.msmq_hosts, outq_adopt, m);
    sl_buf_init(&m->scratch);
    sl_buf_init(&m->props_scratch);
    snprintf(m->node_name, sizeof m->node_name, "%s", node->name);
    m->online = store ? persist_online(store) : 1;
    node->online = (uint8_t)m->online;
    node->on_queue_deleted = on_queue_deleted;
    node->hook_ctx = m;
    sl_timer_init(&m->tick, tick, m);
    sl_timer_start(loop, &m->tick, sl_now_ms() + TICK_MS);
    m->resolver = link_resolver_new();
    if (m->resolver) {
        m->resolver_w.fd = link_resolver_fd(m->resolver);
        m->resolver_w.fn = on_resolver_ready;
        m->resolver_w.data = m;
        if (sl_loop_watch(loop, &m->resolver_w, SL_EV_READ) < 0) {
            link_resolver_free(m->resolver);
            m->resolver = NULL;
        }
    }
    if (!m->resolver)
        sl_warn("link: no resolver for host names (%s): only numeric addresses will connect",
                strerror(errno));
    return m;
}

void link_mgr_recover(link_mgr *m)
{
    if (m->store) {
        size_t n;
        const persist_ltime *v = persist_ltimes(m->store, &n);
        if (n) {
            m->lt = sl_xmalloc(n * sizeof *m->lt);
            memcpy(m->lt, v, n * sizeof *v);
            m->n_lt = m->cap_lt = n;
        }
    }
    eod_reg_recover(m->reg);
}

void link_mgr_free(link_mgr *m)
{
    if (!m)
        return;
    sl_timer_stop(m->loop, &m->tick);
    while (m->all)
        link_outq_free(m->all);
    while (m->rpcs)
        link_outq_free(m->rpcs);
    if (m->resolver) {
        sl_loop_unwatch(m->loop, &m->resolver_w);
        link_resolver_free(m->resolver);
    }
    m->node->on_queue_deleted = NULL;
    eod_reg_free(m->reg); /* after the links: each forgets its queue */
    sl_buf_free(&m->scratch);
    sl_buf_free(&m->props_scratch);
    sl_free(m->lt);
    sl_free(m);
}

void link_mgr_set_online(link_mgr *m, int online)
{
    m->online = online;
    m->node->online = (uint8_t)online;
    if (m->store)
        persist_set_online(m->store, online);
    uint64_t now = sl_loop_now(m->loop);
    if (!online)
        for (link_outq *o = m->rpcs; o; o = o->next) {
            link_conn_close(o);
            link_fail_calls(o, 0, "this node is offline (DISCONNECT)");
        }
    for (link_outq *o = m->all; o; o = o->next) {
        if (!online && o->cs != C_NONE) {
            link_conn_close(o);
            link_set_error(o, "the node is offline (DISCONNECT)");
            link_hist_add(o, H_NOT_READY, 0);
        }
        if (online) {
            o->failures = 0;
            o->retry_at = now;
        }
    }
}

size_t link_mgr_outgoing(link_mgr *m, qm_queue **out, size_t cap)
{
    size_t n = 0;
    for (link_outq *o = m->all; o; o = o->next) {
        if (n < cap)
            out[n] = o->q;
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------------------------------
 * Management actions and properties
 */

sl_err link_pause(qm_queue *q)
{
    link_outq *o = q->link;
    if (!o)
        return SL_ERR_INVALID_PARAMETER;
    if (!o->paused) {
        o->paused = 1;
        link_persist_state(o);
        if (o->cs != C_NONE) {
            link_conn_close(o);
            link_hist_add(o, H_NOT_READY, 0);
        }
        sl_info("link %s: paused (ONHOLD)", q->name);
    }
    return SL_OK;
}

sl_err link_resume(qm_queue *q)
{
    link_outq *o = q->link;
    if (!o)
        return SL_ERR_INVALID_PARAMETER;
    if (o->paused) {
        o->paused = 0;
        o->failures = 0;
        o->retry_at = 0;
        link_persist_state(o);
        sl_info("link %s: resumed", q->name);
    }
    return SL_OK;
}

sl_err link_eod_resend(qm_queue *q)
{
    link_outq *o = q->link;
    if (!o)
        return SL_ERR_INVALID_PARAMETER;
    uint64_t now = sl_loop_now(o->m->loop);
    if (o->fl_len) {
        /* resend every unacked message now, on the same sequence: a new session starts from
         * the oldest pending one; the receiver drops what it already has */
        eod_send_resend(&o->es, resend_table(o->m), now);
        link_conn_close(o);
        link_hist_add(o, H_NOT_READY, 0);
        sl_info("link %s: EOD_RESEND", q->name);
    }
    o->failures = 0;
    o->retry_at = now;
    link_outq_consider(o, now);
    return SL_OK;
}

static void seqinfo(eod_seqinfo *s, uint64_t seq_id, uint64_t no, uint64_t prev)
{
    s->seq_id = seq_id;
    s->seq_no64 = no;
    s->prev_no64 = prev;
    s->seq_no = (uint32_t)no;
    s->prev_no = (uint32_t)prev;
}

/* Lookup id of the i-th ready message (0 = next to send), without paging anything in. */
static uint64_t ready_id_at(qm_queue *q, size_t i)
{
    qm_position view;
    const qm_position *p = qm_queue_peek_view(q, i, &view);
    if (!p)
        return 0;
    uint64_t id = p->lookup_id;
    if (p == &view)
        qm_message_unref(view.msg);
    return id;
}

void link_outq_get_info(qm_queue *q, eod_outq_info *out)
{
    memset(out, 0, sizeof *out);
    link_outq *o = q->link;
    out->format_name = q->name;
    if (!o) {
        out->last_error = "";
        return;
    }
    out->state = state_of(o);
    out->foreign = (eod_foreign)o->foreign;
    out->last_error = o->last_error;
    out->last_error_time = o->last_error_time;
    if (o->cs != C_NONE)
        snprintf(out->next_hop, sizeof out->next_hop, "IP=%.70s",
                 o->peer_addr[0] ? o->peer_addr : o->dest.host);
    uint64_t sid = o->es.seq_id;
    seqinfo(&out->last_ack, sid, o->es.last_ack, o->es.last_ack_prev);
    /* Sent and not order-acked: what is in flight now, and what an ended session had sent
     * (requeued in place, ready again, SeqNo <= sent_hwm). In flight are the oldest. */
    uint64_t requeued = o->sent_hwm ? qm_queue_count_ready_upto(q, o->sent_hwm) : 0;
    if (o->fl_len || requeued) {
        uint64_t first = 0, last = 0, before_last = 0;
        if (o->fl_len) {
            first = link_fl_at(o, 0)->seq;
            last = link_fl_at(o, o->fl_len - 1)->seq;
            before_last = o->fl_len > 1 ? link_fl_at(o, o->fl_len - 2)->seq : 0;
        }
        if (requeued) {
            uint64_t head = ready_id_at(q, 0), tail = ready_id_at(q, (size_t)requeued - 1);
            if (head && (!first || head < first))
                first = head;
            if (tail > last) {
                before_last = requeued > 1 ? ready_id_at(q, (size_t)requeued - 2) : last;
                last = tail;
            }
        }
        seqinfo(&out->first_non_ack, sid, first, 0);
        seqinfo(&out->last_non_ack, sid, last, before_last);
    }
    qm_position *next = qm_queue_peek(q, 0);
    seqinfo(&out->next_seq, sid, next ? next->lookup_id : 0, o->es.last_sent);
    out->last_ack_count = o->es.last_ack_count;
    out->last_ack_time = o->es.last_ack_time;
    out->in_flight = o->fl_len;
    out->no_ack_count = o->fl_len + requeued;
    out->no_read_count = 0; /* final (receive) acks are not tracked */
    out->resend_count = o->es.resend_index;
    out->resend_interval_s = eod_resend_interval(resend_table(o->m), o->es.resend_index) / 1000;
    if (o->es.resend_due_ms) {
        uint64_t now = sl_loop_now(o->m->loop);
        out->resend_time =
            wall_s() +
            (int64_t)((o->es.resend_due_ms > now ? o->es.resend_due_ms - now : 0) / 1000);
    }
    out->sent = o->sent;
    out->acked = o->acked;
    out->dead_lettered = o->dead_lettered;
    out->last_dl_count = o->last_dl_count;
    out->last_dl_class = o->last_dl_class;
    out->last_dl_class_name = o->last_dl_class ? link_nack_class_name(o->last_dl_class) : "";
    out->last_dl_reason = o->last_dl_reason;
    out->last_dl_time = o->last_dl_time;
    out->reconnects = o->reconnects;
    out->history = o->hist;
    out->n_history = o->nhist;
}
