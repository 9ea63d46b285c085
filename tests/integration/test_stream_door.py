"""RabbitMQ's stream protocol door (src/stream/, listeners.stream): the connection's life as
RabbitMQ's stream reader leads it, driven by a raw client (streamraw.py): PeerProperties,
SASL, Tune, Open, Close both ways, heartbeats, limits and malformed input, permissions, and
the answers to the commands that wait for the stream engine (docs/stream-protocol.md)."""
import re
import socket
import ssl
import struct
import time

import pytest

import streamraw as sr
from helpers import wait_for
from test_mgmt import Api

pytestmark = pytest.mark.sluice_only("the stream door of a private broker")

STREAM_RE = re.compile(rb"listening stream=([0-9.]+):(\d+)")
STREAM_TLS_RE = re.compile(rb"listening stream/ssl=([0-9.]+):(\d+)")


def port_of(b, rx=STREAM_RE):
    m = wait_for(lambda: rx.search(open(b.log_path, "rb").read()), 5,
                 message="no 'listening stream=' line")
    return int(m.group(2))


def start(broker_factory, **extra):
    cfg = {"listeners.stream": "0"}
    cfg.update(extra)
    b = broker_factory(config=cfg)
    return b, port_of(b)


def test_off_unless_configured(broker_factory):
    b = broker_factory()
    b.assert_alive()  # every listener's line is logged before the loop runs
    assert b"listening stream" not in open(b.log_path, "rb").read()


def test_rabbitmq_spelling_of_the_listener(broker_factory):
    b = broker_factory(config={"stream.listeners.tcp.1": "127.0.0.1:0"})
    c = sr.StreamClient(port_of(b))
    c.connect()
    c.close()


