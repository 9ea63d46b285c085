/* h_queue.c - queue.declare / bind / unbind / purge / delete.
 *
 * Access (the access module, in RabbitMQ's order: permissions before existence):
 *   declare      configure on the queue (a server-named one under its generated name); a new
 *                one with x-dead-letter-exchange also read on it and write on the exchange;
 *                a new one counts against the vhost's max-queues (passive: nothing)
 *   bind/unbind  write on the queue, read on the exchange, topic read on the key
 *   purge        read on the queue;  delete  configure on the queue
 *
 * Purge and delete follow DESIGN.md section 2: purge deletes every ready message and turns
 * delivered-but-unsettled ones into PurgePending (deleted, never requeued, when settled);
 * delete checks if-unused and if-empty before anything changes, counting unacked messages
 * as messages. The model (qm_queue_purge / qm_queue_delete) implements both; this file adds
 * the AMQP names, codes and texts.
 */
#include "broker/broker.h"

#include <stdio.h>
#include <string.h>

#include "amqp/table.h"
#include "core/mem.h"
#include "node/rules.h"

/* A durable queue is stored (its subqueues with it; exclusive ones never are). */
static int stored(const qm_queue *q)
{
    const qm_queue *t = q->parent ? q->parent : q;
    return t->durable && !t->exclusive;
}

/* The replies about a stored queue promise a definition or a purge on disk (the declare-ok
 * of an existing one included: its declaration may still be on its way there); those about
 * transient queues wait for nothing. */
static void send_reply(channel *ch, const qm_queue *q, const amqp_method *m, int nowait)
{
    if (q && stored(q))
        broker_channel_send_durable(ch, m, nowait);
    else if (!nowait)
        broker_conn_send_method(ch->c, ch->id, m);
}

static int check_exclusive(channel *ch, qm_queue *q, uint32_t method_id)
{
    char why[800];
    if (node_queue_locked(q, ch->c, why, sizeof why) == SL_OK) /* the rule: node/rules.c */
        return 0;
    broker_channel_error(ch, SL_ERR_RESOURCE_LOCKED, method_id, "%s", why);
    return -1;
}

static qm_queue *resolve(channel *ch, amqp_bytes name, uint32_t method_id, int create);

int broker_channel_queue_name(channel *ch, amqp_bytes *name, uint32_t method_id)
{
    if (name->len == 0) {
        if (!ch->last_queue) {
            broker_channel_error(ch, SL_ERR_NOT_FOUND, method_id, "no previously declared queue");
            return 0;
        }
        *name = amqp_cstr(ch->last_queue);
    }
    return 1;
}

qm_queue *broker_channel_queue_checked(channel *ch, amqp_bytes name, acc_perm perm,
                                       uint32_t method_id)
{
    if (!broker_channel_queue_name(ch, &name, method_id) ||
        !broker_channel_allowed(ch, ACC_QUEUE, name, perm, method_id))
        return NULL;
    return broker_channel_queue(ch, name, method_id);
}

qm_queue *broker_channel_queue(channel *ch, amqp_bytes name, uint32_t method_id)
{
    return resolve(ch, name, method_id, 0);
}

/* A queue by name; a format name (DIRECT=...) names an outgoing queue (made by queue.bind
 * when create is set, as a publish to it would). */
static qm_queue *resolve(channel *ch, amqp_bytes name, uint32_t method_id, int create)
{
    char buf[256];
    if (!broker_channel_queue_name(ch, &name, method_id))
        return NULL;
    qm_queue *q = qm_queue_find_or_remote(ch->c->vhost, (const char *)name.p, name.len, create);
    if (!q) {
        snprintf(buf, sizeof buf, BYTES_FMT, BYTES_ARG(name));
        broker_channel_error(ch, SL_ERR_NOT_FOUND, method_id, "no queue '%s' in vhost '%s'", buf,
                             ch->c->vhost->name);
        return NULL;
    }
    if (check_exclusive(ch, q, method_id) < 0)
        return NULL;
    return q;
}

static void remember(channel *ch, const char *name)
{
    sl_free(ch->last_queue);
    ch->last_queue = sl_xstrdup(name);
}

