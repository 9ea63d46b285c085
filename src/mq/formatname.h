/* formatname.h - MSMQ format names and path names <-> this node's queues, for every door
 * (the rules are formatname.c's). */
#ifndef SL_MQ_FORMATNAME_H
#define SL_MQ_FORMATNAME_H

#include <stddef.h>

#include "core/err.h"
#include "mq/mq.h"
#include "qm/qm.h"

struct eod_addr;

/* Resolve an MSMQ format name to a local queue. vhost_hint (may be NULL) names the vhost.
 * SL_ERR_ILLEGAL_FORMATNAME or SL_ERR_QUEUE_NOT_FOUND with err. */
sl_err mq_fmtname_resolve(mq_state *mq, const char *fmt, const char *vhost_hint, qm_queue **out,
                          char *err, size_t errlen);
/* The same for an open (a queue handle): a missing subqueue of an existing queue is created,
 * as MSMQ creates subqueues on their first open. */
sl_err mq_fmtname_open(mq_state *mq, const char *fmt, const char *vhost_hint, qm_queue **out,
                       char *err, size_t errlen);
/* 1 when fmt is a direct format name of a queue of another node (then *out holds its
 * address, port and queue part, ";<subqueue>" included), 0 when it is not (this node's, or
 * not a direct format name), -1 when it names another node but is malformed. */
int mq_fmtname_remote(mq_state *mq, const char *fmt, struct eod_addr *out);
/* 1 when name ("." , "localhost", the node name, the host name, a loopback or bound address)
 * is this node. */
int mq_fmt_is_local_machine(mq_state *mq, const char *name);
/* "host", "host:port", "[v6]:port" -> lower-cased host and port (LINK_DEFAULT_PORT when
 * none); -1 when malformed. */
int mq_fmt_machine_split(const char *machine, char *host, size_t hostlen, int *port);
/* Format name / path name of a queue (see README-fragment.md). */
void mq_fmtname_of(mq_state *mq, const qm_queue *q, char *buf, size_t len);
void mq_pathname_of(mq_state *mq, const qm_queue *q, char *buf, size_t len);
/* A path name (<computer>\private$\<queue>, <computer>\<queue>, <computer>\system$;<q>) as
 * a direct format name; -1 when it is not one. */
int mq_fmtname_from_pathname(const char *path, char *out, size_t len);
/* The computer part of names: the node name after '@'. */
const char *mq_fmt_computer(mq_state *mq);

#endif
