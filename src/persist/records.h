/* records.h - the record types of the meta and msgs logs and their little-endian encoding.
 *
 * Bump a type's layout only together with the segment format version in store/log.c; every
 * record is self-delimiting (its length is in the log header), and readers reject short
 * payloads as corruption.
 *
 * meta log
 *   M_QUEUE      inc:u64 parent_inc:u64 flags:u8 vhost:s16 name:s16 args:b32
 *   M_QUEUE_DEL  inc:u64
 *   M_EXCHANGE   type:u8 flags:u8 vhost:s16 name:s16 args:b32
 *   M_EXCHANGE_DEL vhost:s16 name:s16
 *   M_BIND, M_UNBIND  dest_kind:u8 vhost:s16 source:s16 dest:s16 key:s16 args:b32
 *   M_NODE       next_incarnation:u64 next_lookup:u64 next_msg:u64 (high-water marks, so no
 *                id is ever handed out twice, even once the records that used it are gone)
 *   20-39        the access module's (src/access/access.h ACC_REC_*): vhost definitions and
 *                their deletion, users, permissions, topic permissions, limits. A vhost
 *                deletion (21) also kills every queue, exchange and binding of that vhost
 *                recorded before it.
 *   M_NODE_ID    id:16 bytes (the node's identity on links, made at the first start)
 *   M_ONLINE     online:u8 (CONNECT / DISCONNECT survive a restart)
 *   M_OUTQ       inc:u64 flags:u8 foreign:u8 (an outgoing queue's transfer state: OQ_ONHOLD;
 *                foreign = eod_foreign; the latest record per incarnation wins)
 *   M_LOOKUP_HWM next_lookup:u64 (reserved before a link sends lookup ids as sequence
 *                numbers: no id is reused after a crash, transient messages' ones included)
 *   M_LOOKUP_TIME next_lookup:u64 wall_ms:u64 (a sample: every lookup id below next_lookup
 *                existed at wall_ms; bounds a message's age for TimeToReachQueue after a
 *                restart; the samples an outgoing queue still needs are rewritten at start)
 *   M_OUTQ_SENT  inc:u64 sent:u64 (no message of that outgoing queue above sent has been
 *                sent: written ahead of the sends, so after a crash a message above it is known
 *                never to have reached the destination; the latest per incarnation wins)
 * msgs log
 *   R_MSG        id:u64 exchange:s16 routing_key:s16 props:b32 body:rest
 *                (R_ENQ flags: EF_XACT_CONT = more of the same transaction follows in this
 *                outgoing queue; EF_XACT = enqueued by a transaction (a transactional message:
 *                dead-lettered to DEADXACT); older files never set them)
 *   R_ENQ        inc:u64 lookup:u64 msg:u64 move_count:u32 flags:u8 [expires:u64]
 *                [dcount:u32]
 *                (expires, with EF_EXPIRES: the TTL deadline in wall-clock ms, so a restart
 *                does not give a message its whole TTL again; dcount, with EF_DCOUNT (issue
 *                31, only in quorum queues, whose M_QUEUE older builds refuse): the delivery
 *                count, TIDY's copy of what R_QDELIVER records said; EF_REDELIVERED then
 *                means delivered since, as after an R_QDELIVER; EF_WATCH (issue 33): the
 *                message is watched, qm_message.watch: its purge or its queue's deletion is
 *                told to the MSMQ door, which sends the receive NACKs its sender asked for;
 *                older builds ignore the bit)
 *   R_DEQ        inc:u64 lookup:u64
 *   R_DELIVER    inc:u64 lookup:u64
 *   R_QDELIVER   inc:u64 lookup:u64 count:u32 (issue 31: a quorum queue's delivery of a message
 *                whose delivery count is count > 0; count 0 is an R_DELIVER. Recovery takes
 *                the latest count and adds 1 when it was delivered after it: the stop
 *                returned it. Older builds refuse a log holding one: "unknown record type")
 *   R_DEQ_RUN, R_DELIVER_RUN  inc:u64 first:u64 count:u32 (2 <= count <= R_RUN_MAX)
 *                R_DEQ / R_DELIVER of each of the lookups first .. first + count - 1 of that
 *                queue, in that order. Written in place of a run of such records that would
 *                have been adjacent in the log (a consumer's deliveries, a multiple ack);
 *                versions before them neither write nor read them.
 *   R_PURGE      inc:u64
 *   R_MOVE       src_inc:u64 lookup:u64 dest_inc:u64 move_count:u32
 *   R_MOVE_TTL   src_inc:u64 lookup:u64 dest_inc:u64 move_count:u32 flags:u8 [expires:u64]
 *                (a move that changed the position's TTL deadline: the target's x-message-ttl
 *                applies from the move; without EF_EXPIRES it has none any more)
 *   R_TX_END     (empty): applies every R_IN_TX-marked record since the last end/abort
 *   R_TX_ABORT   (empty): written by recovery after marked records whose end never reached
 *                the disk, so records appended later are not taken for part of them
 *   R_TX_BEGIN   (empty): older logs only; treated as an abort of anything pending
 *   R_EOD_IN     sender:16 seq_id:u64 seq_no:u64 time:u64 rejects:u32 sender_name:s16
 *                dest:s16 (a link receiver's last accepted number of one incoming sequence,
 *                written in the same record group as the enqueues it accepted; the latest
 *                per (sender, seq_id) wins; TIDY re-appends old ones so they never pin or
 *                lose a segment)
 *   R_STREAM_TRACK inc:u64 kind:u8 value:u64 cover:u64 ref:s16 (issue 47: a stream's tracked
 *                reference, qm_stream_track: kind 'o' a consumer's stored offset, 'p' a named
 *                publisher's last publishing id, which recovery takes only when the stream
 *                holds the entries below cover; the latest per (inc, kind, ref) wins; TIDY
 *                re-appends old ones; records of a queue that is gone are ignored. Older
 *                builds refuse a log holding one: "unknown record type")
 * A transaction's records carry R_IN_TX (0x80) in their type: they apply all or nothing.
 * (s16 = u16 length + bytes, b32 = u32 length + bytes)
 */
