/* holds.c - output held for the disk (contract in holds.h). A ring of marks. */
#include "core/holds.h"

#include "core/mem.h"

static sl_hold *at_(const sl_holds *h, size_t i)
{
    return &h->v[(h->head + i) % h->cap];
}

static void mark(sl_holds *h, uint64_t at, uint64_t gen, uint64_t done, int soft)
{
    if (gen <= done)
        return;
    /* A mark already waiting for this generation (or a later one) covers this too; it may no
     * longer be given up when this one may not. */
    if (h->len && at_(h, h->len - 1)->gen >= gen) {
        if (!soft)
            at_(h, h->len - 1)->soft = 0;
        return;
    }
    if (h->len == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 4;
        sl_hold *nu = sl_xmalloc(cap * sizeof *nu);
        for (size_t i = 0; i < h->len; i++)
            nu[i] = *at_(h, i);
        sl_free(h->v);
        h->v = nu;
        h->cap = cap;
        h->head = 0;
    }
    *at_(h, h->len++) = (sl_hold){at, gen, soft};
}

void sl_holds_mark(sl_holds *h, uint64_t at, uint64_t gen, uint64_t done)
{
    mark(h, at, gen, done, 0);
}

void sl_holds_mark_soft(sl_holds *h, uint64_t at, uint64_t gen, uint64_t done)
{
    mark(h, at, gen, done, 1);
}

size_t sl_holds_drop_soft(sl_holds *h)
{
    size_t k = 0;
    for (size_t i = 0; i < h->len; i++) {
        sl_hold x = *at_(h, i);
        if (!x.soft)
            *at_(h, k++) = x; /* k <= i: never over one not read yet */
    }
    size_t dropped = h->len - k;
    h->len = k;
    return dropped;
}

void sl_holds_release(sl_holds *h, uint64_t done)
{
    while (h->len && h->v[h->head].gen <= done) {
        h->head = (h->head + 1) % h->cap;
        h->len--;
    }
}

size_t sl_holds_avail(const sl_holds *h, uint64_t sent, size_t unread)
{
    if (!h->len)
        return unread;
    uint64_t at = h->v[h->head].at;
    if (at <= sent)
        return 0;
    return at - sent < unread ? (size_t)(at - sent) : unread;
}

void sl_holds_clear(sl_holds *h)
{
    h->head = h->len = 0;
}

void sl_holds_free(sl_holds *h)
{
    sl_free(h->v);
    h->v = NULL;
    h->head = h->len = h->cap = 0;
}
