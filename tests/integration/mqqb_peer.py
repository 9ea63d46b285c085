"""A Windows queue manager's sending side of MS-MQQB, written from the specifications
(MS-MQQB 2.2 and 3.1, MS-MQMQ 2.2.19-2.2.20), not from Sluice's C code: it opens a session
(EstablishConnection, ConnectionParameters), sends UserMessage packets (express, recoverable,
transactional), and reads what the acceptor sends back (SessionAck packets, OrderAck and
FinalAck UserMessages). Little-endian throughout (MS-MQQB 2.2).
"""

import socket
import struct
import time
import uuid

SIGNATURE = 0x524F494C
BF_IN, BF_SH = 0x0008, 0x0010
PT_SESSION_ACK, PT_ESTABLISH, PT_PARAMS = 1, 2, 3
CLASS_ORDER_ACK = 0x00FF
CLASS_NACK_BAD_DST_Q = 0x8000


def wstr(s):
    """A NUL-terminated UTF-16LE string."""
    return s.encode("utf-16-le") + b"\0\0"


def pad4(b, start=0):
    return b + b"\0" * (-(start + len(b)) % 4)


def base_header(flags, size, ttrq=0xFFFFFFFF, reserved=0):
    return struct.pack("<BBHIII", 0x10, reserved, flags, SIGNATURE, size, ttrq)


def establish_request(client_guid, server_guid=b"\0" * 16, timestamp=12345, os_flags=0x0310):
    hdr = client_guid + server_guid + struct.pack("<IHH", timestamp, os_flags, 0) + b"\x5a" * 512
    return base_header(BF_IN | 3, 572) + struct.pack("<HH", 0, PT_ESTABLISH) + hdr


def params_packet(rec_ack_timeout=500, ack_timeout=120000, window=64):
    return base_header(BF_IN | 3, 32) + struct.pack("<HH", 0, PT_PARAMS) + \
        struct.pack("<IIHH", rec_ack_timeout, ack_timeout, 0, window)


def session_ack_packet(ack_seq, user_seq=0, window=64):
    return base_header(BF_IN | BF_SH | 3, 36) + struct.pack("<HH", 0, PT_SESSION_ACK) + \
        struct.pack("<HHIHHHH", ack_seq, 0, 0, user_seq, 0, window, 0)


def direct_name(fmt):
    """DirectQueueFormatName: Count (bytes, NUL included) and the UTF-16 name."""
    s = wstr(fmt)
    return struct.pack("<H", len(s)) + s


