/* base64.h - RFC 4648 base64, standard alphabet, padded output. Two readers, one a policy:
 * - sl_base64_decode, the lenient one (what the HTTP API and etcd's JSON carry): CR, LF and
 *   spaces are skipped, '=' may only end the text (at most two), the length need not be a
 *   multiple of four and the bits of an unfinished last group are dropped;
 * - sl_base64_decode_strict, for stored password hashes: the length is a multiple of four
 *   (at most 1 MiB), no whitespace, '=' only in the last two places; each '=' there takes
 *   one byte off the length (OpenSSL's EVP_DecodeBlock, which these were first read with).
 */
#ifndef SL_CORE_BASE64_H
#define SL_CORE_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* A fresh NUL-terminated encoding of p (free with sl_free); *outlen its length if asked. */
char *sl_base64_encode(const uint8_t *p, size_t n, size_t *outlen);
/* The lenient reader: the decoded length, or -1 on invalid input; out must hold
 * n * 3 / 4 + 3 bytes. */
long sl_base64_decode(const char *s, size_t n, uint8_t *out);
/* The strict reader: the decoded length, or -1 on invalid input or when it would not fit in
 * cap bytes (which must be at least n / 4 * 3). */
long sl_base64_decode_strict(const char *s, size_t n, uint8_t *out, size_t cap);

#endif
