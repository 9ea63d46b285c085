/* eod.h - exactly-once in-order delivery (MSMQ's EOD, MS-MQQB 3.1.1.5-3.1.1.6 and 3.1.3.1,
 * reference/msmq.md section 7.1) as pure state machines: no sockets, no disk, no clock of
 * their own. src/link/ (sender) and broker/link_recv.c (receiver) drive them over the real
 * link; tests/unit/test_eod.c drives them over a simulated one that drops, duplicates,
 * reorders and delays batches and acks and restarts either side, on seeded schedules.
 *
 * Numbers: a sequence is identified by SeqID (the outgoing queue's incarnation); its
 * messages carry SeqNo (their lookup id: strictly increasing in the order they became
 * sendable, durable before the first send) and PrevNo (the SeqNo sent before it on the same
 * session; 0 for the first message of a session, which is always the oldest one pending).
 *
 * Receiver rule, per (sender node, SeqID), with L = last accepted SeqNo (durable):
 *   SeqNo <= L                -> duplicate: not enqueued, acked
 *   SeqNo >  L and PrevNo <= L -> accepted: enqueued, L = SeqNo (in the same record group)
 *   otherwise                 -> rejected: something before it is missing
 * Invariant (the proof of exactly-once): every message the sender still holds with SeqNo
 * <= L has been accepted. It holds because no message with a smaller SeqNo becomes sendable
 * later, and a message sent with PrevNo p had no pending message between p and itself.
 * So an ack "L >= n" lets the sender drop everything up to n, and a resend is harmless.
 */
#ifndef SL_LINK_EOD_H
#define SL_LINK_EOD_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

typedef enum eod_verdict { EOD_ACCEPT = 0, EOD_DUPLICATE, EOD_REJECT } eod_verdict;

static inline eod_verdict eod_recv_check(uint64_t last, uint64_t seq_no, uint64_t prev_no)
{
    if (seq_no <= last)
        return EOD_DUPLICATE;
    return prev_no <= last ? EOD_ACCEPT : EOD_REJECT;
}

/* The control message that closes a link transaction between Sluice nodes (published to
 * exchange "sluice.eod", routing key "batch", after the batch's N data messages):
 *   version:u8 (1) sender:16 seq_id:u64 first_prev:u64 n:u32 seq_no[n]:u64 (strictly
 *   increasing) sender_name:s16   (little-endian) */
#define EOD_BATCH_VERSION 1
#define EOD_BATCH_MAX 65536
typedef struct eod_batch {
    uint8_t sender[16];
    uint64_t seq_id;
    uint64_t first_prev;
    uint32_t n;
    const uint8_t *seq_nos; /* n little-endian u64, inside the decoded buffer */
    const char *sender_name;
    size_t sender_name_len;
} eod_batch;

void eod_batch_encode(sl_buf *b, const uint8_t sender[16], const char *sender_name, uint64_t seq_id,
                      uint64_t first_prev, const uint64_t *seq_nos, uint32_t n);
/* 0, or -1 when malformed (short, n too large, numbers not increasing, prev >= first). */
int eod_batch_decode(const uint8_t *p, size_t len, eod_batch *out);
uint64_t eod_batch_seq_no(const eod_batch *b, uint32_t i);
/* PrevNo of message i of the batch. */
static inline uint64_t eod_batch_prev_no(const eod_batch *b, uint32_t i)
{
    return i == 0 ? b->first_prev : eod_batch_seq_no(b, i - 1);
}

/* Outcome of applying a batch at the receiver: all or nothing. */
typedef struct eod_apply {
    int rejected;       /* 1: nothing applies (a message is out of sequence) */
    uint32_t reject_at; /* which message */
    uint32_t accepted;  /* how many to enqueue (their indexes have accept[i] = 1) */
    uint64_t new_last;  /* L after the batch */
} eod_apply;
/* Decide every message of batch b against L = last; accept (n bytes, may be NULL) gets 1
 * for the messages to enqueue. */
