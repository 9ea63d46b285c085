/* api_mgmtobj.c - MC-MQAC's management object (MSMQManagement with IMSMQQueueManagement and
 * IMSMQOutgoingQueueManagement) as a resource (reference/msmq.md sections 4.1-4.5):
 *
 *   POST   /api/msmq/management              create an uninitialized object -> 201 {"id": M}
 *   POST   /api/msmq/management/M/init       {"machine", "pathname" | "format_name", "vhost"}
 *   GET    /api/msmq/management/M/<member>   format-name, machine, message-count, ...
 *   POST   /api/msmq/management/M/<action>   resume, pause, eod-resend
 *   GET    /api/msmq/management[/M]          the caller's objects / one object's binding
 *   DELETE /api/msmq/management/M            release it (COM's Release)
 *
 * The object follows MC-MQAC: it holds a binding (ComputerName, QueueFormatName,
 * ObjectIsInitialized, QueueIsOutgoing), and every member first checks ObjectIsInitialized
 * (MQ_ERROR_UNINITIALIZED_OBJECT, 0xC00E0094), then checks that the member belongs to an
 * interface the bound queue has (QueryInterface: E_NOINTERFACE, 0x80004002: the
 * IMSMQQueueManagement members on an outgoing queue, the IMSMQOutgoingQueueManagement ones on
 * a destination queue), then raises QMMgmt Get Info, i.e. this node's R_QMMgmtGetInfo for
 * the bound format name (api_msmq.c), and propagates its HRESULT. So the object is bound to
 * a format name, not to one incarnation of a queue (unlike a handle): a queue deleted since
 * Init answers MQ_ERROR_QUEUE_NOT_FOUND, and one declared again under the name answers for
 * itself, as MSMQManagement does.
 *
 * Replies: {"hresult", "hresult_name", "member", "value"}, plus "name" for members whose value
 * is an MC-MQAC enumeration (as the MC-MQAC view of GET /api/queues/{vhost}/{name} does).
 *
 * With a Machine other than this node ("host" or "host:port"), Get Info goes to that node over
 * the link's request channel ("queue.getinfo", answered there by serve_peer below through its
 * own R_QMMgmtGetInfo), the request waiting (req_suspend) until the answer or
 * handle_remote_timeout; the owner's HRESULT comes back as it is. Actions on another node's queues
 * are refused (MQ_ERROR_ACCESS_DENIED): a link peer is not an administrator of that node.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "core/clock.h"
#include "core/mem.h"
#include "link/link.h"
#include "link/rpc_queue.h"
#include "mgmt/mgmt_internal.h"

typedef struct mobj {
    ctx_entry e; /* first */
    int initialized;
    int outgoing;      /* QueueIsOutgoing: bound to an outgoing queue */
    char *machine;     /* ComputerName as given; NULL = this node */
    char *format_name; /* QueueFormatName */
    char *vhost;       /* vhost hint for the format name, or NULL */
    char *rhost;       /* Machine is another node: its address and port */
    int rport;
    /* an Init on its way to another node: the binding it will take */
    char *p_machine, *p_format_name, *p_vhost, *p_rhost;
    int p_rport;
} mobj;

static void clear_pending(mobj *o)
{
    sl_free(o->p_machine);
    sl_free(o->p_format_name);
    sl_free(o->p_vhost);
    sl_free(o->p_rhost);
    o->p_machine = o->p_format_name = o->p_vhost = o->p_rhost = NULL;
}

static void mobj_close(void *ctx, ctx_entry *e)
{
    (void)ctx;
    mobj *o = (mobj *)e;
    clear_pending(o);
    sl_free(o->rhost);
    sl_free(o->machine);
    sl_free(o->format_name);
    sl_free(o->vhost);
    ctx_entry_free(&o->e);
    sl_free(o);
}

static char *serve_peer(void *ctx, const char *peer, const char *user, const char *op, json_t *rq);

void mgmtobj_init(mgmt *m)
{
    ctxtab_init(&m->mobjs, "management object", m->mq->run_id, m->n->cfg, mobj_close, m);
    link_rpc_set_mgmt(serve_peer, m);
}

void mgmtobj_stop(mgmt *m)
{
    (void)m;
    link_rpc_set_mgmt(NULL, NULL);
}

