/* test_streamproto.c - the stream protocol codec (src/streamproto/): frames, every command
 * both ways, OSIRIS chunks.
 *
 * Where the vectors come from: PROTOCOL.adoc (rabbitmq-server, deps/rabbitmq_stream/docs) has
 * no byte examples, so every vector below was written out by hand, field by field, from its
 * grammar (checked against rabbit_stream_core.erl where the document is loose: see
 * docs/stream-protocol.md). Two numbers were not computed by hand: the CRC-32 of the chunk
 * vector's data (Python's zlib.crc32, the same function as erlang:crc32), and 1700000000000
 * in hex (0x18bcfe56800). The CRC function itself is pinned by the standard check value of
 * CRC-32/ISO-HDLC: crc32("123456789") = 0xcbf43926.
 *
 * Every vector is checked three ways: encoding the struct gives the bytes, decoding the bytes
 * gives the struct, and encoding what was decoded gives the bytes again (canonical). Then
 * every proper prefix of each vector must be refused or be a shorter valid command that is
 * itself canonical, and a byte more must be refused.
 */
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streamproto/chunk.h"
#include "streamproto/cmd.h"
#include "streamproto/frame.h"

/* ---- helpers ---- */

/* "00 11 0001 ..." -> bytes (spaces ignored); returns the length. */
static size_t hex(const char *s, uint8_t *out, size_t cap)
{
    size_t n = 0;
    int hi = -1;
    for (; *s; s++) {
        if (isspace((unsigned char)*s))
            continue;
        int v = isdigit((unsigned char)*s) ? *s - '0' : tolower((unsigned char)*s) - 'a' + 10;
        ck_assert(v >= 0 && v < 16);
        if (hi < 0) {
            hi = v;
        } else {
            ck_assert(n < cap);
            out[n++] = (uint8_t)(hi << 4 | v);
            hi = -1;
        }
    }
    ck_assert_int_eq(hi, -1);
    return n;
}

static int str_is(sp_str s, const char *c)
{
    return !s.null && s.len == strlen(c) && (s.len == 0 || memcmp(s.p, c, s.len) == 0);
}

static void assert_same(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    if (na != nb || memcmp(a, b, na) != 0) {
        fprintf(stderr, "got:    ");
        for (size_t i = 0; i < na; i++)
            fprintf(stderr, "%02x", a[i]);
        fprintf(stderr, "\nwanted: ");
        for (size_t i = 0; i < nb; i++)
            fprintf(stderr, "%02x", b[i]);
        fprintf(stderr, "\n");
    }
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(a, b, na) == 0);
}

/* Decoding body[0..len) and encoding it again gives the same frame. */
static void assert_canonical(const uint8_t *body, size_t len)
{
    sp_cmd d;
    ck_assert_int_eq(sp_cmd_decode(body, len, &d), SL_OK);
    sl_buf b;
    sl_buf_init(&b);
    ck_assert_int_eq(sp_cmd_encode(&b, &d, 0), SL_OK);
    ck_assert_uint_eq(sl_buf_unread(&b), len + 4);
    ck_assert_uint_eq(sl_get_u32(sl_buf_head(&b)), len);
    assert_same(sl_buf_head(&b) + 4, len, body, len);
    sl_buf_free(&b);
    sp_cmd_free(&d);
}

static uint8_t vec[4096];
static size_t vec_len;

/* The vector (a whole frame) is what c encodes to; decodes into *d (caller frees), and
 * every prefix / one byte more behaves. */
static void vector(const sp_cmd *c, const char *hexs, sp_cmd *d)
{
    vec_len = hex(hexs, vec, sizeof vec);
    ck_assert_uint_ge(vec_len, 8);
    ck_assert_uint_eq(sl_get_u32(vec), vec_len - 4);
    sl_buf b;
    sl_buf_init(&b);
    ck_assert_int_eq(sp_cmd_encode(&b, c, 0), SL_OK);
    assert_same(sl_buf_head(&b), sl_buf_unread(&b), vec, vec_len);
    sl_buf_free(&b);

    sp_frame f;
    size_t used;
    ck_assert_int_eq(sp_frame_parse(vec, vec_len, 0, &f, &used), SL_OK);
    ck_assert_uint_eq(used, vec_len);
    ck_assert_uint_eq(f.key, c->key);
    ck_assert_uint_eq(f.response, c->response);
    ck_assert_uint_eq(f.version, c->version);
    ck_assert_int_eq(sp_cmd_decode(f.body, f.size, d), SL_OK);
    ck_assert_uint_eq(d->key, c->key);
    ck_assert_uint_eq(d->response, c->response);
    ck_assert_uint_eq(d->version, c->version);
    ck_assert_uint_eq(d->corr, c->corr);
    ck_assert_uint_eq(d->code, c->code);
    assert_canonical(f.body, f.size);

    /* Every proper prefix: refused as truncated, or a valid shorter command (an optional
     * last field left out) that is canonical too. */
    for (size_t n = 0; n < f.size; n++) {
        sp_cmd p;
        sl_err e = sp_cmd_decode(f.body, n, &p);
        if (e == SL_OK) {
            sp_cmd_free(&p);
            assert_canonical(f.body, n);
        } else {
            ck_assert_int_eq(e, SL_ERR_SYNTAX);
            ck_assert_ptr_null(p.arena);
        }
    }
    /* One byte more: trailing garbage (Deliver: a chunk that no longer adds up). */
    uint8_t more[4096 + 1];
    memcpy(more, f.body, f.size);
    more[f.size] = 0;
    sp_cmd p;
    ck_assert_int_eq(sp_cmd_decode(more, f.size + 1, &p), SL_ERR_SYNTAX);
}

static sp_cmd req(uint16_t key, uint32_t corr)
{
    sp_cmd c;
    memset(&c, 0, sizeof c);
    c.key = key;
    c.version = 1;
    c.corr = corr;
    return c;
}

static sp_cmd resp(uint16_t key, uint32_t corr, uint16_t code)
{
    sp_cmd c = req(key, corr);
    c.response = 1;
    c.code = code;
    return c;
}

#define S(x) sp_cstr(x)

/* ---- frames ---- */

START_TEST(frame_parse_sizes_and_limits)
{
    uint8_t b[16];
    sp_frame f;
    size_t used;
    size_t n = hex("00000004 0017 0001", b, sizeof b); /* Heartbeat */
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(sp_frame_parse(b, i, 0, &f, &used), SL_OK);
        ck_assert_uint_eq(used, 0);
    }
    ck_assert_int_eq(sp_frame_parse(b, n, 0, &f, &used), SL_OK);
    ck_assert_uint_eq(used, 8);
    ck_assert_uint_eq(f.key, SP_HEARTBEAT);
    ck_assert_uint_eq(f.response, 0);
    ck_assert_uint_eq(f.version, 1);
    ck_assert_uint_eq(f.size, 4);
    /* The response flag. */
    hex("00000004 8016 0001", b, sizeof b);
    ck_assert_int_eq(sp_frame_parse(b, 8, 0, &f, &used), SL_OK);
    ck_assert_uint_eq(f.key, SP_CLOSE);
    ck_assert_uint_eq(f.response, 1);
    /* size == frame_max passes, one more is refused from the 4 size octets alone. */
    hex("00002000", b, sizeof b);
    ck_assert_int_eq(sp_frame_parse(b, 4, 8192, &f, &used), SL_OK);
    ck_assert_uint_eq(used, 0);
    hex("00002001", b, sizeof b);
    ck_assert_int_eq(sp_frame_parse(b, 4, 8192, &f, &used), SL_ERR_CONTENT_TOO_LARGE);
    ck_assert_int_eq(sp_frame_parse(b, 4, 0, &f, &used), SL_OK); /* 0: no limit */
    hex("ffffffff", b, sizeof b);
    ck_assert_int_eq(sp_frame_parse(b, 4, SP_INITIAL_FRAME_MAX, &f, &used),
                     SL_ERR_CONTENT_TOO_LARGE);
    /* Too small for key and version. */
    for (uint32_t sz = 0; sz < 4; sz++) {
        b[0] = b[1] = b[2] = 0;
        b[3] = (uint8_t)sz;
        ck_assert_int_eq(sp_frame_parse(b, 8, 0, &f, &used), SL_ERR_FRAME);
    }
}
END_TEST

