/* fuzz_repl.c - libFuzzer target for the replication port's frames (src/cluster/wire.c): what
 * a peer on the replication port can send. Parses every frame of the input in turn; each
 * whole one is encoded again and must give the same bytes (the encoding is canonical), and
 * its pointers must lie inside the input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/wire.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static char *dup_name(const uint8_t *p, uint16_t n)
{
    char *s = malloc((size_t)n + 1);
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    for (int i = 0; i < 64 && off < size; i++) {
        cl_wire_msg m;
        size_t used = 0;
        char err[128];
        int rc = cl_wire_parse(data + off, size - off, &m, &used, err, sizeof err);
        if (rc <= 0)
            break;
        CHECK(used >= 5 && used <= size - off);
        sl_buf b;
        sl_buf_init(&b);
        char *n1 = NULL, *n2 = NULL;
        switch (m.type) {
        case CL_WIRE_HELLO:
            n1 = dup_name(m.node, m.node_len);
            n2 = dup_name(m.cluster, m.cluster_len);
            CHECK(strlen(n1) == m.node_len && strlen(n2) == m.cluster_len);
            if (m.version == CL_WIRE_VERSION)
                cl_wire_put_hello(&b, n1, n2, m.a, m.b);
            break;
        case CL_WIRE_START:
            cl_wire_put_start(&b, m.epoch, m.session, m.a, m.b, m.c, m.d);
            break;
        case CL_WIRE_DATA:
            CHECK(m.meta >= data + off && m.msgs + m.msgs_len <= data + off + used);
            cl_wire_put_data(&b, m.epoch, m.session, m.a, m.b, m.meta, m.meta_len, m.msgs,
                             m.msgs_len);
            break;
        case CL_WIRE_PING:
            cl_wire_put_ping(&b, m.epoch, m.session, m.a);
            break;
        case CL_WIRE_ACK:
            cl_wire_put_ack(&b, m.epoch, m.session, m.a, m.b);
            break;
        case CL_WIRE_REFUSE:
            n1 = dup_name(m.reason, m.reason_len);
            cl_wire_put_refuse(&b, m.code, n1);
            break;
        case CL_WIRE_COPYREQ:
            cl_wire_put_copyreq(&b);
            break;
        case CL_WIRE_COPYBEGIN: {
            CHECK(m.n_hist <= CL_WIRE_MAX_HIST);
            uint64_t *e = malloc(((size_t)m.n_hist + 1) * 8),
                     *f = malloc(((size_t)m.n_hist + 1) * 8);
            for (uint32_t k = 0; k < m.n_hist; k++) {
                CHECK(m.hist + 16 * (k + 1) <= data + off + used);
                e[k] = sl_get_u64(m.hist + 16 * k);
                f[k] = sl_get_u64(m.hist + 16 * k + 8);
            }
            cl_wire_put_copybegin(&b, m.a, e, f, m.n_hist);
            free(e);
            free(f);
            break;
        }
        case CL_WIRE_COPYDATA:
            n1 = dup_name(m.file, m.file_len);
            CHECK(strlen(n1) == m.file_len);
            CHECK(m.meta >= data + off && m.meta + m.meta_len <= data + off + used);
            cl_wire_put_copydata(&b, n1, m.a, m.meta, m.meta_len);
            break;
        case CL_WIRE_COPYEND:
            cl_wire_put_copyend(&b, m.a, (uint32_t)m.b);
            break;
        case CL_WIRE_AUTH:
            n1 = dup_name(m.node, m.node_len);
            n2 = dup_name(m.cluster, m.cluster_len);
            CHECK(m.nonce + CL_WIRE_NONCE <= data + off + used);
            cl_wire_put_auth(&b, n1, n2, m.nonce);
            break;
        case CL_WIRE_CHALLENGE:
            n1 = dup_name(m.node, m.node_len);
            CHECK(m.mac + CL_WIRE_MAC <= data + off + used);
            cl_wire_put_challenge(&b, n1, m.nonce, m.mac);
            break;
        case CL_WIRE_PROOF:
            CHECK(m.mac + CL_WIRE_MAC <= data + off + used);
            cl_wire_put_proof(&b, m.mac);
            break;
        default:
            CHECK(0);
        }
        if (b.len)
            CHECK(b.len == used && !memcmp(b.data, data + off, used));
        free(n1);
        free(n2);
        sl_buf_free(&b);
        off += used;
    }
    return 0;
}
