"""The cluster's operator actions (issue 31, docs/cluster.md "Operating a cluster"): status
(GET /api/cluster, sluicectl cluster status), a clean hand-over (POST /api/cluster/step-down,
sluicectl cluster step-down [--to NODE]) and removing a member (DELETE
/api/cluster/nodes/NAME, sluicectl cluster remove NODE), on three nodes on 127.0.0.2-4 and a
private etcd (test_cluster_repl.py's cluster and cluster_client.py's etcd). Before acting, every test waits until the
leader shows each follower in sync with no lag."""

import base64
import json
import re
import subprocess
import time
import urllib.error
import urllib.request

import amqp
import pytest

from conftest import sluiced_binary
from helpers import IS_RABBITMQ, wait_for
from cluster_client import ConfirmedLoad, connect, drain, etcd, publish_confirmed_to  # noqa: F401
from test_cluster_repl import TTL, cluster, etcd_node  # noqa: F401
from test_cluster_repl import three as repl_three

# Runs alone, after the parallel pass (tests/run.sh): etcd and a cluster's lease timings.
pytestmark = [pytest.mark.skipif(IS_RABBITMQ, reason="Sluice's cluster"), pytest.mark.alone]

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
    """test_cluster_repl.three (three nodes, followers in sync), with the users above."""
    cl, lead = repl_three(cluster, **extra)
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
            # in sync: a lag below lag_max (lease_ttl); a group may be in flight at this moment
            assert r[1:3] == ["follower", "true"] and int(r[3]) >= 0, out
            assert 0 <= int(r[4]) < TTL * 1000, out
            assert r[5] == "%s:%d" % (b.host, b.port) and r[6] == "%s:%d" % (b.host, b.mgmt_port)
    js = json.loads(ctl(lead, "cluster", "status", "--json").stdout)
    assert js["leader"] == lead.node_name and len(js["nodes"]) == 3


@pytest.mark.test_timeout(300)
def test_step_down_hands_over_and_loses_nothing_confirmed(cluster):
    cl, lead = three(cluster)
    N = 200
    publish_confirmed_to(lead, "q", [b"m%d" % i for i in range(N)])
    settled(cl, lead)
    epoch = api(lead, "GET", "/api/cluster")[1]["epoch"]
    # a client on the leader sees the hand-over as a 320
    watcher = connect(lead)
    closed = []
    # the follower with the larger name: with equal logs the election alone would pick the
    # other one (the smallest name goes first), so only the hand-over key makes it this one
    heir = sorted(b.node_name for b in cl.alive() if b is not lead)[1]
    t0 = time.monotonic()
    st, r = api(lead, "POST", "/api/cluster/step-down", {"node": heir})
    took = time.monotonic() - t0
    assert st == 200, r
    assert r == {"from": lead.node_name, "to": heir, "epoch": epoch}
    print("step-down: 200 after %.2f s" % took)
    # the hand-over key the other nodes honoured (stale now: the epoch moved past it)
    assert json.loads(cl.etcd.get("/sluice/r/handover")) == \
        {"node": heir, "epoch": epoch, "from": lead.node_name}
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
    publish_confirmed_to(lead, "q", [b"a%d" % i for i in range(50)])
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
    publish_confirmed_to(new, "q", [b"b%d" % i for i in range(50)])
    settled(cl, new)
    heir = lead.node_name
    via = next(b for b in cl.alive() if b is not new and b is not lead)
    p = ctl(via, "cluster", "step-down", "--to", heir, user=ADMIN[0], password=ADMIN[1])
    assert p.stdout.strip().startswith("stepped down: %s -> %s" % (new.node_name, heir)), p.stdout
    third = new_leader(cl, new)
    assert third.node_name == heir
    got = drain(third, "q")
    assert [m[0] for m in got] == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)]


