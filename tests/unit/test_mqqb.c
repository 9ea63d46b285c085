/* test_mqqb.c - the MS-MQQB packet codec (src/mqqb/mqqb.c) against the frame examples of
 * MS-MQQB section 4 (frames 3 to 8, their hex dumps typed in from the specification): each
 * captured frame parses to the values the capture's annotation gives, and the acceptor's
 * replies are the captured bytes, byte for byte, where the specification fixes them.
 * Then the hostile cases: every truncation and lying lengths fail cleanly.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqqb/mqqb.h"
#include "net/cidr.h"

static size_t unhex(const char *s, uint8_t *out)
{
    size_t n = 0;
    while (*s) {
        if (*s == ' ' || *s == '\n') {
            s++;
            continue;
        }
        unsigned v;
        sscanf(s, "%2x", &v);
        out[n++] = (uint8_t)v;
        s += 2;
    }
    return n;
}

/* FRAME 3: Establish Connection Request (the first 60 bytes; 0x5A padding follows). */
static const char frame3_head[] = "10 C0 0B 00 4C 49 4F 52 3C 02 00 00 FF FF FF FF"
                                  "00 00 02 00 D1 58 73 55 50 91 95 95 49 97 B6 E6"
                                  "11 EA 26 C6 07 89 CD 43 4C 39 11 8F 44 45 90 78"
                                  "90 9E A0 FC 4E CA DE 1D 10 03 00 00";
/* FRAME 4: Establish Connection Response (another capture's GUIDs; 0x5A padding follows). */
static const char frame4_head[] = "10 5A 0B 00 4C 49 4F 52 3C 02 00 00 FF FF FF FF"
                                  "00 00 02 00 05 23 74 1F 5E BE 77 41 BC 77 C4 DD"
                                  "77 19 E4 74 EB 6A 3A 3C 67 F5 43 41 87 D3 85 CF"
                                  "4D 68 CE B4 4E CA DE 1D 10 03 00 00";
/* FRAME 5 (request) and FRAME 6 (response): ConnectionParameters, identical dumps. */
static const char frame5[] = "10 C0 0B 00 4C 49 4F 52 20 00 00 00 FF FF FF FF"
                             "00 00 03 00 D8 05 00 00 C0 D4 01 00 00 00 40 00";
/* FRAME 7: User Message, up to its label; then "mqsender label", 1000 x "a" in UTF-16 and
 * 2 bytes of padding the dump leaves out (PacketSize is 2224, the dump shows 2222). */
static const char frame7_head[] = "10 00 03 00 4C 49 4F 52 B0 08 00 00 00 46 05 00"
                                  "D1 58 73 55 50 91 95 95 49 97 B6 E6 11 EA 26 C6"
                                  "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
                                  "FF FF FF FF 4C 49 4F 52 EE 08 00 00 00 1C 28 00"
                                  "1A 00 4F 00 53 00 3A 00 61 00 30 00 34 00 62 00"
                                  "6D 00 30 00 32 00 5C 00 71 00 00 00 01 00 1C 00"
                                  "00 00 00 00 00 00 00 00 00 00 00 00 01 05 00 00"
                                  "00 00 00 05 15 00 00 00 AD 4A 9E BD 36 D9 FA 3D"
                                  "63 A6 56 DA E8 03 00 00 0F 0F 00 00 00 00 00 00"
                                  "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
                                  "08 00 00 00 00 00 00 00 D0 07 00 00 D0 07 00 00"
                                  "00 00 00 00 04 80 00 00 01 68 00 00 00 00 00 00";
/* FRAME 8: Session Acknowledgment. */
static const char frame8[] = "10 CD 1B 00 4C 49 4F 52 24 00 00 00 FF FF FF FF"
                             "00 00 01 00 01 00 00 00 00 00 00 00 00 00 00 00"
                             "40 00 00 00";

static size_t ec_frame(const char *head, uint8_t *out)
{
    size_t n = unhex(head, out);
    memset(out + n, 0x5A, MQQB_EC_PACKET_LEN - n);
    return MQQB_EC_PACKET_LEN;
}

static size_t frame7(uint8_t *out)
{
    size_t n = unhex(frame7_head, out);
    const char *label = "mqsender label";
    for (size_t i = 0; i <= strlen(label); i++) {
        out[n++] = (uint8_t)label[i];
        out[n++] = 0;
    }
    for (int i = 0; i < 1000; i++) {
        out[n++] = 'a';
        out[n++] = 0;
    }
    out[n++] = 0;
    out[n++] = 0;
    return n;
}

START_TEST(frame3_parses_and_frame4_reply_is_byte_for_byte)
{
    uint8_t f3[MQQB_EC_PACKET_LEN], f4[MQQB_EC_PACKET_LEN], out[MQQB_EC_PACKET_LEN];
    ec_frame(frame3_head, f3);
    uint32_t total = 0;
    const char *why = NULL;
    ck_assert_int_eq(mqqb_frame_len(f3, 10, MQQB_PACKET_MAX, &total, &why), 0);
    ck_assert_int_eq(mqqb_frame_len(f3, sizeof f3, MQQB_PACKET_MAX, &total, &why), 1);
    ck_assert_uint_eq(total, 572);
    mqqb_internal in;
    ck_assert_int_eq(mqqb_parse_internal(f3, total, &in, &why), 0);
    ck_assert_uint_eq(in.type, MQQB_PT_ESTABLISH);
    ck_assert_uint_eq(in.base.flags, 0x000B);
    ck_assert_uint_eq(in.ec.timestamp, 501140046u);
    ck_assert_uint_eq(in.ec.os, 0x0310);
    /* {C626EA11-E6B6-9749-9595-9150557358D1}, as the capture lays it out */
    ck_assert_uint_eq(in.ec.client_guid[0], 0xD1);
    ck_assert_uint_eq(in.ec.server_guid[15], 0xFC);
    /* The acceptor (its GUID the request's ServerGuid) answers with the request's fields and
     * 0x5A padding: frame 4's layout with frame 3's GUIDs. */
    mqqb_write_establish_reply(out, &in.ec, in.ec.server_guid, 0);
    uint8_t want[MQQB_EC_PACKET_LEN];
    memcpy(want, f3, sizeof want);
    want[1] = 0x5A; /* BaseHeader.Reserved, as frame 4 has it */
    ck_assert_mem_eq(out, want, sizeof want);
    /* Frame 4 itself: the reply to a request carrying its GUIDs, byte for byte. */
    ec_frame(frame4_head, f4);
    mqqb_internal r4;
    ck_assert_int_eq(mqqb_parse_internal(f4, sizeof f4, &r4, &why), 0);
    mqqb_establish req = r4.ec;
    mqqb_write_establish_reply(out, &req, req.server_guid, 0);
    ck_assert_mem_eq(out, f4, sizeof f4);
    /* A request with a zero ServerGuid (direct format name) gets our GUID back. */
    memset(req.server_guid, 0, 16);
    uint8_t own[16];
    memset(own, 0xAB, 16);
    mqqb_write_establish_reply(out, &req, own, 0);
    ck_assert_mem_eq(out + 36, own, 16);
    /* Refused: CS set. */
    mqqb_write_establish_reply(out, &req, own, 1);
    ck_assert_uint_eq(out[18], 0x12);
}
END_TEST