static void declare(channel *ch, const amqp_queue_declare *d)
{
    const uint32_t id = AMQP_QUEUE_DECLARE;
    qm_queue *q;
    if (d->passive) {
        if (d->nowait ? broker_reply_to_is_pseudo(d->queue)
                      : broker_reply_to_declare_passive(ch, d->queue))
            return;
        q = broker_channel_queue(ch, d->queue, id);
        if (!q)
            return;
    } else {
        char why[600]; /* reserved even when it exists: AMQP declares no amq.* queue */
        if (node_queue_new_name((const char *)d->queue.p, d->queue.len, 0, why, sizeof why)) {
            broker_channel_error(ch, SL_ERR_ACCESS_REFUSED, id, "%s", why);
            return;
        }
        if (qm_queue_name_is_outgoing((const char *)d->queue.p, d->queue.len)) {
            broker_channel_error(ch, SL_ERR_ACCESS_REFUSED, id,
                                 "queue name '" BYTES_FMT "' is a format name: sending to it makes "
                                 "the outgoing queue (it cannot be declared)",
                                 BYTES_ARG(d->queue));
            return;
        }
        char gen[31];
        amqp_bytes name = d->queue;
        if (name.len == 0 &&
            (qm_queue_args_quorum(d->arguments) || qm_queue_args_stream(d->arguments))) {
            broker_channel_error(
                ch, SL_ERR_PRECONDITION, id, "Cannot declare a server-named queue for type %s",
                qm_queue_args_quorum(d->arguments) ? "rabbit_quorum_queue" : "rabbit_stream_queue");
            return;
        }
        if (name.len == 0) {
            qm_queue_gen_name(ch->c->vhost, gen);
            name = amqp_cstr(gen);
        }
        if (!broker_channel_allowed(ch, ACC_QUEUE, name, ACC_CONFIGURE, id))
            return;
        qm_queue *old = qm_queue_find(ch->c->vhost, (const char *)name.p, name.len);
        if (old && check_exclusive(ch, old, id) < 0)
            return;
        if (!old) {
            char qn[256];
            snprintf(qn, sizeof qn, BYTES_FMT, BYTES_ARG(name));
            if (node_queue_limit(ch->c->b->n->acc, ch->c->vhost, qn, why, sizeof why) != SL_OK) {
                broker_channel_error(ch, SL_ERR_PRECONDITION, id, "%s", why);
                return;
            }
            amqp_value dlx;
            amqp_bytes dlx_name;
            if (amqp_table_get(d->arguments, "x-dead-letter-exchange", &dlx) &&
                amqp_value_str(&dlx, &dlx_name) &&
                (!broker_channel_allowed(ch, ACC_QUEUE, name, ACC_READ, id) ||
                 !broker_channel_allowed(ch, ACC_EXCHANGE, dlx_name, ACC_WRITE, id)))
                return;
        }
        qm_queue_decl decl = {
            .name = (const char *)name.p,
            .name_len = name.len,
            .durable = d->durable,
            .exclusive = d->exclusive,
            .auto_delete = d->auto_delete,
            .exclusive_owner = d->exclusive ? ch->c : NULL,
            .arguments = d->arguments,
        };
        int created;
        char err[320];
        sl_err e = qm_queue_declare(ch->c->vhost, &decl, &q, &created, err, sizeof err);
        if (e != SL_OK) {
            broker_channel_error(ch, e, id, "%s", err);
            return;
        }
    }
    remember(ch, q->name);
    amqp_method m = {.id = AMQP_QUEUE_DECLARE_OK};
    m.u.queue_declare_ok.queue = amqp_cstr(q->name);
    m.u.queue_declare_ok.message_count = (uint32_t)q->n_ready;
    m.u.queue_declare_ok.consumer_count = (uint32_t)q->n_consumers;
    /* What a declare-ok promises is the queue's definition on disk (new, or still on its way
     * there): it waits for the generation of that record, not for every write pending, so a
     * passive declare is answered while a full disk holds other clients' publishes. */
    if (stored(q)) {
        uint64_t gen = q->st_def_gen;
        if (q->parent && q->parent->st_def_gen > gen)
            gen = q->parent->st_def_gen;
        broker_channel_send_after(ch, &m, d->nowait, gen);
    } else if (!d->nowait) {
        broker_conn_send_method(ch->c, ch->id, &m);
    }
}

