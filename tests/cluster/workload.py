"""workload.py - the confirmed load run against the cluster while faults happen, recorded as a
Jepsen history.

Role: clients (py-amqp, each a thread with its own connection, made inside the current leader's
network namespace on 127.0.0.1) doing operations whose outcome the checker (checker.py) can
judge afterwards. Every operation is recorded as JSON lines: `invoke` before, then `ok` (the
broker said yes: a confirm, a commit-ok, a purge-ok...), `fail` (it surely did not happen) or
`info` (unknown: the connection died or timed out in between), with the message ids it is
about. Nothing is ever retried under the same id: a retry is a new message.

Processes (per period k; the queues are named with k so each check starts from empty queues):
  P-work   publisher with confirms to `work-k`, which C-work consumes
  P-keep   publisher with confirms to `keep-k`, never consumed before the drain
  T        transactional publisher to `tx-k`: batches of 4, then tx.commit
  L        publisher with confirms to the remote node's `inbox-k` through the outgoing queue
  C-work   consumer of `work-k`: basic.get, then the acks of a batch in a transaction
           (tx.commit-ok makes the acks definite: such a message must never come back)
  A        admin: publishes 3 to `purge-k` with confirms, purges it (the purge covers them),
           publishes 1 more; declares `del-k-N`, publishes 2, deletes it
  SA, SB   publishers with confirms into the streams `stream-k-0` and `stream-k-1`
           (x-queue-type stream), SC into `stream-k-2` (retention: it deletes its oldest
           segments), SLk into the soak's long stream `long-N` (several periods long)
  SP       the stream protocol's named publisher into `stream-k-0` (deduplicated retries)
  SR, SQ   live readers of `stream-k-0` (`s-deliver`), over AMQP 0-9-1 and the stream protocol
  SD       declares streams `sd-k-N` during the faults, two confirmed messages into each
Message ids are `PROC:k:SEQ`; the body is the id. The stream publishers are the exception to
"never retried": they send an unconfirmed message again under the same id (StreamPublisher).

Invariant: an `ok` is only recorded after the broker's reply came; an operation that raised
before it is `info` unless nothing was sent (then it is not recorded at all).
"""

import hashlib
import json
import os
import re
import select
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import amqp  # noqa: E402
import streamraw  # noqa: E402 (RabbitMQ's stream protocol: the tests' raw client)

CONFIRM_TIMEOUT = 4.0


class History:
    """Thread-safe append-only list of operations, mirrored to a JSON-lines file."""

    def __init__(self, path=None):
        self.lock = threading.Lock()
        self.ops = []
        self.t0 = time.monotonic()
        self.f = open(path, "a") if path else None

    def now(self):
        return round(time.monotonic() - self.t0, 4)

    def add(self, proc, type_, f, **kw):
        op = {"t": self.now(), "p": proc, "type": type_, "f": f}
        op.update(kw)
        with self.lock:
            op["i"] = len(self.ops)
            self.ops.append(op)
            if self.f:
                self.f.write(json.dumps(op) + "\n")
                self.f.flush()
        return op

    def mark(self, what, **kw):
        """A nemesis or harness note (fault, heal, check): type `nemesis`."""
        return self.add("nemesis", "nemesis", what, wall=round(time.time(), 3), **kw)

    def close(self):
        if self.f:
            self.f.close()
            self.f = None


class LeaderCache:
    """The current leader's name, looked up again when a client says it failed."""

    def __init__(self, harness):
        self.h = harness
        self.lock = threading.Lock()
        self.name = None
        self.stamp = 0.0

    def get(self, refresh=False):
        with self.lock:
            if refresh or self.name is None or time.monotonic() - self.stamp > 5:
                if refresh and time.monotonic() - self.stamp < 0.3:
                    return self.name
                self.name = self.h.leader()
                self.stamp = time.monotonic()
            return self.name


