"""Integration-test harness for Sluice.

Targets (env SLUICE_TEST_TARGET):
  sluice   (default) a fresh `sluiced` daemon and data dir per test.
           Binary: $SLUICED or build/sluiced (relative paths are taken from
           the repository root).  Extra env: SLUICE_LOG_LEVEL=debug adds
           --log-level to every daemon.
  rabbitmq one private Debian rabbitmq-server for the whole session, on free
           ports under a temp dir; torn down at the end.  Set
           SLUICE_RABBITMQ_PORT=N to reuse an already running broker instead.

SLUICE_RABBITMQ_MGMT_PORT=N names its management API (test_permissions.py).

Other env: SLUICE_TEST_TIMEOUT (per-test hard timeout, seconds, default 20);
SLUICE_TEST_INCLUDE_SLUICE_ONLY=1 runs the sluice_only tests against RabbitMQ
too (they are expected to fail there, at the assertion DIFFERENCES.md names).
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import amqp
import pika
import pytest

import amqpraw
import netns
from helpers import IS_RABBITMQ, TARGET, uname

REPO = Path(__file__).resolve().parents[2]
LISTEN_RE = re.compile(rb"listening amqp=([0-9.]+):(\d+)")
# The management API (src/mgmt/) logs its port after the AMQP one.
LISTEN_HTTP_RE = re.compile(rb"listening http=([0-9.]+):(\d+)")
HOST = "127.0.0.1"


# ---------------------------------------------------------------------------
# pytest hooks
# ---------------------------------------------------------------------------
def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "sluice_only(reason): Sluice deliberately differs from RabbitMQ here; "
        "skipped when SLUICE_TEST_TARGET=rabbitmq (see DIFFERENCES.md)")
    config.addinivalue_line(
        "markers", "test_timeout(seconds): per-test hard timeout override")
    config.addinivalue_line(
        "markers",
        "alone: the file needs the machine to itself (network namespaces, etcd, fixed ports, "
        "or CPU/timing measurements); tests/run.sh runs such files one after another, after the "
        "parallel pass")
    # kombu's entry-point lookup warns on import with this Python; not ours.
    config.addinivalue_line("filterwarnings",
                            "ignore:SelectableGroups dict interface:DeprecationWarning")


def pytest_report_header(config):
    if IS_RABBITMQ:
        return "sluice integration target: rabbitmq"
    return "sluice integration target: sluiced (%s)" % sluiced_binary()


# A test that uses one of these fixtures (directly or through another) starts etcd or makes
# network namespaces: it is marked alone (tests/run.sh runs those after the parallel pass). A
# file that starts them some other way marks itself (pytestmark = pytest.mark.alone).
ALONE_FIXTURES = {"etcd", "ns_net", "ns_node"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if ALONE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.alone)
    if not IS_RABBITMQ or os.environ.get("SLUICE_TEST_INCLUDE_SLUICE_ONLY") == "1":
        return
    for item in items:
        m = item.get_closest_marker("sluice_only")
        if m is not None:
            reason = m.args[0] if m.args else m.kwargs.get("reason", "")
            item.add_marker(pytest.mark.skip(reason="sluice_only: %s" % reason))


class _TestTimeout(Exception):
    pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    m = item.get_closest_marker("test_timeout")
    seconds = int(m.args[0]) if m else int(os.environ.get("SLUICE_TEST_TIMEOUT", "20"))

    def on_alarm(signum, frame):
        raise _TestTimeout("test exceeded %ds (broker never answered?)" % seconds)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "_sluice_rep_" + report.when, report)
    if report.failed:
        for b in getattr(item, "_sluice_brokers", []):
            text = b.log_tail()
            if text:
                report.sections.append(("broker log %s (%s)" % (b.port, b.log_path), text))


@pytest.fixture(autouse=True)
def _sluice_drop_data_of_passed_tests(request):
    """After a test that passed, the data directories of the daemons it started (and that have
    exited) go: each holds preallocated segments, and pytest keeps three runs of several
    hundred tests. A failed test keeps them for the post-mortem."""
    yield
    rep = getattr(request.node, "_sluice_rep_call", None)
    if rep is None or not rep.passed:
        return
    for b in getattr(request.node, "_sluice_brokers", []):
        if b.data_dir and b.proc is not None and b.proc.poll() is not None:
            shutil.rmtree(b.data_dir, ignore_errors=True)


# ---------------------------------------------------------------------------
# Broker handle
# ---------------------------------------------------------------------------
def sluiced_binary():
    p = os.environ.get("SLUICED", "build/sluiced")
    path = Path(p)
    if not path.is_absolute():
        path = REPO / path
    return path


class Broker:
    """A running broker the tests talk to."""

    def __init__(self, host, port, kind, log_path=None, proc=None, data_dir=None):
        self.host = host
        self.port = port
        self.kind = kind  # 'sluice' or 'rabbitmq'
        self.log_path = log_path
        self.proc = proc
        self.data_dir = data_dir
        self.mgmt_port = None  # HTTP management API port (sluiced; None if not listening)
        self.rmq_mgmt_port = None  # RabbitMQ's management API (SLUICE_TEST_TARGET=rabbitmq)
        self.exit_code = None
        self._clients = []

    # -- clients ------------------------------------------------------------
    def url(self, user="guest", password="guest", vhost="/"):
        vh = "%2F" if vhost == "/" else vhost
        return "amqp://%s:%s@%s:%d/%s" % (user, password, self.host, self.port, vh)

    def pika_params(self, user="guest", password="guest", **kw):
        kw.setdefault("connection_attempts", 1)
        kw.setdefault("socket_timeout", 5)
        kw.setdefault("blocked_connection_timeout", 10)
        return pika.ConnectionParameters(
            host=self.host, port=self.port,
            credentials=pika.PlainCredentials(user, password), **kw)

    def pika(self, **kw):
        c = pika.BlockingConnection(self.pika_params(**kw))
        self._clients.append(c)
        return c

    def amqp(self, user="guest", password="guest", connect=True, **kw):
        kw.setdefault("connect_timeout", 5)
        kw.setdefault("read_timeout", 5)
        kw.setdefault("write_timeout", 5)
        kw.setdefault("login_method", "PLAIN")
        c = amqp.Connection(host="%s:%d" % (self.host, self.port), userid=user,
                            password=password, **kw)
        self._clients.append(c)
        if connect:
            c.connect()
        return c

    def raw(self, handshake=True, timeout=5.0, **kw):
        r = amqpraw.RawConnection(self.host, self.port, timeout=timeout)
        self._clients.append(r)
        if handshake:
            r.handshake(**kw)
        return r

    def close_clients(self):
        for c in reversed(self._clients):
            try:
                c.close()
            except Exception:
                pass
        self._clients = []

    def assert_alive(self):
        """The broker still serves a fresh connection: declare, publish, get."""
        c = amqp.Connection(host="%s:%d" % (self.host, self.port), userid="guest",
                            password="guest", connect_timeout=5, read_timeout=5,
                            write_timeout=5, login_method="PLAIN")
        c.connect()
        try:
            ch = c.channel()
            q = uname("alive")
            ch.queue_declare(q, auto_delete=False)
            ch.basic_publish(amqp.Message(b"still-alive"), exchange="", routing_key=q)
            msg = None
            deadline = time.monotonic() + 5
            while msg is None and time.monotonic() < deadline:
                msg = ch.basic_get(q, no_ack=True)
            assert msg is not None and msg.body == b"still-alive", "broker round trip failed"
            ch.queue_delete(q)
        finally:
            c.close()
        if self.proc is not None:
            assert self.proc.poll() is None, "sluiced died (exit %s)" % self.proc.returncode

    # -- process control (sluiced only) ----------------------------------------
    def log_tail(self, lines=200):
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            data = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join(data[-lines:])

    def kill9(self):
        """kill -9 the daemon (a crash at this moment); the teardown accepts it."""
        if self.proc is None:
            pytest.fail("kill9 needs a private sluiced (broker_factory)", pytrace=False)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.exit_code = 0  # killed on purpose: not a failed exit
        self.close_clients()  # after the kill: nothing they do now reaches the broker

    def terminate(self, timeout=10.0):
        """SIGTERM the daemon and wait; returns its exit code (None if not ours)."""
        if self.proc is None:
            return None
        if self.exit_code is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.exit_code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.exit_code = "timeout: did not exit within %.0fs of SIGTERM" % timeout
        return self.exit_code


def _write_config(path, config):
    if isinstance(config, dict):
        text = "".join("%s = %s\n" % (k, v) for k, v in config.items())
    else:
        text = config
    path.write_text(text)
    return path


def start_sluiced(tmp_path, args=(), config=None, data_dir=None, host=HOST, env=None, wrap=()):
    """wrap: a command prefix that ends by exec'ing its arguments (the daemon keeps its pid),
    e.g. unshare -m with bind mounts (test_link_dns.py)."""
    binary = sluiced_binary()
    if not binary.exists():
        pytest.fail("sluiced binary not found at %s (build it, or set SLUICED=...)" % binary,
                    pytrace=False)
    tmp_path.mkdir(parents=True, exist_ok=True)
    data_dir = Path(data_dir) if data_dir is not None else tmp_path / "data"
    data_dir.mkdir(exist_ok=True)
    log_path = tmp_path / "sluiced.stderr"
    # --mgmt-port 0: parallel daemons must not fight over 15672.
    cmd = [str(binary), "--port", "0", "--mgmt-port", "0", "--bind", host, "--data-dir",
           str(data_dir)]
    if os.environ.get("SLUICE_LOG_LEVEL"):
        cmd += ["--log-level", os.environ["SLUICE_LOG_LEVEL"]]
    if config is not None:
        cmd += ["--config", str(_write_config(tmp_path / "sluice.conf", config))]
    cmd = list(wrap) + cmd + list(args)
    logf = open(log_path, "wb")
    penv = None
    if env:
        penv = dict(os.environ)
        penv.update(env)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                            cwd=str(REPO), env=penv)
    logf.close()
    deadline = time.monotonic() + 10
    port = None
    while time.monotonic() < deadline:
        m = LISTEN_RE.search(log_path.read_bytes())
        if m:
            port = int(m.group(2))
            break
        if proc.poll() is not None:
            break
        time.sleep(0.005)
    if port is None:
        rc = proc.poll()
        if rc is None:
            proc.kill()
            proc.wait()
        pytest.fail("sluiced did not report 'listening amqp=...' (exit %s); cmd %s\n%s"
                    % (rc, " ".join(cmd), log_path.read_text(errors="replace")), pytrace=False)
    b = Broker(host, port, "sluice", log_path=str(log_path), proc=proc, data_dir=str(data_dir))
    # logged right after the AMQP line; absent when a test turns the API off
    http_deadline = min(deadline, time.monotonic() + 2)
    while time.monotonic() < http_deadline and proc.poll() is None:
        m = LISTEN_HTTP_RE.search(log_path.read_bytes())
        if m:
            b.mgmt_port = int(m.group(2))
            break
        time.sleep(0.005)
    return b


def stop_sluiced(broker):
    broker.close_clients()
    rc = broker.terminate()
    if rc != 0:
        pytest.fail("sluiced did not exit 0 after SIGTERM: exit %r\n--- log ---\n%s"
                    % (rc, broker.log_tail(400)), pytrace=False)


# ---------------------------------------------------------------------------
# Private RabbitMQ for SLUICE_TEST_TARGET=rabbitmq
# ---------------------------------------------------------------------------
def _free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    port = s.getsockname()[1]
    s.close()
    return port


class RabbitMQServer:
    def __init__(self, base):
        self.base = Path(base)
        self.port = _free_port()
        self.dist_port = _free_port()
        self.epmd_port = _free_port()
        # The management plugin is on, for the tests that compare the HTTP API's access
        # rules (test_permissions.py); it is exposed as Broker.rmq_mgmt_port only, so the
        # Sluice API tests (which use Broker.mgmt_port) keep skipping on RabbitMQ.
        self.mgmt_port = _free_port()
        self.node = "sluicetest%d@localhost" % os.getpid()
        self.epmd = None
        self.proc = None
        self.log_path = self.base / "server.out"

    def env(self):
        b = self.base
        env = dict(os.environ)
        env.update({
            "HOME": str(b),  # .erlang.cookie goes here
            "ERL_EPMD_PORT": str(self.epmd_port),
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

    def start(self):
        b = self.base
        b.mkdir(parents=True, exist_ok=True)
        (b / "rabbitmq.conf").write_text(
            "listeners.tcp.default = %s:%d\n"
            "loopback_users.guest = true\n"
            "heartbeat = 60\n"
            "channel_max = 2047\n"
            "disk_free_limit.absolute = 1MB\n"
            "vm_memory_high_watermark.relative = 0.9\n"
            "log.console = false\n"
            "log.file.level = info\n"
            "management.tcp.ip = %s\n"
            "management.tcp.port = %d\n" % (HOST, self.port, HOST, self.mgmt_port))
        (b / "advanced.config").write_text("[].\n")
        (b / "enabled_plugins").write_text("[rabbitmq_management].\n")
        (b / "rabbitmq-env.conf").write_text("")
        epmd = shutil.which("epmd") or "/usr/bin/epmd"
        self.epmd = subprocess.Popen([epmd, "-port", str(self.epmd_port)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        server = "/usr/lib/rabbitmq/bin/rabbitmq-server"
        if not os.path.exists(server):
            server = shutil.which("rabbitmq-server")
        logf = open(self.log_path, "wb")
        self.proc = subprocess.Popen([server], env=self.env(), stdin=subprocess.DEVNULL,
                                     stdout=logf, stderr=logf, cwd=str(b),
                                     start_new_session=True)
        logf.close()
        deadline = time.monotonic() + 90
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                c = amqp.Connection(host="%s:%d" % (HOST, self.port), userid="guest",
                                    password="guest", connect_timeout=2, read_timeout=5,
                                    login_method="PLAIN")
                c.connect()
                c.close()
                socket.create_connection((HOST, self.mgmt_port), timeout=2).close()
                return
            except Exception as e:  # not up yet
                last = e
                time.sleep(0.5)
        out = self.log_path.read_text(errors="replace")
        self.stop()
        raise RuntimeError("rabbitmq-server did not come up (%r)\n%s" % (last, out))

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            # rabbitmq-server execs erl, so this pid is the node itself;
            # OTP handles SIGTERM as a graceful init:stop().
            # The script traps TERM and runs `rabbitmqctl stop` with our env.
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            # Anything left in the session we created for it (beam.smp,
            # erl_child_setup...) is ours: make sure it is gone.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if self.epmd is not None and self.epmd.poll() is None:
            self.epmd.terminate()
            try:
                self.epmd.wait(5)
            except subprocess.TimeoutExpired:
                self.epmd.kill()
                self.epmd.wait()


@pytest.fixture(scope="session")
def rabbitmq_server(tmp_path_factory):
    if not IS_RABBITMQ:
        yield None
        return
    if os.environ.get("SLUICE_RABBITMQ_PORT"):
        b = Broker(HOST, int(os.environ["SLUICE_RABBITMQ_PORT"]), "rabbitmq")
        if os.environ.get("SLUICE_RABBITMQ_MGMT_PORT"):
            b.rmq_mgmt_port = int(os.environ["SLUICE_RABBITMQ_MGMT_PORT"])
        yield b
        return
    srv = RabbitMQServer(tmp_path_factory.mktemp("rabbitmq"))
    srv.start()
    try:
        b = Broker(HOST, srv.port, "rabbitmq", log_path=str(srv.log_path))
        b.rmq_mgmt_port = srv.mgmt_port
        yield b
    finally:
        srv.stop()


# ---------------------------------------------------------------------------
# Test fixtures
# ---------------------------------------------------------------------------
@pytest.fixture
def broker(request, tmp_path, rabbitmq_server):
    """A broker to talk to: a fresh sluiced, or the session's RabbitMQ."""
    if IS_RABBITMQ:
        b = Broker(rabbitmq_server.host, rabbitmq_server.port, "rabbitmq")
        b.rmq_mgmt_port = rabbitmq_server.rmq_mgmt_port
        yield b
        b.close_clients()
        return
    b = start_sluiced(tmp_path / "broker")
    request.node._sluice_brokers = getattr(request.node, "_sluice_brokers", []) + [b]
    try:
        yield b
    finally:
        stop_sluiced(b)


