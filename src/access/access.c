/* access.c - users, vhost definitions, permissions, limits, and the checks every door asks.
 *
 * Invariants: every acc_grant / acc_topic_grant belongs to an existing user (deleting a user
 * frees them); outside replay every grant names an existing vhost definition (deleting a
 * vhost drops them); acc->gen moves at every change, so pointers a caller cached together
 * with the generation it saw are valid while the generation is unchanged.
 */
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/mem.h"
#include "core/utf16.h"
#include "access/access_internal.h"
#include "access/nthash.h"

static const char *const perm_names[] = {"configure", "write", "read"};
static const char *const kind_names[] = {"queue", "exchange"};

/* ------------------------------------------------------------------------------------------
 * Small helpers
 */

int acc_name_ok(const char *s, size_t n)
{
    /* UTF-8 by core/utf16.h's policy, and no NUL inside */
    return n > 0 && n <= 255 && !memchr(s, 0, n) && sl_utf8_valid((const uint8_t *)s, n);
}

char *acc_tags_normalize(const char *tags)
{
    size_t n = tags ? strlen(tags) : 0;
    char *out = sl_xmalloc(n + 1);
    size_t o = 0;
    for (const char *p = tags; p && *p;) {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        size_t len = strcspn(p, " ,\t");
        if (!len)
            break;
        /* skip duplicates */
        int dup = 0;
        for (size_t i = 0; i < o;) {
            size_t l = 0;
            while (i + l < o && out[i + l] != ',')
                l++;
            if (l == len && !memcmp(out + i, p, len))
                dup = 1;
            i += l + 1;
        }
        if (!dup) {
            if (o)
                out[o++] = ',';
            memcpy(out + o, p, len);
            o += len;
        }
        p += len;
    }
    out[o] = 0;
    return out;
}

static unsigned tag_bits_of(const char *tags)
{
    static const struct {
        const char *name;
        unsigned bit;
    } known[] = {
        {"administrator", ACC_TAG_ADMINISTRATOR}, {"monitoring", ACC_TAG_MONITORING},
        {"policymaker", ACC_TAG_POLICYMAKER},     {"management", ACC_TAG_MANAGEMENT},
        {"impersonator", ACC_TAG_IMPERSONATOR},   {"link", ACC_TAG_LINK},
    };
    unsigned bits = 0;
    for (const char *p = tags; p && *p;) {
        size_t len = strcspn(p, ",");
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (strlen(known[i].name) == len && !memcmp(known[i].name, p, len))
                bits |= known[i].bit;
        p += len;
        if (*p == ',')
            p++;
    }
    return bits;
}

static int cmp_user(const void *x, const void *y)
{
    return strcmp((*(const acc_user *const *)x)->name, (*(const acc_user *const *)y)->name);
}

static int cmp_vhost(const void *x, const void *y)
{
    return strcmp((*(const acc_vhost *const *)x)->name, (*(const acc_vhost *const *)y)->name);
}

static int cmp_grant(const void *x, const void *y)
{
    return strcmp((*(const acc_grant *const *)x)->vhost, (*(const acc_grant *const *)y)->vhost);
}

static int cmp_topic(const void *x, const void *y)
{
    const acc_topic_grant *a = *(const acc_topic_grant *const *)x,
                          *b = *(const acc_topic_grant *const *)y;
    int c = strcmp(a->vhost, b->vhost);
    return c ? c : strcmp(a->exchange, b->exchange);
}

/* The map's values in an array (caller frees), sorted with cmp. */
static void **values_sorted(const sl_map *m, size_t *n, int (*cmp)(const void *, const void *))
{
    *n = m ? sl_map_count(m) : 0;
    void **v = sl_xmalloc((*n ? *n : 1) * sizeof *v);
    size_t i = 0, it = 0;
    void *val;
    while (m && sl_map_next(m, &it, NULL, NULL, &val))
        v[i++] = val;
    qsort(v, *n, sizeof *v, cmp);
    return v;
}

static void bump(acc_db *a)
{
    a->gen++;
}

/* ------------------------------------------------------------------------------------------
 * Lifecycle
 */

acc_db *acc_new(void)
{
    acc_db *a = sl_xcalloc(1, sizeof *a);
    a->users = sl_map_new();
    a->vhosts = sl_map_new();
    a->loopback_users = sl_map_new();
    sl_map_put(a->loopback_users, "guest", 5, (void *)1);
    a->default_hash = ACC_HASH_SHA256;
    a->gen = 1;
    return a;
}

static void grant_free(acc_grant *g)
{
    if (!g)
        return;
    for (int i = 0; i < 3; i++) {
        sl_free(g->src[i]);
        acc_re_free(g->re[i]);
    }
    sl_free(g->vhost);
    sl_free(g);
}

