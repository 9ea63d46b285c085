/* buf.h - growable byte buffer with a read offset.
 *
 * Invariant: off <= len <= cap. Bytes [off, len) are unread; writers append at len.
 * Allocation failure aborts (sl_xmalloc policy, as redis does): a broker that cannot get
 * a few bytes for a buffer cannot make progress anyway, and every caller stays simple.
 */
#ifndef SL_CORE_BUF_H
#define SL_CORE_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/hex.h" /* sl_hex, declared here before hex.h existed */

typedef struct sl_buf {
    uint8_t *data;
    size_t off, len, cap;
} sl_buf;

void sl_buf_init(sl_buf *b);
void sl_buf_free(sl_buf *b);
/* Hand the allocation over (it is freed with free() by its new owner); b is empty after. */
uint8_t *sl_buf_detach(sl_buf *b);
/* Bytes held by every buffer of the process (connection input and output, replies being
 * built, store write buffers): the memory alarm counts them beside the messages. */
size_t sl_buf_total(void);
/* Make room for n more bytes at the end; returns a pointer to them (len is not moved). The
 * check is inline: every field of every frame written goes through here. n > 0: on a buffer
 * never allocated, reserving nothing would be NULL + 0 (sl_buf_append skips n == 0 first). */
uint8_t *sl_buf_reserve_slow(sl_buf *b, size_t n);
static inline uint8_t *sl_buf_reserve(sl_buf *b, size_t n)
{
    if (b->cap - b->len >= n)
        return b->data + b->len;
    return sl_buf_reserve_slow(b, n);
}
void sl_buf_append(sl_buf *b, const void *p, size_t n);
/* Drop n unread bytes from the front; resets to empty when all are read. */
void sl_buf_consume(sl_buf *b, size_t n);
/* Move unread bytes to the start of the allocation. */
void sl_buf_compact(sl_buf *b);
static inline size_t sl_buf_unread(const sl_buf *b)
{
    return b->len - b->off;
}
static inline uint8_t *sl_buf_head(const sl_buf *b)
{
    return b->data ? b->data + b->off : NULL; /* (NULL, 0) for an empty buffer, never NULL + 0 */
}

static inline void sl_buf_put_u8(sl_buf *b, uint8_t v)
{
    *sl_buf_reserve(b, 1) = v;
    b->len += 1;
}
static inline void sl_buf_put_u16(sl_buf *b, uint16_t v)
{
    uint8_t *p = sl_buf_reserve(b, 2);
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    b->len += 2;
}
static inline void sl_buf_put_u32(sl_buf *b, uint32_t v)
{
    uint8_t *p = sl_buf_reserve(b, 4);
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    b->len += 4;
}
static inline void sl_buf_put_u64(sl_buf *b, uint64_t v)
{
    sl_buf_put_u32(b, (uint32_t)(v >> 32));
    sl_buf_put_u32(b, (uint32_t)v);
}
/* Overwrite a big-endian u32 at absolute offset at (used to patch lengths). */
static inline void sl_buf_patch_u32(sl_buf *b, size_t at, uint32_t v)
{
    uint8_t *p = b->data + at;
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline uint16_t sl_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}
static inline uint32_t sl_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t sl_get_u64(const uint8_t *p)
{
    return (uint64_t)sl_get_u32(p) << 32 | sl_get_u32(p + 4);
}

#endif
