/* security.c - the broker's side of the access module (src/access/): seeding the default user,
 * vhost and config users at start, creating and deleting vhosts across the model (qm) and
 * their definitions (acc), closing the connections of a deleted user or vhost, and counting
 * connections for the limits.
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

#include "access/access.h"
#include "core/log.h"
#include "core/mem.h"
#include "broker/broker.h"

static void grant_everywhere(broker *b, const char *user, char *const perms[3])
{
    char err[512];
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(b->qm->vhosts, &it, &k, &kl, &v))
        if (acc_perm_set(b->acc, user, k, perms[0], perms[1], perms[2], err, sizeof err) != SL_OK)
            sl_warn("access: cannot give '%s' permissions on '%s': %s", user, k, err);
}

static void seed_config_user(broker *b, const sl_user *cu)
{
    char err[512];
    const acc_user *u = acc_user_find(b->acc, cu->name, strlen(cu->name));
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
            acc_user_link_bind(b->acc, cu->name, cu->link_node, err, sizeof err);
        if (same_pw && same_tags && u->from_config)
            return;
    }
    int created = 0;
    acc_user_def d = {.name = cu->name,
                      .password = cu->password,
                      .password_len = strlen(cu->password),
                      .tags = cu->tags,
                      .from_config = 1};
    if (acc_user_put(b->acc, &d, &created, err, sizeof err) != SL_OK) {
        sl_warn("access: config user '%s' not created: %s", cu->name, err);
        return;
    }
    if (cu->link_bound)
        acc_user_link_bind(b->acc, cu->name, cu->link_node, err, sizeof err);
    if (created) {
        static char full[] = ".*";
        char *const perms[3] = {full, full, full};
        grant_everywhere(b, cu->name, perms);
    }
}

int node_access_init(broker *b)
{
    const sl_config *cfg = b->cfg;
    char err[512];
    /* msrpc.ntlm_hashes off: no NT hash stays in the data dir (they are password-equivalent) */
    if (!(cfg->msrpc_ntlm_hashes == 1 || (cfg->msrpc_ntlm_hashes < 0 && !cfg->msrpc_auth_none)))
        acc_drop_nt_hashes(b->acc);
    if (!acc_initialized(b->acc)) {
        if (!qm_vhost_find(b->qm, cfg->default_vhost, strlen(cfg->default_vhost)) &&
            node_vhost_add(b, cfg->default_vhost, NULL, NULL, NULL, err, sizeof err) != SL_OK) {
            sl_error("default_vhost '%s': %s", cfg->default_vhost, err);
            return -1;
        }
        if (cfg->default_user[0] &&
            !acc_user_find(b->acc, cfg->default_user, strlen(cfg->default_user))) {
            acc_user_def d = {.name = cfg->default_user,
                              .password = cfg->default_pass,
                              .password_len = strlen(cfg->default_pass),
                              .tags = cfg->default_user_tags};
            if (acc_user_put(b->acc, &d, NULL, err, sizeof err) != SL_OK) {
                sl_error("default_user '%s': %s", cfg->default_user, err);
                return -1;
            }
            grant_everywhere(b, cfg->default_user, cfg->default_perms);
            sl_info("access: created the default user '%s'", cfg->default_user);
        }
        acc_mark_initialized(b->acc);
    }
    for (size_t i = 0; i < cfg->n_users; i++)
        seed_config_user(b, &cfg->users[i]);
    return 0;
}

sl_err node_vhost_add(broker *b, const char *name, const char *description, const char *tags,
                      const char *acting_user, char *err, size_t errlen)
{
    int created = 0;
    sl_err e = acc_vhost_put(b->acc, name, description, tags, &created, err, errlen);
    if (e != SL_OK)
        return e;
    qm_vhost_create(b->qm, name);
    /* RabbitMQ: the user who creates a vhost over the API gets full permissions on it. */
    if (created && acting_user && acc_user_find(b->acc, acting_user, strlen(acting_user)))
        acc_perm_set(b->acc, acting_user, name, ".*", ".*", ".*", err, errlen);
    if (created)
        sl_info("access: vhost '%s' created", name);
    return SL_OK;
}

/* Close with 320 every live connection for which match says so. */
static size_t close_matching(broker *b, int (*match)(const conn *c, const char *arg),
                             const char *arg, const char *text)
{
    size_t n = 0;
    for (conn *c = b->conns; c; c = c->next) {
        if (c->state == CONN_DEAD || !match(c, arg))
            continue;
        conn_force_close(c, text);
        broker_mark_dirty(c);
        n++;
    }
    return n;
}

static int conn_in_vhost(const conn *c, const char *vhost)
{
    return c->vhost && !strcmp(c->vhost->name, vhost);
}

static int conn_of_user(const conn *c, const char *user)
{
    return c->user && !strcmp(c->user, user);
}

sl_err node_vhost_delete(broker *b, const char *name, char *err, size_t errlen)
{
    qm_vhost *vh = qm_vhost_find(b->qm, name, strlen(name));
    if (!vh || !acc_vhost_find(b->acc, name, strlen(name))) {
        snprintf(err, errlen, "no vhost '%s'", name);
        return SL_ERR_NOT_FOUND;
    }
    char text[400];
    snprintf(text, sizeof text, "CONNECTION_FORCED - vhost '%s' is deleted", name);
    size_t closed = close_matching(b, conn_in_vhost, name, text);
    /* The definition's deletion record first: on replay it stands for everything in the
     * vhost, so a crash part way through the queue records below leaves nothing behind. */
    acc_vhost_delete(b->acc, name, err, errlen);
    if (b->on_vhost_deleted)
        b->on_vhost_deleted(b, vh);
    qm_vhost_delete(b->qm, vh);
    sl_info("access: vhost '%s' deleted (%zu connection(s) closed)", name, closed);
    return SL_OK;
}

size_t node_close_user_connections(broker *b, const char *user, const char *why)
{
    char text[400];
    snprintf(text, sizeof text, "CONNECTION_FORCED - user '%s' %s", user, why);
    return close_matching(b, conn_of_user, user, text);
}

uint64_t node_count_connections(broker *b, const char *user, const char *vhost)
{
    uint64_t n = 0;
    for (conn *c = b->conns; c; c = c->next)
        if (c->state == CONN_OPEN && (!user || conn_of_user(c, user)) &&
            (!vhost || conn_in_vhost(c, vhost)))
            n++;
    return n;
}

uint64_t node_count_user_channels(broker *b, const char *user)
{
    uint64_t n = 0;
    for (conn *c = b->conns; c; c = c->next)
        if (c->state == CONN_OPEN && conn_of_user(c, user))
            n += c->n_channels;
    return n;
}
