"""MS-MQMP's qmcomm calls around seed 000's open / purge / close over DCE/RPC (issue 34):
R_QMObjectPathToObjectFormat (12), R_QMGetTmWhereabouts (14), rpc_ACHandleToFormatName (26)
and R_QMQueryQMRegistryInternal (28), driven by impacket's DCE/RPC stack with the structures
of MS-MQMP section 6 (msrpc_idl.py), each answer compared with what the HTTP API says of the
same object; hostile stubs fault and change nothing."""

import re
import struct

import pytest
from impacket.dcerpc.v5.rpcrt import DCERPCException

from helpers import uname, wait_for
from msrpc_idl import (MSRPC_UUID_QMCOMM, QUEUE_FORMAT_TYPE_DIRECT, R_QMObjectPathToObjectFormat,
                       close_handle, direct_queue_format, enlist_transaction,
                       handle_to_format_name, open_queue, path_to_format, purge, query_registry,
                       tm_whereabouts)
from test_msrpc import (MQ_ERROR_ACCESS_DENIED, MQ_ERROR_INVALID_PARAMETER,
                        MQ_ERROR_QUEUE_NOT_FOUND, MQ_OK, MSRPC_CONFIG, QUEUE_PROPS, Door,
                        bind_body, fault_status, pdu, qmcomm, raw, recv_pdu, request_body)
from test_msrpc import door  # noqa: F401  (the fixture)

MQ_ERROR_ILLEGAL_QUEUE_PATHNAME = 0xC00E0014
MQ_ERROR_FORMATNAME_BUFFER_TOO_SMALL = 0xC00E001F
MQ_ERROR_NO_DS = 0xC00E0013
MQ_ERROR_DTC_CONNECT = 0xC00E004C
RPC_X_BAD_STUB_DATA = 0x6F7
RPC_S_INVALID_BOUND = 0x6C6
CONTEXT_MISMATCH = "nca_s_fault_context_mismatch"


def http_names(door, q):
    """PATHNAME and FORMATNAME of a queue, as the HTTP API's R_QMMgmtGetInfo gives them."""
    (_, path), (_, fmt) = door.http_info("QUEUE=DIRECT=OS:.\\private$\\" + q, [1, 2],
                                         QUEUE_PROPS, "QUEUE")
    return path, fmt


def test_path_to_format_matches_http(door):
    c = qmcomm(door)
    q = uname("pf")
    door.api.declare(q)
    path, fmt = http_names(door, q)
    assert path.endswith("\\private$\\" + q)
    hr, qft, name = path_to_format(c, path)
    assert (hr, qft) == (MQ_OK, QUEUE_FORMAT_TYPE_DIRECT)
    assert "DIRECT=" + name == fmt
    # "." is this computer, and MSMQ names are case-insensitive: the canonical name comes back
    hr, qft, name = path_to_format(c, ".\\PRIVATE$\\" + q)
    assert hr == MQ_OK and "DIRECT=" + name == fmt
    # and the name opens the queue, as MQOpenQueue does with it
    hr, h = open_queue(c, name)
    assert hr == MQ_OK
    c.disconnect()


def test_path_to_format_refusals_match_http(door):
    c = qmcomm(door)
    missing = ".\\private$\\" + uname("none")
    s, j, _ = door.api.info("QUEUE=DIRECT=OS:" + missing, 2)
    assert int(j["hresult"], 16) == MQ_ERROR_QUEUE_NOT_FOUND
    assert path_to_format(c, missing) == (MQ_ERROR_QUEUE_NOT_FOUND, 0, None)
    assert path_to_format(c, "no-backslash")[0] == MQ_ERROR_ILLEGAL_QUEUE_PATHNAME
    assert path_to_format(c, "\\private$\\q")[0] == MQ_ERROR_ILLEGAL_QUEUE_PATHNAME
    # a public queue's path: it lives in a directory service, which a Sluice node has not
    assert path_to_format(c, ".\\" + uname("pub"))[0] == MQ_ERROR_NO_DS
    # on input m_qft MUST be QUEUE_FORMAT_TYPE_UNKNOWN
    q = uname("pf")
    door.api.declare(q)
    req = R_QMObjectPathToObjectFormat()
    req["lpwcsPathName"] = ".\\private$\\%s\x00" % q
    req["pObjectFormat"]["ObjType"] = 1
    req["pObjectFormat"]["u"]["tag"] = 1
    req["pObjectFormat"]["u"]["pQueueFormat"] = direct_queue_format("OS:.\\private$\\" + q)
    assert c.request(req, checkError=False)["ErrorCode"] == MQ_ERROR_INVALID_PARAMETER
    c.disconnect()


