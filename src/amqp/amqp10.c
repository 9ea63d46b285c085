/* amqp10.c - an AMQP 1.0 bare message read into AMQP 0-9-1 properties and a body, and an
 * AMQP 0-9-1 message written as an AMQP 1.0 bare message (amqp10.h).
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
#include <stdlib.h>
#include <string.h>

#include "amqp/table.h"
#include "core/utf16.h"

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

/* ------------------------------------------------------------------------------------------
 * The other way: an AMQP 0-9-1 message written as an AMQP 1.0 bare message.
 *
 * Compound values are written with 32-bit sizes and counts (list32, map32), patched once
 * their elements are in: any AMQP 1.0 reader takes them, and one form keeps the writer simple.
 */

static void put_code(sl_buf *o, uint8_t code)
{
    sl_buf_put_u8(o, code);
}

/* A variable-width value: code8 with a u8 size when it fits, else code32 with a u32. */
static void put_var(sl_buf *o, uint8_t code8, uint8_t code32, const void *p, size_t n)
{
    if (n <= 255) {
        put_code(o, code8);
        sl_buf_put_u8(o, (uint8_t)n);
    } else {
        put_code(o, code32);
        sl_buf_put_u32(o, (uint32_t)n);
    }
    sl_buf_append(o, p, n);
}

static void put_str(sl_buf *o, amqp_bytes s)
{
    put_var(o, 0xa1, 0xb1, s.p, s.len);
}

static void put_sym(sl_buf *o, amqp_bytes s)
{
    put_var(o, 0xa3, 0xb3, s.p, s.len);
}

static void put_bin(sl_buf *o, amqp_bytes s)
{
    put_var(o, 0xa0, 0xb0, s.p, s.len);
}

/* A string as utf8 when it is valid UTF-8, else as binary (RabbitMQ's rule). */
static void put_text(sl_buf *o, amqp_bytes s)
{
    if (sl_utf8_valid(s.p, s.len))
        put_str(o, s);
    else
        put_bin(o, s);
}

static void put_int(sl_buf *o, int64_t v)
{
    if (v >= -128 && v <= 127) {
        put_code(o, 0x54); /* smallint */
        sl_buf_put_u8(o, (uint8_t)(int8_t)v);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        put_code(o, 0x71); /* int */
        sl_buf_put_u32(o, (uint32_t)(int32_t)v);
    } else {
        put_code(o, 0x81); /* long */
        sl_buf_put_u64(o, (uint64_t)v);
    }
}

/* A section or compound value under way: where its size and count are to be patched. */
typedef struct open_val {
    size_t size_at;
    uint32_t count;
} open_val;

static void section_begin(sl_buf *o, uint8_t section, uint8_t compound, open_val *ov)
{
    uint8_t d[3] = {0x00, 0x53, section};
    sl_buf_append(o, d, 3);
    put_code(o, compound);
    ov->size_at = o->len;
    ov->count = 0;
    sl_buf_put_u32(o, 0); /* size, patched */
    sl_buf_put_u32(o, 0); /* count, patched */
}

static void section_end(sl_buf *o, open_val *ov)
{
    sl_buf_patch_u32(o, ov->size_at, (uint32_t)(o->len - ov->size_at - 4));
    sl_buf_patch_u32(o, ov->size_at + 4, ov->count);
}

/* One header value as an AMQP 1.0 value; 0 when its type has no counterpart (decimal,
 * nested table, array): the entry is left out. */
static int put_value(sl_buf *o, const amqp_value *v)
{
    int64_t i;
    switch (v->tag) {
    case 't':
        put_code(o, v->v.b ? 0x41 : 0x42);
        return 1;
    case 'S':
        put_text(o, v->v.s);
        return 1;
    case 'x':
        put_bin(o, v->v.s);
        return 1;
    case 'T':
        put_code(o, 0x83); /* timestamp: ms since the epoch; 0-9-1's are seconds */
        sl_buf_put_u64(o, (uint64_t)((int64_t)v->v.ts * 1000));
        return 1;
    case 'f': {
        uint32_t b;
        memcpy(&b, &v->v.f, 4);
        put_code(o, 0x72);
        sl_buf_put_u32(o, b);
        return 1;
    }
    case 'd': {
        uint64_t b;
        memcpy(&b, &v->v.d, 8);
        put_code(o, 0x82);
        sl_buf_put_u64(o, b);
        return 1;
    }
    case 'V':
        put_code(o, 0x40);
        return 1;
    default:
        if (amqp_value_int(v, &i)) {
            put_int(o, i);
            return 1;
        }
        return 0;
    }
}

/* A list's fields, written while present and trailing nulls dropped: the count of fields up
 * to the last one present. */
static void put_nulls(sl_buf *o, open_val *ov, uint32_t upto)
{
    while (ov->count < upto) {
        put_code(o, 0x40);
        ov->count++;
    }
}