/* ------------------------------------------------------------------------------------------
 * Members
 */

enum iface { IF_MANAGEMENT, IF_QUEUE, IF_OUTGOING };

static const char *const iface_names[] = {"IMSMQManagement", "IMSMQQueueManagement",
                                          "IMSMQOutgoingQueueManagement"};

enum conv {
    CV_FORMAT_NAME,
    CV_MACHINE,
    CV_PLAIN,
    CV_ENUM,
    CV_IS_LOCAL,
    CV_ARRAY,
    CV_RECEIVE_INFO,
    CV_SEND_INFO,
    CV_ACTION
};

typedef struct member {
    const char *path; /* URL segment */
    const char *name; /* MC-MQAC member */
    enum iface iface;
    enum conv conv;
    int propid;         /* PROPID_MGMT_QUEUE_* read, or 0 */
    const char *action; /* QMMgmt Action string for CV_ACTION */
} member;

static const member members[] = {
    {"format-name", "FormatName", IF_MANAGEMENT, CV_FORMAT_NAME, 0, NULL},
    {"machine", "Machine", IF_MANAGEMENT, CV_MACHINE, 0, NULL},
    {"message-count", "MessageCount", IF_MANAGEMENT, CV_PLAIN, 7, NULL},
    {"foreign-status", "ForeignStatus", IF_MANAGEMENT, CV_ENUM, 6, NULL},
    {"queue-type", "QueueType", IF_MANAGEMENT, CV_ENUM, 3, NULL},
    {"is-local", "IsLocal", IF_MANAGEMENT, CV_IS_LOCAL, 4, NULL},
    {"transactional-status", "TransactionalStatus", IF_MANAGEMENT, CV_ENUM, 5, NULL},
    {"bytes-in-queue", "BytesInQueue", IF_MANAGEMENT, CV_PLAIN, 8, NULL},
    {"journal-message-count", "JournalMessageCount", IF_QUEUE, CV_PLAIN, 9, NULL},
    {"bytes-in-journal", "BytesInJournal", IF_QUEUE, CV_PLAIN, 10, NULL},
    {"eod-get-receive-info", "EodGetReceiveInfo", IF_QUEUE, CV_RECEIVE_INFO, 24, NULL},
    {"state", "State", IF_OUTGOING, CV_ENUM, 11, NULL},
    {"next-hops", "NextHops", IF_OUTGOING, CV_ARRAY, 12, NULL},
    {"eod-get-send-info", "EodGetSendInfo", IF_OUTGOING, CV_SEND_INFO, 0, NULL},
    {"resume", "Resume", IF_OUTGOING, CV_ACTION, 0, "RESUME"},
    {"pause", "Pause", IF_OUTGOING, CV_ACTION, 0, "PAUSE"},
    {"eod-resend", "EodResend", IF_OUTGOING, CV_ACTION, 0, "EOD_RESEND"},
};

static const member *find_member(const char *path)
{
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++)
        if (str_ieq(path, members[i].path) || str_ieq(path, members[i].name))
            return &members[i];
    return NULL;
}

/* The string values of R_QMMgmtGetInfo and the MC-MQAC enumerations they become (4.5). */
typedef struct enum_val {
    const char *str;
    int value;
    const char *name;
} enum_val;

