"""Users, vhosts and their durability (src/access/, src/node/vhosts.c).

Seeding (RabbitMQ's): the default user and vhost are created on the first start only; config
users are re-applied at every start. Vhosts are durable; deleting one closes its connections
and removes everything in it, so one created again under the same name starts empty, also
after a kill -9.
"""

import signal
import socket
import struct
import threading
import time

import amqp
import pika
import pytest

import amqpraw
from helpers import uname, wait_for
from test_mgmt import Api

pytestmark = pytest.mark.sluice_only("private brokers restarted on their data directory")


def restart(broker_factory, b, config=None, kill=False):
    """Stop b (SIGTERM, or SIGKILL) and start a new broker on its data directory."""
    b.close_clients()
    if kill:
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)
        b.exit_code = 0  # ours, on purpose
    else:
        assert b.terminate() == 0
    return broker_factory(config=config, data_dir=b.data_dir)


def test_default_user_created_on_first_start_only(broker_factory):
    b = broker_factory(config={"default_user": "boss", "default_pass": "b0ss"})
    with pytest.raises(amqp.exceptions.AccessRefused):
        b.amqp()  # no guest: the default user is boss
    b.amqp(user="boss", password="b0ss").channel().close()
    b2 = restart(broker_factory, b, config={"default_user": "other", "default_pass": "x"})
    # the data directory was seeded already: "other" is not created, boss stays
    with pytest.raises(amqp.exceptions.AccessRefused):
        b2.amqp(user="other", password="x")
    b2.amqp(user="boss", password="b0ss").channel().close()


def test_config_user_follows_the_config(broker_factory):
    b = broker_factory(config={"user.app": "pw1", "user.app.tags": "monitoring"})
    b.amqp(user="app", password="pw1").channel().close()
    b2 = restart(broker_factory, b, config={"user.app": "pw2", "user.app.tags": "management"})
    with pytest.raises(amqp.exceptions.AccessRefused):
        b2.amqp(user="app", password="pw1")
    b2.amqp(user="app", password="pw2").channel().close()
    s, me, _ = Api(b2, "app", "pw2").get("/api/whoami")
    assert s == 200 and me["tags"] == ["management"]


def test_users_survive_kill_9_and_hashes_only(broker_factory):
    b = broker_factory(config={"user.app": "very-secret-pw"})
    b2 = restart(broker_factory, b, config={}, kill=True)
    # no longer in the config, still a user of the data directory
    b2.amqp(user="app", password="very-secret-pw").channel().close()
    data = b""
    import pathlib
    for p in pathlib.Path(b2.data_dir).rglob("*"):
        if p.is_file():
            data += p.read_bytes()
    assert b"very-secret-pw" not in data, "a password reached the disk in clear"


def test_vhost_api_create_use_delete(broker_factory):
    b = broker_factory()
    api = Api(b)
    s, _, _ = api.put("/api/vhosts/v1", {"description": "billing", "tags": "a,b"})
    assert s == 201
    s, v, _ = api.get("/api/vhosts/v1")
    assert s == 200 and v["description"] == "billing" and v["tags"] == ["a", "b"]
    # the creator got full permissions (as RabbitMQ's API does)
    c = b.amqp(virtual_host="v1")
    ch = c.channel()
    q = uname("vq")
    ch.queue_declare(q, durable=True, auto_delete=False)
    ch.basic_publish(amqp.Message(b"m", delivery_mode=2), exchange="", routing_key=q)
    ch.exchange_declare("vx", "fanout", durable=True, auto_delete=False)
    ch.queue_bind(q, "vx")
    wait_for(lambda: api.get("/api/queues/v1/" + q)[1].get("messages") == 1)
    s, _, _ = api.delete("/api/vhosts/v1")
    assert s == 204
    # its connection was closed with 320
    with pytest.raises(amqp.exceptions.ConnectionForced) as ei:
        for _ in range(50):
            c.drain_events(timeout=0.2)
    assert "vhost 'v1' is deleted" in str(ei.value)
    assert api.get("/api/vhosts/v1")[0] == 404
    with pytest.raises(amqp.exceptions.NotAllowed):
        b.amqp(virtual_host="v1")
    s, _, _ = api.put("/api/vhosts/v1")
    assert s == 201
    s, qs, _ = api.get("/api/queues/v1")
    assert s == 200 and [x["name"] for x in qs if not x["name"].startswith("sluice.")] == []
    s, xs, _ = api.get("/api/exchanges/v1")
    assert s == 200 and "vx" not in [x["name"] for x in xs]


