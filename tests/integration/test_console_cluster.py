"""The console's cluster page (issue 32 on issue 31's cluster) and its Help links, in headless
Chromium against real sluiced nodes: a private etcd and three nodes on 127.0.0.2-4
(test_cluster_repl.py's harness), the browser on the leader's HTTP port.

- #/cluster shows the cluster's name, leader, epoch and the three members (one leader,
  followers in sync), as text, with no error in the browser's console; the overview has a
  cluster panel; a monitoring user sees neither Step down nor Remove (and the API refuses).
- Step down (asks first) moves the leadership (checked through /api/cluster on every node);
  the old leader re-executes itself, its sessions end, and the console shows the login form
  saying what happened; logging in again on the same port works (forwarded to the new leader).
- Remove of a follower killed with -9 (asks first) takes it out of /api/cluster and of the ISR
  in etcd before its own lease could have dropped its registration.
- Every page's Help link opens the docs/ page of its subject, built into the binary (200,
  text/plain, the same bytes as the file), in the console (#/docs/PAGE.md) rendered as HTML
  by marked; links between pages and to their headings work there; nothing else under /docs/.
- A single node: a cluster of one (no Remove, its Step down refused with the node's reason),
  a restart under the console (the login form says why), a node that stays away (the wait is
  bounded: 30 s), a hostile node name (text only).
Screenshots: build/console-screenshots/cluster.png, overview-cluster.png, cluster-monitoring.png,
cluster-after-step-down.png, login-after-step-down.png, login-after-restart.png."""

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cluster_client import etcd  # noqa: F401  (the fixture)
from helpers import IS_RABBITMQ, wait_for
from test_cluster_repl import Cluster
from test_console import Console, chrome, http  # noqa: F401  (chrome: the module's browser)

# The test on a cluster (the cluster fixture: etcd) runs alone, after the parallel pass
# (conftest.py ALONE_FIXTURES); the single-node ones run in the parallel pass.
pytestmark = pytest.mark.skipif(IS_RABBITMQ, reason="Sluice's console and cluster")

REPO = Path(__file__).resolve().parents[2]
# Long enough that a follower killed with -9 stays registered (its etcd lease) well past the
# moment the test removes it: what makes it vanish must be the Remove, not the lease. The
# step-down is a hand-over and does not wait for any lease to run out.
TTL = 15
ADMIN = ("boss", "boss-pw")  # guest cannot log in through a follower (not loopback there)
MON = ("watcher", "watcher-pw")


@pytest.fixture
def cluster(tmp_path, etcd):
    cl = Cluster(tmp_path, etcd, **{"cluster.lease_ttl": str(TTL),
                                    "cluster.min_insync_replicas": "2"})
    yield cl
    errors = cl.stop_all()
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)


def status(b, user=ADMIN):
    """GET /api/cluster on node b, or None while it does not answer (restarting, no leader)."""
    st, body, _ = http(b, "GET", "/api/cluster", user=user[0], password=user[1])
    return body if st == 200 else None


def safe_status(b, user=ADMIN):
    try:
        return status(b, user)
    except OSError:
        return None


def settled(b, n):
    """b's /api/cluster when it shows n members: one leader, every follower in sync, lag 0."""
    c = safe_status(b)
    if not c or len(c["nodes"]) != n:
        return None
    roles = sorted(x["role"] for x in c["nodes"])
    if roles != ["follower"] * (n - 1) + ["leader"]:
        return None
    if not all(x["insync"] and x["lag_bytes"] == 0 for x in c["nodes"]):
        return None
    return c


def by_name(cl, name):
    return cl.nodes[name]


def add_user(b, user, tags):
    st, body, _ = http(b, "PUT", "/api/users/" + user[0],
                       body={"password": user[1], "tags": tags})
    assert st in (201, 204), body
    st, body, _ = http(b, "PUT", "/api/permissions/%2F/" + user[0],
                       body={"configure": ".*", "write": ".*", "read": ".*"})
    assert st in (201, 204), body


def table_rows(con, css):
    """The rows of a table as lists of cell texts."""
    return con.d.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.textContent))", css)


def wait_rows(con, css, pred, timeout=30, what="the table"):
    """Wait (the page refreshes itself every 2 s here) until pred(rows) holds."""
    return wait_for(lambda: (lambda r: r if pred(r) else None)(table_rows(con, css)),
                    timeout=timeout, message="%s never matched: %r" % (what, table_rows(con, css)))


