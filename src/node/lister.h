/* lister.h - the node's lists, walked without stalling the loop, for any door that shows
 * them: queues and exchanges in (vhost, name) order from a cursor (a page found by rank),
 * bindings, vhosts and a door's clients (connections, channels, consumers) walked in slices
 * that resume where they stopped, the name filter (a caseless substring, or a caseless PCRE2
 * pattern with bounded cost), sort keys whose byte order is RabbitMQ's sort order, matches
 * kept in that order and paged by rank, page arithmetic, and the loop turn's shared time
 * slice with the jobs that share it.
 *
 * Protocol-neutral: items are qm objects and a door's client views (node/clients.h); what a
 * door makes of them (JSON in mgmt/pager.c) is its own. Invariants: nothing here keeps a
 * pointer to a queue, exchange, binding or client across loop turns (a cursor keeps names, a
 * walk keeps names, ids and tags and compares remembered addresses without following them),
 * so objects created or deleted between slices are simply met or not.
 */
#ifndef SL_NODE_LISTER_H
#define SL_NODE_LISTER_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/oset.h"
#include "net/loop.h"
#include "node/clients.h"
#include "qm/qm.h"

struct acc_db;
struct node_part;
struct sl_node;

/* What a cursor walks (the kinds are the mgmt pager's first two, PAGER_QUEUES/EXCHANGES). */
enum { NODE_LIST_QUEUES, NODE_LIST_EXCHANGES };

/* ---- pages (RabbitMQ's pagination parameters) ---- */
#define NODE_PAGE_SIZE_DEFAULT 100
#define NODE_PAGE_SIZE_MAX 500
#define NODE_PAGE_NUMBER_MAX 1000000000000L /* pages past it are out of range in any list */

/* A page parameter as RabbitMQ reads it (an integer, signed: "-1" is one, " 1" and "1.5"
 * are not); 0 with *bad set otherwise. */
long node_page_parse(const char *s, int *bad);
/* page and page_size (NULL: NODE_PAGE_SIZE_DEFAULT) as RabbitMQ takes them, into *pg and
 * *size: 0; -1 when either is no integer; -2 when out of range (page < 1, page_size not
 * 1..NODE_PAGE_SIZE_MAX). A page past NODE_PAGE_NUMBER_MAX is out of range of any list: it
 * is kept there, so that the offset stays in 64 bits. */
int node_page_params(const char *page, const char *page_size, long *pg, long *size);
/* Pages of page_size over filtered items, and the offset of page's first item. */
long node_page_count(uint64_t filtered, long page_size);
uint64_t node_page_offset(long page, long page_size);

/* ---- the loop turn's slice ---- */
/* The end (sl_now_us) of this loop turn's slice of slice_us, shared by every caller that
 * keeps the same *turn / *end: ten lists asked for in one turn get slice_us together. */
uint64_t node_slice_end(sl_loop *loop, uint64_t *turn, uint64_t *end, uint64_t slice_us);
/* Counts one step in *k: 1 every 16th step once the slice is over. */
int node_slice_over(unsigned *k, uint64_t until);

/* ---- jobs: walks that go on over loop turns, all of them sharing one slice per turn ----
 * A job is stepped until its step says it is done, then handed to done (off the list). A
 * new job starts in the next turn; what its creator did in this turn counts against the
 * same slice (node_jobs_slice_end). */
typedef struct node_job node_job;
struct node_job {
    node_job *next;
    int (*step)(node_job *j, uint64_t until); /* one slice of work: 1 when done */
    void (*done)(node_job *j);                /* once, when step said so */
};

typedef struct node_jobs {
    sl_loop *loop;
    uint64_t slice_us; /* CPU for every job together in one loop turn */
    node_job *head;
    sl_timer t;
    uint64_t turn, end; /* the loop turn of the slice, and its end (node_slice_end) */
} node_jobs;

void node_jobs_init(node_jobs *js, sl_loop *loop, uint64_t slice_us);
/* The end (sl_now_us) of this turn's slice, shared by the jobs and whoever starts one. */
uint64_t node_jobs_slice_end(node_jobs *js);
void node_jobs_add(node_jobs *js, node_job *j);
/* Stops: the timer, and the jobs still running handed back as a list (next) for the
 * caller to let go of; none is stepped or done again. */
