/* hold.c - scanning input held behind a blocked publish (see hold.h for the rules).
 *
 * Invariant: only whole frames that amqp_frame_parse accepts are looked at or moved; a
 * partial or bad frame ends the scan (the broker reports a bad frame when it reaches it in
 * order), so nothing here acts on bytes the connection would refuse.
 */
#include <string.h>

#include "amqp/frame.h"
#include "amqp/hold.h"
#include "amqp/method.h"
#include "amqp/methods_gen.h"
#include "amqp/wire.h"

static uint32_t method_id(const amqp_frame *f)
{
    if (f->type != AMQP_FRAME_METHOD || f->size < 4)
        return 0;
    return AMQP_ID(sl_get_u16(f->payload), sl_get_u16(f->payload + 2));
}

static int is_content(const amqp_frame *f)
{
    return f->type == AMQP_FRAME_HEADER || f->type == AMQP_FRAME_BODY ||
           method_id(f) == AMQP_BASIC_PUBLISH;
}

int amqp_hold_scan(const uint8_t *p, size_t len, uint32_t frame_max, amqp_hold_find *out)
{
    /* channels with a frame before the close that the close must not skip */
    uint8_t pinned[65536 / 8];
    memset(pinned, 0, sizeof pinned);
    memset(out, 0, sizeof *out);
    size_t off = 0;
    while (off < len) {
        amqp_frame f;
        int r = amqp_frame_parse(p + off, len - off, frame_max, &f);
        if (r <= 0)
            break;
        uint32_t id = method_id(&f);
        if (f.channel == 0 && id == AMQP_CONNECTION_CLOSE) {
            out->act = AMQP_HOLD_CONNECTION_CLOSE;
            out->at = off;
            out->len = (size_t)r;
            return out->act;
        }
        if (f.channel != 0) {
            uint8_t bit = (uint8_t)(1u << (f.channel & 7));
            if (id == AMQP_CHANNEL_CLOSE && !(pinned[f.channel >> 3] & bit)) {
                out->act = AMQP_HOLD_CHANNEL_CLOSE;
                out->at = off;
                out->len = (size_t)r;
                out->channel = f.channel;
                return out->act;
            }
            if (!is_content(&f))
                pinned[f.channel >> 3] |= bit;
        }
        off += (size_t)r;
    }
    return AMQP_HOLD_NONE;
}

size_t amqp_hold_drop_channel(uint8_t *p, size_t len, uint32_t frame_max, const amqp_hold_find *h)
{
    if (h->act != AMQP_HOLD_CHANNEL_CLOSE || h->at > len || h->len > len - h->at)
        return len;
    size_t in = 0, outp = 0;
    while (in < h->at) {
        amqp_frame f;
        int r = amqp_frame_parse(p + in, h->at - in, frame_max, &f);
        if (r <= 0)
            return len; /* cannot happen after amqp_hold_scan: leave the input as it is */
        if (f.channel != h->channel) {
            memmove(p + outp, p + in, (size_t)r);
            outp += (size_t)r;
        }
        in += (size_t)r;
    }
    in += h->len;
    memmove(p + outp, p + in, len - in);
    return outp + (len - in);
}
