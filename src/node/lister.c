/* lister.c - the node's lists walked without stalling the loop (see lister.h): cursors over
 * the per-vhost name orders (qm's sl_oset), the name filter, sort keys, matches, pages, the
 * turn's slice and its jobs, and the resumable walks of vhosts, bindings and a door's clients.
 * The management API's pager (mgmt/pager.c) is its first user; it renders what is walked
 * here.
 *
 * How the work is bounded: queues and exchanges stay in name order, so a page in name order
 * is found by rank, O(log n + page_size), and nothing is sorted per request. Everything else
 * (a filter, another sort, bindings, vhosts) walks its whole scope, a slice of CPU per loop
 * turn, the place kept by names and remembered addresses that are compared, never followed.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "node/lister.h"

#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "access/access.h"
#include "core/clock.h"
#include "core/mem.h"
#include "node/node.h"

#define RE_MATCH_LIMIT 100000u /* the permission patterns' limits (access/pattern.c) */
#define RE_DEPTH_LIMIT 2000u
#define RE_HEAP_LIMIT_KIB 1024u

/* ------------------------------------------------------------------------------------------
 * Pages and slices
 */

long node_page_parse(const char *s, int *bad)
{
    const char *d = s + (*s == '-' || *s == '+');
    if (*d < '0' || *d > '9' || strspn(d, "0123456789") != strlen(d)) {
        *bad = 1;
        return 0;
    }
    errno = 0;
    long v = strtol(s, NULL, 10);
    return errno == ERANGE ? (v < 0 ? -1 : NODE_PAGE_NUMBER_MAX) : v;
}

int node_page_params(const char *page, const char *page_size, long *pg, long *size)
{
    int bad = 0;
    *pg = node_page_parse(page, &bad);
    *size = page_size ? node_page_parse(page_size, &bad) : NODE_PAGE_SIZE_DEFAULT;
    if (bad)
        return -1;
    if (*pg > NODE_PAGE_NUMBER_MAX)
        *pg = NODE_PAGE_NUMBER_MAX;
    return *pg <= 0 || *size <= 0 || *size > NODE_PAGE_SIZE_MAX ? -2 : 0;
}

long node_page_count(uint64_t filtered, long page_size)
{
    return (long)((filtered + (uint64_t)page_size - 1) / (uint64_t)page_size);
}

uint64_t node_page_offset(long page, long page_size)
{
    return (uint64_t)(page - 1) * (uint64_t)page_size;
}

uint64_t node_slice_end(sl_loop *loop, uint64_t *turn, uint64_t *end, uint64_t slice_us)
{
    sl_loop_stats st;
    sl_loop_get_stats(loop, &st);
    if (st.turns != *turn || !*end) {
        *turn = st.turns;
        *end = sl_now_us() + slice_us;
    }
    return *end;
}

int node_slice_over(unsigned *k, uint64_t until)
{
    return (++*k & 15) == 0 && sl_now_us() >= until;
}

/* Every job a step, in list order, while the turn's slice lasts; the rest next turn (the
 * timer fires at once in the next loop turn: input is served in between). */
static void jobs_tick(sl_loop *loop, sl_timer *t)
{
    node_jobs *js = t->data;
    uint64_t until = node_jobs_slice_end(js);
    node_job **pp = &js->head;
    while (*pp && sl_now_us() < until) {
        node_job *j = *pp;
        if (j->step(j, until)) {
            *pp = j->next;
            j->done(j);
            continue;
        }
        pp = &j->next;
    }
    if (js->head)
        sl_timer_start(loop, &js->t, sl_loop_now(loop));
}

void node_jobs_init(node_jobs *js, sl_loop *loop, uint64_t slice_us)
{
    memset(js, 0, sizeof *js);
    js->loop = loop;
    js->slice_us = slice_us;
    sl_timer_init(&js->t, jobs_tick, js);
}

uint64_t node_jobs_slice_end(node_jobs *js)
{
    return node_slice_end(js->loop, &js->turn, &js->end, js->slice_us);
}

void node_jobs_add(node_jobs *js, node_job *j)
{
    j->next = js->head;
    js->head = j;
    if (!sl_timer_armed(&js->t))
        sl_timer_start(js->loop, &js->t, sl_loop_now(js->loop));
}

node_job *node_jobs_stop(node_jobs *js)
{
    node_job *left = js->head;
    js->head = NULL;
    if (js->loop)
        sl_timer_stop(js->loop, &js->t);
    return left;
}

