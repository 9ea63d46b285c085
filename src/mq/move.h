/* move.h - Move Message (MS-MQDMPR 3.1.7.1.16, MS-MQRR R_MoveMessage) for every door, and
 * the transactions a door opens for moves to run in. The rules are move.c's: which queue a
 * destination names, who may move what, and what the model refuses, each with its sl_err.
 */
#ifndef SL_MQ_MOVE_H
#define SL_MQ_MOVE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "mq/mq.h"
#include "qm/qm.h"

/* ---- transactions opened through a door: they belong to the user who began them ---- */
qm_tx *mq_tx_begin(mq_state *mq, const char *user);
/* user's open transaction id; NULL when there is none (never opened, ended, or another
 * user's: administrators included, as with queue handles). */
qm_tx *mq_tx_get(mq_state *mq, uint64_t id, const char *user);
/* user's open transactions, in the order they began; caller frees the array. */
qm_tx **mq_tx_list(mq_state *mq, const char *user, size_t *n);
/* Commit (*voided: moves whose target was deleted or filled up meanwhile, left in the
 * source) or abort tx, which the door had from mq_tx_get: it is forgotten first. */
sl_err mq_tx_end(mq_state *mq, qm_tx *tx, int commit, uint64_t *voided);

/* ---- a move ---- */
typedef struct mq_move_req {
    const char *user;
    qm_queue *src;
    /* "q2", "q2;sub" (a subqueue, created by the move) or a format name */
    const char *destination;
    const char *dest_vhost; /* NULL: the source's (for a format name: no hint) */
    int by_lookup;          /* 1: the message lookup_id; 0: the first count messages */
    uint64_t lookup_id, count;
    int has_tx; /* run in transaction tx_id (one of user's, mq_tx_get) */
    uint64_t tx_id;
} mq_move_req;

typedef struct mq_move_result {
    uint64_t moved; /* also on SL_ERR_QUEUE_FULL: how many of a count went before */
    qm_queue *dest; /* NULL when the destination was not resolved */
    qm_tx *tx;      /* the transaction it ran in, or NULL */
} mq_move_result;

/* SL_OK, or the error with its reason in why ("" when the model's error says it all). */
sl_err mq_move(mq_state *mq, const mq_move_req *rq, mq_move_result *out, char *why, size_t whylen);

#endif
