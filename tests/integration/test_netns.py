"""The network-namespace harness (netns.py) proven on its own, before the node-to-node link
relies on it: a node in a namespace is reachable from another namespace over their veth link
(and not from a namespace without one), a cut link really cuts and a restored one works
again, the shaper really delays and really loses packets, and everything the harness made is
gone afterwards: after a normal end, an exception, ^C, SIGTERM, and (by the next run's sweep)
kill -9.
"""

import errno
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import amqp
import pytest

import netns
from helpers import uname, wait_for

# Runs alone, after the parallel pass (tests/run.sh): network namespaces and tc netem shapers.
pytestmark = pytest.mark.alone

HERE = Path(__file__).resolve().parent
PEER = {"user.peer": "peer-secret"}  # a non-guest user, for clients on another namespace

# A TCP echo server and a UDP counter, run inside a namespace with `python3 -c`.
TCP_ECHO = textwrap.dedent("""
    import socket, threading
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 7000))
    s.listen(16)
    print("up", flush=True)
    def serve(c):
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
        c.close()
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
""")
UDP_COUNT = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("0.0.0.0", 7001))
    print("up", flush=True)
    n = 0
    s.settimeout(1.5)
    while True:
        try:
            d = s.recv(2048)
        except socket.timeout:
            if n:
                break
            continue
        if d == b"end":
            continue
        n += 1
    print(n, flush=True)
""")


def start_helper(net, node, script):
    p = net.popen(node, ["/usr/bin/python3", "-c", script], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"up"
    return p


def tcp_rtt(net, src, dst, rounds=5):
    """(median connect time, median echo round trip) in seconds, from src to dst's echo."""
    conns, echoes = [], []
    for _ in range(rounds):
        t0 = time.monotonic()
        s = net.ns[src].connect(net.addr(src, dst), 7000, timeout=10)
        t1 = time.monotonic()
        s.sendall(b"x")
        assert s.recv(10) == b"x"
        t2 = time.monotonic()
        s.close()
        conns.append(t1 - t0)
        echoes.append(t2 - t1)
    return statistics.median(conns), statistics.median(echoes)


def udp_count(net, src, dst, n=1000):
    """How many of n datagrams sent from src reach dst's counter."""
    counter = start_helper(net, dst, UDP_COUNT)
    with net.ns[src].entered():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for i in range(n):
            s.sendto(b"d%05d" % i + b"." * 100, (net.addr(src, dst), 7001))
            if i % 50 == 49:
                time.sleep(0.005)  # paced: socket buffers never overflow
    finally:
        s.close()
    out, _ = counter.communicate(timeout=20)
    return int(out.split()[-1])


def peer_conn(net, src, dst, timeout=5):
    """A py-amqp connection as user `peer` from src's namespace to the node in dst."""
    c = amqp.Connection(host="%s:%d" % (net.addr(src, dst), netns.AMQP_PORT), userid="peer",
                        password="peer-secret", connect_timeout=timeout, read_timeout=timeout,
                        write_timeout=timeout, login_method="PLAIN")
    with net.ns[src].entered():
        c.connect()
    return c


def round_trip(conn, tag=b"hello"):
    ch = conn.channel()
    q = uname("ns")
    ch.queue_declare(q, auto_delete=False)
    ch.basic_publish(amqp.Message(tag), exchange="", routing_key=q)
    msg = wait_for(lambda: ch.basic_get(q, no_ack=True), message="message back")
    ch.queue_delete(q)
    ch.close()
    return msg.body


