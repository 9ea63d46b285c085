/* api_mgmtobj.c - MC-MQAC's management object (MSMQManagement with IMSMQQueueManagement and
 * IMSMQOutgoingQueueManagement) as a resource (reference/msmq.md sections 4.1-4.5):
 *
 *   POST   /api/msmq/management              create an uninitialized object -> 201 {"id": M}
 *   POST   /api/msmq/management/M/init       {"machine", "pathname" | "format_name", "vhost"}
 *   GET    /api/msmq/management/M/<member>   format-name, machine, message-count, ...
 *   POST   /api/msmq/management/M/<action>   resume, pause, eod-resend
 *   GET    /api/msmq/management[/M]          the caller's objects / one object's binding
 *   DELETE /api/msmq/management/M            release it (COM's Release)
 *
 * The object's members, binding and rules are mq/mgmtobj.c's (MC-MQAC: initialized first,
 * then the interface, then QMMgmt Get Info, i.e. R_QMMgmtGetInfo of mq/info.c), and so is
 * Get Info at another node, both ends (mq/mgmtobj_remote.c); this file keeps the objects (a
 * context table), the routing, the waiting and the JSON.
 *
 * Replies: {"hresult", "hresult_name", "member", "value"}, plus "name" for members whose value
 * is an MC-MQAC enumeration (as the MC-MQAC view of GET /api/queues/{vhost}/{name} does).
 *
 * With a Machine other than this node ("host" or "host:port"), Get Info goes to that node over
 * the link's request channel (mq_mobj_ask, answered there by mq through its own
 * R_QMMgmtGetInfo), the request waiting (mgmt_req_suspend) until the answer or
 * handle_remote_timeout; the owner's HRESULT comes back as it is. The answer waits on the
 * object for the request that asked (a request asks once at a time), so a release meanwhile
 * drops it. Actions on another node's queues are refused (MQ_ERROR_ACCESS_DENIED): a link
 * peer is not an administrator of that node.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "core/clock.h"
#include "core/mem.h"
#include "mq/mgmtobj.h"
#include "mgmt/mgmt_internal.h"

/* Another node's answer, until the request that asked for it resumes. */
typedef struct answered {
    req *r;
    mq_mobj_answer *a;
    struct answered *next;
} answered;

typedef struct mobj {
    mq_ctx_entry e; /* first */
    mq_mobj b;      /* the binding */
    answered *answers;
} mobj;

static void mobj_close(void *ctx, mq_ctx_entry *e)
{
    (void)ctx;
    mobj *o = (mobj *)e;
    while (o->answers) {
        answered *w = o->answers;
        o->answers = w->next;
        mq_mobj_answer_free(w->a);
        sl_free(w);
    }
    mq_mobj_free(&o->b);
    mq_ctx_entry_free(&o->e);
    sl_free(o);
}

void mgmt_mgmtobj_init(mgmt *m)
{
    mq_ctxtab_init(&m->mobjs, "management object", m->mq->run_id, m->n->cfg, mobj_close, m);
}

/* ------------------------------------------------------------------------------------------
 * Members
 */

typedef mq_mobj_member member;

/* EodGetSendInfo: eleven GetInfo values collected under MC-MQAC's keys (section 4.4). */
static json_t *send_info(json_t **v)
{
    json_t *c = json_object();
    for (int i = 0; i < MQ_MOBJ_MAX_PROPS; i++) {
        json_object_set_new(c, mq_mobj_send_info_keys[i], v[i]);
        v[i] = NULL;
    }
    return c;
}

/* EodGetReceiveInfo: PROPID_MGMT_QUEUE_EOD_SOURCE_INFO's six parallel vectors turned into
 * one collection per incoming sequence (section 4.3); no incoming sequence: []. */
static json_t *receive_info(json_t *v)
{
    json_t *out = json_array();
    if (!json_is_array(v) || json_array_size(v) != 6)
        return out;
    size_t n = json_array_size(json_array_get(v, 0));
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_object();
        for (size_t k = 0; k < 6; k++) {
            json_t *x = json_array_get(json_array_get(v, k), i);
            json_object_set(c, mq_mobj_receive_info_keys[k], x ? x : json_null());
        }
        json_array_append_new(out, c);
    }
    return out;
}

