"""MS-MQMR's qmmgmt over DCE/RPC (ncacn_ip_tcp, issue 34), driven by impacket's DCE/RPC stack
(its transport, bind and NDR engine) with the interface's structures written from the IDL
(msrpc_idl.py): bound through Sluice's endpoint mapper, every answer compared with the HTTP
API's for the same object, the seeds' rules (R_QMMgmtAction's actions, MGMT_SESSION refused,
nothing changed), and hostile PDUs (a fault or a clean close, the node unharmed)."""

import re
import socket
import struct
import time

import pytest
from impacket.dcerpc.v5 import rpcrt
from impacket.dcerpc.v5.rpcrt import DCERPCException

from helpers import uname, wait_for
from msrpc_idl import (MSRPC_UUID_QMMGMT, R_QMMgmtAction, R_QMMgmtGetInfo, VT_BLOB, VT_I4, VT_I8,
                       VT_LPWSTR, VT_NULL, VT_UI4, VT_VARIANT, VT_VECTOR, connect, epm_binding,
                       machine_object, null_propvariants, pv_value, queue_object,
                       session_object)
from test_mgmt import Api

MQ_OK = 0
MQ_ERROR_INVALID_PARAMETER = 0xC00E0006
MQ_ERROR_ILLEGAL_PROPID = 0xC00E0039
MQ_ERROR_QUEUE_NOT_FOUND = 0xC00E0003
MQ_ERROR_ACCESS_DENIED = 0xC00E0025

MACHINE_PROPS = {1: "ACTIVEQUEUES", 2: "PRIVATEQ", 3: "DSSERVER", 4: "CONNECTED", 5: "TYPE",
                 6: "BYTES_IN_ALL_QUEUES"}
QUEUE_PROPS = {1: "PATHNAME", 2: "FORMATNAME", 3: "TYPE", 4: "LOCATION", 5: "XACT",
               6: "FOREIGN", 7: "MESSAGE_COUNT", 8: "BYTES_IN_QUEUE", 9: "JOURNAL_MESSAGE_COUNT",
               10: "BYTES_IN_JOURNAL", 11: "STATE", 12: "NEXTHOPS", 13: "EOD_LAST_ACK",
               14: "EOD_LAST_ACK_TIME", 15: "EOD_LAST_ACK_COUNT", 16: "EOD_FIRST_NON_ACK",
               17: "EOD_LAST_NON_ACK", 18: "EOD_NEXT_SEQ", 19: "EOD_NO_READ_COUNT",
               20: "EOD_NO_ACK_COUNT", 21: "EOD_RESEND_TIME", 22: "EOD_RESEND_INTERVAL",
               23: "EOD_RESEND_COUNT", 24: "EOD_SOURCE_INFO", 25: "CONNECTION_HISTORY",
               26: "SUBQUEUE_COUNT", 27: "SUBQUEUE_NAMES"}
VT_NAMES = {"VT_NULL": VT_NULL, "VT_LPWSTR": VT_LPWSTR, "VT_UI4": VT_UI4, "VT_I4": VT_I4,
            "VT_I8": VT_I8, "VT_BLOB": VT_BLOB, "VT_LPWSTR|VT_VECTOR": VT_VECTOR | VT_LPWSTR,
            "VT_VARIANT|VT_VECTOR": VT_VECTOR | VT_VARIANT}

MSRPC_CONFIG = {"listeners.msrpc": "0", "listeners.msrpc_epmap": "0", "msrpc.auth": "none"}


def rpc_ports(log_path, timeout=5.0):
    def found():
        t = open(log_path, errors="replace").read()
        a = re.search(r"listening msrpc=([\d.]+):(\d+)", t)
        b = re.search(r"listening msrpc-epmap=([\d.]+):(\d+)", t)
        return (a and b) and (int(a.group(2)), int(b.group(2)))
    wait_for(found, timeout=timeout, message="no 'listening msrpc' lines")
    return found()


