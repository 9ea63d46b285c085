#!/usr/bin/python3
"""crash_test.py - kill -9 sluiced under load, restart it on the same data directory and check
that it kept every promise it made (DESIGN.md section 5).

Each round starts publishers (persistent messages, publisher confirms, mandatory), consumers
(manual acks, most of them inside AMQP transactions), a chaos client (queue.purge,
queue.delete + redeclare) and a mover (the management API's Move Message: messages go from a
queue into its subqueue q;retry and back, by lookup id, the retry / poison-message workflow)
against one sluiced, kills the broker with SIGKILL after a random
delay, restarts it on the same data directory and drains every queue. Every client action is
stamped with a global event counter when it is sent and every reply when it arrives, so the
checks only count what the broker actually promised before it died:

  loss          a message whose confirm arrived is missing, although it was not consumed
                (acked in a transaction whose commit-ok may have arrived, or plain-acked) and
                no purge or delete may have removed it
  resurrection  something came back that must not: a message acked in a committed
                transaction, confirmed into a queue before a purge or delete whose -ok arrived,
                returned as unroutable, or already found missing after an earlier restart
  order         per queue, one publisher's messages out of publish order, or a message of an
                earlier round behind one of a later round (lookup ids only grow)
  duplicate     the same message twice in a queue, or in a queue it was not published to

A message whose fate the broker never told (publish or commit in flight at the crash) may or
may not be there; both are fine. A moved message belongs to its queue wherever it is, q or
q;retry (a delete takes both); only a purge of q cannot tell whether it was in q at the time,
so a message moved during a round with a purge of its queue is a "maybe". What a drain finds becomes the baseline of the next round:
found messages must survive every later crash until consumed, missing ones must never
reappear. The run ends with a clean restart (SIGTERM) that must change nothing.

Streams (issue 47): a share of the publishes (--stream-share) goes, with the same confirms, to
stream queues (x-queue-type stream, --streams of them: crash.s0, crash.s1, crash.s2), whose
small x-stream-max-segment-size-bytes (64 KiB, 16 KiB, 4 KiB) make segments roll in every
round and whose x-max-length-bytes (16 MiB: far, it bounds the long run; 96 KiB; 24 KiB)
make retention delete the oldest whole segments all round long in two of them. A stream
publisher (--stream-publishers) writes into them over RabbitMQ's stream protocol too
(tests/integration/streamraw.py: publishing ids, PublishConfirm), entries that the drains read
back over AMQP 0-9-1 like the others. Nobody consumes them away: stream readers (--stream-readers) read them live from first, next, last
or a number (basic.qos, manual acks, x-stream-offset), and each delivery must be an entry of
that stream at a growing offset, in each publisher's order, and at the offset a drain found
it at. After every restart each stream is read whole from `first` over AMQP 0-9-1, up to the
committed_offset the HTTP API gives, each entry with its x-stream-offset header, and:

  stream loss   a confirmed entry is missing although something kept surely came before it
                (an earlier entry of its publisher, one of an earlier round, one confirmed
                before it was sent): retention removes whole oldest segments only, so what a
                stream keeps is a suffix of what it was given, never with a hole; an entry a
                drain found is missing while the stream still begins at or before its offset;
                or a stream queue is gone after the restart (the broker log's "not restored"
                line is printed); while everything a stream was given is far below its
                x-max-length-bytes (crash.s0 in the short run), nothing at all may be missing
  offsets       not consecutive from first_offset on, or an entry at an offset other than the
                one a drain found it at, or a new entry at an offset a drain found taken
  and, as for the queues: resurrection (an entry missing after an earlier restart comes
  back), order (per publisher, per round), duplicate (twice, or unknown, or published to
  another queue). The final clean restart must leave the streams as they were too.

TIDY and its compaction run all along (tidy_interval = 1 s, small segments: --segment-size),
and one queue, crash.keep, is never consumed, so old live messages sit among dead segments
and get copied forward. In most rounds the kill comes from the broker itself at a step of
TIDY chosen at random (SLUICE_FAULT crash_at_file: after measuring, after a slice of copies,
once the copies are durable, once the holes file is written, after a segment's unlink, at
the end), so kills fall between every step of compaction, or between the two log batches of
a commit that wrote definitions (meta-synced: the mover's subqueues come and go, and their
removal is in the meta log, the move that emptied them in the msgs log); the timer's kill -9
comes if the step is not reached in time. The totals count how often each step was the one
killed at, and what TIDY freed and copied meanwhile (from the broker's log).

Usage: crash_test.py [--rounds N] [--seconds S] [--seed X] [--keep] [--streams 0-3]
       [--stream-share F] [--stream-readers N] [--stream-publishers N] (--help: the rest)
Env:   SLUICED (default build/sluiced), CRASH_ROUNDS, CRASH_SECONDS.
Exit status 0 when every round is clean; 1 with the evidence printed otherwise. The work
directory (broker logs, data directory, a copy of it as the last kill left it) is kept on
failure or with --keep.
"""

import argparse
import collections
import http.client
import json
import urllib.parse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import amqp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import streamraw  # noqa: E402 (RabbitMQ's stream protocol, the tests' raw client)

HOST = "127.0.0.1"
QUEUE_PREFIX = "crash.q"
KEEP_QUEUE = "crash.keep"  # never consumed: its messages grow old among dead segments
# where the broker kills itself (SLUICE_FAULT crash_at_file): TIDY's steps, and a commit whose
# definitions batch is on disk and whose messages batch is not (a subqueue's removal without
# the move that emptied it, say)
CRASH_POINTS = ["tidy-measured", "tidy-relocated", "tidy-synced", "tidy-holes",
                "tidy-unlinked", "tidy-done", "meta-synced", "reap-synced", "reap-done"]
SUBQUEUE = "retry"  # the mover's subqueue: q;retry
# The stream queues (x-queue-type stream), by the order --streams takes them: small segments so
# that they roll during a round; retention by bytes, whole oldest segments. crash.s0's limit is
# far (it keeps everything in the short run and bounds the long one), crash.s1's and crash.s2's
# are near, so their old segments go all round long.
STREAM_PREFIX = "crash.s"
STREAM_SPECS = [
    {"x-stream-max-segment-size-bytes": 64 << 10, "x-max-length-bytes": 16 << 20},
    {"x-stream-max-segment-size-bytes": 16 << 10, "x-max-length-bytes": 96 << 10},
    {"x-stream-max-segment-size-bytes": 4 << 10, "x-max-length-bytes": 24 << 10},
]
STREAM_PREFETCH = 500
PREFETCH = 200
PUBLISH_WINDOW = 200  # unconfirmed messages per publisher


# ------------------------------------------------------------------------------------------
# The event counter: orders client actions and broker replies across threads.

_tick_lock = threading.Lock()
_tick_value = 0


def tick():
    global _tick_value
    with _tick_lock:
        _tick_value += 1
        return _tick_value


# ------------------------------------------------------------------------------------------
# The model of what the broker promised


