/* mgmt_internal.h - what the files of src/mgmt/ share: the mgmt object, one HTTP request, the
 * reply helpers and the handlers the router calls.
 *
 *   mgmt.c          the HTTP(S) server's settings (http/server.h), auth, CSRF rules, routing
 *   http_json.c     replies (JSON, errors with HRESULTs), query/body access, AMQP tables <-> JSON
 *   msg_json.c      messages <-> JSON (properties, payload encodings) for publish, get, peek
 *   api_queues.c    /api/queues... (list, declare, delete, purge, get, peek, subqueues)
 *   api_exchanges.c /api/exchanges... (+ publish) and /api/bindings...
 *   api_misc.c      overview, nodes, vhosts, connections, channels, consumers
 *   api_access.c    users, whoami, permissions, topic permissions, vhost and user limits
 *   api_msmq.c      R_QMMgmtAction / R_QMMgmtGetInfo and the MC-MQAC object view
 *   api_outgoing.c  outgoing queues: GET /api/msmq/outgoing, their properties and view
 *   api_move.c      move between queues/subqueues, transactions opened over HTTP (mq/move.h)
 *   api_handles.c   MSMQ queue handles: open, purge, close, list (over mq/handle.h)
 *   api_mgmtobj.c   MC-MQAC management objects (MSMQManagement): create, init, members
 *   pager.c         list replies (queues, exchanges, bindings, connections, channels,
 *                   consumers, vhosts) with RabbitMQ's pagination, never stalling the loop;
 *                   the walking, filtering, sort keys and pages are node/lister.c's
 *   api_definitions.c  /api/definitions: HTTP over defs/ (the document's format lives there)
 *   metrics.c       /metrics (Prometheus text)
 *   session.c       the web console's login sessions (cookie auth, /api/session)
 *   static.c        the web console's files, built into the binary (console/)
 *
 * Every handler runs on the broker's loop thread (MHD is driven from it, http/server.c), so
 * handlers read and change qm state directly, through qm.h only. A handler replies exactly once
 * (reply_* return the MHD result to hand back to libmicrohttpd).
 */
#ifndef SL_MGMT_INTERNAL_H
#define SL_MGMT_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>

#include "core/base64.h"
#include "core/buf.h"
#include "defs/defs.h"
#include "defs/json.h"
#include "http/server.h"
#include "http/session.h"
#include "http/static.h"
#include "mgmt/mgmt.h"
#include "mq/caller.h"
#include "mq/ctxtab.h"
#include "mq/formatname.h"
#include "mq/mq.h"
#include "mq/value_json.h"
#include "node/lister.h"
#include "node/node.h"
#include "node/rules.h"
#include "node/totals.h"

#define MGMT_MAX_BODY (16u * 1024 * 1024) /* request bodies beyond this: 413 */
#define MGMT_MAX_SEGS 16

struct mgmt {
    sl_node *n;
    http_server *srv; /* the HTTP(S) server: listeners, guard, requests in flight */
    mq_state *mq;     /* MSMQ's handles and transactions, shared with the DCE/RPC door */
    char addr[64];    /* the listeners, as started (http_server_addr...) */
    int port;
    sl_acceptor *acceptor; /* the HTTP listener's (http_server_acceptor), for /metrics */
    int https;             /* the HTTPS listener (management.ssl.*) is on */
    char tls_addr[64];
    int tls_port;
    uint64_t started_wall_ms;
    /* MC-MQAC management objects opened over HTTP (ids of mq->run_id) */
    mq_ctxtab mobjs;
    sl_timer rundown_t;      /* closes the idle ones */
    struct req *authing;     /* requests whose password check runs (req.auth) */
    node_jobs jobs;          /* list requests walking every item, a slice per turn (pager.c) */
    http_sessions *sessions; /* the console's login sessions (session.c, http/session.h) */
    struct cl_ops *cl_ops;   /* the operator's cluster actions (cluster/ops.h), one at a time */
    sl_timer fig_t;          /* a cluster node's figures to its member (stats/NAME), periodically */
};

