/* hex.h - hexadecimal digits: one nibble parser, bytes to lowercase hex and back. Node ids,
 * GUIDs and UUIDs, session tokens, context ids and percent-escapes are all read with these.
 * Upper and lower case digits are both accepted on input; output is lowercase.
 */
#ifndef SL_CORE_HEX_H
#define SL_CORE_HEX_H

#include <stddef.h>
#include <stdint.h>

/* The value of hex digit c (0..15), or -1 when c is not one. */
static inline int sl_hex_nibble(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}
/* The byte of the two hex digits at s, or -1 when either is not a digit (s[1] is not read
 * when s[0] is a NUL or another non-digit). */
static inline int sl_hex_byte(const char *s)
{
    int hi = sl_hex_nibble((unsigned char)s[0]);
    int lo = hi < 0 ? -1 : sl_hex_nibble((unsigned char)s[1]);
    return lo < 0 ? -1 : hi << 4 | lo;
}
/* n bytes as 2n lowercase hex digits and a NUL into out (2n + 1 bytes). */
void sl_hex(char *out, const uint8_t *p, size_t n);
/* 2n hex digits at s into n bytes at out: 0, or -1 at the first non-digit. */
int sl_unhex(const char *s, size_t n, uint8_t *out);
/* 1 when all of s[0, n) are hex digits. */
int sl_is_hex(const char *s, size_t n);

/* GUIDs and UUIDs as text, "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", and their 16 bytes in the
 * wire's layout (MS-DTYP 2.3.4.2): the first three groups little endian, the last two in text
 * order. The reader takes exactly 36 characters with the four dashes in place; 0, or -1 with
 * out written up to the first bad digit. The writer is lowercase, 36 characters and a NUL. */
int sl_guid_parse(const char *s, size_t n, uint8_t out[16]);
void sl_guid_str(const uint8_t g[16], char out[37]);

#endif
