"""Quorum queues (x-queue-type quorum) as RabbitMQ 3.10 has them, on one node: declare and its
refusals (codes and words observed on RabbitMQ 3.10.8), the delivery count (x-delivery-count),
x-delivery-limit and dead-lettering past it, the management API's type, definitions, and the
count's durability across kill -9.

The tests that use `broker` run unchanged against RabbitMQ (SLUICE_TEST_TARGET=rabbitmq);
the ones that restart a node need a private sluiced (broker_factory skips on RabbitMQ).
"""

import time

import pika
import pytest

from helpers import IS_RABBITMQ, uname, wait_for

Q = {"x-queue-type": "quorum"}


def q_args(**kw):
    a = dict(Q)
    a.update(kw)
    return a


def refused(broker, name, durable=True, exclusive=False, auto_delete=False, arguments=None):
    """Declare on a fresh connection; returns (code, text) of the channel error, or None."""
    c = broker.pika()
    ch = c.channel()
    try:
        ch.queue_declare(name, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
                         arguments=arguments)
        return None
    except pika.exceptions.ChannelClosedByBroker as e:
        assert c.is_open, "a channel error, not a connection error"
        return e.reply_code, e.reply_text
    finally:
        if c.is_open:
            c.close()


def get_one(ch, queue, timeout=5.0, **kw):
    """basic.get until a message comes (a quorum queue in RabbitMQ applies a publish a moment
    after its confirm-less publish returns)."""
    return wait_for(lambda: (lambda r: r if r[0] is not None else None)(ch.basic_get(queue, **kw)),
                    timeout=timeout, message="a message in %s" % queue)


def rs(name):
    return "queue '%s' in vhost '/'" % name


# -- declare: what is accepted ----------------------------------------------------------------

def test_quorum_declare_accepted_and_redeclared(broker):
    q = uname("qq")
    c = broker.pika()
    ch = c.channel()
    ok = ch.queue_declare(q, durable=True, arguments=q_args(**{
        "x-delivery-limit": 3, "x-quorum-initial-group-size": 3,
        "x-dead-letter-strategy": "at-most-once", "x-message-ttl": 60000,
        "x-single-active-consumer": True}))
    assert ok.method.queue == q
    # the same again, and passively
    ch.queue_declare(q, durable=True, arguments=q_args(**{
        "x-delivery-limit": 3, "x-quorum-initial-group-size": 3,
        "x-dead-letter-strategy": "at-most-once", "x-message-ttl": 60000,
        "x-single-active-consumer": True}))
    assert ch.queue_declare(q, passive=True).method.message_count == 0
    ch.basic_publish("", q, b"one")
    # RabbitMQ 3.10: no basic.get from a quorum queue with a single active consumer
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as ei:
        ch.basic_get(q)
    assert (ei.value.reply_code, ei.value.reply_text) == (
        405, "RESOURCE_LOCKED - cannot obtain access to locked %s. basic.get operations are not "
        "supported by quorum queues with single active consumer" % rs(q))
    ch = c.channel()
    got = []
    ch.basic_consume(q, lambda ch_, m, p, b: got.append(b), auto_ack=True)
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        c.process_data_events(0.1)
    assert got == [b"one"]
    ch.queue_delete(q)
    c.close()


@pytest.mark.parametrize("value", [-1, "abc", 0, 2])
def test_delivery_limit_takes_any_value(broker, value):
    # RabbitMQ 3.10 does not check it: an integer is the limit, anything else none
    assert refused(broker, uname("qdl"), arguments=q_args(**{"x-delivery-limit": value})) is None


# -- declare: refusals, with RabbitMQ 3.10.8's codes and words -----------------------------

