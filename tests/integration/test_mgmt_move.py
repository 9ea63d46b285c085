"""Move Message over HTTP: subqueues, transactions, system queues, and the errors of
MS-MQDMPR 3.1.7.1.16 (reference/msmq.md section 2.2)."""

import urllib.parse

import amqp
import pytest

from helpers import expect_channel_error, uname, wait_for
from test_mgmt import Api, fmt


@pytest.fixture
def api(broker):
    return Api(broker)


def hr(j):
    return j["hresult_name"]


def move(api, src, **body):
    return api.post(Api.q(src) + "/move", body)


def fill(api, n, prefix="m"):
    q = uname("mv")
    api.declare(q)
    for i in range(n):
        api.publish(q, "%s%d" % (prefix, i))
    return q, [m["lookup_id"] for m in api.peek(q)]


def begin(api):
    s, j, _ = api.post("/api/transactions")
    assert s == 201 and hr(j) == "MQ_OK"
    return j["id"]


def test_move_by_id_into_new_subqueue(api, ch):
    q, ids = fill(api, 3)
    s, j, _ = move(api, q, destination=q + ";poison", lookup_id=ids[1])
    assert s == 200 and hr(j) == "MQ_OK" and j["hresult"] == "0x00000000" and j["moved"] == 1
    assert [m["payload"] for m in api.peek(q)] == ["m0", "m2"]
    sub = api.peek(q + ";poison")
    assert [(m["payload"], m["lookup_id"], m["move_count"]) for m in sub] == [("m1", ids[1], 1)]
    s, subs, _ = api.get(Api.q(q) + "/subqueues")
    assert [x["name"] for x in subs] == [q + ";poison"] and subs[0]["messages"] == 1
    assert api.queue(q)["subqueues"] == ["poison"]
    s, j, _ = api.info(fmt(q), "SUBQUEUE_COUNT", "SUBQUEUE_NAMES")
    assert j["values"] == {"PROPID_MGMT_QUEUE_SUBQUEUE_COUNT": 1,
                           "PROPID_MGMT_QUEUE_SUBQUEUE_NAMES": ["poison"]}
    # consumable over AMQP by its name, and it keeps the move count
    msg = ch.basic_get(q + ";poison", no_ack=True)
    assert msg is not None and bytes(msg.body) == b"m1"
    # gone when empty and unused
    wait_for(lambda: api.get(Api.q(q + ";poison"))[0] == 404, message="empty subqueue removed")
    assert api.queue(q)["subqueues"] == []


def test_move_count_and_back(api):
    q, ids = fill(api, 5)
    s, j, _ = move(api, q, destination=q + ";retry", count=3)
    assert s == 200 and j["moved"] == 3
    assert [m["lookup_id"] for m in api.peek(q + ";retry")] == ids[:3]
    # moving back into the parent puts them in lookup-id order again
    s, j, _ = move(api, q + ";retry", destination=q, count=10)
    assert s == 200 and j["moved"] == 3
    back = api.peek(q)
    assert [m["lookup_id"] for m in back] == ids
    assert [m["move_count"] for m in back] == [2, 2, 2, 0, 0]


def test_move_to_other_queue_and_system_queue(api):
    q, ids = fill(api, 2)
    other = uname("other")
    api.declare(other)
    s, j, _ = move(api, q, destination=other, lookup_id=ids[0])
    assert s == 200 and api.peek(other)[0]["lookup_id"] == ids[0]
    s, j, _ = move(api, q, destination="sluice.system.deadletter", lookup_id=ids[1])
    assert s == 200, j
    assert any(m["lookup_id"] == ids[1] for m in api.peek("sluice.system.deadletter"))
    s, j, _ = move(api, other, destination="DIRECT=OS:.\\SYSTEM$;DEADLETTER", count=1)
    assert s == 200 and j["destination"] == "sluice.system.deadletter"


