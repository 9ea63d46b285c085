/* pager.c - list replies (queues, exchanges; bindings, connections, channels, consumers,
 * vhosts: see "Lists without an order of their own" below) that never stall the loop, with
 * RabbitMQ's pagination: page, page_size (default 100, at most 500), name (a case-insensitive
 * substring, or with use_regex=true a caseless PCRE2 pattern), sort (a column, dotted for
 * nested ones), sort_reverse; the reply {"total_count", "item_count", "filtered_count",
 * "page", "page_size", "page_count", "items"}; 400 invalid_pagination_parameters /
 * page_out_of_range / bad_request (not an integer) with RabbitMQ's reasons. Without page the
 * reply is the plain array, and name is ignored (as RabbitMQ does).
 *
 * How the work is bounded (with 100,000 queues one GET /api/queues held every connection for
 * 1.5 s, ten of them for 10.7 s):
 *   - Queues and exchanges stay in name order (qm's per-vhost sl_oset), so nothing is sorted
 *     per request. A page in name order is found by rank, O(log n + page_size), and answered
 *     at once.
 *   - A full list is streamed (MHD_create_response_from_callback): each call writes at most
 *     STREAM_ITEMS items after a cursor (vhost and name of the last one written, looked up
 *     again every time, so queues created or deleted meanwhile are simply met or not), as
 *     the socket takes them. Memory is one block per request, not the whole reply.
 *   - A filter or another sort needs every item: a job walks them, PAGER_SLICE_US of CPU per
 *     loop turn for all jobs together, keeping the matches in an sl_oset keyed by the sort
 *     value (so no sort at the end either); the request is suspended meanwhile and answered
 *     from that set (streamed when it is not a page).
 * Items are built when they are written, from the live objects: counts are current, not
 * those of when the request came.
 *
 * The walking itself (cursors, the name filter, sort keys, page arithmetic, the turn's
 * slice, the walks of bindings, vhosts and a door's clients) is protocol-neutral and lives
 * below the doors in node/lister.c; this file renders the items as JSON and answers over
 * HTTP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "http/request.h"
#include "mgmt/mgmt_internal.h"
#include "node/lister.h"

#define STREAM_ITEMS 128    /* items written per call of the stream callback at most */
#define STREAM_BLOCK 65536  /* bytes MHD asks for at a time */
#define PAGER_SLICE_US 3000 /* CPU for all jobs in one loop turn */

_Static_assert((int)PAGER_QUEUES == (int)NODE_LIST_QUEUES &&
                   (int)PAGER_EXCHANGES == (int)NODE_LIST_EXCHANGES,
               "the pager's first kinds are the lister's");
_Static_assert(PAGER_CHANNELS - PAGER_CONNECTIONS == NODE_WALK_CHANNELS - NODE_WALK_CONNECTIONS &&
                   PAGER_CONSUMERS - PAGER_CONNECTIONS ==
                       NODE_WALK_CONSUMERS - NODE_WALK_CONNECTIONS,
               "the pager's client kinds are the walk's, in order");
_Static_assert(PAGER_STREAM_CONSUMERS - PAGER_CONNECTIONS ==
                   NODE_WALK_SUBSCRIPTIONS - NODE_WALK_CONNECTIONS,
               "and the stream ones too");

/* ------------------------------------------------------------------------------------------
 * Items
 */

static json_t *item_json(mgmt *m, int kind, void *item)
{
    return kind == PAGER_QUEUES ? mgmt_queue_json(m, item, 0) : mgmt_exchange_json(item);
}

/* ------------------------------------------------------------------------------------------
 * Sort keys of JSON values (node/lister.c's order)
 */

typedef node_match match;

/* The value at a dotted path ("message_stats.publish"), or NULL. */
static void encode_sort_value(sl_buf *b, json_t *v)
{
    if (json_is_number(v))
        node_sortkey_number(b, json_number_value(v));
    else if (json_is_boolean(v))
        node_sortkey_bool(b, json_is_true(v));
    else if (json_is_string(v))
        node_sortkey_string(b, json_string_value(v), json_string_length(v));
    else
        node_sortkey_none(b); /* absent or null */
}

