/* api_outgoing.c - outgoing queues over HTTP: GET /api/msmq/outgoing (why is nothing
 * draining?), the MC-MQAC view of an outgoing queue, and POST /api/msmq/remote. The state
 * lives in src/link/ (link_outq_get_info); the outgoing-queue values of the MS-MQMR
 * properties are mq/info_outgoing.c's, and their enumerations mq/mgmtobj.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "link/link.h"
#include "mq/mgmtobj.h"
#include "mgmt/mgmt_internal.h"

/* SEQUENCE_INFO (MS-MQMQ 2.2.5) as a VT_BLOB: the 16 bytes (base64) and their fields. */
static json_t *seqinfo_json(const eod_seqinfo *s)
{
    mq_value v = {.kind = MQ_V_SEQINFO};
    mq_seqinfo_of(s, &v.seq);
    return mq_value_json(&v);
}

static json_t *history_json(const eod_outq_info *in)
{
    json_t *a = json_array();
    for (size_t i = 0; i < in->n_history; i++) {
        const eod_hist *h = &in->history[i];
        char st[16], er[16];
        snprintf(st, sizeof st, "0x%08X", h->status);
        snprintf(er, sizeof er, "0x%08X", h->error);
        json_array_append_new(a,
                              json_pack("{s:s,s:s,s:I,s:s,s:s}", "status", st, "status_name",
                                        mq_info_hist_status_name(h->status), "time",
                                        (json_int_t)h->time, "error", er, "address", h->address));
    }
    return a;
}

json_t *mgmt_outgoing_json(mgmt *m, qm_queue *q)
{
    eod_outq_info in;
    link_outq_get_info(q, &in);
    json_t *hops = json_array();
    if (in.next_hop[0])
        json_array_append_new(hops, json_string(in.next_hop));
    json_t *eod =
        json_pack("{s:o,s:I,s:I,s:o,s:o,s:o,s:I,s:I,s:I,s:I,s:I}", "EodLastAck",
                  seqinfo_json(&in.last_ack), "EodLastAckTime", (json_int_t)in.last_ack_time,
                  "EodLastAckCount", (json_int_t)in.last_ack_count, "EodFirstNonAck",
                  seqinfo_json(&in.first_non_ack), "EodLastNonAck", seqinfo_json(&in.last_non_ack),
                  "EodNextSeq", seqinfo_json(&in.next_seq), "EodNoReadCount",
                  (json_int_t)in.no_read_count, "EodNoAckCount", (json_int_t)in.no_ack_count,
                  "EodResendTime", (json_int_t)in.resend_time, "EodResendInterval",
                  (json_int_t)in.resend_interval_s, "EodResendCount", (json_int_t)in.resend_count);
    json_t *dl = json_null();
    if (in.last_dl_class) {
        char cls[16];
        snprintf(cls, sizeof cls, "0x%04X", in.last_dl_class);
        dl = json_pack("{s:s,s:s,s:s,s:I,s:I}", "class", cls, "class_name", in.last_dl_class_name,
                       "reason", in.last_dl_reason, "messages", (json_int_t)in.last_dl_count,
                       "time", (json_int_t)in.last_dl_time);
    }
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:I,s:o,s:o,s:o}", "format_name",
        in.format_name, "vhost", q->vhost->name, "state", eod_state_name(in.state), "foreign",
        mq_info_foreign_name(in.foreign), "messages", (json_int_t)qm_queue_message_count(q),
        "bytes", (json_int_t)q->bytes_total, "in_flight", (json_int_t)in.in_flight, "sent",
        (json_int_t)in.sent, "acked", (json_int_t)in.acked, "reconnects", (json_int_t)in.reconnects,
        "last_error", in.last_error, "last_error_time", (json_int_t)in.last_error_time, "next_hops",
        hops, "connection_history", history_json(&in), "eod", eod);
    json_object_set_new(o, "dead_lettered", json_integer((json_int_t)in.dead_lettered));
    json_object_set_new(o, "last_dead_letter", dl);
    return o;
}