def test_transactional_move_commit(api, ch):
    q, ids = fill(api, 2)
    tx = begin(api)
    s, j, _ = move(api, q, destination=q + ";held", lookup_id=ids[0], transaction=tx)
    assert s == 200 and hr(j) == "MQ_OK" and j["transaction"] == tx
    info = api.queue(q)
    assert info["messages_ready"] == 1 and info["messages"] == 2  # Locked, still counted
    assert api.peek(q + ";held") == []
    assert bytes(ch.basic_get(q, no_ack=False).body) == b"m1"  # the locked one is not delivered
    s, txs, _ = api.get("/api/transactions")
    assert {"id": tx, "operations": 1} in txs
    s, j, _ = api.post("/api/transactions/%d/commit" % tx)
    assert s == 200 and hr(j) == "MQ_OK" and j["outcome"] == "committed"
    held = api.peek(q + ";held")
    assert [(m["lookup_id"], m["move_count"]) for m in held] == [(ids[0], 1)]
    # a transaction that is no longer open: MS-MQDMPR's Commit gives TRANSACTION_SEQUENCE
    s, j, _ = api.post("/api/transactions/%d/commit" % tx)
    assert 400 <= s < 500 and hr(j) == "MQ_ERROR_TRANSACTION_SEQUENCE"
    assert j["hresult"] == "0xC00E0051"


def test_transactional_move_abort(api):
    q, ids = fill(api, 3)
    tx = begin(api)
    s, j, _ = move(api, q, destination=q + ";x", count=2, transaction=tx)
    assert s == 200 and j["moved"] == 2
    assert api.queue(q)["messages_ready"] == 1
    s, j, _ = api.post("/api/transactions/%d/abort" % tx)
    assert s == 200 and j["outcome"] == "aborted"
    back = api.peek(q)
    assert [m["lookup_id"] for m in back] == ids and all(m["move_count"] == 0 for m in back)
    wait_for(lambda: api.get(Api.q(q + ";x"))[0] == 404, message="unused subqueue removed")
    tx2 = begin(api)
    s, _, _ = api.delete("/api/transactions/%d" % tx2)
    assert s == 200
    s, j, _ = api.post("/api/transactions/%d/abort" % tx2)
    assert hr(j) == "MQ_ERROR_TRANSACTION_SEQUENCE"
    s, j, _ = api.get("/api/transactions/%d" % tx2)
    assert hr(j) == "MQ_ERROR_TRANSACTION_SEQUENCE"


def test_move_errors(api, ch):
    q, ids = fill(api, 3)
    tx = begin(api)
    s, j, _ = move(api, q, destination="sluice.system.deadletter", lookup_id=ids[0],
                   transaction=tx)
    assert s == 400 and hr(j) == "MQ_ERROR_TRANSACTION_USAGE" and j["hresult"] == "0xC00E0050"
    assert api.queue(q)["messages_ready"] == 3, "a refused move changed something"
    s, j, _ = move(api, q, destination=q + ";a", lookup_id=10 ** 12)
    assert s == 404 and hr(j) == "MQ_ERROR_MESSAGE_NOT_FOUND" and j["hresult"] == "0xC00E0088"
    assert api.get(Api.q(q + ";a"))[0] == 404, "a failed move created a subqueue"
    # locked by another transaction
    s, j, _ = move(api, q, destination=q + ";a", lookup_id=ids[0], transaction=tx)
    assert s == 200
    s, j, _ = move(api, q, destination=q + ";b", lookup_id=ids[0])
    assert s == 409 and hr(j) == "MQ_ERROR_MESSAGE_LOCKED_UNDER_TRANSACTION"
    assert j["hresult"] == "0xC00E009C"
    tx2 = begin(api)
    s, j, _ = move(api, q, destination=q + ";b", lookup_id=ids[0], transaction=tx2)
    assert hr(j) == "MQ_ERROR_MESSAGE_LOCKED_UNDER_TRANSACTION"
    # locked by an AMQP consumer (delivered, unacked)
    m = ch.basic_get(q, no_ack=False)
    assert bytes(m.body) == b"m1"
    s, j, _ = move(api, q, destination=q + ";b", lookup_id=ids[1])
    assert hr(j) == "MQ_ERROR_MESSAGE_LOCKED_UNDER_TRANSACTION"
    # bad requests
    for body in ({"destination": q + ";b"}, {"destination": q + ";b", "count": 1, "lookup_id": 1},
                 {"destination": q + ";b", "count": -1}, {"count": 1},
                 {"destination": q + ";bad/name", "count": 1}):
        s, j, _ = move(api, q, **body)
        assert s == 400 and hr(j) == "MQ_ERROR_INVALID_PARAMETER", body
    s, j, _ = move(api, q, destination=q, count=1)
    assert s == 400 and hr(j) == "MQ_ERROR_INVALID_PARAMETER"
    s, j, _ = move(api, q, destination=uname("nosuch"), count=1)
    assert s == 404 and hr(j) == "MQ_ERROR_QUEUE_NOT_FOUND"
    s, j, _ = move(api, q, destination=q + ";b", count=1, transaction=987654)
    assert hr(j) == "MQ_ERROR_TRANSACTION_SEQUENCE" and j["hresult"] == "0xC00E0051"
    api.post("/api/transactions/%d/abort" % tx)
    api.post("/api/transactions/%d/abort" % tx2)


