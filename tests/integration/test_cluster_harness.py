"""The cluster fault-test harness (cluster_harness.py) and one round each of the fault test
(tests/cluster/): the harness starts etcd, three nodes and a remote node in network
namespaces and leaves nothing behind; one kill -9 of the leader under the confirmed workload
(publishers with confirms, a transactional publisher, a consumer acking in transactions, a
link to the remote node) passes the checker; one partition (the leader cut from etcd but not
from its followers, three etcd members) passes it too. The long run is `make cluster-soak`."""

import os
import shutil
import sys

import pytest

import netns
from helpers import IS_RABBITMQ

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))

from cluster_harness import ClusterHarness, self_check  # noqa: E402

# Runs alone, after the parallel pass (tests/run.sh): etcd, network namespaces.
pytestmark = [
    pytest.mark.skipif(IS_RABBITMQ, reason="Sluice's cluster"),
    pytest.mark.skipif(netns.unavailable_reason() is not None,
                       reason=str(netns.unavailable_reason())),
    pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd-server not installed"),
    pytest.mark.alone,
]


@pytest.fixture
def harness(tmp_path):
    made = []

    def make(**kw):
        h = ClusterHarness(tmp_path / "cluster", **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def soak(tmp_path):
    import cluster_soak
    return cluster_soak.Soak(cluster_soak.parse_args(["--out", str(tmp_path / "soak"),
                                                      "--seed", "31"]))


@pytest.mark.test_timeout(60)
def test_the_harness_starts_and_leaves_nothing_behind(tmp_path):
    # self_check raises if a namespace, a mount or a process of ours is left
    assert self_check(tmp_path / "self", log=lambda m: None)


def one_round(h, s, kind):
    h.start()
    assert s.run_period(h, [kind]), "violations: %s" % (s.last[0].errors[:20],)
    res, fos, hist = s.last
    summ = res.summary()
    # not vacuous: load flowed through the fault, to the remote node too, and was checked
    assert summ["confirmed"] > 50 and summ["linked_confirmed"] > 0, summ
    assert any(op["f"] == "drain" and op["msgs"] for op in hist.ops)
    (k, fo), = fos
    assert k == kind and fo is not None, "no confirm after the fault"
    return hist


@pytest.mark.test_timeout(120)
def test_a_leader_kill9_under_confirmed_load_passes_the_checker(tmp_path, harness):
    h = harness(etcd_members=1)
    hist = one_round(h, soak(tmp_path), "kill9-leader")
    fault = next(op for op in hist.ops if op["f"] == "kill9-leader")
    # a confirm came from another node after the kill: a failover happened
    assert any(op["type"] == "ok" and op.get("node") not in (None, fault["leader"])
               and op["t"] > fault["t"] for op in hist.ops)


@pytest.mark.test_timeout(120)
def test_the_leader_cut_from_etcd_but_not_its_followers_passes_the_checker(tmp_path, harness):
    h = harness(etcd_members=3)
    hist = one_round(h, soak(tmp_path), "cut-leader-etcd")
    fault = next(op for op in hist.ops if op["f"] == "cut-leader-etcd")
    assert any(op["type"] == "ok" and op.get("node") not in (None, fault["leader"])
               and op["t"] > fault["t"] for op in hist.ops)
    log = h.nodes[fault["leader"]].log_path.read_text(errors="replace")
    assert "no longer the leader" in log or "not the leader any more" in log


@pytest.mark.test_timeout(90)
def test_what_a_harness_killed_9_left_is_removed_by_the_next(tmp_path):
    import os
    import signal
    import subprocess
    import time

    from cluster_harness import MOUNT_MARK, sweep_mounts
    from netns import harness_namespaces, sweep_stale

    code = ("import sys; sys.path.insert(0, %r)\n"
            "from cluster_harness import ClusterHarness\n"
            "h = ClusterHarness(%r, etcd_members=1)\n"
            "h.start()\n"
            "print('up', ' '.join(str(n.proc.pid) for n in h.nodes.values()), flush=True)\n"
            "import time; time.sleep(120)\n" % (HERE, str(tmp_path / "crashed")))
    p = subprocess.Popen(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    try:
        line = p.stdout.readline().decode()
        assert line.startswith("up "), line
        pids = [int(x) for x in line.split()[1:]]
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        left = [n for n, owner in harness_namespaces() if owner == p.pid]
        mounts = [m for m in open("/proc/mounts").read().splitlines()
                  if "%s-%d" % (MOUNT_MARK, p.pid) in m]
        assert left and mounts and all(os.path.exists("/proc/%d" % q) for q in pids)
        # what the next harness does first (netns.Net then ClusterHarness)
        sweep_stale()
        sweep_mounts()
        deadline = time.monotonic() + 10
        while any(os.path.exists("/proc/%d" % q) for q in pids) and time.monotonic() < deadline:
            time.sleep(0.05)  # the killed nodes are reaped by init
        assert not [n for n, owner in harness_namespaces() if owner == p.pid]
        assert not [m for m in open("/proc/mounts").read().splitlines()
                    if "%s-%d" % (MOUNT_MARK, p.pid) in m]
        assert not [q for q in pids if os.path.exists("/proc/%d" % q)]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
