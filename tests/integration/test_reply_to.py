"""Direct reply-to (RabbitMQ's amq.rabbitmq.reply-to): an RPC request carries the pseudo-queue
as reply-to, the broker rewrites it to a name of the requesting channel, and a reply published
to that name reaches the channel's reply consumer without any queue. Runs against RabbitMQ too
(SLUICE_TEST_TARGET=rabbitmq)."""

import time

import pika
import pytest

from helpers import uname

PSEUDO = "amq.rabbitmq.reply-to"


def _pump(conn, until, seconds=5):
    deadline = time.monotonic() + seconds
    while not until() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    return until()


def _server_and_client(broker):
    """An RPC server connection with its exclusive request queue, and a client connection."""
    server = broker.pika()
    sch = server.channel()
    rpc = sch.queue_declare(uname("rpc"), exclusive=True).method.queue
    client = broker.pika()
    return server, sch, rpc, client, client.channel()


def test_rpc_round_trip(broker):
    server, sch, rpc, client, cch = _server_and_client(broker)
    replies = []
    cch.basic_consume(PSEUDO, lambda ch, m, p, body: replies.append((m, p, body)),
                      auto_ack=True)
    for i in range(3):
        cch.basic_publish("", rpc, b"ask %d" % i,
                          pika.BasicProperties(reply_to=PSEUDO, correlation_id="c%d" % i))

    # the server sees a reply-to of the requesting channel, answers to it
    asked = []
    deadline = time.monotonic() + 5
    while len(asked) < 3 and time.monotonic() < deadline:
        m, p, body = sch.basic_get(rpc, auto_ack=True)
        if m is None:
            server.process_data_events(time_limit=0.05)
            continue
        assert p.reply_to.startswith(PSEUDO + ".") and len(p.reply_to) > len(PSEUDO) + 8
        asked.append(body)
        sch.basic_publish("", p.reply_to, b"answer to " + body,
                          pika.BasicProperties(correlation_id=p.correlation_id))
    assert asked == [b"ask 0", b"ask 1", b"ask 2"]

    assert _pump(client, lambda: len(replies) == 3), replies
    assert [(p.correlation_id, body) for m, p, body in replies] == [
        ("c0", b"answer to ask 0"), ("c1", b"answer to ask 1"), ("c2", b"answer to ask 2")]
    assert all(m.routing_key.startswith(PSEUDO + ".") for m, p, body in replies)
    # the pseudo-queue answers a passive declare (clients probe for the feature that way)
    assert cch.queue_declare(PSEUDO, passive=True).method.queue == PSEUDO
    client.close()
    server.close()


def test_reply_to_a_closed_channel_is_unroutable(broker):
    server, sch, rpc, client, cch = _server_and_client(broker)
    cch.basic_consume(PSEUDO, lambda *a: None, auto_ack=True)
    cch.basic_publish("", rpc, b"q", pika.BasicProperties(reply_to=PSEUDO))
    _pump(client, lambda: False, 0.2)
    m, p, body = sch.basic_get(rpc, auto_ack=True)
    assert m is not None
    name = p.reply_to
    client.close()
    # the requester is gone: a mandatory reply comes back to the replier
    sch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as ei:
        sch.basic_publish("", name, b"late answer", mandatory=True)
    assert [m.body for m in ei.value.messages] == [b"late answer"]
    server.close()


def test_reply_consumer_must_be_no_ack(broker):
    c = broker.pika()
    ch = c.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as ei:
        ch.basic_consume(PSEUDO, lambda *a: None, auto_ack=False)
    assert ei.value.reply_code == 406
    c.close()


def test_publish_with_reply_to_needs_the_reply_consumer(broker):
    c = broker.pika()
    ch = c.channel()
    q = ch.queue_declare(uname("rpc"), exclusive=True).method.queue
    ch.basic_publish("", q, b"q", pika.BasicProperties(reply_to=PSEUDO))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as ei:
        ch.queue_declare(q, passive=True)  # the error arrives before this reply
    assert ei.value.reply_code == 406
    c.close()
