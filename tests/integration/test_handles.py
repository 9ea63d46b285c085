"""MSMQ queue handles over HTTP: open / purge / close / list (MS-MQMP rpc_QMOpenQueueInternal,
rpc_ACPurgeQueue, rpc_ACCloseHandle; reference/msmq.md sections 2.1, 2.8, 5.2, 5.3), with
ownership, the per-user limit, the idle rundown, incarnations and hostile requests.

Remote queue proxies (a format name of another node) need node-to-node links and are tested
with the multi-node harness once it exists."""

import time
import urllib.parse

import amqp
import pytest

from helpers import uname, wait_for
from test_mgmt import Api

OK = ("0x00000000", "MQ_OK")
INVALID_HANDLE = ("0xC00E0007", "MQ_ERROR_INVALID_HANDLE")
STALE_HANDLE = ("0xC00E0056", "MQ_ERROR_STALE_HANDLE")
QUEUE_DELETED = ("0xC00E005A", "MQ_ERROR_QUEUE_DELETED")
NOT_FOUND = ("0xC00E0003", "MQ_ERROR_QUEUE_NOT_FOUND")
ILLEGAL_FMT = ("0xC00E001E", "MQ_ERROR_ILLEGAL_FORMATNAME")
ACCESS_DENIED = ("0xC00E0025", "MQ_ERROR_ACCESS_DENIED")
SHARING = ("0xC00E0009", "MQ_ERROR_SHARING_VIOLATION")
ACCESS_MODE = ("0xC00E0045", "MQ_ERROR_UNSUPPORTED_ACCESS_MODE")
FMT_OP = ("0xC00E0020", "MQ_ERROR_UNSUPPORTED_FORMATNAME_OPERATION")
INVALID = ("0xC00E0006", "MQ_ERROR_INVALID_PARAMETER")
RESOURCES = ("0xC00E0027", "MQ_ERROR_INSUFFICIENT_RESOURCES")


def hr(j):
    return (j["hresult"], j["hresult_name"])


def fmt(q, vhost=None):
    return "DIRECT=OS:.\\private$\\" + (vhost + "/" + q if vhost else q)


class Handles:
    def __init__(self, api):
        self.api = api

    def open(self, format_name=None, ok=True, **body):
        if format_name is not None:
            body["format_name"] = format_name
        s, j, _ = self.api.post("/api/msmq/handles", body)
        if ok:
            assert s == 201 and hr(j) == OK, (s, j)
            assert len(j["handle"]) == 24 and int(j["handle"], 16) >= 0
        return s, j

    def purge(self, h):
        return self.api.post("/api/msmq/handles/%s/purge" % urllib.parse.quote(h, safe=""))[:2]

    def close(self, h):
        return self.api.delete("/api/msmq/handles/%s" % urllib.parse.quote(h, safe=""))[:2]

    def get(self, h):
        return self.api.get("/api/msmq/handles/%s" % urllib.parse.quote(h, safe=""))[:2]

    def list(self, all=False):
        s, j, _ = self.api.get("/api/msmq/handles" + ("?all=true" if all else ""))
        assert s == 200, (s, j)
        return j


@pytest.fixture
def api(broker):
    return Api(broker)


@pytest.fixture
def hs(api):
    return Handles(api)


def publish(api, q, n, prefix="m"):
    for i in range(n):
        api.publish(q, "%s%d" % (prefix, i))


