/* mgmtobj.c - MC-MQAC's management object, protocol-neutral (mgmtobj.h): the members and the
 * interfaces they belong to, the binding Init makes, the checks every member makes, and the
 * MC-MQAC enumerations R_QMMgmtGetInfo's strings become (section 4.5).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/mem.h"
#include "mq/mgmtobj.h"
#include "mq/caller.h"
#include "mq/formatname.h"
#include "mq/mq.h"
#include "node/node.h"

static const char *const iface_names[] = {"IMSMQManagement", "IMSMQQueueManagement",
                                          "IMSMQOutgoingQueueManagement"};

static const mq_mobj_member members[] = {
    {"format-name", "FormatName", MQ_IF_MANAGEMENT, MQ_CV_FORMAT_NAME, 0, NULL},
    {"machine", "Machine", MQ_IF_MANAGEMENT, MQ_CV_MACHINE, 0, NULL},
    {"message-count", "MessageCount", MQ_IF_MANAGEMENT, MQ_CV_PLAIN, 7, NULL},
    {"foreign-status", "ForeignStatus", MQ_IF_MANAGEMENT, MQ_CV_ENUM, 6, NULL},
    {"queue-type", "QueueType", MQ_IF_MANAGEMENT, MQ_CV_ENUM, 3, NULL},
    {"is-local", "IsLocal", MQ_IF_MANAGEMENT, MQ_CV_IS_LOCAL, 4, NULL},
    {"transactional-status", "TransactionalStatus", MQ_IF_MANAGEMENT, MQ_CV_ENUM, 5, NULL},
    {"bytes-in-queue", "BytesInQueue", MQ_IF_MANAGEMENT, MQ_CV_PLAIN, 8, NULL},
    {"journal-message-count", "JournalMessageCount", MQ_IF_QUEUE, MQ_CV_PLAIN, 9, NULL},
    {"bytes-in-journal", "BytesInJournal", MQ_IF_QUEUE, MQ_CV_PLAIN, 10, NULL},
    {"eod-get-receive-info", "EodGetReceiveInfo", MQ_IF_QUEUE, MQ_CV_RECEIVE_INFO, 24, NULL},
    {"state", "State", MQ_IF_OUTGOING, MQ_CV_ENUM, 11, NULL},
    {"next-hops", "NextHops", MQ_IF_OUTGOING, MQ_CV_ARRAY, 12, NULL},
    {"eod-get-send-info", "EodGetSendInfo", MQ_IF_OUTGOING, MQ_CV_SEND_INFO, 0, NULL},
    {"resume", "Resume", MQ_IF_OUTGOING, MQ_CV_ACTION, 0, "RESUME"},
    {"pause", "Pause", MQ_IF_OUTGOING, MQ_CV_ACTION, 0, "PAUSE"},
    {"eod-resend", "EodResend", MQ_IF_OUTGOING, MQ_CV_ACTION, 0, "EOD_RESEND"},
};

const char *const mq_mobj_send_info_keys[MQ_MOBJ_MAX_PROPS] = {
    "EodLastAck",    "EodLastAckTime",    "EodLastAckCount", "EodFirstNonAck",
    "EodLastNonAck", "EodNextSeq",        "EodNoReadCount",  "EodNoAckCount",
    "EodResendTime", "EodResendInterval", "EodResendCount",
};

const char *const mq_mobj_receive_info_keys[6] = {"QueueFormatName", "SenderID",   "SeqID", "SeqNo",
                                                  "LastAccessTime",  "RejectCount"};

const mq_mobj_member *mq_mobj_member_find(const char *name)
{
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++)
        if (!strcasecmp(name, members[i].path) || !strcasecmp(name, members[i].name))
            return &members[i];
    return NULL;
}

const char *mq_mobj_iface_name(mq_mobj_iface i)
{
    return iface_names[i];
}

int mq_mobj_member_props(const mq_mobj_member *mb, int *ids)
{
    if (mb->conv == MQ_CV_SEND_INFO) {
        for (int i = 0; i < MQ_MOBJ_MAX_PROPS; i++)
            ids[i] = 13 + i; /* EOD_LAST_ACK .. EOD_RESEND_COUNT */
        return MQ_MOBJ_MAX_PROPS;
    }
    if (mb->conv == MQ_CV_FORMAT_NAME || mb->conv == MQ_CV_MACHINE || mb->conv == MQ_CV_ACTION)
        return 0;
    ids[0] = mb->propid;
    return 1;
}

