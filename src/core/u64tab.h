/* u64tab.h - hash table keyed by 64-bit integers, with fixed-size entries stored inline.
 *
 * Made for recovery, which keeps one entry per stored message and per stored position: with
 * sl_map each cost a slot, a copied key and a separately allocated value (about 150 bytes);
 * here an entry costs its own size over the load factor, and no allocation.
 *
 * Every entry starts with its uint64_t key; the rest (esize - 8 bytes) is the caller's. Open
 * addressing with linear probing and backward-shift deletion (no tombstones). Entry pointers
 * stay valid until the next put or del on the same table. Any key is allowed, UINT64_MAX
 * (the empty-slot marker) included: that one lives in a slot of its own.
 */
#ifndef SL_CORE_U64TAB_H
#define SL_CORE_U64TAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_u64tab {
    uint8_t *slots; /* cap entries of esize bytes */
    size_t esize, cap, n;
    unsigned shift;     /* 64 - log2(cap) */
    uint8_t *max_entry; /* the entry of key UINT64_MAX, or NULL */
} sl_u64tab;

/* esize: bytes per entry, at least 8 (the key). */
void sl_u64tab_init(sl_u64tab *t, size_t esize);
void sl_u64tab_free(sl_u64tab *t);
size_t sl_u64tab_count(const sl_u64tab *t);
void *sl_u64tab_get(const sl_u64tab *t, uint64_t key);
/* The entry of key, inserted (zeroed after the key, *created = 1) when absent. */
void *sl_u64tab_put(sl_u64tab *t, uint64_t key, int *created);
/* Remove key: copies the entry to out (when not NULL) and returns 1; 0 when absent. */
int sl_u64tab_del(sl_u64tab *t, uint64_t key, void *out);
/* Iterate: start with *pos = 0; returns each entry once, then NULL. Not across put/del. */
void *sl_u64tab_next(const sl_u64tab *t, size_t *pos);
/* Move every entry to the front of t->slots, in no order, and return how many there are:
 * for sorting them in place when the table is no longer needed as one. Only sl_u64tab_free
 * may follow. */
size_t sl_u64tab_compact(sl_u64tab *t);

#endif
