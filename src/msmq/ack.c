/* ack.c - MSMQ administration acknowledgements (ack.h).
 *
 * Which class goes when (MS-MQQB 3.1.5.8.10 on arrival, 3.1.7.2.1 on receive; the flags are
 * MessagePropertiesHeader.Flags as x-msmq-ack):
 *   ACK_REACH_QUEUE (0x0002)       enqueued                     asked by POS_ARRIVAL (0x01)
 *   NACK_* 0x80xx                  refused on arrival           asked by NEG_ARRIVAL (0x04)
 *   ACK_RECEIVE (0x4000)           taken by a consumer for good asked by POS_RECEIVE (0x02)
 *   NACK_* 0xc0xx                  dropped unread: expired,     asked by NEG_RECEIVE (0x08)
 *                                  purged, its queue deleted;
 *                                  or refused by a consumer
 *                                  (NACK_RECEIVE_REJECTED 0xc004)
 * The rejection: MS-MQRR 3.1.4.14 (R_SetUserAcknowledgementClass, MQMarkMessageRejected) has
 * a receiving application mark the message it takes as rejected; it leaves the queue at the
 * commit with DequeueReason NackReceiveRejected, the sender's admin queue gets 0xc004. AMQP's
 * basic.reject / basic.nack with requeue=false is that: the consumer takes the message out for
 * good and says it refuses it (requeue=true gives it back: nothing is sent, as for an MSMQ
 * transaction aborted).
 * An acknowledgement is never acknowledged itself (it names no admin queue, and a message
 * whose own x-msmq-class is an acknowledgement's is skipped), so there is no loop.
 *
 * Invariant: everything here runs inside the model's operations (on_removed, or the door's
 * delivery) and only enqueues into the admin queue, never into the queue the original is
 * leaving; the enqueue goes through the store like a dead-letter copy does.
 */
#include "msmq/ack.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "amqp/method.h"
#include "amqp/table.h"
#include "node/node.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "eod/outq.h"
#include "persist/persist.h"
#include "mqqb/mqqb.h"

/* What an acknowledgement needs of its original. Strings point into orig's properties. */
typedef struct orig_info {
    amqp_bytes admin, dest, label, message_id;
    int64_t ack_flags, cls, app_tag, body_type;
    int has_app_tag, has_body_type, persistent;
} orig_info;

static int key_is(amqp_bytes k, const char *s)
{
    return k.len == strlen(s) && !memcmp(k.p, s, k.len);
}

static int orig_read(const qm_message *orig, orig_info *o)
{
    amqp_basic_props bp;
    memset(o, 0, sizeof *o);
    if (amqp_props_decode(qm_msg_props(orig), orig->props_len, &bp) != 0 ||
        !(bp.flags & AMQP_P_HEADERS))
        return -1;
    o->persistent = orig->persistent;
    if (bp.flags & AMQP_P_MESSAGE_ID)
        o->message_id = bp.message_id;
    amqp_table_iter it;
    amqp_bytes k, str;
    amqp_value v;
    int64_t n;
    amqp_table_iter_init(&it, bp.headers);
    while (amqp_table_next(&it, &k, &v)) {
        if (k.len < 7 || memcmp(k.p, "x-msmq-", 7))
            continue;
        int isint = amqp_value_int(&v, &n), isstr = amqp_value_str(&v, &str);
        if (key_is(k, "x-msmq-admin-queue") && isstr)
            o->admin = str;
        else if (key_is(k, "x-msmq-destination-queue") && isstr)
            o->dest = str;
        else if (key_is(k, "x-msmq-label") && isstr)
            o->label = str;
        else if (key_is(k, "x-msmq-ack") && isint)
            o->ack_flags = n;
        else if (key_is(k, "x-msmq-class") && isint)
            o->cls = n;
        else if (key_is(k, "x-msmq-app-specific") && isint) {
            o->app_tag = n;
            o->has_app_tag = 1;
        } else if (key_is(k, "x-msmq-body-type") && isint) {
            o->body_type = n;
            o->has_body_type = 1;
        }
    }
    return 0;
}

/* Did the sender ask for an acknowledgement of this class? */
static int asked(int64_t flags, uint16_t cls)
{
    if (cls == MQMSG_CLASS_ACK_REACH_QUEUE)
        return (flags & MQQB_ACK_POS_ARRIVAL) != 0;
    if (cls == MQMSG_CLASS_ACK_RECEIVE)
        return (flags & MQQB_ACK_POS_RECEIVE) != 0;
    if ((cls & 0xff00) == 0x8000)
        return (flags & MQQB_ACK_NEG_ARRIVAL) != 0;
    if ((cls & 0xff00) == 0xc000)
        return (flags & MQQB_ACK_NEG_RECEIVE) != 0;
    return 0;
}

/* The host of a direct format name "DIRECT=TCP:host\..." / "DIRECT=OS:host\...": 0 with it
 * in [*h, *h + *hl), or -1. */
