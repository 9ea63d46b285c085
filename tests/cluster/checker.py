"""checker.py - judges a history of the cluster workload (workload.py), Jepsen style.

Role: given every operation (invoke / ok / fail / info, with message ids) and the final drain
of every queue after the faults were healed, report each violation of what the cluster
promises (docs/cluster.md, docs/cluster-testing.md). Pure: it reads a list of dicts, nothing
else, so tests/cluster/test_checker.py proves it on synthetic histories.

The rules (a message is its id; `ok` publish = confirmed, or in a committed transaction):
  lost        a confirmed message that is not in the final drain, unless its removal may
              have happened: an ack was sent for it (ok or info), a purge of its queue began
              after its confirm, or its queue's deletion began
  duplicated  a message more than once in the final drain, or (remote inbox) more than once
              at the remote node at all
  redelivered a message delivered again (during the run or in the drain) after an earlier
              delivery must carry redelivered=true: a message delivered but not acked when
              the leader changed (or its consumer's connection died) may come again, flagged.
              A second delivery without the flag is reported as `duplicate-unflagged`
  resurrected a message whose ack was committed (tx.commit-ok), or which a purge-ok covered
              (confirmed before the purge began), delivered again afterwards or in the drain;
              a queue whose delete-ok came, found again in the drain
  order       per queue and per publisher, the messages never delivered before (redelivered
              false) come in the order they were published, in the drain and in each
              consumer's deliveries; at the remote node all of them
  atomicity   a transaction's messages are all in the drain or none of them
  phantom     a message in a queue that nobody published (to that queue)
  two-leaders (with one_fault=True, for a period with a single fault) the confirms, in the
              order they came, go from node A to node B and later from a node back to one
              it had left: leadership moves once per fault (the deposed or killed node comes
              back as a follower), so a return means two nodes confirmed in the same era.
              Except after SIGSTOP of the leader (paused=True): a confirm the old leader
              released while its lease held (the group on every ISR disk, so on the new
              leader too) but had not yet written to the socket when it was stopped goes out
              when it wakes, after the new leader's first ones. No lease can prevent that (a
              process can stop between any check and any act); it is counted (late_confirms)
              and what it confirmed is held to every rule above, which is what matters: a
              confirm for something the new leader lacks would show as lost
The result counts confirmed, lost, duplicated, resurrected and every violation in full.

Streams (issue 47; `s-publish` operations, `s-read` and `s-replicas` lines of the drain). A
stream keeps what it is given, and the drain reads each whole from `first` on the leader. A
stream's publisher retries an unconfirmed message under the same id (its SEQ is the
publisher's sequence), as RabbitMQ's stream clients do; RabbitMQ promises at-least-once for
that: a publish whose confirm did not come may have been written, so its retry may add it a
second time (over AMQP 0-9-1 nothing deduplicates), while a confirmed publish is written once.
Over the stream protocol a named publisher (a reference) is deduplicated by publishing id, so
its retries add nothing. Hence:
  s-lost      a confirmed message not in the read of its stream
  s-duplicated a message more often in its stream than it was sent; or more than once when
              every send of it was confirmed (no unknown outcome to explain the copy); or, for
              a deduplicating publisher (`dedup` on its s-publish), more than once at all.
              Copies the rule allows are counted (s_retried_dups)
  s-order     per stream and per publisher, the first copies of its messages in offset order
              do not follow its sequence (one message in flight at a time: its messages are
              appended in sequence order, a retry's copy after the original)
  s-offset    the entries' x-stream-offset not consecutive from 0 up to the committed offset
              the HTTP API gave, or the message count it gave is not the entries read. A
              stream with retention (`retention` on its s-read: it deletes its oldest whole
              segments) starts at the first_offset the API gave, and keeps a suffix: its
              (one) publisher's messages before the first one kept are not lost
              (retention_gone counts them); from it on, s-lost holds
  s-phantom   an entry that nobody sent to that stream
  s-replica   the three nodes' stream files not the same bytes once they are in sync (the
              followers serve no reads: what they hold is compared, not read)
  s-taken-back an entry a live reader (`s-deliver`) got during the faults that the final read
              does not have at that offset: a stream hands out only entries on every in-sync
              replica, which no failover can take back
  s-live-order a live reader's offsets not increasing (it resumes after the last it got)
  s-gone      a stream declared during the faults (`s-declare`, its declare-ok came) that is
              not there after them (its confirmed messages are s-lost too)
"""

