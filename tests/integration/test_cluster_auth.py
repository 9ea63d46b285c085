"""The replication port proves membership (issue 43, part 1): three nodes on 127.0.0.2-4, one
etcd, and a stranger who can reach the leader's replication port (its address is in etcd's
leader key) but does not hold the cluster secret (cluster.secret_file).

- The impostor: HELLO as each real follower, with the epoch and index etcd publishes for it,
  and an ACK for every DATA and PING while storing nothing. With the real followers stalled
  (SIGSTOP) and min_insync_replicas = 2, the leader must not confirm anything on its word, and
  nothing confirmed is lost after kill -9 of the leader.
- The same impostor beside live followers: the live follower's connection is not displaced.
- The copy thief: HELLO("mallory") + COPYREQ, and AUTH as a member with a made-up proof: no
  byte of a full copy comes back.
Each refusal leaves an "audit: replication peer" line in the leader's log.

The wire format is src/cluster/wire.h's (length:u32, type:u8, body; big-endian)."""

import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from cluster_client import ConfirmedLoad, cluster_secret, drain, etcd  # noqa: F401
from conftest import sluiced_binary
from helpers import IS_RABBITMQ, wait_for
from test_cluster_repl import TTL, cluster, etcd_node, three  # noqa: F401

pytestmark = [pytest.mark.alone, pytest.mark.skipif(IS_RABBITMQ, reason="Sluice's cluster")]

HELLO, START, DATA, PING, ACK, REFUSE, COPYREQ, COPYBEGIN, COPYDATA, COPYEND = range(1, 11)
AUTH, CHALLENGE, PROOF = 11, 12, 13
NAMES = {v: k for k, v in dict(HELLO=1, START=2, DATA=3, PING=4, ACK=5, REFUSE=6, COPYREQ=7,
                                 COPYBEGIN=8, COPYDATA=9, COPYEND=10, AUTH=11, CHALLENGE=12,
                                 PROOF=13).items()}


def s16(s):
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def frame(t, body=b""):
    return struct.pack(">IB", len(body) + 1, t) + body


def hello(node, cluster, last_epoch, last_idx):
    return frame(HELLO, struct.pack(">H", 1) + s16(node) + s16(cluster) +
                 struct.pack(">QQ", last_epoch, last_idx))


def ack(epoch, session, log_end, durable):
    return frame(ACK, struct.pack(">QQQQ", epoch, session, log_end, durable))


def leader_replication(cl):
    v = cl.etcd.get("/sluice/r/leader")
    host, port = json.loads(v)["replication"].rsplit(":", 1)
    return host, int(port)


class Peer:
    """A stranger on the leader's replication port: reads frames on a thread (.types: every
    frame type received, in order; .copy_bytes: the file bytes of a full copy received) and,
    as an impostor, acknowledges every START, DATA and PING as a follower that stored it."""

    def __init__(self, addr, impostor=False):
        self.sock = socket.create_connection(addr, timeout=5)
        self.impostor = impostor
        self.types = []
        self.copy_bytes = 0
        self.acked = 0
        self.closed = threading.Event()
        self.lock = threading.Lock()
        self.last = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def send(self, data):
        with self.lock:
            self.sock.sendall(data)

    def _frames(self):
        buf = b""
        while True:
            try:
                d = self.sock.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                return
            if not d:
                return
            buf += d
            while len(buf) >= 5:
                n = struct.unpack(">I", buf[:4])[0]
                if len(buf) < 4 + n:
                    break
                yield buf[4], buf[5:4 + n]
                buf = buf[4 + n:]

    def _run(self):
        try:
            for t, body in self._frames():
                self.types.append(t)
                if t == COPYDATA:
                    nl = struct.unpack(">H", body[:2])[0]
                    self.copy_bytes += struct.unpack(">I", body[2 + nl + 8:2 + nl + 12])[0]
                if not self.impostor:
                    continue
                if t == START:
                    epoch, session, div_epoch, div_end, he, hi = struct.unpack(">6Q", body)
                    self.last = min(hi, div_end)
                    self.send(ack(epoch, session, self.last, self.last))
                elif t == DATA:
                    epoch, session, idx = struct.unpack(">QQQ", body[:24])
                    self.last = max(self.last, idx)
                    self.send(ack(epoch, session, self.last, self.last))  # stores nothing
                    self.acked += 1
                elif t == PING:
                    epoch, session, _ = struct.unpack(">QQQ", body)
                    self.send(ack(epoch, session, self.last, self.last))
        except OSError:
            pass
        finally:
            self.closed.set()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.thread.join(5)


