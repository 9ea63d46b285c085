"""stream_replay_rss.py - the stream protocol door's memory while a stream is replayed
(issue 47: "memory does not grow with the stream's length or its consumers' spread").

    python3 bench/stream_replay_rss.py MESSAGES SUBSCRIPTIONS

Starts a private sluiced (SLUICED, default build/sluiced) on 127.0.0.1 with a data directory
of its own, publishes MESSAGES messages of 1 KiB with confirms into one stream over the raw
test client (tests/integration/streamraw.py), opens SUBSCRIPTIONS subscriptions from `first`
(the others take 4 chunks and stop), replays the whole stream through the first one a credit
at a time, and prints the rates and sluiced's RSS (VmRSS) after publishing and at the peak of
the replay. The publishing rate is the Python client's, not the door's. Stops sluiced by its
pid and removes its directory."""
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

work = tempfile.mkdtemp(prefix="sluice-stream-rss.")
os.mkdir(work + "/data")
open(work + "/sluice.conf", "w").write("listeners.stream = 0\n")
log = open(work + "/log", "wb")
p = subprocess.Popen([os.environ.get("SLUICED", os.path.join(repo, "build", "sluiced")), "--bind", "127.0.0.1", "--port", "0", "--mgmt-port", "0",
                      "--data-dir", work + "/data", "--config", work + "/sluice.conf"], stdout=log, stderr=log)
try:
    port = None
    for _ in range(200):  # bounded: 10 s
        m = re.search(rb"listening stream=[0-9.]+:(\d+)", open(work + "/log", "rb").read())
        if m:
            port = int(m.group(1)); break
        time.sleep(0.05)
    def rss():
        for l in open("/proc/%d/status" % p.pid):
            if l.startswith("VmRSS"):
                return int(l.split()[1])
    c = sr.StreamClient(port, timeout=60); c.connect()
    corr = c.request(sr.CREATE, sr.s16("big") + sr.kvmap({})); assert c.response(sr.CREATE, corr)[0] == sr.OK
    assert c.declare_publisher(0, "big") == sr.OK
    N, B = int(sys.argv[1]), 1024
    body = sr.amqp10(b"x" * (B - 8))
    t0 = time.time(); sent = 0; pid = 1
    got = 0
    while sent < N:
        k = min(500, N - sent)
        c.publish(0, [(pid + i, body) for i in range(k)]); pid += k; sent += k
        while sent - got > 50000:
            r = c.expect(sr.PUBLISH_CONFIRM); r.take(">B"); got += r.take(">i")
    while got < N:
        r = c.expect(sr.PUBLISH_CONFIRM); r.take(">B"); got += r.take(">i")
    t1 = time.time()
    print("published %d x %d B with confirms in %.1fs (%.0f msg/s); RSS after: %d KiB" % (N, B, t1 - t0, N / (t1 - t0), rss()))
    peak = 0
    subs = []
    for i in range(int(sys.argv[2])):
        s = sr.StreamClient(port, timeout=60); s.connect()
        assert s.subscribe(0, "big", sr.FIRST, credit=4) == sr.OK
        subs.append(s)
    t0 = time.time(); n = 0
    while n < N:
        _, hdr, entries = subs[0].deliver(); n += len(entries); subs[0].credit(0, 1)
        if n % 10000 < len(entries):
            peak = max(peak, rss())
    t1 = time.time()
    peak = max(peak, rss())
    print("one subscriber replayed %d from first in %.1fs (%.0f msg/s) with %d other subscribers opened; peak RSS %d KiB" % (N, t1 - t0, N / (t1 - t0), len(subs) - 1, peak))
finally:
    p.terminate(); p.wait(10)
    shutil.rmtree(work, ignore_errors=True)
