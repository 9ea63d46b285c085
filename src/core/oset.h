/* oset.h - an ordered set of named elements: an intrusive treap with subtree sizes.
 *
 * Why: listing 100,000 queues by name used to sort them for every request (35 ms of one
 * loop turn each). Elements embed an sl_onode and stay in name order as they are added and
 * removed (O(log n) each), so a list walks them from any name onwards (a cursor that
 * survives other changes between loop turns) and a page is found by its rank in O(log n).
 *
 * Keys are byte strings owned by the element (they must not change while it is in the set),
 * compared as strcmp compares names without NULs. Nothing here allocates.
 */
#ifndef SL_CORE_OSET_H
#define SL_CORE_OSET_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_onode {
    struct sl_onode *left, *right, *parent;
    const char *key;
    size_t klen;
    uint32_t prio; /* heap order (random): keeps the tree balanced in expectation */
    uint32_t size; /* nodes in this subtree, itself included */
} sl_onode;

typedef struct sl_oset {
    sl_onode *root;
    uint32_t seed;
} sl_oset;

/* Add n under key (no two elements may have the same key). */
void sl_oset_insert(sl_oset *s, sl_onode *n, const char *key, size_t klen);
void sl_oset_remove(sl_oset *s, sl_onode *n);
size_t sl_oset_count(const sl_oset *s);
sl_onode *sl_oset_first(const sl_oset *s);
sl_onode *sl_oset_last(const sl_oset *s);
sl_onode *sl_oset_next(const sl_onode *n);
sl_onode *sl_oset_prev(const sl_onode *n);
/* The first element whose key is >= key (> key when after is set), or NULL. */
sl_onode *sl_oset_seek(const sl_oset *s, const char *key, size_t klen, int after);
/* The element of rank i (0 = first), or NULL past the end. */
sl_onode *sl_oset_select(const sl_oset *s, size_t i);

/* The element that embeds n as field `member`. */
#define SL_ONODE_OWNER(n, type, member) ((type *)((char *)(n)-offsetof(type, member)))

#endif
