/* frame.h - RabbitMQ stream protocol (port 5552) framing: bytes in, frames out, no sockets.
 *
 * A frame is size:u32 followed by size bytes; the body starts with key:u16 version:u16, where
 * the key's top bit (0x8000) marks a response. "size" excludes its own 4 octets, and it is that
 * size that is compared with the frame_max negotiated by Tune (as RabbitMQ's parser does:
 * size <= frame_max, 0 = no limit). RabbitMQ enforces a low ceiling (8192) until Open
 * succeeds; a door does the same by calling sp_feeder_set_max.
 *
 * Two layers, as in src/amqp/frame.c: sp_frame_parse is a pure function over the caller's
 * bytes (never copies, never reads past len); sp_feeder owns a buffer, takes arbitrary
 * slices (one byte at a time or many frames at once) and yields whole frames. A frame's
 * size is checked as soon as its 4 octets are in, so a peer cannot make us buffer a frame we
 * will refuse.
 *
 * Errors (sl_err): SL_ERR_CONTENT_TOO_LARGE when size > frame_max (stream code
 * FRAME_TOO_LARGE), SL_ERR_FRAME when size < 4 (no room for key and version). Both are
 * sticky in the feeder: the stream cannot be resynchronised, the connection must close.
 */
#ifndef SL_STREAMPROTO_FRAME_H
#define SL_STREAMPROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"

#define SP_FRAME_PREFIX 4            /* the size field */
#define SP_FRAME_MIN_BODY 4          /* key + version */
#define SP_RESPONSE_FLAG 0x8000u     /* set on the key of a response */
#define SP_INITIAL_FRAME_MAX 8192    /* RabbitMQ's ceiling before Open succeeds */
#define SP_DEFAULT_FRAME_MAX 1048576 /* RabbitMQ's default offered in Tune (1 MiB) */

typedef struct sp_frame {
    uint16_t key;        /* command key without the response flag */
    uint8_t response;    /* 1 when the wire key had 0x8000 */
    uint16_t version;    /* command version */
    const uint8_t *body; /* key onwards (what sp_cmd_decode takes), points into the input */
    uint32_t size;       /* body length: the frame's size field */
} sp_frame;

/* Parse one frame from buf[0..len). SL_OK with *used > 0: *f is filled and the frame takes
 * *used bytes (4 + size). SL_OK with *used == 0: more bytes are needed. Otherwise an error,
 * reported from the size field alone. frame_max 0 = no limit. */
sl_err sp_frame_parse(const uint8_t *buf, size_t len, uint32_t frame_max, sp_frame *f,
                      size_t *used);

typedef struct sp_feeder {
    sl_buf in;
    uint32_t frame_max; /* 0 = no limit */
    size_t pending;     /* bytes of the frame last returned, dropped on the next call */
    sl_err err;         /* sticky */
} sp_feeder;

void sp_feeder_init(sp_feeder *fd, uint32_t frame_max);
void sp_feeder_free(sp_feeder *fd);
/* The limit for frames not yet returned (after Tune, after Open). */
void sp_feeder_set_max(sp_feeder *fd, uint32_t frame_max);
/* Append bytes read from the peer. */
void sp_feeder_push(sp_feeder *fd, const void *p, size_t n);
/* The next whole frame: SL_OK with *got = 1 and *f filled (f->body valid until the next
 * push or next call), SL_OK with *got = 0 when more bytes are needed, or the sticky error. */
sl_err sp_feeder_next(sp_feeder *fd, sp_frame *f, int *got);
/* Bytes buffered and not yet returned as frames. */
size_t sp_feeder_buffered(const sp_feeder *fd);

/* Frame writing: sp_frame_begin appends the size placeholder, key and version and returns a
 * mark relative to the buffer's read offset (sl_buf_reserve may compact); sp_frame_end
 * patches the size. */
size_t sp_frame_begin(sl_buf *out, uint16_t key, uint16_t version);
/* Patches the size. Returns SL_ERR_CONTENT_TOO_LARGE (and removes the frame from out) when
 * the body exceeds frame_max (0 = no limit) or UINT32_MAX. */
sl_err sp_frame_end(sl_buf *out, size_t mark, uint32_t frame_max);

#endif
