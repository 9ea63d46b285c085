"""AMQPS (listeners.ssl.default, ssl_options.*) and EXTERNAL login, with certificates this
module makes with the openssl command: a CA, a server certificate for 127.0.0.1 /
localhost, client certificates, an expired one, and a second CA the broker does not know.

Clients: pika and py-amqp over TLS, and raw sockets (plain AMQP sent to the TLS port, a
stalled handshake, half a ClientHello). Every refusal must be clean (the client sees the
connection end), logged once, and leave the port serving.
"""

import re
import socket
import ssl
import subprocess
import threading
import time

import amqp
import pika
import pytest

import amqpraw
from helpers import uname, wait_for
from test_mgmt import Api

pytestmark = pytest.mark.sluice_only("TLS listeners of a private broker with test certificates")

AMQPS_RE = re.compile(rb"listening amqps=([0-9.]+):(\d+)")


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d, name, cn):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", name + ".key", "-out", name + ".pem", "-days", "30", "-subj", "/CN=" + cn,
            cwd=d)


def make_cert(d, name, ca, subj, days="30", san=None):
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", name + ".key", "-out", name + ".csr", "-subj", subj, cwd=d)
    ext = []
    if san:
        (d / (name + ".ext")).write_text("subjectAltName=%s\n" % san)
        ext = ["-extfile", name + ".ext"]
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".pem", "-days", days, *ext, cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    make_ca(d, "ca", "Sluice Test CA")
    make_ca(d, "otherca", "Unknown CA")
    make_cert(d, "server", "ca", "/CN=localhost", san="IP:127.0.0.1,DNS:localhost")
    make_cert(d, "client", "ca", "/CN=tlsuser/O=Sluice Tests")
    make_cert(d, "expired", "ca", "/CN=tlsuser/O=Sluice Tests", days="-1")
    make_cert(d, "stranger", "otherca", "/CN=tlsuser/O=Sluice Tests")
    return d


def tls_config(certs, **extra):
    cfg = {
        "listeners.ssl.default": "0",
        "ssl_options.cacertfile": str(certs / "ca.pem"),
        "ssl_options.certfile": str(certs / "server.pem"),
        "ssl_options.keyfile": str(certs / "server.key"),
        "ssl_options.verify": "verify_peer",
        "ssl_options.fail_if_no_peer_cert": "false",
        "auth_mechanisms.1": "PLAIN",
        "auth_mechanisms.2": "AMQPLAIN",
        "auth_mechanisms.3": "EXTERNAL",
    }
    cfg.update(extra)
    return cfg


def amqps_port(b):
    m = AMQPS_RE.search(open(b.log_path, "rb").read())
    assert m, "no 'listening amqps=' line"
    return int(m.group(2))


def client_ctx(certs, cert=None, **kw):
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    ctx.check_hostname = True
    if cert:
        ctx.load_cert_chain(str(certs / (cert + ".pem")), str(certs / (cert + ".key")))
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


def pyamqp_ssl(certs, cert=None):
    """py-amqp's ssl options (it takes a dict of wrap_socket arguments, not a context)."""
    o = {"ca_certs": str(certs / "ca.pem"), "cert_reqs": ssl.CERT_REQUIRED,
         "server_hostname": "localhost"}
    if cert:
        o.update(certfile=str(certs / (cert + ".pem")), keyfile=str(certs / (cert + ".key")))
    return o


def amqps(b, certs, cert=None, login_method="PLAIN", user="guest", password="guest", **kw):
    c = amqp.Connection(host="127.0.0.1:%d" % amqps_port(b), userid=user, password=password,
                        ssl=pyamqp_ssl(certs, cert), login_method=login_method,
                        connect_timeout=5, read_timeout=5, write_timeout=5, **kw)
    b._clients.append(c)
    c.connect()
    return c


def log_count(b, text):
    return open(b.log_path, "rb").read().decode("utf-8", "replace").count(text)


@pytest.fixture
def tls_broker(broker_factory, certs):
    return broker_factory(config=tls_config(certs))


def roundtrip(ch, body=b"over tls"):
    q = uname("tls")
    ch.queue_declare(q, durable=False, auto_delete=False)
    ch.basic_publish(amqp.Message(body), exchange="", routing_key=q)
    msg = None
    deadline = time.monotonic() + 5
    while msg is None and time.monotonic() < deadline:
        msg = ch.basic_get(q, no_ack=True)
    assert msg is not None and msg.body == body
    ch.queue_delete(q)


