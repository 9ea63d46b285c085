"""A full disk under confirmed load in a three-node cluster (issue 43 part 4): nothing confirmed
is lost, no node crashes.

Each node's data directory is on a small tmpfs of its own (a filler file fills exactly one
node's disk; the mount is made here and always unmounted). A pipelined publisher (persistent
messages, publisher confirms, up to WINDOW in flight) records which bodies were confirmed;
the checker (`check`) then asks that every confirmed body is read back, once, in publish
order (unconfirmed ones may or may not be there: publish again, as with RabbitMQ).

- The leader's disk full: the filler takes every free byte, and once the node has released
  its space reserve (docs/durability.md "Out of space is not fatal") the filler takes that
  too, so the writes the leader holds cannot go through. The publisher is blocked
  (`connection.blocked`) and what it published after the disk filled is not confirmed
  while the disk stays full. Then either the disk gets room again (the held writes go
  through, the alarm clears, the confirms and the publisher go on), or the leader is killed
  -9 with the disk still full: the new leader has every confirmed message, and the old one,
  its disk emptied, rejoins as a follower.
- A follower's disk full: it cannot apply the leader's groups (ENOSPC), so confirms wait
  for it at most until it leaves the ISR (its oldest unacked group older than lease_ttl,
  docs/cluster.md "ISR"); with min_insync_replicas 2 the other two go on confirming. Room
  back, it catches up and rejoins the ISR; the leader and the other follower killed -9, it
  leads alone and has every confirmed message.

Uses etcd and mounts: run alone (pytest.mark.alone)."""

import contextlib
import os
import socket
import subprocess
import threading
import time

import amqp
import pytest

from cluster_client import cluster_secret, drain, etcd  # noqa: F401
from conftest import start_sluiced, stop_sluiced
from helpers import IS_RABBITMQ, wait_for

pytestmark = [pytest.mark.alone, pytest.mark.skipif(IS_RABBITMQ, reason="Sluice's cluster")]

TTL = 2
HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
DISK_MB = 48
WINDOW = 64
BODY_PAD = b"." * 2000


def body_of(i):
    return b"d%07d" % i + BODY_PAD


# ------------------------------------------------------------------------------------ checker
def check(confirmed, got):
    """Every confirmed body is in got exactly once and in publish order (got: the bodies read
    back, in queue order). Unconfirmed bodies may be present (at most once each). Raises
    AssertionError naming what is wrong."""
    seen = {}
    for pos, b in enumerate(got):
        assert b not in seen, "body %r read twice (positions %d and %d)" % (b[:8], seen[b], pos)
        seen[b] = pos
    missing = [b[:8] for b in confirmed if b not in seen]
    assert not missing, "%d confirmed message(s) lost, first %r" % (len(missing), missing[:5])
    order = [seen[b] for b in confirmed]
    bad = next((k for k in range(1, len(order)) if order[k] < order[k - 1]), None)
    assert bad is None, "confirmed messages out of order at %r" % (confirmed[bad][:8],)


def test_the_checker_catches_a_lost_a_duplicated_and_a_reordered_message():
    """The checker can fail: one confirmed message dropped, one read twice, two swapped."""
    confirmed = [body_of(i) for i in range(100)]
    check(confirmed, confirmed + [body_of(100)])  # one unconfirmed extra is allowed
    for bad in (confirmed[:41] + confirmed[42:],               # one lost
                confirmed[:50] + [confirmed[49]] + confirmed[50:],  # one duplicated
                confirmed[:10] + [confirmed[11], confirmed[10]] + confirmed[12:]):  # swapped
        with pytest.raises(AssertionError):
            check(confirmed, bad)


