# bench/bench.mk - the benchmark of issue 5, included by the top-level Makefile.
#   make bench          Sluice vs a private RabbitMQ, every scenario, 3 rounds A B A B; prints the
#                       table of medians and ratios and writes bench/results/<time>.md + latest.md
#   make bench-smoke    small N, one round, correctness only (RabbitMQ used when installed)
#   make bench-profile  perf profile of sluiced in the 16 B publish-then-consume scenario
#   make bench-route    routing cost as bindings grow (the queue model alone: bench/routebench.c)
#   make bench-forward  store and forward only: Sluice node to node vs RabbitMQ's shovel, and vs
#                       a local publish with confirms of the same messages
#   make bench-drain    the link itself: a backlog preloaded offline, then released; time to drain
#                       it to the destination, vs RabbitMQ's shovel on a preloaded queue
#                       (bench/drain.py; DRAIN_ARGS="--rounds 5", "--perf DIR" to profile)
#   make bench-mqqb     MS-MQQB: msg/s received from the Python peer and sent to it, recoverable
#                       and transactional (bench/mqqb.py; Sluice alone; also run by make bench)
#   make bench-cluster  a 3-node Sluice cluster vs a 3-node RabbitMQ cluster with quorum queues,
#                       and one Sluice node: confirms, consume+ack, confirm latency, failover
#                       after kill -9 of the leader (bench/cluster.py; CLUSTER_ARGS="--rounds 5")
#   make failover-bench kill -9 of a 3-node cluster's leader KILLS times (default 100): median,
#                       p95, p99, max of kill -> first confirm by the new leader, nothing lost
#                       (bench/failover.py; issue 46; not run by CI: `KILLS=3` is a smoke)
#   make bench-streams  streams: Sluice vs RabbitMQ's rabbitmq_stream plugin, 3 rounds: stream
#                       protocol publish with confirms (16 B, 1 KiB), replay of 10M messages from
#                       first, AMQP 0-9-1 publish/consume of a stream, confirm latency at 10k
#                       msg/s (bench/streams.py, client bench/streambench.c; issue 47;
#                       STREAMS_ARGS="--replay-n 2000000 --rounds 5"); bench/results/streams/
#   make bench-manyq    10,000 queues with a consumer each + 10,000 idle connections (issue 14)
#   make soak           1 hour at 20,000 persistent msg/s with confirms and consumers: RSS flat,
#                       nothing lost (bench/soak.py; SOAK_ARGS="--seconds 600" for less)
#   make soak-smoke     the same for 20 s (CI)
# Extra driver flags go in BENCH_ARGS, e.g. BENCH_ARGS="--rounds 5 --only ptc16,conns".
# Binaries go to $(BUILD)/bench/. See bench/README.md.

BENCH_DIR    := $(BUILD)/bench
BENCH_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O2 -pthread $(WARN)
BENCH_LIBS   := $(shell pkg-config --libs librabbitmq 2>/dev/null || echo -lrabbitmq) -pthread
BENCH_BINS   := $(BENCH_DIR)/amqpbench $(BENCH_DIR)/tcpceil $(BENCH_DIR)/routebench \
		$(BENCH_DIR)/streambench
BENCH_ARGS   ?=

.PHONY: bench bench-smoke bench-profile bench-tools bench-route bench-forward bench-manyq \
	soak soak-smoke bench-drain bench-mqqb bench-cluster failover-bench bench-streams
KILLS        ?= 100
MQQB_ARGS    ?=
CLUSTER_ARGS ?=
DRAIN_ARGS   ?=
SOAK_ARGS    ?=
STREAMS_ARGS ?=

$(BENCH_DIR)/amqpbench: bench/amqpbench.c bench/bench.mk
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_CFLAGS) -o $@ $< $(BENCH_LIBS)

$(BENCH_DIR)/tcpceil: bench/tcpceil.c bench/bench.mk
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_CFLAGS) -o $@ $< -pthread

