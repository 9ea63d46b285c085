"""stream_spread_rss.py - the node's memory with a long stream read at many places at once
(issue 47: "a 10 GiB stream read by 100 consumers at 100 different offsets keeps the node's RSS
bounded").

    python3 bench/stream_spread_rss.py [--messages N] [--size B] [--consumers K] [--rounds R]

Starts a private sluiced (SLUICED, default build/sluiced; BUILD for streambench) on 127.0.0.1
with a data directory of its own (TMPDIR), fills one stream with N messages of B bytes through
bench/streambench (stream protocol, confirms), then opens K subscriptions over the raw test
client (tests/integration/streamraw.py), subscription i from offset i * N / K, and reads R
Delivers from each in turn, a credit at a time, so K readers move through K far-apart parts
of the log together. Prints sluiced's VmRSS after the fill, its peak during the reads, the
stream's bytes on disk and the read rate. Defaults: 10,000,000 x 1 KiB (10 GiB with the
entries' headers), 100 subscriptions, 50 rounds. Stops sluiced by its pid and removes its
directory; every wait is bounded."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(repo, "tests", "integration"))
import streamraw as sr  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--consumers", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=50)
    a = ap.parse_args()
    build = os.environ.get("BUILD", os.path.join(repo, "build"))
    work = tempfile.mkdtemp(prefix="sluice-stream-spread.")
    os.mkdir(work + "/data")
    open(work + "/sluice.conf", "w").write("listeners.stream = 0\n")
    log = open(work + "/log", "wb")
    p = subprocess.Popen([os.environ.get("SLUICED", os.path.join(build, "sluiced")), "--bind",
                          "127.0.0.1", "--port", "0", "--mgmt-port", "0", "--data-dir",
                          work + "/data", "--config", work + "/sluice.conf"],
                         stdout=log, stderr=log)
    try:
        port = None
        for _ in range(200):  # bounded: 10 s
            m = re.search(rb"listening stream=[0-9.]+:(\d+)", open(work + "/log", "rb").read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.05)
        assert port, "sluiced did not start"

        def rss():
            for line in open("/proc/%d/status" % p.pid):
                if line.startswith("VmRSS"):
                    return int(line.split()[1])
            return 0

        t0 = time.time()
        subprocess.run([os.path.join(build, "bench", "streambench"), "-S", "publish", "-p",
                        str(port), "-n", str(a.messages), "-s", str(a.size), "--stream", "big",
                        "--create", "--keep", "--stall", "120"], check=True,
                       stdout=subprocess.DEVNULL, timeout=3600)
        fill = time.time() - t0
        disk = sum(os.path.getsize(os.path.join(d, f))
                   for d, _, fs in os.walk(work + "/data/streams") for f in fs)
        after_fill = rss()
        print("filled %d x %d B in %.0f s (%.0f msg/s); stream on disk %.2f GiB; RSS %d KiB"
              % (a.messages, a.size, fill, a.messages / fill, disk / 2**30, after_fill))
        subs = []
        for i in range(a.consumers):
            c = sr.StreamClient(port, timeout=60)
            c.connect()
            off = i * a.messages // a.consumers
            assert c.subscribe(0, "big", sr.OFFSET, value=off, credit=1) == sr.OK
            subs.append((c, off))
        peak, got, t0 = rss(), 0, time.time()
        for r in range(a.rounds):
            for k, (c, off) in enumerate(subs):
                _, hdr, entries = c.deliver()
                if r == 0:  # each starts where it was asked to (a Deliver may begin before)
                    assert hdr["chunk_id"] <= off < hdr["chunk_id"] + max(len(entries), 1) \
                        or hdr["chunk_id"] >= off, (k, off, hdr["chunk_id"])
                got += len(entries)
                c.credit(0, 1)
            peak = max(peak, rss())
        secs = time.time() - t0
        print("%d subscriptions at %d different offsets read %d Delivers each (%d messages, "
              "%.0f msg/s); peak RSS %d KiB (%.1f KiB per subscription over the fill's)"
              % (a.consumers, a.consumers, a.rounds, got, got / secs, peak,
                 (peak - after_fill) / a.consumers))
        for c, _ in subs:
            c.close()
    finally:
        p.terminate()
        p.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
