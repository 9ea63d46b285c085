/* dcerpc.c - the connection-oriented DCE/RPC state machine (see dcerpc.h for the bounds and
 * the authentication rules). An auth verifier is the last auth_length + 8 bytes of a PDU: the
 * sec_trailer (auth_type, auth_level, auth_pad_length, reserved, auth_context_id) and the
 * security provider's token; auth_pad_length bytes of padding precede it (MS-RPCE 2.2.2.11).
 */
#include "rpc/dcerpc.h"

#include <stdio.h>
#include <string.h>

#include "core/hex.h"
#include "core/le.h"

const rpc_syntax rpc_ndr20 = {{0x04, 0x5d, 0x88, 0x8a, 0xeb, 0x1c, 0xc9, 0x11, 0x9f, 0xe8, 0x08,
                               0x00, 0x2b, 0x10, 0x48, 0x60},
                              2,
                              0};

/* Bind-time feature negotiation (MS-RPCE 3.3.1.5.3): a transfer syntax 6cb71c2c-9812-4540-...
 * whose last eight bytes carry the client's feature bits. */
static const uint8_t btfn_prefix[8] = {0x2c, 0x1c, 0xb7, 0x6c, 0x12, 0x98, 0x40, 0x45};

enum { RES_ACCEPT = 0, RES_PROVIDER_REJECT = 2, RES_NEGOTIATE_ACK = 3 };
enum {
    REASON_NOT_SPECIFIED = 0,
    REASON_ABSTRACT_NOT_SUPPORTED = 1,
    REASON_TRANSFER_NOT_SUPPORTED = 2,
    REASON_LOCAL_LIMIT = 3,
};
enum { NAK_NOT_SPECIFIED = 0, NAK_VERSION = 4, NAK_AUTHN_TYPE = 8 };

int rpc_uuid_parse(const char *s, uint8_t out[16])
{
    return sl_guid_parse(s, strlen(s), out);
}

void rpc_uuid_str(const uint8_t u[16], char *buf, size_t len)
{
    char t[37];
    sl_guid_str(u, t);
    snprintf(buf, len, "%s", t);
}

void rpc_conn_init(rpc_conn *c, const rpc_conn_cfg *cfg, uint32_t assoc_group)
{
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    if (c->cfg.max_frag < RPC_MIN_FRAG)
        c->cfg.max_frag = RPC_MIN_FRAG;
    c->max_xmit = c->max_recv = c->cfg.max_frag;
    c->assoc_group = assoc_group;
    sl_buf_init(&c->stub);
    sl_buf_init(&c->out);
    sl_buf_init(&c->pdu);
    rpc_ntlm_srv_init(&c->ntlm);
}

void rpc_conn_free(rpc_conn *c)
{
    sl_buf_free(&c->stub);
    sl_buf_free(&c->out);
    sl_buf_free(&c->pdu);
    rpc_ntlm_srv_free(&c->ntlm);
}

const char *rpc_conn_user(const rpc_conn *c)
{
    return c->auth_state == 2 ? c->ntlm.user : NULL;
}

static const char *level_name(unsigned level)
{
    switch (level) {
    case RPC_AUTH_LEVEL_CONNECT:
        return "connect";
    case RPC_AUTH_LEVEL_INTEGRITY:
        return "integrity";
    case RPC_AUTH_LEVEL_PRIVACY:
        return "privacy";
    default:
        return "?";
    }
}

/* ---- reading a PDU ---- */

typedef struct pdu {
    const uint8_t *p;
    uint16_t len; /* frag_length */
    uint16_t auth_len;
    uint8_t type, flags;
    int le;
    uint32_t call_id;
} pdu;

/* The PDU's integers in the sender's byte order (its drep): core/le.h or buf.h's. */
static uint16_t get16(const uint8_t *p, int le)
{
    return le ? sl_le16(p) : sl_get_u16(p);
}
static uint32_t get32(const uint8_t *p, int le)
{
    return le ? sl_le32(p) : sl_get_u32(p);
}

