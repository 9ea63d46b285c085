/* settings.c - every configuration key as one table (issue 45).
 *
 * A row is one key as the config file spells it (rabbitmq.conf's dotted keys too) with its
 * aliases, its type, where its value lands (an offset into the struct its table applies to:
 * node_config, node_cluster_conf for the cluster's keys, struct node_tls_conf for a TLS group's),
 * its range or words, its default, the text a bad value is refused with, and a one-line
 * meaning. Applying a setting is a lookup and a parse driven by the type; a default is the
 * same parse of the row's default text (or, for the few that no value spells, such as -1 for
 * "no listener", a raw number), so every default is a value the key itself accepts.
 *
 * A key with an upper-case part (user.NAME, msmq.hosts.N) is a pattern: that part is any
 * non-empty text (or empty too, SF_EMPTY_OK) and is handed to the row's setter; a key ending
 * in ".*" is a group (a TLS group: ssl_options.*, its rows in tls_rows).
 *
 * Invariants: the keys, defaults, ranges and error texts are those sluiced always had (they
 * are contracts with operators' files and the tests). Exact keys are looked up before
 * patterns (management.ssl.port before management.ssl.*), patterns in table order
 * (user.NAME.tags before user.NAME); the cluster's keys before the node's.
 */
#include "node/settings.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/hex.h"
#include "core/log.h"
#include "core/mem.h"
#include "net/cidr.h"
#include "net/tls.h"

/* What a key takes; numbers differ only in what they count (for the reference). */
typedef enum {
    ST_STRING,
    ST_PATH,
    ST_LIST, /* each line adds one (KEY.N) */
    ST_INT,
    ST_SIZE, /* bytes; k/M/G suffixes (all numbers take them, as always) */
    ST_MS,
    ST_SECONDS,
    ST_US,
    ST_PORT,
    ST_BOOL, /* RabbitMQ's true/false/yes/no/1/0 */
    ST_ENUM, /* one of the row's words */
    ST_GROUP /* KEY.* applied by another table */
} st_type;

enum {
    SF_ZERO_OK = 1,   /* 0 is taken although below min */
    SF_STRICT = 2,    /* a plain decimal: no suffix, no sign (the cluster's numbers) */
    SF_PLUS_OK = 4,   /* with SF_STRICT: a leading + is taken */
    SF_EMPTY_OK = 8,  /* the pattern's part may be empty */
    SF_ETCD_TLS = 16, /* applying it (not its default) turns TLS to etcd on */
    SF_STRVAL = 32,   /* ST_ENUM: keep the word itself (a string field) */
    SF_OR = 64,       /* ST_BOOL: true sticks (either of two keys turns it on) */
    SF_RAWDEF = 128,  /* the default is rawdef, which no value spells */
};

typedef struct st_word {
    const char *w;
    int64_t v;
} st_word;

typedef struct setting setting;
typedef struct st_table {
    const setting *rows;
    size_t n;
} st_table;

/* A setter for the keys a type alone does not cover. value NULL: set the row's default. */
typedef const char *st_fn(void *base, const setting *r, const char *part, size_t plen,
                          const char *value);

struct setting {
    const char *key;      /* exact, a pattern (NAME, N, TAG) or a group (PREFIX.*) */
    const char *alias[4]; /* other spellings of the same key */
    st_type type;
    unsigned flags;
    size_t off, size;         /* the field in the table's struct */
    uint64_t min, max;        /* numbers */
    st_word words[6];         /* ST_ENUM's values; a number's or bool's extra words (off = -1) */
    int (*ok)(const char *v); /* strings: 0 refuses the value */
    st_fn *fn;                /* parses and stores instead of the type */
    const st_table *group;    /* ST_GROUP */
    const char *def;          /* the default as a value of the key; NULL: zero */
    int64_t rawdef;           /* SF_RAWDEF */
    const char *doc_def;      /* the default as docs/configuration.md writes it; NULL: def */
    const char *err;          /* a refused value */
    const char *meaning;
};

#define AT(T, f) .off = offsetof(T, f), .size = sizeof(((T *)0)->f)
#define C(f) AT(node_config, f)
#define CL(f) AT(node_cluster_conf, f)
#define TL(f) AT(struct node_tls_conf, f)
#define RANGE(lo, hi) .min = (lo), .max = (hi)
#define NROWS(a) (sizeof(a) / sizeof(a)[0])
/* a default that a constant of config.h also names, as the text of its number */
#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- parsing ---- */

/* An unsigned number with an optional k/M/G suffix (powers of 1024) and an optional B. */
static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return -1;
    uint64_t mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1024 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1024ull * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != 0 || v > max / mul)
        return -1;
    *out = v * mul;
    return 0;
}

/* The cluster's numbers: plain decimal, no sign (a + only with SF_PLUS_OK). */
static int parse_strict(const char *s, unsigned flags, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || (*s == '+' && !(flags & SF_PLUS_OK)))
        return -1;
    *out = v;
    return 0;
}

/* RabbitMQ's booleans in rabbitmq.conf */
static int parse_bool(const char *v)
{
    if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes"))
        return 1;
    if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no"))
        return 0;
    return -1;
}

static void set_str(char **dst, const char *v)
{
    sl_free(*dst);
    *dst = sl_xstrdup(v);
}

/* Append item to a separated list in *dst. */
static void list_add(char **dst, const char *item, char sep)
{
    size_t a = *dst ? strlen(*dst) : 0, b = strlen(item);
    char *n = sl_xmalloc(a + b + 2);
    if (a) {
        memcpy(n, *dst, a);
        n[a++] = sep;
    }
    memcpy(n + a, item, b + 1);
    sl_free(*dst);
    *dst = n;
}

static const st_word *find_word(const setting *r, const char *v)
{
    for (const st_word *w = r->words; w < r->words + NROWS(r->words) && w->w; w++)
        if (!strcmp(w->w, v))
            return w;
    return NULL;
}

static void store(void *field, size_t size, int64_t v)
{
    if (size == 2) {
        uint16_t x = (uint16_t)v;
        memcpy(field, &x, 2);
    } else if (size == 4) {
        uint32_t x = (uint32_t)v; /* an int field's -1 too */
        memcpy(field, &x, 4);
    } else if (size == 8) {
        uint64_t x = (uint64_t)v;
        memcpy(field, &x, 8);
    } else { /* a row on a field of another width: caught by test_config's defaults */
        abort();
    }
}

static int lookup(const st_table *t, void *base, const char *key, const char *value, int defaults,
                  const char **err);

/* Parse value as r says and store it. part: a pattern's or group's part of the key. */
static const char *set_value(void *base, const setting *r, const char *part, size_t plen,
                             const char *value)
{
    char *field = (char *)base + r->off;
    const st_word *w;
    if (r->fn)
        return r->fn(base, r, part, plen, value);
    switch (r->type) {
    case ST_STRING:
    case ST_PATH:
    case ST_LIST:
        if (r->ok && !r->ok(value))
            return r->err;
        set_str((char **)field, value);
        return NULL;
    case ST_BOOL: {
        int on = (w = find_word(r, value)) ? (int)w->v : parse_bool(value);
        if (on < 0)
            return r->err;
        if (r->flags & SF_OR)
            on |= *(int *)field;
        store(field, r->size, on);
        return NULL;
    }
    case ST_ENUM:
        if (!(w = find_word(r, value)))
            return r->err;
        if (r->flags & SF_STRVAL)
            set_str((char **)field, value);
        else
            store(field, r->size, w->v);
        return NULL;
    case ST_GROUP: {
        const char *err;
        if (!lookup(r->group, field, part, value, 0, &err))
            return "unknown setting";
        return err;
    }
    default: {
        uint64_t n;
        if ((w = find_word(r, value))) {
            store(field, r->size, w->v);
            return NULL;
        }
        if (r->flags & SF_STRICT) {
            if (parse_strict(value, r->flags, &n) || n > r->max || n < r->min)
                return r->err;
        } else if (parse_u64(value, r->max, &n) ||
                   (n < r->min && !(n == 0 && (r->flags & SF_ZERO_OK)))) {
            return r->err;
        }
        store(field, r->size, (int64_t)n);
        return NULL;
    }
    }
}

