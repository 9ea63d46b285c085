"""The standing permission check (issue 35): random users with random permission patterns,
every door's decision compared with ONE reference model of RabbitMQ's rules, written here in
Python from docs/security.md's tables (never from the C).

Doors: AMQP (queue.declare, exchange.declare, basic.publish, basic.get, basic.consume,
queue.bind, exchange.bind, queue.purge, queue.delete), the HTTP API (peek, get, purge, declare, publish, move), MSMQ
management actions and properties (GetInfo, management objects here and on another
node), local queue handles (receive, peek, send; format names resolve without
regard to case), remote queue proxies on another node (open and purge, with the user's
permissions changed between the two), moves, and node-to-node links (a link session claiming
a node id, then one batch to a queue: refused at the handshake, refused for the queue, or
delivered exactly once). Names come in case variants and as
subqueues; patterns include anchors, (?i), look-aheads like ^(?!payroll$).* and the empty
pattern (which allows nothing).

Seeded and reproducible: the seed is printed and named in every failure; rerun with
SLUICE_PERM_SEED=<seed> (and SLUICE_PERM_CASES=<n>, default 3000) to replay it.
Two nodes (the owner of the proxied queues and the node under test), many users.
"""

import json
import os
import random
import re
import time
import urllib.parse

import amqp
import pytest

from amqpraw import PROTOCOL_HEADER
from test_link_forged import eod_control
from test_permissions import Http

SEED = int(os.environ.get("SLUICE_PERM_SEED") or random.SystemRandom().randrange(1 << 32))
CASES = int(os.environ.get("SLUICE_PERM_CASES") or 3000)
USERS = 24
BUDGET_S = 60.0  # the run stops drawing new cases after this long (a busy machine)

QUEUES = ["payroll", "pub.q", "Orders", "a1", "zz.top"]
EXCHANGES = ["ex.a", "Ex.B", "amq.direct"]  # direct and fanout: no topic permissions
PATTERNS = ["", ".*", "^payroll$", "^(?!payroll$).*", "(?i)^payroll$", "^pub\\.", "pay",
            "^PAY", "(?i)orders", "^Orders$", "^orders$", "^[a-p]", "q$", "^(?!pub).*",
            "^(a1|zz\\.top)$", "^a", "^$", "^ex\\.", "(?i)^EX\\.", "^amq\\.",
            "^(?!amq\\.).*", "O", "^.{2}$", "\\.", "^(?=.*a).*$", "^(?!(?i:PAYROLL)$).*",
            "^amq\\.default$", "^(?!amq\\.default$)"]
TAGS = ["management", "management", "monitoring", "administrator", "", "policymaker", "link",
        "link", "link,management"]
LINK_NODES = ["a1" * 16, "b2" * 16, "c3" * 16]  # the node ids links claim
MGMT_TAGS = {"management", "monitoring", "administrator", "policymaker"}


# ------------------------------------------------------------------------------------------
# The reference model (docs/security.md "Users, vhosts and permissions"; RabbitMQ's rules)

def matches(pattern, name):
    """RabbitMQ: a PCRE matched unanchored against the whole name; "" allows nothing; a
    subqueue q;s is checked as q."""
    if pattern == "":
        return False
    return re.search(pattern, name.split(";", 1)[0]) is not None


class Model:
    def __init__(self):
        # name -> {"tags": str, "perm": None | (conf, write, read), "link_node": None | hex}
        self.users = {}

    def tags(self, u):
        return set(self.users[u]["tags"].split(",")) - {""}

    def entry(self, u):
        return self.users[u]["perm"] is not None

    def may(self, u, kind, name):
        p = self.users[u]["perm"]
        if p is None:
            return False
        return matches(p[{"configure": 0, "write": 1, "read": 2}[kind]], name)

    def mgmt(self, u):
        return bool(self.tags(u) & MGMT_TAGS)

    def admin(self, u):
        return "administrator" in self.tags(u)

    def link_login(self, u, node):
        """README "Link users": the administrator tag speaks for any node; the link tag for
        the one node its first link session bound (bound at the handshake, before the vhost
        is opened); any other user is refused."""
        if self.admin(u):
            return True
        if "link" not in self.tags(u):
            return False
        bound = self.users[u].get("link_node")
        if bound is None:
            self.users[u]["link_node"] = node
            return True
        return bound == node