static const enum_val foreign_vals[] = {
    {"YES", 0, "MQ_STATUS_FOREIGN"},
    {"NO", 1, "MQ_STATUS_NOT_FOREIGN"},
    {"UNKNOWN", 2, "MQ_STATUS_UNKNOWN"},
    {NULL, 0, NULL},
};
static const enum_val type_vals[] = {
    {"PUBLIC", 0, "MQ_TYPE_PUBLIC"},       {"PRIVATE", 1, "MQ_TYPE_PRIVATE"},
    {"MACHINE", 2, "MQ_TYPE_MACHINE"},     {"CONNECTOR", 3, "MQ_TYPE_CONNECTOR"},
    {"MULTICAST", 4, "MQ_TYPE_MULTICAST"}, {NULL, 0, NULL},
};
static const enum_val xact_vals[] = {
    {"YES", 0, "MQ_XACT_STATUS_XACT"},
    {"NO", 1, "MQ_XACT_STATUS_NOT_XACT"},
    {"UNKNOWN", 2, "MQ_XACT_STATUS_UNKNOWN"},
    {NULL, 0, NULL},
};
static const enum_val state_vals[] = {
    {"LOCAL CONNECTION", 0, "MQ_QUEUE_STATE_LOCAL_CONNECTION"},
    {"DISCONNECTED", 1, "MQ_QUEUE_STATE_DISCONNECTED"},
    {"WAITING", 2, "MQ_QUEUE_STATE_WAITING"},
    {"NEED VALIDATION", 3, "MQ_QUEUE_STATE_NEEDVALIDATE"},
    {"ONHOLD", 4, "MQ_QUEUE_STATE_ONHOLD"},
    {"INACTIVE", 5, "MQ_QUEUE_STATE_NONACTIVE"},
    {"CONNECTED", 6, "MQ_QUEUE_STATE_CONNECTED"},
    {"DISCONNECTING", 7, "MQ_QUEUE_STATE_DISCONNECTING"},
    {"LOCKED", 8, "MQ_QUEUE_STATE_LOCKED"},
    {NULL, 0, NULL},
};

static const enum_val *enum_table(int propid)
{
    switch (propid) {
    case 3:
        return type_vals;
    case 5:
        return xact_vals;
    case 6:
        return foreign_vals;
    default:
        return state_vals;
    }
}

/* QMMgmt Get Info (MC-MQAC 3.3.6.2) for a binding of this node. */
static sl_err get_info(req *r, mobj *o, int propid, json_t **value, char *err, size_t errlen)
{
    /* a queue's properties are for users of its vhost, as R_QMMgmtGetInfo's (api_msmq.c) */
    qm_queue *q;
    sl_err e = fmtname_resolve(r->m->mq, o->format_name, o->vhost, &q, err, errlen);
    if (e != SL_OK)
        return e;
    if (!req_vhost_listed(r, q->vhost->name)) {
        snprintf(err, errlen, "User not authorised to access virtual host");
        return SL_ERR_ACCESS_REFUSED;
    }
    const char *vt;
    return msmq_queue_prop(r->m, o->format_name, o->vhost, propid, value, &vt, err, errlen);
}

/* The PROPID_MGMT_QUEUE_* a member reads: EodGetSendInfo's eleven, one for the others, none
 * for FormatName, Machine and the actions. */
static int member_props(const member *mb, int *ids)
{
    if (mb->conv == CV_SEND_INFO) {
        for (int i = 0; i < 11; i++)
            ids[i] = 13 + i;
        return 11;
    }
    if (mb->conv == CV_FORMAT_NAME || mb->conv == CV_MACHINE || mb->conv == CV_ACTION)
        return 0;
    ids[0] = mb->propid;
    return 1;
}

/* EodGetSendInfo: eleven GetInfo values collected under MC-MQAC's keys (section 4.4). */
static json_t *send_info(json_t **v)
{
    static const char *const keys[] = {
        "EodLastAck",    "EodLastAckTime",    "EodLastAckCount", "EodFirstNonAck",
        "EodLastNonAck", "EodNextSeq",        "EodNoReadCount",  "EodNoAckCount",
        "EodResendTime", "EodResendInterval", "EodResendCount",
    };
    json_t *c = json_object();
    for (int i = 0; i < 11; i++) {
        json_object_set_new(c, keys[i], v[i]);
        v[i] = NULL;
    }
    return c;
}

/* EodGetReceiveInfo: PROPID_MGMT_QUEUE_EOD_SOURCE_INFO's six parallel vectors turned into
 * one collection per incoming sequence (section 4.3); no incoming sequence: []. */
static json_t *receive_info(json_t *v)
{
    static const char *const keys[] = {"QueueFormatName", "SenderID",       "SeqID",
                                       "SeqNo",           "LastAccessTime", "RejectCount"};
    json_t *out = json_array();
    if (!json_is_array(v) || json_array_size(v) != 6)
        return out;
    size_t n = json_array_size(json_array_get(v, 0));
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_object();
        for (size_t k = 0; k < 6; k++) {
            json_t *x = json_array_get(json_array_get(v, k), i);
            json_object_set(c, keys[k], x ? x : json_null());
        }
        json_array_append_new(out, c);
    }
    return out;
}

