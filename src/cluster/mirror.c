/* mirror.c - physical replication of a data directory: capture of the store's file operations
 * into groups (leader), their replay into a directory (follower), the replica state file and
 * the bulk copy. Format and contract in mirror.h.
 *
 * Invariants:
 * - The observer is the only producer of ops; it appends each op, encoded, to `pending` under
 *   the lock, in the order the store made them (capture happens after the operation
 *   succeeded, so every op of a closed group was done on the leader: written, and synced once
 *   cl_mirror_batch says its batch synced).
 * - A group is closed (`pending` becomes group last + 1: idx strictly increasing by one, gen
 *   non-decreasing) at the store's ST_FOP_WRITTEN of the messages log (or, in a generation
 *   with stream batches and none of messages, of streams/, reported by persist), on the sync
 *   thread, once a generation's batches have made their writes (the streams' writes and the
 *   definitions' batch run first, the streams' syncs last) and before the messages'
 *   fdatasync: so followers get it while the leader syncs it (a confirm pays the slower of
 *   the two syncs, not their sum). Such an early group is provisional: it carries the
 *   generation before (a release that reaches it releases nothing new) and synced 0, until
 *   cl_mirror_batch (persist's batch ended, on the loop) names its generation and says it is
 *   synced. That is safe because everything a confirm of generation g waits for is a write
 *   of g's batch, made before g's last ST_FOP_WRITTEN: only
 *   barriers (the batch's own syncs) can follow it before the batch ends; when anything else
 *   was captured meanwhile (the loop's reclaim, say), cl_mirror_batch closes a group of its
 *   own for g instead, as it did before groups were closed early. The leader's durable index
 *   moves only in cl_mirror_batch: what the followers hold that this disk may lack (a crash
 *   between the ship and the sync) is never confirmed, and a leader that crashed takes a full
 *   copy when it follows again (node.h, replica/led).
 * - notify is called under nmu (taken before mu, never after it): calls come in idx order
 *   from the sync thread and the loop, and once cl_mirror_set_notify returns the old one is
 *   called no more.
 * - The data ring keeps the newest groups whose bytes fit ring_bytes (always
 *   at least the newest one); the index ring (idx, gen, synced) keeps at least as many, and
 *   up to IDX_KEEP more, so generation <-> group lookups still work for groups whose bytes
 *   were dropped.
 * - cl_mirror_apply validates the whole group (CRC, bounds, kinds, names) before touching the
 *   directory: a refused group changes nothing. Names are relative, of 1 to 3 safe
 *   components (a directory 1 or 2, a file 2 or 3: "msgs/N.seg", "streams/INC/N.seg"), and
 *   every component is opened with O_NOFOLLOW beneath the directory given.
 */
#include "cluster/mirror.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/le.h"
#include "core/log.h"
#include "core/mem.h"
#include "store/log.h"

#define GROUP_MAGIC "SLMG"
#define GROUP_VERSION 1
#define GROUP_HDR 36           /* magic 4, version 4, idx 8, epoch 8, gen 8, nops 4 */
#define WRITE_CHUNK (1u << 30) /* a write op carries at most this many bytes */
#define IDX_KEEP 65536         /* index entries kept beyond the data ring */
#define MAX_NAME 128           /* "streams/" + 16 hex + "/" + a 24-byte segment name: far below */
#define MAX_DEPTH 3            /* components in a name: streams/INC/FILE */
#define MAX_FILE (1ull << 40)  /* no store file is near 1 TiB: a bigger offset is hostile */
#define STATE_MAGIC "SLRS"
#define STATE_VERSION 1
#define STATE_MAX_EPOCHS (1u << 20)

/* Little endian throughout: core/le.h. */

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ names */

