#!/usr/bin/env python3
"""abuse_test.py - availability under abuse and exhaustion (issue 13).

Each scenario starts a private sluiced (its own data directory, --port 0, loopback only),
runs one attack against it while a *bystander* process keeps doing small AMQP round trips on
a connection of its own, and then checks that the node neither died nor stalled and that it
recovered by itself. For every scenario one line is printed:

    abuse: NAME PASS|FAIL rss=..MB peak=..MB cpu=..s worst_rtt=..ms p99_rtt=..ms (n) - checks

rss is the node's resident set at the end, peak its high-water mark (VmHWM), cpu the CPU
seconds it used during the attack, worst_rtt the slowest bystander round trip during the
attack. The last line is "N passed, N failed".

Usage: abuse_test.py [--only a,b] [--list] [--rtt-limit-ms N] [--keep]
Env:   SLUICED (binary, default build/sluiced), ABUSE_OLD_NODE=1 (a binary older than the
       loop_cpu_stats setting, to measure "before"), ABUSE_RTT_LIMIT_MS (the bound on the single
       worst bystander round trip in the stall scenarios, default 250 for a shared machine;
       the node's own loop turns, from its /metrics with loop_cpu_stats, are held to the
       issue's 50 ms of CPU each).

Every loop here is bounded in count and time; every process, socket and mount made here is
removed at the end, also when a scenario fails.
"""

import argparse
import base64
import http.client
import json
import multiprocessing
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
import amqpraw  # noqa: E402

HOST = "127.0.0.1"
LISTEN_RE = re.compile(rb"listening amqp=([0-9.]+):(\d+)")
LISTEN_HTTP_RE = re.compile(rb"listening http=([0-9.]+):(\d+)")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(max(n, soft), hard)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


# ---------------------------------------------------------------------------
# The node under test
# ---------------------------------------------------------------------------
class Node:
    def __init__(self, workdir, config=None, nofile=None, data_dir=None, args=(), env=None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(data_dir) if data_dir else self.workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "sluiced.log"
        # CPU time per loop turn: the node's own long turns, told from the machine's load
        # (ABUSE_OLD_NODE=1 for a binary from before the setting, to measure "before")
        stats = {} if os.environ.get("ABUSE_OLD_NODE") == "1" else {"loop_cpu_stats": "true"}
        self.config = dict(stats, **(config or {}))
        self.nofile = nofile
        self.args = list(args)
        self.env = env
        self.proc = None
        self.port = None
        self.mgmt_port = None
        self.exit_code = None

    def start(self, timeout=20.0):
        binary = os.environ.get("SLUICED", "build/sluiced")
        if not os.path.isabs(binary):
            binary = str(REPO / binary)
        cmd = [binary, "--port", "0", "--mgmt-port", "0", "--bind", HOST, "--data-dir",
               str(self.data_dir)]
        if self.config:
            conf = self.workdir / "sluice.conf"
            conf.write_text("".join("%s = %s\n" % kv for kv in self.config.items()))
            cmd += ["--config", str(conf)]
        cmd += self.args
        nofile = self.nofile

        def limits():
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        logf = open(self.log_path, "ab")
        log0 = logf.tell()  # a restart appends: read only what this start writes
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     cwd=str(REPO), preexec_fn=limits, env=self.env)
        logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[log0:]
            m = LISTEN_RE.search(text)
            h = LISTEN_HTTP_RE.search(text)
            if m and h:
                self.port = int(m.group(2))
                self.mgmt_port = int(h.group(2))
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise RuntimeError("sluiced did not start (exit %s):\n%s"
                           % (self.proc.poll(), self.log_tail()))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def status_kb(self, field):
        try:
            for line in open("/proc/%d/status" % self.proc.pid):
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def rss_mb(self):
        return self.status_kb("VmRSS") / 1024.0

    def peak_mb(self):
        return self.status_kb("VmHWM") / 1024.0

    def cpu_s(self):
        try:
            f = open("/proc/%d/stat" % self.proc.pid).read()
            fields = f[f.rindex(")") + 2:].split()
            return (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, ValueError):
            return 0.0

    def fds(self):
        try:
            return len(os.listdir("/proc/%d/fd" % self.proc.pid))
        except OSError:
            return -1

    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_size(self):
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_tail(self, n=40):
        return "\n".join(self.log_text().splitlines()[-n:])

    def stop(self, timeout=15.0):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.exit_code = "no exit within %.0fs of SIGTERM" % timeout
                return self.exit_code
        self.exit_code = self.proc.returncode
        return self.exit_code

    # -- HTTP ---------------------------------------------------------------
    def http(self, method, path, body=None, timeout=5.0):
        c = http.client.HTTPConnection(HOST, self.mgmt_port, timeout=timeout)
        try:
            hdrs = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                hdrs["Content-Type"] = "application/json"
            c.request(method, path, body=data, headers=hdrs)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def raw(self, timeout=5.0, **kw):
        r = amqpraw.RawConnection(HOST, self.port, timeout=timeout)
        r.handshake(**kw)
        r.open_channel(1)
        return r


# ---------------------------------------------------------------------------
# The bystander: a separate process (no GIL shared with the attack) doing one small round
# trip every 10 ms on its own connection, recording the slowest.
# ---------------------------------------------------------------------------
RTT_KEEP = 20000  # round trips kept for the percentile (a ring)


def _bystander_main(port, worst, count, fails, run, stop, rtts):
    conn = None
    while not stop.value:
        try:
            if conn is None:
                conn = amqpraw.RawConnection(HOST, port, timeout=10.0)
                conn.handshake(timeout=10.0)
                conn.open_channel(1)
            t0 = time.monotonic()
            conn.rpc(1, "exchange.declare", timeout=10.0, exchange="amq.direct", type="direct",
                     passive=True)
            rtt = time.monotonic() - t0
            if run.value:
                with worst.get_lock():
                    if rtt > worst.value:
                        worst.value = rtt
                    rtts[count.value % RTT_KEEP] = rtt
                    count.value += 1
        except Exception:
            if run.value:
                fails.value += 1
            try:
                if conn is not None:
                    conn.close()
            except Exception:
                pass
            conn = None
            time.sleep(0.1)
        time.sleep(0.01)
    if conn is not None:
        conn.close()


