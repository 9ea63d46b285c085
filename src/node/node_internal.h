/* node_internal.h - what the files of src/node/ share and no other room calls: the store's
 * watches, the group commit, TIDY's turn, the tick. */
#ifndef SL_NODE_NODE_INTERNAL_H
#define SL_NODE_NODE_INTERNAL_H

#include "node/node.h"

/* ticket.c */
int node_watch_store(sl_node *n);
void node_unwatch_store(sl_node *n);
/* Commit now (blocking): exits if the store fails; a full disk stalls it. */
void node_commit(sl_node *n, int force);
void node_tidy_turn(sl_node *n);
void node_tidy_timer_start(sl_node *n);
void node_tidy_stop(sl_node *n);

/* alarm.c */
void node_reserve_first(sl_node *n);
/* The tick's look at memory, the disk and the bounded sync. */
void node_alarm_tick(sl_node *n, uint64_t now);

/* vhosts.c */
/* Every part's count / close, summed. */
size_t node_parts_live(const sl_node *n);

#endif
