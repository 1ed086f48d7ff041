#!/usr/bin/env bash
# Issue 23, goal 4, in one sitting: `hccl_perf_test -g 2 -z` (zero-copy allreduce, fp32 sum, 2
# ranks, 32 and 64 MiB) against the ceiling of the same work on this machine, bench/zc_ceiling.c:
# the cooperative path's kernel on two threads with nothing else around it. Rounds take turns
# (which goes first alternates). The table (bench/report.py's format) shows the medians of the
# rounds, busbw in GB/s: hcclD, our kernel on a whole op with plain and streaming stores and in
# 1 MiB pieces with their barriers, glibc's memcpy of the same bytes, the ceiling (the best whole
# op) and hcclD's share of it (`make bench-zc-ceiling`; figures in bench/RESULTS.md).
#
#   bench/zc_ceiling.sh [BUILD]      (BENCH_ROUNDS, default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_setup zc_ceiling "${1:-build}" hccld hccl_perf_test
ROUNDS=${BENCH_ROUNDS:-5}
[ -e "$BIN/../lib/libhccl.a" ] || die "$BIN/../lib/libhccl.a is missing: run make first"
# shellcheck disable=SC2046
cc -O2 -std=gnu11 -D_GNU_SOURCE -pthread -Icommon -Ilibclient/include -o "$OUT/zc_ceiling" \
    bench/zc_ceiling.c "$BIN/../lib/libhccl.a" $(pkg-config --libs libprotobuf-c jansson libsodium) -lm
bench_daemons 1
export HCCLD_SOCKET=$SOCKS

# Rows "round contender size_mib busbw".
hccld_z() {
    "$BIN/hccl_perf_test" -t allreduce -g 2 -z -d float -o sum -b 32M -e 64M -f 2 -n 20 -w 3 |
        awk -v r="$1" '!/^#/ && NF >= 12 { print r, "hcclD-z", $1 / 1048576, $8 }'
}
ceiling() {
    for mib in 32 64; do
        "$OUT/zc_ceiling" "$mib" 1024 1 |
            awk -v r="$1" -v m="$mib" '/^  / { print r, $1, m, $2 }'
    done
}

: >"$OUT/raw.txt"
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then
        hccld_z "$round" >>"$OUT/raw.txt"
        ceiling "$round" >>"$OUT/raw.txt"
    else
        ceiling "$round" >>"$OUT/raw.txt"
        hccld_z "$round" >>"$OUT/raw.txt"
    fi
    echo "zc_ceiling: round $round of $ROUNDS done" >&2
done

/usr/bin/python3 - "$OUT/raw.txt" <<'PY' | tee "$OUT/summary.txt"
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, who, size, gbs = line.split()
    d[(who, int(float(size)) << 20)].append(float(gbs))
cols = ["hcclD-z", "whole-plain", "whole-stream", "pieces-plain", "pieces-stream", "memcpy"]
print("== allreduce fp32 sum, 2 ranks, zero copy against this machine's ceiling: busbw GB/s ==")
print("%-10s" % "size" + "".join("%17s" % c for c in cols + ["ceiling", "hcclD-z/ceiling"]))
for size in sorted({s for _, s in d}):
    m = [statistics.median(d[(c, size)]) for c in cols]
    ceiling = max(m[1], m[2], m[5])  # the best whole op: ours plain or streaming, or memcpy
    print("%-10d" % size + "".join("%17.2f" % x for x in m + [ceiling, m[0] / ceiling]))
PY
