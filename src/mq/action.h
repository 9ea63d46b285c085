/* action.h - R_QMMgmtAction (MS-MQMR 3.1.4.2, reference/msmq.md section 3.6) for every door:
 * the HTTP API (mgmt/api_msmq.c), DCE/RPC (rpc/qmmgmt.c) and the management objects
 * (mgmt/api_mgmtobj.c) call these, so all apply the same rules and change the same state.
 *
 * Objects: "MACHINE" (CONNECT, DISCONNECT, TIDY), "QUEUE=<format name>" (PAUSE, RESUME,
 * EOD_RESEND, on outgoing queues only); anything else is a session object, refused with
 * MQ_ERROR_INVALID_PARAMETER. Actions are matched without regard to case. The object and the
 * action are checked first, and a refused call changes nothing. A queue action on a local
 * queue is MQ_ERROR_INVALID_PARAMETER; on an outgoing queue that has no link,
 * MQ_ERROR_QUEUE_NOT_ACTIVE (link's answer).
 *
 * Redesign note: format names still take the HTTP door's object (see info.h).
 */
#ifndef SL_MQ_ACTION_H
#define SL_MQ_ACTION_H

#include <stddef.h>

#include "core/err.h"
#include "mq/caller.h"
#include "mq/mq.h"

/* What an action did: CONNECT / DISCONNECT set connected ("CONNECTED" / "DISCONNECTED"), a
 * queue action sets state (the outgoing queue's state after it); TIDY sets tidy only. */
typedef struct mq_action_result {
    int tidy; /* a valid TIDY: the caller starts it (node_tidy_start) and waits its own way */
    const char *connected;
    const char *state;
} mq_action_result;

sl_err mq_action(mq_state *mq, const char *object, const char *vhost, const char *act,
                 mq_action_result *res, char *err, size_t errlen);
/* A queue action (PAUSE, RESUME, EOD_RESEND, any case) on the queue fmt names. */
sl_err mq_action_queue(mq_state *mq, const char *fmt, const char *vhost, const char *act,
                       mq_action_result *res, char *err, size_t errlen);

#endif
