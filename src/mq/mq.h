/* mq.h - MSMQ's operations below the doors (issue 45): the state they share on this node.
 *
 * The HTTP API (mgmt/), DCE/RPC (rpc/) and whatever door comes next open queue handles, move
 * messages and begin transactions through mq/; each door only translates its wire to these
 * calls and their sl_err and plain structs back. One mq_state per node, made when the doors
 * that use it start and freed after they stopped; every call runs on the node's loop thread.
 *
 *   mq/caller.h      who asks: a user and whether it is an administrator
 *   mq/ctxtab.h      tables of objects a user opens and names by id (context handles)
 *   mq/formatname.h  MSMQ format names and path names <-> this node's queues
 *   mq/handle.h      queue handles: open (local or a remote proxy), purge, close, rundown
 *   mq/move.h        move between queues and subqueues; transactions a door opened
 */
#ifndef SL_MQ_MQ_H
#define SL_MQ_MQ_H

#include <stddef.h>
#include <stdint.h>

#include "mq/ctxtab.h"
#include "node/node.h"

typedef struct mq_state {
    sl_node *n;
    uint32_t run_id;   /* random, per start: the first 8 hex digits of every id */
    mq_ctxtab handles; /* MSMQ queue handles of every door (handle.c) */
    /* Transactions opened through a door (move.c). Only these may be used, committed or
     * aborted that way: the node's other transactions belong to AMQP channels. */
    uint64_t *txs;
    char **tx_owners; /* the user who began each */
    size_t n_txs, cap_txs;
} mq_state;

/* Made by main before the doors that share it (HTTP, DCE/RPC), freed after they stopped. */
mq_state *mq_new(sl_node *n);
/* Close the handles unused for handle_idle_timeout (the context-handle rundown). */
void mq_rundown(mq_state *mq, uint64_t now);
/* Close every handle (while the queues still exist), abort the open transactions, free. */
void mq_free(mq_state *mq);

#endif
