/* mqqb.c - the MS-MQQB / MS-MQMQ packet codec (mqqb.h has the rules it keeps). */
#include "mqqb/mqqb.h"

#include <string.h>
#include <strings.h>

#include "core/le.h"
#include "core/utf16.h"

static inline size_t align4(size_t n)
{
    return (n + 3) & ~(size_t)3;
}

void mqqb_base_decode(const uint8_t *p, mqqb_base *b)
{
    b->version = p[0];
    b->reserved = p[1];
    b->flags = sl_le16(p + 2);
    b->signature = sl_le32(p + 4);
    b->packet_size = sl_le32(p + 8);
    b->ttrq = sl_le32(p + 12);
}

int mqqb_frame_len(const uint8_t *p, size_t n, uint32_t max, uint32_t *total, const char **why)
{
    if (n < MQQB_BASE_LEN)
        return 0;
    mqqb_base b;
    mqqb_base_decode(p, &b);
    if (b.version != MQQB_VERSION) {
        *why = "BaseHeader.VersionNumber is not 0x10";
        return -1;
    }
    if (b.signature != MQQB_SIGNATURE) {
        *why = "BaseHeader.Signature is not 0x524F494C";
        return -1;
    }
    if (b.packet_size < MQQB_BASE_LEN + MQQB_INTERNAL_LEN) {
        *why = "BaseHeader.PacketSize is smaller than any packet";
        return -1;
    }
    uint64_t t = b.packet_size;
    if ((b.flags & MQQB_BF_SH) && !(b.flags & MQQB_BF_IN))
        t += MQQB_SESSION_LEN; /* a UserMessage's SessionHeader is not counted */
    if (t > max) {
        *why = "BaseHeader.PacketSize is over the limit";
        return -1;
    }
    *total = (uint32_t)t;
    return 1;
}

static void session_decode(const uint8_t *p, mqqb_session *s)
{
    s->ack_seq = sl_le16(p);
    s->rec_ack_seq = sl_le16(p + 2);
    s->rec_ack_flags = sl_le32(p + 4);
    s->user_seq = sl_le16(p + 8);
    s->rec_seq = sl_le16(p + 10);
    s->window = sl_le16(p + 12);
    s->reserved = sl_le16(p + 14);
}

int mqqb_parse_internal(const uint8_t *p, size_t len, mqqb_internal *out, const char **why)
{
    memset(out, 0, sizeof *out);
    if (len < MQQB_BASE_LEN + MQQB_INTERNAL_LEN) {
        *why = "internal packet is truncated";
        return -1;
    }
    mqqb_base_decode(p, &out->base);
    if (!(out->base.flags & MQQB_BF_IN) || out->base.packet_size > len) {
        *why = "not an internal packet";
        return -1;
    }
    out->iflags = sl_le16(p + 18);
    out->type = out->iflags & 0xF;
    const uint8_t *h = p + MQQB_BASE_LEN + MQQB_INTERNAL_LEN;
    switch (out->type) {
    case MQQB_PT_ESTABLISH:
        if (out->base.packet_size != MQQB_EC_PACKET_LEN) {
            *why = "EstablishConnection packet is not 572 bytes";
            return -1;
        }
        memcpy(out->ec.client_guid, h, 16);
        memcpy(out->ec.server_guid, h + 16, 16);
        out->ec.timestamp = sl_le32(h + 32);
        out->ec.os = sl_le16(h + 36);
        out->ec.reserved = sl_le16(h + 38);
        return 0;
    case MQQB_PT_PARAMS:
        if (out->base.packet_size != MQQB_CP_PACKET_LEN) {
            *why = "ConnectionParameters packet is not 32 bytes";
            return -1;
        }
        out->cp.recoverable_ack_timeout = sl_le32(h);
        out->cp.ack_timeout = sl_le32(h + 4);
        out->cp.reserved = sl_le16(h + 8);
        out->cp.window = sl_le16(h + 10);
        return 0;
    case MQQB_PT_SESSION_ACK:
        if (!(out->base.flags & MQQB_BF_SH) || out->base.packet_size != MQQB_SESSION_ACK_LEN) {
            *why = "SessionAck packet without its 16-byte SessionHeader";
            return -1;
        }
        session_decode(h, &out->session);
        return 0;
    default:
        *why = "InternalHeader.Flags.PT is not 1, 2 or 3";
        return -1;
    }
}

/* ---- UserMessage ---- */

typedef struct cur {
    const uint8_t *p;
    size_t off, end;
    const char **why;
} cur;

static int need(cur *c, uint64_t n, const char *what)
{
    if (n > c->end - c->off) {
        *c->why = what;
        return -1;
    }
    return 0;
}

