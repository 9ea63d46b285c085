"""No listing shows a vhost the user has no permission entry on (issue 35, finding 3).

docs/security.md "Users, vhosts and permissions": listings show administrators every vhost and
others (monitoring included) the vhosts they have a permission entry on. This test walks EVERY
route of the management API (the table below) as a management user and as a monitoring user, each
with one vhost, while another vhost holds distinctive names (all with the prefix "zz-secret") and
distinctive figures (message count, body bytes, queue and exchange counts, and their sums with the
user's own vhost), and asserts that none of them appears in any reply.

The table is checked against the sources: every route name of src/mgmt/mgmt.c's route table
and every path segment the handlers in src/mgmt/*.c compare against must appear in some path
of the table, so a new endpoint cannot be forgotten here.

Deliberate exceptions, each a documented contract (docs/security.md), are listed in EXCEPTIONS
with the reason; nothing else is exempt.
"""

import glob
import json
import os
import re
import urllib.parse

import amqp

from helpers import wait_for
from test_permissions import Http

SECRET = "zz-secret-vh"
OWN = "own-vh"
SQ = "zz-secret-queue"
SX = "zz-secret-exch"
SKEY = "zz-secret-key"
SREMOTE = "zz-secret-remote"
SCTAG = "zz-secret-ctag"
SECRET_MSGS = 1013  # messages in SQ
SECRET_BODY = 317  # bytes each
SECRET_QUEUES = 211  # extra queues in the secret vhost
SECRET_EXCHANGES = 163  # extra exchanges there

OWNQ = "own-queue"
OWNX = "own-exch"

# Keys whose numbers are clocks, ids or sizes of the node (its descriptors, sockets, threads
# and CPUs: /api/nodes), never vhost figures.
TIME_KEYS = re.compile(r"(_at|_ms|_time|time|uptime|port|pid|_id|id|mem_.*|timestamp|oct|_cnt|"
                       r"_us|_s|limit|max|frame_max|channel_max|heartbeat|incarnation|"
                       r"idle_since|node|seq.*|SeqNo|PrevNo|SeqID|fd_.*|sockets_.*|proc_used|"
                       r"run_queue|processors)$", re.I)

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src", "mgmt")