static void topic_free(acc_topic_grant *t)
{
    if (!t)
        return;
    sl_free(t->vhost);
    sl_free(t->exchange);
    sl_free(t->src_write);
    sl_free(t->src_read);
    acc_re_free(t->write);
    acc_re_free(t->read);
    sl_free(t);
}

void acc_user_free(acc_user *u)
{
    if (!u)
        return;
    size_t it = 0;
    void *v;
    while (sl_map_next(u->grants, &it, NULL, NULL, &v))
        grant_free(v);
    it = 0;
    while (sl_map_next(u->topics, &it, NULL, NULL, &v))
        topic_free(v);
    sl_map_free(u->grants);
    sl_map_free(u->topics);
    sl_free(u->name);
    sl_free(u->tags);
    OPENSSL_cleanse(u->nt_hash, sizeof u->nt_hash);
    sl_free(u->hash);
    sl_free(u);
}

static void vhost_free(acc_vhost *v)
{
    if (!v)
        return;
    sl_free(v->name);
    sl_free(v->description);
    sl_free(v->tags);
    sl_free(v);
}

void acc_free(acc_db *a)
{
    if (!a)
        return;
    size_t it = 0;
    void *v;
    while (sl_map_next(a->users, &it, NULL, NULL, &v))
        acc_user_free(v);
    it = 0;
    while (sl_map_next(a->vhosts, &it, NULL, NULL, &v))
        vhost_free(v);
    sl_map_free(a->users);
    sl_map_free(a->vhosts);
    sl_map_free(a->loopback_users);
    sl_free(a);
}

uint64_t acc_generation(const acc_db *a)
{
    return a->gen;
}

void acc_set_default_hash(acc_db *a, acc_hash algo)
{
    a->default_hash = algo;
}

void acc_set_keep_nt_hashes(acc_db *a, int on)
{
    a->keep_nt = on != 0;
}

void acc_drop_nt_hashes(acc_db *a)
{
    size_t it = 0;
    void *v;
    while (sl_map_next(a->users, &it, NULL, NULL, &v)) {
        acc_user *u = v;
        if (!u->has_nt_hash)
            continue;
        u->has_nt_hash = 0;
        OPENSSL_cleanse(u->nt_hash, sizeof u->nt_hash);
        acc_emit_user_nthash(a, u);
    }
}

int acc_user_nt_hash(const acc_db *a, const char *name, uint8_t out[16])
{
    const acc_user *u = sl_map_get(a->users, name, strlen(name));
    if (!u)
        return -1;
    if (!u->has_nt_hash)
        return -2;
    memcpy(out, u->nt_hash, 16);
    return 0;
}

acc_hash acc_default_hash(const acc_db *a)
{
    return a->default_hash;
}

void acc_set_loopback_user(acc_db *a, const char *name, int on)
{
    if (!name) {
        sl_map_free(a->loopback_users);
        a->loopback_users = sl_map_new();
    } else if (on) {
        sl_map_put(a->loopback_users, name, strlen(name), (void *)1);
    } else {
        sl_map_del(a->loopback_users, name, strlen(name));
    }
    bump(a);
}

int acc_is_loopback_user(const acc_db *a, const char *name)
{
    return sl_map_get(a->loopback_users, name, strlen(name)) != NULL;
}

int acc_initialized(const acc_db *a)
{
    return a->initialized;
}

/* ------------------------------------------------------------------------------------------
 * Users
 */

acc_user *acc_user_get_or_create(acc_db *a, const char *name, size_t len)
{
    acc_user *u = sl_map_get(a->users, name, len);
    if (u)
        return u;
    u = sl_xcalloc(1, sizeof *u);
    u->name = sl_xstrndup(name, len);
    u->tags = sl_xstrdup("");
    u->max_connections = u->max_channels = ACC_NO_LIMIT;
    u->grants = sl_map_new();
    u->topics = sl_map_new();
    sl_map_put(a->users, u->name, len, u);
    return u;
}

void acc_user_set_hash(acc_user *u, acc_hash algo, uint8_t *hash, size_t len)
{
    /* another password: the NT hash (if any) was the old one's */
    if (len != u->hash_len || (len && memcmp(hash, u->hash, len))) {
        u->has_nt_hash = 0;
        OPENSSL_cleanse(u->nt_hash, sizeof u->nt_hash);
    }
    sl_free(u->hash);
    u->hash = hash;
    u->hash_len = len;
    u->algo = (uint8_t)(len ? algo : ACC_HASH_NONE);
}

void acc_user_set_tags(acc_user *u, const char *tags)
{
    sl_free(u->tags);
    u->tags = acc_tags_normalize(tags);
    u->tag_bits = tag_bits_of(u->tags);
}

