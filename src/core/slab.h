/* slab.h - a small-object allocator for what a deep queue holds by the million: messages,
 * their extra positions and locks (qm/). malloc puts an 8-byte header before every block and
 * rounds to 16 bytes, which for an 82-byte message is 14 bytes of 96; here objects of one size
 * class (multiples of 8 bytes, 16..SL_SLAB_MAX) are carved out of 64 KiB chunks with no header,
 * the chunk found from the object's address (chunks are 64 KiB-aligned).
 *
 * A chunk whose objects are all free goes back to the system (munmap) unless it is the last
 * one of its class with free room, so a queue that drains gives its memory back. Not thread
 * safe: the event-loop thread owns it, as it owns everything in qm/.
 */
#ifndef SL_CORE_SLAB_H
#define SL_CORE_SLAB_H

#include <stddef.h>

#define SL_SLAB_MAX 512

/* Memory for n bytes (n <= SL_SLAB_MAX, else NULL: use malloc). Aborts when the system has
 * none, as sl_xmalloc does. *cls is what sl_slab_free needs back (never 0). */
void *sl_slab_alloc(size_t n, unsigned *cls);
void sl_slab_free(void *p, unsigned cls);
/* The bytes a block of class cls takes. */
size_t sl_slab_size(unsigned cls);
/* The class n bytes would get (0 when n > SL_SLAB_MAX). */
unsigned sl_slab_class(size_t n);

/* Mid-size blocks, SL_SLAB_MAX+1 .. SL_MID_MAX bytes: a message of about 1 KiB. These are
 * malloc'd, in 16-byte classes sized so that malloc's 8-byte header rounds to no waste, and a
 * freed one is kept on its class's free list (SL_MID_CACHE bytes at most, over all classes)
 * for the next of its size. A queue draining 1 KiB messages frees one block per ack and
 * allocates one per message read back from disk; glibc's per-thread cache stops at 1032
 * bytes, so without this each pair went through malloc's bins and their coalescing: 1.9% of
 * the broker's CPU over 2 M x 1 KiB published with confirms and drained, 0.7% with it (perf).
 * Not thread safe, like the slab: the loop thread makes and frees every message. */
#define SL_MID_MAX 4096
#define SL_MID_CACHE (1024u * 1024)
/* Memory for n bytes (SL_SLAB_MAX < n <= SL_MID_MAX, else NULL). *cls is what sl_mid_free
 * needs back: never 0 and never a slab class (sl_is_mid tells them apart). */
void *sl_mid_alloc(size_t n, unsigned *cls);
void sl_mid_free(void *p, unsigned cls);
size_t sl_mid_size(unsigned cls);
int sl_is_mid(unsigned cls);
/* Bytes on the mid-size free lists now. */
size_t sl_mid_cached_bytes(void);

typedef struct sl_slab_stats {
    size_t chunks;      /* 64 KiB chunks mapped */
    size_t used_bytes;  /* bytes of live blocks */
    size_t free_blocks; /* blocks free in mapped chunks */
} sl_slab_stats;
void sl_slab_get_stats(sl_slab_stats *out);

#endif
