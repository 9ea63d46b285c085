/* test_out_refs.c - unit tests for src/broker/out_refs.c, a connection's output with message
 * bodies sent by reference between its bytes: over a seeded random schedule of frame bytes,
 * referenced bodies, and writes cut at random lengths (the avail bound, as held output cuts them)
 * or by a full socket, the reader gets exactly the stream that was queued, in order; every
 * message reference is given back once its bytes are out, or when the output is dropped.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker/broker.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static qm_message *msg_of(uint32_t len, uint8_t seed)
{
    static const uint8_t props[2] = {0, 0};
    qm_message *m = qm_message_new(AMQP_BYTES(""), AMQP_BYTES("q"), props, 2, len);
    for (uint32_t i = 0; i < len; i++)
        qm_msg_body(m)[i] = (uint8_t)(seed + i * 31);
    return m;
}

typedef struct peer {
    int fd;
    sl_buf got;
} peer;

static void drain(peer *p)
{
    for (;;) {
        ssize_t n = recv(p->fd, sl_buf_reserve(&p->got, 65536), 65536, 0);
        if (n <= 0) {
            ck_assert(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
            return;
        }
        p->got.len += (size_t)n;
    }
}

/* One write of at most avail bytes of c's output; the peer reads when the socket is full. */
static void write_some(conn *c, peer *p, size_t avail)
{
    if (avail > broker_out_len(c))
        avail = broker_out_len(c);
    if (avail == 0)
        return;
    ssize_t n = c->out_refs_len ? broker_out_sendv(c, avail)
                                : send(c->fd, sl_buf_head(&c->out), avail, MSG_NOSIGNAL);
    if (n < 0) {
        ck_assert(errno == EAGAIN || errno == EWOULDBLOCK);
        drain(p);
        return;
    }
    ck_assert_uint_le((size_t)n, avail);
    broker_out_consume(c, (size_t)n);
    c->out_sent += (uint64_t)n;
}

static void setup(conn *c, peer *p)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int small = 4096; /* the kernel doubles it; writes stop in the middle of bodies */
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    memset(c, 0, sizeof *c);
    c->fd = sv[0];
    sl_buf_init(&c->out);
    p->fd = sv[1];
    sl_buf_init(&p->got);
}

static void teardown(conn *c, peer *p)
{
    broker_out_free(c);
    sl_buf_free(&c->out);
    sl_buf_free(&p->got);
    close(c->fd);
    close(p->fd);
}

START_TEST(the_stream_arrives_whole_whatever_cuts_the_writes)
{
    rng = 0x9e3779b97f4a7c15ull + (uint64_t)_i;
    conn c;
    peer p;
    setup(&c, &p);
    sl_buf want;
    sl_buf_init(&want);
    qm_message *watched = NULL;
    for (int i = 0; i < 2000; i++) {
        uint8_t head[64];
        uint32_t hl = rnd(3) ? rnd(sizeof head) : 0; /* bodies back to back too */
        for (uint32_t k = 0; k < hl; k++)
            head[k] = (uint8_t)rnd(256);
        sl_buf_append(&c.out, head, hl);
        sl_buf_append(&want, head, hl);
        if (rnd(4)) {
            uint32_t len = 1 + rnd(rnd(8) ? 3000 : 70000);
            qm_message *m = msg_of(len, (uint8_t)i);
            broker_out_ref(&c, m, qm_msg_body(m), len);
            sl_buf_append(&want, qm_msg_body(m), len);
            if (!watched && i > 100) {
                watched = m; /* kept: its count says when the output let go */
                ck_assert_uint_eq(m->refs, 2);
            } else {
                qm_message_unref(m); /* the output's reference alone keeps it */
            }
        }
        if (rnd(10) == 0)
            write_some(&c, &p, 1 + rnd(rnd(2) ? 100 : 300000));
    }
    for (int guard = 0; broker_out_len(&c) > 0; guard++) {
        ck_assert_int_lt(guard, 10000000);
        write_some(&c, &p, 1 + rnd(rnd(2) ? 700 : 500000));
    }
    drain(&p);
    ck_assert_uint_eq(c.out_refs_len, 0);
    ck_assert_uint_eq(c.out_ref_bytes, 0);
    ck_assert_uint_eq(c.out_sent, sl_buf_unread(&want));
    ck_assert_uint_eq(sl_buf_unread(&p.got), sl_buf_unread(&want));
    ck_assert(!memcmp(sl_buf_head(&p.got), sl_buf_head(&want), sl_buf_unread(&want)));
    ck_assert_ptr_nonnull(watched);
    ck_assert_uint_eq(watched->refs, 1);
    qm_message_unref(watched);
    sl_buf_free(&want);
    teardown(&c, &p);
}
END_TEST