/* ---- writing PDUs (always little endian, ASCII, IEEE) ---- */

/* Start a PDU in out; returns its offset (the length is patched by end_pdu). The offset is
 * from the read offset, not from the allocation: out may be partly sent, and a later append
 * can move its unread bytes to the front (sl_buf_reserve compacts). pdu_at() turns it into a
 * pointer, valid until the next append. */
static size_t begin_pdu(sl_buf *out, uint8_t type, uint8_t flags, uint32_t call_id)
{
    size_t at = sl_buf_unread(out);
    uint8_t *h = sl_buf_reserve(out, RPC_HDR_LEN);
    h[0] = 5;
    h[1] = 0;
    h[2] = type;
    h[3] = flags;
    h[4] = 0x10; /* little endian, ASCII */
    h[5] = h[6] = h[7] = 0;
    sl_put_le16(h + 8, 0);
    sl_put_le16(h + 10, 0);
    sl_put_le32(h + 12, call_id);
    out->len += RPC_HDR_LEN;
    return at;
}
static uint8_t *pdu_at(const sl_buf *out, size_t at)
{
    return out->data + out->off + at;
}
/* Bytes of the PDU at at written so far. */
static size_t pdu_len(const sl_buf *out, size_t at)
{
    return sl_buf_unread(out) - at;
}
static void end_pdu(sl_buf *out, size_t at)
{
    sl_put_le16(pdu_at(out, at) + 8, (uint16_t)pdu_len(out, at));
}
static void out16(sl_buf *out, uint16_t v)
{
    sl_put_le16(sl_buf_reserve(out, 2), v);
    out->len += 2;
}
static void out32(sl_buf *out, uint32_t v)
{
    sl_put_le32(sl_buf_reserve(out, 4), v);
    out->len += 4;
}
static void out_pad4(sl_buf *out, size_t at)
{
    while (pdu_len(out, at) % 4)
        sl_buf_put_u8(out, 0);
}

void rpc_conn_fault(rpc_conn *c, uint32_t call_id, uint16_t ctx_id, uint32_t status)
{
    /* the call never reached a manager for these: the client may retry it elsewhere */
    int dne = status == NCA_S_UNK_IF || status == NCA_S_OP_RNG_ERROR ||
              status == NCA_S_PROTO_ERROR || status == NCA_S_FAULT_REMOTE_NO_MEMORY;
    size_t at = begin_pdu(
        &c->out, RPC_PT_FAULT,
        RPC_PFC_FIRST_FRAG | RPC_PFC_LAST_FRAG | (dne ? RPC_PFC_DID_NOT_EXECUTE : 0), call_id);
    out32(&c->out, 0); /* alloc_hint */
    out16(&c->out, ctx_id);
    sl_buf_put_u8(&c->out, 0); /* cancel_count */
    sl_buf_put_u8(&c->out, 0);
    out32(&c->out, status);
    out32(&c->out, 0);
    end_pdu(&c->out, at);
    c->faults++;
}