def leader_log(b):
    return open(b.log_path).read()


def connected_lines(lead, name):
    return leader_log(lead).count("cluster: follower %s connected" % name)


def impersonate(cl, lead, f):
    """An impostor's HELLO as follower f, with f's position as etcd publishes it."""
    pos = etcd_node(cl, f.node_name)
    p = Peer(leader_replication(cl), impostor=True)
    p.send(hello(f.node_name, "r", pos["last_epoch"], pos["last_idx"]))
    return p


@pytest.mark.test_timeout(240)
def test_an_impostor_acking_for_stalled_followers_confirms_nothing(cluster):
    cl, lead = three(cluster)
    followers = [b for b in cl.alive() if b is not lead]
    publish = ConfirmedLoad(lead, "q", warm=1, limit=3).start()  # the queue, and some groups
    publish.join(30)
    assert not publish.errors and len(publish.confirmed) == 3
    stopped, peers = [], []
    try:
        for f in followers:
            os.kill(f.proc.pid, signal.SIGSTOP)
            stopped.append(f)
        peers = [impersonate(cl, lead, f) for f in followers]
        load = ConfirmedLoad(lead, "q", body=lambda i: b"x%d" % i, warm=50, limit=50).start()
        # Before issue 43 the leader took the impostors' ACKs for the followers' and confirmed
        # all 50 in a fraction of a second. Now both impostors are refused (an audit line
        # each) and nothing is confirmed while the real followers are stalled.
        load.started.wait(3)
        confirmed = list(load.confirmed)
        assert confirmed == [], "the leader confirmed %d messages on an impostor's ACKs" % (
            len(confirmed))
        wait_for(lambda: leader_log(lead).count("audit: replication peer") >= 2, timeout=10,
                 message="an audit line for each impostor")
        assert all(p.acked == 0 for p in peers)
        assert all(REFUSE in p.types for p in peers)
        lead.kill9()
    finally:
        for p in peers:
            p.close()
        for f in stopped:
            os.kill(f.proc.pid, signal.SIGCONT)
    load.stop(timeout=30)
    confirmed = list(load.confirmed)
    new = cl.wait_leader()
    assert new is not lead
    bodies = [m[0] for m in drain(new, "q")]
    lost = [b for b in confirmed if b not in bodies]
    assert not lost, "%d confirmed messages lost" % len(lost)
    assert bodies[:3] == publish.confirmed


@pytest.mark.test_timeout(240)
def test_an_impostor_does_not_displace_a_live_follower(cluster):
    cl, lead = three(cluster)
    f = next(b for b in cl.alive() if b is not lead)
    before = connected_lines(lead, f.node_name)
    audits = leader_log(lead).count("audit: replication peer")
    p = impersonate(cl, lead, f)
    try:
        wait_for(lambda: p.closed.is_set() or connected_lines(lead, f.node_name) > before,
                 timeout=10, message="the leader answers the impostor")
        # the impostor's HELLO was refused: no new connection of f, and f never reconnected
        assert connected_lines(lead, f.node_name) == before, "the impostor took %s's place" % (
            f.node_name)
        assert REFUSE in p.types and START not in p.types
        assert leader_log(lead).count("audit: replication peer") > audits
        assert "HELLO before it proved the cluster secret" in leader_log(lead)
    finally:
        p.close()
    # the live follower still follows on its first connection: a confirmed publish needs it
    publish = ConfirmedLoad(lead, "q", warm=20, limit=20).start()
    publish.join(30)
    assert not publish.errors and len(publish.confirmed) == 20
    assert connected_lines(lead, f.node_name) == before
    assert "nothing heard from the leader" not in open(f.log_path).read()


