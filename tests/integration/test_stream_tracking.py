"""Server-side tracking on streams (issue 47): consumers' stored offsets (StoreOffset /
QueryOffset) and named publishers' sequences (deduplication) are durable: they survive a clean
restart and a kill -9, go with their stream, and a publisher's sequence is never kept beyond
the entries the stream holds (qm_stream_track, persist/streams.c R_STREAM_TRACK)."""
import glob
import os

import pytest

import streamraw as sr
from test_stream_door import create, port_of

pytestmark = pytest.mark.sluice_only("the stream door of a private broker")


def node(broker_factory, data_dir=None):
    b = broker_factory(config={"listeners.stream": "0"}, data_dir=data_dir)
    c = sr.StreamClient(port_of(b))
    c.connect()
    return b, c


def bodies(c, stream, n):
    assert c.subscribe(9, stream, credit=100) == sr.OK
    got = [e for _, e in c.messages(n)]
    assert c.unsubscribe(9) == sr.OK
    return got


def publish(c, pid, ids):
    c.publish(pid, [(i, sr.amqp10(b"m%d" % i)) for i in ids])
    return c.confirms(pid, len(ids))


@pytest.mark.parametrize("stop", ["terminate", "kill9"])
def test_offsets_and_sequences_survive_a_restart(broker_factory, stop):
    b, c = node(broker_factory)
    assert create(c, "s") == sr.OK
    assert c.declare_publisher(1, "s", "app") == sr.OK
    assert publish(c, 1, [1, 2, 3]) == [1, 2, 3]
    c.store_offset("s", "reader", 2)
    # a confirm after it: the generation that made 4 durable wrote the offset too
    assert publish(c, 1, [4]) == [4]
    assert c.query_offset("s", "reader") == (sr.OK, 2)
    data_dir = b.data_dir
    if stop == "kill9":
        b.kill9()
    else:
        assert b.terminate() == 0
    b, c = node(broker_factory, data_dir=data_dir)
    assert c.query_offset("s", "reader") == (sr.OK, 2)
    assert c.query_publisher_sequence("s", "app") == (sr.OK, 4)
    # a republish of what is stored is confirmed and not stored again
    assert c.declare_publisher(1, "s", "app") == sr.OK
    assert publish(c, 1, [3, 4, 5]) == [3, 4, 5]
    assert bodies(c, "s", 5) == [sr.amqp10(b"m%d" % i) for i in range(1, 6)]
    assert c.query_publisher_sequence("s", "app") == (sr.OK, 5)
    # a later offset replaces the earlier one, across a restart too
    c.store_offset("s", "reader", 4)
    assert publish(c, 1, [6]) == [6]
    data_dir = b.data_dir
    assert b.terminate() == 0
    b, c = node(broker_factory, data_dir=data_dir)
    assert c.query_offset("s", "reader") == (sr.OK, 4)
    assert c.query_publisher_sequence("s", "app") == (sr.OK, 6)


def test_a_stream_made_again_starts_with_nothing_tracked(broker_factory):
    b, c = node(broker_factory)
    assert create(c, "s") == sr.OK
    assert c.declare_publisher(1, "s", "app") == sr.OK
    assert publish(c, 1, [1, 2]) == [1, 2]
    c.store_offset("s", "reader", 1)
    assert publish(c, 1, [3]) == [3]
    assert c.delete_publisher(1) == sr.OK
    corr = c.request(sr.DELETE, sr.s16("s"))
    assert c.response(sr.DELETE, corr)[0] == sr.OK
    assert create(c, "s") == sr.OK
    assert c.query_offset("s", "reader")[0] == sr.NO_OFFSET
    assert c.query_publisher_sequence("s", "app") == (sr.OK, 0)
    data_dir = b.data_dir
    assert b.terminate() == 0
    b, c = node(broker_factory, data_dir=data_dir)
    assert c.query_offset("s", "reader")[0] == sr.NO_OFFSET
    assert c.query_publisher_sequence("s", "app") == (sr.OK, 0)


def test_a_sequence_is_dropped_when_its_entries_are_not_on_disk(broker_factory):
    """The record of a sequence reached the disk but the stream's last entries did not (a
    crash between the two files' syncs, made here by cutting the segment file): the sequence
    is not taken, so a republish stores the messages again rather than losing them."""
    b, c = node(broker_factory)
    assert create(c, "s") == sr.OK
    assert c.declare_publisher(1, "s", "app") == sr.OK
    assert publish(c, 1, [1, 2, 3]) == [1, 2, 3]
    data_dir = b.data_dir
    assert b.terminate() == 0
    segs = sorted(glob.glob(os.path.join(data_dir, "streams", "*", "*")))
    segs = [s for s in segs if os.path.getsize(s) > 0 and not s.endswith((".idx", ".tmp"))]
    assert segs, os.listdir(os.path.join(data_dir, "streams"))
    last = segs[-1]
    with open(last, "r+b") as f:  # cut into the last entry: a torn tail
        f.truncate(os.path.getsize(last) - 3)
    b, c = node(broker_factory, data_dir=data_dir)
    assert c.query_publisher_sequence("s", "app") == (sr.OK, 0)
    assert "sequence 3 dropped" in open(b.log_path).read()
    assert c.declare_publisher(1, "s", "app") == sr.OK
    assert publish(c, 1, [3]) == [3]
    assert bodies(c, "s", 3) == [sr.amqp10(b"m1"), sr.amqp10(b"m2"), sr.amqp10(b"m3")]
