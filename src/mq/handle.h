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

struct link_addr;

enum handle_kind { HANDLE_LOCAL = 0, HANDLE_REMOTE };

/* A door reads these fields for its views; only handle.c changes them. */
typedef struct handle {
    ctx_entry e; /* first: the table holds &e */
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
} handle;

/* A link_rpc_cb: the owner's answer (text; NULL with err when none came). */
typedef void (*handle_answer_fn)(void *ctx, const char *reply, const char *err);

/* Set up the table of mq->handles (mq_new). */
void mq_handles_init(mq_state *mq);

/* MQACCESS / MQSHARE: "receive", "peek|admin", "MQ_RECEIVE_ACCESS" (any case, '|' ',' '+'
 * or ' ' between) -> the bits; -1 when it names none. */
int handle_access_parse(const char *s, uint32_t *out);
/* A raw MQACCESS value (1..0xFF) / MQSHARE value (MQ_DENY_NONE, MQ_DENY_RECEIVE_SHARE) a
 * door was given: 1 when an open takes it. */
int handle_access_valid(int64_t v);
int handle_share_valid(int64_t v);
/* The bits as "receive|peek" (buf of 64 bytes holds every combination). */
void handle_access_str(uint32_t access, char *buf, size_t len);
/* "deny_none" / "deny_receive" (also with '-', MQ_DENY_NONE, MQ_DENY_RECEIVE_SHARE) -> the
 * share mode; -1 otherwise. */
int handle_share_parse(const char *s, int *out);

/* Where a format name leads for an open: a queue of this node (*q), or of another node
 * (*remote = 1, its address in *ra). The same rules for every door. */
sl_err handle_resolve(mq_state *mq, const char *fmt, const char *vhost, uint32_t access,
                      qm_queue **q, struct link_addr *ra, int *remote, char *reason, size_t rlen);
/* A queue of this node by its AMQP name in vhost (NULL: "/"): SL_ERR_QUEUE_NOT_FOUND with
 * reason when there is none. */
sl_err handle_resolve_name(mq_state *mq, const char *vhost, const char *name, size_t len,
                           qm_queue **q, char *reason, size_t rlen);
/* Open a queue of this node as user: the access check, the handle, the queue descriptor. */
sl_err handle_open_local(mq_state *mq, const char *user, qm_queue *q, uint32_t access, int share,
                         handle **out, char *reason, size_t rlen);
/* The open of a remote proxy (MS-MQQP RemoteQMOpenQueue at the owner), in three steps:
 *   handle_open_remote      a proxy, busy; the owner is asked which queue the name is;
 *   handle_remote_resolved  its answer: the user is checked on that name, then the owner is
 *                           asked to open exactly it;
 *   handle_remote_opened    its answer: checked again on the queue opened, the context taken.
 * reply is the owner's answer text (NULL when none came). On an error the handle is left to
 * the caller (to report, then handle_discard); *owner_failed says that the owner refused
 * (its answer carries its HRESULT: handle_owner_hresult). */
sl_err handle_open_remote(mq_state *mq, const char *user, const char *fmt,
                          const struct link_addr *ra, uint32_t access, int share, const char *vhost,
                          handle_answer_fn cb, void *ctx, handle **out, char *reason, size_t rlen);
sl_err handle_remote_resolved(mq_state *mq, const char *user, handle *h, const char *reply,
                              handle_answer_fn cb, void *ctx, int *owner_failed, char *reason,
                              size_t rlen);
sl_err handle_remote_opened(mq_state *mq, const char *user, handle *h, const char *reply,
                            int *owner_failed, char *reason, size_t rlen);
/* Purge Queue through a handle: the user's right asked again on the name the handle holds;
 * a local handle purges its incarnation (*n: messages purged); a remote proxy asks its owner
 * (RemoteQMPurgeQueue): *pending, and cb(ctx, ...) brings the owner's answer, which
 * handle_purge_answered reads (the handle is busy until then). */
sl_err handle_purge(mq_state *mq, const char *user, handle *h, uint64_t *n, int *pending,
                    handle_answer_fn cb, void *ctx, char *reason, size_t rlen);
/* The owner's purge answer (reply: its text, NULL when none): the handle is no longer busy.
 * SL_OK with the owner's counts, or SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE when the owner
 * refused or did not answer (handle_owner_hresult tells its HRESULT). */
sl_err handle_purge_answered(handle *h, const char *reply, uint64_t *purged, uint64_t *pending);
/* The handle's format name (MQHandleToFormatName), after the same access check as every
 * operation through it: *fmt stays the handle's (valid while it is open). */
sl_err handle_format_name(mq_state *mq, const char *user, handle *h, const char **fmt, char *err,
                          size_t errlen);
/* Close Queue and forget the handle (a remote one tells its owner in the background). */
void handle_discard(mq_state *mq, handle *h);
/* The handle id names (exactly CTX_ID_LEN lower-case hex digits), whoever owns it; NULL. */
handle *handle_find(mq_state *mq, const char *id);
/* The handle id names for user (ctx_lookup's rules and errors). */
sl_err handle_lookup(mq_state *mq, const char *id, const char *user, handle **out, char *err,
                     size_t errlen);
/* who's handles, or with all every user's (administrators only: SL_ERR_ACCESS_REFUSED with
 * reason otherwise), in open order; the caller frees *v. */
sl_err handle_list(mq_state *mq, const mq_caller *who, int all, handle ***v, size_t *n,
                   char *reason, size_t rlen);
const char *handle_id(const handle *h);
/* The user that opened it (a remote open's answers are checked as that user). */
const char *handle_owner(const handle *h);
uint64_t handle_session(const handle *h);
void handle_set_session(handle *h, uint64_t session);
int handle_busy(const handle *h);
void handle_answered(handle *h); /* the owner answered: no longer busy */
int handle_is_remote(const handle *h);
/* The owner's HRESULT in its answer text (MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE without). */
uint32_t handle_owner_hresult(const char *reply);
/* Every handle a DCE/RPC session opened, closed with the session (its rundown). */
void handles_rundown_session(mq_state *mq, uint64_t session);

#endif