sl_err acc_user_put(acc_db *a, const acc_user_def *d, int *created, char *err, size_t errlen)
{
    size_t len = d->name ? strlen(d->name) : 0;
    if (!acc_name_ok(d->name ? d->name : "", len)) {
        snprintf(err, errlen, "a user name must be 1..255 bytes of UTF-8");
        return SL_ERR_PRECONDITION;
    }
    uint8_t *hash = NULL;
    size_t hlen = 0;
    acc_hash algo = ACC_HASH_NONE;
    int set_hash = 0;
    if (d->password) {
        algo = a->default_hash;
        if (acc_hash_password(algo, (const uint8_t *)d->password, d->password_len, &hash, &hlen) <
            0) {
            snprintf(err, errlen, "cannot hash the password");
            return SL_ERR_INTERNAL;
        }
        set_hash = 1;
    } else if (d->password_hash) {
        algo = d->algo;
        if (algo == ACC_HASH_NONE)
            algo = a->default_hash;
        if (acc_hash_import(algo, d->password_hash, &hash, &hlen, err, errlen) < 0)
            return SL_ERR_PRECONDITION;
        set_hash = 1;
    }
    acc_user *u = sl_map_get(a->users, d->name, len);
    if (created)
        *created = u == NULL;
    if (!u)
        u = acc_user_get_or_create(a, d->name, len);
    int had_nt = u->has_nt_hash;
    uint8_t old_nt[16];
    memcpy(old_nt, u->nt_hash, 16);
    if (set_hash)
        acc_user_set_hash(u, algo, hash, hlen);
    if (set_hash) {
        /* only a clear-text password gives an NT hash; an imported hash leaves none */
        u->has_nt_hash =
            d->password && a->keep_nt &&
            acc_nt_hash((const uint8_t *)d->password, d->password_len, u->nt_hash) == 0;
        if (!u->has_nt_hash)
            OPENSSL_cleanse(u->nt_hash, sizeof u->nt_hash);
    }
    if (d->tags)
        acc_user_set_tags(u, d->tags);
    u->from_config = (uint8_t)(d->from_config != 0);
    bump(a);
    acc_emit_user(a, u);
    if (had_nt != u->has_nt_hash || (had_nt && memcmp(old_nt, u->nt_hash, 16)))
        acc_emit_user_nthash(a, u);
    OPENSSL_cleanse(old_nt, sizeof old_nt);
    return SL_OK;
}

sl_err acc_user_def_check(const acc_db *a, const acc_user_def *d, char *err, size_t errlen)
{
    size_t len = d->name ? strlen(d->name) : 0;
    if (!acc_name_ok(d->name ? d->name : "", len)) {
        snprintf(err, errlen, "a user name must be 1..255 bytes of UTF-8");
        return SL_ERR_PRECONDITION;
    }
    if (!d->password && d->password_hash) {
        uint8_t *h;
        size_t hl;
        acc_hash algo = d->algo == ACC_HASH_NONE ? a->default_hash : d->algo;
        if (acc_hash_import(algo, d->password_hash, &h, &hl, err, errlen) < 0)
            return SL_ERR_PRECONDITION;
        sl_free(h);
    }
    return SL_OK;
}

sl_err acc_patterns_check(const char *const *src, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        char why[256];
        const char *p = src[i] ? src[i] : "";
        acc_re *re = acc_re_compile(p, strlen(p), why, sizeof why);
        if (!re) {
            snprintf(err, errlen, "pattern '%.200s': %s", p, why);
            return SL_ERR_PRECONDITION;
        }
        acc_re_free(re);
    }
    return SL_OK;
}

static sl_err no_user(const char *name, char *err, size_t errlen)
{
    snprintf(err, errlen, "no user '%s'", name);
    return SL_ERR_NOT_FOUND;
}

sl_err acc_user_delete(acc_db *a, const char *name, char *err, size_t errlen)
{
    acc_user *u = sl_map_del(a->users, name, strlen(name));
    if (!u)
        return no_user(name, err, errlen);
    acc_emit_user_del(a, name);
    acc_user_free(u);
    bump(a);
    return SL_OK;
}

const acc_user *acc_user_find(const acc_db *a, const char *name, size_t len)
{
    return name ? sl_map_get(a->users, name, len) : NULL;
}

static const acc_user *user_of(const acc_db *a, const char *name)
{
    return name ? sl_map_get(a->users, name, strlen(name)) : NULL;
}

const acc_user **acc_users(const acc_db *a, size_t *n)
{
    return (const acc_user **)values_sorted(a->users, n, cmp_user);
}

int acc_user_has_tag(const acc_user *u, unsigned tag_bits)
{
    return u && (u->tag_bits & tag_bits) != 0;
}

static int limit_value_ok(int64_t v)
{
    return v >= ACC_NO_LIMIT;
}

