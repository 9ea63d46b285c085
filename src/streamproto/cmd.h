/* cmd.h - RabbitMQ stream protocol commands: frame bodies in, plain structs out, and back.
 *
 * From deps/rabbitmq_stream/docs/PROTOCOL.adoc, checked against RabbitMQ's own parser
 * (rabbit_stream_core.erl) where the document is loose; docs/stream-protocol.md lists each
 * place where the two differ and which one is followed.
 *
 * Wire types: integers big-endian; string = int16 length + octets, bytes = int32 length +
 * octets, -1 = null for both (other negative lengths are refused); array = int32 count +
 * elements. A body is key:u16 (0x8000 = response) version:u16 then the command's fields;
 * requests and responses carry a correlation id where the spec says so.
 *
 * Invariants:
 * - sp_cmd_decode reads nothing past the body, refuses trailing bytes, and checks every
 *   count against the bytes left (count * smallest element <= left) before allocating, so
 *   what it allocates is bounded by a small multiple of the frame size. Strings and byte
 *   fields are slices into the body: a decoded command lives as long as those bytes.
 * - The encoding is canonical: for every body sp_cmd_decode accepts, sp_cmd_encode of the
 *   result gives the same bytes back (optional trailing fields are remembered by has_*
 *   flags, nulls by sp_str.null, the Tune key's response bit by response). The fuzz target
 *   checks this.
 * - Errors: SL_ERR_SYNTAX (truncated, trailing bytes, negative or too-long lengths, counts
 *   beyond the bytes left, an unknown offset type), SL_ERR_COMMAND_INVALID (unknown key,
 *   version, or direction); encoding refuses what cannot be put on the wire
 *   (SL_ERR_INVALID_PARAMETER: a string over 32767 octets, an unknown command) and frames
 *   over frame_max (SL_ERR_CONTENT_TOO_LARGE), leaving out as it was.
 */
#ifndef SL_STREAMPROTO_CMD_H
#define SL_STREAMPROTO_CMD_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "streamproto/chunk.h"

enum sp_key {
    SP_DECLARE_PUBLISHER = 0x0001,
    SP_PUBLISH = 0x0002,
    SP_PUBLISH_CONFIRM = 0x0003,
    SP_PUBLISH_ERROR = 0x0004,
    SP_QUERY_PUBLISHER_SEQUENCE = 0x0005,
    SP_DELETE_PUBLISHER = 0x0006,
    SP_SUBSCRIBE = 0x0007,
    SP_DELIVER = 0x0008,
    SP_CREDIT = 0x0009,
    SP_STORE_OFFSET = 0x000a,
    SP_QUERY_OFFSET = 0x000b,
    SP_UNSUBSCRIBE = 0x000c,
    SP_CREATE = 0x000d,
    SP_DELETE = 0x000e,
    SP_METADATA = 0x000f,
    SP_METADATA_UPDATE = 0x0010,
    SP_PEER_PROPERTIES = 0x0011,
    SP_SASL_HANDSHAKE = 0x0012,
    SP_SASL_AUTHENTICATE = 0x0013,
    SP_TUNE = 0x0014,
    SP_OPEN = 0x0015,
    SP_CLOSE = 0x0016,
    SP_HEARTBEAT = 0x0017,
    SP_ROUTE = 0x0018,
    SP_PARTITIONS = 0x0019,
    SP_CONSUMER_UPDATE = 0x001a,
    SP_EXCHANGE_COMMAND_VERSIONS = 0x001b,
    SP_STREAM_STATS = 0x001c,
    SP_CREATE_SUPER_STREAM = 0x001d,
    SP_DELETE_SUPER_STREAM = 0x001e,
    SP_RESOLVE_OFFSET_SPEC = 0x001f,
    SP_KEY_MAX = 0x001f,
};

