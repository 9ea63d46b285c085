/* mq.c - the state MSMQ's operations share on this node (mq.h): made when the doors that use
 * it start, freed after they stopped. Freeing closes every handle while the queues still
 * exist, and aborts the transactions opened through a door so their Locked positions go back
 * (the node frees them anyway; aborting keeps the model's invariants until then). While it
 * lives, this node answers other nodes' Get Info for management objects (mgmtobj_remote.c).
 */
#include <stdio.h>

#include "core/mem.h"
#include "mq/handle.h"
#include "mq/mgmtobj.h"
#include "mq/mq.h"

mq_state *mq_new(sl_node *n)
{
    mq_state *mq = sl_xcalloc(1, sizeof *mq);
    mq->n = n;
    mq->run_id = mq_ctx_run_id();
    mq_handles_init(mq);
    mq_mobj_serve_init(mq);
    return mq;
}

void mq_rundown(mq_state *mq, uint64_t now)
{
    mq_ctx_rundown(&mq->handles, now);
}

void mq_free(mq_state *mq)
{
    if (!mq)
        return;
    mq_mobj_serve_stop(mq);
    mq_ctxtab_free(&mq->handles);
    for (size_t i = 0; i < mq->n_txs; i++) {
        qm_tx *tx = qm_tx_find(mq->n->qm, mq->txs[i]);
        if (tx)
            qm_tx_abort(tx);
    }
    for (size_t i = 0; i < mq->n_txs; i++)
        sl_free(mq->tx_owners[i]);
    sl_free(mq->tx_owners);
    sl_free(mq->txs);
    sl_free(mq);
}
