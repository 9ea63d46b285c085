#!/usr/bin/env python3
"""soak.py - the long soak of issue 14: `make soak` (1 hour) and `make soak-smoke` (CI).

Starts a private sluiced on 127.0.0.1 with a fresh data directory and runs
`amqpbench -S soak`: producers publish persistent messages with publisher confirms into one
durable queue at a fixed rate (20,000 msg/s in all by default) while consumers take and ack
them; every message is checked exactly once at the end, and the broker's RSS and the queue's
depth are sampled as it runs. Then it stops sluiced with SIGTERM and judges:

- amqpbench passed: nothing lost, nothing twice, no nack, the queue empty at the end;
- the rate held: at least 95% of the one asked for;
- RSS flat: after the warm-up, the RSS at the end (median of the last tenth of the samples)
  is at most max(8 MiB, 5%) above the RSS just after the warm-up (median of the first tenth);
- sluiced logged no [error] line and exited 0 on SIGTERM.

Exit status 0 when every check holds, 1 otherwise (2: could not run). Writes the verdict, the
figures and the RSS/depth series to --out (bench/results/soak/<time>.md and latest.md; the
smoke writes nowhere unless --out is given). Stops only the sluiced it started, by pid.
"""
import argparse
import datetime
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import HOST, REPO, Sluiced, environment  # noqa: E402

GROWTH_ABS_KB = 8 * 1024
GROWTH_REL = 0.05


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--rate", type=int, default=20000, help="msg/s, all producers together")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=300, help="seconds left out of the RSS check")
    ap.add_argument("--sample", type=int, default=10, help="seconds between samples")
    ap.add_argument("--out", help="directory for <time>.md and latest.md")
    ap.add_argument("--keep", action="store_true", help="keep the data directory and log")
    args = ap.parse_args()

    build = REPO / args.build if not os.path.isabs(args.build) else Path(args.build)
    amqpbench = build / "bench" / "amqpbench"
    if not amqpbench.exists() or not (build / "sluiced").exists():
        sys.exit("soak: build %s/sluiced and %s first (make bench-tools)" % (build, amqpbench))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tmp = tempfile.mkdtemp(prefix="sluice-soak-")
    b = Sluiced(build / "sluiced", Path(tmp) / "sluice")
    cmd_args = ["-S", "soak", "-P", str(args.producers), "-C", str(args.consumers),
                "-s", str(args.size), "-r", str(args.rate), "--seconds", str(args.seconds),
                "--sample-s", str(args.sample), "--warmup-s", str(args.warmup),
                "--tag", "soak"]
    checks, series = [], []
    res, err, rc, store_bytes, exit_rc = None, "", None, None, None
    t0 = time.monotonic()
    try:
        b.start()
        print("soak: sluiced pid %d on port %d; amqpbench %s" % (b.proc.pid, b.port,
                                                               " ".join(cmd_args)), flush=True)
        p = subprocess.Popen([str(amqpbench), "-H", HOST, "-p", str(b.port), "--pids",
                              str(b.proc.pid)] + cmd_args,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in p.stderr:
            err += line
            m = re.match(r"\s+soak t=(\d+)s rss=(\d+) KiB depth=(\d+)", line)
            if m:
                series.append(tuple(int(x) for x in m.groups()))
                if len(series) % max(1, 60 // args.sample) == 0:
                    print("soak: t=%ss rss=%s KiB depth=%s" % m.groups(), flush=True)
        out = p.stdout.read()
        rc = p.wait()
        for line in out.splitlines():
            if line.startswith("{"):
                res = json.loads(line)
        store_bytes = du(Path(tmp) / "sluice" / "data")
        alive = b.proc.poll() is None
        checks.append(("sluiced still running at the end", alive, ""))
    finally:
        if b.proc is not None and b.proc.poll() is None:
            b.proc.send_signal(15)
            try:
                exit_rc = b.proc.wait(60)
            except subprocess.TimeoutExpired:
                b.proc.kill()
                b.proc.wait()
                exit_rc = "killed after 60 s"
        elif b.proc is not None:
            exit_rc = b.proc.returncode
    log_text = b.log_path.read_text(errors="replace") if b.log_path.exists() else ""
    errors = [ln for ln in log_text.splitlines() if "[error]" in ln]
    m = (res or {}).get("metrics", {})
    checks.append(("amqpbench: every message exactly once, no nack, queue empty at the end",
                   rc == 0 and bool(res) and res.get("ok"), "exit %s" % rc))
    rate = m.get("rate")
    checks.append(("rate held (>= 95%% of %d msg/s)" % args.rate,
                   rate is not None and rate >= 0.95 * args.rate,
                   "%.0f msg/s" % rate if rate else "-"))
    warm, end = m.get("rss_warm_kb"), m.get("rss_end_kb")
    if warm is not None and end is not None:
        allowed = max(GROWTH_ABS_KB, GROWTH_REL * warm)
        checks.append(("RSS flat after the warm-up (growth <= max(8 MiB, 5%))",
                       end - warm <= allowed,
                       "%.0f KiB after the warm-up, %.0f KiB at the end (%+.0f KiB, %.0f allowed)"
                       % (warm, end, end - warm, allowed)))
    else:
        checks.append(("RSS flat after the warm-up", False, "too few samples after the warm-up"))
    checks.append(("no [error] line in the broker's log", not errors, "; ".join(errors[:3])))
    checks.append(("sluiced exited 0 on SIGTERM", exit_rc == 0, "exit %s" % exit_rc))
    ok = all(c[1] for c in checks)
    wall = time.monotonic() - t0

    L = ["# Sluice soak (issue 14)", "",
         "- run: `python3 bench/soak.py %s` on %s, wall time %.0f s" % (
             " ".join(sys.argv[1:]), datetime.datetime.now().isoformat(timespec="seconds"),
             wall),
         "- Sluice: " + environment(build / "sluiced")["sluice"],
         "- load: %d producers (publisher confirms, 1000 outstanding each) and %d consumers "
         "(prefetch 1000, multiple ack every 250) on one durable queue, persistent %d B "
         "messages at %d msg/s for %d s; warm-up %d s; a sample every %d s" % (
             args.producers, args.consumers, args.size, args.rate, args.seconds, args.warmup,
             args.sample),
         "- load average (1 min) at the end: %.2f (other work on the machine shares its 2 "
         "CPUs)" % os.getloadavg()[0], "",
         "**%s**" % ("PASS" if ok else "FAIL"), "", "| check | ok | figure |", "|---|---|---|"]
    for what, good, fig in checks:
        L.append("| %s | %s | %s |" % (what, "yes" if good else "**NO**", fig))
    L += ["", "Data directory at the end: %s (not a check: consumed messages' segments are "
          "deleted by TIDY, every tidy_interval, 6 h by default, or on demand)." % (
              "%.1f MiB" % (store_bytes / 2**20) if store_bytes is not None else "-")]
    L += ["", "amqpbench metrics: " + ", ".join("%s=%.6g" % kv for kv in m.items()), ""]
    if series:
        L += ["| t s | RSS KiB | queue depth |", "|---:|---:|---:|"]
        step = max(1, len(series) // 60)
        for t, rss, depth in series[::step]:
            L.append("| %d | %d | %d |" % (t, rss, depth))
    if not ok:
        L += ["", "amqpbench stderr (tail):", "", "```", err[-3000:], "```"]
    report = "\n".join(L) + "\n"
    print(report)
    if args.out:
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        (out_dir / (stamp + ".md")).write_text(report)
        (out_dir / "latest.md").write_text(report)
    if args.keep or not ok:
        print("soak: data and log kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