import collections
import json


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def parse_id(mid):
    """'PROC:period:seq' -> (PROC, seq)."""
    proc, _, rest = mid.partition(":")
    return proc, int(rest.rpartition(":")[2])


class Result:
    def __init__(self):
        self.errors = []  # (kind, message id or queue, detail)
        self.confirmed = 0
        self.unconfirmed = 0
        self.linked_confirmed = 0
        self.delivered = 0
        self.redelivered_ok = 0
        self.leader_changes = 0
        self.late_confirms = 0
        self.s = collections.Counter()  # the streams' counts (stream_summary)

    def add(self, kind, what, detail):
        self.errors.append((kind, what, detail))

    def count(self, kind):
        return sum(1 for k, _, _ in self.errors if k == kind)

    @property
    def ok(self):
        return not self.errors

    def summary(self):
        return {"confirmed": self.confirmed, "linked_confirmed": self.linked_confirmed,
                "unconfirmed": self.unconfirmed, "lost": self.count("lost"),
                "duplicated": self.count("duplicated") + self.count("duplicate-unflagged"),
                "resurrected": self.count("resurrected"), "order": self.count("order"),
                "atomicity": self.count("atomicity"), "phantom": self.count("phantom"),
                "two_leaders": self.count("two-leaders"),
                "leader_changes": self.leader_changes, "late_confirms": self.late_confirms,
                "redelivered_flagged": self.redelivered_ok, "streams": self.stream_summary()}

    def stream_summary(self):
        out = {k: self.s[k] for k in ("published", "sends", "confirmed", "unconfirmed", "read",
                                      "retried_dups", "dedup_retried", "live",
                                      "retention_gone", "earlier", "declared")}
        for k in ("lost", "duplicated", "order", "offset", "phantom", "replica", "taken_back",
                  "live_order", "gone"):
            out[k] = self.count("s-" + k.replace("_", "-"))
        return out

    def __repr__(self):
        return "Result(%s, %d errors: %s)" % (self.summary(), len(self.errors),
                                              self.errors[:10])


def leader_runs(ops):
    """The nodes that gave confirms (the streams' too), in the order the confirms came, runs
    collapsed."""
    runs = []
    for op in sorted((o for o in ops if o["type"] == "ok" and o.get("node") and
                      o["f"] in ("publish", "tx-publish", "s-publish")), key=lambda o: o["t"]):
        if not runs or runs[-1][0] != op["node"]:
            runs.append([op["node"], op["t"], op["t"]])
        else:
            runs[-1][2] = op["t"]
    return runs


