#!/usr/bin/env python3
"""run.py - the driver behind `make bench`, `make bench-smoke` and `make bench-profile` (issue 5).

Starts sluiced and a private RabbitMQ (Debian's rabbitmq-server as its own node: own node name,
ports, epmd, data, logs and config in a temp dir) on 127.0.0.1, runs every scenario of
build/bench/amqpbench against both in alternation (A B A B ...) for --rounds rounds, measures the
loopback ceiling and the latency floor (two loopback hops, no broker) with build/bench/tcpceil,
alone and beside ps_bg's and ps_bgfull's bulk persistent loads on each broker
(floor_beside_bulk), prints a table of medians with the ratio Sluice / RabbitMQ against the
issue's targets, writes bench/results/<time>.md, latest.md and the
raw samples as <time>.json, and stops both brokers. It stops only processes it started, by pid.

Python 3 standard library only.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOST = "127.0.0.1"
# AMQPS for the TLS scenarios (flag "tls"): certificates made with the openssl command for
# this run (a CA and a server certificate for 127.0.0.1), set by main() when one is selected;
# both brokers then also listen for TLS. {"ca": path, "cert": path, "key": path} or None.
TLS = None
SLUICE_SET = []  # --sluice-set KEY=VALUE: extra config lines for every sluiced this run starts
REPO = Path(__file__).resolve().parent.parent
RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
FSYNC_EVENTS = ["syscalls:sys_enter_fsync", "syscalls:sys_enter_fdatasync",
                "syscalls:sys_enter_sync_file_range", "syscalls:sys_enter_msync"]


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def proc_rlimit_nofile(pid):
    try:
        for line in Path("/proc/%d/limits" % pid).read_text().splitlines():
            if line.startswith("Max open files"):
                return int(line.split()[3])
    except (OSError, ValueError, IndexError):
        pass
    return None


# ---------------------------------------------------------------------------------------------
# Brokers
# ---------------------------------------------------------------------------------------------
class Sluiced:
    name = "sluice"
    label = "Sluice"

    def __init__(self, binary, base, mgmt=False, env=None):
        self.binary = str(binary)
        self.base = Path(base)
        self.env = env  # extra environment (SLUICE_FAULT for the slow-sync scenario)
        self.proc = None
        self.port = None
        self.mgmt = mgmt  # the forward pair: its management API tells whether links exist
        self.mgmt_port = None

    def start(self, wait=True):
        """Starts sluiced (on the port it had, when restarted: recovery benches reconnect
        there) and waits until it listens."""
        self.base.mkdir(parents=True, exist_ok=True)
        cmd = [self.binary, "--port", str(self.port or 0), "--data-dir", str(self.base / "data")]
        self.tls_port = None
        lines = ["%s = %s\n" % tuple(kv.split("=", 1)) for kv in SLUICE_SET]
        if TLS:
            lines += ["listeners.ssl.default = 0\n"
                      "ssl_options.cacertfile = %s\nssl_options.certfile = %s\n"
                      "ssl_options.keyfile = %s\n" % (TLS["ca"], TLS["cert"], TLS["key"])]
        if lines:
            conf = self.base / "sluiced.conf"
            conf.write_text("".join(lines))
            cmd += ["--config", str(conf)]
        help_text = subprocess.run([self.binary, "--help"], capture_output=True, text=True)
        if "--mgmt-port" in help_text.stdout + help_text.stderr:
            cmd += ["--mgmt-port", "0" if self.mgmt else "off"]
        self.log_path = self.base / "sluiced.log"
        logf = open(self.log_path, "wb")
        # Its own session, so a ^C on make reaches only us; we stop it ourselves.
        penv = dict(os.environ, **self.env) if self.env else None
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     start_new_session=True, env=penv)
        logf.close()
        deadline = time.monotonic() + 120  # a restart recovers first, then listens
        while time.monotonic() < deadline:
            m = re.search(r"listening amqp=([0-9.]+):(\d+)",
                          self.log_path.read_text(errors="replace"))
            mh = re.search(r"listening http=([0-9.]+):(\d+)",
                           self.log_path.read_text(errors="replace"))
            mt = re.search(r"listening amqps=([0-9.]+):(\d+)",
                           self.log_path.read_text(errors="replace"))
            if m and (mh or not self.mgmt) and (mt or not TLS):
                self.port = int(m.group(2))
                self.mgmt_port = int(mh.group(2)) if mh else None
                self.tls_port = int(mt.group(2)) if mt else None
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("sluiced did not report 'listening amqp=...'; log:\n" +
                           self.log_path.read_text(errors="replace")[-3000:])

    def pids(self):
        return [self.proc.pid]

    def api(self, method, path):
        """(status, parsed JSON or None) of one management API request as guest."""
        import base64
        import http.client
        c = http.client.HTTPConnection(HOST, self.mgmt_port, timeout=10)
        try:
            c.request(method, path, headers={
                "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
            r = c.getresponse()
            body = r.read()
            try:
                return r.status, json.loads(body) if body else None
            except ValueError:
                return r.status, None
        finally:
            c.close()

    def fd_limit_note(self):
        return "sluiced: RLIMIT_NOFILE %s, inherited from the driver (raised to the hard limit)" \
            % proc_rlimit_nofile(self.proc.pid)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
            if rc != 0:
                log("sluiced exited %d after SIGTERM" % rc)
        except subprocess.TimeoutExpired:
            log("sluiced ignored SIGTERM for 30 s; killing pid %d" % self.proc.pid)
            self.proc.kill()
            self.proc.wait()


class RabbitMQ:
    name = "rabbitmq"
    label = "RabbitMQ"

    def __init__(self, base, node="sluicebench@localhost", plugins=(), epmd_port=None,
                 cookie=None, conf_extra=""):
        """epmd_port: an epmd another node of ours started (the nodes of a cluster share one;
        this node then starts none); cookie: the Erlang cookie (a cluster's nodes share it);
        conf_extra: lines appended to rabbitmq.conf."""
        self.base = Path(base)
        self.node = node
        self.plugins = list(plugins)
        self.port = free_port()
        self.dist_port = free_port()
        self.own_epmd = epmd_port is None
        self.epmd_port = free_port() if epmd_port is None else epmd_port
        self.cookie = cookie
        self.conf_extra = conf_extra
        self.proc = None
        self.epmd = None

    @staticmethod
    def available():
        return (RABBIT_BIN / "rabbitmq-server").exists() and shutil.which("epmd") is not None

    def env(self):
        b = self.base
        env = dict(os.environ)
        env.update({
            "HOME": str(b),  # the Erlang cookie goes here
            "ERL_EPMD_PORT": str(self.epmd_port),  # a private epmd: no clash with other nodes
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(b / "mnesia"),
            "RABBITMQ_LOG_BASE": str(b / "log"),
            "RABBITMQ_CONFIG_FILE": str(b / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(b / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(b / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(b / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(b / "rabbitmq.pid"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(b / "plugins-expand"),
            "RABBITMQ_FEATURE_FLAGS_FILE": str(b / "feature_flags"),
        })
        return env

    def ctl(self, *args, timeout=120):
        return subprocess.run([str(RABBIT_BIN / "rabbitmqctl"), "-n", self.node] + list(args),
                              env=self.env(), capture_output=True, text=True, timeout=timeout)

    def start(self, wait=True):
        """Starts the node on its ports and data (so a second start is a restart that recovers
        its durable queues) and, with wait, until rabbitmqctl await_startup says it is up.
        Without wait it returns once launched (call wait_started): a recovery bench times the
        start from the AMQP side, without a CLI's Erlang VM competing for the CPUs."""
        b = self.base
        b.mkdir(parents=True, exist_ok=True)
        # Settings comparable with sluiced's defaults: loopback only, heartbeat 60 s,
        # channel_max 2047, frame_max 128 KiB; no management plugin; info-level file log
        # (sluiced logs at info too). Memory watermark left at RabbitMQ's default.
        (b / "rabbitmq.conf").write_text(
            "listeners.tcp.default = %s:%d\n"
            "loopback_users.guest = true\n"
            "heartbeat = 60\n"
            "channel_max = 2047\n"
            "frame_max = 131072\n"
            "disk_free_limit.absolute = 50MB\n"
            "log.console = false\n"
            "log.file.level = info\n" % (HOST, self.port) + self.conf_extra)
        self.tls_port = None
        if TLS:
            self.tls_port = free_port()
            with open(b / "rabbitmq.conf", "a") as f:
                f.write("listeners.ssl.default = %s:%d\n"
                        "ssl_options.cacertfile = %s\nssl_options.certfile = %s\n"
                        "ssl_options.keyfile = %s\nssl_options.verify = verify_none\n"
                        "ssl_options.fail_if_no_peer_cert = false\n"
                        % (HOST, self.tls_port, TLS["ca"], TLS["cert"], TLS["key"]))
        (b / "advanced.config").write_text("[].\n")
        (b / "enabled_plugins").write_text("[%s].\n" % ",".join(self.plugins))
        (b / "rabbitmq-env.conf").write_text("")
        # Our cookie, written before the node and the CLI race to create one.
        cookie = b / ".erlang.cookie"
        if cookie.exists():  # a restart: ours, read-only
            cookie.chmod(0o600)
        cookie.write_text(self.cookie or hashlib.sha256(os.urandom(32)).hexdigest()[:20].upper())
        cookie.chmod(0o400)
        if self.own_epmd and (self.epmd is None or self.epmd.poll() is not None):
            self.epmd = subprocess.Popen([shutil.which("epmd"), "-port", str(self.epmd_port)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
        self.log_path = b / "server.out"
        logf = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(RABBIT_BIN / "rabbitmq-server")], env=self.env(),
                                     stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     cwd=str(b), start_new_session=True)
        logf.close()
        if wait:
            self.wait_started()

    def wait_started(self):
        # await_startup fails at once while the node is not yet registered with epmd: retry.
        deadline = time.monotonic() + 180
        while True:
            r = self.ctl("await_startup", "--timeout", "60", timeout=90)
            if r.returncode == 0:
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                out = r.stdout + r.stderr + self.log_path.read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError("rabbitmq-server did not start:\n" + out)
            time.sleep(0.5)

    def _session_pids(self):
        """Every process in the session we created for rabbitmq-server: (pid, comm)."""
        out = []
        if self.proc is None:
            return out
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) == self.proc.pid:  # field 6: session id
                out.append((int(d.name), comm))
        return out

    def pids(self):
        return [p for p, comm in self._session_pids() if comm.startswith("beam")]

    def fd_limit_note(self):
        lim = [proc_rlimit_nofile(p) for p in self.pids()]
        m = re.search(r"Limiting to approx (\d+) file handles \((\d+) sockets\)",
                      self.read_logs())
        return ("RabbitMQ: beam.smp RLIMIT_NOFILE %s, inherited from the driver (started by hand, "
                "not by systemd's LimitNOFILE); ERL_MAX_PORTS 65536 from rabbitmq-env%s"
                % (lim[0] if lim else "?",
                   "; its log: 'Limiting to approx %s file handles (%s sockets)'" % m.groups()
                   if m else ""))

    def read_logs(self):
        text = ""
        for p in sorted((self.base / "log").glob("*.log")):
            text += p.read_text(errors="replace")
        return text

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.ctl("stop", timeout=60)
            except subprocess.TimeoutExpired:
                log("rabbitmqctl stop timed out")
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of the session we created (beam.smp, erl_child_setup, inet_gethost)
        # was started by us: end it by pid.
        for pid, _ in self._session_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if self.epmd is not None and self.epmd.poll() is None:
            self.epmd.terminate()
            try:
                self.epmd.wait(5)
            except subprocess.TimeoutExpired:
                self.epmd.kill()
                self.epmd.wait()


