/* rpc_call.c - the calling side of requests over links (link.h "Request / response"):
 * request-only links to a node, channel 2 consuming direct reply-to, calls matched to
 * replies by correlation-id.
 *
 * Invariants: a call's callback runs exactly once (reply, failure or deadline); a request
 * already sent when its session dies fails, one not yet sent waits for the next session.
 */
#include "link/link_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "core/list.h"
#include "core/log.h"
#include "core/mem.h"

/* ------------------------------------------------------------------------------------------
 * Requests (link.h "Request / response"): channel 2 consumes direct reply-to; each request
 * is a publish to "sluice.rpc" with a correlation-id; each reply a delivery carrying it back.
 * A request already sent when the session dies fails (it may or may not have been done: the
 * caller decides); one not yet sent waits for the next session, until its deadline.
 */

static void finish_call(rpc_call *c, const char *reply, const char *err)
{
    c->cb(c->ctx, reply, err);
    sl_free(c->req);
    sl_free(c);
}

void link_fail_calls(link_outq *o, int sent_only, const char *why)
{
    rpc_call *fail = NULL, **tail = &fail, *keep = NULL, **ktail = &keep;
    for (rpc_call *c = o->calls, *next; c; c = next) {
        next = c->next;
        c->next = NULL;
        if (!sent_only || c->sent) {
            *tail = c;
            tail = &c->next;
        } else {
            *ktail = c;
            ktail = &c->next;
        }
    }
    o->calls = keep;
    while (fail) { /* callbacks may start new calls: the list is detached first */
        rpc_call *c = fail;
        fail = c->next;
        finish_call(c, NULL, why);
    }
}

void link_expire_calls(link_outq *o, uint64_t now)
{
    rpc_call *late = NULL, **tail = &late;
    for (rpc_call **pp = &o->calls; *pp;) {
        rpc_call *c = *pp;
        if (now >= c->deadline) {
            *pp = c->next;
            c->next = NULL;
            *tail = c;
            tail = &c->next;
        } else {
            pp = &c->next;
        }
    }
    while (late) {
        rpc_call *c = late;
        late = c->next;
        char why[600];
        snprintf(why, sizeof why, "no reply from %s:%d in time%s%s", o->dest.host, o->dest.port,
                 o->last_error[0] ? ": " : "", o->last_error);
        finish_call(c, NULL, why);
    }
}

static void rpc_send(link_outq *o, rpc_call *c)
{
    amqp_method pm = {.id = AMQP_BASIC_PUBLISH};
    pm.u.basic_publish.exchange = AMQP_BYTES("sluice.rpc");
    pm.u.basic_publish.routing_key = AMQP_BYTES("");
    amqp_method_write(&o->out, 2, &pm);
    char corr[32];
    snprintf(corr, sizeof corr, "%llu", (unsigned long long)c->id);
    amqp_basic_props bp = {0};
    bp.flags = AMQP_P_CONTENT_TYPE | AMQP_P_CORRELATION_ID | AMQP_P_REPLY_TO;
    bp.content_type = AMQP_BYTES("application/json");
    bp.correlation_id = amqp_cstr(corr);
    bp.reply_to = AMQP_BYTES("amq.rabbitmq.reply-to");
    sl_buf props;
    sl_buf_init(&props);
    amqp_props_encode(&props, &bp);
    size_t len = strlen(c->req);
    amqp_content_header_write(&o->out, 2, len, props.data, props.len);
    sl_buf_free(&props);
    size_t chunk = o->frame_max - AMQP_FRAME_OVERHEAD;
    for (size_t off = 0; off < len; off += chunk)
        amqp_frame_write(&o->out, AMQP_FRAME_BODY, 2, c->req + off,
                         len - off < chunk ? len - off : chunk);
    c->sent = 1;
    link_mark_dirty(o);
}

void link_rpc_start(link_outq *o)
{
    amqp_method co = {.id = AMQP_CHANNEL_OPEN};
    amqp_method_write(&o->out, 2, &co);
    o->rs = R_CHANNEL;
    link_mark_dirty(o);
}

