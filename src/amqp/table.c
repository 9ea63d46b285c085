/* table.c - AMQP field tables and arrays in wire form (RabbitMQ's tag set).
 *
 * Tables are never converted to a tree: they stay as bytes in the frame (or in a stored
 * message) and are walked on demand. amqp_table_validate is the gate: once content passed
 * it, iteration cannot fail. Validation is iterative with an explicit stack of nested ends,
 * so a hostile peer cannot drive recursion depth; nesting is capped at AMQP_TABLE_MAX_DEPTH
 * (the outermost table or array is depth 0). Nothing here allocates.
 */
#include "amqp/table.h"

#include <string.h>

/* Fixed value sizes by tag; -1 = length-prefixed (S x A F), -2 = unknown tag. */
static int fixed_size(uint8_t tag)
{
    switch (tag) {
    case 't':
    case 'b':
    case 'B':
        return 1;
    case 's':
    case 'u':
        return 2;
    case 'I':
    case 'i':
    case 'f':
        return 4;
    case 'D':
        return 5;
    case 'l':
    case 'L':
    case 'd':
    case 'T':
        return 8;
    case 'V':
        return 0;
    case 'S':
    case 'x':
    case 'A':
    case 'F':
        return -1;
    default:
        return -2;
    }
}

static int validate(amqp_bytes content, int is_array)
{
    struct {
        const uint8_t *end;
        uint8_t is_array;
    } stack[AMQP_TABLE_MAX_DEPTH + 1];
    int depth = 0;
    amqp_reader r = amqp_reader_make(content.p, content.len);

    stack[0].end = r.end;
    stack[0].is_array = (uint8_t)is_array;
    for (;;) {
        if (r.p == stack[depth].end) {
            if (depth == 0)
                return 0;
            depth--;
            continue;
        }
        /* Reads are bounded by the innermost container's end, not the outermost. */
        r.end = stack[depth].end;
        if (!stack[depth].is_array)
            (void)amqp_rd_shortstr(&r);
        uint8_t tag = amqp_rd_u8(&r);
        if (r.err)
            return -1;
        int n = fixed_size(tag);
        if (n == -2)
            return -1;
        if (n >= 0) {
            (void)amqp_rd_raw(&r, (size_t)n);
        } else if (tag == 'S' || tag == 'x') {
            (void)amqp_rd_longstr(&r);
        } else {
            amqp_bytes inner = amqp_rd_longstr(&r);
            if (r.err)
                return -1;
            if (depth == AMQP_TABLE_MAX_DEPTH)
                return -1;
            depth++;
            stack[depth].end = inner.p + inner.len;
            stack[depth].is_array = tag == 'A';
            /* Step back into the nested content: it starts right after its length. */
            r.p = inner.p;
        }
        if (r.err)
            return -1;
    }
}

static int array_keys_utf8(amqp_bytes array);

static int value_keys_utf8(const amqp_value *v)
{
    if (v->tag == 'F')
        return amqp_table_keys_utf8(v->v.s);
    if (v->tag == 'A')
        return array_keys_utf8(v->v.s);
    return 1;
}

static int array_keys_utf8(amqp_bytes array)
{
    amqp_table_iter it;
    amqp_value v;
    amqp_array_iter_init(&it, array);
    while (amqp_array_next(&it, &v))
        if (!value_keys_utf8(&v))
            return 0;
    return 1;
}

/* Recursion is bounded by AMQP_TABLE_MAX_DEPTH: the table was validated on reading. */
int amqp_table_keys_utf8(amqp_bytes table)
{
    amqp_table_iter it;
    amqp_bytes k;
    amqp_value v;
    amqp_table_iter_init(&it, table);
    while (amqp_table_next(&it, &k, &v))
        if (!amqp_utf8_valid(k) || !value_keys_utf8(&v))
            return 0;
    return 1;
}

int amqp_table_validate(amqp_bytes table)
{
    if (table.len > 0 && table.p == NULL)
        return -1;
    return validate(table, 0);
}

int amqp_array_validate(amqp_bytes array)
{
    if (array.len > 0 && array.p == NULL)
        return -1;
    return validate(array, 1);
}

