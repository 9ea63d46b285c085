/* superstream.c - a super stream's partitions and routes (superstream.h), read from the
 * exchange's bindings as RabbitMQ 3.13's rabbit_stream_manager reads them.
 *
 * Nothing here changes the model: the lists are built fresh on each call from the bindings,
 * so they can never disagree with what a publish through the exchange reaches. The arrays
 * returned hold queue pointers valid until the model next changes (a caller that deletes
 * queues copies their names first).
 */
#include "qm/superstream.h"

#include <stdlib.h>
#include <string.h>

#include "amqp/table.h"
#include "core/mem.h"

int qm_queue_is_stream(const qm_queue *q)
{
    return q && !q->is_subqueue && q->args.stream && q->stream;
}

/* RabbitMQ's binary_to_integer: an optional sign and decimal digits, nothing else. */
static int parse_decimal(amqp_bytes s, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (i < s.len && (s.p[i] == '-' || s.p[i] == '+'))
        neg = s.p[i++] == '-';
    if (i == s.len)
        return 0;
    uint64_t v = 0;
    for (; i < s.len; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return 0;
        if (v > (UINT64_C(1) << 62)) /* far beyond any partition count: refuse, never wrap */
            return 0;
        v = v * 10 + (uint64_t)(s.p[i] - '0');
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 1;
}

int qm_superstream_order(const qm_binding *b, int64_t *order)
{
    amqp_value v;
    amqp_bytes s;
    if (!b->args_len ||
        !amqp_table_get((amqp_bytes){b->args, b->args_len}, QM_SUPERSTREAM_ORDER_ARG, &v))
        return 0;
    if (v.tag != 'T' && amqp_value_int(&v, order))
        return 1;
    /* the HTTP helper of RabbitMQ's client tests sends the order as a JSON string */
    return amqp_value_str(&v, &s) && parse_decimal(s, order);
}

typedef struct part {
    const qm_binding *b;
    int has_order;
    int64_t order;
} part;

static int bytes_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

/* RabbitMQ's sort_partitions: ordered ones first by order; its lists:sort is stable, and
 * 3.13 lists a source's bindings by key then destination (its route table's order). */
static int part_cmp(const void *pa, const void *pb)
{
    const part *a = pa, *b = pb;
    if (a->has_order != b->has_order)
        return a->has_order ? -1 : 1;
    if (a->has_order && a->order != b->order)
        return a->order < b->order ? -1 : 1;
    int c = bytes_cmp(a->b->key, a->b->key_len, b->b->key, b->b->key_len);
    if (c)
        return c;
    const char *an = a->b->dest_queue->name, *bn = b->b->dest_queue->name;
    return bytes_cmp(an, strlen(an), bn, strlen(bn));
}

qm_queue **qm_superstream_partitions(const qm_exchange *x, size_t *n)
{
    *n = 0;
    if (!x->n_bindings)
        return NULL;
    part *p = sl_xcalloc(x->n_bindings, sizeof *p);
    size_t k = 0;
    for (const qm_binding *b = x->bindings; b && k < x->n_bindings; b = b->next) {
        if (!qm_queue_is_stream(b->dest_queue))
            continue;
        p[k].b = b;
        p[k].has_order = qm_superstream_order(b, &p[k].order);
        k++;
    }
    qm_queue **out = NULL;
    if (k) {
        qsort(p, k, sizeof *p, part_cmp);
        out = sl_xcalloc(k, sizeof *out);
        for (size_t i = 0; i < k; i++)
            out[i] = p[i].b->dest_queue;
    }
    sl_free(p);
    *n = k;
    return out;
}

qm_queue **qm_superstream_route(qm_exchange *x, amqp_bytes key, size_t *n)
{
    *n = 0;
    if (!x->name[0]) {
        /* the default exchange: the queue named by the key (qm_route would make an outgoing
         * queue for a format name: a query must change nothing) */
        qm_queue *q = key.len ? sl_map_get(x->vhost->queues, key.p, key.len) : NULL;
        if (!qm_queue_is_stream(q))
            return NULL;
        qm_queue **one = sl_xmalloc(sizeof *one);
        one[0] = q;
        *n = 1;
        return one;
    }
    size_t cap = 16, total = 0;
    qm_queue **out = sl_xcalloc(cap, sizeof *out);
    size_t got = qm_route(x, key, (amqp_bytes){NULL, 0}, out, cap, &total);
    if (total > cap) { /* bounded: the second call has room for every queue the first saw */
        cap = total;
        out = sl_xrealloc(out, cap * sizeof *out);
        got = qm_route(x, key, (amqp_bytes){NULL, 0}, out, cap, &total);
        if (got > cap)
            got = cap;
    }
    size_t k = 0;
    for (size_t i = 0; i < got; i++)
        if (qm_queue_is_stream(out[i]))
            out[k++] = out[i];
    if (!k) {
        sl_free(out);
        return NULL;
    }
    *n = k;
    return out;
}
