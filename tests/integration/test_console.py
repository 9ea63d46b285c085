"""The web console (console/, src/mgmt/static.c, src/mgmt/session.c) in headless Chromium
(Debian's chromium + chromium-driver through python3-selenium) against the real sluiced:
every page loads with no error in the browser's console, every action button does its job
(checked through the API afterwards), tags decide what is shown and the API refuses anyway,
hostile names stay text, 10,000 queues page through. One browser serves the whole module;
each test has its own sluiced. Screenshots of the pages go to $BUILD/console-screenshots/.

Without a Chromium that starts, the browser tests are skipped with the reason; the HTTP tests
of the file serving and the session rules (no browser) run anyway."""

import os
import time
import urllib.parse
from pathlib import Path

import pytest

from helpers import IS_RABBITMQ, uname, wait_for
from test_mgmt import Api

pytestmark = pytest.mark.sluice_only("the web console is Sluice's own")

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / os.environ.get("BUILD", "build") / "console-screenshots"
XSS = "<img src=x onerror=window.__xss=1>"


def q(s):
    return urllib.parse.quote(s, safe="")


# ---------------------------------------------------------------------------
# HTTP without a browser
# ---------------------------------------------------------------------------
def http(broker, method, path, body=None, headers=None, user="guest", password="guest"):
    """(status, parsed body, headers) through test_mgmt's client; user None: no basic auth."""
    a = Api(broker, user=user, password=password)
    return a.request(method, path, body=body, headers=headers, auth=user is not None)


def login_cookie(broker, user="guest", password="guest"):
    st, body, r = http(broker, "POST", "/api/session", headers={"X-Sluice-Request": "1"},
                       user=user, password=password)
    assert st == 200, body
    sc = r["Set-Cookie"]
    return sc.split(";")[0], sc


def test_static_files_types_headers_and_no_traversal(broker):
    st, body, r = http(broker, "GET", "/", user=None)
    assert st == 200
    assert r.get("Content-Type") == "text/html; charset=utf-8"
    csp = r.get("Content-Security-Policy")
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert r.get("X-Content-Type-Options") == "nosniff"
    assert r.get("Cache-Control") == "no-cache"
    etag = r.get("ETag")
    assert '<script type="module" src="/js/app.js">' in body
    assert "<script>" not in body  # no inline script anywhere
    # revalidation answers 304 without a body
    st, body, r = http(broker, "GET", "/", headers={"If-None-Match": etag}, user=None)
    assert st == 304 and not body
    for path, ctype in [("/js/app.js", "text/javascript; charset=utf-8"),
                        ("/css/console.css", "text/css; charset=utf-8"),
                        ("/vendor/uplot/uPlot.esm.js", "text/javascript; charset=utf-8")]:
        st, _, r = http(broker, "GET", path, user=None)
        assert st == 200, path
        assert r.get("Content-Type") == ctype
    # nothing outside the built-in files is reachable, however spelled
    for path in ["/../../etc/passwd", "/js/../../etc/passwd", "/js/%2e%2e/%2e%2e/etc/passwd",
                 "/%2e%2e%2fetc%2fpasswd", "/js//app.js/..", "/index.html%00.js", "/js/",
                 "/etc/passwd"]:
        st, _, _ = http(broker, "GET", path, user=None)
        assert st in (400, 404), path
    # the API is unchanged beside it
    st, body, _ = http(broker, "GET", "/api/overview")
    assert st == 200 and body["node"]
    st, body, _ = http(broker, "GET", "/api/overview", user=None)
    assert st == 401
    st, _, _ = http(broker, "POST", "/index.html", user=None)
    assert st == 405


def test_nodes_memory_and_disk_fields(broker, broker_factory):
    """RabbitMQ's node fields for the Overview's two bars: disk_free is the disk alarm's own
    last look at free space (once a second), so it is there from the first tick."""
    def node(b):
        st, n, _ = http(b, "GET", "/api/nodes/" + q(http(b, "GET", "/api/overview")[1]["node"]))
        assert st == 200, n
        return n
    n = wait_for(lambda: (lambda x: x if x["disk_free"] > 0 else None)(node(broker)), timeout=10)
    for k in ("mem_used", "mem_limit", "disk_free", "disk_free_limit"):
        assert isinstance(n[k], int) and n[k] >= 0, (k, n)
    assert n["mem_limit"] > 0 and n["disk_free"] > n["disk_free_limit"] > 0, n
    assert n["mem_alarm"] is False and n["disk_free_alarm"] is False
    assert http(broker, "GET", "/api/nodes")[1][0]["disk_free"] > 0
    # a limit above any disk: the alarm is on and shown
    b = broker_factory(config={"disk_free_limit": "1000000000G"})
    n = wait_for(lambda: (lambda x: x if x["disk_free_alarm"] else None)(node(b)), timeout=10)
    assert n["disk_free_limit"] == 1000000000 << 30 and 0 < n["disk_free"] < n["disk_free_limit"]