START_TEST(feeder_takes_any_slices_and_errors_stick)
{
    uint8_t b[256];
    size_t n = hex("00000004 0017 0001"
                   "0000000c 0014 0001 00100000 0000003c"
                   "0000000b 0015 0001 00000004 0001 2f",
                   b, sizeof b);
    for (size_t step = 1; step <= n; step++) {
        sp_feeder fd;
        sp_feeder_init(&fd, SP_INITIAL_FRAME_MAX);
        uint16_t keys[3];
        int k = 0;
        for (size_t at = 0; at < n; at += step) {
            sp_feeder_push(&fd, b + at, at + step <= n ? step : n - at);
            sp_frame f;
            int got;
            for (;;) {
                ck_assert_int_eq(sp_feeder_next(&fd, &f, &got), SL_OK);
                if (!got)
                    break;
                ck_assert_int_lt(k, 3);
                keys[k++] = f.key;
                sp_cmd c;
                ck_assert_int_eq(sp_cmd_decode(f.body, f.size, &c), SL_OK);
                sp_cmd_free(&c);
            }
        }
        ck_assert_int_eq(k, 3);
        ck_assert_uint_eq(keys[0], SP_HEARTBEAT);
        ck_assert_uint_eq(keys[1], SP_TUNE);
        ck_assert_uint_eq(keys[2], SP_OPEN);
        ck_assert_uint_eq(sp_feeder_buffered(&fd), 0);
        sp_feeder_free(&fd);
    }
    /* Over the limit: refused on the size field, and it sticks. */
    sp_feeder fd;
    sp_feeder_init(&fd, SP_INITIAL_FRAME_MAX);
    sp_feeder_push(&fd, "\x00\x00\x20\x01", 4);
    sp_frame f;
    int got;
    ck_assert_int_eq(sp_feeder_next(&fd, &f, &got), SL_ERR_CONTENT_TOO_LARGE);
    ck_assert_int_eq(got, 0);
    sp_feeder_push(&fd, b, 8);
    ck_assert_int_eq(sp_feeder_next(&fd, &f, &got), SL_ERR_CONTENT_TOO_LARGE);
    sp_feeder_free(&fd);
    /* After Tune raises the limit, the same frame header is fine. */
    sp_feeder_init(&fd, SP_INITIAL_FRAME_MAX);
    sp_feeder_set_max(&fd, SP_DEFAULT_FRAME_MAX);
    sp_feeder_push(&fd, "\x00\x00\x20\x01", 4);
    ck_assert_int_eq(sp_feeder_next(&fd, &f, &got), SL_OK);
    ck_assert_int_eq(got, 0);
    ck_assert_uint_eq(sp_feeder_buffered(&fd), 4);
    sp_feeder_free(&fd);
    /* A size under 4. */
    sp_feeder_init(&fd, 0);
    sp_feeder_push(&fd, "\x00\x00\x00\x02\x00\x17", 6);
    ck_assert_int_eq(sp_feeder_next(&fd, &f, &got), SL_ERR_FRAME);
    sp_feeder_free(&fd);
}
END_TEST

START_TEST(encode_refuses_oversize_and_unencodable_leaving_out_alone)
{
    sl_buf b;
    sl_buf_init(&b);
    sl_buf_append(&b, "xy", 2);
    sp_cmd c = req(SP_OPEN, 4);
    c.u.open.vhost = S("/");
    /* body is 11 octets */
    ck_assert_int_eq(sp_cmd_encode(&b, &c, 10), SL_ERR_CONTENT_TOO_LARGE);
    ck_assert_uint_eq(sl_buf_unread(&b), 2);
    ck_assert_int_eq(sp_cmd_encode(&b, &c, 11), SL_OK);
    ck_assert_uint_eq(sl_buf_unread(&b), 2 + 15);
    /* a string over 32767 octets */
    static char big[40000];
    memset(big, 'a', sizeof big - 1);
    c.u.open.vhost = S(big);
    ck_assert_int_eq(sp_cmd_encode(&b, &c, 0), SL_ERR_INVALID_PARAMETER);
    ck_assert_uint_eq(sl_buf_unread(&b), 2 + 15);
    /* no such command, version or direction */
    c = req(0x0020, 1);
    ck_assert_int_eq(sp_cmd_encode(&b, &c, 0), SL_ERR_INVALID_PARAMETER);
    c = req(SP_OPEN, 1);
    c.version = 2;
    ck_assert_int_eq(sp_cmd_encode(&b, &c, 0), SL_ERR_INVALID_PARAMETER);
    c = resp(SP_PUBLISH, 0, 1);
    ck_assert_int_eq(sp_cmd_encode(&b, &c, 0), SL_ERR_INVALID_PARAMETER);
    /* an offset specification decode would refuse */
    c = req(SP_SUBSCRIBE, 1);
    c.u.subscribe.offset.type = SP_OFFSET_NONE;
    ck_assert_int_eq(sp_cmd_encode(&b, &c, 0), SL_ERR_INVALID_PARAMETER);
    c.u.subscribe.offset.type = 6;
    ck_assert_int_eq(sp_cmd_encode(&b, &c, 0), SL_ERR_INVALID_PARAMETER);
    ck_assert_uint_eq(sl_buf_unread(&b), 2 + 15);
    sl_buf_free(&b);
}
END_TEST

/* ---- connection commands ---- */