static int component_ok(const char *s, size_t n)
{
    if (n == 0 || n > 64 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Components in a name (name_ok checked). */
static int depth(const char *name, size_t len)
{
    int d = 1;
    for (size_t i = 0; i < len; i++)
        d += name[i] == '/';
    return d;
}

int cl_mirror_name_ok(const char *name, size_t len)
{
    if (len == 0 || len > MAX_NAME)
        return 0;
    int n = 0;
    size_t a = 0;
    /* Bounded: each pass takes one component and moves past it. */
    while (a <= len) {
        const char *slash = memchr(name + a, '/', len - a);
        size_t e = slash ? (size_t)(slash - name) : len;
        if (++n > MAX_DEPTH || !component_ok(name + a, e - a))
            return 0;
        a = e + 1;
    }
    return 1;
}

/* Node-local paths: never mirrored, never copied, never touched by a group. */
static int name_local(const char *name, size_t len)
{
    size_t a = len;
    const char *slash = memchr(name, '/', len);
    if (slash)
        a = (size_t)(slash - name);
    return (a == 7 && !memcmp(name, "replica", 7)) ||
           (a == 13 && !memcmp(name, "space-reserve", 13));
}

/* ------------------------------------------------------------------ leader */

typedef struct gentry {
    uint64_t idx, epoch, gen;
    uint8_t synced;
    uint8_t *bytes; /* NULL once dropped from the data ring */
    size_t len;
} gentry;

struct cl_mirror {
    pthread_mutex_t mu;
    char *dir;
    size_t dirlen;
    uint64_t ring_bytes;
    sl_buf pending; /* encoded ops since the last group */
    uint32_t pending_nops;
    int pending_content; /* pending holds an op other than a SYNC or DIRSYNC barrier */
    size_t early;        /* groups closed at ST_FOP_WRITTEN since the last cl_mirror_batch */
    uint64_t gen_last;   /* the generation of the newest group */
    uint64_t epoch, last, durable;
    gentry *v; /* index ring: v[(head + i) % cap], i < n, oldest first */
    size_t head, n, cap;
    size_t first_data; /* the first entry (0..n) that still has its bytes */
    uint64_t data_bytes;
    pthread_mutex_t nmu; /* held across a notify (see the invariants) */
    void (*notify)(void *ctx, uint64_t idx, uint64_t bytes);
    void *notify_ctx;
};

static void close_group(cl_mirror *m, uint64_t gen, int synced, uint64_t *idx, size_t *len);

static cl_mirror *installed;
static pthread_mutex_t install_mu = PTHREAD_MUTEX_INITIALIZER;

static gentry *ent(const cl_mirror *m, size_t i)
{
    return &m->v[(m->head + i) % m->cap];
}

/* The op's name relative to m->dir into out, or 0 when it is not under it / not mirrored. */
static size_t rel_name(const cl_mirror *m, const st_fop *op, char *out, size_t cap)
{
    const char *d = op->dir;
    if (strncmp(d, m->dir, m->dirlen) != 0 || d[m->dirlen] != '/')
        return 0;
    d += m->dirlen;
    while (*d == '/')
        d++;
    int n;
    if (op->name && op->name[0])
        n = snprintf(out, cap, "%s/%s", d, op->name);
    else
        n = snprintf(out, cap, "%s", d);
    if (n <= 0 || (size_t)n >= cap || !cl_mirror_name_ok(out, (size_t)n) ||
        name_local(out, (size_t)n))
        return 0;
    return (size_t)n;
}

static void enc_op(sl_buf *b, int kind, const char *name, size_t nl)
{
    sl_buf_put_u8(b, (uint8_t)kind);
    sl_buf_put_le16(b, (uint16_t)nl);
    sl_buf_append(b, name, nl);
}

/* ST_FOP_WRITTEN (sync thread): the batch's writes are made, its syncs follow: close the
 * group now and hand it to the server (notify), provisional until cl_mirror_batch. */
static void observe_written(cl_mirror *m)
{
    pthread_mutex_lock(&m->nmu);
    pthread_mutex_lock(&m->mu);
    uint64_t idx;
    size_t len;
    close_group(m, m->gen_last, 0, &idx, &len);
    m->early++;
    void (*fn)(void *, uint64_t, uint64_t) = m->notify;
    void *fctx = m->notify_ctx;
    pthread_mutex_unlock(&m->mu);
    if (fn)
        fn(fctx, idx, len);
    pthread_mutex_unlock(&m->nmu);
}

static void observe(void *ctx, const st_fop *op)
{
    cl_mirror *m = ctx;
    char name[MAX_NAME + 1], name2[MAX_NAME + 1];
    size_t nl = rel_name(m, op, name, sizeof name), nl2 = 0;
    if (!nl)
        return;
    if (op->kind == ST_FOP_WRITTEN) {
        /* persist runs a generation's streams' writes, then its definitions batch (meta/),
         * then its messages batch (msgs/): the latter's WRITTEN is where all the
         * generation's writes are made; in a generation with stream batches and no messages
         * batch, persist reports that point for streams/. A generation with neither keeps
         * its group to cl_mirror_batch, as before. */
        if ((nl == 4 && !memcmp(name, "msgs", 4)) || (nl == 7 && !memcmp(name, "streams", 7)))
            observe_written(m);
        return;
    }
    if (op->kind == ST_FOP_RENAME) {
        st_fop o2 = *op;
        o2.name = op->name2;
        nl2 = rel_name(m, &o2, name2, sizeof name2);
        if (!nl2)
            return;
    }
    pthread_mutex_lock(&m->mu);
    sl_buf *b = &m->pending;
    switch (op->kind) {
    case ST_FOP_WRITE: {
        const uint8_t *p = op->data;
        size_t left = op->len;
        uint64_t off = op->arg;
        do { /* big writes in chunks, so a length always fits its u32 */
            size_t k = left > WRITE_CHUNK ? WRITE_CHUNK : left;
            enc_op(b, CL_MIRROR_OP_WRITE, name, nl);
            sl_buf_put_le64(b, off);
            sl_buf_put_le32(b, (uint32_t)k);
            sl_buf_append(b, p, k);
            m->pending_nops++;
            p += k;
            off += k;
            left -= k;
        } while (left);
        break;
    }
    case ST_FOP_CREATE:
        enc_op(b, CL_MIRROR_OP_CREATE, name, nl);
        sl_buf_put_u8(b, op->arg ? 1 : 0);
        m->pending_nops++;
        break;
    case ST_FOP_TRUNCATE:
        enc_op(b, CL_MIRROR_OP_TRUNCATE, name, nl);
        sl_buf_put_le64(b, op->arg);
        m->pending_nops++;
        break;
    case ST_FOP_RENAME:
        enc_op(b, CL_MIRROR_OP_RENAME, name, nl);
        sl_buf_put_le16(b, (uint16_t)nl2);
        sl_buf_append(b, name2, nl2);
        m->pending_nops++;
        break;
    case ST_FOP_SYNC:
    case ST_FOP_DIRSYNC:
    case ST_FOP_UNLINK:
    case ST_FOP_MKDIR:
    case ST_FOP_RMDIR:
        enc_op(b, op->kind, name, nl); /* ST_FOP_* and CL_MIRROR_OP_* share their values */
        m->pending_nops++;
        break;
    default:
        break;
    }
    if (op->kind != ST_FOP_SYNC && op->kind != ST_FOP_DIRSYNC)
        m->pending_content = 1;
    pthread_mutex_unlock(&m->mu);
}

cl_mirror *cl_mirror_leader_new(const char *data_dir, uint64_t ring_bytes)
{
    pthread_mutex_lock(&install_mu);
    if (installed) {
        pthread_mutex_unlock(&install_mu);
        errno = EBUSY;
        return NULL;
    }
    cl_mirror *m = sl_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->nmu, NULL);
    m->dir = sl_xstrdup(data_dir);
    m->dirlen = strlen(m->dir);
    while (m->dirlen > 1 && m->dir[m->dirlen - 1] == '/')
        m->dir[--m->dirlen] = 0;
    m->ring_bytes = ring_bytes ? ring_bytes : CL_MIRROR_DEFAULT_RING;
    sl_buf_init(&m->pending);
    installed = m;
    st_log_set_observer(observe, m);
    pthread_mutex_unlock(&install_mu);
    return m;
}

void cl_mirror_free(cl_mirror *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&install_mu);
    if (installed == m) {
        st_log_set_observer(NULL, NULL);
        installed = NULL;
    }
    pthread_mutex_unlock(&install_mu);
    for (size_t i = 0; i < m->n; i++)
        sl_free(ent(m, i)->bytes);
    sl_free(m->v);
    sl_buf_free(&m->pending);
    sl_free(m->dir);
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->nmu);
    sl_free(m);
}

void cl_mirror_start(cl_mirror *m, uint64_t epoch, uint64_t last_idx)
{
    pthread_mutex_lock(&m->mu);
    m->epoch = epoch;
    m->last = last_idx;
    m->durable = last_idx;
    for (size_t i = 0; i < m->n; i++)
        sl_free(ent(m, i)->bytes);
    m->n = m->head = m->first_data = 0;
    m->data_bytes = 0;
    m->early = 0;
    m->gen_last = 0;
    pthread_mutex_unlock(&m->mu);
}

void cl_mirror_set_notify(cl_mirror *m, void (*fn)(void *ctx, uint64_t idx, uint64_t bytes),
                          void *ctx)
{
    pthread_mutex_lock(&m->nmu); /* waits for a call in progress (the sync thread's) */
    pthread_mutex_lock(&m->mu);
    m->notify = fn;
    m->notify_ctx = ctx;
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_unlock(&m->nmu);
}

