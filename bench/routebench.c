/* routebench.c - the queue model alone, no sockets, no broker: what routing costs as the
 * number of bindings grows (the amqpbench scenarios bind a handful).
 *
 * For N queues, each bound to one direct exchange with its own key and to one topic exchange
 * with its own pattern, it times: creating the N bindings, routing a publish among them (each
 * must reach exactly one queue, or the run fails), and deleting the N queues (which takes their
 * bindings out of both exchanges). Usage: routebench [N ...] (default 1000 10000 30000).
 * Prints one line per N; exits 1 when a route finds the wrong number of queues.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qm/qm.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static qm_exchange *exchange(qm_vhost *vh, const char *name, int type)
{
    char err[256];
    qm_exchange_decl d = {name, strlen(name), type, 0, 0, 0, (amqp_bytes){0}};
    qm_exchange *x = NULL;
    if (qm_exchange_declare(vh, &d, &x, err, sizeof err) != SL_OK) {
        fprintf(stderr, "routebench: exchange.declare %s: %s\n", name, err);
        exit(2);
    }
    return x;
}

/* Route `rounds` keys "<prefix><i><suffix>" through x; every one must reach exactly one queue.
 * Returns microseconds per route. */
static double route(qm_exchange *x, const char *prefix, const char *suffix, int n, int rounds)
{
    char key[64];
    qm_queue *out[4];
    size_t total;
    double t0 = now_s();
    for (int r = 0; r < rounds; r++) {
        snprintf(key, sizeof key, "%s%d%s", prefix, (int)(((long)r * 7919) % n), suffix);
        if (qm_route(x, amqp_cstr(key), (amqp_bytes){0}, out, 4, &total) != 1 || total != 1) {
            fprintf(stderr, "routebench: '%s' through %s reached %zu queues, not 1\n", key, x->name,
                    total);
            exit(1);
        }
    }
    return (now_s() - t0) * 1e6 / rounds;
}

static void run(int n)
{
    char err[256], name[64];
    qm_node *node = qm_node_new("routebench");
    qm_vhost *vh = qm_vhost_create(node, "/");
    qm_exchange *d = exchange(vh, "direct", QM_EX_DIRECT);
    qm_exchange *t = exchange(vh, "topic", QM_EX_TOPIC);
    qm_queue **qs = calloc((size_t)n, sizeof *qs);
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "q%d", i);
        qm_queue_decl decl = {name, strlen(name), 0, 0, 0, NULL, (amqp_bytes){0}, 0};
        int created;
        if (qm_queue_declare(vh, &decl, &qs[i], &created, err, sizeof err) != SL_OK) {
            fprintf(stderr, "routebench: queue.declare: %s\n", err);
            exit(2);
        }
    }
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "k%d", i);
        qm_bind_queue(d, qs[i], amqp_cstr(name), (amqp_bytes){0}, err, sizeof err);
        snprintf(name, sizeof name, "t.%d.*", i);
        qm_bind_queue(t, qs[i], amqp_cstr(name), (amqp_bytes){0}, err, sizeof err);
    }
    double bind_ms = (now_s() - t0) * 1e3;
    int rounds = n >= 10000 ? 20000 : 100000;
    double direct_us = route(d, "k", "", n, rounds);
    double topic_us = route(t, "t.", ".x", n, rounds / 10);
    t0 = now_s();
    for (int i = 0; i < n; i++)
        qm_queue_delete(qs[i], 0, NULL, err, sizeof err);
    double delete_ms = (now_s() - t0) * 1e3;
    if (d->n_bindings || t->n_bindings) {
        fprintf(stderr, "routebench: %zu + %zu bindings left after deleting every queue\n",
                d->n_bindings, t->n_bindings);
        exit(1);
    }
    printf("bindings %6d per exchange: bind all %8.1f ms; route direct %8.2f us, topic %9.2f "
           "us; delete all queues %8.1f ms\n",
           n, bind_ms, direct_us, topic_us, delete_ms);
    free(qs);
    qm_node_free(node);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        run(1000);
        run(10000);
        run(30000);
    }
    for (int i = 1; i < argc; i++)
        run(atoi(argv[i]));
    return 0;
}
