/* api_msmq.c - MSMQ management over HTTP: R_QMMgmtAction (POST /api/msmq/action) and
 * R_QMMgmtGetInfo (GET or POST /api/msmq/info), after MS-MQMR 3.1.4.1-2 and
 * reference/msmq.md sections 3.5-3.8. The rules and values are mq/'s (mq/action.h,
 * mq/info.h); this file reads the request and writes the JSON.
 *
 * Every reply carries "hresult" ("0x...") and "hresult_name"; a failure changes nothing and
 * returns no values. GetInfo's values: {"properties": [{"id", "name", "vt", "value"}],
 * "values": {name: value}}; a SEQUENCE_INFO blob is {"blob": base64, "SeqID", "SeqNo",
 * "PrevNo"}, a sending QM {"guid", "node"}, a vector an array.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base64.h"
#include "core/log.h"
#include "core/mem.h"
#include "mq/action.h"
#include "mq/info.h"
#include "persist/persist.h"
#include "mgmt/mgmt_internal.h"

/* ------------------------------------------------------------------------------------------
 * R_QMMgmtAction
 */

/* TIDY is done (node_tidy_start): its figures become the suspended request's answer. The
 * reply keeps segments_freed and bytes_freed and adds what compaction did and the store's
 * size before and after. */
static void tidy_done(void *ctx, const persist_tidy_result *res)
{
    req *r = ctx;
    json_t *j = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "segments_freed", (json_int_t)res->segments_freed,
        "bytes_freed", (json_int_t)res->bytes_freed, "segments_freed_between",
        (json_int_t)res->holes, "segments_compacted", (json_int_t)res->segments_compacted,
        "records_copied", (json_int_t)res->records_copied, "bytes_copied",
        (json_int_t)res->bytes_copied, "store_bytes_before", (json_int_t)res->bytes_before,
        "store_bytes_after", (json_int_t)res->bytes_after, "tidy_ms", (json_int_t)res->ms);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    r->async_reply = sl_xstrdup(text ? text : "{}");
    free(text);
    mgmt_req_resume(r);
}

static enum MHD_Result tidy_reply(req *r)
{
    json_t *j = mgmt_req_async_json(r);
    if (!j)
        return mgmt_reply_hresult(r, SL_ERR_INTERNAL, NULL, "TIDY gave no result");
    json_int_t segs = json_integer_value(json_object_get(j, "segments_freed"));
    json_int_t bytes = json_integer_value(json_object_get(j, "bytes_freed"));
    sl_info("management: TIDY freed %lld segment(s), %lld byte(s)", (long long)segs,
            (long long)bytes);
    return mgmt_reply_hresult(r, SL_OK, j, NULL);
}
static enum MHD_Result action(req *r)
{
    json_t *body = mgmt_req_body(r, 0);
    if (!body)
        return MHD_YES;
    json_t *jo = json_object_get(body, "object"), *ja = json_object_get(body, "action");
    if (!json_is_string(jo) || !json_is_string(ja))
        return mgmt_reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                                  "\"object\" and \"action\" (strings) are required");
    json_t *jv = json_object_get(body, "vhost");
    char reason[400];
    mq_action_result res;
    sl_err e = mq_action(r->m->mq, json_string_value(jo),
                         json_is_string(jv) ? json_string_value(jv) : NULL, json_string_value(ja),
                         &res, reason, sizeof reason);
    if (e == SL_OK && res.tidy) {
        /* TIDY runs a slice per loop turn (compaction can take a while): the reply waits. */
        node_tidy_start(r->m->n, tidy_done, r);
        mgmt_req_suspend(r, tidy_reply);
        return MHD_YES;
    }
    return mgmt_reply_hresult(r, e, e == SL_OK ? mgmt_msmq_action_json(&res) : NULL,
                              e == SL_OK ? NULL : reason);
}

json_t *mgmt_msmq_action_json(const mq_action_result *res)
{
    if (res->connected)
        return json_pack("{s:s}", "connected", res->connected);
    if (res->state)
        return json_pack("{s:s}", "state", res->state);
    return NULL;
}

/* ------------------------------------------------------------------------------------------
 * R_QMMgmtGetInfo
 */

sl_err mgmt_msmq_queue_prop(mgmt *m, const char *fmt, const char *vhost, int id, json_t **value,
                            const char **vt, char *err, size_t errlen)
{
    uint16_t t;
    mq_value v;
    *value = NULL;
    sl_err e = mq_info_queue_value(m->mq, fmt, vhost, id, &t, &v, err, errlen);
    if (e != SL_OK)
        return e;
    *vt = mq_vt_name(t);
    *value = mq_value_json(&v);
    mq_value_free(&v);
    return SL_OK;
}

