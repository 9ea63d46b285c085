/* message.c - immutable, refcounted messages.
 *
 * One allocation holds the struct (with the message's first position, pos0), the exchange and
 * routing-key strings (NUL-terminated, for convenience), the raw properties and the body, so
 * a message costs one malloc and is shared by every queue it was routed to (DESIGN.md
 * section 4). The fields parsed out of the
 * properties (persistent, priority, expiration) are cached because TTL and priority are
 * needed at every enqueue.
 */
#include <stdlib.h>
#include <string.h>

#include "../amqp/method.h"
#include "qm_internal.h"

/* RabbitMQ's rule (rabbit_basic:parse_expiration, Erlang's string:to_integer): an optional
 * sign, ASCII digits, nothing after them; not negative ("-0" is 0), at most 10 years in ms.
 * The reason has RabbitMQ's words, so the 406 reads the same. */
int qm_expiration_parse(amqp_bytes s, uint64_t *ms, char *why, size_t whylen)
{
    size_t i = 0;
    int neg = 0;
    if (i < s.len && (s.p[i] == '+' || s.p[i] == '-'))
        neg = s.p[i++] == '-';
    size_t digits = i;
    uint64_t v = 0;
    int big = 0;
    while (i < s.len && s.p[i] >= '0' && s.p[i] <= '9') {
        if (v > (UINT64_MAX - 9) / 10)
            big = 1;
        else
            v = v * 10 + (uint64_t)(s.p[i] - '0');
        i++;
    }
    if (i == digits) {
        snprintf(why, whylen, "no_integer");
        return -1;
    }
    if (i < s.len) {
        snprintf(why, whylen, "{leftover_string,\"%.*s\"}", (int)(s.len - i),
                 (const char *)s.p + i);
        return -1;
    }
    if (neg && (v || big)) {
        snprintf(why, whylen, "{value_negative,-%.*s}", (int)(s.len - digits),
                 (const char *)s.p + digits);
        return -1;
    }
    if (big || v > QM_EXPIRATION_MAX_MS) {
        snprintf(why, whylen, "{value_too_large,%.*s}", (int)(s.len - digits),
                 (const char *)s.p + digits);
        return -1;
    }
    *ms = v;
    return 0;
}

/* The doors refuse invalid expirations at publish; one that is stored anyway (older data)
 * is taken as no TTL. */
static int parse_expiration(amqp_bytes s, uint64_t *out)
{
    char why[8];
    return qm_expiration_parse(s, out, why, sizeof why) == 0;
}

/* What queued messages take in memory: each message's whole allocation (header with its first
 * position, names, properties, body) and each further position. Bodies alone would let a
 * queue of small messages outgrow the budget many times over (a 16 byte body costs about 200
 * bytes queued). */
static uint64_t mem_bytes;
uint64_t qm_mem_budget;

void qm_memory_account(int64_t delta)
{
    mem_bytes += (uint64_t)delta;
}

uint64_t qm_memory_bytes(void)
{
    return mem_bytes;
}

void qm_set_memory_budget(uint64_t bytes)
{
    qm_mem_budget = bytes;
}

int qm_memory_over_budget(void)
{
    return qm_mem_budget && mem_bytes > qm_mem_budget;
}

qm_message *qm_message_new(amqp_bytes exchange, amqp_bytes routing_key, const uint8_t *props,
                           uint32_t props_len, uint64_t body_len)
{
    amqp_basic_props bp;
    if (!props_len || amqp_props_decode(props, props_len, &bp) != 0)
        bp.flags = 0;
    return qm_message_new_decoded(exchange, routing_key, props, props_len, body_len, &bp);
}

/* Bytes of a message's allocation with room for body_cap bytes of body. */
static size_t message_size(const qm_message *m, uint64_t body_cap)
{
    return sizeof(qm_message) + m->exchange_len + 1 + m->routing_key_len + 1 + m->props_len +
           (size_t)body_cap;
}

qm_message *qm_message_new_decoded(amqp_bytes exchange, amqp_bytes routing_key,
                                   const uint8_t *props, uint32_t props_len, uint64_t body_len,
                                   const amqp_basic_props *bp)
{
    return qm_message_new_partial(exchange, routing_key, props, props_len, body_len, body_len, bp);
}

qm_message *qm_message_new_partial(amqp_bytes exchange, amqp_bytes routing_key,
                                   const uint8_t *props, uint32_t props_len, uint64_t body_len,
                                   uint64_t body_cap, const amqp_basic_props *bp)
{
    size_t total =
        sizeof(qm_message) + exchange.len + 1 + routing_key.len + 1 + props_len + (size_t)body_cap;
    qm_message *m = sl_xmalloc(total);
    uint8_t *p = (uint8_t *)(m + 1);

    memset(m, 0, sizeof *m);
    m->refs = 1;
    /* Both lengths fit 16 bits: frames carry the strings as short strings, store records
     * with 16-bit lengths, and queue arguments that name them are refused beyond 255. */
    m->exchange_len = (uint16_t)exchange.len;
    m->routing_key_len = (uint16_t)routing_key.len;
    m->props_len = props_len;
    m->body_len = body_len;

    if (exchange.len)
        memcpy(p, exchange.p, exchange.len);
    p[exchange.len] = 0;
    p += exchange.len + 1;
    if (routing_key.len)
        memcpy(p, routing_key.p, routing_key.len);
    p[routing_key.len] = 0;
    p += routing_key.len + 1;
    if (props_len)
        memcpy(p, props, props_len);
    mem_bytes += total;

    m->persistent = (bp->flags & AMQP_P_DELIVERY_MODE) && bp->delivery_mode == 2;
    m->priority = (bp->flags & AMQP_P_PRIORITY) ? bp->priority : 0;
    if ((bp->flags & AMQP_P_EXPIRATION) && parse_expiration(bp->expiration, &m->expiration_ms))
        m->has_expiration = 1;
    return m;
}

qm_message *qm_message_grow(qm_message *m, uint64_t old_cap, uint64_t new_cap)
{
    size_t before = message_size(m, old_cap), after = message_size(m, new_cap);
    /* Nobody else holds the message yet (refs 1, no position used): it may move. */
    m = sl_xrealloc(m, after);
    mem_bytes += after - before;
    return m;
}

void qm_message_free_partial(qm_message *m, uint64_t body_cap)
{
    if (!m)
        return;
    mem_bytes -= message_size(m, body_cap);
    sl_free(m);
}

void qm_message_ref(qm_message *m)
{
    m->refs++;
}

void qm_message_unref(qm_message *m)
{
    if (m && --m->refs == 0) {
        mem_bytes -= message_size(m, m->body_len);
        sl_free(m);
    }
}
