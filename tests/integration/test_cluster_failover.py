"""Issue 46: a dead process is noticed at once. Three nodes on 127.0.0.2-4 and one etcd.

- kill -9 of the leader: its followers see their stream end and its replication port refuse
  a connection, revoke its lease by id, and elect at once: the first confirm of a new message
  by the new leader comes far sooner than the lease (before: lease_ttl and etcd's tick, 2.2 s
  and more at lease_ttl 3).
- SIGSTOP of the leader: nothing refuses (the kernel still completes handshakes into the
  stopped process's backlog), so nobody fails over fast; the lease does, within lease_ttl and
  etcd's tick; the stopped leader, continued, confirms nothing of what it took meanwhile.
- the leader killed and restarted at once on the same replication port: fails over (by a
  probe that saw the port refused before the new process bound it, or by the new process
  revoking the lease its predecessor held), one serving leader, nothing confirmed lost.

Timing asserts are loose on purpose (CI's 2 cores are busy): "far sooner than the lease", not
the 300 ms target, which bench/failover.py measures over many kills."""

import json
import re
import signal
import socket
import threading
import time

import amqp
import pytest

from cluster_client import (confirm_channel, connect, drain, etcd,  # noqa: F401
                            publish_confirmed)
from helpers import IS_RABBITMQ, wait_for
from test_cluster_repl import TTL, cluster, three  # noqa: F401

pytestmark = [pytest.mark.skipif(IS_RABBITMQ, reason="Sluice's cluster"), pytest.mark.alone]

HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


def leader_key(etcd):
    v = etcd.get("/sluice/r/leader")
    return json.loads(v) if v else None


def first_confirm(nodes, queue, body, timeout):
    """Publish body with a confirm through any of nodes (a follower forwards to the leader)
    until one is confirmed; the moment it was (time.monotonic()) and the node that took it.
    Each attempt is bounded (connect 1 s, the confirm 5 s); the whole by timeout."""
    deadline = time.monotonic() + timeout
    last = None
    k = 0
    while time.monotonic() < deadline:
        b = nodes[k % len(nodes)]
        k += 1
        try:
            c = amqp.Connection(host="%s:%d" % (b.host, b.port), userid="guest",
                                password="guest", connect_timeout=1, read_timeout=5,
                                login_method="PLAIN")
            c.connect()
            try:
                ch = c.channel()
                ch.queue_declare(queue, durable=True, auto_delete=False)
                ch.confirm_select()
                ch.basic_publish_confirm(amqp.Message(body, delivery_mode=2), routing_key=queue)
                return time.monotonic(), b
            finally:
                try:
                    c.close()
                except Exception:
                    pass
        except Exception as e:  # no leader yet (320), refused, reset: try the next node
            last = e
            time.sleep(0.01)
    pytest.fail("no confirm within %.0f s: %r" % (timeout, last), pytrace=False)


def log_of(b):
    return open(b.log_path, errors="replace").read()


