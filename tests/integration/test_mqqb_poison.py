"""Issue 43 part 2: an MS-MQQB sender's sequence cannot be poisoned.

MS-MQQB carries no credentials: anyone who reaches the MSMQ port can claim a queue manager's
GUID and send on its TxSequenceID (both are in every delivered message's headers). A message
is accepted only in order (MS-MQQB 3.1.5.8.6, 3.1.1.5): its TxPreviousSequenceNumber names
the last number this node accepted for that sequence, or it is the very next number; no
message moves a sequence past numbers it never saw unless it says, by naming the last one,
that they were never sent (bounded by msmq.seq_window), and then only from the address the
sequence is bound to (its first mover on this node). A refused jump is one audit line.
And msmq.allowed_senders says which addresses may open a session at all."""

import re
import subprocess

import pytest

import mqqb_peer as mq
from conftest import sluiced_binary
from helpers import uname, wait_for
from test_mqqb import declare, drain, fmt, start

AUDIT = b"audit: msmq message refused"


def bodies(ch, q):
    return [m.body if isinstance(m.body, bytes) else m.body.encode() for m in drain(ch, q)]


def log(b):
    return open(b.log_path, "rb").read()


def pumped(s, timeout=0.2):
    """Read what the node sent (order acks), if anything came; never true."""
    try:
        s.pump(timeout)
    except TimeoutError:
        pass
    return False


def test_a_forged_jump_on_a_real_senders_sequence_loses_nothing(broker_factory):
    """The issue's scenario: G sends 1..5; an attacker claiming G's GUID sends on G's
    sequence 2^31 and then 0xFFFFFFFF, both with previous 0. Neither is accepted, each is an
    audit line, and G's next 10 messages are all delivered (not dropped as duplicates)."""
    b, port = start(broker_factory)
    q = uname("poison")
    _c, ch = declare(b, q)
    g = mq.Sender("127.0.0.1", port)
    g.establish()
    seq = (0x64000000 << 32) | 7
    for n in range(1, 6):
        g.send(fmt(q), b"g%d" % n, tx=(seq, n, n - 1))
    g.wait(lambda: g.last_order_ack(seq) == 5)

    evil = mq.Sender("127.0.0.1", port, guid=g.guid)
    evil.establish()
    evil.send(fmt(q), b"forged-1", tx=(seq, 1 << 31, 0))
    evil.send(fmt(q), b"forged-2", tx=(seq, 0xFFFFFFFF, 0))
    # both decided: two audit lines (fixed) or the sequence moved to 0xFFFFFFFF (unfixed)
    wait_for(lambda: log(b).count(AUDIT) >= 2 or evil.last_order_ack(seq) == 0xFFFFFFFF
             or pumped(evil), 10, message="the forged messages were not decided")
    evil.close()

    for n in range(6, 16):
        g.send(fmt(q), b"g%d" % n, tx=(seq, n, n - 1))
    g.wait(lambda: g.last_order_ack(seq) >= 15)
    assert g.last_order_ack(seq) == 15  # the sequence never moved past what G sent
    assert bodies(ch, q) == [b"g%d" % n for n in range(1, 16)]
    text = log(b)
    assert text.count(AUDIT) == 2, text[-3000:]
    gs = mq.guid_text(g.guid).encode()
    for n in (1 << 31, 0xFFFFFFFF):
        line = re.search(rb"audit: msmq message refused: session [^\n]*message %d[^\n]*" % n,
                         text)
        assert line and gs.lower() in line.group(0).lower(), text[-3000:]
        assert b"previous 0" in line.group(0) and b"last accepted 5" in line.group(0)


def closed_line(b, s):
    """Close session s and return the node's 'closed' line for it (its counts)."""
    port = s.sock.getsockname()[1]
    s.close()
    pat = re.compile(rb"msmq session [^\s]*:%d closed: [^\n]*" % port)
    return wait_for(lambda: pat.search(log(b)), 10, message="the session was not closed").group(0)


