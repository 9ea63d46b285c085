"""Queues: declare rules, exclusivity, auto-delete, arguments, TTL, limits,
dead-lettering, priorities, bindings."""

import time

from helpers import (basic_nack, declare_exchange, declare_queue, drain_bodies,
                     expect_channel_error, get_body, publish, queue_exists, uname, wait_for)


def test_server_named_queue(conn, ch):
    ok = ch.queue_declare("", exclusive=True)
    assert ok.queue.startswith("amq.gen-"), ok.queue
    assert len(ok.queue) > len("amq.gen-")
    assert (ok.message_count, ok.consumer_count) == (0, 0)
    ok2 = ch.queue_declare("", exclusive=True)
    assert ok2.queue != ok.queue
    publish(ch, "", ok.queue, "to server-named")
    assert get_body(ch, ok.queue) == b"to server-named"


def test_declare_ok_counts(conn, ch):
    q = declare_queue(ch)
    for i in range(3):
        publish(ch, "", q, "m%d" % i, confirm=True)
    ok = ch.queue_declare(q, passive=True)
    assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 3, 0)
    ch.basic_consume(q, callback=lambda m: None, on_cancel=lambda t: None)
    conn.drain_events(timeout=2)  # at least one delivery
    ch2 = conn.channel()
    ok = ch2.queue_declare(q, passive=True)
    assert ok.consumer_count == 1
    # declare-ok counts ready messages only: delivered-unacked ones are not counted
    assert ok.message_count < 3
    ch2.queue_delete(q)


def test_passive_declare_missing_404(conn, ch):
    expect_channel_error(conn, 404, ch.queue_declare, uname("noq"), passive=True)


def test_amq_prefix_403(conn, ch):
    expect_channel_error(conn, 403, ch.queue_declare, "amq.q-" + uname(), auto_delete=False)


def test_passive_amq_gen_missing_404(conn, ch):
    expect_channel_error(conn, 404, ch.queue_declare, "amq.gen-" + uname(), passive=True)


def test_empty_name_means_last_declared(conn, ch):
    q = declare_queue(ch, exclusive=True)
    ch.queue_bind("", "amq.direct", q)  # empty queue name = last declared on channel
    publish(ch, "amq.direct", q, "via last-declared binding")
    assert get_body(ch, q) == b"via last-declared binding"
    publish(ch, "", q, "second", confirm=True)
    assert ch.queue_purge("") == 1


def test_empty_name_without_declare_404(conn, ch):
    expect_channel_error(conn, 404, ch.basic_get, "")


def test_exclusive_queue_locked_for_other_connections(broker):
    owner = broker.amqp()
    och = owner.channel()
    q = declare_queue(och, exclusive=True)
    other = broker.amqp()
    for action in (
        lambda c: c.queue_declare(q, passive=True),
        lambda c: c.queue_declare(q, exclusive=True, auto_delete=False),
        lambda c: c.basic_consume(q, callback=lambda m: None),
        lambda c: c.queue_delete(q),
        lambda c: c.basic_get(q),
        lambda c: c.queue_purge(q),
    ):
        c = other.channel()
        expect_channel_error(other, 405, action, c)
    # the owner can still use it
    publish(och, "", q, "mine")
    assert get_body(och, q) == b"mine"
    owner.close()
    wait_for(lambda: not queue_exists(other, q), timeout=3,
             message="exclusive queue not deleted when its owner closed")


def test_auto_delete_queue_deleted_after_last_consumer_cancel(conn, ch):
    q = declare_queue(ch, auto_delete=True)
    # no consumer yet: not deleted
    time.sleep(0.1)
    assert queue_exists(conn, q)
    t1 = ch.basic_consume(q, callback=lambda m: None)
    t2 = ch.basic_consume(q, callback=lambda m: None)
    ch.basic_cancel(t1)
    assert queue_exists(conn, q), "auto-delete queue deleted with a consumer left"
    ch.basic_cancel(t2)
    wait_for(lambda: not queue_exists(conn, q), timeout=3,
             message="auto-delete queue not deleted after last cancel")


def test_auto_delete_queue_deleted_when_consumer_channel_closes(conn):
    ch = conn.channel()
    q = declare_queue(ch, auto_delete=True)
    ch2 = conn.channel()
    ch2.basic_consume(q, callback=lambda m: None)
    ch2.close()
    wait_for(lambda: not queue_exists(conn, q), timeout=3,
             message="auto-delete queue not deleted after consumer channel closed")


def test_durable_redeclare_mismatch_406(conn, ch):
    q = declare_queue(ch, durable=False)
    expect_channel_error(conn, 406, ch.queue_declare, q, durable=True, auto_delete=False)
    ch2 = conn.channel()
    expect_channel_error(conn, 406, ch2.queue_declare, q, auto_delete=True)
    ch3 = conn.channel()
    expect_channel_error(conn, 406, ch3.queue_declare, q, auto_delete=False,
                         arguments={"x-message-ttl": 1000})
    ch4 = conn.channel()
    # identical redeclare is fine; unknown x- arguments are ignored
    assert ch4.queue_declare(q, auto_delete=False).queue == q
    ch4.queue_delete(q)