def test_subqueue_rules(api, ch, conn):
    q, ids = fill(api, 2)
    move(api, q, destination=q + ";s", count=2)
    # never a publish target
    assert api.publish(q + ";s", "direct") is False
    ch.basic_publish(amqp.Message(b"amqp"), exchange="", routing_key=q + ";s")
    assert api.queue(q + ";s")["messages"] == 2
    # not declarable, not deletable on its own
    s, j, _ = api.put(Api.q(q + ";s"), {"durable": False})
    assert s == 403
    s, j, _ = api.delete(Api.q(q + ";s"))
    assert s == 400 and "deleted with its queue" in j["reason"]
    # purgeable over AMQP and the API
    ch2 = conn.channel()
    assert ch2.queue_purge(q + ";s") == 2
    move(api, q + ";s", destination=q, count=0)
    api.publish(q, "again")
    move(api, q, destination=q + ";s", count=1)
    s, j, _ = api.delete(Api.q(q + ";s") + "/contents")
    assert s == 200 and j["message_count"] == 1
    # deleted with its queue
    api.publish(q, "x")
    move(api, q, destination=q + ";t", count=1)
    s, _, _ = api.delete(Api.q(q))
    assert s == 204
    assert api.get(Api.q(q + ";t"))[0] == 404
    api.declare(q)
    assert api.queue(q)["subqueues"] == [] and api.queue(q)["messages"] == 0


def test_subqueue_consumer_keeps_it(api, conn):
    q, ids = fill(api, 1)
    move(api, q, destination=q + ";c", count=1)
    ch = conn.channel()
    got = []
    ch.basic_consume(q + ";c", callback=lambda m: got.append(m.body), no_ack=True)
    conn.drain_events(timeout=2)
    assert [bytes(b) for b in got] == [b"m0"]
    # empty but used: still there
    assert api.get(Api.q(q + ";c"))[0] == 200


# ---------------------------------------------------------------------------
# Delete guards see the whole queue: its subqueues and journal go with it (issue 12 item 2)
# ---------------------------------------------------------------------------
def test_delete_if_empty_sees_subqueues(api, conn, ch):
    q, ids = fill(api, 2)
    move(api, q, destination=q + ";poison", count=2)
    assert api.queue(q)["messages"] == 0  # the queue itself is empty...
    s, j, _ = api.delete(Api.q(q) + "?if-empty=true")
    assert 400 <= s < 500 and "not empty" in j["reason"], (s, j)  # ...but not its subqueue
    expect_channel_error(conn, 406, ch.queue_delete, q, if_empty=True)
    ch = conn.channel()
    assert [m["lookup_id"] for m in api.peek(q + ";poison")] == ids, "a refused delete lost data"
    # the count is what the delete destroyed, subqueues included
    assert ch.queue_delete(q) == 2
    assert api.get(Api.q(q + ";poison"))[0] == 404


