/* mqqb.h - MSMQ's Binary Reliable Messaging Protocol (MS-MQQB) packets, with the header
 * structures of MS-MQMQ 2.2.19-2.2.20, as a sans-I/O codec: bytes in, structures out, and
 * the acceptor's replies as bytes. No sockets, no allocation: parsed structures point into
 * the caller's buffer, which must outlive them.
 *
 * Framing: every packet starts with a 16-byte BaseHeader whose PacketSize counts the whole
 * packet (padding included) except a trailing SessionHeader of a UserMessage (MS-MQMQ
 * 2.2.19.1); a stand-alone SessionAck counts its SessionHeader. mqqb_frame_len tells how
 * many bytes the next packet takes before anything is parsed, and refuses sizes above the
 * caller's limit (the specification's own ceiling is 4 MiB), so a reader never buffers more
 * than that limit for one packet.
 *
 * Invariants: every length read from the wire is checked against the bytes that remain
 * before it is used; every parser returns -1 with a reason for anything the specification
 * says MUST close the session (unknown queue format types, transaction flags, a header
 * that runs past the packet) and never reads outside [p, p + len).
 * Little-endian throughout (MS-MQQB 2.2).
 */
#ifndef SL_MSMQ_MQQB_H
#define SL_MSMQ_MQQB_H

#include <stddef.h>
#include <stdint.h>

#define MQQB_PORT 1801
#define MQQB_VERSION 0x10
#define MQQB_SIGNATURE 0x524F494Cu  /* "LIOR" on the wire */
#define MQQB_PACKET_MAX 0x00400000u /* BaseHeader.PacketSize's maximum */
#define MQQB_BASE_LEN 16
#define MQQB_INTERNAL_LEN 4
#define MQQB_EC_LEN 552 /* EstablishConnectionHeader */
#define MQQB_EC_PACKET_LEN (MQQB_BASE_LEN + MQQB_INTERNAL_LEN + MQQB_EC_LEN) /* 572 */
#define MQQB_CP_LEN 12
#define MQQB_CP_PACKET_LEN (MQQB_BASE_LEN + MQQB_INTERNAL_LEN + MQQB_CP_LEN) /* 32 */
#define MQQB_SESSION_LEN 16
#define MQQB_SESSION_ACK_LEN (MQQB_BASE_LEN + MQQB_INTERNAL_LEN + MQQB_SESSION_LEN) /* 36 */
#define MQQB_ORDER_ACK_BODY_LEN 36

/* BaseHeader.Flags (MS-MQMQ 2.2.19.1) */
#define MQQB_BF_PR 0x0007u
#define MQQB_BF_IN 0x0008u /* internal packet */
#define MQQB_BF_SH 0x0010u /* SessionHeader present */
#define MQQB_BF_DH 0x0020u /* DebugHeader present */
#define MQQB_BF_TR 0x0100u /* tracing */

/* InternalHeader.Flags (MS-MQQB 2.2.1) */
#define MQQB_PT_SESSION_ACK 0x1
#define MQQB_PT_ESTABLISH 0x2
#define MQQB_PT_PARAMS 0x3
#define MQQB_IF_CS 0x0010u /* connection refused */

/* UserHeader.Flags (MS-MQMQ 2.2.19.2) */
#define MQQB_UF_DM(f) (((f) >> 5) & 3u)
#define MQQB_UF_JN (1u << 8)
#define MQQB_UF_JP (1u << 9)
#define MQQB_UF_DQ(f) (((f) >> 10) & 7u)
#define MQQB_UF_AQ(f) (((f) >> 13) & 7u)
#define MQQB_UF_RQ(f) (((f) >> 16) & 7u)
#define MQQB_UF_SH (1u << 19) /* SecurityHeader */
#define MQQB_UF_TH (1u << 20) /* TransactionHeader */
#define MQQB_UF_MP (1u << 21) /* MessagePropertiesHeader (always) */
#define MQQB_UF_CQ (1u << 22) /* ConnectorType */
#define MQQB_UF_MQ (1u << 23) /* MultiQueueFormatHeader */
#define MQQB_UF_AH (1u << 25) /* came over HTTP */
#define MQQB_UF_HH (1u << 28) /* SoapHeader */

