/* access.h - who may do what (DESIGN.md section 7): the one access module every door asks.
 *
 * It holds the node's security definitions, RabbitMQ's access model as rabbitmqctl and the
 * management API show it:
 *   users        name, password hash (RabbitMQ's formats, so definitions move both ways),
 *                tags (administrator, monitoring, policymaker, management, impersonator,
 *                Sluice's link, or any other word), optional limits (max-connections,
 *                max-channels), and for a link user the node it speaks for (see
 *                acc_check_link_login);
 *   vhosts       name, description, tags, limits (max-connections, max-queues). The live
 *                vhost (queues, exchanges) is qm's qm_vhost; this is its definition;
 *   permissions  configure / write / read regular expressions per (user, vhost);
 *   topic permissions  write / read expressions per (user, vhost, topic exchange), matched
 *                against routing keys, with {username} and {vhost} expanded.
 * and answers one question: may user U do operation O on resource R in vhost V. Doors (AMQP
 * methods, the HTTP API, MSMQ actions and properties, moves, transactions, handles, outgoing
 * queues, node-to-node links) call the acc_check_* functions below; they carry no rules of
 * their own. Every refusal comes back as an sl_err (SL_ERR_ACCESS_REFUSED, SL_ERR_NOT_ALLOWED
 * or SL_ERR_PRECONDITION) with RabbitMQ's text in err, without the "ACCESS_REFUSED - " prefix
 * that the AMQP door adds.
 *
 * Semantics (RabbitMQ's rabbit_access_control and rabbit_auth_backend_internal):
 *   - a pattern is a PCRE regular expression, matched unanchored against the whole resource
 *     name (Erlang re:run semantics, bytes, no UTF mode); the empty pattern means "^$", i.e.
 *     no named resource;
 *   - no permission entry for (U, V): every check in V is refused, and connection.open of V
 *     is refused with NOT_ALLOWED;
 *   - the default exchange is checked under the name "amq.default";
 *   - no topic permission for (U, V, exchange): every routing key is allowed;
 *   - a subqueue "q;sub" (or "q;journal") is checked as its queue "q": subqueues share their
 *     queue's security, as MSMQ's do (a queue name cannot contain ';' otherwise).
 * Matching cost is bounded: PCRE2 with a match limit, a depth limit and a heap limit (see
 * pattern.c); a pattern that hits a limit refuses (fails closed) and is logged. Resource
 * names and routing keys are at most 255 bytes (AMQP short strings).
 *
 * Durability: every change is handed to the persistence hook as one record (types 20-39 of
 * the meta log, listed below; persist/ writes them in the turn's group commit) and replayed
 * by acc_replay at start; acc_snapshot re-emits the whole state for the meta snapshot.
 * Users from the config file (user.NAME = PASSWORD) are ordinary users marked from_config:
 * each start re-applies the config's password and tags (see acc_user_put).
 *
 * Threading: like qm/, everything runs on the event-loop thread; nothing here blocks except
 * password hashing (SHA-256 / SHA-512 / MD5: microseconds; Argon2id: tens of milliseconds,
 * only for users created with it).
 *
 * Pointers returned by lookups stay valid until the next change (acc_generation moves at
 * every change, so a door may cache a lookup together with the generation it saw).
 */
#ifndef SL_ACCESS_ACCESS_H
#define SL_ACCESS_ACCESS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/map.h"

typedef struct acc_db acc_db;
typedef struct acc_user acc_user;
typedef struct acc_vhost acc_vhost;
typedef struct acc_grant acc_grant;
typedef struct acc_topic_grant acc_topic_grant;
typedef struct acc_re acc_re;

/* RabbitMQ's three permissions. */
typedef enum acc_perm { ACC_CONFIGURE = 0, ACC_WRITE = 1, ACC_READ = 2 } acc_perm;
/* Kinds of named resources. */
typedef enum acc_kind { ACC_QUEUE = 0, ACC_EXCHANGE = 1 } acc_kind;

