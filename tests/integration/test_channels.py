"""Channels: open, close, reuse of ids, channel_max."""

import pytest

from helpers import uname


def test_channel_open_close_reopen_raw(broker):
    r = broker.raw()
    r.open_channel(1)
    r.open_channel(2)
    ok = r.rpc(1, "channel.close", reply_code=200, reply_text="done", class_id=0, method_id=0)
    assert ok.name == "channel.close-ok"
    # the id can be reused after close-ok, and channel 2 is unaffected
    r.open_channel(1)
    r.rpc(2, "queue.declare", queue=uname("c2"), exclusive=True)
    r.rpc(1, "queue.declare", queue=uname("c1"), exclusive=True)


def test_channel_open_close_pika(broker):
    c = broker.pika()
    chans = [c.channel() for _ in range(5)]
    assert all(ch.is_open for ch in chans)
    for ch in chans[:3]:
        ch.close()
        assert ch.is_closed
    assert chans[3].is_open and chans[4].is_open
    chans[4].queue_declare(uname("chan"), exclusive=True)


def test_channel_error_closes_only_that_channel(broker):
    r = broker.raw()
    r.open_channel(1)
    r.open_channel(2)
    r.send_method(1, "queue.declare", queue=uname("missing"), passive=True)
    res = r.wait_close()
    assert res.kind == "channel" and res.channel == 1 and res.reply_code == 404, res
    # channel 2 still works, channel 1 can be opened again
    r.rpc(2, "queue.declare", queue=uname("ok"), exclusive=True)
    r.open_channel(1)


def test_channels_up_to_channel_max_open(broker):
    r = broker.raw(channel_max=3)
    for ch in (1, 2, 3):
        r.open_channel(ch)


def test_channel_max_enforced(broker):
    # RabbitMQ 3.10.8 (measured) refuses a channel beyond the negotiated
    # count with 530 "number of channels opened (2) has reached the
    # negotiated channel_max (2)"; Sluice refuses it too.
    r = broker.raw(channel_max=2)
    r.open_channel(1)
    r.open_channel(2)
    r.send_method(3, "channel.open")
    res = r.wait_close()
    assert res.kind == "connection" and res.reply_code == 530, res
    r.assert_eof()
    broker.assert_alive()


@pytest.mark.sluice_only("RabbitMQ 3.10 only counts open channels; it accepts a channel id "
                         "above channel-max while fewer channels are open")
def test_channel_id_above_channel_max_530(broker):
    r = broker.raw(channel_max=2)
    r.send_method(3, "channel.open")
    res = r.wait_close()
    assert res.kind == "connection" and res.reply_code == 530, res
    r.assert_eof()


@pytest.mark.sluice_only("RabbitMQ 3.10 only counts open channels; it accepts a channel id "
                         "above channel-max while fewer channels are open")
def test_channel_above_default_channel_max(broker):
    r = broker.raw()
    assert r.channel_max == 2047
    r.open_channel(2047)
    r.send_method(2048, "channel.open")
    res = r.wait_close()
    assert res.kind == "connection" and res.reply_code == 530, res
