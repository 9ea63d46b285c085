/* mgmtobj_remote.c - QMMgmt Get Info for a management object whose Machine is another node
 * (MC-MQAC with a Machine, reference/msmq.md section 4.2): both ends, over the link's request
 * channel (link_rpc_call), whose requests and answers are JSON text between nodes:
 *
 *   {"op": "queue.getinfo", "format_name", "vhost"?, "props": [PROPID_MGMT_QUEUE_* ids]}
 *   -> {"ok": true, "values": [{"id", "vt", "value"}...], "vhost", "queue"}
 *   |  {"ok": false, "hresult": "0x...", "hresult_name", "reason"}
 *
 * The asking end (mq_mobj_ask) turns the answer into plain values (mq_value) or a failure;
 * the owner's end (registered with link_rpc_set_mgmt by mq_mobj_serve_init) reads the
 * properties through its own R_QMMgmtGetInfo (mq_info_queue_value) after
 * mq_mobj_peer_queue's checks. A value travels as the HTTP API renders it (value_json /
 * value_of are inverses on what value_json makes; a SEQUENCE_INFO's blob carries its 32-bit
 * numbers, beside the 64-bit ones), so nodes of older versions, whose owner end was the HTTP
 * door's, interoperate. The JSON stays in this file: mgmtobj.h is
 * jansson-free.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base64.h"
#include "core/le.h"
#include "core/mem.h"
#include "link/link.h"
#include "link/rpc_queue.h"
#include "mq/mgmtobj.h"
#include "mq/value_json.h"

/* ------------------------------------------------------------------------------------------
 * A value on the wire
 */

/* ------------------------------------------------------------------------------------------
 * The asking end
 */

typedef struct ask {
    char *host;
    int port;
    int n;
    mq_mobj_answer_fn cb;
    void *ctx;
} ask;

void mq_mobj_answer_free(mq_mobj_answer *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->n; i++)
        mq_value_free(&a->values[i]);
    sl_free(a->values);
    sl_free(a->hresult);
    sl_free(a->hresult_name);
    sl_free(a->reason);
    sl_free(a->vhost);
    sl_free(a);
}

