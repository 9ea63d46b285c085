/* clients.c - the walk by id over one door's client list (clients.h: node_client_cursor),
 * for every door with clients: the AMQP door's connections and the stream door's.
 *
 * Invariants: the list is newest first (ids decreasing); cur->at is an element of it or NULL
 * (the door forgets an element before unlinking it).
 */
#include "node/clients.h"

static uint64_t id_of(const void *elem, size_t id_off)
{
    return *(const uint64_t *)((const char *)elem + id_off);
}

static void *next_of(const void *elem, size_t next_off)
{
    return *(void *const *)((const char *)elem + next_off);
}

void *node_client_at_or_below(node_client_cursor *cur, void *head, size_t next_off, size_t id_off,
                              uint64_t at_most, uint64_t next_client_id)
{
    void *e =
        cur->at && (id_of(cur->at, id_off) >= at_most || at_most <= cur->bound) ? cur->at : head;
    while (e && id_of(e, id_off) > at_most)
        e = next_of(e, next_off);
    cur->at = e;
    cur->bound = at_most < next_client_id ? at_most : next_client_id;
    return e;
}
