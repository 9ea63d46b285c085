/* formatname.c - MSMQ format names and path names (reference/msmq.md section 7.4) for the
 * queues of this node.
 *
 * Accepted (case-insensitive, optional "FormatName:" prefix):
 *   DIRECT=OS:<computer>\private$\<queue>[;<subqueue>|;journal]
 *   DIRECT=TCP:<address>\private$\<queue>[;<subqueue>|;journal]
 *   DIRECT=OS:<computer>\SYSTEM$;DEADLETTER | ;DEADXACT | ;JOURNAL   (the node's system queues)
 * <computer> is ".", "localhost", the node name, its part after '@', or this host's name;
 * <address> a loopback address, the address the node or its management API is bound to. Queues of a
 * vhost other than "/" are named "<vhost>/<queue>" (when <vhost> exists), or through the vhost hint
 * the caller passes (a "vhost" field or query argument). Names are compared exactly first and then
 * without regard to case, since MSMQ format names are case-insensitive while AMQP names are not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "link/link.h"
#include "mq/formatname.h"

static const struct {
    const char *suffix; /* after SYSTEM$; */
    const char *queue;
} system_names[] = {
    {"DEADLETTER", "sluice.system.deadletter"},
    {"DEADXACT", "sluice.system.xact-deadletter"},
    {"JOURNAL", "sluice.system.journal"},
};

const char *mq_fmt_computer(mq_state *mq)
{
    const char *n = mq->n->cfg->node_name;
    const char *at = strchr(n, '@');
    return at && at[1] ? at + 1 : n;
}

static int ieq_n(const char *a, size_t al, const char *b)
{
    return strlen(b) == al && !strncasecmp(a, b, al);
}

static int is_local_computer(mq_state *mq, const char *s, size_t n, int tcp)
{
    if (tcp) {
        /* This node's address; any loopback address when it listens on all of them, or on
         * 127.0.0.1 (other 127.x addresses are other nodes: the multi-node setups). */
        const node_listener *amqp = node_listener_find(mq->n, "amqp");
        const char *ba = amqp ? amqp->addr : "";
        int any = !strcmp(ba, "0.0.0.0") || !strcmp(ba, "::");
        /* the management API's address names this node too (DIRECT=TCP:<its address>) */
        const node_listener *http = node_listener_find(mq->n, "http");
        if (ieq_n(s, n, ba) || (http && ieq_n(s, n, http->addr)))
            return 1;
        if (any && ((n >= 4 && !strncmp(s, "127.", 4)) || ieq_n(s, n, "::1")))
            return 1;
        if (!strcmp(ba, "127.0.0.1") && (ieq_n(s, n, "::1") || ieq_n(s, n, "localhost")))
            return 1;
        return 0;
    }
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    return ieq_n(s, n, ".") || ieq_n(s, n, "localhost") || ieq_n(s, n, mq->n->cfg->node_name) ||
           ieq_n(s, n, mq_fmt_computer(mq)) || (host[0] && ieq_n(s, n, host));
}

static int prefix_i(const char **p, const char *pre)
{
    size_t n = strlen(pre);
    if (strncasecmp(*p, pre, n))
        return 0;
    *p += n;
    return 1;
}

static qm_queue *find_sub_ci(qm_queue *q, const char *sub, size_t len)
{
    qm_queue *s = qm_queue_subqueue(q, sub, len, 0);
    if (s || !q->subqueues)
        return s;
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (sl_map_next(q->subqueues, &it, &k, &kl, &v))
        if (kl == len && !strncasecmp(k, sub, len))
            return v;
    return NULL;
}

int mq_fmt_machine_split(const char *machine, char *host, size_t hostlen, int *port)
{
    const char *h = machine, *hend = machine + strlen(machine), *colon = NULL;
    if (*h == '[') { /* [IPv6]:port */
        const char *rb = strchr(h, ']');
        if (!rb || (rb[1] && rb[1] != ':'))
            return -1;
        colon = rb[1] ? rb + 1 : NULL;
        h++;
        hend = rb;
    } else {
        const char *c = strchr(h, ':');
        if (c && !strchr(c + 1, ':')) /* one ':' = a port */
            colon = hend = c;
    }
    *port = LINK_DEFAULT_PORT;
    if (colon) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p < 1 || p > 65535)
            return -1;
        *port = (int)p;
    }
    size_t n = (size_t)(hend - h);
    if (n == 0 || n >= hostlen)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c <= 0x20 || c >= 0x7f || c == '\\' || c == '/')
            return -1;
        host[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    host[n] = 0;
    return 0;
}

int mq_fmt_is_local_machine(mq_state *mq, const char *name)
{
    char host[256];
    int port;
    const char *c = strchr(name, ':');
    int has_port = name[0] == '[' ? strstr(name, "]:") != NULL : c && !strchr(c + 1, ':');
    if (has_port) { /* "host:port": this node only on its own port */
        if (mq_fmt_machine_split(name, host, sizeof host, &port) < 0)
            return 0;
        return port == node_amqp_port(mq->n) && (is_local_computer(mq, host, strlen(host), 0) ||
                                                 is_local_computer(mq, host, strlen(host), 1));
    }
    return is_local_computer(mq, name, strlen(name), 0) ||
           is_local_computer(mq, name, strlen(name), 1);
}

