"""Stream-protocol connections, publishers and consumers in the HTTP API, as RabbitMQ's
management plugin and its stream management plugin show them: /api/connections lists every
door's clients (AMQP 0-9-1 and stream) together, /api/stream/connections, publishers and
consumers list the stream door's with RabbitMQ's fields, and DELETE /api/connections/NAME
closes a stream connection (its socket ends, with no Close frame, as RabbitMQ's does).
Driven by the raw stream client (streamraw.py); docs/http-api.md lists the paths."""
import urllib.parse

import pytest

import streamraw as sr
from helpers import wait_for
from test_mgmt import Api
from test_stream_door import create, start

pytestmark = pytest.mark.sluice_only("the stream door of a private broker")


def q(name):
    return urllib.parse.quote(name, safe="")


def stream_client(port, name, user="guest", password="guest", frame_max=65536):
    """A stream connection, open, that calls itself name (PeerProperties connection_name)."""
    c = sr.StreamClient(port)
    code, _ = c.peer_properties({"product": "streamraw", "connection_name": name})
    assert code == sr.OK
    assert c.sasl_handshake()[0] == sr.OK
    assert c.sasl_authenticate(user, password) == sr.OK
    c.tune(frame_max=frame_max, heartbeat=0)
    assert c.open("/")[0] == sr.OK
    return c


def listed(api, path, pred):
    """Waits until path's list holds an item for which pred holds: that item."""
    def find():
        code, items, _ = api.get(path)
        assert code == 200, (path, code, items)
        return next((i for i in items if pred(i)), None)
    return wait_for(find, 5, message="nothing matching in %s" % path)


def by_cname(name):
    return lambda c: (c.get("client_properties") or {}).get("connection_name") == name


def test_stream_connections_listed_beside_amqp_ones(broker_factory):
    b, port = start(broker_factory)
    api = Api(b)
    amqp = b.amqp()
    c = stream_client(port, "sjs-listed")
    local_port = c.s.getsockname()[1]
    conn = listed(api, "/api/connections", by_cname("sjs-listed"))
    # RabbitMQ's stream reader's fields: protocol "stream", no channels, the tuned figures
    assert conn["protocol"] == "stream"
    assert conn["name"] == "127.0.0.1:%d -> 127.0.0.1:%d" % (local_port, port)
    assert (conn["user"], conn["vhost"], conn["state"]) == ("guest", "/", "running")
    assert (conn["peer_host"], conn["peer_port"]) == ("127.0.0.1", local_port)
    assert (conn["host"], conn["port"]) == ("127.0.0.1", port)
    assert (conn["channels"], conn["channel_max"], conn["frame_max"], conn["timeout"]) == \
        (0, 0, 65536, 0)
    assert conn["auth_mechanism"] == "PLAIN" and conn["ssl"] is False
    assert conn["client_properties"] == {"product": "streamraw", "connection_name": "sjs-listed"}
    # both doors' clients in one list, newest first by default order (vhost, name)
    items = api.get("/api/connections")[1]
    assert sorted(i["protocol"] for i in items) == ["AMQP 0-9-1", "stream"]
    assert api.get("/api/overview")[1]["object_totals"]["connections"] == 2
    # one by name, over either path
    code, one, _ = api.get("/api/connections/" + q(conn["name"]))
    assert code == 200 and one["client_properties"]["connection_name"] == "sjs-listed"
    code, one, _ = api.get("/api/stream/connections/%2F/" + q(conn["name"]))
    assert code == 200 and one["protocol"] == "stream"
    # the stream plugin's lists hold stream connections only, of a vhost that exists
    assert [i["name"] for i in api.get("/api/stream/connections")[1]] == [conn["name"]]
    assert [i["name"] for i in api.get("/api/stream/connections/%2F")[1]] == [conn["name"]]
    assert api.get("/api/stream/connections/nope")[0] == 404
    assert api.get("/api/stream/connections/nope/" + q(conn["name"]))[0] == 404
    amqp_name = next(i["name"] for i in items if i["protocol"] != "stream")
    assert api.get("/api/stream/connections/%2F/" + q(amqp_name))[0] == 404
    # paged as the other lists
    code, page, _ = api.get("/api/stream/connections?page=1&page_size=10")
    assert code == 200 and page["total_count"] == 1 and page["items"][0]["name"] == conn["name"]
    c.close()
    # interleaved: AMQP, stream, AMQP, stream (ids the node's, over both doors): every one met
    c2 = stream_client(port, "sjs-listed-2")
    amqp2 = b.amqp()
    c3 = stream_client(port, "sjs-listed-3")

    def four():
        items = api.get("/api/connections")[1]
        return len(items) == 4 and sorted(
            (i["protocol"], (i.get("client_properties") or {}).get("connection_name"))
            for i in items)
    names = wait_for(four, 5, message="not 4 connections")
    assert names == [("AMQP 0-9-1", None), ("AMQP 0-9-1", None), ("stream", "sjs-listed-2"),
                     ("stream", "sjs-listed-3")]
    for x in (c2, c3, amqp, amqp2):
        x.close()
    wait_for(lambda: api.get("/api/connections")[1] == [], 5, message="connections still listed")


