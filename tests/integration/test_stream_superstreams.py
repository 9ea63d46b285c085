"""Super streams on the stream door (src/stream/superstream.c over qm/superstream.c):
CreateSuperStream and DeleteSuperStream with RabbitMQ 3.13's checks, codes and rollback,
Partitions and Route, on super streams the door made and on ones built by hand through the
HTTP API (as the Node.js client's tests build them), with the permissions RabbitMQ checks."""
import struct

import pytest

import streamraw as sr
from helpers import wait_for
from test_mgmt import Api
from test_stream_door import create, opened, port_of, start

pytestmark = pytest.mark.sluice_only("the stream door of a private broker")

ROUTE, PARTITIONS, CREATE_SUPER_STREAM, DELETE_SUPER_STREAM = 0x18, 0x19, 0x1d, 0x1e


def strs(v):
    return struct.pack(">i", len(v)) + b"".join(sr.s16(s) for s in v)


def create_super(c, name, partitions, keys=None, args=None):
    keys = [str(i) for i in range(len(partitions))] if keys is None else keys
    corr = c.request(CREATE_SUPER_STREAM,
                     sr.s16(name) + strs(partitions) + strs(keys) + sr.kvmap(args or {}))
    return c.response(CREATE_SUPER_STREAM, corr)[0]


def delete_super(c, name):
    corr = c.request(DELETE_SUPER_STREAM, sr.s16(name))
    return c.response(DELETE_SUPER_STREAM, corr)[0]


def partitions(c, name):
    corr = c.request(PARTITIONS, sr.s16(name))
    code, r = c.response(PARTITIONS, corr)
    return code, [r.str() for _ in range(r.take(">i"))]


def route(c, key, name):
    corr = c.request(ROUTE, sr.s16(key) + sr.s16(name))
    code, r = c.response(ROUTE, corr)
    return code, [r.str() for _ in range(r.take(">i"))]


def test_announced_in_command_versions(broker_factory):
    b, port = start(broker_factory)
    c = opened(port)
    corr = c.request(sr.EXCHANGE_COMMAND_VERSIONS, struct.pack(">i", 0))
    code, r = c.response(sr.EXCHANGE_COMMAND_VERSIONS, corr)
    versions = {r.take(">H"): (r.take(">H"), r.take(">H")) for _ in range(r.take(">i"))}
    assert code == sr.OK
    for key in (ROUTE, PARTITIONS, CREATE_SUPER_STREAM, DELETE_SUPER_STREAM):
        assert versions[key] == (1, 1)


def test_create_query_and_delete(broker_factory):
    b, port = start(broker_factory)
    api = Api(b)
    c = opened(port)
    parts = ["ss-0", "ss-1", "ss-2"]
    assert create_super(c, "ss", parts, args={"max-age": "1h", "max-length-bytes": "20000"}) == sr.OK
    # RabbitMQ's topology: a durable direct exchange marked x-super-stream, a stream per
    # partition with Create's arguments (and the balanced locator by default), bindings keyed
    # by the binding keys with x-stream-partition-order = the index
    s, x, _ = api.get("/api/exchanges/%2F/ss")
    assert s == 200 and x["type"] == "direct" and x["durable"] and not x["auto_delete"]
    assert x["arguments"] == {"x-super-stream": True}
    s, q, _ = api.get("/api/queues/%2F/ss-1")
    assert s == 200 and q["durable"] and q["arguments"] == {
        "x-queue-type": "stream", "x-max-age": "1h", "x-max-length-bytes": 20000,
        "x-queue-leader-locator": "balanced"}
    s, bs, _ = api.get("/api/exchanges/%2F/ss/bindings/source")
    assert sorted((b_["destination"], b_["routing_key"], b_["arguments"]["x-stream-partition-order"])
                  for b_ in bs) == [("ss-0", "0", 0), ("ss-1", "1", 1), ("ss-2", "2", 2)]
    assert partitions(c, "ss") == (sr.OK, parts)
    assert route(c, "1", "ss") == (sr.OK, ["ss-1"])
    assert route(c, "nope", "ss") == (sr.OK, [])
    # made already: the client takes STREAM_ALREADY_EXISTS as success
    assert create_super(c, "ss", parts) == sr.STREAM_ALREADY_EXISTS
    assert create_super(c, "other", ["ss-2"]) == sr.STREAM_ALREADY_EXISTS  # a partition exists
    assert api.get("/api/exchanges/%2F/other")[0] == 404
    # a message routed over AMQP 0-9-1 through the exchange lands in the partition
    conn = b.amqp()
    ch = conn.channel()
    ch.basic_publish(__import__("amqp").Message(b"via amqp"), exchange="ss", routing_key="2")
    conn.close()
    wait_for(lambda: c.stream_stats("ss-2")[1]["committed_chunk_id"] == 0, 5,
             message="the message routed through the exchange never reached ss-2")
    # a subscriber of a partition hears the deletion
    sub = opened(port)
    assert sub.subscribe(0, "ss-0", sr.FIRST) == sr.OK
    assert delete_super(c, "ss") == sr.OK
    r = sub.expect(sr.METADATA_UPDATE)
    assert (r.take(">H"), r.str()) == (sr.STREAM_NOT_AVAILABLE, "ss-0")
    assert api.get("/api/exchanges/%2F/ss")[0] == 404
    for p in parts:
        assert api.get("/api/queues/%2F/" + p)[0] == 404
    assert partitions(c, "ss") == (sr.STREAM_DOES_NOT_EXIST, [])
    assert route(c, "1", "ss") == (sr.STREAM_DOES_NOT_EXIST, [])
    assert delete_super(c, "ss") == sr.STREAM_DOES_NOT_EXIST
    # with binding keys, and zero partitions (RabbitMQ makes the exchange alone)
    assert create_super(c, "kk", ["kk-A", "kk-B"], ["A", "B"]) == sr.OK
    assert route(c, "B", "kk") == (sr.OK, ["kk-B"])
    assert create_super(c, "empty", []) == sr.OK
    assert partitions(c, "empty") == (sr.OK, [])
    b.assert_alive()