def test_two_declared_gaps_under_the_default_window_lose_nothing(broker_factory):
    """The review's attack on issue 43's rule: the forger learns G's last number L from the
    OrderAck its own duplicate gets (or from a delivered message's headers), then declares a
    gap to L + 2^31 (previous L) and another to 0xFFFFFFFF (previous L + 2^31), each within
    the default msmq.seq_window. A declared gap is taken only from the address the sequence
    is bound to (G's, 127.0.0.1); the forger comes from 127.0.0.2: refused and audited with
    both addresses, and G's next 10 messages are all delivered. (Before the fix: the forger's
    session closed with 'accepted 2, duplicates 1' and G's 6..15 were dropped as duplicates.)"""
    b, port = start(broker_factory)
    q = uname("gaps")
    _c, ch = declare(b, q)
    g = mq.Sender("127.0.0.1", port, source="127.0.0.1")
    g.establish()
    seq = (0x68000000 << 32) | 7
    for n in range(1, 6):
        g.send(fmt(q), b"g%d" % n, tx=(seq, n, n - 1))
    g.wait(lambda: g.last_order_ack(seq) == 5)

    evil = mq.Sender("127.0.0.1", port, guid=g.guid, source="127.0.0.2")
    evil.establish()
    evil.send(fmt(q), b"dup", tx=(seq, 1, 0))  # a duplicate: its OrderAck names L
    evil.wait(lambda: evil.last_order_ack(seq) >= 1)
    last = evil.last_order_ack(seq)
    assert last == 5
    evil.send(fmt(q), b"forged-1", tx=(seq, last + (1 << 31), last))
    evil.send(fmt(q), b"forged-2", tx=(seq, 0xFFFFFFFF, last + (1 << 31)))
    wait_for(lambda: AUDIT in log(b), 10, message="no audit line for the forged gap")
    # both decided, in order on its session: nothing accepted
    assert b"(accepted 0, duplicates 1, refused 2)" in closed_line(b, evil)

    for n in range(6, 16):
        g.send(fmt(q), b"g%d" % n, tx=(seq, n, n - 1))
    g.wait(lambda: g.last_order_ack(seq) >= 15)
    assert g.last_order_ack(seq) == 15, g.last_order_ack(seq)
    got = bodies(ch, q)
    assert got == [b"g%d" % n for n in range(1, 16)], got
    text = log(b)
    assert text.count(AUDIT) == 1, text[-3000:]  # forged-2 is out of order (previous > L)
    line = re.search(rb"audit: msmq message refused: [^\n]*", text).group(0)
    assert b"message %d (previous 5)" % (5 + (1 << 31)) in line, line
    assert b"from 127.0.0.2, but the sequence's sender address is 127.0.0.1" in line, line


def test_a_gap_declared_from_the_senders_own_address_is_accepted(broker_factory):
    """The real sender's gaps still work (expired messages, MS-MQQB 3.1.1.5; a Sluice
    sender's lookup ids): on its own session and on a new session from the same address
    (a reconnect), a gap naming the last number is accepted, no audit line."""
    b, port = start(broker_factory)
    q = uname("owngap")
    _c, ch = declare(b, q)
    g = mq.Sender("127.0.0.1", port, source="127.0.0.1")
    g.establish()
    seq = (0x69000000 << 32) | 1
    g.send(fmt(q), b"m1", tx=(seq, 1, 0))
    g.send(fmt(q), b"m2", tx=(seq, 2, 1))
    g.send(fmt(q), b"m100", tx=(seq, 100, 2))  # 3..99 expired
    g.wait(lambda: g.last_order_ack(seq) == 100)
    g.close()
    g2 = mq.Sender("127.0.0.1", port, guid=g.guid, source="127.0.0.1")
    g2.establish()
    g2.send(fmt(q), b"m101", tx=(seq, 101, 100))
    g2.send(fmt(q), b"big", tx=(seq, 101 + (1 << 30), 101))
    g2.wait(lambda: g2.last_order_ack(seq) == 101 + (1 << 30))
    assert bodies(ch, q) == [b"m1", b"m2", b"m100", b"m101", b"big"]
    assert AUDIT not in log(b)


def test_a_forger_who_takes_the_next_number_does_not_get_the_sequence(broker_factory):
    """The next number is accepted from any allowed address (MS-MQQB has no credentials; a
    forger takes one number at a time, msmq.allowed_senders is the lever), but it does not
    move the sequence's address: the forger's gap after it is refused, and the real sender
    loses that one number only."""
    b, port = start(broker_factory)
    q = uname("nextnum")
    _c, ch = declare(b, q)
    g = mq.Sender("127.0.0.1", port, source="127.0.0.1")
    g.establish()
    seq = (0x6A000000 << 32) | 1
    for n in (1, 2, 3):
        g.send(fmt(q), b"g%d" % n, tx=(seq, n, n - 1))
    g.wait(lambda: g.last_order_ack(seq) == 3)
    evil = mq.Sender("127.0.0.1", port, guid=g.guid, source="127.0.0.2")
    evil.establish()
    evil.send(fmt(q), b"forged-4", tx=(seq, 4, 3))
    evil.send(fmt(q), b"forged-gap", tx=(seq, 4 + (1 << 31), 4))
    wait_for(lambda: AUDIT in log(b), 10, message="no audit line for the forged gap")
    assert b"(accepted 1, duplicates 0, refused 1)" in closed_line(b, evil)
    for n in range(4, 9):
        g.send(fmt(q), b"g%d" % n, tx=(seq, n, n - 1))
    g.wait(lambda: g.last_order_ack(seq) >= 8)
    assert g.last_order_ack(seq) == 8
    assert bodies(ch, q) == [b"g1", b"g2", b"g3", b"forged-4"] + [b"g%d" % n for n in range(5, 9)]


