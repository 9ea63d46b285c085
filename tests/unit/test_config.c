/* test_config.c - the settings table (node/settings.c) and the config file (node/config.c):
 * every default as sluiced always had it, the texts a bad value is refused with (contracts:
 * operators and tests read them), aliases, patterns and groups, the file's error line, and
 * --print-settings' reference (one line a key, no key twice). docs/configuration.md is held to
 * that reference by tests/integration/test_config_doc.py.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "node/config.h"
#include "node/settings.h"

START_TEST(defaults_as_always)
{
    node_config c;
    node_config_defaults(&c);
    ck_assert_str_eq(c.bind, "127.0.0.1");
    ck_assert_int_eq(c.port, 5672);
    ck_assert_int_eq(c.mgmt_port, 15672);
    ck_assert_str_eq(c.data_dir, "var");
    ck_assert_str_eq(c.node_name, "sluice@localhost");
    ck_assert_int_eq(c.log_level, SL_LOG_INFO);
    ck_assert_int_eq(c.heartbeat, 60);
    ck_assert_uint_eq(c.frame_max, 131072);
    ck_assert_uint_eq(c.channel_max, 2047);
    ck_assert_uint_eq(c.max_message_size, 128u << 20);
    ck_assert_uint_eq(c.memory_high_watermark, 4ull << 30);
    ck_assert_uint_eq(c.handshake_timeout_ms, 10000);
    ck_assert_uint_eq(c.connection_max, 0);
    ck_assert_uint_eq(c.mgmt_connection_max, 256);
    ck_assert_uint_eq(c.mgmt_unauthenticated_max, 256);
    ck_assert_uint_eq(c.mgmt_handshake_timeout_ms, 5000);
    ck_assert_uint_eq(c.mgmt_session_idle_timeout_s, 1800);
    ck_assert_uint_eq(c.mgmt_session_max_age_s, 28800);
    ck_assert_uint_eq(c.mgmt_session_max, 1000);
    ck_assert_int_eq(c.loop_cpu_stats, 0);
    ck_assert_uint_eq(c.tidy_interval_s, 21600);
    ck_assert_uint_eq(c.tidy_after_written, 1ull << 30);
    ck_assert_uint_eq(c.disk_free_limit, 1000000000);
    ck_assert_uint_eq(c.disk_reserve, 16u << 20);
    ck_assert_uint_eq(c.memory_budget, 1ull << 30);
    ck_assert_uint_eq(c.segment_size, 64u << 20);
    ck_assert_uint_eq(c.sync_pace_us, 1000);
    ck_assert_uint_eq(c.handle_idle_timeout_s, 600);
    ck_assert_uint_eq(c.handle_limit, 1000);
    ck_assert_uint_eq(c.handle_remote_timeout_ms, 5000);
    ck_assert_str_eq(c.link_user, "guest");
    ck_assert_str_eq(c.link_password, "guest");
    ck_assert_uint_eq(c.link_heartbeat_s, 10);
    ck_assert_uint_eq(c.link_retry_min_ms, 500);
    ck_assert_uint_eq(c.link_retry_max_ms, 30000);
    ck_assert_uint_eq(c.link_idle_ms, 60000);
    ck_assert_uint_eq(c.eod_resend_ms[0], 30000);
    ck_assert_uint_eq(c.eod_resend_ms[1], 300000);
    ck_assert_uint_eq(c.eod_resend_ms[2], 1800000);
    ck_assert_uint_eq(c.eod_resend_ms[3], 21600000);
    ck_assert_uint_eq(c.link_batch_msgs, 2048);
    ck_assert_uint_eq(c.link_batch_bytes, 1u << 20);
    ck_assert_uint_eq(c.link_window, 16);
    ck_assert_uint_eq(c.link_seq_window, 1ull << 48);
    ck_assert_uint_eq(c.link_bad_queue_grace_ms, 60000);
    ck_assert_uint_eq(c.link_time_to_reach_queue_ms, 345600000);
    ck_assert_uint_eq(c.link_dns_timeout_ms, 10000);
    ck_assert_int_eq(c.tls_port, -1);
    ck_assert_ptr_null(c.tls_bind);
    ck_assert_int_eq(c.msmq_port, -1);
    ck_assert_uint_eq(c.msmq_max_packet, 4u << 20);
    ck_assert_uint_eq(c.msmq_idle_timeout_ms, 120000);
    ck_assert_uint_eq(c.msmq_handshake_timeout_ms, 10000);
    ck_assert_uint_eq(c.msmq_window, 64);
    ck_assert_uint_eq(c.msmq_seq_window, 0xFFFFFFFFull);
    ck_assert_int_eq(c.msmq_ping_port, -2);
    ck_assert_ptr_null(c.msmq_vhost);
    ck_assert_ptr_null(c.msmq_allowed_senders);
    ck_assert_int_eq(c.mgmt_tls_port, -1);
    ck_assert_int_eq(c.msrpc_port, -1);
    ck_assert_int_eq(c.msrpc_epmap_port, -1);
    ck_assert_int_eq(c.msrpc_auth_none, 1);
    ck_assert_str_eq(c.msrpc_user, "guest");
    ck_assert_uint_eq(c.msrpc_max_call, 1u << 20);
    ck_assert_uint_eq(c.msrpc_max_fragments, 256);
    ck_assert_int_eq(c.msrpc_min_level, 5);
    ck_assert_int_eq(c.msrpc_ntlm_hashes, -1);
    ck_assert_int_eq(c.ssl.verify_peer, 0);
    ck_assert_int_eq(c.mgmt_ssl.verify_peer, 0);
    ck_assert_int_eq(c.link_ssl.verify_peer, 1);
    ck_assert_uint_eq(c.ssl_handshake_timeout_ms, 5000);
    ck_assert_str_eq(c.auth_mechanisms, "PLAIN AMQPLAIN");
    ck_assert_int_eq(c.auth_mechanisms_set, 0);
    ck_assert_int_eq(c.ssl_cert_login_cn, 0);
    ck_assert_str_eq(c.default_user, "guest");
    ck_assert_str_eq(c.default_pass, "guest");
    ck_assert_str_eq(c.default_vhost, "/");
    ck_assert_str_eq(c.default_user_tags, "administrator");
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(c.default_perms[i], ".*");
    ck_assert_uint_eq(c.n_loopback_users, 1);
    ck_assert_str_eq(c.loopback_users[0], "guest");
    ck_assert_ptr_null(c.password_hashing_module);
    ck_assert_int_eq(c.adopt_amqp_fd, -1);
    ck_assert_int_eq(c.adopt_https_fd, -1);
    /* the cluster's */
    ck_assert_int_eq(c.cluster.enabled, 0);
    ck_assert_str_eq(c.cluster.key_prefix, "sluice");
    ck_assert_str_eq(c.cluster.cluster_name, "default");
    ck_assert_int_eq(c.cluster.replication_port, SL_CLUSTER_DEFAULT_REPLICATION_PORT);
    ck_assert_uint_eq(c.cluster.lease_ttl_s, 2);
    ck_assert_uint_eq(c.cluster.min_insync_replicas, 2);
    ck_assert_uint_eq(c.cluster.proxy_max_connections, SL_CLUSTER_DEFAULT_PROXY_MAX_CONNECTIONS);
    ck_assert_uint_eq(c.cluster.replication_buffer_bytes, 256ull << 20);
    ck_assert_int_eq(c.cluster.etcd_https, 0);
    ck_assert_int_eq(c.cluster.etcd_verify, 1);
    ck_assert_int_eq(c.cluster.repl_verify, 1);
    ck_assert_int_eq(c.cluster.repl_fail_if_no_peer, 1);
    node_config_free(&c);
}
END_TEST