def test_pika_over_tls(tls_broker, certs):
    b = tls_broker
    params = pika.ConnectionParameters(
        host="127.0.0.1", port=amqps_port(b), credentials=pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(client_ctx(certs), server_hostname="localhost"),
        connection_attempts=1, socket_timeout=5)
    c = pika.BlockingConnection(params)
    try:
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        for i in range(200):  # many records, both ways
            ch.basic_publish("", q, b"%d" % i + b"x" * 3000)
        got = [ch.basic_get(q, auto_ack=True)[2] for _ in range(200)]
        assert got == [b"%d" % i + b"x" * 3000 for i in range(200)]
        big = bytes(range(256)) * 4096  # 1 MiB: 64 TLS records
        ch.basic_publish("", q, big)
        assert ch.basic_get(q, auto_ack=True)[2] == big
    finally:
        c.close()
    b.assert_alive()  # the plain listener works beside it


def raw_tls(b, certs, ctx):
    """A raw AMQP connection over a TLS socket made with ctx: handshake, AMQP header."""
    r = amqpraw.RawConnection("127.0.0.1", amqps_port(b))
    r.sock = ctx.wrap_socket(r.sock, server_hostname="localhost")
    return r


def test_tls_versions_over_a_raw_socket(tls_broker, certs):
    b = tls_broker
    for v, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
        r = raw_tls(b, certs, client_ctx(certs, minimum_version=v, maximum_version=v))
        assert r.sock.version() == name
        r.handshake()
        r.open_channel(1)
        q = uname("raw")
        r.send_method(1, "queue.declare", queue=q, durable=False, exclusive=False,
                      auto_delete=True, passive=False, nowait=False, arguments={})
        r.expect("queue.declare-ok", channel=1)
        s, conns, _ = Api(b).get("/api/connections")
        assert name in [x.get("ssl_protocol") for x in conns if x["ssl"]]
        r.close()
    # TLS 1.1 and below are not offered by default: refused in the handshake
    ctx = client_ctx(certs, maximum_version=ssl.TLSVersion.TLSv1_1)
    ctx.set_ciphers("DEFAULT@SECLEVEL=0")
    raw = socket.create_connection(("127.0.0.1", amqps_port(b)), timeout=5)
    with pytest.raises((ssl.SSLError, ConnectionResetError, OSError)):
        ctx.wrap_socket(raw, server_hostname="localhost")
    raw.close()
    wait_for(lambda: log_count(b, "TLS handshake failed") == 1)
    b.assert_alive()


def test_pyamqp_over_tls(tls_broker, certs):
    c = amqps(tls_broker, certs)
    roundtrip(c.channel())
    c.close()


def test_external_login_with_common_name(broker_factory, certs):
    b = broker_factory(config=tls_config(certs, ssl_cert_login_from="common_name"))
    api = Api(b)
    # a user without a password: only its certificate logs it in
    assert api.put("/api/users/tlsuser", {"tags": ""})[0] == 201
    assert api.put("/api/permissions/%2F/tlsuser",
                   {"configure": ".*", "write": ".*", "read": ".*"})[0] == 201
    c = amqps(b, certs, cert="client", login_method="EXTERNAL", user="", password="")
    roundtrip(c.channel())
    wait_for(lambda: any(x["user"] == "tlsuser" for x in api.get("/api/connections")[1]))
    conn = [x for x in api.get("/api/connections")[1] if x["user"] == "tlsuser"][0]
    assert conn["ssl"] is True and conn["auth_mechanism"] == "EXTERNAL"
    assert conn["peer_cert_subject"] == "O=Sluice Tests,CN=tlsuser"
    # the listener it came through, as RabbitMQ's connection "port" (not the plain one)
    assert conn["port"] == amqps_port(b) and conn["port"] != b.port
    assert conn["name"].endswith(":%d" % amqps_port(b))
    c.close()
    # the user has no password: PLAIN with any password fails
    with pytest.raises(amqp.exceptions.AccessRefused):
        amqps(b, certs, cert="client", user="tlsuser", password="")