/* Password hashing algorithms, by their RabbitMQ module names (acc_hash_name). */
typedef enum acc_hash {
    ACC_HASH_NONE = 0,     /* no password: only EXTERNAL (certificate) login ("" hash) */
    ACC_HASH_SHA256 = 1,   /* rabbit_password_hashing_sha256: base64(salt4 + SHA-256(salt4 + pw)) */
    ACC_HASH_SHA512 = 2,   /* rabbit_password_hashing_sha512: the same with SHA-512 */
    ACC_HASH_MD5 = 3,      /* rabbit_password_hashing_md5: legacy, accepted on import only */
    ACC_HASH_ARGON2ID = 4, /* sluice_password_hashing_argon2id: the PHC string of Argon2id */
} acc_hash;

/* Tags the access model gives a meaning to (others are kept and shown, with no effect). */
enum {
    ACC_TAG_ADMINISTRATOR = 1, /* everything */
    ACC_TAG_MONITORING = 2,    /* management, plus reading every vhost, connection, channel */
    ACC_TAG_POLICYMAKER = 4,   /* management, plus policies and parameters */
    ACC_TAG_MANAGEMENT = 8,    /* the management API, for the vhosts it has permissions on */
    ACC_TAG_IMPERSONATOR = 16, /* may publish with another user's user-id property */
    ACC_TAG_LINK = 32,         /* Sluice: may open a node-to-node link, for one node */
};
/* Tags that let a user use the management API at all (RabbitMQ's is_mgmt_user). */
#define ACC_TAGS_MGMT                                                                              \
    (ACC_TAG_ADMINISTRATOR | ACC_TAG_MONITORING | ACC_TAG_POLICYMAKER | ACC_TAG_MANAGEMENT)

/* Limits: -1 = no limit. */
#define ACC_NO_LIMIT (-1)

struct acc_user {
    char *name;
    char *tags;          /* normalized: comma-separated, no spaces ("administrator,monitoring") */
    unsigned tag_bits;   /* ACC_TAG_* among them */
    uint8_t algo;        /* acc_hash */
    uint8_t from_config; /* defined by the config file */
    uint8_t *hash;       /* salt + digest (SHA/MD5), or the Argon2 encoded string */
    size_t hash_len;
    int64_t max_connections, max_channels; /* user limits */
    uint8_t link_bound;                    /* link_node holds the node this login speaks for */
    uint8_t link_node[16];                 /* a link user's sender node id (acc_check_link_login) */
    uint8_t has_nt_hash;                   /* nt_hash holds MD4(UTF-16LE(password)) */
    uint8_t nt_hash[16]; /* for NTLM (msrpc.ntlm_hashes): password-equivalent, see security.md */
    /* internal */
    sl_map *grants; /* vhost -> acc_grant* */
    sl_map *topics; /* "vhost\0exchange" -> acc_topic_grant* */
};

struct acc_vhost {
    char *name;
    char *description;
    char *tags; /* normalized like user tags */
    int64_t max_connections, max_queues;
};

/* A permission entry (read-only outside access/). */
struct acc_grant {
    char *vhost;
    char *src[3]; /* configure, write, read, as given */
    acc_re *re[3];
};

struct acc_topic_grant {
    char *vhost, *exchange;
    char *src_write, *src_read;
    acc_re *write, *read; /* with {username} and {vhost} expanded */
};

/* ------------------------------------------------------------------------------------------
 * Lifecycle and settings
 */
acc_db *acc_new(void);
void acc_free(acc_db *a);
/* Moves at every change (users, vhosts, permissions, limits). */
uint64_t acc_generation(const acc_db *a);
/* The algorithm new passwords are hashed with (config password_hashing_module; default
 * SHA-256, which RabbitMQ imports). */
void acc_set_default_hash(acc_db *a, acc_hash algo);
acc_hash acc_default_hash(const acc_db *a);
/* msrpc.ntlm_hashes: on, a clear-text password set through acc_user_put also keeps its NT hash
 * (MD4 of the UTF-16LE password, what NTLM logins are checked against); off, none is kept. */