void rpc_conn_respond(rpc_conn *c, const rpc_call *call, const uint8_t *stub, size_t len)
{
    /* each fragment but the last carries a multiple of 8 stub bytes (C706 12.6.3.6); a signed
     * one leaves room for up to 3 bytes of padding, the sec_trailer and the signature */
    int sec = c->auth_state == 2 && c->auth_level >= RPC_AUTH_LEVEL_INTEGRITY;
    size_t over = RPC_HDR_LEN + 8 + (sec ? 8 + 8 + NTLM_SIG_LEN : 0);
    size_t room = ((size_t)c->max_xmit - over) & ~(size_t)7, off = 0;
    do {
        size_t n = len - off > room ? room : len - off;
        uint8_t flags =
            (off == 0 ? RPC_PFC_FIRST_FRAG : 0) | (off + n == len ? RPC_PFC_LAST_FRAG : 0);
        size_t at = begin_pdu(&c->out, RPC_PT_RESPONSE, flags, call->call_id);
        out32(&c->out, (uint32_t)(len - off)); /* alloc_hint: what remains */
        out16(&c->out, call->ctx_id);
        sl_buf_put_u8(&c->out, 0);
        sl_buf_put_u8(&c->out, 0);
        sl_buf_append(&c->out, stub + off, n);
        if (sec) {
            uint8_t pad = (uint8_t)((4 - pdu_len(&c->out, at) % 4) % 4);
            for (unsigned i = 0; i < pad; i++)
                sl_buf_put_u8(&c->out, 0);
            sl_buf_put_u8(&c->out, RPC_AUTHN_WINNT);
            sl_buf_put_u8(&c->out, c->auth_level);
            sl_buf_put_u8(&c->out, pad);
            sl_buf_put_u8(&c->out, 0);
            out32(&c->out, c->auth_ctx_id);
            sl_buf_reserve(&c->out, NTLM_SIG_LEN);
            size_t sig_at = pdu_len(&c->out, at); /* from the PDU's start */
            c->out.len += NTLM_SIG_LEN;
            end_pdu(&c->out, at);
            uint8_t *head = pdu_at(&c->out, at); /* nothing is appended from here on */
            sl_put_le16(head + 10, NTLM_SIG_LEN);
            rpc_ntlm_wrap(&c->ntlm, c->auth_level == RPC_AUTH_LEVEL_PRIVACY, head, sig_at,
                          RPC_HDR_LEN + 8, n + pad, head + sig_at);
        } else {
            end_pdu(&c->out, at);
        }
        off += n;
    } while (off < len);
}

static void bind_nak(rpc_conn *c, uint32_t call_id, uint16_t reason)
{
    size_t at =
        begin_pdu(&c->out, RPC_PT_BIND_NAK, RPC_PFC_FIRST_FRAG | RPC_PFC_LAST_FRAG, call_id);
    out16(&c->out, reason);
    sl_buf_put_u8(&c->out, 1); /* versions supported: 5.0 */
    sl_buf_put_u8(&c->out, 5);
    sl_buf_put_u8(&c->out, 0);
    out_pad4(&c->out, at);
    end_pdu(&c->out, at);
}

static const rpc_iface *find_iface(const rpc_conn *c, const uint8_t *abs)
{
    uint16_t major = get16(abs + 16, 1), minor = get16(abs + 18, 1);
    for (size_t i = 0; i < c->cfg.n_ifaces; i++) {
        const rpc_iface *f = c->cfg.ifaces[i];
        if (!memcmp(f->id.uuid, abs, 16) && f->id.major == major && f->id.minor >= minor)
            return f;
    }
    return NULL;
}

static int mq_ctx_add(rpc_conn *c, uint16_t id, const rpc_iface *f)
{
    for (size_t i = 0; i < c->n_ctx; i++)
        if (c->ctx[i].id == id) {
            c->ctx[i].iface = f;
            return 0;
        }
    if (c->n_ctx == RPC_MAX_CTX)
        return -1;
    c->ctx[c->n_ctx].id = id;
    c->ctx[c->n_ctx].iface = f;
    c->n_ctx++;
    return 0;
}

static const rpc_iface *mq_ctx_find(const rpc_conn *c, uint16_t id)
{
    for (size_t i = 0; i < c->n_ctx; i++)
        if (c->ctx[i].id == id)
            return c->ctx[i].iface;
    return NULL;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (why)                                                                                   \
            snprintf(why, whylen, __VA_ARGS__);                                                    \
        return RPC_STEP_CLOSE;                                                                     \
    } while (0)