# ----------------------------------------------------------------------------- the publisher
class Publisher:
    """A thread publishing body_of(i), i = 0, 1, ..., persistent, with up to WINDOW
    unconfirmed at once, until stop() or its connection fails (kept in .error). .confirmed:
    the bodies whose ack came, in publish order; .nacked: those nacked; .published: how many
    were sent; .blocked / .unblocked: the times connection.blocked / unblocked came. It sends
    nothing while blocked (the broker stops reading it then)."""

    def __init__(self, b, queue, prefix=b""):
        self.b, self.queue, self.prefix = b, queue, prefix
        self.confirmed, self.nacked = [], []
        self.published = 0
        self.blocked, self.unblocked = [], []
        self.error = None
        self._inflight = {}  # delivery tag -> body
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _settle(self, tag, multiple, into):
        tags = sorted(t for t in self._inflight if t <= tag) if multiple else [tag]
        for t in tags:
            body = self._inflight.pop(t, None)
            if body is not None:
                into.append(body)

    def is_blocked(self):
        return len(self.blocked) > len(self.unblocked)

    def _run(self):
        conn = None
        try:
            conn = amqp.Connection(
                host="%s:%d" % (self.b.host, self.b.port), userid="guest", password="guest",
                connect_timeout=5, read_timeout=30, write_timeout=10, login_method="PLAIN",
                on_blocked=lambda reason: self.blocked.append(time.monotonic()),
                on_unblocked=lambda: self.unblocked.append(time.monotonic()))
            conn.connect()
            ch = conn.channel()
            ch.queue_declare(self.queue, durable=True, auto_delete=False)
            ch.confirm_select()
            ch.events["basic_ack"].add(lambda t, m: self._settle(t, m, self.confirmed))
            ch.events["basic_nack"].add(lambda t, m: self._settle(t, m, self.nacked))
            tag = 0
            while not self._stop.is_set():
                if not self.is_blocked() and len(self._inflight) < WINDOW:
                    body = self.prefix + body_of(self.published)
                    tag += 1
                    self._inflight[tag] = body
                    ch.basic_publish(amqp.Message(body, delivery_mode=2), routing_key=self.queue)
                    self.published += 1
                    timeout = 0
                else:
                    timeout = 0.05
                with contextlib.suppress(socket.timeout):
                    conn.drain_events(timeout=timeout)
        except Exception as e:  # the test says which errors it expects
            self.error = e
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.collect()

    def unconfirmed(self):
        return len(self._inflight)

    def stop(self, timeout=30):
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the publisher did not stop in %d s" % timeout


# ------------------------------------------------------------------------------- the cluster
def mount_disk(path):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm,mode=0700" % DISK_MB, "tmpfs",
                    str(path)], check=True)


def fill(disk):
    """A filler file (grown, not replaced) takes every free byte of the tmpfs; bounded."""
    chunk = b"\0" * (1 << 20)
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(DISK_MB + 2):  # a little more than the disk can take
            try:
                if os.write(fd, chunk) <= 0:
                    break
            except OSError:  # ENOSPC: full, which is the point
                break
        # the last partial megabyte, page by page
        for _ in range(256):
            try:
                if os.write(fd, chunk[:4096]) <= 0:
                    break
            except OSError:
                break
    finally:
        os.close(fd)


def unfill(disk):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(disk / "filler")


class Cluster:
    def __init__(self, tmp, etcd, limit):
        self.tmp, self.etcd, self.limit = tmp, etcd, limit
        self.nodes = {}
        self.runs = {}
        self.disks = {}
        self.mounted = []
        for i in range(3):
            self.disks["sluice@n%d" % i] = tmp / ("disk-n%d" % i)

    def start(self, i):
        name = "sluice@n%d" % i
        run = self.runs.get(name, 0)
        self.runs[name] = run + 1
        conf = {
            "cluster_formation.peer_discovery_backend": "etcd",
            "cluster_formation.etcd.endpoints.1": self.etcd.endpoint,
            "cluster_formation.etcd.cluster_name": "d",
            "cluster.replication_port": "0",
            "cluster.lease_ttl": str(TTL),
            "cluster.advertise_address": HOSTS[i],
            "cluster.min_insync_replicas": "2",
            "cluster.secret_file": cluster_secret(self.tmp / "cluster.secret"),
            # small disks: a 2 MiB reserve, the alarm below `limit` free (0: never, so the
            # disk fills up to ENOSPC)
            "disk_free_limit": str(self.limit),
            "disk_reserve": "2M",
        }
        # the data directory one level down: a full copy makes DATA.joining beside it (on
        # the same file system)
        b = start_sluiced(self.tmp / ("n%d-run%d" % (i, run)), args=("--node-name", name),
                          config=conf, data_dir=self.disks[name] / "data", host=HOSTS[i])
        b.node_name = name
        self.nodes[name] = b
        return b

    def alive(self):
        return [b for b in self.nodes.values() if b.proc.poll() is None]

    def disk(self, b):
        return self.disks[b.node_name]

    def log(self, b):
        return open(b.log_path, errors="replace").read()

    def status(self, b):
        from cluster_client import cluster_status
        return cluster_status(b, timeout=3)

    def leader(self):
        for b in self.alive():
            if "cluster: leader of d, epoch" not in self.log(b):
                continue
            try:
                c = self.status(b)
            except OSError:
                continue
            if c["leader"] == b.node_name and any(
                    n["name"] == b.node_name and n["role"] == "leader" for n in c["nodes"]):
                return b
        return None

    def wait_leader(self, timeout=10 * TTL):
        return wait_for(self.leader, timeout=timeout, message="a serving leader")

    def peers(self, lead):
        return {n["name"]: n for n in self.status(lead)["nodes"]}

    def insync(self, lead):
        return sorted(n for n, v in self.peers(lead).items() if v["insync"])

    def wait_all_insync(self, lead, timeout=15 * TTL):
        wait_for(lambda: len(self.insync(lead)) == 3, timeout=timeout,
                 message="three nodes in sync")

    def logs(self):
        return "\n".join("--- %s ---\n%s" % (n, b.log_tail(60)) for n, b in self.nodes.items())