static enum MHD_Result reply_member(req *r, const member *mb, json_t *value, const char *name)
{
    json_t *j = json_pack("{s:s,s:s,s:o}", "member", mb->name, "interface", iface_names[mb->iface],
                          "value", value);
    if (name)
        json_object_set_new(j, "name", json_string(name));
    return reply_hresult(r, SL_OK, j, NULL);
}

/* The member's value from the properties it read (v[], stolen), as MC-MQAC converts them. */
static enum MHD_Result answer(req *r, const member *mb, json_t **v)
{
    char reason[300];
    if (mb->conv == CV_SEND_INFO)
        return reply_member(r, mb, send_info(v), NULL);
    json_t *x = v[0];
    v[0] = NULL;
    if (mb->conv == CV_PLAIN)
        return reply_member(r, mb, json_is_null(x) ? (json_decref(x), json_integer(0)) : x, NULL);
    if (mb->conv == CV_IS_LOCAL) {
        int local = json_is_string(x) && str_ieq(json_string_value(x), "LOCAL");
        json_decref(x);
        return reply_member(r, mb, json_boolean(local), local ? "VARIANT_TRUE" : "VARIANT_FALSE");
    }
    if (mb->conv == CV_ARRAY) {
        if (!json_is_array(x)) {
            json_decref(x);
            x = json_array();
        }
        return reply_member(r, mb, x, NULL);
    }
    if (mb->conv == CV_RECEIVE_INFO) {
        json_t *ri = receive_info(x);
        json_decref(x);
        return reply_member(r, mb, ri, NULL);
    }
    /* CV_ENUM */
    const enum_val *t = enum_table(mb->propid);
    const char *s = json_is_string(x) ? json_string_value(x) : "";
    for (; t->str; t++) {
        if (str_ieq(s, t->str)) {
            json_decref(x);
            return reply_member(r, mb, json_integer(t->value), t->name);
        }
    }
    snprintf(reason, sizeof reason, "%s: unexpected property value '%s'", mb->name, s);
    json_decref(x);
    return reply_hresult(r, SL_ERR_INTERNAL, NULL, reason);
}

/* ---- Get Info at another node ---- */

/* Ask host:port for props of fmt; the answer resumes r with fn. */
static enum MHD_Result ask_owner(req *r, mobj *o, const char *host, int port, const char *fmt,
                                 const char *vhost, const int *ids, int n,
                                 enum MHD_Result (*fn)(req *r), const char *tag)
{
    char reason[400];
    json_t *props = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(props, json_integer(ids[i]));
    json_t *j =
        json_pack("{s:s,s:s,s:o}", "op", "queue.getinfo", "format_name", fmt, "props", props);
    if (vhost)
        json_object_set_new(j, "vhost", json_string(vhost));
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    snprintf(r->async_tag, sizeof r->async_tag, "%s%s", o->e.id, tag);
    sl_err e = r->m->n->links
                   ? link_rpc_call(r->m->n->links, host, port, text,
                                   r->m->n->cfg->handle_remote_timeout_ms, req_link_done, r)
                   : SL_ERR_NOT_ALLOWED;
    free(text);
    if (e != SL_OK) {
        snprintf(reason, sizeof reason, "cannot ask node %s:%d%s", host, port,
                 e == SL_ERR_NOT_ALLOWED ? ": this node is offline (DISCONNECT)" : "");
        return reply_hresult(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE, NULL, reason);
    }
    o->e.busy = 1;
    req_suspend(r, fn);
    return MHD_YES;
}

