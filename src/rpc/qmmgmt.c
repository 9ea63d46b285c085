/* qmmgmt.c - the qmmgmt interface (MS-MQMR, 41208ee0-e970-11d1-9b9e-00e02c064c39 v1.0)
 * over DCE/RPC: R_QMMgmtGetInfo (opnum 0) and R_QMMgmtAction (opnum 1).
 *
 * Both call what the HTTP API's /api/msmq/info and /api/msmq/action call (mq/info.h:
 * mq_info_object, mq_info_value; mq/action.h: mq_action), with the same rights
 * (rpc_msrpc_caller), so the two doors cannot disagree; the values go out as PROPVARIANTs
 * (propvar.c). A refused call returns its HRESULT and changes nothing;
 * GetInfo then returns apVar as it came (VT_NULLs). Malformed stubs fault with
 * RPC_X_BAD_STUB_DATA, cp outside 1..128 with RPC_S_INVALID_BOUND (the IDL's [range]).
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "mq/action.h"
#include "mq/info.h"
#include "persist/persist.h"
#include "mq/action.h"
#include "mq/info.h"
#include "rpc/msrpc.h"
#include "rpc/propvar.h"

#define MAX_PROPS 128

/* R_QMMgmtGetInfo(hBind, [in] const MGMT_OBJECT*, [in, range(1,128)] DWORD cp,
 *                 [in, size_is(cp)] ULONG aProp[], [in, out, size_is(cp)] PROPVARIANT apVar[]) */
static uint32_t get_info(void *ctx, const rpc_session_info *s, const rpc_call *c, ndr_rd *in,
                         ndr_wr *out)
{
    msrpc *r = ctx;
    char object[1300];
    rpc_msrpc_read_mgmt_object(r, in, object, sizeof object);
    rpc_ndr_rd_align(in, 4);
    uint32_t cp = rpc_ndr_u32(in);
    if (in->err)
        return NCA_S_FAULT_NDR;
    if (cp < 1 || cp > MAX_PROPS)
        return MSRPC_S_INVALID_BOUND;
    uint32_t ids[MAX_PROPS];
    if (rpc_ndr_u32(in) != cp)
        return MSRPC_S_INVALID_BOUND;
    for (uint32_t i = 0; i < cp; i++)
        ids[i] = rpc_ndr_u32(in);
    if (rpc_ndr_u32(in) != cp)
        return MSRPC_S_INVALID_BOUND;
    /* [in] apVar: MQMgmtGetInfo sends VT_NULLs; scalar types are read and ignored, pointer
     * types (which no client sends here) are refused as bad stub data */
    for (uint32_t i = 0; i < cp && !in->err; i++) {
        rpc_ndr_rd_align(in, 8);
        uint16_t vt = rpc_ndr_u16(in);
        (void)rpc_ndr_u16(in);
        (void)rpc_ndr_u32(in);
        if (rpc_ndr_u16(in) != vt)
            in->err = 1;
        switch (vt) {
        case MSRPC_VT_EMPTY:
        case MSRPC_VT_NULL:
            break;
        case 2:  /* VT_I2 */
        case 11: /* VT_BOOL */
        case 18: /* VT_UI2 */
            (void)rpc_ndr_u16(in);
            break;
        case 16: /* VT_I1 */
        case 17: /* VT_UI1 */
            (void)rpc_ndr_u8(in);
            break;
        case MSRPC_VT_I4:
        case MSRPC_VT_UI4:
            (void)rpc_ndr_u32(in);
            break;
        case MSRPC_VT_I8:
        case MSRPC_VT_UI8:
            (void)rpc_ndr_u64(in);
            break;
        default:
            in->err = 1;
        }
    }
    if (in->err)
        return NCA_S_FAULT_NDR;

    char err[400];
    mq_caller who;
    qm_queue *q = NULL;
    int machine = 0;
    sl_err e = rpc_msrpc_caller(r, s, 0, &who, err, sizeof err);
    if (e == SL_OK)
        e = mq_info_object(r->mq, &who, object, NULL, &machine, &q, err, sizeof err);
    for (uint32_t i = 0; i < cp && e == SL_OK; i++)
        if (!mq_info_prop(machine, (int)ids[i])) {
            snprintf(err, sizeof err, "property %u is not a %s property", ids[i],
                     machine ? "machine" : "queue");
            e = SL_ERR_ILLEGAL_PROPID;
        }
    /* a refused call returns apVar as it came: VT_NULLs */
    mq_value vals[MAX_PROPS];
    uint16_t vts[MAX_PROPS];
    for (uint32_t i = 0; i < cp; i++) {
        vts[i] = MQ_VT_NULL;
        memset(&vals[i], 0, sizeof vals[i]);
        if (e == SL_OK)
            mq_info_value(r->mq, &who, machine, q, (int)ids[i], &vts[i], &vals[i]);
    }
    if (e != SL_OK)
        sl_debug("msrpc: R_QMMgmtGetInfo %s from %s: %s", object, s->peer, err);
    rpc_ndr_put_u32(out, cp);
    for (uint32_t i = 0; i < cp; i++)
        rpc_msrpc_pv_inline(out, vts[i], &vals[i]);
    for (uint32_t i = 0; i < cp; i++)
        rpc_msrpc_pv_deferred(out, vts[i], &vals[i], (int)ids[i]);
    for (uint32_t i = 0; i < cp; i++)
        mq_value_free(&vals[i]);
    rpc_ndr_wr_align(out, 4);
    rpc_ndr_put_u32(out, rpc_msrpc_hresult(e));
    return 0;
}

