/* handshake.c - a stream connection's commands before Open, and those of every state
 * (Heartbeat, Close), as RabbitMQ's rabbit_stream_reader takes them:
 *
 *   PeerProperties   answered with the node's properties (product Sluice, version, ...);
 *   SaslHandshake    the mechanisms of auth_mechanisms the stream door speaks: PLAIN, and
 *                    EXTERNAL only to a TLS client whose certificate verified;
 *   SaslAuthenticate PLAIN through the access module (loopback_users, slow hashes off the
 *                    loop), EXTERNAL as the certificate's name (ssl_cert_login_from); a refusal
 *                    is AUTHENTICATION_FAILURE (SASL_AUTHENTICATION_FAILURE_LOOPBACK for a
 *                    loopback user from elsewhere, SASL_MECHANISM_NOT_SUPPORTED, SASL_ERROR for
 *                    a malformed answer) and the connection closes, as RabbitMQ's does;
 *   Tune             ours (stream.frame_max, stream.heartbeat) after the login; the client's
 *                    answer (key 0x0014 or 0x8014: clients differ, RabbitMQ takes both) sets
 *                    them, never above ours;
 *   Open             the vhost: it must exist and the user needs a permission entry on it
 *                    (and the vhost's and user's connection limits), else
 *                    VIRTUAL_HOST_ACCESS_FAILURE and the connection closes; the answer names
 *                    advertised_host and advertised_port; the feeder's limit becomes the
 *                    tuned frame_max (8192 before).
 * A command out of this order closes the connection with UNKNOWN_FRAME. The reason for a
 * refused login goes to the log only, as on the AMQP door.
 */
#include "stream/internal.h"

#include <stdio.h>
#include <string.h>

#include "access/access.h"
#include "access/verifier.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/version.h"
#include "net/tls.h"

/* ---- helpers ---- */

static int str_is(sp_str s, const char *lit)
{
    size_t n = strlen(lit);
    return !s.null && s.len == n && !memcmp(s.p, lit, n);
}

/* Does auth_mechanisms offer mech, and may this connection use it? AMQPLAIN is AMQP's own
 * (a field table): the stream door does not speak it. */
static int mechanism_offered(const stream_conn *c, const char *mech, size_t len)
{
    const char *cm =
        c->d->n->cfg->auth_mechanisms ? c->d->n->cfg->auth_mechanisms : "PLAIN AMQPLAIN";
    for (const char *p = cm; *p;) {
        size_t n = strcspn(p, " ");
        if (n == len && !memcmp(p, mech, n)) {
            if (n == 8 && !memcmp(p, "EXTERNAL", 8))
                return c->tls && sl_tls_peer_verified(c->tls);
            return n == 5 && !memcmp(p, "PLAIN", 5);
        }
        p += n;
        while (*p == ' ')
            p++;
    }
    return 0;
}

static void out_of_order(stream_conn *c, const sp_cmd *m)
{
    char why[120];
    snprintf(why, sizeof why, "unexpected %s%s before the connection is open", sp_key_name(m->key),
             m->response ? " answer" : "");
    stream_conn_close(c, SP_UNKNOWN_FRAME, why);
}

/* ---- PeerProperties ---- */

static void on_peer_properties(stream_conn *c, const sp_cmd *m)
{
    for (uint32_t i = 0; i < m->u.peer_properties.properties.n; i++) {
        const sp_kv *kv = &m->u.peer_properties.properties.v[i];
        if (str_is(kv->key, "connection_name") && !kv->value.null)
            sl_debug("stream connection %s: client's name '%.*s'", c->name, (int)kv->value.len,
                     (const char *)kv->value.p);
    }
    /* kept for the HTTP API's client_properties (connection_name...), as RabbitMQ keeps them */
    stream_props_free(c->props, c->n_props);
    c->props = stream_props_copy(&m->u.peer_properties.properties, &c->n_props);
    /* RabbitMQ answers with its AMQP server properties that are strings. "version" is the
     * RabbitMQ release whose protocol this door speaks (clients gate features on it);
     * Sluice's own is "sluice_version". */
    sp_kv props[] = {
        {sp_cstr("product"), sp_cstr(SLUICE_PRODUCT)},
        {sp_cstr("version"), sp_cstr(SLUICE_RABBITMQ_COMPAT)},
        {sp_cstr("sluice_version"), sp_cstr(SLUICE_VERSION)},
        {sp_cstr("platform"), sp_cstr("C")},
        {sp_cstr("copyright"), sp_cstr("Sluice's authors")},
        {sp_cstr("information"), sp_cstr("Sluice: RabbitMQ's stream protocol on an MSMQ-style "
                                         "queue manager")},
        {sp_cstr("cluster_name"), sp_cstr(c->d->n->cfg->node_name)},
    };
    sp_cmd r = {
        .key = SP_PEER_PROPERTIES, .response = 1, .version = 1, .corr = m->corr, .code = SP_OK};
    r.u.peer_properties_resp.properties.v = props;
    r.u.peer_properties_resp.properties.n = sizeof props / sizeof props[0];
    stream_conn_send(c, &r);
    c->state = SC_SASL_HANDSHAKE;
}

