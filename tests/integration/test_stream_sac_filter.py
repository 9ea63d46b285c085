"""Single active consumer and filtering on RabbitMQ's stream protocol door (src/stream/subscribe.c
over the engine's groups in src/qm/stream.c), driven by the raw client (streamraw.py):

- a group (Subscribe properties single-active-consumer=true, name=REF) has one active member:
  it gets ConsumerUpdate (active 1) and delivery starts at the offset its answer gives; the
  others get nothing until the active one unsubscribes or its connection goes; groups are per
  stream and name;
- a super stream's partition (super-stream=NAME, the binding's x-stream-partition-order) goes
  to the (index mod members)th member, the holder stepping down first (ConsumerUpdate active 0);
- Publish v2's filter value is kept with its entry (over a restart too); a subscription with
  filter.N values gets only the runs of entries it wants (match-unfiltered adds those published
  without one): the others are skipped on the server."""
import re
import struct

import pytest

import streamraw as sr
from helpers import wait_for

pytestmark = pytest.mark.sluice_only("the stream door of a private broker")

STREAM_RE = re.compile(rb"listening stream=([0-9.]+):(\d+)")
CONSUMER_UPDATE = 0x1a


def port_of(b):
    m = wait_for(lambda: STREAM_RE.search(open(b.log_path, "rb").read()), 5,
                 message="no 'listening stream=' line")
    return int(m.group(2))


def start(broker_factory, **kw):
    b = broker_factory(config={"listeners.stream": "0"}, **kw)
    return b, port_of(b)


def opened(port):
    c = sr.StreamClient(port)
    c.connect()
    return c


def create(c, name):
    corr = c.request(sr.CREATE, sr.s16(name) + sr.kvmap({}))
    return c.response(sr.CREATE, corr)[0]


def publish_all(port, stream, msgs, filters=None):
    """Publish msgs (bytes) one frame each (one chunk each, confirmed before the next), with
    Publish v2 and filters[i] (None: no filter value) when filters is given."""
    p = opened(port)
    assert p.declare_publisher(1, stream) == sr.OK
    for i, m in enumerate(msgs):
        if filters is None:
            p.publish(1, [(i + 1, sr.amqp10(m))])
        else:
            body = struct.pack(">Bi", 1, 1) + struct.pack(">Q", i + 1) + sr.s16(filters[i])
            p.send(sr.PUBLISH, body + sr.b32(sr.amqp10(m)), version=2)
        assert p.confirms(1, 1) == [i + 1]
    p.close()


def consumer_update(c):
    """The next ConsumerUpdate request: (corr, subscription id, active)."""
    r = c.expect(CONSUMER_UPDATE)
    return r.take(">I"), r.take(">B"), r.take(">B")


def answer(c, corr, kind=sr.NEXT, value=None):
    spec = struct.pack(">H", kind)
    if kind in (sr.OFFSET, sr.TIMESTAMP):
        spec += struct.pack(">Q", value)
    c.send(CONSUMER_UPDATE | sr.RESPONSE, struct.pack(">IH", corr, sr.OK) + spec)


def quiet(c, stream="s"):
    """Nothing (no Deliver, no ConsumerUpdate) came before the answer to a request sent now:
    the server handles a connection's frames in order and writes what it has at once."""
    assert c.stream_stats(stream)[0] == sr.OK  # expect() fails on any other frame first


def sac(name, **more):
    d = {"single-active-consumer": "true", "name": name}
    d.update(more)
    return d


def test_only_the_active_member_consumes_and_the_next_takes_over(broker_factory):
    b, port = start(broker_factory)
    a = opened(port)
    assert create(a, "s") == sr.OK
    publish_all(port, "s", [b"m%d" % i for i in range(5)])
    # the first member: its answer goes first, then ConsumerUpdate active; nothing is
    # delivered before the client answered it, then from the offset the answer gives
    assert a.subscribe(1, "s", sr.FIRST, credit=10, props=sac("g")) == sr.OK
    corr, sid, active = consumer_update(a)
    assert (sid, active) == (1, 1)
    quiet(a)
    answer(a, corr, sr.OFFSET, 1)
    assert [o for o, _ in a.messages(4)] == [1, 2, 3, 4]
    # a second member (another connection) and a third (a's own) wait: no update, no Deliver
    w = opened(port)
    assert w.subscribe(7, "s", sr.FIRST, credit=10, props=sac("g")) == sr.OK
    assert a.subscribe(2, "s", sr.FIRST, credit=10, props=sac("g")) == sr.OK
    quiet(w)
    quiet(a)
    # another group on the same stream is a group of its own: active at once
    assert w.subscribe(8, "s", sr.FIRST, credit=10, props=sac("other")) == sr.OK
    corr, sid, active = consumer_update(w)
    assert (sid, active) == (8, 1)
    answer(w, corr, sr.FIRST)
    assert len(w.messages(5)) == 5
    # the active member unsubscribes: the oldest waiting one (w's 7) becomes active and
    # reads from where its answer says
    assert a.unsubscribe(1) == sr.OK
    corr, sid, active = consumer_update(w)
    assert (sid, active) == (7, 1)
    answer(w, corr, sr.OFFSET, 3)
    assert [o for o, _ in w.messages(2)] == [3, 4]
    quiet(a)
    # the active member's connection goes: a's 2 takes over
    w.close()
    corr, sid, active = consumer_update(a)
    assert (sid, active) == (2, 1)
    answer(a, corr, sr.FIRST)
    assert [o for o, _ in a.messages(5)] == [0, 1, 2, 3, 4]
    # and new messages go to it alone
    publish_all(port, "s", [b"late"])
    assert a.messages(1) == [(5, sr.amqp10(b"late"))]
    a.close()
    b.assert_alive()


