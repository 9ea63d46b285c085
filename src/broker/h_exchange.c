/* h_exchange.c - exchange.declare / delete / bind / unbind, with RabbitMQ's reply codes and
 * texts (reference/amqp/NOTES.md sections 4-5). The model does the work; this file checks
 * what only the AMQP door knows: reserved names, the default exchange, nowait, and asks the
 * access module in RabbitMQ's order (rabbit_channel): permissions before existence, so a
 * refused user learns nothing about what exists.
 *   declare      configure on the exchange; a new one with alternate-exchange also read on
 *                it and write on the alternate (passive: nothing)
 *   delete       configure on the exchange
 *   bind/unbind  write on the destination, read on the source, and for a topic source the
 *                topic read permission on the binding key
 */
#include "broker/broker.h"

#include <string.h>

#include "amqp/table.h"
#include "node/rules.h"

/* The replies about durable exchanges promise a definition on disk; the others wait for
 * nothing. */
static void reply(channel *ch, uint32_t id, int nowait, int durable)
{
    amqp_method m = {.id = id};
    if (durable)
        broker_channel_send_durable(ch, &m, nowait);
    else if (!nowait)
        broker_conn_send_method(ch->c, ch->id, &m);
}

/* A passive declare-ok promises only that the exchange's definition is on disk: it waits for
 * the generation that definition was written in, not for every write pending (a full disk
 * holding other clients' publishes must not hold it). */
static void reply_existing(channel *ch, const qm_exchange *x, int nowait)
{
    amqp_method m = {.id = AMQP_EXCHANGE_DECLARE_OK};
    if (x->durable)
        broker_channel_send_after(ch, &m, nowait, x->st_def_gen);
    else if (!nowait)
        broker_conn_send_method(ch->c, ch->id, &m);
}

static qm_exchange *need_exchange(channel *ch, amqp_bytes name, uint32_t method_id)
{
    qm_exchange *x = qm_exchange_find(ch->c->vhost, (const char *)name.p, name.len);
    if (!x)
        broker_channel_error(ch, SL_ERR_NOT_FOUND, method_id,
                             "no exchange '" BYTES_FMT "' in vhost '%s'", BYTES_ARG(name),
                             ch->c->vhost->name);
    return x;
}

static void declare(channel *ch, const amqp_exchange_declare *d)
{
    const uint32_t id = AMQP_EXCHANGE_DECLARE;
    if (d->exchange.len == 0) {
        broker_channel_error(ch, SL_ERR_ACCESS_REFUSED, id,
                             "operation not permitted on the default exchange");
        return;
    }
    if (d->passive) {
        qm_exchange *x = need_exchange(ch, d->exchange, id);
        if (x)
            reply_existing(ch, x, d->nowait);
        return;
    }
    int type = qm_exchange_type_parse((const char *)d->type.p, d->type.len);
    if (type < 0) {
        broker_conn_error(ch->c, SL_ERR_COMMAND_INVALID, id,
                          "invalid exchange type '" BYTES_FMT "'", BYTES_ARG(d->type));
        return;
    }
    if (!broker_channel_allowed(ch, ACC_EXCHANGE, d->exchange, ACC_CONFIGURE, id))
        return;
    int exists = qm_exchange_find(ch->c->vhost, (const char *)d->exchange.p, d->exchange.len) != 0;
    char why[600];
    if (node_exchange_new_name((const char *)d->exchange.p, d->exchange.len, exists, why,
                               sizeof why) != SL_OK) {
        broker_channel_error(ch, SL_ERR_ACCESS_REFUSED, id, "%s", why);
        return;
    }
    amqp_value ae;
    amqp_bytes ae_name;
    if (!exists && amqp_table_get(d->arguments, "alternate-exchange", &ae) &&
        amqp_value_str(&ae, &ae_name) &&
        (!broker_channel_allowed(ch, ACC_EXCHANGE, d->exchange, ACC_READ, id) ||
         !broker_channel_allowed(ch, ACC_EXCHANGE, ae_name, ACC_WRITE, id)))
        return;
    qm_exchange_decl decl = {
        .name = (const char *)d->exchange.p,
        .name_len = d->exchange.len,
        .type = type,
        .durable = d->durable,
        .auto_delete = d->auto_delete,
        .internal = d->internal,
        .arguments = d->arguments,
    };
    qm_exchange *x;
    char err[256];
    sl_err e = qm_exchange_declare(ch->c->vhost, &decl, &x, err, sizeof err);
    if (e != SL_OK) {
        broker_channel_error(ch, e, id, "%s", err);
        return;
    }
    reply(ch, AMQP_EXCHANGE_DECLARE_OK, d->nowait, x->durable);
}