enum MHD_Result mgmt_api_outgoing(req *r)
{
    if (!mgmt_req_is(r, "GET"))
        return mgmt_reply_method_not_allowed(r);
    link_mgr *lm = r->m->n->links;
    const char *vh = mgmt_req_query(r, "vhost");
    /* a listing: the vhosts the user may list; naming another one is refused, as
     * /api/queues/{vhost} is */
    if (vh && !mgmt_req_vhost_access(r, vh))
        return MHD_YES;
    size_t n = lm ? link_mgr_outgoing(lm, NULL, 0) : 0;
    qm_queue **qs = sl_xmalloc((n ? n : 1) * sizeof *qs);
    if (lm)
        link_mgr_outgoing(lm, qs, n);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        if ((!vh || !strcmp(vh, qs[i]->vhost->name)) &&
            mgmt_req_vhost_listed(r, qs[i]->vhost->name))
            json_array_append_new(arr, mgmt_outgoing_json(r->m, qs[i]));
    sl_free(qs);
    return mgmt_reply_json(r, 200, arr);
}

/* ---- POST /api/msmq/remote {"address": "host[:port]", "request": {...}, "timeout_ms"} ----
 * A request to another node over a link (link.h "Request / response"): the reply is that
 * node's JSON answer as it came; no answer in time (or no link) is 504 with
 * MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE. */

static void remote_done(void *ctx, const char *reply, const char *err)
{
    req *r = ctx;
    if (reply)
        r->async_reply = sl_xstrdup(reply);
    else
        r->async_err = sl_xstrdup(err ? err : "no reply");
    mgmt_req_resume(r);
}

static enum MHD_Result remote_reply(req *r)
{
    if (r->async_err)
        return mgmt_reply_sl_err(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE, "%s", r->async_err);
    json_error_t je;
    json_t *j = json_loads(r->async_reply, 0, &je);
    if (!j)
        return mgmt_reply_sl_err(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE,
                                 "the reply is not JSON: %s", je.text);
    return mgmt_reply_json(r, 200, j);
}

enum MHD_Result mgmt_api_remote(req *r)
{
    json_t *body = mgmt_req_body(r, 0);
    if (!body)
        return MHD_YES;
    json_t *ja = json_object_get(body, "address"), *jr = json_object_get(body, "request");
    if (!json_is_string(ja) || !json_is_object(jr))
        return mgmt_reply_hresult(
            r, SL_ERR_INVALID_PARAMETER, NULL,
            "\"address\" (host[:port]) and \"request\" (an object) are required");
    char host[256];
    snprintf(host, sizeof host, "%s", json_string_value(ja));
    int port = LINK_DEFAULT_PORT;
    char *colon = strrchr(host, ':');
    if (colon && !strchr(colon + 1, ']') && strchr(host, ':') == colon) {
        port = atoi(colon + 1);
        *colon = 0;
    }
    if (!host[0] || port <= 0 || port > 65535)
        return mgmt_reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL, "bad address");
    int64_t to = defs_json_uint(json_object_get(body, "timeout_ms"));
    char *text = json_dumps(jr, JSON_COMPACT);
    sl_err e = r->m->n->links ? link_rpc_call(r->m->n->links, host, port, text,
                                              to > 0 ? (uint32_t)to : 10000, remote_done, r)
                              : SL_ERR_NOT_ALLOWED;
    free(text);
    if (e != SL_OK)
        return mgmt_reply_sl_err(r, e, "cannot send to %s:%d%s", host, port,
                                 e == SL_ERR_NOT_ALLOWED ? ": this node is offline" : "");
    mgmt_req_suspend(r, remote_reply);
    return MHD_YES;
}

void mgmt_outgoing_view(mgmt *m, qm_queue *q, json_t *o)
{
    eod_outq_info in;
    link_outq_get_info(q, &in);
    const char *fsn, *stn;
    int fs = mq_mobj_foreign_value(in.foreign, &fsn), se = mq_mobj_state_value(in.state, &stn);
    json_object_set_new(o, "ForeignStatus", json_pack("{s:i,s:s}", "value", fs, "name", fsn));
    json_object_set_new(o, "IsLocal", json_false());
    json_object_set_new(o, "TransactionalStatus",
                        json_pack("{s:i,s:s}", "value", 2, "name", "MQ_XACT_STATUS_UNKNOWN"));
    json_object_set_new(o, "State", json_pack("{s:i,s:s}", "value", se, "name", stn));
    json_t *hops = json_array();
    if (in.next_hop[0])
        json_array_append_new(hops, json_string(in.next_hop));
    json_object_set_new(o, "NextHops", hops);
    json_object_set_new(o, "outgoing", mgmt_outgoing_json(m, q));
}
