/* amqp10.h - an AMQP 1.0 message (the bare message a stream protocol client publishes) read
 * into AMQP 0-9-1 properties and a body, as RabbitMQ converts one for an AMQP 0-9-1 consumer
 * of a stream (issue 47).
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

#endif
