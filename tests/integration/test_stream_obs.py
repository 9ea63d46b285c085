"""Streams as the HTTP API and /metrics show them (issue 47: "Streams listed in the HTTP API and
the console as RabbitMQ lists them ... and in /metrics"): a stream queue's RabbitMQ fields in
/api/queues (type, arguments, leader, members, online, messages, segments, first and committed
offset, consumers) and consumer_details with each consumer's stream_offset; the per-stream
series of /metrics/per-object; and the node-wide stream lines of /metrics, the stream protocol
door's counters among them (docs/http-api.md, "/metrics")."""
import re

import pika
import pytest

import streamraw as sr
from helpers import wait_for
from test_mgmt import Api
from test_stream_door import port_of

pytestmark = pytest.mark.sluice_only("a private broker's streams and /metrics")

S = {"x-queue-type": "stream"}


def publish_confirmed(ch, queue, bodies):
    ch.confirm_delivery()
    for b in bodies:
        ch.basic_publish("", queue, b)


def metrics(api, path="/metrics"):
    """{series with its labels: value} of a /metrics reply."""
    s, text, _ = api.get(path)
    assert s == 200
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def test_a_stream_queue_as_rabbitmq_lists_it_with_its_consumers(broker_factory):
    b = broker_factory()
    api = Api(b)
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("so", durable=True, arguments=dict(S, **{"x-max-age": "7D"}))
    publish_confirmed(ch, "so", [b"%d" % i for i in range(10)])
    ch.basic_qos(prefetch_count=2)
    got = []
    ch.basic_consume("so", lambda c_, m, p, bb: got.append(p.headers["x-stream-offset"]),
                     consumer_tag="at3", arguments={"x-stream-offset": 3})
    wait_for(lambda: (c.process_data_events(0.05), len(got) >= 2)[1], message="two deliveries")
    s, j, _ = api.get("/api/queues/%2F/so")
    assert s == 200
    assert j["type"] == "stream"
    assert j["arguments"] == {"x-queue-type": "stream", "x-max-age": "7D"}
    node = j["node"]
    assert j["leader"] == node and j["members"] == [node] and j["online"] == [node]
    assert j["messages"] == 10 and j["messages_ready"] == 10
    assert j["first_offset"] == 0 and j["committed_offset"] == 9
    assert j["segments"] >= 1 and j["stream_bytes"] > 0
    assert j["consumers"] == 1
    # each consumer with its offset: the next entry it gets (3 and 4 delivered, unacked)
    assert len(j["consumer_details"]) == 1, j["consumer_details"]
    d = j["consumer_details"][0]
    assert d["consumer_tag"] == "at3" and d["queue"] == {"name": "so", "vhost": "/"}
    assert d["stream_offset"] == 5 and d["ack_required"] is True and d["prefetch_count"] == 2
    assert d["channel_details"]["number"] == ch.channel_number
    # the list shows the same figures (consumer_details only for one queue, as RabbitMQ)
    s, lst, _ = api.get("/api/queues/%2F")
    row = [q for q in lst if q["name"] == "so"][0]
    for k in ("type", "messages", "segments", "stream_bytes", "first_offset",
              "committed_offset", "consumers", "leader"):
        assert row[k] == j[k], k
    assert "consumer_details" not in row
    # a classic queue's consumers too; a queue without any has an empty list
    ch.queue_declare("cq")
    s, j, _ = api.get("/api/queues/%2F/cq")
    assert j["consumer_details"] == [] and j["type"] == "classic"
    ch.basic_consume("cq", lambda *a: None, consumer_tag="cq1")
    s, j, _ = api.get("/api/queues/%2F/cq")
    assert [x["consumer_tag"] for x in j["consumer_details"]] == ["cq1"]
    c.close()
    s, j, _ = api.get("/api/queues/%2F/so")
    assert j["consumers"] == 0 and j["consumer_details"] == []


