"""What the cluster tests (test_cluster*.py, test_console_cluster.py) do as clients of the
nodes, in one place: a private etcd (the `etcd` fixture: import it into the test module), an
AMQP connection, confirmed publishing (a list of bodies, or ConfirmedLoad: a thread publishing
until stopped or refused, recording what was confirmed, in order), draining a queue, and GETs of
the HTTP API as guest (/api/cluster).

Invariant of ConfirmedLoad: `confirmed` holds exactly the bodies whose confirm came back, in
publish order; at most one more body (the one in flight when it stopped) may have reached the
queue. That is what a test checks a failover or hand-over against."""

import json
import os
import threading
import time
import urllib.request

import amqp
import pytest

from etcd import Etcd

GUEST = "Basic Z3Vlc3Q6Z3Vlc3Q="  # guest:guest


@pytest.fixture
def etcd(tmp_path):
    e = Etcd(str(tmp_path / "etcd")).start()
    yield e
    e.stop()


SECRET = "cluster-test-secret-5b1f0d"


def cluster_secret(path, secret=SECRET):
    """Write the cluster's shared secret to path, mode 0600 (cluster.secret_file refuses a
    file others can read), and return the path as a string."""
    path = str(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    os.chmod(path, 0o600)
    return path


def get_json(b, path, timeout=5):
    """GET path on node b's HTTP port as guest, parsed (an HTTP error raises)."""
    req = urllib.request.Request("http://%s:%d%s" % (b.host, b.mgmt_port, path))
    req.add_header("Authorization", GUEST)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def cluster_status(b, timeout=5):
    """GET /api/cluster on node b as guest (b's own view: members, leader, epoch)."""
    return get_json(b, "/api/cluster", timeout)


def connect(b, read_timeout=10):
    c = amqp.Connection(host="%s:%d" % (b.host, b.port), userid="guest", password="guest",
                        connect_timeout=5, read_timeout=read_timeout, login_method="PLAIN")
    c.connect()
    return c


def confirm_channel(b, queue):
    """(connection, channel) to b with `queue` declared durable and confirms on."""
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, auto_delete=False)
    ch.confirm_select()
    return conn, ch


def publish_confirmed(ch, queue, bodies):
    """Publish each body persistent on ch (in confirm mode), waiting for each confirm."""
    for body in bodies:
        ch.basic_publish_confirm(amqp.Message(body, delivery_mode=2), routing_key=queue)


def publish_confirmed_to(b, queue, bodies):
    """publish_confirmed on a connection of its own to b, closed after."""
    conn, ch = confirm_channel(b, queue)
    publish_confirmed(ch, queue, bodies)
    conn.close()


def drain(b, queue, timeout=20):
    """Every message of queue: [(body, redelivered)], acked."""
    conn = connect(b)
    ch = conn.channel()
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = ch.basic_get(queue, no_ack=False)
        if m is None:
            break
        out.append((m.body, m.delivery_info["redelivered"]))
        ch.basic_ack(m.delivery_tag)
    conn.close()
    return out


class ConfirmedLoad:
    """A thread publishing body(i) for i = 0, 1, ... with confirms to queue on node b, until
    stop(), `limit` messages, or the first error (kept in .errors: a hand-over's 320 ends it).
    .confirmed: the bodies confirmed, in order. .started is set once `warm` are confirmed (or
    when the thread ends, so that a waiter never waits for a publisher that failed)."""

    def __init__(self, b, queue, body=lambda i: b"p%d" % i, warm=200, limit=100000):
        self.b, self.queue, self.body, self.warm, self.limit = b, queue, body, warm, limit
        self.confirmed = []
        self.errors = []
        self.started = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        try:
            conn, ch = confirm_channel(self.b, self.queue)
            i = 0
            while not self._stop.is_set() and i < self.limit:
                body = self.body(i)
                ch.basic_publish_confirm(amqp.Message(body, delivery_mode=2),
                                         routing_key=self.queue)
                self.confirmed.append(body)
                i += 1
                if i >= self.warm:
                    self.started.set()
            conn.close()
        except Exception as e:  # the caller says which errors it expects
            self.errors.append(e)
        finally:
            self.started.set()

    def join(self, timeout=60):
        """Wait for the thread to end (by itself: an error or the limit); assert it did."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the publisher did not end in %d s" % timeout

    def stop(self, timeout=30):
        self._stop.set()
        self.join(timeout)
