/* link_recv.c - the receiving side of a node-to-node link (src/link/link.h has the design).
 *
 * A link is an ordinary AMQP connection that announced itself with a "sluice_link" table in
 * its client-properties (node_id, node_name) and authenticated as a user of this node that
 * may speak for that node (the administrator tag, or the link tag bound to that node id:
 * access.h acc_check_link_login); any other claim is refused at the handshake with an
 * audit line. It needs no permission but write on the queues it delivers to. On
 * its channels a link transaction is: data publishes (exchange "", routing key = the
 * destination queue), then one control publish to "sluice.eod" (eod_batch: SeqID and the
 * numbers), then tx.commit. At the commit the batch is decided as a whole (eod.h):
 * duplicates are dropped, the accepted messages are enqueued and the new last-accepted
 * number is recorded, all in one all-or-nothing record group of this turn's group commit;
 * tx.commit-ok (the order ack) is held until that group commit's sync has ended. A
 * batch that cannot apply (out of sequence, unknown queue, not allowed, malformed) closes
 * the channel with a reason and changes nothing: the sender keeps its messages and retries.
 * EOD state is per (sender, SeqID, destination queue) (persist.h); a batch for a sequence
 * that feeds another queue, or whose numbers jump beyond link_seq_window (eod.h), is no real
 * sender's: refused the same way, with an audit line naming the login, the claimed sender,
 * the sequence and the queue.
 * Publishes to "sluice.rpc" are requests answered through direct reply-to (link.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "access/access.h"
#include "amqp/table.h"
#include "core/clock.h"
#include "core/hex.h"
#include "core/log.h"
#include "core/mem.h"
#include "eod/eod.h"
#include "link/link.h"
#include "persist/persist.h"
#include "broker/broker.h"

int broker_link_recv_hello(conn *c, amqp_bytes client_props)
{
    amqp_value v, id, name;
    if (!amqp_table_get(client_props, "sluice_link", &v) || v.tag != 'F')
        return 0;
    amqp_bytes ids = {0}, names = {0};
    if (!amqp_table_get(v.v.s, "node_id", &id) || !amqp_value_str(&id, &ids) || ids.len != 32) {
        broker_conn_error(c, SL_ERR_ACCESS_REFUSED, AMQP_CONNECTION_START_OK,
                          "a link must name its node (sluice_link.node_id: 32 hex digits)");
        return -1;
    }
    if (sl_unhex((const char *)ids.p, 16, c->link_sender) < 0) {
        broker_conn_error(c, SL_ERR_ACCESS_REFUSED, AMQP_CONNECTION_START_OK,
                          "sluice_link.node_id is not hex");
        return -1;
    }
    if (amqp_table_get(v.v.s, "node_name", &name))
        amqp_value_str(&name, &names);
    /* A link is an identity, not a claim (access.h acc_check_link_login): only a user with
     * the administrator or link tag, and a link user only for the node its login is bound to.
     * Refused rather than treated as an ordinary connection: a sender that is refused says
     * so in its last_error, and nothing it publishes can be taken for a link's. */
    char why[400];
    sl_err ae = c->b->n->acc
                    ? acc_check_link_login(c->b->n->acc, c->user, c->link_sender, why, sizeof why)
                    : SL_OK;
    if (ae != SL_OK) {
        sl_warn("audit: link refused: connection %s, user '%s' claimed node %.32s ('%.*s'): %s",
                c->name, c->user ? c->user : "", (const char *)ids.p,
                (int)(names.len > 200 ? 200 : names.len), names.len ? (const char *)names.p : "",
                why);
        broker_conn_error(c, ae, AMQP_CONNECTION_START_OK, "%s", why);
        return -1;
    }
    if (!c->b->n->qm->online) {
        /* DISCONNECT: an offline node accepts no incoming link (local clients go on). */
        broker_conn_error(c, SL_ERR_NOT_ALLOWED, AMQP_CONNECTION_START_OK,
                          "node %s is offline (DISCONNECT): no incoming links",
                          c->b->n->cfg->node_name);
        return -1;
    }
    /* A link user's first login binds it to its node (a meta record just appended): the
     * handshake goes on (connection.tune) only once that record is on disk, so a binding the
     * API already shows, or a sender already told it is in, survives a kill -9 right after.
     * A no-op when nothing is waiting for the disk (the binding was there already). Found by
     * test_link_forged.py's restart test on a loaded machine (the syncer had not yet written
     * the record when the node was killed). */
    broker_conn_hold_for_disk(c);
    c->is_link = 1;
    sl_free(c->link_node);
    c->link_node = sl_xstrndup((const char *)names.p, names.len > 200 ? 200 : names.len);
    return 1;
}

