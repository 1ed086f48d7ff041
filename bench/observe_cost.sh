#!/bin/bash
# The cost of observing: allreduce on 4 daemons x 1 rank (loopback TCP), in alternating rounds
# of one run: base, a build without the Prometheus endpoint and the link monitor (BASE, e.g. a
# build of 2a349f3); bare, this build with the link monitor off (HCCLD_LINK_CHECK_MS=0) and no
# endpoint; new, this build with both on and a Prometheus-like scrape of every daemon each
# second. Prints busbw (1-64 MiB) and the median iteration of 8 B-4 KiB, each contender's best
# of ROUNDS, and the ratios to base.
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

# start BUILD OBSERVED: 4 daemons; OBSERVED=1 adds --metrics-listen and a scraper, 0 turns
# the link monitor off (a build without it ignores that).
start() {
    local build=$1 obs=$2 i socks= check=
    [ "$obs" = 0 ] && check=0
    rm -rf "$TMP/d"
    for ((i = 0; i < 4; i++)); do
        mkdir -p "$TMP/d/$i"
        local extra=()
        [ "$obs" = 1 ] && extra=(--metrics-listen 127.0.0.1:0)
        HCCLD_LINK_CHECK_MS=${check:-1000} "$build/bin/hccld" --socket "$TMP/d/$i/hccld.sock" --listen 127.0.0.1:0 --foreground \
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
        # One long-lived scraper, as Prometheus is: every endpoint once a second.
        /usr/bin/python3 -c '
import sys, time, urllib.request
while True:
    for u in sys.argv[1:]:
        try:
            urllib.request.urlopen(u, timeout=5).read()
        except OSError:
            pass
    time.sleep(1)' "${urls[@]}" &
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
    for who in base bare new; do
        case $who in
        base) start "$BASE" 0; b=$BASE ;;
        bare) start "$NEW" 0; b=$NEW ;;
        new) start "$NEW" 1; b=$NEW ;;
        esac
        while read -r bytes v; do
            k="$who $bytes"
            awk -v a="$v" -v o="${BW[$k]:-0}" 'BEGIN {exit !(a > o)}' && BW[$k]=$v
        done < <(perf "$b" 8 -b 1M -e 64M -f 4 -n 20 -w 5)
        while read -r bytes v; do
            k="$who $bytes"
            awk -v a="$v" -v o="${LAT[$k]:-1e18}" 'BEGIN {exit !(a < o)}' && LAT[$k]=$v
        done < <(perf "$b" 6 -b 8 -e 4K -f 8 -n 1000 -w 100 -m)
        stop
    done
done
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else printf "?"}'
}
# table ARRAY UNIT SIZES...: one row per size, the three builds and the two ratios.
table() {
    local -n t=$1
    local unit=$2 bytes
    shift 2
    printf '%-10s %10s %10s %10s %10s %10s\n' bytes "base $unit" "bare $unit" "new $unit" \
        bare/base new/base
    for bytes in "$@"; do
        printf '%-10s %10s %10s %10s %10s %10s\n' "$bytes" "${t[base $bytes]:-?}" \
            "${t[bare $bytes]:-?}" "${t[new $bytes]:-?}" \
            "$(ratio "${t[bare $bytes]:-0}" "${t[base $bytes]:-0}")" \
            "$(ratio "${t[new $bytes]:-0}" "${t[base $bytes]:-0}")"
    done
}
table BW GB/s 1048576 4194304 16777216 67108864
table LAT us 8 64 512 4096
