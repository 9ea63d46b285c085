"""A stream's log after kill -9 (issue 47: "a confirmed stream message survives kill -9"):
the states a kill leaves in a stream's directory, made here by hand from what
tests/crash/crash_test.py found, must recover with every confirmed entry.

A batch that spans segments (small x-stream-max-segment-size-bytes, or a big batch) opens the
file of each new segment before it has written the pieces before it; a kill in between leaves
the last written segment ending before the next file's first offset, and that file empty (the
crash test's data directory: 00000000000000000037.seg holding 37..51, then an empty
00000000000000000055.seg; another stream with five empty files after its last). Nothing in
those files was confirmed (a confirm waits for the whole batch's sync), so recovery must drop
them as a torn tail. st_stream_open refused the directory ("first offset 55 does not follow
52") and the queue was not restored at all: every confirmed entry of the stream was lost. Now
a batch syncs a segment before it writes the next, so only the newest segment with entries can
be torn, and the files past it that no entry reached are removed (drop_unwritten_segments).
Damage anywhere else is no torn tail: recovery stops, naming the file and offset, rather than
drop the queue with its confirmed entries.
"""

import glob
import os
import subprocess

import pytest

from conftest import sluiced_binary
from test_streams import consume, publish_confirmed, s_args

pytestmark = pytest.mark.sluice_only("a private broker's data directory")

SEG = 4096
N = 30


def stream_dir(data):
    dirs = glob.glob(os.path.join(str(data), "streams", "*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


def segments(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".seg"))


@pytest.mark.parametrize("state", ["empty-files-after", "torn-then-empty"])
def test_a_kill_between_segment_files_loses_nothing_confirmed(broker_factory, tmp_path, state):
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("sc", durable=True,
                     arguments=s_args(**{"x-stream-max-segment-size-bytes": SEG}))
    bodies = [b"e%03d|" % i + b"x" * 400 for i in range(N)]
    publish_confirmed(ch, "sc", bodies)
    c.close()
    b.kill9()
    d = stream_dir(data)
    segs = segments(d)
    assert len(segs) >= 3, segs  # the entries span segments
    kept = N
    if state == "torn-then-empty":
        last = os.path.join(d, segs[-1])
        with open(last, "r+b") as f:  # the kill cut the last written piece short
            f.truncate(os.path.getsize(last) - 3)
        kept = N - 1  # the torn entry goes (made by hand here: in a real kill, unconfirmed)
    # the files a spanning batch opened before the kill: empty, past the end
    for first in (N + 3, N + 5):
        open(os.path.join(d, "%020d.seg" % first), "wb").close()
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    got = consume(ch, "sc", kept, "first")
    assert [(o, bb) for o, bb, _ in got] == list(enumerate(bodies[:kept]))
    # offsets go on after what is kept
    publish_confirmed(ch, "sc", [b"after"])
    assert consume(ch, "sc", 1, kept)[0][:2] == (kept, b"after")
    c.close()


def test_damage_before_the_newest_segment_stops_recovery(broker_factory, tmp_path):
    """An entry cut short in a segment that has a successor with entries is no crash's torn
    tail (a batch syncs a segment before writing the next): the node refuses to start, naming
    the stream's file and offset, and keeps every file as it was for the operator."""
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    c = b.pika()
    ch = c.channel()
    ch.queue_declare("sc", durable=True,
                     arguments=s_args(**{"x-stream-max-segment-size-bytes": SEG}))
    publish_confirmed(ch, "sc", [b"e%03d|" % i + b"x" * 400 for i in range(N)])
    c.close()
    assert b.terminate() == 0
    d = stream_dir(data)
    segs = segments(d)
    assert len(segs) >= 3, segs
    first = os.path.join(d, segs[0])
    with open(first, "r+b") as f:
        f.truncate(os.path.getsize(first) - 3)
    size = os.path.getsize(first)
    p = subprocess.run([str(sluiced_binary()), "--port", "0", "--mgmt-port", "off",
                        "--data-dir", str(data)], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert "queue 'sc'" in p.stderr and segs[0] in p.stderr and "offset" in p.stderr, p.stderr
    assert os.path.getsize(first) == size and segments(d) == segs
