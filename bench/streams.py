#!/usr/bin/env python3
"""streams.py - the driver behind `make bench-streams` (issue 47, "Fast"): streams, Sluice
against Debian's RabbitMQ with its rabbitmq_stream plugin, in one run.

Starts sluiced (listeners.stream = 0) and a private RabbitMQ node (run.py's RabbitMQ class:
own node name, ports, epmd and data; plugin rabbitmq_stream enabled, its listener on a free
port, every stream setting left at its default) on 127.0.0.1, both for the whole run, and
runs each scenario on both in alternation (A B, then B A, ...) for --rounds rounds:

  pub16, pub1k   stream protocol, publish with confirms (build/bench/streambench -S publish:
                 one publisher, 100 messages per Publish frame, 10,000 ids unconfirmed at most)
  replay         stream protocol, one consumer reads a stream of --replay-n 16 B messages from
                 `first` (credit 10, then 1 per chunk); the stream is filled once per broker
                 before the first round (its fill rate is reported, not judged)
  amqp_pub, amqp_cons
                 AMQP 0-9-1 into a stream: build/bench/amqpbench -S confirm --queue-type stream
                 --stream-offset first --raw --raw-consume (persistent publishes with confirms,
                 1,000 outstanding; then basic.qos 1000, manual acks every 250, from `first`)
  lat10k         stream protocol publish-to-confirm latency at 10,000 msg/s, open loop

Before the rounds it measures the loopback ceiling (build/bench/tcpceil --mode batch) at the
wire size of one published message and of one delivered entry, the bound any client and
broker pair shares, and the client alone: each stream protocol scenario run by streambench
--self-peer against a peer thread of its own that confirms and delivers at once. Each sample records the client's own CPU share and the load average.
Before each sample it calls sync(2) (--no-sync-between: not): RabbitMQ's streams do not sync,
and the kernel writes their dirty pages back up to 30 s later, into whichever sample runs then,
where a broker that fdatasyncs waits behind that writeback.
Prints the table (medians, ratio Sluice / RabbitMQ, target, met) and writes it to
bench/results/streams/<time>.md and latest.md, with every sample in <time>.json (--smoke:
smoke-<time>.*, smoke-latest.md). Stops only the processes it started, by pid.

Python 3 standard library only.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (bench/run.py: the brokers, the environment, tcpceil)

HOST = run.HOST
REPO = run.REPO
log = run.log

# id, title, tool, args (full), args (smoke), metric, unit, better, target (Sluice / RabbitMQ)
SCENARIOS = [
    ("pub16", "stream publish with confirms, 16 B", "stream",
     "-S publish --create -s 16 -n 1000000", "-S publish --create -s 16 -n 20000",
     "msg_s", "msg/s", "higher", 3.0),
    ("pub1k", "stream publish with confirms, 1 KiB", "stream",
     "-S publish --create -s 1024 -n 200000", "-S publish --create -s 1024 -n 5000",
     "msg_s", "msg/s", "higher", 3.0),
    ("replay", "stream replay from first, 16 B, one consumer", "replay",
     "-S consume", "-S consume", "msg_s", "msg/s", "higher", 2.0),
    ("amqp_pub", "AMQP 0-9-1 publish with confirms into a stream, 16 B", "amqp",
     "-S confirm --queue-type stream --stream-offset first -s 16 -n 300000 --raw --raw-consume",
     "-S confirm --queue-type stream --stream-offset first -s 16 -n 5000 --raw --raw-consume",
     "confirm_rate", "msg/s", "higher", 10.0),
    ("amqp_cons", "AMQP 0-9-1 consume from first (prefetch 1000, manual ack), 16 B", "amqp_same",
     None, None, "drain_rate", "msg/s", "higher", 10.0),
    ("lat10k_p50", "stream publish-to-confirm p50 at 10k msg/s, 16 B", "stream",
     "-S latency --create -s 16 -r 10000 -n 50000", "-S latency --create -s 16 -r 10000 -n 5000",
     "p50_us", "us", "lower", None),
    ("lat10k_p99", "stream publish-to-confirm p99 at 10k msg/s, 16 B", "lat_same",
     None, None, "p99_us", "us", "lower", 0.2),
]


class SluiceStreams(run.Sluiced):
    """sluiced with its stream protocol listener on a free port (listeners.stream = 0)."""

    def start(self, wait=True):
        if "listeners.stream=0" not in run.SLUICE_SET:
            run.SLUICE_SET.append("listeners.stream=0")
        super().start(wait)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = re.search(r"listening stream=([0-9.]+):(\d+)",
                          self.log_path.read_text(errors="replace"))
            if m:
                self.stream_port = int(m.group(2))
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("sluiced did not log 'listening stream=...'")


class RabbitStreams(run.RabbitMQ):
    """A private RabbitMQ node with rabbitmq_stream enabled, its listener on a free port."""

    def __init__(self, base):
        self.stream_port = run.free_port()
        super().__init__(base, node="sluicestreams@localhost", plugins=["rabbitmq_stream"],
                         conf_extra="stream.listeners.tcp.1 = %s:%d\n"
                                    % (HOST, self.stream_port))


def run_tool(cmd, timeout, pids=None, tmp=None):
    """Runs one client; with pids (when perf can count syscalls), also counts the fsync-family
    calls (fsync, fdatasync, sync_file_range, msync) those broker processes make meanwhile:
    how often each broker syncs explains much of its confirm rate and latency."""
    perf_out = None
    if pids and tmp:
        perf_out = Path(tmp) / "perf-fsync.csv"
        cmd = ["perf", "stat", "-x,", "-o", str(perf_out), "-e", ",".join(run.FSYNC_EVENTS),
               "-p", ",".join(str(p) for p in pids), "--"] + cmd
    t0 = time.monotonic()
    load = os.getloadavg()[0]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "timed out after %d s: %s" % (timeout, " ".join(cmd))}
    res = None
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
    if res is None or r.returncode != 0:
        return {"ok": False, "error": "%s exit %d: %s" % (Path(cmd[0]).name, r.returncode,
                                                         r.stderr[-2000:])}
    res["wall_s"] = round(time.monotonic() - t0, 2)
    res["loadavg1"] = load
    if perf_out is not None and perf_out.exists():
        n = 0
        for line in perf_out.read_text().splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[0].strip().isdigit():
                n += int(parts[0])
        res["fsyncs"] = n
    return res


def stream_cmd(tools, b, args, name):
    return [str(tools / "streambench"), "-H", HOST, "-p", str(b.stream_port), "--stream", name,
            "--pids", ",".join(str(p) for p in b.pids())] + args.split()


def amqp_cmd(tools, b, args, tag):
    return [str(tools / "amqpbench"), "-H", HOST, "-p", str(b.port), "--tag", tag,
            "--pids", ",".join(str(p) for p in b.pids())] + args.split()


def ceiling(tools):
    """The loopback ceiling at the wire sizes of one message: Publish (id 8 + length 4 + AMQP
    1.0 data section 5 or 8 + body) and Deliver (length 4 + section + body)."""
    out = {}
    for key, nbytes in (("publish16", 8 + 4 + 5 + 16), ("publish1k", 8 + 4 + 8 + 1024),
                        ("deliver16", 4 + 5 + 16)):
        out[key] = run.run_tcpceil(tools / "tcpceil", ["--mode", "batch", "--msg-bytes",
                                                       str(nbytes), "--seconds", "2"])
    return out


def client_ceiling(tools, args):
    """streambench --self-peer: each stream protocol scenario against a peer thread of the
    client's own process that confirms and delivers at once (no broker): what the client can
    do at most, per scenario id (the latency rows: the client's own p50 and p99)."""
    out = {}
    for sid, _, tool, full, smoke, metric, _, _, _ in SCENARIOS:
        if tool not in ("stream", "replay"):
            continue
        a = "-S consume -n %d" % args.replay_n if tool == "replay" else \
            (smoke if args.smoke else full)
        a = a.replace("--create", "")
        res = run_tool([str(tools / "streambench"), "--self-peer", "--stall", "30"] + a.split(),
                       120)
        if not res.get("ok"):
            raise RuntimeError("streambench --self-peer %s: %s" % (a, res.get("error")))
        out[sid] = res["metrics"][metric]
        if sid == "lat10k_p50":
            out["lat10k_p99"] = res["metrics"]["p99_us"]
    return out


def median_of(samples, broker, sid, field):
    v = [s[field] for s in samples if s["broker"] == broker and s["sid"] == sid and
         s.get(field) is not None]
    return statistics.median(v) if v else None


def median(samples, broker, sid):
    return median_of(samples, broker, sid, "value")


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "us":
        return "%.0f us" % v if v >= 10 else "%.1f us" % v
    if v >= 1e6:
        return "%.2fM" % (v / 1e6)
    if v >= 1e3:
        return "%.0fk" % (v / 1e3)
    return "%.0f" % v


def report(samples, ceil, selfpeer, env, args, fills, wall, loads, errors):
    lines = ["# Streams: Sluice vs RabbitMQ (make bench-streams%s)" %
             (" smoke" if args.smoke else ""), "",
             "- date: %s; wall %.0f s; rounds %d, alternating (A B, B A, ...); medians" %
             (env["date"], wall, args.rounds),
             "- host: %s" % env["host"],
             "- between samples: %s" % ("nothing" if args.no_sync_between else
                                        "sync(2), so no sample pays for the writeback of what "
                                        "an earlier one left dirty"),
             "- load average (1 min) at the start of each sample: min %.2f, median %.2f, max %.2f"
             % (min(loads), statistics.median(loads), max(loads)) if loads else "- load: -",
             "- sluice: %s%s" % (env["sluice"], "; set: " + ", ".join(args.sluice_set)
                                  if args.sluice_set else ""),
             "- rabbitmq: %s, plugin rabbitmq_stream, default stream settings" % env["rabbitmq"],
             "- clients: bench/streambench.c (stream protocol, libc only), bench/amqpbench.c "
             "(AMQP 0-9-1, %s; pipelined publisher and raw consumer)" % env["client"],
             "- replay: a stream of %d messages of 16 B, filled once per broker (fill rate with "
             "confirms: %s)" % (args.replay_n, ", ".join(
                 "%s %s msg/s" % (k, fmt(v, "msg/s")) for k, v in fills.items())),
             "", "| scenario | Sluice | RabbitMQ | Sluice / RabbitMQ | target | met "
             "| fsyncs per 1k msgs, Sluice / RabbitMQ | client alone |",
             "|---|---|---|---|---|---|---|---|"]
    for sid, title, _, _, _, _, unit, better, target in SCENARIOS:
        s, r = median(samples, "sluice", sid), median(samples, "rabbitmq", sid)
        ratio = s / r if s is not None and r else None
        if target is None or ratio is None:
            tgt, met = "-" if target is None else ("%s %.1fx" % (
                ">=" if better == "higher" else "<=", target)), "-"
        else:
            tgt = "%s %.1fx" % (">=" if better == "higher" else "<=", target)
            met = "yes" if (ratio >= target if better == "higher" else ratio <= target) else "no"
        fs = [median_of(samples, b, sid, "fsyncs_per_1k") for b in ("sluice", "rabbitmq")]
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            title, fmt(s, unit), fmt(r, unit), "%.2fx" % ratio if ratio else "-", tgt, met,
            " / ".join("-" if v is None else "%.1f" % v for v in fs),
            fmt(selfpeer.get(sid), unit)))
    lines += ["", "Client alone: streambench --self-peer, the same scenario against a peer "
              "thread of its own process that confirms and delivers at once (no broker): the "
              "most the stream protocol client can measure (latency rows: its own p50 / p99). "
              "The AMQP rows use amqpbench's pipelined publisher and raw consumer (see "
              "bench/README.md, Reading the numbers).",
              "", "Loopback ceiling (tcpceil --mode batch, 64 KiB writes, no broker): " +
              ", ".join("%s (%d B/msg) %s msg/s" % (k, c["msg_bytes"], fmt(c["msgs_per_s"],
                                                                              "msg/s"))
                        for k, c in ceil.items())]
    cc = {}
    for s in samples:
        if s.get("client_cpu") is not None:
            cc.setdefault(s["sid"], []).append(s["client_cpu"])
    if cc:
        lines.append("Client CPU share of the wall time (max over samples): " + ", ".join(
            "%s %.2f" % (k, max(v)) for k, v in cc.items()))
    if errors:
        lines += ["", "Failures:"] + ["- %s" % e for e in errors]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="small N, one round (under a minute)")
    ap.add_argument("--replay-n", type=int, default=10000000)
    ap.add_argument("--only", default="", help="comma-separated scenario ids")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "streams"))
    ap.add_argument("--no-rabbitmq", action="store_true")
    ap.add_argument("--sluice-set", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra config line for sluiced (e.g. sync_pace_us=0)")
    ap.add_argument("--no-sync-between", action="store_true",
                    help="do not flush the page cache's dirty data (sync) before each sample")
    args = ap.parse_args()
    run.SLUICE_SET.extend(args.sluice_set)
    if args.smoke:
        args.rounds = 1
        args.replay_n = 20000
    build = Path(args.build)
    if not build.is_absolute():
        build = REPO / build
    tools = build / "bench"
    only = set(filter(None, args.only.split(",")))
    want = ["sluice"]
    if not args.no_rabbitmq:
        if run.RabbitMQ.available():
            want.append("rabbitmq")
        else:
            log("rabbitmq-server not installed: Sluice only")
    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="sluice-streams.")
    brokers, samples, errors, loads, fills = [], [], [], [], {}
    try:
        ceil = ceiling(tools)
        log("loopback ceiling: %s" % {k: round(c["msgs_per_s"]) for k, c in ceil.items()})
        selfpeer = client_ceiling(tools, args)
        log("client alone (--self-peer): %s" % {k: round(v) for k, v in selfpeer.items()})
        for name in want:
            b = SluiceStreams(build / "sluiced", Path(tmp) / "sluice") if name == "sluice" \
                else RabbitStreams(Path(tmp) / "rabbitmq")
            t0 = time.monotonic()
            b.start()
            log("%s up: amqp %d, stream %d (pids %s) in %.1f s" % (
                b.label, b.port, b.stream_port, b.pids(), time.monotonic() - t0))
            brokers.append(b)
        timeout = 300 if args.smoke else 1800
        count_fsync = run.perf_can_count_syscalls()
        if not only or "replay" in only:
            for b in brokers:  # the stream replayed by every round
                res = run_tool(stream_cmd(tools, b, "-S publish --create --keep -s 16 -n %d"
                                          % args.replay_n, "replay"), timeout)
                if not res.get("ok"):
                    raise RuntimeError("filling the replay stream on %s: %s"
                                       % (b.label, res.get("error")))
                fills[b.name] = res["metrics"]["msg_s"]
                log("%s: replay stream filled, %d msgs at %.0f msg/s"
                    % (b.label, args.replay_n, fills[b.name]))
        for rnd in range(1, args.rounds + 1):
            order = brokers if rnd % 2 else list(reversed(brokers))
            for sid, title, tool, full, smoke, metric, unit, _, _ in SCENARIOS:
                if tool in ("amqp_same", "lat_same") or (only and sid not in only):
                    continue
                for b in order:
                    name = "r%d-%s-%s" % (rnd, sid, b.name)
                    if tool == "stream":
                        cmd = stream_cmd(tools, b, smoke if args.smoke else full, name)
                    elif tool == "replay":
                        cmd = stream_cmd(tools, b, "-S consume -n %d" % args.replay_n, "replay")
                    else:
                        cmd = amqp_cmd(tools, b, smoke if args.smoke else full, name)
                    if not args.no_sync_between:
                        # RabbitMQ's streams write without syncing: the kernel writes their
                        # pages back up to 30 s later, into whatever sample runs then, where
                        # every fdatasync of a broker that syncs queues behind them
                        os.sync()
                    res = run_tool(cmd, timeout, b.pids() if count_fsync else None, tmp)
                    if not res.get("ok"):
                        errors.append("round %d %s on %s: %s" % (rnd, sid, b.label,
                                                                  res.get("error")))
                        log(errors[-1])
                        continue
                    loads.append(res["loadavg1"])
                    m = res["metrics"]
                    rows = [(sid, metric)]
                    if sid == "amqp_pub":
                        rows.append(("amqp_cons", "drain_rate"))
                    if sid == "lat10k_p50":
                        rows.append(("lat10k_p99", "p99_us"))
                    msgs = m.get("records") or res.get("n")
                    for rsid, key in rows:
                        samples.append({
                            "fsyncs_per_1k": res["fsyncs"] * 1000.0 / msgs
                            if "fsyncs" in res and msgs else None,
                            "round": rnd, "broker": b.name, "sid": rsid, "metric": key,
                            "value": m.get(key), "client_cpu": m.get(
                                "drain_client_cpu" if rsid == "amqp_cons" else "client_cpu"),
                            "loadavg1": res["loadavg1"], "raw": res})
                        log("round %d %-10s %-8s %s = %s (load %.2f)" % (
                            rnd, rsid, b.label, key, fmt(m.get(key), unit), res["loadavg1"]))
        if args.smoke and errors:
            raise RuntimeError("smoke: %d failure(s)" % len(errors))
    finally:
        for b in brokers:
            b.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.monotonic() - t_start
    env = run.environment(build / "sluiced")
    env["client"] = "librabbitmq %s" % run.sh("dpkg-query -W -f='${Version}' librabbitmq4")
    text = report(samples, ceil, selfpeer, env, args, fills, wall, loads, errors)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = ("smoke-" if args.smoke else "") + stamp
    (out / (name + ".md")).write_text(text)
    (out / ("smoke-latest.md" if args.smoke else "latest.md")).write_text(text)
    (out / (name + ".json")).write_text(json.dumps({
        "env": env, "args": vars(args), "ceiling": ceil, "client_alone": selfpeer,
        "fills": fills, "samples": samples,
        "errors": errors, "wall_s": round(wall, 1)}, indent=1))
    log("wrote %s" % (out / (name + ".md")))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
