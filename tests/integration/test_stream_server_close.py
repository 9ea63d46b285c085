"""How the stream door ends a connection it is told to end (its vhost or user deleted, the node
shutting down), as RabbitMQ's stream reader does: rabbit_networking closes a non-AMQP
connection with {shutdown, Explanation}, and the reader closes its socket with no Close frame
(rabbit_stream_reader, open/3 {shutdown, _}; at node shutdown terminate/3 does the same). A
server Close (key 0x0016) is one RabbitMQ's Node.js client cannot take: its ResponseDecoder
has no factory for a request of key 22 and throws "Unknown response 22" from the socket's data
handler, an uncaught exception that kills the client's process; it and the other clients see
the socket end and run their connection_closed listeners.

Checked twice: a raw client decoding what comes (nothing, then EOF), and the vendored Node.js
client (tests/stream-js/probe/server_close.ts) whose connection_closed listener must run with
no exception."""
import os
import shutil
import subprocess
import threading

import pytest

import streamraw as sr
from helpers import wait_for
from test_mgmt import Api
from test_stream_door import start

pytestmark = pytest.mark.sluice_only("the stream door of a private broker")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JS = os.path.join(REPO, "tests", "stream-js")
TSX = os.path.join(JS, "node_modules", ".bin", "tsx")


def frames_then_eof(c):
    """What the server sends until its side ends: [(key, version)] (heartbeats left out)."""
    got = []
    try:
        while True:
            k, v, _ = c.frame()
            if k != sr.HEARTBEAT:
                got.append((k, v))
    except (sr.Closed, ConnectionResetError):
        return got


class NodeProbe:
    """The vendored Node.js client, connected to port and vhost, its output collected."""

    def __init__(self, port, vhost):
        if not (shutil.which("node") and os.path.exists(TSX)):
            pytest.skip("no node or no stream-js packages (make stream-client-deps)")
        self.p = subprocess.Popen([TSX, "probe/server_close.ts", str(port), vhost], cwd=JS,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()
        wait_for(lambda: "open" in self.lines or self.p.poll() is not None, 30,
                 message="the Node.js client did not connect")
        assert "open" in self.lines, self.lines

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.strip())

    def result(self):
        try:
            self.p.wait(timeout=20)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
        self.t.join(5)
        return self.p.returncode, self.lines


def test_deleted_vhost_and_user_end_the_socket_without_close(broker_factory):
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
    assert frames_then_eof(in_gone) == []
    assert api.delete("/api/users/bob")[0] == 204
    assert frames_then_eof(bob) == []
    # the log says why, as for any closed connection
    log = open(b.log_path, "rb").read()
    assert b"closed: CONNECTION_FORCED - vhost 'gone' is deleted" in log
    assert b"closed: user 'bob' is deleted" in log
    # the others go on
    assert other.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    other.close()
    b.assert_alive()


def test_shutdown_ends_the_socket_without_close(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.connect()
    b.proc.send_signal(15)
    assert frames_then_eof(c) == []
    assert b.terminate() == 0


def test_node_client_sees_its_vhost_deleted(broker_factory):
    b, port = start(broker_factory)
    api = Api(b)
    assert api.put("/api/vhosts/gone", {})[0] in (201, 204)
    probe = NodeProbe(port, "gone")
    assert api.delete("/api/vhosts/gone")[0] == 204
    rc, lines = probe.result()
    assert not any(l.startswith("error") for l in lines), lines
    assert "closed hadError=false" in lines, lines
    assert rc == 0, lines
    b.assert_alive()


def test_node_client_sees_the_node_shut_down(broker_factory):
    b, port = start(broker_factory)
    probe = NodeProbe(port, "/")
    b.proc.send_signal(15)
    rc, lines = probe.result()
    assert not any(l.startswith("error") for l in lines), lines
    assert "closed hadError=false" in lines, lines
    assert rc == 0, lines
    assert b.terminate() == 0
