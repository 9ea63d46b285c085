/* cmd.c - the stream protocol's commands, one description per command for both directions.
 *
 * Each command's fields are listed once, in io_body, against an sp_io that either reads
 * them from a body into an sp_cmd (decode) or writes them from an sp_cmd to a buffer
 * (encode). Encoding and decoding therefore cannot drift apart, which is what makes the
 * codec's encoding canonical (cmd.h).
 *
 * Invariants (reading): no byte at or past end is read; every length check is written as
 * "n <= end - p"; errors are sticky (a failed read leaves zeros and the rest of the walk is
 * harmless); an array's count is checked against the bytes left, divided by the smallest
 * wire size of one element, before the array is allocated, so a count from the wire cannot
 * make us allocate more than a small multiple of the frame.
 */
#include "streamproto/cmd.h"

#include <stdalign.h>
#include <stddef.h>
#include <string.h>

#include "core/mem.h"
#include "streamproto/frame.h"

typedef struct sp_io {
    int writing;
    /* reading */
    const uint8_t *p, *end;
    void **arena;
    /* writing */
    sl_buf *out;
    sl_err err; /* sticky */
} sp_io;

/* ---- the arena: allocations of one decode, freed together ---- */

typedef struct arena_blk {
    struct arena_blk *next;
    max_align_t data[];
} arena_blk;

static void *arena_alloc(void **arena, size_t n)
{
    arena_blk *b = sl_xmalloc(sizeof *b + n);
    b->next = *arena;
    *arena = b;
    memset(b->data, 0, n);
    return b->data;
}

void sp_cmd_free(sp_cmd *c)
{
    arena_blk *b = c->arena;
    while (b) {
        arena_blk *next = b->next;
        sl_free(b);
        b = next;
    }
    c->arena = NULL;
}

/* ---- primitives ---- */

static void fail(sp_io *io, sl_err e)
{
    if (!io->err)
        io->err = e;
}

static size_t left(const sp_io *io)
{
    return (size_t)(io->end - io->p);
}

static const uint8_t *take(sp_io *io, size_t n)
{
    if (io->err)
        return NULL;
    if (n > left(io)) {
        fail(io, SL_ERR_SYNTAX);
        return NULL;
    }
    const uint8_t *p = io->p;
    io->p += n;
    return p;
}

static void io_u8(sp_io *io, uint8_t *v)
{
    if (io->writing) {
        sl_buf_put_u8(io->out, *v);
        return;
    }
    const uint8_t *p = take(io, 1);
    *v = p ? p[0] : 0;
}

static void io_u16(sp_io *io, uint16_t *v)
{
    if (io->writing) {
        sl_buf_put_u16(io->out, *v);
        return;
    }
    const uint8_t *p = take(io, 2);
    *v = p ? sl_get_u16(p) : 0;
}

static void io_u32(sp_io *io, uint32_t *v)
{
    if (io->writing) {
        sl_buf_put_u32(io->out, *v);
        return;
    }
    const uint8_t *p = take(io, 4);
    *v = p ? sl_get_u32(p) : 0;
}

static void io_u64(sp_io *io, uint64_t *v)
{
    if (io->writing) {
        sl_buf_put_u64(io->out, *v);
        return;
    }
    const uint8_t *p = take(io, 8);
    *v = p ? sl_get_u64(p) : 0;
}

static void io_i64(sp_io *io, int64_t *v)
{
    uint64_t u = (uint64_t)*v;
    io_u64(io, &u);
    if (!io->writing)
        *v = (int64_t)u; /* two's complement on every target we build for */
}

