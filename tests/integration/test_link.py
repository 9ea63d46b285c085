"""Store and forward between nodes (issue 9): outgoing queues, the link, EOD, the outgoing
queues' management surface.  Uses the multi-node loopback harness (multinode.py)."""

import amqp
import pytest

from helpers import uname


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