def canonical(name, existing, subqueues):
    """How an MSMQ format name resolves: the exact queue, else one that differs in case. A
    subqueue (none exists here) is created by a local open (subqueues=True: MSMQ opens a
    missing subqueue of an existing queue) and not found on another node."""
    base, semi, sub = name.partition(";")
    if semi and not subqueues:
        return None
    if base in existing:
        return name
    for q in existing:
        if q.lower() == base.lower():
            return q + semi + sub
    return None


# ------------------------------------------------------------------------------------------
# The doors


class Doors:
    def __init__(self, a, b, model, rnd):
        self.a, self.b, self.model, self.rnd = a, b, model, rnd
        self.conns = {}
        self.seq = 0  # link sequences: a fresh one per batch
        self.guest = None  # counts what links delivered

    def http(self, u):
        return Http(self.a.broker.host, self.a.broker.mgmt_port, u, "pw")

    # -- AMQP: one connection per user, a fresh channel per operation --
    def amqp(self, u, op):
        """'refused', 'ok' or 'other:<code>' for op(channel)."""
        c = self.conns.get(u)
        if c is None or not c.connected:
            try:
                c = self.a.broker.amqp(user=u, password="pw")
            except amqp.exceptions.NotAllowed:
                return "refused"  # 530: no entry on the vhost
            except amqp.exceptions.AccessRefused:
                return "refused"
            self.conns[u] = c
        try:
            ch = c.channel()
        except amqp.exceptions.AMQPError as e:
            self.conns.pop(u, None)
            return "other:%s" % e
        try:
            op(ch)
        except amqp.exceptions.AccessRefused:
            return "refused"
        except amqp.exceptions.NotFound:
            return "ok"  # checked, allowed, then not found
        except amqp.exceptions.AMQPError as e:
            self.conns.pop(u, None)
            return "other:%s" % e
        try:
            ch.close()
        except amqp.exceptions.AMQPError:
            pass
        return "ok"

    @staticmethod
    def http_verdict(s, j):
        if s == 403:
            return "refused"
        if s in (200, 201, 204, 400, 404, 409):  # 400, 409: decided after the check
            return "ok"
        return "other:%s %s" % (s, j)


def _q(name):
    return urllib.parse.quote(name, safe="")


def _fmt_local(name):
    return "DIRECT=OS:.\\private$\\" + name


def spelling(rnd, names):
    n = rnd.choice(names)
    r = rnd.random()
    if r < 0.25:
        n = n.upper()
    elif r < 0.4:
        n = n.lower()
    elif r < 0.5:
        n = "".join(ch.upper() if rnd.random() < 0.5 else ch.lower() for ch in n)
    elif r < 0.6:
        n = n + ";sub"
    return n


def draw_perm(rnd):
    if rnd.random() < 0.1:
        return None

    def one():
        r = rnd.random()
        if r < 0.75:
            return rnd.choice(PATTERNS)
        n = rnd.choice(QUEUES + EXCHANGES)
        return rnd.choice(["^%s$", "(?i)^%s$", "^(?!%s$).*", "%s"]) % re.escape(n)
    return (one(), one(), one())


def set_perm(admin, u, perm):
    if perm is None:
        s, j = admin.request("DELETE", "/api/permissions/%2F/" + u)
        assert s in (200, 204, 404), (s, j)
    else:
        s, j = admin.put("/api/permissions/%2F/" + u,
                         {"configure": perm[0], "write": perm[1], "read": perm[2]})
        assert s in (201, 204), (s, j)


# ------------------------------------------------------------------------------------------
# Cases: each returns (description, expected, got)