/* The owner's values (n of them, into v) or its failure as our reply (then -1). */
static int owner_values(req *r, const char *host, int port, int n, json_t **v, enum MHD_Result *rc)
{
    char reason[700];
    json_t *reply = req_async_json(r);
    if (!reply) {
        snprintf(reason, sizeof reason, "node %s:%d did not answer (%s)", host, port,
                 r->async_err ? r->async_err : "no answer");
        *rc = reply_hresult(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE, NULL, reason);
        return -1;
    }
    int ret = -1;
    json_t *vals = json_object_get(reply, "values");
    if (!json_is_true(json_object_get(reply, "ok"))) {
        const char *why = json_string_value(json_object_get(reply, "reason"));
        snprintf(reason, sizeof reason, "node %s:%d answered: %s", host, port,
                 why ? why : "a failure");
        *rc = reply_remote_hresult(r, json_string_value(json_object_get(reply, "hresult")),
                                   json_string_value(json_object_get(reply, "hresult_name")),
                                   reason, NULL);
    } else if (!json_is_array(vals) || json_array_size(vals) != (size_t)n ||
               !json_is_string(json_object_get(reply, "vhost"))) {
        snprintf(reason, sizeof reason, "node %s:%d answered without the values asked for", host,
                 port);
        *rc = reply_hresult(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE, NULL, reason);
    } else if (!req_vhost_listed(r, json_string_value(json_object_get(reply, "vhost")))) {
        /* this node's user, on the vhost the owner resolved, at every read: properties of a
         * queue follow the listing rule (a permission entry on its vhost; administrators
         * every vhost), as for a queue of this node */
        snprintf(reason, sizeof reason, "user '%s' is not authorised to access virtual host '%s'",
                 r->user, json_string_value(json_object_get(reply, "vhost")));
        *rc = reply_hresult(r, SL_ERR_ACCESS_REFUSED, NULL, reason);
    } else {
        for (int i = 0; i < n; i++) {
            json_t *x = json_object_get(json_array_get(vals, (size_t)i), "value");
            v[i] = x ? json_incref(x) : json_null();
        }
        ret = 0;
    }
    json_decref(reply);
    return ret;
}

static mobj *waiting_object(req *r)
{
    mobj *o = sl_map_get(r->m->mobjs.by_id, r->async_tag, CTX_ID_LEN);
    if (o)
        o->e.busy = 0;
    return o;
}

static enum MHD_Result member_resumed(req *r)
{
    mobj *o = waiting_object(r);
    const member *mb = o ? find_member(r->async_tag + CTX_ID_LEN) : NULL;
    if (!o || !mb)
        return reply_hresult(r, SL_ERR_INVALID_HANDLE, NULL,
                             "the management object was released meanwhile");
    int ids[11];
    int n = member_props(mb, ids);
    json_t *v[11] = {0};
    enum MHD_Result rc;
    if (owner_values(r, o->rhost, o->rport, n, v, &rc) < 0)
        return rc;
    return answer(r, mb, v);
}

static enum MHD_Result invoke(req *r, mobj *o, const member *mb)
{
    char reason[600];
    if (mb->conv == CV_ACTION ? !req_is(r, "POST") : !req_is(r, "GET"))
        return reply_method_not_allowed(r);
    if (!o->initialized) {
        snprintf(reason, sizeof reason,
                 "management object %s is not initialized: POST .../%s/init first", o->e.id,
                 o->e.id);
        return reply_hresult(r, SL_ERR_UNINITIALIZED_OBJECT, NULL, reason);
    }
    if ((mb->iface == IF_QUEUE && o->outgoing) || (mb->iface == IF_OUTGOING && !o->outgoing)) {
        snprintf(reason, sizeof reason,
                 "%s is a member of %s; a management object bound to %s "
                 "has no such interface",
                 mb->name, iface_names[mb->iface],
                 o->outgoing ? "an outgoing queue" : "a destination queue");
        return reply_hresult(r, SL_ERR_NOINTERFACE, NULL, reason);
    }
    json_t *v[11] = {0};
    sl_err e = SL_OK;
    switch (mb->conv) {
    case CV_FORMAT_NAME:
        return reply_member(r, mb, json_string(o->format_name), NULL);
    case CV_MACHINE:
        return reply_member(r, mb, json_string(o->machine ? o->machine : fmt_computer(r->m->mq)), NULL);
    case CV_ACTION:
        if (o->rhost) {
            snprintf(reason, sizeof reason,
                     "%s acts on a queue of node %s:%d; management actions are taken on the "
                     "node itself, not through a link",
                     mb->name, o->rhost, o->rport);
            return reply_hresult(r, SL_ERR_ACCESS_REFUSED, NULL, reason);
        }
        /* QMMgmt Action (MC-MQAC 3.3.6.3): this node's R_QMMgmtAction */
        if ((e = msmq_queue_action(r->m, o->format_name, o->vhost, mb->action, &v[0], reason,
                                   sizeof reason)) != SL_OK)
            return reply_hresult(r, e, NULL, reason);
        json_object_set_new(v[0], "member", json_string(mb->name));
        json_object_set_new(v[0], "interface", json_string(iface_names[mb->iface]));
        return reply_hresult(r, SL_OK, v[0], NULL);
    default:
        break;
    }
    int ids[11];
    int n = member_props(mb, ids);
    if (o->rhost)
        return ask_owner(r, o, o->rhost, o->rport, o->format_name, o->vhost, ids, n, member_resumed,
                         mb->path);
    for (int i = 0; i < n; i++) {
        if ((e = get_info(r, o, ids[i], &v[i], reason, sizeof reason)) != SL_OK) {
            for (int k = 0; k < i; k++)
                json_decref(v[k]);
            return reply_hresult(r, e, NULL, reason);
        }
    }
    return answer(r, mb, v);
}

