#!/usr/bin/env bash
# Two jobs on the same 2 daemons (loopback), one HIGH and one LOW, continuous 16 MiB allreduce
# (issue 4's bench; `make bench-qos`). Prints, side by side:
#   - HIGH's busbw alone and with LOW running (goal: >= 90% of alone);
#   - LOW's rate alone uncapped, then capped below that, measured from the bytes the daemons
#     sent for the class (goal: within 10% of the cap);
#   - HIGH's 8 KiB allreduce latency alone and with LOW running (goal: <= 1.5x);
#   - both HIGH figures again with LOW uncapped, where only strict priority protects HIGH.
#
#   bench/qos.sh [BUILD]      (default build)
#
# The machine is shared and noisy: HIGH alone and HIGH with LOW (capped) alternate
# QOS_ROUNDS times, and each figure is the median of its runs, so that a load spike that
# lasts a while hits both sides alike.
#
# Knobs: QOS_LOW_CAP (the cap, default 1Gbit), QOS_SECS (seconds LOW's rate is measured over,
# default 10), QOS_ITERS (16 MiB iterations per HIGH run, 30), QOS_LAT_ITERS (8 KiB, 500),
# QOS_ROUNDS (alternations, 3), QOS_ZC (1: both jobs use HcclMemAlloc buffers, hccl_perf_test
# -z, instead of malloc ones staged through the arena), QOS_LOW_CHUNK (LOW's chunk_kib, its
# piece size and so the most a round of it moves; default the class's 256). Raw outputs go to
# BUILD/bench/qos/.
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
CAP=${QOS_LOW_CAP:-1Gbit}
SECS=${QOS_SECS:-10}
ITERS=${QOS_ITERS:-30}
ROUNDS=${QOS_ROUNDS:-3}
LAT_ITERS=${QOS_LAT_ITERS:-500}
ZC=${QOS_ZC:-}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_setup qos "$BUILD" hccld hccld-ctl hccl-run hccl_perf_test

cat >"$TMP/hccld.conf" <<EOF
[qos]
default = MEDIUM
[rules]
job.qos-high = HIGH
job.qos-low = LOW
EOF
if [ -n "${QOS_LOW_CHUNK:-}" ]; then
    printf '[class.LOW]\nchunk_kib = %s\n' "$QOS_LOW_CHUNK" >>"$TMP/hccld.conf"
fi

for i in 0 1; do
    mkdir -p "$TMP/d$i"
    "$BIN/hccld" --socket "$TMP/d$i/hccld.sock" --listen 127.0.0.1:0 --foreground \
        --config "$TMP/hccld.conf" --log-level warn >"$OUT/hccld$i.log" 2>&1 &
    PIDS+=($!)
done
for i in 0 1; do
    for _ in $(seq 100); do [ -S "$TMP/d$i/hccld.sock" ] && break; sleep 0.1; done
    [ -S "$TMP/d$i/hccld.sock" ] || die "daemon $i did not start (see $OUT/hccld$i.log)"
done
SOCKS="$TMP/d0/hccld.sock,$TMP/d1/hccld.sock"
ctl() { "$BIN/hccld-ctl" --admin-socket "$TMP/d0/hccld-admin.sock" "$@"; }

# job NAME ARGS...: one 2-rank job, one rank per daemon, of the given class.
job() {
    local name=$1
    shift
    HCCL_JOB_NAME=$name HCCL_CONNECT_TIMEOUT=30 "$BIN/hccl-run" -n 2 --daemons "$SOCKS" -- \
        "$BIN/hccl_perf_test" -t allreduce -d float -c 0 ${ZC:+-z} "$@"
}

