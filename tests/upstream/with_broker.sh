#!/bin/bash
# with_broker.sh - run a command against a private sluiced listening on 127.0.0.1:5672 (AMQP)
# and 127.0.0.1:15672 (HTTP), inside a network namespace of its own, so that a client test
# suite that assumes "localhost:5672" (pika's, amqplib's, kombu's, Bunny's...) can run
# unchanged while other brokers use those ports outside. Needs root (ip netns).
#
#   tests/upstream/with_broker.sh [--sluiced PATH] [--config FILE] -- COMMAND [ARGS...]
#   (BIND=:: listens on IPv6 and IPv4 loopback both, for suites that also try ::1)
#
# The command runs inside the namespace, in the current directory; the broker's log and data
# directory are in a temporary directory printed at the end (kept with KEEP=1). Exit status:
# the command's. The namespace and the broker (stopped by its pid) are removed in every case.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
sluiced="$here/build/sluiced"
config=""
while [ $# -gt 0 ]; do
    case "$1" in
    --sluiced) sluiced=$(readlink -f "$2"); shift 2 ;;
    --config) config=$(readlink -f "$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--sluiced PATH] [--config FILE] -- COMMAND..." >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "$0: no command" >&2; exit 2; }
[ -x "$sluiced" ] || { echo "$0: $sluiced is not built (make all)" >&2; exit 2; }

ns="sluice-up-$$"
work=$(mktemp -d /tmp/sluice-upstream-XXXXXX)
pid=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ]; then echo "broker log and data: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

ip netns add "$ns"
ip netns exec "$ns" ip link set lo up
args=(--bind "${BIND:-127.0.0.1}" --port 5672 --mgmt-port 15672 --data-dir "$work/data")
[ -n "$config" ] && args+=(--config "$config")
ip netns exec "$ns" "$sluiced" "${args[@]}" >"$work/sluiced.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    grep -q "listening http=" "$work/sluiced.log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/sluiced.log" >&2; exit 1; }
    sleep 0.05
done
set +e
ip netns exec "$ns" "$@"
rc=$?
set -e
if ! kill -0 "$pid" 2>/dev/null; then
    echo "$0: sluiced died during the run:" >&2
    tail -30 "$work/sluiced.log" >&2
    rc=1
fi
exit $rc
