/* buf.c - growable byte buffer (see buf.h for the invariants). */
#include "core/buf.h"
#include "core/mem.h"

/* Capacity of every buffer alive. Changed only when a buffer grows or is freed (rare), and
 * atomically, since a helper thread may own buffers too. */
static size_t total_cap;

static void account(size_t add, size_t sub)
{
    if (add)
        __atomic_fetch_add(&total_cap, add, __ATOMIC_RELAXED);
    if (sub)
        __atomic_fetch_sub(&total_cap, sub, __ATOMIC_RELAXED);
}

size_t sl_buf_total(void)
{
    return __atomic_load_n(&total_cap, __ATOMIC_RELAXED);
}

uint8_t *sl_buf_detach(sl_buf *b)
{
    uint8_t *p = b->data;
    account(0, b->cap);
    sl_buf_init(b);
    return p;
}

void sl_buf_init(sl_buf *b)
{
    b->data = NULL;
    b->off = b->len = b->cap = 0;
}

void sl_buf_free(sl_buf *b)
{
    account(0, b->cap);
    sl_free(b->data);
    sl_buf_init(b);
}

uint8_t *sl_buf_reserve_slow(sl_buf *b, size_t n)
{
    if (b->cap - b->len >= n)
        return b->data + b->len;
    /* Reclaim the consumed prefix before growing when it makes enough room. */
    if (b->off > 0 && b->cap - (b->len - b->off) >= n && b->off >= b->len / 2) {
        sl_buf_compact(b);
        return b->data + b->len;
    }
    size_t need = b->len + n;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    b->data = sl_xrealloc(b->data, cap);
    account(cap - b->cap, 0);
    b->cap = cap;
    return b->data + b->len;
}

void sl_buf_append(sl_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    memcpy(sl_buf_reserve(b, n), p, n);
    b->len += n;
}

void sl_buf_consume(sl_buf *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len)
        b->off = b->len = 0;
}

void sl_buf_compact(sl_buf *b)
{
    if (b->off == 0)
        return;
    size_t n = b->len - b->off;
    memmove(b->data, b->data + b->off, n);
    b->off = 0;
    b->len = n;
}
