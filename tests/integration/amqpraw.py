"""A small raw AMQP 0-9-1 client for the integration tests.

It builds frames byte by byte so tests can send exactly what a hostile or
buggy peer would send (bad frame ends, unknown frame types, truncated
arguments, unknown table tags ...) and read back exactly what the broker
answers (connection.close / channel.close reply codes, EOF, heartbeats).

Only the standard library is used.  Everything is big-endian (network order).
"""

import socket
import struct
import time

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE

# Reply codes (NOTES.md section 4).
REPLY_SUCCESS = 200
NO_ROUTE = 312
CONNECTION_FORCED = 320
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540

# ---------------------------------------------------------------------------
# Method signatures.  Field types:
#   o octet, s short, l long, L longlong, ss shortstr, S longstr, F table,
#   b bit, T timestamp
# ---------------------------------------------------------------------------
_CLOSE = [("reply_code", "s"), ("reply_text", "ss"), ("class_id", "s"), ("method_id", "s")]

METHODS = {
    (10, 10): ("connection.start", [("version_major", "o"), ("version_minor", "o"),
                                    ("server_properties", "F"), ("mechanisms", "S"),
                                    ("locales", "S")]),
    (10, 11): ("connection.start-ok", [("client_properties", "F"), ("mechanism", "ss"),
                                       ("response", "S"), ("locale", "ss")]),
    (10, 20): ("connection.secure", [("challenge", "S")]),
    (10, 21): ("connection.secure-ok", [("response", "S")]),
    (10, 30): ("connection.tune", [("channel_max", "s"), ("frame_max", "l"), ("heartbeat", "s")]),
    (10, 31): ("connection.tune-ok", [("channel_max", "s"), ("frame_max", "l"), ("heartbeat", "s")]),
    (10, 40): ("connection.open", [("virtual_host", "ss"), ("capabilities", "ss"), ("insist", "b")]),
    (10, 41): ("connection.open-ok", [("known_hosts", "ss")]),
    (10, 50): ("connection.close", _CLOSE),
    (10, 51): ("connection.close-ok", []),
    (10, 60): ("connection.blocked", [("reason", "ss")]),
    (10, 61): ("connection.unblocked", []),
    (20, 10): ("channel.open", [("out_of_band", "ss")]),
    (20, 11): ("channel.open-ok", [("channel_id", "S")]),
    (20, 20): ("channel.flow", [("active", "b")]),
    (20, 21): ("channel.flow-ok", [("active", "b")]),
    (20, 40): ("channel.close", _CLOSE),
    (20, 41): ("channel.close-ok", []),
    (40, 10): ("exchange.declare", [("ticket", "s"), ("exchange", "ss"), ("type", "ss"),
                                    ("passive", "b"), ("durable", "b"), ("auto_delete", "b"),
                                    ("internal", "b"), ("nowait", "b"), ("arguments", "F")]),
    (40, 11): ("exchange.declare-ok", []),
    (40, 20): ("exchange.delete", [("ticket", "s"), ("exchange", "ss"), ("if_unused", "b"),
                                   ("nowait", "b")]),
    (40, 21): ("exchange.delete-ok", []),
    (40, 30): ("exchange.bind", [("ticket", "s"), ("destination", "ss"), ("source", "ss"),
                                 ("routing_key", "ss"), ("nowait", "b"), ("arguments", "F")]),
    (40, 31): ("exchange.bind-ok", []),
    (40, 40): ("exchange.unbind", [("ticket", "s"), ("destination", "ss"), ("source", "ss"),
                                   ("routing_key", "ss"), ("nowait", "b"), ("arguments", "F")]),
    (40, 51): ("exchange.unbind-ok", []),
    (50, 10): ("queue.declare", [("ticket", "s"), ("queue", "ss"), ("passive", "b"),
                                 ("durable", "b"), ("exclusive", "b"), ("auto_delete", "b"),
                                 ("nowait", "b"), ("arguments", "F")]),
    (50, 11): ("queue.declare-ok", [("queue", "ss"), ("message_count", "l"),
                                    ("consumer_count", "l")]),
    (50, 20): ("queue.bind", [("ticket", "s"), ("queue", "ss"), ("exchange", "ss"),
                              ("routing_key", "ss"), ("nowait", "b"), ("arguments", "F")]),
    (50, 21): ("queue.bind-ok", []),
    (50, 30): ("queue.purge", [("ticket", "s"), ("queue", "ss"), ("nowait", "b")]),
    (50, 31): ("queue.purge-ok", [("message_count", "l")]),
    (50, 40): ("queue.delete", [("ticket", "s"), ("queue", "ss"), ("if_unused", "b"),
                                ("if_empty", "b"), ("nowait", "b")]),
    (50, 41): ("queue.delete-ok", [("message_count", "l")]),
    (50, 50): ("queue.unbind", [("ticket", "s"), ("queue", "ss"), ("exchange", "ss"),
                                ("routing_key", "ss"), ("arguments", "F")]),
    (50, 51): ("queue.unbind-ok", []),
    (60, 10): ("basic.qos", [("prefetch_size", "l"), ("prefetch_count", "s"), ("global", "b")]),
    (60, 11): ("basic.qos-ok", []),
    (60, 20): ("basic.consume", [("ticket", "s"), ("queue", "ss"), ("consumer_tag", "ss"),
                                 ("no_local", "b"), ("no_ack", "b"), ("exclusive", "b"),
                                 ("nowait", "b"), ("arguments", "F")]),
    (60, 21): ("basic.consume-ok", [("consumer_tag", "ss")]),
    (60, 30): ("basic.cancel", [("consumer_tag", "ss"), ("nowait", "b")]),
    (60, 31): ("basic.cancel-ok", [("consumer_tag", "ss")]),
    (60, 40): ("basic.publish", [("ticket", "s"), ("exchange", "ss"), ("routing_key", "ss"),
                                 ("mandatory", "b"), ("immediate", "b")]),
    (60, 50): ("basic.return", [("reply_code", "s"), ("reply_text", "ss"), ("exchange", "ss"),
                                ("routing_key", "ss")]),
    (60, 60): ("basic.deliver", [("consumer_tag", "ss"), ("delivery_tag", "L"),
                                 ("redelivered", "b"), ("exchange", "ss"), ("routing_key", "ss")]),
    (60, 70): ("basic.get", [("ticket", "s"), ("queue", "ss"), ("no_ack", "b")]),
    (60, 71): ("basic.get-ok", [("delivery_tag", "L"), ("redelivered", "b"), ("exchange", "ss"),
                                ("routing_key", "ss"), ("message_count", "l")]),
    (60, 72): ("basic.get-empty", [("cluster_id", "ss")]),
    (60, 80): ("basic.ack", [("delivery_tag", "L"), ("multiple", "b")]),
    (60, 90): ("basic.reject", [("delivery_tag", "L"), ("requeue", "b")]),
    (60, 100): ("basic.recover-async", [("requeue", "b")]),
    (60, 110): ("basic.recover", [("requeue", "b")]),
    (60, 111): ("basic.recover-ok", []),
    (60, 120): ("basic.nack", [("delivery_tag", "L"), ("multiple", "b"), ("requeue", "b")]),
    (85, 10): ("confirm.select", [("nowait", "b")]),
    (85, 11): ("confirm.select-ok", []),
    (90, 10): ("tx.select", []),
    (90, 11): ("tx.select-ok", []),
    (90, 20): ("tx.commit", []),
    (90, 21): ("tx.commit-ok", []),
    (90, 30): ("tx.rollback", []),
    (90, 31): ("tx.rollback-ok", []),
}
METHOD_IDS = {name: ids for ids, (name, _) in METHODS.items()}
CONTENT_METHODS = {(60, 40), (60, 50), (60, 60), (60, 71)}