/* TransactionHeader.Flags (MS-MQMQ 2.2.20.5) */
#define MQQB_TF_CG 0x1u
#define MQQB_TF_FA 0x2u
#define MQQB_TF_FM 0x4u
#define MQQB_TF_LM 0x8u

/* Message classes used here (MS-MQMQ 2.2.18.1.6) */
#define MQMSG_CLASS_NORMAL 0x0000
#define MQMSG_CLASS_ACK_REACH_QUEUE 0x0002
#define MQMSG_CLASS_ORDER_ACK 0x00ff
#define MQMSG_CLASS_ACK_RECEIVE 0x4000
#define MQMSG_CLASS_NACK_Q_DELETED 0xc000
#define MQMSG_CLASS_NACK_Q_PURGED 0xc001
#define MQMSG_CLASS_NACK_RECEIVE_TIMEOUT 0xc002
#define MQMSG_CLASS_NACK_RECEIVE_REJECTED 0xc004
#define MQMSG_CLASS_NACK_BAD_DST_Q 0x8000
#define MQMSG_CLASS_NACK_REACH_QUEUE_TIMEOUT 0x8002
#define MQMSG_CLASS_NACK_Q_EXCEED_QUOTA 0x8003
#define MQMSG_CLASS_NACK_ACCESS_DENIED 0x8004
#define MQMSG_CLASS_NACK_BAD_ENCRYPTION 0x8007

/* Administration acknowledgements: arrival classes (ACK_REACH_QUEUE, 0x80xx) and receive
 * classes (ACK_RECEIVE, 0xc0xx); ORDER_ACK, REPORT and NORMAL are not. */
#define MQQB_CLASS_IS_ADMIN_ACK(c)                                                                 \
    ((c) == MQMSG_CLASS_ACK_REACH_QUEUE || (c) == MQMSG_CLASS_ACK_RECEIVE ||                       \
     ((c)&0xff00) == 0x8000 || ((c)&0xff00) == 0xc000)
/* MessagePropertiesHeader.Flags: the acknowledgements the sender asks for (MS-MQMQ 2.2.19.3,
 * PROPID_M_ACKNOWLEDGE): positive / negative on arrival, positive / negative on receive. */
#define MQQB_ACK_POS_ARRIVAL 0x01u
#define MQQB_ACK_POS_RECEIVE 0x02u
#define MQQB_ACK_NEG_ARRIVAL 0x04u
#define MQQB_ACK_NEG_RECEIVE 0x08u

/* Queue format types of UserHeader.Flags.DQ/AQ/RQ (MS-MQMQ 2.2.18.1.5). */
enum {
    MQQB_QF_NONE = 0,
    MQQB_QF_SAME_AS_ADMIN = 1, /* RQ only */
    MQQB_QF_PRIVATE_SRC = 2,   /* PrivateQueueFormatNameId on the source host */
    MQQB_QF_PRIVATE_DST = 3,   /* PrivateQueueFormatNameId on the destination host */
    MQQB_QF_PRIVATE_ADMIN = 4, /* RQ only: on the admin queue's host */
    MQQB_QF_PUBLIC = 5,        /* PublicQueueFormatName (GUID) */
    MQQB_QF_PRIVATE_OTHER = 6, /* PrivateQueueFormatName (GUID + id) */
    MQQB_QF_DIRECT = 7,        /* DirectQueueFormatName (UTF-16) */
};

typedef struct mqqb_base {
    uint8_t version, reserved;
    uint16_t flags;
    uint32_t signature, packet_size, ttrq;
} mqqb_base;

typedef struct mqqb_establish {
    uint8_t client_guid[16], server_guid[16];
    uint32_t timestamp;
    uint16_t os; /* low byte RE (0x10), then SE 0x100, OS 0x200, QS 0x400 */
    uint16_t reserved;
} mqqb_establish;
#define MQQB_OS_SE 0x0100u

