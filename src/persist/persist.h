/* persist.h - the durable state of a node: turns the queue model's changes into store records
 * (through qm's persistence hooks) and rebuilds the model from them at start.
 *
 * Two logs under the data directory:
 *   meta/   definitions: durable queues (and subqueues), exchanges, bindings, and the access
 *           module's vhosts, users, permissions and limits. Small; rewritten as a fresh
 *           snapshot at every start.
 *   msgs/   persistent messages in durable queues: the message itself once, an enqueue record
 *           per queue position, and removal, delivery, purge and move records. Reclaimed by
 *           TIDY from the oldest segment on.
 *
 * What needs the disk before a reply: messages (publisher confirms, tx.commit-ok), purges,
 * moves and every definition. Acks and delivery marks ride along with the next sync: losing
 * one in a crash only redelivers a message, it never loses one. Delivery marks are still
 * written (not synced) before the turn's replies, so a process crash (kill -9) keeps them:
 * what was delivered comes back redelivered. The broker calls
 * persist_commit once per event-loop turn, before it writes any reply of that turn to a
 * socket, so a reply never goes out before what it promises is on disk (group commit).
 */
#ifndef SL_PERSIST_PERSIST_H
#define SL_PERSIST_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "../qm/qm.h"

typedef struct persist persist;

struct acc_db;

typedef struct persist_options {
    uint64_t segment_size; /* msgs log segment size (default 64 MiB) */
    /* The access module (users, vhost definitions, permissions): its records (meta types
     * 20-39) are replayed into it, it is snapshotted with the definitions, and its changes
     * are written in the turn's group commit. NULL: such records are skipped (inspection). */
    struct acc_db *acc;
    int no_sync;   /* tests only */
    int read_only; /* inspection (sluice-store): recover into node, write nothing */
} persist_options;

/* Open data_dir/meta and data_dir/msgs, recover every durable definition and message into
 * node, and install the hooks. Every vhost defined in opt->acc exists in node afterwards,
 * and every vhost of node has a definition there. NULL with a message naming the file and
 * offset on corruption. */
persist *persist_open(const char *data_dir, qm_node *node, const persist_options *opt, char *err,
                      size_t errlen);
void persist_close(persist *p);

/* Group commit: write what this turn appended; fdatasync when anything in it needs the disk.
 * 0, or -1 with err (the store is then failed: the caller must stop before replying). */
int persist_commit(persist *p, char *err, size_t errlen);
/* The same, and with force also sync records that did not need it (acks, delivery marks):
 * called about once a second and at a clean stop, so they are not held back indefinitely. */
int persist_commit_ex(persist *p, int force, char *err, size_t errlen);

typedef struct persist_stats {
    uint64_t recovered_queues, recovered_messages, recovery_ms;
    uint64_t msgs_segments, msgs_bytes, commits, records;
} persist_stats;
void persist_get_stats(const persist *p, persist_stats *out);

/* TIDY: delete msgs segments whose records are all dead (oldest first). */
void persist_tidy(persist *p, uint64_t *segments, uint64_t *bytes);

#endif
