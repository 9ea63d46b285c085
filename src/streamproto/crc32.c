/* crc32.c - the OSIRIS chunk CRC (CRC-32 of zlib and gzip: reflected polynomial 0xEDB88320),
 * over every Deliver's chunk data (sp_chunk_end) and every published chunk checked.
 *
 * zlib's crc32 (1.2.13: braided tables) ran at about 2 GB/s here and was a fifth of the
 * node's time in a stream replay of small messages once the store stopped checking entries it
 * had checked before. Where the CPU has carry-less multiplication (PCLMULQDQ, and SSE4.1 for
 * the last extract) the bulk goes through the folding method of Intel's paper "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Gopal et al., 2009), in
 * the form zlib's SIMD patches use (Chromium's crc32_simd.c): four 128-bit lanes folded 64
 * bytes at a time, folded to one lane, then 16 bytes at a time, reduced to 64 bits and
 * Barrett-reduced to 32. It takes and gives the raw register (not inverted); what is left
 * below 16 bytes, and a buffer shorter than 64, goes to zlib. Chosen once at load time by
 * cpuid; the result is the same either way (tests/unit/test_streamproto.c compares the two
 * over many lengths and starting values).
 */
#include "streamproto/chunk.h"

#include <zlib.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CLMUL_PATH 1
#endif

static uint32_t crc32_zlib(uint32_t crc, const uint8_t *p, size_t n)
{
    uLong c = crc;
    while (n > 0) { /* zlib takes a uInt length */
        uInt step = n > 0x40000000u ? 0x40000000u : (uInt)n;
        c = crc32(c, p, step);
        p += step;
        n -= step;
    }
    return (uint32_t)c;
}

#ifdef HAVE_CLMUL_PATH
static int have_clmul;

__attribute__((constructor)) static void crc32_init(void)
{
    __builtin_cpu_init();
    have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}

/* The raw register after len bytes (len >= 64, a multiple of 16). The constants are the
 * paper's for this polynomial in the bit-reflected domain: x^(4*128+32) and x^(4*128-32)
 * mod P (four lanes), x^(128+32) and x^(128-32) mod P (one), x^64 mod P, then P and u. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(uint32_t crc,
                                                                     const uint8_t *buf, size_t len)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    buf += 64;
    len -= 64;
    /* four lanes, 64 bytes a pass */
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    /* the four lanes into one */
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    /* one lane, 16 bytes a pass */
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64 */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction to 32 bits */
    x0 = poly;
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

uint32_t sp_crc32_update(uint32_t crc, const uint8_t *p, size_t n)
{
#ifdef HAVE_CLMUL_PATH
    if (have_clmul && n >= 64) {
        size_t bulk = n & ~(size_t)15;
        crc = ~crc32_clmul(~crc, p, bulk);
        p += bulk;
        n -= bulk;
    }
#endif
    return n ? crc32_zlib(crc, p, n) : crc;
}

uint32_t sp_crc32_update_zlib(uint32_t crc, const uint8_t *p, size_t n)
{
    return crc32_zlib(crc, p, n);
}

uint32_t sp_crc32(const uint8_t *p, size_t n)
{
    return sp_crc32_update(0, p, n);
}
