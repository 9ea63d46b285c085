# tests/crash/crash.mk - the kill -9 crash test of the durable store, included by the top-level
# Makefile.
#   make crash-test       short run for CI (6 rounds of up to 2 s of traffic, then 4 with a 256 KiB
#                         memory_budget so that the queues page out and recovery hands them back
#                         as paged tails; well under a minute)
#   make crash-test-long  the long run whose numbers go in the release note (60 rounds of up to 4 s)
# Extra flags go in CRASH_ARGS, e.g. CRASH_ARGS="--seed 42 --keep". See tests/crash/crash_test.py.

CRASH_ARGS ?=

.PHONY: crash-test crash-test-long

crash-test: all
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/crash/crash_test.py --rounds 6 --seconds 2 \
	  $(CRASH_ARGS)
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/crash/crash_test.py --rounds 4 --seconds 2 \
	  --memory-budget 256k $(CRASH_ARGS)

crash-test-long: all
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/crash/crash_test.py --rounds 60 --seconds 4 \
	  $(CRASH_ARGS)
