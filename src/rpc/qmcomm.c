/* qmcomm.c - the qmcomm interface (MS-MQMP, fdb3a030-065f-11d1-bb9b-00a024ea5525 v1.0)
 * over DCE/RPC, the part seed 000 needs and what it stands on:
 *
 *   opnum 19  rpc_QMOpenQueueInternal   a queue handle (RPC_QUEUE_HANDLE, a context handle)
 *   opnum 20  rpc_ACCloseHandle         close it
 *   opnum 27  rpc_ACPurgeQueue          Purge Queue through it (seed 000)
 *   opnum 31  R_QMGetRTQMServerPort     where qmcomm is served (this listener's port)
 *
 * and, in qmcomm_info.c, the calls around them (opnums 12, 14, 15, 26, 28). Every other
 * opnum of the interface (0..31) faults with nca_s_op_rng_error.
 *
 * Handles are mq/handle.c's, the same the HTTP API opens (the same resolution, access checks,
 * queue descriptors, idle rundown, per-user limit), marked with the RPC session that opened
 * them:
 * - a queue of this node gives a LocalQueueContextHandle; a direct format name of another
 *   Sluice node a RemoteQueueProxyHandle, which this node opens at the owner over its link
 *   (mq/handle.c's remote path) rather than sending the client to the owner with
 *   lplpRemoteQueueName (MS-MQMP 4.2's older sequence): the answer comes when the owner
 *   answers, and a purge through it returns the owner's HRESULT;
 * - the context handle's UUID carries the handle's id and its session: a handle of another
 *   connection, a closed or unknown one, faults with nca_s_fault_context_mismatch (what the
 *   RPC runtime does for a context handle the association does not hold), changing nothing;
 * - when the connection goes, its handles are run down (msrpc.c).
 */
#include <stdio.h>
#include <string.h>

#include "core/hex.h"
#include "core/le.h"
#include "core/log.h"
#include "core/mem.h"
#include "link/link.h"
#include "mq/handle.h"
#include "rpc/msrpc.h"

#define QMCOMM_OPS 32

/* ---- context handles: attributes (0) and a UUID: the handle id's 12 bytes, the session's
 * low 32 bits ---- */

static void put_context(ndr_wr *out, const mq_handle *h, uint64_t session)
{
    uint8_t b[20] = {0};
    if (h) {
        sl_unhex(mq_handle_id(h), 12, b + 4); /* CTX_ID_LEN hex digits */
        sl_put_le32(b + 16, (uint32_t)session);
    }
    rpc_ndr_put_bytes(out, b, 20);
}

/* The handle a context names, if it is this session's; NULL otherwise. */
mq_handle *rpc_msrpc_get_context(msrpc *r, const rpc_session_info *s, ndr_rd *in)
{
    uint8_t b[20];
    rpc_ndr_rd_align(in, 4);
    rpc_ndr_bytes(in, b, 20);
    if (in->err)
        return NULL;
    char id[CTX_ID_LEN + 1];
    sl_hex(id, b + 4, 12);
    mq_handle *h = mq_handle_find(r->mq, id);
    if (!h || mq_handle_session(h) != s->id || sl_le32(b + 16) != (uint32_t)s->id)
        return NULL;
    return h;
}

/* rpc_QMOpenQueueInternal's [out] parameters and HRESULT. */
static void open_out(ndr_wr *out, const mq_handle *h, uint64_t session, uint32_t hr)
{
    rpc_ndr_put_u32(out, 0); /* *lplpRemoteQueueName = NULL: no remote open left to the client */
    rpc_ndr_put_u32(out, h ? 1 : 0); /* pdwQMContext */
    put_context(out, h, session);
    rpc_ndr_put_u32(out, hr);
}

/* An owner's answer for a pending call: its door (NULL: stopped, p freed) and the handle it
 * concerns (NULL: closed meanwhile). */
static msrpc *answer_of(msrpc_pending *p, mq_handle **h)
{
    msrpc *r = rpc_msrpc_pending_take(p);
    if (!r) {
        sl_free(p);
        return NULL;
    }
    *h = mq_handle_find(r->mq, p->id);
    return r;
}

