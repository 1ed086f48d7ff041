#!/usr/bin/env bash
# torch.distributed through "hccl" against "gloo" on one node, side by side in one run:
# - all_reduce (fp32 sum) for N ranks (BENCH_TORCH_NP, default "2 4"), 8 B and 1..64 MiB: the
#   slowest rank's median iteration and busbw per size, hccl/gloo as a ratio of busbw, and
#   hccl_perf_test's plain-buffer busbw beside it;
# - a DDP training step (bench/torch_ddp.py: examples/ddp_overlap.py's model) on 2 ranks: the
#   slowest rank's median step, hccl's over gloo's, and the step with no communication;
# - send/recv ping-pong between 2 ranks (bench/torch_p2p.py), 8 B to 16 MiB: half the median
#   round trip, hccl's with the pong received by source and from any source.
# hccl's ranks talk to a private daemon started here. Outputs and summary.txt go to
# BUILD/bench/torch/.
#
#   bench/torch.sh [BUILD]      (default build; `make bench-torch` runs it)
#
# Environment [defaults]: BENCH_TORCH_NP ["2 4"], BENCH_TORCH_ITERS [20], BENCH_TORCH_SIZES
# [8,1048576,4194304,16777216,67108864], BENCH_TORCH_DDP_STEPS [10; 0 skips the DDP part],
# BENCH_TORCH_P2P_ITERS [200; 0 skips the send/recv part].
# About 5 minutes on a 2-core machine.
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

DDP_STEPS=${BENCH_TORCH_DDP_STEPS:-10}
P2P_ITERS=${BENCH_TORCH_P2P_ITERS:-200}
P2P_SIZES=8,65536,1048576,16777216

# run TAG NP SCRIPT ARGS...: NP ranks of bench/SCRIPT ARGS on loopback env://; rank r's output
# in OUT/TAG.npNP.rR.txt.
run() {
    local tag=$1 np=$2 script=$3 port=$((29600 + RANDOM % 1000)) pids=()
    shift 3
    for r in $(seq 0 $((np - 1))); do
        HCCLD_SOCKET=$TMP/hccld.sock MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port RANK=$r WORLD_SIZE=$np HCCL_LIB="$BIN/../lib/libhccl.so.0" \
            /usr/bin/python3 "bench/$script" "$@" \
            >"$OUT/$tag.np$np.r$r.txt" 2>>"$OUT/$tag.np$np.log" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        wait "$p" || die "$tag with $np ranks failed (see $OUT/$tag.np$np.log)"
    done
}

# perf NP: hccl_perf_test on plain buffers, the same sizes: "size busbw" lines.
perf() {
    HCCLD_SOCKET=$TMP/hccld.sock "$BIN/hccl_perf_test" -t allreduce -d float -o sum -g "$1" \
        -n "$ITERS" -w 3 -m -b 8 -e 64M -f 2 >"$OUT/perf.np$1.txt" 2>>"$OUT/perf.np$1.log" ||
        die "hccl_perf_test -g $1 failed"
    awk '$1 ~ /^[0-9]+$/ { print $1, $8 }' "$OUT/perf.np$1.txt" >"$OUT/perf.np$1.busbw"
}

for np in $NPS; do
    run gloo "$np" torch_allreduce.py gloo "$SIZES" "$ITERS"
    run hccl "$np" torch_allreduce.py hccl "$SIZES" "$ITERS"
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
    if [ "$P2P_ITERS" -gt 0 ]; then
        run p2p-gloo 2 torch_p2p.py gloo "$P2P_SIZES" "$P2P_ITERS"
        run p2p-hccl 2 torch_p2p.py hccl "$P2P_SIZES" "$P2P_ITERS"
        run p2p-hcclA 2 torch_p2p.py hccl "$P2P_SIZES" "$P2P_ITERS" any
        echo
        echo "# send/recv ping-pong, 2 ranks (bench/torch_p2p.py): half the median round trip (us);"
        echo "# hccl-any: the pong received from any source; ratios: over gloo's"
        printf '%10s %10s %10s %10s %10s %12s\n' bytes gloo_us hccl_us hccl_any_us hccl/gloo \
            any/hccl
        paste "$OUT/p2p-gloo.np2.r0.txt" "$OUT/p2p-hccl.np2.r0.txt" "$OUT/p2p-hcclA.np2.r0.txt" |
            while read -r s g _ h _ a; do
                printf '%10s %10s %10s %10s %10s %12s\n' "$s" "$g" "$h" "$a" \
                    "$(awk -v a="$h" -v b="$g" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')" \
                    "$(awk -v a="$a" -v b="$h" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')"
            done
    fi
    [ "$DDP_STEPS" -gt 0 ] || exit 0
    run ddp-gloo 2 torch_ddp.py gloo "$DDP_STEPS"
    run ddp-hccl 2 torch_ddp.py hccl "$DDP_STEPS"
    run ddp-hcclR 2 torch_ddp.py hccl-R "$DDP_STEPS"
    echo
    echo "# DDP step, 2 ranks (bench/torch_ddp.py): the slowest rank's median step (ms);"
    echo "# compute: the same step without DDP; hccl-R: the buckets registered"
    echo "# (hccl.torch_hooks.registered_allreduce_hook); ratios: step time over gloo's"
    printf '%10s %10s %10s %12s %12s %10s %10s\n' gloo_ms hccl_ms hcclR_ms gloo_comp_ms \
        hccl_comp_ms hccl/gloo hcclR/gloo
    paste "$OUT/ddp-gloo.np2.r0.txt" "$OUT/ddp-hccl.np2.r0.txt" "$OUT/ddp-hcclR.np2.r0.txt" |
        while read -r g gc h hc hr _; do
            printf '%10s %10s %10s %12s %12s %10s %10s\n' "$g" "$h" "$hr" "$gc" "$hc" \
                "$(awk -v a="$h" -v b="$g" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')" \
                "$(awk -v a="$hr" -v b="$g" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')"
        done
} | tee "$OUT/summary.txt"
