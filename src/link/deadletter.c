/* deadletter.c - NACKs (link.h "NACKs"): what the destination can never take goes to this
 * node's dead-letter queues, and TimeToReachQueue: the age of a message bounded from its
 * lookup id by durable samples.
 *
 * Invariants: whole transactions are dead-lettered together in one record group; a message
 * is dead-lettered for its age only when it is known never to have reached the destination
 * (above sent_hwm).
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

#include "amqp/table.h"
#include "core/log.h"
#include "core/mem.h"

/* ------------------------------------------------------------------------------------------
 * Dead letters (link.h "NACKs"): what the destination can never take goes to this node's
 * dead-letter queues, whole transactions together, in one record group (so a kill -9 leaves
 * either the messages in the outgoing queue or their copies in the dead-letter queue, never
 * both, never neither).
 */

const char *link_nack_class_name(uint32_t cls)
{
    switch (cls) {
    case CLASS_NACK_BAD_DST_Q:
        return LINK_NACK_BAD_DST_Q;
    case CLASS_NACK_REACH_QUEUE_TIMEOUT:
        return LINK_NACK_REACH_QUEUE_TIMEOUT;
    default:
        return LINK_NACK_Q_EXCEED_QUOTA;
    }
}

/* The dead letter of pos: its body and properties, the expiration removed (a dead letter does
 * not vanish; kept as x-msmq-original-expiration) and x-msmq-* headers saying why. */
static qm_message *dl_copy(link_outq *o, const qm_position *p, uint32_t cls, const char *reason,
                           int first_in_xact, uint64_t xact_first)
{
    const qm_message *m = p->msg;
    amqp_basic_props bp;
    if (!m->props_len || amqp_props_decode(qm_msg_props(m), m->props_len, &bp) < 0)
        memset(&bp, 0, sizeof bp);
    sl_buf hb, pb;
    sl_buf_init(&hb);
    sl_buf_init(&pb);
    size_t mark = amqp_tbl_begin(&hb);
    if (bp.flags & AMQP_P_HEADERS) {
        amqp_table_iter it;
        amqp_bytes k;
        amqp_value v;
        amqp_table_iter_init(&it, bp.headers);
        while (amqp_table_next(&it, &k, &v))
            if (k.len < 7 || memcmp(k.p, "x-msmq-", 7))
                amqp_tbl_put_value(&hb, k, &v);
    }
    amqp_tbl_put_long(&hb, "x-msmq-class", cls);
    amqp_tbl_put_str(&hb, "x-msmq-class-name", amqp_cstr(link_nack_class_name(cls)));
    amqp_tbl_put_str(&hb, "x-msmq-dead-letter-reason", amqp_cstr(reason));
    amqp_tbl_put_str(&hb, "x-msmq-destination-queue", amqp_cstr(o->q->name));
    amqp_tbl_put_timestamp(&hb, "x-msmq-dead-letter-time", (uint64_t)wall_s());
    amqp_tbl_put_long(&hb, "x-msmq-seq-no", (int64_t)p->lookup_id);
    if (p->xact) {
        char xid[96];
        snprintf(xid, sizeof xid, "sluice-%s-%llu-%llu", o->m->node_id_hex,
                 (unsigned long long)o->es.seq_id, (unsigned long long)xact_first);
        amqp_tbl_put_str(&hb, "x-msmq-xact-id", amqp_cstr(xid));
        amqp_tbl_put_bool(&hb, "x-msmq-first-in-xact", first_in_xact);
        amqp_tbl_put_bool(&hb, "x-msmq-last-in-xact", !p->xact_cont);
    }
    if (bp.flags & AMQP_P_EXPIRATION) {
        amqp_tbl_put_str(&hb, "x-msmq-original-expiration", bp.expiration);
        bp.flags &= (uint16_t)~AMQP_P_EXPIRATION;
    }
    amqp_tbl_end(&hb, mark);
    bp.headers = (amqp_bytes){hb.data + mark + 4, hb.len - mark - 4};
    bp.flags |= AMQP_P_HEADERS;
    amqp_props_encode(&pb, &bp);
    qm_message *c = qm_message_new(qm_msg_exchange(m), qm_msg_routing_key(m), pb.data,
                                   (uint32_t)pb.len, m->body_len);
    if (m->body_len)
        memcpy(qm_msg_body(c), qm_msg_body(m), m->body_len);
    sl_buf_free(&hb);
    sl_buf_free(&pb);
    return c;
}

/* Move pos[0..n) (LOCKED, holder cleared or the link's: whole transactions, in sequence
 * order) to the dead-letter queues of the outgoing queue's vhost: transactional messages to
 * SYSTEM$;DEADXACT, the others to SYSTEM$;DEADLETTER. */
void link_dead_letter(link_outq *o, qm_position **pos, size_t n, uint32_t cls, const char *reason)
{
    link_mgr *m = o->m;
    qm_vhost *vh = o->q->vhost;
    qm_queue *dlx = qm_queue_find(vh, "sluice.system.xact-deadletter", 29);
    qm_queue *dl = qm_queue_find(vh, "sluice.system.deadletter", 24);
    link_need_node_id(m);
    size_t xact = 0;
    uint64_t xact_first = 0;
    if (m->store)
        persist_group(m->store, 1);
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        qm_position *p = pos[i];
        if (first)
            xact_first = p->lookup_id;
        qm_queue *to = p->xact ? dlx : dl;
        if (to) {
            qm_message *c = dl_copy(o, p, cls, reason, first, xact_first);
            qm_queue_enqueue(to, c);
            qm_message_unref(c);
        }
        xact += p->xact;
        first = !p->xact_cont; /* the next one starts a transaction */
        qm_pos_set_holder(p, NULL);
        qm_position_ack(p); /* p may be freed */
    }
    if (m->store)
        persist_group(m->store, 0);
    o->q->stat_dead_lettered += n;
    o->dead_lettered += n;
    o->last_dl_class = cls;
    o->last_dl_count = n;
    o->last_dl_time = wall_s();
    snprintf(o->last_dl_reason, sizeof o->last_dl_reason, "%s", reason);
    sl_warn("link %s: %zu message(s) dead-lettered (%zu to DEADXACT, %zu to DEADLETTER), %s: %s",
            o->name, n, xact, n - xact, link_nack_class_name(cls), reason);
}

