/* superstream.h - super streams as RabbitMQ 3.13 has them (rabbit_stream_manager): a super
 * stream is an exchange whose bindings to streams are its partitions. The stream door's
 * CreateSuperStream makes it a durable direct exchange with x-super-stream: true and binds
 * one stream per partition with the binding key as routing key and x-stream-partition-order
 * = the partition's index; but any exchange with bindings to streams is one (RabbitMQ's
 * clients and tests build them over AMQP 0-9-1 or the HTTP API, with the order as a string),
 * so these look only at the bindings, never at the argument.
 *
 * What a door asks, written once here so every door answers alike:
 *   - the partitions, in RabbitMQ's order (Partitions, DeleteSuperStream);
 *   - the streams a routing key reaches (Route: the exchange's own routing).
 */
#ifndef SL_QM_SUPERSTREAM_H
#define SL_QM_SUPERSTREAM_H

#include <stddef.h>

#include "amqp/wire.h"
#include "qm/qm.h"

/* The exchange's argument that marks a super stream RabbitMQ's stream manager made, and the
 * binding argument that orders the partitions. */
#define QM_SUPERSTREAM_ARG "x-super-stream"
#define QM_SUPERSTREAM_ORDER_ARG "x-stream-partition-order"

/* 1 when q is a stream (a top-level queue of type stream with its log). */
int qm_queue_is_stream(const qm_queue *q);

/* A binding's partition order: 1 with *order when its arguments hold x-stream-partition-order
 * as an integer of any width or as a string of a decimal integer (RabbitMQ coerces both);
 * 0 otherwise. */
int qm_superstream_order(const qm_binding *b, int64_t *order);

/* The partitions of x: the stream at the end of each of x's bindings to a stream (one entry
 * per binding, as RabbitMQ lists them), ordered by x-stream-partition-order; bindings
 * without one come after those with one; ties keep RabbitMQ 3.13's listing order (binding
 * key, then the stream's name). Returns an array (sl_free it; NULL when there are none) and
 * *n its length. */
qm_queue **qm_superstream_partitions(const qm_exchange *x, size_t *n);

/* The streams a message published to x with routing key would reach (x's routing: direct
 * bindings for the exchange CreateSuperStream makes; exchange-to-exchange bindings and
 * alternate exchanges followed as a publish follows them), each once. The default exchange
 * names a queue by the key, and never makes an outgoing queue here. Returns an array
 * (sl_free it; NULL when none) and *n its length. */
qm_queue **qm_superstream_route(qm_exchange *x, amqp_bytes key, size_t *n);

#endif
