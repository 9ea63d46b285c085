"""The MSMQ RPC interfaces' structures for impacket's NDR engine, written from the
specifications' IDL: MS-MQMR section 6 (qmmgmt), MS-MQMP section 6 (qmcomm), MS-MQMQ 2.2.7 /
2.2.12 (QUEUE_FORMAT, PROPVARIANT). The tests drive Sluice's DCE/RPC door with these through
impacket's own transport and bind, an implementation independent of Sluice's (src/rpc/)."""

import struct

from impacket.dcerpc.v5 import epm, transport
from impacket.dcerpc.v5.dtypes import (DWORD, GUID, LONG, LONGLONG, LPWSTR, UCHAR, ULONG,
                                       ULONGLONG, USHORT, WSTR)
from impacket.dcerpc.v5.ndr import (NDR, NDRCALL, NDRCONSTRUCTEDTYPE, NDRPOINTER, NDRSTRUCT,
                                    NDRUNION, NDRUniConformantArray,
                                    NDRUniConformantVaryingArray)
from impacket.uuid import uuidtup_to_bin

MSRPC_UUID_QMMGMT = uuidtup_to_bin(("41208ee0-e970-11d1-9b9e-00e02c064c39", "1.0"))
MSRPC_UUID_QMCOMM = uuidtup_to_bin(("fdb3a030-065f-11d1-bb9b-00a024ea5525", "1.0"))

MGMT_MACHINE, MGMT_QUEUE, MGMT_SESSION = 1, 2, 3
QUEUE_FORMAT_TYPE_PRIVATE, QUEUE_FORMAT_TYPE_DIRECT, QUEUE_FORMAT_TYPE_MACHINE = 2, 3, 4

VT_NULL, VT_I4, VT_VARIANT, VT_UI4, VT_I8, VT_UI8 = 1, 3, 12, 19, 20, 21
VT_LPWSTR, VT_BLOB, VT_CLSID, VT_VECTOR = 31, 65, 72, 0x1000


class EMPTY(NDR):
    align = 0
    structure = ()


# --- MS-MQMQ 2.2.7 QUEUE_FORMAT --------------------------------------------------------
class OBJECTID(NDRSTRUCT):
    structure = (("Lineage", GUID), ("Uniquifier", DWORD))


class QUEUE_FORMAT_UNION(NDRUNION):
    commonHdr = (("tag", UCHAR),)  # switch_is(m_qft): an unsigned char
    union = {
        0: ("m_pUnknown", EMPTY),  # QUEUE_FORMAT_TYPE_UNKNOWN: no arm
        1: ("m_gPublicID", GUID),
        2: ("m_oPrivateID", OBJECTID),
        3: ("m_pDirectID", LPWSTR),
        4: ("m_gMachineID", GUID),
        8: ("m_pDirectSubqueueID", LPWSTR),
    }


class QUEUE_FORMAT(NDRSTRUCT):
    structure = (("m_qft", UCHAR), ("m_SuffixAndFlags", UCHAR), ("m_reserved", USHORT),
                 ("u", QUEUE_FORMAT_UNION))


class PQUEUE_FORMAT(NDRPOINTER):
    referent = (("Data", QUEUE_FORMAT),)


# --- MS-MQMR 2.2.1.2 MGMT_OBJECT (MgmtObjectType is an enum: 16 bits on the wire) --------
class MGMT_OBJECT_UNION(NDRUNION):
    commonHdr = (("tag", USHORT),)
    union = {
        MGMT_QUEUE: ("pQueueFormat", PQUEUE_FORMAT),
        MGMT_MACHINE: ("Reserved1", DWORD),
        MGMT_SESSION: ("Reserved2", DWORD),
    }


class MGMT_OBJECT(NDRSTRUCT):
    structure = (("type", USHORT), ("u", MGMT_OBJECT_UNION))


# --- MS-MQMQ 2.2.12 PROPVARIANT ----------------------------------------------------------
class BYTE_ARRAY(NDRUniConformantArray):
    item = "c"


class PBYTE_ARRAY(NDRPOINTER):
    referent = (("Data", BYTE_ARRAY),)


class BLOB(NDRSTRUCT):
    structure = (("cbSize", ULONG), ("pBlobData", PBYTE_ARRAY))


class PCLSID(NDRPOINTER):
    referent = (("Data", GUID),)


def _vector(item_cls, name):
    arr = type(name + "_ARRAY", (NDRUniConformantArray,), {"item": item_cls})
    ptr = type("P" + name + "_ARRAY", (NDRPOINTER,), {"referent": (("Data", arr),)})
    return type(name, (NDRSTRUCT,), {"structure": (("cElems", ULONG), ("pElems", ptr))})


