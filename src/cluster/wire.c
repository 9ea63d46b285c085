/* wire.c - encoding and parsing of the replication port's frames (format in wire.h). */
#include "cluster/wire.h"

#include <stdio.h>
#include <string.h>

/* A frame's mark is its start relative to the buffer's read offset, not an absolute
 * position: an append (sl_buf_reserve) may compact a buffer whose front was partly sent, which
 * moves absolute positions but not relative ones (as amqp_frame_begin's marks). An absolute
 * one patched the length into the middle of the frame and left its own length 0: a full copy
 * larger than the send queue could never be taken. */
static size_t begin(sl_buf *b, uint8_t type)
{
    size_t mark = sl_buf_unread(b);
    sl_buf_put_u32(b, 0);
    sl_buf_put_u8(b, type);
    return mark;
}

static void end(sl_buf *b, size_t mark)
{
    size_t at = b->off + mark;
    sl_buf_patch_u32(b, at, (uint32_t)(b->len - at - 4));
}

static void put_s16(sl_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (n > CL_WIRE_MAX_NAME)
        n = CL_WIRE_MAX_NAME;
    sl_buf_put_u16(b, (uint16_t)n);
    sl_buf_append(b, s, n);
}

void cl_wire_put_hello(sl_buf *b, const char *node, const char *cluster, uint64_t last_epoch,
                       uint64_t last_idx)
{
    size_t at = begin(b, CL_WIRE_HELLO);
    sl_buf_put_u16(b, CL_WIRE_VERSION);
    put_s16(b, node);
    put_s16(b, cluster);
    sl_buf_put_u64(b, last_epoch);
    sl_buf_put_u64(b, last_idx);
    end(b, at);
}

void cl_wire_put_start(sl_buf *b, uint64_t epoch, uint64_t session, uint64_t div_epoch,
                       uint64_t div_end, uint64_t hello_epoch, uint64_t hello_idx)
{
    size_t at = begin(b, CL_WIRE_START);
    uint64_t v[6] = {epoch, session, div_epoch, div_end, hello_epoch, hello_idx};
    for (int i = 0; i < 6; i++)
        sl_buf_put_u64(b, v[i]);
    end(b, at);
}

void cl_wire_put_data(sl_buf *b, uint64_t epoch, uint64_t session, uint64_t idx,
                      uint64_t group_epoch, const void *meta, uint32_t meta_len, const void *msgs,
                      uint32_t msgs_len)
{
    size_t at = begin(b, CL_WIRE_DATA);
    uint64_t v[4] = {epoch, session, idx, group_epoch};
    for (int i = 0; i < 4; i++)
        sl_buf_put_u64(b, v[i]);
    sl_buf_put_u32(b, meta_len);
    sl_buf_put_u32(b, msgs_len);
    sl_buf_append(b, meta, meta_len);
    sl_buf_append(b, msgs, msgs_len);
    end(b, at);
}

void cl_wire_put_ping(sl_buf *b, uint64_t epoch, uint64_t session, uint64_t commit)
{
    size_t at = begin(b, CL_WIRE_PING);
    sl_buf_put_u64(b, epoch);
    sl_buf_put_u64(b, session);
    sl_buf_put_u64(b, commit);
    end(b, at);
}

void cl_wire_put_ack(sl_buf *b, uint64_t epoch, uint64_t session, uint64_t log_end,
                     uint64_t durable)
{
    size_t at = begin(b, CL_WIRE_ACK);
    uint64_t v[4] = {epoch, session, log_end, durable};
    for (int i = 0; i < 4; i++)
        sl_buf_put_u64(b, v[i]);
    end(b, at);
}

void cl_wire_put_refuse(sl_buf *b, uint16_t code, const char *reason)
{
    size_t at = begin(b, CL_WIRE_REFUSE);
    sl_buf_put_u16(b, code);
    put_s16(b, reason);
    end(b, at);
}

void cl_wire_put_copyreq(sl_buf *b)
{
    end(b, begin(b, CL_WIRE_COPYREQ));
}

void cl_wire_put_copybegin(sl_buf *b, uint64_t snap_idx, const uint64_t *epochs,
                           const uint64_t *firsts, uint32_t n)
{
    size_t at = begin(b, CL_WIRE_COPYBEGIN);
    sl_buf_put_u64(b, snap_idx);
    sl_buf_put_u32(b, n);
    for (uint32_t i = 0; i < n; i++) {
        sl_buf_put_u64(b, epochs[i]);
        sl_buf_put_u64(b, firsts[i]);
    }
    end(b, at);
}

void cl_wire_put_copydata(sl_buf *b, const char *file, uint64_t off, const void *p, uint32_t len)
{
    size_t at = begin(b, CL_WIRE_COPYDATA);
    put_s16(b, file);
    sl_buf_put_u64(b, off);
    sl_buf_put_u32(b, len);
    sl_buf_append(b, p, len);
    end(b, at);
}

void cl_wire_put_copyend(sl_buf *b, uint64_t snap_idx, uint32_t files)
{
    size_t at = begin(b, CL_WIRE_COPYEND);
    sl_buf_put_u64(b, snap_idx);
    sl_buf_put_u32(b, files);
    end(b, at);
}

void cl_wire_put_auth(sl_buf *b, const char *node, const char *cluster,
                      const uint8_t nonce[CL_WIRE_NONCE])
{
    size_t at = begin(b, CL_WIRE_AUTH);
    put_s16(b, node);
    put_s16(b, cluster);
    sl_buf_append(b, nonce, CL_WIRE_NONCE);
    end(b, at);
}

