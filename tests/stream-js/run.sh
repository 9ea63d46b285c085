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
    if [ -n "$tls_made" ]; then rm -rf "$here/tls-gen"; fi
    if [ -n "${KEEP_LOG:-}" ]; then echo "sluiced's log: $work/sluiced.log"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir "$work/data"

# The EXTERNAL test reads what RabbitMQ's tls-gen (basic profile) makes in the suite's CI:
# ./tls-gen/basic/result/{ca_certificate,client_localhost_certificate,client_localhost_key}.pem,
# and connects to localhost:5551 over TLS. Made here with openssl (a CA, a server certificate
# for localhost, a client one with CN=localhost, O=client as tls-gen names it) into the
# suite's directory, removed at the end; sluiced's TLS stream listener verifies the client
# and takes EXTERNAL, logging the certificate's common name in: the user "localhost", made
# with a permission on / once the node is up.
tls_made=
make_tls_gen() {
    command -v openssl >/dev/null 2>&1 || return 0
    t="$work/tls" r="$here/tls-gen/basic/result"
    [ -e "$here/tls-gen" ] && return 0 # the suite's own, made by tls-gen: left as it is
    mkdir -p "$t" "$r"
    tls_made=1
    (
        cd "$t"
        ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
        openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2 -subj "/CN=Sluice stream-js CA"
        openssl req $ec -keyout server.key -out server.csr -subj "/CN=localhost"
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n' >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
            -out server.pem -days 2 -extfile server.ext
        openssl req $ec -keyout client.key -out client.csr -subj "/CN=localhost/O=client"
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
            -out client.pem -days 2
    ) >"$work/tls.log" 2>&1 || { cat "$work/tls.log" >&2; exit 1; }
    cp "$t/ca.pem" "$r/ca_certificate.pem"
    cp "$t/client.pem" "$r/client_localhost_certificate.pem"
    cp "$t/client.key" "$r/client_localhost_key.pem"
    printf '%s\n' "listeners.stream.ssl = 5551" "ssl_options.cacertfile = $t/ca.pem" \
        "ssl_options.certfile = $t/server.pem" "ssl_options.keyfile = $t/server.key" \
        "ssl_options.verify = verify_peer" "ssl_options.fail_if_no_peer_cert = false" \
        "auth_mechanisms.1 = PLAIN" "auth_mechanisms.2 = EXTERNAL" \
        "ssl_cert_login_from = common_name" >>"$work/sluice.conf"
}

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
    make_tls_gen
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
if [ -n "$tls_made" ]; then
    # the certificate's user (EXTERNAL: no password), with a permission on /
    $in_ns /usr/bin/python3 - "$mgmt_port" <<'PY' || exit 1
import base64, json, sys, urllib.request
port = sys.argv[1]
auth = "Basic " + base64.b64encode(b"guest:guest").decode()
for path, body in (("/api/users/localhost", {"tags": ""}),
                   ("/api/permissions/%2F/localhost",
                    {"configure": ".*", "write": ".*", "read": ".*"})):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), method="PUT",
                                 data=json.dumps(body).encode(),
                                 headers={"Authorization": auth,
                                          "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()
PY
fi
cd "$here"
[ $# -gt 0 ] || set -- test
status=0
if [ -n "${STREAM_JS_JSON:-}" ]; then
    set -- --reporter json --reporter-option "output=$STREAM_JS_JSON" "$@"
fi
$in_ns ./node_modules/.bin/mocha --exit "$@" || status=$?
exit $status