@pytest.mark.parametrize("props,word", [
    (dict(durable=False), "non-durable"),
    (dict(exclusive=True), "exclusive-owner"),
    (dict(auto_delete=True), "auto-delete"),
    # RabbitMQ's order: auto-delete, then exclusive, then durable
    (dict(durable=False, exclusive=True), "exclusive-owner"),
    (dict(durable=False, auto_delete=True), "auto-delete"),
    (dict(exclusive=True, auto_delete=True), "auto-delete"),
])
def test_quorum_refuses_properties(broker, props, word):
    q = uname("qp")
    kw = dict(durable=True)
    kw.update(props)
    assert refused(broker, q, arguments=Q, **kw) == (
        406, "PRECONDITION_FAILED - invalid property '%s' for %s" % (word, rs(q)))


@pytest.mark.parametrize("arg,value", [
    ("x-max-priority", 5), ("x-max-priority", 300), ("x-queue-mode", "lazy"),
    ("x-queue-mode", "default"), ("x-queue-version", 2), ("x-queue-master-locator", "min-masters"),
    ("x-max-age", "1D"), ("x-initial-cluster-size", 1)])
def test_quorum_refuses_arguments(broker, arg, value):
    q = uname("qa")
    # checked before the properties and the values
    assert refused(broker, q, durable=False, arguments=q_args(**{arg: value})) == (
        406, "PRECONDITION_FAILED - invalid arg '%s' for %s of queue type rabbit_quorum_queue"
        % (arg, rs(q)))


@pytest.mark.parametrize("arg,value", [
    ("x-delivery-limit", 2), ("x-quorum-initial-group-size", 0), ("x-max-in-memory-length", 3),
    ("x-dead-letter-strategy", "at-most-once"), ("x-queue-leader-locator", "client-local")])
def test_classic_refuses_quorum_arguments(broker, arg, value):
    q = uname("qc")
    assert refused(broker, q, arguments={arg: value}) == (
        406, "PRECONDITION_FAILED - invalid arg '%s' for %s of queue type rabbit_classic_queue"
        % (arg, rs(q)))


@pytest.mark.parametrize("value,why", [
    (0, "{value_zero,0}"), (-1, "{value_negative,-1}"), ("abc", '"expected integer, got longstr"')])
def test_initial_group_size_checked(broker, value, why):
    q = uname("qg")
    # value checks come before the properties' (auto-delete here)
    assert refused(broker, q, auto_delete=True,
                   arguments=q_args(**{"x-quorum-initial-group-size": value})) == (
        406, "PRECONDITION_FAILED - invalid arg 'x-quorum-initial-group-size' for %s: %s"
        % (rs(q), why))


@pytest.mark.parametrize("value,why", [
    ("bogus", "invalid_dlx_strategy"), (5, "{unacceptable_type,signedint}")])
def test_dead_letter_strategy_checked(broker, value, why):
    q = uname("qs")
    assert refused(broker, q, arguments=q_args(**{"x-dead-letter-strategy": value})) == (
        406, "PRECONDITION_FAILED - invalid arg 'x-dead-letter-strategy' for %s: %s"
        % (rs(q), why))


def test_server_named_quorum_refused(broker):
    assert refused(broker, "", arguments=Q) == (
        406, "PRECONDITION_FAILED - Cannot declare a server-named queue for type "
        "rabbit_quorum_queue")