# Synchronous request -> expected reply.
REPLIES = {
    "connection.close": "connection.close-ok",
    "channel.open": "channel.open-ok",
    "channel.flow": "channel.flow-ok",
    "channel.close": "channel.close-ok",
    "exchange.declare": "exchange.declare-ok",
    "exchange.delete": "exchange.delete-ok",
    "exchange.bind": "exchange.bind-ok",
    "exchange.unbind": "exchange.unbind-ok",
    "queue.declare": "queue.declare-ok",
    "queue.bind": "queue.bind-ok",
    "queue.purge": "queue.purge-ok",
    "queue.delete": "queue.delete-ok",
    "queue.unbind": "queue.unbind-ok",
    "basic.qos": "basic.qos-ok",
    "basic.consume": "basic.consume-ok",
    "basic.cancel": "basic.cancel-ok",
    "basic.recover": "basic.recover-ok",
    "confirm.select": "confirm.select-ok",
    "tx.select": "tx.select-ok",
    "tx.commit": "tx.commit-ok",
    "tx.rollback": "tx.rollback-ok",
}

# Basic content properties in flag order (bit 15 first).
BASIC_PROPERTIES = [
    ("content_type", "ss"), ("content_encoding", "ss"), ("headers", "F"),
    ("delivery_mode", "o"), ("priority", "o"), ("correlation_id", "ss"),
    ("reply_to", "ss"), ("expiration", "ss"), ("message_id", "ss"),
    ("timestamp", "T"), ("type", "ss"), ("user_id", "ss"), ("app_id", "ss"),
    ("cluster_id", "ss"),
]


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------
class Tagged:
    """A field-table value with an explicit type tag and pre-encoded bytes.

    Lets tests put any tag on the wire, including ones the broker must refuse
    (e.g. Tagged(b'U', struct.pack('>h', 1))).
    """

    def __init__(self, tag, raw):
        self.tag = tag
        self.raw = raw