@pytest.mark.test_timeout(300)
def test_kill9_of_the_leader_fails_over_far_sooner_than_the_lease(cluster, etcd):
    cl, lead = three(cluster)
    took = []
    sent = []
    for k in range(3):
        conn, ch = confirm_channel(lead, "q")
        body = [b"k%d-%d" % (k, i) for i in range(50)]
        publish_confirmed(ch, "q", body)
        sent += body
        wait_for(lambda: all(n["lag_bytes"] == 0 for n in cl.peers(lead).values()), timeout=10,
                 message="followers caught up")
        epoch = leader_key(etcd)["epoch"]
        others = [b for b in cl.alive() if b is not lead]
        t0 = time.monotonic()
        lead.kill9()
        t1, via = first_confirm(others, "q", b"after%d" % k, timeout=10 * TTL)
        sent.append(b"after%d" % k)
        took.append(t1 - t0)
        lk = leader_key(etcd)
        assert lk["epoch"] > epoch and lk["node"] != lead.node_name
        # the survivors say what they saw: a refusal, then the lease revoked
        assert any(re.search(r"cluster: leader %s's replication port \S+ refused twice"
                             % re.escape(lead.node_name), log_of(b)) for b in others), \
            "no follower saw the dead leader's port refused"
        print("kill %d: kill -9 -> first confirm by the new leader %.0f ms (via %s)"
              % (k + 1, took[-1] * 1000, via.node_name))
        cl.start(int(lead.node_name[-1]))
        lead = cl.wait_leader()
        wait_for(lambda: (lambda p: len(p) == 3 and all(n["insync"] for n in p.values()))(
            cl.peers(lead)), timeout=20 * TTL, message="three nodes in sync again")
    # nothing confirmed lost, nothing twice
    got = [m[0] for m in drain(lead, "q")]
    assert sorted(got) == sorted(sent)
    took.sort()
    # the lease alone takes 0.75-1 x lease_ttl plus etcd's 0.5 s tick: 2.25 s and more here
    assert took[1] < TTL / 3.0, "kill -9 -> first confirm: %s s" % [round(t, 3) for t in took]


@pytest.mark.test_timeout(300)
def test_a_stopped_leader_is_not_deposed_early_and_confirms_nothing_after(cluster, etcd):
    cl, lead = three(cluster)
    # a long read timeout: the confirm taken while stopped must be refused, not timed out
    conn = connect(lead, read_timeout=60)
    ch = conn.channel()
    ch.queue_declare("q", durable=True, auto_delete=False)
    ch.confirm_select()
    publish_confirmed(ch, "q", [b"s%d" % i for i in range(50)])
    epoch = leader_key(etcd)["epoch"]
    others = [b for b in cl.alive() if b is not lead]
    outcome = {}

    def publish_while_stopped():
        # sent into the stopped leader's socket buffer; its confirm must never come
        try:
            ch.basic_publish_confirm(amqp.Message(b"while-stopped", delivery_mode=2),
                                     routing_key="q")
            outcome["acked"] = True
        except Exception as e:
            outcome["error"] = repr(e)

    t0 = time.monotonic()
    lead.proc.send_signal(signal.SIGSTOP)
    try:
        th = threading.Thread(target=publish_while_stopped, daemon=True)
        th.start()
        t_new = wait_for(lambda: (lambda k: k and k["epoch"] > epoch and time.monotonic())(
            leader_key(etcd)), timeout=5 * TTL, interval=0.01, message="a new leader")
        waited = t_new - t0
        print("SIGSTOP -> a new leader's key: %.0f ms" % (waited * 1000))
        # nothing refused: the lease decided. It cannot run out before 3/4 of the TTL
        # (renewed every TTL/4) and lasts at most the TTL plus etcd's 0.5 s tick
        assert waited >= 0.5 * TTL, "failed over in %.2f s: not by the lease" % waited
        assert waited <= TTL + 2.5, "failed over in %.2f s" % waited
        for b in others:
            assert "refused twice" not in log_of(b)
        t1, _ = first_confirm(others, "q", b"after", timeout=10 * TTL)
    finally:
        lead.proc.send_signal(signal.SIGCONT)
    # continued, the old leader finds its lease gone and closes its clients: the publish it
    # took while stopped is never confirmed
    th.join(30)
    assert not th.is_alive()
    assert "acked" not in outcome, "the deposed leader confirmed a message"
    wait_for(lambda: "no longer the leader" in log_of(lead), timeout=10,
             message="the old leader stepped down")
    new = cl.wait_leader()
    got = [m[0] for m in drain(new, "q")]
    assert got[:50] == [b"s%d" % i for i in range(50)]
    assert b"after" in got


def free_port_on_all(hosts):
    for _ in range(50):
        s = socket.socket()
        s.bind((hosts[0], 0))
        port = s.getsockname()[1]
        s.close()
        ok = True
        for h in hosts[1:]:
            t = socket.socket()
            try:
                t.bind((h, port))
            except OSError:
                ok = False
            finally:
                t.close()
        if ok:
            return port
    pytest.fail("no port free on every host")


