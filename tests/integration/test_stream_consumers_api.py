"""Stream-protocol subscriptions in /api/consumers, /api/consumers/{vhost} and a stream's
consumer_details, as RabbitMQ 3.13's management lists them: its stream reader registers each
subscription with rabbit_core_metrics:consumer_created (consumer tag "stream.subid-ID", not
exclusive, ack_required false, prefetch_count 0, the Subscribe properties as arguments, active
and activity_status from rabbit_stream_utils:consumer_activity_status: up, single_active,
waiting) on the connection's pid, which the management shows as a channel with no name and
number 0 of that connection (rabbit_mgmt_db:lookup_channel_with_fallback_to_connection).
Sluice adds stream_offset, as it does for AMQP 0-9-1 consumers of a stream."""
import urllib.parse

import pytest

import streamraw as sr
from helpers import wait_for
from test_mgmt import Api
from test_stream_door import create, start
from test_stream_mgmt import stream_client
from test_stream_sac_filter import consumer_update

pytestmark = pytest.mark.sluice_only("the stream door of a private broker")


def stream_items(api, path):
    code, items, _ = api.get(path)
    assert code == 200, (path, code, items)
    return sorted((i for i in items if i["consumer_tag"].startswith("stream.subid-")),
                  key=lambda i: (i["channel_details"]["connection_name"], i["consumer_tag"]))


def test_subscriptions_listed_as_consumers(broker_factory):
    b, port = start(broker_factory)
    api = Api(b)
    a = stream_client(port, "subs-a")
    assert create(a, "s") == sr.OK
    assert a.subscribe(3, "s", sr.FIRST, credit=7, props={"identifier": "x"}) == sr.OK
    # two members of a single-active-consumer group, on two connections, both with id 1
    g = {"single-active-consumer": "true", "name": "grp"}
    w1 = stream_client(port, "subs-b")
    assert w1.subscribe(1, "s", sr.FIRST, credit=5, props=g) == sr.OK
    consumer_update(w1)  # it is made active: the answer is not needed to be listed so
    w2 = stream_client(port, "subs-c")
    assert w2.subscribe(1, "s", sr.FIRST, credit=5, props=g) == sr.OK
    # and an AMQP 0-9-1 consumer of the same stream, listed as before
    amqp = b.pika()
    ch = amqp.channel()
    ch.basic_qos(prefetch_count=4)
    ch.basic_consume("s", lambda *x: None, consumer_tag="amqp-1",
                     arguments={"x-stream-offset": "first"})

    items = wait_for(lambda: (lambda l: l if len(l) == 3 else None)(
        stream_items(api, "/api/consumers")), 5, message="three stream subscriptions")
    conn_a, conn_b, conn_c = (i["channel_details"]["connection_name"] for i in items)
    plain, active, waiting = items
    assert plain["consumer_tag"] == "stream.subid-3"
    assert plain["queue"] == {"name": "s", "vhost": "/"}
    lp = a.s.getsockname()[1]
    assert plain["channel_details"] == {
        "name": "", "number": 0, "user": "guest", "connection_name": conn_a,
        "peer_host": "127.0.0.1", "peer_port": lp}
    assert conn_a == "127.0.0.1:%d -> 127.0.0.1:%d" % (lp, port)
    assert (plain["ack_required"], plain["exclusive"], plain["prefetch_count"]) == \
        (False, False, 0)
    assert (plain["active"], plain["activity_status"]) == (True, "up")
    assert plain["arguments"] == {"identifier": "x"}
    assert plain["stream_offset"] == 0
    assert (active["consumer_tag"], active["active"], active["activity_status"]) == \
        ("stream.subid-1", True, "single_active")
    assert active["arguments"] == g
    assert (waiting["consumer_tag"], waiting["active"], waiting["activity_status"]) == \
        ("stream.subid-1", False, "waiting")
    assert waiting["channel_details"]["connection_name"] != active["channel_details"][
        "connection_name"]

    # the AMQP consumer is still there, with its channel, beside them
    code, allc, _ = api.get("/api/consumers")
    amqp_item = next(i for i in allc if i["consumer_tag"] == "amqp-1")
    assert amqp_item["channel_details"]["number"] == 1
    assert amqp_item["channel_details"]["name"].endswith(" (1)")
    assert "activity_status" not in amqp_item
    # per vhost, and in the stream's consumer_details
    assert len(stream_items(api, "/api/consumers/%2F")) == 3
    code, qd, _ = api.get("/api/queues/%2F/s")
    assert code == 200
    tags = sorted(c["consumer_tag"] for c in qd["consumer_details"])
    assert tags == ["amqp-1", "stream.subid-1", "stream.subid-1", "stream.subid-3"]
    # another vhost has none
    assert api.put("/api/vhosts/" + urllib.parse.quote("v2", safe=""), {})[0] in (201, 204)
    assert stream_items(api, "/api/consumers/v2") == []

    # the active member goes: the waiting one is active now, and listed so
    w1.close()
    cu = consumer_update(w2)
    assert cu[1:] == (1, 1)
    wait_for(lambda: [(i["active"], i["activity_status"])
                      for i in stream_items(api, "/api/consumers")] ==
             [(True, "up"), (True, "single_active")], 5, message="the new active member")
    # an unsubscribed subscription is gone from the list
    assert a.unsubscribe(3) == sr.OK
    wait_for(lambda: len(stream_items(api, "/api/consumers")) == 1, 5,
             message="the subscription unlisted")
    amqp.close()
    a.close()
    w2.close()
    b.assert_alive()
