"""Names must be UTF-8 at every door (issue 12 item 3): RabbitMQ refuses a method whose short
strings are not (501 FRAME_ERROR "Malformed UTF-8 in shortstr"), and so does Sluice, so that
nothing it holds can vanish from a JSON view or a definitions export. basic.publish's
exchange and routing key are taken as they are (RabbitMQ does not check them either)."""

import struct

import pytest

from amqpraw import FRAME_METHOD, encode_frame
from helpers import uname

BAD = b"bad\xff\xfename"

METHODS = {
    "queue.declare": ("queue.declare", dict(queue=BAD, passive=False, durable=False,
                                            exclusive=False, auto_delete=True, nowait=False,
                                            arguments={})),
    "exchange.declare": ("exchange.declare", dict(exchange=BAD, type="direct", passive=False,
                                                  durable=False, auto_delete=True,
                                                  internal=False, nowait=False, arguments={})),
    "queue.bind key": ("queue.bind", dict(queue="amq.gen-none", exchange="amq.direct",
                                          routing_key=BAD, nowait=False, arguments={})),
    "exchange.bind key": ("exchange.bind", dict(destination="amq.topic", source="amq.direct",
                                                routing_key=BAD, nowait=False, arguments={})),
    "queue.delete": ("queue.delete", dict(queue=BAD, if_unused=False, if_empty=False,
                                          nowait=False)),
    "queue.purge": ("queue.purge", dict(queue=BAD, nowait=False)),
    "basic.consume tag": ("basic.consume", dict(queue="amq.rabbitmq.reply-to", consumer_tag=BAD,
                                                no_local=False, no_ack=True, exclusive=False,
                                                nowait=False, arguments={})),
    "exchange.delete": ("exchange.delete", dict(exchange=BAD, if_unused=False, nowait=False)),
}


@pytest.mark.parametrize("what", list(METHODS))
def test_names_that_are_not_utf8_are_refused_501(broker, what):
    r = broker.raw()
    r.open_channel(1)
    name, args = METHODS[what]
    r.send_method(1, name, **args)
    res = r.wait_close()
    assert res.kind == "connection" and res.method.reply_code == 501, res
    assert "Malformed UTF-8 in shortstr" in res.method.reply_text
    broker.assert_alive()


def test_a_routing_key_that_is_not_utf8_is_carried_as_it_is(broker):
    r = broker.raw()
    r.open_channel(1)
    q = uname("rawrk")
    x = uname("fan")
    r.rpc(1, "exchange.declare", exchange=x, type="fanout", passive=False, durable=False,
          auto_delete=False, internal=False, nowait=False, arguments={})
    r.rpc(1, "queue.declare", queue=q, passive=False, durable=False, exclusive=False,
          auto_delete=False, nowait=False, arguments={})
    r.rpc(1, "queue.bind", queue=q, exchange=x, routing_key="", nowait=False, arguments={})
    r.publish(1, x, BAD, b"body")
    import amqpraw
    for _ in range(50):
        r.send_method(1, "basic.get", queue=q, no_ack=True)
        f = r.read_frame()
        m = amqpraw.decode_method(f)
        if m.name == "basic.get-ok":
            break
    assert m.name == "basic.get-ok" and BAD in f.payload  # the very bytes published
    r.read_frame()
    assert r.read_frame().payload == b"body"
    r.rpc(1, "exchange.delete", exchange=x, if_unused=False, nowait=False)


@pytest.mark.sluice_only("field names of declaration and binding arguments must be UTF-8 "
                         "(they are exported as JSON keys); RabbitMQ takes any bytes")
def test_argument_keys_that_are_not_utf8_are_refused_501(broker):
    r = broker.raw()
    r.open_channel(1)
    q = uname("argkey").encode()
    table = b"\x01\xffI" + struct.pack(">i", 1)
    payload = (struct.pack(">HHH", 50, 10, 0) + bytes([len(q)]) + q + b"\x00" +
               struct.pack(">I", len(table)) + table)
    r.send(encode_frame(FRAME_METHOD, 1, payload))
    res = r.wait_close()
    assert res.kind == "connection" and res.method.reply_code == 501, res
    broker.assert_alive()