def test_ttl_argument_mismatch_406(conn, ch):
    q = declare_queue(ch, arguments={"x-message-ttl": 1000})
    expect_channel_error(conn, 406, ch.queue_declare, q, auto_delete=False,
                         arguments={"x-message-ttl": 2000})
    conn.channel().queue_delete(q)


def test_message_ttl_expires(conn, ch):
    q = declare_queue(ch, exclusive=True, arguments={"x-message-ttl": 200})
    control = declare_queue(ch, exclusive=True)
    x = declare_exchange(ch, "fanout")
    ch.queue_bind(q, x)
    ch.queue_bind(control, x)
    publish(ch, x, "", "short-lived")
    time.sleep(0.5)
    assert get_body(ch, q) is None, "message outlived x-message-ttl"
    assert get_body(ch, control) == b"short-lived"
    ch.exchange_delete(x)


def test_message_ttl_zero_expires_unless_delivered(conn, ch):
    q = declare_queue(ch, exclusive=True, arguments={"x-message-ttl": 0})
    publish(ch, "", q, "instant")
    time.sleep(0.1)
    assert get_body(ch, q) is None


def test_per_message_expiration(conn, ch):
    q = declare_queue(ch, exclusive=True)
    publish(ch, "", q, "expires", expiration="100")
    publish(ch, "", q, "stays")
    time.sleep(0.4)
    assert drain_bodies(ch, q) == [b"stays"]


def test_per_message_expiration_lower_of_queue_ttl(conn, ch):
    q = declare_queue(ch, exclusive=True, arguments={"x-message-ttl": 100})
    publish(ch, "", q, "queue ttl wins", expiration="60000")
    time.sleep(0.4)
    assert get_body(ch, q) is None


def test_queue_expires(conn, ch):
    q = declare_queue(ch, arguments={"x-expires": 300})
    assert queue_exists(conn, q)
    # Poll less often than x-expires: a declare counts as use and restarts the timer.
    wait_for(lambda: not queue_exists(conn, q), timeout=5, interval=0.6,
             message="x-expires queue not deleted")


def test_max_length_drop_head(conn, ch):
    q = declare_queue(ch, exclusive=True, arguments={"x-max-length": 2})
    for b in ("m1", "m2", "m3"):
        publish(ch, "", q, b, confirm=True)
    assert ch.queue_declare(q, passive=True).message_count == 2
    assert drain_bodies(ch, q) == [b"m2", b"m3"]


def _dlx_setup(ch, queue_args, dlx_type="fanout", dl_binding=""):
    dlx = declare_exchange(ch, dlx_type, prefix="dlx")
    dlq = declare_queue(ch, exclusive=True)
    ch.queue_bind(dlq, dlx, dl_binding)
    args = {"x-dead-letter-exchange": dlx}
    args.update(queue_args)
    q = declare_queue(ch, exclusive=True, arguments=args)
    return dlx, dlq, q


def _get_dead(ch, dlq, timeout=3.0):
    msg = wait_for(lambda: ch.basic_get(dlq, no_ack=True), timeout=timeout,
                   message="no dead-lettered message")
    return msg


def _check_x_death(msg, q, reason, exchange="", routing_keys=None):
    headers = msg.headers or {}
    deaths = headers.get("x-death")
    assert isinstance(deaths, list) and deaths, headers
    d = deaths[0]
    assert d["reason"] == reason
    assert d["queue"] == q
    assert d["count"] == 1
    assert d["exchange"] == exchange
    assert list(d["routing-keys"]) == (routing_keys if routing_keys is not None else [q])
    assert "time" in d
    assert headers.get("x-first-death-reason") == reason
    assert headers.get("x-first-death-queue") == q
    assert headers.get("x-first-death-exchange") == exchange


def test_dead_letter_on_reject(conn, ch):
    dlx, dlq, q = _dlx_setup(ch, {})
    publish(ch, "", q, "rejected one")
    m = ch.basic_get(q)
    ch.basic_reject(m.delivery_tag, requeue=False)
    dead = _get_dead(ch, dlq)
    assert dead.body == b"rejected one"
    assert dead.delivery_info["routing_key"] == q
    _check_x_death(dead, q, "rejected")
    assert get_body(ch, q) is None
    ch.exchange_delete(dlx)


def test_dead_letter_on_nack(conn, ch):
    dlx, dlq, q = _dlx_setup(ch, {})
    publish(ch, "", q, "nacked one")
    m = ch.basic_get(q)
    basic_nack(ch, m.delivery_tag, requeue=False)
    dead = _get_dead(ch, dlq)
    assert dead.body == b"nacked one"
    _check_x_death(dead, q, "rejected")
    ch.exchange_delete(dlx)