/* string (wide = 0: int16 length) or bytes (wide = 1: int32 length); -1 = null. */
static void io_lstr(sp_io *io, sp_str *s, int wide)
{
    if (io->writing) {
        if (s->null) {
            if (wide)
                sl_buf_put_u32(io->out, 0xFFFFFFFFu);
            else
                sl_buf_put_u16(io->out, 0xFFFF);
            return;
        }
        if ((!wide && s->len > INT16_MAX) || (wide && s->len > INT32_MAX)) {
            fail(io, SL_ERR_INVALID_PARAMETER);
            return;
        }
        if (wide)
            sl_buf_put_u32(io->out, s->len);
        else
            sl_buf_put_u16(io->out, (uint16_t)s->len);
        sl_buf_append(io->out, s->p, s->len);
        return;
    }
    memset(s, 0, sizeof *s);
    int64_t n;
    if (wide) {
        uint32_t u = 0;
        io_u32(io, &u);
        n = (int32_t)u;
    } else {
        uint16_t u = 0;
        io_u16(io, &u);
        n = (int16_t)u;
    }
    if (io->err)
        return;
    if (n == -1) {
        s->null = 1;
        return;
    }
    if (n < 0) {
        fail(io, SL_ERR_SYNTAX);
        return;
    }
    const uint8_t *p = take(io, (size_t)n);
    if (p) {
        s->p = p;
        s->len = (uint32_t)n;
    }
}

static void io_str(sp_io *io, sp_str *s)
{
    io_lstr(io, s, 0);
}

static void io_bytes(sp_io *io, sp_str *s)
{
    io_lstr(io, s, 1);
}

/* An array's count. Reading: refuses a negative count or one that cannot fit in what is
 * left (min_wire octets per element at least), then allocates n elements of elem_size. */
static void io_count(sp_io *io, uint32_t *n, size_t min_wire, void **arr, size_t elem_size)
{
    if (io->writing) {
        if (*n > INT32_MAX)
            fail(io, SL_ERR_INVALID_PARAMETER);
        else
            sl_buf_put_u32(io->out, *n);
        return;
    }
    uint32_t u = 0;
    io_u32(io, &u);
    *n = 0;
    *arr = NULL;
    if (io->err)
        return;
    if ((int32_t)u < 0 || (min_wire && u > left(io) / min_wire)) {
        fail(io, SL_ERR_SYNTAX);
        return;
    }
    *n = u;
    if (u)
        *arr = arena_alloc(io->arena, (size_t)u * elem_size);
}

#define IO_COUNT(io, n, min_wire, arr) io_count(io, n, min_wire, (void **)(arr), sizeof **(arr))

static void io_map(sp_io *io, sp_map *m)
{
    IO_COUNT(io, &m->n, 4, &m->v);
    for (uint32_t i = 0; i < m->n && !io->err; i++) {
        io_str(io, &m->v[i].key);
        io_str(io, &m->v[i].value);
    }
}

static void io_strs(sp_io *io, sp_strs *a)
{
    IO_COUNT(io, &a->n, 2, &a->v);
    for (uint32_t i = 0; i < a->n && !io->err; i++)
        io_str(io, &a->v[i]);
}

/* An optional last field: reading, present when bytes are left. */
static int io_present(sp_io *io, uint8_t *has)
{
    if (!io->writing)
        *has = !io->err && left(io) > 0;
    return *has;
}

static void io_offset(sp_io *io, sp_offset_spec *o, int allow_none)
{
    if (io->writing &&
        (o->type > SP_OFFSET_TIMESTAMP || (o->type == SP_OFFSET_NONE && !allow_none)))
        fail(io, SL_ERR_INVALID_PARAMETER); /* what decode would refuse is not written */
    io_u16(io, &o->type);
    if (!io->writing && !io->err &&
        (o->type > SP_OFFSET_TIMESTAMP || (o->type == SP_OFFSET_NONE && !allow_none)))
        fail(io, SL_ERR_SYNTAX);
    if (o->type == SP_OFFSET_OFFSET || o->type == SP_OFFSET_TIMESTAMP)
        io_u64(io, &o->value);
    else if (!io->writing)
        o->value = 0;
}

/* The rest of the body (Deliver's chunk). */
static void io_rest(sp_io *io, const uint8_t **p, size_t *len)
{
    if (io->writing) {
        sl_buf_append(io->out, *p, *len);
        return;
    }
    *len = io->err ? 0 : left(io);
    *p = take(io, *len);
}

/* ---- which (key, version, direction) exist ---- */

int sp_cmd_versions(uint16_t key, uint16_t *min, uint16_t *max)
{
    if (key < SP_DECLARE_PUBLISHER || key > SP_KEY_MAX)
        return 0;
    *min = 1;
    *max = (key == SP_PUBLISH || key == SP_DELIVER) ? 2 : 1;
    return 1;
}

