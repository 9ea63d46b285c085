/* list.h - the intrusive doubly linked list every room keeps its connections, sessions,
 * consumers, bindings and slab chunks on: a head pointer to the first element (NULL when
 * empty) and a prev/next pair in each element, NULL at the ends. The field names are
 * arguments, so one element can sit on several lists (next/prev, knext/kprev, ...).
 *
 * The macros only link and unlink; they neither allocate nor count, and they leave the
 * unlinked element's own pointers as they were (callers reset them when they use them as
 * an "on a list" mark). Arguments are evaluated more than once: pass plain lvalues.
 */
#ifndef SL_CORE_LIST_H
#define SL_CORE_LIST_H

#include <stddef.h>

/* Put e first on the list headed by head. */
#define SL_LIST_PUSH(head, e, prev, next)                                                          \
    do {                                                                                           \
        (e)->prev = NULL;                                                                          \
        (e)->next = (head);                                                                        \
        if (head)                                                                                  \
            (head)->prev = (e);                                                                    \
        (head) = (e);                                                                              \
    } while (0)

/* Take e off the list headed by head. */
#define SL_LIST_UNLINK(head, e, prev, next)                                                        \
    do {                                                                                           \
        if ((e)->prev)                                                                             \
            (e)->prev->next = (e)->next;                                                           \
        else                                                                                       \
            (head) = (e)->next;                                                                    \
        if ((e)->next)                                                                             \
            (e)->next->prev = (e)->prev;                                                           \
    } while (0)

/* The same for a list that also keeps its last element in tail. */
#define SL_LIST_UNLINK_TAIL(head, tail, e, prev, next)                                             \
    do {                                                                                           \
        if ((e)->prev)                                                                             \
            (e)->prev->next = (e)->next;                                                           \
        else                                                                                       \
            (head) = (e)->next;                                                                    \
        if ((e)->next)                                                                             \
            (e)->next->prev = (e)->prev;                                                           \
        else                                                                                       \
            (tail) = (e)->prev;                                                                    \
    } while (0)

/* Put e last on the list headed by head with its last element in tail. */
#define SL_LIST_APPEND_TAIL(head, tail, e, prev, next)                                             \
    do {                                                                                           \
        (e)->next = NULL;                                                                          \
        (e)->prev = (tail);                                                                        \
        if (tail)                                                                                  \
            (tail)->next = (e);                                                                    \
        else                                                                                       \
            (head) = (e);                                                                          \
        (tail) = (e);                                                                              \
    } while (0)

#endif
