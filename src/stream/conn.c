/* conn.c - one stream protocol connection's bytes: the socket (plain, or TLS on
 * listeners.stream.ssl), frames in through an sp_feeder, answers out through a buffer, the
 * timer (handshake deadline, heartbeats, the wait for a Close's answer), and how it ends.
 *
 * Invariants:
 * - never blocks: every read and write is non-blocking and bounded per event (STREAM_READS);
 * - input is bounded: frames are handled as they arrive and the feeder refuses, from their 4
 *   size octets, frames over the limit (SP_INITIAL_FRAME_MAX until Open, the tuned frame_max
 *   after), so a connection holds at most one frame plus one read; reading stops while more
 *   than STREAM_OUT_MAX of answers wait to be written (a client that does not read);
 * - a framing or decoding error ends that connection only: Close with FRAME_TOO_LARGE or
 *   UNKNOWN_FRAME (as RabbitMQ's reader answers); after a frame that does not decode the door
 *   waits for the Close's answer (STREAM_CLOSE_WAIT_MS at most), after a size it refused (the
 *   stream cannot be followed) it closes once the Close is written;
 * - a killed connection is closed at once and freed at the end of the turn (door.c).
 */
#include "stream/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "net/tls.h"

#define STREAM_READ_CHUNK (64u * 1024)
#define STREAM_READS 16 /* reads per readiness event: the rest waits for the next turn */

static void on_io(sl_loop *loop, sl_watch *w, int events);
static void on_timer(sl_loop *loop, sl_timer *t);

stream_conn *stream_conn_new(stream_door *d, int fd, const struct sockaddr_storage *ss, int tls)
{
    stream_conn *c = sl_xcalloc(1, sizeof *c);
    c->d = d;
    c->id = node_client_id(d->n); /* unique over every door: the API lists them together */
    c->fd = fd;
    c->w = (sl_watch){.fd = fd, .fn = on_io, .data = c};
    sl_timer_init(&c->timer, on_timer, c);
    sp_feeder_init(&c->in, SP_INITIAL_FRAME_MAX);
    sl_buf_init(&c->out);
    /* a cluster member's proxied connection comes from loopback but is not local */
    c->loopback = (uint8_t)node_peer_describe(d->n, ss, c->peer, sizeof c->peer);
    snprintf(c->name, sizeof c->name, "%s -> %s:%d", c->peer, tls ? d->tls_addr : d->addr,
             tls ? d->tls_port : d->port);
    c->started = c->last_recv = c->last_send = sl_loop_now(d->n->loop);
    c->state = SC_PEER;
    if (tls) {
        c->tls = sl_tls_new(d->tls_ctx, fd, NULL);
        if (!c->tls) {
            sl_warn("stream connection %s: cannot start TLS (out of memory)", c->name);
            stream_conn_free(c); /* closes fd */
            return NULL;
        }
        c->state = SC_TLS;
    }
    return c;
}

void stream_conn_free(stream_conn *c)
{
    stream_login_cancel(c);
    stream_subs_free(c);
    stream_publishers_free(c);
    sl_timer_stop(c->d->n->loop, &c->timer);
    if (c->tls)
        sl_tls_free(c->tls);
    if (c->fd >= 0)
        close(c->fd);
    sp_feeder_free(&c->in);
    sl_buf_free(&c->out);
    stream_props_free(c->props, c->n_props);
    sl_free(c->user);
    sl_free(c->vhost);
    sl_free(c);
}

void stream_conn_kill(stream_conn *c, const char *why)
{
    if (c->state == SC_DEAD)
        return;
    if (why)
        sl_info("stream connection %s closed: %s", c->name, why);
    stream_login_cancel(c);
    sl_timer_stop(c->d->n->loop, &c->timer);
    sl_loop_unwatch(c->d->n->loop, &c->w);
    if (c->tls) {
        if (c->state != SC_TLS && !c->shut_wr)
            sl_tls_shutdown(c->tls); /* close_notify, best effort */
        sl_tls_free(c->tls);
        c->tls = NULL;
    }
    close(c->fd);
    c->fd = -1;
    c->state = SC_DEAD;
    stream_subs_free(c); /* off their queues now: the engine's dispatch never sees a dead one */
    stream_door_retire(c->d, c);
}

/* ---- output ---- */

