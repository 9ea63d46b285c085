/* outq.h - the outgoing-queue registry (link.h "Outgoing queues"): remote direct format
 * names and the outgoing queue each names, per vhost; what an outgoing queue's state is
 * called (MS-MQDMPR OutgoingQueue.State, ConnectionHistory, OutgoingTransferInfo) and the
 * NACK tokens both ends of a link speak. No I/O: the links that drain these queues are
 * src/link/ (a floor up), which the registry tells of every queue it adopts.
 *
 *   fmt.c   remote format names: DIRECT=TCP:<address>[:<port>]\private$\<queue>
 *   outq.c  the registry: naming, lookup (case-insensitive), creation, adoption at recovery;
 *           which hosts speak MS-MQQB (msmq.hosts); the receiving side's write rule
 *
 * Invariants: one outgoing queue per (vhost, lower-cased canonical name); a name that points
 * at this node is never an outgoing queue (the caller routes it to the local queue); an
 * adopted queue is in the registry until the link side forgets it (eod_reg_forget).
 *
 * Names kept from src/link/ (eod_addr, link_fmt_*, eod_state, eod_outq_info,
 * eod_recv_may_write, ...): their callers in other rooms did not change.
 */
#ifndef SL_EOD_OUTQ_H
#define SL_EOD_OUTQ_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "qm/qm.h"

/* ------------------------------------------------------------------------------------------
 * Remote format names (fmt.c)
 */
#define LINK_DEFAULT_PORT 5672

typedef struct eod_addr {
    char host[256];     /* address as given, lower-cased ("127.0.0.3", "node-b") */
    int port;           /* LINK_DEFAULT_PORT when the name has none */
    char queue[512];    /* destination queue part after \private$\ ("orders", "vhost/orders") */
    uint8_t port_given; /* the name wrote a port */
} eod_addr;

/* Parse "DIRECT=TCP:<address>[:<port>]\private$\<queue>" (also DIRECT=OS:<host>, optional
 * "FormatName:" prefix, case-insensitive; subqueues and ;journal refused). 0, or -1 with a
 * reason in err. */
int eod_fmt_parse(const char *s, size_t len, eod_addr *out, char *err, size_t errlen);
/* Canonical name of an outgoing queue: "DIRECT=TCP:<host>:<port>\private$\<queue>" (the
 * port always written). */
void eod_fmt_canonical(const eod_addr *a, char *buf, size_t len);
/* 1 when s looks like a format name (cheap prefix test, before parsing). */
int eod_fmt_is_candidate(const char *s, size_t len);

/* ------------------------------------------------------------------------------------------
 * Outgoing queue states (MS-MQDMPR OutgoingQueue.State; strings as PROPID_MGMT_QUEUE_STATE)
 */
typedef enum eod_state {
    LINK_INACTIVE = 0, /* not trying to connect (new, resumed, idle) */
    LINK_WAITING,      /* connecting, or waiting to retry after a failure */
    LINK_CONNECTED,    /* session up, transfer happening */
    LINK_ONHOLD,       /* PAUSE: nothing sent, messages kept */
    LINK_DISCONNECTED, /* the node is offline (DISCONNECT) */
    LINK_DISCONNECTING,
} eod_state;
const char *eod_state_name(eod_state s); /* "INACTIVE", "WAITING", ... */

/* PROPID_MGMT_QUEUE_FOREIGN of an outgoing queue */
typedef enum eod_foreign {
    LINK_FOREIGN_UNKNOWN = 0, /* the destination never answered */
    LINK_FOREIGN_NO,          /* it showed itself to be a Sluice node */
    LINK_FOREIGN_YES,         /* another messaging system */
} eod_foreign;

/* NACK tokens and the control message header of "NACKs" above */
#define LINK_NACK_BAD_DST_Q "MQMSG_CLASS_NACK_BAD_DST_Q"
#define LINK_NACK_Q_EXCEED_QUOTA "MQMSG_CLASS_NACK_Q_EXCEED_QUOTA"
#define LINK_NACK_REACH_QUEUE_TIMEOUT "MQMSG_CLASS_NACK_REACH_QUEUE_TIMEOUT"
#define LINK_REACH_DEADLINE "x-reach-deadline"

/* MS-MQMQ SEQUENCE_INFO (16 bytes on the wire of PROPID_MGMT_QUEUE_EOD_* blobs) */
typedef struct eod_seqinfo {
    uint64_t seq_id;
    uint32_t seq_no, prev_no; /* low 32 bits of our 64-bit numbers in the blob */
    uint64_t seq_no64, prev_no64;
} eod_seqinfo;

