/* message.c - immutable, refcounted messages.
 *
 * One allocation holds the struct (with the message's first position, pos0), the store
 * fields of a message that may be stored, the raw properties and the body, so a message
 * costs one allocation and is shared by every queue it was routed to (DESIGN.md section 4).
 * The exchange and routing key are a route shared by the messages published with the same
 * pair. Persistent and priority are cached (needed at every enqueue); the expiration is
 * parsed from the properties when an enqueue needs it.
 */
#include <stdlib.h>
#include <string.h>

#include "amqp/method.h"
#include "core/slab.h"
#include "qm/qm_internal.h"

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
 * queue of small messages outgrow the budget many times over (a 16 byte body costs about 96
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

uint64_t qm_memory_budget(void)
{
    return qm_mem_budget;
}

void qm_set_memory_budget(uint64_t bytes)
{
    qm_mem_budget = bytes;
}

int qm_memory_over_budget(void)
{
    return qm_mem_budget && mem_bytes > qm_mem_budget;
}

/* ---- routes: (exchange, routing key) shared between messages ----
 *
 * A direct-mapped cache of recent routes: a publish whose pair is in it shares that route
 * (one more reference); a miss makes a new route and puts it in the slot, letting go of the
 * one there (which lives on while messages use it). A producer publishing to a few keys hits
 * every time; one with a new key per message pays one small allocation per message, as the
 * inline copy of the names did. The cache holds a reference on what it keeps. */
#define ROUTE_SLOTS 1024
static qm_msg_route *route_cache[ROUTE_SLOTS];

static size_t route_size(size_t exlen, size_t rklen)
{
    return sizeof(qm_msg_route) + exlen + 1 + rklen + 1;
}

static void route_unref(const qm_msg_route *cr)
{
    qm_msg_route *r = (qm_msg_route *)cr;
    if (--r->refs == 0) {
        mem_bytes -= route_size(r->exchange_len, r->routing_key_len);
        sl_free(r);
    }
}

static const qm_msg_route *route_get(amqp_bytes ex, amqp_bytes rk)
{
    /* FNV-1a over both names, the lengths telling them apart */
    uint32_t h = 2166136261u ^ (uint32_t)ex.len ^ ((uint32_t)rk.len << 8);
    for (size_t i = 0; i < ex.len; i++)
        h = (h ^ ex.p[i]) * 16777619u;
    for (size_t i = 0; i < rk.len; i++)
        h = (h ^ rk.p[i]) * 16777619u;
    qm_msg_route **slot = &route_cache[(h ^ (h >> 16)) & (ROUTE_SLOTS - 1)];
    qm_msg_route *r = *slot;
    if (r && r->exchange_len == ex.len && r->routing_key_len == rk.len &&
        !memcmp(r->names, ex.p, ex.len) && !memcmp(r->names + ex.len + 1, rk.p, rk.len)) {
        r->refs++;
        return r;
    }
    size_t size = route_size(ex.len, rk.len);
    r = sl_xmalloc(size);
    mem_bytes += size;
    /* Both lengths fit 8 bits: frames carry the names as short strings, and queue arguments
     * that name them are refused beyond 255. */
    r->exchange_len = (uint8_t)ex.len;
    r->routing_key_len = (uint8_t)rk.len;
    if (ex.len)
        memcpy(r->names, ex.p, ex.len);
    r->names[ex.len] = 0;
    if (rk.len)
        memcpy(r->names + ex.len + 1, rk.p, rk.len);
    r->names[ex.len + 1 + rk.len] = 0;
    r->refs = 2; /* the message's and the cache's */
    if (*slot)
        route_unref(*slot);
    *slot = r;
    return r;
}

int qm_msg_expiration(const qm_message *m, uint64_t *ms)
{
    if (!m->has_expiration)
        return 0;
    amqp_basic_props bp;
    if (amqp_props_decode(qm_msg_props(m), m->props_len, &bp) != 0 ||
        !(bp.flags & AMQP_P_EXPIRATION))
        return 0;
    return parse_expiration(bp.expiration, ms);
}

/* ---- messages ---- */

qm_message *qm_message_new(amqp_bytes exchange, amqp_bytes routing_key, const uint8_t *props,
                           uint32_t props_len, uint64_t body_len)
{
    amqp_basic_props bp;
    if (!props_len || amqp_props_decode(props, props_len, &bp) != 0)
        bp.flags = 0;
    return qm_message_new_decoded(exchange, routing_key, props, props_len, body_len, &bp);
}

/* Bytes of a message's allocation with room for body_cap bytes of body. */
static size_t alloc_size(int has_store, uint32_t props_len, uint64_t body_cap)
{
    return sizeof(qm_message) + (has_store ? sizeof(qm_msg_store) : 0) + props_len +
           (size_t)body_cap;
}

static size_t message_size(const qm_message *m, uint64_t body_cap)
{
    return alloc_size(m->has_store, m->props_len, body_cap);
}

/* Small messages come from the slab allocator (no malloc header, 8-byte classes): what a
 * deep queue of small messages is made of. Messages up to SL_MID_MAX (1 KiB bodies) come from
 * the mid tier, which reuses freed blocks of their size without malloc's bins. *cls says
 * which: a slab class, a mid class, or 0 for malloc. What the memory accounting counts is
 * what the block really takes. */
static void *block_alloc(size_t n, unsigned *cls)
{
    void *p = sl_slab_alloc(n, cls);
    if (!p)
        p = sl_mid_alloc(n, cls);
    if (p)
        return p;
    *cls = 0;
    return sl_xmalloc(n);
}

static size_t block_bytes(size_t n, unsigned cls)
{
    if (!cls)
        return n;
    return sl_is_mid(cls) ? sl_mid_size(cls) : sl_slab_size(cls);
}

static void block_free(void *p, unsigned cls)
{
    if (!cls)
        sl_free(p);
    else if (sl_is_mid(cls))
        sl_mid_free(p, cls);
    else
        sl_slab_free(p, cls);
}

qm_message *qm_message_new_decoded(amqp_bytes exchange, amqp_bytes routing_key,
                                   const uint8_t *props, uint32_t props_len, uint64_t body_len,
                                   const amqp_basic_props *bp)
{
    return qm_message_new_partial(exchange, routing_key, props, props_len, body_len, body_len, bp);
}

static qm_message *message_make(amqp_bytes exchange, amqp_bytes routing_key, const uint8_t *props,
                                uint32_t props_len, uint64_t body_len, uint64_t body_cap,
                                const amqp_basic_props *bp, int stored)
{
    int persistent = (bp->flags & AMQP_P_DELIVERY_MODE) && bp->delivery_mode == 2;
    int has_store = persistent || stored;
    size_t total = alloc_size(has_store, props_len, body_cap);
    unsigned cls;
    qm_message *m = block_alloc(total, &cls);
    memset(m, 0, sizeof *m);
    m->alloc = (uint16_t)cls;
    m->refs = 1;
    m->props_len = props_len;
    m->body_len = (uint32_t)body_len;
    m->has_store = (uint8_t)has_store;
    if (has_store)
        memset(qm_msg_st(m), 0, sizeof(qm_msg_store));
    if (props_len)
        memcpy(qm_msg_props(m), props, props_len);
    mem_bytes += block_bytes(total, cls);
    m->route = route_get(exchange, routing_key);
    m->persistent = (uint8_t)persistent;
    m->priority = (bp->flags & AMQP_P_PRIORITY) ? bp->priority : 0;
    uint64_t ms;
    if ((bp->flags & AMQP_P_EXPIRATION) && parse_expiration(bp->expiration, &ms))
        m->has_expiration = 1;
    return m;
}

qm_message *qm_message_new_partial(amqp_bytes exchange, amqp_bytes routing_key,
                                   const uint8_t *props, uint32_t props_len, uint64_t body_len,
                                   uint64_t body_cap, const amqp_basic_props *bp)
{
    return message_make(exchange, routing_key, props, props_len, body_len, body_cap, bp, 0);
}

qm_message *qm_message_new_stored(amqp_bytes exchange, amqp_bytes routing_key, const uint8_t *props,
                                  uint32_t props_len, uint64_t body_len)
{
    amqp_basic_props bp;
    if (!props_len || amqp_props_decode(props, props_len, &bp) != 0)
        bp.flags = 0;
    return message_make(exchange, routing_key, props, props_len, body_len, body_len, &bp, 1);
}

qm_message *qm_message_grow(qm_message *m, uint64_t old_cap, uint64_t new_cap)
{
    size_t before = message_size(m, old_cap), after = message_size(m, new_cap);
    /* Nobody else holds the message yet (refs 1, no position used): it may move. */
    unsigned cls;
    qm_message *nm = block_alloc(after, &cls);
    memcpy(nm, m, before < after ? before : after);
    nm->alloc = (uint16_t)cls;
    mem_bytes += block_bytes(after, cls);
    mem_bytes -= block_bytes(before, m->alloc);
    block_free(m, m->alloc);
    return nm;
}

void qm_message_free_partial(qm_message *m, uint64_t body_cap)
{
    if (!m)
        return;
    mem_bytes -= block_bytes(message_size(m, body_cap), m->alloc);
    route_unref(m->route);
    block_free(m, m->alloc);
}

void qm_message_ref(qm_message *m)
{
    m->refs++;
}

void qm_message_unref(qm_message *m)
{
    if (m && --m->refs == 0) {
        mem_bytes -= block_bytes(message_size(m, m->body_len), m->alloc);
        route_unref(m->route);
        block_free(m, m->alloc);
    }
}