sl_err acc_user_set_limit(acc_db *a, const char *user, const char *limit, int64_t value, char *err,
                          size_t errlen)
{
    acc_user *u = sl_map_get(a->users, user, strlen(user));
    if (!u)
        return no_user(user, err, errlen);
    if (value < 0)
        value = ACC_NO_LIMIT;
    if (!limit_value_ok(value))
        return SL_ERR_INVALID_PARAMETER;
    if (!strcmp(limit, "max-connections")) {
        u->max_connections = value;
    } else if (!strcmp(limit, "max-channels")) {
        u->max_channels = value;
    } else {
        snprintf(err, errlen, "unknown user limit '%s' (max-connections, max-channels)", limit);
        return SL_ERR_INVALID_PARAMETER;
    }
    bump(a);
    acc_emit_user_limits(a, u);
    return SL_OK;
}

/* The end of every login: refused with RabbitMQ's words unless the credentials were good,
 * then the loopback-only rule (guest). */
static sl_err login_result(const acc_db *a, const acc_user *u, int ok, const char *name, size_t len,
                           int from_loopback, const acc_user **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!ok || !u) {
        snprintf(err, errlen, "user '%.*s' - invalid credentials", (int)len, name);
        return SL_ERR_ACCESS_REFUSED;
    }
    if (!from_loopback && acc_is_loopback_user(a, u->name)) {
        snprintf(err, errlen, "user '%s' can only connect via localhost", u->name);
        return SL_ERR_ACCESS_REFUSED;
    }
    *out = u;
    return SL_OK;
}

sl_err acc_login_password(const acc_db *a, const char *name, size_t len, const uint8_t *pass,
                          size_t plen, int from_loopback, const acc_user **out, char *err,
                          size_t errlen)
{
    const acc_user *u = acc_user_find(a, name, len);
    /* A blank password never logs in (RabbitMQ refuses it outright), nor does a user
     * without one. */
    int ok = u && plen > 0 && u->algo != ACC_HASH_NONE &&
             acc_verify_password((acc_hash)u->algo, u->hash, u->hash_len, pass, plen);
    return login_result(a, u, ok, name, len, from_loopback, out, err, errlen);
}

int acc_login_is_slow(const acc_user *u, size_t plen)
{
    return u && plen > 0 && u->algo == ACC_HASH_ARGON2ID;
}

sl_err acc_login_checked(const acc_db *a, const char *name, size_t len, const uint8_t *checked,
                         size_t checked_len, int ok, int from_loopback, const acc_user **out,
                         char *err, size_t errlen)
{
    const acc_user *u = acc_user_find(a, name, len);
    /* the hash checked must still be the user's: a password changed meanwhile refuses it */
    ok = ok && u && u->hash_len == checked_len && !memcmp(u->hash, checked, checked_len);
    return login_result(a, u, ok, name, len, from_loopback, out, err, errlen);
}

sl_err acc_login_external(const acc_db *a, const char *name, size_t len, int from_loopback,
                          const acc_user **out, char *err, size_t errlen)
{
    const acc_user *u = acc_user_find(a, name, len);
    return login_result(a, u, 1, name, len, from_loopback, out, err, errlen);
}

/* ------------------------------------------------------------------------------------------
 * Vhost definitions
 */

acc_vhost *acc_vhost_get_or_create(acc_db *a, const char *name, size_t len)
{
    acc_vhost *v = sl_map_get(a->vhosts, name, len);
    if (v)
        return v;
    v = sl_xcalloc(1, sizeof *v);
    v->name = sl_xstrndup(name, len);
    v->description = sl_xstrdup("");
    v->tags = sl_xstrdup("");
    v->max_connections = v->max_queues = ACC_NO_LIMIT;
    sl_map_put(a->vhosts, v->name, len, v);
    return v;
}

sl_err acc_vhost_put(acc_db *a, const char *name, const char *description, const char *tags,
                     int *created, char *err, size_t errlen)
{
    size_t len = name ? strlen(name) : 0;
    if (!acc_name_ok(name ? name : "", len)) {
        snprintf(err, errlen, "a vhost name must be 1..255 bytes of UTF-8");
        return SL_ERR_PRECONDITION;
    }
    acc_vhost *v = sl_map_get(a->vhosts, name, len);
    if (created)
        *created = v == NULL;
    if (!v)
        v = acc_vhost_get_or_create(a, name, len);
    if (description) {
        sl_free(v->description);
        v->description = sl_xstrdup(description);
    }
    if (tags) {
        sl_free(v->tags);
        v->tags = acc_tags_normalize(tags);
    }
    bump(a);
    acc_emit_vhost(a, v);
    return SL_OK;
}

static sl_err no_vhost(const char *name, char *err, size_t errlen)
{
    snprintf(err, errlen, "no vhost '%s'", name);
    return SL_ERR_NOT_FOUND;
}

