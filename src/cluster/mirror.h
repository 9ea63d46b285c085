/* mirror.h - physical replication of a data directory (issue 31, docs/cluster.md "Replication:
 * the mirror"): every file operation the leader's store makes under its data directory is
 * captured, in order, into groups; a follower replays the groups into its own directory, which
 * so stays a byte-for-byte mirror that is crash-consistent after every prefix of operations.
 *
 * Leader side. cl_mirror_leader_new installs a process-wide observer on the store (st_log's file
 * operation hook: segment writes, creation, fdatasync and directory fsync barriers, unlinks of
 * reclaimed segments, the holes file's tmp + rename, torn-tail and close-time ftruncate,
 * mkdir of meta/ and msgs/; and the stream queues' logs under streams/INC/, store/stream.h:
 * their directory's mkdir and removal, segment creation, writes, syncs and retention's
 * unlinks, each batch's writes on the sync thread ahead of the messages batch of the same
 * generation, so in the group that generation's confirms wait for; a generation with stream
 * batches and no messages batch reports ST_FOP_WRITTEN for streams/ instead). Operations on files
 * outside data_dir are ignored (other stores of the process). A group is closed as soon as a batch
 * has made its writes (the store's ST_FOP_WRITTEN, on the sync thread, before the batch's
 * fdatasync), and notify hands it to the replication server at once: followers write and sync it
 * while the leader syncs it. persist calls cl_mirror_batch after each batch (one persist
 * generation, light batches too): that group becomes the generation's (synced when the batch was),
 * or, when the batch closed none or more than barriers was captured since, the operations captured
 * since the previous group become group last + 1. Only cl_mirror_batch moves the durable index.
 * Groups are kept in a ring bounded by ring_bytes (the oldest go first; the newest is always kept).
 * Node-local files are never captured: DATA_DIR/space-reserve (each node's own reserve) and
 * DATA_DIR/replica/ (each node's own log position). Persist reports its batches through
 * persist_options.batch_hook (set it to cl_mirror_persist_hook).
 *
 * A group's encoding (all integers little-endian):
 *   magic "SLMG" u32 version(1) u64 idx u64 epoch u64 gen u32 nops
 *   (gen: informational; a group closed before its batch ended carries the one before)
 *   nops x op:  u8 kind, u16 name_len, name (relative: "msgs/00000000000000000001.seg",
 *               "streams/0000000000000003/00000000000000000000.seg"),
 *               then per kind: WRITE u64 off, u32 len, bytes; CREATE u8 trunc;
 *               TRUNCATE u64 size; RENAME u16 len, new name; others nothing
 *   u32 CRC32C of everything before it.
 * Names: 1 to 3 components of [A-Za-z0-9._-], no "." or ".." component, no leading '/'; a
 * directory op (MKDIR, DIRSYNC, RMDIR) names 1 or 2, a file op 2 or 3.
 *
 * Follower side. cl_mirror_apply replays one group into a directory. Every operation uses
 * absolute offsets and names, so re-applying a group after a crash in the middle of it gives
 * the same files (create does not fail on an existing file, unlink and rename of a missing
 * source are taken as already done). It fsyncs where the group's barriers say, and at the end
 * fdatasyncs every file it wrote and fsyncs every directory whose names changed: when it
 * returns 0 the whole group is on the disk. A group that fails its checks (CRC, bounds, a
 * hostile name) is refused before any operation is applied.
 *
 * Thread safety: a mirror has its own lock. The observer runs on the sync thread and on the
 * loop thread; cl_mirror_batch on the thread that ends persist's batches; cl_mirror_group,
 * cl_mirror_snapshot and the rest on any thread (the replication thread).
 */
#ifndef SL_CLUSTER_MIRROR_H
#define SL_CLUSTER_MIRROR_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/repl.h"

typedef struct cl_mirror cl_mirror;
typedef struct cl_mirror_snap cl_mirror_snap;

/* File operation kinds as encoded (also st_log's observer kinds, store/log.h). */
enum {
    CL_MIRROR_OP_WRITE = 1,    /* bytes at an offset of a file (created if missing) */
    CL_MIRROR_OP_CREATE = 2,   /* make the file (trunc: emptied if it exists) */
    CL_MIRROR_OP_SYNC = 3,     /* fdatasync of the file: a barrier */
    CL_MIRROR_OP_DIRSYNC = 4,  /* fsync of the directory named: a barrier */
    CL_MIRROR_OP_UNLINK = 5,   /* remove the file (missing: done) */
    CL_MIRROR_OP_TRUNCATE = 6, /* set the file's size */
    CL_MIRROR_OP_RENAME = 7,   /* rename name -> new name (source missing: done) */
    CL_MIRROR_OP_MKDIR = 8,    /* make the directory, and its parent (exists: done) */
    CL_MIRROR_OP_RMDIR = 10    /* remove the emptied directory (missing: done) */
};

