/* rules.h - the refusals every door applies before it changes the model, written once: a
 * door (AMQP in broker/, HTTP in mgmt/, and the MSMQ operations) calls these and only
 * translates the answer into its wire (a channel error, an HTTP status). Each returns SL_OK,
 * or the sl_err with RabbitMQ's text in why (tests and clients match the texts).
 *
 * The permission checks themselves are the access module's (acc_check); these are the rules
 * about names, exclusivity and limits around them.
 */
#ifndef SL_NODE_RULES_H
#define SL_NODE_RULES_H

#include <stddef.h>

#include "access/access.h"
#include "amqp/method.h"
#include "core/err.h"
#include "qm/qm.h"

/* A name in the reserved "amq." namespace (queues and exchanges). */
int node_name_reserved(const char *name, size_t len);

/* The default exchange ("") and the amq.* ones: every vhost has them, nobody declares them
 * (definitions neither export nor import them). */
int node_exchange_predeclared(const char *name, size_t len);
/* A queue a definitions document re-creates: not a system queue, a subqueue (made by moves),
 * an exclusive queue (its connection's) or an outgoing queue (made by sending). */
int node_queue_definable(const qm_queue *q);

/* A new queue (exists 0) may not take a reserved name: SL_ERR_ACCESS_REFUSED. */
sl_err node_queue_new_name(const char *name, size_t len, int exists, char *why, size_t whylen);

/* An exclusive queue (or a subqueue of one) belongs to the connection that declared it:
 * SL_ERR_RESOURCE_LOCKED with RabbitMQ's 405 text unless conn is that connection (conn NULL:
 * a caller that is no connection, such as an HTTP request, is always refused). */
sl_err node_queue_locked(const qm_queue *q, const void *conn, char *why, size_t whylen);

/* A new queue name in vh counts against the vhost's max-queues: SL_ERR_PRECONDITION with the
 * access module's text when it is reached. */
sl_err node_queue_limit(const acc_db *a, qm_vhost *vh, const char *name, char *why, size_t whylen);

/* The default exchange ("") may not be declared, bound or unbound explicitly:
 * SL_ERR_ACCESS_REFUSED. */
sl_err node_exchange_not_default(const char *name, size_t len, char *why, size_t whylen);
/* A new exchange (exists 0) may not take a reserved name: SL_ERR_ACCESS_REFUSED. Asked after
 * the configure permission (a refused user learns nothing about what exists). */
sl_err node_exchange_new_name(const char *name, size_t len, int exists, char *why, size_t whylen);
/* Deleting an exchange of vhost: neither the default nor a system (amq.*) one. */
sl_err node_exchange_delete_check(const char *name, size_t len, const char *vhost, char *why,
                                  size_t whylen);

/* A permission as the AMQP door checks it: the vhost first (the user must be able to log
 * into it, administrators included), then perm on the resource. SL_OK, or the access
 * module's refusal. */
sl_err node_perm_check(const acc_db *a, const char *user, const char *vhost, acc_kind kind,
                       const char *name, acc_perm perm, char *why, size_t whylen);

/* Binding the exchange named src (src_x: that exchange, NULL when there is none) to the queue
 * or exchange (dest_kind) named dest with key, or unbinding it, as user in vhost; in RabbitMQ's
 * order (rabbit_channel's binding_action), which decides what a client that breaks two rules
 * is told: write on the destination; neither end the default exchange; read on the source;
 * and, on an existing topic exchange, topic read on the key. SL_OK, or SL_ERR_ACCESS_REFUSED
 * with why. Both doors' bind and unbind. */
sl_err node_bind_check(const acc_db *a, const char *user, const char *vhost, acc_kind dest_kind,
                       const char *dest, size_t dest_len, const char *src, size_t src_len,
                       const qm_exchange *src_x, const char *key, size_t key_len, char *why,
                       size_t whylen);

/* A message's properties as basic.publish checks them: a valid expiration, and CC / BCC
 * headers that are arrays (sender-selected distribution). SL_OK, or SL_ERR_PRECONDITION with
 * why ("invalid expiration '...': ..." / "invalid message: ..."). */
sl_err node_publish_check(const amqp_basic_props *p, char *why, size_t whylen);

/* What needs the disk under the node's alarms (ALARM_*, node.h): a durable declare, a
 * binding, a definitions import; memory_too: a publish, which the memory alarm stops as
 * well. SL_OK, or SL_ERR_RESOURCE with why ("disk alarm: refused until it clears (...)"). */
sl_err node_alarm_check(int alarms, int memory_too, char *why, size_t whylen);

#endif
