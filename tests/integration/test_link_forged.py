"""A link session is an identity, not a claim (issue 35, finding 1).

The attack as the issue found it: a management user with permissions on one queue of her own
(^mal$) reads EOD_SOURCE_INFO of another queue (the sender's node id, SeqID and last SeqNo),
opens an AMQP connection whose client-properties claim `sluice_link` with that node's id, and
commits into `mal` one batch whose EOD control names the real (sender, SeqID) with SeqNo
2^62.  Before the fix the receiver answered tx.commit-ok, and from then on acked every real
message of that sequence as a duplicate and dropped it.

Now: only the administrator tag or Sluice's `link` tag may open a link (and a link user only
for the node its login is bound to); EOD state is per (sender, SeqID, queue); a batch for a
sequence that feeds another queue, or whose numbers jump, is refused; each refusal writes an
audit line.  Uses the multi-node loopback harness (multinode.py)."""

import struct

import amqp
import pytest

from amqpraw import PROTOCOL_HEADER
from helpers import wait_for
from multinode import drain
from test_mgmt import Api

P = "PROPID_MGMT_QUEUE_"


def eod_control(node_hex, node_name, seq_id, first_prev, seq_nos):
    """The control message of a link batch (src/eod/eod.h): version 1, little-endian."""
    name = node_name.encode()
    return (struct.pack("<B16sQQI", 1, bytes.fromhex(node_hex), seq_id, first_prev,
                        len(seq_nos)) +
            b"".join(struct.pack("<Q", s) for s in seq_nos) + struct.pack("<H", len(name)) + name)


def link_hello(node, user, password, node_hex, node_name="sluice@forged"):
    """Log in to node as user claiming to be the link of node_hex. Returns (raw, None) once
    the connection is open, or (raw, connection.close) when the handshake was refused."""
    r = node.broker.raw(handshake=False)
    r.send(PROTOCOL_HEADER)
    r.expect("connection.start")
    props = {"product": "forger", "sluice_link": {"version": 1, "node_id": node_hex,
                                                  "node_name": node_name}}
    r.send_method(0, "connection.start-ok", client_properties=props, mechanism="PLAIN",
                  response=b"\x00" + user.encode() + b"\x00" + password.encode(),
                  locale="en_US")
    m = r.read_method(5.0)
    if m.name == "connection.close":
        r.send_method(0, "connection.close-ok")
        return r, m
    assert m.name == "connection.tune", m
    r.send_method(0, "connection.tune-ok", channel_max=m.channel_max, frame_max=m.frame_max,
                  heartbeat=0)
    r.send_method(0, "connection.open", virtual_host="/")
    r.expect("connection.open-ok")
    return r, None


def link_batch(r, queue, control, n=1, channel=1):
    """One link transaction: n data messages to queue, the control, tx.commit. Returns
    "commit-ok", or the close (channel.close / connection.close method)."""
    r.rpc(channel, "channel.open")
    r.rpc(channel, "tx.select")
    for i in range(n):
        r.publish(channel, "", queue, b"forged-%d" % i)
    r.publish(channel, "sluice.eod", "batch", control)
    r.send_method(channel, "tx.commit")
    m = r.read_method(5.0)
    if m.name == "tx.commit-ok":
        return "commit-ok"
    assert m.name in ("channel.close", "connection.close"), m
    return m


def source_info(api, queue):
    s, j, _ = api.info("QUEUE=DIRECT=OS:.\\private$\\" + queue, "EOD_SOURCE_INFO")
    if s != 200:
        return None
    return j["values"][P + "EOD_SOURCE_INFO"]


def put_user(node, name, password, tags, perms=None):
    s, j, _ = node.api.put("/api/users/" + name, {"password": password, "tags": tags})
    assert s in (201, 204), (s, j)
    if perms is not None:
        s, j, _ = node.api.put("/api/permissions/%2F/" + name, dict(
            zip(("configure", "write", "read"), perms)))
        assert s in (201, 204), (s, j)