@pytest.mark.parametrize("kill", [False, True])
def test_deleted_vhost_stays_deleted_after_restart(broker_factory, kill):
    b = broker_factory()
    api = Api(b)
    assert api.put("/api/vhosts/v2")[0] == 201
    assert api.put("/api/vhosts/keep")[0] == 201
    ch = b.amqp(virtual_host="v2").channel()
    q = uname("dq")
    ch.queue_declare(q, durable=True, auto_delete=False)
    for i in range(20):
        ch.basic_publish(amqp.Message(b"m%d" % i, delivery_mode=2), exchange="", routing_key=q)
    ch.confirm_select()
    ch.basic_publish(amqp.Message(b"last", delivery_mode=2), exchange="", routing_key=q)
    assert api.delete("/api/vhosts/v2")[0] == 204
    assert api.put("/api/vhosts/v2")[0] == 201  # again, empty
    b2 = restart(broker_factory, b, kill=kill)
    api2 = Api(b2)
    names = [v["name"] for v in api2.get("/api/vhosts")[1]]
    assert names == ["/", "keep", "v2"]
    s, qs, _ = api2.get("/api/queues/v2")
    assert [x["name"] for x in qs if not x["name"].startswith("sluice.")] == []
    # and guest's permissions on v2 came back with it (it created it again)
    ch2 = b2.amqp(virtual_host="v2").channel()
    _, n, _ = ch2.queue_declare(q, durable=True, auto_delete=False)
    assert n == 0


def test_deleted_vhost_comes_back_only_if_created(broker_factory):
    b = broker_factory()
    api = Api(b)
    assert api.put("/api/vhosts/gone")[0] == 201
    b.amqp(virtual_host="gone").channel().queue_declare(uname("q"), durable=True,
                                                        auto_delete=False)
    assert api.delete("/api/vhosts/gone")[0] == 204
    b2 = restart(broker_factory, b, kill=True)
    assert Api(b2).get("/api/vhosts/gone")[0] == 404
    with pytest.raises(amqp.exceptions.NotAllowed):
        b2.amqp(virtual_host="gone")


@pytest.mark.parametrize("kill", [False, True])
def test_deleting_a_vhost_takes_its_handles_and_outgoing_queues(nodes, kill):
    """A vhost's queue handles become QUEUE_DELETED and its outgoing queues (with the messages
    they hold) go with it; other vhosts' stay; nothing comes back after a restart."""
    import urllib.parse
    a = nodes.start("a")
    api = a.api
    for v in ("doomed", "kept"):
        assert api.put("/api/vhosts/" + v)[0] == 201
    # a destination that never answers: the messages stay in the outgoing queues
    away = "DIRECT=TCP:127.0.0.1:1\\private$\\far"
    for v in ("doomed", "kept"):
        ch = a.amqp(virtual_host=v).channel()
        ch.queue_declare("local", durable=True, auto_delete=False)
        ch.confirm_select()
        for i in range(3):
            ch.basic_publish(amqp.Message(b"m%d" % i, delivery_mode=2), exchange="",
                             routing_key=away)
            ch.basic_publish(amqp.Message(b"l%d" % i, delivery_mode=2), exchange="",
                             routing_key="local")

    def outgoing(v):
        return [o for o in a.outgoing() if o["vhost"] == v]
    wait_for(lambda: [o["messages"] for o in outgoing("doomed")] == [3], timeout=10,
             message="no outgoing queue in vhost doomed: %r" % a.outgoing())
    handles = {}
    for v in ("doomed", "kept"):
        s, j, _ = api.post("/api/msmq/handles", {"queue": "local", "vhost": v,
                                                  "access": "receive"})
        assert s == 201, (s, j)
        handles[v] = j["handle"]
    assert api.delete("/api/vhosts/doomed")[0] == 204
    assert outgoing("doomed") == []
    assert [o["messages"] for o in outgoing("kept")] == [3]

    def purge(h):
        return api.post("/api/msmq/handles/%s/purge" % urllib.parse.quote(h, safe=""))[:2]
    s, j = purge(handles["doomed"])
    assert 400 <= s < 500 and j["hresult_name"] == "MQ_ERROR_QUEUE_DELETED", (s, j)
    s, j = purge(handles["kept"])
    assert s == 200 and j["message_count"] == 3, (s, j)
    # created again, it starts empty; and stays so across a restart (or kill -9)
    assert api.put("/api/vhosts/doomed")[0] == 201
    if kill:
        a.kill9()
    else:
        a.stop()
    a.restart()
    assert [o for o in a.outgoing() if o["vhost"] == "doomed"] == []
    assert [o["messages"] for o in a.outgoing() if o["vhost"] == "kept"] == [3]
    s, qs, _ = a.api.get("/api/queues/doomed")
    assert s == 200 and [q["name"] for q in qs if not q["name"].startswith("sluice.")] == []
    ch = a.amqp(virtual_host="kept").channel()
    assert ch.queue_declare("local", passive=True).message_count == 0  # purged above


