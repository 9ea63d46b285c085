"""NTLM on the DCE/RPC door (issue 34): impacket's client logs in as a Sluice user with
RPC_C_AUTHN_WINNT at the levels connect, packet integrity and packet privacy, and calls every
method test_msrpc.py calls with auth none; wrong passwords, NTLMv1, unauthenticated calls,
tampered PDUs and users without rights are refused and change nothing."""

import base64
import hashlib
import hmac
import os
import re
import struct

import pytest
from Cryptodome.Cipher import ARC4
from impacket import ntlm
from impacket.dcerpc.v5 import rpcrt, transport
from impacket.dcerpc.v5.rpcrt import DCERPCException

from helpers import uname, wait_for
from msrpc_idl import (MSRPC_UUID_QMCOMM, MSRPC_UUID_QMMGMT, R_QMMgmtAction, R_QMMgmtGetInfo,
                       VT_LPWSTR, close_handle, epm_binding, handle_to_format_name,
                       machine_object, null_propvariants, open_queue, path_to_format, purge,
                       pv_value, query_registry, queue_object, server_port, tm_whereabouts)
from test_access import restart
from test_mgmt import Api
from test_msrpc import (MACHINE_PROPS, MQ_ERROR_ACCESS_DENIED, MQ_OK, QUEUE_PROPS, rpc_ports,
                        same)

NTLM_CONFIG = {"listeners.msrpc": "0", "listeners.msrpc_epmap": "0", "msrpc.auth": "ntlm",
               "msrpc.min_auth_level": "connect"}
CONNECT = rpcrt.RPC_C_AUTHN_LEVEL_CONNECT
INTEGRITY = rpcrt.RPC_C_AUTHN_LEVEL_PKT_INTEGRITY
PRIVACY = rpcrt.RPC_C_AUTHN_LEVEL_PKT_PRIVACY
PASSWORD = "S3cret-\u00fc\u00e9"  # non-ASCII (impacket takes Latin-1 only): UTF-16LE


class Node:
    def __init__(self, broker):
        self.broker = broker
        self.host = broker.host
        self.port, self.epmap_port = rpc_ports(broker.log_path)
        self.api = Api(broker)

    def user(self, name, password=PASSWORD, tags="administrator", perms=True):
        s, j, _ = self.api.put("/api/users/" + name, {"password": password, "tags": tags})
        assert s in (201, 204), j
        if perms:
            assert self.api.put("/api/permissions/%2F/" + name,
                                {"configure": ".*", "write": ".*", "read": ".*"})[0] in (201, 204)

    def connect(self, user, password=PASSWORD, level=PRIVACY, iface=MSRPC_UUID_QMMGMT,
                domain="WORKGROUP"):
        t = transport.DCERPCTransportFactory(epm_binding(self.host, self.epmap_port, iface))
        t.set_credentials(user, password, domain)
        dce = t.get_dce_rpc()
        dce.set_auth_type(rpcrt.RPC_C_AUTHN_WINNT)
        dce.set_auth_level(level)
        dce.connect()
        dce.bind(iface)
        return dce

    def log(self):
        return open(self.broker.log_path, errors="replace").read()


class ResponseSignatures:
    """Checks the server's signature on every response PDU, independently of impacket (which
    decrypts but verifies nothing): MS-NLMP 3.4.4.2 with the server-to-client keys, one
    sequence number per PDU, the RC4 stream sealing the stub first and the checksum after."""

    def __init__(self, dce, level):
        key, flags = dce._DCERPC_v5__sessionKey, dce._DCERPC_v5__flags
        self.sign = ntlm.SIGNKEY(flags, key, b"Server")
        self.rc4 = ARC4.new(ntlm.SEALKEY(flags, key, b"Server"))
        self.keyx = flags & ntlm.NTLMSSP_NEGOTIATE_KEY_EXCH
        self.level, self.seq, self.buf = level, 0, b""
        tr = dce.get_rpc_transport()
        recv = tr.recv

        def hooked(*a, **kw):
            data = recv(*a, **kw)
            self.feed(data)
            return data
        tr.recv = hooked

    def feed(self, data):
        self.buf += data
        while len(self.buf) >= 16:
            n = struct.unpack_from("<H", self.buf, 8)[0]
            if len(self.buf) < n:
                return
            pdu, self.buf = self.buf[:n], self.buf[n:]
            if pdu[2] == 2:  # response
                self.check(pdu)

    def check(self, pdu):
        assert struct.unpack_from("<H", pdu, 10)[0] == 16, "a response without a verifier"
        tpos = len(pdu) - 24
        assert pdu[tpos] == 10 and pdu[tpos + 1] == self.level
        body = pdu[24:tpos]
        if self.level == PRIVACY:
            body = self.rc4.encrypt(body)
        msg = pdu[:24] + body + pdu[tpos:len(pdu) - 16]
        mac = hmac.new(self.sign, struct.pack("<I", self.seq) + msg, hashlib.md5).digest()[:8]
        if self.keyx:
            mac = self.rc4.encrypt(mac)
        assert pdu[-16:] == struct.pack("<I", 1) + mac + struct.pack("<I", self.seq), \
            "response %d: bad signature" % self.seq
        self.seq += 1


