"""Deliveries whose body goes from the message to the socket by reference (src/broker/out_refs.c,
issue 46): bodies of 512 bytes or more in one frame are not copied into the connection's output
buffer but written with sendmsg between the frames around them. What must hold whatever the
socket does: every delivery's bytes exactly as published, in order, including when a write
stops in the middle of a body (a consumer that reads slowly, so the broker's socket fills), when
the message is settled (no-ack) or its queue purged before the bytes left, next to bodies copied
as before (small ones, multi-frame ones), and for persistent messages whose deliveries wait for
the disk."""

import socket
import struct

import amqpraw
from amqpraw import FRAME_BODY, FRAME_HEADER, FRAME_METHOD

from helpers import declare_queue, publish

# sizes around the threshold (512), one frame's payload at the negotiated frame_max
# (131072 - 8), multi-frame bodies, and the empty body (no body frame at all)
SIZES = [0, 16, 511, 512, 513, 1024, 4000, 131064, 131065, 300000]


def body_of(i, size):
    stamp = b"%08d:" % i
    return (stamp * (size // len(stamp) + 1))[:size]


def read_deliveries(raw, n, timeout=20.0):
    """n basic.deliver contents from raw, as (delivery tag, body) in arrival order, read a few
    KiB at a time so the broker's writes stop and resume mid-stream."""
    out = []
    while len(out) < n:
        f = raw.read_frame(timeout=timeout)
        if f.type != FRAME_METHOD:
            continue
        m = amqpraw.decode_method(f)
        assert m.name == "basic.deliver", m
        h = raw.read_frame(timeout=timeout)
        assert h.type == FRAME_HEADER
        size = struct.unpack(">Q", h.payload[4:12])[0]
        body = b""
        while len(body) < size:
            b = raw.read_frame(timeout=timeout)
            assert b.type == FRAME_BODY, b
            body += b.payload
        assert len(body) == size
        out.append((m.delivery_tag, body))
    return out


def slow_consumer(broker, q, no_ack):
    raw = broker.raw()
    # a small window (and the sender's small starting buffer): sends stop mid-body
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    raw.rpc(1, "channel.open")
    raw.rpc(1, "basic.consume", queue=q, consumer_tag="c", no_local=False, no_ack=no_ack,
            exclusive=False, nowait=False, arguments={})
    return raw


def check(got, expected):
    assert len(got) == len(expected)
    for k, ((tag, body), want) in enumerate(zip(got, expected)):
        assert tag == k + 1
        assert len(body) == len(want), "delivery %d: %d bytes, want %d" % (k, len(body), len(want))
        assert body == want, "delivery %d: bytes differ" % k


def test_bodies_by_reference_arrive_whole_and_in_order(broker, conn, ch):
    q = declare_queue(ch, exclusive=False)
    expected = []
    for rnd in range(3):
        for s in SIZES:
            b = body_of(len(expected), s)
            publish(ch, "", q, b, confirm=True)
            expected.append(b)
    raw = slow_consumer(broker, q, no_ack=False)
    check(read_deliveries(raw, len(expected)), expected)


def test_settled_before_sent_no_ack_and_purge(broker, conn, ch):
    """no-ack settles each message as it is written to the output; the reference keeps its
    bytes until they are sent. Then the queue is purged and deleted with bytes still queued."""
    q = declare_queue(ch, exclusive=False)
    expected = [body_of(i, 700 + (i % 5) * 300) for i in range(3000)]  # ~4 MiB
    for b in expected:
        publish(ch, "", q, b)
    publish(ch, "", q, b"last", confirm=True)
    expected.append(b"last")
    raw = slow_consumer(broker, q, no_ack=True)
    got = read_deliveries(raw, 10)  # some now: the rest is queued behind a full socket
    ch.queue_purge(q)
    ch.queue_delete(q)
    got += read_deliveries(raw, len(expected) - 10)
    check(got, expected)


def test_persistent_deliveries_held_for_disk(broker, conn, ch):
    q = declare_queue(ch, exclusive=False, durable=True)
    expected = []
    for i in range(400):
        b = body_of(i, SIZES[i % len(SIZES)] if i % 7 else 2048)
        publish(ch, "", q, b, delivery_mode=2)
        expected.append(b)
    publish(ch, "", q, b"end", delivery_mode=2, confirm=True)
    expected.append(b"end")
    raw = slow_consumer(broker, q, no_ack=False)
    check(read_deliveries(raw, len(expected)), expected)


def fill_unread(broker, ch, n=3000):
    """A consumer that reads nothing, with ~4 MiB of deliveries by reference queued for it."""
    q = declare_queue(ch, exclusive=False)
    for i in range(n):
        publish(ch, "", q, body_of(i, 1400))
    publish(ch, "", q, b"last", confirm=True)
    raw = slow_consumer(broker, q, no_ack=True)
    raw.read_frame(timeout=10)  # the first delivery's method: the rest is queued or in flight
    return q, raw


def test_consumer_gone_with_bodies_unsent(broker, conn, ch):
    """The references of a connection that dies with them unsent are let go; the broker goes
    on serving (each message is freed once, or the broker dies or leaks on the next round)."""
    for _ in range(3):
        q, raw = fill_unread(broker, ch)
        raw.sock.close()
        ch.queue_delete(q)
    q = declare_queue(ch, exclusive=False)
    publish(ch, "", q, body_of(0, 2000), confirm=True)
    raw = slow_consumer(broker, q, no_ack=True)
    check(read_deliveries(raw, 1), [body_of(0, 2000)])


def test_broker_stops_with_bodies_unsent(broker_factory):
    b = broker_factory()
    c = b.amqp()
    fill_unread(b, c.channel())
    assert b.terminate() == 0, b.log_tail(100)
