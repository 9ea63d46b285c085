/* alarm.c - the resource alarms (RabbitMQ's): messages in memory above
 * memory_high_watermark, or less free disk under the data directory than disk_free_limit,
 * block publishing connections; so does a cluster leader below min_insync_replicas. Doors
 * hear of it through their part's alarms_changed hook: the AMQP door sends connection.blocked
 * (when asked for) and stops reading publishers until every alarm has cleared; consumers keep
 * going, which is what lets memory drain. Blocking before the disk is full is what keeps a
 * record from ever being half written for lack of space.
 *
 * The space reserve: a file of the size of one message segment and one definitions segment,
 * made when there is room for it. A full disk releases it, so the writes held at that moment
 * and the small ones that keep consumers going (acks, delivery marks) get through while the
 * disk alarm holds back publishers and durable declares; it is made again once the disk has
 * room for it above disk_free_limit.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/log.h"
#include "node/node_internal.h"
#include "persist/persist.h"

uint64_t node_memory_bytes(const sl_node *n)
{
    (void)n;
    /* Messages (whole allocations, partial bodies as they arrive, bookkeeping) and every
     * buffer: connection input and output, replies being built, the store's write buffer. */
    return qm_memory_bytes() + sl_buf_total();
}

const char *node_alarm_reason(const sl_node *n)
{
    if (n->alarms & ALARM_CLUSTER)
        return n->cluster_reason;
    if (n->alarms & ALARM_DISK)
        return "low on disk";
    if (n->alarms & ALARM_MEMORY)
        return "low on memory";
    return NULL;
}

void node_set_cluster_alarm(sl_node *n, int on)
{
    node_set_alarm(n, ALARM_CLUSTER, on);
}

void node_set_alarm(sl_node *n, int which, int on)
{
    int was = n->alarms;
    n->alarms = on ? (n->alarms | which) : (n->alarms & ~which);
    if (n->alarms == was)
        return;
    const char *what = which == ALARM_DISK ? "disk" : which == ALARM_MEMORY ? "memory" : "cluster";
    if (on)
        sl_warn("%s alarm: blocking publishers (%s)", what,
                which == ALARM_DISK     ? "free disk under disk_free_limit"
                : which == ALARM_MEMORY ? "messages in memory above memory_high_watermark"
                                        : n->cluster_reason);
    else
        sl_info("%s alarm cleared", what);
    if ((was != 0) == (n->alarms != 0))
        return;
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].alarms_changed)
            n->parts[i].alarms_changed(n->parts[i].ctx, n->alarms != 0);
}

void node_drop_delivery_holds(sl_node *n)
{
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].drop_delivery_holds)
            n->parts[i].drop_delivery_holds(n->parts[i].ctx);
}

/* Free space is looked at once a second and every DISK_CHECK_STEP bytes the store takes (a
 * quarter of disk_free_limit when that is smaller, at least 64 KiB), at each publish and at
 * the end of each turn: a publisher is blocked within that many bytes, plus what is left of
 * the input chunk being handled, of crossing disk_free_limit, however fast it publishes. */
#define DISK_CHECK_STEP (4u << 20)

static uint64_t disk_check_step(const sl_node *n)
{
    uint64_t step = DISK_CHECK_STEP, q = n->cfg->disk_free_limit / 4;
    if (q && q < step)
        step = q < (64u << 10) ? (64u << 10) : q;
    return step;
}

void node_check_disk_step(sl_node *n)
{
    if (n->store && persist_bytes_appended(n->store) - n->disk_check_bytes >= disk_check_step(n)) {
        n->next_disk_check = 0;
        node_check_disk(n, sl_loop_now(n->loop));
    }
}

#define RESERVE_NAME "space-reserve"

static uint64_t reserve_size(const sl_node *n)
{
    return n->cfg->disk_reserve;
}

static void reserve_path(const sl_node *n, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", n->cfg->data_dir, RESERVE_NAME);
}

