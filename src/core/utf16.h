/* utf16.h - UTF-16 <-> UTF-8 for the Windows-facing wires (MS-MQQB's names and labels, NDR's
 * wchar_t strings, NTLM's user and domain names, the NT hash's password).
 *
 * One input-check policy, the strictest the copies had, for every caller:
 * - UTF-16 in: an odd byte length, an unpaired surrogate (a high one not followed by a low
 *   one, a low one alone) and a NUL unit are refused; the text must fit the output with its
 *   terminating NUL.
 * - UTF-8 in: a byte that cannot start a sequence, a missing continuation byte, an overlong
 *   form, a surrogate (U+D800..U+DFFF) and anything past U+10FFFF are refused. A NUL byte
 *   inside the n given is a NUL unit (callers holding C strings pass strlen).
 * Refused means -1 and nothing promised about the output. sl_utf8_next is the one UTF-8
 * decoder under the encoders, for callers that substitute U+FFFD instead of refusing.
 */
#ifndef SL_CORE_UTF16_H
#define SL_CORE_UTF16_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

/* The code point at s[*i] (n bytes in all), *i moved past it; -1 when the sequence is
 * refused, *i then moved past its lead byte and the continuation bytes that were valid. */
long sl_utf8_next(const uint8_t *s, size_t n, size_t *i);
/* 1 when all of s (n bytes) is UTF-8 by the policy above (a NUL byte is a code point). */
int sl_utf8_valid(const uint8_t *s, size_t n);
/* cp (at most U+10FFFF) as UTF-8 into out: its length, 1 to 4. */
size_t sl_utf8_put(uint8_t out[4], uint32_t cp);

/* UTF-16LE p (n bytes) as UTF-8 into out (cap bytes, NUL-terminated): the UTF-8 length, or
 * -1 when refused or when it does not fit. */
long sl_utf16le_to_utf8(const uint8_t *p, size_t n, char *out, size_t cap);
/* The same for UTF-16BE (an NDR stub in a big-endian data representation). */
long sl_utf16be_to_utf8(const uint8_t *p, size_t n, char *out, size_t cap);

/* UTF-8 s (n bytes) as UTF-16LE into out (NULL: only count): the UTF-16 units, or -1. */
long sl_utf8_to_utf16le(const uint8_t *s, size_t n, uint8_t *out);
/* The same, appended to b (nothing appended when refused). */
long sl_utf8_to_utf16le_buf(const uint8_t *s, size_t n, sl_buf *b);

#endif
