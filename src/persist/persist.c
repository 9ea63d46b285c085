/* persist.c - the write side of durability: qm's persistence hooks turned into records, the
 * group commit, TIDY, and opening (recovery itself is in recover.c).
 *
 * What is durable: queues that are durable and not exclusive (and their subqueues),
 * durable exchanges, bindings whose both ends are durable, and persistent messages
 * (delivery-mode 2) in durable queues. Everything else never touches the disk.
 *
 * Segment references: a stored position holds one reference on the segment of its enqueue
 * record and one on the segment of its message record. Dependencies: a record that cancels or
 * changes what an older record set up (removal, delivery mark, move, purge, a transaction's
 * end, an enqueue that replaces an older one of the same position) is appended with the
 * segment of that older record (st_log_depend), and the store deletes an unreferenced segment
 * only once nothing is left between that segment and itself: so a removal, purge or move
 * record is never deleted before the records it cancels or continues, wherever the segments
 * are. Recovery (recover.c) finds the same dependencies again as it replays.
 */
#include "persist/persist_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/access.h"
#include "core/clock.h"
#include "core/le.h"
#include "core/log.h"
#include "core/mem.h"
#include "store/syncer.h"

/* ------------------------------------------------------------------------------------------
 * What is durable
 */

static const qm_queue *top_of(const qm_queue *q)
{
    return q->parent ? q->parent : q;
}

int persist_queue_durable(const qm_queue *q)
{
    const qm_queue *t = top_of(q);
    return t->durable && !t->exclusive;
}

static int exchange_durable(const qm_exchange *x)
{
    return x->durable && x->name[0] != 0;
}

static int binding_durable(const qm_binding *b)
{
    if (!exchange_durable(b->source))
        return 0;
    if (b->dest_queue)
        return persist_queue_durable(b->dest_queue) && !b->dest_queue->is_subqueue;
    return exchange_durable(b->dest_exchange);
}

/* ------------------------------------------------------------------------------------------
 * Appending
 */

/* A record appended to the open generation must be on disk before the replies that
 * depend on it. */
static void mark_sync(persist *p)
{
    p->need_sync = 1;
    p->gen_need = p->gen_open;
    p->sync_records++;
}

void persist_mark_sync(persist *p)
{
    mark_sync(p);
}

/* A record appended to the open generation must be written (not synced) before the
 * delivery it marks reaches a socket. */
static void mark_write(persist *p)
{
    p->need_write = 1;
    p->gen_wneed = p->gen_open;
    p->write_records++;
    /* Gated (a cluster leader), what waits for the write waits for the ISR too, and a group
     * is released only once it is on the leader's disk: the batch syncs, or the delivery
     * would wait for the next sync that something else asks for. */
    if (p->opt.repl_gate)
        p->need_sync = 1;
}

static void meta_append(persist *p, uint8_t type)
{
    st_log_append(p->meta, type, p->scratch.data, p->scratch.len, NULL);
    p->scratch.len = 0;
    p->meta_dirty = 1;
    mark_sync(p);
}

/* The access module's changes: one meta record each, on disk before the replies that depend
 * on them. */
static void acc_record(void *ctx, uint8_t type, const uint8_t *payload, size_t len)
{
    persist *p = ctx;
    st_log_append(p->meta, type, payload, len, NULL);
    p->meta_dirty = 1;
    mark_sync(p);
}

/* ---- runs ----
 *
 * A consumer's deliveries and its multiple acks name consecutive lookup ids of one queue, and
 * each used to be its own 33-byte record: two per message consumed, most of what a draining
 * node writes, each through the CRC and the append buffer. A run of them is held here and
 * appended as one R_DEQ_RUN / R_DELIVER_RUN record (records.h) at the latest when anything
 * else is appended (so the log's order is exactly that of the single records), when a
 * transaction group begins (a run is never part of one) and when a generation begins (so it
 * is in the generation that its delivery marks' write tickets name). A run of one is
 * written as the single record. */
static int append_raw(persist *p, uint8_t type, const st_iov *iov, int n, int needs_sync,
                      uint32_t dep, st_loc *loc)
{
    if (p->in_tx_group && type != R_MSG)
        type |= R_IN_TX;
    st_loc where;
    uint64_t seq = st_log_appendv(p->msgs, type, iov, n, &where);
    if (!seq)
        return -1;
    st_log_depend(p->msgs, where.segment, dep);
    if (needs_sync)
        mark_sync(p);
    p->records++;
    if (loc)
        *loc = where;
    return 0;
}

/* Little-endian into p (records.h's encoding), for the fixed-size records built here. */
static uint8_t *put_u64(uint8_t *p, uint64_t v)
{
    sl_put_le64(p, v);
    return p + 8;
}

void persist_run_flush(persist *p)
{
    if (!p->run.count)
        return;
    uint8_t b[20], *e = put_u64(put_u64(b, p->run.inc), p->run.first);
    uint8_t type = p->run.type;
    if (p->run.count > 1) {
        sl_put_le32(e, (uint32_t)p->run.count);
        e += 4;
        type = type == R_DEQ ? R_DEQ_RUN : R_DELIVER_RUN;
    }
    st_iov v = {b, (size_t)(e - b)};
    p->run.count = 0;
    append_raw(p, type, &v, 1, 0, p->run.dep, NULL);
}

/* An R_DEQ or R_DELIVER record (neither needs a sync) of lookup in incarnation inc, whose
 * enqueue record is in segment dep. */
static void run_add(persist *p, uint8_t type, uint64_t inc, uint64_t lookup, uint32_t dep)
{
    /* (Inside a transaction group no run is pending: see below.) */
    if (p->run.count && p->run.type == type && p->run.inc == inc &&
        lookup == p->run.first + p->run.count && p->run.count < R_RUN_MAX) {
        p->run.count++;
        if (dep && (!p->run.dep || dep < p->run.dep))
            p->run.dep = dep;
        return;
    }
    persist_run_flush(p);
    p->run.type = type;
    p->run.inc = inc;
    p->run.first = lookup;
    p->run.count = 1;
    p->run.dep = dep;
    if (p->in_tx_group)
        persist_run_flush(p); /* part of a transaction: a single record, marked as its */
}

/* Append the scratch record, followed by the extra pieces; 0 with *loc set, or -1 when the
 * log refused it (a record beyond ST_LOG_MAX_RECORD, or a failed log): then *loc is not
 * valid and the caller must not take it for a location. */
static int msgs_appendv_dep(persist *p, uint8_t type, const st_iov *extra, int n_extra,
                            int needs_sync, uint32_t dep, st_loc *loc)
{
    persist_run_flush(p); /* it came first */
    st_iov iov[3] = {{p->scratch.data, p->scratch.len}};
    for (int i = 0; i < n_extra && i < 2; i++)
        iov[1 + i] = extra[i];
    int rc = append_raw(p, type, iov, 1 + (n_extra < 2 ? n_extra : 2), needs_sync, dep, loc);
    p->scratch.len = 0;
    return rc;
}

static int msgs_appendv(persist *p, uint8_t type, const st_iov *extra, int n_extra, int needs_sync,
                        st_loc *loc)
{
    return msgs_appendv_dep(p, type, extra, n_extra, needs_sync, 0, loc);
}