/* Pad to 4 relative to the packet start (every header starts 4-aligned, MS-MQMQ 2.2.18.1.5). */
static int pad4(cur *c, const char *what)
{
    size_t a = align4(c->off);
    if (a > c->end) {
        *c->why = what;
        return -1;
    }
    c->off = a;
    return 0;
}

static int qformat(cur *c, unsigned type, mqqb_qformat *q)
{
    memset(q, 0, sizeof *q);
    q->type = type;
    switch (type) {
    case MQQB_QF_NONE:
    case MQQB_QF_SAME_AS_ADMIN:
        return 0;
    case MQQB_QF_PRIVATE_SRC:
    case MQQB_QF_PRIVATE_DST:
    case MQQB_QF_PRIVATE_ADMIN:
        if (need(c, 4, "queue format name is truncated") < 0)
            return -1;
        q->private_id = sl_le32(c->p + c->off);
        c->off += 4;
        return 0;
    case MQQB_QF_PUBLIC:
        if (need(c, 16, "queue format name is truncated") < 0)
            return -1;
        memcpy(q->guid, c->p + c->off, 16);
        c->off += 16;
        return 0;
    case MQQB_QF_PRIVATE_OTHER:
        if (pad4(c, "queue format name is truncated") < 0 ||
            need(c, 20, "queue format name is truncated") < 0)
            return -1;
        memcpy(q->guid, c->p + c->off, 16);
        q->private_id = sl_le32(c->p + c->off + 16);
        c->off += 20;
        return 0;
    case MQQB_QF_DIRECT: {
        if (need(c, 2, "direct format name is truncated") < 0)
            return -1;
        uint16_t count = sl_le16(c->p + c->off);
        c->off += 2;
        if (count < 2 || (count & 1) || need(c, count, "direct format name runs past the packet"))
            return *c->why = "direct format name has a bad length", -1;
        const uint8_t *s = c->p + c->off;
        if (s[count - 2] || s[count - 1]) {
            *c->why = "direct format name is not NUL-terminated";
            return -1;
        }
        q->direct = s;
        q->direct_len = (size_t)count - 2;
        c->off += count;
        return pad4(c, "direct format name padding runs past the packet");
    }
    default:
        *c->why = "unknown queue format type";
        return -1;
    }
}

static int user_header(cur *c, mqqb_user *m)
{
    const uint8_t *p = c->p + c->off;
    if (need(c, 48, "UserHeader is truncated") < 0)
        return -1;
    memcpy(m->source_qm, p, 16);
    memcpy(m->dest_qm, p + 16, 16);
    m->ttbr = sl_le32(p + 32);
    m->sent_time = sl_le32(p + 36);
    m->message_id = sl_le32(p + 40);
    m->uflags = sl_le32(p + 44);
    c->off += 48;
    unsigned dq = MQQB_UF_DQ(m->uflags), aq = MQQB_UF_AQ(m->uflags);
    if (dq != 0 && dq != 3 && dq != 5 && dq != 7) {
        *c->why = "UserHeader.Flags.DQ is not 0, 3, 5 or 7";
        return -1;
    }
    if (aq == 1 || aq == 4) {
        *c->why = "UserHeader.Flags.AQ is not 0, 2, 3, 5, 6 or 7";
        return -1;
    }
    if (!(m->uflags & MQQB_UF_MP)) {
        *c->why = "UserHeader.Flags.MP is clear (a MessagePropertiesHeader is required)";
        return -1;
    }
    if ((m->uflags & MQQB_UF_TH) && MQQB_UF_DM(m->uflags) == 0) {
        *c->why = "a transactional message must be recoverable (UserHeader.Flags.DM)";
        return -1;
    }
    if (qformat(c, dq, &m->dest) < 0 || qformat(c, aq, &m->admin) < 0 ||
        qformat(c, MQQB_UF_RQ(m->uflags), &m->resp) < 0)
        return -1;
    if (m->uflags & MQQB_UF_CQ) {
        if (need(c, 16, "ConnectorType is truncated") < 0)
            return -1;
        m->has_connector = 1;
        memcpy(m->connector, c->p + c->off, 16);
        c->off += 16;
    }
    return 0;
}

static int tx_header(cur *c, mqqb_user *m)
{
    if (need(c, 20, "TransactionHeader is truncated") < 0)
        return -1;
    const uint8_t *p = c->p + c->off;
    m->has_tx = 1;
    m->tx_flags = sl_le32(p);
    m->tx_seq_id = (uint64_t)sl_le32(p + 8) << 32 | sl_le32(p + 4);
    m->tx_seq_no = sl_le32(p + 12);
    m->tx_prev_no = sl_le32(p + 16);
    c->off += 20;
    if (m->tx_seq_no == 0 || m->tx_prev_no >= m->tx_seq_no) {
        *c->why = "TransactionHeader numbers out of range (TxSequenceNumber 0, or previous >= it)";
        return -1;
    }
    if (m->tx_flags & MQQB_TF_CG) {
        if (need(c, 16, "TransactionHeader.ConnectorQMGuid is truncated") < 0)
            return -1;
        m->has_connector_qm = 1;
        memcpy(m->connector_qm, c->p + c->off, 16);
        c->off += 16;
    }
    return 0;
}

