/* chunk.c - OSIRIS chunk parser, entry iterators and builder (format: chunk.h).
 *
 * Invariants: every length read from the bytes is compared with what is left ("n <= end - p")
 * before a slice is made, so a hostile length cannot move a pointer past the end; the
 * builder patches the header last, from what it actually appended, so counts, lengths and
 * the CRC always describe the bytes that are there.
 */
#include "streamproto/chunk.h"

/* sp_crc32: crc32.c */

sl_err sp_chunk_parse_header(const uint8_t *buf, size_t len, sp_chunk *c)
{
    memset(c, 0, sizeof *c);
    if (len < SP_CHUNK_HEADER_SIZE)
        return SL_ERR_SYNTAX;
    c->magic = buf[0] >> 4;
    c->version = buf[0] & 0x0F;
    if (c->magic != SP_CHUNK_MAGIC || c->version != SP_CHUNK_VERSION)
        return SL_ERR_FRAME;
    c->type = buf[1];
    c->num_entries = sl_get_u16(buf + 2);
    c->num_records = sl_get_u32(buf + 4);
    c->timestamp = (int64_t)sl_get_u64(buf + 8);
    c->epoch = sl_get_u64(buf + 16);
    c->first_offset = sl_get_u64(buf + 24);
    c->crc = sl_get_u32(buf + 32);
    c->data_len = sl_get_u32(buf + 36);
    c->trailer_len = sl_get_u32(buf + 40);
    c->bloom_size = buf[44];
    c->reserved = (uint32_t)buf[45] << 16 | (uint32_t)buf[46] << 8 | buf[47];
    return SL_OK;
}

sl_err sp_chunk_parse(const uint8_t *buf, size_t len, enum sp_chunk_layout layout, sp_chunk *c,
                      size_t *used)
{
    *used = 0;
    sl_err e = sp_chunk_parse_header(buf, len, c);
    if (e)
        return e;
    const uint8_t *p = buf + SP_CHUNK_HEADER_SIZE;
    uint64_t left = len - SP_CHUNK_HEADER_SIZE;
    if (layout == SP_CHUNK_LOG) {
        uint64_t need = (uint64_t)c->bloom_size + c->data_len + c->trailer_len;
        if (left < need)
            return SL_ERR_SYNTAX;
        c->bloom = p;
        c->data = p + c->bloom_size;
        c->trailer = c->data + c->data_len;
        *used = SP_CHUNK_HEADER_SIZE + (size_t)need;
        return SL_OK;
    }
    /* Deliver: the data, then the trailer or nothing, and nothing else. */
    if (left < c->data_len)
        return SL_ERR_SYNTAX;
    c->data = p;
    left -= c->data_len;
    if (left != 0) {
        if (left != c->trailer_len)
            return SL_ERR_SYNTAX;
        c->trailer = p + c->data_len;
    }
    *used = len;
    return SL_OK;
}

sl_err sp_chunk_check_crc(const sp_chunk *c)
{
    if (!c->data && c->data_len)
        return SL_ERR_SYNTAX;
    return sp_crc32(c->data, c->data_len) == c->crc ? SL_OK : SL_ERR_FRAME;
}

void sp_entry_iter_init(sp_entry_iter *it, const sp_chunk *c)
{
    it->p = c->data;
    it->end = c->data ? c->data + c->data_len : NULL;
}

sl_err sp_entry_next(sp_entry_iter *it, sp_entry *e, int *got)
{
    *got = 0;
    memset(e, 0, sizeof *e);
    if (it->p == it->end)
        return SL_OK;
    size_t left = (size_t)(it->end - it->p);
    const uint8_t *p = it->p;
    if (left < 4)
        return SL_ERR_SYNTAX;
    if ((p[0] & 0x80) == 0) {
        uint32_t n = sl_get_u32(p) & 0x7FFFFFFFu;
        if (n > left - 4)
            return SL_ERR_SYNTAX;
        e->num_records = 1;
        e->body = p + 4;
        e->len = n;
        it->p = p + 4 + n;
    } else {
        if (left < 11)
            return SL_ERR_SYNTAX;
        e->batch = 1;
        e->compression = (p[0] >> 4) & 0x07;
        e->reserved = p[0] & 0x0F;
        e->num_records = sl_get_u16(p + 1);
        e->uncompressed_len = sl_get_u32(p + 3);
        uint32_t n = sl_get_u32(p + 7);
        if (n > left - 11)
            return SL_ERR_SYNTAX;
        e->body = p + 11;
        e->len = n;
        it->p = p + 11 + n;
    }
    *got = 1;
    return SL_OK;
}

