/* mgr.c - the link manager: one per node. It adopts every outgoing queue (link.h
 * "Outgoing queues") into a link_outq, runs the timers that decide when a link connects,
 * resends, beats or goes idle, and answers PAUSE / RESUME / EOD_RESEND and the management
 * view of an outgoing queue (link_outq_get_info).
 *
 * Invariants: q->link is the queue's link_outq exactly while the queue exists (adopted at
 * creation or recovery, freed by the queue-deleted hook); an outgoing queue is in m->all and
 * in the registry by its key, a request-only link in m->rpcs only.
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

#include "access/access.h"
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

const char *link_state_name(link_state s)
{
    static const char *const names[] = {"INACTIVE", "WAITING",      "CONNECTED",
                                        "ONHOLD",   "DISCONNECTED", "DISCONNECTING"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "INACTIVE";
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
    link_hist *h = &o->hist[0];
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

static link_state state_of(const link_outq *o)
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

static void key_of(const qm_vhost *vh, const char *canon, char *out, size_t cap, size_t *len)
{
    size_t vl = strlen(vh->name), cl = strlen(canon);
    if (vl + 1 + cl > cap) {
        *len = 0;
        return;
    }
    memcpy(out, vh->name, vl);
    out[vl] = 0;
    for (size_t i = 0; i < cl; i++)
        out[vl + 1 + i] = (char)(canon[i] >= 'A' && canon[i] <= 'Z' ? canon[i] + 32 : canon[i]);
    *len = vl + 1 + cl;
}

static link_outq *outq_adopt(link_mgr *m, qm_queue *q)
{
    link_addr a;
    char err[300];
    if (link_fmt_parse(q->name, strlen(q->name), &a, err, sizeof err) < 0) {
        sl_warn("link: queue '%s' looks like an outgoing queue but is not one: %s", q->name, err);
        return NULL;
    }
    link_outq *o = sl_xcalloc(1, sizeof *o);
    o->m = m;
    o->q = q;
    snprintf(o->name, sizeof o->name, "%s", q->name);
    o->dest = a;
    o->msmq = link_msmq_port_for(m, &a) != 0;
    o->io.fd = -1;
    eod_send_init(&o->es, q->incarnation);
    if (m->store) {
        persist_outq_get(m->store, q->incarnation, &o->paused, &o->foreign);
        /* what may have been sent before a restart: may have arrived (not known precisely) */
        o->sent_durable = o->sent_hwm = persist_outq_sent_get(m->store, q->incarnation);
    }
    o->paused &= OQ_ONHOLD;
    q->link = o;
    o->next = m->all;
    if (m->all)
        m->all->prev = o;
    m->all = o;
    char key[1200];
    size_t kl;
    key_of(q->vhost, q->name, key, sizeof key, &kl);
    if (kl)
        sl_map_put(m->by_key, key, kl, o);
    return o;
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
    if (o->prev)
        o->prev->next = o->next;
    else
        *head = o->next;
    if (o->next)
        o->next->prev = o->prev;
    if (o->q) {
        char key[1200];
        size_t kl;
        key_of(o->q->vhost, o->q->name, key, sizeof key, &kl);
        if (kl && sl_map_get(m->by_key, key, kl) == o)
            sl_map_del(m->by_key, key, kl);
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

void link_mgr_set_self(link_mgr *m, const char *addr, int port)
{
    snprintf(m->self_addr, sizeof m->self_addr, "%s", addr);
    m->self_port = port;
}

static int is_self(const link_mgr *m, const link_addr *a)
{
    if (a->port != m->self_port)
        return 0;
    if (!strcasecmp(a->host, m->self_addr) || !strcasecmp(a->host, "localhost"))
        return 1;
    /* bound to 0.0.0.0: every loopback address is us */
    return !strcmp(m->self_addr, "0.0.0.0") && !strncmp(a->host, "127.", 4);
}

qm_queue *link_outgoing_queue(link_mgr *m, qm_vhost *vh, const char *fmt, size_t len, int create,
                              int *local, char *err, size_t errlen)
{
    link_addr a;
    *local = 0;
    if (link_fmt_parse(fmt, len, &a, err, errlen) < 0)
        return NULL;
    int mq_port = link_msmq_port_for(m, &a);
    if (mq_port) { /* a Windows queue manager: MS-MQQB's port, written in the canonical name */
        a.port = mq_port;
        a.port_given = 1;
    }
    if (is_self(m, &a)) {
        *local = 1;
        snprintf(err, errlen, "'%.*s' names a queue of this node", (int)len, fmt);
        return NULL;
    }
    char canon[900], key[1200];
    size_t kl;
    link_fmt_canonical(&a, canon, sizeof canon);
    key_of(vh, canon, key, sizeof key, &kl);
    link_outq *o = kl ? sl_map_get(m->by_key, key, kl) : NULL;
    if (o)
        return o->q;
    if (!create) {
        snprintf(err, errlen, "no outgoing queue for '%.*s'", (int)len, fmt);
        return NULL;
    }
    qm_queue_decl d = {.name = canon, .name_len = strlen(canon), .durable = 1};
    qm_queue *q;
    char derr[300];
    if (qm_queue_declare(vh, &d, &q, NULL, derr, sizeof derr) != SL_OK) {
        snprintf(err, errlen, "cannot create the outgoing queue: %s", derr);
        return NULL;
    }
    if (!q->link && !outq_adopt(m, q)) {
        snprintf(err, errlen, "cannot adopt the outgoing queue");
        return NULL;
    }
    sl_info("link: outgoing queue %s created in vhost '%s'", q->name, vh->name);
    return q;
}

qm_queue *link_msmq_outgoing_queue(link_mgr *m, qm_vhost *vh, const char *fmt, size_t len,
                                   int create, char *err, size_t errlen)
{
    link_addr a;
    int local;
    if (link_fmt_parse(fmt, len, &a, err, errlen) < 0)
        return NULL;
    if (!link_msmq_port_for(m, &a)) {
        snprintf(err, errlen, "'%.*s' is not on a host of msmq.hosts", (int)len, fmt);
        return NULL;
    }
    return link_outgoing_queue(m, vh, fmt, len, create, &local, err, errlen);
}

static qm_queue *resolve_remote(qm_vhost *vh, const char *name, size_t len, int create, void *ctx)
{
    link_mgr *m = ctx;
    char err[300];
    int local;
    if (!link_fmt_is_candidate(name, len))
        return NULL;
    qm_queue *q = link_outgoing_queue(m, vh, name, len, create, &local, err, sizeof err);
    if (!q && local) {
        /* DIRECT=TCP:<this node>\private$\<queue>: the local queue of that name */
        link_addr a;
        if (link_fmt_parse(name, len, &a, err, sizeof err) == 0)
            return qm_queue_find(vh, a.queue, strlen(a.queue));
    }
    return q;
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
    m->by_key = sl_map_new();
    sl_buf_init(&m->scratch);
    sl_buf_init(&m->props_scratch);
    snprintf(m->node_name, sizeof m->node_name, "%s", node->name);
    m->online = store ? persist_online(store) : 1;
    node->online = (uint8_t)m->online;
    node->resolve_remote = resolve_remote;
    node->remote_ctx = m;
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
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (sl_map_next(m->node->vhosts, &it, &k, &kl, &v)) {
        qm_vhost *vh = v;
        size_t qit = 0;
        void *qv;
        while (sl_map_next(vh->queues, &qit, &k, &kl, &qv)) {
            qm_queue *q = qv;
            if (q->is_outgoing && !q->link)
                outq_adopt(m, q);
        }
    }
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
    m->node->resolve_remote = NULL;
    m->node->on_queue_deleted = NULL;
    sl_map_free(m->by_key);
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

static void seqinfo(link_seqinfo *s, uint64_t seq_id, uint64_t no, uint64_t prev)
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

void link_outq_get_info(qm_queue *q, link_outq_info *out)
{
    memset(out, 0, sizeof *out);
    link_outq *o = q->link;
    out->format_name = q->name;
    if (!o) {
        out->last_error = "";
        return;
    }
    out->state = state_of(o);
    out->foreign = (link_foreign)o->foreign;
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

sl_err link_recv_may_write(const struct acc_db *acc, const char *user, const qm_queue *q, char *err,
                           size_t errlen)
{
    if (q->is_outgoing) {
        snprintf(err, errlen, "'%s' is an outgoing queue, not a destination", q->name);
        return SL_ERR_ACCESS_REFUSED;
    }
    if (!acc)
        return SL_OK;
    return acc_check_link_write(acc, user, q->vhost->name, q->name, err, errlen);
}