def test_external_login_with_distinguished_name(broker_factory, certs):
    b = broker_factory(config=tls_config(certs))  # RabbitMQ's default: the whole DN
    api = Api(b)
    dn = "O=Sluice Tests,CN=tlsuser"
    assert dn == "O=Sluice Tests,CN=tlsuser"
    assert api.put("/api/users/O%3DSluice%20Tests%2CCN%3Dtlsuser", {"tags": ""})[0] == 201
    assert api.put("/api/permissions/%2F/O%3DSluice%20Tests%2CCN%3Dtlsuser",
                   {"configure": ".*", "write": ".*", "read": ".*"})[0] == 201
    c = amqps(b, certs, cert="client", login_method="EXTERNAL", user="", password="")
    roundtrip(c.channel())
    c.close()


def test_external_needs_a_verified_certificate(tls_broker, certs):
    """EXTERNAL is offered only to a client that showed a certificate which verified."""
    b = tls_broker
    r = raw_tls(b, certs, client_ctx(certs))
    r.send(amqpraw.PROTOCOL_HEADER)
    start = r.expect("connection.start")
    mechs = start.args["mechanisms"]
    mechs = mechs.decode() if isinstance(mechs, bytes) else mechs
    assert mechs.split() == ["PLAIN", "AMQPLAIN"]
    r.send_method(0, "connection.start-ok", client_properties={}, mechanism="EXTERNAL",
                  response=b"", locale="en_US")
    res = r.wait_close()
    assert res.reply_code == 503 and "EXTERNAL" in res.reply_text, res
    r.close()
    r = raw_tls(b, certs, client_ctx(certs, "client"))
    r.send(amqpraw.PROTOCOL_HEADER)
    start = r.expect("connection.start")
    mechs = start.args["mechanisms"]
    mechs = mechs.decode() if isinstance(mechs, bytes) else mechs
    assert mechs.split() == ["PLAIN", "AMQPLAIN", "EXTERNAL"]
    r.close()
    # a certificate for a user that does not exist: refused at login, not at the handshake
    with pytest.raises(amqp.exceptions.AccessRefused):
        amqps(b, certs, cert="client", login_method="EXTERNAL", user="", password="")


@pytest.mark.parametrize("cert", ["stranger", "expired"])
def test_refused_client_certificates(tls_broker, certs, cert):
    b = tls_broker
    before = log_count(b, "TLS handshake failed")
    with pytest.raises((ssl.SSLError, ConnectionResetError, OSError, amqp.exceptions.AMQPError)):
        amqps(b, certs, cert=cert)
    wait_for(lambda: log_count(b, "TLS handshake failed") == before + 1)
    text = open(b.log_path, "rb").read().decode()
    reason = {"stranger": "(certificate: unable to get local issuer certificate)",
              "expired": "(certificate: certificate has expired)"}[cert]
    assert reason in text, text
    time.sleep(0.2)
    assert log_count(b, "TLS handshake failed") == before + 1, "logged more than once"
    # the port still serves
    roundtrip(amqps(b, certs, cert="client").channel())


def test_fail_if_no_peer_cert(broker_factory, certs):
    b = broker_factory(config=tls_config(certs, **{"ssl_options.fail_if_no_peer_cert": "true"}))
    with pytest.raises((ssl.SSLError, ConnectionResetError, OSError, amqp.exceptions.AMQPError)):
        amqps(b, certs)  # no client certificate
    wait_for(lambda: log_count(b, "TLS handshake failed") == 1)
    roundtrip(amqps(b, certs, cert="client").channel())


def test_plain_amqp_to_the_tls_port(tls_broker, certs):
    b = tls_broker
    s = socket.create_connection(("127.0.0.1", amqps_port(b)), timeout=5)
    s.sendall(amqpraw.PROTOCOL_HEADER)
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    assert not data.startswith(b"AMQP"), "the TLS port answered in plain AMQP"
    wait_for(lambda: log_count(b, "TLS handshake failed") == 1)
    assert "TLS handshake failed: TLS handshake: error:0A00010B:SSL routines::wrong version " \
        "number" in open(b.log_path, "rb").read().decode()
    roundtrip(amqps(b, certs).channel())


def test_handshakes_do_not_block_the_loop(broker_factory, certs):
    """Stalled and half-sent handshakes hold up no one: with 50 of them waiting (and a
    handshake timeout far beyond the clients' own 5 s timeouts), a full TLS login and round
    trip, and the plain port, go on. A loop that waited on a handshake would make both time
    out."""
    b = broker_factory(config=tls_config(certs, ssl_handshake_timeout="60000",
                                         handshake_timeout="60000"))
    port = amqps_port(b)
    stalled = []
    for i in range(50):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if i % 2:
            # the first bytes of a ClientHello: a TLS record header announcing 512 bytes
            s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        stalled.append(s)
    for _ in range(3):
        roundtrip(amqps(b, certs, cert="client").channel())
        b.assert_alive()
    assert log_count(b, "handshake timeout") == 0
    for s in stalled:
        s.close()