def test_overview_message_stats_confirm_and_get(broker):
    """RabbitMQ's message_stats names; confirm and get move when a client does them."""
    from helpers import publish as amqp_publish
    def stats():
        return http(broker, "GET", "/api/overview")[1]["message_stats"]
    s0 = stats()
    for k in ("publish", "confirm", "deliver", "deliver_no_ack", "get", "get_no_ack",
              "deliver_get", "redeliver", "ack"):
        assert isinstance(s0[k], int), (k, s0)
    qn = uname("stats")
    c = broker.amqp()
    ch = c.channel()
    ch.queue_declare(qn, durable=True, auto_delete=False)
    for _ in range(3):
        amqp_publish(ch, "", qn, b"x", confirm=True)
    m = ch.basic_get(qn, no_ack=False)
    ch.basic_ack(m.delivery_tag)
    assert ch.basic_get(qn, no_ack=True) is not None
    ch.queue_declare(qn, passive=True)  # a round trip: the ack and the gets are done
    s1 = stats()
    assert s1["publish"] - s0["publish"] >= 3
    assert s1["confirm"] - s0["confirm"] >= 3
    assert s1["get"] - s0["get"] >= 1 and s1["get_no_ack"] - s0["get_no_ack"] >= 1
    assert s1["deliver_get"] - s0["deliver_get"] >= 2
    assert s1["deliver_get"] == (s1["deliver"] + s1["deliver_no_ack"] + s1["get"]
                                 + s1["get_no_ack"])


def test_session_idle_timeout_config(broker_factory):
    """mgmt_session_idle_timeout: a session unused that long is gone (401 by cookie)."""
    b = broker_factory(config={"mgmt_session_idle_timeout": "1"})
    cookie, _ = login_cookie(b)
    st, body, _ = http(b, "GET", "/api/session", user=None, headers={"Cookie": cookie})
    assert st == 200 and body.get("idle_timeout_s") in (None, 1), body
    st, body, _ = http(b, "GET", "/api/whoami", headers={"Cookie": cookie}, user=None)
    assert st == 200
    # no polling with the cookie: each use would keep the session alive. Expiry is by the
    # clock alone, so past 1 s unused it has ended however busy the machine is.
    time.sleep(1.5)
    st, _, _ = http(b, "GET", "/api/whoami", headers={"Cookie": cookie}, user=None)
    assert st == 401


