/* view.c - the AMQP door's connections, channels and consumers as node/clients.h views, for
 * the HTTP API's lists (the node's client hooks; broker.c registers them).
 *
 * Invariant: the views point into the connections' own state and live only during the call;
 * b->conns is newest first with decreasing ids, which is what a walk resumes by.
 */
#include <stddef.h>
#include <string.h>

#include "broker/broker.h"
#include "net/tls.h"

static void fill_client(const broker *b, conn *c, node_client *v)
{
    memset(v, 0, sizeof *v);
    v->id = c->id;
    v->name = c->name;
    v->peer = c->peer;
    v->user = c->user ? c->user : "";
    v->vhost = c->vhost ? c->vhost->name : "";
    v->protocol = "AMQP 0-9-1";
    v->state = c->state == CONN_OPEN      ? (c->blocked_sent ? "blocked" : "running")
               : c->state >= CONN_CLOSING ? "closing"
                                          : "starting";
    /* As RabbitMQ's management lists them: from connection.open-ok (a connection in its
     * handshake is not one yet) until the closing handshake is over (a lingering one is
     * closed; it only waits for the client to hang up). Clients that wait for "the connection
     * is listed again" after a forced close (Bunny's recovery specs do) would otherwise go on
     * before their recovery is done. */
    v->listed = c->state >= CONN_OPEN && c->state < CONN_LINGER;
    v->host = c->tls ? b->tls_bound_addr : b->bound_addr;
    v->port = c->tls ? b->tls_bound_port : b->bound_port;
    v->channels = c->n_channels;
    v->heartbeat = c->heartbeat;
    v->frame_max = c->frame_max;
    v->channel_max = c->channel_max;
    v->auth_mechanism = c->auth_mechanism ? c->auth_mechanism : "";
    v->tls = c->tls != NULL;
    if (c->tls && !c->tls_handshaking) {
        v->ssl_protocol = sl_tls_protocol(c->tls);
        v->ssl_cipher = sl_tls_cipher(c->tls);
        if (sl_tls_peer_dn(c->tls, v->dn_buf, sizeof v->dn_buf) == 0)
            v->peer_cert_subject = v->dn_buf;
    }
}

/* The first connection with an id <= at_most (node/clients.h: node_client_cursor): a walk
 * over each connection and each of its channels in turn costs a step each. */
static conn *at_or_below(broker *b, uint64_t at_most)
{
    return node_client_at_or_below(&b->view, b->conns, offsetof(conn, next), offsetof(conn, id),
                                   at_most, b->n->next_client_id);
}

static conn *by_id(broker *b, uint64_t id)
{
    conn *c = at_or_below(b, id);
    return c && c->id == id ? c : NULL;
}

int broker_client_next(void *ctx, uint64_t at_most, node_client *out)
{
    broker *b = ctx;
    conn *c = at_or_below(b, at_most);
    if (!c)
        return 0;
    fill_client(b, c, out);
    return 1;
}

int broker_client_find(void *ctx, const char *name, node_client *out)
{
    broker *b = ctx;
    for (conn *c = b->conns; c; c = c->next)
        if (!strcmp(c->name, name)) {
            fill_client(b, c, out);
            return 1;
        }
    return 0;
}

int broker_client_close(void *ctx, uint64_t id, const char *text)
{
    conn *c = by_id(ctx, id);
    if (!c)
        return 0;
    broker_conn_force_close(c, text);
    broker_mark_dirty(c);
    return 1;
}

int broker_channel_at(void *ctx, uint64_t client, size_t slot, node_channel *out)
{
    conn *c = by_id(ctx, client);
    if (!c || slot >= c->channels_cap)
        return -1;
    channel *ch = c->channels[slot];
    if (!ch)
        return 0;
    memset(out, 0, sizeof *out);
    out->number = ch->id;
    for (consumer *o = ch->consumers; o; o = o->next)
        out->consumers++;
    out->unacked = ch->ua_live;
    out->prefetch = ch->prefetch_next;
    out->global_prefetch = ch->prefetch_global;
    out->confirm = ch->confirm;
    out->transactional = ch->tx_mode;
    out->running = ch->state == CH_OPEN;
    return 1;
}

int broker_consumers(void *ctx, uint64_t client, size_t slot, const char *after, size_t after_len,
                     node_consumer_fn fn, void *arg)
{
    conn *c = by_id(ctx, client);
    if (!c || slot >= c->channels_cap || !c->channels[slot])
        return 1;
    channel *ch = c->channels[slot];
    consumer *o = ch->consumers;
    if (after) { /* after the last one walked; from the first when it is gone */
        consumer *f = broker_channel_find_consumer(ch, (const uint8_t *)after, after_len);
        o = f ? f->next : ch->consumers;
    }
    for (; o; o = o->next) {
        node_consumer v = {.tag = o->tag,
                           .tag_len = o->tag_len,
                           .queue = o->qc.queue,
                           .ack_required = !o->qc.no_ack,
                           .exclusive = o->qc.exclusive,
                           .prefetch = o->prefetch,
                           .priority = o->qc.priority,
                           .qc = &o->qc};
        if (!fn(arg, &v))
            return 0;
    }
    return 1;
}

/* An exclusive queue's owner is the connection that declared it (qm's opaque owner). */
const char *broker_owner_name(void *ctx, const void *owner)
{
    (void)ctx;
    return owner ? ((const conn *)owner)->name : "";
}
