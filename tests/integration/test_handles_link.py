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