class Msg:
    __slots__ = (
        "pub", "seq", "queue", "round", "sent", "confirmed", "nacked", "returned",
        "baseline", "dead", "dead_why", "deliveries", "ack_maybe", "acked_commit",
        "moved", "where", "history", "offset",
    )

    def __init__(self, pub, seq, queue, rnd):
        self.pub, self.seq, self.queue, self.round = pub, seq, queue, rnd
        self.sent = None  # tick just before the publish was written
        self.confirmed = None  # tick when its basic.ack arrived
        self.nacked = False
        self.returned = False  # basic.return (unroutable): stored nowhere
        self.baseline = False  # found by the last drain: must survive until consumed
        self.dead = False  # must never appear again
        self.dead_why = ""
        self.deliveries = 0
        self.ack_maybe = False  # a plain ack or a commit carrying its ack was sent
        self.acked_commit = None  # tick when a commit-ok covering its ack arrived
        self.moved = False  # a move of it was sent this round (q <-> q;retry)
        self.where = queue  # where it was at the start of the round: q, or q;retry
        self.history = []
        self.offset = None  # in a stream: its x-stream-offset, as the first drain found it

    @property
    def key(self):
        return (self.pub, self.seq)

    def name(self):
        return "%s#%d@%s" % (self.pub, self.seq, self.queue)


class Op:
    """A queue.purge or queue.delete sent by the chaos client."""

    def __init__(self, kind, queue):
        self.kind, self.queue = kind, queue
        self.send = tick()
        self.ok = None

    def __repr__(self):
        return "%s(%s sent@%d ok@%s)" % (self.kind, self.queue, self.send, self.ok)


class Model:
    def __init__(self):
        self.lock = threading.Lock()
        self.msgs = {}  # (pub, seq) -> Msg
        self.ops = []  # this round's purges and deletes
        self.stats = collections.Counter()
        self.stream_hi = {}  # stream -> the highest offset any drain found in it
        self.stream_bytes = collections.Counter()  # stream -> body bytes ever published to it

    def note(self, m, what):
        if len(m.history) < 40:
            m.history.append("%s@%d" % (what, tick()))

    def publish(self, pub, seq, queue, rnd, size=0):
        with self.lock:
            self.stream_bytes[queue] += size
            m = Msg(pub, seq, queue, rnd)
            m.sent = tick()
            self.msgs[m.key] = m
            self.stats["published"] += 1
            self.note(m, "sent")
            return m

    def confirm(self, m, ok):
        with self.lock:
            if ok:
                m.confirmed = tick()
                self.stats["confirmed"] += 1
                self.note(m, "confirmed")
            else:
                m.nacked = True
                self.stats["nacked"] += 1
                self.note(m, "nacked")

    def returned(self, m):
        with self.lock:
            m.returned = True
            self.stats["returned"] += 1
            self.note(m, "returned")

    def delivered(self, m, redelivered, who):
        with self.lock:
            m.deliveries += 1
            self.stats["delivered"] += 1
            self.note(m, "delivered(%s%s)" % (who, ",redelivered" if redelivered else ""))

    def ack_sent(self, ms, how):
        """Acks that the broker may have applied: plain acks, or a tx.commit carrying them."""
        with self.lock:
            for m in ms:
                m.ack_maybe = True
                self.note(m, how)

    def commit_ok(self, ms):
        with self.lock:
            t = tick()
            for m in ms:
                if m.acked_commit is None:
                    m.acked_commit = t
                    self.stats["acked_committed"] += 1
                self.note(m, "commit-ok")

    def move_sent(self, m, dest):
        with self.lock:
            m.moved = True
            self.note(m, "move->%s" % dest)

    def move_ok(self, m):
        with self.lock:
            self.stats["moves_ok"] += 1
            self.note(m, "move-ok")

    def op_begin(self, kind, queue):
        with self.lock:
            op = Op(kind, queue)
            self.ops.append(op)
            return op

    def op_ok(self, op):
        with self.lock:
            op.ok = tick()
            self.stats[op.kind + "s_ok"] += 1

    def lookup(self, body):
        """Parse 'pub|seq|queue|padding' back to its Msg (None when unknown)."""
        try:
            pub, seq, queue, _ = body.split(b"|", 3)
            return self.msgs.get((pub.decode(), int(seq)))
        except ValueError:
            return None

    # --- verdicts --------------------------------------------------------------------------

    def expectation(self, m):
        """'present', 'absent' or 'maybe' for m after the crash, with the reason."""
        if m.dead:
            return "absent", m.dead_why
        if m.returned and m.confirmed is not None:
            return "absent", "returned unroutable, then confirmed"
        if m.acked_commit is not None:
            return "absent", "its ack was committed (commit-ok@%d)" % m.acked_commit
        maybe = None
        if not m.baseline and m.confirmed is None:
            maybe = "never confirmed" + (" (nacked)" if m.nacked else "")
        if m.ack_maybe:
            maybe = maybe or "an ack may have applied (plain ack or commit without ok)"
        # the time the broker had it for sure: found by the last drain, or confirmed
        had_at = 0 if m.baseline else m.confirmed
        for op in self.ops:
            if op.queue != m.queue:
                continue
            if op.kind == "purge" and m.moved:
                # it may have been in q;retry at the time, which a purge of q leaves alone
                maybe = maybe or "moved during a round with %s" % (op,)
                continue
            if op.kind == "purge" and m.where != m.queue:
                continue  # in q;retry all round: a purge of q does not touch it
            if had_at is not None and had_at < op.send:
                if op.ok is not None:
                    return "absent", "%s: in the queue before it, and its -ok arrived" % (op,)
                maybe = maybe or "%s without -ok" % (op,)
            elif op.ok is not None and not m.baseline and m.sent > op.ok:
                continue  # published after the op completed: untouched by it
            else:
                maybe = maybe or "raced with %s" % (op,)
        if maybe:
            return "maybe", maybe
        return "present", "confirmed@%s" % m.confirmed if not m.baseline else "found last time"


# ------------------------------------------------------------------------------------------
# The broker