/* ------------------------------------------------------------------------------------------
 * Walking queues or exchanges of one vhost or all, in (vhost, name) order, from a cursor
 */

sl_oset *node_list_order(qm_vhost *vh, int kind)
{
    return kind == NODE_LIST_QUEUES ? &vh->queue_order : &vh->exchange_order;
}

void *node_list_owner(sl_onode *n, int kind)
{
    return kind == NODE_LIST_QUEUES ? (void *)SL_ONODE_OWNER(n, qm_queue, by_name)
                                    : (void *)SL_ONODE_OWNER(n, qm_exchange, by_name);
}

qm_vhost *node_list_vhost_of(int kind, void *item)
{
    return kind == NODE_LIST_QUEUES ? ((qm_queue *)item)->vhost : ((qm_exchange *)item)->vhost;
}

const char *node_list_name_of(int kind, void *item)
{
    return kind == NODE_LIST_QUEUES ? ((qm_queue *)item)->name : ((qm_exchange *)item)->name;
}

void *node_list_find(qm_node *qm, int kind, const char *vhost, const char *name)
{
    qm_vhost *vh = qm_vhost_find(qm, vhost, strlen(vhost));
    if (!vh)
        return NULL;
    return kind == NODE_LIST_QUEUES ? (void *)qm_queue_find(vh, name, strlen(name))
                                    : (void *)qm_exchange_find(vh, name, strlen(name));
}

qm_vhost *node_cursor_next_vhost(qm_node *qm, const node_cursor *c, const char *after)
{
    if (c->only)
        return after ? NULL : qm_vhost_find(qm, c->only, strlen(c->only));
    size_t n = c->n_vhosts;
    for (size_t k = 0; k < n; k++) {
        const char *name = c->vhosts[c->reverse ? n - 1 - k : k];
        int cmp = after ? strcmp(name, after) : 0;
        if (after && !(c->reverse ? cmp < 0 : cmp > 0))
            continue;
        qm_vhost *vh = qm_vhost_find(qm, name, strlen(name));
        if (vh) /* one deleted meanwhile is skipped */
            return vh;
    }
    return NULL;
}

static void cursor_set(node_cursor *c, qm_vhost *vh, sl_onode *n)
{
    if (!c->vhost || strcmp(c->vhost, vh->name)) {
        sl_free(c->vhost);
        c->vhost = sl_xstrdup(vh->name);
    }
    sl_free(c->last);
    c->last = sl_xstrndup(n->key, n->klen);
    c->last_len = n->klen;
}

void *node_cursor_next(qm_node *qm, node_cursor *c)
{
    if (c->done)
        return NULL;
    qm_vhost *vh = c->vhost ? qm_vhost_find(qm, c->vhost, strlen(c->vhost)) : NULL;
    sl_onode *n = NULL;
    if (vh && c->last) {
        sl_oset *s = node_list_order(vh, c->kind);
        if (c->reverse) {
            n = sl_oset_seek(s, c->last, c->last_len, 0);
            n = n ? sl_oset_prev(n) : sl_oset_last(s);
        } else {
            n = sl_oset_seek(s, c->last, c->last_len, 1);
        }
    }
    /* the vhost is done (or gone): the next one that has items */
    const char *after = c->vhost;
    char *hold = NULL;
    while (!n) {
        vh = node_cursor_next_vhost(qm, c, after);
        if (!vh) {
            sl_free(hold);
            c->done = 1;
            return NULL;
        }
        sl_oset *s = node_list_order(vh, c->kind);
        n = c->reverse ? sl_oset_last(s) : sl_oset_first(s);
        sl_free(hold);
        hold = sl_xstrdup(vh->name);
        after = hold;
    }
    sl_free(hold);
    cursor_set(c, vh, n);
    return node_list_owner(n, c->kind);
}

uint64_t node_cursor_total(qm_node *qm, const node_cursor *c)
{
    uint64_t total = 0;
    for (qm_vhost *vh = node_cursor_next_vhost(qm, c, NULL); vh;
         vh = node_cursor_next_vhost(qm, c, vh->name))
        total += sl_oset_count(node_list_order(vh, c->kind));
    return total;
}

