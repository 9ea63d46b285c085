"""A ConsumerUpdate that its client never answers does not hold a single active consumer group
for ever: as RabbitMQ's stream reader does with a request to the client that times out
(rabbitmq_stream request_timeout, 60 s by default: "Forcing stream connection closing: request
to client timed out"), the door closes that connection after `stream.request_timeout` ms, the
socket ending with no Close frame, and the group's next member is made active at once. A
client that answers in time keeps its connection."""
import select
import time

import pytest

import streamraw as sr
from helpers import wait_for
from test_stream_door import create, opened, port_of
from test_stream_sac_filter import answer, consumer_update, publish_all, quiet, sac
from test_stream_server_close import frames_then_eof

pytestmark = pytest.mark.sluice_only("the stream door of a private broker")

TIMEOUT_MS = 400


def test_unanswered_consumer_update_closes_the_silent_connection(broker_factory):
    b = broker_factory(config={"listeners.stream": "0",
                               "stream.request_timeout": str(TIMEOUT_MS)})
    port = port_of(b)
    a = opened(port)
    assert create(a, "s") == sr.OK
    publish_all(port, "s", [b"m%d" % i for i in range(3)])
    # the silent one: made active, never answers
    assert a.subscribe(1, "s", sr.FIRST, credit=10, props=sac("g")) == sr.OK
    t0 = time.monotonic()
    corr, sid, active = consumer_update(a)
    assert (sid, active) == (1, 1)
    # another member waits meanwhile (and a member of another group answers in time)
    w = opened(port)
    assert w.subscribe(2, "s", sr.FIRST, credit=10, props=sac("g")) == sr.OK
    k = opened(port)
    assert k.subscribe(3, "s", sr.FIRST, credit=10, props=sac("other")) == sr.OK
    kcorr, _, _ = consumer_update(k)
    answer(k, kcorr, sr.FIRST)
    assert [o for o, _ in k.messages(3)] == [0, 1, 2]
    quiet(w)
    # the timeout: the silent connection ends (no Close frame), w is made active
    assert frames_then_eof(a) == []
    assert time.monotonic() - t0 >= TIMEOUT_MS / 1000.0 * 0.9
    corr, sid, active = consumer_update(w)
    assert (sid, active) == (2, 1)
    answer(w, corr, sr.FIRST)
    assert [o for o, _ in w.messages(3)] == [0, 1, 2]
    wait_for(lambda: b"request to client timed out" in open(b.log_path, "rb").read(), 5,
             message="no log line")
    # the ones that answered keep their connections well past the timeout: nothing (no Close,
    # no EOF) comes to them meanwhile
    assert w.buf == b"" and k.buf == b""
    readable, _, _ = select.select([w.s, k.s], [], [], 2 * TIMEOUT_MS / 1000.0)
    assert readable == []
    publish_all(port, "s", [b"late"])
    assert w.messages(1) == [(3, sr.amqp10(b"late"))]
    assert k.messages(1) == [(3, sr.amqp10(b"late"))]
    w.close()
    k.close()
    b.assert_alive()


def test_unanswered_step_down_closes_too(broker_factory):
    """A super stream partition's holder asked to step down (ConsumerUpdate active 0) that
    never answers: closed, and the partition goes to its owner."""
    from test_stream_superstreams import create_super
    b = broker_factory(config={"listeners.stream": "0",
                               "stream.request_timeout": str(TIMEOUT_MS)})
    port = port_of(b)
    a = opened(port)
    assert create_super(a, "sup", ["sup-0", "sup-1"]) == sr.OK
    props = sac("app", **{"super-stream": "sup"})
    # partition sup-1 (index 1): alone, a is active; then w joins and owns index 1 mod 2
    assert a.subscribe(1, "sup-1", sr.FIRST, credit=10, props=props) == sr.OK
    corr, _, active = consumer_update(a)
    assert active == 1
    answer(a, corr, sr.FIRST)
    w = opened(port)
    assert w.subscribe(1, "sup-1", sr.FIRST, credit=10, props=props) == sr.OK
    corr, _, active = consumer_update(a)
    assert active == 0  # step down: never answered
    assert frames_then_eof(a) == []
    corr, sid, active = consumer_update(w)
    assert (sid, active) == (1, 1)
    answer(w, corr, sr.FIRST)
    w.close()
    b.assert_alive()