# ---------------------------------------------------------------------------------------------
# Scenarios and the figures the table shows
# ---------------------------------------------------------------------------------------------
# id, title, amqpbench args (full run), args (smoke), flags
SCENARIOS = [
    ("ptc16", "publish-then-consume 16 B", "-S ptc -s 16 -n 1000000", "-S ptc -s 16 -n 20000", ""),
    # "raw" ids: the same with amqpbench's pipelined publisher (--raw), which sends the same
    # frame bytes 64 KiB per write instead of rabbitmq-c's three send()s per message. Those sends
    # cap any publisher near the loopback "frames" figure (~110k msg/s here), so the pipelined
    # rows are what shows the brokers' own ingest rate.
    ("ptc16raw", "publish-then-consume 16 B, pipelined publisher",
     "-S ptc -s 16 -n 1000000 --raw", "-S ptc -s 16 -n 20000 --raw", ""),
    ("ptc1k", "publish-then-consume 1 KiB", "-S ptc -s 1024 -n 300000", "-S ptc -s 1024 -n 10000",
     ""),
    ("ptc1kraw", "publish-then-consume 1 KiB, pipelined publisher",
     "-S ptc -s 1024 -n 300000 --raw", "-S ptc -s 1024 -n 10000 --raw", ""),
    ("ps_full", "pub/sub full speed 16 B", "-S pubsub -s 16 -n 500000", "-S pubsub -n 20000", ""),
    ("ps_20k", "pub/sub at 20k msg/s 16 B", "-S pubsub -s 16 -n 200000 -r 20000",
     "-S pubsub -n 20000 -r 20000", ""),
    # AMQPS (issue 11): pub/sub over TLS (rabbitmq-c's OpenSSL socket, the server certificate
    # verified, TLS 1.3), against the same without TLS (ps_full, ps_1k).
    ("ps_1k", "pub/sub full speed 1 KiB", "-S pubsub -s 1024 -n 300000", "-S pubsub -s 1024 -n 10000",
     ""),
    # The same two with the pipelined publisher for both brokers (issue 46): the per-call
    # publisher's three sends per message set ps_full's and ps_1k's pace (client busy near 1.0),
    # so those rows say little about what a broker does with a body; these do.
    ("ps_fullraw", "pub/sub full speed 16 B, pipelined publisher", "-S pubsub -s 16 -n 1000000 --raw",
     "-S pubsub -s 16 -n 20000 --raw", ""),
    ("ps_1kraw", "pub/sub full speed 1 KiB, pipelined publisher", "-S pubsub -s 1024 -n 500000 --raw",
     "-S pubsub -s 1024 -n 10000 --raw", ""),
    ("ps_tls16", "pub/sub full speed 16 B over TLS", "-S pubsub -s 16 -n 500000",
     "-S pubsub -s 16 -n 20000", "tls"),
    ("ps_tls1k", "pub/sub full speed 1 KiB over TLS", "-S pubsub -s 1024 -n 300000",
     "-S pubsub -s 1024 -n 10000", "tls"),
    ("conf1_16", "persistent+confirms 1 producer 16 B", "-S confirm -P 1 -s 16 -n 100000",
     "-S confirm -P 1 -s 16 -n 5000", "fsync"),
    ("conf1_16raw", "persistent+confirms 1 producer 16 B, pipelined publisher",
     "-S confirm -P 1 -s 16 -n 100000 --raw", "-S confirm -P 1 -s 16 -n 5000 --raw", "fsync"),
    ("conf4_16", "persistent+confirms 4 producers 16 B", "-S confirm -P 4 -s 16 -n 200000",
     "-S confirm -P 4 -s 16 -n 5000", "fsync"),
    ("conf4_16raw", "persistent+confirms 4 producers 16 B, pipelined publisher",
     "-S confirm -P 4 -s 16 -n 200000 --raw", "-S confirm -P 4 -s 16 -n 5000 --raw", "fsync"),
    ("conf1_1k", "persistent+confirms 1 producer 1 KiB", "-S confirm -P 1 -s 1024 -n 100000",
     "-S confirm -P 1 -s 1024 -n 5000", "fsync"),
    ("conf1_1kraw", "persistent+confirms 1 producer 1 KiB, pipelined publisher",
     "-S confirm -P 1 -s 1024 -n 100000 --raw", "-S confirm -P 1 -s 1024 -n 5000 --raw",
     "fsync"),
    ("conf4_1k", "persistent+confirms 4 producers 1 KiB", "-S confirm -P 4 -s 1024 -n 200000",
     "-S confirm -P 4 -s 1024 -n 5000", "fsync"),
    ("conf4_1kraw", "persistent+confirms 4 producers 1 KiB, pipelined publisher",
     "-S confirm -P 4 -s 1024 -n 200000 --raw", "-S confirm -P 4 -s 1024 -n 5000 --raw",
     "fsync"),
    ("fanout", "fanout 1 -> 4 queues 16 B", "-S fanout -q 4 -s 16 -n 300000",
     "-S fanout -q 4 -n 10000", ""),
    ("fanoutraw", "fanout 1 -> 4 queues 16 B, pipelined publisher",
     "-S fanout -q 4 -s 16 -n 300000 --raw", "-S fanout -q 4 -n 10000 --raw", ""),
    # Store and forward (issue 9): publish to one node, consume on another. Sluice: routing key
    # DIRECT=TCP:127.0.0.1:<port>\private$\<queue> (the node's outgoing queue and its link,
    # exactly once); RabbitMQ: a dynamic shovel (rabbitmq_shovel, ack-mode on-confirm) from a
    # queue on one node to a queue on another. Both on their own pair of fresh nodes; each run
    # is followed by a local publish with confirms of the same messages on the source node (the
    # reference, scenario id + "_local").
    ("fwd16", "store and forward 16 B, publisher confirms", "-S forward -s 16 -n 200000",
     "-S forward -s 16 -n 5000", "forward"),
    ("fwd1k", "store and forward 1 KiB, publisher confirms", "-S forward -s 1024 -n 100000",
     "-S forward -s 1024 -n 3000", "forward"),
    ("fwdtx16", "store and forward 16 B, transactions of 100",
     "-S forward -s 16 -n 200000 --tx-size 100", "-S forward -s 16 -n 5000 --tx-size 100",
     "forward"),
    # The same with the pipelined publisher, which rabbitmq-c's three sends per message do not
    # cap near 110k msg/s (see "Reading the numbers" in bench/README.md).
    ("fwd16raw", "store and forward 16 B, publisher confirms, pipelined publisher",
     "-S forward -s 16 -n 300000 --raw", "-S forward -s 16 -n 5000 --raw", "forward"),
    ("fwd1kraw", "store and forward 1 KiB, publisher confirms, pipelined publisher",
     "-S forward -s 1024 -n 150000 --raw", "-S forward -s 1024 -n 3000 --raw", "forward"),
    # Fresh broker pairs for these two: RSS deltas measured after the big scenarios would be
    # absorbed by freed memory the allocators keep.
    # Issue 14: latency-sensitive traffic beside bulk persistent work. Transient pub/sub at
    # 5,000 msg/s while a persistent 1 KiB publisher with confirms (and a consumer of its
    # queue) offers 10,000 msg/s, the same work for both brokers; then with Sluice's syncs made
    # to take 10 ms by its fault hook (SLUICE_FAULT; RabbitMQ runs it as ps_bg); then with the
    # persistent publisher flat out.
    ("ps_bg", "pub/sub 5k/s 16 B beside persistent 1 KiB + confirms at 10k/s",
     "-S pubsub -s 16 -n 100000 -r 5000 --bg-persistent 10000 --bg-size 1024",
     "-S pubsub -s 16 -n 5000 -r 5000 --bg-persistent 2000 --bg-size 1024", ""),
    ("ps_bgslow", "the same, Sluice's syncs made to take 10 ms",
     "-S pubsub -s 16 -n 100000 -r 5000 --bg-persistent 10000 --bg-size 1024",
     "-S pubsub -s 16 -n 5000 -r 5000 --bg-persistent 2000 --bg-size 1024", "fresh,slowsync"),
    ("ps_bgfull", "pub/sub 5k/s 16 B beside persistent 1 KiB + confirms flat out",
     "-S pubsub -s 16 -n 100000 -r 5000 --bg-persistent 0 --bg-size 1024",
     "-S pubsub -s 16 -n 5000 -r 5000 --bg-persistent 0 --bg-size 1024", ""),
    ("purge", "purge / delete of 1,000,000", "-S purge -n 1000000", "-S purge -n 50000", "fresh"),
    ("conns", "10,000 idle connections", "-S conns --conns 10000",
     "-S conns --conns 200 --settle-ms 300", "fresh"),
    # Many queues, many connections (issue 14): 10,000 durable queues with a consumer each (on 4
    # connections), 10,000 idle connections beside them, then 50,000 transient messages at
    # 5,000 msg/s, each to a random queue. "recover": the queues are left, the broker restarted
    # on its data, and amqpbench --drain times the start until every queue answers
    # (scenario id manyq_recover).
    ("manyq", "10,000 queues with a consumer each + 10,000 idle connections",
     "-S manyq -q 10000 --conns 10000 -n 50000 -r 5000",
     "-S manyq -q 200 --conns 200 -n 2000 -r 2000 --settle-ms 300", "fresh,recover"),
]