CAUL = _vector("<L", "CAUL")
CAL = _vector("<l", "CAL")
CAUH = _vector("<Q", "CAUH")
CACLSID = _vector(GUID, "CACLSID")
CALPWSTR = _vector(LPWSTR, "CALPWSTR")


class PROPVARIANT_UNION(NDRUNION):
    commonHdr = (("tag", USHORT),)
    union = {
        0: ("empty", EMPTY),
        VT_NULL: ("null", EMPTY),
        VT_I4: ("lVal", LONG),
        VT_UI4: ("ulVal", ULONG),
        VT_I8: ("hVal", LONGLONG),
        VT_UI8: ("uhVal", ULONGLONG),
        VT_LPWSTR: ("pwszVal", LPWSTR),
        VT_BLOB: ("blob", BLOB),
        VT_CLSID: ("puuid", PCLSID),
        VT_VECTOR | VT_UI4: ("caul", CAUL),
        VT_VECTOR | VT_I4: ("cal", CAL),
        VT_VECTOR | VT_UI8: ("cauh", CAUH),
        VT_VECTOR | VT_CLSID: ("cauuid", CACLSID),
        VT_VECTOR | VT_LPWSTR: ("calpwstr", CALPWSTR),
    }


class PROPVARIANT(NDRSTRUCT):
    structure = (("vt", USHORT), ("wReserved1", UCHAR), ("wReserved2", UCHAR),
                 ("wReserved3", ULONG), ("_varUnion", PROPVARIANT_UNION))

    def getAlignment(self):
        # The union has 8-byte arms (VT_I8, VT_UI8): MIDL aligns the whole structure to 8.
        return 8


class PROPVARIANT_ARRAY(NDRUniConformantArray):
    item = PROPVARIANT


class PPROPVARIANT_ARRAY(NDRPOINTER):
    referent = (("Data", PROPVARIANT_ARRAY),)


class CAPROPVARIANT(NDRSTRUCT):
    structure = (("cElems", ULONG), ("pElems", PPROPVARIANT_ARRAY))


PROPVARIANT_UNION.union[VT_VECTOR | VT_VARIANT] = ("capropvar", CAPROPVARIANT)


class ULONG_ARRAY(NDRUniConformantArray):
    item = "<L"


class _TopLevelArrays(NDRCALL):
    """impacket lays out a top-level conformant array's elements as if its maximum count were
    not in the stream (it aligns them from the offset before it), which misplaces elements
    aligned to 8 such as PROPVARIANTs. Every field is laid out here from its true offset."""

    def getData(self, soFar=0):
        data = b""
        for name, _ in self.commonHdr + self.structure:
            f = self.fields[name]
            if isinstance(f, NDRUniConformantArray):
                data += b"\0" * ((4 - len(data) % 4) % 4)
                data += struct.pack("<L", len(f["Data"]))
                data += f.getData(soFar + len(data))
                continue
            if isinstance(f, NDR):
                a = f.getAlignment()
                if a > 1:
                    data += b"\0" * ((a - (soFar + len(data)) % a) % a)
                data += f.getData(soFar + len(data))
                if isinstance(f, NDRCONSTRUCTEDTYPE):
                    data += f.getDataReferents(soFar + len(data))
                    data += f.getDataReferent(soFar + len(data))
            else:
                data += self.pack(name, _, soFar + len(data))
        return data


# --- MS-MQMR 3.1.4.1 / 3.1.4.2 -----------------------------------------------------------
class R_QMMgmtGetInfo(_TopLevelArrays):
    opnum = 0
    structure = (("pObjectFormat", MGMT_OBJECT), ("cp", DWORD), ("aProp", ULONG_ARRAY),
                 ("apVar", PROPVARIANT_ARRAY))


class R_QMMgmtGetInfoResponse(NDRCALL):
    structure = (("apVar", PROPVARIANT_ARRAY), ("ErrorCode", ULONG))


class R_QMMgmtAction(NDRCALL):
    opnum = 1
    structure = (("pObjectFormat", MGMT_OBJECT), ("lpwszAction", WSTR))


class R_QMMgmtActionResponse(NDRCALL):
    structure = (("ErrorCode", ULONG),)


# --- helpers ------------------------------------------------------------------------------
def machine_object():
    o = MGMT_OBJECT()
    o["type"] = MGMT_MACHINE
    o["u"]["tag"] = MGMT_MACHINE
    o["u"]["Reserved1"] = 0
    return o


