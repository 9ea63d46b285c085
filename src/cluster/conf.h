/* conf.h - the cluster's settings (issue 31): rabbitmq.conf's etcd peer discovery keys and
 * Sluice's own cluster.* keys.
 *
 *   cluster_formation.peer_discovery_backend = etcd     (anything else: no cluster)
 *   cluster_formation.etcd.endpoints.N = HOST:PORT      (N orders them; at least one)
 *   cluster_formation.etcd.key_prefix = sluice          (etcd keys live under /PREFIX/NAME/)
 *   cluster_formation.etcd.cluster_name = default
 *   cluster.replication_port = 5679                     (0: a free port, logged)
 *   cluster.advertise_address = ADDR                    (what peers dial; default: bind)
 *   cluster.lease_ttl = 2                               (seconds, 1..60)
 *   cluster.min_insync_replicas = 2                     (copies, the leader counts; 1..16)
 *   cluster.proxy_max_connections = 4096                (a follower's proxied connections;
 *                                                        proxy.h)
 *   cluster.replication_buffer_bytes = 268435456        (the leader's ring of recent groups:
 *                                                        a follower further behind takes a
 *                                                        full copy)
 *   cluster.secret_file = PATH                          (the shared cluster secret, auth.h;
 *                                                        required unless the opt-out below)
 *   cluster.insecure_no_secret = false                  (true: replication peers are not
 *                                                        authenticated; logged at start)
 *   cluster.ssl_options.certfile / .keyfile / .cacertfile   (TLS on the replication port,
 *                                                        mutual: on when certfile is set)
 *   cluster.ssl_options.verify = verify_peer            (or verify_none: encryption only)
 *   cluster.ssl_options.fail_if_no_peer_cert = true     (the leader wants a follower's cert)
 *   cluster_formation.etcd.scheme = http                (https: TLS to etcd; any ssl_options
 *                                                        key implies it)
 *   cluster_formation.etcd.username / .password         (etcd's auth: a token per session)
 *   cluster_formation.etcd.ssl_options.cacertfile / .certfile / .keyfile
 *   cluster_formation.etcd.ssl_options.verify = verify_peer   (or verify_none)
 *
 * Invariant: without peer_discovery_backend = etcd, `enabled` is 0 and nothing of the cluster
 * starts: the node is a single node exactly as before the cluster existed. A cluster node
 * holds its secret (loaded by cl_conf_load_secret, checked as node/config.h says) or was told
 * explicitly to run without one.
 */
#ifndef SL_CLUSTER_CONF_H
#define SL_CLUSTER_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "node/config.h"

/* The struct and its parsing live with every other setting (node/config.h node_cluster_conf,
 * node/settings.c): the node reads the configuration before any cluster code runs. The
 * cluster keeps its own names for them. */
typedef node_cluster_conf cl_conf;
#define CL_MAX_ENDPOINTS SL_CLUSTER_MAX_ENDPOINTS
#define CL_DEFAULT_REPLICATION_PORT SL_CLUSTER_DEFAULT_REPLICATION_PORT
#define CL_DEFAULT_PROXY_MAX_CONNECTIONS SL_CLUSTER_DEFAULT_PROXY_MAX_CONNECTIONS

void cl_conf_defaults(cl_conf *c);
void cl_conf_free(cl_conf *c);
/* 1 when key is one of the cluster's (cluster_formation.* or cluster.*): then *err is NULL
 * when it was applied, else the reason it was refused. 0: not a cluster key. */
int cl_conf_apply(cl_conf *c, const char *key, const char *value, const char **err);
/* After every setting is read: NULL when the whole is usable, else why not. */
const char *cl_conf_check(const cl_conf *c);
/* After cl_conf_check: read cluster.secret_file (node/config.h node_cluster_conf_load_secret).
 * 0, or -1 with err: the file is unfit, or a cluster has neither a secret nor
 * cluster.insecure_no_secret. */
int cl_conf_load_secret(cl_conf *c, char *err, size_t errlen);

#endif