void node_check_disk(sl_node *n, uint64_t now)
{
    if (now < n->next_disk_check)
        return;
    n->next_disk_check = now + 1000;
    if (n->store)
        n->disk_check_bytes = persist_bytes_appended(n->store);
    struct statvfs vfs;
    if (statvfs(n->cfg->data_dir, &vfs) < 0)
        return;
    uint64_t free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (!n->reserve_held && free_bytes >= n->cfg->disk_free_limit + 2 * reserve_size(n) &&
        !(n->store && persist_stalled(n->store))) {
        node_reserve_make(n);
        if (n->reserve_held)
            free_bytes -= reserve_size(n);
    }
    n->disk_free = free_bytes; /* what /api/nodes shows: no statvfs per request */
    /* a store holding writes for lack of space keeps the alarm on whatever statvfs says */
    node_set_alarm(n, ALARM_DISK,
                   free_bytes < n->cfg->disk_free_limit || (n->store && persist_stalled(n->store)));
}

void node_reserve_make(sl_node *n)
{
    if (!reserve_size(n))
        return;
    char path[4096];
    reserve_path(n, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    int ok = fallocate(fd, 0, 0, (off_t)reserve_size(n)) == 0;
    close(fd);
    if (!ok) {
        unlink(path); /* no room for it now: the next check tries again */
        return;
    }
    n->reserve_held = 1;
}

/* Made at the start when there is room for it above disk_free_limit; else said so. */
void node_reserve_first(sl_node *n)
{
    struct statvfs rvfs;
    if (!reserve_size(n))
        return;
    if (statvfs(n->cfg->data_dir, &rvfs) == 0 &&
        (uint64_t)rvfs.f_bavail * rvfs.f_frsize >= n->cfg->disk_free_limit + 2 * reserve_size(n))
        node_reserve_make(n);
    else
        sl_warn("store: no room for the space reserve (%llu bytes) yet: it is made once there "
                "is",
                (unsigned long long)reserve_size(n));
}

static void reserve_release(sl_node *n)
{
    if (!n->reserve_held)
        return;
    char path[4096];
    reserve_path(n, path, sizeof path);
    if (unlink(path) == 0)
        sl_warn("store: the disk is full: the space reserve (%llu bytes) is released for the "
                "writes held and for acks and delivery marks",
                (unsigned long long)reserve_size(n));
    n->reserve_held = 0;
}

/* A stopped node holds no more disk than its data. */
void node_reserve_drop(sl_node *n)
{
    if (!n->reserve_held)
        return;
    char path[4096];
    reserve_path(n, path, sizeof path);
    unlink(path);
    n->reserve_held = 0;
}

/* Out of space: nothing is lost and nothing that depends on the disk is answered; the disk
 * alarm stays on (publishers and durable declares held back) until a write gets through. */
void node_store_stalled(sl_node *n)
{
    if (!(n->alarms & ALARM_DISK))
        sl_warn("store: no space left for writes: holding them, and every reply that depends "
                "on them, until space returns");
    node_set_alarm(n, ALARM_DISK, 1);
    reserve_release(n);
}

/* Input read ahead by connections an alarm blocked (at most CONN_HOLD_MAX each in the AMQP
 * door): not held against the memory alarm, which would otherwise never clear under a
 * watermark below it; it is what the socket would hold anyway, and it is handled once the
 * alarm clears. */
static uint64_t held_input_bytes(const sl_node *n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n->n_parts; i++)
        if (n->parts[i].held_input_bytes)
            sum += n->parts[i].held_input_bytes(n->parts[i].ctx);
    return sum;
}

void node_alarm_tick(sl_node *n, uint64_t now)
{
    /* Bodies in memory: paged-out messages cost disk, which the disk alarm watches. (Records
     * waiting for a slow disk are buffers, counted there.) */
    uint64_t mem = node_memory_bytes(n), held = n->alarms ? held_input_bytes(n) : 0;
    node_set_alarm(n, ALARM_MEMORY,
                   mem - (held < mem ? held : mem) > n->cfg->memory_high_watermark);
    node_check_disk(n, now);
    if (n->store && (now >= n->next_store_sync || persist_stalled(n->store))) {
        /* Acks and delivery marks wait for a sync that needs the disk anyway; bound that
         * wait, so a consume-only load does not keep them in memory for long. */
        n->next_store_sync = now + 1000;
        node_kick(n, 1);
    }
}