/* Property list from ?props=a,b or a JSON "props" array. -1 after replying on bad input. */
static int collect_props(req *r, json_t *body, int machine, const mq_prop_def **out, size_t *n)
{
    *n = 0;
    char bad[200] = "";
    json_t *arr = body ? json_object_get(body, "props") : NULL;
    const char *qs = body ? NULL : mgmt_req_query(r, "props");
    if (arr && json_is_array(arr)) {
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v)
        {
            if (*n == 128) {
                mgmt_reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                                   "at most 128 properties per call");
                return -1;
            }
            char tmp[64];
            const char *s = tmp;
            if (json_is_integer(v))
                snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
            else if (json_is_string(v))
                s = json_string_value(v);
            else
                s = "?";
            const mq_prop_def *p = mq_info_prop_parse(s, machine);
            if (!p) {
                snprintf(bad, sizeof bad, "%s", s);
                break;
            }
            out[(*n)++] = p;
        }
    } else if (qs) {
        char *copy = sl_xstrdup(qs), *save = NULL;
        for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
            if (*n == 128) {
                sl_free(copy);
                mgmt_reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                                   "at most 128 properties per call");
                return -1;
            }
            const mq_prop_def *p = mq_info_prop_parse(tok, machine);
            if (!p) {
                snprintf(bad, sizeof bad, "%s", tok);
                break;
            }
            out[(*n)++] = p;
        }
        sl_free(copy);
    }
    if (bad[0]) {
        char reason[300];
        snprintf(reason, sizeof reason, "property '%s' is not a %s property", bad,
                 machine ? "machine (PROPID_MGMT_MSMQ_*)" : "queue (PROPID_MGMT_QUEUE_*)");
        mgmt_reply_hresult(r, SL_ERR_ILLEGAL_PROPID, NULL, reason);
        return -1;
    }
    if (*n == 0) {
        mgmt_reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL,
                           "no properties asked for (props=...)");
        return -1;
    }
    return 0;
}

static enum MHD_Result info(req *r)
{
    json_t *body = NULL;
    const char *obj, *vhost;
    if (mgmt_req_is(r, "POST")) {
        if (!(body = mgmt_req_body(r, 0)))
            return MHD_YES;
        json_t *jo = json_object_get(body, "object"), *jv = json_object_get(body, "vhost");
        obj = json_is_string(jo) ? json_string_value(jo) : NULL;
        vhost = json_is_string(jv) ? json_string_value(jv) : NULL;
    } else {
        obj = mgmt_req_query(r, "object");
        vhost = mgmt_req_query(r, "vhost");
    }
    if (!obj)
        return mgmt_reply_hresult(r, SL_ERR_INVALID_PARAMETER, NULL, "object=... is required");
    qm_queue *q = NULL;
    int machine;
    char reason[400];
    mq_caller who = {r->user, r->is_admin};
    sl_err e = mq_info_object(r->m->mq, &who, obj, vhost, &machine, &q, reason, sizeof reason);
    if (e != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason);
    const mq_prop_def *props[128];
    size_t n;
    if (collect_props(r, body, machine, props, &n) < 0)
        return MHD_YES;
    json_t *list = json_array(), *values = json_object();
    for (size_t i = 0; i < n; i++) {
        uint16_t vt;
        mq_value mv;
        mq_info_value(r->m->mq, &who, machine, q, props[i]->id, &vt, &mv);
        json_t *v = mq_value_json(&mv);
        mq_value_free(&mv);
        char full[80];
        snprintf(full, sizeof full, "PROPID_MGMT_%s_%s", machine ? "MSMQ" : "QUEUE",
                 props[i]->name);
        json_object_set(values, full, v);
        json_array_append_new(list, json_pack("{s:i,s:s,s:s,s:o}", "id", props[i]->id, "name", full,
                                              "vt", mq_vt_name(vt), "value", v));
    }
    return mgmt_reply_hresult(
        r, SL_OK, json_pack("{s:s,s:o,s:o}", "object", obj, "properties", list, "values", values),
        NULL);
}

enum MHD_Result mgmt_api_msmq(req *r)
{
    if (r->nsegs >= 2 && !strcmp(r->segs[1], "handles"))
        return mgmt_api_handles(r);
    if (r->nsegs >= 2 && !strcmp(r->segs[1], "management"))
        return mgmt_api_mgmtobj(r);
    if (r->nsegs == 2 && !strcmp(r->segs[1], "outgoing"))
        return mgmt_api_outgoing(r);
    if (r->nsegs == 2 && !strcmp(r->segs[1], "remote"))
        return mgmt_req_is(r, "POST") ? mgmt_api_remote(r) : mgmt_reply_method_not_allowed(r);
    if (r->nsegs == 2 && !strcmp(r->segs[1], "action"))
        return mgmt_req_is(r, "POST") ? action(r) : mgmt_reply_method_not_allowed(r);
    if (r->nsegs == 2 && !strcmp(r->segs[1], "info"))
        return mgmt_req_is(r, "GET") || mgmt_req_is(r, "POST") ? info(r)
                                                               : mgmt_reply_method_not_allowed(r);
    return mgmt_reply_not_found(r);
}
