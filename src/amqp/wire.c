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
#include "core/utf16.h"

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
    return b.len == 0 || sl_utf8_valid(b.p, b.len); /* b.p may be NULL when empty */
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
