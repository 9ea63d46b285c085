/* api_msmq.c - MSMQ management over HTTP: R_QMMgmtAction (POST /api/msmq/action) and
 * R_QMMgmtGetInfo (GET or POST /api/msmq/info), after MS-MQMR 3.1.4.1-2 and
 * reference/msmq.md sections 3.5-3.8.
 *
 * Objects: "MACHINE", "QUEUE=<format name>", anything else is a session object (always refused
 * with MQ_ERROR_INVALID_PARAMETER, as Windows does). Actions are matched without regard to
 * case. Every reply carries "hresult" ("0x...") and "hresult_name"; a failure changes nothing
 * and returns no values.
 *
 * PAUSE, RESUME and EOD_RESEND act on outgoing queues (QUEUE=DIRECT=TCP:<remote>...) and fail
 * with MQ_ERROR_INVALID_PARAMETER on a local queue; an outgoing queue that does not exist is
 * MQ_ERROR_QUEUE_NOT_ACTIVE. The outgoing-only properties (NEXTHOPS, EOD_*, CONNECTION_HISTORY)
 * are VT_NULL on local queues, EOD_SOURCE_INFO is VT_NULL on outgoing ones (api_outgoing.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/version.h"
#include "link/link.h"
#include "persist/persist.h"
#include "mgmt/mgmt_internal.h"

enum obj_kind { OBJ_MACHINE, OBJ_QUEUE, OBJ_SESSION };

static enum obj_kind parse_object(const char *s, const char **fmt)
{
    if (str_ieq(s, "MACHINE"))
        return OBJ_MACHINE;
    if (!strncasecmp(s, "QUEUE=", 6)) {
        *fmt = s + 6;
        return OBJ_QUEUE;
    }
    return OBJ_SESSION;
}

/* ------------------------------------------------------------------------------------------
 * R_QMMgmtAction
 */

static const char *const machine_actions[] = {"CONNECT", "DISCONNECT", "TIDY"};

/* TIDY is done (node_tidy_start): its figures become the suspended request's answer. The
 * reply keeps segments_freed and bytes_freed and adds what compaction did and the store's
 * size before and after. */
static void tidy_done(void *ctx, const persist_tidy_result *res)
{
    req *r = ctx;
    json_t *j = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "segments_freed", (json_int_t)res->segments_freed,
        "bytes_freed", (json_int_t)res->bytes_freed, "segments_freed_between",
        (json_int_t)res->holes, "segments_compacted", (json_int_t)res->segments_compacted,
        "records_copied", (json_int_t)res->records_copied, "bytes_copied",
        (json_int_t)res->bytes_copied, "store_bytes_before", (json_int_t)res->bytes_before,
        "store_bytes_after", (json_int_t)res->bytes_after, "tidy_ms", (json_int_t)res->ms);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    r->async_reply = sl_xstrdup(text ? text : "{}");
    free(text);
    req_resume(r);
}

static enum MHD_Result tidy_reply(req *r)
{
    json_t *j = req_async_json(r);
    if (!j)
        return reply_hresult(r, SL_ERR_INTERNAL, NULL, "TIDY gave no result");
    json_int_t segs = json_integer_value(json_object_get(j, "segments_freed"));
    json_int_t bytes = json_integer_value(json_object_get(j, "bytes_freed"));
    sl_info("management: TIDY freed %lld segment(s), %lld byte(s)", (long long)segs,
            (long long)bytes);
    return reply_hresult(r, SL_OK, j, NULL);
}
static const char *const queue_actions[] = {"PAUSE", "RESUME", "EOD_RESEND"};

static int find_action(const char *a, const char *const *list)
{
    for (int i = 0; i < 3; i++)
        if (str_ieq(a, list[i]))
            return i;
    return -1;
}

/* R_QMMgmtAction's rules, for every door (HTTP here, DCE/RPC in msrpc_qmmgmt.c): the object
 * and action are checked first, and a refused call changes nothing. TIDY is only checked:
 * *tidy is set and the caller starts it (node_tidy_start), since its answer comes later
 * and each door waits for it its own way. */