class Worker(threading.Thread):
    def __init__(self, wl, proc):
        super().__init__(daemon=True, name=proc)
        self.wl = wl
        self.proc = proc
        self.seq = 0
        self.conn = None
        self.node = None
        self.errors = 0

    def next_id(self):
        self.seq += 1
        return "%s:%d:%d" % (self.proc, self.wl.period, self.seq)

    def connect(self):
        lead = self.wl.leaders.get(refresh=self.errors > 0)
        if lead is None:
            raise ConnectionError("no leader")
        node = self.wl.h.nodes[lead]
        c = amqp.Connection(host="127.0.0.1:5672", userid="guest", password="guest",
                            connect_timeout=3, read_timeout=CONFIRM_TIMEOUT + 2,
                            write_timeout=5, login_method="PLAIN")
        with node.ns.entered():
            c.connect()
        self.node = lead
        return c

    def drop(self):
        if self.conn is not None:
            try:
                self.conn.collect()
            except Exception:
                pass
            self.conn = None

    def run(self):
        stop = self.wl.stop
        while not stop.is_set():
            try:
                if self.conn is None:
                    self.conn = self.connect()
                    self.setup(self.conn)
                self.step()
                self.errors = 0
            except Exception as e:
                self.errors += 1
                self.wl.note_error(self.proc, e)
                self.drop()
                stop.wait(min(0.1 * self.errors, 0.5))
        self.drop()

    def setup(self, conn):
        pass

    def step(self):
        raise NotImplementedError


def _msg(mid):
    return amqp.Message(mid, delivery_mode=2, message_id=mid)


class ConfirmPublisher(Worker):
    def __init__(self, wl, proc, queue, routing_key=None, pace=0.0):
        super().__init__(wl, proc)
        self.queue = queue
        self.rk = routing_key or queue
        self.pace = pace

    def setup(self, conn):
        self.ch = conn.channel()
        if self.rk == self.queue:
            self.ch.queue_declare(self.queue, durable=True, auto_delete=False)
        self.ch.confirm_select()

    def step(self):
        mid = self.next_id()
        h = self.wl.hist
        h.add(self.proc, "invoke", "publish", q=self.queue, ids=[mid])
        try:
            self.ch.basic_publish_confirm(_msg(mid), exchange="", routing_key=self.rk,
                                          confirm_timeout=CONFIRM_TIMEOUT)
        except amqp.exceptions.MessageNacked:
            h.add(self.proc, "info", "publish", q=self.queue, ids=[mid], why="nack")
            return
        except Exception as e:
            h.add(self.proc, "info", "publish", q=self.queue, ids=[mid], why=repr(e)[:120])
            raise
        h.add(self.proc, "ok", "publish", q=self.queue, ids=[mid], node=self.node)
        if self.pace:
            self.wl.stop.wait(self.pace)


class TxPublisher(Worker):
    BATCH = 4

    def __init__(self, wl, proc, queue):
        super().__init__(wl, proc)
        self.queue = queue

    def setup(self, conn):
        self.ch = conn.channel()
        self.ch.queue_declare(self.queue, durable=True, auto_delete=False)
        self.ch.tx_select()

    def step(self):
        ids = [self.next_id() for _ in range(self.BATCH)]
        h = self.wl.hist
        h.add(self.proc, "invoke", "tx-publish", q=self.queue, ids=ids)
        try:
            for mid in ids:
                self.ch.basic_publish(_msg(mid), exchange="", routing_key=self.queue)
            self.ch.tx_commit()
        except Exception as e:
            h.add(self.proc, "info", "tx-publish", q=self.queue, ids=ids, why=repr(e)[:120])
            raise
        h.add(self.proc, "ok", "tx-publish", q=self.queue, ids=ids, node=self.node)


class TxAckConsumer(Worker):
    """basic.get up to 8, then acks them in one transaction. Deliveries are `ok deliver`
    (with the redelivered flag); the acks are invoke/ok/info `ack`."""

    def __init__(self, wl, proc, queue):
        super().__init__(wl, proc)
        self.queue = queue

    def setup(self, conn):
        self.ch = conn.channel()
        self.ch.queue_declare(self.queue, durable=True, auto_delete=False)
        self.ch.tx_select()

    def step(self):
        h = self.wl.hist
        got = []
        for _ in range(8):
            m = self.ch.basic_get(self.queue, no_ack=False)
            if m is None:
                break
            mid = m.body.decode() if isinstance(m.body, bytes) else m.body
            h.add(self.proc, "ok", "deliver", q=self.queue, ids=[mid],
                  redelivered=bool(m.delivery_info["redelivered"]))
            got.append((mid, m.delivery_tag))
        if not got:
            self.wl.stop.wait(0.05)
            return
        ids = [mid for mid, _ in got]
        h.add(self.proc, "invoke", "ack", q=self.queue, ids=ids)
        try:
            for _, tag in got:
                self.ch.basic_ack(tag)
            self.ch.tx_commit()
        except Exception as e:
            h.add(self.proc, "info", "ack", q=self.queue, ids=ids, why=repr(e)[:120])
            raise
        h.add(self.proc, "ok", "ack", q=self.queue, ids=ids)