START_TEST(frame5_parses_and_frame6_reply_is_byte_for_byte)
{
    uint8_t f5[32], out[32];
    ck_assert_uint_eq(unhex(frame5, f5), 32);
    mqqb_internal in;
    const char *why = NULL;
    ck_assert_int_eq(mqqb_parse_internal(f5, 32, &in, &why), 0);
    ck_assert_uint_eq(in.type, MQQB_PT_PARAMS);
    ck_assert_uint_eq(in.cp.recoverable_ack_timeout, 1496);
    ck_assert_uint_eq(in.cp.ack_timeout, 120000);
    ck_assert_uint_eq(in.cp.window, 64);
    mqqb_write_params(out, &in.cp); /* the acceptor echoes them (frame 6) */
    ck_assert_mem_eq(out, f5, 32);
}
END_TEST

START_TEST(frame7_user_message_parses)
{
    static uint8_t f7[2224];
    ck_assert_uint_eq(frame7(f7), 2224);
    uint32_t total = 0;
    const char *why = NULL;
    ck_assert_int_eq(mqqb_frame_len(f7, sizeof f7, MQQB_PACKET_MAX, &total, &why), 1);
    ck_assert_uint_eq(total, 2224);
    mqqb_user m;
    ck_assert_msg(mqqb_parse_user(f7, total, &m, &why) == 0, "%s", why);
    ck_assert_uint_eq(m.base.flags & MQQB_BF_PR, 3);
    ck_assert_uint_eq(m.base.ttrq, 345600);
    ck_assert_uint_eq(m.message_id, 2286);
    ck_assert_uint_eq(m.ttbr, 0xFFFFFFFFu);
    ck_assert_uint_eq(m.uflags, 0x281C00);
    ck_assert_uint_eq(MQQB_UF_DM(m.uflags), 0); /* express */
    ck_assert_uint_eq(m.dest.type, MQQB_QF_DIRECT);
    char dq[100];
    ck_assert_int_eq(mqqb_utf16_to_utf8(m.dest.direct, m.dest.direct_len, dq, sizeof dq), 12);
    ck_assert_str_eq(dq, "OS:a04bm02\\q");
    ck_assert(m.has_security);
    ck_assert_uint_eq(m.sender_id_size, 28);
    ck_assert_uint_eq(m.sender_id[0], 0x01); /* a SID, revision 1 */
    ck_assert(!m.has_tx);
    ck_assert_uint_eq(m.label_len, 15);
    char label[100];
    ck_assert_int_eq(mqqb_utf16_to_utf8(m.label, (m.label_len - 1) * 2u, label, sizeof label), 14);
    ck_assert_str_eq(label, "mqsender label");
    ck_assert_uint_eq(m.body_type, 8); /* VT_BSTR */
    ck_assert_uint_eq(m.body_size, 2000);
    ck_assert_uint_eq(m.body[0], 'a');
    ck_assert_uint_eq(m.body[1999], 0);
    ck_assert_uint_eq(m.hash_alg, 0x8004);
    ck_assert(!m.has_session);
    /* A private queue it is not: OS:a04bm02\q is a public queue's path. */
    const char *qn;
    size_t ql;
    ck_assert_int_eq(mqqb_direct_private_queue(dq, strlen(dq), &qn, &ql), -1);
    const char *priv = "TCP:10.0.0.1\\PRIVATE$\\orders";
    ck_assert_int_eq(mqqb_direct_private_queue(priv, strlen(priv), &qn, &ql), 0);
    ck_assert_int_eq((int)ql, 6);
    ck_assert(!memcmp(qn, "orders", 6));
}
END_TEST

START_TEST(frame8_session_ack_after_one_express_message)
{
    uint8_t f8[36], out[36];
    ck_assert_uint_eq(unhex(frame8, f8), 36);
    mqqb_internal in;
    const char *why = NULL;
    ck_assert_int_eq(mqqb_parse_internal(f8, 36, &in, &why), 0);
    ck_assert_uint_eq(in.type, MQQB_PT_SESSION_ACK);
    ck_assert_uint_eq(in.session.ack_seq, 1);
    ck_assert_uint_eq(in.session.window, 64);
    /* what the acceptor sends after frame 7 (one express message, window 64) */
    mqqb_session s = {.ack_seq = 1, .window = 64};
    mqqb_write_session_ack(out, &s);
    ck_assert_mem_eq(out, f8, 36);
}
END_TEST

/* A whole UserMessage of n bytes in buf: framed as exactly n bytes, then parsed. */
static void frame_and_parse(const uint8_t *buf, size_t n, mqqb_user *m)
{
    uint32_t total;
    const char *why = NULL;
    ck_assert_int_eq(mqqb_frame_len(buf, n, MQQB_PACKET_MAX, &total, &why), 1);
    ck_assert_uint_eq(total, n);
    ck_assert_msg(mqqb_parse_user(buf, n, m, &why) == 0, "%s", why);
}

START_TEST(order_ack_round_trips)
{
    uint8_t buf[512];
    uint8_t own[16];
    memset(own, 0x11, 16);
    size_t n =
        mqqb_write_order_ack(buf, sizeof buf, own, "127.0.0.1", 7, 1000, 0x0000000500000009ull, 42);
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_eq(n % 4, 0);
    mqqb_user m;
    frame_and_parse(buf, n, &m);
    ck_assert_uint_eq(m.base.flags, 0);
    ck_assert_uint_eq(m.msg_class, MQMSG_CLASS_ORDER_ACK);
    ck_assert_uint_eq(m.body_size, 36);
    ck_assert_uint_eq(m.body_type, 0);
    char s[100];
    ck_assert_int_gt(mqqb_utf16_to_utf8(m.dest.direct, m.dest.direct_len, s, sizeof s), 0);
    ck_assert_str_eq(s, "TCP:127.0.0.1\\PRIVATE$\\order_queue$");
    ck_assert_int_gt(mqqb_utf16_to_utf8(m.label, (m.label_len - 1) * 2u, s, sizeof s), 0);
    ck_assert_str_eq(s, "QM Ordering Ack");
    ck_assert_uint_eq(m.body[0], 9);   /* Ordinal */
    ck_assert_uint_eq(m.body[4], 5);   /* TimeStamp */
    ck_assert_uint_eq(m.body[8], 42);  /* TxSequenceNumber */
    ck_assert_uint_eq(m.body[12], 41); /* TxPreviousSequenceNumber */
    ck_assert_uint_eq(mqqb_write_order_ack(buf, 100, own, "127.0.0.1", 7, 1000, 1, 1), 0);
}
END_TEST