# scenario, metric, label, unit, better, target
#   target: ("ratio>=", x) | ("ratio<=", x) | ("abs<=", x) | list of them | None
FIGURES = [
    ("ptc16", "pub_rate", "ptc 16 B publish", "msg/s", "hi", ("ratio>=", 10)),
    ("ptc16", "cons_rate", "ptc 16 B consume", "msg/s", "hi", ("ratio>=", 10)),
    ("ptc16raw", "pub_rate", "ptc 16 B publish, pipelined publisher", "msg/s", "hi",
     ("ratio>=", 10)),
    ("ptc16raw", "cons_rate", "ptc 16 B consume (after pipelined publish)", "msg/s", "hi",
     ("ratio>=", 10)),
    ("ptc1k", "pub_rate", "ptc 1 KiB publish", "msg/s", "hi", ("ratio>=", 5)),
    ("ptc1k", "cons_rate", "ptc 1 KiB consume", "msg/s", "hi", ("ratio>=", 5)),
    ("ptc1kraw", "pub_rate", "ptc 1 KiB publish, pipelined publisher", "msg/s", "hi",
     ("ratio>=", 5)),
    ("ptc1kraw", "cons_rate", "ptc 1 KiB consume (after pipelined publish)", "msg/s", "hi",
     ("ratio>=", 5)),
    ("ps_full", "e2e_rate", "pub/sub full speed: end-to-end", "msg/s", "hi", None),
    ("ps_full", "lat_p50_us", "pub/sub full speed: latency p50", "us", "lo", None),
    ("ps_full", "lat_p99_us", "pub/sub full speed: latency p99", "us", "lo", None),
    ("ps_full", "lat_p999_us", "pub/sub full speed: latency p99.9", "us", "lo", None),
    ("ps_20k", "e2e_rate", "pub/sub 20k/s: achieved", "msg/s", "hi", None),
    ("ps_20k", "lat_p50_us", "pub/sub 20k/s: latency p50", "us", "lo", None),
    ("ps_20k", "lat_p99_us", "pub/sub 20k/s: latency p99", "us", "lo",
     [("abs<=", 1000), ("ratio<=", 0.1)]),
    ("ps_20k", "lat_p999_us", "pub/sub 20k/s: latency p99.9", "us", "lo", None),
    ("ps_1k", "e2e_rate", "pub/sub 1 KiB: end-to-end", "msg/s", "hi", None),
    ("ps_1k", "lat_p99_us", "pub/sub 1 KiB: latency p99", "us", "lo", None),
    ("ps_fullraw", "e2e_rate", "pub/sub 16 B, pipelined publisher: end-to-end", "msg/s", "hi",
     None),
    ("ps_1kraw", "e2e_rate", "pub/sub 1 KiB, pipelined publisher: end-to-end", "msg/s", "hi",
     None),
    ("ps_tls16", "e2e_rate", "pub/sub 16 B over TLS: end-to-end", "msg/s", "hi", None),
    ("ps_tls16", "lat_p50_us", "pub/sub 16 B over TLS: latency p50", "us", "lo", None),
    ("ps_tls16", "lat_p99_us", "pub/sub 16 B over TLS: latency p99", "us", "lo", None),
    ("ps_tls1k", "e2e_rate", "pub/sub 1 KiB over TLS: end-to-end", "msg/s", "hi", None),
    ("ps_tls1k", "lat_p50_us", "pub/sub 1 KiB over TLS: latency p50", "us", "lo", None),
    ("ps_tls1k", "lat_p99_us", "pub/sub 1 KiB over TLS: latency p99", "us", "lo", None),
    ("conf1_16", "confirm_rate", "persistent+confirms 1P 16 B", "msg/s", "hi", ("ratio>=", 15)),
    ("conf4_16", "confirm_rate", "persistent+confirms 4P 16 B", "msg/s", "hi", ("ratio>=", 15)),
    ("conf1_1k", "confirm_rate", "persistent+confirms 1P 1 KiB", "msg/s", "hi", ("ratio>=", 15)),
    ("conf4_1k", "confirm_rate", "persistent+confirms 4P 1 KiB", "msg/s", "hi", ("ratio>=", 15)),
    ("conf1_16raw", "confirm_rate", "persistent+confirms 1P 16 B, pipelined publisher", "msg/s",
     "hi", ("ratio>=", 15)),
    ("conf4_16raw", "confirm_rate", "persistent+confirms 4P 16 B, pipelined publisher", "msg/s",
     "hi", ("ratio>=", 15)),
    ("conf1_1kraw", "confirm_rate", "persistent+confirms 1P 1 KiB, pipelined publisher", "msg/s",
     "hi", ("ratio>=", 15)),
    ("conf4_1kraw", "confirm_rate", "persistent+confirms 4P 1 KiB, pipelined publisher", "msg/s",
     "hi", ("ratio>=", 15)),
    ("fanout", "fanout_rate", "fanout 1->4: messages", "msg/s", "hi", ("ratio>=", 5)),
    ("fanout", "deliveries_rate", "fanout 1->4: deliveries", "dlv/s", "hi", None),
    ("fanoutraw", "fanout_rate", "fanout 1->4: messages, pipelined publisher", "msg/s", "hi",
     ("ratio>=", 5)),
    ("fanoutraw", "deliveries_rate", "fanout 1->4: deliveries, pipelined publisher", "dlv/s", "hi",
     None),
    ("fwd16", "fwd_rate", "store and forward 16 B (RabbitMQ: shovel)", "msg/s", "hi",
     ("ratio>=", 10)),
    ("fwd16", "lat_p50_us", "store and forward 16 B: latency p50", "us", "lo", None),
    ("fwd16_local", "confirm_rate", "local publish+confirms 16 B (its reference)", "msg/s", "hi",
     None),
    ("fwd1k", "fwd_rate", "store and forward 1 KiB (RabbitMQ: shovel)", "msg/s", "hi",
     ("ratio>=", 10)),
    ("fwd1k_local", "confirm_rate", "local publish+confirms 1 KiB (its reference)", "msg/s", "hi",
     None),
    ("fwdtx16", "fwd_rate", "store and forward 16 B, tx of 100 (RabbitMQ: shovel)", "msg/s", "hi",
     ("ratio>=", 10)),
    ("fwdtx16_local", "confirm_rate", "local publish 16 B, tx of 100 (its reference)", "msg/s",
     "hi", None),
    ("fwd16raw", "fwd_rate", "store and forward 16 B, pipelined publisher (RabbitMQ: shovel)",
     "msg/s", "hi", ("ratio>=", 10)),
    ("fwd16raw_local", "confirm_rate", "local publish+confirms 16 B, pipelined (its reference)",
     "msg/s", "hi", None),
    ("fwd1kraw", "fwd_rate", "store and forward 1 KiB, pipelined publisher (RabbitMQ: shovel)",
     "msg/s", "hi", ("ratio>=", 10)),
    ("fwd1kraw_local", "confirm_rate", "local publish+confirms 1 KiB, pipelined (its reference)",
     "msg/s", "hi", None),
    ("purge", "purge_ms", "queue.purge of 1M", "ms", "lo", ("abs<=", 10)),
    ("purge", "delete_ms", "queue.delete of 1M", "ms", "lo", ("abs<=", 10)),
    ("purge", "rss_bytes_per_queued_msg", "RSS per queued 16 B message", "B", "lo",
     ("abs<=", 100)),
    ("ps_bg", "lat_p50_us", "pub/sub 5k/s beside persistent 10k/s: latency p50", "us", "lo",
     ("ratio<=", 0.1)),
    ("ps_bg", "lat_p99_us", "pub/sub 5k/s beside persistent 10k/s: latency p99", "us", "lo",
     ("ratio<=", 0.1)),
    ("ps_bg", "bg_rate", "  its persistent publisher: achieved", "msg/s", "hi", None),
    ("ps_bgslow", "lat_p99_us", "the same, Sluice's syncs 10 ms (fault hook): latency p99", "us",
     "lo", ("abs<=", 1000)),
    ("ps_bgfull", "lat_p99_us", "pub/sub 5k/s beside persistent flat out: latency p99", "us", "lo",
     ("abs<=", 1000)),
    ("ps_bgfull", "bg_rate", "  its persistent publisher: achieved", "msg/s", "hi", None),
    ("conns", "bytes_per_conn", "RSS per idle connection", "B", "lo", ("ratio<=", 0.1)),
    ("conns", "bytes_per_chan", "RSS per channel on it", "B", "lo", None),
    ("conns", "open_rate", "connection open rate (8 threads)", "conn/s", "hi", None),
    ("manyq", "declare_ms", "10k durable queues: declare + basic.consume (4 conns)", "ms", "lo",
     None),
    ("manyq", "bytes_per_queue", "RSS per queue with its consumer", "B", "lo", None),
    ("manyq", "bytes_per_conn", "RSS per idle connection beside 10k queues", "B", "lo", None),
    ("manyq", "idle_cpu_ms_per_s", "broker CPU, 10k queues + 10k conns idle", "ms/s", "lo", None),
    ("manyq", "lat_p50_us", "publish to a random one of 10k queues at 5k/s: p50", "us", "lo",
     None),
    ("manyq", "lat_p99_us", "publish to a random one of 10k queues at 5k/s: p99", "us", "lo",
     ("ratio<=", 0.1)),
    ("manyq", "lat_p999_us", "publish to a random one of 10k queues at 5k/s: p99.9", "us", "lo",
     None),
    ("manyq_recover", "recover_ms", "restart with 10k durable queues: start until all answer",
     "ms", "lo", None),
]

# Secondary table: broker CPU per message and the load generator's own CPU use.
CPU_FIGURES = [
    ("ptc16", "broker_us_per_msg_pub", "client_cpu_pub", "ptc 16 B publish"),
    ("ptc16", "broker_us_per_msg_cons", "client_cpu_cons", "ptc 16 B consume"),
    ("ptc16raw", "broker_us_per_msg_pub", "client_cpu_pub", "ptc 16 B publish, pipelined"),
    ("ptc1k", "broker_us_per_msg_pub", "client_cpu_pub", "ptc 1 KiB publish"),
    ("ptc1k", "broker_us_per_msg_cons", "client_cpu_cons", "ptc 1 KiB consume"),
    ("ptc1kraw", "broker_us_per_msg_pub", "client_cpu_pub", "ptc 1 KiB publish, pipelined"),
    ("ps_full", "broker_us_per_msg", "client_cpu", "pub/sub full speed"),
    ("ps_20k", "broker_us_per_msg", "client_cpu", "pub/sub 20k/s"),
    ("ps_1k", "broker_us_per_msg", "client_cpu", "pub/sub 1 KiB"),
    ("ps_fullraw", "broker_us_per_msg", "client_cpu", "pub/sub 16 B, pipelined"),
    ("ps_1kraw", "broker_us_per_msg", "client_cpu", "pub/sub 1 KiB, pipelined"),
    ("ps_tls16", "broker_us_per_msg", "client_cpu", "pub/sub 16 B over TLS"),
    ("ps_tls1k", "broker_us_per_msg", "client_cpu", "pub/sub 1 KiB over TLS"),
    ("conf1_16", "broker_us_per_msg", "client_cpu", "persistent 1P 16 B"),
    ("conf4_16", "broker_us_per_msg", "client_cpu", "persistent 4P 16 B"),
    ("conf1_1k", "broker_us_per_msg", "client_cpu", "persistent 1P 1 KiB"),
    ("conf4_1k", "broker_us_per_msg", "client_cpu", "persistent 4P 1 KiB"),
    ("conf1_16raw", "broker_us_per_msg", "client_cpu", "persistent 1P 16 B, pipelined"),
    ("conf4_16raw", "broker_us_per_msg", "client_cpu", "persistent 4P 16 B, pipelined"),
    ("conf1_1kraw", "broker_us_per_msg", "client_cpu", "persistent 1P 1 KiB, pipelined"),
    ("conf4_1kraw", "broker_us_per_msg", "client_cpu", "persistent 4P 1 KiB, pipelined"),
    ("fanout", "broker_us_per_msg", "client_cpu", "fanout 1->4"),
    ("fanoutraw", "broker_us_per_msg", "client_cpu", "fanout 1->4, pipelined"),
    ("fwd16", "broker_us_per_msg", "client_cpu", "store and forward 16 B (both nodes)"),
    ("fwd1k", "broker_us_per_msg", "client_cpu", "store and forward 1 KiB (both nodes)"),
    ("fwdtx16", "broker_us_per_msg", "client_cpu", "store and forward 16 B tx (both nodes)"),
    ("fwd16raw", "broker_us_per_msg", "client_cpu", "store and forward 16 B pipelined (both)"),
    ("fwd1kraw", "broker_us_per_msg", "client_cpu", "store and forward 1 KiB pipelined (both)"),
]