def test_redeclare_equivalence(broker):
    c, q, qq, ql = broker.pika(), uname("eqc"), uname("eqq"), uname("eql")
    ch = c.channel()
    ch.queue_declare(q, durable=True)
    ch.queue_declare(qq, durable=True, arguments=Q)
    ch.queue_declare(ql, durable=True, arguments=q_args(**{"x-delivery-limit": 3}))
    # a classic queue named "classic" explicitly is the same queue
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "classic"})
    c.close()
    assert refused(broker, q, arguments=Q) == (
        406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for %s: received the value "
        "'quorum' of type 'longstr' but current is none" % rs(q))
    assert refused(broker, qq) == (
        406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for %s: received none but "
        "current is the value 'quorum' of type 'longstr'" % rs(qq))
    assert refused(broker, qq, arguments={"x-queue-type": "classic"}) == (
        406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for %s: received 'classic' "
        "but current is 'quorum'" % rs(qq))
    assert refused(broker, qq, durable=False, arguments=Q) == (
        406, "PRECONDITION_FAILED - inequivalent arg 'durable' for %s: received 'false' but "
        "current is 'true'" % rs(qq))
    code, text = refused(broker, qq, exclusive=True, arguments=Q)
    assert code == 405 and text.startswith("RESOURCE_LOCKED - cannot obtain exclusive access")
    assert refused(broker, ql, arguments=q_args(**{"x-delivery-limit": 4})) == (
        406, "PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' for %s: received '4' "
        "but current is '3'" % rs(ql))
    assert refused(broker, qq, arguments=q_args(**{"x-quorum-initial-group-size": 3})) == (
        406, "PRECONDITION_FAILED - inequivalent arg 'x-quorum-initial-group-size' for %s: "
        "received the value '3' of type 'signedint' but current is none" % rs(qq))
    c = broker.pika()
    ch = c.channel()
    for n in (q, qq, ql):
        ch.queue_delete(n)
    c.close()


# -- the delivery count and the limit ---------------------------------------------------------

def drop(ch, queues=(), exchanges=()):
    for n in queues:
        ch.queue_delete(n)
    for n in exchanges:
        ch.exchange_delete(n)


def dlx_setup(ch):
    dlx, dlq = uname("dlx"), uname("dlq")
    ch.exchange_declare(dlx, "fanout", durable=True)
    ch.queue_declare(dlq, durable=True)
    ch.queue_bind(dlq, dlx)
    return dlx, dlq


def test_delivery_count_and_limit_dead_letters(broker):
    c = broker.pika()
    ch = c.channel()
    dlx, dlq = dlx_setup(ch)
    q = uname("qlim")
    ch.queue_declare(q, durable=True, arguments=q_args(**{
        "x-delivery-limit": 1, "x-dead-letter-exchange": dlx}))
    ch.basic_publish("", q, b"m1", pika.BasicProperties(
        delivery_mode=2, headers={"h": 1}, expiration="100000"))
    m, p, _ = get_one(ch, q)
    # basic.get always carries the count (RabbitMQ 3.10.8 does), 0 the first time
    assert (m.redelivered, p.headers) == (False, {"h": 1, "x-delivery-count": 0})
    ch.basic_nack(m.delivery_tag, requeue=True)
    m, p, _ = get_one(ch, q)
    assert (m.redelivered, p.headers) == (True, {"h": 1, "x-delivery-count": 1})
    ch.basic_reject(m.delivery_tag, requeue=True)  # the second return: beyond the limit
    m, p, body = get_one(ch, dlq)
    assert body == b"m1" and m.routing_key == q and m.exchange == dlx and not m.redelivered
    h = p.headers
    assert "x-delivery-count" not in h  # never stored with the message
    assert h["h"] == 1
    assert (h["x-first-death-reason"], h["x-first-death-queue"], h["x-first-death-exchange"]) \
        == ("delivery_limit", q, "")
    (d,) = h["x-death"]
    assert (d["count"], d["reason"], d["queue"], d["exchange"], d["routing-keys"],
            d["original-expiration"]) == (1, "delivery_limit", q, "", [q], "100000")
    assert p.expiration is None
    ch.basic_ack(m.delivery_tag)
    assert ch.basic_get(q)[0] is None
    drop(ch, (q, dlq), (dlx,))
    c.close()


