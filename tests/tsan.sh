#!/bin/bash
# ThreadSanitizer run sized for CI (8 to 13 minutes on 2 shared cores): the unit suites, then
# each integration suite against its own TSan daemon, one after the other. Every process (test
# runner, forked ranks, daemons) writes its reports to a file of its own, so that a race in a
# daemon is seen even though nothing reads its exit status; any report, or any failed test,
# fails the run. HCCLD_TEST_QUICK=1 makes the collectives and multinode suites run a sample
# of their matrices (the full ones take hours under TSan).
#   make SANITIZE=thread BUILD=build/tsan -j2 all build/tsan/tests/integration_tests \
#       build/tsan/tests/unit_tests
#   tests/tsan.sh build/tsan [SUITE...]
# SUITE: unit or an integration suite (tests/integration/suites.h); default: the list below.
# soak is left out: it finds no more races here, and its check that the daemons' RSS stays
# flat fails under TSan, whose own memory grows with the run.
# Known false positives are suppressed in tests/tsan.supp; the reports are kept in
# $TSAN_KEEP (a directory) if it is set.
set -uo pipefail

build=${1:?usage: tests/tsan.sh BUILD [SUITE...]}
shift
suites=("$@")
[ ${#suites[@]} -gt 0 ] ||
    suites=(unit colls p2p api config hostile bootstrap multinode determinism service qos prof faults
            faultloop)
here=$(cd "$(dirname "$0")" && pwd)
supp="$here/tsan.supp"

for f in "$build/bin/hccld" "$build/tests/unit_tests" "$build/tests/integration_tests"; do
    if [ ! -x "$f" ]; then
        echo "tsan: $f missing (build with SANITIZE=thread BUILD=$build)" >&2
        exit 2
    fi
    if ! grep -qa __tsan_init "$f"; then
        echo "tsan: $f is not built with -fsanitize=thread" >&2
        exit 2
    fi
done

out=$(mktemp -d /tmp/hccld-tsan.XXXXXX)
# shellcheck disable=SC2317 # run by the trap
finish() {
    if [ -n "${TSAN_KEEP:-}" ]; then
        mkdir -p "$TSAN_KEEP" && cp -r "$out"/. "$TSAN_KEEP"/
    fi
    rm -rf "$out"
}
trap finish EXIT
# Instrumented code runs 5-15 times slower: Check's per-test timeouts stretch with it.
export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-3}
export HCCLD_TEST_QUICK=1
export HCCLD_BIN="$build/bin/hccld"
status=0
total_reports=0
t_all=$(date +%s)

for s in "${suites[@]}"; do
    mkdir -p "$out/$s"
    # exitcode=66 fails any process that reported and exits normally; the report files also
    # catch the ones that end by _exit() or SIGTERM (ranks, daemons).
    opts="suppressions=$supp:exitcode=66:halt_on_error=0:second_deadlock_stack=1"
    export TSAN_OPTIONS="$opts:log_path=$out/$s/tsan"
    t0=$(date +%s)
    if [ "$s" = unit ]; then
        "$build/tests/unit_tests" >"$out/$s.out" 2>&1
    else
        "$build/tests/integration_tests" "$s" >"$out/$s.out" 2>&1
    fi
    rc=$?
    secs=$(($(date +%s) - t0))
    # A report file per process that had something to say (a suppressed report writes none);
    # and, in case a process could not open its file, TSan's lines in the output itself.
    pat='(WARNING|ERROR|FATAL): ThreadSanitizer'
    reports=$(cat "$out/$s"/tsan.* "$out/$s.out" 2>/dev/null | grep -cE "$pat")
    files=$(find "$out/$s" -name 'tsan.*' | wc -l)
    summary=$(grep -hoE '[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$out/$s.out" |
        tail -n 1)
    echo "=== $s: ${secs} s, ${summary:-no Check summary}," \
        "TSan reports: $reports (in $files processes)"
    if [ "$rc" -ne 0 ] || [ -z "$summary" ]; then
        echo "=== $s FAILED (exit $rc); the end of its output:"
        tail -n 30 "$out/$s.out"
        status=1
    fi
    if [ "$files" -gt 0 ] || [ "$reports" -gt 0 ]; then
        status=1
        total_reports=$((total_reports + reports))
        for f in "$out/$s"/tsan.* "$out/$s.out"; do
            [ -f "$f" ] || continue
            if ! grep -qE "$pat" "$f"; then
                # Something else TSan had to say (e.g. a fatal error without a report).
                [ "$f" != "$out/$s.out" ] && echo "--- $f" && tail -n 20 "$f"
                continue
            fi
            echo "--- $f"
            # The two stacks and the summary of each report; the whole file with TSAN_KEEP.
            grep -E "$pat|^SUMMARY|^  (Write|Read|Previous|Atomic|Mutex)|^    #[0-3] " "$f"
        done
    fi
done

echo "tsan: ${#suites[@]} suites in $(($(date +%s) - t_all)) s, $total_reports reports," \
    "$([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
