#!/usr/bin/env bash
# cluster-local.sh - try a Sluice cluster on one machine: an etcd on 127.0.0.1 and three
# sluiced nodes on 127.0.0.2, 127.0.0.3 and 127.0.0.4 (AMQP 5672, HTTP 15672, replication
# 5679 on each address), data under var/cluster/. Runs in the foreground; Ctrl-C (or SIGTERM)
# stops everything it started. Usage: scripts/cluster-local.sh [--fresh]
#   --fresh   remove var/cluster first (a new cluster: new etcd data, empty nodes)
# Environment: BUILD (default build), ETCD_PORT (default 2379), LEASE_TTL (default 2).
# See README, "Cluster", for what a client sees and what is not built yet.
# Set up as docs/cluster.md "Security" asks of an operator: etcd serves TLS only, requires a
# client certificate and has auth enabled (a user `sluice` that may write /sluice/ only); the
# nodes share a cluster secret (var/cluster/cluster.secret, 0600). Certificates (a CA, etcd's,
# the nodes' client certificate: openssl), the passwords and the secret are made once, under
# var/cluster/, and kept.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ETCD_PORT=${ETCD_PORT:-2379}
LEASE_TTL=${LEASE_TTL:-2}
base=var/cluster
if [ "${1:-}" = --fresh ]; then rm -rf "$base"; fi
command -v etcd >/dev/null || { echo "cluster-local: etcd is not installed (apt-get install etcd-server)" >&2; exit 1; }
command -v etcdctl >/dev/null || { echo "cluster-local: etcdctl is not installed (apt-get install etcd-client)" >&2; exit 1; }
command -v openssl >/dev/null || { echo "cluster-local: openssl is not installed" >&2; exit 1; }
[ -x "$BUILD/sluiced" ] || make --no-print-directory all
mkdir -p "$base"
umask 077
tls=$base/tls
if [ ! -f "$tls/client.pem" ]; then
    mkdir -p "$tls"
    ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout "$tls/ca.key" -out "$tls/ca.pem" -days 365 \
        -subj /CN=sluice-cluster-local-ca 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >"$tls/etcd.ext"
    # the nodes' certificate has no CN: etcd's gateway refuses one with a CN once auth is on
    printf 'extendedKeyUsage=clientAuth\n' >"$tls/client.ext"
    for n in etcd client; do
        subj=/O=sluice-nodes; [ "$n" = etcd ] && subj=/CN=127.0.0.1
        openssl req "${ec[@]}" -keyout "$tls/$n.key" -out "$tls/$n.csr" -subj "$subj" 2>/dev/null
        openssl x509 -req -in "$tls/$n.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
            -CAcreateserial -out "$tls/$n.pem" -days 365 -extfile "$tls/$n.ext" 2>/dev/null
    done
fi
[ -f "$base/etcd.password" ] || openssl rand -hex 16 >"$base/etcd.password"
[ -f "$base/etcd.root-password" ] || openssl rand -hex 16 >"$base/etcd.root-password"
[ -f "$base/cluster.secret" ] || openssl rand -base64 32 >"$base/cluster.secret"
chmod 600 "$base/cluster.secret" "$base/etcd.password" "$base/etcd.root-password"
etcd_pw=$(cat "$base/etcd.password")
ctl() {
    ETCDCTL_API=3 etcdctl --endpoints "https://127.0.0.1:$ETCD_PORT" --cacert "$tls/ca.pem" \
        --cert "$tls/client.pem" --key "$tls/client.key" "$@"
}
pids=()
stop() {
    trap - INT TERM EXIT
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop INT TERM EXIT

etcd --name local --data-dir "$base/etcd" \
    --listen-client-urls "https://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "https://127.0.0.1:$ETCD_PORT" \
    --cert-file "$tls/etcd.pem" --key-file "$tls/etcd.key" \
    --client-cert-auth --trusted-ca-file "$tls/ca.pem" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "local=http://127.0.0.1:$((ETCD_PORT + 1))" >"$base/etcd.log" 2>&1 &
pids+=($!)
health() {
    curl -sf -m 1 --cacert "$tls/ca.pem" --cert "$tls/client.pem" --key "$tls/client.key" \
        "https://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1
}
for _ in $(seq 100); do
    health && break
    sleep 0.1
done
health || { echo "cluster-local: etcd did not start (see $base/etcd.log)" >&2; exit 1; }
if [ ! -f "$base/etcd.auth-enabled" ]; then
    # root (etcd's rule for enabling auth) and sluice, which may read and write /sluice/ only
    ctl user add "root:$(cat "$base/etcd.root-password")" >/dev/null
    ctl user grant-role root root >/dev/null
    ctl role add sluice >/dev/null
    ctl role grant-permission sluice --prefix=true readwrite /sluice/ >/dev/null
    ctl user add "sluice:$etcd_pw" >/dev/null
    ctl user grant-role sluice sluice >/dev/null
    ctl auth enable >/dev/null
    touch "$base/etcd.auth-enabled"
fi

for i in 1 2 3; do
    addr=127.0.0.$((i + 1))
    mkdir -p "$base/n$i"
    cat >"$base/n$i.conf" <<CONF
node_name = sluice@n$i
bind = $addr
data_dir = $base/n$i/data
cluster_formation.peer_discovery_backend = etcd
cluster_formation.etcd.endpoints.1 = 127.0.0.1:$ETCD_PORT
cluster_formation.etcd.cluster_name = local
cluster_formation.etcd.username = sluice
cluster_formation.etcd.password = $etcd_pw
cluster_formation.etcd.ssl_options.cacertfile = $tls/ca.pem
cluster_formation.etcd.ssl_options.certfile = $tls/client.pem
cluster_formation.etcd.ssl_options.keyfile = $tls/client.key
cluster_formation.etcd.ssl_options.verify = verify_peer
cluster.secret_file = $base/cluster.secret
cluster.replication_port = 5679
cluster.lease_ttl = $LEASE_TTL
CONF
    "$BUILD/sluiced" --config "$base/n$i.conf" --port 5672 --mgmt-port 15672 >"$base/n$i.log" 2>&1 &
    pids+=($!)
done
echo "cluster-local: etcd https://127.0.0.1:$ETCD_PORT (TLS, client certificates, user sluice); nodes sluice@n1..n3 on 127.0.0.2-4 (AMQP 5672, HTTP 15672)"
echo "cluster-local: logs in $base/*.log; status: curl -u guest:guest http://127.0.0.2:15672/api/cluster"
echo "cluster-local: guest may log in from loopback only, which 127.0.0.2-4 are. Ctrl-C stops all."
wait -n "${pids[@]}" || true
echo "cluster-local: a process exited; stopping the rest" >&2
