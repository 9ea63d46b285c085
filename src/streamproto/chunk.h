/* chunk.h - OSIRIS chunks: the unit a stream is stored, replicated and delivered in.
 *
 * Layout (big-endian, 48-octet header, from osiris_log.erl's format comment and make_chunk):
 *   magic:4 (5) version:4 (0) | chunk type:u8 (0 user, 1 tracking delta, 2 tracking snapshot)
 *   | num entries:u16 | num records:u32 | timestamp:i64 (ms since epoch) | epoch:u64
 *   | chunk id = first offset:u64 | data crc:u32 | data length:u32 | trailer length:u32
 *   | bloom size:u8 | reserved:u24
 * then, in the log: bloom filter (bloom size octets), data (data length), trailer (trailer
 * length). The CRC is CRC-32 (ISO-HDLC, zlib's crc32, Erlang's erlang:crc32) of the data
 * entries only.
 *
 * What a Deliver carries is not the same bytes: RabbitMQ sends the 48-octet header as
 * stored (bloom size and trailer length unchanged) followed by the data only for a user
 * chunk (data and trailer for the others); the bloom filter is never sent to a consumer.
 * Hence two layouts: SP_CHUNK_LOG (everything) and SP_CHUNK_DELIVER (header, data, and the
 * trailer or nothing). A chunk built here has no bloom filter and no trailer, so its bytes
 * are the same in both layouts.
 *
 * Data entries: a simple entry is 0:1 size:31 then size octets; a sub-entry batch is
 * 1:1 compression:3 reserved:4 | num records:u16 | uncompressed length:u32 | length:u32 then
 * length octets. Compression types as RabbitMQ's clients number them: 0 none, 1 gzip,
 * 2 snappy, 3 lz4, 4 zstd. An uncompressed batch body is a run of size:u32 + octets records.
 *
 * Invariants: parsers return slices into the caller's bytes, never read past len, and
 * check every length against what is left before using it (in 64 bits, so no sum wraps).
 * A parsed chunk's entries are counted and summed against num entries / num records by
 * sp_chunk_check_entries; the CRC by sp_chunk_check_crc. Errors: SL_ERR_SYNTAX for a
 * structure that does not add up (truncated, lengths or counts that disagree), SL_ERR_FRAME
 * for a chunk that is not an OSIRIS chunk or is damaged (magic, version, CRC).
 */
#ifndef SL_STREAMPROTO_CHUNK_H
#define SL_STREAMPROTO_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"

#define SP_CHUNK_HEADER_SIZE 48
#define SP_CHUNK_MAGIC 5
#define SP_CHUNK_VERSION 0

enum sp_chunk_type {
    SP_CHUNK_USER = 0,
    SP_CHUNK_TRACKING_DELTA = 1,
    SP_CHUNK_TRACKING_SNAPSHOT = 2,
};

enum sp_compression {
    SP_COMPRESSION_NONE = 0,
    SP_COMPRESSION_GZIP = 1,
    SP_COMPRESSION_SNAPPY = 2,
    SP_COMPRESSION_LZ4 = 3,
    SP_COMPRESSION_ZSTD = 4,
};

enum sp_chunk_layout {
    SP_CHUNK_LOG = 0,     /* header, bloom filter, data, trailer: exactly */
    SP_CHUNK_DELIVER = 1, /* header, data, then the trailer or nothing */
};

typedef struct sp_chunk {
    uint8_t magic, version; /* 5, 0 */
    uint8_t type;           /* sp_chunk_type (others are kept, not refused) */
    uint16_t num_entries;
    uint32_t num_records;
    int64_t timestamp;
    uint64_t epoch;
    uint64_t first_offset; /* the chunk id */
    uint32_t crc;
    uint32_t data_len;
    uint32_t trailer_len;
    uint8_t bloom_size;
    uint32_t reserved; /* 24 bits */
    /* Slices into the parsed bytes; NULL when absent from the layout. */
    const uint8_t *bloom;
    const uint8_t *data;
    const uint8_t *trailer;
} sp_chunk;