typedef struct req {
    http_req h; /* first: the server's (body, too_large, suspension; http/server.h) */
    mgmt *m;
    struct MHD_Connection *conn; /* h's, under their old names */
    const char *method;          /* "GET", "PUT", ... */
    char *segs[MGMT_MAX_SEGS];   /* percent-decoded path segments, "api" stripped */
    size_t nsegs;
    int authed, is_admin;
    int via_session; /* authenticated by the console's cookie, not basic auth */
    unsigned tags;   /* ACC_TAG_* of the authenticated user */
    char *user;      /* authenticated user name */
    json_t *json;    /* parsed body, owned */
    int responded;
    /* asynchronous replies (mgmt_req_suspend / mgmt_req_resume, over http_suspend / http_resume):
     * the request is held by MHD and by whoever will answer it; freed when both let go */
    enum MHD_Result (*on_resume)(struct req *r);
    char *async_reply; /* what the answer brought (owned) */
    char *async_err;
    char async_tag[48];  /* the handler's own, for its on_resume (a handle id...) */
    struct pager *pager; /* a suspended list request's job (pager.c) */
    /* A reply that promises a change on disk waits for it: the request is suspended with
     * its response held (http_hold) and queued when the sync completes (mgmt_req_respond). */
    uint8_t no_store; /* touches no store (a cluster action): its reply never waits */
    /* A slow password (Argon2id) checked on the verifier's thread (access/verifier.h) while
     * the body comes in; the request waits for it (suspended) before it is routed. The job
     * holds a reference; the request is on m->authing until the answer. */
    struct node_login *auth; /* node/login.h */
    uint8_t auth_waiting;
    struct req *auth_next;
} req;

typedef enum MHD_Result (*api_fn)(req *r);

/* Connections the HTTP(S) server holds (/metrics). */
static inline unsigned mgmt_conns(const mgmt *m)
{
    return http_server_conns(m->srv);
}

static inline qm_node *mgmt_req_node(req *r)
{
    return r->m->n->qm;
}
static inline int mgmt_req_is(req *r, const char *method)
{
    return !strcmp(r->method, method);
}

/* ---- http_json.c: replies ---- */
/* Reply with j (stolen). GET replies honour ?columns=a,b (RabbitMQ). */
enum MHD_Result mgmt_reply_json(req *r, unsigned status, json_t *j);
enum MHD_Result mgmt_reply_empty(req *r, unsigned status);
enum MHD_Result mgmt_reply_text(req *r, unsigned status, const char *ctype, char *text, size_t len);
/* A request that may have changed durable state answers only once the store has it on disk
 * (the same promise as AMQP replies, which wait for the turn's group commit). */
/* Queue resp (taken) with status: at once, or, for a request that changed something (not
 * GET) and succeeded (< 400), once the store has it on disk, without blocking the loop
 * meanwhile. Errors and requests marked no_store go at once. */
