"""Cross-site request forgery against the management API (issue 43, part 3).

An attacker's page on another origin makes a logged-in administrator's browser send requests
to the API: a top-level <form enctype="text/plain" method=POST> (a body that parses as JSON,
with no CORS preflight), and fetch() with credentials. The browser carries whatever it holds
for the API's origin: the console's session cookie, or Basic credentials it cached after the
user once opened an API URL. Nothing may change: the messages stay in the queue and no new
administrator appears (mgmt.c: the cross-origin check from Sec-Fetch-Site / Origin, and JSON
bodies only with Content-Type: application/json). The HTTP tests pin the rules themselves
(docs/http-api.md "Requests from browsers") and that API clients without a browser's headers
(rabbitmqadmin, sluicectl, curl) are unaffected.

Two attackers: one on another loopback address (127.0.0.2: cross-site, so SameSite=Strict
keeps the cookie away) and one on the node's own address at another port (same-site: the
cookie goes with its requests, and only the X-Sluice-Request guard and the origin check stand
in the way). One browser for the module (test_console's fixture)."""

import base64
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from helpers import uname, wait_for
from test_console import Console, chrome, http  # noqa: F401 (chrome: the module's browser)

pytestmark = pytest.mark.sluice_only("the origin and content-type rules are Sluice's own")

GET_BODY = {"count": 5, "ackmode": "reject_requeue_false", "encoding": "auto", "truncate": 50000}


