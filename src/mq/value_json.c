/* value_json.c - mq_value as JSON and back (value_json.h). */
#include "mq/value_json.h"

#include <stdio.h>
#include <string.h>

#include "core/base64.h"
#include "core/hex.h"
#include "core/le.h"
#include "core/mem.h"

json_t *mq_value_json(const mq_value *v)
{
    json_t *a;
    uint8_t b[16];
    char *enc, guid[40];
    size_t n;
    const uint8_t *g = v->guid;
    switch (v->kind) {
    case MQ_V_INT:
        return json_integer((json_int_t)v->i);
    case MQ_V_STR:
        return json_string(v->s);
    case MQ_V_SEQINFO:
        mq_seqinfo_bytes(&v->seq, b);
        enc = sl_base64_encode(b, sizeof b, &n);
        a = json_pack("{s:s,s:I,s:I,s:I}", "blob", enc, "SeqID", (json_int_t)v->seq.seq_id, "SeqNo",
                      (json_int_t)v->seq.seq_no64, "PrevNo", (json_int_t)v->seq.prev_no64);
        sl_free(enc);
        return a;
    case MQ_V_SENDER:
        snprintf(guid, sizeof guid,
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", g[0], g[1],
                 g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14],
                 g[15]);
        return json_pack("{s:s,s:s}", "guid", guid, "node", v->s ? v->s : "");
    case MQ_V_LIST:
        a = json_array();
        for (size_t i = 0; i < v->n; i++)
            json_array_append_new(a, mq_value_json(&v->items[i]));
        return a;
    default:
        return json_null();
    }
}

/* mq_value_json's inverse: a sequence is rebuilt from its numbers (the blob is made of them), a
 * sender from its GUID text; anything mq_value_json does not make is MQ_V_NULL. */
void mq_value_of_json(json_t *j, mq_value *out)
{
    memset(out, 0, sizeof *out);
    out->kind = MQ_V_NULL;
    if (json_is_integer(j)) {
        out->kind = MQ_V_INT;
        out->i = (int64_t)json_integer_value(j);
    } else if (json_is_string(j)) {
        out->kind = MQ_V_STR;
        out->s = sl_xstrdup(json_string_value(j));
    } else if (json_is_array(j)) {
        out->kind = MQ_V_LIST;
        out->n = json_array_size(j);
        out->items = out->n ? sl_xcalloc(out->n, sizeof *out->items) : NULL;
        for (size_t i = 0; i < out->n; i++)
            mq_value_of_json(json_array_get(j, i), &out->items[i]);
    } else if (json_is_object(j) && json_object_get(j, "blob")) {
        out->kind = MQ_V_SEQINFO;
        out->seq.seq_id = (uint64_t)json_integer_value(json_object_get(j, "SeqID"));
        out->seq.seq_no64 = (uint64_t)json_integer_value(json_object_get(j, "SeqNo"));
        out->seq.prev_no64 = (uint64_t)json_integer_value(json_object_get(j, "PrevNo"));
        /* the blob's 32-bit numbers are its own (not always the low bits of the 64-bit ones) */
        const char *blob = json_string_value(json_object_get(j, "blob"));
        uint8_t raw[24];
        if (blob && strlen(blob) <= 24 && sl_base64_decode(blob, strlen(blob), raw) == 16) {
            out->seq.seq_no = sl_le32(raw + 8);
            out->seq.prev_no = sl_le32(raw + 12);
        }
    } else if (json_is_object(j) && json_is_string(json_object_get(j, "guid"))) {
        out->kind = MQ_V_SENDER;
        const char *g = json_string_value(json_object_get(j, "guid"));
        for (size_t k = 0; k < 16 && *g; g++) {
            int byte = sl_hex_byte(g);
            if (byte < 0)
                continue; /* the dashes */
            out->guid[k++] = (uint8_t)byte;
            g++;
        }
        const char *node = json_string_value(json_object_get(j, "node"));
        out->s = sl_xstrdup(node ? node : "");
    }
}
