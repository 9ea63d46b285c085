"""Definitions in RabbitMQ's format, both ways (issue 11): a file exported from RabbitMQ 3.10.8
(data/rabbitmq-3.10.8-definitions.json, made with the private RabbitMQ of this harness: users
with passwords set over its API, tags, limits, permissions, topic permissions, vhost limits,
a policy) imports into Sluice with every login intact; what Sluice exports imports into
RabbitMQ (data/sluice-definitions.json, run on both targets); malformed documents change
nothing; hostile ones (huge user lists, invalid UTF-8) are refused or taken, cleanly.
"""

import json
import pathlib
import urllib.parse

import amqp
import pytest

from helpers import IS_RABBITMQ, uname
from test_permissions import Http, http_for

DATA = pathlib.Path(__file__).resolve().parent / "data"
RMQ_FILE = DATA / "rabbitmq-3.10.8-definitions.json"
SLUICE_FILE = DATA / "sluice-definitions.json"

# The passwords the RabbitMQ file's users were given (their hashes are in the file).
PASSWORDS = {"alice": "alice-pw-1", "bob": "bob-pw-2", "carol": "c4r0l",
             "j\u00f6rg": "j\u00f6rg-p\u00e4ssw\u00f6rd", "guest": "guest"}


def q(s):
    return urllib.parse.quote(s, safe="")


def login(broker, user, vhost="/"):
    c = amqp.Connection(host="%s:%d" % (broker.host, broker.port), userid=user,
                        password=PASSWORDS.get(user, "x"), virtual_host=vhost,
                        connect_timeout=5, read_timeout=5, login_method="PLAIN")
    broker._clients.append(c)
    c.connect()
    return c


@pytest.mark.sluice_only("imports RabbitMQ's export into a fresh broker")
def test_import_a_rabbitmq_310_export(broker):
    api = http_for(broker)
    doc = json.loads(RMQ_FILE.read_text())
    s, j = api.post("/api/definitions", doc)
    assert s == 204, (s, j)
    # every user logs in with its password (hashes taken as they are), in its vhost
    login(broker, "alice", "billing").channel().close()
    login(broker, "j\u00f6rg", "/with/slashes").channel().close()
    login(broker, "carol", "/").channel().close()
    with pytest.raises(amqp.exceptions.AccessRefused):
        c = amqp.Connection(host="%s:%d" % (broker.host, broker.port), userid="alice",
                            password="wrong", virtual_host="billing", connect_timeout=5,
                            login_method="PLAIN")
        broker._clients.append(c)
        c.connect()
    # cert-user has no password at all
    with pytest.raises(amqp.exceptions.AccessRefused):
        login(broker, "cert-user", "/")
    # tags and limits
    s, u = api.get("/api/users/carol")
    assert s == 200 and sorted(u["tags"]) == ["monitoring", "policymaker"]
    s, u = api.get("/api/users/bob")
    assert u["limits"] == {"max-channels": 20, "max-connections": 10}
    s, lim = api.get("/api/vhost-limits/billing")
    assert lim == [{"vhost": "billing", "value": {"max-connections": 100, "max-queues": 50}}]
    # bob's permissions as RabbitMQ had them
    ch = login(broker, "bob", "billing").channel()
    ch.queue_declare("bob-q", durable=False, auto_delete=True)
    with pytest.raises(amqp.exceptions.AccessRefused):
        ch.queue_declare("alice-q", durable=False, auto_delete=True)
    ch = login(broker, "bob", "billing").channel()
    ch.queue_declare("invoices", passive=True)  # the queue came with the file
    with pytest.raises(amqp.exceptions.AccessRefused) as ei:
        ch.confirm_select()
        ch.basic_publish(amqp.Message(b"x"), exchange="amq.topic", routing_key="not-bob")
        ch.basic_qos(0, 0, False)
    # bob's write pattern does not name amq.topic: refused before its topic permissions
    assert "access to exchange 'amq.topic' in vhost 'billing'" in ei.value.reply_text
    s, tp = api.get("/api/topic-permissions/billing/bob")
    assert s == 200 and tp == [{"user": "bob", "vhost": "billing", "exchange": "amq.topic",
                                "write": "^bob\\.", "read": "^invoices\\."}], tp
    # exchanges, queues, bindings of the file
    s, bs = api.get("/api/bindings/billing/e/events/q/invoices")
    assert s == 200 and [b["routing_key"] for b in bs] == ["invoices.#"]
    s, qinfo = api.get("/api/queues/billing/invoices")
    assert qinfo["arguments"] == {"x-max-length": 1000}
    # the policy is skipped, said so in the log
    assert "policies and parameters skipped" in open(broker.log_path).read()


