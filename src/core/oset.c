/* oset.c - intrusive treap with parent links and subtree sizes (see oset.h).
 *
 * Invariants: in-order = key order; a parent's prio <= its children's (a min-heap on random
 * priorities, which is what keeps the expected depth O(log n)); size = 1 + sizes of both
 * subtrees; parent links agree with child links.
 */
#include "core/oset.h"

#include <string.h>

static int key_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    if (c)
        return c;
    return al < bl ? -1 : al > bl;
}

static uint32_t size_of(const sl_onode *n)
{
    return n ? n->size : 0;
}

static void fix_size(sl_onode *n)
{
    n->size = 1 + size_of(n->left) + size_of(n->right);
}

static uint32_t next_prio(sl_oset *s)
{
    /* xorshift32: any spread of priorities does; no need for a good generator */
    uint32_t x = s->seed ? s->seed : 2463534242u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s->seed = x;
    return x;
}

/* Point whatever pointed at old (its parent's child link, or the root) at nu. */
static void replace_child(sl_oset *s, sl_onode *parent, sl_onode *old, sl_onode *nu)
{
    if (!parent)
        s->root = nu;
    else if (parent->left == old)
        parent->left = nu;
    else
        parent->right = nu;
    if (nu)
        nu->parent = parent;
}

/* Rotate n's child c above n (c is n->left or n->right). */
static void rotate_up(sl_oset *s, sl_onode *c)
{
    sl_onode *n = c->parent;
    replace_child(s, n->parent, n, c);
    if (n->left == c) {
        n->left = c->right;
        if (n->left)
            n->left->parent = n;
        c->right = n;
    } else {
        n->right = c->left;
        if (n->right)
            n->right->parent = n;
        c->left = n;
    }
    n->parent = c;
    fix_size(n);
    fix_size(c);
}

void sl_oset_insert(sl_oset *s, sl_onode *n, const char *key, size_t klen)
{
    n->key = key;
    n->klen = klen;
    n->left = n->right = n->parent = NULL;
    n->size = 1;
    n->prio = next_prio(s);
    sl_onode *p = NULL, **link = &s->root;
    while (*link) {
        p = *link;
        p->size++;
        link = key_cmp(key, klen, p->key, p->klen) < 0 ? &p->left : &p->right;
    }
    *link = n;
    n->parent = p;
    while (n->parent && n->parent->prio > n->prio)
        rotate_up(s, n);
}

void sl_oset_remove(sl_oset *s, sl_onode *n)
{
    /* Rotate n down (its higher-priority child up) until it has at most one child. */
    while (n->left && n->right)
        rotate_up(s, n->left->prio < n->right->prio ? n->left : n->right);
    sl_onode *child = n->left ? n->left : n->right;
    sl_onode *p = n->parent;
    replace_child(s, p, n, child);
    for (; p; p = p->parent)
        p->size--;
    n->left = n->right = n->parent = NULL;
}

size_t sl_oset_count(const sl_oset *s)
{
    return size_of(s->root);
}

sl_onode *sl_oset_first(const sl_oset *s)
{
    sl_onode *n = s->root;
    while (n && n->left)
        n = n->left;
    return n;
}

sl_onode *sl_oset_last(const sl_oset *s)
{
    sl_onode *n = s->root;
    while (n && n->right)
        n = n->right;
    return n;
}

sl_onode *sl_oset_next(const sl_onode *n)
{
    if (n->right) {
        n = n->right;
        while (n->left)
            n = n->left;
        return (sl_onode *)n;
    }
    while (n->parent && n->parent->right == n)
        n = n->parent;
    return n->parent;
}

sl_onode *sl_oset_prev(const sl_onode *n)
{
    if (n->left) {
        n = n->left;
        while (n->right)
            n = n->right;
        return (sl_onode *)n;
    }
    while (n->parent && n->parent->left == n)
        n = n->parent;
    return n->parent;
}

sl_onode *sl_oset_seek(const sl_oset *s, const char *key, size_t klen, int after)
{
    sl_onode *n = s->root, *best = NULL;
    while (n) {
        int c = key_cmp(n->key, n->klen, key, klen);
        if (c > 0 || (c == 0 && !after)) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

sl_onode *sl_oset_select(const sl_oset *s, size_t i)
{
    sl_onode *n = s->root;
    while (n) {
        size_t l = size_of(n->left);
        if (i < l) {
            n = n->left;
        } else if (i == l) {
            return n;
        } else {
            i -= l + 1;
            n = n->right;
        }
    }
    return NULL;
}