class Door:
    """A running sluiced with its DCE/RPC doors, bound to qmmgmt through the mapper."""

    def __init__(self, broker):
        self.broker = broker
        self.host = broker.host
        self.port, self.epmap_port = rpc_ports(broker.log_path)
        self.api = Api(broker)
        self.binding = epm_binding(self.host, self.epmap_port)
        self.dce = connect(self.binding)

    def get_info(self, obj, props):
        req = R_QMMgmtGetInfo()
        req["pObjectFormat"] = obj
        req["cp"] = len(props)
        req["aProp"] = list(props)
        req["apVar"] = null_propvariants(len(props))
        r = self.dce.request(req, checkError=False)
        return r["ErrorCode"], [pv_value(pv) for pv in r["apVar"]]

    def action(self, obj, act):
        req = R_QMMgmtAction()
        req["pObjectFormat"] = obj
        req["lpwszAction"] = act + "\x00"
        return self.dce.request(req, checkError=False)["ErrorCode"]

    def http_info(self, obj, ids, table, kind):
        s, j, _ = self.api.info(obj, *ids)
        assert s == 200, j
        out = []
        for i in ids:
            p = next(p for p in j["properties"]
                     if p["name"] == "PROPID_MGMT_%s_%s" % (kind, table[i]))
            out.append((p["vt"], p["value"]))
        return out


@pytest.fixture
def door(broker_factory):
    b = broker_factory(config=MSRPC_CONFIG)
    d = Door(b)
    yield d
    d.dce.disconnect()


def same(http, rpc):
    """An HTTP value (vt name, JSON) and an RPC one (VARTYPE, value) say the same."""
    vt, v = http
    rvt, rv = rpc
    assert VT_NAMES[vt] == rvt, (http, rpc)
    if vt == "VT_BLOB":
        import base64
        return base64.b64decode(v["blob"]) == rv
    if vt == "VT_VARIANT|VT_VECTOR" and v is not None:
        # parallel vectors: sender ids are their GUIDs, address lists their first address
        def norm(x):
            if isinstance(x, dict):
                return x["guid"]
            if isinstance(x, list):
                return x[0] if x else ""
            return x
        return [[norm(x) for x in col] for col in v] == [ev for _, ev in rv]
    return v == rv


def test_listeners_off_unless_configured(broker):
    text = open(broker.log_path, errors="replace").read()
    assert "listening msrpc" not in text


def test_epmap_gives_the_interface_endpoint(door):
    assert door.binding == "ncacn_ip_tcp:%s[%d]" % (door.host, door.port)


def test_ept_lookup_lists_both_interfaces(door):
    """A tool that enumerates the mapper (impacket's hept_lookup, rpcdump's loop) sees qmmgmt
    and qmcomm at the interfaces' port; asked for one interface, only that one."""
    from impacket.dcerpc.v5 import epm, transport
    from impacket.uuid import bin_to_uuidtup
    from msrpc_idl import MSRPC_UUID_QMCOMM

    def lookup(**kw):
        t = transport.DCERPCTransportFactory("ncacn_ip_tcp:%s[%d]" % (door.host, door.epmap_port))
        dce = t.get_dce_rpc()
        dce.connect()
        try:
            return epm.hept_lookup(door.host, dce=dce, **kw)
        finally:
            dce.disconnect()

    entries = lookup()
    seen = {}
    for e in entries:
        t = e["tower"]
        floors = t["Floors"]
        uuid = bin_to_uuidtup(floors[0]["InterfaceUUID"] + struct.pack(
            "<HH", floors[0]["MajorVersion"], floors[0]["MinorVersion"]))
        port = struct.unpack(">H", floors[3]["RelatedData"])[0]  # floor 4: the TCP port
        seen[uuid] = (e["annotation"].rstrip(b"\0").decode(), port)
    assert seen == {bin_to_uuidtup(MSRPC_UUID_QMMGMT): ("qmmgmt", door.port),
                    bin_to_uuidtup(MSRPC_UUID_QMCOMM): ("qmcomm", door.port)}, seen
    only = lookup(inquiry_type=epm.RPC_C_EP_MATCH_BY_IF, ifId=MSRPC_UUID_QMCOMM)
    assert [e["annotation"] for e in only] == [b"qmcomm\0"]


