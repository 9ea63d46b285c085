"""A Windows queue manager's two sides of MS-MQQB, written from the specifications
(MS-MQQB 2.2 and 3.1, MS-MQMQ 2.2.19-2.2.20), not from Sluice's C code.

Sender: opens a session (EstablishConnection, ConnectionParameters), sends UserMessage
packets (express, recoverable, transactional), and reads what the acceptor sends back
(SessionAck packets, OrderAck and FinalAck UserMessages).

Receiver: accepts sessions on a port of its own, stores the messages that arrive in its
queues and enforces the receiver's rules of MS-MQQB 3.1.5.8.x as Windows does: per
(source queue manager, TxSequenceID) the last accepted TxSequenceNumber L; a number <= L is
a duplicate (dropped, not stored), one whose TxPreviousSequenceNumber is above L is out of
order (dropped, not acknowledged); each accepted transactional message is order-acked to
the sender's order queue, recoverable messages get their SessionAck bit, every packet is
counted. It can drop a session after a number of messages (a network failure mid-window),
or be down (hold: every session closed at once, as when the machine is unreachable).

Administration acknowledgements (MS-MQQB 1.3.5.2, 3.1.7.15; classes MS-MQMQ 2.2.18.1.6 and
MC-MQAC MQMSGCLASS; request flags MS-MQMQ 2.2.19.3 MessagePropertiesHeader.Flags, as
PROPID_M_ACKNOWLEDGE): a sender asks with ack_flags and names an admin queue; the receiving
queue manager sends an ordinary UserMessage of an acknowledgement class to that queue, its
CorrelationID the original's message id (source queue manager GUID + MessageID number).
admin_ack() reads one as a Windows application reading its admin queue would.
Little-endian throughout (MS-MQQB 2.2).
"""

import socket
import struct
import threading
import time
import uuid

SIGNATURE = 0x524F494C
BF_IN, BF_SH = 0x0008, 0x0010
PT_SESSION_ACK, PT_ESTABLISH, PT_PARAMS = 1, 2, 3
CLASS_ORDER_ACK = 0x00FF
CLASS_ACK_REACH_QUEUE = 0x0002
CLASS_ACK_RECEIVE = 0x4000
CLASS_NACK_BAD_DST_Q = 0x8000
CLASS_NACK_PURGED = 0x8001
CLASS_NACK_REACH_QUEUE_TIMEOUT = 0x8002
CLASS_NACK_Q_EXCEED_QUOTA = 0x8003
CLASS_NACK_ACCESS_DENIED = 0x8004
CLASS_NACK_BAD_ENCRYPTION = 0x8007
CLASS_NACK_Q_DELETED = 0xC000
CLASS_NACK_Q_PURGED = 0xC001
CLASS_NACK_RECEIVE_TIMEOUT = 0xC002
CLASS_NACK_RECEIVE_REJECTED = 0xC004

# MessagePropertiesHeader.Flags: which acknowledgements the sender asks for
ACK_POS_ARRIVAL, ACK_POS_RECEIVE, ACK_NEG_ARRIVAL, ACK_NEG_RECEIVE = 0x01, 0x02, 0x04, 0x08
# the combinations PROPID_M_ACKNOWLEDGE names
ACK_NACK_REACH_QUEUE = ACK_NEG_ARRIVAL
ACK_FULL_REACH_QUEUE = ACK_NEG_ARRIVAL | ACK_POS_ARRIVAL
ACK_NACK_RECEIVE = ACK_NEG_ARRIVAL | ACK_NEG_RECEIVE
ACK_FULL_RECEIVE = ACK_NEG_ARRIVAL | ACK_NEG_RECEIVE | ACK_POS_RECEIVE


def is_admin_ack_class(c):
    """Positive arrival / receive, or a negative class (0x8000 arrival, 0xC000 receive)."""
    return c in (CLASS_ACK_REACH_QUEUE, CLASS_ACK_RECEIVE) or c & 0xFF00 in (0x8000, 0xC000)


