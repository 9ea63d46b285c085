/* mgmtobj.h - MC-MQAC's management object (MSMQManagement with IMSMQQueueManagement and
 * IMSMQOutgoingQueueManagement, reference/msmq.md sections 4.1-4.5), protocol-neutral: its
 * members, its binding, the rules every member follows and Get Info at another node over the
 * link (both ends, mgmtobj_remote.c). The HTTP API (mgmt/api_mgmtobj.c) is its door today; it
 * keeps the objects (a context table), the waiting and the JSON.
 *
 * The object follows MC-MQAC: it holds a binding (ComputerName, QueueFormatName,
 * ObjectIsInitialized, QueueIsOutgoing), and every member first checks ObjectIsInitialized
 * (MQ_ERROR_UNINITIALIZED_OBJECT), then checks that the member belongs to an interface the
 * bound queue has (QueryInterface: E_NOINTERFACE: the IMSMQQueueManagement members on an
 * outgoing queue, the IMSMQOutgoingQueueManagement ones on a destination queue), then raises
 * QMMgmt Get Info, i.e. R_QMMgmtGetInfo (mq/info.h) for the bound format name, and
 * propagates its HRESULT. So the object is bound to a format name, not to one incarnation of
 * a queue (unlike a handle): a queue deleted since Init answers MQ_ERROR_QUEUE_NOT_FOUND, and
 * one declared again under the name answers for itself, as MSMQManagement does. Actions on
 * another node's queues are refused (MQ_ERROR_ACCESS_DENIED): a link peer is not an
 * administrator of that node.
 *
 * Redesign note: format names still take the HTTP door's object (see info.h).
 */
#ifndef SL_MQ_MGMTOBJ_H
#define SL_MQ_MGMTOBJ_H

#include <stddef.h>

#include "core/err.h"
#include "mq/caller.h"
#include "mq/mq.h"
#include "link/link.h"
#include "mq/info.h"

struct mq_caller;

typedef enum mq_mobj_iface { MQ_IF_MANAGEMENT, MQ_IF_QUEUE, MQ_IF_OUTGOING } mq_mobj_iface;

/* How a member's value comes from the properties it reads (MC-MQAC section 4.5) */
typedef enum mq_mobj_conv {
    MQ_CV_FORMAT_NAME,  /* the binding's */
    MQ_CV_MACHINE,      /* the binding's, or this node's computer name */
    MQ_CV_PLAIN,        /* the property's number (none: 0) */
    MQ_CV_ENUM,         /* the property's string as an MC-MQAC enumeration (mq_mobj_enum) */
    MQ_CV_IS_LOCAL,     /* LOCATION is "LOCAL" */
    MQ_CV_ARRAY,        /* a vector (none: empty) */
    MQ_CV_RECEIVE_INFO, /* EOD_SOURCE_INFO's parallel vectors, one collection per sequence */
    MQ_CV_SEND_INFO,    /* the eleven EOD_* properties in one collection */
    MQ_CV_ACTION,       /* an R_QMMgmtAction (mq/action.h) */
} mq_mobj_conv;

typedef struct mq_mobj_member {
    const char *path; /* the HTTP API's URL segment */
    const char *name; /* MC-MQAC's */
    mq_mobj_iface iface;
    mq_mobj_conv conv;
    int propid;         /* PROPID_MGMT_QUEUE_* read, or 0 */
    const char *action; /* R_QMMgmtAction's for MQ_CV_ACTION */
} mq_mobj_member;

#define MQ_MOBJ_MAX_PROPS 11 /* EodGetSendInfo's */

/* A member by path or name, without regard to case; NULL: IDispatch's DISP_E_MEMBERNOTFOUND. */
const mq_mobj_member *mq_mobj_member_find(const char *name);
const char *mq_mobj_iface_name(mq_mobj_iface i);
/* The PROPID_MGMT_QUEUE_* a member reads, into ids; how many (0 for FormatName, Machine and
 * the actions). */
int mq_mobj_member_props(const mq_mobj_member *mb, int *ids);
/* EodGetSendInfo's keys, in the order of its properties. */
extern const char *const mq_mobj_send_info_keys[MQ_MOBJ_MAX_PROPS];
/* EodGetReceiveInfo's keys, in the order of EOD_SOURCE_INFO's vectors. */
extern const char *const mq_mobj_receive_info_keys[6];

/* The binding. p_*: an Init on its way to another node, the binding it will take. */
typedef struct mq_mobj {
    int initialized;
    int outgoing;      /* QueueIsOutgoing: bound to an outgoing queue */
    char *machine;     /* ComputerName as given; NULL = this node */
    char *format_name; /* QueueFormatName */
    char *vhost;       /* vhost hint for the format name, or NULL */
    char *rhost;       /* Machine is another node: its address and port */
    int rport;
    char *p_machine, *p_format_name, *p_vhost, *p_rhost;
    int p_rport;
} mq_mobj;