@pytest.mark.test_timeout(60)
def test_node_in_a_namespace_is_reachable_from_another_namespace_only(ns_node):
    net = ns_node.net
    net.add_node("a")
    net.add_node("b")
    net.link("a", "b")
    a = ns_node("a", config=PEER)
    # From b, over the veth link, as a real AMQP client.
    c = peer_conn(net, "b", "a")
    try:
        assert round_trip(c) == b"hello"
        # The node saw the client come from b's link address, not from loopback.
        status, conns = a.http("GET", "/api/connections")
        assert status == 200
        peers = {x.get("peer_host") for x in conns}
        assert net.addr("a", "b") in peers, conns
    finally:
        c.close()
    # guest, from the node's own namespace (loopback there).
    assert round_trip(a.amqp()) == b"hello"
    # A namespace without a link to a cannot reach it (it has no route at all: nothing is
    # sent). The test never tries from the root namespace, whose default route leads off the
    # machine.
    net.add_node("c")
    t0 = time.monotonic()
    with pytest.raises(OSError) as ei:
        net.ns["c"].connect(net.addr("b", "a"), netns.AMQP_PORT, timeout=2).close()
    assert ei.value.errno == errno.ENETUNREACH and time.monotonic() - t0 < 1
    assert net.addr("b", "a") not in subprocess.run(["ip", "-o", "addr"], capture_output=True,
                                                    text=True).stdout
    # Nor does guest work from the other namespace (not loopback for the node).
    with pytest.raises(amqp.exceptions.AccessRefused):
        g = amqp.Connection(host="%s:%d" % (net.addr("b", "a"), netns.AMQP_PORT),
                            userid="guest", password="guest", connect_timeout=5,
                            read_timeout=5, login_method="PLAIN")
        with net.ns["b"].entered():
            g.connect()


@pytest.mark.test_timeout(90)
def test_a_cut_link_cuts_and_a_restored_link_carries_again(ns_node):
    net = ns_node.net
    for n in ("a", "b", "c"):
        net.add_node(n)
    ab = net.link("a", "b")
    net.link("a", "c")
    ns_node("a", config=PEER)
    c = peer_conn(net, "b", "a", timeout=2)
    assert round_trip(c) == b"hello"
    ab.cut()
    assert ab.is_cut == {"a", "b"}
    # The established connection gets no answer any more ...
    with pytest.raises((socket.timeout, OSError, amqp.exceptions.AMQPError)):
        ch = c.channel()
        ch.queue_declare(uname("cut"), auto_delete=True)
    # ... a new one cannot be made ...
    t0 = time.monotonic()
    with pytest.raises(OSError):
        net.ns["b"].connect(net.addr("b", "a"), netns.AMQP_PORT, timeout=2).close()
    assert time.monotonic() - t0 < 3
    # ... while the other link of the node is untouched.
    c2 = peer_conn(net, "c", "a")
    assert round_trip(c2, b"via-c") == b"via-c"
    c2.close()
    ab.restore()
    assert not ab.is_cut
    c3 = peer_conn(net, "b", "a")
    assert round_trip(c3, b"back") == b"back"
    c3.close()
    # One end down is enough to cut it too (b's end still up: its packets go nowhere).
    ab.cut(side="a")
    with pytest.raises(OSError):
        net.ns["b"].connect(net.addr("b", "a"), netns.AMQP_PORT, timeout=2).close()
    ab.restore(side="a")
    c4 = peer_conn(net, "b", "a")
    assert round_trip(c4, b"again") == b"again"
    c4.close()
    try:
        c.close()
    except Exception:
        pass