/* ------------------------------------------------------------------------------------------
 * Requests
 */

typedef struct pager {
    mgmt *m;
    req *r; /* NULL once the request is gone (the job then just ends) */
    node_cursor cur;
    char *cols; /* columns= */
    /* pagination */
    int paged;
    long page, page_size;
    char *sort; /* column, or NULL for name order */
    node_filter flt;
    /* job state */
    int job;                  /* walking everything into matches */
    sl_oset matches;          /* of match */
    uint64_t total, filtered; /* items seen, items matching */
    node_job nj;              /* in m->jobs while it walks (node/lister.c) */
    /* lists without an order of their own (mgmt_pager_list_scoped): the scope and the walk */
    int generic;
    int s_empty;
    node_client_walk cw;  /* connections, channels, consumers: the scope and the place */
    size_t w_vi;          /* vhost lists: the index of the vhost being walked */
    node_binding_walk bw; /* bindings: the scope and the place (node/lister.c) */
    uint64_t seq;         /* ends every key: two equal items stay two */
    sl_buf texts;         /* the matches' texts: an sl_buf, so the memory alarm counts them */
    /* a peek (GET /api/queues/{vhost}/{name}/messages): not a list but the same slices */
    int peek;
    node_peek pk; /* the walk (node/lister.c) */
    char *pq_enc;
    int64_t pq_truncate;
    json_t *pq_arr;
    /* streaming (http_response_stream) */
    int started;
    uint64_t nitems; /* items written */
    sl_onode *from;  /* streaming from matches: the next one */
} pager;

static void pager_free(pager *p)
{
    node_cursor_free(&p->cur);
    sl_free(p->cols);
    sl_free(p->sort);
    node_filter_free(&p->flt);
    node_matches_free(&p->matches);
    sl_buf_free(&p->texts);
    node_client_walk_free(&p->cw);
    node_binding_walk_free(&p->bw);
    if (p->peek)
        node_peek_free(&p->pk);
    sl_free(p->pq_enc);
    if (p->pq_arr)
        json_decref(p->pq_arr);
    sl_free(p);
}

static char *item_text(pager *p, void *item)
{
    json_t *j = item_json(p->m, p->cur.kind, item);
    if (p->cols && *p->cols)
        defs_json_filter_columns(j, p->cols);
    char *t = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return t;
}

static void append_item(pager *p, sl_buf *out, void *item)
{
    char *t = item_text(p, item);
    if (!t)
        return;
    if (p->nitems++)
        sl_buf_put_u8(out, ',');
    sl_buf_append(out, t, strlen(t));
    free(t);
}

/* The next item to stream: from the live order, or from a job's matches. */
static void *stream_next(pager *p)
{
    if (!p->job)
        return node_cursor_next(p->m->n->qm, &p->cur);
    return node_matches_next_item(p->m->n->qm, p->cur.kind, &p->from, p->cur.reverse);
}

/* The next match's text into out (the match goes: the reply shrinks as it is sent); 0 at
 * the end. */
static int stream_text(pager *p, sl_buf *out)
{
    if (!p->from)
        return 0;
    match *mt = SL_ONODE_OWNER(p->from, match, node);
    p->from = p->cur.reverse ? sl_oset_prev(p->from) : sl_oset_next(p->from);
    if (p->nitems++)
        sl_buf_put_u8(out, ',');
    sl_buf_append(out, p->texts.data + mt->text_at, mt->text_len);
    sl_oset_remove(&p->matches, &mt->node);
    sl_free(mt);
    return 1;
}

/* The next items of the stream (http_response_stream's producer): '[' first, at most
 * STREAM_ITEMS items, ']' after the last; 0 then. */
static int stream_more(void *ctx, sl_buf *out, size_t want)
{
    pager *p = ctx;
    if (!p->started) {
        sl_buf_put_u8(out, '[');
        p->started = 1;
    }
    for (int k = 0; k < STREAM_ITEMS && sl_buf_unread(out) < want; k++) {
        void *it = NULL;
        if (p->generic ? !stream_text(p, out) : !(it = stream_next(p))) {
            sl_buf_put_u8(out, ']');
            return 0;
        }
        if (it)
            append_item(p, out, it);
    }
    return 1;
}

