/* eod.c - the EOD state machines of eod.h: batch codec, receiver decision, sender
 * bookkeeping and MSMQ's resend timer table. No I/O here (see eod.h for the invariant). */
#include "eod/eod.h"

#include <string.h>

#include "core/le.h"
#include "persist/records.h"

void eod_batch_encode(sl_buf *b, const uint8_t sender[16], const char *sender_name, uint64_t seq_id,
                      uint64_t first_prev, const uint64_t *seq_nos, uint32_t n)
{
    rec_u8(b, EOD_BATCH_VERSION);
    sl_buf_append(b, sender, 16);
    rec_u64(b, seq_id);
    rec_u64(b, first_prev);
    rec_u32(b, n);
    for (uint32_t i = 0; i < n; i++)
        rec_u64(b, seq_nos[i]);
    rec_s16(b, sender_name, strlen(sender_name));
}

uint64_t eod_batch_seq_no(const eod_batch *b, uint32_t i)
{
    return sl_le64(b->seq_nos + 8 * (size_t)i);
}

int eod_batch_decode(const uint8_t *p, size_t len, eod_batch *out)
{
    rec_reader r = {p, p + len, 0};
    memset(out, 0, sizeof *out);
    if (rd_u8(&r) != EOD_BATCH_VERSION || !rec_need(&r, 16))
        return -1;
    memcpy(out->sender, r.p, 16);
    r.p += 16;
    out->seq_id = rd_u64(&r);
    out->first_prev = rd_u64(&r);
    out->n = rd_u32(&r);
    if (r.bad || out->n == 0 || out->n > EOD_BATCH_MAX || !rec_need(&r, 8 * (size_t)out->n))
        return -1;
    out->seq_nos = r.p;
    r.p += 8 * (size_t)out->n;
    amqp_bytes name = rd_s16(&r);
    if (r.bad || r.p != r.end)
        return -1;
    out->sender_name = (const char *)name.p;
    out->sender_name_len = name.len;
    uint64_t prev = out->first_prev;
    for (uint32_t i = 0; i < out->n; i++) {
        uint64_t s = eod_batch_seq_no(out, i);
        if (s == 0 || s <= prev)
            return -1; /* numbers only grow along a batch */
        prev = s;
    }
    return 0;
}

uint32_t eod_recv_jump(const eod_batch *b, uint64_t last, uint64_t window)
{
    uint64_t from = last;
    for (uint32_t i = 0; i < b->n; i++) {
        uint64_t s = eod_batch_seq_no(b, i);
        if (s > from && s - from > window)
            return i;
        from = s > from ? s : from;
    }
    return b->n;
}

eod_admit eod_recv_admit(const eod_batch *b, int elsewhere, uint64_t last, uint64_t window,
                         uint32_t *at)
{
    if (elsewhere)
        return EOD_ADMIT_OTHER_QUEUE;
    uint32_t j = eod_recv_jump(b, last, window);
    if (at)
        *at = j;
    return j < b->n ? EOD_ADMIT_JUMP : EOD_ADMIT_OK;
}

void eod_recv_batch(const eod_batch *b, uint64_t last, uint8_t *accept, eod_apply *out)
{
    memset(out, 0, sizeof *out);
    uint64_t l = last;
    for (uint32_t i = 0; i < b->n; i++) {
        uint64_t s = eod_batch_seq_no(b, i), prev = eod_batch_prev_no(b, i);
        eod_verdict v = eod_recv_check(l, s, prev);
        if (v == EOD_REJECT) {
            out->rejected = 1;
            out->reject_at = i;
            out->accepted = 0;
            out->new_last = last;
            if (accept)
                memset(accept, 0, b->n);
            return;
        }
        if (accept)
            accept[i] = v == EOD_ACCEPT;
        if (v == EOD_ACCEPT) {
            out->accepted++;
            l = s;
        }
    }
    out->new_last = l;
}

void eod_send_init(eod_send *s, uint64_t seq_id)
{
    memset(s, 0, sizeof *s);
    s->seq_id = seq_id;
}

void eod_send_session(eod_send *s)
{
    s->last_sent = 0;
}

uint64_t eod_send_next(eod_send *s, uint64_t seq_no)
{
    uint64_t prev = s->last_sent;
    s->last_sent = seq_no;
    return prev;
}

void eod_send_arm(eod_send *s, const uint32_t table[4], uint64_t now_ms)
{
    if (!s->resend_due_ms)
        s->resend_due_ms = now_ms + eod_resend_interval(table, s->resend_index);
}

void eod_send_acked(eod_send *s, uint64_t upto, uint64_t prev, uint64_t unacked,
                    const uint32_t table[4], uint64_t now_ms, int64_t wall_s)
{
    if (upto > s->last_ack) {
        s->last_ack = upto;
        s->last_ack_prev = prev;
    }
    s->last_ack_count++;
    s->last_ack_time = wall_s;
    /* MS-MQQB: progress resets the table once nothing is left unacked; otherwise the
     * wait for the rest starts again from now. */
    if (unacked == 0) {
        s->resend_index = 0;
        s->resend_due_ms = 0;
    } else {
        s->resend_due_ms = now_ms + eod_resend_interval(table, s->resend_index);
    }
}

void eod_send_resend(eod_send *s, const uint32_t table[4], uint64_t now_ms)
{
    if (s->resend_index < EOD_RESEND_LAST_INDEX)
        s->resend_index++;
    s->resends++;
    s->resend_due_ms = now_ms + eod_resend_interval(table, s->resend_index);
    eod_send_session(s);
}