@pytest.mark.test_timeout(90)
def test_shape_really_delays_each_direction_and_unshape_undoes_it(ns_net):
    net = ns_net
    net.add_node("a")
    net.add_node("b")
    lk = net.link("a", "b")
    start_helper(net, "a", TCP_ECHO)
    base_conn, base_echo = tcp_rtt(net, "b", "a")
    # Only has to stay under the delay shaped below (a loaded machine may be slow).
    assert base_echo < 0.14, "an unshaped veth round trip took %.3fs" % base_echo
    # 150 ms on what leaves b: every round trip b -> a -> b waits once.
    lk.shape(delay_ms=150, side="b")
    conn, echo = tcp_rtt(net, "b", "a", rounds=3)
    print("backend %s: connect %.3fs, echo %.3fs (unshaped %.4fs / %.4fs)"
          % (lk.backend, conn, echo, base_conn, base_echo))
    assert lk.backend in ("netem", "nfqueue")
    assert 0.15 <= conn < 1.5 and 0.15 <= echo < 1.5
    # 100 ms each way: a round trip waits twice.
    lk.shape(delay_ms=100)
    conn, echo = tcp_rtt(net, "b", "a", rounds=3)
    assert 0.2 <= conn < 1.5 and 0.2 <= echo < 1.5
    lk.unshape()
    conn, echo = tcp_rtt(net, "b", "a")
    assert echo < 0.14 and conn < 0.14, "still delayed after unshape: %.3f %.3f" % (conn, echo)


@pytest.mark.test_timeout(120)
def test_shape_really_loses_packets_in_the_shaped_direction_only(ns_net):
    net = ns_net
    net.add_node("a")
    net.add_node("b")
    lk = net.link("a", "b")
    assert udp_count(net, "b", "a") >= 995
    lk.shape(loss=0.25, side="b", seed=7)
    got = udp_count(net, "b", "a")
    print("backend %s: 25%% loss let %d of 1000 through" % (lk.backend, got))
    assert 600 <= got <= 880
    # The other direction is clean.
    assert udp_count(net, "a", "b") >= 995
    # Loss 1 is a one-way blackhole: b's SYNs never arrive.
    lk.shape(loss=1.0, side="b")
    with pytest.raises(OSError):
        start_helper(net, "a", TCP_ECHO)
        net.ns["b"].connect(net.addr("b", "a"), 7000, timeout=2).close()
    lk.unshape()
    assert udp_count(net, "b", "a") >= 995


@pytest.mark.test_timeout(60)
def test_a_node_in_a_namespace_recovers_its_data_after_kill9(ns_node):
    a = ns_node("a")
    ch = a.amqp().channel()
    ch.queue_declare("durable-q", durable=True, auto_delete=False)
    # basic_publish_confirm waits for the broker's confirm: the message is on disk.
    ch.basic_publish_confirm(amqp.Message(b"kept", delivery_mode=2), exchange="",
                             routing_key="durable-q")
    pid = a.proc.pid
    a.kill9()
    assert a.kills == 1 and not a.alive()
    a.start()
    assert a.proc.pid != pid and a.starts == 2
    ch = a.amqp().channel()
    msg = ch.basic_get("durable-q", no_ack=True)
    assert msg is not None and msg.body == b"kept"


# ------------------------------------------------------------------------------------------
# Cleanup
# ------------------------------------------------------------------------------------------
def gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state == "Z"  # a zombie waiting for its reaper is gone for our purposes
    except FileNotFoundError:
        return True


def assert_all_gone(names, pids):
    existing = {n for n, _ in netns.harness_namespaces()}
    assert not set(names) & existing, "namespaces left: %s" % (set(names) & existing)
    wait_for(lambda: all(gone(p) for p in pids), timeout=10,
             message="processes %s gone" % [p for p in pids if not gone(p)])


# A child that builds a net with a node, a link, a shaper and an echo server, reports what it
# made as one JSON line, then waits to be stopped.
CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, %(here)r)
    import netns
    with netns.Net(sys.argv[1]) as net:
        node = netns.NsNode(net, "a", %(binary)r).start()
        net.add_node("b")
        lk = net.link("a", "b")
        lk.shape(delay_ms=5)
        echo = net.popen("b", ["/usr/bin/python3", "-c", "import time; time.sleep(600)"])
        pids = [node.proc.pid, echo.pid] + [d[0].pid for k, d in lk.shaping.values()
                                            if k == "nfqueue"]
        print(json.dumps({"names": [ns.name for ns in net.ns.values()], "pids": pids}),
              flush=True)
        time.sleep(120)