void *node_cursor_seek(qm_node *qm, node_cursor *c, uint64_t offset)
{
    /* name order: skip whole vhosts by their counts, then the rest by rank */
    uint64_t skip = offset;
    qm_vhost *vh = node_cursor_next_vhost(qm, c, NULL);
    while (vh && skip >= sl_oset_count(node_list_order(vh, c->kind))) {
        skip -= sl_oset_count(node_list_order(vh, c->kind));
        vh = node_cursor_next_vhost(qm, c, vh->name);
    }
    if (!vh)
        return NULL;
    sl_oset *s = node_list_order(vh, c->kind);
    size_t cnt = sl_oset_count(s);
    sl_onode *n = sl_oset_select(s, c->reverse ? cnt - 1 - skip : skip);
    cursor_set(c, vh, n);
    return node_list_owner(n, c->kind);
}

void node_cursor_listed_vhosts(qm_node *qm, const acc_db *acc, node_cursor *c, const char *user,
                               int admin, int of_vhosts)
{
    size_t n;
    void **v = sl_map_sorted(qm->vhosts, &n);
    int all = of_vhosts ? acc_is_monitor(acc, user) : admin;
    c->vhosts = sl_xcalloc(n + 1, sizeof *c->vhosts);
    for (size_t i = 0; i < n; i++) {
        const char *name = ((qm_vhost *)v[i])->name;
        if (all || acc_vhost_visible(acc, user, name))
            c->vhosts[c->n_vhosts++] = sl_xstrdup(name);
    }
    sl_free(v);
}

size_t node_cursor_n_vhosts(const node_cursor *c)
{
    return c->only ? 1 : c->n_vhosts;
}

const char *node_cursor_vhost_at(const node_cursor *c, size_t i)
{
    return c->only ? c->only : c->vhosts[i];
}

void node_cursor_free(node_cursor *c)
{
    for (size_t i = 0; i < c->n_vhosts; i++)
        sl_free(c->vhosts[i]);
    sl_free(c->vhosts);
    sl_free(c->only);
    sl_free(c->vhost);
    sl_free(c->last);
}

/* ------------------------------------------------------------------------------------------
 * The name filter
 */

static pcre2_match_context *re_ctx;
static pcre2_match_data *re_data;