/* Drop every permission and topic permission on vhost (no records: the vhost's deletion
 * record covers them, see records.c). */
static void forget_vhost_grants(acc_db *a, const char *name)
{
    size_t len = strlen(name);
    size_t it = 0;
    void *v;
    while (sl_map_next(a->users, &it, NULL, NULL, &v)) {
        acc_user *u = v;
        grant_free(sl_map_del(u->grants, name, len));
        size_t ti = 0;
        const char *k;
        size_t kl;
        void *tv;
        while (sl_map_next(u->topics, &ti, &k, &kl, &tv)) {
            if (kl > len && !memcmp(k, name, len) && k[len] == 0) {
                sl_map_del(u->topics, k, kl);
                topic_free(tv);
            }
        }
    }
}

void acc_vhost_forget(acc_db *a, const char *name)
{
    forget_vhost_grants(a, name);
    vhost_free(sl_map_del(a->vhosts, name, strlen(name)));
    bump(a);
}

sl_err acc_vhost_delete(acc_db *a, const char *name, char *err, size_t errlen)
{
    if (!sl_map_get(a->vhosts, name, strlen(name)))
        return no_vhost(name, err, errlen);
    acc_emit_vhost_del(a, name);
    acc_vhost_forget(a, name);
    return SL_OK;
}

const acc_vhost *acc_vhost_find(const acc_db *a, const char *name, size_t len)
{
    return name ? sl_map_get(a->vhosts, name, len) : NULL;
}

const acc_vhost **acc_vhosts(const acc_db *a, size_t *n)
{
    return (const acc_vhost **)values_sorted(a->vhosts, n, cmp_vhost);
}

sl_err acc_vhost_set_limit(acc_db *a, const char *vhost, const char *limit, int64_t value,
                           char *err, size_t errlen)
{
    acc_vhost *v = sl_map_get(a->vhosts, vhost, strlen(vhost));
    if (!v)
        return no_vhost(vhost, err, errlen);
    if (value < 0)
        value = ACC_NO_LIMIT;
    if (!strcmp(limit, "max-connections")) {
        v->max_connections = value;
    } else if (!strcmp(limit, "max-queues")) {
        v->max_queues = value;
    } else {
        snprintf(err, errlen, "unknown vhost limit '%s' (max-connections, max-queues)", limit);
        return SL_ERR_INVALID_PARAMETER;
    }
    bump(a);
    acc_emit_vhost_limits(a, v);
    return SL_OK;
}

/* ------------------------------------------------------------------------------------------
 * Permissions
 */

sl_err acc_perm_set(acc_db *a, const char *user, const char *vhost, const char *configure,
                    const char *write, const char *read, char *err, size_t errlen)
{
    acc_user *u = sl_map_get(a->users, user, strlen(user));
    if (!u)
        return no_user(user, err, errlen);
    if (!a->replaying && !sl_map_get(a->vhosts, vhost, strlen(vhost)))
        return no_vhost(vhost, err, errlen);
    const char *src[3] = {configure ? configure : "", write ? write : "", read ? read : ""};
    acc_re *re[3] = {0};
    for (int i = 0; i < 3; i++) {
        char why[256];
        re[i] = acc_re_compile(src[i], strlen(src[i]), why, sizeof why);
        if (!re[i]) {
            snprintf(err, errlen, "%s pattern '%.200s': %s", perm_names[i], src[i], why);
            for (int j = 0; j < i; j++)
                acc_re_free(re[j]);
            return SL_ERR_PRECONDITION;
        }
    }
    acc_grant *g = sl_xcalloc(1, sizeof *g);
    g->vhost = sl_xstrdup(vhost);
    for (int i = 0; i < 3; i++) {
        g->src[i] = sl_xstrdup(src[i]);
        g->re[i] = re[i];
    }
    grant_free(sl_map_put(u->grants, g->vhost, strlen(vhost), g));
    bump(a);
    acc_emit_perm(a, u, g);
    return SL_OK;
}

sl_err acc_perm_clear(acc_db *a, const char *user, const char *vhost, char *err, size_t errlen)
{
    acc_user *u = sl_map_get(a->users, user, strlen(user));
    if (!u)
        return no_user(user, err, errlen);
    acc_grant *g = sl_map_del(u->grants, vhost, strlen(vhost));
    if (!g) {
        snprintf(err, errlen, "user '%s' has no permissions on vhost '%s'", user, vhost);
        return SL_ERR_NOT_FOUND;
    }
    grant_free(g);
    bump(a);
    acc_emit_perm_del(a, user, vhost);
    return SL_OK;
}

static const acc_grant *grant_of(const acc_user *u, const char *vhost)
{
    return u && vhost ? sl_map_get(u->grants, vhost, strlen(vhost)) : NULL;
}

