/* slab.c - the small-object allocator (contract in slab.h).
 *
 * Invariants: every chunk is CHUNK bytes at a CHUNK-aligned address and begins with its
 * header; it belongs to one class; its free blocks are on its own free list (threaded
 * through the blocks) or never handed out yet (the bump region [bump, end)). A class keeps
 * the chunks that have room on a doubly linked list; a full chunk is on no list and comes
 * back to it when one of its blocks is freed. A chunk whose blocks are all free is unmapped
 * unless it is the only one with room in its class.
 *
 * The mid tier: a class idx holds blocks of idx*16-8 bytes (malloc adds its 8-byte header and
 * lands on a 16-byte multiple); its class number is MID_BASE+idx, above every slab class. A
 * freed mid block goes on its class's list (threaded through the block) while mid_cached stays
 * within SL_MID_CACHE, else back to malloc.
 */
#include "core/slab.h"

#include "core/list.h"
#include "core/mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

/* Under AddressSanitizer every block is a malloc of its own, so use-after-free and overflows
 * of messages and positions stay visible to it (a slab would hide them). */
#if SL_ASAN
#define SLAB_BY_MALLOC 1
#endif

#define CHUNK (64u * 1024)
#define NCLASSES (SL_SLAB_MAX / 8)

typedef struct chunk {
    struct chunk *prev, *next; /* in its class's list of chunks with room */
    void *free;                /* freed blocks (each holds the next) */
    char *bump, *end;          /* never used yet */
    unsigned cls;
    unsigned live; /* blocks handed out */
    unsigned on_list;
} chunk;

typedef struct klass {
    chunk *room; /* chunks with a free block */
    size_t nroom;
} klass;

static klass classes[NCLASSES + 1];
static size_t n_chunks, used_bytes, free_blocks;

unsigned sl_slab_class(size_t n)
{
    if (n > SL_SLAB_MAX)
        return 0;
    if (n < 16)
        n = 16;
    return (unsigned)((n + 7) / 8);
}

size_t sl_slab_size(unsigned cls)
{
    return (size_t)cls * 8;
}

static void list_add(klass *k, chunk *c)
{
    SL_LIST_PUSH(k->room, c, prev, next);
    c->on_list = 1;
    k->nroom++;
}

static void list_remove(klass *k, chunk *c)
{
    SL_LIST_UNLINK(k->room, c, prev, next);
    c->prev = c->next = NULL;
    c->on_list = 0;
    k->nroom--;
}

static chunk *chunk_new(unsigned cls)
{
    /* Map twice the size and keep the aligned half: mmap only promises page alignment. */
    char *p = mmap(NULL, 2 * CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fputs("sluice: out of memory (slab chunk)\n", stderr);
        abort();
    }
    char *a = (char *)(((uintptr_t)p + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    if (a + CHUNK < p + 2 * CHUNK)
        munmap(a + CHUNK, (size_t)(p + 2 * CHUNK - (a + CHUNK)));
    chunk *c = (chunk *)a;
    size_t size = sl_slab_size(cls);
    c->prev = c->next = NULL;
    c->free = NULL;
    c->bump = a + ((sizeof(chunk) + 15) & ~(size_t)15);
    c->end = c->bump + (CHUNK - (size_t)(c->bump - a)) / size * size;
    c->cls = cls;
    c->live = 0;
    c->on_list = 0;
    n_chunks++;
    free_blocks += (size_t)(c->end - c->bump) / size;
    return c;
}

void *sl_slab_alloc(size_t n, unsigned *cls_out)
{
    unsigned cls = sl_slab_class(n);
    if (!cls)
        return NULL;
#ifdef SLAB_BY_MALLOC
    void *m = malloc(sl_slab_size(cls));
    if (!m)
        abort();
    used_bytes += sl_slab_size(cls);
    *cls_out = cls;
    return m;
#endif
    klass *k = &classes[cls];
    chunk *c = k->room;
    if (!c) {
        c = chunk_new(cls);
        list_add(k, c);
    }
    void *p;
    if (c->free) {
        p = c->free;
        c->free = *(void **)p;
    } else {
        p = c->bump;
        c->bump += sl_slab_size(cls);
    }
    c->live++;
    free_blocks--;
    used_bytes += sl_slab_size(cls);
    if (!c->free && c->bump == c->end)
        list_remove(k, c); /* full */
    *cls_out = cls;
    return p;
}

void sl_slab_free(void *p, unsigned cls)
{
    if (!p)
        return;
#ifdef SLAB_BY_MALLOC
    used_bytes -= sl_slab_size(cls);
    free(p);
    return;
#endif
    chunk *c = (chunk *)((uintptr_t)p & ~(uintptr_t)(CHUNK - 1));
    klass *k = &classes[cls];
    *(void **)p = c->free;
    c->free = p;
    c->live--;
    free_blocks++;
    used_bytes -= sl_slab_size(cls);
    if (!c->on_list)
        list_add(k, c);
    if (c->live == 0 && k->nroom > 1) {
        /* All free, and another chunk has room: give this one back. */
        list_remove(k, c);
        free_blocks -= (size_t)(c->end - ((char *)c + ((sizeof(chunk) + 15) & ~(size_t)15))) /
                       sl_slab_size(cls);
        munmap(c, CHUNK);
        n_chunks--;
    }
}

void sl_slab_get_stats(sl_slab_stats *out)
{
    out->chunks = n_chunks;
    out->used_bytes = used_bytes;
    out->free_blocks = free_blocks;
}

/* ---- mid-size blocks ---- */

#define MID_BASE 1024u
#define MID_CLASSES ((SL_MID_MAX + 8 + 15) / 16 + 1)

static void *mid_free_list[MID_CLASSES];
static size_t mid_cached;

int sl_is_mid(unsigned cls)
{
    return cls > MID_BASE && cls < MID_BASE + MID_CLASSES;
}

size_t sl_mid_size(unsigned cls)
{
    return (size_t)(cls - MID_BASE) * 16 - 8;
}

void *sl_mid_alloc(size_t n, unsigned *cls_out)
{
    if (n <= SL_SLAB_MAX || n > SL_MID_MAX)
        return NULL;
    unsigned idx = (unsigned)((n + 8 + 15) / 16);
    size_t size = (size_t)idx * 16 - 8;
    void *p = mid_free_list[idx];
    if (p) {
        mid_free_list[idx] = *(void **)p;
        mid_cached -= size;
    } else {
        p = malloc(size);
        if (!p) {
            fputs("sluice: out of memory (mid block)\n", stderr);
            abort();
        }
    }
    *cls_out = MID_BASE + idx;
    return p;
}

void sl_mid_free(void *p, unsigned cls)
{
    if (!p)
        return;
#ifdef SLAB_BY_MALLOC
    /* Every block its own malloc to the end, so ASan sees a use after free. */
    free(p);
    return;
#endif
    unsigned idx = cls - MID_BASE;
    size_t size = sl_mid_size(cls);
    if (mid_cached + size > SL_MID_CACHE) {
        free(p);
        return;
    }
    *(void **)p = mid_free_list[idx];
    mid_free_list[idx] = p;
    mid_cached += size;
}

size_t sl_mid_cached_bytes(void)
{
    return mid_cached;
}