/* ------------------------------------------------------------------------------------------
 * The enumerations: R_QMMgmtGetInfo's strings and the MC-MQAC values they become (4.5)
 */

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
/* indexed by value */
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

sl_err mq_mobj_enum(const mq_mobj_member *mb, const char *s, int *value, const char **name,
                    char *err, size_t errlen)
{
    for (const enum_val *t = enum_table(mb->propid); t->str; t++) {
        if (!strcasecmp(s, t->str)) {
            *value = t->value;
            *name = t->name;
            return SL_OK;
        }
    }
    snprintf(err, errlen, "%s: unexpected property value '%s'", mb->name, s);
    return SL_ERR_INTERNAL;
}

int mq_mobj_is_local(const char *location)
{
    return location && !strcasecmp(location, "LOCAL");
}

int mq_mobj_is_outgoing(const char *location)
{
    return location && !strcasecmp(location, "REMOTE");
}

int mq_mobj_state_value(eod_state s, const char **name)
{
    int v = 5; /* INACTIVE */
    switch (s) {
    case LINK_DISCONNECTED:
        v = 1;
        break;
    case LINK_WAITING:
        v = 2;
        break;
    case LINK_ONHOLD:
        v = 4;
        break;
    case LINK_INACTIVE:
        v = 5;
        break;
    case LINK_CONNECTED:
        v = 6;
        break;
    case LINK_DISCONNECTING:
        v = 7;
        break;
    }
    *name = state_vals[v].name;
    return v;
}

int mq_mobj_foreign_value(eod_foreign f, const char **name)
{
    int v = f == LINK_FOREIGN_YES ? 0 : f == LINK_FOREIGN_NO ? 1 : 2;
    *name = foreign_vals[v].name;
    return v;
}

/* ------------------------------------------------------------------------------------------
 * The binding
 */

void mq_mobj_clear_pending(mq_mobj *o)
{
    sl_free(o->p_machine);
    sl_free(o->p_format_name);
    sl_free(o->p_vhost);
    sl_free(o->p_rhost);
    o->p_machine = o->p_format_name = o->p_vhost = o->p_rhost = NULL;
}

void mq_mobj_free(mq_mobj *o)
{
    mq_mobj_clear_pending(o);
    sl_free(o->rhost);
    sl_free(o->machine);
    sl_free(o->format_name);
    sl_free(o->vhost);
    o->rhost = o->machine = o->format_name = o->vhost = NULL;
}

static char *dup_or_null(const char *s)
{
    return s ? sl_xstrdup(s) : NULL;
}

sl_err mq_mobj_target(mq_state *mq, const char *machine, const char *pathname,
                      const char *format_name, char *fmt, size_t fmtlen, int *remote, char *rhost,
                      size_t rhostlen, int *rport, char *err, size_t errlen)
{
    if (!pathname == !format_name) {
        snprintf(err, errlen, "Init takes exactly one of \"pathname\" and \"format_name\"");
        return SL_ERR_INVALID_PARAMETER;
    }
    *rport = 0;
    *remote = machine && *machine && !mq_fmt_is_local_machine(mq, machine);
    if (*remote && mq_fmt_machine_split(machine, rhost, rhostlen, rport) < 0) {
        snprintf(err, errlen,
                 "machine '%.200s' is not this node nor an address ('host' or 'host:port')",
                 machine);
        return SL_ERR_INVALID_PARAMETER;
    }
    if (pathname) {
        if (mq_fmtname_from_pathname(pathname, fmt, fmtlen) < 0) {
            snprintf(err, errlen, "'%.300s' is not a path name (<computer>\\private$\\<queue>)",
                     pathname);
            return SL_ERR_INVALID_PATH;
        }
    } else {
        snprintf(fmt, fmtlen, "%s", format_name);
    }
    return SL_OK;
}

static sl_err get_info(mq_state *mq, const mq_caller *who, const char *fmt, const char *vhost,
                       int propid, mq_value *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    qm_queue *q;
    sl_err e = mq_fmtname_resolve(mq, fmt, vhost, &q, err, errlen);
    if (e != SL_OK)
        return e;
    if (!mq_vhost_listed(mq->n->acc, who, q->vhost->name)) {
        snprintf(err, errlen, "User not authorised to access virtual host");
        return SL_ERR_ACCESS_REFUSED;
    }
    uint16_t vt;
    return mq_info_queue_value(mq, fmt, vhost, propid, &vt, out, err, errlen);
}