def publish(node, fmt, bodies):
    ch = node.amqp().channel()
    ch.tx_select()
    for b in bodies:
        ch.basic_publish(amqp.Message(b, delivery_mode=2), exchange="", routing_key=fmt)
    ch.tx_commit()


def audit_lines(node, word):
    return [ln for ln in node.log().splitlines() if "audit: link" in ln and word in ln]


def test_forged_link_cannot_make_a_node_drop_confirmed_messages(nodes):
    """The issue's attack, step by step: before the fix B answered tx.commit-ok to the forged
    batch and then dropped the 20 real messages A sent after it (acked as duplicates)."""
    a = nodes.start("a")
    b = nodes.start("b")
    put_user(b, "mallory", "pw-m", "management", ("^mal$", "^mal$", "^mal$"))
    bch = b.amqp().channel()
    bch.queue_declare("orders", durable=True, auto_delete=False)
    fmt = b.fmt("orders")
    publish(a, fmt, [b"o%d" % i for i in range(20)])
    a.wait_drained(fmt)
    # what she reads (as herself where the API lets her, else the numbers are no secret)
    info = source_info(Api(b.broker, "mallory", "pw-m"), "orders") or source_info(b.api,
                                                                                  "orders")
    node_hex = info[1][0]["guid"].replace("-", "")
    seq_id, last = info[2][0], info[3][0]
    assert info[1][0]["node"] == "sluice@a" and last > 0
    r, refused = link_hello(b, "mallory", "pw-m", node_hex, "sluice@a")
    if refused is None:
        r.rpc(1, "channel.open")
        r.rpc(1, "queue.declare", queue="mal", durable=True)
        r.send_method(1, "channel.close", reply_code=200, reply_text="", class_id=0,
                      method_id=0)
        r.expect("channel.close-ok")
        outcome = link_batch(r, "mal", eod_control(node_hex, "sluice@a", seq_id, 0, [1 << 62]),
                             channel=2)
    # A goes on sending: every message arrives, none is acked as a duplicate and dropped
    publish(a, fmt, [b"o%d" % i for i in range(20, 40)])
    a.wait_drained(fmt)
    assert a.outgoing_queue(fmt)["messages"] == 0
    got = drain(bch, "orders")
    assert len(got) == 40, "B's orders holds %d of 40: A's messages were acked and dropped" % (
        len(got))
    assert got == [b"o%d" % i for i in range(40)]
    assert refused is not None, "B committed a forged link batch: %r" % (outcome,)
    assert refused.reply_code == 403, refused
    assert "administrator or link tag" in str(refused.reply_text), refused
    assert source_info(b.api, "orders")[3][0] > last
    wait_for(lambda: audit_lines(b, "mallory"), timeout=5,
             message="no audit line for the refused link")


def test_a_user_without_the_link_tag_cannot_open_a_link(nodes):
    b = nodes.start("b")
    # every permission, but neither the administrator nor the link tag
    put_user(b, "bob", "pw-b", "management", (".*", ".*", ".*"))
    r, refused = link_hello(b, "bob", "pw-b", "ab" * 16, "sluice@bob")
    assert refused is not None and refused.reply_code == 403, refused
    text = str(refused.reply_text)
    assert text.startswith("ACCESS_REFUSED") and "user 'bob' may not open a node-to-node link" \
        in text, text
    (line,) = audit_lines(b, "'bob'")
    assert "audit: link refused" in line and "ab" * 16 in line and "sluice@bob" in line, line
    # the same user may still work as an ordinary client
    ch = b.amqp(user="bob", password="pw-b").channel()
    ch.queue_declare("bobq", durable=True, auto_delete=False)
    b.broker.assert_alive()