static void delete_exchange(channel *ch, const amqp_exchange_delete *d)
{
    const uint32_t id = AMQP_EXCHANGE_DELETE;
    char why[600];
    if (node_exchange_delete_check((const char *)d->exchange.p, d->exchange.len, ch->c->vhost->name,
                                   why, sizeof why) != SL_OK) {
        broker_channel_error(ch, SL_ERR_ACCESS_REFUSED, id, "%s", why);
        return;
    }
    if (!broker_channel_allowed(ch, ACC_EXCHANGE, d->exchange, ACC_CONFIGURE, id))
        return;
    qm_exchange *x = qm_exchange_find(ch->c->vhost, (const char *)d->exchange.p, d->exchange.len);
    int durable = x && x->durable;
    if (x) {
        char err[256];
        sl_err e = qm_exchange_delete(x, d->if_unused, err, sizeof err);
        if (e != SL_OK) {
            broker_channel_error(ch, e, id, "%s", err);
            return;
        }
    }
    /* Deleting a missing exchange is not an error (RabbitMQ 3.x). */
    reply(ch, AMQP_EXCHANGE_DELETE_OK, d->nowait, durable);
}

static void bind_exchanges(channel *ch, uint32_t id, amqp_bytes dest, amqp_bytes src,
                           amqp_bytes key, amqp_bytes args, int nowait)
{
    int bind = id == AMQP_EXCHANGE_BIND;
    if (!broker_channel_bind_allowed(ch, ACC_EXCHANGE, dest, src, key, id))
        return;
    qm_exchange *d = need_exchange(ch, dest, id);
    if (!d)
        return;
    qm_exchange *s = need_exchange(ch, src, id);
    if (!s)
        return;
    int durable = s->durable && d->durable; /* an unbind may auto-delete s */
    if (bind) {
        char err[256];
        sl_err e = qm_bind_exchange(s, d, key, args, err, sizeof err);
        if (e != SL_OK) {
            broker_channel_error(ch, e, id, "%s", err);
            return;
        }
        reply(ch, AMQP_EXCHANGE_BIND_OK, nowait, durable);
    } else {
        qm_unbind_exchange(s, d, key, args);
        reply(ch, AMQP_EXCHANGE_UNBIND_OK, nowait, durable);
    }
}

void broker_h_exchange(channel *ch, const amqp_method *m)
{
    switch (m->id) {
    case AMQP_EXCHANGE_DECLARE:
        declare(ch, &m->u.exchange_declare);
        return;
    case AMQP_EXCHANGE_DELETE:
        delete_exchange(ch, &m->u.exchange_delete);
        return;
    case AMQP_EXCHANGE_BIND: {
        const amqp_exchange_bind *b = &m->u.exchange_bind;
        bind_exchanges(ch, m->id, b->destination, b->source, b->routing_key, b->arguments,
                       b->nowait);
        return;
    }
    case AMQP_EXCHANGE_UNBIND: {
        const amqp_exchange_unbind *b = &m->u.exchange_unbind;
        bind_exchanges(ch, m->id, b->destination, b->source, b->routing_key, b->arguments,
                       b->nowait);
        return;
    }
    default:
        broker_conn_error(ch->c, SL_ERR_COMMAND_INVALID, m->id, "unexpected method %s",
                          amqp_method_name(m->id));
    }
}