/* ---- SASL ---- */

static void on_sasl_handshake(stream_conn *c, const sp_cmd *m)
{
    sp_str mechs[2];
    uint32_t n = 0;
    if (mechanism_offered(c, "PLAIN", 5))
        mechs[n++] = sp_cstr("PLAIN");
    if (mechanism_offered(c, "EXTERNAL", 8))
        mechs[n++] = sp_cstr("EXTERNAL");
    sp_cmd r = {
        .key = SP_SASL_HANDSHAKE, .response = 1, .version = 1, .corr = m->corr, .code = SP_OK};
    r.u.sasl_handshake_resp.mechanisms.v = mechs;
    r.u.sasl_handshake_resp.mechanisms.n = n;
    stream_conn_send(c, &r);
    c->state = SC_SASL_AUTH;
}

static void send_tune(stream_conn *c)
{
    sp_cmd t = {.key = SP_TUNE, .version = 1};
    t.u.tune.frame_max = c->d->n->cfg->stream_frame_max;
    t.u.tune.heartbeat = c->d->n->cfg->stream_heartbeat;
    stream_conn_send(c, &t);
    c->state = SC_TUNE;
}

/* The login judged: refuse (the code, then the socket closes) or answer OK and tune. */
static void login_finish(stream_conn *c, uint32_t corr, const char *mech, const char *user,
                         size_t ulen, sl_err e, const char *why)
{
    if (e != SL_OK) {
        /* the reason goes to the log only: the client learns nothing of which part was wrong */
        sl_warn("stream connection %s: %s login refused: %s", c->name, mech, why);
        uint16_t code = strstr(why, "can only connect via localhost")
                            ? SP_SASL_AUTHENTICATION_FAILURE_LOOPBACK
                            : SP_AUTHENTICATION_FAILURE;
        stream_reply_code(c, SP_SASL_AUTHENTICATE, corr, code);
        stream_conn_linger(c, NULL);
        return;
    }
    sl_free(c->user);
    c->user = sl_xstrndup(user, ulen);
    c->auth_mechanism = strcmp(mech, "EXTERNAL") ? "PLAIN" : "EXTERNAL"; /* the API's view */
    stream_reply_code(c, SP_SASL_AUTHENTICATE, corr, SP_OK);
    send_tune(c);
}

void stream_login_cancel(stream_conn *c)
{
    if (c->job)
        acc_verify_cancel(c->job);
    c->job = NULL;
    sl_free(c->login_user);
    sl_free(c->login_hash);
    c->login_user = NULL;
    c->login_hash = NULL;
}

static void slow_login_done(void *owner, int ok)
{
    stream_conn *c = owner;
    c->job = NULL;
    const acc_user *u = NULL;
    char why[1400];
    sl_err e = acc_login_checked(c->d->n->acc, c->login_user, strlen(c->login_user), c->login_hash,
                                 c->login_hash_len, ok, c->loopback, &u, why, sizeof why);
    char *user = c->login_user;
    c->login_user = NULL;
    stream_login_cancel(c);
    c->state = SC_SASL_AUTH; /* login_finish moves on from here */
    login_finish(c, c->login_corr, "PLAIN", user, strlen(user), e, why);
    sl_free(user);
    stream_conn_rearm(c);  /* reading again */
    stream_conn_resume(c); /* what the client sent meanwhile */
    stream_conn_flush(c);
}

/* A slow hash (Argon2id) is checked on the verifier's thread; the connection reads nothing
 * until the answer comes (the client waits for it anyway). */
