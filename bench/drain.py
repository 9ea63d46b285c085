#!/usr/bin/env python3
"""drain.py - how fast the link itself moves messages: the store-and-forward drain benchmark.

The forward scenarios of run.py (fwd16, fwd1k, ...) time a publisher end to end, and the
publisher (rabbitmq-c's per-call client) bounds them. Here nothing publishes during the
measure: N persistent messages are preloaded, then released, and the time until the last
one is in the destination queue is the link's (or the shovel's) own rate.

  Sluice:   the source node goes offline (DISCONNECT), N messages are published to the
            destination's format name (they wait in the outgoing queue), the node comes online
            (CONNECT): its link drains the outgoing queue to the destination node.
  RabbitMQ: N messages are published to a queue of the source node, then a dynamic shovel
            (rabbitmq_shovel, ack-mode on-confirm, prefetch 1000, as run.py's) is declared from
            it to a queue of the destination node.

Both: a fresh pair of nodes per broker (run.py's Sluiced / RabbitMQ), durable queues and
persistent messages on both sides, exactly the same bodies. The destination's queue depth is
polled (passive queue.declare every 5 ms). Reported per run:
  drain_rate  N / (release .. last message in the destination queue)   [the headline]
  startup_s   release .. first message seen in the destination queue (connect, shovel start)
  flow_rate   the rate after the first arrival (when the first look saw < 10% of N there)
  cpu_us      CPU of both nodes over the drain, per message
Rounds alternate the brokers (A B A B); medians are reported, with the ratio Sluice / RabbitMQ.

  python3 bench/drain.py [--rounds 3] [--sizes 16,1024] [-n 200000] [--only sluice]
                         [--perf DIR] [--smoke]

Uses run.py's broker classes and python3-amqp (a Debian package the tests already need).
It stops only the processes it started, by pid.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (bench/run.py: the broker classes)

import amqp  # noqa: E402

HOST = run.HOST
POLL_S = 0.005


def cpu_ticks(pids):
    t = 0
    for p in pids:
        try:
            st = Path("/proc/%d/stat" % p).read_text()
        except OSError:
            continue
        f = st[st.rindex(")") + 2:].split()
        t += int(f[11]) + int(f[12])  # utime + stime
    return t


def connect(port):
    c = amqp.Connection("%s:%d" % (HOST, port), userid="guest", password="guest")
    c.connect()
    return c


def depth(ch, q):
    return ch.queue_declare(q, passive=True).message_count


def preload(port, route, n, size, check):
    """n persistent messages to route (no confirms: the depth check says they are in)."""
    c = connect(port)
    ch = c.channel()
    body = b"x" * size
    for i in range(n):
        ch.basic_publish(amqp.Message(body, delivery_mode=2), exchange="", routing_key=route)
    deadline = time.monotonic() + 120
    while check() < n:
        if time.monotonic() > deadline:
            raise RuntimeError("preload: only %d of %d messages arrived" % (check(), n))
        time.sleep(0.05)
    c.close()


PERF = None  # --perf DIR: perf record -g of each Sluice node over its drains


def perf_start(pair, tag):
    if not PERF or pair.name != "sluice":
        return []
    import subprocess
    ps = []
    for role, b in (("src", pair.src), ("dst", pair.dst)):
        out = Path(PERF) / ("%s-%s.data" % (tag, role))
        ps.append(subprocess.Popen(["perf", "record", "-q", "-g", "-o", str(out), "-p",
                                    str(b.proc.pid)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL))
    time.sleep(0.5)  # perf attached
    return ps


def perf_stop(ps):
    import signal
    for p in ps:
        p.send_signal(signal.SIGINT)
    for p in ps:
        p.wait(30)


def watch(dst_port, q, n, pids, release, timeout):
    """Release the messages (release()), then poll the destination's depth until n."""
    c = connect(dst_port)
    ch = c.channel()
    cpu0 = cpu_ticks(pids)
    t0 = time.monotonic()
    release()
    t_rel = time.monotonic()
    first = None
    d = 0
    while d < n:
        d = depth(ch, q)
        now = time.monotonic()
        if d and first is None:
            first = (now, d)
        if now - t0 > timeout:
            raise RuntimeError("drain: %d of %d messages after %.0f s" % (d, n, timeout))
        if d < n:
            time.sleep(POLL_S)
    t_end = time.monotonic()
    cpu1 = cpu_ticks(pids)
    c.close()
    hz = os.sysconf("SC_CLK_TCK")
    # after the first arrival: without the start-up (connect; the shovel's declaration, which
    # includes rabbitmqctl's own start), when the first look saw little of it arrived
    flow = (n - first[1]) / (t_end - first[0]) if first[1] < n / 10 and t_end > first[0] \
        else None
    return {"drain_s": t_end - t_rel, "drain_rate": n / (t_end - t_rel), "flow_rate": flow,
            "first_depth": first[1], "startup_s": first[0] - t_rel,
            "cpu_us": (cpu1 - cpu0) * 1e6 / hz / n}