def test_guest_only_from_loopback(ns_node):
    """guest logs in from loopback only (RabbitMQ's loopback_users); from another host (here
    another network namespace, over a veth link) it is refused, over AMQP and HTTP, while a
    user that is not a loopback user gets in. loopback_users = none lifts it."""
    import base64
    import http.client
    net = ns_node.net
    net.add_node("a")
    net.add_node("b")
    net.link("a", "b")
    a = ns_node("a", config={"user.peer": "peer-secret"})
    addr = net.addr("b", "a")

    def amqp_from_b(user, password):
        c = amqp.Connection(host="%s:5672" % addr, userid=user, password=password,
                            connect_timeout=5, read_timeout=5, login_method="PLAIN")
        with net.ns["b"].entered():
            c.connect()
        return c

    def http_from_b(user, password):
        conn = http.client.HTTPConnection(addr, 15672, timeout=5)
        with net.ns["b"].entered():
            conn.connect()
        tok = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        conn.request("GET", "/api/whoami", headers={"Authorization": "Basic " + tok})
        r = conn.getresponse()
        r.read()
        conn.close()
        return r.status

    with pytest.raises(amqp.exceptions.AccessRefused):
        amqp_from_b("guest", "guest")
    assert "user 'guest' can only connect via localhost" in a.log_tail()
    amqp_from_b("peer", "peer-secret").close()
    assert http_from_b("guest", "guest") == 401
    a.amqp().close()  # guest from a's own loopback
    assert a.stop() == 0
    a.config["loopback_users"] = "none"
    a.start()
    amqp_from_b("guest", "guest").close()


# ---------------------------------------------------------------------------
# Argon2id users: their passwords are checked on a thread of their own
# ---------------------------------------------------------------------------
ARGON2 = {"password_hashing_module": "sluice_password_hashing_argon2id",
          "user.slow": "slow-pw", "user.slow.tags": "management"}


def roundtrip(c):
    ch = c.channel()
    q, _, _ = ch.queue_declare("", exclusive=True)
    ch.basic_publish(amqp.Message(b"x"), exchange="", routing_key=q)
    assert wait_for(lambda: ch.basic_get(q, no_ack=True), timeout=5).body == b"x"


def test_argon2_logins_over_amqp_and_http(broker_factory):
    b = broker_factory(config=ARGON2)
    s, u, _ = Api(b).get("/api/users/slow")
    assert s == 200 and u["hashing_algorithm"] == "sluice_password_hashing_argon2id", u
    roundtrip(b.amqp(user="slow", password="slow-pw"))
    with pytest.raises(amqp.exceptions.AccessRefused):
        b.amqp(user="slow", password="wrong")
    assert Api(b, "slow", "slow-pw").get("/api/whoami")[1]["name"] == "slow"
    assert Api(b, "slow", "wrong").get("/api/whoami")[0] == 401
    # a body comes in while the password is checked; the request is answered after
    s, _, _ = Api(b, "slow", "slow-pw").put("/api/queues/%2F/" + uname("hq"), {"durable": False})
    assert s == 201
    assert Api(b, "slow", "wrong").put("/api/queues/%2F/x", {"durable": False})[0] == 401
    # frames sent behind start-ok (before tune came) wait for the check and are then handled
    # in order
    r = b.raw(handshake=False)
    r.send(amqpraw.PROTOCOL_HEADER)
    r.expect("connection.start")
    r.send(b"".join([
        amqpraw.encode_frame(1, 0, amqpraw.encode_method(
            "connection.start-ok", client_properties={}, mechanism="PLAIN",
            response=b"\0slow\0slow-pw", locale="en_US")),
        amqpraw.encode_frame(1, 0, amqpraw.encode_method(
            "connection.tune-ok", channel_max=16, frame_max=131072, heartbeat=0)),
        amqpraw.encode_frame(1, 0, amqpraw.encode_method("connection.open", virtual_host="/")),
        amqpraw.encode_frame(1, 1, amqpraw.encode_method("channel.open")),
    ]))
    r.expect("connection.tune")
    r.expect("connection.open-ok")
    r.expect("channel.open-ok")
    # the user's password changed while a login with the old one waited: refused; the new
    # one logs in
    assert Api(b).put("/api/users/slow", {"password": "new-pw", "tags": "management"})[0] == 204
    roundtrip(b.amqp(user="slow", password="new-pw"))
    with pytest.raises(amqp.exceptions.AccessRefused):
        b.amqp(user="slow", password="slow-pw")