/* The 48-octet header alone (slices left NULL). SL_ERR_SYNTAX when len < 48, SL_ERR_FRAME
 * when the magic or version is not OSIRIS's. */
sl_err sp_chunk_parse_header(const uint8_t *buf, size_t len, sp_chunk *c);
/* A whole chunk in the given layout; *used is how many bytes it takes (the whole of len for
 * SP_CHUNK_DELIVER, which is what is left of a Deliver frame). */
sl_err sp_chunk_parse(const uint8_t *buf, size_t len, enum sp_chunk_layout layout, sp_chunk *c,
                      size_t *used);
/* SL_ERR_FRAME unless crc32(data) equals the header's CRC. */
sl_err sp_chunk_check_crc(const sp_chunk *c);
/* CRC-32 (zlib's) of p[0..n) (crc32.c); _update goes on from a finished crc (0 to start), the
 * zlib one is the reference the fast path is tested against. */
uint32_t sp_crc32(const uint8_t *p, size_t n);
uint32_t sp_crc32_update(uint32_t crc, const uint8_t *p, size_t n);
uint32_t sp_crc32_update_zlib(uint32_t crc, const uint8_t *p, size_t n);

typedef struct sp_entry {
    uint8_t batch;             /* 0 simple entry, 1 sub-entry batch */
    uint8_t compression;       /* batch: sp_compression (3 bits) */
    uint8_t reserved;          /* batch: the 4 reserved bits */
    uint16_t num_records;      /* batch: records in the body; 1 for a simple entry */
    uint32_t uncompressed_len; /* batch */
    const uint8_t *body;
    uint32_t len;
} sp_entry;

typedef struct sp_entry_iter {
    const uint8_t *p, *end;
} sp_entry_iter;

void sp_entry_iter_init(sp_entry_iter *it, const sp_chunk *c);
/* SL_OK with *got = 1 and *e filled, SL_OK with *got = 0 at the end of the data, or
 * SL_ERR_SYNTAX (truncated entry). */
sl_err sp_entry_next(sp_entry_iter *it, sp_entry *e, int *got);
/* Entries walk the data exactly, there are num_entries of them, and their records add up to
 * num_records (for user chunks; tracking chunks count entries only). */
sl_err sp_chunk_check_entries(const sp_chunk *c);

/* The records of an uncompressed batch body: size:u32 + octets each. */
typedef struct sp_record_iter {
    const uint8_t *p, *end;
} sp_record_iter;
void sp_record_iter_init(sp_record_iter *it, const sp_entry *e);
sl_err sp_record_next(sp_record_iter *it, const uint8_t **rec, uint32_t *len, int *got);

/* Building a chunk into out: begin writes a header to patch; entries follow; end computes
 * counts, lengths and the CRC. No bloom filter, no trailer. */
typedef struct sp_chunk_builder {
    sl_buf *out;
    size_t mark; /* header position relative to out's read offset */
    uint32_t num_entries, num_records;
    sl_err err; /* sticky: too many entries/records, an entry too large */
} sp_chunk_builder;

void sp_chunk_begin(sp_chunk_builder *b, sl_buf *out, uint8_t type, int64_t timestamp,
                    uint64_t epoch, uint64_t first_offset);
void sp_chunk_add_simple(sp_chunk_builder *b, const void *body, size_t len);
/* A sub-entry batch whose body (compressed or not) the caller made. */
void sp_chunk_add_batch(sp_chunk_builder *b, uint8_t compression, uint16_t num_records,
                        uint32_t uncompressed_len, const void *body, size_t len);
/* SL_OK, or the first error (SL_ERR_INVALID_PARAMETER: more than 65535 entries, a simple
 * entry of 2^31 octets or more, a compression type over 7); on error nothing is left in out. */
sl_err sp_chunk_end(sp_chunk_builder *b);

/* Records for an uncompressed batch body: size:u32 + octets. */
void sp_batch_put_record(sl_buf *body, const void *rec, uint32_t len);

#endif