/* The text a value is refused with, or "" when it is taken. */
static const char *try(node_config *c, const char *key, const char *value)
{
    const char *err = node_settings_apply(c, key, value);
    return err ? err : "";
}

START_TEST(numbers_words_and_their_texts)
{
    node_config c;
    node_config_defaults(&c);
    ck_assert_str_eq(try(&c, "port", "65536"), "port must be 0..65535");
    ck_assert_str_eq(try(&c, "listeners.tcp.default", "1k"), ""); /* suffixes, as always */
    ck_assert_int_eq(c.port, 1024);
    ck_assert_str_eq(try(&c, "frame_max", "4095"), "frame_max must be 0 or at least 4096");
    ck_assert_str_eq(try(&c, "frame_max", "0"), "");
    ck_assert_uint_eq(c.frame_max, 0);
    ck_assert_str_eq(try(&c, "max_message_size", "513M"),
                     "max_message_size must be a size from 1 byte to 512M (536870912 bytes: "
                     "RabbitMQ's limit, and what a store record holds with room to spare)");
    ck_assert_str_eq(try(&c, "max_message_size", "0"), try(&c, "max_message_size", "513M"));
    ck_assert_str_eq(try(&c, "mgmt_port", "off"), "");
    ck_assert_int_eq(c.mgmt_port, -1);
    ck_assert_str_eq(try(&c, "management.tcp.port", "0"), "");
    ck_assert_int_eq(c.mgmt_port, 0);
    ck_assert_str_eq(try(&c, "connection_max", "7"), "");
    ck_assert_str_eq(try(&c, "connection_max", "infinity"), "");
    ck_assert_uint_eq(c.connection_max, 0);
    ck_assert_str_eq(try(&c, "loop_cpu_stats", "yes"), "loop_cpu_stats must be true or false");
    ck_assert_str_eq(try(&c, "loop_cpu_stats", "1"), "");
    ck_assert_int_eq(c.loop_cpu_stats, 1);
    ck_assert_str_eq(try(&c, "msrpc.ntlm_hashes", "on"), "");
    ck_assert_int_eq(c.msrpc_ntlm_hashes, 1);
    ck_assert_str_eq(try(&c, "msrpc.ntlm_hashes", "no"), "");
    ck_assert_int_eq(c.msrpc_ntlm_hashes, 0);
    ck_assert_str_eq(try(&c, "listeners.msrpc_epmap", "on"), "");
    ck_assert_int_eq(c.msrpc_epmap_port, 135);
    ck_assert_str_eq(try(&c, "listeners.msrpc", "on"), "listeners.msrpc must be 0..65535 or off");
    ck_assert_str_eq(try(&c, "msrpc.min_auth_level", "privacy"), "");
    ck_assert_int_eq(c.msrpc_min_level, 6);
    ck_assert_str_eq(try(&c, "msmq.ping_port", "-1"),
                     "msmq.ping_port must be a port (0 = a free one) or off");
    ck_assert_str_eq(try(&c, "listeners.msmq", "10.0.0.1:default"), "");
    ck_assert_int_eq(c.msmq_port, 1801);
    ck_assert_str_eq(c.msmq_bind, "10.0.0.1");
    ck_assert_str_eq(try(&c, "tls_port", "::1:5671"), "");
    ck_assert_int_eq(c.tls_port, 5671);
    ck_assert_str_eq(c.tls_bind, "::1");
    ck_assert_str_eq(try(&c, "link_idle_ms", "0"), "must be a positive number of milliseconds");
    ck_assert_str_eq(try(&c, "eod_resend_final_ms", "9"), "");
    ck_assert_uint_eq(c.eod_resend_ms[3], 9);
    ck_assert_str_eq(try(&c, "eod_resend_other_ms", "9"), "unknown setting");
    ck_assert_str_eq(try(&c, "log.console.level", "WARN"), "");
    ck_assert_int_eq(c.log_level, SL_LOG_WARN);
    ck_assert_str_eq(try(&c, "log_level", "loud"),
                     "log level must be debug, info, warning or error");
    ck_assert_str_eq(try(&c, "password_hashing_module", "md5"),
                     "password_hashing_module must be rabbit_password_hashing_sha256, "
                     "rabbit_password_hashing_sha512 or sluice_password_hashing_argon2id");
    ck_assert_str_eq(try(&c, "msmq.allowed_senders", "10.0.0.0/33"),
                     "msmq.allowed_senders must be a list of ADDRESS[/BITS] (IPv4 /0..32, IPv6 "
                     "/0..128), or any");
    ck_assert_str_eq(try(&c, "nonsense", "1"), "unknown setting");
    node_config_free(&c);
}
END_TEST

