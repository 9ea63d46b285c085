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
#include "core/mem.h"
#include "http/browser.h"
#include "http/request.h"
#include "http/server.h"
#include "http/session.h"
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

/* ---- request helpers (http/request.c, http/browser.c) ---- */

START_TEST(decoding)
{
    char seg[] = "b%2Fc%41";
    ck_assert_int_eq(http_pct_decode(seg), 0);
    ck_assert_str_eq(seg, "b/cA");
    char bad[] = "a%zz", nul[] = "a%00b", cut[] = "a%4";
    ck_assert_int_eq(http_pct_decode(bad), -1);
    ck_assert_int_eq(http_pct_decode(nul), -1);
    ck_assert_int_eq(http_pct_decode(cut), -1);
    /* query values: '+' is a space, bad escapes and %00 stay as they are */
    char *q = http_query_decode("a+b%2Fc%zz%00%41");
    ck_assert_str_eq(q, "a b/c%zz%00A");
    sl_free(q);
}
END_TEST

static int no_x(const char *seg)
{
    return strcmp(seg, "x") != 0;
}

static void free_segs(char **segs, size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        sl_free(segs[i]);
    *n = 0;
}

START_TEST(path_split)
{
    char *segs[4];
    size_t n = 0;
    int pre;
    /* split first, decoded after: %2F stays inside its segment; the prefix only first */
    ck_assert_int_eq(http_path_split("//api/a/b%2Fc//api/", "api", &pre, segs, 4, &n, no_x), 0);
    ck_assert(pre && n == 3);
    ck_assert_str_eq(segs[0], "a");
    ck_assert_str_eq(segs[1], "b/c");
    ck_assert_str_eq(segs[2], "api");
    free_segs(segs, &n);
    ck_assert_int_eq(http_path_split("/a%70i/q", "api", &pre, segs, 4, &n, NULL), 0);
    ck_assert(!pre && n == 2 && !strcmp(segs[0], "api")); /* the prefix is matched raw */
    free_segs(segs, &n);
    ck_assert_int_eq(http_path_split("/", "api", &pre, segs, 4, &n, NULL), 0);
    ck_assert(!pre && n == 0);
    /* in order: what fails first decides */
    ck_assert_int_eq(http_path_split("/a/x/%zz", NULL, &pre, segs, 4, &n, no_x), -2);
    free_segs(segs, &n);
    ck_assert_int_eq(http_path_split("/a/%00/x", NULL, &pre, segs, 4, &n, no_x), -1);
    free_segs(segs, &n);
    ck_assert_int_eq(http_path_split("/api/1/2/3/4", "api", &pre, segs, 4, &n, NULL), 0);
    free_segs(segs, &n);
    ck_assert_int_eq(http_path_split("/1/2/3/4/x", NULL, &pre, segs, 4, &n, no_x), -1);
    ck_assert_uint_eq(n, 4);
    free_segs(segs, &n);
}
END_TEST

START_TEST(statuses)
{
    ck_assert_uint_eq(http_status_of(SL_OK), 200);
    ck_assert_uint_eq(http_status_of(SL_ERR_QUEUE_NOT_FOUND), 404);
    ck_assert_uint_eq(http_status_of(SL_ERR_ACCESS_REFUSED), 403);
    ck_assert_uint_eq(http_status_of(SL_ERR_RESOURCE_LOCKED), 409);
    ck_assert_uint_eq(http_status_of(SL_ERR_CONTENT_TOO_LARGE), 413);
    ck_assert_uint_eq(http_status_of(SL_ERR_HANDLE_LIMIT), 429);
    ck_assert_uint_eq(http_status_of(SL_ERR_RESOURCE), 503);
    ck_assert_uint_eq(http_status_of(SL_ERR_NOT_IMPLEMENTED), 501);
    ck_assert_uint_eq(http_status_of(SL_ERR_IO), 500);
    ck_assert_uint_eq(http_status_of(SL_ERR_PRECONDITION), 400);
    ck_assert_uint_eq(http_status_of_hresult(sl_err_get(SL_ERR_QUEUE_NOT_FOUND)->hresult), 404);
    ck_assert_uint_eq(http_status_of_hresult(0), 502);
    ck_assert_uint_eq(http_status_of_hresult(0x12345678ul), 502);
}
END_TEST