def user_message(source_guid, dest, body=b"", label=None, recoverable=False, tx=None,
                 priority=3, message_id=1, correlation=b"\0" * 20, app_tag=0, body_type=0x1011,
                 response=None, ext=b"", ttbr=0xFFFFFFFF, ttrq=0xFFFFFFFF, sent_time=None,
                 session=None, journal=False, dead_letter=False, privacy=0):
    """A UserMessage packet (MS-MQMQ 2.2.20). tx = (seq_id, seq_no, prev_no) makes it
    transactional (recoverable, priority 0); session = (user_seq, rec_seq) appends a
    SessionHeader."""
    if sent_time is None:
        sent_time = int(time.time())
    dm = 1 if (recoverable or tx) else 0
    flags = dm << 5 | 7 << 10 | 1 << 21  # direct destination, MessagePropertiesHeader
    if journal:
        flags |= 1 << 9
    if dead_letter:
        flags |= 1 << 8
    if response is not None:
        flags |= 7 << 16
    if tx:
        flags |= 1 << 20
        priority = 0
    uh = source_guid + b"\0" * 16 + struct.pack("<IIII", ttbr, sent_time, message_id, flags)
    uh = pad4(uh + direct_name(dest), 16)
    if response is not None:
        uh = pad4(uh + direct_name(response), 16)
    th = b""
    if tx:
        seq_id, seq_no, prev_no = tx
        th = struct.pack("<IIIII", 0x4 | 0x8, seq_id & 0xFFFFFFFF, seq_id >> 32, seq_no, prev_no)
    lb = wstr(label) if label is not None else b""
    mp = struct.pack("<BBH", 0, len(lb) // 2, 0) + correlation + \
        struct.pack("<IIIIIIII", body_type, app_tag, len(body), len(body), privacy, 0,
                    0x6801 if privacy else 0, len(ext)) + \
        lb + ext + body
    mp = pad4(mp)
    rest = uh + th + mp
    bflags = priority & 7
    if session is not None:
        bflags |= BF_SH
    pkt = base_header(bflags, 16 + len(rest), ttrq) + rest
    if session is not None:
        pkt += struct.pack("<HHIHHHH", 0, 0, 0, session[0], session[1], 64, 0)
    return pkt


class Packet:
    pass


def parse(pkt):
    """What the acceptor sent: .kind 'establish', 'params', 'session_ack' or 'user'."""
    p = Packet()
    _ver, _rsv, flags, sig, size, _ttrq = struct.unpack_from("<BBHIII", pkt)
    assert sig == SIGNATURE, "bad signature"
    p.flags, p.size = flags, size
    if flags & BF_IN:
        _r, iflags = struct.unpack_from("<HH", pkt, 16)
        p.iflags = iflags
        pt = iflags & 0xF
        p.refused = bool(iflags & 0x10)
        if pt == PT_ESTABLISH:
            p.kind = "establish"
            p.client_guid, p.server_guid = pkt[20:36], pkt[36:52]
            p.timestamp, p.os_flags, _ = struct.unpack_from("<IHH", pkt, 52)
            p.padding = pkt[60:572]
        elif pt == PT_PARAMS:
            p.kind = "params"
            p.rec_ack_timeout, p.ack_timeout, _, p.window = struct.unpack_from("<IIHH", pkt, 20)
        elif pt == PT_SESSION_ACK:
            p.kind = "session_ack"
            (p.ack_seq, p.rec_ack_seq, p.rec_ack_flags, p.user_seq, p.rec_seq, p.window,
             _) = struct.unpack_from("<HHIHHHH", pkt, 20)
        else:
            raise AssertionError("unknown internal packet type %d" % pt)
        return p
    p.kind = "user"
    p.source_guid = pkt[16:32]
    _ttbr, _sent, p.message_id, uflags = struct.unpack_from("<IIII", pkt, 48)
    assert (uflags >> 10) & 7 == 7, "order queue is addressed by a direct format name"
    count = struct.unpack_from("<H", pkt, 64)[0]
    p.dest = pkt[66:66 + count - 2].decode("utf-16-le")
    off = 64 + 2 + count
    off += -off % 4
    mp = pkt[off:]
    _f, label_len, p.msg_class = struct.unpack_from("<BBH", mp)
    body_size = struct.unpack_from("<I", mp, 32)[0]
    p.label = mp[56:56 + label_len * 2 - 2].decode("utf-16-le")
    p.body = mp[56 + label_len * 2:56 + label_len * 2 + body_size]
    o, t, p.seq_no, p.prev_no = struct.unpack_from("<IIII", p.body)
    p.seq_id = t << 32 | o
    if p.msg_class != CLASS_ORDER_ACK:
        p.acked_source = p.body[16:32]
        p.acked_message_id = struct.unpack_from("<I", p.body, 32)[0]
    return p


class Sender:
    """One session from a simulated Windows queue manager."""

    def __init__(self, host, port, guid=None, timeout=5.0):
        self.guid = guid or uuid.uuid4().bytes
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.sent = 0       # UserMessage packets sent on this session
        self.rec_sent = 0   # recoverable ones
        self.rec_acked = set()
        self.received = 0   # UserMessage packets received (order acks)
        self.order_acks = []  # (seq_id, seq_no)
        self.order_acked = {}  # seq_id -> highest seq_no order-acked
        self.final_acks = []
        self.acks = []
        self.closed = False

    def establish(self, window=64, rec_ack_timeout=500, server_guid=b"\0" * 16):
        self.sock.sendall(establish_request(self.guid, server_guid))
        ec = parse(self.read_packet())
        assert ec.kind == "establish"
        self.server_guid = ec.server_guid
        if ec.refused:
            return ec, None
        self.sock.sendall(params_packet(rec_ack_timeout=rec_ack_timeout, window=window))
        cp = parse(self.read_packet())
        assert cp.kind == "params"
        self.window = cp.window
        return ec, cp

    def read_packet(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 16:
                flags, size = struct.unpack_from("<H", self.buf, 2)[0], \
                    struct.unpack_from("<I", self.buf, 8)[0]
                total = size + (16 if (flags & BF_SH) and not (flags & BF_IN) else 0)
                if len(self.buf) >= total:
                    pkt, self.buf = self.buf[:total], self.buf[total:]
                    return pkt
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no packet from the acceptor")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                self.closed = True
                raise EOFError("session closed by the acceptor")
            self.buf += data

    def send(self, dest, body=b"", **kw):
        recoverable = kw.get("recoverable") or kw.get("tx")
        self.sent += 1
        if recoverable:
            self.rec_sent += 1
        kw.setdefault("message_id", self.sent)
        self.sock.sendall(user_message(self.guid, dest, body, **kw))
        return self.rec_sent if recoverable else None

    def pump(self, timeout=5.0):
        """Read one packet and book it."""
        p = parse(self.read_packet(timeout))
        if p.kind == "session_ack":
            self.acks.append(p)
            for k in range(32):
                if p.rec_ack_flags >> k & 1:
                    self.rec_acked.add(p.rec_ack_seq + k)
        elif p.kind == "user":
            self.received += 1
            if p.msg_class == CLASS_ORDER_ACK:
                self.order_acks.append((p.seq_id, p.seq_no))
                if p.seq_no > self.order_acked.get(p.seq_id, 0):
                    self.order_acked[p.seq_id] = p.seq_no
            else:
                self.final_acks.append(p)
            # acknowledge it as a Windows sender would (session ack by count)
            self.sock.sendall(session_ack_packet(self.received))
        return p

    def wait(self, pred, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("condition not met")
            self.pump(left)

    def last_order_ack(self, seq_id):
        return self.order_acked.get(seq_id, 0)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