def test_kept_across_a_restart(broker_factory):
    b, port = start(broker_factory)
    c = opened(port)
    assert create_super(c, "keep", ["keep-0", "keep-1"]) == sr.OK
    c.close()
    data_dir = b.data_dir
    assert b.terminate() == 0
    b2 = broker_factory(config={"listeners.stream": "0"}, data_dir=data_dir)
    c = opened(port_of(b2))
    assert partitions(c, "keep") == (sr.OK, ["keep-0", "keep-1"])
    assert route(c, "1", "keep") == (sr.OK, ["keep-1"])


def test_refusals_leave_nothing(broker_factory):
    b, port = start(broker_factory)
    api = Api(b)
    c = opened(port)

    def nothing(*names):
        assert all(api.get("/api/queues/%2F/" + n)[0] == 404 for n in names)

    # the name: empty or reserved (the client's "creation goes wrong" test wants 17)
    assert create_super(c, "", ["p-0"]) == sr.PRECONDITION_FAILED
    assert create_super(c, "amq.ss", ["p-0"]) == sr.PRECONDITION_FAILED
    nothing("p-0")
    # partitions and keys not as many, a duplicate, an incorrect partition name
    assert create_super(c, "v", ["v-0", "v-1"], ["0"]) == sr.PRECONDITION_FAILED
    assert create_super(c, "v", ["v-0", "v-0"]) == sr.PRECONDITION_FAILED
    assert create_super(c, "v", ["v-0", "amq.v"]) == sr.PRECONDITION_FAILED
    assert create_super(c, "v", ["v-0", ""]) == sr.PRECONDITION_FAILED
    assert create_super(c, "v", ["v-0"], args={"max-length-bytes": "lots"}) == sr.PRECONDITION_FAILED
    assert api.get("/api/exchanges/%2F/v")[0] == 404
    nothing("v-0", "v-1")
    # an exchange of the name, of any kind; a classic queue of a partition's name
    assert api.put("/api/exchanges/%2F/taken", {"type": "fanout"})[0] in (201, 204)
    assert create_super(c, "taken", ["taken-0"]) == sr.STREAM_ALREADY_EXISTS
    assert api.put("/api/queues/%2F/classic", {"durable": True})[0] in (201, 204)
    assert create_super(c, "w", ["w-0", "classic"]) == sr.STREAM_ALREADY_EXISTS
    assert api.get("/api/exchanges/%2F/w")[0] == 404
    nothing("w-0")
    # the vhost's max-queues counts every partition before anything is made
    assert api.put("/api/vhost-limits/%2F/max-queues", {"value": 3})[0] in (200, 201, 204)
    assert create_super(c, "lim", ["lim-0", "lim-1", "lim-2"]) == sr.PRECONDITION_FAILED
    assert api.get("/api/exchanges/%2F/lim")[0] == 404
    nothing("lim-0", "lim-1", "lim-2")
    assert api.delete("/api/vhost-limits/%2F/max-queues")[0] in (200, 204)
    # a partition the engine refuses once the first is made: all of it is undone
    assert create_super(c, "rb", ["rb-0", "rb;1"]) == sr.PRECONDITION_FAILED
    assert api.get("/api/exchanges/%2F/rb")[0] == 404
    nothing("rb-0")
    assert partitions(c, "rb") == (sr.STREAM_DOES_NOT_EXIST, [])
    b.assert_alive()