class Bystander:
    def __init__(self, node):
        ctx = multiprocessing.get_context("fork")
        self.worst = ctx.Value("d", 0.0)
        self.count = ctx.Value("l", 0)
        self.fails = ctx.Value("l", 0)
        self.run = ctx.Value("b", 0)
        self.stop_flag = ctx.Value("b", 0)
        self.rtts = ctx.Array("d", RTT_KEEP, lock=False)
        self.proc = ctx.Process(target=_bystander_main,
                                args=(node.port, self.worst, self.count, self.fails, self.run,
                                      self.stop_flag, self.rtts), daemon=True)
        self.proc.start()
        # wait for its first round trips before measuring anything
        deadline = time.monotonic() + 10
        self.run.value = 1
        while self.count.value < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.reset()

    def reset(self, node=None):
        """Measure from now: the bystander's round trips, and the node's own count of long
        loop turns (the stall itself, whatever the machine's other load does to the
        bystander's scheduling)."""
        self.worst.value = 0.0
        self.count.value = 0
        self.fails.value = 0
        if node is not None:
            self.turns0 = loop_turns(node)

    def p99(self):
        n = min(self.count.value, RTT_KEEP)
        if not n:
            return 0.0
        v = sorted(self.rtts[:n])
        return v[min(n - 1, int(n * 0.99))]

    def close(self):
        self.stop_flag.value = 1
        self.proc.join(15)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------
class Result:
    def __init__(self):
        self.checks = []  # (ok, text)

    def check(self, ok, text):
        self.checks.append((bool(ok), text))
        return ok

    @property
    def ok(self):
        return all(ok for ok, _ in self.checks)

    def detail(self):
        """Every check with its figure; failed ones marked FAILED."""
        return "; ".join(t if ok else "FAILED: " + t for ok, t in self.checks)


SCENARIOS = []


def scenario(item, text):
    def deco(fn):
        SCENARIOS.append((fn.__name__.replace("_", "-"), item, text, fn))
        return fn
    return deco


def rtt_limit():
    """The slowest bystander round trip allowed. The issue's target is 50 ms; the machine is
    shared (2 cores, other work), so the default tolerates scheduling noise in the single
    worst one, while the node's own loop turns are held to 50 ms of CPU each."""
    return float(os.environ.get("ABUSE_RTT_LIMIT_MS", "250")) / 1000.0


TURN_LIMIT_MS = 50  # the target, checked on the node's own turn durations


def http_ok(node, path="/api/overview", timeout=3.0):
    try:
        st, _ = node.http("GET", path, timeout=timeout)
        return st == 200
    except Exception:
        return False


def close_wait_count(port):
    """Sockets of the node's HTTP port in CLOSE-WAIT (peer closed, node did not)."""
    n = 0
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(f).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, state = parts[1], parts[3]
            if state == "08" and int(local.split(":")[1], 16) == port:
                n += 1
    return n


@scenario(1, "300 sockets to the HTTP port (over its 256 limit), held 2 s, closed; x3")
def http_burst(node, by, res):
    answered = 0
    tries = 0
    for _ in range(3):
        socks = []
        for _ in range(300):
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect((HOST, node.mgmt_port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        time.sleep(2)
        for s in socks:
            s.close()
        time.sleep(0.2)
        for _ in range(5):
            tries += 1
            answered += http_ok(node, timeout=3.0)
    res.check(answered == tries, "%d of %d API requests after the bursts answered"
              % (answered, tries))
    deadline = time.monotonic() + 5
    while close_wait_count(node.mgmt_port) and time.monotonic() < deadline:
        time.sleep(0.1)
    res.check(close_wait_count(node.mgmt_port) == 0,
              "%d sockets left in CLOSE-WAIT" % close_wait_count(node.mgmt_port))


def loop_turns(node):
    """(turns over 50 ms of CPU, turns over 50 ms of wall time) the node has counted so far."""
    return (metric_value(node, 'sluice_loop_turns_cpu_over_total{ms="50"}') or 0,
            metric_value(node, 'sluice_loop_turns_over_total{ms="50"}') or 0)


def metric_value(node, name):
    try:
        st, body = node.http("GET", "/metrics", timeout=3.0)
    except Exception:
        return None
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def open_idle(port, n, timeout=1.0):
    """n TCP connections that never say anything."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(timeout)
        try:
            s.connect((HOST, port))
            socks.append(s)
        except OSError:
            s.close()
    return socks


def publish_confirmed(node, queue, n, size, timeout=20.0, conn=None):
    """n persistent messages of size bytes to a durable queue, with confirms; returns the
    number confirmed. On conn (then closed) if given, else on a new connection."""
    r = conn or node.raw(timeout=timeout)
    r.rpc(1, "queue.declare", queue=queue, durable=True)
    r.rpc(1, "confirm.select")
    body = b"x" * size
    for _ in range(n):
        r.publish(1, "", queue, body, properties={"delivery_mode": 2})
    acked = 0
    deadline = time.monotonic() + timeout
    while acked < n and time.monotonic() < deadline:
        m = r.read_method(timeout=max(0.1, deadline - time.monotonic()))
        if m.name == "basic.ack":
            acked = m.delivery_tag if m.multiple else acked + 1
    r.close()
    return acked


def _fd_setup(work):
    return Node(work, nofile=1024, config={"segment_size": "1M"}).start()


@scenario(2, "RLIMIT_NOFILE 1024 and 1,100 idle AMQP connections: no spin, store and API work")
def fd_exhaustion(node, by, res):
    log0 = node.log_size()
    # The publisher connects before the flood: one that connects at the limit waits in the
    # backlog, where the paused listener's retries may take and drop it (what it does to every
    # connection over the reserve), and this scenario is about the store at the limit.
    pub = node.raw(timeout=20.0)
    socks = open_idle(node.port, 1100)
    try:
        time.sleep(0.5)
        cpu0 = node.cpu_s()
        time.sleep(5)
        cpu = node.cpu_s() - cpu0
        grew = node.log_size() - log0
        res.check(cpu < 1.0, "%.2f s of CPU in 5 s at the descriptor limit" % cpu)
        res.check(grew < 16 * 1024, "log grew %d bytes meanwhile" % grew)
        # the store needs new files: 3 MB of persistent messages over 1 MB segments
        try:
            acked = publish_confirmed(node, "fd-durable", 48, 64 * 1024, conn=pub)
        except Exception as e:
            acked = "%s: %s" % (type(e).__name__, e)
        res.check(acked == 48, "%s of 48 persistent publishes confirmed at the limit" % acked)
        res.check(node.alive(), "node alive at the limit")
        res.check(http_ok(node), "API answers at the limit")
        pauses = metric_value(node, 'sluice_listener_fd_pauses_total{listener="amqp"}')
        res.check(pauses and pauses >= 1, "listener pauses counted in /metrics (%s)" % pauses)
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    ok = False
    while not ok and time.monotonic() < deadline:
        try:
            node.raw(timeout=2).close()
            ok = True
        except Exception:
            time.sleep(0.2)
    res.check(ok, "new connections accepted once descriptors came back")


fd_exhaustion.setup = _fd_setup


def _cap_setup(work):
    return Node(work, config={"connection_max": "20"}).start()


@scenario(2, "connection_max 20: the 21st connection is refused with 530, the next after a close "
             "is taken")
def connection_cap(node, by, res):
    conns, refused = [], 0
    for _ in range(30):
        try:
            conns.append(node.raw(timeout=3))
        except amqpraw.UnexpectedClose as e:
            refused += e.reply_code == 530
        except Exception:
            pass
    # the bystander holds one of the 20
    res.check(len(conns) == 19, "%d of 30 opened next to the bystander (cap 20)" % len(conns))
    res.check(refused == 11, "%d refused with 530 NOT_ALLOWED" % refused)
    for c in conns[:5]:
        c.close()
    time.sleep(0.3)
    again = 0
    for _ in range(5):
        try:
            conns.append(node.raw(timeout=3))
            again += 1
        except Exception:
            pass
    res.check(again == 5, "%d of 5 taken after 5 closed" % again)
    n = metric_value(node, "sluice_connections_refused_total")
    res.check(n == 11, "sluice_connections_refused_total %s" % n)
    for c in conns[5:]:
        c.close()


connection_cap.setup = _cap_setup


def node_mem(node):
    """The node's own memory figure (what its alarm counts), from /api/nodes."""
    try:
        st, body = node.http("GET", "/api/nodes", timeout=3.0)
        return json.loads(body)[0].get("mem_used")
    except Exception:
        return None


def blocked_seen(r, timeout=0.2):
    try:
        r.expect("connection.blocked", timeout=timeout)
        return True
    except Exception:
        return False


def _unread_setup(work):
    return Node(work, config={"memory_high_watermark": "256M"}).start()


def _flood_unread(node, res, what, frames, seconds=8.0):
    """Send requests whose replies are never read, for `seconds`; the node's RSS must stay
    bounded and its memory alarm must see what the replies take."""
    r = amqpraw.RawConnection(HOST, node.port, timeout=10)
    r.handshake()
    r.open_channel(1)
    r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    r.sock.setblocking(False)
    sent = 0
    rss0 = node.rss_mb()
    deadline = time.monotonic() + seconds
    chunk = frames * 200
    off = 0  # a partial send continues where it stopped: the stream must stay whole
    while time.monotonic() < deadline:
        try:
            n = r.sock.send(chunk[off:] if off else chunk)
            sent += n
            off = (off + n) % len(chunk)
            if off:
                time.sleep(0.01)
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            break
    res.check("error:" not in node.log_text(), "the flooding connection got no error")
    grew = node.rss_mb() - rss0
    res.check(grew < 64, "RSS grew %.0f MB while %d MB of %s went unread" % (grew, sent >> 20, what))
    r.close()


@scenario(3, "mandatory publishes to an unroutable key, the returns never read, for 8 s")
def unread_returns(node, by, res):
    body = b"y" * 1024
    one = (amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1,
                                amqpraw.encode_method("basic.publish", exchange="",
                                                      routing_key="nowhere", mandatory=True))
           + amqpraw.encode_frame(amqpraw.FRAME_HEADER, 1,
                                  amqpraw.encode_content_header(len(body)))
           + amqpraw.encode_frame(amqpraw.FRAME_BODY, 1, body))
    _flood_unread(node, res, "basic.return", one, 8.0)


unread_returns.setup = _unread_setup


@scenario(3, "basic.get of a 64 KB message, requeued, the get-oks never read, for 8 s")
def unread_gets(node, by, res):
    p = node.raw()
    p.rpc(1, "queue.declare", queue="gets")
    p.publish(1, "", "gets", b"z" * 65536)
    p.rpc(1, "basic.qos", prefetch_count=0)  # a sync point: the publish is in
    p.close()
    # get without ack: the message stays with this channel, so later gets find it ... gone;
    # recover(requeue) puts it back every time.
    one = (amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1,
                                amqpraw.encode_method("basic.get", queue="gets", no_ack=False))
           + amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1,
                                  amqpraw.encode_method("basic.recover", requeue=True)))
    _flood_unread(node, res, "basic.get-ok", one, 8.0)


