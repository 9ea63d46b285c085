"""RabbitMQ's stream protocol door (src/stream/, listeners.stream): the connection's life as
RabbitMQ's stream reader leads it, driven by a raw client (streamraw.py): PeerProperties,
SASL, Tune, Open, Close both ways, heartbeats, limits and malformed input, permissions, and
the answers to the commands that wait for the stream engine (docs/stream-protocol.md)."""
import re
import socket
import ssl
import struct

import pytest

import streamraw as sr
from helpers import wait_for
from test_mgmt import Api

pytestmark = pytest.mark.sluice_only("the stream door of a private broker")

STREAM_RE = re.compile(rb"listening stream=([0-9.]+):(\d+)")
STREAM_TLS_RE = re.compile(rb"listening stream/ssl=([0-9.]+):(\d+)")


def port_of(b, rx=STREAM_RE):
    m = wait_for(lambda: rx.search(open(b.log_path, "rb").read()), 5,
                 message="no 'listening stream=' line")
    return int(m.group(2))


def start(broker_factory, **extra):
    cfg = {"listeners.stream": "0"}
    cfg.update(extra)
    b = broker_factory(config=cfg)
    return b, port_of(b)


def test_off_unless_configured(broker_factory):
    b = broker_factory()
    b.assert_alive()  # every listener's line is logged before the loop runs
    assert b"listening stream" not in open(b.log_path, "rb").read()


def test_rabbitmq_spelling_of_the_listener(broker_factory):
    b = broker_factory(config={"stream.listeners.tcp.1": "127.0.0.1:0"})
    c = sr.StreamClient(port_of(b))
    c.connect()
    c.close()


