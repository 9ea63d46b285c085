"""Raw-socket hostile input.  After every case the broker must still serve a
fresh connection (publish/get round trip)."""

import random
import struct

import pytest

import amqpraw
from amqpraw import FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD
from helpers import IS_RABBITMQ, uname


@pytest.fixture
def raw1(broker):
    """A handshaken raw connection with channel 1 open."""
    r = broker.raw()
    r.open_channel(1)
    yield r
    broker.assert_alive()


def expect_connection_close(r, code):
    res = r.wait_close()
    assert res.kind == "connection", "expected connection.close %d, got %r" % (code, res)
    assert res.reply_code == code, "expected connection.close %d, got %r" % (code, res)
    r.assert_eof()
    return res


def expect_close_or_eof(r, code):
    """RabbitMQ 3.10 sometimes just drops the socket where Sluice closes properly."""
    res = r.wait_close()
    if res.kind == "eof":
        return res
    assert res.kind == "connection" and res.reply_code == code, res
    r.assert_eof()
    return res


def expect_malformed(r):
    """Undecodable method arguments.

    Sluice: connection.close 502 SYNTAX_ERROR.  RabbitMQ 3.10 answers
    501 FRAME_ERROR "cannot decode ..." (or drops the socket); accepted
    only when the target is RabbitMQ (see DIFFERENCES.md).
    """
    if IS_RABBITMQ:
        res = r.wait_close()
        if res.kind == "eof":
            return res
        assert res.kind == "connection" and res.reply_code in (501, 502), res
        r.assert_eof()
        return res
    return expect_connection_close(r, 502)


def test_bad_frame_end(raw1):
    raw1.send_frame(FRAME_HEARTBEAT, 0, b"", end=0x00)
    expect_connection_close(raw1, 501)


def test_bad_frame_end_on_method(raw1):
    raw1.send_frame(FRAME_METHOD, 1,
                    amqpraw.encode_method("queue.declare", queue=uname("q"), exclusive=True),
                    end=0xCD)
    expect_connection_close(raw1, 501)


def test_unknown_frame_type(raw1):
    raw1.send_frame(9, 0, b"")
    expect_connection_close(raw1, 501)


def test_header_frame_without_publish(raw1):
    raw1.send_frame(FRAME_HEADER, 1, amqpraw.encode_content_header(3))
    expect_connection_close(raw1, 505)


def test_body_frame_without_header(raw1):
    raw1.send_frame(FRAME_BODY, 1, b"abc")
    expect_connection_close(raw1, 505)


def test_body_frame_instead_of_header(raw1):
    raw1.send_method(1, "basic.publish", exchange="", routing_key="x")
    raw1.send_frame(FRAME_BODY, 1, b"abc")
    expect_connection_close(raw1, 505)


def test_method_between_publish_and_header(raw1):
    raw1.send_method(1, "basic.publish", exchange="", routing_key="x")
    raw1.send_method(1, "basic.qos", prefetch_count=1)
    expect_connection_close(raw1, 505)


def test_heartbeat_on_nonzero_channel(raw1):
    raw1.send_frame(FRAME_HEARTBEAT, 1, b"")
    expect_connection_close(raw1, 505)


def test_method_on_unopened_channel(raw1):
    raw1.send_method(5, "queue.declare", queue=uname("q"), exclusive=True)
    expect_connection_close(raw1, 504)


def test_second_channel_open(raw1):
    raw1.send_method(1, "channel.open")
    expect_connection_close(raw1, 504)


def test_non_connection_method_on_channel_zero(raw1):
    raw1.send_method(0, "queue.declare", queue=uname("q"), exclusive=True)
    expect_connection_close(raw1, 504)


def test_truncated_method_arguments(raw1):
    # queue.declare cut off in the middle of the queue name.
    payload = amqpraw.encode_method("queue.declare", queue="truncated-queue-name")[:10]
    raw1.send_frame(FRAME_METHOD, 1, payload)
    expect_malformed(raw1)


def test_method_frame_too_short_for_ids(raw1):
    raw1.send_frame(FRAME_METHOD, 1, b"\x00\x32")
    expect_malformed(raw1)


def test_table_with_unknown_tag_U(raw1):
    args = {"x-bad": amqpraw.Tagged(b"U", struct.pack(">h", 1))}
    raw1.send_method(1, "queue.declare", queue=uname("q"), exclusive=True, arguments=args)
    expect_close_or_eof(raw1, 502)


def test_table_length_past_end(raw1):
    # arguments table claims 1000 octets but the frame ends after 4.
    payload = amqpraw.encode_method("queue.declare", queue=uname("q"), exclusive=True,
                                    arguments=struct.pack(">I", 1000) + b"abcd")
    raw1.send_frame(FRAME_METHOD, 1, payload)
    expect_malformed(raw1)


def test_channel_flow_inactive_540(raw1):
    raw1.send_method(1, "channel.flow", active=False)
    expect_connection_close(raw1, 540)


def test_channel_flow_active_ok(raw1):
    ok = raw1.rpc(1, "channel.flow", active=True)
    assert ok.active is True


def test_qos_prefetch_size_540(raw1):
    raw1.send_method(1, "basic.qos", prefetch_size=10, prefetch_count=0)
    expect_connection_close(raw1, 540)


def test_publish_immediate_540(raw1):
    q = raw1.rpc(1, "queue.declare", queue=uname("imm"), exclusive=True).queue
    raw1.publish(1, "", q, b"now!", immediate=True)
    expect_connection_close(raw1, 540)


def test_connection_method_on_nonzero_channel_503(raw1):
    raw1.send_method(1, "connection.tune-ok", channel_max=0, frame_max=131072, heartbeat=0)
    res = raw1.wait_close()
    assert res.kind == "connection" and res.reply_code in (503, 504), res


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_garbage_after_handshake(broker, seed):
    r = broker.raw()
    r.open_channel(1)
    rnd = random.Random(seed)
    r.send(bytes(rnd.randrange(256) for _ in range(4096)))
    res = r.wait_close(timeout=8)
    assert res.kind in ("connection", "eof"), res
    if res.kind == "connection":
        assert 500 <= res.reply_code < 600, res
        r.assert_eof(timeout=8)
    broker.assert_alive()


def test_garbage_instead_of_protocol_header(broker):
    r = broker.raw(handshake=False)
    r.send(b"\x01\x00\x00\x00\x00\x00\x04" + b"\xff" * 64)
    data = r.read_until_eof()
    assert data in (b"", b"AMQP\x00\x00\x09\x01")
    broker.assert_alive()


def test_many_hostile_connections_then_alive(broker):
    for i in range(20):
        r = broker.raw()
        r.send_frame(9 + (i % 5), 0, b"junk")
        res = r.wait_close()
        assert res.kind in ("connection", "eof"), res
        r.close()
    broker.assert_alive()
