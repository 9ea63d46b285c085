/* le.h - little-endian readers and writers over byte pointers: the wire formats of MSMQ
 * (MS-MQQB), DCE/RPC and NTLM, the store's records and the cluster's mirror frames are
 * little endian. AMQP's big-endian readers are buf.h's sl_get_u16/32/64 and sl_buf_put_*.
 *
 * Every reader assembles the value byte by byte, so p needs no alignment and the result does
 * not depend on the host's byte order. The sl_buf_put_le* writers append at b->len.
 */
#ifndef SL_CORE_LE_H
#define SL_CORE_LE_H

#include <stdint.h>

#include "core/buf.h"

static inline uint16_t sl_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static inline uint32_t sl_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t sl_le64(const uint8_t *p)
{
    return (uint64_t)sl_le32(p) | (uint64_t)sl_le32(p + 4) << 32;
}

static inline void sl_put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void sl_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void sl_put_le64(uint8_t *p, uint64_t v)
{
    sl_put_le32(p, (uint32_t)v);
    sl_put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline void sl_buf_put_le16(sl_buf *b, uint16_t v)
{
    sl_put_le16(sl_buf_reserve(b, 2), v);
    b->len += 2;
}
static inline void sl_buf_put_le32(sl_buf *b, uint32_t v)
{
    sl_put_le32(sl_buf_reserve(b, 4), v);
    b->len += 4;
}
static inline void sl_buf_put_le64(sl_buf *b, uint64_t v)
{
    sl_put_le64(sl_buf_reserve(b, 8), v);
    b->len += 8;
}

#endif
