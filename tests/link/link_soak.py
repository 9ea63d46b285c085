#!/usr/bin/python3
"""link_soak.py - the store-and-forward soak (issue 9): transactional messages keep flowing
between three sluiced nodes while nodes are killed -9 and links are cut, and at the end of
every round each committed message must have arrived exactly once, in order, and nothing
uncommitted may have arrived.

The nodes a, b and c each run in a network namespace of their own (tests/integration/netns.py),
joined pairwise by veth links. Everything goes through the user-facing contract of issue 9:

  publish   one publisher per stream (a>b, b>c, a>c, c>a, b>a:confirm by default) on the
            sending node's loopback: tx.select, then transactions of 1-5 persistent messages
            to the default exchange with routing key
            DIRECT=TCP:<destination's address>\\private$\\soak (no port: the default 5672),
            message_id "<stream>:<tx>:<i>", body JSON; about one transaction in seven ends in
            tx.rollback instead of tx.commit. A ":confirm" stream publishes persistent
            messages outside transactions, each with a publisher confirm: confirmed ones are
            held to the rule of committed ones, unanswered ones to that of in-doubt ones
  chaos     for --seconds per round, at random (seeded): kill -9 of one or two nodes (restarted
            on the same data directory a moment later), `ip link set ... down` of a link
            (restored a moment later), and loss / delay on one direction of a link
  heal      publishers stop; every node is started, every link restored and unshaped; then
            GET /api/msmq/outgoing on every node until each outgoing queue holds 0 messages
            (--heal-timeout; a queue that does not drain is a violation: "stuck")
  drain     the queue `soak` of every node is read (basic.consume, no chaos meanwhile), once
            its message counts have stopped changing
  end       every node stops on SIGTERM and must exit 0

What a publisher knows of each transaction decides what may arrive:
  committed       tx.commit-ok received: all its messages, exactly once, in order
  rolled back     tx.rollback sent (ok or not), or the connection died before tx.commit was
                  sent: none of its messages, ever
  in doubt        tx.commit sent, the connection died before commit-ok: all or nothing
Violations: loss (a committed message missing after the heal), duplicate, uncommitted (a
rolled-back message arrived), partial (part of a transaction), order (a stream's messages not
in publish order, across rounds too), late (an in-doubt transaction arriving after the heal
that found none of it, or a committed one after the heal that found it missing), stuck (an
outgoing queue never drained), unknown (a message no publisher sent), shutdown (a node did
not exit 0).
--self-check proves the checker: two calm rounds, after whose heals it plants a duplicate, a
lost, a misordered, an uncommitted, a partial and a late message; it passes only if exactly
those are reported, each on its stream.

Usage: link_soak.py [--rounds N] [--seconds S] [--seed X] [--heal-timeout S] [--keep]
                    [--streams a>b,b>c,...] [--rate TX/S] [--no-calm-first] [--self-check]
Env:   SLUICED (default build/sluiced).
Prints the seed first (rerun with --seed), one line per round (transactions by outcome,
messages arrived, kills, cuts, shaping episodes, heal time, verdict) and a summary. Exit 0
when every round is clean, 1 on any violation (with the evidence and the kept work directory:
node logs and data), 2 when it could not run (not root, no link in this sluiced, a node that
would not start).
"""

import argparse
import collections
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))
import netns  # noqa: E402  (the harness lives beside the integration tests)

import amqp  # noqa: E402

NODES = ("a", "b", "c")
QUEUE = "soak"
LINK_PASSWORD = "soak-link-secret"
# Every node logs in to the others as its own link user (tag link): a link user speaks for
# one node only (docs/security.md), so a node that receives from two others
# knows each by its own login.
LINK_USERS = {}
for _n in NODES:
    LINK_USERS["user.sluice-link-%s" % _n] = LINK_PASSWORD
    LINK_USERS["user.sluice-link-%s.tags" % _n] = "link"
# Short timers so faults heal within a round (see docs/store-and-forward.md).
NODE_CONFIG = {
    **LINK_USERS,
    "link_password": LINK_PASSWORD,
    "link_heartbeat": 1,
    "link_retry_min_ms": 50,
    "link_retry_max_ms": 1000,
    "eod_resend_short_ms": 1000,
    "eod_resend_medium_ms": 2000,
    "eod_resend_long_ms": 4000,
    "eod_resend_final_ms": 8000,
}
# What the publisher knows of a transaction; after a heal an in-doubt one becomes one of the
# last two, by what arrived.
OPEN, COMMITTED, ROLLED_BACK, IN_DOUBT = "open", "committed", "rolled back", "in doubt"
DOUBT_ARRIVED, DOUBT_ABSENT = "in doubt, arrived", "in doubt, absent"
LOST = "lost"  # committed, and a heal found it missing (reported once)


