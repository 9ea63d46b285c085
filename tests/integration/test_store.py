"""The durable store seen from outside: what survives a restart, what a corrupt file does to a
start, and the offline checker (sluice-store). Needs private brokers: skipped on RabbitMQ."""

import subprocess
import time

import pika
import pytest

from conftest import sluiced_binary
from helpers import uname


def store_tool():
    return sluiced_binary().parent / "sluice-store"


def run_tool(*args):
    return subprocess.run([str(store_tool())] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=30)


def publish_persistent(b, q, bodies, durable=True):
    c = b.pika()
    ch = c.channel()
    ch.queue_declare(q, durable=durable)
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", q, body, pika.BasicProperties(delivery_mode=2))
    c.close()


def test_persistent_and_transient_across_restart(broker_factory, tmp_path):
    data = tmp_path / "shared"
    b1 = broker_factory(data_dir=data)
    q, tq = uname("dq"), uname("tq")
    publish_persistent(b1, q, [b"p1", b"p2", b"p3"])
    c = b1.pika()
    ch = c.channel()
    ch.queue_declare(tq, durable=False)
    ch.basic_publish("", q, b"transient-in-durable")  # delivery-mode 1: not stored
    ch.basic_publish("", tq, b"x")
    held = ch.basic_get(q)  # delivered, not acked when the node stops
    assert held[2] == b"p1"
    c.close()  # requeued by the close, but it was delivered once
    assert b1.terminate() == 0
    b2 = broker_factory(data_dir=data)
    ch = b2.pika().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.queue_declare(tq, passive=True)  # transient queue gone
    ch = b2.pika().channel()
    got = []
    while True:
        m = ch.basic_get(q, auto_ack=True)
        if m[0] is None:
            break
        got.append((m[2], m[0].redelivered))
    assert got == [(b"p1", True), (b"p2", False), (b"p3", False)]


def test_ttl_counts_the_time_the_broker_was_down(broker_factory, tmp_path):
    # x-message-ttl 1.5 s: "old" is published, the broker stops, and comes back after its
    # deadline: "old" is gone at once. "new", published on the second broker, is still there.
    # RabbitMQ stores expiry deadlines with messages too.
    data = tmp_path / "ttl"
    b1 = broker_factory(data_dir=data)
    q = uname("ttl")
    c = b1.pika()
    ch = c.channel()
    ch.queue_declare(q, durable=True, arguments={"x-message-ttl": 1500})
    ch.confirm_delivery()
    ch.basic_publish("", q, b"old", pika.BasicProperties(delivery_mode=2))
    c.close()
    assert b1.terminate() == 0
    time.sleep(2.0)
    b2 = broker_factory(data_dir=data)
    ch = b2.pika().channel()
    ch.basic_publish("", q, b"new", pika.BasicProperties(delivery_mode=2))
    m = ch.basic_get(q, auto_ack=True)
    assert m[2] == b"new"
    assert ch.basic_get(q, auto_ack=True)[0] is None


def test_sluice_store_check_and_queues(broker_factory, tmp_path):
    data = tmp_path / "shared"
    b = broker_factory(data_dir=data)
    q = uname("chk")
    publish_persistent(b, q, [b"a", b"bb", b"ccc"])
    assert b.terminate() == 0
    r = run_tool("check", data)
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout
    r = run_tool("queues", data)
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stdout.splitlines() if ("\t%s\t" % q) in l]
    assert line and line[0].split("\t")[3:5] == ["3", "6"]
    r = run_tool("dump", data)
    assert r.returncode == 0 and "enqueue" in r.stdout and "message" in r.stdout


def _segment(data):
    segs = sorted((data / "msgs").glob("*.seg"))
    assert segs
    return segs[-1]


