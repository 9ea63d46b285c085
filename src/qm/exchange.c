/* exchange.c - exchanges and bindings: declare, delete, bind, unbind.
 *
 * A binding is on three doubly linked lists, so that no operation walks bindings it does not
 * concern, however many there are (10,000 queues bound to one exchange is ordinary):
 *   - its source's outgoing list (source->bindings), which routing scans for fanout, topic
 *     and headers exchanges;
 *   - the chain of its source's bindings with the same key, headed in source->by_key: the
 *     direct route is one lookup, and bind/unbind find a duplicate without a scan;
 *   - its destination's inbound list (queue->inbound or exchange->inbound): deleting a queue
 *     or an exchange removes its bindings without visiting every exchange of the vhost;
 * and a topic exchange's bindings are also in its pattern trie (topic.c).
 * The default exchange "" has no stored bindings: routing looks queues up by name instead.
 * An auto-delete exchange goes away when its last outgoing binding is removed; removals
 * that can trigger that collect the candidates by name first and delete them afterwards, so
 * no map is modified while it is being walked and no exchange is freed twice.
 */
#include <string.h>

#include "core/list.h"
#include "amqp/table.h"
#include "qm/qm_internal.h"

static const char *const type_names[] = {"direct", "fanout", "topic", "headers"};

int qm_exchange_type_parse(const char *s, size_t len)
{
    for (int i = 0; i < 4; i++)
        if (strlen(type_names[i]) == len && memcmp(type_names[i], s, len) == 0)
            return i;
    return -1;
}

const char *qm_exchange_type_name(int type)
{
    return type >= 0 && type < 4 ? type_names[type] : "unknown";
}

qm_exchange *qm_exchange_find(qm_vhost *vh, const char *name, size_t len)
{
    return sl_map_get(vh->exchanges, name, len);
}

qm_exchange *qm_exchange_create(qm_vhost *vh, const char *name, size_t len, int type, int durable,
                                int auto_delete, int internal)
{
    qm_exchange *x = sl_xcalloc(1, sizeof *x);
    x->name = sl_xstrndup(name, len);
    x->vhost = vh;
    x->type = type;
    x->durable = (uint8_t)durable;
    x->auto_delete = (uint8_t)auto_delete;
    x->internal = (uint8_t)internal;
    sl_map_put(vh->exchanges, x->name, len, x);
    sl_oset_insert(&vh->exchange_order, &x->by_name, x->name, len);
    return x;
}

static qm_binding **inbound_head(qm_binding *b)
{
    return b->dest_queue ? &b->dest_queue->inbound : &b->dest_exchange->inbound;
}

static void binding_link(qm_binding *b)
{
    qm_exchange *src = b->source;
    SL_LIST_PUSH(src->bindings, b, prev, next);
    src->n_bindings++;

    if (!src->by_key)
        src->by_key = sl_map_new();
    qm_binding *first = sl_map_get(src->by_key, b->key, b->key_len);
    b->kprev = NULL;
    b->knext = first;
    if (first)
        first->kprev = b;
    sl_map_put(src->by_key, b->key, b->key_len, b);

    if (src->type == QM_EX_TOPIC)
        qm_topic_add(src, b);

    qm_binding **in = inbound_head(b);
    SL_LIST_PUSH(*in, b, dprev, dnext);
    if (b->dest_exchange)
        b->dest_exchange->n_inbound++;
}

static void binding_unlink(qm_binding *b)
{
    qm_exchange *src = b->source;
    SL_LIST_UNLINK(src->bindings, b, prev, next);
    src->n_bindings--;

    if (b->kprev)
        b->kprev->knext = b->knext;
    else if (b->knext)
        sl_map_put(src->by_key, b->key, b->key_len, b->knext);
    else
        sl_map_del(src->by_key, b->key, b->key_len);
    if (b->knext)
        b->knext->kprev = b->kprev;

    if (src->type == QM_EX_TOPIC)
        qm_topic_remove(src, b);

    SL_LIST_UNLINK(*inbound_head(b), b, dprev, dnext);
    if (b->dest_exchange)
        b->dest_exchange->n_inbound--;
}

static void binding_free(qm_binding *b)
{
    binding_unlink(b);
    sl_free(b->key);
    sl_free(b->args);
    sl_free(b);
}

qm_binding *qm_bindings_with_key(const qm_exchange *x, amqp_bytes key)
{
    return x->by_key ? sl_map_get(x->by_key, key.p, key.len) : NULL;
}

void qm_exchange_clear_bindings(qm_exchange *x)
{
    while (x->bindings)
        binding_free(x->bindings);
}

uint64_t qm_exchange_epoch;