sl_err mq_mobj_get_info(mq_state *mq, const mq_caller *who, const mq_mobj *o, int propid,
                        mq_value *out, char *err, size_t errlen)
{
    return get_info(mq, who, o->format_name, o->vhost, propid, out, err, errlen);
}

sl_err mq_mobj_init_local(mq_state *mq, const mq_caller *who, mq_mobj *o, const char *machine,
                          const char *fmt, const char *vhost, char *err, size_t errlen)
{
    mq_value loc;
    sl_err e = get_info(mq, who, fmt, vhost, 4 /* LOCATION */, &loc, err, errlen);
    if (e != SL_OK)
        return e; /* a failed Init changes nothing */
    int outgoing = mq_mobj_is_outgoing(loc.kind == MQ_V_STR ? loc.s : NULL);
    mq_value_free(&loc);
    /* the arguments may be the binding's own strings: copy before freeing */
    char *nm = machine && *machine ? sl_xstrdup(machine) : NULL, *nf = sl_xstrdup(fmt),
         *nv = dup_or_null(vhost);
    sl_free(o->machine);
    sl_free(o->format_name);
    sl_free(o->vhost);
    sl_free(o->rhost);
    o->machine = nm;
    o->format_name = nf;
    o->vhost = nv;
    o->rhost = NULL;
    o->outgoing = outgoing;
    o->initialized = 1;
    return SL_OK;
}

void mq_mobj_init_pending(mq_mobj *o, const char *machine, const char *fmt, const char *vhost,
                          const char *rhost, int rport)
{
    mq_mobj_clear_pending(o);
    o->p_machine = sl_xstrdup(machine);
    o->p_format_name = sl_xstrdup(fmt);
    o->p_vhost = dup_or_null(vhost);
    o->p_rhost = sl_xstrdup(rhost);
    o->p_rport = rport;
}

void mq_mobj_init_commit(mq_mobj *o, const char *location)
{
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
    o->outgoing = mq_mobj_is_outgoing(location);
    o->initialized = 1;
}

/* ------------------------------------------------------------------------------------------
 * Members
 */

sl_err mq_mobj_check(mq_state *mq, const mq_mobj *o, const char *id, const mq_mobj_member *mb,
                     char *err, size_t errlen)
{
    (void)mq;
    if (!o->initialized) {
        /* the HTTP API's words: its Init is POST .../M/init */
        snprintf(err, errlen, "management object %s is not initialized: POST .../%s/init first", id,
                 id);
        return SL_ERR_UNINITIALIZED_OBJECT;
    }
    if ((mb->iface == MQ_IF_QUEUE && o->outgoing) ||
        (mb->iface == MQ_IF_OUTGOING && !o->outgoing)) {
        snprintf(err, errlen,
                 "%s is a member of %s; a management object bound to %s has no such interface",
                 mb->name, iface_names[mb->iface],
                 o->outgoing ? "an outgoing queue" : "a destination queue");
        return SL_ERR_NOINTERFACE;
    }
    if (mb->conv == MQ_CV_ACTION && o->rhost) {
        snprintf(err, errlen,
                 "%s acts on a queue of node %s:%d; management actions are taken on the node "
                 "itself, not through a link",
                 mb->name, o->rhost, o->rport);
        return SL_ERR_ACCESS_REFUSED;
    }
    return SL_OK;
}

sl_err mq_mobj_peer_queue(mq_state *mq, const char *user, const char *fmt, const char *vhost,
                          qm_queue **q, char *err, size_t errlen)
{
    sl_err e = mq_fmtname_resolve(mq, fmt, vhost, q, err, errlen);
    if (e != SL_OK)
        return e;
    if (!acc_vhost_visible(mq->n->acc, user, (*q)->vhost->name)) {
        snprintf(err, errlen, "user '%s' is not authorised to access virtual host '%s'", user,
                 (*q)->vhost->name);
        return SL_ERR_ACCESS_REFUSED;
    }
    return SL_OK;
}

const char *mq_mobj_machine(mq_state *mq, const mq_mobj *o)
{
    return o->machine ? o->machine : mq_fmt_computer(mq);
}
