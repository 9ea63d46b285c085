/* http_json.c - replies and request access shared by every handler: JSON replies (with
 * RabbitMQ's ?columns= filter), errors carrying both RabbitMQ's {"error","reason"} and MSMQ's
 * HRESULT, query and body access (AMQP field tables <-> JSON: defs/json.c).
 *
 * Invariant: a handler replies exactly once; every reply_* sets r->responded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/mem.h"
#include "http/request.h"
#include "mgmt/mgmt_internal.h"

/* ------------------------------------------------------------------------------------------
 * Replies
 */

static void resume_after_sync(void *ctx)
{
    mgmt_req_resume(ctx); /* MHD calls on_request again, which sends r->h.held */
}

static enum MHD_Result send_held(req *r)
{
    return http_send_held(&r->h);
}

enum MHD_Result mgmt_req_respond(req *r, unsigned status, struct MHD_Response *resp)
{
    r->responded = 1;
    /* Only a success promises a change on disk. An error, and a cluster action (which
     * changes etcd, not the store), must not wait: on a leader below min_insync_replicas the
     * release gate may not move for as long as the cluster is short, and a step-down's 409
     * would hang with it. */
    if (status < 400 && !r->no_store && strcmp(r->method, "GET") != 0 &&
        node_after_sync(r->m->n, resume_after_sync, r)) {
        http_hold(&r->h, status, resp);
        mgmt_req_suspend(r, send_held);
        return MHD_YES;
    }
    enum MHD_Result rc = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

enum MHD_Result mgmt_reply_text(req *r, unsigned status, const char *ctype, char *text, size_t len)
{
    /* names and message bodies in a reply are never taken for HTML (nosniff) */
    return mgmt_req_respond(r, status, http_response_text(text, len, ctype, "no-cache"));
}

enum MHD_Result mgmt_reply_json(req *r, unsigned status, json_t *j)
{
    const char *cols = mgmt_req_is(r, "GET") ? mgmt_req_query(r, "columns") : NULL;
    if (cols && *cols) {
        if (json_is_array(j)) {
            size_t i;
            json_t *v;
            json_array_foreach(j, i, v) defs_json_filter_columns(v, cols);
        } else {
            defs_json_filter_columns(j, cols);
        }
    }
    char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(j);
    if (!text)
        return mgmt_reply_error(r, 500, "internal_error", "cannot encode the reply");
    return mgmt_reply_text(r, status, "application/json", text, strlen(text));
}

enum MHD_Result mgmt_reply_empty(req *r, unsigned status)
{
    return mgmt_reply_text(r, status, NULL, NULL, 0);
}

__attribute__((format(printf, 6, 0))) static enum MHD_Result
reply_error_v(req *r, unsigned status, const char *error, sl_err e, int with_hr, const char *fmt,
              va_list ap)
{
    char reason[512];
    vsnprintf(reason, sizeof reason, fmt, ap);
    json_t *j = json_object();
    json_object_set_new(j, "error", json_string(error));
    json_object_set_new(j, "reason", defs_json_strn_safe(reason, strlen(reason)));
    if (with_hr) {
        char hr[16];
        mgmt_hresult_str(e, hr, sizeof hr);
        json_object_set_new(j, "hresult", json_string(hr));
        json_object_set_new(j, "hresult_name", json_string(sl_err_get(e)->hresult_name));
    }
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return mgmt_reply_text(r, status, "application/json", text, strlen(text));
}

enum MHD_Result mgmt_reply_error(req *r, unsigned status, const char *error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result rc = reply_error_v(r, status, error, SL_OK, 0, fmt, ap);
    va_end(ap);
    return rc;
}

static const char *error_word(unsigned status)
{
    switch (status) {
    case 400:
        return "bad_request";
    case 403:
        return "not_authorised" /* RabbitMQ's word for a refusal of the API */;
    case 404:
        return "Object Not Found";
    case 409:
        return "conflict";
    case 413:
        return "payload_too_large";
    case 429:
        return "too_many_requests";
    case 502:
        return "bad_gateway";
    case 501:
        return "not_implemented";
    case 503:
        return "resource_error";
    default:
        return "internal_error";
    }
}

enum MHD_Result mgmt_reply_sl_err(req *r, sl_err e, const char *fmt, ...)
{
    unsigned status = http_status_of(e);
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result rc = reply_error_v(r, status, error_word(status), e, 1, fmt, ap);
    va_end(ap);
    return rc;
}

void mgmt_hresult_str(sl_err e, char *buf, size_t len)
{
    snprintf(buf, len, "0x%08X", (unsigned)sl_err_get(e)->hresult);
}

enum MHD_Result mgmt_reply_hresult(req *r, sl_err e, json_t *extra, const char *reason)
{
    json_t *j = json_object();
    char hr[16];
    mgmt_hresult_str(e, hr, sizeof hr);
    json_object_set_new(j, "hresult", json_string(hr));
    json_object_set_new(j, "hresult_name", json_string(sl_err_get(e)->hresult_name));
    unsigned status = http_status_of(e);
    if (e != SL_OK) {
        json_object_set_new(j, "error", json_string(error_word(status)));
        json_object_set_new(j, "reason",
                            json_string(reason ? reason : sl_err_get(e)->hresult_name));
    }
    if (extra) {
        json_object_update(j, extra);
        json_decref(extra);
    }
    return mgmt_reply_json(r, status, j);
}

enum MHD_Result mgmt_reply_remote_hresult(req *r, const char *hresult, const char *name,
                                          const char *reason, json_t *extra)
{
    /* the HTTP status of the sl_err with that HRESULT; 502 for one we do not know */
    unsigned status = http_status_of_hresult(hresult ? strtoul(hresult, NULL, 16) : 0);
    json_t *j = json_object();
    json_object_set_new(j, "hresult", json_string(hresult ? hresult : "0xC00E0001"));
    json_object_set_new(j, "hresult_name", json_string(name ? name : "MQ_ERROR"));
    json_object_set_new(j, "error", json_string(error_word(status)));
    json_object_set_new(j, "reason", json_string(reason));
    if (extra) {
        json_object_update(j, extra);
        json_decref(extra);
    }
    return mgmt_reply_json(r, status, j);
}

enum MHD_Result mgmt_reply_method_not_allowed(req *r)
{
    return mgmt_reply_error(r, 405, "method_not_allowed", "%s is not allowed on this path",
                            r->method);
}

enum MHD_Result mgmt_reply_not_found(req *r)
{
    return mgmt_reply_error(r, 404, "Object Not Found", "Not Found");
}

/* ------------------------------------------------------------------------------------------
 * Request access
 */

const char *mgmt_req_query(req *r, const char *key)
{
    return http_req_query(&r->h, key);
}

int mgmt_req_query_bool(req *r, const char *key)
{
    const char *v = mgmt_req_query(r, key);
    return v && (!strcasecmp(v, "true") || !strcmp(v, "1"));
}

json_t *mgmt_req_body(req *r, int allow_empty)
{
    if (r->json)
        return r->json;
    size_t n = sl_buf_unread(&r->h.body);
    if (n == 0 && allow_empty) {
        r->json = json_object();
        return r->json;
    }
    json_error_t e;
    json_t *j = json_loadb((const char *)sl_buf_head(&r->h.body), n, 0, &e);
    if (!j) {
        mgmt_reply_error(r, 400, "bad_request", "malformed JSON body: %s (line %d, column %d)",
                         e.text, e.line, e.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        mgmt_reply_error(r, 400, "bad_request", "the body must be a JSON object");
        return NULL;
    }
    r->json = j;
    return j;
}

int mgmt_req_disk_ok(req *r, int memory_too)
{
    /* The AMQP door blocks what needs the disk under an alarm; here the client gets an answer
     * at once and tries again later. */
    char why[200];
    if (node_alarm_check(r->m->n->alarms, memory_too, why, sizeof why) == SL_OK)
        return 1;
    mgmt_reply_sl_err(r, SL_ERR_RESOURCE, "%s", why);
    return 0;
}

qm_vhost *mgmt_req_vhost(req *r, const char *name)
{
    qm_vhost *vh = qm_vhost_find(mgmt_req_node(r), name, strlen(name));
    if (!vh)
        mgmt_reply_error(r, 404, "Object Not Found", "no vhost '%s'", name);
    return vh;
}

int mgmt_req_require_admin(req *r)
{
    if (r->is_admin)
        return 1;
    mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "Not administrator user");
    return 0;
}

int mgmt_req_vhost_listed(req *r, const char *vhost)
{
    return r->is_admin || acc_vhost_visible(r->m->n->acc, r->user, vhost);
}

int mgmt_req_vhost_access(req *r, const char *vhost)
{
    if (mgmt_req_vhost_listed(r, vhost))
        return 1;
    mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "User not authorised to access virtual host");
    return 0;
}

int mgmt_req_allowed(req *r, const char *vhost, acc_kind kind, const char *name, acc_perm perm)
{
    char why[800];
    if (node_perm_check(r->m->n->acc, r->user, vhost, kind, name, perm, why, sizeof why) == SL_OK)
        return 1;
    mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "%s", why);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Values
 */