void acc_set_keep_nt_hashes(acc_db *a, int on);
/* Forget every stored NT hash (durably): at start when msrpc.ntlm_hashes is off. */
void acc_drop_nt_hashes(acc_db *a);
/* A user's NT hash: 0, -1 no such user, -2 the user has none (its password was imported as a
 * hash, was set while msrpc.ntlm_hashes was off, or it has no password). */
int acc_user_nt_hash(const acc_db *a, const char *name, uint8_t out[16]);
/* RabbitMQ's loopback_users: these users may log in only from 127.0.0.0/8 or ::1. The list
 * starts as {guest}; acc_set_loopback_user(a, NULL, 0) empties it (loopback_users = none). */
void acc_set_loopback_user(acc_db *a, const char *name, int on);
int acc_is_loopback_user(const acc_db *a, const char *name);

/* ------------------------------------------------------------------------------------------
 * Users
 */
typedef struct acc_user_def {
    const char *name;
    /* One of: password (clear text, hashed here with the default algorithm), or
     * password_hash (base64 for the SHA/MD5 algorithms as RabbitMQ exports it, the PHC
     * string for Argon2id; "" = no password) with algo. Both NULL: keep the current
     * password (a new user then has none). */
    const char *password;
    size_t password_len;
    const char *password_hash;
    acc_hash algo;
    const char *tags; /* comma- or space-separated; NULL = keep (new user: none) */
    int from_config;
} acc_user_def;

/* Create or update a user. SL_ERR_PRECONDITION with a reason on an invalid name (empty, over
 * 255 bytes, invalid UTF-8), an undecodable hash, or an unknown algorithm. *created (may be
 * NULL) tells which. */
sl_err acc_user_put(acc_db *a, const acc_user_def *d, int *created, char *err, size_t errlen);
/* The checks acc_user_put makes, without changing anything (a definitions import validates
 * every entry before it applies any). */
sl_err acc_user_def_check(const acc_db *a, const acc_user_def *d, char *err, size_t errlen);
/* Delete a user and every permission it has. SL_ERR_NOT_FOUND when absent. */
sl_err acc_user_delete(acc_db *a, const char *name, char *err, size_t errlen);
const acc_user *acc_user_find(const acc_db *a, const char *name, size_t len);
/* Every user, sorted by name; the caller frees the array. */
const acc_user **acc_users(const acc_db *a, size_t *n);
int acc_user_has_tag(const acc_user *u, unsigned tag_bits);
/* A tag list as stored: split on commas and spaces, empties and duplicates dropped, joined
 * with commas; the caller frees it. */
char *acc_tags_normalize(const char *tags);
/* User limits by RabbitMQ's names "max-connections", "max-channels"; value < 0 clears.
 * SL_ERR_INVALID_PARAMETER for another name. */
sl_err acc_user_set_limit(acc_db *a, const char *user, const char *limit, int64_t value, char *err,
                          size_t errlen);

/* Password login (PLAIN, AMQPLAIN, HTTP basic auth). SL_OK with *out, or
 * SL_ERR_ACCESS_REFUSED with RabbitMQ's reason: "user 'U' - invalid credentials" (unknown
 * user, wrong or blank password, or a user without a password), "user 'U' can only connect
 * via localhost" (a loopback user from elsewhere). The comparison takes the same time
 * whatever matched. */
sl_err acc_login_password(const acc_db *a, const char *name, size_t len, const uint8_t *pass,
                          size_t plen, int from_loopback, const acc_user **out, char *err,
                          size_t errlen);
/* Slow hashes (Argon2id) are checked off the loop (verifier.h): a door that finds
 * acc_login_is_slow true for a login posts the check with a copy of the user's hash, and on
 * its answer calls acc_login_checked, which gives the same results and texts as
 * acc_login_password would have, and refuses when the user was deleted or its password
 * changed in between (the hash is no longer the one checked). */
int acc_login_is_slow(const acc_user *u, size_t plen);
sl_err acc_login_checked(const acc_db *a, const char *name, size_t len, const uint8_t *checked,
                         size_t checked_len, int ok, int from_loopback, const acc_user **out,
                         char *err, size_t errlen);
