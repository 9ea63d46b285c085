/* ndr.h - NDR20 (DCE 1.1 chapter 14) marshalling helpers for the stubs of the MSMQ RPC
 * interfaces: a bounded reader over a request's stub and a growing writer for a response's.
 *
 * Reader invariant: pos <= len, and every read is checked against len; the first short or
 * malformed read sets err and every later one returns zeroes, so a stub decoder reads its
 * whole parameter list and checks err once at the end. Alignment is relative to the start
 * of the stub (which the PDU places at an 8-byte boundary). Integers follow the caller's
 * data representation (little or big endian, from the PDU's drep).
 *
 * Writer: always little endian (our drep says so); pointers are written as non-zero
 * referent ids in order, as MIDL does for [unique] and embedded pointers.
 */
#ifndef SL_RPC_NDR_H
#define SL_RPC_NDR_H
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

typedef struct ndr_rd {
    const uint8_t *p;
    size_t len, pos;
    int le;  /* little-endian integers */
    int err; /* a read ran past the end or found an invalid value */
} ndr_rd;

void rpc_ndr_rd_init(ndr_rd *r, const uint8_t *p, size_t len, int le);
void rpc_ndr_rd_align(ndr_rd *r, size_t a);
uint8_t rpc_ndr_u8(ndr_rd *r);
uint16_t rpc_ndr_u16(ndr_rd *r);
uint32_t rpc_ndr_u32(ndr_rd *r);
uint64_t rpc_ndr_u64(ndr_rd *r);
/* 16 bytes as they are on the wire (a GUID's fields keep the sender's byte order). */
void rpc_ndr_bytes(ndr_rd *r, void *out, size_t n);
/* A conformant varying [string] wchar_t (max count, offset, actual count, UTF-16 units with
 * the terminating NUL) as UTF-8 into out (NUL-terminated). Unpaired surrogates, an offset
 * other than 0, actual > max, no NUL at the end or a text longer than outlen set err. */
void rpc_ndr_wstring(ndr_rd *r, char *out, size_t outlen);
/* A full/unique pointer's referent id: 0 is NULL. */
static inline uint32_t ndr_ptr(ndr_rd *r)
{
    return rpc_ndr_u32(r);
}

typedef struct ndr_wr {
    sl_buf *b;
    size_t base; /* where the stub starts in b (alignment is relative to it) */
    uint32_t next_ref;
} ndr_wr;

void rpc_ndr_wr_init(ndr_wr *w, sl_buf *b);
void rpc_ndr_wr_align(ndr_wr *w, size_t a);
void rpc_ndr_put_u8(ndr_wr *w, uint8_t v);
void rpc_ndr_put_u16(ndr_wr *w, uint16_t v);
void rpc_ndr_put_u32(ndr_wr *w, uint32_t v);
void rpc_ndr_put_u64(ndr_wr *w, uint64_t v);
void rpc_ndr_put_bytes(ndr_wr *w, const void *p, size_t n);
/* A non-NULL pointer's referent id (the referent is written later, where NDR defers it). */
void rpc_ndr_put_ref(ndr_wr *w);
/* The deferred referent of a [string] wchar_t*: max count, offset 0, actual count, UTF-16LE
 * with the NUL. s is UTF-8; a sequence core/utf16.h refuses becomes U+FFFD. */
void rpc_ndr_put_wstring(ndr_wr *w, const char *s);
/* UTF-16 units (with the NUL) that rpc_ndr_put_wstring writes for s. */
uint32_t rpc_ndr_wstring_units(const char *s);

#endif