def fast_refresh(con):
    con.d.execute_script("document.getElementById('refresh-every').value = '2';"
                         "document.getElementById('refresh-every').dispatchEvent("
                         "new Event('change'))")


def login_shown(con):
    try:
        return con.d.find_element("id", "login").is_displayed()
    except Exception:
        return False


@pytest.mark.test_timeout(420)
def test_cluster_page_step_down_and_remove(chrome, cluster):  # noqa: F811
    cl = cluster
    for i in range(3):
        cl.start(i)
    lead = cl.wait_leader(timeout=10 * TTL)
    # users made on the leader are replicated: every node's door forwards to it anyway
    add_user(lead, ADMIN, "administrator")
    add_user(lead, MON, "monitoring")
    c0 = wait_for(lambda: settled(lead, 3), timeout=15 * TTL,
                  message="three members, followers in sync, lag 0")
    epoch0 = c0["epoch"]

    # -- the page: three nodes, one leader, followers in sync, as text, no console error
    con = Console(chrome, lead).start(*ADMIN)
    fast_refresh(con)
    con.go("#/cluster")
    assert con.one("#cluster-title").text == "Cluster r"
    rows = wait_rows(con, "#cluster-nodes",
                     lambda r: len(r) == 3 and sorted(x[1] for x in r) ==
                     ["follower", "follower", "leader"] and all(x[2] == "yes" for x in r),
                     what="three nodes, one leader, all in sync")
    names = {x[0] for x in rows}
    assert names == set(cl.nodes), rows
    leader_row = [x for x in rows if x[1] == "leader"][0]
    assert leader_row[0] == lead.node_name
    # the addresses are the members' own (AMQP and HTTP columns)
    for x in rows:
        b = cl.nodes[x[0]]
        assert x[5] == "%s:%d" % (b.host, b.port), x
        assert x[6] == "%s:%d" % (b.host, b.mgmt_port), x
    summary = con.one("#cluster-summary").text
    assert lead.node_name in summary and str(epoch0) in summary, summary
    # administrators: Step down, and Remove on the followers only
    assert con.by("#btn-step-down")
    removable = {e.get_attribute("data-node") for e in con.by("button.btn-remove")}
    assert removable == names - {lead.node_name}, removable
    assert not con.errors(), con.errors()
    con.shot("cluster")
    # the overview's cluster panel
    con.go("#/overview")
    wait_rows(con, "#overview-cluster-nodes", lambda r: len(r) == 3, what="the overview's panel")
    assert "3 nodes, 3 in sync" in con.one("#overview-cluster-summary").text
    assert not con.errors(), con.errors()
    con.shot("overview-cluster")

    # -- a monitoring user sees the cluster and no action; the API refuses them anyway
    mon = Console(chrome, lead).start(*MON)
    mon.go("#/cluster")
    wait_rows(mon, "#cluster-nodes", lambda r: len(r) == 3, what="the monitoring view")
    assert not mon.by("#btn-step-down") and not mon.by("button.btn-remove")
    mon.shot("cluster-monitoring")
    cookie = [x for x in chrome.get_cookies() if x["name"] == "sluice_session"][0]
    st, body, _ = http(lead, "POST", "/api/cluster/step-down", body={},
                       headers={"Cookie": "sluice_session=" + cookie["value"],
                                "X-Sluice-Request": "1"}, user=None)
    assert st == 403, (st, body)
    assert not mon.errors(), mon.errors()

    # -- Step down (to a named heir), asked first; the leadership moves
    con = Console(chrome, lead).start(*ADMIN)
    fast_refresh(con)
    con.go("#/cluster")
    wait_rows(con, "#cluster-nodes", lambda r: len(r) == 3)
    heir = sorted(names - {lead.node_name})[0]
    wait_for(lambda: heir in [o.get_attribute("value") for o in con.by("#stepdown-target option")],
             timeout=15, message="the heir among the Step down choices")
    con.d.execute_script("document.getElementById('stepdown-target').value = arguments[0]", heir)
    # a refusal of the question does nothing
    con.click("#btn-step-down")
    wait_for(lambda: con._alert(), timeout=5, message="no confirm dialog")
    con.d.switch_to.alert.dismiss()
    assert safe_status(lead)["leader"] == lead.node_name
    t0 = time.monotonic()
    con.click("#btn-step-down")
    con.accept_confirm()
    # the result as the node gave it, then (the node restarting) the login form saying why
    wait_for(lambda: login_shown(con) or "moved from" in con.banner(), timeout=30,
             message="neither the step-down's result nor the login form: %r" % con.banner())
    wait_for(lambda: login_shown(con), timeout=60,
             message="the console did not ask to log in again: %r" % con.banner())
    msg = con.one("#login-error").text
    assert "log in again" in msg, msg
    assert "moved from %s to %s (%s led epoch %d)" % (lead.node_name, heir, lead.node_name,
                                                       epoch0) in msg, msg
    con.shot("login-after-step-down")
    # checked through the API: the heir leads in a later epoch, on every node's view
    new = by_name(cl, heir)
    c1 = wait_for(lambda: (lambda c: c if c and c["leader"] == heir else None)(safe_status(new)),
                  timeout=10 * TTL, message="the heir leads")
    assert c1["epoch"] > epoch0, c1
    print("step-down: click to the heir leading in %.2f s" % (time.monotonic() - t0))
    # the old leader is still the same process (re-executed), now a follower
    assert lead.proc.poll() is None
    wait_for(lambda: settled(new, 3), timeout=15 * TTL, message="three in sync after the hand-over")
    # no error in the browser's console but the requests the restart cut or refused
    errs = con.errors(expected=("/api/",))
    assert not errs, errs

    # -- logging in again on the same port (now a follower's door, forwarded to the heir)
    con.start(*ADMIN)
    fast_refresh(con)
    con.go("#/cluster")
    rows = wait_rows(con, "#cluster-nodes",
                     lambda r: len(r) == 3 and [x[0] for x in r if x[1] == "leader"] == [heir],
                     what="the heir as leader")
    con.shot("cluster-after-step-down")

    # -- Remove a follower killed with -9, asked first
    victim_name = sorted(names - {heir, lead.node_name})[0]
    victim = by_name(cl, victim_name)
    victim.kill9()
    t_kill = time.monotonic()
    css = 'button.btn-remove[data-node="%s"]' % victim_name
    con.click(css)
    con.accept_confirm()
    wait_for(lambda: "removed" in con.banner() or "Remove:" in con.banner(), timeout=30,
             message="no result of Remove: %r" % con.banner())
    assert "Remove: node %s removed." % victim_name == con.banner(), con.banner()
    # checked through the API: gone from /api/cluster and from the ISR in etcd
    c2 = wait_for(lambda: (lambda c: c if c and victim_name not in
                           [n["name"] for n in c["nodes"]] else None)(safe_status(new)),
                  timeout=TTL, message="the removed node still listed")
    took = time.monotonic() - t_kill
    print("remove: kill -9 to the node gone from /api/cluster in %.2f s" % took)
    # its lease was renewed at most TTL/4 before the kill: it could expire from 0.75 TTL on
    assert took < 0.7 * TTL, ("the node went only when its lease could have expired (%.1f s): "
                        "the Remove is not what removed it" % took)
    isr = json.loads(cl.etcd.get("/sluice/r/isr"))
    assert victim_name not in isr, isr
    assert sorted(n["name"] for n in c2["nodes"]) == sorted([heir, lead.node_name])
    wait_rows(con, "#cluster-nodes", lambda r: len(r) == 2, what="two nodes on the page")
    assert not con.by(css)
    errs = con.errors(expected=("/api/",))
    assert not errs, errs