# (method, path, body): {own}, {me}, {ownq}, {ownx}, {secret}, {sq}, {sx}, {h}, {m}, {t},
# {conn}, {chan} are filled in. Probes that name a secret resource may echo what the user
# wrote; they must not answer anything about it.
ROUTES = [
    ("GET", "/api/overview", None),
    ("GET", "/api/nodes", None),
    ("GET", "/api/nodes/{node}", None),
    ("GET", "/api/cluster", None),
    ("POST", "/api/cluster/step-down", None),
    ("DELETE", "/api/cluster/nodes/{secret}", None),
    ("POST", "/api/cluster/nodes/{secret}/readmit", None),
    ("GET", "/api/whoami", None),
    ("GET", "/api/session", None),
    ("GET", "/api/vhosts", None),
    ("GET", "/api/vhosts?page=1&page_size=500", None),
    ("GET", "/api/vhosts/{own}", None),
    ("GET", "/api/vhosts/{secret}", None),
    ("GET", "/api/vhosts/{own}/connections", None),
    ("GET", "/api/vhosts/{own}/channels", None),
    ("GET", "/api/vhosts/{secret}/connections", None),
    ("GET", "/api/vhosts/{secret}/channels", None),
    ("GET", "/api/vhosts/{own}/permissions", None),
    ("GET", "/api/vhosts/{secret}/permissions", None),
    ("GET", "/api/vhosts/{own}/topic-permissions", None),
    ("GET", "/api/vhosts/{secret}/topic-permissions", None),
    ("GET", "/api/users", None),
    ("GET", "/api/users/{me}", None),
    ("GET", "/api/users/without-permissions", None),
    ("POST", "/api/users/bulk-delete", {"users": []}),
    ("GET", "/api/users/{me}/permissions", None),
    ("GET", "/api/users/{me}/topic-permissions", None),
    ("GET", "/api/permissions", None),
    ("GET", "/api/permissions/{own}/{me}", None),
    ("GET", "/api/permissions/{secret}/guest", None),
    ("GET", "/api/topic-permissions", None),
    ("GET", "/api/vhost-limits", None),
    ("GET", "/api/vhost-limits/{own}", None),
    ("GET", "/api/vhost-limits/{secret}", None),
    ("GET", "/api/user-limits", None),
    ("GET", "/api/user-limits/{me}", None),
    ("GET", "/api/queues", None),
    ("GET", "/api/queues?page=1&page_size=500", None),
    ("GET", "/api/queues?page=1&page_size=500&name=zz&use_regex=true", None),
    ("GET", "/api/queues/{own}", None),
    ("GET", "/api/queues/{secret}", None),
    ("GET", "/api/queues/{own}/{ownq}", None),
    ("GET", "/api/queues/{own}/{ownq}/bindings", None),
    ("GET", "/api/queues/{own}/{ownq}/subqueues", None),
    ("GET", "/api/queues/{own}/{ownq}/messages", None),
    ("POST", "/api/queues/{own}/{ownq}/get",
     {"count": 1, "ackmode": "reject_requeue_true", "encoding": "auto"}),
    ("DELETE", "/api/queues/{own}/empty-own-q/contents", None),
    ("POST", "/api/queues/{own}/{ownq}/move", {"destination": "{ownq};moved", "count": 0}),
    ("GET", "/api/queues/{secret}/{sq}", None),
    ("GET", "/api/queues/{secret}/{sq}/bindings", None),
    ("GET", "/api/queues/{secret}/{sq}/subqueues", None),
    ("GET", "/api/queues/{secret}/{sq}/messages", None),
    ("POST", "/api/queues/{secret}/{sq}/get",
     {"count": 1, "ackmode": "reject_requeue_true", "encoding": "auto"}),
    ("DELETE", "/api/queues/{secret}/{sq}/contents", None),
    ("POST", "/api/queues/{own}/{ownq}/move", {"destination": "{secret}/{sq}", "count": 0}),
    ("GET", "/api/exchanges", None),
    ("GET", "/api/exchanges?page=1&page_size=500", None),
    ("GET", "/api/exchanges/{own}", None),
    ("GET", "/api/exchanges/{secret}", None),
    ("GET", "/api/exchanges/{own}/{ownx}", None),
    ("GET", "/api/exchanges/{own}/{ownx}/bindings/source", None),
    ("GET", "/api/exchanges/{own}/{ownx}/bindings/destination", None),
    ("POST", "/api/exchanges/{own}/{ownx}/publish",
     {"routing_key": "nowhere", "payload": "x", "payload_encoding": "string", "properties": {}}),
    ("GET", "/api/exchanges/{secret}/{sx}", None),
    ("GET", "/api/exchanges/{secret}/{sx}/bindings/source", None),
    ("GET", "/api/bindings", None),
    ("GET", "/api/bindings?page=1&page_size=500", None),
    ("GET", "/api/bindings/{own}", None),
    ("GET", "/api/bindings/{secret}", None),
    ("GET", "/api/bindings/{own}/e/{ownx}/q/{ownq}", None),
    ("GET", "/api/bindings/{own}/e/{ownx}/e/amq.direct", None),
    ("GET", "/api/bindings/{secret}/e/{sx}/q/{sq}", None),
    ("GET", "/api/connections", None),
    ("GET", "/api/connections?page=1&page_size=500", None),
    ("GET", "/api/connections/{conn}", None),
    ("GET", "/api/connections/{conn}/channels", None),
    ("GET", "/api/channels", None),
    ("GET", "/api/channels/{chan}", None),
    ("GET", "/api/consumers", None),
    ("GET", "/api/consumers/{own}", None),
    ("GET", "/api/consumers/{secret}", None),
    ("GET", "/api/stream/connections", None),
    ("GET", "/api/stream/connections/{own}", None),
    ("GET", "/api/stream/connections/{secret}", None),
    ("GET", "/api/stream/connections/{own}/{conn}", None),
    ("GET", "/api/stream/publishers", None),
    ("GET", "/api/stream/publishers/{own}", None),
    ("GET", "/api/stream/publishers/{secret}", None),
    ("GET", "/api/stream/publishers/{secret}/{sq}", None),
    ("GET", "/api/stream/consumers", None),
    ("GET", "/api/stream/consumers/{own}", None),
    ("GET", "/api/stream/consumers/{secret}", None),
    ("GET", "/api/definitions", None),
    ("GET", "/api/definitions/{own}", None),
    ("GET", "/api/definitions/{secret}", None),
    ("GET", "/api/msmq/info?object=MACHINE&props=ACTIVEQUEUES,PRIVATEQ,BYTES_IN_ALL_QUEUES,"
     "DSSERVER,CONNECTED,TYPE", None),
    ("POST", "/api/msmq/info", {"object": "MACHINE",
                                "props": ["PRIVATEQ", "ACTIVEQUEUES", "BYTES_IN_ALL_QUEUES"]}),
    ("GET", "/api/msmq/info?object=QUEUE%3DDIRECT%3DOS%3A.%5Cprivate%24%5C{own}%2F{ownq}"
     "&props=MESSAGE_COUNT,BYTES_IN_QUEUE,SUBQUEUE_NAMES,EOD_SOURCE_INFO", None),
    ("GET", "/api/msmq/info?object=QUEUE%3DDIRECT%3DOS%3A.%5Cprivate%24%5C{secret}%2F{sq}"
     "&props=MESSAGE_COUNT,BYTES_IN_QUEUE", None),
    ("POST", "/api/msmq/action", {"object": "MACHINE", "action": "TIDY"}),
    ("GET", "/api/msmq/outgoing", None),
    ("GET", "/api/msmq/outgoing?vhost={secret}", None),
    ("GET", "/api/msmq/outgoing?vhost={own}", None),
    ("POST", "/api/msmq/remote", {"address": "127.0.0.1:1", "request": {"op": "queue.info"}}),
    ("GET", "/api/msmq/handles", None),
    ("GET", "/api/msmq/handles?all=true", None),
    ("GET", "/api/msmq/handles/{h}", None),
    ("POST", "/api/msmq/handles/{h}/purge", None),
    ("POST", "/api/msmq/handles", {"queue": "{sq}", "vhost": "{secret}", "access": "peek"}),
    ("GET", "/api/msmq/management", None),
    ("GET", "/api/msmq/management/{m}", None),
    ("POST", "/api/msmq/management/{m}/init",
     {"pathname": ".\\private$\\{sq}", "vhost": "{secret}"}),
    ("GET", "/api/msmq/management/{m}/message-count", None),
    ("GET", "/api/msmq/management/{m}/bytes-in-queue", None),
    ("POST", "/api/msmq/management/{m}/pause", None),
    ("GET", "/api/transactions", None),
    ("GET", "/api/transactions/{t}", None),
    ("POST", "/api/transactions/{t}/commit", None),
    ("POST", "/api/transactions/{t}/abort", None),
    ("GET", "/metrics/per-object", None),
]