/* EXTERNAL login: the name comes from a verified client certificate; no password. */
sl_err acc_login_external(const acc_db *a, const char *name, size_t len, int from_loopback,
                          const acc_user **out, char *err, size_t errlen);

/* ------------------------------------------------------------------------------------------
 * Password hashes (password.c)
 */
/* "rabbit_password_hashing_sha256" -> ACC_HASH_SHA256 ...; -1 when unknown. NULL or "" is
 * the default algorithm. */
int acc_hash_parse(const acc_db *a, const char *name);
const char *acc_hash_name(acc_hash algo);
/* A new hash of pw with a fresh random salt, in its stored form; the caller frees *out. */
int acc_hash_password(acc_hash algo, const uint8_t *pw, size_t n, uint8_t **out, size_t *outlen);
/* 1 when pw matches the stored hash (constant time in the digest comparison). */
int acc_verify_password(acc_hash algo, const uint8_t *stored, size_t slen, const uint8_t *pw,
                        size_t n);
/* The stored hash as the management API and definitions show it (base64 for SHA/MD5, the
 * PHC string for Argon2id, "" for none); the caller frees it. */
char *acc_hash_export(const acc_user *u);

/* ------------------------------------------------------------------------------------------
 * Vhost definitions
 */
/* Create or update (description / tags NULL = keep). */
sl_err acc_vhost_put(acc_db *a, const char *name, const char *description, const char *tags,
                     int *created, char *err, size_t errlen);
/* Delete a vhost's definition with every permission, topic permission and limit on it.
 * The door deletes its queues and exchanges (qm) and closes its connections. */
sl_err acc_vhost_delete(acc_db *a, const char *name, char *err, size_t errlen);
const acc_vhost *acc_vhost_find(const acc_db *a, const char *name, size_t len);
/* Every vhost definition, sorted by name; the caller frees the array. */
const acc_vhost **acc_vhosts(const acc_db *a, size_t *n);
/* Vhost limits "max-connections", "max-queues"; value < 0 clears. */
sl_err acc_vhost_set_limit(acc_db *a, const char *vhost, const char *limit, int64_t value,
                           char *err, size_t errlen);

/* ------------------------------------------------------------------------------------------
 * Permissions
 */
/* Set (replace) U's permissions on V. The user and the vhost must exist (SL_ERR_NOT_FOUND);
 * a pattern that does not compile is SL_ERR_PRECONDITION with PCRE2's message and offset. */
sl_err acc_perm_set(acc_db *a, const char *user, const char *vhost, const char *configure,
                    const char *write, const char *read, char *err, size_t errlen);
/* SL_ERR_NOT_FOUND when there is no such entry. */
sl_err acc_perm_clear(acc_db *a, const char *user, const char *vhost, char *err, size_t errlen);
/* Do these n patterns compile? SL_ERR_PRECONDITION naming the first that does not. */
sl_err acc_patterns_check(const char *const *src, int n, char *err, size_t errlen);
const acc_grant *acc_perm_get(const acc_db *a, const char *user, const char *vhost);
/* Visit every permission entry (user or vhost NULL = any), sorted by user then vhost. */
typedef void (*acc_grant_fn)(void *ctx, const acc_user *u, const acc_grant *g);
void acc_perm_each(const acc_db *a, const char *user, const char *vhost, acc_grant_fn fn,
                   void *ctx);

sl_err acc_topic_perm_set(acc_db *a, const char *user, const char *vhost, const char *exchange,
                          const char *write, const char *read, char *err, size_t errlen);
/* exchange NULL clears every topic permission of U on V. */
sl_err acc_topic_perm_clear(acc_db *a, const char *user, const char *vhost, const char *exchange,
                            char *err, size_t errlen);
typedef void (*acc_topic_fn)(void *ctx, const acc_user *u, const acc_topic_grant *g);
void acc_topic_perm_each(const acc_db *a, const char *user, const char *vhost, acc_topic_fn fn,
                         void *ctx);

/* ------------------------------------------------------------------------------------------
 * The checks. All return SL_OK or an error with RabbitMQ's text in err.
 */
