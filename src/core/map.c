/* map.c - string-keyed hash map: open addressing with linear probing and tombstones.
 *
 * Invariants: cap is a power of two (or 0 before the first put); used = live + tombstones
 * stays below 3/4 of cap, so every probe sequence reaches an empty slot. Deleting leaves a
 * tombstone and never moves other entries, which is what makes "delete the entry sl_map_next
 * just returned" safe during iteration. Only a put may rehash (and drops the tombstones).
 * Keys are copied with a trailing NUL so callers can use them as C strings.
 */
#include "core/map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"

typedef struct slot {
    char *key; /* NULL = empty, TOMB = deleted */
    size_t klen;
    uint64_t hash;
    void *val;
} slot;

struct sl_map {
    slot *slots;
    size_t cap, live, used;
};

static char tomb_marker;
#define TOMB (&tomb_marker)

static uint64_t hash_bytes(const void *key, size_t klen)
{
    /* FNV-1a, then a final mix so that linear probing on the low bits spreads well. */
    const uint8_t *p = key;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < klen; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

sl_map *sl_map_new(void)
{
    return sl_xcalloc(1, sizeof(sl_map));
}

void sl_map_free(sl_map *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key && m->slots[i].key != TOMB)
            sl_free(m->slots[i].key);
    sl_free(m->slots);
    sl_free(m);
}

/* Slot holding key, or NULL. */
static slot *find(const sl_map *m, const void *key, size_t klen, uint64_t h)
{
    if (!m->cap)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        slot *s = &m->slots[i];
        if (!s->key)
            return NULL;
        if (s->key != TOMB && s->hash == h && s->klen == klen &&
            (klen == 0 || memcmp(s->key, key, klen) == 0))
            return s;
    }
}

static void rehash(sl_map *m, size_t ncap)
{
    slot *old = m->slots;
    size_t ocap = m->cap;
    m->slots = sl_xcalloc(ncap, sizeof(slot));
    m->cap = ncap;
    m->used = m->live;
    for (size_t i = 0; i < ocap; i++) {
        if (!old[i].key || old[i].key == TOMB)
            continue;
        size_t j = old[i].hash & (ncap - 1);
        while (m->slots[j].key)
            j = (j + 1) & (ncap - 1);
        m->slots[j] = old[i];
    }
    sl_free(old);
}

void *sl_map_get(const sl_map *m, const void *key, size_t klen)
{
    slot *s = find(m, key, klen, hash_bytes(key, klen));
    return s ? s->val : NULL;
}

void *sl_map_put(sl_map *m, const void *key, size_t klen, void *val)
{
    uint64_t h = hash_bytes(key, klen);
    slot *s = find(m, key, klen, h);
    if (s) {
        void *prev = s->val;
        s->val = val;
        return prev;
    }
    if ((m->used + 1) * 4 >= m->cap * 3) {
        size_t ncap = m->cap ? m->cap : 8;
        while ((m->live + 1) * 2 >= ncap) /* grow only when live entries need it */
            ncap *= 2;
        rehash(m, ncap);
    }
    size_t mask = m->cap - 1;
    size_t i = h & mask;
    while (m->slots[i].key && m->slots[i].key != TOMB)
        i = (i + 1) & mask;
    s = &m->slots[i];
    if (!s->key)
        m->used++;
    s->key = sl_xmalloc(klen + 1);
    if (klen)
        memcpy(s->key, key, klen);
    s->key[klen] = '\0';
    s->klen = klen;
    s->hash = h;
    s->val = val;
    m->live++;
    return NULL;
}

void *sl_map_del(sl_map *m, const void *key, size_t klen)
{
    slot *s = find(m, key, klen, hash_bytes(key, klen));
    if (!s)
        return NULL;
    void *prev = s->val;
    sl_free(s->key);
    s->key = TOMB;
    s->val = NULL;
    m->live--;
    return prev;
}

size_t sl_map_count(const sl_map *m)
{
    return m->live;
}

int sl_map_next(const sl_map *m, size_t *pos, const char **key, size_t *klen, void **val)
{
    for (size_t i = *pos; i < m->cap; i++) {
        slot *s = &m->slots[i];
        if (s->key && s->key != TOMB) {
            *pos = i + 1;
            if (key)
                *key = s->key;
            if (klen)
                *klen = s->klen;
            if (val)
                *val = s->val;
            return 1;
        }
    }
    *pos = m->cap;
    return 0;
}

/* ---- the values in key order (lists that must come out sorted) ---- */

typedef struct kv {
    const char *k;
    void *v;
} kv;

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const kv *)a)->k, ((const kv *)b)->k);
}

void **sl_map_sorted(const sl_map *m, size_t *n)
{
    size_t cnt = m ? sl_map_count(m) : 0, i = 0, it = 0, kl;
    kv *tmp = sl_xcalloc(cnt + 1, sizeof *tmp);
    const char *k;
    void *v;
    while (m && i < cnt && sl_map_next(m, &it, &k, &kl, &v))
        tmp[i++] = (kv){k, v};
    qsort(tmp, i, sizeof *tmp, kv_cmp);
    void **out = sl_xcalloc(i + 1, sizeof *out);
    for (size_t j = 0; j < i; j++)
        out[j] = tmp[j].v;
    sl_free(tmp);
    *n = i;
    return out;
}
