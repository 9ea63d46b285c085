/* msrpc.h - the MSMQ interfaces over DCE/RPC (issue 34): what the files rpc/msrpc.c,
 * qmmgmt.c, qmcomm.c, qmcomm_info.c and propvar.c share. The RPC machinery is server.h; these
 * files turn its calls into the MSMQ operations of mq/ (handles, format names), the same the
 * HTTP API calls, and their answers into NDR.
 *
 *   msrpc.c        the door's object and its life, the caller's rights, MGMT_OBJECT /
 *                  QUEUE_FORMAT decoding into format names
 *   qmmgmt.c       qmmgmt (MS-MQMR): R_QMMgmtGetInfo, R_QMMgmtAction
 *   qmcomm.c       qmcomm (MS-MQMP): R_QMGetRTQMServerPort, rpc_QMOpenQueueInternal,
 *                  rpc_ACCloseHandle, rpc_ACPurgeQueue
 *   qmcomm_info.c  qmcomm's calls around them: R_QMObjectPathToObjectFormat,
 *                  rpc_ACHandleToFormatName, R_QMQueryQMRegistryInternal,
 *                  R_QMGetTmWhereabouts, R_QMEnlistTransaction
 *   propvar.c      property values as PROPVARIANTs
 */
#ifndef SL_RPC_MSRPC_H
#define SL_RPC_MSRPC_H
#include <jansson.h>

#include "mq/caller.h"
#include "mq/handle.h"
#include "mq/mq.h"
#include "rpc/server.h"

typedef struct msrpc_pending msrpc_pending;

/* The DCE/RPC door: its server, the calls it answers later, the MSMQ state it shares with
 * the other doors. Every call runs on the node's loop thread. */
typedef struct msrpc {
    sl_node *n;
    mq_state *mq;
    rpc_server *srv;
    msrpc_pending *pending; /* calls waiting for another node or TIDY */
} msrpc;

enum {
    MSRPC_VT_EMPTY = 0,
    MSRPC_VT_NULL = 1,
    MSRPC_VT_I4 = 3,
    MSRPC_VT_VARIANT = 12,
    MSRPC_VT_UI4 = 19,
    MSRPC_VT_I8 = 20,
    MSRPC_VT_UI8 = 21,
    MSRPC_VT_LPWSTR = 31,
    MSRPC_VT_BLOB = 65,
    MSRPC_VT_CLSID = 72,
    MSRPC_VT_VECTOR = 0x1000,
};
enum { MSRPC_PROP_EOD_SOURCE_INFO = 24, MSRPC_PROP_CONNECTION_HISTORY = 25 };

/* RPC_S_INVALID_BOUND: a [range] or size_is the stub refuses */
#define MSRPC_S_INVALID_BOUND 0x000006C6u

/* The caller's rights, as the HTTP API's MSMQ endpoints decide them: a user tagged for
 * management; need_admin for actions. SL_ERR_ACCESS_REFUSED with a reason otherwise. */
sl_err rpc_msrpc_caller(msrpc *r, const rpc_session_info *s, int need_admin, mq_caller *out,
                        char *err, size_t errlen);
/* An [in] MGMT_OBJECT (MS-MQMR 2.2.1.2) with its QUEUE_FORMAT, as "MACHINE", "SESSION" or
 * "QUEUE=<format name>". Malformed NDR sets in->err. */
void rpc_msrpc_read_mgmt_object(msrpc *r, ndr_rd *in, char *out, size_t outlen);
/* A QUEUE_FORMAT's inline part and referents as a format name ("" for none). r may be NULL
 * (unit tests, fuzzing): the machine's system queues are then named on ".". */
void rpc_msrpc_read_queue_format(msrpc *r, ndr_rd *in, char *out, size_t outlen);
uint32_t rpc_msrpc_hresult(sl_err e);

void rpc_msrpc_qmmgmt_register(msrpc *r, rpc_server *s);
void rpc_msrpc_qmcomm_register(msrpc *r, rpc_server *s);
/* msrpc_qmcomm_info.c's opnums (12, 14, 15, 26, 28) into qmcomm's table */
void rpc_msrpc_qmcomm_info_ops(rpc_op_fn *ops);
/* An [in] RPC_QUEUE_HANDLE: the handle it names if it is this session's, else NULL (and
 * in->err when the stub is short). */
mq_handle *rpc_msrpc_get_context(msrpc *r, const rpc_session_info *s, ndr_rd *in);

/* A call answered later (another node's answer, TIDY). It is on r->pending until its answer
 * comes; when the door stops first, r is set to NULL and the answer only frees it. */
struct msrpc_pending {
    struct msrpc_pending *next, *prev;
    msrpc *r;
    uint64_t session;
    rpc_call call;           /* call_id and ctx_id only */
    char id[CTX_ID_LEN + 1]; /* the handle it concerns, if any */
};
msrpc_pending *rpc_msrpc_pending_new(msrpc *r, const rpc_session_info *s, const rpc_call *c);
/* Put p back on the list (a call waiting for a second answer). */
void rpc_msrpc_pending_put(msrpc *r, msrpc_pending *p);
/* Take p off the list; returns its door (NULL: stopped meanwhile, p is to be freed only). */
msrpc *rpc_msrpc_pending_take(msrpc_pending *p);
/* Answer the call with stub (when its session is still there) and free p. */
void rpc_msrpc_pending_reply(msrpc *r, msrpc_pending *p, const uint8_t *stub, size_t len);
/* 1 while the session that made a pending call is still connected. */
int rpc_msrpc_session_alive(const msrpc *r, uint64_t session);

/* Start the doors configured (listeners.msrpc, listeners.msrpc_epmap) over mq's state:
 * *out is the door, or NULL when none is configured; -1 with err. */
int rpc_msrpc_start(msrpc **out, mq_state *mq, char *err, size_t errlen);
/* Stop *r (NULL: none) and set it NULL; the answers still to come only free their call. */
void rpc_msrpc_stop(msrpc **r);

#endif