/* Resource access: SL_ERR_ACCESS_REFUSED "access to queue 'q' in vhost '/' refused
 * for user 'u'" (an exchange named "" is checked, and named, as "amq.default"). */
sl_err acc_check(const acc_db *a, const char *user, const char *vhost, acc_kind kind,
                 const char *name, size_t len, acc_perm perm, char *err, size_t errlen);
/* Topic access for a topic exchange: SL_ERR_ACCESS_REFUSED "access to topic 'rk' in
 * exchange 'x' in vhost '/' refused for user 'u'". */
sl_err acc_check_topic(const acc_db *a, const char *user, const char *vhost, const char *exchange,
                       const char *routing_key, size_t rk_len, acc_perm perm, char *err,
                       size_t errlen);
/* 1 when U has topic permissions on exchange in V (the publish path skips the check
 * otherwise). */
int acc_has_topic_perms(const acc_db *a, const char *user, const char *vhost, const char *exchange);
/* connection.open: U needs a permission entry on V: SL_ERR_NOT_ALLOWED "access to vhost 'V'
 * refused for user 'U'". */
sl_err acc_check_vhost(const acc_db *a, const char *user, const char *vhost, char *err,
                       size_t errlen);
/* Connection limits at connection.open, given the connections open now to the vhost and of
 * the user (not counting this one): SL_ERR_NOT_ALLOWED "access to vhost 'V' refused for user
 * 'U': connection limit (N) is reached" / "connection refused for user 'U': user connection
 * limit (N) is reached". */
sl_err acc_check_connection_limits(const acc_db *a, const char *user, const char *vhost,
                                   uint64_t vhost_conns, uint64_t user_conns, char *err,
                                   size_t errlen);
/* channel.open: SL_ERR_NOT_ALLOWED "number of channels opened for user 'U' has reached the
 * maximum allowed user limit of (N)". */
sl_err acc_check_channel_limit(const acc_db *a, const char *user, uint64_t user_channels, char *err,
                               size_t errlen);
/* Declaring a new queue: SL_ERR_PRECONDITION "cannot declare queue 'Q': queue limit in vhost
 * 'V' (N) is reached". */
sl_err acc_check_queue_limit(const acc_db *a, const char *vhost, uint64_t queues_now,
                             const char *queue, char *err, size_t errlen);
/* The management API's tag checks (RabbitMQ's is_mgmt_user / is_admin / is_monitor). */
int acc_is_admin(const acc_db *a, const char *user);
int acc_is_monitor(const acc_db *a, const char *user); /* administrator or monitoring */
/* V is one U may log into (a permission entry): what a management user sees. */
int acc_vhost_visible(const acc_db *a, const char *user, const char *vhost);

/* MSMQ operations, each in RabbitMQ's terms (README "Who may do what"):
 *   move (MS-MQDMPR Move Message): receive access on the source (read on its queue) and move
 *     access on the destination (write on its queue); across vhosts each is checked in its
 *     own vhost;
 *   receive, peek and purge through a handle: read on the queue;
 *   a node-to-node link delivering into a local queue: write on the queue, as the link's
 *     user;
 *   management actions (CONNECT, DISCONNECT, TIDY, PAUSE, RESUME, EOD_RESEND): the
 *     administrator tag (SL_ERR_ACCESS_REFUSED "management action 'A' refused for user 'U':
 *     administrator tag required"). */
sl_err acc_check_move(const acc_db *a, const char *user, const char *src_vhost,
                      const char *src_queue, const char *dest_vhost, const char *dest_queue,
                      char *err, size_t errlen);
sl_err acc_check_receive(const acc_db *a, const char *user, const char *vhost, const char *queue,
                         char *err, size_t errlen);
sl_err acc_check_link_write(const acc_db *a, const char *user, const char *vhost, const char *queue,
                            char *err, size_t errlen);
sl_err acc_check_action(const acc_db *a, const char *user, const char *action, char *err,
                        size_t errlen);

