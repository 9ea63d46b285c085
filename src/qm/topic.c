/* topic.c - topic exchanges: matching a routing key against a pattern, and the per-exchange
 * trie of binding patterns that routing walks instead of testing every binding.
 *
 * Words are split on '.' as RabbitMQ does ("" has no words, "a..b" an empty middle one); in
 * a pattern "*" stands for exactly one word and "#" for zero or more. The trie has one edge
 * per pattern word: literal words in a map per node, "*" and "#" as two fixed children. A
 * binding sits at the node its whole pattern leads to (chained by tnext); nodes left with no
 * bindings and no children are pruned at unbind, so the trie is never bigger than the
 * patterns it holds.
 *
 * Walking a key visits a node at a word position at most once per walk (a per-node bitmap
 * stamped with the walk's number), so patterns such as "#.a.#.a.#" cost O(trie nodes x key
 * words) rather than the exponential number of ways their "#"s can split a key. The visit
 * map has a bit for every word position of the longest AMQP key (255 dots: 256 words, 257
 * positions), so every key a door accepts takes the trie; longer ones (no door lets them
 * in) fall back to testing each binding with qm_topic_match. The unit tests check that both
 * ways agree.
 */
#include <string.h>

#include "core/list.h"
#include "qm/qm_internal.h"

/* ---- matching one pattern (the reference the trie must agree with) ---- */

typedef struct word {
    const char *p;
    size_t len;
} word;

/* Split on '.', RabbitMQ style: "" has no words, "a..b" has an empty middle word. */
static size_t split_words(const char *s, size_t len, word *w)
{
    size_t n = 0, start = 0;
    if (!len)
        return 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '.') {
            w[n].p = s + start;
            w[n].len = i - start;
            n++;
            start = i + 1;
        }
    }
    return n;
}

static int word_is(const word *w, char c)
{
    return w->len == 1 && w->p[0] == c;
}

int qm_topic_match(const char *pattern, size_t plen, const char *key, size_t klen)
{
    word pst[64], kst[64];
    word *pw = plen < 63 ? pst : sl_xmalloc((plen + 2) * sizeof(word));
    word *kw = klen < 63 ? kst : sl_xmalloc((klen + 2) * sizeof(word));
    size_t np = split_words(pattern, plen, pw);
    size_t nk = split_words(key, klen, kw);

    /* m[j]: the first i pattern words match the first j key words (one row at a time) */
    uint8_t mst[130];
    uint8_t *m = nk + 1 <= sizeof mst / 2 ? mst : sl_xmalloc(2 * (nk + 1));
    uint8_t *prev = m, *cur = m + nk + 1;
    memset(prev, 0, nk + 1);
    prev[0] = 1;
    for (size_t i = 1; i <= np; i++) {
        const word *p = &pw[i - 1];
        if (word_is(p, '#')) {
            cur[0] = prev[0];
            for (size_t j = 1; j <= nk; j++)
                cur[j] = prev[j] || cur[j - 1];
        } else {
            cur[0] = 0;
            for (size_t j = 1; j <= nk; j++) {
                const word *k = &kw[j - 1];
                cur[j] = prev[j - 1] &&
                         (word_is(p, '*') || (p->len == k->len && !memcmp(p->p, k->p, k->len)));
            }
        }
        uint8_t *t = prev;
        prev = cur;
        cur = t;
    }
    int ok = prev[nk];
    if (m != mst)
        sl_free(m);
    if (pw != pst)
        sl_free(pw);
    if (kw != kst)
        sl_free(kw);
    return ok;
}

/* ---- the trie ---- */

#define TRIE_MAX_WORDS 256 /* word positions 0..256 fit the 320-bit visit map */

enum { TN_ROOT, TN_WORD, TN_STAR, TN_HASH };

struct qm_tnode {
    struct qm_tnode *parent;
    uint8_t kind;
    char *word; /* TN_WORD: its key in parent->children */
    size_t wlen;
    sl_map *children; /* literal word -> qm_tnode */
    struct qm_tnode *star, *hash;
    qm_binding *bindings; /* patterns ending here */
    uint64_t walk;        /* number of the walk the visit map belongs to */
    uint64_t visited[5];  /* word positions this walk has been here at */
};

static qm_tnode *tnode_new(qm_tnode *parent, uint8_t kind, const char *w, size_t wlen)
{
    qm_tnode *n = sl_xcalloc(1, sizeof *n);
    n->parent = parent;
    n->kind = kind;
    if (kind == TN_WORD) {
        n->word = sl_xstrndup(w, wlen);
        n->wlen = wlen;
    }
    return n;
}

