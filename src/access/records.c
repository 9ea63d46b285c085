/* records.c - the access module's records in the meta log (types 20-39, see access.h).
 * NT hashes (ACC_REC_USER_NTHASH) are a record of their own, so that the USER record's layout
 * is the one older data dirs hold.
 *
 * Each change is emitted as one self-contained record holding the new state of what changed
 * (a whole user, a whole permission entry), so replay is "apply in order, the last one wins"
 * and a snapshot is the same records for what exists. Integers are little-endian; a string
 * is u16 length + bytes (s16), as in persist/records.h. Password hashes are stored as their
 * raw bytes, never the password.
 *
 * A vhost deletion record stands for the removal of every permission, topic permission and
 * limit on that vhost (and, for recover.c, of every queue, exchange and binding in it), so a
 * crash between it and the records that follow it cannot leave half a vhost behind.
 */
#include <string.h>

#include "core/buf.h"
#include "core/le.h"
#include "core/log.h"
#include "core/mem.h"
#include "access/access_internal.h"

/* ---- encoding ---- */

static void put_u8(sl_buf *b, uint8_t v)
{
    sl_buf_put_u8(b, v);
}

static void put_i64(sl_buf *b, int64_t sv)
{
    uint64_t v = (uint64_t)sv;
    sl_buf_put_le64(b, v);
}

static void put_s16(sl_buf *b, const void *p, size_t n)
{
    if (n > 65535)
        n = 65535;
    sl_buf_put_le16(b, (uint16_t)n);
    sl_buf_append(b, p, n);
}

static void put_str(sl_buf *b, const char *s)
{
    put_s16(b, s ? s : "", s ? strlen(s) : 0);
}

typedef struct rd {
    const uint8_t *p, *end;
    int bad;
} rd;

static uint8_t get_u8(rd *r)
{
    if (r->bad || r->p >= r->end) {
        r->bad = 1;
        return 0;
    }
    return *r->p++;
}

static int64_t get_i64(rd *r)
{
    if (r->bad || r->end - r->p < 8) {
        r->bad = 1;
        return 0;
    }
    uint64_t v = sl_le64(r->p);
    r->p += 8;
    return (int64_t)v;
}

