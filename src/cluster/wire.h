/* wire.h - the replication port's frames (issue 31): what a follower and its leader say to
 * each other over TCP. Sans-I/O: cl_wire_parse reads one frame from bytes the caller got, the
 * cl_wire_put_* functions append one to a buffer the caller sends. The protocol's meaning is in
 * repl.h; this is only its encoding.
 *
 * Frame: length:u32 (of type + body), type:u8, body. Big-endian integers, s16 = u16 length +
 * bytes.
 *   HELLO  1  version:u16 (1) node:s16 cluster:s16 last_epoch:u64 last_idx:u64
 *   START  2  epoch session div_epoch div_end hello_epoch hello_idx (u64 each)
 *   DATA   3  epoch session idx group_epoch (u64 each) meta_len:u32 msgs_len:u32
 *             meta[meta_len] msgs[msgs_len]   (one record group: the bytes the leader's group
 *             commit wrote to its meta and msgs logs, records whole)
 *   PING   4  epoch session commit (u64 each)
 *   ACK    5  epoch session log_end durable (u64 each)
 *   REFUSE 6  code:u16 reason:s16          (then the sender closes: e.g. not the leader)
 * Full copy (a follower whose log cannot continue the leader's: empty, divergent, or too far
 * behind for the leader's ring of groups; docs/cluster.md "Full copy"):
 *   COPYREQ   7  (empty)                     F -> L after its HELLO
 *   COPYBEGIN 8  snap_idx:u64 n:u32 n x (epoch:u64 first:u64)   the copy holds every group up
 *                to snap_idx; the leader's epoch history up to it
 *   COPYDATA  9  name:s16 off:u64 len:u32 bytes[len]   bytes of one file ("msgs/...seg")
 *   COPYEND  10  snap_idx:u64 files:u32      every file was sent; the follower then says HELLO
 *                again from snap_idx
 * Authentication (issue 43; cluster/auth.h): with a cluster secret the follower begins with
 * AUTH instead of HELLO, and the leader takes nothing but AUTH and PROOF from a connection
 * until its PROOF checked out (then HELLO, ACK, COPYREQ as above):
 *   AUTH      11  node:s16 cluster:s16 nonce[32]       F -> L
 *   CHALLENGE 12  node:s16 nonce[32] mac[32]           L -> F: the leader's name and proof
 *   PROOF     13  mac[32]                              F -> L: the follower's proof
 * A frame longer than CL_WIRE_MAX_FRAME, an unknown type, a body of the wrong size, a name longer
 * than CL_WIRE_MAX_NAME or with a byte outside printable ASCII are malformed: the connection is
 * closed (a peer that sends them is not one of ours, or is broken).
 */
#ifndef SL_CLUSTER_WIRE_H
#define SL_CLUSTER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

#define CL_WIRE_VERSION 1
#define CL_WIRE_MAX_NAME 255
/* a group: up to a store record's size, and headers */
#define CL_WIRE_MAX_FRAME ((1u << 30) + 64)

enum {
    CL_WIRE_HELLO = 1,
    CL_WIRE_START,
    CL_WIRE_DATA,
    CL_WIRE_PING,
    CL_WIRE_ACK,
    CL_WIRE_REFUSE,
    CL_WIRE_COPYREQ,
    CL_WIRE_COPYBEGIN,
    CL_WIRE_COPYDATA,
    CL_WIRE_COPYEND,
    CL_WIRE_AUTH,
    CL_WIRE_CHALLENGE,
    CL_WIRE_PROOF
};
#define CL_WIRE_NONCE 32
#define CL_WIRE_MAC 32
#define CL_WIRE_MAX_HIST 65536 /* epochs in a COPYBEGIN's history */

typedef struct cl_wire_msg {
    uint8_t type;
    uint16_t version, code;
    const uint8_t *node, *cluster, *reason; /* point into the parsed bytes */
    uint16_t node_len, cluster_len, reason_len;
    uint64_t epoch, session;
    uint64_t a, b, c, d;        /* HELLO: last_epoch last_idx; START: div_epoch div_end hello_epoch
                                   hello_idx; DATA: idx group_epoch; PING: commit; ACK: log_end
                                   durable */
    const uint8_t *meta, *msgs; /* COPYDATA: the bytes in meta */
    uint32_t meta_len, msgs_len;
    const uint8_t *file; /* COPYDATA: the file's name (COPYBEGIN: a = snap_idx, hist) */
    uint16_t file_len;
    const uint8_t *hist;        /* COPYBEGIN: n_hist x (epoch, first), big-endian u64s */
    uint32_t n_hist;            /* (COPYEND: a = snap_idx, b = files) */
    const uint8_t *nonce, *mac; /* AUTH: nonce; CHALLENGE: nonce mac; PROOF: mac */
} cl_wire_msg;

/* One frame from p[0..n): 1 and *used when whole (out's pointers point into p), 0 when more
 * bytes are needed, -1 when malformed (err says why). */
int cl_wire_parse(const uint8_t *p, size_t n, cl_wire_msg *out, size_t *used, char *err,
                  size_t errlen);

void cl_wire_put_hello(sl_buf *b, const char *node, const char *cluster, uint64_t last_epoch,
                       uint64_t last_idx);
void cl_wire_put_start(sl_buf *b, uint64_t epoch, uint64_t session, uint64_t div_epoch,
                       uint64_t div_end, uint64_t hello_epoch, uint64_t hello_idx);
void cl_wire_put_data(sl_buf *b, uint64_t epoch, uint64_t session, uint64_t idx,
                      uint64_t group_epoch, const void *meta, uint32_t meta_len, const void *msgs,
                      uint32_t msgs_len);
void cl_wire_put_ping(sl_buf *b, uint64_t epoch, uint64_t session, uint64_t commit);
void cl_wire_put_ack(sl_buf *b, uint64_t epoch, uint64_t session, uint64_t log_end,
                     uint64_t durable);
void cl_wire_put_refuse(sl_buf *b, uint16_t code, const char *reason);
void cl_wire_put_copyreq(sl_buf *b);
void cl_wire_put_copybegin(sl_buf *b, uint64_t snap_idx, const uint64_t *epochs,
                           const uint64_t *firsts, uint32_t n);
void cl_wire_put_copydata(sl_buf *b, const char *file, uint64_t off, const void *p, uint32_t len);
void cl_wire_put_copyend(sl_buf *b, uint64_t snap_idx, uint32_t files);
void cl_wire_put_auth(sl_buf *b, const char *node, const char *cluster,
                      const uint8_t nonce[CL_WIRE_NONCE]);
void cl_wire_put_challenge(sl_buf *b, const char *node, const uint8_t nonce[CL_WIRE_NONCE],
                           const uint8_t mac[CL_WIRE_MAC]);
void cl_wire_put_proof(sl_buf *b, const uint8_t mac[CL_WIRE_MAC]);

#endif
