/* api_stream.c - RabbitMQ's stream management plugin's paths, over every door's client views
 * (node/clients.h), walked by the pager with RabbitMQ's filter_user (monitors see all):
 *   /api/stream/connections[/VHOST[/NAME[/publishers|/consumers]]]  (NAME: GET, DELETE)
 *   /api/stream/publishers[/VHOST[/STREAM]], /api/stream/consumers[/VHOST]
 * with rabbit_stream_mgmt_db's fields: publisher_id, reference, published, confirmed,
 * errored; subscription_id, credits, consumed, offset, offset_lag, properties; both with queue
 * {name, vhost} and connection_details {name, user, node, peer_host, peer_port}.
 */
#include <string.h>

#include "core/mem.h"
#include "mgmt/mgmt_internal.h"

json_t *mgmt_stream_json(mgmt *m, const node_client *c, const node_publisher *p,
                         const node_subscription *s)
{
    char host[64];
    int port;
    node_client_peer_split(c->peer, host, sizeof host, &port);
    json_t *o = json_pack("{s:{s:o,s:s},s:{s:s,s:s,s:s,s:s,s:i}}", "queue", "name",
                          defs_json_str_safe(p ? p->stream : s->stream), "vhost", c->vhost,
                          "connection_details", "name", c->name, "user", c->user, "node",
                          m->n->cfg->node_name, "peer_host", host, "peer_port", port);
    if (p) {
        json_object_update_new(
            o, json_pack("{s:i,s:o,s:I,s:I,s:I}", "publisher_id", (int)p->id, "reference",
                         defs_json_str_safe(p->reference), "published", (json_int_t)p->published,
                         "confirmed", (json_int_t)p->confirmed, "errored", (json_int_t)p->errored));
        return o;
    }
    json_t *props = defs_json_pairs(s->props, s->n_props);
    json_object_update_new(o,
                           json_pack("{s:i,s:I,s:I,s:I,s:I,s:o}", "subscription_id", (int)s->id,
                                     "credits", (json_int_t)s->credits, "consumed",
                                     (json_int_t)s->consumed, "offset", (json_int_t)s->offset,
                                     "offset_lag", (json_int_t)s->offset_lag, "properties", props));
    return o;
}

enum MHD_Result mgmt_api_stream(req *r)
{
    const char *what = r->nsegs > 1 ? r->segs[1] : "";
    int kind = !strcmp(what, "connections")  ? PAGER_CONNECTIONS
               : !strcmp(what, "publishers") ? PAGER_STREAM_PUBLISHERS
               : !strcmp(what, "consumers")  ? PAGER_STREAM_CONSUMERS
                                             : -1;
    /* at most .../VHOST/STREAM for publishers, .../VHOST for consumers; a connection's paths
     * go on (mgmt_connection) */
    size_t deepest = kind == PAGER_CONNECTIONS ? 6 : kind == PAGER_STREAM_PUBLISHERS ? 4 : 3;
    if (kind < 0 || r->nsegs > deepest)
        return mgmt_reply_not_found(r);
    /* RabbitMQ's resource_exists: a vhost named must exist */
    if (r->nsegs > 2 && !mgmt_req_vhost(r, r->segs[2]))
        return MHD_YES;
    /* publishers and consumers are on queues: of a vhost the user may list (/api/consumers) */
    if (r->nsegs > 2 && kind != PAGER_CONNECTIONS && !mgmt_req_vhost_access(r, r->segs[2]))
        return MHD_YES;
    if (kind == PAGER_CONNECTIONS && r->nsegs > 3)
        return mgmt_connection(r, r->segs[3], r->segs[2], r->nsegs > 4 ? r->segs[4] : NULL,
                               r->nsegs > 5);
    if (!mgmt_req_is(r, "GET"))
        return mgmt_reply_method_not_allowed(r);
    pager_scope s = {.vhost = r->nsegs > 2 ? r->segs[2] : NULL,
                     .protocol = "stream",
                     .stream = r->nsegs > 3 ? r->segs[3] : NULL};
    return mgmt_pager_list_scoped(r, kind, &s);
}
