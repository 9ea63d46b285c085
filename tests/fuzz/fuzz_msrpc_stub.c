/* fuzz_msrpc_stub.c - libFuzzer target for the stub decoders of the MSMQ RPC interfaces'
 * methods (src/rpc/qmmgmt.c, qmcomm*.c) and the endpoint mapper's (src/rpc/server.c), run for real
 * on a node: a broker with its management API and the DCE/RPC door (msrpc.auth = none, the caller
 * is msrpc.user "guest", an administrator), two queues with messages, and a queue handle opened
 * through rpc_QMOpenQueueInternal. fuzz_dcerpc.c covers the PDUs; here the stub goes straight to
 * the operation through rpc_server_invoke (the dispatch a request takes, without a socket).
 *
 * Input: byte 0 picks the interface and opnum (qmmgmt 0-1, qmcomm 12 14 15 19 20 26 27 28
 * 31, epm 2-3, and one opnum outside each table); byte 1's bit 0 a big-endian stub, bit 1
 * puts the open handle's context over the stub's first 20 bytes (so purge, close and
 * handle-to-format-name reach a real handle); the rest is the stub.
 *
 * Checks, besides "no crash, no leak":
 * - a fault carries one of the statuses docs/msrpc.md documents (bad stub data, invalid
 *   bound, context mismatch, op range, access denied for epm's private opnums);
 * - a response is 4-aligned, at least its trailing HRESULT / status;
 * - a fault changes nothing: every queue's depth and the open descriptors are as before.
 *
 * Traffic stays on loopback: an open of another node's queue makes the node start a link to
 * the format name's host, which a fuzzed stub names at random. This target's own getaddrinfo,
 * connect, sendto and sendmsg (they take precedence over libc's for the whole binary) refuse
 * anything but numeric loopback addresses, so no lookup and no packet leaves the machine.
 *
 * SLUICE_FUZZ_TRACE=1 prints each call's status and trailing HRESULT.
 * SLUICE_FUZZ_WRITE_SEEDS=DIR writes a valid stub for each method (the shapes the impacket
 * tests in tests/integration/test_msrpc*.py send) and exits: that is how
 * tests/fuzz/corpus/msrpc_stub/ was made.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "link/link.h"
#include "node/node.h"
#include "node/config.h"
#include "core/clock.h"
#include "core/log.h"
#include "mgmt/mgmt_internal.h"
#include "rpc/msrpc.h"
#include "qm/qm.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

enum { IF_QMMGMT, IF_QMCOMM, IF_EPM };
static const struct {
    int iface;
    uint16_t opnum;
} OPS[] = {{IF_QMMGMT, 0},  {IF_QMMGMT, 1},  {IF_QMCOMM, 12}, {IF_QMCOMM, 14},
           {IF_QMCOMM, 15}, {IF_QMCOMM, 19}, {IF_QMCOMM, 20}, {IF_QMCOMM, 26},
           {IF_QMCOMM, 27}, {IF_QMCOMM, 28}, {IF_QMCOMM, 31}, {IF_EPM, 2},
           {IF_EPM, 3},     {IF_QMMGMT, 2},  {IF_QMCOMM, 0},  {IF_EPM, 0}};
#define N_OPS (sizeof OPS / sizeof OPS[0])

/* ---- loopback only (see the top): the binary's own network entry points ---- */

static int loopback_addr(const struct sockaddr *sa)
{
    if (!sa)
        return 1; /* a connected socket's send: its connect was checked */
    if (sa->sa_family == AF_UNIX)
        return 1;
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return 0;
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
    struct in_addr a4;
    struct in6_addr a6;
    int ok = !node || (inet_pton(AF_INET, node, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127) ||
             (inet_pton(AF_INET6, node, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6));
    if (!ok)
        return EAI_NONAME;
    int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **) =
        (int (*)(const char *, const char *, const struct addrinfo *, struct addrinfo **))dlsym(
            RTLD_NEXT, "getaddrinfo");
    return real ? real(node, service, hints, res) : EAI_FAIL;
}

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    if (!sa || !loopback_addr(sa)) {
        errno = ENETUNREACH;
        return -1;
    }
    int (*real)(int, const struct sockaddr *, socklen_t) =
        (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd, sa, len);
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa,
               socklen_t len)
{
    if (!loopback_addr(sa)) {
        errno = ENETUNREACH;
        return -1;
    }
    ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t) =
        (ssize_t(*)(int, const void *, size_t, int, const struct sockaddr *, socklen_t))dlsym(
            RTLD_NEXT, "sendto");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd, buf, n, flags, sa, len);
}

ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
    if (m && !loopback_addr((const struct sockaddr *)m->msg_name)) {
        errno = ENETUNREACH;
        return -1;
    }
    ssize_t (*real)(int, const struct msghdr *, int) =
        (ssize_t(*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd, m, flags);
}