def test_machine_info_matches_http(door):
    q = uname("m")
    door.api.declare(q)
    door.api.publish(q, "hello")
    ids = sorted(MACHINE_PROPS)
    hr, rpc = door.get_info(machine_object(), ids)
    assert hr == MQ_OK
    http = door.http_info("MACHINE", ids, MACHINE_PROPS, "MSMQ")
    for i, h, r in zip(ids, http, rpc):
        assert same(h, r), (MACHINE_PROPS[i], h, r)
    assert rpc[3] == (VT_LPWSTR, "CONNECTED")
    assert rpc[5][0] == VT_I8 and rpc[5][1] >= 5
    assert any(p.endswith("\\" + q) for p in rpc[1][1])  # PRIVATEQ


def test_queue_info_matches_http_every_property(door):
    q = uname("qi")
    door.api.declare(q, arguments={"x-journal": True})
    for i in range(3):
        door.api.publish(q, "body%d" % i)
    ids = sorted(QUEUE_PROPS)
    fmt = "OS:.\\private$\\" + q
    hr, rpc = door.get_info(queue_object(fmt), ids)
    assert hr == MQ_OK
    http = door.http_info("QUEUE=DIRECT=" + fmt, ids, QUEUE_PROPS, "QUEUE")
    for i, h, r in zip(ids, http, rpc):
        assert same(h, r), (QUEUE_PROPS[i], h, r)
    assert rpc[6] == (VT_UI4, 3) and rpc[7] == (VT_UI4, 15)


def test_info_refusals_change_nothing_and_keep_apvar(door):
    # a property of the other table, an unknown one: MQ_ERROR_ILLEGAL_PROPID, VT_NULLs back
    hr, rpc = door.get_info(machine_object(), [4, 99])
    assert hr == MQ_ERROR_ILLEGAL_PROPID and rpc == [(VT_NULL, None)] * 2
    hr, rpc = door.get_info(session_object(), [1])
    assert hr == MQ_ERROR_INVALID_PARAMETER
    hr, rpc = door.get_info(queue_object("OS:.\\private$\\" + uname("none")), [7])
    assert hr == MQ_ERROR_QUEUE_NOT_FOUND and rpc == [(VT_NULL, None)]


def connected(door):
    return door.get_info(machine_object(), [4])[1][0][1]


def test_actions_each_effect(door):
    assert door.action(machine_object(), "DisConnect") == MQ_OK
    assert connected(door) == "DISCONNECTED"
    s, j, _ = door.api.info("MACHINE", "CONNECTED")
    assert j["values"]["PROPID_MGMT_MSMQ_CONNECTED"] == "DISCONNECTED"  # one model, two doors
    door.broker.assert_alive()
    assert door.action(machine_object(), "connect") == MQ_OK
    assert connected(door) == "CONNECTED"
    # TIDY answers once compaction is done
    assert door.action(machine_object(), "TIDY") == MQ_OK
    # queue actions: outgoing queues only; a local queue is refused, nothing changes
    q = uname("act")
    door.api.declare(q)
    door.api.publish(q, "m")
    for a in ("PAUSE", "RESUME", "EOD_RESEND"):
        assert door.action(machine_object(), a) == MQ_ERROR_INVALID_PARAMETER, a
        assert door.action(queue_object("OS:.\\private$\\" + q), a) == \
            MQ_ERROR_INVALID_PARAMETER, a
    for a in ("CONNECT", "DISCONNECT", "TIDY"):
        assert door.action(queue_object("OS:.\\private$\\" + q), a) == \
            MQ_ERROR_INVALID_PARAMETER, a
    assert connected(door) == "CONNECTED"
    assert door.api.queue(q)["messages"] == 1


@pytest.mark.parametrize("act", ["DISCONNECT", "REBOOT", "", "PURGE"])
def test_session_object_or_unknown_action_refused_nothing_changed(door, act):
    assert door.action(session_object(), act) == MQ_ERROR_INVALID_PARAMETER
    if act != "DISCONNECT":
        assert door.action(machine_object(), act) == MQ_ERROR_INVALID_PARAMETER
    assert connected(door) == "CONNECTED"