/* ---- the owner's end: Get Info for a management object of another node ---- */

static char *peer_reply(json_t *j)
{
    char *t = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    char *out = sl_xstrdup(t ? t : "{\"ok\":false}");
    free(t);
    return out;
}

static char *peer_fail(sl_err e, const char *reason)
{
    char hr[16];
    hresult_str(e, hr, sizeof hr);
    return peer_reply(json_pack("{s:b,s:s,s:s,s:s}", "ok", 0, "hresult", hr, "hresult_name",
                                sl_err_get(e)->hresult_name, "reason", reason));
}

static char *serve_peer(void *ctx, const char *peer, const char *user, const char *op, json_t *rq)
{
    (void)peer;
    (void)op; /* "queue.getinfo" only */
    mgmt *m = ctx;
    json_t *jf = json_object_get(rq, "format_name"), *jv = json_object_get(rq, "vhost");
    json_t *props = json_object_get(rq, "props");
    if (!json_is_string(jf) || (jv && !json_is_null(jv) && !json_is_string(jv)) ||
        !json_is_array(props) || json_array_size(props) == 0 || json_array_size(props) > 128)
        return peer_fail(SL_ERR_INVALID_PARAMETER,
                         "queue.getinfo takes \"format_name\", \"vhost\" and 1..128 \"props\"");
    char err[600];
    qm_queue *q;
    sl_err qe =
        fmtname_resolve(m->mq, json_string_value(jf), json_is_string(jv) ? json_string_value(jv) : NULL,
                        &q, err, sizeof err);
    if (qe != SL_OK)
        return peer_fail(qe, err);
    /* the link's user reads properties of the vhosts it has a permission entry on */
    if (!acc_vhost_visible(m->n->acc, user, q->vhost->name)) {
        snprintf(err, sizeof err, "user '%s' is not authorised to access virtual host '%s'", user,
                 q->vhost->name);
        return peer_fail(SL_ERR_ACCESS_REFUSED, err);
    }
    json_t *vals = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(props, i, p)
    {
        json_t *value;
        const char *vt;
        sl_err e = msmq_queue_prop(
            m, json_string_value(jf), json_is_string(jv) ? json_string_value(jv) : NULL,
            json_is_integer(p) ? (int)json_integer_value(p) : -1, &value, &vt, err, sizeof err);
        if (e != SL_OK) {
            json_decref(vals);
            return peer_fail(e, err);
        }
        json_array_append_new(vals,
                              json_pack("{s:I,s:s,s:o}", "id", (json_int_t)json_integer_value(p),
                                        "vt", vt, "value", value));
    }
    /* the vhost and queue the owner resolved: the asking node checks its own user on them */
    return peer_reply(json_pack("{s:b,s:o,s:s,s:s}", "ok", 1, "values", vals, "vhost",
                                q->vhost->name, "queue", q->name));
}

/* ------------------------------------------------------------------------------------------
 * Init (MC-MQAC IMSMQManagement::Init, section 4.2)
 */

