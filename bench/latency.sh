#!/usr/bin/env bash
# Small-message allreduce latency across daemons against Open MPI over TCP (issue 23, goal 3),
# and allgather's (whose size is its result's, as in nccl-tests): N private daemons on loopback
# with 1 rank each (N in LAT_DAEMONS), fp32 (sum), 8 B - 4 KiB, the median iteration of the
# slowest rank, out of place, malloc'ed buffers. hcclD as it runs (small
# ops over lanes, libclient/lane.h), hcclD with HCCLD_DIRECT_MAX=0 (every op through the daemons)
# and Open MPI (ob1, btl self,tcp on lo) take turns for LAT_ROUNDS rounds; each figure is the
# median of its rounds. Prints us per size and contender, the ratios to Open MPI and the goal
# (`make bench-latency`). Then where an 8-byte allreduce on 2 daemons spends its time, from
# HCCL_PROF_ENABLE records on each path: the daemon's share (queued, level 0, level 1) and the
# rest, the hand-offs between rank and daemon.
#
#   bench/latency.sh [BUILD]      (default build)
#
# Knobs: LAT_DAEMONS ("2 4"), LAT_COLLS ("allreduce allgather"), LAT_ROUNDS (3), LAT_ITERS (500),
# LAT_WARMUP (50), LAT_MIN/LAT_MAX (8/4K, factor 8), LAT_STAT (median; p99: the slowest rank's
# 99th percentile iteration, hcclD's from hccl_latency_test, Open MPI's from mpi_allreduce -q
# 0.99; no breakdown then). Raw outputs go to BUILD/bench/latency/.
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
DAEMONS=${LAT_DAEMONS:-2 4}
COLLS=${LAT_COLLS:-allreduce allgather}
ROUNDS=${LAT_ROUNDS:-3}
ITERS=${LAT_ITERS:-500}
WARMUP=${LAT_WARMUP:-50}
MIN=${LAT_MIN:-8}
MAX=${LAT_MAX:-4K}
SRC=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
STAT=${LAT_STAT:-median}
case "$STAT" in median | p99) ;; *) echo "bench/latency: LAT_STAT is median or p99" >&2; exit 2 ;; esac
bench_setup latency "$BUILD" hccld hccl-run hccl_perf_test hccl_latency_test
for cmd in mpicc.openmpi mpirun.openmpi; do
    command -v "$cmd" >/dev/null || die "$cmd not found (HCCLD_DEPS_BENCH=1 scripts/install-deps.sh)"
done
MPI_BIN=$OUT/mpi_allreduce.openmpi
mpicc.openmpi -O2 -std=gnu11 -I"$SRC/common" -D_GNU_SOURCE -o "$MPI_BIN" "$SRC/bench/mpi_allreduce.c" \
    "$BUILD/lib/libhcclcommon.a" -lm

# hccld_run COLL N OUTFILE PERF_ARGS...: N fresh daemons, one rank on each, one sweep.
hccld_run() {
    local coll=$1 n=$2 out=$3
    shift 3
    bench_daemons "$n"
    local tool=hccl_perf_test stat=-m
    [ "$STAT" = median ] || tool=hccl_latency_test stat=
    # shellcheck disable=SC2086 # stat: a flag or nothing
    "$BIN/hccl-run" -n "$n" --daemons "$SOCKS" -- "$BIN/$tool" -t "$coll" -d float \
        -o sum -b "$MIN" -e "$MAX" -f 8 -w "$WARMUP" -n "$ITERS" $stat "$@" >"$out" 2>&1 ||
        echo "bench/latency: hcclD run failed, see $out" >&2
    bench_daemons_stop
}

mpi_run() {
    local coll=$1 n=$2 out=$3 stat=(-m)
    [ "$STAT" = median ] || stat=(-q 0.99)
    mpirun.openmpi --allow-run-as-root --oversubscribe -np "$n" --mca pml ob1 \
        --mca btl self,tcp --mca btl_tcp_if_include lo "$MPI_BIN" -t "$coll" -b "$MIN" -e "$MAX" -f 8 \
        -w "$WARMUP" -n "$ITERS" -l 0 "${stat[@]}" >"$out" 2>&1 ||
        echo "bench/latency: Open MPI run failed, see $out" >&2
}

for ((k = 1; k <= ROUNDS; k++)); do
    for n in $DAEMONS; do
        for c in $COLLS; do
            echo "bench/latency: round $k of $ROUNDS: $c, $n daemons x 1 rank"
            hccld_run "$c" "$n" "$OUT/hccld_${c}_n${n}_r$k.txt"
            HCCLD_DIRECT_MAX=0 hccld_run "$c" "$n" "$OUT/hcclddaemon_${c}_n${n}_r$k.txt"
            mpi_run "$c" "$n" "$OUT/openmpi_${c}_n${n}_r$k.txt"
        done
    done