def test_a_link_user_is_bound_to_its_first_node_across_restarts(nodes):
    b = nodes.start("b")
    put_user(b, "linker", "pw-l", "link", ("", "^lq$", ""))
    assert "link_node" not in b.api.get("/api/users/linker")[1]
    r, refused = link_hello(b, "linker", "pw-l", "11" * 16, "sluice@x")
    assert refused is None
    r.close()
    assert b.api.get("/api/users/linker")[1]["link_node"] == "11" * 16
    r, refused = link_hello(b, "linker", "pw-l", "22" * 16, "sluice@y")
    assert refused is not None and refused.reply_code == 403, refused
    assert "speaks for node " + "11" * 16 in str(refused.reply_text), refused
    assert audit_lines(b, "22" * 16)
    b.kill9()
    b.restart()
    r, refused = link_hello(b, "linker", "pw-l", "22" * 16, "sluice@y")
    assert refused is not None and refused.reply_code == 403, refused
    r, refused = link_hello(b, "linker", "pw-l", "11" * 16, "sluice@x")
    assert refused is None
    r.close()
    # deleting the user frees the binding: a new user of that name binds anew
    s, _, _ = b.api.delete("/api/users/linker")
    assert s == 204
    put_user(b, "linker", "pw-l", "link", ("", "^lq$", ""))
    r, refused = link_hello(b, "linker", "pw-l", "22" * 16, "sluice@y")
    assert refused is None


def test_a_link_user_can_be_pinned_to_a_node_in_the_config(nodes):
    b = nodes.start("b", config={"user.pinned": "pw-p", "user.pinned.tags": "link",
                                 "user.pinned.link_node": "33" * 16})
    r, refused = link_hello(b, "pinned", "pw-p", "44" * 16)
    assert refused is not None and refused.reply_code == 403, refused
    r, refused = link_hello(b, "pinned", "pw-p", "33" * 16)
    assert refused is None


def test_a_batch_for_a_sequence_of_another_queue_is_refused_and_audited(nodes):
    b = nodes.start("b")
    ch = b.amqp().channel()
    for q in ("q1", "q2"):
        ch.queue_declare(q, durable=True, auto_delete=False)
    put_user(b, "linker", "pw-l", "link", ("", "^q[12]$", ""))
    node = "55" * 16
    r, refused = link_hello(b, "linker", "pw-l", node, "sluice@five")
    assert refused is None
    assert link_batch(r, "q1", eod_control(node, "sluice@five", 7, 0, [5])) == "commit-ok"
    m = link_batch(r, "q2", eod_control(node, "sluice@five", 7, 5, [6]), channel=2)
    assert m != "commit-ok" and m.name == "channel.close" and m.reply_code == 406, m
    assert "sequence 7 feeds queue 'q1', not 'q2'" in str(m.reply_text), m
    (line,) = audit_lines(b, "sequence 7,")
    assert ("user 'linker'" in line and "claimed sender " + node in line and
            "queue 'q2'" in line), line
    # nothing was marked: q2 holds nothing and has no sequence; q1's number did not move
    assert drain(ch, "q2") == []
    assert source_info(b.api, "q2") == [[], [], [], [], [], []]
    assert source_info(b.api, "q1")[3] == [5]


def test_a_batch_whose_numbers_jump_is_refused_and_nothing_is_marked(nodes):
    b = nodes.start("b")
    ch = b.amqp().channel()
    ch.queue_declare("jq", durable=True, auto_delete=False)
    put_user(b, "linker", "pw-l", "link", ("", "^jq$", ""))
    node = "66" * 16
    r, refused = link_hello(b, "linker", "pw-l", node, "sluice@six")
    assert refused is None
    # a new sequence whose first number is 2^62, then a jump inside a batch
    for ch_no, nos in ((1, [1 << 62]), (2, [3, 3 + (1 << 49)])):
        m = link_batch(r, "jq", eod_control(node, "sluice@six", 9, 0, nos), n=len(nos),
                       channel=ch_no)
        assert m != "commit-ok" and m.reply_code == 406, m
        assert "jumps beyond the last accepted 0" in str(m.reply_text), m
    assert len(audit_lines(b, "jumps beyond")) == 2
    assert source_info(b.api, "jq") == [[], [], [], [], [], []]
    # the real numbers still apply
    assert link_batch(r, "jq", eod_control(node, "sluice@six", 9, 0, [3]), channel=3) == \
        "commit-ok"
    assert drain(ch, "jq") == [b"forged-0"]
    assert source_info(b.api, "jq")[3] == [3]