unread_gets.setup = _unread_setup


@scenario(4, "content headers announcing 128 MiB with no body, 33 channels x 20 connections")
def announced_bodies(node, by, res):
    conns = []
    for _ in range(20):
        r = node.raw(capabilities={"connection.blocked": True})
        for ch in range(2, 35):
            r.rpc(ch, "channel.open")
            r.send(amqpraw.encode_frame(amqpraw.FRAME_METHOD, ch,
                                        amqpraw.encode_method("basic.publish", exchange="",
                                                              routing_key="q"))
                   + amqpraw.encode_frame(amqpraw.FRAME_HEADER, ch,
                                          amqpraw.encode_content_header(128 << 20)))
        conns.append(r)
    time.sleep(1.5)
    res.check(node.rss_mb() < 200, "RSS %.0f MB with %d MiB announced" % (node.rss_mb(),
                                                                            20 * 33 * 128))
    mem = node_mem(node)
    res.check(mem is not None and mem < 64 << 20, "mem_used %s bytes" % mem)
    # nobody is blocked: a real publisher still gets its confirm
    try:
        acked = publish_confirmed(node, "after-headers", 10, 1000, timeout=5)
    except Exception as e:
        acked = "%s: %s" % (type(e).__name__, e)
    res.check(acked == 10, "%s of 10 publishes confirmed meanwhile" % acked)
    for r in conns:
        r.close()


announced_bodies.setup = lambda work: Node(work, config={"memory_high_watermark": "1G"}).start()


@scenario(7, "a publisher blocked by the memory alarm, heartbeat 1 s, keeps its connection 5 s")
def blocked_heartbeats(node, by, res):
    r = amqpraw.RawConnection(HOST, node.port, timeout=10)
    r.handshake(heartbeat=1, capabilities={"connection.blocked": True})
    r.open_channel(1)
    r.rpc(1, "queue.declare", queue="hb")
    # over the watermark: the publisher is blocked at its next publish
    for _ in range(12):
        r.publish(1, "", "hb", b"h" * (1 << 20))
    blocked = False
    deadline = time.monotonic() + 5
    while not blocked and time.monotonic() < deadline:
        blocked = blocked_seen(r, 0.5)
    res.check(blocked, "connection.blocked received")
    # keep beating like a live client, for 5 s (5 intervals)
    alive = True
    t_end = time.monotonic() + 5
    while time.monotonic() < t_end:
        r.send_heartbeat()
        try:
            r.sock.settimeout(0.25)
            data = r.sock.recv(65536)
            if data == b"":
                alive = False
                break
        except socket.timeout:
            pass
        except OSError:
            alive = False
            break
    res.check(alive, "connection still open after 5 heartbeat intervals blocked")
    res.check("missed heartbeats" not in node.log_text(), "no 'missed heartbeats' in the log")
    r.close()


blocked_heartbeats.setup = lambda work: Node(
    work, config={"memory_high_watermark": "8M", "heartbeat": "1"}).start()


