/* bridge.h - temporary (issue 45's redesign, until branch r-mqh's format names land): what
 * mq/info.c, info_outgoing.c, action.c and mgmtobj.c still take from the HTTP door, in one
 * place: the format-name calls of mq/formatname.c (declared in mgmt_internal.h, taking the
 * door's object for its node), msmq_caller (the caller's rights) and map_sorted. At merge this
 * include becomes r-mqh's mq/ headers and `struct mgmt *` the node; nothing else here changes.
 */
#ifndef SL_MQ_BRIDGE_H
#define SL_MQ_BRIDGE_H

#include "mgmt/mgmt_internal.h"

#endif
