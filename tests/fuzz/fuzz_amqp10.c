/* fuzz_amqp10.c - libFuzzer target for the AMQP 1.0 message reader (src/amqp/amqp10.c): what a
 * stream protocol client publishes, read into AMQP 0-9-1 properties and a body when an AMQP
 * 0-9-1 consumer gets it.
 *
 * Beyond "no crash, no over-read, no leak" (ASan/UBSan), it checks that an accepted message
 * gives properties that encode and decode again as AMQP 0-9-1 properties (what the door then
 * sends), a headers table that validates, and a body that lies inside the input or the body
 * buffer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp/amqp10.h"
#include "amqp/method.h"
#include "amqp/table.h"
#include "core/buf.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    amqp_basic_props bp;
    sl_buf hdrs, body, enc;
    sl_buf_init(&hdrs);
    sl_buf_init(&body);
    sl_buf_init(&enc);
    memset(&bp, 0, sizeof bp);
    if (amqp10_to_091(data, size, &bp, &hdrs, &body) == 0) {
        if (bp.flags & AMQP_P_HEADERS)
            CHECK(amqp_table_validate(bp.headers) == 0);
        amqp_props_encode(&enc, &bp);
        amqp_basic_props again;
        CHECK(amqp_props_decode(sl_buf_head(&enc), sl_buf_unread(&enc), &again) == 0);
        CHECK(again.flags == (bp.flags & again.flags));
    }
    sl_buf_free(&hdrs);
    sl_buf_free(&body);
    sl_buf_free(&enc);
    return 0;
}