def check(ops, one_fault=False, paused=False, prior_streams=()):
    """prior_streams: the s-publish operations of earlier periods into a stream that this
    period reads again (the soak's long stream): judged with this period's read."""
    r = Result()
    pub = {}          # id -> {"q", "state": ok|info, "t_ok", "tx": batch key or None}
    batches = []      # (ids, state)
    acks = {}         # id -> "ok" | "info" (ok wins), with the time of the ok
    ack_ok_t = {}
    purges = collections.defaultdict(list)  # queue -> [(t_invoke, state, t_ok)]
    deletes = {}      # queue -> "ok" | "info"
    deliveries = collections.defaultdict(list)  # id -> [(t, redelivered, where)]
    consumer_streams = collections.defaultdict(list)  # (proc, queue) -> [(id, redelivered)]
    drains = {}       # queue -> [(id, redelivered)]
    remote = set()
    exists = {}
    invoked = {}
    for op in ops:
        f, ty, t = op["f"], op["type"], op["t"]
        if f in ("publish", "tx-publish"):
            key = (op["p"], f, tuple(op["ids"]))
            if ty == "invoke":
                invoked[key] = t
                for mid in op["ids"]:
                    pub[mid] = {"q": op["q"], "state": "info", "t_ok": None,
                                "t_inv": t, "tx": tuple(op["ids"]) if f == "tx-publish"
                                else None}
            elif ty == "ok":
                for mid in op["ids"]:
                    pub[mid]["state"] = "ok"
                    pub[mid]["t_ok"] = t
            elif ty == "fail":
                for mid in op["ids"]:
                    pub[mid]["state"] = "fail"
            if f == "tx-publish" and ty in ("ok", "info"):
                batches.append((tuple(op["ids"]), ty))
        elif f == "deliver" and ty == "ok":
            for mid in op["ids"]:
                deliveries[mid].append((t, op.get("redelivered", False), op["p"]))
                consumer_streams[(op["p"], op["q"])].append((mid, op.get("redelivered", False)))
        elif f == "ack":
            for mid in op["ids"]:
                if ty == "ok":
                    acks[mid] = "ok"
                    ack_ok_t[mid] = t
                elif ty in ("invoke", "info") and acks.get(mid) != "ok":
                    acks[mid] = "info"
        elif f == "purge":
            if ty == "invoke":
                purges[op["q"]].append([t, "info", None])
            elif ty == "ok" and purges[op["q"]]:
                purges[op["q"]][-1][1] = "ok"
                purges[op["q"]][-1][2] = t
        elif f == "delete":
            if ty == "invoke":
                deletes.setdefault(op["q"], "info")
            elif ty == "ok":
                deletes[op["q"]] = "ok"
        elif f == "drain":
            drains[op["q"]] = [tuple(m) for m in op["msgs"]]
            if op.get("remote"):
                remote.add(op["q"])
            for mid, red in op["msgs"]:
                deliveries[mid].append((t, red, "drain"))
        elif f == "exists":
            exists[op["q"]] = op["exists"]
            drains[op["q"]] = [tuple(m) for m in op["msgs"]]

    in_final = collections.Counter()
    for q, msgs in drains.items():
        for mid, _ in msgs:
            in_final[mid] += 1
            if mid not in pub or pub[mid]["q"] != q:
                r.add("phantom", mid, "in %s, never published there" % q)

    def purge_covers(mid, state_wanted):
        """A purge of the message's queue began after its confirm (ok) and, for
        state_wanted == 'ok', its purge-ok came."""
        p = pub[mid]
        for t_inv, st, _ in purges.get(p["q"], []):
            if p["t_ok"] is not None and t_inv > p["t_ok"] and \
                    (state_wanted == "any" or st == "ok"):
                return True
        return False

    def purge_may_cover(mid):
        """Any purge that began after the message was published may have taken it."""
        p = pub[mid]
        return any(t_inv > p["t_inv"] for t_inv, _, _ in purges.get(p["q"], []))

    for mid, p in pub.items():
        is_remote = p["q"] in remote
        if p["state"] == "ok":
            r.confirmed += 1
            if is_remote:
                r.linked_confirmed += 1
        else:
            r.unconfirmed += 1
        n = in_final[mid]
        if n > 1:
            r.add("duplicated", mid, "%d times in the drain of %s" % (n, p["q"]))
        if p["q"] in deletes:
            continue  # judged per queue below
        if p["state"] == "ok" and n == 0 and mid not in acks and not purge_may_cover(mid):
            r.add("lost", mid, "confirmed to %s at t=%s, not in the drain" % (p["q"], p["t_ok"]))
        if p["state"] == "fail" and n:
            r.add("phantom", mid, "its publish failed, yet it is in %s" % p["q"])
        if n and purge_covers(mid, "ok"):
            r.add("resurrected", mid, "purged from %s, yet in the drain" % p["q"])
    for q, st in deletes.items():
        if st == "ok" and exists.get(q):
            r.add("resurrected", q, "deleted (delete-ok), yet it exists with %d messages"
                  % len(drains.get(q, [])))
    for mid, ds in deliveries.items():
        ds.sort(key=lambda d: d[0])
        for k, (t, red, where) in enumerate(ds):
            if red:
                r.redelivered_ok += 1 if k else 0
            if k and not red:
                r.add("duplicate-unflagged", mid, "delivered again (%s at t=%s) without "
                      "redelivered after %s" % (where, t, ds[:k]))
            if mid in ack_ok_t and t > ack_ok_t[mid]:
                r.add("resurrected", mid, "delivered (%s at t=%s) after its ack was committed "
                      "at t=%s" % (where, t, ack_ok_t[mid]))
        if mid in pub and pub[mid]["q"] in remote and len(ds) > 1:
            r.add("duplicated", mid, "%d times at the remote node" % len(ds))
    r.delivered = sum(len(v) for v in consumer_streams.values())

    def check_order(stream, where, strict=False):
        last = {}
        for mid, red in stream:
            if red and not strict:
                continue
            try:
                proc, seq = parse_id(mid)
            except ValueError:
                continue
            if proc in last and seq < last[proc]:
                r.add("order", mid, "%s: after %s:%d" % (where, proc, last[proc]))
            last[proc] = max(seq, last.get(proc, seq))

    for q, msgs in drains.items():
        check_order(msgs, "drain of %s" % q, strict=q in remote)
    for (proc, q), stream in consumer_streams.items():
        check_order(stream, "%s's deliveries from %s" % (proc, q))

    for ids, st in batches:
        present = [mid for mid in ids if in_final[mid]]
        if present and len(present) != len(ids) and not any(mid in acks for mid in ids):
            r.add("atomicity", ids[0], "transaction %s: only %s in the drain" % (ids, present))

    check_streams(ops, r, prior_streams)
    runs = leader_runs(ops)
    r.leader_changes = max(0, len(runs) - 1)
    if one_fault:
        # the newest node to confirm leads; a confirm from an earlier one after it is the
        # deposed leader confirming
        seen, newest = set(), None
        for node, t0, t1 in runs:
            if node not in seen:
                seen.add(node)
                newest = node
            elif node != newest and paused:
                r.late_confirms += 1
            elif node != newest:
                r.add("two-leaders", node, "confirms from %s at t=%s after %s took over "
                      "(runs: %s)" % (node, t0, newest, runs))
    return r


