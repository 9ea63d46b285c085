"""The cluster's member contracts (issue 31, docs/cluster.md "Operating a cluster"), on three
nodes on 127.0.0.2-4 and a private etcd:

- GET /api/nodes lists every member with RabbitMQ's fields, each member's figures its own
  (published by that node to etcd, stats/NAME under its lease): checked against the process
  itself (pid, descriptors, threads, uptime, the disk under its data directory), on any node's
  port (followers forward), and GET /api/nodes/NAME for one;
- a killed member is listed running false (its figures null) within its lease and etcd's tick;
- `sluicectl cluster remove NODE` of a running node keeps it out (it logs it, does not register
  or follow, a restart does not bring it back; the leader refuses it) until `sluicectl cluster
  readmit NODE`: then it rejoins and catches up."""

import json
import os
import time
import urllib.request

import pytest

from cluster_client import drain, etcd, publish_confirmed_to  # noqa: F401
from helpers import IS_RABBITMQ, wait_for
from test_cluster_ops import ADMIN, MONITOR, api, ctl, settled, three
from test_cluster_repl import TTL, cluster, etcd_node, positions_meet  # noqa: F401

# Runs alone, after the parallel pass (tests/run.sh): etcd and a cluster's lease timings.
pytestmark = [pytest.mark.skipif(IS_RABBITMQ, reason="Sluice's cluster"), pytest.mark.alone]

FIGURES = ("mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_limit",
           "disk_free_alarm", "uptime", "os_pid", "connected", "fd_used", "fd_total",
           "sockets_used", "sockets_total", "proc_used", "run_queue", "processors")
PERIOD_S = 2  # CL_FIGURES_PERIOD_MS


def nodes_by_name(b, user=MONITOR):
    st, nodes = api(b, "GET", "/api/nodes", user=user[0], password=user[1])
    assert st == 200, nodes
    return {n["name"]: n for n in nodes}


def all_figures(b, names):
    """The nodes' /api/nodes entries once every one of names has its figures, else None."""
    n = nodes_by_name(b)
    if set(n) != set(names):
        return None
    if not all(n[k][f] is not None for k in names for f in FIGURES):
        return None
    return n