def pipelined(r, frames, sync_channel=1):
    """Send many frames at once, then one round trip so they are all handled."""
    r.send(b"".join(frames))
    r.rpc(sync_channel, "basic.qos", prefetch_count=0, timeout=60)


def publish_frames(ch, exchange, rk, body, properties=None, mandatory=False):
    return (amqpraw.encode_frame(amqpraw.FRAME_METHOD, ch,
                                 amqpraw.encode_method("basic.publish", exchange=exchange,
                                                       routing_key=rk, mandatory=mandatory))
            + amqpraw.encode_frame(amqpraw.FRAME_HEADER, ch,
                                   amqpraw.encode_content_header(len(body), properties))
            + amqpraw.encode_frame(amqpraw.FRAME_BODY, ch, body))


def settle_then_measure(by, node):
    """Setup work is done: measure from here, during the attack only."""
    time.sleep(0.3)
    by.reset(node)


@scenario(6, "a 255-dot routing key to a topic exchange with 5,000 bindings, 300 times")
def deep_routing_key(node, by, res):
    r = node.raw(timeout=60)
    r.rpc(1, "exchange.declare", exchange="deep", type="topic")
    r.rpc(1, "queue.declare", queue="deep-q")
    binds = []
    for i in range(5000):
        pat = ("x%d.#" % i, "#.x%d" % i, "*.x%d.*" % i, "#.%d.#" % i, "#")[i % 5] if i < 4999 \
            else "#"
        binds.append(amqpraw.encode_frame(
            amqpraw.FRAME_METHOD, 1, amqpraw.encode_method(
                "queue.bind", queue="deep-q", exchange="deep", routing_key=pat, nowait=True)))
    pipelined(r, binds)
    settle_then_measure(by, node)
    key = "." * 255
    t0 = time.monotonic()
    sent = 0
    while sent < 300 or time.monotonic() - t0 < 3:  # at least 3 s of attack
        pipelined(r, [publish_frames(1, "deep", key, b"d")] * 100)
        sent += 100
    took = time.monotonic() - t0
    st = r.rpc(1, "queue.declare", queue="deep-q", passive=True)
    res.check(st.message_count == sent, "%d of %d routed" % (st.message_count, sent))
    res.check(True, "%.0f us a publish" % (took / sent * 1e6))
    r.close()


deep_routing_key.stall = True


@scenario(6, "20 publishes with a 10,000-entry headers table to a headers exchange with 20,000 "
             "bindings")
def headers_routing(node, by, res):
    r = node.raw(timeout=60)
    r.rpc(1, "exchange.declare", exchange="hx", type="headers")
    for q in range(10):
        r.rpc(1, "queue.declare", queue="hq%d" % q)
    binds = []
    for i in range(20000):
        binds.append(amqpraw.encode_frame(
            amqpraw.FRAME_METHOD, 1, amqpraw.encode_method(
                "queue.bind", queue="hq%d" % (i % 10), exchange="hx", routing_key="b%d" % i,
                nowait=True, arguments={"x-match": "any", "k%d" % i: i})))
    pipelined(r, binds)
    headers = {"h%d" % i: i for i in range(10000)}
    headers["k7"] = 7  # matches one binding: queue hq7
    settle_then_measure(by, node)
    t0 = time.monotonic()
    sent = 0
    one = publish_frames(1, "hx", "", b"h", {"headers": headers})
    while sent < 20 or time.monotonic() - t0 < 3:  # at least 3 s of attack
        pipelined(r, [one] * 20)
        sent += 20
    took = time.monotonic() - t0
    st = r.rpc(1, "queue.declare", queue="hq7", passive=True)
    res.check(st.message_count == sent, "%d of %d routed" % (st.message_count, sent))
    res.check(True, "%.1f ms a publish" % (took / sent * 1e3))
    r.close()


headers_routing.stall = True


@scenario(6, "a million messages expiring at once (behind a head that expires last), "
             "dead-lettered")
def mass_expiry(node, by, res):
    r = node.raw(timeout=120)
    r.rpc(1, "queue.declare", queue="mass-dlq")
    r.rpc(1, "queue.declare", queue="mass", arguments={"x-dead-letter-exchange": "",
                                                       "x-dead-letter-routing-key": "mass-dlq"})
    t0 = time.monotonic()
    r.publish(1, "", "mass", b"head", properties={"expiration": "25000"})
    one = publish_frames(1, "", "mass", b"m", {"expiration": "1000"})
    for _ in range(10):
        pipelined(r, [one] * 100000)
    st = r.rpc(1, "queue.declare", queue="mass", passive=True)
    took = time.monotonic() - t0
    res.check(st.message_count == 1000001 and took < 20,
              "%d queued in %.1f s (before the head expires)" % (st.message_count, took))
    settle_then_measure(by, node)
    # the head expires 25 s after it was published, and everything behind it at once
    deadline = time.monotonic() + 45
    n = st.message_count
    while n and time.monotonic() < deadline:
        time.sleep(0.5)
        n = r.rpc(1, "queue.declare", queue="mass", passive=True).message_count
    res.check(n == 0, "%d left after the expiry" % n)
    d = r.rpc(1, "queue.declare", queue="mass-dlq", passive=True).message_count
    res.check(d == 1000001, "%d dead-lettered" % d)
    r.close()


mass_expiry.stall = True


def _http_many(node, paths, timeout=120.0):
    """GET every path at once (one thread each); [(status, body or exception)]."""
    out = [None] * len(paths)

    def one(i):
        try:
            out[i] = node.http("GET", paths[i], timeout=timeout)
        except Exception as e:
            out[i] = (None, e)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(paths))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout + 5)
    return out


@scenario(6, "100,000 queues: 10 full GET /api/queues at once, then 40 filtered pages at once")
def api_queues_100k(node, by, res):
    r = node.raw(timeout=120)
    for k in range(10):
        pipelined(r, [amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1, amqpraw.encode_method(
            "queue.declare", queue="q%06d" % (k * 10000 + i), nowait=True))
            for i in range(10000)])
    r.close()
    settle_then_measure(by, node)
    t0 = time.monotonic()
    full = _http_many(node, ["/api/queues"] * 10)
    took_full = time.monotonic() - t0
    # counted, not parsed: the test's own CPU must not be what slows the bystander
    ok = sum(1 for st, body in full
             if st == 200 and body[:1] == b"[" and body[-1:] == b"]"
             and body.count(b'"durable":') == 100003)
    res.check(ok == 10, "%d of 10 full lists with 100,003 queues (%.1f s for all)"
              % (ok, took_full))
    t0 = time.monotonic()
    pages = _http_many(node, ["/api/queues?page=%d&page_size=100&name=q0%d" % (1 + i % 5, i % 10)
                              for i in range(40)])
    took_pages = time.monotonic() - t0
    ok = 0
    for st, body in pages:
        if st == 200:
            j = json.loads(body)
            ok += (isinstance(j, dict) and j.get("filtered_count") == 10000
                   and j.get("item_count") == 100)
    res.check(ok == 40, "%d of 40 filtered pages right (%.1f s for all)" % (ok, took_pages))
    t0 = time.monotonic()
    st, body = node.http("GET", "/api/queues?page=1000&page_size=100&columns=name")
    j = json.loads(body) if st == 200 else None
    res.check(isinstance(j, dict) and j["items"][0]["name"] == "q099900",
              "page 1000 by rank in %.0f ms" % ((time.monotonic() - t0) * 1000))


