/* leader.h - the node's side of the cluster while it leads (issue 31; moved out of the AMQP
 * door by issue 45). A node with cluster settings runs its queue model only while it leads
 * (cluster/node.h: followers run none). main() calls, on a promoted node (sl_node.cl_node
 * set): cl_leader_mirror before node_open, cl_leader_adopt once the doors listen;
 * the node stops the rest through the "cluster" part the first one adds. The doors ask
 * whether they may serve (cl_leader_refuses) and the HTTP API hands leadership over
 * (cl_leader_handover).
 *
 * Everything here runs on the node's loop.
 */
#ifndef SL_CLUSTER_LEADER_H
#define SL_CLUSTER_LEADER_H

#include <stddef.h>

#include "node/node.h"

struct persist_options;

/* Before node_open: the mirror of the data directory, persist's batch hook and release gate
 * in po, and the node's "cluster" part (stop, the replica state after the store closes,
 * loopback_users). -1 (logged) on failure. */
int cl_leader_mirror(sl_node *b, struct persist_options *po);
/* Adopt the promoted node's member (which holds the leader key) and start the replication
 * server on the member's replication socket. -1 (logged) on failure. */
int cl_leader_adopt(sl_node *b, int http_port);
/* 0 when this node may serve clients (no cluster, or the leader); else -1 and why in err,
 * naming the leader to go to. */
int cl_leader_refuses(sl_node *b, char *err, size_t errlen);
/* A step-down hands over to heir (on) or gave up (off): publishers are blocked meanwhile
 * ("cluster: handing leadership over to HEIR") so that the heir catches up. */
void cl_leader_handover(sl_node *b, int on, const char *heir);

#endif
