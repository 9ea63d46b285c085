"""Store and forward between nodes (issue 9): outgoing queues, the link, EOD, the outgoing
queues' management surface.  Uses the multi-node loopback harness (multinode.py)."""

import os
import signal
import time

import amqp
import pytest

from helpers import uname, wait_for
from multinode import drain

OK = ("0x00000000", "MQ_OK")
INVALID = ("0xC00E0006", "MQ_ERROR_INVALID_PARAMETER")
NOT_ACTIVE = ("0xC00E0004", "MQ_ERROR_QUEUE_NOT_ACTIVE")


def hr(j):
    return (j["hresult"], j["hresult_name"])


def declare(node, q, durable=True):
    ch = node.amqp().channel()
    ch.queue_declare(q, durable=durable, auto_delete=False)
    return ch


def publish(node, fmt, bodies, tx_size=0, confirm=True, persistent=True):
    ch = node.amqp().channel()
    if tx_size:
        ch.tx_select()
    elif confirm:
        ch.confirm_select()
    for i, b in enumerate(bodies):
        ch.basic_publish(amqp.Message(b, delivery_mode=2 if persistent else 1), exchange="",
                         routing_key=fmt)
        if tx_size and (i + 1) % tx_size == 0:
            ch.tx_commit()
    if tx_size and len(bodies) % tx_size:
        ch.tx_commit()
    return ch


def bodies(n, prefix="m"):
    return [("%s%d" % (prefix, i)).encode() for i in range(n)]


