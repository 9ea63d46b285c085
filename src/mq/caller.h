/* caller.h - who asks for an MSMQ operation, whatever the door: the user its rights come
 * from (vhost permissions decide which queues it sees and may touch) and whether it holds
 * the administrator tag. A door fills it from its own login (HTTP basic auth or session,
 * NTLM, msrpc.user) and hands it down; mq/ decides with it.
 */
#ifndef SL_MQ_CALLER_H
#define SL_MQ_CALLER_H

typedef struct mq_caller {
    const char *user; /* its vhost permissions decide which queues it sees */
    int is_admin;
} mq_caller;

struct acc_db;
/* RabbitMQ's listing rule for a caller of any door: administrators see every vhost, other
 * users those they have a permission entry on. */
int mq_vhost_listed(struct acc_db *a, const mq_caller *who, const char *vhost);

#endif