@pytest.mark.test_timeout(240)
def test_a_copy_thief_gets_nothing(cluster):
    cl, lead = three(cluster)
    ConfirmedLoad(lead, "q", body=lambda i: b"secret-body-%d" % i, warm=10, limit=10).start().join(
        30)
    addr = leader_replication(cl)
    # a stranger's name
    p = Peer(addr)
    p.send(hello("mallory", "r", 0, 0) + frame(COPYREQ))
    wait_for(lambda: p.closed.is_set() or COPYEND in p.types, timeout=20,
             message="the leader's answer to mallory")
    p.close()
    assert COPYBEGIN not in p.types and COPYDATA not in p.types and p.copy_bytes == 0, (
        "mallory got a full copy: %s, %d bytes" % ([NAMES.get(t) for t in p.types],
                                                    p.copy_bytes))
    # a stranger's AUTH, as mallory: not a member
    p = Peer(addr)
    p.send(frame(AUTH, s16("mallory") + s16("r") + os.urandom(32)))
    assert p.closed.wait(10)
    p.close()
    assert p.types == [REFUSE]
    # a member's name, with a made-up proof: refused before any HELLO or COPYREQ counts
    f = next(b for b in cl.alive() if b is not lead)
    p = Peer(addr)
    p.send(frame(AUTH, s16(f.node_name) + s16("r") + os.urandom(32)))
    wait_for(lambda: CHALLENGE in p.types or p.closed.is_set(), timeout=10,
             message="the leader's CHALLENGE")
    p.send(frame(PROOF, os.urandom(32)) + hello(f.node_name, "r", 0, 0) + frame(COPYREQ))
    assert p.closed.wait(10)
    p.close()
    assert p.types == [CHALLENGE, REFUSE] and p.copy_bytes == 0
    log = leader_log(lead)
    assert "audit: replication peer" in log and "(claimed node 'mallory')" in log
    assert "it did not prove the cluster secret" in log
    assert "a full copy for mallory" not in log


def run_sluiced_conf(tmp_path, text):
    conf = tmp_path / "c.conf"
    conf.write_text(text)
    return subprocess.run([str(sluiced_binary()), "--config", str(conf), "--port", "0",
                           "--data-dir", str(tmp_path / "d")], capture_output=True, timeout=30)


def test_a_cluster_needs_a_secret_only_its_user_can_read(tmp_path):
    base = "cluster_formation.peer_discovery_backend = etcd\n" \
           "cluster_formation.etcd.endpoints.1 = 127.0.0.1:1\n"
    r = run_sluiced_conf(tmp_path, base)
    assert r.returncode == 2 and b"needs cluster.secret_file" in r.stderr, r.stderr
    secret = cluster_secret(tmp_path / "s")
    os.chmod(secret, 0o640)
    r = run_sluiced_conf(tmp_path, base + "cluster.secret_file = %s\n" % secret)
    assert r.returncode == 2 and secret.encode() in r.stderr and b"mode 0640" in r.stderr, r.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    os.chmod(empty, 0o600)
    r = run_sluiced_conf(tmp_path, base + "cluster.secret_file = %s\n" % empty)
    assert r.returncode == 2 and b"empty" in r.stderr, r.stderr
    r = run_sluiced_conf(tmp_path, base + "cluster.secret_file = %s\n" % (tmp_path / "none"))
    assert r.returncode == 2 and b"No such file" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------
# etcd's own doors: TLS (a CA, a client certificate etcd requires) and user/password, as
# RabbitMQ's etcd peer discovery configures them (cluster_formation.etcd.username, .password,
# .ssl_options.cacertfile/certfile/keyfile/verify)
# ---------------------------------------------------------------------------------------------

def make_certs(d, server_ips=("127.0.0.1",)):
    """A CA, a server certificate (for server_ips; it serves as a client one too) and a client
    certificate without a CN, EC keys."""
    d.mkdir(parents=True, exist_ok=True)

    def ossl(*args):
        subprocess.run(["openssl"] + list(args), cwd=str(d), check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ossl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj",
         "/CN=sluice-test-ca")
    san = ",".join("IP:" + ip for ip in server_ips)
    for name, cn, ext in (("server", server_ips[0],
                           "subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n" % san),
                          # no CN: etcd's gateway refuses a client certificate with one
                          # ("CommonName of client ... will be ignored") once auth is on
                          ("client", None, "extendedKeyUsage=clientAuth\n")):
        (d / (name + ".ext")).write_text(ext)
        ossl("req", *ec, "-keyout", name + ".key", "-out", name + ".csr", "-subj",
             "/CN=" + cn if cn else "/O=sluice-nodes")
        ossl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext")
    for f in d.iterdir():
        os.chmod(str(f), 0o600)
    return d


