/* propvar.c - management property values (mq/info.h's plain values) as MS-MQMQ PROPVARIANTs
 * in NDR20, for R_QMMgmtGetInfo's apVar (MS-MQMR 3.1.4.1).
 *
 * Wire layout, per MIDL's rules for a structure holding a non-encapsulated union: the
 * structure is aligned to 8 (the union has 8-byte arms); vt (2 bytes), two reserved bytes
 * and a reserved ULONG; the union's discriminant (vt again, 2 bytes); then the arm, aligned
 * to its own type. Pointers in arms are deferred: an array of PROPVARIANTs is written as every
 * element's inline part, then every element's referents, in order (rpc_msrpc_pv_inline, then
 * rpc_msrpc_pv_deferred).
 *
 * Types served: VT_NULL, VT_UI4, VT_I4, VT_I8, VT_UI8, VT_LPWSTR, VT_CLSID, VT_BLOB and the
 * vectors VT_VECTOR|VT_UI4, |VT_I4, |VT_UI8, |VT_CLSID, |VT_LPWSTR, |VT_VARIANT. A
 * VT_VARIANT vector's elements take their types from the property (EOD_SOURCE_INFO,
 * CONNECTION_HISTORY: parallel vectors, see elem_vt). A value that does not fit the type
 * goes as its zero (0, "", an empty blob or vector, the nil GUID).
 */
#include <string.h>

#include "rpc/propvar.h"

/* The element types of a VT_VARIANT vector property: parallel vectors. */
static uint16_t elem_vt(int prop, size_t i)
{
    static const uint16_t eod_source[6] = {
        MQ_VT_VECTOR | MQ_VT_LPWSTR, /* the sequences' destination format names */
        MQ_VT_VECTOR | MQ_VT_CLSID,  /* the senders' QM GUIDs */
        MQ_VT_VECTOR | MQ_VT_UI8,    /* SeqIDs */
        MQ_VT_VECTOR | MQ_VT_UI4,    /* SeqNos */
        MQ_VT_VECTOR | MQ_VT_I4,     /* last access (seconds since 1970) */
        MQ_VT_VECTOR | MQ_VT_UI4,    /* rejects */
    };
    static const uint16_t history[4] = {
        MQ_VT_VECTOR | MQ_VT_UI4,    /* status */
        MQ_VT_VECTOR | MQ_VT_I4,     /* time */
        MQ_VT_VECTOR | MQ_VT_I4,     /* error (an HRESULT) */
        MQ_VT_VECTOR | MQ_VT_LPWSTR, /* the address tried */
    };
    if (prop == MQ_PROP_EOD_SOURCE_INFO && i < 6)
        return eod_source[i];
    if (prop == MQ_PROP_CONNECTION_HISTORY && i < 4)
        return history[i];
    return MQ_VT_NULL;
}

static uint64_t vint(const mq_value *v)
{
    return v && v->kind == MQ_V_INT ? (uint64_t)v->i : 0;
}

/* A string element: a string, or the first string of a list (an address list). */
static const char *vstr(const mq_value *v)
{
    if (v && v->kind == MQ_V_LIST)
        v = v->n ? &v->items[0] : NULL;
    return v && v->kind == MQ_V_STR && v->s ? v->s : "";
}

static const mq_value *item(const mq_value *v, size_t i)
{
    return v->kind == MQ_V_LIST && i < v->n ? &v->items[i] : NULL;
}

static size_t vec_len(const mq_value *v)
{
    return v->kind == MQ_V_LIST ? v->n : 0;
}

/* A sending QM's GUID as a GUID structure: the first three fields little endian (the value
 * holds the bytes in text order, as the HTTP API shows them). */