@pytest.mark.sluice_only("the export of a fresh broker, compared with itself")
def test_export_import_round_trip(broker, broker_factory):
    api = http_for(broker)
    assert api.post("/api/definitions", json.loads(RMQ_FILE.read_text()))[0] == 204
    s, first = api.get("/api/definitions")
    assert s == 200
    users = {u["name"]: u for u in first["users"]}
    assert users["alice"]["password_hash"] == "2w28xLUg95PSeOSsOgUVHJYj6CQM6ROSTJ2VdBU5D6P193Bu"
    assert users["alice"]["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert "password" not in json.dumps(first).replace("password_hash", "")
    other = broker_factory()
    oapi = http_for(other)
    assert oapi.post("/api/definitions", first)[0] == 204
    s, second = oapi.get("/api/definitions")

    def norm(d):
        out = {}
        for k in ("users", "vhosts", "permissions", "topic_permissions", "parameters", "queues",
                  "exchanges", "bindings"):
            out[k] = sorted(json.dumps(x, sort_keys=True) for x in d.get(k, []))
        return out

    assert norm(first) == norm(second)


def test_import_a_sluice_export(broker):
    """data/sluice-definitions.json was exported by Sluice (the RabbitMQ file imported, plus a
    SHA-512 user): it imports into both brokers, and every login works."""
    api = http_for(broker)
    doc = json.loads(SLUICE_FILE.read_text())
    assert doc["product_name"] == "Sluice"
    s, j = api.post("/api/definitions", doc)
    assert s in (201, 204), (s, j)
    login(broker, "alice", "billing").channel().close()
    PASSWORDS["sha512user"] = "the-512-pw"
    login(broker, "sha512user", "billing").channel().close()
    s, u = api.get("/api/users/sha512user")
    assert u["hashing_algorithm"] == "rabbit_password_hashing_sha512"


@pytest.mark.sluice_only("Sluice's import checks every entry before it applies any")
@pytest.mark.parametrize("bad", [
    {"users": [{"name": "u1", "password_hash": "not base64!", "tags": ""}]},
    {"users": [{"name": "u1", "password_hash": "AAAA", "tags": ""}]},
    {"users": [{"name": "u1", "password_hash": "", "hashing_algorithm": "md4", "tags": ""}]},
    {"users": [{"name": "", "password_hash": "", "tags": ""}]},
    {"users": [{"name": "u1", "password_hash": "", "tags": 7}]},
    {"permissions": [{"user": "guest", "vhost": "/", "configure": "(", "write": "", "read": ""}]},
    {"topic_permissions": [{"user": "guest", "vhost": "/", "exchange": "amq.topic",
                            "write": "[", "read": ""}]},
    {"parameters": [{"vhost": "/", "component": "vhost-limits", "name": "limits",
                     "value": {"max-bananas": 3}}]},
    {"exchanges": [{"name": "x", "vhost": "/", "type": "nonsense"}]},
    {"queues": "not a list"},
])
def test_malformed_imports_change_nothing(broker, bad):
    api = http_for(broker)
    doc = dict(bad)
    doc["vhosts"] = [{"name": "should-not-appear"}]
    s, j = api.post("/api/definitions", doc)
    assert s == 400, (s, j)
    assert api.get("/api/vhosts/should-not-appear")[0] == 404
    assert api.get("/api/users/u1")[0] == 404


@pytest.mark.sluice_only("hostile input for Sluice's parser")
@pytest.mark.test_timeout(120)
def test_huge_user_list(broker):
    api = http_for(broker)
    n = 20000
    users = [{"name": "bulk-%05d" % i, "password_hash": "", "tags": ["management"]}
             for i in range(n)]
    perms = [{"user": "bulk-%05d" % i, "vhost": "/", "configure": "", "write": "", "read": ".*"}
             for i in range(0, n, 10)]
    s, j = api.post("/api/definitions", {"users": users, "permissions": perms})
    assert s == 204, (s, j)
    s, got = api.get("/api/users")
    assert s == 200 and len(got) >= n
    broker.assert_alive()


@pytest.mark.sluice_only("hostile input for Sluice's parser")
def test_invalid_utf8_names(broker):
    api = http_for(broker)
    # in a JSON body: not JSON at all (jansson refuses invalid UTF-8)
    import http.client
    import base64
    c = http.client.HTTPConnection(broker.host, broker.mgmt_port, timeout=5)
    tok = base64.b64encode(b"guest:guest").decode()
    c.request("POST", "/api/definitions", body=b'{"users": [{"name": "\xff\xfe", "tags": ""}]}',
              headers={"Authorization": "Basic " + tok, "Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 400
    r.read()
    c.close()
    # in a path
    s, j = api.put("/api/users/%FF%FE", {"password": "x", "tags": ""})
    assert s == 400 and "UTF-8" in j["reason"], (s, j)
    s, j = api.put("/api/vhosts/%C0%AF")
    assert s == 400, (s, j)
    # over AMQP: a login with such a name is just refused
    with pytest.raises(amqp.exceptions.AccessRefused):
        c = amqp.Connection(host="%s:%d" % (broker.host, broker.port), userid="\udcff",
                            password="x", connect_timeout=5, login_method="AMQPLAIN")
        broker._clients.append(c)
        c.connect()
    broker.assert_alive()