START_TEST(initiator_user_message_round_trips)
{
    /* what link/mqqb_send.c sends to a Windows queue manager parses back to what was meant, the
     * trailing SessionHeader outside PacketSize; a non-BMP character in the queue name is a
     * surrogate pair; every shorter buffer is refused */
    uint8_t own[16], body[5] = {'h', 'e', 'l', 'l', 'o'};
    memset(own, 0x22, 16);
    mqqb_session sh = {.ack_seq = 3, .user_seq = 9, .rec_seq = 4, .window = 64};
    mqqb_out o = {.source_qm = own,
                  .dest = "TCP:10.0.0.5\\private$\\ord\xf0\x9f\x93\xa6",
                  .message_id = 77,
                  .sent_time = 1000,
                  .ttbr = 0xFFFFFFFFu,
                  .ttrq = 0xFFFFFFFFu,
                  .priority = 5,
                  .tx = 1,
                  .tx_seq_id = 0x0000000500000009ull,
                  .tx_seq_no = 42,
                  .tx_prev_no = 40,
                  .body_type = 0x1011,
                  .body = body,
                  .body_len = sizeof body,
                  .session = &sh};
    uint8_t buf[512];
    size_t n = mqqb_user_len(&o);
    ck_assert_uint_gt(n, 0);
    for (size_t cap = 0; cap < n; cap += 7)
        ck_assert_uint_eq(mqqb_write_user(buf, cap, &o), 0);
    ck_assert_uint_eq(mqqb_write_user(buf, sizeof buf, &o), n);
    const char *why = NULL;
    mqqb_user m;
    frame_and_parse(buf, n, &m);
    ck_assert_uint_eq(m.base.flags & MQQB_BF_PR, 0); /* transactional: priority 0 */
    ck_assert_uint_eq(m.base.packet_size, n - MQQB_SESSION_LEN);
    ck_assert_int_eq(m.has_tx, 1);
    ck_assert_uint_eq(m.tx_seq_id, 0x0000000500000009ull);
    ck_assert_uint_eq(m.tx_seq_no, 42);
    ck_assert_uint_eq(m.tx_prev_no, 40);
    ck_assert_uint_eq(MQQB_UF_DM(m.uflags), 1);
    ck_assert_uint_eq(m.message_id, 77);
    ck_assert_uint_eq(m.body_size, 5);
    ck_assert_mem_eq(m.body, body, 5);
    ck_assert_int_eq(m.has_session, 1);
    ck_assert_uint_eq(m.session.user_seq, 9);
    ck_assert_uint_eq(m.session.ack_seq, 3);
    char s[100];
    ck_assert_int_gt(mqqb_utf16_to_utf8(m.dest.direct, m.dest.direct_len, s, sizeof s), 0);
    ck_assert_str_eq(s, o.dest);
    /* an express one: its priority, no TransactionHeader, no SessionHeader */
    o.tx = 0;
    o.session = NULL;
    n = mqqb_write_user(buf, sizeof buf, &o);
    ck_assert_msg(mqqb_parse_user(buf, n, &m, &why) == 0, "%s", why);
    ck_assert_uint_eq(m.base.flags & MQQB_BF_PR, 5);
    ck_assert_int_eq(m.has_tx, 0);
    ck_assert_uint_eq(MQQB_UF_DM(m.uflags), 0);
    /* not UTF-8: refused */
    o.dest = "TCP:h\\private$\\\xff";
    ck_assert_uint_eq(mqqb_user_len(&o), 0);
    /* the OrderAck Sluice's receiver writes is read back by the sender */
    n = mqqb_write_order_ack(buf, sizeof buf, own, "127.0.0.1", 7, 1000, 0x0000000500000009ull, 42);
    ck_assert_msg(mqqb_parse_user(buf, n, &m, &why) == 0, "%s", why);
    uint64_t sid;
    uint32_t no;
    uint16_t cls;
    ck_assert_int_eq(mqqb_order_ack_of(&m, &sid, &no), 0);
    ck_assert_uint_eq(sid, 0x0000000500000009ull);
    ck_assert_uint_eq(no, 42);
    ck_assert_int_eq(mqqb_final_ack_of(&m, &sid, &no, &cls), -1);
}
END_TEST