@pytest.mark.test_timeout(300)
def test_a_leader_restarted_at_once_on_the_same_port(cluster, etcd):
    port = free_port_on_all(HOSTS)
    cl, lead = three(cluster, **{"cluster.replication_port": str(port)})
    conn, ch = confirm_channel(lead, "q")
    sent = [b"r%d" % i for i in range(100)]
    publish_confirmed(ch, "q", sent)
    epoch = leader_key(etcd)["epoch"]
    others = [b for b in cl.alive() if b is not lead]
    t0 = time.monotonic()
    lead.kill9()
    again = cl.start(int(lead.node_name[-1]))  # the same address and replication port
    t1, via = first_confirm(others + [again], "q", b"after", timeout=10 * TTL)
    print("kill -9 and restart on port %d -> first confirm %.0f ms (via %s)"
          % (port, (t1 - t0) * 1000, via.node_name))
    assert leader_key(etcd)["epoch"] > epoch
    assert t1 - t0 < TTL + 2.5
    how = [b.node_name for b in others if "refused twice" in log_of(b)] + \
        [again.node_name for _ in [0] if "an earlier process of this node led" in log_of(again)]
    print("noticed by: %s" % (how or "the lease"))
    # exactly one node serves as leader, and it has everything confirmed
    lead2 = cl.wait_leader()
    wait_for(lambda: (lambda p: len(p) == 3 and all(n["insync"] for n in p.values()))(
        cl.peers(lead2)), timeout=20 * TTL, message="the restarted node back in sync")

    def serves(b):
        try:
            st = cl.status(b)
        except OSError:
            return False
        return st["leader"] == b.node_name and any(
            n["name"] == b.node_name and n["role"] == "leader" for n in st["nodes"])
    assert [b for b in cl.alive() if serves(b)] == [lead2]
    got = [m[0] for m in drain(lead2, "q")]
    assert sorted(got) == sorted(sent + [b"after"])


@pytest.mark.test_timeout(300)
def test_a_restarted_leader_revokes_its_predecessors_lease(cluster, etcd):
    """The restart wins the race against every probe (the followers are stopped while the
    leader is killed and started again, so when they look its port answers): the new process
    finds the leader key naming its node under a lease that is not its own, and revokes it,
    instead of the cluster waiting for that lease."""
    port = free_port_on_all(HOSTS)
    cl, lead = three(cluster, **{"cluster.replication_port": str(port)})
    conn, ch = confirm_channel(lead, "q")
    sent = [b"p%d" % i for i in range(100)]
    publish_confirmed(ch, "q", sent)
    epoch = leader_key(etcd)["epoch"]
    others = [b for b in cl.alive() if b is not lead]
    for b in others:
        b.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        lead.kill9()
        again = cl.start(int(lead.node_name[-1]))
        wait_for(lambda: "an earlier process of this node led" in log_of(again), timeout=TTL,
                 interval=0.01, message="the restarted node revoking its predecessor's lease")
        t_revoked = time.monotonic()
    finally:
        for b in others:
            b.proc.send_signal(signal.SIGCONT)
    print("kill -9, restart, the predecessor's lease revoked: %.0f ms" % (
        (t_revoked - t0) * 1000))
    t1, via = first_confirm(others + [again], "q", b"after", timeout=10 * TTL)
    print("-> first confirm %.0f ms after the kill (via %s)" % ((t1 - t0) * 1000, via.node_name))
    assert leader_key(etcd)["epoch"] > epoch
    # the old lease went before it could expire (renewed every TTL/4: at least 0.75 TTL)
    assert t_revoked - t0 < 0.75 * TTL
    lead2 = cl.wait_leader()
    got = [m[0] for m in drain(lead2, "q")]
    assert sorted(got) == sorted(sent + [b"after"])