static int security_header(cur *c, mqqb_user *m)
{
    if (need(c, 16, "SecurityHeader is truncated") < 0)
        return -1;
    const uint8_t *p = c->p + c->off;
    m->has_security = 1;
    m->sec_flags = sl_le16(p);
    m->sender_id_size = sl_le16(p + 2);
    m->enc_key_size = sl_le16(p + 4);
    m->sig_size = sl_le16(p + 6);
    m->cert_size = sl_le32(p + 8);
    m->provider_size = sl_le32(p + 12);
    c->off += 16;
    /* SecurityData: each item 4-aligned; sizes are at most 4 MiB each after the checks, so
     * the 64-bit sum cannot wrap */
    uint64_t total = align4(m->sender_id_size) + align4(m->enc_key_size) + align4(m->sig_size);
    if (m->cert_size > MQQB_PACKET_MAX || m->provider_size > MQQB_PACKET_MAX) {
        *c->why = "SecurityHeader sizes are larger than a packet";
        return -1;
    }
    total += align4(m->cert_size) + align4(m->provider_size);
    if (need(c, total, "SecurityHeader.SecurityData runs past the packet") < 0)
        return -1;
    m->sender_id = m->sender_id_size ? c->p + c->off : NULL;
    c->off += (size_t)total;
    return 0;
}

static int props_header(cur *c, mqqb_user *m)
{
    if (need(c, 56, "MessagePropertiesHeader is truncated") < 0)
        return -1;
    const uint8_t *p = c->p + c->off;
    m->ack_flags = p[0];
    m->label_len = p[1];
    m->msg_class = sl_le16(p + 2);
    memcpy(m->correlation_id, p + 4, 20);
    m->body_type = sl_le32(p + 24);
    m->app_tag = sl_le32(p + 28);
    m->body_size = sl_le32(p + 32);
    m->alloc_body_size = sl_le32(p + 36);
    m->privacy = sl_le32(p + 40);
    m->hash_alg = sl_le32(p + 44);
    m->enc_alg = sl_le32(p + 48);
    m->ext_size = sl_le32(p + 52);
    c->off += 56;
    if (m->label_len > 250) {
        *c->why = "MessagePropertiesHeader.LabelLength is over 250";
        return -1;
    }
    size_t lb = (size_t)m->label_len * 2;
    if (need(c, lb, "Label runs past the packet") < 0)
        return -1;
    if (lb) {
        const uint8_t *l = c->p + c->off;
        if (l[lb - 2] || l[lb - 1]) {
            *c->why = "Label is not NUL-terminated";
            return -1;
        }
        m->label = l;
    }
    c->off += lb;
    if (need(c, (uint64_t)m->ext_size + m->body_size,
             "ExtensionData or MessageBody runs past the packet") < 0)
        return -1;
    m->ext = c->p + c->off;
    c->off += m->ext_size;
    m->body = c->p + c->off;
    c->off += m->body_size;
    return pad4(c, "MessagePropertiesHeader padding runs past the packet");
}

static int debug_header(cur *c, mqqb_user *m)
{
    if (need(c, 4, "DebugHeader is truncated") < 0)
        return -1;
    m->has_debug = 1;
    m->debug_flags = sl_le16(c->p + c->off);
    c->off += 4;
    unsigned qt = m->debug_flags & 3u;
    if (qt > 1) {
        *c->why = "DebugHeader.Flags.QT is not 0 or 1";
        return -1;
    }
    if (qt == 1) {
        if (need(c, 16, "DebugHeader.QueueIdentifier is truncated") < 0)
            return -1;
        memcpy(m->debug_queue, c->p + c->off, 16);
        c->off += 16;
    }
    return 0;
}

static int soap_section(cur *c, uint16_t id, const uint8_t **s, size_t *len)
{
    if (need(c, 8, "SoapHeader is truncated") < 0)
        return -1;
    if (sl_le16(c->p + c->off) != id) {
        *c->why = "SoapHeader section id is wrong";
        return -1;
    }
    uint64_t chars = sl_le32(c->p + c->off + 4);
    c->off += 8;
    if (need(c, chars * 2, "SoapHeader section runs past the packet") < 0)
        return -1;
    *s = c->p + c->off;
    *len = chars ? (size_t)chars * 2 - 2 : 0; /* without the NUL */
    c->off += (size_t)chars * 2;
    return pad4(c, "SoapHeader padding runs past the packet");
}