def log(msg):
    print("link-soak: " + msg, flush=True)


# ------------------------------------------------------------------------------------------
# Publishers
# ------------------------------------------------------------------------------------------
class Tx:
    __slots__ = ("no", "n", "state", "round", "arrived")

    def __init__(self, no, n, rnd):
        self.no, self.n, self.round = no, n, rnd
        self.state = OPEN
        self.arrived = set()  # indexes of its messages seen at the destination


class Stream(threading.Thread):
    """One sender -> destination stream: a publisher thread that lives in the sender's
    namespace for the whole soak and publishes while `active` is set (between heals)."""

    def __init__(self, soak, src, dst, seed, mode="tx"):
        super().__init__(name="stream %s>%s" % (src, dst), daemon=True)
        self.soak = soak
        self.src, self.dst = src, dst
        # tx: transactions of 1-5; confirm: persistent messages outside transactions, each
        # published with a confirm (one "transaction" of one message each here)
        self.mode = mode
        self.id = "%s>%s%s" % (src, dst, "" if mode == "tx" else ":" + mode)
        self.rng = random.Random(seed)
        self.fmt = soak.nodes[dst].format_name(QUEUE, src)
        self.txs = []  # every transaction, in publish order; txs[k] has number k + 1
        self.round = 0
        self.active = threading.Event()
        self.idle = threading.Event()
        self.finish = threading.Event()
        self.errors = collections.Counter()
        self.last = None  # (tx, i) of the latest arrival, across rounds
        self.crashed = None
        self.interval = 1.0 / soak.args.rate if soak.args.rate > 0 else 0.0

    def run(self):
        try:
            with self.soak.net.ns[self.src].entered():  # every socket of this thread is there
                self._loop()
        except BaseException as e:  # reported by the soak as a harness failure
            self.crashed = repr(e)
            self.idle.set()

    def _connect(self):
        c = amqp.Connection(host="127.0.0.1:%d" % netns.AMQP_PORT, userid="guest",
                            password="guest", connect_timeout=3, read_timeout=5,
                            write_timeout=5, login_method="PLAIN")
        try:
            c.connect()
            ch = c.channel()
            if self.mode == "tx":
                ch.tx_select()
            else:
                ch.confirm_select()
        except BaseException:
            self._drop(c)
            raise
        return c, ch

    def _publish_confirmed(self, ch):
        """One message with a confirm: confirmed = committed; sent without an answer (or
        nacked) = in doubt."""
        tx = Tx(len(self.txs) + 1, 1, self.round)
        self.txs.append(tx)
        body = json.dumps({"s": self.id, "t": tx.no, "i": 0, "n": 1}).encode()
        tx.state = IN_DOUBT
        ch.basic_publish_confirm(amqp.Message(body, delivery_mode=2,
                                              message_id="%s:%d:0" % (self.id, tx.no)),
                                 exchange="", routing_key=self.fmt)
        tx.state = COMMITTED

    @staticmethod
    def _drop(conn):
        try:
            conn.collect()  # just the socket: no close handshake with a node that may be gone
        except Exception:
            pass

    def _loop(self):
        conn = ch = None
        due = time.monotonic()
        while not self.finish.is_set():
            if not self.active.is_set():
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        self._drop(conn)
                    conn = ch = None
                self.idle.set()
                self.active.wait(0.2)
                continue
            self.idle.clear()
            if self.interval:  # paced: --rate transactions per second per stream
                now = time.monotonic()
                due = max(due + self.interval, now - 1.0)
                if due > now:
                    time.sleep(due - now)
            if conn is None:
                try:
                    conn, ch = self._connect()
                except Exception as e:  # node down or restarting: again shortly
                    self.errors[type(e).__name__] += 1
                    conn = ch = None
                    time.sleep(0.1)
                    continue
            if self.mode == "confirm":
                try:
                    self._publish_confirmed(ch)
                except Exception as e:
                    self.errors[type(e).__name__] += 1
                    self._drop(conn)
                    conn = ch = None
                continue
            k = self.rng.randint(1, 5)
            tx = Tx(len(self.txs) + 1, k, self.round)
            self.txs.append(tx)
            rollback = self.rng.random() < 0.15
            try:
                for i in range(k):
                    body = json.dumps({"s": self.id, "t": tx.no, "i": i, "n": k}).encode()
                    ch.basic_publish(amqp.Message(body, delivery_mode=2,
                                                  message_id="%s:%d:%d" % (self.id, tx.no, i)),
                                     exchange="", routing_key=self.fmt)
                if rollback:
                    tx.state = ROLLED_BACK
                    ch.tx_rollback()
                else:
                    tx.state = IN_DOUBT  # from the moment tx.commit may have left
                    ch.tx_commit()
                    tx.state = COMMITTED
            except Exception as e:
                if tx.state == OPEN:  # tx.commit never sent: the node must discard it
                    tx.state = ROLLED_BACK
                self.errors[type(e).__name__] += 1
                self._drop(conn)
                conn = ch = None
        if conn is not None:
            self._drop(conn)


