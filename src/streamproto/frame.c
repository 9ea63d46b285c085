/* frame.c - the stream protocol's frame parser, feeder and frame writers.
 *
 * Invariants: sp_frame_parse reads nothing at or past buf + len and compares sizes in 64
 * bits (4 + size cannot overflow); the feeder never holds more than one frame's worth of
 * bytes beyond what the peer sent in one push plus frame_max, because the size check comes
 * before waiting for the body; a frame handed out stays valid until the next push or next
 * call, which is when its bytes are dropped (pending).
 */
#include "streamproto/frame.h"

#include <string.h>

sl_err sp_frame_parse(const uint8_t *buf, size_t len, uint32_t frame_max, sp_frame *f, size_t *used)
{
    *used = 0;
    if (len < SP_FRAME_PREFIX)
        return SL_OK;
    uint32_t size = sl_get_u32(buf);
    if (frame_max != 0 && size > frame_max)
        return SL_ERR_CONTENT_TOO_LARGE;
    if (size < SP_FRAME_MIN_BODY)
        return SL_ERR_FRAME;
    uint64_t total = (uint64_t)size + SP_FRAME_PREFIX;
    if ((uint64_t)len < total)
        return SL_OK;
    uint16_t key = sl_get_u16(buf + 4);
    f->key = key & (uint16_t)~SP_RESPONSE_FLAG;
    f->response = (key & SP_RESPONSE_FLAG) != 0;
    f->version = sl_get_u16(buf + 6);
    f->body = buf + SP_FRAME_PREFIX;
    f->size = size;
    *used = (size_t)total;
    return SL_OK;
}

void sp_feeder_init(sp_feeder *fd, uint32_t frame_max)
{
    memset(fd, 0, sizeof *fd);
    sl_buf_init(&fd->in);
    fd->frame_max = frame_max;
}

void sp_feeder_free(sp_feeder *fd)
{
    sl_buf_free(&fd->in);
}

void sp_feeder_set_max(sp_feeder *fd, uint32_t frame_max)
{
    fd->frame_max = frame_max;
}

static void drop_pending(sp_feeder *fd)
{
    if (fd->pending) {
        sl_buf_consume(&fd->in, fd->pending);
        fd->pending = 0;
    }
}

void sp_feeder_push(sp_feeder *fd, const void *p, size_t n)
{
    drop_pending(fd);
    if (fd->err || n == 0)
        return; /* after a fatal error the bytes are of no use */
    sl_buf_append(&fd->in, p, n);
}

sl_err sp_feeder_next(sp_feeder *fd, sp_frame *f, int *got)
{
    *got = 0;
    drop_pending(fd);
    if (fd->err)
        return fd->err;
    size_t used;
    sl_err e =
        sp_frame_parse(sl_buf_head(&fd->in), sl_buf_unread(&fd->in), fd->frame_max, f, &used);
    if (e) {
        fd->err = e;
        return e;
    }
    if (used) {
        fd->pending = used;
        *got = 1;
    }
    return SL_OK;
}

size_t sp_feeder_buffered(const sp_feeder *fd)
{
    return sl_buf_unread(&fd->in) - fd->pending;
}

size_t sp_frame_begin(sl_buf *out, uint16_t key, uint16_t version)
{
    size_t rel = sl_buf_unread(out);
    sl_buf_put_u32(out, 0); /* patched by sp_frame_end */
    sl_buf_put_u16(out, key);
    sl_buf_put_u16(out, version);
    return rel;
}

sl_err sp_frame_end(sl_buf *out, size_t mark, uint32_t frame_max)
{
    size_t at = out->off + mark;
    size_t size = out->len - at - SP_FRAME_PREFIX;
    if (size > UINT32_MAX || (frame_max != 0 && size > frame_max)) {
        out->len = at;
        return SL_ERR_CONTENT_TOO_LARGE;
    }
    sl_buf_patch_u32(out, at, (uint32_t)size);
    return SL_OK;
}
