/* access_internal.h - what the files of src/access/ share.
 *
 *   access.c    users, vhost definitions, permissions, limits, the checks
 *   password.c  hashes (SHA-256/512, MD5, Argon2id), base64
 *   pattern.c   PCRE2 patterns with bounded matching cost
 *   records.c   the module's meta-log records: encode on change, replay, snapshot
 */
#ifndef SL_ACCESS_INTERNAL_H
#define SL_ACCESS_INTERNAL_H

#include "access/access.h"

struct acc_db {
    sl_map *users;          /* name -> acc_user* */
    sl_map *vhosts;         /* name -> acc_vhost* */
    sl_map *loopback_users; /* name -> (void*)1 */
    uint64_t gen;
    acc_hash default_hash;
    int initialized;
    int replaying; /* inside acc_replay: emit nothing */
    int keep_nt;   /* msrpc.ntlm_hashes */
    acc_emit_fn emit;
    void *emit_ctx;
};

/* records.c: tell the store about a change (no-op while replaying or without a hook). */
void acc_emit_vhost(acc_db *a, const acc_vhost *v);
void acc_emit_vhost_del(acc_db *a, const char *name);
void acc_emit_user(acc_db *a, const acc_user *u);
void acc_emit_user_del(acc_db *a, const char *name);
void acc_emit_perm(acc_db *a, const acc_user *u, const acc_grant *g);
void acc_emit_perm_del(acc_db *a, const char *user, const char *vhost);
void acc_emit_topic(acc_db *a, const acc_user *u, const acc_topic_grant *t);
void acc_emit_topic_del(acc_db *a, const char *user, const char *vhost, const char *exchange);
void acc_emit_vhost_limits(acc_db *a, const acc_vhost *v);
void acc_emit_user_limits(acc_db *a, const acc_user *u);
void acc_emit_user_link(acc_db *a, const acc_user *u);
void acc_emit_user_nthash(acc_db *a, const acc_user *u);

/* access.c: the setters without validation of existence, for replay */
acc_user *acc_user_get_or_create(acc_db *a, const char *name, size_t len);
void acc_user_set_hash(acc_user *u, acc_hash algo, uint8_t *hash, size_t len); /* takes hash */
void acc_user_set_tags(acc_user *u, const char *tags);
void acc_user_free(acc_user *u);
acc_vhost *acc_vhost_get_or_create(acc_db *a, const char *name, size_t len);
/* Drop a vhost definition and everything on it, without records. */
void acc_vhost_forget(acc_db *a, const char *name);
/* 1 for 1..255 bytes of valid UTF-8 without NUL. */
int acc_name_ok(const char *s, size_t n);

/* password.c */
size_t acc_digest_len(acc_hash algo);
char *acc_b64_encode(const uint8_t *p, size_t n);
long acc_b64_decode(const char *s, size_t n, uint8_t *out, size_t cap);
/* Parse a stored/exported hash text for algo into bytes; "" = no password (*outlen 0). */
int acc_hash_import(acc_hash algo, const char *text, uint8_t **out, size_t *outlen, char *err,
                    size_t errlen);

#endif