typedef struct mqqb_params {
    uint32_t recoverable_ack_timeout, ack_timeout; /* ms */
    uint16_t reserved, window;
} mqqb_params;

typedef struct mqqb_session {
    uint16_t ack_seq;     /* UserMessage packets received */
    uint16_t rec_ack_seq; /* lowest recoverable number acknowledged by rec_ack_flags bit 0 */
    uint32_t rec_ack_flags;
    uint16_t user_seq; /* UserMessage packets sent */
    uint16_t rec_seq;  /* recoverable ones sent */
    uint16_t window, reserved;
} mqqb_session;

/* One internal packet (BaseHeader.Flags.IN). */
typedef struct mqqb_internal {
    mqqb_base base;
    uint16_t iflags;
    unsigned type; /* MQQB_PT_* */
    mqqb_establish ec;
    mqqb_params cp;
    mqqb_session session;
} mqqb_internal;

typedef struct mqqb_qformat {
    unsigned type;         /* MQQB_QF_* */
    uint32_t private_id;   /* PRIVATE_* */
    uint8_t guid[16];      /* PUBLIC, PRIVATE_OTHER */
    const uint8_t *direct; /* DIRECT: UTF-16LE, without its terminating NUL */
    size_t direct_len;     /* bytes */
} mqqb_qformat;

typedef struct mqqb_user {
    mqqb_base base;
    /* UserHeader */
    uint8_t source_qm[16], dest_qm[16];
    uint32_t ttbr, sent_time, message_id, uflags;
    mqqb_qformat dest, admin, resp;
    int has_connector;
    uint8_t connector[16];
    /* TransactionHeader */
    int has_tx;
    uint32_t tx_flags;
    uint64_t tx_seq_id; /* TimeStamp << 32 | Ordinal: compared as one 64-bit number */
    uint32_t tx_seq_no, tx_prev_no;
    int has_connector_qm;
    uint8_t connector_qm[16];
    /* SecurityHeader (parsed, not verified) */
    int has_security;
    uint16_t sec_flags, sender_id_size, enc_key_size, sig_size;
    uint32_t cert_size, provider_size;
    const uint8_t *sender_id;
    /* MessagePropertiesHeader */
    uint8_t ack_flags, label_len; /* label_len in UTF-16 units, NUL included */
    uint16_t msg_class;
    uint8_t correlation_id[20];
    uint32_t body_type, app_tag, body_size, alloc_body_size, privacy, hash_alg, enc_alg, ext_size;
    const uint8_t *label; /* UTF-16LE, label_len - 1 units (no NUL), NULL when none */
    const uint8_t *ext, *body;
    /* DebugHeader */
    int has_debug;
    uint16_t debug_flags;
    uint8_t debug_queue[16];
    /* SoapHeader (SRMP envelope): UTF-16LE strings without their NUL */
    int has_soap;
    const uint8_t *soap_header, *soap_body;
    size_t soap_header_len, soap_body_len; /* bytes */
    /* MultiQueueFormatHeader: kept as bytes (a copy per destination arrives anyway) */
    int has_mqf;
    uint32_t mqf_dest_count;
    /* SessionHeader riding on the message */
    int has_session;
    mqqb_session session;
} mqqb_user;

/* How many bytes the packet at p takes (its BaseHeader says): 1 with *total, 0 when fewer
 * than 16 bytes are there, -1 with why when the header is not MS-MQQB's or the size is
 * below the least packet or above max (the caller's limit, at most MQQB_PACKET_MAX + 16). */
int mqqb_frame_len(const uint8_t *p, size_t n, uint32_t max, uint32_t *total, const char **why);

void mqqb_base_decode(const uint8_t *p, mqqb_base *b);

/* A whole internal packet of len bytes (as mqqb_frame_len framed it): 0, or -1 with why. */
int mqqb_parse_internal(const uint8_t *p, size_t len, mqqb_internal *out, const char **why);
/* A whole UserMessage packet: 0, or -1 with why. */
int mqqb_parse_user(const uint8_t *p, size_t len, mqqb_user *out, const char **why);