def get_info(dce, obj, props):
    req = R_QMMgmtGetInfo()
    req["pObjectFormat"] = obj
    req["cp"] = len(props)
    req["aProp"] = list(props)
    req["apVar"] = null_propvariants(len(props))
    r = dce.request(req, checkError=False)
    return r["ErrorCode"], [pv_value(pv) for pv in r["apVar"]]


def action(dce, obj, act):
    req = R_QMMgmtAction()
    req["pObjectFormat"] = obj
    req["lpwszAction"] = act + "\x00"
    return dce.request(req, checkError=False)["ErrorCode"]


def http_info(api, obj, ids, table, kind):
    s, j, _ = api.info(obj, *ids)
    assert s == 200, j
    return [next((p["vt"], p["value"]) for p in j["properties"]
                 if p["name"] == "PROPID_MGMT_%s_%s" % (kind, table[i])) for i in ids]


@pytest.fixture
def node(broker_factory):
    n = Node(broker_factory(config=NTLM_CONFIG))
    n.user("rpcadmin")
    return n


@pytest.mark.parametrize("level", [CONNECT, INTEGRITY, PRIVACY])
def test_every_method_at_each_level(node, level):
    dce = node.connect("rpcadmin", level=level)
    sigs = ResponseSignatures(dce, level) if level != CONNECT else None
    if level == PRIVACY:
        # enough queues that the machine's PRIVATEQ list spans several response fragments
        for i in range(120):
            node.api.declare(uname("many-queues-to-list-over-several-fragments-%d" % i))
    # qmmgmt: GetInfo of the machine and of a queue, as the HTTP API answers
    ids = sorted(i for i in MACHINE_PROPS if i != 10)  # 10: a clock that moves between asks
    hr, rpc = get_info(dce, machine_object(), ids)
    assert hr == MQ_OK
    for h, r in zip(http_info(node.api, "MACHINE", ids, MACHINE_PROPS, "MSMQ"), rpc):
        assert same(h, r), (h, r)
    q = uname("n")
    node.api.declare(q)
    node.api.publish(q, "x" * 3000)  # a response over one fragment at privacy still reads
    qids = sorted(QUEUE_PROPS)
    hr, rpc = get_info(dce, queue_object("OS:.\\private$\\" + q), qids)
    assert hr == MQ_OK
    http = http_info(node.api, "QUEUE=DIRECT=OS:.\\private$\\" + q, qids, QUEUE_PROPS, "QUEUE")
    for h, r in zip(http, rpc):
        assert same(h, r), (h, r)
    # R_QMMgmtAction with the administrator's rights
    assert action(dce, machine_object(), "DISCONNECT") == MQ_OK
    assert get_info(dce, machine_object(), [4]) == (MQ_OK, [(VT_LPWSTR, "DISCONNECTED")])
    assert action(dce, machine_object(), "CONNECT") == MQ_OK
    if sigs:
        assert sigs.seq >= (8 if level == PRIVACY else 5), sigs.seq  # 5 calls, + fragments
    dce.disconnect()
    # qmcomm: the server port, open, purge, close
    c = node.connect("rpcadmin", level=level, iface=MSRPC_UUID_QMCOMM)
    csigs = ResponseSignatures(c, level) if level != CONNECT else None
    assert server_port(c, 0) == node.port
    hr, _, name = path_to_format(c, ".\\private$\\" + q)
    assert hr == MQ_OK
    hr, h = open_queue(c, name)
    assert hr == MQ_OK
    assert handle_to_format_name(c, h, 300)[:2] == (MQ_OK, "DIRECT=" + name)
    assert purge(c, h) == MQ_OK
    assert node.api.queue(q)["messages"] == 0
    assert close_handle(c, h) == (MQ_OK, bytes(20))
    assert csigs is None or csigs.seq == 6
    c.disconnect()
    assert "NTLM login of 'rpcadmin' (domain 'WORKGROUP'), level %s" % {
        CONNECT: "connect", INTEGRITY: "integrity", PRIVACY: "privacy"}[level] in node.log()


