"""Handles and management objects across nodes (issue 10 over issue 9's link), on the
multi-node loopback harness (multinode.py): the outgoing queue opened with admin access
(MQ_RECEIVE_ACCESS | MQ_ADMIN_ACCESS), management objects bound to an outgoing queue and
to the receiving queue of a link."""

import time

import amqp

from helpers import uname, wait_for
from multinode import drain
from test_handles import Handles, hr
from test_mgmt_object import Mgmt

OK = ("0x00000000", "MQ_OK")
NOINTERFACE = ("0x80004002", "E_NOINTERFACE")
ACCESS_DENIED = ("0xC00E0025", "MQ_ERROR_ACCESS_DENIED")
ACCESS_MODE = ("0xC00E0045", "MQ_ERROR_UNSUPPORTED_ACCESS_MODE")
NOT_ACTIVE = ("0xC00E0004", "MQ_ERROR_QUEUE_NOT_ACTIVE")


def declare(node, q):
    ch = node.amqp().channel()
    ch.queue_declare(q, durable=True, auto_delete=False)
    return ch


def publish(node, fmt, bodies):
    ch = node.amqp().channel()
    ch.confirm_select()
    for b in bodies:
        ch.basic_publish(amqp.Message(b, delivery_mode=2), exchange="", routing_key=fmt)
    return ch


def test_outgoing_queue_opened_with_admin_access_and_purged(nodes):
    a = nodes.start("a")
    b = nodes.start("b", keep_port=True)
    declare(b, "oq")
    fmt = b.fmt("oq")
    b.stop()
    publish(a, fmt, [b"lost-%d" % i for i in range(3)])
    ha = Handles(a.api)
    # without an outgoing queue for a destination there is nothing to open
    s, j = ha.open(b.fmt("other"), ok=False, access="receive|admin")
    assert s == 404 and hr(j) == NOT_ACTIVE, j
    # admin access is for the outgoing queue of another node's queue, never a local queue
    s, j = ha.open("DIRECT=OS:.\\private$\\x", ok=False, access="receive|admin")
    assert hr(j) == ACCESS_MODE and "outgoing" in j["reason"], j
    s, j = ha.open(fmt, access="peek|admin")
    peek = j["handle"]
    assert j["access"] == "peek|admin" and j["queue"].lower().startswith("direct=tcp:")
    s, p = ha.purge(peek)
    assert s == 403 and hr(p) == ACCESS_DENIED
    s, j = ha.open(fmt, access=0x81)  # MQ_RECEIVE_ACCESS | MQ_ADMIN_ACCESS
    h = j["handle"]
    assert j["access"] == "receive|admin" and j["kind"] == "local"
    s, p = ha.purge(h)
    assert s == 200 and hr(p) == OK and p["message_count"] == 3, p
    assert a.outgoing_queue(fmt)["messages"] == 0
    # purged messages never travel; what comes after does
    publish(a, fmt, [b"kept"])
    b.restart()
    a.wait_drained(fmt)
    assert drain(b.amqp().channel(), "oq") == [b"kept"]
    ha.close(h)
    ha.close(peek)