START_TEST(origin_is_host)
{
    ck_assert(http_origin_is_host("http://h:8080", "h:8080"));
    ck_assert(http_origin_is_host("HTTPS://H", "h"));
    ck_assert(http_origin_is_host("http://h", "h:80"));
    ck_assert(http_origin_is_host("https://h:443", "h"));
    ck_assert(!http_origin_is_host("http://h:443", "h"));
    ck_assert(!http_origin_is_host("http://evil", "h"));
    ck_assert(!http_origin_is_host("ftp://h", "h"));
    ck_assert(!http_origin_is_host("http://h", NULL));
}
END_TEST

/* ---- login sessions (http/session.c) ---- */

START_TEST(sessions)
{
    http_sessions *t = http_sessions_new();
    http_session_limits lim = {.idle_ms = 100, .max_ms = 1000, .max = 2};
    const uint8_t cred[] = {1, 2, 3};
    char a[HTTP_SESSION_TOKEN_LEN + 1], b[HTTP_SESSION_TOKEN_LEN + 1],
        c[HTTP_SESSION_TOKEN_LEN + 1];
    ck_assert_int_eq(http_session_new(t, &lim, "ann", cred, sizeof cred, 10, a), 0);
    ck_assert_uint_eq(strlen(a), HTTP_SESSION_TOKEN_LEN);
    ck_assert_uint_eq(strspn(a, "0123456789abcdef"), HTTP_SESSION_TOKEN_LEN);
    http_session *s = http_session_find(t, &lim, a, 50);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s->user, "ann");
    ck_assert(s->cred_len == 3 && !memcmp(s->cred, cred, 3));
    ck_assert_uint_eq(s->used_ms, 50);
    /* malformed or unknown tokens find nothing; uppercase is not the token issued */
    char upper[HTTP_SESSION_TOKEN_LEN + 1];
    for (size_t i = 0; i <= HTTP_SESSION_TOKEN_LEN; i++)
        upper[i] = (char)(a[i] >= 'a' && a[i] <= 'f' ? a[i] - 32 : a[i]);
    ck_assert_ptr_null(http_session_find(t, &lim, "abc", 50));
    ck_assert_ptr_null(http_session_find(t, &lim, NULL, 50));
    if (strcmp(upper, a))
        ck_assert_ptr_null(http_session_find(t, &lim, upper, 50));
    /* the cap: a third session ends the least recently used (b, not a used at 58) */
    ck_assert_int_eq(http_session_new(t, &lim, "bob", cred, 0, 55, b), 0);
    ck_assert_ptr_nonnull(http_session_find(t, &lim, a, 58));
    ck_assert_int_eq(http_session_new(t, &lim, "cy", cred, 0, 60, c), 0);
    ck_assert_uint_eq(http_sessions_count(t), 2);
    ck_assert_ptr_null(http_session_find(t, &lim, b, 60));
    ck_assert_ptr_nonnull(http_session_find(t, &lim, a, 60));
    /* idle past idle_ms: found no more, and gone */
    ck_assert_ptr_null(http_session_find(t, &lim, c, 161));
    ck_assert_uint_eq(http_sessions_count(t), 1);
    /* used often, still ended at max_ms after login; the sweep ends it too */
    for (uint64_t now = 100; now <= 1000; now += 90)
        ck_assert_ptr_nonnull(http_session_find(t, &lim, a, now));
    http_sessions_sweep(t, &lim, 1000);
    ck_assert_uint_eq(http_sessions_count(t), 1);
    http_sessions_sweep(t, &lim, 1011);
    ck_assert_uint_eq(http_sessions_count(t), 0);
    /* logout: the user's name back, once */
    ck_assert_int_eq(http_session_new(t, &lim, "dee", cred, 1, 2000, a), 0);
    char *user = http_session_end(t, a);
    ck_assert_str_eq(user, "dee");
    sl_free(user);
    ck_assert_ptr_null(http_session_end(t, a));
    ck_assert_ptr_null(http_session_end(t, "zz"));
    http_session_new(t, &lim, "eve", cred, 3, 3000, a); /* freed with the table */
    http_sessions_free(t);
    http_sessions_free(NULL);
    char cookie[256];
    http_session_cookie(cookie, sizeof cookie, "s", "ab", 60, 0);
    ck_assert_str_eq(cookie, "s=ab; Path=/; HttpOnly; SameSite=Strict; Max-Age=60");
    http_session_cookie(cookie, sizeof cookie, "s", "", 0, 1);
    ck_assert_str_eq(cookie, "s=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0; Secure");
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
static char replies[8][8192];
static int stream_done;

