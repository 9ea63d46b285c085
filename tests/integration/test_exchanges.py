"""Exchanges: types, declare rules, amq.* reservations, e2e bindings, AE, matching."""

import pytest

from helpers import (declare_exchange, declare_queue, drain_bodies, exchange_exists,
                     expect_channel_error, expect_connection_error, get_body, publish,
                     sync_point, uname)


@pytest.mark.parametrize("etype", ["direct", "fanout", "topic", "headers"])
def test_declare_each_type(conn, ch, etype):
    x = declare_exchange(ch, etype)
    ch.exchange_declare(x, etype, passive=True)
    # identical redeclare is fine
    ch.exchange_declare(x, etype, auto_delete=False)
    ch.exchange_delete(x)
    assert not exchange_exists(conn, x)


def test_passive_declare_missing_404(conn, ch):
    expect_channel_error(conn, 404, ch.exchange_declare, uname("nox"), "direct", passive=True)


def test_invalid_type_503_connection_error(conn, ch):
    expect_connection_error(conn, 503, ch.exchange_declare, uname("badtype"), "no-such-type",
                            auto_delete=False)


def test_declare_amq_prefix_403(conn, ch):
    expect_channel_error(conn, 403, ch.exchange_declare, "amq.foo-" + uname(), "direct",
                         auto_delete=False)


def test_declare_default_exchange_403(conn, ch):
    expect_channel_error(conn, 403, ch.exchange_declare, "", "direct", auto_delete=False)


def test_declare_amq_direct_with_real_properties(conn, ch):
    ch.exchange_declare("amq.direct", "direct", durable=True, auto_delete=False)
    ch.exchange_declare("amq.fanout", "fanout", durable=True, auto_delete=False)
    ch.exchange_declare("amq.topic", "topic", passive=True)
    ch.exchange_declare("amq.headers", "headers", passive=True)
    ch.exchange_declare("amq.match", "headers", passive=True)


def test_delete_amq_direct_403(conn, ch):
    expect_channel_error(conn, 403, ch.exchange_delete, "amq.direct")
    ch2 = conn.channel()
    ch2.exchange_declare("amq.direct", "direct", passive=True)


def test_delete_missing_exchange_ok(conn, ch):
    ch.exchange_delete(uname("gone"))


def test_redeclare_different_type_406(conn, ch):
    x = declare_exchange(ch, "direct")
    expect_channel_error(conn, 406, ch.exchange_declare, x, "fanout", auto_delete=False)
    ch2 = conn.channel()
    ch2.exchange_declare(x, "direct", passive=True)
    ch2.exchange_delete(x)


def test_redeclare_different_durable_406(conn, ch):
    x = declare_exchange(ch, "direct")
    expect_channel_error(conn, 406, ch.exchange_declare, x, "direct", durable=True,
                         auto_delete=False)
    conn.channel().exchange_delete(x)


def test_delete_if_unused_with_bindings_406(conn, ch):
    x = declare_exchange(ch, "direct")
    q = declare_queue(ch, exclusive=True)
    ch.queue_bind(q, x, "k")
    expect_channel_error(conn, 406, ch.exchange_delete, x, if_unused=True)
    ch2 = conn.channel()
    # unchanged: exchange and its binding still there
    publish(ch2, x, "k", "still routed")
    assert get_body(ch2, q) == b"still routed"
    ch2.queue_unbind(q, x, "k")
    ch2.exchange_delete(x, if_unused=True)
    assert not exchange_exists(conn, x)


def test_delete_exchange_removes_bindings(conn, ch):
    x = declare_exchange(ch, "fanout")
    q = declare_queue(ch, exclusive=True)
    ch.queue_bind(q, x)
    ch.exchange_delete(x)
    x2 = declare_exchange(ch, "fanout", name=x)
    publish(ch, x2, "", "after recreate")
    assert get_body(ch, q) is None
    ch.exchange_delete(x2)