/* bind and alter_context: negotiate the presentation contexts. */
static enum rpc_step on_bind(rpc_conn *c, const pdu *d, char *why, size_t whylen)
{
    int alter = d->type == RPC_PT_ALTER_CONTEXT;
    if (alter != c->bound) {
        if (!alter)
            bind_nak(c, d->call_id, NAK_NOT_SPECIFIED);
        FAIL("%s", alter ? "alter_context before bind" : "a second bind on the connection");
    }
    const uint8_t *p = d->p + RPC_HDR_LEN, *end = d->p + d->len;
    sl_buf chal; /* the NTLM CHALLENGE for the bind_ack, when the bind carries a NEGOTIATE */
    sl_buf_init(&chal);
    if (d->auth_len) {
        size_t tpos = (size_t)d->len - d->auth_len - 8;
        const uint8_t *t = d->p + tpos;
        if (!c->cfg.ntlm || t[0] != RPC_AUTHN_WINNT) {
            /* a provider we do not have: refuse the authentication type, as MS-RPCE does */
            if (!alter)
                bind_nak(c, d->call_id, NAK_AUTHN_TYPE);
            else
                rpc_conn_fault(c, d->call_id, 0, NCA_S_PROTO_ERROR);
            FAIL("authentication requested (type %u) and %s", t[0],
                 c->cfg.ntlm ? "only NTLM (10) is offered" : "none is offered (msrpc.auth)");
        }
        char nwhy[200];
        const char *bad = NULL;
        if (c->auth_state != 0)
            bad = "a second security context on the connection";
        else if (t[1] != RPC_AUTH_LEVEL_CONNECT && t[1] != RPC_AUTH_LEVEL_INTEGRITY &&
                 t[1] != RPC_AUTH_LEVEL_PRIVACY)
            bad = "an authentication level other than connect, integrity or privacy";
        else if (t[2] > tpos - RPC_HDR_LEN)
            bad = "auth padding longer than the PDU body";
        else if (rpc_ntlm_negotiate(&c->ntlm, t + 8, d->auth_len, c->cfg.computer, &chal, nwhy,
                                    sizeof nwhy) < 0)
            bad = nwhy;
        if (bad) {
            sl_buf_free(&chal);
            if (!alter)
                bind_nak(c, d->call_id, NAK_AUTHN_TYPE);
            else
                rpc_conn_fault(c, d->call_id, 0, NCA_S_PROTO_ERROR);
            FAIL("NTLM refused at %s: %s", alter ? "alter_context" : "bind", bad);
        }
        c->auth_state = 1;
        c->auth_level = t[1];
        c->auth_ctx_id = get32(t + 4, d->le);
        end = d->p + tpos - t[2];
    }
    if (end - p < 12)
        goto malformed;
    uint16_t cl_xmit = get16(p, d->le), cl_recv = get16(p + 2, d->le);
    uint32_t group = get32(p + 4, d->le);
    unsigned n = p[8];
    p += 12;
    if (!alter && (cl_xmit < RPC_MIN_FRAG || cl_recv < RPC_MIN_FRAG)) {
        bind_nak(c, d->call_id, NAK_NOT_SPECIFIED);
        FAIL("fragment sizes %u/%u below %u", cl_xmit, cl_recv, RPC_MIN_FRAG);
    }
    if (n == 0)
        goto malformed;
    struct {
        uint16_t result, reason;
        const uint8_t *ts;
    } res[256];
    /* n is at most 255 (one byte); res is filled before it is read */
    static const uint8_t zero[20];
    for (unsigned i = 0; i < n; i++) {
        if (end - p < 4 + 20)
            goto malformed;
        uint16_t id = get16(p, d->le);
        unsigned nts = p[2];
        const uint8_t *abs = p + 4;
        p += 24;
        if (nts == 0 || (size_t)(end - p) < 20u * nts)
            goto malformed;
        const uint8_t *ts = p;
        p += 20u * nts;
        res[i].result = RES_PROVIDER_REJECT;
        res[i].reason = REASON_TRANSFER_NOT_SUPPORTED;
        res[i].ts = zero;
        const rpc_iface *f = d->le ? find_iface(c, abs) : NULL;
        int btfn = 0;
        for (unsigned k = 0; k < nts && !btfn; k++)
            btfn = !memcmp(ts + 20u * k, btfn_prefix, 8);
        if (btfn) {
            /* we ask for none of the optional features */
            res[i].result = RES_NEGOTIATE_ACK;
            res[i].reason = 0;
            continue;
        }
        if (!f) {
            res[i].reason = REASON_ABSTRACT_NOT_SUPPORTED;
            continue;
        }
        for (unsigned k = 0; k < nts; k++) {
            const uint8_t *t = ts + 20u * k;
            if (!memcmp(t, rpc_ndr20.uuid, 16) && get16(t + 16, 1) == rpc_ndr20.major) {
                if (mq_ctx_add(c, id, f) < 0) {
                    res[i].reason = REASON_LOCAL_LIMIT;
                } else {
                    res[i].result = RES_ACCEPT;
                    res[i].reason = 0;
                    res[i].ts = t;
                }
                break;
            }
        }
    }
    if (!alter) {
        c->max_recv = cl_xmit < c->cfg.max_frag ? cl_xmit : c->cfg.max_frag;
        c->max_xmit = cl_recv < c->cfg.max_frag ? cl_recv : c->cfg.max_frag;
        if (group)
            c->assoc_group = group;
        c->bound = 1;
    }
    size_t at = begin_pdu(&c->out, alter ? RPC_PT_ALTER_CONTEXT_RESP : RPC_PT_BIND_ACK,
                          RPC_PFC_FIRST_FRAG | RPC_PFC_LAST_FRAG, d->call_id);
    out16(&c->out, c->max_xmit);
    out16(&c->out, c->max_recv);
    out32(&c->out, c->assoc_group);
    const char *sa = alter ? NULL : c->cfg.sec_addr;
    size_t sl = sa ? strlen(sa) + 1 : 0;
    out16(&c->out, (uint16_t)sl);
    if (sl)
        sl_buf_append(&c->out, sa, sl);
    out_pad4(&c->out, at);
    sl_buf_put_u8(&c->out, (uint8_t)n);
    sl_buf_put_u8(&c->out, 0);
    out16(&c->out, 0);
    for (unsigned i = 0; i < n; i++) {
        out16(&c->out, res[i].result);
        out16(&c->out, res[i].reason);
        sl_buf_append(&c->out, res[i].ts, 20);
    }
    if (chal.len) {
        out_pad4(&c->out, at);
        sl_buf_put_u8(&c->out, RPC_AUTHN_WINNT);
        sl_buf_put_u8(&c->out, c->auth_level);
        sl_buf_put_u8(&c->out, 0);
        sl_buf_put_u8(&c->out, 0);
        out32(&c->out, c->auth_ctx_id);
        sl_buf_append(&c->out, chal.data, chal.len);
        sl_put_le16(pdu_at(&c->out, at) + 10, (uint16_t)chal.len);
    }
    sl_buf_free(&chal);
    end_pdu(&c->out, at);
    return RPC_STEP_DONE;
malformed:
    sl_buf_free(&chal);
    if (!alter)
        bind_nak(c, d->call_id, NAK_NOT_SPECIFIED);
    else
        rpc_conn_fault(c, d->call_id, 0, NCA_S_PROTO_ERROR);
    FAIL("malformed %s", alter ? "alter_context" : "bind");
}

