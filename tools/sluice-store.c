/* sluice-store.c - offline inspection of a Sluice data directory or of one record log (like
 * mdb_stat, redis-check-aof).
 *
 *   sluice-store check DIR   verify every segment; exit 0 if clean, 1 with the message if not
 *                            (a torn tail is reported, never truncated: read-only open). On a
 *                            data directory (DIR/meta and DIR/msgs) it also replays the records
 *                            into a scratch queue manager, as a start would, and lists queues
 *   sluice-store queues DIR  the durable queues of a data directory with their message counts
 *   sluice-store dump DIR    one line per record: seq, type, length, file, offset, preview
 *   sluice-store stats DIR   segments, bytes, records, per-type counts
 *
 * It never writes to DIR, so it is safe on a log a broker has open (it may then see a tail
 * that is still being written). Record meaning lives above the store: REC_TYPES below maps a
 * type octet to a name and an optional printer for its payload; the broker's record types
 * are added there (and only there) as they are defined.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "persist/persist.h"
#include "persist/records.h"
#include "qm/qm.h"
#include "store/log.h"

/* ------------------------------------------------------------------ record types */

/* Prints a decoded payload after the common columns (no newline). */
typedef void (*rec_printer)(FILE *out, uint8_t type, const uint8_t *p, size_t len);

typedef struct rec_type {
    const char *name;  /* NULL: unknown type, shown as its number */
    rec_printer print; /* NULL: hex preview */
} rec_type;

static void print_u64s(FILE *out, const uint8_t *p, size_t len, const char *const *names)
{
    rec_reader r = {p, p + len, 0};
    for (int i = 0; names[i]; i++) {
        uint64_t v = rd_u64(&r);
        if (r.bad)
            break;
        fprintf(out, "%s%s=%" PRIu64, i ? " " : "", names[i], v);
    }
}

static void print_msg(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    rec_reader r = {p, p + len, 0};
    uint64_t id = rd_u64(&r);
    amqp_bytes ex = rd_s16(&r), rk = rd_s16(&r), props = rd_b32(&r), body = rd_rest(&r);
    fprintf(out, "id=%" PRIu64 " exchange='%.*s' routing_key='%.*s' props=%zu body=%zu", id,
            (int)ex.len, (const char *)ex.p, (int)rk.len, (const char *)rk.p, props.len, body.len);
}

/* Two u64 fields named n, then a u32 named last. */
static void print_u64s_u32(FILE *out, const uint8_t *p, size_t len, const char *const *n,
                           const char *last)
{
    print_u64s(out, p, len, n);
    rec_reader r = {p + 16, p + len, 0};
    if (len < 16)
        return;
    uint32_t v = rd_u32(&r);
    if (!r.bad)
        fprintf(out, " %s=%" PRIu32, last, v);
}

static void print_enq(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    static const char *const n[] = {"inc", "lookup", "msg", NULL};
    print_u64s(out, p, len, n);
    rec_reader r = {p + 24, p + len, 0};
    if (len < 24)
        return;
    uint32_t moves = rd_u32(&r);
    uint8_t flags = rd_u8(&r);
    if (r.bad)
        return;
    fprintf(out, " moves=%" PRIu32 "%s", moves, flags & EF_REDELIVERED ? " redelivered" : "");
    if (flags & EF_EXPIRES) {
        uint64_t at = rd_u64(&r);
        if (!r.bad)
            fprintf(out, " expires=%" PRIu64 "ms", at);
    }
    if (flags & EF_DCOUNT) {
        uint32_t dcount = rd_u32(&r);
        if (!r.bad)
            fprintf(out, " delivery_count=%" PRIu32, dcount);
    }
}

/* R_QDELIVER: a quorum queue's delivery and the message's delivery count then. */
static void print_qdeliver(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    static const char *const n[] = {"inc", "lookup", NULL};
    print_u64s_u32(out, p, len, n, "delivery_count");
}

/* R_STREAM_TRACK: a stream's tracked reference (a stored offset or a publisher's sequence). */
static void print_track(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    rec_reader r = {p, p + len, 0};
    uint64_t inc = rd_u64(&r);
    uint8_t kind = rd_u8(&r);
    uint64_t value = rd_u64(&r), cover = rd_u64(&r);
    amqp_bytes ref = rd_s16(&r);
    if (r.bad)
        return;
    fprintf(out, "inc=%" PRIu64 " %s='%.*s' %s=%" PRIu64, inc,
            kind == 'p' ? "publisher" : "consumer", (int)ref.len, (const char *)ref.p,
            kind == 'p' ? "sequence" : "offset", value);
    if (kind == 'p')
        fprintf(out, " cover=%" PRIu64, cover);
}

