/* frame.h - the frame feeder: bytes in, frames out, no sockets.
 *
 * A frame is type:u8 channel:u16 size:u32 payload[size] end:u8(0xCE). The feeder works on
 * whatever bytes the caller has buffered and reports how many it consumed, so the caller
 * owns buffering and the feeder can be fuzzed on its own (rabbitmq-c's amqp_handle_input,
 * picohttpparser's phr_parse_request).
 */
#ifndef SL_AMQP_FRAME_H
#define SL_AMQP_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "amqp/wire.h"

enum {
    AMQP_FRAME_METHOD = 1,
    AMQP_FRAME_HEADER = 2,
    AMQP_FRAME_BODY = 3,
    AMQP_FRAME_HEARTBEAT = 8,
};
#define AMQP_FRAME_END 0xCE
#define AMQP_FRAME_OVERHEAD 8 /* 7 header octets + frame-end */
#define AMQP_FRAME_MIN_SIZE 4096

typedef struct amqp_frame {
    uint8_t type;
    uint16_t channel;
    uint32_t size;
    const uint8_t *payload; /* points into the caller's buffer */
} amqp_frame;

/* Frame feeder results (negative = fatal framing error, the connection must close 501). */
enum {
    AMQP_FEED_NEED_MORE = 0,
    AMQP_FEED_BAD_END = -1,   /* frame-end octet is not 0xCE */
    AMQP_FEED_BAD_TYPE = -2,  /* frame type not 1, 2, 3 or 8 */
    AMQP_FEED_TOO_LARGE = -3, /* size + 8 > frame_max (frame_max 0 = no limit) */
};

/* Parse one frame from buf[0..len). Returns the number of bytes the frame occupies (> 0)
 * and fills *f, AMQP_FEED_NEED_MORE (0) when more bytes are needed, or a negative error.
 * The size check happens on the 7-octet header, before waiting for the payload. */
int amqp_frame_parse(const uint8_t *buf, size_t len, uint32_t frame_max, amqp_frame *f);

/* The protocol header "AMQP\0\0\x09\x01". Returns 8 when buf starts with it, 0 when len < 8
 * and what is there is a prefix of it, -1 otherwise (answer with the header and close). */
int amqp_protocol_header_check(const uint8_t *buf, size_t len);
extern const uint8_t amqp_protocol_header[8];

/* Append a frame: header, payload, end. */
void amqp_frame_write(sl_buf *out, uint8_t type, uint16_t channel, const void *payload, size_t len);
/* Start a frame whose payload the caller appends; returns the offset to pass to _end. */
size_t amqp_frame_begin(sl_buf *out, uint8_t type, uint16_t channel);
void amqp_frame_end(sl_buf *out, size_t begin_offset);
void amqp_heartbeat_write(sl_buf *out);

#endif
