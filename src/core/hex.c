/* hex.c - hexadecimal digits (see hex.h). */
#include "core/hex.h"

#include <stdio.h>

void sl_hex(char *out, const uint8_t *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = 0;
}

int sl_unhex(const char *s, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int b = sl_hex_byte(s + 2 * i);
        if (b < 0)
            return -1;
        out[i] = (uint8_t)b;
    }
    return 0;
}

int sl_is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (sl_hex_nibble((unsigned char)s[i]) < 0)
            return 0;
    return 1;
}

/* the byte each pair of hex digits goes to, in text order */
static const uint8_t guid_at[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};

int sl_guid_parse(const char *s, size_t n, uint8_t out[16])
{
    if (n != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-')
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < 36; i += 2) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            i++; /* the dash */
        int b = sl_hex_byte(s + i);
        if (b < 0)
            return -1;
        out[guid_at[k++]] = (uint8_t)b;
    }
    return 0;
}

void sl_guid_str(const uint8_t g[16], char out[37])
{
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", g[3],
             g[2], g[1], g[0], g[5], g[4], g[7], g[6], g[8], g[9], g[10], g[11], g[12], g[13],
             g[14], g[15]);
}
