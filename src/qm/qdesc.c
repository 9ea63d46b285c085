/* qdesc.c - open queue descriptors (MS-MQDMPR 3.1.1.16 OpenQueueDescriptor; the Open Queue
 * and Close Queue events, 3.1.7.1.5-6): what a queue handle of any door refers to.
 *
 * A descriptor is linked on its queue (q->descs) while the queue lives. Deleting the queue
 * sets every descriptor's queue to NULL (MS-MQDMPR: QueueReference := NULL, done by
 * qm_queue_destroy through qm_qdesc_forget_queue), so an operation through an old
 * descriptor fails with SL_ERR_QUEUE_DELETED and can never reach another queue, not even one
 * declared again under the same name. The incarnation the queue had when it was opened is
 * kept and checked too, as a second guard.
 *
 * An open descriptor keeps an empty subqueue from being removed (MSMQ removes a subqueue
 * when it is empty and no handle has it open); closing the last one lets it go.
 *
 * The door owns the descriptor (its table of handles, its owner, its id) and closes it.
 */
#include "qm/qm_internal.h"

#include "core/list.h"

static int is_journal(const qm_queue *q)
{
    const char *semi = q->is_subqueue ? strchr(q->name, ';') : NULL;
    return semi && !strcmp(semi + 1, "journal");
}

/* The sharing table of MS-MQDMPR Open Queue, step 4 (reference/msmq.md section 2.8). */
static int conflicts(const qm_qdesc *e, uint32_t access, int share)
{
    /* admin handles (of an outgoing queue) share as the receive / peek they carry */
    int e_recv = (e->access & ~QM_ACCESS_ADMIN) == QM_ACCESS_RECEIVE;
    int e_peek = (e->access & ~QM_ACCESS_ADMIN) == QM_ACCESS_PEEK;
    access &= ~QM_ACCESS_ADMIN;
    if (e_recv && e->share == QM_SHARE_DENY_RECEIVE)
        return share == QM_SHARE_DENY_RECEIVE || access == QM_ACCESS_RECEIVE;
    if (e_peek && e->share == QM_SHARE_DENY_RECEIVE)
        return access == QM_ACCESS_RECEIVE;
    if (e_recv && e->share == QM_SHARE_DENY_NONE)
        return share == QM_SHARE_DENY_RECEIVE;
    return 0;
}

sl_err qm_queue_open(qm_queue *q, uint32_t access, int share, qm_qdesc **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    if (q->is_outgoing) {
        /* MQ_RECEIVE_ACCESS | MQ_ADMIN_ACCESS (or peek | admin): the outgoing queue itself,
         * as an operator opens it to purge or look at what waits there */
        if (access != (QM_ACCESS_RECEIVE | QM_ACCESS_ADMIN) &&
            access != (QM_ACCESS_PEEK | QM_ACCESS_ADMIN)) {
            snprintf(err, errlen,
                     "the outgoing queue '%s' opens with receive|admin or peek|admin access only",
                     q->name);
            return SL_ERR_UNSUPPORTED_ACCESS_MODE;
        }
    } else if (access != QM_ACCESS_RECEIVE && access != QM_ACCESS_SEND &&
               access != QM_ACCESS_MOVE && access != QM_ACCESS_PEEK) {
        snprintf(err, errlen, "access 0x%X is not one of receive, send, move or peek%s", access,
                 access & QM_ACCESS_ADMIN ? " (admin access is for outgoing queues)" : "");
        return SL_ERR_UNSUPPORTED_ACCESS_MODE;
    }
    if (share != QM_SHARE_DENY_NONE && share != QM_SHARE_DENY_RECEIVE) {
        snprintf(err, errlen, "share mode %d is not deny-none (0) or deny-receive (1)", share);
        return SL_ERR_UNSUPPORTED_ACCESS_MODE;
    }
    if (access == QM_ACCESS_SEND && share != QM_SHARE_DENY_NONE) {
        snprintf(err, errlen, "a send handle must be opened with deny-none");
        return SL_ERR_UNSUPPORTED_ACCESS_MODE;
    }
    if (access == QM_ACCESS_SEND && (q->is_subqueue || q->is_system)) {
        snprintf(err, errlen, "'%s' is a %s: it can be opened to receive or peek, not to send",
                 q->name,
                 is_journal(q)    ? "journal"
                 : q->is_subqueue ? "subqueue"
                                  : "system queue");
        return SL_ERR_UNSUPPORTED_FORMATNAME_OPERATION;
    }
    if (access == QM_ACCESS_MOVE && is_journal(q)) {
        snprintf(err, errlen, "'%s' is a journal: nothing can be moved into it", q->name);
        return SL_ERR_UNSUPPORTED_FORMATNAME_OPERATION;
    }
    for (const qm_qdesc *e = q->descs; e; e = e->qnext) {
        if (conflicts(e, access, share)) {
            snprintf(err, errlen, "'%s' is open with a handle that denies this one (%s)", q->name,
                     e->share == QM_SHARE_DENY_RECEIVE ? "deny-receive" : "receive");
            return SL_ERR_RESOURCE_LOCKED;
        }
    }
    qm_qdesc *d = sl_xcalloc(1, sizeof *d);
    d->queue = q;
    d->incarnation = q->incarnation;
    d->access = access;
    d->share = (uint8_t)share;
    SL_LIST_PUSH(q->descs, d, qprev, qnext);
    *out = d;
    return SL_OK;
}

qm_queue *qm_qdesc_queue(const qm_qdesc *d)
{
    return d->queue && d->queue->incarnation == d->incarnation ? d->queue : NULL;
}

void qm_qdesc_close(qm_qdesc *d)
{
    qm_queue *q = d->queue;
    if (q) {
        SL_LIST_UNLINK(q->descs, d, qprev, qnext);
        /* the last handle of an empty subqueue: it may go now */
        qm_queue_maybe_gc(q);
    }
    sl_free(d);
}

sl_err qm_qdesc_purge(qm_qdesc *d, uint64_t *deleted)
{
    *deleted = 0;
    qm_queue *q = qm_qdesc_queue(d);
    if (!q)
        return SL_ERR_QUEUE_DELETED;
    /* MS-MQMP: only a receive handle may purge (MQRR / MC-MQAC: access denied otherwise); on
     * an outgoing queue, a receive|admin one */
    if ((d->access & ~QM_ACCESS_ADMIN) != QM_ACCESS_RECEIVE)
        return SL_ERR_ACCESS_REFUSED;
    *deleted = qm_queue_purge(q);
    return SL_OK;
}

void qm_qdesc_forget_queue(qm_queue *q)
{
    qm_qdesc *d = q->descs;
    while (d) {
        qm_qdesc *next = d->qnext;
        d->queue = NULL;
        d->qprev = d->qnext = NULL;
        d = next;
    }
    q->descs = NULL;
}
