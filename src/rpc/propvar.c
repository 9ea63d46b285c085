/* msrpc_propvar.c - management property values (the HTTP API's JSON, api_msmq.c) as MS-MQMQ
 * PROPVARIANTs in NDR20, for R_QMMgmtGetInfo's apVar (MS-MQMR 3.1.4.1).
 *
 * Wire layout, per MIDL's rules for a structure holding a non-encapsulated union: the
 * structure is aligned to 8 (the union has 8-byte arms); vt (2 bytes), two reserved bytes
 * and a reserved ULONG; the union's discriminant (vt again, 2 bytes); then the arm, aligned
 * to its own type. Pointers in arms are deferred: an array of PROPVARIANTs is written as every
 * element's inline part, then every element's referents, in order (msrpc_pv_inline, then
 * msrpc_pv_deferred).
 *
 * Types served: VT_NULL, VT_UI4, VT_I4, VT_I8, VT_UI8, VT_LPWSTR, VT_CLSID, VT_BLOB and the
 * vectors VT_VECTOR|VT_UI4, |VT_I4, |VT_UI8, |VT_CLSID, |VT_LPWSTR, |VT_VARIANT. A
 * VT_VARIANT vector's elements take their types from the property (EOD_SOURCE_INFO,
 * CONNECTION_HISTORY: parallel vectors, see elem_vt).
 */
#include <stdlib.h>
#include <string.h>

#include "mgmt/mgmt_internal.h" /* base64_decode, until core/ has the one base64 */
#include "rpc/dcerpc.h"
#include "rpc/msrpc.h"

uint16_t msrpc_vt_code(const char *s)
{
    static const struct {
        const char *name;
        uint16_t vt;
    } t[] = {
        {"VT_NULL", MSRPC_VT_NULL}, {"VT_I4", MSRPC_VT_I4},       {"VT_UI4", MSRPC_VT_UI4},
        {"VT_I8", MSRPC_VT_I8},     {"VT_UI8", MSRPC_VT_UI8},     {"VT_LPWSTR", MSRPC_VT_LPWSTR},
        {"VT_BLOB", MSRPC_VT_BLOB}, {"VT_CLSID", MSRPC_VT_CLSID}, {"VT_VARIANT", MSRPC_VT_VARIANT},
    };
    uint16_t vt = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        size_t n = strlen(t[i].name);
        if (!strncmp(s, t[i].name, n) && (s[n] == 0 || s[n] == '|'))
            vt = t[i].vt;
    }
    if (strstr(s, "|VT_VECTOR"))
        vt |= MSRPC_VT_VECTOR;
    return vt;
}

/* The element types of a VT_VARIANT vector property: parallel vectors. */
static uint16_t elem_vt(int prop, size_t i)
{
    static const uint16_t eod_source[6] = {
        MSRPC_VT_VECTOR | MSRPC_VT_LPWSTR, /* the sequences' destination format names */
        MSRPC_VT_VECTOR | MSRPC_VT_CLSID,  /* the senders' QM GUIDs */
        MSRPC_VT_VECTOR | MSRPC_VT_UI8,    /* SeqIDs */
        MSRPC_VT_VECTOR | MSRPC_VT_UI4,    /* SeqNos */
        MSRPC_VT_VECTOR | MSRPC_VT_I4,     /* last access (seconds since 1970) */
        MSRPC_VT_VECTOR | MSRPC_VT_UI4,    /* rejects */
    };
    static const uint16_t history[4] = {
        MSRPC_VT_VECTOR | MSRPC_VT_UI4,    /* status */
        MSRPC_VT_VECTOR | MSRPC_VT_I4,     /* time */
        MSRPC_VT_VECTOR | MSRPC_VT_I4,     /* error (an HRESULT) */
        MSRPC_VT_VECTOR | MSRPC_VT_LPWSTR, /* the address tried */
    };
    if (prop == MSRPC_PROP_EOD_SOURCE_INFO && i < 6)
        return eod_source[i];
    if (prop == MSRPC_PROP_CONNECTION_HISTORY && i < 4)
        return history[i];
    return MSRPC_VT_NULL;
}

