/* config.h - sluiced settings: defaults, command-line flags and the config file.
 *
 * The config file holds RabbitMQ-style `key = value` lines (parsed with Debian's libinih);
 * flags given on the command line override the file. Users come from `user.NAME = PASSWORD`
 * and `user.NAME.tags = administrator` lines (config users: their password and tags are
 * re-applied at every start), and the default user (default_user / default_pass, guest/guest,
 * created with full permissions on the default vhost on the first start only, as RabbitMQ
 * does). loopback_users (default guest) may log in from loopback only.
 *
 * Every key, its type, default and error text is a row of the settings table
 * (node/settings.h; `sluiced --print-settings` prints it, docs/configuration.md is checked
 * against it). The field names here are what the rest of sluiced reads.
 */
#ifndef SL_NODE_CONFIG_H
#define SL_NODE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/* The largest max_message_size accepted (RabbitMQ's cap, 512 MiB): a message record in the
 * store (store/log.h ST_LOG_MAX_RECORD, 1 GiB) then always has room for the body with its
 * properties and names. */
#define SL_MAX_MESSAGE_SIZE_CAP (512ull * 1024 * 1024)

/* The cluster's settings (issue 31): rabbitmq.conf's etcd peer discovery keys and Sluice's own
 * cluster.* keys, parsed by the settings table (node/settings.c) like every other key; the
 * cluster (cluster/conf.h, which names this cl_conf) checks and uses them. Without
 * cluster_formation.peer_discovery_backend = etcd, `enabled` is 0 and nothing of the cluster
 * starts. */
#define SL_CLUSTER_MAX_ENDPOINTS 16
#define SL_CLUSTER_DEFAULT_REPLICATION_PORT 5679
#define SL_CLUSTER_DEFAULT_PROXY_MAX_CONNECTIONS 4096

typedef struct node_cluster_conf {
    int enabled; /* peer_discovery_backend = etcd */
    /* endpoints.N, kept sorted by N; each "HOST:PORT" */
    char *endpoints[SL_CLUSTER_MAX_ENDPOINTS];
    unsigned endpoint_no[SL_CLUSTER_MAX_ENDPOINTS];
    unsigned n_endpoints;
    char *key_prefix;   /* default "sluice" */
    char *cluster_name; /* default "default" */
    int replication_port;
    char *advertise_address; /* NULL: the AMQP bind address */
    uint32_t lease_ttl_s;
    uint32_t min_insync_replicas;
    uint32_t proxy_max_connections; /* the follower's front door (cluster/proxy.h) */
    uint64_t replication_buffer_bytes;
    char *secret_file;
    uint8_t *secret; /* its bytes once loaded (node_cluster_conf_load_secret); NULL: none */
    size_t secret_len;
    int insecure_no_secret;
    /* etcd's own doors (cluster/etcd.h cl_etcd_opts) */
    int etcd_https;
    char *etcd_username, *etcd_password;
    char *etcd_cacertfile, *etcd_certfile, *etcd_keyfile;
    int etcd_verify; /* verify_peer (default) */
    /* TLS on the replication port (on when repl_certfile is set) */
    char *repl_cacertfile, *repl_certfile, *repl_keyfile;
    int repl_verify;          /* verify_peer (default) */
    int repl_fail_if_no_peer; /* default 1 */
} node_cluster_conf;

typedef struct node_user {
    char *name;
    char *password;
    char *tags;            /* comma- or space-separated, e.g. "administrator" */
    int link_bound;        /* user.NAME.link_node given: the node this link user speaks for */
    uint8_t link_node[16]; /* (access.h acc_check_link_login) */
} node_user;