static void stream_free(void *cls)
{
    pager_free(cls);
}

static enum MHD_Result reply_stream(req *r, pager *p)
{
    p->r = NULL; /* MHD holds it from here; it frees it at the end of the response */
    struct MHD_Response *resp = http_response_stream(STREAM_BLOCK, stream_more, p, stream_free,
                                                     "application/json", "no-cache");
    enum MHD_Result rc = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    r->responded = 1;
    return rc;
}

/* {"total_count", ...}: the page's items, from the live order or from the job's matches. */
static enum MHD_Result reply_page(req *r, pager *p)
{
    uint64_t filtered = p->job ? sl_oset_count(&p->matches) : p->total;
    long page_count = node_page_count(filtered, p->page_size);
    uint64_t offset = node_page_offset(p->page, p->page_size);
    if (offset > filtered) {
        enum MHD_Result rc = mgmt_reply_error(
            r, 400, "page_out_of_range", "Page out of range, page: %ld page size: %ld, len: %llu",
            p->page, p->page_size, (unsigned long long)filtered);
        pager_free(p);
        return rc;
    }
    if (p->generic) {
        /* the items are texts already: the reply is written around them */
        sl_buf out;
        sl_buf_init(&out);
        char head[256];
        sl_onode *n = node_matches_at(&p->matches, offset, p->cur.reverse);
        uint64_t ni =
            filtered - offset < (uint64_t)p->page_size ? filtered - offset : (uint64_t)p->page_size;
        int hl = snprintf(head, sizeof head,
                          "{\"total_count\":%llu,\"item_count\":%llu,\"filtered_count\":%llu,"
                          "\"page\":%ld,\"page_size\":%ld,\"page_count\":%ld,\"items\":[",
                          (unsigned long long)p->total, (unsigned long long)ni,
                          (unsigned long long)filtered, p->page, p->page_size, page_count);
        sl_buf_append(&out, head, (size_t)hl);
        for (uint64_t k = 0; n && k < ni; k++) {
            match *mt = SL_ONODE_OWNER(n, match, node);
            if (k)
                sl_buf_put_u8(&out, ',');
            sl_buf_append(&out, p->texts.data + mt->text_at, mt->text_len);
            n = p->cur.reverse ? sl_oset_prev(n) : sl_oset_next(n);
        }
        sl_buf_append(&out, "]}", 2);
        pager_free(p);
        size_t len = out.len;
        char *text = malloc(len + 1); /* MHD frees it */
        if (!text) {
            sl_buf_free(&out);
            return mgmt_reply_error(r, 503, "service_unavailable", "out of memory");
        }
        memcpy(text, out.data, len);
        text[len] = 0;
        sl_buf_free(&out);
        return mgmt_reply_text(r, 200, "application/json", text, len);
    }
    json_t *items = json_array();
    if (p->job) {
        sl_onode *n = node_matches_at(&p->matches, offset, p->cur.reverse);
        void *it;
        for (long k = 0; k < p->page_size && (it = node_matches_next_item(p->m->n->qm, p->cur.kind,
                                                                          &n, p->cur.reverse));
             k++)
            json_array_append_new(items, item_json(p->m, p->cur.kind, it));
    } else {
        /* name order: the first by rank, the rest after it */
        void *first = offset < filtered ? node_cursor_seek(p->m->n->qm, &p->cur, offset) : NULL;
        if (first) {
            json_array_append_new(items, item_json(p->m, p->cur.kind, first));
            for (long k = 1; k < p->page_size; k++) {
                void *it = node_cursor_next(p->m->n->qm, &p->cur);
                if (!it)
                    break;
                json_array_append_new(items, item_json(p->m, p->cur.kind, it));
            }
        }
    }
    size_t ni = json_array_size(items);
    if (p->cols && *p->cols) {
        size_t i;
        json_t *v;
        json_array_foreach(items, i, v) defs_json_filter_columns(v, p->cols);
    }
    json_t *o = json_object();
    json_object_set_new(o, "total_count", json_integer((json_int_t)p->total));
    json_object_set_new(o, "item_count", json_integer((json_int_t)ni));
    json_object_set_new(o, "filtered_count", json_integer((json_int_t)filtered));
    json_object_set_new(o, "page", json_integer(p->page));
    json_object_set_new(o, "page_size", json_integer(p->page_size));
    json_object_set_new(o, "page_count", json_integer(page_count));
    json_object_set_new(o, "items", items);
    pager_free(p);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return mgmt_reply_text(r, 200, "application/json", text, strlen(text));
}