def case_amqp(d, u, rnd):
    m = d.model
    kind = rnd.choice(["declare", "publish", "get", "consume", "purge", "bind", "delete",
                       "xdeclare", "xbind"])
    if kind == "xdeclare":  # existing exchanges, same type: nothing changes
        x, t = rnd.choice([("ex.a", "direct"), ("Ex.B", "fanout")])
        return ("AMQP exchange.declare %r" % x, m.may(u, "configure", x),
                d.amqp(u, lambda ch: ch.exchange_declare(x, t, durable=True, auto_delete=False)))
    if kind == "xbind":  # destination: write; source: read
        dst, src = rnd.choice(EXCHANGES[:2]), rnd.choice(EXCHANGES + ["EX.A"])
        exp = m.may(u, "write", dst) and m.may(u, "read", src)
        return ("AMQP exchange.bind %r <- %r" % (dst, src), exp,
                d.amqp(u, lambda ch: ch.exchange_bind(dst, src, "k")))
    if kind == "declare":  # existing names only: the universe stays as it is
        q = rnd.choice(QUEUES)
        exp = m.may(u, "configure", q)
        got = d.amqp(u, lambda ch: ch.queue_declare(q, durable=True, auto_delete=False))
        return "AMQP queue.declare %r" % q, exp, got
    if kind == "publish":
        x = rnd.choice(EXCHANGES + ["", "EX.A"])
        exp = m.may(u, "write", x or "amq.default")

        def pub(ch):
            ch.confirm_select()
            ch.basic_publish_confirm(amqp.Message(b"f"), exchange=x, routing_key="nowhere.rk")
        return "AMQP basic.publish to %r" % x, exp, d.amqp(u, pub)
    if kind == "delete":  # names that do not exist: nothing is taken away
        q = rnd.choice(["nothere", "NOTHERE", "payroll2", "pub.gone"])
        exp = m.may(u, "configure", q)
        return "AMQP queue.delete %r" % q, exp, d.amqp(u, lambda ch: ch.queue_delete(q))
    q = spelling(rnd, QUEUES)
    if kind == "get":
        return ("AMQP basic.get %r" % q, m.may(u, "read", q),
                d.amqp(u, lambda ch: ch.basic_get(q, no_ack=True)))
    if kind == "purge":
        return ("AMQP queue.purge %r" % q, m.may(u, "read", q),
                d.amqp(u, lambda ch: ch.queue_purge(q)))
    if kind == "consume":
        def consume(ch):
            tag = ch.basic_consume(q, callback=lambda msg: None)
            ch.basic_cancel(tag)
        return "AMQP basic.consume %r" % q, m.may(u, "read", q), d.amqp(u, consume)
    x = rnd.choice(EXCHANGES)
    exp = m.may(u, "write", q) and m.may(u, "read", x)
    return ("AMQP queue.bind %r to %r" % (q, x), exp,
            d.amqp(u, lambda ch: ch.queue_bind(q, x, "k")))