api_queues_100k.stall = True


LIST_CONNS = int(os.environ.get("ABUSE_LIST_CONNS", "2000"))  # 10000 needs ~10,100 descriptors


@scenario(6, "10,000 bindings, channels and consumers, %d connections: every list, whole "
             "and paged, asked for 8 at a time, 3 rounds" % LIST_CONNS)
def api_lists_10k(node, by, res):
    r = node.raw(timeout=120)
    r.rpc(1, "exchange.declare", exchange="lx", type="direct")
    pipelined(r, [amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1, amqpraw.encode_method(
        "queue.declare", queue="lq%03d" % i, nowait=True)) for i in range(100)])
    pipelined(r, [amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1, amqpraw.encode_method(
        "queue.bind", queue="lq%03d" % (i % 100), exchange="lx", routing_key="k%05d" % i,
        nowait=True)) for i in range(10000)])
    holders = []  # 5 connections of 2,000 channels, one consumer each
    for k in range(5):
        h = node.raw(timeout=120)
        frames = []
        for c in range(2, 2002):
            frames.append(amqpraw.encode_frame(amqpraw.FRAME_METHOD, c,
                                               amqpraw.encode_method("channel.open")))
            frames.append(amqpraw.encode_frame(amqpraw.FRAME_METHOD, c, amqpraw.encode_method(
                "basic.consume", queue="lq%03d" % (c % 100), consumer_tag="ctag-%d-%d" % (k, c),
                nowait=True)))
        pipelined(h, frames)
        h.pending = []
        holders.append(h)
    idle = []
    raise_nofile(LIST_CONNS + 1000)
    for _ in range(LIST_CONNS):
        c = amqpraw.RawConnection(HOST, node.port, timeout=30)
        c.handshake()
        idle.append(c)
    settle_then_measure(by, node)
    lists = [  # (path, marker counted in the reply, at least)
        ("/api/bindings", b'"properties_key":', 10100),
        ("/api/channels", b'"consumer_count":', 10005),
        ("/api/consumers", b'"consumer_tag":', 10000),
        ("/api/connections", b'"peer_port":', LIST_CONNS + 5),
    ]
    pages = [  # (path, items expected on the page)
        ("/api/bindings?page=20&page_size=500&sort=routing_key&sort_reverse=true", 500),
        ("/api/channels?page=5&page_size=500&sort=number", 500),
        ("/api/consumers?page=2&page_size=500&name=ctag-1-", 500),
        ("/api/connections?page=2&page_size=500&sort=peer_port", 500),
    ]
    full_ok = page_ok = 0
    over10 = metric_value(node, 'sluice_loop_turns_cpu_over_total{ms="10"}') or 0
    t0 = time.monotonic()
    for _ in range(3):
        out = _http_many(node, [p for p, _, _ in lists] + [p for p, _ in pages])
        for (path, marker, least), (st, body) in zip(lists, out[:4]):
            # counted, not parsed: the test's own CPU must not be what slows the bystander
            if st == 200 and body[:1] == b"[" and body.count(marker) >= least:
                full_ok += 1
            else:
                res.check(False, "%s: %s %r" % (path, st, body[:200]))
        for (path, n), (st, body) in zip(pages, out[4:]):
            j = json.loads(body) if st == 200 else None
            if isinstance(j, dict) and j.get("item_count") == n:
                page_ok += 1
            else:
                res.check(False, "%s: %s %r" % (path, st, body[:200]))
    took = time.monotonic() - t0
    res.check(full_ok == 12, "%d of 12 whole lists of %d-10,100 items right"
              % (full_ok, LIST_CONNS))
    res.check(page_ok == 12, "%d of 12 sorted or filtered pages of 500 right (%.1f s for the "
              "3 rounds)" % (page_ok, took))
    over10 = (metric_value(node, 'sluice_loop_turns_cpu_over_total{ms="10"}') or 0) - over10
    res.check(True, "%d loop turns over 10 ms of CPU meanwhile" % over10)
    by.run.value = 0  # the attack is over: 2,000 connections closing at once is not it
    for c in idle + holders + [r]:
        c.close()


api_lists_10k.stall = True


@scenario(8, "a 1M-message queue under a 20 MB budget: 60 peeks at offset 999,999")
def deep_peek(node, by, res):
    r = node.raw(timeout=120)
    r.rpc(1, "queue.declare", queue="deep")
    for k in range(10):
        pipelined(r, [publish_frames(1, "", "deep", b"m%07d" % (k * 100000 + i))
                      for i in range(100000)])
    n = r.rpc(1, "queue.declare", queue="deep", passive=True).message_count
    res.check(n == 1000000, "%d queued" % n)
    r.close()
    settle_then_measure(by, node)
    rss0 = node.rss_mb()
    right = 0
    for _ in range(60):
        st, body = node.http("GET", "/api/queues/%2F/deep/messages?count=1&offset=999999",
                             timeout=30)
        if st == 200:
            j = json.loads(body)
            right += len(j) == 1 and base64.b64decode(j[0]["payload"]) == b"m0999999" \
                if j and j[0].get("payload_encoding") == "base64" else \
                (len(j) == 1 and j[0].get("payload") == "m0999999")
    res.check(right == 60, "%d of 60 peeks answered the 1,000,000th message" % right)
    grew = node.rss_mb() - rss0
    res.check(grew < 32, "RSS grew %.0f MB over the peeks (from %.0f MB)" % (grew, rss0))
    st, body = node.http("GET", "/api/queues/%2F/deep/messages?count=500&offset=500000")
    j = json.loads(body) if st == 200 else []
    res.check(len(j) == 500 and j[0].get("payload") == "m0500000"
              and j[-1].get("payload") == "m0500499", "500 in a row from the middle")


deep_peek.setup = lambda work: Node(work, config={"memory_budget": "20M"}).start()
deep_peek.stall = True


def _tmpfs_setup(work, size="64m", config=None):
    data = Path(work) / ("tmpfs-%d" % os.getpid())
    data.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "sluice-abuse", str(data)],
                   check=True)
    return Node(work, data_dir=data, config=config).start()


def _tmpfs_cleanup(work):
    data = Path(work) / ("tmpfs-%d" % os.getpid())
    if os.path.ismount(str(data)):
        subprocess.run(["umount", "-l", str(data)], check=False)