/* ------------------------------------------------------------------------------------------
 * TimeToReachQueue. A message's age is bounded from its lookup id by samples of (the next
 * lookup id, the wall clock): a message whose id is below sample j's existed at sample j's
 * time, so it is at least as old as that; the first such sample gives its deadline (never
 * early, late by at most one sampling interval). The samples are durable (persist.h), so the
 * age survives restarts; those no pending message needs any more are dropped.
 */

static uint64_t sample_interval(const link_mgr *m)
{
    uint64_t iv = m->o.reach_queue_ms / 20;
    return iv < 100 ? 100 : iv > 60000 ? 60000 : iv;
}

/* Wall-clock ms when message `id` is past its time to reach queue; 0 = not known yet (it is
 * younger than the newest sample) or no limit. */
uint64_t link_reach_deadline(const link_mgr *m, uint64_t id)
{
    if (!m->o.reach_queue_ms)
        return 0;
    size_t lo = 0, hi = m->n_lt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->lt[mid].next_id <= id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->n_lt ? m->lt[lo].wall_ms + m->o.reach_queue_ms : 0;
}

/* Dead-letter what waited past its time to reach queue and is known never to have reached it:
 * ready messages above sent_hwm (never sent, or refused since). What was sent and lacks its
 * order ack may have arrived: the destination decides those (x-reach-deadline). */
size_t link_reach_sweep(link_outq *o, uint64_t wall)
{
    link_mgr *m = o->m;
    if (!m->o.reach_queue_ms || !o->q || !o->q->n_ready)
        return 0;
    size_t done = 0, cap = 0;
    qm_position **unit = NULL;
    char why[160];
    snprintf(why, sizeof why, "not delivered within its time to reach queue (%llu ms)",
             (unsigned long long)m->o.reach_queue_ms);
    while (done < 16384) {
        qm_position view;
        const qm_position *p = qm_queue_peek_after(o->q, o->sent_hwm, &view);
        if (!p)
            break;
        uint64_t id = p->lookup_id;
        if (p == &view)
            qm_message_unref(view.msg);
        uint64_t due = link_reach_deadline(m, id);
        if (!due || wall < due)
            break;
        /* the whole transaction: its messages follow in lookup order */
        size_t n = 0;
        qm_position *t = qm_queue_take(o->q, id);
        while (t) {
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                unit = sl_xrealloc(unit, cap * sizeof *unit);
            }
            unit[n++] = t;
            if (!t->xact_cont || !(p = qm_queue_peek_after(o->q, t->lookup_id, &view)))
                break;
            id = p->lookup_id;
            if (p == &view)
                qm_message_unref(view.msg);
            t = qm_queue_take(o->q, id);
        }
        if (!n)
            break;
        link_dead_letter(o, unit, n, CLASS_NACK_REACH_QUEUE_TIMEOUT, why);
        done += n;
    }
    sl_free(unit);
    return done;
}

/* Once per tick: a new sample when the interval has passed and ids moved; prune. */
void link_reach_sample(link_mgr *m)
{
    if (!m->o.reach_queue_ms || !m->all)
        return;
    uint64_t wall = sl_wall_ms(), next = m->node->next_lookup_id;
    if (m->n_lt && (wall - m->lt[m->n_lt - 1].wall_ms < sample_interval(m) ||
                    next <= m->lt[m->n_lt - 1].next_id))
        return;
    /* the oldest message any outgoing queue still holds: samples at or below it are no use */
    uint64_t oldest = UINT64_MAX;
    for (link_outq *o = m->all; o; o = o->next) {
        if (!o->q)
            continue;
        if (o->fl_len && link_fl_at(o, 0)->seq < oldest)
            oldest = link_fl_at(o, 0)->seq;
        uint64_t r = qm_queue_oldest_ready_id(o->q);
        if (r && r < oldest)
            oldest = r;
    }
    size_t keep = 0;
    while (keep < m->n_lt && m->lt[keep].next_id <= oldest)
        keep++;
    if (keep) {
        memmove(m->lt, m->lt + keep, (m->n_lt - keep) * sizeof *m->lt);
        m->n_lt -= keep;
    }
    if (m->n_lt >= 4096) {
        /* thin the older half: their messages' deadlines move later, never earlier */
        size_t half = m->n_lt / 2, w = 0;
        for (size_t i = 0; i < half; i += 2)
            m->lt[w++] = m->lt[i + 1];
        memmove(m->lt + w, m->lt + half, (m->n_lt - half) * sizeof *m->lt);
        m->n_lt = w + (m->n_lt - half);
        keep = 1;
    }
    if (keep && m->store)
        persist_ltime_keep(m->store, m->lt, m->n_lt);
    if (oldest == UINT64_MAX)
        return; /* nothing waits: no sample needed until something does */
    if (m->n_lt == m->cap_lt) {
        m->cap_lt = m->cap_lt ? m->cap_lt * 2 : 64;
        m->lt = sl_xrealloc(m->lt, m->cap_lt * sizeof *m->lt);
    }
    m->lt[m->n_lt++] = (persist_ltime){next, wall};
    if (m->store)
        persist_ltime_add(m->store, next, wall);
}
