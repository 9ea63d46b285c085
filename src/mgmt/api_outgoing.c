/* api_outgoing.c - outgoing queues over HTTP: GET /api/msmq/outgoing (why is nothing
 * draining?), the outgoing-queue values of the MS-MQMR properties (STATE, FOREIGN, NEXTHOPS,
 * EOD_*, CONNECTION_HISTORY), EOD_SOURCE_INFO of destination queues, and the MC-MQAC view of
 * an outgoing queue. The state lives in src/link/ (link_outq_get_info).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "link/link.h"
#include "persist/persist.h"
#include "mgmt/mgmt_internal.h"

static const char *foreign_str(link_foreign f)
{
    return f == LINK_FOREIGN_YES ? "YES" : f == LINK_FOREIGN_NO ? "NO" : "UNKNOWN";
}

/* MC-MQAC QUEUE_STATE values of the link states */
static int state_enum(link_state s)
{
    switch (s) {
    case LINK_DISCONNECTED:
        return 1;
    case LINK_WAITING:
        return 2;
    case LINK_ONHOLD:
        return 4;
    case LINK_INACTIVE:
        return 5;
    case LINK_CONNECTED:
        return 6;
    case LINK_DISCONNECTING:
        return 7;
    }
    return 5;
}

static const char *hist_status_name(uint32_t s)
{
    switch (s) {
    case 0x00000000u:
        return "InProcess";
    case 0x00000001u:
        return "EstablishPacketReceived";
    case 0x00000002u:
        return "Established";
    case 0x80000004u:
        return "SocketConnectFailure";
    case 0x80000006u:
        return "SocketSendFailure";
    case 0x80000007u:
        return "ConnectionNotReady";
    case 0x80000008u:
        return "DnsFailure";
    case 0x8000000Bu:
        return "ConnectionRefused";
    default:
        return "UnknownFailure";
    }
}

/* SEQUENCE_INFO (MS-MQMQ 2.2.5) as a VT_BLOB: the 16 bytes (base64) and their fields. */
static json_t *seqinfo_json(const link_seqinfo *s)
{
    uint8_t b[16];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(s->seq_id >> (8 * i));
    for (int i = 0; i < 4; i++) {
        b[8 + i] = (uint8_t)(s->seq_no >> (8 * i));
        b[12 + i] = (uint8_t)(s->prev_no >> (8 * i));
    }
    size_t n;
    char *enc = base64_encode(b, sizeof b, &n);
    json_t *j = json_pack("{s:s,s:I,s:I,s:I}", "blob", enc, "SeqID", (json_int_t)s->seq_id, "SeqNo",
                          (json_int_t)s->seq_no64, "PrevNo", (json_int_t)s->prev_no64);
    sl_free(enc);
    return j;
}

static json_t *history_json(const link_outq_info *in)
{
    json_t *a = json_array();
    for (size_t i = 0; i < in->n_history; i++) {
        const link_hist *h = &in->history[i];
        char st[16], er[16];
        snprintf(st, sizeof st, "0x%08X", h->status);
        snprintf(er, sizeof er, "0x%08X", h->error);
        json_array_append_new(a, json_pack("{s:s,s:s,s:I,s:s,s:s}", "status", st, "status_name",
                                           hist_status_name(h->status), "time", (json_int_t)h->time,
                                           "error", er, "address", h->address));
    }
    return a;
}

json_t *outgoing_json(mgmt *m, qm_queue *q)
{
    link_outq_info in;
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
        in.format_name, "vhost", q->vhost->name, "state", link_state_name(in.state), "foreign",
        foreign_str(in.foreign), "messages", (json_int_t)qm_queue_message_count(q), "bytes",
        (json_int_t)q->bytes_total, "in_flight", (json_int_t)in.in_flight, "sent",
        (json_int_t)in.sent, "acked", (json_int_t)in.acked, "reconnects", (json_int_t)in.reconnects,
        "last_error", in.last_error, "last_error_time", (json_int_t)in.last_error_time, "next_hops",
        hops, "connection_history", history_json(&in), "eod", eod);
    json_object_set_new(o, "dead_lettered", json_integer((json_int_t)in.dead_lettered));
    json_object_set_new(o, "last_dead_letter", dl);
    return o;
}