/* ------------------------------------------------------------------------------------------
 * Jobs: walking every item in slices
 */

/* The sort column's value of a queue or exchange (node_matches_collect's key). */
static void sort_key(void *ctx, void *item, sl_buf *key)
{
    pager *p = ctx;
    json_t *j = item_json(p->m, p->cur.kind, item);
    encode_sort_value(key, defs_json_path(j, p->sort));
    json_decref(j);
}

static void job_step(pager *p, uint64_t until)
{
    if (node_matches_collect(p->m->n->qm, &p->cur, &p->flt, &p->matches, &p->total,
                             p->sort ? sort_key : NULL, p, until))
        p->job = 2; /* walked */
}

/* A message of a peek, as /get shows it. */
static void peek_visit(void *ctx, const qm_position *pos, uint64_t remaining)
{
    pager *p = ctx;
    json_array_append_new(p->pq_arr,
                          mgmt_msg_view(pos, NULL, p->pq_enc, p->pq_truncate, remaining));
}

static void peek_step(pager *p, uint64_t until)
{
    if (node_peek_step(p->m->n->qm, &p->pk, until))
        p->job = 2;
}

/* ------------------------------------------------------------------------------------------
 * Lists without an order of their own: bindings, connections, channels, consumers, vhosts.
 *
 * Nothing keeps these in an order a cursor could follow, so a job always walks the whole
 * scope, PAGER_SLICE_US per turn, and keeps each match as its text (in one sl_buf per
 * request, which the memory alarm counts), made while the item is at hand (the item itself
 * may be gone by the next turn), keyed like the queues' matches: the sort column, then the
 * list's default columns (RabbitMQ's default sort), then a sequence number (not for
 * bindings and consumers: their default columns name them, so one walked twice is kept
 * once). A page is then found by rank; a full list is streamed from the matches, each freed
 * as it is written. The walk resumes between turns by what does not move (node/lister.c):
 *   - connections are newest first (ids decrease): the id being walked, and the next channel
 *     slot in it (and in that channel the tag of the last consumer walked); a connection
 *     closed meanwhile is simply not met again (node_walk_clients);
 *   - bindings per vhost: the default exchange's (one per queue, in queue_order) after the
 *     last queue walked, then the exchanges' (in exchange_order) after the last exchange
 *     walked, inside an exchange after the last binding walked (node_walk_bindings);
 *   - vhosts: their names, taken when the request came.
 * The counts are those of when each item was walked.
 */

static const char *const default_cols[][6] = {
    [PAGER_BINDINGS] = {"vhost", "source", "destination", "destination_type", "routing_key",
                        "properties_key"},
    [PAGER_CONNECTIONS] = {"vhost", "name"},
    [PAGER_CHANNELS] = {"vhost", "name"},
    [PAGER_CONSUMERS] = {"queue.vhost", "queue.name", "channel_details.name", "consumer_tag",
                         "channel_details.connection_name"},
    [PAGER_STREAM_PUBLISHERS] = {"queue.vhost", "queue.name", "connection_details.name"},
    [PAGER_STREAM_CONSUMERS] = {"queue.vhost", "queue.name", "connection_details.name"},
    [PAGER_VHOSTS] = {"name"},
};

/* What name= is matched against (any of them): lists without a name use what names them. */
static const char *const name_cols[][3] = {
    [PAGER_BINDINGS] = {"source", "destination", "routing_key"},
    [PAGER_CONNECTIONS] = {"name"},
    [PAGER_CHANNELS] = {"name"},
    [PAGER_CONSUMERS] = {"consumer_tag"},
    [PAGER_STREAM_PUBLISHERS... PAGER_STREAM_CONSUMERS] = {"queue.name"},
    [PAGER_VHOSTS] = {"name"},
};