def check_own_figures(entry, b, started):
    """entry's figures are those of b's process (pid, descriptors, threads, uptime, disk)."""
    pid = b.proc.pid
    assert entry["os_pid"] == pid, entry
    assert entry["running"] is True and entry["type"] == "disc"
    # measured up to two periods ago: a few descriptors and threads may have come or gone
    fds = len(os.listdir("/proc/%d/fd" % pid))
    assert abs(entry["fd_used"] - fds) <= 16, (entry["fd_used"], fds)
    socks = sum(1 for f in os.listdir("/proc/%d/fd" % pid)
                if os.readlink("/proc/%d/fd/%s" % (pid, f)).startswith("socket:"))
    assert entry["sockets_used"] >= 3 and abs(entry["sockets_used"] - socks) <= 16, \
        (entry["sockets_used"], socks)
    with open("/proc/%d/limits" % pid) as f:
        soft = next(int(l.split()[3]) for l in f if l.startswith("Max open files"))
    assert entry["fd_total"] == soft and entry["sockets_total"] == soft
    threads = len(os.listdir("/proc/%d/task" % pid))
    assert entry["proc_used"] >= 2 and abs(entry["proc_used"] - threads) <= 4, \
        (entry["proc_used"], threads)
    assert 0 <= entry["run_queue"] <= entry["proc_used"]
    assert entry["processors"] == os.cpu_count()
    # its uptime is its process's: since it started (within the figures' age)
    up = (time.monotonic() - started) * 1000
    assert 0 < entry["uptime"] <= up + 1000, (entry["uptime"], up)
    assert entry["uptime"] >= up - entry["figures_age_ms"] - 3000, (entry["uptime"], up)
    sv = os.statvfs(str(b.data_dir))
    free = sv.f_bavail * sv.f_frsize
    assert abs(entry["disk_free"] - free) <= max(free // 20, 256 << 20), (entry["disk_free"], free)
    assert entry["mem_used"] > 0 and entry["mem_limit"] > 0
    assert entry["mem_alarm"] is False and entry["disk_free_alarm"] is False


@pytest.mark.test_timeout(240)
def test_api_nodes_has_every_members_own_figures(cluster):
    t0 = time.monotonic()
    cl, lead = three(cluster)
    names = {b.node_name for b in cl.alive()}
    nodes = wait_for(lambda: all_figures(lead, names), timeout=5 * PERIOD_S,
                     message="every member's figures in /api/nodes")
    for b in cl.alive():
        e = nodes[b.node_name]
        check_own_figures(e, b, t0)
        if b is lead:
            assert e["figures_age_ms"] == 0 and e["connected"] is True
        else:
            # a follower runs no MSMQ queue manager; its figures came through etcd
            assert e["connected"] is False
            assert 0 <= e["figures_age_ms"] <= 3 * PERIOD_S * 1000, e["figures_age_ms"]
        # mem_limit and disk_free_limit are the configuration's, the same on every node
        assert e["mem_limit"] == nodes[lead.node_name]["mem_limit"]
        assert e["disk_free_limit"] == nodes[lead.node_name]["disk_free_limit"]
    # the same answer on a follower's port (forwarded), and one member by name
    f = next(b for b in cl.alive() if b is not lead)
    via = nodes_by_name(f)
    assert set(via) == names and via[f.node_name]["os_pid"] == f.proc.pid
    st, one = api(f, "GET", "/api/nodes/" + f.node_name, user=MONITOR[0], password=MONITOR[1])
    assert st == 200 and one["name"] == f.node_name and one["os_pid"] == f.proc.pid, one
    # in etcd: stats/NAME under the node's lease, members/NAME without one
    raw = json.loads(cl.etcd.get("/sluice/r/stats/%s" % f.node_name))
    assert raw["os_pid"] == f.proc.pid and raw["measured_at"] > 0
    assert json.loads(cl.etcd.get("/sluice/r/members/%s" % f.node_name))["name"] == f.node_name


@pytest.mark.test_timeout(240)
def test_a_killed_member_is_listed_running_false_within_its_lease(cluster):
    cl, lead = three(cluster)
    names = {b.node_name for b in cl.alive()}
    wait_for(lambda: all_figures(lead, names), timeout=5 * PERIOD_S,
             message="every member's figures in /api/nodes")
    f = next(b for b in cl.alive() if b is not lead)
    f.kill9()
    t0 = time.monotonic()

    def stopped():
        e = nodes_by_name(lead).get(f.node_name)
        return e if e and e["running"] is False else None
    # its registration and figures go with its lease: lease_ttl, etcd's 0.5 s expiry tick,
    # the leader's 250 ms look at etcd
    e = wait_for(stopped, timeout=TTL + 10, message="the killed member running false")
    took = time.monotonic() - t0
    assert took <= TTL + 2.5, "running false after %.2f s" % took
    assert all(e[k] is None for k in FIGURES) and e["figures_age_ms"] is None, e
    print("a killed member listed running false after %.2f s (lease %d s)" % (took, TTL))
    # still a member (members/NAME): back with its figures once it runs again
    i = int(f.node_name[-1])
    b = cl.start(i)
    wait_for(lambda: (lambda n: n and n["running"] and n["os_pid"] == b.proc.pid)(
        nodes_by_name(lead).get(b.node_name)), timeout=10 * TTL,
        message="the restarted member running with its figures")


def removed_line(name):
    return ("cluster: this node was removed from the cluster by an operator; not rejoining "
            "(sluicectl cluster readmit %s lets it back)" % name)


@pytest.mark.test_timeout(300)
def test_a_removed_running_node_stays_out_until_readmitted(cluster):
    cl, lead = three(cluster)
    publish_confirmed_to(lead, "q", [b"a%d" % i for i in range(50)])
    settled(cl, lead)
    f = sorted((b for b in cl.alive() if b is not lead), key=lambda b: b.node_name)[0]
    p = ctl(lead, "cluster", "remove", f.node_name, user=ADMIN[0], password=ADMIN[1])
    assert p.stdout.splitlines()[0] == "%s removed" % f.node_name, p.stdout
    assert "removed %s" % f.node_name in p.stdout.splitlines(), p.stdout
    wait_for(lambda: removed_line(f.node_name) in open(f.log_path).read(), timeout=10,
             message="the removed node's log line")
    assert f.proc.poll() is None  # it runs, serving nothing
    assert json.loads(cl.etcd.get("/sluice/r/banned/%s" % f.node_name))["node"] == f.node_name
    publish_confirmed_to(lead, "q", [b"b%d" % i for i in range(30)])
    # for two leases: never registered, never in the leader's view, never following
    deadline = time.monotonic() + 2 * TTL
    while time.monotonic() < deadline:
        view = api(lead, "GET", "/api/cluster")[1]
        assert f.node_name not in {n["name"] for n in view["nodes"]}, view
        assert view["removed"] == [f.node_name], view
        assert etcd_node(cl, f.node_name) is None
        assert f.node_name not in json.loads(cl.etcd.get("/sluice/r/isr"))
        time.sleep(0.2)
    assert f.node_name not in nodes_by_name(lead)
    # its own port says so (no leader to forward to), and clients are refused there
    with urllib.request.urlopen("http://%s:%d/api/cluster" % (f.host, f.mgmt_port),
                                timeout=10) as r:
        with_own = json.loads(r.read())
    assert with_own["removed"] == [f.node_name] and with_own["leader"] is None, with_own
    # a restart does not bring it back
    f.kill9()
    i = int(f.node_name[-1])
    f = cl.start(i)
    wait_for(lambda: removed_line(f.node_name) in open(f.log_path).read(), timeout=10,
             message="the restarted node's log line")
    assert etcd_node(cl, f.node_name) is None
    # readmitted: it registers, follows and catches up with what it missed
    p = ctl(lead, "cluster", "readmit", f.node_name, user=ADMIN[0], password=ADMIN[1])
    assert p.stdout.splitlines()[0] == "%s readmitted" % f.node_name, p.stdout
    wait_for(lambda: "cluster: this node was readmitted to the cluster by an operator; "
             "rejoining" in open(f.log_path).read(), timeout=10, message="its readmission")
    assert cl.etcd.get("/sluice/r/banned/%s" % f.node_name) is None
    settled(cl, lead)
    wait_for(lambda: positions_meet(cl, lead, f), timeout=10 * TTL,
             message="the readmitted node at the leader's log position")
    assert api(lead, "GET", "/api/cluster")[1]["removed"] == []
    # and it is a full member: handed the leadership, it serves everything, what it missed too
    st, r = api(lead, "POST", "/api/cluster/step-down", {"node": f.node_name})
    assert st == 200 and r["to"] == f.node_name, r
    new = wait_for(lambda: cl.leader() if cl.leader() is f else None, timeout=15 * TTL,
                   message="the readmitted node leading")
    got = [m[0] for m in drain(new, "q")]
    assert got == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(30)]


@pytest.mark.test_timeout(240)
def test_readmit_refusals(cluster):
    cl, lead = three(cluster)
    f = next(b for b in cl.alive() if b is not lead)
    st, r = api(lead, "POST", "/api/cluster/nodes/%s/readmit" % f.node_name, {})
    assert st == 404 and "not removed" in r["reason"], r
    p = ctl(lead, "cluster", "readmit", "sluice@nobody", ok=False)
    assert p.returncode == 1 and p.stderr.startswith("sluicectl: HTTP 404"), p.stderr
    st, r = api(lead, "POST", "/api/cluster/nodes/%s/readmit" % f.node_name, {},
                user=MONITOR[0], password=MONITOR[1])
    assert st == 403, r
    st, r = api(lead, "GET", "/api/cluster/nodes/%s/readmit" % f.node_name)
    assert st == 405, r
