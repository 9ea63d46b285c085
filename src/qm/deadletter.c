/* deadletter.c - dead-lettering, as RabbitMQ does it (reference/amqp/NOTES.md section 6).
 *
 * A dead-lettered message is a new message: same body and properties, except that the
 * per-message expiration is removed (kept as original-expiration in the x-death entry) and
 * the headers gain x-death (array of tables, newest first, one per (queue, reason), with
 * count, reason, queue, time, exchange, routing-keys) and, on the first death, the
 * x-first-death-reason/-queue/-exchange headers. It is routed through the queue's DLX with
 * x-dead-letter-routing-key or its original routing key; no DLX exchange means it is dropped.
 * Without x-dead-letter-routing-key it goes with its CC keys too (RabbitMQ: the message's
 * routing keys); with one, only with that key, and its CC header is removed (RabbitMQ 3.10).
 * BCC keys are gone by then: they never reach the stored message.
 *
 * Cycles: exactly RabbitMQ's rule (rabbit_dead_letter:is_cycle). For a target queue T, look
 * at the new x-death list up to the first entry for T; if there is one and none of those
 * entries has reason "rejected", the message would go round without a client deciding so:
 * it is not delivered to T. Rejections are never cycles. (So an expired message whose DLX
 * routes back to the same queue is dropped at once, as in RabbitMQ.)
 */
#include <string.h>

#include "amqp/method.h"
#include "amqp/table.h"
#include "qm/qm_internal.h"

/* Dead-lettering can chain (drop-head in the target dead-letters its oldest message...);
 * the cycle rule bounds it, this depth guard makes sure of it. One thread owns qm. */
static int dl_depth;
#define DL_MAX_DEPTH 16

static const char *reason_name(qm_delete_reason r)
{
    switch (r) {
    case QM_DEL_REJECTED:
        return "rejected";
    case QM_DEL_EXPIRED:
        return "expired";
    case QM_DEL_DELIVERY_LIMIT:
        return "delivery_limit";
    default:
        return "maxlen";
    }
}

static int str_is(const amqp_value *v, amqp_bytes s)
{
    amqp_bytes x;
    return amqp_value_str(v, &x) && amqp_bytes_equal(x, s);
}

/* Copy x-death entry `e` (table content) with its count replaced by count. */
static void put_entry_with_count(sl_buf *b, amqp_bytes e, int64_t count)
{
    size_t mark = amqp_arr_put_table_begin(b);
    amqp_table_iter it;
    amqp_bytes k;
    amqp_value v;
    amqp_tbl_put_long(b, "count", count);
    amqp_table_iter_init(&it, e);
    while (amqp_table_next(&it, &k, &v))
        if (!amqp_bytes_eq(k, "count"))
            amqp_tbl_put_value(b, k, &v);
    amqp_tbl_end(b, mark);
}

static void build_headers(sl_buf *b, qm_queue *q, qm_message *m, const amqp_basic_props *bp,
                          const char *reason)
{
    amqp_bytes headers = (bp->flags & AMQP_P_HEADERS) ? bp->headers : (amqp_bytes){0};
    amqp_bytes qn = amqp_cstr(q->name), rs = amqp_cstr(reason);
    amqp_table_iter it;
    amqp_bytes k;
    amqp_value v, deaths = {0};
    int has_deaths = 0, has_first = 0;

    size_t mark = amqp_tbl_begin(b);
    amqp_table_iter_init(&it, headers);
    while (amqp_table_next(&it, &k, &v)) {
        if (amqp_bytes_eq(k, "x-death")) {
            if (v.tag == 'A') {
                deaths = v;
                has_deaths = 1;
            }
            continue;
        }
        if (amqp_bytes_eq(k, "x-first-death-reason"))
            has_first = 1;
        if (q->args.dlrk && amqp_bytes_eq(k, "CC"))
            continue; /* re-routed with x-dead-letter-routing-key alone */
        amqp_tbl_put_value(b, k, &v);
    }
    if (!has_first) {
        amqp_tbl_put_str(b, "x-first-death-reason", rs);
        amqp_tbl_put_str(b, "x-first-death-queue", qn);
        amqp_tbl_put_str(b, "x-first-death-exchange", qm_msg_exchange(m));
    }

    /* find the entry for (this queue, this reason) */
    amqp_bytes found = {0};
    int has_found = 0;
    int64_t count = 0;
    if (has_deaths) {
        amqp_array_iter_init(&it, deaths.v.s);
        while (!has_found && amqp_array_next(&it, &v)) {
            amqp_value a, c;
            if (v.tag == 'F' && amqp_table_get(v.v.s, "queue", &a) && str_is(&a, qn) &&
                amqp_table_get(v.v.s, "reason", &a) && str_is(&a, rs)) {
                found = v.v.s;
                has_found = 1;
                if (amqp_table_get(v.v.s, "count", &c))
                    amqp_value_int(&c, &count);
            }
        }
    }

    size_t amark = amqp_tbl_put_array_begin(b, "x-death");
    if (has_found) {
        put_entry_with_count(b, found, count + 1);
    } else {
        size_t emark = amqp_arr_put_table_begin(b);
        amqp_tbl_put_long(b, "count", 1);
        amqp_tbl_put_str(b, "reason", rs);
        amqp_tbl_put_str(b, "queue", qn);
        amqp_tbl_put_timestamp(b, "time", sl_wall_ms() / 1000);
        amqp_tbl_put_str(b, "exchange", qm_msg_exchange(m));
        size_t rmark = amqp_tbl_put_array_begin(b, "routing-keys");
        amqp_arr_put_str(b, qm_msg_routing_key(m));
        amqp_value cc;
        if (amqp_table_get(headers, "CC", &cc) && cc.tag == 'A') {
            amqp_table_iter ci;
            amqp_value e;
            amqp_array_iter_init(&ci, cc.v.s);
            while (amqp_array_next(&ci, &e))
                if (e.tag == 'S')
                    amqp_arr_put_str(b, e.v.s);
        }
        amqp_tbl_end(b, rmark);
        if (bp->flags & AMQP_P_EXPIRATION)
            amqp_tbl_put_str(b, "original-expiration", bp->expiration);
        amqp_tbl_end(b, emark);
    }
    if (has_deaths) {
        amqp_array_iter_init(&it, deaths.v.s);
        while (amqp_array_next(&it, &v))
            if (!(has_found && v.tag == 'F' && v.v.s.p == found.p))
                amqp_value_write(b, &v);
    }
    amqp_tbl_end(b, amark);
    amqp_tbl_end(b, mark);
}

