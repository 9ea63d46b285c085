#!/usr/bin/env python3
"""mqqb.py - MS-MQQB throughput: messages per second between Sluice and the Python peer
written from the specification (tests/integration/mqqb_peer.py), both directions.

  recv_rec  the peer sends N recoverable messages to Sluice's MS-MQQB door (listeners.msmq),
            at most a window (64) of packets unacknowledged; done when every recoverable
            number is acknowledged (Sluice acks a recoverable message once it is on disk)
  recv_tx   the same, transactional (one sequence): done when the OrderAck for the last
            number arrives
  recv_ack  recv_rec with every message asking for arrival acknowledgements
            (MQMSG_ACKNOWLEDGMENT_FULL_REACH_QUEUE) to an admin queue of this node: each
            enqueue also enqueues its ACK_REACH_QUEUE in the same record group
  send_rec  N persistent messages wait in an outgoing queue to the peer (node offline), the
            node comes online, done when the peer (mqqb_peer.Receiver) holds all N
  send_tx   the same, published in AMQP transactions of 100: transactional MSMQ messages,
            done when the peer has accepted all N in sequence (and order-acked them)

Sluice alone (RabbitMQ has no MS-MQQB). 16-byte bodies, a durable queue. The peer is Python:
its own speed bounds the rates (its CPU is printed beside Sluice's). Stops only what it starts.

  python3 bench/mqqb.py [-n 20000] [--rounds 1] [--smoke] [--sluiced build/sluiced]
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "bench"))
import mqqb_peer as mq  # noqa: E402
import drain  # noqa: E402  (run.Sluiced.api_post)
import run  # noqa: E402

import amqp  # noqa: E402


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu():
    t = os.times()
    return t.user + t.system


def start_node(binary, base, peer_port):
    node = run.Sluiced(binary, base, mgmt=True)
    base.mkdir(parents=True, exist_ok=True)
    conf = base / "mqqb.conf"
    conf.write_text("listeners.msmq = 0\nmsmq.ping_port = off\nmsmq.hosts.1 = 127.0.0.1:%d\n"
                    % peer_port)
    orig = subprocess.Popen

    def popen(cmd, *a, **kw):  # run.Sluiced with our configuration file added
        return orig(list(cmd) + ["--config", str(conf)], *a, **kw)
    subprocess.Popen = popen
    try:
        node.start()
    finally:
        subprocess.Popen = orig
    m = None
    deadline = time.monotonic() + 10
    while not m and time.monotonic() < deadline:
        m = re.search(r"listening msmq=[0-9.]+:(\d+)", node.log_path.read_text(errors="replace"))
        time.sleep(0.02)
    node.msmq_port = int(m.group(1))
    return node


def recv_run(node, n, tx, tag, ack=False):
    """The peer sends n messages to Sluice's door; (seconds, peer CPU s, node CPU s)."""
    c = amqp.Connection("%s:%d" % (run.HOST, node.port), userid="guest", password="guest")
    c.connect()
    c.channel().queue_declare(tag, durable=True, auto_delete=False)
    extra = {}
    host = "127.0.0.1"
    if ack:
        # the admin queue on the host the sender names Sluice by: a queue of this node (not
        # 127.0.0.1, which msmq.hosts names as the peer's Windows host)
        host = "127.0.0.3"
        c.channel().queue_declare(tag + "_admin", durable=True, auto_delete=False)
        extra = {"admin": "TCP:%s\\private$\\%s_admin" % (host, tag),
                 "ack_flags": mq.ACK_FULL_REACH_QUEUE}
    s = mq.Sender("127.0.0.1", node.msmq_port, timeout=30)
    s.establish(window=64, rec_ack_timeout=50)
    dest = "TCP:%s\\private$\\%s" % (host, tag)
    seq_id = int(time.time()) << 32 | 1
    body = b"x" * 16
    acked = 0  # packets the receiver acknowledged (ack_seq, 16-bit, unwrapped)
    p0, n0, t0 = self_cpu(), cpu_s(node.proc.pid), time.monotonic()
    sent = 0

    def done():
        return (s.last_order_ack(seq_id) >= n) if tx else len(s.rec_acked) >= n

    while not done():
        while sent < n and sent - acked < 64:
            sent += 1
            kw = {"tx": (seq_id, sent, sent - 1)} if tx else {"recoverable": True}
            s.send(dest, body, **kw, **extra)
        p = s.pump(30)
        if p.kind == "session_ack":
            acked += (p.ack_seq - acked) & 0xFFFF
    t = time.monotonic() - t0
    res = (t, self_cpu() - p0, cpu_s(node.proc.pid) - n0, len(s.order_acks))
    s.close()
    ch = c.channel()
    got = ch.queue_declare(tag, passive=True).message_count
    assert got == n, (got, n)
    ch.queue_delete(tag)
    if ack:
        got = ch.queue_declare(tag + "_admin", passive=True).message_count
        assert got == n, ("acknowledgements", got, n)
        ch.queue_delete(tag + "_admin")
    c.close()
    return res


