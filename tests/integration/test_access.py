"""Users, vhosts and their durability (src/access/, src/broker/security.c).

Seeding (RabbitMQ's): the default user and vhost are created on the first start only; config
users are re-applied at every start. Vhosts are durable; deleting one closes its connections
and removes everything in it, so one created again under the same name starts empty, also
after a kill -9.
"""

import signal
import time

import amqp
import pika
import pytest

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
