"""Unmodified real clients: kombu and the rabbitmq-c command line tools."""

import shutil
import subprocess

import pytest
from kombu import Connection, Consumer, Exchange, Producer, Queue

from helpers import uname


def _kombu(broker):
    return Connection("amqp://guest:guest@%s:%d//" % (broker.host, broker.port),
                      connect_timeout=5, transport_options={"confirm_publish": True})


def test_kombu_simple_queue(broker):
    name = uname("kombu-simple")
    with _kombu(broker) as conn:
        sq = conn.SimpleQueue(name)
        try:
            sq.put({"hello": "world", "n": 1})
            sq.put("second")
            msg = sq.get(block=True, timeout=5)
            assert msg.payload == {"hello": "world", "n": 1}
            msg.ack()
            msg = sq.get(block=True, timeout=5)
            assert msg.payload == "second"
            msg.ack()
            with pytest.raises(sq.Empty):
                sq.get(block=False)
        finally:
            sq.close()  # cancels its consumer
        ch = conn.channel()
        Queue(name, Exchange(name))(ch).delete()
        Exchange(name)(ch).delete()
        ch.close()


def test_kombu_producer_consumer_with_exchange(broker):
    exchange = Exchange(uname("kombu-x"), type="direct", durable=False)
    queue = Queue(uname("kombu-q"), exchange=exchange, routing_key="tasks", durable=False)
    received = []
    with _kombu(broker) as conn:
        ch = conn.channel()
        try:
            producer = Producer(ch, exchange=exchange, routing_key="tasks", serializer="json")
            queue(ch).declare()
            for i in range(5):
                producer.publish({"task": i}, declare=[queue], retry=False)

            def on_message(body, message):
                received.append(body)
                message.ack()

            with Consumer(ch, queues=[queue], callbacks=[on_message], accept=["json"]):
                while len(received) < 5:
                    conn.drain_events(timeout=5)
            assert received == [{"task": i} for i in range(5)]
        finally:
            queue(ch).delete()
            exchange(ch).delete()
            ch.close()


def test_kombu_reject_and_requeue(broker):
    queue = Queue(uname("kombu-rq"), durable=False)
    with _kombu(broker) as conn:
        ch = conn.channel()
        try:
            q = queue(ch)
            q.declare()
            Producer(ch).publish("again", routing_key=q.name, retry=False)
            m = q.get()
            assert m.payload == "again" and not m.delivery_info["redelivered"]
            m.requeue()
            m2 = q.get()
            assert m2.payload == "again" and m2.delivery_info["redelivered"]
            m2.ack()
            assert q.get() is None
        finally:
            queue(ch).delete()
            ch.close()


def _tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.skip("%s not installed (Debian package amqp-tools)" % name)
    return path


def _run(broker, tool, *args, input=None, timeout=10):
    cmd = [_tool(tool), "--server", broker.host, "--port", str(broker.port),
           "--username", "guest", "--password", "guest"] + list(args)
    p = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
    assert p.returncode == 0, "%s failed (%d): %s %s" % (
        " ".join(cmd), p.returncode, p.stdout, p.stderr)
    return p.stdout


def test_amqp_tools_round_trip(broker):
    q = uname("tools")
    out = _run(broker, "amqp-declare-queue", "-q", q)
    assert out.strip() == q.encode()
    _run(broker, "amqp-publish", "-r", q, "-b", "first message")
    _run(broker, "amqp-publish", "-r", q, "-b", "second message", "-C", "text/plain",
         "-H", "x-tool: yes")
    _run(broker, "amqp-publish", "-r", q, "-b", "third message", "-p")
    assert _run(broker, "amqp-get", "-q", q) == b"first message"
    out = _run(broker, "amqp-consume", "-q", q, "-c", "1", "cat")
    assert out == b"second message"
    out = _run(broker, "amqp-consume", "-q", q, "-c", "1", "-A", "cat")
    assert out == b"third message"
    _run(broker, "amqp-delete-queue", "-q", q)
    c = broker.amqp()
    from helpers import queue_exists
    assert not queue_exists(c, q)


def test_amqp_tools_server_named_queue_and_line_publish(broker):
    out = _run(broker, "amqp-declare-queue", "-q", "")
    name = out.strip().decode()
    assert name.startswith("amq.gen-")
    q = uname("lines")
    _run(broker, "amqp-declare-queue", "-q", q)
    _run(broker, "amqp-publish", "-r", q, "-l", input=b"one\ntwo\nthree\n")
    bodies = [_run(broker, "amqp-get", "-q", q) for _ in range(3)]
    # (amqp-publish -l keeps each line's newline in the body)
    assert [b.rstrip(b"\n") for b in bodies] == [b"one", b"two", b"three"]
    _run(broker, "amqp-delete-queue", "-q", q)
    _run(broker, "amqp-delete-queue", "-q", name)


def test_amqp_tools_get_empty_fails(broker):
    q = uname("toolsempty")
    _run(broker, "amqp-declare-queue", "-q", q)
    cmd = [_tool("amqp-get"), "--server", broker.host, "--port", str(broker.port), "-q", q]
    p = subprocess.run(cmd, capture_output=True, timeout=10)
    assert p.returncode != 0 and p.stdout == b""
    _run(broker, "amqp-delete-queue", "-q", q)
