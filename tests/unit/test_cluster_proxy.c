/* test_cluster_proxy.c - the pure parts of a follower's front door (src/cluster/proxy.h): the
 * HTTP request line that picks GET /api/cluster, the no-leader AMQP exchange, the rule that
 * tells a cluster member's address (loopback_users), and the cluster.proxy_max_connections
 * key. The splice itself is tested against a real sluiced (test_cluster_proxy.py). */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "amqp/frame.h"
#include "amqp/method.h"
#include "cluster/conf.h"
#include "cluster/proxy.h"
#include "core/buf.h"

#define ROUTE(s) cl_proxy_http_route((s), strlen(s))

START_TEST(http_route)
{
    ck_assert_int_eq(ROUTE("GET /api/cluster HTTP/1.1\r\n"), CL_HTTP_CLUSTER);
    ck_assert_int_eq(ROUTE("GET /api/cluster?columns=name HTTP/1.0\r\nHost: x\r\n\r\n"),
                     CL_HTTP_CLUSTER);
    ck_assert_int_eq(ROUTE("GET /api/cluster HTTP/1.1\n"), CL_HTTP_CLUSTER);
    ck_assert_int_eq(ROUTE("GET /api/clusterx HTTP/1.1\r\n"), CL_HTTP_OTHER);
    ck_assert_int_eq(ROUTE("GET /api/cluster/x HTTP/1.1\r\n"), CL_HTTP_OTHER);
    ck_assert_int_eq(ROUTE("POST /api/cluster HTTP/1.1\r\n"), CL_HTTP_OTHER);
    ck_assert_int_eq(ROUTE("HEAD /api/cluster HTTP/1.1\r\n"), CL_HTTP_OTHER);
    ck_assert_int_eq(ROUTE("GET /api/overview HTTP/1.1\r\n"), CL_HTTP_OTHER);
    ck_assert_int_eq(ROUTE("GET /api/clu"), CL_HTTP_MORE);
    ck_assert_int_eq(ROUTE(""), CL_HTTP_MORE);
    ck_assert_int_eq(ROUTE("GET /api/cluster HTTP/2.0\r\n"), CL_HTTP_BAD);
    ck_assert_int_eq(ROUTE("GET  /api/cluster HTTP/1.1\r\n"), CL_HTTP_BAD);
    ck_assert_int_eq(ROUTE("GET /api/cluster\r\n"), CL_HTTP_BAD);
    ck_assert_int_eq(ROUTE("G(T / HTTP/1.1\r\n"), CL_HTTP_BAD);
    ck_assert_int_eq(ROUTE("\x16\x03\x01\x02\r\n"), CL_HTTP_BAD);
    ck_assert_int_eq(ROUTE("GET /\r junk"), CL_HTTP_BAD);
    char big[9000];
    memset(big, 'a', sizeof big);
    memcpy(big, "GET /", 5);
    ck_assert_int_eq(cl_proxy_http_route(big, sizeof big), CL_HTTP_BAD);
    ck_assert_int_eq(cl_proxy_http_route(big, 100), CL_HTTP_MORE);
}
END_TEST

