"""cluster_harness.py - a three-node Sluice cluster in network namespaces, with faults.

Role: the one place that builds the cluster the fault tests run against (issue 31, "How it
must hold"): used by tests/integration/test_cluster_harness.py (short, in `make test`) and by
tests/cluster/cluster_soak.py (the nemesis loop). It only builds, breaks and heals; what runs
against it is tests/cluster/workload.py, what judges it is tests/cluster/checker.py.

Topology (every namespace made by netns.Net, so nothing is added to the root namespace):

    n1, n2, n3   the cluster nodes, one sluiced each (cluster_formation... = etcd)
    etcd         one or three etcd members (EtcdCluster) on 10.201.0.100
    remote       a fourth, single node: the cluster's outgoing queue links to its `inbox-*`

    veth links: n1-n2, n1-n3, n2-n3, nK-etcd, nK-remote

Each namespace has a service address on its loopback (n K: 10.201.0.K, remote: 10.201.0.9,
etcd: 10.201.0.100) and a /32 route to every other one over the direct link, so each node has
ONE address that every peer reaches (cluster.advertise_address: etcd and the other members
know a node by one address), while cutting one veth cuts exactly that pair. A cut is an
iptables INPUT DROP of everything arriving over the veth, at both ends (silent, like a real
partition; `ip link set down` would also delete the /32 routes and fail connects at once):
  cut_leader_from_followers()  nothing passes between the leader and the other two nodes; its
                               links to etcd and to remote stay
  cut_from_etcd(leader)        nothing passes between it and etcd; its links to the followers
                               stay

Faults and heals: kill9 / restart (on the same data directory), pause (SIGSTOP) / resume,
the two cuts / heal_links, fill_disk / unfill_disk (each node's data directory lives on a
small tmpfs of its own, so a filler file fills exactly one node's disk), slow_link / unslow
(netem where the kernel has it, else netns.py's NFQUEUE shaper). heal_all() undoes every one.

Clients run inside a node's namespace and talk to 127.0.0.1 there (loopback: guest works):
the workload talks to the leader's own namespace; a follower would proxy and refuse guest.

Invariants: close() always removes processes (by pid), tmpfs mounts and namespaces, also
after a failed test; a harness killed -9 leaves mounts under a workdir named with its pid,
which the next harness unmounts (sweep_mounts) after netns.Net has swept its namespaces.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from etcd import EtcdCluster
from netns import Net, iptables_binary, run

SERVICE = {"n1": "10.201.0.1", "n2": "10.201.0.2", "n3": "10.201.0.3",
           "remote": "10.201.0.9", "etcd": "10.201.0.100"}
NODES = ("n1", "n2", "n3")
CLUSTER = "soak"
MOUNT_MARK = "sl-cluster-disk"
REMOTE_USER = ("sluice-link", "cluster-harness-link")

LINK_CONFIG = {
    "link_user": REMOTE_USER[0],
    "link_password": REMOTE_USER[1],
    "link_heartbeat": 1,
    "link_retry_min_ms": 50,
    "link_retry_max_ms": 500,
}


class HarnessError(RuntimeError):
    pass


def wait_until(pred, timeout, what, interval=0.1):
    """pred() until truthy (exceptions count as not yet), bounded by timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # not yet: a node restarting, a socket refused
            last = e
        if time.monotonic() > deadline:
            raise HarnessError("timed out after %.0f s waiting for %s (last error: %r)"
                               % (timeout, what, last))
        time.sleep(interval)


def sweep_mounts(log=None):
    """Unmount tmpfs disks left by harnesses that died (their pid is in the path)."""
    out = []
    try:
        lines = open("/proc/mounts").read().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) < 3 or parts[2] != "tmpfs" or MOUNT_MARK not in parts[1]:
            continue
        m = re.search(r"%s-(\d+)" % MOUNT_MARK, parts[1])
        if not m:
            continue
        pid = int(m.group(1))
        if pid != os.getpid() and not os.path.exists("/proc/%d" % pid):
            run(["umount", "-l", parts[1]], check=False)
            out.append(parts[1])
            if log:
                log("harness: unmounted stale %s" % parts[1])
    return out