sl_err msmq_action(mgmt *m, const char *object, const char *vhost, const char *act, json_t **extra,
                   int *tidy, char *err, size_t errlen)
{
    *extra = NULL;
    *tidy = 0;
    const char *fmt = NULL;
    enum obj_kind kind = parse_object(object, &fmt);
    int ma = find_action(act, machine_actions), qa = find_action(act, queue_actions);
    if (kind == OBJ_SESSION) {
        snprintf(err, errlen, "session objects take no management actions");
        return SL_ERR_INVALID_PARAMETER;
    }
    if (ma < 0 && qa < 0) {
        snprintf(err, errlen, "unknown action '%s'", act);
        return SL_ERR_INVALID_PARAMETER;
    }
    if (kind == OBJ_MACHINE) {
        if (ma < 0) {
            snprintf(err, errlen, "%s applies to outgoing queues, not to the machine",
                     queue_actions[qa]);
            return SL_ERR_INVALID_PARAMETER;
        }
        if (ma == 2) {
            *tidy = 1;
            return SL_OK;
        }
        int online = ma == 0;
        if (m->n->qm->online != online)
            sl_info("management: node %s %s", m->n->cfg->node_name,
                    online ? "brought online (CONNECT)" : "taken offline (DISCONNECT)");
        /* Offline: node-to-node links are refused and stopped, outgoing queues keep their
         * messages; local clients keep working. The flag survives a restart. */
        node_set_online(m->n, online);
        *extra = json_pack("{s:s}", "connected", online ? "CONNECTED" : "DISCONNECTED");
        return SL_OK;
    }
    if (qa < 0) {
        snprintf(err, errlen, "%s applies to the machine, not to a queue", machine_actions[ma]);
        return SL_ERR_INVALID_PARAMETER;
    }
    return msmq_queue_action(m, fmt, vhost, queue_actions[qa], extra, err, errlen);
}

static enum MHD_Result action(req *r)
{
    json_t *body = req_body(r, 0);
    if (!body)
        return MHD_YES;
    json_t *jo = json_object_get(body, "object"), *ja = json_object_get(body, "action");
    if (!json_is_string(jo) || !json_is_string(ja))
        return reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                             "\"object\" and \"action\" (strings) are required");
    json_t *jv = json_object_get(body, "vhost"), *extra = NULL;
    char reason[400];
    int tidy;
    sl_err e =
        msmq_action(r->m, json_string_value(jo), json_is_string(jv) ? json_string_value(jv) : NULL,
                    json_string_value(ja), &extra, &tidy, reason, sizeof reason);
    if (e == SL_OK && tidy) {
        /* TIDY runs a slice per loop turn (compaction can take a while): the reply waits. */
        node_tidy_start(r->m->n, tidy_done, r);
        req_suspend(r, tidy_reply);
        return MHD_YES;
    }
    return reply_hresult(r, e, extra, e == SL_OK ? NULL : reason);
}

sl_err msmq_queue_action(mgmt *m, const char *fmt, const char *vhost, const char *act,
                         json_t **extra, char *err, size_t errlen)
{
    *extra = NULL;
    int qa = find_action(act, queue_actions);
    if (qa < 0) {
        snprintf(err, errlen, "unknown queue action '%s'", act);
        return SL_ERR_INVALID_PARAMETER;
    }
    qm_queue *q;
    sl_err e = fmtname_resolve(m->mq, fmt, vhost, &q, err, errlen);
    if (e != SL_OK)
        return e;
    if (!q->is_outgoing) {
        snprintf(err, errlen, "%s applies to outgoing queues only; '%s' is a local queue",
                 queue_actions[qa], q->name);
        return SL_ERR_INVALID_PARAMETER;
    }
    e = qa == 0 ? link_pause(q) : qa == 1 ? link_resume(q) : link_eod_resend(q);
    if (e != SL_OK) {
        snprintf(err, errlen, "the outgoing queue has no link");
        return e;
    }
    sl_info("management: %s on outgoing queue %s", queue_actions[qa], q->name);
    link_outq_info in;
    link_outq_get_info(q, &in);
    *extra = json_pack("{s:s}", "state", link_state_name(in.state));
    return SL_OK;
}

