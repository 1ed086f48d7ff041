#!/usr/bin/env bash
# What being ready for a restart of the daemon costs when nothing fails: allreduce fp32 sum, 2
# ranks on one daemon, cooperative (the default) and through the daemon (HCCL_L0_MODE=daemon),
# with HCCL_OP_RETRY_ENABLE="L0:0" and "L0:1" taking turns (L0:1 starts the thread that watches
# the daemon, and every posted piece is kept for a new daemon either way), fresh daemons for
# every run; with BASE, a build from before the restart work runs beside them (retry off).
# Prints the median iteration of 8 B-256 KiB and the busbw of 1-64 MiB, each the median of
# ROUNDS runs, and the ratios on/off and off/base; raw outputs in BUILD/bench/restart_cost/.
#   bench/restart_cost.sh [BUILD] [ROUNDS] [BASE]       (defaults: build 5, no base)
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_setup restart_cost "${1:-build}" hccld hccl-run hccl_perf_test
ROUNDS=${2:-5}
BASE=${3:-}
[ -z "$BASE" ] || [ -x "$BASE/bin/hccl_perf_test" ] || die "$BASE/bin/hccl_perf_test is missing"

# perf BIN MODE RETRY OUT ARGS...: one hccl_perf_test run of BIN's build on a fresh daemon.
perf() {
    local bin=$1 mode=$2 retry=$3 out=$4 keep=$BIN
    shift 4
    BIN=$bin
    bench_daemons 1
    HCCL_L0_MODE=$mode HCCL_OP_RETRY_ENABLE="L0:$retry" bench_run 600 "$bin/hccl-run" -n 2 \
        --daemons "$SOCKS" -- "$bin/hccl_perf_test" -t allreduce "$@" >"$out" 2>&1 ||
        echo "bench/restart_cost: a run failed (see $out)" >&2
    bench_daemons_stop
    BIN=$keep
}

# table COL UNIT MODE KIND: per size the base (if any), off and on medians, on/off, off/base.
table() {
    local col=$1 unit=$2 mode=$3 kind=$4
    median "$col" "$OUT/$kind-$mode"-l0-r*.txt >"$TMP/off"
    median "$col" "$OUT/$kind-$mode"-l1-r*.txt >"$TMP/on"
    if [ -n "$BASE" ]; then median "$col" "$OUT/$kind-$mode"-base-r*.txt; fi >"$TMP/base"
    printf '%-10s %12s %12s %12s %8s %9s\n' bytes "base $unit" "off $unit" "on $unit" on/off \
        off/base
    awk 'FILENAME ~ /base$/ {b[$1] = $2; next} FILENAME ~ /off$/ {o[$1] = $2; next}
         {base = ($1 in b) ? b[$1] : "-"; off = o[$1]
          printf "%-10s %12s %12s %12s %8.3f %9s\n", $1, base, off, $2,
                 (off > 0 ? $2 / off : 0), (base != "-" && base > 0 ? sprintf("%.3f", off / base) : "-")}' \
        "$TMP/base" "$TMP/off" "$TMP/on"
}

for mode in coop daemon; do
    for ((r = 1; r <= ROUNDS; r++)); do
        for retry in 0 1 base; do
            [ "$retry" != base ] || [ -n "$BASE" ] || continue
            bin=$BIN tag=l$retry rt=$retry
            [ "$retry" != base ] || { bin=$BASE/bin tag=base rt=0; }
            perf "$bin" "$mode" "$rt" "$OUT/bw-$mode-$tag-r$r.txt" -b 1M -e 64M -f 4 -n 20 -w 5
            perf "$bin" "$mode" "$rt" "$OUT/lat-$mode-$tag-r$r.txt" -b 8 -e 256K -f 8 -n 300 \
                -w 30 -m
        done
    done
    echo "== 2 ranks on 1 daemon, HCCL_L0_MODE=$mode, median of $ROUNDS runs"
    table 6 us "$mode" lat
    table 8 GB/s "$mode" bw
done
