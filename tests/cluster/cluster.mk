# tests/cluster/cluster.mk - the cluster's Jepsen-style fault test (issue 31), included by the
# top-level Makefile.
#   make cluster-smoke   CI: the checker's tests on synthetic histories, the harness's
#                        self-check (start, leader, clean teardown) and 3 rounds of kill -9 of
#                        the leader under load, each drained and checked (under 3 minutes)
#   make cluster-soak    ROUNDS=N rounds (default 300) rotating every fault, drained and
#                        checked after every round; long. Logs and histories under
#                        CLUSTER_OUT (default /tmp/cluster-soak-<date>)
# Extra flags in CLUSTER_ARGS, e.g. CLUSTER_ARGS="--seed 42 --keep-going". Needs root (network
# namespaces, tmpfs mounts, iptables) and etcd. See tests/cluster/cluster_soak.py and
# docs/cluster-testing.md.

ROUNDS ?= 300
CLUSTER_ARGS ?=
CLUSTER_OUT ?= /tmp/cluster-soak-$(shell date +%Y%m%d-%H%M%S)

.PHONY: cluster-smoke cluster-soak

cluster-smoke: all
	@scripts/deps.sh test
	/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/cluster/test_checker.py
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/cluster/cluster_soak.py --self-check \
	  --rounds 3 --faults kill9-leader --etcd-members 1 --max-seconds 120 \
	  --out $(CLUSTER_OUT)-smoke $(CLUSTER_ARGS)

cluster-soak: all
	@scripts/deps.sh test
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/cluster/cluster_soak.py --rounds $(ROUNDS) \
	  --out $(CLUSTER_OUT) $(CLUSTER_ARGS)
