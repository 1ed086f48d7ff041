#!/usr/bin/env bash
# What the benches that start their own daemons share (sourced; NAME is the bench's name):
#   bench_setup NAME BUILD TOOL...   sets BIN, OUT (BUILD/bench/NAME, emptied of old outputs)
#                                    and TMP (removed at exit, with every pid in PIDS killed),
#                                    and dies unless every TOOL is built.
#   die MESSAGE...                   prints "bench/NAME: MESSAGE" and exits 1.

die() {
    echo "bench/$BENCH_NAME: $*" >&2
    exit 1
}

bench_cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}

bench_setup() {
    BENCH_NAME=$1
    BIN=$2/bin
    OUT=$2/bench/$1
    shift 2
    PIDS=()
    TMP=$(mktemp -d "/tmp/hccld-$BENCH_NAME.XXXXXX")
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
    for t in "$@"; do
        [ -x "$BIN/$t" ] || die "$BIN/$t is missing: run make first"
    done
    mkdir -p "$OUT"
    rm -f "$OUT"/*.txt "$OUT"/*.log
}