done

# medians FILES...: "size median-time" lines over the rounds (hccl_perf_test: column 6, the out
# of place time; hccl_latency_test: column 8, p99; mpi_allreduce: column 2).
medians() {
    cat "$@" | awk '!/^#/ && $1 ~ /^[0-9]+$/ { print $1, (NF == 10 ? $8 : NF >= 8 ? $6 : $2) }' |
        sort -k1,1n -k2,2g |
        awk '{ v[$1] = v[$1] " " $2 } END { for (s in v) { n = split(v[s], a, " ");
              printf "%s %s\n", s, (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 } }' |
        sort -n
}
{
    for c in $COLLS; do for n in $DAEMONS; do
        # Goal 3 of issue 23 is allreduce's; allgather is measured against the same bounds.
        goal=$([ "$n" = 2 ] && echo 1.5 || echo 2.0)
        echo
        echo "== $c fp32 latency, $n daemons x 1 rank, loopback TCP:" \
            "$STAT iteration (us), median of $ROUNDS rounds; goal: hcclD/OpenMPI <= $goal =="
        printf "%10s %10s %13s %10s %14s %17s\n" size hcclD hcclD-daemon OpenMPI hcclD/OpenMPI \
            daemon/OpenMPI
        medians "$OUT"/hccld_"${c}"_n"${n}"_r*.txt >"$TMP/h"
        medians "$OUT"/hcclddaemon_"${c}"_n"${n}"_r*.txt >"$TMP/z"
        medians "$OUT"/openmpi_"${c}"_n"${n}"_r*.txt >"$TMP/m"
        awk -v g="$goal" 'FILENAME == ARGV[1] { h[$1] = $2; next }
            FILENAME == ARGV[2] { z[$1] = $2; next }
            ($1 in h) && ($1 in z) && $2 > 0 {
                printf "%10s %10.1f %13.1f %10.1f %14.2f %17.2f%s\n", $1, h[$1], z[$1], $2,
                    h[$1] / $2, z[$1] / $2, (h[$1] / $2 <= g ? "" : "  (over the goal)") }' \
            "$TMP/h" "$TMP/z" "$TMP/m"
    done; done
} | tee "$OUT/summary.txt"
[ "$STAT" = median ] || exit 0

# breakdown PATH [VAR=VALUE]: one profiled 8-byte run on 2 daemons; the median of each field.
breakdown() {
    local name=$1 var=${2:-}
    rm -f "$OUT/prof_$name".*.json
    (
        export HCCL_PROF_ENABLE=1 HCCL_PROF_FILE="$OUT/prof_$name.%r.json"
        [ -z "$var" ] || export "${var?}"
        MIN=8 MAX=8 hccld_run allreduce 2 "$OUT/prof_$name.txt"
    )
    /usr/bin/python3 - "$name" "$OUT"/prof_"$name".*.json <<'PY'
import json, statistics, sys
name, files = sys.argv[1], sys.argv[2:]
recs = [json.loads(l) for f in files for l in open(f) if '"allreduce"' in l]
recs = [r for r in recs if r.get("bytes") == 8]
if not recs:
    print(f"{name:>8}  (no records)")
    sys.exit(0)
m = {k: statistics.median(r[k] for r in recs) for k in ("time_us", "queued_us", "l0_us", "l1_us")}
rest = m["time_us"] - m["queued_us"] - m["l0_us"] - m["l1_us"]
print(f"{name:>8} {m['time_us']:9.1f} {m['queued_us']:9.1f} {m['l0_us']:9.1f} {m['l1_us']:9.1f}"
      f" {rest:9.1f}  {recs[0]['path']} ({len(recs)} records)")
PY
}
{
    echo
    echo "== where an 8-byte allreduce on 2 daemons x 1 rank spends its time (us, median of" \
        "HCCL_PROF_ENABLE records of both ranks) =="
    echo "    path      time    queued  level 0   level 1  hand-offs"
    breakdown lanes
    breakdown daemon HCCLD_DIRECT_MAX=0
    echo "(daemon path: queued, level 0 and level 1 are the daemon's; the hand-offs are the rest:"
    echo " the rank's post and the daemon's intake, the completion and the rank's wake-up."
    echo " Over lanes the whole op is level 1 between the ranks.)"
} | tee -a "$OUT/summary.txt"
