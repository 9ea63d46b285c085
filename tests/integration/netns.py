"""netns.py - network namespaces, veth links and faults for multi-node Sluice tests.

A `Net` owns everything it makes: one network namespace per node, one veth pair per link
between two namespaces (a /30 subnet each), the processes started inside them, and the
shapers that add delay and loss. `Net.close()` removes all of it: processes first (killed by
pid), then shapers, then the namespaces (their veth ends go with them). A `Net` is a context
manager, and the pytest fixtures (tests/integration/conftest.py) close it on test failure and
on interrupt too; a run that is itself killed -9 leaves namespaces behind, and the next `Net`
removes those whose creating pid is gone (`sweep_stale`).

Names. Every namespace is `sl9-<pid>-<4 hex>-<node>`, so runs of several engineers on one
machine never collide and a stale one names its owner. The veth ends are created directly
inside their namespaces (`ip link add ... netns A type veth peer ... netns B`), so nothing is
ever added to the root namespace. Addresses (10.<x>.<y>.1 and .2 per link) only exist inside
the namespaces, which have no route out, so no traffic can leave the machine.

Reaching a node. The test process stays in the root namespace and creates its sockets inside
a node's namespace by switching the calling thread there for the moment of socket creation
(`Namespace.entered()`, setns(2)); a socket keeps its namespace afterwards. So a client talks
to a node on 127.0.0.1 of that node's namespace (loopback: `guest` works) while the nodes
reach each other over the veth links.

Faults.
  Link.cut() / restore()     `ip link set DEV down` / `up` on both ends (a partition); one end
                             only with `side=`
  Link.shape(...)            delay, jitter and loss per direction. With the kernel's netem qdisc
                             when it has one (`tc qdisc replace dev DEV root netem ...`); the
                             kernel of our CI machines is built without sch_netem, so then a
                             user-space shaper does the same: an iptables NFQUEUE rule on the
                             egress device hands each packet to `netns.py shape` running inside
                             the namespace, which gives its verdict (accept after the delay, or
                             drop with probability `loss`, seeded) over nfnetlink. Link.backend
                             says which one is in use.
  Link.unshape()             back to a clean link

Command line (used inside a namespace by Link.shape; also handy by hand):
  netns.py shape --queue N [--delay-ms D] [--jitter-ms J] [--loss P] [--seed S]
  netns.py sweep             remove namespaces left by dead runs
  netns.py list              namespaces of this harness that exist now

Needs root, iproute2 and (for the user-space shaper) iptables; scripts/deps.sh installs them.
"""

import atexit
import contextlib
import ctypes
import errno
import heapq
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

PREFIX = "sl9"
NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"
_NAME_RE = re.compile(r"^%s-(\d+)-([0-9a-f]{4})-(.+)$" % PREFIX)


class NetnsError(RuntimeError):
    pass


def run(cmd, check=True, timeout=30, input=None):
    """Run a command; NetnsError with its output when it fails and check is set."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise NetnsError("%s: exit %d: %s" % (" ".join(cmd), r.returncode,
                                               (r.stderr or r.stdout).strip()))
    return r


def unavailable_reason():
    """None when namespaces can be made here; otherwise why not (for pytest.skip)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if not os.path.exists(IP):
        return "iproute2 is not installed (scripts/deps.sh test installs it)"
    return None


# ------------------------------------------------------------------------------------------
# Namespaces
# ------------------------------------------------------------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "setns: " + os.strerror(e))