int node_filter_init(node_filter *f, const char *name, int use_regex, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    if (!name || !*name)
        return 0;
    if (!use_regex) {
        f->text = sl_xstrdup(name);
        for (char *p = f->text; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
        return 0;
    }
    if (!re_ctx) {
        re_ctx = pcre2_match_context_create(NULL);
        pcre2_set_match_limit(re_ctx, RE_MATCH_LIMIT);
        pcre2_set_depth_limit(re_ctx, RE_DEPTH_LIMIT);
        pcre2_set_heap_limit(re_ctx, RE_HEAP_LIMIT_KIB);
        re_data = pcre2_match_data_create(1, NULL);
    }
    int code;
    PCRE2_SIZE off;
    f->re =
        pcre2_compile((PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, PCRE2_CASELESS, &code, &off, NULL);
    if (!f->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, errlen, "invalid regular expression at offset %zu: %s", (size_t)off,
                 (const char *)msg);
        return -1;
    }
    return 0;
}

int node_filter_active(const node_filter *f)
{
    return f->text || f->re;
}

int node_filter_match(const node_filter *f, const char *s)
{
    if (f->re)
        /* a pattern that hits its limits matches nothing (and costs at most the limits) */
        return pcre2_match(f->re, (PCRE2_SPTR)s, strlen(s), 0, 0, re_data, re_ctx) >= 0;
    if (!f->text)
        return 1;
    size_t n = strlen(f->text), len = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (!strncasecmp(s + i, f->text, n))
            return 1;
    return 0;
}

void node_filter_free(node_filter *f)
{
    sl_free(f->text);
    if (f->re)
        pcre2_code_free(f->re);
}

/* ------------------------------------------------------------------------------------------
 * Sort keys and matches: an sl_oset keyed by an encoding that sorts as RabbitMQ sorts
 * ([sort column, default columns...]: a missing value first, then numbers, then strings),
 * followed, for queues and exchanges, by vhost NUL name for ties and for finding the item
 * again.
 */

void node_sortkey_u64(sl_buf *b, uint64_t v)
{
    sl_buf_put_u64(b, v); /* big endian: the bytes sort as the numbers do */
}

void node_sortkey_none(sl_buf *b)
{
    sl_buf_put_u8(b, 0); /* "nothing" first, as RabbitMQ's 0 default */
}

/* A number as 8 bytes whose byte order is the numbers' order. */
void node_sortkey_number(sl_buf *b, double d)
{
    sl_buf_put_u8(b, 1);
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    bits = (bits >> 63) ? ~bits : bits | (1ull << 63);
    node_sortkey_u64(b, bits);
}

void node_sortkey_bool(sl_buf *b, int v)
{
    sl_buf_put_u8(b, 2);
    sl_buf_put_u8(b, (uint8_t) !!v);
}

void node_sortkey_string(sl_buf *b, const char *s, size_t len)
{
    sl_buf_put_u8(b, 3);
    /* NUL-free in names; a 0 byte in other strings would only blur the order */
    sl_buf_append(b, s, len);
    sl_buf_put_u8(b, 0);
}

node_match *node_match_new(const sl_buf *key, size_t vhost_at, size_t name_at)
{
    node_match *mt = sl_xmalloc(sizeof *mt + key->len);
    memcpy(mt->key, key->data, key->len);
    mt->len = (uint32_t)key->len;
    mt->vhost_at = (uint32_t)vhost_at;
    mt->name_at = (uint32_t)name_at;
    mt->text_at = mt->text_len = 0;
    return mt;
}

void node_match_add_item(sl_oset *s, sl_buf *key, int kind, void *item)
{
    const char *vn = node_list_vhost_of(kind, item)->name;
    const char *name = node_list_name_of(kind, item);
    size_t vhost_at = key->len;
    sl_buf_append(key, vn, strlen(vn) + 1);
    size_t name_at = key->len;
    sl_buf_append(key, name, strlen(name) + 1);
    node_match *mt = node_match_new(key, vhost_at, name_at);
    sl_oset_insert(s, &mt->node, mt->key, mt->len);
}

int node_match_has(const sl_oset *s, const sl_buf *key)
{
    sl_onode *e = sl_oset_seek(s, (const char *)key->data, key->len, 0);
    return e && e->klen == key->len && !memcmp(e->key, key->data, key->len);
}

node_match *node_match_keep(sl_oset *s, sl_buf *key, int dedupe, uint64_t *seq)
{
    if (dedupe && node_match_has(s, key))
        return NULL;
    if (!dedupe)
        node_sortkey_u64(key, (*seq)++);
    node_match *mt = node_match_new(key, 0, 0);
    sl_oset_insert(s, &mt->node, mt->key, mt->len);
    return mt;
}

void node_matches_free(sl_oset *s)
{
    sl_onode *n;
    while ((n = s->root)) {
        sl_oset_remove(s, n);
        sl_free(SL_ONODE_OWNER(n, node_match, node));
    }
}

sl_onode *node_matches_at(sl_oset *s, uint64_t offset, int reverse)
{
    uint64_t n = sl_oset_count(s);
    if (offset >= n)
        return NULL;
    return sl_oset_select(s, reverse ? (size_t)(n - offset - 1) : (size_t)offset);
}

void *node_matches_next_item(qm_node *qm, int kind, sl_onode **at, int reverse)
{
    while (*at) {
        node_match *mt = SL_ONODE_OWNER(*at, node_match, node);
        *at = reverse ? sl_oset_prev(*at) : sl_oset_next(*at);
        void *it = node_list_find(qm, kind, mt->key + mt->vhost_at, mt->key + mt->name_at);
        if (it)
            return it;
    }
    return NULL;
}

int node_matches_collect(qm_node *qm, node_cursor *c, const node_filter *f, sl_oset *s,
                         uint64_t *total, void (*sortkey)(void *ctx, void *item, sl_buf *key),
                         void *ctx, uint64_t until)
{
    int done = 0;
    sl_buf key;
    sl_buf_init(&key);
    for (unsigned k = 0;; k++) {
        if ((k & 31) == 31 && sl_now_us() >= until)
            break;
        void *it = node_cursor_next(qm, c);
        if (!it) {
            done = 1;
            break;
        }
        (*total)++;
        if (!node_filter_match(f, node_list_name_of(c->kind, it)))
            continue;
        key.len = key.off = 0;
        if (sortkey)
            sortkey(ctx, it, &key);
        node_match_add_item(s, &key, c->kind, it);
    }
    sl_buf_free(&key);
    return done;
}

/* ------------------------------------------------------------------------------------------
 * Walks in slices: vhosts (by the names taken when the walk began) and bindings (per vhost:
 * the default exchange's, one per queue in queue_order, after the last queue walked; then
 * the exchanges', in exchange_order, after the last exchange walked, and inside an exchange
 * after the last binding walked).
 */

int node_walk_vhosts(qm_node *qm, const node_cursor *c, size_t *vi, uint64_t until,
                     void (*visit)(void *ctx, qm_vhost *vh), void *ctx)
{
    for (unsigned k = 0; *vi < node_cursor_n_vhosts(c); (*vi)++, k++) {
        if (k && sl_now_us() >= until)
            return 0;
        const char *name = node_cursor_vhost_at(c, *vi);
        qm_vhost *vh = qm_vhost_find(qm, name, strlen(name));
        if (vh) /* one deleted meanwhile is skipped */
            visit(ctx, vh);
    }
    return 1;
}

static const char *dest_name(const qm_binding *b)
{
    return b->dest_queue ? b->dest_queue->name : b->dest_exchange->name;
}

/* x's bindings after the last one walked (all of them when x is new to the walk); 0 when the
 * turn's slice ran out, the place kept: the last binding walked, found again next time by
 * address and then checked by key and destination (an address alone may have been reused).
 * When it is gone, x is walked again from its first binding: the visitor deduplicates, so
 * nothing is listed twice. */
static int visit_exchange(node_binding_walk *w, qm_exchange *x, uint64_t until, unsigned *k)
{
    qm_binding *b = x->bindings;
    if (w->inx) {
        qm_binding *f = x->bindings;
        while (f && !(f == w->b && !strcmp(f->key, w->bkey) && !strcmp(dest_name(f), w->bdest)))
            f = f->next;
        b = f ? f->next : x->bindings;
    }
    for (qm_binding *prev = NULL; b; prev = b, b = b->next) {
        if (prev && node_slice_over(k, until)) {
            w->inx = 1;
            w->b = prev;
            sl_free(w->bkey);
            sl_free(w->bdest);
            w->bkey = sl_xstrdup(prev->key);
            w->bdest = sl_xstrdup(dest_name(prev));
            return 0;
        }
        if (w->dest) {
            const char *d = w->dest_is_queue ? (b->dest_queue ? b->dest_queue->name : NULL)
                                             : (b->dest_exchange ? b->dest_exchange->name : NULL);
            if (!d || strcmp(d, w->dest))
                continue;
        }
        w->visit(w->ctx, b);
    }
    w->inx = 0;
    return 1;
}

static void set_last(node_binding_walk *w, const sl_onode *n)
{
    sl_free(w->last);
    w->last = sl_xstrndup(n->key, n->klen);
}

int node_walk_bindings(qm_node *qm, node_binding_walk *w, const node_cursor *c, uint64_t until)
{
    unsigned k = 0;
    for (; w->vi < node_cursor_n_vhosts(c); w->vi++) {
        const char *name = node_cursor_vhost_at(c, w->vi);
        qm_vhost *vh = qm_vhost_find(qm, name, strlen(name));
        if (vh && w->phase == 0 && (!w->src || !*w->src) && (!w->dest || w->dest_is_queue)) {
            /* the default exchange's: one per queue, its name as the key */
            if (w->dest) {
                qm_queue *q = qm_queue_find(vh, w->dest, strlen(w->dest));
                if (q && !q->is_subqueue)
                    w->visit_default(w->ctx, q);
            } else {
                sl_onode *n = w->last ? sl_oset_seek(&vh->queue_order, w->last, strlen(w->last), 1)
                                      : sl_oset_first(&vh->queue_order);
                for (unsigned done = 0; n; n = sl_oset_next(n), done++) {
                    if (done && node_slice_over(&k, until))
                        return 0; /* last is the last one visited */
                    qm_queue *q = SL_ONODE_OWNER(n, qm_queue, by_name);
                    if (!q->is_subqueue)
                        w->visit_default(w->ctx, q);
                    set_last(w, n);
                }
            }
        }
        if (vh && w->phase == 0) {
            w->phase = 1;
            sl_free(w->last);
            w->last = NULL;
        }
        if (vh && w->src) {
            qm_exchange *x = *w->src ? qm_exchange_find(vh, w->src, strlen(w->src)) : NULL;
            if (x && !visit_exchange(w, x, until, &k))
                return 0;
        } else if (vh) {
            /* after the last exchange walked; the one partly walked again if it is still
             * there (>= its name) */
            sl_onode *n = w->last
                              ? sl_oset_seek(&vh->exchange_order, w->last, strlen(w->last), !w->inx)
                              : sl_oset_first(&vh->exchange_order);
            if (w->inx && !(n && n->klen == strlen(w->last) && !memcmp(n->key, w->last, n->klen)))
                w->inx = 0; /* it is gone: n is the next one */
            for (; n; n = sl_oset_next(n)) {
                set_last(w, n);
                if (!visit_exchange(w, SL_ONODE_OWNER(n, qm_exchange, by_name), until, &k))
                    return 0;
                if (node_slice_over(&k, until))
                    return 0; /* last is walked whole */
            }
        }
        w->inx = 0;
        w->phase = 0;
        sl_free(w->last);
        w->last = NULL;
    }
    return 1;
}

void node_binding_props_key(const char *key, const uint8_t *args, size_t args_len, char *out,
                            size_t len)
{
    if (!args_len) {
        snprintf(out, len, "%s", *key ? key : "~");
        return;
    }
    uint32_t h = 2166136261u; /* FNV-1a: stable across restarts, enough to tell bindings apart */
    for (size_t i = 0; i < args_len; i++)
        h = (h ^ args[i]) * 16777619u;
    snprintf(out, len, "%s~%08x", key, h);
}

qm_binding *node_binding_find(qm_exchange *src, const qm_queue *dq, const qm_exchange *dx,
                              const char *pk)
{
    for (qm_binding *b = src->bindings; b; b = b->next) {
        if (b->dest_queue != dq || b->dest_exchange != dx)
            continue;
        char k[300];
        node_binding_props_key(b->key, b->args, b->args_len, k, sizeof k);
        if (!strcmp(k, pk))
            return b;
    }
    return NULL;
}

void node_binding_walk_free(node_binding_walk *w)
{
    sl_free(w->src);
    sl_free(w->dest);
    sl_free(w->last);
    sl_free(w->bkey);
    sl_free(w->bdest);
}

/* ------------------------------------------------------------------------------------------
 * A door's clients in slices (lister.h): newest first by id, then channel slots, then
 * consumers after the last tag walked
 */

void node_client_walk_init(node_client_walk *w, int what)
{
    memset(w, 0, sizeof *w);
    w->what = what;
    w->at = UINT64_MAX;
}

int node_client_in_scope(const node_client_walk *w, const node_client *c)
{
    if (!c->listed)
        return 0;
    if (!w->monitor && strcmp(c->user, w->user ? w->user : ""))
        return 0;
    if (w->vhost && strcmp(c->vhost, w->vhost))
        return 0;
    if (w->protocol && (!c->protocol || strcmp(c->protocol, w->protocol)))
        return 0;
    /* a client's consumers (stream publishers, subscriptions) are on its vhost's queues: a
     * listing of queues' names, so only of the vhosts the user may list (monitoring users see
     * connections, not queues) */
    if ((w->what == NODE_WALK_CONSUMERS || w->what >= NODE_WALK_PUBLISHERS) && !w->admin &&
        !(c->vhost[0] && acc_vhost_visible(w->acc, w->user ? w->user : "", c->vhost)))
        return 0;
    return !w->conn || !strcmp(c->name, w->conn);
}

static void forget_ctag(node_client_walk *w)
{
    sl_free(w->ctag);
    w->ctag = NULL;
}

/* The consumer walk of one channel: the slice's clock, and the tag of the last consumer
 * visited (where the walk resumes when the slice runs out). */
typedef struct consumer_walk {
    node_client_walk *w;
    const node_client *c;
    const node_channel *ch;
    uint64_t until;
    unsigned *k;
    int visited; /* one at least in this call: the slice may end before the next */
} consumer_walk;

static int visit_consumer(void *arg, const node_consumer *o)
{
    consumer_walk *cw = arg;
    node_client_walk *w = cw->w;
    if (cw->visited && node_slice_over(cw->k, cw->until))
        return 0; /* w->ctag holds the previous one */
    cw->visited = 1;
    sl_free(w->ctag);
    w->ctag = sl_xstrndup(o->tag, o->tag_len);
    w->ctag_len = o->tag_len;
    if (o->queue)
        w->visit_consumer(w->ctx, cw->c, cw->ch, o);
    return 1;
}

/* The channel's consumers after the last one walked (found again by tag; all of them when
 * there is none, or when it is gone); 0 when the slice ran out, the place kept. */
static int visit_consumers(node_client_walk *w, const node_part *door, const node_client *c,
                           const node_channel *ch, size_t slot, uint64_t until, unsigned *k)
{
    consumer_walk cw = {w, c, ch, until, k, 0};
    char *after = w->ctag;
    w->ctag = NULL;
    int done = door->consumers(door->ctx, c->id, slot, after, after ? w->ctag_len : 0,
                               visit_consumer, &cw);
    if (!w->ctag) /* none visited in this call: resume where it was */
        w->ctag = after;
    else
        sl_free(after);
    if (done)
        forget_ctag(w);
    return done;
}

/* The channels of c from w->slot on; 0 when the slice ran out (w->slot is where to resume). */
static int visit_channels(node_client_walk *w, const node_part *door, const node_client *c,
                          uint64_t until, unsigned *k)
{
    node_channel ch;
    int rc;
    if (!door->channel_at) /* a door without channels (the stream protocol) */
        return 1;
    for (size_t i = w->slot; (rc = door->channel_at(door->ctx, c->id, i, &ch)) >= 0; i++) {
        if (i != w->slot && w->ctag) /* past the channel it was of */
            forget_ctag(w);
        if (node_slice_over(k, until)) {
            w->slot = i;
            return 0;
        }
        if (!rc)
            continue;
        if (w->what == NODE_WALK_CHANNELS) {
            w->visit_channel(w->ctx, c, &ch);
            continue;
        }
        if (!visit_consumers(w, door, c, &ch, i, until, k)) {
            w->slot = i;
            return 0;
        }
    }
    return 1;
}

/* The stream publishers and subscriptions of c (all of them: at most 256 each). */
typedef struct stream_walk {
    node_client_walk *w;
    const node_client *c;
} stream_walk;

static void visit_publisher(void *arg, const node_publisher *p)
{
    stream_walk *sw = arg;
    if (!sw->w->stream || !strcmp(p->stream, sw->w->stream))
        sw->w->visit_publisher(sw->w->ctx, sw->c, p);
}

static void visit_subscription(void *arg, const node_subscription *s)
{
    stream_walk *sw = arg;
    if (!sw->w->stream || !strcmp(s->stream, sw->w->stream))
        sw->w->visit_subscription(sw->w->ctx, sw->c, s);
}

/* A stream subscription as /api/consumers lists it, as RabbitMQ 3.13 does: its reader
 * registers it with rabbit_core_metrics:consumer_created (tag "stream.subid-ID", not
 * exclusive, no ack required, prefetch 0, its properties as arguments, active and
 * rabbit_stream_utils:consumer_activity_status), on the connection's pid for a channel, which
 * the management shows as a channel with no name and number 0 of that connection. */
static void visit_subscription_consumer(void *arg, const node_subscription *s)
{
    stream_walk *sw = arg;
    const qm_consumer *qc = s->qc;
    if (!qc || !qc->queue)
        return;
    char tag[32];
    int n = snprintf(tag, sizeof tag, "stream.subid-%u", s->id);
    /* a group's member stepping down is active until its client answered */
    int active =
        !qc->sac_name || qc->sac_state == QM_SAC_ACTIVE || qc->sac_state == QM_SAC_STEPPING;
    node_channel ch = {.number = 0, .running = 1};
    node_consumer o = {.tag = tag,
                       .tag_len = (size_t)n,
                       .queue = qc->queue,
                       .qc = qc,
                       .active = active,
                       .activity_status = !qc->sac_name ? "up"
                                          : active      ? "single_active"
                                                        : "waiting",
                       .props = s->props,
                       .n_props = s->n_props};
    sw->w->visit_consumer(sw->w->ctx, sw->c, &ch, &o);
}

static void visit_streams(node_client_walk *w, const node_part *door, const node_client *c)
{
    stream_walk sw = {w, c};
    if (w->what == NODE_WALK_CONSUMERS && door->subscriptions)
        door->subscriptions(door->ctx, c->id, visit_subscription_consumer, &sw);
    if (w->what == NODE_WALK_PUBLISHERS && door->publishers)
        door->publishers(door->ctx, c->id, visit_publisher, &sw);
    if (w->what == NODE_WALK_SUBSCRIPTIONS && door->subscriptions)
        door->subscriptions(door->ctx, c->id, visit_subscription, &sw);
}

int node_walk_clients(const sl_node *n, node_client_walk *w, uint64_t until)
{
    unsigned k = 0;
    node_client c;
    const node_part *door = node_client_next(n, w->at, &c);
    if (!door)
        return 1;
    if (c.id != w->at) {
        w->slot = 0; /* the one being walked is gone */
        forget_ctag(w);
    }
    for (;;) {
        if (node_client_in_scope(w, &c)) {
            if (w->what == NODE_WALK_CONNECTIONS) {
                w->visit_client(w->ctx, &c);
            } else if (w->what >= NODE_WALK_PUBLISHERS) {
                visit_streams(w, door, &c);
            } else if (!visit_channels(w, door, &c, until, &k)) {
                w->at = c.id;
                return 0;
            } else if (w->what == NODE_WALK_CONSUMERS) {
                visit_streams(w, door, &c); /* a stream connection's subscriptions */
            }
        }
        w->slot = 0;
        forget_ctag(w);
        w->at = c.id - 1; /* ids start at 1 */
        if (node_slice_over(&k, until))
            return 0;
        if (!(door = node_client_next(n, w->at, &c)))
            return 1;
    }
}

const char *node_client_owner_name(const sl_node *n, const void *owner)
{
    /* exclusive queues are AMQP 0-9-1's: the one door that names their owners */
    for (size_t i = 0; owner && i < n->n_parts; i++)
        if (n->parts[i].owner_name)
            return n->parts[i].owner_name(n->parts[i].ctx, owner);
    return "";
}

void node_client_peer_split(const char *peer, char *host, size_t hl, int *port)
{
    const char *colon = strrchr(peer, ':');
    size_t n = colon ? (size_t)(colon - peer) : strlen(peer);
    snprintf(host, hl, "%.*s", (int)n, peer);
    *port = colon ? atoi(colon + 1) : 0;
}

int node_channel_find(const sl_node *node, const node_client_walk *scope, const char *name,
                      node_client *c, node_channel *ch)
{
    const node_part *door;
    for (uint64_t at = UINT64_MAX; (door = node_client_next(node, at, c)); at = c->id - 1) {
        size_t n = strlen(c->name);
        if (!door->channel_at || !node_client_in_scope(scope, c) || strncmp(name, c->name, n) ||
            strncmp(name + n, " (", 2))
            continue;
        char *end;
        unsigned long id = strtoul(name + n + 2, &end, 10);
        if (end == name + n + 2 || strcmp(end, ")") || id > 65535 ||
            door->channel_at(door->ctx, c->id, id, ch) != 1)
            continue;
        char canon[200]; /* "(01)" does not name channel 1 */
        snprintf(canon, sizeof canon, "%s (%u)", c->name, ch->number);
        if (!strcmp(canon, name))
            return 1;
    }
    return 0;
}

void node_client_walk_free(node_client_walk *w)
{
    sl_free(w->vhost);
    sl_free(w->conn);
    sl_free(w->protocol);
    sl_free(w->stream);
    sl_free(w->user);
    sl_free(w->ctag);
}

/* ------------------------------------------------------------------------------------------
 * A peek in slices
 */

void node_peek_init(node_peek *p, const qm_queue *q, long long off, long long count,
                    void (*visit)(void *ctx, const qm_position *pos, uint64_t remaining), void *ctx)
{
    memset(p, 0, sizeof *p);
    p->vhost = sl_xstrdup(q->vhost->name);
    p->name = sl_xstrdup(q->name);
    p->incarnation = q->incarnation;
    p->off = off;
    p->left = count;
    p->visit = visit;
    p->ctx = ctx;
}

int node_peek_step(qm_node *qm, node_peek *p, uint64_t until)
{
    qm_vhost *vh = qm_vhost_find(qm, p->vhost, strlen(p->vhost));
    qm_queue *q = vh ? qm_queue_find(vh, p->name, strlen(p->name)) : NULL;
    if (!q || q->incarnation != p->incarnation)
        return 1; /* deleted meanwhile: what was seen is the answer */
    for (unsigned k = 0; p->left > 0; k++) {
        if ((k & 7) == 7 && sl_now_us() >= until)
            return 0;
        qm_position view;
        const qm_position *pos = p->seen ? qm_queue_peek_after(q, p->after, &view)
                                         : qm_queue_peek_view(q, (size_t)p->off, &view);
        if (!pos)
            break;
        uint64_t at = (uint64_t)p->off + p->seen;
        p->visit(p->ctx, pos, q->n_ready > at ? q->n_ready - at - 1 : 0);
        p->seen++;
        p->after = pos->lookup_id;
        p->left--;
        if (pos == &view)
            qm_message_unref(view.msg); /* read from the store for this view only */
    }
    return 1;
}

void node_peek_free(node_peek *p)
{
    sl_free(p->vhost);
    sl_free(p->name);
}
