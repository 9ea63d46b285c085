/* props.c - MSMQ properties to AMQP properties and x-msmq-* headers (props.h). */
#include "props.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "../amqp/method.h"
#include "../amqp/table.h"
#include "../core/buf.h"
#include "../core/clock.h"

void msmq_guid_str(const uint8_t g[16], char out[40])
{
    snprintf(out, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", g[3],
             g[2], g[1], g[0], g[5], g[4], g[7], g[6], g[8], g[9], g[10], g[11], g[12], g[13],
             g[14], g[15]);
}

void msmq_peer_str(const struct sockaddr_storage *peer, char *name, size_t nlen, char *ip,
                   size_t iplen)
{
    char a[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (peer->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)peer;
        inet_ntop(AF_INET, &s->sin_addr, a, sizeof a);
        port = ntohs(s->sin_port);
    } else if (peer->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)peer;
        inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof a);
        port = ntohs(s->sin6_port);
    }
    snprintf(name, nlen, "%s:%d", a, port);
    snprintf(ip, iplen, "%s", a);
}

static int zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* A queue format name as MSMQ writes it (MS-MQMQ 2.1): DIRECT=..., PUBLIC=guid,
 * PRIVATE=guid\id (machine GUIDs of "this host"/"the sender" are given as the names of the
 * roles, since the packet does not carry them). Empty when none. */
static void format_name(const mqqb_qformat *q, const uint8_t *src_qm, const uint8_t *dst_qm,
                        char *out, size_t cap)
{
    char g[40];
    out[0] = 0;
    switch (q->type) {
    case MQQB_QF_DIRECT: {
        char s[1024];
        if (mqqb_utf16_to_utf8(q->direct, q->direct_len, s, sizeof s) >= 0)
            snprintf(out, cap, "DIRECT=%s", s);
        break;
    }
    case MQQB_QF_PUBLIC:
        msmq_guid_str(q->guid, g);
        snprintf(out, cap, "PUBLIC=%s", g);
        break;
    case MQQB_QF_PRIVATE_SRC:
    case MQQB_QF_PRIVATE_DST:
        msmq_guid_str(q->type == MQQB_QF_PRIVATE_SRC ? src_qm : dst_qm, g);
        snprintf(out, cap, "PRIVATE=%s\\%08x", g, q->private_id);
        break;
    case MQQB_QF_PRIVATE_OTHER:
        msmq_guid_str(q->guid, g);
        snprintf(out, cap, "PRIVATE=%s\\%08x", g, q->private_id);
        break;
    default:
        break;
    }
}

static void put_cstr(sl_buf *b, const char *key, const char *v)
{
    amqp_tbl_put_str(b, key, (amqp_bytes){(const uint8_t *)v, strlen(v)});
}

static void put_hex(sl_buf *b, const char *key, const uint8_t *p, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    char s[2 * 64 + 1];
    if (n > 64)
        n = 64;
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = hx[p[i] >> 4];
        s[2 * i + 1] = hx[p[i] & 15];
    }
    s[2 * n] = 0;
    put_cstr(b, key, s);
}