def test_http_names_that_are_not_utf8_are_refused(broker):
    from test_mgmt import Api
    api = Api(broker)
    for method, path, body in (("PUT", "/api/queues/%2F/bad%FF%FEname", {"durable": False}),
                               ("PUT", "/api/exchanges/%2F/bad%FF%FEx", {"type": "direct"}),
                               ("PUT", "/api/vhosts/bad%FF", None),
                               ("POST", "/api/bindings/%2F/e/amq.direct/q/bad%FF", {})):
        s, j, _ = api.request(method, path, body=body)
        assert s == 400 and "UTF-8" in j["reason"], (path, s, j)
    s, qs, _ = api.get("/api/queues")
    assert all(isinstance(q.get("name"), str) for q in qs)


def test_non_ascii_utf8_names_survive_an_export_and_import(broker, broker_factory):
    # What UTF-8 allows is carried whole: a queue, an exchange and a binding named in
    # several scripts come back from the definitions into another broker.
    from test_mgmt import Api
    api = Api(broker)
    q, x, key = "café-" + uname("ü"), "交换-" + uname("x"), "ключ.ñ"
    assert api.put(Api.q(q), {"durable": True})[0] == 201
    assert api.put("/api/exchanges/%2F/" + __import__("urllib.parse").parse.quote(x, safe=""),
                   {"type": "topic", "durable": True})[0] == 201
    s, _, _ = api.post("/api/bindings/%%2F/e/%s/q/%s" % (
        __import__("urllib.parse").parse.quote(x, safe=""),
        __import__("urllib.parse").parse.quote(q, safe="")), {"routing_key": key})
    assert s == 201
    s, defs, _ = api.get("/api/definitions")
    assert s == 200
    assert q in [d["name"] for d in defs["queues"]]
    assert x in [d["name"] for d in defs["exchanges"]]
    assert (x, q, key) in [(b["source"], b["destination"], b["routing_key"])
                           for b in defs["bindings"]]
    b2 = broker_factory()
    api2 = Api(b2)
    s, j, _ = api2.post("/api/definitions", defs)
    assert s in (200, 201, 204), (s, j)
    s, defs2, _ = api2.get("/api/definitions")
    assert q in [d["name"] for d in defs2["queues"]]
    assert (x, q, key) in [(b["source"], b["destination"], b["routing_key"])
                           for b in defs2["bindings"]]


def test_a_header_key_that_is_not_utf8_is_shown_escaped_not_dropped(broker):
    # Message headers are the sender's (RabbitMQ takes any bytes there too); the HTTP view
    # shows such a key escaped as \xNN, as it does string values, instead of leaving it out.
    from test_mgmt import Api
    api = Api(broker)
    r = broker.raw()
    r.open_channel(1)
    q = uname("hdrkey")
    r.rpc(1, "queue.declare", queue=q, passive=False, durable=False, exclusive=False,
          auto_delete=False, nowait=False, arguments={})
    table = b"\x02k\xffS" + struct.pack(">I", 1) + b"v" + b"\x02okS" + struct.pack(">I", 1) + b"w"
    props = struct.pack(">H", 1 << 13) + struct.pack(">I", len(table)) + table
    from amqpraw import FRAME_BODY, FRAME_HEADER, encode_method
    r.send(encode_frame(FRAME_METHOD, 1, encode_method(
        "basic.publish", exchange="", routing_key=q, mandatory=False, immediate=False)) +
        encode_frame(FRAME_HEADER, 1, struct.pack(">HHQ", 60, 0, 1) + props) +
        encode_frame(FRAME_BODY, 1, b"x"))
    r.rpc(1, "queue.declare", queue=q, passive=True, durable=False, exclusive=False,
          auto_delete=False, nowait=False, arguments={})
    (m,) = api.peek(q)
    assert m["properties"]["headers"] == {"k\\xff": "v", "ok": "w"}, m["properties"]
