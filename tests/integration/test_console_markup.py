"""Markup in everything the console shows (issue 43, part 4): queue, vhost, user, exchange,
binding, consumer and connection names, and message bodies, headers and properties, holding
HTML that would run script if it were ever parsed. Every console page that shows them is
opened in headless Chromium; nothing may run (window.__xss stays undefined, no dialog), the
markup must be shown as text, and no element the console did not make may appear: an
element with an inline handler, an <img>, <svg>, <script> or <iframe> in the page, or a
Content-Security-Policy violation. The last checks matter because the console's CSP already
refuses inline script, so a page that parsed a name as HTML would run nothing and still be
wrong (js/dom.js: names go in as text only). One browser for the module (test_console's)."""

import re
import urllib.parse

import pytest

from helpers import uname, wait_for
from test_console import Console, chrome, http  # noqa: F401 (chrome: the module's browser)

pytestmark = pytest.mark.sluice_only("the web console is Sluice's own")

MARKUP = ["<img src=x onerror=window.__xss=1>",
          "</script><script>window.__xss=1</script>",
          "\"><svg onload=window.__xss=1>",
          "'><iframe srcdoc=\"<script>parent.__xss=1</script>\">"]


def q(s):
    return urllib.parse.quote(s, safe="")


def ok(st, body):
    assert st in (200, 201, 204), (st, body)


@pytest.fixture
def world(broker):
    """Every kind of name holding markup, a message full of it, and a connection, a channel, a
    consumer and a queue handle of a user whose name is markup."""
    tag = uname("m")[-6:]
    names = [m + tag for m in MARKUP]
    body = "\n".join(MARKUP)
    opened = []
    for i, n in enumerate(names):
        ok(*http(broker, "PUT", "/api/vhosts/" + q(n))[:2])
        ok(*http(broker, "PUT", "/api/users/" + q(n),
                 body={"password": "p", "tags": "management"})[:2])
        perms = {"configure": ".*", "write": ".*", "read": ".*"}
        for user in ("guest", n):
            ok(*http(broker, "PUT", "/api/permissions/%s/%s" % (q(n), q(user)), body=perms)[:2])
        for vh in ("/", n):
            ok(*http(broker, "PUT", "/api/queues/%s/%s" % (q(vh), q(n)),
                     body={"durable": True, "arguments": {n: n}})[:2])
            ok(*http(broker, "PUT", "/api/exchanges/%s/%s" % (q(vh), q(n)),
                     body={"type": "direct"})[:2])
            ok(*http(broker, "POST", "/api/bindings/%s/e/%s/q/%s" % (q(vh), q(n), q(n)),
                     body={"routing_key": n, "arguments": {}})[:2])
            for _ in range(2):  # in n, the consumer below holds one of them
                st, r, _ = http(broker, "POST", "/api/exchanges/%s/%s/publish" % (q(vh), q(n)),
                                body={"routing_key": n, "payload": body + n,
                                      "payload_encoding": "string",
                                      "properties": {"headers": {n: n}, "message_id": n,
                                                     "type": n, "content_type": n,
                                                     "correlation_id": n, "reply_to": n}})
                assert st == 200 and r["routed"], r
        # the user's own connection, channel and consumer in its vhost, named with markup
        c = broker.amqp(user=n, password="p", virtual_host=n,
                        client_properties={"connection_name": n, "product": n})
        opened.append(c)
        ch = c.channel()
        ch.basic_qos(0, 1, False)
        ch.basic_consume(n, consumer_tag=n, callback=lambda m: None)
        if i == 0:  # an MSMQ handle owned by a markup user
            st, r, _ = http(broker, "POST", "/api/msmq/handles",
                            body={"queue": n, "vhost": n, "access": "receive",
                                  "share": "deny_none"}, user=n, password="p")
            assert st == 201, r
    yield names
    for c in opened:
        try:
            c.close()
        except Exception:
            pass


SHOTS = []  # the pages looked at, in order (their screenshots are numbered)

