/* msrpc.c - the MSMQ RPC interfaces' glue: the server's life with the management API, the
 * caller's rights, and MS-MQMQ's QUEUE_FORMAT as format names (see msrpc.h).
 *
 * Rights: with msrpc.auth = ntlm a call has the rights of the Sluice user who logged in with
 * NTLM (dcerpc.c refuses calls without a login); with msrpc.auth = none a call is accepted
 * from a loopback peer only (server.c faults the others with access denied) and has the
 * rights of the Sluice user msrpc.user. Either way it is checked like an HTTP request of that
 * user: the management tags for anything, the administrator tag for actions, vhost
 * visibility for a queue's properties.
 */
#include <stdio.h>
#include <string.h>

#include "core/list.h"
#include "core/log.h"
#include "core/mem.h"
#include "mq/formatname.h"
#include "rpc/msrpc.h"

uint32_t rpc_msrpc_hresult(sl_err e)
{
    return e == SL_OK ? 0 : sl_err_get(e)->hresult;
}

sl_err rpc_msrpc_caller(msrpc *r, const rpc_session_info *s, int need_admin, mq_caller *out,
                        char *err, size_t errlen)
{
    const acc_user *u = acc_user_find(r->n->acc, s->user, strlen(s->user));
    out->user = s->user;
    out->is_admin = 0;
    if (!u || !acc_user_has_tag(u, ACC_TAGS_MGMT)) {
        snprintf(err, errlen, "user '%s' is not a management user", s->user);
        return SL_ERR_ACCESS_REFUSED;
    }
    out->is_admin = acc_user_has_tag(u, ACC_TAG_ADMINISTRATOR);
    if (need_admin && !out->is_admin) {
        snprintf(err, errlen, "Not administrator user");
        return SL_ERR_ACCESS_REFUSED;
    }
    return SL_OK;
}

static void read_guid_str(ndr_rd *in, char *buf, size_t len)
{
    uint8_t g[16];
    rpc_ndr_rd_align(in, 4);
    rpc_ndr_bytes(in, g, 16);
    rpc_uuid_str(g, buf, len);
}

void rpc_msrpc_read_queue_format(msrpc *r, ndr_rd *in, char *out, size_t outlen)
{
    char s[1100] = "", g[40];
    rpc_ndr_rd_align(in, 4);
    uint8_t qft = rpc_ndr_u8(in), suffix = rpc_ndr_u8(in);
    (void)rpc_ndr_u16(in);
    if (rpc_ndr_u8(in) != qft) /* the union's discriminant repeats m_qft */
        in->err = 1;
    uint32_t ptr, uniq;
    const char *computer;
    out[0] = 0;
    switch (qft) {
    case 0: /* QUEUE_FORMAT_TYPE_UNKNOWN */
        return;
    case 1: /* PUBLIC */
        read_guid_str(in, g, sizeof g);
        snprintf(out, outlen, "PUBLIC=%s", g);
        return;
    case 2: /* PRIVATE: OBJECTID */
        read_guid_str(in, g, sizeof g);
        uniq = rpc_ndr_u32(in);
        snprintf(out, outlen, "PRIVATE=%s\\%08x", g, uniq);
        return;
    case 3: /* DIRECT */
    case 8: /* SUBQUEUE (the name carries ";subqueue") */
        rpc_ndr_rd_align(in, 4);
        ptr = ndr_ptr(in);
        if (!ptr) {
            in->err = 1;
            return;
        }
        rpc_ndr_wstring(in, s, sizeof s);
        snprintf(out, outlen, "DIRECT=%s%s", s, qft == 3 && (suffix & 0x0F) == 1 ? ";journal" : "");
        return;
    case 4: /* MACHINE: with a suffix, one of the machine's system queues ("." without an
             * API: unit tests and fuzzing) */
        read_guid_str(in, g, sizeof g);
        computer = r ? mq_fmt_computer(r->mq) : ".";
        switch (suffix & 0x0F) {
        case 1:
            snprintf(out, outlen, "DIRECT=OS:%s\\SYSTEM$;JOURNAL", computer);
            return;
        case 2:
            snprintf(out, outlen, "DIRECT=OS:%s\\SYSTEM$;DEADLETTER", computer);
            return;
        case 3:
            snprintf(out, outlen, "DIRECT=OS:%s\\SYSTEM$;DEADXACT", computer);
            return;
        default:
            snprintf(out, outlen, "MACHINE=%s", g);
            return;
        }
    case 5: /* CONNECTOR */
        read_guid_str(in, g, sizeof g);
        snprintf(out, outlen, "CONNECTOR=%s", g);
        return;
    case 6: /* DL: GUID and an optional domain */
        read_guid_str(in, g, sizeof g);
        if (ndr_ptr(in))
            rpc_ndr_wstring(in, s, sizeof s);
        snprintf(out, outlen, "DL=%s%s%s", g, s[0] ? "@" : "", s);
        return;
    case 7: { /* MULTICAST */
        uint32_t a = rpc_ndr_u32(in), port = rpc_ndr_u32(in);
        snprintf(out, outlen, "MULTICAST=%u.%u.%u.%u:%u", a & 255, (a >> 8) & 255, (a >> 16) & 255,
                 a >> 24, port);
        return;
    }
    default:
        in->err = 1;
    }
}

