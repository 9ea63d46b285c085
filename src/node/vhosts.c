/* vhosts.c - the node's side of the access module (src/access/): seeding the default user,
 * vhost and config users at start, creating and deleting vhosts across the model (qm) and
 * their definitions (acc), and asking every door (node_part) to close the connections of a
 * deleted user or vhost and to count connections for the limits; CONNECT / DISCONNECT; who
 * counts as loopback.
 *
 * Seeding follows RabbitMQ: on the very first start of a data directory (no access records
 * yet; also the first start of a directory written before access control existed) the
 * default vhost and the default user (default_user / default_pass, guest/guest) are created,
 * the default user gets default_permissions (.* .* .*) on every vhost there is, and a record
 * says it was done, so a default user deleted later stays deleted. Config users
 * (user.NAME = PASSWORD) are re-applied at every start: a missing one is created with full
 * permissions on every vhost there is (what every user had before permissions existed), an
 * existing one gets the config's password and tags; its permissions are managed like any
 * other user's from then on.
 */
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "access/access.h"
#include "core/log.h"
#include "core/mem.h"
#include "node/node_internal.h"

static void grant_everywhere(sl_node *n, const char *user, char *const perms[3])
{
    char err[512];
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(n->qm->vhosts, &it, &k, &kl, &v))
        if (acc_perm_set(n->acc, user, k, perms[0], perms[1], perms[2], err, sizeof err) != SL_OK)
            sl_warn("access: cannot give '%s' permissions on '%s': %s", user, k, err);
}

static void seed_config_user(sl_node *n, const node_user *cu)
{
    char err[512];
    const acc_user *u = acc_user_find(n->acc, cu->name, strlen(cu->name));
    char *tags = NULL;
    if (u) {
        /* Unchanged since the last start: write nothing (a new salt would be a new record). */
        int same_pw = u->algo != ACC_HASH_NONE &&
                      acc_verify_password((acc_hash)u->algo, u->hash, u->hash_len,
                                          (const uint8_t *)cu->password, strlen(cu->password));
        tags = acc_tags_normalize(cu->tags);
        int same_tags = !strcmp(tags, u->tags);
        sl_free(tags);
        if (cu->link_bound && (!u->link_bound || memcmp(u->link_node, cu->link_node, 16)))
            acc_user_link_bind(n->acc, cu->name, cu->link_node, err, sizeof err);
        if (same_pw && same_tags && u->from_config)
            return;
    }
    int created = 0;
    acc_user_def d = {.name = cu->name,
                      .password = cu->password,
                      .password_len = strlen(cu->password),
                      .tags = cu->tags,
                      .from_config = 1};
    if (acc_user_put(n->acc, &d, &created, err, sizeof err) != SL_OK) {
        sl_warn("access: config user '%s' not created: %s", cu->name, err);
        return;
    }
    if (cu->link_bound)
        acc_user_link_bind(n->acc, cu->name, cu->link_node, err, sizeof err);
    if (created) {
        static char full[] = ".*";
        char *const perms[3] = {full, full, full};
        grant_everywhere(n, cu->name, perms);
    }
}

int node_access_init(sl_node *n)
{
    const node_config *cfg = n->cfg;
    char err[512];
    /* msrpc.ntlm_hashes off: no NT hash stays in the data dir (they are password-equivalent) */
    if (!(cfg->msrpc_ntlm_hashes == 1 || (cfg->msrpc_ntlm_hashes < 0 && !cfg->msrpc_auth_none)))
        acc_drop_nt_hashes(n->acc);
    if (!acc_initialized(n->acc)) {
        if (!qm_vhost_find(n->qm, cfg->default_vhost, strlen(cfg->default_vhost)) &&
            node_vhost_add(n, cfg->default_vhost, NULL, NULL, NULL, err, sizeof err) != SL_OK) {
            sl_error("default_vhost '%s': %s", cfg->default_vhost, err);
            return -1;
        }
        if (cfg->default_user[0] &&
            !acc_user_find(n->acc, cfg->default_user, strlen(cfg->default_user))) {
            acc_user_def d = {.name = cfg->default_user,
                              .password = cfg->default_pass,
                              .password_len = strlen(cfg->default_pass),
                              .tags = cfg->default_user_tags};
            if (acc_user_put(n->acc, &d, NULL, err, sizeof err) != SL_OK) {
                sl_error("default_user '%s': %s", cfg->default_user, err);
                return -1;
            }
            grant_everywhere(n, cfg->default_user, cfg->default_perms);
            sl_info("access: created the default user '%s'", cfg->default_user);
        }
        acc_mark_initialized(n->acc);
    }
    for (size_t i = 0; i < cfg->n_users; i++)
        seed_config_user(n, &cfg->users[i]);
    return 0;
}