/* The acceptor's EstablishConnection reply to req (572 bytes into out): the client's GUID,
 * server_guid (the request's when it named one, else own_guid), its time stamp and its
 * OperatingSystem flags back, 0x5A padding; refuse sets InternalHeader.Flags.CS. */
void mqqb_write_establish_reply(uint8_t out[MQQB_EC_PACKET_LEN], const mqqb_establish *req,
                                const uint8_t own_guid[16], int refuse);
/* A ConnectionParameters packet (32 bytes). */
void mqqb_write_params(uint8_t out[MQQB_CP_PACKET_LEN], const mqqb_params *cp);
/* A stand-alone SessionAck packet (36 bytes). */
void mqqb_write_session_ack(uint8_t out[MQQB_SESSION_ACK_LEN], const mqqb_session *s);
/* The initiator's packets (tests and the peer): an EstablishConnection request. */
void mqqb_write_establish_request(uint8_t out[MQQB_EC_PACKET_LEN], const mqqb_establish *req);

/* An OrderAck packet (MS-MQQB 2.2.4) to "TCP:<addr>\PRIVATE$\order_queue$" (addr ASCII)
 * into out (at most cap bytes): its length, or 0 when it does not fit. */
size_t mqqb_write_order_ack(uint8_t *out, size_t cap, const uint8_t own_guid[16], const char *addr,
                            uint32_t message_id, uint32_t sent_time, uint64_t seq_id,
                            uint32_t seq_no);

/* A FinalAck packet (MS-MQQB 2.2.5) of class cls (MQMSG_CLASS_NACK_* for a refusal) for the
 * transactional message acked, to the same order queue; length or 0. */
size_t mqqb_write_final_ack(uint8_t *out, size_t cap, const uint8_t own_guid[16], const char *addr,
                            uint32_t message_id, uint32_t sent_time, uint16_t cls,
                            const mqqb_user *acked);

/* Ping Packet (MS-MQQB 2.2.7), UDP 3527: Flags, Signature 0x5548, Cookie, QMGuid. */
#define MQQB_PING_LEN 24
#define MQQB_PING_SIGNATURE 0x5548
#define MQQB_PING_RC 0x0001u /* initiator is not a server OS: echoed */
#define MQQB_PING_RF 0x0002u /* the acceptor would refuse a session */
typedef struct mqqb_ping {
    uint16_t flags;
    uint32_t cookie;
    uint8_t qm_guid[16];
} mqqb_ping;
/* 0, or -1 when it is not a ping (short, or another signature: to be ignored). */
int mqqb_parse_ping(const uint8_t *p, size_t len, mqqb_ping *out);
/* The acceptor's response to req: RC echoed, RF when refuse, the cookie back, own GUID. */
void mqqb_write_ping_reply(uint8_t out[MQQB_PING_LEN], const mqqb_ping *req,
                           const uint8_t own_guid[16], int refuse);

/* UTF-16LE (n bytes) to UTF-8 into out (cap bytes, NUL-terminated): the length, or -1 when it
 * does not fit or is not valid UTF-16 (lone surrogates, NUL inside). */
long mqqb_utf16_to_utf8(const uint8_t *p, size_t n, char *out, size_t cap);
/* UTF-16 units of a NUL-terminated UTF-8 string, or -1 when it is not UTF-8. */
long mqqb_utf16_units(const char *s);
/* The queue a direct format name (UTF-8, "DIRECT=" taken off) names when it is a private queue
 * (TCP:host, private$, q; or OS:...): 0 with *name and *len inside s, or -1. */
int mqqb_direct_private_queue(const char *s, size_t n, const char **name, size_t *len);

/* ---- the initiator's side (link/mqqb_send.c sends to a Windows queue manager) ---- */

