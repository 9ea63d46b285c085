"""MSMQ management over HTTP: R_QMMgmtAction, R_QMMgmtGetInfo, format names, the MC-MQAC
queue view, journals, TIDY (reference/msmq.md sections 3-4, 7.4, 10)."""

import os
import re
import time
import urllib.parse

import amqp
import pytest

from helpers import uname, wait_for
from test_mgmt import Api, fmt

OK = ("0x00000000", "MQ_OK")
INVALID = ("0xC00E0006", "MQ_ERROR_INVALID_PARAMETER")
ILLEGAL_PROPID = ("0xC00E0039", "MQ_ERROR_ILLEGAL_PROPID")
NOT_FOUND = ("0xC00E0003", "MQ_ERROR_QUEUE_NOT_FOUND")
ILLEGAL_FMT = ("0xC00E001E", "MQ_ERROR_ILLEGAL_FORMATNAME")


@pytest.fixture
def api(broker):
    return Api(broker)


def hr(j):
    return (j["hresult"], j["hresult_name"])


def connected(api):
    s, j, _ = api.info("MACHINE", "PROPID_MGMT_MSMQ_CONNECTED")
    assert s == 200, j
    return j["values"]["PROPID_MGMT_MSMQ_CONNECTED"]


# ---------------------------------------------------------------------------
# R_QMMgmtAction
# ---------------------------------------------------------------------------
def test_connect_disconnect_any_case_local_clients_keep_working(api, broker):
    assert connected(api) == "CONNECTED"
    s, j, _ = api.action("MACHINE", "DisConnect")
    assert s == 200 and hr(j) == OK and j["connected"] == "DISCONNECTED"
    assert connected(api) == "DISCONNECTED"
    broker.assert_alive()  # offline stops node-to-node links only
    s, j, _ = api.action("machine", "connect")
    assert s == 200 and hr(j) == OK
    assert connected(api) == "CONNECTED"
    s, j, _ = api.action("MACHINE", "DISCONNECT")
    assert hr(j) == OK and connected(api) == "DISCONNECTED"
    s, j, _ = api.action("MACHINE", "CONNECT")
    assert hr(j) == OK and connected(api) == "CONNECTED"


@pytest.mark.parametrize("obj", ["SESSION", "session=1", "", "QUEUES", "MACHINEX"])
def test_session_object_refused_without_change(api, obj):
    s, j, _ = api.action(obj, "DISCONNECT")
    assert 400 <= s < 500 and hr(j) == INVALID and "reason" in j
    assert connected(api) == "CONNECTED", "a refused action changed the node"


@pytest.mark.parametrize("act", ["REBOOT", "", "CONNECTX", "PURGE", "delmsg"])
def test_unknown_action_refused(api, act):
    s, j, _ = api.action("MACHINE", act)
    assert 400 <= s < 500 and hr(j) == INVALID


def test_action_on_wrong_kind_of_object(api):
    q = uname("act")
    api.declare(q)
    api.publish(q, "m")
    for a in ("PAUSE", "resume", "Eod_Resend"):
        s, j, _ = api.action("MACHINE", a)
        assert 400 <= s < 500 and hr(j) == INVALID, a
        # a local queue is not an outgoing queue (node-to-node transfer does not exist yet)
        s, j, _ = api.action(fmt(q), a)
        assert 400 <= s < 500 and hr(j) == INVALID, a
    for a in ("CONNECT", "DISCONNECT", "TIDY"):
        s, j, _ = api.action(fmt(q), a)
        assert 400 <= s < 500 and hr(j) == INVALID, a
    assert connected(api) == "CONNECTED"
    assert api.queue(q)["messages"] == 1
    s, j, _ = api.action("QUEUE=DIRECT=OS:.\\private$\\" + uname("none"), "PAUSE")
    assert 400 <= s < 500 and hr(j) == NOT_FOUND
    s, j, _ = api.action("QUEUE=PUBLIC=1234", "PAUSE")
    assert 400 <= s < 500 and hr(j) == ILLEGAL_FMT


