"""The MC-MQAC management object (MSMQManagement + IMSMQQueueManagement /
IMSMQOutgoingQueueManagement) over HTTP: create, init, every member before and after init,
E_NOINTERFACE, ownership, rundown (reference/msmq.md sections 4.1-4.5).

Objects bound to outgoing queues and to queues of another node need node-to-node links and are
tested with the multi-node harness once it exists."""

import time

import pytest

from helpers import uname, wait_for
from test_handles import USERS, hr
from test_mgmt import Api

OK = ("0x00000000", "MQ_OK")
UNINIT = ("0xC00E0094", "MQ_ERROR_UNINITIALIZED_OBJECT")
NOINTERFACE = ("0x80004002", "E_NOINTERFACE")
MEMBER = ("0x80020003", "DISP_E_MEMBERNOTFOUND")
INVALID = ("0xC00E0006", "MQ_ERROR_INVALID_PARAMETER")
NOT_FOUND = ("0xC00E0003", "MQ_ERROR_QUEUE_NOT_FOUND")
ILLEGAL_FMT = ("0xC00E001E", "MQ_ERROR_ILLEGAL_FORMATNAME")
ILLEGAL_PATH = ("0xC00E0014", "MQ_ERROR_ILLEGAL_QUEUE_PATHNAME")
REMOTE_NA = ("0xC00E0069", "MQ_ERROR_REMOTE_MACHINE_NOT_AVAILABLE")
INVALID_HANDLE = ("0xC00E0007", "MQ_ERROR_INVALID_HANDLE")
RESOURCES = ("0xC00E0027", "MQ_ERROR_INSUFFICIENT_RESOURCES")

GETTERS = ["format-name", "machine", "message-count", "foreign-status", "transactional-status",
           "queue-type", "is-local", "bytes-in-queue", "journal-message-count",
           "bytes-in-journal", "state", "next-hops", "eod-get-send-info",
           "eod-get-receive-info"]
ACTIONS = ["resume", "pause", "eod-resend"]
QUEUE_ONLY = ["journal-message-count", "bytes-in-journal", "eod-get-receive-info"]
OUTGOING_ONLY = ["state", "next-hops", "eod-get-send-info"]


def fmt(q):
    return "DIRECT=OS:.\\private$\\" + q


class Mgmt:
    def __init__(self, api):
        self.api = api

    def create(self):
        s, j, _ = self.api.post("/api/msmq/management")
        assert s == 201 and hr(j) == OK and j["initialized"] is False, (s, j)
        assert len(j["id"]) == 24
        return j["id"]

    def init(self, m, **body):
        return self.api.post("/api/msmq/management/%s/init" % m, body)[:2]

    def get(self, m, member):
        return self.api.get("/api/msmq/management/%s/%s" % (m, member))[:2]

    def act(self, m, member):
        return self.api.post("/api/msmq/management/%s/%s" % (m, member))[:2]

    def value(self, m, member):
        s, j = self.get(m, member)
        assert s == 200 and hr(j) == OK, (member, s, j)
        return j


@pytest.fixture
def api(broker):
    return Api(broker)


@pytest.fixture
def mg(api):
    return Mgmt(api)


def test_every_member_fails_uninitialized(mg, api):
    m = mg.create()
    for member in GETTERS:
        s, j = mg.get(m, member)
        assert s == 400 and hr(j) == UNINIT, (member, s, j)
    for member in ACTIONS:
        s, j = mg.act(m, member)
        assert s == 400 and hr(j) == UNINIT, (member, s, j)
    # the MC-MQAC names work as well as the URL forms
    s, j = mg.get(m, "ForeignStatus")
    assert hr(j) == UNINIT
    # IDispatch knows no such member, initialized or not
    s, j = mg.get(m, "purge")
    assert s == 404 and hr(j) == MEMBER
    s, j, _ = api.get("/api/msmq/management/" + m)
    assert s == 200 and j["initialized"] is False and "format_name" not in j