def fill_disk(path, leave_bytes):
    """A ballast file that leaves about leave_bytes free on path's filesystem."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    n = max(0, free - leave_bytes)
    with open(os.path.join(path, "ballast"), "wb") as f:
        chunk = b"\0" * (1 << 20)
        while n > 0:
            try:
                f.write(chunk[:min(n, len(chunk))])
            except OSError:
                break
            n -= min(n, len(chunk))


def wait_log(node, text, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in node.log_text():
            return True
        time.sleep(0.05)
    return False


@scenario(5, "disk alarm on a tmpfs data directory: every door refuses or blocks what needs "
             "the disk and serves the rest; then a start on a full disk")
def full_disk_doors(node, by, res):
    r = node.raw(capabilities={"connection.blocked": True})
    r.rpc(1, "queue.declare", queue="kept", durable=True)
    r.rpc(1, "confirm.select")
    for i in range(20):
        r.publish(1, "", "kept", b"k%d" % i, properties={"delivery_mode": 2})
    got = 0
    while got < 20:
        m = r.read_method(timeout=5)
        if m.name == "basic.ack":
            got = m.delivery_tag if m.multiple else got + 1
    fill_disk(str(node.data_dir), 8 << 20)  # under disk_free_limit (16M)
    res.check(wait_log(node, "disk alarm: blocking publishers"), "disk alarm raised")
    st, body = node.http("POST", "/api/exchanges/%2F/amq.default/publish",
                         {"routing_key": "kept", "payload": "x", "payload_encoding": "string",
                          "properties": {}})
    res.check(st == 503, "HTTP publish under the disk alarm: %s" % st)
    st, _ = node.http("PUT", "/api/queues/%2F/durable-http", {"durable": True})
    res.check(st == 503, "HTTP durable declare: %s" % st)
    st, _ = node.http("PUT", "/api/queues/%2F/transient-http", {"durable": False})
    res.check(st in (201, 204), "HTTP transient declare: %s" % st)
    # AMQP: a durable declare waits (connection.blocked), a consumer goes on
    d = node.raw(capabilities={"connection.blocked": True})
    d.send_method(1, "queue.declare", queue="durable-amqp", durable=True)
    blocked = blocked_seen(d, 2.0)
    res.check(blocked, "AMQP durable declare: connection.blocked")
    try:
        d.expect("queue.declare-ok", timeout=1.0)
        answered = True
    except Exception:
        answered = False
    res.check(not answered, "... and no declare-ok while the alarm is on")
    c = node.raw()
    got = []
    for _ in range(20):
        c.send_method(1, "basic.get", queue="kept", no_ack=False)
        m = c.read_method(timeout=5)
        while m.name in ("connection.blocked", "connection.unblocked"):
            m = c.read_method(timeout=5)
        if m.name != "basic.get-ok":
            break
        got.append(m.body)
        c.send_method(1, "basic.ack", delivery_tag=m.delivery_tag)
    res.check(len(got) == 20, "%d of 20 stored messages consumed and acked meanwhile" % len(got))
    res.check(http_ok(node), "API answers")
    os.unlink(os.path.join(str(node.data_dir), "ballast"))
    try:
        d.expect("queue.declare-ok", timeout=5.0)
        res.check(True, "the durable declare completes once space is back")
    except Exception as e:
        res.check(False, "the durable declare after the alarm: %s" % e)
    for x in (r, d, c):
        x.close()
    # a node stopped with a full disk starts again (the bystander's figures end here: its
    # connection goes with the node)
    by.run.value = 0
    rc = node.stop()
    res.check(rc == 0, "stopped: %s" % rc)
    fill_disk(str(node.data_dir), 0)
    try:
        node.start(timeout=10)
        started = True
    except Exception:
        started = False
    res.check(started, "started on a full disk")
    if started:
        res.check(http_ok(node), "API answers on a full disk")
        q = node.raw().rpc(1, "queue.declare", queue="kept", passive=True)
        res.check(q.message_count == 0, "the queue is there, its acked messages gone")
    os.unlink(os.path.join(str(node.data_dir), "ballast"))


full_disk_doors.setup = lambda work: _tmpfs_setup(work, "64m", {"disk_free_limit": "16M"})
full_disk_doors.cleanup = _tmpfs_cleanup


@scenario(5, "the disk fills under persistent publishers (no early alarm): the node holds the "
             "writes, keeps serving, and goes on when space returns")
def enospc(node, by, res):
    data = str(node.data_dir)
    fill_disk(data, 12 << 20)
    r = node.raw(capabilities={"connection.blocked": True}, timeout=10)
    r.rpc(1, "queue.declare", queue="fill", durable=True)
    r.rpc(1, "confirm.select")
    body = b"f" * 65536
    sent = acked = 0
    deadline = time.monotonic() + 20
    stalled_at = None
    r.sock.settimeout(0.05)
    while time.monotonic() < deadline:
        if sent - acked < 64:
            try:  # a blocked publisher is not read: a send may time out
                r.publish(1, "", "fill", body, properties={"delivery_mode": 2})
                sent += 1
            except OSError:
                pass
        try:
            m = r.read_method(timeout=0.05)
            if m.name == "basic.ack":
                acked = m.delivery_tag if m.multiple else acked + 1
        except Exception:
            pass
        if "holding" in node.log_text():
            stalled_at = stalled_at or time.monotonic()
            if time.monotonic() - stalled_at > 3:
                break
    res.check(stalled_at is not None, "the store ran out of space (%d sent, %d confirmed)"
              % (sent, acked))
    res.check(node.alive(), "node alive 3 s into the full disk")
    res.check(http_ok(node), "API answers on the full disk")
    c = node.raw()
    c.send_method(1, "basic.get", queue="fill", no_ack=True)
    m = c.read_method(timeout=5)
    while m.name in ("connection.blocked", "connection.unblocked"):
        m = c.read_method(timeout=5)
    res.check(m.name == "basic.get-ok", "a consumer still gets a message (%s)" % m.name)
    c.close()
    os.unlink(os.path.join(data, "ballast"))
    deadline = time.monotonic() + 15
    while acked < sent and time.monotonic() < deadline:
        try:
            m = r.read_method(timeout=0.5)
            if m.name == "basic.ack":
                acked = m.delivery_tag if m.multiple else acked + 1
            elif m.name == "basic.nack":
                break
        except Exception:
            pass
    res.check(acked == sent, "every publish confirmed once space returned (%d of %d)"
              % (acked, sent))
    r.close()
    by.run.value = 0
    res.check(node.stop() == 0, "stopped cleanly")
    node.start()
    q = node.raw().rpc(1, "queue.declare", queue="fill", durable=True, passive=True)
    res.check(q.message_count == sent - 1, "after a restart %d stored (%d confirmed, 1 consumed)"
              % (q.message_count, acked))


enospc.setup = lambda work: _tmpfs_setup(work, "48m",
                                         {"disk_free_limit": "0", "segment_size": "4M"})
enospc.cleanup = _tmpfs_cleanup
# Round trips on other connections must not wait for the writes held (a passive declare-ok of
# a durable exchange waited for them: 2.3 s before declare-oks waited for their own record).
enospc.stall = True


@scenario(5, "publishers fill the disk fast: the disk alarm comes within a few MB of "
             "disk_free_limit (free space checked as the store writes, not once a second)")
def disk_alarm_follows_writes(node, by, res):
    limit = 32 << 20
    r = node.raw(capabilities={"connection.blocked": True}, timeout=10)
    r.rpc(1, "queue.declare", queue="fast", durable=True)
    r.rpc(1, "confirm.select")
    free0 = os.statvfs(str(node.data_dir)).f_bavail * os.statvfs(str(node.data_dir)).f_frsize
    body = b"f" * 65536
    frames = b"".join(publish_frames(1, "", "fast", body, {"delivery_mode": 2}) for _ in range(16))
    sent = 0
    blocked = False
    t0 = time.monotonic()
    r.sock.settimeout(0.2)
    while not blocked and time.monotonic() - t0 < 20:
        try:
            r.send(frames)  # a blocked publisher is not read: the send may time out
            sent += 16
        except OSError:
            pass
        try:
            while True:
                m = r.read_method(timeout=0.001)
                if m.name == "connection.blocked":
                    blocked = True
                    break
        except Exception:
            pass
    took = time.monotonic() - t0
    time.sleep(1.5)  # what was taken before the block reaches the disk
    st = os.statvfs(str(node.data_dir))
    free = st.f_bavail * st.f_frsize
    res.check(blocked, "connection.blocked after %d publishes of 64 KB (%.0f MB/s, %.1f s)"
              % (sent, sent * len(body) / 1e6 / max(took, 1e-3), took))
    # the bound: a check step (4 MiB) + the rest of the input chunk being handled (256 KiB) +
    # the segment space reserved ahead of the writes (up to 4 MiB), with some slack
    res.check(free + (12 << 20) >= limit, "%.1f MB free once blocked (disk_free_limit %d MB, "
              "%.1f MB free at the start)" % (free / 1e6, limit >> 20, free0 / 1e6))
    res.check("holding" not in node.log_text(), "the store never ran out of space")
    r.close()


disk_alarm_follows_writes.setup = lambda work: _tmpfs_setup(
    work, "64m", {"disk_free_limit": "32M", "disk_reserve": "0", "segment_size": "4M"})
disk_alarm_follows_writes.cleanup = _tmpfs_cleanup


def store_bytes(node):
    """Bytes of the message store's segment files (their sizes, as ls shows them)."""
    d = Path(node.data_dir) / "msgs"
    return sum(f.stat().st_size for f in d.glob("*.seg"))