def test_action_body_must_name_object_and_action(api):
    s, j, _ = api.post("/api/msmq/action", {"object": "MACHINE"})
    assert s == 400 and hr(j) == INVALID
    s, j, _ = api.post("/api/msmq/action", {"object": 1, "action": "TIDY"})
    assert s == 400 and hr(j) == INVALID


def test_tidy_reports_and_loses_nothing(api, ch):
    q = uname("tidy")
    ch.queue_declare(q, durable=True, auto_delete=False)
    for i in range(50):
        ch.basic_publish(amqp.Message(b"x" * 1000, delivery_mode=2), exchange="",
                         routing_key=q)
    for i in range(20):
        m = None
        while m is None:
            m = ch.basic_get(q, no_ack=False)
        ch.basic_ack(m.delivery_tag)
    wait_for(lambda: api.queue(q)["messages"] == 30)
    s, j, _ = api.action("MACHINE", "tidy")
    assert s == 200 and hr(j) == OK
    assert isinstance(j["segments_freed"], int) and isinstance(j["bytes_freed"], int)
    assert api.queue(q)["messages"] == 30, "TIDY deleted messages"
    bodies = []
    while True:
        m = ch.basic_get(q, no_ack=True)
        if m is None:
            break
        bodies.append(bytes(m.body))
    assert len(bodies) == 30 and all(b == b"x" * 1000 for b in bodies)


# ---------------------------------------------------------------------------
# R_QMMgmtGetInfo
# ---------------------------------------------------------------------------
def test_machine_properties(api):
    q = uname("mp")
    api.declare(q)
    api.publish(q, "12345")
    s, j, _ = api.info("MACHINE", "ACTIVEQUEUES", "PROPID_MGMT_MSMQ_PRIVATEQ", 4, "TYPE",
                       "BYTES_IN_ALL_QUEUES", "DSSERVER")
    assert s == 200 and hr(j) == OK
    v = j["values"]
    # a queue holding messages but opened by nobody is not active (MS-MQDMPR Queue.Active)
    assert not any(f.endswith("\\private$\\" + q) for f in v["PROPID_MGMT_MSMQ_ACTIVEQUEUES"])
    assert any(p.endswith("\\private$\\" + q) for p in v["PROPID_MGMT_MSMQ_PRIVATEQ"])
    assert not any("sluice.system" in p for p in v["PROPID_MGMT_MSMQ_PRIVATEQ"])
    assert not any("SYSTEM$" in f.upper() for f in v["PROPID_MGMT_MSMQ_ACTIVEQUEUES"])
    assert v["PROPID_MGMT_MSMQ_CONNECTED"] == "CONNECTED"
    assert v["PROPID_MGMT_MSMQ_BYTES_IN_ALL_QUEUES"] >= 5
    assert "Sluice" in v["PROPID_MGMT_MSMQ_TYPE"]
    assert v["PROPID_MGMT_MSMQ_DSSERVER"] is None
    types = {p["name"]: p["vt"] for p in j["properties"]}
    assert types["PROPID_MGMT_MSMQ_ACTIVEQUEUES"] == "VT_LPWSTR|VT_VECTOR"
    assert types["PROPID_MGMT_MSMQ_BYTES_IN_ALL_QUEUES"] == "VT_I8"
    assert [p["id"] for p in j["properties"]] == [1, 2, 4, 5, 6, 3]


