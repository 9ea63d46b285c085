/* amqp10.c - an AMQP 1.0 bare message read into AMQP 0-9-1 properties and a body (amqp10.h).
 *
 * AMQP 1.0 encodes each value as a constructor octet then its bytes; the constructor's high
 * nibble says how long the value is (0x4_: nothing, 0x5_: 1 octet, 0x6_: 2, 0x7_: 4, 0x8_: 8,
 * 0x9_: 16, 0xa_ / 0xc_ / 0xe_: a u8 size first, 0xb_ / 0xd_ / 0xf_: a u32 size first), so any
 * value can be skipped without knowing its type; 0x00 starts a described value (descriptor,
 * then value). A section is a described value whose descriptor is its code (0x70 header ..
 * 0x78 footer), as a smallulong or a ulong.
 */
#include "amqp/amqp10.h"

#include <stdio.h>
#include <string.h>

#include "amqp/table.h"

typedef struct rd {
    const uint8_t *p, *end;
} rd;

typedef struct val {
    uint8_t code;
    const uint8_t *p; /* after the constructor and any size: the value's octets */
    size_t len;       /* for a compound value: its octets after the size (count included) */
} val;

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const uint8_t *p)
{
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

/* One value (not described): 0, or -1 when it does not fit. */
static int next(rd *r, val *v)
{
    if (r->p >= r->end)
        return -1;
    v->code = *r->p++;
    size_t left = (size_t)(r->end - r->p), n;
    switch (v->code >> 4) {
    case 0x4:
        n = 0;
        break;
    case 0x5:
        n = 1;
        break;
    case 0x6:
        n = 2;
        break;
    case 0x7:
        n = 4;
        break;
    case 0x8:
        n = 8;
        break;
    case 0x9:
        n = 16;
        break;
    case 0xa:
    case 0xc:
    case 0xe:
        if (left < 1)
            return -1;
        n = *r->p++;
        left--;
        break;
    case 0xb:
    case 0xd:
    case 0xf:
        if (left < 4)
            return -1;
        n = be32(r->p);
        r->p += 4;
        left -= 4;
        break;
    default:
        return -1; /* 0x00 (described) is handled by the callers; others are not types */
    }
    if (n > left)
        return -1;
    v->p = r->p;
    v->len = n;
    r->p += n;
    return 0;
}

/* A value that may be described: the descriptor is skipped. */
static int next_any(rd *r, val *v, int depth)
{
    if (r->p < r->end && *r->p == 0x00) {
        if (depth > 8)
            return -1;
        r->p++;
        val d;
        if (next_any(r, &d, depth + 1) < 0)
            return -1;
        return next_any(r, v, depth + 1);
    }
    return next(r, v);
}

/* A compound value's elements: a reader over them and their count. */
static int open_compound(const val *v, rd *in, uint32_t *count)
{
    if (v->code == 0x45) { /* list0 */
        *count = 0;
        in->p = in->end = v->p;
        return 0;
    }
    if (v->code == 0xc0 || v->code == 0xc1) {
        if (v->len < 1)
            return -1;
        *count = v->p[0];
        in->p = v->p + 1;
    } else if (v->code == 0xd0 || v->code == 0xd1) {
        if (v->len < 4)
            return -1;
        *count = be32(v->p);
        in->p = v->p + 4;
    } else
        return -1;
    in->end = v->p + v->len;
    return 0;
}

static int is_str(const val *v)
{
    return v->code == 0xa1 || v->code == 0xb1 || v->code == 0xa3 || v->code == 0xb3;
}

static int is_bin(const val *v)
{
    return v->code == 0xa0 || v->code == 0xb0;
}

/* An integer value: 1 with *out, 0 when v is not one. */
static int as_int(const val *v, int64_t *out)
{
    const uint8_t *p = v->p;
    switch (v->code) {
    case 0x43: /* uint0 */
    case 0x44: /* ulong0 */
        *out = 0;
        return 1;
    case 0x50: /* ubyte */
    case 0x52: /* smalluint */
    case 0x53: /* smallulong */
        *out = p[0];
        return 1;
    case 0x51: /* byte */
    case 0x54: /* smallint */
    case 0x55: /* smalllong */
        *out = (int8_t)p[0];
        return 1;
    case 0x60:
        *out = (uint16_t)(p[0] << 8 | p[1]);
        return 1;
    case 0x61:
        *out = (int16_t)(p[0] << 8 | p[1]);
        return 1;
    case 0x70:
        *out = be32(p);
        return 1;
    case 0x71:
        *out = (int32_t)be32(p);
        return 1;
    case 0x80:
    case 0x81:
        *out = (int64_t)be64(p);
        return 1;
    default:
        return 0;
    }
}

static amqp_bytes bytes_of(const val *v)
{
    return (amqp_bytes){v->p, v->len};
}

/* message-id and correlation-id: a string as it is, a ulong in decimal (kept in idbuf). */
static int id_of(const val *v, char *idbuf, size_t cap, amqp_bytes *out)
{
    int64_t n;
    if (is_str(v) || is_bin(v)) {
        *out = bytes_of(v);
        return v->len <= 255;
    }
    if (v->code != 0x43 && v->code != 0x44 && v->code != 0x53 && v->code != 0x80)
        return 0;
    if (!as_int(v, &n))
        return 0;
    int k = snprintf(idbuf, cap, "%llu", (unsigned long long)n);
    *out = (amqp_bytes){(const uint8_t *)idbuf, (size_t)k};
    return 1;
}

static char id_bufs[2][24]; /* one loop thread: the ids live until the caller encodes */

static int read_properties(const val *v, amqp_basic_props *pr)
{
    rd in;
    uint32_t n;
    if (open_compound(v, &in, &n) < 0 || v->code == 0xc1 || v->code == 0xd1)
        return -1;
    for (uint32_t i = 0; i < n && i < 13; i++) {
        val f;
        if (next_any(&in, &f, 0) < 0)
            return -1;
        if (f.code == 0x40)
            continue; /* null: absent */
        amqp_bytes b;
        switch (i) {
        case 0:
            if (id_of(&f, id_bufs[0], sizeof id_bufs[0], &b)) {
                pr->message_id = b;
                pr->flags |= AMQP_P_MESSAGE_ID;
            }
            break;
        case 1:
            if (is_bin(&f) && f.len <= 255) {
                pr->user_id = bytes_of(&f);
                pr->flags |= AMQP_P_USER_ID;
            }
            break;
        case 4:
            if (is_str(&f) && f.len <= 255) {
                pr->reply_to = bytes_of(&f);
                pr->flags |= AMQP_P_REPLY_TO;
            }
            break;
        case 5:
            if (id_of(&f, id_bufs[1], sizeof id_bufs[1], &b)) {
                pr->correlation_id = b;
                pr->flags |= AMQP_P_CORRELATION_ID;
            }
            break;
        case 6:
            if (is_str(&f) && f.len <= 255) {
                pr->content_type = bytes_of(&f);
                pr->flags |= AMQP_P_CONTENT_TYPE;
            }
            break;
        case 7:
            if (is_str(&f) && f.len <= 255) {
                pr->content_encoding = bytes_of(&f);
                pr->flags |= AMQP_P_CONTENT_ENCODING;
            }
            break;
        case 9:
            if (f.code == 0x83) {
                pr->timestamp = (uint64_t)((int64_t)be64(f.p) / 1000);
                pr->flags |= AMQP_P_TIMESTAMP;
            }
            break;
        default:
            break;
        }
    }
    return 0;
}

static int read_header(const val *v, amqp_basic_props *pr)
{
    rd in;
    uint32_t n;
    if (open_compound(v, &in, &n) < 0)
        return -1;
    for (uint32_t i = 0; i < n && i < 2; i++) {
        val f;
        if (next_any(&in, &f, 0) < 0)
            return -1;
        if (i == 0 && (f.code == 0x41 || (f.code == 0x56 && f.p[0]))) {
            pr->delivery_mode = 2;
            pr->flags |= AMQP_P_DELIVERY_MODE;
        }
        int64_t prio;
        if (i == 1 && f.code == 0x50 && as_int(&f, &prio)) {
            pr->priority = (uint8_t)prio;
            pr->flags |= AMQP_P_PRIORITY;
        }
    }
    return 0;
}

static int read_app_properties(const val *v, sl_buf *hdrs)
{
    rd in;
    uint32_t n;
    if (open_compound(v, &in, &n) < 0 || (v->code != 0xc1 && v->code != 0xd1))
        return -1;
    for (uint32_t i = 0; i < n; i += 2) {
        val k, x;
        if (next_any(&in, &k, 0) < 0 || next_any(&in, &x, 0) < 0)
            return -1;
        if (!is_str(&k) || k.len > 255)
            continue;
        amqp_value av;
        int64_t iv;
        if (is_str(&x)) {
            av.tag = 'S';
            av.v.s = bytes_of(&x);
        } else if (x.code == 0x41 || x.code == 0x42 || x.code == 0x56) {
            av.tag = 't';
            av.v.b = x.code == 0x41 || (x.code == 0x56 && x.p[0]);
        } else if (x.code == 0x83) {
            av.tag = 'T';
            av.v.ts = (uint64_t)((int64_t)be64(x.p) / 1000);
        } else if (as_int(&x, &iv)) {
            av.tag = 'l';
            av.v.i = iv;
        } else
            continue; /* floats, binaries, compounds: left out */
        amqp_tbl_put_value(hdrs, bytes_of(&k), &av);
    }
    return 0;
}

int amqp10_to_091(const uint8_t *p, size_t len, amqp_basic_props *props, sl_buf *hdrs, sl_buf *body)
{
    memset(props, 0, sizeof *props);
    rd r = {p, p + len};
    int sections = 0;
    for (int guard = 0; r.p < r.end && guard < 64; guard++) {
        if (*r.p != 0x00)
            return -1;
        r.p++;
        val d, v;
        if (next(&r, &d) < 0 || next_any(&r, &v, 0) < 0)
            return -1;
        int64_t code;
        if (!as_int(&d, &code))
            continue; /* a symbolic descriptor: a section of no interest */
        sections++;
        int rc = 0;
        switch (code) {
        case 0x70:
            rc = read_header(&v, props);
            break;
        case 0x73:
            rc = read_properties(&v, props);
            break;
        case 0x74:
            rc = read_app_properties(&v, hdrs);
            break;
        case 0x75:
            if (!is_bin(&v))
                return -1;
            sl_buf_append(body, v.p, v.len);
            break;
        case 0x77:
            if (is_bin(&v) || is_str(&v))
                sl_buf_append(body, v.p, v.len);
            break;
        default:
            break;
        }
        if (rc < 0)
            return -1;
    }
    if (!sections || r.p != r.end)
        return -1;
    if (sl_buf_unread(hdrs)) {
        props->headers = (amqp_bytes){sl_buf_head(hdrs), sl_buf_unread(hdrs)};
        props->flags |= AMQP_P_HEADERS;
    }
    return 0;
}
