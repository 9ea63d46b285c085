/* hex.c - hexadecimal digits (see hex.h). */
#include "core/hex.h"

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
