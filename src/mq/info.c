/* info.c - R_QMMgmtGetInfo for every door (info.h): the property tables, the object a call
 * names, and the values of the machine and of a local queue as plain values. The
 * outgoing-only properties (NEXTHOPS, EOD_*, CONNECTION_HISTORY) are VT_NULL on local queues,
 * EOD_SOURCE_INFO is VT_NULL on outgoing ones (info_outgoing.c has both).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/le.h"
#include "core/mem.h"
#include "core/version.h"
#include "node/node.h"
#include "mq/info.h"
#include "mq/caller.h"
#include "mq/formatname.h"
#include "mq/mq.h"
#include "node/node.h"

static const mq_prop_def machine_props[] = {
    {1, "ACTIVEQUEUES", MQ_VT_LPWSTR | MQ_VT_VECTOR},
    {2, "PRIVATEQ", MQ_VT_LPWSTR | MQ_VT_VECTOR},
    {3, "DSSERVER", MQ_VT_LPWSTR},
    {4, "CONNECTED", MQ_VT_LPWSTR},
    {5, "TYPE", MQ_VT_LPWSTR},
    {6, "BYTES_IN_ALL_QUEUES", MQ_VT_I8},
};

static const mq_prop_def queue_props[] = {
    {1, "PATHNAME", MQ_VT_LPWSTR},
    {2, "FORMATNAME", MQ_VT_LPWSTR},
    {3, "TYPE", MQ_VT_LPWSTR},
    {4, "LOCATION", MQ_VT_LPWSTR},
    {5, "XACT", MQ_VT_LPWSTR},
    {6, "FOREIGN", MQ_VT_LPWSTR},
    {7, "MESSAGE_COUNT", MQ_VT_UI4},
    {8, "BYTES_IN_QUEUE", MQ_VT_UI4},
    {9, "JOURNAL_MESSAGE_COUNT", MQ_VT_UI4},
    {10, "BYTES_IN_JOURNAL", MQ_VT_UI4},
    {11, "STATE", MQ_VT_LPWSTR},
    {12, "NEXTHOPS", MQ_VT_LPWSTR | MQ_VT_VECTOR},
    {13, "EOD_LAST_ACK", MQ_VT_BLOB},
    {14, "EOD_LAST_ACK_TIME", MQ_VT_I4},
    {15, "EOD_LAST_ACK_COUNT", MQ_VT_UI4},
    {16, "EOD_FIRST_NON_ACK", MQ_VT_BLOB},
    {17, "EOD_LAST_NON_ACK", MQ_VT_BLOB},
    {18, "EOD_NEXT_SEQ", MQ_VT_BLOB},
    {19, "EOD_NO_READ_COUNT", MQ_VT_UI4},
    {20, "EOD_NO_ACK_COUNT", MQ_VT_UI4},
    {21, "EOD_RESEND_TIME", MQ_VT_I4},
    {22, "EOD_RESEND_INTERVAL", MQ_VT_UI4},
    {23, "EOD_RESEND_COUNT", MQ_VT_UI4},
    {24, "EOD_SOURCE_INFO", MQ_VT_VARIANT | MQ_VT_VECTOR},
    {25, "CONNECTION_HISTORY", MQ_VT_VARIANT | MQ_VT_VECTOR},
    {26, "SUBQUEUE_COUNT", MQ_VT_UI4},
    {27, "SUBQUEUE_NAMES", MQ_VT_LPWSTR | MQ_VT_VECTOR},
    /* aliases of MS-MQMQ */
    {8, "USED_QUOTA", MQ_VT_UI4},
    {10, "JOURNAL_USED_QUOTA", MQ_VT_UI4},
};

#define NMACHINE (sizeof machine_props / sizeof machine_props[0])
#define NQUEUE (sizeof queue_props / sizeof queue_props[0])

/* ------------------------------------------------------------------------------------------
 * Values
 */

void mq_value_free(mq_value *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++)
        mq_value_free(&v->items[i]);
    sl_free(v->items);
    sl_free(v->s);
    memset(v, 0, sizeof *v);
}

