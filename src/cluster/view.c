/* view.c - the cluster's members as the doors show them (see view.h). */
#include "cluster/view.h"

#include <stdio.h>
#include <string.h>

static cl_view_member *add(cl_view *v, const char *name, const char *role, int insync,
                           const char *amqp, const char *http)
{
    cl_view_member *vm = &v->nodes[v->n_nodes++];
    memset(vm, 0, sizeof *vm);
    snprintf(vm->name, sizeof vm->name, "%s", name);
    vm->role = role;
    vm->insync = insync;
    snprintf(vm->amqp, sizeof vm->amqp, "%s", amqp);
    snprintf(vm->http, sizeof vm->http, "%s", http);
    return vm;
}

void cl_view_read(cl_member *m, cl_stream_server *repl, const char *self, const char *self_amqp,
                  const char *self_http, cl_view *v)
{
    memset(v, 0, sizeof *v);
    cl_status st;
    cl_member_status(m, &st);
    snprintf(v->leader, sizeof v->leader, "%s", st.leader);
    v->epoch = st.epoch;
    v->serving = cl_member_serving(m);
    v->n_registered = st.n_nodes;
    snprintf(v->etcd_error, sizeof v->etcd_error, "%s", st.last_error);
    cl_stream_peer peers[CL_MAX_MEMBERS];
    size_t n_peers = repl ? cl_stream_server_peers(repl, peers, CL_MAX_MEMBERS) : 0;
    int self_listed = 0;
    for (size_t i = 0; i < st.n_nodes; i++) {
        const cl_node_info *ni = &st.nodes[i];
        int is_self = !strcmp(ni->name, self);
        self_listed |= is_self;
        const char *role = !strcmp(ni->name, st.leader) ? "leader" : "follower";
        if (is_self) /* this node knows its own role better than the last look at etcd */
            role = st.role == CL_ROLE_LEADER     ? "leader"
                   : st.role == CL_ROLE_FOLLOWER ? "follower"
                                                 : "joining";
        int insync = ni->insync, known = 0;
        uint64_t lag_bytes = 0, lag_ms = 0;
        for (size_t k = 0; k < n_peers && !is_self; k++) {
            if (strcmp(peers[k].name, ni->name))
                continue;
            known = 1;
            insync = peers[k].insync; /* the leader's own ISR (etcd's may lag a write) */
            lag_bytes = peers[k].lag_bytes;
            lag_ms = peers[k].lag_ms;
            if (peers[k].copying)
                role = "joining";
        }
        /* never connected to this leader: it has not started following */
        if (repl && !is_self && !strcmp(role, "follower") && !insync && !known)
            role = "joining";
        cl_view_member *vm = add(v, ni->name, role, insync, ni->amqp, ni->http);
        vm->lag_bytes = lag_bytes;
        vm->lag_ms = lag_ms;
    }
    if (!self_listed) /* not registered in etcd yet (or etcd unreachable) */
        add(v, self, "joining", 0, self_amqp, self_http);
    v->isr = 0;
    for (size_t i = 0; i < st.n_nodes; i++)
        v->isr += (uint64_t)st.nodes[i].insync;
    if (repl) { /* a leader: its own ISR (etcd's, as last read, may lag a write) */
        v->isr = 1;
        for (size_t i = 0; i < n_peers; i++)
            v->isr += (uint64_t)peers[i].insync;
    }
    v->n_banned = cl_member_bans(m, v->banned, CL_MAX_MEMBERS);
}