def session_object():
    o = MGMT_OBJECT()
    o["type"] = MGMT_SESSION
    o["u"]["tag"] = MGMT_SESSION
    o["u"]["Reserved2"] = 0
    return o


def queue_object(direct):
    """A MGMT_QUEUE object for a direct format name, "OS:.\\private$\\q" (no "DIRECT=")."""
    o = MGMT_OBJECT()
    o["type"] = MGMT_QUEUE
    o["u"]["tag"] = MGMT_QUEUE
    qf = QUEUE_FORMAT()
    qf["m_qft"] = QUEUE_FORMAT_TYPE_DIRECT
    qf["m_SuffixAndFlags"] = 0
    qf["m_reserved"] = 0
    qf["u"]["tag"] = QUEUE_FORMAT_TYPE_DIRECT
    qf["u"]["m_pDirectID"] = direct + "\x00"
    o["u"]["pQueueFormat"] = qf
    return o


def null_propvariants(n):
    out = []
    for _ in range(n):
        pv = PROPVARIANT()
        pv["vt"] = VT_NULL
        pv["wReserved1"] = pv["wReserved2"] = 0
        pv["wReserved3"] = 0
        pv["_varUnion"]["tag"] = VT_NULL
        out.append(pv)
    return out


def _guid_str(b):
    import uuid
    return str(uuid.UUID(bytes_le=bytes(b)))


def pv_value(pv):
    """A PROPVARIANT as (vt, Python value)."""
    vt = pv["vt"]
    u = pv["_varUnion"]
    if vt in (0, VT_NULL):
        return vt, None
    if vt in (VT_I4, VT_UI4):
        return vt, u["lVal" if vt == VT_I4 else "ulVal"]
    if vt in (VT_I8, VT_UI8):
        return vt, u["hVal" if vt == VT_I8 else "uhVal"]
    if vt == VT_LPWSTR:
        return vt, u["pwszVal"][:-1] if u["pwszVal"] else u["pwszVal"]
    if vt == VT_BLOB:
        return vt, b"".join(x if isinstance(x, bytes) else bytes([x])
                            for x in (u["blob"]["pBlobData"] or []))
    if vt == VT_CLSID:
        return vt, _guid_str(u["puuid"].getData())
    if vt & VT_VECTOR:
        name = {VT_UI4: "caul", VT_I4: "cal", VT_UI8: "cauh", VT_CLSID: "cauuid",
                VT_LPWSTR: "calpwstr", VT_VARIANT: "capropvar"}[vt & ~VT_VECTOR]
        elems = u[name]["pElems"]
        items = list(elems) if elems else []
        if vt & ~VT_VECTOR == VT_LPWSTR:
            return vt, [s["Data"][:-1] for s in items]
        if vt & ~VT_VECTOR == VT_CLSID:
            return vt, [_guid_str(g.getData()) for g in items]
        if vt & ~VT_VECTOR == VT_VARIANT:
            return vt, [pv_value(e) for e in items]
        return vt, list(items)
    raise AssertionError("unexpected VT %#x" % vt)


def epm_binding(host, epmap_port, iface=MSRPC_UUID_QMMGMT):
    """ept_map through the endpoint mapper at epmap_port: the interface's string binding."""
    t = transport.DCERPCTransportFactory("ncacn_ip_tcp:%s[%d]" % (host, epmap_port))
    dce = t.get_dce_rpc()
    dce.connect()
    try:
        return epm.hept_map(host, iface, protocol="ncacn_ip_tcp", dce=dce)
    finally:
        dce.disconnect()


def connect(binding, iface=MSRPC_UUID_QMMGMT):
    t = transport.DCERPCTransportFactory(binding)
    dce = t.get_dce_rpc()
    dce.connect()
    dce.bind(iface)
    return dce


# --- MS-MQMP qmcomm (section 6): the calls seed 000 needs ------------------------------------
class RPC_QUEUE_HANDLE(NDRSTRUCT):
    """A context handle: attributes and a UUID (20 bytes, MS-RPCE 2.2.2.13)."""
    structure = (("Data", "20s"),)

    def getAlignment(self):
        return 4


class rpc_QMOpenQueueInternal(NDRCALL):
    opnum = 19
    structure = (("pQueueFormat", QUEUE_FORMAT), ("dwDesiredAccess", DWORD),
                 ("dwShareMode", DWORD), ("hRemoteQueue", DWORD),
                 ("lplpRemoteQueueName", LPWSTR), ("dwpQueue", DWORD), ("pLicGuid", GUID),
                 ("lpClientName", WSTR), ("dwRemoteProtocol", DWORD),
                 ("dwpRemoteContext", DWORD))