/* A subqueue name MSMQ accepts: 1..32 characters, none of \ ; + , " (nor '/', which names
 * vhosts here). */
static int valid_subqueue_name(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 32 && !strpbrk(s, "\\;+,\"/");
}

/* The computer part [p, bs) of a direct format name names this node. "<address>:<port>":
 * the port must be ours too. */
static int computer_is_local(mq_state *mq, const char *p, const char *bs, int tcp)
{
    size_t clen = (size_t)(bs - p);
    const char *colon = memchr(p, ':', clen);
    if (colon && !memchr(colon + 1, ':', (size_t)(bs - colon - 1)) && *p != '[') {
        if (atoi(colon + 1) != node_amqp_port(mq->n))
            return 0;
        clen = (size_t)(colon - p);
    }
    return is_local_computer(mq, p, clen, tcp);
}

int mq_fmtname_remote(mq_state *mq, const char *fmt, eod_addr *out)
{
    const char *p = fmt;
    prefix_i(&p, "FormatName:");
    if (!prefix_i(&p, "DIRECT="))
        return 0;
    int tcp = prefix_i(&p, "TCP:");
    if (!tcp && !prefix_i(&p, "OS:"))
        return 0;
    const char *bs = strchr(p, '\\');
    if (!bs || bs == p || computer_is_local(mq, p, bs, tcp))
        return 0;
    /* eod_fmt_parse refuses subqueues (no send target); a handle may name one */
    size_t len = strlen(fmt);
    const char *semi = strchr(bs, ';');
    char err[200];
    if (eod_fmt_parse(fmt, semi ? (size_t)(semi - fmt) : len, out, err, sizeof err) < 0)
        return -1;
    if (semi && strlen(out->queue) + strlen(semi) < sizeof out->queue)
        strcat(out->queue, semi);
    return 1;
}

static sl_err resolve(mq_state *mq, const char *fmt, const char *vhost_hint, int create_sub,
                      qm_queue **out, char *err, size_t errlen)
{
    *out = NULL;
    const char *p = fmt;
    prefix_i(&p, "FormatName:");
    if (!prefix_i(&p, "DIRECT=")) {
        snprintf(err, errlen, "'%s': only DIRECT= format names name queues of this node", fmt);
        return SL_ERR_ILLEGAL_FORMATNAME;
    }
    int tcp = 0;
    if (prefix_i(&p, "TCP:"))
        tcp = 1;
    else if (!prefix_i(&p, "OS:")) {
        snprintf(err, errlen, "'%s': protocol must be OS: or TCP:", fmt);
        return SL_ERR_ILLEGAL_FORMATNAME;
    }
    const char *bs = strchr(p, '\\');
    if (!bs || bs == p) {
        snprintf(err, errlen, "'%s': expected <computer>\\private$\\<queue>", fmt);
        return SL_ERR_ILLEGAL_FORMATNAME;
    }
    qm_node *node = mq->n->qm;
    qm_vhost *vh =
        qm_vhost_find(node, vhost_hint ? vhost_hint : "/", strlen(vhost_hint ? vhost_hint : "/"));
    if (!vh) {
        snprintf(err, errlen, "no vhost '%s'", vhost_hint);
        return SL_ERR_QUEUE_NOT_FOUND;
    }
    if (!computer_is_local(mq, p, bs, tcp)) {
        /* another node: the outgoing queue that leads there (in the hinted vhost or "/") */
        int local = 0;
        qm_queue *oq = mq->n->links ? link_outgoing_queue(mq->n->links, vh, fmt, strlen(fmt), 0,
                                                          &local, err, errlen)
                                    : NULL;
        if (oq) {
            *out = oq;
            return SL_OK;
        }
        snprintf(err, errlen, "'%s': no outgoing queue for that destination in vhost '%s'", fmt,
                 vh->name);
        return SL_ERR_QUEUE_NOT_ACTIVE;
    }
    p = bs + 1;
    if (prefix_i(&p, "SYSTEM$;")) {
        for (size_t i = 0; i < sizeof system_names / sizeof system_names[0]; i++) {
            if (!strcasecmp(p, system_names[i].suffix)) {
                *out = qm_queue_find(vh, system_names[i].queue, strlen(system_names[i].queue));
                if (*out)
                    return SL_OK;
            }
        }
        snprintf(err, errlen, "'%s': unknown system queue", fmt);
        return SL_ERR_ILLEGAL_FORMATNAME;
    }
    if (!prefix_i(&p, "private$\\")) {
        snprintf(err, errlen, "'%s': only private queues (\\private$\\) exist on this node", fmt);
        return SL_ERR_QUEUE_NOT_FOUND;
    }
    size_t len = strcspn(p, ";");
    if (len == 0 || strchr(p, '\\')) {
        snprintf(err, errlen, "'%s': bad queue name", fmt);
        return SL_ERR_ILLEGAL_FORMATNAME;
    }
    const char *sub = p[len] == ';' ? p + len + 1 : NULL;
    if (sub && (!*sub || strchr(sub, ';'))) {
        snprintf(err, errlen, "'%s': bad subqueue name", fmt);
        return SL_ERR_ILLEGAL_FORMATNAME;
    }
    /* "<vhost>/<queue>" for other vhosts, when no hint was given and <vhost> exists */
    const char *slash = memchr(p, '/', len);
    if (!vhost_hint && slash && slash != p) {
        qm_vhost *v2 = qm_vhost_find(node, p, (size_t)(slash - p));
        if (v2 && strcmp(v2->name, "/")) {
            vh = v2;
            len -= (size_t)(slash + 1 - p);
            p = slash + 1;
        }
    }
    /* With a hint, the name may be the queue's own FormatName's, "<vhost>/<queue>" (the
     * console passes that with ?vhost=): that queue first, else the whole name (a bare queue
     * name given with its vhost, as before; also a queue whose own name starts "<vhost>/"). */
    size_t vl = strlen(vh->name);
    if (vhost_hint && strcmp(vh->name, "/") && len > vl + 1 && !memcmp(p, vh->name, vl) &&
        p[vl] == '/' && qm_queue_find_ci(vh, p + vl + 1, len - vl - 1)) {
        p += vl + 1;
        len -= vl + 1;
    }
    qm_queue *q = qm_queue_find_ci(vh, p, len); /* p[0, len) has no ';' */
    if (q && sub) {
        qm_queue *parent = q;
        q = !strcasecmp(sub, "journal") ? qm_queue_subqueue(q, "journal", 7, 0)
                                        : find_sub_ci(q, sub, strlen(sub));
        /* MSMQ creates a subqueue on its first open (never a journal, never under a system
         * queue); created empty, dispatch removes it again unless something holds it. */
        if (!q && create_sub && !!strcasecmp(sub, "journal") && !parent->is_system) {
            if (!valid_subqueue_name(sub)) {
                snprintf(err, errlen,
                         "'%s': a subqueue name is 1..32 characters without \\ ; + , \" /", fmt);
                return SL_ERR_ILLEGAL_FORMATNAME;
            }
            q = qm_queue_subqueue(parent, sub, strlen(sub), 1);
            qm_queue_schedule_dispatch(q);
        }
    }
    if (!q) {
        snprintf(err, errlen, "no queue for '%s' in vhost '%s'", fmt, vh->name);
        return SL_ERR_QUEUE_NOT_FOUND;
    }
    *out = q;
    return SL_OK;
}

