"""A small raw client of RabbitMQ's stream protocol (docs/stream-protocol.md) for the tests:
frames packed with struct, one request at a time, nothing hidden. Big-endian; a frame is
size:u32 key:u16 version:u16 body; strings int16-length, maps int32 count of string pairs."""
import socket
import struct
import zlib

PEER_PROPERTIES, SASL_HANDSHAKE, SASL_AUTHENTICATE, TUNE, OPEN, CLOSE, HEARTBEAT = (
    0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17)
DECLARE_PUBLISHER, PUBLISH, PUBLISH_ERROR, CREATE, DELETE, METADATA = 0x01, 0x02, 0x04, 0x0d, 0x0e, 0x0f
EXCHANGE_COMMAND_VERSIONS = 0x1b
PUBLISH_CONFIRM, QUERY_PUBLISHER_SEQUENCE, DELETE_PUBLISHER = 0x03, 0x05, 0x06
SUBSCRIBE, DELIVER, CREDIT, STORE_OFFSET, QUERY_OFFSET, UNSUBSCRIBE = 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c
METADATA_UPDATE, STREAM_STATS = 0x10, 0x1c
FIRST, LAST, NEXT, OFFSET, TIMESTAMP = 1, 2, 3, 4, 5
RESPONSE = 0x8000
OK, STREAM_DOES_NOT_EXIST, STREAM_ALREADY_EXISTS = 0x01, 0x02, 0x05
SASL_MECHANISM_NOT_SUPPORTED, AUTHENTICATION_FAILURE = 0x07, 0x08
SASL_ERROR, VIRTUAL_HOST_ACCESS_FAILURE, UNKNOWN_FRAME, FRAME_TOO_LARGE = 0x09, 0x0c, 0x0d, 0x0e
ACCESS_REFUSED, PRECONDITION_FAILED, PUBLISHER_DOES_NOT_EXIST = 0x10, 0x11, 0x12
SUBSCRIPTION_ID_ALREADY_EXISTS, SUBSCRIPTION_ID_DOES_NOT_EXIST = 0x03, 0x04
STREAM_NOT_AVAILABLE, NO_OFFSET = 0x06, 0x13


def _a10(v):
    """One AMQP 1.0 value: str -> str8, bytes -> vbin8, bool, int -> int, ("sym", s),
    ("ts", ms), None -> null."""
    if v is None:
        return b"\x40"
    if isinstance(v, bool):
        return b"\x41" if v else b"\x42"
    if isinstance(v, int):
        return b"\x71" + struct.pack(">i", v)
    if isinstance(v, str):
        return b"\xa1" + struct.pack(">B", len(v.encode())) + v.encode()
    if isinstance(v, bytes):
        return b"\xa0" + struct.pack(">B", len(v)) + v
    kind, x = v
    if kind == "sym":
        return b"\xa3" + struct.pack(">B", len(x)) + x.encode()
    return b"\x83" + struct.pack(">q", x)  # ("ts", ms)


def _compound(code, items):
    body = b"".join(items)
    return bytes([code]) + struct.pack(">II", len(body) + 4, len(items)) + body


def amqp10(body, properties=None, app=None, durable=None):
    """An AMQP 1.0 message (what stream clients publish): optional header (durable),
    properties (a list of the 13 fields, None for absent), application properties (a dict),
    then one data section."""
    out = b""
    if durable is not None:
        out += b"\x00\x53\x70" + _compound(0xd0, [_a10(bool(durable))])
    if properties is not None:
        out += b"\x00\x53\x73" + _compound(0xd0, [_a10(f) for f in properties])
    if app is not None:
        items = []
        for k, v in app.items():
            items += [_a10(k), _a10(v)]
        out += b"\x00\x53\x74" + _compound(0xd1, items)
    return out + b"\x00\x53\x75\xb0" + struct.pack(">I", len(body)) + body


class Batch:
    """A sub-entry batch for publish(): records, compression 0 (none) or 1 (gzip); records
    and uncompressed override what is sent in the header (to send a damaged one)."""
    def __init__(self, recs, compression=0, records=None, uncompressed=None):
        raw = b"".join(struct.pack(">I", len(x)) + x for x in recs)
        if compression == 1:
            co = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
            data = co.compress(raw) + co.flush()
        else:
            data = raw
        self.head = struct.pack(">BHI", 0x80 | compression << 4,
                                len(recs) if records is None else records,
                                len(raw) if uncompressed is None else uncompressed)
        self.data = data

    def wire(self):
        return self.head + b32(self.data)


