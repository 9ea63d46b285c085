"""MSMQ administration acknowledgements for messages that left memory (issue 33's gaps): a
message whose Windows sender asked for receive acknowledgements still gets them when it was
recovered after a restart (clean or kill -9), or paged out to the store and read back, and a
receive acknowledgement is in one record group with the removal it reports, so a kill -9 at
any moment leaves exactly one of the two (the message or its acknowledgement).

The sender reaches Sluice as 127.0.0.1; its admin queue is on 127.0.0.2 (mqqb_peer.Receiver,
a host of msmq.hosts) or, for the store walk, a queue of this node."""

import shutil
import struct

import amqp
import pika
import pytest

import mqqb_peer as mq
from helpers import uname, wait_for
from test_mqqb import declare, fmt
from test_mqqb_acks import ADMIN, acks, peer, sender, start  # noqa: F401 (peer: fixture)

NEG = dict(admin=ADMIN, ack_flags=mq.ACK_NACK_RECEIVE)


def restart(broker_factory, peer, b, how, **extra):  # noqa: F811
    """Stop b (SIGTERM, or kill -9) and start a broker on its data."""
    if how == "kill9":
        b.kill9()
    else:
        assert b.terminate() == 0
    return start(broker_factory, peer, data_dir=b.data_dir, **extra)


def count(b, q):
    """The queue's message count, on a connection closed again: one left open makes the node's
    stop wait for its close-ok (2 s), and the tests stop many nodes."""
    c = b.amqp()
    try:
        return c.channel().queue_declare(q, passive=True).message_count
    finally:
        c.close()


@pytest.mark.parametrize("how", ["clean", "kill9"])
def test_purge_and_delete_nacks_after_a_restart(broker_factory, peer, how):  # noqa: F811
    """The mark that a queue holds messages asking for receive NACKs came from the MSMQ door's
    enqueue, in memory only: after a restart a purge or deletion sent nothing."""
    b, port = start(broker_factory, peer)
    q, d = uname("orders"), uname("doomed")
    declare(b, q)
    declare(b, d)
    s = sender(port)
    s.send(fmt(q), b"p1", recoverable=True, message_id=1, **NEG)
    s.send(fmt(q), b"p2", recoverable=True, message_id=2, **NEG)
    s.send(fmt(d), b"d3", recoverable=True, message_id=3, **NEG)
    s.wait(lambda: {1, 2, 3} <= s.rec_acked)  # on disk
    s.close()
    b2, _ = restart(broker_factory, peer, b, how)
    assert count(b2, q) == 2 and count(b2, d) == 1
    ch = b2.amqp().channel()
    ch.queue_purge(q)
    got, msgs = acks(peer, 2)
    assert got == [(mq.CLASS_NACK_Q_PURGED, s.guid, 1), (mq.CLASS_NACK_Q_PURGED, s.guid, 2)]
    assert [m.body for m in msgs] == [b"p1", b"p2"]
    ch.queue_delete(d)
    got, msgs = acks(peer, 3)
    assert got[2] == (mq.CLASS_NACK_Q_DELETED, s.guid, 3)
    assert msgs[2].body == b"d3"


@pytest.mark.parametrize("how", ["clean", "kill9"])
def test_receive_ack_and_timeout_after_a_restart(broker_factory, peer, how):  # noqa: F811
    """ACK_RECEIVE and NACK_RECEIVE_TIMEOUT for recovered messages (the x-msmq-ack header is
    in the stored properties)."""
    b, port = start(broker_factory, peer)
    q, t = uname("orders"), uname("slow")
    declare(b, q)
    declare(b, t)
    s = sender(port)
    s.send(fmt(q), b"taken", recoverable=True, admin=ADMIN, ack_flags=mq.ACK_FULL_RECEIVE,
           message_id=1)
    s.send(fmt(t), b"too slow", recoverable=True, message_id=2, ttbr=3, **NEG)
    s.wait(lambda: {1, 2} <= s.rec_acked)
    s.close()
    b2, _ = restart(broker_factory, peer, b, how)
    ch = b2.amqp().channel()
    assert ch.basic_get(q, no_ack=True).body == b"taken"
    got, _ = acks(peer, 2)
    assert sorted(got) == [(mq.CLASS_ACK_RECEIVE, s.guid, 1),
                           (mq.CLASS_NACK_RECEIVE_TIMEOUT, s.guid, 2)]


