/* defs.h - RabbitMQ's definitions document: the node's definable state (users with password
 * hashes, vhosts, permissions, topic permissions, limits, exchanges, queues, bindings) as one
 * JSON document, written out and read back. A file format, not a protocol: the HTTP door's
 * /api/definitions is one caller; a setting or a tool that loads a file would be another.
 *
 * What is definable (system queues, predeclared exchanges, ...) is node/rules.h's answer.
 * Both run on the node's loop thread, like every change to the model.
 */
#ifndef SL_DEFS_DEFS_H
#define SL_DEFS_DEFS_H

#include <jansson.h>
#include <stddef.h>

#include "core/err.h"
#include "node/node.h"

/* The document for the whole node (vhost NULL), or RabbitMQ's per-vhost export (that vhost's
 * queues, exchanges, bindings and limits; no users, vhosts or permissions). A new reference;
 * NULL when vhost names none. */
json_t *defs_export(sl_node *n, const char *vhost);

/* Import a document into n; every entry is checked before any applies. forced_vhost (or NULL)
 * is RabbitMQ's per-vhost import: every object goes to that vhost; users, vhosts and
 * permissions are left alone. SL_OK, or the error with a reason in err (SL_ERR_SYNTAX: the
 * document is malformed, nothing changed). */
sl_err defs_import(sl_node *n, json_t *doc, const char *forced_vhost, char *err, size_t errlen);

#endif
