#!/usr/bin/env bash
# Striped data connections (HCCLD_TCP_NSOCKS) against one socket per pair: 2 private daemons
# on loopback, 1 rank each, allreduce fp32 sum, out of place; the same sizes with 1, 2 and 4
# sockets per data connection, the variants taking turns for STRIPES_ROUNDS rounds, each
# figure the median of its rounds. Prints busbw per size and variant and each variant's ratio
# to 1 socket (`make bench-stripes`).
#
#   bench/stripes.sh [BUILD]      (default build)
#
# Knobs: STRIPES_NSOCKS (variants, "1 2 4"), STRIPES_ROUNDS (5), STRIPES_MIN/MAX (256K/64M,
# factor 4), STRIPES_ITERS (10), HCCL_MULTI_QP_THRESHOLD (KiB per part at least, 512).
# Raw outputs go to BUILD/bench/stripes/.
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
VARIANTS=${STRIPES_NSOCKS:-1 2 4}
ROUNDS=${STRIPES_ROUNDS:-5}
MIN=${STRIPES_MIN:-256K}
MAX=${STRIPES_MAX:-64M}
ITERS=${STRIPES_ITERS:-10}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_setup stripes "$BUILD" hccld hccl-run hccl_perf_test

# run NSOCKS ROUND: fresh daemons with that many sockets per data connection, one sweep.
run() {
    local n=$1 k=$2 i pids=()
    for i in 0 1; do
        rm -rf "$TMP/d$i"
        mkdir -p "$TMP/d$i"
        HCCLD_TCP_NSOCKS=$n "$BIN/hccld" --socket "$TMP/d$i/s" --listen 127.0.0.1:0 --foreground \
            --log-level warn >>"$OUT/hccld$i.log" 2>&1 &
        pids+=($!)
        PIDS+=($!)
    done
    for i in 0 1; do
        for _ in $(seq 100); do [ -S "$TMP/d$i/s" ] && break; sleep 0.1; done
    done
    "$BIN/hccl-run" -n 2 --daemons "$TMP/d0/s,$TMP/d1/s" -- "$BIN/hccl_perf_test" -t allreduce \
        -d float -c 0 -b "$MIN" -e "$MAX" -f 4 -w 1 -n "$ITERS" >"$OUT/n${n}_r$k.txt" 2>&1
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
}

for ((k = 1; k <= ROUNDS; k++)); do
    for n in $VARIANTS; do
        echo "bench/stripes: round $k of $ROUNDS: $n socket(s) per data connection"
        run "$n" "$k"
    done
done

# The median busbw (GB/s) per size of one variant, as "size value" lines.
medians() {
    cat "$OUT"/n"$1"_r*.txt | awk '!/^#/ && NF >= 8 { print $1, $8 }' | sort -k1,1n -k2,2g |
        awk '{ v[$1] = v[$1] " " $2 } END { for (s in v) { n = split(v[s], a, " ");
              printf "%s %s\n", s, (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 } }' |
        sort -n
}
{
    echo
    echo "== 2 daemons x 1 rank on loopback, allreduce fp32, busbw GB/s (median of $ROUNDS) =="
    printf "%12s" size
    for n in $VARIANTS; do printf " %10s" "${n} sock"; done
    for n in $VARIANTS; do [ "$n" = 1 ] || printf " %10s" "${n}/1"; done
    echo
    for n in $VARIANTS; do medians "$n" >"$TMP/m$n"; done
    first=$(echo "$VARIANTS" | awk '{ print $1 }')
    while read -r size _; do
        printf "%12s" "$size"
        for n in $VARIANTS; do printf " %10s" "$(awk -v s="$size" '$1 == s { print $2 }' "$TMP/m$n")"; done
        base=$(awk -v s="$size" '$1 == s { print $2 }' "$TMP/m1" 2>/dev/null || true)
        for n in $VARIANTS; do
            [ "$n" = 1 ] && continue
            v=$(awk -v s="$size" '$1 == s { print $2 }' "$TMP/m$n")
            awk -v a="$v" -v b="$base" 'BEGIN { if (b + 0 > 0) printf " %10.2f", a / b; else printf " %10s", "-" }'
        done
        echo
    done <"$TMP/m$first"
} | tee "$OUT/summary.txt"
