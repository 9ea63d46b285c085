/* fuzz_hold.c - libFuzzer target for amqp/hold.c, the scan of input held behind a blocked
 * publish.
 *
 * Input layout: two octets choose frame_max (big-endian u16, 0 = unlimited), the rest is the
 * held input. Checks, beyond ASan/UBSan: a close found is a whole frame inside the input, of
 * the kind reported; dropping a channel's frames keeps what follows the close byte for byte
 * and shortens the input by at least the close.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp/frame.h"
#include "amqp/hold.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint32_t frame_max = (uint32_t)data[0] << 8 | data[1];
    data += 2;
    size -= 2;
    amqp_hold_find h;
    int act = amqp_hold_scan(data, size, frame_max, &h);
    CHECK(act == h.act);
    if (act == AMQP_HOLD_NONE)
        return 0;
    CHECK(h.at < size && h.len <= size - h.at);
    amqp_frame f;
    CHECK(amqp_frame_parse(data + h.at, size - h.at, frame_max, &f) == (int)h.len);
    CHECK(f.type == AMQP_FRAME_METHOD);
    CHECK(act == AMQP_HOLD_CONNECTION_CLOSE ? f.channel == 0 : f.channel == h.channel);
    if (act != AMQP_HOLD_CHANNEL_CLOSE)
        return 0;
    uint8_t *copy = malloc(size);
    memcpy(copy, data, size);
    size_t n = amqp_hold_drop_channel(copy, size, frame_max, &h);
    size_t tail = size - h.at - h.len;
    CHECK(n + h.len <= size && n >= tail);
    CHECK(memcmp(copy + n - tail, data + h.at + h.len, tail) == 0);
    free(copy);
    return 0;
}
