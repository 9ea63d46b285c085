"""Lists of the management API with RabbitMQ's pagination (src/mgmt/pager.c): page,
page_size, name (substring, or use_regex), sort, sort_reverse, the reply shape and the 400s;
full lists streamed in name order. Queues, exchanges, connections, channels and vhosts page as
in RabbitMQ; bindings, consumers and the lists of a vhost or a connection page here too
(RabbitMQ 3.10 answers those with the plain list: the tests of that are sluice_only, see
DIFFERENCES.md). Runs against RabbitMQ too (SLUICE_TEST_TARGET=rabbitmq): the harness's
private RabbitMQ has the management plugin on."""

import re
import time
import urllib.parse

import amqp
import pytest

from helpers import IS_RABBITMQ, uname
from test_mgmt import Api


def _declare(broker, names):
    c = broker.amqp()
    ch = c.channel()
    for n in names:
        ch.queue_declare(n, auto_delete=False)
    return c, ch


@pytest.fixture
def api(broker):
    port = broker.mgmt_port or getattr(broker, "rmq_mgmt_port", None)
    if port is None:
        pytest.skip("no management API on this broker")
    a = Api.__new__(Api)
    a.host, a.port, a.user, a.password = broker.host, port, "guest", "guest"
    return a


def poll(fn, timeout=20.0):
    """fn() until it is true (RabbitMQ lists connections and channels from statistics
    emitted every 5 s); its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.25)


def q(s):
    return urllib.parse.quote(s, safe="")


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

    def sorted_page():  # RabbitMQ shows message counts once its statistics come
        st, body, _ = api.get("/api/queues/%2F?page=1&page_size=2&name=" + p
                              + "&sort=messages&sort_reverse=true&columns=name,messages")
        return body if st == 200 and all("messages" in i for i in body["items"]) \
            and body["items"][0]["messages"] == 3 else None
    body = poll(sorted_page)
    assert body, "the counts never came"
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


def test_bad_regex_is_400(broker, api):
    """400 bad_request on both; the reason differs (DIFFERENCES.md). RabbitMQ finds the bad
    pattern only when it matches it against an item, so there is one."""
    c, ch = _declare(broker, [uname("rxq")])
    for path in ("/api/queues", "/api/exchanges"):
        st, body, _ = api.get(path + "?page=1&use_regex=true&name=(")
        assert st == 400 and body["error"] == "bad_request", body
        if not IS_RABBITMQ:
            assert "regular expression" in body["reason"], body


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


# ------------------------------------------------------------------------------------------
# Connections, channels, vhosts: paged as in RabbitMQ


def _conn_names(conns):
    out = []
    for c in conns:
        port = c.sock.getsockname()[1] if hasattr(c, "sock") else c.transport.sock.getsockname()[1]
        peer = c.transport.sock.getpeername()
        out.append("127.0.0.1:%d -> %s:%d" % (port, peer[0], peer[1]))
    return out


def _regex_of(names):
    return "^(" + "|".join(re.escape(n) for n in names) + ")"


def test_connections_page_filter_and_sort(broker, api):
    conns = [broker.amqp() for _ in range(5)]
    names = _conn_names(conns)
    rx = q(_regex_of(names))

    def page():
        st, body, _ = api.get("/api/connections?page=1&page_size=2&use_regex=true&name=" + rx)
        return body if st == 200 and body.get("filtered_count") == 5 else None
    body = poll(page)
    assert body, "the 5 connections never listed"
    assert (body["page"], body["page_size"], body["page_count"], body["item_count"]) \
        == (1, 2, 3, 2)
    assert body["total_count"] >= 5
    assert [i["name"] for i in body["items"]] == sorted(names)[:2]  # [vhost, name] order
    st, body, _ = api.get("/api/connections?page=3&page_size=2&use_regex=true&name=" + rx)
    assert st == 200 and [i["name"] for i in body["items"]] == sorted(names)[4:]
    st, body, _ = api.get("/api/connections?page=1&page_size=5&use_regex=true&sort=peer_port"
                          "&sort_reverse=true&columns=name,peer_port&name=" + rx)
    assert st == 200, body
    ports = [i["peer_port"] for i in body["items"]]
    assert ports == sorted(ports, reverse=True) and len(ports) == 5
    assert set(body["items"][0]) == {"name", "peer_port"}
    st, body, _ = api.get("/api/connections?page=4&page_size=2&use_regex=true&name=" + rx)
    assert st == 400 and body["error"] == "page_out_of_range", body
    for c in conns:
        c.close()


def test_channels_page_and_connection_channels(broker, api):
    c = broker.amqp()
    chans = [c.channel() for _ in range(5)]
    cname = _conn_names([c])[0]

    def page():
        st, body, _ = api.get("/api/channels?page=2&page_size=2&name=" + q(cname))
        return body if st == 200 and body.get("filtered_count") == 5 else None
    body = poll(page)
    assert body, "the 5 channels never listed"
    assert body["page_count"] == 3 and body["item_count"] == 2
    want = sorted("%s (%d)" % (cname, ch.channel_id) for ch in chans)
    assert [i["name"] for i in body["items"]] == want[2:4]
    # one channel by its name, and the connection's own list, in the same order
    def one():  # RabbitMQ: 500 until the channel's statistics are in (under load)
        st, body, _ = api.get("/api/channels/" + q(want[0]))
        return body if st == 200 else None
    body = poll(one)
    assert body and body["name"] == want[0], body

    def of_connection():  # RabbitMQ: 500, then [], then the list, as its statistics come
        st, body, _ = api.get("/api/connections/%s/channels" % q(cname))
        return st == 200 and sorted(i["name"] for i in body) == want
    assert poll(of_connection)
    c.close()


def test_vhosts_page(broker, api):
    p = uname("vpg")
    vhosts = ["%s-%d" % (p, i) for i in range(4)]
    for v in vhosts:
        assert api.put("/api/vhosts/" + q(v))[0] in (201, 204)
    try:
        st, body, _ = api.get("/api/vhosts?page=1&page_size=3&name=" + p)
        assert st == 200, body
        assert body["filtered_count"] == 4 and body["page_count"] == 2
        assert [i["name"] for i in body["items"]] == vhosts[:3]
        st, body, _ = api.get("/api/vhosts?page=1&page_size=3&sort_reverse=true&name=" + p)
        assert [i["name"] for i in body["items"]] == vhosts[::-1][:3]
        st, body, _ = api.get("/api/vhosts?page=2&page_size=3&name=" + p.upper())
        assert [i["name"] for i in body["items"]] == vhosts[3:]
    finally:
        for v in vhosts:
            api.delete("/api/vhosts/" + q(v))


@pytest.mark.parametrize("path", ["/api/connections", "/api/channels", "/api/vhosts"])
def test_bad_page_parameters_are_rabbitmqs_400(broker, api, path):
    for qs, size in (("page=0", "undefined"), ("page=-1", "undefined"),
                     ("page=1&page_size=0", "0"), ("page=1&page_size=501", "501"),
                     ("page=1&page_size=-3", "-3")):
        st, body, _ = api.get(path + "?" + qs)
        assert st == 400 and body["error"] == "invalid_pagination_parameters", (qs, body)
        page = qs.split("&")[0][5:]
        assert body["reason"] == "Invalid pagination parameters: page number %s, page size %s" \
            % (page, size), body
    for qs in ("page=x", "page=1&page_size=y", "page=1.5", "page=", "page=%201",
               "page=1&page_size="):
        st, body, _ = api.get(path + "?" + qs)
        assert st == 400 and body == {"error": "bad_request",
                                      "reason": "Pagination parameters are invalid"}, (qs, body)
    st, body, _ = api.get(path + "?page=01&page_size=1")
    assert st == 200 and body["page"] == 1, body
    st, body, _ = api.get(path + "?page=1&page_size=1")
    assert st == 200 and isinstance(body, dict)
    st, body, _ = api.get(path + "?page=1000000&page_size=500")
    assert st == 400 and body["error"] == "page_out_of_range", body
    assert body["reason"].startswith("Page out of range, page: 1000000 page size: 500, len: ")


# ------------------------------------------------------------------------------------------
# Bindings, consumers, a vhost's and a connection's lists: paged here, plain in RabbitMQ 3.10


def _bound_exchange(broker, n, kind="direct"):
    p = uname("bpg")
    c = broker.amqp()
    ch = c.channel()
    x = p + "-x"
    ch.exchange_declare(x, kind, auto_delete=False)
    qs = ["%s-q%02d" % (p, i) for i in range(n)]
    for name in qs:
        ch.queue_declare(name, auto_delete=False)
        ch.queue_bind(name, x, routing_key="rk-" + name)
    return c, ch, p, x, qs


def _cleanup(ch, x, qs):
    for name in qs:
        ch.queue_delete(name)
    ch.exchange_delete(x)


def test_bindings_full_lists_in_rabbitmqs_order(broker, api):
    """The plain lists (no page) on both brokers: RabbitMQ's default sort, [vhost, source,
    destination, ..., routing_key, properties_key]."""
    c, ch, p, x, qs = _bound_exchange(broker, 12)
    st, body, _ = api.get("/api/exchanges/%%2F/%s/bindings/source" % q(x))
    assert st == 200 and isinstance(body, list)
    assert [(b["destination"], b["routing_key"]) for b in body] == [(n, "rk-" + n) for n in qs]
    st, body, _ = api.get("/api/bindings/%2F")
    mine = [(b["source"], b["destination"]) for b in body if b["destination"].startswith(p)]
    assert mine == [("", n) for n in qs] + [(x, n) for n in qs]
    st, body, _ = api.get("/api/queues/%%2F/%s/bindings" % q(qs[3]))
    assert [(b["source"], b["routing_key"]) for b in body] == [("", qs[3]), (x, "rk-" + qs[3])]
    st, body, _ = api.get("/api/bindings/%%2F/e/%s/q/%s" % (q(x), q(qs[5])))
    assert [b["routing_key"] for b in body] == ["rk-" + qs[5]]
    st, body, _ = api.get("/api/bindings/%2F?sort=routing_key&sort_reverse=true")
    keys = [b["routing_key"] for b in body]
    assert keys == sorted(keys, reverse=True)
    _cleanup(ch, x, qs)


@pytest.mark.sluice_only("RabbitMQ 3.10 does not paginate bindings (page is ignored, the "
                         "plain list comes back)")
def test_bindings_paginate(broker, api):
    c, ch, p, x, qs = _bound_exchange(broker, 25)
    st, body, _ = api.get("/api/exchanges/%%2F/%s/bindings/source?page=2&page_size=10" % q(x))
    assert st == 200, body
    assert (body["total_count"], body["filtered_count"], body["page_count"],
            body["item_count"]) == (25, 25, 3, 10)
    assert [b["destination"] for b in body["items"]] == qs[10:20]
    # name= matches source, destination or routing key
    st, body, _ = api.get("/api/bindings/%2F?page=1&page_size=100&name=rk-" + p)
    assert body["filtered_count"] == 25 and {b["source"] for b in body["items"]} == {x}
    st, body, _ = api.get("/api/bindings/%2F?page=1&page_size=100&use_regex=true&name="
                          + q("^%s-q0[0-4]$" % p))
    assert body["filtered_count"] == 10  # the default exchange's five and x's five
    st, body, _ = api.get("/api/bindings?page=1&page_size=3&name=%s&sort=routing_key"
                          "&sort_reverse=true&columns=routing_key" % p)
    assert [b["routing_key"] for b in body["items"]] == ["rk-" + n for n in qs[::-1][:3]]
    assert set(body["items"][0]) == {"routing_key"}
    st, body, _ = api.get("/api/queues/%%2F/%s/bindings?page=1" % q(qs[0]))
    assert body["filtered_count"] == 2 and body["items"][0]["source"] == ""
    st, body, _ = api.get("/api/bindings/%%2F/e/%s/q/%s?page=1" % (q(x), q(qs[1])))
    assert body["filtered_count"] == 1
    st, body, _ = api.get("/api/exchanges/%%2F/%s/bindings/destination?page=1" % q(x))
    assert body["filtered_count"] == 0 and body["items"] == []
    for path in ("/api/bindings", "/api/bindings/%2F",
                 "/api/exchanges/%%2F/%s/bindings/source" % q(x),
                 "/api/queues/%%2F/%s/bindings" % q(qs[0])):
        st, body, _ = api.get(path + "?page=1&page_size=501")
        assert st == 400 and body["error"] == "invalid_pagination_parameters", (path, body)
        st, body, _ = api.get(path + "?page=99999")
        assert st == 400 and body["error"] == "page_out_of_range", (path, body)
    _cleanup(ch, x, qs)


@pytest.mark.sluice_only("RabbitMQ 3.10 does not paginate consumers")
def test_consumers_paginate(broker, api):
    p = uname("cpg")
    c = broker.amqp()
    ch = c.channel()
    names = ["%s-%d" % (p, i) for i in range(6)]
    for n in names:
        ch.queue_declare(n, auto_delete=False)
        ch.basic_consume(n, consumer_tag="tag-" + n, callback=lambda m: None)
    st, body, _ = api.get("/api/consumers?page=1&page_size=4&name=tag-" + p)
    assert st == 200, body
    assert body["filtered_count"] == 6 and body["page_count"] == 2
    assert [i["consumer_tag"] for i in body["items"]] == ["tag-" + n for n in names[:4]]
    st, body, _ = api.get("/api/consumers/%2F?page=2&page_size=4&name=tag-" + p
                          + "&sort=consumer_tag&sort_reverse=true")
    assert [i["consumer_tag"] for i in body["items"]] == ["tag-" + n for n in names[1::-1]]
    st, body, _ = api.get("/api/consumers/%2F?page=1&name=tag-" + p)
    assert body["filtered_count"] == 6
    for n in names:
        ch.basic_cancel("tag-" + n)
        ch.queue_delete(n)


@pytest.mark.sluice_only("RabbitMQ 3.10 does not paginate a vhost's or a connection's lists")
def test_vhost_and_connection_lists_paginate(broker, api):
    conns = [broker.amqp() for _ in range(3)]
    for cn in conns:
        cn.channel()
        cn.channel()
    names = _conn_names(conns)
    rx = q(_regex_of(names))
    st, body, _ = api.get("/api/vhosts/%2F/connections?page=1&page_size=2&use_regex=true&name="
                          + rx)
    assert st == 200 and body["filtered_count"] == 3 and body["page_count"] == 2, body
    assert [i["name"] for i in body["items"]] == sorted(names)[:2]
    st, body, _ = api.get("/api/vhosts/%2F/channels?page=1&page_size=10&use_regex=true&name="
                          + rx)
    assert body["filtered_count"] == 6
    st, body, _ = api.get("/api/connections/%s/channels?page=1&page_size=1" % q(names[0]))
    assert body["filtered_count"] == 2 and body["page_count"] == 2
    st, body, _ = api.get("/api/vhosts/%2F/connections?page=0")
    assert st == 400 and body["error"] == "invalid_pagination_parameters"
    for cn in conns:
        cn.close()


def test_vhost_lists_of_connections_and_channels(broker, api):
    """The plain lists, as RabbitMQ has them (GET /api/vhosts/{vhost}/connections, .../channels);
    an unknown vhost is 404."""
    c = broker.amqp()
    c.channel()
    name = _conn_names([c])[0]

    def listed():
        st, body, _ = api.get("/api/vhosts/%2F/channels")
        # RabbitMQ: "connection_details": [] until its statistics are in
        return st == 200 and any(isinstance(i.get("connection_details"), dict)
                                 and i["connection_details"]["name"] == name for i in body)
    assert poll(listed)
    st, body, _ = api.get("/api/vhosts/%2F/connections")
    assert st == 200 and name in [i["name"] for i in body]
    st, body, _ = api.get("/api/vhosts/%s/connections" % q(uname("nov")))
    assert st == 404, body
    c.close()


@pytest.mark.sluice_only("RabbitMQ 3.10 does not paginate bindings")
def test_a_list_walked_over_many_turns_has_every_item_once(broker, api):
    """3,000 queues (3,000 default-exchange bindings) and 3,000 explicit bindings: the walk
    takes several loop turns, sorted or not; pages together are the full list."""
    p = uname("walk")
    c = broker.amqp()
    ch = c.channel()
    x = p + "-x"
    ch.exchange_declare(x, "fanout", auto_delete=False)
    qs = ["%s-%04d" % (p, i) for i in range(3000)]
    for n in qs:
        ch.queue_declare(n, auto_delete=False)
        ch.queue_bind(n, x, routing_key="k")
    st, full, _ = api.get("/api/bindings/%2F?columns=source,destination")
    mine = [(b["source"], b["destination"]) for b in full if b["destination"].startswith(p)]
    assert mine == [("", n) for n in qs] + [(x, n) for n in qs]
    seen, page = [], 1
    while True:
        st, body, _ = api.get("/api/bindings/%%2F?page=%d&page_size=500&name=%s&sort=destination"
                              "&columns=source,destination" % (page, p))
        assert st == 200, body
        seen += [(b["source"], b["destination"]) for b in body["items"]]
        if page >= body["page_count"]:
            break
        page += 1
    assert len(seen) == 6000 and len(set(seen)) == 6000
    assert [d for _, d in seen] == sorted(d for _, d in seen)
    ch.exchange_delete(x)
    for n in qs:
        ch.queue_delete(n)


@pytest.mark.sluice_only("a stress of Sluice's sliced walks (RabbitMQ builds its lists whole)")
def test_lists_walked_while_connections_close(broker, api):
    """4 connections of 1,000 channels with consumers; 12 sorted lists of channels and
    consumers at once while the connections close one by one: the walks resume past closed
    connections (ASan finds a walk that keeps one), every reply is whole JSON."""
    import threading

    import amqpraw
    p = uname("wc")
    raws = []
    for k in range(4):
        r = broker.raw(timeout=30)
        r.open_channel(1)
        r.rpc(1, "queue.declare", queue="%s-%d" % (p, k))
        frames = []
        for c in range(2, 1002):
            frames.append(amqpraw.encode_frame(amqpraw.FRAME_METHOD, c,
                                               amqpraw.encode_method("channel.open")))
            frames.append(amqpraw.encode_frame(amqpraw.FRAME_METHOD, c, amqpraw.encode_method(
                "basic.consume", queue="%s-%d" % (p, k), consumer_tag="t%d" % c, nowait=True)))
        r.send(b"".join(frames))
        r.rpc(1, "basic.qos", prefetch_count=0, timeout=30)
        r.pending = []
        raws.append(r)
    paths = ["/api/channels?sort=number&columns=name,number",
             "/api/consumers?sort=consumer_tag&sort_reverse=true&columns=consumer_tag",
             "/api/channels?page=1&page_size=500&sort=consumer_count",
             "/api/consumers?page=1&page_size=500&name=t1"] * 3
    out = [[] for _ in paths]
    done = threading.Event()

    def one(i):
        for _ in range(40):  # asked again and again while the connections close
            out[i].append(api.get(paths[i]))
            if done.is_set():
                break
    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(paths))]
    for t in ts:
        t.start()
    for r in raws:
        time.sleep(0.1)
        r.close()
    time.sleep(0.1)
    done.set()
    for t in ts:
        t.join(60)
    sizes = set()
    for path, replies in zip(paths, out):
        for st, body, _ in replies:
            assert st == 200, (path, body)
            items = body["items"] if isinstance(body, dict) else body
            assert isinstance(items, list) and len(items) <= 4004
            sizes.add(len(items))
    assert len(sizes) > 2  # replies were made while connections closed
    st, body, _ = api.get("/api/channels?page=1")
    assert st == 200


@pytest.mark.sluice_only("a stress of Sluice's sliced walks (RabbitMQ builds its lists whole)")
def test_bindings_walked_while_unbinding(broker, api):
    """One exchange of 6,000 bindings, listed again and again while 4,000 of them go (the
    walk stops and resumes inside the exchange, the binding it stopped at may be gone): no
    binding twice in any reply, and every binding that stays in every reply."""
    import threading

    import amqpraw
    p = uname("wu")
    r = broker.raw(timeout=30)
    r.open_channel(1)
    x = p + "-x"
    r.rpc(1, "exchange.declare", exchange=x, type="direct")
    r.rpc(1, "queue.declare", queue=p)
    keys = ["k%05d" % i for i in range(6000)]

    r.send(b"".join(amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1, amqpraw.encode_method(
        "queue.bind", queue=p, exchange=x, routing_key=k, nowait=True)) for k in keys))
    r.rpc(1, "basic.qos", prefetch_count=0, timeout=30)
    stays = set(keys[::3])
    out = []
    done = threading.Event()

    def lister():
        for _ in range(30):
            out.append(api.get("/api/exchanges/%%2F/%s/bindings/source?columns=routing_key"
                               % q(x)))
            out.append(api.get("/api/bindings/%%2F?page=1&page_size=500&name=%s&sort=routing_key"
                               "&columns=routing_key" % x))
            if done.is_set():
                break
    ts = [threading.Thread(target=lister) for _ in range(3)]
    for t in ts:
        t.start()
    time.sleep(0.05)
    gone = [k for k in keys if k not in stays]
    for i in range(0, len(gone), 200):  # 4,000 unbinds, 200 at a time, while lists are made
        r.send(b"".join(amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1, amqpraw.encode_method(
            "queue.unbind", queue=p, exchange=x, routing_key=k)) for k in gone[i:i + 200]))
        r.rpc(1, "basic.qos", prefetch_count=0, timeout=30)
        time.sleep(0.01)
    done.set()
    for t in ts:
        t.join(60)
    counts = set()
    for st, body, _ in out:
        assert st == 200, body
        paged = isinstance(body, dict)
        got = [b["routing_key"] for b in (body["items"] if paged else body)]
        assert len(got) == len(set(got)), "a binding listed twice"
        if paged:
            assert got == sorted(got) and body["filtered_count"] >= len(stays)
            counts.add(body["filtered_count"])
        else:
            assert stays <= set(got)
            counts.add(len(got))
    assert len(counts) > 1  # lists were made while bindings went
    r.close()


@pytest.mark.sluice_only("a stress of Sluice's sliced walks (RabbitMQ builds its lists whole)")
def test_consumers_walked_while_cancelling(broker, api):
    """One channel of 6,000 consumers, listed again and again while 4,000 are cancelled (the
    walk stops and resumes inside the channel): no consumer twice, every one that stays in
    every reply."""
    import threading

    import amqpraw
    p = uname("cw")
    r = broker.raw(timeout=30)
    r.open_channel(1)
    r.rpc(1, "queue.declare", queue=p)
    tags = ["%s-%05d" % (p, i) for i in range(6000)]
    r.send(b"".join(amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1, amqpraw.encode_method(
        "basic.consume", queue=p, consumer_tag=t, nowait=True)) for t in tags))
    r.rpc(1, "basic.qos", prefetch_count=0, timeout=30)
    stays = set(tags[::3])
    gone = [t for t in tags if t not in stays]
    out = []
    done = threading.Event()

    def lister():
        for _ in range(30):
            out.append(api.get("/api/consumers?columns=consumer_tag"))
            out.append(api.get("/api/consumers/%%2F?page=1&page_size=500&name=%s"
                               "&sort_reverse=true&columns=consumer_tag" % p))
            if done.is_set():
                break
    ts = [threading.Thread(target=lister) for _ in range(3)]
    for t in ts:
        t.start()
    time.sleep(0.05)
    for i in range(0, len(gone), 200):
        r.send(b"".join(amqpraw.encode_frame(amqpraw.FRAME_METHOD, 1, amqpraw.encode_method(
            "basic.cancel", consumer_tag=t, nowait=True)) for t in gone[i:i + 200]))
        r.rpc(1, "basic.qos", prefetch_count=0, timeout=30)
        time.sleep(0.01)
    done.set()
    for t in ts:
        t.join(60)
    counts = set()
    for st, body, _ in out:
        assert st == 200, body
        paged = isinstance(body, dict)
        got = [c["consumer_tag"] for c in (body["items"] if paged else body)]
        assert len(got) == len(set(got)), "a consumer listed twice"
        if paged:
            assert got == sorted(got, reverse=True) and body["filtered_count"] >= len(stays)
            counts.add(body["filtered_count"])
        else:
            assert stays <= set(got)
            counts.add(len(got))
    assert len(counts) > 1
    r.close()