/* Response codes (the spec's table; 0x14 and 0x15 from RabbitMQ's rabbit_stream.hrl). */
enum sp_code {
    SP_OK = 0x01,
    SP_STREAM_DOES_NOT_EXIST = 0x02,
    SP_SUBSCRIPTION_ID_ALREADY_EXISTS = 0x03,
    SP_SUBSCRIPTION_ID_DOES_NOT_EXIST = 0x04,
    SP_STREAM_ALREADY_EXISTS = 0x05,
    SP_STREAM_NOT_AVAILABLE = 0x06,
    SP_SASL_MECHANISM_NOT_SUPPORTED = 0x07,
    SP_AUTHENTICATION_FAILURE = 0x08,
    SP_SASL_ERROR = 0x09,
    SP_SASL_CHALLENGE = 0x0a,
    SP_SASL_AUTHENTICATION_FAILURE_LOOPBACK = 0x0b,
    SP_VIRTUAL_HOST_ACCESS_FAILURE = 0x0c,
    SP_UNKNOWN_FRAME = 0x0d,
    SP_FRAME_TOO_LARGE = 0x0e,
    SP_INTERNAL_ERROR = 0x0f,
    SP_ACCESS_REFUSED = 0x10,
    SP_PRECONDITION_FAILED = 0x11,
    SP_PUBLISHER_DOES_NOT_EXIST = 0x12,
    SP_NO_OFFSET = 0x13,
    SP_SASL_CANNOT_CHANGE_MECHANISM = 0x14,
    SP_SASL_CANNOT_CHANGE_USERNAME = 0x15,
};

enum sp_offset_type {
    SP_OFFSET_NONE = 0, /* ConsumerUpdate's answer only */
    SP_OFFSET_FIRST = 1,
    SP_OFFSET_LAST = 2,
    SP_OFFSET_NEXT = 3,
    SP_OFFSET_OFFSET = 4,    /* value: u64 offset */
    SP_OFFSET_TIMESTAMP = 5, /* value: i64 ms since the epoch */
};

/* A string or bytes field: a slice, or null (length -1 on the wire). */
typedef struct sp_str {
    const uint8_t *p;
    uint32_t len;
    uint8_t null;
} sp_str;

typedef struct sp_kv {
    sp_str key, value;
} sp_kv;

typedef struct sp_map { /* [Key Value] of strings: properties, arguments */
    sp_kv *v;
    uint32_t n;
} sp_map;

typedef struct sp_strs {
    sp_str *v;
    uint32_t n;
} sp_strs;

typedef struct sp_offset_spec {
    uint16_t type;  /* sp_offset_type */
    uint64_t value; /* offset, or the timestamp's two's complement; 0 for the others */
} sp_offset_spec;

typedef struct sp_published {
    uint64_t publishing_id;
    sp_str filter; /* version 2 only */
    /* A sub-entry batch when batch_flags has its top bit set: 1:1 compression:3 reserved:4,
     * then records u16, uncompressed length u32, and message is the batch's body (records of
     * size:u32 + octets, compressed or not). 0: message is one message. */
    uint8_t batch_flags;
    uint16_t records;
    uint32_t uncompressed_len;
    sp_str message;
} sp_published;

typedef struct sp_publishing_error {
    uint64_t publishing_id;
    uint16_t code;
} sp_publishing_error;

typedef struct sp_broker {
    uint16_t reference;
    sp_str host;
    uint32_t port;
} sp_broker;

typedef struct sp_stream_metadata {
    sp_str name;
    uint16_t code;
    uint16_t leader; /* a broker reference; 0xFFFF when there is none */
    uint16_t *replicas;
    uint32_t n_replicas;
} sp_stream_metadata;

typedef struct sp_command_version {
    uint16_t key, min_version, max_version;
} sp_command_version;

typedef struct sp_stat {
    sp_str key;
    int64_t value;
} sp_stat;

/* One command. key/response/version say which member of u is meant; corr and code are set
 * where the command has them (a response's code; Credit's response has a code and no corr). */
