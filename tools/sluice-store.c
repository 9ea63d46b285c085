/* sluice-store.c - offline inspection of a Sluice record log (like mdb_stat, redis-check-aof).
 *
 *   sluice-store check DIR   verify every segment; exit 0 if clean, 1 with the message if not
 *                            (a torn tail is reported, never truncated: read-only open)
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

#include "store/log.h"

/* ------------------------------------------------------------------ record types */

/* Prints a decoded payload after the common columns (no newline). */
typedef void (*rec_printer)(FILE *out, uint8_t type, const uint8_t *p, size_t len);

typedef struct rec_type {
    const char *name;  /* NULL: unknown type, shown as its number */
    rec_printer print; /* NULL: hex preview */
} rec_type;

/* Indexed by the type octet. Example: [1] = {"queue.declare", print_queue_declare}. */
static const rec_type REC_TYPES[256] = {
    [0] = {NULL, NULL},
};

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
    if (REC_TYPES[type].name)
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
    if (REC_TYPES[type].print)
        REC_TYPES[type].print(out, type, p, len);
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
    fprintf(stderr, "usage: sluice-store check|dump|stats DIR\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return usage();
    const char *cmd = argv[1], *dir = argv[2];
    if (strcmp(cmd, "check") && strcmp(cmd, "dump") && strcmp(cmd, "stats"))
        return usage();

    static scan s; /* per_type makes it big: keep it off the stack */
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