/* Read one tagged value. Nested tables/arrays are returned as slices, unvalidated. */
static int read_value(amqp_reader *r, amqp_value *v)
{
    memset(v, 0, sizeof *v);
    v->tag = amqp_rd_u8(r);
    if (r->err)
        return 0;
    switch (v->tag) {
    case 't':
        v->v.b = amqp_rd_u8(r) != 0;
        break;
    case 'b':
        v->v.i = (int8_t)amqp_rd_u8(r);
        break;
    case 'B':
        v->v.i = amqp_rd_u8(r);
        break;
    case 's':
        v->v.i = (int16_t)amqp_rd_u16(r);
        break;
    case 'u':
        v->v.i = amqp_rd_u16(r);
        break;
    case 'I':
        v->v.i = (int32_t)amqp_rd_u32(r);
        break;
    case 'i':
        v->v.i = amqp_rd_u32(r);
        break;
    case 'l':
    case 'L':
        v->v.i = (int64_t)amqp_rd_u64(r);
        break;
    case 'T':
        v->v.ts = amqp_rd_u64(r);
        break;
    case 'f': {
        uint32_t bits = amqp_rd_u32(r);
        memcpy(&v->v.f, &bits, sizeof bits);
        break;
    }
    case 'd': {
        uint64_t bits = amqp_rd_u64(r);
        memcpy(&v->v.d, &bits, sizeof bits);
        break;
    }
    case 'D':
        v->v.dec.scale = amqp_rd_u8(r);
        v->v.dec.value = (int32_t)amqp_rd_u32(r);
        break;
    case 'S':
    case 'x':
    case 'A':
    case 'F':
        v->v.s = amqp_rd_longstr(r);
        break;
    case 'V':
        break;
    default:
        r->err = 1;
        break;
    }
    return !r->err;
}

void amqp_table_iter_init(amqp_table_iter *it, amqp_bytes table)
{
    it->r = amqp_reader_make(table.p, table.len);
}

void amqp_array_iter_init(amqp_table_iter *it, amqp_bytes array)
{
    it->r = amqp_reader_make(array.p, array.len);
}

int amqp_table_next(amqp_table_iter *it, amqp_bytes *key, amqp_value *val)
{
    if (it->r.err || it->r.p == it->r.end)
        return 0;
    *key = amqp_rd_shortstr(&it->r);
    return read_value(&it->r, val);
}

int amqp_array_next(amqp_table_iter *it, amqp_value *val)
{
    if (it->r.err || it->r.p == it->r.end)
        return 0;
    return read_value(&it->r, val);
}

int amqp_table_get(amqp_bytes table, const char *key, amqp_value *val)
{
    amqp_table_iter it;
    amqp_bytes k;
    amqp_value v;

    amqp_table_iter_init(&it, table);
    while (amqp_table_next(&it, &k, &v)) {
        /* AMQP says keys are unique; RabbitMQ takes the first, and so do we. */
        if (amqp_bytes_eq(k, key)) {
            *val = v;
            return 1;
        }
    }
    return 0;
}

static int is_int_tag(uint8_t tag)
{
    return tag == 'b' || tag == 'B' || tag == 's' || tag == 'u' || tag == 'I' || tag == 'i' ||
           tag == 'l' || tag == 'L';
}

int amqp_value_int(const amqp_value *v, int64_t *out)
{
    if (is_int_tag(v->tag)) {
        *out = v->v.i;
        return 1;
    }
    if (v->tag == 'T') {
        *out = (int64_t)v->v.ts;
        return 1;
    }
    return 0;
}

int amqp_value_str(const amqp_value *v, amqp_bytes *out)
{
    if (v->tag == 'S' || v->tag == 'x') {
        *out = v->v.s;
        return 1;
    }
    return 0;
}

int amqp_value_equal(const amqp_value *a, const amqp_value *b)
{
    if (is_int_tag(a->tag) && is_int_tag(b->tag))
        return a->v.i == b->v.i;
    if ((a->tag == 'S' || a->tag == 'x') && (b->tag == 'S' || b->tag == 'x'))
        return amqp_bytes_equal(a->v.s, b->v.s);
    if (a->tag != b->tag)
        return 0;
    switch (a->tag) {
    case 't':
        return !a->v.b == !b->v.b;
    case 'T':
        return a->v.ts == b->v.ts;
    case 'f': /* by bit pattern, as "tag + bytes" */
        return memcmp(&a->v.f, &b->v.f, sizeof a->v.f) == 0;
    case 'd':
        return memcmp(&a->v.d, &b->v.d, sizeof a->v.d) == 0;
    case 'D':
        return a->v.dec.scale == b->v.dec.scale && a->v.dec.value == b->v.dec.value;
    case 'A':
    case 'F':
        return amqp_bytes_equal(a->v.s, b->v.s);
    case 'V':
        return 1;
    default:
        return 0;
    }
}

