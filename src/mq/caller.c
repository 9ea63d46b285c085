/* caller.c - the rules that depend only on who asks (caller.h). */
#include "mq/caller.h"

#include "access/access.h"

int mq_vhost_listed(struct acc_db *a, const mq_caller *who, const char *vhost)
{
    return who->is_admin || acc_vhost_visible(a, who->user, vhost);
}
