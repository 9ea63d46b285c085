/* frame.c - the frame feeder and frame writers.
 *
 * The feeder is a pure function over the caller's bytes: it never copies, never allocates
 * and never reads beyond len. Errors that make the stream unparseable (bad type, oversize,
 * bad frame-end) are reported as early as the bytes allow, so a peer cannot make us buffer
 * a frame we will refuse anyway.
 *
 * Offsets returned by amqp_frame_begin are relative to the buffer's read offset, because
 * sl_buf_reserve may compact the buffer (moving unread bytes to the front) while the payload
 * is being appended.
 */
#include "amqp/frame.h"

#include <string.h>

const uint8_t amqp_protocol_header[8] = {'A', 'M', 'Q', 'P', 0, 0, 9, 1};

int amqp_protocol_header_check(const uint8_t *buf, size_t len)
{
    size_t n = len < 8 ? len : 8;
    if (n > 0 && memcmp(buf, amqp_protocol_header, n) != 0)
        return -1;
    return len >= 8 ? 8 : 0;
}

static int type_ok(uint8_t t)
{
    return t == AMQP_FRAME_METHOD || t == AMQP_FRAME_HEADER || t == AMQP_FRAME_BODY ||
           t == AMQP_FRAME_HEARTBEAT;
}

int amqp_frame_parse(const uint8_t *buf, size_t len, uint32_t frame_max, amqp_frame *f)
{
    if (len < 1)
        return AMQP_FEED_NEED_MORE;
    /* The type octet alone tells us the stream is garbage (e.g. "HTTP/1.1"). */
    if (!type_ok(buf[0]))
        return AMQP_FEED_BAD_TYPE;
    if (len < 7)
        return AMQP_FEED_NEED_MORE;
    uint32_t size = sl_get_u32(buf + 3);
    /* Compare in 64 bits: size + 8 overflows uint32_t near UINT32_MAX. */
    uint64_t total = (uint64_t)size + AMQP_FRAME_OVERHEAD;
    if (frame_max != 0 && total > frame_max)
        return AMQP_FEED_TOO_LARGE;
    /* The return type is int: a frame that cannot be reported as a positive int is refused
     * even with no frame_max (no sane peer sends a 2 GiB frame). */
    if (total > (uint64_t)INT32_MAX)
        return AMQP_FEED_TOO_LARGE;
    if ((uint64_t)len < total)
        return AMQP_FEED_NEED_MORE;
    if (buf[total - 1] != AMQP_FRAME_END)
        return AMQP_FEED_BAD_END;
    f->type = buf[0];
    f->channel = sl_get_u16(buf + 1);
    f->size = size;
    f->payload = buf + 7;
    return (int)total;
}

size_t amqp_frame_begin(sl_buf *out, uint8_t type, uint16_t channel)
{
    size_t rel = sl_buf_unread(out);
    sl_buf_put_u8(out, type);
    sl_buf_put_u16(out, channel);
    sl_buf_put_u32(out, 0); /* patched by amqp_frame_end */
    return rel;
}

void amqp_frame_end(sl_buf *out, size_t begin_offset)
{
    size_t at = out->off + begin_offset;
    size_t size = out->len - at - 7;
    sl_buf_patch_u32(out, at + 3, (uint32_t)size);
    sl_buf_put_u8(out, AMQP_FRAME_END);
}

void amqp_frame_write(sl_buf *out, uint8_t type, uint16_t channel, const void *payload, size_t len)
{
    size_t mark = amqp_frame_begin(out, type, channel);
    sl_buf_append(out, payload, len);
    amqp_frame_end(out, mark);
}

void amqp_heartbeat_write(sl_buf *out)
{
    amqp_frame_write(out, AMQP_FRAME_HEARTBEAT, 0, NULL, 0);
}
