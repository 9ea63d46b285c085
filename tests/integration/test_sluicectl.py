"""sluicectl, the C client of the management API (tools/sluicectl.c)."""

import json
import os
import subprocess

import pytest

from conftest import sluiced_binary
from helpers import uname
from test_mgmt import Api, fmt

SLUICECTL = sluiced_binary().parent / "sluicectl"


@pytest.fixture
def ctl(broker):
    api = Api(broker)
    if not SLUICECTL.exists():
        pytest.fail("sluicectl not built at %s" % SLUICECTL, pytrace=False)

    def run(*args, ok=True, env=None, use_flags=True):
        cmd = [str(SLUICECTL)]
        if use_flags:
            cmd += ["--host", api.host, "--port", str(api.port)]
        cmd += list(args)
        e = dict(os.environ)
        for k in ("SLUICE_HOST", "SLUICE_MGMT_PORT", "SLUICE_USER", "SLUICE_PASSWORD",
                  "SLUICE_VHOST"):
            e.pop(k, None)
        e.update(env or {})
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=e)
        if ok is True:
            assert p.returncode == 0, "%s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr)
        elif ok is False:
            assert p.returncode != 0, "%s succeeded:\n%s" % (" ".join(cmd), p.stdout)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("sluicectl: "), p.stderr
        return p

    run.api = api
    return run


def rows(out):
    lines = out.strip().splitlines()
    head = lines[0].split()
    return [dict(zip(head, l.split())) for l in lines[1:]]


def test_declare_list_purge_delete(ctl):
    q = uname("c")
    ctl("declare", "queue", q, "--transient")
    ctl("publish", "", q, "one")
    ctl("publish", "", q, "two")
    out = ctl("list", "queues").stdout
    assert out.splitlines()[0].split()[:2] == ["name", "messages"]
    assert {r["name"]: r["messages"] for r in rows(out)}[q] == "2"
    js = json.loads(ctl("list", "queues", "--json").stdout)
    assert [x["messages"] for x in js if x["name"] == q] == [2]
    p = ctl("delete", q, "--if-empty", ok=False)
    assert "MQ_ERROR_INVALID_PARAMETER" in p.stderr and "not empty" in p.stderr
    assert ctl.api.queue(q)["messages"] == 2
    assert "2 message(s) deleted" in ctl("purge", q).stdout
    ctl("delete", "queue", q, "--if-empty", "--if-unused")
    assert ctl.api.get(Api.q(q))[0] == 404
    p = ctl("purge", q, ok=False)
    assert "MQ_ERROR_QUEUE_NOT_FOUND" in p.stderr and "0xC00E0003" in p.stderr


def test_exchanges_bindings(ctl):
    x, q = uname("cx"), uname("cq")
    ctl("declare", "exchange", x, "topic", "--transient")
    ctl("declare", "queue", q, "--transient")
    ctl("declare", "binding", x, q, "a.*")
    assert any(r["name"] == x and r["type"] == "topic" for r in rows(ctl("list", "exchanges").stdout))
    assert any(r["source"] == x and r["routing_key"] == "a.*"
               for r in rows(ctl("list", "bindings").stdout))
    assert ctl("publish", x, "a.b", "m").stdout.strip() == "routed"
    assert ctl("publish", x, "b.b", "m").stdout.strip() == "not routed"
    ctl("delete", "exchange", x)


def test_peek_move_subqueues_tx(ctl):
    q = uname("cm")
    ctl("declare", "queue", q, "--transient")
    for i in range(3):
        ctl("publish", "", q, "m%d" % i)
    peek = rows(ctl("peek", q).stdout)
    assert [r["payload"] for r in peek] == ["m0", "m1", "m2"]
    ids = [r["lookup_id"] for r in peek]
    out = ctl("move", q, q + ";poison", "--id", ids[0]).stdout
    assert out.startswith("MQ_OK: moved 1")
    sub = rows(ctl("list", "subqueues", q).stdout)
    assert [(r["name"], r["messages"]) for r in sub] == [(q + ";poison", "1")]
    assert rows(ctl("peek", q + ";poison").stdout)[0]["move_count"] == "1"
    tx = ctl("tx", "begin").stdout.strip()
    ctl("move", q, q + ";retry", "--count", "2", "--tx", tx)
    assert ctl.api.queue(q)["messages_ready"] == 0
    assert "aborted" in ctl("tx", "abort", tx).stdout
    assert ctl.api.queue(q)["messages_ready"] == 2
    tx = ctl("tx", "begin").stdout.strip()
    p = ctl("move", q, "sluice.system.deadletter", "--count", "1", "--tx", tx, ok=False)
    assert "MQ_ERROR_TRANSACTION_USAGE (0xC00E0050)" in p.stderr
    p = ctl("move", q, q + ";x", "--id", "999999999", ok=False)
    assert "MQ_ERROR_MESSAGE_NOT_FOUND" in p.stderr
    ctl("move", q, q + ";x", "--count", "1", "--tx", tx)
    assert "committed" in ctl("tx", "commit", tx).stdout
    assert ctl.api.queue(q + ";x")["messages"] == 1
    p = ctl("tx", "commit", tx, ok=False)  # no longer open
    assert "MQ_ERROR_TRANSACTION_SEQUENCE (0xC00E0051)" in p.stderr