sl_err sp_chunk_check_entries(const sp_chunk *c)
{
    sp_entry_iter it;
    sp_entry e;
    int got;
    uint64_t entries = 0, records = 0;
    sp_entry_iter_init(&it, c);
    for (;;) {
        sl_err err = sp_entry_next(&it, &e, &got);
        if (err)
            return err;
        if (!got)
            break;
        entries++;
        records += e.num_records;
    }
    if (entries != c->num_entries)
        return SL_ERR_SYNTAX;
    if (c->type == SP_CHUNK_USER && records != c->num_records)
        return SL_ERR_SYNTAX;
    return SL_OK;
}

void sp_record_iter_init(sp_record_iter *it, const sp_entry *e)
{
    it->p = e->body;
    it->end = e->body ? e->body + e->len : NULL;
}

sl_err sp_record_next(sp_record_iter *it, const uint8_t **rec, uint32_t *len, int *got)
{
    *got = 0;
    *rec = NULL;
    *len = 0;
    if (it->p == it->end)
        return SL_OK;
    size_t left = (size_t)(it->end - it->p);
    if (left < 4)
        return SL_ERR_SYNTAX;
    uint32_t n = sl_get_u32(it->p);
    if (n > left - 4)
        return SL_ERR_SYNTAX;
    *rec = it->p + 4;
    *len = n;
    it->p += 4 + (size_t)n;
    *got = 1;
    return SL_OK;
}

void sp_chunk_begin(sp_chunk_builder *b, sl_buf *out, uint8_t type, int64_t timestamp,
                    uint64_t epoch, uint64_t first_offset)
{
    b->out = out;
    b->mark = sl_buf_unread(out);
    b->num_entries = 0;
    b->num_records = 0;
    b->err = SL_OK;
    sl_buf_put_u8(out, SP_CHUNK_MAGIC << 4 | SP_CHUNK_VERSION);
    sl_buf_put_u8(out, type);
    sl_buf_put_u16(out, 0); /* entries, patched */
    sl_buf_put_u32(out, 0); /* records, patched */
    sl_buf_put_u64(out, (uint64_t)timestamp);
    sl_buf_put_u64(out, epoch);
    sl_buf_put_u64(out, first_offset);
    sl_buf_put_u32(out, 0); /* crc, patched */
    sl_buf_put_u32(out, 0); /* data length, patched */
    sl_buf_put_u32(out, 0); /* trailer length */
    sl_buf_put_u32(out, 0); /* bloom size 0, reserved */
}

static int entry_room(sp_chunk_builder *b, uint32_t records)
{
    if (b->err)
        return 0;
    if (b->num_entries >= UINT16_MAX || records > UINT32_MAX - b->num_records) {
        b->err = SL_ERR_INVALID_PARAMETER;
        return 0;
    }
    return 1;
}

void sp_chunk_add_simple(sp_chunk_builder *b, const void *body, size_t len)
{
    if (!entry_room(b, 1))
        return;
    if (len > 0x7FFFFFFFu) {
        b->err = SL_ERR_INVALID_PARAMETER;
        return;
    }
    sl_buf_put_u32(b->out, (uint32_t)len);
    sl_buf_append(b->out, body, len);
    b->num_entries++;
    b->num_records++;
}

void sp_chunk_add_batch(sp_chunk_builder *b, uint8_t compression, uint16_t num_records,
                        uint32_t uncompressed_len, const void *body, size_t len)
{
    if (!entry_room(b, num_records))
        return;
    if (compression > 7 || len > UINT32_MAX) {
        b->err = SL_ERR_INVALID_PARAMETER;
        return;
    }
    sl_buf_put_u8(b->out, (uint8_t)(0x80 | compression << 4));
    sl_buf_put_u16(b->out, num_records);
    sl_buf_put_u32(b->out, uncompressed_len);
    sl_buf_put_u32(b->out, (uint32_t)len);
    sl_buf_append(b->out, body, len);
    b->num_entries++;
    b->num_records += num_records;
}

sl_err sp_chunk_end(sp_chunk_builder *b)
{
    sl_buf *out = b->out;
    size_t at = out->off + b->mark;
    size_t data_len = out->len - at - SP_CHUNK_HEADER_SIZE;
    if (!b->err && data_len > UINT32_MAX)
        b->err = SL_ERR_INVALID_PARAMETER;
    if (b->err) {
        out->len = at;
        return b->err;
    }
    uint8_t *h = out->data + at;
    h[2] = (uint8_t)(b->num_entries >> 8);
    h[3] = (uint8_t)b->num_entries;
    sl_buf_patch_u32(out, at + 4, b->num_records);
    sl_buf_patch_u32(out, at + 32, sp_crc32(h + SP_CHUNK_HEADER_SIZE, data_len));
    sl_buf_patch_u32(out, at + 36, (uint32_t)data_len);
    return SL_OK;
}

void sp_batch_put_record(sl_buf *body, const void *rec, uint32_t len)
{
    sl_buf_put_u32(body, len);
    sl_buf_append(body, rec, len);
}
