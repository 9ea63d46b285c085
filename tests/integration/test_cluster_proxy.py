"""A cluster follower's front door (issue 31, src/cluster/proxy.c): clients of any node reach
the leader through the follower's proxy.

The proxy runs here in build/test-proxy-harness (the proxy alone, driven over its stdin), in
front of one sluiced that stands in for the leader: pika and amqp-tools through it (confirms,
consume), HTTP with auth, 16 MiB messages both ways through small buffers, many connections,
a leader change closing every proxied connection, the refusals with no leader (AMQP 320, HTTP
503, the member's own GET /api/cluster), and the bounds on idle, slow and half-open clients.
The guest loopback rule through a proxy needs a leader that knows its members: that test runs
a one-node cluster on etcd."""

import json
import os
import select
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import amqp
import pika
import pytest

from conftest import REPO
from helpers import IS_RABBITMQ, wait_for

# Runs alone, after the parallel pass (tests/run.sh): etcd and a cluster's lease timings.
pytestmark = [pytest.mark.skipif(IS_RABBITMQ, reason="Sluice's cluster proxy"), pytest.mark.alone]

AUTH = "Basic Z3Vlc3Q6Z3Vlc3Q="  # guest:guest


def harness_binary():
    s = os.environ.get("SLUICED")
    build = Path(s).parent if s else REPO / "build"
    if not build.is_absolute():
        build = REPO / build
    return build / "test-proxy-harness"


class Harness:
    """build/test-proxy-harness: a cl_proxy on free ports, commanded over stdin."""

    def __init__(self, tmp_path, doors=("amqp", "http"), host="127.0.0.1", extra=(), prefix=()):
        binary = harness_binary()
        if not binary.exists():
            pytest.fail("%s not built (make all)" % binary, pytrace=False)
        cmd = list(prefix) + [str(binary)]
        for d in doors:
            cmd += ["--" + d, "%s:0" % host]
        cmd += list(extra)
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.err_path = tmp_path / "harness.stderr"
        self.errf = open(self.err_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errf, bufsize=0)
        self.ports = {}
        self._buf = b""
        while True:
            line = self._line(10)
            if line == "ready":
                break
            assert line.startswith("listening "), line
            door, addr = line.split(" ", 1)[1].split("=")
            self.ports[door] = int(addr.rsplit(":", 1)[1])
        self.host = host

    def _line(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("harness did not answer; stderr:\n" + self.log())
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    raise AssertionError("harness exited; stderr:\n" + self.log())
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def cmd(self, line):
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise AssertionError("harness exited; stderr:\n" + self.log())
        return self._line(10)

    def leader(self, broker, name="leader", amqp_port=None, http_port=None):
        a = "%s:%d" % (broker.host, amqp_port or broker.port)
        h = "%s:%d" % (broker.host, http_port or broker.mgmt_port)
        assert self.cmd("leader %s %s - %s" % (name, a, h)) == "ok"

    def stats(self):
        line = self.cmd("stats")
        assert line.startswith("stats "), line
        return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}

    def log(self):
        return self.err_path.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            try:
                line = self.cmd("stop")
            except (AssertionError, BrokenPipeError):
                line = ""
            try:
                rc = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                rc = "hung"
            self.errf.close()
            # a sanitizer build reports leaks and errors at exit: any of them fails the test
            assert rc == 0, "harness exit %r:\n%s" % (rc, self.log())
            return line
        self.errf.close()
        return ""


@pytest.fixture
def proxy(request, tmp_path):
    made = []

    def make(**kw):
        h = Harness(tmp_path / ("h%d" % len(made)), **kw) if made else Harness(tmp_path, **kw)
        made.append(h)
        return h

    (tmp_path).mkdir(exist_ok=True)
    yield make
    for h in made:
        h.stop()


