"""Stream filtering over AMQP 0-9-1, as RabbitMQ 3.13 has it (issue 47): a publisher sets the
header x-stream-filter-value (a string); a consumer gives x-stream-filter (a string or an array
of strings) and x-stream-match-unfiltered (a bool, default false). The rule lives once in the
engine (src/qm/stream.c, qm_stream_filter), the same for the stream protocol's subscriptions
(filter.N=, Publish v2): both doors read the values the other stored.

Sluice filters exactly, per message: a filtered consumer gets only the messages it asked for
(RabbitMQ's Bloom filter per chunk lets others through, which its clients drop; a client that
still filters on its side loses nothing). Filtered-out messages take no prefetch credit.

RabbitMQ refuses neither argument's type (rabbit_stream_queue:filter_spec: any other type is
no filter; an array's non-string items are dropped; a non-bool match-unfiltered is false):
Sluice neither. Its one refusal is its own bound, more than 32 values (406)."""
import time

import pika
import pytest

import streamraw as sr
from helpers import wait_for
from test_stream_sac_filter import opened, port_of, publish_all

pytestmark = pytest.mark.sluice_only("a private broker's stream door and restarts")

S = {"x-queue-type": "stream"}
FILTERS = ["A", "A", "B", None, "C", "A", None, "B"]


def start(broker_factory, **kw):
    b = broker_factory(config={"listeners.stream": "0"}, **kw)
    return b, port_of(b)


def publish_091(b, queue, filters, declare=True):
    c = b.pika()
    ch = c.channel()
    if declare:
        ch.queue_declare(queue, durable=True, arguments=S)
    ch.confirm_delivery()
    for i, f in enumerate(filters):
        h = {"i": i}
        if f is not None:
            h["x-stream-filter-value"] = f
        ch.basic_publish("", queue, b"m%d" % i, pika.BasicProperties(headers=h))
    c.close()


def consume_091(b, queue, args, n, prefetch=100, settle=1.0):
    """Up to n deliveries from a new consumer with these arguments (offset first), and what
    else came within `settle` seconds after the n-th: [(offset, body, headers)]."""
    c = b.pika()
    ch = c.channel()
    ch.basic_qos(prefetch_count=prefetch)
    a = {"x-stream-offset": "first"}
    a.update(args)
    got = []
    deadline = time.monotonic() + 10
    quiet_until = None
    for m, p, body in ch.consume(queue, arguments=a, inactivity_timeout=0.2):
        now = time.monotonic()
        if m is None:
            if quiet_until is not None and now > quiet_until:
                break
            if now > deadline:
                break
            continue
        got.append((p.headers["x-stream-offset"], body, p.headers))
        ch.basic_ack(m.delivery_tag)
        if len(got) >= n and quiet_until is None:
            quiet_until = now + settle
    ch.cancel()
    c.close()
    return got


def offsets(got):
    return [o for o, _, _ in got]


def test_091_filter_exact_per_message(broker_factory):
    b, _ = start(broker_factory)
    publish_091(b, "s", FILTERS)
    # no filter: everything, each with the header it was published with
    allm = consume_091(b, "s", {}, 8)
    assert offsets(allm) == list(range(8))
    assert allm[2][2]["x-stream-filter-value"] == "B"
    assert "x-stream-filter-value" not in allm[3][2]
    # a string; exactly the matching ones (one chunk holds them all: RabbitMQ would send it
    # whole), and nothing more
    got = consume_091(b, "s", {"x-stream-filter": "A"}, 3)
    assert offsets(got) == [0, 1, 5]
    assert all(h["x-stream-filter-value"] == "A" for _, _, h in got)
    # an array, with match-unfiltered false given
    got = consume_091(b, "s", {"x-stream-filter": ["A", "B"],
                               "x-stream-match-unfiltered": False}, 5)
    assert offsets(got) == [0, 1, 2, 5, 7]
    # match-unfiltered adds those published without a value
    got = consume_091(b, "s", {"x-stream-filter": ["C"], "x-stream-match-unfiltered": True}, 3)
    assert offsets(got) == [3, 4, 6]
    # filtered-out messages take no credit: a prefetch of 1 still reaches the last match
    got = consume_091(b, "s", {"x-stream-filter": "B"}, 2, prefetch=1)
    assert offsets(got) == [2, 7]
    b.assert_alive()


