#!/usr/bin/env bash
# Small-message allreduce latency across daemons against Open MPI over TCP (issue 23, goal 3):
# N private daemons on loopback with 1 rank each (N in LAT_DAEMONS), fp32 sum, 8 B - 4 KiB, the
# median iteration of the slowest rank, out of place. hcclD with malloc'ed buffers, with
# HcclMemAlloc buffers (-z), and Open MPI (ob1, btl self,tcp on lo) take turns for LAT_ROUNDS
# rounds; each figure is the median of its rounds. Prints us per size and contender, each
# hcclD figure's ratio to Open MPI and the goal (`make bench-latency`).
#
#   bench/latency.sh [BUILD]      (default build)
#
# Knobs: LAT_DAEMONS ("2 4"), LAT_ROUNDS (3), LAT_ITERS (500), LAT_WARMUP (50), LAT_MIN/LAT_MAX
# (8/4K, factor 8). Raw outputs go to BUILD/bench/latency/.
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
DAEMONS=${LAT_DAEMONS:-2 4}
ROUNDS=${LAT_ROUNDS:-3}
ITERS=${LAT_ITERS:-500}
WARMUP=${LAT_WARMUP:-50}
MIN=${LAT_MIN:-8}
MAX=${LAT_MAX:-4K}
SRC=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_setup latency "$BUILD" hccld hccl-run hccl_perf_test
for cmd in mpicc.openmpi mpirun.openmpi; do
    command -v "$cmd" >/dev/null || die "$cmd not found (HCCLD_DEPS_BENCH=1 scripts/install-deps.sh)"
done
MPI_BIN=$OUT/mpi_allreduce.openmpi
mpicc.openmpi -O2 -std=gnu11 -I"$SRC/common" -D_GNU_SOURCE -o "$MPI_BIN" "$SRC/bench/mpi_allreduce.c" \
    "$SRC/common/env.c" "$SRC/common/log.c" -lm

# hccld_run N OUTFILE PERF_ARGS...: N fresh daemons, one rank on each, one sweep.
hccld_run() {
    local n=$1 out=$2 i pids=() socks=
    shift 2
    for ((i = 0; i < n; i++)); do
        rm -rf "$TMP/d$i"
        mkdir -p "$TMP/d$i"
        "$BIN/hccld" --socket "$TMP/d$i/s" --listen 127.0.0.1:0 --foreground --log-level warn \
            >>"$OUT/hccld$i.log" 2>&1 &
        pids+=($!)
        PIDS+=($!)
        socks+=${socks:+,}$TMP/d$i/s
    done
    for ((i = 0; i < n; i++)); do
        for _ in $(seq 100); do [ -S "$TMP/d$i/s" ] && break; sleep 0.1; done
    done
    "$BIN/hccl-run" -n "$n" --daemons "$socks" -- "$BIN/hccl_perf_test" -t allreduce -d float \
        -o sum -b "$MIN" -e "$MAX" -f 8 -w "$WARMUP" -n "$ITERS" -m "$@" >"$out" 2>&1 ||
        echo "bench/latency: hcclD run failed, see $out" >&2
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
}

mpi_run() {
    local n=$1 out=$2
    mpirun.openmpi --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 \
        --mca btl self,tcp --mca btl_tcp_if_include lo "$MPI_BIN" -b "$MIN" -e "$MAX" -f 8 \
        -w "$WARMUP" -n "$ITERS" -l 0 -m >"$out" 2>&1 ||
        echo "bench/latency: Open MPI run failed, see $out" >&2
}

for ((k = 1; k <= ROUNDS; k++)); do
    for n in $DAEMONS; do
        echo "bench/latency: round $k of $ROUNDS: $n daemons x 1 rank"
        hccld_run "$n" "$OUT/hccld_n${n}_r$k.txt"
        hccld_run "$n" "$OUT/hccldz_n${n}_r$k.txt" -z
        mpi_run "$n" "$OUT/openmpi_n${n}_r$k.txt"
    done
done

# medians FILES...: "size median-time" lines over the rounds (hccl_perf_test: column 6, the out
# of place time; mpi_allreduce: column 2).
medians() {
    cat "$@" | awk '!/^#/ && $1 ~ /^[0-9]+$/ { print $1, (NF >= 8 ? $6 : $2) }' |
        sort -k1,1n -k2,2g |
        awk '{ v[$1] = v[$1] " " $2 } END { for (s in v) { n = split(v[s], a, " ");
              printf "%s %s\n", s, (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 } }' |
        sort -n
}
{
    for n in $DAEMONS; do
        goal=$([ "$n" = 2 ] && echo 1.5 || echo 2.0)
        echo
        echo "== allreduce fp32 sum latency, $n daemons x 1 rank, loopback TCP:" \
            "median iteration (us), median of $ROUNDS rounds; goal: hcclD/OpenMPI <= $goal =="
        printf "%10s %10s %10s %10s %14s %14s\n" size hcclD hcclD-z OpenMPI hcclD/OpenMPI \
            hcclD-z/OpenMPI
        medians "$OUT"/hccld_n"${n}"_r*.txt >"$TMP/h"
        medians "$OUT"/hccldz_n"${n}"_r*.txt >"$TMP/z"
        medians "$OUT"/openmpi_n"${n}"_r*.txt >"$TMP/m"
        awk -v g="$goal" 'FILENAME == ARGV[1] { h[$1] = $2; next }
            FILENAME == ARGV[2] { z[$1] = $2; next }
            ($1 in h) && ($1 in z) && $2 > 0 {
                printf "%10s %10.1f %10.1f %10.1f %14.2f %14.2f%s\n", $1, h[$1], z[$1], $2,
                    h[$1] / $2, z[$1] / $2, (h[$1] / $2 <= g ? "" : "  (over the goal)") }' \
            "$TMP/h" "$TMP/z" "$TMP/m"
    done
} | tee "$OUT/summary.txt"