def test_dead_letter_on_expiry(conn, ch):
    dlx, dlq, q = _dlx_setup(ch, {"x-message-ttl": 100})
    publish(ch, "", q, "expired one")
    dead = _get_dead(ch, dlq)
    assert dead.body == b"expired one"
    _check_x_death(dead, q, "expired")
    ch.exchange_delete(dlx)


def test_dead_letter_per_message_expiration(conn, ch):
    dlx, dlq, q = _dlx_setup(ch, {})
    publish(ch, "", q, "expired by property", expiration="50")
    time.sleep(0.2)
    # per-message expiry happens when the message reaches the head
    assert get_body(ch, q) is None
    dead = _get_dead(ch, dlq)
    assert dead.body == b"expired by property"
    _check_x_death(dead, q, "expired")
    assert dead.properties.get("expiration") is None
    assert dead.headers["x-death"][0]["original-expiration"] == "50"
    ch.exchange_delete(dlx)


def test_dead_letter_on_max_length(conn, ch):
    dlx, dlq, q = _dlx_setup(ch, {"x-max-length": 1})
    publish(ch, "", q, "first")
    publish(ch, "", q, "second")
    dead = _get_dead(ch, dlq)
    assert dead.body == b"first"
    _check_x_death(dead, q, "maxlen")
    assert drain_bodies(ch, q) == [b"second"]
    ch.exchange_delete(dlx)


def test_dead_letter_routing_key(conn, ch):
    dlx, dlq, q = _dlx_setup(ch, {"x-dead-letter-routing-key": "dead-key"},
                             dlx_type="direct", dl_binding="dead-key")
    x = declare_exchange(ch, "direct")
    ch.queue_bind(q, x, "orig-key")
    publish(ch, x, "orig-key", "rerouted")
    m = ch.basic_get(q)
    ch.basic_reject(m.delivery_tag, requeue=False)
    dead = _get_dead(ch, dlq)
    assert dead.body == b"rerouted"
    assert dead.delivery_info["routing_key"] == "dead-key"
    assert dead.delivery_info["exchange"] == dlx
    _check_x_death(dead, q, "rejected", exchange=x, routing_keys=["orig-key"])
    ch.exchange_delete(x)
    ch.exchange_delete(dlx)


def test_max_priority_ordering(conn, ch):
    q = declare_queue(ch, exclusive=True, arguments={"x-max-priority": 10})
    for p in (1, 5, 3):
        publish(ch, "", q, "p%d" % p, priority=p)
    publish(ch, "", q, "none")  # no priority = 0
    assert drain_bodies(ch, q) == [b"p5", b"p3", b"p1", b"none"]


def test_bind_unbind(conn, ch):
    q = declare_queue(ch, exclusive=True)
    x = declare_exchange(ch, "direct")
    ch.queue_bind(q, x, "k1")
    ch.queue_bind(q, x, "k2")
    publish(ch, x, "k1", "one")
    publish(ch, x, "k2", "two")
    assert drain_bodies(ch, q) == [b"one", b"two"]
    ch.queue_unbind(q, x, "k1")
    publish(ch, x, "k1", "not routed")
    publish(ch, x, "k2", "still routed")
    assert drain_bodies(ch, q) == [b"still routed"]
    ch.queue_unbind(q, x, "never-bound")  # unbinding a missing binding is ok
    ch.exchange_delete(x)


def test_bind_missing_exchange_or_queue_404(conn, ch):
    q = declare_queue(ch, exclusive=True)
    expect_channel_error(conn, 404, ch.queue_bind, q, uname("nox"), "k")
    ch2 = conn.channel()
    expect_channel_error(conn, 404, ch2.queue_bind, uname("noq"), "amq.direct", "k")


def test_invalid_ttl_type_406(conn, ch):
    expect_channel_error(conn, 406, ch.queue_declare, uname("badttl"), auto_delete=False,
                         arguments={"x-message-ttl": "abc"})


def test_negative_ttl_406(conn, ch):
    expect_channel_error(conn, 406, ch.queue_declare, uname("negttl"), auto_delete=False,
                         arguments={"x-message-ttl": -1})


def test_expires_zero_406(conn, ch):
    expect_channel_error(conn, 406, ch.queue_declare, uname("badexp"), auto_delete=False,
                         arguments={"x-expires": 0})


def test_invalid_max_length_406(conn, ch):
    expect_channel_error(conn, 406, ch.queue_declare, uname("badlen"), auto_delete=False,
                         arguments={"x-max-length": -5})


def test_unknown_x_argument_accepted(conn, ch):
    q = declare_queue(ch, exclusive=True, arguments={"x-whatever": "fine"})
    assert q


def test_queue_declare_ok_and_redeclare_keeps_messages(conn, ch):
    q = declare_queue(ch)
    publish(ch, "", q, "kept", confirm=True)
    ok = ch.queue_declare(q, auto_delete=False)
    assert ok.message_count == 1
    assert get_body(ch, q) == b"kept"
    ch.queue_delete(q)
