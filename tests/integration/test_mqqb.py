"""MS-MQQB door (src/msmq/): a Python peer written from the specification
(mqqb_peer.py) plays a Windows queue manager sending to Sluice over TCP."""

import base64
import json
import re
import socket
import struct
import time
import urllib.request

import pytest

import mqqb_peer as mq
from helpers import uname, wait_for

MSMQ_RE = re.compile(rb"listening msmq=([0-9.]+):(\d+)")


def msmq_port(b):
    def find():
        m = None
        for m in MSMQ_RE.finditer(open(b.log_path, "rb").read()):
            pass
        return m
    m = wait_for(find, 5, message="no 'listening msmq=' line")
    return int(m.group(2))


def start(broker_factory, data_dir=None, **extra):
    cfg = {"listeners.msmq": "0"}
    cfg.update(extra)
    b = broker_factory(config=cfg, data_dir=data_dir)
    return b, msmq_port(b)


def declare(b, name, durable=True):
    c = b.amqp()
    ch = c.channel()
    ch.queue_declare(name, durable=durable, auto_delete=False)
    return c, ch


def drain(ch, q, limit=10000):
    out = []
    for _ in range(limit):
        m = ch.basic_get(q, no_ack=True)
        if m is None:
            break
        out.append(m)
    return out


def fmt(q):
    return "TCP:127.0.0.1\\private$\\" + q


def test_off_unless_configured(broker_factory):
    b = broker_factory()
    b.assert_alive()  # the loop runs: every listener's line was logged before it started
    assert b"listening msmq=" not in open(b.log_path, "rb").read()


def test_session_establishment_and_express_message(broker_factory):
    b, port = start(broker_factory)
    q = uname("orders")
    _c, ch = declare(b, q, durable=False)
    s = mq.Sender("127.0.0.1", port)
    ec, cp = s.establish(window=64, rec_ack_timeout=500)
    assert not ec.refused
    assert ec.client_guid == s.guid
    assert ec.server_guid != b"\0" * 16  # direct format name: the acceptor's own GUID
    assert ec.timestamp == 12345 and ec.os_flags == 0x0310
    assert ec.padding == b"\x5a" * 512
    assert (cp.rec_ack_timeout, cp.ack_timeout, cp.window) == (500, 120000, 64)
    s.send(fmt(q), "hello windows".encode("utf-16-le"), label="greeting", body_type=8,
           priority=5, app_tag=77, correlation=b"\x01" * 16 + struct.pack("<I", 9))
    # one express message: acknowledged on the session ack timer (500 ms)
    s.wait(lambda: s.acks and s.acks[-1].ack_seq == 1)
    m = wait_for(lambda: ch.basic_get(q, no_ack=True), 5)
    assert m.body.encode("utf-16-le") if isinstance(m.body, str) else m.body
    p = m.properties
    h = p["application_headers"]
    assert h["x-msmq-label"] == "greeting"
    assert h["x-msmq-app-specific"] == 77
    assert h["x-msmq-body-type"] == 8
    assert h["x-msmq-delivery"] == 0
    assert p["priority"] == 5
    assert p["delivery_mode"] == 1
    assert p["content_encoding"] == "utf-16le"
    assert p["message_id"].endswith("\\1")
    assert p["correlation_id"].endswith("\\9")
    s.close()


def test_session_ack_by_window(broker_factory):
    b, port = start(broker_factory)
    q = uname("w")
    declare(b, q, durable=False)
    s = mq.Sender("127.0.0.1", port)
    s.establish(window=4, rec_ack_timeout=120000)  # the timer never fires here
    s.send(fmt(q), b"1")
    with pytest.raises(TimeoutError):
        s.pump(timeout=0.7)  # one message: below half the window
    s.send(fmt(q), b"2")
    p = s.pump(timeout=5)  # two: half the window, acknowledged at once
    assert p.kind == "session_ack" and p.ack_seq == 2 and p.window == 4
    s.close()