typedef struct sp_cmd {
    uint16_t key; /* enum sp_key, without the response bit */
    uint8_t response;
    uint16_t version;
    uint32_t corr;
    uint16_t code;
    union {
        /* requests (and the commands that have no response) */
        struct {
            uint8_t publisher_id;
            sp_str reference, stream;
        } declare_publisher;
        struct {
            uint8_t publisher_id;
            sp_published *msgs;
            uint32_t n;
        } publish;
        struct {
            uint8_t publisher_id;
            uint64_t *ids;
            uint32_t n;
        } publish_confirm;
        struct {
            uint8_t publisher_id;
            sp_publishing_error *errs;
            uint32_t n;
        } publish_error;
        struct {
            sp_str reference, stream;
        } query_publisher_sequence;
        struct {
            uint8_t publisher_id;
        } delete_publisher;
        struct {
            uint8_t subscription_id;
            sp_str stream;
            sp_offset_spec offset;
            uint16_t credit;
            uint8_t has_properties; /* RabbitMQ omits an empty map */
            sp_map properties;
        } subscribe;
        struct {
            uint8_t subscription_id;
            uint64_t committed_chunk_id; /* version 2 */
            const uint8_t *chunk;        /* the rest of the frame */
            size_t chunk_len;
            sp_chunk hdr; /* decoded: the chunk parsed in SP_CHUNK_DELIVER layout */
        } deliver;
        struct {
            uint8_t subscription_id;
            uint16_t credit;
        } credit;
        struct {
            sp_str reference, stream;
            uint64_t offset;
        } store_offset;
        struct {
            sp_str reference, stream;
        } query_offset;
        struct {
            uint8_t subscription_id;
        } unsubscribe;
        struct {
            sp_str stream;
            sp_map arguments;
        } create;
        struct {
            sp_str stream;
        } delete_stream;
        struct {
            sp_strs streams;
        } metadata;
        struct {
            uint16_t code;
            sp_str stream;
        } metadata_update;
        struct {
            sp_map properties;
        } peer_properties;
        struct {
            sp_str mechanism;
            sp_str data;
        } sasl_authenticate; /* data: bytes */
        struct {
            uint32_t frame_max, heartbeat;
        } tune; /* both directions */
        struct {
            sp_str vhost;
        } open;
        struct {
            uint16_t closing_code;
            sp_str reason;
        } close;
        struct {
            sp_str routing_key, super_stream;
        } route;
        struct {
            sp_str super_stream;
        } partitions;
        struct {
            uint8_t subscription_id;
            uint8_t active;
        } consumer_update;
        struct {
            sp_command_version *v;
            uint32_t n;
        } exchange_command_versions;
        struct {
            sp_str stream;
        } stream_stats;
        struct {
            sp_str name;
            sp_strs partitions, binding_keys;
            sp_map arguments;
        } create_super_stream;
        struct {
            sp_str name;
        } delete_super_stream;
        struct {
            sp_str stream;
            sp_offset_spec offset;
            uint8_t has_properties;
            sp_map properties;
        } resolve_offset_spec;
        /* responses beyond corr + code */
        struct {
            uint64_t sequence;
        } query_publisher_sequence_resp;
        struct {
            uint8_t subscription_id;
        } credit_resp;
        struct {
            uint64_t offset;
        } query_offset_resp;
        struct {
            sp_broker *brokers;
            uint32_t n_brokers;
            sp_stream_metadata *streams;
            uint32_t n_streams;
        } metadata_resp;
        struct {
            sp_map properties;
        } peer_properties_resp;
        struct {
            sp_strs mechanisms;
        } sasl_handshake_resp;
        struct {
            uint8_t has_data;
            sp_str data;
        } sasl_authenticate_resp; /* challenge */
        struct {
            uint8_t has_properties;
            sp_map properties;
        } open_resp;
        struct {
            sp_strs streams;
        } route_resp;
        struct {
            sp_strs streams;
        } partitions_resp;
        struct {
            sp_offset_spec offset;
        } consumer_update_resp;
        struct {
            sp_command_version *v;
            uint32_t n;
        } exchange_command_versions_resp;
        struct {
            sp_stat *v;
            uint32_t n;
        } stream_stats_resp;
        struct {
            uint16_t offset_type;
            uint64_t offset;
        } resolve_offset_spec_resp;
    } u;
    void *arena; /* what decode allocated; sp_cmd_free releases it */
} sp_cmd;

/* Decode a frame body (key onwards: sp_frame.body, sp_frame.size). On error *c holds
 * nothing to free. */
sl_err sp_cmd_decode(const uint8_t *body, size_t len, sp_cmd *c);
void sp_cmd_free(sp_cmd *c);
/* Append the whole frame (size prefix included) for c. frame_max 0 = no limit. */
sl_err sp_cmd_encode(sl_buf *out, const sp_cmd *c, uint32_t frame_max);

/* Versions this codec decodes and encodes (ExchangeCommandVersions' answer): key's
 * [min, max], or 0 when the key is unknown. */
int sp_cmd_versions(uint16_t key, uint16_t *min, uint16_t *max);
/* "Subscribe", or "" for an unknown key. */
const char *sp_key_name(uint16_t key);
/* "STREAM_DOES_NOT_EXIST", or "" for an unknown code. */
const char *sp_code_name(uint16_t code);
/* The response code a door answers a codec error with: FRAME_TOO_LARGE for
 * SL_ERR_CONTENT_TOO_LARGE, UNKNOWN_FRAME for the framing and syntax errors, OK for SL_OK,
 * INTERNAL_ERROR otherwise. */
uint16_t sp_code_for_err(sl_err e);

static inline sp_str sp_cstr(const char *s)
{
    sp_str r = {(const uint8_t *)s, s ? (uint32_t)strlen(s) : 0, s == NULL};
    return r;
}

#endif
