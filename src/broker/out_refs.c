/* out_refs.c - a connection's output as its byte buffer (c->out) with message bodies sent by
 * reference between those bytes: a delivery's body goes from the message to the socket in one
 * writev (sendmsg) instead of being copied into c->out first (issue 46: the copies a body takes
 * from socket to socket).
 *
 * The logical output stream is c->out's bytes with each reference's bytes inserted before the
 * out byte at its .at (an offset counted in out's own bytes since the connection opened, so it
 * survives consuming and compacting c->out). References are kept in order in a ring; each holds
 * a reference to its message (qm_message_ref), so a message acked, purged or paged out before
 * its bytes left still has them. out_ref_bytes is the referenced bytes not sent yet, so
 * broker_out_len (bytes + references) is what flow control and the held-output marks count.
 *
 * Only plain TCP: TLS encrypts from one buffer (sl_tls_write), so a TLS connection copies as
 * before. Bodies under BROKER_BODY_REF_MIN are copied too: for them a copy costs less than the
 * two iovec entries and the message reference.
 */
#include "broker/broker.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/mem.h"

/* iovec entries per sendmsg: two per referenced body, so up to ~127 deliveries a call (127 KiB
 * of 1 KiB bodies); on the stack, 4 KiB. */
#define OUT_IOV 256

int broker_out_can_ref(const conn *c, uint64_t body_len)
{
    return !c->tls && body_len >= BROKER_BODY_REF_MIN && body_len <= UINT32_MAX;
}

void broker_out_ref(conn *c, qm_message *m, const uint8_t *p, uint32_t len)
{
    if (len == 0)
        return;
    if (c->out_refs_len == c->out_refs_cap) {
        uint32_t cap = c->out_refs_cap ? c->out_refs_cap * 2 : 64;
        broker_out_ref_t *r = sl_xmalloc(cap * sizeof *r);
        for (uint32_t i = 0; i < c->out_refs_len; i++)
            r[i] = c->out_refs[(c->out_refs_head + i) & (c->out_refs_cap - 1)];
        sl_free(c->out_refs);
        c->out_refs = r;
        c->out_refs_cap = cap;
        c->out_refs_head = 0;
    }
    broker_out_ref_t *r =
        &c->out_refs[(c->out_refs_head + c->out_refs_len) & (c->out_refs_cap - 1)];
    r->at = c->out_consumed + sl_buf_unread(&c->out);
    r->m = m;
    r->p = p;
    r->len = len;
    qm_message_ref(m);
    c->out_refs_len++;
    c->out_ref_bytes += len;
}

static broker_out_ref_t *ref_at(conn *c, uint32_t i)
{
    return &c->out_refs[(c->out_refs_head + i) & (c->out_refs_cap - 1)];
}

static void pop_ref(conn *c)
{
    broker_out_ref_t *r = ref_at(c, 0);
    c->out_ref_bytes -= r->len;
    qm_message_unref(r->m);
    c->out_refs_head = (c->out_refs_head + 1) & (c->out_refs_cap - 1);
    c->out_refs_len--;
}

ssize_t broker_out_sendv(conn *c, size_t avail)
{
    struct iovec iov[OUT_IOV];
    int n = 0;
    const uint8_t *base = sl_buf_head(&c->out);
    size_t bytes = sl_buf_unread(&c->out), boff = 0, left = avail;
    uint32_t i = 0;
    for (; i < c->out_refs_len && left > 0 && n < OUT_IOV - 2; i++) {
        broker_out_ref_t *r = ref_at(c, i);
        size_t upto = (size_t)(r->at - c->out_consumed); /* out bytes before this body */
        if (upto > boff) {
            size_t k = upto - boff < left ? upto - boff : left;
            iov[n++] = (struct iovec){(void *)(base + boff), k};
            boff += k;
            left -= k;
            if (left == 0)
                break;
        }
        size_t k = r->len < left ? r->len : left;
        iov[n++] = (struct iovec){(void *)r->p, k};
        left -= k;
    }
    /* out's bytes after the last body, only when every body is in (else they come later) */
    if (i == c->out_refs_len && left > 0 && boff < bytes) {
        size_t k = bytes - boff < left ? bytes - boff : left;
        iov[n++] = (struct iovec){(void *)(base + boff), k};
    }
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    return sendmsg(c->fd, &mh, MSG_NOSIGNAL);
}

void broker_out_consume(conn *c, size_t n)
{
    while (n > 0) {
        if (c->out_refs_len == 0) {
            sl_buf_consume(&c->out, n);
            c->out_consumed += n;
            return;
        }
        broker_out_ref_t *r = ref_at(c, 0);
        size_t before = (size_t)(r->at - c->out_consumed);
        if (before > 0) {
            size_t k = before < n ? before : n;
            sl_buf_consume(&c->out, k);
            c->out_consumed += k;
            n -= k;
            continue;
        }
        size_t k = r->len < n ? r->len : n;
        r->p += k;
        r->len -= (uint32_t)k;
        c->out_ref_bytes -= k;
        n -= k;
        if (r->len == 0)
            pop_ref(c);
    }
}

void broker_out_drop(conn *c)
{
    c->out_consumed += sl_buf_unread(&c->out);
    sl_buf_consume(&c->out, sl_buf_unread(&c->out));
    while (c->out_refs_len > 0)
        pop_ref(c);
}

void broker_out_free(conn *c)
{
    broker_out_drop(c);
    sl_free(c->out_refs);
    c->out_refs = NULL;
    c->out_refs_cap = 0;
    c->out_refs_head = 0;
}
