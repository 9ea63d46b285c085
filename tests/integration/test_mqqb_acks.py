"""MSMQ administration acknowledgements (src/msmq/ack.c): a Windows sender (mqqb_peer.Sender)
asks for acknowledgements (PROPID_M_ACKNOWLEDGE, MessagePropertiesHeader.Flags) and names an
admin queue; Sluice sends them as MSMQ messages of the acknowledgement's class, correlation
id = the original's message id, to the admin queue: on a Windows host of msmq.hosts (played
by mqqb_peer.Receiver on 127.0.0.2) over MS-MQQB, or to a queue of this node.

The sender reaches Sluice as 127.0.0.1 and its admin queue is on 127.0.0.2 (another host
for Sluice: the one msmq.hosts names)."""

import time

import amqp
import pytest

import mqqb_peer as mq
from helpers import uname, wait_for
from test_mqqb import declare, fmt, msmq_port

ADMIN_HOST = "127.0.0.2"
ADMIN = "TCP:%s\\private$\\admin" % ADMIN_HOST
NEG_RECV = dict(admin=ADMIN, ack_flags=mq.ACK_NACK_RECEIVE)


@pytest.fixture
def peer():
    r = mq.Receiver(host=ADMIN_HOST)
    yield r
    r.close()


def start(broker_factory, peer, data_dir=None, **extra):
    cfg = {"listeners.msmq": "0", "msmq.hosts.1": "%s:%d" % (ADMIN_HOST, peer.port),
           "link_retry_min_ms": "50", "link_retry_max_ms": "200"}
    cfg.update(extra)
    b = broker_factory(config=cfg, data_dir=data_dir)
    return b, msmq_port(b)


def sender(port):
    s = mq.Sender("127.0.0.1", port)
    ec, _cp = s.establish(window=64, rec_ack_timeout=500)
    assert not ec.refused
    return s


def acks(peer, n, timeout=15):
    """The first n acknowledgements in the peer's admin queue, as (class, guid, number)."""
    got = wait_for(lambda: len(peer.queue("admin")) >= n and peer.queue("admin"), timeout,
                   message="admin queue: %r" % [(hex(m.msg_class)) for m in peer.queue("admin")])
    return [mq.admin_ack(m) for m in got[:n]], got[:n]


def test_reach_queue_ack_goes_to_the_windows_admin_queue(broker_factory, peer):
    b, port = start(broker_factory, peer)
    q = uname("orders")
    declare(b, q)
    s = sender(port)
    s.send(fmt(q), b"first", recoverable=True, admin=ADMIN, ack_flags=mq.ACK_FULL_REACH_QUEUE,
           message_id=42, label="order 42", app_tag=7)
    s.send(fmt(q), b"unasked", recoverable=True, admin=ADMIN, message_id=43)
    s.send(fmt(q), b"neg only", admin=ADMIN, ack_flags=mq.ACK_NACK_REACH_QUEUE, message_id=44)
    s.send(fmt(q), b"third", admin=ADMIN, ack_flags=mq.ACK_FULL_REACH_QUEUE, message_id=45)
    got, msgs = acks(peer, 2)
    assert got == [(mq.CLASS_ACK_REACH_QUEUE, s.guid, 42), (mq.CLASS_ACK_REACH_QUEUE, s.guid, 45)]
    first, third = msgs
    assert first.label == "order 42" and first.app_tag == 7
    assert first.body == b""  # a positive acknowledgement is empty
    assert first.recoverable and not third.recoverable  # as the message it acknowledges
    assert first.dest.lower() == ADMIN.lower()
    assert first.admin == "" and first.ack_flags == 0  # acknowledgements ask for none
    # the messages themselves are in the queue, nothing else came (43 and 44 asked no ack)
    ch = b.amqp().channel()
    assert ch.queue_declare(q, passive=True).message_count == 4


