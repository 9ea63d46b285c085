#!/usr/bin/env bash
# run.sh - run the unit tests (Check) and the integration tests (pytest against the real
# sluiced) and end with one summary line "N passed, N failed".
# Usage: BUILD=build tests/run.sh [unit|integration|all]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
what=${1:-all}
passed=0
failed=0
status=0
# Sanitizer builds: any report fails the run (and leaks count, at exit of each process).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [ "$what" = all ] || [ "$what" = unit ]; then
    for t in "$BUILD"/tests/test_*; do
        [ -x "$t" ] || continue
        echo "== unit: $(basename "$t")"
        out=$(CK_DEFAULT_TIMEOUT=60 "$t" 2>&1)
        rc=$?
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
        if [ $rc -ne 0 ]; then
            status=1
            [ -z "$line" ] && failed=$((failed + 1))
        fi
    done
fi

if [ "$what" = all ] || [ "$what" = integration ]; then
    echo "== integration: pytest tests/integration (SLUICED=$BUILD/sluiced)"
    xml=$(mktemp)
    SLUICED="$BUILD/sluiced" /usr/bin/python3 -m pytest -q -p no:cacheprovider \
        --junitxml="$xml" tests/integration
    rc=$?
    if [ $rc -ne 0 ]; then status=1; fi
    read -r p f < <(/usr/bin/python3 - "$xml" <<'PY'
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
)
    rm -f "$xml"
    passed=$((passed + p))
    failed=$((failed + f))
    # pytest exit 5 = no tests collected: that is a failure of the suite, not a pass.
    if [ $rc -eq 5 ]; then failed=$((failed + 1)); fi
fi

echo "$passed passed, $failed failed"
[ $status -eq 0 ] && [ $failed -eq 0 ]