def test_session_cookie_csrf_and_logout(broker, broker_factory):
    cookie, sc = login_cookie(broker)
    assert "HttpOnly" in sc and "SameSite=Strict" in sc and "Path=/" in sc
    st, body, _ = http(broker, "GET", "/api/whoami", headers={"Cookie": cookie}, user=None)
    assert st == 200 and body["name"] == "guest"
    qn = uname("sess")
    # a change made with the cookie alone (as another site's form would) is refused
    st, body, _ = http(broker, "PUT", "/api/queues/%2F/" + qn, body={},
                       headers={"Cookie": cookie}, user=None)
    assert st == 403 and "X-Sluice-Request" in body["reason"]
    st, body, _ = http(broker, "GET", "/api/queues/%2F/" + qn)
    assert st == 404
    st, _, _ = http(broker, "PUT", "/api/queues/%2F/" + qn, body={},
                    headers={"Cookie": cookie, "X-Sluice-Request": "1"}, user=None)
    assert st in (201, 204)
    # a login needs the header too (no login CSRF)
    st, _, _ = http(broker, "POST", "/api/session")
    assert st == 403
    # the console's 401 carries no WWW-Authenticate (no browser pop-up); basic clients' do
    st, _, r = http(broker, "GET", "/api/overview", headers={"X-Sluice-Request": "1"}, user=None)
    assert st == 401 and r.get("WWW-Authenticate") is None
    st, _, r = http(broker, "GET", "/api/overview", user=None)
    assert st == 401 and r.get("WWW-Authenticate")
    st, body, _ = http(broker, "GET", "/api/session", user=None)
    assert st == 200 and body == {"authenticated": False}
    # logout ends the session on the node, not only in the browser
    st, _, r = http(broker, "DELETE", "/api/session",
                    headers={"Cookie": cookie, "X-Sluice-Request": "1"}, user=None)
    assert st == 200 and "Max-Age=0" in r.get("Set-Cookie")
    st, _, _ = http(broker, "GET", "/api/whoami", headers={"Cookie": cookie}, user=None)
    assert st == 401
    # a new password ends the user's sessions; a tag taken away applies at once
    st, _, _ = http(broker, "PUT", "/api/users/sess-u",
                    body={"password": "p1", "tags": "management"})
    assert st in (201, 204)
    cookie, _ = login_cookie(broker, "sess-u", "p1")
    st, _, _ = http(broker, "GET", "/api/whoami", headers={"Cookie": cookie}, user=None)
    assert st == 200
    st, _, _ = http(broker, "PUT", "/api/users/sess-u", body={"password": "p1", "tags": ""})
    assert st in (201, 204)
    st, _, _ = http(broker, "GET", "/api/whoami", headers={"Cookie": cookie}, user=None)
    assert st in (401, 403)  # (RabbitMQ's PUT hashes the password again: a new salt)
    st, _, _ = http(broker, "PUT", "/api/users/sess-u", body={"password": "p2",
                                                              "tags": "management"})
    st, _, _ = http(broker, "GET", "/api/whoami", headers={"Cookie": cookie}, user=None)
    assert st == 401
    # a user without a management tag gets no session
    st, _, _ = http(broker, "PUT", "/api/users/notag", body={"password": "p", "tags": ""})
    st, _, _ = http(broker, "POST", "/api/session", headers={"X-Sluice-Request": "1"},
                    user="notag", password="p")
    assert st == 403
    # a forged or malformed cookie is no session
    for bad in ["sluice_session=" + "0" * 64, "sluice_session=../../x", "sluice_session="]:
        st, _, _ = http(broker, "GET", "/api/whoami", headers={"Cookie": bad}, user=None)
        assert st == 401


# ---------------------------------------------------------------------------
# The browser
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chrome():
    if IS_RABBITMQ:
        pytest.skip("the web console is Sluice's own")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        pytest.skip("python3-selenium is not installed (scripts/deps.sh test): %s" % e)
    binary = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser")
                   if os.path.exists(p)), None)
    driver_path = next((p for p in ("/usr/bin/chromedriver",
                                    "/usr/lib/chromium/chromedriver") if os.path.exists(p)),
                       None)
    if not binary or not driver_path:
        pytest.skip("Chromium cannot start: chromium or chromium-driver is not installed "
                    "(scripts/deps.sh test installs them)")
    o = Options()
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1000", "--disable-extensions", "--no-first-run",
              "--disable-background-networking", "--disable-sync"]:
        o.add_argument(a)
    o.binary_location = binary
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        d = webdriver.Chrome(service=Service(driver_path), options=o)
    except Exception as e:  # no display, no sandbox support, a broken install...
        pytest.skip("Chromium cannot start: %s" % str(e).splitlines()[0])
    d.set_page_load_timeout(20)
    d.set_script_timeout(120)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield d
    d.quit()


