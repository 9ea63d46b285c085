# tests/abuse/abuse.mk - availability under abuse and exhaustion (issue 13), included by the
# top-level Makefile.
#   make abuse-test   every scenario of tests/abuse/abuse_test.py, each a pass/fail check that
#                     prints the node's RSS, CPU and the worst bystander round trip
# Extra flags go in ABUSE_ARGS, e.g. ABUSE_ARGS="--only http-burst --keep".

ABUSE_ARGS ?=

.PHONY: abuse-test

abuse-test: all
	SLUICED=$(BUILD)/sluiced /usr/bin/python3 tests/abuse/abuse_test.py $(ABUSE_ARGS)
