/* rules.c - the refusals every door applies before it changes the model (see rules.h). The
 * texts are RabbitMQ's, as both doors sent them before the rules were written once here. */
#include "node/rules.h"

#include "node/node.h"

#include <stdio.h>
#include <string.h>

int node_name_reserved(const char *name, size_t len)
{
    return len >= 4 && !memcmp(name, "amq.", 4);
}

int node_exchange_predeclared(const char *name, size_t len)
{
    return len == 0 || node_name_reserved(name, len);
}

int node_queue_definable(const qm_queue *q)
{
    /* outgoing queues are made by sending (and by importing a binding to a format name) */
    return !q->is_system && !q->is_subqueue && !q->exclusive && !q->is_outgoing;
}

sl_err node_queue_new_name(const char *name, size_t len, int exists, char *why, size_t whylen)
{
    if (node_name_reserved(name, len) && !exists) {
        snprintf(why, whylen, "queue name '%.*s' contains reserved prefix 'amq.*'", (int)len, name);
        return SL_ERR_ACCESS_REFUSED;
    }
    return SL_OK;
}

sl_err node_queue_locked(const qm_queue *q, const void *conn, char *why, size_t whylen)
{
    const qm_queue *top = q->parent ? q->parent : q;
    if (!top->exclusive || (conn && top->exclusive_owner == conn))
        return SL_OK;
    snprintf(why, whylen,
             "cannot obtain exclusive access to locked queue '%s' in vhost '%s'. It could be "
             "originally declared on another connection or the exclusive property value does "
             "not match that of the original declaration.",
             top->name, top->vhost->name);
    return SL_ERR_RESOURCE_LOCKED;
}

sl_err node_queue_limit(const acc_db *a, qm_vhost *vh, const char *name, char *why, size_t whylen)
{
    const acc_vhost *av = acc_vhost_find(a, vh->name, strlen(vh->name));
    if (av && av->max_queues >= 0 &&
        acc_check_queue_limit(a, vh->name, qm_vhost_queue_count(vh), name, why, whylen) != SL_OK)
        return SL_ERR_PRECONDITION;
    return SL_OK;
}

sl_err node_exchange_not_default(const char *name, size_t len, char *why, size_t whylen)
{
    (void)name;
    if (len)
        return SL_OK;
    snprintf(why, whylen, "operation not permitted on the default exchange");
    return SL_ERR_ACCESS_REFUSED;
}

sl_err node_exchange_new_name(const char *name, size_t len, int exists, char *why, size_t whylen)
{
    if (node_name_reserved(name, len) && !exists) {
        snprintf(why, whylen, "exchange name '%.*s' contains reserved prefix 'amq.*'", (int)len,
                 name);
        return SL_ERR_ACCESS_REFUSED;
    }
    return SL_OK;
}

sl_err node_exchange_delete_check(const char *name, size_t len, const char *vhost, char *why,
                                  size_t whylen)
{
    sl_err e = node_exchange_not_default(name, len, why, whylen);
    if (e != SL_OK)
        return e;
    if (node_name_reserved(name, len)) {
        snprintf(why, whylen, "deletion of system exchange '%.*s' in vhost '%s' not allowed",
                 (int)len, name, vhost);
        return SL_ERR_ACCESS_REFUSED;
    }
    return SL_OK;
}

sl_err node_perm_check(const acc_db *a, const char *user, const char *vhost, acc_kind kind,
                       const char *name, acc_perm perm, char *why, size_t whylen)
{
    sl_err e = acc_check_vhost(a, user, vhost, why, whylen);
    return e != SL_OK ? e : acc_check(a, user, vhost, kind, name, strlen(name), perm, why, whylen);
}

sl_err node_bind_check(const acc_db *a, const char *user, const char *vhost, acc_kind dest_kind,
                       const char *dest, size_t dest_len, const char *src, size_t src_len,
                       const qm_exchange *src_x, const char *key, size_t key_len, char *why,
                       size_t whylen)
{
    sl_err e = acc_check(a, user, vhost, dest_kind, dest, dest_len, ACC_WRITE, why, whylen);
    if (e == SL_OK && dest_kind == ACC_EXCHANGE)
        e = node_exchange_not_default(dest, dest_len, why, whylen);
    if (e == SL_OK)
        e = node_exchange_not_default(src, src_len, why, whylen);
    if (e == SL_OK)
        e = acc_check(a, user, vhost, ACC_EXCHANGE, src, src_len, ACC_READ, why, whylen);
    if (e == SL_OK && src_x && src_x->type == QM_EX_TOPIC)
        e = acc_check_topic(a, user, vhost, src_x->name, key, key_len, ACC_READ, why, whylen);
    return e;
}

sl_err node_publish_check(const amqp_basic_props *p, char *why, size_t whylen)
{
    uint64_t ttl;
    char what[300];
    if ((p->flags & AMQP_P_EXPIRATION) &&
        qm_expiration_parse(p->expiration, &ttl, what, sizeof what)) {
        snprintf(why, whylen, "invalid expiration '%.*s': %s", (int)p->expiration.len,
                 (const char *)p->expiration.p, what);
        return SL_ERR_PRECONDITION;
    }
    if ((p->flags & AMQP_P_HEADERS) && qm_cc_bcc_check(p->headers, what, sizeof what) != SL_OK) {
        snprintf(why, whylen, "invalid message: %s", what);
        return SL_ERR_PRECONDITION;
    }
    return SL_OK;
}

sl_err node_alarm_check(int alarms, int memory_too, char *why, size_t whylen)
{
    alarms &= memory_too ? (ALARM_DISK | ALARM_MEMORY) : ALARM_DISK;
    if (!alarms)
        return SL_OK;
    snprintf(why, whylen, "%s alarm: refused until it clears (%s)",
             alarms & ALARM_DISK ? "disk" : "memory",
             alarms & ALARM_DISK ? "free disk under disk_free_limit"
                                 : "memory above memory_high_watermark");
    return SL_ERR_RESOURCE;
}
