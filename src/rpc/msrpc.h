/* msrpc.h - the MSMQ management interfaces over DCE/RPC (issue 34): what the files
 * src/mgmt/msrpc*.c share. The RPC machinery is src/rpc/ (server.h); these files turn its
 * calls into the same model operations the HTTP API uses (api_msmq.c, api_handles.c).
 *
 *   msrpc.c          start/stop with the management API, the caller's rights, MGMT_OBJECT /
 *                    QUEUE_FORMAT decoding into the format names the HTTP API takes
 *   msrpc_qmmgmt.c   qmmgmt (MS-MQMR): R_QMMgmtGetInfo, R_QMMgmtAction
 *   msrpc_qmcomm.c   qmcomm (MS-MQMP): R_QMGetRTQMServerPort, rpc_QMOpenQueueInternal,
 *                    rpc_ACCloseHandle, rpc_ACPurgeQueue
 *   msrpc_qmcomm_info.c  qmcomm's calls around them: R_QMObjectPathToObjectFormat,
 *                    rpc_ACHandleToFormatName, R_QMQueryQMRegistryInternal,
 *                    R_QMGetTmWhereabouts, R_QMEnlistTransaction
 *   msrpc_propvar.c  property values as PROPVARIANTs
 */
#ifndef SL_MGMT_MSRPC_H
#define SL_MGMT_MSRPC_H
#include <jansson.h>

#include "rpc/server.h"
#include "mgmt/mgmt_internal.h"

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
sl_err msrpc_caller(mgmt *m, const rpc_session_info *s, int need_admin, msmq_caller *out, char *err,
                    size_t errlen);
/* An [in] MGMT_OBJECT (MS-MQMR 2.2.1.2) with its QUEUE_FORMAT, as "MACHINE", "SESSION" or
 * "QUEUE=<format name>". Malformed NDR sets in->err. */
void msrpc_read_mgmt_object(mgmt *m, ndr_rd *in, char *out, size_t outlen);
/* A QUEUE_FORMAT's inline part and referents as a format name ("" for none). */
void msrpc_read_queue_format(mgmt *m, ndr_rd *in, char *out, size_t outlen);
uint32_t msrpc_hresult(sl_err e);

void msrpc_qmmgmt_register(mgmt *m, rpc_server *s);
void msrpc_qmcomm_register(mgmt *m, rpc_server *s);
/* msrpc_qmcomm_info.c's opnums (12, 14, 15, 26, 28) into qmcomm's table */
void msrpc_qmcomm_info_ops(rpc_op_fn *ops);
/* An [in] RPC_QUEUE_HANDLE: the handle it names if it is this session's, else NULL (and
 * in->err when the stub is short). */
handle *msrpc_get_context(mgmt *m, const rpc_session_info *s, ndr_rd *in);

/* A call answered later (another node's answer, TIDY). It is on m->rpc_pending until its
 * answer comes; when the management API stops first, m is set to NULL and the answer only
 * frees it. */
typedef struct msrpc_pending {
    struct msrpc_pending *next, *prev;
    mgmt *m;
    uint64_t session;
    rpc_call call;           /* call_id and ctx_id only */
    char id[CTX_ID_LEN + 1]; /* the handle it concerns, if any */
} msrpc_pending;
msrpc_pending *msrpc_pending_new(mgmt *m, const rpc_session_info *s, const rpc_call *c);
/* Put p back on the list (a call waiting for a second answer). */
void msrpc_pending_put(mgmt *m, msrpc_pending *p);
/* Take p off the list; returns its mgmt (NULL: stopped meanwhile, p is to be freed only). */
mgmt *msrpc_pending_take(msrpc_pending *p);
/* Answer the call with stub (when its session is still there) and free p. */
void msrpc_pending_reply(mgmt *m, msrpc_pending *p, const uint8_t *stub, size_t len);

/* Start the doors configured (listeners.msrpc, listeners.msrpc_epmap); -1 with err. */
int msrpc_start(mgmt *m, char *err, size_t errlen);
void msrpc_stop(mgmt *m);

#endif