static int slow_login_start(stream_conn *c, uint32_t corr, const char *user, size_t ulen,
                            const uint8_t *pass, size_t plen)
{
    const acc_user *u = acc_user_find(c->d->n->acc, user, ulen);
    acc_verify_job *job = acc_verifier_post(c->d->n->verifier, u->algo, u->hash, u->hash_len, pass,
                                            plen, slow_login_done, c);
    if (!job)
        return -1;
    c->job = job;
    c->login_corr = corr;
    c->login_user = sl_xstrndup(user, ulen);
    c->login_hash = sl_xmalloc(u->hash_len ? u->hash_len : 1);
    memcpy(c->login_hash, u->hash, u->hash_len);
    c->login_hash_len = u->hash_len;
    c->state = SC_LOGIN_WAIT;
    stream_conn_rearm(c);
    return 0;
}

static void on_sasl_authenticate(stream_conn *c, const sp_cmd *m)
{
    sp_str mech = m->u.sasl_authenticate.mechanism, data = m->u.sasl_authenticate.data;
    char mname[16];
    snprintf(mname, sizeof mname, "%.*s", mech.null ? 0 : (int)(mech.len < 15 ? mech.len : 15),
             mech.null ? "" : (const char *)mech.p);
    if (mech.null || !mechanism_offered(c, (const char *)mech.p, mech.len)) {
        sl_warn("stream connection %s: login refused: mechanism '%s' not offered", c->name, mname);
        stream_reply_code(c, SP_SASL_AUTHENTICATE, m->corr, SP_SASL_MECHANISM_NOT_SUPPORTED);
        stream_conn_linger(c, NULL);
        return;
    }
    const acc_user *u = NULL;
    char why[1400];
    if (str_is(mech, "EXTERNAL")) {
        /* the user is named by the verified client certificate; the data (an authorization
         * identity) is ignored, as RabbitMQ does */
        char certname[1024];
        int rc = c->d->n->cfg->ssl_cert_login_cn
                     ? sl_tls_peer_cn(c->tls, certname, sizeof certname)
                     : sl_tls_peer_dn(c->tls, certname, sizeof certname);
        if (rc < 0)
            certname[0] = 0;
        sl_err e = acc_login_external(c->d->n->acc, certname, strlen(certname), c->loopback, &u,
                                      why, sizeof why);
        login_finish(c, m->corr, "EXTERNAL", certname, strlen(certname), e, why);
        return;
    }
    /* PLAIN: authzid \0 authcid \0 password */
    const uint8_t *p = data.p, *end = data.p + data.len;
    const uint8_t *z1 = data.null ? NULL : memchr(p, 0, data.len);
    const uint8_t *z2 = z1 ? memchr(z1 + 1, 0, (size_t)(end - z1 - 1)) : NULL;
    if (!z2) {
        sl_warn("stream connection %s: PLAIN login refused: malformed response", c->name);
        stream_reply_code(c, SP_SASL_AUTHENTICATE, m->corr, SP_SASL_ERROR);
        stream_conn_linger(c, NULL);
        return;
    }
    const char *user = (const char *)z1 + 1;
    size_t ulen = (size_t)(z2 - z1 - 1);
    const uint8_t *pass = z2 + 1;
    size_t plen = (size_t)(end - z2 - 1);
    if (c->d->n->verifier && acc_login_is_slow(acc_user_find(c->d->n->acc, user, ulen), plen)) {
        if (slow_login_start(c, m->corr, user, ulen, pass, plen) == 0)
            return;
        /* the queue of slow checks is full (a storm of logins): refused unchecked */
        snprintf(why, sizeof why,
                 "user '%.*s' - too many slow password checks waiting (%u); refused unchecked",
                 (int)ulen, user, acc_verifier_pending(c->d->n->verifier));
        login_finish(c, m->corr, "PLAIN", user, ulen, SL_ERR_ACCESS_REFUSED, why);
        return;
    }
    sl_err e =
        acc_login_password(c->d->n->acc, user, ulen, pass, plen, c->loopback, &u, why, sizeof why);
    login_finish(c, m->corr, "PLAIN", user, ulen, e, why);
}

/* ---- Tune, Open ---- */

static void on_tune(stream_conn *c, const sp_cmd *m)
{
    uint32_t ours = c->d->n->cfg->stream_frame_max;
    uint32_t fm = m->u.tune.frame_max;
    c->frame_max = fm == 0 || fm > ours ? ours : fm;
    c->heartbeat = m->u.tune.heartbeat;
    c->state = SC_OPENING;
}

