/* wire.c - AMQP primitive readers and writers.
 *
 * Invariants: a reader never dereferences a byte at or beyond r->end, and every length check
 * is written as "n <= end - p" so a huge length from the wire cannot overflow a pointer sum.
 * After the first failure a reader is sticky (r->err stays set, reads return zeros), which
 * lets decoders read a whole argument list and test err once.
 */
#include "amqp/wire.h"

#include <string.h>

#include "amqp/table.h"

amqp_bytes amqp_cstr(const char *s)
{
    amqp_bytes b = {(const uint8_t *)s, s ? strlen(s) : 0};
    return b;
}

int amqp_bytes_eq(amqp_bytes b, const char *s)
{
    size_t n = strlen(s);
    return b.len == n && (n == 0 || memcmp(b.p, s, n) == 0);
}

int amqp_bytes_equal(amqp_bytes a, amqp_bytes b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

int amqp_utf8_valid(amqp_bytes b)
{
    if (b.len == 0)
        return 1; /* and b.p may be NULL */
    const uint8_t *p = b.p, *end = b.p + b.len;
    while (p < end) {
        uint8_t c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF)
            n = 1, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF)
            n = 2, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4)
            n = 3, cp = c & 0x07, min = 0x10000;
        else
            return 0; /* a continuation byte, C0/C1 (overlong), or F5..FF */
        if ((size_t)(end - p) <= n)
            return 0;
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        p += n + 1;
    }
    return 1;
}

amqp_bytes amqp_rd_longstr(amqp_reader *r)
{
    size_t n = amqp_rd_u32(r);
    return amqp_rd_raw(r, n);
}

amqp_bytes amqp_rd_table(amqp_reader *r)
{
    amqp_bytes t = amqp_rd_longstr(r);
    if (!r->err && amqp_table_validate(t) != 0) {
        r->err = 1;
        t.p = NULL;
        t.len = 0;
    }
    return t;
}

void amqp_wr_shortstr(sl_buf *b, amqp_bytes s)
{
    /* Truncating is better than emitting a frame the peer must reject: the caller's string
     * came from somewhere we control (names are validated at declare time). */
    size_t n = s.len > 255 ? 255 : s.len;
    sl_buf_put_u8(b, (uint8_t)n);
    sl_buf_append(b, s.p, n);
}

void amqp_wr_longstr(sl_buf *b, amqp_bytes s)
{
    sl_buf_put_u32(b, (uint32_t)s.len);
    sl_buf_append(b, s.p, s.len);
}

void amqp_wr_table(sl_buf *b, amqp_bytes content)
{
    amqp_wr_longstr(b, content);
}