def test_recoverable_acked_once_on_disk_and_survive_kill9(broker_factory):
    b, port = start(broker_factory)
    q = uname("rec")
    declare(b, q)
    s = mq.Sender("127.0.0.1", port)
    s.establish(window=8, rec_ack_timeout=500)
    for i in range(40):
        s.send(fmt(q), b"m%d" % i, recoverable=True)
    s.wait(lambda: s.rec_acked >= set(range(1, 41)))
    assert s.acks[-1].ack_seq == 40
    b.kill9()
    b2 = broker_factory(config={"listeners.msmq": "0"}, data_dir=b.data_dir)
    c = b2.amqp()
    ch = c.channel()
    got = [m.body for m in drain(ch, q)]
    got = [g.encode() if isinstance(g, str) else g for g in got]
    assert got == [b"m%d" % i for i in range(40)]


def test_recoverable_ack_waits_for_the_sync(broker_factory):
    """With every fdatasync made 800 ms slower, a recoverable message's ack bit comes no
    sooner; the session ack timer meanwhile acknowledges only the packet count."""
    b = broker_factory(config={"listeners.msmq": "0"}, env={"SLUICE_FAULT": "sync_delay_ms=800"})
    port = msmq_port(b)
    q = uname("slow")
    declare(b, q)
    s = mq.Sender("127.0.0.1", port)
    s.establish(window=64, rec_ack_timeout=500)
    t0 = time.monotonic()
    s.send(fmt(q), b"r", recoverable=True)
    s.wait(lambda: 1 in s.rec_acked, timeout=15)
    assert time.monotonic() - t0 >= 0.75
    early = [a for a in s.acks[:-1]]
    assert all(a.rec_ack_flags == 0 for a in early)


def test_transactional_exactly_once_in_order(broker_factory):
    b, port = start(broker_factory)
    q = uname("tx")
    _c, ch = declare(b, q)
    s = mq.Sender("127.0.0.1", port)
    s.establish()
    seq = (0x5F000000 << 32) | 7
    for n in range(1, 6):
        s.send(fmt(q), b"t%d" % n, tx=(seq, n, n - 1))
    s.wait(lambda: s.last_order_ack(seq) == 5)
    # duplicates (a resend after a lost order ack): dropped, acked again
    for n in range(3, 6):
        s.send(fmt(q), b"dup%d" % n, tx=(seq, n, n - 1))
    # out of order (7 after 5): refused
    s.send(fmt(q), b"t7-early", tx=(seq, 7, 6))
    s.send(fmt(q), b"t6", tx=(seq, 6, 5))
    s.send(fmt(q), b"t7", tx=(seq, 7, 6))
    s.wait(lambda: s.last_order_ack(seq) == 7)
    got = [m.body for m in drain(ch, q)]
    got = [g.encode() if isinstance(g, str) else g for g in got]
    assert got == [b"t%d" % n for n in range(1, 8)]
    # the sequence is kept across sessions: a new session resending 7 is a duplicate
    s.close()
    s2 = mq.Sender("127.0.0.1", port, guid=s.guid)
    s2.establish()
    s2.send(fmt(q), b"again7", tx=(seq, 7, 6))
    s2.wait(lambda: s2.last_order_ack(seq) == 7)
    assert drain(ch, q) == []


