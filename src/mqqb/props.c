/* props.c - MSMQ properties to AMQP properties and x-msmq-* headers (props.h). */
#include "mqqb/props.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "amqp/method.h"
#include "amqp/table.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/hex.h"
#include "core/le.h"

void mqqb_guid_str(const uint8_t g[16], char out[40])
{
    sl_guid_str(g, out);
}

void mqqb_peer_str(const struct sockaddr_storage *peer, char *name, size_t nlen, char *ip,
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
        mqqb_guid_str(q->guid, g);
        snprintf(out, cap, "PUBLIC=%s", g);
        break;
    case MQQB_QF_PRIVATE_SRC:
    case MQQB_QF_PRIVATE_DST:
        mqqb_guid_str(q->type == MQQB_QF_PRIVATE_SRC ? src_qm : dst_qm, g);
        snprintf(out, cap, "PRIVATE=%s\\%08x", g, q->private_id);
        break;
    case MQQB_QF_PRIVATE_OTHER:
        mqqb_guid_str(q->guid, g);
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
    char s[2 * 64 + 1];
    sl_hex(s, p, n > 64 ? 64 : n);
    put_cstr(b, key, s);
}

qm_message *mqqb_props_message(const mqqb_user *m, const char *queue, const char *peer_ip)
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
    mqqb_guid_str(m->source_qm, g);
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
        mqqb_guid_str(m->connector, g);
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
    mqqb_guid_str(m->source_qm, g);
    snprintf(mid, sizeof mid, "%s\\%u", g, m->message_id);
    bp.message_id = (amqp_bytes){(const uint8_t *)mid, strlen(mid)};
    char cid[64];
    if (!zero(m->correlation_id, 20)) {
        /* a correlation id is a message id too (GUID + 4-byte number) */
        mqqb_guid_str(m->correlation_id, g);
        snprintf(cid, sizeof cid, "%s\\%u", g, sl_le32(m->correlation_id + 16));
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

/* ---- the sending side: AMQP properties and x-msmq-* headers back to MSMQ's ---- */

/* A number of at most 32 bits in base (10 or 16), all of [s, s + n): 0 or -1. */
static int u32_parse(const char *s, size_t n, int base, uint32_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 10)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int d = sl_hex_nibble(s[i]);
        if (d < 0 || d >= base)
            return -1;
        v = v * (unsigned)base + (unsigned)d;
    }
    if (v > 0xFFFFFFFFu)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* A format name as the receiving side writes it (DIRECT=..., PUBLIC=guid, PRIVATE=guid\id)
 * into q, its direct name copied into buf (cap bytes): 0, or -1 when MSMQ cannot carry it. */
static int format_parse(amqp_bytes v, mqqb_qout *q, char *buf, size_t cap)
{
    const char *s = (const char *)v.p;
    size_t n = v.len;
    memset(q, 0, sizeof *q);
    if (n > 7 && !strncasecmp(s, "DIRECT=", 7)) {
        if (n - 7 >= cap || memchr(s + 7, 0, n - 7))
            return -1;
        memcpy(buf, s + 7, n - 7);
        buf[n - 7] = 0;
        if (mqqb_utf16_units(buf) < 0 || mqqb_utf16_units(buf) > 0x7FFE)
            return -1;
        q->type = MQQB_QF_DIRECT;
        q->direct = buf;
        return 0;
    }
    if (n > 7 && !strncasecmp(s, "PUBLIC=", 7) && sl_guid_parse(s + 7, n - 7, q->guid) == 0) {
        q->type = MQQB_QF_PUBLIC;
        return 0;
    }
    if (n > 8 + 37 && !strncasecmp(s, "PRIVATE=", 8) && s[8 + 36] == '\\' &&
        sl_guid_parse(s + 8, 36, q->guid) == 0 &&
        u32_parse(s + 8 + 37, n - 8 - 37, 16, &q->private_id) == 0) {
        q->type = MQQB_QF_PRIVATE_OTHER;
        return 0;
    }
    return -1;
}

const char *mqqb_lost_name(unsigned bit)
{
    static const char *const names[MSMQ_LOST_BITS] = {
        "headers other than x-msmq-* (MSMQ messages have none)",
        "reply_to (not a DIRECT=, PUBLIC= or PRIVATE= format name)",
        "correlation_id (not an MSMQ message id, guid\\number)",
        "x-msmq-admin-queue (not a format name)",
        "x-msmq-label (over 249 UTF-16 units or not UTF-8)",
        "x-msmq-sender-id (no SecurityHeader is sent)",
        "x-msmq-soap-header / x-msmq-soap-body (no SRMP envelope is sent)",
        "type, user_id, app_id, cluster_id or a content type other than UTF-16 text",
        "an x-msmq-* header of the wrong type, or an expiration that is not a number",
    };
    return bit < MSMQ_LOST_BITS ? names[bit] : "?";
}

