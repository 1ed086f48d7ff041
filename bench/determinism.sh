#!/usr/bin/env bash
# What HCCL_DETERMINISTIC costs: allreduce fp32 sum on D loopback daemons x 1 rank, 8 B..64 MiB,
# the cost model on measured links (auto) against the same model on fixed figures
# (HCCL_DETERMINISTIC=true), both on one fresh set of daemons per round, in alternating order.
# Per size: the median over rounds of each mode's time (hccl_perf_test -m: the slowest rank's
# median iteration), det/auto, and the level-1 algorithms each mode ran (rank 0's profile).
#
#   bench/determinism.sh [BUILD]      (default build; `make bench-determinism` runs it)
#
# Environment [defaults]: BENCH_DET_DAEMONS [4], BENCH_DET_ROUNDS [5], BENCH_DET_ITERS [20],
# BENCH_DET_MAX [64M]. Raw outputs and summary.txt go to BUILD/bench/determinism/. About 1
# minutes on a 2-core machine. Needs python3.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_setup determinism "${1:-build}" hccld hccl-run hccl_perf_test
ND=${BENCH_DET_DAEMONS:-4}
ROUNDS=${BENCH_DET_ROUNDS:-5}
ITERS=${BENCH_DET_ITERS:-20}
MAX=${BENCH_DET_MAX:-64M}

# one MODE ROUND: a run of hccl_perf_test, its table in MODE.rROUND.txt, rank 0's profile
# in MODE.rROUND.prof.json.
one() {
    local det=false
    [ "$1" = det ] && det=true
    rm -f "$TMP"/prof.*.json
    HCCL_DETERMINISTIC=$det HCCL_PROF_ENABLE=1 HCCL_PROF_FILE="$TMP/prof.%r.json" \
        bench_run 600 "$BIN/hccl-run" -n "$ND" --daemons "$SOCKS" -- "$BIN/hccl_perf_test" \
        -t allreduce -d float -o sum -b 8 -e "$MAX" -f 4 -n "$ITERS" -w 3 -m \
        >"$OUT/$1.r$2.txt" 2>>"$OUT/$1.r$2.log" || die "$1 round $2 failed (see $OUT/$1.r$2.log)"
    cp "$TMP/prof.0.json" "$OUT/$1.r$2.prof.json"
}

for r in $(seq "$ROUNDS"); do
    bench_daemons "$ND"
    if [ $((r % 2)) = 1 ]; then one auto "$r"; one det "$r"; else one det "$r"; one auto "$r"; fi
    bench_daemons_stop
done

/usr/bin/python3 - "$OUT" "$ROUNDS" "$ND" >"$OUT/summary.txt" <<'EOF'
import json, statistics, sys
out, rounds, nd = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def table(path):
    t = {}
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit():
            t[int(f[0])] = float(f[5])
    return t

def algos(path):
    a = {}
    for line in open(path):
        o = json.loads(line)
        if o.get("op") == "allreduce" and o.get("algo") not in (None, "none"):
            a.setdefault(o["bytes"], set()).add(o["algo"])
    return a

res = {}
for mode in ("auto", "det"):
    times, used = {}, {}
    for r in range(1, rounds + 1):
        for size, t in table(f"{out}/{mode}.r{r}.txt").items():
            times.setdefault(size, []).append(t)
        for size, s in algos(f"{out}/{mode}.r{r}.prof.json").items():
            used.setdefault(size, set()).update(s)
    res[mode] = (times, used)
print(f"# allreduce fp32, {nd} daemons x 1 rank, median over {rounds} rounds of each round's "
      "median iteration (us)")
print(f"{'bytes':>10} {'auto_us':>10} {'det_us':>10} {'det/auto':>8}  auto ran / det ran")
for size in sorted(res["auto"][0]):
    a = statistics.median(res["auto"][0][size])
    d = statistics.median(res["det"][0].get(size, [float("nan")]))
    ua = ",".join(sorted(res["auto"][1].get(size, {"-"})))
    ud = ",".join(sorted(res["det"][1].get(size, {"-"})))
    print(f"{size:>10} {a:>10.1f} {d:>10.1f} {d / a:>8.2f}  {ua} / {ud}")
EOF
cat "$OUT/summary.txt"
