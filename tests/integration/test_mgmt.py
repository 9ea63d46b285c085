"""HTTP management API: RabbitMQ-compatible paths, auth, errors (src/mgmt/).

Api (defined here, imported by the other test_mgmt*/test_sluicectl tests) is a tiny
stdlib HTTP client: every call returns (status, parsed JSON or text, headers).
"""

import base64
import http.client
import json
import time
import urllib.parse

import amqp
import pytest

from helpers import uname, wait_for


class Api:
    def __init__(self, broker, user="guest", password="guest"):
        if getattr(broker, "mgmt_port", None) is None:
            pytest.skip("no management API on this broker")
        self.host = broker.host
        self.port = broker.mgmt_port
        self.user = user
        self.password = password

    def request(self, method, path, body=None, raw=None, headers=None, auth=True):
        c = http.client.HTTPConnection(self.host, self.port, timeout=10)
        h = dict(headers or {})
        if auth and self.user is not None:
            tok = base64.b64encode(("%s:%s" % (self.user, self.password)).encode()).decode()
            h["Authorization"] = "Basic " + tok
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read()
        c.close()
        ctype = r.getheader("Content-Type") or ""
        parsed = text
        if "json" in ctype and text:
            parsed = json.loads(text)
        elif ctype.startswith("text/"):
            parsed = text.decode()
        return r.status, parsed, dict(r.getheaders())

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body=body if body is not None else {}, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    # -- conveniences ---------------------------------------------------------
    @staticmethod
    def q(name, vhost="/"):
        return "/api/queues/%s/%s" % (urllib.parse.quote(vhost, safe=""),
                                      urllib.parse.quote(name, safe=""))

    def queue(self, name, vhost="/"):
        s, j, _ = self.get(self.q(name, vhost))
        assert s == 200, (s, j)
        return j

    def declare(self, name, **body):
        body.setdefault("durable", False)
        s, j, _ = self.put(self.q(name), body)
        assert s in (201, 204), (s, j)

    def publish(self, rk, payload, exchange="amq.default", **props):
        s, j, _ = self.post("/api/exchanges/%%2F/%s/publish" % exchange,
                            {"routing_key": rk, "payload": payload,
                             "payload_encoding": "string", "properties": props})
        assert s == 200, (s, j)
        return j["routed"]

    def peek(self, name, count=100):
        s, j, _ = self.get(self.q(name) + "/messages?count=%d" % count)
        assert s == 200, (s, j)
        return j

    def info(self, obj, *props, vhost=None):
        qs = {"object": obj, "props": ",".join(str(p) for p in props)}
        if vhost:
            qs["vhost"] = vhost
        return self.get("/api/msmq/info?" + urllib.parse.urlencode(qs))

    def action(self, obj, action, **extra):
        body = {"object": obj, "action": action}
        body.update(extra)
        return self.post("/api/msmq/action", body)


@pytest.fixture
def api(broker):
    return Api(broker)


def fmt(q):
    return "QUEUE=DIRECT=OS:.\\private$\\" + q