enum MHD_Result api_outgoing(req *r)
{
    if (!req_is(r, "GET"))
        return reply_method_not_allowed(r);
    link_mgr *lm = r->m->n->links;
    const char *vh = req_query(r, "vhost");
    /* a listing: the vhosts the user may list; naming another one is refused, as
     * /api/queues/{vhost} is */
    if (vh && !req_vhost_access(r, vh))
        return MHD_YES;
    size_t n = lm ? link_mgr_outgoing(lm, NULL, 0) : 0;
    qm_queue **qs = sl_xmalloc((n ? n : 1) * sizeof *qs);
    if (lm)
        link_mgr_outgoing(lm, qs, n);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        if ((!vh || !strcmp(vh, qs[i]->vhost->name)) && req_vhost_listed(r, qs[i]->vhost->name))
            json_array_append_new(arr, outgoing_json(r->m, qs[i]));
    sl_free(qs);
    return reply_json(r, 200, arr);
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
    req_resume(r);
}

static enum MHD_Result remote_reply(req *r)
{
    if (r->async_err)
        return reply_sl_err(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE, "%s", r->async_err);
    json_error_t je;
    json_t *j = json_loads(r->async_reply, 0, &je);
    if (!j)
        return reply_sl_err(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE, "the reply is not JSON: %s",
                            je.text);
    return reply_json(r, 200, j);
}

enum MHD_Result api_remote(req *r)
{
    json_t *body = req_body(r, 0);
    if (!body)
        return MHD_YES;
    json_t *ja = json_object_get(body, "address"), *jr = json_object_get(body, "request");
    if (!json_is_string(ja) || !json_is_object(jr))
        return reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
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
        return reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL, "bad address");
    int64_t to = json_uint(json_object_get(body, "timeout_ms"));
    char *text = json_dumps(jr, JSON_COMPACT);
    sl_err e = r->m->n->links ? link_rpc_call(r->m->n->links, host, port, text,
                                              to > 0 ? (uint32_t)to : 10000, remote_done, r)
                              : SL_ERR_NOT_ALLOWED;
    free(text);
    if (e != SL_OK)
        return reply_sl_err(r, e, "cannot send to %s:%d%s", host, port,
                            e == SL_ERR_NOT_ALLOWED ? ": this node is offline" : "");
    req_suspend(r, remote_reply);
    return MHD_YES;
}

json_t *outgoing_prop(mgmt *m, qm_queue *q, int id, const char **vt)
{
    link_outq_info in;
    link_outq_get_info(q, &in);
    json_t *a;
    switch (id) {
    case 3:
        return json_string("PRIVATE");
    case 4:
        return json_string("REMOTE");
    case 5:
        return json_string("UNKNOWN"); /* the destination's, which the sender does not know */
    case 6:
        return json_string(foreign_str(in.foreign));
    case 11:
        return json_string(link_state_name(in.state));
    case 12:
        a = json_array();
        if (in.next_hop[0])
            json_array_append_new(a, json_string(in.next_hop));
        return a;
    case 13:
        return seqinfo_json(&in.last_ack);
    case 14:
        return json_integer((json_int_t)in.last_ack_time);
    case 15:
        return json_integer((json_int_t)in.last_ack_count);
    case 16:
        return seqinfo_json(&in.first_non_ack);
    case 17:
        return seqinfo_json(&in.last_non_ack);
    case 18:
        return seqinfo_json(&in.next_seq);
    case 19:
        return json_integer((json_int_t)in.no_read_count);
    case 20:
        return json_integer((json_int_t)in.no_ack_count);
    case 21:
        return json_integer((json_int_t)in.resend_time);
    case 22:
        return json_integer((json_int_t)in.resend_interval_s);
    case 23:
        return json_integer((json_int_t)in.resend_count);
    case 25: {
        /* four parallel vectors: status, time, error, address lists */
        json_t *st = json_array(), *tm = json_array(), *er = json_array(), *ad = json_array();
        for (size_t i = 0; i < in.n_history; i++) {
            const link_hist *h = &in.history[i];
            json_array_append_new(st, json_integer((json_int_t)h->status));
            json_array_append_new(tm, json_integer((json_int_t)h->time));
            json_array_append_new(er, json_integer((json_int_t)(int32_t)h->error));
            json_array_append_new(ad, json_pack("[s]", h->address));
        }
        return json_pack("[o,o,o,o]", st, tm, er, ad);
    }
    case 26:
        return json_integer(0);
    case 27:
        return json_array();
    default: /* EOD_SOURCE_INFO: destination queues only */
        *vt = "VT_NULL";
        return json_null();
    }
}