/* A string as a fresh NUL-terminated copy (NULL and bad set when short). */
static char *get_str(rd *r, size_t *len)
{
    if (r->bad || r->end - r->p < 2) {
        r->bad = 1;
        return NULL;
    }
    size_t n = sl_le16(r->p);
    r->p += 2;
    if ((size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return NULL;
    }
    char *s = sl_xstrndup((const char *)r->p, n);
    r->p += n;
    if (len)
        *len = n;
    return s;
}

static void emit(acc_db *a, uint8_t type, sl_buf *b)
{
    if (a->emit && !a->replaying)
        a->emit(a->emit_ctx, type, b->data, b->len);
    sl_buf_free(b);
}

static void enc_vhost(sl_buf *b, const acc_vhost *v)
{
    put_str(b, v->name);
    put_str(b, v->description);
    put_str(b, v->tags);
}

static void enc_user(sl_buf *b, const acc_user *u)
{
    put_str(b, u->name);
    put_u8(b, u->algo);
    put_u8(b, u->from_config ? 1 : 0);
    put_s16(b, u->hash, u->hash_len);
    put_str(b, u->tags);
}

static void enc_perm(sl_buf *b, const acc_user *u, const acc_grant *g)
{
    put_str(b, u->name);
    put_str(b, g->vhost);
    for (int i = 0; i < 3; i++)
        put_str(b, g->src[i]);
}

static void enc_topic(sl_buf *b, const acc_user *u, const acc_topic_grant *t)
{
    put_str(b, u->name);
    put_str(b, t->vhost);
    put_str(b, t->exchange);
    put_str(b, t->src_write);
    put_str(b, t->src_read);
}

static void enc_vhost_limits(sl_buf *b, const acc_vhost *v)
{
    put_str(b, v->name);
    put_i64(b, v->max_connections);
    put_i64(b, v->max_queues);
}

static void enc_user_limits(sl_buf *b, const acc_user *u)
{
    put_str(b, u->name);
    put_i64(b, u->max_connections);
    put_i64(b, u->max_channels);
}

static void enc_user_link(sl_buf *b, const acc_user *u)
{
    put_str(b, u->name);
    sl_buf_append(b, &u->link_bound, 1);
    sl_buf_append(b, u->link_node, 16);
}

static void enc_user_nthash(sl_buf *b, const acc_user *u)
{
    put_str(b, u->name);
    sl_buf_put_u8(b, u->has_nt_hash ? 16 : 0);
    if (u->has_nt_hash)
        sl_buf_append(b, u->nt_hash, 16);
}

#define EMIT(type, ...)                                                                            \
    do {                                                                                           \
        if (!a->emit || a->replaying)                                                              \
            return;                                                                                \
        sl_buf b;                                                                                  \
        sl_buf_init(&b);                                                                           \
        __VA_ARGS__;                                                                               \
        emit(a, type, &b);                                                                         \
    } while (0)

void acc_emit_vhost(acc_db *a, const acc_vhost *v)
{
    EMIT(ACC_REC_VHOST, enc_vhost(&b, v));
}

void acc_emit_vhost_del(acc_db *a, const char *name)
{
    EMIT(ACC_REC_VHOST_DEL, put_str(&b, name));
}

void acc_emit_user(acc_db *a, const acc_user *u)
{
    EMIT(ACC_REC_USER, enc_user(&b, u));
}

void acc_emit_user_del(acc_db *a, const char *name)
{
    EMIT(ACC_REC_USER_DEL, put_str(&b, name));
}

void acc_emit_perm(acc_db *a, const acc_user *u, const acc_grant *g)
{
    EMIT(ACC_REC_PERM, enc_perm(&b, u, g));
}

void acc_emit_perm_del(acc_db *a, const char *user, const char *vhost)
{
    EMIT(ACC_REC_PERM_DEL, put_str(&b, user); put_str(&b, vhost));
}

void acc_emit_topic(acc_db *a, const acc_user *u, const acc_topic_grant *t)
{
    EMIT(ACC_REC_TOPIC, enc_topic(&b, u, t));
}

void acc_emit_topic_del(acc_db *a, const char *user, const char *vhost, const char *exchange)
{
    EMIT(ACC_REC_TOPIC_DEL, put_str(&b, user); put_str(&b, vhost); put_str(&b, exchange));
}

void acc_emit_vhost_limits(acc_db *a, const acc_vhost *v)
{
    EMIT(ACC_REC_VHOST_LIMITS, enc_vhost_limits(&b, v));
}

void acc_emit_user_limits(acc_db *a, const acc_user *u)
{
    EMIT(ACC_REC_USER_LIMITS, enc_user_limits(&b, u));
}

void acc_emit_user_link(acc_db *a, const acc_user *u)
{
    EMIT(ACC_REC_USER_LINK, enc_user_link(&b, u));
}

void acc_emit_user_nthash(acc_db *a, const acc_user *u)
{
    EMIT(ACC_REC_USER_NTHASH, enc_user_nthash(&b, u));
}

void acc_set_persist(acc_db *a, acc_emit_fn fn, void *ctx)
{
    a->emit = fn;
    a->emit_ctx = ctx;
}

void acc_mark_initialized(acc_db *a)
{
    a->initialized = 1;
    if (a->emit && !a->replaying)
        a->emit(a->emit_ctx, ACC_REC_INITIALIZED, NULL, 0);
}

/* ---- replay ---- */

static int replay(acc_db *a, uint8_t type, rd *r)
{
    char err[320];
    size_t n1, n2;
    switch (type) {
    case ACC_REC_VHOST: {
        char *name = get_str(r, &n1), *desc = get_str(r, NULL), *tags = get_str(r, NULL);
        if (!r->bad && n1) {
            acc_vhost *v = acc_vhost_get_or_create(a, name, n1);
            sl_free(v->description);
            v->description = desc;
            desc = NULL;
            sl_free(v->tags);
            v->tags = acc_tags_normalize(tags);
        }
        sl_free(name);
        sl_free(desc);
        sl_free(tags);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_VHOST_DEL: {
        char *name = get_str(r, NULL);
        if (!r->bad)
            acc_vhost_forget(a, name);
        sl_free(name);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_USER: {
        char *name = get_str(r, &n1);
        uint8_t algo = get_u8(r), flags = get_u8(r);
        char *hash = get_str(r, &n2), *tags = get_str(r, NULL);
        if (!r->bad && n1 && algo <= ACC_HASH_ARGON2ID) {
            acc_user *u = acc_user_get_or_create(a, name, n1);
            acc_user_set_hash(u, (acc_hash)algo, (uint8_t *)hash, n2);
            hash = NULL;
            acc_user_set_tags(u, tags);
            u->from_config = flags & 1;
        } else {
            r->bad = 1;
        }
        sl_free(name);
        sl_free(hash);
        sl_free(tags);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_USER_DEL: {
        char *name = get_str(r, NULL);
        if (!r->bad)
            acc_user_delete(a, name, err, sizeof err);
        sl_free(name);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_PERM: {
        char *user = get_str(r, NULL), *vhost = get_str(r, NULL);
        char *src[3];
        for (int i = 0; i < 3; i++)
            src[i] = get_str(r, NULL);
        if (!r->bad && acc_perm_set(a, user, vhost, src[0], src[1], src[2], err, sizeof err) &&
            acc_user_find(a, user, strlen(user)))
            sl_warn("access: stored permissions of '%s' on '%s' dropped: %s", user, vhost, err);
        sl_free(user);
        sl_free(vhost);
        for (int i = 0; i < 3; i++)
            sl_free(src[i]);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_PERM_DEL: {
        char *user = get_str(r, NULL), *vhost = get_str(r, NULL);
        if (!r->bad)
            acc_perm_clear(a, user, vhost, err, sizeof err);
        sl_free(user);
        sl_free(vhost);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_TOPIC: {
        char *user = get_str(r, NULL), *vhost = get_str(r, NULL), *x = get_str(r, NULL);
        char *w = get_str(r, NULL), *rd_ = get_str(r, NULL);
        if (!r->bad && acc_topic_perm_set(a, user, vhost, x, w, rd_, err, sizeof err) &&
            acc_user_find(a, user, strlen(user)))
            sl_warn("access: stored topic permissions of '%s' on '%s' dropped: %s", user, vhost,
                    err);
        sl_free(user);
        sl_free(vhost);
        sl_free(x);
        sl_free(w);
        sl_free(rd_);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_TOPIC_DEL: {
        char *user = get_str(r, NULL), *vhost = get_str(r, NULL), *x = get_str(r, NULL);
        if (!r->bad)
            acc_topic_perm_clear(a, user, vhost, x, err, sizeof err);
        sl_free(user);
        sl_free(vhost);
        sl_free(x);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_VHOST_LIMITS: {
        char *name = get_str(r, &n1);
        int64_t mc = get_i64(r), mq = get_i64(r);
        if (!r->bad && n1) {
            acc_vhost *v = acc_vhost_get_or_create(a, name, n1);
            v->max_connections = mc < 0 ? ACC_NO_LIMIT : mc;
            v->max_queues = mq < 0 ? ACC_NO_LIMIT : mq;
        }
        sl_free(name);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_USER_LIMITS: {
        char *name = get_str(r, &n1);
        int64_t mc = get_i64(r), mch = get_i64(r);
        acc_user *u = r->bad ? NULL : (acc_user *)acc_user_find(a, name, n1);
        if (u) {
            u->max_connections = mc < 0 ? ACC_NO_LIMIT : mc;
            u->max_channels = mch < 0 ? ACC_NO_LIMIT : mch;
        }
        sl_free(name);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_USER_LINK: {
        char *name = get_str(r, &n1);
        uint8_t bound = get_u8(r), node[16] = {0};
        if (r->end - r->p < 16)
            r->bad = 1;
        else {
            memcpy(node, r->p, 16);
            r->p += 16;
        }
        acc_user *u = r->bad ? NULL : (acc_user *)acc_user_find(a, name, n1);
        if (u) {
            u->link_bound = bound != 0;
            memcpy(u->link_node, node, 16);
        }
        sl_free(name);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_USER_NTHASH: {
        char *name = get_str(r, &n1);
        uint8_t len = get_u8(r);
        if (!r->bad && len != 0 && (len != 16 || r->end - r->p < 16))
            r->bad = 1;
        acc_user *u = r->bad ? NULL : (acc_user *)acc_user_find(a, name, n1);
        if (u) {
            u->has_nt_hash = len == 16;
            memset(u->nt_hash, 0, 16);
            if (len)
                memcpy(u->nt_hash, r->p, 16);
        }
        if (!r->bad)
            r->p += len;
        sl_free(name);
        return r->bad ? -1 : 0;
    }
    case ACC_REC_INITIALIZED:
        a->initialized = 1;
        return 0;
    }
    return -1;
}

int acc_replay(acc_db *a, uint8_t type, const uint8_t *payload, size_t len)
{
    /* payload may be NULL for an empty record: NULL + 0 is undefined (clang's UBSan) */
    rd r = {payload, len ? payload + len : payload, 0};
    a->replaying = 1;
    int rc = replay(a, type, &r);
    a->replaying = 0;
    if (rc == 0 && r.p != r.end)
        rc = -1; /* trailing bytes: not a record we wrote */
    a->gen++;
    return rc;
}

/* ---- snapshot ---- */

typedef struct snap {
    acc_emit_fn fn;
    void *ctx;
} snap;

static void out(snap *s, uint8_t type, sl_buf *b)
{
    s->fn(s->ctx, type, b->data, b->len);
    b->len = 0;
}

static void snap_perm(void *ctx, const acc_user *u, const acc_grant *g)
{
    sl_buf b;
    sl_buf_init(&b);
    enc_perm(&b, u, g);
    out(ctx, ACC_REC_PERM, &b);
    sl_buf_free(&b);
}

static void snap_topic(void *ctx, const acc_user *u, const acc_topic_grant *t)
{
    sl_buf b;
    sl_buf_init(&b);
    enc_topic(&b, u, t);
    out(ctx, ACC_REC_TOPIC, &b);
    sl_buf_free(&b);
}

void acc_snapshot(const acc_db *a, acc_emit_fn fn, void *ctx)
{
    snap s = {fn, ctx};
    sl_buf b;
    sl_buf_init(&b);
    if (a->initialized)
        fn(ctx, ACC_REC_INITIALIZED, NULL, 0);
    size_t n;
    const acc_vhost **vs = acc_vhosts(a, &n);
    for (size_t i = 0; i < n; i++) {
        enc_vhost(&b, vs[i]);
        out(&s, ACC_REC_VHOST, &b);
        if (vs[i]->max_connections >= 0 || vs[i]->max_queues >= 0) {
            enc_vhost_limits(&b, vs[i]);
            out(&s, ACC_REC_VHOST_LIMITS, &b);
        }
    }
    sl_free(vs);
    const acc_user **us = acc_users(a, &n);
    for (size_t i = 0; i < n; i++) {
        enc_user(&b, us[i]);
        out(&s, ACC_REC_USER, &b);
        if (us[i]->max_connections >= 0 || us[i]->max_channels >= 0) {
            enc_user_limits(&b, us[i]);
            out(&s, ACC_REC_USER_LIMITS, &b);
        }
        if (us[i]->link_bound) {
            enc_user_link(&b, us[i]);
            out(&s, ACC_REC_USER_LINK, &b);
        }
        if (us[i]->has_nt_hash) {
            enc_user_nthash(&b, us[i]);
            out(&s, ACC_REC_USER_NTHASH, &b);
        }
    }
    sl_free(us);
    sl_buf_free(&b);
    acc_perm_each(a, NULL, NULL, snap_perm, &s);
    acc_topic_perm_each(a, NULL, NULL, snap_topic, &s);
}