def test_stream_publishers_and_consumers(broker_factory):
    b, port = start(broker_factory)
    api = Api(b)
    c = stream_client(port, "sjs-pubsub")
    assert create(c, "s") == sr.OK and create(c, "other") == sr.OK
    assert c.declare_publisher(3, "s", "ref-1") == sr.OK
    assert c.declare_publisher(4, "s") == sr.OK  # no reference
    c.publish(3, [(i, sr.amqp10(b"m%d" % i)) for i in range(1, 6)])
    assert c.confirms(3, 5) == [1, 2, 3, 4, 5]
    assert c.subscribe(2, "s", sr.FIRST, credit=10, props={"identifier": "id-1"}) == sr.OK
    assert len(c.messages(5)) == 5
    name = listed(api, "/api/connections", by_cname("sjs-pubsub"))["name"]
    local_port = c.s.getsockname()[1]
    details = {"name": name, "user": "guest", "node": api.get("/api/overview")[1]["node"],
               "peer_host": "127.0.0.1", "peer_port": local_port}

    pubs = sorted(api.get("/api/stream/publishers")[1], key=lambda p: p["publisher_id"])
    assert pubs == [
        {"publisher_id": 3, "reference": "ref-1", "published": 5, "confirmed": 5, "errored": 0,
         "queue": {"name": "s", "vhost": "/"}, "connection_details": details},
        {"publisher_id": 4, "reference": "", "published": 0, "confirmed": 0, "errored": 0,
         "queue": {"name": "s", "vhost": "/"}, "connection_details": details}]
    assert len(api.get("/api/stream/publishers/%2F")[1]) == 2
    assert [p["reference"] for p in api.get("/api/stream/publishers/%2F/s")[1]] in \
        (["ref-1", ""], ["", "ref-1"])
    assert api.get("/api/stream/publishers/%2F/other")[1] == []
    assert api.get("/api/stream/publishers/nope")[0] == 404
    assert len(api.get("/api/stream/connections/%2F/" + q(name) + "/publishers")[1]) == 2

    # the consumer: what it got, where it is, its properties
    def consumed():
        items = api.get("/api/stream/consumers/%2F")[1]
        return items if items and items[0]["consumed"] == 5 else None
    cons = wait_for(consumed, 5, message="consumed not 5")
    assert len(cons) == 1
    s = cons[0]
    assert (s["subscription_id"], s["offset"], s["offset_lag"]) == (2, 5, 0)
    assert 5 <= s["credits"] <= 9  # a credit per Deliver (chunk)
    assert s["properties"] == {"identifier": "id-1"}
    assert s["queue"] == {"name": "s", "vhost": "/"} and s["connection_details"] == details
    assert api.get("/api/stream/consumers")[1] == cons
    assert api.get("/api/stream/connections/%2F/" + q(name) + "/consumers")[1] == cons
    assert api.get("/api/stream/consumers/%2F/s")[0] == 404  # RabbitMQ has no such path
    assert api.request("PUT", "/api/stream/consumers", body={})[0] == 405

    # a publisher's errors: its write permission revoked, then a Publish
    assert api.put("/api/permissions/%2F/guest",
                   {"configure": ".*", "write": "^$", "read": ".*"})[0] in (201, 204)
    c.publish(4, [(1, sr.amqp10(b"no")), (2, sr.amqp10(b"no"))])
    assert c.publish_errors() == (4, [(1, sr.ACCESS_REFUSED), (2, sr.ACCESS_REFUSED)])
    p4 = listed(api, "/api/stream/publishers", lambda p: p["publisher_id"] == 4)
    assert (p4["published"], p4["confirmed"], p4["errored"]) == (0, 0, 2)
    assert api.put("/api/permissions/%2F/guest",
                   {"configure": ".*", "write": ".*", "read": ".*"})[0] in (201, 204)
    # a user who is no monitor sees only its own (RabbitMQ's filter_user)
    assert api.put("/api/users/plain", {"password": "pw", "tags": "management"})[0] in (201, 204)
    assert api.put("/api/permissions/%2F/plain",
                   {"configure": ".*", "write": ".*", "read": ".*"})[0] in (201, 204)
    plain = Api(b, user="plain", password="pw")
    assert plain.get("/api/stream/connections")[1] == []
    assert plain.get("/api/connections")[1] == []
    mine = stream_client(port, "sjs-plain", user="plain", password="pw")
    assert mine.declare_publisher(1, "other") == sr.OK
    own = listed(plain, "/api/stream/publishers", lambda p: True)
    assert own["connection_details"]["user"] == "plain"
    assert len(plain.get("/api/stream/publishers")[1]) == 1
    assert len(api.get("/api/stream/publishers")[1]) == 3  # an administrator sees every one
    # a monitoring user with no entry on the vhost: its connections, not what is on its queues
    assert api.put("/api/users/watch", {"password": "pw", "tags": "monitoring"})[0] in (201, 204)
    watch = Api(b, user="watch", password="pw")
    assert len(watch.get("/api/stream/connections")[1]) == 2
    assert watch.get("/api/stream/publishers")[1] == []
    assert watch.get("/api/stream/consumers")[1] == []
    assert watch.get("/api/stream/consumers/%2F")[0] == 403
    assert watch.get("/api/stream/publishers/%2F/s")[0] == 403
    mine.close()
    c.close()