/* /stream's producer: "[0,1,...,999]", a few items per call */
static int t_more(void *ctx, sl_buf *out, size_t want)
{
    int *next = ctx;
    char item[16];
    if (*next == 0)
        sl_buf_put_u8(out, '[');
    for (int k = 0; k < 7 && sl_buf_unread(out) < want; k++, (*next)++) {
        if (*next == 1000) {
            sl_buf_put_u8(out, ']');
            return 0;
        }
        int n = snprintf(item, sizeof item, "%s%d", *next ? "," : "", *next);
        sl_buf_append(out, item, (size_t)n);
    }
    return 1;
}

static void t_stream_done(void *ctx)
{
    sl_free(ctx);
    stream_done++;
}

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
        if (h->held) { /* /held: the answer kept before it was suspended */
            r->answered = 1;
            return http_send_held(h);
        }
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
    if (!strcmp(url, "/held")) {
        http_hold(h, 202, http_response_text(strdup("kept"), 4, "text/plain", NULL));
        held = r;
        http_suspend(h);
        sl_timer_start(loop, &resume_t, sl_now_ms() + 20);
        return MHD_YES;
    }
    if (!strcmp(url, "/query")) {
        const char *a = http_req_query(h, "a"), *b = http_req_query(h, "b");
        snprintf(text, sizeof text, "a=[%s] b=[%s] c=%s", a ? a : "-", b ? b : "-",
                 http_req_query(h, "c") ? "yes" : "none");
        return reply(r, 200, text);
    }
    if (!strcmp(url, "/browser")) {
        char why[200] = "";
        int cross = http_cross_origin(h->conn, why, sizeof why);
        snprintf(text, sizeof text, "cross=%d page=%d json=%d tls=%d addr=%d (%.20s)", cross,
                 http_from_a_page(h->conn, "X-Guard"), http_content_type_json(h->conn, h->body.len),
                 http_req_over_tls(h->conn), http_req_client_addr(h->conn) != NULL, why);
        return reply(r, 200, text);
    }
    if (!strcmp(url, "/stream")) {
        struct MHD_Response *resp = http_response_stream(
            64, t_more, sl_xcalloc(1, sizeof(int)), t_stream_done, "application/json", "no-cache");
        enum MHD_Result rc = MHD_queue_response(h->conn, 200, resp);
        MHD_destroy_response(resp);
        r->answered = 1;
        return rc;
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
    http_call(port,
              "POST /browser HTTP/1.0\r\nOrigin: http://evil.example\r\nHost: 127.0.0.1\r\n"
              "Content-Type: application/json; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}",
              replies[4], sizeof replies[4]);
    http_call(port, "GET /stream HTTP/1.0\r\n\r\n", replies[5], sizeof replies[5]);
    http_call(port, "POST /held HTTP/1.0\r\n\r\n", replies[6], sizeof replies[6]);
    http_call(port, "GET /query?a=x+y%2Fz&b= HTTP/1.0\r\n\r\n", replies[7], sizeof replies[7]);
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
    ck_assert_msg(strstr(replies[4], "cross=1 page=1 json=1 tls=0 addr=1 (Origin http://evil") !=
                      NULL,
                  "%s", replies[4]);
    /* the streamed body whole, in order, with the common headers */
    const char *body = strstr(replies[5], "\r\n\r\n");
    ck_assert_msg(body && strstr(replies[5], " 200 ") &&
                      strstr(replies[5], "X-Content-Type-Options: nosniff") &&
                      strstr(replies[5], "Content-Type: application/json"),
                  "%s", replies[5]);
    body += 4;
    ck_assert_int_eq(strncmp(body, "[0,1,2,", 7), 0);
    ck_assert_msg(strstr(body, ",499,500,501,") && strlen(body) > 5 &&
                      !strcmp(body + strlen(body) - 5, ",999]"),
                  "%s", body);
    ck_assert_msg(strstr(replies[6], " 202 ") && strstr(replies[6], "\r\n\r\nkept"), "%s",
                  replies[6]);
    ck_assert_msg(strstr(replies[7], "a=[x y/z] b=[] c=none") != NULL, "%s", replies[7]);
    http_server_run(srv); /* the last connection's close */
    ck_assert_int_eq(http_server_inflight(srv), 0);
    ck_assert_int_eq(released, 8);
    ck_assert_int_eq(stream_done, 1);
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
    tcase_add_test(tc, decoding);
    tcase_add_test(tc, path_split);
    tcase_add_test(tc, statuses);
    tcase_add_test(tc, origin_is_host);
    tcase_add_test(tc, sessions);
    tcase_add_test(tc, server_round_trip);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