# busbw (out of place) of the one size a run printed; the median over several run files.
busbw() { awk '!/^#/ && NF >= 8 { print $8; exit }' "$1"; }
lat() { awk '!/^#/ && NF >= 8 { print $6; exit }' "$1"; }
median() {
    local f=$1
    shift
    for x in "$@"; do "$f" "$x"; done | sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
        else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# low_field KEY: that figure of class LOW from daemon 0's qos list.
low_field() {
    ctl --json qos list | python3 -c 'import json,sys
print([c[sys.argv[1]] for c in json.load(sys.stdin)["classes"] if c["name"] == "LOW"][0])' "$1"
}

# LOW's rate over SECS seconds, from the bytes daemon 0 sent for the class (GB/s).
low_rate() {
    local a b
    a=$(low_field sent_bytes)
    sleep "$SECS"
    b=$(low_field sent_bytes)
    awk -v a="$a" -v b="$b" -v s="$SECS" 'BEGIN { printf "%.3f\n", (b - a) / s / 1e9 }'
}

low_start() {
    job qos-low -b 16M -e 16M -n 1000000 -w 1 >"$OUT/low_$1.txt" 2>&1 &
    LOW_PID=$!
    PIDS+=("$LOW_PID")
    sleep 3 # past its init and warm-up
}
low_stop() {
    pkill -TERM -P "$LOW_PID" 2>/dev/null || true
    kill "$LOW_PID" 2>/dev/null || true
    wait "$LOW_PID" 2>/dev/null || true
}

# high_runs SUFFIX: HIGH's 16 MiB busbw and 8 KiB latency runs, into high_SUFFIX and
# high_lat_SUFFIX.
high_runs() {
    job qos-high -b 16M -e 16M -n "$ITERS" -w 2 >"$OUT/high_$1.txt" 2>&1
    job qos-high -b 8K -e 8K -n "$LAT_ITERS" -w 50 >"$OUT/high_lat_$1.txt" 2>&1
}

echo "bench/qos: LOW alone, uncapped"
ctl qos set LOW --max-bw none >/dev/null
low_start uncapped
low_uncapped=$(low_rate)
echo "bench/qos: HIGH with LOW (uncapped: strict priority alone) running"
high_runs with_low_uncapped
low_stop

ctl qos set LOW --max-bw "$CAP" >/dev/null
for ((k = 1; k <= ROUNDS; k++)); do
    echo "bench/qos: round $k of $ROUNDS: HIGH alone"
    high_runs "alone_$k"
    echo "bench/qos: round $k of $ROUNDS: LOW capped at $CAP, alone"
    low_start "capped_$k"
    low_capped[k]=$(low_rate)
    echo "bench/qos: round $k of $ROUNDS: HIGH with LOW (capped) running"
    high_runs "with_low_$k"
    low_stop
done

cap_gbs=$(awk -v b="$(low_field max_bw_bps)" 'BEGIN { printf "%.3f\n", b / 8e9 }')
ha=$(median busbw "$OUT"/high_alone_*.txt)
hw=$(median busbw "$OUT"/high_with_low_[0-9]*.txt)
hu=$(busbw "$OUT/high_with_low_uncapped.txt")
lu=$(lat "$OUT/high_lat_with_low_uncapped.txt")
la=$(median lat "$OUT"/high_lat_alone_*.txt)
lw=$(median lat "$OUT"/high_lat_with_low_[0-9]*.txt)
low_capped_med=$(printf '%s\n' "${low_capped[@]}" | sort -g | awk '{ v[NR] = $1 } END {
    print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
# The median over rounds of each round's with-LOW / alone ratio (FIG: busbw or lat): a round's
# two runs are minutes apart at most, so a load that lasts shifts both.
round_ratio() {
    local k
    for ((k = 1; k <= ROUNDS; k++)); do
        awk -v a="$("$1" "$OUT/high_${2}alone_$k.txt")" -v b="$("$1" "$OUT/high_${2}with_low_$k.txt")" \
            'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3f\n", b / a }'
    done | sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) print "-"; else print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
per_round() {
    local k
    for ((k = 1; k <= ROUNDS; k++)); do
        printf '  round %d: HIGH busbw alone %s, with LOW %s; 8 KiB latency alone %s, with LOW %s; LOW capped %s GB/s\n' \
            "$k" "$(busbw "$OUT/high_alone_$k.txt")" "$(busbw "$OUT/high_with_low_$k.txt")" \
            "$(lat "$OUT/high_lat_alone_$k.txt")" "$(lat "$OUT/high_lat_with_low_$k.txt")" \
            "${low_capped[k]}"
    done
}
{
    echo
    echo "== 2 daemons x 1 rank per job, allreduce fp32 (loopback); medians of $ROUNDS rounds =="
    printf "%-44s %10s %10s %8s %s\n" "" alone "with LOW" ratio goal
    awk -v a="$ha" -v b="$hw" 'BEGIN { printf "%-44s %10s %10s %8.2f %s\n",
        "HIGH 16 MiB busbw (GB/s)", a, b, b / a, ">= 0.90" }'
    awk -v a="$la" -v b="$lw" 'BEGIN { printf "%-44s %10s %10s %8.2f %s\n",
        "HIGH 8 KiB latency (us)", a, b, b / a, "<= 1.50" }'
    printf "%-44s %10s %10s %8s %s\n" "  the same, median of the rounds' ratios" "" "" \
        "$(round_ratio busbw "")" "busbw"
    printf "%-44s %10s %10s %8s %s\n" "" "" "" "$(round_ratio lat lat_)" "latency"
    awk -v a="$ha" -v b="$hu" 'BEGIN { printf "%-44s %10s %10s %8.2f %s\n",
        "HIGH 16 MiB busbw, LOW uncapped", a, b, b / a, "(priority only)" }'
    awk -v a="$la" -v b="$lu" 'BEGIN { printf "%-44s %10s %10s %8.2f %s\n",
        "HIGH 8 KiB latency, LOW uncapped", a, b, b / a, "(priority only)" }'
    echo
    printf "%-44s %10s\n" "LOW alone, uncapped (GB/s sent per daemon)" "$low_uncapped"
    awk -v r="$low_capped_med" -v c="$cap_gbs" 'BEGIN { printf "%-44s %10.3f %10.3f %8.2f %s\n",
        "LOW capped: rate vs cap (GB/s)", r, c, r / c, "0.90..1.10" }'
    echo
    per_round
} | tee "$OUT/summary.txt"