@pytest.fixture
def broker_factory(request, tmp_path):
    """start(args=(), config=None, data_dir=None, env=None) -> Broker: a private sluiced.

    config is a dict of `key = value` lines (or the file text); data_dir lets
    a test restart a broker on the data of a previous one; env adds
    environment variables (e.g. SLUICE_FAULT, store/log.h).  Skips on
    RabbitMQ: those scenarios need a private broker.
    """
    started = []

    def start(args=(), config=None, data_dir=None, env=None):
        if IS_RABBITMQ:
            pytest.skip("needs a private broker started with custom args/config "
                        "(sluiced only)")
        b = start_sluiced(tmp_path / ("broker%d" % len(started)), args=args, config=config,
                          data_dir=data_dir, env=env)
        started.append(b)
        request.node._sluice_brokers = getattr(request.node, "_sluice_brokers", []) + [b]
        return b

    yield start
    errors = []
    for b in started:
        try:
            stop_sluiced(b)
        except BaseException as e:  # collect, report all
            errors.append(str(e))
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)


@pytest.fixture
def conn(broker):
    """A connected py-amqp connection."""
    return broker.amqp()


@pytest.fixture
def ch(conn):
    """A py-amqp channel on `conn`."""
    return conn.channel()


@pytest.fixture
def target():
    return TARGET