static int generic_match(pager *p, json_t *j)
{
    if (!node_filter_active(&p->flt))
        return 1;
    for (int i = 0; i < 3 && name_cols[p->cur.kind][i]; i++) {
        json_t *v = defs_json_path(j, name_cols[p->cur.kind][i]);
        if (node_filter_match(&p->flt, json_is_string(v) ? json_string_value(v) : ""))
            return 1;
    }
    return 0;
}

static int put_text(const char *buf, size_t size, void *data)
{
    sl_buf_append(data, buf, size);
    return 0;
}

/* One item of the scope (j taken): counted, and kept when it matches. */
static void visit(pager *p, json_t *j)
{
    p->total++;
    if (!generic_match(p, j)) {
        json_decref(j);
        return;
    }
    sl_buf key;
    sl_buf_init(&key);
    if (p->sort)
        encode_sort_value(&key, defs_json_path(j, p->sort));
    for (int i = 0; i < 6 && default_cols[p->cur.kind][i]; i++)
        encode_sort_value(&key, defs_json_path(j, default_cols[p->cur.kind][i]));
    /* a binding is its default columns (properties_key holds its arguments' hash), a
     * consumer too (its tag is unique in its channel): one walked again after its place was
     * lost is the same item, kept once */
    match *mt =
        node_match_keep(&p->matches, &key,
                        p->cur.kind == PAGER_BINDINGS || p->cur.kind == PAGER_CONSUMERS, &p->seq);
    sl_buf_free(&key);
    if (!mt) {
        p->total--; /* counted once */
        json_decref(j);
        return;
    }
    if (p->cols && *p->cols)
        defs_json_filter_columns(j, p->cols);
    mt->text_at = p->texts.len;
    json_dump_callback(j, put_text, &p->texts, JSON_COMPACT);
    json_decref(j);
    mt->text_len = p->texts.len - mt->text_at;
}

static void visit_client(void *ctx, const node_client *c)
{
    pager *p = ctx;
    visit(p, mgmt_conn_json(p->m, c));
}

static void visit_channel(void *ctx, const node_client *c, const node_channel *ch)
{
    pager *p = ctx;
    visit(p, mgmt_channel_json(p->m, c, ch));
}

static void visit_consumer(void *ctx, const node_client *c, const node_channel *ch,
                           const node_consumer *o)
{
    pager *p = ctx;
    visit(p, mgmt_consumer_json(p->m, c, ch, o));
}

static void visit_publisher(void *ctx, const node_client *c, const node_publisher *pb)
{
    visit(ctx, mgmt_stream_json(((pager *)ctx)->m, c, pb, NULL));
}

static void visit_subscription(void *ctx, const node_client *c, const node_subscription *s)
{
    visit(ctx, mgmt_stream_json(((pager *)ctx)->m, c, NULL, s));
}

static void visit_vhost(void *ctx, qm_vhost *vh)
{
    pager *p = ctx;
    visit(p, mgmt_vhost_json(p->m, vh));
}

static void visit_default_binding(void *ctx, qm_queue *q)
{
    visit(ctx, mgmt_default_binding_json(q));
}

static void visit_binding(void *ctx, qm_binding *b)
{
    visit(ctx, mgmt_binding_json(b));
}

static void generic_step(pager *p, uint64_t until)
{
    int done;
    if (p->s_empty)
        done = 1;
    else if (p->cur.kind == PAGER_BINDINGS)
        done = node_walk_bindings(p->m->n->qm, &p->bw, &p->cur, until);
    else if (p->cur.kind == PAGER_VHOSTS)
        done = node_walk_vhosts(p->m->n->qm, &p->cur, &p->w_vi, until, visit_vhost, p);
    else
        done = node_walk_clients(p->m->n, &p->cw, until);
    if (done)
        p->job = 2;
}