/* ------------------------------------------------------------------------------------------
 * R_QMMgmtGetInfo
 */

typedef struct prop_def {
    int id;
    const char *name; /* after PROPID_MGMT_MSMQ_ / PROPID_MGMT_QUEUE_ */
    const char *vt;
} prop_def;

static const prop_def machine_props[] = {
    {1, "ACTIVEQUEUES", "VT_LPWSTR|VT_VECTOR"},
    {2, "PRIVATEQ", "VT_LPWSTR|VT_VECTOR"},
    {3, "DSSERVER", "VT_LPWSTR"},
    {4, "CONNECTED", "VT_LPWSTR"},
    {5, "TYPE", "VT_LPWSTR"},
    {6, "BYTES_IN_ALL_QUEUES", "VT_I8"},
};

static const prop_def queue_props[] = {
    {1, "PATHNAME", "VT_LPWSTR"},
    {2, "FORMATNAME", "VT_LPWSTR"},
    {3, "TYPE", "VT_LPWSTR"},
    {4, "LOCATION", "VT_LPWSTR"},
    {5, "XACT", "VT_LPWSTR"},
    {6, "FOREIGN", "VT_LPWSTR"},
    {7, "MESSAGE_COUNT", "VT_UI4"},
    {8, "BYTES_IN_QUEUE", "VT_UI4"},
    {9, "JOURNAL_MESSAGE_COUNT", "VT_UI4"},
    {10, "BYTES_IN_JOURNAL", "VT_UI4"},
    {11, "STATE", "VT_LPWSTR"},
    {12, "NEXTHOPS", "VT_LPWSTR|VT_VECTOR"},
    {13, "EOD_LAST_ACK", "VT_BLOB"},
    {14, "EOD_LAST_ACK_TIME", "VT_I4"},
    {15, "EOD_LAST_ACK_COUNT", "VT_UI4"},
    {16, "EOD_FIRST_NON_ACK", "VT_BLOB"},
    {17, "EOD_LAST_NON_ACK", "VT_BLOB"},
    {18, "EOD_NEXT_SEQ", "VT_BLOB"},
    {19, "EOD_NO_READ_COUNT", "VT_UI4"},
    {20, "EOD_NO_ACK_COUNT", "VT_UI4"},
    {21, "EOD_RESEND_TIME", "VT_I4"},
    {22, "EOD_RESEND_INTERVAL", "VT_UI4"},
    {23, "EOD_RESEND_COUNT", "VT_UI4"},
    {24, "EOD_SOURCE_INFO", "VT_VARIANT|VT_VECTOR"},
    {25, "CONNECTION_HISTORY", "VT_VARIANT|VT_VECTOR"},
    {26, "SUBQUEUE_COUNT", "VT_UI4"},
    {27, "SUBQUEUE_NAMES", "VT_LPWSTR|VT_VECTOR"},
    /* aliases of MS-MQMQ */
    {8, "USED_QUOTA", "VT_UI4"},
    {10, "JOURNAL_USED_QUOTA", "VT_UI4"},
};

#define NMACHINE (sizeof machine_props / sizeof machine_props[0])
#define NQUEUE (sizeof queue_props / sizeof queue_props[0])

static const prop_def *lookup_name(const prop_def *t, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (str_ieq(s, t[i].name))
            return &t[i];
    return NULL;
}

static const prop_def *lookup_id(const prop_def *t, size_t n, long id)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].id == id)
            return &t[i];
    return NULL;
}

/* A property by number, full name or short name, from the object's table. A name of the other
 * table (or an unknown one) is MQ_ERROR_ILLEGAL_PROPID. */