def test_stalled_handshakes_are_closed_at_the_timeout(broker_factory, certs):
    b = broker_factory(config=tls_config(certs, ssl_handshake_timeout="300"))
    stalled = [socket.create_connection(("127.0.0.1", amqps_port(b)), timeout=5)
               for _ in range(3)]
    for s in stalled:
        assert s.recv(100) == b""  # closed by the broker, nothing said
        s.close()
    wait_for(lambda: log_count(b, "handshake timeout") == 3)
    roundtrip(amqps(b, certs).channel())


def test_many_concurrent_tls_clients(tls_broker, certs):
    b = tls_broker
    errors = []

    def worker(i):
        try:
            c = amqp.Connection(host="127.0.0.1:%d" % amqps_port(b), userid="guest",
                                password="guest", ssl=pyamqp_ssl(certs, "client"),
                                connect_timeout=10, read_timeout=10, login_method="PLAIN")
            c.connect()
            roundtrip(c.channel(), body=b"w%d" % i)
            c.close()
        except Exception as e:  # collected, reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert errors == []


def test_bad_tls_configuration_stops_the_start(broker_factory, certs, tmp_path):
    bad = tmp_path / "nokey.pem"
    bad.write_text("not a key\n")
    from conftest import sluiced_binary
    conf = tmp_path / "s.conf"
    conf.write_text("".join("%s = %s\n" % kv for kv in tls_config(
        certs, **{"ssl_options.keyfile": str(bad)}).items()))
    p = subprocess.run([str(sluiced_binary()), "--port", "0", "--mgmt-port", "off", "--data-dir",
                        str(tmp_path / "d"), "--config", str(conf)], capture_output=True,
                       timeout=20)
    assert p.returncode != 0
    assert b"nokey.pem" in p.stderr, p.stderr


# ---------------------------------------------------------------------------
# HTTPS for the management API (management.ssl.*, libmicrohttpd's own TLS)
# ---------------------------------------------------------------------------
HTTPS_RE = re.compile(rb"listening https=([0-9.]+):(\d+)")


def https_config(certs, **extra):
    cfg = tls_config(certs)
    cfg.update({
        "management.ssl.port": "0",
        "management.ssl.certfile": str(certs / "server.pem"),
        "management.ssl.keyfile": str(certs / "server.key"),
    })
    cfg.update(extra)
    return cfg


def https_get(b, certs, path, cert=None, user="guest", password="guest"):
    import base64
    import http.client
    import json
    port = int(HTTPS_RE.search(open(b.log_path, "rb").read()).group(2))
    c = http.client.HTTPSConnection("localhost", port, timeout=10,
                                    context=client_ctx(certs, cert))
    tok = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    c.request("GET", path, headers={"Authorization": "Basic " + tok})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, json.loads(body) if body else None


def test_https_management_api(broker_factory, certs):
    b = broker_factory(config=https_config(certs))
    s, o = https_get(b, certs, "/api/overview")
    assert s == 200 and o["product_name"] == "Sluice"
    protos = {l["protocol"] for l in o["listeners"]}
    assert protos == {"amqp", "http", "amqp/ssl", "https"}
    s, _ = https_get(b, certs, "/api/overview", password="wrong")
    assert s == 401
    # the plain HTTP listener goes on beside it
    s, _, _ = Api(b).get("/api/overview")
    assert s == 200
    # plain HTTP to the HTTPS port: no answer in clear, and the port still serves
    port = int(HTTPS_RE.search(open(b.log_path, "rb").read()).group(2))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    raw.sendall(b"GET /api/overview HTTP/1.0\r\n\r\n")
    try:
        data = raw.recv(100)
    except (ConnectionResetError, socket.timeout):
        data = b""
    raw.close()
    assert not data.startswith(b"HTTP/")
    assert https_get(b, certs, "/api/whoami")[0] == 200