@pytest.mark.test_timeout(240)
def test_who_may_act_and_the_refusals(cluster, tmp_path):
    cl, lead = three(cluster)
    f = next(b for b in cl.alive() if b is not lead)
    for b in (lead, f):  # a follower forwards: the leader's answers
        st, r = api(b, "POST", "/api/cluster/step-down", {}, user=MONITOR[0], password=MONITOR[1])
        assert st == 403, r
        st, r = api(b, "DELETE", "/api/cluster/nodes/" + f.node_name, user=MONITOR[0],
                    password=MONITOR[1])
        assert st == 403, r
        st, r = api(b, "POST", "/api/cluster/step-down", {}, user=ADMIN[0], password="wrong")
        assert st == 401, r
        # the monitoring user still sees the status
        assert api(b, "GET", "/api/cluster", user=MONITOR[0], password=MONITOR[1])[0] == 200
    st, r = api(lead, "DELETE", "/api/cluster/nodes/sluice@nobody")
    assert st == 404, r
    st, r = api(lead, "DELETE", "/api/cluster/nodes/" + lead.node_name)
    assert st == 409 and "step down first" in r["reason"], r
    st, r = api(lead, "POST", "/api/cluster/step-down", {"node": "sluice@nobody"})
    assert st == 409 and "not an in-sync follower" in r["reason"], r
    st, r = api(lead, "POST", "/api/cluster/step-down", {"node": lead.node_name})
    assert st == 409, r
    st, r = api(lead, "POST", "/api/cluster/step-down", {"node": 3})
    assert st == 400, r
    p = ctl(lead, "cluster", "remove", "sluice@nobody", ok=False)
    assert p.returncode == 1 and p.stderr.startswith("sluicectl: HTTP 404"), p.stderr
    p = ctl(lead, "cluster", "frobnicate", ok=False)
    assert p.returncode == 2, p.stderr
    # nothing changed
    assert cl.leader() is lead
    # a single node is not a cluster
    from conftest import start_sluiced, stop_sluiced
    one = start_sluiced(tmp_path / "single")
    try:
        st, r = api(one, "POST", "/api/cluster/step-down", {})
        assert st == 400 and "not a cluster" in r["reason"], r
        st, r = api(one, "DELETE", "/api/cluster/nodes/x")
        assert st == 400, r
        p = ctl(one, "cluster", "status")
        assert p.stdout.splitlines()[0] == "leader  %s" % api(one, "GET", "/api/cluster")[1]["leader"]
    finally:
        stop_sluiced(one)


@pytest.mark.test_timeout(300)
def test_step_down_without_an_in_sync_follower_answers_409_at_once(cluster):
    # min_insync 2 and both followers killed: the leader is below it, a publish waits for the
    # ISR (so a store generation is pending); the 409 must not wait for the release gate
    cl, lead = three(cluster, **{"cluster.min_insync_replicas": "2"})
    conn = connect(lead)
    ch = conn.channel()
    ch.queue_declare("q", durable=True, auto_delete=False)
    for f in [b for b in cl.alive() if b is not lead]:
        f.kill9()
    ch.basic_publish(amqp.Message(b"unconfirmed", delivery_mode=2), routing_key="q")
    wait_for(lambda: "cluster alarm: blocking publishers" in open(lead.log_path).read(),
             timeout=15 * TTL, message="the leader below min_insync")
    t0 = time.monotonic()
    st, r = api(lead, "POST", "/api/cluster/step-down", {}, timeout=20)
    took = time.monotonic() - t0
    # "no in-sync follower", or, when the leader has not yet dropped a dead follower from its
    # ISR and picked it, "sluice@nX is no longer an in-sync follower": both refusals at once
    assert st == 409 and "in-sync follower" in r["reason"], r
    assert took < 2, "the 409 took %.2f s" % took
    # a 404 for an unknown member does not wait either
    t0 = time.monotonic()
    st, r = api(lead, "DELETE", "/api/cluster/nodes/sluice@nobody", timeout=20)
    assert st == 404 and time.monotonic() - t0 < 2, r
    p = ctl(lead, "cluster", "step-down", ok=False)
    assert p.returncode == 1 and "HTTP 409" in p.stderr, p.stderr
    print("step-down 409 below min_insync in %.3f s" % took)
    assert cl.leader() is lead
    conn.close()


@pytest.mark.test_timeout(300)
def test_remove_a_killed_follower_and_the_leader_confirms_without_it(cluster):
    # a long lease: without the removal the dead follower would stay in the ISR (and every
    # confirm wait for it) for lease_ttl
    cl, lead = three(cluster, **{"cluster.min_insync_replicas": "2", "cluster.lease_ttl": "20"})
    conn = connect(lead)
    ch = conn.channel()
    ch.queue_declare("q", durable=True, auto_delete=False)
    ch.confirm_select()
    ch.basic_publish_confirm(amqp.Message(b"before", delivery_mode=2), routing_key="q")
    dead, alive = sorted((b for b in cl.alive() if b is not lead), key=lambda b: b.node_name)
    dead.kill9()
    t0 = time.monotonic()
    p = ctl(lead, "cluster", "remove", dead.node_name)
    took = time.monotonic() - t0
    assert p.stdout.splitlines()[0] == "%s removed" % dead.node_name, p.stdout
    # the table without it; the line after it names it removed (banned until readmitted)
    rest = p.stdout.splitlines()[1:]
    assert "removed %s" % dead.node_name in rest, p.stdout
    assert not any(dead.node_name in l for l in rest if not l.startswith("removed ")), p.stdout
    view = api(lead, "GET", "/api/cluster")[1]
    assert {n["name"] for n in view["nodes"]} == {lead.node_name, alive.node_name}
    assert etcd_node(cl, dead.node_name) is None
    assert dead.node_name not in json.loads(cl.etcd.get("/sluice/r/isr"))
    t1 = time.monotonic()
    ch.basic_publish_confirm(amqp.Message(b"after", delivery_mode=2), routing_key="q")
    confirm = time.monotonic() - t1
    assert confirm < 5, "the confirm took %.2f s: it waited for the removed node" % confirm
    print("remove: %.2f s; a confirm after it in %.3f s" % (took, confirm))
    conn.close()
    assert [m[0] for m in drain(lead, "q")] == [b"before", b"after"]


