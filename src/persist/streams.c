/* streams.c - the stream queues' logs (store/stream.h) in the node's group commit.
 *
 * A stream's entries are not records of the msgs log: each stream has its own segment files
 * under DATA_DIR/streams/<incarnation>/ (qm/stream.c opens them), so retention can delete a
 * stream's old segments whole. But they are made durable by the same generations: an append
 * marks the open generation as needing a sync (so a publisher confirm waits for it, like one
 * for a persistent message), a generation that syncs takes every stream's pending entries as
 * a batch, the sync thread writes and fdatasyncs them with the logs' batches, and when the
 * generation ends the entries become readable and the streams' retention and dispatch run.
 *
 * Invariants: fl_st[i] is the batch in flight of the stream fl_sts[i] (only while a
 * generation is in flight); a stream whose queue goes while its batch is in flight is kept in
 * doomed until the batch ended, then closed (and its files deleted when the queue was).
 */
#include <errno.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "persist/persist_internal.h"
#include "store/stream.h"

void persist_streams_fail(persist *p)
{
    for (size_t i = 0; i < p->n_fl_st; i++)
        st_stream_batch_fail(p->fl_sts[i], p->fl_st[i]);
    p->n_fl_st = 0;
}

int persist_streams_begin(persist *p)
{
    p->n_fl_st = 0;
    for (qm_queue *q = p->node->streams; q; q = q->st_next) {
        if (!st_stream_pending(q->stream))
            continue;
        st_stream_batch *b;
        if (st_stream_batch_begin(q->stream, &b) < 0) {
            /* a stream that cannot write (a file it could not make, an earlier failure):
             * nothing of this generation may be taken for durable, the store is failed */
            persist_streams_fail(p); /* end the others as failed */
            return -1;
        }
        if (!b)
            continue;
        if (p->n_fl_st == p->cap_fl_st) {
            p->cap_fl_st = p->cap_fl_st ? p->cap_fl_st * 2 : 8;
            p->fl_st = sl_xrealloc(p->fl_st, p->cap_fl_st * sizeof *p->fl_st);
            p->fl_sts = sl_xrealloc(p->fl_sts, p->cap_fl_st * sizeof *p->fl_sts);
        }
        p->fl_st[p->n_fl_st] = b;
        p->fl_sts[p->n_fl_st++] = q->stream;
    }
    return 0;
}

void persist_streams_run(persist *p)
{
    for (size_t i = 0; i < p->n_fl_st; i++)
        st_stream_batch_run(p->fl_st[i]);
}

static void drop(struct st_stream *s, int deleted)
{
    if (deleted)
        st_stream_destroy(s);
    else
        st_stream_close(s);
}

int persist_streams_end(persist *p)
{
    int rc = 0, full = 0;
    size_t n = p->n_fl_st;
    for (size_t i = 0; i < n; i++) {
        int r = st_stream_batch_end(p->fl_sts[i], p->fl_st[i]);
        if (r == -2)
            full = 1; /* out of space: pending again, the generation is not durable */
        else if (r < 0)
            rc = -1;
    }
    p->streams_stalled = full;
    p->n_fl_st = 0;
    for (size_t i = 0; i < p->n_doomed; i++)
        drop(p->doomed[i], p->doomed_deleted[i]);
    p->n_doomed = 0;
    if (n && rc == 0)
        qm_streams_committed(p->node);
    if (rc < 0) {
        errno = EIO;
        return -1;
    }
    if (full) {
        errno = ENOSPC;
        return -2;
    }
    return 0;
}

void persist_h_stream_appended(void *ctx, qm_queue *q, size_t bytes)
{
    persist *p = ctx;
    (void)q;
    p->stream_bytes += bytes; /* the disk's free-space checks count them too */
    persist_mark_sync(p);
}

void persist_h_stream_closing(void *ctx, struct st_stream *s, int deleted)
{
    persist *p = ctx;
    for (size_t i = 0; i < p->n_fl_st; i++) {
        if (p->fl_sts[i] != s)
            continue;
        /* its batch is being written: it goes once the batch has ended */
        if (p->n_doomed == p->cap_doomed) {
            p->cap_doomed = p->cap_doomed ? p->cap_doomed * 2 : 4;
            p->doomed = sl_xrealloc(p->doomed, p->cap_doomed * sizeof *p->doomed);
            p->doomed_deleted =
                sl_xrealloc(p->doomed_deleted, p->cap_doomed * sizeof *p->doomed_deleted);
        }
        p->doomed[p->n_doomed] = s;
        p->doomed_deleted[p->n_doomed++] = (uint8_t)deleted;
        return;
    }
    /* A clean stop closes the queues after the last commit; a closed (not deleted) stream
     * keeps what it had pending all the same. */
    if (!deleted && st_stream_pending(s) && st_stream_commit(s) < 0)
        sl_error("stream %s: cannot write on close", st_stream_dir(s));
    drop(s, deleted);
}

void persist_streams_free(persist *p)
{
    for (size_t i = 0; i < p->n_doomed; i++)
        drop(p->doomed[i], p->doomed_deleted[i]);
    p->n_doomed = 0;
    sl_free(p->fl_st);
    sl_free(p->fl_sts);
    sl_free(p->doomed);
    sl_free(p->doomed_deleted);
}

/* ------------------------------------------------------------------------------------------
 * Tracked references (qm.h qm_stream_track): R_STREAM_TRACK records in the msgs log.
 *
 * A change only marks the entry dirty (qm) and asks for a sync; the record is written when a
 * syncing generation begins (begin_generation), so it lands in the generation that also makes
 * the stream entries appended so far durable, and a publisher storing an offset per message
 * costs one record per generation, not one per call. Each entry's newest record keeps its
 * segment (a reference, dropped when a newer record or the queue's deletion replaces it), so
 * the log never loses it; TIDY writes those in old segments again.
 */

