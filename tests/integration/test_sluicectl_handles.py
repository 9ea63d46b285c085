"""sluicectl over queue handles and management objects: `purge` (open, purge, close),
`handle open|purge|close|show|list`, `foreign-status` and `management` through an
MSMQManagement object."""

import json

from helpers import uname
from test_sluicectl import ctl  # noqa: F401  (the fixture)


def handles(ctl):
    s, j, _ = ctl.api.get("/api/msmq/handles")
    assert s == 200
    return j


def objects(ctl):
    s, j, _ = ctl.api.get("/api/msmq/management")
    assert s == 200
    return j


def test_purge_goes_through_a_handle(ctl):
    q = uname("cp")
    ctl("declare", "queue", q, "--transient")
    for i in range(3):
        ctl("publish", "", q, "m%d" % i)
    out = ctl("purge", q).stdout
    assert out.strip() == "queue %s purged: 3 message(s) deleted, 0 pending" % q
    assert handles(ctl) == [], "purge left its handle open"
    ctl("publish", "", q, "again")
    fmtname = "DIRECT=OS:.\\private$\\" + q
    assert "1 message(s) deleted" in ctl("purge", fmtname).stdout
    assert "0 message(s) deleted" in ctl("purge", "queue", q).stdout
    p = ctl("purge", uname("none"), ok=False)
    assert "MQ_ERROR_QUEUE_NOT_FOUND (0xC00E0003)" in p.stderr
    p = ctl("purge", "DIRECT=OS:.\\private$\\", ok=False)
    assert "MQ_ERROR_ILLEGAL_FORMATNAME (0xC00E001E)" in p.stderr
    assert handles(ctl) == []


def test_purge_of_another_vhost(ctl):
    vh = uname("cv")
    s, _, _ = ctl.api.put("/api/vhosts/" + vh)
    q = uname("cq")
    ctl("declare", "queue", q, "--transient", "--vhost", vh)
    s, j, _ = ctl.api.post("/api/exchanges/%s/amq.default/publish" % vh,
                           {"routing_key": q, "payload": "x", "payload_encoding": "string",
                            "properties": {}})
    assert j["routed"]
    assert "1 message(s) deleted" in ctl("purge", q, "--vhost", vh).stdout
    p = ctl("purge", q, ok=False)  # not in "/"
    assert "MQ_ERROR_QUEUE_NOT_FOUND" in p.stderr


def test_handle_verbs(ctl):
    q = uname("ch")
    ctl("declare", "queue", q, "--transient")
    ctl("publish", "", q, "a")
    ctl("publish", "", q, "b")
    h = ctl("handle", "open", q).stdout.strip()
    assert len(h) == 24
    peek = ctl("handle", "open", "DIRECT=OS:.\\private$\\" + q, "--access", "peek").stdout.strip()
    out = ctl("handle", "list").stdout.splitlines()
    assert out[0].split()[:3] == ["handle", "kind", "user"]
    assert {l.split()[0] for l in out[1:]} == {h, peek}
    js = json.loads(ctl("handle", "list", "--json").stdout)
    assert {x["handle"]: x["access"] for x in js} == {h: "receive", peek: "peek"}
    assert json.loads(ctl("handle", "show", h).stdout)["queue"] == q
    p = ctl("handle", "purge", peek, ok=False)
    assert "MQ_ERROR_ACCESS_DENIED (0xC00E0025)" in p.stderr
    assert ctl("handle", "purge", h).stdout.strip() == \
        "MQ_OK (0x00000000): 2 message(s) deleted, 0 pending"
    assert ctl("handle", "close", h).stdout.strip() == "MQ_OK (0x00000000): handle %s closed" % h
    p = ctl("handle", "purge", h, ok=False)
    assert "MQ_ERROR_INVALID_HANDLE (0xC00E0007)" in p.stderr
    p = ctl("handle", "close", "not-a-handle", ok=False)
    assert "MQ_ERROR_INVALID_HANDLE" in p.stderr
    ctl("handle", "close", peek)
    p = ctl("handle", "open", q, "--access", "write", ok=False)
    assert "MQ_ERROR_UNSUPPORTED_ACCESS_MODE (0xC00E0045)" in p.stderr
    a = ctl("handle", "open", q, "--share", "deny_receive").stdout.strip()
    p = ctl("handle", "open", q, ok=False)
    assert "MQ_ERROR_SHARING_VIOLATION (0xC00E0009)" in p.stderr
    ctl("handle", "close", a)
    assert ctl("handle", "list", "--all").stdout.strip().splitlines()[1:] == []
    p = ctl("handle", "frob", ok=None)
    assert p.returncode == 2


def test_foreign_status_through_the_management_object(ctl):
    """Issue 12 item 10: an empty or unknown queue name is an error with its HRESULT, never
    success with value 0 ("(null) (0)")."""
    p = ctl("foreign-status", "", ok=False)
    assert "MQ_ERROR_ILLEGAL_FORMATNAME (0xC00E001E)" in p.stderr and p.stdout == ""
    p = ctl("foreign-status", uname("none"), ok=False)
    assert "MQ_ERROR_QUEUE_NOT_FOUND (0xC00E0003)" in p.stderr and p.stdout == ""
    p = ctl("foreign-status", "QUEUE=garbage", ok=False)
    assert "MQ_ERROR_ILLEGAL_FORMATNAME" in p.stderr
    q = uname("cf")
    ctl("declare", "queue", q, "--transient")
    assert ctl("foreign-status", q).stdout.strip() == "MQ_STATUS_NOT_FOREIGN (1)"
    assert ctl("foreign-status", "DIRECT=OS:.\\private$\\" + q).stdout.strip() == \
        "MQ_STATUS_NOT_FOREIGN (1)"
    assert ctl("foreign-status", "DIRECT=OS:.\\SYSTEM$;DEADLETTER").stdout.strip() == \
        "MQ_STATUS_NOT_FOREIGN (1)"
    assert objects(ctl) == [], "foreign-status left its management object behind"


def test_management_members(ctl):
    q = uname("cm")
    ctl("declare", "queue", q, "--transient")
    ctl("publish", "", q, "abcd")
    out = ctl("management", q, "message-count", "queue-type", "IsLocal",
              "bytes-in-queue").stdout.splitlines()
    assert out == ["MessageCount = 1", "QueueType = 1 (MQ_TYPE_PRIVATE)",
                   "IsLocal = true (VARIANT_TRUE)", "BytesInQueue = 4"]
    p = ctl("management", q, "state", ok=False)
    assert "E_NOINTERFACE (0x80004002)" in p.stderr
    p = ctl("management", q, "nonsense", ok=False)
    assert "DISP_E_MEMBERNOTFOUND (0x80020003)" in p.stderr
    js = json.loads(ctl("management", q, "foreign-status", "--json").stdout)
    assert js["value"] == 1 and js["name"] == "MQ_STATUS_NOT_FOREIGN"
    assert objects(ctl) == []
