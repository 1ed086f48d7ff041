#!/usr/bin/env bash
# Streaming stores for large cooperative outputs (HCCLD_STREAM_MIN), on and off, side by side:
# allreduce fp32 sum on one node, 2 and 4 ranks, malloc'ed and HcclMemAlloc'ed buffers,
# 1..64 MiB. Rounds take turns (which setting goes first alternates), and the table shows the
# median busbw of the rounds, out of place and in place. The tool writes its check pattern
# into the inputs (no -c 0): inputs that were never written are read nearly for free, which
# once made streaming look better than it is.
#
#   bench/stream.sh [BUILD]      (BENCH_ROUNDS, default 5)
set -euo pipefail

cd "$(dirname "$0")/.."
. bench/lib.sh
bench_setup stream "${1:-build}" hccld hccl_perf_test
ROUNDS=${BENCH_ROUNDS:-5}
bench_daemons 1
export HCCLD_SOCKET=$SOCKS

# one ROUND NRANKS BUFS SETTING: rows "round n bufs setting size oop_busbw inplace_busbw"
one() {
    local round=$1 n=$2 bufs=$3 setting=$4 z=
    [ "$bufs" = HcclMemAlloc ] && z=-z
    if [ "$setting" = off ]; then
        export HCCLD_STREAM_MIN=0
    else
        unset HCCLD_STREAM_MIN
    fi
    # shellcheck disable=SC2086
    "$BIN/hccl_perf_test" -t allreduce -g "$n" $z -b 1M -e 64M -f 2 -n 20 -w 5 |
        awk -v r="$round" -v n="$n" -v b="$bufs" -v s="$setting" \
            '!/^#/ && NF >= 12 { print r, n, b, s, $1, $8, $12 }'
}

: >"$OUT/raw.txt"
for round in $(seq "$ROUNDS"); do
    order="off on"
    [ $((round % 2)) -eq 0 ] && order="on off"
    for n in 2 4; do
        for bufs in malloc HcclMemAlloc; do
            for setting in $order; do
                one "$round" "$n" "$bufs" "$setting" >>"$OUT/raw.txt"
            done
        done
    done
    echo "stream: round $round of $ROUNDS done" >&2
done

/usr/bin/python3 - "$OUT/raw.txt" <<'EOF' | tee "$OUT/summary.md"
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, n, bufs, s, size, oop, ip = line.split()
    d[(n, bufs, s, int(size))].append((float(oop), float(ip)))
print("| ranks | buffers | size | off | on | on/off | in place off | in place on |")
print("|---|---|---|---|---|---|---|---|")
for (n, bufs, s, size) in sorted(d, key=lambda k: (k[0], k[1] != "malloc", k[3])):
    if s != "off":
        continue
    off, on = d[(n, bufs, "off", size)], d[(n, bufs, "on", size)]
    med = lambda v, i: statistics.median(x[i] for x in v)
    print(f"| {n} | {bufs} | {size >> 20} Mi | {med(off, 0):.2f} | {med(on, 0):.2f} | "
          f"{med(on, 0) / med(off, 0):.2f} | {med(off, 1):.2f} | {med(on, 1):.2f} |")
EOF