class rpc_QMOpenQueueInternalResponse(NDRCALL):
    structure = (("lplpRemoteQueueName", LPWSTR), ("pdwQMContext", DWORD),
                 ("phQueue", RPC_QUEUE_HANDLE), ("ErrorCode", ULONG))


class rpc_ACCloseHandle(NDRCALL):
    opnum = 20
    structure = (("phQueue", RPC_QUEUE_HANDLE),)


class rpc_ACCloseHandleResponse(NDRCALL):
    structure = (("phQueue", RPC_QUEUE_HANDLE), ("ErrorCode", ULONG))


class rpc_ACPurgeQueue(NDRCALL):
    opnum = 27
    structure = (("hQueue", RPC_QUEUE_HANDLE),)


class rpc_ACPurgeQueueResponse(NDRCALL):
    structure = (("ErrorCode", ULONG),)


class R_QMGetRTQMServerPort(NDRCALL):
    opnum = 31
    structure = (("fIP", DWORD),)


class R_QMGetRTQMServerPortResponse(NDRCALL):
    structure = (("ErrorCode", ULONG),)


MQ_RECEIVE_ACCESS, MQ_SEND_ACCESS, MQ_PEEK_ACCESS = 1, 2, 0x20


def direct_queue_format(direct):
    qf = QUEUE_FORMAT()
    qf["m_qft"] = QUEUE_FORMAT_TYPE_DIRECT
    qf["m_SuffixAndFlags"] = 0
    qf["m_reserved"] = 0
    qf["u"]["tag"] = QUEUE_FORMAT_TYPE_DIRECT
    qf["u"]["m_pDirectID"] = direct + "\x00"
    return qf


def open_queue(dce, direct, access=MQ_RECEIVE_ACCESS, share=0):
    """rpc_QMOpenQueueInternal on a direct format name (without "DIRECT="): (HRESULT, handle)."""
    from impacket.dcerpc.v5.dtypes import NULL
    req = rpc_QMOpenQueueInternal()
    req["pQueueFormat"] = direct_queue_format(direct)
    req["dwDesiredAccess"] = access
    req["dwShareMode"] = share
    req["hRemoteQueue"] = 0
    req["lplpRemoteQueueName"] = NULL
    req["dwpQueue"] = 0
    req["pLicGuid"] = b"\x11" * 16
    req["lpClientName"] = "tester\x00"
    req["dwRemoteProtocol"] = 0
    req["dwpRemoteContext"] = 0
    r = dce.request(req, checkError=False)
    return r["ErrorCode"], _ctx(r["phQueue"])


def _ctx(v):
    return v if isinstance(v, bytes) else v["Data"]


def purge(dce, h):
    req = rpc_ACPurgeQueue()
    req["hQueue"] = h
    return dce.request(req, checkError=False)["ErrorCode"]


def close_handle(dce, h):
    req = rpc_ACCloseHandle()
    req["phQueue"] = h
    r = dce.request(req, checkError=False)
    return r["ErrorCode"], _ctx(r["phQueue"])


def server_port(dce, fip):
    req = R_QMGetRTQMServerPort()
    req["fIP"] = fip
    return dce.request(req, checkError=False)["ErrorCode"]


# --- MS-MQMP qmcomm: the calls around open / purge / close --------------------------------
class OBJECT_FORMAT_UNION(NDRUNION):
    commonHdr = (("tag", DWORD),)  # switch_is(ObjType): a DWORD
    union = {1: ("pQueueFormat", PQUEUE_FORMAT)}


class OBJECT_FORMAT(NDRSTRUCT):
    """MS-MQMP 2.2.3.5: {[range(1,2)] DWORD ObjType; [switch_is(ObjType)] union {[case(1)]
    QUEUE_FORMAT* pQueueFormat;}}"""
    structure = (("ObjType", DWORD), ("u", OBJECT_FORMAT_UNION))


class R_QMObjectPathToObjectFormat(NDRCALL):
    opnum = 12
    structure = (("lpwcsPathName", WSTR), ("pObjectFormat", OBJECT_FORMAT))


class R_QMObjectPathToObjectFormatResponse(NDRCALL):
    structure = (("pObjectFormat", OBJECT_FORMAT), ("ErrorCode", ULONG))


class UCHAR_ARRAY(NDRUniConformantArray):
    item = "c"


class R_QMGetTmWhereabouts(NDRCALL):
    opnum = 14
    structure = (("cbBufSize", DWORD),)