static void drop_data(cl_mirror *m)
{
    /* the newest group's bytes always stay */
    while (m->first_data + 1 < m->n && m->data_bytes > m->ring_bytes) {
        gentry *e = ent(m, m->first_data++);
        m->data_bytes -= e->len;
        sl_free(e->bytes);
        e->bytes = NULL;
    }
    while (m->n > m->first_data && m->first_data > IDX_KEEP) {
        m->head = (m->head + 1) % m->cap;
        m->n--;
        m->first_data--;
    }
}

/* `pending` becomes group last + 1 of generation gen. Under mu. */
static void close_group(cl_mirror *m, uint64_t gen, int synced, uint64_t *idxp, size_t *lenp)
{
    uint64_t idx = m->last + 1;
    sl_buf g;
    sl_buf_init(&g);
    sl_buf_reserve(&g, GROUP_HDR + sl_buf_unread(&m->pending) + 4);
    sl_buf_append(&g, GROUP_MAGIC, 4);
    sl_buf_put_le32(&g, GROUP_VERSION);
    sl_buf_put_le64(&g, idx);
    sl_buf_put_le64(&g, m->epoch);
    sl_buf_put_le64(&g, gen);
    sl_buf_put_le32(&g, m->pending_nops);
    sl_buf_append(&g, sl_buf_head(&m->pending), sl_buf_unread(&m->pending));
    sl_buf_put_le32(&g, st_crc32c(0, g.data, g.len));
    m->pending.len = m->pending.off = 0;
    m->pending_nops = 0;
    m->pending_content = 0;
    if (m->pending.cap > (64u << 20))
        sl_buf_free(&m->pending);
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        gentry *nv = sl_xmalloc(nc * sizeof *nv);
        for (size_t i = 0; i < m->n; i++)
            nv[i] = *ent(m, i);
        sl_free(m->v);
        m->v = nv;
        m->cap = nc;
        m->head = 0;
    }
    gentry *e = ent(m, m->n++);
    e->idx = idx;
    e->epoch = m->epoch;
    e->gen = gen;
    e->synced = synced ? 1 : 0;
    e->len = g.len;
    e->bytes = sl_buf_detach(&g);
    m->data_bytes += e->len;
    m->last = idx;
    m->gen_last = gen;
    *idxp = idx;
    *lenp = e->len;
    drop_data(m);
}

uint64_t cl_mirror_batch(cl_mirror *m, uint64_t gen, int synced)
{
    pthread_mutex_lock(&m->nmu);
    pthread_mutex_lock(&m->mu);
    uint64_t idx;
    size_t len;
    if (m->early && !m->pending_content && m->n) {
        /* The batch's group went out at its ST_FOP_WRITTEN: it is generation gen's now (the
         * barriers captured since wait in pending for the next group: the followers sync
         * every group they apply anyway). notify again: the server takes the durable index
         * (an append it already has is ignored). */
        gentry *e = ent(m, m->n - 1);
        e->gen = gen;
        e->synced = synced ? 1 : 0;
        m->gen_last = gen;
        idx = e->idx;
        len = e->len;
    } else {
        close_group(m, gen, synced, &idx, &len);
    }
    m->early = 0;
    if (synced)
        m->durable = idx;
    void (*fn)(void *, uint64_t, uint64_t) = m->notify;
    void *ctx = m->notify_ctx;
    pthread_mutex_unlock(&m->mu);
    if (fn)
        fn(ctx, idx, len);
    pthread_mutex_unlock(&m->nmu);
    return idx;
}

void cl_mirror_persist_hook(void *m, uint64_t gen, int synced)
{
    cl_mirror_batch(m, gen, synced);
}

uint64_t cl_mirror_last(const cl_mirror *m)
{
    pthread_mutex_lock((pthread_mutex_t *)&m->mu);
    uint64_t v = m->last;
    pthread_mutex_unlock((pthread_mutex_t *)&m->mu);
    return v;
}

uint64_t cl_mirror_durable(const cl_mirror *m)
{
    pthread_mutex_lock((pthread_mutex_t *)&m->mu);
    uint64_t v = m->durable;
    pthread_mutex_unlock((pthread_mutex_t *)&m->mu);
    return v;
}

uint64_t cl_mirror_first_kept(const cl_mirror *m)
{
    pthread_mutex_lock((pthread_mutex_t *)&m->mu);
    uint64_t v = m->first_data < m->n ? ent(m, m->first_data)->idx : m->last + 1;
    pthread_mutex_unlock((pthread_mutex_t *)&m->mu);
    return v;
}

/* The entry of idx, or NULL. Under the lock. */
static gentry *find_idx(const cl_mirror *m, uint64_t idx)
{
    if (!m->n)
        return NULL;
    uint64_t first = ent(m, 0)->idx;
    if (idx < first || idx - first >= m->n)
        return NULL;
    return ent(m, (size_t)(idx - first)); /* consecutive indexes */
}

int cl_mirror_group(cl_mirror *m, uint64_t idx, uint8_t **bytes, size_t *len, uint64_t *epoch)
{
    pthread_mutex_lock(&m->mu);
    gentry *e = find_idx(m, idx);
    int rc = -1;
    if (e && e->bytes) {
        *bytes = sl_xmalloc(e->len);
        memcpy(*bytes, e->bytes, e->len);
        *len = e->len;
        if (epoch)
            *epoch = e->epoch;
        rc = 0;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

uint64_t cl_mirror_gen_of(const cl_mirror *m, uint64_t idx)
{
    pthread_mutex_lock((pthread_mutex_t *)&m->mu);
    gentry *e = find_idx(m, idx);
    uint64_t g = e ? e->gen : 0;
    pthread_mutex_unlock((pthread_mutex_t *)&m->mu);
    return g;
}

uint64_t cl_mirror_idx_of_gen(const cl_mirror *m, uint64_t gen)
{
    pthread_mutex_lock((pthread_mutex_t *)&m->mu);
    uint64_t r = 0;
    size_t lo = 0, hi = m->n; /* gens are non-decreasing: the last entry with gen <= gen */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ent(m, mid)->gen <= gen)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0)
        r = ent(m, lo - 1)->idx;
    pthread_mutex_unlock((pthread_mutex_t *)&m->mu);
    return r;
}

/* ------------------------------------------------------------------ decode */

typedef struct op {
    int kind;
    const char *name;
    size_t nl;
    const char *name2;
    size_t nl2;
    uint64_t arg; /* WRITE offset, TRUNCATE size, CREATE trunc */
    const uint8_t *data;
    size_t len;
} op;

typedef struct reader {
    const uint8_t *p;
    size_t len, off;
} reader;

static int need(reader *r, size_t n)
{
    return r->len - r->off >= n;
}