def enc_octet(v):
    return struct.pack(">B", v)


def enc_short(v):
    return struct.pack(">H", v)


def enc_long(v):
    return struct.pack(">I", v)


def enc_longlong(v):
    return struct.pack(">Q", v)


def enc_shortstr(v):
    if isinstance(v, str):
        v = v.encode("utf-8")
    if len(v) > 255:
        raise ValueError("shortstr too long")
    return struct.pack(">B", len(v)) + v


def enc_longstr(v):
    if isinstance(v, str):
        v = v.encode("utf-8")
    return struct.pack(">I", len(v)) + v


def enc_value(v):
    if isinstance(v, Tagged):
        return v.tag + v.raw
    if isinstance(v, bool):
        return b"t" + struct.pack(">B", 1 if v else 0)
    if isinstance(v, int):
        if -2 ** 31 <= v < 2 ** 31:
            return b"I" + struct.pack(">i", v)
        return b"l" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"d" + struct.pack(">d", v)
    if isinstance(v, str):
        return b"S" + enc_longstr(v)
    if isinstance(v, (bytes, bytearray)):
        return b"x" + enc_longstr(bytes(v))
    if isinstance(v, dict):
        return b"F" + enc_table(v)
    if isinstance(v, (list, tuple)):
        body = b"".join(enc_value(x) for x in v)
        return b"A" + struct.pack(">I", len(body)) + body
    if v is None:
        return b"V"
    raise TypeError("cannot encode %r" % (v,))


def enc_table_body(d):
    return b"".join(enc_shortstr(k) + enc_value(v) for k, v in (d or {}).items())


def enc_table(d):
    body = enc_table_body(d)
    return struct.pack(">I", len(body)) + body


def encode_fields(fields, values):
    """Encode method arguments (list of (name, type)) from a dict of values."""
    out = []
    bits = []

    def flush_bits():
        if bits:
            for i in range(0, len(bits), 8):
                byte = 0
                for j, flag in enumerate(bits[i:i + 8]):
                    if flag:
                        byte |= 1 << j
                out.append(struct.pack(">B", byte))
            del bits[:]

    for name, ftype in fields:
        v = values.get(name)
        if ftype == "b":
            bits.append(bool(v))
            continue
        flush_bits()
        if ftype == "o":
            out.append(enc_octet(v or 0))
        elif ftype == "s":
            out.append(enc_short(v or 0))
        elif ftype == "l":
            out.append(enc_long(v or 0))
        elif ftype in ("L", "T"):
            out.append(enc_longlong(v or 0))
        elif ftype == "ss":
            out.append(enc_shortstr(v or b""))
        elif ftype == "S":
            out.append(enc_longstr(v or b""))
        elif ftype == "F":
            if isinstance(v, (bytes, bytearray)):  # pre-encoded table
                out.append(bytes(v))
            else:
                out.append(enc_table(v or {}))
        else:
            raise ValueError(ftype)
    flush_bits()
    return b"".join(out)


def encode_method(name, **args):
    class_id, method_id = METHOD_IDS[name]
    fields = METHODS[(class_id, method_id)][1]
    unknown = set(args) - {f for f, _ in fields}
    if unknown:
        raise TypeError("%s has no fields %s" % (name, sorted(unknown)))
    return struct.pack(">HH", class_id, method_id) + encode_fields(fields, args)


def encode_frame(ftype, channel, payload, end=FRAME_END):
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + bytes([end])