#define CL_MIRROR_MAX_GROUP (1u << 31) /* an encoded group is never bigger */
#define CL_MIRROR_DEFAULT_RING (256ull << 20)

/* ---- leader ---- */
/* Before persist_open, with data_dir spelled exactly as persist_open gets it (operations are
 * matched by that prefix): captures from now on. The first group (idx last + 1, see
 * cl_mirror_start) holds whatever persist_open's recovery changed on disk. NULL with errno when
 * another mirror is installed. */
cl_mirror *cl_mirror_leader_new(const char *data_dir, uint64_t ring_bytes);
/* Uninstalls the observer and frees the ring (after persist_close). */
void cl_mirror_free(cl_mirror *m);
/* Where the log continues: the next group is last_idx + 1 and carries epoch (the leader's).
 * Call before the first cl_mirror_batch (default: last_idx 0, epoch 0). */
void cl_mirror_start(cl_mirror *m, uint64_t epoch, uint64_t last_idx);
/* persist: the batch of generation gen has ended (written; synced when synced is 1). The ops
 * captured since the previous call become the next group (one even when empty, so every
 * generation has its group). Returns the group's idx. */
uint64_t cl_mirror_batch(cl_mirror *m, uint64_t gen, int synced);
/* cl_mirror_batch in persist_options.batch_hook's shape: po.batch_hook = cl_mirror_persist_hook,
 * po.batch_ctx = the mirror. */
void cl_mirror_persist_hook(void *m, uint64_t gen, int synced);
/* Called (outside the mirror's lock, in idx order) after each new group, on the thread that
 * made it: the sync thread at ST_FOP_WRITTEN, then the loop in cl_mirror_batch, which calls it
 * again with the same idx once the group's batch ended (cl_mirror_durable may have moved): the
 * replication thread's wake-up (an eventfd write). NULL: none. Once this returns, the previous
 * fn is neither running nor called again. */
void cl_mirror_set_notify(cl_mirror *m, void (*fn)(void *ctx, uint64_t idx, uint64_t bytes),
                          void *ctx);

uint64_t cl_mirror_last(const cl_mirror *m); /* last group idx (0: none yet) */
uint64_t
cl_mirror_first_kept(const cl_mirror *m); /* oldest idx still in the ring (last + 1: none) */
/* A copy (sl_free it) of group idx's encoding; -1 when it is no longer (or not yet) kept. */
int cl_mirror_group(cl_mirror *m, uint64_t idx, uint8_t **bytes, size_t *len, uint64_t *epoch);
/* The generation whose batch made group idx (0 when not kept). */
uint64_t cl_mirror_gen_of(const cl_mirror *m, uint64_t idx);
/* The newest group whose generation is <= gen (0: none): maps persist_durable() to cl_rl_durable
 * and back. */
uint64_t cl_mirror_idx_of_gen(const cl_mirror *m, uint64_t gen);
/* The newest group whose batch synced (every group <= it is on the leader's disk). */
uint64_t cl_mirror_durable(const cl_mirror *m);

/* ---- follower ---- */
/* Apply one encoded group into the directory dirfd (idempotent, see above). 0, or -1 with a
 * message in err (nothing applied when the group failed its checks; an I/O error may leave a
 * prefix applied: re-apply the group). */
int cl_mirror_apply(int dirfd, const uint8_t *group, size_t len, char *err, size_t errlen);
#define CL_MIRROR_APPLY_NOSYNC 1 /* tests only: skip every fsync */
/* With flags, and ops_max: apply at most that many ops then stop, returning 1 (tests: a
 * kill -9 in the middle of a group); SIZE_MAX: all. */
int cl_mirror_apply_ex(int dirfd, const uint8_t *group, size_t len, unsigned flags, size_t ops_max,
                       char *err, size_t errlen);
/* The follower's applier: groups applied one after another with their files kept open and
 * their barriers (SYNC, DIRSYNC, new names) left to cl_mirror_applier_sync, which makes every
 * group applied since the last sync durable at once (files, then directories): one
 * fdatasync per file per batch instead of one per group, and no open/close per group. Only
 * for a directory whose state between two syncs nobody trusts after a crash: the follower's
 * in-flight marker (node.c) is durably set before the first apply after a save, so a node
 * killed or powered off between two syncs takes a full copy. A rename still syncs its source
 * first. apply: as cl_mirror_apply without the syncs (-1 with err; the group may be partly
 * applied: re-apply it). sync: 0, or -1 with err. syncs: fsync calls made (tests). free
 * closes the files without syncing them. flags: CL_MIRROR_APPLY_NOSYNC or 0. */