/* Frees the exchange and its outgoing bindings only (used by qm_node_free too). */
void qm_exchange_free(qm_exchange *x)
{
    qm_exchange_epoch++; /* cached pointers to exchanges are stale from now on */
    qm_exchange_clear_bindings(x);
    sl_map_free(x->by_key);
    sl_free(x->name);
    sl_free(x->args);
    sl_free(x->alternate);
    sl_free(x);
}

static void exchange_destroy(qm_exchange *x);

typedef struct namelist {
    char **v;
    size_t n, cap;
} namelist;

static void names_add(namelist *l, const char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4;
        l->v = sl_xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = sl_xstrdup(s);
}

/* Delete the auto-delete exchanges named in l that have lost all their bindings. */
static void names_autodelete(qm_vhost *vh, namelist *l)
{
    for (size_t i = 0; i < l->n; i++) {
        qm_exchange *x = qm_exchange_find(vh, l->v[i], strlen(l->v[i]));
        if (x && x->auto_delete && !x->n_bindings && !x->deleting)
            exchange_destroy(x);
        sl_free(l->v[i]);
    }
    sl_free(l->v);
}

/* Remove every binding whose destination is q (or dx), from whichever exchanges they leave. */
static void remove_bindings_to(qm_vhost *vh, qm_queue *q, qm_exchange *dx)
{
    namelist cand = {0};
    qm_binding **in = q ? &q->inbound : &dx->inbound;
    while (*in) {
        qm_binding *b = *in;
        qm_exchange *e = b->source;
        binding_free(b);
        if (e->auto_delete && !e->n_bindings && !e->deleting)
            names_add(&cand, e->name);
    }
    names_autodelete(vh, &cand);
}

void qm_bindings_remove_queue(qm_queue *q)
{
    remove_bindings_to(q->vhost, q, NULL);
}

static void exchange_destroy(qm_exchange *x)
{
    qm_vhost *vh = x->vhost;
    QM_PERSIST(exchange_destroyed, x);
    x->deleting = 1;
    sl_map_del(vh->exchanges, x->name, strlen(x->name));
    sl_oset_remove(&vh->exchange_order, &x->by_name);
    /* outgoing first (this also drops a self-binding), then the inbound ones */
    qm_exchange_clear_bindings(x);
    if (x->inbound)
        remove_bindings_to(vh, NULL, x);
    qm_exchange_free(x);
}

sl_err qm_exchange_delete(qm_exchange *x, int if_unused, char *err, size_t errlen)
{
    if (if_unused && (x->n_bindings || x->n_inbound)) {
        snprintf(err, errlen, "exchange '%s' in vhost '%s' in use", x->name, x->vhost->name);
        return SL_ERR_PRECONDITION;
    }
    exchange_destroy(x);
    return SL_OK;
}

static int find_alternate(amqp_bytes args, amqp_bytes *out)
{
    amqp_value v;
    return amqp_table_get(args, "alternate-exchange", &v) && v.tag == 'S' && (*out = v.v.s, 1);
}

static sl_err inequivalent(const char *arg, const char *got, const char *cur, const qm_exchange *x,
                           char *err, size_t errlen)
{
    snprintf(err, errlen,
             "inequivalent arg '%s' for exchange '%s' in vhost '%s': received '%s' but current "
             "is '%s'",
             arg, x->name, x->vhost->name, got, cur);
    return SL_ERR_PRECONDITION;
}

static const char *tf(int b)
{
    return b ? "true" : "false";
}