/* The remote open's end: the handle, or the failure (the owner's HRESULT when it refused). */
static void open_finish(msrpc *r, msrpc_pending *p, mq_handle *h, sl_err e, int owner_failed,
                        const char *reply, const char *why)
{
    sl_buf stub;
    sl_buf_init(&stub);
    ndr_wr w;
    rpc_ndr_wr_init(&w, &stub);
    if (!h) {
        open_out(&w, NULL, 0, rpc_msrpc_hresult(SL_ERR_INVALID_HANDLE));
    } else if (!rpc_msrpc_session_alive(r, p->session)) {
        mq_handle_discard(r->mq, h); /* the caller went away meanwhile: the proxy goes too */
    } else if (e == SL_OK) {
        sl_debug("msrpc: remote handle %s opened", mq_handle_id(h));
        open_out(&w, h, p->session, 0);
    } else {
        uint32_t hr = owner_failed && reply ? mq_handle_owner_hresult(reply) : rpc_msrpc_hresult(e);
        sl_info("msrpc: remote open refused: %s", why);
        mq_handle_discard(r->mq, h);
        open_out(&w, NULL, 0, hr);
    }
    rpc_msrpc_pending_reply(r, p, sl_buf_head(&stub), sl_buf_unread(&stub));
    sl_buf_free(&stub);
}

static void opened_answered(void *ctx, const char *reply, const char *err)
{
    msrpc_pending *p = ctx;
    mq_handle *h;
    msrpc *r = answer_of(p, &h);
    if (!r)
        return;
    char why[700] = "";
    int owner_failed = 0;
    /* checked again as the user who opened it (the handle's owner: the DCE/RPC login),
     * never as msrpc.user, as the HTTP door checks its request's user */
    sl_err e = h ? mq_handle_remote_opened(r->mq, mq_handle_owner(h), h, reply, &owner_failed, why,
                                           sizeof why)
                 : SL_ERR_INVALID_HANDLE;
    if (owner_failed)
        snprintf(why, sizeof why, "%s", err ? err : reply ? reply : "no answer");
    open_finish(r, p, h, e, owner_failed, reply, why);
}

static void resolved_answered(void *ctx, const char *reply, const char *err)
{
    msrpc_pending *p = ctx;
    mq_handle *h;
    msrpc *r = answer_of(p, &h);
    if (!r)
        return;
    char why[700] = "";
    int owner_failed = 0;
    sl_err e = SL_ERR_INVALID_HANDLE;
    if (h && rpc_msrpc_session_alive(r, p->session)) {
        rpc_msrpc_pending_put(r, p); /* for the second answer */
        /* the caller's user (the handle's owner) on the name the owner resolved: the same
         * check, and the same refusal, as the HTTP door's (issue 43) */
        e = mq_handle_remote_resolved(r->mq, mq_handle_owner(h), h, reply, opened_answered, p,
                                      &owner_failed, why, sizeof why);
        if (e == SL_OK)
            return;
        rpc_msrpc_pending_take(p);
    }
    if (owner_failed)
        snprintf(why, sizeof why, "%s", err ? err : reply ? reply : "no answer");
    open_finish(r, p, h, e, owner_failed, reply, why);
}

/* rpc_QMOpenQueueInternal(hBind, [in] QUEUE_FORMAT*, [in] DWORD dwDesiredAccess,
 *   [in] DWORD dwShareMode, [in] DWORD hRemoteQueue, [in, out, ptr, string] WCHAR**
 *   lplpRemoteQueueName, [in] DWORD* dwpQueue, [in] GUID* pLicGuid, [in, string] WCHAR*
 *   lpClientName, [out] DWORD* pdwQMContext, [out] RPC_QUEUE_HANDLE* phQueue,
 *   [in] DWORD dwRemoteProtocol, [in] DWORD dwpRemoteContext) */