def test_init_rules_and_failed_init_changes_nothing(mg, api):
    q = uname("mi")
    api.declare(q)
    m = mg.create()
    cases = [
        ({}, 400, INVALID),
        ({"pathname": ".\\private$\\" + q, "format_name": fmt(q)}, 400, INVALID),
        ({"pathname": None, "format_name": None}, 400, INVALID),
        ({"format_name": 5}, 400, INVALID),
        ({"format_name": fmt(q), "machine": 7}, 400, INVALID),
        ({"format_name": ""}, 400, ILLEGAL_FMT),
        ({"format_name": "garbage"}, 400, ILLEGAL_FMT),
        ({"format_name": fmt(uname("none"))}, 404, NOT_FOUND),
        ({"pathname": "no-backslash"}, 400, ILLEGAL_PATH),
        ({"pathname": "\\private$\\" + q}, 400, ILLEGAL_PATH),
        ({"pathname": ".\\private$\\" + uname("none")}, 404, NOT_FOUND),
        ({"format_name": fmt(q), "machine": "other-node.example"}, 404, REMOTE_NA),
    ]
    for body, status, code in cases:
        s, j = mg.init(m, **body)
        assert s == status and hr(j) == code and j.get("reason"), (body, s, j)
        s, j = mg.get(m, "message-count")
        assert hr(j) == UNINIT, "a failed Init initialized the object"
    # a good init; the local machine may be named
    for body in ({"format_name": fmt(q)}, {"pathname": ".\\private$\\" + q},
                 {"pathname": "localhost\\private$\\" + q, "machine": "."},
                 {"format_name": "FormatName:" + fmt(q).lower(), "machine": ""}):
        s, j = mg.init(m, **body)
        assert s == 200 and hr(j) == OK and j["initialized"] is True, (body, j)
        assert j["interface"] == "IMSMQQueueManagement"
    # a failed re-init leaves the earlier binding
    s, j = mg.init(m, format_name=fmt(uname("none")))
    assert hr(j) == NOT_FOUND
    assert mg.value(m, "format-name")["value"] == "FormatName:" + fmt(q).lower()


def test_members_of_a_local_queue(mg, api, broker):
    q = uname("mm")
    api.declare(q, arguments={"x-journal": True})
    for i in range(3):
        api.publish(q, "x" * (10 + i))
    c = broker.amqp()
    ch = c.channel()
    m1 = ch.basic_get(q, no_ack=True)  # into the journal
    assert m1 is not None
    held = ch.basic_get(q, no_ack=False)  # Locked: still counted
    m = mg.create()
    s, j = mg.init(m, format_name=fmt(q))
    assert s == 200
    s, info, _ = api.info("QUEUE=" + fmt(q), "MESSAGE_COUNT", "BYTES_IN_QUEUE",
                          "JOURNAL_MESSAGE_COUNT", "BYTES_IN_JOURNAL")
    vals = info["values"]
    expect = {
        "format-name": (fmt(q), None),
        "machine": (api.get("/api/overview")[1]["node"].split("@")[-1], None),
        "message-count": (2, None),
        "foreign-status": (1, "MQ_STATUS_NOT_FOREIGN"),
        "transactional-status": (1, "MQ_XACT_STATUS_NOT_XACT"),
        "queue-type": (1, "MQ_TYPE_PRIVATE"),
        "is-local": (True, "VARIANT_TRUE"),
        "bytes-in-queue": (vals["PROPID_MGMT_QUEUE_BYTES_IN_QUEUE"], None),
        "journal-message-count": (1, None),
        "bytes-in-journal": (vals["PROPID_MGMT_QUEUE_BYTES_IN_JOURNAL"], None),
        "eod-get-receive-info": ([], None),
    }
    assert vals["PROPID_MGMT_QUEUE_MESSAGE_COUNT"] == 2
    assert vals["PROPID_MGMT_QUEUE_BYTES_IN_QUEUE"] == 11 + 12
    assert vals["PROPID_MGMT_QUEUE_BYTES_IN_JOURNAL"] == 10
    for member, (value, name) in expect.items():
        j = mg.value(m, member)
        assert j["value"] == value, (member, j)
        assert j.get("name") == name, (member, j)
        assert j["member"] and j["interface"] in ("IMSMQManagement", "IMSMQQueueManagement")
    # the same values as the MC-MQAC view of GET /api/queues
    view = api.queue(q)
    assert view["ForeignStatus"] == {"value": 1, "name": "MQ_STATUS_NOT_FOREIGN"}
    assert view["MessageCount"] == 2 and view["JournalMessageCount"] == 1
    # the outgoing-queue interface is not there (QueryInterface fails)
    for member in OUTGOING_ONLY:
        s, j = mg.get(m, member)
        assert s == 400 and hr(j) == NOINTERFACE and "IMSMQOutgoingQueueManagement" in j["reason"]
    for member in ACTIONS:
        s, j = mg.act(m, member)
        assert s == 400 and hr(j) == NOINTERFACE
    # getters are GET, actions POST
    assert mg.act(m, "message-count")[0] == 405
    assert mg.get(m, "pause")[0] == 405
    # live values, not a snapshot taken at init
    ch.basic_ack(held.delivery_tag)
    wait_for(lambda: mg.value(m, "message-count")["value"] == 1)
    assert mg.value(m, "journal-message-count")["value"] == 2