def test_delete_if_empty_sees_the_journal(api, conn, ch):
    q = uname("jdel")
    api.declare(q, arguments={"x-journal": True})
    api.publish(q, "kept")
    assert ch.basic_get(q, no_ack=True) is not None
    wait_for(lambda: len(api.peek(q + ";journal")) == 1, message="journal copy")
    s, j, _ = api.delete(Api.q(q) + "?if-empty=true")
    assert 400 <= s < 500, (s, j)
    expect_channel_error(conn, 406, ch.queue_delete, q, if_empty=True)
    ch = conn.channel()
    assert [m["payload"] for m in api.peek(q + ";journal")] == ["kept"]
    assert ch.queue_delete(q) == 1


def test_delete_if_unused_sees_subqueue_consumers(api, conn, ch):
    q, ids = fill(api, 1)
    move(api, q, destination=q + ";c", count=1)
    cch = conn.channel()
    got = []
    cch.basic_consume(q + ";c", callback=lambda m: got.append(m), no_ack=False)
    conn.drain_events(timeout=2)
    assert len(got) == 1
    s, j, _ = api.delete(Api.q(q) + "?if-unused=true")
    assert 400 <= s < 500 and "in use" in j["reason"], (s, j)
    expect_channel_error(conn, 406, ch.queue_delete, q, if_unused=True)
    assert api.get(Api.q(q + ";c"))[0] == 200
    ch = conn.channel()
    assert ch.queue_delete(q) == 1  # the unacked one in the subqueue is destroyed too


# ---------------------------------------------------------------------------
# The target's limits and TTL apply to a move; moves stay inside a vhost (issue 12 item 4)
# ---------------------------------------------------------------------------
FULL = "MQ_ERROR_INSUFFICIENT_RESOURCES"


@pytest.mark.parametrize("overflow", ["reject-publish", "reject-publish-dlx", "drop-head"])
def test_move_respects_the_targets_max_length(api, overflow):
    q, ids = fill(api, 3)
    full = uname("full")
    api.declare(full, arguments={"x-max-length": 1, "x-overflow": overflow})
    s, j, _ = move(api, q, destination=full, count=3)
    assert s == 409 and hr(j) == FULL and j["hresult"] == "0xC00E0027", (s, j)
    assert j["moved"] == 1 and "full" in j["reason"]
    assert [m["lookup_id"] for m in api.peek(full)] == ids[:1]
    assert [m["lookup_id"] for m in api.peek(q)] == ids[1:], "a refused move lost data"
    s, j, _ = move(api, q, destination=full, lookup_id=ids[2])
    assert s == 409 and hr(j) == FULL and "moved" not in j
    assert [m["lookup_id"] for m in api.peek(full)] == ids[:1], "a move dropped the head"
    assert api.queue(q)["messages"] == 2


def test_move_respects_the_targets_max_length_bytes(api):
    q = uname("src")
    api.declare(q)
    for body in ("12345", "67890"):
        api.publish(q, body)
    small = uname("small")
    api.declare(small, arguments={"x-max-length-bytes": 8})
    s, j, _ = move(api, q, destination=small, count=2)
    assert s == 409 and hr(j) == FULL and j["moved"] == 1
    assert [m["payload"] for m in api.peek(small)] == ["12345"]
    assert [m["payload"] for m in api.peek(q)] == ["67890"]


