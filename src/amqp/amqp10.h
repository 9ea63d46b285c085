/* amqp10.h - an AMQP 1.0 message (the bare message a stream protocol client publishes) read
 * into AMQP 0-9-1 properties and a body, as RabbitMQ converts one for an AMQP 0-9-1 consumer
 * of a stream (issue 47); and the other way, an AMQP 0-9-1 message as an AMQP 1.0 message
 * for a stream protocol consumer (amqp10_from_091).
 *
 * What is read: the header section (durable -> delivery_mode 2, priority), the properties
 * section (message-id and correlation-id when strings or ulongs, user-id, reply-to,
 * content-type, content-encoding, creation-time -> timestamp in seconds), the application
 * properties (string, symbol, boolean, integer and timestamp values -> headers 'S', 't', 'l',
 * 'T'; others are left out), and the body: the data sections concatenated, or an amqp-value
 * holding binary or a string. Other sections are skipped.
 *
 * Sans-I/O, pure: never reads past len; every length is checked against what is left. A
 * message that does not parse gives -1, and the caller delivers its bytes as they are.
 */
#ifndef SL_AMQP_AMQP10_H
#define SL_AMQP_AMQP10_H

#include <stddef.h>
#include <stdint.h>

#include "amqp/method.h"
#include "core/buf.h"

/* props gets the fields found (its amqp_bytes point into p, or into hdrs for the headers:
 * hdrs receives the headers table content); body gets the body. 0, or -1 when p is not an
 * AMQP 1.0 message (nothing useful is left in the outputs). */
int amqp10_to_091(const uint8_t *p, size_t len, amqp_basic_props *props, sl_buf *hdrs,
                  sl_buf *body);

/* The message published over AMQP 0-9-1 (raw basic properties props, props_len bytes, as on
 * the wire; the body; the exchange and routing key it was published to) appended to out as an
 * AMQP 1.0 bare message, as RabbitMQ 3.13 converts one for a stream protocol consumer:
 *   header                durable (delivery_mode 2), priority, ttl (a numeric expiration);
 *   message-annotations   x-exchange, x-routing-key, x-basic-type, x-basic-app-id;
 *   properties            message-id, user-id, reply-to, correlation-id, content-type and
 *                         content-encoding (symbols), creation-time (timestamp * 1000);
 *   application-properties  the headers: strings as utf8 (binary when not UTF-8), integers in
 *                         the narrowest signed type that holds them, booleans, timestamps,
 *                         floats, doubles, void as null; decimals, tables and arrays are left
 *                         out (the stream clients read no such values);
 *   data                  the body.
 * Sections with nothing to say are left out (the annotations and data always go). 0, or -1
 * when props do not decode (nothing is appended then). */
int amqp10_from_091(const uint8_t *props, size_t props_len, const uint8_t *body, size_t body_len,
                    amqp_bytes exchange, amqp_bytes routing_key, sl_buf *out);

#endif
