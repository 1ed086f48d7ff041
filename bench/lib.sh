#!/usr/bin/env bash
# What the benches that start their own daemons share (sourced; NAME is the bench's name):
#   bench_setup NAME BUILD TOOL...   sets BIN, OUT (BUILD/bench/NAME, emptied of old outputs)
#                                    and TMP (removed at exit, with every pid in PIDS killed),
#                                    and dies unless every TOOL is built.
#   bench_daemons N [HCCLD_ARG...]   starts N fresh daemons (TMP/dI/s, listening on loopback,
#                                    logs in OUT/hccldI.log), waits for their sockets, and sets
#                                    SOCKS (comma-separated) and DAEMON_PIDS; dies if one fails.
#                                    With BENCH_NETNS=PREFIX, daemon I listens on node I+1 of
#                                    netns_up PREFIX (bench/netns.sh) instead.
#   bench_daemons_stop               stops them.
#   bench_run SECS CMD...            runs CMD, killed after SECS, as a job that the exit kills too
#                                    (timeout leads a process group of its own, which the bench's
#                                    Ctrl-C does not reach); returns its status.
#   die MESSAGE...                   prints "bench/NAME: MESSAGE" and exits 1.
#   median COL FILE...               each size's median of column COL over hccl_perf_test
#                                    outputs, "size value" lines.

# shellcheck source=bench/netns.sh
. "$(dirname "${BASH_SOURCE[0]}")/netns.sh"

die() {
    echo "bench/$BENCH_NAME: $*" >&2
    exit 1
}

bench_cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
    if [ -n "${BENCH_NETNS:-}" ]; then netns_down "$BENCH_NETNS"; fi
}

bench_setup() {
    BENCH_NAME=$1
    BIN=$2/bin
    OUT=$2/bench/$1
    shift 2
    PIDS=()
    TMP=$(mktemp -d "/tmp/hccld-$BENCH_NAME.XXXXXX")
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
    for t in "$@"; do
        [ -x "$BIN/$t" ] || die "$BIN/$t is missing: run make first"
    done
    mkdir -p "$OUT"
    rm -f "$OUT"/*.txt "$OUT"/*.log
}

bench_daemons() {
    local n=$1 i ns=${BENCH_NETNS:-}
    shift
    SOCKS=""
    DAEMON_PIDS=()
    for ((i = 0; i < n; i++)); do
        rm -rf "$TMP/d$i"
        mkdir -p "$TMP/d$i"
        netns_exec "$ns" $((i + 1)) "$BIN/hccld" --socket "$TMP/d$i/s" \
            --listen "$(netns_addr "$ns" $((i + 1))):0" --foreground --log-level warn "$@" \
            >>"$OUT/hccld$i.log" 2>&1 &
        DAEMON_PIDS+=($!)
        PIDS+=($!)
        SOCKS+=${SOCKS:+,}$TMP/d$i/s
    done
    for ((i = 0; i < n; i++)); do
        for _ in $(seq 100); do [ -S "$TMP/d$i/s" ] && break; sleep 0.1; done
        [ -S "$TMP/d$i/s" ] || die "daemon $i did not start (see $OUT/hccld$i.log)"
    done
}

bench_run() {
    local secs=$1 pid
    shift
    timeout "$secs" "$@" &
    pid=$!
    PIDS+=("$pid")
    wait "$pid"
}

bench_daemons_stop() {
    kill "${DAEMON_PIDS[@]}" 2>/dev/null || true
    wait "${DAEMON_PIDS[@]}" 2>/dev/null || true
    DAEMON_PIDS=()
}

# median COL FILE...: each size's median of column COL over the files, "size value" lines.
median() {
    local col=$1
    shift
    awk -v c="$col" '$1 ~ /^[0-9]+$/ && NF >= c {print $1, $c}' "$@" | sort -k1,1n -k2,2g |
        awk '{s[NR] = $1; v[NR] = $2} END {
            for (i = 1; i <= NR; i = j) {
                for (j = i; j <= NR && s[j] == s[i]; j++) {}
                print s[i], v[i + int((j - i - 1) / 2)]
            } }'
}