static void print_inc_lookup(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    static const char *const n[] = {"inc", "lookup", NULL};
    print_u64s(out, p, len, n);
}

static void print_run(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    static const char *const n[] = {"inc", "first", NULL};
    print_u64s_u32(out, p, len, n, "count");
}

static void print_inc(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    static const char *const n[] = {"inc", NULL};
    print_u64s(out, p, len, n);
}

static void print_move(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    static const char *const n[] = {"src_inc", "lookup", "dest_inc", NULL};
    print_u64s(out, p, len, n);
    rec_reader r = {p + 24, p + len, 0};
    if (len < 24)
        return;
    uint32_t moves = rd_u32(&r);
    if (r.bad)
        return;
    fprintf(out, " moves=%" PRIu32, moves);
    if (type != R_MOVE_TTL)
        return;
    uint8_t flags = rd_u8(&r);
    uint64_t at = flags & EF_EXPIRES ? rd_u64(&r) : 0;
    if (!r.bad)
        fprintf(out, at ? " expires=%" PRIu64 "ms" : " expires=none", at);
}

static void print_queue(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    rec_reader r = {p, p + len, 0};
    uint64_t inc = rd_u64(&r), parent = rd_u64(&r);
    rd_u8(&r);
    amqp_bytes vh = rd_s16(&r), name = rd_s16(&r);
    fprintf(out, "inc=%" PRIu64 " parent=%" PRIu64 " vhost='%.*s' name='%.*s'", inc, parent,
            (int)vh.len, (const char *)vh.p, (int)name.len, (const char *)name.p);
}

static void print_exchange(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    rec_reader r = {p, p + len, 0};
    if (type == M_EXCHANGE) {
        rd_u8(&r);
        rd_u8(&r);
    }
    amqp_bytes vh = rd_s16(&r), name = rd_s16(&r);
    fprintf(out, "vhost='%.*s' name='%.*s'", (int)vh.len, (const char *)vh.p, (int)name.len,
            (const char *)name.p);
}

static void print_binding(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    rec_reader r = {p, p + len, 0};
    uint8_t kind = rd_u8(&r);
    amqp_bytes vh = rd_s16(&r), src = rd_s16(&r), dest = rd_s16(&r), key = rd_s16(&r);
    fprintf(out, "vhost='%.*s' source='%.*s' %s='%.*s' key='%.*s'", (int)vh.len, (const char *)vh.p,
            (int)src.len, (const char *)src.p, kind ? "exchange" : "queue", (int)dest.len,
            (const char *)dest.p, (int)key.len, (const char *)key.p);
}

static void print_node(FILE *out, uint8_t type, const uint8_t *p, size_t len)
{
    static const char *const n[] = {"next_incarnation", "next_lookup", "next_msg", NULL};
    print_u64s(out, p, len, n);
}

/* Indexed by the type octet, one table per log of a data directory (persist/records.h). */
static const rec_type MSGS_TYPES[256] = {
    [R_MSG] = {"message", print_msg},
    [R_ENQ] = {"enqueue", print_enq},
    [R_DEQ] = {"remove", print_inc_lookup},
    [R_DELIVER] = {"delivered", print_inc_lookup},
    [R_PURGE] = {"purge", print_inc},
    [R_MOVE] = {"move", print_move},
    [R_TX_BEGIN] = {"tx.begin", NULL},
    [R_TX_END] = {"tx.end", NULL},
    [R_TX_ABORT] = {"tx.abort", NULL},
    [R_MOVE_TTL] = {"move", print_move},
    [R_DEQ_RUN] = {"remove", print_run},
    [R_DELIVER_RUN] = {"delivered", print_run},
    [R_QDELIVER] = {"delivered", print_qdeliver},
    [R_STREAM_TRACK] = {"stream.track", print_track},
};
static const rec_type META_TYPES[256] = {
    [M_QUEUE] = {"queue", print_queue},
    [M_QUEUE_DEL] = {"queue.delete", print_inc},
    [M_EXCHANGE] = {"exchange", print_exchange},
    [M_EXCHANGE_DEL] = {"exchange.delete", print_exchange},
    [M_BIND] = {"bind", print_binding},
    [M_UNBIND] = {"unbind", print_binding},
    [M_NODE] = {"node", print_node},
};
static const rec_type NO_TYPES[256];
static const rec_type *REC_TYPES = NO_TYPES;