def test_corruption_in_the_middle_stops_the_start(broker_factory, tmp_path):
    data = tmp_path / "shared"
    b = broker_factory(data_dir=data)
    q = uname("bad")
    publish_persistent(b, q, [b"A" * 100, b"B" * 100, b"C" * 100])
    assert b.terminate() == 0
    seg = _segment(data)
    raw = bytearray(seg.read_bytes())
    i = raw.find(b"A" * 100)
    assert i > 0
    raw[i + 10] ^= 0xFF  # a payload byte of the first message record: not the tail
    seg.write_bytes(bytes(raw))
    r = run_tool("check", data)
    assert r.returncode == 1
    assert seg.name in r.stderr and "offset" in r.stderr
    p = subprocess.run([str(sluiced_binary()), "--port", "0", "--mgmt-port", "off",
                        "--data-dir", str(data)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1  # an exit, not a crash on the way out
    assert seg.name in p.stderr and "offset" in p.stderr


def test_a_second_broker_on_the_same_data_directory_exits_1(broker_factory, tmp_path):
    """The store is locked: a second sluiced says so and exits 1, and the first goes on.
    Before, the failed start freed timers it had not set up yet and died of SIGSEGV."""
    data = tmp_path / "shared"
    b = broker_factory(data_dir=data)
    q = uname("locked")
    publish_persistent(b, q, [b"kept"])
    p = subprocess.run([str(sluiced_binary()), "--port", "0", "--mgmt-port", "off",
                        "--data-dir", str(data)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "locked by another process" in p.stderr
    b.assert_alive()
    ch = b.pika().channel()
    m = ch.basic_get(q, auto_ack=True)
    assert m[2] == b"kept"


def test_torn_tail_is_dropped_and_the_rest_recovered(broker_factory, tmp_path):
    data = tmp_path / "shared"
    b = broker_factory(data_dir=data)
    q = uname("torn")
    publish_persistent(b, q, [b"one", b"two", b"three-" * 20])
    assert b.terminate() == 0
    seg = _segment(data)
    raw = seg.read_bytes()
    seg.write_bytes(raw[:-7])  # a crash in the middle of the last write
    assert run_tool("check", data).returncode == 1  # reported, not repaired, by the tool
    b2 = broker_factory(data_dir=data)
    ch = b2.pika().channel()
    got = []
    while True:
        m = ch.basic_get(q, auto_ack=True)
        if m[0] is None:
            break
        got.append(m[2])
    assert got == [b"one", b"two"]


@pytest.mark.parametrize("how", ["get", "consume", "no_ack"])
def test_delivered_then_kill9_comes_back_redelivered(broker_factory, tmp_path, how):
    # Delivered and not acked when the node is killed: after the restart every message says
    # redelivered=true, so a consumer that deduplicates redelivered messages only is safe.
    # A no_ack delivery is gone for good (it was written off before it reached the socket).
    data = tmp_path / "k"
    b1 = broker_factory(data_dir=data)
    q = uname("redeliv")
    publish_persistent(b1, q, [b"r1", b"r2", b"r3"])
    c = b1.pika()
    ch = c.channel()
    got = []
    if how == "consume":
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(q, lambda _ch, m, p, body: got.append(body))
        deadline = time.monotonic() + 5
        while len(got) < 3 and time.monotonic() < deadline:
            c.process_data_events(time_limit=0.1)
    else:
        for _ in range(3):
            m, _, body = ch.basic_get(q, auto_ack=(how == "no_ack"))
            assert m is not None and not m.redelivered
            got.append(body)
    assert got == [b"r1", b"r2", b"r3"]
    b1.kill9()
    b2 = broker_factory(data_dir=data)
    ch = b2.pika().channel()
    back = []
    while True:
        m, _, body = ch.basic_get(q, auto_ack=True)
        if m is None:
            break
        back.append((body, m.redelivered))
    if how == "no_ack":
        assert back == []
    else:
        assert back == [(b"r1", True), (b"r2", True), (b"r3", True)]


def test_max_message_size_is_capped_at_what_the_store_holds(broker_factory, tmp_path):
    # A body beyond the store's record limit (1 GiB) used to abort the broker at the write;
    # the setting is capped at 512M, as RabbitMQ caps it, and a larger value stops the start.
    broker_factory()  # skips on RabbitMQ
    for value in ("2G", "536870913", "1G"):
        conf = tmp_path / ("big-%s.conf" % value)
        conf.write_text("max_message_size = %s\n" % value)
        p = subprocess.run([str(sluiced_binary()), "--config", str(conf), "--port", "0",
                            "--mgmt-port", "off", "--data-dir", str(tmp_path / "never")],
                           capture_output=True, text=True, timeout=10)
        assert p.returncode == 2, (value, p.returncode, p.stderr)
        assert "max_message_size must be a size from 1 byte to 512M" in p.stderr, p.stderr
        assert not (tmp_path / "never").exists()
    b = broker_factory(config={"max_message_size": "512M"})
    b.assert_alive()