# ---------------------------------------------------------------------------
# Read-only endpoints
# ---------------------------------------------------------------------------
def test_overview_nodes_vhosts_users_whoami(api, broker):
    s, o, h = api.get("/api/overview")
    assert s == 200 and h["Content-Type"].startswith("application/json")
    assert o["product_name"] == "Sluice"
    assert {"messages", "messages_ready", "messages_unacknowledged"} <= set(o["queue_totals"])
    assert {"queues", "exchanges", "connections", "channels", "consumers"} <= set(
        o["object_totals"])
    ports = {l["protocol"]: l["port"] for l in o["listeners"]}
    assert ports == {"amqp": broker.port, "http": broker.mgmt_port}
    s, nodes, _ = api.get("/api/nodes")
    assert s == 200 and nodes[0]["name"] == o["node"] and nodes[0]["running"] is True
    s, one, _ = api.get("/api/nodes/" + urllib.parse.quote(o["node"], safe=""))
    assert s == 200 and one["name"] == o["node"]
    s, vhosts, _ = api.get("/api/vhosts")
    assert s == 200 and [v["name"] for v in vhosts] == ["/"]
    s, users, _ = api.get("/api/users")
    assert s == 200 and [(u["name"], u["tags"]) for u in users] == [("guest", ["administrator"])]
    assert all("password" not in u for u in users)
    assert users[0]["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    s, me, _ = api.get("/api/whoami")
    assert s == 200 and me["name"] == "guest"


def test_columns_filter(api):
    api.declare(uname("cols"))
    s, qs, _ = api.get("/api/queues?columns=name,messages")
    assert s == 200 and qs and all(set(q) == {"name", "messages"} for q in qs)


# ---------------------------------------------------------------------------
# Auth
# ---------------------------------------------------------------------------
def test_auth_required_and_challenged(api):
    s, j, h = api.get("/api/queues", auth=False)
    assert s == 401 and "WWW-Authenticate" in h and j["error"] == "not_authorized"
    bad = Api.__new__(Api)
    bad.__dict__.update(api.__dict__, password="wrong")
    s, j, _ = bad.get("/api/overview")
    assert s == 401 and "reason" in j
    s, j, _ = api.get("/api/overview", auth=False, headers={"Authorization": "Basic !!!"})
    assert s == 401
    s, j, _ = api.get("/api/overview", auth=False, headers={"Authorization": "Bearer x"})
    assert s == 401


def test_writes_need_administrator(broker_factory):
    b = broker_factory(config={"user.bob": "secret", "user.bob.tags": "management",
                               "user.boss": "pw", "user.boss.tags": "administrator",
                               "user.app": "pw"})
    app = Api(b, "app", "pw")
    s, j, _ = app.get("/api/queues")
    assert s == 403 and j["reason"] == "Not management user"
    bob = Api(b, "bob", "secret")
    s, _, _ = bob.get("/api/queues")
    assert s == 200
    # Resources go by the user's permissions in the vhost (bob, a config user, has .* on /);
    # the broker itself (vhosts, users, MSMQ actions) by the administrator tag.
    q = uname("bob")
    s, j, _ = bob.put(Api.q(q), {"durable": False})
    assert s == 201
    boss = Api(b, "boss", "pw")
    assert boss.put("/api/permissions/%2F/bob",
                    {"configure": "^only-this$", "write": ".*", "read": ".*"})[0] == 204
    q2 = uname("bob")
    s, j, _ = bob.put(Api.q(q2), {"durable": False})
    assert s == 403 and j["hresult_name"] == "MQ_ERROR_ACCESS_DENIED"
    assert "access to queue '%s' in vhost '/' refused for user 'bob'" % q2 in j["reason"]
    s, _, _ = bob.get(Api.q(q2))
    assert s == 404, "a refused write changed something"
    s, j, _ = bob.action("MACHINE", "DISCONNECT")
    assert s == 403 and j["reason"] == "Not administrator user"
    s, j, _ = bob.put("/api/vhosts/bobs")
    assert s == 403
    s, _, _ = boss.put(Api.q(q2), {"durable": False})
    assert s == 201


# ---------------------------------------------------------------------------
# Queues
# ---------------------------------------------------------------------------
def test_queue_declare_get_delete(api):
    q = uname("q")
    s, _, _ = api.put(Api.q(q), {"durable": "false", "auto_delete": "false",
                                 "arguments": {"x-max-length": 10}})
    assert s == 201
    s, _, _ = api.put(Api.q(q), {"durable": False, "arguments": {"x-max-length": 10}})
    assert s == 204
    s, j, _ = api.put(Api.q(q), {"durable": True, "arguments": {"x-max-length": 10}})
    assert s == 400 and "inequivalent arg 'durable'" in j["reason"]
    info = api.queue(q)
    for k in ("name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "messages",
              "messages_ready", "messages_unacknowledged", "consumers", "type", "state"):
        assert k in info, k
    assert info["arguments"] == {"x-max-length": 10} and info["durable"] is False
    s, _, _ = api.delete(Api.q(q))
    assert s == 204
    s, j, _ = api.get(Api.q(q))
    assert s == 404 and j["hresult_name"] == "MQ_ERROR_QUEUE_NOT_FOUND" and "reason" in j


def test_queue_reserved_and_subqueue_names_refused(api):
    s, j, _ = api.put(Api.q("amq.mine"), {})
    assert s == 403 and "amq." in j["reason"]
    q = uname("p")
    api.declare(q)
    s, j, _ = api.put(Api.q(q + ";sub"), {})
    assert s == 403 and "subqueue" in j["reason"]


def test_delete_if_empty_if_unused_checked_first(api, conn):
    q = uname("d")
    api.declare(q)
    api.publish(q, "m")
    s, j, _ = api.delete(Api.q(q) + "?if-empty=true")
    assert s == 400 and "not empty" in j["reason"]
    assert api.queue(q)["messages"] == 1, "a refused delete changed something"
    ch = conn.channel()
    ch.basic_consume(q, callback=lambda m: None)
    wait_for(lambda: api.queue(q)["consumers"] == 1)
    s, j, _ = api.delete(Api.q(q) + "?if-unused=true&if-empty=false")
    assert s == 400 and "in use" in j["reason"]
    assert api.queue(q)["consumers"] == 1
    s, _, _ = api.delete(Api.q(q))
    assert s == 204


def test_purge_makes_unacked_purge_pending(api, conn):
    q = uname("pp")
    api.declare(q)
    for i in range(3):
        api.publish(q, "m%d" % i)
    ch = conn.channel()
    held = ch.basic_get(q, no_ack=False)
    assert held is not None
    s, j, _ = api.delete(Api.q(q) + "/contents")
    assert s == 200 and j["message_count"] == 2 and j["purge_pending"] == 1
    info = api.queue(q)
    assert info["messages_ready"] == 0 and info["messages_purge_pending"] == 1
    assert info["messages"] == 1  # MESSAGE_COUNT counts PurgePending
    ch.basic_reject(held.delivery_tag, requeue=True)
    wait_for(lambda: api.queue(q)["messages"] == 0, message="purge-pending message deleted")
    assert ch.basic_get(q, no_ack=True) is None, "a purged message came back"
    api.publish(q, "after")
    assert api.queue(q)["messages_ready"] == 1, "publishing goes on after a purge"


def test_publish_and_get_ackmodes(api, ch):
    q, dlq = uname("g"), uname("dlq")
    api.declare(dlq)
    api.declare(q, arguments={"x-dead-letter-exchange": "",
                              "x-dead-letter-routing-key": dlq})
    assert api.publish(q, "one", content_type="text/plain", headers={"k": "v"},
                       delivery_mode=2, priority=3) is True
    assert api.publish(q, "two") is True
    assert api.publish(uname("nowhere"), "x") is False
    s, msgs, _ = api.post(Api.q(q) + "/get", {"count": "5", "ackmode": "ack_requeue_true",
                                              "encoding": "auto"})
    assert s == 200 and [m["payload"] for m in msgs] == ["one", "two"]
    m = msgs[0]
    assert m["properties"]["content_type"] == "text/plain"
    assert m["properties"]["headers"] == {"k": "v"}
    assert m["properties"]["delivery_mode"] == 2 and m["properties"]["priority"] == 3
    assert m["message_count"] == 1 and m["payload_bytes"] == 3 and m["routing_key"] == q
    assert isinstance(m["lookup_id"], int) and m["move_count"] == 0
    assert api.queue(q)["messages_ready"] == 2
    s, msgs, _ = api.post(Api.q(q) + "/get", {"count": 1, "ackmode": "ack_requeue_false"})
    assert msgs[0]["payload"] == "one" and msgs[0]["redelivered"] is True
    s, msgs, _ = api.post(Api.q(q) + "/get", {"count": 1, "ackmode": "reject_requeue_false"})
    assert msgs[0]["payload"] == "two"
    assert api.queue(q)["messages"] == 0
    wait_for(lambda: api.queue(dlq)["messages"] == 1, message="rejected message dead-lettered")
    s, j, _ = api.post(Api.q(q) + "/get", {"count": 1, "ackmode": "bogus"})
    assert s == 400
    # over AMQP the HTTP-published message is an ordinary one
    api.publish(q, "amqp-visible")
    msg = ch.basic_get(q, no_ack=True)
    assert msg is not None and bytes(msg.body) == b"amqp-visible"


def test_binary_payload_base64(api):
    q = uname("b64")
    api.declare(q)
    s, j, _ = api.post("/api/exchanges/%2F/amq.default/publish",
                       {"routing_key": q, "payload": base64.b64encode(b"\xff\x00\x01").decode(),
                        "payload_encoding": "base64", "properties": {}})
    assert s == 200 and j["routed"]
    s, msgs, _ = api.post(Api.q(q) + "/get", {"count": 1, "ackmode": "ack_requeue_false",
                                              "encoding": "auto"})
    assert msgs[0]["payload_encoding"] == "base64"
    assert base64.b64decode(msgs[0]["payload"]) == b"\xff\x00\x01"


def test_peek_does_not_consume(api):
    q = uname("pk")
    api.declare(q)
    for i in range(3):
        api.publish(q, "m%d" % i)
    msgs = api.peek(q)
    assert [m["payload"] for m in msgs] == ["m0", "m1", "m2"]
    ids = [m["lookup_id"] for m in msgs]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert all(m["move_count"] == 0 for m in msgs)
    assert api.queue(q)["messages_ready"] == 3
    s, two, _ = api.get(Api.q(q) + "/messages?count=1&offset=1")
    assert [m["payload"] for m in two] == ["m1"]


# ---------------------------------------------------------------------------
# Exchanges and bindings
# ---------------------------------------------------------------------------
def test_exchanges_and_bindings(api):
    x, q = uname("x"), uname("bq")
    api.declare(q)
    s, _, _ = api.put("/api/exchanges/%2F/" + x, {"type": "direct", "durable": "false"})
    assert s == 201
    s, j, _ = api.get("/api/exchanges/%2F/" + x)
    assert s == 200 and j["type"] == "direct" and j["durable"] is False
    s, j, _ = api.put("/api/exchanges/%2F/" + x, {"type": "fanout", "durable": False})
    assert s == 400 and "inequivalent" in j["reason"]
    s, j, _ = api.put("/api/exchanges/%2F/" + uname("x"), {"type": "bogus"})
    assert s == 400
    s, j, _ = api.put("/api/exchanges/%2F/amq.mine", {"type": "direct"})
    assert s == 403
    s, _, h = api.post("/api/bindings/%%2F/e/%s/q/%s" % (x, q), {"routing_key": "rk"})
    assert s == 201 and h["Location"] == "rk"
    s, _, h = api.post("/api/bindings/%%2F/e/%s/q/%s" % (x, q),
                       {"routing_key": "rk", "arguments": {"a": 1}})
    assert s == 201 and h["Location"].startswith("rk~")
    s, bs, _ = api.get("/api/bindings/%%2F/e/%s/q/%s" % (x, q))
    assert s == 200 and sorted(b["properties_key"] for b in bs) == sorted(["rk", h["Location"]])
    s, allb, _ = api.get("/api/bindings/%2F")
    implicit = [b for b in allb if b["destination"] == q and b["source"] == ""]
    assert len(implicit) == 1 and implicit[0]["routing_key"] == q
    s, qb, _ = api.get(Api.q(q) + "/bindings")
    assert {b["source"] for b in qb} == {"", x}
    assert api.publish("rk", "via-x", exchange=x) is True
    assert api.queue(q)["messages"] == 1
    s, j, _ = api.delete("/api/exchanges/%%2F/%s?if-unused=true" % x)
    assert s == 400 and "in use" in j["reason"]
    s, _, _ = api.delete("/api/bindings/%%2F/e/%s/q/%s/rk" % (x, q))
    assert s == 204
    s, _, _ = api.delete("/api/bindings/%%2F/e/%s/q/%s/%s" % (
        x, q, urllib.parse.quote(h["Location"], safe="")))
    assert s == 204
    s, _, _ = api.delete("/api/exchanges/%%2F/%s?if-unused=true" % x)
    assert s == 204
    s, _, _ = api.delete("/api/exchanges/%2F/amq.direct")
    assert s == 403
    s, _, _ = api.delete("/api/exchanges/%2F/amq.default")
    assert s == 403


def test_binding_to_subqueue_refused(api):
    q = uname("sb")
    api.declare(q)
    api.publish(q, "m")
    lid = api.peek(q)[0]["lookup_id"]
    s, j, _ = api.post(Api.q(q) + "/move", {"destination": q + ";sub", "lookup_id": lid})
    assert s == 200, j
    s, j, _ = api.post("/api/bindings/%%2F/e/amq.direct/q/%s" % urllib.parse.quote(
        q + ";sub", safe=""), {"routing_key": "k"})
    assert s == 403 and "subqueue" in j["reason"]


# ---------------------------------------------------------------------------
# Connections, channels, consumers
# ---------------------------------------------------------------------------
def test_connections_channels_consumers_and_close(api, broker):
    c = broker.amqp()
    ch = c.channel()
    q = uname("cc")
    ch.queue_declare(q, auto_delete=False)
    ch.basic_consume(q, callback=lambda m: None, consumer_tag="tag-1")
    s, conns = wait_for(lambda: (lambda r: r if r[1] else None)(api.get("/api/connections")[:2]))
    assert s == 200 and conns[0]["user"] == "guest" and conns[0]["vhost"] == "/"
    s, chans, _ = api.get("/api/channels")
    assert s == 200 and any(x["consumer_count"] == 1 for x in chans)
    s, cons, _ = api.get("/api/consumers")
    assert s == 200 and cons[0]["consumer_tag"] == "tag-1" and cons[0]["queue"]["name"] == q
    name = conns[0]["name"]
    s, _, _ = api.delete("/api/connections/" + urllib.parse.quote(name, safe=""))
    assert s == 204
    with pytest.raises(Exception):
        for _ in range(50):
            c.drain_events(timeout=0.2)
    wait_for(lambda: api.get("/api/connections")[1] == [], message="connection closed")


def test_connections_are_listed_from_open_until_closed(api, broker):
    # As RabbitMQ's management lists them (connection_created at connection.open): one still
    # in its handshake is not a connection yet, and one whose closing handshake is over is
    # gone, even while the broker lingers for the client to hang up.
    import socket as _socket
    half = _socket.create_connection((broker.host, broker.port), timeout=5)
    half.sendall(b"AMQP\x00\x00\x09\x01")  # connection.start comes back; nothing more
    r = broker.raw()  # a whole handshake
    wait_for(lambda: len(api.get("/api/connections")[1]) == 1, message="one listed")
    s, conns, _ = api.get("/api/connections")
    assert [c["state"] for c in conns] == ["running"]
    s, o, _ = api.get("/api/overview")
    assert o["object_totals"]["connections"] == 1
    r.send_method(0, "connection.close", reply_code=200, reply_text="bye", class_id=0,
                  method_id=0)
    r.expect("connection.close-ok")
    # the client keeps its socket open: the broker lingers, but the connection is closed
    assert api.get("/api/connections")[1] == []
    assert api.get("/api/overview")[1]["object_totals"]["connections"] == 0
    half.close()
    r.close()


# ---------------------------------------------------------------------------
# Definitions, vhosts, metrics
# ---------------------------------------------------------------------------
def test_definitions_export_import(broker_factory):
    a = broker_factory()
    api = Api(a)
    q, x = uname("dq"), uname("dx")
    api.declare(q, durable=True, arguments={"x-message-ttl": 60000})
    api.put("/api/exchanges/%2F/" + x, {"type": "topic"})
    api.post("/api/bindings/%%2F/e/%s/q/%s" % (x, q), {"routing_key": "a.#"})
    s, defs, _ = api.get("/api/definitions")
    assert s == 200
    assert [d["name"] for d in defs["queues"]] == [q]
    assert [d["name"] for d in defs["exchanges"]] == [x]
    assert [(d["source"], d["destination"], d["routing_key"]) for d in defs["bindings"]] == [
        (x, q, "a.#")]
    b = broker_factory()
    api2 = Api(b)
    s, _, _ = api2.post("/api/definitions", defs)
    assert s == 204
    assert api2.queue(q)["arguments"] == {"x-message-ttl": 60000}
    assert api2.publish("a.b", "m", exchange=x) is True
    # a malformed document changes nothing
    s, j, _ = api2.post("/api/definitions", {"queues": [{"name": "ok-" + q},
                                                        {"nameless": True}]})
    assert s == 400
    assert api2.get(Api.q("ok-" + q))[0] == 404


def test_vhost_create_and_use(api, broker):
    s, _, _ = api.put("/api/vhosts/other")
    assert s == 201
    s, _, _ = api.put("/api/vhosts/other")
    assert s == 204
    s, _, _ = api.put("/api/queues/other/vq", {"durable": False})
    assert s == 201
    s, qs, _ = api.get("/api/queues/other")
    assert [q["name"] for q in qs if q["kind"] == "queue"] == ["vq"]
    s, j, _ = api.get("/api/queues/nosuchvhost")
    assert s == 404
    # format names reach other vhosts as <vhost>/<queue>, or with a vhost field
    s, j, _ = api.info("QUEUE=DIRECT=OS:.\\private$\\other/vq", "PATHNAME")
    assert s == 200 and j["values"]["PROPID_MGMT_QUEUE_PATHNAME"].endswith("other/vq")
    s, j, _ = api.info("QUEUE=DIRECT=OS:.\\private$\\vq", "MESSAGE_COUNT", vhost="other")
    assert s == 200 and j["values"]["PROPID_MGMT_QUEUE_MESSAGE_COUNT"] == 0


def test_metrics(api):
    q = uname("met")
    api.declare(q)
    api.publish(q, "m")
    s, text, h = api.get("/metrics", auth=False)
    assert s == 200 and h["Content-Type"].startswith("text/plain")
    lines = dict(l.rsplit(" ", 1) for l in text.splitlines() if l and not l.startswith("#"))
    assert int(lines["sluice_messages"]) >= 1
    assert lines["sluice_node_online"] == "1"
    assert "# TYPE sluice_messages_published_total counter" in text
    assert q not in text, "aggregated metrics must not name queues"
    s, _, _ = api.get("/metrics/per-object", auth=False)
    assert s == 401
    s, text, _ = api.get("/metrics/per-object")
    assert s == 200 and 'sluice_queue_messages{vhost="/",queue="%s"} 1' % q in text


def test_publish_with_an_invalid_expiration_is_refused(api):
    # The same rule as basic.publish (RabbitMQ's): 400 with its reason, nothing queued.
    q = uname("hexp")
    api.declare(q)
    for value, reason in (("-1", "{value_negative,-1}"), ("1.5", '{leftover_string,".5"}'),
                          ("", "no_integer"), ("99999999999999999999", "value_too_large")):
        s, j, _ = api.post("/api/exchanges/%2F/amq.default/publish",
                           {"routing_key": q, "payload": "x", "payload_encoding": "string",
                            "properties": {"expiration": value}})
        assert s == 400 and reason in j["reason"], (value, s, j)
    assert api.queue(q)["messages"] == 0
    assert api.publish(q, "fine", expiration="60000") is True


def test_publish_with_cc_and_bcc(api):
    # The HTTP door routes CC and BCC as basic.publish does, and keeps BCC out of the message.
    q1, q2, q3 = uname("cc1"), uname("cc2"), uname("cc3")
    for q in (q1, q2, q3):
        api.declare(q)
    assert api.publish("nowhere-" + q1, "sel", headers={"CC": [q1], "BCC": [q2]}) is True
    for q in (q1, q2):
        (m,) = api.peek(q)
        assert m["payload"] == "sel" and m["properties"]["headers"] == {"CC": [q1]}
    assert api.peek(q3) == []
    s, j, _ = api.post("/api/exchanges/%2F/amq.default/publish",
                       {"routing_key": q1, "payload": "x", "payload_encoding": "string",
                        "properties": {"headers": {"BCC": "not-a-list"}}})
    assert s == 400 and "unacceptable_type_in_header" in j["reason"], (s, j)