def sluice_run(pair, tag, n, size, timeout):
    dq = tag + "-dst"
    dc = connect(pair.dst.port)
    dc.channel().queue_declare(dq, durable=True, auto_delete=False)
    dc.close()
    route = "DIRECT=TCP:%s:%d\\private$\\%s" % (HOST, pair.dst.port, dq)
    s, _ = pair.src.api_post("/api/msmq/action", {"object": "MACHINE", "action": "DISCONNECT"})
    assert s in (200, 204), s

    def outgoing():
        st, outq = pair.src.api("GET", "/api/msmq/outgoing")
        return sum(o.get("messages", 0) for o in (outq or [])
                   if dq.lower() in str(o.get("format_name", "")).lower())
    preload(pair.src.port, route, n, size, outgoing)

    def release():
        st, _ = pair.src.api_post("/api/msmq/action", {"object": "MACHINE", "action": "CONNECT"})
        assert st in (200, 204), st
    ps = perf_start(pair, tag)
    try:
        res = watch(pair.dst.port, dq, n, pair.pids(), release, timeout)
    finally:
        perf_stop(ps)
    # every message order-acked: the outgoing queue empties
    deadline = time.monotonic() + 10
    while outgoing() and time.monotonic() < deadline:
        time.sleep(0.1)
    res["outgoing_left"] = outgoing()
    return res


def sluice_many_run(pair, tag, n, size, timeout, k):
    """The same backlog spread over k outgoing queues to the same destination node (k
    destination queues): drained when every outgoing queue is empty (all order-acked)."""
    dqs = ["%s-dst-%d" % (tag, i) for i in range(k)]
    dc = connect(pair.dst.port)
    dch = dc.channel()
    for q in dqs:
        dch.queue_declare(q, durable=True, auto_delete=False)
    routes = ["DIRECT=TCP:%s:%d\\private$\\%s" % (HOST, pair.dst.port, q) for q in dqs]
    s, _ = pair.src.api_post("/api/msmq/action", {"object": "MACHINE", "action": "DISCONNECT"})
    assert s in (200, 204), s
    prefix = (tag + "-dst-").lower()

    def outgoing():
        st, outq = pair.src.api("GET", "/api/msmq/outgoing")
        return sum(o.get("messages", 0) for o in (outq or [])
                   if prefix in str(o.get("format_name", "")).lower())
    c = connect(pair.src.port)
    ch = c.channel()
    body = b"x" * size
    for i in range(n):
        ch.basic_publish(amqp.Message(body, delivery_mode=2), exchange="",
                         routing_key=routes[i % k])
    deadline = time.monotonic() + 300
    while outgoing() < n:
        if time.monotonic() > deadline:
            raise RuntimeError("preload: only %d of %d messages" % (outgoing(), n))
        time.sleep(0.2)
    c.close()
    pids = pair.pids()
    cpu0 = cpu_ticks(pids)
    t0 = time.monotonic()
    st, _ = pair.src.api_post("/api/msmq/action", {"object": "MACHINE", "action": "CONNECT"})
    assert st in (200, 204), st
    while outgoing():
        if time.monotonic() - t0 > timeout:
            raise RuntimeError("drain: %d left after %.0f s" % (outgoing(), timeout))
        time.sleep(0.02)
    t = time.monotonic() - t0
    cpu1 = cpu_ticks(pids)
    arrived = sum(dch.queue_declare(q, passive=True).message_count for q in dqs)
    dc.close()
    if arrived != n:
        raise RuntimeError("%d of %d arrived" % (arrived, n))
    conns = len([x for x in Path("/proc/%d/fd" % pair.dst.proc.pid).iterdir()])
    return {"drain_s": t, "drain_rate": n / t, "startup_s": None, "first_depth": None,
            "flow_rate": None,
            "cpu_us": (cpu1 - cpu0) * 1e6 / os.sysconf("SC_CLK_TCK") / n,
            "dst_fds": conns, "outgoing_left": 0, "queues": k}