# ---------------------------------------------------------------------------
# Open, purge, close
# ---------------------------------------------------------------------------
def test_open_purge_close_locked_become_purge_pending(api, hs, broker):
    q = uname("h")
    api.declare(q)
    publish(api, q, 5)
    c = broker.amqp()
    ch = c.channel()
    held = ch.basic_get(q, no_ack=False)  # Locked: delivered, not acked
    assert held is not None
    s, j = hs.open(fmt(q), access="receive")
    h = j["handle"]
    assert j["kind"] == "local" and j["queue"] == q and j["vhost"] == "/"
    assert j["access"] == "receive" and j["share"] == "deny_none" and j["user"] == "guest"
    assert j["format_name"].lower().endswith("\\private$\\" + q.lower())
    assert j["queue_deleted"] is False and j["incarnation"] > 0
    s, j = hs.purge(h)
    assert s == 200 and hr(j) == OK, j
    assert j["message_count"] == 4 and j["purge_pending"] == 1 and j["handle"] == h
    info = api.queue(q)
    assert info["messages_ready"] == 0 and info["messages_purge_pending"] == 1
    # the Locked message was purged: rejecting it with requeue does not bring it back
    ch.basic_reject(held.delivery_tag, requeue=True)
    wait_for(lambda: api.queue(q)["messages"] == 0, message="purge-pending message came back")
    assert ch.basic_get(q, no_ack=True) is None
    # the queue goes on: publish and purge again through the same handle
    publish(api, q, 2, "n")
    s, j = hs.purge(h)
    assert s == 200 and j["message_count"] == 2 and j["purge_pending"] == 0
    assert api.queue(q)["message_stats"]["purged"] == 7  # 4 + the pending one + 2
    s, j = hs.close(h)
    assert s == 200 and hr(j) == OK and j["closed"] is True
    assert hs.list() == []
    # closed: a failure HRESULT, nothing purged
    publish(api, q, 1, "after")
    s, j = hs.purge(h)
    assert s == 404 and hr(j) == INVALID_HANDLE and "reason" in j
    s, j = hs.close(h)
    assert s == 404 and hr(j) == INVALID_HANDLE
    assert api.queue(q)["messages"] == 1


def test_open_by_queue_name_and_vhost(api, hs):
    vh = uname("vh")
    s, _, _ = api.put("/api/vhosts/" + vh)
    assert s in (201, 204)
    q = "sub/dir\\odd"  # a name no format name can carry
    s, _, _ = api.put(Api.q(q, vh), {"durable": False})
    assert s == 201
    s, j, _ = api.post("/api/exchanges/%s/amq.default/publish" % vh,
                       {"routing_key": q, "payload": "x", "payload_encoding": "string",
                        "properties": {}})
    assert s == 200 and j["routed"]
    s, j = hs.open(queue=q, vhost=vh)
    assert j["vhost"] == vh and j["queue"] == q
    s, p = hs.purge(j["handle"])
    assert s == 200 and p["message_count"] == 1
    hs.close(j["handle"])
    # a format name "<vhost>/<queue>" reaches another vhost
    q2 = uname("vq")
    s, _, _ = api.put(Api.q(q2, vh), {"durable": False})
    s, j = hs.open(fmt(q2, vh))
    assert j["vhost"] == vh and j["queue"] == q2
    hs.close(j["handle"])
    s, j = hs.open(queue=q2, vhost="no-such-vhost", ok=False)
    assert s == 404 and hr(j) == NOT_FOUND


def test_deleted_and_redeclared_queue_is_never_purged_through_old_handle(api, hs):
    q = uname("inc")
    api.declare(q)
    s, j = hs.open(fmt(q))
    h, inc = j["handle"], j["incarnation"]
    s, _, _ = api.delete(Api.q(q))
    assert s == 204
    api.declare(q)  # the same name, another queue (incarnation)
    publish(api, q, 3)
    s, j = hs.purge(h)
    assert 400 <= s < 500 and hr(j) == QUEUE_DELETED, j
    assert "deleted" in j["reason"]
    assert api.queue(q)["messages"] == 3, "an old handle purged the redeclared queue"
    s, j = hs.get(h)
    assert s == 200 and j["queue_deleted"] is True and j["incarnation"] == inc
    # a new handle reaches the new queue, with its own incarnation
    s, j2 = hs.open(fmt(q))
    assert j2["incarnation"] != inc
    s, p = hs.purge(j2["handle"])
    assert s == 200 and p["message_count"] == 3
    # closing the dead handle is fine (Close Queue ignores a queue that is gone)
    assert hs.close(h)[0] == 200
    assert hs.close(j2["handle"])[0] == 200