/* The audit line of a refused link batch: who (login), as whom (claimed sender), what
 * (sequence, queue) and why. */
__attribute__((format(printf, 4, 5))) static void
link_recv_audit(channel *ch, const eod_batch *eb, const char *dest, const char *fmt, ...)
{
    char why[400], hex[33];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    sl_hex(hex, eb->sender, 16);
    sl_warn("audit: link batch refused: connection %s, user '%s', claimed sender %s ('%.*s'), "
            "sequence %llu, queue '%s': %s",
            ch->c->name, ch->c->user ? ch->c->user : "", hex,
            (int)(eb->sender_name_len > 200 ? 200 : eb->sender_name_len), eb->sender_name,
            (unsigned long long)eb->seq_id, dest, why);
}

int broker_link_recv_control_exchange(amqp_bytes ex)
{
    return amqp_bytes_eq(ex, "sluice.eod") || amqp_bytes_eq(ex, "sluice.rpc");
}

#define LINK_RECV_MAX_BYTES (256ull << 20)

/* The control message's x-reach-deadline header (wall-clock ms; link.h), 0 when absent. */
static uint64_t reach_deadline(const qm_message *ctl)
{
    amqp_basic_props bp;
    amqp_value v;
    int64_t ms = 0;
    if (!ctl || !ctl->props_len || amqp_props_decode(qm_msg_props(ctl), ctl->props_len, &bp) < 0 ||
        !(bp.flags & AMQP_P_HEADERS) || !amqp_table_get(bp.headers, LINK_REACH_DEADLINE, &v) ||
        !amqp_value_int(&v, &ms) || ms <= 0)
        return 0;
    return (uint64_t)ms;
}

static uint64_t first_accepted(const eod_batch *eb, const uint8_t *acc)
{
    for (uint32_t i = 0; i < eb->n; i++)
        if (acc[i])
            return eod_batch_seq_no(eb, i);
    return 0;
}

static void batch_clear(channel *ch)
{
    ch->lk_bytes = 0;
    for (size_t i = 0; i < ch->lk_n; i++)
        qm_message_unref(ch->lk_msgs[i]);
    ch->lk_n = 0;
    if (ch->lk_ctl)
        qm_message_unref(ch->lk_ctl);
    ch->lk_ctl = NULL;
}

void broker_link_recv_release(channel *ch)
{
    batch_clear(ch);
    sl_free(ch->lk_msgs);
    ch->lk_msgs = NULL;
    ch->lk_cap = 0;
}

/* ---- destination queues: "<queue>" in vhost "/", or "<vhost>/<queue>" ---- */

static qm_queue *resolve_dest(broker *b, amqp_bytes rk)
{
    const char *p = (const char *)rk.p;
    size_t len = rk.len;
    const char *slash = memchr(p, '/', len);
    if (slash && slash != p) {
        qm_vhost *vh = qm_vhost_find(b->n->qm, p, (size_t)(slash - p));
        if (vh && strcmp(vh->name, "/")) {
            qm_queue *q = qm_queue_find_ci(vh, slash + 1, len - (size_t)(slash + 1 - p));
            if (q)
                return q;
        }
    }
    qm_vhost *root = qm_vhost_find(b->n->qm, "/", 1);
    return root ? qm_queue_find_ci(root, p, len) : NULL;
}

/* ---- requests ---- */

