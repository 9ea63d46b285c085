"""cluster_soak.py - the cluster's Jepsen-style fault test (issue 31): a nemesis loop.

Role: starts the harness (tests/integration/cluster_harness.py: etcd, three nodes and a remote
node in network namespaces), runs the workload (workload.py) and, round after round, injects
one fault of a rotation, heals it, waits for a stable cluster (a leader with three in sync),
and every K rounds stops the workload, drains every queue and the remote inbox, and checks the
history (checker.py). Prints per fault kind: rounds, failover times (fault to the next
confirm, min / median / max) and the messages confirmed, lost, duplicated and resurrected;
then the same for the streams (issue 47: the stream publishers and reader of workload.py, each
stream read whole from `first` on the leader, the followers' stream files compared; a long
stream spans --long-periods periods). --no-streams turns them off, --no-stream-proto the
stream-protocol publisher (which needs the nodes' `listeners.stream`, set here).

  make cluster-smoke   --self-check, then the leader kill -9 rounds (CI)
  make cluster-soak    ROUNDS=N rounds of every fault

A violation is kept: the period's history (history-K.jsonl), every node's log and etcd's
under OUT/failure-K/, and the run stops (unless --keep-going). Exit 1 on any violation or
harness error. Every wait is bounded; the harness is closed on every exit (namespaces,
mounts, processes).
"""

import argparse
import collections
import datetime
import json
import os
import random
import re
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from checker import check  # noqa: E402
from cluster_harness import ClusterHarness, HarnessError, self_check, wait_until  # noqa: E402
from workload import STREAM_PORT, History, Workload, drain  # noqa: E402

FAULTS = ["kill9-leader", "kill9-follower", "pause-leader", "cut-leader-followers",
          "cut-leader-etcd", "fill-follower-disk", "slow-follower", "restart-leader",
          "isolate-leader"]
CONFIRMING = ("P-keep", "P-work", "T")
# restart-leader (issue 46): kill -9 and a new process at once on the same addresses and
# replication port, which may answer a follower's probe before it sees the port refused;
# isolate-leader: every packet to and from the leader dropped (followers and etcd), so
# nothing refuses and only the lease deposes it, and it must confirm nothing after
LEADER_FAULTS = ("kill9-leader", "pause-leader", "cut-leader-etcd", "restart-leader",
                 "isolate-leader")
_SERVING = re.compile(r"^(\S+)Z \[info\] cluster: leader of \S+, epoch (\d+): serving", re.M)


def serving_since(h, name, after_wall):
    """Wall time at which node `name` logged that it serves as leader, the first such line
    after after_wall (the cluster's own election time, without the clients'); None if none."""
    try:
        text = h.nodes[name].log_path.read_text(errors="replace")
    except OSError:
        return None
    for m in _SERVING.finditer(text):
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        if t > after_wall:
            return t
    return None


def first_confirm_after(hist, t, timeout, not_node=None):
    """Seconds from t to the first confirm (publish / tx commit ok) of an operation invoked
    after t (one in flight at the fault may be confirmed by the old leader: not a failover),
    by a node other than not_node when given (the first confirm of a new leader); None if
    none within timeout."""
    deadline = time.monotonic() + timeout
    seen = 0
    invoked = {}
    while time.monotonic() < deadline:
        with hist.lock:
            ops = hist.ops[seen:]
            seen += len(ops)
        for op in ops:
            if op["p"] not in CONFIRMING or op["f"] not in ("publish", "tx-publish"):
                continue
            key = (op["p"], op["ids"][0])
            if op["type"] == "invoke":
                invoked[key] = op["t"]
            elif op["type"] == "ok" and invoked.get(key, -1) > t and \
                    (not_node is None or op.get("node") != not_node):
                return op["t"] - t
        time.sleep(0.02)
    return None


def wait_confirms(hist, n, timeout):
    """Until n more confirms have come (the load is flowing before a fault)."""
    def count():
        with hist.lock:
            return sum(1 for op in hist.ops if op["type"] == "ok" and op["f"] in
                       ("publish", "tx-publish"))
    target = count() + n
    wait_until(lambda: count() >= target, timeout, "%d confirms" % n, interval=0.05)


