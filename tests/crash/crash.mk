# tests/crash/crash.mk - the kill -9 crash test of the durable store, included by the top-level
# Makefile.
#   make crash-test       short run for CI (6 rounds of up to 2 s of traffic, then 4 with a 256 KiB
#                         memory_budget so that the queues page out and recovery hands them back
#                         as paged tails; well under a minute). Both runs write 8% of the
#                         messages to three stream queues too (small segments, retention), and
#                         a stream-protocol publisher writes into them.
#   make crash-test-long  the long run whose numbers go in the release note (60 rounds of up to 4 s;
#                         15% of the messages to the streams, two live stream readers, two
#                         stream-protocol publishers)
# Extra flags go in CRASH_ARGS, e.g. CRASH_ARGS="--seed 42 --keep", or CRASH_ARGS="--streams 0"
# for no streams. See tests/crash/crash_test.py.

CRASH_ARGS ?=

.PHONY: crash-test crash-test-long

crash-test: all
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/crash/crash_test.py --rounds 6 --seconds 2 \
	  $(CRASH_ARGS)
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/crash/crash_test.py --rounds 4 --seconds 2 \
	  --memory-budget 256k $(CRASH_ARGS)

crash-test-long: all
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/crash/crash_test.py --rounds 60 --seconds 4 \
	  --stream-share 0.15 --stream-readers 2 --stream-publishers 2 $(CRASH_ARGS)