class Console:
    """The console in the module's browser, logged in to one broker."""

    def __init__(self, driver, broker):
        self.d = driver
        self.b = broker
        self.base = "http://%s:%d/" % (broker.host, broker.mgmt_port)

    def by(self, css):
        from selenium.webdriver.common.by import By
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def one(self, css, timeout=10):
        found = []
        wait_for(lambda: found.extend(self.by(css)) or found, timeout=timeout,
                 message="no element %s" % css)
        return found[0]

    def stable(self, read, what):
        """read() over elements the page may rebuild meanwhile (a refresh replaces tables):
        again until one read sees no replaced element."""
        from selenium.common.exceptions import StaleElementReferenceException
        out = []

        def attempt():
            try:
                out.append(read())
                return True
            except StaleElementReferenceException:
                return False
        wait_for(attempt, timeout=10, message="%s kept being replaced" % what)
        return out[-1]

    def text(self, css):
        """The text of the first element css names, read whole."""
        return self.stable(lambda: self.one(css).text, css)

    def texts(self, css):
        """The texts of every element css names, read in one pass."""
        return self.stable(lambda: [e.text for e in self.by(css)], css)

    def loaded(self):
        return int(self.d.execute_script("return Number(document.body.dataset.loaded || 0)"))

    def start(self, user="guest", password="guest", expect_app=True):
        self.d.delete_all_cookies()
        self.d.get(self.base)
        self.one("#login-user:not([hidden])")
        wait_for(lambda: self.d.find_element("id", "login").is_displayed(), timeout=10)
        self.d.get_log("browser")  # start clean
        self.one("#login-user").send_keys(user)
        self.one("#login-pass").send_keys(password)
        n = self.loaded()
        self.one("#login-submit").click()
        if expect_app:
            wait_for(lambda: self.loaded() > n, timeout=10, message="the first page did not load")
        return self

    def go(self, hash_path):
        n = self.loaded()
        self.d.execute_script("location.hash = arguments[0]", hash_path)
        wait_for(lambda: self.loaded() > n, timeout=15,
                 message="page %s did not load: %s" % (hash_path, self.banner()))

    def refreshed(self):
        """Wait for one more refresh of the page on screen (after an action)."""
        n = self.loaded()
        wait_for(lambda: self.loaded() > n, timeout=15, message="no refresh")

    def banner(self):
        return self.d.execute_script("return document.getElementById('banner').textContent")

    def wait_banner(self, pred, timeout=10):
        wait_for(lambda: pred(self.banner()), timeout=timeout,
                 message="banner never matched: %r" % self.banner())
        return self.banner()

    def errors(self, expected=()):
        """The browser console's errors, but for the refusals a test provoked on purpose
        (a URL part in expected: Chromium logs every 4xx reply)."""
        return [e for e in self.d.get_log("browser") if e["level"] == "SEVERE" and
                not (e["source"] == "network" and any(x in e["message"] for x in expected))]

    def shot(self, name):
        """The whole page (up to 3000 px high), then the window as it was."""
        h = self.d.execute_script("return document.documentElement.scrollHeight")
        self.d.set_window_size(1400, max(1000, min(int(h) + 20, 3000)))
        self.d.save_screenshot(str(SHOTS / ("%s.png" % name)))
        self.d.set_window_size(1400, 1000)

    def click(self, css):
        """Click, again if a refresh replaced the element in between (tables are rebuilt)."""
        from selenium.common.exceptions import StaleElementReferenceException

        def attempt():
            try:
                self.one(css).click()
                return True
            except StaleElementReferenceException:
                return False
        wait_for(attempt, timeout=10, message="cannot click %s" % css)

    def accept_confirm(self):
        wait_for(lambda: self._alert(), timeout=5, message="no confirm dialog")
        self.d.switch_to.alert.accept()

    def _alert(self):
        try:
            self.d.switch_to.alert
            return True
        except Exception:
            return False


def api_get(broker, path, user="guest", password="guest"):
    st, body, _ = http(broker, "GET", path, user=user, password=password)
    return st, body


def publish(broker, queue, body, n=1):
    for i in range(n):
        st, r, _ = http(broker, "POST", "/api/exchanges/%2F/amq.default/publish",
                        body={"routing_key": queue, "payload": "%s-%d" % (body, i),
                              "payload_encoding": "string", "properties": {}})
        assert st == 200 and r["routed"], r


def declare(broker, name, vhost="/"):
    st, body, _ = http(broker, "PUT", "/api/queues/%s/%s" % (q(vhost), q(name)),
                       body={"durable": True})
    assert st in (201, 204), body


PAGES = ["overview", "queues", "outgoing", "node", "exchanges", "connections", "transactions",
         "handles", "admin", "definitions"]


