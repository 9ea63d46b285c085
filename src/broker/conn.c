/* conn.c - one AMQP connection: socket I/O, the handshake, tune, heartbeats, frame routing to
 * channels, and connection-level errors.
 *
 * Input is read into c->in and cut into frames by the frame feeder; frames are handled in
 * arrival order. Output is appended to c->out and written once per loop turn (broker.c's
 * before-sleep), or as soon as the socket is writable again after EAGAIN.
 *
 * Held output: a reply that promises something on disk (broker_conn_hold_for_disk) marks the point
 * of the stream where it starts with the store generation it needs; broker_conn_flush sends up to
 * the first mark whose generation is not durable yet and keeps the rest, so the connection's
 * frames leave in the order they were made and nothing after a promise overtakes it.
 *
 * States: HEADER -> START_SENT -> TUNE_SENT -> OPENING -> OPEN -> CLOSING -> LINGER -> DEAD.
 * A DEAD connection has released all channels; broker.c flushes what is left and frees it at
 * the end of the turn, so no handler ever runs on freed memory.
 *
 * Lingering close (nginx's): once the closing handshake is done (close-ok sent, or received
 * for our own close) nothing more is acted on; the last output is written, the socket
 * half-closed (shutdown SHUT_WR: the client reads close-ok, then EOF), and input is read and
 * thrown away until the client closes its side or LINGER_MS pass. Closing at once would make
 * the kernel answer a client still writing frames it had queued with a reset, which can
 * destroy the close-ok before the client reads it.
 */
#include "broker/broker.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "amqp/hold.h"
#include "amqp/start.h"
#include "amqp/table.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/version.h"
#include "node/login.h"
#include "net/tls.h"
#include "link/rpc_queue.h"
#include "cluster/leader.h"

static void conn_handle_frame(conn *c, const amqp_frame *f);
static void hb_timer_fn(sl_loop *loop, sl_timer *t);

conn *broker_conn_new(broker *b, int fd)
{
    conn *c = sl_xcalloc(1, sizeof *c);
    c->b = b;
    c->id = node_client_id(b->n); /* unique over every door: the API lists them together */
    c->fd = fd;
    c->w.fd = fd;
    c->w.fn = broker_conn_on_event;
    c->w.data = c;
    sl_buf_init(&c->in);
    sl_buf_init(&c->out);
    sl_buf_init(&c->late);
    c->frame_max = b->n->cfg->frame_max ? b->n->cfg->frame_max : 131072;
    c->last_recv = c->last_send = sl_loop_now(b->n->loop);
    sl_timer_init(&c->hb_timer, hb_timer_fn, c);
    /* Until tune-ok the handshake timeout runs on the heartbeat timer. */
    sl_timer_start(b->n->loop, &c->hb_timer, c->last_recv + b->n->cfg->handshake_timeout_ms);
    return c;
}

static void conn_login_cancel(conn *c);

void broker_conn_free(conn *c)
{
    conn_login_cancel(c);
    for (size_t i = 0; i < c->channels_cap; i++) {
        if (c->channels[i]) {
            broker_channel_release(c->channels[i]);
            broker_channel_free(c->channels[i]);
        }
    }
    sl_free(c->channels);
    sl_timer_stop(c->b->n->loop, &c->hb_timer);
    sl_loop_unwatch(c->b->n->loop, &c->w);
    if (c->tls) {
        if (!c->tls_handshaking && !c->shut_wr)
            sl_tls_shutdown(c->tls); /* close_notify, best effort */
        sl_tls_free(c->tls);
    }
    if (c->fd >= 0)
        close(c->fd);
    sl_buf_free(&c->in);
    broker_out_free(c); /* the messages of bodies never sent */
    sl_buf_free(&c->out);
    sl_buf_free(&c->late);
    if (c->is_link)
        link_rpc_conn_gone(c->id); /* remote handles die with their link (rundown) */
    sl_holds_free(&c->holds);
    sl_free(c->user);
    sl_free(c->auth_mechanism);
    sl_free(c->link_node);
    sl_free(c);
}

/* ------------------------------------------------------------------------------------------
 * The byte stream: plain TCP, or TLS over it (AMQPS). Both read and write like recv/send.
 */

static ssize_t conn_recv(conn *c, void *buf, size_t n)
{
    if (c->tls)
        return sl_tls_read(c->tls, buf, n);
    return recv(c->fd, buf, n, 0);
}

static ssize_t conn_send(conn *c, const void *buf, size_t n)
{
    if (c->tls) {
        ssize_t r = sl_tls_write(c->tls, buf, n);
        c->tls_write_wants_read = r < 0 && errno == EAGAIN && (sl_tls_wants(c->tls) & SL_EV_READ);
        return r;
    }
    return send(c->fd, buf, n, MSG_NOSIGNAL);
}

void broker_conn_start_tls(conn *c, sl_tls *tls)
{
    c->tls = tls;
    c->tls_handshaking = 1;
    /* The TLS handshake has its own, shorter, deadline (ssl_handshake_timeout). */
    uint32_t t = c->b->n->cfg->ssl_handshake_timeout_ms;
    if (t && t < c->b->n->cfg->handshake_timeout_ms)
        sl_timer_start(c->b->n->loop, &c->hb_timer, sl_loop_now(c->b->n->loop) + t);
}

static void on_readable(conn *c);

/* Drive the TLS handshake; once done the connection waits for the AMQP protocol header.
 * A failure (a client speaking plain AMQP, a certificate refused) is one log line. */
static void tls_handshake_step(conn *c)
{
    int r = sl_tls_handshake(c->tls);
    if (r < 0) {
        sl_warn("connection %s: TLS handshake failed: %s", c->name, sl_tls_error(c->tls));
        c->tls_handshaking = 0;
        c->shut_wr = 1; /* no close_notify on a session that never was */
        broker_conn_kill(c, NULL);
        return;
    }
    if (r == 0) {
        int ev = sl_tls_wants(c->tls);
        if (c->w.events != ev)
            sl_loop_watch(c->b->n->loop, &c->w, ev ? ev : SL_EV_READ);
        return;
    }
    c->tls_handshaking = 0;
    sl_timer_start(c->b->n->loop, &c->hb_timer,
                   sl_loop_now(c->b->n->loop) + c->b->n->cfg->handshake_timeout_ms);
    char dn[512] = "";
    if (sl_tls_peer_dn(c->tls, dn, sizeof dn) < 0)
        snprintf(dn, sizeof dn, "none");
    sl_debug("connection %s: %s %s, peer certificate %s%s", c->name, sl_tls_protocol(c->tls),
             sl_tls_cipher(c->tls), dn, sl_tls_peer_verified(c->tls) ? " (verified)" : "");
    sl_loop_watch(c->b->n->loop, &c->w, SL_EV_READ);
    on_readable(c); /* the protocol header may have come with the last handshake flight */
}