def check_streams(ops, r, prior=()):
    """The stream rules (module docstring) into r; prior: earlier periods' s-publish ops
    (judged, not counted)."""
    sent = {}  # id -> {"q", "sends", "ok", "unknown", "dedup", "prior"}
    reads = {}  # stream -> the s-read op
    live = collections.defaultdict(list)  # (proc, stream) -> [[offset, id]] as they came
    declared = set()  # streams whose declare-ok came
    n_prior = len(prior)
    for i, op in enumerate(list(prior) + list(ops)):
        f, ty = op["f"], op["type"]
        if f == "s-publish":
            for mid in op["ids"]:
                m = sent.setdefault(mid, {"q": op["q"], "sends": 0, "ok": False, "unknown": 0,
                                          "dedup": False, "prior": i < n_prior})
                if ty == "invoke":
                    m["sends"] += 1
                    m["dedup"] = m["dedup"] or bool(op.get("dedup"))
                elif ty == "ok":
                    m["ok"] = True
                elif ty == "info":
                    m["unknown"] += 1
        elif f == "s-read":
            reads[op["q"]] = op
        elif f == "s-declare" and ty == "ok":
            declared.add(op["q"])
        elif f == "s-deliver" and ty == "ok":
            live[(op["p"], op["q"])].extend(op["msgs"])
        elif f == "s-replicas" and not op.get("same"):
            r.add("s-replica", "streams/", "the nodes' stream files differ: %s" %
                  json.dumps(op.get("files"))[:2000])
    now = [m for m in sent.values() if not m["prior"]]
    r.s["published"] = len(now)
    r.s["sends"] = sum(m["sends"] for m in now)
    r.s["confirmed"] = sum(1 for m in now if m["ok"])
    r.s["unconfirmed"] = len(now) - r.s["confirmed"]
    r.s["earlier"] = sum(1 for m in sent.values() if m["prior"] and m["ok"])
    # a deduplicating publisher's messages sent again after an unknown outcome: each one
    # whose first copy was written is a deduplication the broker had to make
    r.s["dedup_retried"] = sum(1 for m in now if m["dedup"] and m["unknown"] and
                               m["sends"] > 1)
    r.s["declared"] = len(declared)
    for q, op in sorted(reads.items()):
        msgs = op["msgs"]
        if op.get("exists") is False and q in declared:
            r.add("s-gone", q, "declared (declare-ok), missing from %s after the faults" %
                  op.get("node"))
        r.s["read"] += len(msgs)
        # offsets: consecutive from 0 (with retention: from the first offset the API gives)
        # to the committed offset
        ret = bool(op.get("retention"))
        base = (op.get("first") or 0) if ret else 0
        offs = [o for o, _ in msgs]
        want = list(range(base, base + len(msgs)))
        if offs != want:
            bad = next(i for i, (a, b) in enumerate(zip(offs, want + [None])) if a != b)
            r.add("s-offset", q, "entry %d of the read has offset %r (before it %r): not "
                  "consecutive from %d" % (bad, offs[bad], offs[max(0, bad - 3):bad], base))
        elif msgs and op.get("committed") != offs[-1]:
            r.add("s-offset", q, "read up to %s, committed offset %s" % (offs[-1],
                                                                         op.get("committed")))
        if op.get("count") is not None and op["count"] != len(msgs):
            r.add("s-offset", q, "the HTTP API counts %s messages, %d read" % (op["count"],
                                                                              len(msgs)))
        seen = collections.Counter()
        last = {}
        for off, mid in msgs:
            seen[mid] += 1
            m = sent.get(mid)
            if m is None or m["q"] != q:
                if seen[mid] == 1:
                    r.add("s-phantom", mid, "at offset %s of %s, never sent there" % (off, q))
                continue
            if seen[mid] > 1:
                continue  # a retry's copy: judged by the count below
            try:
                proc, seq = parse_id(mid)
            except ValueError:
                continue
            if proc in last and seq <= last[proc][0]:
                r.add("s-order", mid, "%s: at offset %s, after %s:%d at offset %s" % (
                    q, off, proc, last[proc][0], last[proc][1]))
            last[proc] = (max(seq, last.get(proc, (seq,))[0]), off)
        # with retention the stream keeps a suffix: per publisher, from its first message
        # kept on, nothing confirmed may be missing (one publisher per such stream)
        kept_from = {}
        for _, mid in msgs:
            try:
                proc, seq = parse_id(mid)
            except ValueError:
                continue
            kept_from[proc] = min(seq, kept_from.get(proc, seq))
        for mid, m in sent.items():
            if m["q"] != q:
                continue
            n = seen[mid]
            if ret and n == 0:
                proc, seq = parse_id(mid)
                if proc not in kept_from or seq < kept_from[proc]:
                    r.s["retention_gone"] += 1
                    continue
            if m["ok"] and n == 0:
                r.add("s-lost", mid, "confirmed to %s (sent %d times), not in it (%d entries "
                      "read on %s)" % (q, m["sends"], len(msgs), op.get("node")))
            if n > 1:
                if n > m["sends"] or m["dedup"] or not m["unknown"]:
                    r.add("s-duplicated", mid, "%d times in %s: sent %d times, %d of them "
                          "unconfirmed%s" % (n, q, m["sends"], m["unknown"],
                                             ", deduplicating publisher" if m["dedup"]
                                             else ""))
                elif not m["prior"]:  # (an earlier period's were counted then)
                    r.s["retried_dups"] += n - 1
    if reads:  # a drain ran: a stream it did not read holds nothing confirmed for sure
        for mid, m in sorted(sent.items()):
            if m["ok"] and m["q"] not in reads:
                r.add("s-lost", mid, "confirmed to %s, which the drain did not read" % m["q"])
    for (proc, q), got in sorted(live.items()):
        r.s["live"] += len(got)
        final = {o: mid for o, mid in reads[q]["msgs"]} if q in reads else None
        prev = None
        for off, mid in got:
            if prev is not None and (not isinstance(off, int) or off <= prev):
                r.add("s-live-order", mid, "%s got offset %r of %s after %r" % (proc, off, q,
                                                                               prev))
            prev = off if isinstance(off, int) else prev
            if final is not None and final.get(off) != mid:
                r.add("s-taken-back", mid, "%s got it at offset %r of %s during the run; the "
                      "final read has %r there" % (proc, off, q, final.get(off)))


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="check a cluster workload history")
    ap.add_argument("history")
    a = ap.parse_args(argv)
    res = check(load(a.history))
    print(json.dumps(res.summary()))
    for e in res.errors[:50]:
        print(*e)
    return 0 if res.ok else 1


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