static void method_frame(sl_buf *b, uint32_t id)
{
    uint8_t p[64] = {(uint8_t)(id >> 24), (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id};
    amqp_frame_write(b, AMQP_FRAME_METHOD, 0, p, 4 + 40); /* arguments: not decoded */
}

/* The first method frame in out, its id; 0 when none. */
static uint32_t first_method(const sl_buf *out, size_t *at)
{
    amqp_frame f;
    int r = amqp_frame_parse(out->data + *at, out->len - *at, 0, &f);
    if (r <= 0 || f.type != AMQP_FRAME_METHOD)
        return 0;
    *at += (size_t)r;
    return ((uint32_t)f.payload[0] << 24) | ((uint32_t)f.payload[1] << 16) |
           ((uint32_t)f.payload[2] << 8) | f.payload[3];
}

START_TEST(amqp_refusal_exchange)
{
    sl_buf in, out;
    sl_buf_init(&in);
    sl_buf_init(&out);
    int step = 0;
    size_t used = 0, at = 0;
    /* byte by byte through the header: nothing until all 8 are there */
    ck_assert_int_eq(cl_proxy_amqp_refusal(&step, amqp_protocol_header, 5, &used, &out), 0);
    ck_assert_uint_eq(used, 0);
    ck_assert_uint_eq(out.len, 0);
    sl_buf_append(&in, amqp_protocol_header, 8);
    amqp_heartbeat_write(&in); /* ignored */
    method_frame(&in, AMQP_CONNECTION_START_OK);
    ck_assert_int_eq(cl_proxy_amqp_refusal(&step, in.data, in.len, &used, &out), 0);
    ck_assert_uint_eq(used, in.len);
    ck_assert_int_eq(step, 2);
    ck_assert_uint_eq(first_method(&out, &at), AMQP_CONNECTION_START);
    ck_assert_uint_eq(first_method(&out, &at), AMQP_CONNECTION_CLOSE);
    /* the close carries 320 (after its class and method ids) and the words */
    ck_assert_ptr_nonnull(memmem(out.data, out.len, "\x00\x0a\x00\x32\x01\x40", 6));
    ck_assert_ptr_nonnull(memmem(out.data, out.len, "no cluster leader is elected yet", 32));
    sl_buf_free(&in);
    sl_buf_init(&in);
    method_frame(&in, AMQP_CONNECTION_CLOSE_OK);
    ck_assert_int_eq(cl_proxy_amqp_refusal(&step, in.data, in.len, &used, &out), 1);
    /* a client that closes itself is answered close-ok */
    sl_buf_free(&out);
    sl_buf_init(&out);
    step = 1;
    sl_buf_free(&in);
    sl_buf_init(&in);
    method_frame(&in, AMQP_CONNECTION_CLOSE);
    ck_assert_int_eq(cl_proxy_amqp_refusal(&step, in.data, in.len, &used, &out), 1);
    at = 0;
    ck_assert_uint_eq(first_method(&out, &at), AMQP_CONNECTION_CLOSE_OK);
    /* another protocol gets our header */
    sl_buf_free(&out);
    sl_buf_init(&out);
    step = 0;
    ck_assert_int_eq(cl_proxy_amqp_refusal(&step, (const uint8_t *)"AMQP\1\1\0\12", 8, &used, &out),
                     1);
    ck_assert_uint_eq(out.len, 8);
    ck_assert_mem_eq(out.data, amqp_protocol_header, 8);
    /* an oversized frame: close */
    step = 1;
    uint8_t huge[7] = {1, 0, 0, 0x01, 0, 0, 0};
    ck_assert_int_eq(cl_proxy_amqp_refusal(&step, huge, sizeof huge, &used, &out), 1);
    sl_buf_free(&in);
    sl_buf_free(&out);
}
END_TEST

static struct sockaddr_in v4(const char *a)
{
    struct sockaddr_in s = {.sin_family = AF_INET};
    inet_pton(AF_INET, a, &s.sin_addr);
    return s;
}

START_TEST(member_addresses)
{
    cl_status st;
    memset(&st, 0, sizeof st);
    st.n_nodes = 3;
    snprintf(st.nodes[0].name, sizeof st.nodes[0].name, "a");
    snprintf(st.nodes[0].amqp, sizeof st.nodes[0].amqp, "127.0.0.2:5672");
    snprintf(st.nodes[1].name, sizeof st.nodes[1].name, "b");
    snprintf(st.nodes[1].amqp, sizeof st.nodes[1].amqp, "127.0.0.3:5672");
    snprintf(st.nodes[2].name, sizeof st.nodes[2].name, "c");
    snprintf(st.nodes[2].amqp, sizeof st.nodes[2].amqp, "node-c.example:5672");
    snprintf(st.nodes[2].replication, sizeof st.nodes[2].replication, "[::1]:5679");
    struct sockaddr_in s = v4("127.0.0.3");
    ck_assert_int_eq(cl_proxy_from_member(&st, "a", (struct sockaddr *)&s), 1);
    ck_assert_int_eq(cl_proxy_from_member(&st, "b", (struct sockaddr *)&s), 0); /* itself */
    s = v4("127.0.0.1");
    ck_assert_int_eq(cl_proxy_from_member(&st, "a", (struct sockaddr *)&s), 0);
    s = v4("127.0.0.2");
    ck_assert_int_eq(cl_proxy_from_member(&st, "a", (struct sockaddr *)&s), 0);
    ck_assert_int_eq(cl_proxy_from_member(&st, "b", (struct sockaddr *)&s), 1);
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "::1", &s6.sin6_addr);
    ck_assert_int_eq(cl_proxy_from_member(&st, "a", (struct sockaddr *)&s6), 1);
    inet_pton(AF_INET6, "::ffff:127.0.0.3", &s6.sin6_addr); /* v4-mapped is the same */
    ck_assert_int_eq(cl_proxy_from_member(&st, "a", (struct sockaddr *)&s6), 1);
    /* nodes sharing one address: the leader cannot tell, and does not make every local client
     * remote (that member's proxy refuses remote clients instead) */
    snprintf(st.nodes[1].amqp, sizeof st.nodes[1].amqp, "127.0.0.1:5673");
    snprintf(st.nodes[0].amqp, sizeof st.nodes[0].amqp, "127.0.0.1:5672");
    s = v4("127.0.0.1");
    ck_assert_int_eq(cl_proxy_from_member(&st, "a", (struct sockaddr *)&s), 0);
}
END_TEST