int link_rpc_method(link_outq *o, const amqp_method *mm)
{
    switch (mm->id) {
    case AMQP_CHANNEL_OPEN_OK: {
        amqp_method bc = {.id = AMQP_BASIC_CONSUME};
        bc.u.basic_consume.queue = AMQP_BYTES("amq.rabbitmq.reply-to");
        bc.u.basic_consume.consumer_tag = AMQP_BYTES("sluice.rpc");
        bc.u.basic_consume.no_ack = 1;
        amqp_method_write(&o->out, 2, &bc);
        o->rs = R_CONSUME;
        link_mark_dirty(o);
        return 1;
    }
    case AMQP_BASIC_CONSUME_OK:
        o->rs = R_READY;
        for (rpc_call *c = o->calls; c; c = c->next)
            if (!c->sent)
                rpc_send(o, c);
        return 1;
    case AMQP_BASIC_DELIVER:
        o->rpc_in_reply = 1;
        o->rpc_left = UINT64_MAX;
        o->rpc_body.len = o->rpc_body.off = 0;
        o->rpc_corr[0] = 0;
        return 1;
    default:
        return 0;
    }
}

int link_rpc_content(link_outq *o, const amqp_frame *f)
{
    if (f->type == AMQP_FRAME_HEADER) {
        amqp_content_header h;
        amqp_basic_props bp;
        if (amqp_content_header_parse(f->payload, f->size, &h) < 0 ||
            amqp_props_decode(h.props, h.props_len, &bp) < 0 || h.body_size > (16u << 20)) {
            link_outq_fail(o, H_UNKNOWN, 1, "malformed reply from the destination");
            return -1;
        }
        snprintf(o->rpc_corr, sizeof o->rpc_corr, "%.*s",
                 (int)(bp.flags & AMQP_P_CORRELATION_ID ? bp.correlation_id.len : 0),
                 (const char *)bp.correlation_id.p);
        o->rpc_left = h.body_size;
    } else {
        if (f->size > o->rpc_left) {
            link_outq_fail(o, H_UNKNOWN, 1, "reply body longer than announced");
            return -1;
        }
        sl_buf_append(&o->rpc_body, f->payload, f->size);
        o->rpc_left -= f->size;
    }
    if (o->rpc_left)
        return 0;
    o->rpc_in_reply = 0;
    uint64_t id = strtoull(o->rpc_corr, NULL, 10);
    for (rpc_call **pp = &o->calls; *pp; pp = &(*pp)->next) {
        rpc_call *c = *pp;
        if (c->id != id || !c->sent)
            continue;
        *pp = c->next;
        sl_buf_put_u8(&o->rpc_body, 0);
        finish_call(c, (const char *)o->rpc_body.data, NULL);
        break;
    }
    o->rpc_body.len = o->rpc_body.off = 0;
    return 0;
}

void link_rpc_outq_free(link_outq *o)
{
    link_outq_free(o);
}

void link_rpc_hold(link_mgr *m, const char *host, int port, int delta)
{
    link_outq *o = m->rpcs;
    while (o && (o->dest.port != port || strcasecmp(o->dest.host, host)))
        o = o->next;
    if (!o)
        return; /* no request link (it went): nothing the owner still holds for it */
    if (delta > 0)
        o->holds++;
    else if (o->holds)
        o->holds--;
    o->idle_since = 0;
}

sl_err link_rpc_call(link_mgr *m, const char *host, int port, const char *request_json,
                     uint32_t timeout_ms, link_rpc_cb cb, void *ctx)
{
    if (!m->online)
        return SL_ERR_NOT_ALLOWED; /* DISCONNECT: no node-to-node traffic */
    link_outq *o = m->rpcs;
    while (o && (o->dest.port != port || strcasecmp(o->dest.host, host)))
        o = o->next;
    if (!o) {
        if (strlen(host) >= sizeof o->dest.host)
            return SL_ERR_INVALID_PARAMETER;
        o = sl_xcalloc(1, sizeof *o);
        o->m = m;
        o->rpc_only = 1;
        snprintf(o->dest.host, sizeof o->dest.host, "%s", host);
        o->dest.port = port;
        snprintf(o->name, sizeof o->name, "requests to %s:%d", host, port);
        o->io.fd = -1;
        sl_buf_init(&o->rpc_body);
        SL_LIST_PUSH(m->rpcs, o, prev, next);
    }
    rpc_call *c = sl_xcalloc(1, sizeof *c);
    c->id = ++o->rpc_next_id;
    c->cb = cb;
    c->ctx = ctx;
    c->req = sl_xstrdup(request_json);
    c->deadline = sl_loop_now(m->loop) + (timeout_ms ? timeout_ms : 10000);
    rpc_call **tail = &o->calls;
    while (*tail)
        tail = &(*tail)->next;
    *tail = c;
    if (o->cs == C_OPEN && o->rs == R_READY)
        rpc_send(o, c);
    else if (o->cs == C_NONE) {
        o->retry_at = 0;
        link_outq_consider(o, sl_loop_now(m->loop));
    }
    return SL_OK;
}