/* ---- the commands ---- */

static void io_request(sp_io *io, sp_cmd *c)
{
    switch (c->key) {
    case SP_DECLARE_PUBLISHER:
        io_u32(io, &c->corr);
        io_u8(io, &c->u.declare_publisher.publisher_id);
        io_str(io, &c->u.declare_publisher.reference);
        io_str(io, &c->u.declare_publisher.stream);
        break;
    case SP_PUBLISH: {
        __typeof__(c->u.publish) *m = &c->u.publish;
        io_u8(io, &m->publisher_id);
        /* smallest message: id(8) + [filter(2)] + bytes length(4) */
        IO_COUNT(io, &m->n, c->version == 2 ? 14 : 12, &m->msgs);
        for (uint32_t i = 0; i < m->n && !io->err; i++) {
            sp_published *pm = &m->msgs[i];
            io_u64(io, &pm->publishing_id);
            if (c->version == 2)
                io_str(io, &pm->filter);
            /* A sub-entry batch starts with its top bit set where a message's int32 length
             * would be (a null message, -1, is all ones: that stays a message). */
            if (!io->writing)
                pm->batch_flags =
                    left(io) >= 4 && (io->p[0] & 0x80) && sl_get_u32(io->p) != 0xFFFFFFFFu ? 0x80
                                                                                           : 0;
            if (pm->batch_flags & 0x80) {
                io_u8(io, &pm->batch_flags);
                io_u16(io, &pm->records);
                io_u32(io, &pm->uncompressed_len);
            }
            io_bytes(io, &pm->message);
        }
        break;
    }
    case SP_PUBLISH_CONFIRM: {
        __typeof__(c->u.publish_confirm) *m = &c->u.publish_confirm;
        io_u8(io, &m->publisher_id);
        IO_COUNT(io, &m->n, 8, &m->ids);
        for (uint32_t i = 0; i < m->n && !io->err; i++)
            io_u64(io, &m->ids[i]);
        break;
    }
    case SP_PUBLISH_ERROR: {
        __typeof__(c->u.publish_error) *m = &c->u.publish_error;
        io_u8(io, &m->publisher_id);
        IO_COUNT(io, &m->n, 10, &m->errs);
        for (uint32_t i = 0; i < m->n && !io->err; i++) {
            io_u64(io, &m->errs[i].publishing_id);
            io_u16(io, &m->errs[i].code);
        }
        break;
    }
    case SP_QUERY_PUBLISHER_SEQUENCE:
        io_u32(io, &c->corr);
        io_str(io, &c->u.query_publisher_sequence.reference);
        io_str(io, &c->u.query_publisher_sequence.stream);
        break;
    case SP_DELETE_PUBLISHER:
        io_u32(io, &c->corr);
        io_u8(io, &c->u.delete_publisher.publisher_id);
        break;
    case SP_SUBSCRIBE: {
        __typeof__(c->u.subscribe) *m = &c->u.subscribe;
        io_u32(io, &c->corr);
        io_u8(io, &m->subscription_id);
        io_str(io, &m->stream);
        io_offset(io, &m->offset, 0);
        io_u16(io, &m->credit);
        if (io_present(io, &m->has_properties))
            io_map(io, &m->properties);
        break;
    }
    case SP_DELIVER: {
        __typeof__(c->u.deliver) *m = &c->u.deliver;
        io_u8(io, &m->subscription_id);
        if (c->version == 2)
            io_u64(io, &m->committed_chunk_id);
        io_rest(io, &m->chunk, &m->chunk_len);
        if (!io->writing && !io->err) {
            size_t used;
            sl_err e = sp_chunk_parse(m->chunk, m->chunk_len, SP_CHUNK_DELIVER, &m->hdr, &used);
            if (e)
                fail(io, e);
        }
        break;
    }
    case SP_CREDIT:
        io_u8(io, &c->u.credit.subscription_id);
        io_u16(io, &c->u.credit.credit);
        break;
    case SP_STORE_OFFSET:
        io_str(io, &c->u.store_offset.reference);
        io_str(io, &c->u.store_offset.stream);
        io_u64(io, &c->u.store_offset.offset);
        break;
    case SP_QUERY_OFFSET:
        io_u32(io, &c->corr);
        io_str(io, &c->u.query_offset.reference);
        io_str(io, &c->u.query_offset.stream);
        break;
    case SP_UNSUBSCRIBE:
        io_u32(io, &c->corr);
        io_u8(io, &c->u.unsubscribe.subscription_id);
        break;
    case SP_CREATE:
        io_u32(io, &c->corr);
        io_str(io, &c->u.create.stream);
        io_map(io, &c->u.create.arguments);
        break;
    case SP_DELETE:
        io_u32(io, &c->corr);
        io_str(io, &c->u.delete_stream.stream);
        break;
    case SP_METADATA:
        io_u32(io, &c->corr);
        io_strs(io, &c->u.metadata.streams);
        break;
    case SP_METADATA_UPDATE:
        io_u16(io, &c->u.metadata_update.code);
        io_str(io, &c->u.metadata_update.stream);
        break;
    case SP_PEER_PROPERTIES:
        io_u32(io, &c->corr);
        io_map(io, &c->u.peer_properties.properties);
        break;
    case SP_SASL_HANDSHAKE:
        io_u32(io, &c->corr);
        break;
    case SP_SASL_AUTHENTICATE:
        io_u32(io, &c->corr);
        io_str(io, &c->u.sasl_authenticate.mechanism);
        io_bytes(io, &c->u.sasl_authenticate.data);
        break;
    case SP_TUNE:
        io_u32(io, &c->u.tune.frame_max);
        io_u32(io, &c->u.tune.heartbeat);
        break;
    case SP_OPEN:
        io_u32(io, &c->corr);
        io_str(io, &c->u.open.vhost);
        break;
    case SP_CLOSE:
        io_u32(io, &c->corr);
        io_u16(io, &c->u.close.closing_code);
        io_str(io, &c->u.close.reason);
        break;
    case SP_HEARTBEAT:
        break;
    case SP_ROUTE:
        io_u32(io, &c->corr);
        io_str(io, &c->u.route.routing_key);
        io_str(io, &c->u.route.super_stream);
        break;
    case SP_PARTITIONS:
        io_u32(io, &c->corr);
        io_str(io, &c->u.partitions.super_stream);
        break;
    case SP_CONSUMER_UPDATE:
        io_u32(io, &c->corr);
        io_u8(io, &c->u.consumer_update.subscription_id);
        io_u8(io, &c->u.consumer_update.active);
        break;
    case SP_EXCHANGE_COMMAND_VERSIONS: {
        __typeof__(c->u.exchange_command_versions) *m = &c->u.exchange_command_versions;
        io_u32(io, &c->corr);
        IO_COUNT(io, &m->n, 6, &m->v);
        for (uint32_t i = 0; i < m->n && !io->err; i++) {
            io_u16(io, &m->v[i].key);
            io_u16(io, &m->v[i].min_version);
            io_u16(io, &m->v[i].max_version);
        }
        break;
    }
    case SP_STREAM_STATS:
        io_u32(io, &c->corr);
        io_str(io, &c->u.stream_stats.stream);
        break;
    case SP_CREATE_SUPER_STREAM:
        io_u32(io, &c->corr);
        io_str(io, &c->u.create_super_stream.name);
        io_strs(io, &c->u.create_super_stream.partitions);
        io_strs(io, &c->u.create_super_stream.binding_keys);
        io_map(io, &c->u.create_super_stream.arguments);
        break;
    case SP_DELETE_SUPER_STREAM:
        io_u32(io, &c->corr);
        io_str(io, &c->u.delete_super_stream.name);
        break;
    case SP_RESOLVE_OFFSET_SPEC: {
        __typeof__(c->u.resolve_offset_spec) *m = &c->u.resolve_offset_spec;
        io_u32(io, &c->corr);
        io_str(io, &m->stream);
        io_offset(io, &m->offset, 0);
        if (io_present(io, &m->has_properties))
            io_map(io, &m->properties);
        break;
    }
    default:
        fail(io, io->writing ? SL_ERR_INVALID_PARAMETER : SL_ERR_COMMAND_INVALID);
    }
}

