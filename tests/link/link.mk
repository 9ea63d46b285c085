# tests/link/link.mk - the store-and-forward soak (issue 9), included by the top-level Makefile.
#   make link-test       short run for CI: the checker's self-check, then 4 rounds of 8 s of
#                        traffic with kill -9 and link faults among three nodes in namespaces
#   make link-test-long  the long run whose numbers go in the note (40 rounds of 15 s)
# Extra flags go in LINK_ARGS, e.g. LINK_ARGS="--seed 42 --keep". Needs root (network
# namespaces). See tests/link/link_soak.py.

LINK_ARGS ?=

.PHONY: link-test link-test-long

link-test: all
	@scripts/deps.sh link
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/link/link_soak.py --self-check --seconds 2
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/link/link_soak.py --rounds 4 --seconds 8 \
	  $(LINK_ARGS)

link-test-long: all
	@scripts/deps.sh link
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/link/link_soak.py --rounds 40 --seconds 15 \
	  $(LINK_ARGS)