@pytest.mark.test_timeout(60)
def test_transactional_kill9_mid_sequence(broker_factory):
    """Every message exactly once, in order, whatever moment the node dies at: the sender
    resends from its last order ack, as MSMQ does."""
    b, port = start(broker_factory)
    q = uname("txk")
    declare(b, q)
    guid = b"\x42" * 16
    seq = (0x61000000 << 32) | 1
    total = 200
    s = mq.Sender("127.0.0.1", port, guid=guid)
    s.establish()
    for n in range(1, 121):
        s.send(fmt(q), b"x%d" % n, tx=(seq, n, n - 1))
    s.wait(lambda: s.last_order_ack(seq) >= 30)
    b.kill9()  # mid-sequence: some of 1..120 are on disk, some not, some acked
    acked = s.last_order_ack(seq)
    s.close()
    b2, port2 = start(broker_factory, data_dir=b.data_dir)
    s2 = mq.Sender("127.0.0.1", port2, guid=guid)
    s2.establish()
    # resend everything not order-acked (with its original numbers), then the rest
    for n in range(acked + 1, total + 1):
        s2.send(fmt(q), b"x%d" % n, tx=(seq, n, n - 1))
    s2.wait(lambda: s2.last_order_ack(seq) == total, timeout=30)
    c = b2.amqp()
    ch = c.channel()
    got = [m.body for m in drain(ch, q)]
    got = [g.encode() if isinstance(g, str) else g for g in got]
    assert got == [b"x%d" % n for n in range(1, total + 1)]


def test_order_acks_one_per_sync_not_one_per_message(broker_factory):
    """OrderAcks are cumulative: numbers that reach the disk in the same sync get one."""
    b, port = start(broker_factory)
    q = uname("txb")
    declare(b, q)
    seq = (0x62000000 << 32) | 1
    s = mq.Sender("127.0.0.1", port)
    s.establish()
    # 60 messages in one write (inside the window): they arrive in a turn or two
    s.sock.sendall(b"".join(mq.user_message(s.guid, fmt(q), b"y%d" % n, tx=(seq, n, n - 1),
                                            message_id=n) for n in range(1, 61)))
    s.wait(lambda: s.last_order_ack(seq) == 60, timeout=20)
    assert len(s.order_acks) < 30, len(s.order_acks)
    nos = [n for _sid, n in s.order_acks]
    assert nos == sorted(nos) and nos[-1] == 60


def test_unknown_queue(broker_factory):
    b, port = start(broker_factory)
    s = mq.Sender("127.0.0.1", port)
    s.establish(window=2)
    # express / recoverable: dropped (acknowledged, logged), the session goes on
    s.send(fmt("nosuch"), b"x", recoverable=True)
    s.wait(lambda: 1 in s.rec_acked)
    # transactional: accepted into the sequence, a FinalAck NACK_BAD_DST_Q comes back
    seq = (7 << 32) | 3
    s.send(fmt("nosuch"), b"y", tx=(seq, 1, 0), message_id=99)
    s.wait(lambda: s.final_acks and s.last_order_ack(seq) == 1)
    fa = s.final_acks[0]
    assert fa.msg_class == mq.CLASS_NACK_BAD_DST_Q
    assert fa.label == "QM Ordering Ack"
    assert fa.acked_message_id == 99 and fa.acked_source == s.guid
    assert fa.dest == "TCP:127.0.0.1\\PRIVATE$\\order_queue$"
    assert b"dropped: no such queue" in open(b.log_path, "rb").read()