/* key against a pattern row: 1 with the part, else 0. A group (PREFIX.*) takes any rest. */
static int match(const setting *r, const char *key, const char **part, size_t *plen)
{
    const char *k = r->key, *p = k;
    /* the wild part: "*" or an upper-case run between dots (or at the end) */
    for (;; p++) {
        if (!*p)
            return 0;
        if ((p == k || p[-1] == '.') && (*p == '*' || isupper((unsigned char)*p))) {
            const char *e = p;
            while (*e == '*' || isupper((unsigned char)*e))
                e++;
            if (!*e || *e == '.')
                break;
        }
    }
    size_t pre = (size_t)(p - k);
    const char *post = p;
    while (*post == '*' || isupper((unsigned char)*post))
        post++;
    size_t npost = strlen(post), n = strlen(key);
    if (n < pre + npost || strncmp(key, k, pre) || strcmp(key + n - npost, post))
        return 0;
    *part = key + pre;
    *plen = n - pre - npost;
    return *plen > 0 || (r->flags & SF_EMPTY_OK) || r->type == ST_GROUP;
}

static int is_pattern(const setting *r)
{
    for (const char *p = r->key; *p; p++)
        if ((p == r->key || p[-1] == '.') && (*p == '*' || isupper((unsigned char)*p)))
            return 1;
    return 0;
}

/* Find key in t and apply value to base: 1 (with *err) when found, 0 when not one of t's. */
static int lookup(const st_table *t, void *base, const char *key, const char *value, int defaults,
                  const char **err)
{
    for (size_t i = 0; i < t->n; i++) {
        const setting *r = &t->rows[i];
        if (is_pattern(r))
            continue; /* user.NAME is no user called NAME */
        int hit = !strcmp(r->key, key);
        for (int a = 0; !hit && a < 4 && r->alias[a]; a++)
            hit = !strcmp(r->alias[a], key);
        if (hit) {
            if ((r->flags & SF_ETCD_TLS) && !defaults)
                ((node_cluster_conf *)base)->etcd_https = 1;
            *err = set_value(base, r, key + strlen(key), 0, value);
            return 1;
        }
    }
    for (size_t i = 0; i < t->n; i++) {
        const char *part;
        size_t plen;
        if (is_pattern(&t->rows[i]) && match(&t->rows[i], key, &part, &plen)) {
            *err = set_value(base, &t->rows[i], part, plen, value);
            return 1;
        }
    }
    return 0;
}

/* ---- the setters the types do not cover ---- */

static const char *set_log_level(void *base, const setting *r, const char *part, size_t plen,
                                 const char *value)
{
    int l = sl_log_level_parse(value ? value : r->def);
    if (l < 0)
        return r->err;
    ((node_config *)base)->log_level = l;
    return NULL;
}

static void add_user(node_config *c, const char *name, const char *password)
{
    for (size_t i = 0; i < c->n_users; i++) {
        if (!strcmp(c->users[i].name, name)) {
            set_str(&c->users[i].password, password);
            return;
        }
    }
    c->users = sl_xrealloc(c->users, (c->n_users + 1) * sizeof *c->users);
    node_user *u = &c->users[c->n_users++];
    u->name = sl_xstrdup(name);
    u->password = sl_xstrdup(password);
    u->tags = sl_xstrdup("");
    u->link_bound = 0;
}

static const char *set_user(void *base, const setting *r, const char *part, size_t plen,
                            const char *value)
{
    add_user(base, part, value);
    return NULL;
}

static const char *set_user_tags(void *base, const setting *r, const char *part, size_t plen,
                                 const char *value)
{
    if (plen >= 256)
        return "user name too long";
    node_user *u = (node_user *)node_config_find_user(base, part, plen);
    if (!u)
        return "user.NAME.tags given before user.NAME";
    set_str(&u->tags, value);
    return NULL;
}

/* 32 hex digits (a node id as the management API shows it) into 16 bytes; -1 otherwise. */
static int parse_node_id(const char *s, uint8_t out[16])
{
    if (strlen(s) != 32)
        return -1;
    return sl_unhex(s, 16, out);
}

static const char *set_user_link_node(void *base, const setting *r, const char *part, size_t plen,
                                      const char *value)
{
    node_user *u = (node_user *)node_config_find_user(base, part, plen);
    if (!u)
        return "user.NAME.link_node given before user.NAME";
    if (parse_node_id(value, u->link_node) < 0)
        return "user.NAME.link_node must be a node id: 32 hex digits";
    u->link_bound = 1;
    return NULL;
}

/* default_user_tags.TAG = true|false: add or remove TAG from the comma list. */
static void set_tag(char **tags, const char *tag, int on)
{
    sl_buf b;
    sl_buf_init(&b);
    int found = 0;
    for (const char *p = *tags; p && *p;) {
        size_t n = strcspn(p, ",");
        int same = n == strlen(tag) && !memcmp(p, tag, n);
        found |= same;
        if (n && (!same || on)) {
            if (b.len)
                sl_buf_put_u8(&b, ',');
            sl_buf_append(&b, p, n);
        }
        p += n;
        if (*p == ',')
            p++;
    }
    if (on && !found) {
        if (b.len)
            sl_buf_put_u8(&b, ',');
        sl_buf_append(&b, tag, strlen(tag));
    }
    sl_buf_put_u8(&b, 0);
    sl_free(*tags);
    *tags = (char *)b.data;
}

static const char *set_default_user_tag(void *base, const setting *r, const char *part, size_t plen,
                                        const char *value)
{
    node_config *c = base;
    if (!value) {
        set_str(&c->default_user_tags, r->def);
        return NULL;
    }
    int on = parse_bool(value);
    if (on < 0)
        return r->err;
    set_tag(&c->default_user_tags, part, on);
    return NULL;
}

static void set_loopback_user(node_config *c, const char *name, int on)
{
    for (size_t i = 0; i < c->n_loopback_users; i++) {
        if (!strcmp(c->loopback_users[i], name)) {
            if (!on) {
                sl_free(c->loopback_users[i]);
                c->loopback_users[i] = c->loopback_users[--c->n_loopback_users];
            }
            return;
        }
    }
    if (!on)
        return;
    c->loopback_users =
        sl_xrealloc(c->loopback_users, (c->n_loopback_users + 1) * sizeof *c->loopback_users);
    c->loopback_users[c->n_loopback_users++] = sl_xstrdup(name);
}

static const char *set_loopback_none(void *base, const setting *r, const char *part, size_t plen,
                                     const char *value)
{
    node_config *c = base;
    if (strcmp(value, "none"))
        return r->err;
    for (size_t i = 0; i < c->n_loopback_users; i++)
        sl_free(c->loopback_users[i]);
    c->n_loopback_users = 0;
    return NULL;
}

static const char *set_loopback_user_key(void *base, const setting *r, const char *part,
                                         size_t plen, const char *value)
{
    if (!value) {
        set_loopback_user(base, r->def, 1);
        return NULL;
    }
    int on = parse_bool(value);
    if (on < 0)
        return r->err;
    set_loopback_user(base, part, on);
    return NULL;
}

/* [IP:]PORT: the address before the last colon goes to *bind. */
static const char *split_bind(char **bind, const char **value)
{
    const char *colon = strrchr(*value, ':');
    if (colon) {
        char ip[128];
        snprintf(ip, sizeof ip, "%.*s", (int)(colon - *value), *value);
        set_str(bind, ip);
        *value = colon + 1;
    }
    return NULL;
}

static const char *set_tls_listener(void *base, const setting *r, const char *part, size_t plen,
                                    const char *value)
{
    node_config *c = base;
    uint64_t n;
    split_bind(&c->tls_bind, &value);
    if (parse_u64(value, 65535, &n))
        return r->err;
    c->tls_port = (int)n;
    return NULL;
}

static const char *set_msmq_listener(void *base, const setting *r, const char *part, size_t plen,
                                     const char *value)
{
    node_config *c = base;
    uint64_t n;
    split_bind(&c->msmq_bind, &value);
    if (!strcmp(value, "default") || parse_bool(value) == 1)
        n = 1801;
    else if (parse_u64(value, 65535, &n))
        return r->err;
    c->msmq_port = (int)n;
    return NULL;
}

/* listeners.stream (and its TLS twin): [IP:]PORT, or "default" / true = 5552 (5551 for
 * TLS), false / off = none. */