static void serve_rpc(channel *ch, qm_message *msg)
{
    amqp_basic_props bp;
    if (amqp_props_decode(qm_msg_props(msg), msg->props_len, &bp) < 0 ||
        !(bp.flags & AMQP_P_REPLY_TO)) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_PUBLISH,
                             "a sluice.rpc request needs reply_to (amq.rabbitmq.reply-to)");
        return;
    }
    char *reply =
        link_rpc_serve(ch->c->b->n->qm, ch->c->b->n->boot_id,
                       ch->c->link_node ? ch->c->link_node : "", ch->c->user ? ch->c->user : "",
                       ch->c->id, (const char *)qm_msg_body(msg), (size_t)msg->body_len);
    amqp_basic_props rp = {0};
    rp.flags = AMQP_P_CONTENT_TYPE;
    rp.content_type = AMQP_BYTES("application/json");
    if (bp.flags & AMQP_P_CORRELATION_ID) {
        rp.flags |= AMQP_P_CORRELATION_ID;
        rp.correlation_id = bp.correlation_id;
    }
    sl_buf props;
    sl_buf_init(&props);
    amqp_props_encode(&props, &rp);
    size_t rlen = strlen(reply);
    qm_message *r =
        qm_message_new(AMQP_BYTES(""), bp.reply_to, props.data, (uint32_t)props.len, rlen);
    memcpy(qm_msg_body(r), reply, rlen);
    int delivered = 0;
    broker_reply_to_route(ch, r, &delivered);
    qm_message_unref(r);
    sl_buf_free(&props);
    sl_free(reply);
}

void broker_link_recv_publish(channel *ch, qm_message *msg)
{
    amqp_bytes ex = qm_msg_exchange(msg);
    if (amqp_bytes_eq(ex, "sluice.rpc")) {
        serve_rpc(ch, msg);
        qm_message_unref(msg);
        return;
    }
    if (!ch->tx_mode) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_PUBLISH,
                             "link transfer needs a transactional channel (tx.select)");
        qm_message_unref(msg);
        return;
    }
    if (amqp_bytes_eq(ex, "sluice.eod")) {
        if (ch->lk_ctl)
            qm_message_unref(ch->lk_ctl);
        ch->lk_ctl = msg;
        return;
    }
    if (ex.len) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_PUBLISH,
                             "a link delivers to queues by name (exchange \"\"), not to '" BYTES_FMT
                             "'",
                             BYTES_ARG(ex));
        qm_message_unref(msg);
        return;
    }
    if (ch->lk_ctl) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_PUBLISH,
                             "EOD: data after the batch's control message");
        qm_message_unref(msg);
        return;
    }
    /* A batch is bounded like the sender makes them (link_batch_*), generously: a peer that
     * never commits cannot make this node hold its messages without end. */
    if (ch->lk_n >= EOD_BATCH_MAX ||
        (ch->lk_n && ch->lk_bytes + msg->body_len > LINK_RECV_MAX_BYTES)) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_PUBLISH,
                             "EOD: a link transaction holds at most %u messages and %u MiB",
                             (unsigned)EOD_BATCH_MAX, (unsigned)(LINK_RECV_MAX_BYTES >> 20));
        qm_message_unref(msg);
        batch_clear(ch);
        return;
    }
    ch->lk_bytes += msg->body_len;
    if (ch->lk_n == ch->lk_cap) {
        ch->lk_cap = ch->lk_cap ? ch->lk_cap * 2 : 64;
        ch->lk_msgs = sl_xrealloc(ch->lk_msgs, ch->lk_cap * sizeof *ch->lk_msgs);
    }
    ch->lk_msgs[ch->lk_n++] = msg;
}

