#!/usr/bin/env bash
# Every figure of issue 23's table in one run: bench/run.sh (one node, 2 and 4 ranks, plain and
# zero-copy buffers, against Open MPI and MPICH), bench/zc_ceiling.sh (2 ranks, zero copy,
# against this machine's ceiling), bench/multinode.sh's bw part (4 daemons x 1
# rank on loopback TCP, 1-256 MiB, against Open MPI) and bench/latency.sh (8 B - 4 KiB on 2 and
# 4 daemons), then bench/report.py: each table with the goal beside every row, a line per goal,
# and a PNG per table (`make bench-all`).
#
#   bench/all.sh [BUILD]      (default build)
#
# The benches' own knobs pass through (BENCH_ITERS, BENCH_BW_MAX, LAT_ROUNDS, ...). Outputs go to
# BUILD/bench/all/: run.txt, zc_ceiling.txt, multinode.txt, latency.txt, report.txt and the
# plots.
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
SRC=$(cd "$(dirname "$0")" && pwd)
OUT=$BUILD/bench/all
mkdir -p "$OUT"
rm -f "$OUT"/*.txt "$OUT"/*.png "$OUT"/*.dat
command -v gnuplot >/dev/null || echo "bench/all: gnuplot not found: no plots (scripts/install-deps.sh)" >&2

echo "bench/all: one node (bench/run.sh)"
"$SRC/run.sh" "$BUILD" >"$OUT/run.txt" 2>&1 || echo "bench/all: bench/run.sh failed, see $OUT/run.txt" >&2
echo "bench/all: zero copy against this machine's ceiling (bench/zc_ceiling.sh)"
"$SRC/zc_ceiling.sh" "$BUILD" >"$OUT/zc_ceiling.txt" 2>&1 ||
    echo "bench/all: bench/zc_ceiling.sh failed, see $OUT/zc_ceiling.txt" >&2
echo "bench/all: 4 daemons x 1 rank (bench/multinode.sh, bw)"
BENCH_PARTS=bw "$SRC/multinode.sh" "$BUILD" >"$OUT/multinode.txt" 2>&1 ||
    echo "bench/all: bench/multinode.sh failed, see $OUT/multinode.txt" >&2
echo "bench/all: small allreduce across daemons (bench/latency.sh)"
"$SRC/latency.sh" "$BUILD" >"$OUT/latency.txt" 2>&1 ||
    echo "bench/all: bench/latency.sh failed, see $OUT/latency.txt" >&2
{
    echo "# hcclD $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?') on $(uname -n)," \
        "$(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
    /usr/bin/python3 "$SRC/report.py" "$OUT" "$OUT/run.txt" "$OUT/zc_ceiling.txt" "$OUT/multinode.txt" \
        "$OUT/latency.txt"
} | tee "$OUT/report.txt"