node_job *node_jobs_stop(node_jobs *js);

/* ---- queues or exchanges of one vhost or several, in (vhost, name) order ---- */
typedef struct node_cursor {
    int kind;      /* NODE_LIST_QUEUES / NODE_LIST_EXCHANGES */
    char *only;    /* one vhost, or NULL for all those in `vhosts` */
    char **vhosts; /* the vhosts the caller may list, sorted (the caller fills them) */
    size_t n_vhosts;
    int reverse;     /* descending */
    char *vhost;     /* vhost of the last item returned (NULL before the first) */
    char *last;      /* its name */
    size_t last_len; /* names may hold any byte but NUL; lengths kept anyway */
    int done;
} node_cursor;

sl_oset *node_list_order(qm_vhost *vh, int kind);
void *node_list_owner(sl_onode *n, int kind);
qm_vhost *node_list_vhost_of(int kind, void *item);
const char *node_list_name_of(int kind, void *item);
/* One item, looked up again by vhost and name (NULL: it is gone). */
void *node_list_find(qm_node *qm, int kind, const char *vhost, const char *name);

/* The vhost to walk after `after` (NULL = the first), in the cursor's direction; vhosts
 * deleted meanwhile are skipped. */
qm_vhost *node_cursor_next_vhost(qm_node *qm, const node_cursor *c, const char *after);
/* The next item after the cursor (moving the cursor to it), or NULL at the end. */
void *node_cursor_next(qm_node *qm, node_cursor *c);
/* Every item of the cursor's vhosts (their counts). */
uint64_t node_cursor_total(qm_node *qm, const node_cursor *c);
/* The item at rank offset in the cursor's order (the cursor moved to it), or NULL. Whole
 * vhosts are skipped by their counts, the rest found by rank: O(vhosts + log n). */
void *node_cursor_seek(qm_node *qm, node_cursor *c, uint64_t offset);
/* The vhosts user may list into c->vhosts, sorted: RabbitMQ's filter_vhost (administrators
 * every one, others those they have a permission entry on), or for the list of vhosts itself
 * (of_vhosts) its list_visible_vhosts (monitoring users every one too). */
void node_cursor_listed_vhosts(qm_node *qm, const struct acc_db *acc, node_cursor *c,
                               const char *user, int admin, int of_vhosts);
/* The cursor's vhosts as a list: one when `only`, else `vhosts`. */
size_t node_cursor_n_vhosts(const node_cursor *c);
const char *node_cursor_vhost_at(const node_cursor *c, size_t i);
void node_cursor_free(node_cursor *c);

/* ---- the name filter ---- */
typedef struct node_filter {
    char *text; /* substring (lowercase), or NULL */
    void *re;   /* caseless pcre2_code, or NULL */
} node_filter;

/* name NULL or "": matches everything. -1 with err on a pattern that does not compile. */
int node_filter_init(node_filter *f, const char *name, int use_regex, char *err, size_t errlen);
int node_filter_active(const node_filter *f);
/* A pattern that hits its limits (the permission patterns' ones) matches nothing. */
int node_filter_match(const node_filter *f, const char *s);
void node_filter_free(node_filter *f);

/* ---- sort keys: byte order is RabbitMQ's order (nothing, then numbers, booleans,
 * strings) ---- */
void node_sortkey_u64(sl_buf *b, uint64_t v); /* big-endian: for sequence numbers */
void node_sortkey_none(sl_buf *b);            /* absent or null */
void node_sortkey_number(sl_buf *b, double d);
void node_sortkey_bool(sl_buf *b, int v);
void node_sortkey_string(sl_buf *b, const char *s, size_t len);

/* ---- matches: items kept in a set ordered by their sort key ---- */
typedef struct node_match {
    sl_onode node;
    uint32_t vhost_at, name_at; /* offsets in key (queues, exchanges: vhost NUL name NUL) */
    uint32_t len;
    size_t text_at, text_len; /* a door's rendering of the item, kept by the door */
    char key[];
} node_match;

