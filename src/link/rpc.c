/* rpc.c - requests to the node that owns a queue, answered over the link (link.h, "Request
 * / response"). The serving side runs on the owning node's loop; requests and replies are
 * JSON objects. A context names a queue incarnation on one boot of its node
 * ("<boot hex>:<incarnation>"): a restart of the owner or a delete + redeclare makes it
 * stale, which is how remote handles (issue 10) notice that what they opened is gone.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/mem.h"
#include "link/link.h"
#include "link/rpc_queue.h"

static char *fail(sl_err e, const char *reason)
{
    const sl_err_info *info = sl_err_get(e);
    char hr[16];
    snprintf(hr, sizeof hr, "0x%08X", info->hresult);
    json_t *j = json_pack("{s:b,s:s,s:s,s:s}", "ok", 0, "hresult", hr, "hresult_name",
                          info->hresult_name, "reason", reason);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    char *out = sl_xstrdup(s);
    free(s);
    return out;
}

static char *done(json_t *j)
{
    json_object_set_new(j, "ok", json_true());
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    char *out = sl_xstrdup(s);
    free(s);
    return out;
}

static qm_queue *find_queue(qm_node *node, json_t *req, char *why, size_t whylen)
{
    json_t *jv = json_object_get(req, "vhost"), *jq = json_object_get(req, "queue");
    const char *vhost = json_is_string(jv) ? json_string_value(jv) : "/";
    if (!json_is_string(jq)) {
        snprintf(why, whylen, "\"queue\" (a string) is required");
        return NULL;
    }
    const char *name = json_string_value(jq);
    qm_vhost *vh = qm_vhost_find(node, vhost, strlen(vhost));
    qm_queue *q = vh ? qm_queue_find(vh, name, strlen(name)) : NULL;
    if (!q && vh) { /* MSMQ names are case-insensitive */
        size_t it = 0, kl;
        const char *k;
        void *v;
        while (sl_map_next(vh->queues, &it, &k, &kl, &v))
            if (kl == strlen(name) && !strncasecmp(k, name, kl)) {
                q = v;
                break;
            }
    }
    if (!q || q->is_outgoing)
        snprintf(why, whylen, "no queue '%s' in vhost '%s' on node %s", name, vhost, node->name);
    return q && !q->is_outgoing ? q : NULL;
}

char *link_rpc_serve(qm_node *node, uint64_t boot_id, const char *peer, const char *user,
                     uint64_t conn_id, const char *request, size_t len)
{
    json_error_t je;
    json_t *req = json_loadb(request, len, 0, &je);
    if (!json_is_object(req)) {
        json_decref(req);
        return fail(SL_ERR_INVALID_PARAMETER, "the request is not a JSON object");
    }
    json_t *jop = json_object_get(req, "op");
    const char *op = json_is_string(jop) ? json_string_value(jop) : "";
    char why[400];
    char *out = link_rpc_queue(node, boot_id, peer, user, conn_id, op, req); /* issue 10 */
    if (out) {
        json_decref(req);
        return out;
    }
    if (!strcmp(op, "queue.info")) {
        qm_queue *q = find_queue(node, req, why, sizeof why);
        if (!q) {
            out = fail(SL_ERR_QUEUE_NOT_FOUND, why);
        } else if (!link_rpc_user_sees_vhost(user, q->vhost->name)) {
            /* figures of a queue: the listing rule, for the link's user */
            snprintf(why, sizeof why, "user '%s' is not authorised to access virtual host '%s'",
                     user, q->vhost->name);
            out = fail(SL_ERR_ACCESS_REFUSED, why);
        } else {
            char ctx[64];
            snprintf(ctx, sizeof ctx, "%016llx:%llu", (unsigned long long)boot_id,
                     (unsigned long long)q->incarnation);
            json_t *j =
                json_pack("{s:s,s:s,s:I,s:s,s:I,s:I,s:I}", "vhost", q->vhost->name, "queue",
                          q->name, "incarnation", (json_int_t)q->incarnation, "context", ctx,
                          "message_count", (json_int_t)qm_queue_message_count(q), "bytes",
                          (json_int_t)q->bytes_total, "consumers", (json_int_t)q->n_consumers);
            out = done(j);
        }
    } else {
        snprintf(why, sizeof why,
                 "unknown op '%s' (queue.info, queue.open, queue.purge, queue.close)", op);
        out = fail(SL_ERR_INVALID_PARAMETER, why);
    }
    json_decref(req);
    return out;
}