class Admin(Worker):
    """Purge and delete cycles, about one each per second."""

    def __init__(self, wl, proc):
        super().__init__(wl, proc)
        self.purge_q = "purge-%d" % wl.period
        self.ndel = 0

    def setup(self, conn):
        self.ch = conn.channel()
        self.ch.confirm_select()
        self.ch.queue_declare(self.purge_q, durable=True, auto_delete=False)

    def publish(self, q, mid):
        h = self.wl.hist
        h.add(self.proc, "invoke", "publish", q=q, ids=[mid])
        try:
            self.ch.basic_publish_confirm(_msg(mid), exchange="", routing_key=q,
                                          confirm_timeout=CONFIRM_TIMEOUT)
        except Exception as e:
            h.add(self.proc, "info", "publish", q=q, ids=[mid], why=repr(e)[:120])
            raise
        h.add(self.proc, "ok", "publish", q=q, ids=[mid])

    def step(self):
        h = self.wl.hist
        for _ in range(3):
            self.publish(self.purge_q, self.next_id())
        h.add(self.proc, "invoke", "purge", q=self.purge_q)
        try:
            n = self.ch.queue_purge(self.purge_q)
        except Exception as e:
            h.add(self.proc, "info", "purge", q=self.purge_q, why=repr(e)[:120])
            raise
        h.add(self.proc, "ok", "purge", q=self.purge_q, count=n)
        self.publish(self.purge_q, self.next_id())
        self.ndel += 1
        dq = "del-%d-%d" % (self.wl.period, self.ndel)
        h.add(self.proc, "invoke", "declare", q=dq)
        try:
            self.ch.queue_declare(dq, durable=True, auto_delete=False)
        except Exception as e:
            h.add(self.proc, "info", "declare", q=dq, why=repr(e)[:120])
            raise
        h.add(self.proc, "ok", "declare", q=dq)
        for _ in range(2):
            self.publish(dq, self.next_id())
        h.add(self.proc, "invoke", "delete", q=dq)
        try:
            self.ch.queue_delete(dq)
        except Exception as e:
            h.add(self.proc, "info", "delete", q=dq, why=repr(e)[:120])
            raise
        h.add(self.proc, "ok", "delete", q=dq)
        self.wl.stop.wait(0.5)


STREAM_ARGS = {"x-queue-type": "stream"}
STREAM_PORT = 5552
STREAM_ATTEMPTS = 20  # tries of one stream message (the same id) before its publisher moves on


class StreamPublisher(Worker):
    """AMQP 0-9-1 publisher with confirms into a stream (x-queue-type stream), one message at
    a time. Unlike the queues' publishers it retries an unconfirmed message under the SAME id
    (the id's SEQ is the per-publisher sequence) until it is confirmed or STREAM_ATTEMPTS
    tries went: what a RabbitMQ stream client does, and the reason a stream may hold a
    message twice (AMQP 0-9-1 has no deduplication). Recorded as `s-publish` with the
    attempt's number."""

    DEDUP = False  # the broker deduplicates its retries

    def __init__(self, wl, proc, stream):
        super().__init__(wl, proc)
        self.stream = stream
        self.pending = None  # (id, attempts so far) of a message not yet confirmed

    def setup(self, conn):
        self.ch = conn.channel()
        self.ch.queue_declare(self.stream, durable=True, auto_delete=False,
                              arguments=self.wl.stream_args[self.stream])
        self.ch.confirm_select()

    def take(self):
        if self.pending is None or self.pending[1] >= STREAM_ATTEMPTS:
            self.pending = (self.next_id(), 0)
        mid, n = self.pending
        self.pending = (mid, n + 1)
        return mid, n + 1

    def step(self):
        mid, attempt = self.take()
        h = self.wl.hist
        h.add(self.proc, "invoke", "s-publish", q=self.stream, ids=[mid], attempt=attempt,
              dedup=self.DEDUP)
        try:
            self.send(mid)
        except amqp.exceptions.MessageNacked:
            h.add(self.proc, "info", "s-publish", q=self.stream, ids=[mid], why="nack")
            return
        except Exception as e:
            h.add(self.proc, "info", "s-publish", q=self.stream, ids=[mid], why=repr(e)[:120])
            raise
        h.add(self.proc, "ok", "s-publish", q=self.stream, ids=[mid], node=self.node)
        self.pending = None

    def send(self, mid):
        self.ch.basic_publish_confirm(_msg(mid), exchange="", routing_key=self.stream,
                                      confirm_timeout=CONFIRM_TIMEOUT)