@pytest.mark.test_timeout(120)
def test_every_page_loads_without_errors(chrome, broker):
    qn = "orders"
    declare(broker, qn)
    publish(broker, qn, "hello", 3)
    c = broker.amqp()
    ch = c.channel()
    ch.basic_consume(qn, callback=lambda m: None, no_ack=False)
    con = Console(chrome, broker).start()
    for p in PAGES:
        con.go("#/" + p)
        con.shot(p)
    con.go("#/queues/%2F/" + qn)
    con.shot("queue")
    assert "orders" in con.one("#queue-title").text
    assert con.by("#msmq-props")
    assert con.by("#chart-queue-rates canvas") and con.by("#chart-queue-messages canvas")
    con.go("#/exchanges/%2F/amq.direct")
    con.shot("exchange")
    name = api_get(broker, "/api/connections")[1][0]["name"]
    con.go("#/connections/" + q(name))
    con.shot("connection")
    # the overview charts are uPlot's, fed by a few refreshes
    con.go("#/overview")
    chrome.execute_script("document.getElementById('refresh-every').value = '2';"
                          "document.getElementById('refresh-every').dispatchEvent("
                          "new Event('change'))")
    publish(broker, qn, "more", 5)
    con.refreshed()
    con.refreshed()
    assert len(con.by("#chart-rates canvas")) == 1 and len(con.by("#chart-queued canvas")) == 1
    legend = " ".join(e.text for e in con.by("#chart-rates .u-legend .u-label"))
    for series in ("publish", "confirm", "deliver", "ack", "redeliver", "get"):
        assert series in legend.split(), (series, legend)
    # memory and disk against their alarms, as bars
    assert con.by("#meter-memory") and con.by("#meter-disk")
    assert float(con.by("#meter-disk")[0].get_attribute("max")) > 1
    con.shot("overview")
    errs = con.errors()
    assert not errs, errs
    # a deep link opens its page straight away (a reload keeps the session)
    chrome.get(con.base + "#/queues/%2F/orders")
    wait_for(lambda: con.by("#queue-title") and "orders" in con.by("#queue-title")[0].text,
             timeout=10)
    # refresh is pausable: no refresh happens while paused
    con.click("#refresh-pause")
    assert con.one("#refresh-pause").text == "Resume refresh"
    n = con.loaded()
    time.sleep(2.5)  # longer than the 2 s period: a refresh would have come by now
    assert con.loaded() == n
    con.click("#refresh-pause")
    con.refreshed()
    # logout ends the session: the API no longer takes the cookie
    cookie = [x for x in chrome.get_cookies() if x["name"] == "sluice_session"]
    assert cookie and cookie[0]["httpOnly"] and cookie[0].get("sameSite") == "Strict"
    assert chrome.execute_script("return document.cookie") == ""  # HttpOnly: not for scripts
    con.click("#logout")
    con.one("#login-user")
    wait_for(lambda: con.d.find_element("id", "login").is_displayed(), timeout=5)
    st, _, _ = http(broker, "GET", "/api/whoami",
                    headers={"Cookie": "sluice_session=" + cookie[0]["value"]}, user=None)
    assert st == 401
    # no password was kept by the page
    assert chrome.execute_script(
        "return JSON.stringify(localStorage) + JSON.stringify(sessionStorage)") == "{}{}"