START_TEST(conceals_remote)
{
    struct sockaddr_in local = v4("127.0.0.1"), remote = v4("192.0.2.7"), lead = v4("127.0.0.2"),
                       far = v4("198.51.100.2"), src = v4("127.0.0.3");
    struct sockaddr *L = (struct sockaddr *)&local, *R = (struct sockaddr *)&remote;
    /* a local client is never concealed */
    ck_assert_int_eq(cl_proxy_conceals_remote(L, (struct sockaddr *)&lead, NULL), 0);
    /* a remote client to a non-loopback leader: the leader sees this node's address */
    ck_assert_int_eq(cl_proxy_conceals_remote(R, (struct sockaddr *)&far, NULL), 0);
    /* a remote client to a loopback leader: only a source of our own tells it */
    ck_assert_int_eq(cl_proxy_conceals_remote(R, (struct sockaddr *)&lead, NULL), 1);
    ck_assert_int_eq(cl_proxy_conceals_remote(R, (struct sockaddr *)&lead, (struct sockaddr *)&src),
                     0);
    ck_assert_int_eq(
        cl_proxy_conceals_remote(R, (struct sockaddr *)&lead, (struct sockaddr *)&lead), 1);
}
END_TEST

START_TEST(proxy_max_connections_key)
{
    cl_conf c;
    cl_conf_defaults(&c);
    const char *err;
    ck_assert_uint_eq(c.proxy_max_connections, CL_DEFAULT_PROXY_MAX_CONNECTIONS);
    ck_assert_int_eq(cl_conf_apply(&c, "cluster.proxy_max_connections", "100", &err), 1);
    ck_assert_ptr_null(err);
    ck_assert_uint_eq(c.proxy_max_connections, 100);
    ck_assert_int_eq(cl_conf_apply(&c, "cluster.proxy_max_connections", "0", &err), 1);
    ck_assert_ptr_nonnull(err);
    ck_assert_int_eq(cl_conf_apply(&c, "cluster.proxy_max_connections", "x", &err), 1);
    ck_assert_ptr_nonnull(err);
    ck_assert_uint_eq(c.proxy_max_connections, 100);
    cl_conf_free(&c);
}
END_TEST

static Suite *proxy_suite(void)
{
    Suite *s = suite_create("cluster_proxy");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, http_route);
    tcase_add_test(tc, amqp_refusal_exchange);
    tcase_add_test(tc, member_addresses);
    tcase_add_test(tc, conceals_remote);
    tcase_add_test(tc, proxy_max_connections_key);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(proxy_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