def test_wrong_password_is_refused_at_the_first_call(node):
    # the bind succeeds (the password is not known before AUTH3, which has no answer in the
    # protocol): the first call gets the access-denied fault and the connection closes
    dce = node.connect("rpcadmin", password="wrong")
    with pytest.raises(DCERPCException, match="access_denied"):
        action(dce, machine_object(), "DISCONNECT")
    wait_for(lambda: "wrong password for NTLM user 'rpcadmin'" in node.log(),
             message="no refusal logged")
    assert get_info(node.connect("rpcadmin"), machine_object(), [4]) == \
        (MQ_OK, [(VT_LPWSTR, "CONNECTED")])
    with pytest.raises(DCERPCException, match="access_denied"):
        get_info(node.connect("nosuchuser"), machine_object(), [4])
    wait_for(lambda: "no user 'nosuchuser'" in node.log(), message="no refusal logged")


def test_ntlmv1_is_refused(node, monkeypatch):
    monkeypatch.setattr(ntlm, "USE_NTLMv2", False)
    dce = node.connect("rpcadmin")
    with pytest.raises(DCERPCException, match="access_denied"):
        action(dce, machine_object(), "DISCONNECT")
    wait_for(lambda: "only NTLMv2 is accepted" in node.log(), message="no refusal logged")


def test_unauthenticated_calls_are_refused(node):
    t = transport.DCERPCTransportFactory(epm_binding(node.host, node.epmap_port))
    dce = t.get_dce_rpc()
    dce.connect()
    dce.bind(MSRPC_UUID_QMMGMT)
    with pytest.raises(DCERPCException, match="access_denied"):
        action(dce, machine_object(), "DISCONNECT")
    c = node.connect("rpcadmin")
    assert get_info(c, machine_object(), [4]) == (MQ_OK, [(VT_LPWSTR, "CONNECTED")])


def test_min_auth_level_refuses_connect_level(broker_factory):
    n = Node(broker_factory(config=dict(NTLM_CONFIG, **{"msrpc.min_auth_level": "integrity"})))
    n.user("rpcadmin")
    with pytest.raises(DCERPCException, match="access_denied"):
        get_info(n.connect("rpcadmin", level=CONNECT), machine_object(), [4])
    assert get_info(n.connect("rpcadmin", level=INTEGRITY), machine_object(), [4])[0] == MQ_OK


@pytest.mark.parametrize("level", [INTEGRITY, PRIVACY])
def test_tampered_pdu_is_refused_and_changes_nothing(node, level):
    c = node.connect("rpcadmin", level=level, iface=MSRPC_UUID_QMCOMM)
    q = uname("t")
    node.api.declare(q)
    node.api.publish(q, "keep")
    hr, h = open_queue(c, "OS:.\\private$\\" + q)
    assert hr == MQ_OK
    tr = c.get_rpc_transport()
    send = tr.send

    def flip(data, *a, **kw):
        b = bytearray(data)
        if b[2] == 0:  # a request: flip a byte of its (sealed or signed) stub
            b[24 + 2] ^= 0x40
        return send(bytes(b), *a, **kw)
    tr.send = flip
    with pytest.raises(DCERPCException, match="access_denied"):
        purge(c, h)
    assert node.api.queue(q)["messages"] == 1
    wait_for(lambda: "signature does not verify" in node.log(), message="no refusal logged")
    # the connection was closed: its handle is run down
    wait_for(lambda: node.api.get("/api/msmq/handles?all=true")[1] == [],
             message="handle not run down")