def parse_chunk(r):
    """A Deliver's OSIRIS chunk (after the subscription id): (header dict, [entry bytes]).
    Checks the magic, the CRC and that the entries fill the data exactly."""
    (mv, ctype, n_entries, n_records, ts, epoch, chunk_id, crc, data_len, trailer_len,
     bloom) = r.take(">BBHIqQQIIIB")
    r.take(">3s")
    data = r.b[r.i:r.i + data_len]
    r.i += data_len
    assert mv == 0x50 and ctype == 0 and len(data) == data_len
    assert zlib.crc32(data) == crc
    entries, i = [], 0
    while i < len(data):
        (size,) = struct.unpack_from(">I", data, i)
        assert not size & 0x80000000  # simple entries only
        entries.append(data[i + 4:i + 4 + size])
        i += 4 + size
    assert i == len(data) and len(entries) == n_entries == n_records
    return {"chunk_id": chunk_id, "ts": ts, "epoch": epoch}, entries


def s16(v):
    if v is None:
        return struct.pack(">h", -1)
    b = v.encode() if isinstance(v, str) else v
    return struct.pack(">h", len(b)) + b


def b32(v):
    if v is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(v)) + v


def kvmap(d):
    return struct.pack(">i", len(d)) + b"".join(s16(k) + s16(v) for k, v in d.items())


class Reader:
    def __init__(self, body):
        self.b, self.i = body, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.i)
        self.i += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def str(self):
        n = self.take(">h")
        if n < 0:
            return None
        v = self.b[self.i:self.i + n].decode()
        self.i += n
        return v

    def map(self):
        return {self.str(): self.str() for _ in range(self.take(">i"))}

    def left(self):
        return len(self.b) - self.i


class Closed(Exception):
    pass