void broker_conn_hold_for_disk(conn *c)
{
    broker_conn_hold_until(c, node_ticket(c->b->n));
}

void broker_conn_hold_until(conn *c, uint64_t gen)
{
    uint64_t done = node_durable(c->b->n);
    if (gen <= done)
        return;
    sl_holds_mark(&c->holds, c->out_sent + broker_out_len(c), gen, done);
    broker_wait_disk(c);
}

void broker_conn_hold_delivery(conn *c, uint64_t gen)
{
    uint64_t done = node_durable(c->b->n);
    if (gen <= done)
        return;
    sl_holds_mark_soft(&c->holds, c->out_sent + broker_out_len(c), gen, done);
    broker_wait_disk(c);
}

int broker_conn_has_held(const conn *c)
{
    return sl_holds_avail(&c->holds, c->out_sent, broker_out_len(c)) < broker_out_len(c);
}

static void release_channels(conn *c)
{
    for (size_t i = 0; i < c->channels_cap; i++)
        if (c->channels[i])
            broker_channel_release(c->channels[i]);
    /* Exclusive queues die with their connection. */
    qm_node_drop_exclusive(c->b->n->qm, c);
}

void broker_conn_kill(conn *c, const char *why)
{
    if (c->state == CONN_DEAD)
        return;
    if (why)
        sl_info("closing connection %s: %s", c->name, why);
    c->state = CONN_DEAD;
    conn_login_cancel(c);
    release_channels(c);
    sl_timer_stop(c->b->n->loop, &c->hb_timer);
    sl_loop_unwatch(c->b->n->loop, &c->w);
    broker_mark_dirty(c);
}

void broker_conn_send_method(conn *c, uint16_t ch, const amqp_method *m)
{
    amqp_method_write(&c->out, ch, m);
    broker_mark_dirty(c);
}

static void send_close(conn *c, uint16_t code, const char *text, uint32_t method_id)
{
    amqp_method m = {.id = AMQP_CONNECTION_CLOSE};
    m.u.connection_close.reply_code = code;
    m.u.connection_close.reply_text = amqp_cstr(text);
    m.u.connection_close.class_id = AMQP_ID_CLASS(method_id);
    m.u.connection_close.method_id = AMQP_ID_METHOD(method_id);
    broker_conn_send_method(c, 0, &m);
}

/* After sending connection.close, wait this long for close-ok before dropping the socket. */
#define CLOSE_OK_WAIT_MS 3000
/* After the closing handshake, wait this long for the client to close its side. */
#define LINGER_MS 2000

static void enter_closing(conn *c)
{
    c->state = CONN_CLOSING;
    release_channels(c);
    sl_timer_start(c->b->n->loop, &c->hb_timer, sl_loop_now(c->b->n->loop) + CLOSE_OK_WAIT_MS);
}

/* The closing handshake is over: drain, half-close, discard input (see the top). */
static void enter_linger(conn *c)
{
    if (c->state >= CONN_LINGER)
        return;
    release_channels(c);
    c->state = CONN_LINGER;
    if (c->counted_open) { /* closed: it no longer takes one of connection_max */
        c->counted_open = 0;
        c->b->n_open--;
    }
    sl_buf_consume(&c->in, sl_buf_unread(&c->in));
    c->out_paused = 0;
    sl_timer_start(c->b->n->loop, &c->hb_timer, sl_loop_now(c->b->n->loop) + LINGER_MS);
    broker_mark_dirty(c);
}