def case_http(d, u, rnd):
    m = d.model
    api = d.http(u)
    kind = rnd.choice(["peek", "get", "purge", "declare", "publish", "move", "action"])
    gate = m.mgmt(u)
    if kind == "action":  # MSMQ management action: the administrator tag
        s, j = api.post("/api/msmq/action", {"object": "MACHINE", "action": "connect"})
        return "HTTP MSMQ action CONNECT", gate and m.admin(u), Doors.http_verdict(s, j)
    if kind == "publish":
        x = rnd.choice(EXCHANGES)
        s, j = api.post("/api/exchanges/%%2F/%s/publish" % _q(x),
                        {"routing_key": "nowhere", "payload": "x", "payload_encoding": "string",
                         "properties": {}})
        return "HTTP publish to %r" % x, gate and m.may(u, "write", x), \
            Doors.http_verdict(s, j)
    if kind == "declare":
        q = rnd.choice(QUEUES)
        s, j = api.put("/api/queues/%%2F/%s" % _q(q), {"durable": True})
        return "HTTP declare %r" % q, gate and m.may(u, "configure", q), \
            Doors.http_verdict(s, j)
    # the API looks a queue up by its exact name: a missing one is 404 before any check
    q = spelling(rnd, QUEUES)
    exists = q in QUEUES  # no subqueue exists
    # the vhost in the path: administrators pass (they list every vhost), others need an
    # entry; then the queue is looked up, then the permission is checked
    vhost_gate = m.admin(u) or m.entry(u)
    if kind == "move":
        dest = rnd.choice([spelling(rnd, QUEUES), _fmt_local(spelling(rnd, QUEUES))])
        dname = dest[len(_fmt_local("")):] if dest.startswith("DIRECT=") else dest
        # a plain name is exact, and a subqueue destination is made by the move; a format
        # name resolves without regard to case, and names no missing subqueue
        dcanon = canonical(dname, QUEUES, False) if dest.startswith("DIRECT=") else \
            (dname if dname.split(";")[0] in QUEUES else None)
        s, j = api.post("/api/queues/%%2F/%s/move" % _q(q), {"destination": dest, "count": 0})
        exp = gate and vhost_gate and (
            not exists or dcanon is None or (m.may(u, "read", q) and m.may(u, "write", dcanon)))
        return "HTTP move %r -> %r" % (q, dest), exp, Doors.http_verdict(s, j)
    if kind == "peek":
        s, j = api.get("/api/queues/%%2F/%s/messages" % _q(q))
    elif kind == "get":
        s, j = api.post("/api/queues/%%2F/%s/get" % _q(q),
                        {"count": 1, "ackmode": "reject_requeue_true", "encoding": "auto"})
    else:
        s, j = api.request("DELETE", "/api/queues/%%2F/%s/contents" % _q(q))
    exp = gate and vhost_gate and (not exists or m.may(u, "read", q))
    return "HTTP %s %r" % (kind, q), exp, Doors.http_verdict(s, j)


def case_handle(d, u, rnd):
    m = d.model
    api = d.http(u)
    access = rnd.choice(["receive", "peek", "send"])
    q = spelling(rnd, QUEUES)
    if access == "send":
        q = q.split(";")[0]  # a subqueue is no send target
    canon = canonical(q, QUEUES, True)
    s, j = api.post("/api/msmq/handles", {"format_name": _fmt_local(q), "access": access})
    if s == 201:
        api.request("DELETE", "/api/msmq/handles/" + j["handle"])
    need = "write" if access == "send" else "read"
    exp = m.mgmt(u) and (canon is None or (m.entry(u) and m.may(u, need, canon)))
    return "handle %s on %r" % (access, q), exp, Doors.http_verdict(s, j)


def case_props(d, u, rnd):
    """Properties of a queue (R_QMMgmtGetInfo, and MC-MQAC management objects bound here or
    to another node's queue) follow the listing rule: a permission entry on the queue's
    vhost, administrators every vhost."""
    m = d.model
    api = d.http(u)
    q = spelling(rnd, QUEUES).split(";")[0]
    kind = rnd.choice(["getinfo", "object", "remote-object"])
    if kind == "getinfo":
        obj = urllib.parse.quote("QUEUE=" + _fmt_local(q), safe="")
        s, j = api.get("/api/msmq/info?object=%s&props=MESSAGE_COUNT" % obj)
        canon = canonical(q, QUEUES, False)
        exp = m.mgmt(u) and (canon is None or m.entry(u) or m.admin(u))
        return "MSMQ GetInfo of %r" % q, exp, Doors.http_verdict(s, j)
    s, o = api.post("/api/msmq/management")
    if s != 201:
        return "management object (create)", m.mgmt(u), Doors.http_verdict(s, o)
    body = {"pathname": ".\\private$\\" + q}
    if kind == "remote-object":
        body["machine"] = "%s:%d" % (d.b.addr, d.b.port)
    s, j = api.post("/api/msmq/management/%s/init" % o["id"], body)
    canon = canonical(q, QUEUES, False)
    exp = canon is None or m.entry(u) or m.admin(u)
    out = Doors.http_verdict(s, j)
    if s == 200:
        s, j = api.get("/api/msmq/management/%s/message-count" % o["id"])
        out = Doors.http_verdict(s, j)
    api.request("DELETE", "/api/msmq/management/" + o["id"])
    return "%s on %r" % (kind, q), exp, out