/* The next op (r at an op); 0 or -1 with err. */
static int read_op(reader *r, op *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    size_t at = r->off;
    if (!need(r, 3)) {
        seterr(err, errlen, "op at %zu: truncated", at);
        return -1;
    }
    o->kind = r->p[r->off];
    o->nl = sl_le16(r->p + r->off + 1);
    r->off += 3;
    if (!need(r, o->nl)) {
        seterr(err, errlen, "op at %zu: truncated name", at);
        return -1;
    }
    o->name = (const char *)r->p + r->off;
    r->off += o->nl;
    if (!cl_mirror_name_ok(o->name, o->nl) || name_local(o->name, o->nl)) {
        seterr(err, errlen, "op at %zu: refused name \"%.*s\"", at, (int)(o->nl > 64 ? 64 : o->nl),
               o->name);
        return -1;
    }
    /* a directory is named by 1 or 2 components, a file by 2 or 3 */
    int nd = depth(o->name, o->nl);
    int dir_ok = nd < MAX_DEPTH;
    int file_ok = nd > 1;
    switch (o->kind) {
    case CL_MIRROR_OP_WRITE:
        if (!need(r, 12)) {
            seterr(err, errlen, "op at %zu: truncated write", at);
            return -1;
        }
        o->arg = sl_le64(r->p + r->off);
        o->len = sl_le32(r->p + r->off + 8);
        r->off += 12;
        if (!need(r, o->len) || o->arg > MAX_FILE || o->len > WRITE_CHUNK) {
            seterr(err, errlen, "op at %zu: write of %zu bytes at %" PRIu64 " out of bounds", at,
                   o->len, o->arg);
            return -1;
        }
        o->data = r->p + r->off;
        r->off += o->len;
        break;
    case CL_MIRROR_OP_CREATE:
        if (!need(r, 1) || r->p[r->off] > 1) {
            seterr(err, errlen, "op at %zu: bad create", at);
            return -1;
        }
        o->arg = r->p[r->off++];
        break;
    case CL_MIRROR_OP_TRUNCATE:
        if (!need(r, 8)) {
            seterr(err, errlen, "op at %zu: truncated truncate", at);
            return -1;
        }
        o->arg = sl_le64(r->p + r->off);
        r->off += 8;
        if (o->arg > MAX_FILE) {
            seterr(err, errlen, "op at %zu: truncate to %" PRIu64 " out of bounds", at, o->arg);
            return -1;
        }
        break;
    case CL_MIRROR_OP_RENAME:
        if (!need(r, 2)) {
            seterr(err, errlen, "op at %zu: truncated rename", at);
            return -1;
        }
        o->nl2 = sl_le16(r->p + r->off);
        r->off += 2;
        if (!need(r, o->nl2)) {
            seterr(err, errlen, "op at %zu: truncated rename target", at);
            return -1;
        }
        o->name2 = (const char *)r->p + r->off;
        r->off += o->nl2;
        if (!cl_mirror_name_ok(o->name2, o->nl2) || name_local(o->name2, o->nl2) ||
            depth(o->name2, o->nl2) < 2) {
            seterr(err, errlen, "op at %zu: refused rename target", at);
            return -1;
        }
        break;
    case CL_MIRROR_OP_SYNC:
    case CL_MIRROR_OP_UNLINK:
        break;
    case CL_MIRROR_OP_DIRSYNC:
    case CL_MIRROR_OP_MKDIR:
    case CL_MIRROR_OP_RMDIR:
        if (!dir_ok) {
            seterr(err, errlen, "op at %zu: a directory operation on a file name", at);
            return -1;
        }
        return 0;
    default:
        seterr(err, errlen, "op at %zu: unknown kind %d", at, o->kind);
        return -1;
    }
    if (!file_ok) {
        seterr(err, errlen, "op at %zu: a file operation on a top-level name", at);
        return -1;
    }
    return 0;
}

int cl_mirror_group_check(const uint8_t *group, size_t len, uint64_t *idx, uint64_t *epoch,
                          uint64_t *gen, uint32_t *nops, char *err, size_t errlen)
{
    if (len < GROUP_HDR + 4 || len > CL_MIRROR_MAX_GROUP || memcmp(group, GROUP_MAGIC, 4) != 0) {
        seterr(err, errlen, "mirror group: not a group (%zu bytes)", len);
        return -1;
    }
    if (sl_le32(group + 4) != GROUP_VERSION) {
        seterr(err, errlen, "mirror group: version %u not known", sl_le32(group + 4));
        return -1;
    }
    if (st_crc32c(0, group, len - 4) != sl_le32(group + len - 4)) {
        seterr(err, errlen, "mirror group: checksum mismatch");
        return -1;
    }
    uint32_t n = sl_le32(group + 32);
    reader r = {group, len - 4, GROUP_HDR};
    char e2[200];
    for (uint32_t i = 0; i < n; i++) {
        op o;
        if (read_op(&r, &o, e2, sizeof e2) < 0) {
            seterr(err, errlen, "mirror group %" PRIu64 ": %s", sl_le64(group + 8), e2);
            return -1;
        }
    }
    if (r.off != r.len) {
        seterr(err, errlen, "mirror group %" PRIu64 ": %zu bytes after the last op",
               sl_le64(group + 8), r.len - r.off);
        return -1;
    }
    if (idx)
        *idx = sl_le64(group + 8);
    if (epoch)
        *epoch = sl_le64(group + 16);
    if (gen)
        *gen = sl_le64(group + 24);
    if (nops)
        *nops = n;
    return 0;
}

/* ------------------------------------------------------------------ apply */

#define FCACHE 16

typedef struct applier {
    int dirfd;
    unsigned flags;
    struct {
        char name[MAX_NAME + 1];
        int fd;
        int dirty; /* written since its last sync */
    } f[FCACHE];
    int nf;
    struct {
        char name[MAX_NAME + 1];
        int dirty;
    } d[FCACHE]; /* subdirectories whose names changed */
    int nd;
    int top_dirty;
    /* a persistent applier (cl_mirror_applier_*): the groups' barriers wait for its sync */
    int defer;
    uint64_t syncs; /* fsync/fdatasync calls made (tests) */
    char *err;
    size_t errlen;
} applier;

/* name = dir "/" file at its last slash (dir "" and file name when there is none). */
static void split(const char *name, size_t nl, char *dir, char *file)
{
    const char *slash = memrchr(name, '/', nl);
    size_t a = slash ? (size_t)(slash - name) : 0;
    memcpy(dir, name, a);
    dir[a] = 0;
    size_t f = slash ? nl - a - 1 : nl;
    memcpy(file, slash ? slash + 1 : name, f);
    file[f] = 0;
}

static void dir_dirty(applier *a, const char *dir);