@pytest.mark.test_timeout(120)
def test_queue_buttons_do_their_jobs(chrome, broker):
    qn = uname("cq")
    declare(broker, qn)
    con = Console(chrome, broker).start()
    con.go("#/queues/%2F/" + q(qn))
    # Publish
    con.one("#publish-payload").send_keys("from the console")
    con.click("#btn-publish")
    con.wait_banner(lambda t: t == "Message published")
    wait_for(lambda: api_get(broker, "/api/queues/%2F/" + q(qn))[1]["messages"] == 1)
    publish(broker, qn, "more", 3)
    # Get messages, browsing: shown, nothing removed
    con.click("#btn-get")
    wait_for(lambda: con.by("#messages-count") and con.by("#messages-count")[0].text ==
             "4 message(s)", timeout=10)
    assert "from the console" in con.one("#messages-table").text
    assert api_get(broker, "/api/queues/%2F/" + q(qn))[1]["messages"] == 4
    # Get messages, taking: removed
    from selenium.webdriver.support.ui import Select
    Select(con.one("#get-mode")).select_by_value("ack_requeue_false")
    con.one("#get-count").clear()
    con.one("#get-count").send_keys("1")
    con.click("#btn-get")
    wait_for(lambda: api_get(broker, "/api/queues/%2F/" + q(qn))[1]["messages"] == 3)
    # Move one to a subqueue
    con.one("#move-dest").send_keys(qn + ";poison")
    con.click("#btn-move")
    con.wait_banner(lambda t: t.startswith("Moved 1 message(s)"))
    st, sub = api_get(broker, "/api/queues/%2F/" + q(qn + ";poison"))
    assert st == 200 and sub["messages"] == 1
    # Delete if-empty: refused, with the reason
    con.click("#delete-if-empty")
    con.click("#btn-delete")
    con.accept_confirm()
    text = con.wait_banner(lambda t: t.startswith("Delete:"))
    assert "not empty" in text.lower() or "in use" in text.lower(), text
    assert api_get(broker, "/api/queues/%2F/" + q(qn))[0] == 200
    # Purge: asks, then says how many
    con.click("#btn-purge")
    con.accept_confirm()
    con.wait_banner(lambda t: t.startswith("Purged 2 message(s)"))
    wait_for(lambda: api_get(broker, "/api/queues/%2F/" + q(qn))[1]["messages"] == 0)
    # Move inside a transaction: Locked until the commit on the Transactions page
    publish(broker, qn, "tx", 1)
    st, tx, _ = http(broker, "POST", "/api/transactions", body={})
    assert st == 201
    con.one("#move-tx").click()  # (the list of transactions is read again on focus)
    wait_for(lambda: len(Select(con.one("#move-tx")).options) > 1, timeout=5)
    Select(con.one("#move-tx")).select_by_value(str(tx["id"]))
    con.one("#move-dest").clear()
    con.one("#move-dest").send_keys(qn + ";later")
    con.click("#btn-move")
    con.wait_banner(lambda t: "in transaction %d" % tx["id"] in t)
    st, later = api_get(broker, "/api/queues/%2F/" + q(qn + ";later"))
    assert st == 404 or later["messages"] == 0  # Locked in the source until the commit
    con.go("#/transactions")
    con.shot("transactions")
    con.click("#transactions-table .btn-commit")
    con.wait_banner(lambda t: t.startswith("Transaction %d committed" % tx["id"]))
    wait_for(lambda: api_get(broker, "/api/queues/%2F/" + q(qn + ";later"))[1].get("messages")
             == 1)
    # Delete (unconditional)
    con.go("#/queues/%2F/" + q(qn))
    con.click("#btn-delete")
    con.accept_confirm()
    wait_for(lambda: api_get(broker, "/api/queues/%2F/" + q(qn))[0] == 404)
    wait_for(lambda: con.d.execute_script("return location.hash") == "#/queues", timeout=5)
    assert not con.errors(expected=["?if-empty=true"])


@pytest.mark.test_timeout(120)
def test_node_and_outgoing_buttons(chrome, broker):
    def connected():
        st, body = api_get(broker, "/api/msmq/info?object=MACHINE&props=CONNECTED")
        return body["values"]["PROPID_MGMT_MSMQ_CONNECTED"]

    con = Console(chrome, broker).start()
    con.go("#/node")
    con.click("#btn-disconnect")
    wait_for(lambda: connected() == "DISCONNECTED")
    con.click("#btn-connect")
    wait_for(lambda: connected() == "CONNECTED")
    con.click("#btn-tidy")
    wait_for(lambda: con.by("#tidy-summary"), timeout=15)
    assert con.one("#tidy-summary").text.startswith("Tidy freed")
    con.refreshed()
    con.shot("node")
    # an outgoing queue: a message for a node that is not there (port 9 on loopback)
    fmt = "DIRECT=TCP:127.0.0.1:9\\private$\\far"
    publish(broker, fmt, "away", 2)

    def state():
        rows = api_get(broker, "/api/msmq/outgoing")[1]
        return rows[0]["state"] if rows else None

    wait_for(lambda: state() is not None)
    con.go("#/outgoing")
    con.click("#outgoing-table .btn-pause")
    wait_for(lambda: state() == "ONHOLD")
    con.refreshed()
    con.shot("outgoing")
    wait_for(lambda: "ONHOLD" in con.one("#outgoing-table").text, timeout=10)
    con.click("#outgoing-table .btn-resume")
    wait_for(lambda: state() != "ONHOLD")
    con.click("#outgoing-table .btn-eod_resend")
    con.wait_banner(lambda t: t.startswith("EOD resend:"))
    assert not con.errors()