static const char *set_stream_listener(void *base, const setting *r, const char *part, size_t plen,
                                       const char *value)
{
    node_config *c = base;
    int tls = r->off == offsetof(node_config, stream_tls_port);
    uint64_t n;
    /* words only: "0" is a free port, "1" port 1 */
    if (!strcmp(value, "off") || !strcmp(value, "false") || !strcmp(value, "no")) {
        *(tls ? &c->stream_tls_port : &c->stream_port) = -1;
        return NULL;
    }
    split_bind(tls ? &c->stream_tls_bind : &c->stream_bind, &value);
    if (!strcmp(value, "default") || !strcmp(value, "true") || !strcmp(value, "yes"))
        n = tls ? 5551 : 5552;
    else if (parse_u64(value, 65535, &n))
        return r->err;
    *(tls ? &c->stream_tls_port : &c->stream_port) = (int)n;
    return NULL;
}

static const char *set_msmq_host(void *base, const setting *r, const char *part, size_t plen,
                                 const char *value)
{
    if (!*value || strchr(value, ' ') || strchr(value, '\\'))
        return r->err;
    list_add(&((node_config *)base)->msmq_hosts, value, ' ');
    return NULL;
}

static int cidr_list_ok(const char *v)
{
    sl_cidr_list l;
    char why[200];
    int bad = sl_cidr_list_parse(v, &l, why, sizeof why);
    sl_cidr_list_free(&l);
    return !bad;
}

static const char *set_auth_mechanism(void *base, const setting *r, const char *part, size_t plen,
                                      const char *value)
{
    node_config *c = base;
    if (!value) {
        set_str(&c->auth_mechanisms, r->def);
        return NULL;
    }
    if (!find_word(r, value))
        return r->err;
    /* The first auth_mechanisms.N line replaces the default list. */
    if (!c->auth_mechanisms_set) {
        sl_free(c->auth_mechanisms);
        c->auth_mechanisms = NULL;
        c->auth_mechanisms_set = 1;
    }
    list_add(&c->auth_mechanisms, value, ' ');
    return NULL;
}

static const char *set_tls_version(void *base, const setting *r, const char *part, size_t plen,
                                   const char *value)
{
    unsigned bit = sl_tls_version_bit(value);
    if (!bit)
        return r->err;
    ((struct node_tls_conf *)base)->versions |= bit;
    return NULL;
}

static const char *set_tls_cipher(void *base, const setting *r, const char *part, size_t plen,
                                  const char *value)
{
    struct node_tls_conf *t = base;
    if (!strncmp(value, "TLS_", 4))
        list_add(&t->ciphersuites, value, ':');
    else
        list_add(&t->ciphers, value, ':');
    return NULL;
}

/* ---- the cluster's checks and setters ---- */

/* HOST:PORT with a non-empty host and a port 1..65535 ([v6]:PORT accepted). */
static int valid_endpoint(const char *v)
{
    const char *colon = strrchr(v, ':');
    uint64_t port;
    if (!colon || colon == v || parse_strict(colon + 1, 0, &port) || port > 65535 || port == 0)
        return 0;
    for (const char *p = v; p < colon; p++)
        if (*p == '/' || *p == ' ' || *p == '@')
            return 0;
    return 1;
}

