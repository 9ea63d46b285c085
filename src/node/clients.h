/* clients.h - a door's client connections as the HTTP API lists them (RabbitMQ's
 * /api/connections, /api/channels, /api/consumers), in plain structs: the door that has
 * them fills these views (node_part's client hooks, node.h) and the HTTP door turns them into
 * JSON, so neither includes the other.
 *
 * Several doors have clients (AMQP 0-9-1, RabbitMQ's stream protocol): the node hands out
 * their ids (node_client_id), so that one list of every door's clients is ordered by id and a
 * walk over all of them (node_client_next: the largest id <= a bound, over every part) resumes
 * by id alone, without knowing which door a client is of.
 *
 * Invariants: a view is valid only during the call that filled it (its strings point into
 * the door's own state); client ids are the node's, unique over every door, and each door's
 * decrease newest first, so a walk resumes by id between loop turns and a client closed
 * meanwhile is simply not met again.
 */
#ifndef SL_NODE_CLIENTS_H
#define SL_NODE_CLIENTS_H

#include <stddef.h>
#include <stdint.h>

#include "qm/qm.h"

typedef struct node_client {
    uint64_t id;
    const char *name; /* "127.0.0.1:50000 -> 127.0.0.1:5672" */
    const char *peer; /* "127.0.0.1:50000" */
    const char *user; /* "" before login */
    const char *vhost;
    const char *protocol; /* "AMQP 0-9-1", "stream" (RabbitMQ's name for its stream protocol) */
    const char *state;    /* "starting", "running", "blocked", "closing" */
    int listed;           /* from connection.open-ok until the closing handshake is over */
    const char *host;     /* the listener it came in by */
    int port;
    size_t channels;
    int heartbeat;
    uint32_t frame_max;
    int channel_max;
    const char *auth_mechanism;
    int tls;                  /* over TLS; the next three only once its handshake is done */
    const char *ssl_protocol; /* NULL: not known (yet) */
    const char *ssl_cipher;
    const char *peer_cert_subject; /* NULL: no client certificate */
    char dn_buf[512];              /* the door writes peer_cert_subject here */
    /* the properties the client sent (the stream protocol's PeerProperties), as key, value
     * pairs: props[2i] and props[2i + 1], i < n_props; NULL when the door keeps none */
    const char *const *props;
    size_t n_props;
} node_client;

/* A stream publisher (RabbitMQ's stream protocol: DeclarePublisher) of a client. */
typedef struct node_publisher {
    unsigned id;
    const char *stream;    /* in the client's vhost */
    const char *reference; /* "" when it has none */
    uint64_t published, confirmed, errored;
} node_publisher;

/* A stream subscription (Subscribe) of a client. */
typedef struct node_subscription {
    unsigned id;
    const char *stream;       /* in the client's vhost */
    uint64_t credits;         /* left */
    uint64_t consumed;        /* messages delivered */
    uint64_t offset;          /* the next offset it gets */
    uint64_t offset_lag;      /* entries stored past it */
    const char *const *props; /* Subscribe's properties as key, value pairs (n_props) */
    size_t n_props;
    const qm_consumer *qc; /* the model's consumer: its queue, group state, offset */
} node_subscription;

/* Called for each publisher or subscription of a client. */
typedef void (*node_publisher_fn)(void *arg, const node_publisher *p);
typedef void (*node_subscription_fn)(void *arg, const node_subscription *s);

typedef struct node_channel {
    unsigned number;
    size_t consumers;
    uint64_t unacked;
    uint32_t prefetch;        /* for new consumers (basic.qos global=false) */
    uint32_t global_prefetch; /* channel-wide */
    int confirm, transactional;
    int running; /* 0: closing */
} node_channel;

typedef struct node_consumer {
    const char *tag;
    size_t tag_len;
    const qm_queue *queue; /* NULL: not on a queue (a direct reply-to consumer) */
    int ack_required, exclusive;
    uint32_t prefetch;
    int priority;
    const qm_consumer *qc; /* the model's consumer (a stream's: its offset), or NULL */
    /* RabbitMQ's active and activity_status ("up", "single_active", "waiting"): NULL, not
     * shown; and the arguments as key, value string pairs (a stream subscription's
     * properties; NULL: none) */
    const char *activity_status;
    int active;
    const char *const *props;
    size_t n_props;
} node_consumer;

/* Called for each consumer of a channel walk: 0 stops the walk before this one. */
typedef int (*node_consumer_fn)(void *arg, const node_consumer *c);

/* A walk over one door's clients by id, for the node's walk over every door (node_client_next
 * asks each door for its client with the largest id <= a bound, one id after another). A
 * door keeps its connections in a list newest first (ids decreasing), linked by a pointer at
 * next_off, each with its uint64_t id at id_off. The cursor remembers the element it
 * returned last and the bound it answered: the next question starts from there when that
 * element is still ahead of the new bound, or is the answer still (no element had an id in
 * between: those were another door's, and elements made since have larger ids), so a walk
 * that asks for each client in turn costs a step each, not a walk from the head (thousands
 * of connections listed or counted, with the other doors' clients between).
 * Invariant: the door calls node_client_cursor_forget before an element leaves its list. */
typedef struct node_client_cursor {
    void *at;       /* the element returned last, or NULL */
    uint64_t bound; /* no element had an id in (at's id, bound] */
} node_client_cursor;

/* The first element of the list at head with an id <= at_most, or NULL; next_client_id is
 * the node's (no id above it exists). */
void *node_client_at_or_below(node_client_cursor *cur, void *head, size_t next_off, size_t id_off,
                              uint64_t at_most, uint64_t next_client_id);

static inline void node_client_cursor_forget(node_client_cursor *cur, const void *elem)
{
    if (cur->at == elem)
        cur->at = NULL;
}

#endif
