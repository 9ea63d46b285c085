"""queue.purge and queue.delete (DESIGN.md section 2)."""

import socket

import pytest

from helpers import (basic_nack, collect_pika, declare_exchange, declare_queue, drain_bodies,
                     drain_deliveries,
                     expect_channel_error, get_body, publish, queue_counts, settle_pika, uname)


def _settle(conn, seconds=0.5):
    """Process whatever the broker sends for `seconds` (callers then check
    their delivery lists to prove nothing more came)."""
    import time
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            conn.drain_events(timeout=left)
        except socket.timeout:
            return


# ---------------------------------------------------------------------------
# purge
# ---------------------------------------------------------------------------
def test_purge_returns_count_and_keeps_bindings(conn, ch):
    x = declare_exchange(ch, "direct")
    q = declare_queue(ch)
    ch.queue_bind(q, x, "k")
    for i in range(3):
        publish(ch, x, "k", "m%d" % i, confirm=True)
    assert ch.queue_purge(q) == 3
    assert queue_counts(conn, q) == (0, 0)
    assert ch.queue_purge(q) == 0
    # binding and declaration stay: publishing through the exchange goes on at once
    publish(ch, x, "k", "after purge", confirm=True)
    assert drain_bodies(ch, q) == [b"after purge"]
    ch.queue_delete(q)
    ch.exchange_delete(x)


def test_purge_with_consumer_keeps_consumer(conn, ch):
    x = declare_exchange(ch, "direct")
    q = declare_queue(ch)
    ch.queue_bind(q, x, "k")
    for i in range(4):
        publish(ch, x, "k", "m%d" % i, confirm=True)
    cch = conn.channel()
    cch.basic_qos(0, 1, False)
    got = []
    cch.basic_consume(q, callback=got.append)
    drain_deliveries(conn, got, 1)
    # one delivered-unacked, three ready: purge removes exactly the ready ones
    assert ch.queue_purge(q) == 3
    assert queue_counts(conn, q) == (0, 1)
    cch.basic_ack(got[0].delivery_tag)
    publish(ch, x, "k", "new", confirm=True)
    drain_deliveries(conn, got, 2)
    assert got[1].body == b"new"
    cch.basic_ack(got[1].delivery_tag)
    cch.basic_cancel(got[1].delivery_info["consumer_tag"])
    ch.queue_delete(q)
    ch.exchange_delete(x)


def test_purge_missing_queue_404(conn, ch):
    expect_channel_error(conn, 404, ch.queue_purge, uname("noq"))


def _hold_two_unacked(broker):
    conn = broker.amqp()
    ch = conn.channel()
    q = declare_queue(ch)
    publish(ch, "", q, "a", confirm=True)
    publish(ch, "", q, "b", confirm=True)
    cch = conn.channel()
    cch.basic_qos(0, 2, False)
    got = []
    cch.basic_consume(q, callback=got.append)
    drain_deliveries(conn, got, 2)
    assert [m.body for m in got] == [b"a", b"b"]
    assert ch.queue_purge(q) == 0  # nothing ready; both are delivered-unacked
    return conn, ch, cch, q, got


def _assert_gone_for_good(conn, ch, cch, q, got, consumers):
    _settle(conn, 0.5)
    assert len(got) == 2, "purge-pending messages came back: %r" % (
        [(m.body, m.delivery_info["redelivered"]) for m in got[2:]],)
    assert queue_counts(conn, q) == (0, consumers)
    assert ch.basic_get(q, no_ack=True) is None
    # the queue keeps working
    publish(ch, "", q, "fresh", confirm=True)
    if consumers:
        drain_deliveries(conn, got, 3)
        assert got[2].body == b"fresh" and not got[2].delivery_info["redelivered"]
    else:
        assert get_body(ch, q) == b"fresh"


@pytest.mark.sluice_only("PurgePending: RabbitMQ requeues a nacked message that was "
                         "unacked at purge time")
def test_purge_pending_nack_requeue_deletes(broker):
    conn, ch, cch, q, got = _hold_two_unacked(broker)
    basic_nack(cch, got[1].delivery_tag, multiple=True, requeue=True)
    _assert_gone_for_good(conn, ch, cch, q, got, consumers=1)


@pytest.mark.sluice_only("PurgePending: RabbitMQ requeues a rejected message that was "
                         "unacked at purge time")