void rpc_msrpc_read_mgmt_object(msrpc *r, ndr_rd *in, char *out, size_t outlen)
{
    uint16_t type = rpc_ndr_u16(in);
    if (rpc_ndr_u16(in) != type)
        in->err = 1;
    uint32_t arm = rpc_ndr_u32(in);
    out[0] = 0;
    switch (type) {
    case 1: /* MGMT_MACHINE */
        snprintf(out, outlen, "MACHINE");
        return;
    case 3: /* MGMT_SESSION */
        snprintf(out, outlen, "SESSION");
        return;
    case 2: { /* MGMT_QUEUE: pQueueFormat, deferred */
        char fmt[1200];
        if (!arm) {
            snprintf(out, outlen, "QUEUE=");
            return;
        }
        rpc_msrpc_read_queue_format(r, in, fmt, sizeof fmt);
        snprintf(out, outlen, "QUEUE=%s", fmt);
        return;
    }
    default:
        in->err = 1; /* an invalid union tag */
    }
}

void rpc_msrpc_pending_put(msrpc *r, msrpc_pending *p)
{
    p->r = r;
    SL_LIST_PUSH(r->pending, p, prev, next);
}

msrpc_pending *rpc_msrpc_pending_new(msrpc *r, const rpc_session_info *s, const rpc_call *c)
{
    msrpc_pending *p = sl_xcalloc(1, sizeof *p);
    p->session = s->id;
    p->call = *c;
    p->call.stub = NULL;
    p->call.stub_len = 0;
    rpc_msrpc_pending_put(r, p);
    return p;
}

msrpc *rpc_msrpc_pending_take(msrpc_pending *p)
{
    msrpc *r = p->r;
    if (!r)
        return NULL;
    SL_LIST_UNLINK(r->pending, p, prev, next);
    p->next = p->prev = NULL;
    return r;
}

void rpc_msrpc_pending_reply(msrpc *r, msrpc_pending *p, const uint8_t *stub, size_t len)
{
    if (r && r->srv)
        rpc_server_reply(r->srv, p->session, &p->call, stub, len);
    sl_free(p);
}

int rpc_msrpc_session_alive(const msrpc *r, uint64_t session)
{
    return r && r->srv && rpc_server_has_session(r->srv, session);
}

/* NTLM's credential lookup: the user's NT hash from the access module. */
static int nt_hash_of(void *ctx, const char *user, int loopback, uint8_t out[16], char *why,
                      size_t whylen)
{
    msrpc *r = ctx;
    if (!loopback && acc_is_loopback_user(r->n->acc, user)) {
        /* loopback_users, as at the AMQP and HTTP doors */
        snprintf(why, whylen, "user '%s' can only connect via localhost", user);
        return -1;
    }
    switch (acc_user_nt_hash(r->n->acc, user, out)) {
    case 0:
        return 0;
    case -1:
        snprintf(why, whylen, "no user '%s'", user);
        return -1;
    default:
        snprintf(why, whylen,
                 "user '%s' has no NT hash (its password was imported as a hash, set while "
                 "msrpc.ntlm_hashes was off, or it has none): set its password again",
                 user);
        return -1;
    }
}

/* A session ended: its handles are run down (the HTTP handles' rule, MS-RPCE's rundown). */
static void on_session_close(void *ctx, uint64_t session)
{
    msrpc *r = ctx;
    mq_handles_rundown_session(r->mq, session);
}

int rpc_msrpc_start(msrpc **out, mq_state *mq, char *err, size_t errlen)
{
    *out = NULL;
    const node_config *c = mq->n->cfg;
    if (c->msrpc_port < 0 && c->msrpc_epmap_port < 0)
        return 0;
    rpc_server_cfg rc = {
        .bind = c->bind,
        .port = c->msrpc_port,
        .epmap_port = c->msrpc_epmap_port,
        .auth_none = c->msrpc_auth_none,
        .user = c->msrpc_user,
        .max_frag = 5840, /* Windows' own */
        .max_call = c->msrpc_max_call,
        .max_frags = c->msrpc_max_fragments,
        .max_sessions = 256,
        .max_out = 1u << 20,
        .fd_reserve = mq->n->fd_reserve / 2,
        .ntlm = !c->msrpc_auth_none,
        .min_level = c->msrpc_min_level,
        .computer = mq_fmt_computer(mq),
        .nt_hash = nt_hash_of,
    };
    if (rc.ntlm && rpc_ntlm_crypto_check(err, errlen) < 0)
        return -1;
    msrpc *r = sl_xcalloc(1, sizeof *r);
    r->n = mq->n;
    r->mq = mq;
    rc.nt_hash_ctx = r;
    r->srv = rpc_server_new(mq->n->loop, &rc);
    rpc_msrpc_qmmgmt_register(r, r->srv);
    rpc_msrpc_qmcomm_register(r, r->srv);
    rpc_server_on_close(r->srv, on_session_close, r);
    if (rpc_server_start(r->srv, err, errlen) < 0) {
        rpc_server_free(r->srv);
        sl_free(r);
        return -1;
    }
    *out = r;
    return 0;
}

void rpc_msrpc_stop(msrpc **rp)
{
    msrpc *r = *rp;
    if (!r)
        return;
    /* the answers still to come find no door: they only free their call */
    for (msrpc_pending *p = r->pending, *next; p; p = next) {
        next = p->next;
        p->r = NULL;
        p->next = p->prev = NULL;
    }
    r->pending = NULL;
    rpc_server_free(r->srv);
    sl_free(r);
    *rp = NULL;
}