def test_rights_follow_the_http_api(broker_factory):
    # msrpc.user without the administrator tag: properties yes, actions refused
    b = broker_factory(config=dict(MSRPC_CONFIG, **{"msrpc.user": "watcher"}))
    api = Api(b)
    s, j, _ = api.put("/api/users/watcher", {"password": "pw", "tags": "monitoring"})
    assert s in (201, 204), j
    d = Door(b)
    hr, rpc = d.get_info(machine_object(), [4])
    assert hr == MQ_OK and rpc == [(VT_LPWSTR, "CONNECTED")]
    assert d.action(machine_object(), "DISCONNECT") == MQ_ERROR_ACCESS_DENIED
    assert connected(d) == "CONNECTED"
    # a queue of a vhost the user cannot see: refused like its HTTP GET
    q = uname("hidden")
    api.declare(q)
    hr, _ = d.get_info(queue_object("OS:.\\private$\\" + q), [7])
    assert hr == MQ_ERROR_ACCESS_DENIED
    # the machine's lists and totals cover only the vhosts the user may list, as over HTTP
    hr, rpc = d.get_info(machine_object(), [2, 6])
    assert hr == MQ_OK and not any(p.endswith("\\" + q) for p in rpc[0][1])
    watcher = Api(b, user="watcher", password="pw")
    s, j, _ = watcher.info("MACHINE", "PRIVATEQ", "BYTES_IN_ALL_QUEUES")
    assert s == 200, j
    assert j["values"]["PROPID_MGMT_MSMQ_PRIVATEQ"] == rpc[0][1]
    assert j["values"]["PROPID_MGMT_MSMQ_BYTES_IN_ALL_QUEUES"] == rpc[1][1]
    d.dce.disconnect()


def test_outgoing_queue_actions_and_foreign_status(nodes):
    a = nodes.start("a", config=MSRPC_CONFIG)
    b = nodes.start("b", config=MSRPC_CONFIG)
    ch = b.amqp().channel()
    ch.queue_declare("dest", durable=True, auto_delete=False)
    import amqp
    fmt = b.fmt("dest")
    pc = a.amqp().channel()
    pc.confirm_select()
    pc.basic_publish(amqp.Message(b"x", delivery_mode=2), exchange="", routing_key=fmt)
    a.wait_drained(fmt)
    d = Door(a.broker)
    obj = queue_object(fmt[len("DIRECT="):])
    hr, rpc = d.get_info(obj, [6, 11, 4])
    assert hr == MQ_OK and rpc[0] == (VT_LPWSTR, "NO") and rpc[2] == (VT_LPWSTR, "REMOTE")
    assert d.action(obj, "PAUSE") == MQ_OK
    assert a.outgoing_queue(fmt)["state"] == "ONHOLD"
    assert d.get_info(obj, [11])[1][0] == (VT_LPWSTR, "ONHOLD")
    assert d.action(obj, "Resume") == MQ_OK
    assert a.outgoing_queue(fmt)["state"] != "ONHOLD"
    assert d.action(obj, "EOD_RESEND") == MQ_OK
    # every property of an outgoing queue, as the HTTP API says it
    ids = sorted(QUEUE_PROPS)
    hr, rpc = d.get_info(obj, ids)
    assert hr == MQ_OK
    http = d.http_info("QUEUE=" + fmt, ids, QUEUE_PROPS, "QUEUE")
    volatile = {14, 21, 25}  # times and history may move between the two calls
    for i, h, r in zip(ids, http, rpc):
        if i in volatile:
            assert VT_NAMES[h[0]] == r[0], (QUEUE_PROPS[i], h, r)
        else:
            assert same(h, r), (QUEUE_PROPS[i], h, r)
    # a destination nobody answers: UNKNOWN
    nobody = "DIRECT=TCP:127.0.0.1:1\\private$\\nobody"
    pc.basic_publish(amqp.Message(b"1"), exchange="", routing_key=nobody)
    a.wait_state(nobody, "WAITING")
    hr, rpc = d.get_info(queue_object(nobody[len("DIRECT="):]), [6])
    assert hr == MQ_OK and rpc == [(VT_LPWSTR, "UNKNOWN")]
    d.dce.disconnect()
    # the receiving end: its incoming sequence as six parallel vectors (VT_VARIANT|VT_VECTOR)
    db = Door(b.broker)
    hr, rpc = db.get_info(queue_object("OS:.\\private$\\dest"), [24])
    assert hr == MQ_OK and rpc[0][0] == VT_VECTOR | VT_VARIANT
    cols = [v for _, v in rpc[0][1]]
    assert len(cols) == 6 and len(cols[0]) == 1 and cols[2][0] > 0, cols
    http = db.http_info("QUEUE=DIRECT=OS:.\\private$\\dest", [24], QUEUE_PROPS, "QUEUE")
    assert same(http[0], rpc[0])
    db.dce.disconnect()


