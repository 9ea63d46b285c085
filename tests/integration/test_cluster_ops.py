"""The cluster's operator actions (issue 31, docs/cluster.md "Operating a cluster"): status
(GET /api/cluster, sluicectl cluster status), a clean hand-over (POST /api/cluster/step-down,
sluicectl cluster step-down [--to NODE]) and removing a member (DELETE
/api/cluster/nodes/NAME, sluicectl cluster remove NODE), on three nodes on 127.0.0.2-4 and a
private etcd (test_cluster_repl.py's fixtures). Before acting, every test waits until the
leader shows each follower in sync with no lag."""

import base64
import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request

import amqp
import pytest

from conftest import sluiced_binary
from helpers import IS_RABBITMQ, wait_for
from test_cluster_repl import TTL, cluster, connect, drain, etcd, etcd_node  # noqa: F401

pytestmark = pytest.mark.skipif(IS_RABBITMQ, reason="Sluice's cluster")

SLUICECTL = sluiced_binary().parent / "sluicectl"


def api(b, method, path, body=None, user="guest", password="guest", timeout=30):
    """(status, parsed JSON or text) of one request to b's HTTP port."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://%s:%d%s" % (b.host, b.mgmt_port, path), data=data,
                                 method=method)
    req.add_header("Authorization",
                   "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode())
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def ctl(b, *args, ok=True, user="guest", password="guest"):
    cmd = [str(SLUICECTL), "--host", b.host, "--port", str(b.mgmt_port), "--user", user,
           "--password", password] + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if ok:
        assert p.returncode == 0, "%s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr)
    return p


def settled(cl, lead, n=3):
    """Every follower in the leader's ISR with no lag (bytes and ms)."""
    def ok():
        nodes = cl.peers(lead)
        return len(nodes) == n and all(
            v["insync"] and v["lag_bytes"] == 0 and v["lag_ms"] == 0 for v in nodes.values())
    wait_for(ok, timeout=15 * TTL, message="%d nodes in sync with no lag" % n)


ADMIN = ("ops", "ops-secret")  # guest cannot come through a follower (loopback_users)
MONITOR = ("watcher", "watcher-secret")


def three(cluster, **extra):
    cl = cluster(**extra)
    for i in range(3):
        cl.start(i)
    lead = cl.wait_leader()
    for (u, pw), tags in ((ADMIN, "administrator"), (MONITOR, "monitoring")):
        assert api(lead, "PUT", "/api/users/" + u, {"password": pw, "tags": tags})[0] in (201, 204)
        assert api(lead, "PUT", "/api/permissions/%2F/" + u,
                   {"configure": ".*", "write": ".*", "read": ".*"})[0] in (201, 204)
    settled(cl, lead)
    return cl, lead


def insync(cl, lead, name):
    return cl.peers(lead).get(name, {}).get("insync", False)


def new_leader(cl, old, timeout=15 * TTL):
    def other():
        lead = cl.leader()
        return lead if lead is not None and lead is not old else None
    return wait_for(other, timeout=timeout, message="a new leader")


def publish_confirmed(b, queue, bodies):
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, auto_delete=False)
    ch.confirm_select()
    for body in bodies:
        ch.basic_publish_confirm(amqp.Message(body, delivery_mode=2), routing_key=queue)
    conn.close()


@pytest.mark.test_timeout(240)
def test_status_over_http_and_sluicectl(cluster):
    cl, lead = three(cluster)
    st, view = api(lead, "GET", "/api/cluster")
    assert st == 200 and view["leader"] == lead.node_name and view["epoch"] >= 1
    f = next(b for b in cl.alive() if b is not lead)
    # a follower's HTTP port answers the same (forwarded to the leader)
    st2, view2 = api(f, "GET", "/api/cluster", user=ADMIN[0], password=ADMIN[1])
    assert st2 == 200 and view2["leader"] == lead.node_name
    out = ctl(f, "cluster", "status", user=ADMIN[0], password=ADMIN[1]).stdout
    lines = out.strip().splitlines()
    assert lines[0] == "leader  %s" % lead.node_name, out
    assert lines[1] == "epoch   %d" % view["epoch"], out
    assert lines[2].split() == ["name", "role", "insync", "lag_bytes", "lag_ms", "amqp", "http"]
    rows = {l.split()[0]: l.split() for l in lines[3:]}
    assert set(rows) == {b.node_name for b in cl.alive()}
    assert rows[lead.node_name][1:3] == ["leader", "true"]
    for b in cl.alive():
        if b is not lead:
            r = rows[b.node_name]
            assert r[1:5] == ["follower", "true", "0", "0"], out
            assert r[5] == "%s:%d" % (b.host, b.port) and r[6] == "%s:%d" % (b.host, b.mgmt_port)
    js = json.loads(ctl(lead, "cluster", "status", "--json").stdout)
    assert js["leader"] == lead.node_name and len(js["nodes"]) == 3