def test_https_client_certificates(broker_factory, certs):
    b = broker_factory(config=https_config(certs, **{
        "management.ssl.cacertfile": str(certs / "ca.pem"),
        "management.ssl.verify": "verify_peer",
        "management.ssl.fail_if_no_peer_cert": "true"}))
    assert https_get(b, certs, "/api/overview", cert="client")[0] == 200
    s, j = https_get(b, certs, "/api/overview")  # no certificate
    assert s == 403 and "client certificate" in j["reason"], (s, j)
    try:
        s, j = https_get(b, certs, "/api/overview", cert="stranger")
        assert s == 403, (s, j)
    except (ssl.SSLError, ConnectionResetError):
        pass  # refused in the handshake: as good
    assert https_get(b, certs, "/api/overview", cert="client")[0] == 200


# ---------------------------------------------------------------------------
# Node-to-node links over TLS (link_ssl = true, link_ssl_options.*)
# ---------------------------------------------------------------------------
def tls_receiver(nodes, certs, name, cert_addr=None, **extra):
    """A node with an AMQPS listener whose certificate names its own loopback address (or
    cert_addr)."""
    import multinode
    addr = multinode._alloc_addr()
    cert_addr = cert_addr or addr
    cert = "node-" + cert_addr.replace(".", "-")
    make_cert(certs, cert, "ca", "/CN=" + cert_addr, san="IP:" + cert_addr)
    cfg = {
        "listeners.ssl.default": "0",
        "ssl_options.cacertfile": str(certs / "ca.pem"),
        "ssl_options.certfile": str(certs / (cert + ".pem")),
        "ssl_options.keyfile": str(certs / (cert + ".key")),
    }
    cfg.update(extra)
    n = nodes.start(name, config=cfg, addr=addr)
    n.tls_port = amqps_port(n.broker)
    return n


def tls_fmt(node, queue):
    return "DIRECT=TCP:%s:%d\\private$\\%s" % (node.addr, node.tls_port, queue)


def link_publish(node, fmt, payloads):
    ch = node.amqp().channel()
    ch.confirm_select()
    for p in payloads:
        ch.basic_publish(amqp.Message(p, delivery_mode=2), exchange="", routing_key=fmt)


def test_link_over_tls_delivers(nodes, certs):
    from multinode import drain
    b = tls_receiver(nodes, certs, "b")
    a = nodes.start("a", config={"link_ssl": "true",
                                 "link_ssl_options.cacertfile": str(certs / "ca.pem")})
    bch = b.amqp().channel()
    bch.queue_declare("secure", durable=True, auto_delete=False)
    fmt = tls_fmt(b, "secure")
    sent = [("s%d" % i).encode() * (1 + i * 97 % 5000) for i in range(300)]  # up to 20 KB
    link_publish(a, fmt, sent)
    a.wait_drained(fmt)
    assert drain(bch, "secure") == sent
    o = a.outgoing_queue(fmt)
    assert o["state"] == "CONNECTED" and o["last_error"] == "", o
    # B sees the link as a TLS connection
    s, conns, _ = b.api.get("/api/connections")
    assert s == 200 and any(c.get("ssl") for c in conns), conns
    # the link survives the receiver's restart (new handshake)
    b.stop()
    b.restart()
    b.tls_port = amqps_port(b.broker)
    fmt2 = tls_fmt(b, "secure")
    link_publish(a, fmt2, [b"after restart"])
    a.wait_drained(fmt2)
    assert drain(b.amqp().channel(), "secure") == [b"after restart"]


@pytest.mark.parametrize("case", ["unknown_ca", "wrong_address", "plain_port"])
def test_link_over_tls_refuses_what_does_not_verify(nodes, certs, case):
    # wrong_address: B's certificate names another address than the one the link dials
    b = tls_receiver(nodes, certs, "b",
                     cert_addr="127.0.0.251" if case == "wrong_address" else None)
    ca = "otherca" if case == "unknown_ca" else "ca"
    a = nodes.start("a", config={"link_ssl": "true",
                                 "link_ssl_options.cacertfile": str(certs / (ca + ".pem"))})
    b.amqp().channel().queue_declare("q", durable=True, auto_delete=False)
    if case == "plain_port":
        fmt = b.fmt("q")  # the AMQP port: the destination speaks no TLS
    else:
        fmt = tls_fmt(b, "q")
    link_publish(a, fmt, [b"kept"])
    expect = {"unknown_ca": "certificate", "wrong_address": "certificate",
              "plain_port": "TLS"}[case]
    wait_for(lambda: expect in (a.outgoing_queue(fmt) or {}).get("last_error", ""), timeout=10,
             message="no TLS failure reported: %r" % a.outgoing_queue(fmt))
    o = a.outgoing_queue(fmt)
    assert o["messages"] == 1 and o["state"] != "CONNECTED", o
    assert b.amqp().channel().queue_declare("q", passive=True).message_count == 0
    b.broker.assert_alive()


