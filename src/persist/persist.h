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

/* ---- node-to-node links (src/link/) ---- */
/* The node's identity on links: 16 random bytes made the first time a link needs them
 * (written to meta then; a node that never sends keeps none), the same ever after. */
const uint8_t *persist_node_id(persist *p);
/* ConnectionActive as stored (1 for a node that never went offline). */
int persist_online(const persist *p);
void persist_set_online(persist *p, int online);
/* An outgoing queue's stored transfer state (OQ_* flags in records.h, link_foreign). */
void persist_outq_get(const persist *p, uint64_t incarnation, uint8_t *flags, uint8_t *foreign);
void persist_outq_set(persist *p, uint64_t incarnation, uint8_t flags, uint8_t foreign);
/* Make sure no lookup id <= id can be handed out again after a crash: a link is about to
 * send it as a sequence number. Reserves ahead, so this costs a record (and this turn's
 * sync) once in a long while. */
void persist_reserve_lookup(persist *p, uint64_t id);
/* Bracket records that must apply all or nothing (like a transaction commit's). */
void persist_group(persist *p, int begin);

/* A link receiver's state for one incoming sequence (MS-MQDMPR
 * IncomingTransactionalTransferInfo). */
typedef struct persist_eod_in {
    uint8_t sender[16];
    uint64_t seq_id;
    uint64_t seq_no;    /* last accepted */
    uint64_t access_ms; /* wall clock of the last message seen */
    uint32_t rejects;   /* refused since the last accept */
    char *sender_name;  /* the sending node's name */
    char *dest;         /* the queue it feeds ("vhost/queue" or "queue") */
    uint32_t seg;       /* segment of its newest record (referenced) */
    uint8_t logged;
} persist_eod_in;
persist_eod_in *persist_eod_in_get(persist *p, const uint8_t sender[16], uint64_t seq_id);
/* Record the new state (inside a persist_group when it goes with enqueues); the record needs
 * this turn's sync. */
void persist_eod_in_set(persist *p, const uint8_t sender[16], uint64_t seq_id, uint64_t seq_no,
                        uint32_t rejects, const char *sender_name, const char *dest);
/* Every incoming sequence, for PROPID_MGMT_QUEUE_EOD_SOURCE_INFO; *n entries, owned by p. */
persist_eod_in **persist_eod_in_all(persist *p, size_t *n);

#endif