void mq_seqinfo_bytes(const mq_seqinfo *s, uint8_t b[16])
{
    sl_put_le64(b, s->seq_id);
    sl_put_le32(b + 8, s->seq_no);
    sl_put_le32(b + 12, s->prev_no);
}

const char *mq_vt_name(uint16_t vt)
{
    static const struct {
        uint16_t vt;
        const char *name;
    } t[] = {
        {MQ_VT_EMPTY, "VT_EMPTY"},
        {MQ_VT_NULL, "VT_NULL"},
        {MQ_VT_I4, "VT_I4"},
        {MQ_VT_UI4, "VT_UI4"},
        {MQ_VT_I8, "VT_I8"},
        {MQ_VT_UI8, "VT_UI8"},
        {MQ_VT_LPWSTR, "VT_LPWSTR"},
        {MQ_VT_BLOB, "VT_BLOB"},
        {MQ_VT_CLSID, "VT_CLSID"},
        {MQ_VT_VARIANT, "VT_VARIANT"},
        {MQ_VT_I4 | MQ_VT_VECTOR, "VT_I4|VT_VECTOR"},
        {MQ_VT_UI4 | MQ_VT_VECTOR, "VT_UI4|VT_VECTOR"},
        {MQ_VT_UI8 | MQ_VT_VECTOR, "VT_UI8|VT_VECTOR"},
        {MQ_VT_LPWSTR | MQ_VT_VECTOR, "VT_LPWSTR|VT_VECTOR"},
        {MQ_VT_CLSID | MQ_VT_VECTOR, "VT_CLSID|VT_VECTOR"},
        {MQ_VT_VARIANT | MQ_VT_VECTOR, "VT_VARIANT|VT_VECTOR"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].vt == vt)
            return t[i].name;
    return "VT_NULL";
}

void mq_value_int(mq_value *v, int64_t i)
{
    v->kind = MQ_V_INT;
    v->i = i;
}

void mq_value_str(mq_value *v, const char *s)
{
    v->kind = MQ_V_STR;
    v->s = sl_xstrdup(s);
}

static void v_list(mq_value *v)
{
    v->kind = MQ_V_LIST;
}

/* A new last element of list v (zeroed: MQ_V_NULL). */
static mq_value *v_push(mq_value *v)
{
    v->items = sl_xrealloc(v->items, (v->n + 1) * sizeof *v->items);
    memset(&v->items[v->n], 0, sizeof *v->items);
    return &v->items[v->n++];
}

/* ------------------------------------------------------------------------------------------
 * The tables
 */

static const mq_prop_def *lookup_name(const mq_prop_def *t, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(s, t[i].name))
            return &t[i];
    return NULL;
}

static const mq_prop_def *lookup_id(const mq_prop_def *t, size_t n, long id)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].id == id)
            return &t[i];
    return NULL;
}

const mq_prop_def *mq_info_prop_parse(const char *s, int machine)
{
    const mq_prop_def *t = machine ? machine_props : queue_props;
    size_t n = machine ? NMACHINE : NQUEUE;
    char *end;
    long id = strtol(s, &end, 10);
    if (*s && !*end)
        return lookup_id(t, n, id);
    const char *pre = machine ? "PROPID_MGMT_MSMQ_" : "PROPID_MGMT_QUEUE_";
    if (!strncasecmp(s, "PROPID_MGMT_", 12)) {
        if (strncasecmp(s, pre, strlen(pre)))
            return NULL; /* the other table */
        s += strlen(pre);
    }
    return lookup_name(t, n, s);
}

const mq_prop_def *mq_info_prop(int machine, int id)
{
    return machine ? lookup_id(machine_props, NMACHINE, id) : lookup_id(queue_props, NQUEUE, id);
}

/* ------------------------------------------------------------------------------------------
 * The object
 */