def test_a_member_without_a_name_is_refused(broker_factory):
    b, port = start(broker_factory)
    a = opened(port)
    assert create(a, "s") == sr.OK
    assert a.subscribe(1, "s", sr.FIRST, props={"single-active-consumer": "true"}) == \
        sr.PRECONDITION_FAILED
    # not a group member: an ordinary subscription
    assert a.subscribe(1, "s", sr.FIRST, props={"single-active-consumer": "false"}) == sr.OK
    quiet(a)
    a.close()


def test_super_stream_partitions_are_spread_over_the_members(broker_factory):
    b, port = start(broker_factory)
    a = opened(port)
    for i in range(3):
        assert create(a, "ss-%d" % i) == sr.OK
    conn = b.pika()
    ch = conn.channel()
    ch.exchange_declare("ss", "direct", durable=True)
    # the index as RabbitMQ finds it: the binding's order, an integer or a string of one (the
    # client suite's HTTP helper sends "1"), else the digits after the stream name's last '-'
    ch.queue_bind("ss-0", "ss", "0")
    ch.queue_bind("ss-1", "ss", "1", arguments={"x-stream-partition-order": "1"})
    ch.queue_bind("ss-2", "ss", "2", arguments={"x-stream-partition-order": 2})
    conn.close()
    publish_all(port, "ss-1", [b"p1-%d" % i for i in range(3)])
    props = sac("app", **{"super-stream": "ss"})
    # partition 1, one member: it is active
    assert a.subscribe(1, "ss-1", sr.FIRST, credit=10, props=props) == sr.OK
    corr, sid, active = consumer_update(a)
    assert (sid, active) == (1, 1)
    answer(a, corr, sr.FIRST)
    assert len(a.messages(3)) == 3
    # a second member: 1 mod 2 = 1, the partition moves to it; the holder steps down first
    # (ConsumerUpdate active 0) and the new one is activated once the holder answered
    w = opened(port)
    assert w.subscribe(1, "ss-1", sr.FIRST, credit=10, props=props) == sr.OK
    corr, sid, active = consumer_update(a)
    assert (sid, active) == (1, 0)
    quiet(w, "ss-0")
    answer(a, corr)
    corr, sid, active = consumer_update(w)
    assert (sid, active) == (1, 1)
    answer(w, corr, sr.OFFSET, 2)
    assert [o for o, _ in w.messages(1)] == [2]
    publish_all(port, "ss-1", [b"more"])
    assert w.messages(1) == [(3, sr.amqp10(b"more"))]
    quiet(a, "ss-0")
    # on partition 0 the first member keeps it (0 mod 2 = 0): no step-down
    assert a.subscribe(2, "ss-0", sr.FIRST, credit=10, props=props) == sr.OK
    corr, sid, active = consumer_update(a)
    assert (sid, active) == (2, 1)
    answer(a, corr)
    assert w.subscribe(2, "ss-0", sr.FIRST, credit=10, props=props) == sr.OK
    quiet(a, "ss-0")
    quiet(w, "ss-0")
    # the holder of partition 1 goes: the one left gets it back
    w.close()
    corr, sid, active = consumer_update(a)
    assert (sid, active) == (1, 1)
    answer(a, corr, sr.OFFSET, 3)
    assert a.messages(1) == [(3, sr.amqp10(b"more"))]
    a.close()
    b.assert_alive()


def offsets_for(port, props, n):
    c = opened(port)
    assert c.subscribe(1, "s", sr.FIRST, credit=100, props=props) == sr.OK
    got = c.messages(n)
    quiet(c)  # and nothing more: the rest was skipped on the server
    c.close()
    return [o for o, _ in got]


def test_filtering_skips_what_no_value_matches_and_survives_a_restart(broker_factory):
    b, port = start(broker_factory)
    a = opened(port)
    assert create(a, "s") == sr.OK
    a.close()
    filters = ["A", "A", "B", None, "C", "A", None, "B"]
    publish_all(port, "s", [b"m%d" % i for i in range(8)], filters)
    # every entry is there for a subscription without filters, in order
    assert offsets_for(port, None, 8) == list(range(8))
    assert offsets_for(port, {"filter.0": "A", "match-unfiltered": "false"}, 3) == [0, 1, 5]
    assert offsets_for(port, {"filter.0": "A", "filter.1": "B"}, 5) == [0, 1, 2, 5, 7]
    assert offsets_for(port, {"filter.0": "C", "match-unfiltered": "true"}, 3) == [3, 4, 6]
    # the values are in the log: the same after kill -9 and a restart
    data_dir = b.data_dir
    b.kill9()
    b2, port2 = start(broker_factory, data_dir=data_dir)
    assert offsets_for(port2, {"filter.0": "B"}, 2) == [2, 7]
    # a subscription waiting at the end skips what comes later unless it matches
    c = opened(port2)
    assert c.subscribe(1, "s", sr.NEXT, credit=10, props={"filter.0": "Z"}) == sr.OK
    publish_all(port2, "s", [b"x", b"z"], ["X", "Z"])
    assert c.messages(1) == [(9, sr.amqp10(b"z"))]
    c.close()
    b2.assert_alive()
