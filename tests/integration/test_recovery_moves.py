"""Every record that names a queue incarnation, replayed after a clean stop and after kill -9:
moves into subqueues and back, moves across queues whose source is deleted afterwards,
transactional moves, dead-lettering and journal copies. A message that is somewhere when the
node stops is there when it starts again (issue 12 item 1). Needs private brokers: skipped
on RabbitMQ (it has no moves)."""

import pika
import pytest

from helpers import uname, wait_for
from test_mgmt import Api


def stop(b, how):
    if how == "kill9":
        b.kill9()
    else:
        assert b.terminate() == 0


def durable_queue(api, name, **arguments):
    s, j, _ = api.put(Api.q(name), {"durable": True, "arguments": arguments})
    assert s in (201, 204), (s, j)


def fill(api, q, n, prefix="m"):
    for i in range(n):
        api.publish(q, "%s%d" % (prefix, i), delivery_mode=2)
    return [m["lookup_id"] for m in api.peek(q)]


def move(api, src, **body):
    s, j, _ = api.post(Api.q(src) + "/move", body)
    assert s == 200, (s, j)
    return j


def commit(api, tx):
    s, j, _ = api.post("/api/transactions/%d/commit" % tx)
    assert s == 200, (s, j)


def begin(api):
    s, j, _ = api.post("/api/transactions")
    assert s == 201, (s, j)
    return j["id"]


def gone(api, name):
    wait_for(lambda: api.get(Api.q(name))[0] == 404, message="%s removed" % name)


def view(api, q):
    return [(m["payload"], m["lookup_id"], m["move_count"]) for m in api.peek(q)]


def restart(broker_factory, b, data, how):
    stop(b, how)
    b2 = broker_factory(data_dir=data)
    return b2, Api(b2)


HOW = pytest.mark.parametrize("how", ["restart", "kill9"])


@HOW
def test_moved_into_a_subqueue_and_back(broker_factory, tmp_path, how):
    # The retry / poison-message workflow: q -> q;s, then q;s -> q; q;s empties and goes.
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    api = Api(b)
    q = uname("mvback")
    durable_queue(api, q)
    ids = fill(api, q, 3)
    move(api, q, destination=q + ";retry", lookup_id=ids[1])
    move(api, q + ";retry", destination=q, count=10)
    gone(api, q + ";retry")
    before = view(api, q)
    assert before == [("m0", ids[0], 0), ("m1", ids[1], 2), ("m2", ids[2], 0)]
    b, api = restart(broker_factory, b, data, how)
    assert view(api, q) == before
    assert api.get(Api.q(q + ";retry"))[0] == 404


@HOW
def test_moved_through_a_subqueue_in_transactions(broker_factory, tmp_path, how):
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    api = Api(b)
    q = uname("mvtx")
    durable_queue(api, q)
    ids = fill(api, q, 2)
    tx = begin(api)
    move(api, q, destination=q + ";held", lookup_id=ids[0], transaction=tx)
    commit(api, tx)
    tx = begin(api)
    move(api, q + ";held", destination=q, count=1, transaction=tx)
    commit(api, tx)
    gone(api, q + ";held")
    b, api = restart(broker_factory, b, data, how)
    assert view(api, q) == [("m0", ids[0], 2), ("m1", ids[1], 0)]


@HOW
def test_moved_to_another_queue_whose_source_is_deleted(broker_factory, tmp_path, how):
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    api = Api(b)
    q1, q2 = uname("src"), uname("dst")
    durable_queue(api, q1)
    durable_queue(api, q2)
    ids = fill(api, q1, 2)
    move(api, q1, destination=q2, lookup_id=ids[0])
    # through another queue's subqueue and out of it again
    move(api, q1, destination=q2 + ";s", lookup_id=ids[1])
    move(api, q2 + ";s", destination=q2, count=1)
    gone(api, q2 + ";s")
    assert api.delete(Api.q(q1))[0] == 204
    b, api = restart(broker_factory, b, data, how)
    assert view(api, q2) == [("m0", ids[0], 1), ("m1", ids[1], 2)]
    assert api.get(Api.q(q1))[0] == 404


@HOW
def test_moved_back_into_a_queue_whose_subqueue_is_deleted_with_it(broker_factory, tmp_path,
                                                                    how):
    # What was in q;s when q was deleted is gone for good; what had been moved out is not.
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    api = Api(b)
    q1, q2 = uname("doomed"), uname("keeper")
    durable_queue(api, q1)
    durable_queue(api, q2)
    ids = fill(api, q1, 2)
    move(api, q1, destination=q1 + ";s", count=2)
    move(api, q1 + ";s", destination=q2, lookup_id=ids[1])
    assert api.delete(Api.q(q1))[0] == 204
    durable_queue(api, q1)  # a new incarnation: starts empty
    b, api = restart(broker_factory, b, data, how)
    assert view(api, q2) == [("m1", ids[1], 2)]
    assert view(api, q1) == []
    assert api.get(Api.q(q1 + ";s"))[0] == 404