PAGING = {"memory_budget": "64k"}


def ballast(b, n=400):
    """Fill memory past memory_budget (64k) so that what is enqueued next is paged out."""
    c = b.pika()
    ch = c.channel()
    name = uname("ballast")
    ch.queue_declare(name, durable=True)
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", name, b"b" * 1024, pika.BasicProperties(delivery_mode=2))
    c.close()


def test_purge_delete_and_receive_of_paged_messages(broker_factory, peer):  # noqa: F811
    """Messages paged out to the store: a purge and a deletion read back the ones that asked
    (they were not read back for it), a consumer's take of one paged in sends ACK_RECEIVE."""
    b, port = start(broker_factory, peer, **PAGING)
    q, d, r = uname("orders"), uname("doomed"), uname("taken")
    declare(b, q)
    declare(b, d)
    declare(b, r)
    ballast(b)
    s = sender(port)
    big = b"x" * 2048
    for i in range(1, 21):  # 40 KB more, past the budget already: paged as they come
        s.send(fmt(q), big + b"%d" % i, recoverable=True, message_id=i, **NEG)
    s.send(fmt(d), b"d21", recoverable=True, message_id=21, **NEG)
    s.send(fmt(r), b"r22", recoverable=True, admin=ADMIN, ack_flags=mq.ACK_FULL_RECEIVE,
           message_id=22)
    s.wait(lambda: set(range(1, 23)) <= s.rec_acked)
    ch = b.amqp().channel()
    ch.queue_purge(q)
    got, msgs = acks(peer, 20)
    assert got == [(mq.CLASS_NACK_Q_PURGED, s.guid, i) for i in range(1, 21)]
    assert msgs[19].body == big + b"20"
    ch.queue_delete(d)
    got, _ = acks(peer, 21)
    assert got[20] == (mq.CLASS_NACK_Q_DELETED, s.guid, 21)
    assert ch.basic_get(r, no_ack=True).body == b"r22"
    got, _ = acks(peer, 22)
    assert got[21] == (mq.CLASS_ACK_RECEIVE, s.guid, 22)


def test_paged_messages_recovered_then_purged(broker_factory, peer):  # noqa: F811
    """Recovery leaves what does not fit the budget paged (never read at the start): the
    purge after a kill -9 still finds the ones that asked."""
    b, port = start(broker_factory, peer, **PAGING)
    q = uname("orders")
    declare(b, q)
    ballast(b)
    s = sender(port)
    for i in range(1, 11):
        s.send(fmt(q), b"y" * 2048, recoverable=True, message_id=i, **NEG)
    s.wait(lambda: set(range(1, 11)) <= s.rec_acked)
    s.close()
    b2, _ = restart(broker_factory, peer, b, "kill9", **PAGING)
    b2.amqp().channel().queue_purge(q)
    got, _ = acks(peer, 10)
    assert got == [(mq.CLASS_NACK_Q_PURGED, s.guid, i) for i in range(1, 11)]


def test_expiry_of_a_paged_message(broker_factory, peer):  # noqa: F811
    b, port = start(broker_factory, peer, **PAGING)
    t = uname("slow")
    declare(b, t)
    ballast(b)
    s = sender(port)
    s.send(fmt(t), b"too slow", recoverable=True, message_id=5, ttbr=2, **NEG)
    got, msgs = acks(peer, 1)
    assert got == [(mq.CLASS_NACK_RECEIVE_TIMEOUT, s.guid, 5)]
    assert msgs[0].body == b"too slow"


def record_ends(raw, start):
    """The offsets, from start (a record boundary), at which each record of a segment ends
    (store/log.h: length:u32 crc:u32 seq:u64, then length bytes of type and payload)."""
    ends, off = [], start
    while off + 16 <= len(raw):
        (length,) = struct.unpack_from("<I", raw, off)
        if off + 16 + length > len(raw):
            break
        off += 16 + length
        ends.append(off)
    return ends