int broker_link_recv_commit(channel *ch)
{
    conn *c = ch->c;
    broker *b = c->b;
    if (!c->is_link || (!ch->lk_n && !ch->lk_ctl))
        return 0; /* an ordinary commit */
    const uint32_t id = AMQP_TX_COMMIT;
    eod_batch eb;
    if (!ch->lk_ctl ||
        eod_batch_decode(qm_msg_body(ch->lk_ctl), (size_t)ch->lk_ctl->body_len, &eb) < 0) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, id, "EOD: %s",
                             ch->lk_ctl ? "malformed control message"
                                        : "a batch without its control");
        batch_clear(ch);
        return 1;
    }
    if (eb.n != ch->lk_n || memcmp(eb.sender, c->link_sender, 16)) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, id,
                             "EOD: control names %u message(s) of %s, the batch has %zu", eb.n,
                             memcmp(eb.sender, c->link_sender, 16) ? "another node" : "this link",
                             ch->lk_n);
        batch_clear(ch);
        return 1;
    }
    /* Refusals the sender cannot cure by waiting carry a NACK token with this sequence's
     * last accepted number (link.h "NACKs"): the sender dead-letters what it sent after it. */
    persist_eod_in *st = NULL;
    uint64_t last = 0;
    /* Every destination must exist and take the link's writes before anything applies. */
    qm_queue *stackq[64];
    qm_queue **qs = eb.n <= 64 ? stackq : sl_xmalloc(eb.n * sizeof *qs);
    uint8_t stacka[64];
    uint8_t *acc = eb.n <= 64 ? stacka : sl_xmalloc(eb.n);
    char dest[600] = "";
    /* An outgoing queue leads to one queue: a batch has one destination, resolved once. */
    amqp_bytes rk0 = qm_msg_routing_key(ch->lk_msgs[0]);
    qm_queue *dq = NULL;
    for (uint32_t i = 0; i < eb.n; i++) {
        amqp_bytes rk = qm_msg_routing_key(ch->lk_msgs[i]);
        if (i > 0) {
            if (!amqp_bytes_equal(rk, rk0)) {
                broker_channel_error(ch, SL_ERR_PRECONDITION, id,
                                     "EOD: a batch goes to one queue ('" BYTES_FMT
                                     "', then '" BYTES_FMT "')",
                                     BYTES_ARG(rk0), BYTES_ARG(rk));
                goto out;
            }
            qs[i] = dq;
            continue;
        }
        qm_queue *q = dq = resolve_dest(b, rk);
        if (!q) {
            /* the queue is gone: the number is the one of the queue the sequence fed */
            persist_eod_in *owner =
                b->n->store ? persist_eod_in_other(b->n->store, eb.sender, eb.seq_id, "") : NULL;
            broker_channel_error(ch, SL_ERR_NOT_FOUND, id,
                                 "[" LINK_NACK_BAD_DST_Q " last=%llu] no queue '" BYTES_FMT
                                 "' on node %s",
                                 (unsigned long long)(owner ? owner->seq_no : 0), BYTES_ARG(rk),
                                 b->n->cfg->node_name);
            goto out;
        }
        char why[300];
        sl_err pe = eod_recv_may_write(b->n->acc, c->user, q, why, sizeof why);
        if (pe != SL_OK) {
            broker_channel_error(ch, pe, id, "%s", why);
            goto out;
        }
        qs[i] = q;
        snprintf(dest, sizeof dest, "%s%s%s", strcmp(q->vhost->name, "/") ? q->vhost->name : "",
                 strcmp(q->vhost->name, "/") ? "/" : "", q->name);
    }
    /* The state is the sequence's in this queue (persist.h): a batch naming a sequence that
     * already feeds another queue, or whose numbers jump, is no real sender's (a forged one
     * could otherwise make the real messages look like duplicates): refused whole, nothing
     * marked, and an audit line says who tried. */
    persist_eod_in *other = NULL;
    if (b->n->store) {
        st = persist_eod_in_get(b->n->store, eb.sender, eb.seq_id, dest);
        other = st ? NULL : persist_eod_in_other(b->n->store, eb.sender, eb.seq_id, dest);
        last = st ? st->seq_no : 0;
    }
    uint32_t jump = 0;
    uint64_t window = b->n->cfg->link_seq_window;
    switch (eod_recv_admit(&eb, other != NULL, last, window, &jump)) {
    case EOD_ADMIT_OK:
        break;
    case EOD_ADMIT_OTHER_QUEUE:
        link_recv_audit(ch, &eb, dest, "the sequence feeds queue '%s'", other->dest);
        broker_channel_error(ch, SL_ERR_PRECONDITION, id,
                             "EOD: sequence %llu feeds queue '%s', not '%s': batch refused",
                             (unsigned long long)eb.seq_id, other->dest, dest);
        goto out;
    case EOD_ADMIT_JUMP: {
        unsigned long long s = eod_batch_seq_no(&eb, jump);
        link_recv_audit(ch, &eb, dest, "message %llu jumps beyond last accepted %llu + %llu", s,
                        (unsigned long long)last, (unsigned long long)window);
        broker_channel_error(
            ch, SL_ERR_PRECONDITION, id,
            "EOD: message %llu of sequence %llu jumps beyond the last accepted %llu "
            "(window %llu): batch refused",
            s, (unsigned long long)eb.seq_id, (unsigned long long)last, (unsigned long long)window);
        goto out;
    }
    }
    eod_apply ap;
    eod_recv_batch(&eb, last, acc, &ap);
    char sender[260];
    snprintf(sender, sizeof sender, "%.*s", (int)eb.sender_name_len, eb.sender_name);
    if (ap.rejected) {
        uint64_t s = eod_batch_seq_no(&eb, ap.reject_at), p = eod_batch_prev_no(&eb, ap.reject_at);
        if (b->n->store)
            persist_eod_in_set(b->n->store, eb.sender, eb.seq_id, last, st ? st->rejects + 1 : 1,
                               sender, dest);
        broker_channel_error(
            ch, SL_ERR_PRECONDITION, id,
            "EOD: message %llu of sequence %llu is out of order (previous %llu, last "
            "accepted %llu)",
            (unsigned long long)s, (unsigned long long)eb.seq_id, (unsigned long long)p,
            (unsigned long long)last);
        goto out;
    }
    uint64_t reach_by = ap.accepted ? reach_deadline(ch->lk_ctl) : 0;
    if (reach_by && sl_wall_ms() >= reach_by) {
        /* TimeToReachQueue: what did not reach the queue in time never does (MSMQ refuses it
         * on arrival too); duplicates of what did are not in this refusal (last=) */
        broker_channel_error(ch, SL_ERR_PRECONDITION, id,
                             "[" LINK_NACK_REACH_QUEUE_TIMEOUT
                             " last=%llu] message %llu of sequence "
                             "%llu is past its time to reach queue '%s'",
                             (unsigned long long)last, (unsigned long long)first_accepted(&eb, acc),
                             (unsigned long long)eb.seq_id, dq->name);
        goto out;
    }
    if (ap.accepted) {
        uint64_t bytes = 0;
        for (uint32_t i = 0; i < eb.n; i++)
            if (acc[i])
                bytes += ch->lk_msgs[i]->body_len;
        if (qm_queue_never_holds(dq, ap.accepted, bytes)) {
            /* the queue could not hold this batch even empty: if it is one transaction, the
             * sender dead-letters it (MSMQ: NACK_Q_EXCEED_QUOTA); else it sends them one by
             * one */
            broker_channel_error(ch, SL_ERR_RESOURCE_LOCKED, id,
                                 "[" LINK_NACK_Q_EXCEED_QUOTA
                                 " last=%llu] queue '%s' on node %s can "
                                 "never hold %u message(s) of %llu bytes (x-max-length, "
                                 "x-overflow=reject-publish)",
                                 (unsigned long long)last, dq->name, b->n->cfg->node_name,
                                 ap.accepted, (unsigned long long)bytes);
            goto out;
        }
        if (qm_queue_would_refuse(dq, ap.accepted, bytes)) {
            /* x-overflow=reject-publish: refused whole, kept by the sender, retried */
            broker_channel_error(
                ch, SL_ERR_RESOURCE_LOCKED, id,
                "queue '%s' on node %s is full (x-max-length, x-overflow=reject-publish)", dq->name,
                b->n->cfg->node_name);
            goto out;
        }
    }
    if (ap.accepted || !st) {
        /* enqueues and the new number: all or nothing, one group commit */
        if (b->n->store)
            persist_group(b->n->store, 1);
        for (uint32_t i = 0; i < eb.n; i++)
            if (acc[i])
                qm_queue_enqueue(qs[i], ch->lk_msgs[i]);
        if (b->n->store) {
            persist_eod_in_set(b->n->store, eb.sender, eb.seq_id, ap.new_last, 0, sender, dest);
            persist_group(b->n->store, 0);
        }
    }
    b->n->link_accepted += ap.accepted;
    b->n->link_duplicates += eb.n - ap.accepted;
    {
        /* the order ack: once the batch and its number are on disk */
        amqp_method ok = {.id = AMQP_TX_COMMIT_OK};
        broker_channel_send_durable(ch, &ok, 0);
    }
out:
    if (qs != stackq)
        sl_free(qs);
    if (acc != stacka)
        sl_free(acc);
    batch_clear(ch);
    return 1;
}