static node_config CFG;
static sl_node *B;
static mgmt *M;
static msrpc *RPC; /* the DCE/RPC door, beside the HTTP API as main starts them */
static rpc_syntax QMMGMT = {.major = 1}, QMCOMM = {.major = 1};
static qm_queue *Q[2];
static rpc_session_info WHO = {.id = 7, .loopback = 1, .user = "guest", .peer = "fuzz"};
static uint8_t CTX[20]; /* the open handle's context */
static int have_ctx;

static void put_u32(sl_buf *b, uint32_t v)
{
    ndr_wr w;
    rpc_ndr_wr_init(&w, b);
    w.base = 0;
    rpc_ndr_put_u32(&w, v);
}

/* a QUEUE_FORMAT of type DIRECT naming a private queue of this node */
static void direct_format(ndr_wr *w, const char *name)
{
    rpc_ndr_put_u8(w, 3);
    rpc_ndr_put_u8(w, 0);
    rpc_ndr_put_u16(w, 0);
    rpc_ndr_put_u8(w, 3);
    rpc_ndr_wr_align(w, 4);
    rpc_ndr_put_ref(w);
    rpc_ndr_put_wstring(w, name);
}

static void stub_open(sl_buf *b, const char *fmt)
{
    ndr_wr w;
    rpc_ndr_wr_init(&w, b);
    direct_format(&w, fmt);
    rpc_ndr_wr_align(&w, 4);
    rpc_ndr_put_u32(&w, 1); /* MQ_RECEIVE_ACCESS */
    rpc_ndr_put_u32(&w, 0); /* MQ_DENY_NONE */
    rpc_ndr_put_u32(&w, 0); /* hRemoteQueue */
    rpc_ndr_put_u32(&w, 0); /* lplpRemoteQueueName: NULL */
    rpc_ndr_put_u32(&w, 0); /* dwpQueue */
    static const uint8_t guid[16] = {1, 2, 3};
    rpc_ndr_put_bytes(&w, guid, 16);
    rpc_ndr_put_wstring(&w, "fuzz");
    rpc_ndr_wr_align(&w, 4);
    rpc_ndr_put_u32(&w, 0);
    rpc_ndr_put_u32(&w, 0);
}

static void stub_mgmt_object(ndr_wr *w, int queue)
{
    rpc_ndr_put_u16(w, queue ? 2 : 1);
    rpc_ndr_put_u16(w, queue ? 2 : 1);
    if (!queue) {
        rpc_ndr_put_u32(w, 0);
        return;
    }
    rpc_ndr_put_ref(w);
    direct_format(w, "OS:.\\private$\\q");
}

static void stub_get_info(sl_buf *b, int queue)
{
    ndr_wr w;
    rpc_ndr_wr_init(&w, b);
    stub_mgmt_object(&w, queue);
    rpc_ndr_wr_align(&w, 4);
    rpc_ndr_put_u32(&w, 2);
    rpc_ndr_put_u32(&w, 2);
    rpc_ndr_put_u32(&w, queue ? 4 : 1); /* QUEUE_LOCATION / MSMQ_ACTIVEQUEUES */
    rpc_ndr_put_u32(&w, queue ? 6 : 2); /* QUEUE_XACT / MSMQ_PRIVATEQ */
    rpc_ndr_put_u32(&w, 2);
    for (int i = 0; i < 2; i++) {
        rpc_ndr_wr_align(&w, 8);
        rpc_ndr_put_u16(&w, MSRPC_VT_NULL);
        rpc_ndr_put_u16(&w, 0);
        rpc_ndr_put_u32(&w, 0);
        rpc_ndr_put_u16(&w, MSRPC_VT_NULL);
    }
}

static void stub_action(sl_buf *b, int queue, const char *act)
{
    ndr_wr w;
    rpc_ndr_wr_init(&w, b);
    stub_mgmt_object(&w, queue);
    rpc_ndr_wr_align(&w, 4);
    rpc_ndr_put_wstring(&w, act);
}

