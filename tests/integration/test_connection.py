"""Connection lifecycle: handshake, properties, auth, vhosts, tuning, heartbeats, close."""

import socket
import time

import amqp
import pika
import pytest

import amqpraw
from amqpraw import FRAME_HEARTBEAT, FRAME_METHOD, encode_frame, encode_method
from helpers import uname

CAPABILITIES = [
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "authentication_failure_close",
    "per_consumer_qos",
]


def test_handshake_pika(broker):
    c = broker.pika()
    assert c.is_open
    ch = c.channel()
    assert ch.is_open
    q = ch.queue_declare(uname("pika"), exclusive=True).method.queue
    ch.basic_publish("", q, b"hello pika")
    method, props, body = ch.basic_get(q, auto_ack=True)
    assert body == b"hello pika"
    c.close()
    assert c.is_closed


def test_handshake_pyamqp(broker):
    c = broker.amqp()
    assert c.connected
    ch = c.channel()
    q, _, _ = ch.queue_declare(uname("pyamqp"), exclusive=True)
    ch.basic_publish(amqp.Message(b"hello py-amqp"), exchange="", routing_key=q)
    msg = ch.basic_get(q, no_ack=True)
    assert msg.body == b"hello py-amqp"
    c.close()
    assert not c.connected


def test_server_properties(broker):
    c = broker.amqp()
    props = c.server_properties
    for key in ("product", "version"):
        assert props.get(key), "server-properties lacks %r: %r" % (key, props)
    caps = props.get("capabilities")
    assert isinstance(caps, dict), props
    for cap in CAPABILITIES:
        assert caps.get(cap) is True, "capability %s not advertised as true: %r" % (cap, caps)


def test_connection_start_and_tune_raw(broker):
    r = broker.raw(handshake=False)
    r.send(amqpraw.PROTOCOL_HEADER)
    start = r.expect("connection.start")
    assert (start.version_major, start.version_minor) == (0, 9)
    mechs = start.mechanisms.split()
    assert b"PLAIN" in mechs and b"AMQPLAIN" in mechs
    assert b"en_US" in start.locales.split()
    r.send_method(0, "connection.start-ok",
                  client_properties={"capabilities": amqpraw.CLIENT_CAPABILITIES},
                  mechanism="PLAIN", response=b"\x00guest\x00guest", locale="en_US")
    tune = r.expect("connection.tune")
    assert tune.frame_max == 0 or tune.frame_max >= 4096
    assert tune.channel_max == 2047
    r.send_method(0, "connection.tune-ok", channel_max=tune.channel_max,
                  frame_max=tune.frame_max, heartbeat=0)
    r.send_method(0, "connection.open", virtual_host="/")
    r.expect("connection.open-ok")
    r.open_channel(1)


def _read_until_eof(sock, timeout=5.0):
    """All bytes the broker sends before closing; fails if it never closes."""
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return data
        except socket.timeout:
            break
        if not chunk:
            return data
        data += chunk
    pytest.fail("broker did not close the socket (got %r)" % data)


def test_bad_protocol_header(broker):
    s = socket.create_connection((broker.host, broker.port), timeout=5)
    try:
        s.sendall(b"HTTP/1.1")  # 8 octets, the size of a protocol header
        assert _read_until_eof(s) == b"AMQP\x00\x00\x09\x01"
    finally:
        s.close()
    broker.assert_alive()


def test_bad_protocol_version(broker):
    s = socket.create_connection((broker.host, broker.port), timeout=5)
    try:
        s.sendall(b"AMQP\x00\x00\x08\x00")  # AMQP 0-8
        assert _read_until_eof(s) == b"AMQP\x00\x00\x09\x01"
    finally:
        s.close()
    broker.assert_alive()


def test_bad_login_pika(broker):
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        broker.pika(password="wrong-password")
    broker.assert_alive()


def test_bad_login_pyamqp_plain(broker):
    with pytest.raises(amqp.exceptions.AccessRefused) as ei:
        broker.amqp(password="wrong-password", login_method="PLAIN")
    assert ei.value.reply_code == 403
    broker.assert_alive()


def test_bad_login_raw_gets_403_close(broker):
    r = broker.raw(handshake=False)
    r.send(amqpraw.PROTOCOL_HEADER)
    r.expect("connection.start")
    r.send_method(0, "connection.start-ok",
                  client_properties={"capabilities": {"authentication_failure_close": True}},
                  mechanism="PLAIN", response=b"\x00guest\x00nope", locale="en_US")
    res = r.wait_close()
    assert res.kind == "connection" and res.reply_code == 403, res
    assert res.reply_text.startswith("ACCESS_REFUSED")
    r.assert_eof()


def test_unknown_user_refused(broker):
    with pytest.raises(amqp.exceptions.AccessRefused):
        broker.amqp(user="nobody-" + uname(), password="x", login_method="PLAIN")


def test_amqplain_login(broker):
    c = broker.amqp(login_method="AMQPLAIN")
    ch = c.channel()
    q, _, _ = ch.queue_declare(uname("amqplain"), exclusive=True)
    assert q