def case_proxy(d, u, rnd, admin):
    """Open a proxy to the other node's queue, change the user's permissions, purge."""
    m = d.model
    api = d.http(u)
    q = spelling(rnd, QUEUES)
    canon = canonical(q, QUEUES, False)
    s, j = api.post("/api/msmq/handles", {"format_name": d.b.fmt(q), "access": "receive"})
    exp = m.mgmt(u) and (canon is None or (m.entry(u) and m.may(u, "read", canon)))
    out = [("proxy open %r" % q, exp, Doors.http_verdict(s, j))]
    if s == 201:
        before = m.users[u]["perm"]
        after = draw_perm(rnd) if rnd.random() < 0.7 else before
        set_perm(admin, u, after)
        m.users[u]["perm"] = after
        s2, p = api.post("/api/msmq/handles/%s/purge" % j["handle"])
        exp2 = m.entry(u) and m.may(u, "read", canon)
        out.append(("proxy purge %r (opened as %r, permissions now %r)" % (q, before, after),
                    exp2, Doors.http_verdict(s2, p)))
        api.request("DELETE", "/api/msmq/handles/" + j["handle"])
    return out


def link_session(d, u, node_hex):
    """A link session to the node under test as u claiming node_hex: (raw, None) once open,
    or (None, "refused-login" | "refused-vhost" | "other:...")."""
    r = d.a.broker.raw(handshake=False)
    r.send(PROTOCOL_HEADER)
    r.expect("connection.start")
    props = {"product": "fuzz", "sluice_link": {"version": 1, "node_id": node_hex,
                                                "node_name": "sluice@fz"}}
    r.send_method(0, "connection.start-ok", client_properties=props, mechanism="PLAIN",
                  response=b"\x00" + u.encode() + b"\x00pw", locale="en_US")
    m = r.read_method(10.0)
    if m.name == "connection.close":
        r.close()
        return None, "refused-login" if m.reply_code == 403 else "other:%s" % m
    r.send_method(0, "connection.tune-ok", channel_max=m.channel_max, frame_max=m.frame_max,
                  heartbeat=0)
    r.send_method(0, "connection.open", virtual_host="/")
    m = r.read_method(10.0)
    if m.name != "connection.open-ok":
        r.close()
        ok = m.name == "connection.close" and m.reply_code in (403, 530)
        return None, "refused-vhost" if ok else "other:%s" % m
    return r, None


def case_link(d, u, rnd):
    """A node-to-node link (README "Link users"): a session claiming a node id, then one batch
    (a fresh sequence) to a queue name as a sender would spell it. The receiver resolves the
    name as a format name does (exact, else differing in case; no missing subqueue), then
    checks write on the resolved queue; a delivered message is in that queue exactly once."""
    m = d.model
    bound = m.users[u]["link_node"]
    # mostly the node a link user is bound to (to reach the per-queue check), else any
    node = bound if bound and rnd.random() < 0.7 else rnd.choice(LINK_NODES)
    q = spelling(rnd, QUEUES)
    canon = canonical(q, QUEUES, False)
    if not m.link_login(u, node):
        exp = "refused-login"
    elif not m.entry(u):
        exp = "refused-vhost"
    elif canon is None:
        exp = "not-found"
    elif not m.may(u, "write", canon):
        exp = "refused"
    else:
        exp = "ok"
    what = "link as node %s..: batch to %r" % (node[:4], q)
    r, got = link_session(d, u, node)
    if r is None:
        return what, exp, got
    d.seq += 1
    token = b"link-%d-%d" % (SEED, d.seq)
    try:
        r.rpc(1, "channel.open")
        r.rpc(1, "tx.select")
        r.publish(1, "", q, token)
        r.publish(1, "sluice.eod", "batch", eod_control(node, "sluice@fz", d.seq, 0, [1]))
        r.send_method(1, "tx.commit")
        reply = r.read_method(10.0)
    finally:
        r.close()
    if reply.name == "tx.commit-ok":
        # the message is in the resolved queue, once (nothing else moves these tokens)
        if d.guest is None or not d.guest.connected:
            d.guest = d.a.amqp()
        ch = d.guest.channel()
        found = 0
        for _ in range(10000):
            msg = ch.basic_get(canon or q, no_ack=True)
            if msg is None:
                break
            found += msg.body == token
        ch.close()
        return what, exp, "ok" if found == 1 else "delivered %d times" % found
    if reply.name == "channel.close" and reply.reply_code in (403, 404):
        return what, exp, "refused" if reply.reply_code == 403 else "not-found"
    return what, exp, "other:%s" % (reply,)


