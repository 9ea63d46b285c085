/* config.c - defaults, flags and the `key = value` config file (libinih). */
#include "node/config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/version.h"
#include "eod/eod.h"
#include "net/cidr.h"
#include "net/tls.h"

static void add_user(sl_config *c, const char *name, const char *password)
{
    for (size_t i = 0; i < c->n_users; i++) {
        if (!strcmp(c->users[i].name, name)) {
            sl_free(c->users[i].password);
            c->users[i].password = sl_xstrdup(password);
            return;
        }
    }
    c->users = sl_xrealloc(c->users, (c->n_users + 1) * sizeof *c->users);
    sl_user *u = &c->users[c->n_users++];
    u->name = sl_xstrdup(name);
    u->password = sl_xstrdup(password);
    u->tags = sl_xstrdup("");
    u->link_bound = 0;
}

/* 32 hex digits (a node id as the management API shows it) into 16 bytes; -1 otherwise. */
static int parse_node_id(const char *s, uint8_t out[16])
{
    if (strlen(s) != 32)
        return -1;
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (!isxdigit((unsigned char)s[2 * i]) || !isxdigit((unsigned char)s[2 * i + 1]) ||
            sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

static void set_loopback_user(sl_config *c, const char *name, int on)
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

static void clear_loopback_users(sl_config *c)
{
    for (size_t i = 0; i < c->n_loopback_users; i++)
        sl_free(c->loopback_users[i]);
    c->n_loopback_users = 0;
}

void sl_config_defaults(sl_config *c)
{
    memset(c, 0, sizeof *c);
    c->bind = sl_xstrdup("127.0.0.1");
    c->port = 5672;
    c->mgmt_port = 15672;
    c->data_dir = sl_xstrdup("var");
    c->node_name = sl_xstrdup("sluice@localhost");
    c->log_level = SL_LOG_INFO;
    c->heartbeat = 60;
    c->frame_max = 131072;
    c->channel_max = 2047;
    c->max_message_size = 128u * 1024 * 1024;
    c->memory_high_watermark = 4ull * 1024 * 1024 * 1024;
    c->handshake_timeout_ms = 10000;
    c->mgmt_connection_max = 256;
    c->mgmt_unauthenticated_max = 256;
    c->mgmt_handshake_timeout_ms = 5000;
    c->mgmt_session_idle_timeout_s = 30 * 60;
    c->mgmt_session_max_age_s = 8 * 3600;
    c->mgmt_session_max = 1000;
    c->tidy_interval_s = 6 * 3600;
    c->tidy_after_written = 1ull << 30;
    c->disk_free_limit = 1000000000;
    c->disk_reserve = 16u << 20;
    c->memory_budget = 1024ull * 1024 * 1024;
    c->segment_size = 64u << 20;
    c->sync_pace_us = 1000;
    c->handle_idle_timeout_s = 600;
    c->handle_limit = 1000;
    c->handle_remote_timeout_ms = 5000;
    c->link_user = sl_xstrdup("guest");
    c->link_password = sl_xstrdup("guest");
    c->link_heartbeat_s = 10;
    c->link_retry_min_ms = 500;
    c->link_retry_max_ms = 30000;
    c->link_idle_ms = 60000;
    /* MS-MQQB 3.1.3.1: ResendTimeoutsShort/Medium/Long/Final */
    c->eod_resend_ms[0] = 30000;
    c->eod_resend_ms[1] = 300000;
    c->eod_resend_ms[2] = 1800000;
    c->eod_resend_ms[3] = 21600000;
    c->link_batch_msgs = 2048;
    c->link_batch_bytes = 1u << 20;
    c->link_window = 16;
    c->link_seq_window = EOD_SEQ_WINDOW_DEFAULT;
    c->link_bad_queue_grace_ms = 60000;
    c->link_time_to_reach_queue_ms = 345600000; /* MSMQ's default TimeToReachQueue, 4 days */
    c->link_dns_timeout_ms = 10000;
    c->tls_port = -1;
    c->msmq_port = -1;
    c->msmq_max_packet = 4u << 20; /* MS-MQQB's own ceiling (BaseHeader.PacketSize) */
    c->msmq_idle_timeout_ms = 120000;
    c->msmq_handshake_timeout_ms = 10000;
    c->msmq_window = 64;
    /* the whole 32-bit range: a Sluice sender's gaps (node-wide lookup ids) can be any size,
     * and with declared gaps bound to the sequence's address (mqqb_tx_check_from) a smaller
     * window only makes a forger who holds that address send two messages instead of one */
    c->msmq_seq_window = 0xFFFFFFFFull;
    c->msmq_ping_port = -2;
    c->mgmt_tls_port = -1;
    c->msrpc_port = c->msrpc_epmap_port = -1;
    c->msrpc_auth_none = 1;
    c->msrpc_user = sl_xstrdup("guest");
    c->msrpc_max_call = 1u << 20;
    c->msrpc_max_fragments = 256;
    c->msrpc_min_level = 5; /* integrity: a connect-level login leaves calls unprotected */
    c->msrpc_ntlm_hashes = -1;
    c->link_ssl.verify_peer = 1; /* a link checks whom it talks to unless told not to */
    c->ssl_handshake_timeout_ms = 5000;
    c->auth_mechanisms = sl_xstrdup("PLAIN AMQPLAIN");
    c->default_user = sl_xstrdup("guest");
    c->default_pass = sl_xstrdup("guest");
    c->default_vhost = sl_xstrdup("/");
    c->default_user_tags = sl_xstrdup("administrator");
    for (int i = 0; i < 3; i++)
        c->default_perms[i] = sl_xstrdup(".*");
    set_loopback_user(c, "guest", 1);
    cl_conf_defaults(&c->cluster);
    c->adopt_amqp_fd = c->adopt_amqps_fd = c->adopt_http_fd = c->adopt_https_fd = -1;
}

void sl_config_free(sl_config *c)
{
    sl_free(c->bind);
    sl_free(c->data_dir);
    sl_free(c->node_name);
    for (size_t i = 0; i < c->n_users; i++) {
        sl_free(c->users[i].name);
        sl_free(c->users[i].password);
        sl_free(c->users[i].tags);
    }
    sl_free(c->users);
    sl_free(c->link_user);
    sl_free(c->msrpc_user);
    sl_free(c->link_password);
    sl_free(c->default_user);
    sl_free(c->default_pass);
    sl_free(c->default_vhost);
    sl_free(c->default_user_tags);
    for (int i = 0; i < 3; i++)
        sl_free(c->default_perms[i]);
    clear_loopback_users(c);
    sl_free(c->loopback_users);
    sl_free(c->password_hashing_module);
    sl_free(c->tls_bind);
    sl_free(c->msmq_bind);
    sl_free(c->msmq_vhost);
    sl_free(c->msmq_user);
    sl_free(c->msmq_hosts);
    sl_free(c->msmq_allowed_senders);
    sl_free(c->auth_mechanisms);
    struct sl_tls_conf *tc[3] = {&c->ssl, &c->mgmt_ssl, &c->link_ssl};
    for (int i = 0; i < 3; i++) {
        sl_free(tc[i]->cacertfile);
        sl_free(tc[i]->certfile);
        sl_free(tc[i]->keyfile);
        sl_free(tc[i]->password);
        sl_free(tc[i]->ciphers);
        sl_free(tc[i]->ciphersuites);
    }
    cl_conf_free(&c->cluster);
    memset(c, 0, sizeof *c);
}

const sl_user *sl_config_find_user(const sl_config *c, const char *name, size_t len)
{
    for (size_t i = 0; i < c->n_users; i++)
        if (strlen(c->users[i].name) == len && !memcmp(c->users[i].name, name, len))
            return &c->users[i];
    return NULL;
}

/* Parse an unsigned number with an optional k/M/G suffix (powers of 1024). */
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

static void set_str(char **dst, const char *v)
{
    sl_free(*dst);
    *dst = sl_xstrdup(v);
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

/* ssl_options.* (prefix stripped): shared by AMQPS and (management.ssl.*) HTTPS. */
static const char *apply_tls(struct sl_tls_conf *t, const char *key, const char *value)
{
    int on;
    if (!strcmp(key, "cacertfile")) {
        set_str(&t->cacertfile, value);
    } else if (!strcmp(key, "certfile")) {
        set_str(&t->certfile, value);
    } else if (!strcmp(key, "keyfile")) {
        set_str(&t->keyfile, value);
    } else if (!strcmp(key, "password")) {
        set_str(&t->password, value);
    } else if (!strcmp(key, "verify")) {
        if (strcmp(value, "verify_peer") && strcmp(value, "verify_none"))
            return "verify must be verify_peer or verify_none";
        t->verify_peer = !strcmp(value, "verify_peer");
    } else if (!strcmp(key, "fail_if_no_peer_cert")) {
        if ((on = parse_bool(value)) < 0)
            return "fail_if_no_peer_cert must be true or false";
        t->fail_if_no_peer_cert = on;
    } else if (!strcmp(key, "honor_cipher_order") || !strcmp(key, "honor_ecc_order")) {
        if ((on = parse_bool(value)) < 0)
            return "must be true or false";
        t->honor_cipher_order |= on;
    } else if (!strcmp(key, "depth")) {
        uint64_t n;
        if (parse_u64(value, 100, &n))
            return "depth must be 0..100";
        t->depth = (int)n;
    } else if (!strncmp(key, "versions.", 9)) {
        unsigned bit = sl_tls_version_bit(value);
        if (!bit)
            return "versions.N must be tlsv1.2 or tlsv1.3 (or tlsv1.1, tlsv1)";
        t->versions |= bit;
    } else if (!strncmp(key, "ciphers.", 8)) {
        if (!strncmp(value, "TLS_", 4))
            list_add(&t->ciphersuites, value, ':');
        else
            list_add(&t->ciphers, value, ':');
    } else {
        return "unknown setting";
    }
    return NULL;
}

/* Apply one setting; returns NULL on success or an error description. */
static const char *apply(sl_config *c, const char *key, const char *value)
{
    uint64_t n;
    const char *cerr;
    if (cl_conf_apply(&c->cluster, key, value, &cerr))
        return cerr;
    if (!strcmp(key, "bind") || !strcmp(key, "listeners.tcp.default.ip")) {
        set_str(&c->bind, value);
    } else if (!strcmp(key, "port") || !strcmp(key, "listeners.tcp.default")) {
        if (parse_u64(value, 65535, &n))
            return "port must be 0..65535";
        c->port = (int)n;
    } else if (!strcmp(key, "mgmt_port") || !strcmp(key, "management.tcp.port")) {
        if (!strcmp(value, "off") || !strcmp(value, "-1")) {
            c->mgmt_port = -1;
        } else {
            if (parse_u64(value, 65535, &n))
                return "mgmt_port must be 0..65535 or off";
            c->mgmt_port = (int)n;
        }
    } else if (!strcmp(key, "data_dir") || !strcmp(key, "data-dir")) {
        set_str(&c->data_dir, value);
    } else if (!strcmp(key, "node_name") || !strcmp(key, "node-name")) {
        set_str(&c->node_name, value);
    } else if (!strcmp(key, "log_level") || !strcmp(key, "log-level") ||
               !strcmp(key, "log.console.level")) {
        int l = sl_log_level_parse(value);
        if (l < 0)
            return "log level must be debug, info, warning or error";
        c->log_level = l;
    } else if (!strcmp(key, "heartbeat")) {
        if (parse_u64(value, 65535, &n))
            return "heartbeat must be 0..65535 seconds";
        c->heartbeat = (uint16_t)n;
    } else if (!strcmp(key, "frame_max")) {
        if (parse_u64(value, UINT32_MAX, &n) || (n != 0 && n < 4096))
            return "frame_max must be 0 or at least 4096";
        c->frame_max = (uint32_t)n;
    } else if (!strcmp(key, "channel_max")) {
        if (parse_u64(value, 65535, &n))
            return "channel_max must be 0..65535";
        c->channel_max = (uint16_t)n;
    } else if (!strcmp(key, "max_message_size")) {
        /* RabbitMQ's cap too; and a message record of the store holds at most 1 GiB. */
        if (parse_u64(value, SL_MAX_MESSAGE_SIZE_CAP, &n) || n == 0)
            return "max_message_size must be a size from 1 byte to 512M (536870912 bytes: "
                   "RabbitMQ's limit, and what a store record holds with room to spare)";
        c->max_message_size = n;
    } else if (!strcmp(key, "memory_high_watermark") ||
               !strcmp(key, "vm_memory_high_watermark.absolute")) {
        if (parse_u64(value, UINT64_MAX, &n))
            return "memory_high_watermark must be a size in bytes (k, M, G suffixes)";
        c->memory_high_watermark = n;
    } else if (!strcmp(key, "sync_pace_us")) {
        if (parse_u64(value, 1000000, &n))
            return "sync_pace_us must be a number of microseconds from 0 to 1000000";
        c->sync_pace_us = (uint32_t)n;
    } else if (!strcmp(key, "segment_size")) {
        if (parse_u64(value, 1ull << 30, &n) || n < 4096)
            return "segment_size must be a size from 4k to 1G";
        c->segment_size = n;
    } else if (!strcmp(key, "memory_budget")) {
        if (parse_u64(value, UINT64_MAX, &n))
            return "memory_budget must be a size in bytes (k, M, G suffixes; 0 = never page)";
        c->memory_budget = n;
    } else if (!strcmp(key, "disk_free_limit") || !strcmp(key, "disk_free_limit.absolute")) {
        if (parse_u64(value, UINT64_MAX, &n))
            return "disk_free_limit must be a size in bytes (k, M, G suffixes)";
        c->disk_free_limit = n;
    } else if (!strcmp(key, "disk_reserve")) {
        if (parse_u64(value, UINT64_MAX, &n))
            return "disk_reserve must be a size in bytes (k, M, G suffixes; 0 = none)";
        c->disk_reserve = n;
    } else if (!strcmp(key, "tidy_interval")) {
        if (parse_u64(value, UINT32_MAX, &n))
            return "tidy_interval must be seconds (0 = only on demand)";
        c->tidy_interval_s = n;
    } else if (!strcmp(key, "tidy_after_written")) {
        if (parse_u64(value, UINT64_MAX, &n))
            return "tidy_after_written must be a size in bytes (k, M, G suffixes; 0 = off)";
        c->tidy_after_written = n;
    } else if (!strcmp(key, "connection_max")) {
        if (!strcmp(value, "infinity"))
            n = 0;
        else if (parse_u64(value, UINT32_MAX, &n))
            return "connection_max must be a number of connections (0 or infinity = no cap)";
        c->connection_max = (uint32_t)n;
    } else if (!strcmp(key, "loop_cpu_stats")) {
        if (!strcmp(value, "true") || !strcmp(value, "1"))
            c->loop_cpu_stats = 1;
        else if (!strcmp(value, "false") || !strcmp(value, "0"))
            c->loop_cpu_stats = 0;
        else
            return "loop_cpu_stats must be true or false";
    } else if (!strcmp(key, "mgmt_connection_max")) {
        if (parse_u64(value, 1000000, &n) || n == 0)
            return "mgmt_connection_max must be a positive number of connections";
        c->mgmt_connection_max = (uint32_t)n;
    } else if (!strcmp(key, "mgmt_unauthenticated_max")) {
        if (parse_u64(value, 1000000, &n) || n == 0)
            return "mgmt_unauthenticated_max must be a positive number of connections";
        c->mgmt_unauthenticated_max = (uint32_t)n;
    } else if (!strcmp(key, "mgmt_handshake_timeout")) {
        if (parse_u64(value, 600000, &n) || n < 10)
            return "mgmt_handshake_timeout must be milliseconds from 10 to 600000";
        c->mgmt_handshake_timeout_ms = (uint32_t)n;
    } else if (!strcmp(key, "mgmt_session_idle_timeout")) {
        if (parse_u64(value, 7 * 86400, &n) || n == 0)
            return "mgmt_session_idle_timeout must be seconds from 1 to 604800";
        c->mgmt_session_idle_timeout_s = (uint32_t)n;
    } else if (!strcmp(key, "mgmt_session_max_age")) {
        if (parse_u64(value, 30 * 86400, &n) || n == 0)
            return "mgmt_session_max_age must be seconds from 1 to 2592000";
        c->mgmt_session_max_age_s = (uint32_t)n;
    } else if (!strcmp(key, "mgmt_session_max")) {
        if (parse_u64(value, 1000000, &n) || n == 0)
            return "mgmt_session_max must be a positive number of sessions";
        c->mgmt_session_max = (uint32_t)n;
    } else if (!strcmp(key, "handle_idle_timeout")) {
        if (parse_u64(value, UINT32_MAX, &n) || n == 0)
            return "handle_idle_timeout must be seconds (at least 1)";
        c->handle_idle_timeout_s = n;
    } else if (!strcmp(key, "handle_remote_timeout")) {
        if (parse_u64(value, 600000, &n) || n < 10)
            return "handle_remote_timeout must be milliseconds from 10 to 600000";
        c->handle_remote_timeout_ms = (uint32_t)n;
    } else if (!strcmp(key, "handle_limit")) {
        if (parse_u64(value, 1000000, &n) || n == 0)
            return "handle_limit must be a count from 1 to 1000000";
        c->handle_limit = (uint32_t)n;
    } else if (!strcmp(key, "handshake_timeout")) {
        if (parse_u64(value, UINT32_MAX, &n))
            return "handshake_timeout must be milliseconds";
        c->handshake_timeout_ms = (uint32_t)n;
    } else if (!strcmp(key, "listeners.msrpc") || !strcmp(key, "listeners.msrpc_epmap")) {
        int epm = key[15] == '_';
        int *port = epm ? &c->msrpc_epmap_port : &c->msrpc_port;
        if (!strcmp(value, "off") || !strcmp(value, "-1"))
            *port = -1;
        else if (epm && (!strcmp(value, "on") || !strcmp(value, "true")))
            *port = 135; /* the endpoint mapper's well-known port */
        else if (parse_u64(value, 65535, &n))
            return epm ? "listeners.msrpc_epmap must be 0..65535, on (135) or off"
                       : "listeners.msrpc must be 0..65535 or off";
        else
            *port = (int)n;
    } else if (!strcmp(key, "msrpc.auth")) {
        if (!strcmp(value, "none"))
            c->msrpc_auth_none = 1;
        else if (!strcmp(value, "ntlm"))
            c->msrpc_auth_none = 0;
        else
            return "msrpc.auth must be ntlm or none (loopback callers only)";
    } else if (!strcmp(key, "msrpc.min_auth_level")) {
        if (!strcmp(value, "connect"))
            c->msrpc_min_level = 2;
        else if (!strcmp(value, "integrity"))
            c->msrpc_min_level = 5;
        else if (!strcmp(value, "privacy"))
            c->msrpc_min_level = 6;
        else
            return "msrpc.min_auth_level must be connect, integrity or privacy";
    } else if (!strcmp(key, "msrpc.ntlm_hashes")) {
        int on = !strcmp(value, "on") ? 1 : !strcmp(value, "off") ? 0 : parse_bool(value);
        if (on < 0)
            return "msrpc.ntlm_hashes must be on or off";
        c->msrpc_ntlm_hashes = on;
    } else if (!strcmp(key, "msrpc.user")) {
        set_str(&c->msrpc_user, value);
    } else if (!strcmp(key, "msrpc.max_call_bytes")) {
        if (parse_u64(value, 64u << 20, &n) || n < 4096)
            return "msrpc.max_call_bytes must be 4096..67108864";
        c->msrpc_max_call = n;
    } else if (!strcmp(key, "msrpc.max_fragments")) {
        if (parse_u64(value, 65536, &n) || n < 1)
            return "msrpc.max_fragments must be 1..65536";
        c->msrpc_max_fragments = (uint32_t)n;
    } else if (!strcmp(key, "link_user")) {
        set_str(&c->link_user, value);
    } else if (!strcmp(key, "link_password")) {
        set_str(&c->link_password, value);
    } else if (!strcmp(key, "link_heartbeat")) {
        if (parse_u64(value, 65535, &n))
            return "link_heartbeat must be 0..65535 seconds";
        c->link_heartbeat_s = (uint32_t)n;
    } else if (!strcmp(key, "link_retry_min_ms") || !strcmp(key, "link_retry_max_ms") ||
               !strcmp(key, "link_idle_ms")) {
        if (parse_u64(value, UINT32_MAX, &n) || n == 0)
            return "must be a positive number of milliseconds";
        if (!strcmp(key, "link_idle_ms"))
            c->link_idle_ms = (uint32_t)n;
        else if (!strcmp(key, "link_retry_min_ms"))
            c->link_retry_min_ms = (uint32_t)n;
        else
            c->link_retry_max_ms = (uint32_t)n;
    } else if (!strncmp(key, "eod_resend_", 11)) {
        static const char *const names[] = {"eod_resend_short_ms", "eod_resend_medium_ms",
                                            "eod_resend_long_ms", "eod_resend_final_ms"};
        int i = 0;
        while (i < 4 && strcmp(key, names[i]))
            i++;
        if (i == 4)
            return "unknown setting";
        if (parse_u64(value, UINT32_MAX, &n) || n == 0)
            return "must be a positive number of milliseconds";
        c->eod_resend_ms[i] = (uint32_t)n;
    } else if (!strcmp(key, "link_batch_msgs") || !strcmp(key, "link_window")) {
        if (parse_u64(value, 1u << 20, &n) || n == 0)
            return "must be 1..1048576";
        if (!strcmp(key, "link_window"))
            c->link_window = (uint32_t)n;
        else
            c->link_batch_msgs = (uint32_t)n;
    } else if (!strcmp(key, "link_seq_window")) {
        if (parse_u64(value, UINT64_MAX, &n) || n == 0)
            return "link_seq_window must be a positive number";
        c->link_seq_window = n;
    } else if (!strcmp(key, "link_bad_queue_grace_ms")) {
        if (parse_u64(value, UINT32_MAX, &n))
            return "link_bad_queue_grace_ms must be milliseconds (0: dead-letter at once)";
        c->link_bad_queue_grace_ms = (uint32_t)n;
    } else if (!strcmp(key, "link_time_to_reach_queue_ms")) {
        if (parse_u64(value, 315360000000ull, &n))
            return "link_time_to_reach_queue_ms must be milliseconds up to 10 years (0: never)";
        c->link_time_to_reach_queue_ms = n;
    } else if (!strcmp(key, "link_dns_timeout_ms")) {
        if (parse_u64(value, 3600000, &n) || n < 10)
            return "link_dns_timeout_ms must be milliseconds from 10 to 3600000";
        c->link_dns_timeout_ms = (uint32_t)n;
    } else if (!strcmp(key, "link_batch_bytes")) {
        if (parse_u64(value, 64u << 20, &n) || n < 1024)
            return "link_batch_bytes must be a size from 1k to 64M";
        c->link_batch_bytes = (uint32_t)n;
    } else if (!strcmp(key, "default_user")) {
        set_str(&c->default_user, value);
    } else if (!strcmp(key, "default_pass")) {
        set_str(&c->default_pass, value);
    } else if (!strcmp(key, "default_vhost")) {
        set_str(&c->default_vhost, value);
    } else if (!strncmp(key, "default_user_tags.", 18) && key[18]) {
        int on = parse_bool(value);
        if (on < 0)
            return "default_user_tags.TAG must be true or false";
        set_tag(&c->default_user_tags, key + 18, on);
    } else if (!strcmp(key, "default_permissions.configure")) {
        set_str(&c->default_perms[0], value);
    } else if (!strcmp(key, "default_permissions.write")) {
        set_str(&c->default_perms[1], value);
    } else if (!strcmp(key, "default_permissions.read")) {
        set_str(&c->default_perms[2], value);
    } else if (!strcmp(key, "loopback_users")) {
        if (strcmp(value, "none"))
            return "loopback_users must be none (or use loopback_users.NAME = true)";
        clear_loopback_users(c);
    } else if (!strncmp(key, "loopback_users.", 15) && key[15]) {
        int on = parse_bool(value);
        if (on < 0)
            return "loopback_users.NAME must be true or false";
        set_loopback_user(c, key + 15, on);
    } else if (!strcmp(key, "listeners.ssl.default") || !strcmp(key, "tls_port")) {
        const char *colon = strrchr(value, ':');
        if (colon) {
            char ip[128];
            snprintf(ip, sizeof ip, "%.*s", (int)(colon - value), value);
            set_str(&c->tls_bind, ip);
            value = colon + 1;
        }
        if (parse_u64(value, 65535, &n))
            return "listeners.ssl.default must be [IP:]PORT (0 = a free port)";
        c->tls_port = (int)n;
    } else if (!strcmp(key, "listeners.msmq")) {
        const char *colon = strrchr(value, ':');
        if (colon) {
            char ip[128];
            snprintf(ip, sizeof ip, "%.*s", (int)(colon - value), value);
            set_str(&c->msmq_bind, ip);
            value = colon + 1;
        }
        if (!strcmp(value, "default") || parse_bool(value) == 1)
            n = 1801;
        else if (parse_u64(value, 65535, &n))
            return "listeners.msmq must be [IP:]PORT (0 = a free port, default = 1801)";
        c->msmq_port = (int)n;
    } else if (!strcmp(key, "msmq.ping_port")) {
        if (!strcmp(value, "off"))
            c->msmq_ping_port = -1;
        else if (parse_u64(value, 65535, &n))
            return "msmq.ping_port must be a port (0 = a free one) or off";
        else
            c->msmq_ping_port = (int)n;
    } else if (!strcmp(key, "msmq.vhost")) {
        set_str(&c->msmq_vhost, value);
    } else if (!strncmp(key, "msmq.hosts.", 11)) {
        if (!*value || strchr(value, ' ') || strchr(value, '\\'))
            return "msmq.hosts.N must be HOST[:PORT] (a Windows queue manager)";
        list_add(&c->msmq_hosts, value, ' ');
    } else if (!strcmp(key, "msmq.user")) {
        set_str(&c->msmq_user, value);
    } else if (!strcmp(key, "msmq.max_packet_size")) {
        if (parse_u64(value, 64u << 20, &n) || n < 1024)
            return "msmq.max_packet_size must be 1K..64M";
        c->msmq_max_packet = (uint32_t)n;
    } else if (!strcmp(key, "msmq.idle_timeout")) {
        if (parse_u64(value, 86400000, &n) || n < 100)
            return "msmq.idle_timeout must be milliseconds (at least 100)";
        c->msmq_idle_timeout_ms = (uint32_t)n;
    } else if (!strcmp(key, "msmq.handshake_timeout")) {
        if (parse_u64(value, 86400000, &n) || n < 100)
            return "msmq.handshake_timeout must be milliseconds (at least 100)";
        c->msmq_handshake_timeout_ms = (uint32_t)n;
    } else if (!strcmp(key, "msmq.seq_window")) {
        if (parse_u64(value, UINT32_MAX, &n) || n == 0)
            return "msmq.seq_window must be 1..4294967295";
        c->msmq_seq_window = n;
    } else if (!strcmp(key, "msmq.allowed_senders")) {
        sl_cidr_list l;
        char why[200];
        int bad = sl_cidr_list_parse(value, &l, why, sizeof why);
        sl_cidr_list_free(&l);
        if (bad)
            return "msmq.allowed_senders must be a list of ADDRESS[/BITS] (IPv4 /0..32, IPv6 "
                   "/0..128), or any";
        set_str(&c->msmq_allowed_senders, value);
    } else if (!strcmp(key, "msmq.window")) {
        if (parse_u64(value, 65535, &n) || n < 1)
            return "msmq.window must be 1..65535";
        c->msmq_window = (uint16_t)n;
    } else if (!strncmp(key, "ssl_options.", 12)) {
        return apply_tls(&c->ssl, key + 12, value);
    } else if (!strcmp(key, "management.ssl.port")) {
        if (parse_u64(value, 65535, &n))
            return "management.ssl.port must be 0..65535";
        c->mgmt_tls_port = (int)n;
    } else if (!strncmp(key, "management.ssl.", 15)) {
        return apply_tls(&c->mgmt_ssl, key + 15, value);
    } else if (!strcmp(key, "link_ssl")) {
        int on = parse_bool(value);
        if (on < 0)
            return "link_ssl must be true or false";
        c->link_tls = on;
    } else if (!strncmp(key, "link_ssl_options.", 17)) {
        return apply_tls(&c->link_ssl, key + 17, value);
    } else if (!strcmp(key, "ssl_handshake_timeout")) {
        if (parse_u64(value, UINT32_MAX, &n) || n == 0)
            return "ssl_handshake_timeout must be milliseconds";
        c->ssl_handshake_timeout_ms = (uint32_t)n;
    } else if (!strncmp(key, "auth_mechanisms.", 16)) {
        if (strcmp(value, "PLAIN") && strcmp(value, "AMQPLAIN") && strcmp(value, "EXTERNAL"))
            return "auth_mechanisms.N must be PLAIN, AMQPLAIN or EXTERNAL";
        /* The first auth_mechanisms.N line replaces the default list. */
        if (!c->auth_mechanisms_set) {
            sl_free(c->auth_mechanisms);
            c->auth_mechanisms = NULL;
            c->auth_mechanisms_set = 1;
        }
        list_add(&c->auth_mechanisms, value, ' ');
    } else if (!strcmp(key, "ssl_cert_login_from")) {
        if (strcmp(value, "common_name") && strcmp(value, "distinguished_name"))
            return "ssl_cert_login_from must be common_name or distinguished_name";
        c->ssl_cert_login_cn = !strcmp(value, "common_name");
    } else if (!strcmp(key, "password_change_closes_connections")) {
        int on = parse_bool(value);
        if (on < 0)
            return "password_change_closes_connections must be true or false";
        c->password_change_closes_connections = on;
    } else if (!strcmp(key, "password_hashing_module")) {
        if (strcmp(value, "rabbit_password_hashing_sha256") &&
            strcmp(value, "rabbit_password_hashing_sha512") &&
            strcmp(value, "sluice_password_hashing_argon2id"))
            return "password_hashing_module must be rabbit_password_hashing_sha256, "
                   "rabbit_password_hashing_sha512 or sluice_password_hashing_argon2id";
        set_str(&c->password_hashing_module, value);
    } else if (!strncmp(key, "user.", 5) && key[5]) {
        const char *name = key + 5;
        size_t len = strlen(name);
        if (len > 5 && !strcmp(name + len - 5, ".tags")) {
            char uname[256];
            if (len - 5 >= sizeof uname)
                return "user name too long";
            memcpy(uname, name, len - 5);
            uname[len - 5] = 0;
            sl_user *u = (sl_user *)sl_config_find_user(c, uname, len - 5);
            if (!u)
                return "user.NAME.tags given before user.NAME";
            set_str(&u->tags, value);
        } else if (len > 10 && !strcmp(name + len - 10, ".link_node")) {
            sl_user *u = (sl_user *)sl_config_find_user(c, name, len - 10);
            if (!u)
                return "user.NAME.link_node given before user.NAME";
            if (parse_node_id(value, u->link_node) < 0)
                return "user.NAME.link_node must be a node id: 32 hex digits";
            u->link_bound = 1;
        } else {
            add_user(c, name, value);
        }
    } else {
        return "unknown setting";
    }
    return NULL;
}

typedef struct {
    sl_config *c;
    char err[300]; /* the first failed setting; ini_parse reports its line */
} load_ctx;

static int on_ini(void *user, const char *section, const char *name, const char *value)
{
    load_ctx *lc = user;
    (void)section;
    const char *err = apply(lc->c, name, value);
    if (err) {
        if (!lc->err[0])
            snprintf(lc->err, sizeof lc->err, "%s: %s", name, err);
        return 0;
    }
    return 1;
}

int sl_config_load_file(sl_config *c, const char *path)
{
    load_ctx lc = {.c = c};
    int rc = ini_parse(path, on_ini, &lc);
    if (rc == -1) {
        fprintf(stderr, "sluiced: cannot open config file %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (rc != 0) {
        fprintf(stderr, "sluiced: %s:%d: %s\n", path, rc,
                lc.err[0] ? lc.err : "syntax error (expected key = value)");
        return -1;
    }
    return 0;
}

void sl_config_usage(void)
{
    printf("usage: sluiced [options]\n"
           "\n"
           "Sluice message queue manager: AMQP 0-9-1 on an MSMQ-style queue model.\n"
           "\n"
           "  --config FILE      read `key = value` settings from FILE (flags override it)\n"
           "  --bind ADDR        address to listen on (default 127.0.0.1)\n"
           "  --port N           AMQP port (default 5672; 0 = pick a free port and log it)\n"
           "  --mgmt-port N      HTTP management API port (default 15672; 0 = free port;\n"
           "                     off = no management API)\n"
           "  --data-dir DIR     data directory (default ./var)\n"
           "  --node-name NAME   node name (default sluice@localhost)\n"
           "  --log-level LEVEL  debug, info, warning or error (default info)\n"
           "  --listen-fd DOOR=FD  start the amqp, amqps, http or https listener on the\n"
           "                     inherited listening socket FD instead of binding one\n"
           "  --help             this text\n"
           "  --version          print the version\n"
           "\n"
           "Config file keys: bind, port, mgmt_port, data_dir, node_name, log_level,\n"
           "heartbeat (s), frame_max, channel_max, max_message_size, memory_high_watermark,\n"
           "memory_budget, disk_free_limit, disk_reserve, segment_size (bytes, k/M/G suffixes),\n"
           "sync_pace_us, "
           "handshake_timeout (ms), connection_max, mgmt_connection_max,\n"
           "mgmt_unauthenticated_max, mgmt_handshake_timeout (ms), mgmt_session_idle_timeout (s),\n"
           "mgmt_session_max_age (s), mgmt_session_max, loop_cpu_stats,\n"
           "tidy_interval (s), tidy_after_written, user.NAME = PASSWORD, user.NAME.link_node = "
           "NODE_ID, user.NAME.tags = "
           "administrator,\n"
           "listeners.msrpc, listeners.msrpc_epmap, msrpc.auth (ntlm|none), msrpc.user,\n"
           "msrpc.min_auth_level, msrpc.ntlm_hashes, msrpc.max_call_bytes, msrpc.max_fragments,\n"
           "link_user, link_password, link_heartbeat (s), link_retry_min_ms,\n"
           "link_retry_max_ms, link_idle_ms, eod_resend_short_ms, eod_resend_medium_ms,\n"
           "eod_resend_long_ms, eod_resend_final_ms, link_batch_msgs, link_batch_bytes,\n"
           "link_window, link_seq_window, link_bad_queue_grace_ms, link_time_to_reach_queue_ms,\n"
           "link_dns_timeout_ms (node-to-node links; see README),\n"
           "handle_idle_timeout (s), handle_limit (MSMQ handles over HTTP),\n"
           "default_user, default_pass, default_vhost, default_user_tags.TAG,\n"
           "default_permissions.configure|write|read, loopback_users.NAME, loopback_users = none,\n"
           "password_hashing_module, password_change_closes_connections,\n"
           "listeners.ssl.default, ssl_options.*, management.ssl.*, ssl_handshake_timeout,\n"
           "auth_mechanisms.N, ssl_cert_login_from, link_ssl, link_ssl_options.*,\n"
           "cluster_formation.peer_discovery_backend = etcd, "
           "cluster_formation.etcd.endpoints.N,\n"
           "cluster_formation.etcd.key_prefix, cluster_formation.etcd.cluster_name,\n"
           "cluster.replication_port, cluster.advertise_address, cluster.lease_ttl (s),\n"
           "cluster.min_insync_replicas, cluster.proxy_max_connections, cluster.secret_file,\n"
           "cluster.insecure_no_secret, cluster_formation.etcd.username|password|scheme,\n"
           "cluster_formation.etcd.ssl_options.* (a cluster on etcd; see docs/cluster.md).\n");
}

/* --listen-fd DOOR=FD: start that listener on an inherited socket that is already bound and
 * listening (listen.h sl_listen_adopt), e.g. a cluster node's own sockets across a re-exec or
 * a supervisor's. 0 or -1. */
static int adopt_fd_arg(sl_config *c, const char *arg)
{
    static const struct {
        const char *door;
        size_t off;
    } doors[] = {
        {"amqp", offsetof(sl_config, adopt_amqp_fd)},
        {"amqps", offsetof(sl_config, adopt_amqps_fd)},
        {"http", offsetof(sl_config, adopt_http_fd)},
        {"https", offsetof(sl_config, adopt_https_fd)},
    };
    const char *eq = strchr(arg, '=');
    if (!eq)
        return -1;
    char *end;
    long fd = strtol(eq + 1, &end, 10);
    if (*end || eq[1] == 0 || fd < 0 || fd > 1 << 20)
        return -1;
    for (size_t i = 0; i < sizeof doors / sizeof doors[0]; i++)
        if (strlen(doors[i].door) == (size_t)(eq - arg) &&
            !memcmp(arg, doors[i].door, (size_t)(eq - arg))) {
            *(int *)((char *)c + doors[i].off) = (int)fd;
            return 0;
        }
    return -1;
}

int sl_config_from_args(sl_config *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'},
        {"bind", required_argument, 0, 'b'},
        {"port", required_argument, 0, 'p'},
        {"mgmt-port", required_argument, 0, 'm'},
        {"data-dir", required_argument, 0, 'd'},
        {"node-name", required_argument, 0, 'n'},
        {"log-level", required_argument, 0, 'l'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {"listen-fd", required_argument, 0, 'L'},
        {0, 0, 0, 0},
    };
    /* First pass: only --config, so the file is applied before the other flags. */
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'c' && sl_config_load_file(c, optarg) < 0)
            return -1;
    }
    optind = 1;
    opterr = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *key = NULL;
        switch (o) {
        case 'c':
            continue;
        case 'b':
            key = "bind";
            break;
        case 'p':
            key = "port";
            break;
        case 'm':
            key = "mgmt_port";
            break;
        case 'd':
            key = "data_dir";
            break;
        case 'n':
            key = "node_name";
            break;
        case 'l':
            key = "log_level";
            break;
        case 'L':
            if (adopt_fd_arg(c, optarg) < 0) {
                fprintf(stderr,
                        "sluiced: --listen-fd %s: expected amqp|amqps|http|https=FD, FD a "
                        "descriptor\n",
                        optarg);
                return -1;
            }
            continue;
        case 'h':
            sl_config_usage();
            return 1;
        case 'V':
            printf("sluiced %s\n", SLUICE_VERSION);
            return 1;
        default:
            fprintf(stderr, "sluiced: try --help\n");
            return -1;
        }
        const char *err = apply(c, key, optarg);
        if (err) {
            fprintf(stderr, "sluiced: %s %s: %s\n", argv[optind - 1], optarg, err);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sluiced: unexpected argument '%s' (try --help)\n", argv[optind]);
        return -1;
    }
    const char *cerr = cl_conf_check(&c->cluster);
    if (cerr) {
        fprintf(stderr, "sluiced: %s\n", cerr);
        return -1;
    }
    char serr[512];
    if (cl_conf_load_secret(&c->cluster, serr, sizeof serr) < 0) {
        fprintf(stderr, "sluiced: %s\n", serr);
        return -1;
    }
    return 0;
}