@pytest.mark.test_timeout(120)
def test_tags_decide_what_is_shown_and_the_api_refuses_anyway(chrome, broker):
    qn = uname("perm")
    declare(broker, qn)
    publish(broker, qn, "keep", 2)
    for user, tags in [("mon", "monitoring"), ("mgr", "management"), ("none", "")]:
        st, body, _ = http(broker, "PUT", "/api/users/" + user,
                           body={"password": "pw", "tags": tags})
        assert st in (201, 204), body
    # mgr may use / (read, write, configure); mon may look at / and nothing more
    http(broker, "PUT", "/api/permissions/%2F/mgr",
         body={"configure": ".*", "write": ".*", "read": ".*"})
    http(broker, "PUT", "/api/permissions/%2F/mon",
         body={"configure": "", "write": "", "read": ""})
    # a user without tags cannot log in
    con = Console(chrome, broker).start("none", "pw", expect_app=False)
    wait_for(lambda: con.one("#login-error").text.startswith("Not allowed"), timeout=10)
    assert not con.d.find_element("id", "top").is_displayed()
    # monitoring: sees the queue, no Purge, no admin pages
    con = Console(chrome, broker).start("mon", "pw")
    con.go("#/queues/%2F/" + q(qn))
    assert not con.by("#btn-purge") and not con.by("#btn-delete") and not con.by("#btn-move")
    assert not con.by("#nav-admin") and not con.by("#nav-definitions")
    con.shot("queue-monitoring")
    # ... and the API refuses the purge all the same, through the same session
    cookie = [x for x in chrome.get_cookies() if x["name"] == "sluice_session"][0]
    st, body, _ = http(broker, "DELETE", "/api/queues/%2F/" + q(qn) + "/contents",
                       headers={"Cookie": "sluice_session=" + cookie["value"],
                                "X-Sluice-Request": "1"}, user=None)
    assert st == 403, body
    assert api_get(broker, "/api/queues/%2F/" + q(qn))[1]["messages"] == 2
    # management: queue actions, no node actions, no admin pages; the API refuses those too
    con = Console(chrome, broker).start("mgr", "pw")
    con.go("#/queues/%2F/" + q(qn))
    assert con.by("#btn-purge")
    con.go("#/node")
    assert not con.by("#btn-tidy") and not con.by("#btn-disconnect")
    cookie = [x for x in chrome.get_cookies() if x["name"] == "sluice_session"][0]
    st, body, _ = http(broker, "POST", "/api/msmq/action",
                       body={"object": "MACHINE", "action": "DISCONNECT"},
                       headers={"Cookie": "sluice_session=" + cookie["value"],
                                "X-Sluice-Request": "1"}, user=None)
    assert st == 403, body
    con.d.execute_script("location.hash = '#/admin'")
    wait_for(lambda: "do not allow" in con.one("#main").text, timeout=5)


@pytest.mark.test_timeout(120)
def test_hostile_names_stay_text(chrome, broker):
    declare(broker, XSS)
    publish(broker, XSS, XSS, 1)
    st, _, _ = http(broker, "PUT", "/api/exchanges/%2F/" + q(XSS), body={"type": "direct"})
    assert st in (201, 204)
    con = Console(chrome, broker).start()
    con.go("#/queues")
    assert XSS in con.one("#queues-rows").text
    con.go("#/queues/%2F/" + q(XSS))
    con.click("#btn-get")
    wait_for(lambda: con.by("#messages-table"), timeout=10)
    assert XSS in con.one("#queue-title").text and XSS in con.one("#messages-table").text
    con.go("#/exchanges")
    con.go("#/exchanges/%2F/" + q(XSS))
    con.shot("xss-names")
    assert not con.by("main img")
    assert con.d.execute_script("return window.__xss === undefined")
    assert not con.errors()


