/* qmcomm_info.c - the qmcomm calls (MS-MQMP 3.1.4) a client makes around the open /
 * purge / close of seed 000 (qmcomm.c), none of which changes anything:
 *
 *   opnum 12  R_QMObjectPathToObjectFormat  MQPathNameToFormatName of a private queue path
 *   opnum 14  R_QMGetTmWhereabouts          MSDTC's whereabouts: MQ_ERROR_DTC_CONNECT (none)
 *   opnum 15  R_QMEnlistTransaction         enlist in an MSDTC transaction: the same
 *   opnum 26  rpc_ACHandleToFormatName      MQHandleToFormatName of an open mq_handle
 *   opnum 28  R_QMQueryQMRegistryInternal   the server's strings a dependent client asks for
 *
 * Same model, same rights as the HTTP API: the path resolves as R_QMMgmtGetInfo's
 * "QUEUE=DIRECT=OS:<path>" does (mq_fmtname_resolve, then mq_vhost_listed: a management user who
 * may see the queue's vhost) and answers the queue's canonical format name, the FORMATNAME
 * property; a handle's format name is its GET /api/msmq/handles/H's after the same recheck
 * (mq_handle_format_name).
 *
 * What a Sluice node has not, it answers with the HRESULT a Windows server without it gives:
 * no directory service (workgroup mode), so the MQIS server list and the forest GUID are
 * MQ_ERROR_NO_DS; no MSDTC, so the transaction manager's whereabouts and an enlistment are
 * MQ_ERROR_DTC_CONNECT. Invariant: a malformed stub (wrong lengths, a size_is that does not match
 * its count, a union arm that does not match its tag) faults with RPC_X_BAD_STUB_DATA before any
 * model call; a [range] outside its bounds faults with RPC_S_INVALID_BOUND.
 */
#include <stdio.h>
#include <string.h>

#include "node/node.h"
#include "core/le.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/version.h"
#include "mqqb/props.h"
#include "mq/formatname.h"
#include "rpc/msrpc.h"

#define FORMATNAME_MAX_UNITS 524288u /* rpc_ACHandleToFormatName's range */
#define WHEREABOUTS_MAX 131072u      /* R_QMGetTmWhereabouts' and R_QMEnlistTransaction's range */
#define INFINITE_TTRQ "4294967295"   /* INFINITE (0xFFFFFFFF) seconds: no default TTRQ */

/* The UTF-16 units (with the NUL) of s into a fresh buffer; *n their count. ndr.c's string
 * writer does the conversion (after its 12-byte header): it writes U+FFFD for what
 * sl_utf8_to_utf16le would refuse, so the name is answered whatever it holds. */
static uint16_t *utf16_of(const char *s, uint32_t *n)
{
    sl_buf b;
    sl_buf_init(&b);
    ndr_wr w;
    rpc_ndr_wr_init(&w, &b);
    rpc_ndr_put_wstring(&w, s);
    *n = rpc_ndr_wstring_units(s);
    uint16_t *u = sl_xcalloc(*n, sizeof *u);
    const uint8_t *p = sl_buf_head(&b) + 12;
    for (uint32_t i = 0; i < *n; i++)
        u[i] = sl_le16(p + 2 * i);
    sl_buf_free(&b);
    return u;
}

/* rpc_ACHandleToFormatName([in] RPC_QUEUE_HANDLE hQueue, [in, range(0, 524288)] DWORD
 *   dwFormatNameRPCBufferLen, [in, out, unique, size_is(dwFormatNameRPCBufferLen),
 *   length_is(dwFormatNameRPCBufferLen)] WCHAR* lpwcsFormatName, [in, out] DWORD* pdwLength)
 * The name is written NUL-terminated even when cut; *pdwLength is its full length with the
 * NUL; a buffer too small for it is MQ_ERROR_FORMATNAME_BUFFER_TOO_SMALL. */
