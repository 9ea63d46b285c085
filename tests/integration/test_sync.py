"""The sync thread (DESIGN.md sections 4 and 5): the event loop never waits for an fdatasync.
Replies that promise something on disk (publisher confirms, declare-oks of durable queues,
HTTP writes) wait for their sync; everything else goes on meanwhile. The store's fault hook
(SLUICE_FAULT, store/log.h) makes every sync slow or failing. Needs private brokers: skipped
on RabbitMQ.

The slow-sync tests check order, not speed: with syncs made to take SLOW_MS, transient
traffic started after a persistent publish must complete before that publish's confirm
arrives (it took at least SLOW_MS), which can only happen if the loop did not wait for the
disk. Before the sync thread, the loop itself slept in fdatasync and nothing got through.
"""

import json
import os
import threading
import time
import urllib.request

import amqpraw
from conftest import start_sluiced
from helpers import uname

SLOW_MS = 800
SLOW = {"SLUICE_FAULT": "sync_delay_ms=%d" % SLOW_MS}
PERSISTENT = {"delivery_mode": 2}


def raw_channel(b):
    r = b.raw(timeout=10)
    r.open_channel(1)
    return r


def arrived(r, name, wait=0.05):
    """Whether `name` is already there (or comes within `wait`); what else arrives is kept."""
    try:
        r.expect(name, timeout=wait)
        return True
    except amqpraw.ReadTimeout:
        return False


def test_transient_traffic_does_not_wait_for_a_slow_sync(broker_factory):
    b = broker_factory(env=SLOW)
    dq, tq = uname("durable"), uname("transient")
    pub = raw_channel(b)
    pub.rpc(1, "queue.declare", queue=dq, durable=True, timeout=10)  # waits for one sync
    pub.rpc(1, "confirm.select", timeout=10)
    t0 = time.monotonic()
    pub.publish(1, "", dq, b"persistent", properties=PERSISTENT)

    # Another connection: a transient queue, a consumer, a round trip. None of it needs the
    # disk, so none of it may wait for the sync that is running.
    other = raw_channel(b)
    other.rpc(1, "queue.declare", queue=tq, auto_delete=True)
    other.rpc(1, "basic.consume", queue=tq, no_ack=True)
    other.publish(1, "", tq, b"ping")
    got = other.expect("basic.deliver", timeout=10)
    assert got.body == b"ping"
    # The transient round trip is done and the confirm is still waiting for its sync.
    assert not arrived(pub, "basic.ack"), "transient traffic waited for the disk"
    ack = pub.expect("basic.ack", timeout=10)
    assert ack.delivery_tag == 1
    assert time.monotonic() - t0 >= SLOW_MS / 1000.0 * 0.9, "confirm came before its sync"


def test_passive_declares_of_durable_objects_wait_only_for_their_own_definition(broker_factory):
    """A passive declare-ok (or the declare-ok of a queue that exists) promises the object's
    definition on disk, nothing more: it must not wait for other clients' pending writes.
    It did (the whole turn's ticket), so on a full disk, where those writes are held until
    space returns, every passive declare of a durable queue or exchange hung with them
    (issue 13 item 5: bystander round trips of 2 s)."""
    b = broker_factory(env=SLOW)
    dq, other_q = uname("durable"), uname("declared")
    setup = raw_channel(b)
    setup.rpc(1, "queue.declare", queue=other_q, durable=True, timeout=10)  # on disk now
    setup.rpc(1, "queue.declare", queue=dq, durable=True, timeout=10)
    pub = raw_channel(b)
    pub.rpc(1, "confirm.select", timeout=10)
    pub.publish(1, "", dq, b"persistent", properties=PERSISTENT)
    # a round trip that promises nothing: the publish is in, its sync pending
    pub.rpc(1, "queue.declare", queue=uname("transient"), auto_delete=True, timeout=10)

    other = raw_channel(b)
    ok = other.rpc(1, "queue.declare", queue=other_q, passive=True, timeout=10)
    assert ok.queue == other_q
    other.rpc(1, "queue.declare", queue=other_q, durable=True, timeout=10)  # exists: same
    other.rpc(1, "exchange.declare", exchange="amq.direct", type="direct", passive=True,
              timeout=10)
    assert not arrived(pub, "basic.ack"), "a passive declare waited for another's publish"
    assert pub.expect("basic.ack", timeout=10).delivery_tag == 1


