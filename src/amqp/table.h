/* table.h - AMQP field tables and arrays, with RabbitMQ's type tags (reference/amqp/NOTES.md
 * section 1): t b B s u I i l L f d D S x A T F V. Tables stay in wire form; these functions
 * validate, look up, iterate and build them without allocating.
 *
 * A "table" amqp_bytes here is the table's content: the entries, without the u32 length.
 */
#ifndef SL_AMQP_TABLE_H
#define SL_AMQP_TABLE_H

#include <stdint.h>

#include "core/buf.h"
#include "amqp/wire.h"

/* Nesting accepted in a table (the outermost is depth 0). RabbitMQ takes any depth a frame
 * holds; 1024 is far beyond what applications send (x-death is 3 deep) and keeps the
 * recursive walkers (JSON views) within a few hundred KiB of stack. Deeper: 502 (see
 * tests/integration/DIFFERENCES.md). */
#define AMQP_TABLE_MAX_DEPTH 1024

typedef struct amqp_value {
    uint8_t tag; /* the wire tag character */
    union {
        int b;       /* 't' */
        int64_t i;   /* 'b' 's' 'I' 'l' 'L' (signed) and 'B' 'u' 'i' (unsigned fits) */
        uint64_t ts; /* 'T' */
        float f;     /* 'f' */
        double d;    /* 'd' */
        struct {
            uint8_t scale;
            int32_t value;
        } dec;        /* 'D' */
        amqp_bytes s; /* 'S' 'x': the string bytes; 'F': table content; 'A': array content */
    } v;
} amqp_value;

/* 0 when the table content is well formed (every tag known, every length in bounds,
 * nesting at most AMQP_TABLE_MAX_DEPTH), -1 otherwise. */
int amqp_table_validate(amqp_bytes table);
/* 1 when every field name of a (validated) table, nested tables and tables in arrays
 * included, is UTF-8. */
int amqp_table_keys_utf8(amqp_bytes table);
int amqp_array_validate(amqp_bytes array);

typedef struct amqp_table_iter {
    amqp_reader r;
} amqp_table_iter;
void amqp_table_iter_init(amqp_table_iter *it, amqp_bytes table);
/* 1 and the next entry, or 0 at the end (or on malformed input, which validate rejects). */
int amqp_table_next(amqp_table_iter *it, amqp_bytes *key, amqp_value *val);
void amqp_array_iter_init(amqp_table_iter *it, amqp_bytes array);
int amqp_array_next(amqp_table_iter *it, amqp_value *val);

/* Find key; 1 and *val when present, 0 otherwise. */
int amqp_table_get(amqp_bytes table, const char *key, amqp_value *val);
/* 1 when the value is an integer type (b B s u I i l L, and T), with *out set. */
int amqp_value_int(const amqp_value *v, int64_t *out);
/* 1 when the value is a string ('S' or 'x'). */
int amqp_value_str(const amqp_value *v, amqp_bytes *out);
/* RabbitMQ's rule for comparing header values in headers exchanges: same tag class and
 * equal value (integers compare by value across integer tags; strings by bytes). */
int amqp_value_equal(const amqp_value *a, const amqp_value *b);
/* Human-readable form for error texts ("1000", "longstr", ...), like RabbitMQ's. */
const char *amqp_value_type_name(uint8_t tag);

/* Table builder: begin returns a mark; put_* append entries; end patches the u32 length.
 * The bytes written are a complete table WITH its length prefix. */
size_t amqp_tbl_begin(sl_buf *b);
void amqp_tbl_end(sl_buf *b, size_t mark);
void amqp_tbl_put_bool(sl_buf *b, const char *key, int v);
void amqp_tbl_put_long(sl_buf *b, const char *key, int64_t v);   /* 'l' */
void amqp_tbl_put_int(sl_buf *b, const char *key, int32_t v);    /* 'I' */
void amqp_tbl_put_str(sl_buf *b, const char *key, amqp_bytes v); /* 'S' */
void amqp_tbl_put_timestamp(sl_buf *b, const char *key, uint64_t v);
/* key then 'F' then a nested table: call begin/end around the nested entries. */
size_t amqp_tbl_put_table_begin(sl_buf *b, const char *key);
/* key then 'A' then an array: use begin/end marks and amqp_arr_put_*. */
size_t amqp_tbl_put_array_begin(sl_buf *b, const char *key);
void amqp_arr_put_str(sl_buf *b, amqp_bytes v);
size_t amqp_arr_put_table_begin(sl_buf *b);
/* Append a tag and its value (array element form; no key). */
void amqp_value_write(sl_buf *b, const amqp_value *v);
/* Copy one entry (key, value) from an existing table verbatim. */
void amqp_tbl_put_value(sl_buf *b, amqp_bytes key, const amqp_value *v);

#endif