def test_queue_properties_exact_strings(api):
    q = uname("qp")
    api.declare(q)
    api.publish(q, "abc")
    s, j, _ = api.info(fmt(q), "PATHNAME", "FORMATNAME", "TYPE", "LOCATION", "XACT", "FOREIGN",
                       "MESSAGE_COUNT", "BYTES_IN_QUEUE", "JOURNAL_MESSAGE_COUNT",
                       "BYTES_IN_JOURNAL", "STATE", "SUBQUEUE_COUNT", "SUBQUEUE_NAMES")
    assert s == 200 and hr(j) == OK
    v = {k.replace("PROPID_MGMT_QUEUE_", ""): x for k, x in j["values"].items()}
    assert v["PATHNAME"].endswith("\\private$\\" + q)
    assert v["FORMATNAME"].startswith("DIRECT=OS:") and v["FORMATNAME"].endswith(
        "\\private$\\" + q)
    assert v["TYPE"] == "PRIVATE" and v["LOCATION"] == "LOCAL" and v["XACT"] == "NO"
    assert v["FOREIGN"] == "NO" and v["STATE"] == "LOCAL CONNECTION"
    assert v["MESSAGE_COUNT"] == 1 and v["BYTES_IN_QUEUE"] == 3
    assert v["JOURNAL_MESSAGE_COUNT"] == 0 and v["BYTES_IN_JOURNAL"] == 0
    assert v["SUBQUEUE_COUNT"] == 0 and v["SUBQUEUE_NAMES"] == []
    # numbers name the same properties
    s, j2, _ = api.info(fmt(q), 7, 11)
    assert j2["values"] == {"PROPID_MGMT_QUEUE_MESSAGE_COUNT": 1,
                            "PROPID_MGMT_QUEUE_STATE": "LOCAL CONNECTION"}
    # the formatname it reports resolves back to the queue
    s, j3, _ = api.info("QUEUE=" + v["FORMATNAME"], "MESSAGE_COUNT")
    assert s == 200 and j3["values"]["PROPID_MGMT_QUEUE_MESSAGE_COUNT"] == 1


def test_message_count_includes_locked_and_purge_pending(api, ch):
    q = uname("mc")
    api.declare(q)
    for i in range(3):
        api.publish(q, "m%d" % i)
    held = ch.basic_get(q, no_ack=False)
    assert held is not None

    def count():
        s, j, _ = api.info(fmt(q), "MESSAGE_COUNT")
        assert s == 200
        return j["values"]["PROPID_MGMT_QUEUE_MESSAGE_COUNT"]

    assert count() == 3  # Locked counts
    api.delete(Api.q(q) + "/contents")
    assert count() == 1  # PurgePending counts
    ch.basic_ack(held.delivery_tag)
    wait_for(lambda: count() == 0)


def test_wrong_table_session_unknown_queue_no_values(api):
    q = uname("wt")
    api.declare(q)
    for obj, prop in (("MACHINE", "MESSAGE_COUNT"), ("MACHINE", "PROPID_MGMT_QUEUE_STATE"),
                      (fmt(q), "CONNECTED"), (fmt(q), "PROPID_MGMT_MSMQ_PRIVATEQ"),
                      (fmt(q), "99"), ("MACHINE", "7"), (fmt(q), "NOSUCHPROP")):
        s, j, _ = api.info(obj, "PATHNAME" if obj != "MACHINE" else "CONNECTED", prop)
        assert 400 <= s < 500 and hr(j) == ILLEGAL_PROPID, (obj, prop)
        assert "values" not in j and "properties" not in j
    s, j, _ = api.info("SESSION", "CONNECTED")
    assert 400 <= s < 500 and hr(j) == INVALID and "values" not in j
    s, j, _ = api.info(fmt(uname("missing")), "MESSAGE_COUNT")
    assert s == 404 and hr(j) == NOT_FOUND and "values" not in j
    s, j, _ = api.info("QUEUE=DIRECT=HTTP://x/msmq/q", "MESSAGE_COUNT")
    assert 400 <= s < 500 and hr(j) == ILLEGAL_FMT
    s, j, _ = api.info("MACHINE")
    assert 400 <= s < 500 and hr(j) == INVALID
    s, j, _ = api.get("/api/msmq/info?props=CONNECTED")
    assert 400 <= s < 500 and hr(j) == INVALID
    s, j, _ = api.info("MACHINE", *(["CONNECTED"] * 129))
    assert 400 <= s < 500 and hr(j) == INVALID


def test_info_by_post_json(api):
    s, j, _ = api.post("/api/msmq/info", {"object": "MACHINE", "props": [4, "TYPE"]})
    assert s == 200 and hr(j) == OK and j["values"]["PROPID_MGMT_MSMQ_CONNECTED"] == "CONNECTED"


