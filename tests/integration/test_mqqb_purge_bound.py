"""A purge or deletion of a queue holding many paged-out MSMQ messages that asked for receive
NACKs (issue 33): the NACK_Q_PURGED / NACK_Q_DELETED acknowledgements need each of them read
back from the store, and that must not stall the event loop. A bystander process keeps doing
small AMQP round trips on another connection during the purge; its worst round trip is
bounded (generously: a shared 2-core machine), and every NACK still arrives, once.

The admin queue is a queue of this node (fmt(aq)): 20k NACKs are counted there."""

import multiprocessing
import os
import time
import urllib.request

import pika
import pytest

import mqqb_peer as mq
from helpers import uname, wait_for
from test_mqqb import declare, fmt, msmq_port

# Runs alone, after the parallel pass (tests/run.sh): a bystander's wall-clock round trip bound.
pytestmark = pytest.mark.alone

N = int(os.environ.get("SLUICE_PURGE_BOUND_N", "20000"))
# The bystander's worst round trip while the purge's NACKs are made (seconds). Generous for a
# busy shared machine, far below what reading N messages in one loop turn costs.
WORST_RTT = float(os.environ.get("SLUICE_PURGE_BOUND_RTT", "0.5"))
BODY = b"w" * 1024
# CPU time of one loop turn that counts as a stall (the node's own loop_cpu_stats counter):
# what the machine's other load cannot inflate, unlike the bystander's wall-clock round trip.
STALL_MS = 100
PAGING = {"listeners.msmq": "0", "memory_budget": "64k", "loop_cpu_stats": "1"}


def _bystander(port, worst, count, run, stop):
    """Publish-confirm round trips on a queue of its own, in a process of its own (no GIL
    shared with the test), recording the slowest while run is set."""
    c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = c.channel()
    ch.queue_declare("bystander", auto_delete=False)
    ch.confirm_delivery()
    deadline = time.monotonic() + 600
    while not stop.value and time.monotonic() < deadline:
        t0 = time.monotonic()
        ch.basic_publish("", "bystander", b"x")
        ch.basic_get("bystander", auto_ack=True)
        rtt = time.monotonic() - t0
        if run.value:
            with worst.get_lock():
                worst.value = max(worst.value, rtt)
                count.value += 1
        time.sleep(0.005)
    c.close()


class Bystander:
    def __init__(self, port):
        ctx = multiprocessing.get_context("fork")
        self.worst, self.count = ctx.Value("d", 0.0), ctx.Value("l", 0)
        self.run, self.stop = ctx.Value("b", 1), ctx.Value("b", 0)
        self.proc = ctx.Process(target=_bystander,
                                args=(port, self.worst, self.count, self.run, self.stop),
                                daemon=True)
        self.proc.start()
        wait_for(lambda: self.count.value >= 3, 20, message="bystander never ran")

    def reset(self):
        with self.worst.get_lock():
            self.worst.value, self.count.value = 0.0, 0

    def close(self):
        self.stop.value = 1
        self.proc.join(15)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def ballast(b, n=200):
    c = b.pika()
    ch = c.channel()
    name = uname("ballast")
    ch.queue_declare(name, durable=True)
    ch.confirm_delivery()
    for _ in range(n):
        ch.basic_publish("", name, b"b" * 1024, pika.BasicProperties(delivery_mode=2))
    c.close()


def fill(b, q, aq, n):
    """n recoverable messages into q, each asking for receive NACKs to aq; returns the
    sender's GUID once all are on disk."""
    s = mq.Sender("127.0.0.1", msmq_port(b))
    ec, _ = s.establish(window=64, rec_ack_timeout=500)
    assert not ec.refused
    for i in range(1, n + 1):
        s.send(fmt(q), BODY + b"%d" % i, recoverable=True, message_id=i, admin=fmt(aq),
               ack_flags=mq.ACK_NACK_RECEIVE)
        if i % 32 == 0:  # within the window of 64 the session promised
            s.wait(lambda: len(s.rec_acked) >= i - 32, timeout=60)
    s.wait(lambda: len(s.rec_acked) >= n, timeout=120)
    s.close()
    return s.guid


def cpu_stalls(b):
    """Loop turns so far that took more than STALL_MS of CPU (GET /metrics)."""
    name = 'sluice_loop_turns_cpu_over_total{ms="%d"} ' % STALL_MS
    url = "http://%s:%d/metrics" % (b.host, b.mgmt_port)
    with urllib.request.urlopen(url, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name):
                return int(float(line[len(name):]))
    raise AssertionError("no %s in /metrics" % name)


def count(b, q):
    return b.amqp().channel().queue_declare(q, passive=True).message_count


def nack_ids(b, aq, n, cls):
    """Drain aq: the message numbers of its n NACKs of class cls (the correlation id's)."""
    c = b.pika()
    ch = c.channel()
    ids = []
    for _ in range(n + 1):
        m, props, _body = ch.basic_get(aq, auto_ack=True)
        if m is None:
            break
        assert int(props.headers["x-msmq-class"]) == cls
        ids.append(int(props.correlation_id.rsplit("\\", 1)[1]))
    c.close()
    return ids


def run_removal(broker_factory, how):
    b = broker_factory(config=PAGING)
    q, aq = uname("deep"), uname("admin")
    declare(b, q)
    declare(b, aq)
    ballast(b)
    fill(b, q, aq, N)
    assert count(b, q) == N
    by = Bystander(b.port)
    try:
        by.reset()
        stalls0 = cpu_stalls(b)
        t0 = time.monotonic()
        ch = b.amqp().channel()
        if how == "purge":
            assert ch.queue_purge(q) == N
            assert count(b, q) == 0  # gone at once for consumers
            cls = mq.CLASS_NACK_Q_PURGED
        else:
            ch.queue_delete(q)
            cls = mq.CLASS_NACK_Q_DELETED
        wait_for(lambda: count(b, aq) >= N, 120, message="NACKs in the admin queue")
        took = time.monotonic() - t0
        worst, rounds = by.worst.value, by.count.value
        stalls = cpu_stalls(b) - stalls0
    finally:
        by.close()
    print("purge-bound %s: n=%d nacks in %.2fs worst_rtt=%.1fms over %d round trips, "
          "%d turns over %d ms of CPU" % (how, N, took, worst * 1000, rounds, stalls, STALL_MS))
    ids = nack_ids(b, aq, N, cls)
    assert sorted(ids) == list(range(1, N + 1))  # every one, once
    assert stalls == 0, "%d loop turns over %d ms of CPU during the %s" % (stalls, STALL_MS, how)
    assert worst < WORST_RTT, "worst round trip %.3fs during the %s" % (worst, how)
    b.assert_alive()


@pytest.mark.test_timeout(240)
def test_purge_of_deep_paged_watched_queue_keeps_the_loop_responsive(broker_factory):
    run_removal(broker_factory, "purge")


@pytest.mark.test_timeout(240)
def test_delete_of_deep_paged_watched_queue_keeps_the_loop_responsive(broker_factory):
    run_removal(broker_factory, "delete")
