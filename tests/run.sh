#!/usr/bin/env bash
# run.sh - run the unit tests (Check) and the integration tests (pytest against the real
# sluiced) and end with one summary line "N passed, N failed".
# Usage: BUILD=build [JOBS=N] tests/run.sh [unit|integration|all] [PYTEST_ARGS...]
#
# Parallel, since nearly every test waits on a daemon rather than a core:
# - the unit binaries run JOBS at a time, slowest first (each is its own process; Check forks
#   per test), beside the parallel integration pass below (they use the cores, it mostly waits);
# - the integration files run on JOBS_PYTEST pytest-xdist workers (default 2 x JOBS), a file to
#   a worker (`--dist loadfile`: a file's tests share module fixtures and run in order), except
#   the tests marked `alone` (network namespaces, etcd, wall-clock bounds: conftest.py), which
#   run once the parallel pass and the unit binaries are done, JOBS_ALONE files at a time
#   (default 2; 1 = strictly one after another).
# Each stage prints its elapsed time. PYTEST_ARGS (e.g. a file, -k NAME) run just those, serially.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
JOBS_PYTEST=${JOBS_PYTEST:-$((JOBS * 2))}
# The alone pass: two files at a time by default (each mostly waits on leases and timers; two
# of them load the machine far less than the parallel pass did); JOBS_ALONE=1 runs them one
# after another.
JOBS_ALONE=${JOBS_ALONE:-2}
what=${1:-all}
[ $# -gt 0 ] && shift
passed=0
failed=0
status=0
# Sanitizer builds: any report fails the run (and leaks count, at exit of each process).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# stage NAME START: print NAME's elapsed seconds since START (a `date +%s` reading).
stage() { echo "== $1: $(($(date +%s) - $2)) s"; }

# One unit binary: its output to $tmp/unit.NAME.out, its exit code to $tmp/unit.NAME.rc and its
# seconds to $tmp/unit.NAME.secs.
run_unit() {
    local t=$1 n t0
    n=$(basename "$t")
    t0=$(date +%s)
    CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120} "$t" >"$tmp/unit.$n.out" 2>&1
    echo $? >"$tmp/unit.$n.rc"
    echo $(($(date +%s) - t0)) >"$tmp/unit.$n.secs"
    date +%s >"$tmp/unit.$n.end"
}
export -f run_unit
export tmp

# The unit binaries, slowest first by their last run's seconds ($BUILD/tests/.durations), so the
# longest one (test_eod's link simulation) starts at once and the rest fill the other job.
unit_list() {
    local t n d
    for t in "$BUILD"/tests/test_*; do
        [ -x "$t" ] || continue
        n=$(basename "$t")
        d=$(awk -v n="$n" '$2 == n { print $1 }' "$BUILD/tests/.durations" 2>/dev/null)
        echo "${d:-0} $t"
    done | sort -rn | cut -d' ' -f2-
}

unit_start() { # runs every unit binary, JOBS at a time, in the background; unit_wait collects
    unit_t0=$(date +%s)
    mapfile -t units < <(unit_list)
    if [ ${#units[@]} -gt 0 ]; then
        printf '%s\n' "${units[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_unit "$1"' _ {} &
        unit_pid=$!
    else
        unit_pid=
    fi
}

unit_wait() {
    [ -n "$unit_pid" ] && wait "$unit_pid"
    : >"$tmp/durations"
    for t in "${units[@]}"; do
        n=$(basename "$t")
        out=$(cat "$tmp/unit.$n.out")
        rc=$(cat "$tmp/unit.$n.rc")
        echo "$(cat "$tmp/unit.$n.secs") $n" >>"$tmp/durations"
        echo "== unit: $n ($(cat "$tmp/unit.$n.secs") s)"
        echo "$out" | grep -v '^Running suite' | tail -n 20
        # Check prints "NN%: Checks: C, Failures: F, Errors: E" per suite runner.
        line=$(echo "$out" | grep -E '^[0-9]+%: Checks: ' | tail -n 1)
        if [ -n "$line" ]; then
            c=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
            f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
            e=$(echo "$line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
            passed=$((passed + c - f - e))
            failed=$((failed + f + e))
        fi
        if [ "$rc" -ne 0 ]; then
            status=1
            [ -z "$line" ] && failed=$((failed + 1))
        fi
    done
    cp "$tmp/durations" "$BUILD/tests/.durations" 2>/dev/null
    # the stage's own time: until its last binary ended (not until it was collected)
    local last
    last=$(cat "$tmp"/unit.*.end 2>/dev/null | sort -n | tail -n 1)
    echo "== unit (${#units[@]} binaries, $JOBS at a time): $((${last:-$unit_t0} - unit_t0)) s"
}

# pytest's junit XML -> "passed failed" on stdout.
junit_counts() {
    /usr/bin/python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(0, 1); sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
t = sum(int(s.get("tests", 0)) for s in suites)
f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
sk = sum(int(s.get("skipped", 0)) for s in suites)
print(t - f - sk, f)
PY
}

# pytest_pass NAME ARGS...: one pytest run, its counts added; exit 5 (nothing collected) is a
# failure unless NAME ends in "?" (a pass that may legitimately select nothing).
pytest_pass() {
    local name=$1 rc p f optional=0
    shift
    case $name in *\?) optional=1; name=${name%\?} ;; esac
    local t0
    t0=$(date +%s)
    SLUICED="$BUILD/sluiced" /usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=8 \
        --junitxml="$tmp/$name.xml" "$@"
    rc=$?
    stage "integration ($name)" "$t0"
    if [ $rc -eq 5 ] && [ $optional -eq 1 ]; then return; fi
    [ $rc -ne 0 ] && status=1
    read -r p f < <(junit_counts "$tmp/$name.xml")
    passed=$((passed + p))
    failed=$((failed + f))
    # pytest exit 5 = no tests collected: that is a failure of the suite, not a pass.
    if [ $rc -eq 5 ]; then failed=$((failed + 1)); fi
}

# The unit binaries (CPU) run beside the parallel integration pass (which mostly waits on its
# daemons); the files marked alone wait for both to finish.
units=()
unit_pid=
if [ "$what" = all ] || [ "$what" = unit ]; then
    unit_start
fi
if [ "$what" = unit ]; then
    unit_wait
fi

if [ "$what" = all ] || [ "$what" = integration ]; then
    echo "== integration: pytest tests/integration (SLUICED=$BUILD/sluiced)"
    if [ $# -gt 0 ]; then
        pytest_pass selected "$@"
    else
        pytest_pass parallel -n "$JOBS_PYTEST" --dist loadfile -m "not alone" tests/integration
        [ "$what" = all ] && unit_wait
        if [ "$JOBS_ALONE" -gt 1 ]; then
            pytest_pass "alone?" -n "$JOBS_ALONE" --dist loadfile -m alone tests/integration
        else
            pytest_pass "alone?" -m alone tests/integration
        fi
    fi
elif [ "$what" != unit ]; then
    echo "usage: tests/run.sh [unit|integration|all] [PYTEST_ARGS...]" >&2
    exit 2
fi

echo "$passed passed, $failed failed"
[ $status -eq 0 ] && [ $failed -eq 0 ]