/* A descriptor of the subdirectory dir (1 or 2 components; each made when create and missing,
 * its parent then marked for a sync), or -1 errno. Every component is opened with O_NOFOLLOW:
 * a symbolic link never leads a group out of the directory. */
static int open_sub(applier *a, const char *dir, int create)
{
    char part[MAX_NAME + 1];
    int at = a->dirfd, fd = -1;
    size_t i = 0, n = strlen(dir);
    /* Bounded: each pass opens one component of dir (at most MAX_DEPTH - 1). */
    while (i < n) {
        const char *slash = memchr(dir + i, '/', n - i);
        size_t e = slash ? (size_t)(slash - dir) : n;
        memcpy(part, dir + i, e - i);
        part[e - i] = 0;
        fd = openat(at, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && create) {
            if (mkdirat(at, part, 0755) < 0 && errno != EEXIST)
                fd = -1;
            else {
                if (i == 0)
                    a->top_dirty = 1;
                else {
                    char parent[MAX_NAME + 1];
                    memcpy(parent, dir, i - 1);
                    parent[i - 1] = 0;
                    dir_dirty(a, parent);
                }
                fd = openat(at, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            }
        }
        int e2 = errno;
        if (at != a->dirfd)
            close(at);
        if (fd < 0) {
            errno = e2;
            return -1;
        }
        at = fd;
        i = e + 1;
    }
    if (fd < 0)
        errno = EINVAL; /* "": not a subdirectory */
    return fd;
}

static int fsync_sub(applier *a, const char *dir)
{
    if (a->flags & CL_MIRROR_APPLY_NOSYNC)
        return 0;
    int fd = open_sub(a, dir, 0);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    int rc = fsync(fd);
    a->syncs++;
    close(fd);
    return rc;
}

static void dir_dirty(applier *a, const char *dir)
{
    for (int i = 0; i < a->nd; i++)
        if (!strcmp(a->d[i].name, dir)) {
            a->d[i].dirty = 1;
            return;
        }
    if (a->nd < FCACHE) {
        snprintf(a->d[a->nd].name, sizeof a->d[a->nd].name, "%s", dir);
        a->d[a->nd++].dirty = 1;
    } else {
        fsync_sub(a, dir); /* more directories than the store has: synced at once */
    }
}

static void forget(applier *a, const char *name)
{
    for (int i = 0; i < a->nf; i++)
        if (!strcmp(a->f[i].name, name)) {
            close(a->f[i].fd);
            a->f[i] = a->f[--a->nf];
            return;
        }
}

static int flush_one(applier *a, int i)
{
    if (a->f[i].dirty && !(a->flags & CL_MIRROR_APPLY_NOSYNC)) {
        a->syncs++;
        if (fdatasync(a->f[i].fd) < 0)
            return -1;
    }
    a->f[i].dirty = 0;
    return 0;
}

/* The cached descriptor of name (opened, created when create); -1 errno. *slot its index. */
static int get_fd(applier *a, const char *name, size_t nl, int create, int trunc, int *slot)
{
    char full[MAX_NAME + 1];
    memcpy(full, name, nl);
    full[nl] = 0;
    for (int i = 0; i < a->nf; i++)
        if (!strcmp(a->f[i].name, full)) {
            if (trunc && ftruncate(a->f[i].fd, 0) < 0)
                return -1;
            *slot = i;
            return a->f[i].fd;
        }
    char dir[MAX_NAME + 1], file[MAX_NAME + 1];
    split(name, nl, dir, file);
    int dfd = open_sub(a, dir, create);
    if (dfd < 0)
        return -1;
    int fl = O_RDWR | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT : 0) | (trunc ? O_TRUNC : 0);
    int fd = openat(dfd, file, fl, 0644);
    int e = errno;
    close(dfd);
    if (fd < 0) {
        errno = e;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    if (a->nf == FCACHE) { /* evict the oldest, synced first if need be */
        if (flush_one(a, 0) < 0) {
            close(fd);
            return -1;
        }
        close(a->f[0].fd);
        a->f[0] = a->f[--a->nf];
    }
    int i = a->nf++;
    snprintf(a->f[i].name, sizeof a->f[i].name, "%s", full);
    a->f[i].fd = fd;
    a->f[i].dirty = 0;
    *slot = i;
    return fd;
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static int apply_op(applier *a, const op *o)
{
    char dir[MAX_NAME + 1], file[MAX_NAME + 1];
    split(o->name, o->nl, dir, file);
    char full[MAX_NAME + 1];
    memcpy(full, o->name, o->nl);
    full[o->nl] = 0;
    int slot, fd;
    switch (o->kind) {
    case CL_MIRROR_OP_WRITE:
        if ((fd = get_fd(a, o->name, o->nl, 1, 0, &slot)) < 0)
            return -1;
        if (pwrite_all(fd, o->data, o->len, o->arg) < 0)
            return -1;
        a->f[slot].dirty = 1;
        return 0;
    case CL_MIRROR_OP_CREATE:
        if (get_fd(a, o->name, o->nl, 1, (int)o->arg, &slot) < 0)
            return -1;
        dir_dirty(a, dir);
        return 0;
    case CL_MIRROR_OP_TRUNCATE:
        if ((fd = get_fd(a, o->name, o->nl, 0, 0, &slot)) < 0)
            return errno == ENOENT ? 0 : -1; /* gone later in the group (a re-apply) */
        if (ftruncate(fd, (off_t)o->arg) < 0)
            return -1;
        a->f[slot].dirty = 1;
        return 0;
    case CL_MIRROR_OP_SYNC:
        if ((fd = get_fd(a, o->name, o->nl, 0, 0, &slot)) < 0)
            return errno == ENOENT ? 0 : -1;
        a->f[slot].dirty = 1;
        return a->defer ? 0 : flush_one(a, slot);
    case CL_MIRROR_OP_UNLINK: {
        forget(a, full);
        int dfd = open_sub(a, dir, 0);
        if (dfd < 0)
            return errno == ENOENT ? 0 : -1;
        int rc = unlinkat(dfd, file, 0);
        int e = errno;
        close(dfd);
        if (rc < 0 && e != ENOENT) {
            errno = e;
            return -1;
        }
        dir_dirty(a, dir);
        return 0;
    }
    case CL_MIRROR_OP_RENAME: {
        char dir2[MAX_NAME + 1], file2[MAX_NAME + 1];
        split(o->name2, o->nl2, dir2, file2);
        if (strcmp(dir, dir2) != 0) {
            errno = EXDEV;
            return -1;
        }
        char full2[MAX_NAME + 1];
        memcpy(full2, o->name2, o->nl2);
        full2[o->nl2] = 0;
        /* the cached descriptors follow their inodes: drop both names */
        for (int i = 0; i < a->nf; i++)
            if (!strcmp(a->f[i].name, full) && flush_one(a, i) < 0)
                return -1;
        forget(a, full);
        forget(a, full2);
        int dfd = open_sub(a, dir, 0);
        if (dfd < 0)
            return errno == ENOENT ? 0 : -1;
        int rc = renameat(dfd, file, dfd, file2);
        int e = errno;
        close(dfd);
        if (rc < 0 && e != ENOENT) { /* source missing: done before (a re-apply) */
            errno = e;
            return -1;
        }
        dir_dirty(a, dir);
        return 0;
    }
    case CL_MIRROR_OP_DIRSYNC:
        if (a->defer) { /* the sync does it, after every file */
            if (full[0])
                dir_dirty(a, full);
            else
                a->top_dirty = 1;
            return 0;
        }
        /* everything written so far first: the leader's barrier orders its writes too */
        for (int i = 0; i < a->nf; i++)
            if (flush_one(a, i) < 0)
                return -1;
        for (int i = 0; i < a->nd; i++)
            if (!strcmp(a->d[i].name, full))
                a->d[i].dirty = 0;
        return fsync_sub(a, full);
    case CL_MIRROR_OP_MKDIR: {
        /* made (with its parents) if missing, its parent marked for a sync; an existing
         * non-directory fails (ENOTDIR) */
        int dfd = open_sub(a, full, 1);
        if (dfd < 0)
            return -1;
        close(dfd);
        return 0;
    }
    case CL_MIRROR_OP_RMDIR: {
        /* the files under it were unlinked before (their ops): drop what is cached of them */
        size_t fl = strlen(full);
        for (int i = 0; i < a->nf;)
            if (!strncmp(a->f[i].name, full, fl) && a->f[i].name[fl] == '/') {
                close(a->f[i].fd);
                a->f[i] = a->f[--a->nf];
            } else
                i++;
        for (int i = 0; i < a->nd;)
            if (!strcmp(a->d[i].name, full))
                a->d[i] = a->d[--a->nd];
            else
                i++;
        int pfd = dir[0] ? open_sub(a, dir, 0) : dup(a->dirfd);
        if (pfd < 0)
            return errno == ENOENT ? 0 : -1;
        int rc = unlinkat(pfd, file, AT_REMOVEDIR);
        int e = errno;
        close(pfd);
        if (rc < 0 && e != ENOENT) {
            errno = e;
            return -1;
        }
        if (dir[0])
            dir_dirty(a, dir);
        else
            a->top_dirty = 1;
        return 0;
    }
    }
    errno = EINVAL;
    return -1;
}

/* The end of a group: every file written and every changed directory on the disk. */
static int finish(applier *a)
{
    for (int i = 0; i < a->nf; i++)
        if (flush_one(a, i) < 0)
            return -1;
    for (int i = 0; i < a->nd; i++) {
        if (a->d[i].dirty && fsync_sub(a, a->d[i].name) < 0)
            return -1;
        a->d[i].dirty = 0;
    }
    if (a->top_dirty && !(a->flags & CL_MIRROR_APPLY_NOSYNC)) {
        a->syncs++;
        if (fsync(a->dirfd) < 0)
            return -1;
    }
    a->top_dirty = 0;
    return 0;
}

static void close_all(applier *a)
{
    for (int i = 0; i < a->nf; i++)
        close(a->f[i].fd);
    a->nf = 0;
}

/* Apply a group's ops (checked first) with a: 0, 1 (stopped after ops_max), -1 err. */
static int apply_ops(applier *a, const uint8_t *group, size_t len, size_t ops_max, uint64_t *idxp,
                     char *err, size_t errlen)
{
    uint32_t nops;
    uint64_t idx;
    if (cl_mirror_group_check(group, len, &idx, NULL, NULL, &nops, err, errlen) < 0) {
        errno = EILSEQ;
        return -1;
    }
    *idxp = idx;
    reader r = {group, len - 4, GROUP_HDR};
    for (uint32_t i = 0; i < nops; i++) {
        op o;
        read_op(&r, &o, NULL, 0); /* checked above */
        if (i >= ops_max)
            return 1; /* stopped early (tests) */
        if (apply_op(a, &o) < 0) {
            int e = errno;
            seterr(err, errlen, "mirror group %" PRIu64 ": op %u (%d on %.*s): %s", idx, i, o.kind,
                   (int)o.nl, o.name, strerror(e));
            errno = e;
            return -1;
        }
    }
    return 0;
}

int cl_mirror_apply_ex(int dirfd, const uint8_t *group, size_t len, unsigned flags, size_t ops_max,
                       char *err, size_t errlen)
{
    applier a;
    memset(&a, 0, sizeof a);
    a.dirfd = dirfd;
    a.flags = flags;
    uint64_t idx = 0;
    int rc = apply_ops(&a, group, len, ops_max, &idx, err, errlen);
    if (rc == 0 && finish(&a) < 0) {
        int e = errno;
        seterr(err, errlen, "mirror group %" PRIu64 ": sync: %s", idx, strerror(e));
        rc = -1;
        errno = e;
    }
    int e = errno;
    close_all(&a);
    errno = e;
    return rc;
}

/* ---- the follower's applier: barriers deferred to the end of a batch ---- */

struct cl_mirror_applier {
    applier a;
};

cl_mirror_applier *cl_mirror_applier_new(int dirfd, unsigned flags)
{
    cl_mirror_applier *m = sl_xcalloc(1, sizeof *m);
    m->a.dirfd = dirfd;
    m->a.flags = flags;
    m->a.defer = 1;
    return m;
}

int cl_mirror_applier_apply(cl_mirror_applier *m, const uint8_t *group, size_t len, char *err,
                            size_t errlen)
{
    uint64_t idx = 0;
    return apply_ops(&m->a, group, len, SIZE_MAX, &idx, err, errlen);
}

int cl_mirror_applier_sync(cl_mirror_applier *m, char *err, size_t errlen)
{
    if (finish(&m->a) < 0) {
        int e = errno;
        seterr(err, errlen, "mirror: sync: %s", strerror(e));
        errno = e;
        return -1;
    }
    return 0;
}

uint64_t cl_mirror_applier_syncs(const cl_mirror_applier *m)
{
    return m->a.syncs;
}

void cl_mirror_applier_free(cl_mirror_applier *m)
{
    if (!m)
        return;
    close_all(&m->a);
    sl_free(m);
}

int cl_mirror_apply(int dirfd, const uint8_t *group, size_t len, char *err, size_t errlen)
{
    return cl_mirror_apply_ex(dirfd, group, len, 0, SIZE_MAX, err, errlen);
}

/* ------------------------------------------------------------------ replica state */

/* fsync of a directory by its path: its entries (a rename, a new file) are durable. */
static int fsync_dir(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    int rc = fsync(dfd);
    int e = errno;
    close(dfd);
    errno = e;
    return rc;
}

static int write_atomic(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char tmp[4200], path[4200];
    if (snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name) >= (int)sizeof tmp ||
        snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    if (pwrite_all(fd, p, n, 0) < 0 || fsync(fd) < 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        return -1;
    }
    close(fd);
    if (rename(tmp, path) < 0)
        return -1;
    return fsync_dir(dir);
}

int cl_replica_state_save(const char *data_dir, uint64_t last_idx, const cl_repl_epochs *h)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/replica", data_dir);
    if (mkdir(dir, 0755) < 0) {
        if (errno != EEXIST)
            return -1;
    } else if (fsync_dir(data_dir) < 0) {
        return -1;
    }
    sl_buf b;
    sl_buf_init(&b);
    sl_buf_append(&b, STATE_MAGIC, 4);
    sl_buf_put_le32(&b, STATE_VERSION);
    sl_buf_put_le64(&b, last_idx);
    sl_buf_put_le32(&b, (uint32_t)h->n);
    for (size_t i = 0; i < h->n; i++) {
        sl_buf_put_le64(&b, h->v[i].epoch);
        sl_buf_put_le64(&b, h->v[i].first);
    }
    sl_buf_put_le32(&b, st_crc32c(0, b.data, b.len));
    int rc = write_atomic(dir, "state", b.data, b.len);
    sl_buf_free(&b);
    return rc;
}

static int state_load(const char *data_dir, uint64_t *last_idx, cl_repl_epochs *h)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/replica/state", data_dir);
    *last_idx = 0;
    h->n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return -1;
    }
    if (st.st_size < 24 || st.st_size > 24 + 16 * (off_t)STATE_MAX_EPOCHS) {
        close(fd);
        errno = EILSEQ;
        return -1;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *p = sl_xmalloc(n);
    ssize_t got = pread(fd, p, n, 0);
    close(fd);
    int rc = -1;
    if (got != (ssize_t)n || memcmp(p, STATE_MAGIC, 4) != 0 || sl_le32(p + 4) != STATE_VERSION ||
        st_crc32c(0, p, n - 4) != sl_le32(p + n - 4) || 24 + 16 * (size_t)sl_le32(p + 16) != n) {
        errno = got < 0 ? errno : EILSEQ;
        goto out;
    }
    *last_idx = sl_le64(p + 8);
    uint32_t k = sl_le32(p + 16);
    for (uint32_t i = 0; i < k; i++) {
        uint64_t e = sl_le64(p + 20 + 16 * i), first = sl_le64(p + 28 + 16 * i);
        if (first == 0 || (h->n && (e <= h->v[h->n - 1].epoch || first < h->v[h->n - 1].first))) {
            h->n = 0;
            *last_idx = 0;
            errno = EILSEQ;
            goto out;
        }
        cl_repl_epochs_note(h, e, first);
    }
    rc = 0;
out:
    sl_free(p);
    return rc;
}