class Soak:
    def __init__(self, args):
        self.a = args
        self.out = args.out
        os.makedirs(self.out, exist_ok=True)
        self.rng = random.Random(args.seed)
        self.stats = {k: {"rounds": 0, "failover": [], "confirmed": 0, "lost": 0,
                          "duplicated": 0, "resurrected": 0, "other": 0, "late": 0, "elect": [],
                          "no_confirm": 0, "streams": collections.Counter()}
                      for k in FAULTS}
        self.period = 0
        self.long = None  # [harness, name, periods so far, its s-publish ops of earlier ones]
        self.nlong = 0
        self.log_f = open(os.path.join(self.out, "soak.log"), "a")

    def log(self, msg):
        line = "%s %s" % (time.strftime("%H:%M:%S"), msg)
        print(line, flush=True)
        self.log_f.write(line + "\n")
        self.log_f.flush()

    def mark(self, hist, kind, lead, f, **kw):
        op = hist.mark(kind, leader=lead, follower=f, **kw)
        self.fault_wall = op["wall"]
        return op["t"]

    # -- one fault ----------------------------------------------------------------------
    def inject(self, h, hist, kind):
        """Inject, hold, heal; returns the failover time (or None)."""
        ttl = h.ttl
        lead = h.wait_leader(30)
        followers = h.followers(lead)
        f = self.rng.choice(followers)
        fo = None
        # t: the moment the fault is in place (a confirm invoked before may still come)
        if kind == "kill9-leader":
            h.kill9(lead)
            t = self.mark(hist, kind, lead, f)
            fo = first_confirm_after(hist, t, 30, not_node=lead)
        elif kind == "kill9-follower":
            h.kill9(f)
            t = self.mark(hist, kind, lead, f)
            fo = first_confirm_after(hist, t, 15)
        elif kind == "pause-leader":
            h.pause(lead)
            t = self.mark(hist, kind, lead, f)
            # longer than the lease: the others elect a new leader meanwhile
            fo = first_confirm_after(hist, t, 30, not_node=lead)
            h.resume(lead)
        elif kind == "cut-leader-followers":
            h.cut_leader_from_followers(lead)
            t = self.mark(hist, kind, lead, f)
            # the leader keeps its lease: the ISR shrinks to it alone, below
            # min_insync_replicas its publishers are blocked until the heal
            time.sleep(2 * ttl + 1)
            h.heal_links()
            fo = first_confirm_after(hist, t, 30)
        elif kind == "cut-leader-etcd":
            h.cut_from_etcd(lead)
            t = self.mark(hist, kind, lead, f)
            fo = first_confirm_after(hist, t, 30, not_node=lead)
            h.heal_links()
        elif kind == "fill-follower-disk":
            h.fill_disk(f)
            t = self.mark(hist, kind, lead, f)
            time.sleep(ttl + 1)  # past the ISR's lag limit: the full follower leaves it
            fo = first_confirm_after(hist, t, 15)
            h.unfill_disk(f)
        elif kind == "restart-leader":
            h.kill9(lead)
            t = self.mark(hist, kind, lead, f)
            h.restart(lead)
            # the killed process confirms nothing invoked after t; the new one may lead
            fo = first_confirm_after(hist, t, 30)
        elif kind == "isolate-leader":
            h.cut_leader_from_followers(lead)
            h.cut_from_etcd(lead)
            t = self.mark(hist, kind, lead, f)
            fo = first_confirm_after(hist, t, 30, not_node=lead)
            h.heal_links()
        elif kind == "slow-follower":
            backend = h.slow_link(lead, f, delay_ms=40, jitter_ms=20)
            t = self.mark(hist, kind, lead, f, backend=backend)
            fo = first_confirm_after(hist, t, 15)
            time.sleep(3)
            h.unslow()
        h.heal_all()
        hist.mark("healed", kind=kind)
        new = h.wait_stable(120)
        if kind in LEADER_FAULTS and new != lead:
            t_serve = serving_since(h, new, self.fault_wall)
            if t_serve is not None:
                self.stats[kind]["elect"].append(t_serve - self.fault_wall)
        return fo

    # -- a period: workload, rounds, drain, check ---------------------------------------
    def run_period(self, h, kinds):
        k = self.period
        self.period += 1
        path = os.path.join(self.out, "history-%d.jsonl" % k)
        hist = History(path)
        # the long stream: one per --long-periods periods of a harness, checked whole (with
        # the messages of its earlier periods) after each, deleted after its last
        long_name = None
        if not self.a.no_streams and self.a.long_periods:
            if self.long is None or self.long[0] is not h or \
                    self.long[2] >= self.a.long_periods:
                self.nlong += 1
                self.long = [h, "long-%d" % self.nlong, 0, []]
            self.long[2] += 1
            long_name = self.long[1]
        last_long = bool(long_name) and self.long[2] >= self.a.long_periods
        wl = Workload(h, hist, k, link=not self.a.no_link, streams=not self.a.no_streams,
                      stream_proto=not self.a.no_stream_proto, long_stream=long_name,
                      long_roll=last_long)
        wl.start()
        fos = []
        try:
            for kind in kinds:
                wait_confirms(hist, 10, 60)
                t0 = time.monotonic()
                fo = self.inject(h, hist, kind)
                fos.append((kind, fo))
                self.log("period %d %-22s failover %s round %.1fs" % (
                    k, kind, "%.2fs" % fo if fo is not None else "none",
                    time.monotonic() - t0))
            wait_confirms(hist, 5, 60)
        finally:
            wl.finish()
        drain(h, hist, wl)
        hist.close()
        prior = self.long[3] if long_name else []
        res = check(hist.ops, one_fault=len(fos) == 1,
                    paused=any(kind == "pause-leader" for kind, _ in fos), prior_streams=prior)
        if long_name:
            prior.extend(op for op in hist.ops if op["f"] == "s-publish" and
                         op["q"] == long_name)
        self.last = (res, fos, hist)
        s = res.summary()
        self.log("period %d checked: %s; client errors %s" % (k, json.dumps(s), wl.errors))
        for kind, fo in fos:
            st = self.stats[kind]
            st["rounds"] += 1
            if fo is None:
                st["no_confirm"] += 1
            else:
                st["failover"].append(fo)
            # a period of one round is that fault's; of several, counted for each
            st["confirmed"] += s["confirmed"] // len(fos)
            st["lost"] += s["lost"]
            st["duplicated"] += s["duplicated"]
            st["resurrected"] += s["resurrected"]
            st["other"] += s["order"] + s["atomicity"] + s["phantom"] + s["two_leaders"]
            st["late"] += s["late_confirms"]
            ss = s["streams"]
            for key, v in ss.items():
                # counts split over the period's rounds like `confirmed`; violations whole
                st["streams"][key] += v // len(fos) if key in (
                    "published", "sends", "confirmed", "unconfirmed", "read",
                    "retried_dups", "dedup_retried", "live", "retention_gone",
                    "declared") else v
        if not res.ok:
            dest = h.snapshot(os.path.join(self.out, "failure-%d" % k))
            with open(os.path.join(dest, "violations.txt"), "w") as f:
                for e in res.errors:
                    f.write("%s %s %s\n" % e)
            self.log("VIOLATIONS in period %d (%d), evidence in %s:" % (k, len(res.errors),
                                                                        dest))
            for e in res.errors[:20]:
                self.log("  %s %s %s" % e)
        elif not self.a.keep:
            os.unlink(path)
        return res.ok

    def report(self):
        rows = []
        hdr = "%-22s %6s %8s %8s %8s %9s %5s %5s %5s %5s %5s %5s" % (
            "fault", "rounds", "fo_min", "fo_med", "fo_max", "confirmed", "lost", "dup",
            "resur", "other", "late", "nofo")
        rows.append(hdr)
        for kind in FAULTS:
            st = self.stats[kind]
            if not st["rounds"]:
                continue
            fo = st["failover"]
            f3 = ("%.2f" % min(fo), "%.2f" % statistics.median(fo), "%.2f" % max(fo)) \
                if fo else ("-", "-", "-")
            rows.append("%-22s %6d %8s %8s %8s %9d %5d %5d %5d %5d %5d %5d" % (
                (kind, st["rounds"]) + f3 + (st["confirmed"], st["lost"], st["duplicated"],
                                              st["resurrected"], st["other"], st["late"],
                                              st["no_confirm"])))
        if not self.a.no_streams:
            rows.append("streams: %-20s %6s %9s %9s %7s %7s %5s %5s %7s %5s %5s" % (
                "fault", "rounds", "confirmed", "unconfirm", "read", "live", "lost", "dup",
                "retried", "order", "other"))
            for kind in FAULTS:
                st = self.stats[kind]
                if not st["rounds"]:
                    continue
                ss = st["streams"]
                rows.append("streams: %-20s %6d %9d %9d %7d %7d %5d %5d %7d %5d %5d" % (
                    kind, st["rounds"], ss["confirmed"], ss["unconfirmed"], ss["read"],
                    ss["live"], ss["lost"], ss["duplicated"], ss["retried_dups"],
                    ss["order"] + ss["live_order"], ss["offset"] + ss["phantom"] +
                    ss["replica"] + ss["taken_back"] + ss["gone"]))
        for kind in LEADER_FAULTS:
            el = self.stats[kind]["elect"]
            if el:
                rows.append("%s: fault to the new leader's 'serving' log line: min %.2f median "
                            "%.2f max %.2f s over %d" % (kind, min(el), statistics.median(el),
                                                         max(el), len(el)))
        for r in rows:
            self.log(r)
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(self.stats, f, indent=1)

    def main(self):
        a = self.a
        faults = a.faults.split(",") if a.faults else FAULTS
        for f in faults:
            if f not in FAULTS:
                raise SystemExit("unknown fault %s (%s)" % (f, ", ".join(FAULTS)))
        if a.self_check:
            self_check(os.path.join(self.out, "self-check"), log=self.log)
        if not a.rounds:
            return 0
        t_start = time.monotonic()
        self.harness_errors = 0
        try:
            ok = self.loop(faults, t_start)
        finally:  # also on ^C / SIGTERM: the table of what ran
            self.report()
            self.log("harness errors: %d" % self.harness_errors)
        self.log("%s after %.0f s" % ("PASS" if ok else "FAIL", time.monotonic() - t_start))
        return 0 if ok else 1

    def loop(self, faults, t_start):
        a = self.a
        ok = True
        r = 0
        while r < a.rounds:
            # one harness; after a harness error (a wait that timed out: the cluster did not
            # come back) its logs are kept and, with --keep-going, a fresh one goes on
            h = ClusterHarness(os.path.join(self.out, "cluster-%d" % self.harness_errors),
                               etcd_members=a.etcd_members, ttl=a.ttl, log=self.log)
            if not a.no_streams and not a.no_stream_proto:
                for n in h.nodes.values():  # RabbitMQ's stream protocol, for SP
                    n.config["listeners.stream"] = str(STREAM_PORT)
            try:
                lead = h.start()
                self.log("cluster up: leader %s, etcd members %d, lease_ttl %d" % (
                    lead, a.etcd_members, a.ttl))
                while r < a.rounds:
                    if a.max_seconds and time.monotonic() - t_start > a.max_seconds:
                        self.log("time is up after %d rounds" % r)
                        r = a.rounds
                        break
                    kinds = [faults[(r + j) % len(faults)] for j in
                             range(min(a.check_every, a.rounds - r))]
                    r += len(kinds)
                    if not self.run_period(h, kinds):
                        ok = False
                        if not a.keep_going:
                            r = a.rounds
                            break
            except Exception:
                ok = False
                self.harness_errors += 1
                self.log("HARNESS ERROR %d:\n%s" % (self.harness_errors,
                                                    traceback.format_exc()))
                try:
                    dest = h.snapshot(os.path.join(self.out, "harness-error-%d"
                                                   % self.harness_errors))
                    self.log("logs in %s" % dest)
                except Exception:
                    pass
                if not a.keep_going or self.harness_errors >= 5:
                    r = a.rounds
            finally:
                h.close()
        return ok


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=14)
    ap.add_argument("--check-every", type=int, default=1, help="rounds per drain and check")
    ap.add_argument("--faults", default="", help="comma-separated subset of " +
                    ",".join(FAULTS))
    ap.add_argument("--etcd-members", type=int, default=3, choices=(1, 3))
    ap.add_argument("--ttl", type=int, default=2, help="cluster.lease_ttl")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default="/tmp/cluster-soak-%d" % os.getpid())
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--no-link", action="store_true")
    ap.add_argument("--no-streams", action="store_true",
                    help="no stream workload (SA, SB, SP) and no stream checks")
    ap.add_argument("--no-stream-proto", action="store_true",
                    help="no stream-protocol publisher (SP)")
    ap.add_argument("--long-periods", type=int, default=8,
                    help="periods one long stream spans (0: none)")
    ap.add_argument("--keep", action="store_true", help="keep every history")
    ap.add_argument("--keep-going", action="store_true", help="go on after a violation")
    ap.add_argument("--max-seconds", type=float, default=0)
    a = ap.parse_args(argv)
    if a.seed is None:
        a.seed = random.randrange(1 << 30)
    return a


def main(argv):
    a = parse_args(argv)
    s = Soak(a)
    s.log("seed %d, out %s" % (a.seed, a.out))
    return s.main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