def send_run(node, peer, n, tx, tag):
    """n messages wait in an outgoing queue to the peer; released; (s, peer CPU, node CPU)."""
    fmt = "DIRECT=TCP:127.0.0.1\\private$\\" + tag
    s, _ = node.api_post("/api/msmq/action", {"object": "MACHINE", "action": "DISCONNECT"})
    assert s in (200, 204), s
    c = amqp.Connection("%s:%d" % (run.HOST, node.port), userid="guest", password="guest")
    c.connect()
    ch = c.channel()
    if tx:
        ch.tx_select()
    else:
        ch.confirm_select()
    for i in range(n):
        ch.basic_publish(amqp.Message(b"x" * 16, delivery_mode=2), exchange="", routing_key=fmt)
        if tx and i % 100 == 99:
            ch.tx_commit()
    if tx:
        ch.tx_commit()
    c.close()
    p0, n0, t0 = self_cpu(), cpu_s(node.proc.pid), time.monotonic()
    s, _ = node.api_post("/api/msmq/action", {"object": "MACHINE", "action": "CONNECT"})
    assert s in (200, 204), s
    deadline = t0 + 600
    while len(peer.queue(tag)) < n:
        assert time.monotonic() < deadline, "the peer never got them all"
        time.sleep(0.002)
    res = (time.monotonic() - t0, self_cpu() - p0, cpu_s(node.proc.pid) - n0, None)
    assert peer.duplicates == 0 and peer.out_of_order == 0 and not peer.errors
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--sluiced", default=str(REPO / "build" / "sluiced"))
    ap.add_argument("--only", help="comma-separated: recv_rec,recv_tx,recv_ack,send_rec,"
                    "send_tx (recv_ack is not in the default set)")
    ap.add_argument("--smoke", action="store_true", help="CI: 500 messages, one round")
    a = ap.parse_args()
    if a.smoke:
        a.n, a.rounds = 500, 1
    rows = (a.only or "recv_rec,recv_tx,send_rec,send_tx").split(",")
    tmp = Path(tempfile.mkdtemp(prefix="sluice-mqqb-"))
    peer = mq.Receiver()
    node = start_node(a.sluiced, tmp / "node", peer.port)
    out = {r: [] for r in rows}
    try:
        for rnd in range(a.rounds):
            for r in rows:
                tag = "%s%d" % (r, rnd)
                tx = r.endswith("tx")
                if r.startswith("recv"):
                    res = recv_run(node, a.n, tx, tag, ack=r == "recv_ack")
                else:
                    res = send_run(node, peer, a.n, tx, tag)
                out[r].append(res)
                print("round %d %-8s %6d x 16 B: %8.0f msg/s  (%.2f s; CPU: peer %.0f us/msg, "
                      "sluiced %.0f us/msg%s)" % (
                          rnd + 1, r, a.n, a.n / res[0], res[0], res[1] * 1e6 / a.n,
                          res[2] * 1e6 / a.n,
                          "; %d OrderAcks received" % res[3] if res[3] else ""), flush=True)
    finally:
        node.stop()
        peer.close()
    shutil.rmtree(tmp, ignore_errors=True)
    print("\n| row | N | msg/s (median of %d) | peer CPU us/msg | sluiced CPU us/msg |"
          % a.rounds)
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        med = statistics.median(x[0] for x in out[r])
        print("| %s | %d | %.0f | %.0f | %.0f |" % (
            r, a.n, a.n / med, statistics.median(x[1] for x in out[r]) * 1e6 / a.n,
            statistics.median(x[2] for x in out[r]) * 1e6 / a.n))


if __name__ == "__main__":
    main()