# ---------------------------------------------------------------------------
# A single node: a cluster of one, the Help links and the docs built into the binary
# ---------------------------------------------------------------------------
def fetch(broker, path):
    url = "http://%s:%d%s" % (broker.host, broker.mgmt_port, path)
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_docs_are_served_from_the_binary(broker):
    docs = sorted((REPO / "docs").glob("*.md"))
    assert len(docs) >= 10
    for f in docs:
        st, hd, body = fetch(broker, "/docs/" + f.name)
        assert st == 200, f.name
        assert hd["Content-Type"] == "text/plain; charset=utf-8", (f.name, hd["Content-Type"])
        assert hd["X-Content-Type-Options"] == "nosniff"
        assert "default-src 'none'" in hd["Content-Security-Policy"]
        assert body == f.read_bytes(), f.name  # the file as built in
    # nothing else from the disk, however spelled (the node's cwd is the repository)
    for path in ["/docs/nothing.md", "/docs/../README.md", "/docs/%2e%2e/README.md",
                 "/README.md", "/docs/", "/docs", "/docs/console-overview.png",
                 "/docs/cluster.md/", "/docs/cluster.md%00"]:
        st, _, _ = fetch(broker, path)
        assert st in (400, 404), path


@pytest.mark.test_timeout(120)
def test_help_links_and_a_cluster_of_one(chrome, broker):  # noqa: F811
    con = Console(chrome, broker).start()
    menu = [a.get_attribute("id")[4:] for a in con.by("nav a")]
    assert "cluster" in menu, menu
    seen = {}
    for word in menu + ["queues/%2F/nothing-here"]:
        if word.startswith("queues/"):
            # a queue's page, even of a queue that is not there, has its Help link
            chrome.execute_script("location.hash = arguments[0]", "#/" + word)
            wait_for(lambda: con.one("#help-link").get_attribute("href").endswith(
                "/#/docs/msmq-management.md"), timeout=10, message="the queue page's Help link")
        else:
            con.go("#/" + word)
        href = con.one("#help-link").get_attribute("href")
        assert con.one("#help-link").get_attribute("target") == "_blank"
        assert "noopener" in con.one("#help-link").get_attribute("rel")
        # the console's own page of the reference (#/docs/PAGE.md), whose text is /docs/PAGE.md
        base, _, page = href.partition("/#/docs/")
        assert base == con.base.rstrip("/") and page.endswith(".md"), href
        path = "/docs/" + page
        st, hd, body = fetch(broker, path)
        assert st == 200 and hd["Content-Type"].startswith("text/plain"), (word, path, st)
        assert body == (REPO / path.lstrip("/")).read_bytes(), path
        seen[word] = path
    assert seen["cluster"] == "/docs/cluster.md"
    assert seen["admin"] == "/docs/security.md"
    assert seen["outgoing"] == "/docs/store-and-forward.md"
    # the cluster page of a single node: a cluster of one, itself the leader
    con.go("#/cluster")
    rows = wait_rows(con, "#cluster-nodes", lambda r: len(r) == 1, what="a cluster of one")
    assert rows[0][1] == "leader" and rows[0][2] == "yes", rows
    assert not con.by("button.btn-remove")  # the leader is never offered for removal
    # Step down on a single node: asked, then refused with the node's reason, nothing ends
    con.click("#btn-step-down")
    con.accept_confirm()
    text = con.wait_banner(lambda t: t.startswith("Step down: "), timeout=15)
    assert "not a cluster" in text, text
    con.refreshed()
    assert not login_shown(con)
    assert status(broker, ("guest", "guest"))["leader"] == rows[0][0]
    # the overview shows no cluster panel for a cluster of one
    con.go("#/overview")
    assert not con.one("#overview-cluster", timeout=5).is_displayed()
    # the missing queue's 404 and the refused step-down, asked on purpose
    errs = con.errors(expected=("nothing-here", "/api/cluster/step-down"))
    assert not errs, errs