def test_a_small_jump_is_refused_too(broker_factory):
    """No step, however small, moves a sequence past a number it never saw: n+2 with
    previous 0 or n-1 (the spec's rule alone, PreviousTxSequenceNumber <= last, would take
    them) is refused and audited; n+2 with previous n+1 (n+1 missing) is out of order,
    refused as ever; the real n+1, n+2 then go in, in order, nothing lost."""
    b, port = start(broker_factory)
    q = uname("small")
    _c, ch = declare(b, q)
    s = mq.Sender("127.0.0.1", port)
    s.establish()
    seq = (0x65000000 << 32) | 1
    for n in (1, 2, 3):
        s.send(fmt(q), b"m%d" % n, tx=(seq, n, n - 1))
    s.wait(lambda: s.last_order_ack(seq) == 3)
    s.send(fmt(q), b"x-prev0", tx=(seq, 5, 0))
    s.send(fmt(q), b"x-prev2", tx=(seq, 5, 2))
    s.send(fmt(q), b"x-prev4", tx=(seq, 5, 4))
    wait_for(lambda: log(b).count(AUDIT) >= 2 or s.last_order_ack(seq) >= 5
             or pumped(s), 10, message="the jumps were not decided")
    s.send(fmt(q), b"m4", tx=(seq, 4, 3))
    s.send(fmt(q), b"m5", tx=(seq, 5, 4))
    s.wait(lambda: s.last_order_ack(seq) >= 5)
    assert bodies(ch, q) == [b"m1", b"m2", b"m3", b"m4", b"m5"]
    text = log(b)
    assert text.count(AUDIT) == 2, text[-3000:]
    assert b"message 5 (previous 0)" in text and b"message 5 (previous 2)" in text


def test_the_rule_holds_after_a_restart(broker_factory):
    """The last accepted numbers are in the store: after a kill -9 and a restart the forged
    jump is refused the same way and the real sender goes on from its number."""
    b, port = start(broker_factory)
    q = uname("restart")
    _c, ch = declare(b, q)
    g = mq.Sender("127.0.0.1", port)
    g.establish()
    seq = (0x67000000 << 32) | 3
    for n in (1, 2, 3):
        g.send(fmt(q), b"r%d" % n, tx=(seq, n, n - 1))
    g.wait(lambda: g.last_order_ack(seq) == 3)  # order-acked: on disk
    g.close()
    b.kill9()
    b2, port2 = start(broker_factory, data_dir=b.data_dir)
    evil = mq.Sender("127.0.0.1", port2, guid=g.guid)
    evil.establish()
    evil.send(fmt(q), b"forged", tx=(seq, 1 << 31, 0))
    evil.wait(lambda: evil.last_order_ack(seq) >= 3)
    assert evil.last_order_ack(seq) == 3
    g2 = mq.Sender("127.0.0.1", port2, guid=g.guid)
    g2.establish()
    g2.send(fmt(q), b"r4", tx=(seq, 4, 3))
    g2.wait(lambda: g2.last_order_ack(seq) >= 4)
    _c2, ch2 = declare(b2, q)
    assert bodies(ch2, q) == [b"r1", b"r2", b"r3", b"r4"]
    assert log(b2).count(AUDIT) == 1