# ---------------------------------------------------------------------------
# Hostile input: raw PDUs
# ---------------------------------------------------------------------------
NDR20 = bytes.fromhex("045d888aeb1cc9119fe808002b104860") + struct.pack("<HH", 2, 0)


def pdu(ptype, body, call_id=1, flags=3, frag_len=None, auth_len=0):
    n = 16 + len(body) if frag_len is None else frag_len
    return struct.pack("<BBBB4sHHI", 5, 0, ptype, flags, b"\x10\0\0\0", n, auth_len,
                       call_id) + body


def bind_body(iface=MSRPC_UUID_QMMGMT, ctx=0):
    return (struct.pack("<HHIB3x", 5840, 5840, 0, 1) + struct.pack("<HBx", ctx, 1) + iface +
            NDR20)


def request_body(opnum, stub, ctx=0):
    return struct.pack("<IHH", len(stub), ctx, opnum) + stub


def recv_pdu(s):
    h = b""
    while len(h) < 16:
        c = s.recv(16 - len(h))
        if not c:
            return None
        h += c
    n = struct.unpack_from("<H", h, 8)[0]
    body = b""
    while len(body) < n - 16:
        c = s.recv(n - 16 - len(body))
        if not c:
            return None
        body += c
    return h + body


def raw(door):
    s = socket.create_connection((door.host, door.port), timeout=10)
    return s


def fault_status(p):
    assert p is not None and p[2] == 3, p  # a fault
    return struct.unpack_from("<I", p, 24)[0]


def closed(s):
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        return True


def bound(door):
    s = raw(door)
    s.sendall(pdu(11, bind_body()))
    ack = recv_pdu(s)
    assert ack[2] == 12
    return s


def test_unknown_interface_is_rejected_at_bind(door):
    s = raw(door)
    s.sendall(pdu(11, bind_body(iface=bytes(16) + struct.pack("<HH", 1, 0))))
    ack = recv_pdu(s)
    assert ack[2] == 12
    # the result list: provider rejection, abstract syntax not supported
    off = 16 + 8
    sec = struct.unpack_from("<H", ack, off)[0]
    off += 2 + sec
    off += (4 - off % 4) % 4
    assert ack[off] == 1
    result, reason = struct.unpack_from("<HH", ack, off + 4)
    assert (result, reason) == (2, 1)
    # a request on that context: nca_s_unk_if
    s.sendall(pdu(0, request_body(0, b"")))
    assert fault_status(recv_pdu(s)) == 0x1C010003
    s.close()


def test_opnum_out_of_range_and_bad_stub(door):
    s = bound(door)
    s.sendall(pdu(0, request_body(7, b"")))
    assert fault_status(recv_pdu(s)) == 0x1C010002  # nca_s_op_rng_error
    s.sendall(pdu(0, request_body(0, b"\x01\x00")))  # a truncated MGMT_OBJECT
    assert fault_status(recv_pdu(s)) == 0x000006F7  # RPC_X_BAD_STUB_DATA
    stub = struct.pack("<HHI", 1, 1, 0) + struct.pack("<I", 0)  # cp = 0: outside range(1,128)
    s.sendall(pdu(0, request_body(0, stub)))
    assert fault_status(recv_pdu(s)) == 0x000006C6  # RPC_S_INVALID_BOUND
    stub = struct.pack("<HHI", 9, 9, 0)  # an invalid union tag
    s.sendall(pdu(0, request_body(1, stub)))
    assert fault_status(recv_pdu(s)) == 0x000006F7
    # the connection still serves
    stub = struct.pack("<HHI", 1, 1, 0) + struct.pack("<III", 1, 1, 4) + struct.pack(
        "<I", 1) + struct.pack("<HBBIH", 1, 0, 0, 0, 1)
    s.sendall(pdu(0, request_body(0, stub)))
    p = recv_pdu(s)
    assert p[2] == 2  # a response
    s.close()
    assert connected(door) == "CONNECTED"


