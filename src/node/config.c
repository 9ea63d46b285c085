/* config.c - defaults, flags and the `key = value` config file (libinih); what each key takes
 * is the settings table's (node/settings.c), what holds together and the cluster's secret
 * file are checked here once every setting is read. */
#include "node/config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ini.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/version.h"
#include "node/settings.h"

void node_config_defaults(node_config *c)
{
    node_settings_defaults(c);
    c->adopt_amqp_fd = c->adopt_amqps_fd = c->adopt_http_fd = c->adopt_https_fd = -1;
}

void node_cluster_conf_defaults(node_cluster_conf *c)
{
    node_settings_cluster_defaults(c);
}

void node_cluster_conf_free(node_cluster_conf *c)
{
    for (unsigned i = 0; i < c->n_endpoints; i++)
        sl_free(c->endpoints[i]);
    sl_free(c->key_prefix);
    sl_free(c->cluster_name);
    sl_free(c->advertise_address);
    sl_free(c->secret_file);
    if (c->secret)
        memset(c->secret, 0, c->secret_len);
    sl_free(c->secret);
    sl_free(c->etcd_username);
    sl_free(c->etcd_password);
    sl_free(c->etcd_cacertfile);
    sl_free(c->etcd_certfile);
    sl_free(c->etcd_keyfile);
    sl_free(c->repl_cacertfile);
    sl_free(c->repl_certfile);
    sl_free(c->repl_keyfile);
    memset(c, 0, sizeof *c);
}

void node_config_free(node_config *c)
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
    for (size_t i = 0; i < c->n_loopback_users; i++)
        sl_free(c->loopback_users[i]);
    sl_free(c->loopback_users);
    sl_free(c->password_hashing_module);
    sl_free(c->tls_bind);
    sl_free(c->msmq_bind);
    sl_free(c->msmq_vhost);
    sl_free(c->msmq_user);
    sl_free(c->msmq_hosts);
    sl_free(c->msmq_allowed_senders);
    sl_free(c->auth_mechanisms);
    sl_free(c->stream_bind);
    sl_free(c->stream_tls_bind);
    sl_free(c->stream_advertised_host);
    struct node_tls_conf *tc[3] = {&c->ssl, &c->mgmt_ssl, &c->link_ssl};
    for (int i = 0; i < 3; i++) {
        sl_free(tc[i]->cacertfile);
        sl_free(tc[i]->certfile);
        sl_free(tc[i]->keyfile);
        sl_free(tc[i]->password);
        sl_free(tc[i]->ciphers);
        sl_free(tc[i]->ciphersuites);
    }
    node_cluster_conf_free(&c->cluster);
    memset(c, 0, sizeof *c);
}

const char *node_cluster_conf_check(const node_cluster_conf *c)
{
    if (!c->enabled)
        return NULL;
    if (c->n_endpoints == 0)
        return "cluster_formation.peer_discovery_backend = etcd needs at least one "
               "cluster_formation.etcd.endpoints.N = HOST:PORT";
    if (!c->etcd_username != !c->etcd_password)
        return "cluster_formation.etcd.username and .password go together";
    if (!c->etcd_certfile != !c->etcd_keyfile)
        return "cluster_formation.etcd.ssl_options.certfile and .keyfile go together";
    if (!c->repl_certfile != !c->repl_keyfile)
        return "cluster.ssl_options.certfile and .keyfile go together";
    if (c->repl_cacertfile && !c->repl_certfile)
        return "cluster.ssl_options.cacertfile needs .certfile and .keyfile (mutual TLS)";
    if (c->repl_certfile && c->repl_verify && !c->repl_cacertfile)
        return "cluster.ssl_options.verify = verify_peer needs .cacertfile (the CA of the "
               "members' certificates)";
    return NULL;
}

/* cluster.secret_file's bytes: 0 with *out (at most SL_CLUSTER_MAX_SECRET bytes, trailing
 * blanks dropped), or -1 with err. */