void mq_mobj_free(mq_mobj *o); /* its strings */
void mq_mobj_clear_pending(mq_mobj *o);

/* Init's arguments (MC-MQAC IMSMQManagement::Init, section 4.2): exactly one of pathname and
 * format_name; machine NULL or "" is this node, else "host" or "host:port" of another. On
 * SL_OK, fmt holds the format name and *remote says whether machine is another node (then
 * rhost and *rport its address). */
sl_err mq_mobj_target(mq_state *mq, const char *machine, const char *pathname,
                      const char *format_name, char *fmt, size_t fmtlen, int *remote, char *rhost,
                      size_t rhostlen, int *rport, char *err, size_t errlen);
/* Init at this node: QMMgmt Get Info (LOCATION) as who: the queue must be there, "REMOTE"
 * means an outgoing queue. A failed Init changes nothing. */
sl_err mq_mobj_init_local(mq_state *mq, const mq_caller *who, mq_mobj *o, const char *machine,
                          const char *fmt, const char *vhost, char *err, size_t errlen);
/* Init at another node: the binding waits (p_*) for the owner's LOCATION ... */
void mq_mobj_init_pending(mq_mobj *o, const char *machine, const char *fmt, const char *vhost,
                          const char *rhost, int rport);
/* ... which binds it (location: the owner's LOCATION string, NULL when not a string). */
void mq_mobj_init_commit(mq_mobj *o, const char *location);

/* A member's checks, before any value is read: initialized (id names the object in the
 * reason), the interface, and no action through a link. */
sl_err mq_mobj_check(mq_state *mq, const mq_mobj *o, const char *id, const mq_mobj_member *mb,
                     char *err, size_t errlen);
/* QMMgmt Get Info of one property of the bound queue, at this node, as who (the properties of
 * a queue are for users of its vhost, as R_QMMgmtGetInfo's). */
sl_err mq_mobj_get_info(mq_state *mq, const mq_caller *who, const mq_mobj *o, int propid,
                        mq_value *out, char *err, size_t errlen);
/* The owner's end of a Get Info for another node's management object: the queue fmt names,
 * if the link's user (user) may read it: the properties of the vhosts it has a permission
 * entry on. */
sl_err mq_mobj_peer_queue(mq_state *mq, const char *user, const char *fmt, const char *vhost,
                          qm_queue **q, char *err, size_t errlen);
/* Get Info at another node (mgmtobj_remote.c): the owner's answer, or why there is none.
 * e SL_OK: values[n] (in the order asked) and vhost, the vhost the owner resolved (the asking
 * node checks its own user on it). Else reason says why; owner_refused: the owner answered
 * with a failure, hresult and hresult_name as it sent them (NULL when it sent none; e is then
 * not meaningful), otherwise e is SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE (no answer, or one
 * without the values). */
typedef struct mq_mobj_answer {
    sl_err e;
    int owner_refused;
    char *hresult, *hresult_name;
    char *reason;
    char *vhost;
    size_t n;
    mq_value *values;
} mq_mobj_answer;
/* a is the callback's (mq_mobj_answer_free); it runs on the loop thread. */
typedef void (*mq_mobj_answer_fn)(void *ctx, mq_mobj_answer *a);
void mq_mobj_answer_free(mq_mobj_answer *a);
/* Ask host:port for the properties ids[n] of the queue fmt (vhost hint or NULL), within
 * handle_remote_timeout; cb gets the answer later. SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE with err
 * when it cannot be asked (then cb never runs). */
sl_err mq_mobj_ask(mq_state *mq, const char *host, int port, const char *fmt, const char *vhost,
                   const int *ids, int n, mq_mobj_answer_fn cb, void *ctx, char *err,
                   size_t errlen);
/* The owner's end: answer other nodes' Get Info (the link's "queue.getinfo", after
 * mq_mobj_peer_queue's checks) from mq_new to mq_free. */
void mq_mobj_serve_init(mq_state *mq);
void mq_mobj_serve_stop(mq_state *mq);

/* The computer name Machine answers. */
const char *mq_mobj_machine(mq_state *mq, const mq_mobj *o);

/* MQ_CV_ENUM: the property's string as its MC-MQAC value and name; SL_ERR_INTERNAL with err
 * for a string the table has not. */
sl_err mq_mobj_enum(const mq_mobj_member *mb, const char *s, int *value, const char **name,
                    char *err, size_t errlen);
/* MQ_CV_IS_LOCAL / QueueIsOutgoing from LOCATION (NULL: not a string). */
int mq_mobj_is_local(const char *location);
int mq_mobj_is_outgoing(const char *location);

/* The MC-MQAC view of an outgoing queue's state and foreign status (value and name). */
int mq_mobj_state_value(eod_state s, const char **name);
int mq_mobj_foreign_value(eod_foreign f, const char **name);

#endif