static enum MHD_Result reply_member(req *r, const member *mb, json_t *value, const char *name)
{
    json_t *j = json_pack("{s:s,s:s,s:o}", "member", mb->name, "interface",
                          mq_mobj_iface_name(mb->iface), "value", value);
    if (name)
        json_object_set_new(j, "name", json_string(name));
    return mgmt_reply_hresult(r, SL_OK, j, NULL);
}

/* The member's value from the properties it read (v[], stolen), as MC-MQAC converts them. */
static enum MHD_Result answer(req *r, const member *mb, json_t **v)
{
    char reason[300];
    if (mb->conv == MQ_CV_SEND_INFO)
        return reply_member(r, mb, send_info(v), NULL);
    json_t *x = v[0];
    v[0] = NULL;
    if (mb->conv == MQ_CV_PLAIN)
        return reply_member(r, mb, json_is_null(x) ? (json_decref(x), json_integer(0)) : x, NULL);
    if (mb->conv == MQ_CV_IS_LOCAL) {
        int local = mq_mobj_is_local(json_string_value(x));
        json_decref(x);
        return reply_member(r, mb, json_boolean(local), local ? "VARIANT_TRUE" : "VARIANT_FALSE");
    }
    if (mb->conv == MQ_CV_ARRAY) {
        if (!json_is_array(x)) {
            json_decref(x);
            x = json_array();
        }
        return reply_member(r, mb, x, NULL);
    }
    if (mb->conv == MQ_CV_RECEIVE_INFO) {
        json_t *ri = receive_info(x);
        json_decref(x);
        return reply_member(r, mb, ri, NULL);
    }
    /* MQ_CV_ENUM */
    int value;
    const char *name;
    sl_err e = mq_mobj_enum(mb, json_is_string(x) ? json_string_value(x) : "", &value, &name,
                            reason, sizeof reason);
    json_decref(x);
    if (e != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason);
    return reply_member(r, mb, json_integer(value), name);
}

/* ---- Get Info at another node ---- */

/* The answer's object: the request that asked takes it when it resumes. */
static void owner_answered(void *ctx, mq_mobj_answer *a)
{
    req *r = ctx;
    mobj *o = sl_map_get(r->m->mobjs.by_id, r->async_tag, CTX_ID_LEN);
    if (!o) {
        mq_mobj_answer_free(a); /* released meanwhile: the request says so */
        mgmt_req_resume(r);
        return;
    }
    /* an answer already there for r is a dead request's (r asks once at a time) */
    answered *w = o->answers;
    while (w && w->r != r)
        w = w->next;
    if (!w) {
        w = sl_xcalloc(1, sizeof *w);
        w->r = r;
        w->next = o->answers;
        o->answers = w;
    }
    mq_mobj_answer_free(w->a);
    w->a = a;
    mgmt_req_resume(r);
}

/* Ask host:port for props of fmt; the answer resumes r with fn. */
static enum MHD_Result ask_owner(req *r, mobj *o, const char *host, int port, const char *fmt,
                                 const char *vhost, const int *ids, int n,
                                 enum MHD_Result (*fn)(req *r), const char *tag)
{
    char reason[400];
    snprintf(r->async_tag, sizeof r->async_tag, "%s%s", o->e.id, tag);
    sl_err e = mq_mobj_ask(r->m->mq, host, port, fmt, vhost, ids, n, owner_answered, r, reason,
                           sizeof reason);
    if (e != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason);
    o->e.busy = 1;
    mgmt_req_suspend(r, fn);
    return MHD_YES;
}

/* r's answer from o's owner, taken off o (NULL: none came). */
static mq_mobj_answer *take_answer(req *r, mobj *o)
{
    for (answered **p = &o->answers; *p; p = &(*p)->next) {
        if ((*p)->r == r) {
            answered *w = *p;
            mq_mobj_answer *a = w->a;
            *p = w->next;
            sl_free(w);
            return a;
        }
    }
    return NULL;
}