static uint32_t handle_to_format_name(void *ctx, const rpc_session_info *s, const rpc_call *c,
                                      ndr_rd *in, ndr_wr *out)
{
    (void)c;
    msrpc *r = ctx;
    mq_handle *h = rpc_msrpc_get_context(r, s, in);
    uint32_t len = rpc_ndr_u32(in);
    uint32_t ptr = ndr_ptr(in);
    if (ptr) {
        uint32_t max = rpc_ndr_u32(in), off = rpc_ndr_u32(in), actual = rpc_ndr_u32(in);
        if (max != len || off != 0 || actual != len || actual > (in->len - in->pos) / 2)
            in->err = 1;
        else
            in->pos += 2 * (size_t)actual; /* the caller's buffer: its content does not matter */
        rpc_ndr_rd_align(in, 4);
    }
    uint32_t plen = rpc_ndr_u32(in);
    if (in->err)
        return NCA_S_FAULT_NDR;
    if (len > FORMATNAME_MAX_UNITS)
        return MSRPC_S_INVALID_BOUND;
    if (!h)
        return NCA_S_FAULT_CONTEXT_MISMATCH;
    char err[700] = "";
    mq_caller who;
    const char *fmt = NULL;
    sl_err e = rpc_msrpc_caller(r, s, 0, &who, err, sizeof err);
    if (e == SL_OK && (plen != len || (!ptr) != (len == 0))) {
        /* pdwLength MUST equal the buffer's length; the buffer is NULL exactly when empty */
        snprintf(err, sizeof err, "buffer of %u units, pdwLength %u, lpwcsFormatName %s", len, plen,
                 ptr ? "given" : "NULL");
        e = SL_ERR_INVALID_PARAMETER;
    }
    if (e == SL_OK)
        e = mq_handle_format_name(r->mq, who.user, h, &fmt, err, sizeof err);
    uint32_t n = 0;
    uint16_t *u = NULL;
    if (e == SL_OK) {
        u = utf16_of(fmt, &n);
        if (n > len)
            e = SL_ERR_FORMATNAME_BUFFER_TOO_SMALL;
    }
    if (ptr) {
        rpc_ndr_put_ref(out);
        rpc_ndr_put_u32(out, len);
        rpc_ndr_put_u32(out, 0);
        rpc_ndr_put_u32(out, len);
        for (uint32_t i = 0; i < len; i++) {
            /* the name (cut to len - 1 units when too long), a NUL, zeroes after */
            uint16_t v = u && i < n && i + 1 < len ? u[i] : 0;
            rpc_ndr_put_u16(out, v);
        }
        rpc_ndr_wr_align(out, 4);
    } else {
        rpc_ndr_put_u32(out, 0);
    }
    rpc_ndr_put_u32(out, u ? n : plen);
    if (e != SL_OK && e != SL_ERR_FORMATNAME_BUFFER_TOO_SMALL)
        sl_info("msrpc: rpc_ACHandleToFormatName from %s refused: %s", s->peer, err);
    rpc_ndr_put_u32(out, rpc_msrpc_hresult(e));
    sl_free(u);
    return 0;
}

/* An [in] QUEUE_FORMAT's inline part with the union's empty arm (QUEUE_FORMAT_TYPE_UNKNOWN),
 * the only one R_QMObjectPathToObjectFormat takes; any other type reads as it is (its
 * referents too) so that the stub is still checked, and *qft tells the caller. */
static void read_in_format(msrpc *r, ndr_rd *in, uint8_t *qft)
{
    char ignored[1200];
    size_t at = in->pos;
    rpc_ndr_rd_align(in, 4);
    *qft = rpc_ndr_u8(in);
    in->pos = at; /* rpc_msrpc_read_queue_format reads it again, checking the union's tag */
    rpc_msrpc_read_queue_format(r, in, ignored, sizeof ignored);
}

/* R_QMObjectPathToObjectFormat([in] handle_t, [in, string] const WCHAR* lpwcsPathName,
 *   [in, out] OBJECT_FORMAT* pObjectFormat) where OBJECT_FORMAT is {[range(1,2)] DWORD
 *   ObjType; [switch_is(ObjType)] union {[case(1)] QUEUE_FORMAT* pQueueFormat;}}.
 * On input ObjType MUST be 1 and m_qft QUEUE_FORMAT_TYPE_UNKNOWN; on success the QUEUE_FORMAT
 * is the queue's direct format name (QUEUE_FORMAT_TYPE_DIRECT, "OS:<computer>\private$\<q>"). */
