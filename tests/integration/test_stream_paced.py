"""stream.paced_confirms (docs/configuration.md): a stream protocol publisher with confirms
outstanding has the syncs its confirms wait for paced by sync_pace_us, even while no more input
comes. Its confirms still come (the pace's timer starts the sync once nothing else does) and
still mean durable: a kill -9 after them loses nothing."""
import streamraw as sr
from test_stream_door import create, port_of


def node(broker_factory, data_dir=None):
    b = broker_factory(config={"listeners.stream": "0", "stream.paced_confirms": "true",
                               "sync_pace_us": "50000"}, data_dir=data_dir)
    c = sr.StreamClient(port_of(b))
    c.connect()
    return b, c


def test_paced_confirms_come_and_are_durable(broker_factory):
    b, c = node(broker_factory)
    assert create(c, "s") == sr.OK
    assert c.declare_publisher(1, "s") == sr.OK
    # one frame alone (nothing outstanding: not paced), then 20 pipelined (paced)
    c.publish(1, [(0, sr.amqp10(b"m0"))])
    assert c.confirms(1, 1) == [0]
    ids = list(range(1, 201))
    for k in range(20):
        c.publish(1, [(i, sr.amqp10(b"m%d" % i)) for i in ids[10 * k:10 * k + 10]])
    assert sorted(c.confirms(1, 200)) == ids  # the last ones with no input after them
    data_dir = b.data_dir
    b.kill9()
    b, c = node(broker_factory, data_dir=data_dir)
    assert c.subscribe(9, "s", credit=100) == sr.OK
    got = [e for _, e in c.messages(201)]
    assert got == [sr.amqp10(b"m%d" % i) for i in range(201)]