static const prop_def *parse_prop(const char *s, int machine)
{
    const prop_def *t = machine ? machine_props : queue_props;
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

/* ACTIVEQUEUES (active queues and subqueues, by format name) and PRIVATEQ (every private
 * queue, by path name), of the vhosts r's user may list: the machine's properties are a
 * listing like any other (README "Users, vhosts and permissions"). */
static void all_queues(mgmt *m, const msmq_caller *who, json_t *active, json_t *privateq)
{
    char buf[800];
    size_t nv;
    void **vhs = map_sorted(m->n->qm->vhosts, &nv);
    for (size_t i = 0; i < nv; i++) {
        if (!msmq_vhost_listed(m, who, ((qm_vhost *)vhs[i])->name))
            continue;
        size_t nq;
        void **qs = map_sorted(((qm_vhost *)vhs[i])->queues, &nq);
        for (size_t j = 0; j < nq; j++) {
            qm_queue *q = qs[j];
            if (queue_active(q)) {
                fmtname_of(m->mq, q, buf, sizeof buf);
                json_array_append_new(active, json_string(buf));
            }
            if (!q->is_system) {
                pathname_of(m->mq, q, buf, sizeof buf);
                json_array_append_new(privateq, json_string(buf));
            }
            size_t ns;
            void **subs = map_sorted(q->subqueues, &ns);
            for (size_t k = 0; k < ns; k++) {
                if (!queue_active(subs[k]))
                    continue;
                fmtname_of(m->mq, subs[k], buf, sizeof buf);
                json_array_append_new(active, json_string(buf));
            }
            sl_free(subs);
        }
        sl_free(qs);
    }
    sl_free(vhs);
}

static json_t *machine_value(mgmt *m, const msmq_caller *who, int id, const char **vt)
{
    node_totals t;
    json_t *a, *p;
    switch (id) {
    case 1:
    case 2:
        a = json_array();
        p = json_array();
        all_queues(m, who, a, p);
        if (id == 1) {
            json_decref(p);
            return a;
        }
        json_decref(a);
        return p;
    case 4:
        return json_string(m->n->qm->online ? "CONNECTED" : "DISCONNECTED");
    case 5:
        return json_string(SLUICE_PRODUCT " " SLUICE_VERSION " (Linux)");
    case 6: /* BYTES_IN_ALL_QUEUES: of the queues PRIVATEQ lists */
        node_totals_of(m, who, &t);
        return json_integer((json_int_t)t.bytes);
    default: /* DSSERVER: not directory-integrated */
        *vt = "VT_NULL";
        return json_null();
    }
}

static int is_journal(const qm_queue *q)
{
    const char *semi = q->is_subqueue ? strchr(q->name, ';') : NULL;
    return semi && !strcmp(semi + 1, "journal");
}

static json_t *queue_value(mgmt *m, qm_queue *q, int id, const char **vt)
{
    char buf[800];
    if (q->is_outgoing && id != 1 && id != 2 && id != 7 && id != 8 && id != 9 && id != 10)
        return outgoing_prop(m, q, id, vt);
    if (id == 24)
        return eod_source_info(m, q);
    qm_queue *j = q->is_subqueue ? NULL : qm_queue_subqueue(q, "journal", 7, 0);
    json_t *names;
    size_t ns;
    void **subs;
    switch (id) {
    case 1:
        pathname_of(m->mq, q, buf, sizeof buf);
        return json_string(buf);
    case 2:
        fmtname_of(m->mq, q, buf, sizeof buf);
        return json_string(buf);
    case 3:
        return json_string(q->is_system ? "MACHINE" : "PRIVATE");
    case 4:
        return json_string("LOCAL");
    case 5:
        return json_string("NO");
    case 6:
        /* no directory: private queues are not foreign (MS-MQMR 3.1.4.1 FOREIGN rule) */
        return json_string("NO");
    case 7:
        return json_integer(ui4(qm_queue_message_count(q)));
    case 8:
        return json_integer(ui4(q->bytes_total));
    case 9:
        return json_integer(j ? ui4(qm_queue_message_count(j)) : 0);
    case 10:
        return json_integer(j ? ui4(j->bytes_total) : 0);
    case 11:
        return json_string("LOCAL CONNECTION");
    case 26:
    case 27:
        names = json_array();
        subs = map_sorted(q->subqueues, &ns);
        for (size_t i = 0; i < ns; i++) {
            if (is_journal(subs[i]))
                continue; /* the journal is not a subqueue in MSMQ's sense */
            json_array_append_new(names, json_string(strchr(((qm_queue *)subs[i])->name, ';') + 1));
        }
        sl_free(subs);
        if (id == 26) {
            json_t *c = json_integer((json_int_t)json_array_size(names));
            json_decref(names);
            return c;
        }
        return names;
    default: /* outgoing-queue properties: a local queue has none */
        *vt = "VT_NULL";
        return json_null();
    }
}

/* Property list from ?props=a,b or a JSON "props" array. -1 after replying on bad input. */
static int collect_props(req *r, json_t *body, int machine, const prop_def **out, size_t *n)
{
    *n = 0;
    char bad[200] = "";
    json_t *arr = body ? json_object_get(body, "props") : NULL;
    const char *qs = body ? NULL : req_query(r, "props");
    if (arr && json_is_array(arr)) {
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v)
        {
            if (*n == 128) {
                reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL, "at most 128 properties per call");
                return -1;
            }
            char tmp[64];
            const char *s = tmp;
            if (json_is_integer(v))
                snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
            else if (json_is_string(v))
                s = json_string_value(v);
            else
                s = "?";
            const prop_def *p = parse_prop(s, machine);
            if (!p) {
                snprintf(bad, sizeof bad, "%s", s);
                break;
            }
            out[(*n)++] = p;
        }
    } else if (qs) {
        char *copy = sl_xstrdup(qs), *save = NULL;
        for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
            if (*n == 128) {
                sl_free(copy);
                reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL, "at most 128 properties per call");
                return -1;
            }
            const prop_def *p = parse_prop(tok, machine);
            if (!p) {
                snprintf(bad, sizeof bad, "%s", tok);
                break;
            }
            out[(*n)++] = p;
        }
        sl_free(copy);
    }
    if (bad[0]) {
        char reason[300];
        snprintf(reason, sizeof reason, "property '%s' is not a %s property", bad,
                 machine ? "machine (PROPID_MGMT_MSMQ_*)" : "queue (PROPID_MGMT_QUEUE_*)");
        reply_hresult(r, SL_ERR_ILLEGAL_PROPID, NULL, reason);
        return -1;
    }
    if (*n == 0) {
        reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL, "no properties asked for (props=...)");
        return -1;
    }
    return 0;
}

