#!/bin/bash
# The cost of observing: allreduce on 4 daemons x 1 rank (loopback TCP), one build without the
# Prometheus endpoint and the link monitor (BASE, e.g. a build of 2a349f3) against this build
# with both on and Prometheus-like scrapes of every daemon each second, in alternating rounds
# of the same run. Prints busbw (1-64 MiB) and the median iteration of 8 B-4 KiB, each build's
# best of ROUNDS, and their ratio.
#   bench/observe_cost.sh BASE_BUILD [NEW_BUILD] [ROUNDS]
set -u
BASE=${1:?usage: bench/observe_cost.sh BASE_BUILD [NEW_BUILD] [ROUNDS]}
NEW=${2:-build}
ROUNDS=${3:-3}
TMP=$(mktemp -d /tmp/hccld-obs.XXXXXX)
PIDS=()
SCRAPER=
trap 'stop; rm -rf "$TMP"' EXIT

stop() {
    [ -n "$SCRAPER" ] && kill "$SCRAPER" 2>/dev/null && wait "$SCRAPER" 2>/dev/null
    SCRAPER=
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    PIDS=()
}

# start BUILD OBSERVED: 4 daemons; OBSERVED=1 adds --metrics-listen and a scraper.
start() {
    local build=$1 obs=$2 i socks=
    rm -rf "$TMP/d"
    for ((i = 0; i < 4; i++)); do
        mkdir -p "$TMP/d/$i"
        local extra=()
        [ "$obs" = 1 ] && extra=(--metrics-listen 127.0.0.1:0)
        "$build/bin/hccld" --socket "$TMP/d/$i/hccld.sock" --listen 127.0.0.1:0 --foreground \
            --log-level error "${extra[@]}" >>"$TMP/hccld.log" 2>&1 &
        PIDS+=("$!")
        socks+=${socks:+,}$TMP/d/$i/hccld.sock
    done
    for ((i = 0; i < 4; i++)); do
        for _ in $(seq 100); do [ -S "$TMP/d/$i/hccld-admin.sock" ] && break; sleep 0.1; done
    done
    SOCKS=$socks
    if [ "$obs" = 1 ]; then
        local urls=()
        for ((i = 0; i < 4; i++)); do
            urls+=("http://$("$build/bin/hccld-ctl" --admin-socket "$TMP/d/$i/hccld-admin.sock" \
                --json status | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["metrics_addr"])')/metrics")
        done
        (while :; do
            for u in "${urls[@]}"; do /usr/bin/python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1]).read()" "$u" >/dev/null 2>&1; done
            sleep 1
        done) &
        SCRAPER=$!
    fi
}

# perf BUILD ARGS...: hccl_perf_test's rows "bytes ... busbw" as "bytes value" (column col).
perf() {
    local build=$1 col=$2
    shift 2
    "$build/bin/hccl-run" -n 4 --daemons "$SOCKS" -- "$build/bin/hccl_perf_test" -t allreduce "$@" \
        2>/dev/null | awk -v c="$col" '$1 ~ /^[0-9]+$/ && NF >= c {print $1, $c}'
}

declare -A BW LAT
for ((r = 1; r <= ROUNDS; r++)); do
    for who in base new; do
        if [ $who = base ]; then start "$BASE" 0; b=$BASE; else start "$NEW" 1; b=$NEW; fi
        while read -r bytes v; do
            k="$who $bytes"
            awk -v a="$v" -v o="${BW[$k]:-0}" 'BEGIN {exit !(a > o)}' && BW[$k]=$v
        done < <(perf "$b" 8 -b 1M -e 64M -f 4 -n 20 -w 5)
        while read -r bytes v; do
            k="$who $bytes"
            awk -v a="$v" -v o="${LAT[$k]:-1e18}" 'BEGIN {exit !(a < o)}' && LAT[$k]=$v
        done < <(perf "$b" 6 -b 8 -e 4K -f 8 -n 300 -w 30 -m)
        stop
    done
done
printf '%-10s %12s %12s %8s\n' bytes "base GB/s" "new GB/s" new/base
for bytes in 1048576 4194304 16777216 67108864; do
    printf '%-10s %12s %12s %8s\n' "$bytes" "${BW[base $bytes]:-?}" "${BW[new $bytes]:-?}" \
        "$(awk -v a="${BW[new $bytes]:-0}" -v b="${BW[base $bytes]:-0}" 'BEGIN {printf b > 0 ? "%.2f" : "?", a / b}')"
done
printf '%-10s %12s %12s %8s\n' bytes "base us" "new us" new/base
for bytes in 8 64 512 4096; do
    printf '%-10s %12s %12s %8s\n' "$bytes" "${LAT[base $bytes]:-?}" "${LAT[new $bytes]:-?}" \
        "$(awk -v a="${LAT[new $bytes]:-0}" -v b="${LAT[base $bytes]:-0}" 'BEGIN {printf b > 0 ? "%.2f" : "?", a / b}')"
done