/* Commands that have a response (Publish, Deliver, Heartbeat, ... have none). */
static int has_response(uint16_t key)
{
    switch (key) {
    case SP_PUBLISH:
    case SP_PUBLISH_CONFIRM:
    case SP_PUBLISH_ERROR:
    case SP_DELIVER:
    case SP_STORE_OFFSET:
    case SP_METADATA_UPDATE:
    case SP_HEARTBEAT:
        return 0;
    default:
        return key >= SP_DECLARE_PUBLISHER && key <= SP_KEY_MAX;
    }
}

static void io_response(sp_io *io, sp_cmd *c)
{
    if (!has_response(c->key)) {
        fail(io, io->writing ? SL_ERR_INVALID_PARAMETER : SL_ERR_COMMAND_INVALID);
        return;
    }
    /* Tune's answer is a Tune (the Node.js client sends it without the response bit, the
     * Java client with it); Credit's answer has no correlation id. */
    if (c->key == SP_TUNE) {
        io_u32(io, &c->u.tune.frame_max);
        io_u32(io, &c->u.tune.heartbeat);
        return;
    }
    if (c->key == SP_CREDIT) {
        io_u16(io, &c->code);
        io_u8(io, &c->u.credit_resp.subscription_id);
        return;
    }
    io_u32(io, &c->corr);
    if (c->key != SP_METADATA) /* Metadata's answer has a code per stream instead */
        io_u16(io, &c->code);
    switch (c->key) {
    case SP_DECLARE_PUBLISHER:
    case SP_DELETE_PUBLISHER:
    case SP_SUBSCRIBE:
    case SP_UNSUBSCRIBE:
    case SP_CREATE:
    case SP_DELETE:
    case SP_CLOSE:
    case SP_CREATE_SUPER_STREAM:
    case SP_DELETE_SUPER_STREAM:
        break; /* corr + code */
    case SP_QUERY_PUBLISHER_SEQUENCE:
        io_u64(io, &c->u.query_publisher_sequence_resp.sequence);
        break;
    case SP_QUERY_OFFSET:
        io_u64(io, &c->u.query_offset_resp.offset);
        break;
    case SP_METADATA: {
        __typeof__(c->u.metadata_resp) *m = &c->u.metadata_resp;
        IO_COUNT(io, &m->n_brokers, 8, &m->brokers);
        for (uint32_t i = 0; i < m->n_brokers && !io->err; i++) {
            io_u16(io, &m->brokers[i].reference);
            io_str(io, &m->brokers[i].host);
            io_u32(io, &m->brokers[i].port);
        }
        IO_COUNT(io, &m->n_streams, 10, &m->streams);
        for (uint32_t i = 0; i < m->n_streams && !io->err; i++) {
            sp_stream_metadata *s = &m->streams[i];
            io_str(io, &s->name);
            io_u16(io, &s->code);
            io_u16(io, &s->leader);
            IO_COUNT(io, &s->n_replicas, 2, &s->replicas);
            for (uint32_t j = 0; j < s->n_replicas && !io->err; j++)
                io_u16(io, &s->replicas[j]);
        }
        break;
    }
    case SP_PEER_PROPERTIES:
        io_map(io, &c->u.peer_properties_resp.properties);
        break;
    case SP_SASL_HANDSHAKE:
        io_strs(io, &c->u.sasl_handshake_resp.mechanisms);
        break;
    case SP_SASL_AUTHENTICATE:
        if (io_present(io, &c->u.sasl_authenticate_resp.has_data))
            io_bytes(io, &c->u.sasl_authenticate_resp.data);
        break;
    case SP_OPEN:
        if (io_present(io, &c->u.open_resp.has_properties))
            io_map(io, &c->u.open_resp.properties);
        break;
    case SP_ROUTE:
        io_strs(io, &c->u.route_resp.streams);
        break;
    case SP_PARTITIONS:
        io_strs(io, &c->u.partitions_resp.streams);
        break;
    case SP_CONSUMER_UPDATE:
        io_offset(io, &c->u.consumer_update_resp.offset, 1);
        break;
    case SP_EXCHANGE_COMMAND_VERSIONS: {
        __typeof__(c->u.exchange_command_versions_resp) *m = &c->u.exchange_command_versions_resp;
        IO_COUNT(io, &m->n, 6, &m->v);
        for (uint32_t i = 0; i < m->n && !io->err; i++) {
            io_u16(io, &m->v[i].key);
            io_u16(io, &m->v[i].min_version);
            io_u16(io, &m->v[i].max_version);
        }
        break;
    }
    case SP_STREAM_STATS: {
        __typeof__(c->u.stream_stats_resp) *m = &c->u.stream_stats_resp;
        IO_COUNT(io, &m->n, 10, &m->v);
        for (uint32_t i = 0; i < m->n && !io->err; i++) {
            io_str(io, &m->v[i].key);
            io_i64(io, &m->v[i].value);
        }
        break;
    }
    case SP_RESOLVE_OFFSET_SPEC:
        io_u16(io, &c->u.resolve_offset_spec_resp.offset_type);
        io_u64(io, &c->u.resolve_offset_spec_resp.offset);
        break;
    default:
        /* Publish, Deliver, Heartbeat, ... have no response. */
        fail(io, io->writing ? SL_ERR_INVALID_PARAMETER : SL_ERR_COMMAND_INVALID);
    }
}