/* The owner's values (the n asked for, into v) or its failure as our reply (then -1). */
static int owner_values(req *r, mobj *o, int n, json_t **v, enum MHD_Result *rc)
{
    char reason[700];
    mq_mobj_answer *a = take_answer(r, o);
    int ret = -1;
    if (!a) {
        *rc = mgmt_reply_hresult(r, SL_ERR_REMOTE_MACHINE_NOT_AVAILABLE, NULL, "no answer");
    } else if (a->owner_refused) {
        *rc = mgmt_reply_remote_hresult(r, a->hresult, a->hresult_name, a->reason, NULL);
    } else if (a->e != SL_OK) {
        *rc = mgmt_reply_hresult(r, a->e, NULL, a->reason);
    } else if (!mgmt_req_vhost_listed(r, a->vhost)) {
        /* this node's user, on the vhost the owner resolved, at every read: properties of a
         * queue follow the listing rule (a permission entry on its vhost; administrators
         * every vhost), as for a queue of this node */
        snprintf(reason, sizeof reason, "user '%s' is not authorised to access virtual host '%s'",
                 r->user, a->vhost);
        *rc = mgmt_reply_hresult(r, SL_ERR_ACCESS_REFUSED, NULL, reason);
    } else {
        for (int i = 0; i < n && (size_t)i < a->n; i++)
            v[i] = mq_value_json(&a->values[i]);
        ret = 0;
    }
    mq_mobj_answer_free(a);
    return ret;
}

static mobj *waiting_object(req *r)
{
    mobj *o = sl_map_get(r->m->mobjs.by_id, r->async_tag, CTX_ID_LEN);
    if (o)
        o->e.busy = 0;
    return o;
}

static enum MHD_Result member_resumed(req *r)
{
    mobj *o = waiting_object(r);
    const member *mb = o ? mq_mobj_member_find(r->async_tag + CTX_ID_LEN) : NULL;
    if (!o || !mb)
        return mgmt_reply_hresult(r, SL_ERR_INVALID_HANDLE, NULL,
                                  "the management object was released meanwhile");
    int ids[MQ_MOBJ_MAX_PROPS];
    int n = mq_mobj_member_props(mb, ids);
    json_t *v[MQ_MOBJ_MAX_PROPS] = {0};
    enum MHD_Result rc;
    if (owner_values(r, o, n, v, &rc) < 0)
        return rc;
    return answer(r, mb, v);
}

static enum MHD_Result invoke(req *r, mobj *o, const member *mb)
{
    char reason[600];
    if (mb->conv == MQ_CV_ACTION ? !mgmt_req_is(r, "POST") : !mgmt_req_is(r, "GET"))
        return mgmt_reply_method_not_allowed(r);
    sl_err e = mq_mobj_check(r->m->mq, &o->b, o->e.id, mb, reason, sizeof reason);
    if (e != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason);
    json_t *v[MQ_MOBJ_MAX_PROPS] = {0};
    if (mb->conv == MQ_CV_FORMAT_NAME)
        return reply_member(r, mb, json_string(o->b.format_name), NULL);
    if (mb->conv == MQ_CV_MACHINE)
        return reply_member(r, mb, json_string(mq_mobj_machine(r->m->mq, &o->b)), NULL);
    if (mb->conv == MQ_CV_ACTION) {
        /* QMMgmt Action (MC-MQAC 3.3.6.3): this node's R_QMMgmtAction */
        mq_action_result res;
        if ((e = mq_action_queue(r->m->mq, o->b.format_name, o->b.vhost, mb->action, &res, reason,
                                 sizeof reason)) != SL_OK)
            return mgmt_reply_hresult(r, e, NULL, reason);
        v[0] = mgmt_msmq_action_json(&res);
        json_object_set_new(v[0], "member", json_string(mb->name));
        json_object_set_new(v[0], "interface", json_string(mq_mobj_iface_name(mb->iface)));
        return mgmt_reply_hresult(r, SL_OK, v[0], NULL);
    }
    int ids[MQ_MOBJ_MAX_PROPS];
    int n = mq_mobj_member_props(mb, ids);
    if (o->b.rhost)
        return ask_owner(r, o, o->b.rhost, o->b.rport, o->b.format_name, o->b.vhost, ids, n,
                         member_resumed, mb->path);
    mq_caller who = {r->user, r->is_admin};
    for (int i = 0; i < n; i++) {
        mq_value mv;
        if ((e = mq_mobj_get_info(r->m->mq, &who, &o->b, ids[i], &mv, reason, sizeof reason)) !=
            SL_OK) {
            for (int k = 0; k < i; k++)
                json_decref(v[k]);
            return mgmt_reply_hresult(r, e, NULL, reason);
        }
        v[i] = mq_value_json(&mv);
        mq_value_free(&mv);
    }
    return answer(r, mb, v);
}