static int read_secret(const char *path, uint8_t **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(err, errlen, "cluster.secret_file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "cluster.secret_file %s: not a regular file", path);
        close(fd);
        return -1;
    }
    /* As ssh with a private key and Erlang with its cookie: a secret others can read is no
     * secret, and one others can write lets them choose it. */
    if (st.st_mode & 077) {
        snprintf(err, errlen,
                 "cluster.secret_file %s: mode %04o lets group or others read or write it "
                 "(chmod 600 it)",
                 path, (unsigned)(st.st_mode & 07777));
        close(fd);
        return -1;
    }
    if (st.st_size > SL_CLUSTER_MAX_SECRET) {
        snprintf(err, errlen, "cluster.secret_file %s: longer than %d bytes", path,
                 SL_CLUSTER_MAX_SECRET);
        close(fd);
        return -1;
    }
    uint8_t *buf = sl_xmalloc(SL_CLUSTER_MAX_SECRET + 1);
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, SL_CLUSTER_MAX_SECRET + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "cluster.secret_file %s: %s", path, strerror(errno));
            close(fd);
            sl_free(buf);
            return -1;
        }
        if (r == 0 || (n += (size_t)r) > SL_CLUSTER_MAX_SECRET)
            break;
    }
    close(fd);
    if (n > SL_CLUSTER_MAX_SECRET) {
        snprintf(err, errlen, "cluster.secret_file %s: longer than %d bytes", path,
                 SL_CLUSTER_MAX_SECRET);
        sl_free(buf);
        return -1;
    }
    while (n &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    if (!n) {
        snprintf(err, errlen, "cluster.secret_file %s: empty", path);
        sl_free(buf);
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

int node_cluster_conf_load_secret(node_cluster_conf *c, char *err, size_t errlen)
{
    if (!c->enabled)
        return 0;
    if (!c->secret_file) {
        if (c->insecure_no_secret)
            return 0;
        /* A cluster whose replication port takes anyone who can reach it gives away every
         * message and user record and can be made to confirm what no follower holds (issue
         * 43): like RabbitMQ without its Erlang cookie, it does not start. */
        snprintf(err, errlen,
                 "a cluster needs cluster.secret_file: a file holding the cluster's shared "
                 "secret, the same on every node, readable by this user only (e.g. `openssl rand "
                 "-base64 32 > FILE; chmod 600 FILE`); or cluster.insecure_no_secret = true to "
                 "let anyone who can reach the replication port join");
        return -1;
    }
    if (c->secret) {
        memset(c->secret, 0, c->secret_len);
        sl_free(c->secret);
        c->secret = NULL;
    }
    return read_secret(c->secret_file, &c->secret, &c->secret_len, err, errlen);
}

const node_user *node_config_find_user(const node_config *c, const char *name, size_t len)
{
    for (size_t i = 0; i < c->n_users; i++)
        if (strlen(c->users[i].name) == len && !memcmp(c->users[i].name, name, len))
            return &c->users[i];
    return NULL;
}

typedef struct {
    node_config *c;
    char err[300]; /* the first failed setting; ini_parse reports its line */
} load_ctx;

static int on_ini(void *user, const char *section, const char *name, const char *value)
{
    load_ctx *lc = user;
    (void)section;
    const char *err = node_settings_apply(lc->c, name, value);
    if (err) {
        if (!lc->err[0])
            snprintf(lc->err, sizeof lc->err, "%s: %s", name, err);
        return 0;
    }
    return 1;
}

int node_config_load_file(node_config *c, const char *path)
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

void node_config_usage(void)
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
           "  --print-settings   print every config file key: key, type, default, meaning\n"
           "\n"
           "Config file keys: bind, port, mgmt_port, data_dir, node_name, log_level,\n"
           "heartbeat (s), frame_max, channel_max, max_message_size, memory_high_watermark,\n"
           "memory_budget, disk_free_limit, disk_reserve, segment_size (bytes, k/M/G suffixes),\n"
           "sync_pace_us, busy_poll_us, "
           "handshake_timeout (ms), connection_max, mgmt_connection_max,\n"
           "mgmt_unauthenticated_max, mgmt_handshake_timeout (ms), mgmt_session_idle_timeout (s),\n"
           "mgmt_session_max_age (s), mgmt_session_max, loop_cpu_stats,\n"
           "tidy_interval (s), tidy_after_written, reap_interval (ms), user.NAME = PASSWORD, "
           "user.NAME.link_node = "
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
static int adopt_fd_arg(node_config *c, const char *arg)
{
    static const struct {
        const char *door;
        size_t off;
    } doors[] = {
        {"amqp", offsetof(node_config, adopt_amqp_fd)},
        {"amqps", offsetof(node_config, adopt_amqps_fd)},
        {"http", offsetof(node_config, adopt_http_fd)},
        {"https", offsetof(node_config, adopt_https_fd)},
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

int node_config_from_args(node_config *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'},    {"bind", required_argument, 0, 'b'},
        {"port", required_argument, 0, 'p'},      {"mgmt-port", required_argument, 0, 'm'},
        {"data-dir", required_argument, 0, 'd'},  {"node-name", required_argument, 0, 'n'},
        {"log-level", required_argument, 0, 'l'}, {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},         {"listen-fd", required_argument, 0, 'L'},
        {"print-settings", no_argument, 0, 'S'},  {0, 0, 0, 0},
    };
    /* First pass: only --config, so the file is applied before the other flags. */
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'c' && node_config_load_file(c, optarg) < 0)
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
            node_config_usage();
            return 1;
        case 'V':
            printf("sluiced %s\n", SLUICE_VERSION);
            return 1;
        case 'S':
            node_settings_print(stdout);
            return 1;
        default:
            fprintf(stderr, "sluiced: try --help\n");
            return -1;
        }
        const char *err = node_settings_apply(c, key, optarg);
        if (err) {
            fprintf(stderr, "sluiced: %s %s: %s\n", argv[optind - 1], optarg, err);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sluiced: unexpected argument '%s' (try --help)\n", argv[optind]);
        return -1;
    }
    const char *cerr = node_cluster_conf_check(&c->cluster);
    if (cerr) {
        fprintf(stderr, "sluiced: %s\n", cerr);
        return -1;
    }
    char serr[512];
    if (node_cluster_conf_load_secret(&c->cluster, serr, sizeof serr) < 0) {
        fprintf(stderr, "sluiced: %s\n", serr);
        return -1;
    }
    return 0;
}
