/* api_misc.c - the read-mostly parts of the API: /api/overview, nodes, vhosts, users, whoami,
 * permissions, connections (list, close), channels, consumers. Field names are RabbitMQ's so
 * rabbitmqadmin's tables work.
 *
 * Users, vhost definitions and permissions live in the access module (src/access/); this file
 * shows them. Passwords are never shown, only their hashes (to administrators, as RabbitMQ).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/mem.h"
#include "core/version.h"
#include "net/tls.h"
#include "cluster/figures.h"
#include "cluster/member.h"
#include "mgmt/mgmt_internal.h"

struct listed_ctx {
    mgmt *m;
    const mq_caller *who;
};

static int vhost_listed(void *ctx, const char *vhost)
{
    struct listed_ctx *l = ctx;
    return mq_vhost_listed(l->m->n->acc, l->who, vhost);
}

/* Totals over the vhosts and connections viewer r may list; r NULL: the whole node. */
static void totals(mgmt *m, const mq_caller *who, node_totals *t)
{
    struct listed_ctx l = {m, who};
    node_totals_model(m->n->qm, who ? vhost_listed : NULL, &l, t); /* node/totals.c */
    int monitor = !who || acc_is_monitor(m->n->acc, who->user);
    node_totals_clients(m->n, who ? who->user : NULL, monitor, t);
}

void mgmt_totals_get(mgmt *m, node_totals *t)
{
    totals(m, NULL, t);
}

void mgmt_totals_for(req *r, node_totals *t)
{
    mq_caller who = {r->user, r->is_admin};
    totals(r->m, &who, t);
}

void mgmt_totals_of(mgmt *m, const mq_caller *who, node_totals *t)
{
    totals(m, who, t);
}

enum MHD_Result mgmt_api_overview(req *r)
{
    if (!mgmt_req_is(r, "GET"))
        return mgmt_reply_method_not_allowed(r);
    mgmt *m = r->m;
    node_totals t;
    mgmt_totals_for(r, &t); /* RabbitMQ's overview: the user's vhosts only */
    json_t *o = json_object();
    json_object_set_new(o, "management_version", json_string(SLUICE_VERSION));
    json_object_set_new(o, "rabbitmq_version", json_string(SLUICE_VERSION));
    json_object_set_new(o, "product_name", json_string(SLUICE_PRODUCT));
    json_object_set_new(o, "product_version", json_string(SLUICE_VERSION));
    /* RabbitMQ's cluster_name: in a cluster its name (cluster_formation.etcd.cluster_name),
     * which every node answers alike; a single node is a cluster of one, named after it */
    const node_config *cfg = m->n->cfg;
    json_object_set_new(
        o, "cluster_name",
        json_string(cfg->cluster.enabled ? cfg->cluster.cluster_name : cfg->node_name));
    json_object_set_new(o, "node", json_string(m->n->cfg->node_name));
    json_object_set_new(o, "queue_totals",
                        json_pack("{s:I,s:I,s:I}", "messages", (json_int_t)t.messages,
                                  "messages_ready", (json_int_t)t.ready, "messages_unacknowledged",
                                  (json_int_t)t.unacked));
    json_object_set_new(o, "object_totals",
                        json_pack("{s:I,s:I,s:I,s:I,s:I}", "connections", (json_int_t)t.connections,
                                  "channels", (json_int_t)t.channels, "exchanges",
                                  (json_int_t)t.exchanges, "queues", (json_int_t)t.queues,
                                  "consumers", (json_int_t)t.consumers));
    /* RabbitMQ's split of deliver_get (node_totals_deliveries), over the vhosts this user may
     * list (totals above); the vhosts count their confirms */
    uint64_t dack, dna;
    node_totals_deliveries(&t, &dack, &dna);
    json_object_set_new(o, "message_stats",
                        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "publish",
                                  (json_int_t)t.published, "confirm", (json_int_t)t.confirm,
                                  "deliver", (json_int_t)dack, "deliver_no_ack", (json_int_t)dna,
                                  "get", (json_int_t)t.get, "get_no_ack", (json_int_t)t.get_no_ack,
                                  "deliver_get", (json_int_t)t.delivered, "ack",
                                  (json_int_t)t.acked, "redeliver", (json_int_t)t.redelivered));
    const node_listener *amqp = node_listener_find(m->n, "amqp");
    json_t *ls = json_pack("[{s:s,s:s,s:i},{s:s,s:s,s:i}]", "protocol", "amqp", "ip_address",
                           amqp ? amqp->addr : "", "port", amqp ? amqp->port : 0, "protocol",
                           "http", "ip_address", m->addr, "port", m->port);
    /* RabbitMQ's names: amqp/ssl and http/ssl */
    const node_listener *amqps = node_listener_find(m->n, "amqp/ssl");
    if (amqps)
        json_array_append_new(ls, json_pack("{s:s,s:s,s:i}", "protocol", "amqp/ssl", "ip_address",
                                            amqps->addr, "port", amqps->port));
    if (m->https)
        json_array_append_new(ls, json_pack("{s:s,s:s,s:i}", "protocol", "https", "ip_address",
                                            m->tls_addr, "port", m->tls_port));
    json_object_set_new(o, "listeners", ls);
    json_object_set_new(o, "msmq_connected",
                        json_string(m->n->qm->online ? "CONNECTED" : "DISCONNECTED"));
    return mgmt_reply_json(r, 200, o);
}

