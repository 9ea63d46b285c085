/* fuzz_dcerpc.c - libFuzzer target for the DCE/RPC connection-oriented codec
 * (src/rpc/dcerpc.c) and the NDR20 reader (src/rpc/ndr.c): the input is what a client sends
 * on one connection, fed in chunks whose sizes the first byte picks. Every complete call's
 * stub is read the way the qmmgmt stubs read theirs (a MGMT_OBJECT's integers, a string) and
 * answered with a response of a size taken from the stub. Besides "no crash, no leak", it
 * checks:
 * - every PDU the codec writes is well-formed: version 5.0, little endian, a frag_length that
 *   adds up and never exceeds the negotiated max_xmit;
 * - a gathered call never holds more than max_call bytes;
 * - after RPC_STEP_CLOSE nothing more is read (the caller would close).
 * With the first byte's top bit set, NTLM is offered and required, so that bind verifiers,
 * AUTH3 and the refusals of unauthenticated calls are reached too (fuzz_ntlm goes deeper).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/msrpc.h"
#include "rpc/dcerpc.h"
#include "rpc/ndr.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static rpc_iface QMMGMT, QMCOMM;
static const rpc_iface *IFACES[2] = {&QMMGMT, &QMCOMM};

static int any_user(void *ctx, const char *user, uint8_t out[16], char *why, size_t whylen)
{
    (void)ctx;
    (void)why;
    (void)whylen;
    memset(out, 0x5a, 16);
    return user[0] ? 0 : -1;
}

static void check_out(const rpc_conn *c)
{
    size_t off = c->out.off;
    while (off < c->out.len) {
        const uint8_t *p = c->out.data + off;
        CHECK(c->out.len - off >= 16);
        CHECK(p[0] == 5 && p[1] == 0 && p[4] == 0x10);
        size_t n = p[8] | p[9] << 8;
        CHECK(n >= 16 && n <= c->out.len - off);
        CHECK(p[2] != RPC_PT_RESPONSE || n <= c->max_xmit);
        off += n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!QMMGMT.n_ops) {
        rpc_uuid_parse("41208ee0-e970-11d1-9b9e-00e02c064c39", QMMGMT.id.uuid);
        QMMGMT.id.major = 1;
        QMMGMT.n_ops = 2;
        rpc_uuid_parse("fdb3a030-065f-11d1-bb9b-00a024ea5525", QMCOMM.id.uuid);
        QMCOMM.id.major = 1;
        QMCOMM.n_ops = 32;
    }
    if (size < 1)
        return 0;
    size_t chunk = 1 + data[0] % 97;
    /* the first byte's top bit: NTLM offered and required (bind verifiers, AUTH3, refusals) */
    rpc_conn_cfg cfg = {.ifaces = IFACES,
                        .n_ifaces = 2,
                        .max_frag = 1432,
                        .max_call = 8192,
                        .max_frags = 16,
                        .sec_addr = "2103",
                        .ntlm = data[0] >> 7,
                        .require_auth = data[0] >> 7,
                        .min_level = RPC_AUTH_LEVEL_CONNECT,
                        .computer = "fuzz",
                        .nt_hash = any_user};
    rpc_conn c;
    rpc_conn_init(&c, &cfg, 1);
    sl_buf in;
    sl_buf_init(&in);
    size_t pos = 1;
    int closed = 0;
    char why[400];
    while (pos < size && !closed) {
        size_t n = size - pos < chunk ? size - pos : chunk;
        sl_buf_append(&in, data + pos, n);
        pos += n;
        for (;;) {
            size_t used = 0;
            rpc_call call;
            enum rpc_step st = rpc_conn_step(&c, sl_buf_head(&in), sl_buf_unread(&in), &used, &call,
                                             why, sizeof why);
            CHECK(used <= sl_buf_unread(&in));
            CHECK(c.stub.len <= cfg.max_call);
            if (st == RPC_STEP_CALL) {
                ndr_rd r;
                rpc_ndr_rd_init(&r, call.stub, call.stub_len, call.le);
                char obj[1300], s[256];
                rpc_msrpc_read_mgmt_object(NULL, &r, obj, sizeof obj);
                CHECK(strlen(obj) < sizeof obj);
                rpc_ndr_rd_align(&r, 4);
                rpc_ndr_wstring(&r, s, sizeof s);
                if (!r.err)
                    CHECK(strlen(s) < sizeof s);
                CHECK(r.pos <= r.len);
                static uint8_t reply[20000];
                size_t rl = (call.stub_len * 131 + r.pos) % sizeof reply;
                rpc_conn_respond(&c, &call, reply, rl);
            }
            sl_buf_consume(&in, used);
            check_out(&c);
            if (st == RPC_STEP_CLOSE) {
                closed = 1;
                break;
            }
            if (st == RPC_STEP_MORE)
                break;
            sl_buf_consume(&c.out, sl_buf_unread(&c.out));
        }
    }
    sl_buf_free(&in);
    rpc_conn_free(&c);
    return 0;
}