int amqp10_from_091(const uint8_t *props, size_t props_len, const uint8_t *body, size_t body_len,
                    amqp_bytes exchange, amqp_bytes routing_key, sl_buf *out)
{
    amqp_basic_props p;
    memset(&p, 0, sizeof p);
    if (props_len && amqp_props_decode(props, props_len, &p) != 0)
        return -1;
    open_val ov;
    /* header: durable, priority, ttl (from a numeric expiration) */
    int64_t ttl = -1;
    if (p.flags & AMQP_P_EXPIRATION) {
        char tb[24];
        if (p.expiration.len && p.expiration.len < sizeof tb) {
            memcpy(tb, p.expiration.p, p.expiration.len);
            tb[p.expiration.len] = 0;
            char *e;
            long long t = strtoll(tb, &e, 10);
            if (!*e && t >= 0 && t <= UINT32_MAX)
                ttl = t;
        }
    }
    if ((p.flags & (AMQP_P_DELIVERY_MODE | AMQP_P_PRIORITY)) || ttl >= 0) {
        section_begin(out, 0x70, 0xd0, &ov);
        put_code(out, (p.flags & AMQP_P_DELIVERY_MODE) && p.delivery_mode == 2 ? 0x41 : 0x42);
        ov.count = 1;
        if (p.flags & AMQP_P_PRIORITY) {
            put_code(out, 0x50); /* ubyte */
            sl_buf_put_u8(out, p.priority);
            ov.count = 2;
        }
        if (ttl >= 0) {
            put_nulls(out, &ov, 2);
            put_code(out, 0x70); /* uint */
            sl_buf_put_u32(out, (uint32_t)ttl);
            ov.count = 3;
        }
        section_end(out, &ov);
    }
    /* message annotations: where it was published, and the 0-9-1 fields 1.0 has no place for */
    section_begin(out, 0x72, 0xd1, &ov);
    put_sym(out, (amqp_bytes){(const uint8_t *)"x-exchange", 10});
    put_str(out, exchange);
    put_sym(out, (amqp_bytes){(const uint8_t *)"x-routing-key", 13});
    put_text(out, routing_key);
    ov.count = 4;
    if (p.flags & AMQP_P_TYPE) {
        put_sym(out, (amqp_bytes){(const uint8_t *)"x-basic-type", 12});
        put_text(out, p.type);
        ov.count += 2;
    }
    if (p.flags & AMQP_P_APP_ID) {
        put_sym(out, (amqp_bytes){(const uint8_t *)"x-basic-app-id", 14});
        put_text(out, p.app_id);
        ov.count += 2;
    }
    section_end(out, &ov);
    /* properties: message-id, user-id, to, subject, reply-to, correlation-id, content-type,
     * content-encoding, absolute-expiry-time, creation-time */
    if (p.flags & (AMQP_P_MESSAGE_ID | AMQP_P_USER_ID | AMQP_P_REPLY_TO | AMQP_P_CORRELATION_ID |
                   AMQP_P_CONTENT_TYPE | AMQP_P_CONTENT_ENCODING | AMQP_P_TIMESTAMP)) {
        section_begin(out, 0x73, 0xd0, &ov);
        enum { TEXT, BIN, SYM };
        const struct {
            uint16_t flag;
            uint8_t at, kind; /* the field's place in the list, how it is written */
            amqp_bytes v;
        } f[] = {
            {AMQP_P_MESSAGE_ID, 0, TEXT, p.message_id},
            {AMQP_P_USER_ID, 1, BIN, p.user_id},
            {AMQP_P_REPLY_TO, 4, TEXT, p.reply_to},
            {AMQP_P_CORRELATION_ID, 5, TEXT, p.correlation_id},
            {AMQP_P_CONTENT_TYPE, 6, SYM, p.content_type},
            {AMQP_P_CONTENT_ENCODING, 7, SYM, p.content_encoding},
        };
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
            if (!(p.flags & f[i].flag))
                continue;
            put_nulls(out, &ov, f[i].at);
            if (f[i].kind == TEXT)
                put_text(out, f[i].v);
            else if (f[i].kind == BIN)
                put_bin(out, f[i].v);
            else
                put_sym(out, f[i].v);
            ov.count = f[i].at + 1u;
        }
        if (p.flags & AMQP_P_TIMESTAMP) {
            put_nulls(out, &ov, 9);
            put_code(out, 0x83);
            sl_buf_put_u64(out, (uint64_t)((int64_t)p.timestamp * 1000));
            ov.count = 10;
        }
        section_end(out, &ov);
    }
    /* application properties: the headers (string keys; values that have a 1.0 type) */
    if ((p.flags & AMQP_P_HEADERS) && p.headers.len) {
        section_begin(out, 0x74, 0xd1, &ov);
        amqp_table_iter it;
        amqp_table_iter_init(&it, p.headers);
        amqp_bytes k;
        amqp_value v;
        while (amqp_table_next(&it, &k, &v)) {
            size_t mark = out->len;
            put_str(out, k);
            if (put_value(out, &v))
                ov.count += 2;
            else
                out->len = mark; /* no counterpart: the entry is left out */
        }
        section_end(out, &ov);
    }
    /* the body: one data section */
    uint8_t d[3] = {0x00, 0x53, 0x75};
    sl_buf_append(out, d, 3);
    put_var(out, 0xa0, 0xb0, body, body_len);
    return 0;
}