def test_a_new_sequence_starts_at_previous_0_and_an_old_one_is_unharmed(broker_factory):
    """A sender that starts a new, larger TxSequenceID (MS-MQQB 3.1.1.5: all of the old one
    acknowledged) begins it with previous 0; its own numbers count from there. A forged
    message on a sequence the node has no state for that names a previous number is out of
    order; one that starts far beyond msmq.seq_window is refused and audited."""
    b, port = start(broker_factory, **{"msmq.seq_window": "1000"})
    q = uname("newseq")
    _c, ch = declare(b, q)
    s = mq.Sender("127.0.0.1", port)
    s.establish()
    old = (0x66000000 << 32) | 1
    new = old + 1
    s.send(fmt(q), b"a1", tx=(old, 1, 0))
    s.send(fmt(q), b"a2", tx=(old, 2, 1))
    s.wait(lambda: s.last_order_ack(old) == 2)
    s.send(fmt(q), b"b1", tx=(new, 1, 0))
    s.send(fmt(q), b"forged", tx=(new + 1, 0xFFFFFFFF, 0))  # a predicted next sequence
    s.send(fmt(q), b"b2", tx=(new, 2, 1))
    s.wait(lambda: s.last_order_ack(new) == 2)
    wait_for(lambda: AUDIT in log(b), 10, message="no audit line")
    s.send(fmt(q), b"c1", tx=(new + 1, 1, 0))
    s.wait(lambda: s.last_order_ack(new + 1) == 1)
    assert bodies(ch, q) == [b"a1", b"a2", b"b1", b"b2", b"c1"]


def test_allowed_senders_refuses_other_addresses_before_any_packet(broker_factory):
    """msmq.allowed_senders = 127.0.0.1/32: a session from 127.0.0.2 is closed before any
    packet is read (no EstablishConnection answer), with an audit line; 127.0.0.1 works."""
    b, port = start(broker_factory, **{"msmq.allowed_senders": "127.0.0.1/32, ::1/128"})
    q = uname("allowed")
    _c, ch = declare(b, q, durable=False)
    bad = mq.Sender("127.0.0.1", port, source="127.0.0.2")
    with pytest.raises((EOFError, ConnectionResetError, BrokenPipeError)):
        bad.establish()
        bad.send(fmt(q), b"from-outside")
        bad.read_packet(5)
    bad.close()
    wait_for(lambda: b"audit: msmq session refused: 127.0.0.2" in log(b), 5,
             message="no audit line for the refused session")
    good = mq.Sender("127.0.0.1", port, source="127.0.0.1")
    ec, _cp = good.establish()
    assert not ec.refused
    good.send(fmt(q), b"from-inside")
    m = wait_for(lambda: ch.basic_get(q, no_ack=True), 5)
    assert m.body in (b"from-inside", "from-inside")
    assert ch.basic_get(q, no_ack=True) is None
    good.close()


@pytest.mark.parametrize("value", ["10.0.0.0/33", "nonsense", "::1/129", "10.0.0.1/8x", ""])
def test_allowed_senders_bad_value_refuses_to_start(tmp_path, value):
    conf = tmp_path / "c.conf"
    conf.write_text("listeners.msmq = 0\nmsmq.allowed_senders = %s\n" % value)
    r = subprocess.run([str(sluiced_binary()), "--config", str(conf), "--port", "0",
                        "--data-dir", str(tmp_path / "d")], capture_output=True, timeout=30)
    assert r.returncode == 2 and b"msmq.allowed_senders" in r.stderr, r.stderr


def test_the_default_window_takes_any_gap_a_sluice_sender_declares(broker_factory):
    """A Sluice sender numbers with its node-wide lookup ids (src/link/): a queue's
    first message on a new 32-bit sequence (each 2^32 - 1 lookup ids) may land anywhere in
    1..0xFFFFFFFF, with previous 0, and two messages of a quiet queue may be more than 2^31
    apart. Under the default msmq.seq_window (0xFFFFFFFF) both are accepted from the
    sequence's own address; under the old 2^31 they were refused forever (the sender resends
    the same numbers), a stuck queue."""
    b, port = start(broker_factory)
    q = uname("bigwin")
    _c, ch = declare(b, q)
    s = mq.Sender("127.0.0.1", port, source="127.0.0.1")
    s.establish()
    seq = (0x6B000000 << 32) | 1
    s.send(fmt(q), b"first", tx=(seq, 0xF0000000, 0))
    s.wait(lambda: s.last_order_ack(seq) == 0xF0000000)
    old = (0x6C000000 << 32) | 1
    s.send(fmt(q), b"a", tx=(old, 1, 0))
    s.send(fmt(q), b"b", tx=(old, 0xC0000000, 1))
    s.wait(lambda: s.last_order_ack(old) == 0xC0000000)
    assert bodies(ch, q) == [b"first", b"a", b"b"]
    assert AUDIT not in log(b)
