"""Streams over AMQP 0-9-1 (x-queue-type stream, issue 47) as RabbitMQ 3.10-3.13 has them:
declare and its refusals, consuming with manual acks and a prefetch, the x-stream-offset
consumer argument (first, last, next, a number, an AMQP timestamp, an interval), the
x-stream-offset header on each delivery, many consumers each at its own offset, acks that only
move the credit window, what a stream refuses (basic.get, queue.purge, auto-ack), replay after a
restart and after kill -9, and retention by x-max-length-bytes a whole segment at a time.

The refusal texts follow rabbit_stream_queue.erl / rabbit_channel.erl of 3.10-3.13 (read, not
observed: Debian's RabbitMQ here has no stream queues without the plugin). The tests that use
`broker` can run against RabbitMQ with streams (SLUICE_TEST_TARGET=rabbitmq); the ones that
restart or look at the data directory need a private sluiced.
"""

import datetime
import os
import time

import pika
import pytest

from cluster_client import etcd  # noqa: F401 (the fixture)
from helpers import uname, wait_for

S = {"x-queue-type": "stream"}


def s_args(**kw):
    a = dict(S)
    a.update(kw)
    return a


def rs(name):
    return "queue '%s' in vhost '/'" % name


def declare_refused(broker, name, durable=True, exclusive=False, auto_delete=False,
                    arguments=None):
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


def publish_confirmed(ch, queue, bodies, **props):
    ch.confirm_delivery()
    for b in bodies:
        ch.basic_publish("", queue, b, pika.BasicProperties(**props))


def consume(ch, queue, n, offset=None, prefetch=100, ack=True, timeout=10.0):
    """Up to n deliveries from a new consumer: [(offset header, body, delivery tag)]."""
    ch.basic_qos(prefetch_count=prefetch)
    args = {} if offset is None else {"x-stream-offset": offset}
    got = []
    deadline = time.monotonic() + timeout
    for m, p, body in ch.consume(queue, arguments=args, inactivity_timeout=0.5):
        if m is None:
            if len(got) >= n or time.monotonic() > deadline:
                break
            continue
        got.append((p.headers["x-stream-offset"], body, m.delivery_tag))
        if ack:
            ch.basic_ack(m.delivery_tag)
        if len(got) >= n:
            break
    ch.cancel()
    return got


# -- declare ------------------------------------------------------------------------------

def test_declare_accepted_and_redeclared(broker):
    q = uname("st")
    c = broker.pika()
    ch = c.channel()
    ok = ch.queue_declare(q, durable=True, arguments=s_args(**{
        "x-max-length-bytes": 10000000, "x-max-age": "7D",
        "x-stream-max-segment-size-bytes": 1000000}))
    assert ok.method.queue == q
    ch.queue_declare(q, durable=True, arguments=s_args(**{
        "x-max-length-bytes": 10000000, "x-max-age": "7D",
        "x-stream-max-segment-size-bytes": 1000000}))
    ch.queue_declare(q, passive=True)
    ch.queue_delete(q)
    c.close()


@pytest.mark.parametrize("kw,text", [
    ({"durable": False}, "invalid property 'non-durable' for %s"),
    ({"exclusive": True}, "invalid property 'exclusive-owner' for %s"),
    ({"auto_delete": True}, "invalid property 'auto-delete' for %s"),
])
def test_declare_refuses_properties(broker, kw, text):
    q = uname("st")
    args = dict(durable=True)
    args.update(kw)
    assert declare_refused(broker, q, arguments=S, **args) == (
        406, "PRECONDITION_FAILED - " + text % rs(q))


@pytest.mark.parametrize("arg,value", [
    ("x-max-priority", 5), ("x-message-ttl", 1000), ("x-expires", 1000), ("x-max-length", 10),
    ("x-overflow", "reject-publish"), ("x-dead-letter-exchange", "dlx"),
    ("x-single-active-consumer", True), ("x-delivery-limit", 3),
])
def test_declare_refuses_arguments_of_other_types(broker, arg, value):
    q = uname("st")
    assert declare_refused(broker, q, arguments=s_args(**{arg: value})) == (
        406, "PRECONDITION_FAILED - invalid arg '%s' for %s of queue type rabbit_stream_queue"
        % (arg, rs(q)))