def test_handshake_open_metadata_and_close(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    code, props = c.peer_properties({"product": "streamraw", "connection_name": "t1"})
    assert code == sr.OK and props["product"] == "Sluice" and props["version"]
    assert "cluster_name" in props
    code, mechs = c.sasl_handshake()
    assert code == sr.OK and mechs == ["PLAIN"]  # EXTERNAL only over TLS with a certificate
    assert c.sasl_authenticate("guest", "guest") == sr.OK
    assert c.tune(heartbeat=0) == (1048576, 60)  # RabbitMQ's defaults
    code, props = c.open("/")
    assert code == sr.OK
    assert props == {"advertised_host": "127.0.0.1", "advertised_port": str(port)}
    # ExchangeCommandVersions: the codec's table, Publish and Deliver up to 2
    corr = c.request(sr.EXCHANGE_COMMAND_VERSIONS, struct.pack(">iHHH", 1, 0x02, 1, 2))
    code, r = c.response(sr.EXCHANGE_COMMAND_VERSIONS, corr)
    versions = {r.take(">H"): (r.take(">H"), r.take(">H")) for _ in range(r.take(">i"))}
    assert code == sr.OK and versions[0x02] == (1, 2) and versions[0x08] == (1, 2)
    assert versions[0x0d] == (1, 1) and 0x1f not in versions
    # Metadata: this node as the broker, no stream yet
    brokers, streams = c.metadata("s1", "s2")
    assert brokers == [(0, "127.0.0.1", port)]
    assert streams == [("s1", sr.STREAM_DOES_NOT_EXIST, 0xFFFF, []),
                       ("s2", sr.STREAM_DOES_NOT_EXIST, 0xFFFF, [])]
    assert c.close_request() == sr.OK
    assert c.sees_eof()
    b.assert_alive()


def create(c, name, args=None):
    corr = c.request(sr.CREATE, sr.s16(name) + sr.kvmap(args or {}))
    return c.response(sr.CREATE, corr)[0]


def delete(c, name):
    corr = c.request(sr.DELETE, sr.s16(name))
    return c.response(sr.DELETE, corr)[0]


def test_create_and_delete_streams(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.connect()
    assert create(c, "s1", {"max-length-bytes": "1000000", "max-age": "7D",
                            "stream-max-segment-size-bytes": "500000", "unknown": "ignored"}) == sr.OK
    assert create(c, "s1") == sr.STREAM_ALREADY_EXISTS
    assert c.metadata("s1", "s2") == ([(0, "127.0.0.1", port)], [
        ("s1", sr.OK, 0, []), ("s2", sr.STREAM_DOES_NOT_EXIST, 0xFFFF, [])])
    # a stream queue as the HTTP API lists it, with the arguments Create gave
    api = Api(b)
    q = api.get("/api/queues/%2F/s1")[1]
    assert q["type"] == "stream" and q["durable"] is True
    assert q["arguments"]["x-max-length-bytes"] == 1000000 and q["arguments"]["x-max-age"] == "7D"
    assert q["arguments"]["x-stream-max-segment-size-bytes"] == 500000
    # refused arguments: not a number, a max-age RabbitMQ refuses
    assert create(c, "bad", {"max-length-bytes": "lots"}) == sr.PRECONDITION_FAILED
    assert create(c, "bad", {"max-age": "7 days"}) == sr.PRECONDITION_FAILED
    assert api.get("/api/queues/%2F/bad")[0] == 404
    # a classic queue's name is taken, and it is no stream
    assert api.put("/api/queues/%2F/classic", {"durable": True})[0] == 201
    assert create(c, "classic") == sr.STREAM_ALREADY_EXISTS
    assert delete(c, "classic") == sr.STREAM_DOES_NOT_EXIST
    assert c.metadata("classic")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    assert delete(c, "s1") == sr.OK
    assert delete(c, "s1") == sr.STREAM_DOES_NOT_EXIST
    assert c.metadata("s1")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    assert api.get("/api/queues/%2F/s1")[0] == 404
    c.close()


def test_a_created_stream_is_durable_and_served_over_amqp(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.connect()
    assert create(c, "s") == sr.OK
    c.close()
    # over AMQP 0-9-1 it is a stream: publish, then read from the first offset
    conn = b.amqp()
    ch = conn.channel()
    ch.basic_publish(__import__("amqp").Message(b"hello"), exchange="", routing_key="s")
    ch.basic_qos(0, 10, False)
    got = []
    ch.basic_consume("s", callback=got.append, arguments={"x-stream-offset": "first"})
    wait_for(lambda: conn.drain_events(timeout=0.2) or got, 5, interval=0)
    assert got[0].body == b"hello" and got[0].headers["x-stream-offset"] == 0
    conn.close()
    # a restart keeps it
    data_dir = b.data_dir
    assert b.terminate() == 0
    b2 = broker_factory(config={"listeners.stream": "0"}, data_dir=data_dir)
    c = sr.StreamClient(port_of(b2))
    c.connect()
    assert c.metadata("s")[1][0][1:3] == (sr.OK, 0)
    c.close()


def opened(port, **kw):
    c = sr.StreamClient(port)
    c.connect(**kw)
    return c


def test_publish_confirm_and_subscribe_from_every_offset_spec(broker_factory):
    b, port = start(broker_factory)
    p = opened(port)
    assert create(p, "s") == sr.OK
    assert p.declare_publisher(1, "s") == sr.OK
    p.publish(1, [(1, sr.amqp10(b"m0")), (2, sr.amqp10(b"m1")), (3, sr.amqp10(b"m2"))])
    assert p.confirms(1, 3) == [1, 2, 3]
    # first: everything, stored as published (the AMQP 1.0 bytes), numbered from 0
    c = opened(port)
    assert c.subscribe(1, "s", sr.FIRST, credit=10) == sr.OK
    assert c.messages(3) == [(i, sr.amqp10(b"m%d" % i)) for i in range(3)]
    # what comes later goes to the subscription as it is committed
    p.publish(1, [(4, sr.amqp10(b"m3")), (5, sr.amqp10(b"m4"))])
    assert p.confirms(1, 2) == [4, 5]
    got = c.messages(2)
    assert got == [(3, sr.amqp10(b"m3")), (4, sr.amqp10(b"m4"))]
    # offset: from that one on
    assert c.subscribe(2, "s", sr.OFFSET, 1, credit=10) == sr.OK
    assert [o for o, _ in c.messages(4)] == [1, 2, 3, 4]
    # last: the newest chunk (the group commit that stored m3 and m4, or m4 alone)
    c2 = opened(port)
    assert c2.subscribe(1, "s", sr.LAST, credit=10) == sr.OK
    _, hdr, entries = c2.deliver()
    assert hdr["chunk_id"] in (3, 4) and hdr["chunk_id"] + len(entries) == 5
    # timestamp: from the first entry at or after it (m3's chunk's timestamp: m3 or before)
    ts3 = hdr["ts"]
    assert c2.subscribe(2, "s", sr.TIMESTAMP, ts3, credit=10) == sr.OK
    first = c2.messages(1)[0][0]
    assert first <= hdr["chunk_id"]
    # next, and a timestamp in the future: only what comes after
    c3 = opened(port)
    assert c3.subscribe(1, "s", sr.NEXT, credit=10) == sr.OK
    assert c3.subscribe(2, "s", sr.TIMESTAMP, int(time.time() * 1000) + 3600_000,
                        credit=10) == sr.OK
    p.publish(1, [(6, sr.amqp10(b"m5"))])
    assert p.confirms(1, 1) == [6]
    seen = {}
    for _ in range(2):
        sid, hdr, entries = c3.deliver()
        seen[sid] = (hdr["chunk_id"], entries)
    assert seen == {1: (5, [sr.amqp10(b"m5")]), 2: (5, [sr.amqp10(b"m5")])}
    # an offset past the end waits for it, like next
    assert c3.subscribe(3, "s", sr.OFFSET, 1000, credit=10) == sr.OK
    assert c3.stream_stats("s")[0] == sr.OK  # answered, no Deliver before it
    for c_ in (p, c, c2, c3):
        assert c_.close_request() == sr.OK
    b.assert_alive()


def test_credit_unsubscribe_and_their_errors(broker_factory):
    b, port = start(broker_factory)
    p = opened(port)
    assert create(p, "s") == sr.OK
    assert p.declare_publisher(0, "s") == sr.OK
    c = opened(port)
    assert c.subscribe(1, "nope", sr.FIRST) == sr.STREAM_DOES_NOT_EXIST
    assert c.subscribe(1, "s", sr.FIRST, credit=1) == sr.OK
    assert c.subscribe(1, "s", sr.FIRST) == sr.SUBSCRIPTION_ID_ALREADY_EXISTS
    p.publish(0, [(1, sr.amqp10(b"a"))])
    assert p.confirms(0, 1) == [1]
    assert c.messages(1) == [(0, sr.amqp10(b"a"))]
    # its one credit is spent: the next chunk waits for more
    p.publish(0, [(2, sr.amqp10(b"b"))])
    assert p.confirms(0, 1) == [2]
    code, stats = c.stream_stats("s")  # answered before any Deliver: none is due
    assert code == sr.OK and stats["committed_chunk_id"] == 1
    c.credit(1, 1)
    assert c.messages(1) == [(1, sr.amqp10(b"b"))]
    # Credit for an unknown subscription: answered (only then), with its id
    c.credit(9, 5)
    r = c.expect(sr.CREDIT | sr.RESPONSE)
    assert (r.take(">H"), r.take(">B")) == (sr.SUBSCRIPTION_ID_DOES_NOT_EXIST, 9)
    assert c.unsubscribe(1) == sr.OK
    assert c.unsubscribe(1) == sr.SUBSCRIPTION_ID_DOES_NOT_EXIST
    p.publish(0, [(3, sr.amqp10(b"c"))])
    assert p.confirms(0, 1) == [3]
    assert c.stream_stats("s")[0] == sr.OK  # no Deliver after Unsubscribe
    # the subscription id is free again
    assert c.subscribe(1, "s", sr.OFFSET, 2, credit=1) == sr.OK
    assert c.messages(1) == [(2, sr.amqp10(b"c"))]
    assert c.close_request() == sr.OK
    b.assert_alive()


def test_publisher_errors_and_deduplication_by_reference(broker_factory):
    b, port = start(broker_factory)
    p = opened(port)
    # Publish to a publisher that was never declared: PublishError for each message
    p.publish(7, [(10, b"a"), (11, b"b")])
    assert p.publish_errors() == (7, [(10, sr.PUBLISHER_DOES_NOT_EXIST),
                                      (11, sr.PUBLISHER_DOES_NOT_EXIST)])
    assert p.declare_publisher(7, "s", "app") == sr.STREAM_DOES_NOT_EXIST
    assert p.query_publisher_sequence("s", "app")[0] == sr.STREAM_DOES_NOT_EXIST
    assert create(p, "s") == sr.OK
    assert p.query_publisher_sequence("s", "app") == (sr.OK, 0)
    assert p.declare_publisher(7, "s", "app") == sr.OK
    assert p.declare_publisher(7, "s") == sr.PRECONDITION_FAILED  # the id is in use
    assert p.declare_publisher(8, "s", "app") == sr.PRECONDITION_FAILED  # so is the reference
    p.publish(7, [(1, sr.amqp10(b"1")), (2, sr.amqp10(b"2")), (3, sr.amqp10(b"3"))])
    assert p.confirms(7, 3) == [1, 2, 3]
    assert p.query_publisher_sequence("s", "app") == (sr.OK, 3)
    # ids not above the highest stored are confirmed and not stored again
    p.publish(7, [(2, sr.amqp10(b"2")), (3, sr.amqp10(b"3")), (4, sr.amqp10(b"4"))])
    assert p.confirms(7, 3) == [2, 3, 4]
    assert p.query_publisher_sequence("s", "app") == (sr.OK, 4)
    assert p.delete_publisher(7) == sr.OK
    assert p.delete_publisher(7) == sr.PUBLISHER_DOES_NOT_EXIST
    # another connection goes on from the reference's sequence
    q = opened(port)
    assert q.declare_publisher(0, "s", "app") == sr.OK
    assert q.query_publisher_sequence("s", "app") == (sr.OK, 4)
    q.publish(0, [(4, sr.amqp10(b"4")), (5, sr.amqp10(b"5"))])
    assert q.confirms(0, 2) == [4, 5]
    # no reference: no deduplication
    assert q.declare_publisher(1, "s") == sr.OK
    q.publish(1, [(1, sr.amqp10(b"x"))])
    assert q.confirms(1, 1) == [1]
    c = opened(port)
    assert c.subscribe(0, "s", sr.FIRST, credit=100) == sr.OK
    assert [e for _, e in c.messages(6)] == [sr.amqp10(x) for x in (b"1", b"2", b"3", b"4",
                                                                     b"5", b"x")]
    # the stream goes: subscribers and publishers hear it (one MetadataUpdate per stream and
    # connection), and are forgotten, as RabbitMQ does
    assert p.declare_publisher(2, "s") == sr.OK
    corr = p.request(sr.DELETE, sr.s16("s"))
    # p's MetadataUpdate goes at the deletion, its answer once the deletion is durable
    r = p.expect(sr.METADATA_UPDATE)
    assert (r.take(">H"), r.str()) == (sr.STREAM_NOT_AVAILABLE, "s")
    assert p.response(sr.DELETE, corr)[0] == sr.OK
    for conn in (c, q):
        r = conn.expect(sr.METADATA_UPDATE)
        assert (r.take(">H"), r.str()) == (sr.STREAM_NOT_AVAILABLE, "s")
    q.publish(0, [(6, sr.amqp10(b"6"))])
    assert q.publish_errors() == (0, [(6, sr.PUBLISHER_DOES_NOT_EXIST)])
    assert q.declare_publisher(0, "s") == sr.STREAM_DOES_NOT_EXIST  # its id is free again
    # made again under the same name: a new stream, nothing tracked
    assert create(p, "s") == sr.OK
    assert p.query_publisher_sequence("s", "app") == (sr.OK, 0)
    assert c.subscribe(0, "s", sr.FIRST) == sr.OK  # its id was freed by the deletion
    # deleted over the HTTP API while a publisher is declared: heard all the same
    assert q.declare_publisher(0, "s") == sr.OK
    assert Api(b).delete("/api/queues/%2F/s")[0] in (200, 204)
    for conn in (c, q):
        r = conn.expect(sr.METADATA_UPDATE)
        assert (r.take(">H"), r.str()) == (sr.STREAM_NOT_AVAILABLE, "s")
    assert q.delete_publisher(0) == sr.PUBLISHER_DOES_NOT_EXIST
    b.assert_alive()


def test_sub_entry_batches_are_stored_a_record_an_offset(broker_factory):
    b, port = start(broker_factory)
    p = opened(port)
    assert create(p, "s") == sr.OK
    assert p.declare_publisher(0, "s", "app") == sr.OK
    recs = [sr.amqp10(b"r%d" % i) for i in range(5)]
    p.publish(0, [(1, sr.Batch(recs[:3])), (2, sr.Batch(recs[3:], compression=1))])
    assert p.confirms(0, 2) == [1, 2]
    assert p.query_publisher_sequence("s", "app") == (sr.OK, 2)
    # damaged: records that do not add up, gzip that does not unpack to its length, lz4
    p.publish(0, [(3, sr.Batch(recs[:2], records=3)),
                  (4, sr.Batch(recs[:2], compression=1, uncompressed=7)),
                  (5, sr.Batch(recs[:2], compression=3))])
    assert p.publish_errors() == (0, [(3, sr.PRECONDITION_FAILED), (4, sr.PRECONDITION_FAILED),
                                      (5, sr.PRECONDITION_FAILED)])
    p.publish(0, [(6, sr.amqp10(b"after"))])
    assert p.confirms(0, 1) == [6]
    c = opened(port)
    assert c.subscribe(0, "s", sr.FIRST, credit=10) == sr.OK
    assert c.messages(6) == list(enumerate(recs + [sr.amqp10(b"after")]))
    b.assert_alive()


def test_a_duplicate_is_confirmed_only_once_its_original_is_durable(broker_factory):
    # every sync takes 500 ms: a confirm sent before the original's sync ends is seen early
    b = broker_factory(config={"listeners.stream": "0"}, env={"SLUICE_FAULT": "sync_delay_ms=500"})
    port = port_of(b)
    a, d = opened(port), opened(port)
    assert create(a, "s") == sr.OK
    assert a.declare_publisher(0, "s", "app") == sr.OK
    assert d.declare_publisher(0, "s", "app") == sr.OK  # the same reference, another connection
    q = opened(port)
    a.publish(0, [(1, sr.amqp10(b"once"))])
    # the original is stored (its sequence moved) and its sync is under way
    wait_for(lambda: q.query_publisher_sequence("s", "app") == (sr.OK, 1), 5)
    t0 = time.monotonic()
    d.publish(0, [(1, sr.amqp10(b"once"))])  # a duplicate of what is still being synced
    assert d.confirms(0, 1) == [1]
    assert time.monotonic() - t0 >= 0.2  # not before the original's sync (500 ms) ended
    assert a.confirms(0, 1) == [1]
    a.publish(0, [(2, sr.amqp10(b"two"))])
    assert a.confirms(0, 1) == [2]
    assert q.subscribe(0, "s", sr.FIRST) == sr.OK
    assert q.messages(2) == [(0, sr.amqp10(b"once")), (1, sr.amqp10(b"two"))]  # stored once
    b.assert_alive()


def test_store_and_query_offsets_and_stream_stats(broker_factory):
    b, port = start(broker_factory)
    c = opened(port)
    assert c.query_offset("s", "app")[0] == sr.STREAM_DOES_NOT_EXIST
    assert c.stream_stats("s")[0] == sr.STREAM_DOES_NOT_EXIST
    assert create(c, "s") == sr.OK
    assert c.query_offset("s", "app")[0] == sr.NO_OFFSET
    assert c.stream_stats("s") == (sr.OK, {"first_chunk_id": -1, "last_chunk_id": -1,
                                           "committed_chunk_id": -1})
    c.store_offset("s", "app", 41)
    c.store_offset("s", "app", 42)
    c.store_offset("nope", "app", 1)  # no answer either way (as RabbitMQ)
    assert c.query_offset("s", "app") == (sr.OK, 42)
    assert c.query_offset("s", "other")[0] == sr.NO_OFFSET
    other = opened(port)
    assert other.query_offset("s", "app") == (sr.OK, 42)  # server-side: any connection
    assert c.declare_publisher(0, "s") == sr.OK
    c.publish(0, [(1, sr.amqp10(b"a"))])
    assert c.confirms(0, 1) == [1]
    c.publish(0, [(2, sr.amqp10(b"b"))])
    assert c.confirms(0, 1) == [2]
    code, st = c.stream_stats("s")
    assert code == sr.OK and st["first_chunk_id"] == 0 and st["committed_chunk_id"] == 1
    assert c.close_request() == sr.OK
    b.assert_alive()


def test_confirmed_messages_survive_kill9(broker_factory):
    b, port = start(broker_factory)
    p = opened(port)
    assert create(p, "s") == sr.OK
    assert p.declare_publisher(0, "s", "app") == sr.OK
    msgs = [(i + 1, sr.amqp10(b"durable-%d" % i)) for i in range(50)]
    for i in range(0, 50, 10):
        p.publish(0, msgs[i:i + 10])
    assert p.confirms(0, 50) == list(range(1, 51))
    data_dir = b.data_dir
    b.kill9()  # every confirmed message is on disk
    b2 = broker_factory(config={"listeners.stream": "0"}, data_dir=data_dir)
    c = opened(port_of(b2))
    assert c.subscribe(0, "s", sr.FIRST, credit=100) == sr.OK
    assert c.messages(50) == [(i, m) for i, (_, m) in enumerate(msgs)]
    # the stream goes on from there
    assert c.declare_publisher(0, "s") == sr.OK
    c.publish(0, [(1, sr.amqp10(b"after"))])
    got, confirmed = [], False
    while not got or not confirmed:  # Deliver and PublishConfirm, in either order
        k, _, r = c.frame()
        if k == sr.PUBLISH_CONFIRM:
            confirmed = True
        elif k == sr.DELIVER:
            r.take(">B")
            hdr, entries = sr.parse_chunk(r)
            got.append((hdr["chunk_id"], entries))
    assert got == [(50, [sr.amqp10(b"after")])]
    b2.assert_alive()


def test_a_resource_alarm_stops_reading_publishers(broker_factory):
    # a free-disk limit no disk meets: the disk alarm is on from the first check
    b, port = start(broker_factory, disk_free_limit="1000000000G")
    wait_for(lambda: b"disk alarm: blocking publishers" in open(b.log_path, "rb").read(), 5,
             message="no alarm logged")
    p = opened(port)
    assert create(p, "s") == sr.OK  # a connection without publishers is served
    assert p.declare_publisher(0, "s", "app") == sr.OK
    p.publish(0, [(1, sr.amqp10(b"held"))])
    # from here the publisher's connection is not read: no confirm, no answer
    p.s.settimeout(1.0)
    corr = p.request(sr.QUERY_PUBLISHER_SEQUENCE, sr.s16("app") + sr.s16("s"))
    with pytest.raises(socket.timeout):
        p.frame()
    # the others are, and nothing of the held frame was stored
    c = opened(port)
    assert c.query_publisher_sequence("s", "app") == (sr.OK, 0)
    assert c.stream_stats("s")[1]["committed_chunk_id"] == -1
    assert corr
    b.assert_alive()


def test_amqp_0_9_1_and_the_stream_protocol_share_a_stream(broker_factory):
    b, port = start(broker_factory)
    p = opened(port)
    assert create(p, "s") == sr.OK
    conn = b.amqp()
    ch = conn.channel()
    ch.confirm_select()
    ch.basic_publish(__import__("amqp").Message(b"from-amqp"), exchange="", routing_key="s")
    assert p.declare_publisher(0, "s") == sr.OK
    props = ["id-1", b"guest", None, "subj", "replies", "corr-1", ("sym", "text/plain"),
             ("sym", "utf-8"), None, ("ts", 1700000000123)]
    with_props = sr.amqp10(b"with-props", props, {"my-key": "my-value", "k": 100000,
                                                  "yes": True}, durable=True)
    p.publish(0, [(1, sr.amqp10(b"from-stream")), (2, with_props)])
    assert p.confirms(0, 2) == [1, 2]
    # over the stream protocol: an AMQP 0-9-1 message as an AMQP 1.0 message (its annotations
    # name where it was published; test_stream_convert.py checks every section), the stream
    # protocol's messages as they were published
    c = opened(port)
    assert c.subscribe(0, "s", sr.FIRST, credit=10) == sr.OK
    first, second, third = c.messages(3)
    assert first[0] == 0 and first[1].startswith(b"\x00\x53\x72")
    assert first[1].endswith(b"\x00\x53\x75\xa0\x09from-amqp")
    assert [second, third] == [(1, sr.amqp10(b"from-stream")), (2, with_props)]
    # over AMQP 0-9-1: the AMQP 1.0 sections as properties and body, as RabbitMQ converts them
    ch.basic_qos(0, 10, False)
    got = []
    ch.basic_consume("s", callback=got.append, arguments={"x-stream-offset": "first"})
    wait_for(lambda: conn.drain_events(timeout=0.2) or len(got) >= 3, 5, interval=0)
    # (py-amqp gives a text/plain utf-8 body as str)
    assert [m.body for m in got] == [b"from-amqp", b"from-stream", "with-props"]
    assert got[1].headers == {"x-stream-offset": 1}
    m = got[2]
    pr = m.properties
    assert pr["application_headers"] == {"my-key": "my-value", "k": 100000, "yes": True,
                                         "x-stream-offset": 2}
    assert [pr[k] for k in ("message_id", "user_id", "reply_to", "correlation_id",
                            "content_type", "content_encoding", "delivery_mode")] == [
        "id-1", "guest", "replies", "corr-1", "text/plain", "utf-8", 2]
    ts = pr["timestamp"]
    assert getattr(ts, "timestamp", lambda: ts)() == 1700000000  # seconds
    conn.close()


def test_a_consumer_far_behind_reads_chunks_from_disk(broker_factory):
    b, port = start(broker_factory, **{"stream.frame_max": "65536"})
    p = opened(port)
    assert create(p, "s") == sr.OK
    assert p.declare_publisher(0, "s") == sr.OK
    body = b"x" * 1000
    n = 9000  # 9 MB: many reads of the consumer's buffer, more than the socket buffers hold
    for i in range(0, n, 50):
        p.publish(0, [(j, sr.amqp10(body + b"%d" % j)) for j in range(i, i + 50)])
    assert len(p.confirms(0, n)) == n
    c = opened(port)
    assert c.subscribe(0, "s", sr.FIRST, credit=5) == sr.OK
    got, chunks = [], 0
    while len(got) < n:
        _, hdr, entries = c.deliver()
        assert hdr["chunk_id"] == len(got)  # in order, none skipped
        got += entries
        chunks += 1
        c.credit(0, 1)  # one chunk at a time, as clients do
    assert got == [sr.amqp10(body + b"%d" % j) for j in range(n)]
    assert chunks >= n * 1000 // 65536  # each Deliver within the tuned frame_max
    # credit for all of it, read only once the subscription is made: the door stops at a
    # full output (the socket's and its own 1 MiB) and goes on as the client reads
    small = socket.socket()
    small.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # no autotuning: it fills
    small.connect(("127.0.0.1", port))
    c2 = sr.StreamClient(port, sock=small)
    c2.connect()
    assert c2.subscribe(0, "s", sr.FIRST, credit=60000) == sr.OK
    got2 = [e for _, e in c2.messages(n)]
    assert got2 == got
    b.assert_alive()


def test_permissions_apply_as_on_the_other_doors(broker_factory):
    b, port = start(broker_factory, **{"user.bob": "secret"})
    api = Api(b)
    assert api.put("/api/vhosts/other", {})[0] in (201, 204)  # guest gets permissions on it
    assert api.put("/api/permissions/%2F/bob", {"configure": "^$", "write": "^$",
                                                "read": ".*"})[0] in (201, 204)
    c = sr.StreamClient(port)
    assert c.peer_properties()[0] == sr.OK and c.sasl_handshake()[0] == sr.OK
    assert c.sasl_authenticate("bob", "secret") == sr.OK
    c.tune()
    assert c.open("other")[0] == sr.VIRTUAL_HOST_ACCESS_FAILURE  # no permission entry there
    assert c.sees_eof()
    c = sr.StreamClient(port)
    c.connect("bob", "secret", "/")
    corr = c.request(sr.CREATE, sr.s16("s") + sr.kvmap({}))
    assert c.response(sr.CREATE, corr)[0] == sr.ACCESS_REFUSED  # configure refused
    corr = c.request(sr.DECLARE_PUBLISHER, struct.pack(">B", 1) + sr.s16(None) + sr.s16("s"))
    assert c.response(sr.DECLARE_PUBLISHER, corr)[0] == sr.ACCESS_REFUSED  # write refused
    c.close()
    # the stream exists: bob may read it, not write it; carol the other way round
    g = opened(port)
    assert create(g, "s") == sr.OK
    assert api.put("/api/users/carol", {"password": "pw", "tags": ""})[0] in (201, 204)
    assert api.put("/api/permissions/%2F/carol", {"configure": "^$", "write": ".*",
                                                  "read": "^$"})[0] in (201, 204)
    c = opened(port, user="bob", password="secret")
    assert c.declare_publisher(1, "s") == sr.ACCESS_REFUSED
    assert c.subscribe(1, "s", sr.FIRST) == sr.OK
    c.store_offset("s", "r", 5)
    assert c.query_offset("s", "r") == (sr.OK, 5)
    k = opened(port, user="carol", password="pw")
    assert k.subscribe(1, "s", sr.FIRST) == sr.ACCESS_REFUSED
    assert k.query_offset("s", "r")[0] == sr.ACCESS_REFUSED
    assert k.stream_stats("s")[0] == sr.ACCESS_REFUSED
    k.store_offset("s", "r", 99)  # refused: logged, no answer
    assert c.query_offset("s", "r") == (sr.OK, 5)
    assert k.declare_publisher(1, "s") == sr.OK
    k.publish(1, [(1, sr.amqp10(b"ok"))])
    assert k.confirms(1, 1) == [1]
    assert c.messages(1) == [(0, sr.amqp10(b"ok"))]
    # write taken away: the next Publish is refused (PublishError ACCESS_REFUSED)
    assert api.put("/api/permissions/%2F/carol", {"configure": "^$", "write": "^$",
                                                  "read": "^$"})[0] in (201, 204)
    k.publish(1, [(2, sr.amqp10(b"no"))])
    assert k.publish_errors() == (1, [(2, sr.ACCESS_REFUSED)])


def test_bad_password_and_mechanisms(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("guest", "wrong") == sr.AUTHENTICATION_FAILURE
    assert c.sees_eof()
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("nobody", "guest") == sr.AUTHENTICATION_FAILURE
    assert c.sees_eof()
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("", "", mechanism="AMQPLAIN", data=b"") == \
        sr.SASL_MECHANISM_NOT_SUPPORTED
    assert c.sees_eof()
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("", "", mechanism="EXTERNAL", data=b"") == \
        sr.SASL_MECHANISM_NOT_SUPPORTED  # no certificate: EXTERNAL is not offered
    assert c.sees_eof()
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("", "", data=b"no-nul-here") == sr.SASL_ERROR
    assert c.sees_eof()
    assert open(b.log_path, "rb").read().count(b"login refused") == 5
    c = sr.StreamClient(port)
    c.connect()
    c.close()


def test_unknown_vhost(broker_factory):
    b, port = start(broker_factory)
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake(), c.sasl_authenticate("guest", "guest"), c.tune()
    code, props = c.open("no-such-vhost")
    assert code == sr.VIRTUAL_HOST_ACCESS_FAILURE and props == {}
    assert c.sees_eof()


def test_frame_max_is_8192_before_open_and_tuned_after(broker_factory):
    b, port = start(broker_factory, **{"stream.frame_max": "65536"})
    # a frame of exactly 8192 octets before Open is taken
    c = sr.StreamClient(port)
    pad = 8192 - 4 - 4 - 4 - 2 - 2 - len("pad")
    code, _ = c.peer_properties({"pad": "x" * pad})
    assert code == sr.OK
    # one octet more is refused from its size alone, before any body is sent
    c = sr.StreamClient(port)
    c.peer_properties()
    c.send_raw(struct.pack(">I", 8193))
    assert c.server_close()[0] == sr.FRAME_TOO_LARGE
    assert c.sees_eof()
    # after Open: the tuned limit (the server's 65536, the client asked for more)
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake(), c.sasl_authenticate("guest", "guest")
    assert c.tune(frame_max=1 << 20) == (65536, 60)
    assert c.open()[0] == sr.OK
    names = ["s%05d" % i for i in range(2000)]  # a 16 KiB Metadata request
    assert len(c.metadata(*names)[1]) == 2000
    c.send_raw(struct.pack(">I", 65537))
    assert c.server_close()[0] == sr.FRAME_TOO_LARGE
    assert c.sees_eof()
    b.assert_alive()


def test_malformed_frames_close_only_their_connection(broker_factory):
    b, port = start(broker_factory)
    good = sr.StreamClient(port)
    good.connect()
    bad = [
        struct.pack(">I", 2) + b"\0\0",                      # no room for key and version
        struct.pack(">IHH", 4, 0x7777, 1),                   # unknown key
        struct.pack(">IHH", 4, sr.PEER_PROPERTIES, 9),       # unknown version
        struct.pack(">IHHI", 12, sr.PEER_PROPERTIES, 1, 1) + struct.pack(">i", 5),  # truncated
    ]
    for frame in bad:
        c = sr.StreamClient(port)
        c.send_raw(frame)
        assert c.server_close()[0] == sr.UNKNOWN_FRAME
        assert c.sees_eof()
    # a command out of order (Open before the login)
    c = sr.StreamClient(port)
    c.request(sr.OPEN, sr.s16("/"))
    assert c.server_close()[0] == sr.UNKNOWN_FRAME
    assert c.sees_eof()
    # garbage after the handshake, on an open connection
    c = sr.StreamClient(port)
    c.connect()
    c.send_raw(struct.pack(">IHH", 4, 0x0008, 1))  # Deliver: only the server sends it
    assert c.server_close()[0] == sr.UNKNOWN_FRAME
    assert c.sees_eof()
    # a peer that goes away mid-frame
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(struct.pack(">IHH", 100, sr.PEER_PROPERTIES, 1) + b"\0\0")
    s.close()
    assert good.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST  # the other one serves on
    b.assert_alive()


def test_heartbeats_both_ways(broker_factory):
    b, port = start(broker_factory, **{"stream.heartbeat": "1"})
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake(), c.sasl_authenticate("guest", "guest")
    assert c.tune(heartbeat=1) == (1048576, 1)
    assert c.open()[0] == sr.OK
    # the server's heartbeat comes while the client is silent
    c.s.settimeout(5)
    assert c.frame()[0] == sr.HEARTBEAT
    # a client that says nothing for two intervals is dropped (RabbitMQ drops the socket)
    assert c.sees_eof()
    wait_for(lambda: b"missed heartbeats" in open(b.log_path, "rb").read(), 5)
    # a client that sends heartbeats stays
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake(), c.sasl_authenticate("guest", "guest")
    c.tune(heartbeat=1)
    assert c.open()[0] == sr.OK
    seen = 0
    while seen < 4:  # about two seconds: past the two-interval limit
        k = c.frame()[0]
        assert k == sr.HEARTBEAT
        c.send(sr.HEARTBEAT)
        seen += 1
    assert c.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    c.close()


def test_handshake_timeout(broker_factory):
    b, port = start(broker_factory, handshake_timeout="300")
    c = sr.StreamClient(port)
    c.peer_properties()
    assert c.sees_eof()  # no SaslHandshake in time
    wait_for(lambda: b"handshake timeout" in open(b.log_path, "rb").read(), 5)


# A deleted vhost's or user's connections, and shutdown: test_stream_server_close.py (the
# socket ends with no Close frame, as RabbitMQ's reader ends it).


def test_tls_listener_and_external(broker_factory, tmp_path):
    from test_tls import make_ca, make_cert
    d = tmp_path / "certs"
    d.mkdir()
    make_ca(d, "ca", "Sluice Test CA")
    make_cert(d, "server", "ca", "/CN=localhost", san="IP:127.0.0.1,DNS:localhost")
    make_cert(d, "client", "ca", "/CN=tlsuser/O=Sluice Tests")
    b = broker_factory(config={
        "listeners.stream.ssl": "0",
        "ssl_options.cacertfile": str(d / "ca.pem"),
        "ssl_options.certfile": str(d / "server.pem"),
        "ssl_options.keyfile": str(d / "server.key"),
        "ssl_options.verify": "verify_peer",
        "auth_mechanisms.1": "PLAIN",
        "auth_mechanisms.2": "EXTERNAL",
        "ssl_cert_login_from": "common_name",
        "stream.advertised_tls_port": "5551",
    })
    port = port_of(b, STREAM_TLS_RE)
    assert b"listening stream=" not in open(b.log_path, "rb").read()
    api = Api(b)
    assert api.put("/api/users/tlsuser", {"tags": ""})[0] == 201
    assert api.put("/api/permissions/%2F/tlsuser",
                   {"configure": ".*", "write": ".*", "read": ".*"})[0] == 201

    def tls_client(cert=None):
        ctx = ssl.create_default_context(cafile=str(d / "ca.pem"))
        if cert:
            ctx.load_cert_chain(str(d / (cert + ".pem")), str(d / (cert + ".key")))
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        return sr.StreamClient(port, sock=ctx.wrap_socket(raw, server_hostname="localhost"))

    c = tls_client()
    assert c.peer_properties()[0] == sr.OK
    assert c.sasl_handshake()[1] == ["PLAIN"]  # no certificate: no EXTERNAL
    assert c.sasl_authenticate("guest", "guest") == sr.OK
    c.tune()
    assert c.open()[1]["advertised_port"] == "5551"
    c.close()
    c = tls_client("client")
    c.peer_properties()
    assert c.sasl_handshake()[1] == ["PLAIN", "EXTERNAL"]
    assert c.sasl_authenticate("", "", mechanism="EXTERNAL", data=b"") == sr.OK
    c.tune()
    assert c.open()[0] == sr.OK
    assert c.close_request() == sr.OK
    c.close()
    # plain bytes to the TLS port: the handshake fails, logged, the port serves on
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(struct.pack(">IHH", 4, sr.PEER_PROPERTIES, 1))
    assert sr.StreamClient(port, sock=s).sees_eof()
    c = tls_client()
    c.connect()
    c.close()


def test_a_client_that_does_not_read_is_held_then_served_whole(broker_factory):
    """More answers than STREAM_OUT_MAX (1 MiB) asked for without reading: the door stops
    reading that client, the rest of the node goes on, and once the client reads every answer
    comes, in order (the frames held in the door's feeder meanwhile too: with
    stream_conn_resume a no-op this test fails)."""
    import threading
    b, port = start(broker_factory)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # little room in the kernel
    s.connect(("127.0.0.1", port))
    c = sr.StreamClient(port, timeout=20, sock=s)
    c.connect()
    names = ["stream-%04d" % i for i in range(100)]  # ~2 KiB answers
    body = struct.pack(">i", len(names)) + b"".join(sr.s16(n) for n in names)
    n = 4000  # ~8 MiB of answers: past the door's 1 MiB and the socket's own buffers
    frames = b"".join(struct.pack(">IHHI", 8 + len(body), sr.METADATA, 1, i + 1) + body
                      for i in range(n))
    sender = threading.Thread(target=c.send_raw, args=(frames,), daemon=True)
    sender.start()
    other = sr.StreamClient(port)
    other.connect()
    assert other.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST  # the node serves on
    for i in range(n):
        r = c.expect(sr.METADATA | sr.RESPONSE)
        assert r.take(">I") == i + 1
    sender.join(20)
    assert not sender.is_alive()
    assert c.close_request() == sr.OK


def test_slow_password_hashes_are_checked_off_the_loop(broker_factory):
    """Argon2id users: the check runs on the verifier's thread; the connection waits for it
    (what the client sent meanwhile is handled after it) and other clients are served."""
    b, port = start(broker_factory, **{"password_hashing_module": "sluice_password_hashing_argon2id",
                                       "user.carol": "s3cret"})
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    # the login and the rest of the handshake in one write: Tune's answer and Open wait behind
    # the check
    auth = struct.pack(">I", 10) + sr.s16("PLAIN") + sr.b32(b"\0carol\0s3cret")
    tune = struct.pack(">II", 1048576, 0)
    opn = struct.pack(">I", 11) + sr.s16("/")
    c.send_raw(struct.pack(">IHH", 4 + len(auth), sr.SASL_AUTHENTICATE, 1) + auth
               + struct.pack(">IHH", 4 + len(tune), sr.TUNE, 1) + tune
               + struct.pack(">IHH", 4 + len(opn), sr.OPEN, 1) + opn)
    other = sr.StreamClient(port)
    other.connect()
    assert c.response(sr.SASL_AUTHENTICATE, 10)[0] == sr.OK
    r = c.expect(sr.TUNE)
    assert (r.take(">I"), r.take(">I")) == (1048576, 60)
    assert c.response(sr.OPEN, 11)[0] == sr.OK
    c.corr = 11
    assert c.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    c.close()
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    assert c.sasl_authenticate("carol", "wrong") == sr.AUTHENTICATION_FAILURE
    assert c.sees_eof()
    # a client that goes away while its check runs
    c = sr.StreamClient(port)
    c.peer_properties(), c.sasl_handshake()
    c.request(sr.SASL_AUTHENTICATE, sr.s16("PLAIN") + sr.b32(b"\0carol\0s3cret"))
    c.close()
    assert other.metadata("x")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    b.assert_alive()

