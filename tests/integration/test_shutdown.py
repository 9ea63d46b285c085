"""Daemon lifecycle: SIGTERM closes clients with 320 and exits 0; restart keeps
durable state.  These need a private broker, so they skip on RabbitMQ."""

import time

import pika
import pytest

from helpers import declare_queue, publish, queue_counts, uname


def test_sigterm_closes_connections_320_and_exits_0(broker_factory):
    b = broker_factory()
    r = b.raw()
    r.open_channel(1)
    q = r.rpc(1, "queue.declare", queue=uname("sd"), exclusive=False).queue
    r.rpc(1, "basic.consume", queue=q, consumer_tag="c1")
    pc = b.pika()
    pch = pc.channel()
    b.proc.send_signal(15)
    res = r.wait_close(timeout=8)
    assert res.kind == "connection" and res.reply_code == 320, res
    assert res.reply_text.startswith("CONNECTION_FORCED"), res.reply_text
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as ei:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            pc.process_data_events(time_limit=0.1)
    assert ei.value.reply_code == 320
    assert b.terminate(timeout=10) == 0
    assert not pch.is_open


def test_sigterm_idle_daemon_exits_0(broker_factory):
    b = broker_factory()
    t0 = time.monotonic()
    assert b.terminate(timeout=10) == 0
    assert time.monotonic() - t0 < 5


def test_restart_keeps_durable_queue_and_persistent_messages(broker_factory, tmp_path):
    data = tmp_path / "shared-data"
    b1 = broker_factory(data_dir=data)
    c = b1.amqp()
    ch = c.channel()
    dq = declare_queue(ch, durable=True, name=uname("durable"))
    tq = declare_queue(ch, durable=False, name=uname("transient"))
    ch.queue_bind(dq, "amq.direct", "dk")
    publish(ch, "", dq, "persistent", confirm=True, delivery_mode=2)
    publish(ch, "", dq, "transient msg", confirm=True, delivery_mode=1)
    publish(ch, "", tq, "in transient queue", confirm=True, delivery_mode=2)
    c.close()
    assert b1.terminate() == 0
    b2 = broker_factory(data_dir=data)
    c2 = b2.amqp()
    ch2 = c2.channel()
    assert queue_counts(c2, tq) is None, "non-durable queue survived a restart"
    assert queue_counts(c2, dq) == (1, 0)
    m = ch2.basic_get(dq, no_ack=True)
    assert m.body == b"persistent"
    publish(ch2, "amq.direct", "dk", "via durable binding", confirm=True)
    assert ch2.basic_get(dq, no_ack=True).body == b"via durable binding"


def test_restart_after_delete_does_not_resurrect(broker_factory, tmp_path):
    data = tmp_path / "shared-data"
    b1 = broker_factory(data_dir=data)
    c = b1.amqp()
    ch = c.channel()
    q = declare_queue(ch, durable=True, name=uname("reborn"))
    for i in range(3):
        publish(ch, "", q, "old%d" % i, confirm=True, delivery_mode=2)
    assert ch.queue_delete(q) == 3
    declare_queue(ch, durable=True, name=q)
    publish(ch, "", q, "new", confirm=True, delivery_mode=2)
    c.close()
    assert b1.terminate() == 0
    b2 = broker_factory(data_dir=data)
    c2 = b2.amqp()
    assert queue_counts(c2, q) == (1, 0)
    assert c2.channel().basic_get(q, no_ack=True).body == b"new"


def test_restart_after_purge_does_not_resurrect(broker_factory, tmp_path):
    data = tmp_path / "shared-data"
    b1 = broker_factory(data_dir=data)
    c = b1.amqp()
    ch = c.channel()
    q = declare_queue(ch, durable=True, name=uname("purged"))
    for i in range(3):
        publish(ch, "", q, "old%d" % i, confirm=True, delivery_mode=2)
    assert ch.queue_purge(q) == 3
    publish(ch, "", q, "kept", confirm=True, delivery_mode=2)
    c.close()
    assert b1.terminate() == 0
    b2 = broker_factory(data_dir=data)
    c2 = b2.amqp()
    assert queue_counts(c2, q) == (1, 0)
    assert c2.channel().basic_get(q, no_ack=True).body == b"kept"