sl_err mq_fmtname_resolve(mq_state *mq, const char *fmt, const char *vhost_hint, qm_queue **out,
                          char *err, size_t errlen)
{
    return resolve(mq, fmt, vhost_hint, 0, out, err, errlen);
}

sl_err mq_fmtname_open(mq_state *mq, const char *fmt, const char *vhost_hint, qm_queue **out,
                       char *err, size_t errlen)
{
    return resolve(mq, fmt, vhost_hint, 1, out, err, errlen);
}

static const char *system_suffix(const qm_queue *q)
{
    for (size_t i = 0; i < sizeof system_names / sizeof system_names[0]; i++)
        if (!strcmp(q->name, system_names[i].queue))
            return system_names[i].suffix;
    return NULL;
}

static void name_part(const qm_queue *q, char *buf, size_t len)
{
    if (!strcmp(q->vhost->name, "/"))
        snprintf(buf, len, "%s", q->name);
    else
        snprintf(buf, len, "%s/%s", q->vhost->name, q->name);
}

void mq_fmtname_of(mq_state *mq, const qm_queue *q, char *buf, size_t len)
{
    const char *sys = q->is_system ? system_suffix(q) : NULL;
    if (sys && !strcmp(q->vhost->name, "/")) {
        snprintf(buf, len, "DIRECT=OS:%s\\SYSTEM$;%s", mq_fmt_computer(mq), sys);
        return;
    }
    char n[600];
    name_part(q, n, sizeof n);
    snprintf(buf, len, "DIRECT=OS:%s\\private$\\%s", mq_fmt_computer(mq), n);
}

void mq_pathname_of(mq_state *mq, const qm_queue *q, char *buf, size_t len)
{
    const char *sys = q->is_system ? system_suffix(q) : NULL;
    if (sys && !strcmp(q->vhost->name, "/")) {
        snprintf(buf, len, "%s\\system$;%s", mq_fmt_computer(mq), sys);
        return;
    }
    char n[600];
    name_part(q, n, sizeof n);
    snprintf(buf, len, "%s\\private$\\%s", mq_fmt_computer(mq), n);
}

int mq_fmtname_from_pathname(const char *path, char *out, size_t len)
{
    const char *bs = strchr(path, '\\');
    if (!bs || bs == path || !bs[1])
        return -1;
    for (const char *p = path; p < bs; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7E)
            return -1;
    if ((size_t)snprintf(out, len, "DIRECT=OS:%s", path) >= len)
        return -1;
    return 0;
}