sl_err node_vhost_add(sl_node *n, const char *name, const char *description, const char *tags,
                      const char *acting_user, char *err, size_t errlen)
{
    int created = 0;
    sl_err e = acc_vhost_put(n->acc, name, description, tags, &created, err, errlen);
    if (e != SL_OK)
        return e;
    qm_vhost_create(n->qm, name);
    /* RabbitMQ: the user who creates a vhost over the API gets full permissions on it. */
    if (created && acting_user && acc_user_find(n->acc, acting_user, strlen(acting_user)))
        acc_perm_set(n->acc, acting_user, name, ".*", ".*", ".*", err, errlen);
    if (created)
        sl_info("access: vhost '%s' created", name);
    return SL_OK;
}

/* Close, over every door, what match picks (text: the 320's reply text). */
sl_err node_vhost_delete(sl_node *n, const char *name, char *err, size_t errlen)
{
    qm_vhost *vh = qm_vhost_find(n->qm, name, strlen(name));
    if (!vh || !acc_vhost_find(n->acc, name, strlen(name))) {
        snprintf(err, errlen, "no vhost '%s'", name);
        return SL_ERR_NOT_FOUND;
    }
    char text[400];
    snprintf(text, sizeof text, "CONNECTION_FORCED - vhost '%s' is deleted", name);
    size_t closed = 0;
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].vhost_deleting)
            closed += n->parts[i].vhost_deleting(n->parts[i].ctx, vh, text);
    /* The definition's deletion record first: on replay it stands for everything in the
     * vhost, so a crash part way through the queue records below leaves nothing behind. */
    acc_vhost_delete(n->acc, name, err, errlen);
    qm_vhost_delete(n->qm, vh);
    sl_info("access: vhost '%s' deleted (%zu connection(s) closed)", name, closed);
    return SL_OK;
}

size_t node_close_user_connections(sl_node *n, const char *user, const char *why)
{
    size_t closed = 0;
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].close_user)
            closed += n->parts[i].close_user(n->parts[i].ctx, user, why);
    return closed;
}

uint64_t node_count_connections(sl_node *n, const char *user, const char *vhost)
{
    uint64_t cnt = 0;
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].count_connections)
            cnt += n->parts[i].count_connections(n->parts[i].ctx, user, vhost);
    return cnt;
}

uint64_t node_count_user_channels(sl_node *n, const char *user)
{
    uint64_t cnt = 0;
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].count_user_channels)
            cnt += n->parts[i].count_user_channels(n->parts[i].ctx, user);
    return cnt;
}

void node_set_online(sl_node *n, int online)
{
    n->qm->online = (uint8_t)online;
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].set_online)
            n->parts[i].set_online(n->parts[i].ctx, online);
}

int node_peer_describe(sl_node *n, const struct sockaddr_storage *ss, char *peer, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
        port = ntohs(sin->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
        port = ntohs(sin6->sin6_port);
    }
    snprintf(peer, len, "%s:%d", host, port);
    return node_peer_is_loopback(n, (const struct sockaddr *)ss);
}

int node_peer_is_loopback(sl_node *n, const struct sockaddr *sa)
{
    int lo = 0;
    if (sa->sa_family == AF_INET) {
        lo = (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        lo = IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    if (!lo)
        return 0;
    /* In a cluster, another member's address may carry any client's connection through its
     * proxy (src/cluster/proxy.c binds to the member's advertised address): never loopback,
     * so loopback_users (guest) hold for clients of the whole cluster. */
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].peer_is_member && n->parts[i].peer_is_member(n->parts[i].ctx, sa))
            return 0;
    return 1;
}