def test_format_names(api, broker):
    q = uname("Fmt")
    api.declare(q)
    api.publish(q, "m")
    lid = api.peek(q)[0]["lookup_id"]
    s, _, _ = api.post(Api.q(q) + "/move", {"destination": q + ";poison", "lookup_id": lid})
    assert s == 200
    for name, expect in (
            ("DIRECT=OS:.\\private$\\" + q, 0),
            ("direct=os:LOCALHOST\\PRIVATE$\\" + q.lower(), 0),
            ("FormatName:DIRECT=OS:.\\private$\\" + q, 0),
            ("DIRECT=TCP:127.0.0.1\\private$\\" + q, 0),
            ("DIRECT=OS:.\\private$\\" + q + ";poison", 1),
            ("DIRECT=OS:.\\private$\\" + q + ";POISON", 1),
            ("DIRECT=OS:.\\private$\\" + q + ";journal", None)):
        s, j, _ = api.info("QUEUE=" + name, "MESSAGE_COUNT")
        if expect is None:
            assert s == 404 and hr(j) == NOT_FOUND, name  # no journal kept
        else:
            assert s == 200, (name, j)
            assert j["values"]["PROPID_MGMT_QUEUE_MESSAGE_COUNT"] == expect, name
    s, j, _ = api.info("QUEUE=DIRECT=OS:.\\SYSTEM$;DEADLETTER", "TYPE", "PATHNAME")
    assert s == 200 and j["values"]["PROPID_MGMT_QUEUE_TYPE"] == "MACHINE"
    s, j, _ = api.info("QUEUE=DIRECT=OS:.\\system$;deadxact", "MESSAGE_COUNT")
    assert s == 200
    # another machine, never sent to: no outgoing queue for it (MSDN: MQ_ERROR_QUEUE_NOT_ACTIVE)
    s, j, _ = api.info("QUEUE=DIRECT=TCP:10.1.2.3\\private$\\" + q, "MESSAGE_COUNT")
    assert 400 <= s < 500 and hr(j) == ("0xC00E0004", "MQ_ERROR_QUEUE_NOT_ACTIVE")
    for bad in ("DIRECT=XYZ:.\\private$\\q", "DIRECT=OS:", "PRIVATE=abc\\1",
                "DIRECT=OS:.\\private$\\", "DIRECT=OS:.\\private$\\q;"):
        s, j, _ = api.info("QUEUE=" + bad, "MESSAGE_COUNT")
        assert 400 <= s < 500 and hr(j) == ILLEGAL_FMT, bad


def test_a_queues_format_name_with_its_vhost_as_the_console_asks(api):
    """The console's queue page asks /api/msmq/info for the queue's own FormatName (which names
    the vhost: `<vhost>/<queue>`) and passes ?vhost= too: that resolves in any vhost (it was
    404 for every queue of a vhost other than "/")."""
    vh = uname("fv")
    assert api.put("/api/vhosts/" + vh)[0] in (201, 204)  # guest gets full permissions
    try:
        for name in ("q", vh + "/inner"):  # also a queue whose own name starts as the vhost's
            s, j, _ = api.put(Api.q(name, vh), {"durable": False})
            assert s in (201, 204), (s, j)
            s, j, _ = api.post("/api/exchanges/%s/amq.default/publish" % urllib.parse.quote(
                vh, safe=""), {"routing_key": name, "payload": name, "payload_encoding": "string",
                               "properties": {}})
            assert s == 200 and j["routed"], (s, j)
            fn = api.queue(name, vh)["FormatName"]
            assert fn.endswith("\\private$\\%s/%s" % (vh, name)), fn
            for hint in (vh, None):
                s, j, _ = api.info("QUEUE=" + fn, "MESSAGE_COUNT", "BYTES_IN_QUEUE", vhost=hint)
                assert s == 200 and hr(j) == OK, (name, hint, s, j)
                assert j["values"]["PROPID_MGMT_QUEUE_MESSAGE_COUNT"] == 1, (name, hint, j)
                assert j["values"]["PROPID_MGMT_QUEUE_BYTES_IN_QUEUE"] == len(name), (name, j)
        # with the hint, the bare queue name resolves in that vhost as before
        s, j, _ = api.info("QUEUE=DIRECT=OS:.\\private$\\q", "MESSAGE_COUNT", vhost=vh)
        assert s == 200 and j["values"]["PROPID_MGMT_QUEUE_MESSAGE_COUNT"] == 1, j
        # a hint of another vhost does not find it
        s, j, _ = api.info("QUEUE=DIRECT=OS:.\\private$\\%s/q" % vh, "MESSAGE_COUNT", vhost="/")
        assert s == 404 and hr(j) == NOT_FOUND, j
    finally:
        api.delete("/api/vhosts/" + urllib.parse.quote(vh, safe=""))