def test_every_door_agrees_with_the_reference_model(nodes):
    print("permission fuzz seed %d (SLUICE_PERM_SEED=%d to replay)" % (SEED, SEED))
    rnd = random.Random(SEED)
    a = nodes.start("a")
    b = nodes.start("b")
    admin = Http(a.broker.host, a.broker.mgmt_port, "guest", "guest")
    for node in (a, b):
        ch = node.amqp().channel()
        for q in QUEUES:
            ch.queue_declare(q, durable=True, auto_delete=False)
    ch = a.amqp().channel()
    ch.exchange_declare("ex.a", "direct", durable=True, auto_delete=False)
    ch.exchange_declare("Ex.B", "fanout", durable=True, auto_delete=False)
    model = Model()
    users = ["fz%02d" % i for i in range(USERS)]
    for u in users:
        tags = rnd.choice(TAGS)
        s, j = admin.put("/api/users/" + u, {"password": "pw", "tags": tags})
        assert s in (201, 204), (s, j)
        perm = draw_perm(rnd)
        set_perm(admin, u, perm)
        model.users[u] = {"tags": tags, "perm": perm, "link_node": None}
    doors = Doors(a, b, model, rnd)
    mismatches, n, counts = [], 0, {}
    t0 = time.monotonic()
    while n < CASES and time.monotonic() - t0 < BUDGET_S:
        u = rnd.choice(users)
        door = rnd.choices(["amqp", "http", "handle", "proxy", "props", "link"],
                           [4, 3, 2, 1, 1, 2])[0]
        if door == "amqp":
            results = [case_amqp(doors, u, rnd)]
        elif door == "http":
            results = [case_http(doors, u, rnd)]
        elif door == "handle":
            results = [case_handle(doors, u, rnd)]
        elif door == "props":
            results = [case_props(doors, u, rnd)]
        elif door == "link":
            results = [case_link(doors, u, rnd)]
        else:
            results = case_proxy(doors, u, rnd, admin)
        for what, exp, got in results:
            n += 1
            counts[door] = counts.get(door, 0) + 1
            if door == "link":  # how the link cases ended, to see every branch is reached
                counts["link:" + got] = counts.get("link:" + got, 0) + 1
            want = exp if isinstance(exp, str) else "ok" if exp else "refused"
            if got != want:
                mismatches.append("%s by %s (tags %r, permissions %r): model %s, broker %s" % (
                    what, u, model.users[u]["tags"], model.users[u]["perm"], want, got))
        if rnd.random() < 0.02:  # now and then, a user's permissions change under it
            v = rnd.choice(users)
            model.users[v]["perm"] = draw_perm(rnd)
            set_perm(admin, v, model.users[v]["perm"])
    elapsed = time.monotonic() - t0
    print("permission fuzz: %d cases in %.1f s %s" % (n, elapsed, json.dumps(counts)))
    assert not mismatches, "seed %d (SLUICE_PERM_SEED=%d to replay), %d of %d cases:\n%s" % (
        SEED, SEED, len(mismatches), n, "\n".join(mismatches[:25]))
    # a busy machine may stop the run early; it still has to be a real run
    assert n >= min(CASES, 500), "only %d cases in %.0f s" % (n, elapsed)


if __name__ == "__main__":
    pytest.main([__file__, "-q", "-s"])