def test_management_object_of_an_outgoing_queue(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = declare(b, "mq")
    fmt = b.fmt("mq")
    publish(a, fmt, [b"m0", b"m1"])
    a.wait_drained(fmt)
    mg = Mgmt(a.api)
    m = mg.create()
    s, j = mg.init(m, format_name=fmt)
    assert s == 200 and j["interface"] == "IMSMQOutgoingQueueManagement", j
    v = lambda member: mg.value(m, member)  # noqa: E731
    assert v("is-local")["value"] is False and v("is-local")["name"] == "VARIANT_FALSE"
    j = v("state")
    assert (j["value"], j["name"]) == (6, "MQ_QUEUE_STATE_CONNECTED")
    j = v("foreign-status")
    assert (j["value"], j["name"]) == (1, "MQ_STATUS_NOT_FOREIGN")
    assert v("transactional-status")["name"] == "MQ_XACT_STATUS_UNKNOWN"
    assert v("queue-type")["name"] == "MQ_TYPE_PRIVATE"
    assert v("next-hops")["value"] == ["IP=%s" % b.addr]
    assert v("message-count")["value"] == 0
    info = v("eod-get-send-info")["value"]
    assert sorted(info) == sorted(["EodLastAck", "EodLastAckTime", "EodLastAckCount",
                                   "EodFirstNonAck", "EodLastNonAck", "EodNextSeq",
                                   "EodNoReadCount", "EodNoAckCount", "EodResendTime",
                                   "EodResendInterval", "EodResendCount"])
    assert info["EodLastAck"]["SeqNo"] > 0 and info["EodNoAckCount"] == 0
    # the destination-queue interface is not there
    for member in ("journal-message-count", "bytes-in-journal", "eod-get-receive-info"):
        s, j = mg.get(m, member)
        assert s == 400 and hr(j) == NOINTERFACE and "IMSMQQueueManagement" in j["reason"], j
    # the actions (MC-MQAC Pause / Resume / EodResend -> R_QMMgmtAction)
    s, j = mg.act(m, "pause")
    assert s == 200 and hr(j) == OK and j["state"] == "ONHOLD" and j["member"] == "Pause", j
    assert v("state")["name"] == "MQ_QUEUE_STATE_ONHOLD"
    publish(a, fmt, [b"held"])
    time.sleep(0.5)
    assert v("message-count")["value"] == 1
    assert drain(bch, "mq", idle=0.2) == [b"m0", b"m1"]
    s, j = mg.act(m, "resume")
    assert s == 200 and hr(j) == OK
    a.wait_drained(fmt)
    assert drain(bch, "mq") == [b"held"]
    s, j = mg.act(m, "EodResend")
    assert s == 200 and hr(j) == OK
    # the receiving end: a management object bound to the destination queue on b
    mb = Mgmt(b.api)
    o = mb.create()
    s, j = mb.init(o, pathname=".\\private$\\mq")
    assert s == 200 and j["interface"] == "IMSMQQueueManagement"
    seqs = mb.value(o, "eod-get-receive-info")["value"]
    assert len(seqs) == 1, seqs
    assert sorted(seqs[0]) == ["LastAccessTime", "QueueFormatName", "RejectCount", "SenderID",
                               "SeqID", "SeqNo"]
    assert seqs[0]["SenderID"]["node"] == "sluice@a" and seqs[0]["RejectCount"] == 0
    assert seqs[0]["SeqNo"] >= info["EodLastAck"]["SeqNo"] > 0
    s, j = mb.get(o, "state")
    assert hr(j) == NOINTERFACE
    s, j = mb.act(o, "pause")
    assert hr(j) == NOINTERFACE


def test_management_object_of_a_waiting_outgoing_queue(nodes):
    a = nodes.start("a")
    fmt = "DIRECT=TCP:127.0.0.1:1\\private$\\%s" % uname("nobody")
    publish(a, fmt, [b"1"])
    a.wait_state(fmt, "WAITING")
    mg = Mgmt(a.api)
    m = mg.create()
    assert mg.init(m, format_name=fmt)[0] == 200
    j = mg.value(m, "state")
    assert (j["value"], j["name"]) == (2, "MQ_QUEUE_STATE_WAITING")
    j = mg.value(m, "foreign-status")
    assert (j["value"], j["name"]) == (2, "MQ_STATUS_UNKNOWN")
    assert mg.value(m, "message-count")["value"] == 1
    # deleting the outgoing queue: the object answers as R_QMMgmtGetInfo does
    name = a.outgoing()[0]["format_name"]
    s, _, _ = a.api.delete(a.api.q(name))
    assert s in (200, 204)
    s, j = mg.get(m, "state")
    assert s == 404 and hr(j) == NOT_ACTIVE, j
    wait_for(lambda: a.outgoing() == [])


# ---------------------------------------------------------------------------
# Remote queue proxies (MS-MQMP RemoteQueueProxyHandle over MS-MQQP)
# ---------------------------------------------------------------------------
INVALID_HANDLE = ("0xC00E0007", "MQ_ERROR_INVALID_HANDLE")
STALE = ("0xC00E0056", "MQ_ERROR_STALE_HANDLE")
DELETED = ("0xC00E005A", "MQ_ERROR_QUEUE_DELETED")
NOT_FOUND = ("0xC00E0003", "MQ_ERROR_QUEUE_NOT_FOUND")
SHARING = ("0xC00E0009", "MQ_ERROR_SHARING_VIOLATION")
REMOTE_NA = ("0xC00E0069", "MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE")
ACCESS_REFUSED = ("0xC00E0025", "MQ_ERROR_ACCESS_DENIED")


def fill(node, q, n):
    ch = node.amqp().channel()
    ch.queue_declare(q, durable=True, auto_delete=False)
    # with confirms: only a confirm says a message is on disk (the test kills the owner -9)
    for i in range(n):
        ch.basic_publish_confirm(amqp.Message(b"x%d" % i, delivery_mode=2), exchange="",
                                 routing_key=q)
    return ch


def test_purge_through_a_remote_proxy(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = fill(b, "rq", 5)
    held = bch.basic_get("rq", no_ack=False)  # Locked on the owner
    assert held is not None
    ha = Handles(a.api)
    s, j = ha.open(b.fmt("rq"), access="receive")
    assert j["kind"] == "remote" and j["owner"] == "%s:%d" % (b.addr, b.port), j
    assert j["queue"] == "rq" and j["vhost"] == "/" and j["remote_context"], j
    h = j["handle"]
    s, p = ha.purge(h)
    assert s == 200 and hr(p) == OK, p
    assert p["message_count"] == 4 and p["purge_pending"] == 1 and p["owner"] == j["owner"]
    # on the owner: the Locked message became PurgePending and never comes back
    bch.basic_reject(held.delivery_tag, requeue=True)
    wait_for(lambda: b.api.queue("rq")["messages"] == 0, message="purged message came back")
    assert bch.basic_get("rq", no_ack=True) is None
    assert [x["kind"] for x in ha.list()] == ["remote"]
    s, c = ha.close(h)
    assert s == 200 and hr(c) == OK
    s, p = ha.purge(h)
    assert s == 404 and hr(p) == INVALID_HANDLE
    # the owner forgot the context: an exclusive open there succeeds again
    s, x = ha.open(b.fmt("rq"), share="deny_receive")
    ha.close(x["handle"])
    hb = Handles(b.api)
    wait_for(lambda: hb.open("DIRECT=OS:.\\private$\\rq", ok=False)[0] == 201,
             message="the owner kept a closed remote context")


def test_remote_proxy_failures_are_the_owners(nodes):
    a = nodes.start("a")
    b = nodes.start("b", keep_port=True)
    fill(b, "rf", 0)
    ha = Handles(a.api)
    s, j = ha.open(b.fmt(uname("none")), ok=False)
    assert s == 404 and hr(j) == NOT_FOUND and "answered" in j["reason"], j
    s, j = ha.open(b.fmt("rf"), ok=False, access="send")
    assert hr(j) == ("0xC00E0045", "MQ_ERROR_UNSUPPORTED_ACCESS_MODE")
    # sharing rules hold on the owner, across nodes
    s, x = ha.open(b.fmt("rf"), share="deny_receive")
    s, j = ha.open(b.fmt("rf"), ok=False)
    assert s == 409 and hr(j) == SHARING, j
    ha.close(x["handle"])
    # deleted and declared again on the owner: the old proxy purges nothing
    s, j = ha.open(b.fmt("rf"))
    old = j["handle"]
    bch = b.amqp().channel()
    bch.queue_delete("rf")
    fill(b, "rf", 3)
    s, p = ha.purge(old)
    assert 400 <= s < 500 and hr(p) == DELETED, p
    assert b.api.queue("rf")["messages"] == 3
    # the owner restarts: every context it gave is stale, nothing is purged
    s, j = ha.open(b.fmt("rf"))
    h = j["handle"]
    b.kill9()
    b.restart()
    s, p = ha.purge(h)
    assert 400 <= s < 500 and hr(p) == STALE, p
    assert b.api.queue("rf")["messages"] == 3
    ha.close(h)
    ha.close(old)


def test_proxy_link_gone_runs_the_owners_contexts_down(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    fill(b, "rl", 1)
    s, j = Handles(a.api).open(b.fmt("rl"), share="deny_receive")
    hb = Handles(b.api)
    s, k = hb.open("DIRECT=OS:.\\private$\\rl", ok=False)
    assert s == 409 and hr(k) == SHARING  # held by a's proxy
    a.kill9()  # the proxy's node dies: its link goes, and with it the contexts (rundown)
    wait_for(lambda: hb.open("DIRECT=OS:.\\private$\\rl", ok=False)[0] == 201,
             message="the owner kept the contexts of a link that is gone")


def test_owner_down_is_remote_machine_not_available(nodes):
    a = nodes.start("a", config={"handle_remote_timeout": "1500"})
    b = nodes.start("b", keep_port=True)
    fill(b, "rd", 2)
    ha = Handles(a.api)
    s, j = ha.open(b.fmt("rd"))
    b.stop()
    t = time.monotonic()
    s, p = ha.purge(j["handle"])
    assert 400 <= s < 500 and hr(p) == REMOTE_NA and "did not answer" in p["reason"], p
    assert time.monotonic() - t < 8
    b.restart()
    s, p = ha.purge(j["handle"])
    assert hr(p) == STALE  # the owner restarted meanwhile
    assert b.api.queue("rd")["messages"] == 2


def test_management_object_of_another_nodes_queue(nodes):
    a = nodes.start("a")
    b = nodes.start("b")
    bch = fill(b, "rm", 3)
    bch.basic_get("rm", no_ack=False)
    machine = "%s:%d" % (b.addr, b.port)
    mg = Mgmt(a.api)
    m = mg.create()
    s, j = mg.init(m, machine=machine, pathname=".\\private$\\rm")
    assert s == 200 and j["owner"] == machine and j["interface"] == "IMSMQQueueManagement", j
    assert mg.value(m, "message-count")["value"] == 3  # the owner's count (Locked counts)
    assert mg.value(m, "machine")["value"] == machine
    j = mg.value(m, "is-local")
    assert j["value"] is True  # LOCAL on its own node
    assert mg.value(m, "eod-get-receive-info")["value"] == []
    assert mg.value(m, "foreign-status")["name"] == "MQ_STATUS_NOT_FOREIGN"
    s, j = mg.get(m, "state")
    assert hr(j) == NOINTERFACE
    # values are live: the owner's queue changes, the object follows
    bch.basic_publish(amqp.Message(b"more"), exchange="", routing_key="rm")
    wait_for(lambda: mg.value(m, "message-count")["value"] == 4)
    # failures are the owner's
    o = mg.create()
    s, j = mg.init(o, machine=machine, format_name="DIRECT=OS:.\\private$\\" + uname("none"))
    assert s == 404 and hr(j) == NOT_FOUND and "answered" in j["reason"], j
    s, j = mg.get(o, "message-count")
    assert hr(j) == ("0xC00E0094", "MQ_ERROR_UNINITIALIZED_OBJECT")
    # an outgoing queue of the other node: values yes, actions no
    bch.basic_publish(amqp.Message(b"w"), exchange="", routing_key="DIRECT=TCP:127.0.0.1:1\\private$\\far")
    far = "DIRECT=TCP:127.0.0.1:1\\private$\\far"
    s, j = mg.init(o, machine=machine, format_name=far)
    assert s == 200 and j["interface"] == "IMSMQOutgoingQueueManagement", j
    assert mg.value(o, "state")["name"] in ("MQ_QUEUE_STATE_WAITING", "MQ_QUEUE_STATE_NONACTIVE")
    s, j = mg.act(o, "pause")
    assert s == 403 and hr(j) == ACCESS_REFUSED, j
    assert b.outgoing_queue(far)["state"] != "ONHOLD"


def test_sluicectl_purge_of_another_nodes_queue(nodes):
    import subprocess
    from test_sluicectl import SLUICECTL
    a = nodes.start("a")
    b = nodes.start("b", keep_port=True)
    fill(b, "cq", 4)

    def ctl(*args):
        return subprocess.run([str(SLUICECTL), "--host", a.broker.host, "--port",
                               str(a.broker.mgmt_port)] + list(args),
                              capture_output=True, text=True, timeout=30)
    p = ctl("purge", b.fmt("cq"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "queue %s purged: 4 message(s) deleted, 0 pending" % b.fmt("cq")
    assert b.api.queue("cq")["messages"] == 0
    assert Handles(a.api).list() == []  # open, purge, close
    p = ctl("purge", b.fmt(uname("none")))
    assert p.returncode == 1 and "MQ_ERROR_QUEUE_NOT_FOUND (0xC00E0003)" in p.stderr, p.stderr
    h = ctl("handle", "open", b.fmt("cq")).stdout.strip()
    b.kill9()
    b.restart()
    p = ctl("handle", "purge", h)
    assert p.returncode == 1 and "MQ_ERROR_STALE_HANDLE (0xC00E0056)" in p.stderr, p.stderr
    assert "remote" in ctl("handle", "list").stdout


def test_idle_remote_handle_is_run_down_on_both_nodes(nodes):
    a = nodes.start("a", config={"handle_idle_timeout": "1"})
    b = nodes.start("b")
    fill(b, "ri", 1)
    ha, hb = Handles(a.api), Handles(b.api)
    s, j = ha.open(b.fmt("ri"), share="deny_receive")
    s, k = hb.open("DIRECT=OS:.\\private$\\ri", ok=False)
    assert hr(k) == SHARING
    wait_for(lambda: ha.list() == [], timeout=5, message="idle remote handle not run down")
    s, p = ha.purge(j["handle"])
    assert hr(p) == INVALID_HANDLE
    # the rundown told the owner (RemoteQMCloseQueue): its context is gone too
    wait_for(lambda: hb.open("DIRECT=OS:.\\private$\\ri", ok=False)[0] == 201, timeout=5,
             message="the owner kept the context of a run-down proxy")
    assert b.api.queue("ri")["messages"] == 1


def test_remote_proxies_follow_permissions_on_both_nodes(nodes):
    from test_mgmt import Api
    a = nodes.start("a", config={"link_user": "node", "link_password": "secret",
                                 "user.carol": "pc", "user.carol.tags": "management"})
    b = nodes.start("b", config={"user.node": "secret", "user.node.tags": "link"})
    for q in ("pub.q", "priv"):
        fill(b, q, 2)
    # the owner: the link's user reads only pub.*
    s, j, _ = b.api.put("/api/permissions/%2F/node", {"configure": "", "write": "",
                                                      "read": "^pub\\."})
    assert s in (201, 204), (s, j)
    ha = Handles(a.api)
    s, j = ha.open(b.fmt("priv"), ok=False)
    assert s == 403 and hr(j) == ACCESS_REFUSED and "answered" in j["reason"], j
    s, j = ha.open(b.fmt("pub.q"))
    s, p = ha.purge(j["handle"])
    assert p["message_count"] == 2
    assert b.api.queue("priv")["messages"] == 2
    # the proxy's node: carol may read only mine.* there, whatever the link may do
    s, j, _ = a.api.put("/api/permissions/%2F/carol", {"configure": "", "write": "",
                                                       "read": "^mine\\."})
    assert s in (201, 204), (s, j)
    hc = Handles(Api(a.broker, "carol", "pc"))
    s, j = hc.open(b.fmt("pub.q"), ok=False)
    assert s == 403 and hr(j) == ACCESS_REFUSED and "carol" in j["reason"], j
    assert hc.list() == []
    # management objects of b's queues, read through the link as its user
    mg = Mgmt(a.api)
    m = mg.create()
    s, j = mg.init(m, machine="%s:%d" % (b.addr, b.port), pathname=".\\private$\\priv")
    assert s == 200, j
    assert mg.value(m, "message-count")["value"] == 2
    s, j, _ = b.api.delete("/api/permissions/%2F/node")
    assert s in (200, 204), (s, j)
    s, j = mg.get(m, "message-count")
    assert s == 403 and hr(j) == ACCESS_REFUSED and "node" in j["reason"], j
    # and on this node, a user without the vhost reads no local queue's members either
    s, j, _ = a.api.put("/api/vhosts/other")
    s, j, _ = a.api.put(a.api.q("hidden", "other"), {"durable": False})
    mc = Mgmt(Api(a.broker, "carol", "pc"))
    o = mc.create()
    s, j = mc.init(o, format_name="DIRECT=OS:.\\private$\\hidden", vhost="other")
    assert s == 403 and hr(j) == ACCESS_REFUSED, j


def test_remote_handle_keeps_its_link_up_while_idle(nodes):
    """An idle request link closes (link_idle_ms) and the owner then closes the contexts of
    that link; a node holding remote handles keeps the link up, so a handle idle longer than
    the link's idle time still works."""
    a = nodes.start("a", config={"link_idle_ms": "300"})
    b = nodes.start("b")
    fill(b, "ki", 2)
    ha = Handles(a.api)
    s, j = ha.open(b.fmt("ki"))
    time.sleep(1.5)
    s, p = ha.purge(j["handle"])
    assert s == 200 and p["message_count"] == 2, p
    ha.close(j["handle"])