def test_publish_to_internal_exchange_403(conn, ch):
    x = declare_exchange(ch, "fanout", internal=True)
    publish(ch, x, "", "nope")
    expect_channel_error(conn, 403, sync_point, ch)
    conn.channel().exchange_delete(x)


def test_publish_to_missing_exchange_404(conn, ch):
    publish(ch, uname("nox"), "k", "nope")
    expect_channel_error(conn, 404, sync_point, ch)


def test_internal_exchange_receives_via_e2e(conn, ch):
    src = declare_exchange(ch, "fanout")
    internal = declare_exchange(ch, "fanout", internal=True)
    q = declare_queue(ch, exclusive=True)
    ch.queue_bind(q, internal)
    ch.exchange_bind(internal, src)
    publish(ch, src, "", "via internal")
    assert get_body(ch, q) == b"via internal"
    ch.exchange_delete(src)
    ch.exchange_delete(internal)


def test_exchange_to_exchange_binding_routes(conn, ch):
    src = declare_exchange(ch, "topic")
    dst = declare_exchange(ch, "direct")
    q = declare_queue(ch, exclusive=True)
    ch.queue_bind(q, dst, "a.b")
    ch.exchange_bind(dst, src, "a.*")
    publish(ch, src, "a.b", "one")     # src a.* matches, dst a.b matches
    publish(ch, src, "a.c", "two")     # src matches, dst has no a.c binding
    publish(ch, src, "b.b", "three")   # src does not match
    assert drain_bodies(ch, q) == [b"one"]
    ch.exchange_unbind(dst, src, "a.*")
    publish(ch, src, "a.b", "after unbind")
    assert get_body(ch, q) is None
    ch.exchange_delete(src)
    ch.exchange_delete(dst)


def test_exchange_binding_loop_delivers_once(conn, ch):
    x1 = declare_exchange(ch, "fanout")
    x2 = declare_exchange(ch, "fanout")
    x3 = declare_exchange(ch, "fanout")
    q = declare_queue(ch, exclusive=True)
    ch.exchange_bind(x2, x1)
    ch.exchange_bind(x3, x2)
    ch.exchange_bind(x1, x3)  # loop x1 -> x2 -> x3 -> x1
    ch.queue_bind(q, x1)
    ch.queue_bind(q, x2)
    ch.queue_bind(q, x3)
    publish(ch, x2, "", "once")
    assert drain_bodies(ch, q) == [b"once"]
    for x in (x1, x2, x3):
        ch.exchange_delete(x)


def test_exchange_bind_missing_source_404(conn, ch):
    dst = declare_exchange(ch, "direct")
    expect_channel_error(conn, 404, ch.exchange_bind, dst, uname("nosrc"), "k")
    conn.channel().exchange_delete(dst)


def test_auto_delete_exchange_removed_after_last_unbind(conn, ch):
    x = declare_exchange(ch, "direct", auto_delete=True)
    q1 = declare_queue(ch, exclusive=True)
    q2 = declare_queue(ch, exclusive=True)
    ch.queue_bind(q1, x, "a")
    ch.queue_bind(q2, x, "b")
    ch.queue_unbind(q1, x, "a")
    assert exchange_exists(conn, x), "auto-delete exchange went away with a binding left"
    ch.queue_unbind(q2, x, "b")
    assert not exchange_exists(conn, x)


def test_auto_delete_exchange_removed_when_bound_queue_deleted(conn, ch):
    x = declare_exchange(ch, "fanout", auto_delete=True)
    q = declare_queue(ch)
    ch.queue_bind(q, x)
    ch.queue_delete(q)
    assert not exchange_exists(conn, x)


def test_auto_delete_exchange_without_bindings_stays(conn, ch):
    x = declare_exchange(ch, "fanout", auto_delete=True)
    assert exchange_exists(conn, x)
    ch.exchange_delete(x)