static uint32_t call(int iface, uint16_t opnum, const uint8_t *p, size_t n, int le, sl_buf *out)
{
    return rpc_server_invoke(RPC->srv, &WHO,
                             iface == IF_QMMGMT   ? &QMMGMT
                             : iface == IF_QMCOMM ? &QMCOMM
                                                  : NULL,
                             opnum, p, n, le, out);
}

/* Open (again) the handle inputs may name. */
static void open_handle(void)
{
    sl_buf in, out;
    sl_buf_init(&in);
    sl_buf_init(&out);
    stub_open(&in, "OS:.\\private$\\q");
    uint32_t st = call(IF_QMCOMM, 19, sl_buf_head(&in), sl_buf_unread(&in), 1, &out);
    CHECK(st == 0 && sl_buf_unread(&out) == 32);
    const uint8_t *o = sl_buf_head(&out);
    CHECK(o[28] == 0 && o[29] == 0 && o[30] == 0 && o[31] == 0); /* S_OK */
    memcpy(CTX, o + 8, 20);
    have_ctx = 1;
    sl_buf_free(&in);
    sl_buf_free(&out);
}

static void publish(qm_vhost *v, const char *rk, int n)
{
    qm_exchange *x = qm_exchange_find(v, "", 0);
    CHECK(x);
    for (int i = 0; i < n; i++) {
        static const uint8_t no_props[2] = {0, 0}; /* property flags: none */
        qm_message *msg = qm_message_new(amqp_cstr(""), amqp_cstr(rk), no_props, 2, 1);
        qm_msg_body(msg)[0] = 'x';
        size_t routed = 0;
        CHECK(qm_publish(x, msg, (amqp_bytes){0}, NULL, &routed) == SL_OK && routed == 1);
        qm_message_unref(msg);
    }
}

static void setup(void)
{
    sl_log_min_level = SL_LOG_ERROR;
    node_config_defaults(&CFG);
    char dir[] = "/tmp/fuzz-msrpc-stub-XXXXXX";
    CHECK(mkdtemp(dir));
    free(CFG.data_dir);
    CFG.data_dir = strdup(dir);
    CFG.mgmt_port = 0;
    CFG.msrpc_port = 0;
    CFG.disk_free_limit = 0;
    CFG.disk_reserve = 0;
    B = node_new(&CFG);
    CHECK(B && node_open(B, NULL) == 0 && link_start(B) == 0);
    char err[512];
    mq_state *mqs = mq_new(B);
    M = mgmt_start(B, mqs, err, sizeof err);
    if (!M || rpc_msrpc_start(&RPC, mqs, err, sizeof err) < 0)
        fprintf(stderr, "mgmt_start / rpc_msrpc_start: %s\n", err);
    CHECK(M && RPC);
    WHO.srv = RPC->srv;
    rpc_uuid_parse("41208ee0-e970-11d1-9b9e-00e02c064c39", QMMGMT.uuid);
    rpc_uuid_parse("fdb3a030-065f-11d1-bb9b-00a024ea5525", QMCOMM.uuid);
    qm_vhost *v = qm_vhost_find(B->qm, "/", 1);
    CHECK(v);
    static const char *names[] = {"q", "Orders"};
    for (int i = 0; i < 2; i++) {
        qm_queue_decl d = {names[i], strlen(names[i]), 0, 0, 0, NULL, (amqp_bytes){0}, 0};
        int created;
        CHECK(qm_queue_declare(v, &d, &Q[i], &created, err, sizeof err) == SL_OK);
        publish(v, names[i], 3 + i);
    }
    open_handle();
}

/* TIDY answers when compaction is done (slices on the broker's loop): run the loop, looking
 * every 5 ms, until it has (10 s at most). */
static uint64_t tidy_deadline;
static const msrpc_pending *tidy_call; /* TIDY's call: rpc_msrpc_pending_new put it first */

static int pending(const msrpc_pending *p)
{
    for (const msrpc_pending *q = RPC->pending; q; q = q->next)
        if (q == p)
            return 1;
    return 0;
}

static void look(sl_loop *l, sl_timer *t)
{
    CHECK(sl_now_ms() < tidy_deadline);
    if (!pending(tidy_call))
        sl_loop_stop(l);
    else
        sl_timer_start(l, t, sl_now_ms() + 5);
}