static int version_ok(const sp_cmd *c)
{
    uint16_t min, max;
    return sp_cmd_versions(c->key, &min, &max) && c->version >= min && c->version <= max &&
           (c->version == 1 || !c->response);
}

sl_err sp_cmd_decode(const uint8_t *body, size_t len, sp_cmd *c)
{
    memset(c, 0, sizeof *c);
    if (len < SP_FRAME_MIN_BODY)
        return SL_ERR_SYNTAX;
    uint16_t key = sl_get_u16(body);
    c->key = key & (uint16_t)~SP_RESPONSE_FLAG;
    c->response = (key & SP_RESPONSE_FLAG) != 0;
    c->version = sl_get_u16(body + 2);
    if (!version_ok(c))
        return SL_ERR_COMMAND_INVALID;
    sp_io io = {0};
    io.p = body + SP_FRAME_MIN_BODY;
    io.end = body + len;
    io.arena = &c->arena;
    if (c->response)
        io_response(&io, c);
    else
        io_request(&io, c);
    if (!io.err && io.p != io.end)
        io.err = SL_ERR_SYNTAX; /* trailing bytes */
    if (io.err) {
        sp_cmd_free(c);
        return io.err;
    }
    return SL_OK;
}

sl_err sp_cmd_encode(sl_buf *out, const sp_cmd *c, uint32_t frame_max)
{
    if (!version_ok(c))
        return SL_ERR_INVALID_PARAMETER;
    size_t mark =
        sp_frame_begin(out, (uint16_t)(c->key | (c->response ? SP_RESPONSE_FLAG : 0)), c->version);
    sp_io io = {0};
    io.writing = 1;
    io.out = out;
    /* The walk writes from *c and never changes it. */
    sp_cmd *w = (sp_cmd *)c;
    if (c->response)
        io_response(&io, w);
    else
        io_request(&io, w);
    if (io.err) {
        out->len = out->off + mark;
        return io.err;
    }
    return sp_frame_end(out, mark, frame_max);
}