def test_permissions_as_rabbitmq_checks_them(broker_factory):
    b, port = start(broker_factory, **{"user.bob": "secret"})
    api = Api(b)
    g = opened(port)

    def perms(configure, write, read):
        assert api.put("/api/permissions/%2F/bob", {"configure": configure, "write": write,
                                                    "read": read})[0] in (201, 204)

    # configure on the exchange, then on each partition; read on the exchange; write on each
    # partition: any one missing refuses, and nothing is made
    for conf, write, read in (("^$", ".*", ".*"), ("^s$", ".*", ".*"), (".*", ".*", "^$"),
                              (".*", "^s$", ".*"), (".*", "^s$", "^s$")):
        perms(conf, write, read)
        bob = opened(port, user="bob", password="secret")
        assert create_super(bob, "s", ["s-0", "s-1"]) == sr.ACCESS_REFUSED, (conf, write, read)
        bob.close()
        assert api.get("/api/exchanges/%2F/s")[0] == 404
    # refused before the name is looked at: an existing one is not revealed
    assert create_super(g, "s", ["s-0", "s-1"]) == sr.OK
    perms("^$", "^$", "^$")
    bob = opened(port, user="bob", password="secret")
    assert create_super(bob, "s", ["s-0", "s-1"]) == sr.ACCESS_REFUSED
    # Delete checks the same over the partitions the super stream has now
    assert delete_super(bob, "s") == sr.ACCESS_REFUSED
    assert delete_super(bob, "missing") == sr.ACCESS_REFUSED
    # Partitions and Route: RabbitMQ 3.13 checks no permission for them
    assert partitions(bob, "s") == (sr.OK, ["s-0", "s-1"])
    assert route(bob, "0", "s") == (sr.OK, ["s-0"])
    bob.close()
    perms(".*", "^s-1$", ".*")  # write on s-0 missing
    bob = opened(port, user="bob", password="secret")
    assert delete_super(bob, "s") == sr.ACCESS_REFUSED
    perms(".*", ".*", ".*")
    assert delete_super(bob, "s") == sr.OK
    assert api.get("/api/queues/%2F/s-1")[0] == 404
    b.assert_alive()


def test_super_stream_built_by_hand(broker_factory):
    """As the Node.js client's test helper builds one: an exchange, streams and bindings over
    the HTTP API, the order as a string; and what is not a partition is left out."""
    b, port = start(broker_factory)
    api = Api(b)
    c = opened(port)
    assert api.put("/api/exchanges/%2F/hand", {"type": "direct", "durable": True,
                                               "arguments": {"x-super-stream-enabled": "true"}})[0] in (201, 204)
    for s in ("hand-a", "hand-b", "hand-c", "hand-z"):
        assert create(c, s) == sr.OK
    assert api.put("/api/queues/%2F/hand-classic", {"durable": True})[0] in (201, 204)
    for dest, key, order in (("hand-c", "c", "2"), ("hand-a", "a", "0"), ("hand-z", "z", None),
                             ("hand-b", "b", 1), ("hand-classic", "a", "-1")):
        args = {} if order is None else {"x-stream-partition-order": order}
        assert api.post("/api/bindings/%2F/e/hand/q/" + dest,
                        {"routing_key": key, "arguments": args})[0] == 201
    # ordered by x-stream-partition-order (number or string), unordered ones last, queues
    # that are not streams left out
    assert partitions(c, "hand") == (sr.OK, ["hand-a", "hand-b", "hand-c", "hand-z"])
    assert route(c, "a", "hand") == (sr.OK, ["hand-a"])  # the classic queue is not a stream
    assert route(c, "z", "hand") == (sr.OK, ["hand-z"])
    # a key bound to two streams reaches both; an exchange-to-exchange binding is followed
    assert api.post("/api/bindings/%2F/e/hand/q/hand-b", {"routing_key": "c"})[0] == 201
    assert sorted(route(c, "c", "hand")[1]) == ["hand-b", "hand-c"]
    assert api.put("/api/exchanges/%2F/inner", {"type": "direct"})[0] in (201, 204)
    assert api.post("/api/bindings/%2F/e/hand/e/inner", {"routing_key": "deep"})[0] == 201
    assert api.post("/api/bindings/%2F/e/inner/q/hand-z", {"routing_key": "deep"})[0] == 201
    assert route(c, "deep", "hand") == (sr.OK, ["hand-z"])
    # a stream that is no super stream: no exchange of its name
    assert route(c, "a", "hand-a") == (sr.STREAM_DOES_NOT_EXIST, [])
    assert partitions(c, "hand-a") == (sr.STREAM_DOES_NOT_EXIST, [])
    # DeleteSuperStream takes it apart as well: the exchange and its partitions (each once,
    # though hand-b is bound twice), not the classic queue
    assert delete_super(c, "hand") == sr.OK
    assert api.get("/api/exchanges/%2F/hand")[0] == 404
    for s in ("hand-a", "hand-b", "hand-c", "hand-z"):
        assert api.get("/api/queues/%2F/" + s)[0] == 404
    assert api.get("/api/queues/%2F/hand-classic")[0] == 200
    b.assert_alive()
