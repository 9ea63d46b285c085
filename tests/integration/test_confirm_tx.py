"""Publisher confirms (confirm.select) and transactions (tx.*)."""

import amqp
import pika
import pytest

from helpers import (declare_queue, drain_bodies, expect_channel_error, publish, queue_counts,
                     sync_point, uname)


# ---------------------------------------------------------------------------
# confirms
# ---------------------------------------------------------------------------
def _collect_acks(r, n, channel=1):
    """Read basic.ack/nack until every seq 1..n is settled; returns (acked, nacked, others)."""
    acked, nacked, others = set(), set(), []
    while len(acked) + len(nacked) < n:
        m = r.read_method()
        if m.name in ("basic.ack", "basic.nack"):
            assert m.channel == channel
            target = acked if m.name == "basic.ack" else nacked
            if m.multiple:
                target.update(t for t in range(1, m.delivery_tag + 1)
                              if t not in acked and t not in nacked)
            else:
                assert m.delivery_tag not in acked | nacked, "tag %d settled twice" % (
                    m.delivery_tag)
                target.add(m.delivery_tag)
        else:
            others.append(m)
    return acked, nacked, others


def test_confirm_acks_every_publish_raw(broker):
    r = broker.raw()
    r.open_channel(1)
    q = r.rpc(1, "queue.declare", queue=uname("conf"), exclusive=True).queue
    r.rpc(1, "confirm.select")
    for i in range(20):
        r.publish(1, "", q, b"m%d" % i)
    acked, nacked, others = _collect_acks(r, 20)
    assert acked == set(range(1, 21)) and not nacked and not others
    ok = r.rpc(1, "queue.declare", queue=q, passive=True)
    assert ok.message_count == 20


def test_confirm_unroutable_acked(broker):
    r = broker.raw()
    r.open_channel(1)
    r.rpc(1, "confirm.select")
    r.publish(1, "amq.direct", uname("nobody"), b"lost")
    acked, nacked, others = _collect_acks(r, 1)
    assert acked == {1} and not others


def test_confirm_mandatory_unroutable_return_then_ack(broker):
    r = broker.raw()
    r.open_channel(1)
    r.rpc(1, "confirm.select")
    r.publish(1, "amq.direct", uname("nobody"), b"bounce", mandatory=True)
    first = r.read_method()
    assert first.name == "basic.return", first
    assert first.reply_code == 312 and first.body == b"bounce"
    second = r.read_method()
    assert second.name == "basic.ack" and second.delivery_tag == 1, second


def test_confirm_select_nowait(broker):
    r = broker.raw()
    r.open_channel(1)
    q = r.rpc(1, "queue.declare", queue=uname("conf"), exclusive=True).queue
    r.send_method(1, "confirm.select", nowait=True)
    r.publish(1, "", q, b"x")
    acked, _, others = _collect_acks(r, 1)
    assert acked == {1} and not others


def test_confirm_select_twice_ok(broker):
    r = broker.raw()
    r.open_channel(1)
    r.rpc(1, "confirm.select")
    r.rpc(1, "confirm.select")


def test_confirm_pika(broker):
    c = broker.pika()
    ch = c.channel()
    q = ch.queue_declare(uname("pconf"), exclusive=True).method.queue
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", q, b"m%d" % i)  # raises on nack
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("amq.direct", uname("nobody"), b"x", mandatory=True)
    assert ch.queue_declare(q, passive=True).method.message_count == 10


def test_confirm_pyamqp(broker):
    c = broker.amqp(confirm_publish=True)
    ch = c.channel()
    q = declare_queue(ch, exclusive=True)
    for i in range(10):
        ch.basic_publish(amqp.Message(b"m%d" % i), exchange="", routing_key=q)
    assert ch.queue_declare(q, passive=True).message_count == 10


def test_confirm_persistent_to_durable_queue(conn, ch):
    q = declare_queue(ch, durable=True)
    for i in range(5):
        publish(ch, "", q, "p%d" % i, confirm=True, delivery_mode=2)
    assert queue_counts(conn, q) == (5, 0)
    ch.queue_delete(q)