class Attacker:
    """A web server for the attacker's pages (self.pages: path -> HTML) on host:free port."""

    def __init__(self, host):
        pages = self.pages = {}

        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                body = pages.get(self.path, "").encode()
                self.send_response(200 if self.path in pages else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.srv = ThreadingHTTPServer((host, 0), H)
        self.origin = "http://%s:%d" % (host, self.srv.server_address[1])
        self.t = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.t.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture(scope="module")
def attackers():
    a = [Attacker("127.0.0.2"), Attacker("127.0.0.1")]  # cross-site, same-site
    yield a
    for x in a:
        x.close()


def text_plain_form(action, body):
    """A page that POSTs body (a dict) to action as a top-level text/plain form: the browser
    sends NAME=VALUE, so NAME is the JSON up to an extra string member and VALUE closes it."""
    js = json.dumps(dict(body, pad="PAD"))
    before, after = js.split('"PAD"')
    name, value = before + '"', '"' + after
    # the name ends inside the string "pad": "..." whose rest is '=' + value
    assert (name + "=" + value).startswith("{")
    return ("<!doctype html><form id=f method=POST enctype=text/plain action='%s'>"
            "<input type=hidden name='%s' value='%s'></form>"
            "<script>document.getElementById('f').submit()</script>"
            % (action, name.replace("'", "&#39;"), value.replace("'", "&#39;")))


def fetch_page(action, body):
    """A page that sends body with fetch() and credentials, as every mode allows it: no-cors
    (text/plain, no preflight) and cors with the JSON type and the guard header (preflight).
    The title says when both have settled."""
    b = json.dumps(json.dumps(body))
    return ("<!doctype html><title>wait</title><script>"
            "const u=%s, b=%s;"
            "Promise.allSettled(["
            "fetch(u,{method:'POST',mode:'no-cors',credentials:'include',body:b}),"
            "fetch(u,{method:'POST',mode:'cors',credentials:'include',body:b,"
            "headers:{'Content-Type':'application/json','X-Sluice-Request':'1'}})"
            "]).then(()=>{document.title='done'});"
            "</script>" % (json.dumps(action), b))


def setup_victims(broker):
    qn = uname("orders")
    st, body, _ = http(broker, "PUT", "/api/queues/%2F/" + qn, body={"durable": True})
    assert st in (201, 204), body
    for i in range(5):
        st, r, _ = http(broker, "POST", "/api/exchanges/%2F/amq.default/publish",
                        body={"routing_key": qn, "payload": "order-%d" % i,
                              "payload_encoding": "string", "properties": {}})
        assert st == 200 and r["routed"], r
    return qn


def messages(broker, qn):
    st, body, _ = http(broker, "GET", "/api/queues/%2F/" + qn)
    assert st == 200, body
    return body["messages"]


def attack(con, attacker, broker, qn, evil):
    """Every attack from attacker's origin; returns what the browser was answered."""
    d = con.d
    base = "http://%s:%d" % (broker.host, broker.mgmt_port)
    get_url = base + "/api/queues/%2F/" + urllib.parse.quote(qn, safe="") + "/get"
    defs_url = base + "/api/definitions"
    defs = {"users": [{"name": evil, "password": "evil", "tags": "administrator"}],
            "permissions": [{"user": evil, "vhost": "/", "configure": ".*", "write": ".*",
                             "read": ".*"}]}
    seen = []
    for i, (url, body) in enumerate([(get_url, GET_BODY), (defs_url, defs)]):
        attacker.pages["/form%d" % i] = text_plain_form(url, body)
        d.get(attacker.origin + "/form%d" % i)
        # the form navigates the top-level window to the API's answer (but to a 204: a
        # browser stays where it was then, and only the node's state tells)
        wait_for(lambda: (d.current_url.startswith(base) and
                          d.execute_script("return document.readyState") == "complete") or
                 changed(broker, qn, evil), timeout=10, message="the form was not submitted")
        seen.append(d.find_element("tag name", "body").text)
        attacker.pages["/fetch%d" % i] = fetch_page(url, body)
        d.get(attacker.origin + "/fetch%d" % i)
        wait_for(lambda: d.title == "done", timeout=10, message="the fetches did not settle")
    return seen


def changed(broker, qn, evil):
    return messages(broker, qn) != 5 or http(broker, "GET", "/api/users/" + evil)[0] != 404


def assert_nothing_changed(broker, qn, evil):
    assert messages(broker, qn) == 5
    st, _, _ = http(broker, "GET", "/api/users/" + evil)
    assert st == 404, "another origin's page made an administrator"


def basic_login_in_browser(con, broker):
    """The browser caches Basic credentials as a user who once opened an API URL would."""
    d = con.d
    d.get("http://guest:guest@%s:%d/api/overview" % (broker.host, broker.mgmt_port))
    wait_for(lambda: "product_name" in d.find_element("tag name", "body").text, timeout=10,
             message="the browser did not log in with Basic auth")
    # and sends them again without being told (the URL has no credentials now)
    d.get("http://%s:%d/api/whoami" % (broker.host, broker.mgmt_port))
    wait_for(lambda: "guest" in d.find_element("tag name", "body").text, timeout=10,
             message="the browser did not keep the Basic credentials")


@pytest.mark.test_timeout(120)
def test_another_origin_cannot_act_with_the_console_session(chrome, broker, attackers):
    qn = setup_victims(broker)
    con = Console(chrome, broker).start()
    for n, a in enumerate(attackers):
        evil = "mallory-%d" % n
        seen = attack(con, a, broker, qn, evil)
        assert_nothing_changed(broker, qn, evil)
        assert all("cross-origin" in s for s in seen), seen
    # the console itself still works in the same browser
    con.d.get(con.base)
    con.go("#/queues")
    assert qn in con.one("#queues-rows").text


@pytest.mark.test_timeout(120)
def test_another_origin_cannot_act_with_cached_basic_credentials(chrome, broker, attackers):
    qn = setup_victims(broker)
    con = Console(chrome, broker)
    con.d.delete_all_cookies()
    basic_login_in_browser(con, broker)
    for n, a in enumerate(attackers):
        evil = "mallory-b%d" % n
        seen = attack(con, a, broker, qn, evil)
        assert_nothing_changed(broker, qn, evil)
        assert all("cross-origin" in s for s in seen), seen


# ---------------------------------------------------------------------------
# The rules over plain HTTP (no browser)
# ---------------------------------------------------------------------------
def raw(broker, method, path, data=None, headers=None, auth="guest:guest"):
    """(status, parsed body, headers); data as bytes, headers exactly as given."""
    import http.client
    c = http.client.HTTPConnection(broker.host, broker.mgmt_port, timeout=10)
    h = dict(headers or {})
    if auth:
        h["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    text = r.read()
    c.close()
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = text
    return r.status, parsed, {k.lower(): v for k, v in r.getheaders()}


def test_json_bodies_need_the_json_content_type(broker):
    qn = uname("ctype")
    path = "/api/queues/%2F/" + qn
    body = json.dumps({"durable": False}).encode()
    for ctype in ["text/plain", "text/plain;charset=UTF-8",
                  "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                  "application/jsonx", "text/json"]:
        st, r, _ = raw(broker, "PUT", path, body, {"Content-Type": ctype})
        assert st == 415 and r["error"] == "unsupported_media_type", (ctype, st, r)
        assert "application/json" in r["reason"]
        assert raw(broker, "GET", path)[0] == 404, ctype
    # the JSON type, however spelled, with parameters
    for ctype in ["application/json", "Application/JSON", "application/json; charset=utf-8"]:
        st, r, _ = raw(broker, "PUT", path, body, {"Content-Type": ctype})
        assert st in (201, 204), (ctype, st, r)
    # a body without any type is a script's, not a form's: taken as JSON (RabbitMQ takes any
    # type; clients such as got with a string body send none) ...
    st, r, _ = raw(broker, "PUT", path, json.dumps({"durable": False, "auto_delete": False}).encode())
    assert st in (201, 204), (st, r)
    # ... and still not from another origin: a script's request there carries Origin
    for h in [{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}]:
        st, r, _ = raw(broker, "DELETE", path, None, h)
        assert st == 403, (h, st, r)
        st, r, _ = raw(broker, "PUT", "/api/queues/%2F/" + uname("ctype"), body, h)
        assert st == 403, (h, st, r)
    # no body needs no type (curl -X PUT, rabbitmqadmin's bodiless requests)
    st, r, _ = raw(broker, "PUT", "/api/vhosts/" + uname("vh"))
    assert st in (201, 204), r
    st, r, _ = raw(broker, "DELETE", path)
    assert st == 204, r
    # a form type with an empty body is still a form's request: refused
    st, r, _ = raw(broker, "POST", "/api/queues/%2F/nosuch/get", b"",
                   {"Content-Type": "text/plain"})
    assert st == 415, r


def test_cross_origin_requests_refused_however_authenticated(broker):
    qn = uname("origin")
    path = "/api/queues/%2F/" + qn
    body = json.dumps({"durable": False}).encode()
    js = {"Content-Type": "application/json"}
    host = "%s:%d" % (broker.host, broker.mgmt_port)
    refused = [{"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
               {"Origin": "http://127.0.0.2:%d" % broker.mgmt_port},
               {"Origin": "http://%s:1" % broker.host}, {"Origin": "null"},
               {"Origin": "http://evil.example"},
               # Sec-Fetch-Site decides when both are there
               {"Sec-Fetch-Site": "cross-site", "Origin": "http://" + host}]
    for extra in refused:
        for method in ("PUT", "DELETE", "POST"):
            st, r, _ = raw(broker, method, path, body if method == "PUT" else None,
                           dict(js, **extra))
            assert st == 403 and r["error"] == "forbidden", (method, extra, st, r)
            assert "cross-origin" in r["reason"], r
        # unauthenticated: the same refusal (no login prompt for another site's request)
        st, r, hd = raw(broker, "PUT", path, body, dict(js, **extra), auth=None)
        assert st == 403 and "www-authenticate" not in hd, (extra, st)
    assert raw(broker, "GET", path)[0] == 404
    # the console's cookie with the guard header is refused from another origin too
    st, r, hd = raw(broker, "POST", "/api/session", None, {"X-Sluice-Request": "1"})
    assert st == 200, r
    cookie = hd["set-cookie"].split(";")[0]
    st, r, _ = raw(broker, "PUT", path, body, dict(js, Cookie=cookie, **{
        "X-Sluice-Request": "1", "Sec-Fetch-Site": "cross-site"}), auth=None)
    assert st == 403 and "cross-origin" in r["reason"], (st, r)
    # reads are not refused: another origin cannot read the answer (no CORS headers)
    st, r, hd = raw(broker, "GET", "/api/overview", headers={"Sec-Fetch-Site": "cross-site",
                                                            "Origin": "http://evil.example"})
    assert st == 200 and "access-control-allow-origin" not in hd
    # the same origin, and requests with no browser headers at all, work
    for extra in [{}, {"Origin": "http://" + host}, {"Sec-Fetch-Site": "same-origin"},
                  {"Sec-Fetch-Site": "none"},
                  {"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host}]:
        st, r, _ = raw(broker, "PUT", path, body, dict(js, **extra))
        assert st in (201, 204), (extra, st, r)
        st, r, _ = raw(broker, "DELETE", path, None, extra)
        assert st == 204, (extra, st, r)


def test_basic_prompt_only_for_clients_that_are_not_a_page(broker):
    """WWW-Authenticate: Basic makes a browser prompt and then cache what was typed for every
    later request, another site's included. Sent to API clients (no browser headers) and to a
    URL the user opened (Sec-Fetch-Site: none), never to what a page asked for."""
    for extra in [{}, {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}]:
        st, _, hd = raw(broker, "GET", "/api/overview", headers=extra, auth=None)
        assert st == 401 and hd.get("www-authenticate") == 'Basic realm="Sluice Management"'
        st, _, hd = raw(broker, "GET", "/api/overview", headers=extra, auth="guest:wrong")
        assert st == 401 and hd.get("www-authenticate"), extra
    for extra in [{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"},
                  {"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "same-origin"},
                  {"Origin": "http://evil.example"}, {"X-Sluice-Request": "1"}]:
        st, _, hd = raw(broker, "GET", "/api/overview", headers=extra, auth=None)
        assert st == 401 and "www-authenticate" not in hd, extra