START_TEST(initiator_writes_every_property)
{
    /* the sending side's properties (label, correlation, app-specific, times, admin and
     * response queues of each kind, journal / dead-letter, ack flags, extension) parse back */
    uint8_t own[16], corr[20], body[3] = {1, 2, 3}, ext[5] = {9, 8, 7, 6, 5};
    memset(own, 0x22, 16);
    for (int i = 0; i < 20; i++)
        corr[i] = (uint8_t)(i + 1);
    mqqb_out o = {.source_qm = own,
                  .dest = "TCP:10.0.0.5\\private$\\q",
                  .message_id = 5,
                  .sent_time = 1234,
                  .ttbr = 60,
                  .ttrq = 30,
                  .priority = 6,
                  .body_type = 8,
                  .app_tag = 0xDEADBEEFu,
                  .correlation = corr,
                  .label = "Gr\xc3\xbc\xc3\x9f\xc3\x9f",
                  .admin = {.type = MQQB_QF_PUBLIC},
                  .resp = {.type = MQQB_QF_DIRECT, .direct = "TCP:h\\private$\\r"},
                  .journal = 1,
                  .dead_letter = 1,
                  .ack_flags = 5,
                  .msg_class = MQMSG_CLASS_ACK_RECEIVE,
                  .ext = ext,
                  .ext_len = sizeof ext,
                  .body = body,
                  .body_len = sizeof body};
    memset(o.admin.guid, 0x33, 16);
    uint8_t buf[600];
    const char *why = NULL;
    mqqb_user m;
    for (int round = 0; round < 2; round++) {
        size_t n = mqqb_write_user(buf, sizeof buf, &o);
        ck_assert_uint_gt(n, 0);
        ck_assert_uint_eq(n % 4, 0);
        ck_assert_msg(mqqb_parse_user(buf, n, &m, &why) == 0, "%s", why);
        ck_assert_uint_eq(m.base.ttrq, 30);
        ck_assert_uint_eq(m.ttbr, 60);
        ck_assert_uint_eq(m.sent_time, 1234);
        ck_assert_uint_eq(m.base.flags & MQQB_BF_PR, 6);
        ck_assert_uint_eq(m.body_type, 8);
        ck_assert_uint_eq(m.app_tag, 0xDEADBEEFu);
        ck_assert_mem_eq(m.correlation_id, corr, 20);
        ck_assert_uint_eq(m.label_len, 6); /* 5 units and the NUL */
        char s[100];
        ck_assert_int_gt(mqqb_utf16_to_utf8(m.label, 10, s, sizeof s), 0);
        ck_assert_str_eq(s, o.label);
        ck_assert_int_ne(m.uflags & MQQB_UF_JP, 0);
        ck_assert_int_ne(m.uflags & MQQB_UF_JN, 0);
        ck_assert_uint_eq(m.ack_flags, 5);
        ck_assert_uint_eq(m.msg_class, MQMSG_CLASS_ACK_RECEIVE);
        ck_assert_uint_eq(m.ext_size, 5);
        ck_assert_mem_eq(m.ext, ext, 5);
        ck_assert_mem_eq(m.body, body, 3);
        ck_assert_uint_eq(m.resp.type, o.resp.type);
        if (round == 0) {
            ck_assert_uint_eq(m.admin.type, MQQB_QF_PUBLIC);
            ck_assert_mem_eq(m.admin.guid, o.admin.guid, 16);
            ck_assert_int_gt(mqqb_utf16_to_utf8(m.resp.direct, m.resp.direct_len, s, sizeof s), 0);
            ck_assert_str_eq(s, o.resp.direct);
        } else {
            ck_assert_uint_eq(m.admin.type, MQQB_QF_PRIVATE_OTHER);
            ck_assert_uint_eq(m.admin.private_id, 0x1234);
            ck_assert_mem_eq(m.resp.guid, o.resp.guid, 16);
        }
        /* second round: a private admin queue, a public response queue */
        o.admin.type = MQQB_QF_PRIVATE_OTHER;
        o.admin.private_id = 0x1234;
        o.resp = (mqqb_qout){.type = MQQB_QF_PUBLIC};
        memset(o.resp.guid, 0x44, 16);
    }
    /* a label over 249 units cannot be written */
    char longl[300];
    memset(longl, 'a', 250);
    longl[250] = 0;
    o.label = longl;
    ck_assert_uint_eq(mqqb_user_len(&o), 0);
    longl[249] = 0;
    ck_assert_uint_gt(mqqb_user_len(&o), 0);
}
END_TEST

START_TEST(tx_numbers_cross_the_32_bit_wrap)
{
    /* lookup ids 2^32 - 2 .. 2^32 + 1 sent in a row: the last two go on a new, larger
     * sequence (epoch in the TimeStamp half), numbered from 1, its first with previous 0;
     * OrderAcks of each sequence cover only its own */
    const uint64_t base = 7, w = 0xFFFFFFFFull;
    uint64_t sid;
    uint32_t no, prev;
    mqqb_tx_number(base, 5, 3, &sid, &no, &prev);
    ck_assert_uint_eq(sid, base); /* below the wrap: unchanged */
    ck_assert_uint_eq(no, 5);
    ck_assert_uint_eq(prev, 3);
    mqqb_tx_number(base, w - 1, 0, &sid, &no, &prev);
    ck_assert_uint_eq(no, 0xFFFFFFFEu);
    ck_assert_uint_eq(prev, 0);
    mqqb_tx_number(base, w, w - 1, &sid, &no, &prev);
    ck_assert_uint_eq(sid, base);
    ck_assert_uint_eq(no, 0xFFFFFFFFu);
    ck_assert_uint_eq(prev, 0xFFFFFFFEu);
    mqqb_tx_number(base, w + 1, w, &sid, &no, &prev);
    ck_assert_uint_eq(sid, base + (1ull << 32));
    ck_assert_uint_eq(no, 1);
    ck_assert_uint_eq(prev, 0); /* the first of its sequence */
    mqqb_tx_number(base, w + 2, w + 1, &sid, &no, &prev);
    ck_assert_uint_eq(sid, base + (1ull << 32));
    ck_assert_uint_eq(no, 2);
    ck_assert_uint_eq(prev, 1);
    mqqb_tx_number(base, 2 * w + 1, 2 * w, &sid, &no, &prev);
    ck_assert_uint_eq(sid, base + (2ull << 32));
    ck_assert_uint_eq(no, 1);
    ck_assert_uint_eq(prev, 0);
    /* acks */
    ck_assert_int_eq(mqqb_tx_acked(base, base, 0xFFFFFFFFu, w), 1);
    ck_assert_int_eq(mqqb_tx_acked(base, base, 0xFFFFFFFFu, w + 1), 0);
    ck_assert_int_eq(mqqb_tx_acked(base, base + (1ull << 32), 1, w + 1), 1);
    ck_assert_int_eq(mqqb_tx_acked(base, base + (1ull << 32), 1, w + 2), 0);
    ck_assert_int_eq(mqqb_tx_acked(base, base + (1ull << 32), 5, w), 0);
    ck_assert_int_eq(mqqb_tx_acked(base, base + 1, 5, 3), 0); /* another queue's sequence */
    ck_assert_int_eq(mqqb_tx_acked(base, base, 5, 0), 0);
}
END_TEST