def test_handshake_open_metadata_and_close(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    code, props = c.peer_properties({"product": "streamraw", "connection_name": "t1"})
    assert code == sr.OK and props["product"] == "Sluice" and props["version"]
    assert "cluster_name" in props
    code, mechs = c.sasl_handshake()
    assert code == sr.OK and mechs == ["PLAIN"]  # EXTERNAL only over TLS with a certificate
    assert c.sasl_authenticate("guest", "guest") == sr.OK
    assert c.tune(heartbeat=0) == (1048576, 60)  # RabbitMQ's defaults
    code, props = c.open("/")
    assert code == sr.OK
    assert props == {"advertised_host": "127.0.0.1", "advertised_port": str(port)}
    # ExchangeCommandVersions: the codec's table, Publish and Deliver up to 2
    corr = c.request(sr.EXCHANGE_COMMAND_VERSIONS, struct.pack(">iHHH", 1, 0x02, 1, 2))
    code, r = c.response(sr.EXCHANGE_COMMAND_VERSIONS, corr)
    versions = {r.take(">H"): (r.take(">H"), r.take(">H")) for _ in range(r.take(">i"))}
    assert code == sr.OK and versions[0x02] == (1, 2) and versions[0x08] == (1, 2)
    assert versions[0x0d] == (1, 1) and 0x1f not in versions
    # Metadata: this node as the broker, no stream yet
    brokers, streams = c.metadata("s1", "s2")
    assert brokers == [(0, "127.0.0.1", port)]
    assert streams == [("s1", sr.STREAM_DOES_NOT_EXIST, 0xFFFF, []),
                       ("s2", sr.STREAM_DOES_NOT_EXIST, 0xFFFF, [])]
    assert c.close_request() == sr.OK
    assert c.sees_eof()
    b.assert_alive()


def create(c, name, args=None):
    corr = c.request(sr.CREATE, sr.s16(name) + sr.kvmap(args or {}))
    return c.response(sr.CREATE, corr)[0]


def delete(c, name):
    corr = c.request(sr.DELETE, sr.s16(name))
    return c.response(sr.DELETE, corr)[0]


def test_create_and_delete_streams(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.connect()
    assert create(c, "s1", {"max-length-bytes": "1000000", "max-age": "7D",
                            "stream-max-segment-size-bytes": "500000", "unknown": "ignored"}) == sr.OK
    assert create(c, "s1") == sr.STREAM_ALREADY_EXISTS
    assert c.metadata("s1", "s2") == ([(0, "127.0.0.1", port)], [
        ("s1", sr.OK, 0, []), ("s2", sr.STREAM_DOES_NOT_EXIST, 0xFFFF, [])])
    # a stream queue as the HTTP API lists it, with the arguments Create gave
    api = Api(b)
    q = api.get("/api/queues/%2F/s1")[1]
    assert q["type"] == "stream" and q["durable"] is True
    assert q["arguments"]["x-max-length-bytes"] == 1000000 and q["arguments"]["x-max-age"] == "7D"
    assert q["arguments"]["x-stream-max-segment-size-bytes"] == 500000
    # refused arguments: not a number, a max-age RabbitMQ refuses
    assert create(c, "bad", {"max-length-bytes": "lots"}) == sr.PRECONDITION_FAILED
    assert create(c, "bad", {"max-age": "7 days"}) == sr.PRECONDITION_FAILED
    assert api.get("/api/queues/%2F/bad")[0] == 404
    # a classic queue's name is taken, and it is no stream
    assert api.put("/api/queues/%2F/classic", {"durable": True})[0] == 201
    assert create(c, "classic") == sr.STREAM_ALREADY_EXISTS
    assert delete(c, "classic") == sr.STREAM_DOES_NOT_EXIST
    assert c.metadata("classic")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    assert delete(c, "s1") == sr.OK
    assert delete(c, "s1") == sr.STREAM_DOES_NOT_EXIST
    assert c.metadata("s1")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    assert api.get("/api/queues/%2F/s1")[0] == 404
    c.close()


def test_a_created_stream_is_durable_and_served_over_amqp(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.connect()
    assert create(c, "s") == sr.OK
    c.close()
    # over AMQP 0-9-1 it is a stream: publish, then read from the first offset
    conn = b.amqp()
    ch = conn.channel()
    ch.basic_publish(__import__("amqp").Message(b"hello"), exchange="", routing_key="s")
    ch.basic_qos(0, 10, False)
    got = []
    ch.basic_consume("s", callback=got.append, arguments={"x-stream-offset": "first"})
    wait_for(lambda: conn.drain_events(timeout=0.2) or got, 5, interval=0)
    assert got[0].body == b"hello" and got[0].headers["x-stream-offset"] == 0
    conn.close()
    # a restart keeps it
    data_dir = b.data_dir
    assert b.terminate() == 0
    b2 = broker_factory(config={"listeners.stream": "0"}, data_dir=data_dir)
    c = sr.StreamClient(port_of(b2))
    c.connect()
    assert c.metadata("s")[1][0][1:3] == (sr.OK, 0)
    c.close()


def test_commands_that_wait_for_the_engine_answer_clearly(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.connect()
    corr = c.request(sr.DECLARE_PUBLISHER, struct.pack(">B", 7) + sr.s16("ref") + sr.s16("s"))
    assert c.response(sr.DECLARE_PUBLISHER, corr)[0] == sr.STREAM_DOES_NOT_EXIST
    assert create(c, "s") == sr.OK
    corr = c.request(sr.DECLARE_PUBLISHER, struct.pack(">B", 7) + sr.s16("ref") + sr.s16("s"))
    assert c.response(sr.DECLARE_PUBLISHER, corr)[0] == sr.PRECONDITION_FAILED  # not wired
    corr = c.request(0x05, sr.s16("ref") + sr.s16("s"))  # QueryPublisherSequence
    code, r = c.response(0x05, corr)
    assert code == sr.OK and r.take(">Q") == 0  # nobody published here
    # Publish to a publisher that was never declared: PublishError for each message
    c.send(sr.PUBLISH, struct.pack(">Bi", 7, 2) + struct.pack(">Q", 10) + sr.b32(b"a")
           + struct.pack(">Q", 11) + sr.b32(b"b"))
    r = c.expect(sr.PUBLISH_ERROR)
    assert r.take(">B") == 7 and r.take(">i") == 2
    assert [(r.take(">Q"), r.take(">H")) for _ in range(2)] == [
        (10, sr.PUBLISHER_DOES_NOT_EXIST), (11, sr.PUBLISHER_DOES_NOT_EXIST)]
    assert c.close_request() == sr.OK
    c.close()


def test_permissions_apply_as_on_the_other_doors(broker_factory):
    b, port = start(broker_factory, **{"user.bob": "secret"})
    api = Api(b)
    assert api.put("/api/vhosts/other", {})[0] in (201, 204)  # guest gets permissions on it
    assert api.put("/api/permissions/%2F/bob", {"configure": "^$", "write": "^$",
                                                "read": ".*"})[0] in (201, 204)
    c = sr.StreamClient(port)
    assert c.peer_properties()[0] == sr.OK and c.sasl_handshake()[0] == sr.OK
    assert c.sasl_authenticate("bob", "secret") == sr.OK
    c.tune()
    assert c.open("other")[0] == sr.VIRTUAL_HOST_ACCESS_FAILURE  # no permission entry there
    assert c.sees_eof()
    c = sr.StreamClient(port)
    c.connect("bob", "secret", "/")
    corr = c.request(sr.CREATE, sr.s16("s") + sr.kvmap({}))
    assert c.response(sr.CREATE, corr)[0] == sr.ACCESS_REFUSED  # configure refused
    corr = c.request(sr.DECLARE_PUBLISHER, struct.pack(">B", 1) + sr.s16(None) + sr.s16("s"))
    assert c.response(sr.DECLARE_PUBLISHER, corr)[0] == sr.ACCESS_REFUSED  # write refused
    c.close()


def test_bad_password_and_mechanisms(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("guest", "wrong") == sr.AUTHENTICATION_FAILURE
    assert c.sees_eof()
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("nobody", "guest") == sr.AUTHENTICATION_FAILURE
    assert c.sees_eof()
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("", "", mechanism="AMQPLAIN", data=b"") == \
        sr.SASL_MECHANISM_NOT_SUPPORTED
    assert c.sees_eof()
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("", "", mechanism="EXTERNAL", data=b"") == \
        sr.SASL_MECHANISM_NOT_SUPPORTED  # no certificate: EXTERNAL is not offered
    assert c.sees_eof()
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("", "", data=b"no-nul-here") == sr.SASL_ERROR
    assert c.sees_eof()
    assert open(b.log_path, "rb").read().count(b"login refused") == 5
    c = sr.StreamClient(port)
    c.connect()
    c.close()


def test_unknown_vhost(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake(), c.sasl_authenticate("guest", "guest"), c.tune()
    code, props = c.open("no-such-vhost")
    assert code == sr.VIRTUAL_HOST_ACCESS_FAILURE and props == {}
    assert c.sees_eof()


def test_frame_max_is_8192_before_open_and_tuned_after(broker_factory):
    b, port = start(broker_factory, **{"stream.frame_max": "65536"})
    # a frame of exactly 8192 octets before Open is taken
    c = sr.StreamClient(port)
    pad = 8192 - 4 - 4 - 4 - 2 - 2 - len("pad")
    code, _ = c.peer_properties({"pad": "x" * pad})
    assert code == sr.OK
    # one octet more is refused from its size alone, before any body is sent
    c = sr.StreamClient(port)
    c.peer_properties()
    c.send_raw(struct.pack(">I", 8193))
    assert c.server_close()[0] == sr.FRAME_TOO_LARGE
    assert c.sees_eof()
    # after Open: the tuned limit (the server's 65536, the client asked for more)
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake(), c.sasl_authenticate("guest", "guest")
    assert c.tune(frame_max=1 << 20) == (65536, 60)
    assert c.open()[0] == sr.OK
    names = ["s%05d" % i for i in range(2000)]  # a 16 KiB Metadata request
    assert len(c.metadata(*names)[1]) == 2000
    c.send_raw(struct.pack(">I", 65537))
    assert c.server_close()[0] == sr.FRAME_TOO_LARGE
    assert c.sees_eof()
    b.assert_alive()


def test_malformed_frames_close_only_their_connection(broker_factory):
    b, port = start(broker_factory)
    good = sr.StreamClient(port)
    good.connect()
    bad = [
        struct.pack(">I", 2) + b"\0\0",                      # no room for key and version
        struct.pack(">IHH", 4, 0x7777, 1),                   # unknown key
        struct.pack(">IHH", 4, sr.PEER_PROPERTIES, 9),       # unknown version
        struct.pack(">IHHI", 12, sr.PEER_PROPERTIES, 1, 1) + struct.pack(">i", 5),  # truncated
    ]
    for frame in bad:
        c = sr.StreamClient(port)
        c.send_raw(frame)
        assert c.server_close()[0] == sr.UNKNOWN_FRAME
        assert c.sees_eof()
    # a command out of order (Open before the login)
    c = sr.StreamClient(port)
    c.request(sr.OPEN, sr.s16("/"))
    assert c.server_close()[0] == sr.UNKNOWN_FRAME
    assert c.sees_eof()
    # garbage after the handshake, on an open connection
    c = sr.StreamClient(port)
    c.connect()
    c.send_raw(struct.pack(">IHH", 4, 0x0008, 1))  # Deliver: only the server sends it
    assert c.server_close()[0] == sr.UNKNOWN_FRAME
    assert c.sees_eof()
    # a peer that goes away mid-frame
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(struct.pack(">IHH", 100, sr.PEER_PROPERTIES, 1) + b"\0\0")
    s.close()
    assert good.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST  # the other one serves on
    b.assert_alive()


def test_heartbeats_both_ways(broker_factory):
    b, port = start(broker_factory, **{"stream.heartbeat": "1"})
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake(), c.sasl_authenticate("guest", "guest")
    assert c.tune(heartbeat=1) == (1048576, 1)
    assert c.open()[0] == sr.OK
    # the server's heartbeat comes while the client is silent
    c.s.settimeout(5)
    assert c.frame()[0] == sr.HEARTBEAT
    # a client that says nothing for two intervals is dropped (RabbitMQ drops the socket)
    assert c.sees_eof()
    wait_for(lambda: b"missed heartbeats" in open(b.log_path, "rb").read(), 5)
    # a client that sends heartbeats stays
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake(), c.sasl_authenticate("guest", "guest")
    c.tune(heartbeat=1)
    assert c.open()[0] == sr.OK
    seen = 0
    while seen < 4:  # about two seconds: past the two-interval limit
        k = c.frame()[0]
        assert k == sr.HEARTBEAT
        c.send(sr.HEARTBEAT)
        seen += 1
    assert c.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    c.close()


def test_handshake_timeout(broker_factory):
    b, port = start(broker_factory, handshake_timeout="300")
    c = sr.StreamClient(port)
    c.peer_properties()
    assert c.sees_eof()  # no SaslHandshake in time
    wait_for(lambda: b"handshake timeout" in open(b.log_path, "rb").read(), 5)


def test_deleted_vhost_and_user_close_their_connections(broker_factory):
    b, port = start(broker_factory, **{"user.bob": "secret"})
    api = Api(b)
    assert api.put("/api/vhosts/gone", {})[0] in (201, 204)
    in_gone = sr.StreamClient(port)
    in_gone.connect("guest", "guest", "gone")
    bob = sr.StreamClient(port)
    bob.connect("bob", "secret", "/")
    other = sr.StreamClient(port)
    other.connect()
    assert api.delete("/api/vhosts/gone")[0] == 204
    code, reason = in_gone.server_close()
    assert code == sr.OK and "gone" in reason
    assert in_gone.sees_eof()
    assert api.delete("/api/users/bob")[0] == 204
    code, reason = bob.server_close()
    assert "bob" in reason
    assert bob.sees_eof()
    assert other.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    other.close()


def test_shutdown_closes_stream_connections(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.connect()
    b.proc.send_signal(15)
    code, _ = c.server_close()
    assert code == sr.OK
    assert c.sees_eof()
    assert b.terminate() == 0


def test_tls_listener_and_external(broker_factory, tmp_path):
    from test_tls import make_ca, make_cert
    d = tmp_path / "certs"
    d.mkdir()
    make_ca(d, "ca", "Sluice Test CA")
    make_cert(d, "server", "ca", "/CN=localhost", san="IP:127.0.0.1,DNS:localhost")
    make_cert(d, "client", "ca", "/CN=tlsuser/O=Sluice Tests")
    b = broker_factory(config={
        "listeners.stream.ssl": "0",
        "ssl_options.cacertfile": str(d / "ca.pem"),
        "ssl_options.certfile": str(d / "server.pem"),
        "ssl_options.keyfile": str(d / "server.key"),
        "ssl_options.verify": "verify_peer",
        "auth_mechanisms.1": "PLAIN",
        "auth_mechanisms.2": "EXTERNAL",
        "ssl_cert_login_from": "common_name",
        "stream.advertised_tls_port": "5551",
    })
    port = port_of(b, STREAM_TLS_RE)
    assert b"listening stream=" not in open(b.log_path, "rb").read()
    api = Api(b)
    assert api.put("/api/users/tlsuser", {"tags": ""})[0] == 201
    assert api.put("/api/permissions/%2F/tlsuser",
                   {"configure": ".*", "write": ".*", "read": ".*"})[0] == 201

    def tls_client(cert=None):
        ctx = ssl.create_default_context(cafile=str(d / "ca.pem"))
        if cert:
            ctx.load_cert_chain(str(d / (cert + ".pem")), str(d / (cert + ".key")))
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        return sr.StreamClient(port, sock=ctx.wrap_socket(raw, server_hostname="localhost"))

    c = tls_client()
    assert c.peer_properties()[0] == sr.OK
    assert c.sasl_handshake()[1] == ["PLAIN"]  # no certificate: no EXTERNAL
    assert c.sasl_authenticate("guest", "guest") == sr.OK
    c.tune()
    assert c.open()[1]["advertised_port"] == "5551"
    c.close()
    c = tls_client("client")
    c.peer_properties()
    assert c.sasl_handshake()[1] == ["PLAIN", "EXTERNAL"]
    assert c.sasl_authenticate("", "", mechanism="EXTERNAL", data=b"") == sr.OK
    c.tune()
    assert c.open()[0] == sr.OK
    assert c.close_request() == sr.OK
    c.close()
    # plain bytes to the TLS port: the handshake fails, logged, the port serves on
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(struct.pack(">IHH", 4, sr.PEER_PROPERTIES, 1))
    assert sr.StreamClient(port, sock=s).sees_eof()
    c = tls_client()
    c.connect()
    c.close()


def test_a_client_that_does_not_read_is_held_then_served_whole(broker_factory):
    """More answers than STREAM_OUT_MAX (1 MiB) asked for without reading: the door stops
    reading that client, the rest of the node goes on, and once the client reads every answer
    comes, in order (the frames held in the door's feeder meanwhile too: with
    stream_conn_resume a no-op this test fails)."""
    import threading
    b, port = start(broker_factory)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # little room in the kernel
    s.connect(("127.0.0.1", port))
    c = sr.StreamClient(port, timeout=20, sock=s)
    c.connect()
    names = ["stream-%04d" % i for i in range(100)]  # ~2 KiB answers
    body = struct.pack(">i", len(names)) + b"".join(sr.s16(n) for n in names)
    n = 4000  # ~8 MiB of answers: past the door's 1 MiB and the socket's own buffers
    frames = b"".join(struct.pack(">IHHI", 8 + len(body), sr.METADATA, 1, i + 1) + body
                      for i in range(n))
    sender = threading.Thread(target=c.send_raw, args=(frames,), daemon=True)
    sender.start()
    other = sr.StreamClient(port)
    other.connect()
    assert other.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST  # the node serves on
    for i in range(n):
        r = c.expect(sr.METADATA | sr.RESPONSE)
        assert r.take(">I") == i + 1
    sender.join(20)
    assert not sender.is_alive()
    assert c.close_request() == sr.OK


def test_slow_password_hashes_are_checked_off_the_loop(broker_factory):
    """Argon2id users: the check runs on the verifier's thread; the connection waits for it
    (what the client sent meanwhile is handled after it) and other clients are served."""
    b, port = start(broker_factory, **{"password_hashing_module": "sluice_password_hashing_argon2id",
                                       "user.carol": "s3cret"})
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    # the login and the rest of the handshake in one write: Tune's answer and Open wait behind
    # the check
    auth = struct.pack(">I", 10) + sr.s16("PLAIN") + sr.b32(b"\0carol\0s3cret")
    tune = struct.pack(">II", 1048576, 0)
    opn = struct.pack(">I", 11) + sr.s16("/")
    c.send_raw(struct.pack(">IHH", 4 + len(auth), sr.SASL_AUTHENTICATE, 1) + auth
               + struct.pack(">IHH", 4 + len(tune), sr.TUNE, 1) + tune
               + struct.pack(">IHH", 4 + len(opn), sr.OPEN, 1) + opn)
    other = sr.StreamClient(port)
    other.connect()
    assert c.response(sr.SASL_AUTHENTICATE, 10)[0] == sr.OK
    r = c.expect(sr.TUNE)
    assert (r.take(">I"), r.take(">I")) == (1048576, 60)
    assert c.response(sr.OPEN, 11)[0] == sr.OK
    c.corr = 11
    assert c.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    c.close()
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("carol", "wrong") == sr.AUTHENTICATION_FAILURE
    assert c.sees_eof()
    # a client that goes away while its check runs
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    c.request(sr.SASL_AUTHENTICATE, sr.s16("PLAIN") + sr.b32(b"\0carol\0s3cret"))
    c.close()
    assert other.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    b.assert_alive()