def test_negative_arrival_classes(broker_factory, peer):
    b, port = start(broker_factory, peer)
    full = uname("full")
    ch = b.amqp().channel()
    ch.queue_declare(full, durable=True, auto_delete=False,
                     arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    s = sender(port)
    kw = dict(admin=ADMIN, ack_flags=mq.ACK_NACK_REACH_QUEUE)
    s.send(fmt(uname("nosuch")), b"lost body", recoverable=True, message_id=1, **kw)
    s.send(fmt(full), b"fits", message_id=2, **kw)
    s.send(fmt(full), b"over", message_id=3, **kw)
    s.send(fmt(full), b"late", message_id=4, sent_time=int(time.time()) - 100, ttrq=10, **kw)
    # transactional, refused for good: a FinalAck to the order queue and the admin NACK
    s.send(fmt(uname("nosuch")), b"tx lost", tx=(5, 1, 0), message_id=5, **kw)
    got, msgs = acks(peer, 4)
    assert sorted(got, key=lambda a: a[2]) == [
        (mq.CLASS_NACK_BAD_DST_Q, s.guid, 1), (mq.CLASS_NACK_Q_EXCEED_QUOTA, s.guid, 3),
        (mq.CLASS_NACK_REACH_QUEUE_TIMEOUT, s.guid, 4), (mq.CLASS_NACK_BAD_DST_Q, s.guid, 5)]
    bodies = {mq.admin_ack(m)[2]: m.body for m in msgs}
    assert bodies == {1: b"lost body", 3: b"over", 4: b"late", 5: b"tx lost"}  # NACKs carry it
    s.wait(lambda: any(p.msg_class == mq.CLASS_NACK_BAD_DST_Q for p in s.final_acks))


def test_access_denied_nack(broker_factory, peer):
    b, port = start(broker_factory, peer, **{"msmq.user": "nobody-here"})
    q = uname("orders")
    declare(b, q)
    s = sender(port)
    s.send(fmt(q), b"x", message_id=9, admin=ADMIN, ack_flags=mq.ACK_NACK_REACH_QUEUE)
    got, _ = acks(peer, 1)
    assert got == [(mq.CLASS_NACK_ACCESS_DENIED, s.guid, 9)]


def test_receive_ack_when_a_consumer_takes_it(broker_factory, peer):
    b, port = start(broker_factory, peer)
    q = uname("orders")
    _c, ch = declare(b, q)
    s = sender(port)
    s.send(fmt(q), b"one", recoverable=True, admin=ADMIN, ack_flags=mq.ACK_FULL_RECEIVE,
           message_id=1)
    s.send(fmt(q), b"two", recoverable=True, admin=ADMIN, ack_flags=mq.ACK_FULL_RECEIVE,
           message_id=2)
    wait_for(lambda: ch.queue_declare(q, passive=True).message_count == 2, 10)
    m1 = ch.basic_get(q, no_ack=False)
    assert m1.body == b"one"
    m2 = ch.basic_get(q, no_ack=True)  # taken for good at once
    assert m2.body == b"two"
    got, _ = acks(peer, 1)
    # FULL_RECEIVE asks for no arrival ack; "one" is held, not yet taken
    assert got == [(mq.CLASS_ACK_RECEIVE, s.guid, 2)]
    ch.basic_ack(m1.delivery_tag)
    got, _ = acks(peer, 2)
    assert got[1] == (mq.CLASS_ACK_RECEIVE, s.guid, 1)
    # a consumer's basic.ack too
    s.send(fmt(q), b"three", admin=ADMIN, ack_flags=mq.ACK_FULL_RECEIVE, message_id=3)
    seen = []
    ch.basic_consume(q, callback=lambda m: (seen.append(m), ch.basic_ack(m.delivery_tag)))
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        ch.connection.drain_events(timeout=1)
    assert seen and seen[0].body == b"three"
    got, _ = acks(peer, 3)
    assert got[2] == (mq.CLASS_ACK_RECEIVE, s.guid, 3)


def test_receive_timeout_nack_when_it_expires_unread(broker_factory, peer):
    b, port = start(broker_factory, peer)
    q = uname("orders")
    declare(b, q)
    s = sender(port)
    s.send(fmt(q), b"too slow", admin=ADMIN, ack_flags=mq.ACK_NACK_RECEIVE, message_id=7,
           ttbr=1)
    got, msgs = acks(peer, 1)
    assert got == [(mq.CLASS_NACK_RECEIVE_TIMEOUT, s.guid, 7)]
    assert msgs[0].body == b"too slow"


def test_ack_to_a_queue_of_this_node(broker_factory, peer):
    b, port = start(broker_factory, peer)
    q, aq = uname("orders"), uname("acks")
    _c, ch = declare(b, q)
    declare(b, aq)
    s = sender(port)
    s.send(fmt(q), b"x", recoverable=True, admin=fmt(aq), ack_flags=mq.ACK_FULL_RECEIVE | 1,
           message_id=77, label="L")
    a = wait_for(lambda: ch.basic_get(aq, no_ack=True), 10)
    sid = mq.guid_text(s.guid)
    assert a.headers["x-msmq-class"] == mq.CLASS_ACK_REACH_QUEUE
    assert a.correlation_id == "%s\\77" % sid
    assert a.headers["x-msmq-label"] == "L"
    assert a.delivery_mode == 2 and not a.body  # empty (py-amqp gives it as "")
    m = ch.basic_get(q, no_ack=True)
    assert m.body == b"x"
    a = wait_for(lambda: ch.basic_get(aq, no_ack=True), 10)
    assert a.headers["x-msmq-class"] == mq.CLASS_ACK_RECEIVE
    assert a.correlation_id == "%s\\77" % sid
    # taking the acknowledgement itself sends nothing more
    assert ch.basic_get(aq, no_ack=True) is None
    assert peer.queue("admin") == []


def test_reach_queue_ack_survives_kill9(broker_factory, peer):
    """The Windows admin host is down: the acknowledgement waits in the outgoing queue, in
    the store with the message (one record group); kill -9 after the recoverable message
    was session-acked (on disk), restart: it is sent, once."""
    peer.hold = True
    b, port = start(broker_factory, peer)
    q = uname("orders")
    declare(b, q)
    s = sender(port)
    s.send(fmt(q), b"keep", recoverable=True, admin=ADMIN, ack_flags=mq.ACK_FULL_REACH_QUEUE,
           message_id=11)
    s.wait(lambda: 1 in s.rec_acked)
    b.kill9()
    peer.hold = False
    b2, _ = start(broker_factory, peer, data_dir=b.data_dir)
    got, _ = acks(peer, 1)
    assert got == [(mq.CLASS_ACK_REACH_QUEUE, s.guid, 11)]
    ch = b2.amqp().channel()
    assert ch.basic_get(q, no_ack=True).body == b"keep"
    wait_for(lambda: peer.sessions >= 1, 5)
    time.sleep(0.3)
    assert len(peer.queue("admin")) == 1


def test_receive_ack_only_from_the_addressed_queue(broker_factory, peer):
    """A consumer that publishes the message again (properties and headers as read) into
    another local queue, or on to a Windows host through an outgoing queue: only the taking
    from the queue the sender addressed is a receive; the copies send no acknowledgement."""
    b, port = start(broker_factory, peer)
    q, other = uname("orders"), uname("other")
    _c, ch = declare(b, q)
    declare(b, other)
    s = sender(port)
    s.send(fmt(q), b"one", recoverable=True, admin=ADMIN, ack_flags=mq.ACK_FULL_RECEIVE,
           message_id=1)
    m = wait_for(lambda: ch.basic_get(q, no_ack=True), 10)
    got, _ = acks(peer, 1)
    assert got == [(mq.CLASS_ACK_RECEIVE, s.guid, 1)]
    copy = amqp.Message(m.body, **m.properties)
    assert copy.headers["x-msmq-ack"] == mq.ACK_FULL_RECEIVE
    ch.basic_publish(copy, exchange="", routing_key=other)
    ch.basic_publish(copy, exchange="", routing_key="DIRECT=%s" % ADMIN.replace("admin", "fwd"))
    assert wait_for(lambda: ch.basic_get(other, no_ack=True), 10).body == b"one"
    wait_for(lambda: len(peer.queue("fwd")) == 1, 10)  # forwarded and completed
    # one more from the sender, taken: its acknowledgement follows the first directly
    s.send(fmt(q), b"two", admin=ADMIN, ack_flags=mq.ACK_FULL_RECEIVE, message_id=2)
    assert wait_for(lambda: ch.basic_get(q, no_ack=True), 10).body == b"two"
    got, _ = acks(peer, 2)
    assert got == [(mq.CLASS_ACK_RECEIVE, s.guid, 1), (mq.CLASS_ACK_RECEIVE, s.guid, 2)]


def test_purge_and_delete_send_receive_nacks(broker_factory, peer):
    """NACK_Q_PURGED for each message a purge takes (also one delivered and unacked, once
    it is settled), NACK_Q_DELETED for each one the queue's deletion takes."""
    b, port = start(broker_factory, peer)
    q, d = uname("orders"), uname("doomed")
    _c, ch = declare(b, q)
    declare(b, d)
    s = sender(port)
    kw = dict(admin=ADMIN, ack_flags=mq.ACK_NACK_RECEIVE)
    s.send(fmt(q), b"held", recoverable=True, message_id=1, **kw)
    s.send(fmt(q), b"p2", recoverable=True, message_id=2, **kw)
    s.send(fmt(q), b"p3", message_id=3, **kw)
    s.send(fmt(d), b"d4", recoverable=True, message_id=4, **kw)
    wait_for(lambda: ch.queue_declare(q, passive=True).message_count == 3, 10)
    wait_for(lambda: ch.queue_declare(d, passive=True).message_count == 1, 10)
    held = ch.basic_get(q, no_ack=False)
    assert held.body == b"held"
    ch.queue_purge(q)
    got, msgs = acks(peer, 2)
    assert got == [(mq.CLASS_NACK_Q_PURGED, s.guid, 2), (mq.CLASS_NACK_Q_PURGED, s.guid, 3)]
    assert [m.body for m in msgs] == [b"p2", b"p3"]
    ch.basic_ack(held.delivery_tag)  # purged while delivered: it goes now, as purged
    got, _ = acks(peer, 3)
    assert got[2] == (mq.CLASS_NACK_Q_PURGED, s.guid, 1)
    ch.queue_delete(d)
    got, msgs = acks(peer, 4)
    assert got[3] == (mq.CLASS_NACK_Q_DELETED, s.guid, 4)
    assert msgs[3].body == b"d4"


def test_rejected_by_the_consumer_sends_receive_rejected(broker_factory, peer):
    """NACK_RECEIVE_REJECTED (0xC004, MS-MQRR 3.1.4.14: the receiving application marked the
    message it took as rejected): basic.reject or basic.nack with requeue=false of a message
    that asked for negative receive acknowledgements; a requeue sends nothing (the message
    stays), nor does a rejection of one that asked only for the positive one."""
    b, port = start(broker_factory, peer)
    q = uname("orders")
    declare(b, q)
    ch = b.pika().channel()
    s = sender(port)
    s.send(fmt(q), b"bad", recoverable=True, message_id=1, **NEG_RECV)
    s.send(fmt(q), b"worse", message_id=2, **NEG_RECV)
    s.send(fmt(q), b"pos only", message_id=3, admin=ADMIN, ack_flags=mq.ACK_POS_RECEIVE)
    wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 3, 10)
    m1, _p, _b = ch.basic_get(q, auto_ack=False)
    ch.basic_nack(m1.delivery_tag, requeue=True)  # given back: nothing
    m1, _p, body = ch.basic_get(q, auto_ack=False)
    assert body == b"bad" and m1.redelivered
    ch.basic_reject(m1.delivery_tag, requeue=False)
    got, msgs = acks(peer, 1)
    assert got == [(mq.CLASS_NACK_RECEIVE_REJECTED, s.guid, 1)]
    assert msgs[0].body == b"bad" and msgs[0].recoverable
    _m2, _p, b2 = ch.basic_get(q, auto_ack=False)
    m3, _p, b3 = ch.basic_get(q, auto_ack=False)
    assert (b2, b3) == (b"worse", b"pos only")
    ch.basic_nack(m3.delivery_tag, multiple=True, requeue=False)  # both
    got, _ = acks(peer, 2)
    assert got[1] == (mq.CLASS_NACK_RECEIVE_REJECTED, s.guid, 2)
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    # one more from the sender, taken: its acknowledgement comes next (none for "pos only")
    s.send(fmt(q), b"fine", message_id=4, admin=ADMIN, ack_flags=mq.ACK_FULL_RECEIVE)
    wait_for(lambda: ch.queue_declare(q, passive=True).method.message_count == 1, 10)
    assert ch.basic_get(q, auto_ack=True)[2] == b"fine"
    got, _ = acks(peer, 3)
    assert got[2] == (mq.CLASS_ACK_RECEIVE, s.guid, 4)