const acc_grant *acc_perm_get(const acc_db *a, const char *user, const char *vhost)
{
    return grant_of(user_of(a, user), vhost);
}

void acc_perm_each(const acc_db *a, const char *user, const char *vhost, acc_grant_fn fn, void *ctx)
{
    size_t nu;
    const acc_user **us = acc_users(a, &nu);
    for (size_t i = 0; i < nu; i++) {
        if (user && strcmp(us[i]->name, user))
            continue;
        size_t ng;
        acc_grant **gs = (acc_grant **)values_sorted(us[i]->grants, &ng, cmp_grant);
        for (size_t j = 0; j < ng; j++)
            if (!vhost || !strcmp(gs[j]->vhost, vhost))
                fn(ctx, us[i], gs[j]);
        sl_free(gs);
    }
    sl_free(us);
}

/* RabbitMQ's expand_topic_permission: {username} and {vhost} replaced by their values. */
static char *expand_topic(const char *pattern, const char *user, const char *vhost)
{
    sl_buf b;
    sl_buf_init(&b);
    for (const char *p = pattern; *p;) {
        if (!strncmp(p, "{username}", 10)) {
            sl_buf_append(&b, user, strlen(user));
            p += 10;
        } else if (!strncmp(p, "{vhost}", 7)) {
            sl_buf_append(&b, vhost, strlen(vhost));
            p += 7;
        } else {
            sl_buf_put_u8(&b, (uint8_t)*p++);
        }
    }
    sl_buf_put_u8(&b, 0);
    return (char *)b.data;
}

static size_t topic_key(char *out, size_t cap, const char *vhost, const char *exchange)
{
    size_t vl = strlen(vhost), xl = strlen(exchange);
    if (vl + xl + 1 > cap)
        return 0;
    memcpy(out, vhost, vl);
    out[vl] = 0;
    memcpy(out + vl + 1, exchange, xl);
    return vl + 1 + xl;
}

sl_err acc_topic_perm_set(acc_db *a, const char *user, const char *vhost, const char *exchange,
                          const char *write, const char *read, char *err, size_t errlen)
{
    acc_user *u = sl_map_get(a->users, user, strlen(user));
    if (!u)
        return no_user(user, err, errlen);
    if (!a->replaying && !sl_map_get(a->vhosts, vhost, strlen(vhost)))
        return no_vhost(vhost, err, errlen);
    if (!exchange || !acc_name_ok(exchange, strlen(exchange))) {
        snprintf(err, errlen, "a topic permission needs an exchange name of 1..255 bytes");
        return SL_ERR_PRECONDITION;
    }
    const char *src[2] = {write ? write : "", read ? read : ""};
    acc_re *re[2] = {0};
    for (int i = 0; i < 2; i++) {
        char why[256];
        char *x = expand_topic(src[i], user, vhost);
        re[i] = acc_re_compile(x, strlen(x), why, sizeof why);
        sl_free(x);
        if (!re[i]) {
            snprintf(err, errlen, "%s pattern '%.200s': %s", i ? "read" : "write", src[i], why);
            acc_re_free(re[0]);
            return SL_ERR_PRECONDITION;
        }
    }
    char key[520];
    size_t kl = topic_key(key, sizeof key, vhost, exchange);
    acc_topic_grant *t = sl_xcalloc(1, sizeof *t);
    t->vhost = sl_xstrdup(vhost);
    t->exchange = sl_xstrdup(exchange);
    t->src_write = sl_xstrdup(src[0]);
    t->src_read = sl_xstrdup(src[1]);
    t->write = re[0];
    t->read = re[1];
    topic_free(sl_map_put(u->topics, key, kl, t));
    bump(a);
    acc_emit_topic(a, u, t);
    return SL_OK;
}

sl_err acc_topic_perm_clear(acc_db *a, const char *user, const char *vhost, const char *exchange,
                            char *err, size_t errlen)
{
    acc_user *u = sl_map_get(a->users, user, strlen(user));
    if (!u)
        return no_user(user, err, errlen);
    int n = 0;
    size_t it = 0;
    const char *k;
    size_t kl;
    void *v;
    while (sl_map_next(u->topics, &it, &k, &kl, &v)) {
        acc_topic_grant *t = v;
        if (strcmp(t->vhost, vhost) || (exchange && strcmp(t->exchange, exchange)))
            continue;
        acc_emit_topic_del(a, user, vhost, t->exchange);
        sl_map_del(u->topics, k, kl);
        topic_free(t);
        n++;
    }
    if (!n) {
        snprintf(err, errlen, "user '%s' has no topic permissions on vhost '%s'", user, vhost);
        return SL_ERR_NOT_FOUND;
    }
    bump(a);
    return SL_OK;
}