static int mqf_header(cur *c, mqqb_user *m)
{
    m->has_mqf = 1;
    for (int i = 0; i < 3; i++) { /* Destination, Administration, Response */
        if (need(c, 12, "MQFAddressHeader is truncated") < 0)
            return -1;
        uint32_t size = sl_le32(c->p + c->off);
        uint16_t hid = sl_le16(c->p + c->off + 4);
        static const uint16_t ids[3] = {0x64, 0xC8, 0x12C};
        if (size < 12 || hid != ids[i]) {
            *c->why = "MQFAddressHeader has a bad size or id";
            return -1;
        }
        if (i == 0)
            m->mqf_dest_count = sl_le32(c->p + c->off + 8);
        if (need(c, align4(size), "MQFAddressHeader runs past the packet") < 0)
            return -1;
        c->off += align4(size);
    }
    if (need(c, 8, "MQFSignatureHeader is truncated") < 0)
        return -1;
    if (sl_le16(c->p + c->off) != 0x15E) {
        *c->why = "MQFSignatureHeader.ID is not 0x015E";
        return -1;
    }
    uint64_t size = sl_le32(c->p + c->off + 4);
    c->off += 8;
    if (need(c, align4(size), "MQFSignatureHeader runs past the packet") < 0)
        return -1;
    c->off += align4(size);
    return 0;
}

int mqqb_parse_user(const uint8_t *p, size_t len, mqqb_user *m, const char **why)
{
    memset(m, 0, sizeof *m);
    if (len < MQQB_BASE_LEN) {
        *why = "packet is truncated";
        return -1;
    }
    mqqb_base_decode(p, &m->base);
    if (m->base.flags & MQQB_BF_IN) {
        *why = "not a UserMessage packet";
        return -1;
    }
    if (m->base.packet_size > len || m->base.packet_size < MQQB_BASE_LEN) {
        *why = "BaseHeader.PacketSize does not match the packet";
        return -1;
    }
    cur c = {.p = p, .off = MQQB_BASE_LEN, .end = m->base.packet_size, .why = why};
    if (user_header(&c, m) < 0)
        return -1;
    if ((m->uflags & MQQB_UF_TH) && tx_header(&c, m) < 0)
        return -1;
    if ((m->uflags & MQQB_UF_SH) && security_header(&c, m) < 0)
        return -1;
    if (props_header(&c, m) < 0)
        return -1;
    if ((m->base.flags & MQQB_BF_DH) && debug_header(&c, m) < 0)
        return -1;
    if (m->uflags & MQQB_UF_HH) {
        m->has_soap = 1;
        if (soap_section(&c, 0x320, &m->soap_header, &m->soap_header_len) < 0 ||
            soap_section(&c, 0x384, &m->soap_body, &m->soap_body_len) < 0)
            return -1;
    }
    if ((m->uflags & MQQB_UF_MQ) && mqf_header(&c, m) < 0)
        return -1;
    /* Headers MS-MQMQ does not list may follow up to PacketSize (later MSMQ versions add
     * some); they are skipped, their bytes were counted by the framing. */
    if (m->base.flags & MQQB_BF_SH) {
        if ((uint64_t)m->base.packet_size + MQQB_SESSION_LEN > len) {
            *why = "SessionHeader is truncated";
            return -1;
        }
        m->has_session = 1;
        session_decode(p + m->base.packet_size, &m->session);
    }
    return 0;
}

/* ---- writers ---- */

/* A SessionHeader (MS-MQMQ 2.2.20.4), 16 bytes: session_decode's mirror. */
static void session_encode(uint8_t *h, const mqqb_session *s)
{
    sl_put_le16(h, s->ack_seq);
    sl_put_le16(h + 2, s->rec_ack_seq);
    sl_put_le32(h + 4, s->rec_ack_flags);
    sl_put_le16(h + 8, s->user_seq);
    sl_put_le16(h + 10, s->rec_seq);
    sl_put_le16(h + 12, s->window);
    sl_put_le16(h + 14, s->reserved);
}

static void base_write(uint8_t *p, uint8_t reserved, uint16_t flags, uint32_t size)
{
    p[0] = MQQB_VERSION;
    p[1] = reserved;
    sl_put_le16(p + 2, flags);
    sl_put_le32(p + 4, MQQB_SIGNATURE);
    sl_put_le32(p + 8, size);
    sl_put_le32(p + 12, 0xFFFFFFFFu); /* not a UserMessage: TimeToReachQueue infinite */
}

/* BaseHeader.Reserved "can be set to any arbitrary value": the values of the captures of
 * MS-MQQB section 4 (frames 4, 6 and 8), so our replies match them byte for byte. */