def test_purge_pending_reject_requeue_deletes(broker):
    conn, ch, cch, q, got = _hold_two_unacked(broker)
    cch.basic_reject(got[0].delivery_tag, requeue=True)
    cch.basic_reject(got[1].delivery_tag, requeue=True)
    _assert_gone_for_good(conn, ch, cch, q, got, consumers=1)


@pytest.mark.sluice_only("PurgePending: RabbitMQ requeues unacked messages of a closed "
                         "channel even if they were unacked at purge time")
def test_purge_pending_channel_close_deletes(broker):
    conn, ch, cch, q, got = _hold_two_unacked(broker)
    cch.close()
    _assert_gone_for_good(conn, ch, cch, q, got, consumers=0)


@pytest.mark.sluice_only("PurgePending: RabbitMQ requeues unacked messages of a closed "
                         "connection even if they were unacked at purge time")
def test_purge_pending_connection_close_deletes(broker):
    c = broker.amqp()
    cch = c.channel()
    admin = broker.amqp()
    ch = admin.channel()
    q = declare_queue(ch)
    publish(ch, "", q, "held", confirm=True)
    m = cch.basic_get(q)  # delivered via basic.get, not acked
    assert m.body == b"held"
    assert ch.queue_purge(q) == 0
    publish(ch, "", q, "after", confirm=True)
    c.close()
    assert drain_bodies(ch, q) == [b"after"]


@pytest.mark.sluice_only("PurgePending: RabbitMQ's basic.recover requeues messages that "
                         "were unacked at purge time")
def test_purge_pending_recover_deletes(broker):
    from amqp import spec
    conn, ch, cch, q, got = _hold_two_unacked(broker)
    # py-amqp's basic_recover does not wait for recover-ok
    cch.send_method(spec.Basic.Recover, "b", (True,), wait=spec.Basic.RecoverOk)
    _assert_gone_for_good(conn, ch, cch, q, got, consumers=1)


def test_ack_of_purge_pending_message_works(broker):
    conn, ch, cch, q, got = _hold_two_unacked(broker)
    cch.basic_ack(got[0].delivery_tag)
    cch.basic_ack(got[1].delivery_tag)
    cch.basic_qos(0, 2, False)  # round trip: no channel error from the acks
    cch.close()
    assert queue_counts(conn, q) == (0, 0)
    assert ch.basic_get(q, no_ack=True) is None


def test_purge_then_new_messages_flow_to_consumer(broker):
    c = broker.pika()
    ch = c.channel()
    q = ch.queue_declare(uname("pq")).method.queue
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", q, b"old%d" % i)
    assert ch.queue_purge(q).method.message_count == 5
    got = []
    ch.basic_consume(q, lambda c_, m, p, b: got.append(b), auto_ack=True)
    for i in range(3):
        ch.basic_publish("", q, b"new%d" % i)
    collect_pika(c, got, 3)
    settle_pika(c, 0.2)
    assert got == [b"new0", b"new1", b"new2"]
    ch.queue_delete(q)


# ---------------------------------------------------------------------------
# delete
# ---------------------------------------------------------------------------
def test_delete_if_empty_with_ready_messages_406(conn, ch):
    q = declare_queue(ch)
    publish(ch, "", q, "m1", confirm=True)
    publish(ch, "", q, "m2", confirm=True)
    expect_channel_error(conn, 406, ch.queue_delete, q, if_empty=True)
    assert queue_counts(conn, q) == (2, 0)
    ch2 = conn.channel()
    assert drain_bodies(ch2, q) == [b"m1", b"m2"]
    assert ch2.queue_delete(q, if_empty=True) == 0
    assert queue_counts(conn, q) is None


@pytest.mark.sluice_only("RabbitMQ's if-empty only looks at ready messages and deletes a "
                         "queue whose messages are all delivered-unacked")
def test_delete_if_empty_with_only_unacked_406(conn, ch):
    q = declare_queue(ch)
    publish(ch, "", q, "held", confirm=True)
    cch = conn.channel()
    m = cch.basic_get(q)
    assert m.body == b"held"
    expect_channel_error(conn, 406, ch.queue_delete, q, if_empty=True)
    assert queue_counts(conn, q) == (0, 0)
    cch.basic_reject(m.delivery_tag, requeue=True)
    ch2 = conn.channel()
    msg = ch2.basic_get(q, no_ack=True)
    assert msg.body == b"held" and msg.delivery_info["redelivered"]


