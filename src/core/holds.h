/* holds.h - output held for the disk: marks on an output stream saying "the bytes from here on
 * wait until store generation G has ended" (persist.h's tickets). Used by AMQP connections
 * (broker/conn.c) and node-to-node links (link/), so a reply or a batch never reaches
 * the wire before what it promises is on disk, while the loop never waits for a sync.
 *
 * Offsets are stream offsets (bytes since the stream began: sent + index among the unread),
 * so they survive the buffer's consuming and compacting. Marks are kept oldest first with
 * non-decreasing generations; a mark whose generation is already covered by the previous one
 * is not added.
 *
 * A soft mark is a wait that may be given up (sl_holds_drop_soft): a delivery waiting for its
 * delivery mark, which a cluster leader below min_insync_replicas stops waiting for. Invariant:
 * every byte a hard mark was asked for stays behind a hard mark at or before it whose
 * generation covers it, so dropping the soft marks never lets out what a hard one holds (a
 * hard mark covered by a soft one makes that one hard).
 */
#ifndef SL_CORE_HOLDS_H
#define SL_CORE_HOLDS_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_hold {
    uint64_t at;  /* stream offset of the first held byte */
    uint64_t gen; /* store generation that must have ended */
    int soft;     /* may be given up (sl_holds_drop_soft) */
} sl_hold;

typedef struct sl_holds {
    sl_hold *v;
    size_t head, len, cap;
} sl_holds;

/* The bytes from stream offset at on wait for gen (a no-op when gen <= done). */
void sl_holds_mark(sl_holds *h, uint64_t at, uint64_t gen, uint64_t done);
/* The same, as a wait that sl_holds_drop_soft may give up. */
void sl_holds_mark_soft(sl_holds *h, uint64_t at, uint64_t gen, uint64_t done);
/* Give up every soft mark; returns how many went. */
size_t sl_holds_drop_soft(sl_holds *h);
/* Drop the marks whose generation has ended. */
void sl_holds_release(sl_holds *h, uint64_t done);
/* How many of the unread bytes (stream offsets sent .. sent + unread) may be sent now. */
size_t sl_holds_avail(const sl_holds *h, uint64_t sent, size_t unread);
void sl_holds_clear(sl_holds *h);
void sl_holds_free(sl_holds *h);

#endif