def pika_via(h, user="guest", password="guest", **kw):
    kw.setdefault("socket_timeout", 10)
    kw.setdefault("blocked_connection_timeout", 30)
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=h.host, port=h.ports["amqp"], connection_attempts=1,
        credentials=pika.PlainCredentials(user, password), **kw))


def http_via(h, path, auth=AUTH, timeout=10):
    req = urllib.request.Request("http://%s:%d%s" % (h.host, h.ports["http"], path))
    if auth:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def closed_by_peer(s, timeout):
    """True when the peer closes s (EOF or reset) within timeout; reads and drops data."""
    s.settimeout(0.2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if s.recv(65536) == b"":
                return True
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


# ---------------------------------------------------------------------------
# Through the proxy, with a leader
# ---------------------------------------------------------------------------
def test_pika_confirms_and_consume_through_proxy(broker, proxy):
    h = proxy()
    h.leader(broker)
    c = pika_via(h)
    ch = c.channel()
    ch.confirm_delivery()
    ch.queue_declare("px", durable=True)
    for i in range(200):
        ch.basic_publish("", "px", b"m%d" % i, pika.BasicProperties(delivery_mode=2),
                         mandatory=True)  # confirmed one by one (BlockingChannel)
    got = []
    for method, _props, body in ch.consume("px", inactivity_timeout=5):
        if method is None:
            break
        got.append(body)
        ch.basic_ack(method.delivery_tag)
        if len(got) == 200:
            break
    ch.cancel()
    assert got == [b"m%d" % i for i in range(200)]
    c.close()
    # the same queue seen directly at the leader: the proxy reached the real broker
    d = broker.pika()
    assert d.channel().queue_declare("px", passive=True).method.message_count == 0
    st = h.stats()
    assert st["forwarded"] >= 1 and st["refused"] == 0
    wait_for(lambda: h.stats()["open"] == 0, 10, message="proxied connections not closed")


def test_amqp_tools_through_proxy(broker, proxy):
    if not shutil.which("amqp-publish"):
        pytest.fail("amqp-tools missing: scripts/deps.sh test")
    h = proxy()
    h.leader(broker)
    d = broker.pika().channel()
    d.queue_declare("tools")
    url = "amqp://guest:guest@%s:%d/%%2F" % (h.host, h.ports["amqp"])
    for i in range(3):
        r = subprocess.run(["amqp-publish", "--url", url, "-r", "tools", "-b", "via proxy %d" % i],
                           capture_output=True, timeout=20)
        assert r.returncode == 0, r.stderr
    out = []
    for _ in range(3):
        r = subprocess.run(["amqp-get", "--url", url, "-q", "tools"], capture_output=True,
                           timeout=20)
        assert r.returncode == 0, r.stderr
        out.append(r.stdout)
    assert out == [b"via proxy %d" % i for i in range(3)]


def test_http_through_proxy(broker, proxy):
    h = proxy()
    h.leader(broker)
    code, body = http_via(h, "/api/overview")
    assert code == 200
    assert json.loads(body)["product_name"] == "Sluice"
    code, _ = http_via(h, "/api/overview", auth=None)
    assert code == 401
    # with a leader, /api/cluster is the leader's too (a single node: no cluster section)
    code, body = http_via(h, "/api/cluster")
    direct = urllib.request.Request("http://%s:%d/api/cluster" % (broker.host, broker.mgmt_port))
    direct.add_header("Authorization", AUTH)
    try:
        with urllib.request.urlopen(direct, timeout=10) as r:
            dcode, dbody = r.status, r.read()
    except urllib.error.HTTPError as e:
        dcode, dbody = e.code, e.read()
    assert (code, body) == (dcode, dbody)


@pytest.mark.test_timeout(120)
def test_large_message_both_ways_through_small_buffers(broker, proxy):
    """16 MiB each way through 16 KiB buffers: back-pressure, not memory, carries it."""
    h = proxy(extra=("--buf", "16384"))
    h.leader(broker)
    c = pika_via(h)
    ch = c.channel()
    ch.confirm_delivery()
    ch.queue_declare("big")
    body = os.urandom(16 << 20)
    ch.basic_publish("", "big", body)
    m = ch.basic_get("big", auto_ack=True)
    assert m[0] is not None and m[2] == body
    c.close()


def test_many_connections(broker, proxy):
    h = proxy()
    h.leader(broker)
    conns = []
    for i in range(100):
        c = amqp.Connection(host="%s:%d" % (h.host, h.ports["amqp"]), userid="guest",
                            password="guest", connect_timeout=10, read_timeout=10,
                            write_timeout=10)
        c.connect()
        conns.append(c)
    wait_for(lambda: h.stats()["open"] == 100, 10, message="100 proxied connections")
    for i, c in enumerate(conns):
        ch = c.channel()
        ch.queue_declare("many%d" % i, auto_delete=False)
    for c in conns:
        c.close()
    wait_for(lambda: h.stats()["open"] == 0, 10, message="connections not closed")
    d = broker.pika().channel()
    for i in range(100):
        d.queue_declare("many%d" % i, passive=True)


def test_connection_cap_holds_the_rest_in_the_backlog(broker, proxy):
    h = proxy(extra=("--max", "4"))
    h.leader(broker)
    held = [pika_via(h) for _ in range(4)]
    wait_for(lambda: h.stats()["open"] == 4, 10, message="4 open")
    result = {}

    def fifth():
        try:
            c = pika_via(h, socket_timeout=20)
            result["ok"] = True
            c.close()
        except Exception as e:  # noqa: BLE001 - reported below
            result["err"] = e

    t = threading.Thread(target=fifth)
    t.start()
    time.sleep(0.5)  # not a wait for an event: the absence of one (the 5th is held)
    assert h.stats()["accepted"] == 4 and "ok" not in result
    held.pop().close()
    t.join(20)
    assert result.get("ok"), result
    for c in held:
        c.close()


def test_a_reply_the_old_leader_sends_after_a_leader_change_still_reaches_the_client(
        broker, proxy):
    """A leader answers a step-down and steps down at once; followers see it gone within
    milliseconds (the watch on etcd), before the proxy has relayed the answer: the proxied
    connection is drained (the old leader's bytes still go to the client, for at most 1 s),
    not cut. A stand-in leader here answers only once the proxy has taken the change."""
    fake = socket.socket()
    fake.bind((broker.host, 0))
    fake.listen(4)
    fake.settimeout(10)
    h = proxy()
    h.leader(broker, name="one", http_port=fake.getsockname()[1])
    s = socket.create_connection((h.host, h.ports["http"]), timeout=10)
    s.sendall(b"POST /api/cluster/step-down HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    lc, _ = fake.accept()
    lc.settimeout(10)
    assert lc.recv(4096).startswith(b"POST /api/cluster/step-down")
    before = h.stats()["closed_by_leader_change"]
    h.leader(broker, name="two", http_port=fake.getsockname()[1])
    wait_for(lambda: h.stats()["closed_by_leader_change"] > before, 10,
             message="the proxy took the leader change")
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    lc.sendall(reply)
    lc.close()
    got = b""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(4096)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        got += chunk
    s.close()
    fake.close()
    assert got == reply, got


def test_leader_change_closes_proxied_connections(broker, proxy):
    h = proxy()
    h.leader(broker, name="one")
    c = pika_via(h)
    ch = c.channel()
    ch.queue_declare("lc")
    s = socket.create_connection((h.host, h.ports["http"]), timeout=5)
    s.sendall(b"GET /api/overview HTTP/1.1\r\nHost: x\r\nAuthorization: " + AUTH.encode() +
              b"\r\n\r\n")
    wait_for(lambda: h.stats()["open"] == 2, 10, message="2 open")
    # the same addresses under another name is another leader (a restart, a new epoch)
    h.leader(broker, name="two")
    assert closed_by_peer(s, 10), "the HTTP connection stayed open across a leader change"
    with pytest.raises((pika.exceptions.AMQPConnectionError, pika.exceptions.StreamLostError,
                        pika.exceptions.ConnectionClosed)):
        for _ in range(50):
            ch.queue_declare("lc", passive=True)
            time.sleep(0.05)
    st = h.stats()
    assert st["closed_by_leader_change"] >= 2
    assert "cluster proxy: forwarding to two at" in h.log()
    # clients reconnect: to the new leader through the same door
    c2 = pika_via(h)
    c2.channel().queue_declare("lc", passive=True)
    c2.close()
    # the leader goes: proxied connections close, new ones are refused
    c3 = pika_via(h)
    assert h.cmd("noleader") == "ok"
    with pytest.raises(pika.exceptions.AMQPError):
        for _ in range(50):
            c3.channel()
            time.sleep(0.05)
    assert "no leader: refusing" in h.log()


def test_unreachable_leader_closes_the_client(proxy):
    h = proxy()
    # a port nobody listens on
    s0 = socket.socket()
    s0.bind(("127.0.0.1", 0))
    dead = s0.getsockname()[1]
    s0.close()
    assert h.cmd("leader gone 127.0.0.1:%d - 127.0.0.1:%d" % (dead, dead)) == "ok"
    s = socket.create_connection((h.host, h.ports["amqp"]), timeout=5)
    s.sendall(b"AMQP\x00\x00\x09\x01")
    assert closed_by_peer(s, 10)
    wait_for(lambda: h.stats()["connect_failed"] >= 1, 5, message="connect_failed counted")


def test_half_close_passes_through(broker, proxy):
    """A client that sends its header then shuts its write side: the leader sees EOF, and
    the client still reads what the leader sent (connection.start), then the close."""
    h = proxy()
    h.leader(broker)
    s = socket.create_connection((h.host, h.ports["amqp"]), timeout=5)
    s.sendall(b"AMQP\x00\x00\x09\x01")
    s.shutdown(socket.SHUT_WR)
    data = b""
    s.settimeout(10)
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    assert data[:1] == b"\x01" and data[7:11] == b"\x00\x0a\x00\x0a"  # connection.start
    wait_for(lambda: h.stats()["open"] == 0, 10, message="the half-closed pair not released")


# ---------------------------------------------------------------------------
# No leader
# ---------------------------------------------------------------------------
def test_no_leader_amqp_refusal_pika_and_py_amqp(proxy):
    h = proxy()
    with pytest.raises(pika.exceptions.AMQPConnectionError) as ei:
        pika_via(h)
    assert "320" in str(ei.value) and "no cluster leader is elected yet" in str(ei.value)
    with pytest.raises(amqp.exceptions.ConnectionForced) as ej:
        c = amqp.Connection(host="%s:%d" % (h.host, h.ports["amqp"]), userid="guest",
                            password="guest", connect_timeout=5, read_timeout=5)
        c.connect()
    assert "no cluster leader is elected yet" in str(ej.value)
    wait_for(lambda: h.stats()["open"] == 0, 10, message="refused connections released")
    assert h.stats()["refused"] == 2


def test_no_leader_amqp_refusal_amqplib(proxy):
    node = shutil.which("node")
    nm = Path(__file__).resolve().parent / "node" / "node_modules" / "amqplib"
    if not node or not nm.is_dir():
        pytest.fail("node or amqplib missing: run `make deps-test`")
    h = proxy()
    js = ("require('amqplib').connect('amqp://guest:guest@127.0.0.1:%d').then("
          "c => { console.log('connected'); process.exit(1); },"
          "e => { console.log('refused: ' + e.message); process.exit(0); });" % h.ports["amqp"])
    r = subprocess.run([node, "-e", js], capture_output=True, text=True, timeout=30,
                       cwd=str(nm.parent.parent))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "320" in r.stdout and "no cluster leader is elected yet" in r.stdout, r.stdout


def test_no_leader_wrong_protocol_gets_our_header(proxy):
    h = proxy()
    s = socket.create_connection((h.host, h.ports["amqp"]), timeout=5)
    s.sendall(b"AMQP\x01\x01\x00\x0a")
    s.settimeout(5)
    assert s.recv(8) == b"AMQP\x00\x00\x09\x01"
    assert closed_by_peer(s, 5)


def test_no_leader_http_503_and_own_cluster_status(proxy):
    h = proxy()
    code, body = http_via(h, "/api/overview")
    assert code == 503
    j = json.loads(body)
    assert j["error"] == "no_leader" and "no cluster leader" in j["reason"]
    code, body = http_via(h, "/api/cluster")
    assert code == 200
    assert json.loads(body)["nodes"][0]["role"] == "follower"
    code, body = http_via(h, "/api/cluster?columns=name")
    assert code == 200
    code, _ = http_via(h, "/api/clusterx")
    assert code == 503
    # a POST with a body: answered, the body drained, no reset before the client reads
    s = socket.create_connection((h.host, h.ports["http"]), timeout=5)
    s.sendall(b"POST /api/queues/%2F/q HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    s.settimeout(5)
    assert s.recv(4096).startswith(b"HTTP/1.1 503 ")
    # garbage
    s = socket.create_connection((h.host, h.ports["http"]), timeout=5)
    s.sendall(b"\x16\x03\x01 not http\r\n\r\n")
    s.settimeout(5)
    assert s.recv(4096).startswith(b"HTTP/1.1 400 ")


def test_no_leader_slow_and_idle_clients_are_bounded(proxy):
    """Slowloris: idle sockets and a byte-a-second request are cut at the refusal timeout;
    a client that floods a refusal is cut at the read bound; the cap holds the rest."""
    h = proxy(extra=("--refuse-timeout", "1000", "--max", "16"))
    idle = [socket.create_connection((h.host, h.ports[d]), timeout=5)
            for d in ("amqp", "http") for _ in range(4)]
    slow = socket.create_connection((h.host, h.ports["http"]), timeout=5)
    slow.sendall(b"GET /api/ov")
    flood = socket.create_connection((h.host, h.ports["http"]), timeout=5)
    try:
        flood.sendall(b"GET /" + b"a" * 100000)
    except (ConnectionResetError, BrokenPipeError):
        pass
    t0 = time.monotonic()
    for s in idle + [slow, flood]:
        assert closed_by_peer(s, 10), "a slow client was not cut off"
    assert time.monotonic() - t0 < 10
    wait_for(lambda: h.stats()["open"] == 0, 10, message="refusals not released")


def test_stop_leaves_the_listening_sockets_open(broker, proxy):
    h = proxy()
    h.leader(broker)
    c = pika_via(h)
    assert h.stop() == "stopped listening=2"
    with pytest.raises(pika.exceptions.AMQPError):
        for _ in range(50):
            c.channel()
            time.sleep(0.05)


# ---------------------------------------------------------------------------
# Promotion: the proxy's listening sockets handed to the broker (--listen-fd)
# ---------------------------------------------------------------------------
def _listener():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


def _start_adopting(tmp_path, fds):
    """sluiced on inherited listening sockets: {door: socket}."""
    binary = Path(os.environ.get("SLUICED", "build/sluiced"))
    if not binary.is_absolute():
        binary = REPO / binary
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    log = tmp_path / "sluiced.stderr"
    cmd = [str(binary), "--bind", "127.0.0.1", "--data-dir", str(data)]
    for door, s in fds.items():
        cmd += ["--listen-fd", "%s=%d" % (door, s.fileno())]
    logf = open(log, "wb")
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                         pass_fds=[s.fileno() for s in fds.values()], cwd=str(REPO))
    logf.close()
    return p, log


def _amqp_start_received(s, timeout=10):
    s.settimeout(timeout)
    s.sendall(b"AMQP\x00\x00\x09\x01")
    data = b""
    while len(data) < 11:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data[:1] == b"\x01" and data[7:11] == b"\x00\x0a\x00\x0a"


@pytest.mark.test_timeout(60)
def test_broker_adopts_the_proxys_listening_sockets(tmp_path):
    """The follower phase's hand-over: the proxy serves on sockets it does not own, stops
    (they stay listening), and sluiced starts on the same sockets. A client that connects
    in between waits in the backlog and is served by the broker: the port never closed."""
    amqp_l, http_l = _listener(), _listener()
    aport, hport = amqp_l.getsockname()[1], http_l.getsockname()[1]
    binary = harness_binary()
    errf = open(tmp_path / "h2.stderr", "wb")
    hp = subprocess.Popen([str(binary), "--amqp-fd", str(amqp_l.fileno()), "--http-fd",
                           str(http_l.fileno())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=errf, pass_fds=[amqp_l.fileno(), http_l.fileno()])
    assert hp.stdout.readline().strip() == b"ready"
    # no leader: the proxy answers on the port
    code = None
    try:
        urllib.request.urlopen("http://127.0.0.1:%d/api/overview" % hport, timeout=5)
    except urllib.error.HTTPError as e:
        code = e.code
    assert code == 503
    hp.stdin.write(b"stop\n")
    hp.stdin.flush()
    assert hp.stdout.readline().strip() == b"stopped listening=2"
    assert hp.wait(timeout=10) == 0, (tmp_path / "h2.stderr").read_text()
    errf.close()
    # between the two: a client connects (the backlog holds it)
    early = socket.create_connection(("127.0.0.1", aport), timeout=5)
    p, log = _start_adopting(tmp_path, {"amqp": amqp_l, "http": http_l})
    try:
        assert _amqp_start_received(early), log.read_text()
        wait_for(lambda: b"listening amqp=127.0.0.1:%d" % aport in log.read_bytes(), 10,
                 message="sluiced did not log the adopted AMQP port")
        assert b"listening http=127.0.0.1:%d" % hport in log.read_bytes()
        c = pika.BlockingConnection(pika.ConnectionParameters(
            host="127.0.0.1", port=aport, connection_attempts=1, socket_timeout=10))
        c.channel().queue_declare("adopted")
        c.close()
        req = urllib.request.Request("http://127.0.0.1:%d/api/overview" % hport)
        req.add_header("Authorization", AUTH)
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read())["product_name"] == "Sluice"
    finally:
        early.close()
        p.terminate()
        assert p.wait(timeout=20) == 0, log.read_text()
        amqp_l.close()
        http_l.close()


def test_broker_refuses_a_descriptor_that_is_not_listening(tmp_path):
    s = socket.socket()
    p, log = _start_adopting(tmp_path, {"amqp": s})
    try:
        assert p.wait(timeout=20) != 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        s.close()
    assert b"is not a listening TCP socket" in log.read_bytes()


# ---------------------------------------------------------------------------
# loopback_users through a proxy: a one-node cluster on etcd as the leader
# ---------------------------------------------------------------------------
@pytest.mark.test_timeout(90)
def test_guest_stays_loopback_only_through_a_followers_proxy(broker_factory, proxy, tmp_path):
    """A client of a follower reaches the leader from the follower's address. On one host the
    nodes' addresses are loopback ones (127.0.0.2-4), so without a rule a remote client of a
    follower would pass guest's loopback-only check. The proxy binds its connections to its
    node's advertised address and the leader counts any cluster member's address as not
    loopback: guest is refused through the proxy (AMQP 403, HTTP 401), still served directly
    from loopback, and a real user is served through the proxy."""
    from cluster_client import cluster_secret
    from etcd import Etcd

    e = Etcd(str(tmp_path / "etcd")).start()
    try:
        conf = {
            "cluster.secret_file": cluster_secret(tmp_path / "cluster.secret"),
            "cluster_formation.peer_discovery_backend": "etcd",
            "cluster_formation.etcd.endpoints.1": e.endpoint,
            "cluster_formation.etcd.cluster_name": "px",
            "cluster.replication_port": "0",
            "cluster.lease_ttl": "3",
            "cluster.min_insync_replicas": "1",
            "user.alice": "secret",
            "user.alice.tags": "administrator",
        }
        b = broker_factory(args=("--node-name", "lead"), config=conf)

        def leading():
            try:
                c = b.pika()
                c.close()
                return True
            except pika.exceptions.AMQPError:
                return False
        wait_for(leading, 30, interval=0.2, message="the single node did not become leader")
        # a follower registered at 127.0.0.3 (the key a member's thread keeps under its lease)
        e.call("/v3/kv/put", {"key": e.b64("/sluice/px/nodes/follower"), "value": e.b64(
            json.dumps({"name": "follower", "amqp": "127.0.0.3:5672",
                        "http": "127.0.0.3:15672", "replication": "127.0.0.3:5679",
                        "last_epoch": 0, "last_idx": 0}))})
        req = urllib.request.Request("http://127.0.0.1:%d/api/cluster" % b.mgmt_port)
        req.add_header("Authorization", AUTH)

        def listed():
            with urllib.request.urlopen(req, timeout=5) as r:
                return any(n["name"] == "follower" for n in json.loads(r.read())["nodes"])
        wait_for(listed, 20, interval=0.2, message="the leader did not list the follower")

        h = proxy(extra=("--source", "127.0.0.3"))
        h.leader(b, name="lead")
        with pytest.raises(pika.exceptions.AMQPConnectionError) as ei:
            pika_via(h)
        assert "403" in str(ei.value) or "ACCESS_REFUSED" in str(ei.value), ei.value
        assert "guest" in b.log_tail(200) and "via localhost" in b.log_tail(200)
        code, _ = http_via(h, "/api/overview")
        assert code == 401
        # directly from loopback, guest is fine; through the proxy, a real user is
        b.pika().close()
        c = pika_via(h, user="alice", password="secret")
        c.channel().queue_declare("through")
        c.close()
        code, _ = http_via(h, "/api/overview", auth="Basic YWxpY2U6c2VjcmV0")  # alice:secret
        assert code == 200
        direct = urllib.request.Request("http://127.0.0.1:%d/api/overview" % b.mgmt_port)
        direct.add_header("Authorization", AUTH)
        with urllib.request.urlopen(direct, timeout=5) as r:
            assert r.status == 200
    finally:
        e.stop()


def test_silent_client_is_released_after_the_leader_gives_up(broker_factory, proxy):
    """Half-open with a leader: a client that connects and says nothing is closed by the
    leader's handshake timeout; the proxy passes the EOF on and, as the client never closes
    its side, releases the connection after the refusal timeout instead of holding it."""
    b = broker_factory(config={"handshake_timeout": "1000"})
    h = proxy(extra=("--refuse-timeout", "1000"))
    h.leader(b)
    silent = [socket.create_connection((h.host, h.ports["amqp"]), timeout=5) for _ in range(5)]
    wait_for(lambda: h.stats()["open"] == 5, 10, message="5 open")
    wait_for(lambda: h.stats()["open"] == 0, 15, message="silent half-open clients still held")
    for s in silent:
        assert closed_by_peer(s, 5)
        s.close()


def test_no_leader_refusal_larger_than_the_buffer_is_cut_at_once(proxy):
    """A start-ok bigger than the connection's buffer: closed as soon as the buffer is full
    (not read-spun until the refusal timeout)."""
    h = proxy(extra=("--buf", "4096", "--refuse-timeout", "20000"))
    s = socket.create_connection((h.host, h.ports["amqp"]), timeout=5)
    s.sendall(b"AMQP\x00\x00\x09\x01")
    s.settimeout(5)
    assert s.recv(1)  # connection.start begins
    t0 = time.monotonic()
    try:
        s.sendall(b"\x01\x00\x00\x00\x00\x27\x10" + b"x" * 6000)  # a 10000-byte frame, cut
    except (ConnectionResetError, BrokenPipeError):
        pass
    assert closed_by_peer(s, 15)
    assert time.monotonic() - t0 < 5


# ---------------------------------------------------------------------------
# A remote client (another network namespace) and a leader on loopback
# ---------------------------------------------------------------------------
@pytest.mark.test_timeout(90)
def test_remote_client_is_not_forwarded_to_look_local(ns_net, tmp_path):
    """In node's namespace: sluiced on 127.0.0.1 (the leader, as when nodes share a host) and a
    proxy on every address. A client in another namespace is remote: forwarded from the
    kernel's loopback source it would look local to the leader (guest would pass), so the proxy
    closes it; with a source of the node's own (its veth address) it is forwarded and guest is
    refused while a real user is served. A local client is forwarded either way."""
    import re
    node = ns_net.add_node("node")
    client = ns_net.add_node("client")
    ns_net.link("node", "client")
    node_addr = ns_net.addr("client", "node")
    binary = Path(os.environ.get("SLUICED", "build/sluiced"))
    if not binary.is_absolute():
        binary = REPO / binary
    (tmp_path / "data").mkdir()
    conf = tmp_path / "sluice.conf"
    conf.write_text("user.alice = secret\n")
    log = tmp_path / "sluiced.stderr"
    logf = open(log, "wb")
    p = node.popen([str(binary), "--port", "0", "--mgmt-port", "off", "--bind", "127.0.0.1",
                    "--data-dir", str(tmp_path / "data"), "--config", str(conf)],
                   stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, cwd=str(REPO))
    logf.close()
    made = []
    try:
        m = wait_for(lambda: re.search(rb"listening amqp=127.0.0.1:(\d+)", log.read_bytes()), 20,
                     message="sluiced in the namespace did not listen")
        lport = int(m.group(1))

        def via(h, ns, user="guest", password="guest"):
            with ns.entered():
                return pika.BlockingConnection(pika.ConnectionParameters(
                    host=node_addr if ns is client else "127.0.0.1", port=h.ports["amqp"],
                    connection_attempts=1, socket_timeout=10,
                    credentials=pika.PlainCredentials(user, password)))

        # 1. no source address: the remote client is closed, the local one forwarded
        h = Harness(tmp_path / "h1", doors=("amqp",), host="0.0.0.0", prefix=node.exec_prefix())
        made.append(h)
        assert h.cmd("leader lead 127.0.0.1:%d - -" % lport) == "ok"
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            via(h, client)
        assert h.stats()["refused"] == 1 and h.stats()["forwarded"] == 0
        assert "refusing remote clients" in h.log()
        via(h, node).close()  # local: guest passes, as on the leader itself
        assert h.stats()["forwarded"] == 1
        h.stop()
        # 2. the node's own address as the source: forwarded, and not local at the leader
        h = Harness(tmp_path / "h2", doors=("amqp",), host="0.0.0.0", prefix=node.exec_prefix(),
                    extra=("--source", node_addr))
        made.append(h)
        assert h.cmd("leader lead 127.0.0.1:%d - -" % lport) == "ok"
        with pytest.raises(pika.exceptions.AMQPConnectionError) as ei:
            via(h, client)
        assert "403" in str(ei.value) or "ACCESS_REFUSED" in str(ei.value), ei.value
        c = via(h, client, user="alice", password="secret")
        c.channel().queue_declare("remote")
        c.close()
        assert h.stats()["forwarded"] == 2
    finally:
        for h in made:
            h.stop()
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