def test_declare_refuses_a_bad_max_age_and_server_names(broker):
    q = uname("st")
    assert declare_refused(broker, q, arguments=s_args(**{"x-max-age": "10x"})) == (
        406, "PRECONDITION_FAILED - invalid arg 'x-max-age' for %s: invalid_max_age" % rs(q))
    code, text = declare_refused(broker, "", arguments=S)
    assert (code, text) == (
        406, "PRECONDITION_FAILED - Cannot declare a server-named queue for type "
        "rabbit_stream_queue")


# -- what a stream refuses -------------------------------------------------------------------

def refusal(broker, fn):
    """fn(channel) on a fresh connection: ("channel" | "connection", code, text) of the error
    it met, or None. 540 NOT_IMPLEMENTED is a hard error: RabbitMQ closes the connection."""
    c = broker.pika()
    ch = c.channel()
    try:
        fn(ch)
    except pika.exceptions.ChannelClosedByBroker as e:
        return "channel", e.reply_code, e.reply_text
    except pika.exceptions.ConnectionClosedByBroker as e:
        return "connection", e.reply_code, e.reply_text
    finally:
        if c.is_open:
            c.close()
    return None


def test_refusals_get_purge_autoack_no_prefetch(broker):
    q = uname("st")
    c = broker.pika()
    ch = c.channel()
    ch.queue_declare(q, durable=True, arguments=S)
    publish_confirmed(ch, q, [b"x"])
    c.close()
    assert refusal(broker, lambda ch: ch.basic_get(q)) == (
        "connection", 540,
        "NOT_IMPLEMENTED - basic.get not supported by stream queues %s" % rs(q))
    assert refusal(broker, lambda ch: ch.queue_purge(q)) == (
        "connection", 540,
        "NOT_IMPLEMENTED - queue.purge not supported by stream queues %s" % rs(q))
    assert refusal(broker, lambda ch: ch.basic_consume(q, lambda *a: None)) == (
        "channel", 406,
        "PRECONDITION_FAILED - consumer prefetch count is not set for '%s'" % rs(q))

    def auto_ack(ch):
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(q, lambda *a: None, auto_ack=True)
    assert refusal(broker, auto_ack) == (
        "connection", 540,
        "NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues %s" % rs(q))

    def global_qos(ch):
        ch.basic_qos(prefetch_count=10)
        ch.basic_qos(prefetch_count=10, global_qos=True)
        ch.basic_consume(q, lambda *a: None)
    assert refusal(broker, global_qos) == (
        "connection", 540, "NOT_IMPLEMENTED - %s does not support global qos" % rs(q))

    def bad_interval(ch):
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(q, lambda *a: None, arguments={"x-stream-offset": "5x"})
    r = refusal(broker, bad_interval)
    assert r is not None and r[:2] == ("channel", 406)
    # the stream is untouched by all that
    c = broker.pika()
    assert [b for _, b, _ in consume(c.channel(), q, 1, "first")] == [b"x"]
    c.close()


# -- offsets ---------------------------------------------------------------------------------

def test_offsets_first_numeric_last_next_and_header(broker):
    q = uname("st")
    c = broker.pika()
    ch = c.channel()
    ch.queue_declare(q, durable=True, arguments=S)
    bodies = [b"m%d" % i for i in range(10)]
    publish_confirmed(ch, q, bodies, headers={"app": "kept"})
    got = consume(ch, q, 10, "first")
    assert [(o, b) for o, b, _ in got] == list(enumerate(bodies))
    got = consume(ch, q, 5, 5)
    assert [(o, b) for o, b, _ in got] == [(i, bodies[i]) for i in range(5, 10)]
    # beyond the end: from the next one written; below 0 does not exist (long): from first
    # each message was confirmed before the next was sent: the last chunk holds the last one
    got = consume(ch, q, 1, "last")
    assert [(o, b) for o, b, _ in got] == [(9, b"m9")]
    # next (and no argument): only what comes after the consumer attached
    ch.basic_qos(prefetch_count=10)
    seen = []
    tag = ch.basic_consume(q, lambda c_, m, p, b: seen.append((p.headers["x-stream-offset"], b,
                                                               p.headers.get("app"))),
                           arguments={"x-stream-offset": "next"})
    ch2 = c.channel()
    publish_confirmed(ch2, q, [b"new"], headers={"app": "kept"})
    wait_for(lambda: (c.process_data_events(0.1), seen)[1], message="the new message")
    assert seen == [(10, b"new", "kept")]
    ch.basic_cancel(tag)
    c.close()