def test_consumer_sees_count_from_second_delivery(broker):
    c = broker.pika()
    ch = c.channel()
    q = uname("qcons")
    ch.queue_declare(q, durable=True, arguments=Q)
    ch.basic_publish("", q, b"m")
    got = []

    def cb(ch_, m, p, b):
        got.append((m.redelivered, p.headers))
        ch_.basic_nack(m.delivery_tag, requeue=len(got) < 3)

    ch.basic_consume(q, cb)
    deadline = time.monotonic() + 10
    while len(got) < 3 and time.monotonic() < deadline:
        c.process_data_events(0.1)
    # header absent on the first delivery, then the number of returns
    assert got == [(False, None), (True, {"x-delivery-count": 1}),
                   (True, {"x-delivery-count": 2})]
    ch.queue_delete(q)
    c.close()


def test_channel_close_and_recover_count_as_returns(broker):
    c = broker.pika()
    ch = c.channel()
    q = uname("qclose")
    ch.queue_declare(q, durable=True, arguments=Q)
    ch.basic_publish("", q, b"m")
    assert get_one(ch, q)[1].headers == {"x-delivery-count": 0}
    ch.close()  # unacked: returned
    ch = c.channel()
    m, p, _ = get_one(ch, q)
    assert (m.redelivered, p.headers) == (True, {"x-delivery-count": 1})
    ch.basic_recover(requeue=True)
    m, p, _ = get_one(ch, q)
    assert p.headers == {"x-delivery-count": 2}
    ch.basic_ack(m.delivery_tag)
    ch.queue_delete(q)
    c.close()


@pytest.mark.parametrize("limit", [0, -1])
def test_limit_zero_or_negative_dead_letters_at_first_return(broker, limit):
    c = broker.pika()
    ch = c.channel()
    dlx, dlq = dlx_setup(ch)
    q = uname("qz")
    ch.queue_declare(q, durable=True, arguments=q_args(**{
        "x-delivery-limit": limit, "x-dead-letter-exchange": dlx}))
    ch.basic_publish("", q, b"m")
    ch.basic_nack(get_one(ch, q)[0].delivery_tag, requeue=True)
    m, p, _ = get_one(ch, dlq, auto_ack=True)
    assert p.headers["x-death"][0]["reason"] == "delivery_limit"
    assert ch.basic_get(q)[0] is None
    drop(ch, (q, dlq), (dlx,))
    c.close()


def test_limit_without_dead_letter_exchange_drops(broker):
    c = broker.pika()
    ch = c.channel()
    q = uname("qdrop")
    ch.queue_declare(q, durable=True, arguments=q_args(**{"x-delivery-limit": 0}))
    ch.basic_publish("", q, b"m")
    ch.basic_nack(get_one(ch, q)[0].delivery_tag, requeue=True)
    ok = wait_for(lambda: (lambda o: o if o.method.message_count == 0 else None)(
        ch.queue_declare(q, passive=True)), message="the message dropped")
    assert ok.method.message_count == 0
    ch.queue_delete(q)
    c.close()


def test_reject_without_requeue_is_reason_rejected(broker):
    c = broker.pika()
    ch = c.channel()
    dlx, dlq = dlx_setup(ch)
    q = uname("qrej")
    ch.queue_declare(q, durable=True, arguments=q_args(**{
        "x-delivery-limit": 5, "x-dead-letter-exchange": dlx}))
    ch.basic_publish("", q, b"m")
    ch.basic_reject(get_one(ch, q)[0].delivery_tag, requeue=False)
    assert get_one(ch, dlq, auto_ack=True)[1].headers["x-death"][0]["reason"] == "rejected"
    drop(ch, (q, dlq), (dlx,))
    c.close()


def test_classic_queue_has_no_delivery_count(broker):
    c = broker.pika()
    ch = c.channel()
    q = uname("qclassic")
    ch.queue_declare(q, durable=True)
    ch.basic_publish("", q, b"m", pika.BasicProperties(headers={"a": 1}))
    m, p, _ = get_one(ch, q)
    assert p.headers == {"a": 1}
    ch.basic_nack(m.delivery_tag, requeue=True)
    m, p, _ = get_one(ch, q)
    assert m.redelivered and p.headers == {"a": 1}
    ch.queue_delete(q)
    c.close()