/* ------------------------------------------------------------------------------------------
 * Init (MC-MQAC IMSMQManagement::Init, section 4.2)
 */

static json_t *mobj_json(mgmt *m, mobj *o)
{
    const mq_mobj *b = &o->b;
    json_t *j = json_pack("{s:s,s:s,s:b,s:I}", "id", o->e.id, "user", o->e.owner, "initialized",
                          b->initialized, "opened_at", (json_int_t)o->e.opened_wall_ms);
    if (b->initialized) {
        json_object_set_new(j, "machine", json_string(mq_mobj_machine(m->mq, b)));
        json_object_set_new(j, "format_name", json_string(b->format_name));
        json_object_set_new(j, "vhost", b->vhost ? json_string(b->vhost) : json_null());
        json_object_set_new(
            j, "interface",
            json_string(mq_mobj_iface_name(b->outgoing ? MQ_IF_OUTGOING : MQ_IF_QUEUE)));
        if (b->rhost) {
            char owner[300];
            snprintf(owner, sizeof owner, "%s:%d", b->rhost, b->rport);
            json_object_set_new(j, "owner", json_string(owner));
        }
    }
    return j;
}

static enum MHD_Result init_resumed(req *r);

static enum MHD_Result init(req *r, mobj *o)
{
    json_t *body = mgmt_req_body(r, 0);
    if (!body)
        return MHD_YES;
    json_t *jm = json_object_get(body, "machine"), *jp = json_object_get(body, "pathname");
    json_t *jf = json_object_get(body, "format_name"), *jv = json_object_get(body, "vhost");
    int has_p = jp && !json_is_null(jp), has_f = jf && !json_is_null(jf);
    if (has_p != has_f && ((has_p && !json_is_string(jp)) || (has_f && !json_is_string(jf)) ||
                           (jm && !json_is_null(jm) && !json_is_string(jm)) ||
                           (jv && !json_is_null(jv) && !json_is_string(jv))))
        return mgmt_reply_hresult(
            r, SL_ERR_INVALID_PARAMETER, NULL,
            "\"machine\", \"pathname\", \"format_name\" and \"vhost\" are strings");
    const char *machine = json_is_string(jm) ? json_string_value(jm) : NULL;
    if (machine && !*machine)
        machine = NULL; /* MC-MQAC: omitted = the local computer */
    const char *vhost = json_is_string(jv) ? json_string_value(jv) : NULL;
    char reason[600], rhost[256], fmt[1200];
    int rport, remote;
    /* both or neither given: mq refuses that first, whatever their types ("" stands in) */
    const char *path = has_p ? (json_is_string(jp) ? json_string_value(jp) : "") : NULL;
    const char *fname = has_f ? (json_is_string(jf) ? json_string_value(jf) : "") : NULL;
    sl_err e = mq_mobj_target(r->m->mq, machine, path, fname, fmt, sizeof fmt, &remote, rhost,
                              sizeof rhost, &rport, reason, sizeof reason);
    if (e != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason);
    if (remote) {
        /* MS-MQMR bound to that machine: its Get Info (LOCATION), over the link */
        mq_mobj_init_pending(&o->b, machine, fmt, vhost, rhost, rport);
        static const int location[] = {4};
        return ask_owner(r, o, rhost, rport, fmt, vhost, location, 1, init_resumed, "");
    }
    mq_caller who = {r->user, r->is_admin};
    if ((e = mq_mobj_init_local(r->m->mq, &who, &o->b, machine, fmt, vhost, reason,
                                sizeof reason)) != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason); /* a failed Init changes nothing */
    return mgmt_reply_hresult(r, SL_OK, mobj_json(r->m, o), NULL);
}