def test_msmq_actions_info_foreign_status(ctl):
    q = uname("ci")
    ctl("declare", "queue", q, "--transient")
    ctl("publish", "", q, "abc")
    assert "DISCONNECTED" in ctl("disconnect").stdout
    assert ctl("info", "MACHINE", "CONNECTED").stdout.strip() == \
        "PROPID_MGMT_MSMQ_CONNECTED = DISCONNECTED"
    assert "CONNECTED" in ctl("action", "machine", "Connect").stdout
    out = ctl("tidy").stdout
    assert out.startswith("MQ_OK (0x00000000): freed ")
    out = ctl("info", q, "MESSAGE_COUNT", "STATE", "FOREIGN").stdout.splitlines()
    assert out == ["PROPID_MGMT_QUEUE_MESSAGE_COUNT = 1",
                   "PROPID_MGMT_QUEUE_STATE = LOCAL CONNECTION",
                   "PROPID_MGMT_QUEUE_FOREIGN = NO"]
    js = json.loads(ctl("info", fmt(q), "7", "--json").stdout)
    assert js["values"]["PROPID_MGMT_QUEUE_MESSAGE_COUNT"] == 1
    assert ctl("foreign-status", q).stdout.strip() == "MQ_STATUS_NOT_FOREIGN (1)"
    p = ctl("action", "SESSION", "CONNECT", ok=False)
    assert "MQ_ERROR_INVALID_PARAMETER (0xC00E0006)" in p.stderr
    p = ctl("action", fmt(q), "PAUSE", ok=False)
    assert "MQ_ERROR_INVALID_PARAMETER" in p.stderr
    p = ctl("info", "MACHINE", "MESSAGE_COUNT", ok=False)
    assert "MQ_ERROR_ILLEGAL_PROPID (0xC00E0039)" in p.stderr


def test_export_import(ctl, tmp_path):
    q = uname("ce")
    ctl("declare", "queue", q)
    path = tmp_path / "d.json"
    ctl("export", str(path))
    assert q in [x["name"] for x in json.loads(path.read_text())["queues"]]
    ctl("delete", q)
    ctl("import", str(path))
    assert ctl.api.queue(q)["durable"] is True


def test_env_settings_and_errors(ctl):
    env = {"SLUICE_HOST": ctl.api.host, "SLUICE_MGMT_PORT": str(ctl.api.port),
           "SLUICE_USER": "guest", "SLUICE_PASSWORD": "guest"}
    ctl("list", "queues", env=env, use_flags=False)
    p = ctl("list", "queues", env=dict(env, SLUICE_PASSWORD="bad"), use_flags=False, ok=False)
    assert "HTTP 401" in p.stderr
    p = ctl("--host", "127.0.0.1", "--port", "1", "list", "queues", use_flags=False, ok=False)
    assert "cannot connect" in p.stderr
    p = ctl("frobnicate", ok=None)
    assert p.returncode == 2
    p = ctl("move", "q", "d", ok=None)
    assert p.returncode == 2
    assert json.loads(ctl("whoami").stdout)["name"] == "guest"
    # options may follow the verb
    ctl("list", "queues", "--vhost", "/", "--json")


def test_users_vhosts_permissions_verbs(ctl, broker):
    """rabbitmqctl's verbs: add_user ... list_user_limits, each one request or two."""
    u, vh = uname("cu"), uname("cv")
    assert 'Adding user "%s"' % u in ctl("add_user", u, "s3cret").stdout
    ctl("add_user", u, "again", ok=False)  # already exists: exit 1, one line
    ctl("set_user_tags", u, "management", "monitoring")
    assert [r["tags"] for r in rows(ctl("list_users").stdout) if r["name"] == u] == \
        ['["management","monitoring"]']
    ctl("authenticate_user", u, "s3cret")
    ctl("authenticate_user", u, "wrong", ok=False)
    ctl("change_password", u, "n3w")
    ctl("authenticate_user", u, "n3w")  # set_user_tags and change_password kept the rest
    ctl("add_vhost", vh)
    assert vh in [r["name"] for r in rows(ctl("list_vhosts").stdout)]
    ctl("set_permissions", "--vhost", vh, u, "^c", "^w", "^r")
    perms = rows(ctl("list_permissions", "--vhost", vh).stdout)
    assert {"user": u, "configure": "^c", "write": "^w", "read": "^r"} in perms
    assert [r["vhost"] for r in rows(ctl("list_user_permissions", u).stdout)] == [vh]
    ctl("set_permissions", "--vhost", vh, u, "(", "", "", ok=False)  # bad pattern
    ctl("set_topic_permissions", "--vhost", vh, u, "amq.topic", "^a", "^b")
    assert rows(ctl("list_topic_permissions", "--vhost", vh).stdout)[0]["exchange"] == "amq.topic"
    ctl("clear_topic_permissions", "--vhost", vh, u)
    ctl("set_vhost_limits", "--vhost", vh, '{"max-connections": 3, "max-queues": 7}')
    js = json.loads(ctl("list_vhost_limits", "--vhost", vh, "--json").stdout)
    assert js == [{"vhost": vh, "value": {"max-connections": 3, "max-queues": 7}}]
    ctl("clear_vhost_limits", "--vhost", vh)
    assert json.loads(ctl("list_vhost_limits", "--vhost", vh, "--json").stdout) == []
    ctl("set_user_limits", u, '{"max-channels": 5}')
    js = json.loads(ctl("list_user_limits", u, "--json").stdout)
    assert js == [{"user": u, "value": {"max-channels": 5}}]
    ctl("clear_user_limits", u, "all")
    ctl("clear_permissions", "--vhost", vh, u)
    assert rows(ctl("list_user_permissions", u).stdout) == []
    ctl("clear_password", u)
    ctl("authenticate_user", u, "n3w", ok=False)
    ctl("delete_vhost", vh)
    ctl("delete_user", u)
    ctl("delete_user", u, ok=False)