def test_consumer_on_a_publishing_connection_is_not_held_by_its_confirms(broker_factory):
    """Confirms wait in their channel, not in the connection's output: deliveries to a
    consumer on the same connection go out while the acks wait for the disk."""
    b = broker_factory(env=SLOW)
    dq, tq = uname("durable"), uname("transient")
    r = raw_channel(b)
    r.open_channel(2)
    r.rpc(1, "queue.declare", queue=dq, durable=True, timeout=10)
    r.rpc(2, "queue.declare", queue=tq, auto_delete=True)
    r.rpc(2, "basic.consume", queue=tq, no_ack=True)
    r.rpc(1, "confirm.select")
    t0 = time.monotonic()
    r.publish(1, "", dq, b"persistent", properties=PERSISTENT)
    r.publish(2, "", tq, b"ping")
    first = r.read_method(timeout=10)
    assert first.name == "basic.deliver" and first.body == b"ping", first
    ack = r.expect("basic.ack", timeout=10)
    assert ack.delivery_tag == 1
    assert time.monotonic() - t0 >= SLOW_MS / 1000.0 * 0.9


def test_confirms_keep_publish_order_across_a_nack(broker_factory):
    """ack(1) waits for the disk; the nack of publish 2 needs nothing of it but must not
    overtake it, and ack(3) must not be a multiple ack covering the nack."""
    b = broker_factory(env=SLOW)
    dq, full = uname("durable"), uname("full")
    r = raw_channel(b)
    r.rpc(1, "queue.declare", queue=dq, durable=True, timeout=10)
    r.rpc(1, "queue.declare", queue=full, auto_delete=True,
          arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    r.rpc(1, "confirm.select")
    r.publish(1, "", dq, b"one", properties=PERSISTENT)
    r.publish(1, "", full, b"two")
    r.publish(1, "", dq, b"three", properties=PERSISTENT)
    seen = []
    while not seen or seen[-1][1] < 3:
        m = r.read_method(timeout=10)
        if m.name in ("basic.ack", "basic.nack"):
            seen.append((m.name, m.delivery_tag, m.multiple))
    covered = {}
    done = 0
    for name, tag, multiple in seen:
        for t in (range(done + 1, tag + 1) if multiple else [tag]):
            assert t not in covered, "publish %d confirmed twice: %r" % (t, seen)
            covered[t] = name
        done = max(done, tag)
    assert covered == {1: "basic.ack", 2: "basic.nack", 3: "basic.ack"}, seen
    assert [t for _, t, _ in seen] == sorted(t for _, t, _ in seen), seen


def test_commit_ok_waits_but_not_the_other_channels(broker_factory):
    b = broker_factory(env=SLOW)
    dq, tq = uname("durable"), uname("transient")
    r = raw_channel(b)
    r.open_channel(2)
    r.rpc(1, "queue.declare", queue=dq, durable=True, timeout=10)
    r.rpc(2, "queue.declare", queue=tq, auto_delete=True)
    r.rpc(1, "tx.select")
    r.publish(1, "", dq, b"in-tx", properties=PERSISTENT)
    t0 = time.monotonic()
    r.send_method(1, "tx.commit")
    # channel 2's replies are made after the commit's: the connection's output keeps its
    # order, so they come after commit-ok. A second connection is not held at all.
    other = raw_channel(b)
    other.rpc(1, "queue.declare", queue=uname("t2"), auto_delete=True)
    assert not arrived(r, "tx.commit-ok"), "the other connection waited for the commit's sync"
    r.expect("tx.commit-ok", timeout=10)
    assert time.monotonic() - t0 >= SLOW_MS / 1000.0 * 0.9


def http(b, method, path, body=None, timeout=10):
    req = urllib.request.Request("http://%s:%d%s" % (b.host, b.mgmt_port, path), method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    req.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")  # guest:guest
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read()


def test_http_write_waits_for_its_sync_without_stalling_amqp(broker_factory):
    b = broker_factory(env=SLOW)
    q = uname("viahttp")
    result = {}

    def put():
        t = time.monotonic()
        result["status"] = http(b, "PUT", "/api/queues/%%2F/%s" % q, {"durable": True})[0]
        result["took"] = time.monotonic() - t
        result["done"] = time.monotonic()

    th = threading.Thread(target=put)
    th.start()
    time.sleep(0.2)  # let the PUT reach the broker; the test holds whichever way this goes
    other = raw_channel(b)
    tq = uname("transient")
    other.rpc(1, "queue.declare", queue=tq, auto_delete=True)
    other.rpc(1, "basic.consume", queue=tq, no_ack=True)
    other.publish(1, "", tq, b"ping")
    other.expect("basic.deliver", timeout=10)
    assert "done" not in result, "AMQP traffic waited for the HTTP request's sync"
    th.join(15)
    assert result.get("status") in (201, 204), result
    assert result["took"] >= SLOW_MS / 1000.0 * 0.9, "the HTTP reply did not wait for its sync"
    # and the queue is really there
    status, body = http(b, "GET", "/api/queues/%%2F/%s" % q)
    assert status == 200 and json.loads(body)["durable"] is True


def test_failed_sync_sends_no_confirm_and_stops_the_node(tmp_path):
    """A sync that fails leaves the disk state unknown: the node must not send the replies
    that depended on it, and stops (exit 1) instead of guessing."""
    flag = tmp_path / "fail-syncs"
    b = start_sluiced(tmp_path / "b", env={"SLUICE_FAULT": "sync_fail_if=%s" % flag})
    try:
        q = uname("durable")
        r = raw_channel(b)
        r.rpc(1, "queue.declare", queue=q, durable=True)
        r.rpc(1, "confirm.select")
        flag.write_text("on")
        r.publish(1, "", q, b"doomed", properties=PERSISTENT)
        frames = []
        try:
            while True:
                frames.append(r.read_method(timeout=10).name)
        except Exception:  # the socket closes when the node stops
            pass
        assert "basic.ack" not in frames and "basic.nack" not in frames, frames
        assert b.proc.wait(10) == 1
        log = b.log_tail()
        assert "fdatasync" in log and "stopping without sending replies" in log, log
    finally:
        b.close_clients()
        if b.proc.poll() is None:
            b.proc.kill()
            b.proc.wait()
    # The node starts again on the same data once the disk is back.
    flag.unlink()
    b2 = start_sluiced(tmp_path / "b2", data_dir=b.data_dir)
    try:
        b2.assert_alive()
    finally:
        b2.close_clients()
        assert b2.terminate() == 0


def test_fault_spec_is_checked(tmp_path):
    """A fault spec the broker does not understand stops it at once (exit 2), so a test never
    runs believing in a fault that is not there."""
    import subprocess
    from conftest import sluiced_binary
    env = dict(os.environ, SLUICE_FAULT="sync_delay=5")
    p = subprocess.run([str(sluiced_binary()), "--port", "0", "--mgmt-port", "off",
                        "--data-dir", str(tmp_path / "d")], env=env, capture_output=True,
                       timeout=10)
    assert p.returncode == 2
    assert b"SLUICE_FAULT" in p.stderr


def test_delivery_mark_is_written_before_the_delivery_even_while_a_sync_runs(broker_factory,
                                                                             tmp_path):
    """A delivery of a stored message waits for its delivery mark to be written (not synced),
    also when the mark had to wait for a slow sync in flight: after kill -9 it comes back
    redelivered, never as new (issue 12's promise, kept off the loop). Fails when deliveries
    do not wait for their marks."""
    data = tmp_path / "d"
    b = broker_factory(env=SLOW, data_dir=data)
    q = uname("marks")
    r = raw_channel(b)
    r.rpc(1, "queue.declare", queue=q, durable=True, timeout=10)
    r.rpc(1, "confirm.select")
    for body in (b"m1", b"m2"):
        r.publish(1, "", q, body, properties=PERSISTENT)
    r.expect("basic.ack", timeout=10)
    # keep a sync running (another persistent publish) while the messages are handed out
    r.publish(1, "", q, b"m3", properties=PERSISTENT)
    got = []
    for _ in range(2):
        r.send_method(1, "basic.get", queue=q, no_ack=False)
        m = r.expect("basic.get-ok", timeout=10)
        got.append(m.body)
    assert got == [b"m1", b"m2"]
    b.kill9()
    b2 = broker_factory(data_dir=data)
    r2 = raw_channel(b2)
    back = []
    while True:
        r2.send_method(1, "basic.get", queue=q, no_ack=True)
        m = r2.read_method(timeout=10)
        if m.name == "basic.get-empty":
            break
        back.append((m.body, m.redelivered))
    assert back[:2] == [(b"m1", True), (b"m2", True)], back


PACE_S = 1.0  # sync_pace_us for the pacing tests (its most): far above any sync here


def test_sync_pacing_never_holds_a_publisher_that_waits_for_each_confirm(broker_factory):
    """A channel that publishes only after its last confirm came back never pipelines: every
    sync it waits for starts at once, whatever sync_pace_us is."""
    b = broker_factory(config={"sync_pace_us": int(PACE_S * 1e6)})
    dq = uname("durable")
    r = raw_channel(b)
    r.rpc(1, "queue.declare", queue=dq, durable=True, timeout=10)
    r.rpc(1, "confirm.select")
    t0 = time.monotonic()
    for tag in range(1, 6):
        r.publish(1, "", dq, b"m%d" % tag, properties=PERSISTENT)
        ack = r.expect("basic.ack", timeout=10)
        assert ack.delivery_tag == tag
    # paced, the last four would each have waited for most of PACE_S
    assert time.monotonic() - t0 < 2 * PACE_S


def test_sync_pacing_never_holds_a_pipelining_publisher_whose_input_goes_idle(broker_factory):
    """Pacing may delay a pipelined confirm's sync only while more input keeps coming from
    its connection: a publisher that pipelined before, then publishes one message and stops
    (it waits for that confirm), gets it at once; so does another channel's waiting
    publisher, and the first channel's confirm rides along."""
    b = broker_factory(config={"sync_pace_us": int(PACE_S * 1e6)})
    dq = uname("durable")
    r = raw_channel(b)
    r.open_channel(2)
    r.rpc(1, "queue.declare", queue=dq, durable=True, timeout=10)
    r.rpc(1, "confirm.select")
    r.rpc(2, "confirm.select")
    r.publish(1, "", dq, b"one", properties=PERSISTENT)
    r.publish(1, "", dq, b"two", properties=PERSISTENT)  # before one's confirm: it pipelines
    got = 0
    while got < 2:
        m = r.expect("basic.ack", channel=1, timeout=10)
        got = m.delivery_tag
    waits = []
    for tag, body in ((3, b"three"), (4, b"four")):
        t0 = time.monotonic()
        r.publish(1, "", dq, body, properties=PERSISTENT)
        ack = r.expect("basic.ack", channel=1, timeout=10)
        assert ack.delivery_tag == tag
        waits.append(time.monotonic() - t0)
    t0 = time.monotonic()
    r.publish(1, "", dq, b"five", properties=PERSISTENT)
    r.publish(2, "", dq, b"eager", properties=PERSISTENT)
    acks = {}
    while len(acks) < 2:
        m = r.expect("basic.ack", timeout=10)
        acks[m.channel] = m.delivery_tag
    assert acks == {1: 5, 2: 1}, acks
    waits.append(time.monotonic() - t0)
    # paced, each would have waited for most of PACE_S
    assert max(waits) < PACE_S / 2, "an idle publisher waited for the pace: %s" % (
        ", ".join("%.3f s" % t for t in waits))


def test_sync_pacing_never_holds_a_publisher_that_has_filled_its_window(broker_factory):
    """A pipelining publisher with a fixed window (here 4: it publishes 4, then waits for all
    4 confirms) sends nothing until a confirm comes back: its input goes idle, so the sync
    its confirms wait for starts at once, for every window, the first one too. Paced, a
    window would wait for most of PACE_S (the old window rule held the first one, and on a
    busy machine others: 0.801 s)."""
    b = broker_factory(config={"sync_pace_us": int(PACE_S * 1e6)})
    dq = uname("durable")
    r = raw_channel(b)
    r.rpc(1, "queue.declare", queue=dq, durable=True, timeout=10)
    r.rpc(1, "confirm.select")
    seq = 0
    took = []
    for _ in range(5):
        t0 = time.monotonic()
        for _ in range(4):
            seq += 1
            r.publish(1, "", dq, b"w%d" % seq, properties=PERSISTENT)
        got = 0
        while got < seq:
            got = r.expect("basic.ack", channel=1, timeout=10).delivery_tag
        took.append(time.monotonic() - t0)
    assert max(took) < PACE_S / 2, "a full window waited for the pace: %s" % (
        ", ".join("%.3f s" % t for t in took))
