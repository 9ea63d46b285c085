#!/usr/bin/python3
"""depth.py - queue depth bounded by disk, and recovery time (the durable-store issue).

  depth.py rss [--messages 10000000] [--size 1024] [--budget 256M]
      N persistent messages with publisher confirms into one durable queue, then all consumed
      (bench/amqpbench -S confirm, which checks every message arrives exactly once); reports
      sluiced's peak RSS (VmHWM) and the rates.
  depth.py ... --raw-consume
      the consumer reads its socket itself and takes bodies in place (amqpbench
      --raw-consume), so that the drain rate is the broker's rather than librabbitmq's.
  depth.py recovery [--messages 1000000] [--size 16] [--budget 256M]
      N persistent messages with publisher confirms into a durable queue (the pipelined
      publisher), SIGTERM, restart on the same data directory; reports the recovery time
      sluiced logs, the time until it accepts connections, the recovering sluiced's peak RSS,
      then drains the queue checking every message exactly once (amqpbench --drain).

Not a test: a measurement for the release note. Needs `make all bench-tools` first.
Traffic only to 127.0.0.1; it stops only the brokers it started.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LISTEN = re.compile(rb"listening amqp=([0-9.]+):(\d+)")


def start(build, data, config):
    conf = os.path.join(data, "..", "sluice.conf")
    with open(conf, "w") as f:
        for k, v in config.items():
            f.write("%s = %s\n" % (k, v))
    start.n = getattr(start, "n", 0) + 1
    log = open(os.path.join(data, "..", "sluiced-%d.log" % start.n), "wb")
    t0 = time.monotonic()
    p = subprocess.Popen([os.path.join(build, "sluiced"), "--port", "0", "--mgmt-port", "off",
                          "--data-dir", data, "--config", conf], stdout=log, stderr=log)
    path = log.name
    while True:
        m = LISTEN.search(open(path, "rb").read())
        if m:
            return p, int(m.group(2)), time.monotonic() - t0, path
        if p.poll() is not None:
            sys.exit("sluiced exited: %s" % open(path).read())
        time.sleep(0.01)


def stop(p):
    p.send_signal(signal.SIGTERM)
    return p.wait(timeout=120)


def hwm_kib(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def cmd_rss(a, build, work):
    data = os.path.join(work, "data")
    os.makedirs(data)
    p, port, _, log = start(build, data, {"memory_budget": a.budget,
                                          "memory_high_watermark": "2G"})
    t0 = time.monotonic()
    out = subprocess.run([os.path.join(build, "bench", "amqpbench"), "-S", "confirm", "-p",
                          str(port), "-n", str(a.messages), "-s", str(a.size), "--stall", "300",
                          "--pids", str(p.pid)] + (["--raw-consume"] if a.raw_consume else []),
                         capture_output=True, text=True)
    wall = time.monotonic() - t0
    peak = hwm_kib(p.pid)
    stop(p)
    print(out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr)
    if out.returncode != 0:
        sys.exit("amqpbench failed:\n" + out.stderr)
    print("messages=%d size=%d budget=%s wall=%.1fs peak_rss=%.1f MiB" %
          (a.messages, a.size, a.budget, wall, peak / 1024.0))


def amqpbench(build, port, *args):
    out = subprocess.run([os.path.join(build, "bench", "amqpbench"), "-p", str(port),
                          "--stall", "600"] + [str(x) for x in args], capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit("amqpbench failed:\n" + out.stderr)
    return out.stdout.strip().splitlines()[-1]


def cmd_recovery(a, build, work):
    data = os.path.join(work, "data")
    os.makedirs(data)
    conf = {"memory_budget": a.budget}
    p, port, _, log = start(build, data, conf)
    t0 = time.monotonic()
    # the pipelined publisher with confirms: every message confirmed before the stop
    amqpbench(build, port, "-S", "confirm", "--raw", "--keep", "--tag", "depth", "-n",
              a.messages, "-s", a.size)
    print("published %d persistent %d B messages with confirms in %.1f s" %
          (a.messages, a.size, time.monotonic() - t0))
    stop(p)
    du = subprocess.run(["du", "-sh", data], capture_output=True, text=True).stdout.split()[0]
    p, port, startup, log = start(build, data, conf)
    text = open(log).read()
    m = re.findall(r"recovered (\d+) durable queue\(s\) and (\d+) message\(s\) .* in (\d+) ms",
                   text)
    peak = hwm_kib(p.pid)
    # every message back, each exactly once (amqpbench checks the sequence stamps)
    drained = amqpbench(build, port, "-S", "confirm", "--drain", "--tag", "depth", "-n",
                        a.messages, "-s", a.size, "--pids", p.pid,
                        *(["--raw-consume"] if a.raw_consume else []))
    drain_peak = hwm_kib(p.pid)
    stop(p)
    print("store %s; recovered %s messages; sluiced logged %s ms; listening after %.2f s; "
          "peak RSS of the recovering sluiced %.1f MiB (budget %s); then drained exactly once "
          "(peak RSS %.1f MiB): %s" % (du, m[-1][1], m[-1][2], startup, peak / 1024, a.budget,
                                       drain_peak / 1024, drained))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["rss", "recovery"])
    ap.add_argument("--messages", type=int)
    ap.add_argument("--size", type=int)
    ap.add_argument("--budget", default="256M")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--raw-consume", action="store_true",
                    help="the consumer reads its socket itself (amqpbench --raw-consume)")
    a = ap.parse_args()
    if a.what == "rss":
        a.messages = a.messages or 10000000
        a.size = a.size or 1024
    else:
        a.messages = a.messages or 1000000
        a.size = a.size or 16
    work = tempfile.mkdtemp(prefix="sluice-depth-")
    try:
        (cmd_rss if a.what == "rss" else cmd_recovery)(a, a.build, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