def encode_content_header(body_size, properties=None, class_id=60):
    properties = properties or {}
    flags = 0
    values = []
    for i, (name, ftype) in enumerate(BASIC_PROPERTIES):
        if properties.get(name) is not None:
            flags |= 1 << (15 - i)
            values.append(encode_fields([(name, ftype)], {name: properties[name]}))
    unknown = set(properties) - {n for n, _ in BASIC_PROPERTIES}
    if unknown:
        raise TypeError("unknown properties %s" % sorted(unknown))
    return struct.pack(">HHQH", class_id, 0, body_size, flags) + b"".join(values)


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------
class DecodeError(Exception):
    pass


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0
        self._bits = None
        self._bitpos = 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise DecodeError("truncated")
        v = self.data[self.pos:self.pos + n]
        self.pos += n
        return v

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def shortstr(self):
        return self.take(self.unpack(">B")).decode("utf-8", "replace")

    def longstr(self):
        return self.take(self.unpack(">I"))

    def value(self):
        tag = self.take(1)
        simple = {b"t": ">B", b"b": ">b", b"B": ">B", b"s": ">h", b"u": ">H", b"I": ">i",
                  b"i": ">I", b"l": ">q", b"L": ">Q", b"f": ">f", b"d": ">d", b"T": ">Q"}
        if tag in simple:
            v = self.unpack(simple[tag])
            return bool(v) if tag == b"t" else v
        if tag == b"D":
            scale = self.unpack(">B")
            return ("decimal", scale, self.unpack(">i"))
        if tag == b"S":
            raw = self.longstr()
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return raw
        if tag == b"x":
            return self.longstr()
        if tag == b"F":
            return self.table()
        if tag == b"A":
            sub = Reader(self.take(self.unpack(">I")))
            out = []
            while sub.pos < len(sub.data):
                out.append(sub.value())
            return out
        if tag == b"V":
            return None
        raise DecodeError("unknown field tag %r" % tag)

    def table(self):
        sub = Reader(self.take(self.unpack(">I")))
        out = {}
        while sub.pos < len(sub.data):
            key = sub.shortstr()
            out[key] = sub.value()
        return out

    def field(self, ftype):
        if ftype == "b":
            if self._bits is None or self._bitpos >= 8:
                self._bits = self.unpack(">B")
                self._bitpos = 0
            v = bool(self._bits & (1 << self._bitpos))
            self._bitpos += 1
            return v
        self._bits = None
        if ftype == "o":
            return self.unpack(">B")
        if ftype == "s":
            return self.unpack(">H")
        if ftype == "l":
            return self.unpack(">I")
        if ftype in ("L", "T"):
            return self.unpack(">Q")
        if ftype == "ss":
            return self.shortstr()
        if ftype == "S":
            return self.longstr()
        if ftype == "F":
            return self.table()
        raise ValueError(ftype)


class Frame:
    def __init__(self, ftype, channel, payload):
        self.type = ftype
        self.channel = channel
        self.payload = payload

    @property
    def size(self):
        """Whole frame size on the wire, including the 8 octets of overhead."""
        return len(self.payload) + 8

    def __repr__(self):
        return "Frame(type=%d, channel=%d, %d octets)" % (self.type, self.channel, len(self.payload))


class Method:
    """A decoded method frame, plus its content if it carries one."""

    def __init__(self, channel, class_id, method_id, args):
        self.channel = channel
        self.class_id = class_id
        self.method_id = method_id
        self.args = args
        self.name = METHODS.get((class_id, method_id), ("%d/%d" % (class_id, method_id), []))[0]
        self.properties = None
        self.body = None
        self.body_frames = []

    def __getattr__(self, item):
        try:
            return self.__dict__["args"][item]
        except KeyError:
            raise AttributeError(item)

    def __repr__(self):
        extra = ""
        if self.body is not None:
            extra = " body=%r" % (self.body[:60],)
        return "<%s ch=%d %r%s>" % (self.name, self.channel, self.args, extra)


def decode_method(frame):
    r = Reader(frame.payload)
    class_id = r.unpack(">H")
    method_id = r.unpack(">H")
    sig = METHODS.get((class_id, method_id))
    args = {}
    if sig:
        for fname, ftype in sig[1]:
            args[fname] = r.field(ftype)
    return Method(frame.channel, class_id, method_id, args)


def decode_content_header(payload):
    r = Reader(payload)
    class_id = r.unpack(">H")
    r.unpack(">H")  # weight
    body_size = r.unpack(">Q")
    flags = r.unpack(">H")
    props = {}
    for i, (name, ftype) in enumerate(BASIC_PROPERTIES):
        if flags & (1 << (15 - i)):
            props[name] = r.field(ftype)
    return class_id, body_size, props