def test_tx_after_confirm_406(conn, ch):
    ch.confirm_select()
    expect_channel_error(conn, 406, ch.tx_select)


def test_confirm_after_tx_406(conn, ch):
    ch.tx_select()
    expect_channel_error(conn, 406, ch.confirm_select)


# ---------------------------------------------------------------------------
# transactions
# ---------------------------------------------------------------------------
def test_tx_publish_invisible_until_commit(conn, ch):
    q = declare_queue(ch)
    other = conn.channel()
    ch.tx_select()
    publish(ch, "", q, "t1")
    publish(ch, "", q, "t2")
    sync_point(ch)
    assert other.basic_get(q) is None, "transactional publish visible before commit"
    assert queue_counts(conn, q) == (0, 0)
    ch.tx_commit()
    assert drain_bodies(other, q) == [b"t1", b"t2"]
    ch.queue_delete(q)


def test_tx_rollback_discards_publishes(conn, ch):
    q = declare_queue(ch)
    ch.tx_select()
    publish(ch, "", q, "gone")
    ch.tx_rollback()
    ch.tx_commit()  # empty transaction
    assert queue_counts(conn, q) == (0, 0)
    publish(ch, "", q, "kept")
    ch.tx_commit()
    assert drain_bodies(ch, q) == [b"kept"]
    ch.queue_delete(q)


def test_tx_ack_applied_on_commit(conn, ch):
    q = declare_queue(ch)
    publish(ch, "", q, "m", confirm=True)
    tch = conn.channel()
    tch.tx_select()
    m = tch.basic_get(q)
    tch.basic_ack(m.delivery_tag)
    tch.tx_commit()
    tch.close()
    assert queue_counts(conn, q) == (0, 0), "acked-and-committed message came back"
    ch.queue_delete(q)


def test_tx_ack_undone_by_rollback(conn, ch):
    q = declare_queue(ch)
    publish(ch, "", q, "m", confirm=True)
    tch = conn.channel()
    tch.tx_select()
    m = tch.basic_get(q)
    tch.basic_ack(m.delivery_tag)
    tch.tx_rollback()
    # still unacked (not requeued yet)
    assert queue_counts(conn, q) == (0, 0)
    assert ch.basic_get(q) is None
    tch.close()
    again = ch.basic_get(q, no_ack=True)
    assert again is not None and again.body == b"m"
    assert again.delivery_info["redelivered"] is True
    ch.queue_delete(q)


def test_tx_ack_not_applied_before_commit(conn, ch):
    q = declare_queue(ch)
    publish(ch, "", q, "m", confirm=True)
    tch = conn.channel()
    tch.tx_select()
    m = tch.basic_get(q)
    tch.basic_ack(m.delivery_tag)
    sync_point(tch)
    tch.close()  # never committed: the ack is void, the message is requeued
    again = ch.basic_get(q, no_ack=True)
    assert again is not None and again.body == b"m" and again.delivery_info["redelivered"]
    ch.queue_delete(q)


def test_tx_commit_without_select_406(conn, ch):
    expect_channel_error(conn, 406, ch.tx_commit)


def test_tx_rollback_without_select_406(conn, ch):
    expect_channel_error(conn, 406, ch.tx_rollback)


def test_tx_pika(broker):
    c = broker.pika()
    ch = c.channel()
    q = ch.queue_declare(uname("ptx"), exclusive=True).method.queue
    ch.tx_select()
    ch.basic_publish("", q, b"a")
    ch.basic_publish("", q, b"b")
    ch.tx_rollback()
    ch.basic_publish("", q, b"c")
    ch.tx_commit()
    assert ch.basic_get(q, auto_ack=True)[2] == b"c"
    assert ch.basic_get(q, auto_ack=True)[0] is None


def test_tx_multiple_commits(conn, ch):
    q = declare_queue(ch, exclusive=True)
    ch.tx_select()
    for i in range(3):
        publish(ch, "", q, "r%d" % i)
        ch.tx_commit()
    assert drain_bodies(ch, q) == [b"r0", b"r1", b"r2"]
