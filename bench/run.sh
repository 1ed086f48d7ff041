#!/usr/bin/env bash
# Compares hcclD's allreduce with Open MPI's and MPICH's on this node: fp32 sum, 2 and 4 ranks,
# 1 MiB..64 MiB, plain (malloc), registered (-R) and HcclMemAlloc (-z) buffers, bus bandwidth as
# nccl-tests defines it, plus 8-byte latency with 2 ranks. Every contender runs once per round,
# in turn, and each figure is the median of the rounds: on a shared machine one run of a
# contender can land in a slow minute that the next one escapes.
#
#   bench/run.sh [BUILD]      (default build; `make bench` runs it)
#
# Raw outputs go to BUILD/bench/results/. Iteration counts can be changed through the
# environment: BENCH_ROUNDS (3), BENCH_ITERS (20), BENCH_WARMUP (5), BENCH_LAT_ITERS (1000).
set -euo pipefail

BUILD=${1:-build}
ROUNDS=${BENCH_ROUNDS:-3}
ITERS=${BENCH_ITERS:-20}
WARMUP=${BENCH_WARMUP:-5}
LAT_ITERS=${BENCH_LAT_ITERS:-1000}
LAT_WARMUP=$((LAT_ITERS / 10))
MIN_BYTES=1M
MAX_BYTES=64M
RANKS="2 4"

SRC_DIR=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$BUILD" && pwd)
OUT=$BUILD/bench
RES=$OUT/results
PERF=$BUILD/bin/hccl_perf_test
HCCLD=$BUILD/bin/hccld
failures=0

die() {
    echo "bench: $*" >&2
    exit 1
}

for tool in "$PERF" "$HCCLD"; do
    [ -x "$tool" ] || die "$tool is missing: run make first"
done
for cmd in mpicc.openmpi mpirun.openmpi mpicc.mpich mpirun.mpich; do
    command -v "$cmd" >/dev/null ||
        die "$cmd not found (run HCCLD_DEPS_BENCH=1 scripts/install-deps.sh)"
done

