/* hold.h - what a blocked connection may still act on in the input held behind a publish.
 *
 * A connection blocked by a resource alarm stops at the first basic.publish (or durable
 * declare) it reads; the frames after it are kept, unread by the broker, in a bounded buffer.
 * Among them a connection.close is acted on at once (everything before it is given up, as if
 * the client had gone away: those publishes were never confirmed), and so is a channel.close
 * when the only frames of that channel before it are content (basic.publish, content header
 * and body frames), which the close gives up. Anything else waits for the alarm to clear:
 * acting on it out of order could, e.g., commit a transaction without a publish held before
 * it. Sans-I/O: bytes in, a decision out.
 */
#ifndef SL_AMQP_HOLD_H
#define SL_AMQP_HOLD_H

#include <stddef.h>
#include <stdint.h>

enum amqp_hold_act {
    AMQP_HOLD_NONE = 0,
    AMQP_HOLD_CONNECTION_CLOSE, /* at: offset of a connection.close frame */
    AMQP_HOLD_CHANNEL_CLOSE,    /* at, len: a channel.close on channel */
};

typedef struct amqp_hold_find {
    int act;          /* enum amqp_hold_act */
    size_t at, len;   /* the close frame: offset and whole length */
    uint16_t channel; /* AMQP_HOLD_CHANNEL_CLOSE: its channel */
} amqp_hold_find;

/* Look through the complete frames of p[0, len) (the held frame first) for a close that
 * may be acted on now. Returns the action (also in *out). */
int amqp_hold_scan(const uint8_t *p, size_t len, uint32_t frame_max, amqp_hold_find *out);

/* After AMQP_HOLD_CHANNEL_CLOSE: remove from p[0, len) the frames of h->channel before the
 * close, and the close itself, keeping the order of the rest. Returns the new length. */
size_t amqp_hold_drop_channel(uint8_t *p, size_t len, uint32_t frame_max, const amqp_hold_find *h);

#endif
