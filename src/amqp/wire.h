/* wire.h - AMQP 0-9-1 primitive types: bounds-checked readers over a frame payload and
 * writers that append to an sl_buf.
 *
 * Readers never read past `end`; on a short or malformed input they set r->err and return
 * zero values, so a decoder can read all fields and check err once at the end. Strings are
 * returned as slices pointing into the input (no copies, no allocation).
 */
#ifndef SL_AMQP_WIRE_H
#define SL_AMQP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

typedef struct amqp_bytes {
    const uint8_t *p;
    size_t len;
} amqp_bytes;

#define AMQP_BYTES(s) ((amqp_bytes){(const uint8_t *)(s), sizeof(s) - 1})
amqp_bytes amqp_cstr(const char *s);
/* 1 when b equals the NUL-terminated string s. */
int amqp_bytes_eq(amqp_bytes b, const char *s);
int amqp_bytes_equal(amqp_bytes a, amqp_bytes b);
/* 1 when b is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
 * U+10FFFF), as RabbitMQ requires of names; an empty string is. */
int amqp_utf8_valid(amqp_bytes b);

typedef struct amqp_reader {
    const uint8_t *p, *end;
    int err; /* set when a read ran past end or a value was malformed */
} amqp_reader;

static inline amqp_reader amqp_reader_make(const uint8_t *p, size_t len)
{
    amqp_reader r = {p, p ? p + len : p, 0}; /* NULL + 0 is undefined behaviour in C */
    return r;
}
/* The readers are inline: every field of every frame read goes through them, and as calls
 * they were about 6% of the instructions of a publish and its delivery (callgrind). Same
 * invariants as wire.c's: no byte at or past end is read, and errors are sticky. */

/* Returns a pointer to n readable bytes and advances, or NULL (and sets err). */
static inline const uint8_t *amqp_rd_take(amqp_reader *r, size_t n)
{
    if (r->err)
        return NULL;
    if (n > (size_t)(r->end - r->p)) {
        r->err = 1;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

static inline uint8_t amqp_rd_u8(amqp_reader *r)
{
    const uint8_t *p = amqp_rd_take(r, 1);
    return p ? p[0] : 0;
}

static inline uint16_t amqp_rd_u16(amqp_reader *r)
{
    const uint8_t *p = amqp_rd_take(r, 2);
    return p ? sl_get_u16(p) : 0;
}

static inline uint32_t amqp_rd_u32(amqp_reader *r)
{
    const uint8_t *p = amqp_rd_take(r, 4);
    return p ? sl_get_u32(p) : 0;
}

static inline uint64_t amqp_rd_u64(amqp_reader *r)
{
    const uint8_t *p = amqp_rd_take(r, 8);
    return p ? sl_get_u64(p) : 0;
}

static inline amqp_bytes amqp_rd_raw(amqp_reader *r, size_t n)
{
    amqp_bytes b = {NULL, 0};
    const uint8_t *p = amqp_rd_take(r, n);
    if (p) {
        b.p = p;
        b.len = n;
    }
    return b;
}

static inline amqp_bytes amqp_rd_shortstr(amqp_reader *r)
{
    size_t n = amqp_rd_u8(r);
    return amqp_rd_raw(r, n);
}

amqp_bytes amqp_rd_longstr(amqp_reader *r);
/* A field table: returns the table's content (without its u32 length prefix) after
 * validating it with amqp_table_validate; sets err if it does not validate. */
amqp_bytes amqp_rd_table(amqp_reader *r);

void amqp_wr_shortstr(sl_buf *b, amqp_bytes s); /* truncates at 255 */
void amqp_wr_longstr(sl_buf *b, amqp_bytes s);
/* A table whose content (without length prefix) is already encoded. */
void amqp_wr_table(sl_buf *b, amqp_bytes content);

#endif
