"""A stream in the web console (issue 47: "Streams listed in ... the console as RabbitMQ lists
them"): the queues list's Type column; a stream's page with its log (segments, size, first and
last offset, leader, members, online) and its consumers each with its offset; a classic queue's
page without the stream section. Chromium + selenium, as test_console.py."""
import pytest

from helpers import wait_for
from test_console import Console, chrome  # noqa: F401  (chrome: the module's browser)

pytestmark = pytest.mark.sluice_only("the web console is Sluice's own")


@pytest.mark.test_timeout(120)
def test_a_stream_page_shows_its_log_and_consumer_offsets(chrome, broker_factory):  # noqa: F811
    b = broker_factory()
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("st1", durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", "st1", b"m%d" % i)
    ch.queue_declare("cl1")
    ch.basic_qos(prefetch_count=2)
    got = []
    ch.basic_consume("st1", lambda c_, m, p, bb: got.append(1), consumer_tag="reader7",
                     arguments={"x-stream-offset": 4})
    wait_for(lambda: (c.process_data_events(0.05), len(got) >= 2)[1], message="deliveries")
    con = Console(chrome, b).start()
    con.go("#/queues")
    wait_for(lambda: "stream" in con.text("#queues-rows"), timeout=10,
             message="no Type column with 'stream'")
    con.go("#/queues/%2F/st1")
    wait_for(lambda: "Segments" in con.text("#queue-stream"), timeout=10)
    rows = con.stable(lambda: {tr.find_element("css selector", "th").text:
                               tr.find_element("css selector", "td").text
                               for tr in con.by("#queue-stream tr")}, "#queue-stream rows")
    assert rows["First offset"] == "0" and rows["Last offset"] == "9", rows
    assert int(rows["Segments"]) >= 1 and rows["Size"] and rows["Leader"], rows
    assert "stream" in con.text("#queue-summary")
    table = con.text("#consumers-table")
    assert "reader7" in table and "Offset" in table
    # the offset column: 4 and 5 delivered, unacked: the next is 6
    cells = con.texts("#consumers-table tbody td")
    assert cells[0] == "reader7" and cells[-1] == "6", cells
    con.shot("stream-queue")
    # a classic queue: no stream section
    con.go("#/queues/%2F/cl1")
    wait_for(lambda: "classic" in con.text("#queue-summary"), timeout=10)
    assert not con.text("#queue-stream")
    assert not con.errors()
    c.close()