static json_t *mobj_json(mgmt *m, mobj *o)
{
    json_t *j = json_pack("{s:s,s:s,s:b,s:I}", "id", o->e.id, "user", o->e.owner, "initialized",
                          o->initialized, "opened_at", (json_int_t)o->e.opened_wall_ms);
    if (o->initialized) {
        json_object_set_new(j, "machine", json_string(o->machine ? o->machine : fmt_computer(m->mq)));
        json_object_set_new(j, "format_name", json_string(o->format_name));
        json_object_set_new(j, "vhost", o->vhost ? json_string(o->vhost) : json_null());
        json_object_set_new(j, "interface",
                            json_string(iface_names[o->outgoing ? IF_OUTGOING : IF_QUEUE]));
        if (o->rhost) {
            char owner[300];
            snprintf(owner, sizeof owner, "%s:%d", o->rhost, o->rport);
            json_object_set_new(j, "owner", json_string(owner));
        }
    }
    return j;
}

static enum MHD_Result init_resumed(req *r);

static enum MHD_Result init(req *r, mobj *o)
{
    json_t *body = req_body(r, 0);
    if (!body)
        return MHD_YES;
    json_t *jm = json_object_get(body, "machine"), *jp = json_object_get(body, "pathname");
    json_t *jf = json_object_get(body, "format_name"), *jv = json_object_get(body, "vhost");
    int has_p = jp && !json_is_null(jp), has_f = jf && !json_is_null(jf);
    if (has_p == has_f)
        return reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                             "Init takes exactly one of \"pathname\" and \"format_name\"");
    if ((has_p && !json_is_string(jp)) || (has_f && !json_is_string(jf)) ||
        (jm && !json_is_null(jm) && !json_is_string(jm)) ||
        (jv && !json_is_null(jv) && !json_is_string(jv)))
        return reply_hresult(
            r, SL_ERR_INVALID_PARAMETER, NULL,
            "\"machine\", \"pathname\", \"format_name\" and \"vhost\" are strings");
    const char *machine = json_is_string(jm) ? json_string_value(jm) : NULL;
    if (machine && !*machine)
        machine = NULL; /* MC-MQAC: omitted = the local computer */
    char reason[600], rhost[256];
    int rport = 0, remote = machine && !fmt_is_local_machine(r->m->mq, machine);
    if (remote && fmt_machine_split(machine, rhost, sizeof rhost, &rport) < 0) {
        snprintf(reason, sizeof reason,
                 "machine '%.200s' is not this node nor an address ('host' or 'host:port')",
                 machine);
        return reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL, reason);
    }
    char fmt[1200];
    if (has_p) {
        if (fmtname_from_pathname(json_string_value(jp), fmt, sizeof fmt) < 0) {
            snprintf(reason, sizeof reason,
                     "'%.300s' is not a path name (<computer>\\private$\\<queue>)",
                     json_string_value(jp));
            return reply_hresult(r, SL_ERR_INVALID_PATH, NULL, reason);
        }
    } else {
        snprintf(fmt, sizeof fmt, "%s", json_string_value(jf));
    }
    const char *vhost = json_is_string(jv) ? json_string_value(jv) : NULL;
    if (remote) {
        /* MS-MQMR bound to that machine: its Get Info (LOCATION), over the link */
        clear_pending(o);
        o->p_machine = sl_xstrdup(machine);
        o->p_format_name = sl_xstrdup(fmt);
        o->p_vhost = vhost ? sl_xstrdup(vhost) : NULL;
        o->p_rhost = sl_xstrdup(rhost);
        o->p_rport = rport;
        static const int location[] = {4};
        return ask_owner(r, o, rhost, rport, fmt, vhost, location, 1, init_resumed, "");
    }
    /* QMMgmt Get Info (LOCATION): the queue must be there; "REMOTE" means an outgoing queue */
    mobj probe = {.format_name = fmt, .vhost = (char *)vhost};
    json_t *loc;
    sl_err e = get_info(r, &probe, 4, &loc, reason, sizeof reason);
    if (e != SL_OK)
        return reply_hresult(r, e, NULL, reason); /* a failed Init changes nothing */
    int outgoing = json_is_string(loc) && str_ieq(json_string_value(loc), "REMOTE");
    json_decref(loc);
    sl_free(o->machine);
    sl_free(o->format_name);
    sl_free(o->vhost);
    sl_free(o->rhost);
    o->machine = machine ? sl_xstrdup(machine) : NULL;
    o->format_name = sl_xstrdup(fmt);
    o->vhost = vhost ? sl_xstrdup(vhost) : NULL;
    o->rhost = NULL;
    o->outgoing = outgoing;
    o->initialized = 1;
    return reply_hresult(r, SL_OK, mobj_json(r->m, o), NULL);
}