class R_QMGetTmWhereaboutsResponse(NDRCALL):
    structure = (("pbWhereabouts", UCHAR_ARRAY), ("pdwWhereaboutsSize", DWORD),
                 ("ErrorCode", ULONG))


class XACTUOW(NDRSTRUCT):
    """MS-MQMP 2.2.3.4 / MS-DTCO's BOID: 16 bytes."""
    structure = (("rgb", "16s"),)


class R_QMEnlistTransaction(NDRCALL):
    opnum = 15
    structure = (("pUow", XACTUOW), ("cbCookie", DWORD), ("pbCookie", UCHAR_ARRAY))


class R_QMEnlistTransactionResponse(NDRCALL):
    structure = (("ErrorCode", ULONG),)


class WCHAR_ARRAY(NDRUniConformantVaryingArray):
    item = "<H"


class PWCHAR_ARRAY(NDRPOINTER):
    referent = (("Data", WCHAR_ARRAY),)


class rpc_ACHandleToFormatName(NDRCALL):
    opnum = 26
    structure = (("hQueue", RPC_QUEUE_HANDLE), ("dwFormatNameRPCBufferLen", DWORD),
                 ("lpwcsFormatName", PWCHAR_ARRAY), ("pdwLength", DWORD))


class rpc_ACHandleToFormatNameResponse(NDRCALL):
    structure = (("lpwcsFormatName", PWCHAR_ARRAY), ("pdwLength", DWORD), ("ErrorCode", ULONG))


class R_QMQueryQMRegistryInternal(NDRCALL):
    opnum = 28
    structure = (("dwQueryType", DWORD),)


class R_QMQueryQMRegistryInternalResponse(NDRCALL):
    structure = (("lplpMQISServer", LPWSTR), ("ErrorCode", ULONG))


def path_to_format(dce, path):
    """R_QMObjectPathToObjectFormat: (HRESULT, m_qft, the direct format name or None)."""
    req = R_QMObjectPathToObjectFormat()
    req["lpwcsPathName"] = path + "\x00"
    req["pObjectFormat"]["ObjType"] = 1
    req["pObjectFormat"]["u"]["tag"] = 1
    qf = req["pObjectFormat"]["u"]["pQueueFormat"]
    qf["m_qft"] = 0
    qf["m_SuffixAndFlags"] = 0
    qf["m_reserved"] = 0
    qf["u"]["tag"] = 0
    r = dce.request(req, checkError=False)
    out = r["pObjectFormat"]["u"]["pQueueFormat"]
    qft = out["m_qft"]
    name = out["u"]["m_pDirectID"] if qft == QUEUE_FORMAT_TYPE_DIRECT else None
    return r["ErrorCode"], qft, name.rstrip("\x00") if name else name


def handle_to_format_name(dce, h, units, length=None):
    """rpc_ACHandleToFormatName with a buffer of `units` WCHARs (None: a NULL buffer of 0):
    (HRESULT, the buffer's text up to its NUL, *pdwLength)."""
    from impacket.dcerpc.v5.dtypes import NULL
    req = rpc_ACHandleToFormatName()
    req["hQueue"] = h
    req["dwFormatNameRPCBufferLen"] = units or 0
    req["lpwcsFormatName"] = [0] * units if units else NULL
    req["pdwLength"] = (units or 0) if length is None else length
    r = dce.request(req, checkError=False)
    buf = r["lpwcsFormatName"]
    text = None
    if isinstance(buf, list):
        assert len(buf) == units and 0 in buf  # always NUL-terminated
        text = "".join(chr(c) for c in buf[:buf.index(0)])
    return r["ErrorCode"], text, r["pdwLength"]


def query_registry(dce, qtype):
    """R_QMQueryQMRegistryInternal: (HRESULT, the string or None)."""
    req = R_QMQueryQMRegistryInternal()
    req["dwQueryType"] = qtype
    r = dce.request(req, checkError=False)
    v = r["lplpMQISServer"]
    return r["ErrorCode"], (v.rstrip("\x00") if isinstance(v, str) and v else None)


def tm_whereabouts(dce, size):
    req = R_QMGetTmWhereabouts()
    req["cbBufSize"] = size
    r = dce.request(req, checkError=False)
    return r["ErrorCode"], b"".join(r["pbWhereabouts"]), r["pdwWhereaboutsSize"]


def enlist_transaction(dce, cookie):
    req = R_QMEnlistTransaction()
    req["pUow"]["rgb"] = b"\x42" * 16
    req["cbCookie"] = len(cookie)
    req["pbCookie"] = list(cookie[i:i + 1] for i in range(len(cookie)))
    return dce.request(req, checkError=False)["ErrorCode"]