static uint32_t open_queue(void *ctx, const rpc_session_info *s, const rpc_call *c, ndr_rd *in,
                           ndr_wr *out)
{
    msrpc *r = ctx;
    char fmt[1200], name[1100], client[512];
    uint8_t guid[16];
    rpc_msrpc_read_queue_format(r, in, fmt, sizeof fmt);
    uint32_t access = rpc_ndr_u32(in), share = rpc_ndr_u32(in), hremote = rpc_ndr_u32(in);
    name[0] = 0;
    if (ndr_ptr(in))
        rpc_ndr_wstring(in, name, sizeof name);
    rpc_ndr_rd_align(in, 4);
    (void)rpc_ndr_u32(in); /* dwpQueue */
    rpc_ndr_bytes(in, guid, 16);
    rpc_ndr_wstring(in, client, sizeof client);
    rpc_ndr_rd_align(in, 4);
    (void)rpc_ndr_u32(in); /* dwRemoteProtocol */
    (void)rpc_ndr_u32(in); /* dwpRemoteContext */
    if (in->err)
        return NCA_S_FAULT_NDR;
    char err[700];
    mq_caller who;
    sl_err e = rpc_msrpc_caller(r, s, 0, &who, err, sizeof err);
    if (e == SL_OK && (hremote || name[0])) {
        /* the second half of 4.2's sequence: this server makes the proxy itself */
        snprintf(err, sizeof err,
                 "a remote queue is opened by this server: call without "
                 "hRemoteQueue / lplpRemoteQueueName");
        e = SL_ERR_INVALID_PARAMETER;
    }
    if (e == SL_OK && !mq_handle_share_valid(share)) {
        snprintf(err, sizeof err, "share mode %u", share);
        e = SL_ERR_INVALID_PARAMETER;
    }
    if (e == SL_OK && !mq_handle_access_valid(access)) {
        snprintf(err, sizeof err, "access mode 0x%x", access);
        e = SL_ERR_UNSUPPORTED_ACCESS_MODE;
    }
    qm_queue *q = NULL;
    eod_addr ra;
    int remote = 0;
    if (e == SL_OK && !fmt[0]) {
        snprintf(err, sizeof err, "no queue format");
        e = SL_ERR_ILLEGAL_FORMATNAME;
    }
    if (e == SL_OK)
        e = mq_handle_resolve(r->mq, fmt, NULL, access, &q, &ra, &remote, err, sizeof err);
    mq_handle *h = NULL;
    if (e == SL_OK && remote) {
        msrpc_pending *p = rpc_msrpc_pending_new(r, s, c);
        e = mq_handle_open_remote(r->mq, who.user, fmt, &ra, access, (int)share, NULL,
                                  resolved_answered, p, &h, err, sizeof err);
        if (e == SL_OK) {
            mq_handle_set_session(h, s->id);
            memcpy(p->id, mq_handle_id(h), CTX_ID_LEN + 1);
            return RPC_DEFERRED;
        }
        rpc_msrpc_pending_take(p);
        sl_free(p);
    } else if (e == SL_OK) {
        e = mq_handle_open_local(r->mq, who.user, q, access, (int)share, &h, err, sizeof err);
        if (e == SL_OK)
            mq_handle_set_session(h, s->id);
    }
    if (e != SL_OK)
        sl_info("msrpc: rpc_QMOpenQueueInternal '%s' from %s refused: %s", fmt, s->peer, err);
    open_out(out, e == SL_OK ? h : NULL, s->id, rpc_msrpc_hresult(e));
    return 0;
}

/* rpc_ACCloseHandle([in, out] RPC_QUEUE_HANDLE* phQueue) */
static uint32_t close_handle(void *ctx, const rpc_session_info *s, const rpc_call *c, ndr_rd *in,
                             ndr_wr *out)
{
    msrpc *r = ctx;
    mq_handle *h = rpc_msrpc_get_context(r, s, in);
    if (in->err)
        return NCA_S_FAULT_NDR;
    if (!h)
        return NCA_S_FAULT_CONTEXT_MISMATCH;
    if (mq_handle_busy(h)) {
        /* its owner's answer is awaited: closing now would lose the answer's mq_handle */
        put_context(out, h, s->id);
        rpc_ndr_put_u32(out, rpc_msrpc_hresult(SL_ERR_RESOURCE_LOCKED));
        return 0;
    }
    sl_debug("msrpc: handle %s closed by %s", mq_handle_id(h), s->peer);
    mq_handle_discard(r->mq, h);
    put_context(out, NULL, 0);
    rpc_ndr_put_u32(out, 0);
    return 0;
}