# Store and forward against the local publish of the same messages (the second target:
# forwarding no more than 2x slower than publishing with confirms on one node).
FORWARD_VS_LOCAL = [("fwd16", "fwd16_local"), ("fwd1k", "fwd1k_local"),
                    ("fwdtx16", "fwdtx16_local"), ("fwd16raw", "fwd16raw_local"),
                    ("fwd1kraw", "fwd1kraw_local")]


# ---------------------------------------------------------------------------------------------
# Running things
# ---------------------------------------------------------------------------------------------
def perf_can_count_syscalls():
    if not shutil.which("perf"):
        return False
    r = subprocess.run(["perf", "stat", "-x,", "-e", FSYNC_EVENTS[0], "-p", str(os.getpid()),
                        "--", "true"], capture_output=True, text=True)
    return r.returncode == 0 and "not supported" not in r.stderr


def make_tls_certs(d):
    """A CA and a server certificate for 127.0.0.1 (EC P-256, as a production setup would
    likely use), made with the openssl command."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)

    def ossl(*a):
        subprocess.run(["openssl"] + list(a), cwd=str(d), check=True, capture_output=True)
    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", "ca.key", "-out", "ca.pem", "-days", "7", "-subj", "/CN=bench CA")
    ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "server.pem", "-days", "7", "-extfile", "san.ext")
    (d / "server.key").chmod(0o644)  # rabbitmq-server runs as us, but keep it readable
    return {"ca": str(d / "ca.pem"), "cert": str(d / "server.pem"), "key": str(d / "server.key")}


def run_amqpbench(args, binary, broker, count_fsync, tmp, timeout, extra=(), tls=False):
    if tls:  # the broker's AMQPS listener, the server certificate verified
        extra = list(extra) + ["--tls", TLS["ca"]]
    # a broker object may name its own address (bench/cluster.py: a leader on 127.0.0.2-4)
    cmd = [str(binary), "-H", getattr(broker, "host", HOST),
           "-p", str(broker.tls_port if tls else broker.port),
           "--pids", ",".join(str(p) for p in broker.pids())] + args.split() + list(extra)
    perf_out = None
    if count_fsync:
        perf_out = Path(tmp) / "perf-fsync.csv"
        cmd = ["perf", "stat", "-x,", "-o", str(perf_out), "-e", ",".join(FSYNC_EVENTS),
               "-p", ",".join(str(p) for p in broker.pids()), "--"] + cmd
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return {"ok": False, "error": "timed out after %d s" % timeout,
                "stderr": (e.stderr or b"")[-2000:].decode(errors="replace")
                if isinstance(e.stderr, bytes) else (e.stderr or "")[-2000:]}
    res = None
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
    if res is None or r.returncode != 0:
        return {"ok": False, "error": "amqpbench exit %d" % r.returncode,
                "stderr": r.stderr[-3000:], "metrics": (res or {}).get("metrics", {})}
    res["wall_s"] = round(time.monotonic() - t0, 2)
    res["loadavg1"] = load0
    if perf_out is not None and perf_out.exists():
        n = 0
        for line in perf_out.read_text().splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[0].strip().isdigit():
                n += int(parts[0])
        res["metrics"]["fsyncs"] = n
        res["metrics"]["fsyncs_per_1k_msgs"] = n * 1000.0 / res["n"]
    return res


# ---------------------------------------------------------------------------------------------
# Store and forward: a pair of nodes per broker
# ---------------------------------------------------------------------------------------------
class Pair:
    """The source and the destination node of one broker, for the forward scenarios. As a
    broker for run_amqpbench: publishes go to the source; CPU counts both nodes."""

    def __init__(self, src, dst):
        self.src, self.dst = src, dst
        self.name, self.label = src.name, src.label
        self.port = src.port

    def pids(self):
        return self.src.pids() + self.dst.pids()

    def stop(self):
        for b in (self.src, self.dst):
            b.stop()


def start_pairs(want, sluiced_bin, tmp, suffix=""):
    pairs = []
    try:
        for name in want:
            t0 = time.monotonic()
            if name == "sluice":
                src = Sluiced(sluiced_bin, Path(tmp) / ("fwd-sluice-src" + suffix), mgmt=True)
                dst = Sluiced(sluiced_bin, Path(tmp) / ("fwd-sluice-dst" + suffix))
            else:
                src = RabbitMQ(Path(tmp) / ("fwd-rabbitmq-src" + suffix),
                               node="sluicebench-fwdsrc@localhost", plugins=["rabbitmq_shovel"])
                dst = RabbitMQ(Path(tmp) / ("fwd-rabbitmq-dst" + suffix),
                               node="sluicebench-fwddst@localhost")
            src.start()
            try:
                dst.start()
            except Exception:
                src.stop()
                raise
            pairs.append(Pair(src, dst))
            log("%s forward pair up on ports %d -> %d in %.1f s" % (
                src.label, src.port, dst.port, time.monotonic() - t0))
    except Exception:
        for pr in pairs:
            pr.stop()
        raise
    return pairs


def sluice_link_missing(pair):
    """None when this sluiced forwards to other nodes; otherwise why not."""
    try:
        status, _ = pair.src.api("GET", "/api/msmq/outgoing")
    except OSError as e:
        return "its management API did not answer (%s)" % e
    if status == 200:
        return None
    return ("this sluiced has no store and forward yet (GET /api/msmq/outgoing: HTTP %d)"
            % status)


def shovel_state(src, name):
    r = src.ctl("shovel_status", "--formatter", "json", timeout=60)
    try:
        rows = json.loads(r.stdout)
    except ValueError:
        return "?: " + (r.stdout + r.stderr).strip()[-300:]
    for row in rows:
        if row.get("name") == name:
            return row.get("state")
    return None


def size_and_n(sargs):
    t = sargs.split()
    return t[t.index("-s") + 1], t[t.index("-n") + 1]


def run_forward(sid, sargs, pair, amqpbench, count_fsync, tmp, rnd, timeout):
    """One forward run on a pair: Sluice through its outgoing queue and link, RabbitMQ through
    a dynamic shovel made for this run (and removed after it)."""
    tag = "b%d-%s" % (rnd, sid)
    dq = tag + "-dst"
    to = ["--to-host", HOST, "--to-port", str(pair.dst.port), "--dest-queue", dq]
    if pair.name == "sluice":
        why = sluice_link_missing(pair)
        if why:
            return {"ok": False, "skipped": why}
        route = "DIRECT=TCP:%s:%d\\private$\\%s" % (HOST, pair.dst.port, dq)
        res = run_amqpbench(sargs + " --tag " + tag, amqpbench, pair, count_fsync, tmp, timeout,
                            extra=to + ["--route", route])
        if res.get("ok"):
            # Every message arrived; the outgoing queue must be empty (all order-acked) soon.
            left = None
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                status, outq = pair.src.api("GET", "/api/msmq/outgoing")
                left = sum(o.get("messages", 0) for o in (outq or []) if dq.lower() in
                           str(o.get("format_name", "")).lower())
                if status == 200 and left == 0:
                    break
                time.sleep(0.2)
            res["metrics"]["outgoing_left"] = left
            if left != 0:
                res["ok"] = False
                res["error"] = ("every message arrived, but 10 s later the outgoing queue "
                                "still holds %s (GET /api/msmq/outgoing)" % left)
        return res
    sq = tag + "-src"
    spec = {"src-protocol": "amqp091", "src-uri": "amqp://", "src-queue": sq,
            "dest-protocol": "amqp091",
            "dest-uri": "amqp://guest:guest@%s:%d" % (HOST, pair.dst.port), "dest-queue": dq,
            "ack-mode": "on-confirm", "src-prefetch-count": 1000, "reconnect-delay": 1}
    r = pair.src.ctl("set_parameter", "shovel", tag, json.dumps(spec))
    if r.returncode != 0:
        return {"ok": False, "error": "rabbitmqctl set_parameter shovel: " + r.stdout + r.stderr}
    try:
        deadline = time.monotonic() + 60
        state = None
        while state != "running":
            state = shovel_state(pair.src, tag)
            if time.monotonic() > deadline:
                return {"ok": False, "error": "shovel %s not running after 60 s: %s" % (tag, state)}
            if state != "running":
                time.sleep(0.3)
        return run_amqpbench(sargs + " --tag " + tag, amqpbench, pair, count_fsync, tmp, timeout,
                             extra=to + ["--route", sq])
    finally:
        pair.src.ctl("clear_parameter", "shovel", tag)
        pair.src.ctl("delete_queue", sq)


def run_recovery(b, sid, sargs, rnd, amqpbench, tmp, timeout):
    """After a run that left its durable queues (--keep): stop broker b, start it again on the
    same data and port, and time, from the launch of its process, until every queue answers
    (amqpbench --drain --since, which then deletes them). The sample is <sid>_recover."""
    tag = "b%d-%s" % (rnd, sid)
    t = sargs.split()
    # --stall bounds the wait for the broker to accept: a node that does not come back fails
    # the sample in 5 minutes rather than at the scenario's timeout.
    dargs = "-S %s -q %s --drain --stall %d --tag %s" % (t[t.index("-S") + 1],
                                                          t[t.index("-q") + 1],
                                                          min(timeout, 300), tag)
    t0 = time.monotonic()
    b.stop()
    stop_s = time.monotonic() - t0
    cmd = [str(amqpbench), "-H", HOST, "-p", str(b.port)] + dargs.split()
    t_launch = time.monotonic()  # CLOCK_MONOTONIC, as amqpbench's now_ns()
    drain = subprocess.Popen(cmd + ["--since", "%.6f" % t_launch], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    out = err = ""
    try:
        b.start(wait=False)
        out, err = drain.communicate(timeout=timeout)
        if isinstance(b, RabbitMQ):
            b.wait_started()
    except Exception as e:
        if drain.poll() is None:
            drain.kill()
            drain.wait()
        return {"ok": False, "error": "restart for recovery: %s" % e, "stderr": err[-2000:],
                "scenario_id": sid + "_recover", "broker": b.name, "round": rnd}
    res = None
    for line in out.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
    if res is None or drain.returncode != 0:
        res = {"ok": False, "error": "amqpbench --drain exit %d" % drain.returncode,
               "stderr": err[-3000:], "metrics": (res or {}).get("metrics", {})}
    res["metrics"]["stop_ms"] = stop_s * 1e3
    res["wall_s"] = round(time.monotonic() - t_launch, 2)
    res["loadavg1"] = os.getloadavg()[0]
    res.update({"scenario_id": sid + "_recover", "broker": b.name, "round": rnd})
    return res


def run_tcpceil(binary, args):
    r = subprocess.run([str(binary)] + args, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("tcpceil failed: " + r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


# The loads the latency floor is measured beside: ps_bg's (the persistent publisher at
# 10,000 msg/s) and ps_bgfull's (flat out), keyed by the latency scenario they belong to.
FLOOR_LOADS = (("ps_bg", 10000), ("ps_bgfull", 0))


def floor_beside_bulk(broker, amqpbench, tcpceil, rnd, smoke, load_sid, bg_rate):
    """The latency floor (tcpceil --mode relay, 5,000 msg/s, no broker on its path) measured
    while the bulk load of `load_sid` runs on `broker`: its persistent 1 KiB publisher with
    confirms offering `bg_rate` msg/s (0: flat out) and the consumer that drains it, with a
    token 50 msg/s of transient pub/sub beside (amqpbench needs a measured phase to keep the
    load running). On 2 shared cores that load takes CPU and, above all, wakes threads across
    the two vCPUs, and what is left for any wakeup bounds every broker's latency; the
    latency rows of ps_bg and ps_bgfull are judged beside this figure."""
    secs = 3 if smoke else 10
    cmd = [str(amqpbench), "-H", HOST, "-p", str(broker.port), "-S", "pubsub", "-s", "16",
           "-n", str(50 * secs), "-r", "50", "--bg-persistent", str(bg_rate), "--bg-size",
           "1024", "--tag", "b%d-floor-%s" % (rnd, load_sid)]
    load = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)  # the bulk publisher at its rate before the floor is sampled
        n = 5000 * (1 if smoke else secs - 4)
        c = run_tcpceil(tcpceil, ["--mode", "relay", "--msg-bytes", "16", "--rate", "5000",
                                  "--count", str(n)])
        _, err = load.communicate(timeout=secs + 120)
    finally:
        if load.poll() is None:
            load.kill()
            load.wait()
    if load.returncode != 0:
        raise RuntimeError("amqpbench (bulk load beside the floor) exit %d: %s"
                           % (load.returncode, (err or "")[-2000:]))
    c.update({"round": rnd, "beside": broker.name, "load": load_sid})
    return c


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, shell=True,
                              cwd=str(REPO)).stdout.strip()
    except OSError:
        return ""


def environment(sluiced_bin):
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    dirty = sh("git status --porcelain -- src Makefile | wc -l")
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": "%s, %d CPUs (%s), %.1f GiB RAM, kernel %s" % (
            platform.node(), os.cpu_count(), cpu,
            os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, platform.release()),
        "sluice": "git %s%s; binary sha256 %s" % (
            sh("git rev-parse --short HEAD"),
            " + %s uncommitted changes under src/ and Makefile" % dirty if dirty not in
            ("", "0") else "",
            hashlib.sha256(Path(sluiced_bin).read_bytes()).hexdigest()[:16]),
        "rabbitmq": "rabbitmq-server %s, Erlang %s (erlang-base %s)" % (
            sh("dpkg-query -W -f='${Version}' rabbitmq-server"),
            sh("erl -noshell -eval 'io:put_chars(erlang:system_info(otp_release)), halt().' "
               "2>/dev/null"),
            sh("dpkg-query -W -f='${Version}' erlang-base")),
        "client": "librabbitmq %s" % sh("dpkg-query -W -f='${Version}' librabbitmq4"),
    }


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------
def fmt(v, unit):
    if v is None:
        return "-"
    if unit in ("msg/s", "dlv/s", "conn/s", "B/s"):
        if v >= 1e6:
            return "%.2fM" % (v / 1e6)
        if v >= 1e3:
            return "%.1fk" % (v / 1e3)
        return "%.0f" % v
    if unit == "us":
        return "%.0f" % v if v >= 100 else "%.1f" % v
    if unit == "ms":
        return "%.1f" % v if v >= 10 else "%.2f" % v
    if unit == "B":
        return "%.0f" % v
    return "%.3g" % v


def median_of(samples, broker, sid, metric):
    vals = [s["metrics"][metric] for s in samples
            if s["broker"] == broker and s["scenario_id"] == sid and s.get("ok")
            and metric in s.get("metrics", {}) and s["metrics"][metric] >= 0]
    return (statistics.median(vals) if vals else None), vals


def judge(target, s, r):
    if target is None:
        return "", ""
    targets = target if isinstance(target, list) else [target]
    texts, oks = [], []
    for kind, x in targets:
        if kind == "ratio>=":
            texts.append(">= %gx" % x)
            oks.append(None if s is None or not r else s / r >= x)
        elif kind == "ratio<=":
            texts.append("<= %g of R" % x)
            oks.append(None if s is None or not r else s / r <= x)
        elif kind == "abs<=":
            texts.append("<= %g" % x)
            oks.append(None if s is None else s <= x)
    if any(o is None for o in oks):
        met = "n/a"
    else:
        met = "**yes**" if all(oks) else "NO"
    return " and ".join(texts), met


def build_report(samples, ceiling, env, notes, args, brokers, wall_s):
    have_r = any(b.name == "rabbitmq" for b in brokers)
    L = []
    L.append("# Sluice vs RabbitMQ: benchmark (issue 5)")
    L.append("")
    L.append("- run: `%s` on %s, %d round(s), order per scenario: %s; wall time %.0f s" % (
        args.command, env["date"], args.rounds, " then ".join(b.label for b in brokers), wall_s))
    L.append("- machine: " + env["host"])
    L.append("- Sluice: " + env["sluice"])
    if have_r:
        L.append("- RabbitMQ: " + env["rabbitmq"] + "; classic queues; management plugin off")
    L.append("- load generator: bench/amqpbench on " + env["client"] +
             ", one connection per thread, on the same 2 cores as the broker")
    L.append("- load average (1 min) at start / end: %s / %s" % (
        notes.get("load_start", "?"), notes.get("load_end", "?")))
    L.append("")
    L.append("Medians over rounds; ratio = Sluice / RabbitMQ; for rates higher is better, for "
             "latency, time and memory lower is better.")
    L.append("")
    L.append("| figure | unit | Sluice | RabbitMQ | Sluice/RabbitMQ | target | met | note |")
    L.append("|---|---|---:|---:|---:|---|---|---|")
    for sid, metric, label, unit, better, target in FIGURES:
        s, _ = median_of(samples, "sluice", sid, metric)
        r, _ = median_of(samples, "rabbitmq", sid, metric)
        ratio = "%.2f" % (s / r) if s is not None and r else "-"
        ttext, met = judge(target, s, r)
        note = ""
        if sid.startswith("conf"):
            fs, _ = median_of(samples, "sluice", sid, "fsyncs_per_1k_msgs")
            fr, _ = median_of(samples, "rabbitmq", sid, "fsyncs_per_1k_msgs")
            note = "fsync/1k msgs: S %s, R %s [1]" % (
                "?" if fs is None else "%.1f" % fs, "?" if fr is None else "%.1f" % fr)
        if sid in ("conns", "purge"):
            note = "fresh broker [2]"
        if sid.startswith("manyq"):
            note = "fresh broker [7]"
        if sid in dict(FLOOR_LOADS) and metric.startswith("lat_"):
            fl = [c[metric] for c in ceiling if c.get("beside") == "sluice"
                  and c.get("load") == sid and metric in c]
            if fl:
                note = "no-broker floor beside this load on Sluice: %s (latency floor table)" % (
                    fmt(statistics.median(fl), "us"))
        if sid.startswith("fwd"):
            fs, _ = median_of(samples, "sluice", sid, "fsyncs_per_1k_msgs")
            fr, _ = median_of(samples, "rabbitmq", sid, "fsyncs_per_1k_msgs")
            if fs is not None or fr is not None:
                note = "fsync/1k msgs: S %s, R %s [1]" % (
                    "?" if fs is None else "%.1f" % fs, "?" if fr is None else "%.1f" % fr)
        failed = [x for x in samples if x["scenario_id"] == sid and not x.get("ok")
                  and not x.get("skipped")]
        if failed:
            note += " FAILED: " + ", ".join(sorted({x["broker"] for x in failed}))
        skipped = [x for x in samples if x["scenario_id"] == sid and x.get("skipped")]
        if skipped:
            note += " skipped: " + ", ".join(sorted({x["broker"] for x in skipped}))
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, unit, fmt(s, unit), fmt(r, unit), ratio, ttext, met, note.strip()))
    fwd = [(f, loc) for f, loc in FORWARD_VS_LOCAL if any(x["scenario_id"] == f for x in samples)]
    if fwd:
        L.append("")
        L.append("Store and forward against a local publish with confirms of the same messages "
                 "on the source node, same run (target: forwarding no more than 2x slower than "
                 "that, i.e. forwarded / local >= 0.5):")
        L.append("")
        L.append("| scenario | Sluice forwarded | Sluice local | S fwd/local | target | met | "
                 "RabbitMQ shovel | RabbitMQ local | R fwd/local |")
        L.append("|---|---:|---:|---:|---|---|---:|---:|---:|")
        for f, loc in fwd:
            sf, _ = median_of(samples, "sluice", f, "fwd_rate")
            sl, _ = median_of(samples, "sluice", loc, "confirm_rate")
            rf, _ = median_of(samples, "rabbitmq", f, "fwd_rate")
            rl, _ = median_of(samples, "rabbitmq", loc, "confirm_rate")
            met = "n/a" if not sf or not sl else ("**yes**" if sf / sl >= 0.5 else "NO")
            L.append("| %s | %s | %s | %s | >= 0.5 | %s | %s | %s | %s |" % (
                f, fmt(sf, "msg/s"), fmt(sl, "msg/s"), "%.2f" % (sf / sl) if sf and sl else "-",
                met, fmt(rf, "msg/s"), fmt(rl, "msg/s"),
                "%.2f" % (rf / rl) if rf and rl else "-"))
    if any(c["mode"] != "relay" for c in ceiling):
        L.append("")
        L.append("Loopback ceiling (bench/tcpceil: raw TCP over 127.0.0.1, one writer thread, one "
                 "reader thread, TCP_NODELAY; medians):")
        L.append("")
        L.append("| what | bytes/msg | MB/s | msg/s | Sluice ptc 16 B as share | target | met |")
        L.append("|---|---:|---:|---:|---:|---|---|")
        sp, _ = median_of(samples, "sluice", "ptc16", "pub_rate")
        sc, _ = median_of(samples, "sluice", "ptc16", "cons_rate")
        sraw, _ = median_of(samples, "sluice", "ptc16raw", "pub_rate")
        scraw, _ = median_of(samples, "sluice", "ptc16raw", "cons_rate")
        for key, what in (("batch", "batched 64 KiB writes (the ceiling)"),
                          ("frames", "3 sends per message, as rabbitmq-c publishes")):
            vals = [c for c in ceiling if c["mode"] == key]
            if not vals:
                continue
            bps = statistics.median(c["bytes_per_s"] for c in vals)
            mb = vals[0]["msg_bytes"]
            mps = bps / mb
            share = ""
            ok = ""
            tgt = ""
            if key == "batch":
                dl = ceiling[0].get("deliver_bytes") or mb
                parts = []
                oks = []
                if sp:
                    parts.append("publish %.1f%%" % (100 * sp / mps))
                    oks.append(sp / mps >= 0.3)
                if sc:
                    parts.append("consume %.1f%% (of %s msg/s at %d B)" % (
                        100 * sc / (bps / dl), fmt(bps / dl, "msg/s"), dl))
                    oks.append(sc / (bps / dl) >= 0.3)
                # The same judgement for the pipelined publisher's run, so the share is not
                # only the per-call publisher's own ceiling.
                oks_raw = []
                if sraw:
                    parts.append("pipelined publish %.1f%%" % (100 * sraw / mps))
                    oks_raw.append(sraw / mps >= 0.3)
                if scraw:
                    parts.append("consume after it %.1f%%" % (100 * scraw / (bps / dl)))
                    oks_raw.append(scraw / (bps / dl) >= 0.3)
                share = "; ".join(parts)
                tgt = ">= 30%"
                ok = ("**yes**" if all(oks) else "NO") if oks else "n/a"
                if oks_raw:
                    ok = "per-call %s, pipelined %s" % (ok, "**yes**" if all(oks_raw) else "NO")
            elif sp:
                share = "publish %.0f%%" % (100 * sp / mps)
            L.append("| %s | %d | %.0f | %s | %s | %s | %s |" % (
                what, mb, bps / 1e6, fmt(mps, "msg/s"), share, tgt, ok))
    relay = [c for c in ceiling if c["mode"] == "relay"]
    if relay:
        # What a "<= 0.1 of RabbitMQ" latency target asks, beside what two loopback hops cost
        # with no broker at all: a target below the floor cannot be met by any broker here.
        L.append("")
        L.append("Loopback latency floor (bench/tcpceil --mode relay: a publisher thread sends a "
                 "stamped 16 B message at the rate to an epoll relay thread that writes it on to "
                 "a reader thread; two loopback hops, three wakeups, no AMQP; medians):")
        L.append("")
        L.append("| rate | floor p50 us | floor p99 us | floor p99.9 us | Sluice p50 / p99 us "
                 "| RabbitMQ p50 / p99 us, over 10 (the target) |")
        L.append("|---|---:|---:|---:|---|---|")
        for rate, sid in ((5000, "ps_bg"), (20000, "ps_20k")):
            vals = [c for c in relay if c["rate"] == rate and not c.get("beside")]
            if not vals:
                continue
            med = {k: statistics.median(c[k] for c in vals)
                   for k in ("lat_p50_us", "lat_p99_us", "lat_p999_us")}
            got = {}
            for b in ("sluice", "rabbitmq"):
                p50, _ = median_of(samples, b, sid, "lat_p50_us")
                p99, _ = median_of(samples, b, sid, "lat_p99_us")
                got[b] = (p50, p99)
            sl = "%s (%s) %s / %s" % (sid, "beside persistent 10k/s" if sid == "ps_bg" else
                                      "alone", fmt(got["sluice"][0], "us"),
                                      fmt(got["sluice"][1], "us"))
            rb = "%s / %s" % (fmt(got["rabbitmq"][0] and got["rabbitmq"][0] / 10, "us"),
                              fmt(got["rabbitmq"][1] and got["rabbitmq"][1] / 10, "us"))
            L.append("| %d msg/s | %.1f | %.1f | %.0f | %s | %s |" % (
                rate, med["lat_p50_us"], med["lat_p99_us"], med["lat_p999_us"], sl, rb))
        # The same floor while ps_bg's or ps_bgfull's bulk load runs on each broker
        # (floor_beside_bulk): a latency target of those rows cannot be met where the floor
        # itself is above it.
        for load_sid, _ in FLOOR_LOADS:
            p50b, _ = median_of(samples, "sluice", load_sid, "lat_p50_us")
            p99b, _ = median_of(samples, "sluice", load_sid, "lat_p99_us")
            r50b, _ = median_of(samples, "rabbitmq", load_sid, "lat_p50_us")
            r99b, _ = median_of(samples, "rabbitmq", load_sid, "lat_p99_us")
            for b in ("sluice", "rabbitmq"):
                vals = [c for c in relay if c.get("beside") == b
                        and c.get("load") == load_sid]
                if not vals:
                    continue
                med = {k: statistics.median(c[k] for c in vals)
                       for k in ("lat_p50_us", "lat_p99_us", "lat_p999_us")}
                if b == "sluice":
                    sl = "%s %s / %s" % (load_sid, fmt(p50b, "us"), fmt(p99b, "us"))
                    rb = "%s / %s" % (fmt(r50b and r50b / 10, "us"),
                                      fmt(r99b and r99b / 10, "us"))
                else:
                    sl = "%s on RabbitMQ: %s / %s" % (load_sid, fmt(r50b, "us"), fmt(r99b, "us"))
                    rb = "(as above)"
                L.append("| 5000 msg/s beside %s's bulk load on %s | %.1f | %.1f | %.0f | "
                         "%s | %s |" % (load_sid, "Sluice" if b == "sluice" else "RabbitMQ",
                                        med["lat_p50_us"], med["lat_p99_us"],
                                        med["lat_p999_us"], sl, rb))
    L.append("")
    L.append("Broker CPU per message (utime+stime of the broker process(es) over the phase / "
             "messages) and the load generator's CPU (busy share of its threads; near 1.0 means "
             "the client, not the broker, set the pace):")
    L.append("")
    L.append("| phase | Sluice us/msg | RabbitMQ us/msg | ratio | client busy (S) | "
             "client busy (R) |")
    L.append("|---|---:|---:|---:|---:|---:|")
    for sid, m, cm, label in CPU_FIGURES:
        s, _ = median_of(samples, "sluice", sid, m)
        r, _ = median_of(samples, "rabbitmq", sid, m)
        cs, _ = median_of(samples, "sluice", sid, cm)
        cr, _ = median_of(samples, "rabbitmq", sid, cm)
        L.append("| %s | %s | %s | %s | %s | %s |" % (
            label, "-" if s is None else "%.2f" % s, "-" if r is None else "%.2f" % r,
            "%.2f" % (s / r) if s and r else "-", "-" if cs is None else "%.2f" % cs,
            "-" if cr is None else "%.2f" % cr))
    L.append("")
    L.append("Notes")
    L.append("")
    L.append("1. fsync/1k msgs counts fsync, fdatasync, sync_file_range and msync calls of the "
             "broker process(es) during the scenario (perf syscall tracepoints). "
             + notes.get("fsync", ""))
    L.append("2. The purge/delete and connection scenarios run on a freshly started broker pair "
             "each (RSS growth on a broker that has just freed 1M messages is absorbed by its "
             "allocator). RSS = VmRSS from /proc (RabbitMQ: sum over beam.smp); kernel socket "
             "buffers are not in it. Connections: AMQP handshake done, heartbeats off; channels: "
             "one per connection. " + " ".join(notes.get("fd", [])))
    L.append("3. Rates: publish = N / (first publish .. queue.declare-passive on the "
             "publisher's channel reports all N); consume = N / (basic.consume .. last delivery); "
             "pub/sub and fanout = N / (first publish .. last delivery); confirms = N / (first "
             "publish .. last confirm). prefetch 1000, multiple ack every 250, 1000 confirms "
             "outstanding per producer. Every message verified exactly once (amqpbench exits "
             "non-zero otherwise).")
    L.append("4. Noise: other engineers build and test on this 2-core machine during the run; "
             "load averages above are the hint. The generator shares both cores with the "
             "broker.")
    L.append("5. Publishers. Rows that name no publisher use rabbitmq-c's amqp_basic_publish "
             "(per call), which makes three send() calls per message (method, header and body "
             "frame); that alone caps one publisher near the \"3 sends per message\" rate of the "
             "loopback table, with no broker at all. Rows marked \"pipelined publisher\" send the "
             "identical frame bytes, built by amqpbench and written 64 KiB per write (with "
             "confirms also whenever the window of unconfirmed messages is full, before waiting), "
             "to both brokers; the exactly-once check is the same. The \"client busy\" column "
             "of the CPU table says whether the generator set the pace (near 1.0) or the broker "
             "did; pub_msgs_per_write in the samples is the batching achieved.")
    if any(x["scenario_id"].startswith("fwd") for x in samples):
        L.append("6. Store and forward (fwd*): each broker gets its own pair of fresh nodes on "
                 "127.0.0.1. One producer publishes persistent messages to the source node, with "
                 "1000 confirms outstanding or (fwdtx16) in transactions of 100; one consumer "
                 "on the destination node receives them (prefetch 1000, multiple ack every 250) "
                 "and amqpbench checks that each arrived exactly once and in order. Sluice: "
                 "routing key DIRECT=TCP:127.0.0.1:<port>\\private$\\<queue>, i.e. its "
                 "outgoing queue and node-to-node link with exactly-once transfer. RabbitMQ: a "
                 "dynamic shovel (rabbitmq_shovel, ack-mode on-confirm, prefetch 1000, source "
                 "a direct connection inside the source node) from a durable queue on the "
                 "source to one on the destination: at least once. forwarded = N / (first "
                 "publish .. last arrival). CPU and fsync counts cover both nodes. The local "
                 "reference (fwd*_local) publishes the same N messages into a durable queue on "
                 "the source node right after, the same way (confirms, or transactions of 100 "
                 "for fwdtx16).")
    if any(x["scenario_id"].startswith("manyq") for x in samples):
        L.append("7. Many queues (manyq): on a fresh broker, 4 connections (one thread and one "
                 "channel each, prefetch 1000) declare 2,500 durable classic queues each and "
                 "start one consumer on each; RSS per queue = growth over that / 10,000 (queue "
                 "and its consumer). Then 10,000 idle connections are opened beside them (8 "
                 "threads, handshake done, heartbeats off, no channel): RSS per connection. "
                 "Broker CPU is then read over 3 s with all of it idle. One publisher sends "
                 "50,000 transient 16 B messages at 5,000 msg/s, each to a queue picked by a "
                 "fixed pseudo-random sequence (the same for both brokers); latency = publish "
                 "to delivery, every message checked exactly once. manyq_recover: the queues "
                 "are left, the broker stopped (SIGTERM / rabbitmqctl stop) and started again "
                 "on the same data and port; recover_ms is from the launch of the broker "
                 "process until the last of the 10,000 queues has answered queue.declare "
                 "passive (4 connections, retried every 10 ms until the broker accepts).")
    for extra in notes.get("extra", []):
        L.append("- " + extra)
    failed = [x for x in samples if not x.get("ok") and not x.get("skipped")]
    if failed:
        L.append("")
        L.append("Failures")
        L.append("")
        for x in failed:
            L.append("- round %d %s on %s: %s\n\n```\n%s\n```" % (
                x["round"], x["scenario_id"], x["broker"], x.get("error"),
                x.get("stderr", "")[-1500:]))
    L.append("")
    L.append("All samples (per round)")
    L.append("")
    L.append("| scenario | broker | round | ok | wall s | load1 | metrics |")
    L.append("|---|---|---:|---|---:|---:|---|")
    for x in samples:
        ms = ", ".join("%s=%.4g" % (k, v) for k, v in x.get("metrics", {}).items()
                       if not re.match(r"t_?(pub|cons)?[01]$", k))
        L.append("| %s | %s | %d | %s | %s | %.2f | %s |" % (
            x["scenario_id"], x["broker"], x["round"],
            "ok" if x.get("ok") else "skipped" if x.get("skipped") else "FAIL",
            x.get("wall_s", "-"), x.get("loadavg1", 0), ms))
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------
def start_brokers(want, sluiced_bin, tmp, suffix="", sluice_env=None):
    brokers = []
    try:
        for name in want:
            if name == "sluice":
                b = Sluiced(sluiced_bin, Path(tmp) / ("sluice" + suffix), env=sluice_env)
            else:
                b = RabbitMQ(Path(tmp) / ("rabbitmq" + suffix),
                             node="sluicebench%s@localhost" % suffix)
            t0 = time.monotonic()
            b.start()
            log("%s up on port %d (pids %s) in %.1f s" % (b.label, b.port, b.pids(),
                                                           time.monotonic() - t0))
            brokers.append(b)
    except Exception:
        for b in brokers:
            b.stop()
        raise
    return brokers


# x86-64 syscall numbers of the calls an event-loop broker makes (perf script prints numbers).
SYSCALL_NAMES = {0: "read", 1: "write", 3: "close", 9: "mmap", 11: "munmap", 12: "brk",
                 20: "writev", 23: "select", 7: "poll", 44: "sendto", 45: "recvfrom",
                 46: "sendmsg", 47: "recvmsg", 74: "fsync", 75: "fdatasync", 202: "futex",
                 228: "clock_gettime", 232: "epoll_wait", 233: "epoll_ctl", 281: "epoll_pwait",
                 288: "accept4", 291: "epoll_create1", 441: "epoll_pwait2", 54: "setsockopt",
                 18: "pwrite64", 17: "pread64", 296: "pwritev", 26: "msync", 277: "sync_file_range"}

PROFILE_CASES = [
    # id, amqpbench args, phases: (label, start metric, end metric, messages)
    ("ptc16", "-S ptc -s 16 -n 1000000",
     [("publish (rabbitmq-c, 3 sends/msg)", "t_pub0", "t_pub1"),
      ("consume", "t_cons0", "t_cons1")]),
    ("ptc16raw", "-S ptc -s 16 -n 1000000 --raw",
     [("publish (pipelined, 64 KiB writes)", "t_pub0", "t_pub1"),
      ("consume", "t_cons0", "t_cons1")]),
    ("ps_20k", "-S pubsub -s 16 -n 200000 -r 20000", [("pub/sub at 20k msg/s", "t0", "t1")]),
]


def profile(args, sluiced_bin, amqpbench, tmp, out_dir):
    """perf profile of sluiced per phase: where the CPU goes and the syscalls per message.

    Two perf sessions attach to sluiced during the same run: cpu-clock sampling with DWARF call
    graphs, and raw_syscalls:sys_enter (no stacks) for counts. Both stamp samples with
    CLOCK_MONOTONIC (-k mono), the clock amqpbench reports its phase bounds in, so each phase is
    cut out with `perf report --time` / `perf script --time`.
    """
    if not shutil.which("perf"):
        sys.exit("bench: perf is not installed (apt-get install linux-perf)")
    (b,) = start_brokers(["sluice"], sluiced_bin, tmp)
    text = ["# sluiced profile per phase", "",
            "Generated by `make bench-profile` (bench/run.py --profile) on %s. cpu-clock "
            "sampling at 1999 Hz with DWARF stacks, syscalls from raw_syscalls:sys_enter; only "
            "the sluiced process is recorded. us/msg of a symbol = its share x the phase's "
            "broker CPU per message." % datetime.datetime.now().isoformat(timespec="seconds"),
            "", "sluiced: " + environment(sluiced_bin)["sluice"], ""]
    try:
        pid = b.pids()[0]
        for cid, cargs, phases in PROFILE_CASES:
            data = Path(tmp) / ("perf-%s.data" % cid)
            sysd = Path(tmp) / ("sys-%s.data" % cid)
            # Two runs: recording every syscall would distort the CPU profile (perf's own
            # tracepoint handling shows up as ~10% of sluiced's time).
            runs = []
            for cmd in (["perf", "record", "-F", "1999", "-k", "mono", "--call-graph",
                         "dwarf,8192", "-p", str(pid), "-o", str(data)],
                        ["perf", "record", "-k", "mono", "-e", "raw_syscalls:sys_enter",
                         "-p", str(pid), "-o", str(sysd)]):
                rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1.5)
                runs.append(run_amqpbench(cargs, amqpbench, b, False, tmp, 900))
                rec.send_signal(signal.SIGINT)
                rec.wait(300)
            res, res_sys = runs
            if not res.get("ok") or not res_sys.get("ok"):
                text += ["## %s: amqpbench FAILED: %s" % (cid, res.get("error") or
                                                         res_sys.get("error")), ""]
                continue
            m = res["metrics"]
            text += ["## %s: `amqpbench %s`" % (cid, cargs), "",
                     "metrics: " + ", ".join("%s=%.4g" % (k, v) for k, v in m.items()
                                            if not k.startswith("t")), ""]
            n = res["n"]
            for label, k0, k1 in phases:
                t0, t1 = m[k0], m[k1]
                span = "%.6f,%.6f" % (t0, t1)
                cpu = {"t_pub0": m.get("broker_us_per_msg_pub"),
                       "t_cons0": m.get("broker_us_per_msg_cons"),
                       "t0": m.get("broker_us_per_msg")}[k0]
                text += ["### %s: %.2f s, %s msg/s, sluiced CPU %.2f us/msg" % (
                    label, t1 - t0, fmt(n / (t1 - t0), "msg/s"), cpu or -1), ""]
                # Syscalls per message in the phase.
                ms = res_sys["metrics"]
                sspan = "%.6f,%.6f" % (ms[k0], ms[k1])
                out = subprocess.run(["perf", "script", "-i", str(sysd), "--time", sspan,
                                      "-F", "trace"], capture_output=True, text=True).stdout
                counts = {}
                for line in out.splitlines():
                    mm = re.search(r"NR (\d+)", line)
                    if mm:
                        nr = int(mm.group(1))
                        counts[nr] = counts.get(nr, 0) + 1
                total = sum(counts.values())
                text.append("syscalls (second run, %s msg/s): %.3f per message (%d in the phase)"
                            % (fmt(n / (ms[k1] - ms[k0]), "msg/s"), total / n, total))
                text.append("")
                text.append("| syscall | calls | per message | messages per call |")
                text.append("|---|---:|---:|---:|")
                for nr, c in sorted(counts.items(), key=lambda kv: -kv[1])[:8]:
                    text.append("| %s | %d | %.4f | %.1f |" % (
                        SYSCALL_NAMES.get(nr, "NR %d" % nr), c, c / n, n / c))
                text.append("")
                for title, extra in (
                        ("user vs kernel", ["--no-children", "--sort", "dso"]),
                        ("self time by symbol (top)", ["--no-children", "--sort", "symbol",
                                                       "--percent-limit", "1"]),
                        ("inclusive time (callees included)",
                         ["--children", "--sort", "symbol", "--percent-limit", "3"])):
                    rep = subprocess.run(["perf", "report", "-i", str(data), "--stdio",
                                          "--time", span, "-g", "none"] + extra,
                                         capture_output=True, text=True).stdout
                    rows = [l.rstrip() for l in rep.splitlines()
                            if l.strip() and not l.startswith("#")]
                    text += ["%s:" % title, "", "```"] + rows[:50] + ["```", ""]
        out = out_dir / "profile-latest.md"
        out.write_text("\n".join(text) + "\n")
        print("\n".join(text))
        log("profile written to %s" % out)
    finally:
        b.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--sluiced", help="sluiced binary (default BUILD/sluiced, copied first)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="small N, one round, correctness only")
    ap.add_argument("--profile", action="store_true", help="perf profile of sluiced, ptc 16 B")
    ap.add_argument("--brokers", default="sluice,rabbitmq")
    ap.add_argument("--only", help="comma-separated scenario ids: " +
                    ",".join(s[0] for s in SCENARIOS))
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    ap.add_argument("--sluice-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config setting for sluiced (repeatable), e.g. busy_poll_us=50")
    args = ap.parse_args()
    for kv in args.sluice_set:
        if "=" not in kv:
            sys.exit("bench: --sluice-set wants KEY=VALUE, not %r" % kv)
    SLUICE_SET[:] = args.sluice_set
    if args.smoke:
        args.rounds = 1
    args.command = "python3 bench/run.py " + " ".join(sys.argv[1:])

    build = (REPO / args.build) if not os.path.isabs(args.build) else Path(args.build)
    bench_dir = build / "bench"
    amqpbench, tcpceil = bench_dir / "amqpbench", bench_dir / "tcpceil"
    # The tree is shared: pin the binary under test so a rebuild elsewhere cannot swap it mid-run.
    src_bin = Path(args.sluiced) if args.sluiced else build / "sluiced"
    sluiced_bin = bench_dir / "sluiced-under-test"
    if src_bin.resolve() != sluiced_bin.resolve():
        shutil.copy2(src_bin, sluiced_bin)

    # 10,000 idle connections beside 10,000 queues' consumers need more than 10,000 descriptors
    # in the generator and in each broker; both brokers inherit this limit from us. Root (CI)
    # may raise the hard limit itself (up to fs.nr_open): no operator step needed.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want_fds = 65536
    if hard != resource.RLIM_INFINITY and hard < want_fds:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want_fds, want_fds))
            soft = hard = want_fds
        except (ValueError, OSError):
            log("RLIMIT_NOFILE hard limit %d and not ours to raise: scenarios with more "
                "connections open fewer" % hard)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    want = [w for w in args.brokers.split(",") if w]
    notes = {"fd": [], "extra": []}
    if "rabbitmq" in want and not RabbitMQ.available():
        if not args.smoke:
            sys.exit("bench: rabbitmq-server is not installed (scripts/deps.sh bench)")
        log("rabbitmq-server not installed: Sluice only")
        want.remove("rabbitmq")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="sluice-bench-")

    if args.profile:
        try:
            profile(args, sluiced_bin, amqpbench, tmp, out_dir)
        finally:
            if not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)
        return 0

    scen = [s for s in SCENARIOS if not args.only or s[0] in args.only.split(",")]
    global TLS
    if any("tls" in s[4] for s in scen):
        TLS = make_tls_certs(Path(tmp) / "tls")
    count_fsync = perf_can_count_syscalls()
    env = environment(sluiced_bin)
    notes["load_start"] = "%.2f" % os.getloadavg()[0]
    t_start = time.monotonic()
    samples, ceiling = [], []
    brokers = []
    pairs = []
    failed = False
    try:
        brokers = start_brokers(want, sluiced_bin, tmp)
        # The forward pairs (two more nodes per broker) exist only while the forward scenarios
        # of a round run, fresh each round, so they cannot weigh on the other figures.
        last_fwd = ([s[0] for s in scen if "forward" in s[4]] or [None])[-1]
        notes["fd"] = [b.fd_limit_note() + "." for b in brokers]
        notes["fd"].append("The generator raises its own RLIMIT_NOFILE to the hard limit (%d)."
                           % hard)
        for rnd in range(1, args.rounds + 1):
            for sid, title, full, smoke, flags in scen:
                sargs = smoke if args.smoke else full
                if "forward" in flags:
                    if not pairs:
                        pairs = start_pairs(want, sluiced_bin, tmp, suffix="-%d" % rnd)
                    for pr in pairs:
                        log("round %d/%d: %s on %s" % (rnd, args.rounds, title, pr.label))
                        res = run_forward(sid, sargs, pr, amqpbench, count_fsync, tmp, rnd,
                                          300 if args.smoke else 1800)
                        res.update({"scenario_id": sid, "broker": pr.name, "round": rnd})
                        samples.append(res)
                        if res.get("skipped"):
                            log("  skipped: " + res["skipped"])
                            note = "%s %s: skipped: %s" % (pr.label, sid, res["skipped"])
                            if note not in notes["extra"]:
                                notes["extra"].append(note)
                            continue
                        if not res.get("ok"):
                            failed = True
                            log("FAILED: %s\n%s" % (res.get("error"), res.get("stderr", "")))
                            continue
                        log("  " + ", ".join("%s=%.4g" % kv for kv in res["metrics"].items()))
                        if not any(f[0] == sid + "_local" for f in FIGURES):
                            continue
                        size, n = size_and_n(sargs)
                        tx = sargs.split()[sargs.split().index("--tx-size"):][:2] \
                            if "--tx-size" in sargs else []
                        if "--raw" in sargs.split():
                            tx.append("--raw")
                        loc = run_amqpbench("-S confirm -P 1 -s %s -n %s %s --tag b%d-%s-local"
                                            % (size, n, " ".join(tx), rnd, sid), amqpbench,
                                            pr.src, count_fsync, tmp,
                                            300 if args.smoke else 1800)
                        loc.update({"scenario_id": sid + "_local", "broker": pr.name,
                                    "round": rnd})
                        samples.append(loc)
                        if not loc.get("ok"):
                            failed = True
                            log("FAILED: %s\n%s" % (loc.get("error"), loc.get("stderr", "")))
                        else:
                            log("  local: " + ", ".join("%s=%.4g" % kv
                                                        for kv in loc["metrics"].items()))
                    if sid == last_fwd:
                        for pr in pairs:
                            pr.stop()
                        pairs = []
                    continue
                run_on = brokers
                fresh = []
                # smoke: correctness only, keep it short (but a slow-sync scenario needs
                # brokers of its own)
                if "fresh" in flags and (not args.smoke or "slowsync" in flags):
                    senv = {"SLUICE_FAULT": "sync_delay_ms=10"} if "slowsync" in flags else None
                    fresh = start_brokers(want, sluiced_bin, tmp, suffix="-fresh%d-%s" % (rnd, sid),
                                          sluice_env=senv)
                    run_on = fresh
                try:
                    for b in run_on:
                        log("round %d/%d: %s on %s" % (rnd, args.rounds, title, b.label))
                        keep = " --keep" if "recover" in flags else ""
                        res = run_amqpbench(sargs + keep + " --tag b%d-%s" % (rnd, sid),
                                            amqpbench, b,
                                            count_fsync and "fsync" in flags, tmp,
                                            300 if args.smoke else 1800, tls="tls" in flags)
                        res.update({"scenario_id": sid, "broker": b.name, "round": rnd})
                        samples.append(res)
                        if not res.get("ok"):
                            failed = True
                            log("FAILED: %s\n%s" % (res.get("error"), res.get("stderr", "")))
                        else:
                            log("  " + ", ".join("%s=%.4g" % kv
                                                 for kv in res["metrics"].items()))
                        if "recover" in flags and res.get("ok"):
                            rec = run_recovery(b, sid, sargs, rnd, amqpbench, tmp,
                                               300 if args.smoke else 1800)
                            samples.append(rec)
                            if not rec.get("ok"):
                                failed = True
                                log("FAILED: %s\n%s" % (rec.get("error"), rec.get("stderr", "")))
                            else:
                                log("  recovery: " + ", ".join(
                                    "%s=%.4g" % kv for kv in rec["metrics"].items()))
                finally:
                    for b in fresh:
                        b.stop()
            # The loopback ceiling, once per round, with the publish size of ptc 16 B.
            wire = [s["metrics"].get("pub_wire_bytes") for s in samples
                    if s["scenario_id"] == "ptc16" and s.get("ok")]
            dl = [s["metrics"].get("deliver_wire_bytes") for s in samples
                  if s["scenario_id"] == "ptc16" and s.get("ok") and s["broker"] == "sluice"]
            if wire:
                mb = int(wire[0])
                # rabbitmq-c's three sends: method frame, header frame (22 B), body frame (24 B).
                frames = "%d,22,%d" % (mb - 22 - 24, 24)
                secs = "1" if args.smoke else "3"
                for mode, extra in (("batch", ["--msg-bytes", str(mb)]),
                                    ("frames", ["--frames", frames])):
                    c = run_tcpceil(tcpceil, ["--mode", mode, "--seconds", secs] + extra)
                    c["deliver_bytes"] = int(dl[0]) if dl else None
                    c["round"] = rnd
                    ceiling.append(c)
                    log("  loopback %s: %.0f MB/s, %.3g msg/s" % (mode, c["bytes_per_s"] / 1e6,
                                                                 c["msgs_per_s"]))
            # The latency floor, once per round, beside the latency scenarios.
            if any(s[0] in ("ps_20k", "ps_bg") for s in scen):
                for rate in (5000, 20000):
                    n = rate if args.smoke else rate * 5
                    c = run_tcpceil(tcpceil, ["--mode", "relay", "--msg-bytes", "16", "--rate",
                                              str(rate), "--count", str(n)])
                    c["round"] = rnd
                    ceiling.append(c)
                    log("  loopback relay at %d msg/s: p50 %.1f us, p99 %.1f us" % (
                        rate, c["lat_p50_us"], c["lat_p99_us"]))
            for load_sid, bg_rate in FLOOR_LOADS:
                if not any(s[0] == load_sid for s in scen):
                    continue
                for b in brokers:
                    c = floor_beside_bulk(b, amqpbench, tcpceil, rnd, args.smoke, load_sid,
                                          bg_rate)
                    ceiling.append(c)
                    log("  loopback relay at 5000 msg/s beside %s's bulk load on %s: "
                        "p50 %.1f us, p99 %.1f us" % (load_sid, b.label, c["lat_p50_us"],
                                                      c["lat_p99_us"]))
        notes["fd"] = [b.fd_limit_note() + "." for b in brokers] + notes["fd"][-1:]
    finally:
        for b in brokers + pairs:
            b.stop()
        if not args.keep and not failed:
            shutil.rmtree(tmp, ignore_errors=True)
        elif failed or args.keep:
            log("logs and data kept in %s" % tmp)
    notes["load_end"] = "%.2f" % os.getloadavg()[0]
    no_sync = sorted({s["scenario_id"] for s in samples
                      if s["broker"] == "sluice" and s["scenario_id"].startswith(("conf", "fwd"))
                      and s.get("ok") and s["metrics"].get("fsyncs") == 0})
    if not count_fsync:
        notes["fsync"] = "perf could not count syscalls here: fsync counts are missing."
    elif no_sync:
        notes["fsync"] = ("**Sluice did not fsync in %s: there its persistent figures are not "
                          "durable and not comparable with RabbitMQ's (which fsyncs before "
                          "confirming).** The lead will re-run once the durable store is in the "
                          "build." % ", ".join(no_sync))
    else:
        notes["fsync"] = ("Both brokers called fsync/fdatasync during every persistent run; "
                          "counts per 1000 messages are in the note column.")

    report = build_report(samples, ceiling, env, notes, args, brokers,
                          time.monotonic() - t_start)
    print(report)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = ("smoke-" if args.smoke else "") + stamp
    (out_dir / (name + ".md")).write_text(report)
    (out_dir / ("smoke-latest.md" if args.smoke else "latest.md")).write_text(report)
    (out_dir / (name + ".json")).write_text(json.dumps(
        {"env": env, "samples": samples, "ceiling": ceiling}, indent=1))
    log("results written to %s" % (out_dir / (name + ".md")).relative_to(REPO)
        if str(out_dir).startswith(str(REPO)) else str(out_dir / (name + ".md")))
    if failed:
        log("some runs FAILED (see the Failures section)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