static int msgs_append(persist *p, uint8_t type, int needs_sync, st_loc *loc)
{
    return msgs_appendv_dep(p, type, NULL, 0, needs_sync, 0, loc);
}

/* The same for a record that depends on records in segment dep (0: none). */
int persist_msgs_append_dep(persist *p, uint8_t type, int needs_sync, uint32_t dep, st_loc *loc)
{
    return msgs_appendv_dep(p, type, NULL, 0, needs_sync, dep, loc);
}

/* q holds a stored position whose enqueue record is in seg (see qm_queue.st_floor). */
void persist_queue_floor(qm_queue *q, uint32_t seg)
{
    if (!q->st_floor || seg < q->st_floor)
        q->st_floor = seg;
}

void persist_encode_queue(sl_buf *b, const qm_queue *q)
{
    rec_u64(b, q->incarnation);
    rec_u64(b, q->parent ? q->parent->incarnation : 0);
    rec_u8(b, (uint8_t)((q->durable ? QF_DURABLE : 0) | (q->auto_delete ? QF_AUTO_DELETE : 0)));
    rec_s16(b, q->vhost->name, strlen(q->vhost->name));
    /* subqueues are stored by their own part of the name ("q;sub" -> "sub") */
    const char *name = q->name;
    if (q->is_subqueue)
        name = strchr(q->name, ';') + 1;
    rec_s16(b, name, strlen(name));
    rec_b32(b, q->args.raw, q->args.raw_len);
}

void persist_encode_exchange(sl_buf *b, const qm_exchange *x)
{
    rec_u8(b, (uint8_t)x->type);
    rec_u8(b, (uint8_t)((x->durable ? QF_DURABLE : 0) | (x->auto_delete ? QF_AUTO_DELETE : 0) |
                        (x->internal ? QF_INTERNAL : 0)));
    rec_s16(b, x->vhost->name, strlen(x->vhost->name));
    rec_s16(b, x->name, strlen(x->name));
    rec_b32(b, x->args, x->args_len);
}

void persist_encode_binding(sl_buf *b, const qm_binding *bd)
{
    const char *vh = bd->source->vhost->name;
    const char *dest = bd->dest_queue ? bd->dest_queue->name : bd->dest_exchange->name;
    rec_u8(b, bd->dest_queue ? 0 : 1);
    rec_s16(b, vh, strlen(vh));
    rec_s16(b, bd->source->name, strlen(bd->source->name));
    rec_s16(b, dest, strlen(dest));
    rec_s16(b, bd->key, strlen(bd->key));
    rec_b32(b, bd->args, bd->args_len);
}

static void h_queue_created(void *ctx, qm_queue *q)
{
    persist *p = ctx;
    if (!persist_queue_durable(q))
        return;
    persist_encode_queue(&p->scratch, q);
    meta_append(p, M_QUEUE);
    q->st_def_gen = p->gen_need;
}

static void h_queue_destroyed(void *ctx, qm_queue *q)
{
    persist *p = ctx;
    if (!persist_queue_durable(q))
        return;
    rec_u64(&p->scratch, q->incarnation);
    meta_append(p, M_QUEUE_DEL);
}

static void h_exchange_created(void *ctx, qm_exchange *x)
{
    persist *p = ctx;
    if (!exchange_durable(x))
        return;
    persist_encode_exchange(&p->scratch, x);
    meta_append(p, M_EXCHANGE);
    x->st_def_gen = p->gen_need;
}

static void h_exchange_destroyed(void *ctx, qm_exchange *x)
{
    persist *p = ctx;
    if (!exchange_durable(x))
        return;
    rec_s16(&p->scratch, x->vhost->name, strlen(x->vhost->name));
    rec_s16(&p->scratch, x->name, strlen(x->name));
    meta_append(p, M_EXCHANGE_DEL);
}

static void h_bound(void *ctx, const qm_binding *b)
{
    persist *p = ctx;
    if (!binding_durable(b))
        return;
    persist_encode_binding(&p->scratch, b);
    meta_append(p, M_BIND);
}

static void h_unbound(void *ctx, const qm_binding *b)
{
    persist *p = ctx;
    if (!binding_durable(b))
        return;
    persist_encode_binding(&p->scratch, b);
    meta_append(p, M_UNBIND);
}

/* Store the message itself once, whatever the number of queues it went to. Paging out a
 * transient message stores it too, without waiting for the disk: a crash loses it anyway.
 * Properties and body go to the log as they lie (no copy through scratch). -1 when the log
 * refuses the record: the message is then not written and has no location. Where it went is
 * in *where; a message with store fields also keeps it (written once), a transient one
 * without them (no room for them: messages that never go to disk do not pay for them) is
 * written again by each queue that pages it out. */
typedef struct msg_loc {
    uint64_t id;
    uint32_t seg, off, len;
} msg_loc;

static int write_message(persist *p, qm_message *m, int needs_sync, msg_loc *where)
{
    if (m->st_written) {
        const qm_msg_store *st = qm_msg_st(m);
        *where = (msg_loc){st->st_id, st->st_seg, st->st_off, st->st_len};
        return 0;
    }
    uint64_t id = p->next_msg_id;
    rec_u64(&p->scratch, id);
    amqp_bytes ex = qm_msg_exchange(m), rk = qm_msg_routing_key(m);
    rec_s16(&p->scratch, ex.p, ex.len);
    rec_s16(&p->scratch, rk.p, rk.len);
    rec_u32(&p->scratch, m->props_len);
    uint64_t len = p->scratch.len + (uint64_t)m->props_len + m->body_len;
    st_iov rest[2] = {{qm_msg_props(m), m->props_len}, {qm_msg_body(m), (size_t)m->body_len}};
    st_loc loc;
    if (len >= ST_LOG_MAX_RECORD || msgs_appendv(p, R_MSG, rest, 2, needs_sync, &loc) < 0) {
        int e = errno;
        p->scratch.len = 0;
        sl_error("store: cannot store a message of %llu bytes: %s; it stays in memory only and "
                 "will not survive a restart",
                 (unsigned long long)m->body_len,
                 len >= ST_LOG_MAX_RECORD ? "larger than a store record (1 GiB)" : strerror(e));
        return -1;
    }
    p->next_msg_id++;
    *where = (msg_loc){id, loc.segment, (uint32_t)loc.offset, (uint32_t)len};
    if (m->has_store) {
        qm_msg_store *st = qm_msg_st(m);
        st->st_id = id;
        st->st_len = (uint32_t)len;
        st->st_seg = loc.segment;
        st->st_off = (uint32_t)loc.offset; /* a segment is at most 1 GiB */
        m->st_written = 1;
    }
    return 0;
}

uint64_t (*persist_wall_ms)(void) = sl_wall_ms;

/* The deadline of a position, as stored: wall-clock ms, or 0 for none. */
static uint64_t wall_deadline(persist *p, uint64_t expires_at)
{
    if (!expires_at)
        return 0;
    /* The deadline goes to disk on the wall clock: the monotonic one restarts at boot. */
    uint64_t now = qm_node_now(p->node);
    return persist_wall_ms() + (expires_at > now ? expires_at - now : 0);
}