def test_harness_nodes_on_distinct_loopback_addresses(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    assert a.addr != b.addr and a.addr.startswith("127.") and b.addr.startswith("127.")
    assert b.fmt("q") == "DIRECT=TCP:%s:%d\\private$\\q" % (b.addr, b.port)
    for n in (a, b):
        ch = n.amqp().channel()
        q = uname("h")
        ch.queue_declare(q)
        ch.basic_publish(amqp.Message(b"x"), exchange="", routing_key=q)
        assert ch.basic_get(q, no_ack=True).body == b"x"
    b.kill9()
    b.restart()
    b.broker.assert_alive()


def test_publish_to_remote_queue_arrives_once_in_order(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = declare(b, "orders")
    fmt = b.fmt("orders")
    publish(a, fmt, bodies(200))
    a.wait_drained(fmt)
    assert drain(bch, "orders") == bodies(200)
    o = a.outgoing_queue(fmt)
    assert o["state"] == "CONNECTED" and o["foreign"] == "NO", o
    assert o["sent"] == 200 and o["acked"] == 200 and o["in_flight"] == 0, o
    assert o["connection_history"][0]["status_name"] == "Established"
    assert o["vhost"] == "/" and o["last_error"] == ""


def test_transactions_travel_whole_in_order(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = declare(b, "tx")
    fmt = b.fmt("tx")
    ch = publish(a, fmt, bodies(90), tx_size=9)
    # an uncommitted transaction stays on the sender, counted, not sent
    ch.basic_publish(amqp.Message(b"open", delivery_mode=2), exchange="", routing_key=fmt)
    a.wait_drained_except = None
    wait_for(lambda: a.outgoing_queue(fmt)["acked"] == 90, timeout=20)
    assert a.outgoing_queue(fmt)["messages"] == 1
    ch.tx_rollback()
    assert drain(bch, "tx") == bodies(90)
    wait_for(lambda: a.outgoing_queue(fmt)["messages"] == 0)


def test_format_names_are_case_insensitive_one_outgoing_queue(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = declare(b, "Mixed")
    f1 = "DIRECT=TCP:%s:%d\\private$\\Mixed" % (b.addr, b.port)
    f2 = "formatname:direct=tcp:%s:%d\\PRIVATE$\\mixed" % (b.addr, b.port)
    publish(a, f1, [b"1"])
    publish(a, f2, [b"2"])
    outs = a.outgoing()
    assert len(outs) == 1, outs
    a.wait_drained(outs[0]["format_name"])
    assert drain(bch, "Mixed") == [b"1", b"2"]


def test_receiver_down_state_says_why_then_drains(nodes):
    a = nodes.start("a")
    b = nodes.start("b", keep_port=True)
    bch = declare(b, "q")
    fmt = b.fmt("q")
    b.stop()
    # the publisher's confirm means "safely in the outgoing queue here"
    publish(a, fmt, bodies(20))
    o = a.wait_state(fmt, "WAITING")
    wait_for(lambda: a.outgoing_queue(fmt)["last_error"], message="no last_error")
    o = a.outgoing_queue(fmt)
    assert o["messages"] == 20
    assert "refused" in o["last_error"].lower() or "connect" in o["last_error"].lower(), o
    assert any(h["status_name"] in ("ConnectionRefused", "SocketConnectFailure")
               for h in o["connection_history"]), o
    b.restart()
    a.wait_drained(fmt)
    assert drain(b.amqp().channel(), "q") == bodies(20)
    assert a.outgoing_queue(fmt)["state"] == "CONNECTED"


def test_sender_kill9_and_restart_exactly_once(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = declare(b, "k")
    fmt = b.fmt("k")
    publish(a, fmt, bodies(3000), tx_size=10)
    a.kill9()
    a.restart()
    a.wait_drained(fmt, timeout=30)
    got = drain(bch, "k")
    assert got == bodies(3000)


def test_receiver_kill9_mid_stream_exactly_once(nodes):
    a = nodes.start("a")
    b = nodes.start("b", keep_port=True)
    declare(b, "r")
    fmt = b.fmt("r")
    ch = publish(a, fmt, bodies(1000, "x"), tx_size=5)
    b.kill9()
    for i in range(1000):
        ch.basic_publish(amqp.Message(b"y%d" % i, delivery_mode=2), exchange="", routing_key=fmt)
        if i % 5 == 4:
            ch.tx_commit()
    b.restart()
    a.wait_drained(fmt, timeout=30)
    got = drain(b.amqp().channel(), "r")
    assert got == bodies(1000, "x") + bodies(1000, "y")


def test_pause_resume_state_and_restart(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = declare(b, "p")
    fmt = b.fmt("p")
    publish(a, fmt, [b"first"])
    a.wait_drained(fmt)
    s, j, _ = a.api.action("QUEUE=" + fmt, "pause")
    assert s == 200 and hr(j) == OK and j["state"] == "ONHOLD", j
    publish(a, fmt, bodies(5))
    time.sleep(0.5)
    o = a.outgoing_queue(fmt)
    assert o["state"] == "ONHOLD" and o["messages"] == 5, o
    s, j, _ = a.api.info("QUEUE=" + fmt, "STATE", "MESSAGE_COUNT", "LOCATION")
    assert j["values"]["PROPID_MGMT_QUEUE_STATE"] == "ONHOLD"
    assert j["values"]["PROPID_MGMT_QUEUE_MESSAGE_COUNT"] == 5
    assert j["values"]["PROPID_MGMT_QUEUE_LOCATION"] == "REMOTE"
    # ONHOLD survives a restart
    a.stop()
    a.restart()
    time.sleep(0.5)
    assert a.outgoing_queue(fmt)["state"] == "ONHOLD"
    assert drain(bch, "p") == [b"first"]
    s, j, _ = a.api.action("QUEUE=" + fmt, "RESUME")
    assert s == 200 and hr(j) == OK and j["state"] in ("INACTIVE", "WAITING", "CONNECTED"), j
    a.wait_drained(fmt)
    assert drain(bch, "p") == bodies(5)


def test_actions_on_wrong_objects(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    declare(a, "local")
    for act in ("PAUSE", "RESUME", "EOD_RESEND"):
        s, j, _ = a.api.action("QUEUE=DIRECT=OS:.\\private$\\local", act)
        assert 400 <= s < 500 and hr(j) == INVALID, (act, j)
        # an outgoing queue that was never used
        s, j, _ = a.api.action("QUEUE=" + b.fmt("never"), act)
        assert s == 404 and hr(j) == NOT_ACTIVE, (act, j)
        s, j, _ = a.api.action("MACHINE", act)
        assert hr(j) == INVALID
    fmt = b.fmt("x")
    publish(a, fmt, [b"1"])
    for act in ("CONNECT", "DISCONNECT", "TIDY"):
        s, j, _ = a.api.action("QUEUE=" + fmt, act)
        assert hr(j) == INVALID, (act, j)
    assert a.outgoing_queue(fmt)["state"] != "DISCONNECTED"


def test_eod_resend_does_not_duplicate(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = declare(b, "e")
    fmt = b.fmt("e")
    publish(a, fmt, [b"warm"])
    a.wait_drained(fmt)
    # the receiver stops answering: sent messages stay unacked
    os.kill(b.broker.proc.pid, signal.SIGSTOP)
    try:
        publish(a, fmt, bodies(50))
        wait_for(lambda: a.outgoing_queue(fmt)["in_flight"] > 0)
        s, j, _ = a.api.action("QUEUE=" + fmt, "EOD_RESEND")
        assert s == 200 and hr(j) == OK
        s, j, _ = a.api.info("QUEUE=" + fmt, "EOD_RESEND_COUNT")
        assert j["values"]["PROPID_MGMT_QUEUE_EOD_RESEND_COUNT"] >= 1
    finally:
        os.kill(b.broker.proc.pid, signal.SIGCONT)
    a.wait_drained(fmt, timeout=30)
    assert drain(bch, "e") == [b"warm"] + bodies(50)


def test_disconnect_connect_sender_and_receiver(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = declare(b, "d")
    fmt = b.fmt("d")
    s, j, _ = a.api.action("MACHINE", "DISCONNECT")
    assert hr(j) == OK
    publish(a, fmt, bodies(10))
    a.wait_state(fmt, "DISCONNECTED")
    a.broker.assert_alive()  # local clients keep working
    time.sleep(0.3)
    assert a.outgoing_queue(fmt)["messages"] == 10
    # the offline flag survives a restart
    a.stop()
    a.restart()
    time.sleep(0.3)
    assert a.outgoing_queue(fmt)["state"] == "DISCONNECTED"
    s, j, _ = a.api.info("MACHINE", "CONNECTED")
    assert j["values"]["PROPID_MGMT_MSMQ_CONNECTED"] == "DISCONNECTED"
    s, j, _ = a.api.action("MACHINE", "CONNECT")
    a.wait_drained(fmt)
    assert drain(bch, "d") == bodies(10)
    # an offline receiver refuses incoming links; the sender says why
    s, j, _ = b.api.action("MACHINE", "DISCONNECT")
    publish(a, fmt, bodies(3, "z"))
    wait_for(lambda: "offline" in a.outgoing_queue(fmt)["last_error"], timeout=10,
             message="sender never saw the receiver offline")
    assert a.outgoing_queue(fmt)["state"] == "WAITING"
    b.broker.assert_alive()
    b.api.action("MACHINE", "CONNECT")
    a.wait_drained(fmt)
    assert drain(bch, "d") == bodies(3, "z")


@pytest.mark.test_timeout(60)
def test_a_backlog_of_big_messages_drains_without_waiting_for_the_resend_timer(nodes):
    # 20,000 x 1 KiB waiting offline: on CONNECT the link fills its window (16 batches of
    # 1 MiB) at once, more than 4 MiB of output held for the turn's sync. The link used to
    # give back its output buffer with those bytes in it: nothing was sent until the resend
    # timer (here 60 s) started a new session.
    slow = {"eod_resend_%s_ms" % k: 60000 for k in ("short", "medium", "long", "final")}
    a = nodes.start("a", config=slow)
    b = nodes.start("b")
    bch = declare(b, "big")
    fmt = b.fmt("big")
    s, j, _ = a.api.action("MACHINE", "DISCONNECT")
    assert hr(j) == OK
    n, body = 20000, b"x" * 1024
    ch = a.amqp().channel()
    for _ in range(n):
        ch.basic_publish(amqp.Message(body, delivery_mode=2), exchange="", routing_key=fmt)
    wait_for(lambda: a.outgoing_queue(fmt)["messages"] == n, timeout=30,
             message="the backlog never filled: %r" % (a.outgoing_queue(fmt),))
    t0 = time.monotonic()
    s, j, _ = a.api.action("MACHINE", "CONNECT")
    assert hr(j) == OK
    wait_for(lambda: bch.queue_declare("big", passive=True).message_count == n, timeout=30,
             message="not drained: %r" % (a.outgoing_queue(fmt),))
    assert time.monotonic() - t0 < 30
    assert a.outgoing_queue(fmt)["eod"]["EodResendCount"] == 0  # no resend was needed
    a.wait_drained(fmt)


def test_bind_exchange_to_remote_queue_durable(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = declare(b, "bound")
    fmt = b.fmt("bound")
    ch = a.amqp().channel()
    ch.exchange_declare("fwd", "direct", durable=True, auto_delete=False)
    ch.queue_bind(fmt, "fwd", "k")
    ch.confirm_select()
    ch.basic_publish(amqp.Message(b"via-x", delivery_mode=2), exchange="fwd", routing_key="k")
    a.wait_drained(a.outgoing()[0]["format_name"])
    assert drain(bch, "bound") == [b"via-x"]
    a.stop()
    a.restart()
    ch = a.amqp().channel()
    ch.confirm_select()
    ch.basic_publish(amqp.Message(b"after", delivery_mode=2), exchange="fwd", routing_key="k")
    a.wait_drained(a.outgoing()[0]["format_name"])
    assert drain(bch, "bound") == [b"after"]
    # the HTTP API binds to a format name too
    import urllib.parse
    s, j, _ = a.api.put("/api/exchanges/%2F/fwd2", {"type": "fanout", "durable": True})
    assert s in (201, 204), j
    s, j, _ = a.api.post("/api/bindings/%%2F/e/fwd2/q/%s" % urllib.parse.quote(fmt, safe=""),
                         {"routing_key": ""})
    assert s == 201, j
    assert a.api.publish("x", "http", exchange="fwd2") == 1
    a.wait_drained(a.outgoing()[0]["format_name"])
    assert drain(bch, "bound") == [b"http"]


def test_outgoing_queue_is_not_a_client_queue(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    fmt = b.fmt("nc")
    s, j, _ = b.api.put(b.api.q("nc"), {"durable": True})
    b.stop()  # nothing drains it
    publish(a, fmt, [b"1"])
    name = a.outgoing()[0]["format_name"]
    c = a.amqp()
    ch = c.channel()
    with pytest.raises(amqp.exceptions.AMQPError) as ei:
        ch.basic_consume(name, callback=lambda m: None)
        c.drain_events(timeout=1)
    assert ei.value.reply_code == 403
    ch = c.channel()
    with pytest.raises(amqp.exceptions.AMQPError) as ei:
        ch.queue_declare("DIRECT=TCP:1.2.3.4\\private$\\x", durable=True)
    assert ei.value.reply_code == 403
    # listed as an outgoing queue in /api/queues too
    s, j, _ = a.api.get("/api/queues")
    q = [x for x in j if x["name"] == name][0]
    assert q["outgoing"] is True and q["messages"] == 1


def test_purge_and_delete_outgoing_queue(nodes):
    a = nodes.start("a")
    b = nodes.start("b", keep_port=True)
    bch = declare(b, "pd")
    fmt = b.fmt("pd")
    b.stop()
    publish(a, fmt, bodies(7))
    name = a.outgoing()[0]["format_name"]
    s, j, _ = a.api.delete(a.api.q(name) + "/contents")
    assert s == 200 and j["message_count"] == 7, j
    publish(a, fmt, [b"kept"])
    b.restart()
    a.wait_drained(fmt)
    assert drain(b.amqp().channel(), "pd") == [b"kept"]
    s, j, _ = a.api.delete(a.api.q(name))
    assert s in (200, 204), j
    assert a.outgoing() == []


def test_management_properties_of_both_ends(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    declare(b, "props")
    fmt = b.fmt("props")
    publish(a, fmt, bodies(4), tx_size=2)
    a.wait_drained(fmt)
    names = ["PATHNAME", "FORMATNAME", "TYPE", "LOCATION", "XACT", "FOREIGN", "STATE", "NEXTHOPS",
             "MESSAGE_COUNT", "BYTES_IN_QUEUE", "EOD_LAST_ACK", "EOD_LAST_ACK_TIME",
             "EOD_LAST_ACK_COUNT", "EOD_FIRST_NON_ACK", "EOD_LAST_NON_ACK", "EOD_NEXT_SEQ",
             "EOD_NO_READ_COUNT", "EOD_NO_ACK_COUNT", "EOD_RESEND_TIME", "EOD_RESEND_INTERVAL",
             "EOD_RESEND_COUNT", "CONNECTION_HISTORY", "EOD_SOURCE_INFO"]
    s, j, _ = a.api.info("QUEUE=" + fmt, *names)
    assert s == 200, j
    v = j["values"]
    vts = {p["name"]: p["vt"] for p in j["properties"]}
    P = "PROPID_MGMT_QUEUE_"
    assert v[P + "LOCATION"] == "REMOTE" and v[P + "FOREIGN"] == "NO"
    assert v[P + "STATE"] == "CONNECTED" and v[P + "NEXTHOPS"] == ["IP=%s" % b.addr]
    assert v[P + "MESSAGE_COUNT"] == 0 and v[P + "EOD_NO_ACK_COUNT"] == 0
    assert vts[P + "EOD_LAST_ACK"] == "VT_BLOB" and vts[P + "EOD_LAST_ACK_TIME"] == "VT_I4"
    la = v[P + "EOD_LAST_ACK"]
    assert la["SeqNo"] > 0 and len(la["blob"]) == 24  # 16 bytes, base64
    assert v[P + "EOD_LAST_ACK_COUNT"] >= 1 and v[P + "EOD_LAST_ACK_TIME"] > 0
    assert v[P + "EOD_RESEND_INTERVAL"] == 2  # eod_resend_short_ms = 2000 in the harness
    hist = v[P + "CONNECTION_HISTORY"]
    assert len(hist) == 4 and hist[0][0] == 2  # Established, newest first
    assert v[P + "EOD_SOURCE_INFO"] is None and vts[P + "EOD_SOURCE_INFO"] == "VT_NULL"
    # the receiving queue: its incoming sequence
    s, j, _ = b.api.info("QUEUE=DIRECT=OS:.\\private$\\props", "EOD_SOURCE_INFO",
                         "EOD_LAST_ACK")
    src = j["values"][P + "EOD_SOURCE_INFO"]
    assert len(src) == 6 and len(src[0]) == 1, src
    assert src[1][0]["node"] == "sluice@a" and src[3][0] == la["SeqNo"] and src[5][0] == 0
    assert j["values"][P + "EOD_LAST_ACK"] is None
    # MC-MQAC view of the outgoing queue
    s, view, _ = a.api.get(a.api.q(a.outgoing()[0]["format_name"]))
    assert view["IsLocal"] is False
    assert view["ForeignStatus"] == {"value": 1, "name": "MQ_STATUS_NOT_FOREIGN"}
    assert view["State"]["name"] == "MQ_QUEUE_STATE_CONNECTED"


def test_foreign_status_unknown_until_answered(nodes):
    a = nodes.start("a")
    fmt = "DIRECT=TCP:127.0.0.1:1\\private$\\nobody"
    publish(a, fmt, [b"1"])
    o = a.wait_state(fmt, "WAITING")
    assert o["foreign"] == "UNKNOWN"
    s, j, _ = a.api.info("QUEUE=" + fmt, "FOREIGN")
    assert j["values"]["PROPID_MGMT_QUEUE_FOREIGN"] == "UNKNOWN"


def test_link_login_refused_says_so(nodes):
    a = nodes.start("a", config={"link_user": "node", "link_password": "wrong"})
    b = nodes.start("b", config={"user.node": "secret"})
    declare(b, "auth")
    fmt = b.fmt("auth")
    publish(a, fmt, [b"1"])
    wait_for(lambda: "403" in a.outgoing_queue(fmt)["last_error"], timeout=10,
             message="no login failure reported")
    assert a.outgoing_queue(fmt)["messages"] == 1


def test_hostile_link_peer_gets_a_clean_close(nodes):
    b = nodes.start("b")
    declare(b, "victim")
    # a "link" that sends a control message with garbage, then commits
    r = b.broker.raw(client_properties={"sluice_link": {"version": 1,
                                                        "node_id": "00" * 16,
                                                        "node_name": "evil"}})
    r.rpc(1, "channel.open")
    r.rpc(1, "tx.select")
    r.publish(1, "", "victim", b"payload")
    r.publish(1, "sluice.eod", "batch", b"\x01garbage")
    r.send_method(1, "tx.commit")
    res = r.wait_close()
    assert res.method.name == "channel.close" and res.method.reply_code == 406, res
    assert "EOD" in str(res.method.reply_text)
    # a node id that is not hex, and a link to an offline node, are refused at the handshake
    bad = b.broker.raw(handshake=False)
    with pytest.raises(Exception):
        bad.handshake(client_properties={"sluice_link": {"node_id": "zz" * 16}})
    b.broker.assert_alive()
    ch = b.amqp().channel()
    assert ch.queue_declare("victim", passive=True).message_count == 0


def test_link_needs_write_permission_on_the_destination(nodes):
    a = nodes.start("a", config={"link_user": "node", "link_password": "secret"})
    b = nodes.start("b", config={"user.node": "secret", "user.node.tags": "link"})
    bch = declare(b, "perm")
    fmt = b.fmt("perm")
    s, j, _ = b.api.put("/api/permissions/%2F/node",
                        {"configure": ".*", "write": "^other$", "read": ".*"})
    if s == 501:
        pytest.skip("PUT /api/permissions is not there yet (issue 11)")
    assert s in (201, 204), (s, j)
    publish(a, fmt, [b"p1"])
    wait_for(lambda: "403" in a.outgoing_queue(fmt)["last_error"], timeout=10,
             message="the refusal never reached the sender")
    assert a.outgoing_queue(fmt)["messages"] == 1
    assert drain(bch, "perm") == []
    s, j, _ = b.api.put("/api/permissions/%2F/node",
                        {"configure": ".*", "write": ".*", "read": ".*"})
    a.wait_drained(fmt)
    assert drain(bch, "perm") == [b"p1"]


@pytest.fixture(scope="module")
def rabbit(tmp_path_factory):
    """A private Debian rabbitmq-server as a foreign destination (conftest.RabbitMQServer)."""
    from conftest import RabbitMQServer
    import shutil
    if not (shutil.which("rabbitmq-server") or os.path.exists("/usr/lib/rabbitmq/bin/rabbitmq-server")):
        pytest.skip("rabbitmq-server is not installed (scripts/deps.sh test installs it)")
    # Its ports are picked free and then bound by another process: another test run on this
    # machine can take one in between (dist_port_already_used). Try again with new ones.
    last = None
    for attempt in range(3):
        srv = RabbitMQServer(tmp_path_factory.mktemp("rabbit-foreign"))
        try:
            srv.start()
            break
        except RuntimeError as e:
            last = e
            srv = None
    if srv is None:
        raise last
    yield srv
    srv.stop()


@pytest.mark.test_timeout(120)
def test_foreign_rabbitmq_destination_at_least_once_message_id_kept(nodes, rabbit):
    a = nodes.start("a")
    rc = amqp.Connection(host="127.0.0.1:%d" % rabbit.port, userid="guest", password="guest")
    rc.connect()
    rch = rc.channel()
    q = uname("foreign")
    rch.queue_declare(q, durable=True, auto_delete=False)
    fmt = "DIRECT=TCP:127.0.0.1:%d\\private$\\%s" % (rabbit.port, q)
    ch = a.amqp().channel()
    ch.confirm_select()
    for i in range(20):
        ch.basic_publish(amqp.Message(b"f%d" % i, delivery_mode=2, message_id="id-%d" % i),
                         exchange="", routing_key=fmt)
    a.wait_drained(fmt, timeout=30)
    o = a.outgoing_queue(fmt)
    assert o["foreign"] == "YES" and o["acked"] == 20, o
    s, j, _ = a.api.info("QUEUE=" + fmt, "FOREIGN")
    assert j["values"]["PROPID_MGMT_QUEUE_FOREIGN"] == "YES"
    s, view, _ = a.api.get(a.api.q(o["format_name"]))
    assert view["ForeignStatus"] == {"value": 0, "name": "MQ_STATUS_FOREIGN"}
    got = []
    for _ in range(20):
        m = rch.basic_get(q, no_ack=True)
        assert m is not None
        got.append((m.body, m.properties.get("message_id")))
    assert got == [(b"f%d" % i, "id-%d" % i) for i in range(20)]
    # a queue the foreign broker does not have: basic.return is not a delivery
    fmt2 = "DIRECT=TCP:127.0.0.1:%d\\private$\\%s" % (rabbit.port, uname("absent"))
    publish(a, fmt2, [b"kept"])
    wait_for(lambda: "returned" in a.outgoing_queue(fmt2)["last_error"], timeout=15,
             message="no return reported")
    assert a.outgoing_queue(fmt2)["messages"] == 1
    rc.close()


def _process_tree(root):
    """root and every process below it (from /proc)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


@pytest.mark.test_timeout(150)
def test_foreign_destination_gets_a_stable_message_id_when_none_was_set(nodes, rabbit):
    """To a foreign broker (at least once) a message without a message-id gets one derived
    from the sending node and its sequence number, the same on every resend, so a consumer
    there can deduplicate. Resends are forced by freezing RabbitMQ (SIGSTOP) while the
    messages are unconfirmed: the resend timer starts a new session and sends them again."""
    import re
    a = nodes.start("a")
    rc = amqp.Connection(host="127.0.0.1:%d" % rabbit.port, userid="guest", password="guest")
    rc.connect()
    rch = rc.channel()
    q = uname("ids")
    rch.queue_declare(q, durable=True, auto_delete=False)
    fmt = "DIRECT=TCP:127.0.0.1:%d\\private$\\%s" % (rabbit.port, q)
    publish(a, fmt, [b"warm"])
    a.wait_drained(fmt, timeout=30)
    seq_id = a.outgoing_queue(fmt)["eod"]["EodLastAck"]["SeqID"]
    assert seq_id > 0
    frozen = _process_tree(rabbit.proc.pid)  # the script, beam.smp and its helpers
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        ch = a.amqp().channel()
        ch.tx_select()  # one transaction: one batch, sent together
        for i in range(5):
            props = {"message_id": "own-%d" % i} if i == 4 else {}
            ch.basic_publish(amqp.Message(b"n%d" % i, delivery_mode=2, **props), exchange="",
                             routing_key=fmt)
        ch.tx_commit()
        wait_for(lambda: a.outgoing_queue(fmt)["sent"] == 6, timeout=10)

        def non_acked():
            eod = a.outgoing_queue(fmt)["eod"]
            return eod["EodFirstNonAck"]["SeqNo"], eod["EodLastNonAck"]["SeqNo"]

        # once seen as zeros at load 10 (not explained: see the closing note); the span must
        # still come, and stay the five messages' (nothing else enqueued on this node)
        wait_for(lambda: non_acked()[1] - non_acked()[0] == 4, timeout=10)
        first, last = non_acked()
        assert last - first == 4, (first, last)
        seq_of = {"n%d" % i: first + i for i in range(5)}
        # no confirms while RabbitMQ is frozen: the resend timer (2 s) sends them again
        wait_for(lambda: "resending" in a.outgoing_queue(fmt)["last_error"], timeout=15)
        time.sleep(0.5)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    a.wait_drained(fmt, timeout=60)
    got = []
    while True:
        m = rch.basic_get(q, no_ack=True)
        if m is None:
            break
        got.append((m.body, m.properties.get("message_id")))
    ids = {}
    for body, mid in got:
        ids.setdefault(body, set()).add(mid)
    assert set(ids) >= {b"n%d" % i for i in range(5)}, got
    node_hex = None
    for i in range(4):
        (mid,) = ids[b"n%d" % i]  # one id per message, however often it came
        m = re.fullmatch(r"sluice-([0-9a-f]{32})-(\d+)-(\d+)", mid)
        assert m, mid
        node_hex = node_hex or m.group(1)
        assert m.group(1) == node_hex
        assert int(m.group(2)) == seq_id and int(m.group(3)) == seq_of["n%d" % i], (mid, seq_of)
    assert ids[b"n4"] == {"own-4"}  # an id the publisher set is kept
    # The resend went out on a new session, so the ids checked above are the resend's, and
    # they are the ones the frozen session's copies carried (node, SeqID, SeqNo). Those
    # copies may or may not reach the queue too: RabbitMQ need not route what a connection
    # closed under it had sent, so duplicates in RabbitMQ cannot be required (asserting them
    # failed once, on 5af8161, with each body there once). Where they arrive, each body has
    # the one id, which the loop above checks.
    st = a.outgoing_queue(fmt)
    assert st["sent"] >= 6 + 5, st  # the warm-up, the five, the five again
    rc.close()


def test_sluicectl_outgoing_pause_resume_eod_resend(nodes):
    import json
    import subprocess
    from conftest import sluiced_binary
    ctl = sluiced_binary().parent / "sluicectl"
    a = nodes.start("a")
    b = nodes.start("b", keep_port=True)
    declare(b, "ctl")
    fmt = b.fmt("ctl")
    b.stop()
    publish(a, fmt, bodies(3))

    def run(*args, ok=True):
        p = subprocess.run([str(ctl), "--host", a.addr, "--port", str(a.api.port)] + list(args),
                           capture_output=True, text=True, timeout=30)
        assert (p.returncode == 0) == ok, (args, p.stdout, p.stderr)
        return p.stdout

    out = json.loads(run("list", "outgoing", "--json"))
    assert out[0]["messages"] == 3 and out[0]["state"] in ("WAITING", "INACTIVE"), out
    assert "state" in run("list", "outgoing").splitlines()[0]
    assert "ONHOLD" in run("pause", fmt)
    assert a.outgoing_queue(fmt)["state"] == "ONHOLD"
    run("resume", fmt)
    run("eod-resend", fmt)
    run("pause", "DIRECT=OS:.\\private$\\nope", ok=False)  # a local name: not outgoing
    assert "UNKNOWN" in run("foreign-status", fmt)  # never answered yet
    b.restart()
    a.wait_drained(fmt)
    assert "NOT_FOREIGN" in run("foreign-status", fmt)
    # the HTTP door's default exchange sends to a format name too
    assert a.api.publish(fmt, "via-http") == 1
    a.wait_drained(fmt)
    got = drain(b.amqp().channel(), "ctl")
    assert got == bodies(3) + [b"via-http"]


def test_requests_to_the_owning_node_over_a_link(nodes):
    a = nodes.start("a")
    b = nodes.start("b", keep_port=True)
    bch = declare(b, "info")
    for i in range(3):
        bch.basic_publish(amqp.Message(b"x%d" % i, delivery_mode=2), exchange="",
                          routing_key="info")
    addr = "%s:%d" % (b.addr, b.port)

    def ask(req, timeout_ms=5000):
        return a.api.post("/api/msmq/remote", {"address": addr, "request": req,
                                               "timeout_ms": timeout_ms})

    s, j, _ = ask({"op": "queue.info", "queue": "INFO"})  # case-insensitive, as MSMQ
    assert s == 200 and j["ok"] is True, j
    assert j["queue"] == "info" and j["message_count"] == 3 and j["incarnation"] > 0
    s, j, _ = ask({"op": "queue.info", "queue": "absent"})
    assert s == 200 and j["ok"] is False and j["hresult_name"] == "MQ_ERROR_QUEUE_NOT_FOUND"
    s, j, _ = ask({"op": "no.such"})
    assert j["ok"] is False and j["hresult_name"] == "MQ_ERROR_INVALID_PARAMETER"
    # issue 10's remote handle operations travel the same way
    s, j, _ = ask({"op": "queue.open", "queue": "info", "access": 1})  # MQ_RECEIVE_ACCESS
    assert j.get("ok") is True, j
    ctx = j["context"]
    s, j, _ = ask({"op": "queue.purge", "context": ctx})
    assert j["ok"] is True and j["purged"] == 3, j
    b.stop()
    b.restart()
    s, j, _ = ask({"op": "queue.purge", "context": ctx})
    assert j["ok"] is False and j["hresult_name"] == "MQ_ERROR_STALE_HANDLE", j
    # nobody there: an error after the timeout, the API stays responsive
    b.stop()
    t0 = time.monotonic()
    s, j, _ = ask({"op": "queue.info", "queue": "info"}, timeout_ms=800)
    assert s >= 400 and j["hresult_name"] == "MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE", (s, j)
    assert time.monotonic() - t0 < 5
    s, j, _ = a.api.get("/api/overview")
    assert s == 200


def test_tidy_keeps_what_links_need(nodes):
    """TIDY frees neither the segments an outgoing queue still needs (sender) nor the newest
    record of an incoming sequence (receiver), however many segments lie between."""
    small = {"segment_size": "4k", "reap_interval": "0"}  # TIDY alone frees
    a = nodes.start("a", config=small)
    b = nodes.start("b", config=small, keep_port=True)
    bch = declare(b, "tidy")
    declare(a, "churn")
    fmt = b.fmt("tidy")
    publish(a, fmt, [b"early"])
    a.wait_drained(fmt)
    assert drain(bch, "tidy") == [b"early"]
    b.stop()
    # segments of churn, consumed: TIDY can free them ...
    publish(a, "churn", [b"x" * 1000] * 60)
    drain(a.amqp().channel(), "churn")
    # ... up to the messages waiting in the outgoing queue, which it must keep
    publish(a, fmt, bodies(5, "held"))
    s, j, _ = a.api.action("MACHINE", "TIDY")
    assert hr(j) == OK and j["segments_freed"] > 0, j
    a.stop()
    a.restart()
    assert a.outgoing_queue(fmt)["messages"] == 5
    # the receiver's only incoming-sequence record is old now: nothing new may replace it
    # before its TIDY (the sender holds back)
    s, j, _ = a.api.action("QUEUE=" + fmt, "PAUSE")
    b.restart()
    bch = b.amqp().channel()
    bdeclare = b.amqp().channel()
    for i in range(60):
        bdeclare.queue_declare("churn_b", durable=True, auto_delete=False)
        bdeclare.basic_publish(amqp.Message(b"y" * 1000, delivery_mode=2), exchange="",
                               routing_key="churn_b")
    drain(bdeclare, "churn_b")
    s, j, _ = b.api.action("MACHINE", "TIDY")
    assert hr(j) == OK and j["segments_freed"] > 0, j
    b.stop()
    b.restart()
    s, j, _ = b.api.info("QUEUE=DIRECT=OS:.\\private$\\tidy", "EOD_SOURCE_INFO")
    src = j["values"]["PROPID_MGMT_QUEUE_EOD_SOURCE_INFO"]
    assert len(src[3]) == 1 and src[3][0] > 0, src  # the receiver still knows its number
    a.api.action("QUEUE=" + fmt, "RESUME")
    a.wait_drained(fmt)
    assert drain(b.amqp().channel(), "tidy") == bodies(5, "held")


def test_idle_link_closes_and_says_inactive(nodes):
    a = nodes.start("a", config={"link_idle_ms": 300})
    b = nodes.start("b")
    bch = declare(b, "idle")
    fmt = b.fmt("idle")
    publish(a, fmt, [b"1"])
    a.wait_drained(fmt)
    o = a.wait_state(fmt, "INACTIVE")
    assert o["next_hops"] == [] and o["last_error"] == ""
    s, j, _ = a.api.info("QUEUE=" + fmt, "STATE", "NEXTHOPS")
    assert j["values"]["PROPID_MGMT_QUEUE_STATE"] == "INACTIVE"
    publish(a, fmt, [b"2"])  # a new message reconnects
    a.wait_drained(fmt)
    assert drain(bch, "idle") == [b"1", b"2"]


def test_full_destination_refuses_whole_batches_nothing_lost(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = b.amqp().channel()
    bch.queue_declare("small", durable=True, auto_delete=False,
                      arguments={"x-max-length": 3, "x-overflow": "reject-publish"})
    fmt = b.fmt("small")
    publish(a, fmt, bodies(10))
    wait_for(lambda: "full" in a.outgoing_queue(fmt)["last_error"], timeout=10,
             message="the full queue was never reported")
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 10 and time.monotonic() < deadline:
        m = bch.basic_get("small", no_ack=True)
        if m is None:
            time.sleep(0.05)
            continue
        got.append(m.body.encode() if isinstance(m.body, str) else m.body)
    assert got == bodies(10)  # none lost to reject-publish, none twice, in order
    a.wait_drained(fmt)


@pytest.mark.test_timeout(60)
def test_link_transaction_is_bounded(nodes):
    import amqpraw
    b = nodes.start("b")
    declare(b, "bounded")
    r = b.broker.raw(client_properties={"sluice_link": {"version": 1, "node_id": "ab" * 16,
                                                        "node_name": "greedy"}})
    r.rpc(1, "channel.open")
    r.rpc(1, "tx.select")
    one = (amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1, amqpraw.encode_method(
        "basic.publish", exchange="", routing_key="bounded")) +
        r.content_frames(1, b"x"))
    r.send(one * 65537)  # one more than a link transaction may hold, never committed
    res = r.wait_close(timeout=30)
    assert res.method.name == "channel.close" and res.method.reply_code == 406, res
    assert "at most" in str(res.method.reply_text)
    b.broker.assert_alive()


def test_eod_non_ack_properties_while_the_receiver_holds_its_acks(nodes):
    """h9b saw EodFirstNonAck / EodLastNonAck zero and EodNoAckCount 0 while 40 messages were
    sent and unacknowledged: a session that ends (resend timer) used to forget them."""
    a = nodes.start("a")
    b = nodes.start("b")
    bch = declare(b, "held")
    fmt = b.fmt("held")
    publish(a, fmt, bodies(10, "x"))
    a.wait_drained(fmt)
    last_ack = a.outgoing_queue(fmt)["eod"]["EodLastAck"]["SeqNo"]
    os.kill(b.broker.proc.pid, signal.SIGSTOP)  # it takes nothing in and acks nothing
    try:
        publish(a, fmt, bodies(40, "h"), tx_size=40)  # one transaction: one link batch
        wait_for(lambda: a.outgoing_queue(fmt)["sent"] == 50, timeout=10,
                 message="not sent: %r" % (a.outgoing_queue(fmt),))
        o = a.outgoing_queue(fmt)
        eod = o["eod"]
        assert o["state"] == "CONNECTED" and o["in_flight"] == 40, o
        assert eod["EodNoAckCount"] == 40, eod
        first, last = eod["EodFirstNonAck"]["SeqNo"], eod["EodLastNonAck"]["SeqNo"]
        assert last_ack < first < last, eod
        assert eod["EodLastNonAck"]["PrevNo"] < last and eod["EodFirstNonAck"]["SeqID"] > 0
        # the resend timer (2 s here) ends the session; the 40 stay sent and unacknowledged
        wait_for(lambda: "resending" in a.outgoing_queue(fmt)["last_error"], timeout=15)
        o = a.outgoing_queue(fmt)
        eod = o["eod"]
        assert o["in_flight"] == 0 and o["messages"] == 40, o
        assert eod["EodNoAckCount"] == 40, o
        assert eod["EodFirstNonAck"]["SeqNo"] == first, eod
        assert eod["EodLastNonAck"]["SeqNo"] == last, eod
        s, j, _ = a.api.info("QUEUE=" + fmt, "EOD_NO_ACK_COUNT", "EOD_FIRST_NON_ACK",
                             "EOD_LAST_NON_ACK")
        v = j["values"]
        P = "PROPID_MGMT_QUEUE_"
        assert v[P + "EOD_NO_ACK_COUNT"] == 40, v
        assert v[P + "EOD_FIRST_NON_ACK"]["SeqNo"] == first, v
        assert v[P + "EOD_LAST_NON_ACK"]["SeqNo"] == last, v
    finally:
        os.kill(b.broker.proc.pid, signal.SIGCONT)
    a.wait_drained(fmt, timeout=30)
    eod = a.outgoing_queue(fmt)["eod"]
    assert eod["EodNoAckCount"] == 0 and eod["EodFirstNonAck"]["SeqNo"] == 0, eod
    assert eod["EodLastAck"]["SeqNo"] == last, eod
    assert drain(bch, "held") == bodies(10, "x") + bodies(40, "h")


def test_link_to_a_blocked_destination_waits_connected(nodes):
    """A destination blocked for low disk sends connection.blocked as soon as the link has
    logged in: the link stays connected and says so ("destination blocked"), instead of
    taking it for an error and reconnecting every link_retry_min_ms..max_ms; once the
    destination has room again, the messages go."""
    a = nodes.start("a")
    b = nodes.start("b", keep_port=True)
    declare(b, "blk")
    b.stop()
    b.config["disk_free_limit"] = "1000000000G"  # no disk has that much: the alarm is on
    b.restart()
    wait_for(lambda: "disk alarm: blocking" in b.broker.log_tail(400), timeout=10,
             message="no disk alarm at b")
    fmt = b.fmt("blk")
    publish(a, fmt, bodies(5))
    wait_for(lambda: "destination blocked" in (a.outgoing_queue(fmt)["last_error"] or ""),
             timeout=10, message="the link did not report the block")
    # and it stays so, connected, on the same connection: no new login at b meanwhile
    logins = b.broker.log_tail(4000).count("a link from node")
    assert logins >= 1
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        o = a.outgoing_queue(fmt)
        assert o["state"] == "CONNECTED", o
        assert o["last_error"].startswith("destination blocked: low on disk"), o
        assert o["messages"] == 5, o
        time.sleep(0.1)
    assert b.broker.log_tail(4000).count("a link from node") == logins
    assert "unexpected connection.blocked" not in a.broker.log_tail(4000)
    # room again: everything arrives, once
    b.stop()
    del b.config["disk_free_limit"]
    b.restart()
    a.wait_drained(fmt)
    assert drain(b.amqp().channel(), "blk") == bodies(5)
    assert a.outgoing_queue(fmt)["last_error"] == ""