@pytest.fixture
def make_cluster(tmp_path, etcd):
    """make(limit) -> (cluster, leader): three nodes, each on a tmpfs of its own, all in sync,
    with disk_free_limit = limit. Stopped (SIGTERM, exit 0) and unmounted after the test."""
    made = []

    def make(limit):
        cl = Cluster(tmp_path, etcd, limit)
        made.append(cl)
        for d in cl.disks.values():
            mount_disk(d)
            cl.mounted.append(d)
        for i in range(3):
            cl.start(i)
        lead = cl.wait_leader()
        cl.wait_all_insync(lead)
        return cl, lead

    try:
        yield make
        errors = []
        for cl in made:
            for b in cl.alive():
                try:
                    stop_sluiced(b)  # exit 0 after SIGTERM: no crash, also after a full disk
                except BaseException as e:
                    errors.append(str(e))
        if errors:
            pytest.fail("\n".join(errors), pytrace=False)
    finally:
        for cl in made:
            for b in cl.alive():
                with contextlib.suppress(Exception):
                    b.kill9()
            for d in cl.mounted:
                subprocess.run(["umount", "-l", str(d)], check=False)


# How the leader's disk fills: "alarm", the free space under disk_free_limit (4 MB) blocks
# publishers before a write fails; "enospc", no limit (0), so writes fail for lack of space
# (held in memory, docs/durability.md "Out of space is not fatal").
LIMITS = {"alarm": 4000000, "enospc": 0}


def fill_leader(cl, lead, pub, how):
    """Fill the leader's disk under the load. With "enospc", fill it again once the leader
    released its space reserve, so that the writes it holds cannot go through."""
    disk = cl.disk(lead)
    fill(disk)
    wait_for(lambda: pub.is_blocked() or pub.error, timeout=10,
             message="the publisher blocked once the leader's disk is full")
    assert pub.error is None, pub.error
    if how == "enospc":
        wait_for(lambda: "store: no space left for writes" in cl.log(lead), timeout=10,
                 message="the leader out of space for its writes")
        fill(disk)


def settle(pub, quiet=1.0, timeout=10):
    """Wait until no confirm came for `quiet` seconds; returns the count confirmed."""
    deadline = time.monotonic() + timeout
    last, since = len(pub.confirmed), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        n = len(pub.confirmed)
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return n
    raise AssertionError("confirms never stopped with the leader's disk full")


def bodies(msgs):
    return [m[0] for m in msgs]


@pytest.mark.test_timeout(120)
@pytest.mark.parametrize("how", sorted(LIMITS))
def test_the_leaders_disk_full_then_room_again(make_cluster, how):
    cl, lead = make_cluster(LIMITS[how])
    pub = Publisher(lead, "q").start()
    try:
        wait_for(lambda: len(pub.confirmed) >= 500 or pub.error, timeout=20,
                 message="500 confirms before the disk fills")
        assert pub.error is None, pub.error
        fill_leader(cl, lead, pub, how)
        held = settle(pub)
        # while the disk is full, what was published after it filled is not confirmed
        time.sleep(1.0)
        assert len(pub.confirmed) == held, "confirms went on with the leader's disk full"
        assert pub.unconfirmed() > 0 or pub.published == held + len(pub.nacked)
        assert pub.is_blocked()
        assert all(b.proc.poll() is None for b in cl.nodes.values()), cl.logs()
        # room again: the held writes go through, the alarm clears, confirms go on
        unfill(cl.disk(lead))
        wait_for(lambda: len(pub.confirmed) >= held + 500 or pub.error, timeout=30,
                 message="confirms going on once the disk has room again")
        assert pub.error is None, pub.error
    finally:
        pub.stop()
    assert pub.unblocked, "connection.unblocked once the disk had room"
    log = cl.log(lead)
    assert "disk alarm: blocking publishers" in log and "disk alarm cleared" in log
    if how == "enospc":
        assert "until space returns" in log and "space is back" in log
    got = bodies(drain(lead, "q", timeout=30))
    check(pub.confirmed, got)
    assert not pub.nacked
    print("leader's disk: %d confirmed before it was full, %d published, %d read back"
          % (held, pub.published, len(got)))
    assert all(b.proc.poll() is None for b in cl.nodes.values()), cl.logs()