@pytest.mark.test_timeout(300)
def test_ten_thousand_queues_page_through(chrome, broker):
    n = 10000
    defs = {"queues": [{"name": "bulk-%05d" % i, "vhost": "/", "durable": False,
                        "auto_delete": False, "arguments": {}} for i in range(n)]}
    st, body, _ = http(broker, "POST", "/api/definitions", body=defs)
    assert st in (200, 201, 204), body
    con = Console(chrome, broker).start()
    t0 = time.monotonic()
    con.go("#/queues")
    first_load = time.monotonic() - t0
    from selenium.webdriver.support.ui import Select
    Select(con.one("#queues-size")).select_by_value("500")
    total = api_get(broker, "/api/queues?page=1&page_size=1")[1]["total_count"]
    assert total >= n  # (and the system queues)
    pages = (total + 499) // 500
    wait_for(lambda: con.one("#queues-info").text == "of %d; %s shown of %s" % (
        pages, format(total, ","), format(total, ",")), timeout=15,
        message=con.one("#queues-info").text)
    # Next, page after page, inside the browser (one WebDriver call for the whole walk): each
    # page's names are read once it shows its number
    t0 = time.monotonic()
    seen = set(con.d.execute_async_script("""
        const [pages, done] = [arguments[0], arguments[arguments.length - 1]];
        const names = [];
        const read = () => document.querySelectorAll('#queues-rows td:nth-child(2)')
            .forEach((td) => names.push(td.textContent));
        let page = 1;
        read();
        const step = () => {
          if (page === pages) return done(names);
          document.getElementById('queues-next').click();
          const wait = () => {
            // the page number and its rows are set in the same turn of the page's loop
            if (document.getElementById('queues-page').value === String(page + 1)) {
              page++;
              read();
              step();
            } else {
              setTimeout(wait, 10);
            }
          };
          wait();
        };
        step();
    """, pages))
    page_through = time.monotonic() - t0
    seen = {x for x in seen if x.startswith("bulk-")}
    assert len(seen) == n
    # sorted by name descending, filtered by a regular expression
    assert con.one("#queues-page").get_attribute("value") == str(pages)
    con.one("#queues-filter").send_keys("^bulk-0999[0-9]$")
    con.click("#queues-regex")
    wait_for(lambda: "10 shown" in con.one("#queues-info").text, timeout=15)
    con.one("#queues th[data-key='name']").click()
    con.one("#queues th[data-key='name']").click()
    wait_for(lambda: con.one("#queues-rows").text.splitlines()[0].split()[1] == "bulk-09999",
             timeout=15)
    con.shot("queues-10k")
    assert not con.errors()
    print("10k queues: first page %.2f s, %d pages of 500 in %.2f s" % (first_load, pages,
                                                                       page_through))


@pytest.mark.test_timeout(120)
def test_exchange_admin_and_connection_buttons(chrome, broker):
    declare(broker, "bound-q")
    st, _, _ = http(broker, "PUT", "/api/exchanges/%2F/cx", body={"type": "direct"})
    assert st in (201, 204)
    con = Console(chrome, broker).start()
    # Bind, Publish, Delete on an exchange's page
    con.go("#/exchanges/%2F/cx")
    con.one("#bind-dest").send_keys("bound-q")
    con.one("#bind-key").send_keys("k1")
    con.click("#btn-bind")
    wait_for(lambda: any(b["routing_key"] == "k1" for b in
                         api_get(broker, "/api/exchanges/%2F/cx/bindings/source")[1]))
    con.one("#xpublish-key").send_keys("k1")
    con.one("#xpublish-payload").send_keys("via cx")
    con.click("#btn-xpublish")
    con.wait_banner(lambda t: t == "Message published")
    assert api_get(broker, "/api/queues/%2F/bound-q")[1]["messages"] == 1
    con.click("#btn-xdelete")
    con.accept_confirm()
    wait_for(lambda: api_get(broker, "/api/exchanges/%2F/cx")[0] == 404)
    # users, vhosts and permissions
    con.go("#/admin")
    con.one("#user-name").send_keys("made-here")
    con.one("#user-password").send_keys("pw")
    con.one("#user-tags").send_keys("management")
    con.click("#btn-put-user")
    wait_for(lambda: api_get(broker, "/api/users/made-here")[0] == 200)
    con.one("#vhost-name").send_keys("vh-made")
    con.click("#btn-put-vhost")
    wait_for(lambda: api_get(broker, "/api/vhosts/vh-made")[0] == 200)
    con.one("#perm-vhost").clear()
    con.one("#perm-vhost").send_keys("vh-made")
    con.one("#perm-user").send_keys("made-here")
    con.click("#btn-put-permission")
    wait_for(lambda: api_get(broker, "/api/permissions/vh-made/made-here")[0] == 200)
    con.refreshed()
    con.shot("admin")
    # an AMQP connection closed from its page, with the reason
    c = broker.amqp()
    c.channel()
    name = wait_for(lambda: api_get(broker, "/api/connections")[1])[0]["name"]
    con.go("#/connections/" + q(name))
    con.one("#close-reason").clear()
    con.one("#close-reason").send_keys("closed by the test")
    con.click("#btn-close-connection")
    wait_for(lambda: not api_get(broker, "/api/connections")[1])
    assert not con.errors()