START_TEST(peer_properties_sasl_tune_open_close_heartbeat)
{
    sp_cmd c, d;
    sp_kv kv[1] = {{S("product"), S("x")}};

    c = req(SP_PEER_PROPERTIES, 1);
    c.u.peer_properties.properties = (sp_map){kv, 1};
    vector(&c, "00000018 0011 0001 00000001 00000001 0007 70726f64756374 0001 78", &d);
    ck_assert_uint_eq(d.u.peer_properties.properties.n, 1);
    ck_assert(str_is(d.u.peer_properties.properties.v[0].key, "product"));
    ck_assert(str_is(d.u.peer_properties.properties.v[0].value, "x"));
    sp_cmd_free(&d);

    c = resp(SP_PEER_PROPERTIES, 1, SP_OK);
    vector(&c, "0000000e 8011 0001 00000001 0001 00000000", &d);
    ck_assert_uint_eq(d.u.peer_properties_resp.properties.n, 0);
    sp_cmd_free(&d);

    c = req(SP_SASL_HANDSHAKE, 2);
    vector(&c, "00000008 0012 0001 00000002", &d);
    sp_cmd_free(&d);

    sp_str mechs[2] = {S("PLAIN"), S("AMQPLAIN")};
    c = resp(SP_SASL_HANDSHAKE, 2, SP_OK);
    c.u.sasl_handshake_resp.mechanisms = (sp_strs){mechs, 2};
    vector(&c, "0000001f 8012 0001 00000002 0001 00000002 0005 504c41494e 0008 414d51504c41494e",
           &d);
    ck_assert_uint_eq(d.u.sasl_handshake_resp.mechanisms.n, 2);
    ck_assert(str_is(d.u.sasl_handshake_resp.mechanisms.v[1], "AMQPLAIN"));
    sp_cmd_free(&d);

    c = req(SP_SASL_AUTHENTICATE, 3);
    c.u.sasl_authenticate.mechanism = S("PLAIN");
    c.u.sasl_authenticate.data = (sp_str){(const uint8_t *)"\0guest\0guest", 12, 0};
    vector(&c, "0000001f 0013 0001 00000003 0005 504c41494e 0000000c 00 6775657374 00 6775657374",
           &d);
    ck_assert(str_is(d.u.sasl_authenticate.mechanism, "PLAIN"));
    ck_assert_uint_eq(d.u.sasl_authenticate.data.len, 12);
    ck_assert(memcmp(d.u.sasl_authenticate.data.p, "\0guest\0guest", 12) == 0);
    sp_cmd_free(&d);
    /* null SASL data (RabbitMQ's client sends -1 for an empty response) */
    c.u.sasl_authenticate.data = (sp_str){NULL, 0, 1};
    vector(&c, "00000013 0013 0001 00000003 0005 504c41494e ffffffff", &d);
    ck_assert_uint_eq(d.u.sasl_authenticate.data.null, 1);
    sp_cmd_free(&d);

    c = resp(SP_SASL_AUTHENTICATE, 3, SP_OK);
    vector(&c, "0000000a 8013 0001 00000003 0001", &d);
    ck_assert_uint_eq(d.u.sasl_authenticate_resp.has_data, 0);
    sp_cmd_free(&d);
    c = resp(SP_SASL_AUTHENTICATE, 3, SP_SASL_CHALLENGE);
    c.u.sasl_authenticate_resp.has_data = 1;
    c.u.sasl_authenticate_resp.data = S("ch");
    vector(&c, "00000010 8013 0001 00000003 000a 00000002 6368", &d);
    ck_assert(str_is(d.u.sasl_authenticate_resp.data, "ch"));
    sp_cmd_free(&d);

    /* Tune: the server's, the Node.js client's answer (no response bit), the Java one's. */
    c = req(SP_TUNE, 0);
    c.u.tune.frame_max = 1048576;
    c.u.tune.heartbeat = 60;
    vector(&c, "0000000c 0014 0001 00100000 0000003c", &d);
    ck_assert_uint_eq(d.u.tune.frame_max, 1048576);
    ck_assert_uint_eq(d.u.tune.heartbeat, 60);
    sp_cmd_free(&d);
    c.response = 1;
    vector(&c, "0000000c 8014 0001 00100000 0000003c", &d);
    ck_assert_uint_eq(d.u.tune.heartbeat, 60);
    sp_cmd_free(&d);

    c = req(SP_OPEN, 4);
    c.u.open.vhost = S("/");
    vector(&c, "0000000b 0015 0001 00000004 0001 2f", &d);
    ck_assert(str_is(d.u.open.vhost, "/"));
    sp_cmd_free(&d);

    sp_kv okv[1] = {{S("k"), S("v")}};
    c = resp(SP_OPEN, 4, SP_OK);
    c.u.open_resp.has_properties = 1;
    c.u.open_resp.properties = (sp_map){okv, 1};
    vector(&c, "00000014 8015 0001 00000004 0001 00000001 0001 6b 0001 76", &d);
    ck_assert_uint_eq(d.u.open_resp.has_properties, 1);
    ck_assert(str_is(d.u.open_resp.properties.v[0].value, "v"));
    sp_cmd_free(&d);
    /* RabbitMQ leaves the map out when it is empty (and on a refusal) */
    c = resp(SP_OPEN, 4, SP_VIRTUAL_HOST_ACCESS_FAILURE);
    vector(&c, "0000000a 8015 0001 00000004 000c", &d);
    ck_assert_uint_eq(d.u.open_resp.has_properties, 0);
    sp_cmd_free(&d);

    c = req(SP_CLOSE, 5);
    c.u.close.closing_code = SP_OK;
    c.u.close.reason = S("OK");
    vector(&c, "0000000e 0016 0001 00000005 0001 0002 4f4b", &d);
    ck_assert_uint_eq(d.u.close.closing_code, 1);
    ck_assert(str_is(d.u.close.reason, "OK"));
    sp_cmd_free(&d);
    c = resp(SP_CLOSE, 5, SP_OK);
    vector(&c, "0000000a 8016 0001 00000005 0001", &d);
    sp_cmd_free(&d);

    c = req(SP_HEARTBEAT, 0);
    vector(&c, "00000004 0017 0001", &d);
    sp_cmd_free(&d);

    sp_command_version cv[2] = {{SP_PUBLISH, 1, 2}, {SP_DELIVER, 1, 2}};
    c = req(SP_EXCHANGE_COMMAND_VERSIONS, 16);
    c.u.exchange_command_versions.v = cv;
    c.u.exchange_command_versions.n = 2;
    vector(&c, "00000018 001b 0001 00000010 00000002 0002 0001 0002 0008 0001 0002", &d);
    ck_assert_uint_eq(d.u.exchange_command_versions.n, 2);
    ck_assert_uint_eq(d.u.exchange_command_versions.v[1].key, SP_DELIVER);
    ck_assert_uint_eq(d.u.exchange_command_versions.v[1].max_version, 2);
    sp_cmd_free(&d);
    sp_command_version cv1[1] = {{SP_STREAM_STATS, 1, 1}};
    c = resp(SP_EXCHANGE_COMMAND_VERSIONS, 16, SP_OK);
    c.u.exchange_command_versions_resp.v = cv1;
    c.u.exchange_command_versions_resp.n = 1;
    vector(&c, "00000014 801b 0001 00000010 0001 00000001 001c 0001 0001", &d);
    ck_assert_uint_eq(d.u.exchange_command_versions_resp.v[0].key, SP_STREAM_STATS);
    sp_cmd_free(&d);
}
END_TEST

/* ---- streams, publishers ---- */

START_TEST(create_delete_metadata_stats)
{
    sp_cmd c, d;
    sp_kv args[1] = {{S("max-age"), S("1h")}};
    c = req(SP_CREATE, 6);
    c.u.create.stream = S("s");
    c.u.create.arguments = (sp_map){args, 1};
    vector(&c, "0000001c 000d 0001 00000006 0001 73 00000001 0007 6d61782d616765 0002 3168", &d);
    ck_assert(str_is(d.u.create.stream, "s"));
    ck_assert(str_is(d.u.create.arguments.v[0].key, "max-age"));
    sp_cmd_free(&d);
    c = resp(SP_CREATE, 6, SP_STREAM_ALREADY_EXISTS);
    vector(&c, "0000000a 800d 0001 00000006 0005", &d);
    sp_cmd_free(&d);

    c = req(SP_DELETE, 7);
    c.u.delete_stream.stream = S("s");
    vector(&c, "0000000b 000e 0001 00000007 0001 73", &d);
    ck_assert(str_is(d.u.delete_stream.stream, "s"));
    sp_cmd_free(&d);
    c = resp(SP_DELETE, 7, SP_STREAM_DOES_NOT_EXIST);
    vector(&c, "0000000a 800e 0001 00000007 0002", &d);
    sp_cmd_free(&d);

    sp_str names[2] = {S("s"), S("t")};
    c = req(SP_METADATA, 14);
    c.u.metadata.streams = (sp_strs){names, 2};
    vector(&c, "00000012 000f 0001 0000000e 00000002 0001 73 0001 74", &d);
    ck_assert(str_is(d.u.metadata.streams.v[1], "t"));
    sp_cmd_free(&d);

    sp_broker brokers[1] = {{0, S("h"), 5552}};
    uint16_t replicas[1] = {0};
    sp_stream_metadata sm[2] = {{S("s"), SP_OK, 0, replicas, 1},
                                {S("t"), SP_STREAM_DOES_NOT_EXIST, 0xFFFF, NULL, 0}};
    c = resp(SP_METADATA, 14, 0); /* no top-level code */
    c.u.metadata_resp.brokers = brokers;
    c.u.metadata_resp.n_brokers = 1;
    c.u.metadata_resp.streams = sm;
    c.u.metadata_resp.n_streams = 2;
    vector(&c,
           "00000031 800f 0001 0000000e"
           " 00000001 0000 0001 68 000015b0"
           " 00000002 0001 73 0001 0000 00000001 0000"
           " 0001 74 0002 ffff 00000000",
           &d);
    ck_assert_uint_eq(d.u.metadata_resp.n_brokers, 1);
    ck_assert(str_is(d.u.metadata_resp.brokers[0].host, "h"));
    ck_assert_uint_eq(d.u.metadata_resp.brokers[0].port, 5552);
    ck_assert_uint_eq(d.u.metadata_resp.n_streams, 2);
    ck_assert_uint_eq(d.u.metadata_resp.streams[0].n_replicas, 1);
    ck_assert_uint_eq(d.u.metadata_resp.streams[1].code, SP_STREAM_DOES_NOT_EXIST);
    ck_assert_uint_eq(d.u.metadata_resp.streams[1].leader, 0xFFFF);
    sp_cmd_free(&d);

    c = req(SP_METADATA_UPDATE, 0);
    c.u.metadata_update.code = SP_STREAM_NOT_AVAILABLE;
    c.u.metadata_update.stream = S("s");
    vector(&c, "00000009 0010 0001 0006 0001 73", &d);
    ck_assert_uint_eq(d.u.metadata_update.code, 6);
    sp_cmd_free(&d);

    c = req(SP_STREAM_STATS, 15);
    c.u.stream_stats.stream = S("s");
    vector(&c, "0000000b 001c 0001 0000000f 0001 73", &d);
    sp_cmd_free(&d);
    sp_stat st[1] = {{S("first_chunk_id"), -1}};
    c = resp(SP_STREAM_STATS, 15, SP_OK);
    c.u.stream_stats_resp.v = st;
    c.u.stream_stats_resp.n = 1;
    vector(&c,
           "00000026 801c 0001 0000000f 0001 00000001 000e 66697273745f6368756e6b5f6964"
           " ffffffffffffffff",
           &d);
    ck_assert(str_is(d.u.stream_stats_resp.v[0].key, "first_chunk_id"));
    ck_assert_int_eq(d.u.stream_stats_resp.v[0].value, -1);
    sp_cmd_free(&d);
}
END_TEST

