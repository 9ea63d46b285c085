/* stream.h - the door for RabbitMQ's stream protocol (issue 47): the binary protocol RabbitMQ's
 * stream clients (Java, .NET, Go, Rust, Python, Node.js) speak on port 5552, beside AMQP.
 *
 * listeners.stream = [IP:]PORT (and listeners.stream.ssl, with ssl_options.*) opens it, off
 * by default as RabbitMQ's rabbitmq_stream plugin is. The door is a part of the node
 * (node/node.h): its connections are closed at shutdown, when their user or vhost is deleted,
 * and are counted for the connection limits. Everything runs on the loop's thread.
 *
 * What it serves and what waits for the stream engine: docs/stream-protocol.md.
 */
#ifndef SL_STREAM_STREAM_H
#define SL_STREAM_STREAM_H

#include <stddef.h>

#include "node/node.h"

typedef struct stream_door stream_door;

/* Open the listeners and join the node as a part (node_free stops and frees the door).
 * NULL with err[0] == 0 when listeners.stream and listeners.stream.ssl are both off; NULL
 * with the reason in err when a listener cannot be opened. */
stream_door *stream_start(sl_node *n, char *err, size_t errlen);

#endif