/* A connection that claims to be a node-to-node link (client-properties sluice_link) for the
 * node whose id is node: a link session is an identity, not a claim.
 *   - a user with the administrator tag may speak for any node (it may already purge,
 *     delete or re-permission every queue, so binding it would protect nothing);
 *   - a user with the link tag speaks for one node only: the first link session of the
 *     login binds its node id (durably, record ACC_REC_USER_LINK), and a later claim of
 *     another id is refused; the binding goes with the user (delete it to bind anew), and
 *     acc_user_link_bind sets it ahead (config user.NAME.link_node, or the HTTP API);
 *   - anyone else is refused.
 * SL_ERR_ACCESS_REFUSED with the reason in err. */
sl_err acc_check_link_login(acc_db *a, const char *user, const uint8_t node[16], char *err,
                            size_t errlen);
/* Bind (or with node NULL, unbind) a user's link node id. SL_ERR_NOT_FOUND without the
 * user. */
sl_err acc_user_link_bind(acc_db *a, const char *user, const uint8_t *node, char *err,
                          size_t errlen);

/* ------------------------------------------------------------------------------------------
 * Patterns (pattern.c): PCRE2 with bounded cost
 */
#define ACC_PATTERN_MAX 4096 /* bytes of a permission pattern */
acc_re *acc_re_compile(const char *src, size_t len, char *err, size_t errlen);
/* 1 match, 0 no match, -1 the match hit a limit (callers refuse). */
int acc_re_match(const acc_re *re, const char *s, size_t n);
void acc_re_free(acc_re *re);

/* ------------------------------------------------------------------------------------------
 * Durability (records.c). Record types of the meta log owned by this module (PROTOCOL.md
 * gives issue 11 the types 20-39; persist/records.h lists their layouts).
 */
enum {
    ACC_REC_VHOST = 20,        /* name:s16 description:s16 tags:s16 */
    ACC_REC_VHOST_DEL = 21,    /* name:s16 (also kills every queue/exchange of it: recover.c) */
    ACC_REC_USER = 22,         /* name:s16 algo:u8 flags:u8 hash:s16 tags:s16 */
    ACC_REC_USER_DEL = 23,     /* name:s16 */
    ACC_REC_PERM = 24,         /* user:s16 vhost:s16 configure:s16 write:s16 read:s16 */
    ACC_REC_PERM_DEL = 25,     /* user:s16 vhost:s16 */
    ACC_REC_TOPIC = 26,        /* user:s16 vhost:s16 exchange:s16 write:s16 read:s16 */
    ACC_REC_TOPIC_DEL = 27,    /* user:s16 vhost:s16 exchange:s16 */
    ACC_REC_VHOST_LIMITS = 28, /* name:s16 max_connections:i64 max_queues:i64 */
    ACC_REC_USER_LIMITS = 29,  /* name:s16 max_connections:i64 max_channels:i64 */
    ACC_REC_INITIALIZED = 30,  /* (empty) the defaults were seeded once: never again */
    ACC_REC_USER_LINK = 31,    /* name:s16 bound:u8 node:16 (a link user's node; bound 0 frees) */
    ACC_REC_USER_NTHASH = 32,  /* name:s16 len:u8 hash:len (16, or 0: none); follows the USER
                                * record of a password change. A data dir written before it
                                * has none: its users have no NT hash until a password is set */
    ACC_REC_FIRST = 20,
    ACC_REC_LAST = 39,
};
typedef void (*acc_emit_fn)(void *ctx, uint8_t type, const uint8_t *payload, size_t len);
/* Every change from now on is emitted through fn (NULL: none, e.g. unit tests). */
void acc_set_persist(acc_db *a, acc_emit_fn fn, void *ctx);
/* Apply a stored record; 0, or -1 when it is malformed. Emits nothing. */
int acc_replay(acc_db *a, uint8_t type, const uint8_t *payload, size_t len);
/* Emit the whole durable state (config-only state excepted) as records, for a snapshot. */
void acc_snapshot(const acc_db *a, acc_emit_fn fn, void *ctx);
/* 1 once ACC_REC_INITIALIZED was replayed or acc_mark_initialized called. */
int acc_initialized(const acc_db *a);
void acc_mark_initialized(acc_db *a);

#endif
