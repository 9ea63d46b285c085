"""Shared helpers for the integration tests (imported by conftest and tests)."""

import os
import socket
import time
import uuid

import amqp
import pytest

TARGET = os.environ.get("SLUICE_TEST_TARGET", "sluice").strip().lower()
IS_RABBITMQ = TARGET in ("rabbitmq", "rabbit")


def uname(prefix="t"):
    """A name unique across the session (tests may share one RabbitMQ)."""
    return "%s-%s" % (prefix, uuid.uuid4().hex[:12])


def expect_channel_error(conn, code, fn, *args, **kwargs):
    """fn must fail with a *channel* error `code` (py-amqp).

    Checks the connection survived: a new channel can be opened on it.
    Returns the exception.
    """
    with pytest.raises(amqp.exceptions.AMQPError) as ei:
        fn(*args, **kwargs)
    assert ei.value.reply_code == code, "expected %d, got %r" % (code, ei.value)
    assert conn.connected, "expected a channel error %d but the connection was closed" % code
    ch = conn.channel()
    ch.close()
    return ei.value


def expect_connection_error(conn, code, fn, *args, **kwargs):
    """fn must fail with a *connection* error `code` (py-amqp)."""
    with pytest.raises(amqp.exceptions.AMQPError) as ei:
        fn(*args, **kwargs)
    assert ei.value.reply_code == code, "expected %d, got %r" % (code, ei.value)
    assert not conn.connected, "expected a connection error %d, but the connection is open" % code
    return ei.value


def sync_point(ch):
    """Force a round trip so asynchronous channel errors surface (py-amqp)."""
    ch.basic_qos(0, 0, False)


def get_body(ch, queue, no_ack=True):
    """basic.get one message; returns the body as bytes or None."""
    msg = ch.basic_get(queue, no_ack=no_ack)
    if msg is None:
        return None
    body = msg.body
    return body.encode() if isinstance(body, str) else body


def drain_bodies(ch, queue, limit=1000):
    out = []
    for _ in range(limit):
        b = get_body(ch, queue)
        if b is None:
            break
        out.append(b)
    return out


def wait_for(pred, timeout=5.0, interval=0.05, message="condition not met"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("%s within %.1fs" % (message, timeout))
        time.sleep(interval)


def queue_counts(conn, queue):
    """(message_count, consumer_count) by passive declare on a fresh channel, or None if 404."""
    ch = conn.channel()
    try:
        ok = ch.queue_declare(queue, passive=True)
    except amqp.exceptions.NotFound:
        return None
    ch.close()
    return ok.message_count, ok.consumer_count


def queue_exists(conn, queue):
    return queue_counts(conn, queue) is not None


def exchange_exists(conn, exchange):
    ch = conn.channel()
    try:
        ch.exchange_declare(exchange, "direct", passive=True)
    except amqp.exceptions.NotFound:
        return False
    ch.close()
    return True


def collect_pika(connection, store, count, timeout=3.0):
    """Let a pika BlockingConnection deliver until len(store) >= count or timeout."""
    deadline = time.monotonic() + timeout
    while len(store) < count and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)
    return store


def settle_pika(connection, seconds):
    """Keep processing pika I/O for `seconds` (to prove nothing else arrives)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        connection.process_data_events(time_limit=min(0.05, max(0.0, deadline - time.monotonic())))


def declare_queue(ch, prefix="q", name=None, durable=False, exclusive=False,
                  auto_delete=False, arguments=None):
    """queue.declare with explicit flags (py-amqp defaults auto_delete=True)."""
    ok = ch.queue_declare(name if name is not None else uname(prefix), durable=durable,
                          exclusive=exclusive, auto_delete=auto_delete, arguments=arguments)
    return ok.queue


def declare_exchange(ch, etype, prefix="x", name=None, durable=False, auto_delete=False,
                     internal=False, arguments=None):
    """exchange.declare; py-amqp cannot set `internal`, so send the method by hand."""
    from amqp import spec
    name = name if name is not None else uname(prefix + "-" + etype)
    ch.send_method(spec.Exchange.Declare, "BssbbbbbF",
                   (0, name, etype, False, durable, auto_delete, internal, False, arguments),
                   wait=spec.Exchange.DeclareOk)
    return name


def publish(ch, exchange, routing_key, body, confirm=False, **props):
    """basic.publish (py-amqp).

    confirm=True puts the channel in confirm mode and waits for the broker's
    ack: use it before reading counts (declare-ok/purge-ok/delete-ok).
    RabbitMQ answers a `stat` call ahead of deliveries still in flight, so an
    unconfirmed publish may not be counted yet.
    """
    import amqp as _amqp
    if isinstance(body, str):
        body = body.encode()
    msg = _amqp.Message(body, **props)
    if confirm:
        ch.basic_publish_confirm(msg, exchange=exchange, routing_key=routing_key,
                                 confirm_timeout=5)
    else:
        ch.basic_publish(msg, exchange=exchange, routing_key=routing_key)


def basic_nack(ch, delivery_tag, multiple=False, requeue=True):
    """basic.nack for py-amqp, which has no wrapper for it."""
    from amqp import spec
    ch.send_method(spec.Basic.Nack, "Lbb", (delivery_tag, multiple, requeue))


def drain_deliveries(conn, store, count, timeout=3.0):
    """py-amqp: run drain_events until `store` holds `count` deliveries (else fail)."""
    deadline = time.monotonic() + timeout
    while len(store) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("got %d deliveries, expected %d" % (len(store), count))
        try:
            conn.drain_events(timeout=left)
        except socket.timeout:
            pass
    return store
