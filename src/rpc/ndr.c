/* ndr.c - NDR20 reader and writer (see ndr.h for the invariants). */
#include "rpc/ndr.h"

#include <string.h>

#include "core/utf16.h"

void rpc_ndr_rd_init(ndr_rd *r, const uint8_t *p, size_t len, int le)
{
    r->p = p;
    r->len = len;
    r->pos = 0;
    r->le = le;
    r->err = 0;
}

void rpc_ndr_rd_align(ndr_rd *r, size_t a)
{
    size_t pad = (a - r->pos % a) % a;
    if (r->err || pad > r->len - r->pos) {
        r->err = 1;
        return;
    }
    r->pos += pad;
}

static const uint8_t *take(ndr_rd *r, size_t n)
{
    if (r->err || n > r->len - r->pos) {
        r->err = 1;
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}

static uint64_t rd_int(ndr_rd *r, size_t n)
{
    rpc_ndr_rd_align(r, n);
    const uint8_t *p = take(r, n);
    if (!p)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[r->le ? i : n - 1 - i] << (8 * i);
    return v;
}

uint8_t rpc_ndr_u8(ndr_rd *r)
{
    const uint8_t *p = take(r, 1);
    return p ? *p : 0;
}
uint16_t rpc_ndr_u16(ndr_rd *r)
{
    return (uint16_t)rd_int(r, 2);
}
uint32_t rpc_ndr_u32(ndr_rd *r)
{
    return (uint32_t)rd_int(r, 4);
}
uint64_t rpc_ndr_u64(ndr_rd *r)
{
    return rd_int(r, 8);
}

void rpc_ndr_bytes(ndr_rd *r, void *out, size_t n)
{
    const uint8_t *p = take(r, n);
    if (p)
        memcpy(out, p, n);
    else
        memset(out, 0, n);
}

void rpc_ndr_wstring(ndr_rd *r, char *out, size_t outlen)
{
    out[0] = 0;
    uint32_t max = rpc_ndr_u32(r), off = rpc_ndr_u32(r), actual = rpc_ndr_u32(r);
    if (r->err || off != 0 || actual > max || actual == 0 || actual > (r->len - r->pos) / 2) {
        r->err = 1;
        return;
    }
    rpc_ndr_rd_align(r, 2);
    const uint8_t *p = take(r, 2 * (size_t)actual);
    if (!p)
        return;
    /* the units before the terminating NUL, by core/utf16.h's policy (no NUL inside, no
     * unpaired surrogate, a text that fits outlen); then the NUL itself */
    size_t n = 2 * ((size_t)actual - 1);
    long got =
        r->le ? sl_utf16le_to_utf8(p, n, out, outlen) : sl_utf16be_to_utf8(p, n, out, outlen);
    if (got < 0 || p[n] != 0 || p[n + 1] != 0) {
        r->err = 1;
        out[0] = 0;
    }
    /* NDR pads the referent to its 4-byte alignment only before the next item; leave it. */
}

void rpc_ndr_wr_init(ndr_wr *w, sl_buf *b)
{
    w->b = b;
    w->base = b->len;
    w->next_ref = 0x00020000; /* MIDL's first referent id */
}

void rpc_ndr_wr_align(ndr_wr *w, size_t a)
{
    size_t at = w->b->len - w->base, pad = (a - at % a) % a;
    if (pad) {
        memset(sl_buf_reserve(w->b, pad), 0, pad);
        w->b->len += pad;
    }
}

static void wr_int(ndr_wr *w, uint64_t v, size_t n)
{
    rpc_ndr_wr_align(w, n);
    uint8_t *p = sl_buf_reserve(w->b, n);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    w->b->len += n;
}

void rpc_ndr_put_u8(ndr_wr *w, uint8_t v)
{
    sl_buf_put_u8(w->b, v);
}
void rpc_ndr_put_u16(ndr_wr *w, uint16_t v)
{
    wr_int(w, v, 2);
}
void rpc_ndr_put_u32(ndr_wr *w, uint32_t v)
{
    wr_int(w, v, 4);
}
void rpc_ndr_put_u64(ndr_wr *w, uint64_t v)
{
    wr_int(w, v, 8);
}
void rpc_ndr_put_bytes(ndr_wr *w, const void *p, size_t n)
{
    if (n)
        sl_buf_append(w->b, p, n);
}
void rpc_ndr_put_ref(ndr_wr *w)
{
    rpc_ndr_put_u32(w, w->next_ref);
    w->next_ref += 4;
}

/* Next code point of UTF-8 s (n bytes) at *i: U+FFFD for a sequence core/utf16.h refuses. */
static uint32_t next_cp(const char *s, size_t n, size_t *i)
{
    long cp = sl_utf8_next((const uint8_t *)s, n, i);
    return cp < 0 ? 0xFFFD : (uint32_t)cp;
}

uint32_t rpc_ndr_wstring_units(const char *s)
{
    uint32_t n = 1;
    size_t len = strlen(s);
    for (size_t i = 0; i < len;)
        n += next_cp(s, len, &i) >= 0x10000 ? 2 : 1;
    return n;
}

void rpc_ndr_put_wstring(ndr_wr *w, const char *s)
{
    uint32_t n = rpc_ndr_wstring_units(s);
    rpc_ndr_put_u32(w, n);
    rpc_ndr_put_u32(w, 0);
    rpc_ndr_put_u32(w, n);
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        uint32_t cp = next_cp(s, len, &i);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            rpc_ndr_put_u16(w, (uint16_t)(0xD800 + (cp >> 10)));
            rpc_ndr_put_u16(w, (uint16_t)(0xDC00 + (cp & 0x3FF)));
        } else {
            rpc_ndr_put_u16(w, (uint16_t)cp);
        }
    }
    rpc_ndr_put_u16(w, 0);
}