def admin_ack(m):
    """An acknowledgement a Receiver stored (a parsed Message): (class, the acknowledged
    message's source queue manager GUID, its MessageID number), from MessageClass and the
    20-byte CorrelationID (a message id: GUID then a little-endian 32-bit number)."""
    assert is_admin_ack_class(m.msg_class), "class 0x%04x is no acknowledgement" % m.msg_class
    return m.msg_class, bytes(m.correlation[:16]), struct.unpack_from("<I", m.correlation, 16)[0]


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
                 session=None, journal=False, dead_letter=False, privacy=0, msg_class=0,
                 admin=None, ack_flags=0):
    """A UserMessage packet (MS-MQMQ 2.2.20). tx = (seq_id, seq_no, prev_no) makes it
    transactional (recoverable, priority 0); session = (user_seq, rec_seq) appends a
    SessionHeader; admin and response are direct format names (without "DIRECT=")."""
    if sent_time is None:
        sent_time = int(time.time())
    dm = 1 if (recoverable or tx) else 0
    flags = dm << 5 | 7 << 10 | 1 << 21  # direct destination, MessagePropertiesHeader
    if journal:
        flags |= 1 << 9
    if dead_letter:
        flags |= 1 << 8
    if admin is not None:
        flags |= 7 << 13
    if response is not None:
        flags |= 7 << 16
    if tx:
        flags |= 1 << 20
        priority = 0
    uh = source_guid + b"\0" * 16 + struct.pack("<IIII", ttbr, sent_time, message_id, flags)
    uh = pad4(uh + direct_name(dest), 16)
    if admin is not None:
        uh = pad4(uh + direct_name(admin), 16)
    if response is not None:
        uh = pad4(uh + direct_name(response), 16)
    th = b""
    if tx:
        seq_id, seq_no, prev_no = tx
        th = struct.pack("<IIIII", 0x4 | 0x8, seq_id & 0xFFFFFFFF, seq_id >> 32, seq_no, prev_no)
    lb = wstr(label) if label is not None else b""
    mp = struct.pack("<BBH", ack_flags, len(lb) // 2, msg_class) + correlation + \
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

    def __init__(self, host, port, guid=None, timeout=5.0, source=None):
        self.guid = guid or uuid.uuid4().bytes
        # source: the local address to connect from (msmq.allowed_senders tests)
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
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


class Message:
    pass


def guid_text(g):
    """A GUID as MS-DTYP 2.3.4.3 writes it (the first three fields little-endian)."""
    return str(uuid.UUID(bytes_le=bytes(g)))


def queue_format(pkt, off, qtype):
    """One queue format name of UserHeader (MS-MQMQ 2.2.18.1.5) at off: (text, next off).
    Text as a format name (DIRECT=..., PUBLIC=guid, PRIVATE=guid\\id), '' for none."""
    if qtype == 0:
        return "", off
    if qtype == 1:
        return "SAME_AS_ADMIN", off
    if qtype in (2, 3, 4):  # PrivateQueueFormatNameId: the host is implied
        return "PRIVATE_ID=%08x" % struct.unpack_from("<I", pkt, off)[0], off + 4
    if qtype == 5:  # PublicQueueFormatName: the queue's GUID
        return "PUBLIC=" + guid_text(pkt[off:off + 16]), off + 16
    if qtype == 6:  # PrivateQueueFormatName: the machine's GUID and the queue's number
        off += -off % 4
        pid = struct.unpack_from("<I", pkt, off + 16)[0]
        return "PRIVATE=%s\\%08x" % (guid_text(pkt[off:off + 16]), pid), off + 20
    assert qtype == 7, "queue format type %d" % qtype
    count = struct.unpack_from("<H", pkt, off)[0]
    name = pkt[off + 2:off + 2 + count - 2].decode("utf-16-le")
    off += 2 + count
    return "DIRECT=" + name, off + (-off % 4)


def parse_user(pkt):
    """A whole UserMessage (direct destination) as the receiver reads it, every property
    of the UserHeader, TransactionHeader and MessagePropertiesHeader (MS-MQMQ 2.2.19-20)."""
    m = Message()
    _ver, _rsv, bflags, sig, size, m.ttrq = struct.unpack_from("<BBHIII", pkt)
    assert sig == SIGNATURE and not bflags & BF_IN
    m.priority = bflags & 7
    m.source_guid = pkt[16:32]
    m.ttbr, m.sent_time, m.message_id, uflags = struct.unpack_from("<IIII", pkt, 48)
    m.recoverable = bool((uflags >> 5) & 3)
    m.journal = bool(uflags & (1 << 9))
    m.dead_letter = bool(uflags & (1 << 8))
    assert (uflags >> 10) & 7 == 7, "destination by a direct format name"
    dest, off = queue_format(pkt, 64, 7)
    m.dest = dest[len("DIRECT="):]
    m.admin, off = queue_format(pkt, off, (uflags >> 13) & 7)
    m.response, off = queue_format(pkt, off, (uflags >> 16) & 7)
    assert not uflags & (1 << 19), "no SecurityHeader expected"
    m.tx = None
    if uflags & (1 << 20):
        m.tx_flags, ordinal, ts, seq_no, prev_no = struct.unpack_from("<IIIII", pkt, off)
        m.tx = (ts << 32 | ordinal, seq_no, prev_no)
        off += 20
    m.ack_flags, label_len, m.msg_class = struct.unpack_from("<BBH", pkt, off)
    m.correlation = pkt[off + 4:off + 24]
    (m.body_type, m.app_tag, body_size, _alloc, _priv, _hash, _enc,
     ext_size) = struct.unpack_from("<IIIIIIII", pkt, off + 24)
    lb = off + 56
    m.label = pkt[lb:lb + label_len * 2 - 2].decode("utf-16-le") if label_len else None
    m.ext = pkt[lb + label_len * 2:lb + label_len * 2 + ext_size]
    b = lb + label_len * 2 + ext_size
    m.body = pkt[b:b + body_size]
    m.session = None
    if bflags & BF_SH:
        m.session = struct.unpack_from("<HHIHHHH", pkt, size)
    return m


def order_ack(own_guid, sender_addr, seq_id, seq_no, message_id=1):
    """An OrderAck (MS-MQQB 2.2.4): an express UserMessage to the sender's order queue."""
    body = struct.pack("<IIII", seq_id & 0xFFFFFFFF, seq_id >> 32, seq_no, seq_no - 1) + \
        b"\0" * 20
    return user_message(own_guid, "TCP:%s\\PRIVATE$\\order_queue$" % sender_addr, body,
                        label="QM Ordering Ack", body_type=0, message_id=message_id,
                        msg_class=CLASS_ORDER_ACK, priority=0)


class Receiver:
    """A Windows queue manager receiving: one listening socket, sessions on a thread each.
    Its state (queues, last accepted numbers) outlives every session, as the real one's
    does; every field is read under .lock."""

    def __init__(self, host="127.0.0.1"):
        self.guid = uuid.uuid4().bytes
        self.lsock = socket.socket()
        self.lsock.bind((host, 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.queues = {}       # destination queue name (lower case) -> [Message]
        self.last = {}         # (source guid, seq id) -> last accepted TxSequenceNumber
        self.duplicates = 0
        self.out_of_order = 0
        # strict: Sluice's receiver rule (src/mqqb/mqqb.h, mqqb_tx_check, issue 43) rather
        # than the specification's (3.1.5.8.6: previous <= last): a message moves the
        # sequence only to last + 1, or past a gap when its previous number is last. A sender
        # that passes it passes a Windows receiver too. jumps counts the refused ones.
        self.strict = True
        self.jumps = 0
        self.sessions = 0
        self.drop_after = None  # close the next session after this many UserMessages
        self.send_order_acks = True  # False: accept transactional messages, never order-ack
        self.hold = False  # True: down (every session closed as soon as it is accepted)
        self.errors = []
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def queue(self, name):
        with self.lock:
            return list(self.queues.get(name.lower(), []))

    def _accept(self):
        while not self.stopped:
            try:
                s, addr = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(s, addr), daemon=True).start()

    def close(self):
        self.stopped = True
        try:
            self.lsock.close()
        except OSError:
            pass

    @staticmethod
    def _read(s, buf):
        while True:
            if len(buf) >= 16:
                flags = struct.unpack_from("<H", buf, 2)[0]
                size = struct.unpack_from("<I", buf, 8)[0]
                total = size + (16 if (flags & BF_SH) and not (flags & BF_IN) else 0)
                if len(buf) >= total:
                    return buf[:total], buf[total:]
            data = s.recv(65536)
            if not data:
                raise EOFError
            buf += data

    def _session(self, s, addr):
        if self.hold:
            s.close()
            return
        try:
            self._run(s, addr)
        except (EOFError, OSError):
            pass
        except Exception as e:  # noqa: BLE001 - a test reads it
            with self.lock:
                self.errors.append(repr(e))
        finally:
            s.close()

    def _run(self, s, addr):
        s.settimeout(30)
        buf = b""
        pkt, buf = self._read(s, buf)
        ec = parse(pkt)
        assert ec.kind == "establish", ec.kind
        # the acceptor's reply: our GUID, the client's echoed, 0x5A padding (MS-MQQB 2.2.3)
        s.sendall(base_header(BF_IN | 3, 572, reserved=0x5A) + struct.pack("<HH", 0, PT_ESTABLISH)
                  + ec.client_guid + self.guid + struct.pack("<IHH", ec.timestamp, ec.os_flags, 0)
                  + b"\x5a" * 512)
        pkt, buf = self._read(s, buf)
        cp = parse(pkt)
        assert cp.kind == "params", cp.kind
        s.sendall(params_packet(cp.rec_ack_timeout, cp.ack_timeout, cp.window))
        with self.lock:
            self.sessions += 1
            drop = self.drop_after
            self.drop_after = None
        recv = 0        # UserMessage packets received
        rec_recv = 0    # recoverable ones
        sent = 0        # UserMessage packets sent (order acks)
        while True:
            pkt, buf = self._read(s, buf)
            flags = struct.unpack_from("<H", pkt, 2)[0]
            if flags & BF_IN:
                p = parse(pkt)
                assert p.kind == "session_ack", p.kind
                assert (sent - p.ack_seq) & 0xFFFF < 0x8000, "acks packets never sent"
                continue
            m = parse_user(pkt)
            recv += 1
            if m.session is not None:
                assert m.session[3] == recv & 0xFFFF, "UserMsgSequenceNumber"
            if drop is not None and recv > drop:
                return  # the network failed mid-window: nothing of this one was taken
            out = b""
            rec_ack = None
            if m.recoverable:
                rec_recv += 1
                rec_ack = rec_recv
            name = m.dest.rsplit("\\", 1)[-1].lower()
            with self.lock:
                if m.tx is None:
                    self.queues.setdefault(name, []).append(m)
                else:
                    seq_id, no, prev = m.tx
                    key = (m.source_guid, seq_id)
                    last = self.last.get(key, 0)
                    if no <= last:
                        self.duplicates += 1
                        ack_no = last
                    elif prev <= last and self.strict and no != last + 1 and prev != last:
                        self.jumps += 1
                        self.out_of_order += 1
                        self.errors.append("jump: %d (previous %d) after %d" % (no, prev, last))
                        ack_no = last or None  # refused; the last accepted number goes back
                    elif prev <= last:
                        self.queues.setdefault(name, []).append(m)
                        self.last[key] = no
                        ack_no = no
                    else:
                        self.out_of_order += 1
                        ack_no = None
                        rec_ack = None  # refused: not acknowledged
                    if ack_no and self.send_order_acks:
                        sent += 1
                        out += order_ack(self.guid, addr[0], seq_id, ack_no, message_id=sent)
            sess = struct.pack("<HHIHHHH", recv & 0xFFFF, (rec_ack or 0) & 0xFFFF,
                               1 if rec_ack else 0, sent & 0xFFFF, 0, 64, 0)
            out += base_header(BF_IN | BF_SH | 3, 36) + struct.pack("<HH", 0, PT_SESSION_ACK) + sess
            s.sendall(out)