static enum rpc_step on_request(rpc_conn *c, const pdu *d, rpc_call *call, char *why, size_t whylen)
{
    if (!c->bound) {
        rpc_conn_fault(c, d->call_id, 0, NCA_S_PROTO_ERROR);
        FAIL("request before bind");
    }
    size_t hl = RPC_HDR_LEN + 8 + ((d->flags & RPC_PFC_OBJECT_UUID) ? 16 : 0);
    if (d->len < hl + (d->auth_len ? (size_t)d->auth_len + 8 : 0)) {
        rpc_conn_fault(c, d->call_id, 0, NCA_S_PROTO_ERROR);
        FAIL("short request");
    }
    uint16_t ctx = get16(d->p + 20, d->le), opnum = get16(d->p + 22, d->le);
    const uint8_t *stub = d->p + hl;
    size_t n = d->len - hl;
    int sec = c->auth_state == 2 && c->auth_level >= RPC_AUTH_LEVEL_INTEGRITY;
    const char *refuse = NULL;
    if (c->auth_state == -1)
        refuse = "its NTLM login failed";
    else if (c->auth_state == 1)
        refuse = "a call before the NTLM login completed (no AUTH3)";
    else if (c->auth_state == 0 && c->cfg.require_auth)
        refuse = "an unauthenticated call (msrpc.auth = ntlm)";
    else if (c->auth_state == 2 && c->auth_level < c->cfg.min_level)
        refuse = "an authentication level below msrpc.min_auth_level";
    else if (!sec && d->auth_len)
        refuse = "an auth verifier without a signing security context";
    else if (sec && d->auth_len != NTLM_SIG_LEN)
        refuse = "a request without its NTLM signature";
    if (!refuse && sec) {
        size_t tpos = (size_t)d->len - NTLM_SIG_LEN - 8;
        const uint8_t *t = d->p + tpos;
        if (t[0] != RPC_AUTHN_WINNT || t[1] != c->auth_level ||
            get32(t + 4, d->le) != c->auth_ctx_id || t[2] > tpos - hl) {
            refuse = "an auth verifier of another security context";
        } else {
            /* verify (and unseal) a copy: the input stays as received */
            c->pdu.off = c->pdu.len = 0;
            sl_buf_append(&c->pdu, d->p, d->len);
            uint8_t *q = c->pdu.data;
            if (rpc_ntlm_unwrap(&c->ntlm, c->auth_level == RPC_AUTH_LEVEL_PRIVACY, q,
                                (size_t)d->len - NTLM_SIG_LEN, hl, tpos - hl,
                                q + d->len - NTLM_SIG_LEN) < 0)
                refuse = "a request whose NTLM signature does not verify";
            stub = q + hl;
            n = tpos - hl - t[2];
        }
    }
    if (refuse) {
        rpc_conn_fault(c, d->call_id, ctx, NCA_S_ACCESS_DENIED);
        c->in_call = 0;
        FAIL("call %u refused: %s", d->call_id, refuse);
    }
    if (d->flags & RPC_PFC_FIRST_FRAG) {
        if (c->in_call) {
            rpc_conn_fault(c, d->call_id, ctx, NCA_S_PROTO_ERROR);
            FAIL("a new call (%u) while call %u is being received", d->call_id, c->call_id);
        }
        c->in_call = 1;
        c->call_id = d->call_id;
        c->call_ctx = ctx;
        c->call_opnum = opnum;
        c->call_le = d->le;
        c->call_frags = 0;
        c->stub.off = c->stub.len = 0;
    } else if (!c->in_call || d->call_id != c->call_id || ctx != c->call_ctx ||
               opnum != c->call_opnum || d->le != c->call_le) {
        rpc_conn_fault(c, d->call_id, ctx, NCA_S_PROTO_ERROR);
        FAIL("a request fragment of no open call");
    }
    c->call_frags++;
    if (c->call_frags > c->cfg.max_frags || n > c->cfg.max_call - c->stub.len) {
        rpc_conn_fault(c, d->call_id, ctx, NCA_S_FAULT_REMOTE_NO_MEMORY);
        FAIL("call %u is over %u fragments or %zu bytes", d->call_id, c->cfg.max_frags,
             c->cfg.max_call);
    }
    sl_buf_append(&c->stub, stub, n);
    if (!(d->flags & RPC_PFC_LAST_FRAG))
        return RPC_STEP_DONE;
    c->in_call = 0;
    c->calls++;
    const rpc_iface *f = mq_ctx_find(c, ctx);
    if (!f) {
        rpc_conn_fault(c, d->call_id, ctx, NCA_S_UNK_IF);
        return RPC_STEP_DONE;
    }
    if (opnum >= f->n_ops) {
        rpc_conn_fault(c, d->call_id, ctx, NCA_S_OP_RNG_ERROR);
        return RPC_STEP_DONE;
    }
    call->call_id = d->call_id;
    call->ctx_id = ctx;
    call->opnum = opnum;
    call->iface = f;
    call->stub = sl_buf_head(&c->stub);
    call->stub_len = sl_buf_unread(&c->stub);
    call->le = d->le;
    return RPC_STEP_CALL;
}

