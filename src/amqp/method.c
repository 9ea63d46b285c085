/* method.c - the hand-written part of the method codec: content headers and basic
 * properties. The method switches themselves are generated (methods_gen.c).
 *
 * Decoded properties point into the caller's bytes and are valid as long as those are; the
 * headers table is validated before it is handed out, so later lookups cannot fail. Only
 * the basic class's 14 properties exist, so a single flags word is ever valid: a set
 * continuation bit (bit 0) is a syntax error rather than something to skip.
 */
#include "amqp/method.h"

#include <string.h>

#include "amqp/frame.h"
#include "amqp/table.h"

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

static inline uint8_t *put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    return p + 2;
}

static inline uint8_t *put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}

static inline uint8_t *put64(uint8_t *p, uint64_t v)
{
    return put32(put32(p, (uint32_t)(v >> 32)), (uint32_t)v);
}

static inline uint8_t *put_shortstr(uint8_t *p, amqp_bytes s, size_t n)
{
    *p++ = (uint8_t)n;
    memcpy(p, s.p, n);
    return p + n;
}

static inline uint8_t *frame_head(uint8_t *p, uint8_t type, uint16_t ch, uint32_t size)
{
    *p++ = type;
    p = put16(p, ch);
    return put32(p, size);
}

/* The delivery's frames; with leave_body (one body frame only) the body frame's bytes stop
 * after its head, for the caller to send the body from where it lies, then the frame end. */
static void deliver_write(sl_buf *out, uint16_t ch, amqp_bytes consumer_tag, uint64_t delivery_tag,
                          int redelivered, amqp_bytes exchange, amqp_bytes routing_key,
                          const uint8_t *props, size_t props_len, const uint8_t *body,
                          uint64_t body_len, size_t max_payload, int leave_body)
{
    size_t ct = consumer_tag.len > 255 ? 255 : consumer_tag.len;
    size_t ex = exchange.len > 255 ? 255 : exchange.len;
    size_t rk = routing_key.len > 255 ? 255 : routing_key.len;
    uint32_t method_size = (uint32_t)(4 + 1 + ct + 8 + 1 + 1 + ex + 1 + rk);
    uint32_t header_size = (uint32_t)(2 + 2 + 8 + props_len);
    if (max_payload == 0)
        max_payload = body_len ? (size_t)body_len : 1;
    /* The common case, a body in one frame, goes in the same reservation. */
    int one_body = body_len > 0 && body_len <= max_payload;
    size_t total = AMQP_FRAME_OVERHEAD + method_size + AMQP_FRAME_OVERHEAD + header_size +
                   (one_body ? AMQP_FRAME_OVERHEAD + (size_t)body_len : 0);

    uint8_t *p = sl_buf_reserve(out, total), *start = p;
    p = frame_head(p, AMQP_FRAME_METHOD, ch, method_size);
    p = put32(p, AMQP_BASIC_DELIVER);
    p = put_shortstr(p, consumer_tag, ct);
    p = put64(p, delivery_tag);
    *p++ = redelivered ? 1 : 0;
    p = put_shortstr(p, exchange, ex);
    p = put_shortstr(p, routing_key, rk);
    *p++ = AMQP_FRAME_END;

    p = frame_head(p, AMQP_FRAME_HEADER, ch, header_size);
    p = put16(p, 60);
    p = put16(p, 0);
    p = put64(p, body_len);
    memcpy(p, props, props_len);
    p += props_len;
    *p++ = AMQP_FRAME_END;

    if (one_body) {
        p = frame_head(p, AMQP_FRAME_BODY, ch, (uint32_t)body_len);
        if (!leave_body) {
            memcpy(p, body, (size_t)body_len);
            p += body_len;
            *p++ = AMQP_FRAME_END;
        }
    }
    out->len += (size_t)(p - start);
    if (one_body)
        return;
    for (uint64_t off = 0; off < body_len; off += max_payload) {
        size_t n = body_len - off < max_payload ? (size_t)(body_len - off) : max_payload;
        amqp_frame_write(out, AMQP_FRAME_BODY, ch, body + off, n);
    }
}

void amqp_deliver_write(sl_buf *out, uint16_t ch, amqp_bytes consumer_tag, uint64_t delivery_tag,
                        int redelivered, amqp_bytes exchange, amqp_bytes routing_key,
                        const uint8_t *props, size_t props_len, const uint8_t *body,
                        uint64_t body_len, size_t max_payload)
{
    deliver_write(out, ch, consumer_tag, delivery_tag, redelivered, exchange, routing_key, props,
                  props_len, body, body_len, max_payload, 0);
}

int amqp_deliver_write_head(sl_buf *out, uint16_t ch, amqp_bytes consumer_tag,
                            uint64_t delivery_tag, int redelivered, amqp_bytes exchange,
                            amqp_bytes routing_key, const uint8_t *props, size_t props_len,
                            uint64_t body_len, size_t max_payload)
{
    if (body_len == 0 || (max_payload && body_len > max_payload))
        return -1;
    deliver_write(out, ch, consumer_tag, delivery_tag, redelivered, exchange, routing_key, props,
                  props_len, NULL, body_len, max_payload, 1);
    return 0;
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

void amqp_props_set_long_header(const uint8_t *props, size_t len, const char *key, int64_t v,
                                sl_buf *out)
{
    amqp_basic_props bp;
    if (!len || amqp_props_decode(props, len, &bp) != 0)
        memset(&bp, 0, sizeof bp);
    amqp_bytes headers = (bp.flags & AMQP_P_HEADERS) ? bp.headers : (amqp_bytes){0};
    sl_buf hb;
    sl_buf_init(&hb);
    size_t mark = amqp_tbl_begin(&hb);
    amqp_table_iter it;
    amqp_bytes k;
    amqp_value val;
    amqp_table_iter_init(&it, headers);
    while (amqp_table_next(&it, &k, &val))
        if (!amqp_bytes_eq(k, key))
            amqp_tbl_put_value(&hb, k, &val);
    amqp_tbl_put_long(&hb, key, v);
    amqp_tbl_end(&hb, mark);
    bp.headers = (amqp_bytes){sl_buf_head(&hb) + 4, sl_buf_unread(&hb) - 4};
    bp.flags |= AMQP_P_HEADERS;
    amqp_props_encode(out, &bp);
    sl_buf_free(&hb);
}