@pytest.mark.test_timeout(300)
def test_step_down_hands_over_and_loses_nothing_confirmed(cluster):
    cl, lead = three(cluster)
    N = 200
    publish_confirmed(lead, "q", [b"m%d" % i for i in range(N)])
    settled(cl, lead)
    epoch = api(lead, "GET", "/api/cluster")[1]["epoch"]
    # a client on the leader sees the hand-over as a 320
    watcher = connect(lead)
    closed = []
    heir = sorted(b.node_name for b in cl.alive() if b is not lead)[1]
    t0 = time.monotonic()
    st, r = api(lead, "POST", "/api/cluster/step-down", {"node": heir})
    took = time.monotonic() - t0
    assert st == 200, r
    assert r == {"from": lead.node_name, "to": heir, "epoch": epoch}
    print("step-down: 200 after %.2f s" % took)
    new = new_leader(cl, lead)
    assert new.node_name == heir
    assert api(new, "GET", "/api/cluster")[1]["epoch"] == epoch + 1
    for _ in range(20):  # connection.blocked (the hand-over stops publishers), then the close
        try:
            watcher.drain_events(timeout=10)
        except Exception as e:
            closed.append(e)
            break
    assert closed and "no longer the cluster leader" in str(closed[0]), closed
    # the old leader came back as a follower (the same process, re-executed)
    assert lead.proc.poll() is None
    wait_for(lambda: "stepping down for a hand-over" in open(lead.log_path).read(), timeout=5,
             message="the old leader's log names the hand-over")
    wait_for(lambda: insync(cl, new, lead.node_name), timeout=20 * TTL,
             message="the old leader in sync as a follower")
    got = drain(new, "q")
    assert [m[0] for m in got] == [b"m%d" % i for i in range(N)]


@pytest.mark.test_timeout(300)
def test_step_down_through_a_followers_port_and_sluicectl(cluster):
    cl, lead = three(cluster)
    publish_confirmed(lead, "q", [b"a%d" % i for i in range(50)])
    settled(cl, lead)
    f = sorted((b for b in cl.alive() if b is not lead), key=lambda b: b.node_name)[0]
    p = ctl(f, "cluster", "step-down", user=ADMIN[0], password=ADMIN[1])
    m = re.match(r"^stepped down: (\S+) -> (\S+) \(epoch (\d+)\)$", p.stdout.strip())
    assert m and m.group(1) == lead.node_name, p.stdout
    new = new_leader(cl, lead)
    assert new.node_name == m.group(2)
    wait_for(lambda: len(cl.peers(new)) == 3 and all(
        v["insync"] for v in cl.peers(new).values()), timeout=20 * TTL, message="all in sync")
    settled(cl, new)
    # and once more, naming the heir, through a follower's port with --to
    publish_confirmed(new, "q", [b"b%d" % i for i in range(50)])
    settled(cl, new)
    heir = lead.node_name
    via = next(b for b in cl.alive() if b is not new and b is not lead)
    p = ctl(via, "cluster", "step-down", "--to", heir, user=ADMIN[0], password=ADMIN[1])
    assert p.stdout.strip().startswith("stepped down: %s -> %s" % (new.node_name, heir)), p.stdout
    third = new_leader(cl, new)
    assert third.node_name == heir
    got = drain(third, "q")
    assert [m[0] for m in got] == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)]