@pytest.mark.parametrize("how", ["ack", "no_ack"])
def test_receive_ack_and_removal_are_one_record_group(broker_factory, peer, tmp_path,  # noqa: F811
                                                      how):
    """A kill -9 at any moment of the write of a consumer's take of a message that asked for
    ACK_RECEIVE (every record boundary of what the take appended: a torn tail is cut back to
    one) leaves exactly one of the message (taken again later: acknowledged then) and its
    acknowledgement. The acknowledgement's records used to come first and the removal after
    them, outside any group: a cut between them kept both, so the message was taken and
    acknowledged a second time."""
    b, port = start(broker_factory, peer)
    q, aq, fence = uname("orders"), uname("acks"), uname("fence")
    _c, ch = declare(b, q)
    declare(b, aq)
    declare(b, fence)
    s = sender(port)
    s.send(fmt(q), b"once", recoverable=True, admin=fmt(aq), ack_flags=mq.ACK_FULL_RECEIVE,
           message_id=5)
    s.wait(lambda: 1 in s.rec_acked)
    wait_for(lambda: count(b, q) == 1, 10)
    seg = sorted((tmp_path / "broker0" / "data" / "msgs").glob("*.seg"))[-1]
    if how == "ack":
        m = ch.basic_get(q, no_ack=False)  # its delivery mark is in the file when it arrives
        before = seg.stat().st_size
        ch.basic_ack(m.delivery_tag)
    else:
        before = seg.stat().st_size
        m = ch.basic_get(q, no_ack=True)
    assert m.body == b"once"
    wait_for(lambda: count(b, aq) == 1, 10)
    # a confirmed persistent publish after it: everything before it is in the file too
    c = b.pika()
    pc = c.channel()
    pc.confirm_delivery()
    pc.basic_publish("", fence, b"f", pika.BasicProperties(delivery_mode=2))
    c.close()
    b.kill9()
    raw = seg.read_bytes()
    cuts = [before] + record_ends(raw, before)
    assert cuts[-1] == len(raw) and len(cuts) >= 4  # at least the ack's and the removal's
    seen = []
    for k, cut in enumerate(cuts):
        data = tmp_path / ("cut%d" % k)
        shutil.copytree(b.data_dir, data)
        (data / "msgs" / seg.name).write_bytes(raw[:cut])
        b2 = broker_factory(data_dir=data)
        kept, acked = count(b2, q), count(b2, aq)
        seen.append((cut - before, kept, acked))
        assert b2.terminate() == 0
        shutil.rmtree(data, ignore_errors=True)
    assert all(kept + acked == 1 for _, kept, acked in seen), seen
    assert seen[0][1:] == (1, 0) and seen[-1][1:] == (0, 1), seen


@pytest.mark.parametrize("paged", [False, True])
def test_tidy_keeps_the_mark(broker_factory, peer, paged):  # noqa: F811
    """TIDY copies live enqueue records forward out of mostly dead segments: the copy keeps
    the mark (EF_WATCH), whether the message is in memory or paged out, so a purge after a
    kill -9 and a restart still sends the NACKs."""
    from test_mgmt import Api
    cfg = {"segment_size": "4k", "reap_interval": "0"}  # TIDY alone frees
    if paged:
        cfg.update(PAGING)
    b, port = start(broker_factory, peer, **cfg)
    api = Api(b)
    q, churn = uname("orders"), uname("churn")
    declare(b, q)
    _c, ch = declare(b, churn)
    if paged:
        ballast(b)
    s = sender(port)

    def dead_weight():
        for _ in range(8):
            ch.basic_publish(amqp.Message(b"c" * 1000, delivery_mode=2), exchange="",
                             routing_key=churn)
        for _ in range(8):
            assert wait_for(lambda: ch.basic_get(churn, no_ack=True), 10)

    for i in range(1, 6):  # each one among records that die: its segment is worth compacting
        s.send(fmt(q), b"z" * 1000, recoverable=True, message_id=i, **NEG)
        s.wait(lambda: i in s.rec_acked)
        dead_weight()
    dead_weight()  # the last one's segment is not the one being written either
    st, j, _ = api.action("MACHINE", "TIDY")
    assert st == 200 and j["segments_freed"] > 0, j
    s.close()
    b2, _ = restart(broker_factory, peer, b, "kill9", **cfg)
    assert count(b2, q) == 5
    b2.amqp().channel().queue_purge(q)
    got, _ = acks(peer, 5)
    assert got == [(mq.CLASS_NACK_Q_PURGED, s.guid, i) for i in range(1, 6)]