static void bind_queue(channel *ch, uint32_t id, amqp_bytes qname, amqp_bytes xname, amqp_bytes key,
                       amqp_bytes args, int nowait)
{
    if (!broker_channel_queue_name(ch, &qname, id) ||
        !broker_channel_bind_allowed(ch, ACC_QUEUE, qname, xname, key, id))
        return;
    qm_queue *q = resolve(ch, qname, id, id == AMQP_QUEUE_BIND);
    if (!q)
        return;
    if (q->is_subqueue) {
        broker_channel_error(
            ch, SL_ERR_ACCESS_REFUSED, id,
            "subqueue '%s' in vhost '%s' cannot be bound: subqueues are filled only "
            "by moves",
            q->name, ch->c->vhost->name);
        return;
    }
    qm_exchange *x = qm_exchange_find(ch->c->vhost, (const char *)xname.p, xname.len);
    if (!x) {
        broker_channel_error(ch, SL_ERR_NOT_FOUND, id, "no exchange '" BYTES_FMT "' in vhost '%s'",
                             BYTES_ARG(xname), ch->c->vhost->name);
        return;
    }
    amqp_method m = {0};
    int durable = x->durable; /* an unbind may auto-delete x */
    if (id == AMQP_QUEUE_BIND) {
        char err[256];
        sl_err e = qm_bind_queue(x, q, key, args, err, sizeof err);
        if (e != SL_OK) {
            broker_channel_error(ch, e, id, "%s", err);
            return;
        }
        m.id = AMQP_QUEUE_BIND_OK;
    } else {
        qm_unbind_queue(x, q, key, args);
        m.id = AMQP_QUEUE_UNBIND_OK;
    }
    send_reply(ch, durable ? q : NULL, &m, nowait);
}

static void purge(channel *ch, const amqp_queue_purge *p)
{
    qm_queue *q = broker_channel_queue_checked(ch, p->queue, ACC_READ, AMQP_QUEUE_PURGE);
    if (!q)
        return;
    if (q->stream) {
        broker_channel_error(ch, SL_ERR_NOT_IMPLEMENTED, AMQP_QUEUE_PURGE,
                             "queue.purge not supported by stream queues queue '%s' in vhost '%s'",
                             q->name, ch->c->vhost->name);
        return;
    }
    uint64_t n = qm_queue_purge(q);
    amqp_method m = {.id = AMQP_QUEUE_PURGE_OK};
    m.u.queue_purge_ok.message_count = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    send_reply(ch, q, &m, p->nowait);
}

static void delete_queue(channel *ch, const amqp_queue_delete *d)
{
    const uint32_t id = AMQP_QUEUE_DELETE;
    amqp_bytes name = d->queue;
    if (name.len == 0 && ch->last_queue)
        name = amqp_cstr(ch->last_queue);
    if (!broker_channel_allowed(ch, ACC_QUEUE, name, ACC_CONFIGURE, id))
        return;
    qm_queue *q = qm_queue_find(ch->c->vhost, (const char *)name.p, name.len);
    uint64_t count = 0;
    int was_stored = q && stored(q);
    if (q) {
        if (check_exclusive(ch, q, id) < 0)
            return;
        if (q->is_subqueue) {
            broker_channel_error(ch, SL_ERR_ACCESS_REFUSED, id,
                                 "subqueue '%s' is deleted with its queue; purge it instead",
                                 q->name);
            return;
        }
        int flags =
            (d->if_unused ? QM_DELETE_IF_UNUSED : 0) | (d->if_empty ? QM_DELETE_IF_EMPTY : 0);
        char err[256];
        sl_err e = qm_queue_delete(q, flags, &count, err, sizeof err);
        if (e != SL_OK) {
            broker_channel_error(ch, e, id, "%s", err);
            return;
        }
    }
    /* Deleting a queue that does not exist answers delete-ok with 0 (RabbitMQ 3.x). */
    amqp_method m = {.id = AMQP_QUEUE_DELETE_OK};
    m.u.queue_delete_ok.message_count = count > UINT32_MAX ? UINT32_MAX : (uint32_t)count;
    if (was_stored)
        broker_channel_send_durable(ch, &m, d->nowait);
    else
        send_reply(ch, NULL, &m, d->nowait);
}

void broker_h_queue(channel *ch, const amqp_method *m)
{
    switch (m->id) {
    case AMQP_QUEUE_DECLARE:
        declare(ch, &m->u.queue_declare);
        return;
    case AMQP_QUEUE_BIND: {
        const amqp_queue_bind *b = &m->u.queue_bind;
        bind_queue(ch, m->id, b->queue, b->exchange, b->routing_key, b->arguments, b->nowait);
        return;
    }
    case AMQP_QUEUE_UNBIND: {
        const amqp_queue_unbind *b = &m->u.queue_unbind;
        bind_queue(ch, m->id, b->queue, b->exchange, b->routing_key, b->arguments, 0);
        return;
    }
    case AMQP_QUEUE_PURGE:
        purge(ch, &m->u.queue_purge);
        return;
    case AMQP_QUEUE_DELETE:
        delete_queue(ch, &m->u.queue_delete);
        return;
    default:
        broker_conn_error(ch->c, SL_ERR_COMMAND_INVALID, m->id, "unexpected method %s",
                          amqp_method_name(m->id));
    }
}
