/* fuzz_mqqb.c - libFuzzer target for the MS-MQQB packet codec (src/mqqb/mqqb.c): the bytes
 * are a stream as a Windows sender would write it. Each packet is framed by mqqb_frame_len
 * (at most the specification's 4 MiB) and parsed as an internal or a UserMessage packet.
 * Besides "no crash, no over-read", it checks that every pointer a parse hands back lies
 * inside the packet, and that an EstablishConnection or ConnectionParameters packet that
 * parses gives a reply that parses back to the same fields. The same bytes are what Sluice's
 * sending side (link/mqqb_send.c) reads from a Windows receiver: a UserMessage that parses is also
 * read as an OrderAck / FinalAck, and its body, re-sent by the initiator's writer, parses back. And
 * the properties both ways: a UserMessage as an AMQP message (props.c, receiving), read back by the
 * sending side (mqqb_out_props) and written again, parses to the same properties.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqqb/mqqb.h"
#include "mqqb/props.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void inside(const uint8_t *p, size_t len, const uint8_t *q, size_t n)
{
    if (!q)
        return;
    CHECK(q >= p && (size_t)(q - p) <= len && n <= len - (size_t)(q - p));
}

/* m as the AMQP message the door makes of it, sent on by an outgoing queue: the properties
 * of the receiving table that the sending table carries come back unchanged. */
static void props_both_ways(const mqqb_user *m, const char *dest)
{
    qm_message *msg = mqqb_props_message(m, "q", "192.0.2.1");
    mqqb_out o = {
        .source_qm = m->source_qm, .dest = dest, .body = m->body, .body_len = m->body_size};
    msmq_out_scratch sc;
    mqqb_out_props(qm_msg_props(msg), msg->props_len, &o, &sc, 1000);
    size_t n = mqqb_user_len(&o);
    CHECK(n > 0);
    uint8_t *w = malloc(n);
    CHECK(mqqb_write_user(w, n, &o) == n);
    mqqb_user b;
    const char *why = NULL;
    CHECK(mqqb_parse_user(w, n, &b, &why) == 0);
    CHECK(b.app_tag == m->app_tag && b.body_type == m->body_type);
    CHECK(b.ttbr == m->ttbr && b.base.ttrq == m->base.ttrq && b.sent_time == m->sent_time);
    CHECK(b.ack_flags == m->ack_flags);
    /* an acknowledgement's class stays one; any other class is the hop's, not carried */
    CHECK(b.msg_class == (MQQB_CLASS_IS_ADMIN_ACK(m->msg_class) ? m->msg_class : 0));
    CHECK((b.uflags & (MQQB_UF_JP | MQQB_UF_JN)) == (m->uflags & (MQQB_UF_JP | MQQB_UF_JN)));
    CHECK(!memcmp(b.correlation_id, m->correlation_id, 20));
    CHECK(b.ext_size == m->ext_size && (!b.ext_size || !memcmp(b.ext, m->ext, b.ext_size)));
    CHECK(!b.label_len || (b.label_len == m->label_len &&
                           !memcmp(b.label, m->label, (size_t)(b.label_len - 1) * 2)));
    if (!m->has_tx)
        CHECK((b.base.flags & MQQB_BF_PR) == (m->base.flags & MQQB_BF_PR));
    free(w);
    qm_message_unref(msg);
}