static void run_until_answered(void)
{
    sl_timer t;
    sl_timer_init(&t, look, NULL);
    tidy_deadline = sl_now_ms() + 10000;
    tidy_call = RPC->pending;
    sl_timer_start(B->loop, &t, sl_now_ms() + 1);
    sl_loop_run(B->loop);
    if (sl_timer_armed(&t))
        sl_timer_stop(B->loop, &t);
}

/* What a purge takes at once: its positions wait for the store's sync as purge-pending
 * (counted by MESSAGE_COUNT until then), so the depth compared is what is still ready or
 * locked. */
static uint64_t depth(const qm_queue *q)
{
    return q->n_ready + q->n_locked;
}

static size_t open_descriptors(void)
{
    size_t n = 0;
    for (int i = 0; i < 2; i++)
        for (qm_qdesc *d = Q[i]->descs; d; d = d->qnext)
            n++;
    return n;
}

static void write_seed(const char *dir, const char *name, int sel, int flags, sl_buf *stub)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f);
    fputc(sel, f);
    fputc(flags, f);
    fwrite(sl_buf_head(stub), 1, sl_buf_unread(stub), f);
    fclose(f);
    sl_buf_free(stub);
    sl_buf_init(stub);
}

static void write_seeds(const char *dir)
{
    sl_buf b;
    sl_buf_init(&b);
    stub_get_info(&b, 0);
    write_seed(dir, "qmmgmt-0-machine", 0, 0, &b);
    stub_get_info(&b, 1);
    write_seed(dir, "qmmgmt-0-queue", 0, 0, &b);
    stub_action(&b, 1, "PAUSE"); /* refused: not an outgoing queue */
    write_seed(dir, "qmmgmt-1-pause", 1, 0, &b);
    stub_action(&b, 1, "RESUME");
    write_seed(dir, "qmmgmt-1-resume", 1, 0, &b);
    stub_action(&b, 0, "CONNECT");
    write_seed(dir, "qmmgmt-1-connect", 1, 0, &b);
    stub_action(&b, 0, "TIDY"); /* answered later */
    write_seed(dir, "qmmgmt-1-tidy", 1, 0, &b);
    ndr_wr w;
    rpc_ndr_wr_init(&w, &b); /* R_QMObjectPathToObjectFormat(path, QUEUE_FORMAT* out) */
    rpc_ndr_put_wstring(&w, ".\\private$\\q");
    rpc_ndr_wr_align(&w, 4);
    rpc_ndr_put_u32(&w, 1); /* ObjType 1 */
    rpc_ndr_put_u32(&w, 1); /* its discriminant */
    rpc_ndr_put_ref(&w);    /* pQueueFormat: QUEUE_FORMAT_TYPE_UNKNOWN */
    rpc_ndr_put_u32(&w, 0);
    rpc_ndr_put_u32(&w, 0);
    write_seed(dir, "qmcomm-12", 2, 0, &b);
    put_u32(&b, 16); /* R_QMGetTmWhereabouts(cbBufSize) */
    write_seed(dir, "qmcomm-14", 3, 0, &b);
    static const uint8_t uow[16] = {9};
    sl_buf_append(&b, uow, 16); /* R_QMEnlistTransaction(uow, cbCookie, cookie) */
    put_u32(&b, 4);
    put_u32(&b, 4);
    put_u32(&b, 0x01020304);
    write_seed(dir, "qmcomm-15", 4, 0, &b);
    stub_open(&b, "OS:.\\private$\\q");
    write_seed(dir, "qmcomm-19-q", 5, 0, &b);
    stub_open(&b, "OS:.\\private$\\Orders");
    write_seed(dir, "qmcomm-19-orders", 5, 0, &b);
    static const uint8_t zero[20];
    sl_buf_append(&b, zero, 20);
    write_seed(dir, "qmcomm-20", 6, 2, &b);
    sl_buf_append(&b, zero, 20); /* rpc_ACHandleToFormatName(h, len, [unique] buf, plen) */
    put_u32(&b, 64);
    put_u32(&b, 0x20000); /* the buffer: conformant varying, 64 units */
    put_u32(&b, 64);
    put_u32(&b, 0);
    put_u32(&b, 64);
    for (int i = 0; i < 32; i++)
        put_u32(&b, 0);
    put_u32(&b, 64);
    write_seed(dir, "qmcomm-26", 7, 2, &b);
    sl_buf_append(&b, zero, 20);
    write_seed(dir, "qmcomm-27", 8, 2, &b);
    put_u32(&b, 0); /* R_QMQueryQMRegistryInternal(type) */
    write_seed(dir, "qmcomm-28", 9, 0, &b);
    put_u32(&b, 0); /* R_QMGetRTQMServerPort(fIP) */
    write_seed(dir, "qmcomm-31", 10, 0, &b);
    /* ept_map(obj = NULL, tower = NULL, handle, max_towers) */
    put_u32(&b, 0);
    put_u32(&b, 0);
    sl_buf_append(&b, zero, 20);
    put_u32(&b, 4);
    write_seed(dir, "epm-3", 12, 0, &b);
    /* ept_lookup(inquiry 0, obj NULL, if NULL, vers 0, handle, max 4) */
    put_u32(&b, 0);
    put_u32(&b, 0);
    put_u32(&b, 0);
    put_u32(&b, 0);
    sl_buf_append(&b, zero, 20);
    put_u32(&b, 4);
    write_seed(dir, "epm-2", 11, 0, &b);
    sl_buf_free(&b);
}

