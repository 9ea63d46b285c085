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
    int rc = 0;
    size_t n = p->n_fl_st;
    for (size_t i = 0; i < n; i++)
        if (st_stream_batch_end(p->fl_sts[i], p->fl_st[i]) < 0)
            rc = -1;
    p->n_fl_st = 0;
    for (size_t i = 0; i < p->n_doomed; i++)
        drop(p->doomed[i], p->doomed_deleted[i]);
    p->n_doomed = 0;
    if (n && rc == 0)
        qm_streams_committed(p->node);
    if (rc < 0)
        errno = EIO;
    return rc;
}

void persist_h_stream_appended(void *ctx, qm_queue *q)
{
    (void)q;
    persist_mark_sync(ctx);
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