class StreamProtoPublisher(StreamPublisher):
    """The same over RabbitMQ's stream protocol (tests/integration/streamraw.py) on the
    leader's stream port: a named publisher (reference `PROC-k`), publishing id = SEQ. A retry
    after a reconnection re-declares the publisher under the same reference and sends the same
    publishing id: RabbitMQ deduplicates it (it keeps the highest publishing id per reference
    with the stream), so a message of this publisher must never be in a stream twice."""

    DEDUP = True

    def __init__(self, wl, proc, stream):
        super().__init__(wl, proc, stream)
        self.ref = "%s-%d" % (proc, wl.period)

    def connect(self):
        lead = self.wl.leaders.get(refresh=self.errors > 0)
        if lead is None:
            raise ConnectionError("no leader")
        with self.wl.h.nodes[lead].ns.entered():
            c = streamraw.StreamClient(STREAM_PORT, timeout=CONFIRM_TIMEOUT)
        self.node = lead
        return c

    def drop(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None

    def setup(self, c):
        c.connect()
        if self.wl.stream_declared.get(self.stream) is None:
            raise ConnectionError("stream %s not declared yet" % self.stream)
        code = c.declare_publisher(0, self.stream, ref=self.ref)
        if code != streamraw.OK:
            raise ConnectionError("declare_publisher: code %d" % code)

    def send(self, mid):
        seq = int(mid.rpartition(":")[2])
        c = self.conn
        c.publish(0, [(seq, streamraw.amqp10(mid.encode()))])
        for _ in range(100):
            key, _, r = c.frame()
            if key == streamraw.HEARTBEAT:
                continue
            if key == streamraw.CLOSE:  # e.g. a deposed leader's 320
                r.take(">I")
                code = r.take(">H")
                raise ConnectionError("the server's Close: %d %s" % (code, r.str()))
            if key == streamraw.PUBLISH_ERROR:
                r.take(">B")
                raise ConnectionError("PublishError %r" % [(r.take(">Q"), r.take(">H"))
                                                           for _ in range(r.take(">i"))])
            if key != streamraw.PUBLISH_CONFIRM:
                raise ConnectionError("frame 0x%04x instead of a PublishConfirm" % key)
            r.take(">B")
            got = [r.take(">Q") for _ in range(r.take(">i"))]
            if got != [seq]:
                raise ConnectionError("confirm for %r, expected %d" % (got, seq))
            return
        raise ConnectionError("no PublishConfirm in 100 frames")


class StreamReader(Worker):
    """Reads a stream live while it is written and the faults happen: a consumer from `first`
    (prefetch 200, manual acks), after a reconnection from the offset after the last it got.
    What it got is recorded as `ok s-deliver` lines of [offset, id], a batch at a time. A
    stream hands out an entry only once it is on every in-sync replica (its generation is
    released), so no failover may take back one it got: the checker finds each at the same
    offset in the final read."""

    def __init__(self, wl, proc, stream):
        super().__init__(wl, proc)
        self.stream = stream
        self.next_off = None
        self.got = []

    def setup(self, conn):
        self.ch = conn.channel()
        self.ch.basic_qos(0, 200, False)
        start = "first" if self.next_off is None else self.next_off
        self.n = 0
        self.ch.basic_consume(self.stream, callback=self.on,
                              arguments={"x-stream-offset": start})

    def on(self, m):
        off = (m.properties.get("application_headers") or {}).get("x-stream-offset")
        mid = m.body.decode() if isinstance(m.body, bytes) else m.body
        self.got.append([off, mid])
        if isinstance(off, int):
            self.next_off = off + 1
        self.n += 1
        if self.n % 50 == 0:
            self.ch.basic_ack(m.delivery_tag, multiple=True)

    def flush(self):
        if self.got:
            self.wl.hist.add(self.proc, "ok", "s-deliver", q=self.stream, node=self.node,
                             msgs=self.got)
            self.got = []

    def step(self):
        try:
            self.conn.drain_events(timeout=0.2)
        except socket.timeout:
            pass
        finally:
            self.flush()

    def drop(self):
        self.flush()
        super().drop()


class StreamCreator(StreamPublisher):
    """Declares streams during the faults: `sd-k-N`, two confirmed messages into each (as
    StreamPublisher: an unconfirmed one is sent again under the same id), then the next. A
    stream's creation (its queue record, its directory) must survive a failover like its
    messages: the drain reads every stream it declared (`s-declare` lines), and a stream
    missing after a declare-ok, or holding less than was confirmed into it, is judged."""

    PER_STREAM = 2

    def __init__(self, wl, proc):
        super().__init__(wl, proc, None)
        self.n_streams = 0
        self.in_this = self.PER_STREAM  # confirmed into the current stream

    def setup(self, conn):
        self.ch = conn.channel()
        self.ch.confirm_select()
        if self.stream is not None:  # again after a reconnection (it may be missing)
            self.declare()

    def declare(self):
        h = self.wl.hist
        h.add(self.proc, "invoke", "s-declare", q=self.stream)
        try:
            self.ch.queue_declare(self.stream, durable=True, auto_delete=False,
                                  arguments=STREAM_ARGS)
        except Exception as e:
            h.add(self.proc, "info", "s-declare", q=self.stream, why=repr(e)[:120])
            raise
        h.add(self.proc, "ok", "s-declare", q=self.stream, node=self.node)

    def step(self):
        if self.in_this >= self.PER_STREAM and self.pending is None:
            self.n_streams += 1
            self.stream = "sd-%d-%d" % (self.wl.period, self.n_streams)
            self.in_this = 0
            self.declare()
        super().step()
        if self.pending is None:
            self.in_this += 1
        self.wl.stop.wait(0.05)


_ID = re.compile(rb"(S[A-Z]+[0-9]*:[0-9]+:[0-9]+)")


class StreamProtoReader(StreamProtoPublisher):
    """SR's twin over the stream protocol (Subscribe, Deliver chunks, Credit) on the leader's
    stream port: subscribes from FIRST, after a reconnection from the offset after the last
    entry it got; records `ok s-deliver` as SR does. An entry's id is found in its AMQP 1.0
    bytes (its data section and message-id hold it)."""

    def __init__(self, wl, proc, stream):
        super().__init__(wl, proc, stream)
        self.next_off = None
        self.got = []

    def setup(self, c):
        c.connect()
        if self.next_off is None:
            code = c.subscribe(1, self.stream, kind=streamraw.FIRST, credit=5)
        else:
            code = c.subscribe(1, self.stream, kind=streamraw.OFFSET, value=self.next_off,
                               credit=5)
        if code != streamraw.OK:
            raise ConnectionError("subscribe: code %d" % code)

    def step(self):
        c = self.conn
        try:
            if not c.buf and not select.select([c.s], [], [], 0.2)[0]:
                return
            for _ in range(20):  # what came, then back to the stop check
                key, _, r = c.frame()
                if key == streamraw.DELIVER:
                    r.take(">B")
                    hdr, entries = streamraw.parse_chunk(r)
                    for i, e in enumerate(entries):
                        m = _ID.search(e)
                        off = hdr["chunk_id"] + i
                        if self.next_off is not None and off < self.next_off:
                            continue  # a chunk begins before the offset asked for
                        self.got.append([off, m.group(1).decode() if m else repr(e[:40])])
                        self.next_off = off + 1
                    c.credit(1, 1)
                elif key == streamraw.CLOSE:
                    r.take(">I")
                    code = r.take(">H")
                    raise ConnectionError("the server's Close: %d %s" % (code, r.str()))
                if not c.buf and not select.select([c.s], [], [], 0)[0]:
                    break
        finally:
            self.flush()

    flush = StreamReader.flush

    def drop(self):
        self.flush()
        super().drop()


class Workload:
    """All the processes of one period against harness h, recording into hist."""

    def __init__(self, h, hist, period, link=True, streams=True, stream_proto=True,
                 long_stream=None, long_roll=False):
        self.h = h
        self.hist = hist
        self.period = period
        self.stop = threading.Event()
        self.leaders = LeaderCache(h)
        self.errors = {}
        self.lock = threading.Lock()
        k = period
        self.queues = ["work-%d" % k, "keep-%d" % k, "tx-%d" % k, "purge-%d" % k]
        self.inbox = "inbox-%d" % k
        self.workers = [
            ConfirmPublisher(self, "P-work", "work-%d" % k),
            ConfirmPublisher(self, "P-keep", "keep-%d" % k),
            TxPublisher(self, "T", "tx-%d" % k),
            TxAckConsumer(self, "C-work", "work-%d" % k),
            Admin(self, "A"),
        ]
        # streams (issue 47): SA and SP into stream-k-0, SB into stream-k-1, SC into
        # stream-k-2, whose retention deletes its oldest whole segments all along
        self.streams = ["stream-%d-%d" % (k, i) for i in range(3)] if streams else []
        self.stream_declared = {}
        # stream-k-0's small segments roll every few hundred entries (segment creation under
        # the faults too); stream-k-1 keeps the default
        self.stream_args = {s: dict(STREAM_ARGS) for s in self.streams}
        self.retention = set()
        if streams:
            self.stream_args[self.streams[0]]["x-stream-max-segment-size-bytes"] = 16 << 10
            self.stream_args[self.streams[2]].update({
                "x-stream-max-segment-size-bytes": 4 << 10, "x-max-length-bytes": 16 << 10})
            self.retention.add(self.streams[2])
        if streams:
            self.workers += [StreamPublisher(self, "SA", self.streams[0]),
                             StreamPublisher(self, "SB", self.streams[1]),
                             StreamPublisher(self, "SC", self.streams[2])]
            if stream_proto:
                self.workers.append(StreamProtoPublisher(self, "SP", self.streams[0]))
            self.workers.append(StreamReader(self, "SR", self.streams[0]))
            if stream_proto:
                self.workers.append(StreamProtoReader(self, "SQ", self.streams[0]))
            self.workers.append(StreamCreator(self, "SD"))
        # a stream that outlives the period (the soak's, several periods long): SLk writes
        # into it; every period reads it whole, older periods' messages included; the soak
        # deletes it (long_roll) after the last period it spans
        self.long_stream = long_stream if streams else None
        self.long_roll = long_roll
        if self.long_stream:
            self.streams.append(long_stream)
            self.stream_args[long_stream] = dict(STREAM_ARGS, **{
                "x-stream-max-segment-size-bytes": 16 << 10})
            self.workers.append(StreamPublisher(self, "SL%d" % k, long_stream))
        self.link = link
        if link:
            self.workers.append(ConfirmPublisher(
                self, "L", self.inbox, routing_key=h.remote_format_name(self.inbox), pace=0.01))

    def note_error(self, proc, e):
        with self.lock:
            key = "%s: %s" % (proc, type(e).__name__)
            if type(e) is ConnectionError and e.args and isinstance(e.args[0], str):
                key += " (%s)" % e.args[0][:60]  # the workers' own: say which
            self.errors[key] = self.errors.get(key, 0) + 1

    def start(self):
        if self.streams:  # declared before the publishers start (the SP's needs it)
            c = _leader_conn(self.h, self.h.wait_leader(30))
            try:
                ch = c.channel()
                for s in self.streams:
                    ch.queue_declare(s, durable=True, auto_delete=False,
                                     arguments=self.stream_args[s])
                    self.stream_declared[s] = True
            finally:
                c.close()
        if self.link:
            c = self.h.remote.amqp()
            c.channel().queue_declare(self.inbox, durable=True, auto_delete=False)
            c.close()
        for w in self.workers:
            w.start()

    def finish(self, timeout=30):
        self.stop.set()
        for w in self.workers:
            w.join(timeout)
        alive = [w.name for w in self.workers if w.is_alive()]
        if alive:
            raise RuntimeError("workers did not stop: %s" % alive)


def _leader_conn(h, lead):
    node = h.nodes[lead]
    c = amqp.Connection(host="127.0.0.1:5672", userid="guest", password="guest",
                        connect_timeout=5, read_timeout=15, login_method="PLAIN")
    with node.ns.entered():
        c.connect()
    return c


def _drain_queue(ch, q, limit=1000000):
    out = []
    for _ in range(limit):
        m = ch.basic_get(q, no_ack=True)
        if m is None:
            break
        mid = m.body.decode() if isinstance(m.body, bytes) else m.body
        out.append([mid, bool(m.delivery_info["redelivered"])])
    return out


def outgoing_empty(h, lead, inbox):
    st, rows = h.nodes[lead].http("GET", "/api/msmq/outgoing")
    if st != 200:
        return False
    for o in rows:
        if inbox in o.get("format_name", ""):
            return o.get("messages") == 0
    return True  # never created: nothing to send


def drain(h, hist, wl, timeout=120):
    """After the faults are healed and the workload stopped: wait for the outgoing queue to
    empty, then take every message of every queue of the period (and the remote inbox) and
    record what came as `drain` operations; the admin's declared (and maybe deleted) queues
    are probed and drained (`exists`)."""
    lead = h.wait_stable(timeout)
    if wl.link:
        from cluster_harness import wait_until
        wait_until(lambda: outgoing_empty(h, h.leader() or lead, wl.inbox), timeout,
                   "the outgoing queue to the remote node drained", interval=0.3)
    lead = h.wait_stable(timeout)
    c = _leader_conn(h, lead)
    try:
        ch = c.channel()
        for q in wl.queues:
            try:
                got = _drain_queue(ch, q)
            except amqp.exceptions.NotFound:
                ch = c.channel()
                got = []
            hist.add("drain", "ok", "drain", q=q, msgs=got)
        # every queue the admin declared: deleted or not (its connection may have died
        # between the declare and the delete: then its messages must still be there)
        declared = sorted({op["q"] for op in hist.ops if op["f"] == "declare" and
                           op["q"].startswith("del-%d-" % wl.period)})
        for q in declared:
            try:
                ch.queue_declare(q, passive=True)
                got = _drain_queue(ch, q)
                hist.add("drain", "ok", "exists", q=q, exists=True, msgs=got)
            except amqp.exceptions.NotFound:
                ch = c.channel()
                hist.add("drain", "ok", "exists", q=q, exists=False, msgs=[])
    finally:
        try:
            c.close()
        except Exception:
            pass
    if wl.streams:
        drain_streams(h, hist, wl, timeout)
    if wl.link:
        rc = h.remote.amqp(read_timeout=15)
        try:
            got = _drain_queue(rc.channel(), wl.inbox)
        finally:
            rc.close()
        hist.add("drain", "ok", "drain", q=wl.inbox, msgs=got, remote=True)
    return lead


def stream_info(h, lead, s):
    """The stream's HTTP figures on node lead: (first_offset, committed_offset (None when
    empty), messages); None when there is no such queue."""
    st, q = h.nodes[lead].http("GET", "/api/queues/%2F/" + s)
    if st == 404:
        return None
    if st != 200 or not isinstance(q, dict):
        raise RuntimeError("GET /api/queues/%%2F/%s on %s: %s %r" % (s, lead, st, q))
    return q.get("first_offset"), q.get("committed_offset"), q.get("messages")


def read_stream(c, s, committed, timeout):
    """Stream s read from `first` with a consumer (prefetch 500, manual acks: an ack only
    gives credit back) up to offset `committed` (None: nothing): [[offset, id], ...]."""
    got = []
    if committed is None:
        return got
    ch = c.channel()
    ch.basic_qos(0, 500, False)

    def on(m):
        off = (m.properties.get("application_headers") or {}).get("x-stream-offset")
        mid = m.body.decode() if isinstance(m.body, bytes) else m.body
        got.append([off, mid])
        if len(got) % 100 == 0:
            ch.basic_ack(m.delivery_tag, multiple=True)

    ch.basic_consume(s, callback=on, arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + timeout
    while not got or got[-1][0] != committed:
        last = got[-1][0] if got else None
        if (isinstance(last, int) and last > committed) or time.monotonic() > deadline:
            raise RuntimeError("stream %s: read %d entries up to offset %s, its committed "
                               "offset is %s" % (s, len(got), last, committed))
        try:
            c.drain_events(timeout=0.5)
        except socket.timeout:
            pass
    ch.close()
    return got


def stream_files(node):
    """{streams/INC/FILE: sha1} of node's data directory (its mirror of the streams)."""
    out = {}
    root = os.path.join(str(node.data_dir), "streams")
    try:
        dirs = sorted(os.listdir(root))
    except OSError:
        return out
    for d in dirs:
        try:
            names = sorted(os.listdir(os.path.join(root, d)))
        except OSError:
            continue
        for f in names:
            try:
                with open(os.path.join(root, d, f), "rb") as fh:
                    out["streams/%s/%s" % (d, f)] = hashlib.sha1(fh.read()).hexdigest()
            except (OSError, IsADirectoryError):
                pass
    return out


def same_stream_files(h):
    trees = [stream_files(n) for n in h.nodes.values()]
    return trees if all(t == trees[0] for t in trees[1:]) else None


def drain_streams(h, hist, wl, timeout):
    """Each stream of the period read whole from `first` on the leader (`s-read`: the entries
    with their x-stream-offset, the committed offset and message count the HTTP API gave).
    Followers serve no reads (their front door forwards clients to the leader), so what they
    hold is compared instead: every node's streams/ files byte for byte the leader's, once the
    three are in sync (`s-replicas`). Then the streams are deleted (the small disks)."""
    lead = h.wait_stable(timeout)
    c = _leader_conn(h, lead)
    try:
        # and every stream SD declared (or tried to)
        made = sorted({op["q"] for op in hist.ops if op["f"] == "s-declare"})
        for s in wl.streams + made:
            info = stream_info(h, lead, s)
            if info is None:
                hist.add("drain", "ok", "s-read", q=s, node=lead, exists=False, msgs=[])
                continue
            first, committed, count = info
            got = read_stream(c, s, committed, timeout)
            hist.add("drain", "ok", "s-read", q=s, node=lead, committed=committed,
                     first=first, count=count, msgs=got, retention=s in wl.retention)
        # retention's unlinks (and other file operations made after a generation's last
        # write) travel with the next group (docs/cluster.md): one confirmed publish to a
        # queue of the period makes one before the followers' files are compared
        ch = c.channel()
        flush = "flush-%d" % wl.period
        ch.queue_declare(flush, durable=True, auto_delete=False)
        ch.confirm_select()
        ch.basic_publish_confirm(amqp.Message("flush", delivery_mode=2), exchange="",
                                 routing_key=flush, confirm_timeout=15)
    finally:
        try:
            c.close()
        except Exception:
            pass
    t0 = time.monotonic()
    trees = None
    while time.monotonic() - t0 < 30:
        trees = same_stream_files(h)
        if trees is not None:
            break
        time.sleep(0.2)
    if trees is None:
        detail = {name: stream_files(n) for name, n in h.nodes.items()}
        hist.add("drain", "ok", "s-replicas", same=False, files=detail)
    else:
        hist.add("drain", "ok", "s-replicas", same=True, files=len(trees[0]),
                 waited=round(time.monotonic() - t0, 2))
    lead = h.wait_stable(timeout)
    c = _leader_conn(h, lead)
    try:
        ch = c.channel()
        for s in wl.streams + made + ["flush-%d" % wl.period]:
            if s != wl.long_stream or wl.long_roll:
                try:
                    ch.queue_delete(s)
                except amqp.exceptions.NotFound:  # one SD never got declared
                    ch = c.channel()
    finally:
        try:
            c.close()
        except Exception:
            pass