def test_transactional_move_into_a_queue_that_filled_up_is_voided(api):
    q, ids = fill(api, 2)
    full = uname("full")
    api.declare(full, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    tx = begin(api)
    for lid in ids:  # each fits on its own when it is asked for
        s, j, _ = move(api, q, destination=full, lookup_id=lid, transaction=tx)
        assert s == 200, (s, j)
    s, j, _ = api.post("/api/transactions/%d/commit" % tx)
    assert s == 200 and j["outcome"] == "committed" and j["moves_voided"] == 1, j
    assert [m["lookup_id"] for m in api.peek(full)] == ids[:1]
    assert [(m["lookup_id"], m["move_count"]) for m in api.peek(q)] == [(ids[1], 0)]


def test_move_applies_the_targets_ttl(api):
    q, ids = fill(api, 1)
    short = uname("short")
    api.declare(short, arguments={"x-message-ttl": 300})
    s, j, _ = move(api, q, destination=short, count=1)
    assert s == 200 and j["moved"] == 1
    wait_for(lambda: api.queue(short)["messages"] == 0, timeout=5,
             message="the target's x-message-ttl expired the moved message")


def test_move_out_of_a_ttl_queue_leaves_its_ttl_behind(api):
    # x-message-ttl is how long a message may wait in that queue: moved into a subqueue (no
    # TTL of its own) or another queue, it no longer expires on the source's rule.
    q = uname("ttlsrc")
    api.declare(q, arguments={"x-message-ttl": 600})
    api.publish(q, "park")
    api.publish(q, "elsewhere")
    other = uname("nottl")
    api.declare(other)
    ids = [m["lookup_id"] for m in api.peek(q)]
    assert move(api, q, destination=q + ";parked", lookup_id=ids[0])[0] == 200
    assert move(api, q, destination=other, lookup_id=ids[1])[0] == 200
    import time
    time.sleep(1.0)
    assert [m["payload"] for m in api.peek(q + ";parked")] == ["park"]
    assert [m["payload"] for m in api.peek(other)] == ["elsewhere"]
    # moved back, the queue's TTL applies again, counted from the move
    assert move(api, q + ";parked", destination=q, count=1)[0] == 200
    wait_for(lambda: api.queue(q)["messages"] == 0, timeout=5, message="expired again in q")


def test_a_message_keeps_its_own_expiration_across_moves(api):
    q = uname("exp")
    api.declare(q)
    api.publish(q, "short-lived", expiration="700")
    assert move(api, q, destination=q + ";s", count=1)[0] == 200

    def expired():
        # one request: the emptied subqueue may be removed between two of them
        s, j, _ = api.get(Api.q(q + ";s"))
        return s == 404 or (s == 200 and j["messages"] == 0)

    wait_for(expired, timeout=5, message="its own expiration still applies in the subqueue")


def test_moves_across_vhosts_follow_permissions(api, broker_factory):
    """A move needs receive (read) on the source and move (write) on the destination, each
    in its vhost: across vhosts it is allowed exactly when both are held
    (docs/security.md)."""
    assert api.put("/api/vhosts/mvother")[0] in (201, 204)  # guest gets full permissions
    q, ids = fill(api, 2)
    there = uname("there")
    s, _, _ = api.put("/api/queues/mvother/" + there, {"durable": False})
    assert s in (201, 204)
    s, j, _ = move(api, q, destination=there, destination_vhost="mvother", count=1)
    assert s == 200 and j["moved"] == 1, j
    assert api.get("/api/queues/mvother/" + there)[1]["messages"] == 1
    # a user with read on the source vhost but no permission on the destination vhost
    assert api.put("/api/users/mover", {"password": "pw", "tags": "management"})[0] == 201
    assert api.put("/api/permissions/%2F/mover",
                   {"configure": "", "write": "", "read": ".*"})[0] == 201
    mover = Api.__new__(Api)
    mover.__dict__.update(api.__dict__, user="mover", password="pw")
    for body in ({"destination": there, "destination_vhost": "mvother", "count": 1},
                 {"destination": "DIRECT=OS:.\\private$\\mvother/" + there, "count": 1},
                 {"destination": there + ";sub", "destination_vhost": "mvother", "count": 1}):
        s, j, _ = move(mover, q, **body)
        assert s == 403 and hr(j) == "MQ_ERROR_ACCESS_DENIED", (body, s, j)
        assert j["hresult"] == "0xC00E0025" and "mvother" in j["reason"], j
    # inside its own vhost, without write on the destination queue, refused too
    dest = uname("dest")
    assert api.put(Api.q(dest), {"durable": False})[0] == 201
    s, j, _ = move(mover, q, destination=dest, count=1)
    assert s == 403 and "access to queue '%s'" % dest in j["reason"], j
    assert [m["lookup_id"] for m in api.peek(q)] == ids[1:]
    s, j, _ = api.get("/api/queues/mvother/" + there)
    assert s == 200 and j["messages"] == 1