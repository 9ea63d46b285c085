/* crc32c.c - CRC32C (Castagnoli, reflected polynomial 0x82F63B78) for the record log.
 *
 * Two paths with identical results: the SSE4.2 crc32 instruction (8 bytes per instruction),
 * chosen once at load time by cpuid, and a portable table-driven slicing-by-8 fallback.
 * Both take and return the finished CRC (pre- and post-inverted inside), so calls chain:
 * st_crc32c(st_crc32c(0, a, n), b, m) == CRC(a || b). The tables are built by a load-time
 * constructor, before any thread can exist, so lookups need no locking.
 *
 * The instruction takes 3 cycles to give its result but can start one every cycle, so a
 * single chain of them runs at a third of the unit's speed. Long buffers are therefore cut
 * into three adjacent blocks whose CRCs run as three independent chains, then joined: the
 * register is linear over GF(2), so CRC(a || b) = zeros(CRC(a), |b|) ^ CRC(b) for raw
 * (uninverted) registers, where zeros(x, n) is x after n zero bytes; for the two block sizes
 * used that is four lookups in a table built at load time (as in Mark Adler's crc32c.c and
 * Intel's iSCSI paper). Paging a persistent 1 KiB message back in checks its CRC; this makes
 * that check about twice as fast.
 */
#include "store/log.h"

#include <stdint.h>
#include <string.h>

#include "core/le.h"

#define POLY 0x82F63B78u

static uint32_t T[8][256];
static int have_hw;

/* The three-chain path (hardware only): blocks of BLK_LONG bytes while three fit, then of
 * BLK_SHORT, then one chain for the rest. Z_LONG[k][v] = zeros(v << 8k, BLK_LONG), and so for
 * BLK_SHORT. */
#define BLK_LONG 256
#define BLK_SHORT 64
static uint32_t Z_LONG[4][256], Z_SHORT[4][256];

/* The raw register x after n zero bytes (the table step with a zero data byte). */
static uint32_t zeros_slow(uint32_t x, size_t n)
{
    while (n--)
        x = (x >> 8) ^ T[0][x & 0xff];
    return x;
}

/* zeros(., n) for every byte value in every byte place: built from the 32 single bits, since
 * zeros is linear. */
static void zeros_table(uint32_t z[4][256], size_t n)
{
    uint32_t bit[32];
    for (int i = 0; i < 32; i++)
        bit[i] = zeros_slow(1u << i, n);
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t x = 0;
            for (int b = 0; b < 8; b++)
                if (v & (1u << b))
                    x ^= bit[8 * k + b];
            z[k][v] = x;
        }
}

static inline uint32_t zeros(uint32_t z[4][256], uint32_t x)
{
    return z[0][x & 0xff] ^ z[1][(x >> 8) & 0xff] ^ z[2][(x >> 16) & 0xff] ^ z[3][x >> 24];
}

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
    zeros_table(Z_LONG, BLK_LONG);
    zeros_table(Z_SHORT, BLK_SHORT);
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
        uint32_t lo = c ^ sl_le32(p), hi = sl_le32(p + 4);
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
static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8); /* aligned here; memcpy keeps it free of aliasing questions */
    return v;
}

/* Three chains over the blocks [p, p+blk), [p+blk, p+2 blk), [p+2 blk, p+3 blk) while they
 * fit in n; the raw register c runs through the first, the others start at 0 and are joined
 * in. */
__attribute__((target("sse4.2"))) static inline uint64_t
three_chains(uint64_t c, const uint8_t **pp, size_t *np, size_t blk, uint32_t z[4][256])
{
    const uint8_t *p = *pp;
    size_t n = *np;
    while (n >= 3 * blk) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < blk; i += 8) {
            c = __builtin_ia32_crc32di(c, load64(p + i));
            c1 = __builtin_ia32_crc32di(c1, load64(p + blk + i));
            c2 = __builtin_ia32_crc32di(c2, load64(p + 2 * blk + i));
        }
        c = zeros(z, (uint32_t)c) ^ (uint32_t)c1;
        c = zeros(z, (uint32_t)c) ^ (uint32_t)c2;
        p += 3 * blk;
        n -= 3 * blk;
    }
    *pp = p;
    *np = n;
    return c;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    uint64_t c = (uint32_t)~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n--;
    }
    c = three_chains(c, &p, &n, BLK_LONG, Z_LONG);
    c = three_chains(c, &p, &n, BLK_SHORT, Z_SHORT);
    while (n >= 8) {
        c = __builtin_ia32_crc32di(c, load64(p));
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