/* This node's entry (RabbitMQ's fields, figures.h); disk_free is the disk alarm's own last
 * look (broker.c check_disk, once a second). A leader publishes the same object to etcd
 * (api_cluster.c's figures timer). */
json_t *mgmt_node_figures(mgmt *m)
{
    sl_node *n = m->n;
    cl_figures_in in = {.name = n->cfg->node_name,
                        .mem_used = node_memory_bytes(n),
                        .mem_limit = n->cfg->memory_high_watermark,
                        .mem_alarm = (n->alarms & ALARM_MEMORY) != 0,
                        .disk_free = n->disk_free,
                        .disk_free_limit = n->cfg->disk_free_limit,
                        .disk_free_alarm = (n->alarms & ALARM_DISK) != 0,
                        .connected = n->qm->online};
    return cl_figures_json(&in);
}

/* Another cluster member, from the leader's read of etcd (member.h cl_member_fig): its
 * published figures (stats/NAME) while it runs, with figures_age_ms (a Sluice extension: how
 * long ago that node measured them, by the two nodes' wall clocks); running false and null
 * figures once its lease is gone (killed, stopped, cut off from etcd). */
static json_t *member_node_json(const cl_member_fig *f)
{
    json_t *j = json_pack("{s:s,s:s,s:b}", "name", f->name, "type", "disc", "running", f->running);
    json_t *pub = f->running && f->figures[0] ? json_loads(f->figures, 0, NULL) : NULL;
    for (size_t i = 0; cl_figures_keys[i]; i++) {
        json_t *v = json_object_get(pub, cl_figures_keys[i]);
        json_object_set(j, cl_figures_keys[i], v ? v : json_null());
    }
    json_t *at = json_object_get(pub, "measured_at");
    if (json_is_integer(at)) {
        json_int_t age = (json_int_t)sl_wall_ms() - json_integer_value(at);
        json_object_set_new(j, "figures_age_ms", json_integer(age > 0 ? age : 0));
    } else {
        json_object_set_new(j, "figures_age_ms", json_null());
    }
    json_decref(pub);
    return j;
}

/* Every member: this node first (the leader: the API runs only there) with its live figures,
 * then each other member etcd knows (members/NAME, or registered) with the figures it published
 * (GET /api/cluster has their replication standing). */