static uint64_t jint(json_t *v)
{
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

/* A string element: a string, or the first string of an array (an address list). */
static const char *jstr(json_t *v)
{
    if (json_is_array(v))
        v = json_array_get(v, 0);
    return json_is_string(v) ? json_string_value(v) : "";
}

static void put_guid_of(ndr_wr *w, json_t *v)
{
    uint8_t g[16] = {0};
    json_t *s = json_is_object(v) ? json_object_get(v, "guid") : v;
    if (!json_is_string(s) || rpc_uuid_parse(json_string_value(s), g) < 0)
        memset(g, 0, sizeof g);
    ndr_wr_align(w, 4);
    ndr_put_bytes(w, g, 16);
}

/* A VT_BLOB's bytes: {"blob": base64} (SEQUENCE_INFO values). *n = 0 when absent. */
static uint8_t *blob_of(json_t *v, size_t *n)
{
    json_t *b = json_is_object(v) ? json_object_get(v, "blob") : NULL;
    *n = 0;
    if (!json_is_string(b))
        return NULL;
    size_t sl = json_string_length(b);
    uint8_t *out = malloc(sl * 3 / 4 + 3);
    long got = out ? base64_decode(json_string_value(b), sl, out) : -1;
    if (got < 0) {
        free(out);
        return NULL;
    }
    *n = (size_t)got;
    return out;
}

static size_t vec_len(json_t *v)
{
    return json_is_array(v) ? json_array_size(v) : 0;
}

void msrpc_pv_inline(ndr_wr *w, uint16_t vt, json_t *v)
{
    if (vt != MSRPC_VT_NULL && vt != MSRPC_VT_EMPTY && json_is_null(v))
        vt = MSRPC_VT_NULL;
    ndr_wr_align(w, 8);
    ndr_put_u16(w, vt);
    ndr_put_u8(w, 0);
    ndr_put_u8(w, 0);
    ndr_put_u32(w, 0);
    ndr_put_u16(w, vt); /* the union's discriminant */
    if (vt & MSRPC_VT_VECTOR) {
        ndr_put_u32(w, (uint32_t)vec_len(v));
        ndr_put_ref(w);
        return;
    }
    size_t n;
    uint8_t *b;
    switch (vt) {
    case MSRPC_VT_I4:
    case MSRPC_VT_UI4:
        ndr_put_u32(w, (uint32_t)jint(v));
        break;
    case MSRPC_VT_I8:
    case MSRPC_VT_UI8:
        ndr_put_u64(w, jint(v));
        break;
    case MSRPC_VT_LPWSTR:
    case MSRPC_VT_CLSID:
        ndr_put_ref(w);
        break;
    case MSRPC_VT_BLOB:
        b = blob_of(v, &n);
        free(b);
        ndr_put_u32(w, (uint32_t)n);
        ndr_put_ref(w);
        break;
    default:
        break;
    }
}

void msrpc_pv_deferred(ndr_wr *w, uint16_t vt, json_t *v, int prop)
{
    if (vt != MSRPC_VT_NULL && vt != MSRPC_VT_EMPTY && json_is_null(v))
        return;
    size_t n = vec_len(v);
    uint8_t *b;
    switch (vt) {
    case MSRPC_VT_LPWSTR:
        ndr_put_wstring(w, json_is_string(v) ? json_string_value(v) : "");
        return;
    case MSRPC_VT_CLSID:
        put_guid_of(w, v);
        return;
    case MSRPC_VT_BLOB:
        b = blob_of(v, &n);
        ndr_put_u32(w, (uint32_t)n);
        ndr_put_bytes(w, b, n);
        free(b);
        return;
    case MSRPC_VT_VECTOR | MSRPC_VT_I4:
    case MSRPC_VT_VECTOR | MSRPC_VT_UI4:
        ndr_put_u32(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            ndr_put_u32(w, (uint32_t)jint(json_array_get(v, i)));
        return;
    case MSRPC_VT_VECTOR | MSRPC_VT_UI8:
        ndr_put_u32(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            ndr_put_u64(w, jint(json_array_get(v, i)));
        return;
    case MSRPC_VT_VECTOR | MSRPC_VT_CLSID:
        ndr_put_u32(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            put_guid_of(w, json_array_get(v, i));
        return;
    case MSRPC_VT_VECTOR | MSRPC_VT_LPWSTR:
        ndr_put_u32(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            ndr_put_ref(w);
        for (size_t i = 0; i < n; i++)
            ndr_put_wstring(w, jstr(json_array_get(v, i)));
        return;
    case MSRPC_VT_VECTOR | MSRPC_VT_VARIANT:
        ndr_put_u32(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            msrpc_pv_inline(w, elem_vt(prop, i), json_array_get(v, i));
        for (size_t i = 0; i < n; i++)
            msrpc_pv_deferred(w, elem_vt(prop, i), json_array_get(v, i), 0);
        return;
    default:
        return;
    }
}