class Broker:
    def __init__(self, binary, workdir, data_dir, tidy_interval, segment_size,
                 memory_budget=None, stream_listener=False):
        self.binary = binary
        self.data_dir = data_dir
        self.log_path = os.path.join(workdir, "broker.log")
        self.config = os.path.join(workdir, "sluiced.conf")
        # The step of TIDY at which the broker kills itself (armed per round, see main).
        self.crash_file = os.path.join(workdir, "crash-point")
        with open(self.config, "w") as f:
            # TIDY runs during the test too: reclaiming and compacting must survive kill -9.
            f.write("tidy_interval = %d\n" % tidy_interval)
            if segment_size:
                f.write("segment_size = %s\n" % segment_size)
            if stream_listener:  # RabbitMQ's stream protocol, for the stream publishers
                f.write("listeners.stream = 0\n")
            if memory_budget is not None:
                # A small budget pages the queues out, so recovery hands most of them back
                # as paged tails read from the store on demand.
                f.write("memory_budget = %s\n" % memory_budget)
        self.stream_listener = stream_listener
        self.stream_port = None
        self.use_mgmt_flag = True
        self.use_config = True
        self.proc = None
        self.pump = None
        self.port = None
        self.starts = 0

    def _argv(self):
        argv = [self.binary, "--bind", HOST, "--port", "0", "--data-dir", self.data_dir]
        if self.use_mgmt_flag:
            argv += ["--mgmt-port", "0"]  # the mover's door
        if self.use_config:
            argv += ["--config", self.config]
        return argv

    def start(self, wait=True, timeout=60.0):
        """Start sluiced; with wait, return once it listens (raises when it cannot start)."""
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(b"\n==== start %d: %s\n" % (self.starts, " ".join(self._argv()).encode()))
        log.flush()
        env = dict(os.environ, SLUICE_FAULT="crash_at_file=" + self.crash_file)
        self.proc = subprocess.Popen(self._argv(), stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.PIPE, env=env)
        self.port = None
        lines = []
        listening = threading.Event()
        state = self.state = {"port": None, "http": None, "stream": None}

        def pump(proc=self.proc):
            # Keep reading stderr for the broker's whole life so its pipe never fills.
            for line in proc.stderr:
                log.write(line)
                log.flush()
                if state["port"] is None or state["http"] is None or (
                        self.stream_listener and state["stream"] is None):
                    lines.append(line.decode(errors="replace"))
                    mo = re.search(r"listening stream=([0-9.]+):(\d+)", lines[-1])
                    if mo:
                        state["stream"] = int(mo.group(2))
                    mo = re.search(r"listening http=([0-9.]+):(\d+)", lines[-1])
                    if mo:
                        state["http"] = int(mo.group(2))
                    mo = re.search(r"listening amqp=([0-9.]+):(\d+)", lines[-1])
                    if mo:
                        state["port"] = int(mo.group(2))
                        listening.set()
            log.close()
            listening.set()

        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()
        if not wait:
            return
        listening.wait(timeout)
        self.port = state["port"]
        # the API's and the stream door's lines follow the AMQP one
        for _ in range(200):
            if (state["http"] is not None or not self.use_mgmt_flag) and (
                    state["stream"] is not None or not self.stream_listener) or \
                    self.proc.poll() is not None:
                break
            time.sleep(0.005)
        self.http_port = state["http"]
        self.stream_port = state["stream"]
        if self.port is None:
            rc = self.proc.poll()
            text = "".join(lines)
            if rc is not None and self.use_mgmt_flag and "mgmt" in text:
                self.use_mgmt_flag = False  # an older binary: no management API to turn off
                return self.start(wait, timeout)
            if rc is not None and "SLUICE_FAULT" in text and "not understood" in text:
                os.environ["SLUICE_FAULT"] = ""  # an older binary: no crash points
                self.crash_file = os.devnull
                return self.start(wait, timeout)
            if rc is not None and self.use_config and "config" in text:
                self.use_config = False
                return self.start(wait, timeout)
            if rc is None:
                self.kill()
            raise BrokerFailed("sluiced did not start (exit %s):\n%s" % (rc, text[-3000:]))

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc:
            self.proc.wait()
        if self.pump:
            self.pump.join(10)

    def listened(self):
        return self.state["port"] is not None

    def stop(self, timeout=30.0):
        """Clean shutdown (SIGTERM); returns the exit status."""
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return "timeout"


class BrokerFailed(Exception):
    pass


def connect(port, timeout=3.0):
    conn = amqp.Connection("%s:%d" % (HOST, port), connect_timeout=timeout,
                           read_timeout=10, write_timeout=10)
    conn.connect()
    return conn


def quietly(fn, *args):
    try:
        fn(*args)
    except Exception:
        pass


# ------------------------------------------------------------------------------------------
# Clients of one round