@pytest.mark.test_timeout(120)
@pytest.mark.parametrize("how", sorted(LIMITS))
def test_the_leaders_disk_full_then_kill9_of_the_leader(make_cluster, how):
    cl, lead = make_cluster(LIMITS[how])
    pub = Publisher(lead, "q").start()
    try:
        wait_for(lambda: len(pub.confirmed) >= 500 or pub.error, timeout=20,
                 message="500 confirms before the disk fills")
        assert pub.error is None, pub.error
        fill_leader(cl, lead, pub, how)
        held = settle(pub)
        assert all(b.proc.poll() is None for b in cl.nodes.values()), cl.logs()
        if how == "enospc":  # writes held in memory, not only publishers blocked
            assert "until space returns" in cl.log(lead)
        lead.kill9()
        pub.stop()
    finally:
        pub.stop()
    new = cl.wait_leader()
    assert new is not lead
    got = bodies(drain(new, "q", timeout=30))
    check(pub.confirmed, got)
    assert len(pub.confirmed) == held
    print("leader's disk full, then kill -9: %d confirmed, %d published, %d on the new leader"
          % (held, pub.published, len(got)))
    # the old leader, its disk emptied, rejoins as a follower (it led: a full copy)
    unfill(cl.disk(lead))
    old = cl.start(int(lead.node_name[-1]))
    wait_for(lambda: cl.peers(new).get(old.node_name, {}).get("insync"), timeout=20 * TTL,
             message="the old leader in sync as a follower")


@pytest.mark.test_timeout(120)
def test_a_followers_disk_full_then_room_again(make_cluster):
    cl, lead = make_cluster(LIMITS["alarm"])
    f, other = [b for b in cl.alive() if b is not lead]
    pub = Publisher(lead, "q").start()
    try:
        wait_for(lambda: len(pub.confirmed) >= 500 or pub.error, timeout=20,
                 message="500 confirms before the disk fills")
        assert pub.error is None, pub.error
        fill(cl.disk(f))
        t0 = time.monotonic()
        # it cannot apply: it leaves the ISR (lease_ttl after its oldest unacked group),
        # and with two copies of three the confirms go on
        wait_for(lambda: f.node_name not in cl.insync(lead), timeout=10 * TTL,
                 message="the full follower out of the ISR")
        left = time.monotonic() - t0
        n = len(pub.confirmed)
        wait_for(lambda: len(pub.confirmed) >= n + 300 or pub.error, timeout=10 * TTL,
                 message="confirms going on with two in sync")
        assert pub.error is None, pub.error
        assert f.proc.poll() is None, cl.log(f)
        unfill(cl.disk(f))
        wait_for(lambda: f.node_name in cl.insync(lead), timeout=15 * TTL,
                 message="the follower back in the ISR once its disk has room")
        n = len(pub.confirmed)
        wait_for(lambda: len(pub.confirmed) >= n + 100 or pub.error, timeout=10 * TTL,
                 message="confirms with the follower back")
    finally:
        pub.stop()
    assert pub.error is None, pub.error
    assert not pub.nacked
    print("follower's disk full: out of the ISR after %.2f s, %d confirmed" %
          (left, len(pub.confirmed)))
    # its copy is whole: the leader and the other follower killed, it leads alone and has
    # every confirmed message
    wait_for(lambda: cl.peers(lead)[f.node_name]["lag_bytes"] == 0, timeout=10 * TTL,
             message="the follower caught up")
    other.kill9()
    lead.kill9()
    new = cl.wait_leader(timeout=15 * TTL)
    assert new is f
    got = bodies(drain(new, "q", timeout=30))
    check(pub.confirmed, got)


