/* mgmt.h - the HTTP management API (RabbitMQ-compatible paths plus MSMQ management), served
 * by libmicrohttpd from sluiced's own event loop: no thread of its own, so every request sees
 * a consistent broker state without locks.
 */
#ifndef SL_MGMT_MGMT_H
#define SL_MGMT_MGMT_H

#include "mq/mq.h"
#include "node/node.h"

typedef struct mgmt mgmt;

/* Listen on cfg->bind : cfg->mgmt_port (0 = a free port) on n's loop, over mq, the MSMQ state
 * it shares with the DCE/RPC door (main makes it first and frees it after both stopped). Logs
 * "listening http=ADDR:PORT". NULL with a message in err on failure. */
mgmt *mgmt_start(sl_node *n, mq_state *mq, char *err, size_t errlen);
void mgmt_stop(mgmt *m);
/* The HTTP port it listens on. */
int mgmt_port(const mgmt *m);

#endif
