/* json.h - the JSON forms that RabbitMQ's definitions documents and its HTTP API share:
 * AMQP field tables <-> JSON objects (queue, exchange and binding arguments, message headers),
 * RabbitMQ's loose booleans, and a user as both show it (name, password hash, tags, limits).
 *
 * Protocol-neutral: no HTTP here. The management API (mgmt/) and definitions (defs.h) call
 * the same functions, so a value reads and writes one way wherever it travels.
 */
#ifndef SL_DEFS_JSON_H
#define SL_DEFS_JSON_H

#include <jansson.h>
#include <stdint.h>

#include "access/access.h"
#include "amqp/table.h"
#include "core/buf.h"

/* true/false, "true"/"false", 1/0; def when absent or null. */
int defs_json_truthy(json_t *v, int def);
/* A string of len bytes; bytes that are not UTF-8 are kept as \xNN escapes, never dropped. */
json_t *defs_json_strn_safe(const char *s, size_t len);
/* The same for a C string (a client's bytes: a name, a property). */
json_t *defs_json_str_safe(const char *s);
/* A non-negative integer given as a JSON integer or a string of decimal digits (RabbitMQ's
 * API takes both); -1 otherwise. */
int64_t defs_json_uint(json_t *v);
/* The member at a dotted path ("message_stats.publish"), or NULL. */
json_t *defs_json_path(json_t *o, const char *path);
/* Keep only the members named in cols (RabbitMQ's columns=: comma-separated, a dotted name
 * keeps its top member); obj if not an object is left alone. */
void defs_json_filter_columns(json_t *obj, const char *cols);
/* An AMQP table (content, no length prefix) as a JSON object / array. */
json_t *defs_table_to_json(amqp_bytes table);
json_t *defs_array_to_json(amqp_bytes array);
/* A JSON object (NULL or null: none) as AMQP table content in out, which the call
 * initializes; -1 with err, and out freed, on a value that has no AMQP form. */
int defs_json_to_table(json_t *obj, sl_buf *out, char *err, size_t errlen);

/* A comma/space-separated tag list as a JSON array of strings. */
json_t *defs_tags_json(const char *tags);
/* {an: a, bn: b}, each only when >= 0 (a limit of -1 is no limit). */
json_t *defs_limits_json(int64_t a, const char *an, int64_t b, const char *bn);
/* A user as RabbitMQ exports it and GET /api/users shows it: name, password_hash (never the
 * password), hashing_algorithm, tags, limits. */
json_t *defs_user_json(const acc_user *u);

/* AMQP 0-9-1 basic properties (flags + values, len bytes) as RabbitMQ's API shows them
 * (content_type, headers, delivery_mode, ...); {} when empty or undecodable. */
json_t *defs_props_json(const uint8_t *props, size_t len);
/* Key, value string pairs (kv[2i], kv[2i + 1], n of them) as a JSON object. */
json_t *defs_json_pairs(const char *const *kv, size_t n);

#endif