def test_open_failures_leave_nothing_open(api, hs):
    q = uname("of")
    api.declare(q)
    cases = [
        ({"format_name": fmt(uname("none"))}, 404, NOT_FOUND),
        ({"queue": uname("none")}, 404, NOT_FOUND),
        ({"format_name": "PUBLIC=1234"}, 400, ILLEGAL_FMT),
        ({"format_name": "DIRECT=XYZ:.\\private$\\" + q}, 400, ILLEGAL_FMT),
        ({"format_name": ""}, 400, ILLEGAL_FMT),
        ({"format_name": "DIRECT=OS:.\\private$\\"}, 400, ILLEGAL_FMT),
        ({"format_name": fmt(q), "access": "write"}, 400, ACCESS_MODE),
        ({"format_name": fmt(q), "access": 0x40}, 400, ACCESS_MODE),
        ({"format_name": fmt(q), "access": 3}, 400, ACCESS_MODE),
        ({"format_name": fmt(q), "access": ["receive"]}, 400, ACCESS_MODE),
        ({"format_name": fmt(q), "access": "receive|admin"}, 400, ACCESS_MODE),
        ({"format_name": fmt(q), "access": "send", "share": "deny_receive"}, 400, ACCESS_MODE),
        ({"format_name": fmt(q), "share": "exclusive"}, 400, INVALID),
        ({"format_name": fmt(q), "share": 7}, 400, INVALID),
        ({"format_name": fmt(q), "queue": q}, 400, INVALID),
        ({}, 400, INVALID),
        ({"format_name": 17}, 400, INVALID),
        ({"queue": q, "vhost": 5}, 400, INVALID),
        ({"format_name": "DIRECT=OS:.\\SYSTEM$;DEADLETTER", "access": "send"}, 400, FMT_OP),
        ({"format_name": fmt(q + ";sub"), "access": "send"}, 400, FMT_OP),
        ({"format_name": "DIRECT=OS:.\\SYSTEM$;NOPE"}, 400, ILLEGAL_FMT),
    ]
    for body, status, code in cases:
        s, j = hs.open(ok=False, **body)
        assert s == status and hr(j) == code and j.get("reason"), (body, s, j)
    s, j, _ = api.post("/api/msmq/handles", raw=b"{not json", headers={
        "Content-Type": "application/json"})
    assert s == 400
    assert hs.list() == []
    assert api.queue(q)["subqueues"] == [], "a refused open left a subqueue behind"


def test_access_modes(api, hs):
    q = uname("am")
    api.declare(q)
    publish(api, q, 2)
    for access, name in [("peek", "peek"), (0x20, "peek"), ("MQ_SEND_ACCESS", "send"),
                         (2, "send"), ("move", "move"), (1, "receive"),
                         ("MQ_RECEIVE_ACCESS", "receive")]:
        s, j = hs.open(fmt(q), access=access)
        assert j["access"] == name
        s, p = hs.purge(j["handle"])
        if name == "receive":
            assert s == 200 and hr(p) == OK
        else:
            # MS-MQMP: only a receive handle may purge
            assert s == 403 and hr(p) == ACCESS_DENIED and "receive" in p["reason"], p
            assert api.queue(q)["messages"] == 2, "a refused purge purged"
        hs.close(j["handle"])
        publish(api, q, 2 - api.queue(q)["messages"])
    # system queues and journals open to receive or peek
    s, j = hs.open("DIRECT=OS:.\\SYSTEM$;DEADLETTER", access="peek")
    hs.close(j["handle"])


def test_sharing_violations(api, hs):
    q = uname("sh")
    api.declare(q)
    s, a = hs.open(fmt(q), access="receive", share="deny_receive")
    assert a["share"] == "deny_receive"
    for body in ({"access": "receive"}, {"access": "peek", "share": "deny_receive"},
                 {"access": "receive", "share": 1}):
        s, j = hs.open(fmt(q), ok=False, **body)
        assert s == 409 and hr(j) == SHARING, (body, j)
    s, p = hs.open(fmt(q), access="peek")  # peekers are not denied
    s, snd = hs.open(fmt(q), access="send")  # nor senders
    hs.close(a["handle"])
    s, r = hs.open(fmt(q), access="receive")  # free again
    s, j = hs.open(fmt(q), ok=False, access="peek", share="deny_receive")
    assert s == 409 and hr(j) == SHARING  # a receiver is open: no exclusive read
    for h in (p, snd, r):
        hs.close(h["handle"])
    s, j = hs.open(fmt(q), access="peek", share="deny_receive")
    s, k = hs.open(fmt(q), ok=False, access="receive")
    assert s == 409 and hr(k) == SHARING
    hs.close(j["handle"])