void broker_conn_error(conn *c, sl_err e, uint32_t method_id, const char *fmt, ...)
{
    if (c->state >= CONN_CLOSING)
        return;
    char text[256];
    const sl_err_info *info = sl_err_get(e);
    int n = snprintf(text, sizeof text, "%s - ", info->name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
    va_end(ap);
    sl_warn("connection %s error: %s", c->name, text);
    if (c->state < CONN_START_SENT) {
        broker_conn_kill(c, NULL);
        return;
    }
    send_close(c, info->amqp_code, text, method_id);
    enter_closing(c);
}

void broker_conn_force_close(conn *c, const char *text)
{
    if (c->state == CONN_DEAD)
        return;
    if (c->state < CONN_START_SENT || c->state >= CONN_CLOSING) {
        broker_conn_kill(c, NULL);
        return;
    }
    send_close(c, 320, text, 0);
    enter_closing(c);
}

void broker_conn_set_blocked(conn *c, int blocked)
{
    if (!c->cap_blocked || c->state != CONN_OPEN || c->blocked_sent == blocked)
        return;
    amqp_method m = {.id = blocked ? AMQP_CONNECTION_BLOCKED : AMQP_CONNECTION_UNBLOCKED};
    if (blocked) {
        const char *why = node_alarm_reason(c->b->n);
        m.u.connection_blocked.reason = amqp_cstr(why ? why : "low on memory");
    }
    broker_conn_send_method(c, 0, &m);
    c->blocked_sent = (uint8_t)blocked;
}

/* ------------------------------------------------------------------------------------------
 * Output
 */

/* Consumers turned away for a full output buffer get another chance once it is below the
 * mark again, whether it drained in one flush or over several. */
static void resume_if_room(conn *c)
{
    if (broker_out_len(c) >= CONN_OUT_HIGH)
        return;
    if (c->consumers_waiting) {
        c->consumers_waiting = 0;
        broker_conn_resume_consumers(c);
    }
    if (c->out_paused) {
        /* Read again; what was held back in c->in is handled first, at the start of the
         * next turn (broker.c), before its group commit, never from inside this flush. */
        c->out_paused = 0;
        if (sl_buf_unread(&c->in) > 0)
            broker_input_pending(c);
    }
}

void broker_conn_flush(conn *c)
{
    if (c->fd < 0)
        return;
    if (sl_buf_unread(&c->late) > 0) {
        if (c->state != CONN_DEAD)
            sl_buf_append(&c->out, sl_buf_head(&c->late), sl_buf_unread(&c->late));
        sl_buf_consume(&c->late, sl_buf_unread(&c->late));
    }
    if (c->tls_handshaking)
        return; /* nothing is said before the TLS session is up */
    sl_holds_release(&c->holds, node_durable(c->b->n));
    for (;;) {
        size_t avail = sl_holds_avail(&c->holds, c->out_sent, broker_out_len(c));
        if (avail == 0)
            break;
        /* bodies by reference (plain TCP only) go out with out's bytes in one sendmsg */
        ssize_t n = c->out_refs_len ? broker_out_sendv(c, avail)
                                    : conn_send(c, sl_buf_head(&c->out), avail);
        if (n > 0) {
            broker_out_consume(c, (size_t)n);
            c->out_sent += (uint64_t)n;
            c->last_send = sl_loop_now(c->b->n->loop);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (c->state != CONN_DEAD) {
                /* (a TLS write that waits for readability is retried from broker_conn_on_event) */
                if (!c->tls_write_wants_read)
                    sl_loop_watch(c->b->n->loop, &c->w, c->w.events | SL_EV_WRITE);
                resume_if_room(c);
                broker_conn_update_watch(c);
            }
            return;
        }
        /* Peer gone: nothing more can be said to it. */
        broker_out_drop(c);
        sl_holds_clear(&c->holds);
        broker_conn_kill(c, n == 0 ? "write returned 0" : strerror(errno));
        return;
    }
    if (c->holds.len)
        broker_wait_disk(c); /* the rest goes when the disk has what it waits for */
    if (c->state == CONN_LINGER && !c->shut_wr && broker_out_len(c) == 0) {
        /* Everything said: the client reads close-ok, then (TLS: close_notify and) EOF. */
        if (c->tls)
            sl_tls_shutdown(c->tls);
        shutdown(c->fd, SHUT_WR);
        c->shut_wr = 1;
    }
    if (c->state != CONN_DEAD) {
        resume_if_room(c);
        broker_conn_update_watch(c);
    }
    /* Give memory back after a burst. */
    if (c->out.cap > (1u << 20) && broker_out_len(c) == 0)
        sl_buf_free(&c->out);
}

/* ------------------------------------------------------------------------------------------
 * Input
 */

/* Replies waiting to be written beyond this stop the connection's input: a client that
 * sends requests but does not read the answers (mandatory returns, basic.get, ...) is held
 * at CONN_OUT_MAX plus one reply, and read again once its output is under CONN_OUT_HIGH. */
static int out_full(const conn *c)
{
    return broker_out_len(c) + sl_buf_unread(&c->late) >= CONN_OUT_MAX;
}

/* A connection blocked by an alarm goes on reading, so that it can still close, until this
 * much input is held behind the publish it stopped at (amqp/hold.h). */
static int hold_full(const conn *c)
{
    return c->read_paused && sl_buf_unread(&c->in) >= CONN_HOLD_MAX;
}

/* A blocked connection stops at a new publish: the frames before it (the rest of the
 * publish that found the alarm, acks, closes...) are handled, the publish and what follows
 * wait for the alarm to clear. */
static int held_by_alarm(const conn *c, const amqp_frame *f)
{
    return c->read_paused && c->state == CONN_OPEN && f->type == AMQP_FRAME_METHOD &&
           f->channel != 0 && f->size >= 4 &&
           AMQP_ID(sl_get_u16(f->payload), sl_get_u16(f->payload + 2)) == AMQP_BASIC_PUBLISH;
}

void broker_conn_update_watch(conn *c)
{
    if (c->state == CONN_DEAD || c->fd < 0)
        return;
    /* Lingering, input is only thrown away: always read it. */
    int ev = (hold_full(c) || c->out_paused || c->input_pending || c->login_wait) &&
                     c->state != CONN_LINGER
                 ? 0
                 : SL_EV_READ;
    if (broker_out_len(c) > 0 && (c->w.events & SL_EV_WRITE))
        ev |= SL_EV_WRITE; /* still waiting for the socket to drain */
    if (c->tls_write_wants_read && broker_out_len(c) > 0)
        ev |= SL_EV_READ; /* a TLS write goes on once the socket is readable */
    if (c->tls_handshaking)
        ev = sl_tls_wants(c->tls) ? sl_tls_wants(c->tls) : SL_EV_READ;
    if (c->w.events != ev)
        sl_loop_watch(c->b->n->loop, &c->w, ev);
}

static void send_start(conn *c)
{
    /* auth_mechanisms, in their order; EXTERNAL only to a client that showed a certificate
     * that verified (RabbitMQ's rabbit_auth_mechanism_ssl should_offer). */
    char mechs[64];
    size_t mo = 0;
    const char *cm =
        c->b->n->cfg->auth_mechanisms ? c->b->n->cfg->auth_mechanisms : "PLAIN AMQPLAIN";
    for (const char *p = cm; *p;) {
        size_t n = strcspn(p, " ");
        int external = n == 8 && !memcmp(p, "EXTERNAL", 8);
        if (n && (!external || (c->tls && sl_tls_peer_verified(c->tls))) &&
            mo + n + 1 < sizeof mechs) {
            if (mo)
                mechs[mo++] = ' ';
            memcpy(mechs + mo, p, n);
            mo += n;
        }
        p += n;
        while (*p == ' ')
            p++;
    }
    amqp_start_info info = {
        .information = "Sluice: AMQP 0-9-1 on an MSMQ-style queue manager",
        .full = 1,
        .cluster_name = c->b->n->cfg->node_name,
        .mechanisms = {(const uint8_t *)mechs, mo},
    };
    amqp_method m;
    sl_buf props;
    amqp_start_build(&m, &props, &info);
    broker_conn_send_method(c, 0, &m);
    sl_buf_free(&props);
    c->state = CONN_START_SENT;
}

/* A frame that would write definitions while the disk alarm is on: a durable declare, a
 * binding. The connection is then blocked before it (connection.blocked, not read) as a
 * publisher is, and the frame is handled once the alarm clears; everything else (consuming,
 * acks, transient declares, deletes and purges, which free space) goes on. */
static int waits_for_disk(const conn *c, const amqp_frame *f)
{
    if (!(c->b->n->alarms & ALARM_DISK) || f->type != AMQP_FRAME_METHOD || f->channel == 0 ||
        f->size < 4 || c->state != CONN_OPEN)
        return 0;
    uint32_t id = AMQP_ID(sl_get_u16(f->payload), sl_get_u16(f->payload + 2));
    if (id != AMQP_QUEUE_DECLARE && id != AMQP_EXCHANGE_DECLARE && id != AMQP_QUEUE_BIND &&
        id != AMQP_EXCHANGE_BIND)
        return 0;
    amqp_method m;
    if (amqp_method_decode(f->payload, f->size, &m) != AMQP_DECODE_OK)
        return 0; /* the handler reports it */
    if (id == AMQP_QUEUE_DECLARE)
        return m.u.queue_declare.durable && !m.u.queue_declare.passive;
    if (id == AMQP_EXCHANGE_DECLARE)
        return m.u.exchange_declare.durable && !m.u.exchange_declare.passive;
    return 1;
}

/* Handle the frames in p[0, len). Returns how many bytes were taken: what is left is a
 * partial frame, or input held back while the connection's output is full. Handlers copy
 * what they keep, so p may be reused once this returns. */
static size_t process_frames(conn *c, const uint8_t *p, size_t len)
{
    size_t used = 0;
    unsigned k = 0;
    while (c->state < CONN_LINGER && used < len && !c->login_wait) {
        if (out_full(c)) {
            c->out_paused = 1;
            broker_conn_update_watch(c);
            break;
        }
        /* The turn has done its share of input (a few expensive frames, e.g. publishes
         * routed through 20,000 header bindings): the rest waits for the next turn, so no
         * other connection waits behind this one for long. */
        if ((++k & 3) == 0 && node_turn_over(c->b->n)) {
            broker_input_pending(c);
            broker_conn_update_watch(c);
            break;
        }
        const uint8_t *q = p + used;
        size_t n = len - used;
        if (c->state == CONN_HEADER) {
            int r = amqp_protocol_header_check(q, n);
            if (r == 0)
                break;
            if (r < 0) {
                /* The spec: answer with the header we support, then close. */
                sl_buf_append(&c->out, amqp_protocol_header, 8);
                sl_info("closing connection %s: bad protocol header", c->name);
                enter_linger(c);
                return len;
            }
            used += 8;
            send_start(c);
            continue;
        }
        amqp_frame f;
        int r = amqp_frame_parse(q, n, c->frame_max, &f);
        if (r == AMQP_FEED_NEED_MORE)
            break;
        if (r < 0) {
            const char *why = r == AMQP_FEED_BAD_END    ? "invalid_frame_end_marker"
                              : r == AMQP_FEED_BAD_TYPE ? "unknown_frame"
                                                        : "frame_too_large";
            broker_conn_error(c, SL_ERR_FRAME, 0, "type %u, %s", q[0], why);
            return len;
        }
        c->last_recv = sl_loop_now(c->b->n->loop);
        if (waits_for_disk(c, &f)) {
            broker_block_publisher(c); /* the frame stays in the input for later */
            break;
        }
        if (held_by_alarm(c, &f))
            break; /* stays in the input; closes behind it are looked for (look_past_hold) */
        conn_handle_frame(c, &f);
        used += (size_t)r;
    }
    if (c->state >= CONN_LINGER)
        return len; /* closed: what follows the close is never acted on */
    return used;
}

/* A blocked connection's held input: a connection.close or channel.close behind the held
 * publish is acted on now (amqp/hold.h says which and why). Bounded: each pass takes a
 * frame out of the input. */
static void look_past_hold(conn *c)
{
    while (c->read_paused && c->state == CONN_OPEN && sl_buf_unread(&c->in) > 0) {
        amqp_hold_find h;
        uint8_t *p = (uint8_t *)sl_buf_head(&c->in);
        size_t len = sl_buf_unread(&c->in);
        int act = amqp_hold_scan(p, len, c->frame_max, &h);
        if (act == AMQP_HOLD_CONNECTION_CLOSE) {
            if (h.at)
                sl_info("connection %s: closed while blocked by an alarm; %zu bytes held "
                        "before connection.close given up",
                        c->name, h.at);
            sl_buf_consume(&c->in, h.at);
            size_t used = process_frames(c, sl_buf_head(&c->in), sl_buf_unread(&c->in));
            sl_buf_consume(&c->in, used);
            return;
        }
        if (act != AMQP_HOLD_CHANNEL_CLOSE)
            return;
        /* the close is copied out, its channel's held content dropped, then it is handled */
        uint8_t *close = sl_xmalloc(h.len);
        memcpy(close, p + h.at, h.len);
        c->in.len -= len - amqp_hold_drop_channel(p, len, c->frame_max, &h);
        amqp_frame f;
        if (amqp_frame_parse(close, h.len, c->frame_max, &f) == (int)h.len)
            conn_handle_frame(c, &f);
        sl_free(close);
    }
}

/* Input kept in c->in (a partial frame, or frames held back while output was full). */
static void process_buffered(conn *c)
{
    size_t used = process_frames(c, sl_buf_head(&c->in), sl_buf_unread(&c->in));
    sl_buf_consume(&c->in, used);
    look_past_hold(c);
    /* An idle connection holds no input buffer: give it back once it is empty. */
    if (sl_buf_unread(&c->in) == 0 && c->in.cap > 0)
        sl_buf_free(&c->in);
}

void broker_conn_resume_input(conn *c)
{
    if (c->state >= CONN_LINGER || c->out_paused)
        return; /* a full output buffer brings it back when it drains (resume_if_room) */
    if (sl_buf_unread(&c->in) > 0)
        process_buffered(c);
    /* Read on now (TLS plaintext left decrypted in the session when the read budget ran out
     * is not on the socket any more; and a drained socket must be seen as one, input_idle) */
    if (!c->input_pending && !hold_full(c) && !c->out_paused && !c->login_wait &&
        c->state < CONN_LINGER)
        on_readable(c);
    broker_conn_update_watch(c);
}

/* CONN_LINGER: read and discard until EOF (then the socket is closed) or EAGAIN. */
static void discard_input(conn *c, uint8_t *sink, size_t cap)
{
    for (size_t budget = CONN_READ_BUDGET; budget > 0;) {
        ssize_t n = recv(c->fd, sink, cap, 0);
        if (n > 0) {
            budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        broker_conn_kill(c, NULL); /* the client closed its side (or the socket failed): done */
        return;
    }
}

/* The loop has read all there is from c for now. Sync pacing may delay a pipelined
 * confirm's sync only while more input keeps coming (more publishes for the sync to cover):
 * a publisher that has stopped, however it decided to (a full window, a batch, its own
 * rate), is never held, so the sync its confirms wait for starts at once. */
static void input_idle(conn *c)
{
    if (c->lazy_gen) {
        node_hasten(c->b->n, c->lazy_gen);
        c->lazy_gen = 0;
    }
}

static void on_readable(conn *c)
{
    static uint8_t shared[CONN_READ_BUDGET]; /* one loop thread: one read buffer for all */
    if (c->state == CONN_LINGER) {
        discard_input(c, shared, sizeof shared);
        return;
    }
    /* A node-to-node link carries whole batches of another node's messages: a larger share
     * per turn lets one group commit cover more of them (1 KiB messages were capped near
     * 256 KiB per fsync). */
    size_t budget = c->is_link ? 4 * CONN_READ_BUDGET : CONN_READ_BUDGET;
    while (budget > 0 && c->state < CONN_LINGER && !hold_full(c) && !c->out_paused &&
           !c->input_pending && !c->login_wait) {
        /* With nothing buffered, read into the shared buffer and keep only what is left
         * of a partial frame: a connection between frames costs no buffer at all. */
        int direct = sl_buf_unread(&c->in) == 0;
        size_t cap = direct ? sizeof shared : 64 * 1024;
        size_t want = budget < cap ? budget : cap;
        if (c->read_paused && want > CONN_HOLD_MAX - sl_buf_unread(&c->in))
            want = CONN_HOLD_MAX - sl_buf_unread(&c->in); /* held input stays bounded */
        uint8_t *dst = direct ? shared : sl_buf_reserve(&c->in, want);
        ssize_t n = conn_recv(c, dst, want);
        if (n > 0) {
            budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
            if (direct) {
                size_t used = process_frames(c, shared, (size_t)n);
                if (used < (size_t)n && c->state < CONN_LINGER) {
                    sl_buf_append(&c->in, shared + used, (size_t)n - used);
                    look_past_hold(c);
                }
            } else {
                c->in.len += (size_t)n;
                process_buffered(c);
            }
            /* A short read drained the socket: another recv would only say EAGAIN, and
             * level-triggered epoll reports whatever arrives next. (TLS hands out a record
             * at a time: short reads say nothing there, read on until it would block.) */
            if ((size_t)n < want && !c->tls) {
                input_idle(c);
                return;
            }
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            input_idle(c);
            return;
        }
        broker_conn_kill(c, n == 0 ? (c->state == CONN_CLOSING ? NULL : "client closed the socket")
                                   : strerror(errno));
        return;
    }
    /* Budget used up with data possibly pending: epoll is level-triggered, so we come back;
     * but what TLS decrypted already is not on the socket any more: come back to it. */
    if (c->tls && c->state < CONN_LINGER && sl_tls_pending(c->tls) > 0)
        broker_input_pending(c);
}

void broker_conn_on_event(sl_loop *loop, sl_watch *w, int events)
{
    conn *c = w->data;
    (void)loop;
    if (c->state == CONN_DEAD)
        return; /* Writable again: flush at the end of the turn, after the group commit, never
                   before. */
    if (c->tls_handshaking) {
        tls_handshake_step(c);
        return;
    }
    if ((events & SL_EV_WRITE) || (c->tls_write_wants_read && (events & SL_EV_READ)))
        broker_mark_dirty(c);
    if ((events & (SL_EV_READ | SL_EV_ERROR)) && c->state != CONN_DEAD)
        on_readable(c);
    /* Output to flush is handled in the before-sleep hook. */
}

static void hb_timer_fn(sl_loop *loop, sl_timer *t)
{
    conn *c = t->data;
    uint64_t now = sl_loop_now(loop);
    if (c->state == CONN_CLOSING) {
        broker_conn_kill(c, "no connection.close-ok in time");
        return;
    }
    if (c->state == CONN_LINGER) {
        broker_conn_kill(c, NULL); /* the client did not close its side in time: close ours */
        return;
    }
    if (c->state < CONN_OPEN) {
        broker_conn_kill(c, "handshake timeout");
        return;
    }
    if (c->heartbeat == 0)
        return;
    uint64_t period = (uint64_t)c->heartbeat * 1000;
    if (c->read_paused || c->out_paused) {
        /* We are not reading, so the peer's heartbeats cannot be seen: the receive check is
         * suspended (RabbitMQ does the same for a blocked connection). A peer whose output
         * has not moved for two intervals is not reading at all, though: that one is gone. */
        c->last_recv = now;
        if (c->out_paused && now - c->last_send >= 2 * period) {
            broker_conn_kill(
                c, "client stopped reading: output backed up for two heartbeat intervals");
            return;
        }
    }
    /* Two silent intervals: the peer is gone. RabbitMQ drops the socket without a close. */
    if (now - c->last_recv >= 2 * period) {
        broker_conn_kill(c, "missed heartbeats from client");
        return;
    }
    if (now - c->last_send >= period / 2) {
        amqp_heartbeat_write(&c->out);
        broker_mark_dirty(c);
    }
    sl_timer_start(loop, t, now + (period / 2 > 0 ? period / 2 : 1));
}

/* ------------------------------------------------------------------------------------------
 * Handshake and channel 0
 */

static void read_client_capabilities(conn *c, amqp_bytes props)
{
    amqp_value caps;
    if (!amqp_table_get(props, "capabilities", &caps) || caps.tag != 'F')
        return;
    amqp_value v;
    if (amqp_table_get(caps.v.s, "consumer_cancel_notify", &v) && v.tag == 't')
        c->cap_cancel_notify = (uint8_t)v.v.b;
    if (amqp_table_get(caps.v.s, "connection.blocked", &v) && v.tag == 't')
        c->cap_blocked = (uint8_t)v.v.b;
    if (amqp_table_get(caps.v.s, "authentication_failure_close", &v) && v.tag == 't')
        c->cap_auth_failure_close = (uint8_t)v.v.b;
}

/* Is mech one of auth_mechanisms (and EXTERNAL only with a verified client certificate)? */
static int mechanism_offered(const conn *c, amqp_bytes mech)
{
    const char *cm =
        c->b->n->cfg->auth_mechanisms ? c->b->n->cfg->auth_mechanisms : "PLAIN AMQPLAIN";
    for (const char *p = cm; *p;) {
        size_t n = strcspn(p, " ");
        if (n == mech.len && !memcmp(p, mech.p, n))
            return !amqp_bytes_eq(mech, "EXTERNAL") || (c->tls && sl_tls_peer_verified(c->tls));
        p += n;
        while (*p == ' ')
            p++;
    }
    return 0;
}

static void login_finish(conn *c, amqp_bytes mechanism, amqp_bytes user, amqp_bytes props, sl_err e,
                         const char *why);

/* A password login (node/login.c): at once, or, when the user's hash is slow (Argon2id), on
 * the verifier's thread, the connection reading nothing more until the answer comes (the client
 * waits for tune anyway; what it sent meanwhile stays buffered). What start-ok said is kept
 * here, since its frame is gone by then. */
struct conn_login {
    node_login *check; /* the check in flight; NULL while node_login_start answers at once */
    char *mechanism;
    uint8_t *user, *props;
    size_t user_len, props_len;
};

static void conn_login_free(struct conn_login *l)
{
    if (!l)
        return;
    if (l->check)
        node_login_cancel(l->check);
    sl_free(l->mechanism);
    sl_free(l->user);
    sl_free(l->props);
    sl_free(l);
}

/* A connection that goes away while its check runs: the answer is dropped unseen. */
static void conn_login_cancel(conn *c)
{
    conn_login_free(c->login_wait);
    c->login_wait = NULL;
}

static void password_checked(void *ctx, sl_err e, const acc_user *u, const char *why)
{
    (void)u;
    conn *c = ctx;
    struct conn_login *l = c->login_wait;
    int later = l->check != NULL; /* from the verifier: reading was paused */
    l->check = NULL;
    c->login_wait = NULL; /* reading goes on: login_finish tunes or closes */
    login_finish(c, (amqp_bytes){(const uint8_t *)l->mechanism, strlen(l->mechanism)},
                 (amqp_bytes){l->user, l->user_len}, (amqp_bytes){l->props, l->props_len}, e, why);
    conn_login_free(l);
    if (later)
        broker_conn_resume_input(c);
}

static void password_login(conn *c, const amqp_connection_start_ok *s, amqp_bytes user,
                           amqp_bytes pass)
{
    struct conn_login *l = sl_xcalloc(1, sizeof *l);
    l->mechanism = sl_xstrndup((const char *)s->mechanism.p, s->mechanism.len);
    l->user = sl_xmalloc(user.len ? user.len : 1);
    memcpy(l->user, user.p, user.len);
    l->user_len = user.len;
    l->props = sl_xmalloc(s->client_properties.len ? s->client_properties.len : 1);
    memcpy(l->props, s->client_properties.p, s->client_properties.len);
    l->props_len = s->client_properties.len;
    c->login_wait = l;
    node_login *check = node_login_start(c->b->n, (const char *)user.p, user.len, pass.p, pass.len,
                                         c->loopback, password_checked, c);
    if (check) { /* answered later: l is still c's */
        l->check = check;
        broker_conn_update_watch(c);
    }
}

static void on_start_ok(conn *c, const amqp_connection_start_ok *s)
{
    read_client_capabilities(c, s->client_properties);
    amqp_bytes user = {0}, pass = {0};
    char certname[1024];
    int external = 0;
    if (!mechanism_offered(c, s->mechanism)) {
        broker_conn_error(c, SL_ERR_COMMAND_INVALID, AMQP_CONNECTION_START_OK,
                          "unknown authentication mechanism '" BYTES_FMT "'",
                          BYTES_ARG(s->mechanism));
        return;
    }
    if (amqp_bytes_eq(s->mechanism, "PLAIN")) {
        /* authzid \0 authcid \0 password */
        const uint8_t *p = s->response.p, *end = p + s->response.len;
        const uint8_t *z1 = memchr(p, 0, s->response.len);
        const uint8_t *z2 = z1 ? memchr(z1 + 1, 0, (size_t)(end - z1 - 1)) : NULL;
        if (z2) {
            user = (amqp_bytes){z1 + 1, (size_t)(z2 - z1 - 1)};
            pass = (amqp_bytes){z2 + 1, (size_t)(end - z2 - 1)};
        }
    } else if (amqp_bytes_eq(s->mechanism, "AMQPLAIN")) {
        /* A table body without its length prefix. */
        amqp_value v;
        if (amqp_table_validate(s->response) == 0) {
            if (amqp_table_get(s->response, "LOGIN", &v))
                amqp_value_str(&v, &user);
            if (amqp_table_get(s->response, "PASSWORD", &v))
                amqp_value_str(&v, &pass);
        }
    } else {
        /* EXTERNAL (rabbitmq_auth_mechanism_ssl): the user is named by the verified client
         * certificate, its common name or its whole distinguished name (the default); the
         * response (an authorization identity) is ignored, as RabbitMQ does. */
        external = 1;
        int rc = c->b->n->cfg->ssl_cert_login_cn
                     ? sl_tls_peer_cn(c->tls, certname, sizeof certname)
                     : sl_tls_peer_dn(c->tls, certname, sizeof certname);
        if (rc < 0)
            certname[0] = 0;
        user = amqp_cstr(certname);
    }
    if (!external) {
        password_login(c, s, user, pass);
        return;
    }
    const acc_user *u = NULL;
    char why[1400];
    sl_err e = acc_login_external(c->b->n->acc, (const char *)user.p, user.len, c->loopback, &u,
                                  why, sizeof why);
    login_finish(c, s->mechanism, user, s->client_properties, e, why);
}

/* The rest of start-ok once the credentials are judged: refuse, or log in and tune. */
static void login_finish(conn *c, amqp_bytes mechanism, amqp_bytes user, amqp_bytes props, sl_err e,
                         const char *why)
{
    if (e != SL_OK) {
        /* The reason goes to the log only: the client learns nothing about which part was
         * wrong (RabbitMQ's authentication_failure_close text). */
        sl_warn("connection %s: " BYTES_FMT " login refused: %s", c->name, BYTES_ARG(mechanism),
                why);
        if (c->cap_auth_failure_close) {
            char text[160];
            snprintf(text, sizeof text,
                     "ACCESS_REFUSED - Login was refused using authentication mechanism " BYTES_FMT
                     ". For details see the broker logfile.",
                     BYTES_ARG(mechanism));
            send_close(c, 403, text, 0);
            enter_closing(c);
        } else {
            broker_conn_kill(c, NULL);
        }
        return;
    }
    c->auth_mechanism = sl_xstrndup((const char *)mechanism.p, mechanism.len);
    c->user = sl_xstrndup((const char *)user.p, user.len);
    if (broker_link_recv_hello(c, props) < 0)
        return;
    if (c->is_link)
        sl_info("connection %s: a link from node %s (user '%s')", c->name, c->link_node, c->user);
    amqp_method m = {.id = AMQP_CONNECTION_TUNE};
    m.u.connection_tune.channel_max = c->b->n->cfg->channel_max;
    m.u.connection_tune.frame_max = c->b->n->cfg->frame_max;
    m.u.connection_tune.heartbeat = c->b->n->cfg->heartbeat;
    broker_conn_send_method(c, 0, &m);
    c->state = CONN_TUNE_SENT;
}

static void on_tune_ok(conn *c, const amqp_connection_tune_ok *t)
{
    const node_config *cfg = c->b->n->cfg;
    uint32_t fmax = t->frame_max;
    if (fmax == 0)
        fmax = cfg->frame_max;
    if (fmax != 0 && fmax < AMQP_FRAME_MIN_SIZE) {
        broker_conn_error(c, SL_ERR_NOT_ALLOWED, AMQP_CONNECTION_TUNE_OK,
                          "frame_max=%u < %u min size", fmax, AMQP_FRAME_MIN_SIZE);
        return;
    }
    if (cfg->frame_max != 0 && fmax > cfg->frame_max) {
        broker_conn_error(c, SL_ERR_NOT_ALLOWED, AMQP_CONNECTION_TUNE_OK,
                          "frame_max=%u > %u max size", fmax, cfg->frame_max);
        return;
    }
    uint16_t cmax = t->channel_max ? t->channel_max : cfg->channel_max;
    if (cfg->channel_max != 0 && cmax > cfg->channel_max) {
        broker_conn_error(c, SL_ERR_NOT_ALLOWED, AMQP_CONNECTION_TUNE_OK,
                          "channel_max=%u > %u max channels", cmax, cfg->channel_max);
        return;
    }
    c->frame_max = fmax;
    c->channel_max = cmax ? cmax : 65535;
    c->heartbeat = t->heartbeat;
    c->state = CONN_OPENING;
}

static void on_open(conn *c, const amqp_connection_open *o)
{
    char cwhy[600];
    if (cl_leader_refuses(c->b->n, cwhy, sizeof cwhy) < 0) {
        /* A follower does not serve (proxying to the leader is not built yet): the client is
         * told where the leader is, with 320 as RabbitMQ closes a connection it will not
         * keep, and reconnects elsewhere. */
        broker_conn_error(c, SL_ERR_CONNECTION_FORCED, AMQP_CONNECTION_OPEN, "%s", cwhy);
        return;
    }
    qm_vhost *vh = qm_vhost_find(c->b->n->qm, (const char *)o->virtual_host.p, o->virtual_host.len);
    if (!vh) {
        broker_conn_error(c, SL_ERR_NOT_ALLOWED, AMQP_CONNECTION_OPEN,
                          "vhost " BYTES_FMT " not found", BYTES_ARG(o->virtual_host));
        return;
    }
    uint32_t cap = c->b->n->cfg->connection_max;
    if (cap && c->b->n_open >= cap) {
        /* RabbitMQ's connection_max, with its words: refused at open, the socket closed. */
        c->b->n->conns_refused++;
        broker_conn_error(c, SL_ERR_NOT_ALLOWED, AMQP_CONNECTION_OPEN,
                          "connection refused: node connection limit (%u) is reached", cap);
        return;
    }
    /* RabbitMQ's order: the vhost's connection limit, the user's, then access to the vhost. */
    char why[400];
    acc_db *a = c->b->n->acc;
    const acc_vhost *av = acc_vhost_find(a, vh->name, strlen(vh->name));
    const acc_user *au = acc_user_find(a, c->user, strlen(c->user));
    sl_err e = SL_OK;
    if ((av && av->max_connections >= 0) || (au && au->max_connections >= 0))
        e = acc_check_connection_limits(
            a, c->user, vh->name, node_count_connections(c->b->n, NULL, vh->name),
            node_count_connections(c->b->n, c->user, NULL), why, sizeof why);
    if (e == SL_OK)
        e = acc_check_vhost(a, c->user, vh->name, why, sizeof why);
    if (e != SL_OK) {
        broker_conn_error(c, e, AMQP_CONNECTION_OPEN, "%s", why);
        return;
    }
    c->counted_open = 1;
    c->b->n_open++;
    c->vhost = vh;
    c->state = CONN_OPEN;
    amqp_method m = {.id = AMQP_CONNECTION_OPEN_OK};
    broker_conn_send_method(c, 0, &m);
    sl_timer_stop(c->b->n->loop, &c->hb_timer);
    if (c->heartbeat) {
        uint64_t half = (uint64_t)c->heartbeat * 500;
        sl_timer_start(c->b->n->loop, &c->hb_timer, sl_loop_now(c->b->n->loop) + (half ? half : 1));
    }
    if (c->b->n->alarms)
        broker_conn_set_blocked(c, 1);
    sl_info("connection %s: user '%s' opened vhost '%s'", c->name, c->user, vh->name);
}

static void on_channel0_method(conn *c, const amqp_method *m)
{
    switch (m->id) {
    case AMQP_CONNECTION_CLOSE:
        if (c->state != CONN_CLOSING) {
            release_channels(c);
            amqp_method ok = {.id = AMQP_CONNECTION_CLOSE_OK};
            broker_conn_send_method(c, 0, &ok);
        }
        /* Both sides closed: close-ok (or our own close) is all that is left to send. */
        enter_linger(c);
        return;
    case AMQP_CONNECTION_CLOSE_OK:
        if (c->state == CONN_CLOSING)
            enter_linger(c);
        return;
    }
    if (c->state == CONN_CLOSING)
        return; /* after close, everything but close/close-ok is discarded */
    switch (c->state) {
    case CONN_START_SENT:
        if (m->id == AMQP_CONNECTION_START_OK)
            on_start_ok(c, &m->u.connection_start_ok);
        else
            broker_conn_error(c, SL_ERR_COMMAND_INVALID, m->id, "expected 'connection.start_ok'");
        return;
    case CONN_TUNE_SENT:
        if (m->id == AMQP_CONNECTION_TUNE_OK)
            on_tune_ok(c, &m->u.connection_tune_ok);
        else
            broker_conn_error(c, SL_ERR_COMMAND_INVALID, m->id, "expected 'connection.tune_ok'");
        return;
    case CONN_OPENING:
        if (m->id == AMQP_CONNECTION_OPEN)
            on_open(c, &m->u.connection_open);
        else
            broker_conn_error(c, SL_ERR_COMMAND_INVALID, m->id, "expected 'connection.open'");
        return;
    default:
        break;
    }
    if (m->id == AMQP_CONNECTION_UPDATE_SECRET) {
        amqp_method ok = {.id = AMQP_CONNECTION_UPDATE_SECRET_OK};
        broker_conn_send_method(c, 0, &ok);
        return;
    }
    if (AMQP_ID_CLASS(m->id) == 10)
        broker_conn_error(c, SL_ERR_COMMAND_INVALID, m->id, "unexpected method %s",
                          amqp_method_name(m->id));
    else
        broker_conn_error(c, SL_ERR_CHANNEL, m->id,
                          "unexpected method in connection state running");
}

static channel *get_channel(conn *c, uint16_t id)
{
    return id < c->channels_cap ? c->channels[id] : NULL;
}

static void open_channel(conn *c, uint16_t id)
{
    if (id > c->channel_max) {
        broker_conn_error(c, SL_ERR_NOT_ALLOWED, AMQP_CHANNEL_OPEN,
                          "channel number %u is above the negotiated channel_max (%u)", id,
                          c->channel_max);
        return;
    }
    const acc_user *au = acc_user_find(c->b->n->acc, c->user, strlen(c->user));
    if (au && au->max_channels >= 0) {
        char why[300];
        if (acc_check_channel_limit(c->b->n->acc, c->user,
                                    node_count_user_channels(c->b->n, c->user), why,
                                    sizeof why) != SL_OK) {
            broker_conn_error(c, SL_ERR_NOT_ALLOWED, AMQP_CHANNEL_OPEN, "%s", why);
            return;
        }
    }
    if (id >= c->channels_cap) {
        size_t cap = c->channels_cap ? c->channels_cap : 8;
        while (cap <= id)
            cap *= 2;
        c->channels = sl_xrealloc(c->channels, cap * sizeof *c->channels);
        memset(c->channels + c->channels_cap, 0, (cap - c->channels_cap) * sizeof *c->channels);
        c->channels_cap = cap;
    }
    c->channels[id] = broker_channel_new(c, id);
    c->n_channels++;
    amqp_method ok = {.id = AMQP_CHANNEL_OPEN_OK};
    broker_conn_send_method(c, id, &ok);
}

void broker_conn_drop_channel(conn *c, uint16_t id)
{
    channel *ch = get_channel(c, id);
    if (!ch)
        return;
    broker_channel_release(ch);
    broker_channel_free(ch);
    c->channels[id] = NULL;
    c->n_channels--;
}

static void conn_handle_frame(conn *c, const amqp_frame *f)
{
    if (f->type == AMQP_FRAME_HEARTBEAT) {
        if (f->channel != 0)
            broker_conn_error(c, SL_ERR_UNEXPECTED_FRAME, 0, "type 8, heartbeat on channel %u",
                              f->channel);
        return;
    }
    if (c->state == CONN_CLOSING && (f->type != AMQP_FRAME_METHOD || f->channel != 0))
        return;
    if (f->channel == 0 || c->state < CONN_OPEN) {
        if (f->type != AMQP_FRAME_METHOD) {
            broker_conn_error(c, SL_ERR_UNEXPECTED_FRAME, 0,
                              "expected method frame, got non method frame instead");
            return;
        }
        amqp_method m;
        int r = amqp_method_decode(f->payload, f->size, &m);
        if (r == AMQP_DECODE_UNKNOWN) {
            broker_conn_error(c, SL_ERR_NOT_IMPLEMENTED, 0, "unknown method");
            return;
        }
        if (r == AMQP_DECODE_BAD_UTF8) {
            broker_conn_error(c, SL_ERR_FRAME, 0, "Malformed UTF-8 in shortstr");
            return;
        }
        if (r != AMQP_DECODE_OK) {
            broker_conn_error(c, SL_ERR_SYNTAX, 0, "malformed method frame");
            return;
        }
        if (f->channel != 0) {
            broker_conn_error(c, SL_ERR_CHANNEL, m.id, "expected 'connection.open'");
            return;
        }
        on_channel0_method(c, &m);
        return;
    }
    channel *ch = get_channel(c, f->channel);
    if (!ch) {
        amqp_method m;
        if (f->type == AMQP_FRAME_METHOD && amqp_method_decode(f->payload, f->size, &m) == 0 &&
            m.id == AMQP_CHANNEL_OPEN) {
            open_channel(c, f->channel);
            return;
        }
        if (f->type == AMQP_FRAME_METHOD && f->size >= 4 &&
            AMQP_ID(sl_get_u16(f->payload), sl_get_u16(f->payload + 2)) == AMQP_CHANNEL_CLOSE_OK)
            return; /* a late close-ok for a channel already gone */
        broker_conn_error(c, SL_ERR_CHANNEL, 0, "expected 'channel.open' on channel %u",
                          f->channel);
        return;
    }
    broker_channel_on_frame(ch, f);
}
