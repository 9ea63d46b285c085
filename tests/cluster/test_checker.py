"""The checker on synthetic histories: a clean one passes; a lost confirmed message, a
duplicate without redelivered, an order inversion, a resurrected (acked, purged, deleted)
message, a torn transaction and a duplicate at the remote node are each reported. Streams: a
missing confirmed message, a copy the retry rule does not allow (confirmed at its only send,
more copies than sends, a deduplicating publisher's), a publisher's reorder, offsets not
consecutive from 0 to the committed one, a phantom, followers' files not the leader's, a
live reader's entry taken back or read going back, a hole in a stream with retention and an
earlier period's message missing from the long stream, and a declared stream gone.
Run: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/cluster/test_checker.py"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checker import check  # noqa: E402


class H:
    def __init__(self):
        self.ops = []
        self.t = 0.0

    def op(self, p, ty, f, **kw):
        self.t += 1
        d = {"t": self.t, "p": p, "type": ty, "f": f}
        d.update(kw)
        self.ops.append(d)
        return self

    def pub(self, mid, q, ok=True, p="P"):
        self.op(p, "invoke", "publish", q=q, ids=[mid])
        return self.op(p, "ok" if ok else "info", "publish", q=q, ids=[mid])

    def drain(self, q, msgs, remote=False):
        return self.op("drain", "ok", "drain", q=q, msgs=[list(m) for m in msgs],
                       remote=remote)


def clean():
    h = H()
    for s in range(1, 6):
        h.pub("P:0:%d" % s, "keep")
    h.pub("P:0:6", "keep", ok=False)  # unknown: may be there or not
    h.pub("W:0:1", "work", p="W").pub("W:0:2", "work", p="W")
    h.op("C", "ok", "deliver", q="work", ids=["W:0:1"], redelivered=False)
    h.op("C", "invoke", "ack", q="work", ids=["W:0:1"]).op("C", "ok", "ack", q="work",
                                                            ids=["W:0:1"])
    h.op("C", "ok", "deliver", q="work", ids=["W:0:2"], redelivered=False)
    # the leader dies: W:0:2 was delivered, not acked: it comes again, flagged
    h.drain("keep", [("P:0:%d" % s, False) for s in range(1, 6)])
    h.drain("work", [("W:0:2", True)])
    return h


def test_a_clean_history_passes():
    r = check(clean().ops)
    assert r.ok, r
    assert r.confirmed == 7 and r.summary()["lost"] == 0
    assert r.redelivered_ok == 1


def test_a_lost_confirmed_message_is_reported():
    h = clean()
    h.ops[-2]["msgs"] = h.ops[-2]["msgs"][:2] + h.ops[-2]["msgs"][3:]  # P:0:3 gone
    r = check(h.ops)
    assert [(k, m) for k, m, _ in r.errors] == [("lost", "P:0:3")]


def test_an_unconfirmed_message_may_be_missing_or_present_once():
    h = clean()
    h.ops[-2]["msgs"].append(["P:0:6", False])
    assert check(h.ops).ok
    h.ops[-2]["msgs"].append(["P:0:6", False])
    assert ("duplicated", "P:0:6") in [(k, m) for k, m, _ in check(h.ops).errors]


def test_a_duplicate_without_redelivered_is_reported():
    h = clean()
    h.ops[-1]["msgs"] = [["W:0:2", False]]  # delivered before, now again unflagged
    r = check(h.ops)
    assert [(k, m) for k, m, _ in r.errors] == [("duplicate-unflagged", "W:0:2")]


def test_a_confirmed_message_twice_in_the_drain_is_a_duplicate():
    h = clean()
    h.ops[-2]["msgs"].insert(2, ["P:0:2", True])
    kinds = {k for k, m, _ in check(h.ops).errors if m == "P:0:2"}
    assert "duplicated" in kinds


def test_an_order_inversion_is_reported():
    h = clean()
    m = h.ops[-2]["msgs"]
    m[1], m[3] = m[3], m[1]
    r = check(h.ops)
    assert r.errors and all(k == "order" for k, _, _ in r.errors)


def test_a_redelivered_message_may_come_out_of_order():
    h = H()
    for s in (1, 2, 3):
        h.pub("W:0:%d" % s, "work", p="W")
    h.op("C", "ok", "deliver", q="work", ids=["W:0:2"], redelivered=False)
    h.drain("work", [("W:0:1", False), ("W:0:3", False), ("W:0:2", True)])
    assert check(h.ops).ok, check(h.ops)
    h.ops[-1]["msgs"] = [["W:0:3", False], ["W:0:1", False], ["W:0:2", True]]
    assert [(k, m) for k, m, _ in check(h.ops).errors] == [("order", "W:0:1")]


def test_a_resurrected_acked_message_is_reported():
    h = clean()
    h.ops[-1]["msgs"].append(["W:0:1", True])
    r = check(h.ops)
    assert ("resurrected", "W:0:1") in [(k, m) for k, m, _ in r.errors]


def test_an_acked_message_redelivered_during_the_run_is_resurrected():
    h = clean()
    h.ops.insert(-2, {"t": 100, "p": "C", "type": "ok", "f": "deliver", "q": "work",
                      "ids": ["W:0:1"], "redelivered": True})
    h.ops[-2]["t"], h.ops[-1]["t"] = 101, 102
    r = check(h.ops)
    assert ("resurrected", "W:0:1") in [(k, m) for k, m, _ in r.errors]


def test_an_unsure_ack_may_or_may_not_stick():
    h = H()
    h.pub("W:0:1", "work", p="W")
    h.op("C", "ok", "deliver", q="work", ids=["W:0:1"], redelivered=False)
    h.op("C", "invoke", "ack", q="work", ids=["W:0:1"]).op("C", "info", "ack", q="work",
                                                            ids=["W:0:1"])
    assert check(H().ops + h.ops + [{"t": 99, "p": "drain", "type": "ok", "f": "drain",
                                     "q": "work", "msgs": []}]).ok
    h.drain("work", [("W:0:1", True)])
    assert check(h.ops).ok


def test_a_purged_message_that_comes_back_is_resurrected():
    h = H()
    h.pub("A:0:1", "purge-0", p="A").pub("A:0:2", "purge-0", p="A")
    h.op("A", "invoke", "purge", q="purge-0").op("A", "ok", "purge", q="purge-0", count=2)
    h.pub("A:0:3", "purge-0", p="A")
    h.drain("purge-0", [("A:0:3", False)])
    assert check(h.ops).ok
    h.ops[-1]["msgs"].insert(0, ["A:0:2", False])
    r = check(h.ops)
    assert ("resurrected", "A:0:2") in [(k, m) for k, m, _ in r.errors]


def test_a_deleted_queue_that_comes_back_is_reported():
    h = H()
    h.op("A", "invoke", "declare", q="del-0-1").op("A", "ok", "declare", q="del-0-1")
    h.pub("A:0:1", "del-0-1", p="A")
    h.op("A", "invoke", "delete", q="del-0-1").op("A", "ok", "delete", q="del-0-1")
    ok = list(h.ops) + [{"t": 50, "p": "drain", "type": "ok", "f": "exists", "q": "del-0-1",
                         "exists": False, "msgs": []}]
    assert check(ok).ok
    bad = list(h.ops) + [{"t": 50, "p": "drain", "type": "ok", "f": "exists", "q": "del-0-1",
                          "exists": True, "msgs": [["A:0:1", False]]}]
    assert ("resurrected", "del-0-1") in [(k, m) for k, m, _ in check(bad).errors]


def test_a_torn_transaction_is_reported():
    h = H()
    ids = ["T:0:1", "T:0:2", "T:0:3", "T:0:4"]
    h.op("T", "invoke", "tx-publish", q="tx", ids=ids).op("T", "info", "tx-publish", q="tx",
                                                          ids=ids)
    h.drain("tx", [])
    assert check(h.ops).ok
    h.ops[-1]["msgs"] = [["T:0:1", False], ["T:0:2", False]]
    assert ("atomicity", "T:0:1") in [(k, m) for k, m, _ in check(h.ops).errors]
    h.ops[1]["type"] = "ok"
    kinds = [k for k, _, _ in check(h.ops).errors]
    assert kinds.count("lost") == 2


def test_the_remote_node_must_get_each_linked_message_exactly_once():
    h = H()
    for s in (1, 2, 3):
        h.pub("L:0:%d" % s, "inbox-0", p="L")
    h.drain("inbox-0", [("L:0:1", False), ("L:0:2", False), ("L:0:3", False)], remote=True)
    assert check(h.ops).ok
    h.ops[-1]["msgs"].insert(2, ["L:0:1", True])  # a resend accepted twice
    kinds = {(k, m) for k, m, _ in check(h.ops).errors}
    assert ("duplicated", "L:0:1") in kinds and ("order", "L:0:1") in kinds
    h.ops[-1]["msgs"] = [["L:0:1", False], ["L:0:3", False]]
    assert [(k, m) for k, m, _ in check(h.ops).errors] == [("lost", "L:0:2")]


def test_a_message_nobody_published_is_a_phantom():
    h = clean()
    h.ops[-2]["msgs"].append(["X:0:1", False])
    assert ("phantom", "X:0:1") in [(k, m) for k, m, _ in check(h.ops).errors]


def test_a_queue_whose_delete_never_came_keeps_its_confirmed_messages():
    # the admin's connection died between the declare and the delete (seen in the soak)
    h = H()
    h.op("A", "invoke", "declare", q="del-0-1").op("A", "ok", "declare", q="del-0-1")
    h.pub("A:0:1", "del-0-1", p="A")
    kept = list(h.ops) + [{"t": 50, "p": "drain", "type": "ok", "f": "exists", "q": "del-0-1",
                           "exists": True, "msgs": [["A:0:1", False]]}]
    assert check(kept).ok
    gone = list(h.ops) + [{"t": 50, "p": "drain", "type": "ok", "f": "exists", "q": "del-0-1",
                           "exists": True, "msgs": []}]
    assert [(k, m) for k, m, _ in check(gone).errors] == [("lost", "A:0:1")]


def test_confirms_from_a_deposed_leader_after_the_new_one_are_two_leaders():
    h = H()
    for s, node in ((1, "n1"), (2, "n1"), (3, "n2"), (4, "n2"), (5, "n1"), (6, "n2")):
        h.op("P", "invoke", "publish", q="keep", ids=["P:0:%d" % s])
        h.op("P", "ok", "publish", q="keep", ids=["P:0:%d" % s], node=node)
    h.drain("keep", [("P:0:%d" % s, False) for s in range(1, 7)])
    assert check(h.ops).ok  # several faults in a period: a flip back may be legitimate
    r = check(h.ops, one_fault=True)
    assert [(k, m) for k, m, _ in r.errors] == [("two-leaders", "n1")]
    del h.ops[8:10]  # without P:0:5 from n1 it is one hand-over
    h.ops[-1]["msgs"] = [m for m in h.ops[-1]["msgs"] if m[0] != "P:0:5"]
    r = check(h.ops, one_fault=True)
    assert r.ok, r
    assert r.leader_changes == 1


def test_after_a_pause_a_late_confirm_of_the_old_leader_is_counted_not_reported():
    h = H()
    for s, node in ((1, "n1"), (2, "n2"), (3, "n1"), (4, "n2")):
        h.op("P", "invoke", "publish", q="keep", ids=["P:0:%d" % s])
        h.op("P", "ok", "publish", q="keep", ids=["P:0:%d" % s], node=node)
    h.drain("keep", [("P:0:%d" % s, False) for s in range(1, 5)])
    r = check(h.ops, one_fault=True, paused=True)
    assert r.ok and r.late_confirms == 1, r
    # what it confirmed is still held to the rules: lost if the new leader lacks it
    h.ops[-1]["msgs"] = [m for m in h.ops[-1]["msgs"] if m[0] != "P:0:3"]
    r = check(h.ops, one_fault=True, paused=True)
    assert [(k, m) for k, m, _ in r.errors] == [("lost", "P:0:3")]


# -- streams (issue 47) --------------------------------------------------------------------

def spub(h, mid, q, outcomes, p=None, dedup=False):
    """One stream message sent len(outcomes) times under the same id, each attempt's outcome
    "ok" or "info" (unknown: the connection died, the publisher retries)."""
    p = p or mid.split(":")[0]
    for k, out in enumerate(outcomes):
        h.op(p, "invoke", "s-publish", q=q, ids=[mid], attempt=k + 1, dedup=dedup)
        h.op(p, out, "s-publish", q=q, ids=[mid])
    return h


def sread(h, q, ids, committed=None, count=None):
    msgs = [[off, mid] for off, mid in enumerate(ids)]
    last = len(ids) - 1 if ids else None
    return h.op("drain", "ok", "s-read", q=q, node="n2", msgs=msgs,
                committed=last if committed is None else committed,
                count=len(ids) if count is None else count)


def stream_clean():
    """SA and SP interleaved into s0, SB into s1; SA:0:2's first send died with the leader
    after it was written (so it is there twice: allowed, retried), SP:0:2's too (deduplicated:
    once), SB:0:3 was never confirmed and is not there."""
    h = H()
    spub(h, "SA:0:1", "s0", ["ok"])
    spub(h, "SP:0:1", "s0", ["ok"], dedup=True)
    spub(h, "SA:0:2", "s0", ["info", "ok"])
    spub(h, "SP:0:2", "s0", ["info", "ok"], dedup=True)
    spub(h, "SA:0:3", "s0", ["ok"])
    spub(h, "SB:0:1", "s1", ["ok"]).op("SB", "invoke", "s-publish", q="s1", ids=["SB:0:2"])
    h.op("SB", "ok", "s-publish", q="s1", ids=["SB:0:2"])
    spub(h, "SB:0:3", "s1", ["info"])
    sread(h, "s0", ["SA:0:1", "SP:0:1", "SA:0:2", "SP:0:2", "SA:0:2", "SA:0:3"])
    sread(h, "s1", ["SB:0:1", "SB:0:2"])
    h.op("drain", "ok", "s-replicas", same=True, files=4)
    return h


def errs(r):
    return [(k, m) for k, m, _ in r.errors]


def test_a_clean_stream_history_passes():
    r = check(stream_clean().ops)
    assert r.ok, r
    s = r.summary()["streams"]
    assert s["published"] == 8 and s["confirmed"] == 7 and s["unconfirmed"] == 1, s
    assert s["read"] == 8 and s["retried_dups"] == 1 and s["lost"] == 0, s


def test_a_missing_confirmed_stream_message_is_lost():
    h = stream_clean()
    read = next(o for o in h.ops if o["f"] == "s-read" and o["q"] == "s0")
    read["msgs"] = [[i, m] for i, (_, m) in enumerate(x for x in read["msgs"]
                                                      if x[1] != "SA:0:3")]
    read["committed"], read["count"] = 4, 5
    assert errs(check(h.ops)) == [("s-lost", "SA:0:3")]


def test_an_unconfirmed_stream_message_may_be_there_once():
    h = stream_clean()
    read = next(o for o in h.ops if o["f"] == "s-read" and o["q"] == "s1")
    read["msgs"].append([2, "SB:0:3"])
    read["committed"], read["count"] = 2, 3
    assert check(h.ops).ok


def test_a_stream_message_confirmed_at_its_only_send_twice_is_a_duplicate():
    h = stream_clean()
    read = next(o for o in h.ops if o["f"] == "s-read" and o["q"] == "s0")
    read["msgs"].append([6, "SA:0:3"])
    read["committed"], read["count"] = 6, 7
    assert errs(check(h.ops)) == [("s-duplicated", "SA:0:3")]


def test_a_retried_stream_message_more_often_than_sent_is_a_duplicate():
    h = stream_clean()
    read = next(o for o in h.ops if o["f"] == "s-read" and o["q"] == "s0")
    read["msgs"].append([6, "SA:0:2"])  # sent twice, there three times
    read["committed"], read["count"] = 6, 7
    assert errs(check(h.ops)) == [("s-duplicated", "SA:0:2")]


def test_a_deduplicating_publishers_retry_twice_is_a_duplicate():
    h = stream_clean()
    read = next(o for o in h.ops if o["f"] == "s-read" and o["q"] == "s0")
    read["msgs"].append([6, "SP:0:2"])
    read["committed"], read["count"] = 6, 7
    assert errs(check(h.ops)) == [("s-duplicated", "SP:0:2")]


def test_a_stream_reorder_of_one_publisher_is_reported():
    h = stream_clean()
    read = next(o for o in h.ops if o["f"] == "s-read" and o["q"] == "s0")
    ids = [m for _, m in read["msgs"]]
    ids[0], ids[5] = ids[5], ids[0]  # SA:0:3 before SA:0:1
    read["msgs"] = [[i, m] for i, m in enumerate(ids)]
    kinds = {k for k, _ in errs(check(h.ops))}
    assert kinds == {"s-order"}, errs(check(h.ops))
    # two publishers interleaved in any way are fine: only each one's own order counts
    ids = ["SP:0:1", "SP:0:2", "SA:0:1", "SA:0:2", "SA:0:2", "SA:0:3"]
    read["msgs"] = [[i, m] for i, m in enumerate(ids)]
    assert check(h.ops).ok


def test_stream_offsets_must_be_consecutive_from_zero_to_the_committed_one():
    h = stream_clean()
    read = next(o for o in h.ops if o["f"] == "s-read" and o["q"] == "s1")
    read["msgs"][1][0] = 2  # a hole at offset 1
    read["committed"] = 2
    assert errs(check(h.ops)) == [("s-offset", "s1")]
    read["msgs"][1][0] = 0  # the same offset twice
    read["committed"] = 0
    assert errs(check(h.ops)) == [("s-offset", "s1")]
    read["msgs"][1][0] = 1
    read["committed"] = 5  # read short of what the API says is committed
    assert errs(check(h.ops)) == [("s-offset", "s1")]


def test_a_stream_entry_nobody_sent_is_a_phantom():
    h = stream_clean()
    read = next(o for o in h.ops if o["f"] == "s-read" and o["q"] == "s1")
    read["msgs"].append([2, "SA:0:1"])  # SA's, but sent to s0
    read["committed"], read["count"] = 2, 3
    assert errs(check(h.ops)) == [("s-phantom", "SA:0:1")]


def test_followers_stream_files_not_the_leaders_are_reported():
    h = stream_clean()
    h.ops[-1] = dict(h.ops[-1], same=False, files={"n1": {"streams/1/0.seg": "a"},
                                                    "n2": {"streams/1/0.seg": "b"}})
    assert errs(check(h.ops)) == [("s-replica", "streams/")]


def test_an_entry_a_live_reader_got_must_stay_at_its_offset():
    h = stream_clean()
    h.ops.insert(4, {"t": 4.5, "p": "SR", "type": "ok", "f": "s-deliver", "q": "s0",
                     "node": "n1", "msgs": [[0, "SA:0:1"], [1, "SP:0:1"]]})
    h.ops.insert(12, {"t": 12.5, "p": "SR", "type": "ok", "f": "s-deliver", "q": "s0",
                      "node": "n2", "msgs": [[2, "SA:0:2"]]})
    r = check(h.ops)
    assert r.ok and r.summary()["streams"]["live"] == 3, r
    # taken back by a failover: the new leader has another entry at offset 2
    h.ops[12]["msgs"] = [[2, "SA:0:9"]]
    assert errs(check(h.ops)) == [("s-taken-back", "SA:0:9")]
    # the reader resumed before where it was
    h.ops[12]["msgs"] = [[1, "SP:0:1"]]
    assert errs(check(h.ops)) == [("s-live-order", "SP:0:1")]


def test_a_stream_with_retention_keeps_a_suffix_without_holes():
    h = H()
    for s in range(1, 7):
        spub(h, "SC:0:%d" % s, "s2", ["ok"])
    kept = ["SC:0:%d" % s for s in (4, 5, 6)]
    h.op("drain", "ok", "s-read", q="s2", node="n2", first=3, committed=5, count=3,
         retention=True, msgs=[[3 + i, m] for i, m in enumerate(kept)])
    r = check(h.ops)
    assert r.ok and r.summary()["streams"]["retention_gone"] == 3, r
    h.ops[-1]["msgs"] = [[3, "SC:0:4"], [4, "SC:0:6"]]  # SC:0:5 gone from the middle
    h.ops[-1].update(committed=4, count=2)
    assert errs(check(h.ops)) == [("s-lost", "SC:0:5")]
    h.ops[-1]["msgs"] = [[3, "SC:0:4"], [5, "SC:0:5"]]  # a hole in the offsets
    h.ops[-1].update(committed=5, count=2)
    assert [k for k, _ in errs(check(h.ops))] == ["s-offset", "s-lost"]


def test_a_long_stream_keeps_the_confirmed_messages_of_earlier_periods():
    earlier = spub(H(), "SL0:0:1", "long", ["ok"])
    spub(earlier, "SL0:0:2", "long", ["ok"])
    h = spub(H(), "SL1:1:1", "long", ["ok"])
    sread(h, "long", ["SL0:0:1", "SL0:0:2", "SL1:1:1"])
    r = check(h.ops, prior_streams=earlier.ops)
    assert r.ok, r
    s = r.summary()["streams"]
    assert s["confirmed"] == 1 and s["earlier"] == 2 and s["read"] == 3, s
    sread(h, "long", ["SL0:0:1", "SL1:1:1"])  # the second read replaces the first
    assert errs(check(h.ops, prior_streams=earlier.ops)) == [("s-lost", "SL0:0:2")]


def test_a_stream_declared_during_the_faults_must_still_be_there():
    h = H()
    h.op("SD", "invoke", "s-declare", q="sd-0-1").op("SD", "ok", "s-declare", q="sd-0-1")
    spub(h, "SD:0:1", "sd-0-1", ["ok"])
    h.op("SD", "invoke", "s-declare", q="sd-0-2").op("SD", "info", "s-declare", q="sd-0-2")
    sread(h, "sd-0-1", ["SD:0:1"])
    h.op("drain", "ok", "s-read", q="sd-0-2", node="n2", exists=False, msgs=[])
    r = check(h.ops)
    assert r.ok and r.summary()["streams"]["declared"] == 1, r  # an unsure declare may fail
    h.ops[-2] = dict(h.ops[-2], exists=False, msgs=[], committed=None, count=None)
    assert sorted(errs(check(h.ops))) == [("s-gone", "sd-0-1"), ("s-lost", "SD:0:1")]


def test_a_confirmed_stream_message_in_a_stream_the_drain_did_not_read_is_lost():
    h = stream_clean()
    spub(h, "SE:0:1", "s9", ["ok"])
    assert errs(check(h.ops)) == [("s-lost", "SE:0:1")]