def test_091_filter_values_survive_kill9(broker_factory):
    b, _ = start(broker_factory)
    publish_091(b, "s", FILTERS)
    data_dir = b.data_dir
    b.kill9()
    b2, _ = start(broker_factory, data_dir=data_dir)
    assert offsets(consume_091(b2, "s", {"x-stream-filter": "B"}, 2)) == [2, 7]
    # a consumer waiting at the end gets only what matches of what comes later
    c = b2.pika()
    ch = c.channel()
    ch.basic_qos(prefetch_count=10)
    got = []
    ch.basic_consume("s", lambda ch_, m, p, body: got.append((p.headers["x-stream-offset"],
                                                                body)),
                     arguments={"x-stream-offset": "next", "x-stream-filter": "Z"})
    publish_091(b2, "s", ["X", "Z", None], declare=False)
    wait_for(lambda: c.process_data_events(0.1) or got, 10, message="no delivery")
    c.process_data_events(0.5)
    assert got == [(9, b"m1")]
    c.close()
    b2.assert_alive()


def test_filters_cross_the_doors(broker_factory):
    """Values published over 0-9-1 filter a stream-protocol subscription, and Publish v2's
    values filter a 0-9-1 consumer: one rule, one stored value."""
    b, port = start(broker_factory)
    publish_091(b, "s", ["A", "B", None])
    publish_all(port, "s", [b"p3", b"p4", b"p5"], ["B", "A", ""])
    c = opened(port)
    assert c.subscribe(1, "s", sr.FIRST, credit=100, props={"filter.0": "A"}) == sr.OK
    assert [o for o, _ in c.messages(2)] == [0, 4]
    c.close()
    c = opened(port)
    assert c.subscribe(1, "s", sr.FIRST, credit=100,
                       props={"filter.0": "B", "match-unfiltered": "true"}) == sr.OK
    assert [o for o, _ in c.messages(3)] == [1, 2, 3]
    c.close()
    got = consume_091(b, "s", {"x-stream-filter": "A"}, 2)
    assert offsets(got) == [0, 4]
    assert got[1][1] == b"p4"
    # an empty value is a value, not "no value"
    assert offsets(consume_091(b, "s", {"x-stream-filter": ""}, 1)) == [5]
    b.assert_alive()


def test_argument_types_as_rabbitmq_reads_them(broker_factory):
    b, _ = start(broker_factory)
    publish_091(b, "s", FILTERS)
    # not a string or an array: no filter at all (RabbitMQ's filter_spec), so everything
    assert offsets(consume_091(b, "s", {"x-stream-filter": 5}, 8)) == list(range(8))
    # an array's non-string items are dropped
    assert offsets(consume_091(b, "s", {"x-stream-filter": [1, "C", True]}, 1)) == [4]
    # a match-unfiltered that is not a bool is false
    assert offsets(consume_091(b, "s", {"x-stream-filter": "C",
                                        "x-stream-match-unfiltered": "yes"}, 1)) == [4]
    # a header value that is not a string is no filter value (RabbitMQ takes utf8 only)
    c = b.pika()
    ch = c.channel()
    ch.confirm_delivery()
    ch.basic_publish("", "s", b"n", pika.BasicProperties(headers={"x-stream-filter-value": 7}))
    c.close()
    assert offsets(consume_091(b, "s", {"x-stream-filter": "none",
                                        "x-stream-match-unfiltered": True}, 3)) == [3, 6, 8]
    # Sluice's bound: more than 32 values, 406
    c = b.pika()
    ch = c.channel()
    ch.basic_qos(prefetch_count=1)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.basic_consume("s", lambda *a: None,
                         arguments={"x-stream-filter": ["v%d" % i for i in range(33)]})
        c.process_data_events(2)
    assert e.value.reply_code == 406
    assert e.value.reply_text == ("PRECONDITION_FAILED - invalid arg 'x-stream-filter' for queue 's' in vhost '/': "
                                  "more than 32 values")
    c.close()
    b.assert_alive()



def test_a_long_unmatched_run_is_skipped_in_slices(broker_factory):
    """More unmatched reads than one dispatch makes (STREAM_SKIP_READS, 256: entries over the
    64 KiB read buffer are one read each): the consumer stops and goes on from the node's tick
    (q->st_more) until it reaches what matches, without holding the loop meanwhile."""
    b, _ = start(broker_factory)
    big = b"x" * (70 * 1024)
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("s", durable=True, arguments=S)
    ch.confirm_delivery()
    for i in range(300):
        ch.basic_publish("", "s", big,
                         pika.BasicProperties(headers={"x-stream-filter-value": "X"}))
    ch.basic_publish("", "s", b"wanted",
                     pika.BasicProperties(headers={"x-stream-filter-value": "Y"}))
    c.close()
    # the loop answers other clients while the consumer skips
    got = consume_091(b, "s", {"x-stream-filter": "Y"}, 1, settle=0.3)
    assert [(o, body) for o, body, _ in got] == [(300, b"wanted")]
    b.assert_alive()