/* AUTH3: the NTLM AUTHENTICATE. No answer goes back (there is none in the protocol): a
 * failed login shows at the next call, refused with access denied. */
static enum rpc_step on_auth3(rpc_conn *c, const pdu *d, char *why, size_t whylen)
{
    if (c->auth_state != 1 || !d->auth_len)
        FAIL("an AUTH3 without an NTLM login in progress");
    size_t tpos = (size_t)d->len - d->auth_len - 8;
    const uint8_t *t = d->p + tpos;
    if (t[0] != RPC_AUTHN_WINNT || get32(t + 4, d->le) != c->auth_ctx_id)
        FAIL("an AUTH3 of another security context");
    char awhy[200];
    if (rpc_ntlm_authenticate(&c->ntlm, t + 8, d->auth_len, c->cfg.nt_hash, c->cfg.nt_hash_ctx,
                              awhy, sizeof awhy) < 0) {
        c->auth_state = -1;
        if (why)
            snprintf(why, whylen, "NTLM login refused: %s", awhy);
        return RPC_STEP_NOTE;
    }
    c->auth_state = 2;
    if (why)
        snprintf(why, whylen, "NTLM login of '%s' (domain '%s'), level %s", c->ntlm.user,
                 c->ntlm.domain, level_name(c->auth_level));
    return RPC_STEP_NOTE;
}

