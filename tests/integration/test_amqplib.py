"""The npm amqplib client (Node.js) against the broker: confirms, prefetch and acks, nack with
requeue and the redelivered flag, topic routing, purge and delete counts, consumer cancel
notification, channel errors. The scenarios are in node/amqplib_scenarios.js; `make test`
installs the client with `npm ci` (tests/integration/node/package-lock.json)."""

import shutil
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parent / "node"


def test_amqplib_scenarios(broker):
    node = shutil.which("node")
    if not node or not (NODE_DIR / "node_modules" / "amqplib").is_dir():
        pytest.fail("node or amqplib missing: run `make deps-test` (npm ci in %s)" % NODE_DIR)
    r = subprocess.run([node, str(NODE_DIR / "amqplib_scenarios.js"), str(broker.port)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all amqplib scenarios passed" in r.stdout