# The stream protocol client: libc only (it does not link src/streamproto/ on purpose, see its
# top comment).
$(BENCH_DIR)/streambench: bench/streambench.c bench/bench.mk
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_CFLAGS) -o $@ $< -pthread

$(BENCH_DIR)/routebench: bench/routebench.c $(BUILD)/libsluice.a bench/bench.mk
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O2 -o $@ $< $(BUILD)/libsluice.a $(LDLIBS)

bench-tools: $(BENCH_BINS)

bench-route: $(BENCH_DIR)/routebench
	$(BENCH_DIR)/routebench

bench:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(BUILD)/sluiced $(BENCH_BINS)
	/usr/bin/python3 bench/run.py --build $(BUILD) $(BENCH_ARGS)
	/usr/bin/python3 bench/mqqb.py --sluiced $(BUILD)/sluiced --rounds 3 $(MQQB_ARGS)

bench-mqqb:
	@$(MAKE) --no-print-directory $(BUILD)/sluiced
	/usr/bin/python3 bench/mqqb.py --sluiced $(BUILD)/sluiced $(MQQB_ARGS)

bench-forward:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(BUILD)/sluiced $(BENCH_BINS)
	/usr/bin/python3 bench/run.py --build $(BUILD) --out bench/results/forward \
	  --only fwd16,fwd1k,fwdtx16,fwd16raw,fwd1kraw \
	  $(BENCH_ARGS)

bench-drain:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(BUILD)/sluiced
	/usr/bin/python3 bench/drain.py --sluiced $(BUILD)/sluiced $(DRAIN_ARGS)

bench-cluster:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(BUILD)/sluiced $(BENCH_BINS)
	/usr/bin/python3 bench/cluster.py --build $(BUILD) $(CLUSTER_ARGS)

failover-bench:
	@$(MAKE) --no-print-directory $(BUILD)/sluiced
	/usr/bin/python3 bench/failover.py --build $(BUILD) --kills $(KILLS)

bench-streams:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(BUILD)/sluiced $(BENCH_BINS)
	/usr/bin/python3 bench/streams.py --build $(BUILD) $(STREAMS_ARGS)

bench-manyq:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(BUILD)/sluiced $(BENCH_BINS)
	/usr/bin/python3 bench/run.py --build $(BUILD) --out bench/results/manyq --only manyq \
	  $(BENCH_ARGS)

soak:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(BUILD)/sluiced $(BENCH_BINS)
	/usr/bin/python3 bench/soak.py --build $(BUILD) --out bench/results/soak $(SOAK_ARGS)

soak-smoke:
	@scripts/deps.sh bench || echo "soak-smoke: continuing with what is installed" >&2
	@$(MAKE) --no-print-directory $(BUILD)/sluiced $(BENCH_BINS)
	/usr/bin/python3 bench/soak.py --build $(BUILD) --seconds 20 --warmup 5 --sample 1 \
	  $(SOAK_ARGS)

# CI: a missing rabbitmq-server only drops the RabbitMQ column; a missing librabbitmq-dev fails
# the build below with the compiler's message after deps.sh has printed the apt-get line.
bench-smoke:
	@scripts/deps.sh bench || echo "bench-smoke: continuing with what is installed" >&2
	@$(MAKE) --no-print-directory $(BUILD)/sluiced $(BENCH_BINS)
	/usr/bin/python3 bench/run.py --smoke --build $(BUILD) $(BENCH_ARGS)
	$(BENCH_DIR)/routebench 2000
	/usr/bin/python3 bench/drain.py --smoke --sluiced $(BUILD)/sluiced
	/usr/bin/python3 bench/mqqb.py --smoke --sluiced $(BUILD)/sluiced
	/usr/bin/python3 bench/cluster.py --smoke --build $(BUILD)
	/usr/bin/python3 bench/streams.py --smoke --build $(BUILD)

bench-profile:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(BUILD)/sluiced $(BENCH_BINS)
	/usr/bin/python3 bench/run.py --profile --build $(BUILD) $(BENCH_ARGS)