def test_rights_of_the_logged_in_user(node):
    # a monitoring user: properties yes, actions refused, a vhost it cannot see refused
    node.user("watcher", tags="monitoring", perms=False)
    q = uname("hidden")
    node.api.declare(q)
    dce = node.connect("watcher")
    assert get_info(dce, machine_object(), [4]) == (MQ_OK, [(VT_LPWSTR, "CONNECTED")])
    assert action(dce, machine_object(), "DISCONNECT") == MQ_ERROR_ACCESS_DENIED
    assert get_info(dce, queue_object("OS:.\\private$\\" + q), [7])[0] == MQ_ERROR_ACCESS_DENIED
    # no management tag at all: everything refused with MQ_ERROR_ACCESS_DENIED
    node.user("plain", tags="", perms=True)
    dce = node.connect("plain")
    assert get_info(dce, machine_object(), [4])[0] == MQ_ERROR_ACCESS_DENIED
    c = node.connect("plain", iface=MSRPC_UUID_QMCOMM)
    node.api.publish(q, "keep")
    hr, _ = open_queue(c, "OS:.\\private$\\" + q)
    assert hr == MQ_ERROR_ACCESS_DENIED
    assert node.api.queue(q)["messages"] == 1
    # the calls around the handles too, as the HTTP API's MSMQ endpoints refuse that user
    s, j, _ = Api(node.broker, "plain", PASSWORD).info("MACHINE", "TYPE")
    assert s == 403, (s, j)
    assert path_to_format(c, ".\\private$\\" + q)[0] == MQ_ERROR_ACCESS_DENIED
    assert query_registry(c, 4) == (MQ_ERROR_ACCESS_DENIED, None)
    assert tm_whereabouts(c, 4)[0] == MQ_ERROR_ACCESS_DENIED
    # a monitoring user who cannot see the queue's vhost: its path is refused like its GetInfo
    w = node.connect("watcher", iface=MSRPC_UUID_QMCOMM)
    assert path_to_format(w, ".\\private$\\" + q)[0] == MQ_ERROR_ACCESS_DENIED
    assert query_registry(w, 1) == (MQ_OK, "4294967295")


def test_imported_hash_has_no_nt_hash_and_hashes_survive_restart(broker_factory):
    b = broker_factory(config=NTLM_CONFIG)
    n = Node(b)
    salt = os.urandom(4)
    h = base64.b64encode(salt + hashlib.sha256(salt + b"imported").digest()).decode()
    assert n.api.put("/api/users/imported", {"password_hash": h, "tags": "administrator",
                                             "hashing_algorithm":
                                             "rabbit_password_hashing_sha256"})[0] == 201
    with pytest.raises(DCERPCException, match="access_denied"):
        get_info(n.connect("imported", password="imported"), machine_object(), [4])
    wait_for(lambda: re.search(r"user 'imported' has no NT hash", n.log()),
             message="no clear log line")
    n.user("kept")
    b2 = restart(broker_factory, b, config=NTLM_CONFIG)
    n2 = Node(b2)
    assert get_info(n2.connect("kept"), machine_object(), [4])[0] == MQ_OK
    # msrpc.ntlm_hashes = off: the stored NT hashes are dropped, NTLM logins fail
    b3 = restart(broker_factory, b2, config=dict(NTLM_CONFIG, **{"msrpc.ntlm_hashes": "off"}))
    n3 = Node(b3)
    with pytest.raises(DCERPCException, match="access_denied"):
        get_info(n3.connect("kept"), machine_object(), [4])
    b4 = restart(broker_factory, b3, config=NTLM_CONFIG)
    n4 = Node(b4)
    with pytest.raises(DCERPCException, match="access_denied"):
        get_info(n4.connect("kept"), machine_object(), [4])
    n4.user("kept")  # setting the password again gives it back
    assert get_info(n4.connect("kept"), machine_object(), [4])[0] == MQ_OK


class _Type3:
    """An AUTHENTICATE built here, as Windows clients build theirs: NTLMv2 with MsvAvFlags'
    MIC bit in the blob's AV pairs, the Version field, and the MIC over all three messages
    (impacket's own client sends no MIC)."""

    def __init__(self, data, flags):
        self.data, self.fields = data, {"flags": flags}

    def __getitem__(self, k):
        return self.fields[k]

    def getData(self):
        return self.data