/* A queue format name to write (UserHeader's admin / response queue): MQQB_QF_NONE,
 * MQQB_QF_DIRECT (direct: UTF-8 without "DIRECT="), MQQB_QF_PUBLIC (guid) or
 * MQQB_QF_PRIVATE_OTHER (guid and private_id). */
typedef struct mqqb_qout {
    unsigned type;
    uint8_t guid[16];
    uint32_t private_id;
    const char *direct;
} mqqb_qout;

/* One UserMessage to send: a direct destination, MessagePropertiesHeader, optional
 * TransactionHeader and trailing SessionHeader. */
typedef struct mqqb_out {
    const uint8_t *source_qm; /* 16 bytes: this node's id */
    const char *dest;         /* direct format name without "DIRECT=": "TCP:10.0.0.5\private$\q" */
    uint32_t message_id, sent_time, ttbr, ttrq;
    unsigned priority; /* 0-7; a transactional message goes with 0 (MS-MQMQ 2.2.19.1) */
    int recoverable;
    int tx;             /* TransactionHeader: recoverable, FM and LM set (one per transaction) */
    uint64_t tx_seq_id; /* Timestamp << 32 | Ordinal, as mqqb_user.tx_seq_id */
    uint32_t tx_seq_no, tx_prev_no;
    uint32_t body_type, app_tag;
    const uint8_t *correlation; /* 20 bytes, or NULL (zeros) */
    const char *label;          /* UTF-8, at most 249 UTF-16 units, or NULL */
    mqqb_qout admin, resp;      /* MQQB_QF_NONE: none */
    int journal, dead_letter;   /* UserHeader.Flags.JP, JN */
    uint8_t ack_flags;          /* MessagePropertiesHeader.Flags (acknowledgements asked) */
    uint16_t msg_class;         /* MessageClass: 0, or an administration acknowledgement's */
    const uint8_t *ext;         /* ExtensionData */
    uint32_t ext_len;
    const uint8_t *body;
    uint32_t body_len;
    const mqqb_session *session; /* appended when not NULL (BaseHeader.Flags.SH) */
} mqqb_out;

/* The receiver's in-order rule for a transactional message of a sequence (SourceQueueManager,
 * TxSequenceID) whose last accepted TxSequenceNumber is last (0: none accepted yet, a new
 * sequence). MS-MQQB 3.1.5.8.6 accepts a message when its number is above last and its
 * TxPreviousSequenceNumber at or below it (or, for a new, larger TxSequenceID, when the
 * previous number is 0); 3.1.1.5 says why the previous number is carried: messages can
 * expire, so numbers may have gaps, and the previous number lets the receiver see that the
 * message follows the one it last received. The spec's "at or below" lets one message name
 * previous 0 and jump anywhere: MS-MQQB has no credentials, so anyone who can reach the port
 * can claim a sender's GUID and sequence (both are in every delivered message's headers),
 * and one accepted 0xFFFFFFFF makes the rest of the real sender's sequence duplicates,
 * acknowledged and dropped (issue 43). So a message moves the sequence only
 *   - to the very next number (seq_no == last + 1: no number is skipped, whatever previous
 *     number it names at or below last, as the spec allows), or
 *   - past a gap it declares, by naming exactly last as its previous number (the expired
 *     messages of 3.1.1.5; a Sluice sender's lookup ids), and at most gap_max past last
 *     (msmq.seq_window).
 * Verdicts: DUPLICATE seq_no <= last (acknowledged, dropped); OUT_OF_ORDER the previous
 * number is above last (something before it is missing: refused, the sender resends);
 * JUMP it would skip numbers this node never saw without naming last as its previous, or
 * skip more than gap_max (refused, and an audit line: no real sender does that). */
typedef enum mqqb_tx_verdict {
    MQQB_TX_ACCEPT = 0,
    MQQB_TX_DUPLICATE,
    MQQB_TX_OUT_OF_ORDER,
    MQQB_TX_JUMP,
    MQQB_TX_FOREIGN_GAP /* mqqb_tx_check_from: a declared gap from another address */
} mqqb_tx_verdict;
mqqb_tx_verdict mqqb_tx_check(uint64_t last, uint32_t seq_no, uint32_t prev_no, uint64_t gap_max);

