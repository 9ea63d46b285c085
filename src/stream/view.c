/* view.c - the stream door's connections, publishers and subscriptions as node/clients.h
 * views, for the HTTP API's lists (the node's client hooks on the door's part): RabbitMQ's
 * /api/connections shows stream connections beside AMQP ones, and its stream management
 * plugin /api/stream/connections, publishers and consumers.
 *
 * A stream connection is listed as RabbitMQ's reader lists it: protocol "stream", no channels
 * (channel_max 0), the client's PeerProperties as client_properties, the tuned frame_max and
 * heartbeat; from Open until the closing handshake is over. Closing one (DELETE
 * /api/connections/NAME) ends it as RabbitMQ's management does: what was said is flushed and
 * the socket closes, with no Close frame (which the clients do not take from the server).
 *
 * Invariants: the views point into the connections' own state and live only during the call;
 * d->conns is newest first with decreasing ids (the node's, node_client_id), which is what a
 * walk resumes by.
 */
#include <stddef.h>
#include <string.h>

#include "core/mem.h"
#include "net/tls.h"
#include "stream/internal.h"

char **stream_props_copy(const sp_map *m, size_t *n)
{
    *n = 0;
    if (!m->n)
        return NULL;
    char **v = sl_xcalloc((size_t)m->n * 2, sizeof *v);
    for (uint32_t i = 0; i < m->n; i++) {
        const sp_kv *kv = &m->v[i];
        if (kv->key.null)
            continue;
        /* strings may hold any byte: a NUL cuts what the JSON shows, nothing else */
        v[2 * *n] = sl_xstrndup((const char *)kv->key.p, kv->key.len);
        v[2 * *n + 1] =
            kv->value.null ? sl_xstrdup("") : sl_xstrndup((const char *)kv->value.p, kv->value.len);
        (*n)++;
    }
    return v;
}

void stream_props_free(char **props, size_t n)
{
    for (size_t i = 0; i < 2 * n; i++)
        sl_free(props[i]);
    sl_free(props);
}

static void fill_client(const stream_door *d, const stream_conn *c, node_client *v)
{
    memset(v, 0, sizeof *v);
    v->id = c->id;
    v->name = c->name;
    v->peer = c->peer;
    v->user = c->user ? c->user : "";
    v->vhost = c->vhost ? c->vhost : "";
    v->protocol = "stream"; /* RabbitMQ's reader: i(protocol) -> <<"stream">> */
    v->state = c->state >= SC_CLOSING    ? "closing"
               : c->state < SC_OPEN      ? "starting"
               : d->blocked && c->n_pubs ? "blocked"
                                         : "running";
    /* as RabbitMQ lists it: once open (its reader registers the connection at Open), until
     * the closing handshake is over */
    v->listed = c->state >= SC_OPEN && c->state < SC_LINGER;
    v->host = c->tls ? d->tls_addr : d->addr;
    v->port = c->tls ? d->tls_port : d->port;
    v->channels = 0;
    v->heartbeat = (int)c->heartbeat;
    v->frame_max = c->frame_max;
    v->channel_max = 0;
    v->auth_mechanism = c->auth_mechanism ? c->auth_mechanism : "";
    v->tls = c->tls != NULL;
    if (c->tls && c->state != SC_TLS) {
        v->ssl_protocol = sl_tls_protocol(c->tls);
        v->ssl_cipher = sl_tls_cipher(c->tls);
        if (sl_tls_peer_dn(c->tls, v->dn_buf, sizeof v->dn_buf) == 0)
            v->peer_cert_subject = v->dn_buf;
    }
    v->props = (const char *const *)c->props;
    v->n_props = c->n_props;
}

/* The first connection with an id <= at_most (node/clients.h: node_client_cursor). */
static stream_conn *at_or_below(stream_door *d, uint64_t at_most)
{
    return node_client_at_or_below(&d->view, d->conns, offsetof(stream_conn, next),
                                   offsetof(stream_conn, id), at_most, d->n->next_client_id);
}

static stream_conn *by_id(stream_door *d, uint64_t id)
{
    stream_conn *c = at_or_below(d, id);
    return c && c->id == id ? c : NULL;
}

static int client_next(void *ctx, uint64_t at_most, node_client *out)
{
    stream_door *d = ctx;
    stream_conn *c = at_or_below(d, at_most);
    if (!c)
        return 0;
    fill_client(d, c, out);
    return 1;
}

static int client_find(void *ctx, const char *name, node_client *out)
{
    stream_door *d = ctx;
    for (stream_conn *c = d->conns; c; c = c->next)
        if (!strcmp(c->name, name)) {
            fill_client(d, c, out);
            return 1;
        }
    return 0;
}

static int client_close(void *ctx, uint64_t id, const char *text)
{
    stream_conn *c = by_id(ctx, id);
    if (!c || c->state >= SC_CLOSING)
        return 0;
    /* RabbitMQ's reader stops and its socket closes, with no Close frame: the clients take
     * none from the server (the Node.js one throws "Unknown response 22"), they see the
     * socket end and call their connection_closed listeners */
    stream_conn_linger(c, text);
    stream_conn_flush(c);
    return 1;
}

static void publishers(void *ctx, uint64_t client, node_publisher_fn fn, void *arg)
{
    stream_conn *c = by_id(ctx, client);
    if (c)
        stream_publishers_view(c, fn, arg);
}

static void subscriptions(void *ctx, uint64_t client, node_subscription_fn fn, void *arg)
{
    stream_conn *c = by_id(ctx, client);
    if (c)
        stream_subs_view(c, fn, arg);
}

void stream_view_hooks(node_part *part)
{
    part->client_next = client_next;
    part->client_find = client_find;
    part->client_close = client_close;
    part->publishers = publishers;
    part->subscriptions = subscriptions;
}