START_TEST(truncations_and_lying_lengths_fail_cleanly)
{
    static uint8_t f7[2224];
    frame7(f7);
    mqqb_user m;
    const char *why = NULL;
    /* every truncation: the packet claims 2224 bytes */
    for (size_t n = 0; n < sizeof f7; n++) {
        uint8_t *c = malloc(n ? n : 1); /* exact size: ASan sees any over-read */
        memcpy(c, f7, n);
        ck_assert_int_eq(mqqb_parse_user(c, n, &m, &why), -1);
        free(c);
    }
    /* PacketSize cut below the label: the headers run past it */
    uint8_t c[2224];
    memcpy(c, f7, sizeof c);
    c[8] = 0xC8;
    c[9] = 0;
    ck_assert_int_eq(mqqb_parse_user(c, sizeof c, &m, &why), -1);
    /* MessageSize lies */
    memcpy(c, f7, sizeof c);
    c[0xA8] = 0xFF, c[0xA9] = 0xFF, c[0xAA] = 0xFF, c[0xAB] = 0x7F;
    ck_assert_int_eq(mqqb_parse_user(c, sizeof c, &m, &why), -1);
    /* direct name count lies */
    memcpy(c, f7, sizeof c);
    c[0x40] = 0xFF, c[0x41] = 0xFF;
    ck_assert_int_eq(mqqb_parse_user(c, sizeof c, &m, &why), -1);
    /* SenderCertSize lies */
    memcpy(c, f7, sizeof c);
    c[0x64] = 0xFF, c[0x65] = 0xFF, c[0x66] = 0xFF, c[0x67] = 0xFF;
    ck_assert_int_eq(mqqb_parse_user(c, sizeof c, &m, &why), -1);
    /* LabelLength over 250 */
    memcpy(c, f7, sizeof c);
    c[0x89] = 251;
    ck_assert_int_eq(mqqb_parse_user(c, sizeof c, &m, &why), -1);
    /* an unknown DQ type (1) closes the session */
    memcpy(c, f7, sizeof c);
    c[0x3D] = 0x04;
    ck_assert_int_eq(mqqb_parse_user(c, sizeof c, &m, &why), -1);
    /* framing: bad signature, version, a size above the limit or below any packet */
    uint32_t total;
    memcpy(c, f7, 16);
    c[4] = 0;
    ck_assert_int_eq(mqqb_frame_len(c, 16, MQQB_PACKET_MAX, &total, &why), -1);
    memcpy(c, f7, 16);
    c[0] = 0x11;
    ck_assert_int_eq(mqqb_frame_len(c, 16, MQQB_PACKET_MAX, &total, &why), -1);
    memcpy(c, f7, 16);
    c[10] = 0x41; /* 4 MiB + */
    ck_assert_int_eq(mqqb_frame_len(c, 16, MQQB_PACKET_MAX, &total, &why), -1);
    memcpy(c, f7, 16);
    c[8] = 4, c[9] = 0;
    ck_assert_int_eq(mqqb_frame_len(c, 16, MQQB_PACKET_MAX, &total, &why), -1);
    /* internal packets of the wrong size or type */
    uint8_t f5[32];
    unhex(frame5, f5);
    mqqb_internal in;
    ck_assert_int_eq(mqqb_parse_internal(f5, 31, &in, &why), -1);
    f5[18] = 7;
    ck_assert_int_eq(mqqb_parse_internal(f5, 32, &in, &why), -1);
    /* UTF-16: lone surrogates and NULs are refused */
    const uint8_t lone[] = {0x00, 0xD8, 0x41, 0x00};
    char s[16];
    ck_assert_int_eq(mqqb_utf16_to_utf8(lone, 4, s, sizeof s), -1);
    const uint8_t nul[] = {0x41, 0x00, 0x00, 0x00};
    ck_assert_int_eq(mqqb_utf16_to_utf8(nul, 4, s, sizeof s), -1);
    const uint8_t pair[] = {0x3D, 0xD8, 0x00, 0xDE};
    ck_assert_int_eq(mqqb_utf16_to_utf8(pair, 4, s, sizeof s), 4);
}
END_TEST

/* ---- a UserMessage with every optional header (MS-MQMQ 2.2.20), built field by field ---- */

typedef struct pkt {
    uint8_t b[4096];
    size_t n;
} pkt;

static void p8(pkt *p, uint8_t v)
{
    p->b[p->n++] = v;
}
static void p16(pkt *p, uint16_t v)
{
    p8(p, (uint8_t)v);
    p8(p, (uint8_t)(v >> 8));
}
static void p32(pkt *p, uint32_t v)
{
    p16(p, (uint16_t)v);
    p16(p, (uint16_t)(v >> 16));
}
static void pfill(pkt *p, uint8_t v, size_t n)
{
    memset(p->b + p->n, v, n);
    p->n += n;
}
static void pwstr(pkt *p, const char *s) /* ASCII as UTF-16LE, NUL included */
{
    do
        p16(p, (uint8_t)*s);
    while (*s++);
}
static void ppad(pkt *p)
{
    while (p->n % 4)
        p8(p, 0xEE);
}

static size_t full_packet(pkt *p)
{
    memset(p, 0, sizeof *p);
    /* BaseHeader: priority 0 (transactional), DH, SH; PacketSize patched below */
    p8(p, 0x10), p8(p, 0), p16(p, MQQB_BF_DH | MQQB_BF_SH), p32(p, MQQB_SIGNATURE), p32(p, 0);
    p32(p, 3600);
    /* UserHeader */
    pfill(p, 0xA1, 16), pfill(p, 0, 16);
    p32(p, 60), p32(p, 1700000000), p32(p, 77);
    uint32_t f = 1u << 5 | 7u << 10 | 6u << 13 | 2u << 16 | MQQB_UF_SH | MQQB_UF_TH | MQQB_UF_MP |
                 MQQB_UF_CQ | MQQB_UF_MQ | MQQB_UF_HH;
    p32(p, f);
    p16(p, 2 * 23), pwstr(p, "TCP:1.2.3.4\\private$\\q"), ppad(p); /* DQ direct */
    pfill(p, 0xB2, 16), p32(p, 0x1234);                            /* AQ PrivateQueueFormatName */
    p32(p, 0x99);                                                  /* RQ PrivateQueueFormatNameId */
    pfill(p, 0xC3, 16);                                            /* ConnectorType */
    /* TransactionHeader with ConnectorQMGuid */
    p32(p, MQQB_TF_CG | MQQB_TF_FM | MQQB_TF_LM | 0x123u << 4);
    p32(p, 9), p32(p, 5), p32(p, 3), p32(p, 2), pfill(p, 0xD4, 16);
    /* SecurityHeader: QM GUID sender id, a 3-byte signature, 5-byte cert, 6-byte provider */
    p16(p, 0x0002), p16(p, 16), p16(p, 0), p16(p, 3), p32(p, 5), p32(p, 6);
    pfill(p, 0xE5, 16), pfill(p, 1, 3), ppad(p), pfill(p, 2, 5), ppad(p), pfill(p, 3, 6), ppad(p);
    /* MessagePropertiesHeader: label "x", 3 bytes of extension, 5 of body */
    p8(p, 0x05), p8(p, 2), p16(p, 0);
    pfill(p, 0x0C, 20);
    p32(p, 0x1011), p32(p, 42), p32(p, 5), p32(p, 5), p32(p, 0), p32(p, 0x800E), p32(p, 0),
        p32(p, 3);
    pwstr(p, "x"), pfill(p, 0x7E, 3), pfill(p, 'B', 5), ppad(p);
    /* DebugHeader with a queue GUID */
    p16(p, 1), p16(p, 0), pfill(p, 0xF6, 16);
    /* SoapHeader: "<h/>" and "<b/>" */
    p16(p, 0x320), p16(p, 0), p32(p, 5), pwstr(p, "<h/>"), ppad(p);
    p16(p, 0x384), p16(p, 0), p32(p, 5), pwstr(p, "<b/>"), ppad(p);
    /* MultiQueueFormatHeader: three empty address lists and a 3-byte signature */
    p32(p, 12), p16(p, 0x64), p16(p, 0), p32(p, 0);
    p32(p, 12), p16(p, 0xC8), p16(p, 0), p32(p, 0);
    p32(p, 12), p16(p, 0x12C), p16(p, 0), p32(p, 0);
    p16(p, 0x15E), p16(p, 0), p32(p, 3), pfill(p, 9, 3), ppad(p);
    size_t size = p->n;
    p->b[8] = (uint8_t)size, p->b[9] = (uint8_t)(size >> 8);
    /* SessionHeader, outside PacketSize */
    p16(p, 4), p16(p, 0), p32(p, 0), p16(p, 1), p16(p, 1), p16(p, 64), p16(p, 0);
    return p->n;
}