#define RSV_EC 0x5A
#define RSV_CP 0xC0
#define RSV_SA 0xCD

static void ec_write(uint8_t *out, const mqqb_establish *e, uint8_t rsv, uint16_t iflags,
                     const uint8_t server[16], uint8_t pad)
{
    base_write(out, rsv, MQQB_BF_IN | 3, MQQB_EC_PACKET_LEN);
    sl_put_le16(out + 16, 0);
    sl_put_le16(out + 18, iflags);
    uint8_t *h = out + 20;
    memcpy(h, e->client_guid, 16);
    memcpy(h + 16, server, 16);
    sl_put_le32(h + 32, e->timestamp);
    sl_put_le16(h + 36, e->os);
    sl_put_le16(h + 38, 0);
    memset(h + 40, pad, 512);
}

void mqqb_write_establish_reply(uint8_t out[MQQB_EC_PACKET_LEN], const mqqb_establish *req,
                                const uint8_t own_guid[16], int refuse)
{
    static const uint8_t zero[16];
    const uint8_t *server = memcmp(req->server_guid, zero, 16) ? req->server_guid : own_guid;
    ec_write(out, req, RSV_EC, (uint16_t)(MQQB_PT_ESTABLISH | (refuse ? MQQB_IF_CS : 0)), server,
             0x5A);
}

void mqqb_write_establish_request(uint8_t out[MQQB_EC_PACKET_LEN], const mqqb_establish *req)
{
    ec_write(out, req, 0xC0, MQQB_PT_ESTABLISH, req->server_guid, 0x5A);
}

void mqqb_write_params(uint8_t out[MQQB_CP_PACKET_LEN], const mqqb_params *cp)
{
    base_write(out, RSV_CP, MQQB_BF_IN | 3, MQQB_CP_PACKET_LEN);
    sl_put_le16(out + 16, 0);
    sl_put_le16(out + 18, MQQB_PT_PARAMS);
    sl_put_le32(out + 20, cp->recoverable_ack_timeout);
    sl_put_le32(out + 24, cp->ack_timeout);
    sl_put_le16(out + 28, 0);
    sl_put_le16(out + 30, cp->window);
}

void mqqb_write_session_ack(uint8_t out[MQQB_SESSION_ACK_LEN], const mqqb_session *s)
{
    base_write(out, RSV_SA, MQQB_BF_IN | MQQB_BF_SH | 3, MQQB_SESSION_ACK_LEN);
    sl_put_le16(out + 16, 0);
    sl_put_le16(out + 18, MQQB_PT_SESSION_ACK);
    session_encode(out + 20, s);
}

/* OrderAck and FinalAck (MS-MQQB 2.2.4, 2.2.5): UserMessages to the sender's order queue
 * with label "QM Ordering Ack", BodyType VT_EMPTY and a 36-byte body. */
static size_t write_ack(uint8_t *out, size_t cap, const uint8_t own_guid[16], const char *addr,
                        uint32_t message_id, uint32_t sent_time, uint16_t cls, unsigned dm,
                        const uint8_t body[MQQB_ORDER_ACK_BODY_LEN])
{
    static const char label[] = "QM Ordering Ack";
    char dq[300];
    size_t al = strlen(addr);
    if (al > 200)
        return 0;
    memcpy(dq, "TCP:", 4);
    memcpy(dq + 4, addr, al);
    memcpy(dq + 4 + al, "\\PRIVATE$\\order_queue$", 22);
    size_t dql = 4 + al + 22;
    size_t count = (dql + 1) * 2;
    size_t uh = 48 + align4(2 + count);
    size_t mp = 56 + sizeof label * 2 + MQQB_ORDER_ACK_BODY_LEN; /* 124: already aligned */
    size_t total = MQQB_BASE_LEN + uh + align4(mp);
    if (total > cap)
        return 0;
    memset(out, 0, total);
    /* BaseHeader.Flags all 0; a UserMessage: TimeToReachQueue infinite */
    base_write(out, 0, 0, (uint32_t)total);
    uint8_t *p = out + MQQB_BASE_LEN;
    memcpy(p, own_guid, 16);
    /* QueueManagerAddress: the NULL GUID for a direct format name */
    sl_put_le32(p + 32, 0xFFFFFFFFu);
    sl_put_le32(p + 36, sent_time);
    sl_put_le32(p + 40, message_id);
    sl_put_le32(p + 44, MQQB_UF_MP | (uint32_t)dm << 5 | (uint32_t)MQQB_QF_DIRECT << 10);
    sl_put_le16(p + 48, (uint16_t)count);
    for (size_t i = 0; i < dql; i++)
        sl_put_le16(p + 50 + 2 * i, (uint8_t)dq[i]);
    p += uh;
    p[1] = (uint8_t)sizeof label; /* LabelLength, NUL included */
    sl_put_le16(p + 2, cls);
    sl_put_le32(p + 32, MQQB_ORDER_ACK_BODY_LEN);
    sl_put_le32(p + 36, MQQB_ORDER_ACK_BODY_LEN);
    for (size_t i = 0; i < sizeof label; i++)
        sl_put_le16(p + 56 + 2 * i, (uint8_t)label[i]);
    memcpy(p + 56 + sizeof label * 2, body, MQQB_ORDER_ACK_BODY_LEN);
    return total;
}