/* One slice of a job (node_jobs): 1 once walked (mgmt_pager_resume answers then). */
static int job_slice(node_job *j, uint64_t until)
{
    pager *p = SL_ONODE_OWNER(j, pager, nj);
    if (p->peek)
        peek_step(p, until);
    else if (p->generic)
        generic_step(p, until);
    else
        job_step(p, until);
    return p->job == 2;
}

/* Walked: on_request comes back with mgmt_pager_resume. */
static void job_walked(node_job *j)
{
    mgmt_req_resume(SL_ONODE_OWNER(j, pager, nj)->r);
}

/* The request is held (mgmt_req_suspend) while its job runs, so p->r stays valid until then. */
enum MHD_Result mgmt_pager_resume(req *r)
{
    pager *p = r->pager;
    if (!p) /* the API stopped meanwhile */
        return mgmt_reply_error(r, 503, "service_unavailable", "the management API is stopping");
    r->pager = NULL;
    p->r = NULL;
    if (p->peek) {
        json_t *arr = p->pq_arr;
        p->pq_arr = NULL;
        pager_free(p);
        return mgmt_reply_json(r, 200, arr);
    }
    if (p->paged)
        return reply_page(r, p);
    p->from = p->cur.reverse ? sl_oset_last(&p->matches) : sl_oset_first(&p->matches);
    return reply_stream(r, p);
}

void mgmt_pager_release(req *r)
{
    /* never one still running: a suspended request is held until its job is done */
    if (r->pager) {
        pager_free(r->pager);
        r->pager = NULL;
    }
}

void mgmt_pager_stop_all(mgmt *m)
{
    for (node_job *j = node_jobs_stop(&m->jobs), *next; j; j = next) {
        next = j->next;
        pager *p = SL_ONODE_OWNER(j, pager, nj);
        req *r = p->r;
        r->pager = NULL;
        pager_free(p);
        mgmt_req_resume(r); /* lets go of it: MHD frees it as it stops */
    }
}

void mgmt_pager_init(mgmt *m)
{
    node_jobs_init(&m->jobs, m->n->loop, PAGER_SLICE_US);
}

/* A pager for kind over one vhost (NULL: those the user may list, or sees for vhosts), with
 * the request's parameters; NULL after replying 400 to bad ones. */
static pager *pager_new(req *r, int kind, const char *only_vhost)
{
    mgmt *m = r->m;
    pager *p = sl_xcalloc(1, sizeof *p);
    p->m = m;
    p->cur.kind = kind;
    p->cur.only = only_vhost ? sl_xstrdup(only_vhost) : NULL;
    if (!only_vhost) /* RabbitMQ's filter_vhost; list_visible_vhosts for vhosts */
        node_cursor_listed_vhosts(m->n->qm, m->n->acc, &p->cur, r->user, r->is_admin,
                                  kind == PAGER_VHOSTS);
    const char *cols = mgmt_req_query(r, "columns");
    p->cols = cols && *cols ? sl_xstrdup(cols) : NULL;
    const char *sort = mgmt_req_query(r, "sort");
    /* RabbitMQ's default order is [vhost, name]; sorting queues or exchanges on either is
     * that order (the other lists add the sort column in front of their default order) */
    if (sort && *sort &&
        (kind >= PAGER_BINDINGS || (strcmp(sort, "name") && strcmp(sort, "vhost"))))
        p->sort = sl_xstrdup(sort);
    p->cur.reverse = mgmt_req_query_bool(r, "sort_reverse");
    const char *page = mgmt_req_query(r, "page");
    if (page) {
        const char *ps = mgmt_req_query(r, "page_size");
        int rc = node_page_params(page, ps, &p->page, &p->page_size);
        if (rc < 0) {
            pager_free(p);
            if (rc == -1)
                mgmt_reply_error(r, 400, "bad_request", "Pagination parameters are invalid");
            else
                mgmt_reply_error(r, 400, "invalid_pagination_parameters",
                                 "Invalid pagination parameters: page number %s, page size %s",
                                 page, ps ? ps : "undefined");
            return NULL;
        }
        p->paged = 1;
        char err[256];
        if (node_filter_init(&p->flt, mgmt_req_query(r, "name"),
                             mgmt_req_query_bool(r, "use_regex"), err, sizeof err) < 0) {
            pager_free(p);
            mgmt_reply_error(r, 400, "bad_request", "name: %s", err);
            return NULL;
        }
    }
    return p;
}

