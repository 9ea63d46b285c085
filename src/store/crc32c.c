/* crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82F63B78) for the record log.
 *
 * Two paths with identical results: the SSE4.2 crc32 instruction (8 bytes per instruction),
 * chosen once at load time by cpuid, and a portable table-driven slicing-by-8 fallback.
 * Both take and return the finished CRC (pre- and post-inverted inside), so calls chain:
 * st_crc32c(st_crc32c(0, a, n), b, m) == CRC(a || b). The tables are built by a load-time
 * constructor, before any thread can exist, so lookups need no locking.
 */
#include "store/log.h"

#include <stdint.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t T[8][256];
static int have_hw;

__attribute__((constructor)) static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (POLY & (0u - (c & 1)));
        T[0][i] = c;
    }
    /* T[k][i] is the CRC of byte i followed by k zero bytes: it lets eight input bytes be
     * folded with eight independent lookups instead of a chain of eight dependent ones. */
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            T[k][i] = (T[k - 1][i] >> 8) ^ T[0][T[k - 1][i] & 0xff];
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init(); /* required before __builtin_cpu_supports in a constructor */
    have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t st_crc32c_sw(uint32_t crc, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    uint32_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = (c >> 8) ^ T[0][(c ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        /* Little-endian word load made explicit, so big-endian hosts agree. */
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        uint32_t hi =
            (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = T[7][lo & 0xff] ^ T[6][(lo >> 8) & 0xff] ^ T[5][(lo >> 16) & 0xff] ^ T[4][lo >> 24] ^
            T[3][hi & 0xff] ^ T[2][(hi >> 8) & 0xff] ^ T[1][(hi >> 16) & 0xff] ^ T[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ T[0][(c ^ *p++) & 0xff];
    return ~c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    uint64_t c = (uint32_t)~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8); /* aligned here; memcpy keeps it free of aliasing questions */
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

uint32_t st_crc32c(uint32_t crc, const void *p, size_t n)
{
#if defined(__x86_64__)
    if (have_hw)
        return crc32c_hw(crc, p, n);
#endif
    return st_crc32c_sw(crc, p, n);
}