def test_system_queue_and_other_vhost(mg, api):
    m = mg.create()
    s, j = mg.init(m, format_name="DIRECT=OS:.\\SYSTEM$;DEADLETTER")
    assert s == 200
    j = mg.value(m, "queue-type")
    assert j["value"] == 2 and j["name"] == "MQ_TYPE_MACHINE"
    vh = uname("vh")
    api.put("/api/vhosts/" + vh)
    q = uname("vq")
    s, _, _ = api.put(Api.q(q, vh), {"durable": False})
    assert s == 201
    s, j = mg.init(m, format_name=fmt(q))
    assert hr(j) == NOT_FOUND  # not in "/"
    s, j = mg.init(m, format_name=fmt(q), vhost=vh)
    assert s == 200 and j["vhost"] == vh
    assert mg.value(m, "message-count")["value"] == 0
    s, j = mg.init(m, format_name=fmt(vh + "/" + q))
    assert s == 200


def test_bound_to_the_format_name_not_to_one_queue(mg, api):
    q = uname("fb")
    api.declare(q)
    api.publish(q, "a")
    m = mg.create()
    mg.init(m, format_name=fmt(q))
    assert mg.value(m, "message-count")["value"] == 1
    api.delete(Api.q(q))
    s, j = mg.get(m, "message-count")
    assert s == 404 and hr(j) == NOT_FOUND
    assert mg.value(m, "format-name")["value"] == fmt(q)  # no R_QMMgmtGetInfo needed
    api.declare(q)
    api.publish(q, "b")
    api.publish(q, "c")
    assert mg.value(m, "message-count")["value"] == 2


def test_objects_are_owned_released_and_limited(broker_factory):
    b = broker_factory(config=dict(USERS, handle_limit="20"))
    alice, bob, carol = (Mgmt(Api(b, "alice", "pa")), Mgmt(Api(b, "bob", "pb")),
                         Mgmt(Api(b, "carol", "pc")))
    q = uname("ow")
    alice.api.declare(q)
    m = alice.create()
    assert alice.init(m, format_name=fmt(q))[0] == 200
    for fn in (lambda: bob.get(m, "message-count"), lambda: bob.init(m, format_name=fmt(q)),
               lambda: bob.api.delete("/api/msmq/management/" + m)[:2]):
        s, j = fn()
        assert s == 404 and hr(j) == INVALID_HANDLE, j
    assert bob.api.get("/api/msmq/management")[1] == []
    assert [o["id"] for o in alice.api.get("/api/msmq/management")[1]] == [m]
    # carol, no administrator, may still read through her own object (reads only)...
    mc = carol.create()
    assert carol.init(mc, format_name=fmt(q))[0] == 200
    assert carol.value(mc, "message-count")["value"] == 0
    # ...but the actions need administrator rights (MSDN: local admin rights)
    s, j = carol.act(mc, "pause")
    assert s == 403
    # released: gone
    s, j, _ = alice.api.delete("/api/msmq/management/" + m)
    assert s == 200 and hr(j) == OK and j["released"] is True
    s, j = alice.get(m, "message-count")
    assert s == 404 and hr(j) == INVALID_HANDLE
    # at most handle_limit objects per user
    ids = [alice.create() for _ in range(20)]
    s, j, _ = alice.api.post("/api/msmq/management")
    assert s == 429 and hr(j) == RESOURCES
    bob.create()  # per user
    for i in ids:
        assert alice.api.delete("/api/msmq/management/" + i)[0] == 200


def test_idle_objects_are_run_down(broker_factory):
    b = broker_factory(config={"handle_idle_timeout": "1"})
    mg = Mgmt(Api(b))
    m = mg.create()
    keep = mg.create()
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert mg.get(keep, "message-count")[0] == 400  # used (uninitialized) keeps it
        time.sleep(0.2)
    s, j = mg.get(m, "message-count")
    assert s == 404 and hr(j) == INVALID_HANDLE
    assert [o["id"] for o in mg.api.get("/api/msmq/management")[1]] == [keep]


def test_garbage_object_ids(mg, api):
    m = mg.create()
    for g in ("0", "x" * 24, m + "0", m[:-1], "1" * 5000, m[:8] + "0" * 16):
        s, j = mg.get(g, "message-count")
        assert 400 <= s < 500 and hr(j) in (INVALID_HANDLE, ("0xC00E0056",
                                                              "MQ_ERROR_STALE_HANDLE")), (g, j)
        s, j = mg.init(g, format_name="x")
        assert 400 <= s < 500
    s, _, _ = api.put("/api/msmq/management/" + m)
    assert s == 405
    s, _, _ = api.get("/api/msmq/management/%s/init" % m)
    assert s == 405
    s, _, _ = api.get("/api/msmq/management/%s/a/b" % m)
    assert s == 404
    s, j, _ = api.post("/api/msmq/management/%s/init" % m, raw=b"[1,2",
                       headers={"Content-Type": "application/json"})
    assert s == 400
    s, j = mg.get(m, "foreign-status")
    assert hr(j) == UNINIT  # still there, still uninitialized