static json_t *nodes_json(mgmt *m)
{
    json_t *a = json_array();
    if (m->n->cluster) {
        cl_member_fig *f = sl_xcalloc(CL_MAX_MEMBERS, sizeof *f);
        size_t n = cl_member_members(m->n->cluster, f, CL_MAX_MEMBERS);
        for (size_t i = 0; i < n; i++)
            if (strcmp(f[i].name, m->n->cfg->node_name))
                json_array_append_new(a, member_node_json(&f[i]));
        sl_free(f);
    }
    /* this node first, whether etcd lists it yet or not (the console's node page shows the
     * first entry: the node it talks to) */
    json_t *me = mgmt_node_figures(m);
    if (m->n->cluster)
        json_object_set_new(me, "figures_age_ms", json_integer(0));
    json_array_insert_new(a, 0, me);
    return a;
}

enum MHD_Result mgmt_api_nodes(req *r)
{
    if (!mgmt_req_is(r, "GET"))
        return mgmt_reply_method_not_allowed(r);
    if (!acc_is_monitor(r->m->n->acc, r->user)) /* RabbitMQ's is_authorized_monitor */
        return mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "Not monitor user");
    json_t *all = nodes_json(r->m);
    if (r->nsegs == 1)
        return mgmt_reply_json(r, 200, all);
    if (r->nsegs == 2) {
        size_t i;
        json_t *n;
        json_array_foreach(all, i, n)
        {
            if (!strcmp(json_string_value(json_object_get(n, "name")), r->segs[1])) {
                json_incref(n);
                json_decref(all);
                return mgmt_reply_json(r, 200, n);
            }
        }
    }
    json_decref(all);
    return mgmt_reply_not_found(r);
}

static void vhost_perm_json(void *ctx, const acc_user *u, const acc_grant *g)
{
    json_array_append_new(ctx,
                          json_pack("{s:s,s:s,s:s,s:s,s:s}", "user", u->name, "vhost", g->vhost,
                                    "configure", g->src[0], "write", g->src[1], "read", g->src[2]));
}

static void vhost_topic_json(void *ctx, const acc_user *u, const acc_topic_grant *t)
{
    json_array_append_new(ctx, json_pack("{s:s,s:s,s:s,s:s,s:s}", "user", u->name, "vhost",
                                         t->vhost, "exchange", t->exchange, "write", t->src_write,
                                         "read", t->src_read));
}

json_t *mgmt_vhost_json(mgmt *m, qm_vhost *vh)
{
    node_totals t;
    node_totals_vhost_queues(vh, &t);
    const acc_vhost *av = acc_vhost_find(m->n->acc, vh->name, strlen(vh->name));
    return json_pack("{s:s,s:s,s:o,s:I,s:I,s:I,s:b}", "name", vh->name, "description",
                     av ? av->description : "", "tags", defs_tags_json(av ? av->tags : ""),
                     "messages", (json_int_t)t.messages, "messages_ready", (json_int_t)t.ready,
                     "messages_unacknowledged", (json_int_t)t.unacked, "tracing", 0);
}

