/* utf16.c - UTF-16 <-> UTF-8 with one input-check policy (see utf16.h). */
#include "core/utf16.h"

#include <string.h>

#include "core/le.h"

long sl_utf8_next(const uint8_t *s, size_t n, size_t *i)
{
    static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
    uint8_t c = s[*i];
    uint32_t cp;
    size_t k; /* continuation bytes */
    if (c < 0x80) {
        cp = c;
        k = 0;
    } else if ((c & 0xE0) == 0xC0) {
        cp = c & 0x1Fu;
        k = 1;
    } else if ((c & 0xF0) == 0xE0) {
        cp = c & 0x0Fu;
        k = 2;
    } else if ((c & 0xF8) == 0xF0) {
        cp = c & 0x07u;
        k = 3;
    } else {
        (*i)++;
        return -1;
    }
    size_t at = *i + 1;
    for (size_t j = 0; j < k; j++, at++) {
        if (at >= n || (s[at] & 0xC0) != 0x80) {
            *i = at;
            return -1;
        }
        cp = cp << 6 | (s[at] & 0x3Fu);
    }
    *i = at;
    if (cp < least[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
        return -1;
    return (long)cp;
}

int sl_utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80)
            i++; /* ASCII without a call: most names and keys are */
        else if (sl_utf8_next(s, n, &i) < 0)
            return 0;
    }
    return 1;
}

size_t sl_utf8_put(uint8_t out[4], uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static long to_utf8(const uint8_t *p, size_t n, char *out, size_t cap, int le)
{
    size_t o = 0;
    if (n & 1)
        return -1;
    for (size_t i = 0; i < n; i += 2) {
        uint32_t u = le ? sl_le16(p + i) : sl_get_u16(p + i);
        if (u == 0 || (u >= 0xDC00 && u < 0xE000))
            return -1; /* a NUL inside, or a low surrogate alone */
        if (u >= 0xD800 && u < 0xDC00) {
            if (n - i < 4)
                return -1;
            uint32_t lo = le ? sl_le16(p + i + 2) : sl_get_u16(p + i + 2);
            if (lo < 0xDC00 || lo >= 0xE000)
                return -1;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            i += 2;
        }
        uint8_t t[4];
        size_t k = sl_utf8_put(t, u);
        if (o + k + 1 > cap)
            return -1;
        memcpy(out + o, t, k);
        o += k;
    }
    if (o + 1 > cap)
        return -1;
    out[o] = 0;
    return (long)o;
}

long sl_utf16le_to_utf8(const uint8_t *p, size_t n, char *out, size_t cap)
{
    return to_utf8(p, n, out, cap, 1);
}

long sl_utf16be_to_utf8(const uint8_t *p, size_t n, char *out, size_t cap)
{
    return to_utf8(p, n, out, cap, 0);
}

long sl_utf8_to_utf16le(const uint8_t *s, size_t n, uint8_t *out)
{
    long units = 0;
    for (size_t i = 0; i < n;) {
        long cp = sl_utf8_next(s, n, &i);
        if (cp < 0)
            return -1;
        if (cp >= 0x10000) {
            if (out) {
                sl_put_le16(out + 2 * units, (uint16_t)(0xD800 + ((cp - 0x10000) >> 10)));
                sl_put_le16(out + 2 * units + 2, (uint16_t)(0xDC00 + ((cp - 0x10000) & 0x3FF)));
            }
            units += 2;
        } else {
            if (out)
                sl_put_le16(out + 2 * units, (uint16_t)cp);
            units++;
        }
    }
    return units;
}

long sl_utf8_to_utf16le_buf(const uint8_t *s, size_t n, sl_buf *b)
{
    long units = sl_utf8_to_utf16le(s, n, NULL);
    if (units <= 0)
        return units;
    sl_utf8_to_utf16le(s, n, sl_buf_reserve(b, 2 * (size_t)units));
    b->len += 2 * (size_t)units;
    return units;
}