/* The same rule with the sender's address (review of issue 43). Naming last as the previous
 * number proves nothing: last is in the OrderAck a forger's own duplicate gets, and in every
 * delivered message's headers, so two declared gaps under gap_max (to last + 2^31, then to
 * 0xFFFFFFFF) would end the real sender's sequence. The one thing a peer cannot forge is the
 * IP address its TCP connection comes from, so a sequence is bound to the address of the
 * first message that moved it on this node (bound: "" when none is known yet - a sequence
 * new to the node, or any sequence after a restart, as the binding lives in memory only),
 * and
 *   - the very next number (seq_no == last + 1) is accepted from any address (MS-MQQB has no
 *     credentials; a forger can take one number at a time, msmq.allowed_senders is the lever),
 *     and it does not move the binding: else the forger's next message would be a gap "from
 *     the sequence's address";
 *   - a declared gap (seq_no > last + 1 that mqqb_tx_check accepts) only from bound, or from
 *     anyone while bound is "" (that message then binds the sequence): FOREIGN_GAP otherwise.
 * peer and bound are numeric addresses as the session prints them (NULL counts as ""). */
mqqb_tx_verdict mqqb_tx_check_from(uint64_t last, uint32_t seq_no, uint32_t prev_no,
                                   uint64_t gap_max, const char *bound, const char *peer);

/* Sluice numbers a queue's transactional messages with 64-bit lookup ids; MS-MQQB's
 * TxSequenceNumber has 32 bits and 0 is not a number. As MSMQ's own sender does when a
 * sequence is done, a number past 0xFFFFFFFF goes on a new, larger sequence (MS-MQQB
 * 3.1.1.5: a receiver takes a higher TxSequenceID whose first message has
 * TxPreviousSequenceNumber 0): lookup id s (>= 1) is number (s - 1) % 0xFFFFFFFF + 1 of
 * sequence base + ((s - 1) / 0xFFFFFFFF << 32), the epoch in the TimeStamp half so it never
 * meets another queue's base (an incarnation, below 2^32). Ids below 2^32 keep their
 * numbers and base. prev is the lookup id sent before (0: none): TxPreviousSequenceNumber
 * is its number when it is of the same sequence, else 0. */
void mqqb_tx_number(uint64_t base, uint64_t seq, uint64_t prev, uint64_t *seq_id, uint32_t *no,
                    uint32_t *prev_no);
/* mqqb_tx_number backwards: the lookup id that is number no of sequence seq_id of the
 * sequences of base, or 0 when seq_id is none of them (or no is 0). */
uint64_t mqqb_tx_lookup_id(uint64_t base, uint64_t seq_id, uint32_t no);
/* 1 when an OrderAck for (ack_id, ack_no) covers lookup id seq of the sequences of base
 * (same sequence, number at or below), else 0. */
int mqqb_tx_acked(uint64_t base, uint64_t ack_id, uint32_t ack_no, uint64_t seq);

/* Bytes mqqb_write_user takes for m, or 0 when a name or the label is not valid UTF-8, the
 * label is over 249 units, or the packet would exceed MQQB_PACKET_MAX. */
size_t mqqb_user_len(const mqqb_out *m);
/* Writes m into out (cap bytes): its length, or 0 when it does not fit or cannot be encoded. */
size_t mqqb_write_user(uint8_t *out, size_t cap, const mqqb_out *m);
/* The sequence an OrderAck (class MQMSG_CLASS_ORDER_ACK) acknowledges: 0 with the sequence
 * and number, or -1 when u is not one (another class, a body of the wrong size). */
int mqqb_order_ack_of(const mqqb_user *u, uint64_t *seq_id, uint32_t *seq_no);
/* Same for a FinalAck: the refused message's sequence and number and its class, or -1. */
int mqqb_final_ack_of(const mqqb_user *u, uint64_t *seq_id, uint32_t *seq_no, uint16_t *cls);

#endif
