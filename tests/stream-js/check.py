#!/usr/bin/python3
"""check.py - the stream client suite as a gate (make stream-client-test, CI).

Runs run.sh (the whole vendored suite, unpatched, against a private sluiced) with mocha's JSON
report, then prints a line per failed or pending test with its error, the counts per file, and
the totals. It passes when every test that fails is listed in known-failures.txt (a full title
per line, "#" comments: each with the reason it cannot pass here) and every test listed there
still fails: a test that starts to pass must leave the list, so the list stays the truth.

    tests/stream-js/check.py [FILE...]      (FILE: some test files, as run.sh takes them)
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def titles(name):
    out = set()
    with open(os.path.join(HERE, name)) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                out.add(line)
    return out


def main(argv):
    fd, report = tempfile.mkstemp(prefix="sluice-stream-js-", suffix=".json")
    os.close(fd)
    try:
        env = dict(os.environ, STREAM_JS_JSON=report)
        rc = subprocess.call([os.path.join(HERE, "run.sh")] + argv, env=env)
        try:
            with open(report) as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            print("stream client suite: no report (run.sh exited %d): %s" % (rc, e))
            return 1
    finally:
        os.unlink(report)
    per_file = collections.defaultdict(lambda: [0, 0, 0])
    for t in r.get("passes", []):
        per_file[os.path.relpath(t.get("file", "?"), HERE)][0] += 1
    for t in r.get("failures", []):
        per_file[os.path.relpath(t.get("file", "?"), HERE)][1] += 1
    for t in r.get("pending", []):
        per_file[os.path.relpath(t.get("file", "?"), HERE)][2] += 1
    print("%-55s %7s %7s %7s" % ("file", "passing", "failing", "pending"))
    for f in sorted(per_file):
        print("%-55s %7d %7d %7d" % ((f,) + tuple(per_file[f])))
    known = titles("known-failures.txt")
    flaky = titles("flaky.txt")
    failed = {t["fullTitle"]: t for t in r.get("failures", [])}
    for t in r.get("pending", []):
        print("pending: %s" % t["fullTitle"])
    unexpected = [n for n in failed if n not in known]
    for n, t in failed.items():
        e = (t.get("err") or {}).get("message", "")
        err = (e if isinstance(e, str) else json.dumps(e)).strip().splitlines()
        print("%s: %s\n    %s" % ("FAILED (known)" if n in known else "FAILED", n,
                                   err[0][:300] if err else "?"))
    ran = {t["fullTitle"] for k in ("passes", "failures", "pending") for t in r.get(k, [])}
    fixed = sorted(n for n in known if n in ran and n not in failed)
    for n in fixed:
        print("PASSES but is listed in known-failures.txt (take it out): %s" % n)
    s = r.get("stats", {})
    print("stream client suite: %d passing, %d failing (%d known or flaky), %d pending"
          % (s.get("passes", 0), s.get("failures", 0), len(failed) - len(unexpected),
             s.get("pending", 0)))
    if unexpected or fixed:
        return 1
    # mocha's own status counts failures: a clean run of the listed ones is still a pass,
    # but a run that stopped (no stats, a crash) is not
    return 0 if s else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