class Namespace:
    """One named network namespace (`ip netns add`)."""

    def __init__(self, name):
        self.name = name
        self.path = NETNS_DIR / name

    def __repr__(self):
        return "Namespace(%s)" % self.name

    def exec_prefix(self):
        return [IP, "netns", "exec", self.name]

    def run(self, cmd, check=True, timeout=30):
        return run(self.exec_prefix() + list(cmd), check=check, timeout=timeout)

    def ip(self, *args, check=True):
        return run([IP, "-n", self.name] + list(args), check=check)

    def popen(self, cmd, **kw):
        """Start cmd inside the namespace. `ip netns exec` execs it, so the pid is cmd's."""
        return subprocess.Popen(self.exec_prefix() + list(cmd), **kw)

    @contextlib.contextmanager
    def entered(self):
        """The calling thread is in this namespace inside the block; sockets made there stay
        there. setns(2) moves only the calling thread, so threads may be in different
        namespaces at once (a soak's publisher thread can stay inside its node's for good)."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(str(self.path), os.O_RDONLY)
            try:
                _setns(target)
            finally:
                os.close(target)
            try:
                yield self
            finally:
                _setns(home)
        finally:
            os.close(home)

    def connect(self, host, port, timeout=5.0):
        """A TCP socket connected from inside this namespace."""
        with self.entered():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            s.connect((host, port))
        except BaseException:
            s.close()
            raise
        return s

    def exists(self):
        return self.path.exists()

    def pids(self):
        """Pids of every process whose network namespace is this one."""
        try:
            ino = os.stat(self.path).st_ino
        except FileNotFoundError:
            return []
        out = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if os.stat(d / "ns" / "net").st_ino == ino:
                    out.append(int(d.name))
            except OSError:
                continue
        return out


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def harness_namespaces():
    """(name, owner pid) of every namespace this harness made that exists now."""
    out = []
    if NETNS_DIR.is_dir():
        for p in sorted(NETNS_DIR.iterdir()):
            m = _NAME_RE.match(p.name)
            if m:
                out.append((p.name, int(m.group(1))))
    return out


def delete_namespace(ns, log=None):
    """Kill every process still in ns (by pid: they can only be ours or our children's), then
    delete it. Its veth ends are destroyed with it, and so their peers."""
    for pid in ns.pids():
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    run([IP, "netns", "del", ns.name], check=False)
    if log and ns.exists():
        log("netns: could not delete %s" % ns.name)


def sweep_stale(log=None):
    """Remove namespaces of this harness whose creating process has gone (a run killed -9)."""
    removed = []
    for name, pid in harness_namespaces():
        if pid != os.getpid() and not _pid_alive(pid):
            delete_namespace(Namespace(name), log)
            removed.append(name)
    return removed


# ------------------------------------------------------------------------------------------
# Shaping: netem where the kernel has it, the NFQUEUE shaper elsewhere
# ------------------------------------------------------------------------------------------
_netem_probe = None


def netem_available():
    """Whether this kernel has sch_netem (probed once, in a scratch namespace)."""
    global _netem_probe
    if _netem_probe is None:
        ns = Namespace("%s-%d-%s-probe" % (PREFIX, os.getpid(), os.urandom(2).hex()))
        run([IP, "netns", "add", ns.name])
        try:
            r = ns.run([TC, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                       check=False)
            _netem_probe = r.returncode == 0
        finally:
            delete_namespace(ns)
    return _netem_probe


def iptables_binary():
    for b in ("iptables-legacy", "iptables", "iptables-nft"):
        p = shutil.which(b) or ("/usr/sbin/" + b if os.path.exists("/usr/sbin/" + b) else None)
        if p:
            return p
    return None


class Link:
    """A veth pair between two namespaces, a /30 subnet: `a` gets .1, `b` gets .2."""

    def __init__(self, net, a, b, dev_a, dev_b, addr_a, addr_b):
        self.net = net
        self.a, self.b = a, b  # node names
        self.dev = {a: dev_a, b: dev_b}
        self.addr = {a: addr_a, b: addr_b}
        self.is_cut = set()  # sides that are down
        self.shaping = {}  # side -> (backend, detail)
        self.backend = None

    def __repr__(self):
        return "Link(%s %s <-> %s %s)" % (self.a, self.addr[self.a], self.b, self.addr[self.b])

    def other(self, side):
        return self.b if side == self.a else self.a

    def _sides(self, side):
        if side is None:
            return [self.a, self.b]
        if side not in self.dev:
            raise ValueError("%s is not an end of %r" % (side, self))
        return [side]

    def cut(self, side=None):
        """Take the link down (both ends unless side= names one): nothing passes."""
        for s in self._sides(side):
            self.net.ns[s].ip("link", "set", "dev", self.dev[s], "down")
            self.is_cut.add(s)

    def restore(self, side=None, timeout=5.0):
        """Bring the ends up again and wait until both see a carrier."""
        for s in self._sides(side):
            self.net.ns[s].ip("link", "set", "dev", self.dev[s], "up")
            self.is_cut.discard(s)
        if not self.is_cut:
            deadline = time.monotonic() + timeout
            while not all(self._carrier(s) for s in (self.a, self.b)):
                if time.monotonic() > deadline:
                    raise NetnsError("%r: no carrier %.0fs after restore" % (self, timeout))
                time.sleep(0.02)

    def _carrier(self, side):
        r = self.net.ns[side].ip("-o", "link", "show", "dev", self.dev[side])
        return "LOWER_UP" in r.stdout and ",UP" in r.stdout

    def shape(self, delay_ms=0, jitter_ms=0, loss=0.0, side=None, seed=None):
        """Delay (ms, +- jitter) and loss (0..1) on what leaves `side` (both ends by default:
        then a round trip takes 2 x delay). Replaces any earlier shaping of those ends."""
        if not 0.0 <= loss <= 1.0:
            raise ValueError("loss is a probability")
        for s in self._sides(side):
            self._unshape_side(s)
            ns, dev = self.net.ns[s], self.dev[s]
            if netem_available():
                cmd = [TC, "qdisc", "replace", "dev", dev, "root", "netem", "limit", "100000"]
                if delay_ms or jitter_ms:
                    cmd += ["delay", "%gms" % delay_ms]
                    if jitter_ms:
                        cmd += ["%gms" % jitter_ms]
                if loss:
                    cmd += ["loss", "%g%%" % (loss * 100)]
                ns.run(cmd)
                self.shaping[s] = ("netem", None)
                self.backend = "netem"
            else:
                self.shaping[s] = ("nfqueue", self._start_shaper(s, delay_ms, jitter_ms, loss,
                                                                 seed))
                self.backend = "nfqueue"

    def _start_shaper(self, side, delay_ms, jitter_ms, loss, seed):
        ipt = iptables_binary()
        if ipt is None:
            raise NetnsError("no netem in this kernel and no iptables for the NFQUEUE shaper "
                             "(scripts/deps.sh test installs iptables)")
        ns, dev = self.net.ns[side], self.dev[side]
        queue = self.net.next_queue()
        if seed is None:
            seed = random.randrange(1 << 30)
        cmd = ["/usr/bin/python3", str(Path(__file__).resolve()), "shape", "--queue", str(queue),
               "--delay-ms", str(delay_ms), "--jitter-ms", str(jitter_ms), "--loss", str(loss),
               "--seed", str(seed)]
        logf = open(self.net.workdir / ("shaper-%s-%s.log" % (side, dev)), "ab")
        proc = ns.popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=logf)
        logf.close()
        self.net.track(proc, "shaper %s/%s" % (side, dev))
        # The shaper prints "ready" once bound to its queue; only then may packets go to it.
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        line = proc.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            proc.kill()
            proc.wait()
            raise NetnsError("shaper for %s/%s did not start: %r (log %s)"
                             % (side, dev, line, logf.name))
        rule = ["-t", "mangle", "-A", "POSTROUTING", "-o", dev, "-j", "NFQUEUE",
                "--queue-num", str(queue), "--queue-bypass"]
        ns.run([ipt] + rule)
        return (proc, ipt, rule)

    def _unshape_side(self, s):
        kind, detail = self.shaping.pop(s, (None, None))
        if kind == "netem":
            self.net.ns[s].run([TC, "qdisc", "del", "dev", self.dev[s], "root"], check=False)
        elif kind == "nfqueue":
            proc, ipt, rule = detail
            # Rule first (new packets stop going to the queue), then the shaper, which on
            # SIGTERM accepts what it still holds before exiting.
            delete = list(rule)
            delete[delete.index("-A")] = "-D"
            self.net.ns[s].run([ipt] + delete, check=False)
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self.net.untrack(proc)

    def unshape(self, side=None):
        for s in self._sides(side):
            self._unshape_side(s)


_live_nets = weakref.WeakSet()


def _close_live_nets():
    for net in list(_live_nets):
        net.close()


def _on_sigterm(signum, frame):
    # A SIGTERM to the test run unwinds like ^C, so every Net's teardown still runs.
    raise KeyboardInterrupt("SIGTERM")


atexit.register(_close_live_nets)


class Net:
    """A set of namespaces joined by links. Use as a context manager, or call close()."""

    def __init__(self, workdir, log=None):
        reason = unavailable_reason()
        if reason:
            raise NetnsError(reason)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = log or (lambda msg: None)
        self.tag = "%s-%d-%s" % (PREFIX, os.getpid(), os.urandom(2).hex())
        self.ns = {}  # node name -> Namespace
        self.links = {}  # frozenset({a, b}) -> Link
        self._procs = []  # (Popen, label) started inside our namespaces
        self._queue = 0
        self._subnet = 0
        self.closed = False
        _live_nets.add(self)
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
            signal.signal(signal.SIGTERM, _on_sigterm)
        for name in sweep_stale(self.log):
            self.log("netns: removed stale namespace %s" % name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- building ------------------------------------------------------------------------
    def add_node(self, name):
        """A new namespace for node `name` (letters, digits, '-'), loopback up."""
        if not re.match(r"^[A-Za-z0-9-]{1,20}$", name) or name in self.ns:
            raise ValueError("bad or duplicate node name %r" % name)
        ns = Namespace("%s-%s" % (self.tag, name))
        run([IP, "netns", "add", ns.name])
        self.ns[name] = ns
        ns.ip("link", "set", "dev", "lo", "up")
        return ns

    def link(self, a, b):
        """A veth pair between the namespaces of nodes a and b, addressed and up."""
        key = frozenset((a, b))
        if a == b or key in self.links:
            raise ValueError("bad or duplicate link %s-%s" % (a, b))
        # Link k gets 10.200.0.0/16's k-th /30; every Net has the whole range to itself, since
        # the addresses exist only inside its own namespaces.
        self._subnet += 1
        if self._subnet >= 16384:
            raise NetnsError("too many links")
        third, fourth = divmod(self._subnet * 4, 256)
        addr_a = "10.200.%d.%d" % (third, fourth + 1)
        addr_b = "10.200.%d.%d" % (third, fourth + 2)
        # Inside a namespace a device name only has to be unique there.
        dev_a, dev_b = ("v-%s" % b)[:15], ("v-%s" % a)[:15]
        run([IP, "link", "add", dev_a, "netns", self.ns[a].name, "type", "veth", "peer", "name",
             dev_b, "netns", self.ns[b].name])
        for side, dev, addr in ((a, dev_a, addr_a), (b, dev_b, addr_b)):
            self.ns[side].ip("addr", "add", addr + "/30", "dev", dev)
            self.ns[side].ip("link", "set", "dev", dev, "up")
        lk = Link(self, a, b, dev_a, dev_b, addr_a, addr_b)
        self.links[key] = lk
        lk.restore()  # waits for the carrier
        return lk

    def get_link(self, a, b):
        return self.links[frozenset((a, b))]

    def addr(self, src, dst):
        """The address under which node `src` reaches node `dst` (over their link)."""
        return self.get_link(src, dst).addr[dst]

    def next_queue(self):
        self._queue += 1
        return self._queue

    # -- processes -----------------------------------------------------------------------
    def track(self, proc, label):
        self._procs.append((proc, label))

    def untrack(self, proc):
        self._procs = [(p, l) for p, l in self._procs if p is not proc]

    def popen(self, node, cmd, label=None, **kw):
        proc = self.ns[node].popen(cmd, **kw)
        self.track(proc, label or "%s: %s" % (node, cmd[0]))
        return proc

    # -- teardown ------------------------------------------------------------------------
    def close(self):
        """Remove everything: processes (SIGKILL by pid), shapers, namespaces. Idempotent;
        never raises, so it can run from a failing test's teardown."""
        if self.closed:
            return
        self.closed = True
        for proc, label in reversed(self._procs):
            try:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(5)
            except Exception as e:  # keep going: the namespaces must go
                self.log("netns: stopping %s: %r" % (label, e))
        self._procs = []
        for lk in self.links.values():
            lk.shaping.clear()
        for ns in self.ns.values():
            try:
                delete_namespace(ns, self.log)
            except Exception as e:
                self.log("netns: deleting %s: %r" % (ns.name, e))


# ------------------------------------------------------------------------------------------
# A sluiced inside a namespace
# ------------------------------------------------------------------------------------------
AMQP_PORT = 5672  # inside a private namespace the default ports cannot collide with anyone
HTTP_PORT = 15672
_LISTEN_AMQP = re.compile(rb"listening amqp=([0-9.]+):(\d+)")
_LISTEN_HTTP = re.compile(rb"listening http=([0-9.]+):(\d+)")


REPO = Path(__file__).resolve().parents[2]


def sluiced_binary():
    """$SLUICED (relative to the repository root) or build/sluiced, as conftest.py has it."""
    path = Path(os.environ.get("SLUICED", "build/sluiced"))
    return path if path.is_absolute() else REPO / path


def format_name(addr, queue, port=None):
    """MSMQ direct format name of a queue on another node: DIRECT=TCP:addr[:port]\\private$\\q."""
    return "DIRECT=TCP:%s%s\\private$\\%s" % (addr, "" if port is None else ":%d" % port, queue)


class NsNode:
    """One sluiced in node `name`'s namespace, listening on every address of it (its link
    addresses and 127.0.0.1) on the default ports. Its data directory outlives the process, so
    kill9() then start() is a crash and a recovery. Clients made by amqp()/pika()/http() live
    in the node's namespace and reach it on loopback (as guest by default)."""

    def __init__(self, net, name, binary=None, config=None, args=(), log_level=None):
        self.net = net
        self.name = name
        self.binary = str(binary or sluiced_binary())
        self.dir = net.workdir / ("node-" + name)
        self.data_dir = self.dir / "data"
        self.log_path = self.dir / "sluiced.log"
        self.config = dict(config or {})
        self.args = list(args)
        self.log_level = log_level or os.environ.get("SLUICE_LOG_LEVEL")
        self.proc = None
        self.host = "127.0.0.1"
        self.port = AMQP_PORT
        self.mgmt_port = HTTP_PORT
        self.starts = 0
        self.kills = 0
        self._clients = []
        if name not in net.ns:
            net.add_node(name)
        self.ns = net.ns[name]

    def __repr__(self):
        return "NsNode(%s, pid %s)" % (self.name, self.proc.pid if self.proc else None)

    # -- process -------------------------------------------------------------------------
    def command(self):
        cmd = [self.binary, "--bind", "0.0.0.0", "--port", str(AMQP_PORT), "--mgmt-port",
               str(HTTP_PORT), "--data-dir", str(self.data_dir), "--node-name",
               "sluice@%s" % self.name]
        if self.log_level:
            cmd += ["--log-level", self.log_level]
        if self.config:
            conf = self.dir / "sluice.conf"
            conf.write_text("".join("%s = %s\n" % kv for kv in self.config.items()))
            cmd += ["--config", str(conf)]
        return cmd + self.args

    def start(self, timeout=15.0):
        if self.alive():
            raise NetnsError("%r is running already" % self)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with open(self.log_path, "ab") as logf:
            logf.write(b"=== netns.py: start %d of %s\n" % (self.starts, self.name.encode()))
            offset = logf.tell()
            self.proc = self.net.popen(self.name, self.command(), label="sluiced " + self.name,
                                       stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        deadline = time.monotonic() + timeout
        need = [_LISTEN_AMQP, _LISTEN_HTTP]
        while need:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read()
            need = [r for r in need if not r.search(text)]
            if not need:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                rc = self.proc.poll()
                if rc is None:
                    self.kill9()
                raise NetnsError("sluiced %s did not start (exit %s):\n%s"
                                 % (self.name, rc, text.decode(errors="replace")[-3000:]))
            time.sleep(0.01)
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        """SIGKILL, by pid; waits for it. A crash: nothing is flushed or closed. Clients made
        by this object are dropped afterwards (their sockets are dead by then)."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.kills += 1
        if self.proc is not None:
            self.proc.wait(10)
            self.net.untrack(self.proc)
        self.close_clients()

    def stop(self, timeout=15.0):
        """SIGTERM and wait; returns the exit code (0 is a clean shutdown)."""
        self.close_clients()
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
                self.net.untrack(self.proc)
                return "timeout: no exit %.0fs after SIGTERM" % timeout
        self.net.untrack(self.proc)
        return self.proc.returncode

    def log_tail(self, lines=200):
        try:
            data = self.log_path.read_bytes().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join(data[-lines:])

    # -- addresses -----------------------------------------------------------------------
    def addr_from(self, other):
        """The address under which node `other` reaches this one."""
        return self.net.addr(getattr(other, "name", other), self.name)

    def format_name(self, queue, seen_from, port=None):
        """The format name under which node `seen_from` names `queue` on this node."""
        return format_name(self.addr_from(seen_from), queue, port)

    # -- clients (made inside the namespace) ---------------------------------------------
    def amqp(self, user="guest", password="guest", host="127.0.0.1", **kw):
        """A connected py-amqp connection, from inside this node's namespace."""
        import amqp
        kw.setdefault("connect_timeout", 5)
        kw.setdefault("read_timeout", 5)
        kw.setdefault("write_timeout", 5)
        kw.setdefault("login_method", "PLAIN")
        c = amqp.Connection(host="%s:%d" % (host, AMQP_PORT), userid=user, password=password,
                            **kw)
        with self.ns.entered():
            c.connect()
        self._clients.append(c)
        return c

    def pika(self, user="guest", password="guest", host="127.0.0.1", **kw):
        """A pika BlockingConnection from inside this node's namespace."""
        import pika
        kw.setdefault("connection_attempts", 1)
        kw.setdefault("socket_timeout", 5)
        params = pika.ConnectionParameters(host=host, port=AMQP_PORT,
                                           credentials=pika.PlainCredentials(user, password), **kw)
        with self.ns.entered():
            c = pika.BlockingConnection(params)
        self._clients.append(c)
        return c

    def http(self, method, path, body=None, user="guest", password="guest", timeout=10.0):
        """One management API request to this node: (status, decoded JSON or text)."""
        import base64
        import http.client
        import json
        conn = http.client.HTTPConnection("127.0.0.1", HTTP_PORT, timeout=timeout)
        with self.ns.entered():
            conn.connect()
        try:
            headers = {"Authorization": "Basic " + base64.b64encode(
                ("%s:%s" % (user, password)).encode()).decode()}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            raw = r.read()
            try:
                return r.status, json.loads(raw) if raw else None
            except ValueError:
                return r.status, raw.decode(errors="replace")
        finally:
            conn.close()

    def close_clients(self):
        for c in reversed(self._clients):
            try:
                c.close()
            except Exception:
                pass
        self._clients = []


# ------------------------------------------------------------------------------------------
# The user-space shaper (nfnetlink_queue), for kernels without sch_netem
# ------------------------------------------------------------------------------------------
NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2


def _nlattr(kind, data):
    n = 4 + len(data)
    return struct.pack("=HH", n, kind) + data + b"\0" * ((4 - n % 4) % 4)


def _nfq_msg(msg, queue, attrs, flags=NLM_F_REQUEST, seq=0):
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack(">H", queue) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, seq,
                       0) + body


def _nl_messages(data):
    off = 0
    while off + 16 <= len(data):
        n, kind, flags, seq, pid = struct.unpack_from("=IHHII", data, off)
        if n < 16:
            break
        yield kind, data[off + 16:off + n]
        off += (n + 3) & ~3


def _packet_id(payload):
    off = 4  # nfgenmsg
    while off + 4 <= len(payload):
        n, kind = struct.unpack_from("=HH", payload, off)
        if n < 4:
            break
        if kind & 0x3FFF == NFQA_PACKET_HDR:
            return struct.unpack_from(">I", payload, off + 4)[0]
        off += (n + 3) & ~3
    return None


def shape_main(queue, delay_ms, jitter_ms, loss, seed):
    """Hold every packet of NFQUEUE `queue` for delay +- jitter ms, or drop it with
    probability `loss`. Prints "ready" once bound. SIGTERM: accept what is held, exit 0."""
    rng = random.Random(seed)
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((0, 0))

    def config(attr, seq):
        s.send(_nfq_msg(NFQNL_MSG_CONFIG, queue, attr, NLM_F_REQUEST | NLM_F_ACK, seq))
        for kind, payload in _nl_messages(s.recv(65536)):
            if kind == NLMSG_ERROR:
                err = struct.unpack_from("=i", payload)[0]
                if err:
                    raise OSError(-err, "nfqueue config: " + os.strerror(-err))
                return
        raise OSError(errno.EPROTO, "nfqueue config: no ack")

    config(_nlattr(NFQA_CFG_CMD, struct.pack("=BB", NFQNL_CFG_CMD_BIND, 0) +
                   struct.pack(">H", socket.AF_INET)), 1)
    config(_nlattr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META)), 2)
    config(_nlattr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", 100000)), 3)
    s.setblocking(False)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    print("ready", flush=True)
    held = []  # heap of (due, n, packet id)
    n = 0
    stats = {"accepted": 0, "dropped": 0}

    def verdicts(items):
        buf = b"".join(_nfq_msg(NFQNL_MSG_VERDICT, queue,
                                _nlattr(NFQA_VERDICT_HDR, struct.pack(">II", v, pid)))
                       for v, pid in items)
        while buf:
            try:
                s.send(buf)
                return
            except BlockingIOError:
                select.select([], [s], [], 1)
            except OSError as e:
                if e.errno == errno.ENOENT:  # the packet is gone already (queue flushed)
                    return
                raise

    while not stop:
        now = time.monotonic()
        due = []
        while held and held[0][0] <= now:
            due.append((NF_ACCEPT, heapq.heappop(held)[2]))
        if due:
            verdicts(due)
            stats["accepted"] += len(due)
        timeout = max(0.0, held[0][0] - now) if held else 0.5
        try:
            r, _, _ = select.select([s], [], [], timeout)
        except InterruptedError:
            continue
        if not r:
            continue
        drops = []
        for _ in range(256):
            try:
                data = s.recv(1 << 16)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.ENOBUFS:  # the kernel dropped some: that is loss too
                    continue
                raise
            for kind, payload in _nl_messages(data):
                if kind != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    continue
                pid = _packet_id(payload)
                if pid is None:
                    continue
                if loss and rng.random() < loss:
                    drops.append((NF_DROP, pid))
                    continue
                d = delay_ms + (rng.uniform(-jitter_ms, jitter_ms) if jitter_ms else 0.0)
                n += 1
                heapq.heappush(held, (time.monotonic() + max(0.0, d) / 1000.0, n, pid))
        if drops:
            verdicts(drops)
            stats["dropped"] += len(drops)
    rest = [(NF_ACCEPT, pid) for _, _, pid in sorted(held)]
    if rest:
        verdicts(rest)
        stats["accepted"] += len(rest)
    print("shaper queue %d: accepted %d, dropped %d" % (queue, stats["accepted"],
                                                         stats["dropped"]), file=sys.stderr)
    return 0


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("shape", help="the NFQUEUE shaper (run it inside a namespace)")
    sp.add_argument("--queue", type=int, required=True)
    sp.add_argument("--delay-ms", type=float, default=0.0)
    sp.add_argument("--jitter-ms", type=float, default=0.0)
    sp.add_argument("--loss", type=float, default=0.0)
    sp.add_argument("--seed", type=int, default=None)
    sub.add_parser("sweep", help="remove namespaces left by runs that have died")
    sub.add_parser("list", help="namespaces of this harness that exist now")
    args = ap.parse_args(argv)
    if args.cmd == "shape":
        return shape_main(args.queue, args.delay_ms, args.jitter_ms, args.loss, args.seed)
    if args.cmd == "sweep":
        for name in sweep_stale(print):
            print("removed", name)
        return 0
    for name, pid in harness_namespaces():
        print(name, "owner pid %d %s" % (pid, "alive" if _pid_alive(pid) else "gone"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