def test_alternate_exchange(conn, ch):
    ae = declare_exchange(ch, "fanout", prefix="ae")
    aeq = declare_queue(ch, exclusive=True)
    ch.queue_bind(aeq, ae)
    main = declare_exchange(ch, "direct", arguments={"alternate-exchange": ae})
    mq = declare_queue(ch, exclusive=True)
    ch.queue_bind(mq, main, "known")
    publish(ch, main, "known", "routed")
    publish(ch, main, "unknown", "unroutable")
    assert drain_bodies(ch, mq) == [b"routed"]
    assert drain_bodies(ch, aeq) == [b"unroutable"]
    ch.exchange_delete(main)
    ch.exchange_delete(ae)


def test_default_exchange_routes_by_queue_name(conn, ch):
    q = declare_queue(ch, exclusive=True)
    publish(ch, "", q, "direct to queue")
    publish(ch, "", q + "-not", "nowhere")
    assert drain_bodies(ch, q) == [b"direct to queue"]


def test_bind_to_default_exchange_403(conn, ch):
    q = declare_queue(ch, exclusive=True)
    expect_channel_error(conn, 403, ch.queue_bind, q, "", "k")


def test_topic_matching(conn, ch):
    x = declare_exchange(ch, "topic")
    patterns = {"abc": "a.*.c", "xh": "x.#", "all": "#", "star": "*", "mid": "a.#.c"}
    queues = {}
    for key, pattern in patterns.items():
        queues[key] = declare_queue(ch, exclusive=True)
        ch.queue_bind(queues[key], x, pattern)
    keys = ["a.b.c", "a..c", "a.b.b.c", "x", "x.y.z", "xy.z", "foo", "a.c", ""]
    for k in keys:
        publish(ch, x, k, k or "<empty>")
    got = {key: set(b.decode() for b in drain_bodies(ch, q)) for key, q in queues.items()}
    assert got["abc"] == {"a.b.c", "a..c"}
    assert got["xh"] == {"x", "x.y.z"}
    assert got["all"] == {"a.b.c", "a..c", "a.b.b.c", "x", "x.y.z", "xy.z", "foo", "a.c",
                          "<empty>"}
    assert got["star"] == {"x", "foo"}
    assert got["mid"] == {"a.b.c", "a..c", "a.b.b.c", "a.c"}
    ch.exchange_delete(x)


def test_direct_exchange_multiple_bindings(conn, ch):
    x = declare_exchange(ch, "direct")
    q1 = declare_queue(ch, exclusive=True)
    q2 = declare_queue(ch, exclusive=True)
    ch.queue_bind(q1, x, "k")
    ch.queue_bind(q2, x, "k")
    ch.queue_bind(q1, x, "only1")
    ch.queue_bind(q1, x, "k")  # duplicate binding: no duplicate delivery
    publish(ch, x, "k", "both")
    publish(ch, x, "only1", "one")
    assert drain_bodies(ch, q1) == [b"both", b"one"]
    assert drain_bodies(ch, q2) == [b"both"]
    ch.exchange_delete(x)


def test_fanout_ignores_routing_key(conn, ch):
    x = declare_exchange(ch, "fanout")
    qs = [declare_queue(ch, exclusive=True) for _ in range(3)]
    for i, q in enumerate(qs):
        ch.queue_bind(q, x, "key%d" % i)
    publish(ch, x, "whatever", "fan")
    for q in qs:
        assert drain_bodies(ch, q) == [b"fan"]
    ch.exchange_delete(x)