static void set_reason(mq_mobj_answer *a, sl_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_reason(mq_mobj_answer *a, sl_err e, const char *fmt, ...)
{
    char reason[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    a->e = e;
    a->reason = sl_xstrdup(reason);
}

static char *dup_or_null(const char *s)
{
    return s ? sl_xstrdup(s) : NULL;
}

/* The owner's answer (or the link's failure) as a plain one. */
static mq_mobj_answer *answer_of(const ask *k, const char *text, const char *err)
{
    mq_mobj_answer *a = sl_xcalloc(1, sizeof *a);
    json_t *reply = text ? json_loads(text, 0, NULL) : NULL;
    if (!json_is_object(reply)) {
        set_reason(a, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE, "node %s:%d did not answer (%s)",
                   k->host, k->port,
                   text  ? "the answer is not a JSON object"
                   : err ? err
                         : "no reply");
        json_decref(reply);
        return a;
    }
    json_t *vals = json_object_get(reply, "values");
    if (!json_is_true(json_object_get(reply, "ok"))) {
        const char *why = json_string_value(json_object_get(reply, "reason"));
        set_reason(a, SL_ERR_INTERNAL, "node %s:%d answered: %s", k->host, k->port,
                   why ? why : "a failure");
        a->owner_refused = 1;
        a->hresult = dup_or_null(json_string_value(json_object_get(reply, "hresult")));
        a->hresult_name = dup_or_null(json_string_value(json_object_get(reply, "hresult_name")));
    } else if (!json_is_array(vals) || json_array_size(vals) != (size_t)k->n ||
               !json_is_string(json_object_get(reply, "vhost"))) {
        set_reason(a, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE,
                   "node %s:%d answered without the values asked for", k->host, k->port);
    } else {
        a->e = SL_OK;
        a->vhost = sl_xstrdup(json_string_value(json_object_get(reply, "vhost")));
        a->n = (size_t)k->n;
        a->values = sl_xcalloc(a->n ? a->n : 1, sizeof *a->values);
        for (size_t i = 0; i < a->n; i++)
            mq_value_of_json(json_object_get(json_array_get(vals, i), "value"), &a->values[i]);
    }
    json_decref(reply);
    return a;
}

static void asked(void *ctx, const char *reply, const char *err)
{
    ask *k = ctx;
    mq_mobj_answer *a = answer_of(k, reply, err);
    k->cb(k->ctx, a);
    sl_free(k->host);
    sl_free(k);
}

sl_err mq_mobj_ask(mq_state *mq, const char *host, int port, const char *fmt, const char *vhost,
                   const int *ids, int n, mq_mobj_answer_fn cb, void *ctx, char *err, size_t errlen)
{
    json_t *props = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(props, json_integer(ids[i]));
    json_t *j =
        json_pack("{s:s,s:s,s:o}", "op", "queue.getinfo", "format_name", fmt, "props", props);
    if (vhost)
        json_object_set_new(j, "vhost", json_string(vhost));
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    ask *k = sl_xcalloc(1, sizeof *k);
    k->host = sl_xstrdup(host);
    k->port = port;
    k->n = n;
    k->cb = cb;
    k->ctx = ctx;
    sl_err e = mq->n->links ? link_rpc_call(mq->n->links, host, port, text,
                                            mq->n->cfg->handle_remote_timeout_ms, asked, k)
                            : SL_ERR_NOT_ALLOWED;
    free(text);
    if (e != SL_OK) {
        sl_free(k->host);
        sl_free(k);
        snprintf(err, errlen, "cannot ask node %s:%d%s", host, port,
                 e == SL_ERR_NOT_ALLOWED ? ": this node is offline (DISCONNECT)" : "");
        return SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE;
    }
    return SL_OK;
}

/* ------------------------------------------------------------------------------------------
 * The owner's end
 */

static char *peer_reply(json_t *j)
{
    char *t = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    char *out = sl_xstrdup(t ? t : "{\"ok\":false}");
    free(t);
    return out;
}

static char *peer_fail(sl_err e, const char *reason)
{
    char hr[16];
    snprintf(hr, sizeof hr, "0x%08X", (unsigned)sl_err_get(e)->hresult);
    return peer_reply(json_pack("{s:b,s:s,s:s,s:s}", "ok", 0, "hresult", hr, "hresult_name",
                                sl_err_get(e)->hresult_name, "reason", reason));
}

static char *serve_peer(void *ctx, const char *peer, const char *user, const char *op, json_t *rq)
{
    (void)peer;
    (void)op; /* "queue.getinfo" only */
    mq_state *mq = ctx;
    json_t *jf = json_object_get(rq, "format_name"), *jv = json_object_get(rq, "vhost");
    json_t *props = json_object_get(rq, "props");
    if (!json_is_string(jf) || (jv && !json_is_null(jv) && !json_is_string(jv)) ||
        !json_is_array(props) || json_array_size(props) == 0 || json_array_size(props) > 128)
        return peer_fail(SL_ERR_INVALID_PARAMETER,
                         "queue.getinfo takes \"format_name\", \"vhost\" and 1..128 \"props\"");
    const char *fmt = json_string_value(jf);
    const char *vhost = json_is_string(jv) ? json_string_value(jv) : NULL;
    char err[600];
    qm_queue *q;
    sl_err qe = mq_mobj_peer_queue(mq, user, fmt, vhost, &q, err, sizeof err);
    if (qe != SL_OK)
        return peer_fail(qe, err);
    json_t *vals = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(props, i, p)
    {
        uint16_t t;
        mq_value v;
        sl_err e = mq_info_queue_value(mq, fmt, vhost,
                                       json_is_integer(p) ? (int)json_integer_value(p) : -1, &t, &v,
                                       err, sizeof err);
        if (e != SL_OK) {
            json_decref(vals);
            return peer_fail(e, err);
        }
        json_array_append_new(vals,
                              json_pack("{s:I,s:s,s:o}", "id", (json_int_t)json_integer_value(p),
                                        "vt", mq_vt_name(t), "value", mq_value_json(&v)));
        mq_value_free(&v);
    }
    /* the vhost and queue the owner resolved: the asking node checks its own user on them */
    return peer_reply(json_pack("{s:b,s:o,s:s,s:s}", "ok", 1, "values", vals, "vhost",
                                q->vhost->name, "queue", q->name));
}

void mq_mobj_serve_init(mq_state *mq)
{
    link_rpc_set_mgmt(serve_peer, mq);
}

void mq_mobj_serve_stop(mq_state *mq)
{
    (void)mq;
    link_rpc_set_mgmt(NULL, NULL);
}