def test_huge_fragment_counts_are_refused(door):
    s = bound(door)
    # 300 first-and-middle fragments of 16 stub bytes: over msrpc.max_fragments (256)
    stub = b"\0" * 16
    s.sendall(pdu(0, request_body(1, stub), flags=1))
    sent = 1
    try:
        for _ in range(400):
            s.sendall(pdu(0, request_body(1, stub), flags=0))
            sent += 1
    except (BrokenPipeError, ConnectionResetError):
        pass
    got = recv_pdu(s)
    assert fault_status(got) == 0x1C00001B  # nca_s_fault_remote_no_memory
    assert closed(s)
    s.close()
    assert connected(door) == "CONNECTED"


def test_fragmented_request_and_response(door):
    # a GetInfo whose request comes in many fragments and whose answer needs several
    q = uname("frag")
    for i in range(60):
        door.api.declare("%s-%02d-%s" % (q, i, "x" * 100))
    ids = [2] * 128
    hr, rpc = door.get_info(machine_object(), ids)  # impacket fragments neither way by default
    assert hr == MQ_OK and len(rpc[0][1]) >= 60
    door.dce.set_max_fragment_size(1500)  # now the request goes in fragments
    hr, rpc2 = door.get_info(machine_object(), ids)
    assert hr == MQ_OK and rpc2 == rpc


def test_wrong_lengths_and_garbage_close_cleanly(door):
    cases = [
        pdu(11, bind_body(), frag_len=10),          # shorter than a header
        pdu(11, bind_body(), frag_len=60000),       # over the fragment size
        b"\x04\x00" + b"\0" * 30,                   # RPC version 4
        pdu(0, request_body(0, b"")),               # a request before any bind
        pdu(2, b"\0" * 8),                          # a response from the client
        pdu(11, bind_body()[:14]),                  # a truncated bind
        pdu(11, bind_body(), auth_len=200),         # auth longer than the PDU
    ]
    for c in cases:
        s = raw(door)
        s.sendall(c)
        while True:
            p = recv_pdu(s)
            if p is None:
                break
            assert p[2] in (3, 13), p  # a fault or a bind_nak, then the close
        s.close()
    assert connected(door) == "CONNECTED"


def test_authentication_is_refused_with_bind_nak(door):
    s = raw(door)
    body = bind_body()
    # an NTLM negotiate verifier: auth type 10 (RPC_C_AUTHN_WINNT), level integrity
    verifier = struct.pack("<BBBBI", 10, 5, 0, 0, 0) + b"NTLMSSP\0" + b"\0" * 24
    s.sendall(pdu(11, body + verifier, auth_len=32))
    p = recv_pdu(s)
    assert p[2] == 13 and struct.unpack_from("<H", p, 16)[0] == 8  # authn type not recognized
    assert closed(s)
    s.close()


# ---------------------------------------------------------------------------
# qmcomm (MS-MQMP): seed 000's rpc_ACPurgeQueue through handles of rpc_QMOpenQueueInternal
# ---------------------------------------------------------------------------
from msrpc_idl import (MQ_PEEK_ACCESS, MQ_SEND_ACCESS, MSRPC_UUID_QMCOMM,  # noqa: E402
                       close_handle, open_queue, purge, server_port)

CONTEXT_MISMATCH = "nca_s_fault_context_mismatch"


def qmcomm(door):
    return connect(epm_binding(door.host, door.epmap_port, MSRPC_UUID_QMCOMM),
                   MSRPC_UUID_QMCOMM)


def http_handles(door):
    s, j, _ = door.api.get("/api/msmq/handles?all=true")
    assert s == 200, j
    return j


