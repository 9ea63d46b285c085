/* outq.c - the outgoing-queue registry of outq.h: which qm_queue a remote format name names
 * in a vhost, created on first use, and what the links (src/link/) are told to drain. Also
 * the names of an outgoing queue's states and the receiving side's write rule.
 *
 * Invariants: the key is the vhost's name, a NUL, and the lower-cased canonical name, so two
 * spellings that differ only in case find one queue; a key maps to its queue only while the
 * queue is adopted (eod_reg_forget takes it out before the queue goes).
 */
#include "eod/outq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "access/access.h"
#include "core/log.h"
#include "core/map.h"
#include "core/mem.h"
#include "mqqb/mqqb.h"

struct eod_reg {
    qm_node *node;
    sl_map *by_key; /* vhost "\0" lower-case canonical name -> qm_queue */
    const char *msmq_hosts;
    char self_addr[64];
    int self_port;
    eod_adopt_fn adopt; /* the drain (the link manager) */
    void *adopt_ctx;
};

const char *eod_state_name(eod_state s)
{
    static const char *const names[] = {"INACTIVE", "WAITING",      "CONNECTED",
                                        "ONHOLD",   "DISCONNECTED", "DISCONNECTING"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "INACTIVE";
}

static void key_of(const qm_vhost *vh, const char *canon, char *out, size_t cap, size_t *len)
{
    size_t vl = strlen(vh->name), cl = strlen(canon);
    if (vl + 1 + cl > cap) {
        *len = 0;
        return;
    }
    memcpy(out, vh->name, vl);
    out[vl] = 0;
    for (size_t i = 0; i < cl; i++)
        out[vl + 1 + i] = (char)(canon[i] >= 'A' && canon[i] <= 'Z' ? canon[i] + 32 : canon[i]);
    *len = vl + 1 + cl;
}

int eod_msmq_port(const eod_reg *r, const eod_addr *a)
{
    const char *h = r->msmq_hosts;
    while (h && *h) {
        const char *end = strchr(h, ' ');
        size_t n = end ? (size_t)(end - h) : strlen(h);
        const char *colon = memchr(h, ':', n);
        size_t hl = colon ? (size_t)(colon - h) : n;
        int port = colon ? atoi(colon + 1) : MQQB_PORT;
        if (hl == strlen(a->host) && !strncasecmp(h, a->host, hl) && port > 0 &&
            (!a->port_given || a->port == port))
            return port;
        h = end ? end + 1 : NULL;
    }
    return 0;
}

int eod_reg_adopt(eod_reg *r, qm_queue *q)
{
    eod_addr a;
    char err[300];
    if (eod_fmt_parse(q->name, strlen(q->name), &a, err, sizeof err) < 0) {
        sl_warn("link: queue '%s' looks like an outgoing queue but is not one: %s", q->name, err);
        return -1;
    }
    r->adopt(r->adopt_ctx, q, &a);
    char key[1200];
    size_t kl;
    key_of(q->vhost, q->name, key, sizeof key, &kl);
    if (kl)
        sl_map_put(r->by_key, key, kl, q);
    return 0;
}

void eod_reg_forget(eod_reg *r, qm_queue *q)
{
    char key[1200];
    size_t kl;
    key_of(q->vhost, q->name, key, sizeof key, &kl);
    if (kl && sl_map_get(r->by_key, key, kl) == q)
        sl_map_del(r->by_key, key, kl);
}

void eod_reg_recover(eod_reg *r)
{
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (sl_map_next(r->node->vhosts, &it, &k, &kl, &v)) {
        qm_vhost *vh = v;
        size_t qit = 0;
        void *qv;
        while (sl_map_next(vh->queues, &qit, &k, &kl, &qv)) {
            qm_queue *q = qv;
            if (q->is_outgoing && !q->link)
                eod_reg_adopt(r, q);
        }
    }
}

void eod_reg_set_self(eod_reg *r, const char *addr, int port)
{
    snprintf(r->self_addr, sizeof r->self_addr, "%s", addr);
    r->self_port = port;
}

static int is_self(const eod_reg *r, const eod_addr *a)
{
    if (a->port != r->self_port)
        return 0;
    if (!strcasecmp(a->host, r->self_addr) || !strcasecmp(a->host, "localhost"))
        return 1;
    /* bound to 0.0.0.0: every loopback address is us */
    return !strcmp(r->self_addr, "0.0.0.0") && !strncmp(a->host, "127.", 4);
}

qm_queue *eod_outgoing_queue(eod_reg *r, qm_vhost *vh, const char *fmt, size_t len, int create,
                             int *local, char *err, size_t errlen)
{
    eod_addr a;
    *local = 0;
    if (eod_fmt_parse(fmt, len, &a, err, errlen) < 0)
        return NULL;
    int mq_port = eod_msmq_port(r, &a);
    if (mq_port) { /* a Windows queue manager: MS-MQQB's port, written in the canonical name */
        a.port = mq_port;
        a.port_given = 1;
    }
    if (is_self(r, &a)) {
        *local = 1;
        snprintf(err, errlen, "'%.*s' names a queue of this node", (int)len, fmt);
        return NULL;
    }
    char canon[900], key[1200];
    size_t kl;
    eod_fmt_canonical(&a, canon, sizeof canon);
    key_of(vh, canon, key, sizeof key, &kl);
    qm_queue *found = kl ? sl_map_get(r->by_key, key, kl) : NULL;
    if (found)
        return found;
    if (!create) {
        snprintf(err, errlen, "no outgoing queue for '%.*s'", (int)len, fmt);
        return NULL;
    }
    qm_queue_decl d = {.name = canon, .name_len = strlen(canon), .durable = 1};
    qm_queue *q;
    char derr[300];
    if (qm_queue_declare(vh, &d, &q, NULL, derr, sizeof derr) != SL_OK) {
        snprintf(err, errlen, "cannot create the outgoing queue: %s", derr);
        return NULL;
    }
    if (!q->link && eod_reg_adopt(r, q) < 0) {
        snprintf(err, errlen, "cannot adopt the outgoing queue");
        return NULL;
    }
    sl_info("link: outgoing queue %s created in vhost '%s'", q->name, vh->name);
    return q;
}

qm_queue *eod_msmq_outgoing_queue(eod_reg *r, qm_vhost *vh, const char *fmt, size_t len, int create,
                                  char *err, size_t errlen)
{
    eod_addr a;
    int local;
    if (eod_fmt_parse(fmt, len, &a, err, errlen) < 0)
        return NULL;
    if (!eod_msmq_port(r, &a)) {
        snprintf(err, errlen, "'%.*s' is not on a host of msmq.hosts", (int)len, fmt);
        return NULL;
    }
    return eod_outgoing_queue(r, vh, fmt, len, create, &local, err, errlen);
}

/* qm's resolve_remote hook: a format name in a routing key or a queue name. */
static qm_queue *resolve_remote(qm_vhost *vh, const char *name, size_t len, int create, void *ctx)
{
    eod_reg *r = ctx;
    char err[300];
    int local;
    if (!eod_fmt_is_candidate(name, len))
        return NULL;
    qm_queue *q = eod_outgoing_queue(r, vh, name, len, create, &local, err, sizeof err);
    if (!q && local) {
        /* DIRECT=TCP:<this node>\private$\<queue>: the local queue of that name */
        eod_addr a;
        if (eod_fmt_parse(name, len, &a, err, sizeof err) == 0)
            return qm_queue_find(vh, a.queue, strlen(a.queue));
    }
    return q;
}

eod_reg *eod_reg_new(qm_node *node, const char *msmq_hosts, eod_adopt_fn adopt, void *ctx)
{
    eod_reg *r = sl_xcalloc(1, sizeof *r);
    r->node = node;
    r->by_key = sl_map_new();
    r->msmq_hosts = msmq_hosts;
    r->adopt = adopt;
    r->adopt_ctx = ctx;
    node->resolve_remote = resolve_remote;
    node->remote_ctx = r;
    return r;
}

eod_reg *eod_reg_of(qm_node *node)
{
    return node && node->resolve_remote == resolve_remote ? node->remote_ctx : NULL;
}

void eod_reg_free(eod_reg *r)
{
    if (!r)
        return;
    if (r->node->remote_ctx == r) {
        r->node->resolve_remote = NULL;
        r->node->remote_ctx = NULL;
    }
    sl_map_free(r->by_key);
    sl_free(r);
}

sl_err eod_recv_may_write(const struct acc_db *acc, const char *user, const qm_queue *q, char *err,
                          size_t errlen)
{
    if (q->is_outgoing) {
        snprintf(err, errlen, "'%s' is an outgoing queue, not a destination", q->name);
        return SL_ERR_ACCESS_REFUSED;
    }
    if (!acc)
        return SL_OK;
    return acc_check_link_write(acc, user, q->vhost->name, q->name, err, errlen);
}