static enum MHD_Result init_resumed(req *r)
{
    mobj *o = waiting_object(r);
    if (!o)
        return mgmt_reply_hresult(r, SL_ERR_INVALID_HANDLE, NULL,
                                  "the management object was released meanwhile");
    json_t *v[1] = {NULL};
    enum MHD_Result rc;
    if (owner_values(r, o, 1, v, &rc) < 0) {
        mq_mobj_clear_pending(&o->b); /* a failed Init changes nothing */
        return rc;
    }
    mq_mobj_init_commit(&o->b, json_string_value(v[0]));
    json_decref(v[0]);
    return mgmt_reply_hresult(r, SL_OK, mobj_json(r->m, o), NULL);
}

/* ------------------------------------------------------------------------------------------
 * Routing
 */

enum MHD_Result mgmt_api_mgmtobj(req *r)
{
    char reason[400];
    sl_err e;
    /* segs: msmq management [M [member]] */
    if (r->nsegs == 2) {
        if (mgmt_req_is(r, "GET")) {
            size_t n;
            mq_ctx_entry **v = mq_ctx_list(&r->m->mobjs, r->user, &n);
            json_t *arr = json_array();
            for (size_t i = 0; i < n; i++)
                json_array_append_new(arr, mobj_json(r->m, (mobj *)v[i]));
            sl_free(v);
            return mgmt_reply_json(r, 200, arr);
        }
        if (!mgmt_req_is(r, "POST"))
            return mgmt_reply_method_not_allowed(r);
        mobj *o = sl_xcalloc(1, sizeof *o);
        if ((e = mq_ctx_add(&r->m->mobjs, &o->e, r->user, reason, sizeof reason)) != SL_OK) {
            sl_free(o);
            return mgmt_reply_hresult(r, e, NULL, reason);
        }
        json_t *j = mobj_json(r->m, o);
        json_object_set_new(j, "hresult", json_string("0x00000000"));
        json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
        return mgmt_reply_json(r, 201, j);
    }
    if (r->nsegs > 4)
        return mgmt_reply_not_found(r);
    const member *mb = NULL;
    if (r->nsegs == 4 && strcmp(r->segs[3], "init") && !(mb = mq_mobj_member_find(r->segs[3]))) {
        /* IDispatch: no such member, whatever the object's state */
        snprintf(reason, sizeof reason,
                 "'%.100s' is not a member of MSMQManagement, "
                 "MSMQQueueManagement or MSMQOutgoingQueueManagement",
                 r->segs[3]);
        return mgmt_reply_hresult(r, SL_ERR_MEMBER_NOT_FOUND, NULL, reason);
    }
    if (r->nsegs == 4 && !mb && !mgmt_req_is(r, "POST"))
        return mgmt_reply_method_not_allowed(r);
    if (r->nsegs == 3 && !mgmt_req_is(r, "GET") && !mgmt_req_is(r, "DELETE"))
        return mgmt_reply_method_not_allowed(r);
    mq_ctx_entry *ce;
    if ((e = mq_ctx_lookup(&r->m->mobjs, r->segs[2], r->user, &ce, reason, sizeof reason)) != SL_OK)
        return mgmt_reply_hresult(r, e, NULL, reason);
    mobj *o = (mobj *)ce;
    if (r->nsegs == 4)
        return mb ? invoke(r, o, mb) : init(r, o);
    if (mgmt_req_is(r, "GET")) {
        json_t *j = mobj_json(r->m, o);
        json_object_set_new(j, "hresult", json_string("0x00000000"));
        json_object_set_new(j, "hresult_name", json_string("MQ_OK"));
        return mgmt_reply_json(r, 200, j);
    }
    char id[CTX_ID_LEN + 1];
    memcpy(id, o->e.id, sizeof id);
    mq_ctx_remove(&r->m->mobjs, &o->e);
    mobj_close(r->m, &o->e);
    return mgmt_reply_hresult(r, SL_OK, json_pack("{s:s,s:b}", "id", id, "released", 1), NULL);
}