/* ConnectionHistory entry (MS-MQMQ 2.3.12.25 status codes) */
#define LINK_HIST_MAX 16
typedef struct eod_hist {
    uint32_t status; /* 0 InProcess, 2 Established, 0x80000004 SocketConnectFailure, ... */
    int64_t time;    /* wall clock, s */
    uint32_t error;  /* HRESULT or 0 */
    char address[64];
} eod_hist;

/* What GET /api/msmq/outgoing and the management properties show of one outgoing queue. */
typedef struct eod_outq_info {
    const char *format_name;
    eod_state state;
    eod_foreign foreign;
    const char *last_error; /* "" when none */
    int64_t last_error_time;
    char next_hop[80]; /* "IP=127.0.0.3" while connected or waiting */
    /* EOD sender side (OutgoingTransferInfo) */
    eod_seqinfo last_ack, first_non_ack, last_non_ack, next_seq;
    uint64_t last_ack_count, no_read_count, resend_count;
    /* no_ack_count (EodNoAckCount): sent and not order-acked, in flight or requeued after
     * its session ended; in_flight: of those, sent on the current session */
    uint64_t no_ack_count, in_flight;
    int64_t last_ack_time, resend_time;
    uint32_t resend_interval_s;
    uint64_t sent, acked, reconnects;
    /* NACKs: messages moved to the dead-letter queues, and the last such move */
    uint64_t dead_lettered, last_dl_count;
    uint32_t last_dl_class; /* 0: none yet */
    const char *last_dl_class_name, *last_dl_reason;
    int64_t last_dl_time;
    const eod_hist *history; /* newest first */
    size_t n_history;
} eod_outq_info;

/* ------------------------------------------------------------------------------------------
 * The registry: one per node, made by the link manager (which drains what it holds)
 */
typedef struct eod_reg eod_reg;

/* Told of every outgoing queue the registry adopts (created, or recovered): the drain's own
 * state for it goes in q->link. a is the queue's parsed name. */
typedef void (*eod_adopt_fn)(void *ctx, qm_queue *q, const eod_addr *a);

/* The registry of node's outgoing queues; format names resolve through it (qm's
 * resolve_remote hook) from now on. msmq_hosts: link_options.msmq_hosts (owned by the
 * caller, outlives the registry), may be NULL. */
eod_reg *eod_reg_new(qm_node *node, const char *msmq_hosts, eod_adopt_fn adopt, void *ctx);
void eod_reg_free(eod_reg *r);
/* The registry that resolves node's format names, or NULL when there is none. */
eod_reg *eod_reg_of(qm_node *node);
/* This node's own listening address (so a format name naming it is local). */
void eod_reg_set_self(eod_reg *r, const char *addr, int port);
/* The msmq.hosts entry naming a's host: its port (1801 when it wrote none), or 0. */
int eod_msmq_port(const eod_reg *r, const eod_addr *a);

/* Adopt q (q->is_outgoing, not adopted yet): 0, or -1 (logged) when its name is not a
 * remote format name. */
int eod_reg_adopt(eod_reg *r, qm_queue *q);
/* Every outgoing queue of every vhost not adopted yet (once, after persist_open). */
void eod_reg_recover(eod_reg *r);
/* q leaves the registry (it is being deleted, or the drain goes away). */
void eod_reg_forget(eod_reg *r, qm_queue *q);

/* The outgoing queue for a format name in vh: found (case-insensitively) or, with create,
 * created. NULL with err for a malformed name, or when the name points at this node (*local
 * is then set to 1 and the caller routes to the local queue). */
qm_queue *eod_outgoing_queue(eod_reg *r, qm_vhost *vh, const char *fmt, size_t len, int create,
                             int *local, char *err, size_t errlen);
/* The same for a format name whose host is in msmq.hosts (a Windows queue manager, MS-MQQB);
 * NULL with err when the name is malformed or its host is not one (the MSMQ door's
 * administration acknowledgements go only to such hosts). */
qm_queue *eod_msmq_outgoing_queue(eod_reg *r, qm_vhost *vh, const char *fmt, size_t len, int create,
                                  char *err, size_t errlen);

/* The receiving side asks this before it enqueues a link's message into q: may `user` (the
 * link's authenticated node user) write to q? SL_OK, or the refusal with err. Outgoing queues
 * are never link destinations; the rest is the access module's write permission. */
struct acc_db;
sl_err eod_recv_may_write(const struct acc_db *acc, const char *user, const qm_queue *q, char *err,
                          size_t errlen);

#endif