START_TEST(dropped_output_gives_every_reference_back)
{
    conn c;
    peer p;
    setup(&c, &p);
    qm_message *m[100];
    for (int i = 0; i < 100; i++) {
        sl_buf_append(&c.out, "hdr", 3);
        m[i] = msg_of(600 + (uint32_t)i, (uint8_t)i);
        broker_out_ref(&c, m[i], qm_msg_body(m[i]), m[i]->body_len);
    }
    sl_buf_append(&c.out, "end", 3);
    write_some(&c, &p, 5000); /* some out, one body cut in the middle */
    ck_assert_uint_eq(broker_out_len(&c) + c.out_sent, 100 * 3 + 3 + 100 * 600 + 99 * 50);
    broker_out_drop(&c);
    ck_assert_uint_eq(broker_out_len(&c), 0);
    ck_assert_uint_eq(c.out_refs_len, 0);
    for (int i = 0; i < 100; i++) {
        ck_assert_uint_eq(m[i]->refs, 1);
        qm_message_unref(m[i]);
    }
    /* the output goes on from there: new bytes and bodies after the drop */
    sl_buf_append(&c.out, "x", 1);
    qm_message *n = msg_of(1000, 7);
    broker_out_ref(&c, n, qm_msg_body(n), 1000);
    qm_message_unref(n);
    uint64_t sent0 = c.out_sent;
    for (int guard = 0; broker_out_len(&c) > 0; guard++) {
        ck_assert_int_lt(guard, 100000);
        write_some(&c, &p, 1 + rnd(400));
    }
    ck_assert_uint_eq(c.out_sent - sent0, 1001);
    teardown(&c, &p);
}
END_TEST

/* More bodies than one sendmsg's iovec array takes, all small enough for the socket to take the
 * whole write: the bytes after the last body that fit must wait for the next write. */
START_TEST(more_bodies_than_one_write_takes)
{
    conn c;
    peer p;
    setup(&c, &p);
    int big = 1 << 20;
    setsockopt(c.fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    sl_buf want;
    sl_buf_init(&want);
    for (int i = 0; i < 1000; i++) {
        char head[16];
        int hl = snprintf(head, sizeof head, "<%d>", i);
        sl_buf_append(&c.out, head, (size_t)hl);
        sl_buf_append(&want, head, (size_t)hl);
        qm_message *m = msg_of(20, (uint8_t)i);
        broker_out_ref(&c, m, qm_msg_body(m), 20);
        sl_buf_append(&want, qm_msg_body(m), 20);
        qm_message_unref(m);
    }
    sl_buf_append(&c.out, "tail", 4);
    sl_buf_append(&want, "tail", 4);
    for (int guard = 0; broker_out_len(&c) > 0; guard++) {
        ck_assert_int_lt(guard, 1000);
        write_some(&c, &p, broker_out_len(&c));
    }
    drain(&p);
    ck_assert_uint_eq(sl_buf_unread(&p.got), sl_buf_unread(&want));
    ck_assert(!memcmp(sl_buf_head(&p.got), sl_buf_head(&want), sl_buf_unread(&want)));
    sl_buf_free(&want);
    teardown(&c, &p);
}
END_TEST

static Suite *out_refs_suite(void)
{
    Suite *s = suite_create("out_refs");
    TCase *tc = tcase_create("out_refs");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, the_stream_arrives_whole_whatever_cuts_the_writes, 0, 4);
    tcase_add_test(tc, dropped_output_gives_every_reference_back);
    tcase_add_test(tc, more_bodies_than_one_write_takes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(out_refs_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