class Round:
    def __init__(self, model, rnd, port, queues, args, rng, backlog):
        self.model, self.rnd, self.port, self.queues = model, rnd, port, queues
        self.args, self.rng = args, rng
        self.backlog = backlog  # queue -> messages found by the last drain
        self.consumed = [q for q in queues if q != KEEP_QUEUE]  # what consumers and chaos use
        # Streams: only publishers and stream readers touch them (no purge, delete or move:
        # a stream refuses the first, and the checks count on its offsets going on)
        self.streams = args.stream_names
        self.stop = threading.Event()
        self.errors = []  # unexpected client failures (harness bugs), printed at the end
        self.stream_bad = []  # what a live stream reader saw that must not be

    def run_thread(self, name, fn, *a):
        def body():
            try:
                fn(*a)
            except Exception as e:
                # The kill comes a moment before stop is set: failures then are expected.
                if not self.stop.wait(2.0):
                    self.errors.append("%s: %r" % (name, e))

        t = threading.Thread(target=body, name=name, daemon=True)
        t.start()
        return t

    # --- publisher ---------------------------------------------------------------------

    def publisher(self, idx):
        rng = random.Random(self.rng.random())
        pub = "r%dp%d" % (self.rnd, idx)
        model = self.model
        pending = collections.OrderedDict()  # delivery tag -> Msg, oldest first
        conn = connect(self.port)
        try:
            ch = conn.channel()
            ch.confirm_select()

            def settle(tag, multiple, ok):
                if multiple:
                    while pending and next(iter(pending)) <= tag:
                        model.confirm(pending.popitem(last=False)[1], ok)
                elif tag in pending:
                    model.confirm(pending.pop(tag), ok)

            ch.events["basic_ack"].add(lambda tag, multiple: settle(tag, multiple, True))
            ch.events["basic_nack"].add(lambda tag, multiple: settle(tag, multiple, False))

            def on_return(exc, exchange, routing_key, message):
                m = model.lookup(bytes(message.body))
                if m:
                    model.returned(m)

            ch.events["basic_return"].add(on_return)
            seq = tag = 0
            t0 = time.monotonic()
            while not self.stop.is_set():
                # at most args.rate messages a second, so the consumers stay in the game
                budget = int((time.monotonic() - t0) * self.args.rate) - seq
                while len(pending) < PUBLISH_WINDOW and budget > 0 and not self.stop.is_set():
                    budget -= 1
                    seq += 1
                    pick = rng.random()
                    r = rng.random()
                    if self.streams and pick < self.args.stream_share:
                        # a stream's entries: small, some a few segments of crash.s2 long
                        q = rng.choice(self.streams)
                        size = rng.randint(2_000, 12_000) if r < 0.03 else rng.randint(0, 1500)
                    else:
                        q = KEEP_QUEUE if rng.random() < self.args.keep_share else rng.choice(
                            self.consumed)
                        # mostly small, sometimes large: large writes can be torn by the kill
                        size = rng.randint(200_000, 1_000_000) if r < 0.002 else (
                            rng.randint(4_000, 60_000) if r < 0.05 else rng.randint(0, 1500))
                    head = b"%s|%d|%s|" % (pub.encode(), seq, q.encode())
                    m = model.publish(pub, seq, q, self.rnd, len(head) + size)
                    tag += 1
                    pending[tag] = m
                    ch.basic_publish(amqp.Message(head + b"x" * size, delivery_mode=2),
                                     exchange="", routing_key=q, mandatory=True)
                    if size > 100_000:
                        break  # let the confirms of a big one come back first
                try:
                    conn.drain_events(timeout=0.02)
                except socket.timeout:
                    pass
        finally:
            quietly(conn.collect)

    # --- stream publisher: RabbitMQ's stream protocol ------------------------------------

    def stream_publisher(self, idx):
        """Publishes into the streams over the stream protocol (one publisher id per stream,
        batches of 1 to 20, each batch's PublishConfirms awaited): the same entries as the
        AMQP 0-9-1 ones, stored as AMQP 1.0 and read back by the drains as 0-9-1 bodies."""
        rng = random.Random(self.rng.random())
        pub = "r%dsp%d" % (self.rnd, idx)
        model = self.model
        c = streamraw.StreamClient(self.args.stream_port, host=HOST, timeout=10)
        try:
            c.connect()
            for pid, s in enumerate(self.streams):
                if c.declare_publisher(pid, s) != streamraw.OK:
                    raise BrokerFailed("DeclarePublisher %d on %s refused" % (pid, s))
            seq = 0
            t0 = time.monotonic()
            while not self.stop.is_set():
                if seq > (time.monotonic() - t0) * self.args.stream_rate:
                    self.stop.wait(0.005)
                    continue
                pid = rng.randrange(len(self.streams))
                s = self.streams[pid]
                batch = []
                for _ in range(rng.randint(1, 20)):
                    seq += 1
                    r = rng.random()
                    size = rng.randint(2_000, 12_000) if r < 0.03 else rng.randint(0, 1500)
                    head = b"%s|%d|%s|" % (pub.encode(), seq, s.encode())
                    batch.append((seq, model.publish(pub, seq, s, self.rnd, len(head) + size),
                                  head + b"x" * size))
                c.publish(pid, [(i, streamraw.amqp10(body)) for i, _, body in batch])
                ids = set(c.confirms(pid, len(batch)))
                for i, m, _ in batch:
                    if i in ids:
                        model.confirm(m, True)
                with model.lock:
                    model.stats["sp_confirmed"] += len(ids)
        finally:
            quietly(c.close)

    # --- consumer ----------------------------------------------------------------------

    def consumer(self, idx, queue, use_tx):
        rng = random.Random(self.rng.random())
        who = "c%d%s" % (idx, "tx" if use_tx else "")
        while not self.stop.is_set():
            try:
                conn = connect(self.port)
            except Exception:
                time.sleep(0.05)
                continue
            try:
                self._consume(conn, rng, who, queue, use_tx)
            except (amqp.exceptions.ChannelError, amqp.exceptions.ConsumerCancelled,
                    ChannelChurn):
                time.sleep(rng.uniform(0.01, 0.2))  # the queue is being deleted: try again
            except Exception:
                if not self.stop.is_set():
                    time.sleep(0.05)
            finally:
                quietly(conn.collect)

    def _consume(self, conn, rng, who, queue, use_tx):
        model = self.model
        ch = conn.channel()
        ch.basic_qos(0, PREFETCH, False)
        if use_tx:
            ch.tx_select()
        held = []  # (delivery tag, Msg) delivered and not yet acked
        cancelled = []

        def on_message(message):
            m = model.lookup(bytes(message.body))
            if m is None:
                return
            model.delivered(m, message.delivery_info.get("redelivered"), who)
            held.append((message.delivery_tag, m))

        ch.basic_consume(queue, callback=on_message, on_cancel=lambda tag: cancelled.append(tag))
        last_ack = time.monotonic()
        while not self.stop.is_set():
            try:
                conn.drain_events(timeout=0.02)
            except socket.timeout:
                pass
            if cancelled:
                raise ChannelChurn()
            now = time.monotonic()
            if not held or (len(held) < 50 and now - last_ack < 0.05):
                continue
            last_ack = now
            # a few stay unacked until the crash: they must come back
            batch = [(t, m) for (t, m) in held if rng.random() > 0.01]
            kept = len(held) - len(batch)
            held[:] = []
            ms = [m for (t, m) in batch]
            if not use_tx:
                # before sending: if the broker dies halfway through, the first acks may
                # still have been applied
                model.ack_sent(ms, "plain-ack")
            for t, m in batch:
                ch.basic_ack(t)
            if use_tx and rng.random() < 0.05:
                ch.tx_rollback()  # discarded acks: the messages stay unacked (held)
                with model.lock:
                    for m in ms:
                        model.note(m, "rolled-back")
            elif use_tx:
                model.ack_sent(ms, "commit-sent")
                ch.tx_commit()
                model.commit_ok(ms)
            if kept and rng.random() < 0.02:
                raise ChannelChurn()  # closing the channel requeues what it holds

    # --- stream reader: consumes a stream live, from first, next, last or an offset ------

    def stream_reader(self, idx):
        """Reads the streams while they are written, trimmed and killed: every delivery must
        be an entry published to that stream, at a growing offset, in each publisher's order,
        and an entry a drain found keeps its offset. (Gaps are fine here: retention may take
        the segment being read; the drains check what is kept whole.)"""
        rng = random.Random(self.rng.random())
        while not self.stop.is_set():
            try:
                conn = connect(self.port)
            except Exception:
                self.stop.wait(0.05)
                continue
            try:
                self._read_stream(conn, rng, "sr%d" % idx)
            except Exception:
                self.stop.wait(0.05)
            finally:
                quietly(conn.collect)

    def _read_stream(self, conn, rng, who):
        s = rng.choice(self.streams)
        hi = self.model.stream_hi.get(s, 0)
        spec = rng.choice(["first", "next", "last", rng.randint(0, hi + 50)])
        where = "%s %s from %r" % (who, s, spec)
        last = {"off": None, "seq": {}, "n": 0}
        ch = conn.channel()
        ch.basic_qos(0, 100, False)

        def bad(what):
            if len(self.stream_bad) < 50:
                self.stream_bad.append("%s: %s" % (where, what))

        def on_message(message):
            off = (message.headers or {}).get("x-stream-offset")
            m = self.model.lookup(bytes(message.body))
            last["n"] += 1
            with self.model.lock:
                self.model.stats["stream_live"] += 1
            if last["n"] % 50 == 0:  # credit back (prefetch 100: never held up)
                ch.basic_ack(message.delivery_tag, multiple=True)
            if not isinstance(off, int):
                return bad("delivery without an x-stream-offset header: %r" % (off,))
            if m is None or m.queue != s:
                return bad("offset %d: %s" % (off, "unknown body %r" % bytes(message.body)[:60]
                                              if m is None else m.name()))
            if last["off"] is not None and off <= last["off"]:
                bad("offset %d after %d" % (off, last["off"]))
            if m.offset is not None and m.offset != off:
                bad("%s at offset %d, found at %d by a drain" % (m.name(), off, m.offset))
            if last["seq"].get(m.pub, -1) >= m.seq:
                bad("%s at offset %d after %s#%d" % (m.name(), off, m.pub, last["seq"][m.pub]))
            last["off"] = off
            last["seq"][m.pub] = m.seq

        ch.basic_consume(s, callback=on_message, arguments={"x-stream-offset": spec})
        until = time.monotonic() + rng.uniform(0.2, 1.5)
        while not self.stop.is_set() and time.monotonic() < until:
            try:
                conn.drain_events(timeout=0.02)
            except socket.timeout:
                pass

    # --- tidier: TIDY over the management API, again and again --------------------------

    def tidier(self):
        """The timer's TIDY comes once a second; this one keeps TIDY (and its compaction)
        running most of the round, so the kills fall inside it."""
        rng = random.Random(self.rng.random())
        auth = {"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q=", "Content-Type": "application/json"}
        body = json.dumps({"object": "MACHINE", "action": "TIDY"})
        while not self.stop.is_set():
            h = http.client.HTTPConnection(HOST, self.args.http_port, timeout=30)
            try:
                while not self.stop.is_set():
                    h.request("POST", "/api/msmq/action", body=body, headers=auth)
                    r = h.getresponse()
                    r.read()
                    if r.status != 200:
                        raise BrokerFailed("TIDY: HTTP %d" % r.status)
                    self.stop.wait(rng.uniform(0.0, 0.3))
            except (OSError, http.client.HTTPException):
                self.stop.wait(0.05)
            finally:
                h.close()

    # --- mover: q -> q;retry -> q, by lookup id, over the management API -----------------

    def mover(self):
        rng = random.Random(self.rng.random())
        port = self.args.http_port
        auth = {"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q=", "Content-Type": "application/json"}
        model = self.model

        def call(h, method, path, body=None):
            h.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers=auth)
            r = h.getresponse()
            data = r.read()
            return r.status, json.loads(data) if data else None

        def qpath(name):
            return "/api/queues/%%2F/%s" % urllib.parse.quote(name, safe="")

        while not self.stop.is_set():
            h = http.client.HTTPConnection(HOST, port, timeout=5)
            try:
                while not self.stop.is_set():
                    q = rng.choice(self.queues)
                    sub = q + ";" + SUBQUEUE
                    back = rng.random() < 0.5
                    src, dest = (sub, q) if back else (q, sub)
                    status, peek = call(h, "GET", qpath(src) + "/messages?count=%d"
                                        % rng.randint(1, 20))
                    if status != 200 or not peek:
                        self.stop.wait(0.01)
                        continue
                    for entry in peek:
                        m = model.lookup(entry["payload"].encode()
                                         if entry.get("payload_encoding") == "string"
                                         else __import__("base64").b64decode(entry["payload"]))
                        if m is None:
                            continue
                        model.move_sent(m, dest)
                        status, _ = call(h, "POST", qpath(src) + "/move",
                                         {"destination": dest, "lookup_id": entry["lookup_id"]})
                        if status == 200:
                            model.move_ok(m)
                    self.stop.wait(rng.uniform(0.005, 0.03))
            except (OSError, http.client.HTTPException, ValueError):
                if not self.stop.is_set():
                    time.sleep(0.05)
            finally:
                h.close()

    # --- chaos: purge, delete + redeclare -----------------------------------------------

    def chaos(self, horizon):
        rng = random.Random(self.rng.random())
        plan = []
        qs = self.consumed  # crash.keep is left alone: its messages are to grow old
        purged, deleted = rng.sample(qs, 2) if len(qs) > 1 else qs * 2
        if sum(self.backlog.values()) > self.args.max_backlog:
            # keep the drains short: purge the deepest queue early in the round
            purged = max(self.queues, key=lambda q: self.backlog.get(q, 0))
            deleted = rng.choice([q for q in qs if q != purged] or [purged])
            plan.append((rng.uniform(0, min(horizon, 0.2)), "purge", purged))
        elif rng.random() < 0.6:
            plan.append((rng.uniform(0, horizon), "purge", purged))
        if rng.random() < 0.6:
            plan.append((rng.uniform(0, horizon), "delete", deleted))
        plan.sort()
        conn = connect(self.port)
        t0 = time.monotonic()
        try:
            ch = conn.channel()
            for at, kind, q in plan:
                if self.stop.wait(max(0.0, at - (time.monotonic() - t0))):
                    return
                op = self.model.op_begin(kind, q)
                if kind == "purge":
                    ch.queue_purge(q)
                    self.model.op_ok(op)
                else:
                    ch.queue_delete(q)
                    self.model.op_ok(op)
                    # the redeclaration may come much later, or only after the restart
                    if self.stop.wait(rng.choice([0, 0.01, 0.2, 1.0, 3.0])):
                        return
                    ch.queue_declare(q, durable=True, auto_delete=False)
        finally:
            quietly(conn.collect)