# ------------------------------------------------------------------------------------------
# The soak
# ------------------------------------------------------------------------------------------
class Soak:
    def __init__(self, args, workdir):
        self.args = args
        self.rng = random.Random(args.seed)
        self.workdir = workdir
        self.net = netns.Net(workdir / "net", log=log)
        self.nodes = {}
        self.streams = []
        self.planted = None
        self.late_tx = None
        self.violations = []
        self.totals = collections.Counter()

    def violate(self, kind, text):
        self.violations.append("%s: %s" % (kind, text))

    # -- setup ---------------------------------------------------------------------------
    def build(self):
        """The nodes, the links, the destination queues. Returns None, or why it cannot run."""
        for n in NODES:
            self.net.add_node(n)
        for a, b in (("a", "b"), ("b", "c"), ("a", "c")):
            self.net.link(a, b)
        for n in NODES:
            self.nodes[n] = netns.NsNode(self.net, n,
                                         config=dict(NODE_CONFIG, link_user="sluice-link-" + n))
            try:
                self.nodes[n].start()
            except netns.NetnsError as e:
                return str(e)
        for n, node in self.nodes.items():
            status, _ = node.http("GET", "/api/msmq/outgoing")
            if status != 200:
                return ("this sluiced has no store and forward: GET /api/msmq/outgoing "
                        "answered HTTP %d" % status)
            c = node.amqp()
            c.channel().queue_declare(QUEUE, durable=True, auto_delete=False)
            c.close()
        log("nodes %s in namespaces %s; links %s" % (
            " ".join(NODES), " ".join(ns.name for ns in self.net.ns.values()),
            ", ".join("%s-%s %s/%s" % (lk.a, lk.b, lk.addr[lk.a], lk.addr[lk.b])
                      for lk in self.net.links.values())))
        return None

    # -- chaos ---------------------------------------------------------------------------
    def chaos(self, seconds, calm):
        """Faults at random for `seconds` (none when calm); repairs made when due, the heal
        makes the rest. Returns the counts of what was done."""
        done = collections.Counter()
        repairs = []  # (due, kind, what)
        links = list(self.net.links.values())
        t_end = time.monotonic() + seconds
        next_fault = time.monotonic() + self.rng.uniform(0.3, 1.2)
        while time.monotonic() < t_end:
            now = time.monotonic()
            for r in [r for r in repairs if r[0] <= now]:
                repairs.remove(r)
                self.repair(r[1], r[2])
            if not calm and now >= next_fault:
                next_fault = now + self.rng.uniform(0.3, 1.5)
                kind = self.rng.choices(["kill", "cut", "shape"], weights=[4, 3, 2])[0]
                if kind == "kill":
                    alive = [n for n in NODES if self.nodes[n].alive()]
                    if len(alive) > 1:  # at most two down at once
                        n = self.rng.choice(alive)
                        self.nodes[n].kill9()
                        done["kills"] += 1
                        repairs.append((now + self.rng.uniform(0.1, 2.5), "start", n))
                elif kind == "cut":
                    up = [lk for lk in links if not lk.is_cut]
                    if up:
                        lk = self.rng.choice(up)
                        lk.cut(side=self.rng.choice([None, None, lk.a, lk.b]))
                        done["cuts"] += 1
                        repairs.append((now + self.rng.uniform(0.2, 4.0), "restore", lk))
                else:
                    free = [lk for lk in links if not lk.shaping]
                    if free:
                        lk = self.rng.choice(free)
                        loss = self.rng.choice([0.0, 0.05, 0.2, 0.5, 1.0])
                        delay = self.rng.choice([20, 100]) if loss < 0.2 else 0
                        lk.shape(delay_ms=delay, jitter_ms=delay / 4, loss=loss,
                                 side=self.rng.choice([lk.a, lk.b]),
                                 seed=self.rng.randrange(1 << 30))
                        done["shapes"] += 1
                        repairs.append((now + self.rng.uniform(0.5, 4.0), "unshape", lk))
            time.sleep(0.02)
        return done

    def repair(self, kind, what):
        if kind == "start":
            if not self.nodes[what].alive():
                self.nodes[what].start(timeout=60)
        elif kind == "restore":
            if what.is_cut:
                what.restore()
        elif kind == "unshape":
            what.unshape()

    def heal(self):
        for lk in self.net.links.values():
            lk.unshape()
            if lk.is_cut:
                lk.restore()
        for node in self.nodes.values():
            if not node.alive():
                node.start(timeout=60)

    def backlog(self):
        """Messages in every outgoing queue of every live node (None where the API fails)."""
        total = 0
        for node in self.nodes.values():
            try:
                status, outq = node.http("GET", "/api/msmq/outgoing")
                total += sum(o.get("messages", 0) for o in outq) if status == 200 else 0
            except OSError:
                pass
        return total

    def settle(self, timeout=15.0):
        """Until the destination queues' counts stop changing (3 equal looks 0.3 s apart):
        an outgoing count of 0 must already mean everything is there; this guards the verdict
        against an API that says so too early (what was missing would show as loss, and a
        later arrival as late)."""
        looks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            counts = []
            for node in self.nodes.values():
                c = node.amqp()
                try:
                    counts.append(c.channel().queue_declare(QUEUE, passive=True)[1])
                finally:
                    c.close()
            looks.append(counts)
            if len(looks) >= 3 and looks[-1] == looks[-2] == looks[-3]:
                return
            time.sleep(0.3)
        self.violate("stuck", "the destination queues kept changing %.0f s after every outgoing "
                     "queue was empty: %s" % (timeout, looks[-3:]))

    def wait_drained(self, timeout):
        """Until every outgoing queue of every node holds nothing: the seconds it took, or
        None (and a "stuck" violation per queue) after timeout."""
        t0 = time.monotonic()
        while True:
            pending = {}
            for n, node in self.nodes.items():
                try:
                    status, outq = node.http("GET", "/api/msmq/outgoing")
                except OSError as e:
                    pending[n] = "management API: %s" % e
                    continue
                if status != 200:
                    pending[n] = "GET /api/msmq/outgoing: HTTP %d %r" % (status, outq)
                    continue
                busy = [o for o in outq if o.get("messages")]
                if busy:
                    pending[n] = busy
            if not pending:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                for n, what in pending.items():
                    if isinstance(what, str):
                        self.violate("stuck", "node %s: %s" % (n, what))
                        continue
                    for o in what:
                        self.violate("stuck", "node %s outgoing queue %s: %s messages, state "
                                     "%s, last error %r" % (n, o.get("format_name"),
                                                            o.get("messages"), o.get("state"),
                                                            o.get("last_error")))
                return None
            time.sleep(0.2)

    # -- verdict -------------------------------------------------------------------------
    def drain(self, rnd):
        """Read every node's queue; check each arrival, then what should have arrived."""
        by_id = {s.id: s for s in self.streams}
        arrived = 0
        for n, node in self.nodes.items():
            for m in self.consume_all(node):
                arrived += 1
                body = m.body if isinstance(m.body, bytes) else m.body.encode()
                try:
                    d = json.loads(body)
                    s = by_id[d["s"]]
                    tx = s.txs[d["t"] - 1]
                    i = d["i"]
                    if not (0 <= i < tx.n and s.dst == n):
                        raise ValueError("not a message of this stream")
                except Exception:
                    self.violate("unknown", "node %s: %r (message_id %r)" % (
                        n, body[:200], m.properties.get("message_id")))
                    continue
                self.check_arrival(rnd, s, tx, i)
        for s in self.streams:
            for tx in s.txs:
                if tx.state == COMMITTED and len(tx.arrived) < tx.n:
                    self.violate("loss", "%s tx %d (round %d, committed): %d of %d messages "
                                 "arrived" % (s.id, tx.no, tx.round, len(tx.arrived), tx.n))
                    tx.state = LOST
                elif tx.state == IN_DOUBT:
                    if 0 < len(tx.arrived) < tx.n:
                        self.violate("partial", "%s tx %d (round %d, in doubt): %d of %d "
                                     "messages arrived" % (s.id, tx.no, tx.round,
                                                           len(tx.arrived), tx.n))
                    tx.state = DOUBT_ARRIVED if tx.arrived else DOUBT_ABSENT
        return arrived

    @staticmethod
    def consume_all(node):
        """Every message in the node's queue, in queue order (nothing arrives meanwhile: the
        outgoing queues are empty and the publishers stopped)."""
        c = node.amqp(read_timeout=10)
        try:
            ch = c.channel()
            _, count, _ = ch.queue_declare(QUEUE, passive=True)
            got = []
            ch.basic_consume(QUEUE, no_ack=True, callback=got.append)
            deadline = time.monotonic() + 60 + count / 500
            while len(got) < count:
                if time.monotonic() > deadline:
                    raise RuntimeError("node %s: %d of %d messages consumed in time"
                                       % (node.name, len(got), count))
                c.drain_events(timeout=10)
            return got
        finally:
            c.close()

    def check_arrival(self, rnd, s, tx, i):
        where = "%s tx %d msg %d" % (s.id, tx.no, i)
        if tx.state in (ROLLED_BACK, OPEN):
            self.violate("uncommitted", "%s arrived, but its transaction was never committed "
                         "(%s)" % (where, tx.state))
            return  # not a message of the stream: its order does not count
        if tx.state in (DOUBT_ABSENT, LOST):
            self.violate("late", "%s arrived in round %d, after a heal had found it missing"
                         % (where, rnd))
            return
        if i in tx.arrived:
            self.violate("duplicate", "%s arrived twice" % where)
            return
        tx.arrived.add(i)
        pos = (tx.no, i)
        if s.last is not None and pos < s.last:
            self.violate("order", "%s arrived after tx %d msg %d" % (where, s.last[0],
                                                                     s.last[1]))
        else:
            s.last = pos

    # -- the checker's own proof -----------------------------------------------------------
    PLANTS = ("duplicate", "loss", "order", "uncommitted", "partial", "late")

    def plant(self, rnd):
        """After a clean heal, make the faults the checker must see, on different streams. In
        round 1: a copy of a committed message (duplicate), a committed transaction that never
        arrives (loss), a transaction whose two messages arrive in reverse order (order), a
        message of a rolled-back transaction (uncommitted), one of the two messages of an
        in-doubt transaction (partial), and an in-doubt transaction of which nothing arrives;
        in round 2 that one's message (late). Returns [(kind, stream id)]."""
        planted = []
        n = len(self.streams)
        for k, kind in enumerate(self.PLANTS):
            ring = self.streams[k % n:] + self.streams[:k % n]
            s = next((x for x in ring if x.mode == "tx"), ring[0]) \
                if kind == "uncommitted" else ring[0]
            node = self.nodes[s.dst]
            c = node.amqp()
            ch = c.channel()

            def put(no, i, count):
                body = json.dumps({"s": s.id, "t": no, "i": i, "n": count}).encode()
                ch.basic_publish(amqp.Message(body, delivery_mode=2), exchange="",
                                 routing_key=QUEUE)

            if kind == "late":
                if rnd == 1:  # in doubt, and nothing of it arrives now
                    self.late_tx = Tx(len(s.txs) + 1, 1, rnd)
                    self.late_tx.state = IN_DOUBT
                    s.txs.append(self.late_tx)
                else:
                    put(self.late_tx.no, 0, 1)
                    planted.append((kind, s.id))
            elif rnd != 1:
                pass
            elif kind == "duplicate":
                tx = next(t for t in s.txs if t.state == COMMITTED)
                put(tx.no, 0, tx.n)
            elif kind == "uncommitted":
                tx = next(t for t in s.txs if t.state == ROLLED_BACK)
                put(tx.no, 0, tx.n)
            else:  # a transaction the publisher "committed" (or sent) after the real ones
                tx = Tx(len(s.txs) + 1, 1 if kind == "loss" else 2, rnd)
                tx.state = IN_DOUBT if kind == "partial" else COMMITTED
                s.txs.append(tx)
                if kind == "order":
                    put(tx.no, 1, 2)
                    put(tx.no, 0, 2)
                elif kind == "partial":
                    put(tx.no, 0, 2)
            c.close()
            if rnd == 1 and kind != "late":
                planted.append((kind, s.id))
        return planted

    # -- rounds --------------------------------------------------------------------------
    def run(self):
        a = self.args
        why = self.build()
        if why:
            return why
        for spec in a.streams.split(","):
            pair, _, mode = spec.partition(":")
            src, dst = pair.split(">")
            self.streams.append(Stream(self, src, dst, self.rng.randrange(1 << 30),
                                       mode or "tx"))
        for s in self.streams:
            s.start()
        t_start = time.monotonic()
        for rnd in range(1, a.rounds + 1):
            calm = a.calm_first and rnd == 1 or a.self_check
            first = {s.id: len(s.txs) for s in self.streams}
            for s in self.streams:
                s.round = rnd
                s.idle.clear()
                s.active.set()
            done = self.chaos(a.seconds, calm)
            for s in self.streams:
                s.active.clear()
            for s in self.streams:
                if not s.idle.wait(30) or s.crashed:
                    self.violate("harness", "publisher %s did not stop: %s" % (s.id, s.crashed))
            t_heal = time.monotonic()
            self.heal()
            backlog = self.backlog()
            took = self.wait_drained(a.heal_timeout)
            if took is not None:
                self.settle()
            if a.self_check and (rnd == 1 and not self.violations
                                 or rnd == 2 and self.planted is not None):
                self.planted = (self.planted or []) + self.plant(rnd)
            arrived = self.drain(rnd)
            states = collections.Counter()
            msgs = collections.Counter()
            for s in self.streams:
                for tx in s.txs[first[s.id]:]:
                    states[tx.state] += 1
                    msgs[tx.state] += tx.n
            self.totals.update(done)
            self.totals["rounds"] += 1
            self.totals["arrived"] += arrived
            for k in states:
                self.totals["tx " + k] += states[k]
                self.totals["msgs " + k] += msgs[k]
            log("round %d/%d%s: %.0f s of traffic; committed transactions + confirmed "
                "messages %d (%d msgs), rolled back %d, in doubt %d (arrived whole %d, absent "
                "%d); %d msgs arrived; kills %d, cuts %d, loss/delay %d; %d msgs still outgoing "
                "at the heal, drained in %s; %s" % (
                    rnd, a.rounds, " (calm)" if calm else "", a.seconds, states[COMMITTED],
                    msgs[COMMITTED], states[ROLLED_BACK],
                    states[DOUBT_ARRIVED] + states[DOUBT_ABSENT], states[DOUBT_ARRIVED],
                    states[DOUBT_ABSENT], arrived, done["kills"], done["cuts"], done["shapes"],
                    backlog, "%.1f s" % (time.monotonic() - t_heal) if took is not None
                    else "NEVER (gave up after %d s)" % a.heal_timeout,
                    "ok" if not self.violations else "%d VIOLATIONS" % len(self.violations)))
            if self.violations and not a.self_check:
                break
            if time.monotonic() - t_start > a.max_seconds:
                log("stopping after %d rounds: --max-seconds %d reached" % (rnd, a.max_seconds))
                break
        for s in self.streams:
            s.finish.set()
            s.active.set()
        for s in self.streams:
            s.join(10)
        # The end is a clean stop: every node must exit 0 on SIGTERM.
        for n, node in self.nodes.items():
            rc = node.stop(timeout=30)
            if rc != 0:
                self.violate("shutdown", "node %s exit %r after SIGTERM" % (n, rc))
        return None