def test_offset_timestamp_and_interval(broker):
    q = uname("st")
    c = broker.pika()
    ch = c.channel()
    ch.queue_declare(q, durable=True, arguments=S)
    publish_confirmed(ch, q, [b"a0", b"a1"])
    # wait for the wall clock's next second: what follows is at or after it
    t0 = int(time.time())
    wait_for(lambda: int(time.time()) > t0, timeout=2.0, interval=0.01, message="next second")
    t = datetime.datetime.fromtimestamp(int(time.time()), tz=datetime.timezone.utc)
    publish_confirmed(ch, q, [b"b0", b"b1"])
    got = consume(ch, q, 2, t)
    assert [(o, b) for o, b, _ in got] == [(2, b"b0"), (3, b"b1")]
    # from the epoch: everything; an interval of an hour: everything
    got = consume(ch, q, 4, datetime.datetime(1971, 1, 1, tzinfo=datetime.timezone.utc))
    assert [o for o, _, _ in got] == [0, 1, 2, 3]
    got = consume(ch, q, 4, "1h")
    assert [o for o, _, _ in got] == [0, 1, 2, 3]
    c.close()


def test_many_consumers_each_at_its_own_offset(broker):
    q = uname("st")
    c = broker.pika()
    ch = c.channel()
    ch.queue_declare(q, durable=True, arguments=S)
    publish_confirmed(ch, q, [b"%d" % i for i in range(20)])
    seen = {}
    chans = []
    for start in (0, 7, 15):
        cc = c.channel()
        cc.basic_qos(prefetch_count=3)
        seen[start] = []

        def on(chx, m, p, b, start=start):
            seen[start].append(p.headers["x-stream-offset"])
            chx.basic_ack(m.delivery_tag)
        cc.basic_consume(q, on, arguments={"x-stream-offset": start})
        chans.append(cc)
    wait_for(lambda: (c.process_data_events(0.05),
                      all(len(v) == 20 - k for k, v in seen.items()))[1],
             timeout=10, message="every consumer at its tail")
    for start, offs in seen.items():
        assert offs == list(range(start, 20))
    c.close()


def test_ack_only_moves_the_credit_window(broker):
    q = uname("st")
    c = broker.pika()
    ch = c.channel()
    ch.queue_declare(q, durable=True, arguments=S)
    publish_confirmed(ch, q, [b"0", b"1", b"2", b"3"])
    ch.basic_qos(prefetch_count=1)
    got = []
    ch.basic_consume(q, lambda c_, m, p, b: got.append((p.headers["x-stream-offset"], m)),
                     arguments={"x-stream-offset": "first"})
    wait_for(lambda: (c.process_data_events(0.05), got)[1], message="a first delivery")
    c.process_data_events(0.3)
    assert [o for o, _ in got] == [0]  # the window is one
    ch.basic_nack(got[0][1].delivery_tag, requeue=True)  # credit back; nothing comes again
    wait_for(lambda: (c.process_data_events(0.05), len(got) >= 2)[1], message="the second")
    ch.basic_reject(got[1][1].delivery_tag, requeue=True)
    wait_for(lambda: (c.process_data_events(0.05), len(got) >= 3)[1], message="the third")
    ch.basic_ack(got[2][1].delivery_tag)
    wait_for(lambda: (c.process_data_events(0.05), len(got) >= 4)[1], message="the fourth")
    assert [o for o, _ in got] == [0, 1, 2, 3]
    ch.basic_ack(got[3][1].delivery_tag)
    c.close()
    # acks removed nothing: a new consumer reads all four again
    c = broker.pika()
    assert [o for o, _, _ in consume(c.channel(), q, 4, "first")] == [0, 1, 2, 3]
    c.close()