CHECK = """
const on = [];
for (const e of document.querySelectorAll('*'))
  for (const a of e.attributes) if (/^on/i.test(a.name)) on.push(e.tagName + ' ' + a.name);
return {
  xss: typeof window.__xss,
  csp: window.__csp || [],
  on,
  foreign: document.querySelectorAll(
    'main img, main svg, main script, main iframe, main object, main embed').length,
  scripts: document.scripts.length,
  text: document.getElementById('main').innerText,
};
"""


def look(con, page, expect, shot=False):
    """The page on screen: nothing ran, nothing foreign, and each string of expect shown
    (and a screenshot of it with shot: they take time, so a few pages only)."""
    assert not con._alert(), "a dialog opened on %s" % page
    got = con.d.execute_script(CHECK)
    assert got["xss"] == "undefined", page
    assert not got["csp"], (page, got["csp"])
    assert not got["on"], (page, got["on"])
    assert got["foreign"] == 0, page
    assert got["scripts"] == 2, page  # marked and the app, nothing more
    for s in expect:
        assert s in got["text"], (page, s, got["text"][:2000])
    if shot:
        con.shot("markup-%02d-%s" % (len(SHOTS), re.sub(r"[^A-Za-z0-9]+", "_", page)[:24]))
        SHOTS.append(page)


@pytest.mark.test_timeout(180)
def test_markup_in_names_and_bodies_stays_text_on_every_page(chrome, broker, world):
    names = world
    con = Console(chrome, broker).start()
    con.d.execute_script("window.__csp = []; document.addEventListener("
                         "'securitypolicyviolation', (e) => window.__csp.push("
                         "e.violatedDirective + ' ' + e.blockedURI))")
    con.go("#/queues")
    look(con, "#/queues", names, shot=True)
    for vh, n in [("/", n) for n in names] + [(n, n) for n in names]:
        page = "#/queues/%s/%s" % (q(vh), q(n))
        con.go(page)
        con.one("#queue-title")
        con.click("#btn-get")
        wait_for(lambda: con.by("#messages-table") and
                 MARKUP[-1] + n in con.one("#messages-table").text, timeout=10,
                 message="no message shown on %s" % page)
        look(con, page, [n] + MARKUP, shot=vh == n)
    con.go("#/exchanges")
    look(con, "#/exchanges", names, shot=True)
    for vh, n in [("/", n) for n in names] + [(n, n) for n in names]:
        con.go("#/exchanges/%s/%s" % (q(vh), q(n)))
        look(con, "exchange %s %s" % (vh, n), [n])
    con.go("#/connections")
    wait_for(lambda: all(n in con.one("#main").text for n in names), timeout=10,
             message="the markup users' connections are not listed")
    look(con, "#/connections", names, shot=True)
    st, conns, _ = http(broker, "GET", "/api/connections")
    for c in conns:
        if c["user"] in names:
            con.go("#/connections/" + q(c["name"]))
            wait_for(lambda: c["user"] in con.one("#connection-summary").text, timeout=10)
            look(con, "connection of " + c["user"], [c["user"], c["vhost"]])
    con.go("#/admin")
    look(con, "#/admin", names, shot=True)
    con.go("#/handles")
    look(con, "#/handles", [names[0]], shot=True)
    for page in ("#/overview", "#/transactions", "#/outgoing", "#/node", "#/definitions",
                 "#/cluster"):
        con.go(page)
        look(con, page, [])
    # (a queue page of a vhost other than "/" asks /api/msmq/info for its FormatName, which
    # holds the vhost, together with ?vhost=: that was a 404 for every queue there)
    errs = con.errors()
    assert not errs, errs
    # the API's own answers are JSON that no browser renders as a page
    st, _, hd = http(broker, "GET", "/api/queues/%2F/" + q(names[0]))
    assert hd["Content-Type"] == "application/json" and hd["X-Content-Type-Options"] == "nosniff"
    st, body, hd = http(broker, "GET", "/api/queues/%2F/" + q(names[0] + "nosuch"))
    assert st == 404 and hd["Content-Type"] == "application/json"
    assert hd["X-Content-Type-Options"] == "nosniff"
    assert isinstance(body, dict) and body["error"]  # parsed as JSON: it is JSON
