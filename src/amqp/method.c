/* method.c - the hand-written part of the method codec: content headers and basic
 * properties. The method switches themselves are generated (methods_gen.c).
 *
 * Decoded properties point into the caller's bytes and are valid as long as those are; the
 * headers table is validated before it is handed out, so later lookups cannot fail. Only
 * the basic class's 14 properties exist, so a single flags word is ever valid: a set
 * continuation bit (bit 0) is a syntax error rather than something to skip.
 */
#include "method.h"

#include <string.h>

#include "frame.h"

#define PROPS_KNOWN 0xFFFCu /* bits 15..2: the 14 basic properties */

int amqp_content_header_parse(const uint8_t *payload, size_t len, amqp_content_header *h)
{
    amqp_reader r = amqp_reader_make(payload, len);

    h->class_id = amqp_rd_u16(&r);
    (void)amqp_rd_u16(&r); /* weight: always 0, ignored like RabbitMQ does */
    h->body_size = amqp_rd_u64(&r);
    if (r.err)
        return AMQP_DECODE_SYNTAX;
    h->props = r.p;
    h->props_len = (size_t)(r.end - r.p);
    return 0;
}

int amqp_props_decode(const uint8_t *p, size_t len, amqp_basic_props *out)
{
    amqp_reader r = amqp_reader_make(p, len);

    memset(out, 0, sizeof *out);
    uint16_t flags = amqp_rd_u16(&r);
    if (r.err || (flags & 1))
        return AMQP_DECODE_SYNTAX;
    /* Bit 1 names no property; it is ignored (and dropped on re-encode) rather than
     * rejected, to stay lenient with clients as RabbitMQ is. */
    out->flags = flags & PROPS_KNOWN;
    if (flags & AMQP_P_CONTENT_TYPE)
        out->content_type = amqp_rd_shortstr(&r);
    if (flags & AMQP_P_CONTENT_ENCODING)
        out->content_encoding = amqp_rd_shortstr(&r);
    if (flags & AMQP_P_HEADERS)
        out->headers = amqp_rd_table(&r);
    if (flags & AMQP_P_DELIVERY_MODE)
        out->delivery_mode = amqp_rd_u8(&r);
    if (flags & AMQP_P_PRIORITY)
        out->priority = amqp_rd_u8(&r);
    if (flags & AMQP_P_CORRELATION_ID)
        out->correlation_id = amqp_rd_shortstr(&r);
    if (flags & AMQP_P_REPLY_TO)
        out->reply_to = amqp_rd_shortstr(&r);
    if (flags & AMQP_P_EXPIRATION)
        out->expiration = amqp_rd_shortstr(&r);
    if (flags & AMQP_P_MESSAGE_ID)
        out->message_id = amqp_rd_shortstr(&r);
    if (flags & AMQP_P_TIMESTAMP)
        out->timestamp = amqp_rd_u64(&r);
    if (flags & AMQP_P_TYPE)
        out->type = amqp_rd_shortstr(&r);
    if (flags & AMQP_P_USER_ID)
        out->user_id = amqp_rd_shortstr(&r);
    if (flags & AMQP_P_APP_ID)
        out->app_id = amqp_rd_shortstr(&r);
    if (flags & AMQP_P_CLUSTER_ID)
        out->cluster_id = amqp_rd_shortstr(&r);
    return r.err ? AMQP_DECODE_SYNTAX : 0;
}

void amqp_props_encode(sl_buf *out, const amqp_basic_props *props)
{
    uint16_t flags = props->flags & PROPS_KNOWN;

    sl_buf_put_u16(out, flags);
    if (flags & AMQP_P_CONTENT_TYPE)
        amqp_wr_shortstr(out, props->content_type);
    if (flags & AMQP_P_CONTENT_ENCODING)
        amqp_wr_shortstr(out, props->content_encoding);
    if (flags & AMQP_P_HEADERS)
        amqp_wr_table(out, props->headers);
    if (flags & AMQP_P_DELIVERY_MODE)
        sl_buf_put_u8(out, props->delivery_mode);
    if (flags & AMQP_P_PRIORITY)
        sl_buf_put_u8(out, props->priority);
    if (flags & AMQP_P_CORRELATION_ID)
        amqp_wr_shortstr(out, props->correlation_id);
    if (flags & AMQP_P_REPLY_TO)
        amqp_wr_shortstr(out, props->reply_to);
    if (flags & AMQP_P_EXPIRATION)
        amqp_wr_shortstr(out, props->expiration);
    if (flags & AMQP_P_MESSAGE_ID)
        amqp_wr_shortstr(out, props->message_id);
    if (flags & AMQP_P_TIMESTAMP)
        sl_buf_put_u64(out, props->timestamp);
    if (flags & AMQP_P_TYPE)
        amqp_wr_shortstr(out, props->type);
    if (flags & AMQP_P_USER_ID)
        amqp_wr_shortstr(out, props->user_id);
    if (flags & AMQP_P_APP_ID)
        amqp_wr_shortstr(out, props->app_id);
    if (flags & AMQP_P_CLUSTER_ID)
        amqp_wr_shortstr(out, props->cluster_id);
}

void amqp_content_header_write(sl_buf *out, uint16_t ch, uint64_t body_size, const uint8_t *props,
                               size_t props_len)
{
    size_t mark = amqp_frame_begin(out, AMQP_FRAME_HEADER, ch);
    sl_buf_put_u16(out, 60);
    sl_buf_put_u16(out, 0);
    sl_buf_put_u64(out, body_size);
    sl_buf_append(out, props, props_len);
    amqp_frame_end(out, mark);
}