@pytest.fixture
def nodes(request, tmp_path):
    """The multi-node loopback harness (multinode.py): nodes.start(name, ...) -> Node.

    Each node is a private sluiced on its own loopback address (127.0.0.2, 127.0.0.3, ...
    in start order) with --port 0; node.fmt(queue) is the direct format name other nodes
    use to send to it.  Every node is stopped (SIGTERM, exit 0 checked) at the end.
    Skips on RabbitMQ.
    """
    if IS_RABBITMQ:
        pytest.skip("multi-node scenarios need private sluiced nodes")
    import multinode
    cluster = multinode.Cluster(tmp_path, request)
    yield cluster
    cluster.stop_all()


# ---------------------------------------------------------------------------
# Nodes in network namespaces (tests/integration/netns.py)
# ---------------------------------------------------------------------------
@pytest.fixture
def ns_net(request, tmp_path):
    """A netns.Net: network namespaces joined by veth links, with cuts, delay and loss.

    Everything it made (processes, shapers, namespaces) is removed at teardown, also when the
    test fails or the run is interrupted.  Skips on RabbitMQ and when not root.
    """
    if IS_RABBITMQ:
        pytest.skip("needs private sluiced nodes in network namespaces (sluiced only)")
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)
    net = netns.Net(tmp_path / "netns")
    try:
        yield net
    finally:
        net.close()


@pytest.fixture
def ns_node(request, ns_net):
    """start(name, config=None, args=()) -> netns.NsNode: a sluiced in node `name`'s namespace
    (created if the test has not made it yet), on every address of it, default ports.

    At teardown every node still running must exit 0 on SIGTERM; a node the test killed -9 is
    fine.  Broker logs of every node are attached to a failing test's report.
    """
    started = []

    def start(name, config=None, args=()):
        node = netns.NsNode(ns_net, name, sluiced_binary(), config=config, args=args)
        started.append(node)
        request.node._sluice_brokers = getattr(request.node, "_sluice_brokers", []) + [node]
        return node.start()

    start.net = ns_net
    yield start
    errors = []
    for node in started:
        if node.alive():
            rc = node.stop()
            if rc != 0:
                errors.append("sluiced %s did not exit 0 after SIGTERM: exit %r\n%s"
                              % (node.name, rc, node.log_tail(100)))
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)