node_match *node_match_new(const sl_buf *key, size_t vhost_at, size_t name_at);
/* key + vhost NUL + name NUL appended, as a match in s (queues, exchanges). */
void node_match_add_item(sl_oset *s, sl_buf *key, int kind, void *item);
/* 1 when s holds a match of exactly this key. */
int node_match_has(const sl_oset *s, const sl_buf *key);
/* A match of key put in s and returned (its text the caller's to set): with dedupe, NULL
 * when s holds one of that key already (an item met twice is kept once); without, *seq
 * (then counted up) ends the key, so that two equal items stay two. */
node_match *node_match_keep(sl_oset *s, sl_buf *key, int dedupe, uint64_t *seq);
void node_matches_free(sl_oset *s);
/* The match at rank offset in the direction (reverse: from the last), or NULL past the end. */
sl_onode *node_matches_at(sl_oset *s, uint64_t offset, int reverse);
/* Queues, exchanges: the item of the first match from *at on that is still there (*at moved
 * past it, in the direction), or NULL at the end. */
void *node_matches_next_item(qm_node *qm, int kind, sl_onode **at, int reverse);
/* A filter or another sort needs every item: walks on from the cursor until the slice ends,
 * counting each item in *total and keeping those whose name passes f in s, keyed by what
 * sortkey writes (NULL: nothing, the name order then) and then their vhost and name. 1 when
 * every item was walked. */
int node_matches_collect(qm_node *qm, node_cursor *c, const node_filter *f, sl_oset *s,
                         uint64_t *total, void (*sortkey)(void *ctx, void *item, sl_buf *key),
                         void *ctx, uint64_t until);

/* ---- vhosts and bindings, walked in slices ---- */
/* The cursor's vhosts from *vi on, each still there met once, until the slice ends; 1 when
 * every one was. */
int node_walk_vhosts(qm_node *qm, const node_cursor *c, size_t *vi, uint64_t until,
                     void (*visit)(void *ctx, qm_vhost *vh), void *ctx);

typedef struct node_binding_walk {
    /* the scope (NULL: no restriction), the walk's own copies */
    char *src;  /* only from this exchange ("" the default one) */
    char *dest; /* only to this queue (dest_is_queue) or exchange */
    int dest_is_queue;
    /* what is met: the default exchange's binding to q, and an exchange's binding */
    void (*visit_default)(void *ctx, qm_queue *q);
    void (*visit)(void *ctx, qm_binding *b);
    void *ctx;
    /* the place */
    size_t vi;           /* the index of the vhost being walked */
    int phase;           /* 0 the default exchange's (by queue), 1 the exchanges' */
    char *last;          /* the name of the last queue or exchange walked in the phase */
    int inx;             /* last is partly walked, up to b (key bkey to bdest) */
    const qm_binding *b; /* compared, never followed: it may be gone */
    char *bkey, *bdest;
} node_binding_walk;

/* Walks on from the place until the slice ends: 1 when every binding of the cursor's vhosts
 * has been met (a binding may be met twice when its place was lost: visitors deduplicate). */
int node_walk_bindings(qm_node *qm, node_binding_walk *w, const node_cursor *vhosts,
                       uint64_t until);
void node_binding_walk_free(node_binding_walk *w);
/* RabbitMQ's properties_key, which names a binding among those with the same source and
 * destination: its routing key ("~" for ""), or with arguments the key, "~" and a hash of
 * them (FNV-1a: stable across restarts). */
void node_binding_props_key(const char *key, const uint8_t *args, size_t args_len, char *out,
                            size_t len);
/* src's binding to dq or dx whose properties_key is pk, or NULL. */
qm_binding *node_binding_find(qm_exchange *src, const qm_queue *dq, const qm_exchange *dx,
                              const char *pk);

/* ---- every door's clients (connections, channels, consumers, stream publishers and
 * subscriptions), walked in slices ----
 * Nothing keeps them in an order a cursor could follow; the walk resumes by what does not
 * move: client ids, the node's over every door, newest first (the id being walked), the next
 * channel slot in it, and in that channel the tag of the last consumer walked. A client closed
 * meanwhile is simply not met again; a consumer may be met twice when its channel's place was
 * lost (the visitor deduplicates). A client's stream publishers and subscriptions (at most
 * 256 each) are met in one step. */