START_TEST(publishers)
{
    sp_cmd c, d;
    c = req(SP_DECLARE_PUBLISHER, 8);
    c.u.declare_publisher.reference = S("p");
    c.u.declare_publisher.stream = S("s");
    vector(&c, "0000000f 0001 0001 00000008 00 0001 70 0001 73", &d);
    ck_assert(str_is(d.u.declare_publisher.reference, "p"));
    sp_cmd_free(&d);
    c.u.declare_publisher.publisher_id = 3;
    c.u.declare_publisher.reference = (sp_str){NULL, 0, 1}; /* no reference: null */
    vector(&c, "0000000e 0001 0001 00000008 03 ffff 0001 73", &d);
    ck_assert_uint_eq(d.u.declare_publisher.publisher_id, 3);
    ck_assert_uint_eq(d.u.declare_publisher.reference.null, 1);
    sp_cmd_free(&d);
    c = resp(SP_DECLARE_PUBLISHER, 8, SP_OK);
    vector(&c, "0000000a 8001 0001 00000008 0001", &d);
    sp_cmd_free(&d);

    sp_published m1[2] = {{.publishing_id = 1, .message = S("a")},
                          {.publishing_id = 2, .message = S("bc")}};
    c = req(SP_PUBLISH, 0);
    c.u.publish.msgs = m1;
    c.u.publish.n = 2;
    vector(&c,
           "00000024 0002 0001 00 00000002"
           " 0000000000000001 00000001 61"
           " 0000000000000002 00000002 6263",
           &d);
    ck_assert_uint_eq(d.u.publish.n, 2);
    ck_assert_uint_eq(d.u.publish.msgs[1].publishing_id, 2);
    ck_assert(str_is(d.u.publish.msgs[1].message, "bc"));
    sp_cmd_free(&d);

    /* a sub-entry batch (gzip, 2 records, 9 octets uncompressed) beside a message */
    sp_published mb[2] = {{.publishing_id = 3,
                           .batch_flags = 0x90,
                           .records = 2,
                           .uncompressed_len = 9,
                           .message = S("zz")},
                          {.publishing_id = 4, .message = S("a")}};
    c = req(SP_PUBLISH, 0);
    c.u.publish.msgs = mb;
    c.u.publish.n = 2;
    vector(&c,
           "0000002b 0002 0001 00 00000002"
           " 0000000000000003 90 0002 00000009 00000002 7a7a"
           " 0000000000000004 00000001 61",
           &d);
    ck_assert_uint_eq(d.u.publish.msgs[0].batch_flags, 0x90);
    ck_assert_uint_eq(d.u.publish.msgs[0].records, 2);
    ck_assert_uint_eq(d.u.publish.msgs[0].uncompressed_len, 9);
    ck_assert(str_is(d.u.publish.msgs[0].message, "zz"));
    ck_assert_uint_eq(d.u.publish.msgs[1].batch_flags, 0);
    sp_cmd_free(&d);

    sp_published m2[1] = {{.publishing_id = 5, .filter = S("eu"), .message = S("x")}};
    c = req(SP_PUBLISH, 0);
    c.version = 2;
    c.u.publish.publisher_id = 1;
    c.u.publish.msgs = m2;
    c.u.publish.n = 1;
    vector(&c, "0000001a 0002 0002 01 00000001 0000000000000005 0002 6575 00000001 78", &d);
    ck_assert(str_is(d.u.publish.msgs[0].filter, "eu"));
    ck_assert(str_is(d.u.publish.msgs[0].message, "x"));
    sp_cmd_free(&d);

    uint64_t ids[2] = {1, 2};
    c = req(SP_PUBLISH_CONFIRM, 0);
    c.u.publish_confirm.ids = ids;
    c.u.publish_confirm.n = 2;
    vector(&c, "00000019 0003 0001 00 00000002 0000000000000001 0000000000000002", &d);
    ck_assert_uint_eq(d.u.publish_confirm.ids[1], 2);
    sp_cmd_free(&d);

    sp_publishing_error pe[1] = {{3, SP_PUBLISHER_DOES_NOT_EXIST}};
    c = req(SP_PUBLISH_ERROR, 0);
    c.u.publish_error.errs = pe;
    c.u.publish_error.n = 1;
    vector(&c, "00000013 0004 0001 00 00000001 0000000000000003 0012", &d);
    ck_assert_uint_eq(d.u.publish_error.errs[0].code, 0x12);
    sp_cmd_free(&d);

    c = req(SP_QUERY_PUBLISHER_SEQUENCE, 9);
    c.u.query_publisher_sequence.reference = S("p");
    c.u.query_publisher_sequence.stream = S("s");
    vector(&c, "0000000e 0005 0001 00000009 0001 70 0001 73", &d);
    sp_cmd_free(&d);
    c = resp(SP_QUERY_PUBLISHER_SEQUENCE, 9, SP_OK);
    c.u.query_publisher_sequence_resp.sequence = 42;
    vector(&c, "00000012 8005 0001 00000009 0001 000000000000002a", &d);
    ck_assert_uint_eq(d.u.query_publisher_sequence_resp.sequence, 42);
    sp_cmd_free(&d);

    c = req(SP_DELETE_PUBLISHER, 10);
    vector(&c, "00000009 0006 0001 0000000a 00", &d);
    sp_cmd_free(&d);
    c = resp(SP_DELETE_PUBLISHER, 10, SP_PUBLISHER_DOES_NOT_EXIST);
    vector(&c, "0000000a 8006 0001 0000000a 0012", &d);
    sp_cmd_free(&d);
}
END_TEST

/* ---- consumers ---- */