#define PREVIEW 16

static void print_hex_preview(FILE *out, const uint8_t *p, size_t len)
{
    size_t n = len < PREVIEW ? len : PREVIEW;
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%02x", p[i]);
    fputs(len > n ? "... |" : " |", out);
    for (size_t i = 0; i < n; i++)
        fputc(p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '.', out);
    fputc('|', out);
}

static void type_label(char *buf, size_t n, uint8_t type)
{
    /* In the msgs log, R_IN_TX marks a transaction's records. */
    if (REC_TYPES == MSGS_TYPES && (type & R_IN_TX) && REC_TYPES[type & 0x7f].name)
        snprintf(buf, n, "%s+tx(%u)", REC_TYPES[type & 0x7f].name, type);
    else if (REC_TYPES[type].name)
        snprintf(buf, n, "%s(%u)", REC_TYPES[type].name, type);
    else
        snprintf(buf, n, "%u", type);
}

/* The dump line of one record; extend per type through REC_TYPES. */
static void print_record(FILE *out, uint64_t seq, uint8_t type, const uint8_t *p, size_t len,
                         const char *file, uint64_t offset)
{
    char tl[64];
    type_label(tl, sizeof tl, type);
    fprintf(out, "%" PRIu64 "\t%s\t%zu\t%s\t%" PRIu64 "\t", seq, tl, len, file, offset);
    uint8_t base = REC_TYPES == MSGS_TYPES ? (uint8_t)(type & 0x7f) : type;
    if (REC_TYPES[base].print)
        REC_TYPES[base].print(out, base, p, len);
    else
        print_hex_preview(out, p, len);
    fputc('\n', out);
}

/* ------------------------------------------------------------------ scanning */

typedef struct scan {
    int dump;
    char file[32]; /* name of the segment of the last record */
    uint32_t last_segment;
    uint64_t records, payload_bytes, first_seq, last_seq;
    uint64_t per_type[256];
    uint64_t segments_with_records;
} scan;

static int on_record(void *ctx, uint64_t seq, uint8_t type, const uint8_t *p, size_t len,
                     st_loc loc)
{
    scan *s = ctx;
    /* A segment is named after its first record's seq (log.h), and recovery has checked
     * that, so the first record seen in each segment names the file. */
    if (s->records == 0 || loc.segment != s->last_segment) {
        snprintf(s->file, sizeof s->file, "%020" PRIu64 ".seg", seq);
        s->last_segment = loc.segment;
        s->segments_with_records++;
    }
    if (s->records == 0)
        s->first_seq = seq;
    s->last_seq = seq;
    s->records++;
    s->payload_bytes += len;
    s->per_type[type]++;
    if (s->dump)
        print_record(stdout, seq, type, p, len, s->file, loc.offset);
    return 0;
}

static st_log *open_ro(const char *dir, scan *s, char *err, size_t errlen)
{
    st_log_options o = {0};
    o.read_only = 1;
    return st_log_open(dir, &o, on_record, s, err, errlen);
}

