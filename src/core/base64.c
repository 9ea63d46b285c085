/* base64.c - RFC 4648 base64 (see base64.h for the two readers' policies). */
#include "core/base64.h"

#include <string.h>

#include "core/mem.h"

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *sl_base64_encode(const uint8_t *p, size_t n, size_t *outlen)
{
    char *o = sl_xmalloc((n + 2) / 3 * 4 + 1), *q = o;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *q++ = b64chars[v >> 18];
        *q++ = b64chars[(v >> 12) & 63];
        *q++ = b64chars[(v >> 6) & 63];
        *q++ = b64chars[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        *q++ = b64chars[v >> 18];
        *q++ = b64chars[(v >> 12) & 63];
        *q++ = i + 1 < n ? b64chars[(v >> 6) & 63] : '=';
        *q++ = '=';
    }
    *q = 0;
    if (outlen)
        *outlen = (size_t)(q - o);
    return o;
}

/* The value of an alphabet character, or -1. */
static int b64val(char c)
{
    const char *p = c ? strchr(b64chars, c) : NULL;
    return p ? (int)(p - b64chars) : -1;
}

long sl_base64_decode(const char *s, size_t n, uint8_t *out)
{
    uint32_t acc = 0;
    int bits = 0;
    long len = 0;
    size_t pad = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '=') {
            pad++;
            continue;
        }
        if (c == '\n' || c == '\r' || c == ' ')
            continue;
        if (pad)
            return -1;
        int v = b64val(c);
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[len++] = (uint8_t)(acc >> bits);
        }
    }
    return pad > 2 ? -1 : len;
}

long sl_base64_decode_strict(const char *s, size_t n, uint8_t *out, size_t cap)
{
    if (n % 4 || n / 4 * 3 > cap || n > (1u << 20))
        return -1;
    long len = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        for (size_t j = i; j < i + 4; j++) {
            /* '=' only in the last two places, where it reads as zero bits */
            int d = s[j] == '=' && j >= n - 2 ? 0 : b64val(s[j]);
            if (d < 0)
                return -1;
            v = v << 6 | (uint32_t)d;
        }
        out[len++] = (uint8_t)(v >> 16);
        out[len++] = (uint8_t)(v >> 8);
        out[len++] = (uint8_t)v;
    }
    /* each '=' of the last two places takes one byte off (OpenSSL's EVP_DecodeBlock rule,
     * which the stored hashes were first read with) */
    if (n && s[n - 1] == '=')
        len--;
    if (n && s[n - 2] == '=')
        len--;
    return len;
}