def test_subqueue_created_by_open_lives_while_open(api, hs):
    q = uname("sq")
    api.declare(q)
    publish(api, q, 3)
    s, j = hs.open(fmt(q + ";poison"))
    assert j["queue"] == q + ";poison"
    time.sleep(0.2)  # several loop turns: an empty subqueue without a handle would be removed
    assert api.queue(q)["subqueues"] == ["poison"]
    s, m, _ = api.post(Api.q(q) + "/move", {"destination": q + ";poison", "count": 2})
    assert s == 200 and m["moved"] == 2
    s, p = hs.purge(j["handle"])
    assert s == 200 and p["message_count"] == 2 and p["queue"] == q + ";poison"
    time.sleep(0.2)
    assert api.queue(q)["subqueues"] == ["poison"], "an open subqueue was removed"
    assert api.queue(q)["messages"] == 1  # the parent was not purged
    hs.close(j["handle"])
    wait_for(lambda: api.queue(q)["subqueues"] == [], message="closed empty subqueue stayed")
    # deleting the parent kills the subqueue's handles too
    s, j = hs.open(fmt(q + ";other"))
    s, _, _ = api.delete(Api.q(q))
    s, p = hs.purge(j["handle"])
    assert hr(p) == QUEUE_DELETED
    hs.close(j["handle"])


# ---------------------------------------------------------------------------
# Ownership, limits, rundown, restart
# ---------------------------------------------------------------------------
USERS = {"user.alice": "pa", "user.alice.tags": "administrator",
         "user.bob": "pb", "user.bob.tags": "administrator",
         "user.carol": "pc", "user.carol.tags": "management"}


def test_handles_belong_to_their_user(broker_factory):
    b = broker_factory(config=USERS)
    alice, bob, carol = Api(b, "alice", "pa"), Api(b, "bob", "pb"), Api(b, "carol", "pc")
    ha, hb, hc = Handles(alice), Handles(bob), Handles(carol)
    q = uname("own")
    alice.declare(q)
    publish(alice, q, 4)
    s, j = ha.open(fmt(q))
    h = j["handle"]
    assert j["user"] == "alice"
    # bob (an administrator too) cannot see, purge or close alice's handle: it does not
    # exist for him, exactly as an unknown id
    for fn in (hb.purge, hb.close, hb.get):
        s, r = fn(h)
        assert s == 404 and hr(r) == INVALID_HANDLE and "bob" in r["reason"], r
    assert hb.list() == []
    assert alice.queue(q)["messages"] == 4, "another user's request purged"
    assert [x["handle"] for x in ha.list()] == [h]
    # administrators may list everyone's handles (read only)
    assert [(x["handle"], x["user"]) for x in hb.list(all=True)] == [(h, "alice")]
    # carol is no administrator: no list of all; and without read permission on the queue
    # no open (receive access needs read, docs/security.md, "Who may do what")
    s, r, _ = carol.get("/api/msmq/handles?all=true")
    assert s == 403 and hr(r) == ACCESS_DENIED
    assert hc.list() == []
    assert alice.put("/api/permissions/%2F/carol",
                     {"configure": "", "write": "", "read": "^nothing$"})[0] == 204
    s, r = hc.open(fmt(q), ok=False)
    assert s == 403 and "access to queue" in r["reason"], r
    s, r = hc.purge(h)  # alice's handle does not exist for carol, as for bob
    assert s == 404 and hr(r) == INVALID_HANDLE
    assert alice.queue(q)["messages"] == 4
    s, r = ha.purge(h)
    assert s == 200 and r["message_count"] == 4
    assert ha.close(h)[0] == 200