/* ---- replica/pos ---- */

#define POS_MAGIC "SLRP"
#define POS_VERSION 1
#define POS_SLOT 512 /* one sector each: a torn write spoils one slot */
#define POS_LEN 48   /* magic 4, version 4, last 8, count 4, epoch 8, first 8, pad 8, crc 4 */

struct cl_replica_pos {
    int fd;
    unsigned next; /* the slot written next */
};

static void pos_encode(uint8_t *p, uint64_t last_idx, const cl_repl_epochs *h)
{
    sl_buf b;
    sl_buf_init(&b);
    sl_buf_append(&b, POS_MAGIC, 4);
    sl_buf_put_le32(&b, POS_VERSION);
    sl_buf_put_le64(&b, last_idx);
    sl_buf_put_le32(&b, (uint32_t)h->n);
    sl_buf_put_le64(&b, h->n ? h->v[h->n - 1].epoch : 0);
    sl_buf_put_le64(&b, h->n ? h->v[h->n - 1].first : 0);
    sl_buf_put_le64(&b, 0);
    sl_buf_put_le32(&b, st_crc32c(0, b.data, b.len));
    memcpy(p, b.data, POS_LEN);
    sl_buf_free(&b);
}

/* The slot's last_idx when it is whole and written under history h; 0 otherwise. */
static uint64_t pos_decode(const uint8_t *p, const cl_repl_epochs *h)
{
    if (memcmp(p, POS_MAGIC, 4) != 0 || sl_le32(p + 4) != POS_VERSION ||
        st_crc32c(0, p, POS_LEN - 4) != sl_le32(p + POS_LEN - 4))
        return 0;
    if (sl_le32(p + 16) != h->n || h->n == 0 || sl_le64(p + 20) != h->v[h->n - 1].epoch ||
        sl_le64(p + 28) != h->v[h->n - 1].first)
        return 0;
    return sl_le64(p + 8);
}

