/* action.c - R_QMMgmtAction for every door (action.h). CONNECT and DISCONNECT set the node's
 * online flag (node_set_online: offline, node-to-node links are refused and stopped, outgoing
 * queues keep their messages, local clients keep working; the flag survives a restart).
 * TIDY is only checked here: its answer comes later and each door waits for it its own way.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "link/link.h"
#include "node/node.h"
#include "mq/action.h"
#include "mq/caller.h"
#include "mq/formatname.h"
#include "mq/mq.h"
#include "node/node.h"

static const char *const machine_actions[] = {"CONNECT", "DISCONNECT", "TIDY"};
static const char *const queue_actions[] = {"PAUSE", "RESUME", "EOD_RESEND"};

static int find_action(const char *a, const char *const *list)
{
    for (int i = 0; i < 3; i++)
        if (!strcasecmp(a, list[i]))
            return i;
    return -1;
}

sl_err mq_action(mq_state *mq, const char *object, const char *vhost, const char *act,
                 mq_action_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    int machine = !strcasecmp(object, "MACHINE"), queue = !strncasecmp(object, "QUEUE=", 6);
    int ma = find_action(act, machine_actions), qa = find_action(act, queue_actions);
    if (!machine && !queue) {
        snprintf(err, errlen, "session objects take no management actions");
        return SL_ERR_INVALID_PARAMETER;
    }
    if (ma < 0 && qa < 0) {
        snprintf(err, errlen, "unknown action '%s'", act);
        return SL_ERR_INVALID_PARAMETER;
    }
    if (machine) {
        if (ma < 0) {
            snprintf(err, errlen, "%s applies to outgoing queues, not to the machine",
                     queue_actions[qa]);
            return SL_ERR_INVALID_PARAMETER;
        }
        if (ma == 2) {
            res->tidy = 1;
            return SL_OK;
        }
        sl_node *n = mq->n;
        int online = ma == 0;
        if (n->qm->online != online)
            sl_info("management: node %s %s", n->cfg->node_name,
                    online ? "brought online (CONNECT)" : "taken offline (DISCONNECT)");
        node_set_online(n, online);
        res->connected = online ? "CONNECTED" : "DISCONNECTED";
        return SL_OK;
    }
    if (qa < 0) {
        snprintf(err, errlen, "%s applies to the machine, not to a queue", machine_actions[ma]);
        return SL_ERR_INVALID_PARAMETER;
    }
    return mq_action_queue(mq, object + 6, vhost, queue_actions[qa], res, err, errlen);
}

sl_err mq_action_queue(mq_state *mq, const char *fmt, const char *vhost, const char *act,
                       mq_action_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    int qa = find_action(act, queue_actions);
    if (qa < 0) {
        snprintf(err, errlen, "unknown queue action '%s'", act);
        return SL_ERR_INVALID_PARAMETER;
    }
    qm_queue *q;
    sl_err e = mq_fmtname_resolve(mq, fmt, vhost, &q, err, errlen);
    if (e != SL_OK)
        return e;
    if (!q->is_outgoing) {
        snprintf(err, errlen, "%s applies to outgoing queues only; '%s' is a local queue",
                 queue_actions[qa], q->name);
        return SL_ERR_INVALID_PARAMETER;
    }
    e = qa == 0 ? link_pause(q) : qa == 1 ? link_resume(q) : link_eod_resend(q);
    if (e != SL_OK) {
        snprintf(err, errlen, "the outgoing queue has no link");
        return e;
    }
    sl_info("management: %s on outgoing queue %s", queue_actions[qa], q->name);
    eod_outq_info in;
    link_outq_get_info(q, &in);
    res->state = eod_state_name(in.state);
    return SL_OK;
}
