#!/bin/sh
# run.sh - RabbitMQ's Node.js stream client suite (vendored here, README.md) against a private
# sluiced with a data directory of its own, stopped by its pid at the end.
#
#   tests/stream-js/run.sh                      the whole suite (test/unit and test/e2e)
#   tests/stream-js/run.sh test/e2e/connect.test.ts ...   some files
#
# The suite is run unpatched, as its upstream CI runs it against a RabbitMQ node: parts of it
# take RabbitMQ's default ports and host name as given (amqplib to localhost:5672, the address
# resolver to localhost:5552, the leader's host from the queue's node name "rabbit@HOST").
# So, as root, sluiced and mocha share a network namespace of their own (only its loopback up),
# where sluiced listens on 5672 (AMQP), 5552 (stream) and 15672 (HTTP) of 127.0.0.1 and ::1,
# names itself sluice@localhost and advertises "localhost"; nothing else on the machine sees
# or takes those ports. The namespace is deleted at the end. Not root, or STREAM_JS_NETNS=0:
# sluiced takes free ports of 127.0.0.1 instead, handed to the suite through its variables
# (RABBIT_MQ_TEST_NODES, RABBIT_MQ_MANAGEMENT_PORT, RABBIT_MQ_AMQP_PORT); the tests that take
# the default ports as given then fail.
#
# Needs `make all` (or SLUICED=path) and the suite's npm packages (make stream-client-deps).
# Prints mocha's summary (N passing, N failing, N pending); exits with mocha's status.
# STREAM_JS_JSON=FILE: mocha's JSON report goes to FILE instead (check.py reads it).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
sluiced=${SLUICED:-$repo/build/sluiced}
case $sluiced in /*) ;; *) sluiced=$repo/$sluiced ;; esac
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-stream-js.XXXXXX")
pid=
ns=
cleanup() {
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [ -n "$ns" ]; then ip netns delete "$ns" 2>/dev/null || true; fi
    if [ -n "${KEEP_LOG:-}" ]; then echo "sluiced's log: $work/sluiced.log"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir "$work/data"
in_ns=
if [ "${STREAM_JS_NETNS:-1}" != 0 ] && [ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1; then
    ns="sluice-sjs-$$"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    in_ns="ip netns exec $ns"
    # "::" with IPV6_V6ONLY off takes 127.0.0.1 and ::1 alike: Node resolves localhost to
    # either, and the namespace has no other address
    bind="::" amqp_port=5672 mgmt_port=15672 stream_port=5552
    printf 'listeners.stream = %s\nstream.advertised_host = localhost\n' \
        "$stream_port" >"$work/sluice.conf"
else
    bind=127.0.0.1 amqp_port=0 mgmt_port=0 stream_port=0
    printf 'listeners.stream = 0\n' >"$work/sluice.conf"
fi
# exec: the pid is sluiced's own (ip netns exec execs it in turn)
$in_ns "$sluiced" --bind "$bind" --port $amqp_port --mgmt-port $mgmt_port --data-dir "$work/data" \
    --node-name sluice@localhost --config "$work/sluice.conf" >"$work/sluiced.log" 2>&1 &
pid=$!
port_of() { sed -n "s/.*listening $1=.*:\([0-9]*\)\$/\1/p" "$work/sluiced.log" | head -n1; }
i=0
while [ -z "$(port_of stream)" ] || [ -z "$(port_of http)" ] || [ -z "$(port_of amqp)" ]; do
    i=$((i + 1))
    if [ $i -gt 200 ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "sluiced did not start:" >&2
        cat "$work/sluiced.log" >&2
        exit 1
    fi
    sleep 0.05
done
if [ -z "$ns" ]; then
    export RABBIT_MQ_TEST_NODES="127.0.0.1:$(port_of stream)"
    export RABBIT_MQ_MANAGEMENT_PORT="$(port_of http)"
    export RABBIT_MQ_AMQP_PORT="$(port_of amqp)"
fi
export RABBITMQ_USER=guest RABBITMQ_PASSWORD=guest
cd "$here"
[ $# -gt 0 ] || set -- test
status=0
if [ -n "${STREAM_JS_JSON:-}" ]; then
    set -- --reporter json --reporter-option "output=$STREAM_JS_JSON" "$@"
fi
$in_ns ./node_modules/.bin/mocha --exit "$@" || status=$?
exit $status
