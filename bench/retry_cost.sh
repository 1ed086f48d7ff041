#!/usr/bin/env bash
# What op retry between daemons costs when nothing fails: allreduce fp32 sum on N daemons x 1
# rank (loopback TCP), out of place, with HCCL_OP_RETRY_ENABLE="L1:0" and "L1:1" taking turns,
# fresh daemons for every run. Prints the busbw of 1-64 MiB and the median iteration of
# 8 B-64 KiB (lanes off, so that small ops cross the daemons' connections too) and 256 KiB,
# each the median of ROUNDS runs, and on/off ratios; raw outputs in BUILD/bench/retry_cost/.
# With RATE (tc's units, e.g. 4gbit; needs root), each daemon runs in a network namespace of its
# own whose link is shaped to RATE (bench/netns.sh): a network slower than the CPU, as between
# real nodes, instead of loopback, where the copies op retry makes compete with TCP's own.
#   bench/retry_cost.sh [BUILD] [ROUNDS] [DAEMONS] [RATE]  (defaults: build 5 "2 4"; make bench-retry)
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_setup retry_cost "${1:-build}" hccld hccl-run hccl_perf_test
ROUNDS=${2:-5}
DAEMONS=${3:-2 4}
RATE=${4:-}
if [ -n "$RATE" ]; then
    BENCH_NETNS=hcr$$
    max=0
    for n in $DAEMONS; do [ "$n" -gt "$max" ] && max=$n; done
    netns_up "$BENCH_NETNS" "$max" "$RATE" || die "could not build the namespaces (root?)"
fi

# perf N RETRY OUT ARGS...: one hccl_perf_test run on N fresh daemons, its rows in OUT.
perf() {
    local n=$1 retry=$2 out=$3
    shift 3
    bench_daemons "$n"
    HCCL_OP_RETRY_ENABLE="L1:$retry" HCCLD_DIRECT_MAX=0 bench_run 600 "$BIN/hccl-run" -n "$n" \
        --daemons "$SOCKS" -- "$BIN/hccl_perf_test" -t allreduce "$@" >"$out" 2>&1 ||
        echo "bench/retry_cost: a run failed (see $out)" >&2
    bench_daemons_stop
}

for n in $DAEMONS; do
    for ((r = 1; r <= ROUNDS; r++)); do
        for retry in 0 1; do
            perf "$n" "$retry" "$OUT/bw-n$n-l$retry-r$r.txt" -b 1M -e 64M -f 4 -n 20 -w 5
            perf "$n" "$retry" "$OUT/lat-n$n-l$retry-r$r.txt" -b 8 -e 256K -f 8 -n 300 -w 30 -m
        done
    done
    echo "== $n daemons x 1 rank, median of $ROUNDS runs (retry off, on, on/off)"
    printf '%-10s %12s %12s %8s\n' bytes "off GB/s" "on GB/s" ratio
    # The ratio from the median times (busbw is printed with 2 decimals: 0.48 against 0.48).
    paste -d" " <(median 8 "$OUT"/bw-n"$n"-l0-r*.txt) <(median 8 "$OUT"/bw-n"$n"-l1-r*.txt) \
        <(median 6 "$OUT"/bw-n"$n"-l0-r*.txt) <(median 6 "$OUT"/bw-n"$n"-l1-r*.txt) |
        awk '{printf "%-10s %12s %12s %8.3f\n", $1, $2, $4, ($8 > 0 ? $6 / $8 : 0)}'
    printf '%-10s %12s %12s %8s\n' bytes "off us" "on us" ratio
    paste -d" " <(median 6 "$OUT"/lat-n"$n"-l0-r*.txt) <(median 6 "$OUT"/lat-n"$n"-l1-r*.txt) |
        awk '{printf "%-10s %12s %12s %8.3f\n", $1, $2, $4, ($2 > 0 ? $4 / $2 : 0)}'
done