enum rpc_step rpc_conn_step(rpc_conn *c, const uint8_t *in, size_t n, size_t *used, rpc_call *call,
                            char *why, size_t whylen)
{
    *used = 0;
    if (n < RPC_HDR_LEN)
        return RPC_STEP_MORE;
    pdu d;
    d.p = in;
    d.type = in[2];
    d.flags = in[3];
    d.le = (in[4] & 0xF0) == 0x10;
    d.len = get16(in + 8, d.le);
    d.auth_len = get16(in + 10, d.le);
    d.call_id = get32(in + 12, d.le);
    if (in[0] != 5 || in[1] > 1)
        FAIL("RPC version %u.%u", in[0], in[1]);
    if ((in[4] & 0xE0) || (in[4] & 0x0F) || d.len < RPC_HDR_LEN ||
        (d.auth_len && (size_t)d.auth_len + 8 > (size_t)d.len - RPC_HDR_LEN))
        FAIL("malformed PDU header (drep %02x, frag_length %u, auth_length %u)", in[4], d.len,
             d.auth_len);
    /* Before the bind the client's sizes are unknown: a bind never needs more than ours. */
    if (d.len > c->max_recv) {
        if (d.type == RPC_PT_REQUEST && c->bound)
            rpc_conn_fault(c, d.call_id, 0, NCA_S_PROTO_ERROR);
        FAIL("a %u-byte PDU over the %u-byte fragment size", d.len, c->max_recv);
    }
    if (n < d.len)
        return RPC_STEP_MORE;
    *used = d.len;
    switch (d.type) {
    case RPC_PT_BIND:
    case RPC_PT_ALTER_CONTEXT:
        return on_bind(c, &d, why, whylen);
    case RPC_PT_REQUEST:
        return on_request(c, &d, call, why, whylen);
    case RPC_PT_AUTH3:
        return on_auth3(c, &d, why, whylen);
    case RPC_PT_CO_CANCEL:
        return RPC_STEP_DONE; /* calls run to the end at once: nothing to cancel */
    case RPC_PT_ORPHANED:
        if (c->in_call && d.call_id == c->call_id) {
            c->in_call = 0;
            c->stub.off = c->stub.len = 0;
        }
        return RPC_STEP_DONE;
    default:
        if (c->bound)
            rpc_conn_fault(c, d.call_id, 0, NCA_S_PROTO_ERROR);
        FAIL("unexpected PDU type %u", d.type);
    }
}