static void track_append(persist *p, qm_stream_track *t)
{
    t->dirty = 0;
    rec_u64(&p->scratch, t->queue->incarnation);
    rec_u8(&p->scratch, t->kind);
    rec_u64(&p->scratch, t->value);
    rec_u64(&p->scratch, t->cover);
    rec_s16(&p->scratch, t->ref, t->ref_len);
    st_loc loc;
    if (persist_msgs_append_dep(p, R_STREAM_TRACK, 1, 0, &loc) < 0)
        return; /* the log is failed: the commit that follows says so */
    st_log_ref(p->msgs, loc.segment);
    if (t->st_logged)
        st_log_unref(p->msgs, t->st_seg);
    t->st_seg = loc.segment;
    t->st_logged = 1;
}

void persist_h_stream_tracked(void *ctx, qm_stream_track *t)
{
    (void)t;
    persist *p = ctx;
    p->need_sync = 1; /* a StoreOffset alone must reach the disk too */
}

void persist_h_stream_untracked(void *ctx, qm_stream_track *t)
{
    persist *p = ctx;
    if (t->st_logged)
        st_log_unref(p->msgs, t->st_seg);
    t->st_logged = 0;
}

void persist_streams_flush_tracking(persist *p)
{
    for (qm_stream_track *t = qm_stream_track_take_dirty(p->node), *nx; t; t = nx) {
        nx = t->dirty_next;
        t->dirty_next = NULL;
        if (t->dirty)
            track_append(p, t);
    }
}

void persist_refresh_stream_tracking(persist *p)
{
    uint32_t cur = st_log_current_segment(p->msgs);
    for (qm_queue *q = p->node->streams; q; q = q->st_next) {
        size_t it = 0;
        qm_stream_track *t;
        while (qm_stream_track_next(q, &it, &t))
            if (t->st_logged && t->st_seg != cur && !t->dirty)
                track_append(p, t); /* a dirty one is written with the next generation */
    }
}

void persist_streams_ref_tracking(persist *p)
{
    for (qm_queue *q = p->node->streams; q; q = q->st_next) {
        size_t it = 0;
        qm_stream_track *t;
        while (qm_stream_track_next(q, &it, &t))
            if (t->st_logged)
                st_log_ref(p->msgs, t->st_seg);
    }
}

typedef struct stashed_track {
    uint64_t inc, value, cover;
    uint32_t seg;
    uint8_t kind, ref_len;
    uint8_t ref[QM_TRACK_REF_MAX];
} stashed_track;

int persist_streams_stash_track(persist *p, sl_map **stash, const uint8_t *payload, size_t len,
                                uint32_t seg)
{
    (void)p;
    rec_reader r = {payload, payload + len, 0};
    uint64_t inc = rd_u64(&r);
    uint8_t kind = rd_u8(&r);
    uint64_t value = rd_u64(&r), cover = rd_u64(&r);
    amqp_bytes ref = rd_s16(&r);
    if (r.bad || r.p != r.end || !ref.len || ref.len > QM_TRACK_REF_MAX ||
        (kind != QM_TRACK_OFFSET && kind != QM_TRACK_PUBLISHER))
        return -1;
    uint8_t key[9 + QM_TRACK_REF_MAX];
    memcpy(key, &inc, 8);
    key[8] = kind;
    memcpy(key + 9, ref.p, ref.len);
    if (!*stash)
        *stash = sl_map_new();
    stashed_track *e = sl_map_get(*stash, key, 9 + ref.len);
    if (!e) { /* the latest record wins: an older one in the map is overwritten */
        e = sl_xcalloc(1, sizeof *e);
        sl_map_put(*stash, key, 9 + ref.len, e);
    }
    e->inc = inc;
    e->kind = kind;
    e->value = value;
    e->cover = cover;
    e->seg = seg;
    e->ref_len = (uint8_t)ref.len;
    memcpy(e->ref, ref.p, ref.len);
    return 0;
}

void persist_streams_restore_tracking(persist *p, sl_map *stash,
                                      qm_queue *(*queue_of)(void *ctx, uint64_t inc), void *ctx)
{
    size_t it = 0, kl;
    const char *k;
    void *v;
    while (stash && sl_map_next(stash, &it, &k, &kl, &v)) {
        stashed_track *e = v;
        qm_queue *q = queue_of(ctx, e->inc); /* NULL: the queue is gone, so is its record */
        if (q && q->stream) {
            /* a publisher's sequence stands for entries the stream must hold: a crash that
             * kept the record but not every entry below cover drops it (a republish is then
             * taken again: a duplicate, never a loss) */
            if (e->kind == QM_TRACK_PUBLISHER && st_stream_next(q->stream) < e->cover)
                sl_warn("%s: stream '%s': publisher '%.*s''s sequence %llu dropped: the "
                        "stream ends at %llu, before the %llu entries it covers",
                        p->dir, q->name, (int)e->ref_len, (const char *)e->ref,
                        (unsigned long long)e->value, (unsigned long long)st_stream_next(q->stream),
                        (unsigned long long)e->cover);
            else {
                qm_stream_track *t =
                    qm_stream_track_restore(q, e->kind, e->ref, e->ref_len, e->value, e->cover);
                if (t) {
                    t->st_seg = e->seg;
                    t->st_logged = 1;
                }
            }
        }
        sl_free(e);
    }
    sl_map_free(stash);
}