typedef struct node_config {
    char *bind;
    int port;      /* 0 = pick a free port */
    int mgmt_port; /* HTTP management API; 0 = pick a free port, -1 = off */
    char *data_dir;
    char *node_name;
    int log_level;
    uint16_t heartbeat;             /* seconds proposed in connection.tune; 0 = off */
    uint32_t frame_max;             /* proposed frame-max */
    uint16_t channel_max;           /* proposed channel-max */
    uint64_t max_message_size;      /* bodies larger than this: 406 on the channel; at most
                                       SL_MAX_MESSAGE_SIZE_CAP */
    uint64_t memory_high_watermark; /* bytes of messages in memory that block publishers */
    uint32_t handshake_timeout_ms;
    uint32_t connection_max;              /* AMQP connections past connection.open; 0 = no cap */
    uint32_t mgmt_connection_max;         /* logged-in HTTP(S) connections at once; more wait */
    uint32_t mgmt_unauthenticated_max;    /* per listener; the oldest goes (http/guard.c) */
    uint32_t mgmt_handshake_timeout_ms;   /* TLS handshake + request header, not logged in */
    uint32_t mgmt_session_idle_timeout_s; /* console session unused this long: ended */
    uint32_t mgmt_session_max_age_s;      /* console session, after login at the latest: ended */
    uint32_t mgmt_session_max;            /* console sessions at once; past it the LRU goes */
    int loop_cpu_stats;                   /* count CPU time per loop turn too (a syscall a turn) */
    uint64_t tidy_interval_s;             /* automatic TIDY period; 0 = only on demand */
    uint64_t tidy_after_written; /* a TIDY after this many bytes written to the store; 0 = off */
    uint32_t reap_interval_ms;   /* least time between reaps (TIDY's deletions only); 0 = off */
    uint64_t disk_free_limit;    /* free bytes under data_dir below which publishers block */
    uint64_t disk_reserve;       /* DATA/space-reserve kept for a full disk (0 = none) */
    uint64_t segment_size;       /* message store segment size (TIDY frees whole segments) */
    uint32_t sync_pace_us;       /* least time between syncs only pipelined confirms wait for */
    uint32_t busy_poll_us;       /* the loop polls this long before sleeping after a busy turn */
    uint64_t memory_budget;      /* bytes of messages kept in memory (bodies, properties and
                                  * bookkeeping); beyond it they are paged to the store (0 = never
                                  * page) */

    /* MSMQ handles and management objects opened over HTTP: closed after this long unused
     * (the context-handle rundown); at most handle_limit of each open per user. */
    uint64_t handle_idle_timeout_s;
    uint32_t handle_limit;
    uint32_t handle_remote_timeout_ms; /* a request to the node that owns a queue, at most */

    node_user *users; /* user.NAME lines */
    size_t n_users;
    /* Seeded on the first start (RabbitMQ's default_user and friends). */
    char *default_user, *default_pass, *default_vhost, *default_user_tags;
    char *default_perms[3]; /* configure, write, read */
    char **loopback_users;  /* loopback_users.NAME = true; default {guest}; none = empty */
    size_t n_loopback_users;
    char *password_hashing_module;          /* NULL = rabbit_password_hashing_sha256 */
    int password_change_closes_connections; /* RabbitMQ leaves them open: 0 */
    /* TLS (rabbitmq.conf's names): listeners.ssl.default = [IP:]PORT and ssl_options.* for
     * AMQPS; management.ssl.* for HTTPS. Ports: -1 = no such listener, 0 = a free one. */
    int tls_port;
    char *tls_bind; /* NULL = bind */
    struct node_tls_conf {
        char *cacertfile, *certfile, *keyfile, *password;
        int verify_peer, fail_if_no_peer_cert, depth, honor_cipher_order;
        unsigned versions;            /* SL_TLS_V* bits; 0 = TLS 1.2 and 1.3 */
        char *ciphers, *ciphersuites; /* ssl_options.ciphers.N: <= 1.2 joined with ':', and
                                       * the TLS 1.3 ones (TLS_*) */
    } ssl, mgmt_ssl, link_ssl;
    int link_tls; /* link_ssl = true: node-to-node links over TLS (link_ssl_options.*) */
    int mgmt_tls_port;
    /* Listening sockets already bound, to start on instead of binding (not config keys: a
     * cluster node's follower phase hands its own over at promotion, so a port never closes
     * between the proxy and the broker). -1 (the default): bind as configured. An adopted
     * AMQPS or HTTPS socket turns that listener on; its TLS settings still come from the
     * configuration. The broker closes them when it stops, as its own. */
    int adopt_amqp_fd, adopt_amqps_fd, adopt_http_fd, adopt_https_fd;
    /* DCE/RPC doors (src/rpc/, MS-MQMR / MS-MQMP): -1 = off, 0 = a free port */
    int msrpc_port, msrpc_epmap_port;
    int msrpc_auth_none;          /* msrpc.auth = none: loopback callers only, as msrpc_user */
    char *msrpc_user;             /* whose rights unauthenticated loopback calls have */
    uint64_t msrpc_max_call;      /* largest request stub gathered from fragments */
    uint32_t msrpc_max_fragments; /* most fragments one request may come in */
    int msrpc_min_level;          /* msrpc.min_auth_level: 2 connect, 5 integrity, 6 privacy */
    int msrpc_ntlm_hashes;        /* msrpc.ntlm_hashes: keep NT hashes (-1 = as msrpc.auth) */
    uint32_t ssl_handshake_timeout_ms;
    char *auth_mechanisms;   /* space-separated, offered in this order; default PLAIN AMQPLAIN */
    int ssl_cert_login_cn;   /* ssl_cert_login_from = common_name (default: distinguished_name) */
    int auth_mechanisms_set; /* an auth_mechanisms.N line was read */
    /* node-to-node links (src/link/): what this node logs in as on other nodes, timers */
    char *link_user, *link_password;
    uint32_t link_heartbeat_s;
    uint32_t link_retry_min_ms, link_retry_max_ms, link_idle_ms;
    uint32_t eod_resend_ms[4]; /* MSMQ's resend table: short, medium, long, final */
    uint32_t link_batch_msgs, link_batch_bytes, link_window;
    uint32_t link_bad_queue_grace_ms;
    uint64_t link_time_to_reach_queue_ms;
    uint32_t link_dns_timeout_ms;
    /* MS-MQQB door (src/msmq/): listeners.msmq = [IP:]PORT (-1 = off, 0 = a free port),
     * the vhost its private queues are looked up in, the user whose write permission it
     * needs (NULL: none checked), the largest packet taken, the session timers. */
    int msmq_port;
    char *msmq_bind; /* NULL = bind */
    char *msmq_vhost;
    char *msmq_user;
    char *msmq_hosts; /* msmq.hosts.N: space-separated host[:port] of Windows queue managers */
    uint32_t msmq_max_packet;
    uint32_t msmq_idle_timeout_ms, msmq_handshake_timeout_ms;
    uint16_t msmq_window;
    uint64_t msmq_seq_window; /* the largest gap a TxSequenceNumber may declare (mqqb.h) */
    /* msmq.allowed_senders: the CIDR list of addresses that may open an MS-MQQB session
     * (net/cidr.h); NULL = MSMQ_ALLOWED_SENDERS_DEFAULT */
    char *msmq_allowed_senders;
    int msmq_ping_port; /* UDP ping: -2 = follow listeners.msmq (3527, or 0 beside 0), -1 = off */
    /* receiver: the largest step a sequence's numbers may take (a SeqNo beyond the last
     * accepted + this is refused as forged; link_recv.c) */
    uint64_t link_seq_window;
    /* RabbitMQ's stream protocol door (src/stream/): listeners.stream and .ssl = [IP:]PORT
     * (-1 = off, 0 = a free port; TLS takes ssl_options.*), what Tune proposes, and the
     * address Metadata and Open advertise (NULL / -1: the listener's own). */
    int stream_port, stream_tls_port;
    char *stream_bind, *stream_tls_bind; /* NULL = bind */
    uint32_t stream_frame_max, stream_heartbeat;
    uint32_t stream_request_timeout_ms; /* a ConsumerUpdate unanswered this long: closed */
    char *stream_advertised_host;
    int stream_advertised_port, stream_advertised_tls_port;
    node_cluster_conf cluster; /* cluster_formation.* and cluster.* (issue 31); off unless set */
} node_config;