def test_a_write_only_link_user_delivers_exactly_once_across_a_receiver_restart(nodes):
    """The normal store and forward with a dedicated `link` user that may only write to the
    destination (no configure, no read), through a kill -9 of the receiver."""
    a = nodes.start("a", config={"link_user": "from-a", "link_password": "pw-a"})
    b = nodes.start("b", keep_port=True)
    put_user(b, "from-a", "pw-a", "link", ("", "^inbox$", ""))
    bch = b.amqp().channel()
    bch.queue_declare("inbox", durable=True, auto_delete=False)
    fmt = b.fmt("inbox")
    publish(a, fmt, [b"i%d" % i for i in range(30)])
    a.wait_drained(fmt)
    b.kill9()
    publish(a, fmt, [b"i%d" % i for i in range(30, 60)])
    b.restart()
    a.wait_drained(fmt, timeout=30)
    bch = b.amqp().channel()
    assert drain(bch, "inbox") == [b"i%d" % i for i in range(60)]
    assert not audit_lines(b, "from-a")
    s, j, _ = b.api.get("/api/users/from-a")
    assert s == 200 and j["tags"] in ("link", ["link"]), j
    # the login is bound to a's node id, the one a logs for its operator
    assert "links: node sluice@a speaks as node id %s (logging in as 'from-a')" % (
        j["link_node"]) in a.log()


def test_even_a_link_that_may_speak_for_the_node_cannot_move_another_queues_sequence(nodes):
    """Per (sender, sequence, queue): an administrator may speak for any node, yet a batch
    naming node a's sequence of `orders` into another queue is refused, within the window
    or beyond it, and a's messages still all arrive."""
    a = nodes.start("a")
    b = nodes.start("b")
    bch = b.amqp().channel()
    for q in ("orders", "mal"):
        bch.queue_declare(q, durable=True, auto_delete=False)
    fmt = b.fmt("orders")
    publish(a, fmt, [b"o%d" % i for i in range(5)])
    a.wait_drained(fmt)
    info = source_info(b.api, "orders")
    node_hex, seq_id, last = info[1][0]["guid"].replace("-", ""), info[2][0], info[3][0]
    r, refused = link_hello(b, "guest", "guest", node_hex, "sluice@a")
    assert refused is None
    for ch_no, no in ((1, last + 1), (2, 1 << 62)):
        m = link_batch(r, "mal", eod_control(node_hex, "sluice@a", seq_id, last, [no]),
                       channel=ch_no)
        assert m != "commit-ok" and m.reply_code == 406, m
        assert "feeds queue 'orders', not 'mal'" in str(m.reply_text), m
    assert len(audit_lines(b, "user 'guest'")) == 2
    publish(a, fmt, [b"o%d" % i for i in range(5, 10)])
    a.wait_drained(fmt)
    assert drain(bch, "orders") == [b"o%d" % i for i in range(10)]
    assert drain(bch, "mal") == []


def test_a_sender_whose_link_user_lacks_the_tag_says_why_and_keeps_its_messages(nodes):
    a = nodes.start("a", config={"link_user": "plain", "link_password": "pw-p"})
    b = nodes.start("b", config={"user.plain": "pw-p"})  # every permission, no tag
    b.amqp().channel().queue_declare("tagq", durable=True, auto_delete=False)
    fmt = b.fmt("tagq")
    publish(a, fmt, [b"t1"])
    wait_for(lambda: "administrator or link tag" in a.outgoing_queue(fmt)["last_error"],
             timeout=10, message="the sender never said why its link was refused")
    assert a.outgoing_queue(fmt)["messages"] == 1
    # the operator gives the user the tag: the link comes up and delivers
    s, j, _ = b.api.put("/api/users/plain", {"password": "pw-p", "tags": "link"})
    assert s in (201, 204), (s, j)
    a.wait_drained(fmt, timeout=30)
    assert drain(b.amqp().channel(), "tagq") == [b"t1"]
