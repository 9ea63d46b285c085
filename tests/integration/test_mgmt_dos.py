"""The management API under a flood of connections that never log in (issue 35, finding 4).

Stalled TLS handshakes on the HTTPS port and half-sent requests on the HTTP port are closed
after mgmt_handshake_timeout, and are capped apart from logged-in connections
(mgmt_unauthenticated_max, the oldest goes): a client that logs in keeps being answered."""

import base64
import http.client
import re
import resource
import socket
import ssl
import threading
import time

import pytest

from test_tls import certs, client_ctx, https_config  # noqa: F401 (certs is a fixture)

HTTPS_RE = re.compile(rb"listening https=([0-9.]+):(\d+)")
AUTH = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}


def https_port(b):
    return int(HTTPS_RE.search(open(b.log_path, "rb").read()).group(2))


def hello_bytes():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


def raise_fd_limit(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def closed_by_peer(s, timeout):
    """True when the server closes s (EOF or reset) within timeout seconds."""
    s.settimeout(timeout)
    try:
        while s.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_stalled_handshake_and_header_are_closed(broker_factory, certs):  # noqa: F811
    b = broker_factory(config=https_config(certs, mgmt_handshake_timeout="1000"))
    t0 = time.monotonic()
    tls = socket.create_connection(("127.0.0.1", https_port(b)), timeout=5)
    tls.sendall(hello_bytes())  # and never the rest of the handshake
    silent = socket.create_connection(("127.0.0.1", https_port(b)), timeout=5)
    half = socket.create_connection(("127.0.0.1", b.mgmt_port), timeout=5)
    half.sendall(b"GET /api/overview HTTP/1.1\r\nHost: x\r\n")  # no end of header
    # one byte a while, as a slow sender: an idle timeout would never fire
    slow = socket.create_connection(("127.0.0.1", b.mgmt_port), timeout=5)
    slow.sendall(b"GET /api/overview HTTP/1.1\r\n")
    slow_done = threading.Event()

    def trickle():
        for _ in range(40):
            if slow_done.wait(0.2):
                return
            try:
                slow.sendall(b"X")
            except OSError:
                return
    th = threading.Thread(target=trickle)
    th.start()
    try:
        for s in (tls, silent, half):
            assert closed_by_peer(s, 15), "a stalled connection was not closed"
        # the trickling one has the same absolute deadline
        assert closed_by_peer(slow, 15)
        assert time.monotonic() - t0 < 12
    finally:
        slow_done.set()
        th.join()
        for s in (tls, silent, half, slow):
            s.close()
    # a client that logs in is answered, on both ports
    c = http.client.HTTPConnection("127.0.0.1", b.mgmt_port, timeout=5)
    c.request("GET", "/api/whoami", headers=AUTH)
    assert c.getresponse().status == 200
    c.close()


def timed_get(port, tls_ctx):
    t = time.monotonic()
    if tls_ctx:
        c = http.client.HTTPSConnection("localhost", port, timeout=10, context=tls_ctx)
    else:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/api/whoami", headers=AUTH)
        r = c.getresponse()
        r.read()
        status = r.status
    except (OSError, http.client.HTTPException) as e:
        status = repr(e)
    finally:
        c.close()
    return status, time.monotonic() - t


# Alone (tests/run.sh): its bounds are wall-clock answer times (1 s, 3 s during the flood's
# handshakes), which four sanitizer workers beside it stretched past 3 s at load 15.
@pytest.mark.alone
def test_a_flood_of_stalled_connections_starves_no_logged_in_client(broker_factory,
                                                                   certs):  # noqa: F811
    n = 1000
    if raise_fd_limit(2 * n + 256) < 2 * n + 256:
        pytest.skip("cannot raise the descriptor limit")
    b = broker_factory(config=https_config(certs))
    hport = https_port(b)
    hello = hello_bytes()
    stalled = []
    opened = {"http": 0, "https": 0}
    done = threading.Event()

    def flood():
        # alternate the ports; each socket starts a handshake or a request and never ends it
        try:
            for i in range(n):
                for name, port, data in (("https", hport, hello),
                                         ("http", b.mgmt_port,
                                          b"GET /api/overview HTTP/1.1\r\nHost: x\r\n")):
                    try:
                        s = socket.create_connection(("127.0.0.1", port), timeout=3)
                        if i % 2:
                            s.sendall(data)
                    except OSError:
                        continue
                    stalled.append(s)
                    opened[name] += 1
        finally:
            done.set()

    th = threading.Thread(target=flood)
    th.start()
    during, after = [], []
    try:
        # a logged-in client, a new connection per request on each port, all through the flood
        # (bounded: the flood ends by itself) and then while every stalled socket is held
        deadline = time.monotonic() + 120
        ctx = client_ctx(certs, None)
        while time.monotonic() < deadline:
            flood_over = done.is_set()
            for port, c in ((b.mgmt_port, None), (hport, ctx)):
                during.append((port,) + timed_get(port, c))
            if flood_over:
                break
        for _ in range(10):
            for port, c in ((b.mgmt_port, None), (hport, ctx)):
                after.append((port,) + timed_get(port, c))
    finally:
        done.wait(130)
        th.join()
        for s in stalled:
            s.close()
    assert opened["http"] >= n * 0.9 and opened["https"] >= n * 0.9, opened
    # Held stalled connections cost the node nothing: answers within 1 s. While the flood
    # is being opened, its handshakes take CPU (each ClientHello costs the server a key
    # exchange) and the client's connection queues behind them in the backlog: answers
    # within 3 s there, for a machine busy with other work too (the defect: none for 60 s).
    late = [(p, st, round(t, 3)) for p, st, t in after if st != 200 or t > 1.0]
    late += [(p, st, round(t, 3)) for p, st, t in during if st != 200 or t > 3.0]
    assert not late, "%d of %d answers late or failed: %s" % (
        len(late), len(during) + len(after), late[:10])
    b.assert_alive()
