#!/usr/bin/env python3
"""cluster_ab.py - two sluiced binaries, each as a 3-node cluster (bench/cluster.py's
SluiceCluster: a private etcd each, nodes on 127.0.0.2-4), side by side in one run: every
scenario runs on A then B (the order swapped every round), so both see the same noise of a
shared machine. Prints medians (min-max) per binary and B/A. For a change's before and after
(issue 46: `--a /tmp/sluiced-main --b build/sluiced`).

    python3 bench/cluster_ab.py --a /tmp/sluiced-main --b build/sluiced --rounds 3
"""

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster as C  # noqa: E402

R = C.R
QTYPE = C.QTYPE

# id, amqpbench args, metric(s): the rows of issue 46's table (confirmed publish with a window
# of 1,000 per publisher; the 1-publisher rows with the pipelined publisher) and the latency
SCENARIOS = [
    ("c1_16", "-S confirm -P 1 -s 16 -n 200000 --raw", ["confirm_rate"]),
    ("c1_1k", "-S confirm -P 1 -s 1024 -n 50000 --raw", ["confirm_rate"]),
    ("c4_16", "-S confirm -P 4 -s 16 -n 200000", ["confirm_rate"]),
    ("c4_1k", "-S confirm -P 4 -s 1024 -n 50000", ["confirm_rate"]),
    ("lat1k", "-S confirm -P 1 -s 16 -n 10000 -r 1000", ["conf_lat_p50_us", "conf_lat_p99_us"]),
]


class Cluster(C.SluiceCluster):
    def __init__(self, name, binary, base):
        super().__init__(binary, base)
        self.name = self.label = name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="sluiced binary A (before)")
    ap.add_argument("--b", required=True, help="sluiced binary B (after)")
    ap.add_argument("--build", default="build", help="where bench/amqpbench is")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", help="comma-separated scenario ids: " +
                    ",".join(s[0] for s in SCENARIOS))
    ap.add_argument("--json", help="write the samples here")
    args = ap.parse_args()
    build = Path(args.build).resolve()
    amqpbench = build / "bench" / "amqpbench"
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-ab-"))
    bins = {}
    for k in ("a", "b"):  # copies: a rebuild during the run changes nothing
        bins[k] = tmp / ("sluiced-" + k)
        shutil.copy2(getattr(args, k), bins[k])
    scen = [s for s in SCENARIOS if not args.only or s[0] in args.only.split(",")]
    clusters = [Cluster("A", bins["a"], tmp / "A"), Cluster("B", bins["b"], tmp / "B")]
    samples = []
    ok = True
    try:
        for c in clusters:
            c.start()
        for rnd in range(1, args.rounds + 1):
            order = clusters if rnd % 2 else clusters[::-1]
            for sid, a, metrics in scen:
                for c in order:
                    c.wait_in_sync()
                    res = R.run_amqpbench("%s %s --tag ab%d-%s" % (a, QTYPE, rnd, sid),
                                          amqpbench, c, False, str(tmp), 600)
                    if not res.get("ok"):
                        ok = False
                        R.log("FAILED %s on %s: %s %s" % (sid, c.name, res.get("error"),
                                                          res.get("stderr", "")[-500:]))
                        continue
                    m = {k: res["metrics"].get(k) for k in metrics}
                    samples.append({"round": rnd, "scenario": sid, "binary": c.name,
                                    "loadavg1": res.get("loadavg1"), **m})
                    R.log("round %d %s %s: %s (load %.1f)" % (rnd, sid, c.name, m,
                                                             res.get("loadavg1", 0)))
    finally:
        for c in clusters:
            try:
                c.stop()
            except Exception as e:
                R.log("stopping %s: %s" % (c.name, e))
    if args.json:
        Path(args.json).write_text(json.dumps(samples, indent=1))
    print("| figure | A (before) | B (after) | B/A |")
    print("|---|---:|---:|---:|")
    for sid, _, metrics in scen:
        for k in metrics:
            va = [s[k] for s in samples if s["scenario"] == sid and s["binary"] == "A"]
            vb = [s[k] for s in samples if s["scenario"] == sid and s["binary"] == "B"]
            if not va or not vb:
                continue
            ma, mb = statistics.median(va), statistics.median(vb)
            print("| %s %s | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.2f |" % (
                sid, k, ma, min(va), max(va), mb, min(vb), max(vb), mb / ma if ma else 0))
    if ok:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        R.log("kept %s" % tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