# Documented contracts that show more than the user's vhosts, with the reason (docs/):
#   /metrics: node-wide aggregates without names and without a login (rabbitmq_prometheus's
#     aggregated endpoint); it shows every vhost's sum by design.
#   monitoring users: /api/vhosts lists every vhost ("/api/vhosts shows monitoring users
#     every vhost", RabbitMQ's list_visible_vhosts), and connections and channels are shown
#     to monitoring users (with their vhost).
EXCEPTIONS = {
    "monitoring": ("/api/vhosts", "/api/vhosts?page=1&page_size=500", "/api/vhosts/{secret}",
                   "/api/vhosts/{secret}/connections", "/api/vhosts/{secret}/channels",
                   "/api/connections", "/api/connections?page=1&page_size=500",
                   "/api/channels"),
}
UNAUTHENTICATED = [("GET", "/metrics", None)]


def _source_segments():
    """Every route name and every path segment a handler compares against."""
    segs = set()
    for path in glob.glob(os.path.join(SRC, "*.c")):
        text = open(path).read()
        segs.update(re.findall(r'\{"([a-z-]+)", api_[a-z_]+\}', text))
        segs.update(re.findall(r'strcmp\((?:r->)?segs\[\d\], "([^"]+)"\)', text))
        segs.update(re.findall(r'strcmp\((?:name|what), "([^"]+)"\)', text))
    return segs


def test_the_table_walks_every_route_of_the_sources():
    segs = _source_segments()
    assert len(segs) > 30, segs  # the scan itself works
    covered = set()
    for _, path, _ in ROUTES + UNAUTHENTICATED:
        covered.update(p for p in re.split(r"[/?&=]", path) if p)
    missing = sorted(s for s in segs if s not in covered)
    assert not missing, ("routes not walked by test_listing_isolation.py ROUTES: %s" % missing)