/* R_QMMgmtGetInfo's object, for every door: the machine, or a queue the caller may see (like
 * its GET: users of its vhost). Session objects have no properties. */
sl_err msmq_info_object(mgmt *m, const msmq_caller *who, const char *object, const char *vhost,
                        int *machine, qm_queue **q, char *err, size_t errlen)
{
    const char *fmt = NULL;
    enum obj_kind kind = parse_object(object, &fmt);
    *q = NULL;
    *machine = kind == OBJ_MACHINE;
    if (kind == OBJ_SESSION) {
        snprintf(err, errlen, "session objects have no properties");
        return SL_ERR_INVALID_PARAMETER;
    }
    if (kind == OBJ_MACHINE)
        return SL_OK;
    sl_err e = fmtname_resolve(m->mq, fmt, vhost, q, err, errlen);
    if (e != SL_OK)
        return e;
    if (!msmq_vhost_listed(m, who, (*q)->vhost->name)) {
        *q = NULL;
        snprintf(err, errlen, "User not authorised to access virtual host");
        return SL_ERR_ACCESS_REFUSED;
    }
    return SL_OK;
}

const char *msmq_prop_vt(int machine, int id)
{
    const prop_def *p =
        machine ? lookup_id(machine_props, NMACHINE, id) : lookup_id(queue_props, NQUEUE, id);
    return p ? p->vt : NULL;
}