void acc_topic_perm_each(const acc_db *a, const char *user, const char *vhost, acc_topic_fn fn,
                         void *ctx)
{
    size_t nu;
    const acc_user **us = acc_users(a, &nu);
    for (size_t i = 0; i < nu; i++) {
        if (user && strcmp(us[i]->name, user))
            continue;
        size_t nt;
        acc_topic_grant **ts = (acc_topic_grant **)values_sorted(us[i]->topics, &nt, cmp_topic);
        for (size_t j = 0; j < nt; j++)
            if (!vhost || !strcmp(ts[j]->vhost, vhost))
                fn(ctx, us[i], ts[j]);
        sl_free(ts);
    }
    sl_free(us);
}

/* ------------------------------------------------------------------------------------------
 * Checks
 */

sl_err acc_check(const acc_db *a, const char *user, const char *vhost, acc_kind kind,
                 const char *name, size_t len, acc_perm perm, char *err, size_t errlen)
{
    if (kind == ACC_EXCHANGE && len == 0) {
        name = "amq.default";
        len = 11;
    }
    size_t match_len = len;
    if (kind == ACC_QUEUE) {
        const char *semi = memchr(name, ';', len);
        if (semi)
            match_len = (size_t)(semi - name); /* a subqueue is checked as its queue */
    }
    const acc_grant *g = grant_of(user_of(a, user), vhost);
    if (g && acc_re_match(g->re[perm], name, match_len) == 1)
        return SL_OK;
    /* RabbitMQ 3.10's text (later versions put the permission's name in front) */
    snprintf(err, errlen, "access to %s '%.*s' in vhost '%s' refused for user '%s'",
             kind_names[kind], (int)len, name, vhost ? vhost : "", user ? user : "");
    return SL_ERR_ACCESS_REFUSED;
}

static const acc_topic_grant *topic_of(const acc_db *a, const char *user, const char *vhost,
                                       const char *exchange)
{
    const acc_user *u = user_of(a, user);
    if (!u || !vhost || !exchange || !sl_map_count(u->topics))
        return NULL;
    char key[520];
    size_t kl = topic_key(key, sizeof key, vhost, exchange);
    return kl ? sl_map_get(u->topics, key, kl) : NULL;
}

int acc_has_topic_perms(const acc_db *a, const char *user, const char *vhost, const char *exchange)
{
    return topic_of(a, user, vhost, exchange) != NULL;
}

sl_err acc_check_topic(const acc_db *a, const char *user, const char *vhost, const char *exchange,
                       const char *routing_key, size_t rk_len, acc_perm perm, char *err,
                       size_t errlen)
{
    const acc_topic_grant *t = topic_of(a, user, vhost, exchange);
    if (!t || perm == ACC_CONFIGURE)
        return SL_OK;
    if (acc_re_match(perm == ACC_WRITE ? t->write : t->read, routing_key, rk_len) == 1)
        return SL_OK;
    /* RabbitMQ 3.10's text; rabbit_misc:rs of a topic resource is "'x' in vhost '/'" */
    snprintf(err, errlen,
             "access to topic '%.*s' in exchange '%s' in vhost '%s' refused for user '%s'",
             (int)rk_len, routing_key, exchange, vhost, user);
    return SL_ERR_ACCESS_REFUSED;
}

sl_err acc_check_vhost(const acc_db *a, const char *user, const char *vhost, char *err,
                       size_t errlen)
{
    if (vhost && sl_map_get(a->vhosts, vhost, strlen(vhost)) && grant_of(user_of(a, user), vhost))
        return SL_OK;
    snprintf(err, errlen, "access to vhost '%s' refused for user '%s'", vhost ? vhost : "",
             user ? user : "");
    return SL_ERR_NOT_ALLOWED;
}

sl_err acc_check_connection_limits(const acc_db *a, const char *user, const char *vhost,
                                   uint64_t vhost_conns, uint64_t user_conns, char *err,
                                   size_t errlen)
{
    const acc_vhost *v = acc_vhost_find(a, vhost, vhost ? strlen(vhost) : 0);
    if (v && v->max_connections >= 0 && vhost_conns >= (uint64_t)v->max_connections) {
        snprintf(err, errlen,
                 "access to vhost '%s' refused for user '%s': connection limit (%lld) is reached",
                 vhost, user, (long long)v->max_connections);
        return SL_ERR_NOT_ALLOWED;
    }
    const acc_user *u = user_of(a, user);
    if (u && u->max_connections >= 0 && user_conns >= (uint64_t)u->max_connections) {
        snprintf(err, errlen,
                 "connection refused for user '%s': user connection limit (%lld) is reached", user,
                 (long long)u->max_connections);
        return SL_ERR_NOT_ALLOWED;
    }
    return SL_OK;
}