/* PROPID_MGMT_QUEUE_EOD_SOURCE_INFO of a destination queue: six parallel vectors over its
 * incoming sequences (format names, sender ids, SeqIDs, SeqNos, last access, rejects). */
json_t *eod_source_info(mgmt *m, qm_queue *q)
{
    json_t *fmt = json_array(), *ids = json_array(), *sids = json_array(), *nos = json_array(),
           *acc = json_array(), *rej = json_array();
    persist *st = m->n->store;
    char name[600];
    if (strcmp(q->vhost->name, "/"))
        snprintf(name, sizeof name, "%s/%s", q->vhost->name, q->name);
    else
        snprintf(name, sizeof name, "%s", q->name);
    size_t n = 0;
    persist_eod_in **all = st ? persist_eod_in_all(st, &n) : NULL;
    for (size_t i = 0; i < n; i++) {
        persist_eod_in *e = all[i];
        if (!e->dest || strcmp(e->dest, name))
            continue;
        char f[800], guid[40];
        snprintf(f, sizeof f, "DIRECT=OS:%s\\private$\\%s", fmt_computer(m->mq), name);
        const uint8_t *g = e->sender;
        snprintf(guid, sizeof guid,
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", g[0], g[1],
                 g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14],
                 g[15]);
        json_array_append_new(fmt, json_string(f));
        json_array_append_new(ids, json_pack("{s:s,s:s}", "guid", guid, "node",
                                             e->sender_name ? e->sender_name : ""));
        json_array_append_new(sids, json_integer((json_int_t)e->seq_id));
        json_array_append_new(nos, json_integer((json_int_t)e->seq_no));
        json_array_append_new(acc, json_integer((json_int_t)(e->access_ms / 1000)));
        json_array_append_new(rej, json_integer((json_int_t)e->rejects));
    }
    return json_pack("[o,o,o,o,o,o]", fmt, ids, sids, nos, acc, rej);
}

void outgoing_view(mgmt *m, qm_queue *q, json_t *o)
{
    link_outq_info in;
    link_outq_get_info(q, &in);
    int fs = in.foreign == LINK_FOREIGN_YES ? 0 : in.foreign == LINK_FOREIGN_NO ? 1 : 2;
    static const char *const fsn[] = {"MQ_STATUS_FOREIGN", "MQ_STATUS_NOT_FOREIGN",
                                      "MQ_STATUS_UNKNOWN"};
    static const char *const stn[] = {
        "MQ_QUEUE_STATE_LOCAL_CONNECTION", "MQ_QUEUE_STATE_DISCONNECTED",
        "MQ_QUEUE_STATE_WAITING",          "MQ_QUEUE_STATE_NEEDVALIDATE",
        "MQ_QUEUE_STATE_ONHOLD",           "MQ_QUEUE_STATE_NONACTIVE",
        "MQ_QUEUE_STATE_CONNECTED",        "MQ_QUEUE_STATE_DISCONNECTING"};
    int se = state_enum(in.state);
    json_object_set_new(o, "ForeignStatus", json_pack("{s:i,s:s}", "value", fs, "name", fsn[fs]));
    json_object_set_new(o, "IsLocal", json_false());
    json_object_set_new(o, "TransactionalStatus",
                        json_pack("{s:i,s:s}", "value", 2, "name", "MQ_XACT_STATUS_UNKNOWN"));
    json_object_set_new(o, "State", json_pack("{s:i,s:s}", "value", se, "name", stn[se]));
    json_t *hops = json_array();
    if (in.next_hop[0])
        json_array_append_new(hops, json_string(in.next_hop));
    json_object_set_new(o, "NextHops", hops);
    json_object_set_new(o, "outgoing", outgoing_json(m, q));
}