START_TEST(patterns_groups_and_lists)
{
    node_config c;
    node_config_defaults(&c);
    ck_assert_str_eq(try(&c, "user.bob.tags", "x"), "user.NAME.tags given before user.NAME");
    ck_assert_str_eq(try(&c, "user.bob", "pw"), "");
    ck_assert_str_eq(try(&c, "user.bob.tags", "administrator"), "");
    ck_assert_str_eq(try(&c, "user.bob.link_node", "0011"),
                     "user.NAME.link_node must be a node id: 32 hex digits");
    ck_assert_str_eq(try(&c, "user.bob.link_node", "00112233445566778899aabbccddeeff"), "");
    ck_assert_str_eq(try(&c, "user.", "pw"), "unknown setting");
    const node_user *u = node_config_find_user(&c, "bob", 3);
    ck_assert_ptr_nonnull(u);
    ck_assert_str_eq(u->tags, "administrator");
    ck_assert_int_eq(u->link_bound, 1);
    ck_assert_uint_eq(u->link_node[15], 0xff);
    ck_assert_str_eq(try(&c, "default_user_tags.monitoring", "true"), "");
    ck_assert_str_eq(try(&c, "default_user_tags.administrator", "false"), "");
    ck_assert_str_eq(c.default_user_tags, "monitoring");
    ck_assert_str_eq(try(&c, "loopback_users", "all"),
                     "loopback_users must be none (or use loopback_users.NAME = true)");
    ck_assert_str_eq(try(&c, "loopback_users", "none"), "");
    ck_assert_uint_eq(c.n_loopback_users, 0);
    ck_assert_str_eq(try(&c, "loopback_users.alice", "yes"), "");
    ck_assert_str_eq(c.loopback_users[0], "alice");
    /* the first auth_mechanisms.N replaces the default list */
    ck_assert_str_eq(try(&c, "auth_mechanisms.1", "EXTERNAL"), "");
    ck_assert_str_eq(try(&c, "auth_mechanisms.2", "PLAIN"), "");
    ck_assert_str_eq(c.auth_mechanisms, "EXTERNAL PLAIN");
    ck_assert_str_eq(try(&c, "auth_mechanisms.3", "plain"),
                     "auth_mechanisms.N must be PLAIN, AMQPLAIN or EXTERNAL");
    ck_assert_str_eq(try(&c, "msmq.hosts.1", "a b"),
                     "msmq.hosts.N must be HOST[:PORT] (a Windows queue manager)");
    ck_assert_str_eq(try(&c, "msmq.hosts.1", "win1"), "");
    ck_assert_str_eq(try(&c, "msmq.hosts.2", "win2:1801"), "");
    ck_assert_str_eq(c.msmq_hosts, "win1 win2:1801");
    /* TLS groups: management.ssl.port is a key of its own, before the group */
    ck_assert_str_eq(try(&c, "management.ssl.port", "15671"), "");
    ck_assert_int_eq(c.mgmt_tls_port, 15671);
    ck_assert_str_eq(try(&c, "management.ssl.certfile", "/c.pem"), "");
    ck_assert_str_eq(c.mgmt_ssl.certfile, "/c.pem");
    ck_assert_str_eq(try(&c, "ssl_options.verify", "yes"),
                     "verify must be verify_peer or verify_none");
    ck_assert_str_eq(try(&c, "ssl_options.depth", "101"), "depth must be 0..100");
    ck_assert_str_eq(try(&c, "ssl_options.honor_ecc_order", "true"), "");
    ck_assert_str_eq(try(&c, "ssl_options.honor_cipher_order", "false"), "");
    ck_assert_int_eq(c.ssl.honor_cipher_order, 1); /* either key turns it on */
    ck_assert_str_eq(try(&c, "ssl_options.ciphers.1", "TLS_AES_128_GCM_SHA256"), "");
    ck_assert_str_eq(try(&c, "ssl_options.ciphers.2", "ECDHE-RSA-AES128-GCM-SHA256"), "");
    ck_assert_str_eq(c.ssl.ciphersuites, "TLS_AES_128_GCM_SHA256");
    ck_assert_str_eq(c.ssl.ciphers, "ECDHE-RSA-AES128-GCM-SHA256");
    ck_assert_str_eq(try(&c, "link_ssl_options.versions.1", "sslv3"),
                     "versions.N must be tlsv1.2 or tlsv1.3 (or tlsv1.1, tlsv1)");
    ck_assert_str_eq(try(&c, "link_ssl_options.nonsense", "1"), "unknown setting");
    /* the cluster's keys, first */
    ck_assert_str_eq(try(&c, "cluster.lease_ttl", "+5"), "cluster.lease_ttl must be 1..60 seconds");
    ck_assert_str_eq(try(&c, "cluster.replication_buffer_bytes", "+4096"), "");
    ck_assert_str_eq(try(&c, "cluster.nonsense", "1"), "unknown cluster setting");
    ck_assert_str_eq(try(&c, "cluster_formation.etcd.ssl_options.cacertfile", "/ca"), "");
    ck_assert_int_eq(c.cluster.etcd_https, 1); /* any etcd ssl_options key implies https */
    node_config_free(&c);
}
END_TEST