def test_published_through_an_exchange(broker):
    q = uname("st")
    x = uname("x")
    c = broker.pika()
    ch = c.channel()
    ch.queue_declare(q, durable=True, arguments=S)
    ch.exchange_declare(x, "direct", durable=True)
    ch.queue_bind(q, x, "rk")
    ch.confirm_delivery()
    ch.basic_publish(x, "rk", b"via-x", pika.BasicProperties(content_type="text/plain"))
    ch.basic_qos(prefetch_count=5)
    for m, p, body in ch.consume(q, arguments={"x-stream-offset": "first"},
                                 inactivity_timeout=5):
        assert m is not None, "no delivery"
        assert (m.exchange, m.routing_key, body, p.content_type) == (
            x, "rk", b"via-x", "text/plain")
        assert p.headers == {"x-stream-offset": 0}
        break
    ch.cancel()
    ch.exchange_delete(x)
    ch.queue_delete(q)
    c.close()


# -- durability ------------------------------------------------------------------------------

def test_replay_after_restart_and_kill9(broker_factory, tmp_path):
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("sk", durable=True, arguments=S)
    publish_confirmed(ch, "sk", [b"c%d" % i for i in range(50)])
    c.close()
    assert b.terminate() == 0
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    got = consume(ch, "sk", 50, "first")
    assert [(o, bb) for o, bb, _ in got] == [(i, b"c%d" % i) for i in range(50)]
    # every confirmed message survives kill -9, and offsets go on after it
    publish_confirmed(ch, "sk", [b"k%d" % i for i in range(200)])
    b.kill9()
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    got = consume(ch, "sk", 250, "first")
    assert [o for o, _, _ in got] == list(range(250))
    assert [bb for _, bb, _ in got[50:]] == [b"k%d" % i for i in range(200)]
    publish_confirmed(ch, "sk", [b"after"])
    assert consume(ch, "sk", 1, 250)[0][:2] == (250, b"after")
    c.close()


def stream_dir_bytes(data):
    total = 0
    for root, _, files in os.walk(os.path.join(str(data), "streams")):
        for f in files:
            if f.endswith(".seg"):
                total += os.path.getsize(os.path.join(root, f))
    return total


def test_retention_drops_whole_segments_and_frees_disk(broker_factory, tmp_path):
    from test_mgmt import Api
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    api = Api(b)
    limit, seg = 20000, 4000
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("sr", durable=True, arguments=s_args(**{
        "x-max-length-bytes": limit, "x-stream-max-segment-size-bytes": seg}))
    body = b"r" * 100
    publish_confirmed(ch, "sr", [body] * 600)  # 600 x (124 + ~10) bytes: far over the limit
    j = api.queue("sr")
    assert j["type"] == "stream"
    assert j["committed_offset"] == 599
    first = j["first_offset"]
    assert first > 0, j
    on_disk = stream_dir_bytes(data)
    assert on_disk == j["stream_bytes"]
    assert on_disk <= limit + seg, (on_disk, j)
    assert j["messages"] == 600 - first
    assert j["segments"] >= 2
    # whole segments: the oldest kept begins exactly at the first offset kept
    names = sorted(f for _, _, fs in os.walk(os.path.join(str(data), "streams")) for f in fs)
    assert names[0] == "%020d.seg" % first
    # a consumer from the start begins at the first offset kept
    got = consume(ch, "sr", 600 - first, "first")
    assert got[0][0] == first and got[-1][0] == 599
    c.close()
    # deleting the stream deletes its files
    c = b.pika()
    c.channel().queue_delete("sr")
    c.close()
    assert stream_dir_bytes(data) == 0


def test_retention_by_age_drops_old_segments(broker_factory, tmp_path):
    from test_mgmt import Api
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    api = Api(b)
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("sa", durable=True, arguments=s_args(**{
        "x-max-age": "1s", "x-stream-max-segment-size-bytes": 2000}))
    publish_confirmed(ch, "sa", [b"o" * 100] * 40)  # old: several segments
    old_end = api.queue("sa")["committed_offset"]
    assert api.queue("sa")["first_offset"] == 0
    # once they are more than a second old, the next writes (a roll) let them go
    t_old = time.time()
    wait_for(lambda: time.time() > t_old + 1.2, timeout=3.0, interval=0.02, message="1.2 s")
    publish_confirmed(ch, "sa", [b"n" * 100] * 40)
    j = api.queue("sa")
    assert j["committed_offset"] == old_end + 40
    assert 0 < j["first_offset"] <= old_end + 1, j
    # whole segments only: what is kept starts at a segment's first offset
    names = sorted(f for _, _, fs in os.walk(os.path.join(str(data), "streams")) for f in fs)
    assert names[0] == "%020d.seg" % j["first_offset"]
    c.close()