START_TEST(subscribe_every_offset_specification)
{
    sp_cmd c, d;
    c = req(SP_SUBSCRIBE, 11);
    c.u.subscribe.subscription_id = 1;
    c.u.subscribe.stream = S("s");
    c.u.subscribe.credit = 10;
    const char *plain[] = {
        NULL,
        "00000010 0007 0001 0000000b 01 0001 73 0001 000a",
        "00000010 0007 0001 0000000b 01 0001 73 0002 000a",
        "00000010 0007 0001 0000000b 01 0001 73 0003 000a",
    };
    for (uint16_t t = SP_OFFSET_FIRST; t <= SP_OFFSET_NEXT; t++) {
        c.u.subscribe.offset.type = t;
        vector(&c, plain[t], &d);
        ck_assert_uint_eq(d.u.subscribe.offset.type, t);
        ck_assert_uint_eq(d.u.subscribe.credit, 10);
        ck_assert_uint_eq(d.u.subscribe.has_properties, 0);
        sp_cmd_free(&d);
    }
    c.u.subscribe.offset = (sp_offset_spec){SP_OFFSET_OFFSET, 42};
    vector(&c, "00000018 0007 0001 0000000b 01 0001 73 0004 000000000000002a 000a", &d);
    ck_assert_uint_eq(d.u.subscribe.offset.value, 42);
    sp_cmd_free(&d);
    c.u.subscribe.offset = (sp_offset_spec){SP_OFFSET_TIMESTAMP, 1700000000000ull};
    vector(&c, "00000018 0007 0001 0000000b 01 0001 73 0005 0000018bcfe56800 000a", &d);
    ck_assert_uint_eq(d.u.subscribe.offset.value, 1700000000000ull);
    sp_cmd_free(&d);
    c.u.subscribe.offset = (sp_offset_spec){SP_OFFSET_TIMESTAMP, (uint64_t)-1000}; /* negative */
    vector(&c, "00000018 0007 0001 0000000b 01 0001 73 0005 fffffffffffffc18 000a", &d);
    ck_assert_int_eq((int64_t)d.u.subscribe.offset.value, -1000);
    sp_cmd_free(&d);

    sp_kv props[1] = {{S("single-active-consumer"), S("true")}};
    c.u.subscribe.offset = (sp_offset_spec){SP_OFFSET_FIRST, 0};
    c.u.subscribe.has_properties = 1;
    c.u.subscribe.properties = (sp_map){props, 1};
    vector(&c,
           "00000032 0007 0001 0000000b 01 0001 73 0001 000a 00000001"
           " 0016 73696e676c652d6163746976652d636f6e73756d6572 0004 74727565",
           &d);
    ck_assert_uint_eq(d.u.subscribe.has_properties, 1);
    ck_assert(str_is(d.u.subscribe.properties.v[0].key, "single-active-consumer"));
    ck_assert(str_is(d.u.subscribe.properties.v[0].value, "true"));
    sp_cmd_free(&d);

    c = resp(SP_SUBSCRIBE, 11, SP_SUBSCRIPTION_ID_ALREADY_EXISTS);
    vector(&c, "0000000a 8007 0001 0000000b 0003", &d);
    sp_cmd_free(&d);

    /* Offset types out of range: 0 (none) is ConsumerUpdate's only; 6 is nobody's. */
    uint8_t b[64];
    size_t n = hex("0007 0001 0000000b 01 0001 73 0000 000a", b, sizeof b);
    ck_assert_int_eq(sp_cmd_decode(b, n, &d), SL_ERR_SYNTAX);
    n = hex("0007 0001 0000000b 01 0001 73 0006 000a", b, sizeof b);
    ck_assert_int_eq(sp_cmd_decode(b, n, &d), SL_ERR_SYNTAX);
}
END_TEST

START_TEST(credit_offsets_unsubscribe_consumer_update)
{
    sp_cmd c, d;
    c = req(SP_CREDIT, 0);
    c.u.credit.subscription_id = 1;
    c.u.credit.credit = 5;
    vector(&c, "00000007 0009 0001 01 0005", &d);
    ck_assert_uint_eq(d.u.credit.credit, 5);
    sp_cmd_free(&d);
    c = resp(SP_CREDIT, 0, SP_SUBSCRIPTION_ID_DOES_NOT_EXIST);
    c.u.credit_resp.subscription_id = 1;
    vector(&c, "00000007 8009 0001 0004 01", &d); /* no correlation id */
    ck_assert_uint_eq(d.u.credit_resp.subscription_id, 1);
    sp_cmd_free(&d);

    c = req(SP_STORE_OFFSET, 0);
    c.u.store_offset.reference = S("r");
    c.u.store_offset.stream = S("s");
    c.u.store_offset.offset = 7;
    vector(&c, "00000012 000a 0001 0001 72 0001 73 0000000000000007", &d);
    ck_assert_uint_eq(d.u.store_offset.offset, 7);
    sp_cmd_free(&d);

    c = req(SP_QUERY_OFFSET, 12);
    c.u.query_offset.reference = S("r");
    c.u.query_offset.stream = S("s");
    vector(&c, "0000000e 000b 0001 0000000c 0001 72 0001 73", &d);
    sp_cmd_free(&d);
    c = resp(SP_QUERY_OFFSET, 12, SP_NO_OFFSET);
    vector(&c, "00000012 800b 0001 0000000c 0013 0000000000000000", &d);
    sp_cmd_free(&d);

    c = req(SP_UNSUBSCRIBE, 13);
    c.u.unsubscribe.subscription_id = 1;
    vector(&c, "00000009 000c 0001 0000000d 01", &d);
    sp_cmd_free(&d);
    c = resp(SP_UNSUBSCRIBE, 13, SP_OK);
    vector(&c, "0000000a 800c 0001 0000000d 0001", &d);
    sp_cmd_free(&d);

    c = req(SP_CONSUMER_UPDATE, 17);
    c.u.consumer_update.subscription_id = 1;
    c.u.consumer_update.active = 1;
    vector(&c, "0000000a 001a 0001 00000011 01 01", &d);
    ck_assert_uint_eq(d.u.consumer_update.active, 1);
    sp_cmd_free(&d);
    c = resp(SP_CONSUMER_UPDATE, 17, SP_OK);
    c.u.consumer_update_resp.offset = (sp_offset_spec){SP_OFFSET_OFFSET, 10};
    vector(&c, "00000014 801a 0001 00000011 0001 0004 000000000000000a", &d);
    ck_assert_uint_eq(d.u.consumer_update_resp.offset.value, 10);
    sp_cmd_free(&d);
    c.u.consumer_update_resp.offset = (sp_offset_spec){SP_OFFSET_NONE, 0};
    vector(&c, "0000000c 801a 0001 00000011 0001 0000", &d);
    ck_assert_uint_eq(d.u.consumer_update_resp.offset.type, SP_OFFSET_NONE);
    sp_cmd_free(&d);

    c = req(SP_RESOLVE_OFFSET_SPEC, 22);
    c.u.resolve_offset_spec.stream = S("s");
    c.u.resolve_offset_spec.offset.type = SP_OFFSET_NEXT;
    vector(&c, "0000000d 001f 0001 00000016 0001 73 0003", &d);
    sp_cmd_free(&d);
    c = resp(SP_RESOLVE_OFFSET_SPEC, 22, SP_OK);
    c.u.resolve_offset_spec_resp.offset_type = SP_OFFSET_OFFSET;
    c.u.resolve_offset_spec_resp.offset = 10;
    vector(&c, "00000014 801f 0001 00000016 0001 0004 000000000000000a", &d);
    sp_cmd_free(&d);
}
END_TEST

