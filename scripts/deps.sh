#!/usr/bin/env bash
# deps.sh - make sure the Debian packages Sluice builds and tests with are installed.
# As root: installs what is missing with apt-get. Otherwise: prints the exact apt-get line
# and fails. Usage: scripts/deps.sh [build|test|fuzz|bench|link]
set -euo pipefail

build_pkgs=(gcc make pkg-config libinih-dev libmicrohttpd-dev libjansson-dev libpcre2-dev libssl-dev
            libargon2-dev libgnutls28-dev libcurl4-openssl-dev zlib1g-dev
            libjs-marked) # the console's Markdown renderer, built into sluiced
test_pkgs=(check python3 python3-pytest python3-pika python3-amqp python3-kombu amqp-tools
           iproute2 iptables
           clang-format rabbitmq-server chromium chromium-driver python3-selenium
           python3-impacket etcd-server etcd-client stress-ng
           python3-pytest-xdist) # parallel integration tests (tests/run.sh)
fuzz_pkgs=(clang libclang-rt-14-dev)
bench_pkgs=(librabbitmq-dev rabbitmq-server etcd-server python3-amqp)
link_pkgs=(python3 python3-amqp python3-pytest iproute2 iptables etcd-server)

want=("${build_pkgs[@]}")
case "${1:-build}" in
build) ;;
test) want+=("${test_pkgs[@]}" "${fuzz_pkgs[@]}") ;;
fuzz) want+=("${fuzz_pkgs[@]}") ;;
bench) want+=("${bench_pkgs[@]}") ;;
link) want+=("${link_pkgs[@]}") ;;
*) echo "usage: $0 [build|test|fuzz|bench|link]" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
# Node.js for the amqplib tests: Debian's nodejs and npm, unless a node and npm are there
# already (another packaging of Node.js bundles npm and conflicts with Debian's npm).
if [ "${1:-build}" = test ]; then
    command -v node >/dev/null 2>&1 || missing+=(nodejs)
    command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
    echo "deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    # Debian starts rabbitmq-server's service on install where an init system runs; the
    # benchmark starts its own private instance, so stop the packaged one.
    # The same for etcd-server: the cluster tests start private etcd members on free ports.
    if command -v service >/dev/null; then
        if [[ " ${missing[*]} " == *" rabbitmq-server "* ]]; then service rabbitmq-server stop >/dev/null 2>&1 || true; fi
        if [[ " ${missing[*]} " == *" etcd-server "* ]]; then service etcd stop >/dev/null 2>&1 || true; fi
    fi
else
    echo "deps: missing Debian packages; install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