class ChannelChurn(Exception):
    pass


# ------------------------------------------------------------------------------------------
# Draining and checking


def drain(port, queues):
    """Every message of every queue in queue order, as (body, redelivered), then requeued
    (the channel closes without acking). None for a queue that does not exist.
    basic.get, one message at a time, keeps this independent of consumer flow control."""
    found = {}
    conn = connect(port, timeout=10)
    try:
        for q in queues:
            ch = conn.channel()
            try:
                _, count, _ = ch.queue_declare(q, passive=True)
            except amqp.exceptions.NotFound:
                found[q] = None
                continue
            got = []
            while True:
                m = ch.basic_get(q, no_ack=False)
                if m is None:
                    break
                got.append((bytes(m.body), bool(m.delivery_info.get("redelivered"))))
            if len(got) != count:
                raise BrokerFailed("queue %s announced %d messages, delivered %d"
                                   % (q, count, len(got)))
            ch.close()
            found[q] = got
    finally:
        quietly(conn.close)
    return found


def stream_figures(http_port, stream):
    """The stream's first_offset and committed_offset (None when empty) from the HTTP API;
    None when there is no such queue."""
    h = http.client.HTTPConnection(HOST, http_port, timeout=10)
    try:
        h.request("GET", "/api/queues/%%2F/%s" % urllib.parse.quote(stream, safe=""),
                  headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
        r = h.getresponse()
        data = r.read()
        if r.status == 404:
            return None
        if r.status != 200:
            raise BrokerFailed("GET stream %s: HTTP %d %r" % (stream, r.status, data[:200]))
        info = json.loads(data)
        return info.get("first_offset"), info.get("committed_offset")
    finally:
        h.close()


def drain_streams(port, http_port, streams, timeout=120.0):
    """Every entry each stream keeps, read from first over AMQP 0-9-1 (basic.qos, manual acks,
    x-stream-offset first) up to the committed offset the HTTP API gives, as
    {stream: (first_offset, [(x-stream-offset, body)])}, (None, None) for a stream that is not
    there (after a restart: the broker did not restore it). Reading removes nothing. Nothing is
    published meanwhile, but a retention pass after the restart's first group commits may
    still trim the head under the reader: then the stream is read again."""
    found = {}
    conn = connect(port, timeout=10)
    try:
        for s in streams:
            for _ in range(5):
                figures = stream_figures(http_port, s)
                if figures is None:
                    found[s] = (None, None)
                    break
                found[s] = (figures[0], read_stream(conn, s, figures[1], timeout))
                if stream_figures(http_port, s) == figures:
                    break
            else:
                raise BrokerFailed("stream %s: its first offset keeps moving" % s)
    finally:
        quietly(conn.close)
    return found


def read_stream(conn, s, committed, timeout):
    """The entries of s from first up to the committed offset (None: none)."""
    got = []
    if committed is None:
        return got
    ch = conn.channel()
    ch.basic_qos(0, STREAM_PREFETCH, False)

    def on_message(message):
        got.append(((message.headers or {}).get("x-stream-offset"), bytes(message.body)))
        if len(got) % 100 == 0:  # an ack only gives the credit back
            ch.basic_ack(message.delivery_tag, multiple=True)

    ch.basic_consume(s, callback=on_message, arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + timeout
    while not got or got[-1][0] != committed:
        last = got[-1][0] if got else None
        if (isinstance(last, int) and last > committed) or time.monotonic() > deadline:
            raise BrokerFailed("stream %s: read %d entries up to offset %s, the committed "
                               "offset is %d" % (s, len(got), last, committed))
        try:
            conn.drain_events(timeout=0.5)
        except socket.timeout:
            pass
    ch.close()
    return got


def is_stream(q):
    return q.startswith(STREAM_PREFIX)


def check_streams(model, sfound, v):
    """The streams' verdicts into v: what each keeps must be a suffix of what it was given
    (retention removes whole oldest segments: never a hole), at consecutive offsets that never
    change, each entry once and in each publisher's order. Returns {key: stream} found."""
    seen = {}
    for s, (first, entries) in sorted(sfound.items()):
        if entries is None:
            v.missing_streams.append(s)
            for m in model.msgs.values():
                if m.queue == s and not m.dead and (m.baseline or m.confirmed is not None):
                    v.losses.append((m, "its stream is gone"))
            # the next round declares a new stream by that name: its offsets begin anew
            model.stream_hi.pop(s, None)
            model.stream_bytes[s] = 0
            continue
        v.stream_found += len(entries)
        hi = model.stream_hi.get(s, -1)
        if entries and entries[0][0] != first:
            v.order.append("%s: first_offset %s, the first entry read is at %s" % (
                s, first, entries[0][0]))
        last_seq = {}
        last_round = (-1, None)
        prev = None
        # what is kept that surely precedes a message of this round in s
        min_seq = {}  # publisher -> its oldest seq kept in s
        old_kept = None  # an entry kept from an earlier round (found by the last drain)
        min_confirmed = None  # the earliest confirm among this round's entries kept
        for pos, (off, body) in enumerate(entries):
            m = model.lookup(body)
            where = "%s[%s]" % (s, off)
            if not isinstance(off, int):
                v.order.append("%s: entry %d has no x-stream-offset header (%r)" % (s, pos, off))
                continue
            if prev is not None and off != prev + 1:
                v.order.append("%s: offset %d follows %d (a hole, or out of order)" % (
                    s, off, prev))
            prev = off
            if m is None:
                v.dups.append("%s: unknown body %r" % (where, body[:60]))
                continue
            if m.queue != s:
                v.dups.append("%s: %s was published to %s" % (where, m.name(), m.queue))
            if m.key in seen:
                v.dups.append("%s: %s found twice" % (where, m.name()))
                continue
            seen[m.key] = s
            if m.offset is not None and m.offset != off:
                v.order.append("%s: %s was at offset %d" % (where, m.name(), m.offset))
            elif m.offset is None and off <= hi:
                v.order.append("%s: %s is new at an offset a drain found taken before (%d)" % (
                    where, m.name(), hi))
            exp, why = model.expectation(m)
            if exp == "absent":
                v.resurrections.append((m, why, s, pos))
            if m.pub in last_seq and m.seq < last_seq[m.pub][0]:
                v.order.append("%s: %s after %s#%d at [%d]" % (
                    where, m.name(), m.pub, last_seq[m.pub][0], last_seq[m.pub][1]))
            last_seq[m.pub] = (m.seq, off)
            if m.round < last_round[0]:
                v.order.append("%s: %s (round %d) after %s (round %d)" % (
                    where, m.name(), m.round, last_round[1], last_round[0]))
            if m.round >= last_round[0]:
                last_round = (m.round, m.name())
            if m.pub not in min_seq:
                min_seq[m.pub] = m.seq
            if m.baseline:
                old_kept = old_kept or m
            elif m.confirmed is not None and (min_confirmed is None
                                              or m.confirmed < min_confirmed[0]):
                min_confirmed = (m.confirmed, m)
        kept_from = entries[0][0] if entries else first
        # all it was ever given far below its x-max-length-bytes (x2 for the entries' and
        # segments' own bytes): retention cannot have taken anything yet
        limit = STREAM_SPECS[int(s[len(STREAM_PREFIX):])]["x-max-length-bytes"]
        untrimmed = 2 * model.stream_bytes[s] < limit
        if untrimmed and kept_from:
            v.order.append("%s begins at offset %s; given %d bytes, retention at %d cannot "
                           "have taken anything" % (s, kept_from, model.stream_bytes[s], limit))
        for m in model.msgs.values():
            if m.queue != s or m.key in seen or m.dead:
                continue
            if m.baseline:
                # found by an earlier drain at m.offset: only retention may take it, with all
                # before it, so the stream must now begin past it
                if kept_from is None or m.offset >= kept_from or untrimmed:
                    v.losses.append((m, "found at offset %d before; the stream now keeps %s"
                                     % (m.offset, "nothing" if kept_from is None
                                        else "from %d on" % kept_from)))
                else:
                    v.stream_trimmed += 1
            elif m.confirmed is not None and not m.nacked:
                # confirmed this round: missing only if every entry before it went too, i.e.
                # nothing kept is surely before it (an earlier message of its publisher, one
                # of an earlier round, one confirmed before it was published)
                why = None
                if min_seq.get(m.pub, m.seq) < m.seq:
                    why = "%s#%d, published before it, is kept" % (m.pub, min_seq[m.pub])
                elif old_kept is not None:
                    why = "%s of an earlier round is kept" % old_kept.name()
                elif min_confirmed is not None and min_confirmed[0] < m.sent:
                    why = "%s, confirmed@%d before it was sent@%d, is kept" % (
                        min_confirmed[1].name(), min_confirmed[0], m.sent)
                if untrimmed:
                    why = "retention cannot have taken anything of %s yet" % s
                if why:
                    v.losses.append((m, "confirmed@%d; %s" % (m.confirmed, why)))
                else:
                    v.stream_trimmed += 1
            else:
                v.maybe_missing += 1
        for off, body in entries:
            m = model.lookup(body)
            if m is not None and seen.get(m.key) == s and m.offset is None:
                m.offset = off
        if entries and isinstance(entries[-1][0], int):
            model.stream_hi[s] = max(hi, entries[-1][0])
    return seen


class Verdict:
    def __init__(self):
        self.found = 0
        self.redelivered = 0
        self.losses = []
        self.resurrections = []
        self.order = []
        self.dups = []
        self.maybe_found = 0
        self.maybe_missing = 0
        self.stream_found = 0
        self.stream_trimmed = 0  # confirmed or found before, gone with retention's segments
        self.missing_streams = []  # streams the restart did not bring back

    def bad(self):
        return (len(self.missing_streams) + len(self.losses) + len(self.resurrections)
                + len(self.order) + len(self.dups))


def family(q):
    """The queue a subqueue belongs to ('crash.q1;retry' -> 'crash.q1')."""
    return q.split(";", 1)[0]


def check(model, found, queues):
    v = Verdict()
    seen = {}  # key -> queue where found
    for q in queues + [x + ";" + SUBQUEUE for x in queues]:
        msgs = found.get(q) or []
        last_seq = {}
        last_round = (-1, None)
        for pos, (body, redelivered) in enumerate(msgs):
            m = model.lookup(body)
            v.found += 1
            v.redelivered += redelivered
            if m is None:
                v.dups.append("%s[%d]: unknown body %r" % (q, pos, body[:60]))
                continue
            if m.queue != family(q):
                v.dups.append("%s[%d]: %s was published to %s" % (q, pos, m.name(), m.queue))
            if m.key in seen:
                v.dups.append("%s[%d]: %s found twice" % (q, pos, m.name()))
                continue
            seen[m.key] = q
            exp, why = model.expectation(m)
            if exp == "absent":
                v.resurrections.append((m, why, q, pos))
            elif exp == "maybe":
                v.maybe_found += 1
            if m.pub in last_seq and m.seq < last_seq[m.pub][0]:
                v.order.append("%s[%d]: %s after %s#%d at [%d]" % (
                    q, pos, m.name(), m.pub, last_seq[m.pub][0], last_seq[m.pub][1]))
            last_seq[m.pub] = (m.seq, pos)
            if m.round < last_round[0]:
                v.order.append("%s[%d]: %s (round %d) after %s (round %d)" % (
                    q, pos, m.name(), m.round, last_round[1], last_round[0]))
            if m.round >= last_round[0]:
                last_round = (m.round, m.name())
    for m in model.msgs.values():
        if m.key in seen or m.dead or is_stream(m.queue):
            continue  # (check_streams judges the streams' messages)
        exp, why = model.expectation(m)
        if exp == "present":
            v.losses.append((m, why))
        elif exp == "maybe":
            v.maybe_missing += 1
    return v, seen


def settle_round(model, seen):
    """What was found is the next round's baseline; everything else is dead for good."""
    for m in model.msgs.values():
        m.moved = False
        if m.key in seen:
            m.where = seen[m.key]
            m.baseline = True
            m.confirmed = m.confirmed or 0
            m.ack_maybe = False
            m.acked_commit = None
            m.returned = False
            m.nacked = False
            m.sent = 0
        elif not m.dead:
            m.dead = True
            m.dead_why = "missing after an earlier restart"
    model.ops = []
    # The dead stay known (to catch them coming back); only their last events are worth
    # printing as evidence, for the living too.
    for m in model.msgs.values():
        del m.history[:-6]


def print_evidence(v, limit=15):
    for title, items in (("LOSS", v.losses), ("RESURRECTION", v.resurrections)):
        for item in items[:limit]:
            m, why = item[0], item[1]
            where = " found in %s at [%d]" % (item[2], item[3]) if len(item) > 2 else ""
            print("  %s %s%s: %s\n      history: %s" % (
                title, m.name(), where, why, " ".join(m.history)))
        if len(items) > limit:
            print("  ... %d more %s" % (len(items) - limit, title.lower()))
    for title, items in (("ORDER", v.order), ("DUPLICATE", v.dups)):
        for s in items[:limit]:
            print("  %s %s" % (title, s))
        if len(items) > limit:
            print("  ... %d more %s" % (len(items) - limit, title.lower()))


# ------------------------------------------------------------------------------------------
# Main loop


def copy_data_dir(src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    total = 0
    for root, _, files in os.walk(src):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    if total < (256 << 20):
        shutil.copytree(src, dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("CRASH_ROUNDS", 5)))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("CRASH_SECONDS", 2)),
                    help="longest traffic window of a round before the kill")
    ap.add_argument("--publishers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--queues", type=int, default=3)
    ap.add_argument("--movers", type=int, default=1,
                    help="clients moving messages into q;retry and back (management API)")
    ap.add_argument("--rate", type=int, default=2500, help="messages a second per publisher")
    ap.add_argument("--max-backlog", type=int, default=60000,
                    help="above this many messages in the queues a round starts with a purge")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--tidy-interval", type=int, default=1)
    ap.add_argument("--segment-size", default="256k",
                    help="store segment size (small: TIDY deletes and compacts during rounds)")
    ap.add_argument("--keep-share", type=float, default=0.01,
                    help="share of publishes to %s, which no one consumes" % KEEP_QUEUE)
    ap.add_argument("--tidier", type=int, default=1,
                    help="1: a client asks for TIDY over the API all round long")
    ap.add_argument("--tidy-kill-share", type=float, default=0.6,
                    help="rounds in which the broker kills itself at a step of TIDY")
    ap.add_argument("--streams", type=int, default=len(STREAM_SPECS),
                    choices=range(len(STREAM_SPECS) + 1),
                    help="stream queues (%s0, ...; see STREAM_SPECS)" % STREAM_PREFIX)
    ap.add_argument("--stream-share", type=float, default=0.08,
                    help="share of publishes that go to the streams")
    ap.add_argument("--stream-readers", type=int, default=1,
                    help="clients reading the streams live during a round")
    ap.add_argument("--stream-publishers", type=int, default=1,
                    help="clients publishing into the streams over RabbitMQ's stream protocol")
    ap.add_argument("--stream-rate", type=int, default=300,
                    help="messages a second per stream-protocol publisher")
    ap.add_argument("--memory-budget", default=None,
                    help="the broker's memory_budget (e.g. 256k: queues page to the store)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    args.stream_names = ["%s%d" % (STREAM_PREFIX, i) for i in range(args.streams)]

    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    binary = os.environ.get("SLUICED", "build/sluiced")
    if not os.access(binary, os.X_OK):
        sys.exit("crash_test: %s is not an executable (set SLUICED)" % binary)
    workdir = tempfile.mkdtemp(prefix="sluice-crash-")
    data_dir = os.path.join(workdir, "data")
    queues = ["%s%d" % (QUEUE_PREFIX, i) for i in range(args.queues)] + [KEEP_QUEUE]
    print("crash_test: %d rounds of up to %.1fs, %d publishers, %d consumers, %d queues, "
          "seed %d, broker %s, work dir %s" % (args.rounds, args.seconds, args.publishers,
                                                args.consumers, args.queues, seed, binary,
                                                workdir))
    sys.stdout.flush()

    model = Model()
    backlog = {}
    broker = Broker(binary, workdir, data_dir, args.tidy_interval, args.segment_size,
                    args.memory_budget, bool(args.stream_names and args.stream_publishers))
    killed_at = collections.Counter()
    totals = collections.Counter()
    failed = False
    t_start = time.monotonic()
    try:
        broker.start()
        for rnd in range(args.rounds):
            before = collections.Counter(model.stats)
            # -- traffic
            conn = connect(broker.port)
            ch = conn.channel()
            for q in queues:
                ch.queue_declare(q, durable=True, auto_delete=False)
            for i, s in enumerate(args.stream_names):
                ch.queue_declare(s, durable=True, auto_delete=False,
                                 arguments=dict(STREAM_SPECS[i], **{"x-queue-type": "stream"}))
            quietly(conn.close)
            kill_after = rng.uniform(0.2, max(0.2, args.seconds))
            point = None
            if rng.random() < args.tidy_kill_share:
                # the broker kills itself there, if it gets there before the timer's kill
                point = rng.choice(CRASH_POINTS)
                if point in ("tidy-relocated", "tidy-unlinked"):
                    point += "@%d" % rng.randint(1, 4)
                elif point == "meta-synced":  # subqueues made and removed by the mover
                    point += "@%d" % rng.randint(1, 20)
                with open(broker.crash_file, "w") as f:
                    f.write(point + "\n")
            r = Round(model, rnd, broker.port, queues, args, rng, backlog)
            threads = [r.run_thread("pub%d" % i, r.publisher, i) for i in range(args.publishers)]
            for i in range(args.consumers):
                # the last consumer acks without transactions: its acks may come back
                threads.append(r.run_thread("con%d" % i, r.consumer, i,
                                            r.consumed[i % len(r.consumed)],
                                            i != args.consumers - 1 or args.consumers == 1))
            threads.append(r.run_thread("chaos", r.chaos, kill_after * 1.2))
            args.http_port = broker.http_port
            if args.movers and broker.http_port:
                threads += [r.run_thread("mover%d" % i, r.mover) for i in range(args.movers)]
            if args.tidier and broker.http_port:
                threads.append(r.run_thread("tidier", r.tidier))
            if args.stream_names:
                threads += [r.run_thread("sreader%d" % i, r.stream_reader, i)
                            for i in range(args.stream_readers)]
            args.stream_port = broker.stream_port
            if args.stream_names and broker.stream_port:
                threads += [r.run_thread("spub%d" % i, r.stream_publisher, i)
                            for i in range(args.stream_publishers)]
            t_round = time.monotonic()
            while time.monotonic() - t_round < kill_after and broker.proc.poll() is None:
                time.sleep(0.02)
            died = broker.proc.poll() is not None
            broker.kill()
            r.stop.set()
            if point and broker.crash_file != os.devnull:
                os.unlink(broker.crash_file)  # disarmed before the restart
            how = "kill -9 after %.2fs" % kill_after
            if died:
                with open(broker.log_path, "rb") as f:
                    reached = re.findall(rb"crash_at=(\S+) reached", f.read())
                step = reached[-1].decode() if reached else "?"
                killed_at[step] += 1
                how = "killed itself at %s after %.2fs" % (step, time.monotonic() - t_round)
            elif point:
                how += " (%s not reached)" % point
            for t in threads:
                t.join(30)
                if t.is_alive():
                    raise BrokerFailed("client thread %s hangs after the kill" % t.name)
            copy_data_dir(data_dir, os.path.join(workdir, "data-at-last-kill"))
            # -- sometimes crash again during or right after recovery
            extra = ""
            if rng.random() < 0.25:
                broker.start(wait=False)
                time.sleep(rng.uniform(0.0, 0.3))
                broker.kill()
                extra = ", killed again %s recovery" % ("after" if broker.listened()
                                                        else "during")
            broker.start()
            found = drain(broker.port, queues + [q + ";" + SUBQUEUE for q in queues])
            backlog = {q: len(found.get(q) or []) + len(found.get(q + ";" + SUBQUEUE) or [])
                       for q in queues}
            v, seen = check(model, found, queues)
            sfound = drain_streams(broker.port, broker.http_port, args.stream_names)
            seen.update(check_streams(model, sfound, v))
            v.order += ["live " + x for x in r.stream_bad]
            d = model.stats - before
            ops = ", ".join("%s %s%s" % (op.kind, op.queue, "" if op.ok else " (no -ok)")
                            for op in model.ops) or "no purge/delete"
            print("round %d: %s%s; published %d, confirmed %d, returned %d, "
                  "delivered %d, acks committed %d, moves %d; %s; found %d (%d maybe), missing "
                  "maybe %d; losses %d, resurrections %d, order %d, duplicates %d" % (
                      rnd + 1, how, extra, d["published"], d["confirmed"],
                      d["returned"], d["delivered"], d["acked_committed"], d["moves_ok"], ops,
                      v.found,
                      v.maybe_found, v.maybe_missing, len(v.losses), len(v.resurrections),
                      len(v.order), len(v.dups)))
            if args.stream_names:
                print("  streams: %s; found %d, gone with retention %d, read live %d, "
                      "confirmed over the stream protocol %d" % (
                    ", ".join("%s %s" % (s, "[%s..%s]" % (e[0][0], e[-1][0]) if e else
                                         "empty" if e is not None else "MISSING")
                              for s, (_, e) in sorted(sfound.items())),
                    v.stream_found, v.stream_trimmed, d["stream_live"], d["sp_confirmed"]))
            for e in r.errors:
                print("  client error: %s" % e)
            sys.stdout.flush()
            totals.update(d)
            totals["found"] += v.found
            totals["stream_found"] += v.stream_found
            totals["stream_trimmed"] += v.stream_trimmed
            totals["losses"] += len(v.losses)
            totals["resurrections"] += len(v.resurrections)
            totals["order"] += len(v.order)
            totals["dups"] += len(v.dups)
            if v.missing_streams:
                with open(broker.log_path, "rb") as f:  # the lines of the last start
                    log = f.read().decode(errors="replace").rsplit("\n==== start ", 1)[-1]
                    for line in log.splitlines():
                        if any("'%s' not restored" % s in line for s in v.missing_streams):
                            print("  STREAM GONE %s" % line)
            if v.bad():
                failed = True
                print_evidence(v)
            settle_round(model, seen)

        # -- a clean restart changes nothing
        allq = queues + [q + ";" + SUBQUEUE for q in queues]
        before = {q: [b for b, _ in (found.get(q) or [])] for q in allq} if args.rounds else {}
        status = broker.stop()
        if status != 0:
            print("clean shutdown: exit status %s" % status)
            failed = True
        broker.start()
        found = drain(broker.port, allq)
        after = {q: [b for b, _ in (found.get(q) or [])] for q in allq}
        # the streams too: the same entries at the same offsets
        allq += args.stream_names
        if args.rounds:
            before.update({s: e or [] for s, (_, e) in sfound.items()})
        sfound = drain_streams(broker.port, broker.http_port, args.stream_names)
        after.update({s: e or [] for s, (_, e) in sfound.items()})
        same = all(before.get(q, []) == after[q] for q in allq)
        print("clean restart: %d messages, %s" % (
            sum(len(x) for x in after.values()), "unchanged" if same else "CHANGED"))
        if not same:
            failed = True
            for q in allq:
                b, a = before.get(q, []), after[q]
                if b != a:
                    print("  %s: %d before, %d after; first difference at %d" % (
                        q, len(b), len(a),
                        next((i for i, (x, y) in enumerate(zip(b, a)) if x != y),
                             min(len(a), len(b)))))
        broker.stop()
    except BrokerFailed as e:
        print("FAIL: %s" % e)
        failed = True
    finally:
        broker.kill()

    tidy = collections.Counter()
    try:
        with open(broker.log_path, "rb") as f:
            for mo in re.finditer(rb"tidy: freed (\d+) segment\(s\), (\d+) bytes \((\d+) with "
                                  rb"older segments kept\), compacted (\d+) segment\(s\): "
                                  rb"(\d+) records", f.read()):
                tidy["runs"] += 1
                for k, v in zip(("freed", "bytes", "between", "compacted", "copied"),
                                mo.groups()):
                    tidy[k] += int(v)
    except OSError:
        pass
    print("tidy: %d runs completed; %d segments freed (%d with older ones kept), %d MB, %d "
          "segments compacted, %d records copied; killed at: %s" % (
              tidy["runs"], tidy["freed"], tidy["between"], tidy["bytes"] >> 20,
              tidy["compacted"], tidy["copied"],
              ", ".join("%s %d" % kv for kv in sorted(killed_at.items())) or "none"))
    print("total: %d rounds in %.0fs; published %d, confirmed %d, returned %d, delivered %d, "
          "acks committed %d, purges %d, deletes %d, moves %d; found %d (%d in streams, "
          "%d more gone with retention, %d read live); losses %d, "
          "resurrections %d, order violations %d, duplicates %d" % (
              args.rounds, time.monotonic() - t_start, totals["published"],
              totals["confirmed"], totals["returned"], totals["delivered"],
              totals["acked_committed"], totals["purges_ok"], totals["deletes_ok"],
              totals["moves_ok"],
              totals["found"], totals["stream_found"], totals["stream_trimmed"],
              totals["stream_live"], totals["losses"], totals["resurrections"], totals["order"],
              totals["dups"]))
    if failed or args.keep:
        print("work directory kept: %s (broker.log, data/, data-at-last-kill/)" % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print("crash_test: %s (seed %d)" % ("FAILED" if failed else "ok", seed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