def test_headers_exchange_all_any(conn, ch):
    x = declare_exchange(ch, "headers")
    q_all = declare_queue(ch, exclusive=True)
    q_any = declare_queue(ch, exclusive=True)
    q_default = declare_queue(ch, exclusive=True)
    ch.queue_bind(q_all, x, "", arguments={"x-match": "all", "a": 1, "b": "two"})
    ch.queue_bind(q_any, x, "", arguments={"x-match": "any", "a": 1, "b": "two"})
    ch.queue_bind(q_default, x, "", arguments={"a": 1})  # x-match defaults to all
    cases = [
        ("both", {"a": 1, "b": "two"}),
        ("a-only", {"a": 1}),
        ("b-wrong", {"a": 2, "b": "two"}),
        ("none", {"c": 3}),
        ("extra", {"a": 1, "b": "two", "c": 3}),
        ("noheaders", None),
    ]
    for body, headers in cases:
        props = {"application_headers": headers} if headers is not None else {}
        publish(ch, x, "ignored", body, **props)
    assert set(drain_bodies(ch, q_all)) == {b"both", b"extra"}
    assert set(drain_bodies(ch, q_any)) == {b"both", b"a-only", b"b-wrong", b"extra"}
    assert set(drain_bodies(ch, q_default)) == {b"both", b"a-only", b"extra"}
    ch.exchange_delete(x)


def test_headers_exchange_bad_x_match_406(conn, ch):
    x = declare_exchange(ch, "headers")
    q = declare_queue(ch, exclusive=True)
    expect_channel_error(conn, 406, ch.queue_bind, q, x, "", arguments={"x-match": "bogus"})
    conn.channel().exchange_delete(x)


# ---------------------------------------------------------------------------
# Sender-selected distribution: CC and BCC headers (issue 12 item 8)
# ---------------------------------------------------------------------------
def _all(ch, queues):
    """Every message of each queue: (body, headers) lists."""
    out = []
    for q in queues:
        got = []
        while True:
            m = ch.basic_get(q, no_ack=True)
            if m is None:
                break
            got.append((bytes(m.body), dict(m.properties.get("application_headers") or {})))
        out.append(got)
    return out


def test_cc_and_bcc_on_a_direct_exchange(conn, ch):
    x = declare_exchange(ch, "direct")
    qs = [declare_queue(ch) for _ in range(4)]
    for q in qs:
        ch.queue_bind(q, x, routing_key=q)
    # the routing key again in CC, and an element that is not a long string: ignored
    publish(ch, x, qs[0], "sel", confirm=True,
            application_headers={"CC": [qs[1], qs[0], 5], "BCC": [qs[2]], "other": "kept"})
    got = _all(ch, qs)
    assert [len(g) for g in got] == [1, 1, 1, 0], got
    for g in got[:3]:
        body, headers = g[0]
        assert body == b"sel" and "BCC" not in headers, headers  # BCC never delivered
        assert headers["CC"][:2] == [qs[1], qs[0]] and headers["other"] == "kept"


def test_cc_and_bcc_through_the_default_exchange(conn, ch):
    qs = [declare_queue(ch) for _ in range(3)]
    publish(ch, "", qs[0], "dflt", confirm=True, application_headers={"BCC": [qs[2]]})
    got = _all(ch, qs)
    assert [len(g) for g in got] == [1, 0, 1]
    assert got[2][0][1] == {}, "an empty headers table is left after BCC is taken out"


def test_cc_and_bcc_on_a_topic_exchange(conn, ch):
    x = declare_exchange(ch, "topic")
    qa, qb, qc = declare_queue(ch), declare_queue(ch), declare_queue(ch)
    ch.queue_bind(qa, x, routing_key="a.*")
    ch.queue_bind(qb, x, routing_key="b.#")
    ch.queue_bind(qc, x, routing_key="c")
    publish(ch, x, "nothing.matches", "t", confirm=True,
            application_headers={"CC": ["a.one"], "BCC": ["b.two.three"]})
    assert [len(g) for g in _all(ch, [qa, qb, qc])] == [1, 1, 0]


def test_cc_on_fanout_and_headers_exchanges_changes_nothing_but_bcc_goes(conn, ch):
    fx = declare_exchange(ch, "fanout")
    hx = declare_exchange(ch, "headers")
    qf, qh = declare_queue(ch), declare_queue(ch)
    ch.queue_bind(qf, fx)
    ch.queue_bind(qh, hx, arguments={"x-match": "all", "kind": "k"})
    for x in (fx, hx):
        publish(ch, x, "any", "fh", confirm=True,
                application_headers={"kind": "k", "CC": ["a", "b"], "BCC": ["c"]})
    got = _all(ch, [qf, qh])
    assert [len(g) for g in got] == [1, 1]
    assert all("BCC" not in g[0][1] and g[0][1]["CC"] == ["a", "b"] for g in got)