class SecureEtcd:
    """One etcd member serving clients over TLS only, with client certificates required."""

    def __init__(self, base, certs):
        import ssl
        from etcd import _free_port

        self.base, self.certs = base, certs
        self.port, peer = _free_port("127.0.0.1"), _free_port("127.0.0.1")
        url = "https://127.0.0.1:%d" % self.port
        purl = "http://127.0.0.1:%d" % peer
        base.mkdir(parents=True, exist_ok=True)
        log = open(str(base / "etcd.log"), "ab")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "s", "--data-dir", str(base / "data"),
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", "s=" + purl,
             "--cert-file", str(certs / "server.pem"), "--key-file", str(certs / "server.key"),
             "--client-cert-auth", "--trusted-ca-file", str(certs / "ca.pem")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        self.ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        self.ctx.load_cert_chain(str(certs / "client.pem"), str(certs / "client.key"))
        wait_for(lambda: self._up(), timeout=20, message="etcd over TLS")

    @property
    def endpoint(self):
        return "127.0.0.1:%d" % self.port

    def _up(self):
        try:
            self.call("/v3/kv/range", {"key": "Lw=="})
            return True
        except OSError:
            return self.proc.poll() is not None  # exited: the assertion below says so

    def call(self, path, body):
        import urllib.request

        req = urllib.request.Request("https://%s%s" % (self.endpoint, path),
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5, context=self.ctx) as r:
            return json.loads(r.read())

    def enable_auth(self, user, password, prefix):
        """root (for etcd's rule), and user with read-write on prefix only; then auth on."""
        import base64

        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        self.call("/v3/auth/user/add", {"name": "root", "password": "root-" + password})
        self.call("/v3/auth/user/grant", {"user": "root", "role": "root"})
        self.call("/v3/auth/role/add", {"name": "sluice-nodes"})
        self.call("/v3/auth/role/grant", {"name": "sluice-nodes", "perm": {
            "permType": "READWRITE", "key": b64(prefix), "range_end": b64(end)}})
        self.call("/v3/auth/user/add", {"name": user, "password": password})
        self.call("/v3/auth/user/grant", {"user": user, "role": "sluice-nodes"})
        self.call("/v3/auth/enable", {})

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.mark.test_timeout(120)
def test_etcd_with_tls_and_a_user_password(tmp_path, broker_factory):
    from cluster_client import cluster_status, publish_confirmed_to

    certs = make_certs(tmp_path / "certs")
    e = SecureEtcd(tmp_path / "etcd", certs)
    try:
        assert e.proc.poll() is None, open(str(tmp_path / "etcd" / "etcd.log")).read()[-2000:]
        e.enable_auth("sluice", "etcd-pw-1", "/sluice/")
        # without a token etcd refuses (what a node without the keys would meet)
        with pytest.raises(Exception):
            e.call("/v3/kv/put", {"key": "L3NsdWljZS94", "value": "eA=="})
        base = {
            "cluster_formation.peer_discovery_backend": "etcd",
            "cluster_formation.etcd.endpoints.1": e.endpoint,
            "cluster_formation.etcd.cluster_name": "a",
            "cluster_formation.etcd.username": "sluice",
            "cluster_formation.etcd.ssl_options.cacertfile": str(certs / "ca.pem"),
            "cluster_formation.etcd.ssl_options.certfile": str(certs / "client.pem"),
            "cluster_formation.etcd.ssl_options.keyfile": str(certs / "client.key"),
            "cluster_formation.etcd.ssl_options.verify": "verify_peer",
            "cluster.replication_port": "0",
            "cluster.lease_ttl": "3",
            "cluster.min_insync_replicas": "1",
            "cluster.secret_file": cluster_secret(tmp_path / "cluster.secret"),
        }
        # a wrong password: the node never leads, and says why
        bad = broker_factory(args=("--node-name", "sluice@bad"),
                             config=dict(base, **{"cluster_formation.etcd.password": "nope"}))
        wait_for(lambda: "authenticating as sluice" in cluster_status(bad).get("etcd_error", ""),
                 timeout=20, message="the etcd authentication error in /api/cluster")
        assert "cluster: leader of" not in open(bad.log_path).read()
        bad.kill9()
        # the right one: it leads, over TLS with a token, and confirms
        good = broker_factory(args=("--node-name", "sluice@good"),
                              config=dict(base, **{"cluster_formation.etcd.password": "etcd-pw-1"}))
        wait_for(lambda: "cluster: leader of a, epoch" in open(good.log_path).read(), timeout=30,
                 message="the node leads through an authenticated etcd")
        wait_for(lambda: cluster_status(good)["leader"] == "sluice@good", timeout=20,
                 message="its /api/cluster names it leader")
        publish_confirmed_to(good, "q", [b"one", b"two"])
    finally:
        e.stop()