static uint32_t path_to_format(void *ctx, const rpc_session_info *s, const rpc_call *c, ndr_rd *in,
                               ndr_wr *out)
{
    (void)c;
    msrpc *r = ctx;
    char path[1100];
    rpc_ndr_wstring(in, path, sizeof path);
    rpc_ndr_rd_align(in, 4);
    uint32_t type = rpc_ndr_u32(in);
    uint32_t tag = rpc_ndr_u32(in); /* the non-encapsulated union's discriminant */
    uint32_t ptr = 0;
    uint8_t qft = 0;
    if (!in->err && (type < 1 || type > 2))
        return MSRPC_S_INVALID_BOUND;
    if (tag != type || type != 1) /* case(1) is the union's only arm (2 is local-only) */
        in->err = 1;
    if (!in->err) {
        ptr = ndr_ptr(in);
        if (ptr)
            read_in_format(r, in, &qft);
    }
    if (in->err)
        return NCA_S_FAULT_NDR;
    char err[700] = "", fmt[1200];
    mq_caller who;
    qm_queue *q = NULL;
    sl_err e = rpc_msrpc_caller(r, s, 0, &who, err, sizeof err);
    if (e == SL_OK && (!ptr || qft != 0)) {
        snprintf(err, sizeof err, "pObjectFormat %s", ptr ? "not of type UNKNOWN" : "NULL");
        e = SL_ERR_INVALID_PARAMETER;
    }
    if (e == SL_OK && mq_fmtname_from_pathname(path, fmt, sizeof fmt) < 0) {
        snprintf(err, sizeof err, "'%.300s' is not a path name (<computer>\\private$\\<queue>)",
                 path);
        e = SL_ERR_INVALID_PATH;
    }
    if (e == SL_OK && !strchr(path, '$')) {
        /* <computer>\<queue>: a public queue, found in the directory service */
        snprintf(err, sizeof err, "'%.300s' names a public queue: no directory service here", path);
        e = SL_ERR_NO_DS;
    }
    if (e == SL_OK)
        e = mq_fmtname_resolve(r->mq, fmt, NULL, &q, err, sizeof err);
    if (e == SL_OK && !mq_vhost_listed(r->n->acc, &who, q->vhost->name)) {
        snprintf(err, sizeof err, "User not authorised to access virtual host");
        e = SL_ERR_ACCESS_REFUSED;
    }
    if (e == SL_OK)
        mq_fmtname_of(r->mq, q, fmt, sizeof fmt);
    else
        sl_info("msrpc: R_QMObjectPathToObjectFormat '%s' from %s refused: %s", path, s->peer, err);
    /* OBJECT_FORMAT: ObjType, the discriminant, pQueueFormat and its referent */
    rpc_ndr_put_u32(out, 1);
    rpc_ndr_put_u32(out, 1);
    if (!ptr) {
        rpc_ndr_put_u32(out, 0);
    } else {
        rpc_ndr_put_ref(out);
        int ok = e == SL_OK;
        rpc_ndr_put_u8(out, ok ? 3 : 0); /* m_qft: DIRECT, or UNKNOWN as it came */
        rpc_ndr_put_u8(out, 0);          /* m_SuffixAndFlags */
        rpc_ndr_put_u16(out, 0);         /* m_reserved */
        rpc_ndr_put_u8(out, ok ? 3 : 0); /* the union's tag */
        if (ok) {
            rpc_ndr_wr_align(out, 4);
            rpc_ndr_put_ref(out); /* m_pDirectID */
            rpc_ndr_put_wstring(out, fmt + strlen("DIRECT="));
        }
        rpc_ndr_wr_align(out, 4);
    }
    rpc_ndr_put_u32(out, rpc_msrpc_hresult(e));
    return 0;
}

/* R_QMGetTmWhereabouts([in] handle_t, [in, range(0, 131072)] DWORD cbBufSize,
 *   [out, size_is(cbBufSize)] unsigned char* pbWhereabouts, [out] DWORD* pdwWhereaboutsSize)
 * There is no MSDTC transaction manager to point to (Sluice's transactions are its own, over
 * AMQP and HTTP): the buffer comes back zeroed, the size 0, MQ_ERROR_DTC_CONNECT. */
static uint32_t tm_whereabouts(void *ctx, const rpc_session_info *s, const rpc_call *c, ndr_rd *in,
                               ndr_wr *out)
{
    (void)c;
    uint32_t n = rpc_ndr_u32(in);
    if (in->err)
        return NCA_S_FAULT_NDR;
    if (n > WHEREABOUTS_MAX)
        return MSRPC_S_INVALID_BOUND;
    char err[300];
    mq_caller who;
    sl_err e = rpc_msrpc_caller(ctx, s, 0, &who, err, sizeof err);
    if (e == SL_OK)
        e = SL_ERR_DTC_CONNECT;
    rpc_ndr_put_u32(out, n); /* the conformant array's size, then its bytes */
    static const uint8_t zero[4096];
    for (uint32_t left = n; left;) {
        uint32_t k = left < sizeof zero ? left : (uint32_t)sizeof zero;
        rpc_ndr_put_bytes(out, zero, k);
        left -= k;
    }
    rpc_ndr_wr_align(out, 4);
    rpc_ndr_put_u32(out, 0);
    rpc_ndr_put_u32(out, rpc_msrpc_hresult(e));
    return 0;
}