/* Everything must be seen first: a job, the request suspended meanwhile. */
static enum MHD_Result start_job(req *r, pager *p)
{
    p->job = 1;
    p->r = r;
    r->pager = p;
    p->nj.step = job_slice;
    p->nj.done = job_walked;
    node_jobs_add(&r->m->jobs, &p->nj);
    mgmt_req_suspend(r, mgmt_pager_resume);
    return MHD_YES;
}

enum MHD_Result mgmt_pager_list(req *r, int kind, const char *only_vhost)
{
    pager *p = pager_new(r, kind, only_vhost);
    if (!p)
        return MHD_YES;
    if (!p->sort && !node_filter_active(&p->flt)) {
        if (!p->paged)
            return reply_stream(r, p);
        p->total = node_cursor_total(r->m->n->qm, &p->cur);
        return reply_page(r, p);
    }
    return start_job(r, p);
}

static char *dup_or_null(const char *s)
{
    return s ? sl_xstrdup(s) : NULL;
}

enum MHD_Result mgmt_pager_list_scoped(req *r, int kind, const pager_scope *s)
{
    pager *p = pager_new(r, kind, s->vhost);
    if (!p)
        return MHD_YES;
    p->generic = 1;
    p->bw.src = dup_or_null(s->source);
    p->bw.dest = dup_or_null(s->dest);
    p->bw.dest_is_queue = s->dest_is_queue;
    p->bw.visit_default = visit_default_binding;
    p->bw.visit = visit_binding;
    p->bw.ctx = p;
    p->s_empty = s->empty;
    if (kind >= PAGER_CONNECTIONS && kind <= PAGER_STREAM_CONSUMERS) {
        node_client_walk_init(&p->cw, kind - PAGER_CONNECTIONS + NODE_WALK_CONNECTIONS);
        p->cw.vhost = dup_or_null(s->vhost);
        p->cw.conn = dup_or_null(s->conn);
        p->cw.protocol = dup_or_null(s->protocol);
        p->cw.stream = dup_or_null(s->stream);
        p->cw.user = sl_xstrdup(r->user ? r->user : "");
        p->cw.monitor = acc_is_monitor(r->m->n->acc, r->user);
        p->cw.admin = r->is_admin;
        p->cw.acc = r->m->n->acc;
        p->cw.visit_client = visit_client;
        p->cw.visit_channel = visit_channel;
        p->cw.visit_consumer = visit_consumer;
        p->cw.visit_publisher = visit_publisher;
        p->cw.visit_subscription = visit_subscription;
        p->cw.ctx = p;
    }
    /* most lists are walked within the first slice, and answered at once (what is left of
     * the turn's slice: a list asked for when it is spent starts as a job, next turn) */
    uint64_t until = node_jobs_slice_end(&r->m->jobs);
    if (sl_now_us() < until)
        generic_step(p, until);
    if (p->job != 2)
        return start_job(r, p);
    if (p->paged)
        return reply_page(r, p);
    p->from = p->cur.reverse ? sl_oset_last(&p->matches) : sl_oset_first(&p->matches);
    return reply_stream(r, p);
}

enum MHD_Result mgmt_pager_peek(req *r, qm_queue *q, long long off, long long count,
                                const char *enc, int64_t truncate)
{
    mgmt *m = r->m;
    pager *p = sl_xcalloc(1, sizeof *p);
    p->m = m;
    p->peek = 1;
    node_peek_init(&p->pk, q, off, count, peek_visit, p);
    p->pq_enc = sl_xstrdup(enc ? enc : "auto");
    p->pq_truncate = truncate;
    p->pq_arr = json_array();
    /* most peeks are done within the first slice, and answer at once */
    peek_step(p, sl_now_us() + PAGER_SLICE_US);
    if (p->job == 2) {
        json_t *arr = p->pq_arr;
        p->pq_arr = NULL;
        pager_free(p);
        return mgmt_reply_json(r, 200, arr);
    }
    return start_job(r, p);
}
