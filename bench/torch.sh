#!/usr/bin/env bash
# torch.distributed all_reduce (fp32 sum) through "hccl" against "gloo" on one node, side by side
# in one run, for N ranks (BENCH_TORCH_NP, default "2 4"), 8 B and 1..64 MiB: the slowest rank's
# median iteration and busbw per size, and hccl/gloo as a ratio of busbw. hccl's ranks talk to a
# private daemon started here. Outputs and summary.txt go to BUILD/bench/torch/.
#
#   bench/torch.sh [BUILD]      (default build; `make bench-torch` runs it)
#
# Environment [defaults]: BENCH_TORCH_NP ["2 4"], BENCH_TORCH_ITERS [20], BENCH_TORCH_SIZES
# [8,1048576,4194304,16777216,67108864]. About 3 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_setup torch "${1:-build}" hccld
NPS=${BENCH_TORCH_NP:-2 4}
ITERS=${BENCH_TORCH_ITERS:-20}
SIZES=${BENCH_TORCH_SIZES:-8,1048576,4194304,16777216,67108864}

"$BIN/hccld" --socket "$TMP/hccld.sock" --listen none --foreground 2>"$OUT/hccld.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -S "$TMP/hccld.sock" ] && break; sleep 0.05; done
[ -S "$TMP/hccld.sock" ] || die "hccld did not start"

# run BACKEND NP: NP ranks of bench/torch_allreduce.py on loopback env://.
run() {
    local port=$((29600 + RANDOM % 1000)) pids=()
    for r in $(seq 0 $(($2 - 1))); do
        HCCLD_SOCKET=$TMP/hccld.sock MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port RANK=$r WORLD_SIZE=$2 HCCL_LIB="$BIN/../lib/libhccl.so.0" \
            /usr/bin/python3 bench/torch_allreduce.py "$1" "$SIZES" "$ITERS" \
            >"$OUT/$1.np$2.r$r.txt" 2>>"$OUT/$1.np$2.log" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || die "$1 with $2 ranks failed (see $OUT/$1.np$2.log)"; done
}

# perf NP: hccl_perf_test on plain buffers, the same sizes: "size busbw" lines.
perf() {
    HCCLD_SOCKET=$TMP/hccld.sock "$BIN/hccl_perf_test" -t allreduce -d float -o sum -g "$1" \
        -n "$ITERS" -w 3 -m -b 8 -e 64M -f 2 >"$OUT/perf.np$1.txt" 2>>"$OUT/perf.np$1.log" ||
        die "hccl_perf_test -g $1 failed"
    awk '$1 ~ /^[0-9]+$/ { print $1, $8 }' "$OUT/perf.np$1.txt" >"$OUT/perf.np$1.busbw"
}

for np in $NPS; do
    run gloo "$np"
    run hccl "$np"
    perf "$np"
done
{
    echo "# torch.distributed all_reduce fp32 sum, one node: the slowest rank's median iteration;"
    echo "# hccl/gloo: gloo's time over hccl's; perf: hccl_perf_test -m on plain buffers (GB/s)"
    printf '%4s %10s %10s %10s %10s %10s %10s %10s %10s\n' np bytes gloo_us hccl_us gloo_GBps \
        hccl_GBps hccl/gloo perf_GBps hccl/perf
    for np in $NPS; do
        paste "$OUT/gloo.np$np.r0.txt" "$OUT/hccl.np$np.r0.txt" | while read -r s gu gb _ hu hb; do
            pb=$(awk -v s="$s" '$1 == s { print $2 }' "$OUT/perf.np$np.busbw")
            printf '%4s %10s %10s %10s %10s %10s %10s %10s %10s\n' "$np" "$s" "$gu" "$hu" "$gb" \
                "$hb" "$(awk -v a="$gu" -v b="$hu" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')" \
                "${pb:--}" "$(awk -v a="$hb" -v b="${pb:-0}" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')"
        done
    done
} | tee "$OUT/summary.txt"
