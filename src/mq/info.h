/* info.h - R_QMMgmtGetInfo (MS-MQMR 3.1.4.1, reference/msmq.md sections 3.5-3.8) for every
 * door: the management properties of the machine and of a queue, as plain values the doors
 * encode (JSON over HTTP, PROPVARIANTs in NDR20 over DCE/RPC). The property table (ids,
 * names, VARTYPEs), the object names and which values a queue has are decided here, once.
 *
 * Objects: "MACHINE", "QUEUE=<format name>"; anything else is a session object (always
 * refused with MQ_ERROR_INVALID_PARAMETER, as Windows does). A failure returns its sl_err and
 * a reason, and no values.
 *
 * Redesign note: format names still take the HTTP door's object (mq/formatname.c, moving to
 * the node on branch r-mqh), so the entry points take `struct mgmt *` and use only its node
 * and the format-name calls; the caller's rights are mq_caller (mgmt_internal.h, moving
 * with them).
 */
#ifndef SL_MQ_INFO_H
#define SL_MQ_INFO_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "mq/caller.h"
#include "mq/mq.h"
#include "link/link.h"
#include "qm/qm.h"

struct mq_caller;

/* VARTYPEs of the properties (MS-OAUT / MS-MQMQ numbers, as on the wire) */
enum {
    MQ_VT_EMPTY = 0,
    MQ_VT_NULL = 1,
    MQ_VT_I4 = 3,
    MQ_VT_VARIANT = 12,
    MQ_VT_UI4 = 19,
    MQ_VT_I8 = 20,
    MQ_VT_UI8 = 21,
    MQ_VT_LPWSTR = 31,
    MQ_VT_BLOB = 65,
    MQ_VT_CLSID = 72,
    MQ_VT_VECTOR = 0x1000,
};
enum { MQ_PROP_EOD_SOURCE_INFO = 24, MQ_PROP_CONNECTION_HISTORY = 25 };

/* One property: its number, its name after PROPID_MGMT_MSMQ_ / PROPID_MGMT_QUEUE_, its VT. */
typedef struct mq_prop_def {
    int id;
    const char *name;
    uint16_t vt;
} mq_prop_def;

/* MS-MQMQ SEQUENCE_INFO (the EOD_* blobs): 16 bytes on the wire, see mq_seqinfo_bytes. */
typedef struct mq_seqinfo {
    uint64_t seq_id;
    uint32_t seq_no, prev_no; /* low 32 bits of the 64-bit numbers, in the blob */
    uint64_t seq_no64, prev_no64;
} mq_seqinfo;

typedef enum mq_kind {
    MQ_V_NULL,    /* the object has no such value */
    MQ_V_INT,     /* i */
    MQ_V_STR,     /* s */
    MQ_V_SEQINFO, /* seq (a VT_BLOB) */
    MQ_V_SENDER,  /* a sending QM: guid (its bytes in order), s its node name (a VT_CLSID) */
    MQ_V_LIST,    /* items[n]: a vector; a VT_VARIANT vector's elements are vectors too */
} mq_kind;

typedef struct mq_value {
    mq_kind kind;
    int64_t i;
    char *s;
    uint8_t guid[16];
    mq_seqinfo seq;
    struct mq_value *items;
    size_t n;
} mq_value;

void mq_value_free(mq_value *v); /* its contents; v itself is the caller's */
/* SEQUENCE_INFO's 16 bytes: SeqID, SeqNo, PrevNo, little endian. */
void mq_seqinfo_bytes(const mq_seqinfo *s, uint8_t out[16]);
/* "VT_LPWSTR|VT_VECTOR" for MQ_VT_LPWSTR | MQ_VT_VECTOR (the HTTP API's "vt"), for the
 * types of the tables; "VT_NULL" for any other. */
const char *mq_vt_name(uint16_t vt);

/* A property by number, full name (PROPID_MGMT_QUEUE_TYPE) or short name (TYPE), from the
 * machine's table or a queue's. NULL for a name of the other table or an unknown one
 * (MQ_ERROR_ILLEGAL_PROPID). Aliases (USED_QUOTA) keep their own name. */
const mq_prop_def *mq_info_prop_parse(const char *s, int machine);
/* By number; NULL when id is no property of that object. */
const mq_prop_def *mq_info_prop(int machine, int id);

/* R_QMMgmtGetInfo's object: the machine (*machine set), or a queue the caller may see (like
 * its GET: users of its vhost). Session objects have no properties. */
sl_err mq_info_object(mq_state *mq, const mq_caller *who, const char *object, const char *vhost,
                      int *machine, qm_queue **q, char *err, size_t errlen);
/* A property's value into *out (free with mq_value_free) and the VT it has here (MQ_VT_NULL
 * where the object has none). id must be a property of the object (mq_info_prop). The
 * machine's lists and totals cover the vhosts who may list. */
void mq_info_value(mq_state *mq, const mq_caller *who, int machine, qm_queue *q, int id,
                   uint16_t *vt, mq_value *out);
/* One queue property of the queue fmt names, without a caller (the management objects check
 * theirs first): SL_ERR_ILLEGAL_PROPID, or the format name's failure, with err. */
sl_err mq_info_queue_value(mq_state *mq, const char *fmt, const char *vhost, int id, uint16_t *vt,
                           mq_value *out, char *err, size_t errlen);

/* PROPID_MGMT_QUEUE_FOREIGN's string of an outgoing queue ("YES", "NO", "UNKNOWN"). */
const char *mq_info_foreign_name(eod_foreign f);
/* The name of an outgoing queue's connection-history status (eod_hist.status: "InProcess",
 * "Established", "SocketConnectFailure", ...; "UnknownFailure" for any other). */
const char *mq_info_hist_status_name(uint32_t status);

/* info_outgoing.c: the values that differ for an outgoing queue (every property but PATHNAME,
 * FORMATNAME and the counts), and EOD_SOURCE_INFO of a destination queue. */
void mq_info_outgoing_value(qm_queue *q, int id, uint16_t *vt, mq_value *out);
void mq_info_eod_source(mq_state *mq, qm_queue *q, mq_value *out);
void mq_seqinfo_of(const eod_seqinfo *l, mq_seqinfo *out);

/* Set v (zeroed, or freed first) to an integer / a copy of a string. */
void mq_value_int(mq_value *v, int64_t i);
void mq_value_str(mq_value *v, const char *s);

#endif
