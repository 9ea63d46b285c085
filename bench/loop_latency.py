#!/usr/bin/env python3
"""loop_latency.py - do TLS handshakes or slow password checks hold up the event loop?
(issue 11: "a handshake never blocks the event loop ... measure it")

One sluiced with an AMQPS listener and a user whose password is hashed with Argon2id.  A
plain AMQP client pings through it (publish to a queue it consumes, wait for the delivery: one
round trip through the loop) every few milliseconds, in these phases:

  idle     nothing else happens
  storm    N `openssl s_time -new` processes make full TLS handshakes (ECDHE + ECDSA P-256) to
           the AMQPS port as fast as they can, each then closed
  stalled  S sockets sit on the AMQPS port, half of them having sent the first bytes of a
           ClientHello, none finishing (ssl_handshake_timeout is raised so none is closed)
  argon2   N processes log in over AMQP as the Argon2id user with a wrong password, as fast
           as they are answered (each check costs about 20 ms of CPU)
  argon2-http  the same through the management API (Basic auth, one request each)

and prints the round trip's median, 99th percentile and maximum per phase, and the
handshakes per second of the storm.  A loop that waited for a handshake would show the
stalled phase's pings stuck at the handshake timeout; a handshake's cost in CPU shows as the
storm's added latency (the loop does each handshake step's cryptography itself).

    python3 bench/loop_latency.py [--build build] [--seconds 10] [--storm 4] [--stalled 500]
"""

import argparse
import base64
import http.client
import multiprocessing
import re
import struct
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import amqp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import make_tls_certs  # noqa: E402


def start(binary, tmp, certs):
    conf = tmp / "tls.conf"
    conf.write_text("listeners.ssl.default = 0\nssl_options.cacertfile = %s\n"
                    "ssl_options.certfile = %s\nssl_options.keyfile = %s\n"
                    "ssl_handshake_timeout = 600000\nhandshake_timeout = 600000\n"
                    "password_hashing_module = sluice_password_hashing_argon2id\n"
                    "user.slow = the-right-one\n"
                    % (certs["ca"], certs["cert"], certs["key"]))
    log = tmp / "sluiced.log"
    p = subprocess.Popen([str(binary), "--port", "0", "--mgmt-port", "0", "--data-dir",
                          str(tmp / "data"), "--config", str(conf)], stdout=open(log, "wb"),
                         stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        t = log.read_text(errors="replace")
        m = re.search(r"listening amqp=[0-9.]+:(\d+)", t)
        mt = re.search(r"listening amqps=[0-9.]+:(\d+)", t)
        mh = re.search(r"listening http=[0-9.]+:(\d+)", t)
        if m and mt and mh:
            return p, int(m.group(1)), int(mt.group(1)), int(mh.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.02)
    p.kill()
    raise RuntimeError("sluiced did not start:\n" + log.read_text(errors="replace")[-2000:])


def bad_amqp_logins(port, seconds, counter):
    """Log in as 'slow' with a wrong password, over and over (raw AMQP: header, start-ok)."""
    resp = b"\0slow\0wrong"
    args = (struct.pack(">I", 0) + b"\x05PLAIN" + struct.pack(">I", len(resp)) + resp +
            b"\x05en_US")
    payload = struct.pack(">HH", 10, 11) + args
    frame = struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce"
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"AMQP\x00\x00\x09\x01")
        s.recv(4096)  # connection.start
        s.sendall(frame)
        try:
            while s.recv(4096):  # the refusal closes the connection
                pass
        except OSError:
            pass
        s.close()
        n += 1
    with counter.get_lock():
        counter.value += n


def bad_http_logins(port, seconds, counter):
    tok = base64.b64encode(b"slow:wrong").decode()
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/api/whoami", headers={"Authorization": "Basic " + tok})
        c.getresponse().read()
        c.close()
        n += 1
    with counter.get_lock():
        counter.value += n


def storm_of(fn, port, procs, seconds):
    counter = multiprocessing.Value("l", 0)
    ps = [multiprocessing.Process(target=fn, args=(port, seconds, counter)) for _ in range(procs)]
    for p in ps:
        p.start()
    return ps, counter


def pings(port, seconds, gap=0.002):
    c = amqp.Connection(host="127.0.0.1:%d" % port, userid="guest", password="guest")
    c.connect()
    ch = c.channel()
    q, _, _ = ch.queue_declare("", exclusive=True)
    got = []
    ch.basic_consume(q, no_ack=True, callback=lambda m: got.append(1))
    rtts = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        ch.basic_publish(amqp.Message(b"ping"), exchange="", routing_key=q)
        while not got:
            c.drain_events(timeout=30)
        got.clear()
        rtts.append((time.perf_counter() - t0) * 1e3)
        time.sleep(gap)
    c.close()
    return rtts


def summary(name, rtts):
    rtts = sorted(rtts)
    p99 = rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))]
    return "| %s | %d | %.3f | %.3f | %.3f |" % (name, len(rtts), statistics.median(rtts), p99,
                                                 rtts[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--storm", type=int, default=4)
    ap.add_argument("--stalled", type=int, default=500)
    a = ap.parse_args()
    binary = Path(a.build) / "sluiced"
    with tempfile.TemporaryDirectory(prefix="tls-loop-") as t:
        tmp = Path(t)
        certs = make_tls_certs(tmp / "certs")
        p, port, tport, hport = start(binary, tmp, certs)
        rows = []
        try:
            pings(port, 1)  # warm up
            rows.append(summary("idle", pings(port, a.seconds)))
            storm = [subprocess.Popen(["openssl", "s_time", "-connect", "127.0.0.1:%d" % tport,
                                       "-new", "-time", str(int(a.seconds) + 2), "-CAfile",
                                       certs["ca"]], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
                     for _ in range(a.storm)]
            time.sleep(0.5)
            rtts = pings(port, a.seconds)
            hs = 0
            secs = 0.0
            for s in storm:
                out = s.communicate(timeout=a.seconds + 60)[0]
                m = re.search(r"(\d+) connections in ([0-9.]+)s", out)
                if m:
                    hs += int(m.group(1))
                    secs = max(secs, float(m.group(2)))
            rows.append(summary("storm (%d s_time, %.0f handshakes/s)"
                                % (a.storm, hs / secs if secs else 0), rtts))
            held = []
            for i in range(a.stalled):
                s = socket.create_connection(("127.0.0.1", tport), timeout=5)
                if i % 2:
                    s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
                held.append(s)
            rows.append(summary("stalled (%d half-open handshakes)" % a.stalled,
                                pings(port, a.seconds)))
            for s in held:
                s.close()
            for name, fn, prt in (("argon2", bad_amqp_logins, port),
                                  ("argon2-http", bad_http_logins, hport)):
                ps, counter = storm_of(fn, prt, a.storm, a.seconds + 1)
                time.sleep(0.5)
                rtts = pings(port, a.seconds)
                for q in ps:
                    q.join(a.seconds + 120)
                rows.append(summary("%s (%d clients, %.0f refused logins/s)"
                                    % (name, a.storm, counter.value / (a.seconds + 1)), rtts))
        finally:
            p.terminate()
            p.wait(30)
    print("| phase | pings | median ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