typedef struct cl_mirror_applier cl_mirror_applier;
cl_mirror_applier *cl_mirror_applier_new(int dirfd, unsigned flags);
int cl_mirror_applier_apply(cl_mirror_applier *m, const uint8_t *group, size_t len, char *err,
                            size_t errlen);
int cl_mirror_applier_sync(cl_mirror_applier *m, char *err, size_t errlen);
uint64_t cl_mirror_applier_syncs(const cl_mirror_applier *m);
void cl_mirror_applier_free(cl_mirror_applier *m);
/* Check a group's encoding without applying it: 0 with its header fields, or -1 with err. */
int cl_mirror_group_check(const uint8_t *group, size_t len, uint64_t *idx, uint64_t *epoch,
                          uint64_t *gen, uint32_t *nops, char *err, size_t errlen);

/* DATA_DIR/replica/state: the last group durably in this directory and the epoch history.
 * Written atomically (tmp, fsync, rename, directory fsync). load: 0 (no file: *last_idx 0,
 * empty history), or -1 with errno on a damaged file (EILSEQ) or I/O error. h must be
 * initialised (cl_repl_epochs_init); load replaces its content. */
int cl_replica_state_load(const char *data_dir, uint64_t *last_idx, cl_repl_epochs *h);
int cl_replica_state_save(const char *data_dir, uint64_t last_idx, const cl_repl_epochs *h);

/* DATA_DIR/replica/pos: the follower's position between two saves of the state, written in
 * place with one fdatasync (the state's tmp + fsync + rename + directory fsync cost three
 * syncs, paid on every batch of groups a follower acknowledged: issue 31's confirm latency).
 * Two 512-byte slots, written in turn, each: "SLRP" u32 version u64 last_idx, the history's
 * fingerprint (u32 count, u64 last epoch, u64 its first group), u32 CRC32C; a torn write
 * spoils one slot only. cl_replica_state_load reads it too: a slot that is whole and whose
 * fingerprint is the state's history raises *last_idx to its last_idx when higher (a
 * directory's durable position never goes back, so the higher of the two is the newer).
 * A slot written under another history (the state was saved since with a new epoch) is
 * ignored. open: creates the file (size, fsync, directory fsync) if need be; NULL errno. */
typedef struct cl_replica_pos cl_replica_pos;
cl_replica_pos *cl_replica_pos_open(const char *data_dir);
int cl_replica_pos_save(cl_replica_pos *p, uint64_t last_idx, const cl_repl_epochs *h);
void cl_replica_pos_close(cl_replica_pos *p);

/* ---- bulk (full copy for a joiner) ---- */
/* Taken between two groups: every mirrored file under data_dir with its size, each opened (an
 * open descriptor keeps an unlinked file readable). The copy plus every group after
 * cl_mirror_snap_idx() is the leader's directory. NULL with errno. */
cl_mirror_snap *cl_mirror_snapshot(cl_mirror *m);
void cl_mirror_snapshot_free(cl_mirror_snap *s);
uint64_t cl_mirror_snap_idx(const cl_mirror_snap *s); /* the last group the copy includes */
size_t cl_mirror_snap_count(const cl_mirror_snap *s);
/* File i: its relative name ("msgs/...seg", "meta/...", "msgs/holes") and size. */
const char *cl_mirror_snap_name(const cl_mirror_snap *s, size_t i, uint64_t *size);
/* Read up to len bytes of file i at off (short only at the size). Bytes read, -1 errno. */
long cl_mirror_snap_read(const cl_mirror_snap *s, size_t i, uint64_t off, void *buf, size_t len);

/* Follower: write file name's bytes [off, off+len) into a joining directory (dirfd of
 * DATA_DIR.joining), creating subdirectories and the file as needed; names checked as groups'
 * are. cl_mirror_copy_finish fdatasyncs every file written and fsyncs the directories. */
int cl_mirror_copy_write(int dirfd, const char *name, uint64_t off, const void *buf, size_t len,
                         char *err, size_t errlen);
int cl_mirror_copy_finish(int dirfd, char *err, size_t errlen);

/* Is name a path the mirror may touch (see the encoding above)? */
int cl_mirror_name_ok(const char *name, size_t len);

#endif