qm_message *msmq_props_message(const mqqb_user *m, const char *queue, const char *peer_ip)
{
    char g[40], s[1100], label[760];
    uint64_t now_s = sl_wall_ms() / 1000;
    sl_buf h, props;
    sl_buf_init(&h);
    sl_buf_init(&props);
    size_t mark = amqp_tbl_begin(&h);
    if (m->label &&
        mqqb_utf16_to_utf8(m->label, (size_t)(m->label_len - 1) * 2, label, sizeof label) >= 0)
        put_cstr(&h, "x-msmq-label", label);
    amqp_tbl_put_int(&h, "x-msmq-body-type", (int32_t)m->body_type);
    amqp_tbl_put_long(&h, "x-msmq-app-specific", m->app_tag);
    amqp_tbl_put_int(&h, "x-msmq-class", m->msg_class);
    amqp_tbl_put_int(&h, "x-msmq-priority", m->base.flags & MQQB_BF_PR);
    amqp_tbl_put_int(&h, "x-msmq-delivery", MQQB_UF_DM(m->uflags) ? 1 : 0);
    amqp_tbl_put_bool(&h, "x-msmq-journal", (m->uflags & MQQB_UF_JP) != 0);
    amqp_tbl_put_bool(&h, "x-msmq-dead-letter", (m->uflags & MQQB_UF_JN) != 0);
    amqp_tbl_put_timestamp(&h, "x-msmq-sent-time", m->sent_time);
    amqp_tbl_put_timestamp(&h, "x-msmq-arrived-time", now_s);
    if (m->ttbr != 0xFFFFFFFFu)
        amqp_tbl_put_long(&h, "x-msmq-time-to-be-received", m->ttbr);
    if (m->base.ttrq != 0xFFFFFFFFu)
        amqp_tbl_put_long(&h, "x-msmq-time-to-reach-queue", m->base.ttrq);
    msmq_guid_str(m->source_qm, g);
    put_cstr(&h, "x-msmq-source-machine", g);
    snprintf(s, sizeof s, "%s", peer_ip);
    put_cstr(&h, "x-msmq-source-address", s);
    format_name(&m->dest, m->source_qm, m->dest_qm, s, sizeof s);
    if (s[0])
        put_cstr(&h, "x-msmq-destination-queue", s);
    format_name(&m->admin, m->source_qm, m->dest_qm, s, sizeof s);
    if (s[0])
        put_cstr(&h, "x-msmq-admin-queue", s);
    if (m->ack_flags)
        amqp_tbl_put_int(&h, "x-msmq-ack", m->ack_flags);
    if (m->ext_size)
        amqp_tbl_put_str(&h, "x-msmq-extension", (amqp_bytes){m->ext, m->ext_size});
    if (m->sender_id_size)
        put_hex(&h, "x-msmq-sender-id", m->sender_id, m->sender_id_size);
    if (m->has_connector) {
        msmq_guid_str(m->connector, g);
        put_cstr(&h, "x-msmq-connector-type", g);
    }
    if (m->has_tx) {
        snprintf(s, sizeof s, "%016llx", (unsigned long long)m->tx_seq_id);
        put_cstr(&h, "x-msmq-tx-sequence-id", s);
        amqp_tbl_put_long(&h, "x-msmq-tx-sequence-number", m->tx_seq_no);
        amqp_tbl_put_bool(&h, "x-msmq-first-in-transaction", (m->tx_flags & MQQB_TF_FM) != 0);
        amqp_tbl_put_bool(&h, "x-msmq-last-in-transaction", (m->tx_flags & MQQB_TF_LM) != 0);
    }
    if (m->has_soap) {
        if (m->soap_header_len &&
            mqqb_utf16_to_utf8(m->soap_header, m->soap_header_len, s, sizeof s) >= 0)
            put_cstr(&h, "x-msmq-soap-header", s);
        if (m->soap_body_len &&
            mqqb_utf16_to_utf8(m->soap_body, m->soap_body_len, s, sizeof s) >= 0)
            put_cstr(&h, "x-msmq-soap-body", s);
    }
    amqp_tbl_end(&h, mark);

    amqp_basic_props bp = {0};
    bp.flags = AMQP_P_HEADERS | AMQP_P_DELIVERY_MODE | AMQP_P_PRIORITY | AMQP_P_MESSAGE_ID |
               AMQP_P_TIMESTAMP;
    bp.headers = (amqp_bytes){sl_buf_head(&h) + 4, sl_buf_unread(&h) - 4};
    bp.delivery_mode = MQQB_UF_DM(m->uflags) ? 2 : 1;
    bp.priority = m->base.flags & MQQB_BF_PR;
    bp.timestamp = m->sent_time;
    /* MSMQ's message id: "<source machine GUID>\<number>" */
    char mid[64];
    msmq_guid_str(m->source_qm, g);
    snprintf(mid, sizeof mid, "%s\\%u", g, m->message_id);
    bp.message_id = (amqp_bytes){(const uint8_t *)mid, strlen(mid)};
    char cid[64];
    if (!zero(m->correlation_id, 20)) {
        /* a correlation id is a message id too (GUID + 4-byte number) */
        msmq_guid_str(m->correlation_id, g);
        uint32_t n = (uint32_t)m->correlation_id[16] | (uint32_t)m->correlation_id[17] << 8 |
                     (uint32_t)m->correlation_id[18] << 16 | (uint32_t)m->correlation_id[19] << 24;
        snprintf(cid, sizeof cid, "%s\\%u", g, n);
        bp.flags |= AMQP_P_CORRELATION_ID;
        bp.correlation_id = (amqp_bytes){(const uint8_t *)cid, strlen(cid)};
    }
    char rq[300];
    format_name(&m->resp, m->source_qm, m->dest_qm, s, sizeof s);
    if (m->resp.type == MQQB_QF_SAME_AS_ADMIN)
        format_name(&m->admin, m->source_qm, m->dest_qm, s, sizeof s);
    size_t rq_len = strlen(s);
    if (s[0] && rq_len <= 255) { /* AMQP's reply-to is a shortstr */
        memcpy(rq, s, rq_len + 1);
        bp.flags |= AMQP_P_REPLY_TO;
        bp.reply_to = (amqp_bytes){(const uint8_t *)rq, rq_len};
    }
    char exp[24];
    if (m->ttbr != 0xFFFFFFFFu) {
        /* TimeToBeReceived counts from the send; what is left becomes the expiration */
        uint64_t end = (uint64_t)m->sent_time + m->ttbr;
        uint64_t left_ms = end > now_s ? (end - now_s) * 1000 : 0;
        if (left_ms > 315360000000ull) /* AMQP's expiration stops at 10 years */
            left_ms = 315360000000ull;
        snprintf(exp, sizeof exp, "%llu", (unsigned long long)left_ms);
        bp.flags |= AMQP_P_EXPIRATION;
        bp.expiration = (amqp_bytes){(const uint8_t *)exp, strlen(exp)};
    }
    if (m->body_type == 8 || m->body_type == 31) { /* VT_BSTR, VT_LPWSTR: UTF-16 text */
        bp.flags |= AMQP_P_CONTENT_TYPE | AMQP_P_CONTENT_ENCODING;
        bp.content_type = AMQP_BYTES("text/plain");
        bp.content_encoding = AMQP_BYTES("utf-16le");
    }
    amqp_props_encode(&props, &bp);
    qm_message *msg =
        qm_message_new(AMQP_BYTES(""), (amqp_bytes){(const uint8_t *)queue, strlen(queue)},
                       sl_buf_head(&props), (uint32_t)sl_buf_unread(&props), m->body_size);
    if (m->body_size)
        memcpy(qm_msg_body(msg), m->body, m->body_size);
    sl_buf_free(&h);
    sl_buf_free(&props);
    return msg;
}