def test_delete_closes_a_stream_connection(broker_factory):
    b, port = start(broker_factory)
    api = Api(b)
    c = stream_client(port, "sjs-doomed")
    assert create(c, "s") == sr.OK
    assert c.declare_publisher(1, "s", "p") == sr.OK
    assert c.subscribe(1, "s", sr.FIRST, credit=1) == sr.OK
    name = listed(api, "/api/connections", by_cname("sjs-doomed"))["name"]
    # another user may not close it
    api.put("/api/users/plain", {"password": "pw", "tags": "management"})
    plain = Api(b, user="plain", password="pw")
    assert plain.delete("/api/connections/" + q(name))[0] == 403
    assert api.delete("/api/connections/" + q(name))[0] == 204
    # as RabbitMQ's: the socket ends, no Close frame comes first (clients take none)
    with pytest.raises(sr.Closed):
        key, _, _ = c.frame()
        raise AssertionError("a frame came: key 0x%04x" % key)
    wait_for(lambda: api.get("/api/connections")[1] == [], 5, message="still listed")
    assert api.get("/api/connections/" + q(name))[0] == 404
    assert api.get("/api/stream/publishers")[1] == []
    assert api.get("/api/stream/consumers")[1] == []
    assert b"closed: CONNECTION_FORCED - Closed via management API" in open(b.log_path, "rb").read()
    # the stream plugin's path closes one too
    c2 = stream_client(port, "sjs-doomed-2")
    name2 = listed(api, "/api/stream/connections", by_cname("sjs-doomed-2"))["name"]
    assert api.delete("/api/stream/connections/%2F/" + q(name2))[0] == 204
    assert c2.sees_eof()
    wait_for(lambda: api.get("/api/stream/connections")[1] == [], 5, message="still listed")
    b.assert_alive()