/* An enqueue record's payload (records.h R_ENQ) into the scratch buffer. */
void persist_encode_enq(persist *p, uint64_t inc, uint64_t lookup, uint64_t msg_id,
                        uint32_t move_count, int redelivered, int xact_cont, int xact, int watch,
                        uint64_t expires_at, uint32_t dcount)
{
    rec_u64(&p->scratch, inc);
    rec_u64(&p->scratch, lookup);
    rec_u64(&p->scratch, msg_id);
    rec_u32(&p->scratch, move_count);
    uint8_t flags =
        (uint8_t)((redelivered ? EF_REDELIVERED : 0) | (xact_cont ? EF_XACT_CONT : 0) |
                  (xact ? EF_XACT : 0) | (dcount ? EF_DCOUNT : 0) | (watch ? EF_WATCH : 0));
    if (expires_at) {
        rec_u8(&p->scratch, flags | EF_EXPIRES);
        rec_u64(&p->scratch, wall_deadline(p, expires_at));
    } else {
        rec_u8(&p->scratch, flags);
    }
    if (dcount)
        rec_u32(&p->scratch, dcount);
}

uint32_t persist_dcount(const qm_queue *q, uint64_t lookup)
{
    return q->args.quorum ? qm_dcount_get(q, lookup) : 0;
}

int persist_enq_delivered(const qm_position *pos, int delivered)
{
    if (!pos->queue->args.quorum)
        return delivered;
    return delivered && pos->state != QM_POS_AVAILABLE;
}

/* Write pos' enqueue record (and its message's, once); pos stays unlogged when the log
 * refuses either. */
static void log_position(persist *p, qm_position *pos)
{
    qm_message *m = pos->msg;
    msg_loc ml;
    if (write_message(p, m, 1, &ml) < 0)
        return;
    persist_encode_enq(p, pos->queue->incarnation, pos->lookup_id, ml.id, pos->move_count,
                       persist_enq_delivered(pos, pos->redelivered), pos->xact_cont, pos->xact,
                       m->watch, qm_pos_expires(pos),
                       pos->redelivered ? persist_dcount(pos->queue, pos->lookup_id) : 0);
    st_loc loc;
    if (msgs_append(p, R_ENQ, 1, &loc) < 0)
        return; /* the log failed: the next commit says so and stops the broker */
    pos->st_seg = loc.segment;
    pos->st_logged = 1;
    pos->st_delivered = pos->redelivered;
    persist_queue_floor(pos->queue, pos->st_seg);
    st_log_ref(p->msgs, pos->st_seg);
    st_log_ref(p->msgs, ml.seg);
}

static void unlog_position(persist *p, qm_position *pos, int write_record)
{
    if (write_record && pos->queue) /* an ack may be lost in a crash: the message then comes
                                       back redelivered */
        run_add(p, R_DEQ, pos->queue->incarnation, pos->lookup_id, pos->st_seg);
    st_log_unref(p->msgs, pos->st_seg);
    st_log_unref(p->msgs, qm_msg_st(pos->msg)->st_seg);
    pos->st_logged = 0;
}

static void h_enqueued(void *ctx, qm_position *pos)
{
    persist *p = ctx;
    if (!pos->msg->persistent || !persist_queue_durable(pos->queue))
        return;
    log_position(p, pos);
}

/* The delivery mark (or, for no_ack, the removal) reaches the file before the delivery can
 * reach the socket (a write ticket: the broker holds the delivery until its generation is
 * written, without waiting for a sync of it): a node killed
 * right after a delivery then brings the message back redelivered, or not at all, never
 * as new. Only a crash of the machine itself can lose an unsynced mark. */
static void h_delivered(void *ctx, qm_position *pos, int no_ack)
{
    persist *p = ctx;
    /* A link handing a message to its destination needs no redelivered mark: what it has not
     * had acked is sent again on the same number anyway. */
    if (!pos->st_logged || (!no_ack && pos->queue->is_outgoing))
        return;
    if (no_ack) {
        unlog_position(p, pos, 1);
        mark_write(p);
        return;
    }
    uint32_t dcount = pos->redelivered ? persist_dcount(pos->queue, pos->lookup_id) : 0;
    if (dcount) {
        /* a quorum queue's redelivery: each one has its own count (quorum.c) */
        rec_u64(&p->scratch, pos->queue->incarnation);
        rec_u64(&p->scratch, pos->lookup_id);
        rec_u32(&p->scratch, dcount);
        msgs_appendv_dep(p, R_QDELIVER, NULL, 0, 0, pos->st_seg, NULL);
        pos->st_delivered = 1;
        mark_write(p);
        return;
    }
    if (!pos->st_delivered) {
        run_add(p, R_DELIVER, pos->queue->incarnation, pos->lookup_id, pos->st_seg);
        pos->st_delivered = 1;
        mark_write(p);
    }
}

static void h_released(void *ctx, qm_position *pos, int logged)
{
    unlog_position(ctx, pos, logged);
}

static void h_purged(void *ctx, qm_queue *q)
{
    persist *p = ctx;
    if (!persist_queue_durable(q))
        return;
    rec_u64(&p->scratch, q->incarnation);
    msgs_appendv_dep(p, R_PURGE, NULL, 0, 1, q->st_floor, NULL);
    q->st_floor = 0; /* none of its stored positions outlives this on disk */
}

static void h_moved(void *ctx, qm_position *pos, qm_queue *src, uint64_t old_expires_at)
{
    persist *p = ctx;
    int durable_dest = pos->msg->persistent && persist_queue_durable(pos->queue);
    if (pos->st_logged && durable_dest) {
        int ttl_changed = qm_pos_expires(pos) != old_expires_at;
        rec_u64(&p->scratch, src->incarnation);
        rec_u64(&p->scratch, pos->lookup_id);
        rec_u64(&p->scratch, pos->queue->incarnation);
        rec_u32(&p->scratch, pos->move_count);
        if (ttl_changed) {
            rec_u8(&p->scratch, qm_pos_expires(pos) ? EF_EXPIRES : 0);
            if (qm_pos_expires(pos))
                rec_u64(&p->scratch, wall_deadline(p, qm_pos_expires(pos)));
        }
        msgs_appendv_dep(p, ttl_changed ? R_MOVE_TTL : R_MOVE, NULL, 0, 1, pos->st_seg, NULL);
        persist_queue_floor(pos->queue, pos->st_seg);
    } else if (pos->st_logged) {
        /* Into a transient queue: it leaves the store as it leaves the durable queue. */
        rec_u64(&p->scratch, src->incarnation);
        rec_u64(&p->scratch, pos->lookup_id);
        msgs_appendv_dep(p, R_DEQ, NULL, 0, 1, pos->st_seg, NULL);
        st_log_unref(p->msgs, pos->st_seg);
        st_log_unref(p->msgs, qm_msg_st(pos->msg)->st_seg);
        pos->st_logged = 0;
    } else if (durable_dest) {
        log_position(p, pos);
    }
}

static void h_tx_group(void *ctx, int begin)
{
    persist *p = ctx;
    if (begin ? p->group_depth++ > 0 : --p->group_depth > 0)
        return;           /* nested: part of the outer group */
    persist_run_flush(p); /* before the group, not in it */
    if (begin) {
        p->in_tx_group = 1;
        p->group_seg =
            st_log_current_segment(p->msgs); /* the group's first record is here or later */
    } else {
        p->in_tx_group = 0;
        msgs_appendv_dep(p, R_TX_END, NULL, 0, 1, p->group_seg, NULL);
    }
}

