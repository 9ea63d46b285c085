/* fuzz_rpc_queue.c - libFuzzer target for what another node's link hands the owner's end of
 * remote queue proxies (link_rpc_queue, src/link/rpc_queue.c), and for the machine names an
 * operator gives management objects (mq_fmt_machine_split, src/mq/formatname.c).
 *
 * The first byte picks the operation (queue.open, queue.purge, queue.close, queue.getinfo,
 * an unknown op, or the machine-name parser) and, for requests, the peer; the rest is the
 * request's JSON text, in which "$C" stands for the last context this process was given, so
 * purges and closes reach real contexts. The node persists across inputs (contexts pile up to
 * the per-peer limit and are closed by later inputs). Besides "no crash, no leak", it checks:
 * - every reply is a JSON object with a boolean "ok", and a failure carries an HRESULT;
 * - the contexts the module counts are exactly the open descriptors on the queues;
 * - a split machine name has a non-empty lower-case host and a port in 1..65535.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp/method.h"
#include "link/rpc_queue.h"
#include "mgmt/mgmt_internal.h"
#include "qm/qm.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static qm_node *N;
static qm_queue *Q[3];
static char last_ctx[64] = "0000000000000000:0000000000000000";

static void setup(void)
{
    N = qm_node_new("fuzz");
    qm_vhost *v = qm_vhost_create(N, "/");
    qm_vhost *o = qm_vhost_create(N, "other");
    static const char *names[] = {"q", "Orders", "x"};
    char err[256];
    for (int i = 0; i < 3; i++) {
        qm_queue_decl d = {names[i], strlen(names[i]), 0, 0, 0, NULL, (amqp_bytes){0}, 0};
        int created;
        CHECK(qm_queue_declare(i == 2 ? o : v, &d, &Q[i], &created, err, sizeof err) == SL_OK);
    }
    qm_queue_subqueue(Q[0], "sub", 3, 1);
}

static size_t open_descriptors(void)
{
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        for (qm_qdesc *d = Q[i]->descs; d; d = d->qnext)
            n++;
        qm_queue *s = qm_queue_subqueue(Q[i], "sub", 3, 0);
        for (qm_qdesc *d = s ? s->descs : NULL; d; d = d->qnext)
            n++;
    }
    return n;
}

static void machine(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    memcpy(s, p, n);
    s[n] = 0;
    char host[256];
    int port = 0;
    if (strlen(s) == n && mq_fmt_machine_split(s, host, sizeof host, &port) == 0) {
        CHECK(host[0]);
        CHECK(port >= 1 && port <= 65535);
        for (const char *c = host; *c; c++)
            CHECK(!(*c >= 'A' && *c <= 'Z'));
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!N)
        setup();
    if (size < 1)
        return 0;
    static const char *const ops[] = {"queue.open",    "queue.purge", "queue.close",
                                      "queue.getinfo", "queue.other", NULL};
    int op = data[0] % 6;
    if (!ops[op]) {
        machine(data + 1, size - 1);
        return 0;
    }
    /* the request text, "$C" replaced by the last context */
    size_t n = size - 1;
    char *text = malloc(n * 40 + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (data[1 + i] == '$' && i + 1 < n && data[2 + i] == 'C') {
            o += (size_t)sprintf(text + o, "%s", last_ctx);
            i++;
        } else {
            text[o++] = (char)data[1 + i];
        }
    }
    json_t *req = json_loadb(text, o, JSON_DECODE_ANY, NULL);
    free(text);
    const char *peer = (data[0] / 6) & 1 ? "node-b" : "node-a";
    char *out = link_rpc_queue(N, 0x1122334455667788ull, peer, "linkuser",
                               (data[0] / 12) & 1 ? 2 : 1, ops[op], req);
    if (req)
        json_decref(req);
    if (!out) {
        CHECK(op == 4); /* only unknown ops are left to the caller */
    } else {
        json_t *r = json_loads(out, 0, NULL);
        CHECK(json_is_object(r));
        json_t *ok = json_object_get(r, "ok");
        CHECK(json_is_boolean(ok));
        if (json_is_false(ok))
            CHECK(json_is_string(json_object_get(r, "hresult")));
        const char *c = json_string_value(json_object_get(r, "context"));
        if (c) {
            CHECK(strlen(c) == 33);
            snprintf(last_ctx, sizeof last_ctx, "%s", c);
        }
        json_decref(r);
        free(out);
    }
    CHECK(link_rpc_queue_count() == open_descriptors());
    if ((data[0] / 24) & 1)
        link_rpc_conn_gone(2); /* the second link goes: its contexts are closed */
    return 0;
}