cl_replica_pos *cl_replica_pos_open(const char *data_dir)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/replica", data_dir);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return NULL;
    snprintf(path, sizeof path, "%s/pos", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0)
        goto fail;
    if (st.st_size < 2 * POS_SLOT) {
        /* sized once, durably: from then on a save changes no metadata, so fdatasync is
         * one data write */
        if (ftruncate(fd, 2 * POS_SLOT) < 0 || fsync(fd) < 0 || fsync_dir(dir) < 0)
            goto fail;
    }
    cl_replica_pos *p = sl_xcalloc(1, sizeof *p);
    p->fd = fd;
    return p;
fail:;
    int e = errno;
    close(fd);
    errno = e;
    return NULL;
}

int cl_replica_pos_save(cl_replica_pos *p, uint64_t last_idx, const cl_repl_epochs *h)
{
    uint8_t slot[POS_LEN];
    pos_encode(slot, last_idx, h);
    if (pwrite_all(p->fd, slot, sizeof slot, (uint64_t)p->next * POS_SLOT) < 0 ||
        fdatasync(p->fd) < 0)
        return -1;
    p->next ^= 1;
    return 0;
}

void cl_replica_pos_close(cl_replica_pos *p)
{
    if (!p)
        return;
    close(p->fd);
    sl_free(p);
}

int cl_replica_state_load(const char *data_dir, uint64_t *last_idx, cl_repl_epochs *h)
{
    if (state_load(data_dir, last_idx, h) < 0)
        return -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/replica/pos", data_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0; /* none: the state alone */
    uint8_t buf[2 * POS_SLOT];
    ssize_t got = pread(fd, buf, sizeof buf, 0);
    close(fd);
    for (int s = 0; s < 2; s++)
        if (got >= (ssize_t)(s * POS_SLOT + POS_LEN)) {
            uint64_t v = pos_decode(buf + s * POS_SLOT, h);
            if (v > *last_idx)
                *last_idx = v;
        }
    return 0;
}