def test_link_over_tls_verify_none_skips_the_check(nodes, certs):
    from multinode import drain
    b = tls_receiver(nodes, certs, "b", cert_addr="127.0.0.252")  # names another address
    a = nodes.start("a", config={"link_ssl": "true",
                                 "link_ssl_options.cacertfile": str(certs / "otherca.pem"),
                                 "link_ssl_options.verify": "verify_none"})
    bch = b.amqp().channel()
    bch.queue_declare("nv", durable=True, auto_delete=False)
    fmt = tls_fmt(b, "nv")
    link_publish(a, fmt, [b"unverified"])
    a.wait_drained(fmt)
    assert drain(bch, "nv") == [b"unverified"]


@pytest.mark.test_timeout(60)
def test_link_to_a_stalled_tls_server_times_out_and_retries(nodes, certs):
    """A destination that accepts the TCP connection and never answers the ClientHello: the
    link gives up after its handshake time (10 s) and says so; the node goes on serving."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except socket.timeout:
                pass
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        a = nodes.start("a", config={"link_ssl": "true",
                                     "link_ssl_options.cacertfile": str(certs / "ca.pem")})
        fmt = "DIRECT=TCP:127.0.0.1:%d\\private$\\q" % srv.getsockname()[1]
        link_publish(a, fmt, [b"waits"])
        wait_for(lambda: "no answer" in (a.outgoing_queue(fmt) or {}).get("last_error", ""),
                 timeout=25, message="the stalled handshake never timed out: %r"
                 % a.outgoing_queue(fmt))
        assert held, "the link never connected"
        o = a.outgoing_queue(fmt)
        assert o["messages"] == 1 and o["state"] == "WAITING", o
        ch = a.amqp().channel()  # the loop was never held up
        ch.queue_declare(uname("alive"), auto_delete=True)
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()


def test_link_over_tls_with_a_client_certificate(nodes, certs):
    """Mutual TLS: the receiver requires a certificate from its CA; the link presents one."""
    from multinode import drain
    b = tls_receiver(nodes, certs, "b", **{"ssl_options.verify": "verify_peer",
                                           "ssl_options.fail_if_no_peer_cert": "true"})
    bare = nodes.start("bare", config={"link_ssl": "true",
                                       "link_ssl_options.cacertfile": str(certs / "ca.pem")})
    a = nodes.start("a", config={"link_ssl": "true",
                                 "link_ssl_options.cacertfile": str(certs / "ca.pem"),
                                 "link_ssl_options.certfile": str(certs / "client.pem"),
                                 "link_ssl_options.keyfile": str(certs / "client.key")})
    bch = b.amqp().channel()
    bch.queue_declare("m", durable=True, auto_delete=False)
    fmt = tls_fmt(b, "m")
    link_publish(bare, fmt, [b"no cert"])
    link_publish(a, fmt, [b"with cert"])
    a.wait_drained(fmt)
    # the receiver's alert, as OpenSSL words it ("tlsv13 alert certificate required")
    wait_for(lambda: "certificate" in bare.outgoing_queue(fmt)["last_error"], timeout=10,
             message="the link without a certificate was not refused: %r"
             % bare.outgoing_queue(fmt))
    assert bare.outgoing_queue(fmt)["messages"] == 1
    assert drain(bch, "m") == [b"with cert"]


def test_link_ssl_configuration_errors_stop_the_start(tmp_path, certs):
    from conftest import sluiced_binary
    for i, (cfg, text) in enumerate((
            ({"link_ssl": "maybe"}, b"link_ssl"),
            ({"link_ssl": "true", "link_ssl_options.cacertfile": str(tmp_path / "none.pem")},
             b"none.pem"),
            ({"link_ssl": "true", "link_ssl_options.verify": "sometimes"}, b"verify"))):
        conf = tmp_path / ("l%d.conf" % i)
        conf.write_text("".join("%s = %s\n" % kv for kv in cfg.items()))
        p = subprocess.run([str(sluiced_binary()), "--port", "0", "--mgmt-port", "off",
                            "--data-dir", str(tmp_path / ("d%d" % i)), "--config", str(conf)],
                           capture_output=True, timeout=20)
        assert p.returncode != 0 and text in p.stderr, (cfg, p.stderr)