START_TEST(file_errors_name_the_line)
{
    char path[] = "/tmp/test_config_XXXXXX", out[] = "/tmp/test_config_err_XXXXXX";
    int fd = mkstemp(path), ofd = mkstemp(out);
    ck_assert(fd >= 0 && ofd >= 0);
    const char text[] = "bind = 0.0.0.0\nport = 70000\n";
    ck_assert_int_eq(write(fd, text, sizeof text - 1), (ssize_t)sizeof text - 1);
    close(fd);
    fflush(stderr);
    int saved = dup(2);
    dup2(ofd, 2);
    node_config c;
    node_config_defaults(&c);
    int rc = node_config_load_file(&c, path);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ck_assert_int_eq(rc, -1);
    char buf[512] = {0}, want[512];
    ck_assert(pread(ofd, buf, sizeof buf - 1, 0) > 0);
    snprintf(want, sizeof want, "sluiced: %s:2: port: port must be 0..65535\n", path);
    ck_assert_str_eq(buf, want);
    close(ofd);
    unlink(path);
    unlink(out);
    node_config_free(&c);
}
END_TEST

START_TEST(reference_one_line_a_key)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    node_settings_print(f);
    fclose(f);
    ck_assert(strstr(text, "bind\tstring\t127.0.0.1\t") == text);
    ck_assert_ptr_nonnull(strstr(text, "\nlisteners.tcp.default\talias\t\tport\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nmanagement.ssl.versions.N\tenum "));
    ck_assert_ptr_nonnull(strstr(text, "\ncluster.lease_ttl\tseconds 1..60\t2\t"));
    /* four fields a line, and no key twice */
    for (char *p = text; *p; p++)
        if (*p == '\n')
            *p = 0;
    size_t lines = 0;
    for (char *line = text; line < text + len; line += strlen(line) + 1, lines++) {
        int tabs = 0;
        for (char *p = line; *p; p++)
            tabs += *p == '\t';
        ck_assert_msg(tabs == 3, "%s", line);
        size_t klen = strcspn(line, "\t");
        for (char *q = line + strlen(line) + 1; q < text + len; q += strlen(q) + 1)
            ck_assert_msg(!(strncmp(q, line, klen) == 0 && q[klen] == '\t'), "twice: %.*s",
                          (int)klen, line);
    }
    ck_assert_uint_gt(lines, 150);
    free(text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, defaults_as_always);
    tcase_add_test(tc, numbers_words_and_their_texts);
    tcase_add_test(tc, patterns_groups_and_lists);
    tcase_add_test(tc, file_errors_name_the_line);
    tcase_add_test(tc, reference_one_line_a_key);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
