/* value_json.h - a management property value (mq_value) as JSON and back: the form the HTTP
 * API shows and the form node-to-node links carry in their requests (a management object's Get
 * Info at another node), one encoder for both. mq_value_of_json is the inverse on what
 * mq_value_json makes (a SEQUENCE_INFO from its numbers and blob, a sender from its GUID
 * text); anything else is MQ_V_NULL. */
#ifndef SL_MQ_VALUE_JSON_H
#define SL_MQ_VALUE_JSON_H

#include <jansson.h>

#include "mq/info.h"

/* A new reference. */
json_t *mq_value_json(const mq_value *v);
/* out is filled (mq_value_free frees it). */
void mq_value_of_json(json_t *j, mq_value *out);

#endif