def test_per_user_handle_limit(broker_factory):
    b = broker_factory(config=dict(USERS, handle_limit="300"))
    alice, bob = Handles(Api(b, "alice", "pa")), Handles(Api(b, "bob", "pb"))
    q = uname("lim")
    alice.api.declare(q)
    hs = [alice.open(fmt(q), access="peek")[1]["handle"] for _ in range(300)]
    assert len(set(hs)) == 300
    s, j = alice.open(fmt(q), ok=False, access="peek")
    assert s == 429 and hr(j) == RESOURCES and "handle_limit" in j["reason"], j
    assert len(alice.list()) == 300
    # the limit is per user: bob is not starved by alice
    s, j = bob.open(fmt(q))
    bob.close(j["handle"])
    assert alice.close(hs[0])[0] == 200
    s, j = alice.open(fmt(q), access="peek")
    s, j2 = alice.open(fmt(q), ok=False, access="peek")
    assert s == 429
    b.assert_alive()


def test_idle_handles_are_run_down(broker_factory):
    b = broker_factory(config={"handle_idle_timeout": "1"})
    api = Api(b)
    hs = Handles(api)
    q = uname("rd")
    api.declare(q)
    s, idle = hs.open(fmt(q + ";abandoned"))
    s, busy = hs.open(fmt(q))
    assert idle["idle_timeout_s"] == 1
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert hs.get(busy["handle"])[0] == 200  # a use keeps it open
        time.sleep(0.2)
    assert [x["handle"] for x in hs.list()] == [busy["handle"]]
    s, j = hs.purge(idle["handle"])
    assert s == 404 and hr(j) == INVALID_HANDLE
    # the subqueue only the abandoned handle held is gone with it
    wait_for(lambda: api.queue(q)["subqueues"] == [], message="run-down subqueue stayed")
    text = open(b.log_path).read()
    assert "handle %s of user 'guest' closed after" % idle["handle"] in text
    time.sleep(2.0)
    assert hs.list() == []


def test_restart_makes_handles_stale(broker_factory, tmp_path):
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    api, hs = Api(b), Handles(Api(b))
    q = uname("rs")
    api.declare(q, durable=True)
    s, j = hs.open(fmt(q))
    h = j["handle"]
    assert b.terminate() == 0
    b2 = broker_factory(data_dir=data)
    api2, hs2 = Api(b2), Handles(Api(b2))
    api2.publish(q, "kept", delivery_mode=2)
    s, j = hs2.purge(h)
    assert s == 404 and hr(j) == STALE_HANDLE and "earlier run" in j["reason"], j
    assert api2.queue(q)["messages"] == 1
    assert hs2.list() == []


# ---------------------------------------------------------------------------
# Hostile requests
# ---------------------------------------------------------------------------
def test_garbage_handle_ids(api, hs):
    q = uname("gb")
    api.declare(q)
    publish(api, q, 2)
    s, j = hs.open(fmt(q))
    good = j["handle"]
    garbage = ["0", "zz", "x" * 24, good[:-1], good + "0", good.upper() + "g",
               "%00", "..", "../handles", "\u00e9" * 12, "1" * 10000, good[:8] + "0" * 16,
               "ffffffff" + good[8:], "-1", " " + good]
    for g in garbage:
        for fn in (hs.purge, hs.close, hs.get):
            s, r = fn(g)
            assert 400 <= s < 500, (g[:40], s, r)
            if isinstance(r, dict) and "hresult" in r:
                assert r["hresult_name"] in ("MQ_ERROR_INVALID_HANDLE",
                                             "MQ_ERROR_STALE_HANDLE"), r
    # extra path segments and wrong methods
    s, _, _ = api.post("/api/msmq/handles/%s/purge/more" % good)
    assert s == 404
    s, _, _ = api.put("/api/msmq/handles/%s" % good)
    assert s == 405
    s, _, _ = api.get("/api/msmq/handles/%s/purge" % good)
    assert s == 405
    s, _, _ = api.delete("/api/msmq/handles")
    assert s == 405
    s, _, _ = api.post("/api/msmq/handles/%s/close" % good)
    assert s == 404
    # nothing changed: the good handle still works, the queue still has its messages
    assert api.queue(q)["messages"] == 2
    assert [x["handle"] for x in hs.list()] == [good]
    # ids are case-insensitive hex
    s, p = hs.purge(good.upper())
    assert s == 200 and p["message_count"] == 2
    hs.close(good)
