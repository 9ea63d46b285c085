/* probe.h - is a process still listening at a peer's port (issue 46)? The follower's check,
 * after its stream from the leader ended, that the leader's process is gone.
 *
 * What a refusal proves: a TCP connect() that fails with ECONNREFUSED was answered by a RST
 * from the host that owns the address: nothing on that host listens on that port now (the
 * socket the leader's process bound is closed, which the kernel does when the process dies).
 * A host that is down, a partition that drops packets or a stopped (SIGSTOP) process never
 * refuse: the first two leave the SYN unanswered (a timeout), the third's listening socket is
 * still there and the kernel completes the handshake into its backlog. What it does not prove
 * on its own: that the process is gone for good (a new one may bind the port a moment later),
 * or that the refusal came from the leader's host (a firewall's REJECT with tcp-reset forges
 * one). docs/cluster.md "A dead process is noticed at once" says why neither matters for
 * safety, only for how often a live leader is deposed early.
 */
#ifndef SL_CLUSTER_PROBE_H
#define SL_CLUSTER_PROBE_H

#include <stdint.h>

enum {
    CL_PROBE_REFUSED = 1,  /* ECONNREFUSED */
    CL_PROBE_ANSWERED = 0, /* the handshake completed: something listens */
    CL_PROBE_SILENT = -1,  /* no answer within the time, or another error (unreachable) */
};

/* One connect to "A.B.C.D:PORT", waiting at most timeout_ms; the connection (if any) is closed
 * at once. CL_PROBE_* */
int cl_probe_once(const char *addr, int timeout_ms);

/* The verdict on a sequence of probes, as results come (pure: tested in test_cluster.c):
 * dead once `need` refusals in a row were seen; alive (give up) at the first silence or after
 * `max_answers` answers. An answer alone does not end it: a process being killed closes its
 * descriptors in number order, so the stream's connection may close (the follower's cue)
 * a moment before the listening socket when accept() gave it a lower number, and a probe in
 * between is answered by a socket about to go. 1 dead, -1 give up, 0 probe again. */
typedef struct cl_probe_run {
    int need, max_answers;
    int refused_in_row, answers;
} cl_probe_run;
int cl_probe_step(cl_probe_run *r, int result);

/* Probe addr up to `tries` times, gap_ms apart (each waiting at most timeout_ms), until
 * cl_probe_step decides with need = 2, max_answers = 4: 1 when the port refused twice in a
 * row (the process that listened there is gone), 0 when it kept answering, -1 when it was
 * silent or tries ran out. */
int cl_probe_dead(const char *addr, int tries, int gap_ms, int timeout_ms);

#endif