/* x-msmq-* headers that describe the hop the message came in on (the class, delivery, the
 * source machine and address, the destination it was sent to, when it arrived, its sequence):
 * the next hop writes its own, so they are replaced, not lost. */
static int hop_header(amqp_bytes k)
{
    static const char *const hop[] = {
        "x-msmq-class",
        "x-msmq-delivery",
        "x-msmq-arrived-time",
        "x-msmq-source-machine",
        "x-msmq-source-address",
        "x-msmq-destination-queue",
        "x-msmq-connector-type",
        "x-msmq-tx-sequence-id",
        "x-msmq-tx-sequence-number",
        "x-msmq-first-in-transaction",
        "x-msmq-last-in-transaction",
    };
    for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
        if (k.len == strlen(hop[i]) && !memcmp(k.p, hop[i], k.len))
            return 1;
    return 0;
}

static int key_is(amqp_bytes k, const char *s)
{
    return k.len == strlen(s) && !memcmp(k.p, s, k.len);
}

unsigned mqqb_out_props(const uint8_t *props, uint32_t props_len, mqqb_out *u, msmq_out_scratch *s,
                        uint64_t now_s)
{
    unsigned lost = 0;
    amqp_basic_props bp;
    u->priority = 3; /* MQ_PRIORITY's default */
    u->sent_time = (uint32_t)now_s;
    u->ttbr = u->ttrq = 0xFFFFFFFFu;
    u->body_type = 0x1011; /* VT_VECTOR | VT_UI1: bytes */
    if (amqp_props_decode(props, props_len, &bp) != 0)
        return 0; /* the broker stored it: cannot happen; nothing to carry then */
    int have_prio = 0, have_sent = 0, have_ttbr = 0, have_body_type = 0;
    if (bp.flags & AMQP_P_PRIORITY) {
        u->priority = bp.priority > 7 ? 7 : bp.priority; /* AMQP 0-9, MSMQ 0-7 */
        have_prio = 1;
    }
    if (bp.flags & AMQP_P_HEADERS) {
        amqp_table_iter it;
        amqp_bytes k, str;
        amqp_value v;
        int64_t n;
        amqp_table_iter_init(&it, bp.headers);
        while (amqp_table_next(&it, &k, &v)) {
            int isint = amqp_value_int(&v, &n), isstr = amqp_value_str(&v, &str);
            int u32 = isint && n >= 0 && n <= 0xFFFFFFFFll;
            if (k.len < 7 || memcmp(k.p, "x-msmq-", 7)) {
                lost |= MSMQ_LOST_HEADERS;
            } else if (key_is(k, "x-msmq-class") && isint && n >= 0 && n <= 0xffff &&
                       MQQB_CLASS_IS_ADMIN_ACK((uint16_t)n)) {
                /* an administration acknowledgement (msmq/ack.c, or one a Windows node sent
                 * here) stays one; any other class describes the hop it came in on */
                u->msg_class = (uint16_t)n;
            } else if (hop_header(k)) {
                continue;
            } else if (key_is(k, "x-msmq-label")) {
                if (isstr && str.len < sizeof s->label && !memchr(str.p, 0, str.len)) {
                    memcpy(s->label, str.p, str.len);
                    s->label[str.len] = 0;
                    long units = mqqb_utf16_units(s->label);
                    if (units >= 0 && units <= 249)
                        u->label = s->label;
                    else
                        lost |= MSMQ_LOST_LABEL;
                } else {
                    lost |= MSMQ_LOST_LABEL;
                }
            } else if (key_is(k, "x-msmq-app-specific")) {
                if (u32)
                    u->app_tag = (uint32_t)n;
                else
                    lost |= MSMQ_LOST_VALUE;
            } else if (key_is(k, "x-msmq-body-type")) {
                if (u32 || (isint && n >= INT32_MIN && n < 0)) { /* written as a signed 'I' */
                    u->body_type = (uint32_t)n;
                    have_body_type = 1;
                } else
                    lost |= MSMQ_LOST_VALUE;
            } else if (key_is(k, "x-msmq-priority")) {
                if (isint && n >= 0 && n <= 7) {
                    if (!have_prio)
                        u->priority = (unsigned)n;
                } else {
                    lost |= MSMQ_LOST_VALUE;
                }
            } else if (key_is(k, "x-msmq-time-to-be-received")) {
                if (u32) {
                    u->ttbr = (uint32_t)n;
                    have_ttbr = 1;
                } else
                    lost |= MSMQ_LOST_VALUE;
            } else if (key_is(k, "x-msmq-time-to-reach-queue")) {
                if (u32)
                    u->ttrq = (uint32_t)n;
                else
                    lost |= MSMQ_LOST_VALUE;
            } else if (key_is(k, "x-msmq-sent-time")) {
                if (u32) {
                    u->sent_time = (uint32_t)n;
                    have_sent = 1;
                } else
                    lost |= MSMQ_LOST_VALUE;
            } else if (key_is(k, "x-msmq-admin-queue")) {
                if (!isstr || format_parse(str, &u->admin, s->admin, sizeof s->admin) < 0)
                    lost |= MSMQ_LOST_ADMIN;
            } else if (key_is(k, "x-msmq-ack")) {
                if (isint && n >= 0 && n <= 255)
                    u->ack_flags = (uint8_t)n;
                else
                    lost |= MSMQ_LOST_VALUE;
            } else if (key_is(k, "x-msmq-journal") || key_is(k, "x-msmq-dead-letter")) {
                int on = v.tag == 't' ? v.v.b : isint ? n != 0 : -1;
                if (on < 0)
                    lost |= MSMQ_LOST_VALUE;
                else if (key_is(k, "x-msmq-journal"))
                    u->journal = on;
                else
                    u->dead_letter = on;
            } else if (key_is(k, "x-msmq-extension")) {
                if (isstr && str.len <= MQQB_PACKET_MAX) {
                    u->ext = str.p;
                    u->ext_len = (uint32_t)str.len;
                } else
                    lost |= MSMQ_LOST_VALUE;
            } else if (key_is(k, "x-msmq-sender-id")) {
                lost |= MSMQ_LOST_SECURITY;
            } else if (key_is(k, "x-msmq-soap-header") || key_is(k, "x-msmq-soap-body")) {
                lost |= MSMQ_LOST_SOAP;
            } else {
                lost |= MSMQ_LOST_HEADERS;
            }
        }
    }
    if (!have_sent && (bp.flags & AMQP_P_TIMESTAMP) && bp.timestamp <= 0xFFFFFFFFu)
        u->sent_time = (uint32_t)bp.timestamp;
    if (!have_ttbr && (bp.flags & AMQP_P_EXPIRATION)) {
        /* what is left of the expiration, from now; TimeToBeReceived counts from the send */
        uint32_t ms;
        char e[16];
        if (bp.expiration.len < sizeof e &&
            u32_parse((const char *)bp.expiration.p, bp.expiration.len, 10, &ms) == 0) {
            uint64_t t = ((uint64_t)ms + 999) / 1000;
            if (now_s > u->sent_time)
                t += now_s - u->sent_time;
            u->ttbr = t >= 0xFFFFFFFFu ? 0xFFFFFFFEu : (uint32_t)t;
        } else {
            lost |= MSMQ_LOST_VALUE;
        }
    }
    if (bp.flags & AMQP_P_CORRELATION_ID) {
        /* an MSMQ message id, "guid\number" (what the receiving side writes) */
        const char *c = (const char *)bp.correlation_id.p;
        size_t n = bp.correlation_id.len;
        uint32_t no;
        if (n > 37 && c[36] == '\\' && sl_guid_parse(c, 36, s->correlation) == 0 &&
            u32_parse(c + 37, n - 37, 10, &no) == 0) {
            sl_put_le32(s->correlation + 16, no);
            u->correlation = s->correlation;
        } else {
            lost |= MSMQ_LOST_CORRELATION;
        }
    }
    if ((bp.flags & AMQP_P_REPLY_TO) &&
        format_parse(bp.reply_to, &u->resp, s->resp, sizeof s->resp) < 0)
        lost |= MSMQ_LOST_REPLY_TO;
    int text = (bp.flags & AMQP_P_CONTENT_TYPE) && (bp.flags & AMQP_P_CONTENT_ENCODING) &&
               bp.content_type.len == 10 && !memcmp(bp.content_type.p, "text/plain", 10) &&
               bp.content_encoding.len == 8 && !memcmp(bp.content_encoding.p, "utf-16le", 8);
    if (text && !have_body_type)
        u->body_type = 8; /* VT_BSTR: what the receiving side maps to text/plain utf-16le */
    if (((bp.flags & (AMQP_P_CONTENT_TYPE | AMQP_P_CONTENT_ENCODING)) && !text) ||
        (bp.flags & (AMQP_P_TYPE | AMQP_P_USER_ID | AMQP_P_APP_ID | AMQP_P_CLUSTER_ID)))
        lost |= MSMQ_LOST_AMQP;
    return lost;
}