static enum MHD_Result init_resumed(req *r)
{
    mobj *o = waiting_object(r);
    if (!o)
        return reply_hresult(r, SL_ERR_INVALID_HANDLE, NULL,
                             "the management object was released meanwhile");
    json_t *v[1] = {NULL};
    enum MHD_Result rc;
    if (owner_values(r, o->p_rhost, o->p_rport, 1, v, &rc) < 0) {
        clear_pending(o); /* a failed Init changes nothing */
        return rc;
    }
    int outgoing = json_is_string(v[0]) && str_ieq(json_string_value(v[0]), "REMOTE");
    json_decref(v[0]);
    sl_free(o->machine);
    sl_free(o->format_name);
    sl_free(o->vhost);
    sl_free(o->rhost);
    o->machine = o->p_machine;
    o->format_name = o->p_format_name;
    o->vhost = o->p_vhost;
    o->rhost = o->p_rhost;
    o->rport = o->p_rport;
    o->p_machine = o->p_format_name = o->p_vhost = o->p_rhost = NULL;
    o->outgoing = outgoing;
    o->initialized = 1;
    return reply_hresult(r, SL_OK, mobj_json(r->m, o), NULL);
}

/* ------------------------------------------------------------------------------------------
 * Routing
 */

enum MHD_Result api_mgmtobj(req *r)
{
    char reason[400];
    sl_err e;
    /* segs: msmq management [M [member]] */
    if (r->nsegs == 2) {
        if (req_is(r, "GET")) {
            size_t n;
            ctx_entry **v = ctx_list(&r->m->mobjs, r->user, &n);
            json_t *arr = json_array();
            for (size_t i = 0; i < n; i++)
                json_array_append_new(arr, mobj_json(r->m, (mobj *)v[i]));
            sl_free(v);
            return reply_json(r, 200, arr);
        }
        if (!req_is(r, "POST"))
            return reply_method_not_allowed(r);
        mobj *o = sl_xcalloc(1, sizeof *o);
        if ((e = ctx_add(&r->m->mobjs, &o->e, r->user, reason, sizeof reason)) != SL_OK) {
            sl_free(o);
            return reply_hresult(r, e, NULL, reason);
        }
        json_t *j = mobj_json(r->m, o);
        json_object_set_new(j, "hresult", json_string("0x00000000"));
        json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
        return reply_json(r, 201, j);
    }
    if (r->nsegs > 4)
        return reply_not_found(r);
    const member *mb = NULL;
    if (r->nsegs == 4 && strcmp(r->segs[3], "init") && !(mb = find_member(r->segs[3]))) {
        /* IDispatch: no such member, whatever the object's state */
        snprintf(reason, sizeof reason,
                 "'%.100s' is not a member of MSMQManagement, "
                 "MSMQQueueManagement or MSMQOutgoingQueueManagement",
                 r->segs[3]);
        return reply_hresult(r, SL_ERR_MEMBER_NOT_FOUND, NULL, reason);
    }
    if (r->nsegs == 4 && !mb && !req_is(r, "POST"))
        return reply_method_not_allowed(r);
    if (r->nsegs == 3 && !req_is(r, "GET") && !req_is(r, "DELETE"))
        return reply_method_not_allowed(r);
    ctx_entry *ce;
    if ((e = ctx_lookup(&r->m->mobjs, r->segs[2], r->user, &ce, reason, sizeof reason)) !=
        SL_OK)
        return reply_hresult(r, e, NULL, reason);
    mobj *o = (mobj *)ce;
    if (r->nsegs == 4)
        return mb ? invoke(r, o, mb) : init(r, o);
    if (req_is(r, "GET")) {
        json_t *j = mobj_json(r->m, o);
        json_object_set_new(j, "hresult", json_string("0x00000000"));
        json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
        return reply_json(r, 200, j);
    }
    char id[CTX_ID_LEN + 1];
    memcpy(id, o->e.id, sizeof id);
    ctx_remove(&r->m->mobjs, &o->e);
    mobj_close(r->m, &o->e);
    return reply_hresult(r, SL_OK, json_pack("{s:s,s:b}", "id", id, "released", 1), NULL);
}