static int tnode_empty(const qm_tnode *n)
{
    return !n->bindings && !n->star && !n->hash && (!n->children || !sl_map_count(n->children));
}

static void tnode_free(qm_tnode *n)
{
    sl_map_free(n->children);
    sl_free(n->word);
    sl_free(n);
}

void qm_topic_add(qm_exchange *x, qm_binding *b)
{
    if (!x->trie)
        x->trie = tnode_new(NULL, TN_ROOT, NULL, 0);
    word st[64];
    word *w = b->key_len < 63 ? st : sl_xmalloc((b->key_len + 2) * sizeof(word));
    size_t nw = split_words(b->key, b->key_len, w);
    qm_tnode *n = x->trie;
    for (size_t i = 0; i < nw; i++) {
        if (word_is(&w[i], '*')) {
            if (!n->star)
                n->star = tnode_new(n, TN_STAR, NULL, 0);
            n = n->star;
        } else if (word_is(&w[i], '#')) {
            if (!n->hash)
                n->hash = tnode_new(n, TN_HASH, NULL, 0);
            n = n->hash;
        } else {
            if (!n->children)
                n->children = sl_map_new();
            qm_tnode *c = sl_map_get(n->children, w[i].p, w[i].len);
            if (!c) {
                c = tnode_new(n, TN_WORD, w[i].p, w[i].len);
                sl_map_put(n->children, w[i].p, w[i].len, c);
            }
            n = c;
        }
    }
    if (w != st)
        sl_free(w);
    b->tnode = n;
    SL_LIST_PUSH(n->bindings, b, tprev, tnext);
}

void qm_topic_remove(qm_exchange *x, qm_binding *b)
{
    qm_tnode *n = b->tnode;
    if (!n)
        return;
    SL_LIST_UNLINK(n->bindings, b, tprev, tnext);
    b->tnode = NULL;
    b->tnext = b->tprev = NULL;
    /* prune what no pattern needs any more, up to the root */
    while (n->kind != TN_ROOT && tnode_empty(n)) {
        qm_tnode *p = n->parent;
        if (n->kind == TN_STAR)
            p->star = NULL;
        else if (n->kind == TN_HASH)
            p->hash = NULL;
        else
            sl_map_del(p->children, n->word, n->wlen);
        tnode_free(n);
        n = p;
    }
    if (n->kind == TN_ROOT && tnode_empty(n)) {
        tnode_free(n);
        x->trie = NULL;
    }
}

typedef struct walk_ctx {
    const word *w;
    size_t nw;
    uint64_t walk;
    qm_topic_cb cb;
    void *ctx;
} walk_ctx;

static void walk(qm_tnode *n, size_t i, walk_ctx *wc)
{
    if (n->walk != wc->walk) {
        n->walk = wc->walk;
        memset(n->visited, 0, sizeof n->visited);
    }
    uint64_t bit = (uint64_t)1 << (i & 63);
    if (n->visited[i >> 6] & bit)
        return;
    n->visited[i >> 6] |= bit;

    if (i == wc->nw) {
        for (qm_binding *b = n->bindings; b; b = b->tnext)
            wc->cb(wc->ctx, b);
        if (n->hash)
            walk(n->hash, i, wc); /* "#" matching no word */
        return;
    }
    if (n->children) {
        qm_tnode *c = sl_map_get(n->children, wc->w[i].p, wc->w[i].len);
        if (c)
            walk(c, i + 1, wc);
    }
    if (n->star)
        walk(n->star, i + 1, wc);
    if (n->hash)
        for (size_t j = i; j <= wc->nw; j++) /* "#" taking words i .. j-1 */
            walk(n->hash, j, wc);
}

static uint64_t walks;

void qm_topic_route(const qm_exchange *x, amqp_bytes rk, qm_topic_cb cb, void *ctx)
{
    if (!x->trie)
        return;
    word st[64];
    word *w = rk.len < 63 ? st : sl_xmalloc((rk.len + 2) * sizeof(word));
    size_t nw = split_words((const char *)rk.p, rk.len, w);
    if (nw > TRIE_MAX_WORDS) {
        for (qm_binding *b = x->bindings; b; b = b->next)
            if (qm_topic_match(b->key, b->key_len, (const char *)rk.p, rk.len))
                cb(ctx, b);
    } else {
        walk_ctx wc = {w, nw, ++walks, cb, ctx};
        walk(x->trie, 0, &wc);
    }
    if (w != st)
        sl_free(w);
}
