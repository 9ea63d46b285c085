/* test_http.c - unit tests for src/http/: If-None-Match matching (static.c), and the server
 * (server.c) on a loop of its own, with a client thread: a request is answered, a body is
 * gathered whole, one over the limit is refused at its header, a held request is answered
 * when it is resumed, and every request is freed (the in-flight count goes back to 0).
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "http/server.h"
#include "http/static.h"

START_TEST(etag_matches)
{
    ck_assert(http_etag_matches("\"abc\"", "\"abc\""));
    ck_assert(http_etag_matches("W/\"abc\"", "\"abc\""));
    ck_assert(http_etag_matches("\"x\", \"abc\" ", "\"abc\""));
    ck_assert(http_etag_matches("*", "\"abc\""));
    ck_assert(!http_etag_matches(NULL, "\"abc\""));
    ck_assert(!http_etag_matches("", "\"abc\""));
    ck_assert(!http_etag_matches("\"abcd\"", "\"abc\""));
    ck_assert(!http_etag_matches("\"ab\"", "\"abc\""));
}
END_TEST

/* ---- the server ---- */

typedef struct treq {
    http_req h;
    int answered;
} treq;

static sl_loop *loop;
static http_server *srv;
static sl_timer resume_t, poll_t;
static treq *held;
static int released;
static atomic_int client_done;
static char replies[4][256];

static enum MHD_Result reply(treq *r, unsigned status, const char *text)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result rc = MHD_queue_response(r->h.conn, status, resp);
    MHD_destroy_response(resp);
    r->answered = 1;
    return rc;
}

static enum MHD_Result t_begin(http_req *h, const char *url)
{
    (void)url;
    if (h->too_large)
        return reply((treq *)h, 413, "too large");
    return MHD_YES;
}

static int t_answered(http_req *h)
{
    return ((treq *)h)->answered;
}

static enum MHD_Result t_handle(http_req *h, const char *url)
{
    treq *r = (treq *)h;
    char text[64];
    if (h->resumed) {
        h->resumed = 0;
        return reply(r, 200, "resumed");
    }
    if (r->answered || h->suspended)
        return MHD_YES;
    if (!strcmp(url, "/later")) {
        held = r;
        http_suspend(h);
        sl_timer_start(loop, &resume_t, sl_now_ms() + 20);
        return MHD_YES;
    }
    snprintf(text, sizeof text, "%s %s %zu", h->method, url, h->body.len);
    return reply(r, 200, text);
}

static void t_release(http_req *h)
{
    (void)h;
    released++;
}

static void on_resume_t(sl_loop *l, sl_timer *t)
{
    (void)l;
    (void)t;
    http_resume(&held->h);
}

static void on_poll(sl_loop *l, sl_timer *t)
{
    if (atomic_load(&client_done))
        sl_loop_stop(l);
    else
        sl_timer_start(l, t, sl_now_ms() + 5);
}

/* One request on a new connection; the reply (status line and body) into out. */
static void http_call(int port, const char *request, char *out, size_t outlen)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        snprintf(out, outlen, "connect failed");
        close(fd);
        return;
    }
    size_t n = strlen(request);
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, request + off, n - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    size_t got = 0;
    ssize_t rd;
    while (got + 1 < outlen && (rd = read(fd, out + got, outlen - 1 - got)) > 0)
        got += (size_t)rd;
    out[got] = 0;
    close(fd);
}

static void *client(void *arg)
{
    int port = *(int *)arg;
    http_call(port, "GET /a/b%2Fc HTTP/1.0\r\n\r\n", replies[0], sizeof replies[0]);
    http_call(port,
              "POST /body HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n"
              "{\"a\"}",
              replies[1], sizeof replies[1]);
    http_call(port, "PUT /big HTTP/1.0\r\nContent-Length: 100\r\n\r\n", replies[2],
              sizeof replies[2]);
    http_call(port, "GET /later HTTP/1.0\r\n\r\n", replies[3], sizeof replies[3]);
    atomic_store(&client_done, 1);
    return NULL;
}

START_TEST(server_round_trip)
{
    loop = sl_loop_new();
    uint32_t conn_max = 8, unauth_max = 8, handshake_ms = 5000;
    int stopping = 0;
    http_server_opts o = {
        .loop = loop,
        .bind = "127.0.0.1",
        .port = 0,
        .adopt_fd = -1,
        .tls_port = -1,
        .adopt_tls_fd = -1,
        .fd_reserve = 4,
        .conn_max = &conn_max,
        .unauth_max = &unauth_max,
        .handshake_ms = &handshake_ms,
        .stopping = &stopping,
        .max_body = 64,
        .req_size = sizeof(treq),
        .begin = t_begin,
        .answered = t_answered,
        .handle = t_handle,
        .release = t_release,
    };
    char err[256] = "";
    srv = http_server_start(&o, err, sizeof err);
    ck_assert_msg(srv != NULL, "http_server_start: %s", err);
    ck_assert_int_gt(http_server_port(srv), 0);
    ck_assert(!http_server_has_tls(srv));
    sl_timer_init(&resume_t, on_resume_t, NULL);
    sl_timer_init(&poll_t, on_poll, NULL);
    sl_timer_start(loop, &poll_t, sl_now_ms() + 5);
    int port = http_server_port(srv);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, client, &port), 0);
    sl_loop_run(loop);
    pthread_join(th, NULL);
    /* URL paths come raw (%2F kept): the application splits them before decoding */
    ck_assert_msg(strstr(replies[0], " 200 ") && strstr(replies[0], "GET /a/b%2Fc 0"), "%s",
                  replies[0]);
    ck_assert_msg(strstr(replies[1], " 200 ") && strstr(replies[1], "POST /body 5"), "%s",
                  replies[1]);
    ck_assert_msg(strstr(replies[2], " 413 ") && strstr(replies[2], "too large"), "%s", replies[2]);
    ck_assert_msg(strstr(replies[3], " 200 ") && strstr(replies[3], "resumed"), "%s", replies[3]);
    http_server_run(srv); /* the last connection's close */
    ck_assert_int_eq(http_server_inflight(srv), 0);
    ck_assert_int_eq(released, 4);
    http_server_close(srv);
    http_server_orphan_held(srv);
    http_server_free(srv);
    sl_loop_free(loop);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, etag_matches);
    tcase_add_test(tc, server_round_trip);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