static int direct_host(amqp_bytes f, const char **h, size_t *hl)
{
    const char *s = (const char *)f.p;
    size_t n = f.len;
    if (n < 7 || strncasecmp(s, "DIRECT=", 7))
        return -1;
    s += 7;
    n -= 7;
    if (n > 4 && !strncasecmp(s, "TCP:", 4)) {
        s += 4;
        n -= 4;
    } else if (n > 3 && !strncasecmp(s, "OS:", 3)) {
        s += 3;
        n -= 3;
    } else {
        return -1;
    }
    const char *bs = memchr(s, '\\', n);
    if (!bs || bs == s)
        return -1;
    *h = s;
    *hl = (size_t)(bs - s);
    return 0;
}

/* The queue the acknowledgement goes to, or NULL with why. */
static qm_queue *admin_queue(sl_node *n, qm_vhost *vh, const orig_info *o, int create, char *why,
                             size_t wl)
{
    char fmt[1100];
    if (o->admin.len >= sizeof fmt) {
        snprintf(why, wl, "admin queue name too long");
        return NULL;
    }
    memcpy(fmt, o->admin.p, o->admin.len);
    fmt[o->admin.len] = 0;
    const char *ah, *dh;
    size_t ahl, dhl;
    if (direct_host(o->admin, &ah, &ahl) < 0) {
        snprintf(why, wl, "'%.300s' is not a direct format name (no directory here)", fmt);
        return NULL;
    }
    eod_reg *reg = eod_reg_of(n->qm); /* the node's outgoing queues, when it has links */
    if (reg) {
        char err[300];
        qm_queue *q = eod_msmq_outgoing_queue(reg, vh, fmt, strlen(fmt), create, err, sizeof err);
        if (q)
            return q;
    }
    /* the host the sender reached this node by: a queue of this node */
    if (direct_host(o->dest, &dh, &dhl) == 0 && ahl == dhl && !strncasecmp(ah, dh, ahl)) {
        const char *qn;
        size_t ql;
        if (mqqb_direct_private_queue(fmt + 7, strlen(fmt + 7), &qn, &ql) < 0) {
            snprintf(why, wl, "'%.300s' is not a private queue", fmt);
            return NULL;
        }
        qm_queue *q = qm_queue_find_ci(vh, qn, ql);
        if (!q) {
            snprintf(why, wl, "no queue '%.*s' in vhost '%s'", (int)ql, qn, vh->name);
            return NULL;
        }
        if (n->cfg->msmq_user && eod_recv_may_write(n->acc, n->cfg->msmq_user, q, why, wl) != SL_OK)
            return NULL;
        return q;
    }
    snprintf(why, wl, "'%.300s' is neither on a host of msmq.hosts nor on this node", fmt);
    return NULL;
}

/* Is q the queue the MSMQ sender sent the message to (its destination's private queue, in
 * msmq.vhost)? A receive acknowledgement is about that queue only: a copy an AMQP client
 * published again elsewhere, or one forwarded through an outgoing queue, was not received
 * by the application the sender addressed. */
static int addressed_queue(const qm_queue *q, const orig_info *o, const char *vname)
{
    const char *qn;
    size_t ql;
    if (q->is_outgoing || strcmp(q->vhost->name, vname) || o->dest.len < 8 ||
        mqqb_direct_private_queue((const char *)o->dest.p + 7, o->dest.len - 7, &qn, &ql) < 0)
        return 0;
    return ql == strlen(q->name) && !strncasecmp(qn, q->name, ql);
}

/* ack_send's result when it began a record group (only with from: on_removed's caller ends
 * it); 1 when it enqueued otherwise, 0 when it sent nothing. */
#define ACK_GROUPED 2