sl_err qm_exchange_declare(qm_vhost *vh, const qm_exchange_decl *d, qm_exchange **out, char *err,
                           size_t errlen)
{
    amqp_bytes alt = {0};
    int has_alt = find_alternate(d->arguments, &alt);
    qm_exchange *x = qm_exchange_find(vh, d->name, d->name_len);

    if (x) {
        if (x->type != d->type)
            return inequivalent("type", qm_exchange_type_name(d->type),
                                qm_exchange_type_name(x->type), x, err, errlen);
        if (x->durable != d->durable)
            return inequivalent("durable", tf(d->durable), tf(x->durable), x, err, errlen);
        if (x->auto_delete != d->auto_delete)
            return inequivalent("auto_delete", tf(d->auto_delete), tf(x->auto_delete), x, err,
                                errlen);
        if (x->internal != d->internal)
            return inequivalent("internal", tf(d->internal), tf(x->internal), x, err, errlen);
        int cur_alt = x->alternate != NULL;
        if (cur_alt != has_alt || (has_alt && !amqp_bytes_eq(alt, x->alternate))) {
            if (cur_alt && has_alt) {
                char got[256];
                snprintf(got, sizeof got, "%.*s", (int)alt.len, (const char *)alt.p);
                return inequivalent("alternate-exchange", got, x->alternate, x, err, errlen);
            }
            if (has_alt)
                snprintf(err, errlen,
                         "inequivalent arg 'alternate-exchange' for exchange '%s' in vhost "
                         "'%s': received the value '%.*s' of type 'longstr' but current is "
                         "none",
                         x->name, vh->name, (int)alt.len, (const char *)alt.p);
            else
                snprintf(err, errlen,
                         "inequivalent arg 'alternate-exchange' for exchange '%s' in vhost "
                         "'%s': received none but current is the value '%s' of type 'longstr'",
                         x->name, vh->name, x->alternate);
            return SL_ERR_PRECONDITION;
        }
        *out = x;
        return SL_OK;
    }
    x = qm_exchange_create(vh, d->name, d->name_len, d->type, d->durable, d->auto_delete,
                           d->internal);
    if (d->arguments.len) {
        x->args = sl_xmalloc(d->arguments.len);
        memcpy(x->args, d->arguments.p, d->arguments.len);
        x->args_len = d->arguments.len;
    }
    if (has_alt)
        x->alternate = sl_xstrndup((const char *)alt.p, alt.len);
    QM_PERSIST(exchange_created, x);
    *out = x;
    return SL_OK;
}

/* ---- bindings ---- */

/* The same binding as (q or dx, args), b being one with the same key already. */
static int binding_same(const qm_binding *b, qm_queue *q, qm_exchange *dx, amqp_bytes args)
{
    return b->dest_queue == q && b->dest_exchange == dx && b->args_len == args.len &&
           (!args.len || !memcmp(b->args, args.p, args.len));
}

static qm_binding *binding_find(qm_exchange *src, qm_queue *q, qm_exchange *dx, amqp_bytes key,
                                amqp_bytes args)
{
    for (qm_binding *b = qm_bindings_with_key(src, key); b; b = b->knext)
        if (binding_same(b, q, dx, args))
            return b;
    return NULL;
}

static sl_err bind(qm_exchange *src, qm_queue *q, qm_exchange *dx, amqp_bytes key, amqp_bytes args,
                   char *err, size_t errlen)
{
    if (!src->name[0]) {
        snprintf(err, errlen, "operation not permitted on the default exchange");
        return SL_ERR_ACCESS_REFUSED;
    }
    if (q && q->is_subqueue) {
        snprintf(err, errlen, "subqueue '%s' in vhost '%s' cannot be bound", q->name,
                 q->vhost->name);
        return SL_ERR_ACCESS_REFUSED;
    }
    if (src->type == QM_EX_HEADERS) {
        sl_err rc = qm_headers_check_args(args, err, errlen);
        if (rc)
            return rc;
    }
    if (binding_find(src, q, dx, key, args))
        return SL_OK;
    qm_binding *b = sl_xcalloc(1, sizeof *b);
    b->source = src;
    b->dest_queue = q;
    b->dest_exchange = dx;
    b->key = sl_xstrndup((const char *)key.p, key.len);
    b->key_len = key.len;
    if (args.len) {
        b->args = sl_xmalloc(args.len);
        memcpy(b->args, args.p, args.len);
        b->args_len = args.len;
    }
    binding_link(b);
    QM_PERSIST(bound, b);
    return SL_OK;
}

sl_err qm_bind_queue(qm_exchange *src, qm_queue *q, amqp_bytes key, amqp_bytes args, char *err,
                     size_t errlen)
{
    return bind(src, q, NULL, key, args, err, errlen);
}

sl_err qm_bind_exchange(qm_exchange *src, qm_exchange *dest, amqp_bytes key, amqp_bytes args,
                        char *err, size_t errlen)
{
    if (!dest->name[0]) {
        snprintf(err, errlen, "operation not permitted on the default exchange");
        return SL_ERR_ACCESS_REFUSED;
    }
    return bind(src, NULL, dest, key, args, err, errlen);
}

static void unbind(qm_exchange *src, qm_queue *q, qm_exchange *dx, amqp_bytes key, amqp_bytes args)
{
    qm_binding *b = binding_find(src, q, dx, key, args);
    if (!b)
        return;
    QM_PERSIST(unbound, b);
    binding_free(b);
    if (src->auto_delete && !src->n_bindings && !src->deleting)
        exchange_destroy(src);
}

void qm_unbind_queue(qm_exchange *src, qm_queue *q, amqp_bytes key, amqp_bytes args)
{
    unbind(src, q, NULL, key, args);
}

void qm_unbind_exchange(qm_exchange *src, qm_exchange *dest, amqp_bytes key, amqp_bytes args)
{
    unbind(src, NULL, dest, key, args);
}