static void one(const uint8_t *p, size_t len)
{
    const char *why = NULL;
    if (p[2] & MQQB_BF_IN) {
        mqqb_internal in;
        if (mqqb_parse_internal(p, len, &in, &why) < 0) {
            CHECK(why);
            return;
        }
        if (in.type == MQQB_PT_ESTABLISH) {
            uint8_t out[MQQB_EC_PACKET_LEN], own[16] = {1};
            mqqb_write_establish_reply(out, &in.ec, own, 0);
            mqqb_internal back;
            CHECK(mqqb_parse_internal(out, sizeof out, &back, &why) == 0);
            CHECK(!memcmp(back.ec.client_guid, in.ec.client_guid, 16));
            CHECK(back.ec.timestamp == in.ec.timestamp && back.ec.os == in.ec.os);
        } else if (in.type == MQQB_PT_PARAMS) {
            uint8_t out[MQQB_CP_PACKET_LEN];
            mqqb_write_params(out, &in.cp);
            mqqb_internal back;
            CHECK(mqqb_parse_internal(out, sizeof out, &back, &why) == 0);
            CHECK(back.cp.window == in.cp.window && back.cp.ack_timeout == in.cp.ack_timeout);
        }
        return;
    }
    mqqb_user m;
    if (mqqb_parse_user(p, len, &m, &why) < 0) {
        CHECK(why);
        return;
    }
    inside(p, len, m.dest.direct, m.dest.direct_len);
    inside(p, len, m.admin.direct, m.admin.direct_len);
    inside(p, len, m.resp.direct, m.resp.direct_len);
    inside(p, len, m.label, m.label_len ? (size_t)(m.label_len - 1) * 2 : 0);
    inside(p, len, m.ext, m.ext_size);
    inside(p, len, m.body, m.body_size);
    inside(p, len, m.sender_id, m.sender_id_size);
    inside(p, len, m.soap_header, m.soap_header_len);
    inside(p, len, m.soap_body, m.soap_body_len);
    char s[1024];
    if (m.dest.direct && mqqb_utf16_to_utf8(m.dest.direct, m.dest.direct_len, s, sizeof s) >= 0) {
        const char *q;
        size_t ql;
        if (mqqb_direct_private_queue(s, strlen(s), &q, &ql) == 0)
            CHECK(ql > 0 && q + ql == s + strlen(s));
    }
    uint64_t sid;
    uint32_t no;
    uint16_t cls;
    if (mqqb_order_ack_of(&m, &sid, &no) == 0)
        CHECK(m.msg_class == MQMSG_CLASS_ORDER_ACK);
    if (mqqb_final_ack_of(&m, &sid, &no, &cls) == 0)
        CHECK(cls == m.msg_class && m.body_size >= MQQB_ORDER_ACK_BODY_LEN);
    if (m.dest.direct && m.body_size <= 65536 &&
        mqqb_utf16_to_utf8(m.dest.direct, m.dest.direct_len, s, sizeof s) >= 0) {
        mqqb_session sh = {.user_seq = 1, .window = 64};
        mqqb_out o = {.source_qm = m.source_qm,
                      .dest = s,
                      .message_id = m.message_id,
                      .priority = m.base.flags & 7,
                      .recoverable = MQQB_UF_DM(m.uflags) != 0,
                      .tx = m.has_tx,
                      .tx_seq_id = m.tx_seq_id,
                      .tx_seq_no = m.tx_seq_no,
                      .tx_prev_no = m.tx_prev_no,
                      .body = m.body,
                      .body_len = m.body_size,
                      .session = &sh};
        size_t n = mqqb_user_len(&o);
        CHECK(n > 0); /* it came from UTF-16, so it is valid UTF-8 */
        uint8_t *w = malloc(n);
        CHECK(mqqb_write_user(w, n, &o) == n);
        mqqb_user back;
        const char *why2 = NULL;
        CHECK(mqqb_parse_user(w, n, &back, &why2) == 0);
        CHECK(back.body_size == m.body_size && back.has_tx == m.has_tx);
        CHECK(!m.body_size || !memcmp(back.body, m.body, m.body_size));
        free(w);
        if (m.ext_size <= 65536)
            props_both_ways(&m, s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mqqb_ping ping;
    if (mqqb_parse_ping(data, size, &ping) == 0) { /* the same bytes as a UDP datagram */
        uint8_t out[MQQB_PING_LEN], back_guid[16] = {7};
        mqqb_write_ping_reply(out, &ping, back_guid, 1);
        mqqb_ping back;
        CHECK(mqqb_parse_ping(out, sizeof out, &back) == 0 && back.cookie == ping.cookie);
    }
    size_t off = 0;
    for (int i = 0; i < 64 && off < size; i++) {
        uint32_t total;
        const char *why = NULL;
        int r = mqqb_frame_len(data + off, size - off, MQQB_PACKET_MAX + 16, &total, &why);
        if (r <= 0 || total > size - off)
            break;
        /* an exact copy, so ASan sees a read past the packet */
        uint8_t *p = malloc(total);
        memcpy(p, data + off, total);
        one(p, total);
        free(p);
        off += total;
    }
    return 0;
}