static int usage(void)
{
    fprintf(stderr, "usage: sluice-store check|queues|dump|stats DIR\n"
                    "  DIR: a data directory (with meta/ and msgs/) or one log directory\n");
    return 2;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_data_dir(const char *dir)
{
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/meta", dir);
    snprintf(b, sizeof b, "%s/msgs", dir);
    return is_dir(a) && is_dir(b);
}

/* Replay a data directory into a scratch queue manager, as sluiced would at start, and list
 * its durable queues. Read-only: nothing is truncated or rewritten. */
static int list_queues(const char *dir)
{
    qm_node *n = qm_node_new("sluice-store");
    qm_vhost_create(n, "/");
    char err[1024];
    persist_options o = {.read_only = 1};
    persist *p = persist_open(dir, n, &o, err, sizeof err);
    if (!p) {
        fprintf(stderr, "%s\n", err);
        qm_node_free(n);
        return 1;
    }
    printf("vhost\tqueue\tincarnation\tmessages\tbytes\n");
    size_t vit = 0;
    const char *k;
    size_t kl;
    void *vv;
    uint64_t total = 0;
    while (sl_map_next(n->vhosts, &vit, &k, &kl, &vv)) {
        qm_vhost *vh = vv;
        size_t it = 0;
        void *v;
        while (sl_map_next(vh->queues, &it, &k, &kl, &v)) {
            qm_queue *q = v;
            if (!q->durable || q->exclusive)
                continue;
            printf("%s\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\n", vh->name, q->name,
                   q->incarnation, qm_queue_message_count(q), q->bytes_total);
            total += qm_queue_message_count(q);
            size_t sit = 0;
            void *sv;
            while (q->subqueues && sl_map_next(q->subqueues, &sit, &k, &kl, &sv)) {
                qm_queue *sq = sv;
                printf("%s\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\n", vh->name, sq->name,
                       sq->incarnation, qm_queue_message_count(sq), sq->bytes_total);
                total += qm_queue_message_count(sq);
            }
        }
    }
    persist_stats st;
    persist_get_stats(p, &st);
    printf("total\t%" PRIu64 " message(s) in %" PRIu64 " queue(s), replayed in %" PRIu64 " ms\n",
           total, st.recovered_queues, st.recovery_ms);
    persist_close(p);
    qm_node_free(n);
    return 0;
}

static int run_one(const char *cmd, const char *dir);

int main(int argc, char **argv)
{
    if (argc != 3)
        return usage();
    const char *cmd = argv[1], *dir = argv[2];
    if (strcmp(cmd, "check") && strcmp(cmd, "dump") && strcmp(cmd, "stats") &&
        strcmp(cmd, "queues"))
        return usage();
    if (!is_data_dir(dir)) {
        if (!strcmp(cmd, "queues")) {
            fprintf(stderr, "%s: not a data directory (no meta/ and msgs/)\n", dir);
            return 1;
        }
        return run_one(cmd, dir);
    }
    if (!strcmp(cmd, "queues"))
        return list_queues(dir);
    int rc = 0;
    static const char *const parts[] = {"meta", "msgs"};
    for (int i = 0; i < 2; i++) {
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, parts[i]);
        REC_TYPES = i == 0 ? META_TYPES : MSGS_TYPES;
        if (strcmp(cmd, "check"))
            printf("== %s\n", sub);
        rc |= run_one(cmd, sub);
    }
    if (!strcmp(cmd, "check") && rc == 0)
        rc = list_queues(dir);
    return rc;
}

static int run_one(const char *cmd, const char *dir)
{
    static scan s; /* per_type makes it big: keep it off the stack */
    memset(&s, 0, sizeof s);
    char err[1024];
    s.dump = !strcmp(cmd, "dump");
    st_log *l = open_ro(dir, &s, err, sizeof err);
    if (!l) {
        fprintf(stderr, "%s\n", err[0] ? err : "cannot open log");
        return 1;
    }
    const char *torn = st_log_torn_tail(l);
    int rc = 0;
    if (!strcmp(cmd, "check")) {
        if (torn) {
            fprintf(stderr, "%s (the broker truncates it on its next start)\n", torn);
            rc = 1;
        } else if (s.records) {
            printf("%s: ok: %" PRIu64 " records, seq %" PRIu64 "..%" PRIu64 "\n", dir, s.records,
                   s.first_seq, s.last_seq);
        } else {
            printf("%s: ok: no records\n", dir);
        }
    } else if (!strcmp(cmd, "stats")) {
        st_log_stats st;
        st_log_get_stats(l, &st);
        printf("segments\t%" PRIu64 "\n", st.segments);
        printf("bytes\t%" PRIu64 "\n", st.bytes);
        printf("records\t%" PRIu64 "\n", s.records);
        printf("payload_bytes\t%" PRIu64 "\n", s.payload_bytes);
        if (s.records)
            printf("seq\t%" PRIu64 "..%" PRIu64 "\n", s.first_seq, s.last_seq);
        for (int t = 0; t < 256; t++) {
            if (!s.per_type[t])
                continue;
            char tl[64];
            type_label(tl, sizeof tl, (uint8_t)t);
            printf("type %s\t%" PRIu64 "\n", tl, s.per_type[t]);
        }
        if (torn)
            printf("torn_tail\t%s\n", torn);
    } else if (torn) {
        fprintf(stderr, "%s\n", torn);
    }
    st_log_close(l);
    return rc;
}