# ---------------------------------------------------------------------------
# Connection
# ---------------------------------------------------------------------------
class PeerClosed(Exception):
    """The broker closed the TCP connection (EOF or reset)."""


class ReadTimeout(Exception):
    pass


class UnexpectedClose(Exception):
    """A close arrived while the test expected something else."""

    def __init__(self, method):
        self.method = method
        self.reply_code = method.args.get("reply_code")
        super().__init__("%s %s %s" % (method.name, self.reply_code, method.args.get("reply_text")))


class CloseResult:
    """What wait_close() saw: kind is 'connection', 'channel' or 'eof'."""

    def __init__(self, kind, method=None):
        self.kind = kind
        self.method = method
        self.reply_code = method.reply_code if method is not None else None
        self.reply_text = method.reply_text if method is not None else None
        self.channel = method.channel if method is not None else None

    def __repr__(self):
        return "CloseResult(%s, %s, %r)" % (self.kind, self.reply_code, self.reply_text)


CLIENT_CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
}


class RawConnection:
    def __init__(self, host, port, timeout=5.0):
        self.host = host
        self.port = port
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.eof = False
        self.heartbeats_received = 0
        self.start = None
        self.tune = None
        self.channel_max = None
        self.frame_max = 131072
        self.heartbeat = 0
        self.pending = []  # methods read while waiting for something else

    # -- low level ---------------------------------------------------------
    def send(self, data):
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            # The broker already closed on us; the test reads what it said.
            pass

    def send_frame(self, ftype, channel, payload, end=FRAME_END):
        self.send(encode_frame(ftype, channel, payload, end))

    def send_method(self, channel, name, **args):
        self.send_frame(FRAME_METHOD, channel, encode_method(name, **args))

    def send_heartbeat(self, channel=0):
        self.send_frame(FRAME_HEARTBEAT, channel, b"")

    def content_frames(self, channel, body, properties=None, frame_max=None):
        frame_max = frame_max or self.frame_max or 131072
        out = [encode_frame(FRAME_HEADER, channel, encode_content_header(len(body), properties))]
        chunk = frame_max - 8
        for i in range(0, len(body), chunk):
            out.append(encode_frame(FRAME_BODY, channel, body[i:i + chunk]))
        return b"".join(out)

    def publish(self, channel, exchange, routing_key, body=b"", properties=None,
                mandatory=False, immediate=False):
        if isinstance(body, str):
            body = body.encode()
        data = encode_frame(FRAME_METHOD, channel,
                            encode_method("basic.publish", exchange=exchange,
                                          routing_key=routing_key, mandatory=mandatory,
                                          immediate=immediate))
        self.send(data + self.content_frames(channel, body, properties))

    def _fill(self, deadline):
        if self.eof:
            raise PeerClosed("connection closed by broker")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ReadTimeout("no data from broker")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise ReadTimeout("no data from broker")
        except (ConnectionResetError, ConnectionAbortedError):
            data = b""
        if not data:
            self.eof = True
            raise PeerClosed("connection closed by broker")
        self.buf += data

    def recv_exact(self, n, timeout=5.0):
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            self._fill(deadline)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_until_eof(self, timeout=5.0):
        """Read everything until the broker closes; returns the bytes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._fill(deadline)
            except PeerClosed:
                out, self.buf = self.buf, b""
                return out

    def read_frame(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        while len(self.buf) < 7:
            self._fill(deadline)
        ftype, channel, size = struct.unpack(">BHI", self.buf[:7])
        while len(self.buf) < 8 + size:
            self._fill(deadline)
        payload = self.buf[7:7 + size]
        end = self.buf[7 + size]
        self.buf = self.buf[8 + size:]
        if end != FRAME_END:
            raise DecodeError("bad frame end 0x%02x from broker" % end)
        return Frame(ftype, channel, payload)

    def read_method(self, timeout=5.0):
        """Next method (with its content, if any); heartbeats are counted and skipped."""
        if self.pending:
            return self.pending.pop(0)
        deadline = time.monotonic() + timeout
        while True:
            frame = self.read_frame(max(0.0, deadline - time.monotonic()))
            if frame.type == FRAME_HEARTBEAT:
                self.heartbeats_received += 1
                continue
            if frame.type != FRAME_METHOD:
                raise DecodeError("expected a method frame, got %r" % frame)
            m = decode_method(frame)
            if (m.class_id, m.method_id) in CONTENT_METHODS:
                hdr = self.read_frame(max(0.0, deadline - time.monotonic()))
                if hdr.type != FRAME_HEADER:
                    raise DecodeError("expected content header, got %r" % hdr)
                _, size, props = decode_content_header(hdr.payload)
                m.properties = props
                body = b""
                while len(body) < size:
                    bf = self.read_frame(max(0.0, deadline - time.monotonic()))
                    if bf.type != FRAME_BODY:
                        raise DecodeError("expected body frame, got %r" % bf)
                    m.body_frames.append(bf)
                    body += bf.payload
                m.body = body
            return m

    def expect(self, name, channel=None, timeout=5.0):
        """Read methods until `name` arrives; closes raise UnexpectedClose.

        Other methods (deliveries, acks...) met on the way are kept in
        self.pending for a later read_method().
        """
        skipped = []
        deadline = time.monotonic() + timeout
        try:
            while True:
                m = self.read_method(max(0.0, deadline - time.monotonic()))
                if m.name == name and (channel is None or m.channel == channel):
                    return m
                if m.name in ("connection.close", "channel.close"):
                    if m.name == "connection.close":
                        self.send_method(0, "connection.close-ok")
                    else:
                        self.send_method(m.channel, "channel.close-ok")
                    raise UnexpectedClose(m)
                skipped.append(m)
        finally:
            self.pending = skipped + self.pending

    def rpc(self, channel, name, timeout=5.0, **args):
        self.send_method(channel, name, **args)
        return self.expect(REPLIES[name], channel=channel, timeout=timeout)

    def wait_close(self, timeout=5.0):
        """Read until connection.close, channel.close or EOF.

        A connection.close is answered with close-ok, a channel.close with
        channel.close-ok, as a well-behaved client does.
        """
        deadline = time.monotonic() + timeout
        self.pending = [m for m in self.pending if m.name in ("connection.close", "channel.close")]
        while True:
            try:
                m = self.read_method(max(0.0, deadline - time.monotonic()))
            except PeerClosed:
                return CloseResult("eof")
            except DecodeError:
                continue
            if m.name == "connection.close":
                self.send_method(0, "connection.close-ok")
                return CloseResult("connection", m)
            if m.name == "channel.close":
                self.send_method(m.channel, "channel.close-ok")
                return CloseResult("channel", m)

    def assert_eof(self, timeout=5.0):
        """After a close the broker must drop the socket."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.read_frame(max(0.0, deadline - time.monotonic()))
            except PeerClosed:
                return
            except ReadTimeout:
                raise AssertionError("broker did not close the socket within %.1fs" % timeout)

    # -- handshake ------------------------------------------------------------
    def handshake(self, user="guest", password="guest", vhost="/", mechanism="PLAIN",
                  channel_max=None, frame_max=None, heartbeat=0, capabilities=None,
                  open_vhost=True, timeout=5.0, client_properties=None):
        self.send(PROTOCOL_HEADER)
        self.start = self.expect("connection.start", timeout=timeout)
        caps = CLIENT_CAPABILITIES if capabilities is None else capabilities
        props = {"product": "sluice-tests-raw", "version": "0", "capabilities": caps}
        props.update(client_properties or {})
        if mechanism == "PLAIN":
            response = b"\x00" + user.encode() + b"\x00" + password.encode()
        elif mechanism == "AMQPLAIN":
            response = enc_table_body({"LOGIN": user, "PASSWORD": password})
        else:
            raise ValueError(mechanism)
        self.send_method(0, "connection.start-ok", client_properties=props, mechanism=mechanism,
                         response=response, locale="en_US")
        self.tune = self.expect("connection.tune", timeout=timeout)

        def pick(client, server):
            if client is None:
                return server
            return client

        self.channel_max = pick(channel_max, self.tune.channel_max)
        self.frame_max = pick(frame_max, self.tune.frame_max)
        self.heartbeat = pick(heartbeat, self.tune.heartbeat)
        self.send_method(0, "connection.tune-ok", channel_max=self.channel_max,
                         frame_max=self.frame_max, heartbeat=self.heartbeat)
        if open_vhost:
            self.send_method(0, "connection.open", virtual_host=vhost)
            self.expect("connection.open-ok", timeout=timeout)
        return self

    def open_channel(self, channel=1):
        return self.rpc(channel, "channel.open")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