# ---------------------------------------------------------------------------
# MC-MQAC view and journal
# ---------------------------------------------------------------------------
def test_management_object_view(api):
    q = uname("view")
    api.declare(q)
    api.publish(q, "hello")
    v = api.queue(q)
    assert v["ForeignStatus"] == {"value": 1, "name": "MQ_STATUS_NOT_FOREIGN"}
    assert v["QueueType"] == {"value": 1, "name": "MQ_TYPE_PRIVATE"}
    assert v["IsLocal"] is True
    assert v["TransactionalStatus"] == {"value": 1, "name": "MQ_XACT_STATUS_NOT_XACT"}
    assert v["MessageCount"] == 1 and v["BytesInQueue"] == 5 and v["JournalMessageCount"] == 0
    sysq = api.queue("sluice.system.deadletter")
    assert sysq["QueueType"] == {"value": 2, "name": "MQ_TYPE_MACHINE"}
    assert sysq["kind"] == "system"


def test_journal_keeps_consumed_messages(api, ch):
    q = uname("jq")
    api.declare(q, arguments={"x-journal": True})
    for i in range(3):
        api.publish(q, "j%d" % i)
    m = ch.basic_get(q, no_ack=False)
    ch.basic_ack(m.delivery_tag)
    ch.basic_get(q, no_ack=True)
    api.post(Api.q(q) + "/get", {"count": 1, "ackmode": "ack_requeue_false"})

    def jcount():
        s, j, _ = api.info(fmt(q), "JOURNAL_MESSAGE_COUNT", "BYTES_IN_JOURNAL")
        return j["values"]["PROPID_MGMT_QUEUE_JOURNAL_MESSAGE_COUNT"]

    wait_for(lambda: jcount() == 3, message="journal holds the 3 consumed messages")
    assert api.queue(q)["JournalMessageCount"] == 3 and api.queue(q)["messages"] == 0
    assert [m["payload"] for m in api.peek(q + ";journal")] == ["j0", "j1", "j2"]
    s, j, _ = api.info("QUEUE=DIRECT=OS:.\\private$\\%s;JOURNAL" % q, "MESSAGE_COUNT")
    assert j["values"]["PROPID_MGMT_QUEUE_MESSAGE_COUNT"] == 3
    # the journal is not a subqueue in MSMQ's sense
    s, j, _ = api.info(fmt(q), "SUBQUEUE_COUNT")
    assert j["values"]["PROPID_MGMT_QUEUE_SUBQUEUE_COUNT"] == 0
    # and it is read-only: never a move destination
    api.publish(q, "x")
    lid = api.peek(q)[0]["lookup_id"]
    s, j, _ = api.post(Api.q(q) + "/move", {"destination": q + ";journal", "lookup_id": lid})
    assert 400 <= s < 500 and hr(j) == INVALID
    s, j, _ = api.delete(Api.q(q + ";journal") + "/contents")
    assert s == 200 and j["message_count"] == 3