void cl_wire_put_challenge(sl_buf *b, const char *node, const uint8_t nonce[CL_WIRE_NONCE],
                           const uint8_t mac[CL_WIRE_MAC])
{
    size_t at = begin(b, CL_WIRE_CHALLENGE);
    put_s16(b, node);
    sl_buf_append(b, nonce, CL_WIRE_NONCE);
    sl_buf_append(b, mac, CL_WIRE_MAC);
    end(b, at);
}

void cl_wire_put_proof(sl_buf *b, const uint8_t mac[CL_WIRE_MAC])
{
    size_t at = begin(b, CL_WIRE_PROOF);
    sl_buf_append(b, mac, CL_WIRE_MAC);
    end(b, at);
}

/* A cursor over one frame's body. */
typedef struct rd {
    const uint8_t *p;
    size_t n;
    int bad;
} rd;

static uint64_t u64(rd *r)
{
    if (r->bad || r->n < 8) {
        r->bad = 1;
        return 0;
    }
    uint64_t v = sl_get_u64(r->p);
    r->p += 8;
    r->n -= 8;
    return v;
}

static uint32_t u32(rd *r)
{
    if (r->bad || r->n < 4) {
        r->bad = 1;
        return 0;
    }
    uint32_t v = sl_get_u32(r->p);
    r->p += 4;
    r->n -= 4;
    return v;
}

static uint16_t u16(rd *r)
{
    if (r->bad || r->n < 2) {
        r->bad = 1;
        return 0;
    }
    uint16_t v = sl_get_u16(r->p);
    r->p += 2;
    r->n -= 2;
    return v;
}

static const uint8_t *bytes(rd *r, size_t len)
{
    if (r->bad || r->n < len) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *v = r->p;
    r->p += len;
    r->n -= len;
    return v;
}

/* s16 of printable ASCII, at most CL_WIRE_MAX_NAME bytes. */
static const uint8_t *name(rd *r, uint16_t *len)
{
    *len = u16(r);
    if (*len > CL_WIRE_MAX_NAME)
        r->bad = 1;
    const uint8_t *v = bytes(r, *len);
    for (uint16_t i = 0; v && i < *len; i++)
        if (v[i] < 0x20 || v[i] > 0x7e)
            r->bad = 1;
    return v;
}

int cl_wire_parse(const uint8_t *p, size_t n, cl_wire_msg *out, size_t *used, char *err,
                  size_t errlen)
{
    if (n < 4)
        return 0;
    uint32_t len = sl_get_u32(p);
    if (len < 1 || len > CL_WIRE_MAX_FRAME) {
        snprintf(err, errlen, "replication frame of %u bytes", len);
        return -1;
    }
    if (n - 4 < len)
        return 0;
    memset(out, 0, sizeof *out);
    out->type = p[4];
    rd r = {p + 5, len - 1, 0};
    switch (out->type) {
    case CL_WIRE_HELLO:
        out->version = u16(&r);
        out->node = name(&r, &out->node_len);
        out->cluster = name(&r, &out->cluster_len);
        out->a = u64(&r);
        out->b = u64(&r);
        break;
    case CL_WIRE_START:
        out->epoch = u64(&r);
        out->session = u64(&r);
        out->a = u64(&r);
        out->b = u64(&r);
        out->c = u64(&r);
        out->d = u64(&r);
        break;
    case CL_WIRE_DATA:
        out->epoch = u64(&r);
        out->session = u64(&r);
        out->a = u64(&r);
        out->b = u64(&r);
        out->meta_len = u32(&r);
        out->msgs_len = u32(&r);
        if (!r.bad && (uint64_t)out->meta_len + out->msgs_len != r.n)
            r.bad = 1;
        out->meta = bytes(&r, out->meta_len);
        out->msgs = bytes(&r, out->msgs_len);
        break;
    case CL_WIRE_PING:
        out->epoch = u64(&r);
        out->session = u64(&r);
        out->a = u64(&r);
        break;
    case CL_WIRE_ACK:
        out->epoch = u64(&r);
        out->session = u64(&r);
        out->a = u64(&r);
        out->b = u64(&r);
        break;
    case CL_WIRE_REFUSE:
        out->code = u16(&r);
        out->reason = name(&r, &out->reason_len);
        break;
    case CL_WIRE_COPYREQ:
        break;
    case CL_WIRE_COPYBEGIN:
        out->a = u64(&r);
        out->n_hist = u32(&r);
        if (!r.bad && (out->n_hist > CL_WIRE_MAX_HIST || (uint64_t)out->n_hist * 16 != r.n))
            r.bad = 1;
        out->hist = bytes(&r, (size_t)out->n_hist * 16);
        break;
    case CL_WIRE_COPYDATA:
        out->file = name(&r, &out->file_len);
        out->a = u64(&r);
        out->meta_len = u32(&r);
        if (!r.bad && out->meta_len != r.n)
            r.bad = 1;
        out->meta = bytes(&r, out->meta_len);
        break;
    case CL_WIRE_COPYEND:
        out->a = u64(&r);
        out->b = u32(&r);
        break;
    case CL_WIRE_AUTH:
        out->node = name(&r, &out->node_len);
        out->cluster = name(&r, &out->cluster_len);
        out->nonce = bytes(&r, CL_WIRE_NONCE);
        break;
    case CL_WIRE_CHALLENGE:
        out->node = name(&r, &out->node_len);
        out->nonce = bytes(&r, CL_WIRE_NONCE);
        out->mac = bytes(&r, CL_WIRE_MAC);
        break;
    case CL_WIRE_PROOF:
        out->mac = bytes(&r, CL_WIRE_MAC);
        break;
    default:
        snprintf(err, errlen, "unknown replication frame type %u", out->type);
        return -1;
    }
    if (r.bad || r.n) {
        snprintf(err, errlen, "malformed replication frame (type %u, %u bytes)", out->type, len);
        return -1;
    }
    *used = 4 + (size_t)len;
    return 1;
}