class ClusterHarness:
    def __init__(self, workdir, etcd_members=1, ttl=2, min_insync=2, disk_mb=256, log=None,
                 binary=None):
        from netns import NsNode
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = log or (lambda msg: None)
        self.ttl = ttl
        self.disk_mb = disk_mb
        self.mounts = []
        self.net = Net(self.workdir / "net", log=self.log)
        sweep_mounts(self.log)
        self.closed = False
        try:
            for name in ("etcd", "remote") + NODES:
                self.net.add_node(name)
            for i, a in enumerate(NODES):
                for b in NODES[i + 1:]:
                    self.net.link(a, b)
                self.net.link(a, "etcd")
                self.net.link(a, "remote")
            for name, addr in SERVICE.items():
                self.net.ns[name].ip("addr", "add", addr + "/32", "dev", "lo")
            for (a, b) in [tuple(k) for k in self.net.links]:
                for src, dst in ((a, b), (b, a)):
                    self.net.ns[src].ip("route", "add", SERVICE[dst] + "/32", "via",
                                        self.net.addr(src, dst))
            self.etcd = EtcdCluster(
                str(self.workdir / "etcd"), SERVICE["etcd"], etcd_members,
                popen=lambda cmd, **kw: self.net.popen("etcd", cmd, label="etcd", **kw),
                enter=self.net.ns["etcd"].entered)
            self.nodes = {}
            # the shared cluster secret (cluster.secret_file: 0600, the same on every node)
            secret = self.workdir / "cluster.secret"
            fd = os.open(str(secret), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("cluster-harness-secret\n")
            os.chmod(str(secret), 0o600)
            for name in NODES:
                conf = {
                    "cluster.secret_file": str(secret),
                    "cluster_formation.peer_discovery_backend": "etcd",
                    "cluster_formation.etcd.cluster_name": CLUSTER,
                    "cluster.advertise_address": SERVICE[name],
                    "cluster.lease_ttl": str(ttl),
                    "cluster.min_insync_replicas": str(min_insync),
                    "disk_free_limit": "4000000",
                    "disk_reserve": "2M",
                    # TIDY gives back dead 64 MiB segments; its default (after 1 GB written,
                    # or every 6 h) would fill these small disks in a long soak. Both count
                    # from the node's start as leader, and the soak changes leaders every few
                    # rounds: the time matters more than the bytes
                    "tidy_after_written": "32M",
                    "tidy_interval": "10",
                }
                for k, ep in enumerate(self.etcd.endpoints):
                    conf["cluster_formation.etcd.endpoints.%d" % (k + 1)] = ep
                conf.update(LINK_CONFIG)
                node = NsNode(self.net, name, binary=binary, config=conf)
                disk = self.workdir / ("%s-%d-%s" % (MOUNT_MARK, os.getpid(), name))
                disk.mkdir(exist_ok=True)
                run(["mount", "-t", "tmpfs", "-o", "size=%dm,mode=0700" % disk_mb, "tmpfs",
                     str(disk)])
                self.mounts.append(disk)
                node.dir.mkdir(parents=True, exist_ok=True)
                node.disk = disk
                node.data_dir = disk / "data"
                self.nodes[name] = node
            rconf = {"user.%s" % REMOTE_USER[0]: REMOTE_USER[1],
                     "user.%s.tags" % REMOTE_USER[0]: "administrator"}
            self.remote = NsNode(self.net, "remote", binary=binary, config=rconf)
        except BaseException:
            self.close()
            raise
        self.filled = set()
        self.cuts = []
        self.ipt = iptables_binary()
        if self.ipt is None:
            self.close()
            raise HarnessError("iptables is needed for partitions (scripts/deps.sh)")
        self.paused = set()
        self.slowed = []

    # -- life ---------------------------------------------------------------------------
    def start(self, timeout=90.0):
        self.etcd.start()
        self.remote.start()
        for n in self.nodes.values():
            n.start()
        return self.wait_stable(timeout)

    def close(self):
        """Processes, shapers, mounts, namespaces: all of it, never raising."""
        if self.closed:
            return
        self.closed = True
        for pid in self._pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
        self.net.close()
        for m in self.mounts:
            run(["umount", "-l", str(m)], check=False)
        self.mounts = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _pids(self):
        return [n.proc.pid for n in self.nodes.values() if n.alive()]

    # -- reading the cluster -------------------------------------------------------------
    def status(self, name, timeout=3.0):
        st, body = self.nodes[name].http("GET", "/api/cluster", timeout=timeout)
        if st != 200 or not isinstance(body, dict):
            raise HarnessError("%s: /api/cluster %s %r" % (name, st, body))
        return body

    def leader(self):
        """The node that serves as leader by its own word (its /api/cluster names it and its
        log says it leads), or None."""
        for name, n in self.nodes.items():
            if not n.alive() or name in self.paused:
                continue
            try:
                c = self.status(name, timeout=2.0)
            except Exception:
                continue
            if c.get("leader") == "sluice@" + name and \
                    not any(x["name"] == "sluice@" + name and x["role"] != "leader"
                            for x in c.get("nodes", [])):
                return name
        return None

    def in_sync(self, leader):
        c = self.status(leader)
        return sorted(x["name"][len("sluice@"):] for x in c["nodes"] if x.get("insync"))

    def wait_leader(self, timeout=30.0):
        return wait_until(self.leader, timeout, "a serving leader")

    def wait_stable(self, timeout=90.0):
        """A leader, and all three nodes in sync at it; returns the leader's name."""
        def ok():
            lead = self.leader()
            return lead if lead and len(self.in_sync(lead)) == 3 else None
        return wait_until(ok, timeout, "a leader with three nodes in sync", interval=0.2)

    def followers(self, leader):
        return [n for n in NODES if n != leader]

    # -- faults --------------------------------------------------------------------------
    def kill9(self, name):
        self.nodes[name].kill9()

    def restart(self, name):
        self.nodes[name].start(timeout=30)

    def pause(self, name):
        n = self.nodes[name]
        os.kill(n.proc.pid, signal.SIGSTOP)
        self.paused.add(name)

    def resume(self, name):
        n = self.nodes[name]
        if n.alive():
            os.kill(n.proc.pid, signal.SIGCONT)
        self.paused.discard(name)

    # A partition drops every packet that arrives over the link, at both ends (iptables INPUT
    # DROP): silent, as a real partition is, and the routes stay (`ip link set down` would
    # remove the /32 routes through the device and give ENETUNREACH at once instead).
    def _drop_rule(self, side, dev):
        return ["-i", dev, "-j", "DROP", "-m", "comment", "--comment", "sl-cluster-cut"]

    def cut(self, a, b):
        lk = self.net.get_link(a, b)
        for side in (a, b):
            rule = self._drop_rule(side, lk.dev[side])
            self.net.ns[side].run([self.ipt, "-I", "INPUT"] + rule)
            self.cuts.append((side, rule))

    def cut_leader_from_followers(self, leader):
        for f in self.followers(leader):
            self.cut(leader, f)

    def cut_from_etcd(self, name):
        self.cut(name, "etcd")

    def heal_links(self):
        while self.cuts:
            side, rule = self.cuts.pop()
            self.net.ns[side].run([self.ipt, "-D", "INPUT"] + rule, check=False)

    def fill_disk(self, name):
        """A filler file takes every free byte of the node's tmpfs (ENOSPC for its next
        write)."""
        path = self.nodes[name].disk / "filler"
        st = os.statvfs(self.nodes[name].disk)
        free = st.f_bavail * st.f_frsize
        chunk = b"\0" * (1 << 20)
        left = free + len(chunk)  # bounded: a little more than there is
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            while left > 0:
                try:
                    n = os.write(fd, chunk[:min(left, len(chunk))])
                except OSError:  # full (ENOSPC): that is the point
                    break
                if n <= 0:
                    break
                left -= n
        finally:
            os.close(fd)
        self.filled.add(name)

    def unfill_disk(self, name):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.nodes[name].disk / "filler")
        self.filled.discard(name)

    def slow_link(self, a, b, delay_ms=60, jitter_ms=20):
        lk = self.net.get_link(a, b)
        lk.shape(delay_ms=delay_ms, jitter_ms=jitter_ms)
        self.slowed.append(lk)
        return lk.backend

    def unslow(self):
        for lk in self.slowed:
            lk.unshape()
        self.slowed = []

    def heal_all(self):
        """Undo every fault: links up and unshaped, disks emptied, paused nodes resumed, dead
        nodes restarted (each on its own data directory)."""
        self.unslow()
        self.heal_links()
        for name in list(self.filled):
            self.unfill_disk(name)
        for name in list(self.paused):
            self.resume(name)
        for name, n in self.nodes.items():
            if not n.alive():
                self.restart(name)

    # -- the fourth node -----------------------------------------------------------------
    def remote_format_name(self, queue):
        return "DIRECT=TCP:%s\\private$\\%s" % (SERVICE["remote"], queue)

    def logs(self):
        """name -> the tail of each node's log (for a failure report)."""
        out = {name: n.log_tail(400) for name, n in self.nodes.items()}
        out["remote"] = self.remote.log_tail(100)
        return out

    def snapshot(self, dest):
        """Copy every node's full log (and etcd's) under dest, for a failure's evidence."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        for name, n in list(self.nodes.items()) + [("remote", self.remote)]:
            with contextlib.suppress(OSError):
                (dest / ("%s.log" % name)).write_bytes(n.log_path.read_bytes())
        for p in Path(self.etcd.base).glob("etcd-*.log"):
            with contextlib.suppress(OSError):
                (dest / p.name).write_bytes(p.read_bytes())
        with contextlib.suppress(Exception):
            (dest / "cluster.json").write_text(json.dumps(
                {n: self.status(n) for n in NODES if self.nodes[n].alive()}, indent=1))
        return dest


def self_check(workdir, log=print, etcd_members=1):
    """Start, find a leader with three in sync, see the remote link work, close; then prove
    nothing is left (namespaces, mounts, processes)."""
    from netns import harness_namespaces
    h = ClusterHarness(workdir, etcd_members=etcd_members, log=log)
    pids = []
    try:
        lead = h.start()
        pids = h._pids() + [p.pid for p in h.etcd.procs if p]
        log("self-check: leader %s, in sync %s" % (lead, h.in_sync(lead)))
    finally:
        h.close()
    mine = [n for n, owner in harness_namespaces() if owner == os.getpid()]
    left = [p for p in pids if os.path.exists("/proc/%d" % p) and
            "zombie" not in open("/proc/%d/status" % p).read().lower()]
    mounts = [m for m in open("/proc/mounts").read().splitlines()
              if "%s-%d" % (MOUNT_MARK, os.getpid()) in m]
    if mine or left or mounts:
        raise HarnessError("left behind: namespaces %s, pids %s, mounts %s"
                           % (mine, left, mounts))
    log("self-check: clean teardown")
    return True