int msmq_vhost_listed(mgmt *m, const msmq_caller *who, const char *vhost)
{
    return who->is_admin || acc_vhost_visible(m->n->acc, who->user, vhost);
}

json_t *msmq_prop_value(mgmt *m, const msmq_caller *who, int machine, qm_queue *q, int id,
                        const char **vt)
{
    *vt = msmq_prop_vt(machine, id);
    return machine ? machine_value(m, who, id, vt) : queue_value(m, q, id, vt);
}

static enum MHD_Result info(req *r)
{
    json_t *body = NULL;
    const char *obj, *vhost;
    if (req_is(r, "POST")) {
        if (!(body = req_body(r, 0)))
            return MHD_YES;
        json_t *jo = json_object_get(body, "object"), *jv = json_object_get(body, "vhost");
        obj = json_is_string(jo) ? json_string_value(jo) : NULL;
        vhost = json_is_string(jv) ? json_string_value(jv) : NULL;
    } else {
        obj = req_query(r, "object");
        vhost = req_query(r, "vhost");
    }
    if (!obj)
        return reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL, "object=... is required");
    qm_queue *q = NULL;
    int machine;
    char reason[400];
    msmq_caller who = {r->user, r->is_admin};
    sl_err e = msmq_info_object(r->m, &who, obj, vhost, &machine, &q, reason, sizeof reason);
    if (e != SL_OK)
        return reply_hresult(r, e, NULL, reason);
    const prop_def *props[128];
    size_t n;
    if (collect_props(r, body, machine, props, &n) < 0)
        return MHD_YES;
    json_t *list = json_array(), *values = json_object();
    for (size_t i = 0; i < n; i++) {
        const char *vt;
        json_t *v = msmq_prop_value(r->m, &who, machine, q, props[i]->id, &vt);
        char full[80];
        snprintf(full, sizeof full, "PROPID_MGMT_%s_%s", machine ? "MSMQ" : "QUEUE",
                 props[i]->name);
        json_object_set(values, full, v);
        json_array_append_new(list, json_pack("{s:i,s:s,s:s,s:o}", "id", props[i]->id, "name", full,
                                              "vt", vt, "value", v));
    }
    return reply_hresult(
        r, SL_OK, json_pack("{s:s,s:o,s:o}", "object", obj, "properties", list, "values", values),
        NULL);
}

sl_err msmq_queue_prop(mgmt *m, const char *fmt, const char *vhost, int id, json_t **value,
                       const char **vt, char *err, size_t errlen)
{
    *value = NULL;
    const prop_def *p = lookup_id(queue_props, NQUEUE, id);
    if (!p) {
        snprintf(err, errlen, "%d is not a queue property", id);
        return SL_ERR_ILLEGAL_PROPID;
    }
    qm_queue *q;
    sl_err e = fmtname_resolve(m->mq, fmt, vhost, &q, err, errlen);
    if (e != SL_OK)
        return e;
    *vt = p->vt;
    *value = queue_value(m, q, id, vt);
    return SL_OK;
}

enum MHD_Result api_msmq(req *r)
{
    if (r->nsegs >= 2 && !strcmp(r->segs[1], "handles"))
        return api_handles(r);
    if (r->nsegs >= 2 && !strcmp(r->segs[1], "management"))
        return api_mgmtobj(r);
    if (r->nsegs == 2 && !strcmp(r->segs[1], "outgoing"))
        return api_outgoing(r);
    if (r->nsegs == 2 && !strcmp(r->segs[1], "remote"))
        return req_is(r, "POST") ? api_remote(r) : reply_method_not_allowed(r);
    if (r->nsegs == 2 && !strcmp(r->segs[1], "action"))
        return req_is(r, "POST") ? action(r) : reply_method_not_allowed(r);
    if (r->nsegs == 2 && !strcmp(r->segs[1], "info"))
        return req_is(r, "GET") || req_is(r, "POST") ? info(r) : reply_method_not_allowed(r);
    return reply_not_found(r);
}