/* ---- paging: ready messages beyond the memory budget live only in msgs/ ---- */

static int h_page_out(void *ctx, qm_position *pos, qm_paged *out)
{
    persist *p = ctx;
    qm_message *m = pos->msg;
    int durable = m->persistent && persist_queue_durable(pos->queue);
    msg_loc ml;
    if (durable && !pos->st_logged) {
        log_position(p, pos); /* message + enqueue records, synced with this turn */
        if (!pos->st_logged)
            return -1; /* refused by the log: it stays in memory */
    } else if (!durable && write_message(p, m, 0, &ml) < 0) {
        return -1; /* recovery would ignore it anyway: no enqueue record names it */
    }
    if (durable) {
        const qm_msg_store *st = qm_msg_st(m); /* a persistent message has them */
        ml = (msg_loc){st->st_id, st->st_seg, st->st_off, st->st_len};
    }
    out->lookup_id = pos->lookup_id;
    out->msg_off = ml.off;
    out->msg_seg = ml.seg;
    out->msg_len = ml.len;
    out->body_len = m->body_len;
    out->move_count = (uint16_t)(pos->move_count > 65535 ? 65535 : pos->move_count);
    out->redelivered = pos->redelivered;
    out->xact_cont = pos->xact_cont;
    out->xact = pos->xact;
    out->watch = m->watch;
    out->logged = (uint8_t)durable;
    out->priority = m->priority; /* its level in a priority queue */
    /* The entry takes over the position's references (or takes new ones for a transient
     * message: its record must outlive TIDY until it is read back). */
    if (durable) {
        out->enq_seg = pos->st_seg;
        pos->st_logged = 0;
    } else {
        out->enq_seg = ml.seg;
        st_log_ref(p->msgs, out->enq_seg);
        st_log_ref(p->msgs, ml.seg);
    }
    p->paged_out++;
    return 0;
}

static void release_entry(persist *p, qm_queue *q, const qm_paged *e, int write_record)
{
    if (e->logged && write_record) {
        rec_u64(&p->scratch, q->incarnation);
        rec_u64(&p->scratch, e->lookup_id);
        msgs_appendv_dep(p, R_DEQ, NULL, 0, 0, e->enq_seg, NULL);
    }
    st_log_unref(p->msgs, e->enq_seg);
    st_log_unref(p->msgs, e->msg_seg);
}

qm_message *persist_read_message(persist *p, uint32_t seg, uint64_t off, uint32_t len,
                                 const char *qname, uint64_t lookup)
{
    if (p->rbuf_cap < len || !p->rbuf) {
        sl_free(p->rbuf);
        p->rbuf_cap = len > 4096 ? len : 4096;
        p->rbuf = sl_xmalloc(p->rbuf_cap);
    }
    const uint8_t *buf;
    char err[256];
    st_loc loc = {seg, off};
    if (st_log_read_ref(p->msgs, loc, p->rbuf, len, &buf, err, sizeof err) < 0) {
        sl_error("store: cannot read back message %llu of queue '%s': %s",
                 (unsigned long long)lookup, qname, err);
        return NULL;
    }
    rec_reader r = {buf, buf + len, 0};
    uint64_t id = rd_u64(&r);
    amqp_bytes ex = rd_s16(&r), rk = rd_s16(&r), props = rd_b32(&r), body = rd_rest(&r);
    if (r.bad) {
        sl_error("store: the message record of message %llu of queue '%s' is malformed",
                 (unsigned long long)lookup, qname);
        return NULL;
    }
    qm_message *m = qm_message_new_stored(ex, rk, props.p, (uint32_t)props.len, body.len);
    if (body.len)
        memcpy(qm_msg_body(m), body.p, body.len);
    qm_msg_store *st = qm_msg_st(m);
    st->st_id = id;
    st->st_seg = seg;
    st->st_off = (uint32_t)off;
    st->st_len = len;
    m->st_written = 1;
    return m;
}

static qm_position *h_page_in(void *ctx, qm_queue *q, const qm_paged *e)
{
    persist *p = ctx;
    qm_message *m =
        persist_read_message(p, e->msg_seg, e->msg_off, e->msg_len, q->name, e->lookup_id);
    if (!m)
        return NULL;
    m->watch = e->watch;
    qm_position *pos = qm_queue_restore_position(q, m, e->lookup_id, e->move_count, e->redelivered);
    qm_message_unref(m); /* the position holds it */
    pos->xact_cont = e->xact_cont;
    pos->xact = e->xact;
    if (e->logged) {
        pos->st_logged = 1;
        pos->st_seg = e->enq_seg;
    } else {
        st_log_unref(p->msgs, e->enq_seg);
        st_log_unref(p->msgs, e->msg_seg);
    }
    p->paged_in++;
    return pos;
}

static qm_message *h_read_paged(void *ctx, qm_queue *q, const qm_paged *e)
{
    persist *p = ctx;
    qm_message *m =
        persist_read_message(p, e->msg_seg, e->msg_off, e->msg_len, q->name, e->lookup_id);
    if (m)
        m->watch = e->watch;
    return m;
}

static void h_paged_dropped(void *ctx, qm_queue *q, const qm_paged *e, int logged)
{
    release_entry(ctx, q, e, logged);
}

static const qm_persist_hooks hooks = {
    .queue_created = h_queue_created,
    .queue_destroyed = h_queue_destroyed,
    .exchange_created = h_exchange_created,
    .exchange_destroyed = h_exchange_destroyed,
    .bound = h_bound,
    .unbound = h_unbound,
    .enqueued = h_enqueued,
    .delivered = h_delivered,
    .released = h_released,
    .purged = h_purged,
    .moved = h_moved,
    .tx_group = h_tx_group,
    .page_out = h_page_out,
    .page_in = h_page_in,
    .paged_dropped = h_paged_dropped,
    .read_paged = h_read_paged,
    .stream_appended = persist_h_stream_appended,
    .stream_closing = persist_h_stream_closing,
    .stream_tracked = persist_h_stream_tracked,
    .stream_untracked = persist_h_stream_untracked,
};

/* ------------------------------------------------------------------------------------------
 * Commit, tidy, open, close
 */

/* Unsynced acks and delivery marks are written out once this much is buffered. */
#define FLUSH_THRESHOLD (1u << 20)

static void fail_msg(persist *p, char *err, size_t errlen)
{
    snprintf(err, errlen, "cannot write to the store in %s: %s", p->dir, strerror(errno));
}

/* The sync thread's job: definitions first (a message record may name a queue declared in
 * the same generation), then messages. Touches only the batches. The streams' writes come
 * first and their syncs last: their entries name no definition of this generation that
 * recovery would need (a stream's directory without its queue is only left over), and so
 * every write of the generation is made before the messages batch's ST_FOP_WRITTEN (or the
 * streams' own, without one), where a cluster's mirror ships the generation's group to the
 * followers while this node syncs it. */