def test_tidy_frees_disk_and_keeps_live_messages(broker_factory):
    """With small store segments, consuming most messages leaves whole segments dead: TIDY
    deletes their files (the data directory shrinks) and every live message survives, also
    across a restart."""
    b = broker_factory(config={"segment_size": "64k", "tidy_interval": "0", "reap_interval": "0"})
    api = Api(b)
    c = b.amqp()
    ch = c.channel()
    q = uname("tidyd")
    ch.queue_declare(q, durable=True, auto_delete=False)
    ch.confirm_select()
    for i in range(400):
        ch.basic_publish(amqp.Message(b"%04d" % i + b"x" * 1000, delivery_mode=2), exchange="",
                         routing_key=q)
    for _ in range(350):
        m = ch.basic_get(q, no_ack=False)
        ch.basic_ack(m.delivery_tag)
    msgs = os.path.join(b.data_dir, "msgs")

    def disk():
        return sum(os.path.getsize(os.path.join(msgs, f)) for f in os.listdir(msgs))

    before = disk()
    s, j, _ = api.action("MACHINE", "TIDY")
    assert s == 200 and hr(j) == OK
    assert j["segments_freed"] >= 3 and j["bytes_freed"] > 150000
    assert disk() <= before - j["bytes_freed"] + 70000  # allows for what was appended since
    assert api.queue(q)["messages"] == 50
    c.close()
    assert b.terminate() == 0
    b2 = broker_factory(data_dir=b.data_dir, config={"segment_size": "64k", "reap_interval": "0"})
    ch2 = b2.amqp().channel()
    bodies = []
    while True:
        m = ch2.basic_get(q, no_ack=True)
        if m is None:
            break
        bodies.append(bytes(m.body)[:4])
    assert bodies == [b"%04d" % i for i in range(350, 400)]


def test_tidy_compacts_behind_an_old_message(broker_factory):
    """One old message keeps its segment, and every newer segment whose acks depend on it,
    until TIDY copies it forward (issue 13 item 9): then the store shrinks to about the
    newest segments, and the message is still there, the same, after a kill -9."""
    cfg = {"segment_size": "64k", "tidy_interval": "0", "reap_interval": "0"}
    b = broker_factory(config=cfg)
    api = Api(b)
    c = b.amqp()
    ch = c.channel()
    old, traffic = uname("old"), uname("traffic")
    ch.queue_declare(old, durable=True, auto_delete=False)
    ch.queue_declare(traffic, durable=True, auto_delete=False)
    ch.confirm_select()
    ch.basic_publish(amqp.Message(b"o" * 100, delivery_mode=2, message_id="the-old-one"),
                     exchange="", routing_key=old)
    for i in range(1200):
        ch.basic_publish(amqp.Message(b"t" * 1000, delivery_mode=2), exchange="",
                         routing_key=traffic)
        m = ch.basic_get(traffic, no_ack=False)
        ch.basic_ack(m.delivery_tag)
    s, j, _ = api.action("MACHINE", "TIDY")
    assert s == 200 and hr(j) == OK
    assert j["segments_compacted"] >= 1 and j["records_copied"] >= 2, j
    assert j["store_bytes_before"] > 1000000, j
    assert j["store_bytes_after"] * 3 < j["store_bytes_before"], j
    assert j["segments_freed"] >= 10 and j["segments_freed_between"] >= 0, j
    assert isinstance(j["tidy_ms"], int) and j["bytes_copied"] > 100, j
    assert api.queue(old)["messages"] == 1
    c.close()
    b.kill9()
    b2 = broker_factory(data_dir=b.data_dir, config=cfg)
    ch2 = b2.amqp().channel()
    m = ch2.basic_get(old, no_ack=True)
    assert m is not None and bytes(m.body) == b"o" * 100
    assert m.properties.get("message_id") == "the-old-one"
    assert ch2.basic_get(old, no_ack=True) is None
    assert ch2.basic_get(traffic, no_ack=True) is None