void node_config_defaults(node_config *c);
void node_config_free(node_config *c);
/* Parse argv; returns 0 to run, 1 when --help/--version printed, -1 on error (message on
 * stderr). A --config file is read first, then the other flags override it. */
int node_config_from_args(node_config *c, int argc, char **argv);
/* Read a config file; -1 and a message naming the file and line on error. */
int node_config_load_file(node_config *c, const char *path);
const node_user *node_config_find_user(const node_config *c, const char *name, size_t len);
void node_config_usage(void);

/* The cluster's settings alone (cluster/conf.h cl_conf_*): their defaults from the table, and
 * what they own. */
void node_cluster_conf_defaults(node_cluster_conf *c);
void node_cluster_conf_free(node_cluster_conf *c);
/* After every setting is read: NULL when the cluster's settings are usable together, else why
 * not. */
const char *node_cluster_conf_check(const node_cluster_conf *c);
/* After node_cluster_conf_check: read cluster.secret_file into c->secret (a regular file of at
 * most SL_CLUSTER_MAX_SECRET bytes that neither group nor others may read or write; trailing
 * blanks dropped). 0, or -1 with err: the file is unfit, or a cluster has neither a secret nor
 * cluster.insecure_no_secret. */
#define SL_CLUSTER_MAX_SECRET 4096
int node_cluster_conf_load_secret(node_cluster_conf *c, char *err, size_t errlen);

#endif