/* R_QMEnlistTransaction([in] handle_t, [in] XACTUOW* pUow, [in, range(0, 131072)] DWORD
 *   cbCookie, [in, size_is(cbCookie)] unsigned char* pbCookie)
 * Enlisting in an MSDTC transaction (the cookie is DTC's export of it): no MSDTC here. */
static uint32_t enlist_transaction(void *ctx, const rpc_session_info *s, const rpc_call *c,
                                   ndr_rd *in, ndr_wr *out)
{
    (void)c;
    uint8_t uow[16];
    rpc_ndr_bytes(in, uow, sizeof uow);
    uint32_t n = rpc_ndr_u32(in);
    if (!in->err && n > WHEREABOUTS_MAX)
        return MSRPC_S_INVALID_BOUND;
    uint32_t max = rpc_ndr_u32(in);
    if (max != n || n > in->len - in->pos)
        in->err = 1;
    if (in->err)
        return NCA_S_FAULT_NDR;
    char err[300];
    mq_caller who;
    sl_err e = rpc_msrpc_caller(ctx, s, 0, &who, err, sizeof err);
    rpc_ndr_put_u32(out, rpc_msrpc_hresult(e == SL_OK ? SL_ERR_DTC_CONNECT : e));
    return 0;
}

/* R_QMQueryQMRegistryInternal([in] handle_t, [in] DWORD dwQueryType,
 *   [out, string] WCHAR** lplpMQISServer)
 *   0 the MQIS servers, 2 the forest's GUID: MQ_ERROR_NO_DS (no directory service)
 *   1 the default time-to-reach-queue: INFINITE (a message without one never expires here)
 *   3 the server's version (SLUICE_VERSION, as in R_QMMgmtGetInfo's PROPID_MGMT_MSMQ_TYPE)
 *   4 the queue manager's Identifier, braceless (the GUID the MSMQ door gives, node_qm_guid)
 *   anything else: MQ_ERROR_INVALID_PARAMETER */
static uint32_t query_registry(void *ctx, const rpc_session_info *s, const rpc_call *c, ndr_rd *in,
                               ndr_wr *out)
{
    (void)c;
    msrpc *r = ctx;
    uint32_t type = rpc_ndr_u32(in);
    if (in->err)
        return NCA_S_FAULT_NDR;
    char err[300] = "", val[64] = "";
    mq_caller who;
    sl_err e = rpc_msrpc_caller(r, s, 0, &who, err, sizeof err);
    if (e == SL_OK) {
        switch (type) {
        case 0:
        case 2:
            snprintf(err, sizeof err, "query %u needs a directory service", type);
            e = SL_ERR_NO_DS;
            break;
        case 1:
            snprintf(val, sizeof val, "%s", INFINITE_TTRQ);
            break;
        case 3:
            snprintf(val, sizeof val, "%s", SLUICE_VERSION);
            break;
        case 4: {
            uint8_t g[16];
            char gs[40];
            node_qm_guid(r->n, g);
            mqqb_guid_str(g, gs); /* as the MSMQ door's log line shows it */
            snprintf(val, sizeof val, "%s", gs);
            break;
        }
        default:
            snprintf(err, sizeof err, "query type %u", type);
            e = SL_ERR_INVALID_PARAMETER;
        }
    }
    if (e == SL_OK) {
        rpc_ndr_put_ref(out);
        rpc_ndr_put_wstring(out, val);
        rpc_ndr_wr_align(out, 4);
    } else {
        sl_debug("msrpc: R_QMQueryQMRegistryInternal from %s: %s", s->peer, err);
        rpc_ndr_put_u32(out, 0); /* *lplpMQISServer = NULL */
    }
    rpc_ndr_put_u32(out, rpc_msrpc_hresult(e));
    return 0;
}

void rpc_msrpc_qmcomm_info_ops(rpc_op_fn *ops)
{
    ops[12] = path_to_format;
    ops[14] = tm_whereabouts;
    ops[15] = enlist_transaction;
    ops[26] = handle_to_format_name;
    ops[28] = query_registry;
}