/* RabbitMQ's is_cycle over the new x-death array. */
static int is_cycle(amqp_bytes deaths, const char *target)
{
    amqp_table_iter it;
    amqp_value v, a;
    int rejected = 0;
    amqp_array_iter_init(&it, deaths);
    while (amqp_array_next(&it, &v)) {
        if (v.tag != 'F')
            continue;
        if (amqp_table_get(v.v.s, "reason", &a) && str_is(&a, amqp_cstr("rejected")))
            rejected = 1;
        if (amqp_table_get(v.v.s, "queue", &a) && str_is(&a, amqp_cstr(target)))
            return !rejected;
    }
    return 0;
}

void qm_deadletter(qm_queue *q, qm_message *m, qm_delete_reason reason)
{
    if (!q->args.dlx || dl_depth >= DL_MAX_DEPTH)
        return;
    qm_exchange *x = qm_exchange_find(q->vhost, q->args.dlx, strlen(q->args.dlx));
    if (!x)
        return;
    q->stat_dead_lettered++;

    amqp_basic_props bp;
    if (!m->props_len || amqp_props_decode(qm_msg_props(m), m->props_len, &bp) != 0)
        memset(&bp, 0, sizeof bp);

    sl_buf hb, pb;
    sl_buf_init(&hb);
    sl_buf_init(&pb);
    build_headers(&hb, q, m, &bp, reason_name(reason));
    bp.headers = (amqp_bytes){sl_buf_head(&hb) + 4, sl_buf_unread(&hb) - 4};
    bp.flags |= AMQP_P_HEADERS;
    bp.flags &= (uint16_t)~AMQP_P_EXPIRATION;
    amqp_props_encode(&pb, &bp);

    amqp_bytes rk = q->args.dlrk ? amqp_cstr(q->args.dlrk) : qm_msg_routing_key(m);
    qm_message *dm = qm_message_new(amqp_cstr(x->name), rk, sl_buf_head(&pb),
                                    (uint32_t)sl_buf_unread(&pb), m->body_len);
    if (m->body_len)
        memcpy(qm_msg_body(dm), qm_msg_body(m), m->body_len);

    qm_queue *stk[16], **out = stk;
    size_t total = 0;
    size_t n = qm_route_cc(x, qm_msg_routing_key(dm), bp.headers, out, 16, &total);
    if (total > 16) {
        out = sl_xmalloc(total * sizeof *out);
        n = qm_route_cc(x, qm_msg_routing_key(dm), bp.headers, out, total, &total);
    }
    amqp_value deaths = {0};
    amqp_table_get(bp.headers, "x-death", &deaths);
    dl_depth++;
    for (size_t i = 0; i < n; i++) {
        if (reason != QM_DEL_REJECTED && is_cycle(deaths.v.s, out[i]->name))
            continue;
        qm_queue_enqueue(out[i], dm); /* a full reject-publish target just refuses it */
    }
    dl_depth--;
    if (out != stk)
        sl_free(out);
    qm_message_unref(dm);
    sl_buf_free(&hb);
    sl_buf_free(&pb);
}