enum MHD_Result mgmt_api_vhosts(req *r)
{
    mgmt *m = r->m;
    acc_db *a = m->n->acc;
    if (r->nsegs == 1) {
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        /* RabbitMQ's list_visible_vhosts: monitoring and administrator users see them all
         * (pager.c), others those they have a permission on */
        pager_scope all = {0};
        return mgmt_pager_list_scoped(r, PAGER_VHOSTS, &all);
    }
    if (r->nsegs == 3 && (!strcmp(r->segs[2], "connections") || !strcmp(r->segs[2], "channels"))) {
        /* RabbitMQ's connections_vhost / channels_vhost: the vhost must be visible to the
         * user; filter_user then */
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        if (!mgmt_req_vhost(r, r->segs[1]))
            return MHD_YES;
        if (!acc_is_monitor(a, r->user) && !acc_vhost_visible(a, r->user, r->segs[1]))
            return mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED,
                                     "User not authorised to access virtual host");
        pager_scope s = {.vhost = r->segs[1]};
        return mgmt_pager_list_scoped(r, r->segs[2][1] == 'o' ? PAGER_CONNECTIONS : PAGER_CHANNELS,
                                      &s);
    }
    if (r->nsegs == 3 && mgmt_req_is(r, "GET") &&
        (!strcmp(r->segs[2], "permissions") || !strcmp(r->segs[2], "topic-permissions"))) {
        if (!r->is_admin)
            return mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "Not administrator user");
        if (!acc_vhost_find(a, r->segs[1], strlen(r->segs[1])))
            return mgmt_reply_not_found(r);
        json_t *arr = json_array();
        if (r->segs[2][0] == 'p')
            acc_perm_each(a, NULL, r->segs[1], vhost_perm_json, arr);
        else
            acc_topic_perm_each(a, NULL, r->segs[1], vhost_topic_json, arr);
        return mgmt_reply_json(r, 200, arr);
    }
    if (r->nsegs != 2)
        return mgmt_reply_not_found(r);
    const char *name = r->segs[1];
    qm_vhost *vh = qm_vhost_find(mgmt_req_node(r), name, strlen(name));
    if (mgmt_req_is(r, "GET")) {
        if (vh && !acc_is_monitor(a, r->user) && !acc_vhost_visible(a, r->user, name))
            return mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED,
                                     "User not authorised to access virtual host");
        return vh ? mgmt_reply_json(r, 200, mgmt_vhost_json(m, vh)) : mgmt_reply_not_found(r);
    }
    char err[400];
    if (mgmt_req_is(r, "PUT")) {
        json_t *body = mgmt_req_body(r, 1);
        if (!body)
            return MHD_YES;
        json_t *d = json_object_get(body, "description"), *t = json_object_get(body, "tags");
        const char *desc = json_is_string(d) ? json_string_value(d) : NULL;
        char *tags = NULL;
        if (json_is_string(t)) {
            tags = sl_xstrdup(json_string_value(t));
        } else if (json_is_array(t)) {
            sl_buf b;
            sl_buf_init(&b);
            size_t i;
            json_t *e;
            json_array_foreach(t, i, e) if (json_is_string(e))
            {
                sl_buf_append(&b, json_string_value(e), strlen(json_string_value(e)));
                sl_buf_put_u8(&b, ',');
            }
            sl_buf_put_u8(&b, 0);
            tags = (char *)b.data;
        }
        sl_err e = node_vhost_add(m->n, name, desc, tags, r->user, err, sizeof err);
        sl_free(tags);
        if (e != SL_OK)
            return mgmt_reply_error(r, 400, "bad_request", "%s", err);
        return mgmt_reply_empty(r, vh ? 204 : 201);
    }
    if (mgmt_req_is(r, "DELETE")) {
        if (!vh)
            return mgmt_reply_not_found(r);
        sl_err e = node_vhost_delete(m->n, name, err, sizeof err);
        if (e != SL_OK)
            return mgmt_reply_sl_err(r, e, "%s", err);
        return mgmt_reply_empty(r, 204);
    }
    return mgmt_reply_method_not_allowed(r);
}

/* ------------------------------------------------------------------------------------------
 * Connections, channels, consumers
 */

json_t *mgmt_conn_json(mgmt *m, const node_client *c)
{
    char host[64];
    int port;
    node_client_peer_split(c->peer, host, sizeof host, &port);
    json_t *o =
        json_pack("{s:s,s:s,s:s,s:I,s:s,s:i,s:s,s:i,s:s,s:s,s:s,s:i,s:i,s:i}", "name", c->name,
                  "user", c->user, "vhost", c->vhost, "channels", (json_int_t)c->channels,
                  "peer_host", host, "peer_port", port, "host", c->host, "port", c->port, "state",
                  c->state, "protocol", c->protocol, "node", m->n->cfg->node_name, "timeout",
                  c->heartbeat, "frame_max", (int)c->frame_max, "channel_max", c->channel_max);
    json_object_set_new(o, "ssl", json_boolean(c->tls));
    json_object_set_new(o, "auth_mechanism", json_string(c->auth_mechanism));
    if (c->props) { /* what the client said of itself (a stream client's PeerProperties) */
        json_t *cp = json_object();
        for (size_t i = 0; i < c->n_props; i++)
            json_object_set_new(cp, c->props[2 * i], defs_json_str_safe(c->props[2 * i + 1]));
        json_object_set_new(o, "client_properties", cp);
    }
    if (c->ssl_protocol) {
        json_object_set_new(o, "ssl_protocol", json_string(c->ssl_protocol));
        json_object_set_new(o, "ssl_cipher", json_string(c->ssl_cipher));
        json_object_set_new(o, "peer_cert_subject",
                            c->peer_cert_subject ? json_string(c->peer_cert_subject) : json_null());
    }
    return o;
}