size_t mqqb_write_order_ack(uint8_t *out, size_t cap, const uint8_t own_guid[16], const char *addr,
                            uint32_t message_id, uint32_t sent_time, uint64_t seq_id,
                            uint32_t seq_no)
{
    uint8_t b[MQQB_ORDER_ACK_BODY_LEN] = {0};
    sl_put_le32(b, (uint32_t)seq_id);
    sl_put_le32(b + 4, (uint32_t)(seq_id >> 32));
    sl_put_le32(b + 8, seq_no);
    sl_put_le32(b + 12, seq_no - 1);
    return write_ack(out, cap, own_guid, addr, message_id, sent_time, MQMSG_CLASS_ORDER_ACK, 0, b);
}

size_t mqqb_write_final_ack(uint8_t *out, size_t cap, const uint8_t own_guid[16], const char *addr,
                            uint32_t message_id, uint32_t sent_time, uint16_t cls,
                            const mqqb_user *acked)
{
    uint8_t b[MQQB_ORDER_ACK_BODY_LEN];
    sl_put_le32(b, (uint32_t)acked->tx_seq_id);
    sl_put_le32(b + 4, (uint32_t)(acked->tx_seq_id >> 32));
    sl_put_le32(b + 8, acked->tx_seq_no);
    sl_put_le32(b + 12, acked->tx_prev_no);
    memcpy(b + 16, acked->source_qm, 16);
    sl_put_le32(b + 32, acked->message_id);
    /* FinalAck: recoverable (UserHeader.Flags.DM = 1) */
    return write_ack(out, cap, own_guid, addr, message_id, sent_time, cls, 1, b);
}

/* ---- ping ---- */

int mqqb_parse_ping(const uint8_t *p, size_t len, mqqb_ping *out)
{
    if (len < MQQB_PING_LEN || sl_le16(p + 2) != MQQB_PING_SIGNATURE)
        return -1;
    out->flags = sl_le16(p);
    out->cookie = sl_le32(p + 4);
    memcpy(out->qm_guid, p + 8, 16);
    return 0;
}

void mqqb_write_ping_reply(uint8_t out[MQQB_PING_LEN], const mqqb_ping *req,
                           const uint8_t own_guid[16], int refuse)
{
    sl_put_le16(out, (uint16_t)((req->flags & MQQB_PING_RC) | (refuse ? MQQB_PING_RF : 0)));
    sl_put_le16(out + 2, MQQB_PING_SIGNATURE);
    sl_put_le32(out + 4, req->cookie);
    memcpy(out + 8, own_guid, 16);
}

/* ---- strings ---- */

long mqqb_utf16_to_utf8(const uint8_t *p, size_t n, char *out, size_t cap)
{
    return sl_utf16le_to_utf8(p, n, out, cap);
}

int mqqb_direct_private_queue(const char *s, size_t n, const char **name, size_t *len)
{
    static const char tag[] = "\\private$\\";
    const size_t tl = sizeof tag - 1;
    /* "<protocol>:<address>\private$\<queue>": the first tag after the address */
    const char *colon = memchr(s, ':', n);
    if (!colon)
        return -1;
    for (size_t i = (size_t)(colon - s) + 1; i + tl <= n; i++) {
        if (!strncasecmp(s + i, tag, tl)) {
            size_t q = i + tl;
            if (q >= n || i == (size_t)(colon - s) + 1)
                return -1; /* no queue, or no address */
            *name = s + q;
            *len = n - q;
            return 0;
        }
    }
    return -1;
}

/* ---- the initiator's UserMessage ---- */

/* UTF-8 s to UTF-16LE into out (NULL: only count): UTF-16 units, or -1 when s is not UTF-8
 * (core/utf16.h's policy; a C string holds no NUL). */
static long utf8_to_utf16(const char *s, uint8_t *out)
{
    return sl_utf8_to_utf16le((const uint8_t *)s, strlen(s), out);
}

long mqqb_utf16_units(const char *s)
{
    return utf8_to_utf16(s, NULL);
}

/* Bytes a queue format name takes in the UserHeader (from a 4-aligned offset, so each
 * ends 4-aligned as the parser expects), or -1 when its direct name is not UTF-8 / too long. */