def test_amqplain_bad_password(broker):
    with pytest.raises(amqp.exceptions.AccessRefused):
        broker.amqp(login_method="AMQPLAIN", password="wrong")


def test_amqplain_raw(broker):
    r = broker.raw(mechanism="AMQPLAIN")
    r.open_channel(1)


def test_unknown_vhost_530(broker):
    r = broker.raw(handshake=False)
    r.handshake(open_vhost=False)
    r.send_method(0, "connection.open", virtual_host="no-such-vhost-" + uname())
    res = r.wait_close()
    assert res.kind == "connection" and res.reply_code == 530, res
    r.assert_eof()


def test_unknown_vhost_pyamqp(broker):
    with pytest.raises(amqp.exceptions.NotAllowed) as ei:
        broker.amqp(virtual_host="no-such-vhost")
    assert ei.value.reply_code == 530


def test_small_frame_max_honored_pika(broker):
    c = broker.pika(frame_max=4096)
    ch = c.channel()
    q = ch.queue_declare(uname("fm"), exclusive=True).method.queue
    body = bytes(range(256)) * 80  # 20480 octets, at least 6 body frames
    ch.basic_publish("", q, body)
    method, props, got = ch.basic_get(q, auto_ack=True)
    assert got == body


def test_small_frame_max_server_splits_bodies(broker):
    r = broker.raw(frame_max=4096)
    r.open_channel(1)
    q = r.rpc(1, "queue.declare", queue=uname("fm"), exclusive=True).queue
    body = bytes((i * 7) % 251 for i in range(10000))
    r.publish(1, "", q, body)
    r.send_method(1, "basic.get", queue=q, no_ack=True)
    m = r.expect("basic.get-ok")
    assert m.body == body
    assert len(m.body_frames) >= 3
    for f in m.body_frames:
        assert f.size <= 4096, "server sent a %d-octet frame with frame-max 4096" % f.size


def test_frame_over_frame_max_501(broker):
    r = broker.raw(frame_max=4096)
    r.open_channel(1)
    q = r.rpc(1, "queue.declare", queue=uname("big"), exclusive=True).queue
    body = b"x" * 8000
    r.send_method(1, "basic.publish", exchange="", routing_key=q)
    r.send_frame(amqpraw.FRAME_HEADER, 1, amqpraw.encode_content_header(len(body)))
    r.send_frame(amqpraw.FRAME_BODY, 1, body)  # one 8008-octet frame > 4096
    res = r.wait_close()
    assert res.kind == "connection" and res.reply_code == 501, res
    r.assert_eof()
    broker.assert_alive()


@pytest.mark.test_timeout(20)
def test_silent_client_dropped_after_heartbeat_timeout(broker):
    r = broker.raw(heartbeat=1)
    assert r.heartbeat == 1
    t0 = time.monotonic()
    # Never send anything again; read (and count) what the broker sends.
    while True:
        try:
            r.read_frame(timeout=max(0.0, 8 - (time.monotonic() - t0)))
        except amqpraw.PeerClosed:
            break
        except amqpraw.ReadTimeout:
            pytest.fail("silent client with heartbeat=1 was not dropped within 8s")
        else:
            pass
    elapsed = time.monotonic() - t0
    assert 1.0 <= elapsed <= 5.0, "dropped after %.2fs, expected ~2-3s" % elapsed
    broker.assert_alive()


@pytest.mark.test_timeout(20)
def test_server_sends_heartbeats_raw(broker):
    r = broker.raw(heartbeat=1)
    r.open_channel(1)
    t0 = time.monotonic()
    last_sent = 0.0
    while time.monotonic() - t0 < 3.5:
        if time.monotonic() - last_sent >= 0.4:
            r.send_heartbeat()
            last_sent = time.monotonic()
        try:
            f = r.read_frame(timeout=0.2)
        except amqpraw.ReadTimeout:
            continue
        if f.type == amqpraw.FRAME_HEARTBEAT:
            assert f.channel == 0
            r.heartbeats_received += 1
        else:
            pytest.fail("unexpected frame %r while idle" % f)
    assert r.heartbeats_received >= 2, "broker sent %d heartbeats in 3.5s with heartbeat=1" % (
        r.heartbeats_received)
    # Still usable after the idle period.
    r.rpc(1, "queue.declare", queue=uname("hb"), exclusive=True)


@pytest.mark.test_timeout(20)
def test_pika_heartbeat_connection_stays_alive(broker):
    c = broker.pika(heartbeat=1)
    ch = c.channel()
    q = ch.queue_declare(uname("hb"), exclusive=True).method.queue
    for _ in range(4):
        time.sleep(0.5)
        c.process_data_events(time_limit=0.5)
    assert c.is_open
    ch.basic_publish("", q, b"after idle")
    method, props, body = ch.basic_get(q, auto_ack=True)
    assert body == b"after idle"