def test_handle_to_format_name_matches_http(door):
    c = qmcomm(door)
    q = uname("hf")
    door.api.declare(q)
    hr, h = open_queue(c, "OS:.\\private$\\" + q)
    assert hr == MQ_OK
    s, handles, _ = door.api.get("/api/msmq/handles?all=true")
    s, j, _ = door.api.get("/api/msmq/handles/" + handles[0]["handle"])
    fmt = j["format_name"]
    need = len(fmt) + 1
    assert handle_to_format_name(c, h, 200) == (MQ_OK, fmt, need)
    assert handle_to_format_name(c, h, need) == (MQ_OK, fmt, need)  # an exact fit
    # too small: cut and NUL-terminated, the full length told (MS-MQMP 3.2.4.14's retry)
    assert handle_to_format_name(c, h, need - 1) == (MQ_ERROR_FORMATNAME_BUFFER_TOO_SMALL,
                                                     fmt[:need - 2], need)
    assert handle_to_format_name(c, h, 10) == (MQ_ERROR_FORMATNAME_BUFFER_TOO_SMALL, fmt[:9],
                                               need)
    assert handle_to_format_name(c, h, None) == (MQ_ERROR_FORMATNAME_BUFFER_TOO_SMALL, None,
                                                 need)
    # pdwLength MUST equal the buffer's length
    hr, _, _ = handle_to_format_name(c, h, 200, length=100)
    assert hr == MQ_ERROR_INVALID_PARAMETER
    # another connection's handle, a closed one: the RPC runtime's context fault
    other = qmcomm(door)
    with pytest.raises(DCERPCException, match=CONTEXT_MISMATCH):
        handle_to_format_name(other, h, 200)
    other.disconnect()
    assert close_handle(c, h)[0] == MQ_OK
    with pytest.raises(DCERPCException, match=CONTEXT_MISMATCH):
        handle_to_format_name(c, h, 200)
    c.disconnect()


def test_handle_to_format_name_rechecks_like_http(broker_factory):
    """The queue's permission taken away after the open: the HTTP GET of the handle and
    rpc_ACHandleToFormatName refuse alike (the handle's every use but close rechecks)."""
    b = broker_factory(config=dict(MSRPC_CONFIG, **{"msrpc.user": "rpcuser"}))
    d = Door(b)
    api = d.api
    s, j, _ = api.put("/api/users/rpcuser", {"password": "pw", "tags": "management"})
    assert s in (201, 204), j
    s, j, _ = api.put("/api/permissions/%2F/rpcuser", {"configure": ".*", "write": ".*",
                                                        "read": ".*"})
    assert s in (201, 204), j
    q = uname("rc")
    api.declare(q)
    c = qmcomm(d)
    hr, h = open_queue(c, "OS:.\\private$\\" + q, access=0x20)
    assert hr == MQ_OK
    s, handles, _ = api.get("/api/msmq/handles?all=true")
    hid = handles[0]["handle"]
    s, j, _ = api.put("/api/permissions/%2F/rpcuser", {"configure": "", "write": "",
                                                        "read": "^nothing$"})
    assert s in (201, 204), j
    from test_mgmt import Api
    s, j, _ = Api(b, "rpcuser", "pw").get("/api/msmq/handles/%s" % hid)
    http_hr = int(j["hresult"], 16)
    assert http_hr == MQ_ERROR_ACCESS_DENIED
    assert handle_to_format_name(c, h, 200)[0] == http_hr
    c.disconnect()
    d.dce.disconnect()


def test_query_registry(broker_factory):
    b = broker_factory(config=dict(MSRPC_CONFIG, **{"listeners.msmq": "0",
                                                    "msmq.ping_port": "off"}))
    d = Door(b)
    c = qmcomm(d)
    # 4: the queue manager's Identifier, braceless: the GUID the MSMQ door gives
    m = wait_for(lambda: re.search(r"msmq: queue manager ([0-9a-f-]{36})",
                                   open(b.log_path, errors="replace").read()),
                 message="no 'msmq: queue manager' line")
    assert query_registry(c, 4) == (MQ_OK, m.group(1))
    # 3: the server's version, the one R_QMMgmtGetInfo's PROPID_MGMT_MSMQ_TYPE tells
    hr, version = query_registry(c, 3)
    s, j, _ = d.api.info("MACHINE", "TYPE")
    assert hr == MQ_OK and re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert version in j["values"]["PROPID_MGMT_MSMQ_TYPE"]
    # 1: the default time-to-reach-queue: none here, INFINITE
    assert query_registry(c, 1) == (MQ_OK, "4294967295")
    # 0 (MQIS servers), 2 (the forest's GUID): no directory service
    assert query_registry(c, 0) == (MQ_ERROR_NO_DS, None)
    assert query_registry(c, 2) == (MQ_ERROR_NO_DS, None)
    assert query_registry(c, 5) == (MQ_ERROR_INVALID_PARAMETER, None)
    c.disconnect()
    d.dce.disconnect()


