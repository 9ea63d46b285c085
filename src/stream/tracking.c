/* tracking.c - server-side tracking by reference on the stream door: consumers' offsets
 * (StoreOffset, QueryOffset) and publishers' sequences (deduplication, publish.c), and
 * StreamStats.
 *
 * One table per door (an sl_map): the key is the stream queue's incarnation (8 octets), the
 * kind ('o' offset, 'p' publisher) and the reference; the value a u64. Keyed by incarnation, a
 * stream deleted and made again under the same name starts with nothing tracked.
 *
 * Limits: the table is in memory only. RabbitMQ writes offsets and sequences into the
 * stream's log (tracking chunks and chunk trailers), so they survive a restart there; here
 * they do not (docs/stream-protocol.md). Entries of a deleted stream stay until the door
 * stops: the table grows with the references clients use, not with messages.
 */
#include <string.h>

#include "core/log.h"
#include "core/map.h"
#include "core/mem.h"
#include "store/stream.h"
#include "stream/internal.h"

/* RabbitMQ's limit for a reference: 255 octets (a shortstr). */
#define MAX_REF 255

static size_t make_key(uint8_t *key, const qm_queue *q, int kind, sp_str ref)
{
    memcpy(key, &q->incarnation, 8);
    key[8] = (uint8_t)kind;
    memcpy(key + 9, ref.p, ref.len);
    return 9 + ref.len;
}

int stream_track_get(stream_door *d, const qm_queue *q, int kind, sp_str ref, uint64_t *v)
{
    if (!d->tracking || ref.null || ref.len > MAX_REF)
        return 0;
    uint8_t key[9 + MAX_REF];
    const uint64_t *p = sl_map_get(d->tracking, key, make_key(key, q, kind, ref));
    if (!p)
        return 0;
    *v = *p;
    return 1;
}

void stream_track_set(stream_door *d, const qm_queue *q, int kind, sp_str ref, uint64_t v)
{
    if (ref.null || ref.len > MAX_REF)
        return;
    if (!d->tracking)
        d->tracking = sl_map_new();
    uint8_t key[9 + MAX_REF];
    size_t klen = make_key(key, q, kind, ref);
    uint64_t *p = sl_map_get(d->tracking, key, klen);
    if (!p) {
        p = sl_xmalloc(sizeof *p);
        sl_map_put(d->tracking, key, klen, p);
    }
    *p = v;
}

void stream_track_free(stream_door *d)
{
    if (!d->tracking)
        return;
    size_t pos = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(d->tracking, &pos, &k, &kl, &v))
        sl_free(v);
    sl_map_free(d->tracking);
    d->tracking = NULL;
}

/* StoreOffset has no answer: a refusal is only logged, as RabbitMQ does. */
void stream_store_offset(stream_conn *c, const sp_cmd *m)
{
    sp_str name = m->u.store_offset.stream, ref = m->u.store_offset.reference;
    if (stream_check(c, name, ACC_READ) != SP_OK)
        return;
    qm_queue *q = stream_find(c, name);
    if (!q) {
        sl_warn("stream connection %s: StoreOffset on stream '%.*s', which does not exist", c->name,
                (int)name.len, (const char *)name.p);
        return;
    }
    if (ref.null || !ref.len || ref.len > MAX_REF) {
        sl_warn("stream connection %s: StoreOffset with an empty or too long reference", c->name);
        return;
    }
    stream_track_set(c->d, q, STREAM_TRACK_OFFSET, ref, m->u.store_offset.offset);
}

void stream_query_offset(stream_conn *c, const sp_cmd *m)
{
    sp_str name = m->u.query_offset.stream;
    uint16_t code = stream_check(c, name, ACC_READ);
    qm_queue *q = code == SP_OK ? stream_find(c, name) : NULL;
    if (code == SP_OK && !q)
        code = SP_STREAM_DOES_NOT_EXIST;
    uint64_t off = 0;
    if (q && !stream_track_get(c->d, q, STREAM_TRACK_OFFSET, m->u.query_offset.reference, &off))
        code = SP_NO_OFFSET;
    sp_cmd r = {.key = SP_QUERY_OFFSET, .response = 1, .version = 1, .corr = m->corr, .code = code};
    r.u.query_offset_resp.offset = off;
    stream_conn_send(c, &r);
}

/* StreamStats as RabbitMQ 3.13 answers it: first_chunk_id, last_chunk_id and
 * committed_chunk_id, each -1 for an empty stream. */
void stream_stream_stats(stream_conn *c, const sp_cmd *m)
{
    sp_str name = m->u.stream_stats.stream;
    uint16_t code = stream_check(c, name, ACC_READ);
    qm_queue *q = code == SP_OK ? stream_find(c, name) : NULL;
    if (code == SP_OK && !q)
        code = SP_STREAM_DOES_NOT_EXIST;
    sp_stat st[3];
    uint32_t n = 0;
    if (q) {
        uint64_t first = st_stream_first(q->stream), end = st_stream_end(q->stream);
        uint64_t last = st_stream_last_chunk(q->stream);
        int empty = first >= end;
        st[n++] = (sp_stat){sp_cstr("first_chunk_id"), empty ? -1 : (int64_t)first};
        st[n++] = (sp_stat){sp_cstr("last_chunk_id"), empty ? -1 : (int64_t)last};
        st[n++] = (sp_stat){sp_cstr("committed_chunk_id"), empty ? -1 : (int64_t)last};
    }
    sp_cmd r = {.key = SP_STREAM_STATS, .response = 1, .version = 1, .corr = m->corr, .code = code};
    r.u.stream_stats_resp.v = st;
    r.u.stream_stats_resp.n = n;
    stream_conn_send(c, &r);
}