@pytest.mark.test_timeout(120)
def test_a_followers_disk_full_with_the_other_follower_dead_consumers_keep_going(make_cluster):
    """One follower dead, the other's disk full: the leader is alone in the ISR, below
    min_insync_replicas: publishers are blocked and confirms wait, but consumers keep going
    (docs/cluster.md "What a client sees"): a delivery does not wait for its delivery mark
    to reach the followers' disks. Room back, the follower rejoins and confirms go on."""
    cl, lead = make_cluster(LIMITS["alarm"])
    f, other = [b for b in cl.alive() if b is not lead]
    pub = Publisher(lead, "q").start()
    try:
        wait_for(lambda: len(pub.confirmed) >= 300 or pub.error, timeout=20,
                 message="300 confirms")
    finally:
        pub.stop()
    assert pub.error is None, pub.error
    other.kill9()
    fill(cl.disk(f))
    # a second publisher makes groups the full follower cannot apply: it leaves the ISR
    # (to the same queue: a new durable queue's declare-ok would wait for the disks too)
    pub2 = Publisher(lead, "q", prefix=b"second-").start()
    try:
        wait_for(lambda: cl.insync(lead) == [lead.node_name], timeout=10 * TTL,
                 message="the leader alone in the ISR")
    finally:
        pub2.stop()
    assert pub2.error is None, pub2.error
    assert "cluster alarm: blocking publishers (cluster: fewer than 2 in-sync replicas)" in \
        cl.log(lead)
    t0 = time.monotonic()
    got = bodies(drain(lead, "q", timeout=30))
    took = time.monotonic() - t0
    check(pub.confirmed, got)
    print("below min_insync_replicas: %d messages consumed in %.2f s" % (len(got), took))
    assert f.proc.poll() is None, cl.log(f)
    unfill(cl.disk(f))
    wait_for(lambda: f.node_name in cl.insync(lead), timeout=15 * TTL,
             message="the follower back in the ISR once its disk has room")
    wait_for(lambda: "cluster alarm cleared" in cl.log(lead), timeout=5 * TTL,
             message="the cluster alarm cleared")
    from cluster_client import publish_confirmed_to
    publish_confirmed_to(lead, "q", [b"after"])
    assert bodies(drain(lead, "q")) == [b"after"]


@pytest.mark.test_timeout(120)
def test_deliveries_waiting_when_the_isr_shrank_below_min_go_out(make_cluster):
    """A consumer (prefetch 10) acks while one follower is dead and the other's disk is full:
    its next deliveries wait for their delivery marks, which the full follower never acks;
    once it leaves the ISR (below min_insync_replicas) they stop waiting and the consumer goes
    on to the end of the queue."""
    from cluster_client import connect
    cl, lead = make_cluster(LIMITS["alarm"])
    f, other = [b for b in cl.alive() if b is not lead]
    pub = Publisher(lead, "q").start()
    try:
        wait_for(lambda: len(pub.confirmed) >= 300 or pub.error, timeout=20,
                 message="300 confirms")
    finally:
        pub.stop()
    assert pub.error is None, pub.error
    conn = connect(lead)
    got = []
    try:
        ch = conn.channel()
        ch.basic_qos(0, 10, False)
        ch.basic_consume("q", callback=got.append)

        def pump(enough, timeout):
            deadline = time.monotonic() + timeout
            while not enough() and time.monotonic() < deadline:
                with contextlib.suppress(socket.timeout):
                    conn.drain_events(timeout=0.2)
            return enough()

        assert pump(lambda: len(got) >= 10, 10), "the first 10 deliveries"
        other.kill9()
        fill(cl.disk(f))
        for m in got[:10]:  # the next 10 are delivered while the full follower still counts
            ch.basic_ack(m.delivery_tag)
        # and a publisher makes groups the full follower cannot apply: it leaves the ISR
        pub2 = Publisher(lead, "q", prefix=b"second-").start()
        try:
            wait_for(lambda: cl.insync(lead) == [lead.node_name], timeout=10 * TTL,
                     message="the leader alone in the ISR")
        finally:
            pub2.stop()
        assert pub2.error is None, pub2.error
        assert pump(lambda: len(got) >= 20, 5 * TTL), \
            "deliveries made before the ISR shrank still wait (%d delivered)" % len(got)
        acked = 10
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(got) < pub.published + pub2.published:
            for m in got[acked:]:
                ch.basic_ack(m.delivery_tag)
            acked = len(got)
            if not pump(lambda: len(got) > acked, 5):
                break
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    check(pub.confirmed, [m.body for m in got])
    assert f.proc.poll() is None, cl.log(f)