""")


def child_stderr(tmp_path):
    try:
        return (tmp_path / "child.stderr").read_bytes().decode(errors="replace")[-4000:]
    except OSError as e:
        return repr(e)


def wait_channels(pids):
    """pid -> (state, kernel wait channel) of each process still there."""
    out = {}
    for pid in pids:
        try:
            state = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0]
            out[pid] = (state, Path("/proc/%d/wchan" % pid).read_text())
        except OSError:
            out[pid] = "gone"
    return out


def spawn_child(tmp_path):
    script = CHILD % {"here": str(HERE), "binary": str(netns.sluiced_binary())}
    # stderr to a file, not a pipe nobody reads while the child runs: a full pipe would
    # wedge the child's cleanup, and the file says what the child printed if it wedges
    err = open(tmp_path / "child.stderr", "wb")
    p = subprocess.Popen([sys.executable if sys.executable else "/usr/bin/python3", "-c",
                          script, str(tmp_path / "child")], stdout=subprocess.PIPE, stderr=err)
    err.close()
    line = p.stdout.readline()
    if not line:
        p.kill()
        p.wait(10)
        raise AssertionError("child failed: %s" % child_stderr(tmp_path))
    info = json.loads(line)
    existing = {n for n, _ in netns.harness_namespaces()}
    assert set(info["names"]) <= existing
    assert not any(gone(pid) for pid in info["pids"])
    return p, info


@pytest.mark.test_timeout(60)
def test_close_removes_namespaces_processes_and_shapers(ns_net, tmp_path):
    net = ns_net
    a = netns.NsNode(net, "a").start()
    net.add_node("b")
    lk = net.link("a", "b")
    lk.shape(delay_ms=5, loss=0.01)
    pids = [a.proc.pid] + [d[0].pid for k, d in lk.shaping.values() if k == "nfqueue"]
    names = [ns.name for ns in net.ns.values()]
    net.close()
    assert_all_gone(names, pids)
    net.close()  # idempotent


@pytest.mark.test_timeout(60)
def test_an_exception_inside_the_net_still_cleans_up(tmp_path):
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)
    names = []
    with pytest.raises(ZeroDivisionError):
        with netns.Net(tmp_path / "net") as net:
            net.add_node("a")
            net.add_node("b")
            net.link("a", "b")
            names = [ns.name for ns in net.ns.values()]
            1 / 0
    assert names
    assert_all_gone(names, [])


@pytest.mark.test_timeout(200)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_cleans_up(tmp_path, sig):
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)
    p, info = spawn_child(tmp_path)
    p.send_signal(sig)
    # the child's cleanup (stop the node, the shapers, delete the namespaces) took over 30 s
    # twice at load 10, and once (SIGINT, in .ci/run on ef4dd6e, load about 2) did not end in
    # 90 s, cause unknown; the bound is for a wedged cleanup, not a slow one, and a wedged one
    # says where each process waits
    try:
        p.wait(150)
    except subprocess.TimeoutExpired:
        where = wait_channels([p.pid] + info["pids"])
        p.kill()
        p.wait(10)
        raise AssertionError("the child's cleanup did not end in 150 s; waiting in: %s; its "
                             "stderr: %s" % (where, child_stderr(tmp_path)))
    assert_all_gone(info["names"], info["pids"])


@pytest.mark.test_timeout(90)
def test_a_run_killed_9_is_swept_by_the_next(tmp_path):
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)
    p, info = spawn_child(tmp_path)
    p.kill()
    p.wait(10)
    # Nothing could clean up: the namespaces and the processes in them are still there ...
    existing = {n for n, _ in netns.harness_namespaces()}
    assert set(info["names"]) <= existing
    # ... until the next harness sweeps what belongs to a dead pid (a new Net does it first).
    removed = netns.sweep_stale()
    assert set(info["names"]) <= set(removed)
    assert_all_gone(info["names"], info["pids"])
