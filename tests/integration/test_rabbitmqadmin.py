"""Debian's rabbitmqadmin (the RabbitMQ management CLI) against Sluice's HTTP API."""

import json
import os
import shutil
import subprocess

import pytest

from helpers import uname
from test_mgmt import Api

RABBITMQADMIN = shutil.which("rabbitmqadmin") or "/usr/bin/rabbitmqadmin"


@pytest.fixture
def admin(broker):
    api = Api(broker)  # skips when there is no management API
    if not os.path.exists(RABBITMQADMIN):
        pytest.skip("rabbitmqadmin not installed")

    def run(*args, check=True, fmt="raw_json"):
        cmd = [RABBITMQADMIN, "-H", api.host, "-P", str(api.port), "-u", "guest", "-p", "guest",
               "-f", fmt] + list(args)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if check:
            assert p.returncode == 0, "%s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr)
        return p

    run.api = api
    return run


def listing(admin, what):
    return json.loads(admin("list", what).stdout)


def test_queue_lifecycle(admin):
    q = uname("ra")
    admin("declare", "queue", "name=" + q, "durable=false")
    assert q in [x["name"] for x in listing(admin, "queues")]
    admin("publish", "routing_key=" + q, "payload=hello")
    admin("publish", "exchange=amq.default", "routing_key=" + q, "payload=world")
    qs = {x["name"]: x for x in listing(admin, "queues")}
    assert qs[q]["messages"] == 2
    got = json.loads(admin("get", "queue=" + q, "count=2").stdout)
    assert [m["payload"] for m in got] == ["hello", "world"]
    assert all("lookup_id" in m and m["move_count"] == 0 for m in got)
    got = json.loads(admin("get", "queue=" + q, "ackmode=ack_requeue_false").stdout)
    assert got[0]["payload"] == "hello" and got[0]["redelivered"] is True
    assert admin.api.queue(q)["messages"] == 1
    admin("purge", "queue", "name=" + q)
    assert admin.api.queue(q)["messages"] == 0
    admin("delete", "queue", "name=" + q)
    assert q not in [x["name"] for x in listing(admin, "queues")]


def test_table_output(admin):
    q = uname("tbl")
    admin("declare", "queue", "name=" + q, "durable=false")
    out = admin("list", "queues", fmt="table").stdout
    assert " name " in out and "| messages |" in out and q in out
    out = admin("show", "overview", fmt="table").stdout
    assert "rabbitmq_version" in out and "queue_totals.messages" in out
    for what in ("exchanges", "bindings", "connections", "channels", "consumers", "users",
                 "vhosts", "nodes", "permissions"):
        admin("list", what, fmt="table")


def test_exchanges_and_bindings(admin):
    x, q = uname("rx"), uname("rq")
    admin("declare", "exchange", "name=" + x, "type=fanout", "durable=false")
    admin("declare", "queue", "name=" + q, "durable=false")
    admin("declare", "binding", "source=" + x, "destination=" + q, "routing_key=k")
    ex = {e["name"]: e for e in listing(admin, "exchanges")}
    assert ex[x]["type"] == "fanout" and ex[x]["durable"] is False
    bs = [b for b in listing(admin, "bindings") if b["source"] == x]
    assert [(b["destination"], b["routing_key"]) for b in bs] == [(q, "k")]
    admin("publish", "exchange=" + x, "routing_key=any", "payload=fan")
    assert admin.api.queue(q)["messages"] == 1
    admin("delete", "binding", "source=" + x, "destination_type=queue", "destination=" + q,
          "properties_key=k")
    assert not [b for b in listing(admin, "bindings") if b["source"] == x]
    admin("delete", "exchange", "name=" + x)
    assert x not in [e["name"] for e in listing(admin, "exchanges")]


def test_errors_are_reported(admin):
    p = admin("declare", "queue", "name=amq.nope", check=False)
    assert p.returncode != 0
    q = uname("eq")
    admin("declare", "queue", "name=" + q, "durable=false")
    p = admin("declare", "queue", "name=" + q, "durable=true", check=False)
    assert p.returncode != 0 and "inequivalent arg 'durable'" in p.stderr
    p = admin("get", "queue=" + uname("missing"), check=False)
    assert p.returncode != 0 and "Not found" in p.stderr


def test_export_import(admin, tmp_path):
    q = uname("exq")
    admin("declare", "queue", "name=" + q, "durable=true")
    path = tmp_path / "defs.json"
    admin("export", str(path))
    defs = json.loads(path.read_text())
    assert q in [x["name"] for x in defs["queues"]]
    admin("delete", "queue", "name=" + q)
    admin("import", str(path))
    assert admin.api.queue(q)["durable"] is True