sl_err acc_check_channel_limit(const acc_db *a, const char *user, uint64_t user_channels, char *err,
                               size_t errlen)
{
    const acc_user *u = user_of(a, user);
    if (u && u->max_channels >= 0 && user_channels >= (uint64_t)u->max_channels) {
        snprintf(err, errlen,
                 "number of channels opened for user '%s' has reached the maximum allowed user "
                 "limit of (%lld)",
                 user, (long long)u->max_channels);
        return SL_ERR_NOT_ALLOWED;
    }
    return SL_OK;
}

sl_err acc_check_queue_limit(const acc_db *a, const char *vhost, uint64_t queues_now,
                             const char *queue, char *err, size_t errlen)
{
    const acc_vhost *v = acc_vhost_find(a, vhost, vhost ? strlen(vhost) : 0);
    if (v && v->max_queues >= 0 && queues_now >= (uint64_t)v->max_queues) {
        snprintf(err, errlen,
                 "cannot declare queue '%s': queue limit in vhost '%s' (%lld) is reached", queue,
                 vhost, (long long)v->max_queues);
        return SL_ERR_PRECONDITION;
    }
    return SL_OK;
}

int acc_is_admin(const acc_db *a, const char *user)
{
    return acc_user_has_tag(user_of(a, user), ACC_TAG_ADMINISTRATOR);
}

int acc_is_monitor(const acc_db *a, const char *user)
{
    return acc_user_has_tag(user_of(a, user), ACC_TAG_ADMINISTRATOR | ACC_TAG_MONITORING);
}

int acc_vhost_visible(const acc_db *a, const char *user, const char *vhost)
{
    return grant_of(user_of(a, user), vhost) != NULL;
}

sl_err acc_check_move(const acc_db *a, const char *user, const char *src_vhost,
                      const char *src_queue, const char *dest_vhost, const char *dest_queue,
                      char *err, size_t errlen)
{
    sl_err e = acc_check(a, user, src_vhost, ACC_QUEUE, src_queue, strlen(src_queue), ACC_READ, err,
                         errlen);
    if (e != SL_OK)
        return e;
    return acc_check(a, user, dest_vhost, ACC_QUEUE, dest_queue, strlen(dest_queue), ACC_WRITE, err,
                     errlen);
}

sl_err acc_check_receive(const acc_db *a, const char *user, const char *vhost, const char *queue,
                         char *err, size_t errlen)
{
    return acc_check(a, user, vhost, ACC_QUEUE, queue, strlen(queue), ACC_READ, err, errlen);
}

sl_err acc_check_link_write(const acc_db *a, const char *user, const char *vhost, const char *queue,
                            char *err, size_t errlen)
{
    return acc_check(a, user, vhost, ACC_QUEUE, queue, strlen(queue), ACC_WRITE, err, errlen);
}

sl_err acc_check_link_login(acc_db *a, const char *user, const uint8_t node[16], char *err,
                            size_t errlen)
{
    acc_user *u = (acc_user *)user_of(a, user);
    if (acc_user_has_tag(u, ACC_TAG_ADMINISTRATOR))
        return SL_OK;
    char want[33], bound[33];
    sl_hex(want, node, 16);
    if (!acc_user_has_tag(u, ACC_TAG_LINK)) {
        snprintf(err, errlen,
                 "user '%s' may not open a node-to-node link (sluice_link for node %s): the "
                 "administrator or link tag is required",
                 user ? user : "", want);
        return SL_ERR_ACCESS_REFUSED;
    }
    if (!u->link_bound) {
        /* the first link session binds the login to its node, durably, before the link may
         * commit anything */
        memcpy(u->link_node, node, 16);
        u->link_bound = 1;
        acc_emit_user_link(a, u);
        bump(a);
        return SL_OK;
    }
    if (memcmp(u->link_node, node, 16)) {
        sl_hex(bound, u->link_node, 16);
        snprintf(err, errlen,
                 "user '%s' speaks for node %s, not for node %s (a link user is bound to one "
                 "node)",
                 u->name, bound, want);
        return SL_ERR_ACCESS_REFUSED;
    }
    return SL_OK;
}

sl_err acc_user_link_bind(acc_db *a, const char *user, const uint8_t *node, char *err,
                          size_t errlen)
{
    acc_user *u = (acc_user *)user_of(a, user);
    if (!u)
        return no_user(user ? user : "", err, errlen);
    if (node)
        memcpy(u->link_node, node, 16);
    else
        memset(u->link_node, 0, 16);
    u->link_bound = node != NULL;
    acc_emit_user_link(a, u);
    bump(a);
    return SL_OK;
}

sl_err acc_check_action(const acc_db *a, const char *user, const char *action, char *err,
                        size_t errlen)
{
    if (acc_is_admin(a, user))
        return SL_OK;
    snprintf(err, errlen,
             "management action '%s' refused for user '%s': administrator tag required", action,
             user ? user : "");
    return SL_ERR_ACCESS_REFUSED;
}
