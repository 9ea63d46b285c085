/* fuzz_defs.c - libFuzzer target for the definitions import (src/defs/defs.c defs_import)
 * and the access module behind it (users, hashes, permissions, topic permissions, limits).
 *
 * The input is a JSON document (a definitions file). On a fresh node and access database
 * each time (one vhost "/", nothing persisted), it is imported twice: into every vhost, and
 * forced into "/" (RabbitMQ's per-vhost import). The import may refuse it but must not crash,
 * leak or hang, and after it:
 *   - every vhost the access module defines exists in the model, and the reverse;
 *   - the access module's state replays from its own records (snapshot -> replay into a fresh
 *     one -> snapshot) to the same bytes, so what an import wrote survives a restart as it is.
 * Any difference aborts.
 *
 * Seeds: tests/fuzz/corpus/defs/ (RabbitMQ 3.10's export, Sluice's, small malformed ones).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access/access.h"
#include "core/buf.h"
#include "core/log.h"
#include "core/map.h"
#include "core/mem.h"
#include "defs/defs.h"
#include "node/config.h"
#include "node/node.h"
#include "qm/qm.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void collect(void *ctx, uint8_t type, const uint8_t *p, size_t len)
{
    sl_buf *b = ctx;
    sl_buf_put_u8(b, type);
    sl_buf_put_u32(b, (uint32_t)len);
    sl_buf_append(b, p, len);
}

static void check_state(sl_node *b)
{
    /* the model's vhosts and the access module's definitions are the same set */
    size_t n;
    const acc_vhost **vs = acc_vhosts(b->acc, &n);
    for (size_t i = 0; i < n; i++)
        CHECK(qm_vhost_find(b->qm, vs[i]->name, strlen(vs[i]->name)));
    sl_free(vs);
    CHECK(sl_map_count(b->qm->vhosts) == n);
    /* snapshot -> replay -> snapshot: the same bytes */
    sl_buf s1, s2;
    sl_buf_init(&s1);
    sl_buf_init(&s2);
    acc_snapshot(b->acc, collect, &s1);
    acc_db *c = acc_new();
    for (size_t o = 0; o < s1.len;) {
        uint8_t type = s1.data[o];
        uint32_t len = sl_get_u32(s1.data + o + 1);
        CHECK(acc_replay(c, type, s1.data + o + 5, len) == 0);
        o += 5 + len;
    }
    acc_snapshot(c, collect, &s2);
    CHECK(s1.len == s2.len && (!s1.len || !memcmp(s1.data, s2.data, s1.len)));
    acc_free(c);
    sl_buf_free(&s1);
    sl_buf_free(&s2);
}

static void run(const uint8_t *data, size_t size, const char *forced)
{
    json_error_t je;
    json_t *doc = json_loadb((const char *)data, size, 0, &je);
    if (!doc)
        return;
    node_config cfg;
    node_config_defaults(&cfg);
    /* the node's model and access module only: no loop, store or doors (an import needs none) */
    sl_node b;
    memset(&b, 0, sizeof b);
    b.cfg = &cfg;
    b.qm = qm_node_new("fuzz");
    b.acc = acc_new();
    b.signal_fd = -1;
    char err[800];
    CHECK(node_vhost_add(&b, "/", NULL, NULL, NULL, err, sizeof err) == SL_OK);
    defs_import(&b, doc, forced, err, sizeof err);
    check_state(&b);
    json_decref(doc);
    qm_node_free(b.qm);
    acc_free(b.acc);
    node_config_free(&cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_log_min_level = SL_LOG_ERROR + 1; /* quiet */
    if (size > (1u << 20))
        return 0;
    run(data, size, NULL);
    run(data, size, "/");
    return 0;
}