/* A key prefix or cluster name becomes a path segment of etcd keys: keep it plain. */
static int valid_segment(const char *v)
{
    if (!*v || strlen(v) > 128)
        return 0;
    for (const char *p = v; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return 0;
    return 1;
}

static int valid_host(const char *v)
{
    return *v && !strchr(v, ' ') && !strchr(v, '/');
}

static int non_empty(const char *v)
{
    return *v != 0;
}

static const char *set_endpoint(void *base, const setting *r, const char *part, size_t plen,
                                const char *value)
{
    node_cluster_conf *c = base;
    uint64_t no;
    if (parse_strict(part, 0, &no) || no > 1000000)
        return "cluster_formation.etcd.endpoints.N: N must be a number";
    if (!valid_endpoint(value))
        return "an etcd endpoint must be HOST:PORT";
    unsigned i = 0;
    while (i < c->n_endpoints && c->endpoint_no[i] < no)
        i++;
    if (i < c->n_endpoints && c->endpoint_no[i] == no) { /* the same N again: the last wins */
        set_str(&c->endpoints[i], value);
        return NULL;
    }
    if (c->n_endpoints == SL_CLUSTER_MAX_ENDPOINTS)
        return "at most 16 etcd endpoints";
    memmove(&c->endpoints[i + 1], &c->endpoints[i], (c->n_endpoints - i) * sizeof c->endpoints[0]);
    memmove(&c->endpoint_no[i + 1], &c->endpoint_no[i],
            (c->n_endpoints - i) * sizeof c->endpoint_no[0]);
    c->endpoints[i] = sl_xstrdup(value);
    c->endpoint_no[i] = (unsigned)no;
    c->n_endpoints++;
    return NULL;
}

/* ---- the tables ---- */

#define VERIFY_WORDS                                                                               \
    {                                                                                              \
        {"verify_peer", 1},                                                                        \
        {                                                                                          \
            "verify_none", 0                                                                       \
        }                                                                                          \
    }
#define TRUE_FALSE                                                                                 \
    {                                                                                              \
        {"true", 1},                                                                               \
        {                                                                                          \
            "false", 0                                                                             \
        }                                                                                          \
    }

/* ssl_options.*, management.ssl.*, link_ssl_options.* (the prefix stripped) */
static const setting tls_rows[] = {
    {.key = "cacertfile",
     .type = ST_PATH,
     TL(cacertfile),
     .meaning = "PEM file of the CAs a peer's certificate is checked against"},
    {.key = "certfile",
     .type = ST_PATH,
     TL(certfile),
     .meaning = "PEM file of this side's certificate"},
    {.key = "keyfile",
     .type = ST_PATH,
     TL(keyfile),
     .meaning = "PEM file of this side's private key"},
    {.key = "password", .type = ST_STRING, TL(password), .meaning = "the keyfile's passphrase"},
    {.key = "verify",
     .type = ST_ENUM,
     TL(verify_peer),
     .words = VERIFY_WORDS,
     .err = "verify must be verify_peer or verify_none",
     .meaning = "verify_peer: the peer's certificate is checked against cacertfile"},
    {.key = "fail_if_no_peer_cert",
     .type = ST_BOOL,
     TL(fail_if_no_peer_cert),
     .err = "fail_if_no_peer_cert must be true or false",
     .meaning = "a peer without a certificate is refused"},
    {.key = "honor_cipher_order",
     .type = ST_BOOL,
     .flags = SF_OR,
     TL(honor_cipher_order),
     .err = "must be true or false",
     .meaning = "the server's cipher order wins (either key turns it on)"},
    {.key = "honor_ecc_order",
     .type = ST_BOOL,
     .flags = SF_OR,
     TL(honor_cipher_order),
     .err = "must be true or false",
     .meaning = "as honor_cipher_order"},
    {.key = "depth",
     .type = ST_INT,
     TL(depth),
     RANGE(0, 100),
     .err = "depth must be 0..100",
     .meaning = "longest certificate chain accepted"},
    {.key = "versions.N",
     .type = ST_ENUM,
     .flags = SF_EMPTY_OK,
     .fn = set_tls_version,
     .words = {{"tlsv1.2", 0}, {"tlsv1.3", 0}, {"tlsv1.1", 0}, {"tlsv1", 0}},
     .err = "versions.N must be tlsv1.2 or tlsv1.3 (or tlsv1.1, tlsv1)",
     .meaning = "protocol versions offered (default TLS 1.2 and 1.3)"},
    {.key = "ciphers.N",
     .type = ST_LIST,
     .flags = SF_EMPTY_OK,
     .fn = set_tls_cipher,
     .meaning = "cipher suites, OpenSSL names (TLS_* ones are TLS 1.3's)"},
};
static const st_table tls_table = {tls_rows, NROWS(tls_rows)};

static const setting node_rows[] = {
    /* the node and its AMQP listener */
    {.key = "bind",
     .alias = {"listeners.tcp.default.ip"},
     .type = ST_STRING,
     C(bind),
     .def = "127.0.0.1",
     .meaning = "address the listeners bind (--bind)"},
    {.key = "port",
     .alias = {"listeners.tcp.default"},
     .type = ST_PORT,
     C(port),
     RANGE(0, 65535),
     .def = "5672",
     .err = "port must be 0..65535",
     .meaning = "AMQP port (--port; 0 = a free port, logged)"},
    {.key = "mgmt_port",
     .alias = {"management.tcp.port"},
     .type = ST_PORT,
     C(mgmt_port),
     RANGE(0, 65535),
     .words = {{"off", -1}, {"-1", -1}},
     .def = "15672",
     .err = "mgmt_port must be 0..65535 or off",
     .meaning = "HTTP management API port (--mgmt-port; 0 = a free port, off = none)"},
    {.key = "data_dir",
     .alias = {"data-dir"},
     .type = ST_PATH,
     C(data_dir),
     .def = "var",
     .meaning = "data directory (--data-dir)"},
    {.key = "node_name",
     .alias = {"node-name"},
     .type = ST_STRING,
     C(node_name),
     .def = "sluice@localhost",
     .meaning = "node name (--node-name)"},
    {.key = "log_level",
     .alias = {"log-level", "log.console.level"},
     .type = ST_ENUM,
     C(log_level),
     .fn = set_log_level,
     .words = {{"debug", 0}, {"info", 0}, {"warning", 0}, {"error", 0}},
     .def = "info",
     .err = "log level must be debug, info, warning or error",
     .meaning = "least level logged (--log-level)"},
    {.key = "heartbeat",
     .type = ST_SECONDS,
     C(heartbeat),
     RANGE(0, 65535),
     .def = "60",
     .err = "heartbeat must be 0..65535 seconds",
     .meaning = "seconds proposed in connection.tune (0 = off)"},
    {.key = "frame_max",
     .type = ST_SIZE,
     .flags = SF_ZERO_OK,
     C(frame_max),
     RANGE(4096, UINT32_MAX),
     .def = "131072",
     .err = "frame_max must be 0 or at least 4096",
     .meaning = "largest frame proposed and accepted"},
    {.key = "channel_max",
     .type = ST_INT,
     C(channel_max),
     RANGE(0, 65535),
     .def = "2047",
     .err = "channel_max must be 0..65535",
     .meaning = "channels per connection"},
    /* RabbitMQ's cap too; and a message record of the store holds at most 1 GiB. */
    {.key = "max_message_size",
     .type = ST_SIZE,
     C(max_message_size),
     RANGE(1, SL_MAX_MESSAGE_SIZE_CAP),
     .def = "128M",
     .err = "max_message_size must be a size from 1 byte to 512M (536870912 bytes: "
            "RabbitMQ's limit, and what a store record holds with room to spare)",
     .meaning = "larger bodies are refused with 406 on the channel"},
    {.key = "memory_high_watermark",
     .alias = {"vm_memory_high_watermark.absolute"},
     .type = ST_SIZE,
     C(memory_high_watermark),
     RANGE(0, UINT64_MAX),
     .def = "4G",
     .err = "memory_high_watermark must be a size in bytes (k, M, G suffixes)",
     .meaning = "memory above which publishers are blocked"},
    {.key = "sync_pace_us",
     .type = ST_US,
     C(sync_pace_us),
     RANGE(0, 1000000),
     .def = "1000",
     .err = "sync_pace_us must be a number of microseconds from 0 to 1000000",
     .meaning = "least time between syncs only pipelined confirms wait for"},
    {.key = "segment_size",
     .type = ST_SIZE,
     C(segment_size),
     RANGE(4096, 1ull << 30),
     .def = "64M",
     .err = "segment_size must be a size from 4k to 1G",
     .meaning = "message store segment size (TIDY frees whole segments)"},
    {.key = "memory_budget",
     .type = ST_SIZE,
     C(memory_budget),
     RANGE(0, UINT64_MAX),
     .def = "1G",
     .err = "memory_budget must be a size in bytes (k, M, G suffixes; 0 = never page)",
     .meaning = "memory of messages kept in memory; beyond it they are paged to the store"},
    {.key = "disk_free_limit",
     .alias = {"disk_free_limit.absolute"},
     .type = ST_SIZE,
     C(disk_free_limit),
     RANGE(0, UINT64_MAX),
     .def = "1000000000",
     .err = "disk_free_limit must be a size in bytes (k, M, G suffixes)",
     .meaning = "free bytes under data_dir below which publishers are blocked"},
    {.key = "disk_reserve",
     .type = ST_SIZE,
     C(disk_reserve),
     RANGE(0, UINT64_MAX),
     .def = "16M",
     .err = "disk_reserve must be a size in bytes (k, M, G suffixes; 0 = none)",
     .meaning = "size of DATA/space-reserve, released when the disk is full"},
    {.key = "tidy_interval",
     .type = ST_SECONDS,
     C(tidy_interval_s),
     RANGE(0, UINT32_MAX),
     .def = "21600",
     .err = "tidy_interval must be seconds (0 = only on demand)",
     .meaning = "seconds between automatic TIDY runs"},
    {.key = "tidy_after_written",
     .type = ST_SIZE,
     C(tidy_after_written),
     RANGE(0, UINT64_MAX),
     .def = "1G",
     .err = "tidy_after_written must be a size in bytes (k, M, G suffixes; 0 = off)",
     .meaning = "a TIDY after this many bytes written to the store"},
    {.key = "reap_interval",
     .type = ST_MS,
     C(reap_interval_ms),
     RANGE(0, 3600000),
     .def = "100",
     .err = "reap_interval must be milliseconds from 0 (off) to 3600000",
     .meaning = "least time between deletions of message segments nothing references"},
    {.key = "connection_max",
     .type = ST_INT,
     C(connection_max),
     RANGE(0, UINT32_MAX),
     .words = {{"infinity", 0}},
     .def = "infinity",
     .err = "connection_max must be a number of connections (0 or infinity = no cap)",
     .meaning = "AMQP connections at once"},
    {.key = "loop_cpu_stats",
     .type = ST_ENUM,
     C(loop_cpu_stats),
     .words = {{"true", 1}, {"1", 1}, {"false", 0}, {"0", 0}},
     .def = "false",
     .err = "loop_cpu_stats must be true or false",
     .meaning = "count CPU time per event-loop turn too"},
    {.key = "busy_poll_us",
     .type = ST_US,
     C(busy_poll_us),
     RANGE(0, 1000),
     .def = "0",
     .err = "busy_poll_us must be a number of microseconds from 0 to 1000",
     .meaning = "the event loop polls this long before it sleeps after a turn with traffic"},
    {.key = "mgmt_connection_max",
     .type = ST_INT,
     C(mgmt_connection_max),
     RANGE(1, 1000000),
     .def = "256",
     .err = "mgmt_connection_max must be a positive number of connections",
     .meaning = "logged-in HTTP(S) connections at once; more wait"},
    {.key = "mgmt_unauthenticated_max",
     .type = ST_INT,
     C(mgmt_unauthenticated_max),
     RANGE(1, 1000000),
     .def = "256",
     .err = "mgmt_unauthenticated_max must be a positive number of connections",
     .meaning = "HTTP(S) connections not logged in, per listener; the oldest goes"},
    {.key = "mgmt_handshake_timeout",
     .type = ST_MS,
     C(mgmt_handshake_timeout_ms),
     RANGE(10, 600000),
     .def = "5000",
     .err = "mgmt_handshake_timeout must be milliseconds from 10 to 600000",
     .meaning = "TLS handshake and request header of a connection not logged in"},
    {.key = "mgmt_session_idle_timeout",
     .type = ST_SECONDS,
     C(mgmt_session_idle_timeout_s),
     RANGE(1, 7 * 86400),
     .def = "1800",
     .err = "mgmt_session_idle_timeout must be seconds from 1 to 604800",
     .meaning = "a console session unused this long ends"},
    {.key = "mgmt_session_max_age",
     .type = ST_SECONDS,
     C(mgmt_session_max_age_s),
     RANGE(1, 30 * 86400),
     .def = "28800",
     .err = "mgmt_session_max_age must be seconds from 1 to 2592000",
     .meaning = "a console session ends this long after login"},
    {.key = "mgmt_session_max",
     .type = ST_INT,
     C(mgmt_session_max),
     RANGE(1, 1000000),
     .def = "1000",
     .err = "mgmt_session_max must be a positive number of sessions",
     .meaning = "console sessions at once; past it the least recently used ends"},
    {.key = "handle_idle_timeout",
     .type = ST_SECONDS,
     C(handle_idle_timeout_s),
     RANGE(1, UINT32_MAX),
     .def = "600",
     .err = "handle_idle_timeout must be seconds (at least 1)",
     .meaning = "an unused MSMQ handle opened over HTTP is closed after this long"},
    {.key = "handle_remote_timeout",
     .type = ST_MS,
     C(handle_remote_timeout_ms),
     RANGE(10, 600000),
     .def = "5000",
     .err = "handle_remote_timeout must be milliseconds from 10 to 600000",
     .meaning = "a request to the node that owns a queue waits this long at most"},
    {.key = "handle_limit",
     .type = ST_INT,
     C(handle_limit),
     RANGE(1, 1000000),
     .def = "1000",
     .err = "handle_limit must be a count from 1 to 1000000",
     .meaning = "handles (and management objects) a user may have open"},
    {.key = "handshake_timeout",
     .type = ST_MS,
     C(handshake_timeout_ms),
     RANGE(0, UINT32_MAX),
     .def = "10000",
     .err = "handshake_timeout must be milliseconds",
     .meaning = "time a client has to complete the AMQP handshake"},
    /* DCE/RPC doors */
    {.key = "listeners.msrpc",
     .type = ST_PORT,
     C(msrpc_port),
     RANGE(0, 65535),
     .words = {{"off", -1}, {"-1", -1}},
     .def = "off",
     .doc_def = "(off)",
     .err = "listeners.msrpc must be 0..65535 or off",
     .meaning = "DCE/RPC endpoint of qmmgmt and qmcomm (0 = a free port)"},
    {.key = "listeners.msrpc_epmap",
     .type = ST_PORT,
     C(msrpc_epmap_port),
     RANGE(0, 65535),
     .words = {{"off", -1}, {"-1", -1}, {"on", 135}, {"true", 135}},
     .def = "off",
     .doc_def = "(off)",
     .err = "listeners.msrpc_epmap must be 0..65535, on (135) or off",
     .meaning = "the DCE/RPC endpoint mapper (on = 135)"},
    {.key = "msrpc.auth",
     .type = ST_ENUM,
     C(msrpc_auth_none),
     .words = {{"none", 1}, {"ntlm", 0}},
     .def = "none",
     .err = "msrpc.auth must be ntlm or none (loopback callers only)",
     .meaning = "ntlm: NTLMv2 logins; none: loopback callers only, as msrpc.user"},
    {.key = "msrpc.min_auth_level",
     .type = ST_ENUM,
     C(msrpc_min_level),
     .words = {{"connect", 2}, {"integrity", 5}, {"privacy", 6}},
     .def = "integrity",
     .err = "msrpc.min_auth_level must be connect, integrity or privacy",
     .meaning = "lowest authentication level a call may have"},
    {.key = "msrpc.ntlm_hashes",
     .type = ST_BOOL,
     .flags = SF_RAWDEF,
     C(msrpc_ntlm_hashes),
     .words = {{"on", 1}, {"off", 0}},
     .rawdef = -1,
     .doc_def = "on with `msrpc.auth = ntlm`, else off",
     .err = "msrpc.ntlm_hashes must be on or off",
     .meaning = "keep each user's NT hash"},
    {.key = "msrpc.user",
     .type = ST_STRING,
     C(msrpc_user),
     .def = "guest",
     .meaning = "whose rights unauthenticated loopback calls have"},
    {.key = "msrpc.max_call_bytes",
     .type = ST_SIZE,
     C(msrpc_max_call),
     RANGE(4096, 64u << 20),
     .def = "1M",
     .err = "msrpc.max_call_bytes must be 4096..67108864",
     .meaning = "largest request gathered from fragments"},
    {.key = "msrpc.max_fragments",
     .type = ST_INT,
     C(msrpc_max_fragments),
     RANGE(1, 65536),
     .def = "256",
     .err = "msrpc.max_fragments must be 1..65536",
     .meaning = "most fragments one request may come in"},
    /* node-to-node links */
    {.key = "link_user",
     .type = ST_STRING,
     C(link_user),
     .def = "guest",
     .meaning = "what this node logs in as on other nodes"},
    {.key = "link_password",
     .type = ST_STRING,
     C(link_password),
     .def = "guest",
     .meaning = "its password"},
    {.key = "link_heartbeat",
     .type = ST_SECONDS,
     C(link_heartbeat_s),
     RANGE(0, 65535),
     .def = "10",
     .err = "link_heartbeat must be 0..65535 seconds",
     .meaning = "heartbeats on links"},
    {.key = "link_retry_min_ms",
     .type = ST_MS,
     C(link_retry_min_ms),
     RANGE(1, UINT32_MAX),
     .def = "500",
     .err = "must be a positive number of milliseconds",
     .meaning = "reconnect backoff, first"},
    {.key = "link_retry_max_ms",
     .type = ST_MS,
     C(link_retry_max_ms),
     RANGE(1, UINT32_MAX),
     .def = "30000",
     .err = "must be a positive number of milliseconds",
     .meaning = "reconnect backoff, longest"},
    {.key = "link_idle_ms",
     .type = ST_MS,
     C(link_idle_ms),
     RANGE(1, UINT32_MAX),
     .def = "60000",
     .err = "must be a positive number of milliseconds",
     .meaning = "a link with nothing to send is closed after this long"},
    /* MS-MQQB 3.1.3.1: ResendTimeoutsShort/Medium/Long/Final */
    {.key = "eod_resend_short_ms",
     .type = ST_MS,
     C(eod_resend_ms[0]),
     RANGE(1, UINT32_MAX),
     .def = "30000",
     .err = "must be a positive number of milliseconds",
     .meaning = "MSMQ's resend timer, short (3 times)"},
    {.key = "eod_resend_medium_ms",
     .type = ST_MS,
     C(eod_resend_ms[1]),
     RANGE(1, UINT32_MAX),
     .def = "300000",
     .err = "must be a positive number of milliseconds",
     .meaning = "MSMQ's resend timer, medium (3 times)"},
    {.key = "eod_resend_long_ms",
     .type = ST_MS,
     C(eod_resend_ms[2]),
     RANGE(1, UINT32_MAX),
     .def = "1800000",
     .err = "must be a positive number of milliseconds",
     .meaning = "MSMQ's resend timer, long (3 times)"},
    {.key = "eod_resend_final_ms",
     .type = ST_MS,
     C(eod_resend_ms[3]),
     RANGE(1, UINT32_MAX),
     .def = "21600000",
     .err = "must be a positive number of milliseconds",
     .meaning = "MSMQ's resend timer, final"},
    {.key = "link_batch_msgs",
     .type = ST_INT,
     C(link_batch_msgs),
     RANGE(1, 1u << 20),
     .def = "2048",
     .err = "must be 1..1048576",
     .meaning = "messages in one link transaction at most"},
    {.key = "link_window",
     .type = ST_INT,
     C(link_window),
     RANGE(1, 1u << 20),
     .def = "16",
     .err = "must be 1..1048576",
     .meaning = "link transactions awaiting their order ack at most"},
    /* 2^48: SeqNos are the sender's node-wide lookup ids, 89 years at 100,000 msg/s */
    {.key = "link_seq_window",
     .type = ST_INT,
     C(link_seq_window),
     RANGE(1, UINT64_MAX),
     .def = "281474976710656",
     .doc_def = "2^48",
     .err = "link_seq_window must be a positive number",
     .meaning = "receiver: the largest step a sequence's numbers may take"},
    {.key = "link_bad_queue_grace_ms",
     .type = ST_MS,
     C(link_bad_queue_grace_ms),
     RANGE(0, UINT32_MAX),
     .def = "60000",
     .err = "link_bad_queue_grace_ms must be milliseconds (0: dead-letter at once)",
     .meaning = "a missing destination queue is refused this long before dead-lettering"},
    {.key = "link_time_to_reach_queue_ms",
     .type = ST_MS,
     C(link_time_to_reach_queue_ms),
     RANGE(0, 315360000000ull),
     .def = "345600000",
     .doc_def = "345600000 (4 days)",
     .err = "link_time_to_reach_queue_ms must be milliseconds up to 10 years (0: never)",
     .meaning = "MSMQ's TimeToReachQueue for messages in an outgoing queue"},
    {.key = "link_dns_timeout_ms",
     .type = ST_MS,
     C(link_dns_timeout_ms),
     RANGE(10, 3600000),
     .def = "10000",
     .err = "link_dns_timeout_ms must be milliseconds from 10 to 3600000",
     .meaning = "how long a connect attempt waits for a host name's lookup"},
    {.key = "link_batch_bytes",
     .type = ST_SIZE,
     C(link_batch_bytes),
     RANGE(1024, 64u << 20),
     .def = "1M",
     .err = "link_batch_bytes must be a size from 1k to 64M",
     .meaning = "bytes in one link transaction at most"},
    /* users and the first start's defaults */
    {.key = "default_user",
     .type = ST_STRING,
     C(default_user),
     .def = "guest",
     .meaning = "user created on the first start"},
    {.key = "default_pass",
     .type = ST_STRING,
     C(default_pass),
     .def = "guest",
     .meaning = "its password"},
    {.key = "default_vhost",
     .type = ST_STRING,
     C(default_vhost),
     .def = "/",
     .meaning = "vhost created on the first start"},
    {.key = "default_user_tags.TAG",
     .type = ST_BOOL,
     C(default_user_tags),
     .fn = set_default_user_tag,
     .def = "administrator",
     .doc_def = "administrator = true",
     .err = "default_user_tags.TAG must be true or false",
     .meaning = "tags of the default user"},
    {.key = "default_permissions.configure",
     .type = ST_STRING,
     C(default_perms[0]),
     .def = ".*",
     .meaning = "the default user's configure permission"},
    {.key = "default_permissions.write",
     .type = ST_STRING,
     C(default_perms[1]),
     .def = ".*",
     .meaning = "the default user's write permission"},
    {.key = "default_permissions.read",
     .type = ST_STRING,
     C(default_perms[2]),
     .def = ".*",
     .meaning = "the default user's read permission"},
    {.key = "loopback_users",
     .type = ST_ENUM,
     .fn = set_loopback_none,
     .words = {{"none", 0}},
     .err = "loopback_users must be none (or use loopback_users.NAME = true)",
     .meaning = "none: no user is held to loopback"},
    {.key = "loopback_users.NAME",
     .type = ST_BOOL,
     .fn = set_loopback_user_key,
     .def = "guest",
     .err = "loopback_users.NAME must be true or false",
     .meaning = "true: NAME may log in from loopback only"},
    {.key = "password_change_closes_connections",
     .type = ST_BOOL,
     C(password_change_closes_connections),
     .def = "false",
     .err = "password_change_closes_connections must be true or false",
     .meaning = "close a user's connections when its password changes"},
    {.key = "password_hashing_module",
     .type = ST_ENUM,
     .flags = SF_STRVAL,
     C(password_hashing_module),
     .words = {{"rabbit_password_hashing_sha256", 0},
               {"rabbit_password_hashing_sha512", 0},
               {"sluice_password_hashing_argon2id", 0}},
     .doc_def = "rabbit_password_hashing_sha256",
     .err = "password_hashing_module must be rabbit_password_hashing_sha256, "
            "rabbit_password_hashing_sha512 or sluice_password_hashing_argon2id",
     .meaning = "hash of new passwords"},
    {.key = "user.NAME.tags",
     .type = ST_LIST,
     .fn = set_user_tags,
     .meaning = "a config user's tags (after user.NAME)"},
    {.key = "user.NAME.link_node",
     .type = ST_STRING,
     .fn = set_user_link_node,
     .meaning = "the node (32 hex digits) this link user speaks for (after user.NAME)"},
    {.key = "user.NAME",
     .type = ST_STRING,
     .fn = set_user,
     .meaning = "a config user's password (re-applied at every start)"},
    /* TLS */
    {.key = "listeners.ssl.default",
     .alias = {"tls_port"},
     .type = ST_PORT,
     .flags = SF_RAWDEF,
     C(tls_port),
     .fn = set_tls_listener,
     .rawdef = -1,
     .doc_def = "(none)",
     .err = "listeners.ssl.default must be [IP:]PORT (0 = a free port)",
     .meaning = "[IP:]PORT of the AMQPS listener"},
    {.key = "ssl_options.*",
     .type = ST_GROUP,
     C(ssl),
     .group = &tls_table,
     .meaning = "the AMQPS listener's TLS"},
    {.key = "management.ssl.port",
     .type = ST_PORT,
     .flags = SF_RAWDEF,
     C(mgmt_tls_port),
     RANGE(0, 65535),
     .rawdef = -1,
     .doc_def = "(none)",
     .err = "management.ssl.port must be 0..65535",
     .meaning = "HTTPS listener of the management API"},
    {.key = "management.ssl.*",
     .type = ST_GROUP,
     C(mgmt_ssl),
     .group = &tls_table,
     .meaning = "the HTTPS listener's TLS"},
    {.key = "link_ssl",
     .type = ST_BOOL,
     C(link_tls),
     .def = "false",
     .err = "link_ssl must be true or false",
     .meaning = "node-to-node links speak TLS"},
    /* a link checks whom it talks to unless told not to */
    {.key = "link_ssl_options.*",
     .type = ST_GROUP,
     C(link_ssl),
     .group = &tls_table,
     .def = "verify=verify_peer",
     .doc_def = "verify = verify_peer",
     .meaning = "the links' TLS"},
    {.key = "ssl_handshake_timeout",
     .type = ST_MS,
     C(ssl_handshake_timeout_ms),
     RANGE(1, UINT32_MAX),
     .def = "5000",
     .err = "ssl_handshake_timeout must be milliseconds",
     .meaning = "time a client has to complete the TLS handshake"},
    {.key = "auth_mechanisms.N",
     .type = ST_LIST,
     .flags = SF_EMPTY_OK,
     C(auth_mechanisms),
     .fn = set_auth_mechanism,
     .words = {{"PLAIN", 0}, {"AMQPLAIN", 0}, {"EXTERNAL", 0}},
     .def = "PLAIN AMQPLAIN",
     .doc_def = "PLAIN, AMQPLAIN",
     .err = "auth_mechanisms.N must be PLAIN, AMQPLAIN or EXTERNAL",
     .meaning = "login mechanisms offered, in order (the first line replaces the default)"},
    {.key = "ssl_cert_login_from",
     .type = ST_ENUM,
     C(ssl_cert_login_cn),
     .words = {{"common_name", 1}, {"distinguished_name", 0}},
     .def = "distinguished_name",
     .err = "ssl_cert_login_from must be common_name or distinguished_name",
     .meaning = "what of the certificate EXTERNAL logs in as"},
    /* RabbitMQ's stream protocol door (src/stream/), off unless asked for as RabbitMQ's
     * rabbitmq_stream plugin is */
    {.key = "listeners.stream",
     .alias = {"stream.listeners.tcp.1", "stream.listeners.tcp.default"},
     .type = ST_PORT,
     .flags = SF_RAWDEF,
     C(stream_port),
     .fn = set_stream_listener,
     .rawdef = -1,
     .doc_def = "(none: off)",
     .err = "listeners.stream must be [IP:]PORT (0 = a free port, default = 5552) or off",
     .meaning = "[IP:]PORT of RabbitMQ's stream protocol (default or true = 5552)"},
    {.key = "listeners.stream.ssl",
     .alias = {"stream.listeners.ssl.1", "stream.listeners.ssl.default"},
     .type = ST_PORT,
     .flags = SF_RAWDEF,
     C(stream_tls_port),
     .fn = set_stream_listener,
     .rawdef = -1,
     .doc_def = "(none: off)",
     .err = "listeners.stream.ssl must be [IP:]PORT (0 = a free port, default = 5551) or off",
     .meaning = "[IP:]PORT of the stream protocol over TLS (ssl_options.*; default = 5551)"},
    {.key = "stream.frame_max",
     .type = ST_SIZE,
     C(stream_frame_max),
     RANGE(8192, UINT32_MAX),
     .def = "1048576",
     .err = "stream.frame_max must be at least 8192",
     .meaning = "largest stream frame proposed in Tune and accepted after Open"},
    {.key = "stream.heartbeat",
     .type = ST_SECONDS,
     C(stream_heartbeat),
     RANGE(0, 65535),
     .def = "60",
     .err = "stream.heartbeat must be 0..65535 seconds",
     .meaning = "seconds proposed in the stream protocol's Tune (0 = off)"},
    {.key = "stream.request_timeout",
     .type = ST_MS,
     C(stream_request_timeout_ms),
     RANGE(1, UINT32_MAX),
     .def = "60000",
     .err = "stream.request_timeout must be 1 or more milliseconds",
     .meaning = "ms a stream client has to answer a ConsumerUpdate before its connection is "
                "closed"},
    {.key = "stream.advertised_host",
     .type = ST_STRING,
     C(stream_advertised_host),
     .doc_def = "(the listener's address)",
     .meaning = "host the stream door names in Metadata and Open"},
    {.key = "stream.advertised_port",
     .type = ST_PORT,
     .flags = SF_RAWDEF,
     C(stream_advertised_port),
     RANGE(1, 65535),
     .rawdef = -1,
     .doc_def = "(the listener's port)",
     .err = "stream.advertised_port must be 1..65535",
     .meaning = "port the stream door names in Metadata and Open"},
    {.key = "stream.advertised_tls_port",
     .type = ST_PORT,
     .flags = SF_RAWDEF,
     C(stream_advertised_tls_port),
     RANGE(1, 65535),
     .rawdef = -1,
     .doc_def = "(the TLS listener's port)",
     .err = "stream.advertised_tls_port must be 1..65535",
     .meaning = "port the stream door names to TLS clients in Metadata and Open"},
    /* MS-MQQB door */
    {.key = "listeners.msmq",
     .type = ST_PORT,
     .flags = SF_RAWDEF,
     C(msmq_port),
     .fn = set_msmq_listener,
     .rawdef = -1,
     .doc_def = "(none: off)",
     .err = "listeners.msmq must be [IP:]PORT (0 = a free port, default = 1801)",
     .meaning = "[IP:]PORT of the MS-MQQB listener (default or true = 1801)"},
    {.key = "msmq.ping_port",
     .type = ST_PORT,
     .flags = SF_RAWDEF,
     C(msmq_ping_port),
     RANGE(0, 65535),
     .words = {{"off", -1}},
     .rawdef = -2,
     .doc_def = "3527 (0 when `listeners.msmq = 0`)",
     .err = "msmq.ping_port must be a port (0 = a free one) or off",
     .meaning = "UDP port of MS-MQQB's Ping"},
    {.key = "msmq.vhost",
     .type = ST_STRING,
     C(msmq_vhost),
     .doc_def = "/",
     .meaning = "the vhost whose queues MS-MQQB messages go to"},
    {.key = "msmq.hosts.N",
     .type = ST_LIST,
     .flags = SF_EMPTY_OK,
     C(msmq_hosts),
     .fn = set_msmq_host,
     .doc_def = "(none)",
     .err = "msmq.hosts.N must be HOST[:PORT] (a Windows queue manager)",
     .meaning = "a Windows queue manager outgoing queues speak MS-MQQB to"},
    {.key = "msmq.user",
     .type = ST_STRING,
     C(msmq_user),
     .doc_def = "(none)",
     .meaning = "a user whose write permission each destination queue needs"},
    {.key = "msmq.max_packet_size",
     .type = ST_SIZE,
     C(msmq_max_packet),
     RANGE(1024, 64u << 20),
     .def = "4M",
     .err = "msmq.max_packet_size must be 1K..64M",
     .meaning = "largest MS-MQQB packet taken (MS-MQQB's own ceiling by default)"},
    {.key = "msmq.idle_timeout",
     .type = ST_MS,
     C(msmq_idle_timeout_ms),
     RANGE(100, 86400000),
     .def = "120000",
     .err = "msmq.idle_timeout must be milliseconds (at least 100)",
     .meaning = "a silent session is closed after this long"},
    {.key = "msmq.handshake_timeout",
     .type = ST_MS,
     C(msmq_handshake_timeout_ms),
     RANGE(100, 86400000),
     .def = "10000",
     .err = "msmq.handshake_timeout must be milliseconds (at least 100)",
     .meaning = "a session not established is closed after this long"},
    /* the whole 32-bit range: a Sluice sender's gaps (node-wide lookup ids) can be any size,
     * and with declared gaps bound to the sequence's address (mqqb_tx_check_from) a smaller
     * window only makes a forger who holds that address send two messages instead of one */
    {.key = "msmq.seq_window",
     .type = ST_INT,
     C(msmq_seq_window),
     RANGE(1, UINT32_MAX),
     .def = "4294967295",
     .err = "msmq.seq_window must be 1..4294967295",
     .meaning = "the largest gap a TxSequenceNumber may declare"},
    {.key = "msmq.allowed_senders",
     .type = ST_LIST,
     C(msmq_allowed_senders),
     .ok = cidr_list_ok,
     .doc_def = "127.0.0.0/8 ::1/128 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 fc00::/7 fe80::/10",
     .err = "msmq.allowed_senders must be a list of ADDRESS[/BITS] (IPv4 /0..32, IPv6 "
            "/0..128), or any",
     .meaning = "the addresses that may open an MS-MQQB session"},
    {.key = "msmq.window",
     .type = ST_INT,
     C(msmq_window),
     RANGE(1, 65535),
     .def = "64",
     .err = "msmq.window must be 1..65535",
     .meaning = "the most session-ack window granted"},
};
static const st_table node_table = {node_rows, NROWS(node_rows)};

static const setting cluster_rows[] = {
    {.key = "cluster_formation.peer_discovery_backend",
     .type = ST_ENUM,
     CL(enabled),
     /* RabbitMQ's module names for the same backend are accepted too. */
     .words = {{"etcd", 1}, {"rabbit_peer_discovery_etcd", 1}, {"classic_config", 0}, {"none", 0}},
     .doc_def = "(none: no cluster)",
     .err = "peer_discovery_backend must be etcd (or classic_config: no cluster)",
     .meaning = "etcd: this node is a member of a cluster"},
    {.key = "cluster_formation.etcd.endpoints.N",
     .type = ST_LIST,
     .flags = SF_EMPTY_OK,
     .fn = set_endpoint,
     .doc_def = "(none)",
     .meaning = "HOST:PORT of etcd (N orders them; at least one)"},
    {.key = "cluster_formation.etcd.key_prefix",
     .type = ST_STRING,
     CL(key_prefix),
     .ok = valid_segment,
     .def = "sluice",
     .err = "key_prefix must be 1..128 of A-Z a-z 0-9 - _ .",
     .meaning = "etcd keys live under /PREFIX/NAME/"},
    {.key = "cluster_formation.etcd.cluster_name",
     .type = ST_STRING,
     CL(cluster_name),
     .ok = valid_segment,
     .def = "default",
     .err = "cluster_name must be 1..128 of A-Z a-z 0-9 - _ .",
     .meaning = "the cluster's name in etcd"},
    {.key = "cluster.replication_port",
     .type = ST_PORT,
     .flags = SF_STRICT,
     CL(replication_port),
     RANGE(0, 65535),
     .def = STR(SL_CLUSTER_DEFAULT_REPLICATION_PORT),
     .err = "cluster.replication_port must be 0..65535 (0: a free port)",
     .meaning = "port of the replication stream (0: a free port, logged)"},
    {.key = "cluster.advertise_address",
     .type = ST_STRING,
     CL(advertise_address),
     .ok = valid_host,
     .doc_def = "(bind)",
     .err = "cluster.advertise_address must be a host name or address",
     .meaning = "what peers dial"},
    {.key = "cluster.lease_ttl",
     .type = ST_SECONDS,
     .flags = SF_STRICT,
     CL(lease_ttl_s),
     RANGE(1, 60),
     /* As short as is safe (issue 46): etcd grants at least 1.5 x its --election-timeout,
      * rounded up to whole seconds (2 s at its default 1000 ms), so 1 would be raised to 2
      * anyway; and a leader steps down when etcd has not answered a renewal within
      * lease_ttl / 4 (500 ms here), which etcd's own fsyncs on a busy disk already approach.
      * A killed or crashed leader process no longer waits for it (its followers find its
      * replication port refused and revoke its lease: member.h); the lease bounds only a
      * lost host, a partition or a stall (failover within lease_ttl + etcd's 0.5 s tick). */
     .def = "2",
     .err = "cluster.lease_ttl must be 1..60 seconds",
     .meaning = "the leader's etcd lease"},
    {.key = "cluster.min_insync_replicas",
     .type = ST_INT,
     .flags = SF_STRICT,
     CL(min_insync_replicas),
     RANGE(1, 16),
     .def = "2",
     .err = "cluster.min_insync_replicas must be 1..16 (the leader counts)",
     .meaning = "copies a confirm waits for, the leader's included"},
    {.key = "cluster.proxy_max_connections",
     .type = ST_INT,
     .flags = SF_STRICT,
     CL(proxy_max_connections),
     RANGE(1, 1000000),
     .def = STR(SL_CLUSTER_DEFAULT_PROXY_MAX_CONNECTIONS),
     .err = "cluster.proxy_max_connections must be 1..1000000",
     .meaning = "a follower's proxied connections at once"},
    {.key = "cluster.replication_buffer_bytes",
     .type = ST_SIZE,
     .flags = SF_STRICT | SF_PLUS_OK,
     CL(replication_buffer_bytes),
     RANGE(4096, 1ull << 40),
     .def = "268435456",
     .err = "cluster.replication_buffer_bytes must be 4096..1099511627776",
     .meaning = "the leader's ring of recent groups; a follower further behind takes a full copy"},
    {.key = "cluster.secret_file",
     .type = ST_PATH,
     CL(secret_file),
     .ok = non_empty,
     .doc_def = "(none)",
     .err = "cluster.secret_file must be a path",
     .meaning = "the cluster's shared secret (required unless cluster.insecure_no_secret)"},
    {.key = "cluster.insecure_no_secret",
     .type = ST_ENUM,
     CL(insecure_no_secret),
     .words = TRUE_FALSE,
     .def = "false",
     .err = "cluster.insecure_no_secret must be true or false",
     .meaning = "true: replication peers are not authenticated"},
    {.key = "cluster_formation.etcd.scheme",
     .type = ST_ENUM,
     CL(etcd_https),
     .words = {{"https", 1}, {"http", 0}},
     .def = "http",
     .err = "cluster_formation.etcd.scheme must be http or https",
     .meaning = "https: TLS to etcd (any etcd ssl_options key implies it)"},
    {.key = "cluster_formation.etcd.username",
     .type = ST_STRING,
     CL(etcd_username),
     .meaning = "etcd's auth: a token per session"},
    {.key = "cluster_formation.etcd.password",
     .type = ST_STRING,
     CL(etcd_password),
     .meaning = "with username"},
    {.key = "cluster_formation.etcd.ssl_options.cacertfile",
     .type = ST_PATH,
     .flags = SF_ETCD_TLS,
     CL(etcd_cacertfile),
     .meaning = "CA of etcd's certificate"},
    {.key = "cluster_formation.etcd.ssl_options.certfile",
     .type = ST_PATH,
     .flags = SF_ETCD_TLS,
     CL(etcd_certfile),
     .meaning = "this node's certificate for etcd"},
    {.key = "cluster_formation.etcd.ssl_options.keyfile",
     .type = ST_PATH,
     .flags = SF_ETCD_TLS,
     CL(etcd_keyfile),
     .meaning = "its key"},
    {.key = "cluster_formation.etcd.ssl_options.verify",
     .type = ST_ENUM,
     .flags = SF_ETCD_TLS,
     CL(etcd_verify),
     .words = VERIFY_WORDS,
     .def = "verify_peer",
     .err = "cluster_formation.etcd.ssl_options.verify must be verify_peer or verify_none",
     .meaning = "check etcd's certificate"},
    {.key = "cluster.ssl_options.cacertfile",
     .type = ST_PATH,
     CL(repl_cacertfile),
     .meaning = "CA of the members' certificates (replication port, mutual TLS)"},
    {.key = "cluster.ssl_options.certfile",
     .type = ST_PATH,
     CL(repl_certfile),
     .meaning = "this member's certificate: TLS on the replication port is on when set"},
    {.key = "cluster.ssl_options.keyfile", .type = ST_PATH, CL(repl_keyfile), .meaning = "its key"},
    {.key = "cluster.ssl_options.verify",
     .type = ST_ENUM,
     CL(repl_verify),
     .words = VERIFY_WORDS,
     .def = "verify_peer",
     .err = "cluster.ssl_options.verify must be verify_peer or verify_none",
     .meaning = "verify_none: encryption only"},
    {.key = "cluster.ssl_options.fail_if_no_peer_cert",
     .type = ST_ENUM,
     CL(repl_fail_if_no_peer),
     .words = TRUE_FALSE,
     .def = "true",
     .err = "cluster.ssl_options.fail_if_no_peer_cert must be true or false",
     .meaning = "the leader wants a follower's certificate"},
};
static const st_table cluster_table = {cluster_rows, NROWS(cluster_rows)};

/* ---- applying and defaults ---- */

int node_settings_apply_cluster(node_cluster_conf *c, const char *key, const char *value,
                                const char **err)
{
    *err = NULL;
    if (lookup(&cluster_table, c, key, value, 0, err))
        return 1;
    if (!strncmp(key, "cluster_formation.", 18) || !strncmp(key, "cluster.", 8)) {
        *err = "unknown cluster setting";
        return 1;
    }
    return 0;
}

const char *node_settings_apply(node_config *c, const char *key, const char *value)
{
    const char *err;
    if (node_settings_apply_cluster(&c->cluster, key, value, &err))
        return err;
    if (lookup(&node_table, c, key, value, 0, &err))
        return err;
    return "unknown setting";
}

static void set_default(void *base, const setting *r)
{
    const char *err = NULL;
    if (r->flags & SF_RAWDEF) {
        store((char *)base + r->off, r->size, r->rawdef);
    } else if (!r->def) {
        return;
    } else if (r->fn) {
        err = r->fn(base, r, NULL, 0, NULL);
    } else if (r->type == ST_GROUP) {
        /* SUBKEY=VALUE */
        const char *eq = strchr(r->def, '=');
        char sub[64];
        snprintf(sub, sizeof sub, "%.*s", (int)(eq - r->def), r->def);
        if (!lookup(r->group, (char *)base + r->off, sub, eq + 1, 1, &err))
            err = "unknown setting";
    } else {
        err = set_value(base, r, "", 0, r->def);
    }
    if (err) { /* a row whose default its own key refuses: caught by test_config */
        fprintf(stderr, "sluiced: default of %s: %s\n", r->key, err);
        abort();
    }
}

static void table_defaults(const st_table *t, void *base)
{
    for (size_t i = 0; i < t->n; i++)
        set_default(base, &t->rows[i]);
}

void node_settings_cluster_defaults(node_cluster_conf *c)
{
    memset(c, 0, sizeof *c);
    table_defaults(&cluster_table, c);
}

void node_settings_defaults(node_config *c)
{
    memset(c, 0, sizeof *c);
    table_defaults(&node_table, c);
    node_settings_cluster_defaults(&c->cluster);
}

/* ---- the reference ---- */

static void print_type(FILE *out, const setting *r)
{
    static const char *const names[] = {"string",  "path", "list", "int",  "size", "ms",
                                        "seconds", "us",   "port", "bool", "enum", "group"};
    fputs(names[r->type], out);
    int num = r->type >= ST_INT && r->type <= ST_PORT && r->max;
    if (num)
        fprintf(out, " %llu..%llu", (unsigned long long)r->min, (unsigned long long)r->max);
    if (num && (r->flags & SF_ZERO_OK))
        fputs(" or 0", out);
    for (int i = 0; i < 6 && r->words[i].w; i++)
        fprintf(out, "%s%s", i ? "|" : r->type == ST_ENUM ? " " : " or ", r->words[i].w);
}

static const char *doc_default(const setting *r)
{
    if (r->doc_def)
        return r->doc_def;
    if (r->flags & SF_RAWDEF)
        return "";
    return r->def ? r->def : "";
}

static void print_table(FILE *out, const st_table *t, const char *prefix)
{
    for (size_t i = 0; i < t->n; i++) {
        const setting *r = &t->rows[i];
        if (r->type == ST_GROUP) { /* the group, then its keys under PREFIX. */
            size_t n = strlen(r->key) - 1;
            char sub[128];
            snprintf(sub, sizeof sub, "%s%.*s", prefix, (int)n, r->key);
            fprintf(out, "%s%s\tgroup\t%s\t%s\n", prefix, r->key, doc_default(r), r->meaning);
            print_table(out, r->group, sub);
            continue;
        }
        fprintf(out, "%s%s\t", prefix, r->key);
        print_type(out, r);
        fprintf(out, "\t%s\t%s\n", doc_default(r), r->meaning ? r->meaning : "");
        for (int a = 0; a < 4 && r->alias[a]; a++)
            fprintf(out, "%s%s\talias\t\t%s%s\n", prefix, r->alias[a], prefix, r->key);
    }
}

void node_settings_print(FILE *out)
{
    print_table(out, &node_table, "");
    print_table(out, &cluster_table, "");
}