/* ---- names ---- */

static const char *const key_names[SP_KEY_MAX + 1] = {
    [SP_DECLARE_PUBLISHER] = "DeclarePublisher",
    [SP_PUBLISH] = "Publish",
    [SP_PUBLISH_CONFIRM] = "PublishConfirm",
    [SP_PUBLISH_ERROR] = "PublishError",
    [SP_QUERY_PUBLISHER_SEQUENCE] = "QueryPublisherSequence",
    [SP_DELETE_PUBLISHER] = "DeletePublisher",
    [SP_SUBSCRIBE] = "Subscribe",
    [SP_DELIVER] = "Deliver",
    [SP_CREDIT] = "Credit",
    [SP_STORE_OFFSET] = "StoreOffset",
    [SP_QUERY_OFFSET] = "QueryOffset",
    [SP_UNSUBSCRIBE] = "Unsubscribe",
    [SP_CREATE] = "Create",
    [SP_DELETE] = "Delete",
    [SP_METADATA] = "Metadata",
    [SP_METADATA_UPDATE] = "MetadataUpdate",
    [SP_PEER_PROPERTIES] = "PeerProperties",
    [SP_SASL_HANDSHAKE] = "SaslHandshake",
    [SP_SASL_AUTHENTICATE] = "SaslAuthenticate",
    [SP_TUNE] = "Tune",
    [SP_OPEN] = "Open",
    [SP_CLOSE] = "Close",
    [SP_HEARTBEAT] = "Heartbeat",
    [SP_ROUTE] = "Route",
    [SP_PARTITIONS] = "Partitions",
    [SP_CONSUMER_UPDATE] = "ConsumerUpdate",
    [SP_EXCHANGE_COMMAND_VERSIONS] = "ExchangeCommandVersions",
    [SP_STREAM_STATS] = "StreamStats",
    [SP_CREATE_SUPER_STREAM] = "CreateSuperStream",
    [SP_DELETE_SUPER_STREAM] = "DeleteSuperStream",
    [SP_RESOLVE_OFFSET_SPEC] = "ResolveOffsetSpec",
};