START_TEST(every_optional_header_parses)
{
    static pkt p;
    size_t n = full_packet(&p);
    uint32_t total;
    const char *why = NULL;
    ck_assert_int_eq(mqqb_frame_len(p.b, n, MQQB_PACKET_MAX, &total, &why), 1);
    ck_assert_uint_eq(total, n); /* PacketSize + the SessionHeader */
    mqqb_user m;
    ck_assert_msg(mqqb_parse_user(p.b, n, &m, &why) == 0, "%s", why);
    char s[100];
    ck_assert_int_gt(mqqb_utf16_to_utf8(m.dest.direct, m.dest.direct_len, s, sizeof s), 0);
    ck_assert_str_eq(s, "TCP:1.2.3.4\\private$\\q");
    ck_assert_uint_eq(m.admin.type, MQQB_QF_PRIVATE_OTHER);
    ck_assert_uint_eq(m.admin.private_id, 0x1234);
    ck_assert_uint_eq(m.admin.guid[0], 0xB2);
    ck_assert_uint_eq(m.resp.type, MQQB_QF_PRIVATE_SRC);
    ck_assert_uint_eq(m.resp.private_id, 0x99);
    ck_assert(m.has_connector && m.connector[15] == 0xC3);
    ck_assert(m.has_tx && m.has_connector_qm && m.connector_qm[0] == 0xD4);
    ck_assert_uint_eq(m.tx_seq_id, 0x0000000500000009ull);
    ck_assert_uint_eq(m.tx_seq_no, 3);
    ck_assert_uint_eq(m.tx_prev_no, 2);
    ck_assert_uint_eq((m.tx_flags >> 4) & 0xFFFFF, 0x123);
    ck_assert(m.has_security && m.sender_id_size == 16 && m.sender_id[0] == 0xE5);
    ck_assert_uint_eq(m.cert_size, 5);
    ck_assert_uint_eq(m.ack_flags, 5);
    ck_assert_uint_eq(m.app_tag, 42);
    ck_assert_uint_eq(m.correlation_id[19], 0x0C);
    ck_assert_uint_eq(m.ext_size, 3);
    ck_assert_uint_eq(m.ext[0], 0x7E);
    ck_assert_uint_eq(m.body_size, 5);
    ck_assert(!memcmp(m.body, "BBBBB", 5));
    ck_assert(m.has_debug && m.debug_queue[0] == 0xF6);
    ck_assert(m.has_soap);
    ck_assert_int_eq(mqqb_utf16_to_utf8(m.soap_header, m.soap_header_len, s, sizeof s), 4);
    ck_assert_str_eq(s, "<h/>");
    ck_assert_int_eq(mqqb_utf16_to_utf8(m.soap_body, m.soap_body_len, s, sizeof s), 4);
    ck_assert_str_eq(s, "<b/>");
    ck_assert(m.has_mqf);
    ck_assert(m.has_session && m.session.ack_seq == 4 && m.session.user_seq == 1);
    /* every truncation fails, in an exact-size buffer */
    for (size_t k = 0; k < n; k++) {
        uint8_t *c = malloc(k ? k : 1);
        memcpy(c, p.b, k);
        ck_assert_int_eq(mqqb_parse_user(c, k, &m, &why), -1);
        free(c);
    }
    /* wrong SOAP section id, a DebugHeader queue type of 2, a bad MQF header id */
    static pkt q;
    full_packet(&q);
    size_t soap = 0;
    for (size_t k = 0; k + 1 < n; k++)
        if (q.b[k] == 0x20 && q.b[k + 1] == 0x03) {
            soap = k;
            break;
        }
    ck_assert_uint_gt(soap, 0);
    q.b[soap] = 0x21;
    ck_assert_int_eq(mqqb_parse_user(q.b, n, &m, &why), -1);
    full_packet(&q);
    q.b[soap - 20] = 2; /* DebugHeader.Flags.QT */
    ck_assert_int_eq(mqqb_parse_user(q.b, n, &m, &why), -1);
    /* a transactional message must be recoverable */
    full_packet(&q);
    q.b[16 + 44] &= (uint8_t)~0x60;
    ck_assert_int_eq(mqqb_parse_user(q.b, n, &m, &why), -1);
}
END_TEST

/* FRAME 1 and FRAME 2: Ping Request and Response (UDP 3527). The response's unused flag bits
 * are arbitrary (MS-MQQB 2.2.7: "MAY be set"), so the reply matches frame 2 in every field
 * the specification fixes: RC echoed, RF clear, signature, cookie, the acceptor's GUID. */
START_TEST(frames1_2_ping)
{
    uint8_t f1[24], f2[24], out[24];
    ck_assert_uint_eq(unhex("01 7D 48 55 04 00 00 00 D1 58 73 55 50 91 95 95"
                            "49 97 B6 E6 11 EA 26 C6",
                            f1),
                      24);
    ck_assert_uint_eq(unhex("95 B2 48 55 04 00 00 00 07 89 CD 43 4C 39 11 8F"
                            "44 45 90 78 90 9E A0 FC",
                            f2),
                      24);
    mqqb_ping req, resp;
    ck_assert_int_eq(mqqb_parse_ping(f1, 24, &req), 0);
    ck_assert_uint_eq(req.flags, 0x7D01);
    ck_assert_uint_eq(req.cookie, 4);
    ck_assert_int_eq(mqqb_parse_ping(f2, 24, &resp), 0);
    mqqb_write_ping_reply(out, &req, resp.qm_guid, 0);
    ck_assert_uint_eq(out[0] & 3, f2[0] & 3);
    ck_assert_mem_eq(out + 2, f2 + 2, 22);
    mqqb_write_ping_reply(out, &req, resp.qm_guid, 1);
    ck_assert_uint_eq(out[0] & 3, 3);
    ck_assert_int_eq(mqqb_parse_ping(f1, 23, &req), -1);
    f1[2] = 0;
    ck_assert_int_eq(mqqb_parse_ping(f1, 24, &req), -1);
}
END_TEST

