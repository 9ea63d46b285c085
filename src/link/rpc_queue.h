/* rpc_queue.h - the owning node's end of remote queue proxies (issue 10), served over the
 * request / response channel of a node-to-node link (link.h, "Request / response").
 *
 * MS-MQQP's qm2qm methods as JSON operations:
 *   "queue.resolve" {"vhost"?, "queue"} -> {"ok": true, "vhost", "queue"}: the queue the
 *                 name resolves to (as queue.open resolves it), so the asking node checks its
 *                 own user on the real name before it opens anything
 *   "queue.open"  {"vhost"?, "queue", "access"?, "share"?}   RemoteQMOpenQueue
 *                 -> {"ok": true, "context": "<boot hex16>:<id hex16>", "vhost", "queue",
 *                     "incarnation"}
 *   "queue.purge" {"context"}   RemoteQMPurgeQueue -> {"ok": true, "purged", "purge_pending"}
 *   "queue.close" {"context"}   RemoteQMCloseQueue -> {"ok": true}
 *   "queue.getinfo"             R_QMMgmtGetInfo of a queue property (see link_rpc_set_mgmt)
 * Failures: {"ok": false, "hresult": "0x...", "hresult_name", "reason"}: a context of an
 * earlier boot of this node MQ_ERROR_STALE_HANDLE, an unknown one (or one another peer opened)
 * MQ_ERROR_INVALID_HANDLE, a context whose queue was deleted since MQ_ERROR_QUEUE_DELETED
 * (never the purge of a queue declared again under that name).
 *
 * A context is an open queue descriptor (qm_qdesc) of this node held for the peer that opened
 * it, so MS-MQDMPR's sharing rules and incarnations hold across nodes as they do locally. The
 * contexts of a link connection are closed when it goes (MS-MQMP's rundown), and any context
 * unused for LINK_RPC_IDLE_MS is closed too.
 */
#ifndef SL_LINK_RPC_QUEUE_H
#define SL_LINK_RPC_QUEUE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "qm/qm.h"

#define LINK_RPC_MAX_CONTEXTS 10000      /* per peer: MQ_ERROR_INSUFFICIENT_RESOURCES beyond */
#define LINK_RPC_IDLE_MS (3600u * 1000u) /* a context nobody used for an hour is closed */

/* Serve op for peer (the link's node), logged in as user, on link connection conn_id; a
 * context is usable only by the same peer and user. NULL when op is not
 * one of these (the caller answers it); otherwise the reply, malloc'ed JSON. */
char *link_rpc_queue(qm_node *n, uint64_t boot_id, const char *peer, const char *user,
                     uint64_t conn_id, const char *op, json_t *req);
/* The access module the owner asks: a link's user opens a queue (RemoteQMOpenQueue) only
 * with its read permission there (receive or peek), as a local user would (NULL: no checks,
 * unit tests). */
struct acc_db;
void link_rpc_queue_set_access(const struct acc_db *acc);
/* The listing rule for a link's user (queue.info's figures): administrators see every
 * vhost, others those they have a permission entry on (1 with no access module). */
int link_rpc_user_sees_vhost(const char *user, const char *vhost);
/* Management objects bound to a queue of this node from another one (MC-MQAC with a
 * Machine): "queue.getinfo" {"format_name", "vhost"?, "props": [PROPID_MGMT_QUEUE_* ids]}
 * -> {"ok": true, "values": [{"id", "vt", "value"}...]} is answered by the management API,
 * which registers itself here (NULL to unregister); without it such requests fail with
 * MQ_ERROR_SERVICE_NOT_AVAILABLE. */
typedef char *(*link_rpc_mgmt_fn)(void *ctx, const char *peer, const char *user, const char *op,
                                  json_t *req);
void link_rpc_set_mgmt(link_rpc_mgmt_fn fn, void *ctx);

/* Link connection conn_id is gone: close every context it opened. */
void link_rpc_conn_gone(uint64_t conn_id);
/* Close every context (node stop). */
void link_rpc_queue_free_all(void);
/* How many contexts are open (tests, metrics). */
size_t link_rpc_queue_count(void);

#endif
