/* start.c - the links as a part of the node: the link manager made from the settings
 * (link_*, eod_resend_ms, link_ssl), recovered from the store, and wired to the node's turn
 * (send what the syncs allow), its syncs (acknowledgements), CONNECT / DISCONNECT and its end.
 *
 * Invariant: the manager is made after the store opened (it recovers the outgoing queues from
 * it) and before any door listens (the AMQP door tells it the node's own address).
 */
#include <string.h>

#include "core/log.h"
#include "link/link.h"
#include "link/rpc_queue.h"
#include "net/tls.h"
#include "node/node.h"

static int links_turn(void *ctx)
{
    link_mgr_flush(ctx);
    return 0;
}

static void links_released(void *ctx)
{
    link_mgr_synced(ctx);
}

static void links_set_online(void *ctx, int online)
{
    link_mgr_set_online(ctx, online);
}

/* Links hand their in-flight messages back (they stay in the store as they are). */
static void links_stop(void *ctx)
{
    link_mgr_free(ctx);
    link_rpc_queue_free_all(); /* remote handles' open descriptors, before the queues go */
}

int link_start(sl_node *n)
{
    const node_config *cfg = n->cfg;
    link_rpc_queue_set_access(n->acc); /* remote handles opened by other nodes' links */
    link_options lo;
    link_options_defaults(&lo);
    lo.user = cfg->link_user;
    lo.password = cfg->link_password;
    lo.heartbeat_s = cfg->link_heartbeat_s;
    lo.retry_min_ms = cfg->link_retry_min_ms;
    lo.retry_max_ms = cfg->link_retry_max_ms;
    lo.idle_ms = cfg->link_idle_ms;
    memcpy(lo.resend_ms, cfg->eod_resend_ms, sizeof lo.resend_ms);
    lo.batch_msgs = cfg->link_batch_msgs;
    lo.batch_bytes = cfg->link_batch_bytes;
    lo.window_batches = cfg->link_window;
    lo.bad_queue_grace_ms = cfg->link_bad_queue_grace_ms;
    lo.reach_queue_ms = cfg->link_time_to_reach_queue_ms;
    lo.dns_timeout_ms = cfg->link_dns_timeout_ms;
    lo.msmq_hosts = cfg->msmq_hosts;
    if (cfg->link_tls) {
        /* links over TLS: a client context, the destination's certificate verified */
        char err[512];
        sl_tls_opts to;
        node_tls_opts(&cfg->link_ssl, &to);
        n->link_tls_ctx = sl_tls_ctx_new(0, &to, err, sizeof err);
        if (!n->link_tls_ctx) {
            sl_error("link_ssl_options: %s", err);
            return -1;
        }
        lo.tls = n->link_tls_ctx;
    }
    n->links = link_mgr_new(n->qm, n->loop, n->store, &lo);
    link_mgr_recover(n->links);
    node_part part = {.name = "links",
                      .ctx = n->links,
                      .turn = links_turn,
                      .released = links_released,
                      .set_online = links_set_online,
                      .stop = links_stop};
    node_add_part(n, &part);
    return 0;
}
