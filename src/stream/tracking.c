/* tracking.c - server-side tracking by reference on the stream door: consumers' offsets
 * (StoreOffset, QueryOffset) and publishers' sequences (deduplication, publish.c), and
 * StreamStats.
 *
 * The door only translates: the entries live with the stream queue in the model
 * (qm_stream_track, qm/stream.c), which the store makes durable (R_STREAM_TRACK records,
 * persist/streams.c) and the cluster replicates with the msgs log. So they survive a restart
 * and a failover, and go with the stream (a stream made again under the same name starts with
 * nothing tracked).
 */
#include <string.h>

#include "core/log.h"
#include "store/stream.h"
#include "stream/internal.h"

int stream_track_get(const qm_queue *q, int kind, sp_str ref, uint64_t *v)
{
    if (ref.null)
        return 0;
    const qm_stream_track *t = qm_stream_track_get(q, kind, ref.p, ref.len);
    if (!t)
        return 0;
    *v = t->value;
    return 1;
}

void stream_track_set(qm_queue *q, int kind, sp_str ref, uint64_t v)
{
    if (!ref.null)
        (void)qm_stream_track_set(q, kind, ref.p, ref.len, v);
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
    if (ref.null || !ref.len || ref.len > QM_TRACK_REF_MAX) {
        sl_warn("stream connection %s: StoreOffset with an empty or too long reference", c->name);
        return;
    }
    stream_track_set(q, STREAM_TRACK_OFFSET, ref, m->u.store_offset.offset);
}

void stream_query_offset(stream_conn *c, const sp_cmd *m)
{
    sp_str name = m->u.query_offset.stream;
    uint16_t code = stream_check(c, name, ACC_READ);
    qm_queue *q = code == SP_OK ? stream_find(c, name) : NULL;
    if (code == SP_OK && !q)
        code = SP_STREAM_DOES_NOT_EXIST;
    uint64_t off = 0;
    if (q && !stream_track_get(q, STREAM_TRACK_OFFSET, m->u.query_offset.reference, &off))
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