def test_kombu_quorum_queue_requeue_until_dead_lettered(broker):
    """What a Celery worker with quorum queues does: kombu declares them with queue_arguments,
    requeues a failing message, and reads x-delivery-count from its headers."""
    from kombu import Connection, Consumer, Exchange, Producer, Queue
    dlx = Exchange(uname("kdlx"), type="fanout", durable=True)
    dlq = Queue(uname("kdlq"), exchange=dlx, durable=True)
    name = uname("kq")
    queue = Queue(name, Exchange(""), routing_key=name, durable=True, queue_arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 1,
        "x-dead-letter-exchange": dlx.name})
    seen = []
    with Connection("amqp://guest:guest@%s:%d//" % (broker.host, broker.port),
                    connect_timeout=5, transport_options={"confirm_publish": True}) as conn:
        ch = conn.channel()
        try:
            dlq(ch).declare()
            queue(ch).declare()
            Producer(ch, serializer="json").publish({"task": 1}, exchange="", routing_key=name,
                                                    delivery_mode=2, retry=False)

            def on_message(body, message):
                seen.append((message.delivery_info["redelivered"],
                             message.headers.get("x-delivery-count")))
                message.requeue()

            with Consumer(ch, queues=[queue], callbacks=[on_message], accept=["json"]):
                deadline = time.monotonic() + 10
                while len(seen) < 2 and time.monotonic() < deadline:
                    try:
                        conn.drain_events(timeout=1)
                    except TimeoutError:
                        pass
            assert seen == [(False, None), (True, 1)]
            m = wait_for(lambda: dlq(ch).get(no_ack=True), message="the dead letter")
            assert m.payload == {"task": 1}
            assert m.headers["x-death"][0]["reason"] == "delivery_limit"
        finally:
            queue(ch).delete()
            dlq(ch).delete()
            dlx(ch).delete()
            ch.close()


# -- management API and definitions (Sluice's API; RabbitMQ's shown in the module doc) ---------

def test_api_type_and_definitions(broker_factory):
    from test_mgmt import Api
    b = broker_factory()
    api = Api(b)
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("qq", durable=True, arguments=q_args(**{"x-delivery-limit": 2}))
    ch.queue_declare("qc", durable=True)
    c.close()
    j = api.queue("qq")
    assert j["type"] == "quorum"
    assert j["arguments"] == {"x-queue-type": "quorum", "x-delivery-limit": 2}
    assert j["leader"] == j["node"] and j["members"] == [j["node"]] == j["online"]
    assert api.queue("qc")["type"] == "classic"
    s, d, _ = api.get("/api/definitions")
    assert s == 200
    qs = {q["name"]: q for q in d["queues"]}
    assert qs["qq"]["arguments"] == {"x-queue-type": "quorum", "x-delivery-limit": 2}
    # declared over HTTP: the same refusals, as 400 with RabbitMQ's words
    s, j, _ = api.put(api.q("qbad"), {"durable": False, "arguments": Q})
    assert s == 400 and "invalid property 'non-durable' for queue 'qbad'" in j["reason"]
    s, j, _ = api.put(api.q("qhttp"), {"durable": True, "arguments": Q})
    assert s in (201, 204) and api.queue("qhttp")["type"] == "quorum"
    # imported into a fresh node, the quorum queue is one again
    b2 = broker_factory()
    api2 = Api(b2)
    s, j, _ = api2.post("/api/definitions", d)
    assert s in (200, 201, 204), j
    assert api2.queue("qq")["type"] == "quorum"
    # an export that names the type beside the arguments (RabbitMQ 3.11+) imports as well
    s, j, _ = api2.post("/api/definitions", {"queues": [
        {"name": "qt", "vhost": "/", "durable": True, "auto_delete": False, "type": "quorum",
         "arguments": {}}]})
    assert s in (200, 201, 204), j
    assert api2.queue("qt")["type"] == "quorum"


