/* conf.c - parsing and checking of the cluster settings (the keys are listed in conf.h). */
#include "cluster/conf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/auth.h"
#include "core/mem.h"

void cl_conf_defaults(cl_conf *c)
{
    memset(c, 0, sizeof *c);
    c->key_prefix = sl_xstrdup("sluice");
    c->cluster_name = sl_xstrdup("default");
    c->replication_port = CL_DEFAULT_REPLICATION_PORT;
    c->lease_ttl_s = 2; /* failover within 3 s at the defaults (issue 31) */
    c->min_insync_replicas = 2;
    c->proxy_max_connections = CL_DEFAULT_PROXY_MAX_CONNECTIONS;
    c->replication_buffer_bytes = 256ull << 20;
    c->etcd_verify = 1;
    c->repl_verify = 1;
    c->repl_fail_if_no_peer = 1;
}

void cl_conf_free(cl_conf *c)
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

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || *s == '+' || v > max)
        return -1;
    *out = v;
    return 0;
}

/* HOST:PORT with a non-empty host and a port 1..65535 ([v6]:PORT accepted). */
static int valid_endpoint(const char *v)
{
    const char *colon = strrchr(v, ':');
    unsigned long port;
    if (!colon || colon == v || parse_uint(colon + 1, 65535, &port) || port == 0)
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

static const char *set_endpoint(cl_conf *c, const char *index, const char *value)
{
    unsigned long no;
    if (parse_uint(index, 1000000, &no))
        return "cluster_formation.etcd.endpoints.N: N must be a number";
    if (!valid_endpoint(value))
        return "an etcd endpoint must be HOST:PORT";
    unsigned i = 0;
    while (i < c->n_endpoints && c->endpoint_no[i] < no)
        i++;
    if (i < c->n_endpoints && c->endpoint_no[i] == no) { /* the same N again: the last wins */
        sl_free(c->endpoints[i]);
        c->endpoints[i] = sl_xstrdup(value);
        return NULL;
    }
    if (c->n_endpoints == CL_MAX_ENDPOINTS)
        return "at most 16 etcd endpoints";
    memmove(&c->endpoints[i + 1], &c->endpoints[i], (c->n_endpoints - i) * sizeof c->endpoints[0]);
    memmove(&c->endpoint_no[i + 1], &c->endpoint_no[i],
            (c->n_endpoints - i) * sizeof c->endpoint_no[0]);
    c->endpoints[i] = sl_xstrdup(value);
    c->endpoint_no[i] = (unsigned)no;
    c->n_endpoints++;
    return NULL;
}

static void set_str(char **dst, const char *v)
{
    sl_free(*dst);
    *dst = sl_xstrdup(v);
}

int cl_conf_apply(cl_conf *c, const char *key, const char *value, const char **err)
{
    static const char ep[] = "cluster_formation.etcd.endpoints.";
    unsigned long n;
    *err = NULL;
    if (!strcmp(key, "cluster_formation.peer_discovery_backend")) {
        /* RabbitMQ's module names for the same backend are accepted too. */
        if (!strcmp(value, "etcd") || !strcmp(value, "rabbit_peer_discovery_etcd"))
            c->enabled = 1;
        else if (!strcmp(value, "classic_config") || !strcmp(value, "none"))
            c->enabled = 0;
        else
            *err = "peer_discovery_backend must be etcd (or classic_config: no cluster)";
    } else if (!strncmp(key, ep, sizeof ep - 1)) {
        *err = set_endpoint(c, key + sizeof ep - 1, value);
    } else if (!strcmp(key, "cluster_formation.etcd.key_prefix")) {
        if (!valid_segment(value))
            *err = "key_prefix must be 1..128 of A-Z a-z 0-9 - _ .";
        else
            set_str(&c->key_prefix, value);
    } else if (!strcmp(key, "cluster_formation.etcd.cluster_name")) {
        if (!valid_segment(value))
            *err = "cluster_name must be 1..128 of A-Z a-z 0-9 - _ .";
        else
            set_str(&c->cluster_name, value);
    } else if (!strcmp(key, "cluster.replication_port")) {
        if (parse_uint(value, 65535, &n))
            *err = "cluster.replication_port must be 0..65535 (0: a free port)";
        else
            c->replication_port = (int)n;
    } else if (!strcmp(key, "cluster.advertise_address")) {
        if (!*value || strchr(value, ' ') || strchr(value, '/'))
            *err = "cluster.advertise_address must be a host name or address";
        else
            set_str(&c->advertise_address, value);
    } else if (!strcmp(key, "cluster.lease_ttl")) {
        if (parse_uint(value, 60, &n) || n == 0)
            *err = "cluster.lease_ttl must be 1..60 seconds";
        else
            c->lease_ttl_s = (uint32_t)n;
    } else if (!strcmp(key, "cluster.min_insync_replicas")) {
        if (parse_uint(value, 16, &n) || n == 0)
            *err = "cluster.min_insync_replicas must be 1..16 (the leader counts)";
        else
            c->min_insync_replicas = (uint32_t)n;
    } else if (!strcmp(key, "cluster.proxy_max_connections")) {
        if (parse_uint(value, 1000000, &n) || n == 0)
            *err = "cluster.proxy_max_connections must be 1..1000000";
        else
            c->proxy_max_connections = (uint32_t)n;
    } else if (!strcmp(key, "cluster.replication_buffer_bytes")) {
        char *end;
        errno = 0;
        unsigned long long b = strtoull(value, &end, 10);
        if (errno || end == value || *end || value[0] == '-' || b < 4096 || b > (1ull << 40))
            *err = "cluster.replication_buffer_bytes must be 4096..1099511627776";
        else
            c->replication_buffer_bytes = b;
    } else if (!strcmp(key, "cluster.secret_file")) {
        if (!*value)
            *err = "cluster.secret_file must be a path";
        else
            set_str(&c->secret_file, value);
    } else if (!strcmp(key, "cluster.insecure_no_secret")) {
        if (!strcmp(value, "true"))
            c->insecure_no_secret = 1;
        else if (!strcmp(value, "false"))
            c->insecure_no_secret = 0;
        else
            *err = "cluster.insecure_no_secret must be true or false";
    } else if (!strcmp(key, "cluster_formation.etcd.scheme")) {
        if (!strcmp(value, "https"))
            c->etcd_https = 1;
        else if (!strcmp(value, "http"))
            c->etcd_https = 0;
        else
            *err = "cluster_formation.etcd.scheme must be http or https";
    } else if (!strcmp(key, "cluster_formation.etcd.username")) {
        set_str(&c->etcd_username, value);
    } else if (!strcmp(key, "cluster_formation.etcd.password")) {
        set_str(&c->etcd_password, value);
    } else if (!strncmp(key, "cluster_formation.etcd.ssl_options.", 35)) {
        const char *o = key + 35;
        c->etcd_https = 1;
        if (!strcmp(o, "cacertfile"))
            set_str(&c->etcd_cacertfile, value);
        else if (!strcmp(o, "certfile"))
            set_str(&c->etcd_certfile, value);
        else if (!strcmp(o, "keyfile"))
            set_str(&c->etcd_keyfile, value);
        else if (!strcmp(o, "verify") && !strcmp(value, "verify_peer"))
            c->etcd_verify = 1;
        else if (!strcmp(o, "verify") && !strcmp(value, "verify_none"))
            c->etcd_verify = 0;
        else if (!strcmp(o, "verify"))
            *err = "cluster_formation.etcd.ssl_options.verify must be verify_peer or verify_none";
        else
            *err = "unknown cluster setting";
    } else if (!strncmp(key, "cluster.ssl_options.", 20)) {
        const char *o = key + 20;
        if (!strcmp(o, "cacertfile"))
            set_str(&c->repl_cacertfile, value);
        else if (!strcmp(o, "certfile"))
            set_str(&c->repl_certfile, value);
        else if (!strcmp(o, "keyfile"))
            set_str(&c->repl_keyfile, value);
        else if (!strcmp(o, "verify") && !strcmp(value, "verify_peer"))
            c->repl_verify = 1;
        else if (!strcmp(o, "verify") && !strcmp(value, "verify_none"))
            c->repl_verify = 0;
        else if (!strcmp(o, "verify"))
            *err = "cluster.ssl_options.verify must be verify_peer or verify_none";
        else if (!strcmp(o, "fail_if_no_peer_cert") && !strcmp(value, "true"))
            c->repl_fail_if_no_peer = 1;
        else if (!strcmp(o, "fail_if_no_peer_cert") && !strcmp(value, "false"))
            c->repl_fail_if_no_peer = 0;
        else if (!strcmp(o, "fail_if_no_peer_cert"))
            *err = "cluster.ssl_options.fail_if_no_peer_cert must be true or false";
        else
            *err = "unknown cluster setting";
    } else if (!strncmp(key, "cluster_formation.", 18) || !strncmp(key, "cluster.", 8)) {
        *err = "unknown cluster setting";
    } else {
        return 0;
    }
    return 1;
}

const char *cl_conf_check(const cl_conf *c)
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

int cl_conf_load_secret(cl_conf *c, char *err, size_t errlen)
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
    return cl_secret_load(c->secret_file, &c->secret, &c->secret_len, err, errlen);
}