def rabbit_run(pair, tag, n, size, timeout):
    sq, dq = tag + "-src", tag + "-dst"
    sc = connect(pair.src.port)
    sch = sc.channel()
    sch.queue_declare(sq, durable=True, auto_delete=False)
    dc = connect(pair.dst.port)
    dc.channel().queue_declare(dq, durable=True, auto_delete=False)
    dc.close()
    preload(pair.src.port, sq, n, size, lambda: depth(sch, sq))
    sc.close()
    spec = {"src-protocol": "amqp091", "src-uri": "amqp://", "src-queue": sq,
            "dest-protocol": "amqp091",
            "dest-uri": "amqp://guest:guest@%s:%d" % (HOST, pair.dst.port), "dest-queue": dq,
            "ack-mode": "on-confirm", "src-prefetch-count": 1000, "reconnect-delay": 1}

    def release():
        r = pair.src.ctl("set_parameter", "shovel", tag, json.dumps(spec))
        if r.returncode != 0:
            raise RuntimeError("rabbitmqctl set_parameter shovel: " + r.stdout + r.stderr)
    try:
        return watch(pair.dst.port, dq, n, pair.pids(), release, timeout)
    finally:
        pair.src.ctl("clear_parameter", "shovel", tag)
        pair.src.ctl("delete_queue", sq)