def bad_login(host, port, close_early, results):
    resp = b"\0slow\0wrong"
    frame = amqpraw.encode_frame(1, 0, amqpraw.encode_method(
        "connection.start-ok", client_properties={}, mechanism="PLAIN", response=resp,
        locale="en_US"))
    try:
        s = socket.create_connection((host, port), timeout=20)
        s.sendall(amqpraw.PROTOCOL_HEADER)
        s.recv(4096)
        s.sendall(frame)
        if close_early:  # gone while its check runs: the answer must be dropped unseen
            s.close()
            results.append("gone")
            return
        data = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            data += d
        s.close()
        results.append("refused" if b"ACCESS_REFUSED" in data or not data else repr(data))
    except OSError as e:
        results.append("error %s" % e)


@pytest.mark.test_timeout(60)
def test_a_storm_of_slow_logins_is_bounded_and_holds_no_one_up(broker_factory):
    """80 wrong-password logins of an Argon2id user at once (~20 ms of CPU each): the checks
    queue on their own thread, those beyond its bound (32) are refused unchecked, half of the
    clients leave while theirs run, and meanwhile a SHA-256 user (checked inline) logs in and
    works. Nothing logs in with the wrong password; afterwards the right one works."""
    import base64
    import hashlib
    import os
    b = broker_factory(config=ARGON2)  # guest, the default user, is an Argon2id one too
    salt = os.urandom(4)
    h = base64.b64encode(salt + hashlib.sha256(salt + b"fast-pw").digest()).decode()
    api = Api(b)
    assert api.put("/api/users/fast", {"password_hash": h, "tags": "",
                                       "hashing_algorithm": "rabbit_password_hashing_sha256"}
                   )[0] == 201
    assert api.put("/api/permissions/%2F/fast",
                   {"configure": ".*", "write": ".*", "read": ".*"})[0] in (201, 204)
    results = []
    threads = [threading.Thread(target=bad_login, args=(b.host, b.port, i % 2, results))
               for i in range(80)]
    for t in threads:
        t.start()
    for _ in range(5):
        roundtrip(b.amqp(user="fast", password="fast-pw"))
    for t in threads:
        t.join(40)
    assert sorted(set(results)) == ["gone", "refused"], results
    wait_for(lambda: "too many slow password checks waiting" in open(b.log_path).read(),
             timeout=5, message="the bound was never reached")
    b.assert_alive()
    roundtrip(b.amqp(user="slow", password="slow-pw"))


def bad_http_login(host, port, close_early, results):
    import base64
    tok = base64.b64encode(b"slow:wrong")
    try:
        s = socket.create_connection((host, port), timeout=20)
        s.sendall(b"PUT /api/queues/%2F/x HTTP/1.1\r\nHost: x\r\nAuthorization: Basic " + tok +
                  b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        if close_early:
            s.close()
            results.append("gone")
            return
        data = s.recv(4096)
        s.close()
        results.append("401" if data.startswith(b"HTTP/1.1 401") else repr(data[:40]))
    except OSError as e:
        results.append("error %s" % e)


@pytest.mark.test_timeout(60)
def test_stop_while_slow_checks_run(broker_factory):
    """SIGTERM with password checks queued for AMQP and HTTP clients, some of them gone:
    a clean exit (0), every check dropped with its connection or request."""
    b = broker_factory(config=ARGON2)
    results = []
    threads = [threading.Thread(target=bad_login, args=(b.host, b.port, i % 3 == 0, results))
               for i in range(12)]
    threads += [threading.Thread(target=bad_http_login,
                                 args=(b.host, b.mgmt_port, i % 3 == 0, results))
                for i in range(12)]
    for t in threads:
        t.start()
    wait_for(lambda: len(results) >= 8, timeout=10)  # the early leavers: the rest are queued
    b.close_clients()
    assert b.terminate() == 0
    for t in threads:
        t.join(20)
    assert len(results) == 24 and not [r for r in results if r.startswith("b'HTTP/1.1 2")]
