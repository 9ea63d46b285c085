"""The stream door answers CreateSuperStream, Create, Delete and DeleteSuperStream once what
they changed is on disk, as queue.declare of a durable queue answers (the node's group commit,
node_ticket / node_durable): a client told OK that its super stream exists finds it, with its
partitions and bindings, after a kill -9 that came right after the answer.

Every fdatasync is made slow (SLUICE_FAULT sync_delay_ms, store/log.h), and a first command's
sync is under way when the one checked comes: the store's sync thread writes a generation and
syncs it before it takes the next, so the checked command's records are still in the node's
memory when an answer sent at once would be followed by the kill. Without the wait the test
fails whatever the machine's speed (kill -9 keeps what was written, synced or not)."""
import pytest

import streamraw as sr
from test_stream_door import create, opened, port_of
from test_stream_superstreams import create_super, partitions, route

pytestmark = pytest.mark.sluice_only("a private broker, kill -9 and SLUICE_FAULT")

SYNC_DELAY_MS = 700


def slow(broker_factory, data_dir=None):
    b = broker_factory(config={"listeners.stream": "0"}, data_dir=data_dir,
                       env={"SLUICE_FAULT": "sync_delay_ms=%d" % SYNC_DELAY_MS})
    return b, port_of(b)


def restarted(broker_factory, b):
    data_dir = b.data_dir
    b.kill9()
    b2 = broker_factory(config={"listeners.stream": "0"}, data_dir=data_dir)
    return b2, opened(port_of(b2))


def test_create_super_stream_answer_means_durable(broker_factory):
    b, port = slow(broker_factory)
    c = opened(port)
    assert create(c, "first") == sr.OK  # a sync under way (without the wait)
    assert create_super(c, "inv", ["inv-0", "inv-1", "inv-2"], ["a", "b", "c"]) == sr.OK
    b2, c2 = restarted(broker_factory, b)
    assert partitions(c2, "inv") == (sr.OK, ["inv-0", "inv-1", "inv-2"])
    assert route(c2, "b", "inv") == (sr.OK, ["inv-1"])
    assert route(c2, "c", "inv") == (sr.OK, ["inv-2"])
    c2.close()
    b2.assert_alive()


def test_create_and_deletes_answer_means_durable(broker_factory):
    b, port = slow(broker_factory)
    c = opened(port)
    assert create(c, "first") == sr.OK  # a sync under way (without the wait)
    assert create(c, "plain") == sr.OK
    assert create_super(c, "gone", ["gone-0"]) == sr.OK
    assert create(c, "dropped") == sr.OK
    # a later command is answered after the held one, in order
    corr1 = c.request(sr.DELETE, sr.s16("dropped"))
    corr2 = c.request(0x1e, sr.s16("gone"))  # DeleteSuperStream
    assert c.response(sr.DELETE, corr1)[0] == sr.OK
    assert c.response(0x1e, corr2)[0] == sr.OK
    b2, c2 = restarted(broker_factory, b)
    assert c2.metadata("plain")[1][0][1] == sr.OK
    assert c2.metadata("dropped")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    assert partitions(c2, "gone")[0] == sr.STREAM_DOES_NOT_EXIST
    assert c2.metadata("gone-0")[1][0][1] == sr.STREAM_DOES_NOT_EXIST
    assert create(c2, "plain") == sr.STREAM_ALREADY_EXISTS
    c2.close()
    b2.assert_alive()