static long qout_len(unsigned type, const char *direct, int *units)
{
    switch (type) {
    case MQQB_QF_NONE:
        return 0;
    case MQQB_QF_PUBLIC:
        return 16;
    case MQQB_QF_PRIVATE_OTHER:
        return 20;
    case MQQB_QF_DIRECT: {
        long u = direct ? utf8_to_utf16(direct, NULL) : -1;
        if (u < 0 || (u + 1) * 2 > 0xFFFF)
            return -1;
        *units = (int)u;
        return (long)align4(2 + (size_t)(u + 1) * 2);
    }
    default:
        return -1;
    }
}

static size_t qout_write(uint8_t *p, const mqqb_qout *q)
{
    switch (q->type) {
    case MQQB_QF_PUBLIC:
        memcpy(p, q->guid, 16);
        return 16;
    case MQQB_QF_PRIVATE_OTHER:
        memcpy(p, q->guid, 16);
        sl_put_le32(p + 16, q->private_id);
        return 20;
    case MQQB_QF_DIRECT: {
        long units = utf8_to_utf16(q->direct, p + 2);
        sl_put_le16(p, (uint16_t)((units + 1) * 2)); /* bytes, the NUL included */
        return align4(2 + (size_t)(units + 1) * 2);
    }
    default:
        return 0;
    }
}

/* Sizes of the parts: the UserHeader with its queue names, the TransactionHeader, the
 * MessagePropertiesHeader (each padded to 4). 0 when a name or the label cannot be encoded. */
static size_t user_parts(const mqqb_out *m, size_t *uh, size_t *th, size_t *mp)
{
    int u;
    long d = qout_len(MQQB_QF_DIRECT, m->dest, &u);
    long a = qout_len(m->admin.type, m->admin.direct, &u);
    long r = qout_len(m->resp.type, m->resp.direct, &u);
    if (d < 0 || a < 0 || r < 0)
        return 0;
    long label = 0;
    if (m->label) {
        label = utf8_to_utf16(m->label, NULL);
        if (label < 0 || label > 249) /* LabelLength is at most 250, the NUL included */
            return 0;
        label++;
    }
    *uh = 48 + (size_t)(d + a + r);
    *th = m->tx ? 20 : 0;
    uint64_t mpl = 56 + (uint64_t)label * 2 + m->ext_len + m->body_len;
    if (mpl > MQQB_PACKET_MAX)
        return 0;
    *mp = align4((size_t)mpl);
    uint64_t total = MQQB_BASE_LEN + *uh + *th + *mp;
    if (total > MQQB_PACKET_MAX)
        return 0;
    return (size_t)total + (m->session ? MQQB_SESSION_LEN : 0);
}

size_t mqqb_user_len(const mqqb_out *m)
{
    size_t uh, th, mp;
    return user_parts(m, &uh, &th, &mp);
}

size_t mqqb_write_user(uint8_t *out, size_t cap, const mqqb_out *m)
{
    size_t uh, th, mp;
    size_t total = user_parts(m, &uh, &th, &mp);
    if (!total || total > cap)
        return 0;
    size_t size = total - (m->session ? MQQB_SESSION_LEN : 0);
    memset(out, 0, total);
    /* PacketSize leaves out the trailing SessionHeader (MS-MQMQ 2.2.19.1) */
    base_write(out, 0, (uint16_t)((m->tx ? 0 : (m->priority & 7)) | (m->session ? MQQB_BF_SH : 0)),
               (uint32_t)size);
    sl_put_le32(out + 12, m->ttrq);
    uint8_t *p = out + MQQB_BASE_LEN;
    memcpy(p, m->source_qm, 16);
    /* QueueManagerAddress (p + 16): the NULL GUID for a direct format name */
    sl_put_le32(p + 32, m->ttbr);
    sl_put_le32(p + 36, m->sent_time);
    sl_put_le32(p + 40, m->message_id);
    uint32_t dm = (m->recoverable || m->tx) ? 1 : 0;
    sl_put_le32(p + 44, MQQB_UF_MP | dm << 5 | (uint32_t)MQQB_QF_DIRECT << 10 |
                            (uint32_t)m->admin.type << 13 | (uint32_t)m->resp.type << 16 |
                            (m->tx ? MQQB_UF_TH : 0) | (m->journal ? MQQB_UF_JP : 0) |
                            (m->dead_letter ? MQQB_UF_JN : 0));
    size_t q = 48;
    mqqb_qout dq = {.type = MQQB_QF_DIRECT, .direct = m->dest};
    q += qout_write(p + q, &dq); /* in the order of the parser: destination, admin, response */
    q += qout_write(p + q, &m->admin);
    q += qout_write(p + q, &m->resp);
    p += uh;
    if (m->tx) {
        sl_put_le32(p, MQQB_TF_FM | MQQB_TF_LM); /* each message is its own transaction */
        sl_put_le32(p + 4, (uint32_t)m->tx_seq_id);
        sl_put_le32(p + 8, (uint32_t)(m->tx_seq_id >> 32));
        sl_put_le32(p + 12, m->tx_seq_no);
        sl_put_le32(p + 16, m->tx_prev_no);
        p += th;
    }
    p[0] = m->ack_flags;
    sl_put_le16(p + 2, m->msg_class);
    if (m->correlation)
        memcpy(p + 4, m->correlation, 20);
    sl_put_le32(p + 24, m->body_type);
    sl_put_le32(p + 28, m->app_tag);
    sl_put_le32(p + 32, m->body_len);
    sl_put_le32(p + 36, m->body_len);
    sl_put_le32(p + 52, m->ext_len);
    size_t o = 56;
    if (m->label) {
        long units = utf8_to_utf16(m->label, p + o);
        p[1] = (uint8_t)(units + 1); /* LabelLength in units, the NUL included */
        o += (size_t)(units + 1) * 2;
    }
    if (m->ext_len)
        memcpy(p + o, m->ext, m->ext_len);
    o += m->ext_len;
    if (m->body_len)
        memcpy(p + o, m->body, m->body_len);
    p += mp;
    if (m->session)
        session_encode(p, m->session);
    return total;
}