def test_server_port_and_local_purge_close(door):
    c = qmcomm(door)
    assert server_port(c, 0) == door.port and server_port(c, 2) == door.port
    assert server_port(c, 1) == 0 and server_port(c, 7) == 0
    q = uname("p")
    door.api.declare(q)
    for i in range(3):
        door.api.publish(q, "m%d" % i)
    hr, h = open_queue(c, "OS:.\\private$\\" + q)
    assert hr == MQ_OK and h != bytes(20)
    assert [x["queue"] for x in http_handles(door)] == [q]  # one handle table, two doors
    assert purge(c, h) == MQ_OK
    assert door.api.queue(q)["messages"] == 0
    door.api.publish(q, "again")
    hr, out = close_handle(c, h)
    assert hr == MQ_OK and out == bytes(20)
    assert http_handles(door) == []
    # a closed handle, an unknown one: the call fails, nothing purged
    for bad in (h, b"\0" * 4 + b"\x99" * 16):
        with pytest.raises(DCERPCException, match=CONTEXT_MISMATCH):
            purge(c, bad)
    assert door.api.queue(q)["messages"] == 1
    c.disconnect()


def test_open_refusals_match_http(door):
    c = qmcomm(door)
    hr, h = open_queue(c, "OS:.\\private$\\" + uname("none"))
    assert hr == MQ_ERROR_QUEUE_NOT_FOUND and h == bytes(20)
    q = uname("s")
    door.api.declare(q)
    door.api.publish(q, "x")
    hr, h = open_queue(c, "OS:.\\private$\\" + q, access=MQ_SEND_ACCESS)
    assert hr == MQ_OK
    s, j, _ = door.api.post("/api/msmq/handles", {"format_name": "DIRECT=OS:.\\private$\\" + q,
                                                   "access": "send"})
    hid = j["handle"]
    s, j, _ = door.api.post("/api/msmq/handles/%s/purge" % hid, {})
    http_hr = int(j["hresult"], 16)
    assert http_hr != 0 and purge(c, h) == http_hr  # a send handle purges nothing, same answer
    assert door.api.queue(q)["messages"] == 1
    c.disconnect()


def test_context_handle_of_another_connection_and_rundown(door):
    a, b = qmcomm(door), qmcomm(door)
    q = uname("r")
    door.api.declare(q)
    door.api.publish(q, "keep")
    hr, h = open_queue(a, "OS:.\\private$\\" + q, access=MQ_PEEK_ACCESS)
    assert hr == MQ_OK
    with pytest.raises(DCERPCException, match=CONTEXT_MISMATCH):
        purge(b, h)
    with pytest.raises(DCERPCException, match=CONTEXT_MISMATCH):
        close_handle(b, h)
    assert door.api.queue(q)["messages"] == 1 and len(http_handles(door)) == 1
    a.disconnect()  # the connection goes: its handles are run down
    wait_for(lambda: http_handles(door) == [], message="handle not run down")
    b.disconnect()


def test_purge_through_a_remote_proxy_with_the_owners_hresult(nodes):
    a = nodes.start("a", config=MSRPC_CONFIG)
    b = nodes.start("b")
    ch = b.amqp().channel()
    ch.queue_declare("far", durable=True, auto_delete=False)
    for i in range(4):
        b.api.publish("far", "f%d" % i)
    d = Door(a.broker)
    c = qmcomm(d)
    direct = b.fmt("far")[len("DIRECT="):]
    hr, h = open_queue(c, direct)
    assert hr == MQ_OK
    assert [x["kind"] for x in http_handles(d)] == ["remote"]
    # MQHandleToFormatName of the proxy: the name the handle holds, as its HTTP view says
    from msrpc_idl import handle_to_format_name
    fmt = http_handles(d)[0]["format_name"]
    assert handle_to_format_name(c, h, 300) == (MQ_OK, fmt, len(fmt) + 1)
    assert purge(c, h) == MQ_OK
    assert b.api.queue("far")["messages"] == 0
    # the owner's queue deleted: the owner's HRESULT comes back, the same as over HTTP
    s, j, _ = d.api.post("/api/msmq/handles", {"format_name": b.fmt("far")})
    assert s == 201, j
    http_h = j["handle"]
    s, j, _ = b.api.delete(b.api.q("far"))
    assert s in (200, 204), j
    hr = purge(c, h)
    s, j, _ = d.api.post("/api/msmq/handles/%s/purge" % http_h, {})
    assert hr != MQ_OK and hr == int(j["hresult"], 16), (hex(hr), j)
    s, j, _ = d.api.delete("/api/msmq/handles/" + http_h)
    assert close_handle(c, h)[0] == MQ_OK
    wait_for(lambda: http_handles(d) == [], message="remote handle not closed")
    c.disconnect()
    d.dce.disconnect()