START_TEST(tx_in_order_rule_refuses_every_jump)
{
    /* MS-MQQB 3.1.5.8.6 without its jump (issue 43): last accepted 5, window 1000 */
    const uint64_t w = 1000;
    ck_assert_int_eq(mqqb_tx_check(5, 6, 5, w), MQQB_TX_ACCEPT);    /* the next one */
    ck_assert_int_eq(mqqb_tx_check(5, 6, 3, w), MQQB_TX_ACCEPT);    /* next, older previous */
    ck_assert_int_eq(mqqb_tx_check(5, 6, 0, w), MQQB_TX_ACCEPT);    /* next, previous 0 */
    ck_assert_int_eq(mqqb_tx_check(5, 9, 5, w), MQQB_TX_ACCEPT);    /* a declared gap */
    ck_assert_int_eq(mqqb_tx_check(5, 1005, 5, w), MQQB_TX_ACCEPT); /* the widest one */
    ck_assert_int_eq(mqqb_tx_check(5, 5, 4, w), MQQB_TX_DUPLICATE);
    ck_assert_int_eq(mqqb_tx_check(5, 1, 0, w), MQQB_TX_DUPLICATE);
    ck_assert_int_eq(mqqb_tx_check(5, 8, 7, w), MQQB_TX_OUT_OF_ORDER); /* 6, 7 missing */
    ck_assert_int_eq(mqqb_tx_check(5, 7, 6, w), MQQB_TX_OUT_OF_ORDER);
    /* the forgeries: previous 0 far ahead; and every small skip too */
    ck_assert_int_eq(mqqb_tx_check(5, 1u << 31, 0, w), MQQB_TX_JUMP);
    ck_assert_int_eq(mqqb_tx_check(5, 0xFFFFFFFFu, 0, 0xFFFFFFFFu), MQQB_TX_JUMP);
    ck_assert_int_eq(mqqb_tx_check(5, 7, 0, w), MQQB_TX_JUMP);
    ck_assert_int_eq(mqqb_tx_check(5, 7, 4, w), MQQB_TX_JUMP);
    ck_assert_int_eq(mqqb_tx_check(5, 1006, 5, w), MQQB_TX_JUMP); /* gap past the window */
    ck_assert_int_eq(mqqb_tx_check(5, 0xFFFFFFFFu, 5, w), MQQB_TX_JUMP);
    /* a new sequence (nothing accepted): previous 0, from 1 or across a declared gap */
    ck_assert_int_eq(mqqb_tx_check(0, 1, 0, w), MQQB_TX_ACCEPT);
    ck_assert_int_eq(mqqb_tx_check(0, 1000, 0, w), MQQB_TX_ACCEPT);
    ck_assert_int_eq(mqqb_tx_check(0, 1001, 0, w), MQQB_TX_JUMP);
    ck_assert_int_eq(mqqb_tx_check(0, 2, 1, w), MQQB_TX_OUT_OF_ORDER);
    ck_assert_int_eq(mqqb_tx_check(0, 0, 0, w), MQQB_TX_DUPLICATE); /* 0 is no number */
    /* window 1: no gap at all */
    ck_assert_int_eq(mqqb_tx_check(5, 7, 5, 1), MQQB_TX_JUMP);
    ck_assert_int_eq(mqqb_tx_check(5, 6, 5, 1), MQQB_TX_ACCEPT);
    /* at the top of the numbers */
    ck_assert_int_eq(mqqb_tx_check(0xFFFFFFFEu, 0xFFFFFFFFu, 0xFFFFFFFEu, 1), MQQB_TX_ACCEPT);
    ck_assert_int_eq(mqqb_tx_check(0xFFFFFFFFu, 0xFFFFFFFFu, 0, w), MQQB_TX_DUPLICATE);
}
END_TEST

START_TEST(tx_declared_gap_only_from_the_sequences_address)
{
    /* review of issue 43: a gap is the bound address's alone; the next number anyone's */
    const uint64_t w = 1ull << 31, L = 5;
    const char *g = "127.0.0.1", *evil = "127.0.0.2";
    /* the review's attack: L + 2^31 naming L, from another address */
    ck_assert_int_eq(mqqb_tx_check_from(L, (uint32_t)(L + w), L, w, g, evil), MQQB_TX_FOREIGN_GAP);
    ck_assert_int_eq(mqqb_tx_check_from(L, 9, L, w, g, evil), MQQB_TX_FOREIGN_GAP);
    ck_assert_int_eq(mqqb_tx_check_from(L, 9, L, w, g, NULL), MQQB_TX_FOREIGN_GAP);
    /* the same gap from the sequence's own address */
    ck_assert_int_eq(mqqb_tx_check_from(L, (uint32_t)(L + w), L, w, g, g), MQQB_TX_ACCEPT);
    ck_assert_int_eq(mqqb_tx_check_from(L, 9, L, w, g, "127.0.0.1"), MQQB_TX_ACCEPT);
    /* the next number from any address, whatever previous at or below L it names */
    ck_assert_int_eq(mqqb_tx_check_from(L, 6, L, w, g, evil), MQQB_TX_ACCEPT);
    ck_assert_int_eq(mqqb_tx_check_from(L, 6, 0, w, g, evil), MQQB_TX_ACCEPT);
    /* no address known yet (new sequence, or after a restart): the first mover's gap */
    ck_assert_int_eq(mqqb_tx_check_from(L, 9, L, w, "", evil), MQQB_TX_ACCEPT);
    ck_assert_int_eq(mqqb_tx_check_from(L, 9, L, w, NULL, evil), MQQB_TX_ACCEPT);
    ck_assert_int_eq(mqqb_tx_check_from(0, 1000, 0, w, "", evil), MQQB_TX_ACCEPT);
    ck_assert_int_eq(mqqb_tx_check_from(0, 1, 0, w, "", evil), MQQB_TX_ACCEPT);
    /* the other verdicts are mqqb_tx_check's, from any address (the address is no licence) */
    ck_assert_int_eq(mqqb_tx_check_from(L, 5, 4, w, g, evil), MQQB_TX_DUPLICATE);
    ck_assert_int_eq(mqqb_tx_check_from(L, 8, 7, w, g, g), MQQB_TX_OUT_OF_ORDER);
    ck_assert_int_eq(mqqb_tx_check_from(L, 9, 0, w, g, g), MQQB_TX_JUMP);
    ck_assert_int_eq(mqqb_tx_check_from(L, 9, 0, w, g, evil), MQQB_TX_JUMP);
    ck_assert_int_eq(mqqb_tx_check_from(L, (uint32_t)(L + w + 1), L, w, g, g), MQQB_TX_JUMP);
    /* IPv6 addresses compare as the session prints them */
    ck_assert_int_eq(mqqb_tx_check_from(L, 9, L, w, "::1", "::1"), MQQB_TX_ACCEPT);
    ck_assert_int_eq(mqqb_tx_check_from(L, 9, L, w, "::1", "fe80::1"), MQQB_TX_FOREIGN_GAP);
}
END_TEST