enum {
    NODE_WALK_CONNECTIONS,
    NODE_WALK_CHANNELS,
    NODE_WALK_CONSUMERS,
    NODE_WALK_PUBLISHERS,
    NODE_WALK_SUBSCRIPTIONS
};

typedef struct node_client_walk {
    /* what and the scope (the walk's own copies; NULL: no restriction) */
    int what;       /* NODE_WALK_* */
    char *vhost;    /* only clients in this vhost */
    char *conn;     /* only this client (by name) */
    char *protocol; /* only clients of this protocol (node_client.protocol) */
    char *stream;   /* publishers, subscriptions: only those on this stream */
    char *user;     /* filter_user: a monitor sees every client, others their own */
    int monitor;
    int admin; /* consumers are on queues: of the vhosts user may list (admins: all) */
    const struct acc_db *acc;
    /* what is met (consumers only those on a queue) */
    void (*visit_client)(void *ctx, const node_client *c);
    void (*visit_channel)(void *ctx, const node_client *c, const node_channel *ch);
    void (*visit_consumer)(void *ctx, const node_client *c, const node_channel *ch,
                           const node_consumer *o);
    void (*visit_publisher)(void *ctx, const node_client *c, const node_publisher *p);
    void (*visit_subscription)(void *ctx, const node_client *c, const node_subscription *s);
    void *ctx;
    /* the place */
    uint64_t at; /* the id being walked (UINT64_MAX: from the newest) */
    size_t slot; /* its next channel slot */
    char *ctag;  /* consumers: that channel is partly walked, up to this tag */
    size_t ctag_len;
} node_client_walk;

/* what, from the newest client; the rest of *w zeroed (the caller fills the scope). */
void node_client_walk_init(node_client_walk *w, int what);
/* 1 when a client of the scope may be listed (clients before login, or closing, are not). */
int node_client_in_scope(const node_client_walk *w, const node_client *c);
/* Walks on from the place until the slice ends, over every door's clients: 1 when every
 * client (channel, consumer, publisher, subscription) of the scope has been met. */
int node_walk_clients(const struct sl_node *n, node_client_walk *w, uint64_t until);
void node_client_walk_free(node_client_walk *w);
/* The name of the client that owns an exclusive queue (qm's opaque owner); "" when none. */
const char *node_client_owner_name(const struct sl_node *n, const void *owner);
/* A client's peer ("host:port") as host (at most hl - 1 bytes) and port (0 when none). */
void node_client_peer_split(const char *peer, char *host, size_t hl, int *port);
/* The channel RabbitMQ names "CLIENT (N)" (N canonical: "(01)" names nothing) of a client in
 * scope (its user, monitor: node_client_in_scope), found without listing them all: 1 with
 * *c and *ch (views valid until the door changes), 0 when there is none. */
int node_channel_find(const struct sl_node *n, const node_client_walk *scope, const char *name,
                      node_client *c, node_channel *ch);

/* ---- a peek: a queue's messages from an offset, viewed in slices ---- */
typedef struct node_peek {
    char *vhost, *name; /* the queue, found again every slice */
    uint64_t incarnation;
    uint64_t after;      /* lookup id of the last message viewed */
    long long off, left; /* offset of the first, messages still wanted */
    uint64_t seen;       /* messages viewed */
    /* each message viewed (read from the store for this view when paged out: valid only
     * during the call), with the ready messages after it */
    void (*visit)(void *ctx, const qm_position *pos, uint64_t remaining);
    void *ctx;
} node_peek;

void node_peek_init(node_peek *p, const qm_queue *q, long long off, long long count,
                    void (*visit)(void *ctx, const qm_position *pos, uint64_t remaining),
                    void *ctx);
/* Views messages after the last one viewed until the slice ends (nothing is paged in): 1 when
 * done (count reached, the end of the queue, or the queue deleted meanwhile). */
int node_peek_step(qm_node *qm, node_peek *p, uint64_t until);
void node_peek_free(node_peek *p);

#endif
