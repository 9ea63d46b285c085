"""Lists of the management API with RabbitMQ's pagination (src/mgmt/pager.c): page,
page_size, name (substring, or use_regex), sort, sort_reverse, the reply shape and the 400s;
full lists streamed in name order. Runs against RabbitMQ too (SLUICE_TEST_TARGET=rabbitmq),
where the management plugin is enabled."""

import amqp
import pytest

from helpers import uname
from test_mgmt import Api


def _declare(broker, names):
    c = broker.amqp()
    ch = c.channel()
    for n in names:
        ch.queue_declare(n, auto_delete=False)
    return c, ch


@pytest.fixture
def api(broker):
    return Api(broker)


def test_page_shape_and_counts(broker, api):
    p = uname("pg")
    names = ["%s-%02d" % (p, i) for i in range(25)]
    c, ch = _declare(broker, names)
    st, body, _ = api.get("/api/queues/%2F?page=2&page_size=10&name=" + p + "&columns=name")
    assert st == 200, body
    assert set(body) >= {"total_count", "item_count", "filtered_count", "page", "page_size",
                         "page_count", "items"}
    assert body["filtered_count"] == 25
    assert body["total_count"] >= 25
    assert (body["page"], body["page_size"], body["page_count"]) == (2, 10, 3)
    assert body["item_count"] == 10
    assert [i["name"] for i in body["items"]] == names[10:20]
    st, body, _ = api.get("/api/queues/%2F?page=3&page_size=10&name=" + p.upper())
    assert st == 200 and body["item_count"] == 5  # the filter ignores case
    for n in names:
        ch.queue_delete(n)


def test_regex_filter_and_sort(broker, api):
    p = uname("rx")
    names = ["%s-a%d" % (p, i) for i in range(4)] + ["%s-b%d" % (p, i) for i in range(3)]
    c, ch = _declare(broker, names)
    for i in range(3):  # b0 gets 1 message, b1 2, b2 3
        for _ in range(i + 1):
            ch.basic_publish(amqp.Message(b"x"), exchange="", routing_key="%s-b%d" % (p, i))
    ch.basic_qos(0, 0, False)  # a sync point: the publishes are in
    st, body, _ = api.get("/api/queues/%2F?page=1&page_size=10&use_regex=true&name="
                          + p + "-B[0-9]$")
    assert st == 200, body
    assert [i["name"] for i in body["items"]] == names[4:]
    st, body, _ = api.get("/api/queues/%2F?page=1&page_size=2&name=" + p
                          + "&sort=messages&sort_reverse=true&columns=name,messages")
    assert st == 200, body
    assert [(i["name"], i["messages"]) for i in body["items"]] == [(names[6], 3), (names[5], 2)]
    assert body["filtered_count"] == 7 and body["page_count"] == 4
    st, body, _ = api.get("/api/queues/%2F?page=1&page_size=3&name=" + p + "&sort_reverse=true")
    assert [i["name"] for i in body["items"]] == names[::-1][:3]
    for n in names:
        ch.queue_delete(n)


def test_pagination_errors(broker, api):
    st, body, _ = api.get("/api/queues?page=0")
    assert st == 400 and body["error"] == "invalid_pagination_parameters", body
    st, body, _ = api.get("/api/queues?page=1&page_size=501")
    assert st == 400 and body["error"] == "invalid_pagination_parameters", body
    st, body, _ = api.get("/api/queues?page=x")
    assert st == 400, body
    st, body, _ = api.get("/api/queues?page=100000&page_size=500")
    assert st == 400 and body["error"] == "page_out_of_range", body


@pytest.mark.sluice_only("a regular expression that does not compile is a 400 here; "
                         "RabbitMQ answers 500")
def test_bad_regex_is_400(broker, api):
    st, body, _ = api.get("/api/queues?page=1&use_regex=true&name=(")
    assert st == 400 and "regular expression" in body["reason"], body


def test_full_list_is_streamed_in_name_order(broker, api):
    p = uname("full")
    names = ["%s-%04d" % (p, i) for i in range(1500)]
    c, ch = _declare(broker, names[::-1])
    st, body, _ = api.get("/api/queues/%2F?columns=name")
    assert st == 200
    got = [i["name"] for i in body if i["name"].startswith(p)]
    assert got == names
    st, body, _ = api.get("/api/queues/%2F?columns=name&sort=name&sort_reverse=true")
    got = [i["name"] for i in body if i["name"].startswith(p)]
    assert got == names[::-1]
    # the default order, page by page, has every queue once
    seen = []
    page = 1
    while True:
        st, body, _ = api.get("/api/queues/%%2F?page=%d&page_size=500&columns=name" % page)
        assert st == 200
        seen += [i["name"] for i in body["items"]]
        if page >= body["page_count"]:
            break
        page += 1
    assert [n for n in seen if n.startswith(p)] == names
    assert seen == sorted(seen)
    for n in names:
        ch.queue_delete(n)


def test_exchanges_paginate(broker, api):
    p = uname("xpg")
    c = broker.amqp()
    ch = c.channel()
    for i in range(5):
        ch.exchange_declare("%s-%d" % (p, i), "fanout", auto_delete=False)
    st, body, _ = api.get("/api/exchanges/%2F?page=1&page_size=2&name=" + p + "&columns=name")
    assert st == 200, body
    assert body["filtered_count"] == 5 and body["page_count"] == 3
    assert [i["name"] for i in body["items"]] == ["%s-0" % p, "%s-1" % p]
    for i in range(5):
        ch.exchange_delete("%s-%d" % (p, i))
