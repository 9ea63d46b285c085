# Sluice build. `make` builds build/sluiced; `make run` and `make test` also install missing
# Debian packages first (scripts/deps.sh). See README.md for every target.

BUILD    ?= build
CC       ?= gcc
OPT      ?= -O2
SAN      ?=
WARN     := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wno-unused-parameter
CFLAGS   := -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) $(SAN) -Isrc $(EXTRA_CFLAGS)
LDLIBS   := -pthread $(shell pkg-config --libs inih libmicrohttpd jansson libpcre2-8 libssl libcrypto \
              libargon2 gnutls libcurl zlib 2>/dev/null || \
              echo -linih -lmicrohttpd -ljansson -lpcre2-8 -lssl -lcrypto -largon2 -lgnutls -lcurl -lz)
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lm -lrt -lpthread)

LIB_SRC  := $(sort $(filter-out src/main.c,$(wildcard src/*/*.c)))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/console_assets.o
# The web console's files (console/), built into sluiced by scripts/embed-console.sh.
CONSOLE_FILES := $(sort $(shell find console -type f ! -name '*.md' 2>/dev/null))
# The reference in docs/, built in beside them: the console's Help links open /docs/PAGE.md.
DOC_FILES := $(sort $(wildcard docs/*.md))
# The Markdown renderer the console shows those pages with: marked, from Debian's libjs-marked
# (scripts/deps.sh build), built in as /vendor/marked/marked.min.js.
MARKED_JS := /usr/share/javascript/marked/marked.min.js
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
TOOL_SRC := $(sort $(wildcard tools/*.c))
TOOL_BIN := $(TOOL_SRC:tools/%.c=$(BUILD)/%)
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BUILD := $(BUILD)-fuzz
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_BUILD)/%)
# Every fuzz target links one library of the sources built once with the fuzzer's coverage and
# the sanitizers (fuzzer-no-link: libFuzzer's main comes only with the target's own link).
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Isrc -fsanitize=fuzzer-no-link,address,undefined \
               -fno-sanitize-recover=all
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o) $(FUZZ_BUILD)/obj/gen/console_assets.o
FUZZ_RUNS := $(FUZZ_SRC:tests/fuzz/%.c=fuzz-run-%)
# Parallel jobs for builds, unit binaries and pytest-xdist workers: one per core unless told.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_TIME ?= 300
# libFuzzer's -seed: 0 draws a fresh one (campaigns); CI's smoke fixes it so a failure there
# reproduces with the same command. Every log starts with the seed it used.
FUZZ_SEED ?= 0
FUZZ_SMOKE_SEED ?= 1

.PHONY: all deps deps-test stream-client-deps stream-client-test run test unit integration test-asan test-clang-ubsan test-sanitize fuzz \
        fuzz-smoke fuzz-lib format format-check clean

all: $(BUILD)/sluiced $(TOOL_BIN) $(BUILD)/test-proxy-harness

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/gen/console_assets.c: $(CONSOLE_FILES) $(DOC_FILES) $(MARKED_JS) scripts/embed-console.sh
	@mkdir -p $(dir $@)
	scripts/embed-console.sh $@ console $(CONSOLE_FILES) $(DOC_FILES) \
	  /vendor/marked/marked.min.js=$(MARKED_JS)

$(MARKED_JS):
	@echo "$@ is missing: install Debian's libjs-marked (scripts/deps.sh build)" >&2; exit 1

$(BUILD)/gen/console_assets.o: $(BUILD)/gen/console_assets.c src/mgmt/console_assets.h
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libsluice.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/sluiced: $(BUILD)/src/main.o $(BUILD)/libsluice.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The cluster proxy alone, for tests/integration/test_cluster_proxy.py.
$(BUILD)/test-proxy-harness: tests/harness/test_proxy_harness.c $(BUILD)/libsluice.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libsluice.a $(LDLIBS)

$(BUILD)/%: tools/%.c $(BUILD)/libsluice.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libsluice.a $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libsluice.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(BUILD)/libsluice.a $(LDLIBS) $(CHECK_LIBS)

deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test
	@test -d tests/integration/node/node_modules/amqplib || \
	  npm ci --no-audit --no-fund --prefix tests/integration/node

# RabbitMQ's Node.js stream client suite, unpatched, against a private sluiced
# (tests/stream-js/README.md): tests/stream-js/check.py runs it and passes when what fails is
# exactly tests/stream-js/known-failures.txt. STREAM_JS_SPECS= some files of it (default: the
# whole suite). CI runs it as a stage of its own (about 2 minutes); `make test` does not.
# Its npm packages (mocha, tsx, ...) come from tests/stream-js/package-lock.json.
stream-client-deps: deps-test
	@test -d tests/stream-js/node_modules/mocha || \
	  npm ci --no-audit --no-fund --prefix tests/stream-js

stream-client-test: stream-client-deps all
	tests/stream-js/check.py $(STREAM_JS_SPECS)

# Start sluiced in the foreground on 127.0.0.1:5672 with data under ./var.
run: deps
	@$(MAKE) --no-print-directory all
	@mkdir -p var
	exec $(BUILD)/sluiced --bind 127.0.0.1 --port 5672 --data-dir var

# Every unit and integration test; ends with "N passed, N failed". Builds with -j$(JOBS); the
# unit binaries and the integration files run in parallel (tests/run.sh says how).
test: deps-test
	@$(MAKE) --no-print-directory -j$(JOBS) all $(UNIT_BIN)
	@BUILD=$(BUILD) JOBS=$(JOBS) tests/run.sh

unit: $(UNIT_BIN)
	@BUILD=$(BUILD) JOBS=$(JOBS) tests/run.sh unit

# `make integration T=tests/integration/test_basic.py` (or T='FILE::TEST', or T='-k NAME'):
# just those, serially; without T, the whole integration suite as `make test` runs it.
integration: all
	@BUILD=$(BUILD) JOBS=$(JOBS) tests/run.sh integration $(T)

# The same tests built with clang, under AddressSanitizer (with LeakSanitizer) and
# UndefinedBehaviorSanitizer together; any report fails. CI's one sanitizer pass: it covers what
# test-asan (gcc's ASan+UBSan) and test-clang-ubsan did between them, since clang's UBSan checks
# what gcc's does not (pointer arithmetic on NULL, "applying zero offset to null pointer", found
# by fuzz_defs) and its ASan is the same runtime as gcc's (docs/testing.md: what the fold gives
# up). Its alone pass runs one file at a time (JOBS_ALONE=1): under ASan two cluster files side
# by side made test_cluster_members' ban detection miss its 10 s once.
test-sanitize: deps-test
	@$(MAKE) --no-print-directory -j$(JOBS) BUILD=build-san CC=clang OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  all $(UNIT_SRC:tests/unit/%.c=build-san/tests/%)
	@BUILD=build-san JOBS=$(JOBS) JOBS_ALONE=$${JOBS_ALONE:-1} tests/run.sh

# gcc's AddressSanitizer + UndefinedBehaviorSanitizer alone (not in CI: test-sanitize covers it).
test-asan: deps-test
	@$(MAKE) --no-print-directory -j$(JOBS) BUILD=build-asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  all $(UNIT_SRC:tests/unit/%.c=build-asan/tests/%)
	@BUILD=build-asan JOBS=$(JOBS) tests/run.sh

# clang's UndefinedBehaviorSanitizer alone (not in CI: test-sanitize covers it).
test-clang-ubsan: deps-test
	@$(MAKE) --no-print-directory -j$(JOBS) BUILD=build-clang CC=clang OPT=-O1 \
	  SAN="-fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  all $(UNIT_SRC:tests/unit/%.c=build-clang/tests/%)
	@BUILD=build-clang JOBS=$(JOBS) tests/run.sh

# libFuzzer targets for everything that parses bytes from outside. The sources are compiled
# once into $(FUZZ_BUILD)/libsluice-fuzz.a (with dependency files, so an edit rebuilds only what
# it touches); each target is its own file linked against that library.
$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/obj/gen/console_assets.o: $(BUILD)/gen/console_assets.c src/mgmt/console_assets.h
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_BUILD)/libsluice-fuzz.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

fuzz-lib: $(FUZZ_BUILD)/libsluice-fuzz.a

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_BUILD)/libsluice-fuzz.a
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_BUILD)/libsluice-fuzz.a $(LDLIBS)

# One target's run: its log in $(FUZZ_BUILD)/NAME.log, its seed on the log's first lines; a
# crash prints the log's tail and fails. Runs are independent, so `fuzz` runs $(JOBS) at once.
fuzz-run-%: $(FUZZ_BUILD)/%
	@mkdir -p tests/fuzz/corpus-run/$*
	@echo "fuzz: $* for $(FUZZ_TIME)s (log: $(FUZZ_BUILD)/$*.log)"
	@if ! $< -max_total_time=$(FUZZ_TIME) -seed=$(FUZZ_SEED) -print_final_stats=1 \
	    tests/fuzz/corpus-run/$* tests/fuzz/corpus/$(patsubst fuzz_%,%,$*) \
	    > $(FUZZ_BUILD)/$*.log 2>&1; then \
	  grep -m1 'INFO: Seed' $(FUZZ_BUILD)/$*.log; tail -n 60 $(FUZZ_BUILD)/$*.log; exit 1; fi
	@grep -E '^(Done|stat::(number_of_executed_units|new_units_added|peak_rss))' \
	  $(FUZZ_BUILD)/$*.log | sed 's/^/$*: /'

fuzz: deps-test
	@$(MAKE) --no-print-directory -j$(JOBS) $(FUZZ_BIN)
	@$(MAKE) --no-print-directory -j$(JOBS) --output-sync=target $(FUZZ_RUNS)

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZ_TIME=20 FUZZ_SEED=$(FUZZ_SMOKE_SEED)

FORMAT_FILES = $$(git ls-files 'src/*.[ch]' 'tests/*.[ch]' 'tools/*.[ch]' 'bench/*.[ch]')

format:
	clang-format -i $(FORMAT_FILES)

format-check:
	clang-format --dry-run -Werror $(FORMAT_FILES)

clean:
	rm -rf build build-asan build-clang build-san build-fuzz

# Benchmark against RabbitMQ (bench/bench.mk: `make bench`, `make bench-smoke`).
-include bench/bench.mk
# kill -9 crash test of the store (tests/crash/crash.mk: `make crash-test`, `crash-test-long`).
-include tests/crash/crash.mk
# Store-and-forward soak among three nodes in network namespaces (tests/link/link.mk:
# `make link-test`, `link-test-long`).
-include tests/link/link.mk
# availability under abuse and exhaustion (tests/abuse/abuse.mk: `make abuse-test`).
-include tests/abuse/abuse.mk
# the cluster's Jepsen-style fault test (tests/cluster/cluster.mk: `make cluster-smoke`,
# `cluster-soak`).
-include tests/cluster/cluster.mk

# the layering check (tools/layers.mk: `make layers`).
-include tools/layers.mk

-include $(LIB_OBJ:.o=.d) $(BUILD)/src/main.d $(FUZZ_LIB_OBJ:.o=.d)