def wait_confirms(r, upto, timeout=30.0):
    """Read until every publish up to delivery tag upto is confirmed; returns the tag."""
    acked = 0
    deadline = time.monotonic() + timeout
    while acked < upto and time.monotonic() < deadline:
        m = r.read_method(timeout=max(0.1, deadline - time.monotonic()))
        if m.name == "basic.ack":
            acked = m.delivery_tag if m.multiple else max(acked, m.delivery_tag)
    return acked


@scenario(9, "one 100-byte message in a queue, then 400 MB of persistent traffic published and "
             "acked through another: disk use before and after TIDY")
def tidy_behind_old_message(node, by, res):
    total = int(float(os.environ.get("ABUSE_TIDY_MB", "400")) * (1 << 20))
    r = node.raw(timeout=30)
    r.rpc(1, "queue.declare", queue="old", durable=True)
    r.rpc(1, "queue.declare", queue="traffic", durable=True)
    r.rpc(1, "confirm.select")
    r.publish(1, "", "old", b"o" * 100, properties={"delivery_mode": 2})
    tag = wait_confirms(r, 1)
    r.open_channel(2)
    body, batch = b"t" * 65536, 32
    sent = 0
    t0 = time.monotonic()
    while sent < total and time.monotonic() - t0 < 300:
        r.send(b"".join(publish_frames(1, "", "traffic", body, {"delivery_mode": 2})
                        for _ in range(batch)))
        tag = wait_confirms(r, tag + batch)
        last = None
        for _ in range(batch):
            r.send_method(2, "basic.get", queue="traffic", no_ack=False)
            m = r.expect("basic.get-ok", channel=2, timeout=30)
            last = m.delivery_tag
        r.send_method(2, "basic.ack", delivery_tag=last, multiple=True)
        sent += batch * len(body)
    left = r.rpc(2, "queue.declare", queue="traffic", passive=True).message_count
    res.check(sent >= total and left == 0, "%d MB published and acked in %.0f s, %d left"
              % (sent >> 20, time.monotonic() - t0, left))
    time.sleep(1.5)  # the acks reach the disk with the next sync (at most a second)
    before = store_bytes(node)
    settle_then_measure(by, node)
    t1 = time.monotonic()
    st, reply = node.http("POST", "/api/msmq/action", {"object": "MACHINE", "action": "TIDY"},
                          timeout=300)
    took = time.monotonic() - t1
    after = store_bytes(node)
    j = json.loads(reply) if st == 200 else {}
    res.check(st == 200, "TIDY answered %s in %.1f s: %s" % (st, took, json.dumps(j)[:300]))
    res.check(before >= total, "store %.0f MB before TIDY" % (before / 1e6))
    res.check(after < 80e6 and after * 4 < before,
              "store %.1f MB after TIDY (one segment of 64 MiB at most)" % (after / 1e6))
    r.send_method(2, "basic.get", queue="old", no_ack=False)
    g = r.read_method(timeout=5)
    res.check(g.name == "basic.get-ok" and g.body == b"o" * 100, "the old message is still there")
    r.close()
    by.run.value = 0
    res.check(node.stop() == 0, "stopped cleanly")
    node.start()
    c = node.raw()
    c.send_method(1, "basic.get", queue="old", no_ack=True)
    g = c.read_method(timeout=5)
    res.check(g.name == "basic.get-ok" and g.body == b"o" * 100,
              "and after a restart (redelivered: %s)" % getattr(g, "redelivered", "?"))
    c.close()
    res.check(store_bytes(node) < 80e6, "store %.1f MB after the restart"
              % (store_bytes(node) / 1e6))


tidy_behind_old_message.stall = True


@scenario(9, "compaction at scale: 50,000 live 1 KB messages spread through 200 MB of acked "
             "traffic, all copied forward by one TIDY while a bystander keeps its round trips")
