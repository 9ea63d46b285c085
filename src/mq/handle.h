/* handle.h - MSMQ queue handles for every door: MS-MQMP's rpc_QMOpenQueueInternal,
 * rpc_ACPurgeQueue, rpc_ACCloseHandle and rpc_ACHandleToFormatName as plain calls. The HTTP
 * API (mgmt/api_handles.c) and DCE/RPC (rpc/qmcomm.c) translate their wire to these; the
 * resolution, the rights, the descriptors and the remote proxies are handle.c's, once.
 */
#ifndef SL_MQ_HANDLE_H
#define SL_MQ_HANDLE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "mq/caller.h"
#include "mq/ctxtab.h"
#include "mq/mq.h"
#include "qm/qm.h"

struct eod_addr;

enum handle_kind { HANDLE_LOCAL = 0, HANDLE_REMOTE };

/* A door reads these fields for its views; only handle.c changes them. */
typedef struct mq_handle {
    mq_ctx_entry e; /* first: the table holds &e */
    int kind;
    uint64_t rpc_session; /* opened over DCE/RPC (rpc/qmcomm.c): its session; 0 over HTTP */
    qm_qdesc *d;          /* HANDLE_LOCAL: the open descriptor */
    char *format_name;    /* the queue's format name when it was opened */
    char *vhost, *queue;
    uint64_t incarnation;
    /* HANDLE_REMOTE: the owning node, the context it gave, the access asked */
    char *host;
    int port;
    char *context; /* NULL while the open is on its way */
    uint32_t access;
    int share;
} mq_handle;

/* A link_rpc_cb: the owner's answer (text; NULL with err when none came). */
typedef void (*mq_handle_answer_fn)(void *ctx, const char *reply, const char *err);

/* Set up the table of mq->handles (mq_new). */
void mq_handles_init(mq_state *mq);

/* MQACCESS / MQSHARE: "receive", "peek|admin", "MQ_RECEIVE_ACCESS" (any case, '|' ',' '+'
 * or ' ' between) -> the bits; -1 when it names none. */
int mq_handle_access_parse(const char *s, uint32_t *out);
/* A raw MQACCESS value (1..0xFF) / MQSHARE value (MQ_DENY_NONE, MQ_DENY_RECEIVE_SHARE) a
 * door was given: 1 when an open takes it. */
int mq_handle_access_valid(int64_t v);
int mq_handle_share_valid(int64_t v);
/* The bits as "receive|peek" (buf of 64 bytes holds every combination). */
void mq_handle_access_str(uint32_t access, char *buf, size_t len);
/* "deny_none" / "deny_receive" (also with '-', MQ_DENY_NONE, MQ_DENY_RECEIVE_SHARE) -> the
 * share mode; -1 otherwise. */
int mq_handle_share_parse(const char *s, int *out);

/* Where a format name leads for an open: a queue of this node (*q), or of another node
 * (*remote = 1, its address in *ra). The same rules for every door. */
sl_err mq_handle_resolve(mq_state *mq, const char *fmt, const char *vhost, uint32_t access,
                         qm_queue **q, struct eod_addr *ra, int *remote, char *reason, size_t rlen);
/* A queue of this node by its AMQP name in vhost (NULL: "/"): SL_ERR_QUEUE_NOT_FOUND with
 * reason when there is none. */
sl_err mq_handle_resolve_name(mq_state *mq, const char *vhost, const char *name, size_t len,
                              qm_queue **q, char *reason, size_t rlen);
/* Open a queue of this node as user: the access check, the handle, the queue descriptor. */
sl_err mq_handle_open_local(mq_state *mq, const char *user, qm_queue *q, uint32_t access, int share,
                            mq_handle **out, char *reason, size_t rlen);
