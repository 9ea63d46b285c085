"""A message published over AMQP 0-9-1 into a stream, read over the stream protocol: it comes as
an AMQP 1.0 message carrying its properties and headers, as RabbitMQ 3.13 converts it
(amqp/amqp10.c amqp10_from_091); and the other way, a stream protocol message read over AMQP
0-9-1 keeps its properties (amqp10_to_091)."""
import struct

import amqp

import streamraw as sr
from helpers import wait_for
from test_stream_door import create, port_of


def decode(msg):
    """The sections of an AMQP 1.0 bare message: {code: value}, the data sections joined."""
    pos = 0

    def value():
        nonlocal pos
        c = msg[pos]
        pos += 1
        if c == 0x00:  # described: descriptor, then the value
            d = value()
            return ("described", d, value())
        fixed = {0x40: 0, 0x41: 0, 0x42: 0, 0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1,
                 0x55: 1, 0x70: 4, 0x71: 4, 0x72: 4, 0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8}
        if c in fixed:
            raw = msg[pos:pos + fixed[c]]
            pos += fixed[c]
            return {0x40: lambda r: None, 0x41: lambda r: True, 0x42: lambda r: False,
                    0x50: lambda r: r[0], 0x53: lambda r: r[0],
                    0x54: lambda r: struct.unpack(">b", r)[0],
                    0x70: lambda r: struct.unpack(">I", r)[0],
                    0x71: lambda r: struct.unpack(">i", r)[0],
                    0x81: lambda r: struct.unpack(">q", r)[0],
                    0x83: lambda r: ("ts", struct.unpack(">q", r)[0])}.get(c, lambda r: r)(raw)
        if c in (0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3):
            n = msg[pos] if c < 0xb0 else struct.unpack(">I", msg[pos:pos + 4])[0]
            pos += 1 if c < 0xb0 else 4
            raw = msg[pos:pos + n]
            pos += n
            return raw if c in (0xa0, 0xb0) else raw.decode()
        if c in (0xc0, 0xc1, 0xd0, 0xd1):
            wide = c >= 0xd0
            count = msg[pos + 1] if not wide else struct.unpack(">I", msg[pos + 4:pos + 8])[0]
            pos += 2 if not wide else 8
            items = [value() for _ in range(count)]
            if c in (0xc1, 0xd1):
                return dict(zip(items[0::2], items[1::2]))
            return items
        if c == 0x45:
            return []
        raise AssertionError("type 0x%02x at %d" % (c, pos - 1))

    out = {}
    while pos < len(msg):
        _, code, v = value()
        out[code] = out.get(code, b"") + v if code == 0x75 else v
    return out


def test_a_091_message_reaches_a_stream_consumer_with_its_properties(broker_factory):
    b = broker_factory(config={"listeners.stream": "0"})
    port = port_of(b)
    c = sr.StreamClient(port)
    c.connect()
    assert create(c, "conv") == sr.OK
    conn = b.amqp()
    ch = conn.channel()
    ch.basic_publish(amqp.Message(b"hello", content_type="text/plain", priority=5,
                                  delivery_mode=2, correlation_id="c1", message_id="m1",
                                  reply_to="r", timestamp=1700000000, expiration="60000",
                                  application_headers={"colour": "blue", "n": 7, "big": 1 << 40,
                                                       "ok": True}),
                     exchange="", routing_key="conv")
    ch.basic_publish(amqp.Message(b"bare"), exchange="", routing_key="conv")
    conn.close()
    assert c.subscribe(1, "conv", credit=10) == sr.OK
    (_, m1), (_, m2) = wait_for(lambda: c.messages(2), 10)
    s = decode(m1)
    assert s[0x70][:3] == [True, 5, 60000]  # header: durable, priority, ttl
    assert s[0x72] == {"x-exchange": "", "x-routing-key": "conv"}
    props = s[0x73]
    assert props[0] == "m1" and props[4] == "r" and props[5] == "c1" and props[6] == "text/plain"
    assert props[9] == ("ts", 1700000000 * 1000)
    assert s[0x74] == {"colour": "blue", "n": 7, "big": 1 << 40, "ok": True}
    assert s[0x75] == b"hello"
    s = decode(m2)
    assert 0x70 not in s and 0x73 not in s and 0x74 not in s and s[0x75] == b"bare"
    c.close()


def test_a_stream_message_reaches_a_091_consumer_with_its_properties(broker_factory):
    b = broker_factory(config={"listeners.stream": "0"})
    c = sr.StreamClient(port_of(b))
    c.connect()
    assert create(c, "back") == sr.OK
    c.declare_publisher(1, "back")
    c.publish(1, [(1, sr.amqp10(b"hi", properties=["m9", None, None, None, None, None, ("sym", "x/y")],
                                app={"k": "v"}, durable=True))])
    c.confirms(1, 1)
    c.close()
    conn = b.amqp()
    ch = conn.channel()
    ch.basic_qos(0, 10, False)
    got = []
    ch.basic_consume("back", callback=got.append, arguments={"x-stream-offset": "first"})
    wait_for(lambda: conn.drain_events(timeout=0.2) or got, 5, interval=0)
    m = got[0]
    assert m.body == b"hi" and m.properties["message_id"] == "m9"
    assert m.properties["content_type"] == "x/y" and m.headers["k"] == "v"
    assert m.properties["delivery_mode"] == 2
    conn.close()