def test_cc_follows_exchange_to_exchange_bindings_and_holds_off_the_alternate(conn, ch):
    ae = declare_exchange(ch, "fanout")
    qae = declare_queue(ch)
    ch.queue_bind(qae, ae)
    x1 = declare_exchange(ch, "direct", arguments={"alternate-exchange": ae})
    x2 = declare_exchange(ch, "direct")
    q = declare_queue(ch)
    ch.exchange_bind(x2, x1, routing_key="k2")
    ch.queue_bind(q, x2, routing_key="k2")
    # "k1" matches nothing, CC "k2" does (through x2): the alternate exchange is not used
    publish(ch, x1, "k1", "e2e", confirm=True, application_headers={"CC": ["k2"]})
    assert [len(g) for g in _all(ch, [q, qae])] == [1, 0]
    publish(ch, x1, "k1", "ae", confirm=True, application_headers={"CC": ["k3"]})
    assert [len(g) for g in _all(ch, [q, qae])] == [0, 1]


def test_a_cc_match_makes_a_mandatory_publish_routed(conn, ch):
    x = declare_exchange(ch, "direct")
    q = declare_queue(ch)
    ch.queue_bind(q, x, routing_key="there")
    returned = []
    ch.events["basic_return"].add(lambda *a: returned.append(a))
    publish(ch, x, "nowhere", "m", confirm=True, mandatory=False,
            application_headers={"BCC": ["there"]})
    ch.basic_publish(__import__("amqp").Message(b"mand", application_headers={"CC": ["there"]}),
                     exchange=x, routing_key="nowhere", mandatory=True)
    sync_point(ch)
    assert returned == [] and [len(g) for g in _all(ch, [q])] == [2]


@pytest.mark.parametrize("headers,name,type_", [({"CC": "x"}, "CC", "longstr"),
                                                 ({"BCC": 5}, "BCC", "signedint")])
def test_cc_or_bcc_of_another_type_is_refused_406(conn, ch, headers, name, type_):
    q = declare_queue(ch)
    e = expect_channel_error(conn, 406, publish, ch, "", q, "x", confirm=True,
                             application_headers=headers)
    assert ('invalid message: {unacceptable_type_in_header,"%s",%s}' % (name, type_)
            in e.reply_text), e.reply_text


@pytest.mark.parametrize("dlrk", [None, "d3"])
def test_dead_lettering_routes_with_the_cc_keys_unless_a_dead_letter_key_is_set(conn, ch, dlrk):
    dlx = declare_exchange(ch, "direct")
    d = [declare_queue(ch) for _ in range(3)]
    for i, q in enumerate(d):
        ch.queue_bind(q, dlx, routing_key="d%d" % (i + 1))
    args = {"x-dead-letter-exchange": dlx}
    if dlrk:
        args["x-dead-letter-routing-key"] = dlrk
    src = declare_queue(ch, arguments=args)
    ch.queue_bind(src, dlx, routing_key="unused")  # src itself is reached by name
    publish(ch, "", src, "dl", confirm=True, application_headers={"CC": ["d2"]})
    m = ch.basic_get(src, no_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=False)
    sync_point(ch)
    got = _all(ch, d)
    if dlrk:
        assert [len(g) for g in got] == [0, 0, 1]
        headers = got[2][0][1]
        assert "CC" not in headers  # RabbitMQ drops it with a dead-letter routing key
    else:
        assert [len(g) for g in got] == [0, 1, 0]  # the routing key (src) reaches nothing
        headers = got[1][0][1]
        assert headers["CC"] == ["d2"]
    assert headers["x-death"][0]["routing-keys"] == [src, "d2"]