static int documented_fault(int iface, uint32_t st)
{
    switch (st) {
    case NCA_S_FAULT_NDR:
    case MSRPC_S_INVALID_BOUND:
    case NCA_S_FAULT_CONTEXT_MISMATCH:
    case NCA_S_OP_RNG_ERROR:
        return 1;
    case NCA_S_ACCESS_DENIED:
        return iface == IF_EPM;
    default:
        return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!B) {
        const char *seeds = getenv("SLUICE_FUZZ_WRITE_SEEDS");
        if (seeds) {
            write_seeds(seeds);
            exit(0);
        }
        setup();
    }
    if (size < 2)
        return 0;
    int iface = OPS[data[0] % N_OPS].iface;
    uint16_t opnum = OPS[data[0] % N_OPS].opnum;
    int le = !(data[1] & 1);
    size_t n = size - 2;
    uint8_t *stub = malloc(n ? n : 1);
    memcpy(stub, data + 2, n);
    if ((data[1] & 2) && have_ctx)
        memcpy(stub, CTX, n < 20 ? n : 20);
    uint64_t before[2];
    for (int i = 0; i < 2; i++)
        before[i] = depth(Q[i]);
    size_t descs = open_descriptors();

    sl_buf out;
    sl_buf_init(&out);
    uint32_t st = call(iface, opnum, stub, n, le, &out);
    if (getenv("SLUICE_FUZZ_TRACE")) { /* what each input got: to check the seeds */
        const uint8_t *o = sl_buf_head(&out);
        size_t len = sl_buf_unread(&out);
        fprintf(stderr, "iface %d opnum %u: status 0x%08x, %zu byte(s), last 0x%08x\n", iface,
                opnum, st, len,
                st == 0 && len >= 4 ? (uint32_t)o[len - 4] | (uint32_t)o[len - 3] << 8 |
                                          (uint32_t)o[len - 2] << 16 | (uint32_t)o[len - 1] << 24
                                    : 0);
    }
    if (st == 0) {
        size_t len = sl_buf_unread(&out);
        CHECK(len >= 4 && len % 4 == 0);
    } else if (st == RPC_DEFERRED) {
        /* answered later: TIDY (run here until it answers; the answer finds no session), and
         * an open of another node's queue (a format name with a computer other than this
         * node's: the link's answer or its timeout comes on a loop turn this target does not
         * run, so such handles stay busy, bounded by handle.limit) */
        CHECK((iface == IF_QMMGMT && opnum == 1) || (iface == IF_QMCOMM && opnum == 19));
        if (opnum == 1)
            run_until_answered();
    } else {
        CHECK(documented_fault(iface, st));
        for (int i = 0; i < 2; i++)
            CHECK(depth(Q[i]) == before[i]);
        CHECK(open_descriptors() == descs);
    }
    sl_buf_free(&out);
    free(stub);
    /* the handle closed (or never opened): open it again; refill a purged queue */
    if (!open_descriptors())
        open_handle();
    qm_vhost *v = qm_vhost_find(B->qm, "/", 1);
    for (int i = 0; i < 2; i++) {
        if (Q[i]->n_purge_pending)
            node_sync(B); /* the purge completes (the loop does it in sluiced) */
        if (!depth(Q[i]))
            publish(v, Q[i]->name, 3 + i);
    }
    return 0;
}