void stream_conn_send(stream_conn *c, const sp_cmd *cmd)
{
    if (c->state == SC_DEAD || c->state == SC_LINGER)
        return;
    /* Answers are not held to the peer's frame_max: a client that tuned below the size of
     * an answer it asked for still gets it (RabbitMQ's answers are not checked either). */
    sl_err e = sp_cmd_encode(&c->out, cmd, 0);
    if (e != SL_OK)
        sl_warn("stream connection %s: cannot encode %s: %s", c->name, sp_key_name(cmd->key),
                sl_err_get(e)->name);
}

static ssize_t conn_send(stream_conn *c, const void *p, size_t n)
{
    if (c->tls) {
        ssize_t r = sl_tls_write(c->tls, p, n);
        c->tls_write_wants_read = r < 0 && errno == EAGAIN && (sl_tls_wants(c->tls) & SL_EV_READ);
        return r;
    }
    return send(c->fd, p, n, MSG_NOSIGNAL);
}

static ssize_t conn_recv(stream_conn *c, void *p, size_t n)
{
    if (c->tls)
        return sl_tls_read(c->tls, p, n);
    return recv(c->fd, p, n, 0);
}

/* Is input read (and handled) now? Not during a slow login (its answer comes first), not
 * while the client leaves our answers unread. A lingering or closing connection reads to
 * see the client's EOF or Close. */
static int reading(const stream_conn *c)
{
    if (c->state == SC_DEAD || c->state == SC_TLS || c->state == SC_LOGIN_WAIT)
        return 0;
    /* a resource alarm: a connection with publishers is not read, as RabbitMQ's stream reader
     * blocks them (what it sent stays in the socket and the feeder until the alarm clears) */
    if (c->state == SC_OPEN && c->n_pubs && c->d->blocked)
        return 0;
    if (c->dur_wait && c->state == SC_OPEN)
        return 0; /* an answer waits for the disk (stream_reply_durable): the next frames too */
    return c->state >= SC_CLOSING || sl_buf_unread(&c->out) < STREAM_OUT_MAX;
}

static void update_watch(stream_conn *c)
{
    if (c->state == SC_DEAD)
        return;
    int ev;
    if (c->state == SC_TLS) {
        ev = sl_tls_wants(c->tls) ? sl_tls_wants(c->tls) : SL_EV_READ;
    } else {
        ev = reading(c) ? SL_EV_READ : 0;
        if (sl_buf_unread(&c->out))
            ev |= c->tls_write_wants_read ? SL_EV_READ : SL_EV_WRITE;
    }
    if (ev != c->w.events && sl_loop_watch(c->d->n->loop, &c->w, ev) < 0)
        stream_conn_kill(c, "cannot watch the socket");
}