def api_post(self, path, body):
    import base64
    import http.client
    c = http.client.HTTPConnection(HOST, self.mgmt_port, timeout=10)
    try:
        c.request("POST", path, body=json.dumps(body), headers={
            "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(),
            "Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        return r.status, None
    finally:
        c.close()


run.Sluiced.api_post = api_post


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="16,1024")
    ap.add_argument("-n", type=int, default=200000, help="messages per run (16 B)")
    ap.add_argument("--n-1k", type=int, default=100000, help="messages per run (>= 1 KiB)")
    ap.add_argument("--only", choices=["sluice", "rabbitmq"])
    ap.add_argument("--sluiced", default=str(run.REPO / "build" / "sluiced"))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=str(run.REPO / "bench" / "results" / "drain"))
    ap.add_argument("--perf", metavar="DIR", help="perf record -g both Sluice nodes' drains")
    ap.add_argument("--queues", type=int, default=1,
                    help="Sluice only: spread each backlog over this many outgoing queues to "
                    "the one destination node (drained = every outgoing queue empty)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: one round, Sluice only, 5,000 x 16 B and 8,000 x 1 KiB (more than "
                    "the 4 MiB a link once lost), 20 s each at most, report to a temp dir")
    a = ap.parse_args()
    if a.smoke:
        a.rounds, a.n, a.n_1k, a.only, a.timeout = 1, 5000, 8000, "sluice", 20
        a.out = tempfile.mkdtemp(prefix="sluice-drain-smoke-")
    global PERF
    PERF = a.perf
    if PERF:
        Path(PERF).mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in a.sizes.split(",")]
    want = [a.only] if a.only else ["sluice", "rabbitmq"]
    if "rabbitmq" in want and not run.RabbitMQ.available():
        run.log("rabbitmq-server not installed: Sluice only")
        want = ["sluice"]
    tmp = tempfile.mkdtemp(prefix="sluice-drain-")
    load0 = os.getloadavg()
    samples = []
    t_start = time.monotonic()
    pairs = run.start_pairs(want, a.sluiced, tmp)
    try:
        for rnd in range(a.rounds):
            for size in sizes:
                n = a.n if size < 1024 else a.n_1k
                for pr in pairs:
                    tag = "d%d-%d" % (rnd, size)
                    if pr.name == "sluice" and a.queues > 1:
                        r = sluice_many_run(pr, tag, n, size, a.timeout, a.queues)
                    else:
                        fn = sluice_run if pr.name == "sluice" else rabbit_run
                        r = fn(pr, tag, n, size, a.timeout)
                    r.update({"broker": pr.name, "size": size, "n": n, "round": rnd})
                    samples.append(r)
                    run.log("round %d %s %d B x %d: drain %.0f msg/s (%.2f s), start-up %s s, "
                            "%.1f us CPU/msg%s" % (
                                rnd + 1, pr.label, size, n, r["drain_rate"], r["drain_s"],
                                "%.2f" % r["startup_s"] if r["startup_s"] is not None else "-",
                                r["cpu_us"], ", %d outgoing queues, destination fds %d" % (
                                    r["queues"], r["dst_fds"]) if r.get("queues") else ""))
    finally:
        for pr in pairs:
            pr.stop()
    shutil.rmtree(tmp, ignore_errors=True)  # the nodes' data (kept when a run failed)
    load1 = os.getloadavg()
    lines = ["# Store-and-forward drain: %s" % datetime.datetime.utcnow().strftime(
        "%Y-%m-%d %H:%M UTC"), "",
        "`python3 bench/drain.py --rounds %d` (%s), %d rounds in %.0f s; load average %.1f at "
        "start, %.1f at end (a shared 2-core machine)." % (
            a.rounds, " ".join(sys.argv[1:]) or "defaults", a.rounds,
            time.monotonic() - t_start, load0[0], load1[0]), "",
        "| size | N | Sluice drain msg/s | RabbitMQ shovel drain msg/s | ratio (target >= 10x) "
        "| Sluice start-up s | shovel start-up s | Sluice after first arrival | shovel after first "
        "arrival | Sluice CPU us/msg (both nodes) | shovel CPU us/msg (both nodes) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def med(b, size, k):
        v = [s[k] for s in samples if s["broker"] == b and s["size"] == size and s[k]]
        return statistics.median(v) if v else None
    for size in sizes:
        sd, rd = med("sluice", size, "drain_rate"), med("rabbitmq", size, "drain_rate")
        cells = [str(size), str(a.n if size < 1024 else a.n_1k),
                 "%.0f" % sd if sd else "-", "%.0f" % rd if rd else "-",
                 "%.1fx" % (sd / rd) if sd and rd else "-"]
        for b in ("sluice", "rabbitmq"):
            v = med(b, size, "startup_s")
            cells.append("%.2f" % v if v else "-")
        for b in ("sluice", "rabbitmq"):
            v = med(b, size, "flow_rate")
            cells.append("%.0f" % v if v else "-")
        for b in ("sluice", "rabbitmq"):
            v = med(b, size, "cpu_us")
            cells.append("%.1f" % v if v else "-")
        lines.append("| " + " | ".join(cells) + " |")
    report = "\n".join(lines) + "\n"
    print(report)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.utcnow().strftime("%Y%m%d-%H%M%S")
    (out / (stamp + ".md")).write_text(report)
    (out / (stamp + ".json")).write_text(json.dumps(samples, indent=1))
    run.log("wrote %s" % (out / (stamp + ".md")))
    if a.smoke:
        shutil.rmtree(out, ignore_errors=True)
    bad = [s for s in samples if s.get("outgoing_left")]
    if bad:
        run.log("FAIL: outgoing queue not empty after the drain: %r" % bad)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