static int ack_send(sl_node *n, const qm_message *orig, uint16_t cls, const qm_queue *from)
{
    orig_info o;
    if (orig_read(orig, &o) < 0 || !o.admin.len || !asked(o.ack_flags, cls) ||
        MQQB_CLASS_IS_ADMIN_ACK((uint16_t)o.cls))
        return 0;
    const char *vname = n->cfg->msmq_vhost ? n->cfg->msmq_vhost : "/";
    if (from && !addressed_queue(from, &o, vname))
        return 0;
    qm_vhost *vh = qm_vhost_find(n->qm, vname, strlen(vname));
    char why[400];
    /* never a queue created while one is being deleted (its vhost may be iterating them) */
    int create = !(from && cls == MQMSG_CLASS_NACK_Q_DELETED);
    qm_queue *q = vh ? admin_queue(n, vh, &o, create, why, sizeof why) : NULL;
    if (q && q == from) {
        snprintf(why, sizeof why, "the admin queue is the message's own queue");
        q = NULL;
    }
    if (!q) {
        if (!vh)
            snprintf(why, sizeof why, "no vhost '%s'", vname);
        sl_warn("msmq: administration acknowledgement 0x%04x of message %.*s not sent: %s", cls,
                (int)o.message_id.len, (const char *)o.message_id.p, why);
        return 0;
    }
    sl_buf h, props;
    sl_buf_init(&h);
    sl_buf_init(&props);
    size_t mark = amqp_tbl_begin(&h);
    amqp_tbl_put_int(&h, "x-msmq-class", cls);
    if (o.label.len)
        amqp_tbl_put_str(&h, "x-msmq-label", o.label);
    if (o.has_app_tag)
        amqp_tbl_put_long(&h, "x-msmq-app-specific", o.app_tag);
    int negative = (cls & 0x8000) != 0;
    /* a negative acknowledgement carries the original's body (MSMQ's acknowledgement message
     * properties); a positive one is empty */
    if (negative && o.has_body_type)
        amqp_tbl_put_int(&h, "x-msmq-body-type", (int32_t)o.body_type);
    if (o.dest.len)
        amqp_tbl_put_str(&h, "x-msmq-destination-queue", o.dest);
    amqp_tbl_end(&h, mark);
    amqp_basic_props bp = {0};
    bp.flags = AMQP_P_HEADERS | AMQP_P_DELIVERY_MODE | AMQP_P_TIMESTAMP;
    bp.headers = (amqp_bytes){sl_buf_head(&h) + 4, sl_buf_unread(&h) - 4};
    /* recoverable when the original was, express when it was express (MS-MQQB 1.3.5.2) */
    bp.delivery_mode = o.persistent ? 2 : 1;
    bp.timestamp = sl_wall_ms() / 1000;
    if (o.message_id.len) {
        bp.flags |= AMQP_P_CORRELATION_ID;
        bp.correlation_id = o.message_id;
    }
    amqp_props_encode(&props, &bp);
    uint32_t blen = negative ? orig->body_len : 0;
    /* A receive acknowledgement and the removal it reports (the original's R_DEQ, written by
     * the model after this returns) go in one record group: a kill -9 leaves the message or
     * its acknowledgement, never both (it would be taken and acknowledged again) and never
     * neither. Only a persistent original has a removal record (and a persistent
     * acknowledgement); the model ends the group (on_removed's contract, qm.h). */
    int grouped = from && orig->persistent && n->store;
    if (grouped)
        persist_group(n->store, 1);
    qm_message *msg =
        qm_message_new(AMQP_BYTES(""), (amqp_bytes){(const uint8_t *)q->name, strlen(q->name)},
                       sl_buf_head(&props), (uint32_t)sl_buf_unread(&props), blen);
    if (blen)
        memcpy(qm_msg_body(msg), qm_msg_body(orig), blen);
    sl_err e = qm_queue_enqueue(q, msg);
    qm_message_unref(msg);
    sl_buf_free(&h);
    sl_buf_free(&props);
    if (e != SL_OK)
        sl_warn("msmq: administration acknowledgement 0x%04x of message %.*s not sent: queue "
                "'%s' refused it",
                cls, (int)o.message_id.len, (const char *)o.message_id.p, q->name);
    else
        sl_debug("msmq: administration acknowledgement 0x%04x of %.*s to '%s'", cls,
                 (int)o.message_id.len, (const char *)o.message_id.p, q->name);
    return grouped ? ACK_GROUPED : e == SL_OK;
}

int msmq_ack_send(sl_node *n, const qm_message *orig, uint16_t cls)
{
    return ack_send(n, orig, cls, NULL) != 0;
}

/* Cheap test before any decoding: most messages carry no x-msmq-ack at all. */
static int may_ask(const qm_message *m)
{
    static const char key[] = "x-msmq-ack";
    return m->props_len > sizeof key &&
           memmem(qm_msg_props(m), m->props_len, key, sizeof key - 1) != NULL;
}

/* 1 when a record group was begun (the model ends it after the removal's record). */
static int on_removed(qm_position *pos, qm_delete_reason reason, void *ctx)
{
    sl_node *n = ctx;
    if (!may_ask(pos->msg))
        return 0;
    uint16_t cls;
    if (reason == QM_DEL_ACKED)
        cls = MQMSG_CLASS_ACK_RECEIVE;
    else if (reason == QM_DEL_EXPIRED)
        cls = MQMSG_CLASS_NACK_RECEIVE_TIMEOUT;
    else if (reason == QM_DEL_PURGED)
        cls = MQMSG_CLASS_NACK_Q_PURGED;
    else if (reason == QM_DEL_QUEUE_DELETED)
        cls = MQMSG_CLASS_NACK_Q_DELETED;
    else if (reason == QM_DEL_REJECTED)
        cls = MQMSG_CLASS_NACK_RECEIVE_REJECTED;
    else
        return 0;
    return ack_send(n, pos->msg, cls, pos->queue) == ACK_GROUPED;
}

void msmq_ack_install(sl_node *n)
{
    n->qm->on_removed = on_removed;
    n->qm->removed_ctx = n;
}

void msmq_ack_uninstall(sl_node *n)
{
    if (n->qm->on_removed == on_removed) {
        n->qm->on_removed = NULL;
        n->qm->removed_ctx = NULL;
    }
}