class StreamClient:
    def __init__(self, port, host="127.0.0.1", timeout=5.0, sock=None):
        self.s = sock or socket.create_connection((host, port), timeout=timeout)
        self.s.settimeout(timeout)
        self.corr = 0
        self.buf = b""

    def close(self):
        self.s.close()

    def send_raw(self, data):
        self.s.sendall(data)

    def send(self, key, body=b"", version=1):
        self.send_raw(struct.pack(">IHH", 4 + len(body), key, version) + body)

    def request(self, key, body=b"", version=1):
        self.corr += 1
        self.send(key, struct.pack(">I", self.corr) + body, version)
        return self.corr

    def _read(self, n):
        while len(self.buf) < n:
            d = self.s.recv(65536)
            if not d:
                raise Closed("the server closed the connection")
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self):
        """(key, version, Reader over the rest of the body)."""
        size = struct.unpack(">I", self._read(4))[0]
        body = self._read(size)
        key, version = struct.unpack(">HH", body[:4])
        return key, version, Reader(body[4:])

    def expect(self, key, skip=(HEARTBEAT,)):
        while True:
            k, v, r = self.frame()
            if k in skip:
                continue
            assert k == key, "expected key 0x%04x, got 0x%04x" % (key, k)
            return r

    def response(self, key, corr):
        r = self.expect(key | RESPONSE)
        assert r.take(">I") == corr
        return r.take(">H"), r

    def sees_eof(self):
        """True once the server closed (EOF or reset); frames before it are dropped."""
        try:
            while True:
                if not self.s.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True

    # -- the handshake, step by step ----------------------------------------
    def peer_properties(self, props=None):
        c = self.request(PEER_PROPERTIES, kvmap(props or {"product": "streamraw"}))
        code, r = self.response(PEER_PROPERTIES, c)
        return code, r.map()

    def sasl_handshake(self):
        c = self.request(SASL_HANDSHAKE)
        code, r = self.response(SASL_HANDSHAKE, c)
        return code, [r.str() for _ in range(r.take(">i"))]

    def sasl_authenticate(self, user, password, mechanism="PLAIN", data=None):
        if data is None and mechanism == "PLAIN":
            data = b"\0" + user.encode() + b"\0" + password.encode()
        c = self.request(SASL_AUTHENTICATE, s16(mechanism) + b32(data))
        code, _ = self.response(SASL_AUTHENTICATE, c)
        return code

    def tune(self, frame_max=0, heartbeat=0):
        """Read the server's Tune and answer it (as the Node.js client: key 0x0014)."""
        r = self.expect(TUNE)
        server = (r.take(">I"), r.take(">I"))
        self.send(TUNE, struct.pack(">II", frame_max or server[0], heartbeat))
        return server

    def open(self, vhost="/"):
        c = self.request(OPEN, s16(vhost))
        code, r = self.response(OPEN, c)
        return code, (r.map() if r.left() else {})

    def connect(self, user="guest", password="guest", vhost="/", heartbeat=0):
        assert self.peer_properties()[0] == OK
        assert self.sasl_handshake()[0] == OK
        assert self.sasl_authenticate(user, password) == OK
        self.tune(heartbeat=heartbeat)
        code, props = self.open(vhost)
        assert code == OK
        return props

    def metadata(self, *streams):
        c = self.request(METADATA, struct.pack(">i", len(streams)) + b"".join(s16(s) for s in streams))
        r = self.expect(METADATA | RESPONSE)
        assert r.take(">I") == c
        brokers = [(r.take(">H"), r.str(), r.take(">I")) for _ in range(r.take(">i"))]
        out = []
        for _ in range(r.take(">i")):
            name, code, leader = r.str(), r.take(">H"), r.take(">H")
            out.append((name, code, leader, [r.take(">H") for _ in range(r.take(">i"))]))
        return brokers, out

    def close_request(self, code=OK, reason="bye"):
        """Close; Delivers and PublishConfirms still on the way before the answer are dropped."""
        c = self.request(CLOSE, struct.pack(">H", code) + s16(reason))
        r = self.expect(CLOSE | RESPONSE, skip=(HEARTBEAT, 0x08, 0x03))
        assert r.take(">I") == c
        return r.take(">H")

    def server_close(self):
        """The server's Close: (code, reason), answered with OK as a client does."""
        r = self.expect(CLOSE)
        corr, code, reason = r.take(">I"), r.take(">H"), r.str()
        self.send(CLOSE | RESPONSE, struct.pack(">IH", corr, OK))
        return code, reason

    # -- publishing and consuming -------------------------------------------
    def declare_publisher(self, pid, stream, ref=None):
        c = self.request(DECLARE_PUBLISHER, struct.pack(">B", pid) + s16(ref) + s16(stream))
        return self.response(DECLARE_PUBLISHER, c)[0]

    def publish(self, pid, msgs, version=1):
        """msgs: [(publishing id, bytes)]."""
        body = struct.pack(">Bi", pid, len(msgs))
        for pub_id, m in msgs:
            body += struct.pack(">Q", pub_id) + (s16(None) if version == 2 else b"")
            body += b32(m) if isinstance(m, bytes) else m.wire()
        self.send(PUBLISH, body, version)

    def confirms(self, pid, n, skip=(HEARTBEAT,)):
        """Read PublishConfirms of publisher pid until n publishing ids came: the ids."""
        ids = []
        while len(ids) < n:
            r = self.expect(PUBLISH_CONFIRM, skip)
            assert r.take(">B") == pid
            ids += [r.take(">Q") for _ in range(r.take(">i"))]
        return ids

    def publish_errors(self):
        r = self.expect(PUBLISH_ERROR)
        pid = r.take(">B")
        return pid, [(r.take(">Q"), r.take(">H")) for _ in range(r.take(">i"))]

    def query_publisher_sequence(self, stream, ref):
        c = self.request(QUERY_PUBLISHER_SEQUENCE, s16(ref) + s16(stream))
        code, r = self.response(QUERY_PUBLISHER_SEQUENCE, c)
        return code, r.take(">Q")

    def delete_publisher(self, pid):
        c = self.request(DELETE_PUBLISHER, struct.pack(">B", pid))
        return self.response(DELETE_PUBLISHER, c)[0]

    def subscribe(self, sid, stream, kind=FIRST, value=None, credit=10, props=None):
        spec = struct.pack(">H", kind)
        if kind == OFFSET:
            spec += struct.pack(">Q", value)
        elif kind == TIMESTAMP:
            spec += struct.pack(">q", value)
        body = struct.pack(">B", sid) + s16(stream) + spec + struct.pack(">H", credit)
        if props is not None:
            body += kvmap(props)
        c = self.request(SUBSCRIBE, body)
        return self.response(SUBSCRIBE, c)[0]

    def deliver(self):
        """The next Deliver: (subscription id, chunk header, [entries])."""
        r = self.expect(DELIVER)
        sid = r.take(">B")
        hdr, entries = parse_chunk(r)
        return sid, hdr, entries

    def messages(self, n):
        """Read Delivers until n messages came: [(offset, entry bytes)]."""
        out = []
        while len(out) < n:
            _, hdr, entries = self.deliver()
            out += [(hdr["chunk_id"] + i, e) for i, e in enumerate(entries)]
        return out

    def credit(self, sid, n):
        self.send(CREDIT, struct.pack(">BH", sid, n))

    def unsubscribe(self, sid):
        c = self.request(UNSUBSCRIBE, struct.pack(">B", sid))
        return self.response(UNSUBSCRIBE, c)[0]

    def store_offset(self, stream, ref, offset):
        self.send(STORE_OFFSET, s16(ref) + s16(stream) + struct.pack(">Q", offset))

    def query_offset(self, stream, ref):
        c = self.request(QUERY_OFFSET, s16(ref) + s16(stream))
        code, r = self.response(QUERY_OFFSET, c)
        return code, r.take(">Q")

    def stream_stats(self, stream):
        c = self.request(STREAM_STATS, s16(stream))
        code, r = self.response(STREAM_STATS, c)
        return code, {r.str(): r.take(">q") for _ in range(r.take(">i"))}