@pytest.mark.test_timeout(180)
def test_a_node_restart_ends_the_session_and_the_console_says_so(chrome, broker_factory):  # noqa: F811
    """What a step-down does to the console, on a single node: the process goes (its
    requests fail), comes back on the same ports without the session (sessions live in the
    process). The console stops the page, says it waits, then shows the login form saying
    why, instead of a page of errors; logging in again works."""
    b = broker_factory()
    con = Console(chrome, b).start()
    fast_refresh(con)
    con.go("#/cluster")
    b.terminate()
    assert b.exit_code == 0
    text = con.wait_banner(lambda t: "does not answer" in t, timeout=30)
    assert "restarting" in text and not login_shown(con), text
    # the page is stopped meanwhile: no more refreshes while the node is away
    n = con.loaded()
    b2 = broker_factory(args=("--port", str(b.port), "--mgmt-port", str(b.mgmt_port)),
                        data_dir=b.data_dir)
    assert b2.mgmt_port == b.mgmt_port
    wait_for(lambda: login_shown(con), timeout=30,
             message="no login form after the restart: %r" % con.banner())
    msg = con.one("#login-error").text
    assert "session has ended" in msg and "log in again" in msg and "restarted" in msg, msg
    assert con.loaded() == n
    con.shot("login-after-restart")
    errs = con.errors(expected=("/api/",))  # the requests that found no node
    assert not errs, errs
    con.start()
    con.go("#/cluster")
    wait_rows(con, "#cluster-nodes", lambda r: len(r) == 1, what="the node again")