sl_err mq_info_object(mq_state *mq, const mq_caller *who, const char *object, const char *vhost,
                      int *machine, qm_queue **q, char *err, size_t errlen)
{
    *q = NULL;
    *machine = !strcasecmp(object, "MACHINE");
    if (*machine)
        return SL_OK;
    if (strncasecmp(object, "QUEUE=", 6)) {
        snprintf(err, errlen, "session objects have no properties");
        return SL_ERR_INVALID_PARAMETER;
    }
    sl_err e = mq_fmtname_resolve(mq, object + 6, vhost, q, err, errlen);
    if (e != SL_OK)
        return e;
    if (!mq_vhost_listed(mq->n->acc, who, (*q)->vhost->name)) {
        *q = NULL;
        snprintf(err, errlen, "User not authorised to access virtual host");
        return SL_ERR_ACCESS_REFUSED;
    }
    return SL_OK;
}

/* ------------------------------------------------------------------------------------------
 * The machine's values
 */

static uint32_t ui4(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* MS-MQDMPR Queue.Active: an outgoing queue with messages awaiting transfer, or a queue with
 * an open queue descriptor. Here a descriptor is a handle (q->descs) or, over AMQP, a
 * consumer; a queue that merely holds messages, an idle system queue, journal or subqueue is
 * not active. */
static int queue_active(const qm_queue *q)
{
    return q->descs != NULL || q->n_consumers > 0 || (q->is_outgoing && q->n_ready > 0);
}

/* ACTIVEQUEUES (active queues and subqueues, by format name) or PRIVATEQ (every private
 * queue, by path name), of the vhosts who may list: the machine's properties are a listing
 * like any other (README "Users, vhosts and permissions"). */
static void all_queues(mq_state *mq, const mq_caller *who, int active, mq_value *out)
{
    char buf[800];
    size_t nv;
    v_list(out);
    void **vhs = sl_map_sorted(mq->n->qm->vhosts, &nv);
    for (size_t i = 0; i < nv; i++) {
        if (!mq_vhost_listed(mq->n->acc, who, ((qm_vhost *)vhs[i])->name))
            continue;
        size_t nq;
        void **qs = sl_map_sorted(((qm_vhost *)vhs[i])->queues, &nq);
        for (size_t j = 0; j < nq; j++) {
            qm_queue *q = qs[j];
            if (active && queue_active(q)) {
                mq_fmtname_of(mq, q, buf, sizeof buf);
                mq_value_str(v_push(out), buf);
            }
            if (!active && !q->is_system) {
                mq_pathname_of(mq, q, buf, sizeof buf);
                mq_value_str(v_push(out), buf);
            }
            size_t ns;
            void **subs = active ? sl_map_sorted(q->subqueues, &ns) : NULL;
            for (size_t k = 0; subs && k < ns; k++) {
                if (!queue_active(subs[k]))
                    continue;
                mq_fmtname_of(mq, subs[k], buf, sizeof buf);
                mq_value_str(v_push(out), buf);
            }
            sl_free(subs);
        }
        sl_free(qs);
    }
    sl_free(vhs);
}

/* A queue's bytes with its subqueues' (the overview's totals count them the same way). */
static uint64_t queue_bytes(const qm_queue *q)
{
    uint64_t b = q->bytes_total;
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (q->subqueues && sl_map_next(q->subqueues, &it, &k, &kl, &v))
        b += queue_bytes(v);
    return b;
}

/* BYTES_IN_ALL_QUEUES: of the queues of the vhosts who may list */
static uint64_t bytes_listed(mq_state *mq, const mq_caller *who)
{
    uint64_t total = 0;
    size_t vit = 0, kl;
    const char *k;
    void *v;
    while (sl_map_next(mq->n->qm->vhosts, &vit, &k, &kl, &v)) {
        qm_vhost *vh = v;
        if (!mq_vhost_listed(mq->n->acc, who, vh->name))
            continue;
        size_t qit = 0;
        void *qv;
        while (sl_map_next(vh->queues, &qit, &k, &kl, &qv))
            total += queue_bytes(qv);
    }
    return total;
}

static void machine_value(mq_state *mq, const mq_caller *who, int id, uint16_t *vt, mq_value *out)
{
    switch (id) {
    case 1:
    case 2:
        all_queues(mq, who, id == 1, out);
        return;
    case 4:
        mq_value_str(out, mq->n->qm->online ? "CONNECTED" : "DISCONNECTED");
        return;
    case 5:
        mq_value_str(out, SLUICE_PRODUCT " " SLUICE_VERSION " (Linux)");
        return;
    case 6:
        mq_value_int(out, (int64_t)bytes_listed(mq, who));
        return;
    default: /* DSSERVER: not directory-integrated */
        *vt = MQ_VT_NULL;
        return;
    }
}

/* ------------------------------------------------------------------------------------------
 * A local queue's values
 */

static int is_journal(const qm_queue *q)
{
    const char *semi = q->is_subqueue ? strchr(q->name, ';') : NULL;
    return semi && !strcmp(semi + 1, "journal");
}

static void queue_value(mq_state *mq, qm_queue *q, int id, uint16_t *vt, mq_value *out)
{
    char buf[800];
    if (q->is_outgoing && id != 1 && id != 2 && id != 7 && id != 8 && id != 9 && id != 10) {
        mq_info_outgoing_value(q, id, vt, out);
        return;
    }
    if (id == MQ_PROP_EOD_SOURCE_INFO) {
        mq_info_eod_source(mq, q, out);
        return;
    }
    qm_queue *j = q->is_subqueue ? NULL : qm_queue_subqueue(q, "journal", 7, 0);
    size_t ns;
    void **subs;
    switch (id) {
    case 1:
        mq_pathname_of(mq, q, buf, sizeof buf);
        mq_value_str(out, buf);
        return;
    case 2:
        mq_fmtname_of(mq, q, buf, sizeof buf);
        mq_value_str(out, buf);
        return;
    case 3:
        mq_value_str(out, q->is_system ? "MACHINE" : "PRIVATE");
        return;
    case 4:
        mq_value_str(out, "LOCAL");
        return;
    case 5:
        mq_value_str(out, "NO");
        return;
    case 6:
        /* no directory: private queues are not foreign (MS-MQMR 3.1.4.1 FOREIGN rule) */
        mq_value_str(out, "NO");
        return;
    case 7:
        mq_value_int(out, ui4(qm_queue_message_count(q)));
        return;
    case 8:
        mq_value_int(out, ui4(q->bytes_total));
        return;
    case 9:
        mq_value_int(out, j ? ui4(qm_queue_message_count(j)) : 0);
        return;
    case 10:
        mq_value_int(out, j ? ui4(j->bytes_total) : 0);
        return;
    case 11:
        mq_value_str(out, "LOCAL CONNECTION");
        return;
    case 26:
    case 27: {
        mq_value names = {0};
        v_list(&names);
        subs = sl_map_sorted(q->subqueues, &ns);
        for (size_t i = 0; i < ns; i++) {
            if (is_journal(subs[i]))
                continue; /* the journal is not a subqueue in MSMQ's sense */
            mq_value_str(v_push(&names), strchr(((qm_queue *)subs[i])->name, ';') + 1);
        }
        sl_free(subs);
        if (id == 26) {
            mq_value_int(out, (int64_t)names.n);
            mq_value_free(&names);
        } else {
            *out = names;
        }
        return;
    }
    default: /* outgoing-queue properties: a local queue has none */
        *vt = MQ_VT_NULL;
        return;
    }
}

void mq_info_value(mq_state *mq, const mq_caller *who, int machine, qm_queue *q, int id,
                   uint16_t *vt, mq_value *out)
{
    memset(out, 0, sizeof *out);
    const mq_prop_def *p = mq_info_prop(machine, id);
    *vt = p ? p->vt : MQ_VT_NULL;
    if (!p)
        return;
    if (machine)
        machine_value(mq, who, id, vt, out);
    else
        queue_value(mq, q, id, vt, out);
}

sl_err mq_info_queue_value(mq_state *mq, const char *fmt, const char *vhost, int id, uint16_t *vt,
                           mq_value *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const mq_prop_def *p = mq_info_prop(0, id);
    if (!p) {
        snprintf(err, errlen, "%d is not a queue property", id);
        return SL_ERR_ILLEGAL_PROPID;
    }
    qm_queue *q;
    sl_err e = mq_fmtname_resolve(mq, fmt, vhost, &q, err, errlen);
    if (e != SL_OK)
        return e;
    *vt = p->vt;
    queue_value(mq, q, id, vt, out);
    return SL_OK;
}