static void run_batches(void *arg)
{
    persist *p = arg;
    persist_streams_write(p);
    if (p->fl_meta) {
        st_log_batch_run(p->fl_meta);
        if (st_log_batch_failed(p->fl_meta)) {
            if (p->fl_msgs) /* not run: it must not end as if written */
                st_log_batch_skip(p->fl_msgs, p->fl_meta);
            persist_streams_sync(p); /* the store fails either way */
            return;
        }
    }
    if (p->fl_meta && p->fl_msgs)
        st_fault_point("meta-synced"); /* a kill between the logs' batches (recover.c) */
    if (p->fl_msgs)
        st_log_batch_run(p->fl_msgs);
    else
        persist_streams_written(p);
    persist_streams_sync(p);
}

/* Begin the batches of the open generation. 1 when there is a batch to run, 0 when nothing
 * needs writing, -1 when the store is failed. */
static int stalled(const persist *p)
{
    return st_log_stalled(p->msgs) || st_log_stalled(p->meta) || p->streams_stalled;
}

int persist_stalled(const persist *p)
{
    return stalled(p);
}

static int begin_generation(persist *p, int force)
{
    persist_run_flush(p); /* its delivery marks' write tickets name the open generation */
    if (stalled(p)) {
        /* Out of space: try again, at most every STALL_RETRY_MS, with everything held. */
        if (sl_now_ms() < p->stall_retry_at)
            return 0;
        p->need_sync = 1;
        if (st_log_stalled(p->meta))
            p->meta_dirty = 1;
    }
    if (force && (st_log_pending(p->msgs) > 0 || st_log_pending(p->meta) > 0))
        p->need_sync = 1;
    int sync = p->need_sync;
    if (sync) /* streams' tracked references go with the entries appended so far */
        persist_streams_flush_tracking(p);
    if (!sync && !p->need_write && st_log_pending(p->msgs) < FLUSH_THRESHOLD)
        return 0;
    p->fl_meta = p->fl_msgs = NULL;
    /* The streams' pending entries go with a generation that syncs; a stream that cannot
     * write fails the store (nothing of the generation may be taken for durable). */
    if (sync && persist_streams_begin(p) < 0) {
        errno = EIO;
        return -1;
    }
    /* Definitions first: a message record may name a queue declared this turn. */
    if (sync && p->meta_dirty && st_log_batch_begin(p->meta, 1, &p->fl_meta) < 0) {
        persist_streams_fail(p);
        return -1;
    }
    if (st_log_batch_begin(p->msgs, sync, &p->fl_msgs) < 0) {
        persist_streams_fail(p);
        if (p->fl_meta) { /* keep the logs' state whole: end the meta batch unrun */
            st_log_batch_run(p->fl_meta);
            st_log_batch_end(p->meta, p->fl_meta);
            p->fl_meta = NULL;
        }
        return -1;
    }
    p->fl_sync = sync;
    p->gen_flight = p->gen_open++;
    p->need_write = 0;
    if (sync) {
        p->need_sync = 0;
        p->meta_dirty = 0;
    }
    return p->fl_meta || p->fl_msgs || p->n_fl_st ? 1 : 2;
}

#define STALL_RETRY_MS 200

/* End the batches in flight (after run_batches returned). 0, -1 (failed), or -2: out of
 * space, nothing lost, the generation's waiters wait for a later one. */
static int end_generation(persist *p)
{
    int rc = 0;
    if (p->fl_meta && st_log_batch_end(p->meta, p->fl_meta) < 0)
        rc = -1;
    if (p->fl_msgs && st_log_batch_end(p->msgs, p->fl_msgs) < 0)
        rc = -1;
    p->fl_meta = p->fl_msgs = NULL;
    int src = persist_streams_end(p);
    if (src == -1) /* a stream's write failed: the store is failed */
        return -1;
    if (src == -2 && rc == 0)
        rc = -1; /* a stream out of space: stalled as a log would be */
    if (rc < 0 && stalled(p) && !st_log_failed(p->msgs) && !st_log_failed(p->meta)) {
        p->stall_retry_at = sl_now_ms() + STALL_RETRY_MS;
        p->need_sync = 1; /* what it held still has to reach the disk */
        p->gen_flight = 0;
        errno = ENOSPC;
        return -2;
    }
    if (rc == 0)
        p->stall_retry_at = 0;
    if (rc == 0)
        p->gen_written = p->gen_flight;
    if (rc == 0 && p->fl_sync) {
        p->gen_durable = p->gen_flight;
        p->gen_unsynced = 0; /* the sync covered every byte written before it (log.c) */
        p->commits++;
    }
    if (rc == 0 && p->opt.batch_hook) /* its file operations become a group (the mirror) */
        p->opt.batch_hook(p->opt.batch_ctx, p->gen_flight, p->fl_sync);
    p->gen_flight = 0;
    return rc;
}

/* Finish a batch in flight, waiting for it. */
static int drain(persist *p)
{
    if (!p->gen_flight)
        return 0;
    if (p->syncer)
        st_syncer_wait(p->syncer);
    return end_generation(p);
}

int persist_commit(persist *p, char *err, size_t errlen)
{
    return persist_commit_ex(p, 0, err, errlen);
}

int persist_commit_ex(persist *p, int force, char *err, size_t errlen)
{
    int rc = drain(p);
    if (rc < 0)
        goto fail;
    int r = begin_generation(p, force || p->force_pending);
    if (r < 0) {
        rc = -1;
        goto fail;
    }
    if (r == 0)
        return 0;
    p->force_pending = 0;
    run_batches(p);
    rc = end_generation(p);
    if (rc < 0)
        goto fail;
    return 0;
fail:
    fail_msg(p, err, errlen);
    return rc;
}

/* The most a write-only batch may hold to be written on the loop thread (persist_kick). */
#define INLINE_WRITE_MAX (64u * 1024)

/* Only a sync that would cover less than this (message-log bytes appended since the last
 * sync started) is paced: pacing is for syncs too small to be worth their cost, and a
 * pipelining publisher with a fixed window of unconfirmed messages must not be slowed to
 * window / sync_pace_us when it fills that much faster (1 KiB messages at 600k/s, window
 * 1000: 330k/s with a 1 MiB bound, bench conf1_1kraw). */
#define PACE_MAX_BYTES (64u * 1024)

/* 1 when the sync the open generation needs should wait (until p->pace_due_us): only
 * pipelined confirms wait for it (no ticket of any other kind was taken for it), the last
 * sync started less than sync_pace_us ago, less than PACE_MAX_BYTES came since, and nothing
 * else asks for the disk now (definitions, TIDY, a full disk). A publisher that waits for each
 * confirm is never paced: its channel does not pipeline, so its tickets are eager. The forced sync
 * (acks and delivery marks, about once a second) is paced like the rest: it only makes the
 * generation sync records that did not need it, and it waits at most sync_pace_us. */
static int sync_paced(persist *p)
{
    p->pace_due_us = 0;
    if (!p->opt.sync_pace_us || !p->need_sync || p->meta_dirty || p->tidy || stalled(p) ||
        p->eager_gen >= p->gen_need ||
        st_log_bytes_appended(p->msgs) - p->last_sync_bytes >= PACE_MAX_BYTES)
        return 0;
    uint64_t due = p->last_sync_us + p->opt.sync_pace_us;
    if (sl_now_us() >= due)
        return 0;
    p->pace_due_us = due;
    return 1;
}

