#!/bin/bash
# Runs every test suite (Check unit tests, multi-process integration tests against a private
# daemon, the Python package's unittest suites, then daemons in network namespaces) and ends with one summary line:
# "tests: N passed, N failed".
set -uo pipefail

BUILD=${1:-build}
SANITIZE=${2:-}
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
status=0
times=""
failed_suites=""

run() {
    local name=$1
    shift
    local t0=$SECONDS
    echo "=== $name"
    "$@" 2>&1 | tee "$LOG/$name.out"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || {
        echo "=== $name FAILED (exit $rc)"
        status=1
        failed_suites+=" $name"
    }
    times+=" $name $((SECONDS - t0))s"
}

run unit "$BUILD/tests/unit_tests"
run sim "$BUILD/tests/sim_all"
HCCLD_BIN="$BUILD/bin/hccld" run integration "$BUILD/tests/integration_tests"
# The Python package (python/hccl) on Debian's python3, against this build's libhccl.so. Not in
# instrumented builds: the sanitizers' runtimes would have to be preloaded into python3.
if [ -z "$SANITIZE" ]; then
    HCCLD_BIN="$BUILD/bin/hccld" HCCL_LIB="$BUILD/lib/libhccl.so.0" \
        run python /usr/bin/python3 tests/python/run.py
fi
# Daemons in separate network namespaces (needs root; prints SKIP without it, fails under CI).
HCCLD_BIN="$BUILD/bin/hccld" run netns "$BUILD/tests/netns_tests"
# The RDMA transport inside a QEMU guest with two soft-RoCE devices (tests/rdma-vm): its suite,
# then its throughput against ib_write_bw on the same pair; a guest that cannot boot fails. An
# instrumented build runs only the suite's host part (no RDMA device here): the guest emulates
# its CPU, and the sanitizers would multiply that.
if [ -z "$SANITIZE" ]; then
    run rdma ./tests/rdma/run.sh --bench "$BUILD/tests/bench_rdma" --daemons "$BUILD" \
        "$BUILD/tests/rdma_tests"
else
    run rdma "$BUILD/tests/rdma_tests"
fi
# Every libFuzzer target for FUZZ_SMOKE_SECS (15 s) on its seed corpus: no crash, leak or hang.
# They are built with ASan and UBSan whatever SANITIZE says, so an instrumented run skips them.
if [ -z "$SANITIZE" ]; then
    # shellcheck disable=SC2046
    run fuzz ./tests/fuzz/run.sh "$BUILD" "${FUZZ_SMOKE_SECS:-15}" smoke $(ls tests/fuzz/corpus)
fi

# Check prints "NN%: Checks: C, Failures: F, Errors: E" per runner (tests/python/run.py the
# same for its unittest suites); add them up.
read -r checks bad < <(grep -hoE 'Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$LOG"/*.out |
    awk -F'[:,] *' '{c += $2; b += $4 + $6} END {print c + 0, b + 0}')
[ "${checks:-0}" -gt 0 ] || status=1
# A suite that failed without a failed check (a script's own step, a crash before the summary)
# counts as one failure, so that the last line never says 0 failed when a suite did.
for name in $failed_suites; do
    grep -qE 'Checks: [0-9]+, Failures: [0-9]*[1-9]|Errors: [0-9]*[1-9]' "$LOG/$name.out" ||
        bad=$((bad + 1))
done
# The failed checks again, by name, where the last lines of a long log (all CI shows) find them:
# Check's "file:line:F:case:test:...", unittest's "FAIL: test (module.Class)" and the scripts'
# "name.sh: ... FAILED" lines.
grep -hE '^[^ ]+:[0-9]+:[EF]:|^(FAIL|ERROR): |^[a-z/_-]+\.sh: .*FAILED|^fuzz .*FAILED' "$LOG"/*.out | cut -c1-300 |
    head -20 | sed 's/^/failed: /'
[ -z "$failed_suites" ] || echo "failed suites:$failed_suites"
# Where the time went (the CI budget is the sum of three runs of this script).
echo "times:$times"
echo "tests: $((checks - bad)) passed, $bad failed"
exit $status
