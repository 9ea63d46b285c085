"""MSMQ rules kept across the model and every door (issue 12 item 12): journals of subqueues,
priority order in subqueues, which queues are active, exclusive queues over HTTP, what a purge
reports, and no Message Position Available for a move into a system queue. Sluice only (the
management API and moves): skipped on RabbitMQ."""

import time

import amqp
import pytest

from helpers import uname, wait_for
from test_mgmt import Api, fmt


@pytest.fixture
def api(broker):
    return Api(broker)


def move(api, src, **body):
    s, j, _ = api.post(Api.q(src) + "/move", body)
    assert s == 200, (s, j)
    return j


def test_a_message_consumed_from_a_subqueue_is_journaled(api, ch):
    q = uname("jsub")
    api.declare(q, arguments={"x-journal": True})
    for body in ("direct", "via-sub"):
        api.publish(q, body)
    move(api, q, destination=q + ";retry", lookup_id=api.peek(q)[1]["lookup_id"])
    m = ch.basic_get(q + ";retry", no_ack=False)
    ch.basic_ack(m.delivery_tag)
    assert ch.basic_get(q, no_ack=True).body == b"direct"
    wait_for(lambda: len(api.peek(q + ";journal")) == 2, message="both in the journal")
    assert sorted(m["payload"] for m in api.peek(q + ";journal")) == ["direct", "via-sub"]
    # what is consumed from the journal itself is not journaled again
    assert ch.basic_get(q + ";journal", no_ack=True) is not None
    time.sleep(0.2)
    assert len(api.peek(q + ";journal")) == 1


def test_a_subqueue_of_a_priority_queue_keeps_priority_order(api, ch):
    q = uname("prio")
    api.declare(q, arguments={"x-max-priority": 10})
    for body, prio in (("low", 1), ("high", 9), ("mid", 5), ("none", 0)):
        api.publish(q, body, priority=prio)
    move(api, q, destination=q + ";parked", count=4)
    got = [bytes(ch.basic_get(q + ";parked", no_ack=True).body) for _ in range(4)]
    assert got == [b"high", b"mid", b"low", b"none"]


def test_active_queues_are_the_opened_ones(api, conn):
    idle, used, sub = uname("idle"), uname("used"), uname("subbed")
    for q in (idle, used, sub):
        api.declare(q, arguments={"x-journal": True})
        api.publish(q, "m")
    move(api, sub, destination=sub + ";s", count=1)
    ch = conn.channel()
    ch.basic_consume(used, callback=lambda m: None)
    ch.basic_consume(sub + ";s", callback=lambda m: None)

    def active():
        s, j, _ = api.info("MACHINE", "ACTIVEQUEUES")
        assert s == 200
        return [f.split("\\")[-1] for f in j["values"]["PROPID_MGMT_MSMQ_ACTIVEQUEUES"]]

    got = active()
    assert used in got and sub + ";s" in got
    assert idle not in got and sub not in got
    assert not any(n.startswith("SYSTEM$") or n.endswith(";journal") for n in got), got


def test_exclusive_queues_are_refused_over_http_as_over_amqp(api, broker):
    owner = broker.amqp()
    och = owner.channel()
    q = och.queue_declare(uname("excl"), exclusive=True).queue
    och.basic_publish(amqp.Message(b"mine"), exchange="", routing_key=q)
    wait_for(lambda: api.queue(q)["messages"] == 1, message="published")
    other = uname("other")
    api.declare(other)
    lid = api.peek(q)[0]["lookup_id"]  # reading views stay open to operators
    for method, path, body in (
            ("DELETE", Api.q(q) + "/contents", None),
            ("POST", Api.q(q) + "/get", {"count": 1, "ackmode": "ack_requeue_false"}),
            ("DELETE", Api.q(q), None),
            ("POST", Api.q(q) + "/move", {"destination": other, "lookup_id": lid}),
            ("POST", Api.q(q) + "/move", {"destination": q + ";s", "lookup_id": lid})):
        s, j, _ = api.request(method, path, body=body)
        assert s == 409 and "exclusive access to locked queue" in j["reason"], (path, s, j)
    api.publish(other, "into-exclusive")
    s, j, _ = api.post(Api.q(other) + "/move", {"destination": q, "count": 1})
    assert s == 409, (s, j)
    assert api.queue(q)["messages"] == 1 and api.queue(other)["messages"] == 1
    assert och.basic_get(q, no_ack=True).body == b"mine"  # the owner still has it


def test_purge_reports_what_this_purge_made_purge_pending(api, conn):
    q = uname("ppc")
    api.declare(q)
    ch = conn.channel()
    api.publish(q, "a")
    assert ch.basic_get(q, no_ack=False) is not None
    s, j, _ = api.delete(Api.q(q) + "/contents")
    assert s == 200 and j == {"message_count": 0, "purge_pending": 1}
    api.publish(q, "b")
    api.publish(q, "c")
    assert ch.basic_get(q, no_ack=False) is not None
    s, j, _ = api.delete(Api.q(q) + "/contents")
    assert s == 200 and j == {"message_count": 1, "purge_pending": 1}, j
    assert api.queue(q)["messages_purge_pending"] == 2


def test_a_move_into_a_system_queue_does_not_wake_its_readers(api, conn):
    # MS-MQDMPR Move Message raises Message Position Available only for a target that is not
    # a System queue: a consumer waiting on the dead-letter queue is not handed the message.
    sysq = "sluice.system.deadletter"
    ch = conn.channel()
    got = []
    ch.basic_consume(sysq, callback=got.append, no_ack=True)
    q = uname("tosys")
    api.declare(q)
    api.publish(q, "moved")
    move(api, q, destination=sysq, count=1)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        try:
            conn.drain_events(timeout=0.1)
        except Exception:
            pass
    assert got == [], "a move into a system queue woke its reader"
    assert [m["payload"] for m in api.peek(sysq)] == ["moved"]
    # a move into an ordinary queue does wake its readers
    q2 = uname("ordinary")
    api.declare(q2)
    ch.basic_consume(q2, callback=got.append, no_ack=True)
    api.publish(q, "moved2")
    move(api, q, destination=q2, count=1)
    conn.drain_events(timeout=2)
    assert [bytes(m.body) for m in got] == [b"moved2"]