mkdir -p "$OUT" "$RES"
rm -f "$RES"/*.txt "$RES"/*.err
echo "bench: compiling bench/mpi_allreduce.c for Open MPI and MPICH"
# Its env and log helpers come from the build's own common library, as hcclD's do.
COMMON=("-I$SRC_DIR/../common" "-D_GNU_SOURCE" "$BUILD/lib/libhcclcommon.a" -lm)
mpicc.openmpi -O2 -std=gnu11 -o "$OUT/mpi_allreduce.openmpi" "$SRC_DIR/mpi_allreduce.c" "${COMMON[@]}"
mpicc.mpich -O2 -std=gnu11 -o "$OUT/mpi_allreduce.mpich" "$SRC_DIR/mpi_allreduce.c" "${COMMON[@]}"

# A private daemon, so that the numbers do not depend on (or disturb) a system hccld.
TMP=$(mktemp -d /tmp/hccld-bench.XXXXXX)
SOCK=$TMP/hccld.sock
HCCLD_PID=
cleanup() {
    if [ -n "$HCCLD_PID" ] && kill -0 "$HCCLD_PID" 2>/dev/null; then
        kill "$HCCLD_PID"
        wait "$HCCLD_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$HCCLD" --socket "$SOCK" --listen 127.0.0.1:0 --foreground --log-level warn >"$RES/hccld.log" 2>&1 &
HCCLD_PID=$!
for _ in $(seq 100); do
    [ -S "$SOCK" ] && break
    kill -0 "$HCCLD_PID" 2>/dev/null || die "hccld exited at startup (see $RES/hccld.log)"
    sleep 0.1
done
[ -S "$SOCK" ] || die "hccld did not create $SOCK within 10 s"
export HCCLD_SOCKET=$SOCK

# run NAME CMD...: runs one benchmark, keeping stdout and stderr under results/ as
# NAME.rROUND.txt/.err. A failed run is reported and leaves its column empty; the other runs
# still go ahead.
run() {
    local name=$1
    shift
    local start=$SECONDS
    if "$@" >"$RES/$name.r$round.txt" 2>"$RES/$name.r$round.err"; then
        echo "bench: $name (round $round) done in $((SECONDS - start)) s"
    else
        echo "bench: $name (round $round) FAILED (exit $?), see $RES/$name.r$round.err" >&2
        failures=$((failures + 1))
    fi
}

# median NAME: NAME.txt from its rounds, with each size's row the one of median bandwidth
# (hccl_perf_test rows: column 8, mpi_allreduce rows: column 4); the lower middle of an even
# count.
median() {
    local name=$1
    cat "$RES/$name".r*.txt 2>/dev/null | awk '
        /^#/ || NF < 4 || $1 !~ /^[0-9]+$/ { next }
        {
            bw = (NF >= 8) ? $8 : $4
            n = ++cnt[$1]; row[$1, n] = $0; val[$1, n] = bw
            if (n == 1) sizes[++ns] = $1
        }
        END {
            for (i = 1; i <= ns; i++) {
                s = sizes[i]; n = cnt[s]
                for (a = 1; a <= n; a++)            # insertion sort of this size rows
                    for (b = a; b > 1 && val[s, b] + 0 < val[s, b - 1] + 0; b--) {
                        t = val[s, b]; val[s, b] = val[s, b - 1]; val[s, b - 1] = t
                        t = row[s, b]; row[s, b] = row[s, b - 1]; row[s, b - 1] = t
                    }
                print row[s, int((n + 1) / 2)]
            }
        }' >"$RES/$name.txt"
}

ompi() {
    local n=$1
    shift
    mpirun.openmpi --allow-run-as-root --oversubscribe -np "$n" --mca btl self,vader "$@"
}

mpich() {
    local n=$1
    shift
    mpirun.mpich -np "$n" "$@"
}

sweep="-b $MIN_BYTES -e $MAX_BYTES -f 2 -n $ITERS -w $WARMUP"
latency="-b 8 -e 8 -n $LAT_ITERS -w $LAT_WARMUP"
NAMES=()
for n in $RANKS; do
    NAMES+=("hccld-z_np$n" "hccld_np$n" "hccld-R_np$n" "openmpi_np$n" "mpich_np$n")
done
NAMES+=(hccld-z_lat hccld_lat openmpi_lat mpich_lat)
for ((round = 1; round <= ROUNDS; round++)); do
    for n in $RANKS; do
        # shellcheck disable=SC2086
        {
            run "hccld-z_np$n" "$PERF" -t allreduce -d float -o sum -g "$n" -z $sweep
            run "hccld_np$n" "$PERF" -t allreduce -d float -o sum -g "$n" $sweep
            run "hccld-R_np$n" "$PERF" -t allreduce -d float -o sum -g "$n" -R $sweep
            run "openmpi_np$n" ompi "$n" "$OUT/mpi_allreduce.openmpi" $sweep -l 0
            run "mpich_np$n" mpich "$n" "$OUT/mpi_allreduce.mpich" $sweep -l 0
        }
    done
    # shellcheck disable=SC2086
    {
        run "hccld-z_lat" "$PERF" -t allreduce -d float -o sum -g 2 -z $latency
        run "hccld_lat" "$PERF" -t allreduce -d float -o sum -g 2 $latency
        run "openmpi_lat" ompi 2 "$OUT/mpi_allreduce.openmpi" $latency -l 0
        run "mpich_lat" mpich 2 "$OUT/mpi_allreduce.mpich" $latency -l 0
    }
done
for name in "${NAMES[@]}"; do
    median "$name"
done

# extract COLUMN FILE: "COLUMN size busbw time_us" for each data row of one result file.
# hccl_perf_test rows: size count type redop root time algbw busbw ... (out-of-place first);
# mpi_allreduce rows: size time_us algbw busbw.
extract() {
    local col=$1 file=$2
    [ -s "$file" ] || return 0
    awk -v col="$col" '
        /^#/ || NF < 4 { next }
        NF >= 8 { print col, $1, $8, $6; next }
        { print col, $1, $4, $2 }' "$file"
}

ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'
}

print_table() {
    local n=$1
    echo
    echo "== allreduce fp32 sum, $n ranks: bus bandwidth (GB/s), out of place, median of $ROUNDS rounds =="
    printf "%10s %9s %9s %9s %9s %9s %12s %12s %12s\n" size hcclD-z hcclD-R hcclD OpenMPI MPICH \
        "z/bestMPI" "R/bestMPI" "hcclD/bestMPI"
    {
        extract 1 "$RES/hccld-z_np$n.txt"
        extract 2 "$RES/hccld_np$n.txt"
        extract 3 "$RES/openmpi_np$n.txt"
        extract 4 "$RES/mpich_np$n.txt"
        extract 5 "$RES/hccld-R_np$n.txt"
    } | awk '
        { bw[$1, $2] = $3; if (!($2 in seen)) { seen[$2] = 1; sizes[++ns] = $2 } }
        function get(c, s) { return ((c, s) in bw) ? bw[c, s] : "-" }
        function div(a, b) {
            return (a == "-" || b == "-" || b + 0 == 0) ? "-" : sprintf("%.2f", a / b)
        }
        END {
            for (i = 1; i <= ns; i++) {
                s = sizes[i]
                o = get(3, s); m = get(4, s)
                best = (o == "-") ? m : (m == "-" || o + 0 >= m + 0) ? o : m
                printf "%10s %9s %9s %9s %9s %9s %12s %12s %12s\n", s, get(1, s), get(5, s),
                    get(2, s), o, m, div(get(1, s), best), div(get(5, s), best),
                    div(get(2, s), best)
            }
        }' | sort -n
}

lat_of() {
    local v
    v=$(extract x "$1" | awk '$2 == 8 { print $4; exit }')
    echo "${v:--}"
}

print_latency() {
    local z h o m
    z=$(lat_of "$RES/hccld-z_lat.txt")
    h=$(lat_of "$RES/hccld_lat.txt")
    o=$(lat_of "$RES/openmpi_lat.txt")
    m=$(lat_of "$RES/mpich_lat.txt")
    echo
    echo "== allreduce 8 B latency, 2 ranks (us, $LAT_ITERS iterations, median of $ROUNDS rounds) =="
    printf "%9s %9s %9s %9s %14s %14s\n" hcclD-z hcclD OpenMPI MPICH "z/OpenMPI" "hcclD/OpenMPI"
    printf "%9s %9s %9s %9s %14s %14s\n" "$z" "$h" "$o" "$m" "$(ratio "$z" "$o")" \
        "$(ratio "$h" "$o")"
}

{
    for n in $RANKS; do
        print_table "$n"
    done
    print_latency
} | tee "$RES/summary.txt"

if [ "$failures" -ne 0 ]; then
    echo "bench: $failures run(s) failed; raw outputs in $RES" >&2
    exit 1
fi
echo "bench: raw outputs in $RES"