# -- durability of the count -------------------------------------------------------------------

def test_count_survives_kill9_and_a_held_delivery_counts_as_returned(broker_factory, tmp_path):
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    dlx, dlq = dlx_setup(ch)
    ch.queue_declare("qk", durable=True, arguments=q_args(**{
        "x-delivery-limit": 3, "x-dead-letter-exchange": dlx}))
    ch.confirm_delivery()
    for body in (b"a", b"b", b"c"):
        ch.basic_publish("", "qk", body, pika.BasicProperties(delivery_mode=2))

    def get(expect_body, expect_count):
        m, p, body = get_one(ch, "qk")
        assert (body, p.headers["x-delivery-count"]) == (expect_body, expect_count)
        return m.delivery_tag

    # a requeued message goes back to its place: a twice, then b once
    ch.basic_nack(get(b"a", 0), requeue=True)
    ch.basic_nack(get(b"a", 1), requeue=True)
    get(b"a", 2)  # held at the kill
    ch.basic_nack(get(b"b", 0), requeue=True)
    get(b"b", 1)  # held
    get(b"c", 0)  # held
    b.kill9()
    # the stop returned every held one: one more each
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    held = [get(b"a", 3), get(b"b", 2), get(b"c", 1)]
    for tag in held:  # a: 4 > 3, dead-lettered; b: 3; c: 2
        ch.basic_nack(tag, requeue=True)
    m, p, body = get_one(ch, dlq, auto_ack=True)
    assert body == b"a" and p.headers["x-death"][0]["reason"] == "delivery_limit"
    c.close()
    b.kill9()
    # returned and not delivered since: the counts stand; b's next return dead-letters it
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    ch.basic_nack(get(b"b", 3), requeue=True)
    m = get(b"c", 2)
    ch.basic_ack(m)
    assert ch.basic_get("qk")[0] is None
    assert get_one(ch, dlq, auto_ack=True)[2] == b"b"
    c.close()
    b.kill9()
    # a count beyond the limit at a restart (held at the kill) dead-letters at the head
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    ch.confirm_delivery()
    ch.basic_publish("", "qk", b"d", pika.BasicProperties(delivery_mode=2))
    for n in range(3):
        ch.basic_nack(get(b"d", n), requeue=True)
    get(b"d", 3)  # held at the kill: 4 after it
    b.kill9()
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    assert ch.basic_get("qk")[0] is None
    assert get_one(ch, dlq, auto_ack=True)[2] == b"d"
    c.close()


def test_count_survives_a_clean_restart_and_tidy(broker_factory, tmp_path):
    from test_mgmt import Api
    data = tmp_path / "data"
    b = broker_factory(data_dir=data, config={"segment_size": "4k", "reap_interval": "0"})
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("qt", durable=True, arguments=Q)
    ch.queue_declare("filler", durable=True)
    ch.confirm_delivery()
    ch.basic_publish("", "qt", b"x", pika.BasicProperties(delivery_mode=2))
    for _ in range(3):
        ch.basic_nack(get_one(ch, "qt")[0].delivery_tag, requeue=True)
    # fill segments and empty them, so TIDY copies qt's records forward
    for _ in range(60):
        ch.basic_publish("", "filler", b"f" * 1000, pika.BasicProperties(delivery_mode=2))
    ch.queue_purge("filler")
    c.close()
    s, j, _ = Api(b).action("MACHINE", "TIDY")
    assert s == 200 and j["segments_freed"] > 0 and j["records_copied"] > 0, j
    b.terminate()
    b = broker_factory(data_dir=data, config={"segment_size": "4k", "reap_interval": "0"})
    c = b.pika()
    ch = c.channel()
    m, p, _ = get_one(ch, "qt")
    assert (m.redelivered, p.headers) == (True, {"x-delivery-count": 3})
    c.close()
