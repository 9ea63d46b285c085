"""Permissions through remote queue proxies and remote management objects (issue 35, finding
2), on the multi-node loopback harness (multinode.py).

The owner resolves queue names without regard to case (and "<vhost>/<queue>" when that vhost
exists there), so the proxying node's check must be made on the name the owner resolved, not
on the spelling the user wrote; and every operation through a proxy is checked against the
user's permissions at that moment, as a local handle's are."""

from test_handles import Handles, hr
from test_handles_link import fill
from test_mgmt import Api
from test_mgmt_object import Mgmt

OK = ("0x00000000", "MQ_OK")
ACCESS_REFUSED = ("0xC00E0025", "MQ_ERROR_ACCESS_DENIED")


def _carol(nodes):
    a = nodes.start("a", config={"user.carol": "pc", "user.carol.tags": "management"})
    b = nodes.start("b")
    s, j, _ = a.api.put("/api/permissions/%2F/carol",
                        {"configure": "", "write": "", "read": "^(?!payroll$).*"})
    assert s in (201, 204), (s, j)
    return a, b, Handles(Api(a.broker, "carol", "pc"))


def test_a_proxy_is_checked_on_the_name_the_owner_resolves(nodes):
    a, b, hc = _carol(nodes)
    fill(b, "payroll", 3)
    for spelling in ("payroll", "PAYROLL", "Payroll", "payRoll"):
        s, j = hc.open(b.fmt(spelling), ok=False)
        assert s == 403 and hr(j) == ACCESS_REFUSED, (spelling, s, j)
        assert "payroll" in j["reason"], j
    assert hc.list() == []
    # nothing was purged, and the owner holds no context for the refused opens
    assert b.api.queue("payroll")["messages"] == 3
    hb = Handles(b.api)
    s, x = hb.open("DIRECT=OS:.\\private$\\payroll", share="deny_receive")
    assert s == 201, x
    hb.close(x["handle"])
    # a local handle on a, same spellings, same answer (the rule is one)
    a.api.put(a.api.q("payroll", "/"), {"durable": True})
    for spelling in ("payroll", "PAYROLL"):
        s, j = hc.open("DIRECT=OS:.\\private$\\" + spelling, ok=False)
        assert s == 403 and hr(j) == ACCESS_REFUSED, (spelling, s, j)
    # what carol may read still opens, in any spelling, and names the owner's queue
    fill(b, "public", 2)
    s, j = hc.open(b.fmt("PUBLIC"))
    assert j["queue"] == "public" and j["vhost"] == "/", j
    s, p = hc.purge(j["handle"])
    assert s == 200 and p["message_count"] == 2, p


def test_every_proxy_operation_follows_the_permissions_of_the_moment(nodes):
    a, b, hc = _carol(nodes)
    fill(b, "public", 10)
    s, j = hc.open(b.fmt("public"))
    h = j["handle"]
    s, g = hc.get(h)
    assert s == 200 and hr(g) == OK, g
    s, d, _ = a.api.delete("/api/permissions/%2F/carol")
    assert s in (200, 204), (s, d)
    s, p = hc.purge(h)
    assert s == 403 and hr(p) == ACCESS_REFUSED and "carol" in p["reason"], p
    assert b.api.queue("public")["messages"] == 10
    s, g = hc.get(h)
    assert s == 403 and hr(g) == ACCESS_REFUSED, g
    # permissions back: the same proxy works again; closing is never refused
    s, d, _ = a.api.put("/api/permissions/%2F/carol",
                        {"configure": "", "write": "", "read": "^(?!payroll$).*"})
    s, p = hc.purge(h)
    assert s == 200 and p["message_count"] == 10, p
    a.api.delete("/api/permissions/%2F/carol")
    s, c = hc.close(h)
    assert s == 200 and hr(c) == OK, c


def test_the_owner_checks_the_links_user_at_every_purge(nodes):
    a = nodes.start("a", config={"link_user": "node", "link_password": "secret"})
    b = nodes.start("b", config={"user.node": "secret", "user.node.tags": "link"})
    fill(b, "public", 4)
    ha = Handles(a.api)
    s, j = ha.open(b.fmt("public"))
    s, d, _ = b.api.delete("/api/permissions/%2F/node")
    assert s in (200, 204), (s, d)
    s, p = ha.purge(j["handle"])
    assert s == 403 and hr(p) == ACCESS_REFUSED and "node" in p["reason"], p
    assert b.api.queue("public")["messages"] == 4


def test_a_remote_management_object_follows_this_nodes_user(nodes):
    a, b, _ = _carol(nodes)
    fill(b, "public", 2)
    mc = Mgmt(Api(a.broker, "carol", "pc"))
    m = mc.create()
    s, j = mc.init(m, machine="%s:%d" % (b.addr, b.port), pathname=".\\private$\\public")
    assert s == 200, j
    assert mc.value(m, "message-count")["value"] == 2
    s, d, _ = a.api.delete("/api/permissions/%2F/carol")
    s, j = mc.get(m, "message-count")
    assert s == 403 and hr(j) == ACCESS_REFUSED and "carol" in j["reason"], j


def test_a_proxy_allows_what_a_local_handle_allows_in_any_spelling(nodes):
    """The check is on the resolved name only, so a user who may read `^payroll$` opens
    `PAYROLL` through a proxy exactly as a local handle opens it."""
    a = nodes.start("a", config={"user.dave": "pd", "user.dave.tags": "management"})
    b = nodes.start("b")
    s, j, _ = a.api.put("/api/permissions/%2F/dave", {"configure": "", "write": "",
                                                      "read": "^payroll$"})
    assert s in (201, 204), (s, j)
    fill(b, "payroll", 1)
    a.api.put(a.api.q("payroll", "/"), {"durable": True})
    hd = Handles(Api(a.broker, "dave", "pd"))
    s, j = hd.open("DIRECT=OS:.\\private$\\PAYROLL")
    assert j["queue"] == "payroll", j
    s, j = hd.open(b.fmt("PAYROLL"))
    assert j["queue"] == "payroll" and j["kind"] == "remote", j
    s, p = hd.purge(j["handle"])
    assert s == 200 and p["message_count"] == 1, p


def test_queue_info_over_a_link_follows_the_listing_rule_for_the_links_user(nodes):
    a = nodes.start("a", config={"link_user": "node", "link_password": "secret"})
    b = nodes.start("b", config={"user.node": "secret", "user.node.tags": "link"})
    b.api.put("/api/vhosts/hidden")
    s, j, _ = b.api.put(b.api.q("deep", "hidden"), {"durable": True})
    assert s in (201, 204), (s, j)
    s, j, _ = b.api.delete("/api/permissions/hidden/node")  # none, unless given
    assert s in (200, 204, 404), (s, j)
    ask = {"address": "%s:%d" % (b.addr, b.port),
           "request": {"op": "queue.info", "vhost": "hidden", "queue": "deep"}}
    s, j, _ = a.api.post("/api/msmq/remote", ask)
    assert s == 200 and j["ok"] is False and j["hresult_name"] == "MQ_ERROR_ACCESS_DENIED", j
    assert "message_count" not in j
    b.api.put("/api/permissions/hidden/node", {"configure": "", "write": "", "read": ""})
    s, j, _ = a.api.post("/api/msmq/remote", ask)
    assert s == 200 and j["ok"] is True and j["message_count"] == 0, j