void stream_conn_flush(stream_conn *c)
{
    if (c->state == SC_DEAD || c->state == SC_TLS)
        return;
    while (sl_buf_unread(&c->out)) {
        ssize_t n = conn_send(c, sl_buf_head(&c->out), sl_buf_unread(&c->out));
        if (n > 0) {
            sl_buf_consume(&c->out, (size_t)n);
            c->last_send = sl_loop_now(c->d->n->loop);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        stream_conn_kill(c, c->state >= SC_CLOSING ? NULL : "write failed");
        return;
    }
    sl_buf_compact(&c->out);
    /* subscriptions stopped for a full output go on from the timer once it has room */
    if (c->sub_wait && c->state == SC_OPEN && sl_buf_unread(&c->out) < STREAM_OUT_MAX / 2)
        stream_conn_rearm(c);
    if (c->state == SC_LINGER && c->close_answered && !sl_buf_unread(&c->out)) {
        stream_conn_kill(c, NULL); /* the client read our Close: nothing is left to wait for */
        return;
    }
    if (c->state == SC_LINGER && !c->shut_wr && !sl_buf_unread(&c->out)) {
        /* Everything said: the client reads the last answer, then (close_notify and) EOF. */
        if (c->tls)
            sl_tls_shutdown(c->tls);
        shutdown(c->fd, SHUT_WR);
        c->shut_wr = 1;
    }
    update_watch(c);
}

/* ---- closing ---- */

void stream_conn_close(stream_conn *c, uint16_t code, const char *reason)
{
    if (c->state >= SC_CLOSING)
        return;
    sl_info("stream connection %s: closing it: %s (%s)", c->name, reason, sp_code_name(code));
    stream_login_cancel(c);
    sp_cmd m = {.key = SP_CLOSE, .version = 1, .corr = ++c->next_corr};
    m.u.close.closing_code = code;
    m.u.close.reason = sp_cstr(reason);
    stream_conn_send(c, &m);
    c->state = SC_CLOSING;
    c->deadline = sl_loop_now(c->d->n->loop) + STREAM_CLOSE_WAIT_MS;
    stream_conn_rearm(c);
}

void stream_conn_linger(stream_conn *c, const char *why)
{
    if (c->state >= SC_LINGER)
        return;
    if (why)
        sl_info("stream connection %s closed: %s", c->name, why);
    stream_login_cancel(c);
    c->state = SC_LINGER;
    c->deadline = sl_loop_now(c->d->n->loop) + STREAM_CLOSE_WAIT_MS;
    stream_conn_rearm(c);
}

/* ---- input ---- */

/* Whole frames from the feeder, each decoded and handled, while the state takes input. */
static void handle_frames(stream_conn *c)
{
    c->held = 0;
    while (c->state < SC_LINGER) {
        if (!reading(c)) {
            c->held = 1; /* frames may wait in the feeder: stream_conn_resume */
            return;
        }
        sp_frame f;
        int got = 0;
        sl_err e = sp_feeder_next(&c->in, &f, &got);
        if (e != SL_OK) {
            /* The byte stream cannot be followed any more, so no answer to our Close could be
             * read either: tell the client why, then close once that is written. */
            stream_conn_close(c, sp_code_for_err(e),
                              e == SL_ERR_CONTENT_TOO_LARGE ? "frame too large"
                                                            : "malformed frame");
            stream_conn_linger(c, NULL);
            return;
        }
        if (!got)
            return;
        sp_cmd m;
        e = sp_cmd_decode(f.body, f.size, &m);
        if (e != SL_OK) {
            if (c->state == SC_CLOSING)
                continue; /* what follows our Close is thrown away but its Close answer */
            char why[80];
            snprintf(why, sizeof why, "malformed or unknown frame (key 0x%04x version %u)",
                     f.key | (f.response ? SP_RESPONSE_FLAG : 0), f.version);
            stream_conn_close(c, sp_code_for_err(e), why);
            return;
        }
        stream_handle(c, &m);
        sp_cmd_free(&m);
    }
}

static void on_readable(stream_conn *c)
{
    static uint8_t buf[STREAM_READ_CHUNK]; /* one loop thread: one read buffer for all */
    for (int i = 0; i < STREAM_READS && reading(c); i++) {
        ssize_t n = conn_recv(c, buf, sizeof buf);
        if (n > 0) {
            c->last_recv = sl_loop_now(c->d->n->loop);
            /* lingering (after a framing error too), input is only thrown away */
            if (c->state != SC_LINGER) {
                sp_feeder_push(&c->in, buf, (size_t)n);
                handle_frames(c);
            }
            if ((size_t)n < sizeof buf && !c->tls)
                break; /* drained: level-triggered epoll says when more comes */
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        stream_conn_kill(c, n < 0                    ? strerror(errno)
                            : c->state >= SC_CLOSING ? NULL
                                                     : "closed by the peer");
        return;
    }
    stream_conn_flush(c);
    /* Handling stopped at a full output that this flush then wrote out whole: the frames
     * still in the feeder go now, no socket event would bring them. */
    if (c->state != SC_DEAD)
        stream_conn_resume(c);
    /* What TLS decrypted already is not on the socket any more: come back to it soon. */
    if (c->state != SC_DEAD && c->tls && reading(c) && sl_tls_pending(c->tls))
        sl_timer_start(c->d->n->loop, &c->timer, sl_loop_now(c->d->n->loop));
}

void stream_conn_resume(stream_conn *c)
{
    /* Each round writes up to STREAM_OUT_MAX of answers; when the client reads as fast, the
     * rest goes on from the timer, at once, so one client does not hold the loop. */
    for (int i = 0; i < 4 && c->held && reading(c) && c->state < SC_LINGER; i++) {
        handle_frames(c);
        stream_conn_flush(c);
    }
    if (c->state != SC_DEAD && c->held && reading(c) && c->state < SC_LINGER)
        sl_timer_start(c->d->n->loop, &c->timer, sl_loop_now(c->d->n->loop));
}

/* The TLS handshake; once done the connection waits for PeerProperties. */
static void tls_step(stream_conn *c)
{
    int r = sl_tls_handshake(c->tls);
    if (r < 0) {
        sl_warn("stream connection %s: TLS handshake failed: %s", c->name, sl_tls_error(c->tls));
        stream_conn_kill(c, NULL);
        return;
    }
    if (r == 0) {
        update_watch(c);
        return;
    }
    c->state = SC_PEER;
    c->started = sl_loop_now(c->d->n->loop); /* the stream handshake's own deadline from here */
    stream_conn_rearm(c);
    on_readable(c); /* PeerProperties may have come with the last handshake flight */
}

static void on_io(sl_loop *loop, sl_watch *w, int events)
{
    stream_conn *c = w->data;
    if (c->state == SC_TLS) {
        tls_step(c);
        return;
    }
    if ((events & SL_EV_WRITE) || (c->tls_write_wants_read && (events & SL_EV_READ)))
        stream_conn_flush(c);
    if (c->state == SC_DEAD)
        return;
    stream_conn_resume(c); /* answers drained below the mark: buffered frames go first */
    if (c->state != SC_DEAD && (events & (SL_EV_READ | SL_EV_ERROR)))
        on_readable(c);
}

/* ---- the timer ---- */

void stream_conn_rearm(stream_conn *c)
{
    if (c->state == SC_DEAD)
        return;
    const node_config *cfg = c->d->n->cfg;
    uint64_t due;
    if (c->state == SC_TLS)
        due = c->started + cfg->ssl_handshake_timeout_ms;
    else if (c->state < SC_OPEN)
        due = c->started + cfg->handshake_timeout_ms;
    else if (c->state == SC_OPEN && c->heartbeat) {
        uint64_t half = (uint64_t)c->heartbeat * 500;
        due = sl_loop_now(c->d->n->loop) + (half ? half : 1);
    } else if (c->state == SC_OPEN)
        due = 0;
    else
        due = c->deadline;
    if (c->held && reading(c) && c->state < SC_LINGER)
        due = sl_loop_now(c->d->n->loop); /* frames wait in the feeder: stream_conn_resume */
    uint64_t rq = c->state == SC_OPEN ? stream_requests_due(c) : 0;
    if (rq && (!due || rq < due))
        due = rq; /* a ConsumerUpdate's answer is due */
    if (c->sub_wait && c->state == SC_OPEN && sl_buf_unread(&c->out) < STREAM_OUT_MAX / 2) {
        /* deliveries wait for room, or for a new subscription's start: stream_subs_pump */
        uint64_t now = sl_loop_now(c->d->n->loop);
        uint64_t at = c->sub_at > now ? c->sub_at : now;
        if (!due || at < due)
            due = at;
    }
    if (due)
        sl_timer_start(c->d->n->loop, &c->timer, due);
    else
        sl_timer_stop(c->d->n->loop, &c->timer);
    update_watch(c);
}

static void on_timer(sl_loop *loop, sl_timer *t)
{
    stream_conn *c = t->data;
    uint64_t now = sl_loop_now(loop);
    stream_conn_resume(c); /* frames held for a full output (may arm the timer for now) */
    if (c->state == SC_DEAD)
        return;
    if (c->sub_wait && c->state == SC_OPEN && sl_buf_unread(&c->out) < STREAM_OUT_MAX / 2 &&
        now >= c->sub_at) {
        stream_subs_pump(c);
        stream_conn_flush(c);
        if (c->state == SC_DEAD)
            return;
    }
    if (c->tls && c->state != SC_TLS && reading(c) && sl_tls_pending(c->tls)) {
        on_readable(c);
        if (c->state == SC_DEAD)
            return;
    }
    switch (c->state) {
    case SC_TLS:
        if (now >= c->started + c->d->n->cfg->ssl_handshake_timeout_ms) {
            stream_conn_kill(c, "TLS handshake timeout");
            return;
        }
        break;
    case SC_OPEN:
        if (stream_requests_expire(c, now)) {
            stream_conn_flush(c);
            if (c->state == SC_DEAD)
                return;
            break;
        }
        if (c->heartbeat) {
            uint64_t period = (uint64_t)c->heartbeat * 1000;
            /* two silent intervals: the peer is gone (RabbitMQ drops the socket) */
            if (now - c->last_recv >= 2 * period) {
                stream_conn_kill(c, "missed heartbeats from the client");
                return;
            }
            if (now - c->last_send >= period / 2) {
                sp_cmd hb = {.key = SP_HEARTBEAT, .version = 1};
                stream_conn_send(c, &hb);
                stream_conn_flush(c);
                if (c->state == SC_DEAD)
                    return;
            }
        }
        break;
    case SC_CLOSING:
    case SC_LINGER:
        if (now >= c->deadline) {
            stream_conn_kill(c, c->state == SC_CLOSING ? "no answer to Close in time" : NULL);
            return;
        }
        break;
    case SC_DEAD:
        return;
    default: /* the stream handshake */
        if (now >= c->started + c->d->n->cfg->handshake_timeout_ms) {
            stream_conn_kill(c, "handshake timeout");
            return;
        }
        break;
    }
    stream_conn_rearm(c);
}