const char *sp_key_name(uint16_t key)
{
    key &= (uint16_t)~SP_RESPONSE_FLAG;
    return key <= SP_KEY_MAX && key_names[key] ? key_names[key] : "";
}

static const char *const code_names[] = {
    [SP_OK] = "OK",
    [SP_STREAM_DOES_NOT_EXIST] = "STREAM_DOES_NOT_EXIST",
    [SP_SUBSCRIPTION_ID_ALREADY_EXISTS] = "SUBSCRIPTION_ID_ALREADY_EXISTS",
    [SP_SUBSCRIPTION_ID_DOES_NOT_EXIST] = "SUBSCRIPTION_ID_DOES_NOT_EXIST",
    [SP_STREAM_ALREADY_EXISTS] = "STREAM_ALREADY_EXISTS",
    [SP_STREAM_NOT_AVAILABLE] = "STREAM_NOT_AVAILABLE",
    [SP_SASL_MECHANISM_NOT_SUPPORTED] = "SASL_MECHANISM_NOT_SUPPORTED",
    [SP_AUTHENTICATION_FAILURE] = "AUTHENTICATION_FAILURE",
    [SP_SASL_ERROR] = "SASL_ERROR",
    [SP_SASL_CHALLENGE] = "SASL_CHALLENGE",
    [SP_SASL_AUTHENTICATION_FAILURE_LOOPBACK] = "SASL_AUTHENTICATION_FAILURE_LOOPBACK",
    [SP_VIRTUAL_HOST_ACCESS_FAILURE] = "VIRTUAL_HOST_ACCESS_FAILURE",
    [SP_UNKNOWN_FRAME] = "UNKNOWN_FRAME",
    [SP_FRAME_TOO_LARGE] = "FRAME_TOO_LARGE",
    [SP_INTERNAL_ERROR] = "INTERNAL_ERROR",
    [SP_ACCESS_REFUSED] = "ACCESS_REFUSED",
    [SP_PRECONDITION_FAILED] = "PRECONDITION_FAILED",
    [SP_PUBLISHER_DOES_NOT_EXIST] = "PUBLISHER_DOES_NOT_EXIST",
    [SP_NO_OFFSET] = "NO_OFFSET",
    [SP_SASL_CANNOT_CHANGE_MECHANISM] = "SASL_CANNOT_CHANGE_MECHANISM",
    [SP_SASL_CANNOT_CHANGE_USERNAME] = "SASL_CANNOT_CHANGE_USERNAME",
};

const char *sp_code_name(uint16_t code)
{
    return code < sizeof code_names / sizeof code_names[0] && code_names[code] ? code_names[code]
                                                                               : "";
}

uint16_t sp_code_for_err(sl_err e)
{
    switch (e) {
    case SL_OK:
        return SP_OK;
    case SL_ERR_CONTENT_TOO_LARGE:
        return SP_FRAME_TOO_LARGE;
    case SL_ERR_FRAME:
    case SL_ERR_SYNTAX:
    case SL_ERR_COMMAND_INVALID:
        return SP_UNKNOWN_FRAME;
    default:
        return SP_INTERNAL_ERROR;
    }
}
