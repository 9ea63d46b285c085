/* figures.h - a node's figures as GET /api/nodes shows them (RabbitMQ's fields; issue 31:
 * "/api/nodes lists every member with RabbitMQ's fields").
 *
 * One builder for every place that shows or publishes them, so a member's entry has the same
 * fields whoever made it: the node answering /api/nodes (mgmt: its live figures), a leader and
 * a follower publishing theirs to etcd (`stats/NAME`, member.h) for the leader's /api/nodes.
 * The caller gives what only it knows (the broker's memory account and alarms, the disk
 * figure); the process figures are read here from /proc and sysconf:
 *   uptime         ms since this process started (/proc/self/stat; a re-exec keeps the pid
 *                  and so the start)
 *   os_pid         getpid()
 *   fd_used        open descriptors (/proc/self/fd); fd_total: RLIMIT_NOFILE's soft limit
 *   sockets_used   those of them that are sockets; sockets_total: fd_total (no other limit)
 *   proc_used      threads of the process (RabbitMQ counts Erlang processes; Sluice's unit of
 *                  concurrency is the thread)
 *   run_queue      threads of the process runnable at this moment, the caller's excluded
 *   processors     online CPUs
 * They are read at most once a second (cached: one scan of /proc/self/fd per second at most,
 * whoever asks). Any thread.
 */
#ifndef SL_CLUSTER_FIGURES_H
#define SL_CLUSTER_FIGURES_H

#include <jansson.h>
#include <stdint.h>

typedef struct cl_figures_in {
    const char *name;
    uint64_t mem_used, mem_limit;
    uint64_t disk_free, disk_free_limit;
    int mem_alarm, disk_free_alarm;
    int connected; /* the MSMQ queue manager is online (a follower's is not running) */
} cl_figures_in;

/* {"name", "type": "disc", "running": true, mem_*, disk_*, "uptime", "os_pid", "connected",
 *  fd_used, fd_total, sockets_used, sockets_total, proc_used, run_queue, processors} */
json_t *cl_figures_json(const cl_figures_in *in);

/* The figures (numbers and alarms) of cl_figures_json: what a member's entry of another node
 * takes from its published object, null when there is none. NULL-terminated. */
extern const char *const cl_figures_keys[];

#endif