const char *amqp_value_type_name(uint8_t tag)
{
    switch (tag) {
    case 't':
        return "bool";
    case 'b':
        return "byte";
    case 'B':
        return "unsignedbyte";
    case 's':
        return "short";
    case 'u':
        return "unsignedshort";
    case 'I':
        return "signedint";
    case 'i':
        return "unsignedint";
    case 'l':
    case 'L':
        return "long";
    case 'f':
        return "float";
    case 'd':
        return "double";
    case 'D':
        return "decimal";
    case 'S':
        return "longstr";
    case 'x':
        return "binary";
    case 'A':
        return "array";
    case 'T':
        return "timestamp";
    case 'F':
        return "table";
    case 'V':
        return "void";
    default:
        return "unknown";
    }
}

/* ---- builders ----
 * Marks are offsets relative to the buffer's read offset: sl_buf_reserve may compact the
 * buffer while entries are appended, which moves absolute positions but not relative ones. */

size_t amqp_tbl_begin(sl_buf *b)
{
    size_t mark = sl_buf_unread(b);
    sl_buf_put_u32(b, 0);
    return mark;
}

void amqp_tbl_end(sl_buf *b, size_t mark)
{
    size_t at = b->off + mark;
    sl_buf_patch_u32(b, at, (uint32_t)(b->len - at - 4));
}

static void put_key(sl_buf *b, const char *key, uint8_t tag)
{
    amqp_wr_shortstr(b, amqp_cstr(key));
    sl_buf_put_u8(b, tag);
}

void amqp_tbl_put_bool(sl_buf *b, const char *key, int v)
{
    put_key(b, key, 't');
    sl_buf_put_u8(b, v ? 1 : 0);
}

void amqp_tbl_put_long(sl_buf *b, const char *key, int64_t v)
{
    put_key(b, key, 'l');
    sl_buf_put_u64(b, (uint64_t)v);
}

void amqp_tbl_put_int(sl_buf *b, const char *key, int32_t v)
{
    put_key(b, key, 'I');
    sl_buf_put_u32(b, (uint32_t)v);
}

void amqp_tbl_put_str(sl_buf *b, const char *key, amqp_bytes v)
{
    put_key(b, key, 'S');
    amqp_wr_longstr(b, v);
}

void amqp_tbl_put_timestamp(sl_buf *b, const char *key, uint64_t v)
{
    put_key(b, key, 'T');
    sl_buf_put_u64(b, v);
}

size_t amqp_tbl_put_table_begin(sl_buf *b, const char *key)
{
    put_key(b, key, 'F');
    return amqp_tbl_begin(b);
}

size_t amqp_tbl_put_array_begin(sl_buf *b, const char *key)
{
    put_key(b, key, 'A');
    return amqp_tbl_begin(b);
}

void amqp_arr_put_str(sl_buf *b, amqp_bytes v)
{
    sl_buf_put_u8(b, 'S');
    amqp_wr_longstr(b, v);
}

size_t amqp_arr_put_table_begin(sl_buf *b)
{
    sl_buf_put_u8(b, 'F');
    return amqp_tbl_begin(b);
}

void amqp_value_write(sl_buf *b, const amqp_value *v)
{
    sl_buf_put_u8(b, v->tag);
    switch (v->tag) {
    case 't':
        sl_buf_put_u8(b, v->v.b ? 1 : 0);
        break;
    case 'b':
    case 'B':
        sl_buf_put_u8(b, (uint8_t)v->v.i);
        break;
    case 's':
    case 'u':
        sl_buf_put_u16(b, (uint16_t)v->v.i);
        break;
    case 'I':
    case 'i':
        sl_buf_put_u32(b, (uint32_t)v->v.i);
        break;
    case 'l':
    case 'L':
        sl_buf_put_u64(b, (uint64_t)v->v.i);
        break;
    case 'T':
        sl_buf_put_u64(b, v->v.ts);
        break;
    case 'f': {
        uint32_t bits;
        memcpy(&bits, &v->v.f, sizeof bits);
        sl_buf_put_u32(b, bits);
        break;
    }
    case 'd': {
        uint64_t bits;
        memcpy(&bits, &v->v.d, sizeof bits);
        sl_buf_put_u64(b, bits);
        break;
    }
    case 'D':
        sl_buf_put_u8(b, v->v.dec.scale);
        sl_buf_put_u32(b, (uint32_t)v->v.dec.value);
        break;
    case 'S':
    case 'x':
    case 'A':
    case 'F':
        amqp_wr_longstr(b, v->v.s);
        break;
    default: /* 'V' has no value; unknown tags cannot come out of a validated table */
        break;
    }
}

void amqp_tbl_put_value(sl_buf *b, amqp_bytes key, const amqp_value *v)
{
    amqp_wr_shortstr(b, key);
    amqp_value_write(b, v);
}