# ---------------------------------------------------------------------------------------------
# Mutual TLS on the replication port (cluster.ssl_options.*)
# ---------------------------------------------------------------------------------------------

@pytest.mark.test_timeout(240)
def test_mutual_tls_on_the_replication_port(cluster, tmp_path):
    certs = make_certs(tmp_path / "repl-certs", ("127.0.0.2", "127.0.0.3", "127.0.0.4"))
    tls = {"cluster.ssl_options.cacertfile": str(certs / "ca.pem"),
           "cluster.ssl_options.certfile": str(certs / "server.pem"),
           "cluster.ssl_options.keyfile": str(certs / "server.key"),
           "cluster.ssl_options.verify": "verify_peer"}
    cl, lead = three(cluster, **tls)
    ConfirmedLoad(lead, "q", warm=20, limit=20).start().join(30)
    log = leader_log(lead)
    assert log.count(", TLS, authenticated (its log") >= 2
    audits = log.count("audit: replication")
    # a peer speaking plain TCP (or TLS without a certificate) gets no frame of ours
    p = Peer(leader_replication(cl))
    p.send(hello("mallory", "r", 0, 0) + frame(COPYREQ))
    wait_for(lambda: p.closed.is_set() or leader_log(lead).count("audit: replication") > audits,
             timeout=10, message="the leader refuses a peer without TLS")
    p.close()
    assert p.types == [] and p.copy_bytes == 0
    import ssl

    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    ctx.check_hostname = False
    raw = socket.create_connection(leader_replication(cl), timeout=5)
    with pytest.raises((ssl.SSLError, OSError)):
        t = ctx.wrap_socket(raw)  # no client certificate: refused in (or right after) the handshake
        t.sendall(hello("mallory", "r", 0, 0))
        assert t.recv(100) == b""
        raise OSError("closed")
    raw.close()
    wait_for(lambda: "TLS handshake failed" in leader_log(lead), timeout=10,
             message="an audit line for the handshake refused")
    # the followers still follow (a confirmed publish needs one of them)
    ConfirmedLoad(lead, "q", warm=10, limit=10).start().join(30)


@pytest.mark.test_timeout(240)
def test_idle_strangers_do_not_lock_members_out(cluster):
    """The leader holds 32 replication connections. Strangers that connect and say nothing
    must not keep a member out: a connection that has not said HELLO is dropped after a few
    seconds, and when every slot is taken the oldest such one makes room."""
    cl, lead = three(cluster)
    addr = leader_replication(cl)
    idle = [socket.create_connection(addr, timeout=5) for _ in range(40)]
    try:
        f = next(b for b in cl.alive() if b is not lead)
        p = Peer(addr)
        p.send(frame(AUTH, s16(f.node_name) + s16("r") + os.urandom(32)))
        wait_for(lambda: CHALLENGE in p.types or p.closed.is_set(), timeout=10,
                 message="an answer to a member's AUTH")
        p.close()
        assert p.types == [CHALLENGE], "a member's AUTH was not answered: %s" % p.types
        wait_for(lambda: "every connection slot taken" in leader_log(lead) and "no HELLO within" in
                 leader_log(lead), timeout=20, message="the idle strangers dropped")
    finally:
        for s in idle:
            s.close()
