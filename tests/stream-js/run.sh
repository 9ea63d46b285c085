#!/bin/sh
# run.sh - RabbitMQ's Node.js stream client suite (vendored here, README.md) against a private
# sluiced: free ports on 127.0.0.1, a data directory of its own, stopped by its pid at the end.
#
#   tests/stream-js/run.sh                      the whole suite (test/unit and test/e2e)
#   tests/stream-js/run.sh test/e2e/connect.test.ts ...   some files
#
# Needs `make all` (or SLUICED=path) and the suite's npm packages (make deps-test). Prints
# mocha's summary (N passing, N failing, N pending); exits with mocha's status.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
sluiced=${SLUICED:-$repo/build/sluiced}
case $sluiced in /*) ;; *) sluiced=$repo/$sluiced ;; esac
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-stream-js.XXXXXX")
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [ -n "${KEEP_LOG:-}" ]; then echo "sluiced's log: $work/sluiced.log"; else rm -rf "$work"; fi
}
trap cleanup EXIT INT TERM
mkdir "$work/data"
printf 'listeners.stream = 0\n' >"$work/sluice.conf"
"$sluiced" --bind 127.0.0.1 --port 0 --mgmt-port 0 --data-dir "$work/data" \
    --config "$work/sluice.conf" >"$work/sluiced.log" 2>&1 &
pid=$!
port_of() { sed -n "s/.*listening $1=[0-9.]*:\([0-9]*\).*/\1/p" "$work/sluiced.log" | head -n1; }
i=0
while [ -z "$(port_of stream)" ] || [ -z "$(port_of http)" ]; do
    i=$((i + 1))
    if [ $i -gt 200 ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "sluiced did not start:" >&2
        cat "$work/sluiced.log" >&2
        exit 1
    fi
    sleep 0.05
done
export RABBIT_MQ_TEST_NODES="127.0.0.1:$(port_of stream)"
export RABBIT_MQ_MANAGEMENT_PORT="$(port_of http)"
export RABBIT_MQ_AMQP_PORT="$(port_of amqp)"
export RABBITMQ_USER=guest RABBITMQ_PASSWORD=guest
cd "$here"
[ $# -gt 0 ] || set -- test
status=0
./node_modules/.bin/mocha --exit "$@" || status=$?
exit $status