def test_delete_if_unused_with_consumer_406(conn, ch):
    q = declare_queue(ch)
    cch = conn.channel()
    got = []
    cch.basic_consume(q, callback=got.append)
    expect_channel_error(conn, 406, ch.queue_delete, q, if_unused=True)
    ch2 = conn.channel()
    assert queue_counts(conn, q) == (0, 1)
    publish(ch2, "", q, "still consumed")
    drain_deliveries(conn, got, 1)
    assert got[0].body == b"still consumed"
    cch.basic_ack(got[0].delivery_tag)


def test_delete_returns_message_count(conn, ch):
    q = declare_queue(ch)
    for i in range(3):
        publish(ch, "", q, "m%d" % i, confirm=True)
    assert ch.queue_delete(q) == 3
    assert queue_counts(conn, q) is None


def test_delete_missing_queue_ok_zero(conn, ch):
    assert ch.queue_delete(uname("noq")) == 0


def test_delete_removes_bindings(conn, ch):
    x = declare_exchange(ch, "direct")
    q = declare_queue(ch)
    ch.queue_bind(q, x, "k")
    ch.queue_delete(q)
    q2 = declare_queue(ch, name=q)
    publish(ch, x, "k", "should not route", confirm=True)
    assert queue_counts(conn, q2) == (0, 0)
    ch.queue_delete(q2)
    ch.exchange_delete(x)


def test_delete_sends_basic_cancel_pika(broker):
    c = broker.pika()
    ch = c.channel()
    q = ch.queue_declare(uname("delq")).method.queue
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume(q, lambda *a: None)
    admin = broker.amqp()
    assert admin.channel().queue_delete(q) == 0
    collect_pika(c, cancelled, 1)
    assert cancelled == [tag]
    assert ch.is_open, "deleting the queue must not close the consumer's channel"
    # the channel keeps working
    q2 = ch.queue_declare(uname("after"), exclusive=True).method.queue
    ch.basic_publish("", q2, b"ok")
    assert ch.basic_get(q2, auto_ack=True)[2] == b"ok"


def test_delete_sends_basic_cancel_pyamqp(broker):
    c = broker.amqp()
    ch = c.channel()
    q = declare_queue(ch)
    cancelled = []
    tag = ch.basic_consume(q, callback=lambda m: None, on_cancel=cancelled.append)
    broker.amqp().channel().queue_delete(q)
    drain_deliveries(c, cancelled, 1)
    assert cancelled == [tag]


def test_redeclare_after_delete_starts_empty(conn, ch):
    q = declare_queue(ch, durable=True)
    for i in range(3):
        publish(ch, "", q, "old%d" % i, confirm=True, delivery_mode=2)
    cch = conn.channel()
    held = cch.basic_get(q)  # one delivered-unacked at delete time
    assert held.body == b"old0"
    ch.queue_delete(q)  # (count: see test_delete_returns_message_count)
    assert declare_queue(ch, name=q, durable=True) == q
    assert queue_counts(conn, q) == (0, 0)
    # the old unacked message must not come back into the new queue
    cch.basic_reject(held.delivery_tag, requeue=True)
    cch.close()
    assert queue_counts(conn, q) == (0, 0)
    assert ch.basic_get(q, no_ack=True) is None
    publish(ch, "", q, "new", confirm=True)
    assert drain_bodies(ch, q) == [b"new"]
    ch.queue_delete(q)


def test_delete_queue_with_unacked_then_consumer_acks(conn, ch):
    q = declare_queue(ch)
    publish(ch, "", q, "m", confirm=True)
    cch = conn.channel()
    m = cch.basic_get(q)
    ch.queue_delete(q)
    # acking a message of a deleted queue is not an error
    cch.basic_ack(m.delivery_tag)
    cch.basic_qos(0, 0, False)


@pytest.mark.sluice_only("delete-ok counts every message deleted, delivered-unacked ones too; "
                         "RabbitMQ counts only the ready ones")
def test_delete_count_includes_unacked(conn, ch):
    q = declare_queue(ch)
    for i in range(3):
        publish(ch, "", q, "m%d" % i, confirm=True)
    cch = conn.channel()
    held = cch.basic_get(q)
    assert held.body == b"m0"
    assert ch.queue_delete(q) == 3  # the held one is deleted too: it can never come back
    cch.basic_reject(held.delivery_tag, requeue=True)  # nothing to requeue into
    cch.close()