def _secret_figures(admin, own_stats):
    """The secret vhost's figures and their sums with the user's vhost."""
    s, vhs = admin.get("/api/vhosts")
    sec = [v for v in vhs if v["name"] == SECRET][0]
    own = [v for v in vhs if v["name"] == OWN][0]
    s, qs = admin.get("/api/queues/" + SECRET)
    sec_bytes = sum(q.get("message_bytes", 0) for q in qs)
    s, xs = admin.get("/api/exchanges/" + SECRET)
    figs = {
        "messages": sec["messages"], "bytes": sec_bytes, "queues": len(qs), "exchanges": len(xs),
    }
    out = set()
    for k, v in figs.items():
        out.add(v)
        out.add(v + own_stats[k])
    # (its outgoing queue holds one more message)
    assert sec["messages"] >= SECRET_MSGS and sec_bytes >= SECRET_MSGS * SECRET_BODY, sec
    assert own["messages"] == own_stats["messages"], own
    return {f for f in out if f > 100}


def _numbers(j, key=""):
    if isinstance(j, bool):
        return
    if isinstance(j, (int, float)):
        if not TIME_KEYS.search(key):
            yield key, j
    elif isinstance(j, dict):
        for k, v in j.items():
            yield from _numbers(v, k)
    elif isinstance(j, list):
        for v in j:
            yield from _numbers(v, key)


def _metric_name(line):
    return re.split(r"[{ ]", line, 1)[0]


def _text_numbers(text, public=()):
    """The series of a Prometheus text, but those of the public, node-wide /metrics."""
    for line in text.splitlines():
        if line.startswith("#") or not line.strip() or _metric_name(line) in public:
            continue
        name, _, value = line.rpartition(" ")
        try:
            yield name, float(value)
        except ValueError:
            pass


def _leaks(method, path, status, body, figures, request=None, public=()):
    """What of the secret vhost a reply shows: names it was not told, figures."""
    text = body if isinstance(body, str) else json.dumps(body)
    told = urllib.parse.unquote(path) + json.dumps(request)
    found = []
    for name in (SECRET, SQ, SX, SKEY, SREMOTE, SCTAG):
        if name in text and name not in told:
            found.append(name)
    if status < 300:
        nums = _text_numbers(body, public) if isinstance(body, str) else _numbers(body)
        found += ["%s=%s" % (k, v) for k, v in nums if v in figures]
    return found


def _setup(broker):
    admin = Http(broker.host, broker.mgmt_port, "guest", "guest")
    for vh in (OWN, SECRET):
        s, j = admin.put("/api/vhosts/" + vh)
        assert s in (201, 204), (s, j)
    for user, tags in (("lister", "management"), ("watcher", "monitoring")):
        s, j = admin.put("/api/users/" + user, {"password": "pw", "tags": tags})
        assert s in (201, 204), (s, j)
        s, j = admin.put("/api/permissions/%s/%s" % (OWN, user),
                         {"configure": ".*", "write": ".*", "read": ".*"})
        assert s in (201, 204), (s, j)
    # the secret vhost: many queues and exchanges, one deep queue, a binding, a consumer,
    # an outgoing queue, guest's handle, management object and transaction on it
    c = broker.amqp(virtual_host=SECRET)
    ch = c.channel()
    ch.queue_declare(SQ, durable=True, auto_delete=False)
    ch.exchange_declare(SX, "direct", durable=True, auto_delete=False)
    ch.queue_bind(SQ, SX, SKEY)
    for i in range(SECRET_QUEUES):
        ch.queue_declare("%s-%03d" % (SQ, i), durable=False, auto_delete=False)
    for i in range(SECRET_EXCHANGES):
        ch.exchange_declare("%s-%03d" % (SX, i), "fanout", durable=False, auto_delete=False)
    ch.confirm_select()
    for i in range(SECRET_MSGS):
        ch.basic_publish(amqp.Message(b"s" * SECRET_BODY, delivery_mode=2), exchange="",
                         routing_key=SQ)
    ch.basic_publish(amqp.Message(b"r", delivery_mode=2), exchange="",
                     routing_key="DIRECT=TCP:127.0.0.1:1\\private$\\" + SREMOTE)
    ch2 = c.channel()
    ch2.basic_consume("%s-000" % SQ, consumer_tag=SCTAG, callback=lambda m: None)
    wait_for(lambda: admin.get("/api/queues/%s/%s" % (SECRET, SQ))[1].get("messages")
             == SECRET_MSGS, message="secret messages not all there")
    s, j = admin.post("/api/msmq/handles", {"queue": SQ, "vhost": SECRET, "access": "peek"})
    assert s == 201, j
    s, j = admin.post("/api/transactions")
    assert s in (200, 201), j
    # the user's own vhost: a little of everything, with other figures
    oc = broker.amqp(user="lister", password="pw", virtual_host=OWN)
    och = oc.channel()
    och.queue_declare(OWNQ, durable=True, auto_delete=False)
    och.queue_declare("empty-own-q", durable=True, auto_delete=False)
    och.exchange_declare(OWNX, "direct", durable=True, auto_delete=False)
    och.queue_bind(OWNQ, OWNX, "k")
    och.confirm_select()
    for i in range(3):
        och.basic_publish(amqp.Message(b"own%04d" % i, delivery_mode=2), exchange="",
                          routing_key=OWNQ)
    s, xs = admin.get("/api/exchanges/" + OWN)
    s, qs = admin.get("/api/queues/" + OWN)
    own = {"messages": 3, "bytes": 21, "queues": len(qs), "exchanges": len(xs)}
    return admin, own, (c, oc)