/* ------------------------------------------------------------------ bulk */

typedef struct snap_file {
    char *name;
    uint64_t size;
    int fd;
} snap_file;

struct cl_mirror_snap {
    uint64_t idx;
    snap_file *v;
    size_t n, cap;
};

/* The files of the directory `sub` of `at` (rel: its name relative to the data directory;
 * lvl: its components), and those of its subdirectories while names stay within MAX_DEPTH
 * (a stream's directory: streams/INC/). */
static int snap_dir(cl_mirror_snap *s, int at, const char *sub, const char *rel, int lvl)
{
    int dfd = openat(at, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -1;
    int d2 = dup(dfd);
    DIR *d = d2 < 0 ? NULL : fdopendir(d2);
    if (!d) {
        if (d2 >= 0)
            close(d2);
        close(dfd);
        return -1;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        if (!component_ok(de->d_name, nl) || (nl > 4 && !strcmp(de->d_name + nl - 4, ".tmp")))
            continue; /* "." "..", and tmp files: rewritten in place, remade by later groups */
        int fd = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT)
                continue; /* unlinked since: a later group says so */
            continue;
        }
        struct stat st;
        char name[600]; /* every component is at most 64 bytes (component_ok) */
        snprintf(name, sizeof name, "%s/%s", rel, de->d_name);
        if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && lvl + 2 <= MAX_DEPTH) {
            close(fd);
            if (snap_dir(s, dfd, de->d_name, name, lvl + 1) < 0) {
                int e = errno;
                closedir(d);
                close(dfd);
                errno = e;
                return -1;
            }
            continue;
        }
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            continue;
        }
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 32;
            s->v = sl_xrealloc(s->v, s->cap * sizeof *s->v);
        }
        s->v[s->n++] = (snap_file){sl_xstrdup(name), (uint64_t)st.st_size, fd};
    }
    closedir(d);
    close(dfd);
    return 0;
}

static int cmp_snap(const void *a, const void *b)
{
    return strcmp(((const snap_file *)a)->name, ((const snap_file *)b)->name);
}

cl_mirror_snap *cl_mirror_snapshot(cl_mirror *m)
{
    /* Every op of a group <= idx was done before idx was read (ops are captured after they
     * succeed); whatever the listing sees besides is redone by the groups after idx, whose
     * every op is idempotent. So no lock is held while listing: the store goes on. */
    cl_mirror_snap *s = sl_xcalloc(1, sizeof *s);
    s->idx = cl_mirror_last(m);
    int top = open(m->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (top < 0) {
        sl_free(s);
        return NULL;
    }
    int t2 = dup(top);
    DIR *d = t2 < 0 ? NULL : fdopendir(t2);
    if (!d) {
        int e = errno;
        if (t2 >= 0)
            close(t2);
        close(top);
        sl_free(s);
        errno = e;
        return NULL;
    }
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        if (!component_ok(de->d_name, nl) || name_local(de->d_name, nl))
            continue;
        struct stat st;
        if (fstatat(top, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
            continue; /* top-level files are node-local (space-reserve) */
        if (snap_dir(s, top, de->d_name, de->d_name, 1) < 0) {
            rc = -1;
            break;
        }
    }
    int e = errno;
    closedir(d);
    close(top);
    if (rc < 0) {
        cl_mirror_snapshot_free(s);
        errno = e;
        return NULL;
    }
    if (s->n)
        qsort(s->v, s->n, sizeof *s->v, cmp_snap);
    return s;
}

void cl_mirror_snapshot_free(cl_mirror_snap *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        close(s->v[i].fd);
        sl_free(s->v[i].name);
    }
    sl_free(s->v);
    sl_free(s);
}

uint64_t cl_mirror_snap_idx(const cl_mirror_snap *s)
{
    return s->idx;
}

size_t cl_mirror_snap_count(const cl_mirror_snap *s)
{
    return s->n;
}

const char *cl_mirror_snap_name(const cl_mirror_snap *s, size_t i, uint64_t *size)
{
    if (i >= s->n)
        return NULL;
    if (size)
        *size = s->v[i].size;
    return s->v[i].name;
}

long cl_mirror_snap_read(const cl_mirror_snap *s, size_t i, uint64_t off, void *buf, size_t len)
{
    if (i >= s->n) {
        errno = EINVAL;
        return -1;
    }
    if (off >= s->v[i].size)
        return 0;
    if (len > s->v[i].size - off)
        len = (size_t)(s->v[i].size - off);
    if (len > (1u << 30))
        len = 1u << 30;
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(s->v[i].fd, (uint8_t *)buf + got, len - got, (off_t)(off + got));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) { /* cannot happen for an append-only file: say so rather than guess */
            errno = EIO;
            return -1;
        }
        got += (size_t)r;
    }
    return (long)got;
}

int cl_mirror_copy_write(int dirfd, const char *name, uint64_t off, const void *buf, size_t len,
                         char *err, size_t errlen)
{
    size_t nl = strlen(name);
    if (!cl_mirror_name_ok(name, nl) || name_local(name, nl) || depth(name, nl) < 2 ||
        off > MAX_FILE) {
        seterr(err, errlen, "bulk copy: refused name \"%.64s\"", name);
        errno = EINVAL;
        return -1;
    }
    applier a;
    memset(&a, 0, sizeof a);
    a.dirfd = dirfd;
    int slot;
    int fd = get_fd(&a, name, nl, 1, 0, &slot);
    int rc = fd < 0 ? -1 : pwrite_all(fd, buf, len, off);
    int e = errno;
    close_all(&a);
    if (rc < 0) {
        seterr(err, errlen, "bulk copy: %s: %s", name, strerror(e));
        errno = e;
    }
    return rc;
}

static int sync_tree(int dfd, int lvl)
{
    int d2 = dup(dfd);
    DIR *d = d2 < 0 ? NULL : fdopendir(d2);
    if (!d) {
        if (d2 >= 0)
            close(d2);
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        if (!component_ok(de->d_name, nl))
            continue;
        int fd = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct stat st;
        if (fstat(fd, &st) == 0) {
            if (S_ISDIR(st.st_mode) && lvl + 1 < MAX_DEPTH)
                rc = sync_tree(fd, lvl + 1);
            else if (S_ISREG(st.st_mode) && fdatasync(fd) < 0)
                rc = -1;
        }
        close(fd);
    }
    closedir(d);
    if (rc == 0 && fsync(dfd) < 0)
        rc = -1;
    return rc;
}

int cl_mirror_copy_finish(int dirfd, char *err, size_t errlen)
{
    if (sync_tree(dirfd, 0) < 0) {
        seterr(err, errlen, "bulk copy: sync: %s", strerror(errno));
        return -1;
    }
    return 0;
}
