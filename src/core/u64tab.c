/* u64tab.c - see u64tab.h. Invariant: every key sits at or cyclically after its home slot
 * with no empty slot in between (what linear probing needs, and what deletion keeps by
 * shifting later entries back). The table grows at 3/4 full. */
#include "core/u64tab.h"

#include <string.h>

#include "core/mem.h"

#define EMPTY UINT64_MAX

static uint64_t key_at(const sl_u64tab *t, size_t i)
{
    uint64_t k;
    memcpy(&k, t->slots + i * t->esize, 8);
    return k;
}

static uint8_t *slot(const sl_u64tab *t, size_t i)
{
    return t->slots + i * t->esize;
}

/* Fibonacci hashing: the top bits of key * 2^64/phi spread sequential ids evenly. */
static size_t home(const sl_u64tab *t, uint64_t key)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> t->shift);
}

void sl_u64tab_init(sl_u64tab *t, size_t esize)
{
    memset(t, 0, sizeof *t);
    t->esize = esize < 8 ? 8 : esize;
}

void sl_u64tab_free(sl_u64tab *t)
{
    sl_free(t->slots);
    sl_free(t->max_entry);
    t->slots = t->max_entry = NULL;
    t->cap = t->n = 0;
}

size_t sl_u64tab_count(const sl_u64tab *t)
{
    return t->n;
}

static void grow(sl_u64tab *t)
{
    size_t ncap = t->cap ? t->cap * 2 : 64;
    unsigned nshift = 64;
    for (size_t c = ncap; c > 1; c >>= 1)
        nshift--;
    uint8_t *old = t->slots;
    size_t ocap = t->cap;
    t->slots = sl_xmalloc(ncap * t->esize);
    for (size_t i = 0; i < ncap; i++)
        memset(t->slots + i * t->esize, 0xff, 8);
    t->cap = ncap;
    t->shift = nshift;
    for (size_t i = 0; i < ocap; i++) {
        uint8_t *e = old + i * t->esize;
        uint64_t k;
        memcpy(&k, e, 8);
        if (k == EMPTY)
            continue;
        size_t j = home(t, k);
        while (key_at(t, j) != EMPTY)
            j = (j + 1) & (ncap - 1);
        memcpy(slot(t, j), e, t->esize);
    }
    sl_free(old);
}

void *sl_u64tab_get(const sl_u64tab *t, uint64_t key)
{
    if (key == EMPTY)
        return t->max_entry;
    if (!t->cap)
        return NULL;
    for (size_t i = home(t, key);; i = (i + 1) & (t->cap - 1)) {
        uint64_t k = key_at(t, i);
        if (k == key)
            return slot(t, i);
        if (k == EMPTY)
            return NULL;
    }
}

void *sl_u64tab_put(sl_u64tab *t, uint64_t key, int *created)
{
    *created = 0;
    if (key == EMPTY) {
        if (!t->max_entry) {
            t->max_entry = sl_xcalloc(1, t->esize);
            memcpy(t->max_entry, &key, 8);
            t->n++;
            *created = 1;
        }
        return t->max_entry;
    }
    void *e = sl_u64tab_get(t, key);
    if (e)
        return e;
    if ((t->n + 1) * 4 > t->cap * 3)
        grow(t);
    size_t i = home(t, key);
    while (key_at(t, i) != EMPTY)
        i = (i + 1) & (t->cap - 1);
    uint8_t *s = slot(t, i);
    memset(s, 0, t->esize);
    memcpy(s, &key, 8);
    t->n++;
    *created = 1;
    return s;
}

int sl_u64tab_del(sl_u64tab *t, uint64_t key, void *out)
{
    if (key == EMPTY) {
        if (!t->max_entry)
            return 0;
        if (out)
            memcpy(out, t->max_entry, t->esize);
        sl_free(t->max_entry);
        t->max_entry = NULL;
        t->n--;
        return 1;
    }
    uint8_t *e = sl_u64tab_get(t, key);
    if (!e)
        return 0;
    if (out)
        memcpy(out, e, t->esize);
    size_t mask = t->cap - 1;
    size_t hole = (size_t)(e - t->slots) / t->esize;
    /* Backward shift: pull back each later entry of the run whose home does not lie in the
     * cyclic range (hole, j], so no probe meets an empty slot before its key. */
    for (size_t j = (hole + 1) & mask;; j = (j + 1) & mask) {
        uint64_t k = key_at(t, j);
        if (k == EMPTY)
            break;
        size_t h = home(t, k);
        int stays = hole < j ? (h > hole && h <= j) : (h > hole || h <= j);
        if (stays)
            continue;
        memcpy(slot(t, hole), slot(t, j), t->esize);
        hole = j;
    }
    memset(slot(t, hole), 0xff, 8);
    t->n--;
    return 1;
}

size_t sl_u64tab_compact(sl_u64tab *t)
{
    size_t w = 0;
    for (size_t i = 0; i < t->cap; i++) {
        if (key_at(t, i) == EMPTY)
            continue;
        if (w != i)
            memcpy(slot(t, w), slot(t, i), t->esize);
        w++;
    }
    if (t->max_entry) {
        /* the table is never full (it grows at 3/4), so there is room for this one */
        memcpy(slot(t, w++), t->max_entry, t->esize);
        sl_free(t->max_entry);
        t->max_entry = NULL;
    }
    t->n = 0;
    return w;
}

void *sl_u64tab_next(const sl_u64tab *t, size_t *pos)
{
    while (*pos < t->cap) {
        size_t i = (*pos)++;
        if (key_at(t, i) != EMPTY)
            return slot(t, i);
    }
    if (*pos == t->cap && t->max_entry) {
        (*pos)++;
        return t->max_entry;
    }
    return NULL;
}
