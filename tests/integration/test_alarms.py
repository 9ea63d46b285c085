"""Resource alarms: publishers are blocked (connection.blocked, socket not read) while queued
bodies exceed memory_high_watermark or free disk is under disk_free_limit, and unblocked when
the alarm clears. These need a private broker with a custom config, so they skip on RabbitMQ."""

import socket
import time

import amqp

from helpers import uname


def _pump(conn, until, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    return until()


def test_memory_alarm_blocks_publisher_and_clears(broker_factory):
    b = broker_factory(config={"memory_high_watermark": "4096"})
    pub = b.pika()
    events = []
    pub.add_on_connection_blocked_callback(lambda c, m: events.append(("blocked", m.method.reason)))
    pub.add_on_connection_unblocked_callback(lambda c, m: events.append(("unblocked", None)))
    ch = pub.channel()
    q = ch.queue_declare(uname("mem")).method.queue
    for _ in range(8):
        ch.basic_publish("", q, b"x" * 1024)
    assert _pump(pub, lambda: ("blocked", "low on memory") in events), events
    # A consumer on another connection drains the queue: the alarm clears.
    cons = b.pika()
    cch = cons.channel()
    got = 0
    while True:
        m = cch.basic_get(q, auto_ack=True)
        if m[0] is None:
            break
        got += 1
    assert got >= 4  # at least what was queued before the publisher was stopped
    assert _pump(pub, lambda: ("unblocked", None) in events), events
    # Publishing works again, and what was held back arrives.
    ch.basic_publish("", q, b"after")
    time.sleep(0.2)
    rest = []
    while True:
        m = cch.basic_get(q, auto_ack=True)
        if m[0] is None:
            break
        rest.append(m[2])
    assert rest[-1] == b"after"
    assert got + len(rest) == 9


def test_disk_alarm_blocks_publisher(broker_factory):
    # A limit no disk can meet: the alarm is on from the first check.
    b = broker_factory(config={"disk_free_limit": "1000000000G"})
    events = []
    # py-amqp with a short read timeout: a blocked connection is not read by the broker, so
    # its own close handshake can only time out (RabbitMQ behaves the same way).
    pub = b.amqp(read_timeout=1, on_blocked=events.append)
    ch = pub.channel()
    q = ch.queue_declare(uname("disk"))[0]
    ch.basic_publish(amqp.Message(b"one"), "", q)
    deadline = time.monotonic() + 5
    while not events and time.monotonic() < deadline:
        try:
            pub.drain_events(timeout=0.2)
        except socket.timeout:
            pass
    assert events  # py-amqp does not pass the reason on; the log names it
    assert "disk alarm" in b.log_tail()
    # Other connections keep working.
    other = b.pika().channel()
    assert other.queue_declare(q, passive=True).method.message_count == 1


def _blocked_raw_publisher(b, q):
    """A raw AMQP client blocked by the alarm with publishes held behind the one that found
    it: the broker reads on, but stops at the next basic.publish."""
    r = b.raw()
    r.rpc(1, "channel.open")
    r.rpc(1, "queue.declare", queue=q)
    r.publish(1, "", q, b"first")  # finds the alarm: completes, then the connection blocks
    r.expect("connection.blocked", timeout=5)
    for i in range(5):
        r.publish(1, "", q, b"held %d" % i)
    return r


def test_blocked_publisher_closes_its_connection_at_once(broker_factory):
    b = broker_factory(config={"disk_free_limit": "1000000000G"})
    q = uname("blockclose")
    r = _blocked_raw_publisher(b, q)
    t = time.monotonic()
    r.send_method(0, "connection.close", reply_code=200, reply_text="bye", class_id=0,
                  method_id=0)
    r.expect("connection.close-ok", timeout=3)
    assert time.monotonic() - t < 2
    # the held publishes were given up with the connection; the first one was taken
    other = b.pika().channel()
    assert other.queue_declare(q, passive=True).method.message_count == 1
    assert "closed while blocked by an alarm" in b.log_tail()


def test_blocked_publisher_closes_a_channel_and_goes_on(broker_factory):
    b = broker_factory(config={"disk_free_limit": "1000000000G"})
    q = uname("blockchclose")
    r = _blocked_raw_publisher(b, q)
    r.send_method(1, "channel.close", reply_code=200, reply_text="bye", class_id=0,
                  method_id=0)
    r.expect("channel.close-ok", channel=1, timeout=3)
    # heartbeats and a new channel's non-content methods are read too
    r.send_heartbeat()
    r.rpc(2, "channel.open", timeout=3)
    r.rpc(2, "queue.declare", queue=q, passive=True, timeout=3)
    r.send_method(0, "connection.close", reply_code=200, reply_text="bye", class_id=0,
                  method_id=0)
    r.expect("connection.close-ok", timeout=3)