START_TEST(super_streams)
{
    sp_cmd c, d;
    sp_str parts[2] = {S("i-0"), S("i-1")};
    sp_str keys[2] = {S("0"), S("1")};
    c = req(SP_CREATE_SUPER_STREAM, 18);
    c.u.create_super_stream.name = S("i");
    c.u.create_super_stream.partitions = (sp_strs){parts, 2};
    c.u.create_super_stream.binding_keys = (sp_strs){keys, 2};
    vector(&c,
           "00000027 001d 0001 00000012 0001 69 00000002 0003 692d30 0003 692d31"
           " 00000002 0001 30 0001 31 00000000",
           &d);
    ck_assert_uint_eq(d.u.create_super_stream.partitions.n, 2);
    ck_assert(str_is(d.u.create_super_stream.binding_keys.v[1], "1"));
    ck_assert_uint_eq(d.u.create_super_stream.arguments.n, 0);
    sp_cmd_free(&d);
    c = resp(SP_CREATE_SUPER_STREAM, 18, SP_OK);
    vector(&c, "0000000a 801d 0001 00000012 0001", &d);
    sp_cmd_free(&d);

    c = req(SP_DELETE_SUPER_STREAM, 19);
    c.u.delete_super_stream.name = S("i");
    vector(&c, "0000000b 001e 0001 00000013 0001 69", &d);
    sp_cmd_free(&d);
    c = resp(SP_DELETE_SUPER_STREAM, 19, SP_OK);
    vector(&c, "0000000a 801e 0001 00000013 0001", &d);
    sp_cmd_free(&d);

    c = req(SP_PARTITIONS, 20);
    c.u.partitions.super_stream = S("i");
    vector(&c, "0000000b 0019 0001 00000014 0001 69", &d);
    sp_cmd_free(&d);
    c = resp(SP_PARTITIONS, 20, SP_OK);
    c.u.partitions_resp.streams = (sp_strs){parts, 2};
    vector(&c, "00000018 8019 0001 00000014 0001 00000002 0003 692d30 0003 692d31", &d);
    ck_assert(str_is(d.u.partitions_resp.streams.v[0], "i-0"));
    sp_cmd_free(&d);

    c = req(SP_ROUTE, 21);
    c.u.route.routing_key = S("0");
    c.u.route.super_stream = S("i");
    vector(&c, "0000000e 0018 0001 00000015 0001 30 0001 69", &d);
    sp_cmd_free(&d);
    c = resp(SP_ROUTE, 21, SP_OK);
    c.u.route_resp.streams = (sp_strs){parts, 1};
    vector(&c, "00000013 8018 0001 00000015 0001 00000001 0003 692d30", &d);
    ck_assert_uint_eq(d.u.route_resp.streams.n, 1);
    sp_cmd_free(&d);
}
END_TEST

/* ---- malformed bodies ---- */

static sl_err dec(const char *hexs)
{
    uint8_t b[256];
    size_t n = hex(hexs, b, sizeof b);
    sp_cmd d;
    sl_err e = sp_cmd_decode(b, n, &d);
    if (e == SL_OK)
        sp_cmd_free(&d);
    else
        ck_assert_ptr_null(d.arena);
    return e;
}