@HOW
def test_dead_lettered_message_outlives_its_source(broker_factory, tmp_path, how):
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    q1, q2, x = uname("dlsrc"), uname("dldst"), uname("dlx")
    c = b.pika()
    ch = c.channel()
    ch.exchange_declare(x, "fanout", durable=True)
    ch.queue_declare(q2, durable=True)
    ch.queue_bind(q2, x)
    ch.queue_declare(q1, durable=True, arguments={"x-dead-letter-exchange": x})
    ch.confirm_delivery()
    ch.basic_publish("", q1, b"dead", pika.BasicProperties(delivery_mode=2))
    m, _, body = ch.basic_get(q1)
    assert body == b"dead"
    ch.basic_reject(m.delivery_tag, requeue=False)
    ch.queue_delete(q1)  # a sync point: the reject was handled before
    c.close()
    b, api = restart(broker_factory, b, data, how)
    ch = b.pika().channel()
    m, props, body = ch.basic_get(q2, auto_ack=True)
    assert body == b"dead" and props.headers["x-death"][0]["reason"] == "rejected"


@HOW
def test_journal_copies_and_moves_out_of_the_journal(broker_factory, tmp_path, how):
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    api = Api(b)
    q = uname("jq")
    durable_queue(api, q, **{"x-journal": True})
    ids = fill(api, q, 2)
    c = b.pika()
    ch = c.channel()
    for _ in range(2):
        m, _, _ = ch.basic_get(q)
        ch.basic_ack(m.delivery_tag)
    c.close()
    wait_for(lambda: len(api.peek(q + ";journal")) == 2, message="two journal copies")
    # one copy goes back to q through a subqueue; the journal keeps the other
    move(api, q + ";journal", destination=q + ";again", lookup_id=ids[0])
    move(api, q + ";again", destination=q, count=1)
    gone(api, q + ";again")
    b, api = restart(broker_factory, b, data, how)
    assert view(api, q) == [("m0", ids[0], 2)]
    assert view(api, q + ";journal") == [("m1", ids[1], 0)]


@HOW
def test_a_move_changes_the_stored_ttl_deadline(broker_factory, tmp_path, how):
    # Out of a queue with x-message-ttl into one without: the deadline goes with the move, on
    # disk too (R_MOVE_TTL), so the restart does not bring the source's TTL back. Into a queue
    # with one: the target's deadline is stored, and it passes while the node is down.
    import time
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    api = Api(b)
    src, keep, short = uname("ttlsrc"), uname("keep"), uname("short")
    durable_queue(api, src, **{"x-message-ttl": 1200})
    durable_queue(api, keep)
    durable_queue(api, short, **{"x-message-ttl": 1200})
    durable_queue(api, uname("unused"))
    ids = fill(api, src, 1) + fill(api, keep, 1, prefix="k")
    move(api, src, destination=keep, lookup_id=ids[0])
    move(api, keep, destination=short, lookup_id=ids[1])
    b, api = restart(broker_factory, b, data, how)
    time.sleep(1.5)
    assert view(api, keep) == [("m0", ids[0], 1)]
    wait_for(lambda: api.queue(short)["messages"] == 0, timeout=3,
             message="the deadline the move gave it survived the restart")


@HOW
def test_system_queues_keep_what_a_new_node_put_in_them(broker_factory, tmp_path, how):
    # A node's first life: its system queues had no record of their own incarnation, so what
    # was moved (or dead-lettered) into them was dropped at the first restart.
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    api = Api(b)
    q = uname("tosys")
    durable_queue(api, q)
    fill(api, q, 3)
    move(api, q, destination="sluice.system.deadletter", count=3)
    before = [(p, m) for p, _, m in view(api, "sluice.system.deadletter")]
    assert before == [("m0", 1), ("m1", 1), ("m2", 1)]
    b, api = restart(broker_factory, b, data, how)
    assert [(p, m) for p, _, m in view(api, "sluice.system.deadletter")] == before
    assert view(api, q) == []
    # and in the next life too
    b, api = restart(broker_factory, b, data, how)
    assert [(p, m) for p, _, m in view(api, "sluice.system.deadletter")] == before