# 10,000 publishes, each waiting for its confirm, and as many gets: 17-19 s on a machine
# shared with other work, more with both CPUs busy (beside stress-ng --cpu 2 it hit the 20 s
# hang guard), so the guard is wider for it.
@pytest.mark.test_timeout(120)
def test_tidy_follows_what_is_written(broker_factory):
    """Consumed messages' segments are given back while traffic goes on, not only every
    tidy_interval (6 h, MSMQ's clean-up period): a TIDY starts by itself each time the store
    has taken tidy_after_written bytes since the last one. Steady traffic through a queue
    (published, consumed, acked) then keeps the data directory small: without it 10 MB of
    acked messages stayed on disk until the timer."""
    from pathlib import Path
    cfg = {"segment_size": "64k", "tidy_interval": "0", "tidy_after_written": "1M",
           "reap_interval": "0"}
    b = broker_factory(config=cfg)
    ch = b.amqp().channel()
    q = uname("flow")
    ch.queue_declare(q, durable=True, auto_delete=False)
    ch.confirm_select()

    def store_bytes():
        return sum(p.stat().st_size for p in (Path(b.data_dir) / "msgs").glob("*.seg"))

    for i in range(10000):  # ~10 MB through the queue, none left in it
        ch.basic_publish(amqp.Message(b"f" * 1000, delivery_mode=2), exchange="",
                         routing_key=q)
        m = ch.basic_get(q, no_ack=False)
        ch.basic_ack(m.delivery_tag)
    wait_for(lambda: store_bytes() < 3 * 1024 * 1024, timeout=10)
    with open(b.log_path, "rb") as f:
        assert f.read().count(b"tidy: freed") >= 2
    b.assert_alive()


def test_acked_segments_are_reaped_between_tidies(broker_factory):
    """A segment nothing references any more is deleted soon after (a reap: TIDY's sync and
    deletions, no walk and no copies, at most every reap_interval), not at the next TIDY
    (tidy_after_written, 1 GB by default): recovery after a kill -9, and a cluster's new
    leader, read every segment still on disk (1.1 GB of acked 1 KiB messages took 1.3-4.5 s
    before; 84 ms with the reap). The live message stays, also across the kill."""
    from pathlib import Path
    cfg = {"segment_size": "64k", "tidy_interval": "0", "tidy_after_written": "0"}
    b = broker_factory(config=cfg)
    ch = b.amqp().channel()
    q, keep = uname("reaped"), uname("kept")
    ch.queue_declare(q, durable=True, auto_delete=False)
    ch.queue_declare(keep, durable=True, auto_delete=False)
    ch.confirm_select()

    def segments():
        return sorted((Path(b.data_dir) / "msgs").glob("*.seg"))

    for _ in range(40):  # 2 MB through the queue (32 segments), none left in it
        for _ in range(50):
            ch.basic_publish(amqp.Message(b"r" * 1000, delivery_mode=2), exchange="",
                             routing_key=q)
        last = None
        for _ in range(50):
            last = ch.basic_get(q, no_ack=False)
        ch.basic_ack(last.delivery_tag, multiple=True)
    ch.basic_publish(amqp.Message(b"the one kept", delivery_mode=2), exchange="",
                     routing_key=keep)
    # py-amqp's basic_publish does not wait for the confirm: a durable declare's reply waits
    # for the sync of its record, so the message and the acks before it are on disk then
    ch.queue_declare(uname("synced"), durable=True, auto_delete=False)
    # the acks' sync, then a reap within reap_interval (100 ms): the store is back to the
    # segments the newest records are in
    wait_for(lambda: len(segments()) <= 3, timeout=10, message="the acked segments reaped")
    with open(b.log_path, "rb") as f:
        assert b"tidy: " not in f.read()  # no TIDY did it
    b.kill9()
    b2 = broker_factory(data_dir=b.data_dir, config=cfg)
    ch2 = b2.amqp().channel()
    m = ch2.basic_get(keep, no_ack=True)
    assert m is not None and bytes(m.body) == b"the one kept"
    assert ch2.basic_get(q, no_ack=True) is None
    with open(b2.log_path, "rb") as f:
        assert re.search(rb"recovered \d+ durable queue\(s\) and 1 message\(s\)", f.read())