enum MHD_Result mgmt_req_respond(req *r, unsigned status, struct MHD_Response *resp);
/* {"error": error, "reason": ...} */
enum MHD_Result mgmt_reply_error(req *r, unsigned status, const char *error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A failure named by an sl_err: HTTP status from the error, RabbitMQ's error/reason, and
 * the MSMQ "hresult" / "hresult_name". */
enum MHD_Result mgmt_reply_sl_err(req *r, sl_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* MSMQ-shaped result: {"hresult", "hresult_name", ...extra}; 200 on SL_OK, 4xx otherwise.
 * extra (stolen, may be NULL) is merged in. */
enum MHD_Result mgmt_reply_hresult(req *r, sl_err e, json_t *extra, const char *reason);
/* A failure another node answered: its HRESULT string, name and our reason; the HTTP status
 * is ours for that HRESULT (502 when we do not know it). extra (stolen) is merged in. */
enum MHD_Result mgmt_reply_remote_hresult(req *r, const char *hresult, const char *name,
                                          const char *reason, json_t *extra);
enum MHD_Result mgmt_reply_method_not_allowed(req *r);
enum MHD_Result mgmt_reply_not_found(req *r);
/* Write "0xC00E0006" into buf (11 bytes at least). */
void mgmt_hresult_str(sl_err e, char *buf, size_t len);

/* ---- mgmt.c: asynchronous replies ---- */
/* The answer comes later (from a link, say): MHD holds the connection, the request stays
 * alive until mgmt_req_resume; on_resume then builds the reply on the loop thread. */
void mgmt_req_suspend(req *r, enum MHD_Result (*on_resume)(req *r));
/* The answer is there (reply / err stored by the caller); call once. Safe after the API was
 * stopped (the request is then just freed). */
void mgmt_req_resume(req *r);
/* A link_rpc_cb whose ctx is the suspended request: keeps the reply or the error, resumes. */
void mgmt_req_link_done(void *ctx, const char *reply, const char *err);
/* The answer a resumed request got, parsed (caller decrefs); NULL with r->async_err set when
 * there is none or it is not a JSON object. */
json_t *mgmt_req_async_json(req *r);

/* ---- http_json.c: request access ---- */
/* Query argument, percent-decoded; NULL when absent. Valid for the request's life. */
const char *mgmt_req_query(req *r, const char *key);
int mgmt_req_query_bool(req *r, const char *key);
/* The body as a JSON object. NULL after replying 400 when it is not one (empty bodies are
 * {} when allow_empty). */
json_t *mgmt_req_body(req *r, int allow_empty);
/* 1 when no resource alarm stops what needs the disk (a durable declare, a binding, a
 * definitions import; memory_too: a publish, which the memory alarm stops as well); 0 after
 * replying 503 with MQ_ERROR_INSUFFICIENT_RESOURCES. */
int mgmt_req_disk_ok(req *r, int memory_too);
/* Vhost by name; NULL after replying 404. */
qm_vhost *mgmt_req_vhost(req *r, const char *name);
/* Writes need the administrator tag: 1, or 0 after replying 403 "Not administrator user". */
int mgmt_req_require_admin(req *r);
/* RabbitMQ's filter_vhost for listings: administrators see every vhost, other users those
 * they have a permission entry on. */
int mgmt_req_vhost_listed(req *r, const char *vhost);
/* RabbitMQ's is_authorized_vhost: 1, or 0 after replying 403 "User not authorised to access
 * virtual host". */
int mgmt_req_vhost_access(req *r, const char *vhost);
/* The AMQP permission check for the request's user on a resource of vhost (which it must be
 * able to log into, administrators included): 1, or 0 after replying 403 with the access
 * module's text. */
int mgmt_req_allowed(req *r, const char *vhost, acc_kind kind, const char *name, acc_perm perm);

/* ---- pager.c: lists that never stall the loop (RabbitMQ's pagination) ---- */
enum {
    PAGER_QUEUES, /* queues and exchanges: in name order (qm's sl_oset), pages by rank */
    PAGER_EXCHANGES,
    PAGER_BINDINGS, /* the others: walked whole in slices, kept as texts (pager.c) */
    PAGER_CONNECTIONS,
    PAGER_CHANNELS,
    PAGER_CONSUMERS,
    PAGER_STREAM_PUBLISHERS, /* RabbitMQ's stream management plugin: /api/stream/... */
    PAGER_STREAM_CONSUMERS,
    PAGER_VHOSTS,
};
/* What a list of the other kinds covers (NULL / 0: no restriction). */
typedef struct pager_scope {
    const char *vhost;             /* only this vhost's (NULL: every vhost the user may list) */
    const char *conn;              /* channels: only this connection's */
    const char *protocol, *stream; /* only a protocol's connections; a stream's publishers */
    const char *source;            /* bindings: only from this exchange ("" the default one) */
    const char *dest;              /* bindings: only to this queue (dest_is_queue) or exchange */
    int dest_is_queue;
    int empty; /* nothing (a subqueue's bindings): the reply's shape only */
} pager_scope;
/* GET of bindings, connections, channels, consumers or vhosts: the same parameters and
 * replies as mgmt_pager_list, in RabbitMQ's default order of each list. */
enum MHD_Result mgmt_pager_list_scoped(req *r, int kind, const pager_scope *s);
/* The items of those lists as the API shows them (api_misc.c, api_exchanges.c), from the
 * door's views (node/clients.h). */
json_t *mgmt_conn_json(mgmt *m, const node_client *c);
/* The connection named name (vhost: a stream connection of it, /api/stream's): GET or DELETE
 * it, or GET what is under it (sub: channels; with vhost publishers, consumers), or 404. */
enum MHD_Result mgmt_connection(req *r, const char *name, const char *vhost, const char *sub,
                                int too_deep);
json_t *mgmt_channel_json(mgmt *m, const node_client *c, const node_channel *ch);
json_t *mgmt_consumer_json(mgmt *m, const node_client *c, const node_channel *ch,
                           const node_consumer *o);
json_t *mgmt_stream_json(mgmt *m, const node_client *c, const node_publisher *p,
                         const node_subscription *s); /* a publisher or a subscription */
json_t *mgmt_vhost_json(mgmt *m, qm_vhost *vh);
json_t *mgmt_binding_json(qm_binding *b);
json_t *mgmt_default_binding_json(qm_queue *q); /* the default exchange's, to q */
/* GET of the queues or exchanges of one vhost (NULL = all): page, page_size, name,
 * use_regex, sort, sort_reverse, columns. Replies, or suspends the request until a job has
 * seen every item. */
enum MHD_Result mgmt_pager_list(req *r, int kind, const char *only_vhost);
/* GET .../messages?count&offset: a peek in slices, nothing paged in (qm_queue_peek_view). */
enum MHD_Result mgmt_pager_peek(req *r, qm_queue *q, long long off, long long count,
                                const char *enc, int64_t truncate);
/* on_resume for a request whose job is done. */
enum MHD_Result mgmt_pager_resume(req *r);
void mgmt_pager_init(mgmt *m);
/* The request is freed: its finished job (if any) goes too. */
void mgmt_pager_release(req *r);
void mgmt_pager_stop_all(mgmt *m);
json_t *mgmt_exchange_json(qm_exchange *x);

/* ---- msg_json.c ---- */
/* RabbitMQ's /get message view plus Sluice's lookup_id and move_count. encoding "auto" or
 * "base64"; truncate < 0 = whole payload. */
json_t *mgmt_msg_view(const qm_position *pos, const qm_queue *q, const char *encoding,
                      int64_t truncate, uint64_t remaining);
/* 1 with RabbitMQ's 405 text in why when q (or the queue of a subqueue) is exclusive: it
 * belongs to its connection, and no HTTP request is that connection (the rule is
 * node_queue_locked, node/rules.c). */
static inline int mgmt_queue_exclusive_locked(const qm_queue *q, char *why, size_t whylen)
{
    return node_queue_locked(q, NULL, why, whylen) != SL_OK;
}
/* Build a message from an /exchanges/.../publish body; NULL after replying 400. A BCC header
 * is taken out of the stored properties: its array content is appended to bcc, for routing. */
qm_message *mgmt_msg_from_publish(req *r, json_t *body, const char *exchange, sl_buf *bcc);

/* ---- api_msmq.c: R_QMMgmtAction / R_QMMgmtGetInfo over HTTP. The rules and values are
 * mq/'s (mq/action.h, mq/info.h: mq_info_object; mq/caller.h: mq_vhost_listed), which every door
 * calls; these turn them into the API's JSON. ---- */
/* mq_caller: mq/caller.h */
#include "mq/action.h"
#include "mq/info.h"
/* An action's result ({"connected"} or {"state"}; NULL for none), new reference. */
json_t *mgmt_msmq_action_json(const mq_action_result *res);
/* One queue property of the queue fmt names as JSON (*value owned by the caller) and its VT
 * name; a failure HRESULT with err, and no value (mq_info_queue_value). */
sl_err mgmt_msmq_queue_prop(mgmt *m, const char *fmt, const char *vhost, int id, json_t **value,
                            const char **vt, char *err, size_t errlen);

/* ---- handlers ---- */
enum MHD_Result mgmt_api_queues(req *r);
enum MHD_Result mgmt_api_exchanges(req *r);
enum MHD_Result mgmt_api_bindings(req *r);
enum MHD_Result mgmt_api_overview(req *r);
enum MHD_Result mgmt_api_cluster(req *r); /* api_cluster.c */
json_t *mgmt_cluster_view(mgmt *m);       /* GET /api/cluster's answer */
void mgmt_cluster_init(mgmt *m);          /* at mgmt_start, first */
void mgmt_cluster_stop(mgmt *m);          /* a cluster action in progress is let go */
enum MHD_Result mgmt_api_nodes(req *r);
json_t *mgmt_node_figures(mgmt *m); /* this node's /api/nodes entry */
enum MHD_Result mgmt_api_vhosts(req *r);
enum MHD_Result mgmt_api_users(req *r);
enum MHD_Result mgmt_api_whoami(req *r);
enum MHD_Result mgmt_api_permissions(req *r);
enum MHD_Result mgmt_api_topic_permissions(req *r);
enum MHD_Result mgmt_api_vhost_limits(req *r);
enum MHD_Result mgmt_api_user_limits(req *r);
/* defs/json.h: a tag list as a JSON array; limits; a user as RabbitMQ shows it */
enum MHD_Result mgmt_api_connections(req *r);
enum MHD_Result mgmt_api_channels(req *r);
enum MHD_Result mgmt_api_consumers(req *r);
enum MHD_Result mgmt_api_stream(req *r);
enum MHD_Result mgmt_api_msmq(req *r);
enum MHD_Result mgmt_api_transactions(req *r);
/* /api/msmq/handles... and /api/msmq/management... (mgmt_api_msmq routes them) */
enum MHD_Result mgmt_api_handles(req *r);
enum MHD_Result mgmt_api_mgmtobj(req *r);
/* api_mgmtobj.c: set up and close the table (mgmt_start / mgmt_stop) */
void mgmt_mgmtobj_init(mgmt *m);
/* api_definitions.c: /api/definitions[/{vhost}] over defs/defs.h */
enum MHD_Result mgmt_api_definitions(req *r);
enum MHD_Result mgmt_serve_metrics(req *r);
/* api_outgoing.c */
enum MHD_Result mgmt_api_outgoing(req *r);
/* POST /api/msmq/remote: a request to another node over a link (link_rpc_call) */
enum MHD_Result mgmt_api_remote(req *r);
json_t *mgmt_outgoing_json(mgmt *m, qm_queue *q);
/* The MC-MQAC members that differ for an outgoing queue, set into o. */
void mgmt_outgoing_view(mgmt *m, qm_queue *q, json_t *o);
/* api_queues.c: the JSON of one queue; full adds the MC-MQAC view and subqueues. */
json_t *mgmt_queue_json(mgmt *m, qm_queue *q, int full);
/* api_move.c: POST /api/queues/{vhost}/{name}/move */
enum MHD_Result mgmt_api_queue_move(req *r, qm_queue *src);
/* api_misc.c: totals used by overview and metrics */
void mgmt_totals_get(mgmt *m, node_totals *t);
/* The same, as viewer r may see them (README "Users, vhosts and permissions"): the vhosts
 * it may list (administrators every one, others those they have a permission entry on), the
 * connections it may list (its own; monitoring and administrator users every one). */
void mgmt_totals_for(req *r, node_totals *t);
/* The same for a caller of any door (DCE/RPC's MACHINE properties). */
void mgmt_totals_of(mgmt *m, const mq_caller *who, node_totals *t);

/* ---- session.c: the console's login sessions ---- */
#define MGMT_SESSION_COOKIE "sluice_session"
/* session limits: config keys mgmt_session_idle_timeout, mgmt_session_max_age, mgmt_session_max */
#define MGMT_SESSION_IDLE_MS(m) ((m)->n->cfg->mgmt_session_idle_timeout_s * 1000ull)
#define MGMT_SESSION_MAX_MS(m) ((m)->n->cfg->mgmt_session_max_age_s * 1000ull)
#define MGMT_SESSION_MAX(m) ((m)->n->cfg->mgmt_session_max)
#define MGMT_CSRF_HEADER "X-Sluice-Request" /* required on a session's non-GET requests */
void mgmt_sessions_init(mgmt *m);
void mgmt_sessions_free(mgmt *m);
/* End the sessions past their time (the rundown timer). */
void mgmt_sessions_sweep(mgmt *m, uint64_t now);
/* The user of a live session with this token (the cookie's value), marked used; NULL when
 * none (unknown, malformed, expired, user deleted or password changed). */
const acc_user *mgmt_session_user(mgmt *m, const char *token);
enum MHD_Result mgmt_api_session(req *r);

/* ---- static.c: the console's files ---- */
/* GET / and the console's files; 404 for anything else outside /api/ and /metrics. */
enum MHD_Result mgmt_serve_static(req *r, const char *url);
/* The built-in file whose path is exactly path (still percent-encoded), or NULL. */
struct console_asset;
const struct console_asset *mgmt_console_find(const char *path);

#endif
