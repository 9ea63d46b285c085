"""The multi-node loopback harness: several private sluiced nodes on one machine.

Each node listens on its own loopback address (127.0.0.2, 127.0.0.3, ... in start order;
all of 127.0.0.0/8 is loopback on Linux) with --port 0 and --mgmt-port 0, so tests running
at the same time never collide.  A node is addressed by other nodes with its direct format
name, node.fmt("orders") == 'DIRECT=TCP:127.0.0.3:40123\\private$\\orders'.

    def test_x(nodes):
        a = nodes.start("a")
        b = nodes.start("b")
        ch = a.amqp().channel()
        ch.basic_publish(amqp.Message(b"hi", delivery_mode=2), exchange="",
                         routing_key=b.fmt("orders"))
        ...
        b.kill9(); b.restart()      # same address, same data directory, new port
        a.api.action("QUEUE=" + b.fmt("orders"), "PAUSE")

A restarted node gets a new port (--port 0), so format names that named the old one point
at nothing: tests that restart a *receiver* pass restart_keep_port=True to start(), which
pins the node to the port it first got (free-port races are retried).

Config given to start() is merged over LINK_TEST_CONFIG (short retry and resend timers).
The soak (make link-test) uses the same classes.
"""

import os
import signal
import socket
import time
from pathlib import Path

from conftest import start_sluiced, stop_sluiced
from helpers import wait_for
from test_mgmt import Api

# Short timers so faults heal within a test's time budget (see docs/store-and-forward.md).
LINK_TEST_CONFIG = {
    "link_retry_min_ms": 50,
    "link_retry_max_ms": 400,
    "link_heartbeat": 2,
    "eod_resend_short_ms": 2000,
    "eod_resend_medium_ms": 4000,
    "eod_resend_long_ms": 8000,
    "eod_resend_final_ms": 16000,
}

_next_octet = [2]


def _alloc_addr():
    # 127.0.0.2 .. 127.0.0.250, then wrap (ports keep parallel runs apart anyway)
    o = _next_octet[0]
    _next_octet[0] = 2 if o >= 250 else o + 1
    return "127.0.0.%d" % o


def _port_free(host, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


class Node:
    """One sluiced of a cluster: .broker (conftest.Broker), .api (test_mgmt.Api)."""

    def __init__(self, cluster, name, addr, config, keep_port, args, wrap=(), env=None):
        self.cluster = cluster
        self.name = name
        self.addr = addr
        self.config = config
        self.keep_port = keep_port
        self.args = tuple(args)
        self.wrap = tuple(wrap)
        self.env = env
        self.dir = Path(cluster.tmp_path) / ("node-" + name)
        self.data_dir = self.dir / "data"
        self.broker = None
        self.port = None
        self.starts = 0

    # -- lifecycle --------------------------------------------------------------
    def _start(self):
        args = list(self.args)
        if self.keep_port and self.port:
            args = ["--port", str(self.port)] + args
        cfg = dict(self.config)
        cfg.setdefault("node_name", "sluice@" + self.name)
        b = start_sluiced(self.dir / ("run%d" % self.starts), args=args, config=cfg,
                          data_dir=self.data_dir, host=self.addr, wrap=self.wrap,
                          env=self.env)
        self.starts += 1
        self.broker = b
        self.port = b.port
        self.api = Api(b)
        self.cluster.request.node._sluice_brokers = getattr(
            self.cluster.request.node, "_sluice_brokers", []) + [b]
        return self

    def stop(self):
        """SIGTERM; asserts exit 0."""
        if self.broker is not None:
            stop_sluiced(self.broker)
            self.broker = None

    def kill9(self):
        if self.broker is not None and self.broker.proc is not None:
            self.broker.close_clients()
            self.broker.proc.send_signal(signal.SIGKILL)
            self.broker.proc.wait()
            self.broker.exit_code = -9
            self.broker = None

    def restart(self, timeout=10.0):
        """Start again on the same address and data directory (after stop or kill9)."""
        assert self.broker is None, "stop() or kill9() first"
        if self.keep_port:
            deadline = time.monotonic() + timeout
            while not _port_free(self.addr, self.port):
                assert time.monotonic() < deadline, "port %d never came free" % self.port
                time.sleep(0.05)
        return self._start()

    @property
    def alive(self):
        return self.broker is not None and self.broker.proc.poll() is None

    # -- clients ------------------------------------------------------------------
    def amqp(self, **kw):
        return self.broker.amqp(**kw)

    def pika(self, **kw):
        return self.broker.pika(**kw)

    def fmt(self, queue):
        """The direct format name other nodes send to: DIRECT=TCP:addr:port\\private$\\q."""
        return "DIRECT=TCP:%s:%d\\private$\\%s" % (self.addr, self.port, queue)

    def log(self):
        return self.broker.log_tail(400) if self.broker else ""

    # -- outgoing queues (GET /api/msmq/outgoing) --------------------------------
    def outgoing(self):
        s, j, _ = self.api.get("/api/msmq/outgoing")
        assert s == 200, (s, j)
        return j

    def outgoing_queue(self, fmt_name):
        for o in self.outgoing():
            if o["format_name"].lower() == fmt_name.lower():
                return o
        return None

    def wait_state(self, fmt_name, state, timeout=10.0):
        def ok():
            o = self.outgoing_queue(fmt_name)
            return o if o is not None and o["state"] == state else None
        return wait_for(ok, timeout=timeout,
                        message="outgoing queue %s never reached %s (now %r)"
                        % (fmt_name, state, self.outgoing_queue(fmt_name)))

    def wait_drained(self, fmt_name, timeout=20.0):
        """Wait until the outgoing queue holds nothing (every message order-acked)."""
        def ok():
            o = self.outgoing_queue(fmt_name)
            return o is not None and o["messages"] == 0
        wait_for(ok, timeout=timeout,
                 message="outgoing queue %s never drained (%r)"
                 % (fmt_name, self.outgoing_queue(fmt_name)))


class Cluster:
    def __init__(self, tmp_path, request):
        self.tmp_path = tmp_path
        self.request = request
        self.nodes = {}

    def start(self, name, config=None, addr=None, keep_port=False, args=(), wrap=(), env=None):
        cfg = dict(LINK_TEST_CONFIG)
        if config:
            cfg.update(config)
        n = Node(self, name, addr or _alloc_addr(), cfg, keep_port, args, wrap, env)
        self.nodes[name] = n
        return n._start()

    def __getitem__(self, name):
        return self.nodes[name]

    def stop_all(self):
        errors = []
        for n in self.nodes.values():
            try:
                n.stop()
            except BaseException as e:  # report every node
                errors.append("%s: %s" % (n.name, e))
        if errors:
            raise AssertionError("\n".join(errors))


def drain(ch, queue, limit=100000, idle=0.5):
    """Every body in queue (basic.get no_ack until empty for `idle` seconds)."""
    out = []
    last = time.monotonic()
    while len(out) < limit:
        m = ch.basic_get(queue, no_ack=True)
        if m is None:
            if time.monotonic() - last > idle:
                break
            time.sleep(0.02)
            continue
        last = time.monotonic()
        b = m.body
        out.append(b.encode() if isinstance(b, str) else b)
    return out

