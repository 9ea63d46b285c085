/* reply_to.c - RabbitMQ's direct reply-to: RPC replies that go straight to the requesting
 * channel, with no queue in between.
 *
 *   - A channel consumes from the pseudo-queue "amq.rabbitmq.reply-to" (no-ack only). It gets
 *     a name of its own, "amq.rabbitmq.reply-to." + 22 random url-safe characters: the name
 *     is the capability, so it cannot be guessed from another connection.
 *   - A publish on that channel whose reply-to property is "amq.rabbitmq.reply-to" has it
 *     rewritten to the channel's name (without the consumer: 406, as RabbitMQ).
 *   - A publish to the default exchange with the name as routing key is delivered to that
 *     channel's reply consumer at once, from any connection of the same vhost; if the channel
 *     is gone the message is unroutable (returned when mandatory).
 *   - queue.declare passive of the pseudo-queue, or of a live name, answers declare-ok with
 *     zero counts (clients probe for the feature that way).
 * The names live in the broker's reply_to map (name -> channel) from consume to cancel or
 * channel close. Replies skip the queue model: nothing is stored, nothing is redelivered.
 */
#include "broker/broker.h"

#include <string.h>
#include <sys/random.h>

#include "core/mem.h"

#define PSEUDO "amq.rabbitmq.reply-to"
#define PSEUDO_LEN (sizeof PSEUDO - 1)

int broker_reply_to_is_pseudo(amqp_bytes name)
{
    return name.len == PSEUDO_LEN && !memcmp(name.p, PSEUDO, PSEUDO_LEN);
}

static int is_reply_name(amqp_bytes name)
{
    return name.len > PSEUDO_LEN + 1 && !memcmp(name.p, PSEUDO ".", PSEUDO_LEN + 1);
}

static channel *target_of(broker *b, amqp_bytes name)
{
    return b->reply_to ? sl_map_get(b->reply_to, name.p, name.len) : NULL;
}

void broker_reply_to_consume(channel *ch, const amqp_basic_consume *bc, const char *tag)
{
    const uint32_t id = AMQP_BASIC_CONSUME;
    if (!bc->no_ack) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, id, "reply consumer cannot acknowledge");
        return;
    }
    if (ch->reply_tag) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, id, "reply consumer already set");
        return;
    }
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint8_t rnd[22];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        broker_channel_error(ch, SL_ERR_INTERNAL, id, "no randomness for a reply-to name");
        return;
    }
    char name[PSEUDO_LEN + 1 + sizeof rnd + 1];
    memcpy(name, PSEUDO ".", PSEUDO_LEN + 1);
    for (size_t i = 0; i < sizeof rnd; i++)
        name[PSEUDO_LEN + 1 + i] = alphabet[rnd[i] & 63];
    name[sizeof name - 1] = 0;
    broker *b = ch->c->b;
    if (!b->reply_to)
        b->reply_to = sl_map_new();
    sl_map_put(b->reply_to, name, strlen(name), ch);
    ch->reply_name = sl_xstrdup(name);
    ch->reply_tag = sl_xstrdup(tag);
    if (!bc->nowait) {
        amqp_method ok = {.id = AMQP_BASIC_CONSUME_OK};
        ok.u.basic_consume_ok.consumer_tag = amqp_cstr(ch->reply_tag);
        broker_conn_send_method(ch->c, ch->id, &ok);
    }
}

int broker_reply_to_cancel(channel *ch, amqp_bytes tag)
{
    if (!ch->reply_tag || strlen(ch->reply_tag) != tag.len || memcmp(ch->reply_tag, tag.p, tag.len))
        return 0;
    broker_reply_to_release(ch);
    return 1;
}

void broker_reply_to_release(channel *ch)
{
    if (!ch->reply_tag)
        return;
    broker *b = ch->c->b;
    sl_map_del(b->reply_to, ch->reply_name, strlen(ch->reply_name));
    sl_free(ch->reply_name);
    sl_free(ch->reply_tag);
    ch->reply_name = ch->reply_tag = NULL;
}

int broker_reply_to_rewrite(channel *ch, amqp_basic_props *props, sl_buf *out)
{
    if (!(props->flags & AMQP_P_REPLY_TO) || !broker_reply_to_is_pseudo(props->reply_to))
        return 0;
    if (!ch->reply_tag) {
        broker_channel_error(ch, SL_ERR_PRECONDITION, AMQP_BASIC_PUBLISH,
                             "fast reply consumer does not exist");
        return -1;
    }
    props->reply_to = amqp_cstr(ch->reply_name);
    amqp_props_encode(out, props);
    return 1;
}

int broker_reply_to_route(channel *ch, const qm_message *m, int *delivered)
{
    amqp_bytes rk = qm_msg_routing_key(m);
    *delivered = 0;
    if (qm_msg_exchange(m).len || !is_reply_name(rk))
        return 0;
    channel *t = target_of(ch->c->b, rk);
    if (!t || t->state != CH_OPEN || t->c->state != CONN_OPEN || t->c->vhost != ch->c->vhost)
        return 1; /* the requester is gone (or in another vhost): unroutable */
    conn *c = t->c;
    amqp_deliver_write(&c->out, t->id, amqp_cstr(t->reply_tag), ++t->next_tag, 0,
                       qm_msg_exchange(m), rk, qm_msg_props(m), m->props_len, qm_msg_body(m),
                       m->body_len, c->frame_max ? c->frame_max - AMQP_FRAME_OVERHEAD : 0);
    broker_mark_dirty(c);
    *delivered = 1;
    return 1;
}

int broker_reply_to_declare_passive(channel *ch, amqp_bytes name)
{
    channel *t = is_reply_name(name) ? target_of(ch->c->b, name) : NULL;
    if (!broker_reply_to_is_pseudo(name) && !(t && t->c->vhost == ch->c->vhost))
        return 0;
    amqp_method ok = {.id = AMQP_QUEUE_DECLARE_OK};
    ok.u.queue_declare_ok.queue = name;
    broker_conn_send_method(ch->c, ch->id, &ok);
    return 1;
}