static void put_guid_of(ndr_wr *w, const mq_value *v)
{
    static const int pos[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
    uint8_t g[16] = {0};
    if (v && v->kind == MQ_V_SENDER)
        for (int i = 0; i < 16; i++)
            g[pos[i]] = v->guid[i];
    rpc_ndr_wr_align(w, 4);
    rpc_ndr_put_bytes(w, g, 16);
}

/* A VT_BLOB's bytes: a SEQUENCE_INFO's 16; 0 for anything else. */
static size_t blob_of(const mq_value *v, uint8_t out[16])
{
    if (v->kind != MQ_V_SEQINFO)
        return 0;
    mq_seqinfo_bytes(&v->seq, out);
    return 16;
}

void rpc_msrpc_pv_inline(ndr_wr *w, uint16_t vt, const mq_value *v)
{
    if (!v || (vt != MQ_VT_NULL && vt != MQ_VT_EMPTY && v->kind == MQ_V_NULL))
        vt = MQ_VT_NULL;
    rpc_ndr_wr_align(w, 8);
    rpc_ndr_put_u16(w, vt);
    rpc_ndr_put_u8(w, 0);
    rpc_ndr_put_u8(w, 0);
    rpc_ndr_put_u32(w, 0);
    rpc_ndr_put_u16(w, vt); /* the union's discriminant */
    if (vt & MQ_VT_VECTOR) {
        rpc_ndr_put_u32(w, (uint32_t)vec_len(v));
        rpc_ndr_put_ref(w);
        return;
    }
    uint8_t b[16];
    switch (vt) {
    case MQ_VT_I4:
    case MQ_VT_UI4:
        rpc_ndr_put_u32(w, (uint32_t)vint(v));
        break;
    case MQ_VT_I8:
    case MQ_VT_UI8:
        rpc_ndr_put_u64(w, vint(v));
        break;
    case MQ_VT_LPWSTR:
    case MQ_VT_CLSID:
        rpc_ndr_put_ref(w);
        break;
    case MQ_VT_BLOB:
        rpc_ndr_put_u32(w, (uint32_t)blob_of(v, b));
        rpc_ndr_put_ref(w);
        break;
    default:
        break;
    }
}

void rpc_msrpc_pv_deferred(ndr_wr *w, uint16_t vt, const mq_value *v, int prop)
{
    if (!v || (vt != MQ_VT_NULL && vt != MQ_VT_EMPTY && v->kind == MQ_V_NULL))
        return;
    size_t n = vec_len(v);
    uint8_t b[16];
    switch (vt) {
    case MQ_VT_LPWSTR:
        rpc_ndr_put_wstring(w, v->kind == MQ_V_STR && v->s ? v->s : "");
        return;
    case MQ_VT_CLSID:
        put_guid_of(w, v);
        return;
    case MQ_VT_BLOB:
        n = blob_of(v, b);
        rpc_ndr_put_u32(w, (uint32_t)n);
        rpc_ndr_put_bytes(w, b, n);
        return;
    case MQ_VT_VECTOR | MQ_VT_I4:
    case MQ_VT_VECTOR | MQ_VT_UI4:
        rpc_ndr_put_u32(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            rpc_ndr_put_u32(w, (uint32_t)vint(item(v, i)));
        return;
    case MQ_VT_VECTOR | MQ_VT_UI8:
        rpc_ndr_put_u32(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            rpc_ndr_put_u64(w, vint(item(v, i)));
        return;
    case MQ_VT_VECTOR | MQ_VT_CLSID:
        rpc_ndr_put_u32(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            put_guid_of(w, item(v, i));
        return;
    case MQ_VT_VECTOR | MQ_VT_LPWSTR:
        rpc_ndr_put_u32(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            rpc_ndr_put_ref(w);
        for (size_t i = 0; i < n; i++)
            rpc_ndr_put_wstring(w, vstr(item(v, i)));
        return;
    case MQ_VT_VECTOR | MQ_VT_VARIANT:
        rpc_ndr_put_u32(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            rpc_msrpc_pv_inline(w, elem_vt(prop, i), item(v, i));
        for (size_t i = 0; i < n; i++)
            rpc_msrpc_pv_deferred(w, elem_vt(prop, i), item(v, i), 0);
        return;
    default:
        return;
    }
}