def tidy_compaction_slices(node, by, res):
    total = int(os.environ.get("ABUSE_TIDY_MSGS", "200000"))
    keep_every = 4  # one message in four stays: every segment is about a quarter live
    r = node.raw(timeout=60)
    r.rpc(1, "queue.declare", queue="old", durable=True)
    r.rpc(1, "queue.declare", queue="traffic", durable=True)
    r.rpc(1, "confirm.select")
    r.open_channel(2)
    body, batch = b"t" * 1000, 256
    sent = tag = kept = 0
    t0 = time.monotonic()
    while sent < total and time.monotonic() - t0 < 300:
        frames = []
        for i in range(batch):
            q = "old" if (sent + i) % keep_every == 0 else "traffic"
            kept += q == "old"
            frames.append(publish_frames(1, "", q, b"%08d" % (sent + i) + body,
                                         {"delivery_mode": 2}))
        r.send(b"".join(frames))
        tag = wait_confirms(r, tag + batch)
        n = batch - batch // keep_every
        last = None
        for _ in range(n):
            r.send_method(2, "basic.get", queue="traffic", no_ack=False)
            last = r.expect("basic.get-ok", channel=2, timeout=30).delivery_tag
        r.send_method(2, "basic.ack", delivery_tag=last, multiple=True)
        sent += batch
    n_old = r.rpc(2, "queue.declare", queue="old", passive=True).message_count
    left = r.rpc(2, "queue.declare", queue="traffic", passive=True).message_count
    res.check(n_old == kept and left == 0, "%d published in %.0f s: %d kept in 'old', %d left "
              "in 'traffic'" % (sent, time.monotonic() - t0, n_old, left))
    time.sleep(1.5)  # the acks reach the disk with the next sync
    before = store_bytes(node)
    settle_then_measure(by, node)
    t1 = time.monotonic()
    st, reply = node.http("POST", "/api/msmq/action", {"object": "MACHINE", "action": "TIDY"},
                          timeout=300)
    took = time.monotonic() - t1
    time.sleep(0.5)  # a few more bystander round trips after it
    after = store_bytes(node)
    j = json.loads(reply) if st == 200 else {}
    res.check(st == 200 and j.get("segments_compacted", 0) >= 50,
              "TIDY answered %s in %.1f s: %d segments compacted, %d records / %.1f MB copied, "
              "%d segments freed" % (st, took, j.get("segments_compacted", 0),
                                     j.get("records_copied", 0), j.get("bytes_copied", 0) / 1e6,
                                     j.get("segments_freed", 0)))
    res.check(after * 2 < before, "store %.0f MB before TIDY, %.0f MB after" % (before / 1e6,
                                                                              after / 1e6))
    r.close()
    by.run.value = 0
    res.check(node.stop() == 0, "stopped cleanly")
    node.start()
    c = node.raw(timeout=30)
    n = c.rpc(1, "queue.declare", queue="old", durable=True, passive=True).message_count
    c.send_method(1, "basic.get", queue="old", no_ack=True)
    first = c.read_method(timeout=10)
    res.check(n == kept and first.name == "basic.get-ok" and first.body[:8] == b"00000000",
              "after a restart %d in 'old', the first one first" % n)
    c.close()


tidy_compaction_slices.setup = lambda work: Node(work, config={"segment_size": "1M"})
tidy_compaction_slices.stall = True


def run_scenario(name, item, text, fn, base, keep):
    work = Path(tempfile.mkdtemp(prefix="abuse-%s-" % name, dir=base))
    res = Result()
    node = None
    by = None
    cpu = rss = peak = worst = p99 = 0.0
    n = fails = 0
    try:
        setup = getattr(fn, "setup", None)
        node = setup(work) if setup else Node(work)
        if node.proc is None:
            node.start()
        by = Bystander(node)
        cpu0 = node.cpu_s()
        by.reset(node)
        fn(node, by, res)
        by.run.value = 0
        turns1 = loop_turns(node) if node.alive() else (0, 0)
        worst, n, fails = by.worst.value, by.count.value, by.fails.value
        p99 = by.p99()
        cpu = node.cpu_s() - cpu0
        rss, peak = node.rss_mb(), node.peak_mb()
        res.check(node.alive(), "node alive (exit %s)" % (node.proc.poll(),))
        res.check(fails == 0, "%d bystander round trips failed" % fails)
        if getattr(fn, "stall", False):
            cpu50, wall50 = turns1[0] - by.turns0[0], turns1[1] - by.turns0[1]
            res.check(cpu50 == 0, "%d loop turns over %d ms of CPU during the attack (%d over "
                      "%d ms of wall time, preemption included)"
                      % (cpu50, TURN_LIMIT_MS, wall50, TURN_LIMIT_MS))
            res.check(worst <= rtt_limit(), "worst bystander round trip %.1f ms (limit %.0f)"
                      % (worst * 1000, rtt_limit() * 1000))
    except Exception as e:
        res.check(False, "scenario raised %s: %s" % (type(e).__name__, e))
        traceback.print_exc()
    finally:
        if by is not None:
            by.close()
        if node is not None:
            alive = node.alive()
            rc = node.stop()
            if alive:
                res.check(rc == 0, "exit %r after SIGTERM" % (rc,))
        cleanup = getattr(fn, "cleanup", None)
        if cleanup:
            try:
                cleanup(work)
            except Exception as e:
                res.check(False, "cleanup failed: %s" % e)
    print("abuse: %s %s rss=%.1fMB peak=%.1fMB cpu=%.2fs worst_rtt=%.1fms p99_rtt=%.1fms "
          "(%d round trips) - %s"
          % (name, "PASS" if res.ok else "FAIL", rss, peak, cpu, worst * 1000, p99 * 1000, n,
             res.detail()), flush=True)
    if not res.ok and node is not None:
        print("  --- node log (%s) ---\n%s" % (node.log_path, node.log_tail()), flush=True)
    if res.ok and not keep:
        shutil.rmtree(work, ignore_errors=True)
    return res.ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated scenario names")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work directories")
    ap.add_argument("--rtt-limit-ms", type=float)
    a = ap.parse_args()
    if a.rtt_limit_ms:
        os.environ["ABUSE_RTT_LIMIT_MS"] = str(a.rtt_limit_ms)
    if a.list:
        for name, item, text, _ in SCENARIOS:
            print("%-22s item %d: %s" % (name, item, text))
        return 0
    only = set(a.only.split(",")) if a.only else None
    raise_nofile(8192)
    base = tempfile.mkdtemp(prefix="sluice-abuse-")
    passed = failed = 0
    try:
        for name, item, text, fn in SCENARIOS:
            if only and name not in only:
                continue
            print("abuse: %s (item %d): %s" % (name, item, text), flush=True)
            if run_scenario(name, item, text, fn, base, a.keep):
                passed += 1
            else:
                failed += 1
    finally:
        if not a.keep and not failed:
            shutil.rmtree(base, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