/* The open of a remote proxy (MS-MQQP RemoteQMOpenQueue at the owner), in three steps:
 *   mq_handle_open_remote      a proxy, busy; the owner is asked which queue the name is;
 *   mq_handle_remote_resolved  its answer: the user is checked on that name, then the owner is
 *                           asked to open exactly it;
 *   mq_handle_remote_opened    its answer: checked again on the queue opened, the context taken.
 * reply is the owner's answer text (NULL when none came). On an error the handle is left to
 * the caller (to report, then mq_handle_discard); *owner_failed says that the owner refused
 * (its answer carries its HRESULT: mq_handle_owner_hresult). */
sl_err mq_handle_open_remote(mq_state *mq, const char *user, const char *fmt,
                             const struct eod_addr *ra, uint32_t access, int share,
                             const char *vhost, mq_handle_answer_fn cb, void *ctx, mq_handle **out,
                             char *reason, size_t rlen);
sl_err mq_handle_remote_resolved(mq_state *mq, const char *user, mq_handle *h, const char *reply,
                                 mq_handle_answer_fn cb, void *ctx, int *owner_failed, char *reason,
                                 size_t rlen);
sl_err mq_handle_remote_opened(mq_state *mq, const char *user, mq_handle *h, const char *reply,
                               int *owner_failed, char *reason, size_t rlen);
/* Purge Queue through a handle: the user's right asked again on the name the handle holds;
 * a local handle purges its incarnation (*n: messages purged); a remote proxy asks its owner
 * (RemoteQMPurgeQueue): *pending, and cb(ctx, ...) brings the owner's answer, which
 * mq_handle_purge_answered reads (the handle is busy until then). */
sl_err mq_handle_purge(mq_state *mq, const char *user, mq_handle *h, uint64_t *n, int *pending,
                       mq_handle_answer_fn cb, void *ctx, char *reason, size_t rlen);
/* The owner's purge answer (reply: its text, NULL when none): the handle is no longer busy.
 * SL_OK with the owner's counts, or SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE when the owner
 * refused or did not answer (mq_handle_owner_hresult tells its HRESULT). */
sl_err mq_handle_purge_answered(mq_handle *h, const char *reply, uint64_t *purged,
                                uint64_t *pending);
/* The handle's format name (MQHandleToFormatName), after the same access check as every
 * operation through it: *fmt stays the handle's (valid while it is open). */
sl_err mq_handle_format_name(mq_state *mq, const char *user, mq_handle *h, const char **fmt,
                             char *err, size_t errlen);
/* Close Queue and forget the handle (a remote one tells its owner in the background). */
void mq_handle_discard(mq_state *mq, mq_handle *h);
/* The handle id names (exactly CTX_ID_LEN lower-case hex digits), whoever owns it; NULL. */
mq_handle *mq_handle_find(mq_state *mq, const char *id);
/* The handle id names for user (mq_ctx_lookup's rules and errors). */
sl_err mq_handle_lookup(mq_state *mq, const char *id, const char *user, mq_handle **out, char *err,
                        size_t errlen);
/* who's handles, or with all every user's (administrators only: SL_ERR_ACCESS_REFUSED with
 * reason otherwise), in open order; the caller frees *v. */
sl_err mq_handle_list(mq_state *mq, const mq_caller *who, int all, mq_handle ***v, size_t *n,
                      char *reason, size_t rlen);
const char *mq_handle_id(const mq_handle *h);
/* The user that opened it (a remote open's answers are checked as that user). */
const char *mq_handle_owner(const mq_handle *h);
uint64_t mq_handle_session(const mq_handle *h);
void mq_handle_set_session(mq_handle *h, uint64_t session);
int mq_handle_busy(const mq_handle *h);
void mq_handle_answered(mq_handle *h); /* the owner answered: no longer busy */
int mq_handle_is_remote(const mq_handle *h);
/* The owner's HRESULT in its answer text (MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE without). */
uint32_t mq_handle_owner_hresult(const char *reply);
/* Every handle a DCE/RPC session opened, closed with the session (its rundown). */
void mq_handles_rundown_session(mq_state *mq, uint64_t session);

#endif