def type3_with_mic(bad_mic):
    def build(type1, type2, user, password, domain, lmhash="", nthash="", use_ntlmv2=True):
        ch = ntlm.NTLMAuthChallenge(type2)
        av = ntlm.AV_PAIRS(ch["TargetInfoFields"])
        av[ntlm.NTLMSSP_AV_FLAGS] = struct.pack("<I", 2)  # a MIC follows
        when = av[ntlm.NTLMSSP_AV_TIME][1]
        blob = (b"\x01\x01" + b"\0" * 6 + when + os.urandom(8) + b"\0" * 4 + av.getData() +
                b"\0" * 4)
        key = ntlm.NTOWFv2(user, password, domain)
        proof = hmac.new(key, ch["challenge"] + blob, hashlib.md5).digest()
        base = hmac.new(key, proof, hashlib.md5).digest()
        exported = os.urandom(16)
        enc = ARC4.new(base).encrypt(exported)
        flags = type1["flags"] & ch["flags"] | ntlm.NTLMSSP_NEGOTIATE_VERSION
        fields = [b"\0" * 24, proof + blob, domain.encode("utf-16le"), user.encode("utf-16le"),
                  b"", enc]
        head, payload, off = b"", b"", 88
        for f in fields:
            head += struct.pack("<HHI", len(f), len(f), off + len(payload))
            payload += f
        msg = (b"NTLMSSP\0" + struct.pack("<I", 3) + head + struct.pack("<I", flags) +
               b"\x06\x01\xb1\x1d\0\0\0\x0f")
        mic = hmac.new(exported, type1.getData() + type2 + msg + b"\0" * 16 + payload,
                       hashlib.md5).digest()
        if bad_mic:
            mic = bytes([mic[0] ^ 1]) + mic[1:]
        return _Type3(msg + mic + payload, flags), exported
    return build


@pytest.mark.parametrize("bad_mic", [False, True])
def test_authenticate_with_a_mic(node, monkeypatch, bad_mic):
    monkeypatch.setattr(ntlm, "getNTLMSSPType3", type3_with_mic(bad_mic))
    dce = node.connect("rpcadmin", level=PRIVACY)
    if bad_mic:
        with pytest.raises(DCERPCException, match="access_denied"):
            get_info(dce, machine_object(), [4])
        wait_for(lambda: "MIC does not match" in node.log(), message="no refusal logged")
        return
    sigs = ResponseSignatures(dce, PRIVACY)
    assert get_info(dce, machine_object(), [4]) == (MQ_OK, [(VT_LPWSTR, "CONNECTED")])
    assert sigs.seq == 1


def test_remote_open_checks_the_logged_in_user_like_http(nodes):
    """Issue 43 part 4: rpc_QMOpenQueueInternal of another node's queue is checked on the
    user logged in over NTLM (carol, read ^(?!payroll$).*), on the name the owner resolves,
    exactly as the HTTP API's open: MQ_ERROR_ACCESS_DENIED and no handle for PAYROLL or
    payroll on node b, in any spelling; what carol may read opens."""
    a = nodes.start("a", config=NTLM_CONFIG)
    b = nodes.start("b")
    na = Node(a.broker)
    na.user("carol", tags="management", perms=False)
    s, j, _ = a.api.put("/api/permissions/%2F/carol",
                        {"configure": "", "write": "", "read": "^(?!payroll$).*"})
    assert s in (201, 204), (s, j)
    ch = b.amqp().channel()
    for q in ("payroll", "public"):
        ch.queue_declare(q, durable=True, auto_delete=False)
        b.api.publish(q, "x")
    c = na.connect("carol", iface=MSRPC_UUID_QMCOMM)
    http = Api(a.broker, "carol", PASSWORD)
    for spelling in ("PAYROLL", "payroll", "Payroll"):
        fmt = b.fmt(spelling)
        s, j, _ = http.post("/api/msmq/handles", {"format_name": fmt})
        assert s == 403 and int(j["hresult"], 16) == MQ_ERROR_ACCESS_DENIED, (spelling, s, j)
        hr, h = open_queue(c, fmt[len("DIRECT="):])
        assert (hr, h) == (MQ_ERROR_ACCESS_DENIED, bytes(20)), (spelling, hex(hr))
    s, j, _ = a.api.get("/api/msmq/handles?all=true")
    assert s == 200 and j == [], j
    assert b.api.queue("payroll")["messages"] == 1
    # what carol may read opens through the same door, and purges
    hr, h = open_queue(c, b.fmt("PUBLIC")[len("DIRECT="):])
    assert hr == MQ_OK and h != bytes(20)
    assert purge(c, h) == MQ_OK
    assert b.api.queue("public")["messages"] == 0
    assert close_handle(c, h)[0] == MQ_OK
    c.disconnect()