def test_per_stream_series_in_metrics(broker_factory):
    b = broker_factory()
    api = Api(b)
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("sm", durable=True, arguments=S)
    ch.queue_declare("empty", durable=True, arguments=S)
    ch.queue_declare("classic")
    publish_confirmed(ch, "sm", [b"x" * 50] * 10)
    c.close()
    j = api.queue("sm")
    m = metrics(api, "/metrics/per-object")
    lab = '{vhost="/",queue="%s"}'
    assert m["sluice_queue_messages" + lab % "sm"] == 10
    assert m["sluice_queue_messages_ready" + lab % "sm"] == 10
    assert m["sluice_stream_segments" + lab % "sm"] == j["segments"] >= 1
    assert m["sluice_stream_bytes" + lab % "sm"] == j["stream_bytes"] > 0
    assert m["sluice_stream_first_offset" + lab % "sm"] == 0
    assert m["sluice_stream_committed_offset" + lab % "sm"] == 9
    # an empty stream has no committed offset (as the API), a classic queue no stream series
    assert m["sluice_stream_first_offset" + lab % "empty"] == 0
    assert "sluice_stream_committed_offset" + lab % "empty" not in m
    assert not [k for k in m if k.startswith("sluice_stream_") and '"classic"' in k]
    assert m["sluice_queue_messages" + lab % "classic"] == 0
    # node-wide: summed, no names
    s, text, _ = api.get("/metrics", auth=False)
    assert '"sm"' not in text
    m = metrics(api)
    assert m["sluice_streams"] == 2
    assert m["sluice_streams_messages"] == 10
    assert m["sluice_streams_bytes"] >= j["stream_bytes"]
    assert m["sluice_streams_segments"] >= j["segments"]
    assert re.search(r"# TYPE sluice_stream_messages_published_total counter", text)


def test_stream_door_counters_in_metrics(broker_factory):
    b = broker_factory(config={"listeners.stream": "0"})
    port = port_of(b)
    api = Api(b)
    c = b.pika()
    c.channel().queue_declare("sd", durable=True, arguments=S)
    c.close()
    m = metrics(api)
    for k in ("publishers", "consumers", "messages_published_total",
              "messages_confirmed_total", "messages_errored_total",
              "messages_delivered_total"):
        assert m["sluice_stream_" + k] == 0, k
    cl = sr.StreamClient(port)
    cl.connect()
    assert cl.declare_publisher(1, "sd") == sr.OK
    cl.publish(1, [(i, b"m%d" % i) for i in range(1, 6)])
    assert cl.confirms(1, 5) == [1, 2, 3, 4, 5]
    cl.publish(7, [(1, b"nobody")])  # no publisher 7: PublishError
    assert cl.publish_errors() == (7, [(1, sr.PUBLISHER_DOES_NOT_EXIST)])
    assert cl.subscribe(1, "sd", credit=10) == sr.OK
    assert len(cl.messages(5)) == 5
    m = metrics(api)
    assert m["sluice_stream_publishers"] == 1 and m["sluice_stream_consumers"] == 1
    assert m["sluice_stream_messages_published_total"] == 5
    assert m["sluice_stream_messages_confirmed_total"] == 5
    assert m["sluice_stream_messages_errored_total"] == 1
    assert m["sluice_stream_messages_delivered_total"] == 5
    assert m["sluice_streams_messages"] == 5
    # the subscription shows as a consumer of the queue, with the count RabbitMQ gives
    assert api.queue("sd")["consumers"] == 1
    # the gauges come back down: by the commands, then by the connection's end
    assert cl.unsubscribe(1) == sr.OK
    assert cl.delete_publisher(1) == sr.OK
    m = metrics(api)
    assert m["sluice_stream_publishers"] == 0 and m["sluice_stream_consumers"] == 0
    assert cl.declare_publisher(2, "sd") == sr.OK
    assert cl.subscribe(2, "sd", credit=1) == sr.OK
    cl.close()
    wait_for(lambda: (lambda x: x["sluice_stream_publishers"] == 0 and
                      x["sluice_stream_consumers"] == 0)(metrics(api)),
             message="the gauges did not come back to 0 when the connection went")
    assert metrics(api)["sluice_stream_messages_delivered_total"] >= 5