def test_client_close_gets_close_ok(broker):
    r = broker.raw()
    r.open_channel(1)
    r.send_method(0, "connection.close", reply_code=200, reply_text="bye", class_id=0,
                  method_id=0)
    r.expect("connection.close-ok")
    # The client, having sent close, is the one that closes the socket.
    r.close()
    broker.assert_alive()


def test_users_from_config_file(broker_factory):
    b = broker_factory(config={"user.alice": "s3cret", "user.alice.tags": "administrator",
                               "user.bob": "hunter2"})
    a = b.pika(user="alice", password="s3cret")
    ch = a.channel()
    q = ch.queue_declare(uname("alice"), exclusive=True).method.queue
    ch.basic_publish("", q, b"from alice")
    assert ch.basic_get(q, auto_ack=True)[2] == b"from alice"
    b.amqp(user="bob", password="hunter2").channel()
    with pytest.raises(amqp.exceptions.AccessRefused):
        b.amqp(user="alice", password="wrong")
    # guest still works from loopback
    g = b.amqp()
    g.channel().close()


def test_config_file_tuning(broker_factory):
    b = broker_factory(config={"heartbeat": "5", "frame_max": "8192", "channel_max": "16"})
    r = b.raw()
    assert r.tune.heartbeat == 5
    assert r.tune.frame_max == 8192
    assert r.tune.channel_max == 16


def _write_for(r, data, seconds):
    """Keep writing `data` for `seconds` as a client that multiplexes channels does; returns
    the first error a write met (None when every write went through)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            r.sock.sendall(data)
        except OSError as e:  # EPIPE / ECONNRESET: the broker reset the connection
            return e
        time.sleep(0.01)
    return None


def _close_and_keep_writing(broker):
    r = broker.raw()
    r.open_channel(1)
    q = uname("afterclose")
    late = encode_frame(FRAME_METHOD, 1, encode_method(
        "queue.declare", queue=q, passive=False, durable=False, exclusive=False,
        auto_delete=False, nowait=True, arguments={}))
    r.sock.sendall(encode_frame(FRAME_METHOD, 0, encode_method(
        "connection.close", reply_code=200, reply_text="bye", class_id=0, method_id=0)) + late)
    err = _write_for(r, late + r.content_frames(1, b"x" * 4000), 0.5)
    assert err is None, "a write after connection.close met %r" % err
    r.expect("connection.close-ok")
    return r, q


def test_close_ok_is_followed_by_a_lingering_close(broker):
    # The client sends connection.close and goes on writing frames it had queued (another
    # channel's publishes). The broker answers close-ok, acts on nothing after the close, and
    # does not close at once: the writes never meet a reset that could destroy the close-ok
    # before the client reads it (issue 12 item 6; RabbitMQ and nginx linger too).
    r, q = _close_and_keep_writing(broker)
    r.close()
    c = broker.amqp()
    ch = c.channel()
    with pytest.raises(amqp.exceptions.NotFound):
        ch.queue_declare(q, passive=True)  # nothing after the close was acted on
    broker.assert_alive()


@pytest.mark.sluice_only("after close-ok Sluice half-closes (FIN) and drains; RabbitMQ keeps "
                         "its side open until the client closes")
def test_close_ok_is_followed_by_a_half_close(broker):
    r, _ = _close_and_keep_writing(broker)
    r.assert_eof()  # the client, still holding its side open, reads EOF after close-ok
    err = _write_for(r, b"\x08\x00\x00\x00\x00\x00\x00\xce", 0.2)  # still drained
    assert err is None, err
    r.close()
    broker.assert_alive()


def _error_close_while_writing(broker):
    # The broker closes the connection for an error (a method on a channel never opened); the
    # client goes on writing (heartbeats) before it reads the close: the broker waits for
    # close-ok and discards what comes before it, with no reset.
    r = broker.raw()
    r.open_channel(1)
    r.send_method(7, "basic.qos", prefetch_count=1)
    err = _write_for(r, encode_frame(FRAME_HEARTBEAT, 0, b""), 0.3)
    assert err is None, "a write after the broker's connection.close met %r" % err
    m = r.read_method()
    assert m.name == "connection.close" and m.reply_code == 504, m
    return r


def test_error_close_waits_for_close_ok(broker):
    r = _error_close_while_writing(broker)
    r.send_method(0, "connection.close-ok")
    r.close()
    broker.assert_alive()


@pytest.mark.sluice_only("after the close-ok of its own connection.close Sluice lingers too; "
                         "RabbitMQ closes at once, so later writes meet a reset")
def test_error_close_is_followed_by_a_lingering_close(broker):
    r = _error_close_while_writing(broker)
    more = r.content_frames(1, b"y" * 4000)
    r.sock.sendall(encode_frame(FRAME_METHOD, 0, encode_method("connection.close-ok")) + more)
    err = _write_for(r, more, 0.3)
    assert err is None, "a write after close-ok met %r" % err
    r.assert_eof()
    r.close()
    broker.assert_alive()