mqqb_tx_verdict mqqb_tx_check(uint64_t last, uint32_t seq_no, uint32_t prev_no, uint64_t gap_max)
{
    if (seq_no <= last)
        return MQQB_TX_DUPLICATE;
    if (prev_no > last)
        return MQQB_TX_OUT_OF_ORDER;
    if (seq_no == last + 1)
        return MQQB_TX_ACCEPT;
    return prev_no == last && seq_no - last <= gap_max ? MQQB_TX_ACCEPT : MQQB_TX_JUMP;
}

mqqb_tx_verdict mqqb_tx_check_from(uint64_t last, uint32_t seq_no, uint32_t prev_no,
                                   uint64_t gap_max, const char *bound, const char *peer)
{
    mqqb_tx_verdict v = mqqb_tx_check(last, seq_no, prev_no, gap_max);
    if (v != MQQB_TX_ACCEPT || seq_no == last + 1 || !bound || !*bound)
        return v;
    return peer && !strcmp(bound, peer) ? MQQB_TX_ACCEPT : MQQB_TX_FOREIGN_GAP;
}

void mqqb_tx_number(uint64_t base, uint64_t seq, uint64_t prev, uint64_t *seq_id, uint32_t *no,
                    uint32_t *prev_no)
{
    uint64_t e = (seq - 1) / 0xFFFFFFFFu;
    *seq_id = base + (e << 32);
    *no = (uint32_t)((seq - 1) % 0xFFFFFFFFu + 1);
    *prev_no = 0;
    if (prev && prev < seq && (prev - 1) / 0xFFFFFFFFu == e)
        *prev_no = (uint32_t)((prev - 1) % 0xFFFFFFFFu + 1);
}

uint64_t mqqb_tx_lookup_id(uint64_t base, uint64_t seq_id, uint32_t no)
{
    if (!no || seq_id < base || ((seq_id - base) & 0xFFFFFFFFu))
        return 0;
    return ((seq_id - base) >> 32) * 0xFFFFFFFFu + no;
}

int mqqb_tx_acked(uint64_t base, uint64_t ack_id, uint32_t ack_no, uint64_t seq)
{
    uint64_t sid;
    uint32_t no, prev;
    if (!seq)
        return 0;
    mqqb_tx_number(base, seq, 0, &sid, &no, &prev);
    return sid == ack_id && no <= ack_no;
}

int mqqb_order_ack_of(const mqqb_user *u, uint64_t *seq_id, uint32_t *seq_no)
{
    if (u->msg_class != MQMSG_CLASS_ORDER_ACK || u->body_size < 12 || !u->body)
        return -1;
    *seq_id = (uint64_t)sl_le32(u->body + 4) << 32 | sl_le32(u->body);
    *seq_no = sl_le32(u->body + 8);
    return 0;
}

int mqqb_final_ack_of(const mqqb_user *u, uint64_t *seq_id, uint32_t *seq_no, uint16_t *cls)
{
    if (u->msg_class == MQMSG_CLASS_ORDER_ACK || u->body_size < MQQB_ORDER_ACK_BODY_LEN ||
        !u->body || u->label_len != 16)
        return -1;
    *seq_id = (uint64_t)sl_le32(u->body + 4) << 32 | sl_le32(u->body);
    *seq_no = sl_le32(u->body + 8);
    *cls = u->msg_class;
    return 0;
}