int persist_kick(persist *p, int force, char *err, size_t errlen)
{
    if (force)
        p->force_pending = 1;
    if (!p->syncer)
        return persist_commit_ex(p, 0, err, errlen);
    if (p->gen_flight)
        return 0; /* the next batch takes what accumulates meanwhile (group commit) */
    int r;
    if (sync_paced(p)) {
        /* The writes go now (delivery marks wait for them), the sync later: the generation
         * still needs the disk, so a later kick syncs it. */
        p->need_sync = 0;
        r = begin_generation(p, 0); /* a forced sync waits with it (force_pending stays) */
        p->need_sync = 1;
    } else {
        r = begin_generation(p, p->force_pending);
        if (r > 0 && p->fl_sync) {
            p->last_sync_us = sl_now_us();
            p->last_sync_bytes = st_log_bytes_appended(p->msgs);
        }
    }
    if (r < 0) {
        fail_msg(p, err, errlen);
        return -1;
    }
    if (r == 0)
        return 0;
    if (p->fl_sync) /* a paced batch only wrote: the force is still owed */
        p->force_pending = 0;
    else if (!p->gen_unsynced && p->gen_need == p->gen_flight && p->gen_need > p->gen_durable)
        /* a paced batch writes records that need the disk (its delivery marks must not wait
         * for the pace): written is not durable, so persist_done stops below it */
        p->gen_unsynced = p->gen_flight;
    if (r == 2) { /* nothing to write after all: the generation ends at once */
        int rc = end_generation(p);
        if (rc < 0)
            fail_msg(p, err, errlen);
        return rc;
    }
    if (!p->fl_meta && !p->n_fl_st && st_log_batch_light(p->fl_msgs, INLINE_WRITE_MAX)) {
        /* Only a small write for the page cache (a turn's delivery marks and acks, with no
         * sync): written here, since waking the sync thread and being woken back by it
         * cost more than the write (about 4% of the loop in a 1 KiB drain, perf). */
        run_batches(p);
        int rc = end_generation(p);
        if (rc < 0) {
            fail_msg(p, err, errlen);
            return rc;
        }
        return 1;
    }
    st_syncer_post(p->syncer, run_batches, p);
    return 0;
}

int persist_sync_fd(const persist *p)
{
    return p->syncer ? st_syncer_fd(p->syncer) : -1;
}

int persist_sync_done(persist *p, char *err, size_t errlen)
{
    if (!p->syncer || !p->gen_flight || !st_syncer_take_done(p->syncer))
        return 0;
    int rc = end_generation(p);
    if (rc < 0)
        fail_msg(p, err, errlen);
    return rc;
}

int persist_sync_busy(const persist *p)
{
    return p->gen_flight != 0;
}

uint64_t persist_ticket(persist *p)
{
    if (p->gen_need > p->eager_gen)
        p->eager_gen = p->gen_need;
    return p->gen_need;
}

uint64_t persist_mark(const persist *p)
{
    return p->sync_records;
}

uint64_t persist_ticket_since(persist *p, uint64_t mark)
{
    return p->sync_records != mark ? persist_ticket(p) : 0;
}

uint64_t persist_ticket_since_lazy(const persist *p, uint64_t mark)
{
    return p->sync_records != mark ? p->gen_need : 0;
}

void persist_hasten(persist *p, uint64_t gen)
{
    if (gen > p->eager_gen)
        p->eager_gen = gen > p->gen_need ? p->gen_need : gen;
}

uint64_t persist_pace_due(const persist *p)
{
    return p->pace_due_us;
}

uint64_t persist_durable(const persist *p)
{
    if (p->opt.repl_gate && p->gen_released < p->gen_durable)
        return p->gen_released;
    return p->gen_durable;
}

uint64_t persist_local_durable(const persist *p)
{
    return p->gen_durable;
}

void persist_repl_release(persist *p, uint64_t gen)
{
    if (gen > p->gen_released) {
        p->gen_released = gen;
        persist_streams_release(p, gen);
    }
}

uint64_t persist_repl_released(const persist *p)
{
    return p->gen_released;
}

uint64_t persist_wmark(const persist *p)
{
    return p->write_records;
}

uint64_t persist_write_ticket(const persist *p)
{
    return p->gen_wneed;
}

uint64_t persist_written(const persist *p)
{
    return p->gen_written;
}

uint64_t persist_done(const persist *p)
{
    /* One number answers both kinds of ticket: a write ticket (a delivery mark) needs its
     * generation written, a sync ticket (a confirm) needs it synced. Only a paced batch
     * writes a generation holding records that need the disk without syncing it, so done
     * stops below the oldest such generation until a sync covers it. */
    uint64_t done = p->gen_written;
    if (p->gen_unsynced && done >= p->gen_unsynced)
        done = p->gen_unsynced - 1;
    /* Gated, a written generation waits for the ISR like a durable one: its delivery marks
     * and acks must not be lost by a failover either. */
    if (p->opt.repl_gate && p->gen_released < done)
        return p->gen_released;
    return done;
}

/* A receiver's state record in an old segment would keep that segment (and every segment
 * that depends on it) forever, or be lost with it: re-append the ones that are not in the
 * segment being written, so the old copies become dead (TIDY, tidy.c). */
void persist_refresh_eod_in(persist *p)
{
    uint32_t cur = st_log_current_segment(p->msgs);
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (p->eod_in && sl_map_next(p->eod_in, &it, &k, &kl, &v)) {
        persist_eod_in *e = v;
        if (e->logged && e->seg == cur)
            continue;
        persist_encode_eod_in(&p->scratch, e);
        st_loc loc;
        if (msgs_append(p, R_EOD_IN, 1, &loc) < 0)
            continue; /* the log is failed: the commit that follows says so */
        st_log_ref(p->msgs, loc.segment);
        if (e->logged)
            st_log_unref(p->msgs, e->seg);
        e->seg = loc.segment;
        e->logged = 1;
    }
}

/* TIDY's compaction (tidy.c): store m again under a new message id (its positions then name
 * that one), moving the references of the one position that holds it. 0, or -1 when the log
 * refused the record (m is then unchanged). */
int persist_rewrite_message(persist *p, qm_message *m)
{
    if (!m->has_store || !m->st_written)
        return -1;
    qm_msg_store *st = qm_msg_st(m);
    qm_msg_store old = *st;
    msg_loc ml;
    m->st_written = 0;
    if (write_message(p, m, 1, &ml) < 0) {
        *st = old;
        m->st_written = 1;
        return -1;
    }
    st_log_ref(p->msgs, st->st_seg);
    st_log_unref(p->msgs, old.st_seg);
    return 0;
}

void persist_get_stats(const persist *p, persist_stats *out)
{
    memset(out, 0, sizeof *out);
    out->recovered_queues = p->recovered_queues;
    out->recovered_messages = p->recovered_messages;
    out->recovery_ms = p->recovery_ms;
    st_log_stats ls;
    st_log_get_stats(p->msgs, &ls);
    out->msgs_segments = ls.segments;
    out->msgs_bytes = ls.bytes;
    out->commits = p->commits;
    out->records = p->records;
}

uint64_t persist_segments_released(const persist *p)
{
    return p->msgs ? st_log_released(p->msgs) : 0;
}