def _fill(path, ids):
    for k, v in ids.items():
        path = path.replace("{%s}" % k, urllib.parse.quote(v, safe=""))
    return path


def _fill_body(body, ids):
    if body is None:
        return None
    text = json.dumps(body)
    for k, v in ids.items():
        text = text.replace("{%s}" % k, v)
    return json.loads(text)


def _walk(broker, user, ids, figures, skip=()):
    api = Http(broker.host, broker.mgmt_port, user, "pw")
    public = _public_metric_names(broker)
    problems = []
    for method, tpl, body in ROUTES:
        if tpl in skip:
            continue
        path = _fill(tpl, ids)
        req_body = _fill_body(body, ids)
        s, j = api.request(method, path, req_body)
        if isinstance(j, bytes):
            j = j.decode("utf-8", "replace")
        leaks = _leaks(method, path, s, j if j is not None else "", figures, req_body, public)
        if leaks:
            problems.append("%s %s (%s as %s): %s" % (method, path, s, user, leaks))
    return problems


def _public_metric_names(broker):
    s, j = Http(broker.host, broker.mgmt_port, "nobody", "x").get("/metrics")
    assert s == 200, s
    text = j.decode() if isinstance(j, bytes) else j
    return {_metric_name(x) for x in text.splitlines() if x and not x.startswith("#")}


def _ids(broker, user, admin):
    api = Http(broker.host, broker.mgmt_port, user, "pw")
    s, h = api.post("/api/msmq/handles", {"queue": OWNQ, "vhost": OWN, "access": "peek"})
    assert s == 201, h
    s, m = api.post("/api/msmq/management")
    assert s == 201, m
    s, t = api.post("/api/transactions")
    assert s in (200, 201), t
    s, conns = admin.get("/api/connections")
    mine = [c for c in conns if c["user"] == "lister"][0]["name"]
    s, chans = admin.get("/api/channels")
    chan = [c for c in chans if c["connection_details"]["name"] == mine][0]["name"] \
        if chans and "connection_details" in chans[0] else chans[0]["name"]
    s, node = admin.get("/api/overview")
    return {"own": OWN, "secret": SECRET, "me": user, "ownq": OWNQ, "ownx": OWNX, "sq": SQ,
            "sx": SX, "h": h["handle"], "m": m["id"], "t": str(t["id"]), "conn": mine,
            "chan": chan, "node": node["node"]}


def test_no_reply_shows_a_vhost_the_user_has_no_entry_on(broker_factory):
    broker = broker_factory()
    admin, own, clients = _setup(broker)
    figures = _secret_figures(admin, own)
    problems = []
    for user in ("lister", "watcher"):
        ids = _ids(broker, user, admin)
        problems += _walk(broker, user, ids, figures,
                          skip=EXCEPTIONS.get("monitoring", ()) if user == "watcher" else ())
    assert not problems, "\n".join(problems)
    # the unauthenticated aggregate is what it says: no names
    for method, path, _ in UNAUTHENTICATED:
        api = Http(broker.host, broker.mgmt_port, "nobody", "x")
        s, j = api.request(method, path)
        j = j.decode() if isinstance(j, bytes) else j
        assert s == 200 and not _leaks(method, path, s, "", figures), (path, s)
        assert SECRET not in j and SQ not in j, path
    # and the administrator does see them (the test's names are where it looks)
    s, j = admin.get("/metrics/per-object")
    j = j.decode() if isinstance(j, bytes) else j
    assert SQ in j and SECRET in j
    s, j = admin.get("/api/msmq/outgoing?vhost=" + SECRET)
    assert s == 200 and len(j) == 1 and SREMOTE in json.dumps(j), j
