#!/usr/bin/env bash
# cluster-local.sh - try a Sluice cluster on one machine: an etcd on 127.0.0.1 and three
# sluiced nodes on 127.0.0.2, 127.0.0.3 and 127.0.0.4 (AMQP 5672, HTTP 15672, replication
# 5679 on each address), data under var/cluster/. Runs in the foreground; Ctrl-C (or SIGTERM)
# stops everything it started. Usage: scripts/cluster-local.sh [--fresh]
#   --fresh   remove var/cluster first (a new cluster: new etcd data, empty nodes)
# Environment: BUILD (default build), ETCD_PORT (default 2379), LEASE_TTL (default 2).
# See README, "Cluster", for what a client sees and what is not built yet.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ETCD_PORT=${ETCD_PORT:-2379}
LEASE_TTL=${LEASE_TTL:-2}
base=var/cluster
if [ "${1:-}" = --fresh ]; then rm -rf "$base"; fi
command -v etcd >/dev/null || { echo "cluster-local: etcd is not installed (apt-get install etcd-server)" >&2; exit 1; }
[ -x "$BUILD/sluiced" ] || make --no-print-directory all
mkdir -p "$base"
pids=()
stop() {
    trap - INT TERM EXIT
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop INT TERM EXIT

etcd --name local --data-dir "$base/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "local=http://127.0.0.1:$((ETCD_PORT + 1))" >"$base/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    curl -sf -m 1 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -sf -m 1 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null || { echo "cluster-local: etcd did not start (see $base/etcd.log)" >&2; exit 1; }

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
cluster.replication_port = 5679
cluster.lease_ttl = $LEASE_TTL
CONF
    "$BUILD/sluiced" --config "$base/n$i.conf" --port 5672 --mgmt-port 15672 >"$base/n$i.log" 2>&1 &
    pids+=($!)
done
echo "cluster-local: etcd 127.0.0.1:$ETCD_PORT; nodes sluice@n1..n3 on 127.0.0.2-4 (AMQP 5672, HTTP 15672)"
echo "cluster-local: logs in $base/*.log; status: curl -u guest:guest http://127.0.0.2:15672/api/cluster"
echo "cluster-local: guest may log in from loopback only, which 127.0.0.2-4 are. Ctrl-C stops all."
wait -n "${pids[@]}" || true
echo "cluster-local: a process exited; stopping the rest" >&2