json_t *mgmt_channel_json(mgmt *m, const node_client *c, const node_channel *ch)
{
    char name[200];
    snprintf(name, sizeof name, "%s (%u)", c->name, ch->number);
    return json_pack("{s:s,s:i,s:s,s:s,s:s,s:I,s:I,s:i,s:i,s:b,s:b,s:s,s:{s:s}}", "name", name,
                     "number", (int)ch->number, "user", c->user, "vhost", c->vhost, "node",
                     m->n->cfg->node_name, "consumer_count", (json_int_t)ch->consumers,
                     "messages_unacknowledged", (json_int_t)ch->unacked, "prefetch_count",
                     (int)ch->prefetch, "global_prefetch_count", (int)ch->global_prefetch,
                     "confirm", ch->confirm, "transactional", ch->transactional, "state",
                     ch->running ? "running" : "closing", "connection_details", "name", c->name);
}

enum MHD_Result mgmt_api_connections(req *r)
{
    if (r->nsegs == 1) {
        if (!mgmt_req_is(r, "GET"))
            return mgmt_reply_method_not_allowed(r);
        pager_scope all = {0};
        return mgmt_pager_list_scoped(r, PAGER_CONNECTIONS, &all);
    }
    return mgmt_connection(r, r->segs[1], NULL, r->nsegs == 2 ? NULL : r->segs[r->nsegs - 1],
                           r->nsegs > 3);
}

enum MHD_Result mgmt_connection(req *r, const char *name, const char *vhost, const char *sub,
                                int too_deep)
{
    node_client cv, *c = &cv;
    const node_part *door = node_client_find(r->m->n, name, c);
    /* under /api/stream: a stream connection of that vhost only */
    if (!door || !c->listed ||
        (vhost && (strcmp(c->protocol, "stream") || strcmp(c->vhost, vhost))))
        return mgmt_reply_sl_err(r, SL_ERR_NOT_FOUND, "no connection '%s'", name);
    /* RabbitMQ's is_authorized_user: monitors see every connection, administrators close
     * any; other users only their own */
    if (!(mgmt_req_is(r, "DELETE") ? r->is_admin : acc_is_monitor(r->m->n->acc, r->user)) &&
        strcmp(c->user, r->user))
        return mgmt_reply_sl_err(r, SL_ERR_ACCESS_REFUSED, "User not authorised to access object");
    /* what is under it: channels, or under /api/stream publishers and consumers */
    int kind = !sub || too_deep             ? -1
               : !vhost                     ? (strcmp(sub, "channels") ? -1 : PAGER_CHANNELS)
               : !strcmp(sub, "publishers") ? PAGER_STREAM_PUBLISHERS
               : !strcmp(sub, "consumers")  ? PAGER_STREAM_CONSUMERS
                                            : -1;
    if (kind >= 0 && mgmt_req_is(r, "GET")) {
        pager_scope s = {.conn = c->name};
        return mgmt_pager_list_scoped(r, kind, &s);
    }
    if (sub)
        return mgmt_reply_not_found(r);
    if (mgmt_req_is(r, "GET"))
        return mgmt_reply_json(r, 200, mgmt_conn_json(r->m, c));
    if (!mgmt_req_is(r, "DELETE"))
        return mgmt_reply_method_not_allowed(r);
    /* any door's client: an AMQP one gets connection.close 320, a stream one's socket ends */
    const char *reason = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Reason");
    char text[256];
    snprintf(text, sizeof text, "CONNECTION_FORCED - %s",
             reason ? reason : "Closed via management API");
    door->client_close(door->ctx, c->id, text);
    return mgmt_reply_empty(r, 204);
}