@pytest.mark.test_timeout(180)
def test_a_node_that_stays_away_brings_the_login_form_after_30s(chrome, broker_factory):  # noqa: F811
    """The console's wait for a node that does not answer is bounded (30 s): then the login
    form says so, rather than a page that waits forever."""
    b = broker_factory()
    con = Console(chrome, b).start()
    fast_refresh(con)
    con.go("#/overview")
    b.terminate()
    assert b.exit_code == 0
    con.wait_banner(lambda t: "does not answer" in t, timeout=30)
    t0 = time.monotonic()
    wait_for(lambda: login_shown(con), timeout=60,
             message="no login form for a node away: %r" % con.banner())
    waited = time.monotonic() - t0
    msg = con.one("#login-error").text
    assert "has not answered for 30 s" in msg and "log in again when it is back" in msg, msg
    assert 20 < waited < 45, waited  # the 30 s, from the banner's first look
    # logging in meanwhile says the node gives no answer (no page of errors)
    con.one("#login-user").clear()
    con.one("#login-user").send_keys("guest")
    con.one("#login-pass").send_keys("guest")
    con.one("#login-submit").click()
    wait_for(lambda: "Login failed" in con.one("#login-error").text, timeout=15,
             message="no failure said: %r" % con.one("#login-error").text)
    assert "no answer from the node" in con.one("#login-error").text


@pytest.mark.test_timeout(120)
def test_a_hostile_node_name_stays_text(chrome, broker_factory):  # noqa: F811
    """Names on the cluster page (and the Step down question) come from the node: text only."""
    from test_console import XSS
    name = XSS + "@h"
    b = broker_factory(args=("--node-name", name))
    con = Console(chrome, b).start()
    con.go("#/cluster")
    rows = wait_rows(con, "#cluster-nodes", lambda r: len(r) == 1, what="the node")
    assert rows[0][0] == name, rows
    assert name in con.one("#cluster-summary").text
    assert not con.by("#cluster-nodes img") and not con.by("#cluster-summary img")
    con.click("#btn-step-down")
    wait_for(lambda: con._alert(), timeout=5, message="no confirm dialog")
    assert name in con.d.switch_to.alert.text
    con.d.switch_to.alert.dismiss()
    assert chrome.execute_script("return window.__xss") is None
    assert not con.errors(), con.errors()


# who may see the nodes: the console follows GET /api/cluster and GET /api/nodes, user by user
SEES_NODES = {"administrator": True, "monitoring": True, "management": False,
              "policymaker": False}


@pytest.mark.test_timeout(180)
def test_who_sees_the_cluster_and_the_nodes_follows_the_api(chrome, broker):  # noqa: F811
    """RabbitMQ's rule: monitoring (and administrator) users see the nodes, management and
    policymaker users none. The console shows the Cluster entry and page, the overview's node
    figures and the Node page's node to exactly the users the API lets GET /api/cluster and
    /api/nodes, read-only unless administrator, and asks nothing of those APIs for the others
    (no refusal in the browser's console, no error on any page)."""
    for tag in SEES_NODES:
        user = ("u-" + tag, "pw-" + tag)
        add_user(broker, user, tag)
        st_c = http(broker, "GET", "/api/cluster", user=user[0], password=user[1])[0]
        st_n = http(broker, "GET", "/api/nodes", user=user[0], password=user[1])[0]
        may = st_c == 200
        assert (st_c, st_n) == ((200, 200) if SEES_NODES[tag] else (403, 403)), (tag, st_c, st_n)
        con = Console(chrome, broker).start(*user)
        assert not con.banner(), (tag, con.banner())  # the overview loaded without an error
        assert bool(con.by("#nav-cluster")) == may, tag
        assert con.one("#overview-node").text.strip(), tag
        assert bool(con.by("#meter-memory")) == may, tag
        if may:
            con.go("#/cluster")
            rows = wait_rows(con, "#cluster-nodes", lambda r: len(r) == 1, what="the node")
            assert rows[0][1] == "leader", rows
            admin = tag == "administrator"
            assert bool(con.by("#btn-step-down")) == admin, tag
        else:  # a page refused does not load (no refresh to wait for): its text says so
            con.d.execute_script("location.hash = '#/cluster'")
            wait_for(lambda: "do not allow" in con.one("#main").text, timeout=10,
                     message="the cluster page for %s: %r" % (tag, con.one("#main").text))
            assert not con.by("#cluster-nodes") and not con.by("#btn-step-down")
        con.go("#/node")
        assert not con.banner(), (tag, con.banner())
        assert con.one("#machine-props").text  # the MSMQ machine's properties: everyone's
        node = con.one("#node-info").text
        assert ("Memory used" in node) == may, (tag, node)
        con.shot("node-" + tag)
        assert not con.errors(), (tag, con.errors())