START_TEST(malformed_bodies_are_refused_clearly)
{
    /* shorter than key + version */
    ck_assert_int_eq(dec(""), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0017 00"), SL_ERR_SYNTAX);
    /* unknown key, version, direction */
    ck_assert_int_eq(dec("0020 0001"), SL_ERR_COMMAND_INVALID);
    ck_assert_int_eq(dec("0000 0001"), SL_ERR_COMMAND_INVALID);
    ck_assert_int_eq(dec("0017 0002"), SL_ERR_COMMAND_INVALID);
    ck_assert_int_eq(dec("0002 0003 00 00000000"), SL_ERR_COMMAND_INVALID);
    ck_assert_int_eq(dec("0015 0000 00000004 0001 2f"), SL_ERR_COMMAND_INVALID);
    ck_assert_int_eq(dec("8002 0001 00000001 0001"), SL_ERR_COMMAND_INVALID); /* Publish resp */
    ck_assert_int_eq(dec("8017 0001"), SL_ERR_COMMAND_INVALID);
    ck_assert_int_eq(dec("800a 0001 00000001 0001"), SL_ERR_COMMAND_INVALID);
    /* trailing bytes */
    ck_assert_int_eq(dec("0017 0001 00"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0012 0001 00000002 00"), SL_ERR_SYNTAX);
    /* strings: -1 is null, below that is refused, beyond the body too */
    ck_assert_int_eq(dec("0015 0001 00000004 ffff"), SL_OK);
    ck_assert_int_eq(dec("0015 0001 00000004 fffe"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0015 0001 00000004 8000"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0015 0001 00000004 0002 2f"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0015 0001 00000004 7fff 2f"), SL_ERR_SYNTAX);
    /* bytes: the same with int32 lengths */
    ck_assert_int_eq(dec("0002 0001 00 00000001 0000000000000001 ffffffff"), SL_OK);
    ck_assert_int_eq(dec("0002 0001 00 00000001 0000000000000001 fffffffe"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0002 0001 00 00000001 0000000000000001 80000000"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0002 0001 00 00000001 0000000000000001 7fffffff 61"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0013 0001 00000003 0005 504c41494e ffffff00"), SL_ERR_SYNTAX);
    /* counts: negative, or more elements than the bytes left could hold (refused before
     * anything is allocated: 0x7fffffff publish entries would be 100 GB of structs) */
    ck_assert_int_eq(dec("0002 0001 00 ffffffff"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0002 0001 00 80000000"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0002 0001 00 7fffffff"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0002 0001 00 00000001 0000000000000001 0000"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0003 0001 00 00000002 0000000000000001"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0003 0001 00 20000001 0000000000000001"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0011 0001 00000001 ffffffff"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("0011 0001 00000001 00000001 0001 61"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("000f 0001 00000001 40000000 0000"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("800f 0001 00000001 00000000 00000001 0001 73 0001 0000 7fffffff"),
                     SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("801c 0001 00000001 0001 00000001 0000"), SL_ERR_SYNTAX);
    ck_assert_int_eq(dec("801b 0001 00000001 0001 00000001 0001 0001"), SL_ERR_SYNTAX);
    /* an empty array is fine */
    ck_assert_int_eq(dec("0011 0001 00000001 00000000"), SL_OK);
    /* a timestamp offset cut short */
    ck_assert_int_eq(dec("0007 0001 0000000b 01 0001 73 0005 00000000 000a"), SL_ERR_SYNTAX);
    /* ConsumerUpdate's answer with an unknown offset type */
    ck_assert_int_eq(dec("801a 0001 00000011 0001 0009"), SL_ERR_SYNTAX);
}
END_TEST

/* ---- chunks ---- */

/* header: magic 5 version 0, user, 2 entries, 3 records, ts 1700000000000, epoch 1, first
 * offset 100, crc, data length 28, no trailer, no bloom; data: simple "hi", then an
 * uncompressed batch of 2 records "a" and "bc" (body 11 octets). */
static const char *chunk_hex = "50 00 0002 00000003 0000018bcfe56800 0000000000000001"
                               " 0000000000000064 4901c709 0000001c 00000000 00 000000"
                               " 00000002 6869"
                               " 80 0002 0000000b 0000000b 00000001 61 00000002 6263";

START_TEST(crc32_fast_path_matches_zlib)
{
    /* crc32.c's carry-less multiplication path against zlib's: every length up to 600 and
     * some long ones, at every alignment 0..15, from fresh and running values */
    enum { MAX = 70000 };
    uint8_t *buf = malloc(MAX + 16);
    ck_assert_ptr_nonnull(buf);
    uint32_t x = 0x12345678u;
    for (size_t i = 0; i < MAX + 16; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (uint8_t)(x >> 16);
    }
    static const size_t longs[] = {1024, 4095, 4096, 4097, 65536, 65551, MAX};
    for (size_t al = 0; al < 16; al++) {
        for (size_t n = 0; n < 600 + sizeof longs / sizeof longs[0]; n++) {
            size_t len = n < 600 ? n : longs[n - 600];
            uint32_t start = n % 3 == 0 ? 0 : (uint32_t)(n * 2654435761u);
            ck_assert_uint_eq(sp_crc32_update(start, buf + al, len),
                              sp_crc32_update_zlib(start, buf + al, len));
        }
    }
    /* pieces chain: CRC(a || b) from CRC(a) */
    ck_assert_uint_eq(sp_crc32_update(sp_crc32(buf, 1000), buf + 1000, 3000), sp_crc32(buf, 4000));
    free(buf);
}
END_TEST

START_TEST(chunk_builder_matches_the_hand_vector_and_parses_back)
{
    uint8_t want[256];
    size_t n = hex(chunk_hex, want, sizeof want);
    ck_assert_uint_eq(n, 48 + 28);
    /* the CRC function is CRC-32/ISO-HDLC (zlib, erlang:crc32) */
    ck_assert_uint_eq(sp_crc32((const uint8_t *)"123456789", 9), 0xcbf43926u);

    sl_buf body, out;
    sl_buf_init(&body);
    sl_buf_init(&out);
    sl_buf_append(&out, "zz", 2); /* the builder works after existing bytes */
    sl_buf_consume(&out, 1);
    sp_batch_put_record(&body, "a", 1);
    sp_batch_put_record(&body, "bc", 2);
    sp_chunk_builder b;
    sp_chunk_begin(&b, &out, SP_CHUNK_USER, 1700000000000ll, 1, 100);
    sp_chunk_add_simple(&b, "hi", 2);
    sp_chunk_add_batch(&b, SP_COMPRESSION_NONE, 2, (uint32_t)sl_buf_unread(&body),
                       sl_buf_head(&body), sl_buf_unread(&body));
    ck_assert_int_eq(sp_chunk_end(&b), SL_OK);
    assert_same(sl_buf_head(&out) + 1, sl_buf_unread(&out) - 1, want, n);

    for (int layout = SP_CHUNK_LOG; layout <= SP_CHUNK_DELIVER; layout++) {
        sp_chunk c;
        size_t used;
        ck_assert_int_eq(sp_chunk_parse(want, n, layout, &c, &used), SL_OK);
        ck_assert_uint_eq(used, n);
        ck_assert_uint_eq(c.magic, 5);
        ck_assert_uint_eq(c.version, 0);
        ck_assert_uint_eq(c.type, SP_CHUNK_USER);
        ck_assert_uint_eq(c.num_entries, 2);
        ck_assert_uint_eq(c.num_records, 3);
        ck_assert_int_eq(c.timestamp, 1700000000000ll);
        ck_assert_uint_eq(c.epoch, 1);
        ck_assert_uint_eq(c.first_offset, 100);
        ck_assert_uint_eq(c.data_len, 28);
        ck_assert_int_eq(sp_chunk_check_crc(&c), SL_OK);
        ck_assert_int_eq(sp_chunk_check_entries(&c), SL_OK);

        sp_entry_iter it;
        sp_entry e;
        int got;
        sp_entry_iter_init(&it, &c);
        ck_assert_int_eq(sp_entry_next(&it, &e, &got), SL_OK);
        ck_assert_int_eq(got, 1);
        ck_assert_uint_eq(e.batch, 0);
        ck_assert_uint_eq(e.len, 2);
        ck_assert(memcmp(e.body, "hi", 2) == 0);
        ck_assert_int_eq(sp_entry_next(&it, &e, &got), SL_OK);
        ck_assert_int_eq(got, 1);
        ck_assert_uint_eq(e.batch, 1);
        ck_assert_uint_eq(e.compression, SP_COMPRESSION_NONE);
        ck_assert_uint_eq(e.num_records, 2);
        ck_assert_uint_eq(e.uncompressed_len, 11);
        sp_record_iter ri;
        const uint8_t *rec;
        uint32_t rlen;
        sp_record_iter_init(&ri, &e);
        ck_assert_int_eq(sp_record_next(&ri, &rec, &rlen, &got), SL_OK);
        ck_assert(got && rlen == 1 && rec[0] == 'a');
        ck_assert_int_eq(sp_record_next(&ri, &rec, &rlen, &got), SL_OK);
        ck_assert(got && rlen == 2 && memcmp(rec, "bc", 2) == 0);
        ck_assert_int_eq(sp_record_next(&ri, &rec, &rlen, &got), SL_OK);
        ck_assert_int_eq(got, 0);
        ck_assert_int_eq(sp_entry_next(&it, &e, &got), SL_OK);
        ck_assert_int_eq(got, 0);
    }
    /* the compression type byte: gzip batch */
    sl_buf_free(&out);
    sl_buf_init(&out);
    sp_chunk_begin(&b, &out, SP_CHUNK_USER, 0, 0, 0);
    sp_chunk_add_batch(&b, SP_COMPRESSION_GZIP, 7, 1000, "zz", 2);
    ck_assert_int_eq(sp_chunk_end(&b), SL_OK);
    ck_assert_uint_eq(sl_buf_head(&out)[48], 0x90);
    sp_chunk c;
    size_t used;
    ck_assert_int_eq(
        sp_chunk_parse(sl_buf_head(&out), sl_buf_unread(&out), SP_CHUNK_LOG, &c, &used), SL_OK);
    ck_assert_int_eq(sp_chunk_check_entries(&c), SL_OK);
    ck_assert_uint_eq(c.num_records, 7);
    /* builder refusals leave nothing behind */
    size_t before = sl_buf_unread(&out);
    sp_chunk_begin(&b, &out, SP_CHUNK_USER, 0, 0, 0);
    sp_chunk_add_batch(&b, 8, 1, 1, "z", 1);
    ck_assert_int_eq(sp_chunk_end(&b), SL_ERR_INVALID_PARAMETER);
    ck_assert_uint_eq(sl_buf_unread(&out), before);
    sl_buf_free(&out);
    sl_buf_free(&body);
}
END_TEST

START_TEST(chunk_layouts_and_damage)
{
    uint8_t c0[256], b[512];
    size_t n = hex(chunk_hex, c0, sizeof c0);
    sp_chunk c;
    size_t used;

    /* The log layout with a 3-octet bloom filter and a 2-octet trailer. */
    memcpy(b, c0, 48);
    b[44] = 3;
    b[43] = 2; /* trailer length 2 */
    memcpy(b + 48, "BBB", 3);
    memcpy(b + 51, c0 + 48, 28);
    memcpy(b + 79, "TT", 2);
    ck_assert_int_eq(sp_chunk_parse(b, 81 + 5, SP_CHUNK_LOG, &c, &used), SL_OK);
    ck_assert_uint_eq(used, 81); /* a log holds the next chunk right after */
    ck_assert(memcmp(c.bloom, "BBB", 3) == 0 && memcmp(c.trailer, "TT", 2) == 0);
    ck_assert_int_eq(sp_chunk_check_crc(&c), SL_OK);
    ck_assert_int_eq(sp_chunk_check_entries(&c), SL_OK);
    ck_assert_int_eq(sp_chunk_parse(b, 80, SP_CHUNK_LOG, &c, &used), SL_ERR_SYNTAX);

    /* Deliver: header as stored (bloom size 3, trailer 2), data, and no bloom; the trailer
     * or nothing after the data. */
    memcpy(b + 48, c0 + 48, 28);
    ck_assert_int_eq(sp_chunk_parse(b, 76, SP_CHUNK_DELIVER, &c, &used), SL_OK);
    ck_assert_ptr_null(c.bloom);
    ck_assert_ptr_null(c.trailer);
    ck_assert_int_eq(sp_chunk_check_crc(&c), SL_OK);
    memcpy(b + 76, "TT", 2);
    ck_assert_int_eq(sp_chunk_parse(b, 78, SP_CHUNK_DELIVER, &c, &used), SL_OK);
    ck_assert(c.trailer && memcmp(c.trailer, "TT", 2) == 0);
    ck_assert_int_eq(sp_chunk_parse(b, 77, SP_CHUNK_DELIVER, &c, &used), SL_ERR_SYNTAX);
    ck_assert_int_eq(sp_chunk_parse(b, 75, SP_CHUNK_DELIVER, &c, &used), SL_ERR_SYNTAX);

    /* truncated header; bad magic; bad version */
    for (size_t i = 0; i < 48; i++)
        ck_assert_int_eq(sp_chunk_parse(c0, i, SP_CHUNK_DELIVER, &c, &used), SL_ERR_SYNTAX);
    memcpy(b, c0, n);
    b[0] = 0x40;
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_DELIVER, &c, &used), SL_ERR_FRAME);
    b[0] = 0x51;
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_DELIVER, &c, &used), SL_ERR_FRAME);

    /* a flipped data bit fails the CRC */
    memcpy(b, c0, n);
    b[n - 1] ^= 1;
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_DELIVER, &c, &used), SL_OK);
    ck_assert_int_eq(sp_chunk_check_crc(&c), SL_ERR_FRAME);

    /* data length beyond the bytes; 0xffffffff must not wrap */
    memcpy(b, c0, n);
    sl_buf tmp = {b, 0, n, n};
    sl_buf_patch_u32(&tmp, 36, 0xffffffffu);
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_DELIVER, &c, &used), SL_ERR_SYNTAX);
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_LOG, &c, &used), SL_ERR_SYNTAX);
    sl_buf_patch_u32(&tmp, 36, 28);
    sl_buf_patch_u32(&tmp, 40, 0xffffffffu);
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_LOG, &c, &used), SL_ERR_SYNTAX);

    /* entries that do not add up: count, records, an entry longer than the data */
    memcpy(b, c0, n);
    b[3] = 3; /* 3 entries claimed */
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_DELIVER, &c, &used), SL_OK);
    ck_assert_int_eq(sp_chunk_check_entries(&c), SL_ERR_SYNTAX);
    memcpy(b, c0, n);
    b[7] = 4; /* 4 records claimed */
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_DELIVER, &c, &used), SL_OK);
    ck_assert_int_eq(sp_chunk_check_entries(&c), SL_ERR_SYNTAX);
    memcpy(b, c0, n);
    b[48 + 3] = 0x30; /* simple entry of 48 octets */
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_DELIVER, &c, &used), SL_OK);
    ck_assert_int_eq(sp_chunk_check_entries(&c), SL_ERR_SYNTAX);
    memcpy(b, c0, n);
    b[48 + 6 + 10] = 0x0c; /* batch body one octet longer than what is there */
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_DELIVER, &c, &used), SL_OK);
    ck_assert_int_eq(sp_chunk_check_entries(&c), SL_ERR_SYNTAX);
    /* a batch record running past its body */
    memcpy(b, c0, n);
    b[48 + 6 + 11 + 3] = 0x09;
    ck_assert_int_eq(sp_chunk_parse(b, n, SP_CHUNK_DELIVER, &c, &used), SL_OK);
    sp_entry_iter it;
    sp_entry e;
    int got;
    sp_entry_iter_init(&it, &c);
    ck_assert_int_eq(sp_entry_next(&it, &e, &got), SL_OK);
    ck_assert_int_eq(sp_entry_next(&it, &e, &got), SL_OK);
    sp_record_iter ri;
    const uint8_t *rec;
    uint32_t rlen;
    sp_record_iter_init(&ri, &e);
    ck_assert_int_eq(sp_record_next(&ri, &rec, &rlen, &got), SL_ERR_SYNTAX);
}
END_TEST