/* /api/channels/{name}: "<connection name> (<number>)", found without listing them all
 * (node_channel_find), of the connections the user sees (filter_user) */
static json_t *find_channel(req *r, const char *name)
{
    node_client_walk scope;
    node_client_walk_init(&scope, NODE_WALK_CHANNELS);
    scope.user = r->user;
    scope.monitor = acc_is_monitor(r->m->n->acc, r->user);
    node_client c;
    node_channel ch;
    if (!node_channel_find(r->m->n, &scope, name, &c, &ch))
        return NULL;
    return mgmt_channel_json(r->m, &c, &ch);
}

enum MHD_Result mgmt_api_channels(req *r)
{
    if (!mgmt_req_is(r, "GET"))
        return mgmt_reply_method_not_allowed(r);
    if (r->nsegs == 2) {
        json_t *ch = find_channel(r, r->segs[1]);
        return ch ? mgmt_reply_json(r, 200, ch) : mgmt_reply_not_found(r);
    }
    if (r->nsegs != 1)
        return mgmt_reply_not_found(r);
    pager_scope all = {0};
    return mgmt_pager_list_scoped(r, PAGER_CHANNELS, &all);
}

json_t *mgmt_consumer_json(mgmt *m, const node_client *c, const node_channel *ch,
                           const node_consumer *o)
{
    (void)m;
    char chname[200] = ""; /* channel 0: a stream connection's subscription (no channel) */
    if (ch->number)
        snprintf(chname, sizeof chname, "%s (%u)", c->name, ch->number);
    char host[64];
    int port;
    node_client_peer_split(c->peer, host, sizeof host, &port);
    const qm_queue *q = o->queue;
    json_t *j = json_pack("{s:s%,s:{s:s,s:s},s:{s:s,s:s,s:i,s:s,s:s,s:i},s:b,s:b,s:i,s:i,s:o}",
                          "consumer_tag", o->tag, o->tag_len, "queue", "name", q->name, "vhost",
                          q->vhost->name, "channel_details", "name", chname, "connection_name",
                          c->name, "number", (int)ch->number, "user", c->user, "peer_host", host,
                          "peer_port", port, "ack_required", o->ack_required, "exclusive",
                          o->exclusive, "prefetch_count", (int)o->prefetch, "priority", o->priority,
                          "arguments", defs_json_pairs(o->props, o->n_props));
    if (j && q->stream && o->qc) /* a stream's consumer: the offset of the next entry it gets */
        json_object_set_new(j, "stream_offset", json_integer((json_int_t)o->qc->st_next));
    if (j && o->activity_status)
        json_object_update_new(
            j, json_pack("{s:b,s:s}", "active", o->active, "activity_status", o->activity_status));
    return j;
}

enum MHD_Result mgmt_api_consumers(req *r)
{
    if (!mgmt_req_is(r, "GET"))
        return mgmt_reply_method_not_allowed(r);
    if (r->nsegs > 2)
        return mgmt_reply_not_found(r);
    /* /api/consumers/{vhost}: the consumers on that vhost's queues, of a vhost the user may
     * list (as /api/queues/{vhost}) */
    if (r->nsegs == 2 && (!mgmt_req_vhost(r, r->segs[1]) || !mgmt_req_vhost_access(r, r->segs[1])))
        return MHD_YES;
    pager_scope s = {.vhost = r->nsegs == 2 ? r->segs[1] : NULL};
    return mgmt_pager_list_scoped(r, PAGER_CONSUMERS, &s);
}