@pytest.mark.test_timeout(240)
def test_metrics_and_api_nodes_list_every_member(cluster):
    # a 10 s lease: the killed follower stays listed (registered, in the ISR) while we look
    cl, lead = three(cluster, **{"cluster.lease_ttl": "10"})
    publish_confirmed_to(lead, "q", [b"y" * 1000 for _ in range(10)])
    settled(cl, lead)
    with urllib.request.urlopen("http://%s:%d/metrics" % (lead.host, lead.mgmt_port),
                                timeout=10) as r:
        text = r.read().decode()
    series = dict(l.rsplit(" ", 1) for l in text.splitlines() if l and not l.startswith("#"))
    assert series["sluice_cluster_leader"] == "1"
    assert series["sluice_cluster_isr_size"] == "3"
    for b in cl.alive():
        if b is lead:
            assert 'sluice_cluster_follower_lag_bytes{node="%s"}' % b.node_name not in series
            continue
        # in sync: lag under lag_max (a group may be in flight just now)
        assert series['sluice_cluster_follower_insync{node="%s"}' % b.node_name] == "1"
        assert int(series['sluice_cluster_follower_lag_bytes{node="%s"}' % b.node_name]) >= 0
        assert 0 <= int(series['sluice_cluster_follower_lag_ms{node="%s"}' % b.node_name]) < \
            10000
    # a follower killed: its lag grows while the leader writes (a consumer's acks, publishes)
    f = next(b for b in cl.alive() if b is not lead)
    f.kill9()
    conn = connect(lead)
    ch = conn.channel()
    ch.basic_publish(amqp.Message(b"z" * 5000, delivery_mode=2), routing_key="q")

    def lagging():
        with urllib.request.urlopen("http://%s:%d/metrics" % (lead.host, lead.mgmt_port),
                                    timeout=10) as r:
            t = r.read().decode()
        m = re.search(r'sluice_cluster_follower_lag_bytes\{node="%s"\} (\d+)' % f.node_name, t)
        n = re.search(r'sluice_cluster_follower_lag_ms\{node="%s"\} (\d+)' % f.node_name, t)
        return m and n and int(m.group(1)) >= 5000 and int(n.group(1)) > 0
    wait_for(lagging, timeout=8, message="the killed follower's lag in /metrics")
    conn.close()
    st, nodes = api(lead, "GET", "/api/nodes")
    assert st == 200
    names = {n["name"] for n in nodes}
    assert names == {b.node_name for b in cl.nodes.values()}, nodes
    keys = {"name", "type", "running", "mem_used", "mem_limit", "mem_alarm", "disk_free",
            "disk_free_limit", "disk_free_alarm", "uptime", "os_pid", "connected"}
    for n in nodes:
        assert keys <= set(n), n
        assert n["running"] is True
    me = next(n for n in nodes if n["name"] == lead.node_name)
    assert me["os_pid"] == lead.proc.pid and me["mem_used"] > 0
    st, one = api(lead, "GET", "/api/nodes/" + f.node_name)
    assert st == 200 and one["name"] == f.node_name


@pytest.mark.test_timeout(300)
def test_step_down_under_a_confirmed_load_loses_nothing_confirmed(cluster):
    cl, lead = three(cluster)
    load = ConfirmedLoad(lead, "load").start()
    assert load.started.wait(60) and not load.errors, "the publisher did not get going"
    st, r = api(lead, "POST", "/api/cluster/step-down", {})
    assert st == 200, r
    load.join(60)  # the hand-over's 320 ends it
    errors, confirmed = load.errors, load.confirmed
    assert errors and "no longer the cluster leader" in str(errors[0]), errors
    new = new_leader(cl, lead)
    assert new.node_name == r["to"]
    got = [m[0] for m in drain(new, "load", timeout=60)]
    # every confirmed message, in order; at most the one in flight beyond them
    assert got[:len(confirmed)] == confirmed
    assert len(got) - len(confirmed) <= 1, (len(got), len(confirmed))
    print("step-down under load: %d confirmed before the hand-over, all on %s" %
          (len(confirmed), new.node_name))