def test_no_msdtc(door):
    c = qmcomm(door)
    hr, buf, size = tm_whereabouts(c, 64)
    assert (hr, size) == (MQ_ERROR_DTC_CONNECT, 0) and buf == b"\0" * 64
    hr, buf, size = tm_whereabouts(c, 0)
    assert (hr, size) == (MQ_ERROR_DTC_CONNECT, 0)
    assert enlist_transaction(c, b"cookie" * 10) == MQ_ERROR_DTC_CONNECT
    assert enlist_transaction(c, b"") == MQ_ERROR_DTC_CONNECT
    c.disconnect()


def qmcomm_raw(door):
    s = raw(door)
    s.sendall(pdu(11, bind_body(iface=MSRPC_UUID_QMCOMM)))
    assert recv_pdu(s)[2] == 12
    return s


def wstr(t):
    n = len(t) + 1
    b = struct.pack("<III", n, 0, n) + (t + "\0").encode("utf-16-le")
    return b + b"\0" * (-len(b) % 4)


def test_hostile_stubs_fault_and_change_nothing(door):
    q = uname("hs")
    door.api.declare(q)
    door.api.publish(q, "keep")
    c = qmcomm(door)
    hr, h = open_queue(c, "OS:.\\private$\\" + q)
    assert hr == MQ_OK
    s = qmcomm_raw(door)
    zero_ctx = b"\0" * 20
    cases = [
        # rpc_ACHandleToFormatName: truncated; size_is and the array's counts disagree; a
        # buffer longer than the stub; then the [range(0, 524288)] broken
        (26, h[:12], RPC_X_BAD_STUB_DATA),
        (26, h + struct.pack("<IIIII", 4, 1, 8, 0, 8) + b"\0" * 16 + struct.pack("<I", 4),
         RPC_X_BAD_STUB_DATA),
        (26, zero_ctx + struct.pack("<IIIII", 4000, 1, 4000, 0, 4000) + b"\0" * 8,
         RPC_X_BAD_STUB_DATA),
        (26, zero_ctx + struct.pack("<III", 524289, 0, 524289), RPC_S_INVALID_BOUND),
        # R_QMObjectPathToObjectFormat: ObjType outside range(1,2); 2 (no arm on the wire);
        # the union's tag not ObjType; a QUEUE_FORMAT cut short; a path without its NUL
        (12, wstr(".\\private$\\" + q) + struct.pack("<II", 3, 3), RPC_S_INVALID_BOUND),
        (12, wstr(".\\private$\\" + q) + struct.pack("<III", 2, 2, 1), RPC_X_BAD_STUB_DATA),
        (12, wstr(".\\private$\\" + q) + struct.pack("<III", 1, 2, 1), RPC_X_BAD_STUB_DATA),
        (12, wstr(".\\private$\\" + q) + struct.pack("<III", 1, 1, 1) + b"\0\0",
         RPC_X_BAD_STUB_DATA),
        (12, struct.pack("<III", 2, 0, 2) + b"a\0b\0" + struct.pack("<III", 1, 1, 0),
         RPC_X_BAD_STUB_DATA),
        # R_QMGetTmWhereabouts: no cbBufSize; over range(0, 131072)
        (14, b"\0\0", RPC_X_BAD_STUB_DATA),
        (14, struct.pack("<I", 131073), RPC_S_INVALID_BOUND),
        # R_QMQueryQMRegistryInternal: no dwQueryType
        (28, b"", RPC_X_BAD_STUB_DATA),
        # R_QMEnlistTransaction: a cookie shorter than cbCookie; cbCookie and the array's
        # size disagree; over range(0, 131072)
        (15, b"\1" * 16 + struct.pack("<II", 64, 64) + b"\0" * 8, RPC_X_BAD_STUB_DATA),
        (15, b"\1" * 16 + struct.pack("<II", 4, 8) + b"\0" * 8, RPC_X_BAD_STUB_DATA),
        (15, b"\1" * 16 + struct.pack("<II", 131073, 131073), RPC_S_INVALID_BOUND),
    ]
    for i, (opnum, stub, want) in enumerate(cases):
        s.sendall(pdu(0, request_body(opnum, stub), call_id=10 + i))
        got = fault_status(recv_pdu(s))
        assert got == want, (i, opnum, hex(got))
    # the connection still serves, the queue and the handle are as they were
    s.sendall(pdu(0, request_body(28, struct.pack("<I", 1)), call_id=99))
    assert recv_pdu(s)[2] == 2
    s.close()
    assert door.api.queue(q)["messages"] == 1
    assert handle_to_format_name(c, h, 200)[0] == MQ_OK
    assert purge(c, h) == MQ_OK and door.api.queue(q)["messages"] == 0
    c.disconnect()