START_TEST(tx_lookup_id_is_tx_number_backwards)
{
    const uint64_t base = 7, w = 0xFFFFFFFFull;
    const uint64_t ids[] = {1, 2, 5, w - 1, w, w + 1, w + 2, 2 * w, 2 * w + 1, 5 * w + 77};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        uint64_t sid;
        uint32_t no, prev;
        mqqb_tx_number(base, ids[i], 0, &sid, &no, &prev);
        ck_assert_uint_eq(mqqb_tx_lookup_id(base, sid, no), ids[i]);
    }
    ck_assert_uint_eq(mqqb_tx_lookup_id(base, base + 1, 3), 0); /* another queue's sequence */
    ck_assert_uint_eq(mqqb_tx_lookup_id(base, base - 1, 3), 0);
    ck_assert_uint_eq(mqqb_tx_lookup_id(base, base, 0), 0);
}
END_TEST

static struct sockaddr_storage v4(const char *a)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    s4->sin_family = AF_INET;
    ck_assert_int_eq(inet_pton(AF_INET, a, &s4->sin_addr), 1);
    return ss;
}

static struct sockaddr_storage v6(const char *a)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    s6->sin6_family = AF_INET6;
    ck_assert_int_eq(inet_pton(AF_INET6, a, &s6->sin6_addr), 1);
    return ss;
}

START_TEST(allowed_senders_cidr_lists)
{
    sl_cidr_list l;
    char err[200];
    ck_assert_int_eq(
        sl_cidr_list_parse("127.0.0.1/32, 10.1.2.3/8 ,fc00::/7 2001:db8::1", &l, err, sizeof err),
        0);
    struct sockaddr_storage a;
    a = v4("127.0.0.1");
    ck_assert(sl_cidr_list_match(&l, &a));
    a = v4("127.0.0.2");
    ck_assert(!sl_cidr_list_match(&l, &a));
    a = v4("10.255.0.9"); /* bits past the prefix ignored */
    ck_assert(sl_cidr_list_match(&l, &a));
    a = v4("11.0.0.1");
    ck_assert(!sl_cidr_list_match(&l, &a));
    a = v6("fd12::5");
    ck_assert(sl_cidr_list_match(&l, &a));
    a = v6("fe80::1");
    ck_assert(!sl_cidr_list_match(&l, &a));
    a = v6("2001:db8::1");
    ck_assert(sl_cidr_list_match(&l, &a));
    a = v6("2001:db8::2");
    ck_assert(!sl_cidr_list_match(&l, &a));
    a = v6("::ffff:127.0.0.1"); /* a dual-stack listener's IPv4 peer: matched as IPv4 */
    ck_assert(sl_cidr_list_match(&l, &a));
    a = v6("::ffff:127.0.0.2");
    ck_assert(!sl_cidr_list_match(&l, &a));
    a = v6("::1");
    ck_assert(!sl_cidr_list_match(&l, &a));
    sl_cidr_list_free(&l);
    ck_assert_int_eq(sl_cidr_list_parse("172.16.0.0/12", &l, err, sizeof err), 0);
    a = v4("172.31.255.255");
    ck_assert(sl_cidr_list_match(&l, &a));
    a = v4("172.32.0.0");
    ck_assert(!sl_cidr_list_match(&l, &a));
    sl_cidr_list_free(&l);
    ck_assert_int_eq(sl_cidr_list_parse("any", &l, err, sizeof err), 0);
    a = v4("8.8.8.8");
    ck_assert(sl_cidr_list_match(&l, &a));
    sl_cidr_list_free(&l);
    ck_assert_int_eq(sl_cidr_list_parse("0.0.0.0/0", &l, err, sizeof err), 0);
    ck_assert(sl_cidr_list_match(&l, &a));
    a = v6("2001:db8::2"); /* an IPv4 prefix never matches IPv6 */
    ck_assert(!sl_cidr_list_match(&l, &a));
    sl_cidr_list_free(&l);
    const char *bad[] = {
        "",         " , ", "10.0.0.0/33", "::1/129",     "10.0.0.1/8x",  "10.0.0.0/",
        "nonsense", "/8",  "1.2.3",       "10.0.0.0/-1", "10.0.0.0/0008"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(sl_cidr_list_parse(bad[i], &l, err, sizeof err) == -1, "'%s'", bad[i]);
        sl_cidr_list_free(&l);
    }
}
END_TEST

static Suite *mqqb_suite(void)
{
    Suite *s = suite_create("mqqb");
    TCase *tc = tcase_create("codec");
    tcase_add_test(tc, frame3_parses_and_frame4_reply_is_byte_for_byte);
    tcase_add_test(tc, frame5_parses_and_frame6_reply_is_byte_for_byte);
    tcase_add_test(tc, frame7_user_message_parses);
    tcase_add_test(tc, frame8_session_ack_after_one_express_message);
    tcase_add_test(tc, order_ack_round_trips);
    tcase_add_test(tc, truncations_and_lying_lengths_fail_cleanly);
    tcase_add_test(tc, initiator_user_message_round_trips);
    tcase_add_test(tc, initiator_writes_every_property);
    tcase_add_test(tc, tx_numbers_cross_the_32_bit_wrap);
    tcase_add_test(tc, every_optional_header_parses);
    tcase_add_test(tc, frames1_2_ping);
    tcase_add_test(tc, tx_in_order_rule_refuses_every_jump);
    tcase_add_test(tc, tx_declared_gap_only_from_the_sequences_address);
    tcase_add_test(tc, tx_lookup_id_is_tx_number_backwards);
    tcase_add_test(tc, allowed_senders_cidr_lists);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(mqqb_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