static void purge_answered(void *ctx, const char *reply, const char *err)
{
    msrpc_pending *p = ctx;
    mq_handle *h;
    msrpc *r = answer_of(p, &h);
    if (!r)
        return;
    uint32_t hr;
    if (!h) {
        hr = rpc_msrpc_hresult(SL_ERR_INVALID_HANDLE);
    } else {
        uint64_t purged, pending;
        hr = mq_handle_purge_answered(h, reply, &purged, &pending) == SL_OK
                 ? 0
                 : mq_handle_owner_hresult(reply);
        if (!rpc_msrpc_session_alive(r, p->session))
            mq_handle_discard(r->mq, h); /* its connection went meanwhile: its rundown */
    }
    if (hr)
        sl_info("msrpc: remote purge failed (0x%08X): %s", hr, err ? err : reply ? reply : "");
    uint8_t stub[4];
    sl_put_le32(stub, hr);
    rpc_msrpc_pending_reply(r, p, stub, sizeof stub);
}

/* rpc_ACPurgeQueue([in] RPC_QUEUE_HANDLE hQueue): seed 000 */
static uint32_t purge_queue(void *ctx, const rpc_session_info *s, const rpc_call *c, ndr_rd *in,
                            ndr_wr *out)
{
    msrpc *r = ctx;
    mq_handle *h = rpc_msrpc_get_context(r, s, in);
    if (in->err)
        return NCA_S_FAULT_NDR;
    if (!h)
        return NCA_S_FAULT_CONTEXT_MISMATCH;
    char err[700];
    mq_caller who;
    sl_err e = rpc_msrpc_caller(r, s, 0, &who, err, sizeof err);
    if (e == SL_OK && mq_handle_busy(h)) {
        snprintf(err, sizeof err, "handle %s waits for its owner", mq_handle_id(h));
        e = SL_ERR_RESOURCE_LOCKED;
    }
    if (e == SL_OK) {
        msrpc_pending *p = rpc_msrpc_pending_new(r, s, c);
        memcpy(p->id, mq_handle_id(h), CTX_ID_LEN + 1);
        uint64_t n = 0;
        int pending = 0;
        e = mq_handle_purge(r->mq, who.user, h, &n, &pending, purge_answered, p, err, sizeof err);
        if (e == SL_OK && pending)
            return RPC_DEFERRED;
        rpc_msrpc_pending_take(p);
        sl_free(p);
        if (e == SL_OK)
            sl_debug("msrpc: handle %s purged %llu message(s)", mq_handle_id(h),
                     (unsigned long long)n);
    }
    if (e != SL_OK)
        sl_info("msrpc: rpc_ACPurgeQueue from %s refused: %s", s->peer, err);
    rpc_ndr_put_u32(out, rpc_msrpc_hresult(e));
    return 0;
}

/* R_QMGetRTQMServerPort([in] DWORD fIP): qmcomm is here, over TCP (IP_HANDSHAKE) and, there
 * being no SPX, for IPX_HANDSHAKE too; qm2qm (IP_READ, IPX_READ) is not served: 0. */
static uint32_t server_port(void *ctx, const rpc_session_info *s, const rpc_call *c, ndr_rd *in,
                            ndr_wr *out)
{
    uint32_t fip = rpc_ndr_u32(in);
    if (in->err)
        return NCA_S_FAULT_NDR;
    rpc_ndr_put_u32(out, fip == 0 || fip == 2 ? (uint32_t)rpc_server_port(s->srv) : 0);
    return 0;
}

void rpc_msrpc_qmcomm_register(msrpc *r, rpc_server *s)
{
    static rpc_op_fn ops[QMCOMM_OPS];
    ops[19] = open_queue;
    ops[20] = close_handle;
    ops[27] = purge_queue;
    ops[31] = server_port;
    rpc_msrpc_qmcomm_info_ops(ops);
    rpc_syntax id = {.major = 1, .minor = 0};
    rpc_uuid_parse("fdb3a030-065f-11d1-bb9b-00a024ea5525", id.uuid);
    rpc_server_add(s, &id, "qmcomm", ops, QMCOMM_OPS, r);
}