void eod_recv_batch(const eod_batch *b, uint64_t last, uint8_t *accept, eod_apply *out);

/* Numbers do not jump. SeqNos are the sending node's lookup ids: node-wide, starting at 1,
 * growing by one per message enqueued anywhere on that node (plus up to 2^20 per restart,
 * persist's reservation), so two messages of one sequence are apart by what that node
 * enqueued elsewhere meanwhile. A step beyond the window (the first message measured from L,
 * each next one from the one before) is no real sender's: it is a forged or corrupt batch,
 * and the receiver refuses it whole (one accepted 2^62 would make every later message of
 * the sequence look like a duplicate, i.e. be acked and dropped). The default, 2^48, is 89
 * years of 100,000 messages a second; config link_seq_window changes it.
 * Returns the index of the first message that jumps, or b->n when none does. */
#define EOD_SEQ_WINDOW_DEFAULT (1ull << 48)
uint32_t eod_recv_jump(const eod_batch *b, uint64_t last, uint64_t window);

/* Admission of a batch at the receiver, before eod_recv_batch decides its messages. The
 * receiver keeps one state per (sender, SeqID, destination queue); an outgoing queue feeds
 * one queue, so a sequence belongs to the first queue it fed, and a batch of it for another
 * queue is not the sender's. elsewhere: this queue has no state of the sequence and another
 * queue has one; last: this queue's last accepted number (0 without a state). Refused
 * batches change nothing; *at (may be NULL) gets the message that jumped. */
typedef enum eod_admit { EOD_ADMIT_OK = 0, EOD_ADMIT_OTHER_QUEUE, EOD_ADMIT_JUMP } eod_admit;
eod_admit eod_recv_admit(const eod_batch *b, int elsewhere, uint64_t last, uint64_t window,
                         uint32_t *at);

/* MS-MQQB's resend timer table: 3 x short, 3 x medium, 3 x long, then final. */
static inline uint32_t eod_resend_interval(const uint32_t table[4], unsigned index)
{
    return table[index < 3 ? 0 : index < 6 ? 1 : index < 9 ? 2 : 3];
}
#define EOD_RESEND_LAST_INDEX 9

/* Sender bookkeeping of one outgoing queue (MS-MQDMPR OutgoingTransferInfo): what the
 * management properties show and what numbers the next send carries. */
typedef struct eod_send {
    uint64_t seq_id;
    uint64_t last_sent; /* SeqNo sent last on this session (the next PrevNo); 0 at its start */
    uint64_t last_ack;  /* highest SeqNo order-acked */
    uint64_t last_ack_prev;
    uint64_t last_ack_count;
    int64_t last_ack_time;  /* wall clock, s */
    unsigned resend_index;  /* into the timer table */
    uint64_t resend_due_ms; /* monotonic; 0 = nothing unacked */
    uint64_t resends;       /* times the unacked messages were sent again */
} eod_send;

void eod_send_init(eod_send *s, uint64_t seq_id);
/* A new session (connect, reconnect, EOD_RESEND): the next message sent is the oldest
 * pending one and carries PrevNo 0. */
void eod_send_session(eod_send *s);
/* Numbers for the next message sent: returns its PrevNo and remembers seq_no. */
uint64_t eod_send_next(eod_send *s, uint64_t seq_no);
/* Something was sent with nothing unacked before: the ack wait timer starts. */
void eod_send_arm(eod_send *s, const uint32_t table[4], uint64_t now_ms);
/* An order ack for everything up to upto arrived; unacked = how many stay unacked. */
void eod_send_acked(eod_send *s, uint64_t upto, uint64_t prev, uint64_t unacked,
                    const uint32_t table[4], uint64_t now_ms, int64_t wall_s);
/* The ack wait timer expired (or EOD_RESEND): everything unacked goes again; the interval
 * steps down the table. */
void eod_send_resend(eod_send *s, const uint32_t table[4], uint64_t now_ms);

#endif