def test_transactional_full_queue_and_encrypted_body(broker_factory):
    b, port = start(broker_factory)
    q = uname("full")
    c = b.amqp()
    ch = c.channel()
    ch.queue_declare(q, durable=True, auto_delete=False,
                     arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    s = mq.Sender("127.0.0.1", port)
    s.establish()
    seq = (9 << 32) | 1
    for n in range(1, 4):
        s.send(fmt(q), b"f%d" % n, tx=(seq, n, n - 1))
    s.wait(lambda: s.last_order_ack(seq) == 2)
    # 3 was refused (full): not in the sequence, the sender resends it once there is room
    assert ch.basic_get(q, no_ack=True).body in ("f1", b"f1")
    s.send(fmt(q), b"f3", tx=(seq, 3, 2))
    s.wait(lambda: s.last_order_ack(seq) == 3)
    got = [m.body for m in drain(ch, q)]
    assert [g.encode() if isinstance(g, str) else g for g in got] == [b"f2", b"f3"]
    # an encrypted body cannot be read here: FinalAck NACK_BAD_ENCRYPTION, sequence goes on
    s.send(fmt(q), b"\x8f" * 16, tx=(seq, 4, 3), privacy=3, message_id=44)
    s.wait(lambda: s.final_acks and s.last_order_ack(seq) == 4)
    assert s.final_acks[0].msg_class == 0x8007
    assert drain(ch, q) == []


def test_refuses_another_queue_managers_session(broker_factory):
    b, port = start(broker_factory)
    s = mq.Sender("127.0.0.1", port)
    ec, cp = s.establish(server_guid=b"\x99" * 16)
    assert ec.refused and cp is None
    with pytest.raises(EOFError):
        s.read_packet(timeout=5)


def node_action(b, action):
    req = urllib.request.Request(
        "http://127.0.0.1:%d/api/msmq/action" % b.mgmt_port, method="POST",
        data=json.dumps({"object": "MACHINE", "action": action}).encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status in (200, 204)


def test_ping_and_offline_node(broker_factory):
    b, port = start(broker_factory)
    m = wait_for(lambda: re.search(rb"listening msmq-ping=[0-9.]+:(\d+)",
                                   open(b.log_path, "rb").read()), 5)
    ping_port = int(m.group(1))
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(5)
    guid = b"\x21" * 16

    def ping(cookie):
        u.sendto(struct.pack("<HHI", 0x0001, 0x5548, cookie) + guid, ("127.0.0.1", ping_port))
        data, _ = u.recvfrom(100)
        flags, sig, ck = struct.unpack_from("<HHI", data)
        assert sig == 0x5548 and ck == cookie and len(data) == 24
        return flags, data[8:24]

    flags, qm = ping(4)
    assert flags & 3 == 1  # RC echoed, RF clear: a session would be accepted
    s = mq.Sender("127.0.0.1", port, guid=guid)
    ec, _cp = s.establish()
    assert ec.server_guid == qm
    s.close()
    node_action(b, "DISCONNECT")
    flags, _ = ping(5)
    assert flags & 3 == 3  # offline: RF set
    s = mq.Sender("127.0.0.1", port, guid=guid)
    ec, cp = s.establish()
    assert ec.refused and cp is None
    s.close()
    node_action(b, "CONNECT")
    assert ping(6)[0] & 2 == 0
    u.close()


def _closed(sock, timeout=5):
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True


def test_hostile_sessions_close_cleanly(broker_factory):
    b, port = start(broker_factory, **{"msmq.idle_timeout": "400",
                                       "msmq.handshake_timeout": "400"})
    q = uname("h")
    declare(b, q, durable=False)
    # truncated header, then the peer goes away
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(mq.establish_request(b"\1" * 16)[:30])
    s.close()
    # a lying PacketSize (4 MiB + 1 and more): closed before anything is buffered
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(mq.base_header(3, 0x00400001 + 4096))
    assert _closed(s)
    # bad signature
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"\x10\0\0\0GARBAGEGARBAGE!" * 4)
    assert _closed(s)
    # a UserMessage before the session is established
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(mq.user_message(b"\2" * 16, fmt(q), b"x"))
    assert _closed(s)
    # a header whose lengths lie inside an otherwise framed packet
    p = mq.Sender("127.0.0.1", port)
    p.establish()
    pkt = bytearray(mq.user_message(p.guid, fmt(q), b"abc", label="l"))
    # the MessagePropertiesHeader is the last 64 bytes: 56 fixed, label "l", "abc", 1 pad
    struct.pack_into("<I", pkt, len(pkt) - 64 + 32, 0x7FFFFFFF)  # MessageSize
    p.sock.sendall(bytes(pkt))
    with pytest.raises(EOFError):
        while True:
            p.pump(timeout=5)
    # a stalled session: half a packet, then silence
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(mq.establish_request(b"\3" * 16)[:100])
    t0 = time.monotonic()
    assert _closed(s, timeout=10)
    assert time.monotonic() - t0 < 8
    # a message over 4 MiB is refused (the specification's ceiling); one under it arrives
    # (packets built before the session opens: building 4 MiB in Python on a busy machine
    # can take longer than the idle timeout of this test)
    guid = b"\5" * 16
    big = mq.user_message(guid, fmt(q), b"z" * (4 * 1024 * 1024 + 10))
    fits = mq.user_message(guid, fmt(q), b"y" * (3 * 1024 * 1024))
    p = mq.Sender("127.0.0.1", port, guid=guid)
    p.establish()
    try:
        p.sock.sendall(big)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert _closed(p.sock)
    p = mq.Sender("127.0.0.1", port, guid=guid)
    p.establish()
    p.sock.sendall(fits)
    c = b.amqp()
    ch = c.channel()
    m = wait_for(lambda: ch.basic_get(q, no_ack=True), 10)
    assert len(m.body) == 3 * 1024 * 1024
    b.assert_alive()


def test_transactional_sequence_crosses_the_32_bit_wrap(broker_factory):
    """TxSequenceNumber has 32 bits: a sender at 0xFFFFFFFF goes on with a new, larger
    TxSequenceID whose first message has TxPreviousSequenceNumber 0 (MS-MQQB 3.1.1.5).
    Every message once, in order; a resend on the old sequence is still a duplicate."""
    b, port = start(broker_factory, **{"msmq.seq_window": "4294967295"})
    q = uname("wrap")
    _c, ch = declare(b, q)
    s = mq.Sender("127.0.0.1", port)
    s.establish()
    old = (0x62000000 << 32) | 1
    new = old + (1 << 32)
    s.send(fmt(q), b"a", tx=(old, 0xFFFFFFFE, 0))
    s.send(fmt(q), b"b", tx=(old, 0xFFFFFFFF, 0xFFFFFFFE))
    s.send(fmt(q), b"c", tx=(new, 1, 0))
    s.send(fmt(q), b"d", tx=(new, 2, 1))
    s.wait(lambda: s.last_order_ack(old) == 0xFFFFFFFF and s.last_order_ack(new) == 2)
    s.send(fmt(q), b"b-again", tx=(old, 0xFFFFFFFF, 0xFFFFFFFE))
    s.send(fmt(q), b"c-again", tx=(new, 1, 0))
    s.send(fmt(q), b"e", tx=(new, 3, 2))
    s.wait(lambda: s.last_order_ack(new) == 3)
    got = [g.encode() if isinstance(g, str) else g for g in (m.body for m in drain(ch, q))]
    assert got == [b"a", b"b", b"c", b"d", b"e"]


def test_transactional_jump_beyond_the_window_is_refused_and_audited(broker_factory):
    """A message whose number jumps more than msmq.seq_window past the last accepted one is
    no real sender's (one accepted 0xFFFFFFFF would turn the rest of the sequence into
    duplicates): refused, not taken into the sequence, an audit line; the sequence goes on."""
    b, port = start(broker_factory, **{"msmq.seq_window": "1000"})
    q = uname("jump")
    _c, ch = declare(b, q)
    s = mq.Sender("127.0.0.1", port)
    s.establish()
    seq = (0x63000000 << 32) | 1
    s.send(fmt(q), b"one", tx=(seq, 1, 0))
    s.wait(lambda: s.last_order_ack(seq) == 1)
    s.send(fmt(q), b"forged", tx=(seq, 0xFFFFFFFF, 1))
    s.send(fmt(q), b"near", tx=(seq, 1001, 1))  # within the window: accepted
    s.wait(lambda: s.last_order_ack(seq) == 1001)
    s.send(fmt(q), b"two", tx=(seq, 1002, 1001))
    s.wait(lambda: s.last_order_ack(seq) == 1002)
    got = [g.encode() if isinstance(g, str) else g for g in (m.body for m in drain(ch, q))]
    assert got == [b"one", b"near", b"two"]
    log = open(b.log_path, "rb").read()
    assert log.count(b"audit: msmq message refused") == 1
    assert b"message 4294967295 (previous 1) jumps beyond last accepted 1 + 1000" in log
