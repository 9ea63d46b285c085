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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../core/log.h"
#include "../core/mem.h"
#include "mgmt_internal.h"

typedef struct mobj {
    ctx_entry e; /* first */
    int initialized;
    int outgoing;      /* QueueIsOutgoing: bound to an outgoing queue */
    char *machine;     /* ComputerName as given; NULL = this node */
    char *format_name; /* QueueFormatName */
    char *vhost;       /* vhost hint for the format name, or NULL */
} mobj;

static void mobj_close(mgmt *m, ctx_entry *e)
{
    (void)m;
    mobj *o = (mobj *)e;
    sl_free(o->machine);
    sl_free(o->format_name);
    sl_free(o->vhost);
    ctx_entry_free(&o->e);
    sl_free(o);
}

void mgmtobj_init(mgmt *m)
{
    ctxtab_init(&m->mobjs, "management object", mobj_close);
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

/* QMMgmt Get Info (MC-MQAC 3.3.6.2) for the object's binding. */
static sl_err get_info(mgmt *m, mobj *o, int propid, json_t **value, char *err, size_t errlen)
{
    const char *vt;
    return msmq_queue_prop(m, o->format_name, o->vhost, propid, value, &vt, err, errlen);
}

/* EodGetSendInfo: eleven GetInfo calls collected under MC-MQAC's keys (section 4.4). */
static sl_err send_info(mgmt *m, mobj *o, json_t **out, char *err, size_t errlen)
{
    static const char *const keys[] = {
        "EodLastAck",    "EodLastAckTime",    "EodLastAckCount", "EodFirstNonAck",
        "EodLastNonAck", "EodNextSeq",        "EodNoReadCount",  "EodNoAckCount",
        "EodResendTime", "EodResendInterval", "EodResendCount",
    };
    json_t *c = json_object();
    for (int i = 0; i < 11; i++) {
        json_t *v;
        sl_err e = get_info(m, o, 13 + i, &v, err, errlen);
        if (e != SL_OK) {
            json_decref(c);
            return e;
        }
        json_object_set_new(c, keys[i], v);
    }
    *out = c;
    return SL_OK;
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
    json_t *v = NULL;
    sl_err e = SL_OK;
    switch (mb->conv) {
    case CV_FORMAT_NAME:
        return reply_member(r, mb, json_string(o->format_name), NULL);
    case CV_MACHINE:
        return reply_member(r, mb, json_string(o->machine ? o->machine : fmt_computer(r->m)), NULL);
    case CV_SEND_INFO:
        if ((e = send_info(r->m, o, &v, reason, sizeof reason)) != SL_OK)
            return reply_hresult(r, e, NULL, reason);
        return reply_member(r, mb, v, NULL);
    case CV_ACTION:
        /* QMMgmt Action (MC-MQAC 3.3.6.3): this node's R_QMMgmtAction */
        if ((e = msmq_queue_action(r->m, o->format_name, o->vhost, mb->action, &v, reason,
                                   sizeof reason)) != SL_OK)
            return reply_hresult(r, e, NULL, reason);
        json_object_set_new(v, "member", json_string(mb->name));
        json_object_set_new(v, "interface", json_string(iface_names[mb->iface]));
        return reply_hresult(r, SL_OK, v, NULL);
    default:
        break;
    }
    if ((e = get_info(r->m, o, mb->propid, &v, reason, sizeof reason)) != SL_OK)
        return reply_hresult(r, e, NULL, reason);
    if (mb->conv == CV_PLAIN)
        return reply_member(r, mb, json_is_null(v) ? (json_decref(v), json_integer(0)) : v, NULL);
    if (mb->conv == CV_IS_LOCAL) {
        int local = json_is_string(v) && str_ieq(json_string_value(v), "LOCAL");
        json_decref(v);
        return reply_member(r, mb, json_boolean(local), local ? "VARIANT_TRUE" : "VARIANT_FALSE");
    }
    if (mb->conv == CV_ARRAY) {
        if (!json_is_array(v)) {
            json_decref(v);
            v = json_array();
        }
        return reply_member(r, mb, v, NULL);
    }
    if (mb->conv == CV_RECEIVE_INFO) {
        json_t *ri = receive_info(v);
        json_decref(v);
        return reply_member(r, mb, ri, NULL);
    }
    /* CV_ENUM */
    const enum_val *t = enum_table(mb->propid);
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    for (; t->str; t++) {
        if (str_ieq(s, t->str)) {
            json_decref(v);
            return reply_member(r, mb, json_integer(t->value), t->name);
        }
    }
    snprintf(reason, sizeof reason, "%s: unexpected property value '%s'", mb->name, s);
    json_decref(v);
    return reply_hresult(r, SL_ERR_INTERNAL, NULL, reason);
}

/* ------------------------------------------------------------------------------------------
 * Init (MC-MQAC IMSMQManagement::Init, section 4.2)
 */

/* A path name (<computer>\private$\<queue>, <computer>\<queue>, <computer>\system$;<q>) as a
 * direct format name; -1 when it is not one. */
static int pathname_to_format(const char *path, char *out, size_t len)
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

static json_t *mobj_json(mgmt *m, mobj *o)
{
    json_t *j = json_pack("{s:s,s:s,s:b,s:I}", "id", o->e.id, "user", o->e.owner, "initialized",
                          o->initialized, "opened_at", (json_int_t)o->e.opened_wall_ms);
    if (o->initialized) {
        json_object_set_new(j, "machine", json_string(o->machine ? o->machine : fmt_computer(m)));
        json_object_set_new(j, "format_name", json_string(o->format_name));
        json_object_set_new(j, "vhost", o->vhost ? json_string(o->vhost) : json_null());
        json_object_set_new(j, "interface",
                            json_string(iface_names[o->outgoing ? IF_OUTGOING : IF_QUEUE]));
    }
    return j;
}

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
    char reason[600];
    if (machine && !fmt_is_local_machine(r->m, machine)) {
        snprintf(reason, sizeof reason,
                 "machine '%s' is not this node, and this node has no link to another one yet",
                 machine);
        return reply_hresult(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE, NULL, reason);
    }
    char fmt[1200];
    if (has_p) {
        if (pathname_to_format(json_string_value(jp), fmt, sizeof fmt) < 0) {
            snprintf(reason, sizeof reason,
                     "'%.300s' is not a path name (<computer>\\private$\\<queue>)",
                     json_string_value(jp));
            return reply_hresult(r, SL_ERR_INVALID_PATH, NULL, reason);
        }
    } else {
        snprintf(fmt, sizeof fmt, "%s", json_string_value(jf));
    }
    const char *vhost = json_is_string(jv) ? json_string_value(jv) : NULL;
    /* QMMgmt Get Info (LOCATION): the queue must be there; "REMOTE" means an outgoing queue */
    mobj probe = {.format_name = fmt, .vhost = (char *)vhost};
    json_t *loc;
    sl_err e = get_info(r->m, &probe, 4, &loc, reason, sizeof reason);
    if (e != SL_OK)
        return reply_hresult(r, e, NULL, reason); /* a failed Init changes nothing */
    int outgoing = json_is_string(loc) && str_ieq(json_string_value(loc), "REMOTE");
    json_decref(loc);
    sl_free(o->machine);
    sl_free(o->format_name);
    sl_free(o->vhost);
    o->machine = machine ? sl_xstrdup(machine) : NULL;
    o->format_name = sl_xstrdup(fmt);
    o->vhost = vhost ? sl_xstrdup(vhost) : NULL;
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
        if ((e = ctx_add(r->m, &r->m->mobjs, &o->e, r->user, reason, sizeof reason)) != SL_OK) {
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
    if ((e = ctx_lookup(r->m, &r->m->mobjs, r->segs[2], r->user, &ce, reason, sizeof reason)) !=
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