#ifndef SL_PERSIST_RECORDS_H
#define SL_PERSIST_RECORDS_H

#include <stdint.h>
#include <string.h>

#include "amqp/wire.h"
#include "core/buf.h"
#include "core/le.h"

enum {
    M_QUEUE = 1,
    M_QUEUE_DEL = 2,
    M_EXCHANGE = 3,
    M_EXCHANGE_DEL = 4,
    M_BIND = 5,
    M_UNBIND = 6,
    M_NODE = 7,
    /* issue 9 (links): 40-59 */
    M_NODE_ID = 40,
    M_ONLINE = 41,
    M_OUTQ = 42,
    M_LOOKUP_HWM = 43,
    M_LOOKUP_TIME = 44,
    M_OUTQ_SENT = 45,
};

enum {
    R_MSG = 1,
    R_ENQ = 2,
    R_DEQ = 3,
    R_DELIVER = 4,
    R_PURGE = 5,
    R_MOVE = 6,
    R_TX_BEGIN = 7,
    R_TX_END = 8,
    R_TX_ABORT = 9,
    R_MOVE_TTL = 10, /* 10-19: issue 12 */
    /* issue 9 (links): 20-39 */
    R_EOD_IN = 20,
    /* issue 14 (engine at scale): 60-69 */
    R_DEQ_RUN = 60,
    R_DELIVER_RUN = 61,
    /* issue 31 (quorum queues): 70-79 */
    R_QDELIVER = 70,
    /* issue 47 (streams): 80-89 */
    R_STREAM_TRACK = 80,
};
#define R_IN_TX 0x80
/* The longest run one R_*_RUN record stands for (recovery rejects longer ones as corrupt, so a
 * damaged count cannot make it walk billions of lookups). */
#define R_RUN_MAX 65536u

#define QF_DURABLE 1
#define QF_AUTO_DELETE 2
#define QF_INTERNAL 4
#define EF_REDELIVERED 1
#define EF_EXPIRES 2
#define EF_XACT_CONT 4
#define EF_XACT 8
#define EF_DCOUNT 16
#define EF_WATCH 32
#define OQ_ONHOLD 1

static inline void rec_u8(sl_buf *b, uint8_t v)
{
    sl_buf_put_u8(b, v);
}
static inline void rec_u32(sl_buf *b, uint32_t v)
{
    sl_buf_put_le32(b, v);
}
static inline void rec_u64(sl_buf *b, uint64_t v)
{
    sl_buf_put_le64(b, v);
}
static inline void rec_s16(sl_buf *b, const void *p, size_t n)
{
    if (n > 65535)
        n = 65535;
    sl_buf_put_le16(b, (uint16_t)n);
    sl_buf_append(b, p, n);
}
static inline void rec_b32(sl_buf *b, const void *p, size_t n)
{
    rec_u32(b, (uint32_t)n);
    sl_buf_append(b, p, n);
}

/* A bounds-checked reader; any short read sets bad and yields zeros / empty slices. */
typedef struct rec_reader {
    const uint8_t *p, *end;
    int bad;
} rec_reader;

static inline int rec_need(rec_reader *r, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return 0;
    }
    return 1;
}
static inline uint8_t rd_u8(rec_reader *r)
{
    return rec_need(r, 1) ? *r->p++ : 0;
}
static inline uint32_t rd_u32(rec_reader *r)
{
    if (!rec_need(r, 4))
        return 0;
    uint32_t v = sl_le32(r->p);
    r->p += 4;
    return v;
}
static inline uint64_t rd_u64(rec_reader *r)
{
    uint64_t lo = rd_u32(r);
    return lo | (uint64_t)rd_u32(r) << 32;
}
static inline amqp_bytes rd_s16(rec_reader *r)
{
    if (!rec_need(r, 2))
        return (amqp_bytes){0};
    size_t n = sl_le16(r->p);
    r->p += 2;
    if (!rec_need(r, n))
        return (amqp_bytes){0};
    amqp_bytes s = {r->p, n};
    r->p += n;
    return s;
}
static inline amqp_bytes rd_b32(rec_reader *r)
{
    size_t n = rd_u32(r);
    if (!rec_need(r, n))
        return (amqp_bytes){0};
    amqp_bytes s = {r->p, n};
    r->p += n;
    return s;
}
static inline amqp_bytes rd_rest(rec_reader *r)
{
    amqp_bytes s = {r->p, (size_t)(r->end - r->p)};
    r->p = r->end;
    return s;
}

#endif
