/* msrpc.h - the MSMQ management interfaces over DCE/RPC (issue 34): what the files
 * src/mgmt/msrpc*.c share. The RPC machinery is src/rpc/ (server.h); these files turn its
 * calls into the same model operations the HTTP API uses (api_msmq.c, api_handles.c).
 *
 *   msrpc.c          start/stop with the management API, the caller's rights, MGMT_OBJECT /
 *                    QUEUE_FORMAT decoding into the format names the HTTP API takes
 *   msrpc_qmmgmt.c   qmmgmt (MS-MQMR): R_QMMgmtGetInfo, R_QMMgmtAction
 *   msrpc_propvar.c  property values as PROPVARIANTs
 */
#ifndef SL_MGMT_MSRPC_H
#define SL_MGMT_MSRPC_H
#include <jansson.h>

#include "../rpc/server.h"
#include "mgmt_internal.h"

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

/* "VT_LPWSTR|VT_VECTOR" -> its VARTYPE */
uint16_t msrpc_vt_code(const char *s);
void msrpc_pv_inline(ndr_wr *w, uint16_t vt, json_t *v);
void msrpc_pv_deferred(ndr_wr *w, uint16_t vt, json_t *v, int prop);

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

/* Start the doors configured (listeners.msrpc, listeners.msrpc_epmap); -1 with err. */
int msrpc_start(mgmt *m, char *err, size_t errlen);
void msrpc_stop(mgmt *m);

#endif