START_TEST(deliver_v1_and_v2_carry_the_chunk)
{
    char hexs[1024];
    sp_cmd c, d;
    uint8_t ch[256];
    size_t n = hex(chunk_hex, ch, sizeof ch);

    c = req(SP_DELIVER, 0);
    c.u.deliver.subscription_id = 1;
    c.u.deliver.chunk = ch;
    c.u.deliver.chunk_len = n;
    snprintf(hexs, sizeof hexs, "00000051 0008 0001 01 %s", chunk_hex);
    vector(&c, hexs, &d);
    ck_assert_uint_eq(d.u.deliver.subscription_id, 1);
    ck_assert_uint_eq(d.u.deliver.chunk_len, n);
    ck_assert_uint_eq(d.u.deliver.hdr.first_offset, 100);
    ck_assert_uint_eq(d.u.deliver.hdr.num_records, 3);
    ck_assert_int_eq(sp_chunk_check_crc(&d.u.deliver.hdr), SL_OK);
    sp_cmd_free(&d);

    c.version = 2;
    c.u.deliver.committed_chunk_id = 99;
    snprintf(hexs, sizeof hexs, "00000059 0008 0002 01 0000000000000063 %s", chunk_hex);
    vector(&c, hexs, &d);
    ck_assert_uint_eq(d.u.deliver.committed_chunk_id, 99);
    ck_assert_uint_eq(d.u.deliver.hdr.data_len, 28);
    sp_cmd_free(&d);

    ck_assert_int_eq(dec("0008 0001 01 40"), SL_ERR_SYNTAX); /* no whole header */
}
END_TEST

START_TEST(codes_keys_and_names)
{
    /* The spec's table, in order. */
    static const char *const spec[] = {
        "",
        "OK",
        "STREAM_DOES_NOT_EXIST",
        "SUBSCRIPTION_ID_ALREADY_EXISTS",
        "SUBSCRIPTION_ID_DOES_NOT_EXIST",
        "STREAM_ALREADY_EXISTS",
        "STREAM_NOT_AVAILABLE",
        "SASL_MECHANISM_NOT_SUPPORTED",
        "AUTHENTICATION_FAILURE",
        "SASL_ERROR",
        "SASL_CHALLENGE",
        "SASL_AUTHENTICATION_FAILURE_LOOPBACK",
        "VIRTUAL_HOST_ACCESS_FAILURE",
        "UNKNOWN_FRAME",
        "FRAME_TOO_LARGE",
        "INTERNAL_ERROR",
        "ACCESS_REFUSED",
        "PRECONDITION_FAILED",
        "PUBLISHER_DOES_NOT_EXIST",
        "NO_OFFSET",
    };
    for (uint16_t i = 0; i < sizeof spec / sizeof spec[0]; i++)
        ck_assert_str_eq(sp_code_name(i), spec[i]);
    ck_assert_uint_eq(SP_OK, 1);
    ck_assert_uint_eq(SP_NO_OFFSET, 0x13);
    ck_assert_str_eq(sp_code_name(0x16), "");
    ck_assert_str_eq(sp_key_name(0x8007), "Subscribe");
    ck_assert_str_eq(sp_key_name(SP_DELETE_SUPER_STREAM), "DeleteSuperStream");
    ck_assert_str_eq(sp_key_name(0x0020), "");
    uint16_t lo, hi;
    ck_assert(sp_cmd_versions(SP_PUBLISH, &lo, &hi) && lo == 1 && hi == 2);
    ck_assert(sp_cmd_versions(SP_DELIVER, &lo, &hi) && lo == 1 && hi == 2);
    ck_assert(sp_cmd_versions(SP_OPEN, &lo, &hi) && lo == 1 && hi == 1);
    ck_assert(!sp_cmd_versions(0, &lo, &hi));
    ck_assert_uint_eq(sp_code_for_err(SL_ERR_CONTENT_TOO_LARGE), SP_FRAME_TOO_LARGE);
    ck_assert_uint_eq(sp_code_for_err(SL_ERR_SYNTAX), SP_UNKNOWN_FRAME);
    ck_assert_uint_eq(sp_code_for_err(SL_ERR_COMMAND_INVALID), SP_UNKNOWN_FRAME);
    ck_assert_uint_eq(sp_code_for_err(SL_OK), SP_OK);
}
END_TEST

static Suite *streamproto_suite(void)
{
    Suite *s = suite_create("streamproto");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, frame_parse_sizes_and_limits);
    tcase_add_test(tc, feeder_takes_any_slices_and_errors_stick);
    tcase_add_test(tc, encode_refuses_oversize_and_unencodable_leaving_out_alone);
    tcase_add_test(tc, peer_properties_sasl_tune_open_close_heartbeat);
    tcase_add_test(tc, create_delete_metadata_stats);
    tcase_add_test(tc, publishers);
    tcase_add_test(tc, subscribe_every_offset_specification);
    tcase_add_test(tc, credit_offsets_unsubscribe_consumer_update);
    tcase_add_test(tc, super_streams);
    tcase_add_test(tc, malformed_bodies_are_refused_clearly);
    tcase_add_test(tc, chunk_builder_matches_the_hand_vector_and_parses_back);
    tcase_add_test(tc, crc32_fast_path_matches_zlib);
    tcase_add_test(tc, chunk_layouts_and_damage);
    tcase_add_test(tc, deliver_v1_and_v2_carry_the_chunk);
    tcase_add_test(tc, codes_keys_and_names);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(streamproto_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
