#!/bin/bash
# Runs libFuzzer targets one after the other (the machine's cores stay free for the rest),
# each for a bounded time from its seeds in tests/fuzz/corpus/NAME, and prints one line per
# target. A crash, leak, timeout or out-of-memory fails the run; the input that caused it is
# kept in BUILD/fuzz/artifacts/ and the end of the fuzzer's log is shown.
#   tests/fuzz/run.sh BUILD SECONDS smoke|keep TARGET...
# smoke: new inputs go to a temporary copy of the seeds, removed at the end.
# keep:  new inputs are kept in BUILD/fuzz/corpus/NAME for the next run.
set -uo pipefail

build=$1 secs=$2 mode=$3
shift 3
here=$(dirname "$0")
fuzz="$build/fuzz"
tmp=$(mktemp -d /tmp/hccld-fuzz.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$fuzz/artifacts"
status=0

final_stat() {
    sed -n "s/^stat::$1: *//p" "$2" | tail -n 1
}

for t in "$@"; do
    corpus="$tmp/corpus-$t"
    [ "$mode" = keep ] && corpus="$fuzz/corpus/$t"
    mkdir -p "$corpus"
    cp -- "$here/corpus/$t"/* "$corpus/"
    opts=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -close_fd_mask=2 -artifact_prefix="$fuzz/artifacts/$t-")
    [ -f "$here/dict/$t.dict" ] && opts+=(-dict="$here/dict/$t.dict")
    log="$tmp/$t.log"
    "$fuzz/fuzz_$t" "${opts[@]}" "$corpus" >"$log" 2>&1
    rc=$?
    cov=$(sed -n 's/^#[0-9]*[[:space:]]*DONE[[:space:]]*cov: \([0-9]*\).*/\1/p' "$log" | tail -n 1)
    result=ok
    if [ "$rc" -ne 0 ]; then
        result="FAILED (exit $rc, see $fuzz/artifacts/)"
        status=1
    fi
    printf 'fuzz %-10s %10s execs %7s exec/s  cov %-5s new %-4s %s\n' "$t" \
        "$(final_stat number_of_executed_units "$log")" "$(final_stat average_exec_per_sec "$log")" \
        "${cov:-?}" "$(final_stat new_units_added "$log")" "$result"
    [ "$rc" -eq 0 ] || tail -n 40 "$log"
done
exit $status