def self_check_verdict(soak, args, workdir):
    """Exactly the planted faults must have been reported, each on its stream."""
    if soak.planted is None:
        log("SELF-CHECK: FAIL: the calm round was not clean, nothing was planted:")
        for v in soak.violations[:40]:
            log("  " + v)
        log("node logs and data kept in %s" % workdir)
        return 1
    seen = collections.Counter()
    for v in soak.violations:
        kind, _, rest = v.partition(": ")
        seen[(kind, rest.split(" ", 1)[0])] += 1
    want = collections.Counter(soak.planted)
    missed = want - seen
    extra = seen - want
    for v in soak.violations:
        log("  reported: " + v)
    if missed or extra:
        log("SELF-CHECK: FAIL: missed %s, unexpected %s" % (sorted(missed), sorted(extra)))
        log("node logs and data kept in %s" % workdir)
        return 1
    log("SELF-CHECK: PASS: the checker reported each planted fault (%s) and nothing else"
        % ", ".join("%s on %s" % p for p in soak.planted))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("LINK_ROUNDS", 3)))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("LINK_SECONDS", 8)),
                    help="traffic and faults per round")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--heal-timeout", type=float, default=90,
                    help="seconds for every outgoing queue to drain after a heal")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="stop starting rounds after this long (default: rounds x (seconds + "
                    "heal timeout))")
    ap.add_argument("--streams", default="a>b,b>c,a>c,c>a,b>a:confirm",
                    help="X>Y: transactions from X to Y; X>Y:confirm: persistent messages "
                    "with publisher confirms, outside transactions")
    ap.add_argument("--rate", type=float, default=100,
                    help="transactions per second per stream (0: as fast as they commit)")
    ap.add_argument("--self-check", action="store_true",
                    help="prove the checker: two calm rounds; a duplicate, a lost, a misordered, "
                    "an uncommitted, a partial and a late message are planted after the heals; "
                    "each must be reported, and nothing else")
    ap.add_argument("--calm-first", dest="calm_first", action="store_true", default=True,
                    help="round 1 without faults (the default)")
    ap.add_argument("--no-calm-first", dest="calm_first", action="store_false")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    if args.self_check:
        args.rounds, args.calm_first = 2, True
    if args.max_seconds is None:
        args.max_seconds = args.rounds * (args.seconds + args.heal_timeout)
    for spec in args.streams.split(","):
        pair, _, mode = spec.partition(":")
        src, _, dst = pair.partition(">")
        if src not in NODES or dst not in NODES or src == dst or mode not in ("", "confirm"):
            ap.error("--streams: %r is not X>Y or X>Y:confirm with X, Y two of %s"
                     % (spec, ",".join(NODES)))
    argv = [a for i, a in enumerate(sys.argv)
            if a != "--seed" and (i == 0 or sys.argv[i - 1] != "--seed")
            and not a.startswith("--seed=")]
    log("seed %d (rerun: %s --seed %d)" % (args.seed, " ".join(argv), args.seed))
    why = netns.unavailable_reason()
    if why:
        log("cannot run: " + why)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="sluice-link-soak-"))
    soak = Soak(args, workdir)
    t0 = time.monotonic()
    try:
        why = soak.run()
    finally:
        soak.net.close()
    if why:
        log("cannot run: %s (work directory %s)" % (why, workdir))
        return 2
    t = soak.totals
    log("%d rounds in %.0f s, seed %d: committed transactions + confirmed messages %d (%d "
        "msgs), rolled back %d (%d msgs), in doubt %d (%d arrived whole, %d absent); %d msgs "
        "arrived; kills %d, cuts %d, loss/delay %d" % (
            t["rounds"], time.monotonic() - t0, args.seed, t["tx " + COMMITTED],
            t["msgs " + COMMITTED], t["tx " + ROLLED_BACK], t["msgs " + ROLLED_BACK],
            t["tx " + DOUBT_ARRIVED] + t["tx " + DOUBT_ABSENT], t["tx " + DOUBT_ARRIVED],
            t["tx " + DOUBT_ABSENT], t["arrived"], t["kills"], t["cuts"], t["shapes"]))
    if args.self_check:
        return self_check_verdict(soak, args, workdir)
    if soak.violations:
        kinds = collections.Counter(v.split(":", 1)[0] for v in soak.violations)
        log("VERDICT: FAIL, %d violations (%s); seed %d" % (
            len(soak.violations), ", ".join("%s %d" % kv for kv in sorted(kinds.items())),
            args.seed))
        for v in soak.violations[:40]:
            log("  " + v)
        if len(soak.violations) > 40:
            log("  ... %d more" % (len(soak.violations) - 40))
        log("node logs and data kept in %s" % workdir)
        return 1
    log("VERDICT: PASS: every committed message arrived exactly once and in order per "
        "stream, nothing uncommitted arrived, no transaction arrived in part")
    if args.keep:
        log("work directory kept: %s" % workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