static void open_refused(stream_conn *c, const sp_cmd *m, const char *why)
{
    sl_warn("stream connection %s: user '%s' refused vhost '%.*s': %s", c->name, c->user,
            (int)m->u.open.vhost.len, m->u.open.vhost.null ? "" : (const char *)m->u.open.vhost.p,
            why);
    stream_reply_code(c, SP_OPEN, m->corr, SP_VIRTUAL_HOST_ACCESS_FAILURE);
    stream_conn_linger(c, NULL);
}

static void on_open(stream_conn *c, const sp_cmd *m)
{
    sl_node *n = c->d->n;
    sp_str v = m->u.open.vhost;
    qm_vhost *vh = v.null ? NULL : qm_vhost_find(n->qm, (const char *)v.p, v.len);
    if (!vh) {
        open_refused(c, m, "no such vhost");
        return;
    }
    /* RabbitMQ's order: the vhost's connection limit, the user's, then access to the vhost */
    char why[400];
    acc_db *a = n->acc;
    const acc_vhost *av = acc_vhost_find(a, vh->name, strlen(vh->name));
    const acc_user *au = acc_user_find(a, c->user, strlen(c->user));
    sl_err e = SL_OK;
    if ((av && av->max_connections >= 0) || (au && au->max_connections >= 0))
        e = acc_check_connection_limits(a, c->user, vh->name,
                                        node_count_connections(n, NULL, vh->name),
                                        node_count_connections(n, c->user, NULL), why, sizeof why);
    if (e == SL_OK)
        e = acc_check_vhost(a, c->user, vh->name, why, sizeof why);
    if (e != SL_OK) {
        open_refused(c, m, why);
        return;
    }
    c->vhost = sl_xstrdup(vh->name);
    c->state = SC_OPEN;
    sp_feeder_set_max(&c->in, c->frame_max);
    char port[16];
    snprintf(port, sizeof port, "%d", c->tls ? c->d->adv_tls_port : c->d->adv_port);
    sp_kv props[] = {{sp_cstr("advertised_host"), sp_cstr(c->d->adv_host)},
                     {sp_cstr("advertised_port"), sp_cstr(port)}};
    sp_cmd r = {.key = SP_OPEN, .response = 1, .version = 1, .corr = m->corr, .code = SP_OK};
    r.u.open_resp.has_properties = 1;
    r.u.open_resp.properties.v = props;
    r.u.open_resp.properties.n = 2;
    stream_conn_send(c, &r);
    stream_conn_rearm(c); /* the heartbeat timer from here */
    sl_info("stream connection %s: user '%s' opened vhost '%s'", c->name, c->user, vh->name);
}

/* ---- every command ---- */

void stream_handle(stream_conn *c, const sp_cmd *m)
{
    if (m->key == SP_HEARTBEAT && !m->response)
        return; /* its arrival counted (last_recv) */
    if (m->key == SP_CLOSE) {
        if (!m->response) {
            /* either side's Close: answered, then the socket goes */
            stream_reply_code(c, SP_CLOSE, m->corr, SP_OK);
            stream_conn_linger(c, c->state == SC_CLOSING ? NULL : "closed by the client");
        } else if (c->state == SC_CLOSING) {
            c->close_answered = 1;
            stream_conn_linger(c, NULL);
        }
        return;
    }
    if (c->state == SC_CLOSING)
        return; /* after our Close only its answer (or the client's Close) counts */
    if (c->state == SC_OPEN) {
        stream_open_command(c, m);
        return;
    }
    if (m->key == SP_TUNE && c->state == SC_TUNE) { /* with or without the response bit */
        on_tune(c, m);
        return;
    }
    if (m->response) {
        out_of_order(c, m);
        return;
    }
    if (m->key == SP_PEER_PROPERTIES && c->state == SC_PEER)
        on_peer_properties(c, m);
    else if (m->key == SP_SASL_HANDSHAKE &&
             (c->state == SC_SASL_HANDSHAKE || c->state == SC_SASL_AUTH))
        on_sasl_handshake(c, m);
    else if (m->key == SP_SASL_AUTHENTICATE && c->state == SC_SASL_AUTH)
        on_sasl_authenticate(c, m);
    else if (m->key == SP_OPEN && c->state == SC_OPENING)
        on_open(c, m);
    else
        out_of_order(c, m);
}