def doc_shown(con, page):
    """Wait until #/docs shows page rendered; its text."""
    wait_for(lambda: con.by('#doc[data-page="%s"]' % page), timeout=15,
             message="%s not rendered: %r" % (page, con.banner()))
    return con.one("#doc").text


@pytest.mark.test_timeout(120)
def test_help_shows_the_reference_rendered_and_its_links_work(chrome, broker):  # noqa: F811
    """The Help link opens #/docs/PAGE.md: the Markdown rendered as HTML (headings, tables,
    code), raw HTML in it shown as text, links to other pages and to their headings kept
    inside the console, links that the node does not serve left as text."""
    con = Console(chrome, broker).start()
    con.go("#/cluster")
    href = con.one("#help-link").get_attribute("href")
    assert href == con.base + "#/docs/cluster.md", href
    chrome.get(href)  # what the new tab loads (same session cookie)
    text = doc_shown(con, "cluster.md")
    md = (REPO / "docs" / "cluster.md").read_text()
    # rendered: the title is a heading, tables are tables, no Markdown syntax left as text
    assert con.one("#doc h1").text == md.splitlines()[0].lstrip("# ").strip()
    assert con.by("#doc h2#doc-roles-one-process-two-phases")
    assert con.by("#doc table") and con.by("#doc table th") and con.by("#doc code")
    assert "](" not in text and "\n## " not in text and "|---" not in text, text[:500]
    assert not [ln for ln in text.splitlines() if ln.startswith("#")]
    con.shot("docs-cluster")
    # a link to another page opens it here
    link = con.one('#doc a[href="#/docs/cluster-testing.md"]')
    n = con.loaded()
    link.click()
    wait_for(lambda: con.loaded() > n, timeout=15, message="the linked page did not load")
    doc_shown(con, "cluster-testing.md")
    assert con.one("#doc h1").text == \
        (REPO / "docs" / "cluster-testing.md").read_text().splitlines()[0].lstrip("# ").strip()
    assert chrome.execute_script("return location.hash") == "#/docs/cluster-testing.md"
    # a link to a heading of another page: that page, scrolled to the heading
    con.go("#/docs/configuration.md")
    doc_shown(con, "configuration.md")
    link = con.one('#doc a[href="#/docs/security.md/tls"]')
    n = con.loaded()
    link.click()
    wait_for(lambda: con.loaded() > n, timeout=15, message="the linked heading did not load")
    doc_shown(con, "security.md")
    top = chrome.execute_script(
        "return document.getElementById('doc-tls').getBoundingClientRect().top")
    assert abs(top) < 40, top  # scrolled to it (the page is far longer than the window)
    assert chrome.execute_script("return window.scrollY") > 500
    # raw HTML in the Markdown is text; a link the node does not serve stays text
    con.go("#/docs/store-and-forward.md")
    assert "addresses of '<host>' tried" in doc_shown(con, "store-and-forward.md")
    con.go("#/docs/README.md")
    doc_shown(con, "README.md")
    assert [e.text for e in con.by("#doc span.doc-offsite")] == ["project README"]
    assert not con.by('#doc a[href*="README"]')
    assert con.by('#doc a[href="#/docs/console.md"]')
    # the plain text is one click away, and a page that is not there says so
    assert con.one("#doc-raw").get_attribute("href") == con.base + "docs/README.md"
    con.go("#/docs/nothing.md")
    wait_for(lambda: "No such page" in con.one("#doc").text, timeout=10)
    con.go("#/docs/..%2FREADME.md")
    wait_for(lambda: "No such page" in con.one("#doc").text, timeout=10)
    assert not con.by("#doc img")
    errs = con.errors(expected=("/docs/nothing.md",))
    assert not errs, errs