/* TIDY's answer comes later: the call is answered when compaction is done, if its caller is
 * still connected. */
static void tidy_done(void *ctx, const persist_tidy_result *res)
{
    msrpc_pending *p = ctx;
    msrpc *r = rpc_msrpc_pending_take(p);
    sl_info("management: TIDY freed %llu segment(s), %llu byte(s) (over DCE/RPC)",
            (unsigned long long)res->segments_freed, (unsigned long long)res->bytes_freed);
    uint8_t hr[4] = {0, 0, 0, 0};
    rpc_msrpc_pending_reply(r, p, hr, sizeof hr);
}

/* R_QMMgmtAction(hBind, [in] const MGMT_OBJECT*, [in, string] const wchar_t* lpwszAction) */
static uint32_t action(void *ctx, const rpc_session_info *s, const rpc_call *c, ndr_rd *in,
                       ndr_wr *out)
{
    msrpc *r = ctx;
    char object[1300], act[256];
    rpc_msrpc_read_mgmt_object(r, in, object, sizeof object);
    rpc_ndr_rd_align(in, 4);
    rpc_ndr_wstring(in, act, sizeof act);
    if (in->err)
        return NCA_S_FAULT_NDR;
    char err[400];
    mq_caller who;
    mq_action_result res = {0};
    sl_err e = rpc_msrpc_caller(r, s, 1, &who, err, sizeof err);
    if (e == SL_OK)
        e = mq_action(r->mq, object, NULL, act, &res, err, sizeof err);
    if (e == SL_OK && res.tidy) {
        node_tidy_start(r->n, tidy_done, rpc_msrpc_pending_new(r, s, c));
        return RPC_DEFERRED;
    }
    if (e != SL_OK)
        sl_info("msrpc: R_QMMgmtAction %s %s from %s refused: %s", object, act, s->peer, err);
    rpc_ndr_put_u32(out, rpc_msrpc_hresult(e));
    return 0;
}

void rpc_msrpc_qmmgmt_register(msrpc *r, rpc_server *s)
{
    static const rpc_op_fn ops[2] = {get_info, action};
    rpc_syntax id = {.major = 1, .minor = 0};
    rpc_uuid_parse("41208ee0-e970-11d1-9b9e-00e02c064c39", id.uuid);
    rpc_server_add(s, &id, "qmmgmt", ops, 2, r);
}