def test_declared_over_http_and_in_definitions(broker_factory):
    from test_mgmt import Api
    b = broker_factory()
    api = Api(b)
    s, j, _ = api.put(api.q("shttp"), {"durable": True, "arguments": S})
    assert s in (201, 204), j
    assert api.queue("shttp")["type"] == "stream"
    s, j, _ = api.put(api.q("sbad"), {"durable": False, "arguments": S})
    assert s == 400 and "invalid property 'non-durable' for queue 'sbad'" in j["reason"]
    s, d, _ = api.get("/api/definitions")
    assert s == 200
    qs = {q["name"]: q for q in d["queues"]}
    assert qs["shttp"]["arguments"] == S
    b2 = broker_factory()
    api2 = Api(b2)
    s, j, _ = api2.post("/api/definitions", d)
    assert s in (200, 201, 204), j
    assert api2.queue("shttp")["type"] == "stream"
    c = b2.pika()
    ch = c.channel()
    publish_confirmed(ch, "shttp", [b"imported"])
    assert consume(ch, "shttp", 1, "first")[0][:2] == (0, b"imported")
    c.close()


def test_full_disk_holds_the_confirm_then_goes_on(broker_factory, tmp_path):
    """A stream's write that meets a full disk (ENOSPC) loses nothing and stops nothing: the
    confirm waits until the disk has room, then the entry is there."""
    import amqpraw
    flag = tmp_path / "disk-full"
    b = broker_factory(env={"SLUICE_FAULT": "sync_fail_if=%s,sync_errno=ENOSPC" % flag})
    r = b.raw(timeout=10)
    r.open_channel(1)
    r.rpc(1, "queue.declare", queue="sf", durable=True, arguments=S)
    r.rpc(1, "confirm.select")
    flag.write_text("full")
    r.publish(1, "", "sf", b"waits")
    with pytest.raises(amqpraw.ReadTimeout):
        r.expect("basic.ack", timeout=1.0)  # not on disk: no confirm
    flag.unlink()
    r.expect("basic.ack", timeout=10)
    assert b.proc.poll() is None
    c = b.pika()
    got = consume(c.channel(), "sf", 1, "first")
    assert [(o, bb) for o, bb, _ in got] == [(0, b"waits")]
    c.close()
    assert "out of space" in b.log_tail()


@pytest.mark.alone
def test_a_clustered_node_makes_streams(broker_factory, etcd):
    """A cluster's followers mirror a stream's files like the logs' (test_cluster_streams.py),
    so a clustered node makes a stream as a single node does (it refused them with 406
    "streams are not replicated by a Sluice cluster yet" before they were)."""
    from test_cluster import leader_of, start_node
    # a cluster of one: its confirms need no other replica
    a = start_node(broker_factory, etcd, "sluice@a", **{"cluster.min_insync_replicas": "1"})
    wait_for(lambda: leader_of([a]), timeout=30, message="a leader")
    assert declare_refused(a, "sc", arguments=S) is None
    c = a.pika()
    ch = c.channel()
    publish_confirmed(ch, "sc", [b"one", b"two"])
    assert [(o, bb) for o, bb, _ in consume(ch, "sc", 2, "first")] == [(0, b"one"), (1, b"two")]
    c.close()


def test_consumers_listed_with_their_offsets(broker_factory):
    from test_mgmt import Api
    b = broker_factory()
    api = Api(b)
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("so", durable=True, arguments=S)
    publish_confirmed(ch, "so", [b"%d" % i for i in range(10)])
    ch.basic_qos(prefetch_count=2)
    got = []
    ch.basic_consume("so", lambda c_, m, p, bb: got.append(p.headers["x-stream-offset"]),
                     consumer_tag="at3", arguments={"x-stream-offset": 3})
    wait_for(lambda: (c.process_data_events(0.05), len(got) >= 2)[1], message="two deliveries")
    s, j, _ = api.get("/api/consumers")
    assert s == 200
    mine = [x for x in j if x["consumer_tag"] == "at3"]
    assert len(mine) == 1 and mine[0]["queue"]["name"] == "so"
    assert mine[0]["stream_offset"] == 5  # 3 and 4 delivered, unacked: the window is full
    assert got == [3, 4]
    c.close()