uint64_t persist_bytes_appended(const persist *p)
{
    return (p->msgs ? st_log_bytes_appended(p->msgs) : 0) +
           (p->meta ? st_log_bytes_appended(p->meta) : 0) + p->stream_bytes;
}

static int mkdir_p(const char *path)
{
    if (mkdir(path, 0750) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Node-to-node links: identity, online flag, outgoing queues' state, EOD receive state
 */

const uint8_t *persist_node_id(persist *p)
{
    if (!p->have_node_id) {
        if (getrandom(p->node_id, sizeof p->node_id, 0) != (ssize_t)sizeof p->node_id) {
            uint64_t a = sl_now_ms() ^ ((uint64_t)getpid() << 32), b = (uint64_t)(uintptr_t)p;
            memcpy(p->node_id, &a, 8);
            memcpy(p->node_id + 8, &b, 8);
        }
        p->have_node_id = 1;
        sl_buf_append(&p->scratch, p->node_id, 16);
        meta_append(p, M_NODE_ID);
    }
    return p->node_id;
}

int persist_online(const persist *p)
{
    return p->online;
}

void persist_set_online(persist *p, int online)
{
    if (p->online == online)
        return;
    p->online = online;
    rec_u8(&p->scratch, (uint8_t)online);
    meta_append(p, M_ONLINE);
}

void persist_outq_get(const persist *p, uint64_t incarnation, uint8_t *flags, uint8_t *foreign)
{
    uintptr_t v = (uintptr_t)sl_map_get(p->outq, &incarnation, 8);
    *flags = (uint8_t)(v & 0xff);
    *foreign = (uint8_t)((v >> 8) & 0xff);
}

void persist_outq_set(persist *p, uint64_t incarnation, uint8_t flags, uint8_t foreign)
{
    uintptr_t v = (uintptr_t)flags | (uintptr_t)foreign << 8 | (uintptr_t)1 << 16;
    if ((uintptr_t)sl_map_get(p->outq, &incarnation, 8) == v)
        return;
    sl_map_put(p->outq, &incarnation, 8, (void *)v);
    rec_u64(&p->scratch, incarnation);
    rec_u8(&p->scratch, flags);
    rec_u8(&p->scratch, foreign);
    meta_append(p, M_OUTQ);
}

#define LOOKUP_RESERVE (1u << 20)

void persist_reserve_lookup(persist *p, uint64_t id)
{
    if (id < p->lookup_hwm)
        return;
    p->lookup_hwm = id + LOOKUP_RESERVE;
    rec_u64(&p->scratch, p->lookup_hwm);
    meta_append(p, M_LOOKUP_HWM);
}

static void ltime_push(persist *p, uint64_t next_id, uint64_t wall_ms)
{
    if (p->n_ltimes == p->cap_ltimes) {
        p->cap_ltimes = p->cap_ltimes ? p->cap_ltimes * 2 : 64;
        p->ltimes = sl_xrealloc(p->ltimes, p->cap_ltimes * sizeof *p->ltimes);
    }
    p->ltimes[p->n_ltimes++] = (persist_ltime){next_id, wall_ms};
}

void persist_ltime_restore(persist *p, uint64_t next_id, uint64_t wall_ms)
{
    if (p->n_ltimes && p->ltimes[p->n_ltimes - 1].next_id >= next_id)
        return; /* out of order (cannot happen): keep the list increasing */
    ltime_push(p, next_id, wall_ms);
}

void persist_ltime_add(persist *p, uint64_t next_id, uint64_t wall_ms)
{
    ltime_push(p, next_id, wall_ms);
    rec_u64(&p->scratch, next_id);
    rec_u64(&p->scratch, wall_ms);
    meta_append(p, M_LOOKUP_TIME);
}

void persist_ltime_keep(persist *p, const persist_ltime *v, size_t n)
{
    if (n > p->cap_ltimes) {
        p->cap_ltimes = n;
        p->ltimes = sl_xrealloc(p->ltimes, n * sizeof *p->ltimes);
    }
    if (n)
        memmove(p->ltimes, v, n * sizeof *v);
    p->n_ltimes = n;
}

const persist_ltime *persist_ltimes(const persist *p, size_t *n)
{
    *n = p->n_ltimes;
    return p->ltimes;
}

uint64_t persist_outq_sent_get(const persist *p, uint64_t incarnation)
{
    return (uint64_t)(uintptr_t)sl_map_get(p->outq_sent, &incarnation, 8);
}

void persist_outq_sent_set(persist *p, uint64_t incarnation, uint64_t sent)
{
    sl_map_put(p->outq_sent, &incarnation, 8, (void *)(uintptr_t)sent);
    rec_u64(&p->scratch, incarnation);
    rec_u64(&p->scratch, sent);
    meta_append(p, M_OUTQ_SENT);
}

void persist_group(persist *p, int begin)
{
    h_tx_group(p, begin);
}

/* Keys: sender[16] + seq_id[8] (eod_seq), then + the destination's bytes (eod_in). */
#define EOD_KEY_MAX (24 + 600)
static size_t eod_key(uint8_t key[EOD_KEY_MAX], const uint8_t sender[16], uint64_t seq_id,
                      const char *dest, size_t dlen)
{
    memcpy(key, sender, 16);
    memcpy(key + 16, &seq_id, 8);
    if (dlen > EOD_KEY_MAX - 24)
        dlen = EOD_KEY_MAX - 24; /* dest is at most "vhost/queue", 255 + 1 + 255 bytes */
    if (dlen)
        memcpy(key + 24, dest, dlen);
    return 24 + dlen;
}

persist_eod_in *persist_eod_in_get(persist *p, const uint8_t sender[16], uint64_t seq_id,
                                   const char *dest)
{
    uint8_t key[EOD_KEY_MAX];
    size_t kl = eod_key(key, sender, seq_id, dest, dest ? strlen(dest) : 0);
    return sl_map_get(p->eod_in, key, kl);
}

persist_eod_in *persist_eod_in_other(persist *p, const uint8_t sender[16], uint64_t seq_id,
                                     const char *dest)
{
    uint8_t key[EOD_KEY_MAX];
    size_t kl = eod_key(key, sender, seq_id, NULL, 0);
    persist_eod_in *e = sl_map_get(p->eod_seq, key, kl);
    return e && strcmp(e->dest, dest ? dest : "") ? e : NULL;
}

static persist_eod_in *eod_in_slot(persist *p, const uint8_t sender[16], uint64_t seq_id,
                                   const char *dest, size_t dlen)
{
    uint8_t key[EOD_KEY_MAX];
    size_t kl = eod_key(key, sender, seq_id, dest, dlen);
    persist_eod_in *e = sl_map_get(p->eod_in, key, kl);
    if (!e) {
        e = sl_xcalloc(1, sizeof *e);
        memcpy(e->sender, sender, 16);
        e->seq_id = seq_id;
        e->dest = sl_xstrndup(dest ? dest : "", kl - 24);
        sl_map_put(p->eod_in, key, kl, e);
        /* the first queue a sequence fed owns it (a state without a queue owns nothing:
         * only data directories of earlier versions may hold one) */
        if (kl > 24 && !sl_map_get(p->eod_seq, key, 24))
            sl_map_put(p->eod_seq, key, 24, e);
    }
    return e;
}

void persist_encode_eod_in(sl_buf *b, const persist_eod_in *e)
{
    sl_buf_append(b, e->sender, 16);
    rec_u64(b, e->seq_id);
    rec_u64(b, e->seq_no);
    rec_u64(b, e->access_ms);
    rec_u32(b, e->rejects);
    rec_s16(b, e->sender_name ? e->sender_name : "", e->sender_name ? strlen(e->sender_name) : 0);
    rec_s16(b, e->dest ? e->dest : "", e->dest ? strlen(e->dest) : 0);
}

static void set_str_if(char **dst, const char *s, size_t n)
{
    if (*dst && strlen(*dst) == n && !memcmp(*dst, s, n))
        return;
    sl_free(*dst);
    *dst = sl_xstrndup(s, n);
}

void persist_eod_in_set(persist *p, const uint8_t sender[16], uint64_t seq_id, uint64_t seq_no,
                        uint32_t rejects, const char *sender_name, const char *dest)
{
    persist_eod_in *e = eod_in_slot(p, sender, seq_id, dest, dest ? strlen(dest) : 0);
    e->seq_no = seq_no;
    e->rejects = rejects;
    e->access_ms = persist_wall_ms();
    if (sender_name)
        set_str_if(&e->sender_name, sender_name, strlen(sender_name));
    persist_encode_eod_in(&p->scratch, e);
    st_loc loc;
    if (msgs_append(p, R_EOD_IN, 1, &loc) < 0)
        return; /* the log is failed: the commit that follows stops the broker */
    st_log_ref(p->msgs, loc.segment);
    if (e->logged)
        st_log_unref(p->msgs, e->seg);
    e->seg = loc.segment;
    e->logged = 1;
}

void persist_eod_in_restore(persist *p, const uint8_t sender[16], uint64_t seq_id, uint64_t seq_no,
                            uint64_t access_ms, uint32_t rejects, amqp_bytes sender_name,
                            amqp_bytes dest, uint32_t seg)
{
    persist_eod_in *e = eod_in_slot(p, sender, seq_id, (const char *)dest.p, dest.len);
    e->seq_no = seq_no;
    e->access_ms = access_ms;
    e->rejects = rejects;
    set_str_if(&e->sender_name, (const char *)sender_name.p, sender_name.len);
    e->seg = seg; /* referenced once recovery is over (persist_open) */
    e->logged = 1;
}

persist_eod_in **persist_eod_in_all(persist *p, size_t *n)
{
    sl_free(p->eod_list);
    size_t cap = sl_map_count(p->eod_in), i = 0, it = 0, kl;
    p->eod_list = sl_xmalloc((cap ? cap : 1) * sizeof *p->eod_list);
    const char *k;
    void *v;
    while (i < cap && sl_map_next(p->eod_in, &it, &k, &kl, &v))
        p->eod_list[i++] = v;
    *n = i;
    return p->eod_list;
}

void persist_eod_in_free_all(persist *p)
{
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (p->eod_in && sl_map_next(p->eod_in, &it, &k, &kl, &v)) {
        persist_eod_in *e = v;
        sl_free(e->sender_name);
        sl_free(e->dest);
        sl_free(e);
    }
    sl_map_free(p->eod_in);
    p->eod_in = NULL;
    sl_map_free(p->eod_seq);
    p->eod_seq = NULL;
    sl_free(p->eod_list);
    p->eod_list = NULL;
}

persist *persist_open(const char *data_dir, qm_node *node, const persist_options *opt, char *err,
                      size_t errlen)
{
    persist *p = sl_xcalloc(1, sizeof *p);
    p->node = node;
    p->dir = sl_xstrdup(data_dir);
    p->next_msg_id = 1;
    p->online = 1;
    p->outq = sl_map_new();
    p->outq_sent = sl_map_new();
    p->eod_in = sl_map_new();
    p->eod_seq = sl_map_new();
    p->gen_open = 1;
    sl_buf_init(&p->scratch);
    if (opt)
        p->opt = *opt;
    if (!p->opt.read_only && mkdir_p(data_dir) < 0) {
        snprintf(err, errlen, "cannot create %s: %s", data_dir, strerror(errno));
        persist_close(p);
        return NULL;
    }
    /* stream queues keep their logs here (qm/stream.c), opened as they are recovered */
    if (!node->stream_dir) {
        char sd[4096];
        snprintf(sd, sizeof sd, "%s/streams", data_dir);
        node->stream_dir = sl_xstrdup(sd);
        if (!p->opt.read_only)
            mkdir(sd, 0755);
    }
    /* In a cluster the streams' files are mirrored like the logs' (store/stream.c reports
     * them to the mirror's observer; its batches run in the generation's group): streams are
     * declared there as on a single node. */
    uint64_t t0 = sl_now_ms();
    if (persist_recover(p, err, errlen) < 0) {
        persist_close(p);
        return NULL;
    }
    p->recovery_ms = sl_now_ms() - t0;
    if (p->opt.read_only)
        return p;
    /* Receiver states keep the segments of their newest records. */
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (sl_map_next(p->eod_in, &it, &k, &kl, &v))
        st_log_ref(p->msgs, ((persist_eod_in *)v)->seg);
    persist_streams_ref_tracking(p); /* and streams' tracked references theirs */
    if (p->opt.sync_thread) {
        p->syncer = st_syncer_new();
        if (!p->syncer) {
            snprintf(err, errlen, "cannot start the sync thread: %s", strerror(errno));
            persist_close(p);
            return NULL;
        }
    }
    qm_set_persist(&hooks, p);
    if (p->opt.acc)
        acc_set_persist(p->opt.acc, acc_record, p);
    /* What recovery wrote (torn tails cut, the definitions snapshot, a transaction closed) is
     * on disk now: the mirror's first group. */
    if (p->opt.batch_hook)
        p->opt.batch_hook(p->opt.batch_ctx, 0, 1);
    sl_info("store: recovered %llu durable queue(s) and %llu message(s) from %s in %llu ms",
            (unsigned long long)p->recovered_queues, (unsigned long long)p->recovered_messages,
            data_dir, (unsigned long long)p->recovery_ms);
    return p;
}

void persist_close(persist *p)
{
    if (!p)
        return;
    if (!p->opt.read_only) {
        qm_set_persist(NULL, NULL);
        if (p->opt.acc)
            acc_set_persist(p->opt.acc, NULL, NULL);
    }
    if (p->msgs && p->meta && !p->opt.read_only) {
        char err[256];
        /* A clean stop keeps even the acks that had not needed the disk yet. */
        if (persist_commit_ex(p, 1, err, sizeof err) < 0)
            sl_error("store: %s", err);
    }
    persist_tidy_free(p);
    st_syncer_free(p->syncer);
    persist_streams_free(p);
    if (p->msgs)
        st_log_close(p->msgs);
    if (p->meta)
        st_log_close(p->meta);
    sl_buf_free(&p->scratch);
    sl_free(p->rbuf);
    persist_eod_in_free_all(p);
    sl_map_free(p->outq);
    sl_map_free(p->outq_sent);
    sl_free(p->ltimes);
    sl_free(p->dir);
    sl_free(p);
}
