/* fuzz_proxy.c - libFuzzer target for the bytes a follower's front door parses itself
 * (src/cluster/proxy.h): the HTTP request line (GET /api/cluster is answered locally with no
 * leader), the no-leader AMQP exchange, and a member's "HOST:PORT" addresses.
 *
 * Input: the first octet picks the part; for the AMQP exchange the next one is a chunk size,
 * so the stream arrives split as a socket would split it. Checks: no crash or over-read
 * (ASan/UBSan), the request-line answer is one of the four, a complete line's answer does not
 * change with more bytes after it, the exchange never claims more than it was given, and
 * feeding in chunks ends as feeding at once does.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "cluster/proxy.h"
#include "core/buf.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void fuzz_route(const uint8_t *d, size_t n)
{
    int r = cl_proxy_http_route((const char *)d, n);
    CHECK(r == CL_HTTP_MORE || r == CL_HTTP_CLUSTER || r == CL_HTTP_OTHER || r == CL_HTTP_BAD);
    const uint8_t *nl = memchr(d, '\n', n);
    if (nl && r != CL_HTTP_BAD) {
        size_t line = (size_t)(nl - d) + 1;
        CHECK(cl_proxy_http_route((const char *)d, line) == r);
    }
}

/* Feed in chunks of `chunk` bytes, keeping unconsumed bytes as a socket buffer would. */
static int feed(const uint8_t *d, size_t n, size_t chunk, sl_buf *out)
{
    int step = 0;
    size_t have = 0, off = 0;
    while (have < n) {
        have = have + chunk < n ? have + chunk : n;
        size_t used = 0;
        int done = cl_proxy_amqp_refusal(&step, d + off, have - off, &used, out);
        CHECK(used <= have - off);
        CHECK(step >= 0 && step <= 2);
        off += used;
        if (done)
            return 1;
    }
    return 0;
}

static void fuzz_amqp(const uint8_t *d, size_t n)
{
    if (!n)
        return;
    size_t chunk = (size_t)d[0] + 1;
    d++;
    n--;
    sl_buf a, b;
    sl_buf_init(&a);
    sl_buf_init(&b);
    int da = feed(d, n, n ? n : 1, &a);
    int db = feed(d, n, chunk, &b);
    CHECK(da == db);
    CHECK(a.len == b.len && (a.len == 0 || !memcmp(a.data, b.data, a.len)));
    sl_buf_free(&a);
    sl_buf_free(&b);
}

static void fuzz_member(const uint8_t *d, size_t n)
{
    cl_status st;
    memset(&st, 0, sizeof st);
    st.n_nodes = 1;
    size_t k = n < sizeof st.nodes[0].amqp - 1 ? n : sizeof st.nodes[0].amqp - 1;
    memcpy(st.nodes[0].amqp, d, k);
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
    s6.sin6_addr.s6_addr[15] = 1;
    struct sockaddr_in s4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    int r6 = cl_proxy_from_member(&st, NULL, (struct sockaddr *)&s6);
    int r4 = cl_proxy_from_member(&st, NULL, (struct sockaddr *)&s4);
    CHECK((r6 == 0 || r6 == 1) && (r4 == 0 || r4 == 1));
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (!n)
        return 0;
    switch (d[0] % 3) {
    case 0:
        fuzz_route(d + 1, n - 1);
        break;
    case 1:
        fuzz_amqp(d + 1, n - 1);
        break;
    default:
        fuzz_member(d + 1, n - 1);
        break;
    }
    return 0;
}
